// meta_cpu: namespace operations through the C API timed by the thread's
// own CPU clock (CLOCK_THREAD_CPUTIME_ID), which counts the thread's
// system calls and page faults but not the time it waits for a core.
//
// Why a second meta benchmark: this project's machines are shared (2 cores,
// load 5-10 from other builds), and `mapfs bench meta` measures wall clock,
// which at that load is mostly the wait for a core, for tmpfs as for mapfs.
// The CPU clock of one thread is close to load-proof (cache pollution by the
// neighbours remains), so it serves to compare two versions of libmapfs.so:
// build this program once and run it with LD_LIBRARY_PATH pointing at each
// library in turn, interleaved (scripts/meta_cpu_compare.sh does that).
//
//   meta_cpu [--files N] [--runs R] [--dir-sizes A,B] [--pool DIR] [--page 4k|2m]
//
// Phase "meta" (N files in one directory, each op over all N in a shuffled
// order): create (open O_CREAT|O_EXCL + close), open (existing, O_RDONLY,
// + close), stat, rename (to a new name in the same directory), unlink.
// Phase "dir" (one directory of each size in --dir-sizes): lookup
// (open + close) and stat over every entry, shuffled. Each figure is the
// best of R runs (the least disturbed), in ns per operation.
//
// Output: one line per figure, "op ns" (and "dir-lookup@N ns"), easy to
// join across runs. Not a test: nothing is asserted.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mapfs/mapfs.h"

namespace {

uint64_t CpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

[[noreturn]] void Die(const char* what, const std::string& path) {
  std::fprintf(stderr, "meta_cpu: %s %s: %s (%s)\n", what, path.c_str(), std::strerror(errno), mapfs_last_error());
  std::exit(1);
}

std::string Name(const char* dir, const char* stem, uint64_t i) {
  return std::string(dir) + "/" + stem + std::to_string(i);
}

std::vector<uint64_t> Shuffled(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> v(n);
  for (uint64_t i = 0; i < n; i++) v[i] = i;
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

// Runs fn(i) for each i of `order`; CPU ns per call.
template <typename Fn>
double Timed(const std::vector<uint64_t>& order, Fn fn) {
  uint64_t t0 = CpuNs();
  for (uint64_t i : order) fn(i);
  return static_cast<double>(CpuNs() - t0) / static_cast<double>(order.size());
}

// One operation each, never inlined: under valgrind --tool=callgrind their
// inclusive instruction counts divided by the number of calls are the
// instructions per operation (a count no load disturbs).
__attribute__((noinline)) void OpCreate(mapfs_t* fs, const std::string& p) {
  int fd = mapfs_open(fs, p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0) Die("create", p);
  mapfs_close(fs, fd);
}
__attribute__((noinline)) void OpOpen(mapfs_t* fs, const std::string& p) {
  int fd = mapfs_open(fs, p.c_str(), O_RDONLY);
  if (fd < 0) Die("open", p);
  mapfs_close(fs, fd);
}
__attribute__((noinline)) void OpStat(mapfs_t* fs, const std::string& p) {
  struct stat st;
  if (mapfs_stat(fs, p.c_str(), &st) != 0) Die("stat", p);
}
__attribute__((noinline)) void OpRename(mapfs_t* fs, const std::string& a, const std::string& b) {
  if (mapfs_rename(fs, a.c_str(), b.c_str()) != 0) Die("rename", a);
}
__attribute__((noinline)) void OpUnlink(mapfs_t* fs, const std::string& p) {
  if (mapfs_unlink(fs, p.c_str()) != 0) Die("unlink", p);
}

// One pass of the meta phase in directory `dir`; ns per op into out[5].
void MetaPass(mapfs_t* fs, const char* dir, uint64_t n, uint64_t seed, double out[5]) {
  if (mapfs_mkdir(fs, dir, 0755) != 0) Die("mkdir", dir);
  std::vector<uint64_t> order = Shuffled(n, seed);
  out[0] = Timed(order, [&](uint64_t i) { OpCreate(fs, Name(dir, "f", i)); });
  order = Shuffled(n, seed + 1);
  out[1] = Timed(order, [&](uint64_t i) { OpOpen(fs, Name(dir, "f", i)); });
  out[2] = Timed(order, [&](uint64_t i) { OpStat(fs, Name(dir, "f", i)); });
  order = Shuffled(n, seed + 2);
  out[3] = Timed(order, [&](uint64_t i) { OpRename(fs, Name(dir, "f", i), Name(dir, "g", i)); });
  order = Shuffled(n, seed + 3);
  out[4] = Timed(order, [&](uint64_t i) { OpUnlink(fs, Name(dir, "g", i)); });
  if (mapfs_rmdir(fs, dir) != 0) Die("rmdir", dir);
}

// Lookup and stat of every file of a directory of n, ns per op. A small
// directory is gone through several times (100,000 ops per figure for
// every size), so that each figure is as exposed to a disturbance.
void DirPass(mapfs_t* fs, const char* dir, uint64_t n, uint64_t seed, double out[2]) {
  std::vector<uint64_t> order;
  for (uint64_t k = 0; k < std::max<uint64_t>(1, 100000 / n); k++) {
    std::vector<uint64_t> o = Shuffled(n, seed + k);
    order.insert(order.end(), o.begin(), o.end());
  }
  out[0] = Timed(order, [&](uint64_t i) { OpOpen(fs, Name(dir, "file-", i)); });
  out[1] = Timed(order, [&](uint64_t i) { OpStat(fs, Name(dir, "file-", i)); });
}

void MakeDir(mapfs_t* fs, const char* dir, uint64_t n) {
  if (mapfs_mkdir(fs, dir, 0755) != 0) Die("mkdir", dir);
  for (uint64_t i = 0; i < n; i++) {
    std::string p = Name(dir, "file-", i);
    int fd = mapfs_open(fs, p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) Die("create", p);
    mapfs_close(fs, fd);
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t files = 20000;
  int runs = 3;
  std::vector<uint64_t> dir_sizes;
  std::string where = "/dev/shm";
  uint64_t page = 4096;  // --page 2m: a pool of 2 MiB pages (needs a huge=always tmpfs)
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--files" && v) files = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--runs" && v) runs = std::atoi(argv[++i]);
    else if (a == "--pool" && v) where = argv[++i];
    else if (a == "--page" && v) {
      std::string p = argv[++i];
      if (p == "4k" || p == "4K") page = 4096;
      else if (p == "2m" || p == "2M") page = 2ull << 20;
      else {
        std::fprintf(stderr, "meta_cpu: --page takes 4k or 2m\n");
        return 2;
      }
    }
    else if (a == "--dir-sizes" && v) {
      for (char* s = argv[++i]; *s;) {
        dir_sizes.push_back(std::strtoull(s, &s, 10));
        if (*s == ',') s++;
        else if (*s) break;
      }
    } else {
      std::fprintf(stderr, "usage: meta_cpu [--files N] [--runs R] [--dir-sizes A,B] [--pool DIR] [--page 4k|2m]\n");
      return 2;
    }
  }
  if (files == 0 || runs < 1) return 2;
  uint64_t biggest = files;
  for (uint64_t n : dir_sizes) biggest = std::max(biggest, n);
  std::string pool = where + "/mapfs-meta-cpu-" + std::to_string(::getpid()) + ".pool";
  struct mapfs_mkfs_options mk {};
  mk.size = std::max<uint64_t>(biggest * 2 * 4096 + (512ull << 20), 1ull << 30);
  mk.page_size = page;
  mk.mode = MAPFS_MODE_SYNC;
  if (mapfs_mkfs(pool.c_str(), &mk) != 0) Die("mkfs", pool);
  mapfs_t* fs = mapfs_mount(pool.c_str(), nullptr);
  if (fs == nullptr) {
    ::unlink(pool.c_str());
    Die("mount", pool);
  }

  static const char* const kOps[] = {"create", "open", "stat", "rename", "unlink"};
  double best[5] = {1e300, 1e300, 1e300, 1e300, 1e300};
  for (int r = 0; r < runs; r++) {
    double ns[5];
    std::string dir = "/m" + std::to_string(r);
    MetaPass(fs, dir.c_str(), files, 1000u * static_cast<unsigned>(r), ns);
    for (int k = 0; k < 5; k++) best[k] = std::min(best[k], ns[k]);
  }
  for (int k = 0; k < 5; k++) std::printf("%s %.0f\n", kOps[k], best[k]);

  // Dir phase: all directories exist first, then the runs alternate
  // between them, so a disturbance hits both sizes alike.
  std::vector<std::string> dirs;
  for (uint64_t n : dir_sizes) {
    dirs.push_back("/d" + std::to_string(n));
    MakeDir(fs, dirs.back().c_str(), n);
  }
  std::vector<double> lookup(dir_sizes.size(), 1e300), stat_ns(dir_sizes.size(), 1e300);
  for (int r = 0; r < runs; r++)
    for (size_t k = 0; k < dir_sizes.size(); k++) {
      double ns[2];
      DirPass(fs, dirs[k].c_str(), dir_sizes[k], 77u + static_cast<unsigned>(r), ns);
      lookup[k] = std::min(lookup[k], ns[0]);
      stat_ns[k] = std::min(stat_ns[k], ns[1]);
    }
  for (size_t k = 0; k < dir_sizes.size(); k++) {
    std::printf("dir-lookup@%llu %.0f\n", static_cast<unsigned long long>(dir_sizes[k]), lookup[k]);
    std::printf("dir-stat@%llu %.0f\n", static_cast<unsigned long long>(dir_sizes[k]), stat_ns[k]);
  }
  mapfs_unmount(fs);
  ::unlink(pool.c_str());
  return 0;
}
