#include "concurrency_bench.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "common/units.h"
#include "ext4_baseline.h"
#include "fs_targets.h"

namespace mapfs::bench {
namespace {

constexpr size_t kIo = 4096;

// YCSB's Zipfian over [0, n) with skew theta (Gray et al.), unscrambled:
// item 0 is the hottest 4 KiB block of the shared file.
class Zipfian {
 public:
  Zipfian(uint64_t n, double theta) : n_(n), theta_(theta) {
    for (uint64_t i = 1; i <= n; i++) zetan_ += 1.0 / std::pow(static_cast<double>(i), theta);
    double zeta2 = 1.0 + 1.0 / std::pow(2.0, theta);
    alpha_ = 1.0 / (1.0 - theta);
    eta_ = (1 - std::pow(2.0 / static_cast<double>(n), 1 - theta)) / (1 - zeta2 / zetan_);
  }
  uint64_t Next(std::mt19937_64& rng) {
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    double uz = u * zetan_;
    if (uz < 1.0) return 0;
    if (uz < 1.0 + std::pow(0.5, theta_)) return 1;
    return static_cast<uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1, alpha_)) % n_;
  }

 private:
  uint64_t n_;
  double theta_, zetan_ = 0, alpha_ = 0, eta_ = 0;
};

}  // namespace

std::vector<ConcurrencyWorkload> ConcurrencyWorkloads() {
  using Workload = ConcurrencyWorkload;
  std::vector<Workload> w = {{"append-private", Workload::kAppend},
                             {"overwrite-private", Workload::kOverwrite},
                             {"create-private-dir", Workload::kCreatePrivate},
                             {"create-shared-dir", Workload::kCreateShared}};
  for (bool z : {false, true})
    for (int r : {0, 50, 95, 100})
      w.push_back({std::string("shared-") + (z ? "zipf" : "uniform") + "-r" + std::to_string(r), Workload::kShared, z, r});
  return w;
}

ConcurrencyPlans PlanConcurrency(const ConcurrencyWorkload& w, int threads, uint64_t ops, uint64_t file_bytes) {
  ConcurrencyPlans plans(threads);
  if (w.kind == ConcurrencyWorkload::kOverwrite || w.kind == ConcurrencyWorkload::kShared) {
    Zipfian zipf(file_bytes / kIo, 0.9);
    for (int i = 0; i < threads; i++) {
      std::mt19937_64 rng(1000 * threads + i);
      for (uint64_t k = 0; k < ops; k++) {
        uint64_t block = w.zipf ? zipf.Next(rng) : rng() % (file_bytes / kIo);
        plans[i].push_back({block * kIo, static_cast<int>(rng() % 100) < w.read_pct});
      }
    }
  }
  return plans;
}

double RunConcurrencyOnce(Target& t, const ConcurrencyWorkload& w, int threads, uint64_t ops, uint64_t file_bytes,
                          const ConcurrencyPlans& plans, double* cpu_ns) {
  using Workload = ConcurrencyWorkload;
  std::vector<int> fds(threads, -1);
  auto file_of = [&](int i) { return "/c/t" + std::to_string(i); };
  auto dir_of = [&](int i) { return w.kind == Workload::kCreatePrivate ? "/c/d" + std::to_string(i) : std::string("/c/shared"); };
  t.Mkdir("/c");
  // The untimed fill of the files the workload overwrites, in large writes.
  constexpr size_t kFill = 256 * 1024;
  std::vector<char> block(kFill, 'c');
  for (int i = 0; i < threads; i++) {
    if (w.kind == Workload::kAppend || w.kind == Workload::kOverwrite) {
      fds[i] = t.Open(file_of(i), O_CREAT | O_RDWR | O_TRUNC);
      if (!Check(fds[i] >= 0, "open")) return -1;
      if (w.kind == Workload::kOverwrite)
        for (uint64_t o = 0; o < file_bytes; o += kFill)
          if (!Check(t.Pwrite(fds[i], block.data(), kFill, static_cast<off_t>(o)) == kFill, "fill")) return -1;
    } else if (w.kind == Workload::kShared) {
      fds[i] = i == 0 ? t.Open("/c/shared.dat", O_CREAT | O_RDWR) : t.Open("/c/shared.dat", O_RDWR);
      if (!Check(fds[i] >= 0, "open")) return -1;
      struct stat st;
      if (i == 0 && t.Stat("/c/shared.dat", &st) == 0 && static_cast<uint64_t>(st.st_size) < file_bytes)
        for (uint64_t o = 0; o < file_bytes; o += kFill)
          if (!Check(t.Pwrite(fds[0], block.data(), kFill, static_cast<off_t>(o)) == kFill, "fill")) return -1;
    } else {
      t.Mkdir(dir_of(i));
    }
  }
  std::atomic<int> ready{0}, failed{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> ws;
  for (int i = 0; i < threads; i++)
    ws.emplace_back([&, i] {
      std::vector<char> buf(kIo, static_cast<char>('a' + i));
      std::string prefix = dir_of(i) + "/f" + std::to_string(i) + "-";
      ready++;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (uint64_t k = 0; k < ops && failed == 0; k++) {
        bool ok = true;
        switch (w.kind) {
          case Workload::kAppend: ok = t.Write(fds[i], buf.data(), kIo) == kIo; break;
          case Workload::kOverwrite:
          case Workload::kShared: {
            const ConcurrencyStep& s = plans[i][k];
            ok = (s.read ? t.Pread(fds[i], buf.data(), kIo, static_cast<off_t>(s.off))
                         : t.Pwrite(fds[i], buf.data(), kIo, static_cast<off_t>(s.off))) == kIo;
            break;
          }
          default: {
            int fd = t.Open(prefix + std::to_string(k), O_CREAT | O_EXCL | O_WRONLY);
            ok = fd >= 0 && t.Close(fd) == 0;
          }
        }
        if (!ok) failed = 1, Check(false, w.name.c_str());
      }
    });
  while (ready.load() < threads) std::this_thread::yield();
  uint64_t t0 = NowNs(), c0 = ProcessCpuNs();
  go.store(true, std::memory_order_release);
  for (auto& th : ws) th.join();
  uint64_t t1 = NowNs();
  if (cpu_ns != nullptr) *cpu_ns = static_cast<double>(ProcessCpuNs() - c0);
  for (int i = 0; i < threads; i++) {
    if (fds[i] >= 0) t.Close(fds[i]);
    if (w.kind == Workload::kAppend || w.kind == Workload::kOverwrite) t.Unlink(file_of(i));
    if (w.kind == Workload::kCreatePrivate || w.kind == Workload::kCreateShared) {
      for (uint64_t k = 0; k < ops; k++) t.Unlink(dir_of(i) + "/f" + std::to_string(i) + "-" + std::to_string(k));
      t.Rmdir(dir_of(i));
    }
  }
  if (w.kind == Workload::kShared) t.Unlink("/c/shared.dat");
  t.Rmdir("/c");
  return failed ? -1 : static_cast<double>(t1 - t0);
}

int RunConcurrencyBench(const ConcurrencyBenchOptions& o) {
  uint64_t ops = o.ops ? o.ops : o.quick ? 2000 : 20000;
  int repeat = o.repeat ? o.repeat : o.quick ? 1 : 3;
  uint64_t file_bytes = o.quick ? 16 * MiB : 64 * MiB;
  std::vector<int> tcounts;
  for (size_t i = 0; i < o.threads.size();) {
    size_t j = o.threads.find(',', i);
    if (j == std::string::npos) j = o.threads.size();
    int n = std::atoi(o.threads.substr(i, j - i).c_str());
    if (n < 1 || n > 256) return std::fprintf(stderr, "mapfs bench concurrency: bad --threads\n"), 2;
    tcounts.push_back(n);
    i = j + 1;
  }
  int max_t = *std::max_element(tcounts.begin(), tcounts.end());
  std::string tag = std::to_string(::getpid());
  std::string pool = o.dir + "/mapfs-bench-conc-" + tag + ".pool";
  std::string tdir = o.dir + "/mapfs-bench-conc-tmpfs-" + tag;
  uint64_t need = static_cast<uint64_t>(max_t) * std::max(ops * kIo, file_bytes) + file_bytes;
  struct mapfs_mkfs_options mk {};
  mk.size = std::max<uint64_t>(2 * need + 512 * MiB, 1 * GiB);
  mk.page_size = 4096;
  mk.mode = o.mode == "posix" ? MAPFS_MODE_POSIX : o.mode == "strict" ? MAPFS_MODE_STRICT : MAPFS_MODE_SYNC;
  if (!Check(mapfs_mkfs(pool.c_str(), &mk) == 0, "mkfs")) return 1;
  mapfs_t* fs = mapfs_mount(pool.c_str(), nullptr);
  if (fs == nullptr) {
    ::unlink(pool.c_str());
    return Check(false, "mount"), 1;
  }
  ::mkdir(tdir.c_str(), 0700);
  std::printf("mapfs bench concurrency; %s\n", MachineDescription().c_str());
  Ext4Baseline ext4_mount;
  std::vector<std::unique_ptr<Target>> targets;
  targets.push_back(std::make_unique<SyscallTarget>(tdir));
  if (MountExt4OrSay(ext4_mount, need + 512 * MiB, static_cast<uint64_t>(max_t) * ops, o.dir))
    targets.push_back(std::make_unique<SyscallTarget>(ext4_mount.dir(), "ext4"));
  targets.push_back(std::make_unique<MapfsTarget>(fs, o.mode));
  std::printf("\nconcurrency: threads %s on %ld cores, %llu ops per thread, 4 KiB I/O, shared file %s, median of %d\n",
              o.threads.c_str(), ::sysconf(_SC_NPROCESSORS_ONLN), static_cast<unsigned long long>(ops),
              FormatSize(file_bytes).c_str(), repeat);

  std::vector<Row> rows;
  int rc = 0;
  for (const ConcurrencyWorkload& w : ConcurrencyWorkloads()) {
    for (int threads : tcounts) {
      // Each thread's offsets and read/write choices, drawn before timing.
      ConcurrencyPlans plans = PlanConcurrency(w, threads, ops, file_bytes);
      std::vector<std::vector<double>> ns(targets.size());
      for (int r = 0; r < repeat && rc == 0; r++)
        for (size_t k = 0; k < targets.size() && rc == 0; k++) {
          Progress("concurrency %s, %d threads, %s, repeat %d of %d", w.name.c_str(), threads,
                   targets[k]->name.c_str(), r + 1, repeat);
          double t = RunConcurrencyOnce(*targets[k], w, threads, ops, file_bytes, plans, nullptr);
          if (t < 0) rc = 1;
          ns[k].push_back(t);
        }
      if (rc != 0) break;
      bool io = w.kind != ConcurrencyWorkload::kCreatePrivate && w.kind != ConcurrencyWorkload::kCreateShared;
      for (size_t k = 0; k < targets.size(); k++) {
        Row row{w.name, targets[k]->name, targets[k]->mode, "4k", 0, ops * threads, io ? ops * threads * kIo : 0,
                SpreadOf(ns[k])};
        row.threads = threads;
        rows.push_back(row);
      }
    }
    if (rc != 0) break;
  }
  ProgressDone();
  if (rc == 0) PrintRows(rows);
  targets.clear();
  mapfs_unmount(fs);
  ::unlink(pool.c_str());
  if (std::system(("rm -rf " + ShellQuote(tdir)).c_str()) != 0) std::fprintf(stderr, "mapfs bench: cannot remove %s\n", tdir.c_str());
  if (rc == 0 && !o.json.empty() && !WriteJson(o.json, "concurrency", rows)) {
    std::fprintf(stderr, "mapfs bench concurrency: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return rc;
}

}  // namespace mapfs::bench
