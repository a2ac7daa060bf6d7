// Helpers for the space-layer tests: opening pools, a model of the allocated
// partitions, and oracles (overlap, alignment, leaks) that do not trust the
// allocator's own bookkeeping.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/units.h"
#include "medium/pool.h"
#include "mount/mount.h"
#include "space/partition_format.h"
#include "space/partitions.h"
#include "test_util.h"
#include "vm/ppt_format.h"

namespace mapfs::testing {

using space::format::LevelSize;

inline std::string Describe(const Status& s) { return s.ok() ? "OK" : s.ToString(); }
template <typename T>
std::string Describe(const Result<T>& r) {
  return Describe(r.status());
}

#define SPACE_ASSERT_OK(expr)                                             \
  do {                                                                    \
    const auto& _r = (expr);                                              \
    ASSERT_TRUE(_r.ok()) << #expr << ": " << ::mapfs::testing::Describe(_r); \
  } while (0)
#define SPACE_EXPECT_OK(expr)                                             \
  do {                                                                    \
    const auto& _r = (expr);                                              \
    EXPECT_TRUE(_r.ok()) << #expr << ": " << ::mapfs::testing::Describe(_r); \
  } while (0)

// The small geometry the brief asks for: a 64 MiB pool whose region is one
// L4 partition (16 MiB = 8 x L3).
inline medium::CreateOptions SmallRegion(uint32_t top_level = 4) {
  medium::CreateOptions o;
  o.top_level = top_level;
  return o;
}

// Opens `path` through every layer; null (with a test failure) on error.
inline std::unique_ptr<Mount> OpenMount(const std::string& path) {
  auto m = Mount::Open(path);
  EXPECT_TRUE(m.ok()) << "Mount::Open(" << path << "): " << Describe(m);
  if (!m.ok()) return nullptr;
  return std::move(*m);
}

// voff -> level of every allocated partition.
using Model = std::map<uint64_t, int>;

// The allocator's own list (Check(&list)) as a Model; fails the test when
// Check reports damage or lists a partition twice.
inline Model CheckedList(space::Partitions& sp) {
  std::vector<space::PartitionInfo> list;
  Status st = sp.Check(&list);
  EXPECT_TRUE(st.ok()) << "Check: " << Describe(st);
  Model m;
  for (auto& p : list) EXPECT_TRUE(m.emplace(p.voff, p.level).second) << "listed twice: " << p.voff;
  return m;
}

// Every partition is aligned to its size, inside the region, disjoint from
// every other, and never the first child of its parent (that child holds the
// parent's header page). Returns a description of the first violation.
inline std::string GeometryProblem(const Model& m, int top) {
  uint64_t region = LevelSize(top);
  uint64_t prev_end = 0;
  for (auto& [voff, level] : m) {
    std::string at = "L" + std::to_string(level) + " partition at " + std::to_string(voff);
    if (level < 0 || level >= top) return at + ": level outside 0..top-1";
    uint64_t size = LevelSize(level);
    if (voff % size != 0) return at + ": not aligned to its size";
    if (voff >= region || size > region - voff) return at + ": outside the region";
    if (voff < prev_end) return at + ": overlaps the previous partition";
    uint64_t parent = level < 3 ? LevelSize(3) : LevelSize(level + 1);
    if (voff % parent == 0) return at + ": is the first child of its parent (header page)";
    prev_end = voff + size;
  }
  return "";
}

inline uint64_t Intersecting(const Model& m, uint64_t lo, uint64_t hi) {
  // Count of partitions intersecting [lo, hi).
  uint64_t n = 0;
  auto it = m.upper_bound(lo);
  if (it != m.begin()) {
    auto p = std::prev(it);
    if (p->first + LevelSize(p->second) > lo) n++;
  }
  for (; it != m.end() && it->first < hi; ++it) n++;
  return n;
}

// True when the format guarantees that a level-k partition can be allocated
// given the allocated set `m` alone (an independent oracle for ENOSPC):
//  k >= 3: some aligned slot that is not a first child intersects nothing
//          (an empty node that is not a first child is merged back to Empty);
//  k <  3: some L3 that is not a first child holds nothing, or some L3 holds
//          only level-k partitions (so its kind is k) and has a free slot.
// L3s that are first children keep the kind they were created with, which
// the model does not know; they are never counted as certainly available.
inline bool CertainlyAvailable(const Model& m, int k, int top) {
  uint64_t region = LevelSize(top);
  if (k >= 3) {
    for (uint64_t o = 0; o < region; o += LevelSize(k))
      if (o % LevelSize(k + 1) != 0 && Intersecting(m, o, o + LevelSize(k)) == 0) return true;
    return false;
  }
  uint64_t cap = (512 >> (3 * k)) - 1;
  for (uint64_t n = 0; n < region; n += LevelSize(3)) {
    // A partition of level >= 3 covering this L3?
    auto it = m.upper_bound(n);
    if (it != m.begin()) {
      auto p = std::prev(it);
      if (p->first + LevelSize(p->second) > n) continue;
    }
    uint64_t count = 0;
    bool same_kind = true;
    for (auto q = m.lower_bound(n); q != m.end() && q->first < n + LevelSize(3); ++q) {
      count++;
      same_kind &= q->second == k;
    }
    bool first_child = n % LevelSize(4) == 0;
    if (count == 0 && !first_child) return true;
    if (count > 0 && same_kind && count < cap) return true;
  }
  return false;
}

// ---- leak oracle: walks the persistent page table directly.
struct PptCensus {
  uint64_t interior_tables = 0;  // PUD and PMD tables (never freed by Unmap)
  uint64_t chunk_entries = 0;    // present PMD entries: mapped chunks or PTE tables
};
inline PptCensus CountPpt(medium::Pool& pool) {
  namespace ppt = vm::ppt;
  PptCensus c;
  auto* root = pool.at<uint64_t>(pool.header().ppt_root_off);
  for (int i = 0; i < ppt::kEntries; i++) {
    if (!ppt::IsPresent(root[i])) continue;
    c.interior_tables++;
    auto* pud = pool.at<uint64_t>(ppt::Target(root[i]));
    for (int j = 0; j < ppt::kEntries; j++) {
      if (!ppt::IsPresent(pud[j])) continue;
      c.interior_tables++;
      auto* pmd = pool.at<uint64_t>(ppt::Target(pud[j]));
      for (int k = 0; k < ppt::kEntries; k++) c.chunk_entries += ppt::IsPresent(pmd[k]) ? 1 : 0;
    }
  }
  return c;
}

// With nothing allocated, no pool page may back the region: the only pages
// in use beyond those of a fresh pool are the PPT's interior tables.
inline void ExpectNoLeak(Mount& m, uint64_t fresh_used_pages) {
  PptCensus c = CountPpt(m.pool());
  EXPECT_EQ(c.chunk_entries, 0u) << "region still backed with nothing allocated";
  EXPECT_EQ(m.vm().Stats().used_pages, fresh_used_pages + c.interior_tables);
  SPACE_EXPECT_OK(m.vm().Check(/*strict=*/true));
}

// Nothing allocated and the top partition merged back to Empty.
inline void ExpectAllFree(Mount& m) {
  auto& sp = m.space();
  EXPECT_TRUE(CheckedList(sp).empty());
  space::SpaceStats s = sp.Stats();
  for (int l = 0; l <= space::format::kMaxLevel; l++) {
    EXPECT_EQ(s.allocated[l], 0u) << "level " << l;
    EXPECT_EQ(s.partitioned[l], 0u) << "level " << l;
  }
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.availability_level, sp.top_level() - 1);
  EXPECT_EQ(m.pool().state()->space_root, uint64_t{space::format::kEmpty});
}

// A pattern tied to (voff, tag) in the first and last 8 bytes of every page
// of [voff, voff+len) — cheap to write and to verify.
inline void Stamp(vm::Vm& vm, uint64_t voff, uint64_t len, uint64_t tag) {
  for (uint64_t p = voff; p < voff + len; p += kPageSize) {
    *reinterpret_cast<volatile uint64_t*>(vm.at(p)) = tag ^ p;
    *reinterpret_cast<volatile uint64_t*>(vm.at(p + kPageSize - 8)) = ~(tag ^ p);
  }
}
inline bool StampIntact(vm::Vm& vm, uint64_t voff, uint64_t len, uint64_t tag) {
  for (uint64_t p = voff; p < voff + len; p += kPageSize)
    if (*reinterpret_cast<volatile uint64_t*>(vm.at(p)) != (tag ^ p) ||
        *reinterpret_cast<volatile uint64_t*>(vm.at(p + kPageSize - 8)) != ~(tag ^ p))
      return false;
  return true;
}
// Whether every byte of [voff, voff+len) reads as zero. Reads through the
// pool view, so checking does not populate anything; an unbacked page reads
// as zero (a touch would back it with a fresh, zeroed page).
inline bool ReadsZero(vm::Vm& vm, uint64_t voff, uint64_t len) {
  for (uint64_t p = voff; p < voff + len; p += kPageSize) {
    const char* page = vm.PoolPtr(p);
    if (page == nullptr) continue;
    for (uint64_t b = 0; b < kPageSize; b += 8)
      if (*reinterpret_cast<const volatile uint64_t*>(page + b) != 0) return false;
  }
  return true;
}

}  // namespace mapfs::testing
