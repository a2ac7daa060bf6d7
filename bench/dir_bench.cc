#include "dir_bench.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "bench_util.h"
#include "common/units.h"
#include "ext4_baseline.h"
#include "fs_targets.h"

namespace mapfs::bench {
namespace {

const char* const kPhases[] = {"dir-create", "dir-lookup", "dir-stat", "dir-delete"};

std::string Name(uint64_t n, uint64_t i) { return "/d" + std::to_string(n) + "/file-" + std::to_string(i); }

// One pass over a directory of n files on `t`; ns per phase into `ns`.
bool OnePass(Target& t, uint64_t n, const std::vector<uint64_t>& order, double ns[4]) {
  std::string d = "/d" + std::to_string(n);
  if (!Check(t.Mkdir(d) == 0, "mkdir")) return false;
  struct stat st;
  uint64_t t0 = NowNs();
  for (uint64_t i = 0; i < n; i++) {
    int fd = t.Open(Name(n, i), O_CREAT | O_EXCL | O_WRONLY);
    if (!Check(fd >= 0, "create")) return false;
    t.Close(fd);
  }
  uint64_t t1 = NowNs();
  for (uint64_t i : order) {
    int fd = t.Open(Name(n, i), O_RDONLY);
    if (!Check(fd >= 0, "lookup")) return false;
    t.Close(fd);
  }
  uint64_t t2 = NowNs();
  for (uint64_t i : order)
    if (!Check(t.Stat(Name(n, i), &st) == 0, "stat")) return false;
  uint64_t t3 = NowNs();
  for (uint64_t i : order)
    if (!Check(t.Unlink(Name(n, i)) == 0, "unlink")) return false;
  uint64_t t4 = NowNs();
  if (!Check(t.Rmdir(d) == 0, "rmdir")) return false;
  uint64_t ts[] = {t0, t1, t2, t3, t4};
  for (int p = 0; p < 4; p++) ns[p] = static_cast<double>(ts[p + 1] - ts[p]);
  return true;
}

}  // namespace

int RunDirBench(const DirBenchOptions& opt) {
  const DirBenchOptions& o = opt;
  uint64_t max_n = o.max_entries ? o.max_entries : o.large ? 1000000 : o.quick ? 10000 : 100000;
  int repeat = o.repeat ? o.repeat : o.quick ? 1 : 3;
  std::vector<uint64_t> sizes;
  for (uint64_t n : {10ull, 100ull, 1000ull, 10000ull, 50000ull, 100000ull, 1000000ull})
    if (n <= max_n) sizes.push_back(n);
  if (sizes.empty() || sizes.back() != max_n) sizes.push_back(max_n);

  std::string tag = std::to_string(::getpid());
  std::string pool = o.dir + "/mapfs-bench-dir-" + tag + ".pool";
  std::string tdir = o.dir + "/mapfs-bench-dir-tmpfs-" + tag;
  struct mapfs_mkfs_options mk {};
  mk.size = std::max<uint64_t>(max_n * 4096, 1 * GiB);
  mk.page_size = 4096;
  mk.mode = o.mode == "posix" ? MAPFS_MODE_POSIX : o.mode == "strict" ? MAPFS_MODE_STRICT : MAPFS_MODE_SYNC;
  if (!Check(mapfs_mkfs(pool.c_str(), &mk) == 0, "mkfs")) return 1;
  mapfs_t* fs = mapfs_mount(pool.c_str(), nullptr);
  if (fs == nullptr) {
    ::unlink(pool.c_str());
    return Check(false, "mount"), 1;
  }
  ::mkdir(tdir.c_str(), 0700);
  std::printf("mapfs bench dir; %s\n", MachineDescription().c_str());
  Ext4Baseline ext4_mount;
  std::vector<std::unique_ptr<Target>> targets;
  targets.push_back(std::make_unique<SyscallTarget>(tdir));
  if (MountExt4OrSay(ext4_mount, std::max<uint64_t>(max_n * 8192, 512 * MiB), max_n, o.dir))
    targets.push_back(std::make_unique<SyscallTarget>(ext4_mount.dir(), "ext4"));
  targets.push_back(std::make_unique<MapfsTarget>(fs, o.mode));
  std::printf("\ndir: N empty files in one directory; create in order, then lookup (open+close), stat and\n"
              "unlink each in a shuffled order; median of %d\n", repeat);

  std::vector<Row> rows;
  int rc = 0;
  for (uint64_t n : sizes) {
    std::vector<uint64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(n));
    std::vector<std::vector<double>> ns(targets.size() * 4);
    for (int r = 0; r < repeat && rc == 0; r++)
      for (size_t k = 0; k < targets.size() && rc == 0; k++) {
        Progress("dir %llu entries, %s, repeat %d of %d", static_cast<unsigned long long>(n),
                 targets[k]->name.c_str(), r + 1, repeat);
        double t[4];
        if (!OnePass(*targets[k], n, order, t)) rc = 1;
        for (int p = 0; p < 4 && rc == 0; p++) ns[k * 4 + p].push_back(t[p]);
      }
    if (rc != 0) break;
    for (int p = 0; p < 4; p++)
      for (size_t k = 0; k < targets.size(); k++) {
        Row row{kPhases[p], targets[k]->name, targets[k]->mode, "4k", 0, n, 0, SpreadOf(ns[k * 4 + p])};
        row.entries = n;
        rows.push_back(row);
      }
  }
  ProgressDone();
  if (rc == 0) {
    PrintRows(rows);
    // The curve's summary: per-op cost at the largest N against 1 K.
    std::printf("\nper-op cost at %llu entries / at 1,000 (target <= 1.5x):\n", static_cast<unsigned long long>(max_n));
    for (const char* ph : kPhases)
      for (auto& t : targets) {
        double small = 0, big = 0;
        for (const Row& r : rows)
          if (r.workload == ph && r.fs == t->name) {
            if (r.entries == 1000) small = r.ns.median / static_cast<double>(r.ops);
            if (r.entries == max_n) big = r.ns.median / static_cast<double>(r.ops);
          }
        if (small > 0 && big > 0) std::printf("  %-11s %-8s %.2fx\n", ph, t->name.c_str(), big / small);
      }
  }
  targets.clear();
  mapfs_unmount(fs);
  ::unlink(pool.c_str());
  if (std::system(("rm -rf " + ShellQuote(tdir)).c_str()) != 0) std::fprintf(stderr, "mapfs bench: cannot remove %s\n", tdir.c_str());
  if (rc == 0 && !o.json.empty() && !WriteJson(o.json, "dir", rows)) {
    std::fprintf(stderr, "mapfs bench dir: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return rc;
}

}  // namespace mapfs::bench
