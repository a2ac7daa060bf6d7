// Mount identity and liveness (medium::Pool): a mount is alive while it
// holds the OFD lock on its liveness byte, so one that vanished (closed its
// pool fd without unmounting: died, exec'd, or Abandon here) is dead even in
// a process that runs on; dead mounts' slots are reused; a forked child
// takes an identity of its own (AfterFork).
//
// Two Pool objects in one process stand in for two processes, as in
// pool_protocol_test: the locks belong to open file descriptions.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "medium_test_util.h"
#include "test_util.h"

namespace mapfs::medium {
namespace {

using testing::DescribeWait;
using testing::HangGuard;
using testing::ReadState;
using testing::RunInChild;
using testing::TempPool;

constexpr uint64_t kSize = 32 * MiB;

std::atomic<int> scrubbed{0};
void CountScrub(Pool*, int) { scrubbed++; }

std::unique_ptr<Pool> MustOpen(const std::string& path, const OpenOptions& opt = {}) {
  auto r = Pool::Open(path, opt);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  (*r)->FinishOpen();
  return std::move(*r);
}

TEST(MediumPoolIdentity, AMountIsAliveWhileItsDescriptionIsOpen) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  HangGuard guard(30);
  auto a = MustOpen(tp.path());
  auto b = MustOpen(tp.path());
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->mount_slot(), b->mount_slot());
  EXPECT_TRUE(a->MountAlive(a->mount_slot()));
  EXPECT_TRUE(a->MountAlive(b->mount_slot()));
  EXPECT_TRUE(b->MountAlive(a->mount_slot()));
  const int bs = b->mount_slot();
  // The process runs on (a pid check would call it alive): the mount does not.
  b->Abandon();
  EXPECT_FALSE(a->MountAlive(bs)) << "a mount whose pool fd is closed must be dead";
  auto c = MustOpen(tp.path());
  ASSERT_TRUE(c);
  EXPECT_NE(c->mount_slot(), bs) << "a free slot comes before a dead mount's";
  EXPECT_TRUE(a->MountAlive(c->mount_slot()));
  ASSERT_TRUE(c->Close().ok());
  EXPECT_FALSE(a->MountAlive(c->mount_slot()));
}

// GetParam(): whether the openers pass a scrub hook (which the file system
// does); without one only free slots are used.
class MediumPoolSlotReuse : public ::testing::TestWithParam<bool> {};

TEST_P(MediumPoolSlotReuse, DeadMountsSlotsAreReusedAndThePoolStaysDirty) {
  const bool hook = GetParam();
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  HangGuard guard(120);
  OpenOptions opt;
  if (hook) opt.scrub_slot = &CountScrub;
  auto keeper = MustOpen(tp.path(), opt);  // keeps every later open shared
  ASSERT_TRUE(keeper);
  // A dead mount that was about to commit: its redo slot must be released
  // (replayed) when its mount slot is reused.
  int held_redo = -1;
  scrubbed = 0;
  int opened = 0, refused = 0;
  for (int i = 0; i < 300; i++) {
    auto r = Pool::Open(tp.path(), opt);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), EMFILE) << r.status().ToString();
      refused++;
      break;
    }
    (*r)->FinishOpen();
    opened++;
    if (i == 0) {
      held_redo = 3;
      (*r)->shared()->redo_owner[held_redo].store((*r)->mount_token());
    }
    (*r)->Abandon();  // vanish: as if the process had died or exec'd
  }
  if (hook) {
    EXPECT_EQ(opened, 300) << "slots of dead mounts must be reused";
    // Free slots hold nothing (never used, or freed by a clean close); a
    // dead mount's slot is scrubbed before it is reused, every time.
    EXPECT_EQ(scrubbed.load(), 300 - (kMaxMounts - 1)) << "every dead mount's slot is scrubbed before reuse, "
                                                           "and only those";
    EXPECT_EQ(keeper->shared()->redo_owner[held_redo].load(), 0u)
        << "reusing a dead mount's slot must first recover its redo slots";
    EXPECT_GT(keeper->shared()->vanished.load(), 0u);
  } else {
    EXPECT_EQ(opened, kMaxMounts - 1) << "without a scrub hook only free slots may be used";
    EXPECT_EQ(refused, 1);
  }
  ASSERT_TRUE(keeper->Close().ok());
  EXPECT_EQ(ReadState(tp.path()).dirty, 1u) << "mounts vanished: the pool must stay dirty";
  auto next = Pool::Open(tp.path());
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE((*next)->exclusive_open());
  EXPECT_TRUE((*next)->needs_recovery());
  (*next)->FinishOpen();
  ASSERT_TRUE((*next)->Close().ok());
  EXPECT_EQ(ReadState(tp.path()).dirty, 0u);
}

INSTANTIATE_TEST_SUITE_P(Hook, MediumPoolSlotReuse, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Scrub" : "NoScrub"; });

// GetParam(): whether the child closes its mount (else it exits without).
class MediumPoolAfterFork : public ::testing::TestWithParam<bool> {};

TEST_P(MediumPoolAfterFork, ChildTakesAnIdentityOfItsOwn) {
  const bool child_closes = GetParam();
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  HangGuard guard(60);
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  const uint64_t token = p->mount_token();
  const int slot = p->mount_slot();
  const int fd = p->fd();
  // The child reports its slot here.
  void* shm = ::mmap(nullptr, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shm, MAP_FAILED);
  auto* reported = static_cast<std::atomic<int>*>(shm);
  reported->store(-1);
  int status = RunInChild([&]() -> int {
    Status st = p->AfterFork();
    if (!st.ok()) return 2;
    if (p->mount_token() == token || p->mount_slot() == slot || p->mount_slot() < 0) return 3;
    // A description of its own; the parent's is closed here.
    if (p->fd() == fd || ::fcntl(fd, F_GETFD) >= 0) return 4;
    if (!p->MountAlive(slot)) return 5;
    if (p->exclusive_open()) return 6;
    reported->store(p->mount_slot());
    if (child_closes) return p->Close().ok() ? 0 : 7;
    ::_exit(0);
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWait(status);
  const int child_slot = reported->load();
  ::munmap(shm, sizeof(int));
  ASSERT_GE(child_slot, 0);
  EXPECT_NE(child_slot, slot);
  EXPECT_EQ(p->mount_token(), token) << "the parent is unaffected";
  EXPECT_EQ(p->shared()->mounts[slot].token.load(), token);
  EXPECT_FALSE(p->MountAlive(child_slot)) << "the child exited";
  EXPECT_EQ(p->shared()->mounts[child_slot].token.load() != 0, !child_closes);
  ASSERT_TRUE(p->Close().ok());
  EXPECT_EQ(ReadState(tp.path()).dirty, child_closes ? 0u : 1u);
}

INSTANTIATE_TEST_SUITE_P(ChildCloses, MediumPoolAfterFork, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Closes" : "Vanishes"; });

// The parent unmounts, as the last mount, before the child's AfterFork ran:
// it shared its open file description with the child, so it saw nobody else
// and retired the shared state. The child must refuse to go on with it.
TEST(MediumPoolAfterFork, ParentUnmountedDuringTheForkIsRefused) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  HangGuard guard(60);
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(30);
    char c;
    if (::read(go[0], &c, 1) != 1) _exit(2);
    Status st = p->AfterFork();
    if (st.code() != ESTALE) _exit(3);
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(p->Close().ok());
  EXPECT_EQ(ReadState(tp.path()).dirty, 0u);
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWait(status);
  ::close(go[0]);
  ::close(go[1]);
  auto q = MustOpen(tp.path());
  ASSERT_TRUE(q);
  EXPECT_TRUE(q->exclusive_open());
  EXPECT_FALSE(q->needs_recovery());
}

}  // namespace
}  // namespace mapfs::medium
