#include "pswap_bench.h"

#include <unistd.h>

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

}  // namespace

int RunPswapBench(const PswapBenchOptions& opt) {
  uint64_t max_pages = opt.quick ? std::min<uint64_t>(opt.max_pages, 262658) : opt.max_pages;
  int repeat = opt.quick ? 2 : opt.repeat;
  if (max_pages == 0 || max_pages > 262658 || repeat < 1) {
    std::fprintf(stderr, "mapfs bench pswap: --max-pages must be 1..262658 and --repeat >= 1\n");
    return 2;
  }
  uint64_t range = AlignUp(max_pages * kPageSize, kChunkSize);
  medium::CreateOptions co;
  co.size = 4 * GiB;
  co.top_level = 8;  // a 64 GiB region holds the three ranges at 2, 4 and 6 GiB
  Status st = medium::Pool::Create(opt.pool, co);
  if (!st.ok()) {
    std::fprintf(stderr, "mapfs bench pswap: %s\n", st.ToString().c_str());
    return 1;
  }
  MountOptions mo;
  mo.vm.copy_swap_max_pages = 0;  // measure the remapping path unless asked
  auto m = Mount::Open(opt.pool, mo);
  if (!m.ok()) {
    std::fprintf(stderr, "mapfs bench pswap: %s\n", m.status().ToString().c_str());
    ::unlink(opt.pool.c_str());
    return 1;
  }
  vm::Vm& vm = (*m)->vm();
  for (uint64_t r : {kA, kB, kLog}) {
    st = vm.Populate(r, range);
    if (!st.ok()) {
      std::fprintf(stderr, "mapfs bench pswap: %s\n", st.ToString().c_str());
      ::unlink(opt.pool.c_str());
      return 1;
    }
  }
  // Sanity: a swap really exchanges contents.
  vm.at(kA)[0] = 'a';
  vm.at(kB)[0] = 'b';
  st = vm.Pswap(kA, kB, 1);
  if (!st.ok() || vm.at(kA)[0] != 'b' || vm.at(kB)[0] != 'a') {
    std::fprintf(stderr, "mapfs bench pswap: swap check failed: %s\n", st.ToString().c_str());
    ::unlink(opt.pool.c_str());
    return 1;
  }

  std::printf("pswap vs copying twice (ctFS Fig. 6), median of %d; %s\n", repeat, MachineDescription().c_str());
  std::printf("%9s %12s %12s %12s %12s %10s\n", "pages", "pswap us", "pswap-hot us", "copy-swap us", "2x copy us",
              "copy/pswap");
  std::vector<Row> rows;
  for (uint64_t n : Sizes(max_pages)) {
    uint64_t bytes = n * kPageSize;
    std::vector<double> t_swap, t_hot, t_cswap, t_copy;
    for (int r = 0; r < repeat; r++) {
      // Ranges mapped in this process, pages not touched since the last swap.
      (void)vm.Map(kA, bytes);
      (void)vm.Map(kB, bytes);
      uint64_t t0 = NowNs();
      st = vm.Pswap(kA, kB, n);
      uint64_t t1 = NowNs();
      if (!st.ok()) break;
      t_swap.push_back(static_cast<double>(t1 - t0));
      // Every page touched first: the process page tables must be torn down.
      Touch(vm.at(kA), n);
      Touch(vm.at(kB), n);
      t0 = NowNs();
      st = vm.Pswap(kA, kB, n);
      t1 = NowNs();
      if (!st.ok()) break;
      t_hot.push_back(static_cast<double>(t1 - t0));
      if (n <= 15) {
        vm.set_copy_swap_max_pages(n);
        t0 = NowNs();
        st = vm.Pswap(kA, kB, n);
        t1 = NowNs();
        vm.set_copy_swap_max_pages(0);
        if (!st.ok()) break;
        t_cswap.push_back(static_cast<double>(t1 - t0));
      }
      // Baseline: the bytes copied twice (into a log, then into place).
      Touch(vm.at(kA), n);
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
      ::unlink(opt.pool.c_str());
      return 1;
    }
    Spread s = SpreadOf(t_swap), h = SpreadOf(t_hot), c = SpreadOf(t_copy), cs = SpreadOf(t_cswap);
    rows.push_back({"pswap", "mapfs", "-", "4k", n, 1, bytes, s});
    rows.push_back({"pswap-hot", "mapfs", "-", "4k", n, 1, bytes, h});
    if (!t_cswap.empty()) rows.push_back({"copy-swap", "mapfs", "-", "4k", n, 1, bytes, cs});
    rows.push_back({"copy", "floor", "-", "4k", n, 1, 2 * bytes, c});
    char cs_buf[32] = "-";
    if (!t_cswap.empty()) std::snprintf(cs_buf, sizeof cs_buf, "%.2f", cs.median / 1e3);
    std::printf("%9llu %12.2f %12.2f %12s %12.2f %9.1fx\n", static_cast<unsigned long long>(n), s.median / 1e3,
                h.median / 1e3, cs_buf, c.median / 1e3, c.median / s.median);
    std::fflush(stdout);
  }
  (*m)->Close().ok();
  ::unlink(opt.pool.c_str());
  if (!opt.json.empty() && !WriteJson(opt.json, "pswap", rows)) {
    std::fprintf(stderr, "mapfs bench pswap: cannot write %s\n", opt.json.c_str());
    return 1;
  }
  return 0;
}

}  // namespace mapfs::bench
