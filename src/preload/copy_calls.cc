// Copies between descriptors (copy_file_range, sendfile) when either side
// is a mapfs file: a loop of the shim's own read/write, so any mix of
// mapfs and kernel descriptors works.
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <stdarg.h>
#include <unistd.h>

#include <vector>

#include "preload/calls.h"

namespace mapfs::preload {
namespace {

ssize_t CopyLoop(int in, int64_t* in_off, int out, int64_t* out_off, size_t len) {
  std::vector<char> buf(std::min<size_t>(len, 1 << 20));
  size_t done = 0;
  while (done < len) {
    size_t want = std::min(buf.size(), len - done);
    ssize_t r = in_off ? ::pread(in, buf.data(), want, *in_off) : ::read(in, buf.data(), want);
    if (r < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
    if (r == 0) break;
    ssize_t w = out_off ? ::pwrite(out, buf.data(), static_cast<size_t>(r), *out_off)
                        : ::write(out, buf.data(), static_cast<size_t>(r));
    if (w < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
    if (in_off) *in_off += w;
    if (out_off) *out_off += w;
    done += static_cast<size_t>(w);
    if (w < r) {
      if (!in_off) ::lseek(in, w - r, SEEK_CUR);  // give back what was not written
      break;
    }
  }
  return static_cast<ssize_t>(done);
}

}  // namespace
}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

MAPFS_EXPORT ssize_t copy_file_range(int in, off64_t* in_off, int out, off64_t* out_off, size_t len, unsigned flags) {
  bool a = static_cast<bool>(MapfsFd(in)), b = static_cast<bool>(MapfsFd(out));
  if (!a && !b) return REAL(copy_file_range)(in, in_off, out, out_off, len, flags);
  if (flags != 0) return FailErrno(EINVAL);
  if ((in_off && *in_off < 0) || (out_off && *out_off < 0)) return FailErrno(EINVAL);
  return CopyLoop(in, reinterpret_cast<int64_t*>(in_off), out, reinterpret_cast<int64_t*>(out_off), len);
}

MAPFS_EXPORT ssize_t sendfile(int out, int in, off_t* off, size_t len) {
  bool a = static_cast<bool>(MapfsFd(in)), b = static_cast<bool>(MapfsFd(out));
  if (!a && !b) return REAL(sendfile)(out, in, off, len);
  if (off && *off < 0) return FailErrno(EINVAL);
  return CopyLoop(in, reinterpret_cast<int64_t*>(off), out, nullptr, len);
}
MAPFS_EXPORT ssize_t sendfile64(int out, int in, off64_t* off, size_t len) { return sendfile(out, in, off, len); }

// syscall(): programs that issue file system calls directly get the same
// routing as the libc wrappers; everything else goes to the kernel as is.
MAPFS_EXPORT long syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  long a[6];
  for (long& x : a) x = va_arg(ap, long);
  va_end(ap);
  if (!in_core && Shim::Get().enabled()) {
    auto s = [&](int i) { return reinterpret_cast<const char*>(a[i]); };
    auto i32 = [&](int i) { return static_cast<int>(a[i]); };
    switch (n) {
      case SYS_open: return open(s(0), i32(1), static_cast<mode_t>(a[2]));
      case SYS_openat: return openat(i32(0), s(1), i32(2), static_cast<mode_t>(a[3]));
      case SYS_close: return close(i32(0));
      case SYS_read: return read(i32(0), reinterpret_cast<void*>(a[1]), static_cast<size_t>(a[2]));
      case SYS_write: return write(i32(0), reinterpret_cast<const void*>(a[1]), static_cast<size_t>(a[2]));
      case SYS_pread64: return pread(i32(0), reinterpret_cast<void*>(a[1]), static_cast<size_t>(a[2]), a[3]);
      case SYS_pwrite64: return pwrite(i32(0), reinterpret_cast<const void*>(a[1]), static_cast<size_t>(a[2]), a[3]);
      case SYS_lseek: return lseek(i32(0), a[1], i32(2));
      case SYS_fsync: return fsync(i32(0));
      case SYS_fdatasync: return fdatasync(i32(0));
      case SYS_ftruncate: return ftruncate(i32(0), a[1]);
      case SYS_fallocate: return fallocate(i32(0), i32(1), a[2], a[3]);
      case SYS_fstat: return fstat(i32(0), reinterpret_cast<struct stat*>(a[1]));
      case SYS_newfstatat: return fstatat(i32(0), s(1), reinterpret_cast<struct stat*>(a[2]), i32(3));
      case SYS_statx:
        return statx(i32(0), s(1), i32(2), static_cast<unsigned>(a[3]), reinterpret_cast<struct statx*>(a[4]));
      case SYS_unlinkat: return unlinkat(i32(0), s(1), i32(2));
      case SYS_mkdirat: return mkdirat(i32(0), s(1), static_cast<mode_t>(a[2]));
      case SYS_renameat2: return renameat2(i32(0), s(1), i32(2), s(3), static_cast<unsigned>(a[4]));
      case SYS_dup: return dup(i32(0));
      case SYS_dup2: return dup2(i32(0), i32(1));
      case SYS_dup3: return dup3(i32(0), i32(1), i32(2));
      case SYS_copy_file_range:
        return copy_file_range(i32(0), reinterpret_cast<off64_t*>(a[1]), i32(2), reinterpret_cast<off64_t*>(a[3]),
                               static_cast<size_t>(a[4]), static_cast<unsigned>(a[5]));
      case SYS_close_range: return close_range(static_cast<unsigned>(a[0]), static_cast<unsigned>(a[1]), i32(2));
      default: break;
    }
  }
  return REAL(syscall)(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
