// Filebench's fileserver and webproxy personalities (filebench_workloads.h).
#include "filebench_workloads.h"

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <thread>

#include "bench_util.h"

namespace mapfs::bench {

FilebenchSpec Fileserver(uint64_t files, uint64_t loops, int threads) {
  FilebenchSpec s;
  s.personality = "fileserver";
  s.files = files, s.loops = loops, s.threads = threads;
  s.mean_bytes = 128 * 1024, s.width = 20;
  return s;
}

FilebenchSpec Webproxy(uint64_t files, uint64_t loops, int threads) {
  FilebenchSpec s;
  s.personality = "webproxy";
  s.files = files, s.loops = loops, s.threads = threads;
  s.mean_bytes = 16 * 1024, s.width = 0;  // filebench: dirwidth 1,000,000, one directory
  return s;
}

Filebench::Filebench(FilebenchSpec s) : s_(std::move(s)), e_(s_.files) {
  // filebench draws each entry's size once, gamma with shape 1.5 around the mean.
  std::mt19937_64 rng(s_.seed);
  std::gamma_distribution<double> size(1.5, static_cast<double>(s_.mean_bytes) / 1.5);
  for (Entry& e : e_) e.bytes = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(size(rng))));
}

uint64_t Filebench::ops_per_loop() const { return s_.personality == "webproxy" ? 20 : 11; }

std::string Filebench::Path(uint64_t i) const {
  if (s_.width == 0) return s_.root + "/f" + std::to_string(i);
  const uint64_t leaf = i / s_.width, parent = leaf / s_.width;
  return s_.root + "/p" + std::to_string(parent) + "/l" + std::to_string(leaf) + "/f" + std::to_string(i);
}

std::string Filebench::LogPath(int thread) const { return s_.root + "/log" + std::to_string(thread); }

// A tree of mean width `width`: leaves of `width` files under parents of
// `width` leaves (2,000 files at width 20: 5 parents, 100 leaves).
std::vector<std::string> Filebench::Dirs() const {
  std::vector<std::string> d = {s_.root};
  if (s_.width == 0 || s_.files == 0) return d;
  const uint64_t leaves = (s_.files + s_.width - 1) / s_.width;
  for (uint64_t leaf = 0; leaf < leaves; leaf++) {
    const uint64_t parent = leaf / s_.width;
    if (leaf % s_.width == 0) d.push_back(s_.root + "/p" + std::to_string(parent));
    d.push_back(s_.root + "/p" + std::to_string(parent) + "/l" + std::to_string(leaf));
  }
  return d;
}

bool Filebench::WriteWhole(Target& t, const std::string& p, uint64_t bytes, const std::vector<char>& buf) {
  int fd = t.Open(p, O_CREAT | O_EXCL | O_WRONLY);
  if (!Check(fd >= 0, "filebench create")) return false;
  bool ok = true;
  for (uint64_t done = 0; ok && done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(s_.io, bytes - done));
    ok = Check(t.Write(fd, buf.data(), n) == static_cast<ssize_t>(n), "filebench write");
    done += n;
  }
  return Check(t.Close(fd) == 0, "filebench close") && ok;
}

bool Filebench::Prepare(Target& t) {
  for (const std::string& d : Dirs())
    if (!Check(t.Mkdir(d) == 0, "filebench mkdir")) return false;
  std::vector<uint64_t> order(e_.size());
  for (uint64_t i = 0; i < order.size(); i++) order[i] = i;
  std::mt19937_64 rng(s_.seed + 1);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<char> buf(s_.io, 0x5a);
  for (uint64_t k = 0; k < order.size() * 80 / 100; k++) {
    Entry& e = e_[order[k]];
    if (!WriteWhole(t, Path(order[k]), e.bytes, buf)) return false;
    e.exists = true;
  }
  return true;
}

bool Filebench::ThreadRun(Target& t, int tid, uint64_t* ops, uint64_t* bytes) {
  // This thread's entries, split into existing and free; a pick takes a
  // random one and moves it (swap with the last) in O(1).
  std::vector<uint64_t> live, free;
  for (uint64_t i = static_cast<uint64_t>(tid); i < e_.size(); i += static_cast<uint64_t>(s_.threads))
    (e_[i].exists ? live : free).push_back(i);
  std::mt19937_64 rng(s_.seed * 1000 + static_cast<uint64_t>(tid));
  auto take = [&](std::vector<uint64_t>& from) {
    const size_t k = static_cast<size_t>(rng() % from.size());
    const uint64_t i = from[k];
    from[k] = from.back();
    from.pop_back();
    return i;
  };
  auto any = [&](const std::vector<uint64_t>& from) { return from[static_cast<size_t>(rng() % from.size())]; };
  std::vector<char> buf(std::max(s_.io, s_.append), 0x5a);
  auto read_whole = [&](uint64_t i) {
    int fd = t.Open(Path(i), O_RDONLY);
    if (!Check(fd >= 0, "filebench open")) return false;
    ssize_t n = 0;
    for (off_t off = 0; (n = t.Pread(fd, buf.data(), s_.io, off)) > 0; off += n) *bytes += static_cast<uint64_t>(n);
    return Check(n == 0, "filebench read") && Check(t.Close(fd) == 0, "filebench close");
  };
  auto append_to = [&](int fd) {
    const size_t n = static_cast<size_t>(1 + rng() % s_.append);
    *bytes += n;
    return Check(t.Write(fd, buf.data(), n) == static_cast<ssize_t>(n), "filebench append");
  };
  auto create = [&]() {
    const uint64_t i = take(free);
    if (!WriteWhole(t, Path(i), e_[i].bytes, buf)) return false;
    *bytes += e_[i].bytes;
    live.push_back(i);
    return true;
  };
  auto remove = [&]() {
    const uint64_t i = take(live);
    free.push_back(i);
    return Check(t.Unlink(Path(i)) == 0, "filebench delete");
  };
  const bool web = s_.personality == "webproxy";
  int log = -1;
  if (web && !Check((log = t.Open(LogPath(tid), O_CREAT | O_WRONLY | O_APPEND)) >= 0, "filebench log open"))
    return false;
  bool ok = true;
  for (uint64_t l = 0; ok && l < s_.loops; l++) {
    // Both flows keep the live share: one delete and one create a loop.
    if (live.size() < 2 || free.empty()) return Check(false, "filebench: a thread needs 2 live and 1 free entries");
    if (web) {
      ok = remove() && create();
      for (int r = 0; ok && r < 5; r++) ok = read_whole(any(live));
      ok = ok && append_to(log);
    } else {
      ok = create();
      if (ok) {
        int fd = t.Open(Path(any(live)), O_WRONLY | O_APPEND);
        ok = Check(fd >= 0, "filebench open") && append_to(fd) && Check(t.Close(fd) == 0, "filebench close");
      }
      ok = ok && read_whole(any(live)) && remove();
      struct stat st;
      ok = ok && Check(t.Stat(Path(any(live)), &st) == 0, "filebench stat");
    }
    if (ok) *ops += ops_per_loop();
  }
  if (log >= 0) ok = Check(t.Close(log) == 0, "filebench log close") && ok;
  for (uint64_t i : live) e_[i].exists = true;
  for (uint64_t i : free) e_[i].exists = false;
  return ok;
}

bool Filebench::Run(Target& t, FilebenchResult* r) {
  *r = FilebenchResult{};
  const int n = std::max(1, s_.threads);
  std::vector<uint64_t> ops(n), bytes(n);
  std::vector<char> ok(n, 0);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> th;
  for (int i = 0; i < n; i++)
    th.emplace_back([&, i] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      ok[i] = ThreadRun(t, i, &ops[i], &bytes[i]);
    });
  while (ready.load() < n) std::this_thread::yield();
  const uint64_t w0 = NowNs(), c0 = ProcessCpuNs();
  go.store(true, std::memory_order_release);
  for (auto& x : th) x.join();
  r->wall_ns = static_cast<double>(NowNs() - w0);
  r->cpu_ns = static_cast<double>(ProcessCpuNs() - c0);
  for (int i = 0; i < n; i++) r->ops += ops[i], r->bytes += bytes[i];
  return std::all_of(ok.begin(), ok.end(), [](char x) { return x != 0; });
}

void Filebench::Cleanup(Target& t) {
  for (uint64_t i = 0; i < e_.size(); i++)
    if (e_[i].exists) (void)t.Unlink(Path(i));
  for (int i = 0; i < std::max(1, s_.threads); i++) (void)t.Unlink(LogPath(i));
  std::vector<std::string> d = Dirs();
  for (auto it = d.rbegin(); it != d.rend(); ++it) (void)t.Rmdir(*it);
}

}  // namespace mapfs::bench
