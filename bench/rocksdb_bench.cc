// `mapfs bench rocksdb`: Debian's db_bench on tmpfs, ext4 and mapfs (shim).
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app_bench.h"
#include "bench_util.h"

namespace mapfs::bench {
namespace {

const char* const kBenchmarks[] = {"fillrandom", "readrandom", "updaterandom"};

// db_bench's result lines: "fillrandom   :  12.916 micros/op 77421 ops/sec
// 0.646 seconds 50000 operations; ..." -> name -> (ops, ns).
std::map<std::string, std::pair<uint64_t, double>> ParseDbBench(const std::string& out) {
  std::map<std::string, std::pair<uint64_t, double>> r;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    char name[64];
    double us = 0, secs = 0;
    unsigned long long ops_per_sec = 0, ops = 0;
    if (std::sscanf(line.c_str(), "%63s : %lf micros/op %llu ops/sec %lf seconds %llu operations", name, &us,
                    &ops_per_sec, &secs, &ops) == 5)
      r[name] = {ops, us * 1000.0 * static_cast<double>(ops)};
  }
  return r;
}

std::string FindDbBench() {
  for (const char* b : {"db_bench", "rocksdb_db_bench"}) {
    std::string out;
    if (RunCapture(std::string("command -v ") + b, &out) && !out.empty()) return out.substr(0, out.find('\n'));
  }
  return "";
}

}  // namespace

int RunRocksdbBench(const AppBenchOptions& o) {
  uint64_t keys = o.ops ? o.ops : o.quick ? 20000 : 200000;
  int repeat = o.repeat ? o.repeat : o.quick ? 1 : 3;
  std::string db_bench = FindDbBench();
  if (db_bench.empty()) {
    std::fprintf(stderr, "mapfs bench rocksdb: db_bench not found (Debian package rocksdb-tools)\n");
    return 1;
  }
  std::printf("mapfs bench rocksdb; %s\n", MachineDescription().c_str());
  AppFixture fx;
  if (!fx.Setup("rocksdb", o, keys * 1100 * 4 + (256ull << 20))) return 1;
  std::printf("\nrocksdb: %s %llu keys, 16-byte keys, 1 KiB values, no compression, 1 thread, with and without\n"
              "the WAL (--disable_wal), median of %d\n",
              db_bench.c_str(), static_cast<unsigned long long>(keys), repeat);
  // results[workload][fs index] -> ns per repeat
  std::map<std::string, std::vector<std::vector<double>>> ns;
  std::map<std::string, uint64_t> nops;
  for (int r = 0; r < repeat; r++)
    for (bool wal : {true, false})
      for (size_t k = 0; k < fx.fs().size(); k++) {
        const AppFs& f = fx.fs()[k];
        Progress("rocksdb %s%s, repeat %d of %d", f.name.c_str(), wal ? "" : " (no WAL)", r + 1, repeat);
        std::string cmd = f.prefix + ShellQuote(db_bench) +
                          " --benchmarks=fillrandom,readrandom,updaterandom --num=" + std::to_string(keys) +
                          " --value_size=1024 --compression_type=none --threads=1 --seed=42"
                          " --progress_reports=false --disable_wal=" + (wal ? "0" : "1") +
                          " --db=" + ShellQuote(f.dir + "/rocksdb") + " 2>&1";
        std::string out;
        bool ok = RunCapture(cmd, &out);
        auto res = ParseDbBench(out);
        if (!ok || res.size() != 3) {
          ProgressDone();
          std::fprintf(stderr, "mapfs bench rocksdb: db_bench on %s failed:\n%s\n", f.name.c_str(), out.c_str());
          return 1;
        }
        for (auto& [name, v] : res) {
          std::string w = name + (wal ? "" : "-nowal");
          ns[w].resize(fx.fs().size());
          ns[w][k].push_back(v.second);
          nops[w] = v.first;
        }
      }
  ProgressDone();
  std::vector<Row> rows;
  for (bool wal : {true, false})
    for (const char* b : kBenchmarks) {
      std::string w = std::string(b) + (wal ? "" : "-nowal");
      for (size_t k = 0; k < fx.fs().size(); k++)
        rows.push_back({w, fx.fs()[k].name, fx.fs()[k].mode, "4k", 0, nops[w], nops[w] * 1040, SpreadOf(ns[w][k])});
    }
  PrintRows(rows);
  if (!o.json.empty() && !WriteJson(o.json, "rocksdb", rows)) {
    std::fprintf(stderr, "mapfs bench rocksdb: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return 0;
}

}  // namespace mapfs::bench
