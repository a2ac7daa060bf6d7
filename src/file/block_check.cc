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

#include "common/units.h"
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

namespace {
bool BlocksEndValid(uint64_t be, uint64_t max_size) {
  return (be & (map::format::kBlockSize - 1)) == 0 && be <= AlignUp(max_size, uint64_t{1} << 20);
}
}  // namespace

std::string FileData::CheckBlockSize(uint64_t, const Inode* in) const {
  if (!mapper_) return "";
  const uint64_t size = medium::Load64(&in->size), be = medium::Load64(&in->blocks_end);
  if (!BlocksEndValid(be, max_size_))
    return "blocks_end " + std::to_string(be) + " is not a multiple of 4 KiB within the largest file (" +
           std::to_string(max_size_) + " bytes)";
  if (size > be)
    return "size " + std::to_string(size) + " is past its blocks_end " + std::to_string(be) +
           " (writes, fallocate and truncation raise blocks_end before the size): the size is damaged";
  return "";
}

Status FileData::RepairBlockSize(uint64_t ino, Inode* in, std::string* what) {
  if (!mapper_ || CheckBlockSize(ino, in).empty()) return Status::Ok();
  const uint64_t size = in->size, be = in->blocks_end, bs = map::format::kBlockSize;
  // The end of the last mapped block below the size: one walk of the
  // file's mappings, bounded by the area, not by the (maybe huge) size.
  auto last_r = MappedEnd(ino, std::min(size, map::format::kMaxFileBlock << kShift));
  if (!last_r.ok()) return last_r.status();
  const uint64_t last = *last_r;
  // Neither the size nor blocks_end can be trusted, the mapping can: keep
  // every mapped byte below the size, nothing past the last of them.
  const uint64_t new_size = std::min({size, last, max_size_});
  const uint64_t new_end = BlocksEndValid(be, max_size_) ? std::max(be, AlignUp(new_size, bs)) : AlignUp(new_size, bs);
  // Each store keeps what the other already says: raising blocks_end goes
  // first, lowering it last.
  if (new_end >= be) {
    medium::Store64(&in->blocks_end, new_end);
    medium::Persist(&in->blocks_end, 8);
  }
  medium::Store64(&in->size, new_size);
  medium::Persist(&in->size, 8);
  if (new_end < be) {
    medium::Store64(&in->blocks_end, new_end);
    medium::Persist(&in->blocks_end, 8);
  }
  *what = "inode " + std::to_string(ino) + ": size " + std::to_string(size) + " -> " + std::to_string(new_size) +
          ", blocks_end " + std::to_string(be) + " -> " + std::to_string(new_end) +
          " (the end of its last mapped block below the size)";
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
