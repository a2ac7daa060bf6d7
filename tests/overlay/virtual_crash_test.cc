// SIGKILL at random points of writes and of the GC (a 64-slot log is
// checkpointed every few dozen commits, and the writer also checkpoints on
// its own every few writes). After each kill the file is reopened
// (recovery: replay of the log), and:
//  - every acknowledged write is there (or a later write of that record);
//  - no record is torn: records straddle blocks, and each is all of one
//    write (per-write atomicity, the design's point, strict mode);
//  - at most the one write in flight at the kill shows unacknowledged;
//  - fsck finds no damage (blocks leaked by the killed writer are noted);
//  - a stat's size of the file, unattached (ContentSize), is the size the
//    recovery finds.
// In strict mode with records that straddle blocks (read-modify-write,
// record blocks), and in posix mode with aligned 4 KiB records: the pure
// overwrite path (a fresh block of a preallocated, prefaulted chunk, one
// inline entry, plain stores on a page-cache mapping) is atomic against a
// kill too.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "virtual_test_util.h"

namespace mapfs::overlay::vrt::testing {
namespace {

constexpr uint32_t kRecords = 40;

uint32_t RecordOf(uint64_t seed, uint64_t i) {
  std::mt19937_64 rng(seed * 1000003 + i);
  return static_cast<uint32_t>(rng() % kRecords);
}

[[noreturn]] void Writer(const std::string& path, uint64_t seed, uint64_t first_id, int ack_fd, bool truncates,
                         Mode mode, size_t kRec) {
  auto f = OpenVirtual(path, true, mode);
  if (!f.ok()) _exit(2);
  std::string d(kRec, '\0');
  for (uint64_t i = 0;; i++) {
    uint64_t id = first_id + i;
    uint32_t r = RecordOf(seed, i);
    uint64_t w = (id << 16) | r;
    for (size_t k = 0; k + 8 <= kRec; k += 8) std::memcpy(&d[k], &w, 8);
    if (!(*f)->Pwrite(d.data(), d.size(), uint64_t{r} * kRec).ok()) _exit(3);
    if (truncates && i % 5 == 4) {
      // Grow and shrink past the records: exercises truncate records and
      // partial-block rewrites without touching record content.
      uint64_t end = uint64_t{kRecords} * kRec;
      if (!(*f)->Truncate(end + 777 + (i % 3) * 4096).ok()) _exit(4);
      if (!(*f)->Truncate(end).ok()) _exit(4);
    }
    uint64_t ack[2] = {id, r};
    if (write(ack_fd, ack, sizeof(ack)) != sizeof(ack)) _exit(5);
    if (i % 7 == 6 && !(*f)->Gc(true).ok()) _exit(6);
  }
}

// kRec: 5000 spans two or three blocks, unaligned; 4096 is one block.
void RunKills(int rounds, bool truncates, Mode mode = Mode::kStrict, size_t kRec = 5000) {
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path));
  std::vector<uint64_t> found(kRecords, 0);  // id in each record after the last recovery
  std::mt19937_64 rng(99);
  uint64_t next_id = 1;
  for (int round = 0; round < rounds; round++) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    uint64_t seed = static_cast<uint64_t>(round) + 1;
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(p[0]);
      Writer(path, seed, next_id, p[1], truncates, mode, kRec);
    }
    close(p[1]);
    std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 15000));
    kill(pid, SIGKILL);
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(st)) << "writer exited early: " << st;
    std::vector<uint64_t> acked(kRecords, 0);
    uint64_t ack[2], max_acked = 0;
    for (;;) {
      ssize_t n = read(p[0], ack, sizeof(ack));
      if (n != static_cast<ssize_t>(sizeof(ack))) break;
      acked[ack[1]] = ack[0];
      max_acked = ack[0];
    }
    close(p[0]);
    uint64_t in_flight = max_acked == 0 ? next_id : max_acked + 1;
    uint32_t in_flight_rec = RecordOf(seed, in_flight - next_id);
    uint64_t stat_size = 0;
    {
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      auto cs = ContentSize(fd);
      close(fd);
      ASSERT_TRUE(cs.ok()) << "round " << round << ": " << cs.status().message();
      stat_size = *cs;
    }
    auto f = OpenVirtual(path, false);
    ASSERT_TRUE(f.ok()) << "round " << round << ": " << f.status().message();
    auto size = (*f)->Size();
    ASSERT_TRUE(size.ok());
    ASSERT_EQ(stat_size, *size) << "round " << round << ": stat without attaching disagrees with recovery";
    for (uint32_t r = 0; r < kRecords; r++) {
      std::string got(kRec, '\0');
      auto n = (*f)->Pread(got.data(), kRec, uint64_t{r} * kRec);
      ASSERT_TRUE(n.ok());
      got.resize(kRec, '\0');
      uint64_t w0;
      std::memcpy(&w0, got.data(), 8);
      for (size_t k = 0; k + 8 <= kRec; k += 8) {
        uint64_t w;
        std::memcpy(&w, &got[k], 8);
        ASSERT_EQ(w, w0) << "round " << round << ": record " << r << " torn at byte " << k;
      }
      uint64_t id = w0 >> 16;
      if (w0 != 0) {
        ASSERT_EQ(w0 & 0xffff, r);
      }
      uint64_t floor = std::max(acked[r], found[r]);
      ASSERT_GE(id, floor) << "round " << round << ": record " << r << " lost acknowledged write " << floor;
      if (id != floor) {
        ASSERT_EQ(id, in_flight) << "round " << round << ": record " << r << " holds an unknown write";
        ASSERT_EQ(r, in_flight_rec);
      }
      found[r] = id;
    }
    std::string report;
    Status c = CheckFile(path, &report);
    ASSERT_TRUE(c.ok()) << "round " << round << ": " << c.message();
    next_id = in_flight + 1;
  }
}

TEST(VirtualCrash, KillDuringWritesAndGcKeepsAcknowledgedWritesUntorn) { RunKills(25, false); }

TEST(VirtualCrash, KillDuringWritesTruncatesAndGc) { RunKills(15, true); }

TEST(VirtualCrash, KillDuringAlignedOverwritesPosixRecoversOldOrNew) { RunKills(20, false, Mode::kPosix, 4096); }

// Small appends (LevelDB's log records and table blocks: 1000 and 4232
// bytes, never block-aligned), killed at random points: on tmpfs their
// partial blocks and record blocks go by pwritev before the commit
// (vwrite.cc). After each kill the file is every acknowledged record, in
// order and whole, then at most the one in flight, whole.
size_t AppendSize(uint64_t id) { return id % 3 == 0 ? 4232 : 1000; }

[[noreturn]] void Appender(const std::string& path, uint64_t first_id, int ack_fd, Mode mode) {
  auto f = OpenVirtual(path, true, mode);
  if (!f.ok()) _exit(2);
  for (uint64_t id = first_id;; id++) {
    std::string d(AppendSize(id), '\0');
    for (size_t k = 0; k < d.size(); k += 8) std::memcpy(&d[k], &id, 8);
    if (!(*f)->Append(d.data(), d.size()).ok()) _exit(3);
    if (write(ack_fd, &id, sizeof(id)) != sizeof(id)) _exit(5);
    if (id % 50 == 49 && !(*f)->Gc(true).ok()) _exit(6);
  }
}

void RunAppendKills(int rounds, Mode mode) {
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path, FormatOptions{256, 1u << 16, 1u << 18}));
  std::mt19937_64 rng(5);
  uint64_t next_id = 1;
  for (int round = 0; round < rounds; round++) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(p[0]);
      Appender(path, next_id, p[1], mode);
    }
    close(p[1]);
    std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 10000));
    kill(pid, SIGKILL);
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(st)) << "appender exited early: " << st;
    uint64_t id = 0, max_acked = next_id - 1;
    while (read(p[0], &id, sizeof(id)) == static_cast<ssize_t>(sizeof(id))) max_acked = id;
    close(p[0]);
    auto f = OpenVirtual(path, false);
    ASSERT_TRUE(f.ok()) << "round " << round << ": " << f.status().message();
    auto size = (*f)->Size();
    ASSERT_TRUE(size.ok());
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    auto cs = ContentSize(fd);
    close(fd);
    ASSERT_TRUE(cs.ok());
    ASSERT_EQ(*cs, *size) << "round " << round << ": stat without attaching disagrees with recovery";
    std::string all(*size, '\0');
    ASSERT_EQ(*(*f)->Pread(all.data(), all.size(), 0), all.size());
    uint64_t pos = 0, last = 0;
    for (uint64_t want = 1; pos < all.size(); want++) {
      const size_t len = AppendSize(want);
      ASSERT_LE(pos + len, all.size()) << "round " << round << ": record " << want << " cut at the end";
      for (size_t k = 0; k < len; k += 8) {
        uint64_t w;
        std::memcpy(&w, &all[pos + k], 8);
        ASSERT_EQ(w, want) << "round " << round << ": record " << want << " torn at byte " << k;
      }
      pos += len;
      last = want;
    }
    ASSERT_GE(last, max_acked) << "round " << round << ": acknowledged appends lost";
    ASSERT_LE(last, max_acked + 1) << "round " << round << ": more than the append in flight";
    std::string report;
    Status c = CheckFile(path, &report);
    ASSERT_TRUE(c.ok()) << "round " << round << ": " << c.message();
    next_id = last + 1;
  }
}

TEST(VirtualCrash, KillDuringSmallAppendsStrictKeepsEveryAcknowledgedRecordWhole) {
  RunAppendKills(20, Mode::kStrict);
}

TEST(VirtualCrash, KillDuringSmallAppendsPosixKeepsEveryAcknowledgedRecordWhole) {
  RunAppendKills(20, Mode::kPosix);
}

}  // namespace
}  // namespace mapfs::overlay::vrt::testing
