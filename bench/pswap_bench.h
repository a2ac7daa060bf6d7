// `mapfs bench pswap`: ctFS Fig. 6 — swapping two ranges of N pages with
// pswap against copying the same bytes twice (what a redo log costs).
#pragma once

#include <cstdint>
#include <string>

namespace mapfs::bench {

struct PswapBenchOptions {
  std::string pool;          // pool file to create (deleted afterwards)
  std::string json;          // write results here when non-empty
  int repeat = 0;            // 0 = default (quick 2, else 5)
  bool quick = false;
  uint64_t max_pages = 262658;
};

// Runs the suite, prints the table; returns a process exit code.
int RunPswapBench(const PswapBenchOptions& opt);

}  // namespace mapfs::bench
