#include "meta/inode_locks.h"

#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>

#include "common/log.h"
#include "medium/pool.h"
#include "medium/protection.h"

namespace mapfs::meta {

using medium::kMaxMounts;

InodeLocks::InodeLocks(medium::Pool* pool)
    : pool_(pool), sh_(FsSharedOf(pool)), me_(static_cast<uint32_t>(pool->mount_slot() + 1)) {
  NoteSlot();
  SetRowOpen(me_ - 1, true);
}

void InodeLocks::SetRowOpen(uint32_t slot, bool open) {
  bool tagged = pool_->protect() && medium::protection::Key() >= 0;
  if (!tagged) {
    row_open_ = true;
    return;
  }
  void* row = &sh_->holds[slot][0];
  constexpr int kProt = PROT_READ | PROT_WRITE;
  Status st = open ? medium::protection::Untag(row, kHoldRowBytes, kProt)
                   : medium::protection::Tag(row, kHoldRowBytes, kProt);
  if (open) row_open_ = st.ok();
  if (!st.ok()) MAPFS_LOG("mapfs: reader counters of mount slot %u: %s\n", slot, st.ToString().c_str());
}

void InodeLocks::NoteSlot() {
  uint32_t used = sh_->slots_used.load();
  while (used < me_ && !sh_->slots_used.compare_exchange_weak(used, me_)) {
  }
}

void InodeLocks::AfterFork() {
  // The child inherited the parent's mapping, the parent's row open in it:
  // that row is the parent's again (tagged), the child's own is opened.
  uint32_t parent = me_ - 1;
  me_ = static_cast<uint32_t>(pool_->mount_slot() + 1);
  NoteSlot();
  if (me_ - 1 != parent) SetRowOpen(parent, false);
  SetRowOpen(me_ - 1, true);
}

void InodeLocks::ScrubSlot(medium::Pool* pool, int slot) {
  FsShared* sh = FsSharedOf(pool);
  for (int s = 0; s < kLockStripes; s++) {
    sh->holds[slot][s].store(0);
    uint32_t w = static_cast<uint32_t>(slot) + 1;
    sh->writer[s].compare_exchange_strong(w, 0);
  }
  sh->reaped[slot].store(0);
}

// Spins briefly, then yields, then sleeps; every ~50 ms of waiting it looks
// for dead holders.
void InodeLocks::Wait(int* round) {
  int r = (*round)++;
  if (r < 64) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    return;
  }
  if (r < 256) {
    sched_yield();
    return;
  }
  struct timespec ts {0, 50 * 1000};
  nanosleep(&ts, nullptr);
  if (r % 1000 == 999) ReapDead();
}

bool InodeLocks::ReadersActive(uint32_t stripe) {
  uint32_t n = std::min<uint32_t>(sh_->slots_used.load(), kMaxMounts);
  for (uint32_t m = 0; m < n; m++)
    if (sh_->holds[m][stripe].load() != 0) return true;
  return false;
}

// The stores of a reader go to this mount's own row only (open with the
// rights closed, see row_open_); waiting stores nothing but may reap
// (ReapDead opens the rights itself).
void InodeLocks::ReadLockSlow(uint32_t stripe) {
  if (__builtin_expect(!row_open_, 0)) {
    medium::protection::Inside rights;
    ReadLockOwn(stripe);
    return;
  }
  ReadLockOwn(stripe);
}

void InodeLocks::ReadLockOwn(uint32_t stripe) {
  auto& mine = sh_->holds[me_ - 1][stripe];
  int round = 0;
  for (;;) {
    mine.fetch_add(1);
    if (sh_->writer[stripe].load() == 0) return;
    mine.fetch_sub(1);
    while (sh_->writer[stripe].load(std::memory_order_relaxed) != 0) Wait(&round);
  }
}

void InodeLocks::ReadUnlockSlow(uint32_t stripe) {
  medium::protection::Inside rights;
  sh_->holds[me_ - 1][stripe].fetch_sub(1);
}

void InodeLocks::WriteLock(uint32_t stripe) {
  int round = 0;
  for (;;) {
    uint32_t expect = 0;
    if (sh_->writer[stripe].compare_exchange_weak(expect, me_)) break;
    Wait(&round);
  }
  while (ReadersActive(stripe)) Wait(&round);
}

void InodeLocks::WriteUnlock(uint32_t stripe) { sh_->writer[stripe].store(0); }

int InodeLocks::ReapDead() {
  // Rare (a waiter every ~50 ms), and it may come from a reader under
  // ReadOnly: it stores into other mounts' rows and writer words.
  medium::protection::Inside rights;
  medium::SharedState* ss = pool_->shared();
  uint32_t n = std::min<uint32_t>(sh_->slots_used.load(), kMaxMounts);
  std::vector<std::pair<uint32_t, uint64_t>> dead;  // (mount slot, token)
  for (uint32_t m = 0; m < n; m++) {
    uint64_t token = ss->mounts[m].token.load();
    if (token == 0 || sh_->reaped[m].load() == token) continue;
    if (!pool_->MountAlive(static_cast<int>(m))) dead.push_back({m, token});
  }
  if (dead.empty()) return 0;
  // These mounts were dead before this replay: what they committed is made
  // whole before their locks are released. Under the recovery lock, so a
  // slot is not reused (Pool::RegisterMount) while we clear it.
  medium::PoolLock lock(pool_, medium::LockId::kRecovery);
  pool_->redo().RecoverDeadLocked();
  int reaped = 0;
  for (auto [m, token] : dead) {
    if (ss->mounts[m].token.load() != token || sh_->reaped[m].load() == token) continue;
    for (int s = 0; s < kLockStripes; s++) {
      sh_->holds[m][s].store(0);
      uint32_t w = m + 1;
      sh_->writer[s].compare_exchange_strong(w, 0);
    }
    sh_->reaped[m].store(token);
    reaped++;
  }
  return reaped;
}

void LockSet::Add(uint64_t ino, bool write) {
  if (ino == 0) return;
  uint32_t s = InodeLocks::StripeOf(ino);
  for (int i = 0; i < n_; i++)
    if (want_[i].stripe == s) {
      want_[i].write = want_[i].write || write;
      return;
    }
  if (n_ == kMaxInodes) __builtin_trap();  // only a new caller's bug gets here
  // Kept sorted by stripe as it grows (insertion into at most 3).
  int i = n_++;
  for (; i > 0 && want_[i - 1].stripe > s; i--) want_[i] = want_[i - 1];
  want_[i] = {s, write};
}

void LockSet::Acquire() {
  for (int i = 0; i < n_; i++) want_[i].write ? locks_->WriteLock(want_[i].stripe) : locks_->ReadLock(want_[i].stripe);
  held_ = true;
}

void LockSet::Release() {
  if (!held_) return;
  for (int i = n_; i-- > 0;)
    want_[i].write ? locks_->WriteUnlock(want_[i].stripe) : locks_->ReadUnlock(want_[i].stripe);
  held_ = false;
}

}  // namespace mapfs::meta
