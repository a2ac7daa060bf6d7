// Recovery and checking of the vm layer: the PPT is the truth about which
// pool pages are in use; the page bitmap must agree with it.
#include <bit>
#include <functional>
#include <string>
#include <vector>

#include "common/units.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "vm/ppt_format.h"
#include "vm/vm.h"

namespace mapfs::vm {
namespace {

struct Walk {
  medium::Pool* pool;
  std::vector<uint64_t> marks;
  uint64_t referenced = 0, double_refs = 0, bad = 0;
  bool repair = false;
  std::string first_problem;

  void Mark(uint64_t off, uint64_t pages) {
    for (uint64_t p = off / kPageSize; p < off / kPageSize + pages; p++) {
      uint64_t bit = uint64_t{1} << (p % 64);
      if (marks[p / 64] & bit) {
        if (double_refs++ == 0 && first_problem.empty())
          first_problem = "pool page at offset " + std::to_string(p * kPageSize) + " is mapped twice";
      }
      marks[p / 64] |= bit;
      referenced++;
    }
  }

  // Entries must point into the data area, aligned to what they map.
  bool Valid(uint64_t e, uint64_t span) const {
    uint64_t t = ppt::Target(e);
    return t >= pool->header().meta_end && t + span <= pool->pages_end() && IsAligned(t, span);
  }

  void Table(uint64_t* t, int level) {
    for (int i = 0; i < ppt::kEntries; i++) {
      uint64_t e = medium::Load64(&t[i]);
      if (!ppt::IsPresent(e)) continue;
      bool leaf = ppt::IsLeaf(e);
      uint64_t span = leaf ? ppt::Reach(level) : kPageSize;
      bool ok = (leaf ? level <= 1 : level >= 1) && Valid(e, span);
      if (!ok) {
        if (bad++ == 0 && first_problem.empty())
          first_problem = "PPT entry at pool offset " + std::to_string(pool->offset_of(&t[i])) + " is invalid";
        if (repair) {
          medium::Store64(&t[i], 0);
          medium::Persist(&t[i], 8);
        }
        continue;
      }
      Mark(ppt::Target(e), span / kPageSize);
      if (!leaf) Table(pool->at<uint64_t>(ppt::Target(e)), level - 1);
    }
  }

  void Run() {
    const auto& h = pool->header();
    marks.assign(h.bitmap_bytes / 8, 0);
    Mark(0, h.meta_end / kPageSize);  // the fixed metadata area, root table included
    referenced -= h.meta_end / kPageSize;
    // A block-mapped pool's mapping area is the map layer's, in use as a
    // whole (map::Mapper::Check judges what is inside).
    if (h.map_len != 0) {
      Mark(h.map_off, h.map_len / kPageSize);
      referenced -= h.map_len / kPageSize;
    }
    Table(pool->at<uint64_t>(h.ppt_root_off), ppt::kLevels - 1);
  }
};

}  // namespace

RebuildReport Vm::Rebuild() {
  medium::PoolLock lock(pool_, medium::LockId::kPpt);
  Walk w{pool_, {}, 0, 0, 0, true, {}};
  w.Run();
  RebuildReport r;
  r.referenced_pages = w.referenced;
  r.double_refs = w.double_refs;
  r.bad_entries = w.bad;
  auto [leaked, unmarked] = pages_.Reconcile(w.marks);
  r.leaked_reclaimed = leaked;
  r.unmarked_fixed = unmarked;
  return r;
}

Status Vm::Check(bool strict) const {
  Walk w{pool_, {}, 0, 0, 0, false, {}};
  w.Run();
  if (!w.first_problem.empty()) return Status::Error(EUCLEAN, w.first_problem);
  for (uint64_t i = 0; i < w.marks.size(); i++) {
    uint64_t have = medium::Load64(pool_->at<uint64_t>(pool_->header().bitmap_off) + i);
    uint64_t missing = w.marks[i] & ~have;
    if (missing)
      return Status::Error(EUCLEAN, "pool page at offset " +
                                        std::to_string((i * 64 + std::countr_zero(missing)) * kPageSize) +
                                        " is mapped but marked free");
    uint64_t leaked = have & ~w.marks[i];
    if (strict && leaked)
      return Status::Error(EUCLEAN, "pool page at offset " +
                                        std::to_string((i * 64 + std::countr_zero(leaked)) * kPageSize) +
                                        " is marked in use but not mapped (leak)");
  }
  return Status::Ok();
}

}  // namespace mapfs::vm
