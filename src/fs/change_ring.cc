// The change ring (see change_ring.h).
//
// Writers claim a sequence number with one fetch_add and fill the entry
// under a per-entry sequence word: 0 while filling, the number when done.
// A reader copies an entry and checks the word before and after; a word
// that is larger than expected means the ring wrapped past the reader.
//
// Wake-ups: a follower with nothing to do sets `sleeping`, looks at `head`
// once more, and waits on the `wake` futex; a writer, after publishing,
// wakes it only if `sleeping` was set (sequentially consistent on both
// sides, so one of them sees the other). Writers pay the system call only
// for the first change after the follower went idle, and not at all for
// changes the only follower would skip (its own process's).
#include "fs/change_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <ctime>

#include "common/raw_syscall.h"

namespace mapfs::fs {
namespace {

void FutexWake(std::atomic<uint32_t>* w) {
  // Shared (not private): the follower is another process.
  RawSyscall(SYS_futex, reinterpret_cast<long>(w), FUTEX_WAKE, INT_MAX);
}

void FutexWait(std::atomic<uint32_t>* w, uint32_t val, int timeout_ms) {
  struct timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000};
  RawSyscall(SYS_futex, reinterpret_cast<long>(w), FUTEX_WAIT, val, reinterpret_cast<long>(&ts));
}

}  // namespace

void ChangePublisher::Publish(ChangeKind kind, uint64_t a, uint64_t b, uint64_t off, uint64_t len,
                              std::string_view name) {
  uint64_t q = ring_->head.fetch_add(1) + 1;
  meta::ChangeEntry& e = ring_->ring[q % meta::kChangeRing];
  // Acquire: no field store below overtakes the 0 (no fence: ThreadSanitizer
  // does not model fences).
  e.seq.exchange(0, std::memory_order_acq_rel);
  e.origin.store(pool_->mount_token(), std::memory_order_relaxed);
  e.kind.store(static_cast<uint64_t>(kind), std::memory_order_relaxed);
  e.a.store(a, std::memory_order_relaxed);
  e.b.store(b, std::memory_order_relaxed);
  e.off.store(off, std::memory_order_relaxed);
  e.len.store(len, std::memory_order_relaxed);
  size_t n = std::min<size_t>(name.size(), meta::kChangeNameWords * 8 - 1);
  e.name_len.store(n, std::memory_order_relaxed);
  for (size_t w = 0; w * 8 < n; w++) {
    uint64_t word = 0;
    std::memcpy(&word, name.data() + w * 8, std::min<size_t>(8, n - w * 8));
    e.name[w].store(word, std::memory_order_relaxed);
  }
  e.seq.store(q);  // seq_cst: also orders the `sleeping` load below
  // The only follower is this process's own (a FUSE daemon's writes): it
  // skips them anyway, so it sleeps on.
  if (ring_->sleeping.load() == 0) return;
  if (ring_->followers.load() == 1 && ring_->sleeper.load() == pool_->mount_token()) return;
  if (ring_->sleeping.exchange(0) != 0) {
    ring_->wake.fetch_add(1);
    FutexWake(&ring_->wake);
  }
}

ChangeFollower::ChangeFollower(meta::ChangeRing* ring, uint64_t token) : ring_(ring), token_(token) {
  ring_->followers.fetch_add(1);
  seen_ = ring_->head.load();
}

ChangeFollower::~ChangeFollower() { ring_->followers.fetch_sub(1); }

bool ChangeFollower::Drain(const std::function<void(const Change&)>& fn) {
  uint64_t head = ring_->head.load();
  if (head == seen_) return true;
  if (head - seen_ > static_cast<uint64_t>(meta::kChangeRing) / 2) {
    seen_ = head;
    return false;
  }
  bool complete = true;
  for (uint64_t q = seen_ + 1; q <= head; q++) {
    meta::ChangeEntry& e = ring_->ring[q % meta::kChangeRing];
    // A claimed entry is filled within a few hundred nanoseconds; a writer
    // that died (or stalls) mid-entry costs a full invalidation.
    uint64_t s1 = e.seq.load();
    for (int spin = 0; s1 != q && s1 < q && spin < 20000; spin++) {
      if (spin > 100) ::usleep(1);
      s1 = e.seq.load();
    }
    if (s1 != q) {
      complete = false;
      if (s1 > q) break;  // wrapped: the rest is gone too
      continue;
    }
    Change c;
    uint64_t origin = e.origin.load(std::memory_order_acquire);
    c.kind = static_cast<ChangeKind>(e.kind.load(std::memory_order_acquire));
    c.a = e.a.load(std::memory_order_acquire);
    c.b = e.b.load(std::memory_order_acquire);
    c.off = e.off.load(std::memory_order_acquire);
    c.len = e.len.load(std::memory_order_acquire);
    size_t n = std::min<uint64_t>(e.name_len.load(std::memory_order_acquire), meta::kChangeNameWords * 8 - 1);
    c.name.resize(n);
    for (size_t w = 0; w * 8 < n; w++) {
      uint64_t word = e.name[w].load(std::memory_order_acquire);
      std::memcpy(c.name.data() + w * 8, &word, std::min<size_t>(8, n - w * 8));
    }
    // The field loads are acquire loads, so this check cannot move above
    // them (free on x86; no fence, which ThreadSanitizer does not model).
    if (e.seq.load() != q) {
      complete = false;  // overwritten while copied
      continue;
    }
    if (origin != token_) fn(c);
  }
  seen_ = head;
  return complete;
}

void ChangeFollower::Wait(int timeout_ms) {
  uint32_t w = ring_->wake.load();
  ring_->sleeper.store(token_);
  ring_->sleeping.store(1);
  if (ring_->head.load() != seen_) return;
  FutexWait(&ring_->wake, w, timeout_ms);
}

}  // namespace mapfs::fs
