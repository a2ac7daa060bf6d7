// BlockBitmap: the block allocator of the cuckoo table and the trees (the
// paper's designs other than HashFS use a separate allocator; Strata's is a
// red-black tree, ours a bitmap: 1 bit per block, 1 = in use).
//
// The bitmap lives in the area and is the truth: other processes sharing
// the pool allocate from it too. A DRAM shadow holds only the words the
// step in progress changed (read from the area when first touched). A step
// allocates and frees in the shadow, AddTo() puts every changed word into
// the caller's redo transaction, so the bitmap changes in the same atomic
// step as the mapping that uses the blocks (a crash never leaves a block
// mapped but free, or allocated but unmapped); then Committed() once the
// transaction is durable, or Undo() if it was not committed. The caller
// serialises steps: the mapper's mutex within a process, the pool's kMap
// lock across processes (held from the first Alloc/Free to Committed/Undo).
// A shadow of the whole bitmap loaded once at mount handed the same blocks
// to two processes writing at the same time (preload.coreutils on cuckoo).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mapfs::medium {
class Tx;
}

namespace mapfs::map {

class BlockBitmap {
 public:
  // `words` points at the bitmap in the pool view, `pool_off` is its pool
  // offset (for the redo records).
  BlockBitmap(uint64_t* words, uint64_t pool_off, uint64_t nblocks);

  // Counts the used blocks (at open). Bits past nblocks are ignored.
  void Load();

  // Up to `want` contiguous free blocks, starting at `hint` if that block is
  // free, else at the next free block found from a rotating position:
  // (first block, count >= 1). ENOSPC if no block is free.
  Result<std::pair<uint64_t, uint64_t>> Alloc(uint64_t want, uint64_t hint);
  // One free block, the highest there is (tree nodes: kept apart from the
  // data runs that Alloc hands out from the bottom). ENOSPC if none.
  Result<std::pair<uint64_t, uint64_t>> AllocHigh();
  void Free(uint64_t blk, uint64_t n);
  // Puts the words changed in this step into `tx`.
  void AddTo(medium::Tx* tx) const;
  // Ends the step: its transaction committed.
  void Committed();
  // Ends the step: its transaction was not committed; restores the shadow.
  void Undo();

  bool Used(uint64_t blk) const { return (Word(blk / 64) >> (blk % 64)) & 1; }
  // The persistent bit (Check compares it with what the structure references).
  bool UsedOnMedia(uint64_t blk) const;
  // Used blocks, counted in the area (other processes' steps included).
  uint64_t used() const;
  uint64_t nblocks() const { return nblocks_; }

 private:
  void Touch(uint64_t word);
  // Word w as this step sees it: the shadow if the step changed it, else
  // the area's (bits past nblocks cleared).
  uint64_t Word(uint64_t w) const;
  // The bits of word w that name blocks (all but the last word's tail).
  uint64_t ValidBits(uint64_t w) const;

  uint64_t* words_;
  uint64_t pool_off_;
  uint64_t nblocks_;
  uint64_t nwords_;
  std::vector<uint64_t> shadow_;  // valid where mark_ is set
  std::vector<uint8_t> mark_;  // word already in touched_
  std::vector<std::pair<uint64_t, uint64_t>> touched_;  // (word, value before this step)
  uint64_t used_ = 0;  // this process's count (Load, then its own steps); used() recounts
  uint64_t used_before_ = 0;
  uint64_t rover_ = 0;  // where the next search without a usable hint starts
  uint64_t high_ = 0;   // word where the next AllocHigh search starts (downwards)
};

}  // namespace mapfs::map
