// The ways `mapfs bench overlay` reaches a directory (overlay_bench.h):
//
//   EngineTarget  an overlay engine (split or virtual) in this process,
//                 through its Engine interface (src/overlay/engine.h), as
//                 the shim drives it: the kernel opens, the engine adopts
//                 the descriptor and serves its bytes; names, stats and
//                 renames are the kernel's (stat corrected by FixStat).
//   Runner        one measured configuration (fs, mode, directory) that
//                 runs a workload when asked: LocalRunner over any Target
//                 of this process, RemoteRunner over a child process that
//                 runs under `mapfs run --overlay DIR` (the shim) and
//                 measures there with system calls (ServeOverlayBench), so
//                 the shim's rows are interleaved with the others.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "concurrency_bench.h"
#include "fs_targets.h"
#include "overlay/engine.h"

namespace mapfs::bench {

// An engine over `root` (the overlay's directory) in this process. Thread-
// safe: descriptors are kept in a map under a shared lock, each with the
// offset a sequential write continues at (the shim keeps it in its table).
class EngineTarget : public Target {
 public:
  // nullptr after saying why, when the engine does not open on `root`.
  static std::unique_ptr<EngineTarget> Open(const std::string& root, overlay::EngineKind kind, overlay::Mode mode,
                                            const std::string& name, const std::string& mode_name);
  int Open(const std::string& p, int flags, mode_t m) override;
  int Close(int fd) override;
  ssize_t Pwrite(int fd, const void* b, size_t n, off_t o) override;
  ssize_t Pread(int fd, void* b, size_t n, off_t o) override;
  ssize_t Write(int fd, const void* b, size_t n) override;
  int Stat(const std::string& p, struct stat* st) override;
  int Unlink(const std::string& p) override;
  int Rename(const std::string& a, const std::string& b) override;
  int Mkdir(const std::string& p) override;
  int Rmdir(const std::string& p) override;

 private:
  struct File {
    std::unique_ptr<overlay::OverlayFile> f;
    uint64_t offset = 0;  // sequential writes; one thread per descriptor
    bool append = false;
  };
  File* Find(int fd);
  std::string P(const std::string& p) const { return root_ + p; }
  std::string root_;
  bool virtual_ = false;
  std::unique_ptr<overlay::Engine> engine_;
  std::shared_mutex mu_;
  std::map<int, std::unique_ptr<File>> files_;
};

// What every runner of one suite run shares: the micro file size, its
// write buffer and random offsets, and the concurrency parameters. Made
// alike in the parent and in each served child from the same numbers.
struct OverlayParams {
  uint64_t size = 0;        // micro: bytes of the file
  uint64_t conc_ops = 0;    // concurrency: operations per thread
  uint64_t conc_bytes = 0;  // concurrency: the shared file's bytes
  std::vector<char> buf;
  std::vector<uint64_t> offs;
  void Prepare();  // buf and offs from size
};

// One measured configuration. Each call returns ns (or false/-1 after
// saying what failed); Micro and Shared also leave the CPU time the
// workload's process spent in last_cpu_ns (the served child's, for a
// RemoteRunner).
class Runner {
 public:
  virtual ~Runner() = default;
  virtual double Micro(const std::string& w) = 0;
  virtual bool Meta(uint64_t n, double ns[5]) = 0;
  virtual double Shared(size_t workload, int threads) = 0;  // index into ConcurrencyWorkloads()
  std::string fs, mode, dir;                                // the rows' fields
  double last_cpu_ns = 0;
};

class LocalRunner : public Runner {
 public:
  LocalRunner(std::unique_ptr<Target> t, const OverlayParams& p, std::string dir_name);
  double Micro(const std::string& w) override;
  bool Meta(uint64_t n, double ns[5]) override;
  double Shared(size_t workload, int threads) override;
  Target& target() { return *t_; }

 private:
  std::unique_ptr<Target> t_;
  const OverlayParams& p_;
};

// A child `mapfs run --overlay ROOT --engine E --mode M -- mapfs bench
// overlay --serve ROOT ...` spoken to over two pipes, one command a line.
class RemoteRunner : public Runner {
 public:
  ~RemoteRunner() override;
  // nullptr after saying why, when the child does not start or answer.
  static std::unique_ptr<RemoteRunner> Start(const std::string& root, const std::string& engine,
                                             const std::string& mode, const OverlayParams& p,
                                             const std::string& dir_name);
  double Micro(const std::string& w) override;
  bool Meta(uint64_t n, double ns[5]) override;
  double Shared(size_t workload, int threads) override;

 private:
  RemoteRunner() = default;
  // Sends `cmd`, reads the answer line "ok N..." into `out`; false on "err"
  // or a dead child.
  bool Ask(const std::string& cmd, std::vector<double>* out);
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string pending_;
};

// `mapfs bench overlay --serve ROOT`: the child's side, run under the shim:
// system calls on ROOT (SyscallTarget) answer the commands read on stdin
// until end of file. Returns the exit code.
int ServeOverlayBench(const std::string& root, const OverlayParams& p);

}  // namespace mapfs::bench
