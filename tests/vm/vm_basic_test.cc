// Populate, map, unmap, discard, fault-in and translation of the vm layer.
#include <gtest/gtest.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <map>

#include "medium/trace.h"
#include "mount/mount.h"
#include "test_util.h"
#include "vm/ppt_format.h"
#include "vm_test_util.h"

namespace mapfs {
namespace {

using testing::FillPage;
using testing::PageTag;
using testing::TempPool;

class VmBasic : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pool_.status().ok()) << pool_.status().ToString();
    auto m = testing::VmMount::Open(pool_.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mount_ = std::move(*m);
    baseline_ = mount_->vm().Stats().used_pages;
  }
  vm::Vm& vm() { return mount_->vm(); }
  TempPool pool_{256 * MiB};
  std::unique_ptr<testing::VmMount> mount_;
  uint64_t baseline_ = 0;
};

TEST_F(VmBasic, PopulateBacksWholeChunkAndDataSticks) {
  ASSERT_TRUE(vm().Populate(4 * MiB + 8 * KiB, 4 * KiB).ok());
  // ctFS allocates at 2 MiB granularity: the whole chunk is backed.
  EXPECT_TRUE(vm().Translate(4 * MiB).ok());
  EXPECT_TRUE(vm().Translate(6 * MiB - 1).ok());
  EXPECT_FALSE(vm().Translate(6 * MiB).ok());
  EXPECT_EQ(vm().Stats().used_pages, baseline_ + kPagesPerChunk + 2);  // chunk + PUD/PMD tables
  FillPage(vm(), 4 * MiB + 8 * KiB, 42);
  // The bytes are in the pool at the translated offset.
  auto off = vm().Translate(4 * MiB + 8 * KiB);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(std::memcmp(mount_->pool().base() + *off, vm().at(4 * MiB + 8 * KiB), kPageSize), 0);
  EXPECT_TRUE(vm().Check(true).ok());
}

TEST_F(VmBasic, NewPagesReadAsZero) {
  ASSERT_TRUE(vm().Populate(0, 8 * MiB).ok());
  for (uint64_t p = 0; p < 8 * MiB; p += kPageSize) ASSERT_TRUE(testing::PageIsZero(vm(), p)) << p;
}

TEST_F(VmBasic, UnmapReturnsPagesAndTheyComeBackZero) {
  ASSERT_TRUE(vm().Populate(0, 4 * MiB).ok());
  FillPage(vm(), 0, 7);
  FillPage(vm(), 2 * MiB, 8);
  ASSERT_TRUE(vm().Unmap(0, 4 * MiB).ok());
  EXPECT_FALSE(vm().Translate(0).ok());
  EXPECT_EQ(vm().Stats().used_pages, baseline_ + 2);  // only the page tables remain
  EXPECT_TRUE(vm().Check(true).ok());
  // Touching again faults in fresh, zeroed pages.
  EXPECT_TRUE(testing::PageIsZero(vm(), 0));
  EXPECT_TRUE(testing::PageIsZero(vm(), 2 * MiB));
}

TEST_F(VmBasic, PartialUnmapSplitsTheChunk) {
  ASSERT_TRUE(vm().Populate(0, 2 * MiB).ok());
  for (uint64_t p = 0; p < 2 * MiB; p += kPageSize) FillPage(vm(), p, p / kPageSize);
  ASSERT_TRUE(vm().Unmap(64 * KiB, 8 * KiB).ok());
  EXPECT_FALSE(vm().Translate(64 * KiB).ok());
  EXPECT_FALSE(vm().Translate(68 * KiB).ok());
  for (uint64_t p = 0; p < 2 * MiB; p += kPageSize) {
    if (p == 64 * KiB || p == 68 * KiB) continue;
    ASSERT_EQ(PageTag(vm(), p), p / kPageSize) << p;
  }
  EXPECT_EQ(vm().Stats().used_pages, baseline_ + 2 + 1 + kPagesPerChunk - 2);  // + the PTE table
  EXPECT_TRUE(vm().Check(true).ok());
}

// Readable answers "may the directory layer touch this" from the chunk
// this process mapped whole, so it must stop saying yes the moment a page
// of the chunk is unbacked, however that happens (unmap, a pswap that
// swaps a page or the whole chunk away), and never for a chunk mapped
// from a page table, which may hold holes.
TEST_F(VmBasic, ReadableNeverCoversAnUnbackedPage) {
  EXPECT_FALSE(vm().Readable(4 * MiB, kPageSize));  // never backed
  ASSERT_TRUE(vm().Populate(4 * MiB, 2 * MiB).ok());  // mapped here, one leaf
  EXPECT_TRUE(vm().Readable(4 * MiB + 8 * KiB, kPageSize));
  // A page unmapped: the rest of the chunk stays readable, that page not.
  ASSERT_TRUE(vm().Unmap(4 * MiB + 8 * KiB, kPageSize).ok());
  EXPECT_FALSE(vm().Readable(4 * MiB + 8 * KiB, kPageSize));
  EXPECT_TRUE(vm().Readable(4 * MiB + 12 * KiB, kPageSize));
  // Mapped again from its page table as one run of pages with the rest of
  // the chunk unbacked: still no page it does not back.
  ASSERT_TRUE(vm().Populate(8 * MiB, 2 * MiB).ok());
  ASSERT_TRUE(vm().Unmap(8 * MiB + 64 * KiB, 2 * MiB - 64 * KiB).ok());
  ASSERT_TRUE(vm().Map(8 * MiB, 2 * MiB).ok());
  EXPECT_TRUE(vm().Readable(8 * MiB, kPageSize));
  EXPECT_FALSE(vm().Readable(8 * MiB + 64 * KiB, kPageSize));
  EXPECT_FALSE(vm().Readable(8 * MiB + 2 * MiB - kPageSize, kPageSize));
  // A whole chunk mapped here, then one page of it swapped with an unbacked
  // page (remapped in place), then the whole chunk swapped away.
  ASSERT_TRUE(vm().Populate(12 * MiB, 2 * MiB).ok());
  ASSERT_TRUE(vm().Readable(12 * MiB, kPageSize));
  ASSERT_TRUE(vm().Pswap(12 * MiB, 32 * MiB, 1).ok());
  EXPECT_FALSE(vm().Readable(12 * MiB, kPageSize));
  EXPECT_TRUE(vm().Readable(12 * MiB + kPageSize, kPageSize));
  ASSERT_TRUE(vm().Populate(16 * MiB, 2 * MiB).ok());
  ASSERT_TRUE(vm().Readable(16 * MiB + kPageSize, kPageSize));
  ASSERT_TRUE(vm().Pswap(16 * MiB, 64 * MiB, kPagesPerChunk).ok());
  EXPECT_FALSE(vm().Readable(16 * MiB + kPageSize, kPageSize));
  EXPECT_TRUE(vm().Readable(64 * MiB + kPageSize, kPageSize));  // backed now (the PPT says so)
}

TEST_F(VmBasic, DiscardZeroesButKeepsBacking) {
  ASSERT_TRUE(vm().Populate(0, 2 * MiB).ok());
  FillPage(vm(), 0, 1);
  FillPage(vm(), kPageSize, 2);
  FillPage(vm(), 1 * MiB, 3);
  ASSERT_TRUE(vm().Discard(0, kPageSize).ok());      // small: zeroed in place
  ASSERT_TRUE(vm().Discard(512 * KiB, 1 * MiB).ok());  // large: zeroed in place too (resident)
  EXPECT_TRUE(testing::PageIsZero(vm(), 0));
  EXPECT_EQ(PageTag(vm(), kPageSize), 2u);
  EXPECT_TRUE(testing::PageIsZero(vm(), 1 * MiB));
  EXPECT_TRUE(vm().Translate(1 * MiB).ok());
}

uint64_t PoolBytesResident(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

// Resident medium: freeing keeps the pool's memory (reuse costs no kernel
// allocation, zeroing or fault); only Trim gives free pages back, and
// never a page in use.
TEST_F(VmBasic, FreedPagesStayResidentUntilTrim) {
  ASSERT_TRUE(vm().Populate(0, 6 * MiB).ok());
  for (uint64_t p = 0; p < 6 * MiB; p += kPageSize) FillPage(vm(), p, 100 + p / kPageSize);
  uint64_t before = PoolBytesResident(pool_.path());
  ASSERT_TRUE(vm().Unmap(0, 4 * MiB).ok());
  EXPECT_EQ(PoolBytesResident(pool_.path()), before);
  auto trimmed = vm().pages().Trim();
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().ToString();
  EXPECT_GE(*trimmed, 4 * MiB);
  EXPECT_LE(PoolBytesResident(pool_.path()) + 4 * MiB, before);
  for (uint64_t p = 4 * MiB; p < 6 * MiB; p += kPageSize) ASSERT_EQ(PageTag(vm(), p), 100 + p / kPageSize) << p;
  EXPECT_EQ(vm().Stats().used_pages, baseline_ + 2 + kPagesPerChunk);  // tables + the chunk still in use
  EXPECT_TRUE(vm().Check(true).ok());
  // Reused pages read as zero.
  ASSERT_TRUE(vm().Populate(0, 4 * MiB).ok());
  for (uint64_t p = 0; p < 4 * MiB; p += kPageSize) ASSERT_TRUE(testing::PageIsZero(vm(), p)) << p;
}

// Records which pool lines were written back, and whether a fence came
// after the last write-back of each.
class WriteBacks : public medium::TraceHook {
 public:
  // Only the base address is kept: the pool may be closed meanwhile.
  explicit WriteBacks(const medium::Pool& pool) : base_(pool.base()) {}
  void OnStore(const void*, size_t) override {}
  void OnFlush(const void* a, size_t n) override {
    for (uint64_t l = Off(a) / 64; l <= (Off(a) + n - 1) / 64; l++) flushed_[l] = false;
  }
  void OnFence() override {
    for (auto& [line, fenced] : flushed_) fenced = true;
  }
  // 0: never written back; 1: written back, not yet fenced; 2: durable.
  int State(const void* a) const {
    auto it = flushed_.find(Off(a) / 64);
    return it == flushed_.end() ? 0 : it->second ? 2 : 1;
  }

 private:
  uint64_t Off(const void* a) const { return static_cast<uint64_t>(static_cast<const char*>(a) - base_); }
  const char* base_;
  std::map<uint64_t, bool> flushed_;
};

uint64_t* BitmapWord(medium::Pool& pool, uint64_t page_off) {
  return pool.at<uint64_t>(pool.header().bitmap_off) + page_off / kPageSize / 64;
}

// A page freed without a fence (a strict overwrite's old page) has its bit
// cleared at once but written back only later, so the writer does not wait
// for the line; at the latest a clean close (or an idle or hand-off exit,
// after which no recovery would reclaim it) makes the cleared bit durable.
// Without that, a power cut after a clean close would leak the page for
// good.
TEST_F(VmBasic, AFreedPageIsDurablyFreeOnceThePoolIsClosed) {
  for (int how = 0; how < 3; how++) {
    SCOPED_TRACE(how == 0 ? "close" : how == 1 ? "idle exit" : "hand-off exit");
    uint64_t page = 0;
    ASSERT_TRUE(vm().pages().AllocPages(1, &page).ok());
    medium::Pool& pool = mount_->pool();
    uint64_t* word = BitmapWord(pool, page);
    const uint64_t bit = uint64_t{1} << (page / kPageSize % 64);
    ASSERT_NE(*word & bit, 0u);
    WriteBacks wb(pool);
    medium::SetTraceHook(&wb);
    vm().pages().FreePages(page, 1, /*durable=*/false);
    EXPECT_EQ(*word & bit, 0u);
    EXPECT_EQ(wb.State(word), 0) << "the free waited for its line";
    if (how == 0) {
      ASSERT_TRUE(mount_->Close().ok());
    } else if (how == 1) {
      pool.MarkIdleExit(true);
    } else {
      pool.MarkHandoffExit(1, true);
    }
    medium::SetTraceHook(nullptr);
    EXPECT_EQ(wb.State(word), 2) << "the cleared bit never reached the medium";
    if (how == 0) {
      auto m = testing::VmMount::Open(pool_.path());
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      mount_ = std::move(*m);
    } else if (how == 1) {
      pool.MarkIdleExit(false);
    } else {
      pool.MarkHandoffExit(1, false);
    }
  }
}

// Once the mount is marked to end idle (exec, _exit), a page another
// thread frees on its way out is written back at once: no later write-back
// of the deferred lines may come, and no recovery follows an idle end.
TEST_F(VmBasic, AFreeAfterAnIdleMarkIsNotDeferred) {
  uint64_t page = 0;
  ASSERT_TRUE(vm().pages().AllocPages(1, &page).ok());
  medium::Pool& pool = mount_->pool();
  pool.MarkIdleExit(true);
  WriteBacks wb(pool);
  medium::SetTraceHook(&wb);
  vm().pages().FreePages(page, 1, /*durable=*/false);
  medium::SetTraceHook(nullptr);
  pool.MarkIdleExit(false);
  EXPECT_NE(wb.State(BitmapWord(pool, page)), 0) << "deferred past the idle mark";
}

// The pool remembers a bounded number of deferred lines: one pushed out by
// another is written back there and then, not forgotten.
TEST_F(VmBasic, ADeferredLinePushedOutIsWrittenBack) {
  medium::Pool& pool = mount_->pool();
  char* a = pool.base() + 4096;
  WriteBacks wb(pool);
  medium::SetTraceHook(&wb);
  pool.DeferWriteBack(a);
  EXPECT_EQ(wb.State(a), 0);
  // Every line 64 lines on (4 KiB) from a shares its slot; the next one
  // takes the slot.
  pool.DeferWriteBack(a + 64 * 64);
  medium::SetTraceHook(nullptr);
  EXPECT_NE(wb.State(a), 0) << "a displaced line was dropped";
  EXPECT_EQ(wb.State(a + 64 * 64), 0);
  pool.WriteBackDeferred();
}

// The file layer copies through the pool view: PoolRun must name the pool
// bytes behind a virtual range, and stop where the pool pages stop being
// contiguous (a chunk split by a partial unmap) or backed.
TEST_F(VmBasic, PoolRunFollowsThePageTable) {
  ASSERT_TRUE(vm().Populate(0, 4 * MiB).ok());
  for (uint64_t p = 0; p < 4 * MiB; p += kPageSize) FillPage(vm(), p, 300 + p / kPageSize);
  uint64_t run = 0;
  // Two whole chunks: contiguous only if the pool chunks are.
  char* a = vm().PoolRun(kPageSize, 4 * MiB - kPageSize, &run);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a, mount_->pool().base() + *vm().Translate(kPageSize));
  bool adjacent = *vm().Translate(2 * MiB) == *vm().Translate(0) + 2 * MiB;
  EXPECT_EQ(run, adjacent ? 4 * MiB - kPageSize : 2 * MiB - kPageSize);
  // A hole in the first chunk ends the run there; the next page starts one.
  ASSERT_TRUE(vm().Unmap(64 * KiB, kPageSize).ok());
  a = vm().PoolRun(0, 2 * MiB, &run);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(run, 64 * KiB);
  EXPECT_EQ(vm().PoolRun(64 * KiB, kPageSize, &run), nullptr);
  EXPECT_EQ(run, 0u);
  // Freed pages are reused first: hold the one just freed, so the hole is
  // backed by a page from elsewhere.
  auto held = vm().pages().AllocPage();
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(vm().Populate(64 * KiB, kPageSize).ok());
  a = vm().PoolRun(60 * KiB, 3 * kPageSize, &run);
  ASSERT_NE(a, nullptr);
  // The run ends exactly where the pool pages stop being contiguous.
  uint64_t want = kPageSize;
  if (*vm().Translate(64 * KiB) == *vm().Translate(60 * KiB) + kPageSize) {
    want += kPageSize;
    if (*vm().Translate(68 * KiB) == *vm().Translate(64 * KiB) + kPageSize) want += kPageSize;
  }
  EXPECT_EQ(run, want);
  EXPECT_NE(*vm().Translate(64 * KiB), *vm().Translate(60 * KiB) + kPageSize) << "the hole's page came back";
  // What the run names is what the region shows.
  for (uint64_t p : {uint64_t{0}, 68 * KiB, 3 * MiB}) {
    char* q = vm().PoolRun(p, kPageSize, &run);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(std::memcmp(q, vm().at(p), kPageSize), 0) << p;
  }
  EXPECT_TRUE(testing::PageIsZero(vm(), 64 * KiB));
}

TEST_F(VmBasic, TouchFaultsInAPage) {
  uint64_t before = vm().Stats().faults;
  volatile char* p = vm().at(10 * MiB + 123);
  *p = 'x';  // no Populate: the SIGSEGV handler allocates and maps
  EXPECT_EQ(*p, 'x');
  EXPECT_GT(vm().Stats().faults, before);
  EXPECT_TRUE(vm().Translate(10 * MiB).ok());
}

TEST_F(VmBasic, DataSurvivesReopen) {
  ASSERT_TRUE(vm().Populate(0, 2 * MiB).ok());
  FillPage(vm(), 12 * KiB, 99);
  ASSERT_TRUE(mount_->Close().ok());
  auto m = testing::VmMount::Open(pool_.path());
  ASSERT_TRUE(m.ok());
  mount_ = std::move(*m);
  EXPECT_FALSE(mount_->recovered());
  EXPECT_EQ(PageTag(vm(), 12 * KiB), 99u);
}

TEST_F(VmBasic, BadRangesAreRefused) {
  EXPECT_EQ(vm().Populate(vm().size(), kPageSize).code(), EINVAL);
  EXPECT_EQ(vm().Populate(vm().size() - kPageSize, 2 * kPageSize).code(), EINVAL);
  EXPECT_EQ(vm().Unmap(1, kPageSize).code(), EINVAL);
  EXPECT_EQ(vm().Translate(vm().size()).status().code(), EINVAL);
  EXPECT_EQ(vm().Translate(0).status().code(), ENOENT);
}

TEST_F(VmBasic, FullPoolGivesEnospcAndStaysConsistent) {
  // 256 MiB pool: at most ~126 data chunks. Populate far more.
  Status st;
  uint64_t v = 0;
  for (; v < 200; v++) {
    st = vm().Populate(v * 2 * MiB, 2 * MiB);
    if (!st.ok()) break;
  }
  EXPECT_EQ(st.code(), ENOSPC);
  EXPECT_TRUE(vm().Check(true).ok());
  ASSERT_TRUE(vm().Unmap(0, 2 * MiB).ok());
  EXPECT_TRUE(vm().Populate(v * 2 * MiB, 2 * MiB).ok());
}

// --- the fault handler and the application's own SIGSEGV handler

sigjmp_buf jump;
volatile sig_atomic_t app_handler_ran = 0;
void AppHandler(int) {
  app_handler_ran = 1;
  siglongjmp(jump, 1);
}

TEST(VmFault, ChainsToTheApplicationHandler) {
  TempPool pool;
  ASSERT_TRUE(pool.status().ok());
  int rc = testing::InChild([&] {
    struct sigaction sa {};
    sa.sa_handler = AppHandler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    auto m = testing::VmMount::Open(pool.path());  // installs mapfs's handler over ours
    if (!m.ok()) return 10;
    // Region faults are served by mapfs...
    (*m)->vm().at(0)[0] = 1;
    if (app_handler_ran) return 11;
    // ...any other fault reaches the application's handler.
    void* guard = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (sigsetjmp(jump, 1) == 0) *static_cast<volatile char*>(guard) = 1;
    return app_handler_ran ? 0 : 12;
  });
  EXPECT_EQ(rc, 0);
}

TEST(VmFault, ForeignFaultStillKillsWithoutAHandler) {
  TempPool pool;
  ASSERT_TRUE(pool.status().ok());
  int rc = testing::InChild([&] {
    auto m = testing::VmMount::Open(pool.path());
    if (!m.ok()) return 10;
    void* guard = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *static_cast<volatile char*>(guard) = 1;
    return 0;
  });
  // Killed by SIGSEGV (or, under a sanitizer, by its report of it); never
  // swallowed by mapfs.
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, 10);
}

}  // namespace
}  // namespace mapfs
