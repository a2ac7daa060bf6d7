// Wrappers of the descriptor calls: open, close, dup, read, write, seek,
// sync, truncate, allocate, fcntl.
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "common/process.h"
#include "preload/calls.h"
#include "preload/vector_io.h"
#include "preload/outside.h"
#include "preload/locks.h"
#include "preload/overlay_fds.h"

namespace mapfs::preload {

std::string AbsoluteOf(const Route& r) {
  if (!r.path.empty() && r.path[0] == '/') return r.path;
  return r.base + "/" + r.path;
}

int OpenMapfs(const Route& r, int flags, mode_t mode) {
  fs::FileSystem* f = FsOrFail();
  if (f == nullptr) return -1;
  if ((flags & __O_TMPFILE) == __O_TMPFILE) return FailErrno(EOPNOTSUPP);
  if (flags & O_CREAT) mode &= ~CurrentUmask();
  // O_PATH (a handle to walk from, not to read): opened read-only here,
  // and like Linux it needs no permission on the file itself.
  if (flags & O_PATH) flags = (flags & (O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW)) | O_RDONLY | O_PATH;
  CoreScope cs;
  auto of = f->Open(r.path, flags & ~(O_CLOEXEC | O_NOCTTY | O_LARGEFILE), mode, r.at);
  if (!of.ok()) return Fail(of.status());
  auto d = std::make_shared<Desc>(f, std::move(*of));
  d->path = AbsoluteOf(r);
  int fd = Shim::Get().Install(d, flags & O_CLOEXEC);
  if (fd >= 0 && fd <= 2) Shim::Get().FixStdio(fd);
  return fd;
}

namespace {

// open follows a symlink in the last name unless told not to, or told to
// create it exclusively (then the name itself must be free).
bool OpenFollows(int flags) { return !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL); }

int OpenAny(int dirfd, const char* path, int flags, mode_t mode, int (*real)(int, const char*, int, ...)) {
  if (in_core) return OverlayCoreOpened(real(dirfd, path, flags, mode), path);
  return FollowOut(dirfd, path, OpenFollows(flags), [&](int d, const char* p) {
    Route r = MapfsPath(d, p);
    if (r.mapfs) return OpenMapfs(r, flags, mode);
    return OverlayAfterOpen(real(d, r.Kernel(p), OverlayKernelFlags(d, r.Kernel(p), flags), mode), d, r.Kernel(p), flags);
  });
}

// Calls that use the description's offset hold its position lock (see
// Desc::pos_mu) and find the offset where it lives: in the kernel after a
// hand-off, else in the OpenFile. Either way the core gets it explicitly
// (so it takes no position lock of its own) and the shim advances it; only
// an O_APPEND write on the shim's offset leaves that to the core, which
// alone knows where the append landed.
// Read-only for the pool (CoreReadScope), as mapfs_pread: the reader lock
// stores into this mount's own row only, left writable; the position is
// the shim's or the kernel's; rare stores open the rights themselves.
ssize_t ReadAt(Desc& d, int fd, void* buf, size_t n, int64_t off) {
  CoreReadScope cs;
  if (off < 0) {
    PositionLock pos(d, fd);
    if (!pos.kernel()) {
      uint64_t cur = d.file->offset;
      auto r = d.fsys->Read(*d.file, buf, n, static_cast<int64_t>(cur));
      if (!r.ok()) return Fail(r.status());
      d.file->offset = cur + *r;
      return static_cast<ssize_t>(*r);
    }
    Shim& s = Shim::Get();
    int64_t cur = s.Offset(d, fd);
    auto r = d.fsys->Read(*d.file, buf, n, cur);
    if (!r.ok()) return Fail(r.status());
    s.SetOffset(d, fd, cur + static_cast<int64_t>(*r));
    return static_cast<ssize_t>(*r);
  }
  auto r = d.fsys->Read(*d.file, buf, n, off);
  return r.ok() ? static_cast<ssize_t>(*r) : Fail(r.status());
}

ssize_t WriteAt(Desc& d, int fd, const void* buf, size_t n, int64_t off) {
  CoreScope cs;
  if (off < 0) {
    PositionLock pos(d, fd);
    bool append = d.file->flags & O_APPEND;
    if (!pos.kernel()) {
      uint64_t cur = d.file->offset;
      auto r = d.fsys->Write(*d.file, buf, n, append ? -1 : static_cast<int64_t>(cur));
      if (!r.ok()) return Fail(r.status());
      if (!append) d.file->offset = cur + *r;
      return static_cast<ssize_t>(*r);
    }
    Shim& s = Shim::Get();
    int64_t cur = append ? -1 : s.Offset(d, fd);
    auto r = d.fsys->Write(*d.file, buf, n, cur);
    if (!r.ok()) return Fail(r.status());
    s.SetOffset(d, fd, append ? static_cast<int64_t>(d.file->offset) : cur + static_cast<int64_t>(*r));
    return static_cast<ssize_t>(*r);
  }
  auto r = d.fsys->Write(*d.file, buf, n, off);
  return r.ok() ? static_cast<ssize_t>(*r) : Fail(r.status());
}

ssize_t ReadV(Desc& d, int fd, const struct iovec* iov, int cnt, int64_t off) {
  return ScatterRead(iov, cnt, [&](void* buf, size_t n) { return ReadAt(d, fd, buf, n, off); });
}

ssize_t WriteV(Desc& d, int fd, const struct iovec* iov, int cnt, int64_t off) {
  return GatherWrite(iov, cnt, [&](const void* buf, size_t n) { return WriteAt(d, fd, buf, n, off); });
}

int CloseMapfs(int fd) {
  Shim& s = Shim::Get();
  DescRef d = s.Remove(fd);
  REAL(close)(fd);
  if (d) {
    ReleaseProcessLocks(d->file->ino);
    d.reset();  // the description closes with its last descriptor
  }
  return 0;
}

int Dup3(int oldfd, int newfd, int flags, bool is_dup2) {
  Shim& s = Shim::Get();
  // The shim's own descriptors are not the program's to replace or copy
  // (close() refuses them too): replacing the pool's or the placeholder's
  // would silently redirect later calls.
  if (!in_core && (IsInternal(newfd) || IsInternal(oldfd))) return FailErrno(EBADF);
  // Replacing newfd closes it, which may release locks: published first,
  // as for close; when that fails nothing is replaced (the lock stays).
  if (oldfd != newfd && OverlayBeforeRelease() != 0) return -1;
  DescRef d = MapfsFd(oldfd);
  if (!d) {
    if (in_core) return is_dup2 ? REAL(dup2)(oldfd, newfd) : REAL(dup3)(oldfd, newfd, flags);
    DescRef old = s.IsMapfs(newfd) && oldfd != newfd ? s.Lookup(newfd) : nullptr;
    OvRef ov = OverlayFd(oldfd);
    int r = is_dup2 ? REAL(dup2)(oldfd, newfd) : REAL(dup3)(oldfd, newfd, flags);
    if (r >= 0 && old) {
      s.Remove(newfd);
      ReleaseProcessLocks(old->file->ino);
    }
    // newfd now names oldfd's description: an overlay one, or not one any more.
    if (r >= 0 && oldfd != newfd && ov) OvInstall(newfd, std::move(ov));
    else if (r >= 0 && oldfd != newfd && g_ov_count.load() > 0) OvForget(newfd);
    return r;
  }
  if (oldfd == newfd) return is_dup2 ? newfd : FailErrno(EINVAL);
  if (flags & ~O_CLOEXEC) return FailErrno(EINVAL);
  if (g_ov_count.load() > 0) OvForget(newfd);
  return s.InstallAt(std::move(d), newfd, flags & O_CLOEXEC);
}

}  // namespace
}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

// ---------------------------------------------------------------- open

#define MAPFS_OPEN_MODE(flags)                                       \
  mode_t mode = 0;                                                   \
  if ((flags) & (O_CREAT | __O_TMPFILE)) {                           \
    va_list ap;                                                      \
    va_start(ap, flags);                                             \
    mode = static_cast<mode_t>(va_arg(ap, int));                     \
    va_end(ap);                                                      \
  }

MAPFS_EXPORT int open(const char* path, int flags, ...) {
  MAPFS_OPEN_MODE(flags);
  if (in_core) return OverlayCoreOpened(REAL(open)(path, flags, mode), path);  // the core's own files
  return FollowOut(AT_FDCWD, path, OpenFollows(flags), [&](int, const char* p) {
    Route r = MapfsPath(AT_FDCWD, p);
    if (r.mapfs) return OpenMapfs(r, flags, mode);
    return OverlayAfterOpen(REAL(open)(r.Kernel(p), OverlayKernelFlags(AT_FDCWD, r.Kernel(p), flags), mode), AT_FDCWD,
                            r.Kernel(p), flags);
  });
}
MAPFS_EXPORT int open64(const char* path, int flags, ...) {
  MAPFS_OPEN_MODE(flags);
  if (in_core) return OverlayCoreOpened(REAL(open64)(path, flags, mode), path);
  return FollowOut(AT_FDCWD, path, OpenFollows(flags), [&](int, const char* p) {
    Route r = MapfsPath(AT_FDCWD, p);
    if (r.mapfs) return OpenMapfs(r, flags, mode);
    return OverlayAfterOpen(REAL(open64)(r.Kernel(p), OverlayKernelFlags(AT_FDCWD, r.Kernel(p), flags), mode), AT_FDCWD,
                            r.Kernel(p), flags);
  });
}
MAPFS_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  MAPFS_OPEN_MODE(flags);
  return OpenAny(dirfd, path, flags, mode, REAL(openat));
}
MAPFS_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  MAPFS_OPEN_MODE(flags);
  return OpenAny(dirfd, path, flags, mode, REAL(openat64));
}
MAPFS_EXPORT int __open_2(const char* path, int flags) { return open(path, flags); }
MAPFS_EXPORT int __open64_2(const char* path, int flags) { return open64(path, flags); }
MAPFS_EXPORT int __openat_2(int dirfd, const char* path, int flags) { return openat(dirfd, path, flags); }
MAPFS_EXPORT int __openat64_2(int dirfd, const char* path, int flags) { return openat64(dirfd, path, flags); }
MAPFS_EXPORT int creat(const char* path, mode_t mode) { return open(path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
MAPFS_EXPORT int creat64(const char* path, mode_t mode) { return open64(path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

// The core's own memfds (map mirrors, fs/map_mirror.h) are internal
// descriptors, out of the program's reach, as its opens are.
MAPFS_EXPORT int memfd_create(const char* name, unsigned int flags) {
  if (in_core) return MoveHigh(REAL(memfd_create)(name, flags));
  return REAL(memfd_create)(name, flags);
}

// ---------------------------------------------------------------- close, dup

MAPFS_EXPORT int close(int fd) {
  if (in_core) return CloseInternal(fd);  // the core's own descriptor (or a transient one)
  if (IsInternal(fd)) return FailErrno(EBADF);  // not the program's to close
  if (Shim::Get().IsMapfs(fd)) return CloseMapfs(fd);
  // The close may release locks: what this process staged is published
  // first, as for an unlock. If that fails the descriptor is closed all the
  // same (a program does not retry a close; Linux frees the number even
  // when close reports EIO) and the error is reported.
  int published = OverlayBeforeRelease(), err = errno;
  // An overlay number is forgotten before the kernel frees it for reuse.
  if (OverlayFd(fd)) OvForget(fd);
  int r = REAL(close)(fd);
  if (r == 0 && published != 0) return FailErrno(err);
  return r;
}

// Closes [lo, hi] except the shim's and the core's own descriptors.
MAPFS_EXPORT int close_range(unsigned lo, unsigned hi, int flags) {
  if (in_core) return REAL(close_range)(lo, hi, flags);
  if (lo > hi) return FailErrno(EINVAL);
  // As close: locks may go with the descriptors. Nothing is closed when
  // publishing failed, so the locks stay and the program sees the error.
  if (!(flags & CLOSE_RANGE_CLOEXEC) && OverlayBeforeRelease() != 0) return -1;
  unsigned from = lo;
  for (int fd; from <= hi && (fd = NextInternal(from, hi)) >= 0; from = static_cast<unsigned>(fd) + 1)
    if (static_cast<unsigned>(fd) > from && REAL(close_range)(from, static_cast<unsigned>(fd) - 1, flags) != 0) return -1;
  if (from <= hi && REAL(close_range)(from, hi, flags) != 0) return -1;
  if (!(flags & CLOSE_RANGE_CLOEXEC)) {
    Shim::Get().ForgetRange(lo, hi);
    if (g_ov_count.load() > 0) OvForgetRange(lo, hi);
  }
  return 0;
}

MAPFS_EXPORT void closefrom(int lo) {
  if (lo < 0) lo = 0;
  close_range(static_cast<unsigned>(lo), ~0u, 0);
}

MAPFS_EXPORT int dup(int fd) {
  // The core's duplicates are internal, as its opens (OverlayCoreOpened).
  if (in_core) return DupHigh(fd);
  if (DescRef d = MapfsFd(fd)) return Shim::Get().Install(std::move(d), false);
  if (OvRef o = OverlayFd(fd)) {
    int r = REAL(dup)(fd);
    if (r >= 0) OvInstall(r, std::move(o));
    return r;
  }
  return REAL(dup)(fd);
}
MAPFS_EXPORT int dup2(int oldfd, int newfd) { return Dup3(oldfd, newfd, 0, true); }
MAPFS_EXPORT int dup3(int oldfd, int newfd, int flags) { return Dup3(oldfd, newfd, flags, false); }

// ---------------------------------------------------------------- read, write

MAPFS_EXPORT ssize_t read(int fd, void* buf, size_t n) {
  if (DescRef d = MapfsFd(fd)) return ReadAt(*d, fd, buf, n, -1);
  if (OvRef o = OverlayFd(fd)) return OvRead(*o, fd, buf, n, -1);
  return KernelStores([&] { OvBeforeKernelStores(buf, n); }, [&] { return REAL(read)(fd, buf, n); });
}
MAPFS_EXPORT ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  FortifyCheck(n > buflen);
  return read(fd, buf, n);
}
MAPFS_EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  if (DescRef d = MapfsFd(fd)) return WriteAt(*d, fd, buf, n, -1);
  if (OvRef o = OverlayFd(fd)) return OvWrite(*o, fd, buf, n, -1);
  return REAL(write)(fd, buf, n);
}
MAPFS_EXPORT ssize_t pread(int fd, void* buf, size_t n, off_t off) {
  if (DescRef d = MapfsFd(fd)) return off < 0 ? FailErrno(EINVAL) : ReadAt(*d, fd, buf, n, off);
  if (OvRef o = OverlayFd(fd)) return off < 0 ? FailErrno(EINVAL) : OvRead(*o, fd, buf, n, off);
  return KernelStores([&] { OvBeforeKernelStores(buf, n); }, [&] { return REAL(pread)(fd, buf, n, off); });
}
MAPFS_EXPORT ssize_t pread64(int fd, void* buf, size_t n, off_t off) { return pread(fd, buf, n, off); }
MAPFS_EXPORT ssize_t __pread_chk(int fd, void* buf, size_t n, off_t off, size_t buflen) {
  FortifyCheck(n > buflen);
  return pread(fd, buf, n, off);
}
MAPFS_EXPORT ssize_t __pread64_chk(int fd, void* buf, size_t n, off_t off, size_t buflen) {
  FortifyCheck(n > buflen);
  return pread(fd, buf, n, off);
}
MAPFS_EXPORT ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  if (DescRef d = MapfsFd(fd)) return off < 0 ? FailErrno(EINVAL) : WriteAt(*d, fd, buf, n, off);
  if (OvRef o = OverlayFd(fd)) return off < 0 ? FailErrno(EINVAL) : OvWrite(*o, fd, buf, n, off);
  return REAL(pwrite)(fd, buf, n, off);
}
MAPFS_EXPORT ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }

MAPFS_EXPORT ssize_t readv(int fd, const struct iovec* iov, int cnt) {
  if (DescRef d = MapfsFd(fd)) return ReadV(*d, fd, iov, cnt, -1);
  if (OvRef o = OverlayFd(fd)) return OvReadV(*o, fd, iov, cnt, -1);
  return KernelStores([&] { OvBeforeKernelStores(iov, cnt); }, [&] { return REAL(readv)(fd, iov, cnt); });
}
MAPFS_EXPORT ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  if (DescRef d = MapfsFd(fd)) return WriteV(*d, fd, iov, cnt, -1);
  if (OvRef o = OverlayFd(fd)) return OvWriteV(*o, fd, iov, cnt, -1);
  return REAL(writev)(fd, iov, cnt);
}
MAPFS_EXPORT ssize_t preadv(int fd, const struct iovec* iov, int cnt, off_t off) {
  if (DescRef d = MapfsFd(fd)) return off < 0 ? FailErrno(EINVAL) : ReadV(*d, fd, iov, cnt, off);
  if (OvRef o = OverlayFd(fd)) return off < 0 ? FailErrno(EINVAL) : OvReadV(*o, fd, iov, cnt, off);
  return KernelStores([&] { OvBeforeKernelStores(iov, cnt); }, [&] { return REAL(preadv)(fd, iov, cnt, off); });
}
MAPFS_EXPORT ssize_t preadv64(int fd, const struct iovec* iov, int cnt, off_t off) { return preadv(fd, iov, cnt, off); }
MAPFS_EXPORT ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  if (DescRef d = MapfsFd(fd)) return off < 0 ? FailErrno(EINVAL) : WriteV(*d, fd, iov, cnt, off);
  if (OvRef o = OverlayFd(fd)) return off < 0 ? FailErrno(EINVAL) : OvWriteV(*o, fd, iov, cnt, off);
  return REAL(pwritev)(fd, iov, cnt, off);
}
MAPFS_EXPORT ssize_t pwritev64(int fd, const struct iovec* iov, int cnt, off_t off) { return pwritev(fd, iov, cnt, off); }
MAPFS_EXPORT ssize_t preadv2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  if (DescRef d = MapfsFd(fd)) return ReadV(*d, fd, iov, cnt, off);  // flags are hints
  if (OvRef o = OverlayFd(fd)) return OvReadV(*o, fd, iov, cnt, off < 0 ? -1 : off);
  return KernelStores([&] { OvBeforeKernelStores(iov, cnt); },
                      [&] { return REAL(preadv2)(fd, iov, cnt, off, flags); });
}
MAPFS_EXPORT ssize_t preadv64v2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  return preadv2(fd, iov, cnt, off, flags);
}
MAPFS_EXPORT ssize_t pwritev2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  if (DescRef d = MapfsFd(fd)) {
    if (flags & ~(RWF_HIPRI | RWF_DSYNC | RWF_SYNC | RWF_NOWAIT | RWF_APPEND)) return FailErrno(EOPNOTSUPP);
    ssize_t r = WriteV(*d, fd, iov, cnt, (flags & RWF_APPEND) ? -1 : off);
    if (r >= 0 && (flags & (RWF_DSYNC | RWF_SYNC))) {
      CoreScope cs;
      (void)d->fsys->Fsync(*d->file);
    }
    return r;
  }
  if (OvRef o = OverlayFd(fd)) {
    if (flags & ~(RWF_HIPRI | RWF_DSYNC | RWF_SYNC | RWF_NOWAIT | RWF_APPEND)) return FailErrno(EOPNOTSUPP);
    ssize_t r = OvWriteV(*o, fd, iov, cnt, (flags & RWF_APPEND) || off < 0 ? -1 : off);
    if (r >= 0 && (flags & (RWF_DSYNC | RWF_SYNC)) && OvSync(*o) != 0) return -1;
    return r;
  }
  return REAL(pwritev2)(fd, iov, cnt, off, flags);
}
MAPFS_EXPORT ssize_t pwritev64v2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  return pwritev2(fd, iov, cnt, off, flags);
}

// Read-only for the pool (CoreReadScope): the offset lives in the shim's
// OpenFile or the placeholder's kernel position, Seek only reads the size.
MAPFS_EXPORT off_t lseek(int fd, off_t off, int whence) {
  if (DescRef d = MapfsFd(fd)) {
    CoreReadScope cs;
    Shim& s = Shim::Get();
    PositionLock pos(*d, fd);
    if (pos.kernel()) d->file->offset = static_cast<uint64_t>(s.Offset(*d, fd));
    auto r = d->fsys->Seek(*d->file, off, whence);
    if (!r.ok()) return Fail(r.status());
    if (pos.kernel()) s.SetOffset(*d, fd, static_cast<int64_t>(*r));
    return static_cast<off_t>(*r);
  }
  if (OvRef o = OverlayFd(fd)) return OvSeek(*o, fd, off, whence);
  return REAL(lseek)(fd, off, whence);
}
MAPFS_EXPORT off64_t lseek64(int fd, off64_t off, int whence) { return lseek(fd, off, whence); }

// ---------------------------------------------------------------- sync, size

MAPFS_EXPORT int fsync(int fd) {
  if (DescRef d = MapfsFd(fd)) {
    CoreScope cs;
    Status st = d->fsys->Fsync(*d->file);
    return st.ok() ? 0 : Fail(st);
  }
  if (OvRef o = OverlayFd(fd)) return OvSync(*o);
  return REAL(fsync)(fd);
}
MAPFS_EXPORT int fdatasync(int fd) {
  if (MapfsFd(fd) || OverlayFd(fd)) return fsync(fd);
  return REAL(fdatasync)(fd);
}
MAPFS_EXPORT int sync_file_range(int fd, off64_t off, off64_t n, unsigned flags) {
  if (MapfsFd(fd)) {
    if (off < 0 || n < 0 || (flags & ~7u)) return FailErrno(EINVAL);
    return fsync(fd);
  }
  if (OverlayFd(fd)) {
    if (off < 0 || n < 0 || (flags & ~7u)) return FailErrno(EINVAL);
    return fsync(fd);
  }
  return REAL(sync_file_range)(fd, off, n, flags);
}
// sync(): everything durable, mapfs files included (in posix mode their data
// waits for fsync otherwise).
MAPFS_EXPORT void sync(void) {
  if (!in_core) Shim::Get().SyncAll();
  OverlaySyncAll();
  REAL(sync)();
}
MAPFS_EXPORT int syncfs(int fd) {
  if (MapfsFd(fd)) return fsync(fd);
  if (OverlayFd(fd)) OverlaySyncAll();
  return REAL(syncfs)(fd);
}

MAPFS_EXPORT int ftruncate(int fd, off_t size) {
  if (DescRef d = MapfsFd(fd)) {
    CoreScope cs;
    Status st = d->fsys->Ftruncate(*d->file, size);
    return st.ok() ? 0 : Fail(st);
  }
  if (OvRef o = OverlayFd(fd)) return OvTruncate(*o, size);
  return REAL(ftruncate)(fd, size);
}
MAPFS_EXPORT int ftruncate64(int fd, off64_t size) { return ftruncate(fd, size); }

MAPFS_EXPORT int fallocate(int fd, int mode, off_t off, off_t len) {
  if (DescRef d = MapfsFd(fd)) {
    CoreScope cs;
    Status st = d->fsys->Fallocate(*d->file, mode, off, len);
    return st.ok() ? 0 : Fail(st);
  }
  if (OvRef o = OverlayFd(fd)) return OvFallocate(*o, fd, mode, off, len);
  return REAL(fallocate)(fd, mode, off, len);
}
MAPFS_EXPORT int fallocate64(int fd, int mode, off64_t off, off64_t len) { return fallocate(fd, mode, off, len); }
// posix_fallocate returns the error instead of setting errno.
MAPFS_EXPORT int posix_fallocate(int fd, off_t off, off_t len) {
  if (MapfsFd(fd) || OverlayFd(fd)) {
    if (off < 0 || len <= 0) return EINVAL;
    int saved = errno;
    int r = fallocate(fd, 0, off, len);
    int e = r == 0 ? 0 : errno;
    errno = saved;
    return e;
  }
  return REAL(posix_fallocate)(fd, off, len);
}
MAPFS_EXPORT int posix_fallocate64(int fd, off64_t off, off64_t len) { return posix_fallocate(fd, off, len); }
MAPFS_EXPORT int posix_fadvise(int fd, off_t off, off_t len, int advice) {
  if (MapfsFd(fd)) return (advice < 0 || advice > 5 || len < 0) ? EINVAL : 0;  // advice only
  return REAL(posix_fadvise)(fd, off, len, advice);
}
// readahead(2): the pool is memory, there is nothing to bring in; the
// kernel's checks (a readable descriptor of a regular file).
MAPFS_EXPORT ssize_t readahead(int fd, off64_t off, size_t n) {
  if (DescRef d = MapfsFd(fd)) {
    if ((d->file->flags & O_ACCMODE) == O_WRONLY) return FailErrno(EBADF);
    if (d->file->is_dir) return FailErrno(EINVAL);
    return 0;
  }
  return REAL(readahead)(fd, off, n);
}
MAPFS_EXPORT int posix_fadvise64(int fd, off64_t off, off64_t len, int advice) {
  return posix_fadvise(fd, off, len, advice);
}

// ---------------------------------------------------------------- fcntl

MAPFS_EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  if (SetsLock(cmd)) {
    // A coherence point of the overlay (OverlayBeforeLock), whatever the
    // descriptor: SQLite's WAL locks live in the -shm file, not the -wal.
    // Bytes it could not publish fail the call, which is not made.
    if (OverlayBeforeLock() != 0) return -1;
    int r;
    if (DescRef d = MapfsFd(fd)) r = RecordLock(*d, fd, cmd, static_cast<struct flock*>(arg));
    else r = REAL(fcntl)(fd, cmd, arg);
    if (r == 0) OverlayAfterLock();
    return r;
  }
  DescRef d = MapfsFd(fd);
  if (!d) {
    OvRef o = OverlayFd(fd);
    int r = REAL(fcntl)(fd, cmd, arg);
    if (o && r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) OvInstall(r, std::move(o));
    if (o && r >= 0 && cmd == F_SETFL) o->append = (reinterpret_cast<long>(arg) & O_APPEND) != 0;
    return r;
  }
  long iarg = reinterpret_cast<long>(arg);
  switch (cmd) {
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
      if (iarg < 0) return FailErrno(EINVAL);
      return Shim::Get().Install(std::move(d), cmd == F_DUPFD_CLOEXEC, static_cast<int>(iarg));
    case F_GETFD:
    case F_SETFD:
      return REAL(fcntl)(fd, cmd, arg);
    case F_GETFL: {
      int fl = d->file->flags & (O_ACCMODE | O_APPEND | O_NONBLOCK | O_SYNC | O_DSYNC | O_DIRECT | O_NOATIME |
                                 O_ASYNC | O_DIRECTORY | O_NOFOLLOW | O_PATH);
      return fl | 0100000;  // the kernel reports O_LARGEFILE on 64-bit
    }
    case F_SETFL: {
      constexpr int kSettable = O_APPEND | O_NONBLOCK | O_ASYNC | O_DIRECT | O_NOATIME;
      d->file->flags = (d->file->flags & ~kSettable) | (static_cast<int>(iarg) & kSettable);
      return 0;
    }
    case F_GETLK:
    case F_SETLK:
    case F_SETLKW:
    case F_OFD_GETLK:
    case F_OFD_SETLK:
    case F_OFD_SETLKW:
      return RecordLock(*d, fd, cmd, static_cast<struct flock*>(arg));
    case F_GETOWN:
    case F_SETOWN:
    case F_GETSIG:
    case F_SETSIG:
      return REAL(fcntl)(fd, cmd, arg);
    // dnotify: the pool has no change notifications; refused as by a
    // kernel without dnotify (EINVAL), after the kernel's own checks: no
    // events is a successful removal, a file is ENOTDIR.
    case F_NOTIFY:
      if ((iarg & ~static_cast<long>(DN_MULTISHOT)) == 0) return 0;
      if (!d->file->is_dir) return FailErrno(ENOTDIR);
      return FailErrno(EINVAL);
    case F_GETPIPE_SZ:
    case F_SETPIPE_SZ:
      return FailErrno(EBADF);
    case F_ADD_SEALS:
    case F_GET_SEALS:
      return FailErrno(EINVAL);
    default:
      return FailErrno(EINVAL);
  }
}
MAPFS_EXPORT int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return fcntl(fd, cmd, arg);
}

MAPFS_EXPORT int flock(int fd, int op) {
  if (OverlayBeforeLock() != 0) return -1;  // a coherence point of the overlay, as fcntl's locks
  int r;
  if (DescRef d = MapfsFd(fd)) r = FileLock(*d, op);
  else r = REAL(flock)(fd, op);
  if (r == 0) OverlayAfterLock();
  return r;
}
MAPFS_EXPORT int lockf(int fd, int cmd, off_t len) {
  if (!MapfsFd(fd)) {
    if (cmd == F_TEST) return REAL(lockf)(fd, cmd, len);
    if (OverlayBeforeLock() != 0) return -1;  // as fcntl's locks (glibc's lockf calls its own fcntl)
    int r = REAL(lockf)(fd, cmd, len);
    if (r == 0) OverlayAfterLock();
    return r;
  }
  struct flock fl{};
  fl.l_whence = SEEK_CUR;
  fl.l_start = 0;
  fl.l_len = len;
  switch (cmd) {
    case F_ULOCK: fl.l_type = F_UNLCK; return fcntl(fd, F_SETLK, &fl);
    case F_LOCK: fl.l_type = F_WRLCK; return fcntl(fd, F_SETLKW, &fl);
    case F_TLOCK: fl.l_type = F_WRLCK; return fcntl(fd, F_SETLK, &fl);
    case F_TEST:
      fl.l_type = F_WRLCK;
      if (fcntl(fd, F_GETLK, &fl) != 0) return -1;
      if (fl.l_type == F_UNLCK || fl.l_pid == getpid()) return 0;
      return FailErrno(EACCES);
    default: return FailErrno(EINVAL);
  }
}
MAPFS_EXPORT int lockf64(int fd, int cmd, off64_t len) { return lockf(fd, cmd, len); }
