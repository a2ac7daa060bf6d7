// `mapfs bench mapping`: the HashFS paper's §4 study (issue 14) in one run,
// every file-mapping design including contiguous files (ctFS partitions),
// each in a pool of its own made by mkfs and measured through the file
// layer (mapping_target.h says what "mapping" is for each):
//   4.1 locality: appends, warm and cold lookups, sequential and random;
//   4.2 layout score 1.0 / 0.85 / 0.7 (mkfs --layout-score aging);
//   4.3 file sizes 4 KiB / 4 MiB / --size (the paper's 4 GiB, scaled);
//   4.4 I/O sizes 4 KiB / 64 KiB / 1 MiB: whole reads and their mapping part;
//   4.5 utilisation 80 % / 95 %;
//   4.6 1, 2 and 4 threads (CPU clock per operation);
//   4.7 lookups with and without the cursor / translation cache;
//   space: bytes of mapping per GiB of data; truncation;
//   4.8 application workloads: filebench's fileserver and webproxy, YCSB
//       on LevelDB through the shim (mapping_apps.h), with tmpfs beside.
#pragma once

#include <cstdint>
#include <string>

namespace mapfs::bench {

struct MappingBenchOptions {
  std::string dir = "/dev/shm";  // where the pool files are made (and removed)
  std::string json;              // write results here when non-empty
  int repeat = 0;                // 0 = default (quick 1, else 3)
  bool quick = false;
  uint64_t size = 0;             // the large file; 0 = default (quick 16 MiB, else 256 MiB)
  double layout = 0.85;          // layout score of every experiment but 4.2
  double util = 0.7;             // utilisation of every experiment but 4.5
  // 4.8: "yes" (after 4.1-4.7), "no" (4.1-4.7 alone), "only" (4.8 alone).
  std::string apps = "yes";
  uint64_t records = 0;          // 4.8 YCSB records; 0 = default (mapping_apps.h)
  uint64_t ops = 0;              // 4.8 filebench loops per thread; 0 = default
};

int RunMappingBench(const MappingBenchOptions& opt);

}  // namespace mapfs::bench
