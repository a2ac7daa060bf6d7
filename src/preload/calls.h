// Shared helpers of the wrapper files: the pattern every wrapper follows is
//   if (!in_core && <the argument belongs to mapfs>) return <mapfs version>;
//   return REAL(fn)(args...);
#pragma once

#include <fcntl.h>

#include <time.h>

#include "preload/real.h"

struct iocb;      // linux/aio_abi.h
struct io_event;  // linux/aio_abi.h
#include "preload/shim.h"

#define MAPFS_EXPORT extern "C" __attribute__((visibility("default")))

namespace mapfs::preload {

// The descriptor's entry if `fd` is a mapfs descriptor (and we are not in
// the core), else null. Cheap for kernel descriptors.
inline DescRef MapfsFd(int fd) {
  if (in_core) return nullptr;
  Shim& s = Shim::Get();
  if (!s.IsMapfs(fd)) return nullptr;
  return s.Lookup(fd);
}

// The route of a path argument (kernel unless it is under the mount).
// Rule for every wrapper: test in_core before Shim::Get(), since the core's
// own calls come back through the wrappers, also while the shim starts.
inline Route MapfsPath(int dirfd, const char* path) {
  if (in_core) return Route{};
  return Shim::Get().Classify(dirfd, path);
}

// The mounted file system for a call that needs it; null with errno set.
inline fs::FileSystem* FsOrFail() {
  fs::FileSystem* f = Shim::Get().Fs();
  if (f == nullptr && errno == 0) errno = EIO;
  return f;
}

// The mapfs path of `r` from the pool root, for bookkeeping (cwd, fchdir).
std::string AbsoluteOf(const Route& r);

// Opens a mapfs path; returns the new descriptor or -1/errno.
int OpenMapfs(const Route& r, int flags, mode_t mode);

// getdents64 (is64) or the old getdents on a mapfs descriptor: the
// kernel's records, into `buf` of `n` bytes; -1/errno.
ssize_t GetDents(int fd, void* buf, size_t n, bool is64);

// The kernel's AIO calls with mapfs requests done at once (aio_calls.cc);
// -errno on failure, as the raw calls. `sigmask` non-null: io_pgetevents's
// struct __aio_sigset.
long AioSubmit(unsigned long ctx, long nr, iocb** cbs);
long AioGetEvents(unsigned long ctx, long min_nr, long nr, io_event* out, timespec* timeout, const void* sigmask);
long AioDestroy(unsigned long ctx);
long AioCancel(unsigned long ctx, iocb* cb, io_event* result);

// Releases the process's POSIX locks on a file when one of its descriptors closes.
void ReleaseProcessLocks(uint64_t ino);

// The fortified (_FORTIFY_SOURCE) forms of the wrapped calls keep the C
// library's check: a request larger than the buffer the compiler knows of
// is an overflow, which ends the program (__chk_fail), before any I/O.
extern "C" [[noreturn]] void __chk_fail(void);
inline void FortifyCheck(bool overflow) {
  if (overflow) __chk_fail();
}

}  // namespace mapfs::preload
