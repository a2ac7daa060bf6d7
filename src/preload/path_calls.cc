// Wrappers of the calls that name a path: stat, access, unlink, rename,
// link, symlink, readlink, mkdir, rmdir, chmod, chown, utimes, truncate,
// statfs, chdir, getcwd, realpath.
// Programs do pass NULL where glibc declares a path nonnull; answer EFAULT as
// the kernel does (each compiler names the warning about that check its way).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wtautological-pointer-compare"
#else
#pragma GCC diagnostic ignored "-Wnonnull-compare"
#endif
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>
#include <utime.h>

#include <cstring>
#include <string>

#include "common/process.h"
#include "preload/calls.h"
#include "preload/overlay_fds.h"
#include "preload/outside.h"

namespace mapfs::preload {
namespace {

constexpr long kMapfsMagic = 0x4d415046;  // "MAPF"

int Ret(const Status& st) { return st.ok() ? 0 : Fail(st); }

int StatRoute(const Route& r, struct stat* st, bool follow) {
  if (st == nullptr) return FailErrno(EFAULT);
  fs::FileSystem* f = FsOrFail();
  if (f == nullptr) return -1;
  CoreReadScope cs;  // as mapfs_stat: no store but into this mount's own reader row
  return Ret(f->Stat(r.path, st, follow, r.at));
}

int FstatFd(int fd, struct stat* st) {
  DescRef d = MapfsFd(fd);
  if (!d) return -2;  // not ours
  if (st == nullptr) return FailErrno(EFAULT);
  CoreReadScope cs;  // as mapfs_fstat
  return Ret(d->fsys->Fstat(*d->file, st));
}

// stat/lstat/fstatat for any dirfd/path/flags; -2 = hand to the kernel,
// with *kpath the path it should see.
int StatAt(int dirfd, const char* path, struct stat* st, int flags, Route* r) {
  if (in_core || path == nullptr) return -2;
  if (path[0] == '\0' && (flags & AT_EMPTY_PATH)) return FstatFd(dirfd, st);
  *r = MapfsPath(dirfd, path);
  if (!r->mapfs) return -2;
  return StatRoute(*r, st, !(flags & AT_SYMLINK_NOFOLLOW));
}

void FillStatx(const struct stat& s, struct statx* x) {
  std::memset(x, 0, sizeof *x);
  x->stx_mask = STATX_BASIC_STATS;
  x->stx_blksize = static_cast<uint32_t>(s.st_blksize);
  x->stx_nlink = static_cast<uint32_t>(s.st_nlink);
  x->stx_uid = s.st_uid;
  x->stx_gid = s.st_gid;
  x->stx_mode = static_cast<uint16_t>(s.st_mode);
  x->stx_ino = s.st_ino;
  x->stx_size = static_cast<uint64_t>(s.st_size);
  x->stx_blocks = static_cast<uint64_t>(s.st_blocks);
  x->stx_atime = {s.st_atim.tv_sec, static_cast<uint32_t>(s.st_atim.tv_nsec), 0};
  x->stx_mtime = {s.st_mtim.tv_sec, static_cast<uint32_t>(s.st_mtim.tv_nsec), 0};
  x->stx_ctime = {s.st_ctim.tv_sec, static_cast<uint32_t>(s.st_ctim.tv_nsec), 0};
  x->stx_dev_major = major(s.st_dev);
  x->stx_dev_minor = minor(s.st_dev);
  x->stx_rdev_major = major(s.st_rdev);
  x->stx_rdev_minor = minor(s.st_rdev);
}

void FillStatfs(const struct statvfs& v, struct statfs* s) {
  std::memset(s, 0, sizeof *s);
  s->f_type = kMapfsMagic;
  s->f_bsize = static_cast<long>(v.f_bsize);
  s->f_frsize = static_cast<long>(v.f_frsize);
  s->f_blocks = v.f_blocks;
  s->f_bfree = v.f_bfree;
  s->f_bavail = v.f_bavail;
  s->f_files = v.f_files;
  s->f_ffree = v.f_ffree;
  s->f_namelen = static_cast<long>(v.f_namemax);
  s->f_flags = static_cast<long>(v.f_flag);
}

int StatfsMapfs(struct statvfs* v) {
  fs::FileSystem* f = FsOrFail();
  if (f == nullptr) return -1;
  CoreScope cs;
  return Ret(f->Statfs(v));
}

int Rename2(int olddirfd, const char* from, int newdirfd, const char* to, unsigned flags,
            int (*kernel)(int, const char*, int, const char*, unsigned)) {
  Route a = MapfsPath(olddirfd, from), b = MapfsPath(newdirfd, to);
  if (a.mapfs != b.mapfs) return FailErrno(EXDEV);
  if (!a.mapfs) return kernel(olddirfd, a.Kernel(from), newdirfd, b.Kernel(to), flags);
  fs::FileSystem* f = FsOrFail();
  if (f == nullptr) return -1;
  CoreScope cs;
  return Ret(f->Rename(a.path, b.path, flags, a.at, b.at));
}

int KernelRenameat2(int a, const char* from, int b, const char* to, unsigned flags) {
  if (flags == 0) return REAL(renameat)(a, from, b, to);
  return REAL(renameat2)(a, from, b, to, flags);
}

int Utimens(int dirfd, const char* path, const struct timespec ts[2], int flags) {
  if (path == nullptr) {  // utimensat(fd, NULL, ...) = futimens(fd)
    if (DescRef d = MapfsFd(dirfd)) {
      CoreScope cs;
      return Ret(d->fsys->Futimens(*d->file, ts));
    }
    return REAL(utimensat)(dirfd, path, ts, flags);
  }
  if (path[0] == '\0' && (flags & AT_EMPTY_PATH)) {
    if (DescRef d = MapfsFd(dirfd)) {
      CoreScope cs;
      return Ret(d->fsys->Futimens(*d->file, ts));
    }
  }
  Route r = MapfsPath(dirfd, path);
  if (!r.mapfs) return REAL(utimensat)(dirfd, r.Kernel(path), ts, flags);
  if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)) return FailErrno(EINVAL);
  fs::FileSystem* f = FsOrFail();
  if (f == nullptr) return -1;
  CoreScope cs;
  return Ret(f->Utimens(r.path, ts, !(flags & AT_SYMLINK_NOFOLLOW), r.at));
}

bool TvToTs(const struct timeval* tv, struct timespec ts[2]) {
  if (tv == nullptr) return false;
  for (int i = 0; i < 2; i++) {
    ts[i].tv_sec = tv[i].tv_sec;
    ts[i].tv_nsec = tv[i].tv_usec * 1000;
  }
  return true;
}

// A stat-family call of the kernel: its answer is stored into the program's
// buffer, which may lie in a tracked map of a virtualized file, so the
// buffer is prepared first and the call retried as read's (KernelStores),
// or the kernel would fail with EFAULT on a clean page.
template <typename T, typename Call>
int KernelStat(T* buf, Call call) {
  return static_cast<int>(KernelStores([&] { OvBeforeKernelStores(buf, buf != nullptr ? sizeof *buf : 0); }, call));
}

}  // namespace
}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

// ---------------------------------------------------------------- stat

MAPFS_EXPORT int stat(const char* path, struct stat* st) {
  return FollowOut(AT_FDCWD, path, true, [&](int, const char* p) {
    Route k;
    int r = StatAt(AT_FDCWD, p, st, 0, &k);
    if (r != -2) return r;
    r = KernelStat(st, [&] { return REAL(stat)(k.Kernel(p), st); });
    if (r == 0) OvFixStat(st, AT_FDCWD, k.Kernel(p));
    return r;
  });
}
MAPFS_EXPORT int stat64(const char* path, struct stat64* st) { return stat(path, reinterpret_cast<struct stat*>(st)); }
MAPFS_EXPORT int lstat(const char* path, struct stat* st) {
  return FollowOut(AT_FDCWD, path, false, [&](int, const char* p) {
    Route k;
    int r = StatAt(AT_FDCWD, p, st, AT_SYMLINK_NOFOLLOW, &k);
    if (r != -2) return r;
    r = KernelStat(st, [&] { return REAL(lstat)(k.Kernel(p), st); });
    if (r == 0) OvFixStat(st, AT_FDCWD, k.Kernel(p));
    return r;
  });
}
MAPFS_EXPORT int lstat64(const char* path, struct stat64* st) { return lstat(path, reinterpret_cast<struct stat*>(st)); }
MAPFS_EXPORT int fstat(int fd, struct stat* st) {
  int r = FstatFd(fd, st);
  if (r != -2) return r;
  r = KernelStat(st, [&] { return REAL(fstat)(fd, st); });
  if (r == 0) OvFixStat(st, fd, nullptr);
  return r;
}
MAPFS_EXPORT int fstat64(int fd, struct stat64* st) { return fstat(fd, reinterpret_cast<struct stat*>(st)); }
MAPFS_EXPORT int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  return FollowOut(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), [&](int d, const char* p) {
    Route k;
    int r = StatAt(d, p, st, flags, &k);
    if (r != -2) return r;
    r = KernelStat(st, [&] { return REAL(fstatat)(d, k.Kernel(p), st, flags); });
    if (r == 0) OvFixStat(st, d, k.Kernel(p));
    return r;
  });
}
MAPFS_EXPORT int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
  return fstatat(dirfd, path, reinterpret_cast<struct stat*>(st), flags);
}
// The old versioned entry points that binaries built before glibc 2.33 call.
MAPFS_EXPORT int __xstat(int, const char* path, struct stat* st) { return stat(path, st); }
MAPFS_EXPORT int __xstat64(int, const char* path, struct stat* st) { return stat(path, st); }
MAPFS_EXPORT int __lxstat(int, const char* path, struct stat* st) { return lstat(path, st); }
MAPFS_EXPORT int __lxstat64(int, const char* path, struct stat* st) { return lstat(path, st); }
MAPFS_EXPORT int __fxstat(int, int fd, struct stat* st) { return fstat(fd, st); }
MAPFS_EXPORT int __fxstat64(int, int fd, struct stat* st) { return fstat(fd, st); }
MAPFS_EXPORT int __fxstatat(int, int dirfd, const char* path, struct stat* st, int flags) {
  return fstatat(dirfd, path, st, flags);
}
MAPFS_EXPORT int __fxstatat64(int, int dirfd, const char* path, struct stat* st, int flags) {
  return fstatat(dirfd, path, st, flags);
}

MAPFS_EXPORT int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* x) {
  return FollowOut(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), [&](int d, const char* p) {
    struct stat st;
    Route k;
    int r = StatAt(d, p, &st, flags, &k);
    if (r == -2) {
      r = KernelStat(x, [&] { return REAL(statx)(d, k.Kernel(p), flags, mask, x); });
      if (r == 0 && x != nullptr) OvFixStatx(x, d, k.Kernel(p));
      return r;
    }
    if (r != 0) return r;
    if (x == nullptr) return FailErrno(EFAULT);
    FillStatx(st, x);
    return 0;
  });
}

MAPFS_EXPORT int statfs(const char* path, struct statfs* s) {
  return FollowOut(AT_FDCWD, path, true, [&](int, const char* p) {
    Route r = MapfsPath(AT_FDCWD, p);
    if (!r.mapfs) return REAL(statfs)(r.Kernel(p), s);
    struct stat st;
    if (StatRoute(r, &st, true) != 0) return -1;
    struct statvfs v;
    if (StatfsMapfs(&v) != 0) return -1;
    FillStatfs(v, s);
    return 0;
  });
}
MAPFS_EXPORT int statfs64(const char* path, struct statfs64* s) { return statfs(path, reinterpret_cast<struct statfs*>(s)); }
MAPFS_EXPORT int fstatfs(int fd, struct statfs* s) {
  if (!MapfsFd(fd)) return REAL(fstatfs)(fd, s);
  struct statvfs v;
  if (StatfsMapfs(&v) != 0) return -1;
  FillStatfs(v, s);
  return 0;
}
MAPFS_EXPORT int fstatfs64(int fd, struct statfs64* s) { return fstatfs(fd, reinterpret_cast<struct statfs*>(s)); }
MAPFS_EXPORT int statvfs(const char* path, struct statvfs* v) {
  return FollowOut(AT_FDCWD, path, true, [&](int, const char* p) {
    Route r = MapfsPath(AT_FDCWD, p);
    if (!r.mapfs) return REAL(statvfs)(r.Kernel(p), v);
    struct stat st;
    if (StatRoute(r, &st, true) != 0) return -1;
    return StatfsMapfs(v);
  });
}
MAPFS_EXPORT int statvfs64(const char* path, struct statvfs64* v) { return statvfs(path, reinterpret_cast<struct statvfs*>(v)); }
MAPFS_EXPORT int fstatvfs(int fd, struct statvfs* v) {
  if (!MapfsFd(fd)) return REAL(fstatvfs)(fd, v);
  return StatfsMapfs(v);
}
MAPFS_EXPORT int fstatvfs64(int fd, struct statvfs64* v) { return fstatvfs(fd, reinterpret_cast<struct statvfs*>(v)); }

// ---------------------------------------------------------------- access

MAPFS_EXPORT int faccessat(int dirfd, const char* path, int mode, int flags) {
  return FollowOut(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), [&](int d, const char* p) {
    Route r = MapfsPath(d, p);
    if (!r.mapfs) return REAL(faccessat)(d, r.Kernel(p), mode, flags);
    fs::FileSystem* f = FsOrFail();
    if (f == nullptr) return -1;
    CoreScope cs;
    return Ret(f->Access(r.path, mode, flags & ~AT_EMPTY_PATH, r.at));
  });
}
MAPFS_EXPORT int access(const char* path, int mode) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(access)(r.Kernel(path), mode);
  return faccessat(AT_FDCWD, path, mode, 0);
}
MAPFS_EXPORT int euidaccess(const char* path, int mode) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(euidaccess)(r.Kernel(path), mode);
  return faccessat(AT_FDCWD, path, mode, AT_EACCESS);
}
MAPFS_EXPORT int eaccess(const char* path, int mode) { return euidaccess(path, mode); }

// ---------------------------------------------------------------- names

MAPFS_EXPORT int unlinkat(int dirfd, const char* path, int flags) {
  return FollowOut(dirfd, path, false, [&](int d, const char* p) {
    Route r = MapfsPath(d, p);
    if (!r.mapfs) return REAL(unlinkat)(d, r.Kernel(p), flags);
    if (flags & ~AT_REMOVEDIR) return FailErrno(EINVAL);
    fs::FileSystem* f = FsOrFail();
    if (f == nullptr) return -1;
    CoreScope cs;
    return Ret((flags & AT_REMOVEDIR) ? f->Rmdir(r.path, r.at) : f->Unlink(r.path, r.at));
  });
}
MAPFS_EXPORT int unlink(const char* path) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(unlink)(r.Kernel(path));
  return unlinkat(AT_FDCWD, path, 0);
}
MAPFS_EXPORT int rmdir(const char* path) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(rmdir)(r.Kernel(path));
  return unlinkat(AT_FDCWD, path, AT_REMOVEDIR);
}
MAPFS_EXPORT int remove(const char* path) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(remove)(r.Kernel(path));
  if (unlinkat(AT_FDCWD, path, 0) == 0) return 0;
  if (errno != EISDIR) return -1;
  return unlinkat(AT_FDCWD, path, AT_REMOVEDIR);
}

MAPFS_EXPORT int renameat2(int olddirfd, const char* from, int newdirfd, const char* to, unsigned flags) {
  return Rename2(olddirfd, from, newdirfd, to, flags, KernelRenameat2);
}
MAPFS_EXPORT int renameat(int olddirfd, const char* from, int newdirfd, const char* to) {
  return Rename2(olddirfd, from, newdirfd, to, 0, KernelRenameat2);
}
MAPFS_EXPORT int rename(const char* from, const char* to) {
  Route a = MapfsPath(AT_FDCWD, from), b = MapfsPath(AT_FDCWD, to);
  if (!a.mapfs && !b.mapfs) return REAL(rename)(a.Kernel(from), b.Kernel(to));
  return Rename2(AT_FDCWD, from, AT_FDCWD, to, 0, KernelRenameat2);
}

MAPFS_EXPORT int linkat(int olddirfd, const char* from, int newdirfd, const char* to, int flags) {
  Route a = MapfsPath(olddirfd, from), b = MapfsPath(newdirfd, to);
  if (!a.mapfs && !b.mapfs) return REAL(linkat)(olddirfd, a.Kernel(from), newdirfd, b.Kernel(to), flags);
  if (a.mapfs != b.mapfs) return FailErrno(EXDEV);
  if (flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH)) return FailErrno(EINVAL);
  fs::FileSystem* f = FsOrFail();
  if (f == nullptr) return -1;
  CoreScope cs;
  return Ret(f->Link(a.path, b.path, flags & AT_SYMLINK_FOLLOW, a.at, b.at));
}
MAPFS_EXPORT int link(const char* from, const char* to) {
  Route a = MapfsPath(AT_FDCWD, from), b = MapfsPath(AT_FDCWD, to);
  if (!a.mapfs && !b.mapfs) return REAL(link)(a.Kernel(from), b.Kernel(to));
  return linkat(AT_FDCWD, from, AT_FDCWD, to, 0);
}

MAPFS_EXPORT int symlinkat(const char* target, int dirfd, const char* path) {
  return FollowOut(dirfd, path, false, [&](int d, const char* p) {
    Route r = MapfsPath(d, p);
    if (!r.mapfs) return REAL(symlinkat)(target, d, r.Kernel(p));
    if (target == nullptr) return FailErrno(EFAULT);
    fs::FileSystem* f = FsOrFail();
    if (f == nullptr) return -1;
    CoreScope cs;
    return Ret(f->Symlink(target, r.path, r.at));
  });
}
MAPFS_EXPORT int symlink(const char* target, const char* path) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(symlink)(target, r.Kernel(path));
  return symlinkat(target, AT_FDCWD, path);
}

MAPFS_EXPORT ssize_t readlinkat(int dirfd, const char* path, char* buf, size_t size) {
  return FollowOut(dirfd, path, false, [&](int d, const char* p) -> ssize_t {
    Route r = MapfsPath(d, p);
    if (!r.mapfs) return REAL(readlinkat)(d, r.Kernel(p), buf, size);
    if (size == 0) return FailErrno(EINVAL);
    fs::FileSystem* f = FsOrFail();
    if (f == nullptr) return -1;
    CoreScope cs;
    auto t = f->Readlink(r.path, r.at);  // the stored target, unchanged
    if (!t.ok()) return Fail(t.status());
    size_t n = std::min(size, t->size());
    std::memcpy(buf, t->data(), n);
    return static_cast<ssize_t>(n);
  });
}
MAPFS_EXPORT ssize_t readlink(const char* path, char* buf, size_t size) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(readlink)(r.Kernel(path), buf, size);
  return readlinkat(AT_FDCWD, path, buf, size);
}
MAPFS_EXPORT ssize_t __readlink_chk(const char* path, char* buf, size_t size, size_t buflen) {
  FortifyCheck(size > buflen);
  return readlink(path, buf, size);
}
MAPFS_EXPORT ssize_t __readlinkat_chk(int dirfd, const char* path, char* buf, size_t size, size_t buflen) {
  FortifyCheck(size > buflen);
  return readlinkat(dirfd, path, buf, size);
}

MAPFS_EXPORT int mkdirat(int dirfd, const char* path, mode_t mode) {
  return FollowOut(dirfd, path, false, [&](int d, const char* p) {
    Route r = MapfsPath(d, p);
    if (!r.mapfs) return REAL(mkdirat)(d, r.Kernel(p), mode);
    fs::FileSystem* f = FsOrFail();
    if (f == nullptr) return -1;
    CoreScope cs;
    return Ret(f->Mkdir(r.path, mode & ~mapfs::CurrentUmask(), r.at));
  });
}
MAPFS_EXPORT int mkdir(const char* path, mode_t mode) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(mkdir)(r.Kernel(path), mode);
  return mkdirat(AT_FDCWD, path, mode);
}

// FIFOs, socket and device nodes are recorded in the pool (as the FUSE
// mount's mknod records them), so programs that make them and only look at
// them (tar and cp -a of a FIFO, shutil's special-file check, stat) work;
// opening one under the shim is ENXIO (the kernel serves them on the mount).
// Device nodes need root, as the kernel's CAP_MKNOD (the core's rule for
// "root" is the effective uid, fs/cred.h).
MAPFS_EXPORT int mknodat(int dirfd, const char* path, mode_t mode, dev_t dev) {
  return FollowOut(dirfd, path, false, [&](int d, const char* p) {
    Route r = MapfsPath(d, p);
    if (!r.mapfs) return REAL(mknodat)(d, r.Kernel(p), mode, dev);
    mode_t type = mode & S_IFMT;
    if (type == S_IFREG || type == 0) {
      int fd = OpenMapfs(r, O_CREAT | O_EXCL | O_WRONLY, mode & 07777);
      return fd < 0 ? -1 : close(fd);
    }
    bool device = type == S_IFCHR || type == S_IFBLK;
    if (type != S_IFIFO && type != S_IFSOCK && !device) return FailErrno(EINVAL);
    if (device && ::geteuid() != 0) return FailErrno(EPERM);
    fs::FileSystem* f = FsOrFail();
    if (f == nullptr) return -1;
    CoreScope cs;
    return Ret(f->Mknod(r.path, type | (mode & 07777 & ~mapfs::CurrentUmask()), device ? dev : 0, r.at));
  });
}
MAPFS_EXPORT int mknod(const char* path, mode_t mode, dev_t dev) { return mknodat(AT_FDCWD, path, mode, dev); }
MAPFS_EXPORT int mkfifoat(int dirfd, const char* path, mode_t mode) {
  return mknodat(dirfd, path, S_IFIFO | (mode & 07777), 0);
}
MAPFS_EXPORT int mkfifo(const char* path, mode_t mode) { return mkfifoat(AT_FDCWD, path, mode); }

// ---------------------------------------------------------------- attributes

MAPFS_EXPORT int fchmodat(int dirfd, const char* path, mode_t mode, int flags) {
  return FollowOut(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), [&](int d, const char* p) {
    Route r = MapfsPath(d, p);
    if (!r.mapfs) return REAL(fchmodat)(d, r.Kernel(p), mode, flags);
    fs::FileSystem* f = FsOrFail();
    if (f == nullptr) return -1;
    if (flags & AT_SYMLINK_NOFOLLOW) {
      struct stat st;
      if (StatRoute(r, &st, false) != 0) return -1;
      if (S_ISLNK(st.st_mode)) return FailErrno(EOPNOTSUPP);  // as Linux
    }
    CoreScope cs;
    return Ret(f->Chmod(r.path, mode, true, r.at));
  });
}
MAPFS_EXPORT int chmod(const char* path, mode_t mode) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(chmod)(r.Kernel(path), mode);
  return fchmodat(AT_FDCWD, path, mode, 0);
}
MAPFS_EXPORT int lchmod(const char* path, mode_t mode) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(lchmod)(r.Kernel(path), mode);
  return fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW);
}
MAPFS_EXPORT int fchmod(int fd, mode_t mode) {
  if (DescRef d = MapfsFd(fd)) {
    CoreScope cs;
    return Ret(d->fsys->Fchmod(*d->file, mode));
  }
  return REAL(fchmod)(fd, mode);
}

MAPFS_EXPORT int fchownat(int dirfd, const char* path, uid_t uid, gid_t gid, int flags) {
  if (path != nullptr && path[0] == '\0' && (flags & AT_EMPTY_PATH)) {
    if (DescRef d = MapfsFd(dirfd)) {
      CoreScope cs;
      return Ret(d->fsys->Fchown(*d->file, uid, gid));
    }
  }
  return FollowOut(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), [&](int d, const char* p) {
    Route r = MapfsPath(d, p);
    if (!r.mapfs) return REAL(fchownat)(d, r.Kernel(p), uid, gid, flags);
    fs::FileSystem* f = FsOrFail();
    if (f == nullptr) return -1;
    CoreScope cs;
    return Ret(f->Chown(r.path, uid, gid, !(flags & AT_SYMLINK_NOFOLLOW), r.at));
  });
}
MAPFS_EXPORT int chown(const char* path, uid_t uid, gid_t gid) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(chown)(r.Kernel(path), uid, gid);
  return fchownat(AT_FDCWD, path, uid, gid, 0);
}
MAPFS_EXPORT int lchown(const char* path, uid_t uid, gid_t gid) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(lchown)(r.Kernel(path), uid, gid);
  return fchownat(AT_FDCWD, path, uid, gid, AT_SYMLINK_NOFOLLOW);
}
MAPFS_EXPORT int fchown(int fd, uid_t uid, gid_t gid) {
  if (DescRef d = MapfsFd(fd)) {
    CoreScope cs;
    return Ret(d->fsys->Fchown(*d->file, uid, gid));
  }
  return REAL(fchown)(fd, uid, gid);
}

MAPFS_EXPORT int utimensat(int dirfd, const char* path, const struct timespec ts[2], int flags) {
  return FollowOut(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW),
                   [&](int d, const char* p) { return Utimens(d, p, ts, flags); });
}
MAPFS_EXPORT int futimens(int fd, const struct timespec ts[2]) {
  if (MapfsFd(fd)) return Utimens(fd, nullptr, ts, 0);
  return REAL(futimens)(fd, ts);
}
MAPFS_EXPORT int utimes(const char* path, const struct timeval tv[2]) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(utimes)(r.Kernel(path), tv);
  struct timespec ts[2];
  return utimensat(AT_FDCWD, path, TvToTs(tv, ts) ? ts : nullptr, 0);
}
MAPFS_EXPORT int lutimes(const char* path, const struct timeval tv[2]) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(lutimes)(r.Kernel(path), tv);
  struct timespec ts[2];
  return utimensat(AT_FDCWD, path, TvToTs(tv, ts) ? ts : nullptr, AT_SYMLINK_NOFOLLOW);
}
MAPFS_EXPORT int futimes(int fd, const struct timeval tv[2]) {
  if (!MapfsFd(fd)) return REAL(futimes)(fd, tv);
  struct timespec ts[2];
  return Utimens(fd, nullptr, TvToTs(tv, ts) ? ts : nullptr, 0);
}
MAPFS_EXPORT int futimesat(int dirfd, const char* path, const struct timeval tv[2]) {
  Route r = MapfsPath(dirfd, path);
  if (!r.mapfs) return REAL(futimesat)(dirfd, r.Kernel(path), tv);
  struct timespec ts[2];
  return utimensat(dirfd, path, TvToTs(tv, ts) ? ts : nullptr, 0);
}
MAPFS_EXPORT int utime(const char* path, const struct utimbuf* t) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(utime)(r.Kernel(path), t);
  struct timespec ts[2];
  if (t != nullptr) {
    ts[0] = {t->actime, 0};
    ts[1] = {t->modtime, 0};
  }
  return utimensat(AT_FDCWD, path, t ? ts : nullptr, 0);
}

MAPFS_EXPORT int truncate(const char* path, off_t size) {
  return FollowOut(AT_FDCWD, path, true, [&](int, const char* p) {
    Route r = MapfsPath(AT_FDCWD, p);
    if (!r.mapfs && (g_ov_count.load() > 0 || OverlayVirtual()) && OverlayPath(AT_FDCWD, r.Kernel(p))) {
      // The file may be open in the overlay: truncated through it, so its
      // staged bytes and cached size follow. A virtualized file is always
      // truncated through the engine (the kernel would cut its format).
      int fd = open(r.Kernel(p), O_WRONLY | O_CLOEXEC);
      if (fd < 0) return -1;
      int rc = ftruncate(fd, size);
      int e = errno;
      close(fd);
      errno = e;
      return rc;
    }
    if (!r.mapfs) return REAL(truncate)(r.Kernel(p), size);
    fs::FileSystem* f = FsOrFail();
    if (f == nullptr) return -1;
    CoreScope cs;
    return Ret(f->Truncate(r.path, size, r.at));
  });
}
MAPFS_EXPORT int truncate64(const char* path, off64_t size) { return truncate(path, size); }

// ---------------------------------------------------------------- cwd

namespace {
int ChdirOnce(const char* path) {
  Route r = MapfsPath(AT_FDCWD, path);
  Shim& s = Shim::Get();
  if (!r.mapfs) {
    int rc = REAL(chdir)(r.Kernel(path));
    if (rc == 0 && s.CwdIsMapfs()) s.LeaveMapfsCwd();
    return rc;
  }
  fs::FileSystem* f = FsOrFail();
  if (f == nullptr) return -1;
  struct stat st;
  if (StatRoute(r, &st, true) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) return FailErrno(ENOTDIR);
  uint64_t ino;
  {
    CoreScope cs;
    auto l = f->Lookup(r.path, true, r.at);
    if (!l.ok()) return Fail(l.status());
    ino = *l;
  }
  std::string p = NormalizePath(AbsoluteOf(r));
  return s.Chdir(ino, p);
}
}  // namespace

MAPFS_EXPORT int chdir(const char* path) {
  if (in_core) return REAL(chdir)(path);
  return FollowOut(AT_FDCWD, path, true, [](int, const char* p) { return ChdirOnce(p); });
}
MAPFS_EXPORT int fchdir(int fd) {
  if (in_core) return REAL(fchdir)(fd);
  DescRef d = MapfsFd(fd);
  if (!d) {
    int rc = REAL(fchdir)(fd);
    Shim& s = Shim::Get();
    if (rc == 0 && s.CwdIsMapfs()) s.LeaveMapfsCwd();
    return rc;
  }
  if (!d->file->is_dir) return FailErrno(ENOTDIR);
  return Shim::Get().Chdir(d->file->ino, d->path);
}

MAPFS_EXPORT char* getcwd(char* buf, size_t size) {
  if (in_core) return REAL(getcwd)(buf, size);
  Shim& s = Shim::Get();
  if (!s.CwdIsMapfs()) return REAL(getcwd)(buf, size);
  std::string p = s.prefix() + (s.CwdPath() == "/" ? "" : s.CwdPath());
  if (buf == nullptr) {
    if (size != 0 && size < p.size() + 1) {
      errno = ERANGE;
      return nullptr;
    }
    return ::strdup(p.c_str());
  }
  if (size == 0) {
    errno = EINVAL;
    return nullptr;
  }
  if (size < p.size() + 1) {
    errno = ERANGE;
    return nullptr;
  }
  std::memcpy(buf, p.c_str(), p.size() + 1);
  return buf;
}
MAPFS_EXPORT char* __getcwd_chk(char* buf, size_t size, size_t buflen) {
  FortifyCheck(size > buflen);
  return getcwd(buf, size);
}
MAPFS_EXPORT char* get_current_dir_name(void) {
  if (in_core || !Shim::Get().CwdIsMapfs()) return REAL(get_current_dir_name)();
  return getcwd(nullptr, 0);
}
MAPFS_EXPORT char* getwd(char* buf) { return getcwd(buf, PATH_MAX); }

// realpath: glibc resolves with its own internal lstat/readlink, which the
// shim cannot see, so mapfs paths are resolved here, one name at a time.
MAPFS_EXPORT char* realpath(const char* path, char* out) {
  if (in_core || path == nullptr) return REAL(realpath)(path, out);
  Shim& s = Shim::Get();
  Route r0 = MapfsPath(AT_FDCWD, path);
  if (!r0.mapfs && (path[0] == '/' || !s.CwdIsMapfs())) {
    // A kernel path may still lead into the pool through a kernel symlink
    // to the prefix, which glibc cannot follow: resolve it here then.
    char* k = REAL(realpath)(r0.Kernel(path), out);
    if (k != nullptr || errno != ENOENT) return k;
  }
  if (path[0] == '\0') {
    errno = ENOENT;
    return nullptr;
  }
  std::string todo = path[0] == '/' ? std::string(path) : (s.prefix() + s.CwdPath() + "/" + path);
  std::string done;  // resolved so far, absolute
  int links = 0;
  while (!todo.empty()) {
    size_t i = todo.find_first_not_of('/');
    if (i == std::string::npos) break;
    size_t j = todo.find('/', i);
    std::string c = todo.substr(i, j == std::string::npos ? std::string::npos : j - i);
    todo = j == std::string::npos ? "" : todo.substr(j);
    if (c == ".") continue;
    if (c == "..") {
      size_t k = done.rfind('/');
      done = k == std::string::npos ? "" : done.substr(0, k);
      continue;
    }
    std::string next = done + "/" + c;
    struct stat st;
    if (lstat(next.c_str(), &st) != 0) return nullptr;
    if (S_ISLNK(st.st_mode)) {
      if (++links > 40) {
        errno = ELOOP;
        return nullptr;
      }
      char t[PATH_MAX];
      ssize_t n = readlink(next.c_str(), t, sizeof t);
      if (n < 0) return nullptr;
      std::string target(t, static_cast<size_t>(n));
      if (!target.empty() && target[0] == '/') done.clear();
      todo = target + todo;
      continue;
    }
    if (!S_ISDIR(st.st_mode) && !todo.empty() && todo.find_first_not_of('/') != std::string::npos) {
      errno = ENOTDIR;
      return nullptr;
    }
    done = next;
  }
  if (done.empty()) done = "/";
  if (done.size() >= PATH_MAX) {
    errno = ENAMETOOLONG;
    return nullptr;
  }
  if (out == nullptr) return ::strdup(done.c_str());
  std::memcpy(out, done.c_str(), done.size() + 1);
  return out;
}
MAPFS_EXPORT char* __realpath_chk(const char* path, char* out, size_t outlen) {
  FortifyCheck(outlen < PATH_MAX);
  return realpath(path, out);
}
MAPFS_EXPORT char* canonicalize_file_name(const char* path) { return realpath(path, nullptr); }
