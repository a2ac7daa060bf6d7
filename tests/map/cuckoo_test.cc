// Cuckoo table specifics: displacement cycles fail cleanly with ENOSPC,
// displacement keeps every key findable, run entries and their narrowing,
// and damage Check() must find.
#include <gtest/gtest.h>

#include "map/cuckoo.h"
#include "map_test_util.h"

namespace mapfs::map {
namespace {

class CuckooTest : public ::testing::Test {
 protected:
  void Open(uint64_t buckets, uint64_t area_len = 2 * MiB) {
    mp_ = std::make_unique<MapPool>(area_len);
    FormatOptions opt;
    opt.kind = Kind::kCuckoo;
    opt.max_ino = 1 << 20;
    opt.cuckoo_buckets = buckets;
    ASSERT_TRUE(mp_->Format(opt).ok());
    ASSERT_TRUE(mp_->OpenMapper().ok());
    cm_ = dynamic_cast<CuckooMapper*>(mp_->m());
    ASSERT_NE(cm_, nullptr);
  }
  Mapper* m() { return mp_->m(); }
  format::CuckooEntry* table() {
    auto* h = reinterpret_cast<format::MapHeader*>(mp_->area());
    return reinterpret_cast<format::CuckooEntry*>(mp_->area() + h->table_off);
  }
  uint64_t* bitmap() {
    auto* h = reinterpret_cast<format::MapHeader*>(mp_->area());
    return reinterpret_cast<uint64_t*>(mp_->area() + h->bitmap_off);
  }
  int64_t IndexOf(uint64_t key) {
    for (uint64_t i = 0; i < uint64_t{cm_->nbuckets()} * format::kCuckooSlots; i++)
      if (table()[i].key == key) return static_cast<int64_t>(i);
    return -1;
  }
  std::unique_ptr<MapPool> mp_;
  CuckooMapper* cm_ = nullptr;
};

TEST_F(CuckooTest, ADisplacementCycleFailsWithEnospcAndChangesNothing) {
  Open(16);
  // Nine keys that all hash to the same two buckets: eight fill them, and
  // every displacement of the ninth leads back into the same two buckets.
  std::vector<Ino> inos;
  std::pair<uint32_t, uint32_t> pair{0, 0};
  for (Ino ino = 1; inos.size() < 9 && ino < (1 << 20); ino++) {
    auto b = cm_->Buckets(format::MakeKey(ino, 0));
    if (inos.empty()) pair = b;
    if (b == pair) inos.push_back(ino);
  }
  ASSERT_EQ(inos.size(), 9u);
  Cursor c;
  for (int i = 0; i < 8; i++) ASSERT_TRUE(m()->Insert(&c, inos[i], FileBlock(0), 1).ok()) << i;
  Status st = m()->Insert(&c, inos[8], FileBlock(0), 1);
  EXPECT_EQ(st.code(), ENOSPC) << Describe(st);
  for (int i = 0; i < 8; i++) {
    Cursor f;
    Mapping mp;
    ASSERT_EQ(m()->Lookup(&f, inos[i], FileBlock(0), &mp), 0);
    EXPECT_TRUE(mp.mapped) << "key " << i << " lost by the failed insert";
  }
  Mapping mp;
  ASSERT_EQ(m()->Lookup(&c, inos[8], FileBlock(0), &mp), 0);
  EXPECT_FALSE(mp.mapped);
  EXPECT_EQ(m()->usage().used_blocks, 8u) << "the failed insert kept its block";
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
  // A multi-block insert that hits the cycle leaves none of its blocks.
  st = m()->Insert(&c, inos[8], FileBlock(0), 4);
  EXPECT_EQ(st.code(), ENOSPC);
  EXPECT_EQ(m()->usage().used_blocks, 8u);
}

TEST_F(CuckooTest, DisplacementFillsTheTableAndKeepsEveryKeyFindable) {
  Open(32);  // 128 entries for ~480 blocks: the table is what runs out
  Model model;
  Cursor c;
  Status st;
  for (Ino ino = 1; ino < (1 << 20); ino++) {
    st = m()->Insert(&c, ino, FileBlock(7), 1);
    if (!st.ok()) break;
    ASSERT_TRUE(model.Add(m(), ino, 7, 1));
  }
  EXPECT_EQ(st.code(), ENOSPC);
  EXPECT_GE(model.fwd.size(), 128u * 85 / 100) << "bucketized cuckoo should fill beyond 85 %";
  int displaced = 0;
  for (const auto& [key, blk] : model.fwd) {
    Cursor f;
    Mapping mp;
    ASSERT_EQ(m()->Lookup(&f, key.first, FileBlock(key.second), &mp), 0);
    ASSERT_TRUE(mp.mapped);
    ASSERT_EQ(mp.blk.v, blk);
    int64_t idx = IndexOf(format::MakeKey(key.first, key.second));
    displaced += idx / format::kCuckooSlots != cm_->Buckets(format::MakeKey(key.first, key.second)).first;
  }
  EXPECT_GT(displaced, 0) << "no key ever left its first bucket";
  EXPECT_EQ(m()->usage().used_blocks, model.fwd.size());
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
}

TEST_F(CuckooTest, RunsAreRecordedAndNarrowedByRemoval) {
  Open(0);
  Cursor c;
  ASSERT_TRUE(m()->Insert(&c, 3, FileBlock(0), 100).ok());
  Cursor f;
  Mapping mp;
  ASSERT_EQ(m()->Lookup(&f, 3, FileBlock(0), &mp), 0);
  ASSERT_TRUE(mp.mapped);
  EXPECT_EQ(mp.len, 100u) << "one lookup should return the whole contiguous run";
  const uint64_t first = mp.blk.v;
  ASSERT_TRUE(m()->Remove(&c, 3, FileBlock(50), 10).ok());
  Cursor g;
  ASSERT_EQ(m()->Lookup(&g, 3, FileBlock(0), &mp), 0);
  EXPECT_EQ(mp.len, 50u) << "the run was not narrowed at the hole";
  ASSERT_EQ(m()->Lookup(&g, 3, FileBlock(45), &mp), 0);
  EXPECT_EQ(mp.len, 5u);
  ASSERT_EQ(m()->Lookup(&g, 3, FileBlock(60), &mp), 0);
  EXPECT_EQ(mp.blk.v, first + 60);
  EXPECT_EQ(mp.len, 40u);
  // An append continues the run physically where the blocks are free.
  ASSERT_TRUE(m()->Insert(&c, 3, FileBlock(100), 20).ok());
  ASSERT_EQ(m()->Lookup(&g, 3, FileBlock(100), &mp), 0);
  EXPECT_EQ(mp.blk.v, first + 100);
  EXPECT_EQ(mp.len, 20u);
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
  // Truncation inside the appended part narrows the old entries too.
  ASSERT_TRUE(m()->Remove(&c, 3, FileBlock(110), kToEnd).ok());
  Cursor h;
  ASSERT_EQ(m()->Lookup(&h, 3, FileBlock(100), &mp), 0);
  EXPECT_EQ(mp.len, 10u);
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
}

TEST_F(CuckooTest, CheckFindsDamage) {
  Open(0);
  Cursor c;
  ASSERT_TRUE(m()->Insert(&c, 3, FileBlock(0), 8).ok());
  ASSERT_TRUE(m()->Check().ok());
  int64_t i0 = IndexOf(format::MakeKey(3, 0));
  ASSERT_GE(i0, 0);
  format::CuckooEntry saved = table()[i0];

  table()[i0].value = format::CuckooValue(format::ValueBlock(saved.value), 30, 0);  // run past the file
  Status st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("claims blocks"), std::string::npos) << st.message();
  table()[i0] = saved;

  uint64_t blk = format::ValueBlock(saved.value);
  bitmap()[blk / 64] &= ~(uint64_t{1} << (blk % 64));  // mapped but free
  st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("free in the bitmap"), std::string::npos) << st.message();
  bitmap()[blk / 64] |= uint64_t{1} << (blk % 64);

  const uint64_t spare = m()->nblocks() - 1;
  bitmap()[spare / 64] |= uint64_t{1} << (spare % 64);  // in use, mapped by nobody
  st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("not mapped"), std::string::npos) << st.message();
  bitmap()[spare / 64] &= ~(uint64_t{1} << (spare % 64));

  // The key moved to a bucket that is neither of its own.
  auto [b1, b2] = cm_->Buckets(saved.key);
  uint32_t other = 0;
  while (other == b1 || other == b2) other++;
  table()[i0] = {0, 0};
  table()[uint64_t{other} * format::kCuckooSlots + 3] = saved;
  st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("neither of its buckets"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mapfs::map
