// Shared pieces of `mapfs bench`: timing, repeat statistics, the result row
// every suite reports, the table printer and the JSON writer
// (../shared/BENCHMARKS.md defines the shape).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mapfs::bench {

uint64_t NowNs();

struct Spread {
  double min = 0, median = 0, max = 0;
};
Spread SpreadOf(std::vector<double> v);

struct Row {
  std::string workload;  // e.g. "pswap", "copy"
  std::string fs;        // floor | tmpfs | ext4 | mapfs | mapfs-preload
  std::string mode = "-";
  std::string page = "4k";
  uint64_t pages = 0;    // suite-specific size parameter (pswap: pages)
  uint64_t ops = 0;      // operations per repeat
  uint64_t bytes = 0;    // bytes moved per repeat
  Spread ns;             // per repeat, nanoseconds for `ops` operations
};

// {"suite": ..., "machine": {...}, "results": [...]}
bool WriteJson(const std::string& path, const std::string& suite, const std::vector<Row>& rows);
std::string MachineDescription();

}  // namespace mapfs::bench
