// The change ring (meta::ChangeRing in the pool's shared memory): every
// process's core publishes the namespace and inode changes it commits, and a
// FUSE daemon follows them to invalidate what its kernel cached. Publishing
// costs nothing while no follower is registered.
//
// Each entry says what became stale, not what the new state is: a follower
// only drops caches and the kernel asks again.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "meta/shared_fs.h"

namespace mapfs::fs {

enum class ChangeKind : uint64_t {
  kName = 1,  // the name `name` in directory `a` changed (appeared, vanished,
              // names another inode); `a`'s attributes and, if b != 0, the
              // attributes of inode `b` (the one it named or names) too
  kAttr = 2,  // inode `a`'s attributes (mode, owner, times, link count)
  kData = 3,  // inode `a`'s bytes [off, off+len) (len 0: from off to the end) and size/mtime
};

struct Change {
  ChangeKind kind;
  uint64_t a = 0, b = 0, off = 0, len = 0;
  std::string name;
};

// Publishes changes of one mount (its token marks them).
class ChangePublisher {
 public:
  // The pool's current mount token marks the changes (it changes in a
  // forked child).
  ChangePublisher(meta::ChangeRing* ring, const medium::Pool* pool) : ring_(ring), pool_(pool) {}
  void Name(uint64_t dir, std::string_view name, uint64_t ino) {
    if (Active()) Publish(ChangeKind::kName, dir, ino, 0, 0, name);
  }
  void Attr(uint64_t ino) {
    if (Active()) Publish(ChangeKind::kAttr, ino, 0, 0, 0, {});
  }
  void Data(uint64_t ino, uint64_t off, uint64_t len) {
    if (Active()) Publish(ChangeKind::kData, ino, 0, off, len, {});
  }

 private:
  bool Active() const { return ring_->followers.load(std::memory_order_relaxed) != 0; }
  void Publish(ChangeKind kind, uint64_t a, uint64_t b, uint64_t off, uint64_t len, std::string_view name);
  meta::ChangeRing* ring_;
  const medium::Pool* pool_;
};

// Follows the ring from the moment it is created (registered as a follower
// until destroyed). One thread.
class ChangeFollower {
 public:
  // token: the follower's own mount; its changes are skipped.
  ChangeFollower(meta::ChangeRing* ring, uint64_t token);
  ~ChangeFollower();
  ChangeFollower(const ChangeFollower&) = delete;
  ChangeFollower& operator=(const ChangeFollower&) = delete;

  // Calls fn for each change published since the last call, in order.
  // Returns false when changes were lost (the ring wrapped, or a writer died
  // mid-entry): the caller must then invalidate everything it cached.
  bool Drain(const std::function<void(const Change&)>& fn);
  // Sleeps until a change is published or timeout_ms passes.
  void Wait(int timeout_ms);

 private:
  meta::ChangeRing* ring_;
  uint64_t token_;
  uint64_t seen_;
};

}  // namespace mapfs::fs
