// CrashRecorder: the trace half of the crash-state checker (Chipmunk-style,
// in user space).
//
// Installed as the medium layer's TraceHook while a workload runs on a
// mounted pool, it follows every 64-byte line of the pool through the
// persistence model the core is written against (medium/persist.h):
//
//   * a regular store leaves the line dirty in the cache: it may reach the
//     medium at any later moment (eviction), or never before a crash;
//   * a flush (or a non-temporal store) makes the line's current value
//     durable at the next fence — until that fence it may or may not be;
//   * a fence makes every flushed line durable.
//
// At each fence it records a crash point: the lines in flight (stored
// since they were last durable, with their values at the fence) and the
// lines the fence makes durable. A crash image of that point is the durable
// state before the fence plus any subset of the lines in flight. Values are
// per line, taken at the fence: a line stored twice between two fences is
// seen with its last value only (the model's one simplification).
//
// Addresses are translated to pool offsets: the pool view maps offset o at
// pool.base() + o; file data in the vm region goes through the persistent
// page table. Stores that are neither count as `outside` (the checker
// requires zero). At Finish the whole pool is compared with what was
// traced: a line that changed without any traced store is reported as
// untraced — a store the crash tests cannot see, which the design forbids.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "medium/pool.h"
#include "medium/trace.h"
#include "vm/vm.h"

namespace mapfs::crash {

constexpr uint64_t kLine = 64;

struct LineValue {
  uint64_t line;  // pool offset / kLine
  std::array<char, kLine> bytes;
};

struct CrashPoint {
  int op;  // the workload's operation running at this point (1-based); ops+1 = after the last
  std::vector<LineValue> in_flight;  // may or may not have reached the medium
  std::vector<LineValue> durable;    // durable once this point's fence completes
};

class CrashRecorder : public medium::TraceHook {
 public:
  // Takes the pool's current content as durable: call it when nothing is
  // in flight (after an operation that ended with a fence).
  CrashRecorder(medium::Pool* pool, vm::Vm* vm);
  ~CrashRecorder() override;

  // Installs the hook; crash points from now on belong to operation `op`.
  void BeginOp(int op);
  // Removes the hook and records the point after the last operation
  // (lines still dirty in the cache); computes untraced lines.
  void Finish(int after_op);

  void OnStore(const void* addr, size_t n) override;
  void OnNtStore(const void* addr, size_t n) override;
  void OnFlush(const void* addr, size_t n) override;
  void OnFence() override;

  const std::string& base() const { return base_; }  // the pool at the start
  const std::vector<CrashPoint>& points() const { return points_; }
  const std::vector<uint64_t>& untraced_lines() const { return untraced_; }
  uint64_t outside() const { return outside_; }
  uint64_t fences() const { return fences_; }

 private:
  enum LineState : uint8_t { kDirty, kFlushed };
  // Calls fn(line) for each pool line [addr, addr+n) covers.
  template <typename Fn>
  void ForLines(const void* addr, size_t n, Fn fn);
  void Mark(const void* addr, size_t n, LineState s);
  const char* Durable(uint64_t line) const;
  LineValue Current(uint64_t line) const;
  void RecordPoint(bool fence);

  medium::Pool* pool_;
  vm::Vm* vm_;
  std::string base_;
  std::unordered_map<uint64_t, std::array<char, kLine>> durable_;  // lines that differ from base_
  std::unordered_map<uint64_t, LineState> dirty_;                   // stored since last durable
  std::vector<CrashPoint> points_;
  std::vector<uint64_t> untraced_;
  std::vector<bool> traced_;  // every line ever stored
  int op_ = 0;
  uint64_t outside_ = 0, fences_ = 0;
  bool installed_ = false;
};

}  // namespace mapfs::crash
