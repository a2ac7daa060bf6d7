// The FUSE mount's process: mounts the core, mounts DIR through libfuse,
// serves requests on many threads, and unmounts both cleanly on
// `mapfs umount`, SIGINT, SIGTERM or SIGHUP.
#pragma once

#include <string>

namespace mapfs::fuse {

struct MountOptions {
  std::string pool;
  std::string dir;
  int mode = -1;            // consistency mode (file::Mode), -1 = the pool's
  bool foreground = false;  // serve in this process instead of a daemon
  std::string fuse_opts;    // extra -o options for libfuse (comma-separated)
  // The kernel's default_permissions in front of the core's own checks
  // (docs/SECURITY.md, "The FUSE mount"); false: the core's alone.
  bool default_permissions = true;
};

// Returns the exit code (0 ok, 1 failure); prints its own messages. Without
// foreground, returns once the daemon serves DIR (or failed to).
int MountMain(const MountOptions& opt);

// Unmounts DIR and waits until the daemon that served it has unmounted the
// core (so the pool may be checked or mounted at once).
int UmountMain(const std::string& dir);

}  // namespace mapfs::fuse
