// The daemon's follower of the pool's change ring (fs/change_ring.h): a
// thread that tells the kernel which cached names, attributes and pages of
// the mount another process (the shim, the C API, the CLI, another mount)
// made stale, so the mount may cache them at all.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "fuse/mount_state.h"

namespace mapfs::fuse {

class Follower {
 public:
  // Starts following at once (changes committed from here on are seen);
  // notifications go out once the state has a session.
  explicit Follower(MountState* s);
  ~Follower();  // stops the thread
  Follower(const Follower&) = delete;
  Follower& operator=(const Follower&) = delete;

 private:
  void Run();
  void Apply(const fs::Change& c);
  void InvalidateAll();
  // Makes the kernel look NAME in DIR up again at its next use, keeping the
  // dentry hashed (a cwd keeps its path); a plain invalidation on kernels
  // without FUSE_EXPIRE_ONLY.
  void ExpireEntry(struct fuse_session* se, uint64_t dir, const std::string& name);

  MountState* s_;
  std::unique_ptr<fs::ChangeFollower> ring_;
  std::atomic<bool> stop_{false};
  bool expire_only_ = true;  // the kernel takes FUSE_EXPIRE_ONLY (only the thread uses it)
  std::thread thread_;
};

}  // namespace mapfs::fuse
