// Crash-test instrumentation hook for the medium layer.
//
// Every store that matters for consistency goes through persist.h, which
// reports it here. In a normal build (MAPFS_TRACE undefined or 0) the calls
// below are empty inline functions and cost nothing. The test build of the
// core (target mapfs_core_traced) defines MAPFS_TRACE=1; a test then installs
// a TraceHook to record stores, flushes and fences, or to stop the process at
// the Nth fence and inspect what recovery makes of the pool.
#pragma once

#include <cstddef>

#ifndef MAPFS_TRACE
#define MAPFS_TRACE 0
#endif

namespace mapfs::medium {

class TraceHook {
 public:
  virtual ~TraceHook() = default;
  // `n` bytes at `addr` were written (regular or non-temporal stores).
  virtual void OnStore(const void* addr, size_t n) = 0;
  // Cache lines covering [addr, addr+n) were written back.
  virtual void OnFlush(const void* addr, size_t n) = 0;
  // A store fence: everything stored and flushed before it is now durable.
  virtual void OnFence() = 0;
};

#if MAPFS_TRACE
// Installs `hook` (nullptr removes it). Not thread-safe with concurrent stores.
void SetTraceHook(TraceHook* hook);
TraceHook* CurrentTraceHook();
inline void TraceStore(const void* a, size_t n) {
  if (TraceHook* h = CurrentTraceHook()) h->OnStore(a, n);
}
inline void TraceFlush(const void* a, size_t n) {
  if (TraceHook* h = CurrentTraceHook()) h->OnFlush(a, n);
}
inline void TraceFence() {
  if (TraceHook* h = CurrentTraceHook()) h->OnFence();
}
#else
inline void TraceStore(const void*, size_t) {}
inline void TraceFlush(const void*, size_t) {}
inline void TraceFence() {}
#endif

// True in the traced build; lets tests refuse to run against the wrong library.
constexpr bool kTraceBuild = MAPFS_TRACE != 0;

}  // namespace mapfs::medium
