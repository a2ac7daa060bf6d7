// InodeTable: the superblock and the inode segments (fs_format.h).
//
// Slots are reserved and released through the per-segment bitmaps by atomic
// read-modify-writes, without a lock (only adding a segment takes the pool's
// kInodes lock, and the bitmaps are rewritten wholesale only by Reconcile,
// which runs with the pool open exclusively); everything else about an inode changes through the
// callers' transactions (namespace operations) or single atomic stores (the
// data path), under the inode's lock (inode_locks.h).
//
// Invariant: a slot whose mode is nonzero has its bitmap bit set. Reserve()
// sets the bit and writes its line back without a fence of its own: the
// caller's transaction, committed by the same thread, fences it, so the bit
// is durable no later than the inode it makes live. Release() clears it
// only after the transaction that freed the inode committed (durable at
// some later fence); a crash in between leaves a set bit over a free (or
// orphaned) slot, which Reconcile() returns.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
#include "meta/fs_format.h"
#include "meta/meta_tx.h"

namespace mapfs::space {
class Partitions;
}

namespace mapfs::meta {

class InodeTable {
 public:
  // Opens the table of the pool's file system. ENOENT when the pool has no
  // file system yet (see Format).
  static Result<std::unique_ptr<InodeTable>> Open(medium::Pool* pool, vm::Vm* vm, space::Partitions* space);
  // Makes the superblock and the first segment; `tx` must set the root
  // inode live (through Get/VoffOf) and is committed together with the
  // pointer that makes the file system exist. Needs an exclusive open.
  static Status Format(medium::Pool* pool, vm::Vm* vm, space::Partitions* space,
                       const std::function<Status(InodeTable*, MetaTx*)>& make_root);

  // The inode, or nullptr when `ino` is outside every segment. Inline: a
  // stat or an open asks five or six times; a segment this process has
  // mapped (seg_cache_) is a load, the first use of one maps it (GetSlow).
  format::Inode* Get(uint64_t ino) {
    if (ino == 0 || ino >= format::kMaxInodes) return nullptr;
    int seg = format::SegOf(ino);
    uint64_t slot = ino - format::SegBase(seg);
    if (slot < format::SegBitmapSlots(seg)) return nullptr;
    uint64_t v = seg_cache_[seg].load(std::memory_order_acquire);
    if (__builtin_expect(v == 0, 0)) return GetSlow(seg, slot);
    return reinterpret_cast<format::Inode*>(base_ + v + slot * format::kInodeSize);
  }
  // Virtual offset of the inode's first byte (for MetaTx stores).
  uint64_t VoffOf(uint64_t ino) const;
  uint64_t super_voff() const { return super_; }
  bool Valid(uint64_t ino);

  // Reserves a free slot: bit set and written back, durable at the calling
  // thread's next fence (its transaction's commit). ENOSPC when the table
  // and the pool are full.
  Result<uint64_t> Reserve();
  // Clears the bit of a slot whose inode is free (mode 0).
  void Release(uint64_t ino);

  // Every in-use slot (bit set), in order.
  void ForEach(const std::function<void(uint64_t ino, format::Inode*)>& fn);
  // Partitions the table owns (superblock and segments), for leak collection.
  void ForEachPartition(const std::function<void(uint64_t voff)>& fn);
  // Recovery: clears bits of free slots, sets bits of live slots that lack
  // one, and lists orphans (live, nlink 0) for the caller to free.
  Status Reconcile(std::vector<uint64_t>* orphans, uint64_t* fixed);
  // fsck: the same findings without changing anything.
  Status Check(std::vector<std::string>* problems);
  uint64_t segments();

 private:
  InodeTable(medium::Pool* pool, vm::Vm* vm, space::Partitions* space, uint64_t super)
      : pool_(pool), vm_(vm), space_(space), super_(super), base_(VmBase(vm)) {}
  static char* VmBase(vm::Vm* vm);
  format::Superblock* sb() const;
  uint64_t SegVoff(int seg);
  format::Inode* GetSlow(int seg, uint64_t slot);
  std::atomic<uint64_t>* BitmapWord(int seg, uint64_t slot);
  Status AddSegment(int seg);
  // One lock-free attempt of Reserve over the existing segments; ENOSPC
  // when every slot is taken.
  Result<uint64_t> TryReserve();
  static int ClaimBit(std::atomic<uint64_t>* word);

  medium::Pool* pool_;
  vm::Vm* vm_;
  space::Partitions* space_;
  uint64_t super_;
  char* base_;  // vm_->base(): fixed for the process's life (the reserved region)
  std::atomic<uint64_t> seg_cache_[format::kMaxSegments] = {};
};

}  // namespace mapfs::meta
