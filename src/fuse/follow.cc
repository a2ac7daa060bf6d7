// The change-ring follower (see follow.h).
//
// Only nodes the kernel holds are notified (the others have nothing
// cached; the kernel would answer ENOENT). Notifications run on this thread,
// never inside a request handler, so a notification that waits for a
// request in flight (the kernel locks the directory or the pages) waits for
// a worker thread that is free to finish it.
#include "fuse/follow.h"

#include <cerrno>
#include <utility>
#include <vector>

namespace mapfs::fuse {

Follower::Follower(MountState* s) : s_(s), ring_(s->fs->FollowChanges()) { thread_ = std::thread([this] { Run(); }); }

Follower::~Follower() {
  stop_.store(true);
  thread_.join();
}

void Follower::Run() {
  while (!stop_.load()) {
    bool complete = ring_->Drain([this](const fs::Change& c) { Apply(c); });
    if (!complete) InvalidateAll();
    // The timeout only bounds how long a stop waits.
    ring_->Wait(100);
  }
}

void Follower::Apply(const fs::Change& c) {
  struct fuse_session* se = s_->se.load();
  if (se == nullptr) return;
  switch (c.kind) {
    case fs::ChangeKind::kName:
      if (s_->Knows(c.a)) {
        (void)fuse_lowlevel_notify_inval_entry(se, c.a, c.name.data(), c.name.size());
        (void)fuse_lowlevel_notify_inval_inode(se, c.a, -1, 0);
      }
      if (c.b != 0 && s_->Knows(c.b)) (void)fuse_lowlevel_notify_inval_inode(se, c.b, -1, 0);
      break;
    case fs::ChangeKind::kAttr:
      if (s_->Knows(c.a)) (void)fuse_lowlevel_notify_inval_inode(se, c.a, -1, 0);
      break;
    case fs::ChangeKind::kData:
      if (s_->Knows(c.a))
        (void)fuse_lowlevel_notify_inval_inode(se, c.a, static_cast<off_t>(c.off), static_cast<off_t>(c.len));
      break;
  }
}

// Changes were lost: every name the kernel was given and every node it
// holds may be stale.
void Follower::InvalidateAll() {
  struct fuse_session* se = s_->se.load();
  if (se == nullptr) return;
  std::vector<std::pair<uint64_t, std::string>> names;
  std::vector<uint64_t> nodes{FUSE_ROOT_ID};
  {
    std::lock_guard<std::mutex> g(s_->known_mu);
    for (auto& [ino, k] : s_->known) {
      nodes.push_back(ino);
      names.insert(names.end(), k.names.begin(), k.names.end());
    }
  }
  for (auto& [dir, name] : names) (void)fuse_lowlevel_notify_inval_entry(se, dir, name.data(), name.size());
  for (uint64_t ino : nodes) (void)fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);
}

}  // namespace mapfs::fuse
