// Cross-process coherence: after another process swaps or unmaps a range,
// Sync() makes this process see the new mapping, never the old one.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "mount/mount.h"
#include "test_util.h"
#include "vm_test_util.h"

namespace mapfs {
namespace {

using testing::FillPage;
using testing::PageTag;
using testing::TempPool;

// Two mounts in one process have separate regions and separate mappings,
// exactly like two processes.
TEST(VmCoherence, TwoMountsSeeEachOthersSwaps) {
  TempPool pool(128 * MiB);
  ASSERT_TRUE(pool.status().ok());
  MountOptions mo;
  mo.vm.copy_swap_max_pages = 0;
  auto m1 = testing::VmMount::Open(pool.path(), mo), m2 = testing::VmMount::Open(pool.path(), mo);
  ASSERT_TRUE(m1.ok() && m2.ok());
  vm::Vm& v1 = (*m1)->vm();
  vm::Vm& v2 = (*m2)->vm();
  ASSERT_TRUE(v1.Populate(0, 4 * MiB).ok());
  ASSERT_TRUE(v1.Populate(8 * MiB, 4 * MiB).ok());
  for (uint64_t p = 0; p < 4 * MiB; p += kPageSize) {
    FillPage(v1, p, 1000 + p / kPageSize);
    FillPage(v1, 8 * MiB + p, 5000 + p / kPageSize);
  }
  // The second mount maps and reads everything.
  ASSERT_TRUE(v2.Map(0, 12 * MiB).ok());
  ASSERT_EQ(PageTag(v2, 0), 1000u);
  ASSERT_EQ(PageTag(v2, 8 * MiB), 5000u);

  // Page-level, chunk-level and mixed swaps in mount 1.
  ASSERT_TRUE(v1.Pswap(4 * KiB, 8 * MiB + 4 * KiB, 2).ok());
  ASSERT_TRUE(v1.Pswap(2 * MiB, 10 * MiB, 512).ok());
  v2.Sync();
  EXPECT_EQ(PageTag(v2, 0), 1000u);
  EXPECT_EQ(PageTag(v2, 4 * KiB), 5001u);
  EXPECT_EQ(PageTag(v2, 8 * KiB), 5002u);
  EXPECT_EQ(PageTag(v2, 12 * KiB), 1003u);
  EXPECT_EQ(PageTag(v2, 8 * MiB + 4 * KiB), 1001u);
  EXPECT_EQ(PageTag(v2, 2 * MiB), 5512u);
  EXPECT_EQ(PageTag(v2, 10 * MiB + 4 * KiB), 1513u);
  EXPECT_GT(v2.Stats().invalidations, 0u);

  // An unmap in mount 1: mount 2 must not keep using the freed pages.
  ASSERT_TRUE(v1.Unmap(0, 2 * MiB).ok());
  ASSERT_TRUE(v1.Populate(20 * MiB, 2 * MiB).ok());  // may reuse the pages
  FillPage(v1, 20 * MiB, 4242);
  v2.Sync();
  EXPECT_FALSE(v2.Translate(0).ok());
  EXPECT_TRUE(testing::PageIsZero(v2, 12 * KiB));  // faults in a fresh page
  EXPECT_EQ(PageTag(v2, 20 * MiB), 4242u);
}

TEST(VmCoherence, AnotherProcessSeesTheSwap) {
  TempPool pool(64 * MiB);
  ASSERT_TRUE(pool.status().ok());
  auto m = testing::VmMount::Open(pool.path());
  ASSERT_TRUE(m.ok());
  vm::Vm& v = (*m)->vm();
  ASSERT_TRUE(v.Populate(0, 2 * MiB).ok());
  ASSERT_TRUE(v.Populate(4 * MiB, 2 * MiB).ok());
  FillPage(v, 0, 1);
  FillPage(v, 4 * MiB, 2);
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t pid = fork();
  if (pid == 0) {
    auto cm = testing::VmMount::Open(pool.path());
    if (!cm.ok()) _exit(10);
    vm::Vm& cv = (*cm)->vm();
    int ok = PageTag(cv, 0) == 1 ? 0 : 11;  // maps the old pages
    char c = 'r';
    if (write(to_parent[1], &c, 1) != 1 || read(to_child[0], &c, 1) != 1) _exit(12);
    cv.Sync();  // what every library call does on entry
    if (PageTag(cv, 0) != 2 || PageTag(cv, 4 * MiB) != 1) ok = 13;
    (*cm)->Close().ok();
    _exit(ok);
  }
  char c;
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);
  ASSERT_TRUE(v.Pswap(0, 4 * MiB, 1).ok());
  ASSERT_EQ(write(to_child[1], &c, 1), 1);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(VmCoherence, FallingFarBehindDropsEverything) {
  TempPool pool(64 * MiB);
  ASSERT_TRUE(pool.status().ok());
  MountOptions mo;
  mo.vm.copy_swap_max_pages = 0;
  auto m1 = testing::VmMount::Open(pool.path(), mo), m2 = testing::VmMount::Open(pool.path(), mo);
  ASSERT_TRUE(m1.ok() && m2.ok());
  vm::Vm& v1 = (*m1)->vm();
  vm::Vm& v2 = (*m2)->vm();
  ASSERT_TRUE(v1.Populate(0, 4 * MiB).ok());
  FillPage(v1, 0, 1);
  FillPage(v1, 2 * MiB, 2);
  ASSERT_EQ(PageTag(v2, 0), 1u);
  // More changes than the ring holds, ending with an odd number of swaps.
  for (int i = 0; i < 3001; i++) ASSERT_TRUE(v1.Pswap(0, 2 * MiB, 1).ok());
  v2.Sync();
  EXPECT_EQ(PageTag(v2, 0), 2u);
  EXPECT_EQ(PageTag(v2, 2 * MiB), 1u);
}

}  // namespace
}  // namespace mapfs
