// fsck for one CIB directory: every invariant of docs/FORMAT.md ("Directories"),
// checked from the structures alone, first problem reported with its
// virtual offset.
#include <string>
#include <unordered_set>

#include "dir/cib.h"
#include "dir/cib_internal.h"
#include "space/partitions.h"

namespace mapfs::dir {

namespace {

using internal::Bit;
using internal::Dir;
using internal::SlotVoff;
namespace f = format;

struct BlockRef {
  uint64_t voff, lo, hi;
};

class Checker {
 public:
  Checker(const Env& env, Dir& d) : env_(env), d_(d) {}

  Status Run(std::vector<std::pair<std::string, Entry>>* entries) {
    MAPFS_RETURN_IF_ERROR(Partition(d_.root()));
    const f::Root* r = d_.r();
    MAPFS_RETURN_IF_ERROR(Array(d_.root(), d_.root() + offsetof(f::Root, top), static_cast<int>(r->top_count),
                                static_cast<int>(r->depth), 0, ~uint64_t{0}));
    if (blocks_.empty()) return d_.Damaged(d_.root(), "index lists no block");
    for (size_t i = 0; i < blocks_.size(); i++) {
      const BlockRef& br = blocks_[i];
      const auto* b = d_.At<f::BlockHeader>(br.voff);
      if (b->min != br.lo || b->max != br.hi) return d_.Damaged(br.voff, "block range disagrees with the index");
      uint64_t want_next = i + 1 < blocks_.size() ? blocks_[i + 1].voff : 0;
      if (b->next != want_next) return d_.Damaged(br.voff, "block chain disagrees with the index (next)");
      nblocks_++;
      std::unordered_set<std::string> names;
      MAPFS_RETURN_IF_ERROR(Block(br.voff, br, &names, entries));
      for (uint64_t o = b->overflow; o != 0; o = d_.At<f::BlockHeader>(o)->overflow) {
        if (br.lo != br.hi) return d_.Damaged(br.voff, "overflow chain on a block of several hash values");
        MAPFS_RETURN_IF_ERROR(Partition(o));
        MAPFS_RETURN_IF_ERROR(d_.CheckBlock(o, f::kOverflow));
        const auto* ob = d_.At<f::BlockHeader>(o);
        if (ob->min != br.lo || ob->max != br.hi) return d_.Damaged(o, "overflow block range differs from its primary");
        if (ob->next != 0) return d_.Damaged(o, "overflow block with a chain link");
        nblocks_++;
        MAPFS_RETURN_IF_ERROR(Block(o, br, &names, entries));
      }
    }
    if (live_ != r->count)
      return d_.Damaged(d_.root(), "root counts " + std::to_string(r->count) + " entries, blocks hold " +
                                       std::to_string(live_));
    if (nblocks_ != r->nblocks)
      return d_.Damaged(d_.root(), "root counts " + std::to_string(r->nblocks) + " blocks, found " +
                                       std::to_string(nblocks_));
    if (nnodes_ != r->nnodes)
      return d_.Damaged(d_.root(), "root counts " + std::to_string(r->nnodes) + " index nodes, found " +
                                       std::to_string(nnodes_));
    return Status::Ok();
  }

 private:
  // Each partition once, and each an allocated L0 partition.
  Status Partition(uint64_t voff) {
    if (!d_.Plausible(voff)) return d_.Damaged(voff, "partition reference out of range");
    if (!seen_.insert(voff).second) return d_.Damaged(voff, "partition referenced twice");
    auto l = env_.space->LevelOf(voff);
    if (!l.ok() || *l != 0) return d_.Damaged(voff, "not an allocated L0 partition");
    return Status::Ok();
  }

  // An index array at `level` covering [lo, hi]: sorted, starting at lo.
  Status Array(uint64_t owner, uint64_t arr, int count, int level, uint64_t lo, uint64_t hi) {
    const auto* e = d_.At<f::Elem>(arr);
    if (e[0].min != lo) return d_.Damaged(owner, "index array does not start at its range");
    for (int i = 0; i < count; i++) {
      if (i + 1 < count && e[i + 1].min <= e[i].min) return d_.Damaged(owner, "index array out of order");
      if (e[i].min > hi) return d_.Damaged(owner, "index element beyond its range");
      uint64_t clo = e[i].min, chi = i + 1 < count ? e[i + 1].min - 1 : hi;
      uint64_t c = e[i].child;
      // Allocation is checked before the partition is read, so a damaged
      // reference never makes fsck touch (and back) unallocated space.
      if (level == 0) {
        MAPFS_RETURN_IF_ERROR(Partition(c));
        MAPFS_RETURN_IF_ERROR(d_.CheckBlock(c, f::kPrimary));
        blocks_.push_back({c, clo, chi});
        continue;
      }
      MAPFS_RETURN_IF_ERROR(Partition(c));
      MAPFS_RETURN_IF_ERROR(d_.CheckNode(c, level));
      nnodes_++;
      const auto* n = d_.At<f::Node>(c);
      MAPFS_RETURN_IF_ERROR(Array(c, c + offsetof(f::Node, e), static_cast<int>(n->count), level - 1, clo, chi));
    }
    return Status::Ok();
  }

  Status Block(uint64_t blk, const BlockRef& br, std::unordered_set<std::string>* names,
               std::vector<std::pair<std::string, Entry>>* entries) {
    const auto* b = d_.At<f::BlockHeader>(blk);
    const uint64_t live = b->bitmap;
    uint64_t used = live;
    char buf[kMaxName + 1];
    for (uint64_t m = live; m; m &= m - 1) {
      int i = __builtin_ctzll(m);
      const uint64_t at = SlotVoff(blk, i);
      f::Slot s;
      MAPFS_RETURN_IF_ERROR(d_.ReadSlot(blk, i, nullptr, &s));
      if (s.name_len == 0) return d_.Damaged(at, "entry with an empty name");
      if (s.hash < br.lo || s.hash > br.hi) return d_.Damaged(at, "entry hash outside its block's range");
      if (b->fp[i] != static_cast<uint8_t>(s.hash)) return d_.Damaged(at, "fingerprint disagrees with the entry hash");
      int nc = f::ContSlots(s.name_len);
      if (((b->longmap >> i) & 1) != (nc > 0 ? 1u : 0u)) return d_.Damaged(at, "long-name bit disagrees with the name length");
      for (int k = 0; k < nc; k++) {
        int c = s.cont[k];
        if (c < f::kFirstSlot || c >= f::kSlots) return d_.Damaged(at, "long name with a bad continuation slot");
        if (used & Bit(c)) return d_.Damaged(at, "continuation slot " + std::to_string(c) + " used twice");
        used |= Bit(c);
      }
      size_t len = 0;
      MAPFS_RETURN_IF_ERROR(d_.ReadName(blk, s, nullptr, buf, &len));
      std::string_view name(buf, len);
      if (!internal::ValidName(name).ok()) return d_.Damaged(at, "invalid name");
      if (d_.Hash(name) != s.hash) return d_.Damaged(at, "entry hash is not the hash of its name");
      if (!names->insert(std::string(name)).second) return d_.Damaged(at, "duplicate name \"" + std::string(name) + "\"");
      live_++;
      if (entries) entries->emplace_back(std::string(name), Entry{s.ino, s.type});
    }
    return Status::Ok();
  }

  const Env& env_;
  Dir& d_;
  std::unordered_set<uint64_t> seen_;
  std::vector<BlockRef> blocks_;
  uint64_t live_ = 0, nblocks_ = 0, nnodes_ = 0;
};

}  // namespace

Status Cib::Check(uint64_t root, std::vector<std::pair<std::string, Entry>>* entries) {
  Dir d(env_, root);
  MAPFS_RETURN_IF_ERROR(d.Open());
  Checker c(env_, d);
  return c.Run(entries);
}

}  // namespace mapfs::dir
