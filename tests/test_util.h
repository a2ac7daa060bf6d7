// Helpers shared by the test suites.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/units.h"
#include "medium/pool.h"

namespace mapfs::testing {

// Number of kernel mappings (VMAs) that overlap [base, base+len).
inline int CountVmas(const void* base, uint64_t len) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  auto lo = reinterpret_cast<uintptr_t>(base), hi = lo + len;
  while (std::getline(maps, line)) {
    uintptr_t a = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    uintptr_t b = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    if (a < hi && b > lo) n++;
  }
  return n;
}

// How the file-system suites' pools keep regular files' data: the
// MAPFS_TEST_FILES environment variable ("hashfs", "cuckoo", "extent",
// "radix"; unset = contiguous). CTest runs the suites once per design
// (tests/CMakeLists.txt: mapfs_files_matrix) with it set.
inline const char* TestFiles() {
  static const std::string design = [] {
    const char* f = std::getenv("MAPFS_TEST_FILES");
    return std::string(f != nullptr ? f : "");
  }();
  return design.empty() ? nullptr : design.c_str();
}

// A pool file in /dev/shm with a name unique to this process and test,
// formatted on construction and removed on destruction.
class TempPool {
 public:
  explicit TempPool(uint64_t size = 256 * MiB, medium::CreateOptions opt = {}) {
    static std::atomic<int> counter{0};
    path_ = "/dev/shm/mapfs-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".pool";
    opt.size = size;
    status_ = medium::Pool::Create(path_, opt);
  }
  // Removes the pool and its shared-memory segment, which a crash test's
  // abandoned mount leaves behind.
  ~TempPool() {
    medium::format::PoolHeader h{};
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h)) {
        static const char* hex = "0123456789abcdef";
        std::string name = "/mapfs-";
        for (uint8_t b : h.uuid) {
          name += hex[b >> 4];
          name += hex[b & 15];
        }
        ::shm_unlink(name.c_str());
      }
      ::close(fd);
    }
    ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }
  const Status& status() const { return status_; }

 private:
  std::string path_;
  Status status_;
};

// Deterministic pseudo-random numbers (tests print their seed on failure).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t Next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return s_;
  }
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t s_;
};

}  // namespace mapfs::testing
