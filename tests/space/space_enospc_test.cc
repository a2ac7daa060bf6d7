// ENOSPC: filling the region (or the pool) fails cleanly — the exact number
// of partitions the format promises fit, the failure changes nothing, and
// freeing one partition makes room for exactly one more.
#include <gtest/gtest.h>

#include "space_test_util.h"

namespace mapfs::testing {
namespace {

using space::format::LevelSize;

// Snapshot of everything a failed Alloc must leave alone.
struct Snapshot {
  Model list;
  space::SpaceStats stats;
  uint64_t used_pages;
};
Snapshot Take(Mount& m) { return {CheckedList(m.space()), m.space().Stats(), m.vm().Stats().used_pages}; }
void ExpectSame(const Snapshot& a, const Snapshot& b) {
  EXPECT_EQ(a.list, b.list);
  EXPECT_EQ(a.stats.allocated, b.stats.allocated);
  EXPECT_EQ(a.stats.partitioned, b.stats.partitioned);
  EXPECT_EQ(a.stats.root_mask, b.stats.root_mask);
  EXPECT_EQ(a.used_pages, b.used_pages) << "a failed Alloc changed the pool's page usage";
}

// Allocates `level` until it fails; returns what it got and the failure.
std::vector<uint64_t> Fill(space::Partitions& sp, int level, Status* failure, size_t limit = 100000) {
  std::vector<uint64_t> got;
  for (size_t i = 0; i < limit; i++) {
    auto r = sp.Alloc(level);
    if (!r.ok()) {
      *failure = r.status();
      return got;
    }
    got.push_back(*r);
  }
  *failure = Status::Ok();
  return got;
}

class SpaceEnospcRegion : public ::testing::TestWithParam<int> {};

// 16 MiB region = 8 L3s. Child 0 of each L3 holds its header, so each L3
// offers 511 L0 / 63 L1 / 7 L2; L3 itself fits in the 7 L3s that are not the
// root's first child.
TEST_P(SpaceEnospcRegion, FillFreeOneRefill) {
  const int level = GetParam();
  TempPool tp(64 * MiB, SmallRegion(4));
  SPACE_ASSERT_OK(tp.status());
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  auto& sp = m->space();
  const uint64_t fresh_used = m->vm().Stats().used_pages;
  ASSERT_TRUE(CertainlyAvailable({}, level, 4));

  Status failure;
  std::vector<uint64_t> got = Fill(sp, level, &failure);
  const uint64_t expect = level < 3 ? 8 * ((512u >> (3 * level)) - 1) : 7;
  EXPECT_EQ(got.size(), expect) << "L" << level << " partitions in a 16 MiB region";
  EXPECT_EQ(failure.code(), ENOSPC) << Describe(failure);
  Model model;
  for (uint64_t v : got) model.emplace(v, level);
  EXPECT_EQ(GeometryProblem(model, 4), "");
  EXPECT_FALSE(CertainlyAvailable(model, level, 4));

  // Failing again changes nothing; nor do failures at other levels that
  // cannot fit either.
  Snapshot full = Take(*m);
  for (int l = 0; l < 4; l++) {
    if (level == 3 && l == 0) continue;  // the root's first L3 still has 511 L0 (below)
    auto r = sp.Alloc(l);
    EXPECT_EQ(r.status().code(), ENOSPC) << "Alloc(" << l << ") on a region full of L" << level << ": "
                                         << Describe(r);
  }
  ExpectSame(full, Take(*m));
  EXPECT_EQ(sp.Stats().availability_level, level == 3 ? 0 : -1);

  // Free one in the middle: exactly that slot comes back, then ENOSPC again.
  uint64_t victim = got[got.size() / 2];
  SPACE_ASSERT_OK(sp.Free(victim));
  EXPECT_TRUE(CertainlyAvailable(CheckedList(sp), level, 4));
  auto again = sp.Alloc(level);
  SPACE_ASSERT_OK(again);
  EXPECT_EQ(*again, victim) << "the only free L" << level << " slot";
  EXPECT_EQ(sp.Alloc(level).status().code(), ENOSPC);
  EXPECT_EQ(CheckedList(sp), model);

  if (level == 3) {
    // The L3 holding the headers of the chain was split into L0 when the
    // first L3 was allocated (kind 0): its other 511 pages remain usable.
    Status f0;
    std::vector<uint64_t> small = Fill(sp, 0, &f0);
    EXPECT_EQ(small.size(), 511u);
    EXPECT_EQ(f0.code(), ENOSPC);
    for (uint64_t v : small) EXPECT_LT(v, LevelSize(3));
    for (uint64_t v : small) SPACE_ASSERT_OK(sp.Free(v));
  }

  for (uint64_t v : got) SPACE_ASSERT_OK(sp.Free(v));
  ExpectAllFree(*m);
  ExpectNoLeak(*m, fresh_used);
}

INSTANTIATE_TEST_SUITE_P(SpaceLevels, SpaceEnospcRegion, ::testing::Values(0, 1, 2, 3),
                         [](const auto& i) { return "L" + std::to_string(i.param); });

// Smaller levels fill what larger ones leave: after the region is full of L3
// except one, that one L3 takes exactly 7 L2 (a fresh split) and no more.
TEST(SpaceEnospc, MixedLevelsShareTheRegion) {
  TempPool tp(64 * MiB, SmallRegion(4));
  SPACE_ASSERT_OK(tp.status());
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  auto& sp = m->space();
  std::vector<uint64_t> big;
  for (int i = 0; i < 6; i++) {
    auto r = sp.Alloc(3);
    SPACE_ASSERT_OK(r);
    big.push_back(*r);
  }
  Status f;
  std::vector<uint64_t> l2 = Fill(sp, 2, &f);
  EXPECT_EQ(f.code(), ENOSPC);
  EXPECT_EQ(l2.size(), 7u) << "one free L3 holds 7 L2";
  EXPECT_EQ(sp.Alloc(3).status().code(), ENOSPC);
  EXPECT_EQ(sp.Alloc(1).status().code(), ENOSPC);
  // Freeing every L2 merges that L3 back: an L3 fits again.
  for (uint64_t v : l2) SPACE_ASSERT_OK(sp.Free(v));
  auto r = sp.Alloc(3);
  SPACE_ASSERT_OK(r);
  big.push_back(*r);
  EXPECT_EQ(GeometryProblem(CheckedList(sp), 4), "");
  for (uint64_t v : big) SPACE_ASSERT_OK(sp.Free(v));
  ExpectAllFree(*m);
}

// The pool, not the region, runs out: every new L3 split needs a 2 MiB
// chunk for its header page. The failure must be a clean ENOSPC that leaks
// no page, and freeing a whole L3 must make the next split possible.
TEST(SpaceEnospc, PoolPagesRunOut) {
  TempPool tp(16 * MiB);  // the smallest pool; its region (L5) is far larger
  SPACE_ASSERT_OK(tp.status());
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  auto& sp = m->space();
  const int top = sp.top_level();
  const uint64_t fresh_used = m->vm().Stats().used_pages;

  Status failure;
  std::vector<uint64_t> got = Fill(sp, 2, &failure);
  ASSERT_EQ(failure.code(), ENOSPC) << Describe(failure);
  ASSERT_GT(got.size(), 7u);
  Model model;
  for (uint64_t v : got) model.emplace(v, 2);
  EXPECT_TRUE(CertainlyAvailable(model, 2, top)) << "the region should still have room; the pool is what is full";
  EXPECT_EQ(GeometryProblem(model, top), "");
  EXPECT_EQ(m->vm().Stats().free_chunks, 0u);

  Snapshot full = Take(*m);
  for (int i = 0; i < 3; i++) EXPECT_EQ(sp.Alloc(2).status().code(), ENOSPC);
  ExpectSame(full, Take(*m));
  SPACE_EXPECT_OK(m->vm().Check(/*strict=*/true));

  // Free every L2 of the last L3 that was split (not the root's first one):
  // its chunk returns to the pool and a new split succeeds.
  uint64_t l3 = AlignDown(got.back(), LevelSize(3));
  ASSERT_NE(l3 % LevelSize(4), 0u);
  std::vector<uint64_t> keep;
  for (uint64_t v : got) {
    if (AlignDown(v, LevelSize(3)) == l3)
      SPACE_ASSERT_OK(sp.Free(v));
    else
      keep.push_back(v);
  }
  EXPECT_GT(m->vm().Stats().free_chunks, 0u);
  std::vector<uint64_t> more = Fill(sp, 2, &failure);
  EXPECT_EQ(failure.code(), ENOSPC);
  EXPECT_EQ(more.size(), 7u);
  for (uint64_t v : more) keep.push_back(v);
  for (uint64_t v : keep) SPACE_ASSERT_OK(sp.Free(v));
  ExpectAllFree(*m);
  ExpectNoLeak(*m, fresh_used);
}

}  // namespace
}  // namespace mapfs::testing
