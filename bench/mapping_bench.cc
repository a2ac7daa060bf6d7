// `mapfs bench mapping` (mapping_bench.h): the HashFS paper's §4 study.
//
// Every configuration makes one pool per design (mapping_target.h), the
// designs interleaved within each repeat so that load drifts hit them
// alike; times are rdtsc cycles (converted to ns with a calibrated rate),
// the threaded ones the thread's CPU clock; each cell is the median of the
// repeats. Cold samples follow a flush of the CPU caches (CacheFlusher)
// and use a fresh cursor: they time the mapping structure, the code and
// the TLB all cold, as a first access after other work would.
#include "mapping_bench.h"

#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "common/units.h"
#include "fs/file_system.h"
#include "map/hash.h"
#include "mapping_apps.h"
#include "mapping_target.h"

namespace mapfs::bench {
namespace {

std::atomic<uint64_t> sink{0};

double CyclesPerNs() {
  uint64_t t0 = NowNs(), c0 = __rdtsc();
  while (NowNs() - t0 < 20'000'000) {
  }
  uint64_t t1 = NowNs(), c1 = __rdtsc();
  return static_cast<double>(c1 - c0) / static_cast<double>(t1 - t0);
}

uint64_t ThreadCpuNs() {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// One cell of a table: experiment, metric, parameter, design -> cycles per
// repeat.
struct Key {
  std::string exp, metric;
  uint64_t param;
  std::string design;
  bool operator<(const Key& o) const {
    return std::tie(exp, metric, param, design) < std::tie(o.exp, o.metric, o.param, o.design);
  }
};

struct Study {
  const MappingBenchOptions& opt;
  double cpn;
  int cold_samples, ios;
  uint64_t large;
  CacheFlusher flusher;
  std::map<Key, std::vector<double>> cells;
  std::map<std::string, std::vector<double>> scores;  // "design layout" -> measured layout scores
  std::string path;

  void Put(const std::string& exp, const std::string& metric, uint64_t param, const std::string& design, double v) {
    cells[{exp, metric, param, design}].push_back(v);
  }

  Result<std::unique_ptr<MappingTarget>> Make(const std::string& design, uint64_t bytes, double util, double layout) {
    TargetSpec s;
    s.design = design, s.path = path, s.file_bytes = bytes, s.util = util, s.layout = layout, s.file_share = 0.45;
    return MappingTarget::Make(s);
  }

  // Warm: one untimed pass, then timed passes of `order` (repeated so at
  // least 64 Ki lookups are timed), one cursor or a fresh one per lookup.
  double Warm(MappingTarget& t, const std::vector<uint64_t>& order, bool cursor) {
    const size_t rounds = std::max<size_t>(1, 65536 / order.size());
    uint64_t sum = 0;
    map::Cursor c{};
    for (uint64_t b : order) sum += t.Map(&c, b);
    uint64_t c0 = __rdtsc();
    for (size_t r = 0; r < rounds; r++) {
      map::Cursor pass{};
      for (uint64_t b : order) {
        if (cursor) {
          sum += t.Map(&pass, b);
        } else {
          map::Cursor fresh{};
          sum += t.Map(&fresh, b);
        }
      }
    }
    uint64_t c1 = __rdtsc();
    sink.fetch_add(sum, std::memory_order_relaxed);
    return static_cast<double>(c1 - c0) / static_cast<double>(rounds * order.size());
  }

  // Cold: per sample, flush, fresh cursor; random = one block, sequential =
  // 8 consecutive blocks (per block).
  void Cold(MappingTarget& t, std::mt19937_64& rng, double* rand_c, double* seq_c) {
    const uint64_t n = t.blocks();
    uint64_t rc = 0, sc = 0, sum = 0;
    for (int s = 0; s < cold_samples; s++) {
      uint64_t start = n > 8 ? rng() % (n - 8) : 0;
      flusher.Flush();
      map::Cursor c1{};
      uint64_t t0 = __rdtsc();
      sum += t.Map(&c1, start);
      rc += __rdtsc() - t0;
      flusher.Flush();
      map::Cursor c2{};
      const uint64_t k = std::min<uint64_t>(8, n);
      t0 = __rdtsc();
      for (uint64_t i = 0; i < k; i++) sum += t.Map(&c2, start + i);
      sc += (__rdtsc() - t0) / k;
    }
    sink.fetch_add(sum, std::memory_order_relaxed);
    *rand_c = static_cast<double>(rc) / cold_samples;
    *seq_c = static_cast<double>(sc) / cold_samples;
  }

  bool Fail(const std::string& what, const Status& st) {
    std::fprintf(stderr, "mapfs bench mapping: %s: %s\n", what.c_str(), st.ToString().c_str());
    return false;
  }

  // The base configuration: 4.1, 4.3 (large), 4.4, 4.6, 4.7, space, truncate.
  bool Base(const std::string& d, int r) {
    auto t = Make(d, large, opt.util, opt.layout);
    if (!t.ok()) return Fail(d, t.status());
    MappingTarget& m = **t;
    std::mt19937_64 rng(1000 + r);
    const uint64_t n = m.blocks();
    std::vector<uint64_t> seq(n);
    std::iota(seq.begin(), seq.end(), 0);
    std::vector<uint64_t> rnd = seq;
    std::shuffle(rnd.begin(), rnd.end(), rng);
    Put("4.1", "append", 0, d, m.append_cycles());
    Put("4.1", "seq-warm", 0, d, Warm(m, seq, true));
    Put("4.1", "rand-warm", 0, d, Warm(m, rnd, true));
    double rc, sc;
    Cold(m, rng, &rc, &sc);
    Put("4.1", "seq-cold", 0, d, sc);
    Put("4.1", "rand-cold", 0, d, rc);
    Put("4.3", "rand-cold", large, d, rc);
    Put("4.3", "rand-warm", large, d, Put2("4.1", "rand-warm", d));
    Put("4.3", "seq-cold", large, d, sc);
    Put("4.3", "append", large, d, m.append_cycles());
    Put("4.7", "seq-cursor", 0, d, Put2("4.1", "seq-warm", d));
    Put("4.7", "seq-no-cursor", 0, d, Warm(m, seq, false));
    Put("4.7", "rand-cursor", 0, d, Put2("4.1", "rand-warm", d));
    Put("4.7", "rand-no-cursor", 0, d, Warm(m, rnd, false));
    scores[d + " " + std::to_string(static_cast<int>(opt.layout * 100 + 0.5))].push_back(m.layout_score());

    // 4.4: whole reads through the file layer, then the mapping part of
    // the same reads (same offsets), warm.
    for (uint64_t io : {4 * KiB, 64 * KiB, 1 * MiB}) {
      if (io > n * 4096) continue;
      std::vector<char> buf(io);
      std::vector<uint64_t> offs(ios);
      for (auto& o : offs) o = (rng() % (n * 4096 / io)) * io;
      uint64_t read_c = 0, map_c = 0, sum = 0;
      for (int pass = 0; pass < 2; pass++) {  // the first warms
        read_c = map_c = 0;
        for (uint64_t o : offs) {
          uint64_t t0 = __rdtsc();
          auto rd = m.fs().Read(m.file(), buf.data(), io, static_cast<int64_t>(o));
          read_c += __rdtsc() - t0;
          if (!rd.ok() || *rd != io) return Fail(d + ": read", rd.ok() ? Status::Error(EIO, "short read") : rd.status());
          sum += static_cast<uint8_t>(buf[0]);
        }
        for (uint64_t o : offs) {
          uint64_t t0 = __rdtsc();
          sum += m.MapRange(o, io);
          map_c += __rdtsc() - t0;
        }
      }
      sink.fetch_add(sum, std::memory_order_relaxed);
      Put("4.4", "read", io, d, static_cast<double>(read_c) / ios);
      Put("4.4", "map", io, d, static_cast<double>(map_c) / ios);
    }

    // 4.6: threads on the one file, each its own cursor and offsets; the
    // thread's CPU clock per operation (2 cores: wall time would count the
    // waits for a core).
    for (int threads : {1, 2, 4}) {
      std::vector<double> lk(threads), rd(threads);
      std::vector<std::thread> th;
      std::atomic<bool> ok{true};
      const int ops = ios * 4;
      for (int i = 0; i < threads; i++) {
        th.emplace_back([&, i] {
          std::mt19937_64 g(77 + i);
          std::vector<char> buf(4096);
          map::Cursor c{};
          uint64_t sum = 0, t0 = ThreadCpuNs();
          for (int k = 0; k < ops; k++) sum += m.Map(&c, g() % n);
          uint64_t t1 = ThreadCpuNs();
          for (int k = 0; k < ops; k++) {
            auto r2 = m.fs().Read(m.file(), buf.data(), 4096, static_cast<int64_t>((g() % n) * 4096));
            if (!r2.ok()) ok = false;
          }
          uint64_t t2 = ThreadCpuNs();
          lk[i] = static_cast<double>(t1 - t0) / ops;
          rd[i] = static_cast<double>(t2 - t1) / ops;
          sink.fetch_add(sum, std::memory_order_relaxed);
        });
      }
      for (auto& x : th) x.join();
      if (!ok) return Fail(d + ": threaded read", Status::Error(EIO, "read failed"));
      Put("4.6", "lookup-cpu", threads, d, std::accumulate(lk.begin(), lk.end(), 0.0) / threads * cpn);
      Put("4.6", "read-cpu", threads, d, std::accumulate(rd.begin(), rd.end(), 0.0) / threads * cpn);
    }

    Put("space", "bytes-per-gib", 0, d, m.mapping_bytes_per_gib());
    auto tc = m.TruncateCycles();
    if (!tc.ok()) return Fail(d + ": truncate", tc.status());
    Put("4.1", "truncate", 0, d, *tc);
    return true;
  }

  double Put2(const std::string& exp, const std::string& metric, const std::string& d) {
    return cells[{exp, metric, 0, d}].back();
  }

  // A configuration that varies one knob: cold and warm random lookups
  // (and sequential cold), appends.
  bool Knob(const std::string& exp, uint64_t param, const std::string& d, uint64_t bytes, double util, double layout,
            int r) {
    auto t = Make(d, bytes, util, layout);
    if (!t.ok()) return Fail(d + " " + exp, t.status());
    MappingTarget& m = **t;
    std::mt19937_64 rng(2000 + r);
    std::vector<uint64_t> rnd(m.blocks());
    std::iota(rnd.begin(), rnd.end(), 0);
    std::shuffle(rnd.begin(), rnd.end(), rng);
    double rc, sc;
    Cold(m, rng, &rc, &sc);
    Put(exp, "rand-cold", param, d, rc);
    Put(exp, "seq-cold", param, d, sc);
    Put(exp, "rand-warm", param, d, Warm(m, rnd, true));
    Put(exp, "append", param, d, m.append_cycles());
    if (exp == "4.2") scores[d + " " + std::to_string(param)].push_back(m.layout_score());
    return true;
  }

  bool Run(int repeat) {
    for (int r = 0; r < repeat; r++) {
      for (const std::string& d : MappingDesigns()) {
        Progress("mapping: repeat %d: %s base", r + 1, d.c_str());
        if (!Base(d, r)) return false;
      }
      for (double layout : {1.0, 0.7}) {
        for (const std::string& d : MappingDesigns()) {
          Progress("mapping: repeat %d: %s layout %.2f", r + 1, d.c_str(), layout);
          if (!Knob("4.2", static_cast<uint64_t>(layout * 100 + 0.5), d, large, opt.util, layout, r)) return false;
        }
      }
      for (uint64_t bytes : {4 * KiB, 4 * MiB}) {
        for (const std::string& d : MappingDesigns()) {
          Progress("mapping: repeat %d: %s size %s", r + 1, d.c_str(), FormatSize(bytes).c_str());
          if (!Knob("4.3", bytes, d, bytes, opt.util, opt.layout, r)) return false;
        }
      }
      for (double util : {0.8, 0.95}) {
        for (const std::string& d : MappingDesigns()) {
          Progress("mapping: repeat %d: %s utilisation %.2f", r + 1, d.c_str(), util);
          if (!Knob("4.5", static_cast<uint64_t>(util * 100 + 0.5), d, large, util, opt.layout, r)) return false;
        }
      }
    }
    ProgressDone();
    // The 4.2 row at the base layout is the base configuration's.
    const uint64_t base_layout = static_cast<uint64_t>(opt.layout * 100 + 0.5);
    for (const std::string& d : MappingDesigns()) {
      for (const char* metric : {"rand-cold", "seq-cold", "rand-warm", "append"}) {
        auto it = cells.find({"4.1", metric, 0, d});
        if (it != cells.end()) cells[{"4.2", metric, base_layout, d}] = it->second;
      }
    }
    return true;
  }
};

std::string ParamName(const std::string& exp, uint64_t p) {
  if (exp == "4.2") return "layout " + std::to_string(p / 100) + "." + (p % 100 < 10 ? "0" : "") + std::to_string(p % 100);
  if (exp == "4.3" || exp == "4.4") return FormatSize(p);
  if (exp == "4.5") return std::to_string(p) + " % used";
  if (exp == "4.6") return std::to_string(p) + (p == 1 ? " thread" : " threads");
  return "";
}

}  // namespace

int RunMappingBench(const MappingBenchOptions& opt) {
  const int repeat = opt.repeat ? opt.repeat : opt.quick ? 1 : 3;
  const uint64_t large = opt.size ? opt.size : opt.quick ? 16 * MiB : 256 * MiB;
  if (large < 4 * MiB || !(opt.layout >= 0.7 && opt.layout <= 1.0) || !(opt.util >= 0.7 && opt.util <= 0.95)) {
    std::fprintf(stderr, "mapfs bench mapping: --size >= 4M, --layout-score in [0.7, 1], --util in [0.7, 0.95]\n");
    return 2;
  }
  // --quick is a smoke run (CI): its "cold" samples follow 16 MiB of other
  // reads, not a flush of the whole last-level cache (256 MiB a flush here).
  Study s{opt, CyclesPerNs(), opt.quick ? 3 : 25, opt.quick ? 32 : 300, large, CacheFlusher(opt.quick ? 16 * MiB : 0),
          {}, {}, {}};
  s.path = opt.dir + "/mapfs-bench-mapping-" + std::to_string(::getpid()) + ".pool";
  std::printf("file mapping (HashFS paper §4), every design through the file layer: large file %s, layout score "
              "%.2f, %.0f %% used, hashing %s, %.2f GHz TSC; %s\n",
              FormatSize(large).c_str(), opt.layout, opt.util * 100, map::ToString(map::CurrentHashIsa()), s.cpn,
              MachineDescription().c_str());
  std::printf("median of %d; ns (cycles) per block looked up / per operation; 4.6 by CPU clock\n", repeat);
  std::fflush(stdout);
  const bool study = opt.apps != "only";
  if (study && !s.Run(repeat)) {
    ::unlink(s.path.c_str());
    return 1;
  }
  // Tables: one per experiment, designs as rows, metric x parameter as columns.
  std::vector<Row> rows;
  std::string cur_exp;
  std::vector<std::pair<std::string, uint64_t>> cols;
  auto flush_table = [&]() {
    if (cur_exp.empty()) return;
    std::printf("\n%s\n%-11s", cur_exp.c_str(), "design");
    for (auto& [metric, p] : cols) {
      std::string h = metric + (p && cur_exp != "4.1" ? " " + ParamName(cur_exp, p) : "");
      std::printf(" %22s", h.c_str());
    }
    std::printf("\n");
    for (const std::string& d : MappingDesigns()) {
      std::printf("%-11s", d.c_str());
      for (auto& [metric, p] : cols) {
        auto it = s.cells.find({cur_exp, metric, p, d});
        char cell[40] = "-";
        if (it != s.cells.end()) {
          Spread sp = SpreadOf(it->second);
          if (cur_exp == "space")
            std::snprintf(cell, sizeof cell, "%s", sp.median < 0 ? "(page table)" : FormatSize(static_cast<uint64_t>(sp.median)).c_str());
          else
            std::snprintf(cell, sizeof cell, "%.1f (%.0f)", sp.median / s.cpn, sp.median);
        }
        std::printf(" %22s", cell);
      }
      std::printf("\n");
    }
    cols.clear();
  };
  for (auto& [k, v] : s.cells) {
    if (k.exp != cur_exp) {
      flush_table();
      cur_exp = k.exp;
    }
    if (std::find(cols.begin(), cols.end(), std::make_pair(k.metric, k.param)) == cols.end())
      cols.push_back({k.metric, k.param});
    Spread sp = SpreadOf(v);
    Row row{k.exp + "-" + k.metric, "mapfs", k.design, "4k", k.param, 1, 0, {}};
    if (k.exp == "space") {
      if (sp.median < 0) continue;  // contiguous files: the page table, not measured here
      row.entries = static_cast<uint64_t>(sp.median);  // bytes of mapping per GiB
    } else {
      row.ns = {sp.min / s.cpn, sp.median / s.cpn, sp.max / s.cpn};
    }
    if (k.exp == "4.6") row.threads = static_cast<int>(k.param);
    rows.push_back(row);
  }
  flush_table();
  if (study) {
    std::printf("\nlayout score measured from the file's mapping (median):");
    for (auto& [k, v] : s.scores) {
      if (v.empty() || v[0] < 0) continue;
      std::printf("  %s: %.3f", k.c_str(), SpreadOf(v).median);
    }
    std::printf("\n");
  }
  if (opt.apps != "no") {
    MappingAppsOptions ao;
    ao.dir = opt.dir, ao.quick = opt.quick, ao.repeat = repeat, ao.records = opt.records, ao.loops = opt.ops;
    if (!RunMappingApps(ao, &rows)) return 1;
  }
  if (!opt.json.empty() && !WriteJson(opt.json, "mapping", rows)) {
    std::fprintf(stderr, "mapfs bench mapping: cannot write %s\n", opt.json.c_str());
    return 1;
  }
  return 0;
}

}  // namespace mapfs::bench
