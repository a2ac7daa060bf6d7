// Copies between descriptors (copy_file_range, sendfile, splice) when
// either side is a mapfs file or an overlay file: the shim's own read/write
// through a bounce buffer, so any mix of mapfs, overlay and kernel
// descriptors works.
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "preload/calls.h"
#include "preload/overlay_fds.h"

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

// One pass of splice(2) between a mapfs file and a pipe, as the kernel's:
// at most what the pipe holds (from it) or has room for (into it), so a
// program that splices into a pipe it drains itself never deadlocks; it
// blocks for data or room unless `nonblock`. The pipe side goes through
// the C library with RWF_NOWAIT when it must not block (the pipe's own
// O_NONBLOCK is its description's, shared: not ours to flip).
ssize_t SpliceOnce(int in, int64_t* in_off, int out, int64_t* out_off, size_t len, bool nonblock, bool into_pipe) {
  int pipe = into_pipe ? out : in;
  int file = into_pipe ? in : out;
  int64_t* off = into_pipe ? in_off : out_off;
  int cap = REAL(fcntl)(pipe, F_GETPIPE_SZ);
  if (cap <= 0) cap = 65536;
  size_t n = std::min<size_t>(len, static_cast<size_t>(cap));
  if (into_pipe) {
    int used = 0;
    if (REAL(ioctl)(pipe, FIONREAD, &used) == 0 && used < cap) n = std::min<size_t>(n, static_cast<size_t>(cap - used));
  }
  std::vector<char> buf(n);
  int64_t at = off != nullptr ? *off : ::lseek(file, 0, SEEK_CUR);
  if (at < 0) return -1;
  ssize_t done;
  if (into_pipe) {
    ssize_t r = ::pread(file, buf.data(), n, at);
    if (r <= 0) return r;
    iovec v{buf.data(), static_cast<size_t>(r)};
    done = REAL(pwritev2)(pipe, &v, 1, -1, nonblock ? RWF_NOWAIT : 0);
    if (done < 0 && errno == EOPNOTSUPP && nonblock) {  // a kernel without RWF_NOWAIT on pipes
      struct pollfd p{pipe, POLLOUT, 0};
      if (REAL(poll)(&p, 1, 0) != 1) return FailErrno(EAGAIN);
      done = REAL(write)(pipe, buf.data(), static_cast<size_t>(r));
    }
  } else {
    iovec v{buf.data(), n};
    ssize_t r = REAL(preadv2)(pipe, &v, 1, -1, nonblock ? RWF_NOWAIT : 0);
    if (r < 0 && errno == EOPNOTSUPP && nonblock) {
      struct pollfd p{pipe, POLLIN, 0};
      if (REAL(poll)(&p, 1, 0) != 1) return FailErrno(EAGAIN);
      r = REAL(read)(pipe, buf.data(), n);
    }
    if (r <= 0) return r;  // 0: no writer left
    // The pipe's bytes are consumed: write them all (short only on ENOSPC).
    done = 0;
    while (done < r) {
      ssize_t w = ::pwrite(file, buf.data() + done, static_cast<size_t>(r - done), at + done);
      if (w <= 0) {
        if (done == 0) return -1;
        break;
      }
      done += w;
    }
  }
  if (done <= 0) return done;
  if (off != nullptr) *off = at + done;
  else ::lseek(file, at + done, SEEK_SET);
  return done;
}

}  // namespace
}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

MAPFS_EXPORT ssize_t copy_file_range(int in, off64_t* in_off, int out, off64_t* out_off, size_t len, unsigned flags) {
  // Overlay files too: the kernel would miss staged bytes and the engine's size.
  bool a = MapfsFd(in) || OverlayFd(in), b = MapfsFd(out) || OverlayFd(out);
  if (!a && !b) return REAL(copy_file_range)(in, in_off, out, out_off, len, flags);
  if (flags != 0) return FailErrno(EINVAL);
  if ((in_off && *in_off < 0) || (out_off && *out_off < 0)) return FailErrno(EINVAL);
  return CopyLoop(in, reinterpret_cast<int64_t*>(in_off), out, reinterpret_cast<int64_t*>(out_off), len);
}

MAPFS_EXPORT ssize_t sendfile(int out, int in, off_t* off, size_t len) {
  // Overlay files too: the kernel would miss staged bytes and the engine's size.
  bool a = MapfsFd(in) || OverlayFd(in), b = MapfsFd(out) || OverlayFd(out);
  if (!a && !b) return REAL(sendfile)(out, in, off, len);
  if (off && *off < 0) return FailErrno(EINVAL);
  return CopyLoop(in, reinterpret_cast<int64_t*>(off), out, nullptr, len);
}
MAPFS_EXPORT ssize_t sendfile64(int out, int in, off64_t* off, size_t len) { return sendfile(out, in, off, len); }

// splice(2) with a mapfs file or an overlay file at one end (the kernel's
// splice cannot reach the pool, and would miss an overlay file's staged
// bytes and the engine's size): the other end must be a pipe, with no
// offset; the file's end may not be O_APPEND (both as the kernel). tee(2)
// and vmsplice(2) need pipes at every end: the kernel fails them on these
// descriptors as on any regular file, so they are not wrapped.
MAPFS_EXPORT ssize_t splice(int in, off64_t* in_off, int out, off64_t* out_off, size_t len, unsigned flags) {
  DescRef a = MapfsFd(in), b = MapfsFd(out);
  OvRef oa = a ? nullptr : OverlayFd(in), ob = b ? nullptr : OverlayFd(out);
  bool from_file = a || oa, to_file = b || ob;
  if (!from_file && !to_file) return REAL(splice)(in, in_off, out, out_off, len, flags);
  if (from_file && to_file) return FailErrno(EINVAL);
  int pipe = from_file ? out : in;
  struct stat st;
  if (REAL(fstat)(pipe, &st) != 0) return -1;
  if (!S_ISFIFO(st.st_mode)) return FailErrno(EINVAL);
  if ((from_file ? out_off : in_off) != nullptr) return FailErrno(ESPIPE);
  int acc;
  bool append;
  if (a || b) {
    Desc& d = a ? *a : *b;
    acc = d.file->flags & O_ACCMODE;
    append = d.file->flags & O_APPEND;
  } else {
    OvOpen& o = oa ? *oa : *ob;
    acc = o.acc;
    append = o.append.load(std::memory_order_relaxed);
  }
  if (from_file ? acc == O_WRONLY : acc == O_RDONLY) return FailErrno(EBADF);
  if (to_file && append) return FailErrno(EINVAL);
  off64_t* off = from_file ? in_off : out_off;
  if (off != nullptr && *off < 0) return FailErrno(EINVAL);
  if (len == 0) return 0;
  int pfl = REAL(fcntl)(pipe, F_GETFL);
  bool nonblock = (flags & SPLICE_F_NONBLOCK) || (pfl >= 0 && (pfl & O_NONBLOCK));
  return SpliceOnce(in, reinterpret_cast<int64_t*>(in_off), out, reinterpret_cast<int64_t*>(out_off), len, nonblock,
                    from_file);
}
