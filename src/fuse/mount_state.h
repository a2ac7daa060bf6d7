// The daemon's state behind one mount (internal to src/fuse).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "fuse/fuse_ops.h"

namespace mapfs::fuse {

struct Handle {
  std::shared_ptr<fs::OpenFile> f;
};

struct MountState {
  std::unique_ptr<fs::FileSystem> fs;
  CachePolicy cache;
  std::atomic<struct fuse_session*> se{nullptr};

  std::mutex mu;  // handles
  std::unordered_set<Handle*> handles;
  uint64_t Add(std::shared_ptr<fs::OpenFile> f);
  Status Drop(uint64_t fh);  // closes the handle's core description

  // Node ids the kernel holds, with its lookup counts (entry replies minus
  // forgets): what to invalidate when the change ring overflowed.
  std::mutex known_mu;
  std::unordered_map<uint64_t, uint64_t> known;
  void Remember(uint64_t ino);
  void Forget(uint64_t ino, uint64_t n);
};

}  // namespace mapfs::fuse
