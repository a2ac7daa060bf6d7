// `mapfs bench overlay` (issue 15, docs/OVERLAY.md "Measured"): the
// overlay engines against the kernel on the same directory, for each
// backing file system — tmpfs (a directory under --dir), ext4 and XFS on
// loop devices (where mkfs and the mount work; MAPFS_BENCH_NO_EXT4=1 skips
// both) — and a mapfs pool through the C API as the reference. Per
// directory and consistency mode:
//
//   fs = tmpfs|ext4|xfs  the kernel's own path (system calls; in sync mode
//                        the file opened O_DSYNC, in strict O_SYNC, so the
//                        kernel gives the guarantee the engine's mode does)
//   split, virtual       the engines in this process, through their Engine
//                        interface (overlay_targets.h)
//   split-preload        the split engine through the shim: a child under
//                        `mapfs run --overlay DIR --mode M` measuring with
//                        system calls, interleaved with the others
//   virtual-preload      the same for the virtual engine, measured only
//                        where `mapfs run --engine virtual` is accepted
//   mapfs                a pool in --dir through the C API (dir "tmpfs")
//
// Workloads: micro (append, sw, sr, rw, rr: fs_ops.h), meta (create, open,
// stat, rename, unlink), MadFS Figs. 8-9 (shared-{uniform,zipf}-rR with
// 1/2/4 threads: concurrency_bench.h) and YCSB on LevelDB (ycsb_bench.h)
// on tmpfs and ext4 for the kernel and the shim. Workloads that write run
// in every mode of --mode; read-only ones and meta in the first mode only
// (the mode changes nothing there). Every row names its directory ("dir")
// and its speed against the kernel there ("x kernel").
#pragma once

#include <cstdint>
#include <string>

namespace mapfs::bench {

struct OverlayBenchOptions {
  std::string dir = "/dev/shm";  // the tmpfs directory, the loop images and the pool go here
  std::string json;
  std::string modes = "posix,sync";
  std::string threads = "1,2,4";
  uint64_t size = 0;     // micro file bytes; 0 = default (64 MiB; quick 4 MiB)
  uint64_t ops = 0;      // meta files and concurrency ops per thread; 0 = default
  uint64_t records = 0;  // YCSB records; 0 = default (50,000; quick 1,000)
  int repeat = 0;        // 0 = default (3; quick 1)
  bool quick = false;
};

int RunOverlayBench(const OverlayBenchOptions& o);

}  // namespace mapfs::bench
