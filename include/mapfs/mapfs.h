/* mapfs public C API.
 *
 * Plain C, usable from C and C++. Calls take the mount handle first and
 * otherwise the POSIX arguments; they return like POSIX (-1 or NULL with
 * errno set). Nothing here prints, asserts or exits. mapfs_last_error()
 * gives the message behind the last failure of the calling thread.
 *
 * Paths are absolute within the pool ("/a/b"); a relative path is taken
 * relative to the root. Descriptors are mapfs's own small integers, valid
 * only with the handle that returned them. */
#ifndef MAPFS_MAPFS_H
#define MAPFS_MAPFS_H

#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported by libmapfs.so, which is built with
 * -fvisibility=hidden: the pragma gives these declarations (and so their
 * definitions) default visibility. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* "MAJOR.MINOR.PATCH" of the library. */
const char *mapfs_version(void);
/* On-media format version this library reads and writes. */
unsigned mapfs_format_version(void);
/* Message describing the calling thread's last failure ("" if none). */
const char *mapfs_last_error(void);

/* Consistency modes (DESIGN.md): posix = metadata atomic, data durable at
 * fsync; sync = every call durable on return; strict = sync + every write
 * all-or-nothing across a crash. */
enum mapfs_mode {
  MAPFS_MODE_DEFAULT = -1, /* MAPFS_MODE from the environment, else the pool's */
  MAPFS_MODE_POSIX = 0,
  MAPFS_MODE_SYNC = 1,
  MAPFS_MODE_STRICT = 2
};

/* Per-open overrides of the mode, or'ed into mapfs_open's flags. */
#define MAPFS_O_POSIX 0x10000000
#define MAPFS_O_SYNCMODE 0x20000000
#define MAPFS_O_STRICT 0x40000000

typedef struct mapfs_fs mapfs_t;
typedef struct mapfs_dir mapfs_dir_t;

struct mapfs_options {
  int mode; /* enum mapfs_mode */
};

struct mapfs_mkfs_options {
  unsigned long long size; /* bytes */
  unsigned page_size;      /* 4096 (default) or 2097152 */
  int mode;                /* default mode of the pool; MAPFS_MODE_DEFAULT = sync */
  /* How regular files keep their data: NULL or "contiguous" (default: each
   * file contiguous in virtual memory), or a block mapper: "hashfs",
   * "cuckoo", "extent" or "radix" (files in 4 KiB blocks; see mapfs(3)). */
  const char *files;
};

/* Formats a pool file (overwriting it). 0 or -1/errno. */
int mapfs_mkfs(const char *pool, const struct mapfs_mkfs_options *opt);

/* Mounts a pool (opt may be NULL). NULL + errno on failure. */
mapfs_t *mapfs_mount(const char *pool, const struct mapfs_options *opt);
/* Closes every descriptor and directory stream left open and unmounts. A
 * stream it closed reads as closed (mapfs_readdir: NULL, errno EBADF); its
 * handle stays allocated until mapfs_closedir, which frees it and returns 0. */
int mapfs_unmount(mapfs_t *fs);

int mapfs_open(mapfs_t *fs, const char *path, int flags, ... /* mode_t mode */);
int mapfs_creat(mapfs_t *fs, const char *path, mode_t mode);
int mapfs_close(mapfs_t *fs, int fd);
int mapfs_dup(mapfs_t *fs, int fd);
int mapfs_dup2(mapfs_t *fs, int fd, int newfd);
ssize_t mapfs_read(mapfs_t *fs, int fd, void *buf, size_t n);
ssize_t mapfs_write(mapfs_t *fs, int fd, const void *buf, size_t n);
ssize_t mapfs_pread(mapfs_t *fs, int fd, void *buf, size_t n, off_t off);
ssize_t mapfs_pwrite(mapfs_t *fs, int fd, const void *buf, size_t n, off_t off);
off_t mapfs_lseek(mapfs_t *fs, int fd, off_t off, int whence);
int mapfs_fsync(mapfs_t *fs, int fd);
int mapfs_fdatasync(mapfs_t *fs, int fd);
int mapfs_ftruncate(mapfs_t *fs, int fd, off_t size);
int mapfs_truncate(mapfs_t *fs, const char *path, off_t size);
int mapfs_fallocate(mapfs_t *fs, int fd, int mode, off_t off, off_t len);
int mapfs_fstat(mapfs_t *fs, int fd, struct stat *st);
int mapfs_stat(mapfs_t *fs, const char *path, struct stat *st);
int mapfs_lstat(mapfs_t *fs, const char *path, struct stat *st);
int mapfs_statvfs(mapfs_t *fs, struct statvfs *st);

int mapfs_unlink(mapfs_t *fs, const char *path);
int mapfs_rename(mapfs_t *fs, const char *from, const char *to);
/* flags: RENAME_NOREPLACE, RENAME_EXCHANGE (<linux/fs.h>). */
int mapfs_rename2(mapfs_t *fs, const char *from, const char *to, unsigned flags);
int mapfs_link(mapfs_t *fs, const char *from, const char *to);
/* A pool mounted through this API has no place in the process's
 * namespace: an absolute symlink target is walked from the pool's root (as
 * under chroot) and ".." at the root stays there. Under the LD_PRELOAD shim
 * a target is a path of the process's namespace instead (README). */
int mapfs_symlink(mapfs_t *fs, const char *target, const char *path);
ssize_t mapfs_readlink(mapfs_t *fs, const char *path, char *buf, size_t size);
int mapfs_mkdir(mapfs_t *fs, const char *path, mode_t mode);
int mapfs_rmdir(mapfs_t *fs, const char *path);
int mapfs_chmod(mapfs_t *fs, const char *path, mode_t mode);
int mapfs_fchmod(mapfs_t *fs, int fd, mode_t mode);
int mapfs_chown(mapfs_t *fs, const char *path, uid_t uid, gid_t gid);
int mapfs_lchown(mapfs_t *fs, const char *path, uid_t uid, gid_t gid);
int mapfs_fchown(mapfs_t *fs, int fd, uid_t uid, gid_t gid);
/* access(2) / faccessat(2) inside the pool: mode F_OK or R_OK|W_OK|X_OK;
 * flags AT_EACCESS (effective ids; default: the real ones) and
 * AT_SYMLINK_NOFOLLOW. */
int mapfs_access(mapfs_t *fs, const char *path, int mode, int flags);
/* Permissions are checked as Linux checks them, against the calling
 * process's user, group and supplementary groups, read at mapfs_mount and
 * then cached: a program that changes its ids (setuid, setgroups, ...)
 * after mounting calls this for the new ones to count. The umask that
 * mapfs_open(O_CREAT) and mapfs_mkdir apply is cached the same way: after
 * a umask() call, call this too. */
void mapfs_refresh_credentials(void);
/* ts NULL = now; UTIME_NOW and UTIME_OMIT honoured. Follows symlinks. */
int mapfs_utimens(mapfs_t *fs, const char *path, const struct timespec ts[2]);
int mapfs_lutimens(mapfs_t *fs, const char *path, const struct timespec ts[2]);
int mapfs_futimens(mapfs_t *fs, int fd, const struct timespec ts[2]);

/* Directory streams. Entries come back exactly once each even while the
 * directory changes; telldir positions stay valid. */
mapfs_dir_t *mapfs_opendir(mapfs_t *fs, const char *path);
struct dirent *mapfs_readdir(mapfs_dir_t *d);
int mapfs_closedir(mapfs_dir_t *d);
long mapfs_telldir(mapfs_dir_t *d);
void mapfs_seekdir(mapfs_dir_t *d, long pos);
void mapfs_rewinddir(mapfs_dir_t *d);

/* Extensions. */
/* Zero-copy access: a pointer to byte 0 of the file, valid for *capacity
 * bytes (at least the size) until the file is truncated or grows past the
 * capacity. Writes through it are durable after mapfs_fsync. */
void *mapfs_mmap(mapfs_t *fs, int fd, size_t *capacity);
/* A write that is all-or-nothing across a crash, whatever the mode. */
ssize_t mapfs_pwrite_atomic(mapfs_t *fs, int fd, const void *buf, size_t n, off_t off);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* MAPFS_MAPFS_H */
