// Copies between descriptors (copy_file_range, sendfile) when either side
// is a mapfs file: a loop of the shim's own read/write, so any mix of
// mapfs and kernel descriptors works.
#include <sys/sendfile.h>
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
