// Persistence primitives: the only way the core makes a store durable.
//
// The instruction set is chosen once at start-up by CPUID: non-temporal copy
// with AVX-512, AVX2 or SSE2; cache-line write-back with clwb, clflushopt or
// clflush; sfence. The persistence domain decides whether write-backs are
// needed at all: kFlush (default, ADR platforms and DRAM-backed pools) or
// kNone (eADR platforms, or to measure the pure software cost).
//
// Rules the rest of the core relies on:
//  * CopyNt/ZeroNt leave the destination durable only after Fence().
//  * Store64 is a single 8-byte atomic store: it can never be torn.
//  * StoreNt64 is one too, and like CopyNt durable after Fence() alone.
//  * Persist(a, n) = Flush(a, n) + Fence().
#pragma once

#include <emmintrin.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "medium/trace.h"

namespace mapfs::medium {

enum class Domain { kFlush, kNone };
enum class CopyIsa { kAvx512, kAvx2, kSse2 };
enum class FlushIsa { kClwb, kClflushopt, kClflush };

struct PersistConfig {
  CopyIsa copy;
  FlushIsa flush;
  Domain domain;
};

// What CPUID found (before any override).
PersistConfig DetectPersistConfig();
// The configuration in use. Thread-safe to read at any time.
const PersistConfig& CurrentPersistConfig();
// Overrides (tests and benchmarks compare ISAs; MAPFS_PERSIST=none selects
// the kNone domain at start-up). Requested ISAs the CPU lacks are refused.
bool SetPersistConfig(const PersistConfig& cfg);
const char* ToString(CopyIsa isa);
const char* ToString(FlushIsa isa);
const char* ToString(Domain d);

namespace detail {
using CopyFn = void (*)(void*, const void*, size_t);
using ZeroFn = void (*)(void*, size_t);
using FlushFn = void (*)(const void*, size_t);
extern CopyFn copy_nt;
extern ZeroFn zero_nt;
extern FlushFn flush;
}  // namespace detail

// Non-temporal copy of n bytes; unaligned head/tail handled with regular
// stores that are flushed. Durable after Fence().
inline void CopyNt(void* dst, const void* src, size_t n) {
  TraceNtStore(dst, n);
  detail::copy_nt(dst, src, n);
}
// Non-temporal zeroing; durable after Fence().
inline void ZeroNt(void* dst, size_t n) {
  TraceNtStore(dst, n);
  detail::zero_nt(dst, n);
}
// Writes back the cache lines of [addr, addr+n).
inline void Flush(const void* addr, size_t n) {
  if (BugInjected(InjectedBug::kNoFlush)) return;
  TraceFlush(addr, n);
  detail::flush(addr, n);
}
inline void Fence() {
  TraceFence();
  __builtin_ia32_sfence();
}
inline void Persist(const void* addr, size_t n) {
  Flush(addr, n);
  Fence();
}
// One 8-byte store that can never be torn; not yet flushed.
inline void Store64(uint64_t* dst, uint64_t v) {
  TraceStore(dst, 8);
  std::atomic_ref<uint64_t>(*dst).store(v, std::memory_order_release);
}
// One 8-byte non-temporal store (movnti): never torn, durable after Fence()
// with no flush. Cheaper than Store64 + Flush where a line is published on
// its own: a write-back of the dirty line (clwb) costs about 150 ns before
// the fence here, this store next to nothing (docs/PERFORMANCE.md).
inline void StoreNt64(uint64_t* dst, uint64_t v) {
  TraceNtStore(dst, 8);
  _mm_stream_si64(reinterpret_cast<long long*>(dst), static_cast<long long>(v));
}
inline uint64_t Load64(const uint64_t* src) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(src)).load(std::memory_order_acquire);
}
// Regular stores of a small structure; not yet flushed.
inline void Write(void* dst, const void* src, size_t n) {
  TraceStore(dst, n);
  std::memcpy(dst, src, n);
}

}  // namespace mapfs::medium
