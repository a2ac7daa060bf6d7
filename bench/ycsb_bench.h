// `mapfs bench ycsb`: LevelDB under YCSB-style workloads (ycsb_driver.cc),
// the same driver binary run natively on tmpfs, on ext4 (the loop-device
// baseline, where it mounts) and under the LD_PRELOAD shim on a fresh pool,
// alternating (tmpfs, ext4, mapfs, tmpfs, ...).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace mapfs::bench {

struct YcsbBenchOptions {
  std::string dir = "/dev/shm";  // where the pool and the tmpfs database go
  std::string json;
  std::string mode = "sync";     // mapfs consistency mode
  uint64_t records = 0;          // 0 = default (quick: 20,000; else 200,000)
  uint64_t ops = 0;              // per run phase; 0 = records
  int repeat = 0;                // 0 = default (quick 1, else 2)
  bool quick = false;
};

int RunYcsbBench(const YcsbBenchOptions& o);

// The driver's phases, in the order it runs them (the rows' workloads).
inline const char* const kYcsbPhases[] = {"load-a", "run-a", "run-b", "run-c", "run-f", "run-d", "load-e", "run-e"};
// Runs `cmd` (a shell command line ending in `mapfs-ycsb DB RECORDS OPS`)
// and parses its "PHASE OPS NS CPU-NS" lines into per-phase (ops, ns) and,
// when `cpu` is given, per-phase CPU ns; false if it exited non-zero. The
// overlay and mapping suites reuse it.
bool RunYcsbDriver(const std::string& cmd, std::map<std::string, std::pair<uint64_t, double>>* out,
                   std::map<std::string, double>* cpu = nullptr);

}  // namespace mapfs::bench
