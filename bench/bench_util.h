// Shared pieces of `mapfs bench`: timing, repeat statistics, the result row
// every suite reports, the table printer and the JSON writer
// (../shared/BENCHMARKS.md defines the shape).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mapfs::bench {

uint64_t NowNs();
// CPU time of this process (all its threads), ns.
uint64_t ProcessCpuNs();

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
  uint64_t entries = 0;  // dir: files in the directory
  int threads = 0;       // concurrency: threads at once
  // overlay: the kernel file system whose directory the row ran on
  // (tmpfs | ext4 | xfs); empty in the other suites.
  std::string dir{};
  // overlay: the median CPU time of a repeat (this process's, or the
  // served child's, all threads), ns for `ops` operations; 0 = not measured.
  // Load on the machine does not stretch it as it does wall time; work the
  // kernel does in its own threads (writeback, the loop device) is not in it.
  double cpu_ns = 0;
};

// The ratios every table and JSON row carries: per-operation speed against
// the tmpfs (and floor) row of the same workload and parameters, > 1 meaning
// faster. 0 when the run has no such baseline row.
double RatioTo(const std::vector<Row>& rows, const Row& r, const std::string& base_fs);

// overlay rows: per-operation speed against the kernel on the same
// directory (the row whose fs is r.dir), in the same mode where there is
// one (sync rows against the kernel with O_DSYNC), else its posix row.
double RatioToKernel(const std::vector<Row>& rows, const Row& r);

// Prints the rows as a table: fs/mode, page, parameter, ops, seconds (the
// median repeat), ns/op, GB/s, the repeat spread (min/max ns/op), x tmpfs and x floor
// (x kernel instead of x floor when the rows name a directory: overlay).
void PrintRows(const std::vector<Row>& rows);

// A progress line on stderr when it is a terminal ("\r" overwritten, cleared
// by ProgressDone); nothing otherwise, so logs and CI stay clean.
void Progress(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void ProgressDone();

// The directory holding this program (bin/), where mapfs-ycsb, mapfs-tpcc
// and plot_results.py are found.
std::string BinDir();

// 'S' quoted for /bin/sh.
std::string ShellQuote(const std::string& s);

// Runs a shell command, returning its stdout (stderr passes through) and
// whether it exited 0.
bool RunCapture(const std::string& cmd, std::string* out);

// {"suite": ..., "machine": {...}, "results": [...]}
bool WriteJson(const std::string& path, const std::string& suite, const std::vector<Row>& rows);
std::string MachineDescription();

}  // namespace mapfs::bench
