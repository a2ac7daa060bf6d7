// Per-call cost of 4 KiB reads (first read after the open, and cached: read
// again in the same open), stat, 4 KiB overwrites and create+close on
// directories given as NAME=DIR, through plain system calls, so one run
// compares tmpfs, the LD_PRELOAD shim (a DIR under MAPFS_MOUNT, when this
// runs under `mapfs run`) and the FUSE mount (a DIR in the mount). Built and
// run by scripts/fuse-compare.sh, which sets all three up.
//
// Each round runs every workload on every directory in turn (A B C A B C
// ...), so a busy machine slows all of them alike; the result is the median
// over the rounds of the mean time per call. Reads and writes hit distinct
// pages in a random order. "pread" is the first read of each page since the
// file was opened (a mount that keeps pages across opens may still answer
// it from the page cache); "pread (cached)" reads every page once, then
// times reading them all again in the same open.
//
// Usage: fuse_compare [--ops N] [--rounds R] NAME=DIR...
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr size_t kIo = 4096;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fuse_compare: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

struct Target {
  std::string name, dir;
  std::vector<double> read_ns, cached_ns, stat_ns, write_ns, create_ns;  // per call, one per round
};

// The data file: `pages` pages written once.
void MakeFile(const std::string& path, size_t pages, const char* buf) {
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) Die("create " + path);
  for (size_t i = 0; i < pages; i++)
    if (::write(fd, buf, kIo) != static_cast<ssize_t>(kIo)) Die("write " + path);
  if (::fsync(fd) != 0 || ::close(fd) != 0) Die("fsync/close " + path);
}

double TimeIo(const std::string& path, bool write, const std::vector<size_t>& pages, char* buf) {
  int fd = ::open(path.c_str(), write ? O_RDWR : O_RDONLY);
  if (fd < 0) Die("open " + path);
  uint64_t t0 = NowNs();
  for (size_t p : pages) {
    off_t off = static_cast<off_t>(p * kIo);
    ssize_t n = write ? ::pwrite(fd, buf, kIo, off) : ::pread(fd, buf, kIo, off);
    if (n != static_cast<ssize_t>(kIo)) Die(std::string(write ? "pwrite " : "pread ") + path);
  }
  uint64_t t1 = NowNs();
  if (::close(fd) != 0) Die("close " + path);
  return static_cast<double>(t1 - t0) / static_cast<double>(pages.size());
}

double TimeCachedRead(const std::string& path, const std::vector<size_t>& pages, char* buf) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Die("open " + path);
  for (size_t p : pages)
    if (::pread(fd, buf, kIo, static_cast<off_t>(p * kIo)) != static_cast<ssize_t>(kIo)) Die("pread " + path);
  uint64_t t0 = NowNs();
  for (size_t p : pages)
    if (::pread(fd, buf, kIo, static_cast<off_t>(p * kIo)) != static_cast<ssize_t>(kIo)) Die("pread " + path);
  uint64_t t1 = NowNs();
  if (::close(fd) != 0) Die("close " + path);
  return static_cast<double>(t1 - t0) / static_cast<double>(pages.size());
}

double TimeStat(const std::string& path, size_t n) {
  struct stat st;
  uint64_t t0 = NowNs();
  for (size_t i = 0; i < n; i++)
    if (::stat(path.c_str(), &st) != 0) Die("stat " + path);
  uint64_t t1 = NowNs();
  return static_cast<double>(t1 - t0) / static_cast<double>(n);
}

double TimeCreate(const std::string& dir, size_t n) {
  if (::mkdir(dir.c_str(), 0755) != 0) Die("mkdir " + dir);
  std::vector<std::string> names(n);
  for (size_t i = 0; i < n; i++) names[i] = dir + "/f" + std::to_string(i);
  uint64_t t0 = NowNs();
  for (auto& p : names) {
    int fd = ::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0 || ::close(fd) != 0) Die("create " + p);
  }
  uint64_t t1 = NowNs();
  for (auto& p : names)
    if (::unlink(p.c_str()) != 0) Die("unlink " + p);
  if (::rmdir(dir.c_str()) != 0) Die("rmdir " + dir);
  return static_cast<double>(t1 - t0) / static_cast<double>(n);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  size_t ops = 10000;
  int rounds = 5;
  std::vector<Target> ts;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--ops" && i + 1 < argc) {
      ops = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a.find('=') != std::string::npos && a[0] != '-') {
      ts.push_back({a.substr(0, a.find('=')), a.substr(a.find('=') + 1), {}, {}, {}, {}, {}});
    } else {
      std::fprintf(stderr, "usage: fuse_compare [--ops N] [--rounds R] NAME=DIR...\n");
      return 2;
    }
  }
  if (ts.empty() || ops == 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: fuse_compare [--ops N] [--rounds R] NAME=DIR...\n");
    return 2;
  }
  std::vector<char> buf(kIo, 'x');
  std::mt19937_64 rng(42);
  for (auto& t : ts) MakeFile(t.dir + "/cmp.dat", ops, buf.data());
  for (int r = 0; r < rounds; r++) {
    std::vector<size_t> pages(ops);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    for (auto& t : ts) t.write_ns.push_back(TimeIo(t.dir + "/cmp.dat", true, pages, buf.data()));
    std::shuffle(pages.begin(), pages.end(), rng);
    for (auto& t : ts) t.read_ns.push_back(TimeIo(t.dir + "/cmp.dat", false, pages, buf.data()));
    std::shuffle(pages.begin(), pages.end(), rng);
    for (auto& t : ts) t.cached_ns.push_back(TimeCachedRead(t.dir + "/cmp.dat", pages, buf.data()));
    for (auto& t : ts) t.stat_ns.push_back(TimeStat(t.dir + "/cmp.dat", ops));
    for (auto& t : ts) t.create_ns.push_back(TimeCreate(t.dir + "/c" + std::to_string(r), ops));
  }
  for (auto& t : ts)
    if (::unlink((t.dir + "/cmp.dat").c_str()) != 0) Die("unlink " + t.dir + "/cmp.dat");
  std::printf("| op (median of %d rounds, %zu calls each) |", rounds, ops);
  for (auto& t : ts) std::printf(" %s |", t.name.c_str());
  std::printf("\n|---|");
  for (size_t i = 0; i < ts.size(); i++) std::printf("---|");
  std::printf("\n");
  auto row = [&](const char* what, std::vector<double> Target::*m) {
    std::printf("| %s |", what);
    for (auto& t : ts) std::printf(" %.2f µs |", Median(t.*m) / 1000.0);
    std::printf("\n");
  };
  row("4 KiB pread", &Target::read_ns);
  row("4 KiB pread (cached)", &Target::cached_ns);
  row("stat", &Target::stat_ns);
  row("4 KiB pwrite (overwrite)", &Target::write_ns);
  row("create + close", &Target::create_ns);
  return 0;
}
