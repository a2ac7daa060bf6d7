// pswap: contents exchanged for every alignment case, errors, and a random
// property test against a model.
#include <gtest/gtest.h>

#include <vector>

#include "mount/mount.h"
#include "test_util.h"
#include "vm_test_util.h"

namespace mapfs {
namespace {

using testing::FillPage;
using testing::PageTag;
using testing::TempPool;

class Pswap : public ::testing::Test {
 protected:
  void Open(uint64_t pool_size, uint32_t top_level = 0) {
    medium::CreateOptions co;
    co.top_level = top_level;
    pool_ = std::make_unique<TempPool>(pool_size, co);
    ASSERT_TRUE(pool_->status().ok()) << pool_->status().ToString();
    MountOptions mo;
    mo.vm.copy_swap_max_pages = 0;  // exercise the remapping path
    auto m = testing::VmMount::Open(pool_->path(), mo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mount_ = std::move(*m);
  }
  vm::Vm& vm() { return mount_->vm(); }
  void Fill(uint64_t voff, uint64_t pages, uint64_t tag0) {
    ASSERT_TRUE(vm().Populate(voff, pages * kPageSize).ok());
    for (uint64_t i = 0; i < pages; i++) FillPage(vm(), voff + i * kPageSize, tag0 + i);
  }
  // Every page of [voff, +pages) holds tag0 + i.
  void Expect(uint64_t voff, uint64_t pages, uint64_t tag0) {
    for (uint64_t i = 0; i < pages; i++)
      ASSERT_EQ(PageTag(vm(), voff + i * kPageSize), tag0 + i) << "page " << i << " of range " << voff;
  }
  void SwapAndCheck(uint64_t a, uint64_t b, uint64_t pages) {
    Fill(a, pages, 1000000);
    Fill(b, pages, 2000000);
    uint64_t used = vm().Stats().used_pages;
    Status st = vm().Pswap(a, b, pages);
    ASSERT_TRUE(st.ok()) << st.ToString();
    Expect(a, pages, 2000000);
    Expect(b, pages, 1000000);
    // Swapping allocates at most page tables, never data pages.
    EXPECT_LE(vm().Stats().used_pages, used + 8);
    // And back.
    ASSERT_TRUE(vm().Pswap(a, b, pages).ok());
    Expect(a, pages, 1000000);
    Expect(b, pages, 2000000);
    EXPECT_TRUE(vm().Check(true).ok());
  }
  std::unique_ptr<TempPool> pool_;
  std::unique_ptr<testing::VmMount> mount_;
};

TEST_F(Pswap, OnePage) {
  Open(64 * MiB);
  SwapAndCheck(0, 4 * MiB, 1);
}

TEST_F(Pswap, FewPagesWithinChunks) {
  Open(64 * MiB);
  SwapAndCheck(12 * KiB, 4 * MiB + 12 * KiB, 7);
}

TEST_F(Pswap, NotSwapAligned) {
  Open(64 * MiB);
  // a mod 2 MiB != b mod 2 MiB: every page is its own entry pair.
  SwapAndCheck(4 * KiB, 6 * MiB + 40 * KiB, 600);
}

TEST_F(Pswap, WholeChunks) {
  Open(64 * MiB);
  SwapAndCheck(0, 8 * MiB, 512);
  SwapAndCheck(2 * MiB, 12 * MiB, 1024);
}

TEST_F(Pswap, ChunksWithHeadAndTail) {
  Open(128 * MiB);
  // 2 pages before a chunk boundary, 2 chunks, 3 pages after.
  SwapAndCheck(2 * MiB - 8 * KiB, 20 * MiB - 8 * KiB, 2 + 1024 + 3);
}

TEST_F(Pswap, PaperExample262658Pages) {
  // ctFS Fig. 5: 512^2 + 512 + 2 pages = one PUD pair, one PMD pair, two PTE
  // pairs when the ranges are swap-aligned.
  Open(2304 * MiB, 8);
  const uint64_t n = 512 * 512 + 512 + 2;
  const uint64_t a = 1 * GiB, b = 3 * GiB;
  ASSERT_TRUE(vm().Populate(a, n * kPageSize).ok());
  ASSERT_TRUE(vm().Populate(b, n * kPageSize).ok());
  // Mark a sample of pages (every 97th and the last ones).
  std::vector<uint64_t> sample;
  for (uint64_t i = 0; i < n; i += 97) sample.push_back(i);
  for (uint64_t i = n - 3; i < n; i++) sample.push_back(i);
  for (uint64_t i : sample) {
    FillPage(vm(), a + i * kPageSize, 10 + i);
    FillPage(vm(), b + i * kPageSize, 10000000 + i);
  }
  FillPage(vm(), b + n * kPageSize, 77);  // just past the range: must not move
  uint64_t used = vm().Stats().used_pages;
  ASSERT_TRUE(vm().Pswap(a, b, n).ok());
  for (uint64_t i : sample) {
    ASSERT_EQ(PageTag(vm(), a + i * kPageSize), 10000000 + i) << i;
    ASSERT_EQ(PageTag(vm(), b + i * kPageSize), 10 + i) << i;
  }
  EXPECT_LE(vm().Stats().used_pages, used + 4);
  EXPECT_TRUE(vm().Check(true).ok());
  EXPECT_EQ(PageTag(vm(), b + n * kPageSize), 77u);
  EXPECT_TRUE(testing::PageIsZero(vm(), a + n * kPageSize));
}

TEST_F(Pswap, WithAnUnbackedSide) {
  // The partition-upgrade pattern: B has never been backed.
  Open(64 * MiB);
  Fill(0, 3, 500);
  ASSERT_TRUE(vm().Pswap(0, 16 * MiB, 3).ok());
  Expect(16 * MiB, 3, 500);
  for (uint64_t i = 0; i < 3; i++) EXPECT_EQ(vm().Translate(i * kPageSize).status().code(), ENOENT);
  // Whole chunks too.
  Fill(4 * MiB, 512, 900);
  ASSERT_TRUE(vm().Pswap(4 * MiB, 20 * MiB, 512).ok());
  Expect(20 * MiB, 512, 900);
  EXPECT_EQ(vm().Translate(4 * MiB).status().code(), ENOENT);
  EXPECT_TRUE(vm().Check(true).ok());
}

TEST_F(Pswap, CopyPathSwapsContentsAndKeepsMappings) {
  Open(64 * MiB);
  vm().set_copy_swap_max_pages(4);
  Fill(0, 2, 10);
  Fill(2 * MiB, 2, 20);
  auto ta = vm().Translate(0), tb = vm().Translate(2 * MiB);
  ASSERT_TRUE(vm().Pswap(0, 2 * MiB, 2).ok());
  Expect(0, 2, 20);
  Expect(2 * MiB, 2, 10);
  EXPECT_EQ(*vm().Translate(0), *ta);
  EXPECT_EQ(*vm().Translate(2 * MiB), *tb);
}

TEST_F(Pswap, BadArgumentsAreRefusedAndChangeNothing) {
  Open(64 * MiB);
  Fill(0, 4, 1);
  EXPECT_EQ(vm().Pswap(0, 2 * kPageSize, 4).code(), EINVAL);  // overlap
  EXPECT_EQ(vm().Pswap(1, 2 * MiB, 1).code(), EINVAL);        // unaligned
  EXPECT_EQ(vm().Pswap(0, vm().size() - kPageSize, 2).code(), EINVAL);
  EXPECT_EQ(vm().Pswap(0, 2 * MiB, vm().size()).code(), EINVAL);
  EXPECT_TRUE(vm().Pswap(0, 2 * MiB, 0).ok());
  Expect(0, 4, 1);
}

TEST_F(Pswap, RandomSwapsMatchAModel) {
  // 4 chunks of 512 pages; random swaps of random lengths and alignments.
  Open(64 * MiB);
  const uint64_t pages = 4 * 512;
  Fill(0, pages, 0);
  std::vector<uint64_t> model(pages);
  for (uint64_t i = 0; i < pages; i++) model[i] = i;
  for (uint64_t seed : {1, 2, 3}) {
    testing::Rng rng(seed);
    for (int op = 0; op < 150; op++) {
      uint64_t n = 1 + rng.Below(rng.Below(4) == 0 ? 700 : 20);
      uint64_t a = rng.Below(pages - n + 1), b = rng.Below(pages - n + 1);
      if ((a < b ? b - a : a - b) < n) continue;
      vm().set_copy_swap_max_pages(rng.Below(3));
      ASSERT_TRUE(vm().Pswap(a * kPageSize, b * kPageSize, n).ok()) << "seed " << seed << " op " << op;
      for (uint64_t i = 0; i < n; i++) std::swap(model[a + i], model[b + i]);
      if (op % 25 == 0) {
        for (uint64_t i = 0; i < pages; i++) ASSERT_EQ(PageTag(vm(), i * kPageSize), model[i]) << i;
      }
    }
  }
  for (uint64_t i = 0; i < pages; i++) ASSERT_EQ(PageTag(vm(), i * kPageSize), model[i]) << i;
  EXPECT_TRUE(vm().Check(true).ok());
}

}  // namespace
}  // namespace mapfs
