// Mirrors of fragmented files for shared maps (map_mirror.h).
#include "fs/map_mirror.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace mapfs::fs {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kFillChunk = uint64_t{1} << 20;

Status WriteAll(int fd, const char* p, uint64_t n, uint64_t off) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("mirror: cannot fill the memfd");
    }
    p += w;
    n -= static_cast<uint64_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<MapMirror>> MapMirror::Create() {
  std::unique_ptr<MapMirror> m(new MapMirror());
  m->fd_ = ::memfd_create("mapfs-map-mirror", MFD_CLOEXEC);
  m->twin_fd_ = ::memfd_create("mapfs-map-mirror-twin", MFD_CLOEXEC);
  if (m->fd_ < 0 || m->twin_fd_ < 0) return Status::FromErrno("mirror: memfd_create");
  return m;
}

MapMirror::~MapMirror() {
  if (alias_ != nullptr) ::munmap(alias_, len_);
  if (twin_ != nullptr) ::munmap(twin_, len_);
  if (fd_ >= 0) ::close(fd_);
  if (twin_fd_ >= 0) ::close(twin_fd_);
}

Status MapMirror::Remap(uint64_t n) {
  if (n <= len_) return Status::Ok();
  if (alias_ == nullptr) {
    void* a = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    void* t = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, twin_fd_, 0);
    if (a == MAP_FAILED || t == MAP_FAILED) {
      Status st = Status::FromErrno("mirror: cannot map the memfd");
      if (a != MAP_FAILED) ::munmap(a, n);
      if (t != MAP_FAILED) ::munmap(t, n);
      return st;
    }
    alias_ = static_cast<char*>(a);
    twin_ = static_cast<char*>(t);
    len_ = n;
    return Status::Ok();
  }
  void* a = ::mremap(alias_, len_, n, MREMAP_MAYMOVE);
  if (a == MAP_FAILED) return Status::FromErrno("mirror: cannot grow the map of the memfd");
  alias_ = static_cast<char*>(a);
  void* t = ::mremap(twin_, len_, n, MREMAP_MAYMOVE);
  if (t == MAP_FAILED) {
    Status st = Status::FromErrno("mirror: cannot grow the map of the memfd");
    (void)::mremap(alias_, n, len_, 0);  // shrinking in place cannot fail
    return st;
  }
  twin_ = static_cast<char*>(t);
  len_ = n;
  return Status::Ok();
}

Status MapMirror::Cover(uint64_t end, const FillFn& fill) {
  std::lock_guard<std::mutex> g(mu_);
  struct stat st{};
  if (::fstat(fd_, &st) != 0) return Status::FromErrno("mirror: fstat");
  uint64_t filled = static_cast<uint64_t>(st.st_size);
  if (filled < end) {
    // The twin first: the alias memfd's size is the filled extent, which a
    // fork sharing the memfds must never see ahead of the twin.
    std::vector<char> buf(static_cast<size_t>(std::min(kFillChunk, end - filled)));
    for (uint64_t off = filled; off < end; off += buf.size()) {
      uint64_t n = std::min<uint64_t>(buf.size(), end - off);
      MAPFS_RETURN_IF_ERROR(fill(buf.data(), n, off));
      MAPFS_RETURN_IF_ERROR(WriteAll(twin_fd_, buf.data(), n, off));
      MAPFS_RETURN_IF_ERROR(WriteAll(fd_, buf.data(), n, off));
    }
    filled = end;
  }
  return Remap(filled);
}

Status MapMirror::WriteBack(uint64_t lo, uint64_t hi, uint64_t size, const WriteFn& write) {
  std::lock_guard<std::mutex> g(mu_);
  hi = std::min({hi, len_, size});
  std::vector<char> tmp(kPage);
  for (uint64_t p = lo / kPage * kPage; p < hi; p += kPage) {
    uint64_t n = std::min(kPage, size - p);
    if (std::memcmp(alias_ + p, twin_ + p, n) == 0) continue;
    // Copied once: a store racing the write-back is either in this write
    // or differs from the twin for the next one.
    std::memcpy(tmp.data(), alias_ + p, n);
    uint64_t i = 0, j = n;
    while (i < j && tmp[i] == twin_[p + i]) i++;
    while (j > i && tmp[j - 1] == twin_[p + j - 1]) j--;
    if (i == j) continue;  // the stores were undone meanwhile
    MAPFS_RETURN_IF_ERROR(write(tmp.data() + i, j - i, p + i));
    std::memcpy(twin_ + p + i, tmp.data() + i, j - i);
  }
  return Status::Ok();
}

void MapMirror::Written(const void* buf, uint64_t off, uint64_t n) {
  std::lock_guard<std::mutex> g(mu_);
  if (off >= len_) return;
  n = std::min(n, len_ - off);
  std::memcpy(alias_ + off, buf, n);
  std::memcpy(twin_ + off, buf, n);
}

void MapMirror::Zeroed(uint64_t from, uint64_t to) {
  std::lock_guard<std::mutex> g(mu_);
  to = std::min(to, len_);
  if (from >= to) return;
  std::memset(alias_ + from, 0, to - from);
  std::memset(twin_ + from, 0, to - from);
}

}  // namespace mapfs::fs
