// On-media format of the persistent page table (PPT).
//
// The PPT maps the virtual region (offsets 0 .. 2^vspace_shift) to pool
// pages, shaped like an x86-64 page table so that ctFS's pswap trick works:
// four levels of 512 eight-byte entries, one 4 KiB pool page per table.
//
//   level 3 (root, "PGD"): bits 39..47 of the virtual offset
//   level 2 ("PUD"):        bits 30..38, each entry covers 1 GiB
//   level 1 ("PMD"):        bits 21..29, each entry covers 2 MiB (a chunk)
//   level 0 ("PTE"):        bits 12..20, each entry covers one 4 KiB page
//
// An entry is 0 (nothing mapped below it) or a pool offset with flags in its
// low bits. At level 1 an entry is either a table (points to a PTE table) or
// a leaf (maps a whole 2 MiB-aligned pool chunk); level 0 entries are always
// leaves; levels 2 and 3 always point to tables.
#pragma once

#include <cstdint>

namespace mapfs::vm::ppt {

constexpr uint64_t kPresent = 1;  // entry is in use
constexpr uint64_t kLeaf = 2;     // maps pages (not a table)
constexpr uint64_t kFlagMask = 0xfff;
constexpr uint64_t kOffsetMask = 0x000ffffffffff000ull;
constexpr int kLevels = 4;
constexpr int kEntries = 512;

constexpr int Shift(int level) { return 12 + 9 * level; }      // bits below an entry of `level`
constexpr uint64_t Reach(int level) { return uint64_t{1} << Shift(level); }
constexpr int Index(uint64_t voff, int level) { return static_cast<int>((voff >> Shift(level)) & 511); }

constexpr uint64_t Table(uint64_t pool_off) { return pool_off | kPresent; }
constexpr uint64_t Leaf(uint64_t pool_off) { return pool_off | kPresent | kLeaf; }
constexpr bool IsPresent(uint64_t e) { return (e & kPresent) != 0; }
constexpr bool IsLeaf(uint64_t e) { return (e & (kPresent | kLeaf)) == (kPresent | kLeaf); }
constexpr bool IsTable(uint64_t e) { return (e & (kPresent | kLeaf)) == kPresent; }
constexpr uint64_t Target(uint64_t e) { return e & kOffsetMask; }

static_assert(Reach(0) == 4096);
static_assert(Reach(1) == 2 * 1024 * 1024);
static_assert(Reach(2) == 1024ull * 1024 * 1024);
static_assert(Shift(3) + 9 == 48);

}  // namespace mapfs::vm::ppt
