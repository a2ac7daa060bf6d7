// The on-file format of a file virtualized by the `virtual` engine (MadFS's
// layout, docs/OVERLAY.md "virtual engine: on-file format"). Everything here
// lives in the file itself and is reached through one MAP_SHARED mapping;
// namespace `pmem` holds only structures and encodings of the file, never
// volatile state.
//
// Blocks are 4 KiB. Block numbers in the table, the log and the bitmap are
// *physical* block numbers: absolute block indices of the file (block 0 is
// the meta block). *Virtual* block numbers index the content the
// application sees.
//
//   block 0                  meta block: MetaHeader (written once, checksummed)
//                            + the shared words (checkpoint, GC lock, growth)
//   [log_start, +log_blocks) the log: log_slots 8-byte entries, a ring
//   [bitmap_start, ...)      1 bit per physical block, 1 = in use
//   [table_start, ...)       the block table: 8 bytes per virtual block
//   [data_start, phys_end)   data and record blocks, fallocated in chunks
#pragma once

#include <cstddef>
#include <cstdint>

namespace mapfs::overlay::vrt::pmem {

inline constexpr uint64_t kMagic = 0x545256534650414DULL;  // "MAPFSVRT"
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kBlockShift = 12;
inline constexpr uint64_t kBlockSize = uint64_t{1} << kBlockShift;
// Field widths of log and table entries bound both block spaces.
inline constexpr uint32_t kBlockBits = 24;
inline constexpr uint64_t kMaxBlocks = uint64_t{1} << kBlockBits;  // 64 GiB
inline constexpr uint32_t kLapBits = 6;
inline constexpr uint32_t kMaxRunBlocks = 256;  // one inline entry

// Written once by Format, never changed: a torn or damaged header is caught
// by `crc` (crc32c of the bytes before it).
struct MetaHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t block_shift;
  uint32_t log_slots;  // a power of two >= 64
  uint32_t log_start;
  uint32_t bitmap_start;
  uint32_t bitmap_blocks;
  uint32_t table_start;
  uint32_t table_blocks;
  uint32_t vblocks_max;  // table entries: the content is at most this many blocks
  uint32_t data_start;   // first data block; blocks below are metadata
  uint32_t pblocks_max;  // bitmap bits: the file is at most this many blocks
  uint32_t reserved[2];
  uint32_t crc;
};
static_assert(sizeof(MetaHeader) == 64);
static_assert(offsetof(MetaHeader, log_slots) == 16);
static_assert(offsetof(MetaHeader, data_start) == 44);
static_assert(offsetof(MetaHeader, crc) == 60);

// The words processes share, each on its own cache line (offset 64 on).
// All are 8-byte atomic stores, so none can tear; the pair
// (ckpt_seq, ckpt_size) need not be stored atomically because replaying
// the log from an older checkpoint over a newer one is idempotent (table
// entries are tagged with their sequence number, sizes are max/set ops).
struct MetaShared {
  uint64_t ckpt_seq;    // log entries < ckpt_seq are applied to the table
  uint64_t ckpt_size;   // content size after entries < ckpt_seq
  uint64_t pad0[6];
  uint64_t gc_lock;     // pid of the process checkpointing, 0 if none
  uint64_t pad1[7];
  uint64_t phys_end;    // blocks fallocated: allocation stays below
  uint64_t pad2[7];
  uint64_t alloc_hint;  // advisory: where the next bitmap search starts
  uint64_t pad3[7];
};
static_assert(sizeof(MetaShared) == 256);
static_assert(offsetof(MetaShared, gc_lock) == 64);
static_assert(offsetof(MetaShared, phys_end) == 128);
inline constexpr size_t kSharedOffset = 64;

// Processes holding writable shared maps of the file's own blocks, and
// writers storing into such blocks in place (docs/OVERLAY.md, "Maps
// shared between processes"). Offset 320 of the meta block, bytes every
// format before it left zero (Format writes only the header and
// MetaShared; the rest of block 0 is the hole ftruncate made), so older
// files read as "none". Each word is a pid or 0, claimed and cleared by
// compare-and-swap; a pid that is no longer alive is cleared by whoever
// finds it. While any `mappers` word is set, no commit may change the
// mapping of a block that is mapped (writes to such blocks go in place),
// so the kernel maps of those blocks stay the content.
struct MetaMappers {
  uint64_t mappers[16];  // a process with at least one direct map of the file
  uint64_t inplace[16];  // a writer between its check of `mappers` and the end of its in-place stores
};
static_assert(sizeof(MetaMappers) == 256);
inline constexpr size_t kMappersOffset = kSharedOffset + sizeof(MetaShared);
static_assert(kMappersOffset == 320 && kMappersOffset + sizeof(MetaMappers) <= kBlockSize);
// Bumped by every process that registers as a mapper, before its slot is
// ready (so before any write in place under it): a copy-on-write commit
// whose old bytes were copied under another value retries its copy, as
// in-place writes may have changed those bytes without changing their
// block's mapping while that mapper came and went. Offset 576 of the meta
// block, zero in files formatted before it.
inline constexpr size_t kDirectEpochOffset = kMappersOffset + sizeof(MetaMappers);
static_assert(kDirectEpochOffset == 576);

// Log entry (8 bytes, committed by one compare-and-swap of its slot):
//   63..58 lap   (seq / log_slots) mod 64: tells the entry of sequence
//                number seq from an older one in the same slot
//   57..56 type  0 empty (the whole word is 0), 1 inline run, 2 indirect
//   inline:   55..48 nblocks-1, 47..24 virtual block, 23..0 physical block:
//             virtual [v, v+n) now maps to physical [p, p+n); the size
//             becomes max(size, (v+n) * 4096)
//   indirect: 23..0 a record block (RecordHeader + Runs), 55..24 zero
enum EntryType : uint32_t { kEmpty = 0, kInline = 1, kIndirect = 2 };

inline constexpr uint32_t LapOf(uint64_t seq, uint32_t log_slots) {
  return static_cast<uint32_t>((seq / log_slots) & ((1u << kLapBits) - 1));
}
inline constexpr uint64_t MakeInline(uint32_t lap, uint32_t vblock, uint32_t phys, uint32_t nblocks) {
  return (uint64_t{lap} << 58) | (uint64_t{kInline} << 56) | (uint64_t{nblocks - 1} << 48) |
         (uint64_t{vblock} << 24) | phys;
}
inline constexpr uint64_t MakeIndirect(uint32_t lap, uint32_t record) {
  return (uint64_t{lap} << 58) | (uint64_t{kIndirect} << 56) | record;
}
inline constexpr uint32_t EntryLap(uint64_t e) { return static_cast<uint32_t>(e >> 58); }
inline constexpr uint32_t EntryType(uint64_t e) { return static_cast<uint32_t>((e >> 56) & 3); }
inline constexpr uint32_t EntryBlocks(uint64_t e) { return static_cast<uint32_t>((e >> 48) & 0xff) + 1; }
inline constexpr uint32_t EntryVblock(uint64_t e) { return static_cast<uint32_t>((e >> 24) & 0xffffff); }
inline constexpr uint32_t EntryPhys(uint64_t e) { return static_cast<uint32_t>(e & 0xffffff); }

// Record block of an indirect entry: written and made durable before the
// entry is committed, freed when the entry is checkpointed. `crc` covers
// the header (crc = 0) and the runs, so damage is caught.
enum SizeOp : uint32_t { kSizeExtend = 1, kSizeSet = 2 };
struct RecordHeader {
  uint32_t magic;  // kRecordMagic
  uint32_t nruns;
  uint64_t size;     // kSizeExtend: size = max(size, this); kSizeSet: size = this
  uint32_t size_op;
  uint32_t crc;
  uint64_t reserved;
};
// virtual [vblock, vblock+nblocks) -> physical [phys, phys+nblocks);
// phys 0 unmaps (the range reads as zeros: truncate).
struct Run {
  uint32_t vblock;
  uint32_t phys;
  uint32_t nblocks;
  uint32_t reserved;
};
static_assert(sizeof(RecordHeader) == 32);
static_assert(sizeof(Run) == 16);
inline constexpr uint32_t kRecordMagic = 0x43455256;  // "VREC"
inline constexpr uint32_t kMaxRuns = (kBlockSize - sizeof(RecordHeader)) / sizeof(Run);

// Table entry (8 bytes): (seq + 1) << 24 | physical block, 0 if never
// mapped. The tag orders entries: of two views of one virtual block (the
// checkpointed table and a process's replay of the log) the higher tag is
// the newer. Physical block 0 with a tag is a hole (unmapped by truncate).
inline constexpr uint64_t MakeTableEntry(uint64_t seq, uint32_t phys) { return ((seq + 1) << kBlockBits) | phys; }
inline constexpr uint64_t TableTag(uint64_t t) { return t >> kBlockBits; }
inline constexpr uint32_t TablePhys(uint64_t t) { return static_cast<uint32_t>(t & (kMaxBlocks - 1)); }

}  // namespace mapfs::overlay::vrt::pmem
