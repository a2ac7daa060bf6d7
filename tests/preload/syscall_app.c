/* Every file system call a glibc program may make by number (x86-64),
 * through syscall() and nothing else, in directory ROOT; prints what a user
 * sees (results, errno names, contents, sizes, modes, names), never what
 * legitimately differs between file systems (inode numbers, st_dev,
 * directory sizes, d_off values, block counts).
 *
 *   syscall_app ROOT            the comparison run: syscalls_test.sh runs
 *                               it on tmpfs and on the pool, byte for byte
 *   syscall_app --refused ROOT  the numbers the shim refuses on pool files:
 *                               each must fail with ENOSYS (mapfs only)
 *
 * Relative paths are used wherever the call takes one: with the cwd in
 * the pool they must reach the pool, never the directory the program was
 * started in. */
#define _GNU_SOURCE
#include <aio.h>
#include <errno.h>
#include <linux/aio_abi.h>
#include <signal.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>
#include <utime.h>

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif

static long show(const char* what, long r) {
  if (r < 0) printf("%s = -1 %s\n", what, strerrorname_np(errno));
  else printf("%s = %ld\n", what, r);
  return r;
}
#define S(what, ...) show(what, syscall(__VA_ARGS__))

static void stat_line(const char* what, long r, const struct stat* st) {
  if (r < 0) {
    show(what, r);
    return;
  }
  printf("%s: mode %o", what, (unsigned)st->st_mode);
  if (!S_ISDIR(st->st_mode)) printf(" size %lld nlink %lu", (long long)st->st_size, (unsigned long)st->st_nlink);
  if (st->st_mtim.tv_sec < 1000000000) printf(" mtime %lld.%09ld", (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
  printf(" mine %d\n", st->st_uid == getuid() && st->st_gid == getgid());
}

static void contents(const char* what, const char* path) {
  char buf[256];
  int fd = (int)syscall(SYS_open, path, O_RDONLY);
  if (fd < 0) {
    show(what, -1);
    return;
  }
  long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
  syscall(SYS_close, fd);
  if (n < 0) n = 0;
  buf[n] = '\0';
  printf("%s: %ld bytes \"", what, n);
  for (long i = 0; i < n; i++) putchar(buf[i] >= 32 && buf[i] < 127 ? buf[i] : buf[i] == 0 ? '0' : '.');
  printf("\"\n");
}

static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* The names and types of directory `path`, read with getdents64 or the old
 * getdents in a buffer of `bufsize`, sorted. */
static void list_dir(const char* what, const char* path, int is64, size_t bufsize) {
  int fd = (int)syscall(SYS_open, path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) {
    show(what, -1);
    return;
  }
  char* names[64];
  int count = 0;
  char buf[4096];
  long n;
  while ((n = syscall(is64 ? SYS_getdents64 : SYS_getdents, fd, buf, bufsize)) > 0) {
    for (long at = 0; at < n;) {
      const char* name;
      unsigned char type;
      unsigned short reclen;
      if (is64) {
        memcpy(&reclen, buf + at + 16, sizeof reclen);
        type = (unsigned char)buf[at + 18];
        name = buf + at + 19;
      } else {
        memcpy(&reclen, buf + at + 16, sizeof reclen);
        name = buf + at + 18;
        type = (unsigned char)buf[at + reclen - 1];
      }
      if (count < 64) {
        names[count] = malloc(strlen(name) + 8);
        sprintf(names[count], "%s:%u", name, type);
        count++;
      }
      at += reclen;
    }
  }
  if (n < 0) show(what, n);
  qsort(names, (size_t)count, sizeof names[0], cmp_str);
  printf("%s:", what);
  for (int i = 0; i < count; i++) {
    printf(" %s", names[i]);
    free(names[i]);
  }
  printf("\n");
  /* Read again from the start after lseek, as readdir's rewind does. */
  S("  at the end", is64 ? SYS_getdents64 : SYS_getdents, fd, buf, bufsize);
  S("  lseek dir 0", SYS_lseek, fd, 0, SEEK_SET);
  S("  tiny buffer", is64 ? SYS_getdents64 : SYS_getdents, fd, buf, (size_t)8);
  n = syscall(is64 ? SYS_getdents64 : SYS_getdents, fd, buf, bufsize);
  printf("  again: %s\n", n > 0 ? "entries" : "none");
  syscall(SYS_close, fd);
}

static void async_io(const char* path);

static int compare_run(void) {
  struct stat st;
  char buf[256];
  char cwd[4096];

  S("mkdir d", SYS_mkdir, "d", 0755);
  S("mkdirat d/e", SYS_mkdirat, AT_FDCWD, "d/e", 0700);
  S("mkdir d again", SYS_mkdir, "d", 0755);
  S("chdir d", SYS_chdir, "d");
  long len = syscall(SYS_getcwd, cwd, sizeof cwd);
  printf("getcwd: %s (length with NUL %s)\n", len > 0 ? cwd : "?", len == (long)strlen(cwd) + 1 ? "ok" : "wrong");
  S("getcwd short", SYS_getcwd, cwd, (size_t)2);
  S("chdir ..", SYS_chdir, "..");

  /* Descriptors and data. */
  int fd = (int)syscall(SYS_open, "f", O_CREAT | O_RDWR | O_TRUNC, 0644);
  printf("open f: %s\n", fd >= 0 ? "fd" : strerrorname_np(errno));
  S("write", SYS_write, fd, "hello world\n", (size_t)12);
  S("pwrite64", SYS_pwrite64, fd, "HELLO", (size_t)5, 0L);
  S("lseek 0", SYS_lseek, fd, 0L, SEEK_SET);
  memset(buf, 0, sizeof buf);
  S("read", SYS_read, fd, buf, (size_t)100);
  printf("  read: %s", buf);
  memset(buf, 0, sizeof buf);
  S("pread64", SYS_pread64, fd, buf, (size_t)5, 6L);
  printf("  pread64: %s\n", buf);
  char a[4] = "abc", b[4] = "def";
  struct iovec wv[2] = {{a, 3}, {b, 3}};
  S("writev", SYS_writev, fd, wv, 2);
  S("pwritev", SYS_pwritev, fd, wv, 2, 20L, 0L);
  S("pwritev2", SYS_pwritev2, fd, wv, 2, 30L, 0L, 0);
  char r1[5] = {0}, r2[5] = {0};
  struct iovec rv[2] = {{r1, 4}, {r2, 4}};
  S("lseek 12", SYS_lseek, fd, 12L, SEEK_SET);
  S("readv", SYS_readv, fd, rv, 2);
  printf("  readv: %s|%s\n", r1, r2);
  S("preadv", SYS_preadv, fd, rv, 2, 0L, 0L);
  printf("  preadv: %s|%s\n", r1, r2);
  S("preadv2", SYS_preadv2, fd, rv, 2, 30L, 0L, 0);
  printf("  preadv2: %s|%s\n", r1, r2);
  S("lseek end", SYS_lseek, fd, 0L, SEEK_END);
  S("lseek bad whence", SYS_lseek, fd, 0L, 77);
  S("fsync", SYS_fsync, fd);
  S("fdatasync", SYS_fdatasync, fd);
  S("syncfs", SYS_syncfs, fd);
  S("sync_file_range", SYS_sync_file_range, fd, 0L, 0L, 0u);
  S("fadvise64", SYS_fadvise64, fd, 0L, 0L, POSIX_FADV_SEQUENTIAL);
  S("readahead", SYS_readahead, fd, 0L, (size_t)100);
  S("fallocate", SYS_fallocate, fd, 0, 0L, 40L);
  stat_line("fstat f", syscall(SYS_fstat, fd, &st), &st);
  S("ftruncate 30", SYS_ftruncate, fd, 30L);
  S("truncate f 25", SYS_truncate, "f", 25L);
  S("truncate missing", SYS_truncate, "missing", 25L);
  contents("f", "f");
  long fl = syscall(SYS_fcntl, fd, F_GETFL);
  printf("fcntl F_GETFL: acc %ld append %d\n", fl & O_ACCMODE, (int)((fl & O_APPEND) != 0));
  S("fcntl F_SETFD", SYS_fcntl, fd, F_SETFD, FD_CLOEXEC);
  S("fcntl F_GETFD", SYS_fcntl, fd, F_GETFD);
  S("flock ex", SYS_flock, fd, LOCK_EX);
  S("flock un", SYS_flock, fd, LOCK_UN);

  int d1 = (int)syscall(SYS_dup, fd);
  printf("dup: %s\n", d1 >= 0 ? "fd" : strerrorname_np(errno));
  S("dup2 to 40", SYS_dup2, fd, 40);
  S("dup3 to 41", SYS_dup3, fd, 41, O_CLOEXEC);
  S("dup3 same", SYS_dup3, fd, fd, 0);
  S("lseek dup 3", SYS_lseek, d1, 3L, SEEK_SET);
  S("offset shared by dup2", SYS_lseek, 40, 0L, SEEK_CUR);
  S("close_range 40-41", SYS_close_range, 40u, 41u, 0u);
  S("close 40 again", SYS_close, 40);
  S("close dup", SYS_close, d1);

  /* mmap of the file (shared: the file's bytes). */
  long m = syscall(SYS_mmap, NULL, (size_t)4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0L);
  if (m == -1) {
    show("mmap", -1);
  } else {
    char* p = (char*)m;
    printf("mmap: %.5s\n", p);
    p[0] = 'J';
    S("msync", SYS_msync, p, (size_t)4096, MS_SYNC);
    S("munmap", SYS_munmap, p, (size_t)4096);
    memset(buf, 0, sizeof buf);
    syscall(SYS_pread64, fd, buf, (size_t)5, 0L);
    printf("  after the map: %s\n", buf);
  }

  /* Copies and pipes. */
  int g = (int)syscall(SYS_creat, "g", 0600);
  printf("creat g: %s\n", g >= 0 ? "fd" : strerrorname_np(errno));
  off64_t in_off = 0;
  S("copy_file_range", SYS_copy_file_range, fd, &in_off, g, NULL, (size_t)10, 0u);
  printf("  in_off %lld\n", (long long)in_off);
  off_t sf_off = 6;
  S("sendfile", SYS_sendfile, g, fd, &sf_off, (size_t)5);
  printf("  sendfile off %lld\n", (long long)sf_off);
  S("write to creat'd", SYS_write, g, "!", (size_t)1);
  contents("g", "g");
  int p[2];
  if (pipe(p) != 0) return 1;
  /* The read end never blocks: a splice that moved nothing must not hang
   * the test in the read after it. */
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  off64_t so = 6;
  S("splice file->pipe", SYS_splice, fd, &so, p[1], NULL, (size_t)5, 0u);
  printf("  splice off %lld\n", (long long)so);
  memset(buf, 0, sizeof buf);
  S("  read pipe", SYS_read, p[0], buf, sizeof buf);
  printf("  pipe had: %s\n", buf);
  S("lseek f 0", SYS_lseek, fd, 0L, SEEK_SET);
  S("splice file(pos)->pipe", SYS_splice, fd, NULL, p[1], NULL, (size_t)4, 0u);
  S("  position after", SYS_lseek, fd, 0L, SEEK_CUR);
  S("  drain", SYS_read, p[0], buf, sizeof buf);
  S("write pipe", SYS_write, p[1], "PIPED", (size_t)5);
  so = 2;
  S("splice pipe->file", SYS_splice, p[0], NULL, g, &so, (size_t)100, 0u);
  printf("  splice off %lld\n", (long long)so);
  S("write pipe", SYS_write, p[1], "xy", (size_t)2);
  S("splice pipe->file(pos)", SYS_splice, p[0], NULL, g, NULL, (size_t)100, 0u);
  contents("g", "g");
  S("splice empty pipe nonblock", SYS_splice, p[0], NULL, g, NULL, (size_t)100, SPLICE_F_NONBLOCK);
  S("splice file->file", SYS_splice, fd, NULL, g, NULL, (size_t)4, 0u);
  S("splice offset on pipe", SYS_splice, fd, NULL, p[1], &so, (size_t)4, 0u);
  S("tee file", SYS_tee, fd, p[1], (size_t)4, 0u);
  S("close g", SYS_close, g);
  close(p[0]);
  close(p[1]);

  /* openat2 without RESOLVE_* flags is openat. */
  struct open_how how = {.flags = O_RDONLY};
  int o2 = (int)syscall(SYS_openat2, AT_FDCWD, "f", &how, sizeof how);
  printf("openat2 f: %s\n", o2 >= 0 ? "fd" : strerrorname_np(errno));
  memset(buf, 0, sizeof buf);
  S("  read", SYS_read, o2, buf, (size_t)5);
  printf("  openat2 read: %s\n", buf);
  syscall(SYS_close, o2);
  int dfd = (int)syscall(SYS_openat, AT_FDCWD, "d", O_RDONLY | O_DIRECTORY);
  printf("openat d: %s\n", dfd >= 0 ? "fd" : strerrorname_np(errno));

  /* Metadata. */
  stat_line("stat f", syscall(SYS_stat, "f", &st), &st);
  stat_line("stat d", syscall(SYS_stat, "d", &st), &st);
  stat_line("stat missing", syscall(SYS_stat, "missing", &st), &st);
  stat_line("newfstatat d/e", syscall(SYS_newfstatat, AT_FDCWD, "d/e", &st, 0), &st);
  stat_line("newfstatat dfd e", syscall(SYS_newfstatat, dfd, "e", &st, 0), &st);
  stat_line("newfstatat empty path", syscall(SYS_newfstatat, fd, "", &st, AT_EMPTY_PATH), &st);
  struct statx sx;
  long r = syscall(SYS_statx, AT_FDCWD, "f", 0, STATX_BASIC_STATS, &sx);
  if (r == 0) printf("statx f: mode %o size %llu\n", (unsigned)sx.stx_mode, (unsigned long long)sx.stx_size);
  else show("statx f", r);
  struct statfs sfs;
  S("statfs", SYS_statfs, "f", &sfs);
  S("fstatfs", SYS_fstatfs, fd, &sfs);
  S("access f R", SYS_access, "f", R_OK);
  S("access missing", SYS_access, "missing", F_OK);
  S("faccessat f W", SYS_faccessat, AT_FDCWD, "f", W_OK);
  S("faccessat2 f X eaccess", SYS_faccessat2, AT_FDCWD, "f", X_OK, AT_EACCESS);
  S("chmod f 600", SYS_chmod, "f", 0600);
  S("fchmod 640", SYS_fchmod, fd, 0640);
  S("fchmodat d/e 750", SYS_fchmodat, AT_FDCWD, "d/e", 0750);
  S("fchmodat2 f 644", SYS_fchmodat2, AT_FDCWD, "f", 0644, 0);
  S("chown f", SYS_chown, "f", getuid(), getgid());
  S("lchown f", SYS_lchown, "f", getuid(), getgid());
  S("fchown", SYS_fchown, fd, getuid(), getgid());
  S("fchownat d/e", SYS_fchownat, AT_FDCWD, "d/e", getuid(), getgid(), 0);
  struct timespec ts[2] = {{100, 5}, {200, 7}};
  S("utimensat f", SYS_utimensat, AT_FDCWD, "f", ts, 0);
  stat_line("  stat f", syscall(SYS_stat, "f", &st), &st);
  ts[1].tv_sec = 300;
  S("utimensat null path", SYS_utimensat, fd, NULL, ts, 0);
  stat_line("  fstat", syscall(SYS_fstat, fd, &st), &st);
  struct timeval tv[2] = {{400, 1}, {500, 2}};
  S("utimes f", SYS_utimes, "f", tv);
  stat_line("  stat f", syscall(SYS_stat, "f", &st), &st);
  tv[1].tv_sec = 600;
  S("futimesat dfd ../f", SYS_futimesat, dfd, "../f", tv);
  stat_line("  stat f", syscall(SYS_stat, "f", &st), &st);
  struct utimbuf ub = {700, 800};
  S("utime f", SYS_utime, "f", &ub);
  stat_line("  stat f", syscall(SYS_stat, "f", &st), &st);

  /* Names. */
  /* (FIFO, socket and device nodes: the shim refuses them in a pool.) */
  S("mknod reg", SYS_mknod, "reg", S_IFREG | 0640, 0);
  S("mknodat d/reg", SYS_mknodat, AT_FDCWD, "d/reg", S_IFREG | 0600, 0);
  stat_line("lstat reg", syscall(SYS_lstat, "reg", &st), &st);
  S("symlink f l", SYS_symlink, "f", "l");
  S("symlinkat d/e d/le", SYS_symlinkat, "e", AT_FDCWD, "d/le");
  stat_line("lstat l", syscall(SYS_lstat, "l", &st), &st);
  memset(buf, 0, sizeof buf);
  S("readlink l", SYS_readlink, "l", buf, sizeof buf);
  printf("  -> %s\n", buf);
  memset(buf, 0, sizeof buf);
  S("readlinkat dfd le", SYS_readlinkat, dfd, "le", buf, sizeof buf);
  printf("  -> %s\n", buf);
  S("readlink f", SYS_readlink, "f", buf, sizeof buf);
  S("link f h", SYS_link, "f", "h");
  S("linkat f d/h2", SYS_linkat, AT_FDCWD, "f", dfd, "h2", 0);
  stat_line("stat f (3 links)", syscall(SYS_stat, "f", &st), &st);
  S("rename h h3", SYS_rename, "h", "h3");
  S("renameat d/h2 d/h4", SYS_renameat, dfd, "h2", AT_FDCWD, "d/h4");
  S("renameat2 noreplace", SYS_renameat2, AT_FDCWD, "h3", AT_FDCWD, "f", RENAME_NOREPLACE);
  S("renameat2 exchange", SYS_renameat2, AT_FDCWD, "g", AT_FDCWD, "h3", RENAME_EXCHANGE);
  contents("h3 (was g)", "h3");
  list_dir("getdents64 .", ".", 1, 4096);
  list_dir("getdents d", "d", 0, 4096);
  list_dir("getdents64 d small", "d", 1, 64);
  list_dir("getdents64 f", "f", 1, 4096);
  S("getdents64 on a file fd", SYS_getdents64, fd, buf, sizeof buf);
  S("unlink h3", SYS_unlink, "h3");
  S("unlink d", SYS_unlink, "d");
  S("unlinkat d/h4", SYS_unlinkat, dfd, "h4", 0);
  S("unlinkat d/le", SYS_unlinkat, AT_FDCWD, "d/le", 0);
  S("unlinkat d/reg", SYS_unlinkat, AT_FDCWD, "d/reg", 0);
  S("rmdir d", SYS_rmdir, "d");
  S("unlinkat d/e removedir", SYS_unlinkat, AT_FDCWD, "d/e", AT_REMOVEDIR);

  async_io("aio");

  /* The current directory by descriptor. */
  S("fchdir d", SYS_fchdir, dfd);
  len = syscall(SYS_getcwd, cwd, sizeof cwd);
  printf("getcwd: %s\n", len > 0 ? cwd : "?");
  int here = (int)syscall(SYS_creat, "here", 0644);
  printf("creat here: %s\n", here >= 0 ? "fd" : strerrorname_np(errno));
  syscall(SYS_close, here);
  S("chdir ..", SYS_chdir, "..");
  stat_line("stat d/here", syscall(SYS_stat, "d/here", &st), &st);
  S("fchdir file", SYS_fchdir, fd);
  S("close d", SYS_close, dfd);
  S("close f", SYS_close, fd);
  S("close f again", SYS_close, fd);
  S("read closed", SYS_read, fd, buf, (size_t)1);
  return 0;
}

static volatile sig_atomic_t aio_signals, aio_signal_code_ok;
static void on_aio_signal(int sig, siginfo_t* si, void* ctx) {
  (void)sig;
  (void)ctx;
  aio_signals++;
  aio_signal_code_ok = si->si_code == SI_ASYNCIO && si->si_value.sival_int == 42;
}

/* The kernel's AIO by number (as libaio makes it) and POSIX AIO, on file
 * `path`: results, events and contents. */
static void async_io(const char* path) {
  int fd = (int)syscall(SYS_open, path, O_CREAT | O_RDWR | O_TRUNC, 0644);
  aio_context_t ctx = 0;
  S("io_setup", SYS_io_setup, 8, &ctx);
  char w1[8] = "aio-one", w2[8] = "aio-two", r1[8] = {0};
  struct iocb cbs[3];
  memset(cbs, 0, sizeof cbs);
  for (int i = 0; i < 3; i++) {
    cbs[i].aio_fildes = (unsigned)fd;
    cbs[i].aio_data = (unsigned long)(100 + i);
  }
  cbs[0].aio_lio_opcode = IOCB_CMD_PWRITE;
  cbs[0].aio_buf = (unsigned long)w1;
  cbs[0].aio_nbytes = 7;
  cbs[1].aio_lio_opcode = IOCB_CMD_PWRITE;
  cbs[1].aio_buf = (unsigned long)w2;
  cbs[1].aio_nbytes = 7;
  cbs[1].aio_offset = 7;
  cbs[2].aio_lio_opcode = IOCB_CMD_FSYNC;
  struct iocb* list[3] = {&cbs[0], &cbs[1], &cbs[2]};
  S("io_submit 2 writes + fsync", SYS_io_submit, ctx, 3L, list);
  struct io_event ev[8];
  long got = 0;
  struct timespec ts = {5, 0};
  while (got < 3) {
    long r = syscall(SYS_io_getevents, ctx, 1L, 8L, ev + got, &ts);
    if (r <= 0) {
      show("io_getevents", r);
      break;
    }
    got += r;
  }
  unsigned long seen = 0;
  for (unsigned long want = 100; want < 103; want++) /* in request order: completion order may differ */
    for (long i = 0; i < got; i++)
      if (ev[i].data == want) {
        seen |= 1ul << (ev[i].data - 100);
        printf("  event %llu: res %lld obj %s\n", (unsigned long long)ev[i].data, (long long)ev[i].res,
               ev[i].obj == (unsigned long)&cbs[ev[i].data - 100] ? "ok" : "wrong");
      }
  printf("  events for every request: %s (%ld)\n", seen == 7 ? "yes" : "no", got);
  cbs[0].aio_lio_opcode = IOCB_CMD_PREAD;
  cbs[0].aio_buf = (unsigned long)r1;
  cbs[0].aio_offset = 7;
  S("io_submit read", SYS_io_submit, ctx, 1L, list);
  S("io_getevents read", SYS_io_getevents, ctx, 1L, 1L, ev, &ts);
  printf("  res %lld: %s\n", (long long)ev[0].res, r1);
  S("io_getevents none left", SYS_io_getevents, ctx, 0L, 8L, ev, &(struct timespec){0, 0});
  cbs[0].aio_lio_opcode = 99;
  S("io_submit bad opcode", SYS_io_submit, ctx, 1L, list);
  S("io_submit bad context", SYS_io_submit, 12345L, 1L, list);
  S("io_destroy", SYS_io_destroy, ctx);

  /* POSIX AIO. */
  struct sigaction sa = {.sa_sigaction = on_aio_signal, .sa_flags = SA_SIGINFO};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  char buf[16] = {0};
  struct aiocb a = {.aio_fildes = fd, .aio_buf = (void*)"POSIX", .aio_nbytes = 5, .aio_offset = 2};
  a.aio_sigevent.sigev_notify = SIGEV_SIGNAL;
  a.aio_sigevent.sigev_signo = SIGUSR1;
  a.aio_sigevent.sigev_value.sival_int = 42;
  show("aio_write", aio_write(&a));
  const struct aiocb* wait1[1] = {&a};
  while (aio_error(&a) == EINPROGRESS) aio_suspend(wait1, 1, NULL);
  printf("  aio_error %d aio_return %zd\n", aio_error(&a), aio_return(&a));
  for (int i = 0; i < 1000 && aio_signals == 0; i++) usleep(1000);
  printf("  signals %d, code and value %s\n", (int)aio_signals, aio_signal_code_ok ? "ok" : "wrong");
  struct aiocb b = {.aio_fildes = fd, .aio_buf = buf, .aio_nbytes = 10, .aio_offset = 0};
  show("aio_read", aio_read(&b));
  const struct aiocb* wait2[1] = {&b};
  while (aio_error(&b) == EINPROGRESS) aio_suspend(wait2, 1, NULL);
  printf("  aio_error %d aio_return %zd: %s\n", aio_error(&b), aio_return(&b), buf);
  struct aiocb f = {.aio_fildes = fd};
  show("aio_fsync", aio_fsync(O_SYNC, &f));
  while (aio_error(&f) == EINPROGRESS) aio_suspend((const struct aiocb* const[]){&f}, 1, NULL);
  printf("  aio_error %d aio_return %zd\n", aio_error(&f), aio_return(&f));
  show("aio_fsync bad op", aio_fsync(12345, &f));
  struct aiocb neg = {.aio_fildes = fd, .aio_buf = buf, .aio_nbytes = 1, .aio_offset = -1};
  show("aio_read negative offset", aio_read(&neg));
  while (aio_error(&neg) == EINPROGRESS) aio_suspend((const struct aiocb* const[]){&neg}, 1, NULL);
  printf("  aio_error %s aio_return %zd\n", strerrorname_np(aio_error(&neg)), aio_return(&neg));
  char l1[4] = {0}, l2[4] = {0};
  struct aiocb la = {.aio_fildes = fd, .aio_lio_opcode = LIO_WRITE, .aio_buf = (void*)"LIST", .aio_nbytes = 4, .aio_offset = 20};
  struct aiocb lb = {.aio_fildes = fd, .aio_lio_opcode = LIO_READ, .aio_buf = l1, .aio_nbytes = 3, .aio_offset = 0};
  struct aiocb lc = {.aio_fildes = fd, .aio_lio_opcode = LIO_NOP};
  struct aiocb* ll[4] = {&la, &lb, NULL, &lc};
  show("lio_listio wait", lio_listio(LIO_WAIT, ll, 4, NULL));
  printf("  write %zd read %zd: %s\n", aio_return(&la), aio_return(&lb), l1);
  struct aiocb ld = {.aio_fildes = fd, .aio_lio_opcode = LIO_READ, .aio_buf = l2, .aio_nbytes = 3, .aio_offset = 20};
  struct aiocb* ll2[1] = {&ld};
  struct sigevent se = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR1, .sigev_value.sival_int = 42};
  show("lio_listio nowait", lio_listio(LIO_NOWAIT, ll2, 1, &se));
  while (aio_error(&ld) == EINPROGRESS) aio_suspend((const struct aiocb* const[]){&ld}, 1, NULL);
  for (int i = 0; i < 1000 && aio_signals < 2; i++) usleep(1000);
  printf("  read %zd: %s, signals %d\n", aio_return(&ld), l2, (int)aio_signals);
  show("aio_cancel", aio_cancel(fd, NULL));
  syscall(SYS_close, fd);
  contents("aio file", path);
}

/* Numbers the shim refuses on pool files and descriptors: ENOSYS (and one
 * line on stderr per number, which the test counts). */
static int refused_run(void) {
  int fd = (int)syscall(SYS_open, "rf", O_CREAT | O_RDWR, 0644);
  if (fd < 0) return 1;
  struct {
    struct file_handle h;
    unsigned char bytes[128];
  } fh = {.h = {.handle_bytes = 128}};
  int mnt = 0;
  S("name_to_handle_at", SYS_name_to_handle_at, AT_FDCWD, "rf", &fh.h, &mnt, 0);
  S("name_to_handle_at again", SYS_name_to_handle_at, AT_FDCWD, "rf", &fh.h, &mnt, 0);
  int avail = 0;
  S("ioctl FIONREAD", SYS_ioctl, fd, FIONREAD, &avail);
  S("ioctl FIOCLEX", SYS_ioctl, fd, FIOCLEX);
  S("fcntl F_GETFD after FIOCLEX", SYS_fcntl, fd, F_GETFD);
  struct open_how how = {.flags = O_RDONLY, .resolve = RESOLVE_BENEATH};
  S("openat2 RESOLVE_BENEATH", SYS_openat2, AT_FDCWD, "rf", &how, sizeof how);
  S("inotify_add_watch", SYS_inotify_add_watch, 0, "rf", 0x2);
  S("execveat", SYS_execveat, AT_FDCWD, "rf", NULL, NULL, 0);
  S("chroot", SYS_chroot, ".");
  /* A kernel path is the kernel's: a real answer, not ENOSYS. */
  long r = syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &fh.h, &mnt, 0);
  printf("name_to_handle_at on a kernel path: %s\n", r == 0 || errno != ENOSYS ? "kernel" : "ENOSYS");
  syscall(SYS_close, fd);
  syscall(SYS_unlink, "rf");
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int refused = argc == 3 && strcmp(argv[1], "--refused") == 0;
  if (argc != 2 && !refused) {
    fprintf(stderr, "usage: syscall_app [--refused] ROOT\n");
    return 2;
  }
  if (syscall(SYS_chdir, argv[argc - 1]) != 0) {
    perror("chdir ROOT");
    return 1;
  }
  return refused ? refused_run() : compare_run();
}
