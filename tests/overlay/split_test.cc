// The split engine on tmpfs and on ext4 (loop device): what a program
// relies on — its bytes read back at once, other descriptors agree, and
// after Sync/Close the kernel's file is the content.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "overlay/engine.h"
#include "overlay/split/split_engine.h"
#include "overlay_test_util.h"

namespace mapfs::overlay {
namespace {

std::vector<char> Pattern(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  std::mt19937 g(seed);
  for (auto& c : v) c = static_cast<char>(g());
  return v;
}

std::vector<char> KernelRead(const std::string& path) {
  std::vector<char> out;
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return out;
  char b[65536];
  for (ssize_t r; (r = read(fd, b, sizeof b)) > 0;) out.insert(out.end(), b, b + r);
  close(fd);
  return out;
}

class SplitTest : public ::testing::TestWithParam<std::tuple<std::string, Mode>> {
 protected:
  void SetUp() override {
    std::string parent;
    test::BackingDir(std::get<0>(GetParam()), &parent);
    if (parent.empty()) return;  // skipped or failed
    dir_ = std::make_unique<test::ScratchDir>(parent);
    ASSERT_FALSE(dir_->path().empty());
    Reopen();
  }
  void Reopen() {
    engine_.reset();
    Options o;
    o.dir = dir_->path();
    o.mode = std::get<1>(GetParam());
    auto e = OpenOverlay(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(*e);
  }
  std::string Path(const char* name) { return dir_->path() + "/" + name; }
  std::unique_ptr<OverlayFile> Open(const char* name, int flags) {
    int fd = open(Path(name).c_str(), flags | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << strerror(errno);
    auto f = engine_->Adopt(fd, flags);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(*f) : nullptr;
  }
  split::SplitEngine& split() { return static_cast<split::SplitEngine&>(*engine_); }

  std::unique_ptr<test::ScratchDir> dir_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(SplitTest, AppendsReadBackAtOnceAndReachTheKernelAtClose) {
  auto f = Open("a", O_RDWR | O_CREAT);
  ASSERT_TRUE(f);
  std::vector<char> want;
  for (int i = 0; i < 50; i++) {
    auto chunk = Pattern(1000 + 977 * i, i);
    auto r = f->Append(chunk.data(), chunk.size());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, want.size());
    want.insert(want.end(), chunk.begin(), chunk.end());
  }
  EXPECT_EQ(*f->Size(), want.size());
  std::vector<char> got(want.size() + 100);
  auto n = f->Pread(got.data(), got.size(), 0);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, want.size());
  got.resize(*n);
  EXPECT_TRUE(got == want);
  // The kernel sees the staged size only through FixStat.
  struct stat st{};
  ASSERT_EQ(stat(Path("a").c_str(), &st), 0);
  ASSERT_TRUE(engine_->FixStat(Path("a").c_str(), &st).ok());
  EXPECT_EQ(static_cast<size_t>(st.st_size), want.size());
  EXPECT_EQ(st.st_nlink, 1u);
  ASSERT_TRUE(f->Close().ok());
  EXPECT_TRUE(KernelRead(Path("a")) == want);
}

TEST_P(SplitTest, OverwritesThroughMapsAcrossRegionsAreTheKernelsBytes) {
  std::vector<char> want = Pattern(5 << 20, 7);
  {
    int fd = open(Path("o").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_EQ(write(fd, want.data(), want.size()), static_cast<ssize_t>(want.size()));
    close(fd);
  }
  auto f = Open("o", O_RDWR);
  ASSERT_TRUE(f);
  std::mt19937 g(3);
  for (int i = 0; i < 200; i++) {
    uint64_t off = g() % want.size();
    size_t n = std::min<size_t>(1 + g() % 300000, want.size() - off);
    auto p = Pattern(n, 100 + i);
    ASSERT_TRUE(f->Pwrite(p.data(), n, off).ok());
    std::memcpy(want.data() + off, p.data(), n);
  }
  // A write across the 2 MiB boundary.
  auto p = Pattern(8192, 9);
  ASSERT_TRUE(f->Pwrite(p.data(), p.size(), (2 << 20) - 4096).ok());
  std::memcpy(want.data() + (2 << 20) - 4096, p.data(), p.size());
  std::vector<char> got(want.size());
  ASSERT_EQ(*f->Pread(got.data(), got.size(), 0), want.size());
  EXPECT_TRUE(got == want);
  ASSERT_TRUE(f->Sync().ok());
  EXPECT_TRUE(KernelRead(Path("o")) == want);
  ASSERT_TRUE(f->Close().ok());
}

TEST_P(SplitTest, TwoDescriptorsOfOneFileAgree) {
  auto a = Open("two", O_RDWR | O_CREAT);
  auto b = Open("two", O_RDONLY);
  ASSERT_TRUE(a && b);
  auto p = Pattern(10000, 1);
  ASSERT_TRUE(a->Append(p.data(), p.size()).ok());
  EXPECT_EQ(*b->Size(), p.size());
  std::vector<char> got(p.size());
  ASSERT_EQ(*b->Pread(got.data(), got.size(), 0), p.size());
  EXPECT_TRUE(got == p);
  // b cannot write: it was opened read-only.
  EXPECT_EQ(b->Pwrite(p.data(), 1, 0).status().code(), EBADF);
  ASSERT_TRUE(a->Close().ok());
  ASSERT_TRUE(b->Close().ok());
}

TEST_P(SplitTest, WritesPastTheEndLeaveZerosBetween) {
  auto f = Open("sparse", O_RDWR | O_CREAT);
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->Pwrite("abc", 3, 0).ok());
  ASSERT_TRUE(f->Pwrite("xyz", 3, 10000).ok());
  std::vector<char> want(10003, 0);
  std::memcpy(want.data(), "abc", 3);
  std::memcpy(want.data() + 10000, "xyz", 3);
  std::vector<char> got(want.size());
  ASSERT_EQ(*f->Pread(got.data(), got.size(), 0), want.size());
  EXPECT_TRUE(got == want);
  // Far past the end (more than staging holds): through the kernel.
  ASSERT_TRUE(f->Pwrite("q", 1, 100 << 20).ok());
  EXPECT_EQ(*f->Size(), (100u << 20) + 1);
  ASSERT_TRUE(f->Close().ok());
  auto k = KernelRead(Path("sparse"));
  ASSERT_EQ(k.size(), (100u << 20) + 1);
  EXPECT_EQ(std::memcmp(k.data(), want.data(), want.size()), 0);
  EXPECT_EQ(k.back(), 'q');
}

TEST_P(SplitTest, AppendsBeyondOneStagingFileAreRelinkedOnTheWay) {
  auto f = Open("big", O_WRONLY | O_CREAT | O_APPEND);
  ASSERT_TRUE(f);
  std::vector<char> want;
  for (int i = 0; i < 40; i++) {  // 20 MiB in pieces of 512 KiB + 1
    auto p = Pattern((512 << 10) + 1, i);
    ASSERT_TRUE(f->Append(p.data(), p.size()).ok());
    want.insert(want.end(), p.begin(), p.end());
  }
  ASSERT_TRUE(f->Sync().ok());
  EXPECT_TRUE(KernelRead(Path("big")) == want);
  ASSERT_TRUE(f->Close().ok());
  // The method the engine chose and reports was the one used throughout
  // (a refused relink would have switched it to copying).
  RecordProperty("relink", split::ToString(split().method()));
  if (std::get<0>(GetParam()) == "ext4") {
    EXPECT_TRUE(split().method() == split::RelinkMethod::kMoveExtents || !split().method_note().empty())
        << "ext4 without extent moves and no reason given";
  }
}

TEST_P(SplitTest, TruncateDropsOrExtendsStagedBytes) {
  auto f = Open("t", O_RDWR | O_CREAT);
  ASSERT_TRUE(f);
  auto p = Pattern(20000, 5);
  ASSERT_TRUE(f->Append(p.data(), p.size()).ok());
  ASSERT_TRUE(f->Truncate(7000).ok());
  EXPECT_EQ(*f->Size(), 7000u);
  ASSERT_TRUE(f->Truncate(9000).ok());
  std::vector<char> want(p.begin(), p.begin() + 7000);
  want.resize(9000, 0);
  std::vector<char> got(9000);
  ASSERT_EQ(*f->Pread(got.data(), got.size(), 0), 9000u);
  EXPECT_TRUE(got == want);
  ASSERT_TRUE(f->Close().ok());
  EXPECT_TRUE(KernelRead(Path("t")) == want);
}

TEST_P(SplitTest, OpenWithTruncateForgetsStagedBytesOfAnotherDescriptor) {
  auto a = Open("tr", O_RDWR | O_CREAT);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->Append("hello", 5).ok());
  auto b = Open("tr", O_RDWR | O_TRUNC);
  ASSERT_TRUE(b);
  EXPECT_EQ(*a->Size(), 0u);
  ASSERT_TRUE(b->Append("x", 1).ok());
  ASSERT_TRUE(a->Close().ok());
  ASSERT_TRUE(b->Close().ok());
  auto k = KernelRead(Path("tr"));
  EXPECT_EQ(std::string(k.begin(), k.end()), "x");
}

TEST_P(SplitTest, MapSeesStagedAppends) {
  auto f = Open("m", O_RDWR | O_CREAT);
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->Append("mapped bytes", 12).ok());
  auto m = f->Map(nullptr, 4096, PROT_READ, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(std::memcmp(*m, "mapped bytes", 12), 0);
  munmap(*m, 4096);
  ASSERT_TRUE(f->Close().ok());
}

TEST_P(SplitTest, HiddenDirectoryIsPrivateAndLeftEmptyAfterClose) {
  auto f = Open("h", O_RDWR | O_CREAT);
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->Append("1", 1).ok());
  ASSERT_TRUE(f->Close().ok());
  struct stat st{};
  ASSERT_EQ(stat((dir_->path() + "/.mapfs-overlay").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  engine_.reset();  // the log goes with a clean end too? it stays, unlocked, until recovery
  Reopen();
  EXPECT_EQ(split().recovery().redone, 0);
  EXPECT_EQ(split().recovery().lost, 0);
}

TEST_P(SplitTest, ThreadsAppendingThroughTwoDescriptorsInterleaveWholeRecords) {
  auto a = Open("mt", O_RDWR | O_CREAT | O_APPEND);
  auto b = Open("mt", O_RDWR | O_APPEND);
  ASSERT_TRUE(a && b);
  constexpr int kThreads = 4, kRecords = 150;
  constexpr size_t kRec = 1000;
  std::vector<std::thread> ts;
  std::atomic<bool> bad{false};
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      std::vector<char> rec(kRec, static_cast<char>('a' + t));
      OverlayFile* f = (t % 2 ? b : a).get();
      for (int i = 0; i < kRecords; i++)
        if (!f->Append(rec.data(), rec.size()).ok()) bad = true;
    });
  }
  ts.emplace_back([&] {  // a reader meanwhile: whatever it sees is whole records
    std::vector<char> buf(kRec);
    for (int i = 0; i < 300; i++) {
      uint64_t size = *a->Size();
      if (size % kRec != 0) bad = true;
      if (size >= kRec && *b->Pread(buf.data(), kRec, size - kRec) == kRec)
        for (char c : buf) bad = bad || c != buf[0];
    }
  });
  for (auto& t : ts) t.join();
  EXPECT_FALSE(bad);
  ASSERT_TRUE(a->Close().ok());
  ASSERT_TRUE(b->Close().ok());
  auto k = KernelRead(Path("mt"));
  ASSERT_EQ(k.size(), kThreads * kRecords * kRec);
  std::vector<int> count(kThreads, 0);
  for (size_t r = 0; r < k.size(); r += kRec) {
    int t = k[r] - 'a';
    ASSERT_TRUE(t >= 0 && t < kThreads);
    for (size_t i = 0; i < kRec; i++) ASSERT_EQ(k[r + i], k[r]) << "a torn record at " << r;
    count[static_cast<size_t>(t)]++;
  }
  for (int c : count) EXPECT_EQ(c, kRecords);
}

// Region maps outlive the last close (split_engine.h "reuse"): a file shrunk
// through the kernel meanwhile (another process) is read at its new size on
// reopen, never with bytes past its end, and regrown bytes are the kernel's.
TEST_P(SplitTest, MapsKeptAcrossCloseNeverReachPastAnotherProcesssTruncation) {
  std::vector<char> want = Pattern(5 << 20, 11);
  {
    int fd = open(Path("t").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_EQ(write(fd, want.data(), want.size()), static_cast<ssize_t>(want.size()));
    close(fd);
  }
  std::vector<char> got(want.size());
  {
    auto f = Open("t", O_RDWR);
    ASSERT_TRUE(f);
    ASSERT_EQ(*f->Pread(got.data(), got.size(), 0), want.size());  // maps every region
    ASSERT_TRUE(f->Pwrite("x", 1, 100).ok());
    want[100] = 'x';
    ASSERT_TRUE(f->Close().ok());
  }
  // "Another process": the kernel, which the engine does not see.
  ASSERT_EQ(truncate(Path("t").c_str(), 3000), 0);
  struct stat sb{};
  ASSERT_EQ(stat(Path("t").c_str(), &sb), 0);
  ASSERT_TRUE(engine_->FixStat(Path("t").c_str(), &sb).ok());
  EXPECT_EQ(sb.st_size, 3000);  // the closed file's kept state does not speak for it
  {
    auto f = Open("t", O_RDONLY);
    ASSERT_TRUE(f);
    EXPECT_EQ(*f->Size(), 3000u);
    EXPECT_EQ(*f->Pread(got.data(), got.size(), 0), 3000u);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), 3000), 0);
    EXPECT_EQ(*f->Pread(got.data(), 4096, 4096), 0u);        // past the new end
    EXPECT_EQ(*f->Pread(got.data(), 4096, 3 << 20), 0u);     // in a region that was mapped
    ASSERT_TRUE(f->Close().ok());
  }
  // Regrown through the kernel: its new bytes, zeros in its hole.
  auto tail = Pattern(4096, 12);
  {
    int fd = open(Path("t").c_str(), O_WRONLY);
    ASSERT_EQ(pwrite(fd, tail.data(), tail.size(), (3 << 20) - 100), static_cast<ssize_t>(tail.size()));
    close(fd);
  }
  auto f = Open("t", O_RDWR);
  ASSERT_TRUE(f);
  uint64_t size = (3 << 20) - 100 + 4096;
  EXPECT_EQ(*f->Size(), size);
  std::vector<char> g2(size + 10);
  ASSERT_EQ(*f->Pread(g2.data(), g2.size(), 0), size);
  EXPECT_EQ(std::memcmp(g2.data(), want.data(), 3000), 0);
  for (size_t i = 3000; i < (3 << 20) - 100; i++) ASSERT_EQ(g2[i], 0) << "stale byte at " << i;
  EXPECT_EQ(std::memcmp(g2.data() + (3 << 20) - 100, tail.data(), tail.size()), 0);
  // And an overwrite through the kept maps reaches the kernel.
  ASSERT_TRUE(f->Pwrite("yz", 2, size - 2).ok());
  ASSERT_TRUE(f->Close().ok());
  auto k = KernelRead(Path("t"));
  ASSERT_EQ(k.size(), size);
  EXPECT_EQ(k[size - 2], 'y');
  EXPECT_EQ(k[size - 1], 'z');
}

// Another process truncates a file through the kernel while it is open
// here, after the engine mapped its regions: reads past the new end return
// what the kernel's would (a short count, then 0) and writes there grow the
// file with a hole, as the kernel's would. Before, the copy through a map
// page past the file's end raised SIGBUS and killed the program.
TEST_P(SplitTest, AFileShrunkByAnotherProcessWhileOpenIsReadAndWrittenAsTheKernelWould) {
  std::vector<char> want = Pattern(3 << 20, 21);
  {
    int fd = open(Path("s").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_EQ(write(fd, want.data(), want.size()), static_cast<ssize_t>(want.size()));
    close(fd);
  }
  auto f = Open("s", O_RDWR);
  ASSERT_TRUE(f);
  std::vector<char> got(want.size());
  ASSERT_EQ(*f->Pread(got.data(), got.size(), 0), want.size());  // every region mapped
  ASSERT_TRUE(f->Pwrite("x", 1, 10).ok());  // an overwrite through the maps
  want[10] = 'x';
  // "Another process": the kernel, unseen by the engine. 5,000 bytes: the
  // file's second page still exists in part, the rest is past the end.
  ASSERT_EQ(truncate(Path("s").c_str(), 5000), 0);

  // Wholly past the new end, in a mapped region: nothing, as the kernel says.
  auto r = f->Pread(got.data(), 4096, 2 << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 0u);
  EXPECT_EQ(*f->Size(), 5000u);
  // Across the new end: the bytes up to it.
  r = f->Pread(got.data(), 8192, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 5000u);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), 5000), 0);
  // Strict overwrites go through staging and the kernel (no map to fault
  // on), so they never learn of the new end: its size stays this process's
  // belief until the next open (docs/OVERLAY.md, "What is not done").
  if (std::get<1>(GetParam()) == Mode::kStrict) return;

  // A write wholly past the new end, in a mapped region: the kernel's
  // growth, zeros between.
  auto tail = Pattern(4096, 22);
  const uint64_t at = (1 << 20) + 100;
  ASSERT_TRUE(f->Pwrite(tail.data(), tail.size(), at).ok());
  EXPECT_EQ(*f->Size(), at + tail.size());
  ASSERT_TRUE(f->Sync().ok());  // in the kernel's file now, not staged
  ASSERT_EQ(KernelRead(Path("s")).size(), at + tail.size());
  // Truncated again under the engine, then an overwrite that the old size
  // would have sent through the maps past the end.
  ASSERT_EQ(truncate(Path("s").c_str(), 100), 0);
  ASSERT_TRUE(f->Pwrite("yz", 2, 8000).ok());
  EXPECT_EQ(*f->Size(), 8002u);
  ASSERT_TRUE(f->Close().ok());
  auto k = KernelRead(Path("s"));
  ASSERT_EQ(k.size(), 8002u);
  EXPECT_EQ(std::memcmp(k.data(), want.data(), 100), 0);
  for (size_t i = 100; i < 8000; i++) ASSERT_EQ(k[i], 0) << "stale byte at " << i;
  EXPECT_EQ(k[8000], 'y');
  EXPECT_EQ(k[8001], 'z');
}

// The last page of a file open here, resized by another process through
// the kernel: a shrink inside that page raises no fault (the page still
// exists), so a call that reaches the page asks the kernel for the size.
// Reads then stop at the new end, and growth by the other process is read,
// as the kernel's own read would.
TEST_P(SplitTest, AFileResizedByAnotherProcessIsSeenAtItsLastPage) {
  const size_t size = (3 << 20) - 1000;
  std::vector<char> want = Pattern(size, 23);
  {
    int fd = open(Path("e").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_EQ(write(fd, want.data(), want.size()), static_cast<ssize_t>(want.size()));
    close(fd);
  }
  auto f = Open("e", O_RDWR);
  ASSERT_TRUE(f);
  std::vector<char> got(8192);
  ASSERT_EQ(*f->Pread(got.data(), 4096, size - 4096), 4096u);  // the last page mapped
  ASSERT_EQ(truncate(Path("e").c_str(), static_cast<off_t>(size - 2000)), 0);  // inside that page
  auto r = f->Pread(got.data(), 8192, size - 4096);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 2096u);
  EXPECT_EQ(std::memcmp(got.data(), want.data() + size - 4096, 2096), 0);
  EXPECT_EQ(*f->Size(), size - 2000);
  // Grown by the other process: its bytes are read.
  auto more = Pattern(5000, 24);
  {
    int fd = open(Path("e").c_str(), O_WRONLY | O_APPEND);
    ASSERT_EQ(write(fd, more.data(), more.size()), static_cast<ssize_t>(more.size()));
    close(fd);
  }
  r = f->Pread(got.data(), 8192, size - 2000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 5000u);
  EXPECT_EQ(std::memcmp(got.data(), more.data(), 5000), 0);
  ASSERT_TRUE(f->Close().ok());
}

bool MapsDeleted(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(path) != std::string::npos && line.find("(deleted)") != std::string::npos) return true;
  return false;
}

// A file kept mapped after its close does not hold its blocks once it is
// removed: the next close of a mapped file lets it go.
TEST_P(SplitTest, RemovedFileIsNotKeptMappedAfterItsLastClose) {
  std::vector<char> data = Pattern(1 << 20, 13);
  for (const char* n : {"gone", "other"}) {
    int fd = open(Path(n).c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    close(fd);
  }
  std::vector<char> got(4096);
  {
    auto f = Open("gone", O_RDONLY);
    ASSERT_TRUE(f);
    ASSERT_EQ(*f->Pread(got.data(), got.size(), 0), got.size());
    ASSERT_TRUE(f->Close().ok());
  }
  ASSERT_EQ(unlink(Path("gone").c_str()), 0);
  EXPECT_TRUE(MapsDeleted(Path("gone")));  // kept until the engine notices
  auto f = Open("other", O_RDONLY);
  ASSERT_TRUE(f);
  ASSERT_EQ(*f->Pread(got.data(), got.size(), 0), got.size());
  ASSERT_TRUE(f->Close().ok());
  EXPECT_FALSE(MapsDeleted(Path("gone")));
}

// Staging files outlive the file that used them: the next file's appends,
// holes and reads see none of the earlier file's bytes.
TEST_P(SplitTest, ReusedStagingShowsNoBytesOfTheFileBefore) {
  {
    auto a = Open("first", O_WRONLY | O_CREAT);
    ASSERT_TRUE(a);
    std::vector<char> big(300000, 'A');
    ASSERT_TRUE(a->Append(big.data(), big.size()).ok());
    ASSERT_TRUE(a->Close().ok());
  }
  auto b = Open("second", O_RDWR | O_CREAT);
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->Append("head", 4).ok());
  ASSERT_TRUE(b->Pwrite("tail", 4, 200000).ok());  // a hole between
  std::vector<char> want(200004, 0);
  std::memcpy(want.data(), "head", 4);
  std::memcpy(want.data() + 200000, "tail", 4);
  std::vector<char> got(want.size() + 10);
  ASSERT_EQ(*b->Pread(got.data(), got.size(), 0), want.size());
  got.resize(want.size());
  EXPECT_TRUE(got == want);
  ASSERT_TRUE(b->Close().ok());
  EXPECT_TRUE(KernelRead(Path("second")) == want);
  EXPECT_EQ(KernelRead(Path("first")), std::vector<char>(300000, 'A'));
}

INSTANTIATE_TEST_SUITE_P(Fs, SplitTest, test::DirsTimesModes(), test::DirAndModeName);

}  // namespace
}  // namespace mapfs::overlay
