// Helpers of the virtual engine's suites: a scratch directory in /dev/shm
// and virtualized files with small geometries (a 64-slot log wraps and is
// checkpointed every few dozen writes, so the GC runs all the time).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "overlay/virtual/vfile.h"
#include "overlay/virtual/virtual_engine.h"

namespace mapfs::overlay::vrt::testing {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = "/dev/shm/mapfs-virt-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    std::string cmd = "rm -rf '" + path_ + "' && mkdir -p '" + path_ + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
  ~TempDir() {
    std::string cmd = "rm -rf '" + path_ + "'";
    (void)!std::system(cmd.c_str());
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline FormatOptions SmallGeometry() { return FormatOptions{64, 4096, 1u << 16}; }

// Creates `path` formatted with `o`; returns true on success.
inline bool MakeVirtual(const std::string& path, const FormatOptions& o = SmallGeometry()) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  Status s = Format(fd, o);
  ::close(fd);
  return s.ok();
}

// Attaches to `path` (the descriptor is closed at once: VFile keeps its own).
inline Result<std::unique_ptr<VFile>> OpenVirtual(const std::string& path, bool writable = true,
                                                  Mode mode = Mode::kStrict) {
  int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(path);
  auto f = VFile::Attach(fd, writable, mode);
  ::close(fd);
  return f;
}

}  // namespace mapfs::overlay::vrt::testing
