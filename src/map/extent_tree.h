// Per-file extent tree (paper §3.1.1): a B-tree whose leaves hold extents
// (first file block, first block, length) sorted by file block and whose
// internal nodes hold (lowest file block, child); every node is one block
// and every level is searched by binary search. The root and height of
// inode i are RootRecord i of the area.
//
// Invariants (checked by Check):
//  * in an internal node, keys rise strictly and everything in child i lies
//    in [key i, key i+1); a lookup takes the last child whose key is <= the
//    file block, else child 0 (whose key an insert lowers when needed);
//  * leaf extents are sorted, disjoint, of length >= 1 and inside their
//    leaf's key range; no node is empty.
// Insert adds one extent per allocated run, merged into the extent before
// it when the file and the blocks both continue; full nodes split in half
// up to a new root. Remove trims, splits and deletes extents, frees empty
// nodes, merges a touched child into its neighbour when both fit in 3/4 of
// a node, and lowers the root while it has a single child.
//
// Consistency: a step (one allocated run inserted, or one leaf's worth of
// a removal) works on DRAM copies of the nodes it touches; then the bytes
// that changed in existing nodes, the root record and the bitmap words
// commit as one redo transaction, while fresh nodes (split halves, new
// roots), which nothing links yet, are written and fenced before it.
//
// Cursor: the last leaf reached and the file blocks it covers; every
// mutation bumps the generation, since splits and merges move extents.
// Mutations serialise on a mutex (the bitmap is shared); lookups take no
// lock (the caller's inode lock keeps the file's own tree still).
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "map/block_bitmap.h"
#include "map/mapper.h"

namespace mapfs::map {

class ExtentMapper final : public Mapper {
 public:
  static constexpr uint64_t kMaxHeight = 8;

  ExtentMapper(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h);

  int Lookup(Cursor* c, Ino ino, FileBlock fblk, Mapping* out) override;
  Status Insert(Cursor* c, Ino ino, FileBlock fblk, uint64_t count) override;
  Status Remove(Cursor* c, Ino ino, FileBlock from, uint64_t count) override;
  Status Check() override;
  Usage usage() const override;

  void Load();
  uint64_t height(Ino ino) const;

 private:
  struct Img;  // a DRAM copy of one node
  struct Split {
    uint64_t key;  // lowest file block of the new right node
    uint64_t blk;
  };

  format::RootRecord* root(Ino ino) const { return reinterpret_cast<format::RootRecord*>(base_ + roots_off_) + ino; }
  const char* node(uint64_t blk) const { return block_ptr(Block(blk)); }
  // A node of the step (loaded and validated on first use); EUCLEAN if bad.
  Result<Img*> Get(uint64_t blk, int level);
  Result<Img*> NewNode(int level, uint64_t hint);
  void Drop(Img* img);  // frees its block at commit
  Status Commit(Ino ino, uint64_t root, uint64_t height);
  void Abort();

  template <typename T>
  Result<std::optional<Split>> WriteBack(Img* n, const std::vector<T>& v);
  Result<std::optional<Split>> InsertRec(Img* n, const format::Extent& e);
  Result<std::optional<Split>> RemoveRec(Img* n, uint64_t lo, uint64_t hi, uint64_t from, uint64_t end);
  Status MergeChildren(Img* n, uint64_t from, uint64_t end);
  Status InsertExtent(Ino ino, const format::Extent& e);
  Status RemoveStep(Ino ino, uint64_t from, uint64_t end, uint64_t* next);
  Status RemoveLocked(Ino ino, uint64_t from, uint64_t end);
  // Upper bound of the key range of the leaf that holds `f` (~0 = none).
  uint64_t LeafBound(Ino ino, uint64_t f) const;
  // The extent (or hole) at `f` inside a leaf whose range ends at `hi`.
  int FromLeaf(const char* leaf, uint64_t f, uint64_t hi, Mapping* out) const;
  // True if a node's header is sane for `level`.
  bool NodeOk(const char* n, int level) const;

  uint64_t roots_off_;
  uint64_t bitmap_off_;
  uint64_t fixed_bytes_;
  BlockBitmap bm_;
  std::mutex mu_;
  uint64_t node_blocks_ = 0;
  int64_t node_delta_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<Img>> imgs_;  // nodes of the step in progress
};

}  // namespace mapfs::map
