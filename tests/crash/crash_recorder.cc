#include "crash_recorder.h"

#include <algorithm>
#include <cstring>

#include "common/units.h"

namespace mapfs::crash {

CrashRecorder::CrashRecorder(medium::Pool* pool, vm::Vm* vm)
    : pool_(pool), vm_(vm), base_(pool->base(), pool->size()), traced_(pool->size() / kLine, false) {}

CrashRecorder::~CrashRecorder() {
  if (installed_) medium::SetTraceHook(nullptr);
}

void CrashRecorder::BeginOp(int op) {
  op_ = op;
  if (!installed_) medium::SetTraceHook(this);
  installed_ = true;
}

template <typename Fn>
void CrashRecorder::ForLines(const void* addr, size_t n, Fn fn) {
  if (n == 0) return;
  auto a = reinterpret_cast<uintptr_t>(addr);
  auto pb = reinterpret_cast<uintptr_t>(pool_->base());
  if (a >= pb && a + n <= pb + pool_->size()) {
    for (uint64_t l = (a - pb) / kLine; l <= (a + n - 1 - pb) / kLine; l++) fn(l);
    return;
  }
  if (vm_->Contains(addr) && vm_->Contains(static_cast<const char*>(addr) + n - 1)) {
    // Page by page: neighbouring virtual pages need not be neighbours in the pool.
    uint64_t voff = a - reinterpret_cast<uintptr_t>(vm_->base());
    const uint64_t end = voff + n;
    while (voff < end) {
      uint64_t page_end = std::min(end, (voff / kPageSize + 1) * kPageSize);
      auto t = vm_->Translate(voff);
      if (!t.ok()) {
        outside_++;
      } else {
        for (uint64_t l = *t / kLine; l <= (*t + (page_end - voff) - 1) / kLine; l++) fn(l);
      }
      voff = page_end;
    }
    return;
  }
  outside_++;
}

void CrashRecorder::Mark(const void* addr, size_t n, LineState s) {
  ForLines(addr, n, [&](uint64_t l) {
    traced_[l] = true;
    dirty_[l] = s;
  });
}

void CrashRecorder::OnStore(const void* addr, size_t n) { Mark(addr, n, kDirty); }
void CrashRecorder::OnNtStore(const void* addr, size_t n) { Mark(addr, n, kFlushed); }

void CrashRecorder::OnFlush(const void* addr, size_t n) {
  ForLines(addr, n, [&](uint64_t l) {
    auto it = dirty_.find(l);
    if (it != dirty_.end()) it->second = kFlushed;
  });
}

void CrashRecorder::OnFence() {
  fences_++;
  RecordPoint(true);
}

const char* CrashRecorder::Durable(uint64_t line) const {
  auto it = durable_.find(line);
  return it != durable_.end() ? it->second.data() : base_.data() + line * kLine;
}

LineValue CrashRecorder::Current(uint64_t line) const {
  LineValue v{line, {}};
  std::memcpy(v.bytes.data(), pool_->base() + line * kLine, kLine);
  return v;
}

// The point just before a fence (or the end): every dirty line whose value
// differs from its durable one is in flight; at the fence the flushed ones
// become durable and leave the dirty set.
void CrashRecorder::RecordPoint(bool fence) {
  CrashPoint p;
  p.op = op_;
  for (auto it = dirty_.begin(); it != dirty_.end();) {
    LineValue v = Current(it->first);
    bool differs = std::memcmp(v.bytes.data(), Durable(it->first), kLine) != 0;
    if (differs) p.in_flight.push_back(v);
    if (fence && it->second == kFlushed) {
      if (differs) {
        p.durable.push_back(v);
        durable_[it->first] = v.bytes;
      }
      it = dirty_.erase(it);
    } else {
      ++it;
    }
  }
  if (!p.in_flight.empty() || !p.durable.empty()) points_.push_back(std::move(p));
}

void CrashRecorder::Finish(int after_op) {
  if (installed_) medium::SetTraceHook(nullptr);
  installed_ = false;
  op_ = after_op;
  RecordPoint(false);
  const char* now = pool_->base();
  for (uint64_t l = 0; l < traced_.size(); l++)
    if (!traced_[l] && std::memcmp(now + l * kLine, base_.data() + l * kLine, kLine) != 0) untraced_.push_back(l);
}

}  // namespace mapfs::crash
