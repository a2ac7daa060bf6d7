// Maps of the pool file (fs::FileSystem::MapPool, what the LD_PRELOAD shim's
// shared mmap uses): once a file is mapped, its bytes keep their pool pages
// whatever the file does — growth past a small partition (moved by copy when
// not mapped), growth past 2 MiB (pswap), a large overwrite (write-and-swap
// in strict mode when not mapped), truncation down and up — so a map made
// before sees every change and read() sees every store through a map. In
// every consistency mode.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "fs_test_util.h"
#include "medium/pool.h"
#include "vm/vm.h"

namespace mapfs::fstest {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * kKiB;

class FsMmap : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    ASSERT_EQ(pool_.error(), "");
    auto m = fs::FileSystem::Mount(pool_.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    fs_ = std::move(*m);
  }
  std::vector<file::PoolRun> Runs(fs::OpenFile& f, uint64_t off, uint64_t len) {
    std::vector<file::PoolRun> r;
    Status s = fs_->MapPool(f, off, len, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return r;
  }
  static bool Same(const std::vector<file::PoolRun>& a, const std::vector<file::PoolRun>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++)
      if (a[i].pool_off != b[i].pool_off || a[i].len != b[i].len) return false;
    return true;
  }
  // Byte `i` of the mapped range, as a map of the pool file sees it.
  char At(const std::vector<file::PoolRun>& r, uint64_t i) {
    for (const auto& run : r) {
      if (i < run.len) return fs_->mount().vm().pool()->base()[run.pool_off + i];
      i -= run.len;
    }
    ADD_FAILURE() << "byte outside the mapped range";
    return 0;
  }
  void Store(const std::vector<file::PoolRun>& r, uint64_t i, char c) {
    for (const auto& run : r) {
      if (i < run.len) {
        fs_->mount().vm().pool()->base()[run.pool_off + i] = c;
        return;
      }
      i -= run.len;
    }
    ADD_FAILURE() << "byte outside the mapped range";
  }
  char ReadByte(fs::OpenFile& f, uint64_t off) {
    char c = 0x55;
    auto n = fs_->Read(f, &c, 1, static_cast<int64_t>(off));
    EXPECT_TRUE(n.ok() && *n == 1);
    return c;
  }

  FsPool pool_{256ull << 20};
  std::unique_ptr<fs::FileSystem> fs_;
};

TEST_P(FsMmap, MappedBytesKeepTheirPoolPages) {
  auto f = fs_->Open("/f", O_CREAT | O_RDWR | GetParam(), 0644);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::string data(32 * kKiB, 'a');
  ASSERT_TRUE(fs_->Write(**f, data.data(), data.size(), 0).ok());
  auto first = Runs(**f, 0, 32 * kKiB);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(At(first, 100), 'a');
  Store(first, 100, 'm');
  EXPECT_EQ(ReadByte(**f, 100), 'm');

  auto grow = [&](uint64_t end) {
    ASSERT_TRUE(fs_->Write(**f, "g", 1, static_cast<int64_t>(end - 1)).ok());
    EXPECT_TRUE(Same(Runs(**f, 0, 32 * kKiB), first)) << "moved when the file grew to " << end;
    EXPECT_EQ(ReadByte(**f, 100), 'm');
    ASSERT_TRUE(fs_->Write(**f, "w", 1, 200).ok());
    EXPECT_EQ(At(first, 200), 'w');
    Store(first, 200, 'x');
    EXPECT_EQ(ReadByte(**f, 200), 'x');
  };
  grow(64 * kKiB);  // small partitions: moved by copy unless mapped
  grow(3 * kMiB);   // past 2 MiB: pswap
  auto second = Runs(**f, 2 * kMiB, 32 * kKiB);
  grow(40 * kMiB);
  EXPECT_TRUE(Same(Runs(**f, 2 * kMiB, 32 * kKiB), second));

  // A large overwrite (past the strict mode's log) goes in place.
  std::string big(512 * kKiB, 'B');
  ASSERT_TRUE(fs_->Write(**f, big.data(), big.size(), 4 * kKiB).ok());
  EXPECT_TRUE(Same(Runs(**f, 0, 32 * kKiB), first));
  EXPECT_EQ(At(first, 4 * kKiB), 'B');
  EXPECT_EQ(At(first, 4 * kKiB - 1), 'a');

  // Truncation keeps the pages; what lies past the end reads as zero.
  ASSERT_TRUE(fs_->Ftruncate(**f, 10000).ok());
  EXPECT_EQ(At(first, 9999), 'B');
  EXPECT_EQ(At(first, 10000), 0);
  EXPECT_EQ(At(first, 20000), 0);
  ASSERT_TRUE(fs_->Ftruncate(**f, 0).ok());
  EXPECT_EQ(At(first, 0), 0);
  ASSERT_TRUE(fs_->Ftruncate(**f, 4 * kMiB).ok());
  EXPECT_TRUE(Same(Runs(**f, 0, 32 * kKiB), first));
  EXPECT_TRUE(Same(Runs(**f, 2 * kMiB, 32 * kKiB), second));
  Store(second, 5, 's');
  EXPECT_EQ(ReadByte(**f, 2 * kMiB + 5), 's');

  std::vector<file::PoolRun> r;
  EXPECT_EQ(fs_->MapPool(**f, 100, 4096, &r).code(), EINVAL);
  EXPECT_EQ(fs_->MapPool(**f, 0, 0, &r).code(), EINVAL);
  ASSERT_TRUE(fs_->Close(**f).ok());
  ASSERT_TRUE(fs_->Unmount().ok());
  fs_.reset();
  EXPECT_EQ(CheckPool(pool_.path()), std::vector<std::string>{});
}

// A mirror (fs/map_mirror.h: the shim maps fragmented files through one)
// stays one content with the file system's calls: stores through it are
// read back by Read, written back by Fsync and at unmount, a Write shows
// in it without losing stores elsewhere in the page, truncation and hole
// punching zero it, and a second MirrorFd of the file is the same memfd.
TEST_P(FsMmap, MirrorIsCoherentWithTheCalls) {
  auto f = fs_->Open("/m", O_CREAT | O_RDWR | GetParam(), 0644);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::string data(96 * kKiB, 'a');
  ASSERT_TRUE(fs_->Write(**f, data.data(), data.size(), 0).ok());
  auto fd = fs_->MirrorFd(**f, 64 * kKiB);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_TRUE(fs_->Mirrored((*f)->ino));
  char* m = static_cast<char*>(::mmap(nullptr, 128 * kKiB, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0));
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_EQ(m[100], 'a');
  m[100] = 'm';
  EXPECT_EQ(ReadByte(**f, 100), 'm');
  // Growth of the mirror fills from the file, keeping what is there.
  auto again = fs_->MirrorFd(**f, 128 * kKiB);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *fd);
  EXPECT_EQ(m[90 * kKiB], 'a');
  EXPECT_EQ(m[100 * kKiB], 0);  // past the end of the file
  m[200] = 's';
  ASSERT_TRUE(fs_->Write(**f, "w", 1, 300).ok());
  EXPECT_EQ(m[300], 'w');
  EXPECT_EQ(ReadByte(**f, 200), 's');
  m[50 * kKiB] = 'f';
  ASSERT_TRUE(fs_->Fsync(**f).ok());
  ASSERT_TRUE(fs_->Fallocate(**f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8 * kKiB, 4 * kKiB).ok());
  EXPECT_EQ(m[8 * kKiB], 0);
  EXPECT_EQ(ReadByte(**f, 8 * kKiB), 0);
  ASSERT_TRUE(fs_->Ftruncate(**f, 60 * kKiB).ok());
  EXPECT_EQ(m[59 * kKiB], 'a');
  EXPECT_EQ(m[61 * kKiB], 0);
  ASSERT_TRUE(fs_->Ftruncate(**f, 96 * kKiB).ok());
  EXPECT_EQ(ReadByte(**f, 61 * kKiB), 0);
  // A store past the end never reaches the file.
  m[97 * kKiB] = 'x';
  m[40 * kKiB] = 'u';  // written back at unmount
  ASSERT_TRUE(fs_->Close(**f).ok());
  ASSERT_TRUE(fs_->Unmount().ok());
  fs_.reset();
  ::munmap(m, 128 * kKiB);
  auto r = fs::FileSystem::Mount(pool_.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  fs_ = std::move(*r);
  auto g = fs_->Open("/m", O_RDONLY, 0);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(ReadByte(**g, 100), 'm');
  EXPECT_EQ(ReadByte(**g, 200), 's');
  EXPECT_EQ(ReadByte(**g, 300), 'w');
  EXPECT_EQ(ReadByte(**g, 50 * kKiB), 'f');
  EXPECT_EQ(ReadByte(**g, 40 * kKiB), 'u');
  struct stat st{};
  ASSERT_TRUE(fs_->Fstat(**g, &st).ok());
  EXPECT_EQ(st.st_size, static_cast<off_t>(96 * kKiB));
  char c = 1;
  auto past = fs_->Read(**g, &c, 1, 97 * kKiB);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(*past, 0u);
  ASSERT_TRUE(fs_->Close(**g).ok());
  ASSERT_TRUE(fs_->Unmount().ok());
  fs_.reset();
  EXPECT_EQ(CheckPool(pool_.path()), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Modes, FsMmap, ::testing::Values(fs::kOpenModePosix, fs::kOpenModeSync, fs::kOpenModeStrict),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == fs::kOpenModePosix ? "posix" : i.param == fs::kOpenModeSync ? "sync" : "strict";
                         });

}  // namespace
}  // namespace mapfs::fstest
