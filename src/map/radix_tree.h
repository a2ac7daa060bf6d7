// Per-file radix tree (paper §3.1.2): every node is one block of 512
// 8-byte words; a level resolves 9 bits of the file block, the last level
// holds block + 1 (0 = hole). The tree grows by a level when a file block
// beyond 512^height is inserted (the old root becomes child 0 of a new
// root) and shrinks by levels when removal leaves only child 0. The root
// and height of inode i are RootRecord i of the area.
//
// Consistency: a step (at most one leaf's worth of inserted blocks, or a
// bounded number of cleared entries) is one redo transaction: pointer words,
// the root record and the bitmap words together; fresh nodes are zeroed and
// persisted before the transaction that links them. Removal clears entries,
// then frees nodes left empty (each with its parent's pointer in the same
// transaction), then lowers the height: a crash between the steps leaves
// empty nodes that are still linked, never a link to a freed node.
//
// Cursor: the last leaf reached and the file blocks it covers, so
// sequential lookups read one word. Removal bumps the generation (nodes
// may be freed); inserts never move a leaf. Mutations serialise on a
// mutex (the bitmap is shared); lookups take no lock (the caller's inode
// lock keeps the file's own tree still).
#pragma once

#include <mutex>

#include "map/block_bitmap.h"
#include "map/mapper.h"
#include "map/pending.h"

namespace mapfs::map {

class RadixMapper final : public Mapper {
 public:
  RadixMapper(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h);

  int Lookup(Cursor* c, Ino ino, FileBlock fblk, Mapping* out) override;
  Status Insert(Cursor* c, Ino ino, FileBlock fblk, uint64_t count) override;
  Status Remove(Cursor* c, Ino ino, FileBlock from, uint64_t count) override;
  Status Check() override;
  Usage usage() const override;

  // Loads the bitmap and counts node blocks (at open).
  void Load();
  // Height of the tree of `ino` (tests of growth and shrinking).
  uint64_t height(Ino ino) const;

 private:
  format::RootRecord* root(Ino ino) const { return reinterpret_cast<format::RootRecord*>(base_ + roots_off_) + ino; }
  uint64_t* node(uint64_t blk) const { return reinterpret_cast<uint64_t*>(block_ptr(Block(blk))); }
  bool BlockOk(uint64_t ptr) const { return ptr != 0 && ptr - 1 < nblocks_; }
  // A zeroed node block, persisted (not yet linked).
  Result<uint64_t> NewNode(uint64_t hint);
  Status Commit();
  Status InsertStep(Ino ino, uint64_t fblk, uint64_t count, uint64_t* done);
  Status RemoveLocked(Ino ino, uint64_t from, uint64_t end);
  Status ClearEntries(Ino ino, uint64_t from, uint64_t end);
  Status Prune(Ino ino, uint64_t from, uint64_t end);
  // Post-order pass of Prune: frees empty nodes below `w` (a pointer word).
  Status PruneNode(uint64_t* w, int level, uint64_t base, uint64_t from, uint64_t end);
  Status Shrink(Ino ino);
  bool NodeEmpty(uint64_t blk) const;

  uint64_t roots_off_;
  uint64_t bitmap_off_;
  uint64_t fixed_bytes_;
  BlockBitmap bm_;
  PendingWords pend_;
  std::mutex mu_;
  uint64_t node_blocks_ = 0;
  int64_t node_delta_ = 0;
  format::RootRecord* prune_root_ = nullptr;  // the record whose tree Prune walks  // node blocks allocated (-freed) in the step in progress
};

}  // namespace mapfs::map
