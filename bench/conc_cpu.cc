// conc_cpu: the two private-file workloads of `mapfs bench concurrency`
// (4 KiB appends to a file per thread; creates of empty files in a
// directory per thread) through the C API, timed by wall clock *and* by each
// thread's own CPU clock (CLOCK_THREAD_CPUTIME_ID).
//
// Why: on this project's shared 2-core machines the wall clock of a
// 2-thread run is mostly the wait for a core. The CPU time a thread spends
// per operation is close to load-proof; if 2 threads contend (a lock they
// spin on or sleep on, a cache line they pass back and forth) it rises
// above the 1-thread figure, and if they sleep on a lock, wall time rises
// while CPU time does not. Both are printed, with the number of voluntary
// context switches (getrusage), which counts the sleeps on a futex.
//
//   conc-cpu [--threads 1,2] [--ops N] [--runs R] [--pool DIR] [--tmpfs DIR]
//            [--only append|create]
//
// Output: one line per (workload, threads, target): wall ns/op (all threads'
// ops), CPU ns/op (mean over threads), voluntary context switches per op.
// Each figure is the best of R runs (the least disturbed). --tmpfs DIR also
// runs the same on the kernel's file system in DIR. Not a test.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mapfs/mapfs.h"

namespace {

uint64_t Clock(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

[[noreturn]] void Die(const char* what, const std::string& path) {
  std::fprintf(stderr, "conc_cpu: %s %s: %s (%s)\n", what, path.c_str(), std::strerror(errno), mapfs_last_error());
  std::exit(1);
}

// The calls of one target: mapfs through the C API, or the kernel.
struct Target {
  mapfs_t* fs = nullptr;  // null: the kernel, paths under `root`
  std::string root;
  int Open(const std::string& p, int flags) {
    return fs ? mapfs_open(fs, p.c_str(), flags, 0644) : ::open((root + p).c_str(), flags, 0644);
  }
  int Close(int fd) { return fs ? mapfs_close(fs, fd) : ::close(fd); }
  ssize_t Write(int fd, const void* b, size_t n) { return fs ? mapfs_write(fs, fd, b, n) : ::write(fd, b, n); }
  int Mkdir(const std::string& p) { return fs ? mapfs_mkdir(fs, p.c_str(), 0755) : ::mkdir((root + p).c_str(), 0755); }
  int Unlink(const std::string& p) { return fs ? mapfs_unlink(fs, p.c_str()) : ::unlink((root + p).c_str()); }
  int Rmdir(const std::string& p) { return fs ? mapfs_rmdir(fs, p.c_str()) : ::rmdir((root + p).c_str()); }
};

struct Figures {
  double wall = 0, cpu = 0, csw = 0;
};

// One run: `threads` threads, `ops` each, append (true) or create.
Figures RunOnce(Target& t, bool append, int threads, uint64_t ops) {
  std::vector<int> fds(threads, -1);
  for (int i = 0; i < threads; i++) {
    if (append) {
      fds[i] = t.Open("/t" + std::to_string(i), O_CREAT | O_TRUNC | O_WRONLY);
      if (fds[i] < 0) Die("open", "/t" + std::to_string(i));
    } else if (t.Mkdir("/d" + std::to_string(i)) != 0) {
      Die("mkdir", "/d" + std::to_string(i));
    }
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<uint64_t> cpu(threads), csw(threads);
  std::vector<std::thread> ws;
  for (int i = 0; i < threads; i++)
    ws.emplace_back([&, i] {
      std::vector<char> buf(4096, static_cast<char>('a' + i));
      std::vector<std::string> names;
      if (!append)
        for (uint64_t k = 0; k < ops; k++) names.push_back("/d" + std::to_string(i) + "/f" + std::to_string(k));
      ready++;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      rusage r0, r1;
      getrusage(RUSAGE_THREAD, &r0);
      uint64_t c0 = Clock(CLOCK_THREAD_CPUTIME_ID);
      for (uint64_t k = 0; k < ops; k++) {
        if (append) {
          if (t.Write(fds[i], buf.data(), buf.size()) != 4096) Die("append", "/t" + std::to_string(i));
        } else {
          int fd = t.Open(names[k], O_CREAT | O_EXCL | O_WRONLY);
          if (fd < 0 || t.Close(fd) != 0) Die("create", names[k]);
        }
      }
      cpu[i] = Clock(CLOCK_THREAD_CPUTIME_ID) - c0;
      getrusage(RUSAGE_THREAD, &r1);
      csw[i] = static_cast<uint64_t>(r1.ru_nvcsw - r0.ru_nvcsw);
    });
  while (ready.load() < threads) std::this_thread::yield();
  uint64_t w0 = Clock(CLOCK_MONOTONIC);
  go.store(true, std::memory_order_release);
  for (auto& th : ws) th.join();
  uint64_t w1 = Clock(CLOCK_MONOTONIC);
  for (int i = 0; i < threads; i++) {
    if (append) {
      t.Close(fds[i]);
      t.Unlink("/t" + std::to_string(i));
    } else {
      for (uint64_t k = 0; k < ops; k++) t.Unlink("/d" + std::to_string(i) + "/f" + std::to_string(k));
      t.Rmdir("/d" + std::to_string(i));
    }
  }
  Figures f;
  double all = static_cast<double>(ops) * threads;
  f.wall = static_cast<double>(w1 - w0) / all;
  for (int i = 0; i < threads; i++) f.cpu += static_cast<double>(cpu[i]) / all, f.csw += static_cast<double>(csw[i]) / all;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string threads = "1,2", pool_dir = "/dev/shm", tmpfs, only;
  uint64_t ops = 20000;
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--threads") threads = argv[i + 1];
    else if (a == "--ops") ops = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else if (a == "--pool") pool_dir = argv[i + 1];
    else if (a == "--tmpfs") tmpfs = argv[i + 1];
    else if (a == "--only") only = argv[i + 1];
    else return std::fprintf(stderr, "conc-cpu: unknown option %s\n", a.c_str()), 2;
  }
  std::vector<int> tcounts;
  for (size_t i = 0; i < threads.size();) {
    size_t j = threads.find(',', i);
    if (j == std::string::npos) j = threads.size();
    tcounts.push_back(std::max(1, std::atoi(threads.substr(i, j - i).c_str())));
    i = j + 1;
  }
  int max_t = *std::max_element(tcounts.begin(), tcounts.end());
  std::string pool = pool_dir + "/conc-cpu-" + std::to_string(::getpid()) + ".pool";
  mapfs_mkfs_options mk{};
  mk.size = std::max<uint64_t>(2ull * max_t * ops * 4096 + (512ull << 20), 1ull << 30);
  mk.page_size = 4096;
  if (mapfs_mkfs(pool.c_str(), &mk) != 0) Die("mkfs", pool);
  mapfs_t* fs = mapfs_mount(pool.c_str(), nullptr);
  if (fs == nullptr) Die("mount", pool);
  std::vector<Target> targets;
  targets.push_back(Target{fs, ""});
  if (!tmpfs.empty()) targets.push_back(Target{nullptr, tmpfs});
  std::printf("%-8s %3s %-6s %10s %10s %8s\n", "workload", "thr", "target", "wall ns", "cpu ns", "csw/op");
  for (bool append : {true, false})
    for (int t : tcounts) {
      if (!only.empty() && only != (append ? "append" : "create")) continue;
      std::vector<Figures> best(targets.size());
      for (int r = 0; r < runs; r++)
        for (size_t k = 0; k < targets.size(); k++) {  // interleaved
          Figures f = RunOnce(targets[k], append, t, ops);
          if (r == 0 || f.wall < best[k].wall) best[k].wall = f.wall;
          if (r == 0 || f.cpu < best[k].cpu) best[k].cpu = f.cpu;
          if (r == 0 || f.csw < best[k].csw) best[k].csw = f.csw;
        }
      for (size_t k = 0; k < targets.size(); k++)
        std::printf("%-8s %3d %-6s %10.0f %10.0f %8.3f\n", append ? "append" : "create", t,
                    targets[k].fs ? "mapfs" : "kernel", best[k].wall, best[k].cpu, best[k].csw);
    }
  mapfs_unmount(fs);
  ::unlink(pool.c_str());
  return 0;
}
