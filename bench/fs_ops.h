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
#include <vector>

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

struct Target;

// One micro workload ("append", "swe", "sw", "sr", "rw", "rr") on the file
// "/micro.dat" of `t`: append and swe make it anew, the others need it of
// `size` bytes already. `buf` holds size/10 bytes (the 10-call workloads);
// `offs` are the 4 KiB-aligned offsets of rw and rr. Returns the ns the
// workload's calls took (opening and closing untimed), or -1 after saying
// what failed. The overlay suite reuses it.
double MicroRun(Target& t, const std::string& w, uint64_t size, char* buf, const std::vector<uint64_t>& offs);

// ctFS Table 3 on `t`: creates `n` files in "/meta" (open O_CREAT|O_EXCL +
// close), opens, stats, renames and unlinks each, in that order; ns[i] is
// the time of kMetaWorkloads[i] over the n files. False after saying what
// failed.
inline const char* const kMetaWorkloads[5] = {"create", "open", "stat", "rename", "unlink"};
bool MetaRun(Target& t, uint64_t n, double ns[5]);

}  // namespace mapfs::bench
