// syscall(): programs that issue file system calls by number (Go-style
// runtimes, test suites, tools that want a call glibc has no wrapper for)
// get the same routing as the libc wrappers. Three kinds of numbers:
//  - forwarded: the shim's own wrapper of the same call runs, so pool paths
//    and mapfs descriptors work and everything else reaches the kernel;
//  - refused: a call the shim cannot serve on a pool path or a mapfs
//    descriptor fails with ENOSYS and one MAPFS_LOG line (on kernel paths
//    and descriptors it reaches the kernel as is);
//  - the rest (no path or descriptor of a file system) reach the kernel.
// The README lists the first two sets; keep it in step with this file.
//
// Return convention: syscall() returns -1 and sets errno on failure, like
// the wrappers, so a wrapper's result is returned as is, except where the
// raw call's result differs from the wrapper's (getcwd, posix_fadvise).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <utime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <optional>

#include "common/log.h"
#include "common/process.h"
#include "fs/cred.h"
#include "preload/calls.h"
#include "preload/overlay_fds.h"
#include "vm/fault.h"

using namespace mapfs::preload;  // NOLINT: wrapper files only

namespace {

// Numbers newer than glibc 2.36's headers (x86-64).
constexpr long kSysCachestat = 451;
constexpr long kSysFchmodat2 = 452;

// The raw call's arguments, typed.
struct Args {
  long a[6];
  const char* s(int i) const { return reinterpret_cast<const char*>(a[i]); }
  char* buf(int i) const { return reinterpret_cast<char*>(a[i]); }
  int fd(int i) const { return static_cast<int>(a[i]); }
  unsigned u(int i) const { return static_cast<unsigned>(a[i]); }
  size_t z(int i) const { return static_cast<size_t>(a[i]); }
  mode_t mode(int i) const { return static_cast<mode_t>(a[i]); }
  template <typename T>
  T* p(int i) const {
    return reinterpret_cast<T*>(a[i]);
  }
};

bool ChangesIds(long n) {
  switch (n) {
    case SYS_setuid: case SYS_setgid: case SYS_setreuid: case SYS_setregid: case SYS_setresuid:
    case SYS_setresgid: case SYS_setgroups: case SYS_setfsuid: case SYS_setfsgid: return true;
  }
  return false;
}

// A refused number: ENOSYS, and one line on stderr per number and process
// naming the call (a program that falls back quietly should not flood it;
// one that fails should say why). Through the shim's own write(): stderr
// may be a mapfs file.
long Refuse(long n, const char* name) {
  static std::atomic<bool> said[1024];
  if (n < 0 || n >= 1024 || !said[n].exchange(true)) {
    char line[200];
    int k = std::snprintf(line, sizeof line,
                          "mapfs: syscall(SYS_%s) on a mapfs file or path is not supported by the shim: ENOSYS\n", name);
    if (k > 0) (void)!write(2, line, std::min<size_t>(static_cast<size_t>(k), sizeof line - 1));
  }
  errno = ENOSYS;
  return -1;
}

bool PoolPath(int dirfd, const char* path) { return path != nullptr && MapfsPath(dirfd, path).mapfs; }
bool PoolFd(int fd) { return static_cast<bool>(MapfsFd(fd)); }

// A raw result (-errno on failure) as syscall() returns it.
long Errno(long r) {
  if (r >= 0) return r;
  errno = static_cast<int>(-r);
  return -1;
}

// The wrapper's result for a forwarded number; nullopt for any other
// (Refused() is asked next, then the kernel).
std::optional<long> Forward(long n, const Args& x) {
  switch (n) {
    // Descriptors and data.
    case SYS_open: return open(x.s(0), x.fd(1), x.mode(2));
    case SYS_openat: return openat(x.fd(0), x.s(1), x.fd(2), x.mode(3));
    case SYS_openat2: {  // without RESOLVE_* restrictions it is openat
      const open_how* how = x.p<const open_how>(2);
      if (how == nullptr || x.z(3) < sizeof(open_how) || how->resolve != 0) return std::nullopt;
      return openat(x.fd(0), x.s(1), static_cast<int>(how->flags), static_cast<mode_t>(how->mode));
    }
    case SYS_creat: return creat(x.s(0), x.mode(1));
    case SYS_close: return close(x.fd(0));
    case SYS_close_range: return close_range(x.u(0), x.u(1), x.fd(2));
    case SYS_dup: return dup(x.fd(0));
    case SYS_dup2: return dup2(x.fd(0), x.fd(1));
    case SYS_dup3: return dup3(x.fd(0), x.fd(1), x.fd(2));
    case SYS_read: return read(x.fd(0), x.buf(1), x.z(2));
    case SYS_write: return write(x.fd(0), x.s(1), x.z(2));
    case SYS_pread64: return pread(x.fd(0), x.buf(1), x.z(2), x.a[3]);
    case SYS_recvfrom: return recvfrom(x.fd(0), x.buf(1), x.z(2), x.fd(3), x.p<sockaddr>(4), x.p<socklen_t>(5));
    case SYS_recvmsg: return recvmsg(x.fd(0), x.p<msghdr>(1), x.fd(2));
    case SYS_recvmmsg: return recvmmsg(x.fd(0), x.p<mmsghdr>(1), x.u(2), x.fd(3), x.p<struct timespec>(4));
    case SYS_pwrite64: return pwrite(x.fd(0), x.s(1), x.z(2), x.a[3]);
    // On LP64 the raw vector calls' offset is pos_l; pos_h is 0.
    case SYS_readv: return readv(x.fd(0), x.p<const iovec>(1), x.fd(2));
    case SYS_writev: return writev(x.fd(0), x.p<const iovec>(1), x.fd(2));
    case SYS_preadv: return preadv(x.fd(0), x.p<const iovec>(1), x.fd(2), x.a[3]);
    case SYS_pwritev: return pwritev(x.fd(0), x.p<const iovec>(1), x.fd(2), x.a[3]);
    case SYS_preadv2: return preadv2(x.fd(0), x.p<const iovec>(1), x.fd(2), x.a[3], x.fd(5));
    case SYS_pwritev2: return pwritev2(x.fd(0), x.p<const iovec>(1), x.fd(2), x.a[3], x.fd(5));
    case SYS_lseek: return lseek(x.fd(0), x.a[1], x.fd(2));
    case SYS_fsync: return fsync(x.fd(0));
    case SYS_fdatasync: return fdatasync(x.fd(0));
    case SYS_syncfs: return syncfs(x.fd(0));
    case SYS_sync_file_range: return sync_file_range(x.fd(0), x.a[1], x.a[2], x.u(3));
    case SYS_ftruncate: return ftruncate(x.fd(0), x.a[1]);
    case SYS_truncate: return truncate(x.s(0), x.a[1]);
    case SYS_fallocate: return fallocate(x.fd(0), x.fd(1), x.a[2], x.a[3]);
    case SYS_fadvise64: {
      int e = posix_fadvise(x.fd(0), x.a[1], x.a[2], x.fd(3));  // returns the error
      if (e != 0) errno = e;
      return e == 0 ? 0 : -1;
    }
    case SYS_readahead: return readahead(x.fd(0), x.a[1], x.z(2));
    case SYS_splice: return splice(x.fd(0), x.p<off64_t>(1), x.fd(2), x.p<off64_t>(3), x.z(4), x.u(5));
    case SYS_fcntl: return fcntl(x.fd(0), x.fd(1), x.a[2]);
    case SYS_flock: return flock(x.fd(0), x.fd(1));
    case SYS_copy_file_range:
      return copy_file_range(x.fd(0), x.p<off64_t>(1), x.fd(2), x.p<off64_t>(3), x.z(4), x.u(5));
    case SYS_sendfile: return sendfile(x.fd(0), x.fd(1), x.p<off_t>(2), x.z(3));
    case SYS_mmap: {
      void* m = mmap(x.p<void>(0), x.z(1), x.fd(2), x.fd(3), x.fd(4), x.a[5]);
      return m == MAP_FAILED ? -1 : reinterpret_cast<long>(m);
    }
    case SYS_munmap: return munmap(x.p<void>(0), x.z(1));
    case SYS_mremap: {
      void* m = mremap(x.p<void>(0), x.z(1), x.z(2), x.fd(3), x.p<void>(4));
      return m == MAP_FAILED ? -1 : reinterpret_cast<long>(m);
    }
    case SYS_msync: return msync(x.p<void>(0), x.z(1), x.fd(2));
    case SYS_mprotect: return mprotect(x.p<void>(0), x.z(1), x.fd(2));
    case SYS_pkey_mprotect: return pkey_mprotect(x.p<void>(0), x.z(1), x.fd(2), x.fd(3));
    // Unix sockets at pool paths (socket_calls.cc).
    case SYS_bind: return bind(x.fd(0), x.p<const sockaddr>(1), static_cast<socklen_t>(x.u(2)));
    case SYS_connect: return connect(x.fd(0), x.p<const sockaddr>(1), static_cast<socklen_t>(x.u(2)));
    case SYS_sendto:
      return sendto(x.fd(0), x.p<const void>(1), x.z(2), x.fd(3), x.p<const sockaddr>(4), static_cast<socklen_t>(x.u(5)));
    case SYS_sendmsg: return sendmsg(x.fd(0), x.p<const msghdr>(1), x.fd(2));
    // The kernel's AIO (aio_calls.cc): its results are -errno.
    case SYS_io_submit: return Errno(AioSubmit(static_cast<unsigned long>(x.a[0]), x.a[1], x.p<iocb*>(2)));
    case SYS_io_getevents:
      return Errno(AioGetEvents(static_cast<unsigned long>(x.a[0]), x.a[1], x.a[2], x.p<io_event>(3), x.p<timespec>(4), nullptr));
    case SYS_io_pgetevents:
      return Errno(AioGetEvents(static_cast<unsigned long>(x.a[0]), x.a[1], x.a[2], x.p<io_event>(3), x.p<timespec>(4),
                                x.p<const void>(5)));
    case SYS_io_destroy: return Errno(AioDestroy(static_cast<unsigned long>(x.a[0])));
    case SYS_io_cancel: return Errno(AioCancel(static_cast<unsigned long>(x.a[0]), x.p<iocb>(1), x.p<io_event>(2)));
    // Metadata.
    case SYS_stat: return stat(x.s(0), x.p<struct stat>(1));
    case SYS_lstat: return lstat(x.s(0), x.p<struct stat>(1));
    case SYS_fstat: return fstat(x.fd(0), x.p<struct stat>(1));
    case SYS_newfstatat: return fstatat(x.fd(0), x.s(1), x.p<struct stat>(2), x.fd(3));
    case SYS_statx: return statx(x.fd(0), x.s(1), x.fd(2), x.u(3), x.p<struct statx>(4));
    case SYS_statfs: return statfs(x.s(0), x.p<struct statfs>(1));
    case SYS_fstatfs: return fstatfs(x.fd(0), x.p<struct statfs>(1));
    case SYS_access: return access(x.s(0), x.fd(1));
    case SYS_faccessat: return faccessat(x.fd(0), x.s(1), x.fd(2), 0);
#ifdef SYS_faccessat2
    case SYS_faccessat2: return faccessat(x.fd(0), x.s(1), x.fd(2), x.fd(3));
#endif
    case kSysFchmodat2: return fchmodat(x.fd(0), x.s(1), x.mode(2), x.fd(3));
    case SYS_chmod: return chmod(x.s(0), x.mode(1));
    case SYS_fchmod: return fchmod(x.fd(0), x.mode(1));
    case SYS_fchmodat: return fchmodat(x.fd(0), x.s(1), x.mode(2), 0);
    case SYS_chown: return chown(x.s(0), x.u(1), x.u(2));
    case SYS_lchown: return lchown(x.s(0), x.u(1), x.u(2));
    case SYS_fchown: return fchown(x.fd(0), x.u(1), x.u(2));
    case SYS_fchownat: return fchownat(x.fd(0), x.s(1), x.u(2), x.u(3), x.fd(4));
    // A null path times the descriptor itself (futimens); glibc's wrapper refuses it.
    case SYS_utimensat:
      if (x.s(1) == nullptr) return futimens(x.fd(0), x.p<const timespec>(2));
      return utimensat(x.fd(0), x.s(1), x.p<const timespec>(2), x.fd(3));
    case SYS_utimes: return utimes(x.s(0), x.p<const timeval>(1));
    case SYS_futimesat: return futimesat(x.fd(0), x.s(1), x.p<const timeval>(2));
    case SYS_utime: return utime(x.s(0), x.p<const utimbuf>(1));
    // Names.
    case SYS_mkdir: return mkdir(x.s(0), x.mode(1));
    case SYS_mkdirat: return mkdirat(x.fd(0), x.s(1), x.mode(2));
    case SYS_mknod: return mknod(x.s(0), x.mode(1), static_cast<dev_t>(x.u(2)));
    case SYS_mknodat: return mknodat(x.fd(0), x.s(1), x.mode(2), static_cast<dev_t>(x.u(3)));
    case SYS_unlink: return unlink(x.s(0));
    case SYS_unlinkat: return unlinkat(x.fd(0), x.s(1), x.fd(2));
    case SYS_rmdir: return rmdir(x.s(0));
    case SYS_rename: return rename(x.s(0), x.s(1));
    case SYS_renameat: return renameat(x.fd(0), x.s(1), x.fd(2), x.s(3));
    case SYS_renameat2: return renameat2(x.fd(0), x.s(1), x.fd(2), x.s(3), x.u(4));
    case SYS_link: return link(x.s(0), x.s(1));
    case SYS_linkat: return linkat(x.fd(0), x.s(1), x.fd(2), x.s(3), x.fd(4));
    case SYS_symlink: return symlink(x.s(0), x.s(1));
    case SYS_symlinkat: return symlinkat(x.s(0), x.fd(1), x.s(2));
    case SYS_readlink: return readlink(x.s(0), x.buf(1), x.z(2));
    case SYS_readlinkat: return readlinkat(x.fd(0), x.s(1), x.buf(2), x.z(3));
    // Directory entries in the kernel's records (dir_calls.cc).
    case SYS_getdents:
    case SYS_getdents64:
      if (!PoolFd(x.fd(0))) return std::nullopt;
      return GetDents(x.fd(0), x.p<void>(1), x.z(2), n == SYS_getdents64);
    // The current directory. The raw getcwd returns the length with the NUL.
    case SYS_chdir: return chdir(x.s(0));
    case SYS_fchdir: return fchdir(x.fd(0));
    case SYS_getcwd: {
      if (getcwd(x.buf(0), x.z(1)) == nullptr) return -1;
      return static_cast<long>(std::strlen(x.buf(0)) + 1);
    }
    // Extended attributes (the pool has none: the wrappers say so).
    case SYS_getxattr: return getxattr(x.s(0), x.s(1), x.p<void>(2), x.z(3));
    case SYS_lgetxattr: return lgetxattr(x.s(0), x.s(1), x.p<void>(2), x.z(3));
    case SYS_fgetxattr: return fgetxattr(x.fd(0), x.s(1), x.p<void>(2), x.z(3));
    case SYS_setxattr: return setxattr(x.s(0), x.s(1), x.p<const void>(2), x.z(3), x.fd(4));
    case SYS_lsetxattr: return lsetxattr(x.s(0), x.s(1), x.p<const void>(2), x.z(3), x.fd(4));
    case SYS_fsetxattr: return fsetxattr(x.fd(0), x.s(1), x.p<const void>(2), x.z(3), x.fd(4));
    case SYS_listxattr: return listxattr(x.s(0), x.buf(1), x.z(2));
    case SYS_llistxattr: return llistxattr(x.s(0), x.buf(1), x.z(2));
    case SYS_flistxattr: return flistxattr(x.fd(0), x.buf(1), x.z(2));
    case SYS_removexattr: return removexattr(x.s(0), x.s(1));
    case SYS_lremovexattr: return lremovexattr(x.s(0), x.s(1));
    case SYS_fremovexattr: return fremovexattr(x.fd(0), x.s(1));
    // SIGSEGV and SIGBUS: the program's view (signal_calls.cc). The raw
    // call's struct is the kernel's, taken as is (no C library restorer).
    case SYS_rt_sigaction: {
      if (!mapfs::vm::IsFaultSignal(x.fd(0))) return std::nullopt;
      if (x.z(3) != sizeof(uint64_t)) return FailErrno(EINVAL);
      mapfs::vm::KernelSigaction act{}, old{};
      if (x.a[1] != 0) act = *x.p<const mapfs::vm::KernelSigaction>(1);
      int e = mapfs::vm::ProgramSigaction(x.fd(0), x.a[1] != 0 ? &act : nullptr, x.a[2] != 0 ? &old : nullptr, false);
      if (e != 0) return FailErrno(e);
      if (x.a[2] != 0) *x.p<mapfs::vm::KernelSigaction>(2) = old;
      return 0;
    }
    // A new image: the shim hands its descriptors and cwd over.
    case SYS_execve: return execve(x.s(0), x.p<char* const>(1), x.p<char* const>(2));
    default: return std::nullopt;
  }
}

// The name of a number the shim does not forward, if `x` names a pool path
// or a mapfs descriptor (it must then not reach the kernel, which would act
// on the wrong file, on the placeholder or on the pool file itself); null
// if the kernel may have the call. tee and vmsplice are not here: they
// need pipes, and the kernel already fails them on a mapfs descriptor's
// placeholder exactly as on a regular file (EINVAL, EBADF).
const char* Refused(long n, const Args& x) {
#define MAPFS_REFUSE_IF(sys, cond) \
  case SYS_##sys:                   \
    return (cond) ? #sys : nullptr
  switch (n) {
    // FIOCLEX/FIONCLEX act on the descriptor, which the placeholder is.
    MAPFS_REFUSE_IF(ioctl, PoolFd(x.fd(0)) && x.u(1) != FIOCLEX && x.u(1) != FIONCLEX);
    MAPFS_REFUSE_IF(openat2, PoolPath(x.fd(0), x.s(1)) || PoolFd(x.fd(0)));  // RESOLVE_* flags
    // A null or empty path with AT_EMPTY_PATH names the descriptor itself.
    MAPFS_REFUSE_IF(name_to_handle_at, PoolPath(x.fd(0), x.s(1)) || PoolFd(x.fd(0)));
    MAPFS_REFUSE_IF(open_by_handle_at, PoolFd(x.fd(0)));
    MAPFS_REFUSE_IF(execveat, PoolPath(x.fd(0), x.s(1)) || PoolFd(x.fd(0)));
    MAPFS_REFUSE_IF(fanotify_mark, PoolPath(x.fd(3), x.s(4)) || PoolFd(x.fd(3)));
    MAPFS_REFUSE_IF(inotify_add_watch, PoolPath(AT_FDCWD, x.s(1)));
    MAPFS_REFUSE_IF(quotactl, PoolPath(AT_FDCWD, x.s(1)));
    MAPFS_REFUSE_IF(quotactl_fd, PoolFd(x.fd(0)));
    MAPFS_REFUSE_IF(mount, PoolPath(AT_FDCWD, x.s(0)) || PoolPath(AT_FDCWD, x.s(1)));
    MAPFS_REFUSE_IF(pivot_root, PoolPath(AT_FDCWD, x.s(0)) || PoolPath(AT_FDCWD, x.s(1)));
    MAPFS_REFUSE_IF(open_tree, PoolPath(x.fd(0), x.s(1)) || PoolFd(x.fd(0)));
    MAPFS_REFUSE_IF(fspick, PoolPath(x.fd(0), x.s(1)) || PoolFd(x.fd(0)));
    MAPFS_REFUSE_IF(mount_setattr, PoolPath(x.fd(0), x.s(1)) || PoolFd(x.fd(0)));
    MAPFS_REFUSE_IF(move_mount, PoolPath(x.fd(0), x.s(1)) || PoolFd(x.fd(0)) || PoolPath(x.fd(2), x.s(3)) ||
                                    PoolFd(x.fd(2)));
    MAPFS_REFUSE_IF(chroot, PoolPath(AT_FDCWD, x.s(0)));
    MAPFS_REFUSE_IF(acct, PoolPath(AT_FDCWD, x.s(0)));
    MAPFS_REFUSE_IF(swapon, PoolPath(AT_FDCWD, x.s(0)));
    MAPFS_REFUSE_IF(swapoff, PoolPath(AT_FDCWD, x.s(0)));
    MAPFS_REFUSE_IF(umount2, PoolPath(AT_FDCWD, x.s(0)));
    MAPFS_REFUSE_IF(uselib, PoolPath(AT_FDCWD, x.s(0)));
    case kSysCachestat: return PoolFd(x.fd(0)) ? "cachestat" : nullptr;
    default: return nullptr;
  }
#undef MAPFS_REFUSE_IF
}

}  // namespace

MAPFS_EXPORT long syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  Args x;
  for (long& v : x.a) v = va_arg(ap, long);
  va_end(ap);
  // The overlay alone (no pool) forwards too: a raw read of a virtualized
  // file must give its content, not its layout, as the C library's does.
  if (!in_core) {
    bool pool = Shim::Get().enabled();
    if (pool || OverlayConfigured()) {
      if (std::optional<long> r = Forward(n, x)) return *r;
      if (pool)
        if (const char* name = Refused(n, x)) return Refuse(n, name);
    }
  }
  long r = REAL(syscall)(n, x.a[0], x.a[1], x.a[2], x.a[3], x.a[4], x.a[5]);
  if (ChangesIds(n)) {
    // The raw call changed this thread's ids only: the core reads them again.
    int e = errno;
    mapfs::fs::InvalidateProcessCred();
    errno = e;
  }
  if (n == SYS_umask) mapfs::NoteUmask(static_cast<mode_t>(x.a[0]));  // cannot fail
  return r;
}
