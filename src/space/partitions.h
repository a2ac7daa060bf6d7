// Partitions: ctFS's partition allocator over the vm region.
//
// Alloc(level) returns the virtual offset of a partition of that level,
// chosen by a bounded descent guided by availability masks (at most one
// header per level is read to decide; no search). Free(voff) returns it and
// merges empty parents back. Every change to the headers is one redo
// transaction, so a crash leaves the hierarchy either before or after the
// operation. Safe across threads and processes (the pool's space lock).
//
// Backing: headers live in the virtual region, so splitting a partition
// populates the chunk holding its header page. Freeing a partition of L3 or
// above unmaps its pages; freeing a smaller one zeroes it in place, so a
// newly allocated partition always reads as zero.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "space/partition_format.h"

namespace mapfs::medium {
class Pool;
}
namespace mapfs::vm {
class Vm;
}

namespace mapfs::space {

struct SpaceStats {
  int top_level = 0;
  std::array<uint64_t, format::kMaxLevel + 1> allocated{};    // A partitions per level
  std::array<uint64_t, format::kMaxLevel + 1> partitioned{};  // P partitions per level
  uint64_t allocated_bytes = 0;  // virtual bytes in A partitions
  uint16_t root_mask = 0;        // levels still allocatable
  int availability_level = -1;   // highest allocatable level, -1 if full
};

struct PartitionInfo {
  uint64_t voff;
  int level;
};

class Partitions {
 public:
  // Opens the allocator; when the pool needs recovery, also returns pages
  // still backing Empty partitions (a crash between free and unmap).
  static Result<std::unique_ptr<Partitions>> Open(medium::Pool* pool, vm::Vm* vm);

  int top_level() const { return top_; }
  // A free partition of `level` (0 .. top level - 1); ENOSPC if none.
  Result<uint64_t> Alloc(int level);
  // Frees the partition that starts at `voff`. EINVAL if none does.
  Status Free(uint64_t voff);
  // Level of the allocated partition at `voff`, or EINVAL.
  Result<int> LevelOf(uint64_t voff);

  SpaceStats Stats();
  // Verifies every invariant of the hierarchy (tags, child 0 rules, masks);
  // fills `out` with the allocated partitions when given.
  Status Check(std::vector<PartitionInfo>* out = nullptr);
  // Recovery pass (also run by Open after a crash).
  Status Reconcile();

 public:
  class Op;  // one operation over the headers (partition_op.h, internal)

 private:
  Partitions(medium::Pool* pool, vm::Vm* vm);
  Status ReconcileNode(uint64_t voff, int level);
  // Callers hold the space lock.
  Result<int> LevelOfLocked(uint64_t voff);
  Status FinishDeadFree();

  medium::Pool* pool_;
  vm::Vm* vm_;
  int top_;
};

}  // namespace mapfs::space
