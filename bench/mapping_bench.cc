// `mapfs bench mapping` (mapping_bench.h).
//
// Per design and repeat: a fresh pool and mapping area sized so that the
// file (plus the filler blocks that give it its layout score) fills `util`
// of the block area; the file is appended one block at a time, with a block
// of a second file slipped in after a share (1 - layout) of them, so about
// that share of its blocks does not follow the one before (the paper's
// layout score, made without aging runs). Then:
//   lookup-seq-warm / lookup-rand-warm: every block in order / in a random
//     order, one cursor (translation cache or tree cursor) for the pass,
//     after a first untimed pass;
//   lookup-seq-cold / lookup-rand-cold: samples taken after the CPU caches
//     were flushed by reading a buffer of twice the last-level cache, with a
//     fresh cursor; seq = 8 consecutive blocks from a random start;
//   truncate: one Remove of the whole file, per block.
// Times are rdtsc cycles, converted to ns with a calibrated clock rate.
#include "mapping_bench.h"

#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "bench_util.h"
#include "common/units.h"
#include "map/hash.h"
#include "map/mapper.h"
#include "medium/pool.h"

namespace mapfs::bench {
namespace {

using map::Block;
using map::Cursor;
using map::FileBlock;
using map::Kind;
using map::Mapper;
using map::Mapping;

constexpr map::Ino kFile = 1, kFiller = 2;
std::atomic<uint64_t> sink{0};

double CyclesPerNs() {
  uint64_t t0 = NowNs(), c0 = __rdtsc();
  while (NowNs() - t0 < 20'000'000) {
  }
  uint64_t t1 = NowNs(), c1 = __rdtsc();
  return static_cast<double>(c1 - c0) / static_cast<double>(t1 - t0);
}

// Reads a buffer twice the size of the last-level cache: what the lookup
// touches afterwards comes from memory.
class CacheFlusher {
 public:
  CacheFlusher() {
    long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
    size_t n = l3 > 0 ? static_cast<size_t>(l3) * 2 : 64 * MiB;
    buf_.assign(std::min<size_t>(n, 256 * MiB), 1);
  }
  void Flush() {
    uint64_t sum = 0;
    for (size_t i = 0; i < buf_.size(); i += 64) sum += buf_[i]++;
    sink_.store(sink_.load(std::memory_order_relaxed) + sum, std::memory_order_relaxed);
  }

 private:
  std::vector<uint8_t> buf_;
  std::atomic<uint64_t> sink_{0};  // keeps the reads
};

struct Result1 {
  double append = 0, seq_warm = 0, rand_warm = 0, seq_cold = 0, rand_cold = 0, truncate = 0;  // cycles per block
  double bytes_per_gib = 0;
};

bool Fail(const char* what, const Status& st) {
  std::fprintf(stderr, "mapfs bench mapping: %s: %s\n", what, st.ToString().c_str());
  return false;
}

bool RunOne(Kind kind, const std::string& path, uint64_t blocks, double layout, double util, int cold_samples,
            uint64_t seed, CacheFlusher& flusher, Result1* out) {
  const double q = 1.0 - layout;
  const uint64_t data = static_cast<uint64_t>(static_cast<double>(blocks) * (1.0 + q) + 64);
  const uint64_t area_len = AlignUp(static_cast<uint64_t>(static_cast<double>(data) / util * 4104.0) + 16 * MiB, kChunkSize);
  medium::CreateOptions co;
  co.size = area_len + 64 * MiB;
  Status st = medium::Pool::Create(path, co);
  if (!st.ok()) return Fail("pool", st);
  struct Cleanup {
    std::string p;
    ~Cleanup() { ::unlink(p.c_str()); }
  } cleanup{path};
  auto pool = medium::Pool::Open(path);
  if (!pool.ok()) return Fail("pool", pool.status());
  (*pool)->FinishOpen();
  const uint64_t area_off = (*pool)->header().meta_end;
  map::FormatOptions fo;
  fo.kind = kind;
  fo.max_ino = 16;
  st = Mapper::Format(pool->get(), area_off, area_len, fo);
  if (!st.ok()) return Fail("format", st);
  auto mr = Mapper::Open(pool->get(), area_off, area_len);
  if (!mr.ok()) return Fail("open", mr.status());
  Mapper* m = mr->get();

  // Append, with filler blocks for the layout score.
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  Cursor c, cf;
  uint64_t filler = 0, cycles = 0;
  for (uint64_t b = 0; b < blocks; b++) {
    uint64_t t0 = __rdtsc();
    st = m->Insert(&c, kFile, FileBlock(b), 1);
    cycles += __rdtsc() - t0;
    if (!st.ok()) return Fail("append", st);
    if (q > 0 && coin(rng) < q) {
      st = m->Insert(&cf, kFiller, FileBlock(filler++), 1);
      if (!st.ok()) return Fail("filler", st);
    }
  }
  out->append = static_cast<double>(cycles) / static_cast<double>(blocks);
  map::Usage u = m->usage();
  // Bytes of mapping per GiB of file data: the node blocks, plus the
  // fixed structures (tables, bitmap, roots) pro-rated to the blocks in use.
  const double fixed_share = static_cast<double>(u.fixed_bytes) * static_cast<double>(blocks) /
                             static_cast<double>(u.blocks);
  const double node_share = static_cast<double>(u.node_blocks * map::format::kBlockSize) * static_cast<double>(blocks) /
                            static_cast<double>(u.used_blocks);
  out->bytes_per_gib = (fixed_share + node_share) / (static_cast<double>(blocks) * 4096.0 / GiB);

  // Warm passes: sequential, then random (same blocks, shuffled).
  std::vector<uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  auto pass = [&](const std::vector<uint64_t>& seq) -> double {
    Cursor cur;
    uint64_t sum = 0;
    uint64_t t0 = __rdtsc();
    for (uint64_t b : seq) {
      Mapping mp;
      if (m->Lookup(&cur, kFile, FileBlock(b), &mp) != 0 || !mp.mapped) return -1;
      sum += mp.blk.v;
    }
    uint64_t t1 = __rdtsc();
    sink.fetch_add(sum, std::memory_order_relaxed);  // keeps the lookups
    return static_cast<double>(t1 - t0) / static_cast<double>(seq.size());
  };
  if (pass(order) < 0) return Fail("lookup", Status::Error(EIO, "a written block is not mapped"));
  out->seq_warm = pass(order);
  std::shuffle(order.begin(), order.end(), rng);
  (void)pass(order);
  out->rand_warm = pass(order);

  // Cold samples.
  std::uniform_int_distribution<uint64_t> pick(0, blocks - 9);
  uint64_t seq_cycles = 0, rand_cycles = 0;
  for (int s = 0; s < cold_samples; s++) {
    Mapping mp;
    uint64_t start = pick(rng);
    flusher.Flush();
    Cursor cur;
    uint64_t t0 = __rdtsc();
    int rc = m->Lookup(&cur, kFile, FileBlock(start), &mp);
    rand_cycles += __rdtsc() - t0;
    if (rc) return Fail("cold lookup", Status::Error(-rc, "lookup failed"));
    flusher.Flush();
    Cursor cur2;
    t0 = __rdtsc();
    for (uint64_t k = 0; k < 8; k++) rc |= m->Lookup(&cur2, kFile, FileBlock(start + k), &mp);
    seq_cycles += __rdtsc() - t0;
    if (rc) return Fail("cold lookup", Status::Error(-rc, "lookup failed"));
  }
  out->rand_cold = static_cast<double>(rand_cycles) / cold_samples;
  out->seq_cold = static_cast<double>(seq_cycles) / (8.0 * cold_samples);

  uint64_t t0 = __rdtsc();
  st = m->Remove(&c, kFile, FileBlock(0), map::kToEnd);
  out->truncate = static_cast<double>(__rdtsc() - t0) / static_cast<double>(blocks);
  if (!st.ok()) return Fail("truncate", st);
  mr->reset();
  return (*pool)->Close().ok();
}

}  // namespace

int RunMappingBench(const MappingBenchOptions& opt) {
  const int repeat = opt.repeat ? opt.repeat : opt.quick ? 1 : 3;
  const uint64_t size = opt.size ? opt.size : opt.quick ? 32 * MiB : 256 * MiB;
  const uint64_t blocks = size / 4096;
  if (blocks < 64 || opt.layout <= 0.0 || opt.layout > 1.0 || opt.util <= 0.05 || opt.util > 0.95) {
    std::fprintf(stderr, "mapfs bench mapping: --size >= 256K, layout score in (0, 1], utilisation in (0.05, 0.95]\n");
    return 2;
  }
  const int cold_samples = opt.quick ? 40 : 200;
  const double cpn = CyclesPerNs();
  std::printf("block mappers (HashFS paper §4.1): one %s file, layout score %.2f, area %.0f %% used, "
              "hashing %s, %.2f GHz TSC; %s\n",
              FormatSize(size).c_str(), opt.layout, opt.util * 100, map::ToString(map::CurrentHashIsa()), cpn,
              MachineDescription().c_str());
  std::printf("median of %d; ns per block (cycles in brackets)\n", repeat);
  std::printf("%-8s %16s %16s %16s %16s %16s %16s %12s\n", "design", "append", "seq warm", "rand warm", "seq cold",
              "rand cold", "truncate", "B/GiB map");
  CacheFlusher flusher;
  std::vector<Row> rows;
  const std::string path = opt.dir + "/mapfs-bench-mapping-" + std::to_string(::getpid()) + ".pool";
  for (Kind kind : {Kind::kHashFs, Kind::kCuckoo, Kind::kExtent, Kind::kRadix}) {
    std::vector<Result1> res(repeat);
    for (int r = 0; r < repeat; r++) {
      Progress("mapping: %s repeat %d", map::ToString(kind), r + 1);
      if (!RunOne(kind, path, blocks, opt.layout, opt.util, cold_samples, 1000 + r, flusher, &res[r])) return 1;
    }
    ProgressDone();
    auto med = [&](double Result1::*f) {
      std::vector<double> v;
      for (const auto& x : res) v.push_back(x.*f);
      return SpreadOf(v);
    };
    struct Col {
      const char* name;
      double Result1::*f;
    } cols[] = {{"append", &Result1::append},         {"lookup-seq-warm", &Result1::seq_warm},
                {"lookup-rand-warm", &Result1::rand_warm}, {"lookup-seq-cold", &Result1::seq_cold},
                {"lookup-rand-cold", &Result1::rand_cold}, {"truncate", &Result1::truncate}};
    std::printf("%-8s", map::ToString(kind));
    for (const Col& col : cols) {
      Spread s = med(col.f);
      char cell[32];
      std::snprintf(cell, sizeof cell, "%.1f (%.0f)", s.median / cpn, s.median);
      std::printf(" %16s", cell);
      // JSON: ns for `blocks` operations per repeat, as every suite reports.
      Spread ns{s.min / cpn * blocks, s.median / cpn * blocks, s.max / cpn * blocks};
      // fs is "mapfs" (the suites' fixed set); the design is in the workload name.
      rows.push_back({std::string(map::ToString(kind)) + "-" + col.name, "mapfs", "-", "4k", blocks, blocks, 0, ns});
    }
    std::printf(" %12.0f\n", med(&Result1::bytes_per_gib).median);
    std::fflush(stdout);
  }
  if (!opt.json.empty() && !WriteJson(opt.json, "mapping", rows)) {
    std::fprintf(stderr, "mapfs bench mapping: cannot write %s\n", opt.json.c_str());
    return 1;
  }
  return 0;
}

}  // namespace mapfs::bench
