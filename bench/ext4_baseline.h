// The ext4 baseline of ../shared/BENCHMARKS.md: an ext4 file system (with its
// journal; or XFS, for the overlay suite) on a loop device whose backing file is in /dev/shm, mounted on a
// fresh directory for one suite's run. Where the machine refuses (no root,
// no loop devices, no mkfs.ext4), Mount says why and the suite goes on
// without it, printing "ext4 skipped: <reason>".
#pragma once

#include <cstdint>
#include <string>

namespace mapfs::bench {

class Ext4Baseline {
 public:
  Ext4Baseline() = default;
  Ext4Baseline(const Ext4Baseline&) = delete;
  Ext4Baseline& operator=(const Ext4Baseline&) = delete;
  // Unmounts (the loop device detaches with it) and removes the image.
  ~Ext4Baseline();

  // Formats an image of `bytes` in `shm_dir` (ext4: with at least
  // `inodes` inodes when non-zero) as `type` ("ext4", or "xfs" for the
  // overlay suite; XFS allocates inodes on demand) and mounts it. On
  // failure returns false with `reason` set and leaves nothing behind.
  bool Mount(uint64_t bytes, uint64_t inodes, const std::string& shm_dir, std::string* reason,
             const std::string& type = "ext4");
  bool mounted() const { return !dir_.empty(); }
  // The mount point (a directory under /tmp); empty when not mounted.
  const std::string& dir() const { return dir_; }

 private:
  std::string image_, dir_;
};

// Mounts `e` unless MAPFS_BENCH_NO_EXT4 is set; prints "ext4 skipped:
// <reason>" (or "ext4: ..." with the mount point) and returns whether the
// baseline is there.
bool MountExt4OrSay(Ext4Baseline& e, uint64_t bytes, uint64_t inodes, const std::string& shm_dir);
// The same for `type` ("ext4" or "xfs"), printing "TYPE skipped: ...".
bool MountLoopOrSay(Ext4Baseline& e, const std::string& type, uint64_t bytes, uint64_t inodes,
                    const std::string& shm_dir);

}  // namespace mapfs::bench
