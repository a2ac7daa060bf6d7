// OpenOverlay: the engine the options name.
#include <atomic>
#include "overlay/engine.h"
#include "overlay/split/split_engine.h"
#include "overlay/virtual/virtual_engine.h"

namespace mapfs::overlay {

namespace {
std::atomic<int> g_internal_fd_base{0};
}  // namespace

void SetInternalFdBase(int base) { g_internal_fd_base.store(base, std::memory_order_relaxed); }
int InternalFdBase() { return g_internal_fd_base.load(std::memory_order_relaxed); }

Result<std::unique_ptr<Engine>> OpenOverlay(const Options& o) {
  if (o.dir.empty() || o.dir[0] != '/') return Status::Error(EINVAL, "overlay: the directory must be absolute");
  switch (o.engine) {
    case EngineKind::kSplit: {
      auto e = split::SplitEngine::Open(o);
      if (!e.ok()) return e.status();
      return std::unique_ptr<Engine>(std::move(*e));
    }
    case EngineKind::kVirtual:
      return NewVirtualEngine(o);
  }
  return Status::Error(EINVAL, "overlay: unknown engine");
}

}  // namespace mapfs::overlay
