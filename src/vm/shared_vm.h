// The vm layer's part of the pool's shared-memory segment (medium/shared.h).
// Volatile: rebuilt by the first process that opens the pool.
#pragma once

#include <atomic>
#include <cstdint>

#include "medium/shared.h"

namespace mapfs::vm {

// Ring of recent mapping changes, so that each process can drop mappings that
// another process made stale (pswap, unmap). Writers hold the PPT lock.
// Entry i is valid for sequence number `seq`; a reader that finds a newer
// sequence there fell behind by a full ring and drops all of its mappings.
constexpr int kInvalRing = 2048;

struct InvalEntry {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> start;   // virtual offset
  std::atomic<uint64_t> length;  // bytes
  std::atomic<uint64_t> origin;  // mount token of the writer (it needs no notice)
};

struct SharedVm {
  std::atomic<uint64_t> chunk_cursor;  // allocation hints: lowest chunk that may be free (chunk number)
  std::atomic<uint64_t> page_cursor;   // bitmap word to start AllocPage at
  std::atomic<uint64_t> inval_seq;     // last published sequence number
  uint64_t pad[5];
  InvalEntry ring[kInvalRing];
};
static_assert(sizeof(SharedVm) <= medium::kVmSharedBytes);

inline SharedVm* VmShared(medium::SharedState* s) { return reinterpret_cast<SharedVm*>(s->vm); }

}  // namespace mapfs::vm
