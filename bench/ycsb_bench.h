// `mapfs bench ycsb`: LevelDB under YCSB-style workloads (ycsb_driver.cc),
// the same driver binary run natively on tmpfs, on ext4 (the loop-device
// baseline, where it mounts) and under the LD_PRELOAD shim on a fresh pool,
// alternating (tmpfs, ext4, mapfs, tmpfs, ...).
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace mapfs::bench
