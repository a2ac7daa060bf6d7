// Helpers shared by the file-system suites: pools formatted with mapfs_mkfs,
// fsck through FileSystem::Check, byte patterns, child processes.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fs/file_system.h"
#include "mapfs/mapfs.h"
#include "test_util.h"

namespace mapfs::fstest {

using mapfs::testing::Rng;
using mapfs::testing::TempPool;

inline const char* ModeName(int mode) {
  switch (mode) {
    case MAPFS_MODE_POSIX: return "posix";
    case MAPFS_MODE_SYNC: return "sync";
    case MAPFS_MODE_STRICT: return "strict";
  }
  return "default";
}

inline std::string ErrName(int e) {
  if (e == 0) return "0";
  const char* n = strerrorname_np(e);
  return n ? n : std::to_string(e);
}

// A pool file (TempPool: unique name in /dev/shm, removed at the end)
// formatted by mapfs_mkfs with the file system's options.
class FsPool {
 public:
  explicit FsPool(uint64_t size = 256ull << 20, unsigned page_size = 4096, int mode = MAPFS_MODE_SYNC)
      : tp_(1ull << 20) {
    mapfs_mkfs_options o{};
    o.size = size;
    o.page_size = page_size;
    o.mode = mode;
    o.files = testing::TestFiles();
    if (mapfs_mkfs(tp_.path().c_str(), &o) != 0) error_ = std::string("mapfs_mkfs: ") + mapfs_last_error();
  }
  const std::string& path() const { return tp_.path(); }
  const std::string& error() const { return error_; }  // "" when formatted

 private:
  TempPool tp_;
  std::string error_;
};

// Mounts with the C API; fails the test (and returns null) on error.
inline mapfs_t* MountC(const std::string& path, int mode = MAPFS_MODE_DEFAULT) {
  mapfs_options o{};
  o.mode = mode;
  mapfs_t* fs = mapfs_mount(path.c_str(), &o);
  EXPECT_NE(fs, nullptr) << "mapfs_mount(" << path << "): " << ErrName(errno) << " " << mapfs_last_error();
  return fs;
}

// fsck of an unmounted pool (no other mount in this process): the problems
// FileSystem::Check reports, or one line saying why the mount failed.
inline std::vector<std::string> CheckPool(const std::string& path, fs::FsCheckReport* out = nullptr) {
  auto fs = fs::FileSystem::Mount(path);
  if (!fs.ok()) return {"FileSystem::Mount failed: " + fs.status().ToString()};
  fs::FsCheckReport r = (*fs)->Check();
  Status st = (*fs)->Unmount();
  if (!st.ok()) r.problems.push_back("Unmount: " + st.ToString());
  if (out) *out = r;
  return r.problems;
}

inline std::string Join(const std::vector<std::string>& v, size_t max = 20) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max; i++) s += "  " + v[i] + "\n";
  if (v.size() > max) s += "  ... (" + std::to_string(v.size() - max) + " more)\n";
  return s;
}

#define FS_EXPECT_CLEAN(path)                                                   \
  do {                                                                         \
    auto _p = ::mapfs::fstest::CheckPool(path);                                \
    EXPECT_TRUE(_p.empty()) << "fsck problems:\n" << ::mapfs::fstest::Join(_p); \
  } while (0)

// Deterministic content: byte i of a stream tagged `tag` (cheap to check
// anywhere without keeping a copy).
inline uint8_t PatternByte(uint64_t tag, uint64_t i) {
  uint64_t x = (tag * 0x9E3779B97F4A7C15ull) ^ (i >> 3) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  return static_cast<uint8_t>(x >> (8 * (i & 7)));
}
inline void FillPattern(void* buf, size_t n, uint64_t tag, uint64_t from) {
  auto* p = static_cast<uint8_t*>(buf);
  for (size_t i = 0; i < n; i++) p[i] = PatternByte(tag, from + i);
}
// Index of the first byte of buf that differs from the pattern, or -1.
inline int64_t PatternMismatch(const void* buf, size_t n, uint64_t tag, uint64_t from) {
  auto* p = static_cast<const uint8_t*>(buf);
  for (size_t i = 0; i < n; i++)
    if (p[i] != PatternByte(tag, from + i)) return static_cast<int64_t>(i);
  return -1;
}

inline void FillRandom(Rng& rng, std::string* s, size_t n) {
  s->resize(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng.Next();
    std::memcpy(s->data() + i, &v, std::min<size_t>(8, n - i));
  }
}

// Writes all of buf with the C API (loops over short writes); false on error.
inline bool WriteAll(mapfs_t* fs, int fd, const void* buf, size_t n, off_t off) {
  auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = mapfs_pwrite(fs, fd, p, n, off);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
    off += w;
  }
  return true;
}
// Reads a whole file; false (errno set) on error.
inline bool ReadFile(mapfs_t* fs, const std::string& path, std::string* out) {
  int fd = mapfs_open(fs, path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  out->clear();
  char buf[1 << 16];
  off_t off = 0;
  for (;;) {
    ssize_t r = mapfs_pread(fs, fd, buf, sizeof buf, off);
    if (r < 0) {
      int e = errno;
      mapfs_close(fs, fd);
      errno = e;
      return false;
    }
    if (r == 0) break;
    out->append(buf, static_cast<size_t>(r));
    off += r;
  }
  mapfs_close(fs, fd);
  return true;
}

// Names in a directory (without "." and ".."), or errno on failure.
inline int ListDir(mapfs_t* fs, const std::string& path, std::vector<std::string>* names) {
  mapfs_dir_t* d = mapfs_opendir(fs, path.c_str());
  if (d == nullptr) return errno;
  names->clear();
  for (;;) {
    errno = 0;
    struct dirent* e = mapfs_readdir(d);
    if (e == nullptr) break;
    std::string n = e->d_name;
    if (n != "." && n != "..") names->push_back(n);
  }
  int err = errno;
  mapfs_closedir(d);
  return err;
}

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A T in anonymous shared memory: visible to forked children.
template <typename T>
class SharedMem {
 public:
  SharedMem() {
    void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    p_ = new (p) T();
  }
  ~SharedMem() {
    p_->~T();
    ::munmap(p_, sizeof(T));
  }
  SharedMem(const SharedMem&) = delete;
  SharedMem& operator=(const SharedMem&) = delete;
  T* operator->() { return p_; }
  T& operator*() { return *p_; }

 private:
  T* p_;
};

// Polls `pred` until it holds (true) or `seconds` pass (false).
template <typename Pred>
bool WaitUntil(Pred pred, double seconds) {
  auto t0 = std::chrono::steady_clock::now();
  while (!pred()) {
    if (SecondsSince(t0) > seconds) return false;
    ::usleep(1000);
  }
  return true;
}

// Waits for a child for at most `seconds`; a child still running then is
// killed and -2 returned. Otherwise its exit code, or 128 + signal.
inline int WaitChildFor(pid_t pid, double seconds) {
  if (pid < 0) return -1;
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(st)) return WEXITSTATUS(st);
      if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
      return -1;
    }
    if (r < 0 && errno != EINTR) return -1;
    if (SecondsSince(t0) > seconds) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -2;
    }
    ::usleep(2000);
  }
}
inline std::string DescribeExit(int rc) {
  if (rc == -2) return "timed out (killed)";
  if (rc == 99) return "exit 99 (the child's alarm fired: hung)";
  if (rc > 128) return "killed by signal " + std::to_string(rc - 128);
  return "exit " + std::to_string(rc);
}

// Forks; the child runs fn and _exits with its return value (never returns
// into gtest). An alarm keeps a stuck child from hanging the suite (exit 99
// on SIGALRM).
inline pid_t ForkChild(const std::function<int()>& fn, unsigned alarm_s = 120) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGALRM, [](int) { _exit(99); });
    ::alarm(alarm_s);
    int rc = fn();
    _exit(rc);
  }
  return pid;
}
// Waits for a child; returns its exit code, or 128 + signal.
inline int WaitChild(pid_t pid) {
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid) return -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

// Integer from the environment, or `def`.
inline long EnvInt(const char* name, long def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return def;
  return std::strtol(v, nullptr, 0);
}

}  // namespace mapfs::fstest
