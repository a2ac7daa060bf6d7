// Filebench's fileserver and webproxy personalities (filebench is not
// packaged here), driven through the suite's Target (fs_targets.h), so the
// same flow runs on mapfs through its C API, on tmpfs through system calls,
// or on anything else a Target wraps. `mapfs bench mapping` runs them on
// every file-mapping design (HashFS paper §4.8, mapping_apps.h).
//
// As filebench defines them (workloads/fileserver.f, webproxy.f):
//   fileserver  a file set of `files` entries, mean size `mean_bytes` (gamma
//               distributed, shape 1.5: filebench's filesizegamma), in a
//               directory tree of mean width `width`; each thread loops
//               create + write the whole file + close, open + append
//               1..`append` bytes + close, open + read the whole file +
//               close, delete, stat: 11 operations a loop.
//   webproxy    a flat file set (width 0), mean 16 KiB; each loop: delete,
//               create + write the whole file + close, 5 x (open + read
//               the whole file + close), append 1..`append` bytes to the
//               thread's log file: 20 operations a loop.
// 80 % of the entries exist before the run (filebench's prealloc=80).
// Whole-file reads and writes go in calls of `io` bytes (filebench's
// iosize 1 MiB); an operation is one flowop, as filebench counts them (a
// whole-file read is one, however many calls it takes).
//
// Where this differs from filebench: a run is a fixed number of loops per
// thread, not a duration; each thread owns the entries i % threads == t
// (filebench locks an entry per flowop instead), so no two threads touch
// one file and no lock is needed in the driver.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fs_targets.h"

namespace mapfs::bench {

struct FilebenchSpec {
  std::string personality = "fileserver";  // or "webproxy"
  std::string root = "/filebench";         // the file set's directory on the target
  uint64_t files = 2000;
  uint64_t mean_bytes = 128 * 1024;
  uint64_t width = 20;         // mean files per directory; 0 = one flat directory
  uint64_t append = 16 * 1024;
  uint64_t io = 1024 * 1024;
  uint64_t loops = 1000;       // per thread
  int threads = 1;
  uint64_t seed = 1;
};

// The standard personalities scaled to `files` entries and `loops` loops.
FilebenchSpec Fileserver(uint64_t files, uint64_t loops, int threads);
FilebenchSpec Webproxy(uint64_t files, uint64_t loops, int threads);

struct FilebenchResult {
  uint64_t ops = 0;       // flowops done, all threads
  uint64_t bytes = 0;     // bytes read and written
  double wall_ns = 0;     // from the threads' start to the last one's end
  double cpu_ns = 0;      // this process's CPU time over the run (all threads, user + system)
};

// One file set on one target. Prepare, then any number of Runs (the file
// set's state carries over), then Cleanup.
class Filebench {
 public:
  explicit Filebench(FilebenchSpec s);

  // Makes the directories and the preallocated 80 % of the files, untimed.
  // False after saying what failed.
  bool Prepare(Target& t);
  // The personality's flow on `threads` threads, `loops` loops each.
  bool Run(Target& t, FilebenchResult* r);
  // Removes every file and directory the file set made (errors ignored).
  void Cleanup(Target& t);

  uint64_t ops_per_loop() const;
  const FilebenchSpec& spec() const { return s_; }

 private:
  struct Entry {
    uint64_t bytes = 0;   // the entry's size when written whole (drawn once, as filebench does)
    bool exists = false;  // touched by its owner thread only during Run
  };
  std::string Path(uint64_t i) const;
  std::string LogPath(int thread) const;
  std::vector<std::string> Dirs() const;
  bool WriteWhole(Target& t, const std::string& p, uint64_t bytes, const std::vector<char>& buf);
  bool ThreadRun(Target& t, int tid, uint64_t* ops, uint64_t* bytes);

  FilebenchSpec s_;
  std::vector<Entry> e_;
};

}  // namespace mapfs::bench
