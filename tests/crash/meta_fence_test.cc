// What each namespace operation persists, counted through the medium
// layer's trace hook (traced build): fences, and the cache lines it writes
// back or streams to the medium. The bounds are what the operation's
// atomicity needs, so that a later change cannot silently add fences or
// lines back (docs/PERFORMANCE.md, "Metadata at the floor").
//
// Why three fences. A namespace operation is one redo transaction
// (meta::MetaTx over medium::RedoLog), and a redo transaction needs three
// orderings, no more:
//   1. the log record (payload and header, with a checksum over both and a
//      fresh sequence word) is durable before any store in place;
//   2. every store in place is durable before the record is retired;
//   3. the retirement is durable before a later transaction — of any
//      thread — may change the same words (a replay of the retired record
//      would undo that change).
// Everything else rides on those fences: the inode bitmap bit a create
// sets is written back before fence 1, the bit an unlink clears is
// written back after fence 3 and becomes durable at some later fence
// (until then a crash leaves a leak that recovery returns).
//
// Lookups, opens of an existing file, stats and read-only closes persist
// nothing at all.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <set>
#include <string>

#include "fs_test_util.h"
#include "medium/trace.h"

namespace mapfs::crash {
namespace {

using fstest::FsPool;

// Counts what one operation makes durable: fences, and the distinct cache
// lines written back (Flush) or stored non-temporally before them.
class PersistCounter : public medium::TraceHook {
 public:
  void OnStore(const void*, size_t n) override { stores_ += n > 0; }
  void OnNtStore(const void* a, size_t n) override { AddLines(a, n); }
  void OnFlush(const void* a, size_t n) override { AddLines(a, n); }
  void OnFence() override { fences_++; }

  void Reset() {
    fences_ = 0;
    stores_ = 0;
    lines_.clear();
  }
  int fences() const { return fences_; }
  size_t lines() const { return lines_.size(); }
  int stores() const { return stores_; }

 private:
  void AddLines(const void* a, size_t n) {
    if (n == 0) return;
    uintptr_t lo = reinterpret_cast<uintptr_t>(a) / 64, hi = (reinterpret_cast<uintptr_t>(a) + n - 1) / 64;
    for (uintptr_t l = lo; l <= hi; l++) lines_.insert(l);
  }
  int fences_ = 0;
  int stores_ = 0;
  std::set<uintptr_t> lines_;
};

class MetaFences : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pool_.error(), "");
    auto m = fs::FileSystem::Mount(pool_.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    fs_ = std::move(*m);
    // A directory with room: no block split during the measured calls
    // (a split is a structural transaction of its own, amortised over ~30
    // inserts, and not what these bounds are about).
    ASSERT_TRUE(fs_->Mkdir("/d", 0755).ok());
    for (int i = 0; i < 4; i++) ASSERT_TRUE(Create("/d/warm" + std::to_string(i)).ok());
  }
  void TearDown() override {
    medium::SetTraceHook(nullptr);
    if (fs_) {
      ASSERT_TRUE(fs_->Unmount().ok());
      FS_EXPECT_CLEAN(pool_.path());
    }
  }
  Status Create(const std::string& path) {
    auto f = fs_->Open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (!f.ok()) return f.status();
    return fs_->Close(**f);
  }
  // Runs `op` with the counter installed; returns its status.
  template <typename Fn>
  Status Measure(const char* what, Fn op) {
    counter_.Reset();
    medium::SetTraceHook(&counter_);
    Status st = op();
    medium::SetTraceHook(nullptr);
    std::printf("meta-persist: %-24s %d fences, %zu lines\n", what, counter_.fences(), counter_.lines());
    return st;
  }

  FsPool pool_;
  std::unique_ptr<fs::FileSystem> fs_;
  PersistCounter counter_;
};

// The line bounds count the redo record (its payload and header lines in
// the slot) and the lines changed in place, each once (measured 2026-11-26:
// create 15, unlink 9, rename 12). A create's record holds the new inode
// (its first 128 bytes) and about a dozen 8-byte words (the directory
// slot, fingerprint, bitmap, count, the parent's times): 7 lines with the
// header; in place it changes the inode (2 lines), the directory slot, the
// block's bitmap and fingerprint lines, the root's count line, the parent
// inode's line and the inode bitmap's line: 8.
constexpr int kCommitFences = 3;

TEST_F(MetaFences, CreateIsOneTransaction) {
  ASSERT_TRUE(Measure("create (open+close)", [&] { return Create("/d/new"); }).ok());
  EXPECT_LE(counter_.fences(), kCommitFences) << "a create is one redo transaction: three fences";
  EXPECT_LE(counter_.lines(), 15u) << "a create persists its redo record and the lines it changes, each once";
}

TEST_F(MetaFences, UnlinkIsOneTransaction) {
  ASSERT_TRUE(Create("/d/victim").ok());
  ASSERT_TRUE(Measure("unlink", [&] { return fs_->Unlink("/d/victim"); }).ok());
  EXPECT_LE(counter_.fences(), kCommitFences) << "an unlink is one redo transaction: three fences";
  // Record: a few words (bitmap, count, parent times, nlink, ctime, mode);
  // in place: block bitmap, root count, parent inode, inode, inode bitmap.
  EXPECT_LE(counter_.lines(), 9u);
}

TEST_F(MetaFences, RenameIsOneTransaction) {
  ASSERT_TRUE(Create("/d/a").ok());
  ASSERT_TRUE(Measure("rename", [&] { return fs_->Rename("/d/a", "/d/b"); }).ok());
  EXPECT_LE(counter_.fences(), kCommitFences) << "a rename is one redo transaction: three fences";
  // Record: the new entry's words, the old entry's bitmap, counts, times;
  // in place: two directory slots' lines, bitmaps and fingerprints, the
  // root count, the parent and the renamed inode.
  EXPECT_LE(counter_.lines(), 12u);
}

TEST_F(MetaFences, RenameOverAnExistingFileIsOneTransaction) {
  ASSERT_TRUE(Create("/d/a").ok());
  ASSERT_TRUE(Create("/d/b").ok());
  ASSERT_TRUE(Measure("rename (replacing)", [&] { return fs_->Rename("/d/a", "/d/b"); }).ok());
  EXPECT_LE(counter_.fences(), kCommitFences) << "a replacing rename is one redo transaction: three fences";
  EXPECT_LE(counter_.lines(), 12u);
}

TEST_F(MetaFences, LookupsOpensAndStatsPersistNothing) {
  ASSERT_TRUE(Create("/d/f").ok());
  struct stat st;
  ASSERT_TRUE(Measure("stat", [&] { return fs_->Stat("/d/f", &st); }).ok());
  EXPECT_EQ(counter_.fences(), 0);
  EXPECT_EQ(counter_.lines(), 0u);
  EXPECT_EQ(counter_.stores(), 0);
  ASSERT_TRUE(Measure("open+close (read-only)", [&] {
                auto f = fs_->Open("/d/f", O_RDONLY, 0);
                if (!f.ok()) return f.status();
                return fs_->Close(**f);
              }).ok());
  EXPECT_EQ(counter_.fences(), 0);
  EXPECT_EQ(counter_.lines(), 0u);
  EXPECT_EQ(counter_.stores(), 0);
  EXPECT_EQ(Measure("lookup of a missing name", [&] { return fs_->Stat("/d/none", &st); }).code(), ENOENT);
  EXPECT_EQ(counter_.fences(), 0);
  EXPECT_EQ(counter_.stores(), 0);
}

}  // namespace
}  // namespace mapfs::crash
