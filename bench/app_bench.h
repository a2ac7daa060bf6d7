// The application suites: real programs run once per file system, the same
// binary each time, alternating (tmpfs, ext4, mapfs, tmpfs, ...):
//
//   rocksdb  Debian's db_bench (rocksdb-tools): fillrandom, readrandom,
//            updaterandom, with and without the WAL (ctFS Fig. 13)
//   sqlite   mapfs-tpcc (tpcc_driver.cc): a TPC-C-like mix on SQLite in WAL
//            and rollback-journal modes (MadFS, SplitFS)
//   fio      fio's psync engine, 4 KiB random reads/writes 50 % (SplitFS),
//            then a write pass with crc32c verification
//
// On mapfs they run under the LD_PRELOAD shim (`mapfs run`) on a fresh pool:
// fs "mapfs-preload". ext4 is the loop-device baseline where it mounts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ext4_baseline.h"

namespace mapfs::bench {

struct AppBenchOptions {
  std::string dir = "/dev/shm";  // where the pool, the tmpfs data and the ext4 image go
  std::string json;
  std::string mode = "sync";     // mapfs consistency mode
  uint64_t ops = 0;              // suite-specific count (0 = default)
  int repeat = 0;                // 0 = default (quick 1, else 3)
  bool quick = false;
  std::string journals = "wal,rollback";  // sqlite: the journal modes to run
};

int RunRocksdbBench(const AppBenchOptions& o);
int RunSqliteBench(const AppBenchOptions& o);
int RunFioBench(const AppBenchOptions& o);

// One file system an application runs on: its data directory and the
// command prefix that runs a program there ("" or `mapfs run ... --`).
struct AppFs {
  std::string name, mode, dir, prefix;
};

// Makes the tmpfs directory, the ext4 mount (or says why not) and the mapfs
// pool for one suite, and removes them all when destroyed.
class AppFixture {
 public:
  AppFixture() = default;
  AppFixture(const AppFixture&) = delete;
  AppFixture& operator=(const AppFixture&) = delete;
  ~AppFixture();
  // False (after printing why) when the pool cannot be made.
  bool Setup(const std::string& suite, const AppBenchOptions& o, uint64_t bytes);
  const std::vector<AppFs>& fs() const { return fs_; }

 private:
  std::string pool_, tmpfs_dir_;
  Ext4Baseline ext4_;
  std::vector<AppFs> fs_;
};

}  // namespace mapfs::bench
