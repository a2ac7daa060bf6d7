// Damaged mapping areas: random bytes of the header, tables, roots, bitmap
// and tree nodes are flipped; opening, Check(), lookups, inserts and removals
// must return (an error or a value), never crash — the sanitizer builds run
// this too. Damage that Check reports is counted, so the test cannot pass by
// never looking.
#include <gtest/gtest.h>

#include <vector>

#include "map_test_util.h"

namespace mapfs::map {
namespace {

using testing::Rng;

class MapDamage : public ::testing::TestWithParam<Kind> {};

TEST_P(MapDamage, AnyDamagedByteGivesAnErrorNeverACrash) {
  MapPool mp(2 * MiB);
  FormatOptions opt;
  opt.kind = GetParam();
  opt.max_ino = 8;
  ASSERT_TRUE(mp.Format(opt).ok());
  ASSERT_TRUE(mp.OpenMapper().ok());
  Mapper* m = mp.m();
  // Files with enough extents for two-level trees, runs and holes.
  Model model;
  Cursor c;
  for (uint64_t i = 0; i < 180; i++) {
    ASSERT_TRUE(m->Insert(&c, 1, FileBlock(2 * i), 1).ok());
    ASSERT_TRUE(model.Add(m, 1, 2 * i, 1));
  }
  ASSERT_TRUE(m->Insert(&c, 2, FileBlock(0), 40).ok());
  ASSERT_TRUE(model.Add(m, 2, 0, 40));
  ASSERT_TRUE(m->Insert(&c, 3, FileBlock(600), 30).ok());
  ASSERT_TRUE(model.Add(m, 3, 600, 30));
  ASSERT_TRUE(m->Remove(&c, 2, FileBlock(10), 5).ok());
  model.Erase(2, 10, 5);
  ASSERT_TRUE(m->Check().ok());

  // Where damage may land: the structures before the block area, and the
  // blocks in use that hold no file data (tree nodes).
  const auto* h = reinterpret_cast<const format::MapHeader*>(mp.area());
  const uint64_t data_off = h->data_off;
  std::vector<uint64_t> node_blocks;
  for (uint64_t b = 0; b < m->nblocks(); b++) {
    if (model.rev.count(b)) continue;
    if (h->bitmap_off) {
      const auto* bm = reinterpret_cast<const uint64_t*>(mp.area() + h->bitmap_off);
      if ((bm[b / 64] >> (b % 64)) & 1) node_blocks.push_back(b);
    }
  }
  if (GetParam() == Kind::kExtent || GetParam() == Kind::kRadix) {
    ASSERT_GE(node_blocks.size(), 3u);
  }
  const std::vector<char> snapshot(mp.area(), mp.area() + mp.area_len());

  Rng rng(static_cast<uint64_t>(GetParam()) * 1000 + 7);
  int refused = 0, found = 0;
  const int rounds = 150;
  for (int round = 0; round < rounds; round++) {
    std::copy(snapshot.begin(), snapshot.end(), mp.area());
    const int flips = 1 + static_cast<int>(rng.Below(4));
    for (int k = 0; k < flips; k++) {
      uint64_t off;
      if (!node_blocks.empty() && rng.Below(2)) {
        off = data_off + node_blocks[rng.Below(node_blocks.size())] * format::kBlockSize + rng.Below(512);
      } else {
        off = rng.Below(data_off);
      }
      mp.area()[off] ^= static_cast<char>(1 + rng.Below(255));
    }
    Status st = mp.OpenMapper();
    if (!st.ok()) {
      EXPECT_EQ(st.code(), EUCLEAN) << Describe(st);
      refused++;
      continue;
    }
    m = mp.m();
    st = m->Check();
    if (!st.ok()) {
      EXPECT_EQ(st.code(), EUCLEAN) << Describe(st);
      EXPECT_NE(st.message().find("mapping"), std::string::npos) << st.message();
      found++;
    }
    // Every call returns; what it returns is not checked (the area is damaged).
    for (Ino ino = 1; ino < 5; ino++) {
      Cursor cur;
      std::vector<uint64_t> out(700);
      (void)m->LookupRange(&cur, ino, FileBlock(0), out.size(), out.data());
      for (uint64_t fb = 0; fb < 700; fb += 13) {
        Mapping mapping;
        (void)m->Lookup(&cur, ino, FileBlock(fb), &mapping);
      }
    }
    Cursor w;
    (void)m->Insert(&w, 4, FileBlock(rng.Below(1000)), 1 + rng.Below(20));
    (void)m->Insert(&w, 1, FileBlock(2 * rng.Below(180) + 1), 1);
    (void)m->Remove(&w, 1 + rng.Below(3), FileBlock(rng.Below(400)), 1 + rng.Below(50));
    (void)m->Remove(&w, 2, FileBlock(rng.Below(40)), kToEnd);
    (void)m->Check();
    (void)m->usage();
  }
  EXPECT_GT(refused + found, rounds / 10) << "almost no damage was noticed";
  GTEST_LOG_(INFO) << ToString(GetParam()) << ": " << refused << " refused at open, " << found
                   << " found by Check, of " << rounds;
}

INSTANTIATE_TEST_SUITE_P(Designs, MapDamage, ::testing::ValuesIn(AllKinds()), KindName);

}  // namespace
}  // namespace mapfs::map
