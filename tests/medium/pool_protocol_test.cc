// The open/close protocol (clean/dirty flag, several mounts of one pool) and
// the robust cross-process locks.
//
// Two Pool objects in one process stand in for two processes: the open
// protocol uses OFD locks, which belong to the open file description, not to
// the process. Operations that could hang run under a HangGuard.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "medium_test_util.h"
#include "test_util.h"

namespace mapfs::medium {
namespace {

using testing::DescribeWait;
using testing::HangGuard;
using testing::ReadFileBytes;
using testing::ReadState;
using testing::RunInChild;
using testing::TempPool;

constexpr uint64_t kSize = 32 * MiB;

std::unique_ptr<Pool> MustOpen(const std::string& path) {
  auto r = Pool::Open(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  return std::move(*r);
}

std::string ShmPath(const format::PoolHeader& h) {
  static const char* d = "0123456789abcdef";
  std::string s = "/dev/shm/mapfs-";
  for (uint8_t b : h.uuid) {
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

TEST(MediumPoolDirty, CleanCloseClearsDirty) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  for (uint64_t round = 1; round <= 3; round++) {
    auto p = MustOpen(tp.path());
    ASSERT_TRUE(p);
    EXPECT_TRUE(p->exclusive_open());
    EXPECT_FALSE(p->needs_recovery()) << "round " << round;
    EXPECT_EQ(ReadState(tp.path()).dirty, 1u) << "an open pool must be marked dirty on the medium";
    EXPECT_EQ(ReadState(tp.path()).open_count, round);
    p->FinishOpen();
    ASSERT_TRUE(p->Close().ok());
    EXPECT_EQ(ReadState(tp.path()).dirty, 0u);
    EXPECT_TRUE(p->Close().ok()) << "a second Close must be harmless";
  }
  EXPECT_EQ(ReadState(tp.path()).recoveries, 0u);
}

TEST(MediumPoolDirty, DestructorClosesCleanly) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  {
    auto p = MustOpen(tp.path());
    ASSERT_TRUE(p);
    p->FinishOpen();
  }
  EXPECT_EQ(ReadState(tp.path()).dirty, 0u);
}

TEST(MediumPoolDirty, AbandonLeavesDirtyAndNextOpenRecovers) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  {
    auto p = MustOpen(tp.path());
    ASSERT_TRUE(p);
    p->FinishOpen();
    p->Abandon();
  }
  EXPECT_EQ(ReadState(tp.path()).dirty, 1u);
  {
    HangGuard guard(30);
    auto p = MustOpen(tp.path());
    ASSERT_TRUE(p);
    EXPECT_TRUE(p->exclusive_open());
    EXPECT_TRUE(p->needs_recovery());
    EXPECT_EQ(ReadState(tp.path()).recoveries, 1u);
    p->FinishOpen();
    EXPECT_FALSE(p->needs_recovery()) << "FinishOpen ends recovery";
    ASSERT_TRUE(p->Close().ok());
  }
  EXPECT_EQ(ReadState(tp.path()).dirty, 0u);
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->needs_recovery()) << "recovered and closed cleanly: no more recovery";
  EXPECT_EQ(ReadState(tp.path()).recoveries, 1u);
}

// A process that dies before FinishOpen must not lock everybody out.
TEST(MediumPoolDirty, AbandonBeforeFinishOpenReleasesTheOpenLock) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto a = MustOpen(tp.path());
  ASSERT_TRUE(a);
  a->Abandon();
  HangGuard guard(30);
  auto b = MustOpen(tp.path());
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->exclusive_open());
  EXPECT_TRUE(b->needs_recovery());
}

class MediumPoolTwoMounts : public ::testing::TestWithParam<bool> {};

// GetParam(): whether the first mount closes first.
TEST_P(MediumPoolTwoMounts, OnlyTheLastCloseMarksThePoolClean) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  HangGuard guard(30);
  auto a = MustOpen(tp.path());
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->exclusive_open());
  a->FinishOpen();
  auto b = MustOpen(tp.path());  // hangs here if the first mount keeps others out
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->exclusive_open());
  EXPECT_FALSE(b->needs_recovery());
  EXPECT_EQ(b->replayed_at_open(), 0);
  EXPECT_NE(a->mount_token(), b->mount_token());
  b->FinishOpen();
  EXPECT_EQ(ReadState(tp.path()).dirty, 1u);

  // Both mappings show the same pool.
  uint64_t off = a->header().meta_end;
  *a->at<uint64_t>(off) = 0xfeedface;
  EXPECT_EQ(*b->at<uint64_t>(off), 0xfeedfaceu);

  Pool* first = GetParam() ? a.get() : b.get();
  Pool* second = GetParam() ? b.get() : a.get();
  ASSERT_TRUE(first->Close().ok());
  EXPECT_EQ(ReadState(tp.path()).dirty, 1u) << "closing one of two mounts must keep the pool dirty";
  ASSERT_TRUE(second->Close().ok());
  EXPECT_EQ(ReadState(tp.path()).dirty, 0u) << "the last clean close must mark the pool clean";

  auto c = MustOpen(tp.path());
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->exclusive_open());
  EXPECT_FALSE(c->needs_recovery());
}

// GetParam(): whether the first (exclusive) mount is the one that vanishes.
TEST_P(MediumPoolTwoMounts, AVanishedMountKeepsThePoolDirty) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  HangGuard guard(30);
  auto a = MustOpen(tp.path());
  ASSERT_TRUE(a);
  a->FinishOpen();
  auto b = MustOpen(tp.path());
  ASSERT_TRUE(b);
  b->FinishOpen();
  Pool* dies = GetParam() ? a.get() : b.get();
  Pool* closes = GetParam() ? b.get() : a.get();
  dies->Abandon();
  ASSERT_TRUE(closes->Close().ok());
  EXPECT_EQ(ReadState(tp.path()).dirty, 1u) << "a mount vanished without closing: the pool must stay dirty";

  auto c = MustOpen(tp.path());
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->exclusive_open());
  EXPECT_TRUE(c->needs_recovery());
  c->FinishOpen();
  ASSERT_TRUE(c->Close().ok());
  EXPECT_EQ(ReadState(tp.path()).dirty, 0u);
}

INSTANTIATE_TEST_SUITE_P(Order, MediumPoolTwoMounts, ::testing::Bool());

TEST(MediumPoolDirty, ManyMountsCloseInAnyOrder) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  HangGuard guard(60);
  std::vector<std::unique_ptr<Pool>> mounts;
  for (int i = 0; i < 5; i++) {
    mounts.push_back(MustOpen(tp.path()));
    ASSERT_TRUE(mounts.back());
    EXPECT_EQ(mounts.back()->exclusive_open(), i == 0);
    mounts.back()->FinishOpen();
  }
  for (int i : {2, 0, 4, 1}) {
    ASSERT_TRUE(mounts[i]->Close().ok());
    EXPECT_EQ(ReadState(tp.path()).dirty, 1u) << "after closing mount " << i;
  }
  ASSERT_TRUE(mounts[3]->Close().ok());
  EXPECT_EQ(ReadState(tp.path()).dirty, 0u);
}

TEST(MediumPoolDirty, LastCloseRemovesTheSharedMemoryObject) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  std::string shm = ShmPath(testing::ReadHeader(tp.path()));
  HangGuard guard(30);
  auto a = MustOpen(tp.path());
  ASSERT_TRUE(a);
  a->FinishOpen();
  EXPECT_TRUE(testing::FileExists(shm)) << shm;
  auto b = MustOpen(tp.path());
  ASSERT_TRUE(b);
  b->FinishOpen();
  ASSERT_TRUE(a->Close().ok());
  EXPECT_TRUE(testing::FileExists(shm)) << "still in use by the second mount";
  ASSERT_TRUE(b->Close().ok());
  EXPECT_FALSE(testing::FileExists(shm)) << "the last close must not leave " << shm << " behind";
}

TEST(MediumPoolDirty, CreateRefusesAPoolThatIsOpen) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  p->FinishOpen();
  const auto before = ReadFileBytes(tp.path());
  CreateOptions opt;
  opt.size = kSize;
  Status st = Pool::Create(tp.path(), opt);
  EXPECT_EQ(st.code(), EBUSY) << st.ToString();
  EXPECT_TRUE(ReadFileBytes(tp.path()) == before) << "mkfs over an open pool modified it";
  ASSERT_TRUE(p->Close().ok());
  EXPECT_TRUE(Pool::Create(tp.path(), opt).ok()) << "once closed, the pool can be reformatted";
}

// ------------------------------------------------------------ robust locks

}  // namespace

// Readable parameter values in test names and messages.
void PrintTo(LockId id, std::ostream* os) {
  static const char* names[] = {"ppt", "space", "recovery"};
  int i = static_cast<int>(id);
  *os << (i >= 0 && i < 3 ? names[i] : "?");
}

namespace {

// Unsynchronised read-modify-write under the lock: any overlap loses counts.
void Increment(Pool* p, uint64_t off, int times, LockId id = LockId::kSpace) {
  volatile uint64_t* ctr = p->at<uint64_t>(off);
  for (int i = 0; i < times; i++) {
    PoolLock l(p, id);
    uint64_t v = *ctr;
    sched_yield();  // widen the window an unlocked update would lose in
    *ctr = v + 1;
  }
}

class MediumPoolLock : public ::testing::TestWithParam<LockId> {};

TEST_P(MediumPoolLock, DeadHolderDoesNotBlockOthers) {
  const LockId id = GetParam();
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  p->FinishOpen();
  std::string path = tp.path();
  int st = RunInChild(
      [&]() -> int {
        auto c = Pool::Open(path);
        if (!c.ok()) return 2;
        if ((*c)->exclusive_open()) return 3;
        (*c)->FinishOpen();
        (*c)->Lock(id);
        ::_exit(0);  // dies holding the lock, without closing
      },
      30);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child: " << DescribeWait(st);

  HangGuard guard(30);
  p->Lock(id);
  p->Unlock(id);
  p->Lock(id);  // the lock is consistent again, not just taken once
  p->Unlock(id);
  for (LockId other : {LockId::kPpt, LockId::kSpace, LockId::kRecovery}) {
    PoolLock l(p.get(), other);
  }
  // And it still excludes: a lock left unrecoverable would let every caller in.
  uint64_t off = p->header().meta_end;
  std::vector<std::thread> ts;
  for (int t = 0; t < 2; t++) ts.emplace_back(Increment, p.get(), off, 5000, id);
  for (auto& t : ts) t.join();
  EXPECT_EQ(*p->at<uint64_t>(off), 10000u);
}

INSTANTIATE_TEST_SUITE_P(AllLocks, MediumPoolLock,
                         ::testing::Values(LockId::kPpt, LockId::kSpace, LockId::kRecovery),
                         [](const ::testing::TestParamInfo<LockId>& i) { return ::testing::PrintToString(i.param); });

TEST(MediumPoolLockExclusion, ThreadsOfOneMount) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  p->FinishOpen();
  uint64_t off = p->header().meta_end;
  HangGuard guard(120);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; t++) ts.emplace_back(Increment, p.get(), off, 20000, LockId::kSpace);
  for (auto& t : ts) t.join();
  EXPECT_EQ(*p->at<uint64_t>(off), 80000u);
}

TEST(MediumPoolLockExclusion, TwoProcesses) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  p->FinishOpen();
  const uint64_t off = p->header().meta_end + 64;
  std::string path = tp.path();
  HangGuard guard(120);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(100);
    auto c = Pool::Open(path);
    if (!c.ok()) ::_exit(2);
    (*c)->FinishOpen();
    Increment(c->get(), off, 20000);
    ::_exit((*c)->Close().ok() ? 0 : 3);
  }
  Increment(p.get(), off, 20000);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child: " << DescribeWait(st);
  EXPECT_EQ(*p->at<uint64_t>(off), 40000u);
}

}  // namespace
}  // namespace mapfs::medium
