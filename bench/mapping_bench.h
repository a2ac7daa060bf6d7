// `mapfs bench mapping`: the block mappers of src/map measured directly
// (HashFS paper §4.1 first; the rest of the study is not built yet, see
// docs/MAPPING.md): append cost, warm and cold lookup latency for
// sequential and random access, truncation, and bytes of mapping per GiB,
// for one file of --size bytes in a mapping area of its own per design.
#pragma once

#include <cstdint>
#include <string>

namespace mapfs::bench {

struct MappingBenchOptions {
  std::string dir = "/dev/shm";  // where the pool file is made (and removed)
  std::string json;              // write results here when non-empty
  int repeat = 0;                // 0 = default (quick 1, else 3)
  bool quick = false;
  uint64_t size = 0;             // file bytes; 0 = default (quick 32 MiB, else 256 MiB)
  double layout = 0.85;          // layout score: share of the file's blocks that follow the previous one
  double util = 0.6;             // share of the block area in use once the file is written
};

int RunMappingBench(const MappingBenchOptions& opt);

}  // namespace mapfs::bench
