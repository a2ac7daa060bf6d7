// pswap: atomic exchange of the mappings of two equal virtual ranges.
//
// The range is cut greedily into units: at each position the largest level
// (1 GiB PUD entry, 2 MiB PMD entry, 4 KiB PTE) at which both sides are
// aligned and that still fits is used, so swap-aligned ranges cost one entry
// pair per GiB or per 2 MiB instead of per page — ctFS Fig. 5: 262,658 pages
// are one PUD pair, one PMD pair and two PTE pairs.
//
// Every entry pair becomes two absolute 8-byte stores in one redo
// transaction: once its checksum is durable the swap is committed and
// recovery finishes it; before that nothing of it is visible. Structural
// changes made while preparing (creating empty tables, splitting a chunk
// leaf into an equivalent PTE table) do not change what any page maps to, so
// they are published on their own, outside the transaction.
#include <sys/mman.h>

#include <algorithm>
#include <vector>

#include "common/units.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "vm/ppt_format.h"
#include "vm/vm.h"

namespace mapfs::vm {

using medium::Load64;
using medium::LockId;
using medium::PoolLock;

Status Vm::Pswap(uint64_t a, uint64_t b, uint64_t npages, const medium::Tx* with, bool keep_pages) {
  if (npages == 0) return with ? pool_->redo().Commit(*with) : Status::Ok();
  if (!IsAligned(a, kPageSize) || !IsAligned(b, kPageSize))
    return Status::Error(EINVAL, "pswap: ranges must be page aligned");
  uint64_t len = npages * kPageSize;
  if (npages > size_ / kPageSize || a >= size_ || b >= size_ || len > size_ - a || len > size_ - b)
    return Status::Error(EINVAL, "pswap: range outside the region");
  if ((a < b ? b - a : a - b) < len) return Status::Error(EINVAL, "pswap: ranges overlap");

  if (npages <= opt_.copy_swap_max_pages && !keep_pages) {
    bool done = false;
    MAPFS_RETURN_IF_ERROR(PswapCopy(a, b, npages, with, &done));
    if (done) return Status::Ok();
  }
  return PswapRemap(a, b, npages, with);
}

// Small swaps: exchange the bytes through the redo log and leave every
// mapping alone. Only when both sides are fully backed.
Status Vm::PswapCopy(uint64_t a, uint64_t b, uint64_t npages, const medium::Tx* with, bool* done) {
  PoolLock lock(pool_, LockId::kPpt);
  std::vector<uint64_t> pa(npages), pb(npages);
  for (uint64_t i = 0; i < npages; i++) {
    auto ta = Translate(a + i * kPageSize), tb = Translate(b + i * kPageSize);
    if (!ta.ok() || !tb.ok()) return Status::Ok();  // not applicable: remap instead
    pa[i] = *ta;
    pb[i] = *tb;
  }
  medium::Tx tx;
  for (uint64_t i = 0; i < npages; i++) {
    tx.PutBytes(pa[i], pool_->base() + pb[i], kPageSize);
    tx.PutBytes(pb[i], pool_->base() + pa[i], kPageSize);
  }
  if (with) tx.Append(*with);
  if (tx.payload_bytes() > pool_->redo().capacity()) return Status::Ok();
  MAPFS_RETURN_IF_ERROR(pool_->redo().Commit(tx));
  *done = true;
  return Status::Ok();
}

Status Vm::PswapRemap(uint64_t a, uint64_t b, uint64_t npages, const medium::Tx* with) {
  Changing changing(&changing_);
  medium::Tx tx;
  struct Unit {
    uint64_t va, vb;
    int level;
  };
  std::vector<Unit> units;
  {
    PoolLock lock(pool_, LockId::kPpt);
    uint64_t i = 0;
    while (i < npages) {
      uint64_t va = a + i * kPageSize, vb = b + i * kPageSize;
      int level = 0;
      for (int l = ppt::kLevels - 1; l >= 1; --l) {
        uint64_t reach = ppt::Reach(l);
        if (IsAligned(va, reach) && IsAligned(vb, reach) && (npages - i) * kPageSize >= reach) {
          level = l;
          break;
        }
      }
      i += ppt::Reach(level) / kPageSize;

      Status err;
      if (level > 0) {
        uint64_t* sa = Slot(va, level, false, &err);
        uint64_t* sb = Slot(vb, level, false, &err);
        uint64_t ea = sa ? Load64(sa) : 0, eb = sb ? Load64(sb) : 0;
        if (ea == 0 && eb == 0) continue;
        if ((ea != 0 && !EntryValid(ea, level)) || (eb != 0 && !EntryValid(eb, level))) return Damaged(ea ? va : vb);
        if (sa == nullptr && (sa = Slot(va, level, true, &err)) == nullptr) return err;
        if (sb == nullptr && (sb = Slot(vb, level, true, &err)) == nullptr) return err;
        tx.Put64(pool_->offset_of(sa), eb);
        tx.Put64(pool_->offset_of(sb), ea);
        units.push_back({va, vb, level});
        continue;
      }
      // Page level: both sides need a PTE table.
      uint64_t* pmds[2] = {Slot(va, 1, false, &err), Slot(vb, 1, false, &err)};
      uint64_t e0 = pmds[0] ? Load64(pmds[0]) : 0, e1 = pmds[1] ? Load64(pmds[1]) : 0;
      if (!ppt::IsPresent(e0) && !ppt::IsPresent(e1)) continue;
      uint64_t vs[2] = {va, vb};
      uint64_t* ptes[2];
      for (int s = 0; s < 2; s++) {
        if (pmds[s] == nullptr && (pmds[s] = Slot(vs[s], 1, true, &err)) == nullptr) return err;
        uint64_t e = Load64(pmds[s]);
        if (ppt::IsPresent(e) && !EntryValid(e, 1)) return Damaged(vs[s]);
        if (!ppt::IsPresent(e)) {
          auto pg = pages_.AllocPage();
          if (!pg.ok()) return pg.status();
          pages_.ZeroFresh(*pg, kPageSize);  // an empty table before anything links it
          medium::Store64(pmds[s], ppt::Table(*pg));
          medium::Persist(pmds[s], 8);
        } else if (ppt::IsLeaf(e)) {
          MAPFS_RETURN_IF_ERROR(SplitLeaf(pmds[s]));
        }
        ptes[s] = pool_->at<uint64_t>(ppt::Target(Load64(pmds[s]))) + ppt::Index(vs[s], 0);
      }
      uint64_t pa = Load64(ptes[0]), pb = Load64(ptes[1]);
      if (pa == pb) continue;  // both empty
      tx.Put64(pool_->offset_of(ptes[0]), pb);
      tx.Put64(pool_->offset_of(ptes[1]), pa);
      units.push_back({va, vb, 0});
    }
    if (with) tx.Append(*with);
    if (tx.payload_bytes() > pool_->redo().capacity())
      return Status::Error(E2BIG, "pswap: ranges that are not swap-aligned are limited to " +
                                      std::to_string(pool_->redo().capacity() / 48) + " pages");
    MAPFS_RETURN_IF_ERROR(pool_->redo().Commit(tx));
    Publish(a, npages * kPageSize);
    Publish(b, npages * kPageSize);
  }
  // This process: whole-entry swaps drop the old mappings (cheaper than
  // remapping what may never be touched again); single pages inside a
  // mapped chunk are remapped in place, so the rest of the chunk keeps its
  // mapping and its page tables.
  std::lock_guard<std::mutex> g(map_mu_);
  for (size_t k = 0; k < units.size();) {
    const Unit& u = units[k];
    if (u.level > 0) {
      // Consecutive whole-entry units: one system call per side.
      uint64_t len = ppt::Reach(u.level);
      size_t j = k + 1;
      while (j < units.size() && units[j].level > 0 && units[j].va == u.va + len && units[j].vb == u.vb + len) {
        len += ppt::Reach(units[j].level);
        j++;
      }
      DropLocal(u.va, len);
      DropLocal(u.vb, len);
      k = j;
      continue;
    }
    // A run of consecutive page units (the head or tail of the range).
    size_t j = k + 1;
    while (j < units.size() && units[j].level == 0 && units[j].va == units[j - 1].va + kPageSize &&
           units[j].vb == units[j - 1].vb + kPageSize)
      j++;
    RemapLocal(u.va, (j - k) * kPageSize);
    RemapLocal(u.vb, (j - k) * kPageSize);
    k = j;
  }
  return Status::Ok();
}

}  // namespace mapfs::vm
