// OpenOverlay: the engine the options name.
#include "overlay/engine.h"
#include "overlay/split/split_engine.h"
#include "overlay/virtual/virtual_engine.h"

namespace mapfs::overlay {

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
