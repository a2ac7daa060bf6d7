#include "pswap_bench.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <vector>

#include "bench_util.h"
#include "common/units.h"
#include "medium/persist.h"
#include "mount/mount.h"

namespace mapfs::bench {
namespace {

constexpr uint64_t kA = 2 * GiB, kB = 4 * GiB, kLog = 6 * GiB;

std::vector<uint64_t> Sizes(uint64_t max) {
  std::vector<uint64_t> v;
  for (uint64_t n = 1; n <= 262144 && n <= max; n *= 2) v.push_back(n);
  if (max >= 262658) v.push_back(262658);  // 512^2 + 512 + 2, as in the paper
  return v;
}

void Touch(char* p, uint64_t pages) {
  for (uint64_t i = 0; i < pages; i++) p[i * kPageSize] = static_cast<char>(i);
}


// One pass over all sizes on a pool at `path` with mapping pages of
// 1 << page_shift. Appends rows; returns false (after printing why) on error.
bool RunPass(const std::string& path, uint32_t page_shift, uint64_t max_pages, int repeat, std::vector<Row>& rows) {
  const char* page = page_shift == 21 ? "2m" : "4k";
  uint64_t range = AlignUp(max_pages * kPageSize, kChunkSize);
  medium::CreateOptions co;
  co.size = 4 * GiB;
  co.page_shift = page_shift;
  co.top_level = 8;  // a 64 GiB region holds the three ranges at 2, 4 and 6 GiB
  Status st = medium::Pool::Create(path, co);
  if (!st.ok()) {
    std::fprintf(stderr, "mapfs bench pswap: %s\n", st.ToString().c_str());
    return false;
  }
  struct Cleanup {
    std::string p;
    ~Cleanup() { ::unlink(p.c_str()); }
  } cleanup{path};
  MountOptions mo;
  mo.vm.copy_swap_max_pages = 0;  // measure the remapping path unless asked
  auto m = Mount::Open(path, mo);
  if (!m.ok()) {
    std::fprintf(stderr, "mapfs bench pswap: %s\n", m.status().ToString().c_str());
    return false;
  }
  vm::Vm& vm = (*m)->vm();
  for (uint64_t r : {kA, kB, kLog}) {
    st = vm.Populate(r, range);
    if (!st.ok()) {
      std::fprintf(stderr, "mapfs bench pswap: %s\n", st.ToString().c_str());
      return false;
    }
  }
  // Sanity: a swap really exchanges contents.
  vm.at(kA)[0] = 'a';
  vm.at(kB)[0] = 'b';
  st = vm.Pswap(kA, kB, 1);
  if (!st.ok() || vm.at(kA)[0] != 'b' || vm.at(kB)[0] != 'a') {
    std::fprintf(stderr, "mapfs bench pswap: swap check failed: %s\n", st.ToString().c_str());
    return false;
  }
  std::printf("\n%s pages (pool on %s, huge pages %s), median of %d\n", page_shift == 21 ? "2 MiB" : "4 KiB",
              (*m)->pool().fs_kind(), (*m)->pool().huge_pages() ? "on" : "off", repeat);
  std::printf("%9s %12s %12s %12s %12s %10s %10s\n", "pages", "pswap us", "pswap-hot us", "copy-swap us",
              "2x copy us", "copy/pswap", "copy/hot");
  for (uint64_t n : Sizes(max_pages)) {
    uint64_t bytes = n * kPageSize;
    std::vector<double> t_swap, t_hot, t_cswap, t_copy;
    for (int r = 0; r < repeat && st.ok(); r++) {
      // Cold: backed and mapped in the page table, not touched by this
      // process since (no kernel page-table entries to tear down).
      vm.DropMappings(kA, bytes);
      vm.DropMappings(kB, bytes);
      uint64_t t0 = NowNs();
      st = vm.Pswap(kA, kB, n);
      uint64_t t1 = NowNs();
      t_swap.push_back(static_cast<double>(t1 - t0));
      // Hot: every page touched first, so the kernel must unmap them all.
      Touch(vm.at(kA), n);
      Touch(vm.at(kB), n);
      t0 = NowNs();
      if (st.ok()) st = vm.Pswap(kA, kB, n);
      t1 = NowNs();
      t_hot.push_back(static_cast<double>(t1 - t0));
      if (n <= 8 && st.ok()) {
        // The copying fast path, hot as well.
        Touch(vm.at(kA), n);
        Touch(vm.at(kB), n);
        vm.set_copy_swap_max_pages(n);
        t0 = NowNs();
        st = vm.Pswap(kA, kB, n);
        t1 = NowNs();
        vm.set_copy_swap_max_pages(0);
        t_cswap.push_back(static_cast<double>(t1 - t0));
      }
      // Baseline: the same bytes copied twice (into a log, then into place).
      Touch(vm.at(kA), n);
      Touch(vm.at(kLog), n);
      t0 = NowNs();
      medium::CopyNt(vm.at(kLog), vm.at(kB), bytes);
      medium::Fence();
      medium::CopyNt(vm.at(kA), vm.at(kLog), bytes);
      medium::Fence();
      t1 = NowNs();
      t_copy.push_back(static_cast<double>(t1 - t0));
    }
    if (!st.ok()) {
      std::fprintf(stderr, "mapfs bench pswap: %s\n", st.ToString().c_str());
      return false;
    }
    Spread s = SpreadOf(t_swap), h = SpreadOf(t_hot), c = SpreadOf(t_copy), cs = SpreadOf(t_cswap);
    rows.push_back({"pswap", "mapfs", "-", page, n, 1, bytes, s});
    rows.push_back({"pswap-hot", "mapfs", "-", page, n, 1, bytes, h});
    if (!t_cswap.empty()) rows.push_back({"copy-swap", "mapfs", "-", page, n, 1, bytes, cs});
    rows.push_back({"copy", "floor", "-", page, n, 1, 2 * bytes, c});
    char cs_buf[32] = "-";
    if (!t_cswap.empty()) std::snprintf(cs_buf, sizeof cs_buf, "%.2f", cs.median / 1e3);
    std::printf("%9llu %12.2f %12.2f %12s %12.2f %9.1fx %9.1fx\n", static_cast<unsigned long long>(n),
                s.median / 1e3, h.median / 1e3, cs_buf, c.median / 1e3, c.median / s.median, c.median / h.median);
    std::fflush(stdout);
  }
  return (*m)->Close().ok();
}

}  // namespace

int RunPswapBench(const PswapBenchOptions& opt) {
  uint64_t max_pages = opt.max_pages;
  int repeat = opt.repeat ? opt.repeat : opt.quick ? 2 : 5;
  if (max_pages == 0 || max_pages > 262658 || repeat < 1) {
    std::fprintf(stderr, "mapfs bench pswap: --max-pages must be 1..262658\n");
    return 2;
  }
  std::printf("pswap vs copying twice (ctFS Fig. 6); %s\n", MachineDescription().c_str());
  std::vector<Row> rows;
  if (!RunPass(opt.pool, 12, max_pages, repeat, rows)) return 1;
  // 2 MiB pages need a file system that gives huge pages: mount a private
  // tmpfs with huge=always where this process may.
  std::string dir = "/tmp/mapfs-bench-huge-" + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0700) == 0) {
    if (::mount("mapfs-bench", dir.c_str(), "tmpfs", 0, "huge=always,size=8g") == 0) {
      bool ok = RunPass(dir + "/pool", 21, max_pages, repeat, rows);
      ::umount(dir.c_str());
      ::rmdir(dir.c_str());
      if (!ok) return 1;
    } else {
      std::printf("\n2 MiB pages: skipped (cannot mount a huge=always tmpfs here: %s)\n", std::strerror(errno));
      ::rmdir(dir.c_str());
    }
  }
  if (!opt.json.empty() && !WriteJson(opt.json, "pswap", rows)) {
    std::fprintf(stderr, "mapfs bench pswap: cannot write %s\n", opt.json.c_str());
    return 1;
  }
  return 0;
}

}  // namespace mapfs::bench
