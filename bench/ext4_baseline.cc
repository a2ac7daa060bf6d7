#include "ext4_baseline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench_util.h"

namespace mapfs::bench {
namespace {

// Runs a system tool outside the shim (these processes may run under it);
// on failure puts its last output line into `reason`.
bool Tool(const std::string& cmd, std::string* reason) {
  std::string out;
  if (RunCapture("env -u LD_PRELOAD " + cmd + " 2>&1", &out)) return true;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  size_t nl = out.rfind('\n');
  *reason = cmd.substr(0, cmd.find(' ')) + ": " + (out.empty() ? "failed" : out.substr(nl == std::string::npos ? 0 : nl + 1));
  return false;
}

}  // namespace

bool Ext4Baseline::Mount(uint64_t bytes, uint64_t inodes, const std::string& shm_dir, std::string* reason,
                         const std::string& type) {
  std::string tag = std::to_string(::getpid());
  std::string image = shm_dir + "/mapfs-bench-" + type + "-" + tag + ".img";
  std::string dir = "/tmp/mapfs-bench-" + type + "-" + tag;
  if (::geteuid() != 0) {
    *reason = "mounting a loop device needs root";
    return false;
  }
  int fd = ::open(image.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *reason = image + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd), ::unlink(image.c_str());
    return false;
  }
  ::close(fd);
  // Inode tables and the journal initialised now, not by a kernel thread
  // during the measurements.
  std::string n = inodes ? " -N " + std::to_string(inodes + 1024) : "";
  std::string mkfs = type == "xfs" ? "mkfs.xfs -q -f -K" : "mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard" + n;
  if (!Tool(mkfs + " " + ShellQuote(image), reason)) {
    ::unlink(image.c_str());
    return false;
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *reason = dir + ": " + std::strerror(errno);
    ::unlink(image.c_str());
    return false;
  }
  if (!Tool("mount -t " + type + " -o loop " + ShellQuote(image) + " " + ShellQuote(dir), reason)) {
    ::rmdir(dir.c_str());
    ::unlink(image.c_str());
    return false;
  }
  image_ = image;
  dir_ = dir;
  return true;
}

Ext4Baseline::~Ext4Baseline() {
  if (dir_.empty()) return;
  std::string reason;
  if (!Tool("umount " + ShellQuote(dir_), &reason)) std::fprintf(stderr, "mapfs bench: %s\n", reason.c_str());
  ::rmdir(dir_.c_str());
  ::unlink(image_.c_str());
}

bool MountLoopOrSay(Ext4Baseline& e, const std::string& type, uint64_t bytes, uint64_t inodes,
                    const std::string& shm_dir) {
  std::string reason = "MAPFS_BENCH_NO_EXT4 is set";
  if (std::getenv("MAPFS_BENCH_NO_EXT4") == nullptr && e.Mount(bytes, inodes, shm_dir, &reason, type)) {
    std::printf("%s: %llu MiB on a loop device over %s, mounted at %s\n", type.c_str(),
                static_cast<unsigned long long>(bytes >> 20), shm_dir.c_str(), e.dir().c_str());
    return true;
  }
  std::printf("%s skipped: %s\n", type.c_str(), reason.c_str());
  return false;
}

bool MountExt4OrSay(Ext4Baseline& e, uint64_t bytes, uint64_t inodes, const std::string& shm_dir) {
  return MountLoopOrSay(e, "ext4", bytes, inodes, shm_dir);
}

}  // namespace mapfs::bench
