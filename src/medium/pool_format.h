// On-media layout of a pool's fixed metadata area. Documented in
// docs/FORMAT.md; every size and offset is pinned by a static_assert.
//
//   pool offset 0        PoolHeader      (immutable after mkfs, checksummed)
//   pool offset 1024     PoolState       (mutable 8-byte words, never torn)
//   pool offset 4096     redo slots      (redo_slots x redo_slot_size bytes)
//   bitmap_off           page bitmap     (1 bit per 4 KiB pool page, 1 = in use)
//   ...                  padding up to meta_end (a chunk boundary)
//   ppt_root_off         the PPT root table (one page inside the metadata area)
//   meta_end ...         pages handed out by the page allocator
//   map_off ... pool_size  block-mapped pools only: the mapping area (src/map),
//                        whose pages the page allocator never hands out
//
// All positions are pool offsets (bytes from the start of the pool file),
// never pointers, so any process may map the pool anywhere.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mapfs::medium::format {

constexpr char kMagic[8] = {'M', 'A', 'P', 'F', 'S', 'P', 'L', '1'};
constexpr uint32_t kVersion = 2;  // 2: the file system (PoolState::fs_super)
constexpr uint64_t kHeaderOff = 0;
constexpr uint64_t kStateOff = 1024;
constexpr uint64_t kRedoOff = 4096;

enum class Mode : uint32_t { kPosix = 0, kSync = 1, kStrict = 2 };

struct PoolHeader {
  char magic[8];            // kMagic
  uint32_t version;         // kVersion
  uint32_t header_size;     // sizeof(PoolHeader)
  uint8_t uuid[16];         // random at mkfs; keys shared memory and locks
  uint64_t pool_size;       // bytes; the file may not be shorter
  uint32_t page_shift;      // mapping page size in use: 12 (4 KiB) or 21 (2 MiB)
  uint32_t default_mode;    // Mode
  uint64_t options;         // reserved format options, 0 in version 1
  uint64_t mkfs_time_ns;    // CLOCK_REALTIME at mkfs
  uint64_t redo_off;        // first redo slot
  uint32_t redo_slots;      // number of redo slots
  uint32_t redo_slot_size;  // bytes per slot (a multiple of 4096)
  uint64_t bitmap_off;      // page bitmap
  uint64_t bitmap_bytes;    // ceil(pool pages / 64) * 8
  uint64_t meta_end;        // end of the fixed metadata area, chunk aligned
  uint64_t ppt_root_off;    // PPT root table page
  uint32_t vspace_shift;    // log2 of the virtual region size
  uint32_t top_level;       // level of the top partition (space layer)
  // How regular files keep their data: 0 = contiguous (ctFS partitions),
  // else the block mapper design (map::format::Kind: 1 hashfs, 2 cuckoo,
  // 3 extent, 4 radix) whose area is [map_off, map_off + map_len).
  uint32_t files_kind;
  uint32_t files_reserved;  // 0
  uint64_t map_off;         // chunk aligned, >= meta_end; 0 when contiguous
  uint64_t map_len;         // chunk multiple, map_off + map_len == pool_size
  uint8_t reserved[360];
  uint32_t reserved32;
  uint32_t checksum;        // crc32c of every byte before this field
};
static_assert(sizeof(PoolHeader) == 512);
static_assert(offsetof(PoolHeader, uuid) == 16);
static_assert(offsetof(PoolHeader, pool_size) == 32);
static_assert(offsetof(PoolHeader, page_shift) == 40);
static_assert(offsetof(PoolHeader, redo_off) == 64);
static_assert(offsetof(PoolHeader, bitmap_off) == 80);
static_assert(offsetof(PoolHeader, meta_end) == 96);
static_assert(offsetof(PoolHeader, ppt_root_off) == 104);
static_assert(offsetof(PoolHeader, vspace_shift) == 112);
static_assert(offsetof(PoolHeader, files_kind) == 120);
static_assert(offsetof(PoolHeader, map_off) == 128);
static_assert(offsetof(PoolHeader, map_len) == 136);
static_assert(offsetof(PoolHeader, checksum) == 508);
constexpr uint32_t kFilesContiguous = 0;
constexpr uint32_t kFilesMaxKind = 4;

// Mutable state. Each field is one 8-byte word written with Store64 and
// persisted on its own, so a crash can never tear one; no checksum needed.
struct PoolState {
  uint64_t dirty;           // 1 while any process has the pool open
  uint64_t space_root;      // state of the top partition (space layer)
  uint64_t open_count;      // number of mounts ever (statistics)
  uint64_t recoveries;      // number of recoveries run (statistics)
  uint64_t fs_super;        // virtual offset of the superblock (meta layer), 0 = none yet
  uint64_t reserved[11];
};
static_assert(sizeof(PoolState) == 128);
static_assert(offsetof(PoolState, space_root) == 8);
static_assert(offsetof(PoolState, fs_super) == 32);
static_assert(kStateOff + sizeof(PoolState) <= kRedoOff);

}  // namespace mapfs::medium::format
