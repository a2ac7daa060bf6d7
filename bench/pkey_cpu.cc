// pkey_cpu: the cost of the protection-key switch per C API call
// (docs/PERFORMANCE.md, "Protection keys"), by the thread's own CPU clock
// (CLOCK_THREAD_CPUTIME_ID: close to load-proof on a shared machine; the
// VMs this project runs on expose no hardware counters to perf).
//
//   pkey-cpu POOL [--ops N] [--runs R]
//   pkey-cpu --instructions [--ops N] [--runs R]
//
// Mounts POOL (an existing pool; its file /pkey_cpu.dat of 64 MiB is
// created and removed), then times, each as the best of R runs of N ops:
// pread and pwrite of 4 KiB at random page-aligned offsets, and lseek
// (SEEK_CUR: a call that does almost nothing, so its figure is mostly the
// entry and exit of a call, the key switch included), fstat, and stat of
// the file's path (one name under the root). Run it with keys and
// with MAPFS_PKEYS=0, interleaved (scripts/pkey_cpu_compare.sh); the
// difference is the switch's cost. Output "op ns" per line; nothing is
// asserted.
//
// --instructions times the switch's instructions alone on a key of its
// own (no pool): rdpkru, wrpkru, and a call's entry and exit with and
// without the rdpkru (whether a cached PKRU would pay: an rdpkru right
// before a wrpkru hides in its latency); then a 4 KiB copy from a random
// page with and without the switch around it (what it costs a read).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mapfs/mapfs.h"

namespace {

uint64_t CpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "pkey_cpu: %s: %s (%s)\n", what, std::strerror(errno), mapfs_last_error());
  std::exit(1);
}

uint32_t Rdpkru() {
  uint32_t eax, edx;
  asm volatile(".byte 0x0f,0x01,0xee" : "=a"(eax), "=d"(edx) : "c"(0));
  return eax;
}
void Wrpkru(uint32_t v) { asm volatile(".byte 0x0f,0x01,0xef" : : "a"(v), "c"(0), "d"(0) : "memory"); }

int Instructions(uint64_t ops, uint64_t runs) {
  int k = pkey_alloc(0, PKEY_DISABLE_WRITE);
  if (k < 0) Die("pkey_alloc (no protection keys here)");
  const uint32_t m = 3u << (2 * k), closed = 2u << (2 * k), base = Rdpkru() & ~m;
  volatile uint32_t sink = 0;
  auto best = [&](auto&& op) {
    uint64_t b = ~0ull;
    for (uint64_t r = 0; r < runs; r++) {
      uint64_t t0 = CpuNs();
      for (uint64_t i = 0; i < ops; i++) op();
      b = std::min(b, CpuNs() - t0);
    }
    return static_cast<double>(b) / static_cast<double>(ops);
  };
  std::printf("rdpkru %.1f\n", best([&] { sink = Rdpkru(); }));
  std::printf("wrpkru %.1f\n", best([&] { Wrpkru(base | closed); }));
  std::printf("rd+open+close %.1f\n", best([&] {
                uint32_t e = Rdpkru();
                Wrpkru(e & ~m);
                Wrpkru((e & ~m) | closed);
              }));
  std::printf("open+close %.1f\n", best([&] {
                Wrpkru(base);
                Wrpkru(base | closed);
              }));
  // What a pread does between the two: a 4 KiB copy from a random page of
  // 64 MiB (tagged), with and without the switch around it. The gap is
  // more than the two wrpkru: they keep the next copy's cache misses from
  // overlapping the last one's.
  const uint64_t span = 64ull << 20, page = 4096;
  char* src = static_cast<char*>(mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (src == MAP_FAILED) Die("mmap");
  std::memset(src, 1, span);
  if (pkey_mprotect(src, span, PROT_READ | PROT_WRITE, k) != 0) Die("pkey_mprotect");
  std::vector<char> dst(page);
  std::mt19937_64 rng(42);
  std::vector<uint64_t> offs(ops);
  for (auto& o : offs) o = (rng() % (span / page)) * page;
  uint64_t i = 0;
  std::printf("copy4k %.1f\n", best([&] {
                std::memcpy(dst.data(), src + offs[i++ % ops], page);
                asm volatile("" : : : "memory");
              }));
  std::printf("open+copy4k+close %.1f\n", best([&] {
                Wrpkru(base);
                std::memcpy(dst.data(), src + offs[i++ % ops], page);
                asm volatile("" : : : "memory");
                Wrpkru(base | closed);
              }));
  munmap(src, span);
  (void)sink;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: pkey-cpu POOL|--instructions [--ops N] [--runs R]\n");
    return 2;
  }
  const char* pool = argv[1];
  uint64_t ops = 200000, runs = 5;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--ops") == 0) ops = std::strtoull(argv[i + 1], nullptr, 10);
    else if (std::strcmp(argv[i], "--runs") == 0) runs = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (std::strcmp(pool, "--instructions") == 0) return Instructions(ops, runs);
  mapfs_t* fs = mapfs_mount(pool, nullptr);
  if (fs == nullptr) Die("mount");
  const uint64_t size = 64ull << 20, page = 4096, pages = size / page;
  int fd = mapfs_open(fs, "/pkey_cpu.dat", O_CREAT | O_RDWR | O_TRUNC, 0600);
  if (fd < 0) Die("open");
  std::vector<char> buf(page, 'x');
  for (uint64_t p = 0; p < pages; p++)
    if (mapfs_pwrite(fs, fd, buf.data(), page, static_cast<off_t>(p * page)) != static_cast<ssize_t>(page))
      Die("fill");
  std::mt19937_64 rng(42);
  std::vector<off_t> offs(ops);
  for (auto& o : offs) o = static_cast<off_t>((rng() % pages) * page);
  auto best = [&](auto&& op) {
    uint64_t b = ~0ull;
    for (uint64_t r = 0; r < runs; r++) {
      uint64_t t0 = CpuNs();
      for (uint64_t i = 0; i < ops; i++) op(i);
      b = std::min(b, CpuNs() - t0);
    }
    return static_cast<double>(b) / static_cast<double>(ops);
  };
  double rd = best([&](uint64_t i) {
    if (mapfs_pread(fs, fd, buf.data(), page, offs[i]) != static_cast<ssize_t>(page)) Die("pread");
  });
  double wr = best([&](uint64_t i) {
    if (mapfs_pwrite(fs, fd, buf.data(), page, offs[i]) != static_cast<ssize_t>(page)) Die("pwrite");
  });
  double sk = best([&](uint64_t) {
    if (mapfs_lseek(fs, fd, 0, SEEK_CUR) < 0) Die("lseek");
  });
  struct stat st;
  double fst = best([&](uint64_t) {
    if (mapfs_fstat(fs, fd, &st) != 0) Die("fstat");
  });
  double pst = best([&](uint64_t) {
    if (mapfs_stat(fs, "/pkey_cpu.dat", &st) != 0) Die("stat");
  });
  std::printf("pread4k %.1f\npwrite4k %.1f\nlseek %.1f\nfstat %.1f\nstat %.1f\n", rd, wr, sk, fst, pst);
  mapfs_close(fs, fd);
  mapfs_unlink(fs, "/pkey_cpu.dat");
  mapfs_unmount(fs);
  return 0;
}
