// readv/writev for descriptors the shim serves (pool files and overlay
// files alike): one read into a buffer scattered over the iovecs, or the
// iovecs gathered into one write. One call of the underlying read or write
// keeps the vector call as atomic as the kernel's (a concurrent reader sees
// all of a writev or none of it; one offset update).
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "preload/shim.h"

namespace mapfs::preload {

// `read(buf, n)` reads up to n bytes into buf (returns what read(2) would).
template <typename ReadFn>
ssize_t ScatterRead(const iovec* iov, int cnt, ReadFn read) {
  if (cnt < 0 || cnt > IOV_MAX) return FailErrno(EINVAL);
  size_t total = 0;
  for (int i = 0; i < cnt; i++) total += iov[i].iov_len;
  std::vector<char> buf(total);
  ssize_t r = read(buf.data(), total);
  if (r <= 0) return r;
  size_t left = static_cast<size_t>(r), at = 0;
  for (int i = 0; i < cnt && left > 0; i++) {
    size_t k = std::min(left, iov[i].iov_len);
    std::memcpy(iov[i].iov_base, buf.data() + at, k);
    at += k;
    left -= k;
  }
  return r;
}

// `write(buf, n)` writes n bytes from buf (returns what write(2) would).
template <typename WriteFn>
ssize_t GatherWrite(const iovec* iov, int cnt, WriteFn write) {
  if (cnt < 0 || cnt > IOV_MAX) return FailErrno(EINVAL);
  if (cnt == 1) return write(iov[0].iov_base, iov[0].iov_len);
  std::vector<char> buf;
  for (int i = 0; i < cnt; i++)
    buf.insert(buf.end(), static_cast<const char*>(iov[i].iov_base),
               static_cast<const char*>(iov[i].iov_base) + iov[i].iov_len);
  return write(buf.data(), buf.size());
}

}  // namespace mapfs::preload
