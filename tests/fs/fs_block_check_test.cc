// fsck of block-mapped pools against the inodes (issue 14): what the
// mapping area maps must belong to a live regular file, below its
// blocks_end, each block once; staging blocks are gone on a clean pool.
// Each case damages a consistent pool through the mapper itself (as a
// crash or a bug would leave it), then: fsck names the problem, --repair
// frees the orphaned mappings (zeroed: free blocks read as zero), fsck is
// clean and the files are intact. Every design.
#include <gtest/gtest.h>

#include "fs_test_util.h"
#include "map/hashfs.h"
#include "map/mapper.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "medium/shared.h"
#include "meta/fs_format.h"
#include "meta/inode_table.h"

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
  // fsck reports `what`; --repair leaves no problem and made a repair
  // naming `repair`; fsck is clean after it.
  void ExpectFoundThenRepaired(const std::string& what, const std::string& repair) {
    auto problems = CheckPool(tp_.path());
    bool found = false;
    for (auto& p : problems) found |= p.find(what) != std::string::npos;
    EXPECT_TRUE(found) << "fsck did not report '" << what << "':\n" << Join(problems);
    {
      auto fs = fs::FileSystem::Mount(tp_.path());
      ASSERT_TRUE(fs.ok()) << fs.status().ToString();
      fs::FsCheckReport r = (*fs)->Repair();
      EXPECT_TRUE(r.problems.empty()) << Join(r.problems);
      bool made = false;
      for (auto& rp : r.repairs) made |= rp.find(repair) != std::string::npos;
      EXPECT_TRUE(made) << "no repair '" << repair << "' among:\n" << Join(r.repairs);
      ASSERT_TRUE((*fs)->Unmount().ok());
    }
    FS_EXPECT_CLEAN(tp_.path());
  }

  // fsck finds `what`; --repair fixes it; fsck is clean; /a is intact and
  // the blocks went back to the area (a new file of as many blocks reads
  // as zero where it was not written).
  void ExpectFoundAndRepaired(const std::string& what, uint64_t used_before) {
    ExpectFoundThenRepaired(what, "orphaned block mappings");
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

// Sets a field of inode `ino` behind the file system's back (a bit flip).
void PokeInode(const std::string& path, uint64_t ino, size_t field_off, uint64_t v) {
  auto fs = fs::FileSystem::Mount(path);
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  {
    Mount& m = (*fs)->mount();
    auto it = meta::InodeTable::Open(&m.pool(), &m.vm(), &m.space());
    ASSERT_TRUE(it.ok());
    auto* w = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>((*it)->Get(ino)) + field_off);
    medium::Store64(w, v);
    medium::Persist(w, 8);
  }
  ASSERT_TRUE((*fs)->Unmount().ok());
}

// Regression (crash_damaged_test on hashfs, seed 20261123): a bit flip made
// a 370-byte file 128 TiB long. fsck said nothing (a block-mapped file may
// be sparse) and a stat of it walked 2^35 holes. Every call that raises a
// size raises blocks_end first, so a size past blocks_end is damage: fsck
// names it, --repair cuts it to the end of the last mapped block, and the
// mapped bytes stay.
TEST_P(BlockCheck, SizePastBlocksEndIsFoundAndCut) {
  PokeInode(tp_.path(), ino_, offsetof(meta::format::Inode, size), 0x804000000000ull + data_.size());
  ExpectFoundThenRepaired("is past its blocks_end", "size 141012366562272 -> 303104");
  mapfs_t* fs = MountC(tp_.path());
  ASSERT_NE(fs, nullptr);
  std::string c;
  ASSERT_TRUE(ReadFile(fs, "/a", &c));
  ASSERT_EQ(c.size(), 303104u);  // the last block's tail reads as zero
  EXPECT_EQ(c.substr(0, data_.size()), data_);
  EXPECT_EQ(c.substr(data_.size()), std::string(c.size() - data_.size(), '\0'));
  ASSERT_EQ(mapfs_unmount(fs), 0);
}

// A blocks_end damaged low (the size is right, its blocks lie past it):
// --repair raises blocks_end over them instead of freeing the file's data.
TEST_P(BlockCheck, BlocksEndBelowTheSizeIsRaisedNotFreed) {
  PokeInode(tp_.path(), ino_, offsetof(meta::format::Inode, blocks_end), 4096);
  ExpectFoundThenRepaired("is past its blocks_end 4096", "blocks_end 4096 -> ");
  mapfs_t* fs = MountC(tp_.path());
  ASSERT_NE(fs, nullptr);
  std::string c;
  ASSERT_TRUE(ReadFile(fs, "/a", &c));
  EXPECT_EQ(c, data_);
  ASSERT_EQ(mapfs_unmount(fs), 0);
}

// The largest size ftruncate takes on this pool (a power of two; the
// largest file depends on the pool's top partition level).
off_t LargestSize(mapfs_t* fs, int fd) {
  for (off_t s = off_t{1} << 44; s >= (off_t{1} << 20); s /= 2)
    if (mapfs_ftruncate(fs, fd, s) == 0) return s;
  return 0;
}

// Sparse files are no finding: a size raised by ftruncate (no block behind
// it) is covered by blocks_end, on every design.
TEST_P(BlockCheck, SparseTruncationIsClean) {
  mapfs_t* fs = MountC(tp_.path());
  ASSERT_NE(fs, nullptr);
  int fd = mapfs_open(fs, "/sparse", O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  const off_t big = LargestSize(fs, fd);
  ASSERT_GE(big, off_t{1} << 26);
  ASSERT_EQ(mapfs_pwrite(fs, fd, "x", 1, big / 2), 1);
  ASSERT_EQ(mapfs_ftruncate(fs, fd, big / 2 + 12345), 0);
  ASSERT_EQ(mapfs_close(fs, fd), 0);
  ASSERT_EQ(mapfs_unmount(fs), 0);
  FS_EXPECT_CLEAN(tp_.path());
}

// Two mounts of the pool (as two processes have) allocate blocks from the
// one bitmap or table in the area: neither hands out a block the other
// took after it mounted. (The bitmap designs once allocated from a copy
// loaded at mount: two processes writing at once mapped the same blocks.)
TEST_P(BlockCheck, TwoMountsNeverShareABlock) {
  mapfs_t* a = MountC(tp_.path());
  ASSERT_NE(a, nullptr);
  mapfs_t* b = MountC(tp_.path());
  ASSERT_NE(b, nullptr);
  std::vector<char> x(200000), y(300000), z(100000);
  FillPattern(x.data(), x.size(), 11, 0);
  FillPattern(y.data(), y.size(), 12, 0);
  FillPattern(z.data(), z.size(), 13, 0);
  auto put = [](mapfs_t* fs, const char* path, const std::vector<char>& d) {
    int fd = mapfs_open(fs, path, O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(WriteAll(fs, fd, d.data(), d.size(), 0));
    ASSERT_EQ(mapfs_close(fs, fd), 0);
  };
  put(a, "/x", x);
  put(b, "/y", y);
  put(a, "/z", z);
  ASSERT_EQ(mapfs_unlink(b, "/x"), 0);  // freed by b: a may reuse them
  put(a, "/x2", x);
  for (mapfs_t* fs : {a, b}) {
    for (auto [path, d] : {std::pair{"/y", &y}, std::pair{"/z", &z}, std::pair{"/x2", &x}}) {
      std::vector<char> got(d->size() + 1);
      int fd = mapfs_open(fs, path, O_RDONLY, 0);
      ASSERT_GE(fd, 0) << path;
      ASSERT_EQ(mapfs_pread(fs, fd, got.data(), got.size(), 0), static_cast<ssize_t>(d->size())) << path;
      got.pop_back();
      EXPECT_TRUE(got == *d) << path << " changed under another mount's writes";
      ASSERT_EQ(mapfs_close(fs, fd), 0);
    }
  }
  ASSERT_EQ(mapfs_unmount(a), 0);
  ASSERT_EQ(mapfs_unmount(b), 0);
  FS_EXPECT_CLEAN(tp_.path());
}

INSTANTIATE_TEST_SUITE_P(Designs, BlockCheck, ::testing::Values("hashfs", "cuckoo", "extent", "radix"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

// Regression (the same image): on hashfs a lookup learns a hole 8 blocks at
// a time, so a walk over a whole file (st_blocks, truncation, unlink) cost
// a probe per block of its size: for the damaged 128 TiB size, a stat never
// ended. Such walks sweep the table once instead when the range is large
// against it. Counted in slots read, not timed.
TEST(BlockWalk, WholeFileWalksOfADamagedSizeAreBoundedByTheArea) {
  testing::TempPool tp{1ull << 20};
  mapfs_mkfs_options o{};
  o.size = 16ull << 20;
  o.page_size = 4096;
  o.files = "hashfs";
  ASSERT_EQ(mapfs_mkfs(tp.path().c_str(), &o), 0) << mapfs_last_error();
  const uint64_t area_blocks = (16ull << 20) / 4096;  // an upper bound of the table's slots
  uint64_t ino = 0;
  {
    mapfs_t* fs = MountC(tp.path());
    ASSERT_NE(fs, nullptr);
    int fd = mapfs_open(fs, "/huge", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(mapfs_pwrite(fs, fd, "abc", 3, 0), 3);
    ASSERT_EQ(mapfs_pwrite(fs, fd, "z", 1, 5 << 20), 1);
    struct stat st;
    ASSERT_EQ(mapfs_fstat(fs, fd, &st), 0);
    ino = st.st_ino;
    ASSERT_EQ(mapfs_close(fs, fd), 0);
    ASSERT_EQ(mapfs_unmount(fs), 0);
  }
  // 2^22 blocks of size: a thousand times the area.
  PokeInode(tp.path(), ino, offsetof(meta::format::Inode, size), uint64_t{1} << 34);
  mapfs_t* fs = MountC(tp.path());
  ASSERT_NE(fs, nullptr);
  const uint64_t before = map::HashFsMapper::slots_visited();
  struct stat st;
  ASSERT_EQ(mapfs_stat(fs, "/huge", &st), 0);
  EXPECT_EQ(st.st_blocks, 16);  // two 4 KiB blocks
  int fd = mapfs_open(fs, "/huge", O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(mapfs_ftruncate(fs, fd, 4096), 0);
  ASSERT_EQ(mapfs_close(fs, fd), 0);
  ASSERT_EQ(mapfs_unlink(fs, "/huge"), 0);
  const uint64_t visited = map::HashFsMapper::slots_visited() - before;
  // Three whole-file walks (stat; truncation: zero, unmap), each at most one
  // sweep; a probe per block of the size would be 2^22 per walk.
  EXPECT_LT(visited, 20 * area_blocks) << "the walks probed per block of the size";
  ASSERT_EQ(mapfs_unmount(fs), 0);
  FS_EXPECT_CLEAN(tp.path());
}

}  // namespace
}  // namespace mapfs::fstest
