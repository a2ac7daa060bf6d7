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

#include "app_bench.h"
#include "bench_util.h"
#include "mapfs/mapfs.h"

namespace mapfs::bench {
bool RunYcsbDriver(const std::string& cmd, std::map<std::string, std::pair<uint64_t, double>>* out,
                   std::map<std::string, double>* cpu) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  char line[256];
  while (std::fgets(line, sizeof line, p)) {
    char ph[32];
    unsigned long long ops = 0;
    long long ns = 0, cpu_ns = 0;
    const int n = std::sscanf(line, "%31s %llu %lld %lld", ph, &ops, &ns, &cpu_ns);
    if (n >= 3) (*out)[ph] = {ops, static_cast<double>(ns)};
    if (n == 4 && cpu != nullptr) (*cpu)[ph] = static_cast<double>(cpu_ns);
  }
  return ::pclose(p) == 0;
}

int RunYcsbBench(const YcsbBenchOptions& opt) {
  YcsbBenchOptions o = opt;
  uint64_t records = o.records ? o.records : o.quick ? 20000 : 200000;
  uint64_t ops = o.ops ? o.ops : records;
  int repeat = o.repeat ? o.repeat : o.quick ? 1 : 2;
  std::string bin = BinDir();
  std::string driver = bin + "/mapfs-ycsb";
  struct stat st;
  if (::stat(driver.c_str(), &st) != 0) {
    std::fprintf(stderr, "mapfs bench ycsb: %s not found (built when LevelDB's headers are installed: libleveldb-dev)\n",
                 driver.c_str());
    return 1;
  }
  std::printf("mapfs bench ycsb; %s\n", MachineDescription().c_str());
  AppBenchOptions ao;
  ao.dir = o.dir;
  ao.mode = o.mode;
  AppFixture fx;  // tmpfs, ext4 (where it mounts), mapfs through the shim
  if (!fx.Setup("ycsb", ao, std::max<uint64_t>(records * 1024 * 4 + (512ull << 20), 1ull << 30))) return 1;
  std::printf("\nycsb: LevelDB, %llu records of 1 KiB, %llu operations per run phase, median of %d, mapfs mode %s\n",
              static_cast<unsigned long long>(records), static_cast<unsigned long long>(ops), repeat, o.mode.c_str());
  std::string args = " " + std::to_string(records) + " " + std::to_string(ops);
  std::map<std::string, std::vector<std::vector<double>>> ns, cpu;  // phase -> fs -> ns per repeat
  std::map<std::string, uint64_t> nops;
  for (int r = 0; r < repeat; r++)
    for (size_t k = 0; k < fx.fs().size(); k++) {
      const AppFs& f = fx.fs()[k];
      Progress("ycsb %s, repeat %d of %d", f.name.c_str(), r + 1, repeat);
      std::map<std::string, std::pair<uint64_t, double>> res;
      std::map<std::string, double> res_cpu;
      if (!RunYcsbDriver(f.prefix + ShellQuote(driver) + " " + ShellQuote(f.dir + "/db") + args, &res, &res_cpu)) {
        ProgressDone();
        std::fprintf(stderr, "mapfs bench ycsb: the %s run failed\n", f.name.c_str());
        return 1;
      }
      for (auto& [ph, v] : res) {
        ns[ph].resize(fx.fs().size());
        ns[ph][k].push_back(v.second);
        nops[ph] = v.first;
        cpu[ph].resize(fx.fs().size());
        if (res_cpu.count(ph)) cpu[ph][k].push_back(res_cpu[ph]);
      }
    }
  ProgressDone();
  std::vector<Row> rows;
  for (const char* ph : kYcsbPhases)
    for (size_t k = 0; k < fx.fs().size(); k++)
      if (ns.count(ph) && !ns[ph][k].empty()) {
        Row row{ph, fx.fs()[k].name, fx.fs()[k].mode, "4k", 0, nops[ph], 0, SpreadOf(ns[ph][k])};
        // The driver's CPU time (all its threads: LevelDB compacts in its
        // own), steadier than wall time on a shared machine.
        row.cpu_ns = SpreadOf(cpu[ph][k]).median;
        rows.push_back(row);
      }
  PrintRows(rows);
  if (!o.json.empty() && !WriteJson(o.json, "ycsb", rows)) {
    std::fprintf(stderr, "mapfs bench ycsb: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return 0;
}

}  // namespace mapfs::bench
