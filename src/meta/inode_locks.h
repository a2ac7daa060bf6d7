// InodeLocks: reader/writer locks per inode, shared by every thread and
// process that has the pool open, and safe when a holder dies.
//
// Locks are striped: inode i uses stripe Hash(i) % kLockStripes, so two
// files share a lock only when their stripes collide (1 in 8192). A writer
// publishes itself in the stripe's writer word (CAS 0 -> its mount slot + 1)
// and waits until no mount counts a reader; a reader counts itself in its
// own mount's counter, then backs off if it finds a writer. Both sides use
// sequentially consistent operations, so one of them always sees the other
// (Dekker). Writers have priority: readers back off while one waits.
//
// A mount that dies (its process died or exec'd: Pool::MountAlive) leaves
// its writer words and its own reader counters; a waiter that waits long
// enough checks for dead mounts and releases what they held, after
// replaying their committed redo records (RecoverDead), so the structures
// the dead holder was changing are whole again. A dead mount's slot may be
// reused by a new mount, which first clears what was left there
// (ScrubSlot). A free slot needs no clearing, so a mount normally scans
// nothing: a mount frees its slot only by a clean close or an idle end,
// holding no lock (Pool::RegisterMount).
//
// A thread never takes a second lock while it holds one, except through
// LockSet (which takes several in stripe order). Locks are not recursive.
//
// Protection keys (medium/protection.h): where the pool's mappings carry the
// key, this mount's own row of reader counters (FsShared::holds[slot], pages
// of its own) is left untagged in this process's mapping, so ReadLock and
// ReadUnlock store there with the rights closed: pread, read, stat and
// fstat run under protection::ReadOnly, without the two wrpkru. Every other
// store here (writer words, other rows, slots_used, ReapDead) is rare on a
// read path and opens the rights itself (an Inside, nested in the call's
// scope), or runs only inside an Inside already (WriteLock: every writer).
#pragma once

#include <cstdint>
#include <vector>

#include "meta/shared_fs.h"

namespace mapfs::meta {

class InodeLocks {
 public:
  explicit InodeLocks(medium::Pool* pool);

  static uint32_t StripeOf(uint64_t ino) {
    uint64_t h = ino * 0x9e3779b97f4a7c15ull;
    return static_cast<uint32_t>(h >> 51) % kLockStripes;
  }
  // Inline for the common case (this mount's row open, no writer): every
  // stat and open takes and drops three read locks.
  void ReadLock(uint32_t stripe) {
    if (__builtin_expect(row_open_, 1)) {
      auto& mine = sh_->holds[me_ - 1][stripe];
      mine.fetch_add(1);
      if (sh_->writer[stripe].load() == 0) return;
      mine.fetch_sub(1);
    }
    ReadLockSlow(stripe);
  }
  void ReadUnlock(uint32_t stripe) {
    if (__builtin_expect(row_open_, 1)) {
      sh_->holds[me_ - 1][stripe].fetch_sub(1);
      return;
    }
    ReadUnlockSlow(stripe);
  }
  void WriteLock(uint32_t stripe);
  void WriteUnlock(uint32_t stripe);

  // Releases locks held by dead mounts. Returns how many mounts were reaped.
  // Opens the rights itself (a reader waiting under ReadOnly reaches it).
  int ReapDead();

  // In the child of fork(), after the pool took its own mount
  // (Pool::AfterFork): from now on this copy holds locks as that mount; the
  // parent's holds stay the parent's.
  void AfterFork();

  // Whether this mount's row of reader counters is writable with the
  // rights closed (untagged, or no key at all). Tests look.
  bool row_open() const { return row_open_; }

  // Clears every hold and writer word of mount slot `slot` (Pool's
  // OpenOptions::scrub_slot): what a dead mount that had the slot left.
  // Runs only when a dead mount's slot is reused (8192 stripes: tens of
  // microseconds, which a mount of a free slot no longer pays).
  static void ScrubSlot(medium::Pool* pool, int slot);

 private:
  void Wait(int* round);
  bool ReadersActive(uint32_t stripe);
  void NoteSlot();
  void ReadLockOwn(uint32_t stripe);
  void ReadLockSlow(uint32_t stripe);
  void ReadUnlockSlow(uint32_t stripe);
  // Leaves row `slot` untagged (open) or tags it again (a fork's child
  // giving its parent's row back); sets row_open_.
  void SetRowOpen(uint32_t slot, bool open);

  medium::Pool* pool_;
  FsShared* sh_;
  uint32_t me_;  // mount slot + 1
  // False only when keys tag this pool and the row could not be left open
  // (pkey_mprotect failed): then ReadLock/ReadUnlock open the rights
  // themselves, so a read path under ReadOnly still never faults.
  bool row_open_ = true;
};

// Write (or read) locks on a set of inodes, taken in stripe order without
// duplicates, released on destruction. Kept inline (no allocation): an
// operation locks at most kMaxInodes inodes (rename: both parents, the
// source and the target).
class LockSet {
 public:
  static constexpr int kMaxInodes = 4;
  explicit LockSet(InodeLocks* locks) : locks_(locks) {}
  ~LockSet() { Release(); }
  LockSet(const LockSet&) = delete;
  LockSet& operator=(const LockSet&) = delete;
  // Adds inodes to lock; call before Acquire. ino 0 is ignored. At most
  // kMaxInodes distinct stripes (a caller's bug otherwise: it traps).
  void Add(uint64_t ino, bool write);
  void Acquire();
  void Release();

 private:
  InodeLocks* locks_;
  struct Want {
    uint32_t stripe;
    bool write;
  };
  Want want_[kMaxInodes];
  int n_ = 0;
  bool held_ = false;
};

// RAII for one lock.
class InodeLock {
 public:
  InodeLock(InodeLocks* locks, uint64_t ino, bool write)
      : locks_(locks), stripe_(InodeLocks::StripeOf(ino)), write_(write) {
    write_ ? locks_->WriteLock(stripe_) : locks_->ReadLock(stripe_);
  }
  ~InodeLock() { write_ ? locks_->WriteUnlock(stripe_) : locks_->ReadUnlock(stripe_); }
  InodeLock(const InodeLock&) = delete;
  InodeLock& operator=(const InodeLock&) = delete;

 private:
  InodeLocks* locks_;
  uint32_t stripe_;
  bool write_;
};

}  // namespace mapfs::meta
