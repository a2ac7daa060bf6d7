// The walk's name cache (src/fs/name_cache.h) never gives a stale answer:
// directories a path passes through may be remembered by a process, and a
// rename, rmdir or repair by any process must be seen by its next call.
//
//   - another process renames and replaces directories on the path a
//     mount has walked many times: the mount's next stat and open see the
//     new tree at once;
//   - another process removes a directory and makes a new one of the same
//     name: the old one's files are gone, the new one's are there;
//   - threads of one process walking through directories another thread
//     renames back and forth only ever see one of the two trees (and run
//     clean under ThreadSanitizer: the cache's entries are seqlocked).
//
// The child process never uses gtest assertions: it reports through its
// exit code, and every wait has a deadline.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "fs_test_util.h"

namespace mapfs::fstest {
namespace {

// Steps of the two processes, in shared memory.
struct Steps {
  std::atomic<int> parent{0};  // last step the parent finished
  std::atomic<int> child{0};   // last step the child finished
};

bool WriteFile(mapfs_t* fs, const std::string& path, const std::string& bytes) {
  int fd = mapfs_open(fs, path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0) return false;
  bool ok = WriteAll(fs, fd, bytes.data(), bytes.size(), 0);
  return mapfs_close(fs, fd) == 0 && ok;
}

// Stats `path` many times (so that its directories are surely remembered).
ino_t Warm(mapfs_t* fs, const std::string& path) {
  struct stat st {};
  for (int i = 0; i < 50; i++)
    if (mapfs_stat(fs, path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

int ChildMain(const std::string& pool, Steps* s) {
  auto wait_parent = [&](int step) { return WaitUntil([&] { return s->parent.load() >= step; }, 30); };
  if (!wait_parent(1)) return 10;
  mapfs_t* fs = mapfs_mount(pool.c_str(), nullptr);
  if (fs == nullptr) return 11;
  // Step 1: /d becomes /x, and /e takes the name /d.
  if (mapfs_rename(fs, "/d", "/x") != 0) return 12;
  if (mapfs_rename(fs, "/e", "/d") != 0) return 13;
  s->child.store(1);
  // Step 2: /x/sub is removed and made anew, with other files.
  if (!wait_parent(2)) return 14;
  if (mapfs_unlink(fs, "/x/sub/f") != 0) return 15;
  if (mapfs_rmdir(fs, "/x/sub") != 0) return 16;
  if (mapfs_mkdir(fs, "/x/sub", 0755) != 0) return 17;
  if (!WriteFile(fs, "/x/sub/g", "three")) return 18;
  s->child.store(2);
  // Step 3: a rename over a directory (RENAME_EXCHANGE-free: replace an
  // empty one), on a path the parent has warmed.
  if (!wait_parent(3)) return 19;
  if (mapfs_mkdir(fs, "/y", 0755) != 0) return 20;
  if (mapfs_mkdir(fs, "/y/sub", 0755) != 0) return 21;
  if (!WriteFile(fs, "/y/sub/h", "four")) return 22;
  if (mapfs_unlink(fs, "/x/sub/g") != 0) return 23;
  if (mapfs_rename(fs, "/y/sub", "/x/sub") != 0) return 24;
  s->child.store(3);
  if (mapfs_unmount(fs) != 0) return 25;
  return 0;
}

TEST(FsNameCache, AnotherProcessesRenamesAndRmdirsAreSeenAtOnce) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  SharedMem<Steps> steps;
  // The child is forked before this process mounts: a mount of its own.
  std::string path = pool.path();
  Steps* sp = &*steps;
  pid_t pid = ForkChild([&] { return ChildMain(path, sp); }, 60);
  ASSERT_GE(pid, 0);

  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  for (const char* d : {"/d", "/d/sub", "/e", "/e/sub"}) ASSERT_EQ(mapfs_mkdir(fs, d, 0755), 0) << d;
  ASSERT_TRUE(WriteFile(fs, "/d/sub/f", "one"));
  ASSERT_TRUE(WriteFile(fs, "/e/sub/f", "two"));
  ino_t one = Warm(fs, "/d/sub/f"), two = Warm(fs, "/e/sub/f");
  ASSERT_NE(one, 0u);
  ASSERT_NE(two, 0u);

  steps->parent.store(1);
  ASSERT_TRUE(WaitUntil([&] { return steps->child.load() >= 1; }, 30)) << "child step 1";
  struct stat st {};
  ASSERT_EQ(mapfs_stat(fs, "/d/sub/f", &st), 0);
  EXPECT_EQ(st.st_ino, two) << "/d is the old /e now";
  std::string bytes;
  ASSERT_TRUE(ReadFile(fs, "/d/sub/f", &bytes));
  EXPECT_EQ(bytes, "two");
  ASSERT_EQ(mapfs_stat(fs, "/x/sub/f", &st), 0);
  EXPECT_EQ(st.st_ino, one);
  EXPECT_EQ(mapfs_stat(fs, "/e/sub/f", &st), -1);
  EXPECT_EQ(errno, ENOENT);
  ASSERT_EQ(Warm(fs, "/x/sub/f"), one);

  steps->parent.store(2);
  ASSERT_TRUE(WaitUntil([&] { return steps->child.load() >= 2; }, 30)) << "child step 2";
  EXPECT_EQ(mapfs_stat(fs, "/x/sub/f", &st), -1) << "the old /x/sub was removed";
  EXPECT_EQ(errno, ENOENT);
  ASSERT_TRUE(ReadFile(fs, "/x/sub/g", &bytes)) << ErrName(errno);
  EXPECT_EQ(bytes, "three");
  ASSERT_NE(Warm(fs, "/x/sub/g"), 0u);

  steps->parent.store(3);
  ASSERT_TRUE(WaitUntil([&] { return steps->child.load() >= 3; }, 30)) << "child step 3";
  EXPECT_EQ(mapfs_stat(fs, "/x/sub/g", &st), -1) << "/x/sub was replaced by /y/sub";
  EXPECT_EQ(errno, ENOENT);
  ASSERT_TRUE(ReadFile(fs, "/x/sub/h", &bytes)) << ErrName(errno);
  EXPECT_EQ(bytes, "four");
  EXPECT_EQ(mapfs_stat(fs, "/y/sub", &st), -1);

  int rc = WaitChildFor(pid, 30);
  EXPECT_EQ(rc, 0) << "child: " << DescribeExit(rc);
  EXPECT_EQ(mapfs_unmount(fs), 0);
}

TEST(FsNameCache, WalksRacingARenameSeeOneTreeOrTheOther) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  for (const char* d : {"/a", "/a/in", "/b", "/b/in"}) ASSERT_EQ(mapfs_mkdir(fs, d, 0755), 0) << d;
  ASSERT_TRUE(WriteFile(fs, "/a/in/f", "a"));
  ASSERT_TRUE(WriteFile(fs, "/b/in/f", "b"));
  struct stat sa {}, sb {};
  ASSERT_EQ(mapfs_stat(fs, "/a/in/f", &sa), 0);
  ASSERT_EQ(mapfs_stat(fs, "/b/in/f", &sb), 0);

  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread swapper([&] {
    // /a and /b trade places through /t, over and over.
    for (int i = 0; i < 300; i++) {
      if (mapfs_rename(fs, "/a", "/t") != 0 || mapfs_rename(fs, "/b", "/a") != 0 || mapfs_rename(fs, "/t", "/b") != 0)
        bad.fetch_add(1000);
    }
    stop.store(true);
  });
  std::thread walker([&] {
    while (!stop.load()) {
      for (const char* p : {"/a/in/f", "/b/in/f"}) {
        struct stat st {};
        if (mapfs_stat(fs, p, &st) == 0) {
          if (st.st_ino != sa.st_ino && st.st_ino != sb.st_ino) bad.fetch_add(1);
        } else if (errno != ENOENT) {
          bad.fetch_add(1);
        }
      }
    }
  });
  swapper.join();
  walker.join();
  EXPECT_EQ(bad.load(), 0);
  // 300 rounds of three renames: back where they started.
  struct stat st {};
  ASSERT_EQ(mapfs_stat(fs, "/a/in/f", &st), 0);
  EXPECT_EQ(st.st_ino, sa.st_ino);
  ASSERT_EQ(mapfs_stat(fs, "/b/in/f", &st), 0);
  EXPECT_EQ(st.st_ino, sb.st_ino);
  EXPECT_EQ(mapfs_unmount(fs), 0);
}

}  // namespace
}  // namespace mapfs::fstest
