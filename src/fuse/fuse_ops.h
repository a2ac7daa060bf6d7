// The FUSE front's operations: libfuse3's low-level (inode) interface over
// one fs::FileSystem. Node ids are the pool's inode numbers (the root is 1
// in both), so every request names its inode or its parent directory and
// one name: resolution costs one component, never the whole path. Every
// call goes to the core; this file only converts arguments and results
// (Status -> errno) and keeps the open handles and the kernel's lookup
// counts (which inodes the kernel knows, for invalidation).
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <memory>

#include "fs/file_system.h"

namespace mapfs::fuse {

// The state behind one mount: the core and every handle the kernel holds.
struct MountState;

// How long the kernel may keep names, the absence of names, and
// attributes (seconds; 0 = ask every time) and whether it keeps file pages
// across opens.
struct CachePolicy {
  double entry_timeout = 0;
  double negative_timeout = 0;
  double attr_timeout = 0;
  bool keep_cache = false;
};

// A new state over `fs` (owned from here on).
MountState* NewMountState(std::unique_ptr<fs::FileSystem> fs, const CachePolicy& cache);
// The session that serves the state (for notifications to the kernel).
void SetSession(MountState* s, struct fuse_session* se);
// Closes every handle the kernel did not release (a daemon stopped by a
// signal), unmounts the core cleanly and frees the state.
Status FinishMountState(MountState* s);

// The operation table; fuse_session_new's userdata must be the MountState.
const struct fuse_lowlevel_ops& Operations();

}  // namespace mapfs::fuse
