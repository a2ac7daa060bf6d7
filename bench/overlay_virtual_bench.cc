// mapfs-virtual-bench [DIR] [--size MiB] [--ops N]: the virtual overlay
// engine's costs on one directory (default /dev/shm), next to the kernel on
// the same directory. Not a test: it prints numbers, asserts nothing.
//   open      attach to a SIZE virtualized file (header check, mmap, replay
//             of the log since the checkpoint), with an empty log and with
//             4000 entries to replay; median of 200
//   overwrite 4 KiB at random aligned offsets of the SIZE file
//   append    4 KiB appends to an empty file
//   read      4 KiB at random aligned offsets
// mapfs-virtual-bench DIR --engines [--runs N]: the suite's `rw` workload
// (open, one 4 KiB overwrite at each of 4096 random aligned offsets of a
// 16 MiB file, close) through overlay::Engine for the split and virtual
// engines in posix mode and through the kernel, interleaved, N runs (default
// 15); prints the median CPU time per overwrite of the runs after the first
// (this thread's clock: load does not stretch it), open and close included.
// mapfs-virtual-bench DIR --suite [--runs N] [--only kernel|split|virtual]:
// the suite's `append` and `rw` workloads (posix mode, 16 MiB), without the
// rest of the suite, --only for a profile of one target. Unlike the suite
// (which repeats each workload back to back), each run does all three, so
// an append's unlink removes a rewritten file: per run and target, unlink + create + 4096 sequential
// 4 KiB writes + close (append), one sequential rewrite in ten writes (sw),
// then open + 4096 random overwrites + close (rw); kernel, split and virtual
// interleaved; median CPU us per 4 KiB op of all runs (the process's clock:
// engine threads included), the file's growth included as in the suite.
// mapfs-virtual-bench DIR --maps [--runs N]: what LevelDB does with each
// table it reads: open O_RDONLY, mmap a 2 MiB file PROT_READ MAP_SHARED,
// read 4 of its pages (or all 512), munmap, close; the virtual engine
// (through overlay::Engine, as the shim maps) and the kernel, interleaved;
// median CPU us per map of runs 2..N, 50 maps a run.
// mapfs-virtual-bench DIR --mapped-writes [--runs N] [--ops N]: 4 KiB
// overwrites at random aligned offsets of a 1 MiB virtualized file with no
// map of it, one (PROT_READ through the read-write description: a twin) and
// two (plus a writable, tracked one); median CPU ns per write of N runs of
// --ops writes (default 2000): what keeping the maps coherent costs a write.
#include <sys/mman.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "overlay/engine.h"
#include "overlay/virtual/vfile.h"

using namespace mapfs;
using namespace mapfs::overlay;
using Clock = std::chrono::steady_clock;

namespace {

// A point in time, on the wall clock and in this thread's CPU time: on a
// shared machine the wall clock counts waiting for a core too.
struct Stamp {
  Clock::time_point wall;
  double cpu_ns;
};
Stamp Now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return {Clock::now(), ts.tv_sec * 1e9 + ts.tv_nsec};
}
double Ns(Stamp a, Stamp b) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(b.wall - a.wall).count());
}
double CpuNs(Stamp a, Stamp b) { return b.cpu_ns - a.cpu_ns; }

[[noreturn]] void Die(const char* what, const Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
  std::exit(1);
}

std::unique_ptr<vrt::VFile> Attach(const std::string& path, Mode mode) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  auto f = vrt::VFile::Attach(fd, true, mode);
  close(fd);
  if (!f.ok()) Die("attach", f.status());
  return std::move(*f);
}

std::string MakeVirtual(const std::string& path, uint64_t bytes) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  vrt::FormatOptions o;
  o.vblocks_max = static_cast<uint32_t>(std::max<uint64_t>(bytes / 4096 * 2, 1u << 20));
  o.pblocks_max = std::min<uint32_t>(o.vblocks_max * 2, 1u << 24);
  Status s = vrt::Format(fd, o);
  close(fd);
  if (!s.ok()) Die("format", s);
  return path;
}

// Median wall and CPU time of 200 opens, in microseconds.
std::pair<double, double> MedianOpenUs(const std::string& path) {
  std::vector<double> t, c;
  for (int i = 0; i < 200; i++) {
    auto a = Now();
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    auto f = vrt::VFile::Attach(fd, true, Mode::kPosix);
    close(fd);
    auto b = Now();
    if (!f.ok()) Die("attach", f.status());
    t.push_back(Ns(a, b) / 1000);
    c.push_back(CpuNs(a, b) / 1000);
  }
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  return {t[t.size() / 2], c[c.size() / 2]};
}

// The engine loop (--engines): see the header comment.
int EngineLoop(const std::string& dir, int runs) {
  const uint64_t size = 16 << 20;
  std::vector<char> buf(size / 10, 'x');
  std::mt19937_64 rng(42);
  std::vector<uint64_t> offs(size / 4096);
  for (auto& x : offs) x = (rng() % (size / 4096)) * 4096;
  const std::string root = dir + "/mapfs-vbench-engines";
  (void)!std::system(("rm -rf '" + root + "'").c_str());
  mkdir(root.c_str(), 0755);
  struct Target {
    std::string name, path;
    std::unique_ptr<Engine> e;  // null: the kernel
    std::vector<double> us;
  };
  std::vector<Target> ts;
  for (auto [kind, name] : {std::pair{EngineKind::kSplit, "split"}, {EngineKind::kVirtual, "virtual"}}) {
    std::string d = root + "/" + name;
    mkdir(d.c_str(), 0755);
    auto e = OpenOverlay(Options{d, kind, Mode::kPosix});
    if (!e.ok()) Die("overlay", e.status());
    ts.push_back({name, d + "/f", std::move(*e), {}});
  }
  mkdir((root + "/kernel").c_str(), 0755);
  ts.push_back({"kernel", root + "/kernel/f", nullptr, {}});
  for (Target& t : ts) {  // the file, written once as the suite's `swe` does
    int fd = open(t.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (!t.e) {
      for (int i = 0; i < 10; i++) (void)!pwrite(fd, buf.data(), buf.size(), i * buf.size());
      close(fd);
      continue;
    }
    auto f = t.e->Adopt(fd, O_RDWR | O_CREAT | O_TRUNC);
    if (!f.ok()) Die("adopt", f.status());
    for (int i = 0; i < 10; i++)
      if (auto r = (*f)->Pwrite(buf.data(), buf.size(), i * buf.size()); !r.ok()) Die("write", r.status());
    (void)(*f)->Close();
  }
  for (int r = 0; r < runs; r++)
    for (Target& t : ts) {
      auto a = Now();
      int fd = open(t.path.c_str(), O_RDWR | O_CLOEXEC);
      if (!t.e) {
        for (uint64_t o : offs) (void)!pwrite(fd, buf.data(), 4096, static_cast<off_t>(o));
        close(fd);
      } else {
        auto f = t.e->Adopt(fd, O_RDWR);
        if (!f.ok()) Die("adopt", f.status());
        for (uint64_t o : offs)
          if (auto w = (*f)->Pwrite(buf.data(), 4096, o); !w.ok()) Die("overwrite", w.status());
        (void)(*f)->Close();
      }
      auto b = Now();
      if (r > 0) t.us.push_back(CpuNs(a, b) / offs.size() / 1000);
    }
  std::printf("rw through the engines in %s (16 MiB file, 4096 random 4 KiB overwrites per run, open and close "
              "included), CPU us per overwrite over runs 2..%d:\n",
              dir.c_str(), runs);
  for (Target& t : ts) {
    std::sort(t.us.begin(), t.us.end());
    if (t.us.empty()) continue;
    std::printf("  %-8s median %6.3f  min %6.3f  max %6.3f\n", t.name.c_str(), t.us[t.us.size() / 2], t.us.front(),
                t.us.back());
  }
  ts.clear();
  (void)!std::system(("rm -rf '" + root + "'").c_str());
  return 0;
}

// The map loop (--maps): see the header comment.
int MapLoop(const std::string& dir, int runs) {
  const size_t len = 2 << 20, page = 4096, maps = 50;
  const std::string root = dir + "/mapfs-vbench-maps";
  (void)!std::system(("rm -rf '" + root + "'").c_str());
  mkdir(root.c_str(), 0755);
  auto e = OpenOverlay(Options{root, EngineKind::kVirtual, Mode::kPosix});
  if (!e.ok()) Die("overlay", e.status());
  std::vector<char> buf(len, 'm');
  const std::string vpath = root + "/v", kpath = root + "/k";
  {
    int fd = open(vpath.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    auto f = (*e)->Adopt(fd, O_RDWR | O_CREAT | O_TRUNC);
    if (!f.ok()) Die("adopt", f.status());
    if (auto w = (*f)->Pwrite(buf.data(), len, 0); !w.ok()) Die("write", w.status());
    (void)(*f)->Close();
    fd = open(kpath.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (pwrite(fd, buf.data(), len, 0) != static_cast<ssize_t>(len)) Die("write", Status::FromErrno("pwrite"));
    close(fd);
  }
  std::mt19937_64 rng(7);
  volatile char sink = 0;
  std::vector<double> us[2][2];  // [virtual?][whole?]
  for (int r = 0; r < runs; r++)
    for (int whole = 0; whole < 2; whole++)
      for (int virt = 0; virt < 2; virt++) {
        auto a = Now();
        for (size_t m = 0; m < maps; m++) {
          int fd = open((virt ? vpath : kpath).c_str(), O_RDONLY | O_CLOEXEC);
          std::unique_ptr<OverlayFile> f;
          char* p;
          if (virt) {
            auto g = (*e)->Adopt(fd, O_RDONLY);
            if (!g.ok()) Die("adopt", g.status());
            f = std::move(*g);
            auto q = f->Map(nullptr, len, PROT_READ, MAP_SHARED, 0);
            if (!q.ok()) Die("map", q.status());
            p = static_cast<char*>(*q);
          } else {
            void* q = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
            if (q == MAP_FAILED) Die("mmap", Status::FromErrno("mmap"));
            p = static_cast<char*>(q);
          }
          for (size_t k = 0; k < (whole ? len / page : 4); k++) sink = sink + p[(whole ? k : rng() % (len / page)) * page];
          if (virt && !(*e)->UnmapViews(p, len).ok()) Die("unmap", Status::Error(EIO, "views"));
          munmap(p, len);
          if (f) (void)f->Close();
          else close(fd);
        }
        auto b = Now();
        if (r > 0) us[virt][whole].push_back(CpuNs(a, b) / maps / 1000);
      }
  std::printf("maps of a 2 MiB file in %s (open O_RDONLY, mmap PROT_READ MAP_SHARED, reads, munmap, close), "
              "CPU us per map, median of runs 2..%d:\n",
              dir.c_str(), runs);
  for (int whole = 0; whole < 2; whole++)
    for (int virt = 0; virt < 2; virt++) {
      auto& v = us[virt][whole];
      std::sort(v.begin(), v.end());
      std::printf("  %-8s %-14s median %8.1f  min %8.1f  max %8.1f\n", virt ? "virtual" : "kernel",
                  whole ? "512 pages read" : "4 pages read", v[v.size() / 2], v.front(), v.back());
    }
  e->reset();
  (void)!std::system(("rm -rf '" + root + "'").c_str());
  return 0;
}

// The mapped-writes loop (--mapped-writes): see the header comment.
int MappedWriteLoop(const std::string& dir, int runs, uint64_t ops) {
  const size_t len = 1 << 20, page = 4096;
  const std::string root = dir + "/mapfs-vbench-mapped";
  (void)!std::system(("rm -rf '" + root + "'").c_str());
  mkdir(root.c_str(), 0755);
  setenv("MAPFS_OVERLAY_TRACK_FROM", "1", 1);  // the second map tracked
  auto e = OpenOverlay(Options{root, EngineKind::kVirtual, Mode::kPosix});
  if (!e.ok()) Die("overlay", e.status());
  const std::string path = root + "/v";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  auto f = (*e)->Adopt(fd, O_RDWR | O_CREAT | O_TRUNC);
  if (!f.ok()) Die("adopt", f.status());
  std::vector<char> buf(len, 'w');
  if (auto w = (*f)->Pwrite(buf.data(), len, 0); !w.ok()) Die("write", w.status());
  std::mt19937_64 rng(7);
  std::vector<void*> maps;
  std::printf("4 KiB overwrites of a 1 MiB virtualized file in %s, CPU ns per write, median of %d runs of %llu:\n",
              dir.c_str(), runs, static_cast<unsigned long long>(ops));
  for (int nmaps = 0; nmaps <= 2; nmaps++) {
    if (nmaps > 0) {
      int prot = nmaps == 1 ? PROT_READ : PROT_READ | PROT_WRITE;
      auto m = (*f)->Map(nullptr, len, prot, MAP_SHARED, 0);
      if (!m.ok()) Die("map", m.status());
      maps.push_back(*m);
    }
    std::vector<double> ns;
    for (int r = 0; r < runs; r++) {
      auto a = Now();
      for (uint64_t i = 0; i < ops; i++) {
        buf[0] = static_cast<char>(i);
        if (auto w = (*f)->Pwrite(buf.data(), page, rng() % (len / page) * page); !w.ok()) Die("write", w.status());
      }
      ns.push_back(CpuNs(a, Now()) / static_cast<double>(ops));
    }
    std::sort(ns.begin(), ns.end());
    std::printf("  %d map%s  median %7.0f  min %7.0f  max %7.0f\n", nmaps, nmaps == 1 ? " " : "s", ns[ns.size() / 2],
                ns.front(), ns.back());
  }
  for (void* m : maps) {
    (void)(*e)->UnmapViews(m, len);
    munmap(m, len);
  }
  (void)(*f)->Close();
  e->reset();
  (void)!std::system(("rm -rf '" + root + "'").c_str());
  return 0;
}

// The suite's append and rw (--suite): see the header comment.
int SuiteLoop(const std::string& dir, int runs, const std::string& only) {
  const uint64_t size = 16 << 20;
  std::vector<char> buf(size / 10, 'x');
  std::mt19937_64 rng(42);
  std::vector<uint64_t> offs(size / 4096);
  for (auto& x : offs) x = (rng() % (size / 4096)) * 4096;
  const std::string root = dir + "/mapfs-vbench-suite";
  (void)!std::system(("rm -rf '" + root + "'").c_str());
  mkdir(root.c_str(), 0755);
  struct Target {
    std::string name, path;
    std::unique_ptr<Engine> e;  // null: the kernel
    std::vector<double> app, rw;
  };
  std::vector<Target> ts;
  mkdir((root + "/kernel").c_str(), 0755);
  ts.push_back({"kernel", root + "/kernel/f", nullptr, {}, {}});
  for (auto [kind, name] : {std::pair{EngineKind::kSplit, "split"}, {EngineKind::kVirtual, "virtual"}}) {
    std::string d = root + "/" + name;
    mkdir(d.c_str(), 0755);
    auto e = OpenOverlay(Options{d, kind, Mode::kPosix});
    if (!e.ok()) Die("overlay", e.status());
    ts.push_back({name, d + "/f", std::move(*e), {}, {}});
  }
  auto cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
  };
  // One workload on one target: `fn` gets the file (null for the kernel) and
  // the kernel descriptor.
  auto run = [](Target& t, int flags, auto&& fn) {
    int fd = open(t.path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd < 0) Die("open", Status::FromErrno("open"));
    if (!t.e) {
      fn(nullptr, fd);
      close(fd);
      return;
    }
    auto f = t.e->Adopt(fd, flags);
    if (!f.ok()) Die("adopt", f.status());
    fn(f->get(), fd);
    if (Status s = (*f)->Close(); !s.ok()) Die("close", s);
  };
  if (!only.empty())
    ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const Target& t) { return t.name != only; }), ts.end());
  for (int r = 0; r < runs; r++)
    for (Target& t : ts) {
      double c0 = cpu();
      unlink(t.path.c_str());
      run(t, O_RDWR | O_CREAT | O_TRUNC, [&](OverlayFile* f, int fd) {
        for (uint64_t o = 0; o < size; o += 4096) {
          if (!f) {
            (void)!write(fd, buf.data(), 4096);
          } else if (auto w = f->Pwrite(buf.data(), 4096, o); !w.ok()) {
            Die("append", w.status());
          }
        }
      });
      t.app.push_back((cpu() - c0) / offs.size() / 1000);
      run(t, O_RDWR, [&](OverlayFile* f, int fd) {
        for (int i = 0; i < 10; i++) {
          if (!f) {
            (void)!pwrite(fd, buf.data(), buf.size(), i * buf.size());
          } else if (auto w = f->Pwrite(buf.data(), buf.size(), i * buf.size()); !w.ok()) {
            Die("sw", w.status());
          }
        }
      });
      c0 = cpu();
      run(t, O_RDWR, [&](OverlayFile* f, int fd) {
        for (uint64_t o : offs) {
          if (!f) {
            (void)!pwrite(fd, buf.data(), 4096, static_cast<off_t>(o));
          } else if (auto w = f->Pwrite(buf.data(), 4096, o); !w.ok()) {
            Die("rw", w.status());
          }
        }
      });
      t.rw.push_back((cpu() - c0) / offs.size() / 1000);
    }
  std::printf("the suite's append and rw in %s (16 MiB file, 4 KiB ops, posix), process CPU us per op, %d runs:\n",
              dir.c_str(), runs);
  for (Target& t : ts)
    for (auto* v : {&t.app, &t.rw}) {
      std::sort(v->begin(), v->end());
      std::printf("  %-8s %-6s median %6.3f  min %6.3f  max %6.3f\n", t.name.c_str(), v == &t.app ? "append" : "rw",
                  (*v)[v->size() / 2], v->front(), v->back());
    }
  ts.clear();
  (void)!std::system(("rm -rf '" + root + "'").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/dev/shm";
  uint64_t size_mib = 1024, ops = 100000;
  bool engines = false, suite = false, maps = false, mapped_writes = false;
  bool ops_given = false;
  std::string only;  // --suite: one target only (for a profile)
  int runs = 15;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--engines") engines = true;
    else if (a == "--suite") suite = true;
    else if (a == "--maps") maps = true;
    else if (a == "--mapped-writes") mapped_writes = true;
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--runs" && i + 1 < argc) runs = std::max(2, std::atoi(argv[++i]));
    else if (a == "--size" && i + 1 < argc) size_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--ops" && i + 1 < argc) ops = std::strtoull(argv[++i], nullptr, 10), ops_given = true;
    else dir = a;
  }
  if (engines) return EngineLoop(dir, runs);
  if (suite) return SuiteLoop(dir, runs, only);
  if (maps) return MapLoop(dir, runs);
  if (mapped_writes) return MappedWriteLoop(dir, runs, ops_given ? ops : 2000);
  const uint64_t size = size_mib << 20;
  const std::string vpath = dir + "/mapfs-vbench.virt", ppath = dir + "/mapfs-vbench.plain",
                    apath = dir + "/mapfs-vbench.app", kpath = dir + "/mapfs-vbench.kapp";
  std::vector<char> buf(1 << 20, 'v');
  std::printf("virtual engine bench in %s, file %llu MiB, %llu ops, persist domain as configured\n", dir.c_str(),
              static_cast<unsigned long long>(size_mib), static_cast<unsigned long long>(ops));

  // Fill a SIZE file (1 MiB writes), checkpoint, and time opens.
  MakeVirtual(vpath, size);
  {
    auto f = Attach(vpath, Mode::kPosix);
    for (uint64_t off = 0; off < size; off += buf.size())
      if (auto r = f->Pwrite(buf.data(), buf.size(), off); !r.ok()) Die("fill", r.status());
    if (Status s = f->Gc(true); !s.ok()) Die("gc", s);
  }
  auto o1 = MedianOpenUs(vpath);
  std::printf("open %llu MiB file, log empty:              wall %8.1f us, cpu %8.1f us (median of 200)\n",
              static_cast<unsigned long long>(size_mib), o1.first, o1.second);
  std::mt19937_64 rng(1);
  const uint64_t blocks = size / 4096;
  {
    auto f = Attach(vpath, Mode::kPosix);
    for (int i = 0; i < 4000; i++) (void)f->Pwrite(buf.data(), 4096, (rng() % blocks) * 4096);
  }
  auto o2 = MedianOpenUs(vpath);
  std::printf("open %llu MiB file, 4000 entries to replay: wall %8.1f us, cpu %8.1f us\n",
              static_cast<unsigned long long>(size_mib), o2.first, o2.second);

  // 4 KiB overwrites and reads: virtual (posix, strict) vs the kernel.
  {
    int pfd = open(ppath.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    for (uint64_t off = 0; off < size; off += buf.size()) (void)!pwrite(pfd, buf.data(), buf.size(), off);
    auto a = Now();
    for (uint64_t i = 0; i < ops; i++) (void)!pwrite(pfd, buf.data(), 4096, (rng() % blocks) * 4096);
    auto b = Now();
    std::printf("%-40s wall %8.0f ns/op, cpu %8.0f ns/op\n", "4 KiB overwrite, kernel pwrite", Ns(a, b) / ops, CpuNs(a, b) / ops);
    a = Now();
    for (uint64_t i = 0; i < ops; i++) (void)!pread(pfd, buf.data(), 4096, (rng() % blocks) * 4096);
    b = Now();
    std::printf("%-40s wall %8.0f ns/op, cpu %8.0f ns/op\n", "4 KiB read, kernel pread", Ns(a, b) / ops, CpuNs(a, b) / ops);
    close(pfd);
    unlink(ppath.c_str());
  }
  for (Mode m : {Mode::kPosix, Mode::kStrict}) {
    auto f = Attach(vpath, m);
    auto a = Now();
    for (uint64_t i = 0; i < ops; i++)
      if (auto r = f->Pwrite(buf.data(), 4096, (rng() % blocks) * 4096); !r.ok()) Die("overwrite", r.status());
    auto b = Now();
    std::printf("%-40s wall %8.0f ns/op, cpu %8.0f ns/op\n",
                m == Mode::kPosix ? "4 KiB overwrite, virtual posix" : "4 KiB overwrite, virtual strict", Ns(a, b) / ops,
                CpuNs(a, b) / ops);
  }
  {
    auto f = Attach(vpath, Mode::kPosix);
    auto a = Now();
    for (uint64_t i = 0; i < ops; i++)
      if (auto r = f->Pread(buf.data(), 4096, (rng() % blocks) * 4096); !r.ok()) Die("read", r.status());
    auto b = Now();
    std::printf("%-40s wall %8.0f ns/op, cpu %8.0f ns/op\n", "4 KiB read, virtual", Ns(a, b) / ops, CpuNs(a, b) / ops);
  }
  unlink(vpath.c_str());

  // 4 KiB appends to an empty file.
  {
    int kfd = open(kpath.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    auto a = Now();
    for (uint64_t i = 0; i < ops; i++) (void)!write(kfd, buf.data(), 4096);
    auto b = Now();
    std::printf("%-40s wall %8.0f ns/op, cpu %8.0f ns/op\n", "4 KiB append, kernel write(O_APPEND)", Ns(a, b) / ops, CpuNs(a, b) / ops);
    close(kfd);
    unlink(kpath.c_str());
  }
  for (Mode m : {Mode::kPosix, Mode::kStrict}) {
    MakeVirtual(apath, ops * 4096);
    auto f = Attach(apath, m);
    auto a = Now();
    for (uint64_t i = 0; i < ops; i++)
      if (auto r = f->Append(buf.data(), 4096); !r.ok()) Die("append", r.status());
    auto b = Now();
    std::printf("%-40s wall %8.0f ns/op, cpu %8.0f ns/op\n",
                m == Mode::kPosix ? "4 KiB append, virtual posix" : "4 KiB append, virtual strict", Ns(a, b) / ops,
                CpuNs(a, b) / ops);
    f.reset();
    unlink(apath.c_str());
  }
  return 0;
}
