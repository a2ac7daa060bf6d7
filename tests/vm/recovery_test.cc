// Crash consistency of the vm layer: a child process dies at every fence of
// an operation (traced build), the parent reopens the pool — recovery runs —
// and checks the operation is all-or-nothing and nothing leaked.
#include <gtest/gtest.h>

#include <functional>

#include "medium/trace.h"
#include "mount/mount.h"
#include "test_util.h"
#include "vm_test_util.h"

namespace mapfs {
namespace {

using testing::FillPage;
using testing::PageTag;
using testing::TempPool;

// Ends the process at the Nth fence: everything stored before it is in the
// pool file (tmpfs keeps every store), nothing after it happened.
class DieAtFence : public medium::TraceHook {
 public:
  explicit DieAtFence(int n) : n_(n) {}
  void OnStore(const void*, size_t) override {}
  void OnFlush(const void*, size_t) override {}
  void OnFence() override {
    if (++seen_ == n_) _exit(77);
  }

 private:
  int n_;
  int seen_ = 0;
};

// Runs `op` in a child that dies at fence n. Returns 77 if it died, 0 if
// the operation completed first.
int RunUntilFence(const std::string& path, int n, const std::function<Status(vm::Vm&)>& op) {
  return testing::InChild([&] {
    MountOptions mo;
    mo.vm.copy_swap_max_pages = 0;
    auto m = testing::VmMount::Open(path, mo);
    if (!m.ok()) return 10;
    DieAtFence hook(n);
    medium::SetTraceHook(&hook);
    Status st = op((*m)->vm());
    medium::SetTraceHook(nullptr);
    if (!st.ok()) return 11;
    (*m)->Abandon();  // completed, but still no clean close
    return 0;
  });
}

// Prepares ranges a and b, then for every fence of pswap(a, b, n) checks the
// state after recovery.
void CrashEveryFenceOfPswap(uint64_t a, uint64_t b, uint64_t pages) {
  for (int n = 1;; n++) {
    TempPool pool(64 * MiB);
    ASSERT_TRUE(pool.status().ok());
    {
      auto m = testing::VmMount::Open(pool.path());
      ASSERT_TRUE(m.ok());
      vm::Vm& vm = (*m)->vm();
      ASSERT_TRUE(vm.Populate(a, pages * kPageSize).ok());
      ASSERT_TRUE(vm.Populate(b, pages * kPageSize).ok());
      for (uint64_t i = 0; i < pages; i++) {
        FillPage(vm, a + i * kPageSize, 100 + i);
        FillPage(vm, b + i * kPageSize, 900 + i);
      }
    }
    int rc = RunUntilFence(pool.path(), n, [&](vm::Vm& vm) { return vm.Pswap(a, b, pages); });
    ASSERT_TRUE(rc == 77 || rc == 0) << "child failed with " << rc << " at fence " << n;
    auto m = testing::VmMount::Open(pool.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_TRUE((*m)->recovered());
    vm::Vm& vm = (*m)->vm();
    bool swapped = PageTag(vm, a) == 900;
    for (uint64_t i = 0; i < pages; i++) {
      ASSERT_EQ(PageTag(vm, a + i * kPageSize), (swapped ? 900 : 100) + i) << "fence " << n << " page " << i;
      ASSERT_EQ(PageTag(vm, b + i * kPageSize), (swapped ? 100 : 900) + i) << "fence " << n << " page " << i;
    }
    Status check = vm.Check(true);
    ASSERT_TRUE(check.ok()) << "fence " << n << ": " << check.ToString();
    // Still usable.
    ASSERT_TRUE(vm.Pswap(a, b, pages).ok());
    ASSERT_EQ(PageTag(vm, a), swapped ? 100u : 900u);
    if (rc == 0) {
      EXPECT_TRUE(swapped) << "completed pswap not visible";
      break;
    }
    ASSERT_LT(n, 500) << "pswap never completes";
  }
}

TEST(VmRecovery, PswapOfPagesInsideChunks) { CrashEveryFenceOfPswap(8 * KiB, 2 * MiB + 8 * KiB, 3); }

TEST(VmRecovery, PswapNotSwapAligned) { CrashEveryFenceOfPswap(0, 4 * MiB + 12 * KiB, 5); }

TEST(VmRecovery, PswapOfWholeChunks) { CrashEveryFenceOfPswap(0, 8 * MiB, 1024); }

TEST(VmRecovery, PopulateAndUnmapLeakNothing) {
  for (int n = 1;; n++) {
    TempPool pool(64 * MiB);
    ASSERT_TRUE(pool.status().ok());
    {
      auto m = testing::VmMount::Open(pool.path());
      ASSERT_TRUE(m.ok());
      ASSERT_TRUE((*m)->vm().Populate(0, 2 * MiB).ok());
      FillPage((*m)->vm(), 0, 5);
    }
    int rc = RunUntilFence(pool.path(), n, [](vm::Vm& vm) -> Status {
      MAPFS_RETURN_IF_ERROR(vm.Populate(4 * MiB, 4 * MiB));
      MAPFS_RETURN_IF_ERROR(vm.Unmap(0, 8 * KiB));
      MAPFS_RETURN_IF_ERROR(vm.Unmap(4 * MiB, 2 * MiB));
      return Status::Ok();
    });
    ASSERT_TRUE(rc == 77 || rc == 0) << rc;
    auto m = testing::VmMount::Open(pool.path());
    ASSERT_TRUE(m.ok());
    vm::Vm& vm = (*m)->vm();
    Status check = vm.Check(true);
    ASSERT_TRUE(check.ok()) << "fence " << n << ": " << check.ToString();
    // Page 2 of the first chunk was never unmapped.
    FillPage(vm, 8 * KiB, 6);  // usable
    EXPECT_EQ(PageTag(vm, 8 * KiB), 6u);
    if (rc == 0) {
      EXPECT_FALSE(vm.Translate(0).ok());
      EXPECT_FALSE(vm.Translate(4 * MiB).ok());
      EXPECT_TRUE(vm.Translate(6 * MiB).ok());
      break;
    }
    ASSERT_LT(n, 500);
  }
}

TEST(VmRecovery, LeakedPagesAreReclaimedAfterACrash) {
  TempPool pool(64 * MiB);
  ASSERT_TRUE(pool.status().ok());
  uint64_t baseline;
  {
    auto m = testing::VmMount::Open(pool.path());
    ASSERT_TRUE(m.ok());
    baseline = (*m)->vm().Stats().used_pages;
  }
  // A child claims chunks in the bitmap without ever referencing them — as
  // if it died between allocating and publishing — and dies.
  int rc = testing::InChild([&] {
    auto m = testing::VmMount::Open(pool.path());
    if (!m.ok()) return 10;
    for (int i = 0; i < 5; i++)
      if (!(*m)->vm().pages().AllocChunk().ok()) return 11;
    _exit(0);
  });
  ASSERT_EQ(rc, 0);
  auto m = testing::VmMount::Open(pool.path());
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE((*m)->recovered());
  EXPECT_EQ((*m)->vm().Stats().used_pages, baseline);
  EXPECT_TRUE((*m)->vm().Check(true).ok());
}

}  // namespace
}  // namespace mapfs
