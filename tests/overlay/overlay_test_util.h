// Directories for overlay tests: a fresh one on tmpfs (/dev/shm), or on an
// ext4 file system in a loop-mounted image (one per test binary, so the
// split engine's EXT4_IOC_MOVE_EXT path runs for real).
#pragma once

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "overlay/engine.h"

namespace mapfs::test {

inline int Sh(const std::string& cmd) { return system(cmd.c_str()); }

// The ext4 mount, set up on first use; empty with `why` set when this
// machine cannot (not root, no loop devices).
inline const std::string& Ext4Mount(std::string* why) {
  static std::string mnt, reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (geteuid() != 0) {
      reason = "not root: cannot loop-mount an ext4 image";
    } else {
      char tmpl[] = "/tmp/mapfs-ovl-ext4-XXXXXX";
      if (mkdtemp(tmpl) == nullptr) {
        reason = "mkdtemp failed";
      } else {
        std::string d = tmpl;
        std::string img = d + ".img";
        if (Sh("truncate -s 256M " + img + " && mkfs.ext4 -q -F -b 4096 " + img + " >/dev/null 2>&1 && mount -o loop " +
               img + " " + d) != 0) {
          reason = "mkfs.ext4 + mount -o loop failed (losetup impossible here?)";
          Sh("rm -f " + img);
          rmdir(d.c_str());
        } else {
          mnt = d;
          // Unmounted at exit (lazily: a crashed child may still hold it).
          static std::string cleanup = "umount -l " + d + " 2>/dev/null; rm -rf " + d + " " + img;
          atexit([] { Sh(cleanup); });
        }
      }
    }
  }
  if (why != nullptr) *why = reason;
  return mnt;
}

// A fresh empty directory under `parent`; removed by the destructor.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent) {
    std::string t = parent + "/ovl-XXXXXX";
    std::vector<char> b(t.begin(), t.end());
    b.push_back('\0');
    if (mkdtemp(b.data()) != nullptr) path_ = b.data();
  }
  ~ScratchDir() {
    if (!path_.empty()) Sh("rm -rf '" + path_ + "'");
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sets `parent` to the backing directory of case `kind`: /dev/shm for
// "tmpfs", the loop-mounted ext4 for "ext4". When ext4 cannot be had it
// leaves `parent` empty and skips the test (not root) or fails it (root:
// loop devices should work).
inline void BackingDir(const std::string& kind, std::string* parent) {
  parent->clear();
  if (kind != "ext4") {
    *parent = "/dev/shm";
    return;
  }
  std::string why;
  const std::string& mnt = Ext4Mount(&why);
  if (!mnt.empty()) {
    *parent = mnt;
  } else if (geteuid() != 0) {
    GTEST_SKIP() << "ext4 case skipped: " << why;
  } else {
    FAIL() << "ext4 case cannot run: " << why;
  }
}

// The matrix the split engine's suites run on: each backing directory
// (tmpfs, ext4) in each mode, as test names like "ext4_strict".
using DirAndMode = std::tuple<std::string, overlay::Mode>;

inline auto DirsTimesModes() {
  return ::testing::Combine(::testing::Values("tmpfs", "ext4"),
                            ::testing::Values(overlay::Mode::kPosix, overlay::Mode::kSync, overlay::Mode::kStrict));
}

inline std::string DirAndModeName(const ::testing::TestParamInfo<DirAndMode>& info) {
  static const char* const kModes[] = {"posix", "sync", "strict"};
  return std::get<0>(info.param) + "_" + kModes[static_cast<int>(std::get<1>(info.param))];
}

}  // namespace mapfs::test
