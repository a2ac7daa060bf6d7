// Extent tree specifics: leaf and internal splits up to a third level,
// removals that merge nodes and lower the root, extents merged on append,
// the cursor, and damage Check() must find.
#include <gtest/gtest.h>

#include "map/extent_tree.h"
#include "map_test_util.h"

namespace mapfs::map {
namespace {

using testing::Rng;

class ExtentTest : public ::testing::Test {
 protected:
  void Open(uint64_t area_len, uint64_t pool_size = 48 * MiB) {
    mp_ = std::make_unique<MapPool>(area_len, pool_size);
    FormatOptions opt;
    opt.kind = Kind::kExtent;
    opt.max_ino = 16;
    ASSERT_TRUE(mp_->Format(opt).ok());
    ASSERT_TRUE(mp_->OpenMapper().ok());
    em_ = dynamic_cast<ExtentMapper*>(mp_->m());
    ASSERT_NE(em_, nullptr);
  }
  Mapper* m() { return mp_->m(); }
  format::RootRecord* roots() {
    auto* h = reinterpret_cast<format::MapHeader*>(mp_->area());
    return reinterpret_cast<format::RootRecord*>(mp_->area() + h->roots_off);
  }
  char* node(uint64_t blk) { return m()->block_ptr(Block(blk)); }
  std::unique_ptr<MapPool> mp_;
  ExtentMapper* em_ = nullptr;
};

TEST_F(ExtentTest, AppendsMergeIntoOneExtent) {
  Open(4 * MiB);
  Cursor c;
  for (uint64_t f = 0; f < 300; f += 3) ASSERT_TRUE(m()->Insert(&c, 1, FileBlock(f), 3).ok());
  Mapping mp;
  Cursor r;
  ASSERT_EQ(m()->Lookup(&r, 1, FileBlock(0), &mp), 0);
  EXPECT_EQ(mp.len, 300u) << "300 appended blocks in a row should be one extent";
  EXPECT_EQ(em_->height(1), 1u);
  EXPECT_EQ(m()->usage().node_blocks, 1u);
}

TEST_F(ExtentTest, SplitsGrowThreeLevelsAndRemovalsMergeThemBack) {
  // Alternate file blocks cannot merge: one extent each. 22,000 extents
  // fill more than 252 half-full leaves, so the root splits twice.
  constexpr uint64_t kExtents = 22000;
  Open(96 * MiB, 128 * MiB);
  Cursor c;
  for (uint64_t i = 0; i < kExtents; i++) {
    Status st = m()->Insert(&c, 2, FileBlock(2 * i), 1);
    ASSERT_TRUE(st.ok()) << i << ": " << Describe(st);
  }
  EXPECT_EQ(em_->height(2), 3u);
  const uint64_t nodes_full = m()->usage().node_blocks;
  EXPECT_GT(nodes_full, 252u);
  for (uint64_t i = 1; i < kExtents; i++) {
    Mapping mp;
    Cursor f;
    ASSERT_EQ(m()->Lookup(&f, 2, FileBlock(2 * i - 1), &mp), 0);
    ASSERT_FALSE(mp.mapped);
    ASSERT_EQ(mp.len, 1u);
    ASSERT_EQ(m()->Lookup(&f, 2, FileBlock(2 * i), &mp), 0);
    ASSERT_TRUE(mp.mapped) << i;
  }
  ASSERT_TRUE(m()->Check().ok()) << Describe(m()->Check());
  // Punch two of every three extents in the first half, one call each:
  // leaves shrink and merge with their neighbours.
  for (uint64_t i = 0; i < kExtents / 2; i++) {
    if (i % 3) {
      ASSERT_TRUE(m()->Remove(&c, 2, FileBlock(2 * i), 1).ok());
    }
  }
  EXPECT_LT(m()->usage().node_blocks, nodes_full * 3 / 4) << "punched leaves were not merged";
  ASSERT_TRUE(m()->Check().ok()) << Describe(m()->Check());
  for (uint64_t i = 0; i < kExtents / 2; i += 7) {
    Mapping mp;
    Cursor f;
    ASSERT_EQ(m()->Lookup(&f, 2, FileBlock(2 * i), &mp), 0);
    ASSERT_EQ(mp.mapped, i % 3 == 0) << i;
  }
  // Truncating most of the file lowers the root; removing the rest frees it.
  ASSERT_TRUE(m()->Remove(&c, 2, FileBlock(200), kToEnd).ok());
  EXPECT_EQ(em_->height(2), 1u);
  EXPECT_EQ(m()->usage().node_blocks, 1u);
  ASSERT_TRUE(m()->Check().ok()) << Describe(m()->Check());
  ASSERT_TRUE(m()->Remove(&c, 2, FileBlock(0), kToEnd).ok());
  EXPECT_EQ(em_->height(2), 0u);
  Usage u = m()->usage();
  EXPECT_EQ(u.node_blocks, 0u);
  EXPECT_EQ(u.used_blocks, 0u);
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
}

// Regression (found by the crash-state enumeration on extent pools,
// ReusedPagesNeverShowDeletedBytes): nodes freed by removals and merges
// kept their extents, and a later Insert handed such a block to a file,
// whose hole then showed tree bytes. Freed nodes are zeroed by the
// transaction that frees them: with nothing mapped, every block is zero.
TEST_F(ExtentTest, FreedNodesReadAsZero) {
  Open(8 * MiB);
  Cursor c;
  for (uint64_t i = 0; i < 1000; i++) ASSERT_TRUE(m()->Insert(&c, 2, FileBlock(2 * i), 1).ok()) << i;
  ASSERT_GE(em_->height(2), 2u);
  ASSERT_GT(m()->usage().node_blocks, 3u);
  for (uint64_t i = 0; i < 1000; i += 3) ASSERT_TRUE(m()->Remove(&c, 2, FileBlock(2 * i), 1).ok()) << i;  // merges
  ASSERT_TRUE(m()->Check().ok()) << Describe(m()->Check());
  ASSERT_TRUE(m()->Remove(&c, 2, FileBlock(0), kToEnd).ok());
  EXPECT_EQ(m()->usage().node_blocks, 0u);
  EXPECT_EQ(FirstNonzeroBlock(m()), -1);
}

TEST_F(ExtentTest, PunchingTheMiddleOfAnExtentSplitsIt) {
  Open(4 * MiB);
  Cursor c;
  ASSERT_TRUE(m()->Insert(&c, 1, FileBlock(0), 100).ok());
  ASSERT_TRUE(m()->Remove(&c, 1, FileBlock(40), 20).ok());
  Mapping mp;
  Cursor r;
  ASSERT_EQ(m()->Lookup(&r, 1, FileBlock(0), &mp), 0);
  EXPECT_EQ(mp.len, 40u);
  const uint64_t first = mp.blk.v;
  ASSERT_EQ(m()->Lookup(&r, 1, FileBlock(40), &mp), 0);
  EXPECT_FALSE(mp.mapped);
  EXPECT_EQ(mp.len, 20u) << "the hole's length is known from the next extent";
  ASSERT_EQ(m()->Lookup(&r, 1, FileBlock(60), &mp), 0);
  EXPECT_EQ(mp.blk.v, first + 60);
  EXPECT_EQ(mp.len, 40u);
  EXPECT_EQ(m()->usage().used_blocks, 80u);
  // The punched blocks are free again: refilling the hole reuses them.
  ASSERT_TRUE(m()->Insert(&c, 1, FileBlock(40), 20).ok());
  ASSERT_EQ(m()->Lookup(&r, 1, FileBlock(0), &mp), 0);
  EXPECT_EQ(mp.len, 100u) << "refilled hole merges back into one extent";
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
}

TEST_F(ExtentTest, DamagedNodesAreFoundAndNeverFollowed) {
  Open(8 * MiB);
  Cursor c;
  for (uint64_t i = 0; i < 400; i++) ASSERT_TRUE(m()->Insert(&c, 5, FileBlock(2 * i), 1).ok());
  ASSERT_EQ(em_->height(5), 2u);
  const uint64_t root_blk = roots()[5].root - 1;
  auto* idx = reinterpret_cast<format::ExtentIndex*>(node(root_blk) + 64);
  const uint64_t leaf = idx[1].child;
  auto* hdr = reinterpret_cast<format::ExtentNodeHeader*>(node(leaf));

  hdr->magic ^= 1;
  Status st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("bad magic"), std::string::npos) << st.message();
  Mapping mp;
  Cursor f;
  EXPECT_EQ(m()->Lookup(&f, 5, FileBlock(idx[1].fblk), &mp), -EUCLEAN);
  EXPECT_EQ(m()->Insert(&c, 5, FileBlock(idx[1].fblk + 1), 1).code(), EUCLEAN);
  hdr->magic ^= 1;

  std::swap(idx[0].fblk, idx[1].fblk);
  st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("out of order"), std::string::npos) << st.message();
  std::swap(idx[0].fblk, idx[1].fblk);

  auto* ext = reinterpret_cast<format::Extent*>(node(leaf) + 64);
  ext[1].fblk = ext[0].fblk;  // two extents at one file block
  st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("overlap"), std::string::npos) << st.message();
  ext[1].fblk = ext[0].fblk + 2;
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
}

}  // namespace
}  // namespace mapfs::map
