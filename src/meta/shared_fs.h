// The meta layer's part of the pool's shared-memory segment
// (medium::SharedState::fs): per-inode lock stripes, reader holds per mount,
// open counts per inode. Volatile; zero after an exclusive open (which is
// also when every lock is free and nothing is open).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "medium/pool.h"
#include "medium/shared.h"
#include "meta/fs_format.h"

namespace mapfs::meta {

constexpr int kLockStripes = 8192;

// Ring of recent namespace and inode changes (fs/change_ring.h), so that a
// FUSE daemon can tell the kernel which of its cached names, attributes and
// pages another process made stale. Written only while some follower is
// registered. Entry i is valid for sequence number `seq` (0 while a writer
// fills it); a follower that finds a newer sequence there fell behind by a
// full ring and invalidates everything it knows.
constexpr int kChangeRing = 2048;
constexpr int kChangeNameWords = 32;  // NAME_MAX + 1 bytes

struct ChangeEntry {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> origin;  // mount token of the writer (its own kernel knows)
  std::atomic<uint64_t> kind;    // fs::ChangeKind
  std::atomic<uint64_t> a, b;    // inode numbers (see fs::Change)
  std::atomic<uint64_t> off, len;
  std::atomic<uint64_t> name_len;
  std::atomic<uint64_t> name[kChangeNameWords];
};

struct ChangeRing {
  alignas(64) std::atomic<uint64_t> head;  // last claimed sequence number
  alignas(64) std::atomic<uint32_t> followers;  // registered followers (writers skip the ring at 0)
  std::atomic<uint32_t> sleeping;  // a follower waits on `wake` (futex)
  std::atomic<uint32_t> wake;
  std::atomic<uint64_t> sleeper;   // mount token of the last follower that went to sleep
  alignas(64) ChangeEntry ring[kChangeRing];
};

struct FsShared {
  // Writer word per stripe: 0 = no writer, else mount slot + 1 of the holder.
  std::atomic<uint32_t> writer[kLockStripes];
  // Highest mount slot + 1 that ever took a lock (bounds the reader scan).
  std::atomic<uint32_t> slots_used;
  // Mount tokens whose locks have been released after their process died.
  std::atomic<uint64_t> reaped[medium::kMaxMounts];
  // Inode allocation hint (next slot to try).
  std::atomic<uint64_t> inode_hint;
  // Readers holding each stripe, per mount. A process that dies leaves only
  // its own counters behind, which whoever notices the death zeroes.
  // Each mount's row fills whole pages of its own (kHoldRowBytes, page
  // aligned): with protection keys a process leaves its own row untagged in
  // its mapping (InodeLocks), so its read paths take reader locks without
  // opening the rights, while every other row stays tagged
  // (docs/SECURITY.md, "Stray stores: protection keys").
  alignas(4096) std::atomic<uint16_t> holds[medium::kMaxMounts][kLockStripes];
  // Open descriptions per inode across every process (unlink of an open
  // file keeps the inode until this drops to zero).
  std::atomic<uint32_t> open_count[format::kMaxInodes];
  // 1 once the inode's data was mapped in any process (a pointer handed
  // out by mapfs_mmap, or a map of the pool file: FileSystem::MapPool),
  // until the inode is freed: its data then keeps its pool pages
  // (file::FileData, `mapped`). Sticky rather than counted, so a process
  // that dies with a map leaves nothing to clean up.
  std::atomic<uint8_t> mapped[format::kMaxInodes];
  ChangeRing changes;
  // Bumped by every process, under the directory's write lock and before
  // its transaction commits, each time it removes or replaces a directory
  // entry: the epoch of the process-local name caches (fs/name_cache.h).
  alignas(64) std::atomic<uint64_t> names_removed;
};
static_assert(sizeof(FsShared) <= medium::kFsSharedBytes);
// A row is whole pages, page aligned in the segment (SharedState::fs is).
constexpr size_t kHoldRowBytes = sizeof(std::atomic<uint16_t>) * kLockStripes;
static_assert(kHoldRowBytes % 4096 == 0 && offsetof(FsShared, holds) % 4096 == 0);
static_assert(offsetof(medium::SharedState, fs) % 4096 == 0);

inline FsShared* FsSharedOf(medium::Pool* pool) { return reinterpret_cast<FsShared*>(pool->shared()->fs); }

}  // namespace mapfs::meta
