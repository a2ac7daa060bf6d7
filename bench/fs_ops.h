// The file-system benchmarks that drive whole file systems through their
// POSIX-shaped calls: mapfs through its C API and (when run under the
// shim) through system calls the shim serves, or through a FUSE mount,
// tmpfs through system calls,
// and the physical floor (the same bytes moved with the raw primitives on a
// mapped file). Every result is measured in the same run, interleaved
// (A B A B ...), as ../shared/BENCHMARKS.md asks.
//
//   micro: ctFS §2 — append, rw, rr (4 KiB) and sw, sr, swe (10 calls)
//   meta:  ctFS Table 3 — create, open, stat, rename, unlink
#pragma once

#include <cstdint>
#include <string>

namespace mapfs::bench {

struct FsBenchOptions {
  std::string suite;     // "micro" or "meta"
  std::string dir;       // where pools and the tmpfs files go (/dev/shm)
  std::string json;
  std::string modes = "sync,strict";  // mapfs modes to run (micro)
  std::string pages = "4k,2m";        // mapfs pool page sizes to run (micro)
  uint64_t size = 0;     // micro: bytes per file (0 = default)
  uint64_t ops = 0;      // meta: files (0 = default)
  int repeat = 0;        // 0 = default
  bool quick = false;
  // Non-empty when this process runs under the LD_PRELOAD shim: the mount
  // prefix under which a "mapfs-preload" target is measured too.
  std::string preload_root;
  // Non-empty with `--fuse`: the directory where a pool is mounted through
  // FUSE, measured as "mapfs-fuse".
  std::string fuse_root;
};

int RunFsBench(const FsBenchOptions& opt);

}  // namespace mapfs::bench
