// `mapfs bench fio`: fio's psync engine, 4 KiB random 50 % reads / 50 %
// writes on one file, on tmpfs, ext4 and mapfs (shim), from fio's JSON
// output; then a random-write pass with crc32c verification on each.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "app_bench.h"
#include "bench_util.h"

namespace mapfs::bench {
namespace {

// The number after `"key" :` at or after `from` in fio's JSON; -1 if none.
double NumberAfter(const std::string& json, size_t from, const std::string& key, size_t* at = nullptr) {
  size_t p = json.find("\"" + key + "\"", from);
  if (p == std::string::npos) return -1;
  p = json.find(':', p);
  if (p == std::string::npos) return -1;
  if (at) *at = p;
  return std::strtod(json.c_str() + p + 1, nullptr);
}

// I/O count and time spent in I/O calls of one direction ("read",
// "write") of the first job: total_ios and total_ios x lat_ns.mean.
bool Direction(const std::string& json, const char* dir, double* ios, double* ns) {
  size_t p = json.find(std::string("\"") + dir + "\" : {");
  if (p == std::string::npos) return false;
  *ios = NumberAfter(json, p, "total_ios");
  size_t lat = 0;
  NumberAfter(json, p, "lat_ns", &lat);
  if (lat == 0) return false;
  double mean = NumberAfter(json, lat, "mean");
  *ns = *ios * mean;
  return *ios >= 0 && mean >= 0;
}

}  // namespace

int RunFioBench(const AppBenchOptions& o) {
  uint64_t file_mib = o.quick ? 64 : 512;
  uint64_t ios = o.ops ? o.ops : file_mib * 256;  // one pass over the file's size
  int repeat = o.repeat ? o.repeat : o.quick ? 1 : 3;
  std::string probe;
  if (!RunCapture("command -v fio", &probe) || probe.empty()) {
    std::fprintf(stderr, "mapfs bench fio: fio not found (Debian package fio)\n");
    return 1;
  }
  std::printf("mapfs bench fio; %s\n", MachineDescription().c_str());
  AppFixture fx;
  if (!fx.Setup("fio", o, (file_mib << 20) * 2)) return 1;
  std::printf("\nfio: psync, 4 KiB random read/write 50 %%, file of %llu MiB, %llu I/Os, 1 job, median of %d\n"
              "(ns/op = time inside the I/O calls, from fio's lat_ns means; page cache kept: --invalidate=0)\n",
              static_cast<unsigned long long>(file_mib), static_cast<unsigned long long>(ios), repeat);
  std::vector<std::vector<double>> ns(fx.fs().size()), rns(fx.fs().size()), wns(fx.fs().size());
  double nread = 0, nwrite = 0;
  for (int r = 0; r < repeat; r++)
    for (size_t k = 0; k < fx.fs().size(); k++) {
      const AppFs& f = fx.fs()[k];
      Progress("fio %s, repeat %d of %d", f.name.c_str(), r + 1, repeat);
      std::string common = f.prefix + "fio --ioengine=psync --bs=4k --randrepeat=1 --invalidate=0 --output-format=json --filename=" +
                           ShellQuote(f.dir + "/fio.dat") + " --size=" + std::to_string(file_mib) + "m";
      std::string out;
      bool ok = RunCapture(common + " --name=randrw --rw=randrw --rwmixread=50 --number_ios=" + std::to_string(ios) +
                               " 2>&1",
                           &out);
      size_t brace = out.find('{');
      std::string json = brace == std::string::npos ? "" : out.substr(brace);
      double rio = 0, rt = 0, wio = 0, wt = 0;
      if (!ok || !Direction(json, "read", &rio, &rt) || !Direction(json, "write", &wio, &wt) ||
          NumberAfter(json, 0, "error") != 0) {
        ProgressDone();
        std::fprintf(stderr, "mapfs bench fio: fio on %s failed:\n%s\n", f.name.c_str(), out.c_str());
        return 1;
      }
      ns[k].push_back(rt + wt);
      rns[k].push_back(rt);
      wns[k].push_back(wt);
      nread = rio;
      nwrite = wio;
      if (r == 0) {
        // Correctness, not timed: random 4 KiB writes, then fio reads every
        // block back and checks its crc32c header.
        std::string vout;
        if (!RunCapture(common + " --name=verify --rw=randwrite --verify=crc32c --do_verify=1 --verify_state_save=0 --size=16m 2>&1", &vout) ||
            NumberAfter(vout.substr(std::min(vout.size(), vout.find('{'))), 0, "error") != 0) {
          ProgressDone();
          std::fprintf(stderr, "mapfs bench fio: verification on %s failed:\n%s\n", f.name.c_str(), vout.c_str());
          return 1;
        }
      }
    }
  ProgressDone();
  std::printf("crc32c verification of random 4 KiB writes: passed on every file system\n");
  std::vector<Row> rows;
  auto n = [](double x) { return static_cast<uint64_t>(x); };
  for (size_t k = 0; k < fx.fs().size(); k++)
    rows.push_back({"randrw", fx.fs()[k].name, fx.fs()[k].mode, "4k", 0, n(nread + nwrite), n(nread + nwrite) * 4096,
                    SpreadOf(ns[k])});
  for (size_t k = 0; k < fx.fs().size(); k++)
    rows.push_back({"randrw-read", fx.fs()[k].name, fx.fs()[k].mode, "4k", 0, n(nread), n(nread) * 4096, SpreadOf(rns[k])});
  for (size_t k = 0; k < fx.fs().size(); k++)
    rows.push_back({"randrw-write", fx.fs()[k].name, fx.fs()[k].mode, "4k", 0, n(nwrite), n(nwrite) * 4096,
                    SpreadOf(wns[k])});
  PrintRows(rows);
  if (!o.json.empty() && !WriteJson(o.json, "fio", rows)) {
    std::fprintf(stderr, "mapfs bench fio: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return 0;
}

}  // namespace mapfs::bench
