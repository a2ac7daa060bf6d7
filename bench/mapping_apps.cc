// `mapfs bench mapping` §4.8 (mapping_apps.h): filebench's fileserver and
// webproxy and YCSB on LevelDB, per file-mapping design and on tmpfs.
#include "mapping_apps.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

#include "common/units.h"
#include "filebench_workloads.h"
#include "fs_targets.h"
#include "mapfs/mapfs.h"
#include "mapping_target.h"
#include "ycsb_bench.h"

namespace mapfs::bench {
namespace {

// "tmpfs", then the designs (contiguous first).
std::vector<std::string> Targets() {
  std::vector<std::string> t = {"tmpfs"};
  for (const std::string& d : MappingDesigns()) t.push_back(d);
  return t;
}

// A fresh pool of one design (mkfs --files), removed when destroyed.
class DesignPool {
 public:
  explicit DesignPool(std::string path) : path_(std::move(path)) {}
  ~DesignPool() {
    if (fs_ != nullptr) (void)mapfs_unmount(fs_);
    if (made_) ::unlink(path_.c_str());
  }
  bool Make(const std::string& design, uint64_t bytes) {
    struct mapfs_mkfs_options mk {};
    mk.size = bytes;
    mk.page_size = 4096;
    mk.mode = MAPFS_MODE_SYNC;
    mk.files = design == "contiguous" ? nullptr : design.c_str();
    made_ = mapfs_mkfs(path_.c_str(), &mk) == 0;
    return Check(made_, ("mkfs --files " + design).c_str());
  }
  mapfs_t* Mount() {
    fs_ = mapfs_mount(path_.c_str(), nullptr);
    return Check(fs_ != nullptr, "mount") ? fs_ : nullptr;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  mapfs_t* fs_ = nullptr;
  bool made_ = false;
};

struct Cell {
  std::vector<double> wall, cpu;
  uint64_t ops = 0, bytes = 0;
};
// (workload, threads, target)
using CellKey = std::tuple<std::string, int, std::string>;

struct Apps {
  const MappingAppsOptions& o;
  std::string base;  // per-process prefix of pools and directories
  std::map<CellKey, Cell> cells;
  std::vector<std::string> order;  // workloads in the order run

  void Put(const std::string& w, int threads, const std::string& target, double wall, double cpu, uint64_t ops,
           uint64_t bytes) {
    Cell& c = cells[{w, threads, target}];
    c.wall.push_back(wall), c.cpu.push_back(cpu), c.ops = ops, c.bytes = bytes;
    if (std::find(order.begin(), order.end(), w) == order.end()) order.push_back(w);
  }

  // One filebench run on a fresh target: prepare (untimed), run, clean up.
  bool Filebench1(const std::string& target, const FilebenchSpec& spec) {
    std::unique_ptr<Target> t;
    DesignPool pool(base + ".pool");
    const std::string tmp = base + "-tmpfs";
    if (target == "tmpfs") {
      if (!Check(::mkdir(tmp.c_str(), 0700) == 0, "mkdir (tmpfs)")) return false;
      t = std::make_unique<SyscallTarget>(tmp);
    } else {
      // Room for the file set four times over: appends grow files, and a
      // block-mapped pool keeps 75 % of its data pages for the mapping area.
      const uint64_t bytes = std::max<uint64_t>(256 * MiB, AlignUp(spec.files * spec.mean_bytes * 4, 2 * MiB));
      mapfs_t* fs = pool.Make(target, bytes) ? pool.Mount() : nullptr;
      if (fs == nullptr) return false;
      t = std::make_unique<MapfsTarget>(fs, "sync");
    }
    Filebench fb(spec);
    FilebenchResult r;
    bool ok = fb.Prepare(*t) && fb.Run(*t, &r);
    fb.Cleanup(*t);
    if (target == "tmpfs") ::rmdir(tmp.c_str());
    if (!ok) return false;
    Put(spec.personality, spec.threads, target, r.wall_ns, r.cpu_ns, r.ops, r.bytes);
    return true;
  }

  // One YCSB run (fresh database) on tmpfs natively or under the shim on a
  // fresh pool of the design.
  bool Ycsb1(const std::string& target, const std::string& driver, uint64_t records,
             const std::vector<std::string>& phases) {
    std::string args = " " + std::to_string(records) + " " + std::to_string(records);
    for (const std::string& p : phases) args += " " + p;
    std::map<std::string, std::pair<uint64_t, double>> res;
    std::map<std::string, double> cpu;
    bool ok = false;
    if (target == "tmpfs") {
      const std::string tmp = base + "-ycsb";
      if (!Check(::mkdir(tmp.c_str(), 0700) == 0, "mkdir (ycsb)")) return false;
      ok = RunYcsbDriver(ShellQuote(driver) + " " + ShellQuote(tmp + "/db") + args, &res, &cpu);
      if (std::system(("rm -rf " + ShellQuote(tmp)).c_str()) != 0)
        std::fprintf(stderr, "mapfs bench mapping: cannot remove %s\n", tmp.c_str());
    } else {
      DesignPool pool(base + ".pool");
      // The database several times over (compactions write new tables
      // before old ones go). Pools far larger than the data cost HashFS
      // more than the others under the shim: its blocks scatter over the
      // whole area, and every process populates each 2 MiB chunk it first
      // touches (docs/MAPPING.md §4.8).
      if (!pool.Make(target, std::max<uint64_t>(256 * MiB, AlignUp(records * 6 * KiB, 2 * MiB) + 128 * MiB)))
        return false;
      const std::string mount = "/mapfs-bench-mapping";
      ok = RunYcsbDriver(ShellQuote(BinDir() + "/mapfs") + " run --pool " + ShellQuote(pool.path()) + " --mount " +
                             mount + " --mode sync -- " + ShellQuote(driver) + " " + mount + "/db" + args,
                         &res, &cpu);
    }
    if (!ok) return Check(false, ("ycsb on " + target).c_str());
    for (auto& [ph, v] : res) Put("ycsb-" + ph, 1, target, v.second, cpu[ph], v.first, v.first * 1024);
    return true;
  }

  void Print(int repeat) const {
    const std::vector<std::string> ts = Targets();
    std::printf("\n4.8 application workloads: operations/s (median of %d); (x) = throughput against contiguous "
                "files, > 1 is faster\n%-20s",
                repeat, "workload");
    for (const std::string& t : ts) std::printf(" %17s", t.c_str());
    std::printf("\n");
    for (const std::string& w : order)
      for (int threads : {1, 2}) {
        auto base_it = cells.find({w, threads, "contiguous"});
        if (cells.end() == base_it && cells.find({w, threads, "tmpfs"}) == cells.end()) continue;
        const double base_ops = base_it == cells.end() ? 0 : base_it->second.ops / (SpreadOf(base_it->second.wall).median / 1e9);
        std::string name = w + (w.rfind("ycsb", 0) == 0 ? "" : ", " + std::to_string(threads) + " thr");
        std::printf("%-20s", name.c_str());
        for (const std::string& t : ts) {
          auto it = cells.find({w, threads, t});
          char cell[40] = "-";
          if (it != cells.end()) {
            const double ops = it->second.ops / (SpreadOf(it->second.wall).median / 1e9);
            if (base_ops > 0 && t != "contiguous")
              std::snprintf(cell, sizeof cell, "%.0f (%.2fx)", ops, ops / base_ops);
            else
              std::snprintf(cell, sizeof cell, "%.0f", ops);
          }
          std::printf(" %17s", cell);
        }
        std::printf("\n");
      }
    std::printf("CPU time per operation, µs (the process's, all threads; YCSB: the driver's, under the shim; load "
                "does not stretch it as it does wall time)\n");
    for (const std::string& w : order) {
      const bool y = w.rfind("ycsb", 0) == 0;
      for (int threads : {1, 2}) {
        if (y && threads == 2) continue;
        std::printf("%-20s", (w + (y ? "" : ", " + std::to_string(threads) + " thr")).c_str());
        for (const std::string& t : ts) {
          auto it = cells.find({w, threads, t});
          char cell[40] = "-";
          if (it != cells.end() && it->second.ops)
            std::snprintf(cell, sizeof cell, "%.2f", SpreadOf(it->second.cpu).median / it->second.ops / 1e3);
          std::printf(" %17s", cell);
        }
        std::printf("\n");
      }
    }
  }
};

}  // namespace

bool RunMappingApps(const MappingAppsOptions& o, std::vector<Row>* rows) {
  Apps a{o, o.dir + "/mapfs-bench-mapping-apps-" + std::to_string(::getpid()), {}, {}};
  const uint64_t files = o.files ? o.files : o.quick ? 200 : 2000;
  const uint64_t loops = o.loops ? o.loops : o.quick ? 100 : 2000;
  const uint64_t records = o.records ? o.records : o.quick ? 2000 : 100000;
  const std::string driver = BinDir() + "/mapfs-ycsb";
  struct stat st;
  const bool ycsb = o.ycsb && ::stat(driver.c_str(), &st) == 0;
  if (o.ycsb && !ycsb)
    std::printf("4.8: no YCSB rows: %s not built (it needs LevelDB's headers: libleveldb-dev)\n", driver.c_str());
  std::vector<std::string> phases = {"load-a", "run-a", "run-c"};
  if (!o.quick) phases = {"load-a", "run-a", "run-b", "run-c", "run-f", "run-d"};
  std::printf("\n4.8: fileserver %llu files of mean 128 KiB in a tree of width 20, webproxy %llu files of mean "
              "16 KiB in one directory, %llu loops per thread; YCSB on LevelDB through the shim, %llu records of "
              "1 KiB, %llu operations per phase\n",
              static_cast<unsigned long long>(files), static_cast<unsigned long long>(files * 5 / 2),
              static_cast<unsigned long long>(loops), static_cast<unsigned long long>(records),
              static_cast<unsigned long long>(records));
  std::fflush(stdout);
  for (int r = 0; r < o.repeat; r++) {
    for (const char* personality : {"fileserver", "webproxy"})
      for (int threads : {1, 2})
        for (const std::string& t : Targets()) {
          Progress("mapping: repeat %d: 4.8 %s, %d thread(s), %s", r + 1, personality, threads, t.c_str());
          FilebenchSpec s = std::string(personality) == "fileserver" ? Fileserver(files, loops, threads)
                                                                     : Webproxy(files * 5 / 2, loops, threads);
          s.seed = 100 + static_cast<uint64_t>(r);
          if (!a.Filebench1(t, s)) return ProgressDone(), false;
        }
    if (ycsb)
      for (const std::string& t : Targets()) {
        Progress("mapping: repeat %d: 4.8 ycsb, %s", r + 1, t.c_str());
        if (!a.Ycsb1(t, driver, records, phases)) return ProgressDone(), false;
      }
  }
  ProgressDone();
  a.Print(o.repeat);
  for (const std::string& w : a.order)
    for (int threads : {1, 2})
      for (const std::string& t : Targets()) {
        auto it = a.cells.find({w, threads, t});
        if (it == a.cells.end()) continue;
        Row row;
        row.workload = "4.8-" + w;
        row.fs = t == "tmpfs" ? "tmpfs" : w.rfind("ycsb", 0) == 0 ? "mapfs-preload" : "mapfs";
        row.mode = t == "tmpfs" ? "-" : t;
        row.ops = it->second.ops, row.bytes = it->second.bytes;
        row.ns = SpreadOf(it->second.wall);
        row.threads = threads;
        row.cpu_ns = SpreadOf(it->second.cpu).median;
        rows->push_back(row);
      }
  return true;
}

}  // namespace mapfs::bench
