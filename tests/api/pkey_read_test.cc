// Reads without the protection-key switch (issue 16): mapfs_pread, _read,
// _stat, _lstat and _fstat run with the rights closed (protection::ReadOnly).
// A reader stores only into its own mount's row of reader counters, which
// the process leaves writable; every other row and the rest of the pool stay
// write-protected. Each rare store such a read can reach opens the rights
// itself: these tests take each one with keys on, where a missing guard is a
// SIGSEGV in the user's program.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "api/pkey_util.h"
#include "meta/inode_locks.h"
#include "meta/shared_fs.h"

namespace mapfs::apitest {
namespace {

// The shared-memory segment's mapping in this process (/dev/shm/mapfs-UUID),
// found by its size; not `skip` (another mount's mapping of it).
medium::SharedState* SharedView(medium::SharedState* skip = nullptr) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (f == nullptr) return nullptr;
  char line[PATH_MAX + 256], path[PATH_MAX];
  medium::SharedState* found = nullptr;
  const unsigned long want = (sizeof(medium::SharedState) + 4095) & ~4095ul;
  unsigned long first = 0, last = 0;
  while (found == nullptr && fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off;
    path[0] = '\0';
    if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %4095s", &lo, &hi, &off, path) < 4) continue;
    if (strncmp(path, "/dev/shm/mapfs-", 15) != 0) continue;
    // Tagging splits the mapping into several VMAs: join adjacent ones.
    if (off == 0) first = lo, last = hi;
    else if (lo == last) last = hi;
    if (first != 0 && last - first == want && reinterpret_cast<medium::SharedState*>(first) != skip)
      found = reinterpret_cast<medium::SharedState*>(first);
  }
  fclose(f);
  return found;
}

// This process's mount slot (the only mount of the test process).
int MySlot(medium::SharedState* ss) {
  for (int m = 0; m < medium::kMaxMounts; m++)
    if (ss->mounts[m].token.load() != 0 && ss->mounts[m].pid.load() == getpid()) return m;
  return -1;
}

class PkeyReadTest : public PkeyTest {
 protected:
  void SetUp() override {
    PkeyTest::SetUp();
    if (IsSkipped()) return;
    ss_ = SharedView();
    ASSERT_NE(ss_, nullptr) << "no mapping of the shared segment in /proc/self/maps";
    sh_ = reinterpret_cast<meta::FsShared*>(ss_->fs);
    slot_ = MySlot(ss_);
    ASSERT_GE(slot_, 0);
  }
  uint64_t InoOf(const char* path) {
    struct stat st {};
    EXPECT_OK(mapfs_stat(fs_, path, &st));
    return st.st_ino;
  }
  char* Row(int slot, uint32_t stripe) { return reinterpret_cast<char*>(&sh_->holds[slot][stripe]); }
  medium::SharedState* ss_ = nullptr;
  meta::FsShared* sh_ = nullptr;
  int slot_ = -1;
};

TEST_F(PkeyReadTest, ReadsAndStatsAnswerAndLeaveThePoolWriteProtected) {
  std::string data(3 * 4096 + 17, 'r');
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<char>('a' + i % 26);
  ASSERT_TRUE(WriteFile("/r", data));
  ASSERT_FD(fd, mapfs_open(fs_, "/r", O_RDONLY));
  std::string buf(data.size(), '\0');
  EXPECT_EQ(mapfs_pread(fs_, fd, buf.data(), 4096, 4096), 4096);
  EXPECT_EQ(buf.substr(0, 4096), data.substr(4096, 4096));
  EXPECT_EQ(Store(view_ + 64), 1) << "a pread left the pool writable";
  EXPECT_EQ(mapfs_read(fs_, fd, buf.data(), buf.size()), static_cast<ssize_t>(data.size()));
  EXPECT_EQ(buf, data);
  EXPECT_EQ(Store(view_ + 64), 1) << "a read left the pool writable";
  struct stat st {};
  EXPECT_OK(mapfs_fstat(fs_, fd, &st));
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  EXPECT_OK(mapfs_stat(fs_, "/r", &st));
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  EXPECT_OK(mapfs_lstat(fs_, "/r", &st));
  EXPECT_ERRNO(mapfs_stat(fs_, "/nothing", &st), ENOENT);
  EXPECT_EQ(Store(view_ + 64), 1) << "a stat left the pool writable";
  // Coming in access-disabled (what a store escaped by siglongjmp leaves,
  // as a signal handler starts): reads still answer.
  EXPECT_EQ(mapfs_pread(fs_, fd, buf.data(), 10, 0), 10);
  EXPECT_EQ(buf.substr(0, 10), data.substr(0, 10));
  EXPECT_OK(mapfs_close(fs_, fd));
  ExpectClean();
}

// The one piece of the segment left open is this mount's own row; a stray
// store into any other row (another process's readers) or the writer words
// faults.
TEST_F(PkeyReadTest, OnlyThisMountsOwnRowOfReaderCountersIsWritable) {
  const uint32_t stripe = 77;
  ASSERT_EQ(sh_->holds[slot_][stripe].load(), 0);
  EXPECT_EQ(Store(Row(slot_, stripe)), 0) << "the own row is not writable with the rights closed";
  sh_->holds[slot_][stripe].store(0);  // the probe's byte, put back
  for (int other : {slot_ == 0 ? 1 : 0, medium::kMaxMounts - 1}) {
    EXPECT_EQ(Store(Row(other, stripe)), 1) << "row " << other;
    EXPECT_EQ(Store(Row(other, meta::kLockStripes - 1) + 1), 1) << "row " << other << ", its last byte";
  }
  EXPECT_EQ(Store(reinterpret_cast<char*>(&sh_->writer[stripe])), 1);
  EXPECT_EQ(Store(reinterpret_cast<char*>(&sh_->open_count[1])), 1);
  EXPECT_EQ(Store(reinterpret_cast<char*>(ss_) + 64), 1);
  ExpectClean();
}

// Readers that wait for a writer (the lock contended) and a writer that
// waits for readers, on one file from several threads: every read sees a
// whole write, no call faults.
TEST_F(PkeyReadTest, ReadersContendWithAConcurrentWriter) {
  const size_t n = 64 * 1024;
  ASSERT_TRUE(WriteFile("/c", std::string(n, 'A')));
  ASSERT_FD(fd, mapfs_open(fs_, "/c", O_RDWR));
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, failed{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; t++)
    readers.emplace_back([&] {
      std::string b(n, '\0');
      struct stat st {};
      while (!stop.load()) {
        if (mapfs_pread(fs_, fd, b.data(), n, 0) != static_cast<ssize_t>(n)) failed++;
        if (b.find_first_not_of(b[0]) != std::string::npos) torn++;
        if (mapfs_fstat(fs_, fd, &st) != 0 || mapfs_stat(fs_, "/c", &st) != 0) failed++;
      }
    });
  for (int i = 0; i < 400; i++) {
    std::string w(n, static_cast<char>('A' + i % 26));
    ASSERT_EQ(mapfs_pwrite(fs_, fd, w.data(), n, 0), static_cast<ssize_t>(n));
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(Store(view_ + 64), 1);
  EXPECT_OK(mapfs_close(fs_, fd));
  ExpectClean();
}

// A second mount of the pool (another mount identity, as another process
// would be) shrinks a file: the first mount's next read follows that
// mapping change (Vm::Sync drops its stale region pages) with the rights
// closed around the call.
TEST_F(PkeyReadTest, AReadFollowsAnotherMountsMappingChange) {
  ASSERT_TRUE(WriteFile("/m", std::string(1 << 20, 'm')));
  ASSERT_FD(fd, mapfs_open(fs_, "/m", O_RDONLY));
  char b[4096];
  ASSERT_EQ(mapfs_pread(fs_, fd, b, sizeof b, 512 * 1024), 4096);
  mapfs_t* other = mapfs_mount(pool_->path().c_str(), nullptr);
  ASSERT_NE(other, nullptr) << mapfs_last_error();
  ASSERT_OK(mapfs_truncate(other, "/m", 4096));
  ASSERT_FD(ofd, mapfs_open(other, "/m", O_WRONLY));
  ASSERT_EQ(mapfs_pwrite(other, ofd, std::string(8192, 'n').data(), 8192, 8192), 8192);
  ASSERT_OK(mapfs_close(other, ofd));
  ASSERT_OK(mapfs_unmount(other));
  EXPECT_EQ(mapfs_pread(fs_, fd, b, sizeof b, 8192), 4096);
  EXPECT_EQ(std::string(b, sizeof b), std::string(4096, 'n'));
  EXPECT_EQ(mapfs_pread(fs_, fd, b, sizeof b, 4096), 4096);
  EXPECT_EQ(std::string(b, sizeof b), std::string(4096, '\0'));
  EXPECT_EQ(Store(view_ + 64), 1);
  EXPECT_OK(mapfs_close(fs_, fd));
  ExpectClean();
}

// A process dies holding a file's writer word, its own row full of garbage
// counts (a stray store into its own row, then a crash). A reader here waits
// for that writer with the rights closed; after ~50 ms it reaps the dead
// mount (ReapDead stores into another row and the writer word, so it opens
// the rights itself), whatever the dead row held, and then reads. A writer
// after it finds no reader left.
TEST_F(PkeyReadTest, AReaderWaitingForADeadWriterReapsIt) {
  ASSERT_TRUE(WriteFile("/d", std::string(4096, 'd')));
  const uint32_t stripe = meta::InodeLocks::StripeOf(InoOf("/d"));
  // Open before: an open would meet the dead writer itself, with the
  // rights open.
  ASSERT_FD(fd, mapfs_open(fs_, "/d", O_RDWR));
  std::string path = pool_->path();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: a mount of its own, then what a crash in a write plus a
    // stray store leave behind, then gone without unmounting.
    mapfs_t* m = mapfs_mount(path.c_str(), nullptr);
    if (m == nullptr) _exit(2);
    medium::SharedState* ss = SharedView(ss_);  // the child's mount's mapping
    int slot = ss ? MySlot(ss) : -1;
    if (slot < 0) _exit(3);
    // The child's own mapping: its row is open, the writer word is not.
    auto* sh = reinterpret_cast<meta::FsShared*>(ss->fs);
    for (uint32_t s = 0; s < meta::kLockStripes; s += 7) sh->holds[slot][s].store(static_cast<uint16_t>(0xbeef + s));
    sh->holds[slot][stripe].store(0xffff);
    {
      medium::protection::Inside rights;
      sh->writer[stripe].store(static_cast<uint32_t>(slot) + 1);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  ASSERT_NE(sh_->writer[stripe].load(), 0u);
  char b[4096];
  EXPECT_EQ(mapfs_pread(fs_, fd, b, sizeof b, 0), 4096);
  EXPECT_EQ(std::string(b, sizeof b), std::string(4096, 'd'));
  EXPECT_EQ(sh_->writer[stripe].load(), 0u);
  EXPECT_EQ(mapfs_pwrite(fs_, fd, std::string(4096, 'e').data(), 4096, 0), 4096);
  struct stat st {};
  EXPECT_OK(mapfs_fstat(fs_, fd, &st));
  EXPECT_EQ(Store(view_ + 64), 1);
  EXPECT_OK(mapfs_close(fs_, fd));
}

}  // namespace
}  // namespace mapfs::apitest
