// The one persistence primitive the mappers need that medium/persist.h does
// not have: an 8-byte compare-and-swap, reported to the crash-test hook
// like Store64 (it is one store that can never be torn).
#pragma once

#include <atomic>
#include <cstdint>

#include "medium/persist.h"

namespace mapfs::map {

// Atomically replaces *p by `desired` if it holds `expected`; on failure
// `expected` receives the current value. Not yet flushed.
inline bool Cas64(uint64_t* p, uint64_t& expected, uint64_t desired) {
  medium::TraceStore(p, 8);
  return std::atomic_ref<uint64_t>(*p).compare_exchange_strong(expected, desired, std::memory_order_acq_rel,
                                                               std::memory_order_acquire);
}

inline uint64_t Load64(const uint64_t* p) { return medium::Load64(p); }

}  // namespace mapfs::map
