// Internal to the space layer: one allocator operation over the headers.
#pragma once

#include <bit>
#include <string>
#include <utility>
#include <vector>

#include "common/units.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "space/partitions.h"
#include "vm/vm.h"

namespace mapfs::space {

using namespace format;  // NOLINT: the on-media names are this layer's vocabulary

// ---------------------------------------------------------------- shared
// The space layer's part of the pool's shared-memory segment
// (medium::SharedState::space). Volatile: zero after an exclusive open.
//
// A Free commits the header change first and gives the range's pages back
// afterwards. If its process dies in between, the next opener alone repairs
// that (Reconcile), but processes that keep the pool open only get the dead
// holder's redo record replayed: they would hand out the partition still
// backed by the dead process's data. So a Free records the work it has left
// here, under the space lock, before committing; whoever takes the lock next
// finds the record only if its writer died, and finishes the work.
struct SpaceShared {
  static constexpr int kMaxRanges = 3 * (kMaxLevel + 2);
  struct Range {
    uint64_t voff, len, discard;  // discard: zero in place, else unmap
  };
  std::atomic<uint64_t> pending;  // nonzero while a Free is unfinished
  uint64_t voff;                  // the partition being freed
  uint64_t count;
  Range ranges[kMaxRanges];
};
static_assert(sizeof(SpaceShared) <= medium::kSpaceSharedBytes);
inline SpaceShared* SpaceSharedOf(medium::Pool* pool) {
  return reinterpret_cast<SpaceShared*>(pool->shared()->space);
}

// ---------------------------------------------------------------- Op
// One allocator operation: reads see the operation's own pending writes
// (an overlay), and Commit() turns the writes into one redo transaction.
class Partitions::Op {
 public:
  explicit Op(Partitions* p) : pool_(p->pool_), vm_(p->vm_) {}

  Result<uint64_t> Get(uint64_t wvoff) {
    auto off = vm_->Translate(wvoff);
    if (!off.ok()) return Status::Error(EUCLEAN, "partition header at virtual offset " + std::to_string(wvoff) +
                                                     " is not backed");
    for (auto it = writes_.rbegin(); it != writes_.rend(); ++it)
      if (it->first == *off) return it->second;
    return medium::Load64(pool_->at<uint64_t>(*off));
  }
  Status Set(uint64_t wvoff, uint64_t v) {
    auto off = vm_->Translate(wvoff);
    if (!off.ok()) return off.status();
    writes_.push_back({*off, v});
    return Status::Ok();
  }
  uint64_t Root() {
    uint64_t off = medium::format::kStateOff + offsetof(medium::format::PoolState, space_root);
    for (auto it = writes_.rbegin(); it != writes_.rend(); ++it)
      if (it->first == off) return it->second;
    return medium::Load64(pool_->at<uint64_t>(off));
  }
  void SetRoot(uint64_t v) {
    writes_.push_back({medium::format::kStateOff + offsetof(medium::format::PoolState, space_root), v});
  }
  Status Commit() {
    medium::Tx tx;
    for (auto& [off, v] : writes_) tx.Put64(off, v);
    return pool_->redo().Commit(tx);
  }

  // ---- header accessors
  static uint64_t Word(uint64_t node, int level, int w) { return node + HeaderOffset(level) + 8 * uint64_t(w); }

  Status CheckTag(uint64_t node, int level, uint64_t w0) {
    if ((w0 >> 32) != kTag || static_cast<int>((w0 >> 16) & 0xffff) != level)
      return Status::Error(EUCLEAN, "partition header of the L" + std::to_string(level) +
                                        " partition at virtual offset " + std::to_string(node) + " is damaged");
    return Status::Ok();
  }
  Result<uint64_t> W0(uint64_t node, int level) {
    auto w0 = Get(Word(node, level, 0));
    if (!w0.ok()) return w0;
    MAPFS_RETURN_IF_ERROR(CheckTag(node, level, *w0));
    return w0;
  }
  static uint64_t StateOf(uint64_t w0, int i) { return (w0 >> (2 * i)) & 3; }
  static uint64_t WithState(uint64_t w0, int i, uint64_t s) {
    return (w0 & ~(uint64_t{3} << (2 * i))) | (s << (2 * i));
  }
  Result<uint16_t> StoredMask(uint64_t node, int level, int i) {
    auto w = Get(Word(node, level, 1 + i / 4));
    if (!w.ok()) return w.status();
    return static_cast<uint16_t>(*w >> (16 * (i % 4)));
  }
  Status SetStoredMask(uint64_t node, int level, int i, uint16_t m) {
    auto w = Get(Word(node, level, 1 + i / 4));
    if (!w.ok()) return w.status();
    int sh = 16 * (i % 4);
    return Set(Word(node, level, 1 + i / 4), (*w & ~(uint64_t{0xffff} << sh)) | (uint64_t{m} << sh));
  }
  static int L3Children(int kind) { return 512 >> (3 * kind); }
  // The level (0..2) of an L3 node's children, from its header word 0. The
  // word comes from the pool: a value out of range is damage, never a shift.
  static Result<int> L3Kind(uint64_t node, uint64_t w0) {
    uint64_t kind = w0 & 0xffff;
    if (kind > 2) return Status::Error(EUCLEAN, "L3 header with bad kind at virtual offset " + std::to_string(node));
    return static_cast<int>(kind);
  }

  // Availability mask of a Partitioned node, from its header.
  Result<uint16_t> NodeMask(uint64_t node, int level) {
    auto w0 = W0(node, level);
    if (!w0.ok()) return w0.status();
    if (level == 3) {
      auto kind = L3Kind(node, *w0);
      if (!kind.ok()) return kind.status();
      int n = L3Children(*kind);
      for (int w = 0; w < (n + 63) / 64; w++) {
        auto bits = Get(Word(node, 3, 1 + w));
        if (!bits.ok()) return bits.status();
        uint64_t valid = n - 64 * w >= 64 ? ~uint64_t{0} : (uint64_t{1} << (n - 64 * w)) - 1;
        if ((~*bits & valid) != 0) return static_cast<uint16_t>(1u << *kind);
      }
      return uint16_t{0};
    }
    uint16_t m = 0;
    for (int i = 0; i < 8; i++) {
      uint64_t s = StateOf(*w0, i);
      if (s == kEmpty) m |= EmptyMask(level - 1);
      if (s == kPartitioned) {
        auto sm = StoredMask(node, level, i);
        if (!sm.ok()) return sm.status();
        m |= *sm;
      }
    }
    return m;
  }

  // Is a Partitioned node free of allocations (only its header chain)?
  Result<bool> IsEmpty(uint64_t node, int level) {
    auto w0 = W0(node, level);
    if (!w0.ok()) return w0.status();
    if (level == 3) {
      for (int w = 0; w < 8; w++) {
        auto bits = Get(Word(node, 3, 1 + w));
        if (!bits.ok()) return bits.status();
        if (*bits != (w == 0 ? 1u : 0u)) return false;
      }
      return true;
    }
    if (StateOf(*w0, 0) != kPartitioned) return false;
    for (int i = 1; i < 8; i++)
      if (StateOf(*w0, i) != kEmpty) return false;
    return IsEmpty(node, level - 1);
  }

  // Writes a fresh Partitioned header for `node` and its chain of first
  // children down to L3 (whose children will be of level `kind`). Returns
  // the node's availability mask.
  Result<uint16_t> InitNode(uint64_t node, int level, uint64_t kind) {
    MAPFS_RETURN_IF_ERROR(vm_->Populate(node, kPageSize));
    if (level == 3) {
      MAPFS_RETURN_IF_ERROR(Set(Word(node, 3, 0), (kTag << 32) | (uint64_t{3} << 16) | kind));
      for (int w = 0; w < 8; w++) MAPFS_RETURN_IF_ERROR(Set(Word(node, 3, 1 + w), w == 0 ? 1 : 0));
      return static_cast<uint16_t>(1u << kind);
    }
    auto m0 = InitNode(node, level - 1, kind);
    if (!m0.ok()) return m0;
    MAPFS_RETURN_IF_ERROR(Set(Word(node, level, 0), (kTag << 32) | (uint64_t(level) << 16) | kPartitioned));
    MAPFS_RETURN_IF_ERROR(Set(Word(node, level, 1), *m0));
    MAPFS_RETURN_IF_ERROR(Set(Word(node, level, 2), 0));
    MAPFS_RETURN_IF_ERROR(Set(Word(node, level, 3), 0));
    return static_cast<uint16_t>(*m0 | EmptyMask(level - 1));
  }

  struct Node {
    uint64_t voff;
    int level;
  };
  // Refreshes the masks parents keep for their Partitioned children along a
  // root-to-leaf path.
  Status FixMasks(const std::vector<Node>& path) {
    for (size_t j = path.size(); j-- > 1;) {
      const Node& n = path[j];
      const Node& parent = path[j - 1];
      int idx = static_cast<int>((n.voff - parent.voff) >> LevelShift(parent.level - 1));
      auto w0 = W0(parent.voff, parent.level);
      if (!w0.ok()) return w0.status();
      if (StateOf(*w0, idx) != kPartitioned) continue;
      auto m = NodeMask(n.voff, n.level);
      if (!m.ok()) return m.status();
      MAPFS_RETURN_IF_ERROR(SetStoredMask(parent.voff, parent.level, idx, *m));
    }
    return Status::Ok();
  }

  std::vector<std::pair<uint64_t, uint64_t>> unmaps, discards;

 private:
  medium::Pool* pool_;
  vm::Vm* vm_;
  std::vector<std::pair<uint64_t, uint64_t>> writes_;  // (pool offset, value)
};

}  // namespace mapfs::space
