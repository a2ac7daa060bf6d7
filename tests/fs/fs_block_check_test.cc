// fsck of block-mapped pools against the inodes (issue 14): what the
// mapping area maps must belong to a live regular file, below its
// blocks_end, each block once; staging blocks are gone on a clean pool.
// Each case damages a consistent pool through the mapper itself (as a
// crash or a bug would leave it), then: fsck names the problem, --repair
// frees the orphaned mappings (zeroed: free blocks read as zero), fsck is
// clean and the files are intact. Every design.
#include <gtest/gtest.h>

#include "fs_test_util.h"
#include "map/mapper.h"
#include "medium/pool.h"
#include "medium/shared.h"

namespace mapfs::fstest {
namespace {

class BlockCheck : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    mapfs_mkfs_options o{};
    o.size = 64ull << 20;
    o.page_size = 4096;
    o.mode = MAPFS_MODE_SYNC;
    o.files = GetParam();
    ASSERT_EQ(mapfs_mkfs(tp_.path().c_str(), &o), 0) << mapfs_last_error();
    mapfs_t* fs = MountC(tp_.path());
    ASSERT_NE(fs, nullptr);
    data_.resize(300000);
    FillPattern(data_.data(), data_.size(), 7, 0);
    int fd = mapfs_open(fs, "/a", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(WriteAll(fs, fd, data_.data(), data_.size(), 0));
    struct stat st;
    ASSERT_EQ(mapfs_fstat(fs, fd, &st), 0);
    ino_ = st.st_ino;
    ASSERT_EQ(mapfs_close(fs, fd), 0);
    ASSERT_EQ(mapfs_unmount(fs), 0);
    FS_EXPECT_CLEAN(tp_.path());
  }

  // Maps `count` blocks at file block `fblk` of `ino` behind the file
  // system's back, fills them with nonzero bytes, and returns the mapper's
  // used-block count before.
  uint64_t Inject(uint64_t ino, uint64_t fblk, uint64_t count) {
    auto p = medium::Pool::Open(tp_.path());
    EXPECT_TRUE(p.ok());
    if (!p.ok()) return 0;
    (*p)->FinishOpen();
    auto m = map::Mapper::Open(p->get(), (*p)->header().map_off, (*p)->header().map_len);
    EXPECT_TRUE(m.ok());
    if (!m.ok()) return 0;
    uint64_t before = (*m)->usage().used_blocks;
    if (ino == 0) ino = (*m)->max_ino() - medium::kMaxMounts;  // mount slot 0's staging inode
    map::Cursor c{};
    Status st = (*m)->Insert(&c, ino, map::FileBlock(fblk), count);
    EXPECT_TRUE(st.ok()) << st.ToString();
    for (uint64_t i = 0; i < count; i++) {
      map::Mapping mp;
      EXPECT_EQ((*m)->Lookup(&c, ino, map::FileBlock(fblk + i), &mp), 0);
      if (mp.mapped) std::memset((*m)->block_ptr(mp.blk), 0x5a, 4096);
    }
    m->reset();
    EXPECT_TRUE((*p)->Close().ok());
    return before;
  }
  uint64_t UsedBlocks() {
    auto p = medium::Pool::Open(tp_.path());
    if (!p.ok()) return 0;
    (*p)->FinishOpen();
    auto m = map::Mapper::Open(p->get(), (*p)->header().map_off, (*p)->header().map_len);
    uint64_t u = m.ok() ? (*m)->usage().used_blocks : 0;
    if (m.ok()) m->reset();
    (void)(*p)->Close();
    return u;
  }
  // fsck finds `what`; --repair fixes it; fsck is clean; /a is intact and
  // the blocks went back to the area (a new file of as many blocks reads
  // as zero where it was not written).
  void ExpectFoundAndRepaired(const std::string& what, uint64_t used_before) {
    auto problems = CheckPool(tp_.path());
    bool found = false;
    for (auto& p : problems) found |= p.find(what) != std::string::npos;
    EXPECT_TRUE(found) << "fsck did not report '" << what << "':\n" << Join(problems);
    {
      auto fs = fs::FileSystem::Mount(tp_.path());
      ASSERT_TRUE(fs.ok()) << fs.status().ToString();
      fs::FsCheckReport r = (*fs)->Repair();
      EXPECT_TRUE(r.problems.empty()) << Join(r.problems);
      bool freed = false;
      for (auto& rp : r.repairs) freed |= rp.find("orphaned block mappings") != std::string::npos;
      EXPECT_TRUE(freed) << "repairs:\n" << Join(r.repairs);
      ASSERT_TRUE((*fs)->Unmount().ok());
    }
    FS_EXPECT_CLEAN(tp_.path());
    EXPECT_EQ(UsedBlocks(), used_before);
    mapfs_t* fs = MountC(tp_.path());
    ASSERT_NE(fs, nullptr);
    std::string c;
    ASSERT_TRUE(ReadFile(fs, "/a", &c));
    EXPECT_EQ(c, data_);
    // Fresh blocks read as zero: the repair zeroed what it freed.
    int fd = mapfs_open(fs, "/z", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(mapfs_fallocate(fs, fd, 0, 0, 64 << 12), 0);
    std::string z(64 << 12, 'x');
    ASSERT_EQ(mapfs_pread(fs, fd, z.data(), z.size(), 0), static_cast<ssize_t>(z.size()));
    EXPECT_EQ(z, std::string(z.size(), '\0'));
    ASSERT_EQ(mapfs_close(fs, fd), 0);
    ASSERT_EQ(mapfs_unmount(fs), 0);
  }

  testing::TempPool tp_{1ull << 20};
  std::string data_;
  uint64_t ino_ = 0;
};

TEST_P(BlockCheck, MappingsOfAFreeInodeAreOrphans) {
  uint64_t before = Inject(ino_ + 40, 0, 5);
  ExpectFoundAndRepaired("not a live regular file (orphaned mapping)", before);
}

TEST_P(BlockCheck, MappingsOfADirectoryAreOrphans) {
  uint64_t before = Inject(1, 3, 2);  // the root directory
  ExpectFoundAndRepaired("inode 1: 2 blocks mapped at file blocks 3..4 but it is not a live regular file", before);
}

TEST_P(BlockCheck, BlocksPastBlocksEndAreFound) {
  // blocks_end of a 300,000-byte file is 1 MiB (256 blocks).
  uint64_t before = Inject(ino_, 1000, 4);
  ExpectFoundAndRepaired("4 blocks mapped at file blocks 1000..1003 at or past its blocks_end", before);
}

TEST_P(BlockCheck, StagingBlocksOnACleanPoolAreFound) {
  uint64_t before = Inject(0, 0, 3);
  ExpectFoundAndRepaired("as staging blocks, yet no mount is live", before);
}

INSTANTIATE_TEST_SUITE_P(Designs, BlockCheck, ::testing::Values("hashfs", "cuckoo", "extent", "radix"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

}  // namespace
}  // namespace mapfs::fstest
