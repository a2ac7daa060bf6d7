// `mapfs bench concurrency`: MadFS Figs. 8-9 and the scaling of namespace
// operations. T threads (1, 2, 4 by default; this machine has 2 cores, so
// 4 threads show oversubscription, not more parallelism) of one process on
// one file system:
//
//   append-private     each thread appends 4 KiB blocks to a file of its own
//   overwrite-private  each thread pwrites 4 KiB at random offsets of its own file
//   create-private-dir each thread creates empty files in a directory of its own
//   create-shared-dir  all threads create empty files in one directory
//   shared-U-rR        4 KiB pread/pwrite on one shared file, offsets uniform
//                      (U = uniform) or Zipfian with theta 0.9 (U = zipf), R %
//                      reads (0, 50, 95, 100)
//
// on tmpfs, ext4 (where it mounts) and mapfs through the C API, interleaved.
// A row's ops are all threads' operations; ns/op is wall time over them
// (lower is more throughput).
#pragma once

#include <cstdint>
#include <string>

namespace mapfs::bench {

struct ConcurrencyBenchOptions {
  std::string dir = "/dev/shm";
  std::string json;
  std::string mode = "sync";
  std::string threads = "1,2,4";
  uint64_t ops = 0;  // per thread; 0 = default (quick 2,000, else 20,000)
  int repeat = 0;    // 0 = default (quick 1, else 3)
  bool quick = false;
};

int RunConcurrencyBench(const ConcurrencyBenchOptions& o);

}  // namespace mapfs::bench
