// The change-ring follower (see follow.h).
//
// Only nodes the kernel holds are notified (the others have nothing
// cached; the kernel would answer ENOENT). Notifications run on this thread,
// never inside a request handler, so a notification that waits for a
// request in flight (the kernel locks the directory or the pages) waits for
// a worker thread that is free to finish it.
//
// Names are expired, not dropped (ExpireEntry): the kernel's plain
// invalidation unhashes the dentry, and a directory that is some process's
// cwd then has no path until something looks its name up again (getcwd
// fails with ENOENT, `pwd` says "cannot access parent directories"; CPython's
// regrtest lost whole modules so when the ring overflowed). An expired name
// is looked up again at its next use, which replaces it if it changed.
#include "fuse/follow.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstdint>
#include <utility>
#include <vector>

namespace mapfs::fuse {
namespace {

// The kernel's notification (include/uapi/linux/fuse.h): libfuse 3.14 has
// no call for FUSE_EXPIRE_ONLY (Linux 6.2, FUSE 7.38), so it is written to
// the session's device as libfuse writes its own notifications.
struct OutHeader {
  uint32_t len;
  int32_t error;  // the notification code
  uint64_t unique;  // 0: a notification, not a reply
};
struct InvalEntryOut {
  uint64_t parent;
  uint32_t namelen;
  uint32_t flags;
};
static_assert(sizeof(OutHeader) == 16 && sizeof(InvalEntryOut) == 16, "the kernel's layout");
constexpr int32_t kNotifyInvalEntry = 3;  // FUSE_NOTIFY_INVAL_ENTRY
constexpr uint32_t kExpireOnly = 1;       // FUSE_EXPIRE_ONLY

}  // namespace

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
        ExpireEntry(se, c.a, c.name);
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

void Follower::ExpireEntry(struct fuse_session* se, uint64_t dir, const std::string& name) {
  if (expire_only_) {
    OutHeader h{};
    InvalEntryOut o{};
    o.parent = dir;
    o.namelen = static_cast<uint32_t>(name.size());
    o.flags = kExpireOnly;
    struct iovec iov[3] = {{&h, sizeof h}, {&o, sizeof o}, {const_cast<char*>(name.c_str()), name.size() + 1}};
    h.len = static_cast<uint32_t>(sizeof h + sizeof o + name.size() + 1);
    h.error = kNotifyInvalEntry;
    ssize_t n = ::writev(fuse_session_fd(se), iov, 3);
    // ENOENT: the kernel holds no such name, nothing to expire. EINVAL for
    // a name it would accept: a kernel without FUSE_EXPIRE_ONLY (before 6.2).
    if (n >= 0 || errno != EINVAL) return;
    expire_only_ = false;
  }
  (void)fuse_lowlevel_notify_inval_entry(se, dir, name.data(), name.size());
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
  for (auto& [dir, name] : names) ExpireEntry(se, dir, name);
  for (uint64_t ino : nodes) (void)fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);
}

}  // namespace mapfs::fuse
