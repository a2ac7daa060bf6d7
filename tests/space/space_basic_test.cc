// Space layer basics: each level allocates an aligned partition inside the
// region, LevelOf/Free agree with Alloc, bad frees are refused without side
// effects, and freed partitions come back reading as zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "space_test_util.h"

namespace mapfs::testing {
namespace {

using space::format::LevelSize;

struct Geometry {
  uint64_t pool_size;
  uint32_t top_level;  // 0 = default for the size
};

class SpaceBasicLevels : public ::testing::TestWithParam<Geometry> {};

// Every level 0 .. top-1 at once, then all freed: the region merges back to
// Empty and no pool page stays behind.
TEST_P(SpaceBasicLevels, EachLevelAlignedInsideRegionAndFreed) {
  medium::CreateOptions opt;
  opt.top_level = GetParam().top_level;
  TempPool tp(GetParam().pool_size, opt);
  SPACE_ASSERT_OK(tp.status());
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  auto& sp = m->space();
  const int top = sp.top_level();
  if (GetParam().top_level) {
    EXPECT_EQ(top, static_cast<int>(GetParam().top_level));
  }
  EXPECT_EQ(LevelSize(top), m->vm().size()) << "the top partition is the whole region";
  const uint64_t fresh_used = m->vm().Stats().used_pages;

  Model model;
  // Largest first (the hardest order for a 16 MiB region), then smallest.
  std::vector<int> order;
  for (int l = top - 1; l >= 0; l--) order.push_back(l);
  for (int l = 0; l < top; l++) order.push_back(l);
  for (int level : order) {
    auto r = sp.Alloc(level);
    ASSERT_TRUE(r.ok()) << "Alloc(" << level << "): " << Describe(r);
    uint64_t v = *r;
    EXPECT_EQ(v % LevelSize(level), 0u) << "L" << level << " at " << v;
    EXPECT_LE(v + LevelSize(level), LevelSize(top));
    auto lv = sp.LevelOf(v);
    SPACE_ASSERT_OK(lv);
    EXPECT_EQ(*lv, level);
    EXPECT_TRUE(model.emplace(v, level).second) << "offset handed out twice: " << v;
  }
  EXPECT_EQ(GeometryProblem(model, top), "");
  EXPECT_EQ(CheckedList(sp), model);

  space::SpaceStats s = sp.Stats();
  uint64_t bytes = 0;
  for (auto& [v, l] : model) bytes += LevelSize(l);
  EXPECT_EQ(s.allocated_bytes, bytes);
  for (int l = 0; l < top; l++) EXPECT_EQ(s.allocated[l], 2u) << "level " << l;

  for (auto& [v, l] : model) {
    SPACE_ASSERT_OK(sp.Free(v));
    auto lv = sp.LevelOf(v);
    EXPECT_EQ(lv.status().code(), EINVAL) << "LevelOf a freed partition: " << Describe(lv);
  }
  ExpectAllFree(*m);
  ExpectNoLeak(*m, fresh_used);
}

INSTANTIATE_TEST_SUITE_P(SpaceGeometries, SpaceBasicLevels,
                         ::testing::Values(Geometry{64 * MiB, 4}, Geometry{64 * MiB, 5}, Geometry{256 * MiB, 0},
                                           Geometry{64 * MiB, 11}),
                         [](const auto& info) { return "top" + std::to_string(info.param.top_level); });

TEST(SpaceBasic, LevelOutOfRangeIsRefused) {
  TempPool tp(64 * MiB, SmallRegion());
  SPACE_ASSERT_OK(tp.status());
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  auto& sp = m->space();
  for (int level : {-1, sp.top_level(), sp.top_level() + 1, 100}) {
    auto r = sp.Alloc(level);
    EXPECT_EQ(r.status().code(), EINVAL) << "Alloc(" << level << "): " << Describe(r);
  }
  ExpectAllFree(*m);
}

// One partition of each of L0, L1, L2, L3 (top level 5), plus every kind of
// offset that does not start an allocated partition.
class SpaceBasicFree : public ::testing::Test {
 protected:
  void SetUp() override {
    SPACE_ASSERT_OK(tp_.status());
    m_ = OpenMount(tp_.path());
    ASSERT_TRUE(m_);
    for (int level : {0, 1, 2, 3, 4}) {
      auto r = m_->space().Alloc(level);
      SPACE_ASSERT_OK(r);
      at_[level] = *r;
    }
    before_ = CheckedList(m_->space());
    stats_before_ = m_->space().Stats();
    used_before_ = m_->vm().Stats().used_pages;
  }

  // Free(voff) must fail with EINVAL and leave everything as it was.
  void ExpectRefused(uint64_t voff, const std::string& what) {
    SCOPED_TRACE(what + " (offset " + std::to_string(voff) + ")");
    auto& sp = m_->space();
    Status st = sp.Free(voff);
    EXPECT_EQ(st.code(), EINVAL) << Describe(st);
    EXPECT_EQ(sp.LevelOf(voff).status().code(), EINVAL);
    EXPECT_EQ(CheckedList(sp), before_);
    space::SpaceStats s = sp.Stats();
    EXPECT_EQ(s.allocated, stats_before_.allocated);
    EXPECT_EQ(s.partitioned, stats_before_.partitioned);
    EXPECT_EQ(s.root_mask, stats_before_.root_mask);
    EXPECT_EQ(m_->vm().Stats().used_pages, used_before_);
  }

  TempPool tp_{64 * MiB, SmallRegion(5)};
  std::unique_ptr<Mount> m_;
  std::map<int, uint64_t> at_;
  Model before_;
  space::SpaceStats stats_before_;
  uint64_t used_before_ = 0;
};

TEST_F(SpaceBasicFree, NonAllocatedOffsetsAreRefused) {
  ExpectRefused(0, "the region's first page (headers)");
  // A free L0 slot next to the allocated L0 (same L3, same kind).
  ExpectRefused(at_[0] + LevelSize(0), "free L0 slot");
  // Child 0 of the L3 holding the L0: the header page.
  ExpectRefused(AlignDown(at_[0], LevelSize(3)), "header child of an L3");
  // An L3-aligned offset in a part of the region nothing was split into.
  uint64_t region = LevelSize(5);
  for (uint64_t o = LevelSize(3); o < region; o += LevelSize(3))
    if (Intersecting(before_, o, o + LevelSize(3)) == 0) {
      ExpectRefused(o, "empty L3");
      break;
    }
  ExpectRefused(region, "end of the region");
  ExpectRefused(region + LevelSize(3), "beyond the region");
  ExpectRefused(UINT64_MAX & ~(kPageSize - 1), "far beyond the region");
}

TEST_F(SpaceBasicFree, MisalignedOffsetsAreRefused) {
  for (auto& [level, v] : at_) {
    ExpectRefused(v + 1, "L" + std::to_string(level) + " + 1");
    ExpectRefused(v + 8, "L" + std::to_string(level) + " + 8");
    ExpectRefused(v + 2048, "L" + std::to_string(level) + " + 2048");
    ExpectRefused(v - 1, "L" + std::to_string(level) + " - 1");
  }
}

TEST_F(SpaceBasicFree, OffsetsInsideAPartitionAreRefused) {
  for (auto& [level, v] : at_) {
    for (int inner = 0; inner < level; inner++) {
      // Starts of every smaller level inside the partition: second and last.
      ExpectRefused(v + LevelSize(inner), "L" + std::to_string(level) + " + L" + std::to_string(inner));
      ExpectRefused(v + LevelSize(level) - LevelSize(inner),
                    "L" + std::to_string(level) + " end - L" + std::to_string(inner));
    }
  }
}

TEST_F(SpaceBasicFree, DoubleFreeIsRefusedAndOthersSurvive) {
  auto& sp = m_->space();
  for (auto& [level, v] : at_) {
    SPACE_ASSERT_OK(sp.Free(v));
    before_.erase(v);
    stats_before_ = sp.Stats();
    used_before_ = m_->vm().Stats().used_pages;
    ExpectRefused(v, "second free of L" + std::to_string(level));
    for (auto& [u, l] : before_) {
      auto lv = sp.LevelOf(u);
      SPACE_EXPECT_OK(lv);
      EXPECT_EQ(*lv, l);
    }
  }
  ExpectAllFree(*m_);
}

// The kind field of an L3 header (the level of its children) comes from the
// pool. A damaged one is reported as EUCLEAN by every entry point, and none
// of them shifts, indexes or frees by it (a pool fuzzer found a shift by 765
// in Reconcile).
TEST_F(SpaceBasicFree, DamagedL3KindIsReportedNeverUsed) {
  auto& sp = m_->space();
  uint64_t l0 = at_[0];
  uint64_t node = l0 & ~(LevelSize(3) - 1);
  auto* w0 = reinterpret_cast<uint64_t*>(m_->vm().PoolPtr(node + space::format::HeaderOffset(3)));
  ASSERT_NE(w0, nullptr);
  ASSERT_EQ(*w0 & 0xffff, 0u) << "the L0 partition's L3 header should have kind 0";
  const uint64_t good = *w0;
  for (uint64_t bad : {uint64_t{3}, uint64_t{255}, uint64_t{0xffff}}) {
    SCOPED_TRACE("kind " + std::to_string(bad));
    *w0 = (good & ~uint64_t{0xffff}) | bad;
    EXPECT_EQ(sp.Check(nullptr).code(), EUCLEAN);
    EXPECT_EQ(sp.Reconcile().code(), EUCLEAN);
    EXPECT_EQ(sp.Free(l0).code(), EUCLEAN);
    EXPECT_EQ(sp.LevelOf(l0).status().code(), EUCLEAN);
    space::SpaceStats s = sp.Stats();  // must not index allocated[] by the kind
    EXPECT_EQ(s.allocated[0], stats_before_.allocated[0] - 1) << "the damaged node's children are not counted";
  }
  *w0 = good;
  EXPECT_EQ(CheckedList(sp), before_) << "the failed calls changed nothing";
  SPACE_EXPECT_OK(sp.Free(l0));
}

// Data written into a small partition never shows up in the next partition
// handed out at that offset; neighbours keep their data.
TEST(SpaceBasic, FreedPartitionsReadAsZero) {
  TempPool tp(64 * MiB, SmallRegion(5));
  SPACE_ASSERT_OK(tp.status());
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  auto& sp = m->space();
  auto& vm = m->vm();
  for (int level : {0, 1, 2, 3, 4}) {
    SCOPED_TRACE("level " + std::to_string(level));
    uint64_t size = LevelSize(level);
    auto a = sp.Alloc(level), b = sp.Alloc(level);
    SPACE_ASSERT_OK(a);
    SPACE_ASSERT_OK(b);
    for (uint64_t v : {*a, *b}) {
      ASSERT_TRUE(ReadsZero(vm, v, size)) << "fresh partition at " << v << " is not zero";
      SPACE_ASSERT_OK(vm.Populate(v, size));
      std::memset(vm.at(v), 0xA5, size);
    }
    Stamp(vm, *b, size, 0xB0B);
    SPACE_ASSERT_OK(sp.Free(*a));
    EXPECT_TRUE(StampIntact(vm, *b, size, 0xB0B)) << "freeing a neighbour changed a partition";
    // Allocate until the freed offset comes back; every partition handed
    // out on the way must read as zero too.
    std::vector<uint64_t> held;
    bool again = false;
    for (int i = 0; i < 600 && !again; i++) {
      auto r = sp.Alloc(level);
      if (!r.ok()) break;
      EXPECT_TRUE(ReadsZero(vm, *r, size)) << "partition at " << *r << " handed out dirty";
      again = *r == *a;
      held.push_back(*r);
    }
    ASSERT_TRUE(again) << "the freed partition never came back";
    SPACE_ASSERT_OK(vm.Populate(*a, size));
    const char* p = vm.at(*a);
    EXPECT_TRUE(std::all_of(p, p + size, [](char c) { return c == 0; })) << "old bytes visible through vm";
    EXPECT_TRUE(StampIntact(vm, *b, size, 0xB0B));
    for (uint64_t v : held) SPACE_ASSERT_OK(sp.Free(v));
    SPACE_ASSERT_OK(sp.Free(*b));
    SPACE_ASSERT_OK(sp.Check());
  }
  ExpectAllFree(*m);
}

}  // namespace
}  // namespace mapfs::testing
