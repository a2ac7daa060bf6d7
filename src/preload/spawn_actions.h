// posix_spawn file actions that open pool paths (see spawn_actions.cc).
#pragma once

#include <spawn.h>

#include <utility>
#include <vector>

namespace mapfs::preload {

// The pool opens of one spawn, in the parent. Use, in the spawn wrapper:
// Open(fa) before the hand-off, Point() after it, the spawn, then let the
// object go (it closes the opens and resets the reserved descriptors).
class SpawnOpens {
 public:
  SpawnOpens() = default;
  ~SpawnOpens();
  SpawnOpens(const SpawnOpens&) = delete;
  SpawnOpens& operator=(const SpawnOpens&) = delete;

  // Opens each pool file fa's actions name, with their flags and mode, as
  // the child would at this moment. 0, or the errno posix_spawn returns.
  int Open(const posix_spawn_file_actions_t* fa);
  // Points each action's reserved descriptor at its open's hand-off
  // placeholder, which the new image adopts (Shim::Handoff must have run).
  void Point();

 private:
  std::vector<std::pair<int, int>> opens_;  // (reserved, the shim's open)
};

}  // namespace mapfs::preload
