// `mapfs bench sqlite`: mapfs-tpcc (tpcc_driver.cc) on tmpfs, ext4 and mapfs
// (shim), in WAL and rollback-journal modes.
#include <sys/stat.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app_bench.h"
#include "bench_util.h"

namespace mapfs::bench {
namespace {

const char* const kPhases[] = {"load", "mix", "new-order", "payment", "order-status", "delivery", "stock-level"};

}  // namespace

int RunSqliteBench(const AppBenchOptions& o) {
  uint64_t txns = o.ops ? o.ops : o.quick ? 1000 : 10000;
  int warehouses = 1;
  int repeat = o.repeat ? o.repeat : o.quick ? 1 : 3;
  std::string driver = BinDir() + "/mapfs-tpcc";
  struct stat st;
  if (::stat(driver.c_str(), &st) != 0) {
    std::fprintf(stderr, "mapfs bench sqlite: %s not found (built when SQLite's headers are installed: libsqlite3-dev)\n",
                 driver.c_str());
    return 1;
  }
  std::printf("mapfs bench sqlite; %s\n", MachineDescription().c_str());
  AppFixture fx;
  if (!fx.Setup("sqlite", o, 512ull << 20)) return 1;
  std::printf("\nsqlite: TPC-C-like mix (45 %% new-order, 43 %% payment, 4 %% each order-status, delivery,\n"
              "stock-level), %d warehouse, %llu transactions, synchronous=FULL, median of %d\n",
              warehouses, static_cast<unsigned long long>(txns), repeat);
  std::vector<std::string> journals;
  for (const char* j : {"wal", "rollback"})
    if (o.journals.find(j) != std::string::npos) journals.push_back(j);
  std::map<std::string, std::vector<std::vector<double>>> ns;
  std::map<std::string, uint64_t> nops;
  std::map<std::string, std::string> failed;  // "fs journal" -> the driver's output
  for (int r = 0; r < repeat; r++)
    for (const std::string& journal : journals)
      for (size_t k = 0; k < fx.fs().size(); k++) {
        const AppFs& f = fx.fs()[k];
        if (failed.count(f.name + " " + journal)) continue;
        Progress("sqlite %s, %s journal, repeat %d of %d", f.name.c_str(), journal.c_str(), r + 1, repeat);
        std::string cmd = f.prefix + ShellQuote(driver) + " " + ShellQuote(f.dir + "/tpcc.db") + " " + journal + " " +
                          std::to_string(warehouses) + " " + std::to_string(txns);
        std::string out;
        bool ok = RunCapture(cmd + " 2>&1", &out);
        std::istringstream in(out);
        std::string line;
        int got = 0;
        while (std::getline(in, line)) {
          char phase[32];
          unsigned long long n = 0, t = 0;
          if (std::sscanf(line.c_str(), "%31s %llu %llu", phase, &n, &t) != 3) continue;
          std::string w = journal + "-" + phase;
          ns[w].resize(fx.fs().size());
          ns[w][k].push_back(static_cast<double>(t));
          nops[w] = n;
          got++;
        }
        if (!ok || got != 7) {
          // Reported, never hidden: the run's rows are left out, the suite
          // fails, and the other file systems and journals still run.
          failed[f.name + " " + journal] = out;
          for (const char* ph : kPhases) ns[journal + "-" + ph].resize(fx.fs().size());
          for (const char* ph : kPhases) ns[journal + "-" + ph][k].clear();
        }
      }
  ProgressDone();
  std::vector<Row> rows;
  for (const std::string& journal : journals)
    for (const char* ph : kPhases) {
      std::string w = journal + "-" + ph;
      for (size_t k = 0; k < fx.fs().size(); k++)
        if (ns[w].size() > k && !ns[w][k].empty()) rows.push_back({w, fx.fs()[k].name, fx.fs()[k].mode, "4k", 0, nops[w], 0, SpreadOf(ns[w][k])});
    }
  PrintRows(rows);
  for (auto& [what, out] : failed)
    std::printf("FAILED: mapfs-tpcc on %s journal (no rows for it):\n%s\n", what.c_str(), out.c_str());
  if (!o.json.empty() && !WriteJson(o.json, "sqlite", rows)) {
    std::fprintf(stderr, "mapfs bench sqlite: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return failed.empty() ? 0 : 1;
}

}  // namespace mapfs::bench
