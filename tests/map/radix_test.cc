// Radix tree specifics: it grows and shrinks in levels, its nodes are
// freed, the cursor serves a leaf without a walk, and damage is found.
#include <gtest/gtest.h>

#include "map/radix_tree.h"
#include "map_test_util.h"

namespace mapfs::map {
namespace {

class RadixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mp_ = std::make_unique<MapPool>(4 * MiB);
    FormatOptions opt;
    opt.kind = Kind::kRadix;
    opt.max_ino = 16;
    ASSERT_TRUE(mp_->Format(opt).ok());
    ASSERT_TRUE(mp_->OpenMapper().ok());
    rm_ = dynamic_cast<RadixMapper*>(mp_->m());
    ASSERT_NE(rm_, nullptr);
  }
  Mapper* m() { return mp_->m(); }
  format::RootRecord* roots() {
    auto* h = reinterpret_cast<format::MapHeader*>(mp_->area());
    return reinterpret_cast<format::RootRecord*>(mp_->area() + h->roots_off);
  }
  std::unique_ptr<MapPool> mp_;
  RadixMapper* rm_ = nullptr;
};

TEST_F(RadixTest, GrowsAndShrinksInLevels) {
  Cursor c;
  ASSERT_TRUE(m()->Insert(&c, 2, FileBlock(0), 3).ok());
  EXPECT_EQ(rm_->height(2), 1u);
  EXPECT_EQ(m()->usage().node_blocks, 1u);
  ASSERT_TRUE(m()->Insert(&c, 2, FileBlock(512), 1).ok());
  EXPECT_EQ(rm_->height(2), 2u);
  EXPECT_EQ(m()->usage().node_blocks, 3u);  // new root, old leaf, new leaf
  ASSERT_TRUE(m()->Insert(&c, 2, FileBlock(512 * 512 + 7), 1).ok());
  EXPECT_EQ(rm_->height(2), 3u);
  EXPECT_EQ(m()->usage().node_blocks, 6u);  // + root, middle node, leaf
  ASSERT_TRUE(m()->Check().ok()) << Describe(m()->Check());
  Mapping mp;
  ASSERT_EQ(m()->Lookup(&c, 2, FileBlock(1), &mp), 0);
  EXPECT_TRUE(mp.mapped);
  EXPECT_EQ(mp.len, 2u);

  ASSERT_TRUE(m()->Remove(&c, 2, FileBlock(512 * 512), kToEnd).ok());
  EXPECT_EQ(rm_->height(2), 2u);
  EXPECT_EQ(m()->usage().node_blocks, 3u);
  ASSERT_TRUE(m()->Remove(&c, 2, FileBlock(512), 1).ok());
  EXPECT_EQ(rm_->height(2), 1u);
  EXPECT_EQ(m()->usage().node_blocks, 1u);
  ASSERT_EQ(m()->Lookup(&c, 2, FileBlock(2), &mp), 0);
  EXPECT_TRUE(mp.mapped);
  ASSERT_TRUE(m()->Remove(&c, 2, FileBlock(0), kToEnd).ok());
  EXPECT_EQ(rm_->height(2), 0u);
  Usage u = m()->usage();
  EXPECT_EQ(u.node_blocks, 0u);
  EXPECT_EQ(u.used_blocks, 0u);
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
}

// Regression: lowering the tree freed the old root with its pointer to
// child 0 still in it, and a later Insert could hand that block to a file
// (free blocks must read as zero). The pointer is cleared in the same
// transaction: with nothing mapped, every block is zero.
TEST_F(RadixTest, FreedNodesReadAsZero) {
  Cursor c;
  ASSERT_TRUE(m()->Insert(&c, 2, FileBlock(0), 1).ok());
  ASSERT_TRUE(m()->Insert(&c, 2, FileBlock(512 * 512 + 7), 1).ok());
  ASSERT_EQ(rm_->height(2), 3u);
  ASSERT_TRUE(m()->Remove(&c, 2, FileBlock(512 * 512), kToEnd).ok());
  EXPECT_EQ(rm_->height(2), 1u);  // lowered twice: two roots freed
  ASSERT_TRUE(m()->Remove(&c, 2, FileBlock(0), kToEnd).ok());
  EXPECT_EQ(m()->usage().node_blocks, 0u);
  EXPECT_EQ(FirstNonzeroBlock(m()), -1);
}

TEST_F(RadixTest, TheCursorKeepsTheLeafAndARemovalDropsIt) {
  Cursor c;
  ASSERT_TRUE(m()->Insert(&c, 4, FileBlock(1000), 40).ok());
  Cursor r;
  Mapping mp;
  ASSERT_EQ(m()->Lookup(&r, 4, FileBlock(1000), &mp), 0);
  EXPECT_NE(r.leaf, 0u);
  EXPECT_EQ(r.leaf_lo, 512u);
  EXPECT_EQ(r.leaf_hi, 1024u);
  Cursor other;
  ASSERT_TRUE(m()->Remove(&other, 4, FileBlock(0), kToEnd).ok());
  ASSERT_EQ(m()->Lookup(&r, 4, FileBlock(1001), &mp), 0);
  EXPECT_FALSE(mp.mapped) << "a stale cursor served a freed leaf";
}

TEST_F(RadixTest, DamagedPointersAreFoundAndNeverFollowed) {
  Cursor c;
  ASSERT_TRUE(m()->Insert(&c, 3, FileBlock(0), 10).ok());
  ASSERT_TRUE(m()->Insert(&c, 3, FileBlock(600), 1).ok());  // height 2
  uint64_t root_blk = roots()[3].root - 1;
  uint64_t* root_node = reinterpret_cast<uint64_t*>(m()->block_ptr(Block(root_blk)));
  uint64_t saved = root_node[1];
  root_node[1] = m()->nblocks() + 5;  // a pointer past the block area
  Status st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("outside the block area"), std::string::npos) << st.message();
  Cursor f;
  Mapping mp;
  EXPECT_EQ(m()->Lookup(&f, 3, FileBlock(600), &mp), -EUCLEAN);
  root_node[1] = root_node[0];  // two parents for one leaf
  st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("twice"), std::string::npos) << st.message();
  root_node[1] = saved;
  roots()[3].height = 9;
  st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_EQ(m()->Lookup(&f, 3, FileBlock(0), &mp), -EUCLEAN);
}

}  // namespace
}  // namespace mapfs::map
