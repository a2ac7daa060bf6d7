// Mounts across fork and exec, as the LD_PRELOAD shim uses them
// (fs/inherit.cc; medium::Pool::AfterFork and mount liveness):
//
//   - a forked child that calls AfterFork is a mount of its own: it and the
//     parent work on the pool at once and see each other's work, and the
//     pool ends up clean or dirty depending on whether the child unmounted;
//   - an unlinked file open in both (RetainOpen) lives until both close;
//   - a mount whose image was replaced by execve is dead although its pid
//     runs on: its slot is reused (300 exec'd mounts in a row fit in 256
//     slots) and its locks are reaped;
//   - Adopt rebuilds an open file description after exec.
//
// Children never use gtest assertions: they print to stderr and exit with a
// code the parent checks. Every wait has a deadline, and a child has an
// alarm, so a hang fails instead of blocking CI.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <new>
#include <thread>

#include "fs_test_util.h"
#include "medium/medium_test_util.h"
#include "meta/inode_locks.h"

#ifndef MAPFS_EXEC_HELPER
#error "MAPFS_EXEC_HELPER must name the fs_exec_helper binary"
#endif

namespace mapfs::fstest {
namespace {

using Clock = std::chrono::steady_clock;
using fs::FileSystem;
using fs::FsCheckReport;
using fs::OpenFile;

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#else
constexpr bool kTsan = false;
#endif

int ChildFail(int code, const std::string& msg) {
  std::fprintf(stderr, "[child %d] %s\n", static_cast<int>(::getpid()), msg.c_str());
  std::fflush(stderr);
  return code;
}

std::unique_ptr<FileSystem> MustMount(const std::string& path) {
  auto fs = FileSystem::Mount(path);
  EXPECT_TRUE(fs.ok()) << fs.status().ToString();
  return fs.ok() ? std::move(*fs) : nullptr;
}

// Creates `path` holding `n` bytes of pattern `tag`; "" or what failed.
std::string MakeFile(FileSystem* fs, const std::string& path, uint64_t tag, size_t n) {
  auto f = fs->Open(path, O_CREAT | O_EXCL | O_RDWR, 0644);
  if (!f.ok()) return path + ": create: " + f.status().ToString();
  std::vector<char> buf(n);
  FillPattern(buf.data(), n, tag, 0);
  auto w = fs->Write(**f, buf.data(), n, 0);
  Status c = fs->Close(**f);
  if (!w.ok() || *w != n) return path + ": write: " + (w.ok() ? std::to_string(*w) : w.status().ToString());
  if (!c.ok()) return path + ": close: " + c.ToString();
  return "";
}

// "" if `f` holds exactly `n` bytes of pattern `tag`, else why not.
std::string CheckOpen(FileSystem* fs, OpenFile& f, uint64_t tag, size_t n) {
  std::vector<char> buf(n + 1);
  auto r = fs->Read(f, buf.data(), buf.size(), 0);
  if (!r.ok()) return "read: " + r.status().ToString();
  if (*r != n) return std::to_string(*r) + " bytes, expected " + std::to_string(n);
  int64_t bad = PatternMismatch(buf.data(), n, tag, 0);
  if (bad >= 0) return "wrong byte at offset " + std::to_string(bad);
  return "";
}

std::string CheckFile(FileSystem* fs, const std::string& path, uint64_t tag, size_t n) {
  auto f = fs->Open(path, O_RDONLY, 0);
  if (!f.ok()) return path + ": open: " + f.status().ToString();
  std::string r = CheckOpen(fs, **f, tag, n);
  (void)fs->Close(**f);
  return r.empty() ? r : path + ": " + r;
}

uint64_t Dirty(const std::string& path) { return testing::ReadState(path).dirty; }

// Sizes that make files grow through several partition levels (pswap).
size_t SizeFor(int i) { return size_t{1} << (10 + i % 9); }  // 1 KiB .. 256 KiB

// ------------------------------------------------------------------ fork

// GetParam(): whether the child unmounts (else it exits without unmounting).
class FsFork : public ::testing::TestWithParam<bool> {};

TEST_P(FsFork, ChildAndParentAreTwoMountsThatSeeEachOthersWork) {
  const bool child_unmounts = GetParam();
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  auto fs = MustMount(path);
  ASSERT_TRUE(fs);
  ASSERT_TRUE(fs->Mkdir("/shared", 0755).ok());
  ASSERT_EQ(MakeFile(fs.get(), "/before", 1, 100000), "");
  medium::Pool& pp = fs->mount().pool();
  const uint64_t parent_token = pp.mount_token();
  const int parent_slot = pp.mount_slot();

  constexpr int kFiles = 40;
  struct Shared {
    std::atomic<int> child{0}, parent{0};
    std::atomic<int> child_slot{-1};
  };
  SharedMem<Shared> sh;
  pid_t pid = ForkChild(
      [&]() -> int {
        auto fail = [&](int code, const std::string& m) {
          sh->child = -1;
          return ChildFail(code, m);
        };
        Status st = fs->AfterFork();
        if (!st.ok()) return fail(2, "AfterFork: " + st.ToString());
        medium::Pool& cp = fs->mount().pool();
        if (cp.mount_token() == parent_token || cp.mount_slot() == parent_slot || cp.mount_slot() < 0)
          return fail(3, "the child kept the parent's mount identity");
        if (!cp.MountAlive(parent_slot)) return fail(4, "the parent's mount looks dead from the child");
        sh->child_slot = cp.mount_slot();
        std::string e = CheckFile(fs.get(), "/before", 1, 100000);
        if (!e.empty()) return fail(5, e);
        // Work while the parent works: files of our own that grow (pswap)
        // and names in a directory both change.
        for (int i = 0; i < kFiles; i++) {
          e = MakeFile(fs.get(), "/shared/c" + std::to_string(i), 1000 + i, SizeFor(i));
          if (!e.empty()) return fail(6, e);
          e = CheckFile(fs.get(), "/shared/c" + std::to_string(i), 1000 + i, SizeFor(i));
          if (!e.empty()) return fail(7, e);
          if (i % 4 == 3 && !fs->Unlink("/shared/c" + std::to_string(i)).ok()) return fail(8, "unlink");
        }
        sh->child = 1;
        if (!WaitUntil([&] { return sh->parent.load() != 0; }, 60)) return fail(9, "parent stuck");
        for (int i = 0; i < kFiles; i++) {
          std::string p = "/shared/p" + std::to_string(i);
          e = CheckFile(fs.get(), p, 2000 + i, SizeFor(i + 3));
          if (!e.empty()) return fail(10, "parent's file: " + e);
        }
        if (!child_unmounts) _exit(0);  // vanish: no unmount, no destructors
        st = fs->Unmount();
        if (!st.ok()) return fail(11, "unmount: " + st.ToString());
        return 0;
      },
      120);
  ASSERT_GT(pid, 0);
  for (int i = 0; i < kFiles; i++) {
    ASSERT_EQ(MakeFile(fs.get(), "/shared/p" + std::to_string(i), 2000 + i, SizeFor(i + 3)), "");
    ASSERT_EQ(CheckFile(fs.get(), "/shared/p" + std::to_string(i), 2000 + i, SizeFor(i + 3)), "");
  }
  sh->parent = 1;
  ASSERT_TRUE(WaitUntil([&] { return sh->child.load() != 0; }, 60)) << "child stuck";
  int rc = WaitChildFor(pid, 60);
  ASSERT_EQ(rc, 0) << "child: " << DescribeExit(rc);
  // The parent is unaffected and sees the child's work.
  EXPECT_EQ(pp.mount_token(), parent_token);
  EXPECT_FALSE(pp.MountAlive(sh->child_slot.load())) << "the child exited: its mount must be dead";
  for (int i = 0; i < kFiles; i++) {
    std::string p = "/shared/c" + std::to_string(i);
    if (i % 4 == 3) {
      struct stat st {};
      EXPECT_EQ(fs->Stat(p, &st).code(), ENOENT) << p;
    } else {
      EXPECT_EQ(CheckFile(fs.get(), p, 1000 + i, SizeFor(i)), "");
    }
  }
  EXPECT_EQ(CheckFile(fs.get(), "/before", 1, 100000), "");
  FsCheckReport live = fs->Check();
  EXPECT_TRUE(live.problems.empty()) << Join(live.problems);
  ASSERT_TRUE(fs->Unmount().ok());
  if (child_unmounts)
    EXPECT_EQ(Dirty(path), 0u) << "both mounts closed cleanly: the pool must be clean";
  else
    EXPECT_EQ(Dirty(path), 1u) << "the child's mount vanished without closing: the pool must stay dirty";

  auto again = MustMount(path);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->recovered(), !child_unmounts);
  EXPECT_EQ(CheckFile(again.get(), "/shared/c0", 1000, SizeFor(0)), "");
  EXPECT_EQ(CheckFile(again.get(), "/shared/p0", 2000, SizeFor(3)), "");
  ASSERT_TRUE(again->Unmount().ok());
  EXPECT_EQ(Dirty(path), 0u);
  FS_EXPECT_CLEAN(path);
}

INSTANTIATE_TEST_SUITE_P(ChildUnmounts, FsFork, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Unmounts" : "Vanishes"; });

// GetParam(): whether the child closes first.
class FsForkOpenUnlinked : public ::testing::TestWithParam<bool> {};

TEST_P(FsForkOpenUnlinked, LivesUntilBothProcessesClose) {
  const bool child_first = GetParam();
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  auto fs = MustMount(path);
  ASSERT_TRUE(fs);
  constexpr size_t kSize = 3 << 20;
  constexpr uint64_t kTag = 77;
  ASSERT_EQ(MakeFile(fs.get(), "/u", kTag, kSize), "");
  auto f = fs->Open("/u", O_RDWR, 0);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::shared_ptr<OpenFile> file = *f;
  const uint64_t ino = file->ino;

  struct Shared {
    std::atomic<int> child{0}, parent{0};
  };
  SharedMem<Shared> sh;
  pid_t pid = ForkChild(
      [&]() -> int {
        auto fail = [&](int code, const std::string& m) {
          sh->child = -1;
          return ChildFail(code, m);
        };
        Status st = fs->AfterFork();
        if (!st.ok()) return fail(2, "AfterFork: " + st.ToString());
        fs->RetainOpen(*file);  // the inherited description is ours to close too
        sh->child = 1;
        if (!WaitUntil([&] { return sh->parent.load() >= 1; }, 60)) return fail(3, "parent stuck");
        struct stat sb {};
        if (!fs->Fstat(*file, &sb).ok() || sb.st_nlink != 0) return fail(4, "not unlinked");
        std::string e = CheckOpen(fs.get(), *file, kTag, kSize);
        if (!e.empty()) return fail(5, e);
        if (!child_first) {
          // The parent closed its copy: ours still holds the inode.
          if (!WaitUntil([&] { return sh->parent.load() >= 2; }, 60)) return fail(6, "parent stuck");
          e = CheckOpen(fs.get(), *file, kTag, kSize);
          if (!e.empty()) return fail(7, "after the parent's close: " + e);
        }
        st = fs->Close(*file);
        if (!st.ok()) return fail(8, "close: " + st.ToString());
        st = fs->Unmount();
        if (!st.ok()) return fail(9, "unmount: " + st.ToString());
        sh->child = 2;
        return 0;
      },
      120);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(WaitUntil([&] { return sh->child.load() != 0; }, 60));
  ASSERT_EQ(sh->child.load(), 1) << "child: " << DescribeExit(WaitChildFor(pid, 10));
  ASSERT_TRUE(fs->Unlink("/u").ok());
  sh->parent = 1;
  if (child_first) {
    int rc = WaitChildFor(pid, 60);
    ASSERT_EQ(rc, 0) << "child: " << DescribeExit(rc);
    // The child's close left ours.
    EXPECT_EQ(CheckOpen(fs.get(), *file, kTag, kSize), "");
    ASSERT_TRUE(fs->Close(*file).ok());
  } else {
    ASSERT_TRUE(fs->Close(*file).ok());
    sh->parent = 2;
    int rc = WaitChildFor(pid, 60);
    ASSERT_EQ(rc, 0) << "child: " << DescribeExit(rc);
  }
  // Both closed: the inode is gone (and nothing leaked).
  auto a = fs->Adopt(ino, O_RDONLY, false);
  EXPECT_EQ(a.status().code(), ESTALE) << "the unlinked inode outlived both closes";
  FsCheckReport r = fs->Check();
  EXPECT_TRUE(r.problems.empty()) << Join(r.problems);
  EXPECT_EQ(r.files, 0u);
  ASSERT_TRUE(fs->Unmount().ok());
  EXPECT_EQ(Dirty(path), 0u);
  FS_EXPECT_CLEAN(path);
}

INSTANTIATE_TEST_SUITE_P(Order, FsForkOpenUnlinked, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "ChildClosesFirst" : "ParentClosesFirst"; });

// Forks while another thread of the parent keeps growing and rewriting a
// file (pswap, mapping changes, the vm's locks): each child still gets a
// coherent mount. Not under TSan, which does not support forking a
// multi-threaded process.
TEST(FsForkThreads, ForkWhileAnotherThreadChangesMappings) {
  if (kTsan) GTEST_SKIP() << "fork of a multi-threaded process";
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  auto fs = MustMount(path);
  ASSERT_TRUE(fs);
  ASSERT_EQ(MakeFile(fs.get(), "/stable", 5, 1 << 20), "");
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::string worker_error;
  std::thread worker([&] {
    for (int i = 0; !stop.load(); i++) {
      std::string p = "/busy" + std::to_string(i % 4);
      (void)fs->Unlink(p);
      std::string e = MakeFile(fs.get(), p, 300 + i, SizeFor(i) * 8);
      if (e.empty()) e = CheckFile(fs.get(), p, 300 + i, SizeFor(i) * 8);
      if (!e.empty()) {
        worker_error = e;
        return;
      }
      rounds++;
    }
  });
  for (int k = 0; k < 12; k++) {
    WaitUntil([&] { return rounds.load() > k * 3; }, 10);
    pid_t pid = ForkChild(
        [&]() -> int {
          Status st = fs->AfterFork();
          if (!st.ok()) return ChildFail(2, "AfterFork: " + st.ToString());
          std::string e = CheckFile(fs.get(), "/stable", 5, 1 << 20);
          if (!e.empty()) return ChildFail(3, e);
          std::string p = "/child" + std::to_string(k);
          e = MakeFile(fs.get(), p, 600 + k, SizeFor(k) * 8);
          if (e.empty()) e = CheckFile(fs.get(), p, 600 + k, SizeFor(k) * 8);
          if (!e.empty()) return ChildFail(4, e);
          st = fs->Unmount();
          if (!st.ok()) return ChildFail(5, "unmount: " + st.ToString());
          return 0;
        },
        60);
    ASSERT_GT(pid, 0);
    int rc = WaitChildFor(pid, 60);
    EXPECT_EQ(rc, 0) << "child " << k << ": " << DescribeExit(rc);
  }
  stop = true;
  worker.join();
  EXPECT_EQ(worker_error, "");
  for (int k = 0; k < 12; k++)
    EXPECT_EQ(CheckFile(fs.get(), "/child" + std::to_string(k), 600 + k, SizeFor(k) * 8), "");
  ASSERT_TRUE(fs->Unmount().ok());
  EXPECT_EQ(Dirty(path), 0u);
  FS_EXPECT_CLEAN(path);
}

// ------------------------------------------------------------------ exec

// Runs the helper in a child (argv after the program name); the child's
// exit code.
pid_t SpawnHelper(const std::vector<std::string>& args) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    static char name[] = "fs_exec_helper";
    argv.push_back(name);
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(MAPFS_EXEC_HELPER, argv.data());
    _exit(127);
  }
  return pid;
}

TEST(FsExec, ExecedMountsFreeTheirSlots) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  // Held open throughout, so no mount of the chain is alone (an exclusive
  // open would rebuild the shared state and free every slot anyway).
  auto fs = MustMount(path);
  ASSERT_TRUE(fs);
  // One process: 300 images in a row, each mounting and exec'ing the next
  // without unmounting. Its pid runs all along, so only the images'
  // liveness locks tell the dead mounts from live ones.
  constexpr int kChain = 300;
  static_assert(kChain > medium::kMaxMounts);
  pid_t pid = SpawnHelper({"chain", path, std::to_string(kChain), std::to_string(kChain)});
  ASSERT_GT(pid, 0);
  int rc = WaitChildFor(pid, 240);
  ASSERT_EQ(rc, 0) << "exec chain: " << DescribeExit(rc);
  for (int k = 0; k <= kChain; k += 50) {
    struct stat st {};
    EXPECT_TRUE(fs->Stat("/chain-" + std::to_string(k), &st).ok()) << k;
  }
  ASSERT_TRUE(fs->Unmount().ok());
  EXPECT_EQ(Dirty(path), 1u) << "mounts vanished with their images: the pool must stay dirty";
  auto again = MustMount(path);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->recovered());
  ASSERT_TRUE(again->Unmount().ok());
  EXPECT_EQ(Dirty(path), 0u);
  FS_EXPECT_CLEAN(path);
}

// GetParam(): the exec'd mount held the write lock (else a read lock).
class FsExecLock : public ::testing::TestWithParam<bool> {};

TEST_P(FsExecLock, LockOfAnExecedMountIsReaped) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  auto fs = MustMount(path);
  ASSERT_TRUE(fs);
  ASSERT_EQ(MakeFile(fs.get(), "/locked", 9, 5000), "");
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  int wfd = ::dup(p[1]);  // not close-on-exec: the helper's channel
  pid_t sleeper = SpawnHelper({"lock", path, "/locked", GetParam() ? "w" : "r", std::to_string(wfd)});
  ::close(wfd);
  ::close(p[1]);
  ASSERT_GT(sleeper, 0);
  char c = 0;
  ssize_t got = ::read(p[0], &c, 1);
  ::close(p[0]);
  ASSERT_EQ(got, 1) << "the helper did not take the lock: " << DescribeExit(WaitChildFor(sleeper, 10));
  // The helper's image is now /bin/sleep: same pid, alive, but its mount is
  // gone. A writer of the file must get the lock (in a child, so a lock that
  // is never reaped fails by the child's alarm instead of hanging us).
  pid_t writer = ForkChild(
      [&]() -> int {
        auto w = FileSystem::Mount(path);
        if (!w.ok()) return ChildFail(2, "mount: " + w.status().ToString());
        auto f = (*w)->Open("/locked", O_WRONLY, 0);
        if (!f.ok()) return ChildFail(3, "open: " + f.status().ToString());
        auto n = (*w)->Write(**f, "x", 1, 0);
        if (!n.ok()) return ChildFail(4, "write: " + n.status().ToString());
        (void)(*w)->Close(**f);
        return (*w)->Unmount().ok() ? 0 : 5;
      },
      30);
  ASSERT_GT(writer, 0);
  int rc = WaitChildFor(writer, 40);
  EXPECT_EQ(::kill(sleeper, 0), 0) << "the exec'd process must still run for this test to mean anything";
  ::kill(sleeper, SIGKILL);
  WaitChildFor(sleeper, 10);
  EXPECT_EQ(rc, 0) << "writer: " << DescribeExit(rc);
  ASSERT_TRUE(fs->Unmount().ok());
  FS_EXPECT_CLEAN(path);
}

INSTANTIATE_TEST_SUITE_P(Kind, FsExecLock, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Write" : "Read"; });

TEST(FsExec, AdoptTakesOverAnOpenUnlinkedFileAcrossExec) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  auto fs = MustMount(path);
  ASSERT_TRUE(fs);
  constexpr size_t kSize = 200000;
  {
    auto f = fs->Open("/held", O_CREAT | O_EXCL | O_WRONLY, 0644);
    ASSERT_TRUE(f.ok());
    std::vector<uint8_t> buf(kSize);
    for (size_t i = 0; i < kSize; i++) buf[i] = static_cast<uint8_t>((i * 131) ^ (i >> 9));
    ASSERT_TRUE(fs->Write(**f, buf.data(), kSize, 0).ok());
    ASSERT_TRUE(fs->Close(**f).ok());
  }
  pid_t pid = SpawnHelper({"adopt", path, "/held", std::to_string(kSize)});
  ASSERT_GT(pid, 0);
  int rc = WaitChildFor(pid, 60);
  ASSERT_EQ(rc, 0) << "helper: " << DescribeExit(rc);
  FsCheckReport r = fs->Check();
  EXPECT_TRUE(r.problems.empty()) << Join(r.problems);
  EXPECT_EQ(r.files, 0u) << "the adopted, unlinked file must be gone after its last close";
  ASSERT_TRUE(fs->Unmount().ok());
  FS_EXPECT_CLEAN(path);
}

// ------------------------------------------------------------------ Adopt

TEST(FsAdopt, ChecksTheInodeAndCountsAsAsked) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  auto a = MustMount(path);
  auto b = MustMount(path);  // stands in for the image after exec
  ASSERT_TRUE(a && b);
  ASSERT_EQ(MakeFile(a.get(), "/f", 3, 10000), "");
  ASSERT_TRUE(a->Mkdir("/d", 0755).ok());
  auto fa = a->Open("/f", O_RDWR | O_APPEND, 0);
  ASSERT_TRUE(fa.ok());
  const uint64_t ino = (*fa)->ino;
  ASSERT_TRUE(a->Unlink("/f").ok());

  // Not counted: a description of its own (the inode is open, so live).
  auto extra = b->Adopt(ino, O_RDONLY, false);
  ASSERT_TRUE(extra.ok()) << extra.status().ToString();
  EXPECT_FALSE((*extra)->is_dir);
  EXPECT_EQ(CheckOpen(b.get(), **extra, 3, 10000), "");
  // Counted: takes over a's count; a vanishes as an exec'd image would.
  auto taken = b->Adopt(ino, O_RDWR | O_APPEND | O_TRUNC | O_CREAT, true);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ((*taken)->flags & (O_TRUNC | O_CREAT), 0);
  EXPECT_EQ(CheckOpen(b.get(), **taken, 3, 10000), "") << "adopting must not truncate";
  a->Abandon();
  EXPECT_TRUE(b->Write(**taken, "z", 1).ok()) << "O_APPEND kept";
  struct stat st {};
  ASSERT_TRUE(b->Fstat(**taken, &st).ok());
  EXPECT_EQ(st.st_size, 10001);
  EXPECT_EQ(st.st_nlink, 0u);
  ASSERT_TRUE(b->Close(**extra).ok());
  auto more = b->Adopt(ino, O_RDONLY, false);
  ASSERT_TRUE(more.ok()) << "one description still holds it: " << more.status().ToString();
  ASSERT_TRUE(b->Close(**more).ok());
  ASSERT_TRUE(b->Close(**taken).ok());
  EXPECT_EQ(b->Adopt(ino, O_RDONLY, false).status().code(), ESTALE) << "freed at the last close";
  EXPECT_EQ(b->Adopt(ino, O_RDONLY, true).status().code(), ESTALE);

  auto d = b->Lookup("/d");
  ASSERT_TRUE(d.ok());
  auto fd = b->Adopt(*d, O_RDONLY | O_DIRECTORY, false);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_TRUE((*fd)->is_dir);
  EXPECT_EQ(b->Adopt(*d, O_RDWR, false).status().code(), EISDIR);
  ASSERT_TRUE(b->Close(**fd).ok());
  EXPECT_EQ(b->Adopt(0, O_RDONLY, false).status().code(), ESTALE);
  EXPECT_EQ(b->Adopt(1ull << 40, O_RDONLY, false).status().code(), ESTALE);
  EXPECT_EQ(b->Adopt(ino + 1000, O_RDONLY, false).status().code(), ESTALE);
  ASSERT_TRUE(b->Unmount().ok());
  FS_EXPECT_CLEAN(path);
}

}  // namespace
}  // namespace mapfs::fstest
