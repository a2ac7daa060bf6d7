// The daemon's state behind one mount (internal to src/fuse).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

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
  // forgets) and the names it was given them under: what to invalidate
  // when the change ring lost changes. A node's names go with its last
  // forget (a cached name holds a reference to its node).
  struct Known {
    uint64_t nlookup = 0;
    std::vector<std::pair<uint64_t, std::string>> names;  // (directory, name)
  };
  std::mutex known_mu;
  std::unordered_map<uint64_t, Known> known;
  void Remember(uint64_t ino, uint64_t parent, std::string_view name);
  void Forget(uint64_t ino, uint64_t n);
  bool Knows(uint64_t ino);
};

}  // namespace mapfs::fuse
