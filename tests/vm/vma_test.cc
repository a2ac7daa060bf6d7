// The number of kernel mappings stays bounded however much pswap fragments
// the page table.
#include <gtest/gtest.h>

#include "mount/mount.h"
#include "test_util.h"
#include "vm_test_util.h"

namespace mapfs {
namespace {

using testing::TempPool;

TEST(VmVmas, BoundedUnderManySmallSwaps) {
  TempPool pool(256 * MiB);
  ASSERT_TRUE(pool.status().ok());
  MountOptions mo;
  mo.vm.copy_swap_max_pages = 0;
  mo.vm.vma_budget = 256;
  auto m = testing::VmMount::Open(pool.path(), mo);
  ASSERT_TRUE(m.ok());
  vm::Vm& vm = (*m)->vm();
  const uint64_t chunks = 64, pages = chunks * kPagesPerChunk;
  ASSERT_TRUE(vm.Populate(0, chunks * kChunkSize).ok());
  testing::Rng rng(7);
  int worst = 0;
  for (int round = 0; round < 40; round++) {
    for (int k = 0; k < 100; k++) {
      uint64_t a = rng.Below(pages), b = rng.Below(pages);
      if (a == b) continue;
      ASSERT_TRUE(vm.Pswap(a * kPageSize, b * kPageSize, 1).ok());
    }
    // Touch everything: every run of every split chunk gets mapped.
    for (uint64_t p = 0; p < pages; p++) (void)*static_cast<volatile char*>(vm.at(p * kPageSize));
    worst = std::max(worst, testing::CountVmas(vm.base(), vm.size()));
  }
  // 4000 random single-page swaps leave ~8000 discontiguities in 64 chunks;
  // mapped naively that is thousands of VMAs. With the budget, mapped runs
  // stay under budget + chunks, and each run costs at most one VMA plus one
  // PROT_NONE gap.
  EXPECT_LE(worst, 2 * (256 + static_cast<int>(chunks)) + 2);
  EXPECT_LE(vm.Stats().mapped_runs, 256u + chunks * 3);
  EXPECT_TRUE(vm.Check(true).ok());
}

}  // namespace
}  // namespace mapfs
