// Protection keys through the C API (issue 16): after mapfs_mount the
// pool is write-protected outside mapfs calls. A stray store into the
// pool view faults with SEGV_PKUERR and the pool stays clean (fsck); calls
// from many threads keep working, and another thread's stray store faults
// while one is inside a long read; the zero-copy view of mapfs_mmap is the
// application's to write.
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <climits>
#include <cstdio>
#include <atomic>
#include <mutex>
#include <thread>

#include "api/pkey_util.h"

namespace mapfs::apitest {
namespace {

TEST_F(PkeyTest, AStrayStoreFaultsAndThePoolStaysClean) {
  ASSERT_TRUE(WriteFile("/a", std::string(10000, 'a')));
  char header[64];
  std::memcpy(header, view_, sizeof header);  // reads stay allowed
  // Each store: the header's magic, its checksummed fields, and a page of
  // metadata past it; had one gone through, the pool would be damaged.
  for (uint64_t off : {uint64_t{0}, uint64_t{40}, uint64_t{4096}, uint64_t{64 * 1024}})
    EXPECT_EQ(Store(view_ + off), 1) << "a store at pool offset " << off;
  ASSERT_TRUE(WriteFile("/b", std::string(5000, 'b')));
  EXPECT_EQ(ReadAll("/a"), std::string(10000, 'a'));
  EXPECT_EQ(Store(view_), 1) << "after more calls";
  ExpectClean();
  Remount();
  EXPECT_EQ(ReadAll("/b"), std::string(5000, 'b'));
  EXPECT_EQ(std::memcmp(header, PoolView(pool_->path()), sizeof header), 0);
}

TEST_F(PkeyTest, CallsFromManyThreadsWorkAndNoneLeavesTheRightsOpen) {
  std::vector<std::thread> ts;
  std::atomic<int> bad{0}, faulted{0};
  for (int t = 0; t < 4; t++)
    ts.emplace_back([&, t] {
      std::string name = "/t" + std::to_string(t);
      for (int i = 0; i < 50; i++) {
        std::string data(4096 + i, static_cast<char>('a' + t));
        if (!WriteFile(name.c_str(), data) || ReadAll(name.c_str()) != data) bad++;
      }
      if (Store(view_ + 64) == 1) faulted++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(faulted.load(), 4);
  EXPECT_EQ(Store(view_ + 64), 1);
  ExpectClean();
}

// PKRU is per thread: one thread inside a long call (a 32 MiB pread, the
// key write-enabled for it) opens nothing for the others, whose stray
// stores meanwhile fault as at any other time. (The reader spends nearly
// all its time inside the call, so most stores land during one.)
TEST_F(PkeyTest, AStoreFromAnotherThreadDuringALongReadFaults) {
  const size_t big = 32u << 20;
  ASSERT_TRUE(WriteFile("/big", std::string(big, 'r')));
  int fd = mapfs_open(fs_, "/big", O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string buf(big, '\0');
  // One read first: the region's pages are mapped before the test's own
  // SIGSEGV handler stands in for mapfs's (Store).
  ASSERT_EQ(mapfs_pread(fs_, fd, buf.data(), big, 0), static_cast<ssize_t>(big));
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0}, bad{0};
  std::thread reader([&] {
    while (!stop.load()) {
      if (mapfs_pread(fs_, fd, buf.data(), big, 0) != static_cast<ssize_t>(big)) bad++;
      reads++;
    }
  });
  while (reads.load() == 0) std::this_thread::yield();
  int faulted = 0, stores = 0;
  for (int first = reads.load(); reads.load() < first + 5; stores++)
    for (uint64_t off : {uint64_t{0}, uint64_t{4096}, uint64_t{64 * 1024}}) faulted += Store(view_ + off) == 1;
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(faulted, 3 * stores) << "a store went through while another thread was inside a pread";
  EXPECT_EQ(buf, std::string(big, 'r'));
  EXPECT_OK(mapfs_close(fs_, fd));
  ExpectClean();
}

TEST_F(PkeyTest, TheZeroCopyViewIsTheApplicationsToWrite) {
  ASSERT_TRUE(WriteFile("/m", std::string(8192, 'm')));
  int fd = mapfs_open(fs_, "/m", O_RDWR);
  ASSERT_GE(fd, 0);
  size_t cap = 0;
  auto* p = static_cast<char*>(mapfs_mmap(fs_, fd, &cap));
  ASSERT_NE(p, nullptr) << mapfs_last_error();
  ASSERT_GE(cap, 8192u);
  EXPECT_EQ(Store(p + 100), 0) << "a store through mapfs_mmap's pointer faulted";
  EXPECT_OK(mapfs_fsync(fs_, fd));
  char c = 0;
  EXPECT_EQ(mapfs_pread(fs_, fd, &c, 1, 100), 1);
  EXPECT_EQ(c, 0x5a);
  EXPECT_OK(mapfs_close(fs_, fd));
  ExpectClean();
}

// mapfs_lseek holds no rights (protection::ReadOnly): it answers every
// whence, leaves the pool write-protected, and works from a signal handler
// (which starts with the key access-disabled), also one interrupting it.
std::atomic<off_t> handler_end{-2};
std::atomic<int> handler_fd{-1};
mapfs_t* handler_fs = nullptr;
[[maybe_unused]] void OnUsr1Seek(int) { handler_end = mapfs_lseek(handler_fs, handler_fd, 0, SEEK_END); }

TEST_F(PkeyTest, LseekAnswersWithoutOpeningThePool) {
  ASSERT_TRUE(WriteFile("/s", std::string(12345, 's')));
  ASSERT_FD(fd, mapfs_open(fs_, "/s", O_RDWR));
  EXPECT_EQ(mapfs_lseek(fs_, fd, 100, SEEK_SET), 100);
  EXPECT_EQ(mapfs_lseek(fs_, fd, 5, SEEK_CUR), 105);
  EXPECT_EQ(mapfs_lseek(fs_, fd, -45, SEEK_END), 12300);
  EXPECT_EQ(mapfs_lseek(fs_, fd, 7, SEEK_DATA), 7);
  EXPECT_EQ(mapfs_lseek(fs_, fd, 7, SEEK_HOLE), 12345);
  EXPECT_ERRNO(mapfs_lseek(fs_, fd, 20000, SEEK_DATA), ENXIO);
  EXPECT_EQ(Store(view_ + 64), 1) << "an lseek left the pool writable";
  // A store escaped by siglongjmp leaves the key access-disabled (the
  // kernel's value for the handler): lseek must still read the size.
  EXPECT_EQ(mapfs_lseek(fs_, fd, 0, SEEK_END), 12345);
  EXPECT_EQ(Store(view_ + 64), 1);
#if !defined(__SANITIZE_THREAD__)  // TSan defers handlers out of the kernel's frame
  struct sigaction sa {}, old {};
  sa.sa_handler = OnUsr1Seek;
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  handler_fs = fs_;
  handler_fd = fd;
  raise(SIGUSR1);  // outside a call
  EXPECT_EQ(handler_end.load(), 12345) << "an lseek from a handler";
  // A timer's handler interrupting writes (calls with the rights open; not
  // lseeks: a description's position lock is not reentrant): the handler's
  // lseeks answer, and the interrupted writes keep their rights.
  struct itimerval it = {{0, 100}, {0, 100}}, off = {{0, 0}, {0, 0}};
  struct sigaction alrm {}, old_alrm {};
  alrm.sa_handler = OnUsr1Seek;
  alrm.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGALRM, &alrm, &old_alrm), 0);
  ASSERT_EQ(setitimer(ITIMER_REAL, &it, nullptr), 0);
  std::string page(4096, 'w');
  for (int i = 0; i < 3000; i++) ASSERT_EQ(mapfs_pwrite(fs_, fd, page.data(), page.size(), 4096), 4096);
  setitimer(ITIMER_REAL, &off, nullptr);
  sigaction(SIGALRM, &old_alrm, nullptr);
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_EQ(handler_end.load(), 12345);
#endif
  EXPECT_EQ(Store(view_ + 64), 1);
  EXPECT_OK(mapfs_close(fs_, fd));
  ExpectClean();
}

// A description's last reference may go in an lseek (another thread closed
// the descriptor meanwhile): its close stores into the pool (open counts,
// an unlinked file's inode), so it opens the rights itself, where the call
// holds none.
TEST_F(PkeyTest, ACloseRacingAnLseekClosesTheDescriptionCleanly) {
  for (int round = 0; round < 200; round++) {
    std::string name = "/race" + std::to_string(round % 4);
    ASSERT_TRUE(WriteFile(name.c_str(), std::string(100, 'r')));
    ASSERT_FD(fd, mapfs_open(fs_, name.c_str(), O_RDONLY));
    ASSERT_OK(mapfs_unlink(fs_, name.c_str()));  // the last close frees the inode
    std::atomic<bool> started{false};
    std::thread seeker([&] {
      for (;;) {
        started = true;
        if (mapfs_lseek(fs_, fd, 0, SEEK_END) < 0) break;  // EBADF once closed
      }
    });
    while (!started.load()) std::this_thread::yield();
    EXPECT_OK(mapfs_close(fs_, fd));
    seeker.join();
  }
  ExpectClean();
}

}  // namespace
}  // namespace mapfs::apitest
