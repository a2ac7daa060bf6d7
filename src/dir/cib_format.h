// On-media format of a CIB directory (dir layer). Documented in
// docs/FORMAT.md ("Directories").
//
// A directory is a set of L0 partitions (4 KiB each), all addressed by
// virtual offset:
//
//   root    fixed for the directory's life (the inode stores its offset):
//           header (magic, version, checksum, hash seed, counters) and the
//           top of the block index;
//   blocks  the entries of one hash range [min, max]: a validity bitmap,
//           a fingerprint byte per slot and 62 fixed-size 64-byte slots.
//           Primary blocks cover the whole 64-bit hash space between them,
//           without gaps or overlap, and are linked in range order (next);
//   overflow blocks  hang off a primary block whose range is a single hash
//           value and that is full (only many names with one 64-bit hash);
//   nodes   index nodes, only in large directories: sorted arrays of
//           (min hash, child) that, with the root's top array, form the
//           "array of block addresses in range order" of the CIB paper,
//           cut into 4 KiB pieces so that one split rewrites at most one
//           piece per level (a redo transaction stays small).
//
// An entry is a head slot (hash, inode, type, name length, the first 42
// bytes of the name) plus, for names longer than 42 bytes, up to four
// continuation slots of the same block holding the rest of the name. A slot
// holds a live entry exactly when its bit in the block's bitmap is set;
// continuation slots have no bit of their own (they belong to their head),
// so deleting an entry clears one bit.
//
// Every field is a fixed-width little-endian integer; offsets are virtual
// offsets, never pointers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mapfs::dir::format {

constexpr uint64_t kPartSize = 4096;  // every directory partition is an L0
constexpr uint32_t kVersion = 1;

// ---------------------------------------------------------------- root

constexpr uint64_t kRootMagic = 0x315244534650414dull;  // "MAPFSDR1" in memory order

// One element of an index array: the child covers hashes from `min` up to
// the next element's min - 1 (the last one up to its parent's bound).
struct Elem {
  uint64_t min;
  uint64_t child;  // virtual offset of a block (level-1 arrays) or a node
};
static_assert(sizeof(Elem) == 16);

constexpr int kTopCap = 248;
constexpr int kMaxDepth = 16;

struct Root {
  uint64_t magic;       // kRootMagic
  uint32_t version;     // kVersion
  uint32_t crc;         // crc32c of bytes 0..63 with this field read as 0
  uint64_t self;        // virtual offset of this root (detects a misplaced one)
  uint64_t seed;        // hash seed, fixed at creation
  uint32_t depth;       // node levels below the root (0: top points at blocks)
  uint32_t top_count;   // elements in top[] (1 .. kTopCap)
  uint64_t nblocks;     // primary + overflow blocks
  uint64_t nnodes;      // index nodes
  uint64_t reserved0;
  // --- bytes 0..63 are covered by crc; changed only by the layer's own
  // structural transactions (split, overflow).
  uint64_t count;       // live entries; changed by the caller's transaction
  uint64_t reserved1[7];
  Elem top[kTopCap];
};
static_assert(sizeof(Root) == kPartSize);
static_assert(offsetof(Root, crc) == 12);
static_assert(offsetof(Root, depth) == 32);
static_assert(offsetof(Root, nblocks) == 40);
static_assert(offsetof(Root, count) == 64);
static_assert(offsetof(Root, top) == 128);
constexpr size_t kRootCrcBytes = 64;

// ---------------------------------------------------------------- nodes

constexpr uint32_t kNodeTag = 0x4e424943;  // "CIBN"
constexpr int kNodeCap = 254;

struct Node {
  uint32_t tag;      // kNodeTag
  uint16_t version;  // kVersion
  uint16_t level;    // 1: children are blocks; L > 1: children are level L-1 nodes
  uint32_t count;    // elements in use (1 .. kNodeCap)
  uint32_t reserved0;
  uint64_t owner;    // virtual offset of the directory root
  uint64_t reserved1;
  Elem e[kNodeCap];
};
static_assert(sizeof(Node) == kPartSize);
static_assert(offsetof(Node, count) == 8);
static_assert(offsetof(Node, e) == 32);

// ---------------------------------------------------------------- blocks

constexpr uint32_t kBlockTag = 0x42424943;  // "CIBB"
constexpr uint16_t kPrimary = 1, kOverflow = 2;
constexpr int kSlots = 64;          // 64-byte slots per block
constexpr int kFirstSlot = 2;       // slots 0 and 1 hold the header
constexpr int kUsableSlots = kSlots - kFirstSlot;
constexpr uint64_t kSlotMask = ~uint64_t{3};  // bitmap bits that may be set

struct BlockHeader {
  uint32_t tag;       // kBlockTag
  uint16_t version;   // kVersion
  uint16_t kind;      // kPrimary or kOverflow
  uint64_t min;       // range [min, max]; min never changes
  uint64_t max;       // lowered by a split
  uint64_t next;      // primary: next primary block in range order, 0 = last
  uint64_t overflow;  // first overflow block (primary) / next one (overflow)
  uint64_t bitmap;    // bit i: slot i is the head of a live entry
  uint64_t longmap;   // bit i: slot i was written as the head of a long name
                      // (meaningful only where bitmap has bit i)
  uint64_t owner;     // virtual offset of the directory root
  uint8_t fp[kSlots]; // fp[i]: low byte of the hash of slot i's entry
};
static_assert(sizeof(BlockHeader) == kFirstSlot * 64);
static_assert(offsetof(BlockHeader, min) == 8);
static_assert(offsetof(BlockHeader, max) == 16);
static_assert(offsetof(BlockHeader, next) == 24);
static_assert(offsetof(BlockHeader, overflow) == 32);
static_assert(offsetof(BlockHeader, bitmap) == 40);
static_assert(offsetof(BlockHeader, longmap) == 48);
static_assert(offsetof(BlockHeader, fp) == 64);

// A head slot. Word 2 packs type, name length, the continuation slots and
// the first two name bytes, so a Replace rewrites two words (ino, word 2).
constexpr size_t kInlineName = 42;
constexpr size_t kContName = 64;
constexpr int kMaxCont = 4;

struct Slot {
  uint64_t hash;
  uint64_t ino;
  uint8_t type;             // DT_* (<dirent.h>)
  uint8_t name_len;         // 1 .. 255
  uint8_t cont[kMaxCont];   // continuation slots in name order; 0 = unused
  char name[kInlineName];   // first bytes of the name
};
static_assert(sizeof(Slot) == 64);
static_assert(offsetof(Slot, ino) == 8);
static_assert(offsetof(Slot, type) == 16);
static_assert(offsetof(Slot, cont) == 18);
static_assert(offsetof(Slot, name) == 22);

// Continuation slots a name of `len` bytes needs.
constexpr int ContSlots(size_t len) {
  return len <= kInlineName ? 0 : static_cast<int>((len - kInlineName + kContName - 1) / kContName);
}
static_assert(ContSlots(255) == kMaxCont);
static_assert(ContSlots(kInlineName) == 0 && ContSlots(kInlineName + 1) == 1);

constexpr uint64_t SlotOff(int i) { return uint64_t(i) * 64; }

}  // namespace mapfs::dir::format
