#include "fs_ops.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "bench_util.h"
#include "ext4_baseline.h"
#include "fs_targets.h"
#include "common/units.h"
#include "mapfs/mapfs.h"
#include "medium/persist.h"

namespace mapfs::bench {

constexpr size_t kIo = 4096;

double MicroRun(Target& t, const std::string& w, uint64_t size, char* buf, const std::vector<uint64_t>& offs) {
  const std::string f = "/micro.dat";
  uint64_t t0 = 0, t1 = 0;
  if (w == "append" || w == "swe") {
    t.Unlink(f);
    int fd = t.Open(f, O_CREAT | O_WRONLY | O_TRUNC);
    if (!Check(fd >= 0, "open")) return -1;
    t0 = NowNs();
    if (w == "append") {
      for (uint64_t o = 0; o < size; o += kIo)
        if (t.Write(fd, buf, kIo) != static_cast<ssize_t>(kIo)) return Check(false, "append"), -1;
    } else {
      for (int i = 0; i < 10; i++)
        if (t.Write(fd, buf, size / 10) != static_cast<ssize_t>(size / 10)) return Check(false, "write"), -1;
    }
    t1 = NowNs();
    t.Close(fd);
    return static_cast<double>(t1 - t0);
  }
  int fd = t.Open(f, O_RDWR);
  if (!Check(fd >= 0, "open existing")) return -1;
  t0 = NowNs();
  if (w == "rw") {
    for (uint64_t o : offs)
      if (t.Pwrite(fd, buf, kIo, static_cast<off_t>(o)) != static_cast<ssize_t>(kIo)) return Check(false, "pwrite"), -1;
  } else if (w == "rr") {
    for (uint64_t o : offs)
      if (t.Pread(fd, buf, kIo, static_cast<off_t>(o)) != static_cast<ssize_t>(kIo)) return Check(false, "pread"), -1;
  } else if (w == "sw") {
    for (int i = 0; i < 10; i++)
      if (t.Pwrite(fd, buf, size / 10, static_cast<off_t>(i * (size / 10))) != static_cast<ssize_t>(size / 10))
        return Check(false, "pwrite"), -1;
  } else if (w == "sr") {
    for (int i = 0; i < 10; i++)
      if (t.Pread(fd, buf, size / 10, static_cast<off_t>(i * (size / 10))) != static_cast<ssize_t>(size / 10))
        return Check(false, "pread"), -1;
  }
  t1 = NowNs();
  t.Close(fd);
  return static_cast<double>(t1 - t0);
}

bool MetaRun(Target& x, uint64_t n, double ns[5]) {
  x.Mkdir("/meta");
  auto path = [](uint64_t i, const char* p) { return std::string("/meta/") + p + std::to_string(i); };
  struct stat st;
  uint64_t t0 = NowNs();
  for (uint64_t i = 0; i < n; i++) {
    int fd = x.Open(path(i, "f"), O_CREAT | O_WRONLY | O_EXCL);
    if (!Check(fd >= 0, "create")) return false;
    x.Close(fd);
  }
  uint64_t t1 = NowNs();
  for (uint64_t i = 0; i < n; i++) {
    int fd = x.Open(path(i, "f"), O_RDONLY);
    if (!Check(fd >= 0, "open")) return false;
    x.Close(fd);
  }
  uint64_t t2 = NowNs();
  for (uint64_t i = 0; i < n; i++)
    if (!Check(x.Stat(path(i, "f"), &st) == 0, "stat")) return false;
  uint64_t t3 = NowNs();
  for (uint64_t i = 0; i < n; i++)
    if (!Check(x.Rename(path(i, "f"), path(i, "g")) == 0, "rename")) return false;
  uint64_t t4 = NowNs();
  for (uint64_t i = 0; i < n; i++)
    if (!Check(x.Unlink(path(i, "g")) == 0, "unlink")) return false;
  uint64_t t5 = NowNs();
  x.Rmdir("/meta");
  uint64_t ts[] = {t0, t1, t2, t3, t4, t5};
  for (int w = 0; w < 5; w++) ns[w] = static_cast<double>(ts[w + 1] - ts[w]);
  return true;
}

namespace {

// The floor: the same bytes with the raw primitives on a mapped file.
double FloorRun(char* map, const std::string& w, uint64_t size, char* buf, const std::vector<uint64_t>& offs) {
  uint64_t t0 = NowNs();
  if (w == "append" || w == "rw") {
    if (w == "append")
      for (uint64_t o = 0; o < size; o += kIo) medium::CopyNt(map + o, buf, kIo), medium::Fence();
    else
      for (uint64_t o : offs) medium::CopyNt(map + o, buf, kIo), medium::Fence();
  } else if (w == "rr") {
    for (uint64_t o : offs) std::memcpy(buf, map + o, kIo);
  } else if (w == "sw" || w == "swe") {
    for (int i = 0; i < 10; i++) medium::CopyNt(map + i * (size / 10), buf, size / 10), medium::Fence();
  } else if (w == "sr") {
    for (int i = 0; i < 10; i++) std::memcpy(buf, map + i * (size / 10), size / 10);
  }
  return static_cast<double>(NowNs() - t0);
}

// A second mapfs pool with 2 MiB pages for micro, on a private tmpfs mounted
// huge=always where this process may mount one (as pswap does), else in the
// bench directory without huge pages (said so).
class HugePagePool {
 public:
  ~HugePagePool() {
    if (fs_ != nullptr) mapfs_unmount(fs_);
    if (!pool_.empty()) ::unlink(pool_.c_str());
    if (mounted_) ::umount(dir_.c_str());
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  mapfs_t* Make(const std::string& shm_dir, uint64_t bytes) {
    dir_ = "/tmp/mapfs-bench-micro-huge-" + std::to_string(::getpid());
    std::string where = shm_dir, note = "huge pages off: cannot mount a huge=always tmpfs";
    if (::mkdir(dir_.c_str(), 0700) == 0) {
      std::string opts = "huge=always,size=" + std::to_string(bytes + 64 * MiB);
      if (::mount("mapfs-bench", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0)
        mounted_ = true, where = dir_, note = "huge=always tmpfs";
      else
        note += std::string(" (") + std::strerror(errno) + ")";
    }
    pool_ = where + "/mapfs-bench-2m-" + std::to_string(::getpid()) + ".pool";
    struct mapfs_mkfs_options mk {};
    mk.size = bytes;
    mk.page_size = 2 * MiB;
    mk.mode = MAPFS_MODE_SYNC;
    if (!Check(mapfs_mkfs(pool_.c_str(), &mk) == 0, "mkfs (2 MiB pages)")) return nullptr;
    fs_ = mapfs_mount(pool_.c_str(), nullptr);
    if (fs_ != nullptr) std::printf("2 MiB pages: a pool on %s\n", note.c_str());
    return fs_;
  }

 private:
  std::string dir_, pool_;
  bool mounted_ = false;
  mapfs_t* fs_ = nullptr;
};

int RunMicro(const FsBenchOptions& o, mapfs_t* fs, SyscallTarget& tmp, SyscallTarget* ext4, std::vector<Row>& rows) {
  uint64_t size = o.size ? o.size : o.quick ? 64 * MiB : 1 * GiB;
  size = AlignDown(size, 10 * kIo);
  int repeat = o.repeat ? o.repeat : o.quick ? 2 : 3;
  std::vector<char> big(size / 10 + kIo, 'x');
  char* buf = big.data();
  std::mt19937_64 rng(42);
  std::vector<uint64_t> offs(size / kIo);
  for (auto& x : offs) x = (rng() % (size / kIo)) * kIo;
  // Floor file.
  std::string floor_path = o.dir + "/mapfs-bench-floor-" + std::to_string(getpid());
  int ffd = ::open(floor_path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
  if (ffd < 0 || ::ftruncate(ffd, static_cast<off_t>(size)) != 0) return Check(false, "floor file"), 1;
  char* map = static_cast<char*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ffd, 0));
  ::close(ffd);
  ::unlink(floor_path.c_str());
  if (map == MAP_FAILED) return Check(false, "mmap floor"), 1;

  std::vector<std::unique_ptr<Target>> targets;
  targets.push_back(std::make_unique<SyscallTarget>(tmp));
  if (ext4 != nullptr) targets.push_back(std::make_unique<SyscallTarget>(*ext4));
  HugePagePool huge;
  mapfs_t* fs2m = o.pages.find("2m") != std::string::npos ? huge.Make(o.dir, std::max<uint64_t>(3 * size + 512 * MiB, 1 * GiB)) : nullptr;
  if (o.pages.find("2m") != std::string::npos && fs2m == nullptr) return 1;
  for (mapfs_t* f : {o.pages.find("4k") != std::string::npos ? fs : nullptr, fs2m}) {
    if (f == nullptr) continue;
    for (size_t i = 0; i < o.modes.size();) {
      size_t j = o.modes.find(',', i);
      if (j == std::string::npos) j = o.modes.size();
      targets.push_back(std::make_unique<MapfsTarget>(f, o.modes.substr(i, j - i)));
      if (f == fs2m) targets.back()->page = "2m";
      i = j + 1;
    }
  }
  if (!o.preload_root.empty()) targets.push_back(std::make_unique<SyscallTarget>(o.preload_root, "mapfs-preload", "sync"));
  if (!o.fuse_root.empty()) targets.push_back(std::make_unique<SyscallTarget>(o.fuse_root, "mapfs-fuse", "sync"));
  std::printf("\nmicro: file of %s, 4 KiB I/O, median of %d\n", FormatSize(size).c_str(), repeat);
  for (std::string w : {"append", "swe", "sw", "sr", "rw", "rr"}) {
    uint64_t ops = (w == "rw" || w == "rr" || w == "append") ? size / kIo : 10;
    std::vector<std::vector<double>> t(targets.size());
    std::vector<double> fl;
    for (int r = 0; r < repeat; r++) {
      Progress("micro %s, repeat %d of %d", w.c_str(), r + 1, repeat);
      fl.push_back(FloorRun(map, w, size, buf, offs));
      for (size_t k = 0; k < targets.size(); k++) {
        if (w != "append" && w != "swe") {
          // Reads and overwrites need the file: write it once per target.
          struct stat st;
          if (targets[k]->Stat("/micro.dat", &st) != 0 || static_cast<uint64_t>(st.st_size) != size)
            if (MicroRun(*targets[k], "swe", size, buf, offs) < 0) return 1;
        }
        double ns = MicroRun(*targets[k], w, size, buf, offs);
        if (ns < 0) return 1;
        t[k].push_back(ns);
      }
    }
    rows.push_back({w, "floor", "-", "4k", 0, ops, size, SpreadOf(fl)});
    for (size_t k = 0; k < targets.size(); k++)
      rows.push_back({w, targets[k]->name, targets[k]->mode, targets[k]->page, 0, ops, size, SpreadOf(t[k])});
  }
  ProgressDone();
  PrintRows(rows);
  for (auto& tg : targets) tg->Unlink("/micro.dat");
  ::munmap(map, size);
  return 0;
}

uint64_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<uint64_t>(resident) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// ctFS Table 3's mount row: mapfs_mount of an 8 GiB pool holding `n` files
// (unmounted in between), and the process's resident memory it adds.
bool MeasureMount(const FsBenchOptions& o, uint64_t n, int repeat, std::vector<Row>& rows) {
  std::string pool = o.dir + "/mapfs-bench-mount-" + std::to_string(::getpid()) + ".pool";
  struct mapfs_mkfs_options mk {};
  mk.size = 8 * GiB;
  mk.page_size = 4096;
  mk.mode = MAPFS_MODE_SYNC;
  if (!Check(mapfs_mkfs(pool.c_str(), &mk) == 0, "mkfs")) return false;
  mapfs_t* fs = mapfs_mount(pool.c_str(), nullptr);
  bool ok = fs != nullptr && mapfs_mkdir(fs, "/m", 0755) == 0;
  for (uint64_t i = 0; ok && i < n; i++) {
    int fd = mapfs_open(fs, ("/m/f" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0644);
    ok = fd >= 0 && mapfs_close(fs, fd) == 0;
  }
  if (fs != nullptr) mapfs_unmount(fs);
  std::vector<double> ns, rss;
  for (int r = 0; ok && r < repeat; r++) {
    uint64_t m0 = ResidentBytes(), t0 = NowNs();
    fs = mapfs_mount(pool.c_str(), nullptr);
    uint64_t t1 = NowNs(), m1 = ResidentBytes();
    ok = fs != nullptr;
    if (ok) ns.push_back(static_cast<double>(t1 - t0)), rss.push_back(static_cast<double>(m1 - std::min(m0, m1)));
    if (ok) mapfs_unmount(fs);
  }
  ::unlink(pool.c_str());
  if (!Check(ok, "mount")) return false;
  Row row{"mount", "mapfs", "sync", "4k", 0, 1, 0, SpreadOf(ns)};
  row.entries = n;
  rows.push_back(row);
  std::printf("mount of an 8 GiB pool with %llu files: median %.1f us; resident memory added by the mount: %.0f KiB\n",
              static_cast<unsigned long long>(n), SpreadOf(ns).median / 1e3, SpreadOf(rss).median / 1024);
  return true;
}

int RunMeta(const FsBenchOptions& o, mapfs_t* fs, SyscallTarget& tmp, SyscallTarget* ext4, std::vector<Row>& rows) {
  uint64_t n = o.ops ? o.ops : o.quick ? 2000 : 20000;
  int repeat = o.repeat ? o.repeat : 3;
  MapfsTarget m(fs, "sync");
  SyscallTarget shim(o.preload_root, "mapfs-preload", "sync");
  SyscallTarget fuse(o.fuse_root, "mapfs-fuse", "sync");
  std::vector<Target*> ts = {&tmp};
  if (ext4 != nullptr) ts.push_back(ext4);
  ts.push_back(&m);
  if (!o.preload_root.empty()) ts.push_back(&shim);
  if (!o.fuse_root.empty()) ts.push_back(&fuse);
  std::printf("\nmeta: %llu files in one directory, median of %d\n", static_cast<unsigned long long>(n), repeat);
  std::vector<std::vector<double>> t[5];
  for (auto& x : t) x.resize(ts.size());
  for (int r = 0; r < repeat; r++) {
    for (size_t k = 0; k < ts.size(); k++) {
      Progress("meta %s, repeat %d of %d", ts[k]->name.c_str(), r + 1, repeat);
      double ns[5];
      if (!MetaRun(*ts[k], n, ns)) return 1;
      for (int w = 0; w < 5; w++) t[w][k].push_back(ns[w]);
    }
  }
  ProgressDone();
  for (int w = 0; w < 5; w++)
    for (size_t k = 0; k < ts.size(); k++) rows.push_back({kMetaWorkloads[w], ts[k]->name, ts[k]->mode, "4k", 0, n, 0, SpreadOf(t[w][k])});
  if (!MeasureMount(o, n, repeat, rows)) return 1;
  PrintRows(rows);
  return 0;
}

}  // namespace

int RunFsBench(const FsBenchOptions& opt) {
  FsBenchOptions o = opt;
  if (o.dir.empty()) o.dir = "/dev/shm";
  std::string pool = o.dir + "/mapfs-bench-" + std::to_string(getpid()) + ".pool";
  std::string tdir = o.dir + "/mapfs-bench-tmpfs-" + std::to_string(getpid());
  uint64_t size = o.size ? o.size : o.quick ? 64 * MiB : 1 * GiB;
  struct mapfs_mkfs_options mk {};
  mk.size = std::max<uint64_t>(3 * size + 512 * MiB, 1 * GiB);
  mk.page_size = 4096;
  mk.mode = MAPFS_MODE_SYNC;
  if (mapfs_mkfs(pool.c_str(), &mk) != 0) return Check(false, "mkfs"), 1;
  mapfs_t* fs = mapfs_mount(pool.c_str(), nullptr);
  if (fs == nullptr) {
    ::unlink(pool.c_str());
    return Check(false, "mount"), 1;
  }
  ::mkdir(tdir.c_str(), 0700);
  SyscallTarget tmp(tdir);
  std::printf("mapfs bench %s; %s\n", o.suite.c_str(), MachineDescription().c_str());
  Ext4Baseline ext4_mount;
  std::unique_ptr<SyscallTarget> ext4;
  uint64_t files = o.ops ? o.ops : 20000;
  uint64_t ext4_bytes = o.suite == "micro" ? 2 * size + 256 * MiB : 512 * MiB;
  if (MountExt4OrSay(ext4_mount, ext4_bytes, o.suite == "meta" ? files : 0, o.dir)) ext4 = std::make_unique<SyscallTarget>(ext4_mount.dir(), "ext4");
  std::vector<Row> rows;
  int rc = o.suite == "micro" ? RunMicro(o, fs, tmp, ext4.get(), rows) : RunMeta(o, fs, tmp, ext4.get(), rows);
  mapfs_unmount(fs);
  ::unlink(pool.c_str());
  if (!o.preload_root.empty()) {
    // The shim's pool was made for this run by `mapfs bench` (see cli).
    if (const char* sp = std::getenv("MAPFS_POOL")) ::unlink(sp);
  }
  std::string cmd = "rm -rf '" + tdir + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "mapfs bench: could not remove %s\n", tdir.c_str());
  if (rc == 0 && !o.json.empty() && !WriteJson(o.json, o.suite, rows)) {
    std::fprintf(stderr, "mapfs bench: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return rc;
}

}  // namespace mapfs::bench
