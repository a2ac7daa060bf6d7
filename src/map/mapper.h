// Mapper: the one interface of the block mappers (HashFS paper, §3).
//
// A mapper maps (inode number, file block) to a block of its block area and
// hands out those blocks: Insert allocates, Remove frees. The designs:
//   hashfs  one global linear-probing table; the slot index is the block
//   cuckoo  one global cuckoo table with run entries, a bitmap allocator
//   extent  a per-file B-tree of extents, a bitmap allocator
//   radix   a per-file 512-ary radix tree, a bitmap allocator
// The file layer above keeps one Cursor per open file (the DRAM translation
// cache or tree cursor of the paper) and passes it to every call; it never
// learns how a file's blocks are found.
//
// Concurrency contract: calls for one inode are serialised by the caller
// (the file layer's inode lock). Calls for different inodes may run in
// parallel from threads of one process; each design says how it keeps them
// apart. (Several processes on one mapping area need the pool's robust
// locks: not built yet, see docs/MAPPING.md.)
//
// Crash contract: every single-structure update is atomic across a crash
// (an 8-byte compare-and-swap, or one redo-log transaction for updates that
// span words, blocks or the bitmap). An Insert or Remove of many blocks is a
// sequence of such steps: a crash may leave some of its blocks done (the
// file layer publishes a size only after), never a block that is mapped and
// also free, a block mapped twice, or a mapping it did not touch changed.
//
// Damage contract: no byte pattern in the area makes a call crash. Lookups
// that meet impossible values return -EUCLEAN; Check() names the structure
// and the area offset of the first damage it finds.
#pragma once

#include <atomic>
#include <compare>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "map/map_format.h"

namespace mapfs::medium {
class Pool;
}

namespace mapfs::map {

using format::Kind;

// Typed indices: a file block is never passed where a block is expected.
template <typename Tag>
struct BlockIndex {
  uint64_t v = 0;
  constexpr BlockIndex() = default;
  constexpr explicit BlockIndex(uint64_t x) : v(x) {}
  constexpr BlockIndex operator+(uint64_t d) const { return BlockIndex(v + d); }
  constexpr uint64_t operator-(BlockIndex o) const { return v - o.v; }
  constexpr auto operator<=>(const BlockIndex&) const = default;
};
using FileBlock = BlockIndex<struct FileBlockTag>;  // index of a 4 KiB block of a file
using Block = BlockIndex<struct BlockTag>;          // index of a block of the block area
using Ino = uint64_t;

constexpr uint64_t kToEnd = ~uint64_t{0};  // Remove count: every block from `from` on

// What Lookup found at a file block.
struct Mapping {
  bool mapped = false;
  Block blk;         // first block of the run (mapped only)
  uint64_t len = 0;  // mapped: file blocks from the asked one that map to
                     // blk, blk+1, ... (>= 1); hole: blocks known unmapped (>= 1)
};

// Per-open-file DRAM state the caller owns (the paper's translation cache
// for the hash tables, the cursor for the trees). Zero-initialised is valid.
struct Cursor {
  static constexpr int kCacheEntries = 8;
  struct Translation {
    uint64_t fblk;
    uint64_t blk;
    uint64_t len;  // 0 = unused
  };
  Ino ino = 0;
  uint64_t gen = 0;  // mapper generation when filled; stale if it differs
  Translation cache[kCacheEntries] = {};
  uint64_t last = ~uint64_t{0};  // file block of the last lookup (sequential access detection)
  // Trees: the last leaf reached and the file blocks it may hold.
  uint64_t leaf = 0;  // block + 1, 0 = none
  uint64_t leaf_lo = 0;
  uint64_t leaf_hi = 0;
  void Reset(Ino i, uint64_t g) {
    *this = Cursor{};
    ino = i;
    gen = g;
  }
};

struct FormatOptions {
  Kind kind = Kind::kHashFs;
  uint64_t max_ino = 1 << 16;   // trees: one RootRecord per inode number
  uint64_t cuckoo_buckets = 0;  // 0 = enough for every block at 80 % load
  uint32_t cuckoo_max_path = 0; // 0 = default (see cuckoo.h)
};

struct Usage {
  uint64_t blocks = 0;          // blocks in the block area
  uint64_t used_blocks = 0;     // blocks holding file data
  uint64_t node_blocks = 0;     // blocks holding tree nodes
  uint64_t fixed_bytes = 0;     // mapping bytes reserved at format (table, roots, bitmap, header)
  uint64_t mapping_bytes() const { return fixed_bytes + node_blocks * format::kBlockSize; }
};

class Mapper {
 public:
  // Formats [area_off, area_off + area_len) of the pool (4 KiB aligned) as
  // an empty mapping area of the chosen design. The bytes need not be zero.
  static Status Format(medium::Pool* pool, uint64_t area_off, uint64_t area_len, const FormatOptions& opt);
  // Opens a formatted area; EUCLEAN if its header is damaged.
  static Result<std::unique_ptr<Mapper>> Open(medium::Pool* pool, uint64_t area_off, uint64_t area_len);

  virtual ~Mapper() = default;
  Mapper(const Mapper&) = delete;
  Mapper& operator=(const Mapper&) = delete;

  // The mapping at `fblk` of `ino`. 0 or a negative errno (EINVAL for an
  // inode or file block out of range, EUCLEAN for damage).
  virtual int Lookup(Cursor* c, Ino ino, FileBlock fblk, Mapping* out) = 0;
  // out[i] = block of fblk + i, or kNoBlock for a hole, for i < n.
  static constexpr uint64_t kNoBlock = ~uint64_t{0};
  virtual int LookupRange(Cursor* c, Ino ino, FileBlock fblk, uint64_t n, uint64_t* out);
  // Maps [fblk, fblk + count), which must be unmapped (EEXIST otherwise),
  // to newly allocated blocks, contiguous where the design and free space
  // allow. ENOSPC if the blocks or the structure run out: then nothing of
  // this call stays mapped.
  virtual Status Insert(Cursor* c, Ino ino, FileBlock fblk, uint64_t count) = 0;
  // Unmaps [from, from + count) (count may be kToEnd) and frees the blocks.
  // Unmapped blocks in the range are fine (punching a hole twice).
  virtual Status Remove(Cursor* c, Ino ino, FileBlock from, uint64_t count) = 0;
  // fsck: OK, or EUCLEAN naming the structure and area offset of the first
  // damage found (entries unreachable or duplicated, blocks out of range,
  // mapped twice, mapped but free, in use but unreferenced, bad nodes).
  virtual Status Check() = 0;
  // fsck's cross-check with the inodes: calls fn(ino, first file block,
  // first block, n) for every mapped run (n >= 1; runs may be cut anywhere),
  // in no particular order. EUCLEAN if the structure cannot be walked. The
  // default walks inode numbers 1 .. max_ino() with Lookup (the per-file
  // trees, whose holes are skipped a subtree at a time); the global tables
  // scan their entries. Callers serialise it against changes.
  using MappingFn = std::function<void(Ino, FileBlock, Block, uint64_t)>;
  virtual Status ForEachMapping(const MappingFn& fn);
  // The mapped runs of one inode in [from, from + count) (count may be
  // kToEnd), in no particular order, runs cut anywhere: fn(first file block,
  // first block, n); a non-OK status from fn ends the walk and is returned.
  // EUCLEAN for damage (a run outside the block area included). Its cost is
  // bounded by the smaller of the range and the area, however large the
  // range: the trees skip holes a subtree at a time (the default, a walk of
  // Lookup), the global tables - whose Lookup learns a hole a block or a
  // batch at a time - sweep the table once the range is large against it.
  // So a walk over a file's whole size (st_blocks, unlink, truncation, fsync
  // of a mapped file, recovery's trim) costs no more for a sparse terabyte,
  // or a damaged size, than for the area's worth of blocks. The caller
  // serialises it against changes of this inode (cuckoo: and the kMap lock).
  using RunFn = std::function<Status(FileBlock, Block, uint64_t)>;
  virtual Status ForEachMappingIn(Cursor* c, Ino ino, FileBlock from, uint64_t count, const RunFn& fn);
  virtual Usage usage() const = 0;

  Kind kind() const { return kind_; }
  uint64_t nblocks() const { return nblocks_; }
  uint64_t max_ino() const { return max_ino_; }
  // Pool offset of a block, and its bytes.
  uint64_t block_offset(Block b) const { return area_off_ + data_off_ + (b.v << format::kBlockShift); }
  char* block_ptr(Block b) const { return base_ + data_off_ + (b.v << format::kBlockShift); }
  // Bumped by every change that may make a cursor's contents wrong.
  uint64_t generation() const { return gen_.load(std::memory_order_acquire); }

 protected:
  Mapper(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h);
  // EINVAL unless `ino` and the file blocks [fblk, fblk + n) are in range.
  int CheckArgs(Ino ino, FileBlock fblk, uint64_t n) const;
  // Makes `c` describe `ino` at the current generation (emptied if not).
  void Refresh(Cursor* c, Ino ino) const {
    uint64_t g = generation();
    if (c->ino != ino || c->gen != g) c->Reset(ino, g);
  }
  void BumpGeneration() { gen_.fetch_add(1, std::memory_order_acq_rel); }
  Status Damage(const char* structure, uint64_t area_off, const std::string& what) const;

  medium::Pool* pool_;
  char* base_;          // first byte of the area in the pool view
  uint64_t area_off_;   // pool offset of the area
  Kind kind_;
  uint64_t nblocks_;
  uint64_t max_ino_;
  uint64_t data_off_;

 private:
  std::atomic<uint64_t> gen_{1};
};

const char* ToString(Kind k);
// "hashfs", "cuckoo", "extent", "radix"; EINVAL otherwise.
Result<Kind> ParseKind(const std::string& s);

}  // namespace mapfs::map
