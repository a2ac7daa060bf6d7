// Persistence: the allocated set survives closing and reopening the pool,
// cleanly or not, and the reopened allocator keeps working on it.
#include <gtest/gtest.h>

#include "space_test_util.h"

namespace mapfs::testing {
namespace {

using space::format::LevelSize;

struct Saved {
  Model model;
  std::map<uint64_t, uint64_t> tags;  // stamped small partitions
  uint64_t used_pages = 0;
  space::SpaceStats stats;
};

// A mixed set with holes (some partitions freed again), small ones stamped.
Saved Populate(Mount& m, uint64_t seed) {
  Saved s;
  auto& sp = m.space();
  Rng rng(seed);
  std::vector<uint64_t> order;
  for (int i = 0; i < 300; i++) {
    int level = static_cast<int>(rng.Below(100) < 85 ? rng.Below(3) : 3 + rng.Below(sp.top_level() - 3));
    auto r = sp.Alloc(level);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), ENOSPC) << Describe(r);
      EXPECT_FALSE(CertainlyAvailable(s.model, level, sp.top_level()));
      continue;
    }
    s.model.emplace(*r, level);
    order.push_back(*r);
    if (level < 3) {
      uint64_t tag = rng.Next();
      EXPECT_TRUE(m.vm().Populate(*r, LevelSize(level)).ok());
      Stamp(m.vm(), *r, LevelSize(level), tag);
      s.tags[*r] = tag;
    }
  }
  for (int i = 0; i < 100; i++) {
    uint64_t v = order[rng.Below(order.size())];
    if (!s.model.count(v)) continue;
    EXPECT_TRUE(sp.Free(v).ok());
    s.model.erase(v);
    s.tags.erase(v);
  }
  s.used_pages = m.vm().Stats().used_pages;
  s.stats = sp.Stats();
  return s;
}

void ExpectSameAfterReopen(Mount& m, const Saved& s) {
  auto& sp = m.space();
  EXPECT_EQ(CheckedList(sp), s.model);
  for (auto& [v, l] : s.model) {
    auto lv = sp.LevelOf(v);
    EXPECT_TRUE(lv.ok() && *lv == l) << "LevelOf(" << v << "): " << Describe(lv);
  }
  space::SpaceStats st = sp.Stats();
  EXPECT_EQ(st.allocated, s.stats.allocated);
  EXPECT_EQ(st.partitioned, s.stats.partitioned);
  EXPECT_EQ(st.root_mask, s.stats.root_mask);
  EXPECT_EQ(m.vm().Stats().used_pages, s.used_pages) << "reopening changed the pool's page usage";
  for (auto& [v, tag] : s.tags) {
    SPACE_EXPECT_OK(m.vm().Populate(v, LevelSize(s.model.at(v))));
    EXPECT_TRUE(StampIntact(m.vm(), v, LevelSize(s.model.at(v)), tag)) << "data of the partition at " << v;
  }
}

// Keeps using the reopened allocator: new partitions avoid the old ones,
// then everything frees back to an Empty region without leaks.
void ExpectUsableThenDrain(Mount& m, Model model, uint64_t fresh_used) {
  auto& sp = m.space();
  for (int level = 0; level < sp.top_level(); level++) {
    auto r = sp.Alloc(level);
    if (!r.ok() && !CertainlyAvailable(model, level, sp.top_level())) continue;
    SPACE_ASSERT_OK(r);
    EXPECT_EQ(Intersecting(model, *r, *r + LevelSize(level)), 0u) << "reopened allocator reused a held offset";
    model.emplace(*r, level);
  }
  EXPECT_EQ(GeometryProblem(model, sp.top_level()), "");
  EXPECT_EQ(CheckedList(sp), model);
  for (auto& [v, l] : model) SPACE_ASSERT_OK(sp.Free(v));
  ExpectAllFree(m);
  ExpectNoLeak(m, fresh_used);
}

class SpacePersist : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SpacePersist, CleanCloseAndReopen) {
  TempPool tp(256 * MiB, SmallRegion(GetParam()));
  SPACE_ASSERT_OK(tp.status());
  uint64_t fresh_used;
  Saved s;
  {
    auto m = OpenMount(tp.path());
    ASSERT_TRUE(m);
    fresh_used = m->vm().Stats().used_pages;
    s = Populate(*m, 11);
    ASSERT_FALSE(HasFailure());
    SPACE_ASSERT_OK(m->Close());
  }
  for (int round = 0; round < 2; round++) {
    auto m = OpenMount(tp.path());
    ASSERT_TRUE(m);
    EXPECT_FALSE(m->recovered()) << "a cleanly closed pool needed recovery";
    ExpectSameAfterReopen(*m, s);
  }
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  ExpectUsableThenDrain(*m, s.model, fresh_used);
  SPACE_ASSERT_OK(m->Close());
  // The drained state persists too.
  m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  ExpectAllFree(*m);
}

// The process "dies" without closing: recovery runs and must neither lose
// nor invent partitions, nor drop a page that backs one.
TEST_P(SpacePersist, AbandonAndRecover) {
  TempPool tp(256 * MiB, SmallRegion(GetParam()));
  SPACE_ASSERT_OK(tp.status());
  uint64_t fresh_used;
  Saved s;
  {
    auto m = OpenMount(tp.path());
    ASSERT_TRUE(m);
    fresh_used = m->vm().Stats().used_pages;
    s = Populate(*m, 12);
    ASSERT_FALSE(HasFailure());
    m->Abandon();
  }
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->recovered());
  SPACE_EXPECT_OK(m->vm().Check(/*strict=*/true));
  ExpectSameAfterReopen(*m, s);
  ExpectUsableThenDrain(*m, s.model, fresh_used);
}

INSTANTIATE_TEST_SUITE_P(SpaceTopLevels, SpacePersist, ::testing::Values(4u, 6u),
                         [](const auto& i) { return "top" + std::to_string(i.param); });

}  // namespace
}  // namespace mapfs::testing
