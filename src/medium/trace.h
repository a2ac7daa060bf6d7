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
  // `n` bytes at `addr` are about to be written with regular stores (or,
  // for a few bulk updates, were just written): they stay in the cache
  // until flushed.
  virtual void OnStore(const void* addr, size_t n) = 0;
  // `n` bytes at `addr` are about to be written with non-temporal stores:
  // they bypass the cache and are durable at the next fence, no flush needed.
  virtual void OnNtStore(const void* addr, size_t n) { OnStore(addr, n); }
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
inline void TraceNtStore(const void* a, size_t n) {
  if (TraceHook* h = CurrentTraceHook()) h->OnNtStore(a, n);
}
inline void TraceFlush(const void* a, size_t n) {
  if (TraceHook* h = CurrentTraceHook()) h->OnFlush(a, n);
}
inline void TraceFence() {
  if (TraceHook* h = CurrentTraceHook()) h->OnFence();
}

// Deliberate bugs, switched on only by the crash checker's own tests to
// prove that it catches them. Never on outside those tests.
enum class InjectedBug {
  kNone,
  kNoFlush,            // Flush() writes nothing back (a missing flush everywhere)
  kApplyBeforeCommit,  // redo records applied in place before their commit record
};
void SetInjectedBug(InjectedBug b);
InjectedBug CurrentInjectedBug();
inline bool BugInjected(InjectedBug b) { return CurrentInjectedBug() == b; }
#else
inline void TraceStore(const void*, size_t) {}
inline void TraceNtStore(const void*, size_t) {}
inline void TraceFlush(const void*, size_t) {}
inline void TraceFence() {}
enum class InjectedBug { kNone, kNoFlush, kApplyBeforeCommit };
constexpr bool BugInjected(InjectedBug) { return false; }
#endif

// True in the traced build; lets tests refuse to run against the wrong library.
constexpr bool kTraceBuild = MAPFS_TRACE != 0;

}  // namespace mapfs::medium
