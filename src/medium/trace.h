// Crash-test instrumentation hook for the medium layer.
//
// Every store that matters for consistency goes through persist.h, which
// reports it here. The hook is off (null) unless a crash test installs a
// TraceHook to record stores, flushes and fences, or to stop the process at
// the Nth fence and inspect what recovery makes of the pool. It is a runtime
// switch, not a build flavour, so the crash tests exercise the very objects
// that ship: when off, each call costs one relaxed load of a global and a
// branch that predicts perfectly (no measurable change per operation:
// docs/PERFORMANCE.md). Nothing outside the tests installs a hook, and the
// setters are not exported from libmapfs.so.
#pragma once

#include <atomic>
#include <cstddef>

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

// Deliberate bugs, switched on only by the crash checker's own tests to
// prove that it catches them. Never on outside those tests.
enum class InjectedBug {
  kNone,
  kNoFlush,            // Flush() writes nothing back (a missing flush everywhere)
  kApplyBeforeCommit,  // redo records applied in place before their commit record
};

namespace trace_detail {
// Hidden: reached RIP-relative from the inline helpers below, never through
// the GOT, and never exported.
extern std::atomic<TraceHook*> hook __attribute__((visibility("hidden")));
extern std::atomic<InjectedBug> bug __attribute__((visibility("hidden")));
}  // namespace trace_detail

// Installs `hook` (nullptr removes it). Install before the threads that
// store start, remove after they end: a hook sees every thread's stores.
void SetTraceHook(TraceHook* hook);
TraceHook* CurrentTraceHook();
void SetInjectedBug(InjectedBug b);

inline void TraceStore(const void* a, size_t n) {
  if (TraceHook* h = trace_detail::hook.load(std::memory_order_relaxed)) [[unlikely]]
    h->OnStore(a, n);
}
inline void TraceNtStore(const void* a, size_t n) {
  if (TraceHook* h = trace_detail::hook.load(std::memory_order_relaxed)) [[unlikely]]
    h->OnNtStore(a, n);
}
inline void TraceFlush(const void* a, size_t n) {
  if (TraceHook* h = trace_detail::hook.load(std::memory_order_relaxed)) [[unlikely]]
    h->OnFlush(a, n);
}
inline void TraceFence() {
  if (TraceHook* h = trace_detail::hook.load(std::memory_order_relaxed)) [[unlikely]]
    h->OnFence();
}
inline bool BugInjected(InjectedBug b) { return trace_detail::bug.load(std::memory_order_relaxed) == b; }

}  // namespace mapfs::medium
