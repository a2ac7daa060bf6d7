// On-media format of ctFS's partition hierarchy (space layer).
//
// The virtual region is one top partition of level T (header: top_level).
// Level L partitions are 4 KiB * 8^L bytes, aligned to their own size:
// L0 4 KiB, L1 32 KiB, L2 256 KiB, L3 2 MiB, L4 16 MiB ... L9 512 GiB.
// A partition is Empty, Allocated (to one file) or Partitioned (split into
// children). Levels >= 4 split into 8 children of the next level; an L3
// splits directly into 512 x L0, 64 x L1 or 8 x L2 (its "kind").
//
// A Partitioned partition keeps its header in its own first page (virtual
// offset = partition start), at a fixed position per level, so the headers
// of a chain of first children share one page. Because that page is inside
// child 0, child 0 of a Partitioned partition is always Partitioned too, and
// child 0 of a Partitioned L3 is reserved (it holds the header page).
//
// Header words (8 bytes each, updated only through redo transactions):
//   L >= 4 at page offset 128 + 32 * (L - 4):
//     w0: kTag << 32 | L << 16 | child states (2 bits per child: 0 E, 1 A, 2 P)
//     w1: availability masks of children 0..3 (16 bits each, for P children)
//     w2: availability masks of children 4..7
//     w3: 0
//   L3 at page offset 0:
//     w0: kTag << 32 | 3 << 16 | kind (0, 1 or 2: the level of its children)
//     w1..w8: 512-bit map, bit i = child i allocated (bit 0 always set)
// An availability mask has bit k set when a level-k partition can be
// allocated somewhere inside; E children count as (1 << (level + 1)) - 1.
// The root's state is the pool state word space_root (0 E, 1 A, 2 P).
#pragma once

#include <cstdint>

namespace mapfs::space::format {

constexpr uint64_t kTag = 0x50415254;  // "PART"
constexpr int kMaxLevel = 11;
enum State : uint64_t { kEmpty = 0, kAllocated = 1, kPartitioned = 2 };

constexpr uint64_t LevelSize(int level) { return uint64_t{4096} << (3 * level); }
constexpr int LevelShift(int level) { return 12 + 3 * level; }
constexpr uint64_t HeaderOffset(int level) { return level == 3 ? 0 : 128 + 32 * uint64_t(level - 4); }
constexpr int HeaderWords(int level) { return level == 3 ? 9 : 4; }
constexpr uint16_t EmptyMask(int level) { return static_cast<uint16_t>((1u << (level + 1)) - 1); }

static_assert(LevelSize(3) == 2 * 1024 * 1024);
static_assert(LevelSize(9) == 512ull << 30);
static_assert(HeaderOffset(3) + 8 * HeaderWords(3) <= HeaderOffset(4));
static_assert(HeaderOffset(kMaxLevel) + 32 <= 4096);

}  // namespace mapfs::space::format
