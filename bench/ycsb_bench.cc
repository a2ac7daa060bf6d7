#include "ycsb_bench.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mapfs/mapfs.h"

namespace mapfs::bench {
namespace {

const char* const kPhases[] = {"load-a", "run-a", "run-b", "run-c", "run-f", "run-d", "load-e", "run-e"};

std::string SelfDir() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return ".";
  exe[n] = '\0';
  std::string s(exe);
  return s.substr(0, s.rfind('/'));
}

// Runs `cmd`, parses "PHASE OPS NS" lines into per-phase (ops, ns).
bool RunDriver(const std::string& cmd, std::map<std::string, std::pair<uint64_t, double>>* out) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  char line[256];
  while (std::fgets(line, sizeof line, p)) {
    char ph[32];
    unsigned long long ops = 0;
    long long ns = 0;
    if (std::sscanf(line, "%31s %llu %lld", ph, &ops, &ns) == 3) (*out)[ph] = {ops, static_cast<double>(ns)};
  }
  return ::pclose(p) == 0;
}

}  // namespace

int RunYcsbBench(const YcsbBenchOptions& opt) {
  YcsbBenchOptions o = opt;
  uint64_t records = o.records ? o.records : o.quick ? 20000 : 200000;
  uint64_t ops = o.ops ? o.ops : records;
  int repeat = o.repeat ? o.repeat : o.quick ? 1 : 2;
  std::string bin = SelfDir();
  std::string driver = bin + "/mapfs-ycsb";
  struct stat st;
  if (::stat(driver.c_str(), &st) != 0) {
    std::fprintf(stderr, "mapfs bench ycsb: %s not found (built when LevelDB's headers are installed: libleveldb-dev)\n",
                 driver.c_str());
    return 1;
  }
  std::string tag = std::to_string(::getpid());
  std::string pool = o.dir + "/mapfs-bench-ycsb-" + tag + ".pool";
  std::string tdir = o.dir + "/mapfs-bench-ycsb-tmpfs-" + tag;
  struct mapfs_mkfs_options mk {};
  mk.size = std::max<uint64_t>(records * 1024 * 8 + (1ull << 30), 2ull << 30);
  mk.page_size = 4096;
  mk.mode = o.mode == "posix" ? MAPFS_MODE_POSIX : o.mode == "strict" ? MAPFS_MODE_STRICT : MAPFS_MODE_SYNC;
  if (mapfs_mkfs(pool.c_str(), &mk) != 0) {
    std::fprintf(stderr, "mapfs bench ycsb: mkfs %s: %s\n", pool.c_str(), mapfs_last_error());
    return 1;
  }
  ::mkdir(tdir.c_str(), 0700);
  std::printf("mapfs bench ycsb; %s\n", MachineDescription().c_str());
  std::printf("\nycsb: LevelDB, %llu records of 1 KiB, %llu operations per run phase, %d repeat(s), mapfs mode %s\n",
              static_cast<unsigned long long>(records), static_cast<unsigned long long>(ops), repeat, o.mode.c_str());
  std::string args = " " + std::to_string(records) + " " + std::to_string(ops);
  std::string tcmd = "'" + driver + "' '" + tdir + "/db'" + args;
  std::string mcmd = "'" + bin + "/mapfs' run --pool '" + pool + "' --mount /mapfs-ycsb --mode " + o.mode + " -- '" +
                     driver + "' /mapfs-ycsb/db" + args;
  std::map<std::string, std::vector<double>> tns, mns;
  std::map<std::string, uint64_t> nops;
  int rc = 0;
  for (int r = 0; r < repeat && rc == 0; r++) {
    std::map<std::string, std::pair<uint64_t, double>> a, b;
    if (!RunDriver(tcmd, &a)) std::fprintf(stderr, "mapfs bench ycsb: the tmpfs run failed\n"), rc = 1;
    if (rc == 0 && !RunDriver(mcmd, &b)) std::fprintf(stderr, "mapfs bench ycsb: the mapfs run failed\n"), rc = 1;
    for (auto& [ph, v] : a) tns[ph].push_back(v.second), nops[ph] = v.first;
    for (auto& [ph, v] : b) mns[ph].push_back(v.second);
  }
  std::vector<Row> rows;
  if (rc == 0) {
    std::printf("%-8s %14s %14s %10s\n", "phase", "tmpfs ns/op", "mapfs ns/op", "x tmpfs");
    for (const char* ph : kPhases) {
      if (!tns.count(ph) || !mns.count(ph)) continue;
      Spread a = SpreadOf(tns[ph]), b = SpreadOf(mns[ph]);
      double n = static_cast<double>(nops[ph]);
      std::printf("%-8s %14.0f %14.0f %9.2fx\n", ph, a.median / n, b.median / n, a.median / b.median);
      rows.push_back({ph, "tmpfs", "-", "4k", 0, nops[ph], 0, a});
      rows.push_back({ph, "mapfs-preload", o.mode, "4k", 0, nops[ph], 0, b});
    }
  }
  ::unlink(pool.c_str());
  std::string rm = "rm -rf '" + tdir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "mapfs bench ycsb: could not remove %s\n", tdir.c_str());
  if (rc == 0 && !o.json.empty() && !WriteJson(o.json, "ycsb", rows)) {
    std::fprintf(stderr, "mapfs bench ycsb: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return rc;
}

}  // namespace mapfs::bench
