// `mapfs bench dir`: CIB Table 1, the directory-size curve. For N files in
// one directory (10, 100, 1 K, 10 K, 50 K, 100 K; 1 M with --large) it times
// creating them in order, then opening each (lookup: open O_RDONLY + close),
// stat-ing each and unlinking each in a shuffled order, on tmpfs, ext4
// (where it can be mounted) and mapfs through the C API, interleaved per
// repeat. The per-operation cost as N grows shows whether lookups stay
// constant-time (target: 100 K within 1.5x of 1 K).
#pragma once

#include <cstdint>
#include <string>

namespace mapfs::bench {

struct DirBenchOptions {
  std::string dir = "/dev/shm";  // where the pool and the tmpfs directory go
  std::string json;
  std::string mode = "sync";     // mapfs consistency mode
  uint64_t max_entries = 0;      // 0 = default (quick 10 K, else 100 K)
  bool large = false;            // also 1 M entries
  int repeat = 0;                // 0 = default (quick 1, else 3)
  bool quick = false;
};

int RunDirBench(const DirBenchOptions& o);

}  // namespace mapfs::bench
