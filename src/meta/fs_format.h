// On-media format of the file system's own metadata (meta layer):
// the superblock and the inode table. Documented in docs/FORMAT.md.
//
// The pool state word fs_super (medium PoolState) holds the virtual offset
// of the superblock, an L0 partition; 0 means no file system was made yet.
//
// Inodes live in segments, partitions allocated on demand: segment 0 is an
// L1 partition (128 slots), segment 1 an L2 (1024 slots), every later one an
// L3 (8192 slots). Slots are 256 bytes. The first slots of each segment hold
// its inode bitmap (1 bit per slot, set = in use), so an empty file system
// costs one 4 KiB superblock and one 32 KiB segment.
//
// Inode numbers are global slot numbers: ino = SegBase(seg) + slot. The
// bitmap slots are never handed out, so ino 0 is never an inode; the root
// directory is ino 1.
//
// Every inode word is updated either by a redo transaction (namespace
// operations) or by one atomic 8-byte store (size, times and the partition
// word on the data path), so a crash can never tear a field.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mapfs::meta::format {

constexpr uint64_t kSuperMagic = 0x314253534650414dull;  // "MAPFSSB1" in memory order
constexpr uint32_t kSuperVersion = 1;
constexpr uint64_t kRootIno = 1;
constexpr int kMaxSegments = 440;
constexpr uint64_t kInodeSize = 256;

struct Superblock {
  uint64_t magic;          // kSuperMagic
  uint32_t version;        // kSuperVersion
  uint32_t inode_size;     // kInodeSize
  uint64_t root_ino;       // kRootIno
  uint64_t created_ns;     // CLOCK_REALTIME at creation
  uint32_t max_segments;   // kMaxSegments
  uint32_t checksum;       // crc32c of the bytes before this field (immutable part)
  uint64_t reserved[59];
  // Mutable part (redo transactions only).
  uint64_t segments;             // segments in use
  uint64_t seg[kMaxSegments];    // virtual offset of segment i
  uint64_t reserved2[512 - 64 - 1 - kMaxSegments];
};
static_assert(sizeof(Superblock) == 4096);
static_assert(offsetof(Superblock, checksum) == 36);
static_assert(offsetof(Superblock, segments) == 512);
static_assert(offsetof(Superblock, seg) == 520);

// Segment geometry.
constexpr int SegLevel(int seg) { return seg == 0 ? 1 : seg == 1 ? 2 : 3; }
constexpr uint64_t SegSlots(int seg) { return seg == 0 ? 128 : seg == 1 ? 1024 : 8192; }
constexpr uint64_t SegBase(int seg) { return seg == 0 ? 0 : seg == 1 ? 128 : 1152 + uint64_t(seg - 2) * 8192; }
// Slots at the start of a segment taken by its bitmap.
constexpr uint64_t SegBitmapSlots(int seg) { return (SegSlots(seg) / 8 + kInodeSize - 1) / kInodeSize; }
constexpr uint64_t kMaxInodes = SegBase(kMaxSegments);
static_assert(SegBitmapSlots(0) == 1 && SegBitmapSlots(1) == 1 && SegBitmapSlots(2) == 4);
// Every segment starts on a bitmap word of its own (InodeTable::Reserve
// starts its scan at the word that holds an inode number).
static_assert(SegBase(1) % 64 == 0 && SegBase(2) % 64 == 0 && SegSlots(2) % 64 == 0);
inline int SegOf(uint64_t ino) {
  if (ino < 128) return 0;
  if (ino < 1152) return 1;
  return 2 + static_cast<int>((ino - 1152) / 8192);
}

// The partition word: virtual offset of the partition (4 KiB aligned) with
// its level in the low 4 bits; 0 = no partition.
constexpr uint64_t PartWord(uint64_t voff, int level) { return voff | static_cast<uint64_t>(level); }
constexpr uint64_t PartVoff(uint64_t w) { return w & ~uint64_t{0xfff}; }
constexpr int PartLevel(uint64_t w) { return static_cast<int>(w & 0xf); }

// Inode flags.
constexpr uint64_t kFlagInlineLink = 1;  // symlink target stored in the inode

struct Inode {
  uint64_t mode;        // st_mode; 0 = free slot
  uint64_t nlink;
  uint64_t uid_gid;     // uid | gid << 32
  uint64_t size;        // bytes (directories: entries, symlinks: target length)
  uint64_t part;        // PartWord of the data partition (file data, directory, long symlink)
  int64_t atime_ns;
  int64_t mtime_ns;
  int64_t ctime_ns;     // --- first cache line ends here
  int64_t btime_ns;
  uint64_t generation;  // bumped each time the slot is reused
  uint64_t flags;
  uint64_t rdev;
  uint64_t parent;      // directories: the parent directory (the root: itself)
  // Block-mapped regular files: no block at or past this byte offset is
  // mapped (file/block_file.cc); made durable before blocks past it are.
  uint64_t blocks_end;
  uint64_t reserved[2];
  char inline_data[128];  // short symlink targets
};
static_assert(sizeof(Inode) == kInodeSize);
static_assert(offsetof(Inode, size) == 24);
static_assert(offsetof(Inode, mtime_ns) == 48);
static_assert(offsetof(Inode, ctime_ns) == 56);
static_assert(offsetof(Inode, blocks_end) == 104);
static_assert(offsetof(Inode, inline_data) == 128);
constexpr size_t kInlineLinkMax = sizeof(Inode::inline_data);

}  // namespace mapfs::meta::format
