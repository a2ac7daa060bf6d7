// On-media format of a mapping area (the block mappers of the HashFS study).
//
// A mapping area is a 4 KiB-aligned range of pool bytes the caller gives the
// mapper at format time. Every position below is relative to the start of
// the area (never a pointer), so the area means the same wherever the pool
// is mapped:
//
//   0            MapHeader (immutable after format, checksummed), 4 KiB
//   table_off    hashfs: one 8-byte slot per block (slot index = block)
//                cuckoo: buckets of 4 entries x 16 bytes (one cache line)
//   roots_off    extent/radix: one RootRecord per inode number
//   bitmap_off   cuckoo/extent/radix: 1 bit per block, 1 = in use
//   data_off     the block area: nblocks x 4 KiB
//
// A *block* is one 4 KiB unit of the block area (the paper's "physical
// block"); it occupies one pool page. Blocks hold file data and, for the
// trees, tree nodes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mapfs::map::format {

constexpr char kMagic[8] = {'M', 'A', 'P', 'F', 'S', 'M', 'P', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kBlockSize = 4096;
constexpr int kBlockShift = 12;

enum class Kind : uint32_t { kHashFs = 1, kCuckoo = 2, kExtent = 3, kRadix = 4 };

struct MapHeader {
  char magic[8];            // kMagic
  uint32_t version;         // kVersion
  uint32_t kind;            // Kind
  uint64_t area_len;        // bytes of the mapping area
  uint64_t nblocks;         // blocks in the block area (< 2^32)
  uint64_t max_ino;         // inode numbers 1 .. max_ino - 1 are valid
  uint64_t table_off;       // hashfs slots / cuckoo buckets (0 if none)
  uint64_t table_bytes;
  uint64_t roots_off;       // per-inode roots of the trees (0 if none)
  uint64_t roots_bytes;
  uint64_t bitmap_off;      // block bitmap (0 for hashfs: the table allocates)
  uint64_t bitmap_bytes;
  uint64_t data_off;        // first block, 4 KiB aligned
  uint64_t cuckoo_buckets;  // number of 4-entry buckets (cuckoo only)
  uint32_t cuckoo_max_path; // longest displacement path tried (cuckoo only)
  uint32_t reserved32;
  uint8_t reserved[140];
  uint32_t checksum;        // crc32c of every byte before this field
};
static_assert(sizeof(MapHeader) == 256);
static_assert(offsetof(MapHeader, kind) == 12);
static_assert(offsetof(MapHeader, area_len) == 16);
static_assert(offsetof(MapHeader, nblocks) == 24);
static_assert(offsetof(MapHeader, table_off) == 40);
static_assert(offsetof(MapHeader, roots_off) == 56);
static_assert(offsetof(MapHeader, bitmap_off) == 72);
static_assert(offsetof(MapHeader, data_off) == 88);
static_assert(offsetof(MapHeader, cuckoo_buckets) == 96);
static_assert(offsetof(MapHeader, cuckoo_max_path) == 104);
static_assert(offsetof(MapHeader, checksum) == 252);

// Keys of the global tables: inode number and file block in one word,
// ino << 40 | file block. Inode 0 and inode kMaxIno are never used, so the
// all-zero word means "empty" and the all-ones word "tombstone" (hashfs).
constexpr int kKeyFileBlockBits = 40;
constexpr uint64_t kMaxFileBlock = (uint64_t{1} << kKeyFileBlockBits) - 1;  // exclusive bound
constexpr uint64_t kMaxIno = (uint64_t{1} << (64 - kKeyFileBlockBits)) - 1;  // exclusive bound
constexpr uint64_t kEmptyKey = 0;
constexpr uint64_t kTombKey = ~uint64_t{0};
constexpr uint64_t MakeKey(uint64_t ino, uint64_t fblk) { return ino << kKeyFileBlockBits | fblk; }
constexpr uint64_t KeyIno(uint64_t key) { return key >> kKeyFileBlockBits; }
constexpr uint64_t KeyFileBlock(uint64_t key) { return key & kMaxFileBlock; }
static_assert(MakeKey(kMaxIno, kMaxFileBlock) == kTombKey);

// Cuckoo entry: 16 bytes, four to a 64-byte bucket. The value word is
// written before the key word (the key is the valid indicator).
//   value = block (40 bits) | run (12 bits) << 40 | back (12 bits) << 52
// run:  this block and the run-1 file blocks after it are mapped to the
//       run-1 blocks after this one (a lower bound: entries are not widened
//       when a later insert extends the run).
// back: at most this many file blocks before this one belong to its run
//       (an upper bound, used to bound the walk that narrows earlier entries
//       when blocks are removed).
struct CuckooEntry {
  uint64_t key;
  uint64_t value;
};
static_assert(sizeof(CuckooEntry) == 16);
constexpr int kCuckooSlots = 4;
constexpr uint64_t kCuckooBucketBytes = kCuckooSlots * sizeof(CuckooEntry);
static_assert(kCuckooBucketBytes == 64);
constexpr uint64_t kMaxRun = 4095;
constexpr uint64_t CuckooValue(uint64_t blk, uint64_t run, uint64_t back) {
  return blk | run << 40 | back << 52;
}
constexpr uint64_t ValueBlock(uint64_t v) { return v & ((uint64_t{1} << 40) - 1); }
constexpr uint64_t ValueRun(uint64_t v) { return (v >> 40) & kMaxRun; }
constexpr uint64_t ValueBack(uint64_t v) { return (v >> 52) & kMaxRun; }

// Root of a per-file tree, indexed by inode number.
//   root:   block of the root node + 1 (0 = the file maps nothing)
//   height: levels of the tree (extent: 1 = the root is a leaf;
//           radix: the tree covers 512^height file blocks)
struct RootRecord {
  uint64_t root;
  uint64_t height;
};
static_assert(sizeof(RootRecord) == 16);

// Extent-tree node, one block. Leaves hold extents sorted by file block;
// internal nodes hold (first file block, child block) sorted by file block,
// child i covering [key[i], key[i+1]) (child 0 from the node's own lower bound).
constexpr uint32_t kExtentMagic = 0x54584545;  // "EEXT"
struct ExtentNodeHeader {
  uint32_t magic;
  uint16_t level;   // 0 = leaf
  uint16_t count;   // entries in use
  uint64_t reserved[7];
};
static_assert(sizeof(ExtentNodeHeader) == 64);
struct Extent {
  uint64_t fblk;    // first file block
  uint64_t blk;     // first block
  uint64_t len;     // blocks, >= 1
};
static_assert(sizeof(Extent) == 24);
struct ExtentIndex {
  uint64_t fblk;    // lowest file block the child may hold
  uint64_t child;   // block of the child node
};
static_assert(sizeof(ExtentIndex) == 16);
constexpr uint32_t kExtentLeafCap = (kBlockSize - sizeof(ExtentNodeHeader)) / sizeof(Extent);
constexpr uint32_t kExtentIndexCap = (kBlockSize - sizeof(ExtentNodeHeader)) / sizeof(ExtentIndex);
static_assert(kExtentLeafCap == 168);
static_assert(kExtentIndexCap == 252);

// Radix-tree node: 512 words, each a block + 1 (0 = nothing below).
constexpr int kRadixBits = 9;
constexpr uint64_t kRadixFanout = 512;
static_assert(kRadixFanout * 8 == kBlockSize);
constexpr int kRadixMaxHeight = 5;  // 9 * 5 = 45 bits >= kKeyFileBlockBits

}  // namespace mapfs::map::format
