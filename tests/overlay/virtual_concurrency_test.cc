// Threads and processes writing one virtualized file at once. Each writer
// owns every T-th record of 3000 bytes: records straddle blocks and
// neighbours share blocks, so every write is a read-modify-write racing
// with other writers' commits. A lost update (a commit built on a stale
// copy of a shared block) shows as a record that is not its owner's last
// write. Appenders check that every record appended lands once, whole.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "virtual_test_util.h"

namespace mapfs::overlay::vrt::testing {
namespace {

constexpr size_t kRec = 3000;
constexpr int kRecords = 96;

// A record: its 8-byte words all say (writer, record, iteration).
std::string MakeRecord(uint32_t writer, uint32_t rec, uint32_t iter) {
  uint64_t w = (uint64_t{writer} << 48) | (uint64_t{rec} << 32) | iter;
  std::string s(kRec, '\0');
  for (size_t i = 0; i + 8 <= kRec; i += 8) std::memcpy(&s[i], &w, 8);
  return s;
}

// Writer `w` of `nw` rewrites its records `iters` times in random order;
// returns the last iteration written to each record (0 = none).
std::vector<uint32_t> WriterLoop(VFile& f, uint32_t w, uint32_t nw, int iters, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> last(kRecords, 0);
  for (int i = 1; i <= iters; i++) {
    uint32_t rec = static_cast<uint32_t>(rng() % (kRecords / nw)) * nw + w;
    std::string d = MakeRecord(w, rec, static_cast<uint32_t>(i));
    auto r = f.Pwrite(d.data(), d.size(), uint64_t{rec} * kRec);
    EXPECT_TRUE(r.ok()) << r.status().message();
    last[rec] = static_cast<uint32_t>(i);
  }
  return last;
}

void CheckRecords(VFile& f, uint32_t nw, const std::vector<std::vector<uint32_t>>& last) {
  for (uint32_t rec = 0; rec < kRecords; rec++) {
    uint32_t w = rec % nw;
    std::string got(kRec, '\0');
    auto r = f.Pread(got.data(), kRec, uint64_t{rec} * kRec);
    ASSERT_TRUE(r.ok());
    uint32_t it = last[w][rec];
    std::string want = it == 0 ? std::string(kRec, '\0') : MakeRecord(w, rec, it);
    if (*r < kRec) got.resize(*r), want.resize(*r);
    uint64_t first = 0;
    std::memcpy(&first, got.data(), std::min<size_t>(8, got.size()));
    ASSERT_TRUE(got == want) << "record " << rec << " of writer " << w << " lost its last write " << it
                             << "; it holds iteration " << (first & 0xffffffff);
  }
}

TEST(VirtualConcurrency, ThreadsRewritingSharedBlocksLoseNoUpdate) {
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path));
  auto f = OpenVirtual(path, true, Mode::kPosix);
  ASSERT_TRUE(f.ok());
  constexpr uint32_t kThreads = 4;
  std::vector<std::vector<uint32_t>> last(kThreads);
  std::atomic<bool> done{false};
  // A reader checks, without locks, that every record it reads belongs to
  // its owner (words from one writer only: never another's bytes).
  std::thread reader([&] {
    std::string buf(kRec, '\0');
    std::mt19937_64 rng(1);
    while (!done.load()) {
      uint32_t rec = static_cast<uint32_t>(rng() % kRecords);
      auto r = (*f)->Pread(buf.data(), kRec, uint64_t{rec} * kRec);
      ASSERT_TRUE(r.ok());
      for (size_t i = 0; i + 8 <= *r; i += 8) {
        uint64_t w;
        std::memcpy(&w, &buf[i], 8);
        if (w != 0) {
          ASSERT_EQ(w >> 48, rec % kThreads) << "record " << rec;
        }
      }
    }
  });
  std::vector<std::thread> ts;
  for (uint32_t t = 0; t < kThreads; t++)
    ts.emplace_back([&, t] { last[t] = WriterLoop(**f, t, kThreads, 1500, 100 + t); });
  for (auto& t : ts) t.join();
  done = true;
  reader.join();
  CheckRecords(**f, kThreads, last);
  auto again = OpenVirtual(path, false);
  ASSERT_TRUE(again.ok());
  CheckRecords(**again, kThreads, last);
  std::string report;
  Status c = CheckFile(path, &report);
  EXPECT_TRUE(c.ok()) << c.message();
}

TEST(VirtualConcurrency, ReadsNeverGoBackWhileTheGcRuns) {
  // One writer rewrites a block with increasing values (the GC runs every
  // 32 commits); a reader must never see a value older than one it saw.
  // Guards against the GC republishing older mappings while it replays.
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path));
  auto f = OpenVirtual(path, true, Mode::kPosix);
  ASSERT_TRUE(f.ok());
  std::atomic<bool> done{false};
  std::thread reader([&] {
    uint64_t seen = 0;
    while (!done.load()) {
      uint64_t v = 0;
      auto r = (*f)->Pread(&v, 8, 4096);
      ASSERT_TRUE(r.ok());
      ASSERT_GE(v, seen) << "read went back in time";
      seen = v;
    }
  });
  std::string blk(8192, '\0');
  for (uint64_t i = 1; i <= 4000; i++) {
    std::memcpy(&blk[4096], &i, 8);
    ASSERT_TRUE((*f)->Pwrite(blk.data(), blk.size(), 0).ok());
  }
  done = true;
  reader.join();
}

TEST(VirtualConcurrency, ThreadsAppendingEachRecordOnceWhole) {
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path));
  auto f = OpenVirtual(path, true, Mode::kPosix);
  ASSERT_TRUE(f.ok());
  constexpr uint32_t kThreads = 4, kEach = 400;
  constexpr size_t kLen = 1000;  // not a block multiple: appends share blocks
  std::vector<std::thread> ts;
  for (uint32_t t = 0; t < kThreads; t++)
    ts.emplace_back([&, t] {
      for (uint32_t i = 0; i < kEach; i++) {
        std::string d(kLen, static_cast<char>('A' + t));
        std::memcpy(&d[0], &i, 4);
        auto off = (*f)->Append(d.data(), d.size());
        ASSERT_TRUE(off.ok()) << off.status().message();
        ASSERT_EQ(*off % kLen, 0u);
      }
    });
  for (auto& t : ts) t.join();
  ASSERT_EQ(*(*f)->Size(), uint64_t{kThreads} * kEach * kLen);
  std::vector<uint32_t> next(kThreads, 0);
  std::string rec(kLen, '\0');
  for (uint64_t off = 0; off < uint64_t{kThreads} * kEach * kLen; off += kLen) {
    ASSERT_EQ(*(*f)->Pread(rec.data(), kLen, off), kLen);
    uint32_t t = static_cast<uint32_t>(rec[kLen - 1] - 'A');
    ASSERT_LT(t, kThreads) << "at " << off;
    uint32_t i;
    std::memcpy(&i, rec.data(), 4);
    ASSERT_EQ(i, next[t]) << "thread " << t << "'s appends out of order or lost at " << off;
    next[t]++;
    ASSERT_EQ(rec.substr(4), std::string(kLen - 4, static_cast<char>('A' + t))) << "torn at " << off;
  }
}

TEST(VirtualConcurrency, ProcessesRewritingSharedBlocksLoseNoUpdate) {
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path));
  constexpr uint32_t kProcs = 3;
  constexpr int kIters = 800;
  std::vector<pid_t> pids;
  for (uint32_t p = 0; p < kProcs; p++) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto f = OpenVirtual(path, true, Mode::kPosix);
      if (!f.ok()) {
        std::fprintf(stderr, "[writer %u] open: %s\n", p, f.status().ToString().c_str());
        _exit(2);
      }
      WriterLoop(**f, p, kProcs, kIters, 500 + p);
      _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "writer process failed: " << st;
  }
  // Each child's last iterations follow from its seed (same RNG here).
  std::vector<std::vector<uint32_t>> last(kProcs);
  for (uint32_t p = 0; p < kProcs; p++) {
    std::mt19937_64 rng(500 + p);
    last[p].assign(kRecords, 0);
    for (int i = 1; i <= kIters; i++) last[p][static_cast<uint32_t>(rng() % (kRecords / kProcs)) * kProcs + p] = i;
  }
  auto f = OpenVirtual(path, false);
  ASSERT_TRUE(f.ok());
  CheckRecords(**f, kProcs, last);
  std::string report;
  Status c = CheckFile(path, &report);
  EXPECT_TRUE(c.ok()) << c.message();
}

}  // namespace
}  // namespace mapfs::overlay::vrt::testing
