// Walks over the whole hierarchy: statistics, invariant checks, and the
// recovery pass that returns pages still backing Empty partitions.
#include <functional>

#include "space/partition_op.h"

namespace mapfs::space {

namespace {

// Visits every Partitioned node depth-first; `fn(node, level, w0)` returns
// an error to stop.
Status ForEachNode(Partitions::Op& op, uint64_t node, int level,
                   const std::function<Status(uint64_t, int, uint64_t)>& fn) {
  auto w0 = op.W0(node, level);
  if (!w0.ok()) return w0.status();
  MAPFS_RETURN_IF_ERROR(fn(node, level, *w0));
  if (level == 3) return Status::Ok();
  for (int i = 0; i < 8; i++)
    if (Partitions::Op::StateOf(*w0, i) == kPartitioned)
      MAPFS_RETURN_IF_ERROR(ForEachNode(op, node + uint64_t(i) * LevelSize(level - 1), level - 1, fn));
  return Status::Ok();
}

std::string At(uint64_t node, int level) {
  return "L" + std::to_string(level) + " partition at virtual offset " + std::to_string(node);
}

}  // namespace

SpaceStats Partitions::Stats() {
  medium::PoolLock lock(pool_, medium::LockId::kSpace);
  Op op(this);
  SpaceStats s;
  s.top_level = top_;
  uint64_t root = op.Root();
  if (root == kEmpty) s.root_mask = EmptyMask(top_ - 1) ;
  if (root == kAllocated) {
    s.allocated[top_] = 1;
    s.allocated_bytes = LevelSize(top_);
  }
  if (root == kPartitioned) {
    (void)ForEachNode(op, 0, top_, [&](uint64_t node, int level, uint64_t w0) -> Status {
      s.partitioned[level]++;
      if (level == 3) {
        auto k = Op::L3Kind(node, w0);
        if (!k.ok()) return Status::Ok();  // damaged: its children go uncounted; Check reports it
        int kind = *k;
        for (int w = 0; w < 8; w++) {
          auto bits = op.Get(Op::Word(node, 3, 1 + w));
          if (bits.ok()) {
            uint64_t n = std::popcount(*bits) - (w == 0 ? 1 : 0);  // bit 0 holds the header
            s.allocated[kind] += n;
            s.allocated_bytes += n * LevelSize(kind);
          }
        }
        return Status::Ok();
      }
      for (int i = 0; i < 8; i++)
        if (Op::StateOf(w0, i) == kAllocated) {
          s.allocated[level - 1]++;
          s.allocated_bytes += LevelSize(level - 1);
        }
      return Status::Ok();
    });
    auto m = op.NodeMask(0, top_);
    s.root_mask = m.ok() ? *m : 0;
  }
  s.availability_level = s.root_mask ? 15 - std::countl_zero(s.root_mask) : -1;
  return s;
}

Status Partitions::Check(std::vector<PartitionInfo>* out) {
  medium::PoolLock lock(pool_, medium::LockId::kSpace);
  Op op(this);
  uint64_t root = op.Root();
  if (root > kPartitioned) return Status::Error(EUCLEAN, "space root state word is damaged");
  if (root == kAllocated && out) out->push_back({0, top_});
  if (root != kPartitioned) return Status::Ok();
  return ForEachNode(op, 0, top_, [&](uint64_t node, int level, uint64_t w0) -> Status {
    if (level == 3) {
      auto k = Op::L3Kind(node, w0);
      if (!k.ok()) return Status::Error(EUCLEAN, At(node, 3) + ": bad child kind");
      int kind = *k;
      int n = Op::L3Children(kind);
      for (int w = 0; w < 8; w++) {
        auto bits = op.Get(Op::Word(node, 3, 1 + w));
        if (!bits.ok()) return bits.status();
        if (w == 0 && (*bits & 1) == 0) return Status::Error(EUCLEAN, At(node, 3) + ": header child not reserved");
        for (int b = 0; b < 64; b++) {
          int i = 64 * w + b;
          if (((*bits >> b) & 1) == 0) continue;
          if (i >= n) return Status::Error(EUCLEAN, At(node, 3) + ": child beyond its kind allocated");
          if (i > 0 && out) out->push_back({node + uint64_t(i) * LevelSize(kind), kind});
        }
      }
      return Status::Ok();
    }
    if (Op::StateOf(w0, 0) != kPartitioned)
      return Status::Error(EUCLEAN, At(node, level) + ": first child is not partitioned");
    for (int i = 0; i < 8; i++) {
      uint64_t s = Op::StateOf(w0, i);
      uint64_t child = node + uint64_t(i) * LevelSize(level - 1);
      if (s == 3) return Status::Error(EUCLEAN, At(node, level) + ": invalid child state");
      if (s == kAllocated && out) out->push_back({child, level - 1});
      if (s == kPartitioned) {
        auto stored = op.StoredMask(node, level, i);
        auto actual = op.NodeMask(child, level - 1);
        if (!stored.ok()) return stored.status();
        if (!actual.ok()) return actual.status();
        if (*stored != *actual)
          return Status::Error(EUCLEAN, At(node, level) + ": availability of child " + std::to_string(i) +
                                            " is stale");
      }
    }
    return Status::Ok();
  });
}

Status Partitions::Reconcile() {
  medium::PoolLock lock(pool_, medium::LockId::kSpace);
  Op op(this);
  uint64_t root = op.Root();
  if (root == kEmpty) return vm_->Unmap(0, LevelSize(top_));
  if (root != kPartitioned) return Status::Ok();
  return ForEachNode(op, 0, top_, [&](uint64_t node, int level, uint64_t w0) -> Status {
    if (level == 3) {
      // Free small partitions must read as zero; a crash between a free and
      // its discard can leave old bytes behind.
      auto k = Op::L3Kind(node, w0);
      if (!k.ok()) return k.status();
      int kind = *k;
      int n = Op::L3Children(kind);
      for (int i = 1; i < n; i++) {
        auto bits = op.Get(Op::Word(node, 3, 1 + i / 64));
        if (!bits.ok()) return bits.status();
        if ((*bits >> (i % 64)) & 1) continue;
        uint64_t child = node + uint64_t(i) * LevelSize(kind);
        bool dirty = false;
        for (uint64_t p = child; p < child + LevelSize(kind) && !dirty; p += kPageSize) {
          char* ptr = vm_->PoolPtr(p);
          if (ptr == nullptr) continue;
          for (uint64_t b = 0; b < kPageSize && !dirty; b += 8) dirty = *reinterpret_cast<uint64_t*>(ptr + b) != 0;
        }
        if (dirty) MAPFS_RETURN_IF_ERROR(vm_->Discard(child, LevelSize(kind)));
      }
      return Status::Ok();
    }
    for (int i = 1; i < 8; i++)
      if (Op::StateOf(w0, i) == kEmpty)
        MAPFS_RETURN_IF_ERROR(vm_->Unmap(node + uint64_t(i) * LevelSize(level - 1), LevelSize(level - 1)));
    return Status::Ok();
  });
}

}  // namespace mapfs::space
