#include "space/partitions.h"

#include <algorithm>

#include "common/log.h"
#include "space/partition_op.h"

namespace mapfs::space {

// ---------------------------------------------------------------- Partitions

Partitions::Partitions(medium::Pool* pool, vm::Vm* vm)
    : pool_(pool), vm_(vm), top_(static_cast<int>(pool->header().top_level)) {}

Result<std::unique_ptr<Partitions>> Partitions::Open(medium::Pool* pool, vm::Vm* vm) {
  std::unique_ptr<Partitions> p(new Partitions(pool, vm));
  if (pool->needs_recovery()) MAPFS_RETURN_IF_ERROR(p->Reconcile());
  return p;
}

Result<uint64_t> Partitions::Alloc(int k) {
  if (k < 0 || k >= top_) return Status::Error(EINVAL, "no partition level " + std::to_string(k));
  medium::PoolLock lock(pool_, medium::LockId::kSpace);
  vm_->Sync();  // headers are read through this process's mappings: see what others changed
  MAPFS_RETURN_IF_ERROR(FinishDeadFree());
  Op op(this);
  uint64_t root = op.Root();
  if (root == kAllocated) return Status::Error(ENOSPC, "no free partition");
  if (root == kEmpty) {
    auto m = op.InitNode(0, top_, k < 3 ? k : 0);
    if (!m.ok()) return m.status();
    op.SetRoot(kPartitioned);
  }
  auto rm = op.NodeMask(0, top_);
  if (!rm.ok()) return rm.status();
  if ((*rm & (1u << k)) == 0)
    return Status::Error(ENOSPC, "no free L" + std::to_string(k) + " partition (" +
                                     FormatSize(LevelSize(k)) + ")");

  std::vector<Op::Node> path;
  Op::Node node{0, top_};
  uint64_t result = 0;
  for (;;) {
    path.push_back(node);
    auto w0 = op.W0(node.voff, node.level);
    if (!w0.ok()) return w0.status();
    if (node.level == 3) {
      auto kind = Op::L3Kind(node.voff, *w0);
      if (!kind.ok()) return kind.status();
      if (*kind != k) return Status::Error(EUCLEAN, "availability mask disagrees with an L3 header");
      int n = Op::L3Children(k);
      int found = -1;
      for (int w = 0; w < (n + 63) / 64 && found < 0; w++) {
        auto bits = op.Get(Op::Word(node.voff, 3, 1 + w));
        if (!bits.ok()) return bits.status();
        uint64_t valid = n - 64 * w >= 64 ? ~uint64_t{0} : (uint64_t{1} << (n - 64 * w)) - 1;
        uint64_t free = ~*bits & valid;
        if (free) {
          int b = std::countr_zero(free);
          found = 64 * w + b;
          MAPFS_RETURN_IF_ERROR(op.Set(Op::Word(node.voff, 3, 1 + w), *bits | (uint64_t{1} << b)));
        }
      }
      if (found < 0) return Status::Error(EUCLEAN, "availability mask disagrees with an L3 bitmap");
      result = node.voff + uint64_t(found) * LevelSize(k);
      break;
    }
    int c = node.level - 1;
    int pick = -1;
    if (c == k) {
      for (int i = 1; i < 8 && pick < 0; i++)
        if (Op::StateOf(*w0, i) == kEmpty) pick = i;
      if (pick < 0) return Status::Error(EUCLEAN, "availability mask disagrees with a header");
      MAPFS_RETURN_IF_ERROR(op.Set(Op::Word(node.voff, node.level, 0), Op::WithState(*w0, pick, kAllocated)));
      result = node.voff + uint64_t(pick) * LevelSize(c);
      break;
    }
    // Prefer filling a Partitioned child (packs small partitions together)
    // over splitting an Empty one.
    for (int i = 0; i < 8 && pick < 0; i++) {
      if (Op::StateOf(*w0, i) != kPartitioned) continue;
      auto m = op.StoredMask(node.voff, node.level, i);
      if (!m.ok()) return m.status();
      if (*m & (1u << k)) pick = i;
    }
    uint64_t child = 0;
    if (pick >= 0) {
      child = node.voff + uint64_t(pick) * LevelSize(c);
    } else {
      for (int i = 1; i < 8 && pick < 0; i++)
        if (Op::StateOf(*w0, i) == kEmpty) pick = i;
      if (pick < 0) return Status::Error(EUCLEAN, "availability mask disagrees with a header");
      child = node.voff + uint64_t(pick) * LevelSize(c);
      auto m = op.InitNode(child, c, k < 3 ? k : 0);
      if (!m.ok()) return m.status();
      MAPFS_RETURN_IF_ERROR(op.Set(Op::Word(node.voff, node.level, 0), Op::WithState(*w0, pick, kPartitioned)));
    }
    node = {child, c};
  }
  MAPFS_RETURN_IF_ERROR(op.FixMasks(path));
  MAPFS_RETURN_IF_ERROR(op.Commit());
  return result;
}

namespace {

// Gives back the pages of what a Free made Empty: unmaps, then zeroes the
// small partitions that no unmap covered.
Status ReleaseRanges(vm::Vm* vm, const SpaceShared::Range* r, uint64_t n) {
  for (uint64_t i = 0; i < n; i++)
    MAPFS_RETURN_IF_ERROR(r[i].discard ? vm->Discard(r[i].voff, r[i].len) : vm->Unmap(r[i].voff, r[i].len));
  return Status::Ok();
}

}  // namespace

// A Free whose process died holding the space lock left its record behind.
// The lock's recovery has replayed the dead process's redo record if it was
// committed, so the hierarchy is entirely before or after that Free: if the
// partition is no longer allocated, the Free happened and its ranges must
// be released before anything is handed out again.
Status Partitions::FinishDeadFree() {
  SpaceShared* sh = SpaceSharedOf(pool_);
  if (sh->pending.load(std::memory_order_acquire) == 0) return Status::Ok();
  uint64_t n = std::min<uint64_t>(sh->count, SpaceShared::kMaxRanges);
  auto still = LevelOfLocked(sh->voff);
  if (!still.ok() && still.status().code() != EINVAL) return still.status();
  if (!still.ok()) MAPFS_RETURN_IF_ERROR(ReleaseRanges(vm_, sh->ranges, n));
  sh->pending.store(0, std::memory_order_release);
  return Status::Ok();
}

Status Partitions::Free(uint64_t voff) {
  medium::PoolLock lock(pool_, medium::LockId::kSpace);
  vm_->Sync();  // headers are read through this process's mappings: see what others changed
  MAPFS_RETURN_IF_ERROR(FinishDeadFree());
  Op op(this);
  const Status not_allocated = Status::Error(EINVAL, "no allocated partition starts at virtual offset " + std::to_string(voff));
  uint64_t root = op.Root();
  if (root == kEmpty) return not_allocated;
  if (root == kAllocated) {
    if (voff != 0) return not_allocated;
    op.SetRoot(kEmpty);
    MAPFS_RETURN_IF_ERROR(op.Commit());
    return vm_->Unmap(0, LevelSize(top_));
  }
  if (voff >= LevelSize(top_)) return not_allocated;

  std::vector<Op::Node> path;
  Op::Node node{0, top_};
  for (;;) {
    path.push_back(node);
    auto w0 = op.W0(node.voff, node.level);
    if (!w0.ok()) return w0.status();
    if (node.level == 3) {
      auto k = Op::L3Kind(node.voff, *w0);
      if (!k.ok()) return k.status();
      int kind = *k;
      uint64_t off = voff - node.voff;
      if (off % LevelSize(kind) != 0) return not_allocated;
      uint64_t i = off / LevelSize(kind);
      auto bits = op.Get(Op::Word(node.voff, 3, 1 + static_cast<int>(i / 64)));
      if (!bits.ok()) return bits.status();
      uint64_t bit = uint64_t{1} << (i % 64);
      if (i == 0 || (*bits & bit) == 0) return not_allocated;
      MAPFS_RETURN_IF_ERROR(op.Set(Op::Word(node.voff, 3, 1 + static_cast<int>(i / 64)), *bits & ~bit));
      op.discards.push_back({voff, LevelSize(kind)});
      break;
    }
    int c = node.level - 1;
    int i = static_cast<int>((voff - node.voff) >> LevelShift(c));
    uint64_t s = Op::StateOf(*w0, i);
    uint64_t child = node.voff + uint64_t(i) * LevelSize(c);
    if (s == kAllocated && child == voff) {
      MAPFS_RETURN_IF_ERROR(op.Set(Op::Word(node.voff, node.level, 0), Op::WithState(*w0, i, kEmpty)));
      op.unmaps.push_back({voff, LevelSize(c)});
      break;
    }
    if (s != kPartitioned) return not_allocated;
    node = {child, c};
  }

  // Merge: a node left with nothing but its header chain becomes Empty in
  // its parent — unless it is child 0, which holds the parent's header and
  // stays Partitioned while the parent is.
  for (size_t j = path.size(); j-- > 0;) {
    const Op::Node& n = path[j];
    auto empty = op.IsEmpty(n.voff, n.level);
    if (!empty.ok()) return empty.status();
    if (!*empty) break;
    if (j == 0) {
      op.SetRoot(kEmpty);
      op.unmaps = {{0, LevelSize(top_)}};
      op.discards.clear();
      break;
    }
    const Op::Node& parent = path[j - 1];
    int idx = static_cast<int>((n.voff - parent.voff) >> LevelShift(parent.level - 1));
    if (idx == 0) continue;
    auto pw0 = op.W0(parent.voff, parent.level);
    if (!pw0.ok()) return pw0.status();
    MAPFS_RETURN_IF_ERROR(op.Set(Op::Word(parent.voff, parent.level, 0), Op::WithState(*pw0, idx, kEmpty)));
    op.unmaps.push_back({n.voff, LevelSize(n.level)});
  }
  MAPFS_RETURN_IF_ERROR(op.FixMasks(path));

  // Record what is left to do once the change is committed (see
  // SpaceShared), commit, then release the ranges. Still under the lock:
  // nobody may reuse the range before its pages are gone. A crash of the
  // whole system before the end is repaired by Reconcile() at the next open;
  // the death of this process alone, by FinishDeadFree() in the next holder.
  SpaceShared* sh = SpaceSharedOf(pool_);
  uint64_t n = 0;
  for (auto& [v, len] : op.unmaps) sh->ranges[n++] = {v, len, 0};
  for (auto& [v, len] : op.discards) {
    bool covered = false;
    for (auto& [u, ulen] : op.unmaps) covered |= v >= u && v + len <= u + ulen;
    if (!covered) sh->ranges[n++] = {v, len, 1};
  }
  sh->voff = voff;
  sh->count = n;
  sh->pending.store(1, std::memory_order_release);
  Status st = op.Commit();
  if (!st.ok()) {
    sh->pending.store(0, std::memory_order_release);
    return st;
  }
  // On failure the record stays: the next holder of the lock retries.
  MAPFS_RETURN_IF_ERROR(ReleaseRanges(vm_, sh->ranges, n));
  sh->pending.store(0, std::memory_order_release);
  return Status::Ok();
}

Result<int> Partitions::LevelOf(uint64_t voff) {
  medium::PoolLock lock(pool_, medium::LockId::kSpace);
  vm_->Sync();  // headers are read through this process's mappings: see what others changed
  return LevelOfLocked(voff);
}

Result<int> Partitions::LevelOfLocked(uint64_t voff) {
  Op op(this);
  const Status not_allocated = Status::Error(EINVAL, "no allocated partition starts at virtual offset " + std::to_string(voff));
  uint64_t root = op.Root();
  if (root == kAllocated) return voff == 0 ? Result<int>(top_) : Result<int>(not_allocated);
  if (root != kPartitioned || voff >= LevelSize(top_)) return not_allocated;
  Op::Node node{0, top_};
  for (;;) {
    auto w0 = op.W0(node.voff, node.level);
    if (!w0.ok()) return w0.status();
    if (node.level == 3) {
      auto k = Op::L3Kind(node.voff, *w0);
      if (!k.ok()) return k.status();
      int kind = *k;
      uint64_t off = voff - node.voff;
      if (off % LevelSize(kind) != 0) return not_allocated;
      uint64_t i = off / LevelSize(kind);
      auto bits = op.Get(Op::Word(node.voff, 3, 1 + static_cast<int>(i / 64)));
      if (!bits.ok()) return bits.status();
      if (i == 0 || ((*bits >> (i % 64)) & 1) == 0) return not_allocated;
      return kind;
    }
    int c = node.level - 1;
    int i = static_cast<int>((voff - node.voff) >> LevelShift(c));
    uint64_t s = Op::StateOf(*w0, i);
    uint64_t child = node.voff + uint64_t(i) * LevelSize(c);
    if (s == kAllocated && child == voff) return c;
    if (s != kPartitioned) return not_allocated;
    node = {child, c};
  }
}

}  // namespace mapfs::space
