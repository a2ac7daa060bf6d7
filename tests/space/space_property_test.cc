// Property test: random alloc/free sequences against a model.
//
// The model is the set of partitions the test holds. After every operation:
// a new partition is aligned, inside the region, overlaps nothing held, is
// never a first child (header page), and reads as zero; a failed Alloc is
// ENOSPC and justified by the model (CertainlyAvailable). Every few
// operations the allocator's Check (which recomputes every stored
// availability mask) must pass and list exactly the model, and Stats must
// count it. Data written into held partitions must survive every other
// operation (headers are never written into a partition someone holds).
// At the end everything is freed: the top partition merges back to Empty and
// no pool page stays behind.
#include <gtest/gtest.h>

#include <array>

#include "space_test_util.h"

namespace mapfs::testing {
namespace {

using space::format::LevelSize;

struct PropertyParam {
  uint64_t seed;
  uint64_t pool_size;
  uint32_t top_level;
  int ops;
};

void PrintTo(const PropertyParam& p, std::ostream* os) {
  *os << "seed " << p.seed << ", pool " << p.pool_size / MiB << " MiB, top level " << p.top_level << ", " << p.ops
      << " ops";
}

std::string Name(const ::testing::TestParamInfo<PropertyParam>& i) {
  return "top" + std::to_string(i.param.top_level) + "_seed" + std::to_string(i.param.seed);
}

struct Held {
  int level;
  uint64_t tag;
};

// Bytes checked and stamped in a partition: all of a small one (first and
// last word of each page), the first page of a large one (so stamping does
// not exhaust the pool).
uint64_t StampLen(int level) { return level < 3 ? LevelSize(level) : kPageSize; }

class SpaceProperty : public ::testing::TestWithParam<PropertyParam> {};

TEST_P(SpaceProperty, RandomAllocFreeMatchesModel) {
  const PropertyParam& P = GetParam();
  SCOPED_TRACE("seed " + std::to_string(P.seed));
  medium::CreateOptions opt;
  opt.top_level = P.top_level;
  TempPool tp(P.pool_size, opt);
  SPACE_ASSERT_OK(tp.status());
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  auto& sp = m->space();
  auto& vm = m->vm();
  const int top = sp.top_level();
  const uint64_t fresh_used = vm.Stats().used_pages;
  Rng rng(P.seed);

  std::map<uint64_t, Held> held;
  auto model = [&] {
    Model mm;
    for (auto& [v, h] : held) mm.emplace(v, h.level);
    return mm;
  };
  // Level weights halve with each level: mostly small partitions.
  auto pick_level = [&] {
    int max = top - 1;
    uint64_t total = (uint64_t{1} << (max + 1)) - 1;
    uint64_t r = rng.Below(total);
    int level = 0;
    for (uint64_t w = uint64_t{1} << max; r >= w && level < max; w >>= 1) {
      r -= w;
      level++;
    }
    return level;
  };
  auto verify = [&](int op) {
    SCOPED_TRACE("checkpoint after op " + std::to_string(op));
    Model mm = model();
    ASSERT_EQ(CheckedList(sp), mm);
    ASSERT_EQ(GeometryProblem(mm, top), "");
    space::SpaceStats s = sp.Stats();
    std::array<uint64_t, space::format::kMaxLevel + 1> count{};
    uint64_t bytes = 0;
    for (auto& [v, l] : mm) {
      count[l]++;
      bytes += LevelSize(l);
    }
    EXPECT_EQ(s.allocated, count);
    EXPECT_EQ(s.allocated_bytes, bytes);
  };

  uint64_t enospc = 0, allocs = 0, frees = 0;
  for (int op = 0; op < P.ops; op++) {
    // Phases of 400 ops that mostly grow, then mostly shrink.
    bool growing = (op / 400) % 2 == 0;
    bool do_alloc = held.empty() || rng.Below(100) < (growing ? 75u : 30u);
    if (do_alloc) {
      int level = pick_level();
      auto r = sp.Alloc(level);
      if (!r.ok()) {
        ASSERT_EQ(r.status().code(), ENOSPC) << "op " << op << " Alloc(" << level << "): " << Describe(r);
        ASSERT_FALSE(CertainlyAvailable(model(), level, top))
            << "op " << op << ": spurious ENOSPC for L" << level << ": " << Describe(r);
        ASSERT_GT(vm.Stats().free_chunks, 0u) << "the test exhausted the pool; make it larger";
        EXPECT_EQ(sp.Stats().root_mask & (1u << level), 0u) << "ENOSPC while the root says L" << level << " fits";
        enospc++;
        continue;
      }
      uint64_t v = *r, size = LevelSize(level);
      ASSERT_EQ(v % size, 0u) << "op " << op << ": L" << level << " at " << v << " misaligned";
      ASSERT_LE(v + size, LevelSize(top)) << "op " << op;
      ASSERT_EQ(Intersecting(model(), v, v + size), 0u)
          << "op " << op << ": L" << level << " at " << v << " overlaps a held partition";
      auto lv = sp.LevelOf(v);
      ASSERT_TRUE(lv.ok() && *lv == level) << "op " << op << ": LevelOf " << Describe(lv);
      ASSERT_TRUE(ReadsZero(vm, v, size))
          << "op " << op << ": new L" << level << " at " << v << " is not zero";
      uint64_t tag = rng.Next();
      SPACE_ASSERT_OK(vm.Populate(v, StampLen(level)));
      Stamp(vm, v, StampLen(level), tag);
      held.emplace(v, Held{level, tag});
      allocs++;
    } else {
      auto it = held.begin();
      std::advance(it, static_cast<long>(rng.Below(held.size())));
      uint64_t v = it->first;
      ASSERT_TRUE(StampIntact(vm, v, StampLen(it->second.level), it->second.tag))
          << "op " << op << ": data of the L" << it->second.level << " at " << v << " changed while held";
      SPACE_ASSERT_OK(sp.Free(v));
      ASSERT_EQ(sp.LevelOf(v).status().code(), EINVAL) << "op " << op;
      held.erase(it);
      frees++;
    }
    if (op % 97 == 0) {
      verify(op);
      if (HasFatalFailure()) return;
    }
  }
  verify(P.ops);
  // The runs must have exercised what they claim to.
  EXPECT_GT(allocs, static_cast<uint64_t>(P.ops) / 3);
  EXPECT_GT(frees, static_cast<uint64_t>(P.ops) / 4);
  if (top == 4) {
    EXPECT_GT(enospc, 0u) << "the small region never filled up";
  }
  RecordProperty("enospc", std::to_string(enospc));

  // Free everything in random order, checking as we go.
  std::vector<uint64_t> rest;
  for (auto& [v, h] : held) rest.push_back(v);
  for (size_t i = rest.size(); i > 1; i--) std::swap(rest[i - 1], rest[rng.Below(i)]);
  for (size_t i = 0; i < rest.size(); i++) {
    EXPECT_TRUE(StampIntact(vm, rest[i], StampLen(held[rest[i]].level), held[rest[i]].tag));
    SPACE_ASSERT_OK(sp.Free(rest[i]));
    held.erase(rest[i]);
    if (i % 37 == 0) verify(P.ops + static_cast<int>(i));
  }
  ExpectAllFree(*m);
  ExpectNoLeak(*m, fresh_used);
}

INSTANTIATE_TEST_SUITE_P(SpaceRandom, SpaceProperty,
                         ::testing::Values(PropertyParam{1, 64 * MiB, 4, 4000}, PropertyParam{2, 64 * MiB, 4, 4000},
                                           PropertyParam{3, 64 * MiB, 4, 4000}, PropertyParam{4, 256 * MiB, 5, 4000},
                                           PropertyParam{5, 256 * MiB, 5, 4000}, PropertyParam{6, 256 * MiB, 7, 3000},
                                           PropertyParam{7, 256 * MiB, 7, 3000}),
                         Name);

}  // namespace
}  // namespace mapfs::testing
