// SIGKILL at random points of appends, overwrites and relinks, in each mode,
// on tmpfs and ext4: after the next OpenOverlay (recovery) no acknowledged
// byte is lost (fsync'ed in posix mode, every returned write in sync and
// strict), and in strict mode no write is torn.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "overlay/engine.h"
#include "overlay/split/split_engine.h"
#include "overlay_test_util.h"

namespace mapfs::overlay {
namespace {

struct RecHeader {
  uint32_t magic;
  uint32_t len;
  uint64_t seq;
  uint32_t crc;
  uint32_t pad;
};
constexpr uint32_t kRecMagic = 0x52454331;
constexpr int kSlots = 32;
constexpr size_t kSlotBytes = 8192;

// What the writer has been told is safe (shared with the parent).
struct Acks {
  std::atomic<uint64_t> records;          // records 1..records are acknowledged
  std::atomic<uint64_t> slot[kSlots];     // version of each slot acknowledged
  std::atomic<uint64_t> writes;           // records appended (acknowledged or not)
};

void Fill(char* p, size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  for (size_t i = 0; i < n; i++) p[i] = static_cast<char>(g());
}

[[noreturn]] void Writer(const std::string& dir, Mode mode, Acks* acks, uint32_t seed) {
  Options o;
  o.dir = dir;
  o.mode = mode;
  auto e = OpenOverlay(o);
  if (!e.ok()) _exit(2);
  int fd = open((dir + "/records").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  auto rec = (*e)->Adopt(fd, O_WRONLY | O_CREAT | O_APPEND);
  int sfd = open((dir + "/slots").c_str(), O_RDWR, 0644);
  auto slots = (*e)->Adopt(sfd, O_RDWR);
  if (!rec.ok() || !slots.ok()) _exit(3);
  std::mt19937 g(seed);
  std::vector<char> buf(sizeof(RecHeader) + 20000);
  std::vector<uint64_t> version(kSlots, 0);
  for (uint64_t seq = 1;; seq++) {
    uint32_t len = 1 + g() % 20000;
    RecHeader h{kRecMagic, len, seq, 0, 0};
    Fill(buf.data() + sizeof h, len, seq);
    h.crc = Crc32c(buf.data() + sizeof h, len);
    std::memcpy(buf.data(), &h, sizeof h);
    if (!(*rec)->Append(buf.data(), sizeof h + len).ok()) _exit(4);
    acks->writes.store(seq);
    if (mode != Mode::kPosix) acks->records.store(seq);
    if (seq % 7 == 0 && !(*rec)->Sync().ok()) _exit(5);
    if (seq % 7 == 0) acks->records.store(seq);
    // An overwrite of a slot: a whole version or (strict) nothing new.
    int s = static_cast<int>(g() % kSlots);
    uint64_t v = ++version[s];
    char* sb = buf.data();
    std::memcpy(sb, &v, 8);
    Fill(sb + 16, kSlotBytes - 16, v * 1000 + static_cast<uint64_t>(s));
    uint32_t crc = Crc32c(sb + 16, kSlotBytes - 16);
    std::memcpy(sb + 8, &crc, 4);
    if (!(*slots)->Pwrite(sb, kSlotBytes, static_cast<uint64_t>(s) * kSlotBytes).ok()) _exit(6);
    if (mode != Mode::kPosix) acks->slot[s].store(v);
  }
}

class CrashTest : public ::testing::TestWithParam<std::tuple<std::string, Mode>> {};

TEST_P(CrashTest, KilledWriterLosesNoAcknowledgedByteAndStrictTearsNothing) {
  std::string parent;
  test::BackingDir(std::get<0>(GetParam()), &parent);
  if (parent.empty()) return;  // skipped or failed
  Mode mode = std::get<1>(GetParam());
  auto* acks = static_cast<Acks*>(
      mmap(nullptr, sizeof(Acks), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(acks, MAP_FAILED);
  std::mt19937 g(static_cast<uint32_t>(std::hash<std::string>()(std::get<0>(GetParam())) + static_cast<int>(mode)));
  int redone_total = 0;
  uint64_t writes_total = 0, acked_total = 0;
  for (int round = 0; round < 12; round++) {
    test::ScratchDir dir(parent);
    ASSERT_FALSE(dir.path().empty());
    {
      std::vector<char> zero(kSlots * kSlotBytes, 0);
      int fd = open((dir.path() + "/slots").c_str(), O_RDWR | O_CREAT, 0644);
      ASSERT_EQ(write(fd, zero.data(), zero.size()), static_cast<ssize_t>(zero.size()));
      close(fd);
    }
    new (acks) Acks{};
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) Writer(dir.path(), mode, acks, g());
    // Random points: once it writes (opening the overlay may take a while:
    // recovery, the relink probe), let it run a while, then kill it
    // wherever it is.
    int st = 0;
    while (acks->writes.load() == 0 && waitpid(pid, &st, WNOHANG) == 0) usleep(1000);
    usleep(g() % 80000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer failed with exit " << WEXITSTATUS(status);
    writes_total += acks->writes.load();
    acked_total += acks->records.load();

    Options o;
    o.dir = dir.path();
    o.mode = mode;
    auto e = OpenOverlay(o);  // recovery
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    auto& se = static_cast<split::SplitEngine&>(**e);
    EXPECT_EQ(se.recovery().lost, 0);
    redone_total += se.recovery().redone;

    // Records: every acknowledged one whole, in order.
    std::vector<char> data;
    {
      int fd = open((dir.path() + "/records").c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      char b[65536];
      for (ssize_t r; (r = read(fd, b, sizeof b)) > 0;) data.insert(data.end(), b, b + r);
      close(fd);
    }
    uint64_t acked = acks->records.load(), seen = 0;
    size_t at = 0;
    std::vector<char> expect(20000);
    while (at + sizeof(RecHeader) <= data.size()) {
      RecHeader h;
      std::memcpy(&h, data.data() + at, sizeof h);
      if (h.magic != kRecMagic || h.seq != seen + 1 || at + sizeof h + h.len > data.size()) break;
      if (Crc32c(data.data() + at + sizeof h, h.len) != h.crc) break;
      seen = h.seq;
      at += sizeof h + h.len;
    }
    EXPECT_GE(seen, acked) << "round " << round << ": acknowledged records lost";
    if (mode == Mode::kStrict) {
      EXPECT_EQ(at, data.size()) << "round " << round << ": a torn append";
    }
    // Slots: strict: each a whole version; every mode: none older than acknowledged.
    int fd = open((dir.path() + "/slots").c_str(), O_RDONLY);
    std::vector<char> sl(kSlots * kSlotBytes);
    ASSERT_EQ(pread(fd, sl.data(), sl.size(), 0), static_cast<ssize_t>(sl.size()));
    close(fd);
    for (int s = 0; s < kSlots; s++) {
      const char* p = sl.data() + static_cast<size_t>(s) * kSlotBytes;
      uint64_t v;
      uint32_t crc;
      std::memcpy(&v, p, 8);
      std::memcpy(&crc, p + 8, 4);
      bool whole = v == 0 ? crc == 0 : Crc32c(p + 16, kSlotBytes - 16) == crc;
      if (mode == Mode::kStrict) {
        EXPECT_TRUE(whole) << "round " << round << ": slot " << s << " torn";
      }
      if (whole) {
        EXPECT_GE(v, acks->slot[s].load()) << "round " << round << ": slot " << s << " lost a version";
      }
    }
  }
  munmap(acks, sizeof(Acks));
  RecordProperty("relinks_finished_by_recovery", redone_total);
  RecordProperty("records_written", static_cast<int>(writes_total));
  std::printf("%s: %llu records written, %llu acknowledged, %d relinks finished by recovery\n",
              std::get<0>(GetParam()).c_str(), static_cast<unsigned long long>(writes_total),
              static_cast<unsigned long long>(acked_total), redone_total);
}

// Files written one after another (each relinked at close, its staging file
// handed to the next): what each acknowledged is there, byte for byte,
// after a kill and recovery. Acknowledged: a file's bytes once it was
// synced and closed (every mode), each append as it returns (sync, strict).
struct FileAcks {
  std::atomic<uint64_t> file;   // files 0..file-1 synced and closed
  std::atomic<uint64_t> bytes;  // bytes of file `file` acknowledged
  std::atomic<uint64_t> started;
};

std::vector<char> Stream(uint64_t file, size_t n) {
  std::vector<char> v(n);
  Fill(v.data(), n, file * 7919 + 1);
  return v;
}

constexpr size_t kFileBytes = 100000;

[[noreturn]] void FileWriter(const std::string& dir, Mode mode, FileAcks* acks, uint32_t seed) {
  Options o;
  o.dir = dir;
  o.mode = mode;
  auto e = OpenOverlay(o);
  if (!e.ok()) _exit(2);
  std::mt19937 g(seed);
  std::vector<char> content = Stream(0, kFileBytes);
  for (uint64_t file = 0;; file++) {
    content = Stream(file, kFileBytes);
    std::string p = dir + "/f" + std::to_string(file);
    int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    auto f = (*e)->Adopt(fd, O_WRONLY | O_CREAT | O_TRUNC);
    if (!f.ok()) _exit(3);
    acks->started.store(1);
    for (size_t at = 0; at < kFileBytes;) {
      size_t n = std::min<size_t>(kFileBytes - at, 1 + g() % 30000);
      if (!(*f)->Append(content.data() + at, n).ok()) _exit(4);
      at += n;
      if (mode != Mode::kPosix) acks->bytes.store(at);
    }
    if (!(*f)->Sync().ok() || !(*f)->Close().ok()) _exit(5);
    acks->bytes.store(0);
    acks->file.store(file + 1);
  }
}

TEST_P(CrashTest, KilledWriterOfFileAfterFileKeepsEveryAcknowledgedByte) {
  std::string parent;
  test::BackingDir(std::get<0>(GetParam()), &parent);
  if (parent.empty()) return;  // skipped or failed
  Mode mode = std::get<1>(GetParam());
  auto* acks = static_cast<FileAcks*>(
      mmap(nullptr, sizeof(FileAcks), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(acks, MAP_FAILED);
  std::mt19937 g(static_cast<uint32_t>(std::hash<std::string>()(std::get<0>(GetParam())) + 3 * static_cast<int>(mode)));
  uint64_t files_total = 0;
  for (int round = 0; round < 8; round++) {
    test::ScratchDir dir(parent);
    ASSERT_FALSE(dir.path().empty());
    new (acks) FileAcks{};
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) FileWriter(dir.path(), mode, acks, g());
    int st = 0;
    // Killed once it has handed its staging file on (1 to 3 files done,
    // or 10 s at most), at a random point of the next file.
    uint64_t after = 1 + g() % 3;
    for (int i = 0; i < 10000 && acks->file.load() < after && waitpid(pid, &st, WNOHANG) == 0; i++) usleep(1000);
    usleep(g() % 20000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer failed with exit " << WEXITSTATUS(status);
    Options o;
    o.dir = dir.path();
    o.mode = mode;
    auto e = OpenOverlay(o);  // recovery
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(static_cast<split::SplitEngine&>(**e).recovery().lost, 0);
    uint64_t done = acks->file.load(), bytes = acks->bytes.load();
    files_total += done;
    for (uint64_t file = 0; file <= done; file++) {
      std::vector<char> data;
      int fd = open((dir.path() + "/f" + std::to_string(file)).c_str(), O_RDONLY);
      if (fd < 0) {
        EXPECT_TRUE(file == done && bytes == 0) << "round " << round << ": file " << file << " gone";
        continue;
      }
      char b[65536];
      for (ssize_t r; (r = read(fd, b, sizeof b)) > 0;) data.insert(data.end(), b, b + r);
      close(fd);
      std::vector<char> want = Stream(file, kFileBytes);
      if (file < done) {
        EXPECT_TRUE(data == want) << "round " << round << ": file " << file << " differs";
      } else {
        ASSERT_GE(data.size(), bytes) << "round " << round << ": acknowledged appends lost";
        EXPECT_EQ(std::memcmp(data.data(), want.data(), bytes), 0) << "round " << round << ": acknowledged bytes differ";
      }
    }
  }
  munmap(acks, sizeof(FileAcks));
  std::printf("%s: %llu files synced and closed before the kills\n", std::get<0>(GetParam()).c_str(),
              static_cast<unsigned long long>(files_total));
}

INSTANTIATE_TEST_SUITE_P(Fs, CrashTest, test::DirsTimesModes(), test::DirAndModeName);

}  // namespace
}  // namespace mapfs::overlay
