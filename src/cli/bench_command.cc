// `mapfs bench SUITE ...`: parses the options and runs one suite of bench/
// (../shared/BENCHMARKS.md), all of them (`bench all`), or the chart
// script over their JSON (`bench plot`).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "app_bench.h"
#include "bench_util.h"
#include "cli/commands.h"
#include "cli/parse.h"
#include "common/units.h"
#include "concurrency_bench.h"
#include "dir_bench.h"
#include "fs_ops.h"
#include "mapping_bench.h"
#include "overlay_bench.h"
#include "overlay_targets.h"
#include "mapfs/mapfs.h"
#include "pswap_bench.h"
#include "ycsb_bench.h"

namespace mapfs::cli {
namespace {

const char* const kUsage =
    "usage: mapfs bench SUITE [--quick] [--json FILE] [--repeat N] [--dir DIR] [--mode posix|sync|strict]\n"
    "  micro        [--size BYTES] [--mode posix,sync,strict] [--page 4k,2m] [--no-preload] [--fuse]\n"
    "  meta         [--ops FILES] [--no-preload] [--fuse]\n"
    "  dir          [--entries MAX] [--large]          (directory-size curve, CIB)\n"
    "  pswap        [--max-pages N] [--pool PATH]\n"
    "  concurrency  [--threads 1,2,4] [--ops PER-THREAD]\n"
    "  ycsb         [--records N] [--ops N]            (LevelDB, tmpfs vs the shim)\n"
    "  rocksdb      [--ops KEYS]                       (db_bench, tmpfs/ext4 vs the shim)\n"
    "  sqlite       [--ops TRANSACTIONS] [--journal wal,rollback]  (TPC-C-like mix, tmpfs/ext4 vs the shim)\n"
    "  fio          [--ops IOS]                        (psync 4 KiB random 50 % read/write)\n"
    "  mapping      [--size BYTES] [--layout-score S] [--util U] [--apps yes|no|only] [--records N] [--ops N]\n"
    "               (file mapping, every design: HashFS paper §4.1-4.8; --apps: the 4.8 application workloads,\n"
    "               --records its YCSB records, --ops its filebench loops per thread)\n"
    "  overlay      [--size BYTES] [--ops N] [--threads 1,2,4] [--records N] [--mode posix,sync]\n"
    "               (kernel vs the split and virtual engines on tmpfs, ext4, XFS; SplitFS, MadFS)\n"
    "  all          every suite above, one JSON with all of them (--json)\n"
    "  plot RESULTS.json... --out DIR                  PNG charts (python3-matplotlib)\n"
    "  (micro and meta also measure mapfs through the LD_PRELOAD shim by running\n"
    "  themselves under `mapfs run`; --no-preload skips that; --fuse adds mapfs\n"
    "  through a FUSE mount of a fresh pool. ext4 is measured where a loop device\n"
    "  can be mounted; MAPFS_BENCH_NO_EXT4=1 skips it.)\n";

const char* const kSuites[] = {"micro", "meta", "dir", "pswap", "concurrency", "ycsb", "rocksdb", "sqlite", "fio",
                               "mapping", "overlay"};

bool Positive(const Parsed& p, const char* flag, uint64_t min, uint64_t* out) {
  if (!p.Has(flag)) return true;
  auto n = ParseCount(*p.Get(flag));
  if (!n || *n < min) return std::fprintf(stderr, "mapfs bench: bad %s\n", flag), false;
  *out = *n;
  return true;
}

// `bench all`: each suite in a process of its own (micro and meta re-exec
// themselves under the shim), its JSON merged into one document.
int All(const Parsed& p, const std::vector<std::string>& args) {
  std::string tmp = "/tmp/mapfs-bench-all-" + std::to_string(::getpid());
  if (::mkdir(tmp.c_str(), 0700) != 0) return std::fprintf(stderr, "mapfs bench all: %s: %s\n", tmp.c_str(), std::strerror(errno)), 1;
  std::string pass;  // options handed to every suite
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i] == "--json") {
      i++;
      continue;
    }
    if (args[i] == "all" || args[i].rfind("--json=", 0) == 0) continue;
    pass += " " + bench::ShellQuote(args[i]);
  }
  std::vector<std::string> failed, docs;
  for (const char* s : kSuites) {
    std::string json = tmp + "/" + s + ".json";
    std::printf("\n==== mapfs bench %s\n", s);
    std::fflush(stdout);
    std::string cmd = bench::ShellQuote(bench::BinDir() + "/mapfs") + " bench " + s + pass + " --json " + bench::ShellQuote(json);
    // A suite that failed part of its runs (say, one file system) still
    // wrote its other rows: they are kept, and the suite is named as failed.
    bool ok = std::system(cmd.c_str()) == 0;
    std::ifstream in(json);
    if (!ok) failed.push_back(s);
    if (!in) continue;
    std::stringstream ss;
    ss << in.rdbuf();
    docs.push_back(ss.str());
  }
  int rc = failed.empty() ? 0 : 1;
  if (p.Has("--json")) {
    FILE* f = std::fopen(p.Get("--json")->c_str(), "w");
    if (f == nullptr) return std::fprintf(stderr, "mapfs bench all: cannot write %s\n", p.Get("--json")->c_str()), 1;
    std::fprintf(f, "{\"suite\": \"all\", \"machine\": {\"description\": \"%s\"}, \"suites\": [\n",
                 bench::MachineDescription().c_str());
    for (size_t i = 0; i < docs.size(); i++) std::fprintf(f, "%s%s", docs[i].c_str(), i + 1 < docs.size() ? ",\n" : "");
    std::fprintf(f, "]}\n");
    if (std::fclose(f) != 0) rc = 1;
  }
  if (std::system(("rm -rf " + bench::ShellQuote(tmp)).c_str()) != 0) rc = 1;
  std::printf("\nmapfs bench all: %zu of %zu suites ran without failure", std::size(kSuites) - failed.size(),
              std::size(kSuites));
  for (size_t i = 0; i < failed.size(); i++) std::printf("%s%s", i ? ", " : "; failed: ", failed[i].c_str());
  std::printf("\n");
  return rc;
}

// `bench plot`: Debian's python3 (with python3-matplotlib) runs the script.
int Plot(const Parsed& p) {
  if (p.pos.size() < 2 || !p.Has("--out")) return std::fprintf(stderr, "usage: mapfs bench plot RESULTS.json... --out DIR\n"), 2;
  std::string script = bench::BinDir() + "/mapfs-plot-results.py";
  struct stat st;
  const char* py = ::stat("/usr/bin/python3", &st) == 0 ? "/usr/bin/python3" : "python3";
  std::string cmd = std::string(py) + " " + bench::ShellQuote(script);
  for (size_t i = 1; i < p.pos.size(); i++) cmd += " " + bench::ShellQuote(p.pos[i]);
  cmd += " --out " + bench::ShellQuote(*p.Get("--out"));
  int rc = std::system(cmd.c_str());
  return rc == 0 ? 0 : 1;
}

// micro and meta: run again under the shim, on a pool of its own, so the
// shim's figures come from the same run as the others.
// `--fuse`: mounts a fresh sync-mode pool (as big as the suite's C API
// pool) on a directory of its own, runs the suite again as a child that
// measures the mount as one more file system ("mapfs-fuse", found through
// MAPFS_BENCH_FUSE), then unmounts, checks and removes the pool. The mount
// is made here, before the suite re-executes itself under the shim, so the
// daemon never runs with the shim loaded.
int WithFuseMount(const std::vector<std::string>& args, const bench::FsBenchOptions& o) {
  std::string base = o.dir + "/mapfs-bench-fuse-" + std::to_string(::getpid());
  std::string pool = base + ".pool", dir = base + ".mnt";
  uint64_t size = o.size ? o.size : o.quick ? 64ull << 20 : 1ull << 30;
  struct mapfs_mkfs_options mk {};
  mk.size = std::max<uint64_t>(3 * size + (512ull << 20), 1ull << 30);
  mk.page_size = 4096;
  mk.mode = MAPFS_MODE_SYNC;
  if (mapfs_mkfs(pool.c_str(), &mk) != 0)
    return std::fprintf(stderr, "mapfs bench --fuse: cannot make %s: %s\n", pool.c_str(), std::strerror(errno)), 1;
  std::string mapfs = bench::ShellQuote(bench::BinDir() + "/mapfs");
  int rc = 1;
  if (::mkdir(dir.c_str(), 0700) != 0) {
    std::fprintf(stderr, "mapfs bench --fuse: %s: %s\n", dir.c_str(), std::strerror(errno));
  } else if (std::system((mapfs + " mount " + bench::ShellQuote(pool) + " " + bench::ShellQuote(dir) + " --mode sync").c_str()) != 0) {
    std::fprintf(stderr, "mapfs bench --fuse: the pool could not be mounted (see above; FUSE needs /dev/fuse and root or fuse3's fusermount3)\n");
  } else {
    std::string cmd = "MAPFS_BENCH_FUSE=" + bench::ShellQuote(dir) + " " + mapfs + " bench";
    for (const std::string& a : args)
      if (a != "--fuse") cmd += " " + bench::ShellQuote(a);
    rc = std::system(cmd.c_str()) == 0 ? 0 : 1;
    if (std::system((mapfs + " umount " + bench::ShellQuote(dir)).c_str()) != 0) rc = 1;
    if (std::system((mapfs + " fsck " + bench::ShellQuote(pool) + " >/dev/null").c_str()) != 0) {
      std::fprintf(stderr, "mapfs bench --fuse: fsck of the mounted pool failed\n");
      rc = 1;
    }
  }
  ::rmdir(dir.c_str());
  ::unlink(pool.c_str());
  return rc;
}

int MicroOrMeta(const Parsed& p, const std::vector<std::string>& args, bench::FsBenchOptions& o) {
  if (p.Has("--fuse")) return WithFuseMount(args, o);
  if (const char* f = std::getenv("MAPFS_BENCH_FUSE")) o.fuse_root = f;
  if (std::getenv("MAPFS_BENCH_SHIM") != nullptr) {
    const char* m = std::getenv("MAPFS_MOUNT");
    o.preload_root = m ? m : "/mapfs";
  } else if (!p.Has("--no-preload")) {
    std::string pool = o.dir + "/mapfs-bench-shim-" + std::to_string(::getpid()) + ".pool";
    uint64_t size = o.size ? o.size : o.quick ? 64ull << 20 : 1ull << 30;
    struct mapfs_mkfs_options mk {};
    mk.size = std::max<uint64_t>(3 * size + (512ull << 20), 1ull << 30);
    mk.page_size = 4096;
    mk.mode = MAPFS_MODE_SYNC;
    if (mapfs_mkfs(pool.c_str(), &mk) != 0) {
      std::fprintf(stderr, "mapfs bench: cannot make %s: %s\n", pool.c_str(), std::strerror(errno));
      return 1;
    }
    ::setenv("MAPFS_BENCH_SHIM", "1", 1);
    std::vector<std::string> run = {"--pool", pool, "--mount", "/mapfs-bench", "--", "/proc/self/exe", "bench"};
    run.insert(run.end(), args.begin(), args.end());
    int rc = Run(run);  // returns only if it could not start
    ::unlink(pool.c_str());
    std::fprintf(stderr, "mapfs bench: the shim figures need build/lib/libmapfs-preload.so (or use --no-preload)\n");
    return rc;
  }
  return bench::RunFsBench(o);
}

}  // namespace

int Bench(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {"--json", "--repeat", "--pool", "--max-pages", "--size", "--ops", "--mode", "--dir",
                          "--records", "--threads", "--entries", "--out", "--journal", "--page", "--layout-score", "--util", "--apps",
                          "--serve", "--conc-bytes"},
                   {"--quick", "--no-preload", "--large", "--fuse"});
  std::string suite = p.pos.empty() ? "" : p.pos[0];
  bool known = suite == "all" || suite == "plot";
  for (const char* s : kSuites) known = known || suite == s;
  if (!p.error.empty() || !known || (suite != "plot" && p.pos.size() != 1)) {
    std::fprintf(stderr, "%s%s%s", kUsage, p.error.empty() ? "" : "mapfs bench: ", p.error.c_str());
    return 2;
  }
  if (suite == "plot") return Plot(p);
  if (suite == "all") return All(p, args);
  uint64_t repeat = 0, ops = 0;
  if (!Positive(p, "--repeat", 1, &repeat) || repeat > 1000 || !Positive(p, "--ops", 1, &ops)) return 2;
  std::string dir = p.Has("--dir") ? *p.Get("--dir") : "/dev/shm";
  std::string json = p.Has("--json") ? *p.Get("--json") : "";
  std::string mode = p.Has("--mode") ? *p.Get("--mode") : "sync";
  bool quick = p.Has("--quick");
  if (suite != "micro" && suite != "overlay" && mode != "posix" && mode != "sync" && mode != "strict")
    return std::fprintf(stderr, "mapfs bench: --mode must be posix, sync or strict\n"), 2;
  if (suite == "pswap") {
    bench::PswapBenchOptions o;
    o.pool = p.Has("--pool") ? *p.Get("--pool") : dir + "/mapfs-bench-" + std::to_string(::getpid()) + ".pool";
    o.json = json;
    o.quick = quick;
    o.repeat = static_cast<int>(repeat);
    if (!Positive(p, "--max-pages", 1, &o.max_pages)) return 2;
    return bench::RunPswapBench(o);
  }
  if (suite == "mapping") {
    bench::MappingBenchOptions mo;
    mo.dir = dir, mo.json = json, mo.quick = quick, mo.repeat = static_cast<int>(repeat);
    mo.ops = ops;
    if (!Positive(p, "--records", 10, &mo.records)) return 2;
    if (p.Has("--apps")) {
      mo.apps = *p.Get("--apps");
      if (mo.apps != "yes" && mo.apps != "no" && mo.apps != "only")
        return std::fprintf(stderr, "mapfs bench: --apps must be yes, no or only\n"), 2;
    }
    if (p.Has("--size")) {
      auto n = ParseSize(*p.Get("--size"));
      if (!n.ok()) return std::fprintf(stderr, "mapfs bench: bad --size\n"), 2;
      mo.size = *n;
    }
    char* end = nullptr;
    if (p.Has("--layout-score")) {
      mo.layout = std::strtod(p.Get("--layout-score")->c_str(), &end);
      if (!end || *end) return std::fprintf(stderr, "mapfs bench: bad --layout-score\n"), 2;
    }
    if (p.Has("--util")) {
      mo.util = std::strtod(p.Get("--util")->c_str(), &end);
      if (!end || *end) return std::fprintf(stderr, "mapfs bench: bad --util\n"), 2;
    }
    return bench::RunMappingBench(mo);
  }
  if (suite == "overlay") {
    bench::OverlayBenchOptions v;
    v.dir = dir, v.json = json, v.quick = quick, v.repeat = static_cast<int>(repeat), v.ops = ops;
    if (p.Has("--mode")) v.modes = mode;
    if (p.Has("--threads")) v.threads = *p.Get("--threads");
    if (!Positive(p, "--records", 10, &v.records)) return 2;
    if (p.Has("--size")) {
      auto n = ParseSize(*p.Get("--size"));
      if (!n.ok() || *n < 40960) return std::fprintf(stderr, "mapfs bench: --size must be at least 40K\n"), 2;
      v.size = *n;
    }
    if (p.Has("--serve")) {
      // The child of a RemoteRunner (bench/overlay_targets.h), under the shim.
      bench::OverlayParams sp;
      sp.size = v.size, sp.conc_ops = ops;
      if (!Positive(p, "--conc-bytes", 4096, &sp.conc_bytes) || !sp.size || !sp.conc_ops) return 2;
      sp.Prepare();
      return bench::ServeOverlayBench(*p.Get("--serve"), sp);
    }
    return bench::RunOverlayBench(v);
  }
  if (suite == "ycsb") {
    bench::YcsbBenchOptions y;
    y.dir = dir, y.json = json, y.mode = mode, y.quick = quick, y.repeat = static_cast<int>(repeat), y.ops = ops;
    if (!Positive(p, "--records", 10, &y.records) || (ops && ops < 10)) return std::fprintf(stderr, "mapfs bench: bad count\n"), 2;
    return bench::RunYcsbBench(y);
  }
  if (suite == "dir") {
    bench::DirBenchOptions d;
    d.dir = dir, d.json = json, d.mode = mode, d.quick = quick, d.repeat = static_cast<int>(repeat);
    d.large = p.Has("--large");
    if (!Positive(p, "--entries", 10, &d.max_entries)) return 2;
    return bench::RunDirBench(d);
  }
  if (suite == "concurrency") {
    bench::ConcurrencyBenchOptions c;
    c.dir = dir, c.json = json, c.mode = mode, c.quick = quick, c.repeat = static_cast<int>(repeat), c.ops = ops;
    if (p.Has("--threads")) c.threads = *p.Get("--threads");
    return bench::RunConcurrencyBench(c);
  }
  if (suite == "rocksdb" || suite == "sqlite" || suite == "fio") {
    bench::AppBenchOptions a;
    a.dir = dir, a.json = json, a.mode = mode, a.quick = quick, a.repeat = static_cast<int>(repeat), a.ops = ops;
    if (p.Has("--journal")) a.journals = *p.Get("--journal");
    return suite == "rocksdb" ? bench::RunRocksdbBench(a) : suite == "sqlite" ? bench::RunSqliteBench(a) : bench::RunFioBench(a);
  }
  bench::FsBenchOptions o;
  o.suite = suite;
  o.dir = dir, o.json = json, o.quick = quick, o.repeat = static_cast<int>(repeat), o.ops = ops;
  if (p.Has("--mode")) o.modes = mode;
  if (p.Has("--page")) o.pages = *p.Get("--page");
  if (o.pages.find("4k") == std::string::npos && o.pages.find("2m") == std::string::npos)
    return std::fprintf(stderr, "mapfs bench: --page takes 4k, 2m or 4k,2m\n"), 2;
  if (p.Has("--size")) {
    auto n = ParseSize(*p.Get("--size"));
    if (!n.ok() || *n < 40960) return std::fprintf(stderr, "mapfs bench: --size must be at least 40K\n"), 2;
    o.size = *n;
  }
  return MicroOrMeta(p, args, o);
}

}  // namespace mapfs::cli
