// The FUSE front's operations: libfuse3's high-level (path) interface over
// one fs::FileSystem. Every call goes to the core; this file only converts
// arguments and results (Status -> -errno) and keeps the open handles.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse.h>

#include "fs/file_system.h"

namespace mapfs::fuse {

// The state behind one mount: the core and every handle the kernel holds.
struct MountState;

// A new state over `fs` (owned from here on).
MountState* NewMountState(std::unique_ptr<fs::FileSystem> fs);
// Closes every handle the kernel did not release (a daemon stopped by a
// signal), unmounts the core cleanly and frees the state.
Status FinishMountState(MountState* s);

// The operation table; fuse_new's private_data must be the MountState.
const struct fuse_operations& Operations();

}  // namespace mapfs::fuse
