// `mapfs bench mapping` §4.8: application workloads per file-mapping
// design (HashFS paper §4.8, Figs. 12–14), each on a fresh pool made by
// mkfs --files DESIGN (contiguous, hashfs, cuckoo, extent, radix) and on
// tmpfs, interleaved within each repeat:
//   - filebench's fileserver and webproxy (filebench_workloads.h) through
//     the C API (tmpfs: system calls), 1 and 2 threads;
//   - YCSB on LevelDB (mapfs-ycsb, ycsb_driver.cc) through the LD_PRELOAD
//     shim (`mapfs run --pool POOL`; tmpfs: natively): Load A, Run A, Run C
//     (every phase but the E pair without --quick).
// Rows: workload "4.8-fileserver" / "4.8-webproxy" / "4.8-ycsb-PHASE", fs
// "mapfs" (C API), "mapfs-preload" (shim) or "tmpfs", mode the design
// ("-" for tmpfs), ops and wall ns per repeat, cpu_ns (the median process
// CPU time, all threads: this process's for filebench, the driver's per
// phase for YCSB; JSON cpu_ns_per_op).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_util.h"

namespace mapfs::bench {

struct MappingAppsOptions {
  std::string dir = "/dev/shm";  // where pools and the tmpfs directories go
  bool quick = false;
  int repeat = 1;
  uint64_t files = 0;    // fileserver entries; 0 = default (quick 200, else 2,000); webproxy 2.5x as many
  uint64_t loops = 0;    // filebench loops per thread; 0 = default (quick 100, else 2,000)
  uint64_t records = 0;  // YCSB records (= operations per run phase); 0 = default (quick 2,000, else 100,000)
  bool ycsb = true;
};

// Appends the rows; prints its own tables. False after saying what failed
// (a missing mapfs-ycsb is said and skipped, not a failure).
bool RunMappingApps(const MappingAppsOptions& o, std::vector<Row>* rows);

}  // namespace mapfs::bench
