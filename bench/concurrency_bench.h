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
#include <vector>

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

// The workloads above, in the order the suite runs them (the overlay suite
// reuses the shared-file ones: MadFS Figs. 8-9).
struct ConcurrencyWorkload {
  std::string name;
  enum Kind { kAppend, kOverwrite, kCreatePrivate, kCreateShared, kShared } kind;
  bool zipf = false;
  int read_pct = 0;
};
std::vector<ConcurrencyWorkload> ConcurrencyWorkloads();

// One operation of a thread's prepared plan: a 4 KiB block and read/write.
struct ConcurrencyStep {
  uint64_t off;
  bool read;
};
// Per thread, its `ops` steps, drawn before timing from fixed seeds (the
// same plan in every process that asks for it).
using ConcurrencyPlans = std::vector<std::vector<ConcurrencyStep>>;
ConcurrencyPlans PlanConcurrency(const ConcurrencyWorkload& w, int threads, uint64_t ops, uint64_t file_bytes);

struct Target;
// Runs `w` with `threads` threads on `t` (files under "/c"; `file_bytes` a
// multiple of 256 KiB); returns wall ns or -1. The files a run makes are
// removed afterwards (untimed).
// With `cpu_ns`, also the process's CPU time over the timed part (the
// waiting threads spin on a yield loop before it, not during it).
double RunConcurrencyOnce(Target& t, const ConcurrencyWorkload& w, int threads, uint64_t ops, uint64_t file_bytes,
                          const ConcurrencyPlans& plans, double* cpu_ns = nullptr);

}  // namespace mapfs::bench
