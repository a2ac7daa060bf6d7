// fsck of block-mapped pools: the mapping area against the inodes (the
// mapper's Check judges its own structure; this judges whom it maps for).
//
// What must hold on an unmounted pool (block_file.cc states why):
//  - every mapped block belongs to one file block of one inode;
//  - that inode is a live regular file (unlinking frees the blocks before
//    the inode), or a mount slot's staging inode while a mount is live;
//  - no block is mapped at or past the file's blocks_end.
// A live file's holes below its size are not findings: sparse files,
// ftruncate up and hole punching leave them on purpose.
#include <sys/stat.h>

#include <algorithm>
#include <map>

#include "file/file_data.h"
#include "map/mapper.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "medium/shared.h"

namespace mapfs::file {

using meta::format::Inode;

namespace {
constexpr int kShift = map::format::kBlockShift;

struct Span {
  uint64_t lo = ~uint64_t{0}, hi = 0, blocks = 0;
  void Add(uint64_t f, uint64_t n) {
    lo = std::min(lo, f);
    hi = std::max(hi, f + n);
    blocks += n;
  }
};
}  // namespace

Status FileData::CheckBlocks(const InodeFn& inode, bool alone, std::vector<BlockFinding>* out) {
  if (!mapper_) return Status::Ok();
  const uint64_t nblocks = mapper_->nblocks(), files = FileInoLimit();
  std::vector<uint64_t> seen((nblocks + 63) / 64, 0);
  std::map<uint64_t, Span> twice, orphaned, past, staging;
  Status st = mapper_->ForEachMapping([&](map::Ino ino, map::FileBlock f, map::Block b, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
      uint64_t blk = b.v + i;
      if (blk >= nblocks) break;  // the mapper's Check names it
      uint64_t bit = uint64_t{1} << (blk % 64);
      if (seen[blk / 64] & bit) twice[ino].Add(f.v + i, 1);
      seen[blk / 64] |= bit;
    }
    if (ino >= files && ino < files + medium::kMaxMounts) {
      if (alone) staging[ino].Add(f.v, n);
      return;
    }
    const Inode* in = ino < files ? inode(ino) : nullptr;
    if (in == nullptr || in->mode == 0 || !S_ISREG(in->mode)) {
      orphaned[ino].Add(f.v, n);
      return;
    }
    uint64_t end = medium::Load64(&in->blocks_end) >> kShift;  // whole MiB steps: block aligned
    if (f.v + n > end) past[ino].Add(std::max(f.v, end), f.v + n - std::max(f.v, end));
  });
  if (!st.ok()) return st;
  auto emit = [&](std::map<uint64_t, Span>& m, bool freeable, const std::string& why) {
    for (auto& [ino, s] : m) {
      BlockFinding bf;
      bf.ino = ino;
      bf.from = s.lo;
      bf.to = s.hi;
      bf.blocks = s.blocks;
      bf.freeable = freeable;
      bf.what = "mapping area: inode " + std::to_string(ino) + ": " + std::to_string(s.blocks) +
                " blocks mapped at file blocks " + std::to_string(s.lo) + ".." + std::to_string(s.hi - 1) + " " + why;
      out->push_back(std::move(bf));
    }
  };
  emit(twice, false, "are also mapped for another file block (mapped twice)");
  // Inode numbers the area has no room for come only from damage the
  // design's Check reports; this layer cannot free them.
  for (auto it = orphaned.begin(); it != orphaned.end();) {
    if (it->first != 0 && it->first < mapper_->max_ino()) {
      ++it;
      continue;
    }
    BlockFinding bf;
    bf.ino = it->first;
    bf.blocks = it->second.blocks;
    bf.what = "mapping area: " + std::to_string(bf.blocks) + " blocks mapped for inode number " +
              std::to_string(bf.ino) + ", outside the area's range";
    out->push_back(std::move(bf));
    it = orphaned.erase(it);
  }
  emit(orphaned, true, "but it is not a live regular file (orphaned mapping)");
  emit(past, true, "at or past its blocks_end");
  emit(staging, true, "as staging blocks, yet no mount is live");
  return Status::Ok();
}

Status FileData::RepairBlock(const BlockFinding& f) {
  if (!mapper_ || !f.freeable || f.from >= f.to) return Status::Ok();
  map::Cursor c{};
  // The same path as every free: zeroed and fenced before the unmapping
  // (free blocks read as zero), under the kMap lock.
  return FreeBlocks(&c, f.ino, f.from, f.to << kShift);
}

}  // namespace mapfs::file
