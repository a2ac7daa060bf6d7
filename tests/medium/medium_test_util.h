// Helpers for the medium-layer tests: raw file access (independent of the
// pool's own mapping), header surgery, and guards that turn a hang into a
// failure instead of a stuck CI job.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/crc32c.h"
#include "medium/pool.h"
#include "medium/pool_format.h"

namespace mapfs::testing {

using medium::Pool;
using medium::format::PoolHeader;
using medium::format::PoolState;

inline std::vector<uint8_t> ReadFileBytes(const std::string& path, size_t max = SIZE_MAX) {
  std::vector<uint8_t> out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  uint8_t buf[1 << 16];
  while (out.size() < max) {
    size_t want = std::min(sizeof buf, max - out.size());
    ssize_t n = ::read(fd, buf, want);
    if (n <= 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

inline bool WriteFileAt(const std::string& path, uint64_t off, const void* data, size_t n) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::pwrite(fd, data, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

inline bool WriteWholeFile(const std::string& path, const std::vector<uint8_t>& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = data.empty() || ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  ::close(fd);
  return ok;
}

inline uint64_t FileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

inline bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

inline PoolHeader ReadHeader(const std::string& path) {
  PoolHeader h{};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (::pread(fd, &h, sizeof h, 0) != sizeof h) std::memset(&h, 0, sizeof h);
    ::close(fd);
  }
  return h;
}

// The checksum as docs/pool_format.h defines it: crc32c of every byte before
// the checksum field. Computed here, not by the code under test.
inline uint32_t HeaderCrc(const PoolHeader& h) { return Crc32c(&h, offsetof(PoolHeader, checksum)); }

inline bool WriteHeader(const std::string& path, PoolHeader h, bool fix_checksum) {
  if (fix_checksum) h.checksum = HeaderCrc(h);
  return WriteFileAt(path, 0, &h, sizeof h);
}

// The persistent state words, read from the file rather than a mapping.
inline PoolState ReadState(const std::string& path) {
  PoolState s{};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (::pread(fd, &s, sizeof s, medium::format::kStateOff) != sizeof s) std::memset(&s, 0xff, sizeof s);
    ::close(fd);
  }
  return s;
}

// Turns a hang in the calling process into a loud failure.
class HangGuard {
 public:
  explicit HangGuard(unsigned seconds) {
    struct sigaction sa {};
    sa.sa_handler = [](int) {
      static const char msg[] = "\n*** medium test hung (HangGuard alarm) ***\n";
      ssize_t w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
      (void)w;
      ::_exit(124);
    };
    ::sigaction(SIGALRM, &sa, &old_);
    ::alarm(seconds);
  }
  ~HangGuard() {
    ::alarm(0);
    ::sigaction(SIGALRM, &old_, nullptr);
  }

 private:
  struct sigaction old_ {};
};

// Runs `fn` in a forked child that exits with fn's return value (or dies of
// SIGALRM after `timeout_s` seconds). Returns the raw wait status.
inline int RunInChild(const std::function<int()>& fn, unsigned timeout_s = 60) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGALRM, SIG_DFL);
    ::alarm(timeout_s);
    int rc = fn();
    ::_exit(rc);
  }
  if (pid < 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

inline std::string DescribeWait(int status) {
  if (status == -1) return "fork failed";
  if (WIFEXITED(status)) return "exited with " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

inline std::unique_ptr<Pool> OpenOrNull(const std::string& path) {
  auto r = Pool::Open(path);
  if (!r.ok()) return nullptr;
  return std::move(*r);
}

}  // namespace mapfs::testing
