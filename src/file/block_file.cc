// The block engine of FileData: regular files of a block-mapped pool
// (`mapfs mkfs --files hashfs|cuckoo|extent|radix`, issue 14) keep their
// bytes in 4 KiB blocks of the pool's mapping area, found through a
// map::Mapper, instead of in a contiguous partition.
//
// Invariants:
//  - Free blocks read as zero. The area is zero at mkfs, and a block is
//    zeroed (and the zeroes fenced) before the mapper frees it. So a block
//    that Insert hands out shows no former file's bytes, even when a crash
//    makes the mapping durable before this call's data.
//  - Bytes past the size are undefined in mapped blocks (a crashed write,
//    the tail of a truncation): every call that moves the size up zeroes
//    what it exposes and does not write itself, before the new size.
//  - No block at or past the inode's blocks_end is mapped: it is raised
//    (durably, 1 MiB at a time) before blocks past it are inserted, so
//    recovery frees what a crashed write left past the size by looking
//    only there (TrimBlocks), and a freed inode's blocks are all zeroed.
//  - The size moves up only after the data (fenced in sync/strict, ordered
//    by the same fence in posix); it moves down before blocks are freed, so
//    a crash never leaves a size over blocks that another file now owns.
//  - A mapped file's blocks (a process maps them: MapPool) are never freed
//    while it lives: truncation and hole punching zero them instead.
//
// Concurrency: the caller holds the inode's lock (read for reads). The
// mapper's own mutexes serialise threads of this process only; every
// mapper change, and cuckoo lookups (displacement moves other inodes'
// entries), also take the pool's kMap lock so that processes sharing the
// pool never interleave inside the mapping area. Cursors live for one call:
// another process may remove blocks between calls, which a cursor kept
// across calls would not see.
//
// Strict overwrites are all-or-nothing. Small ones put the new bytes, size
// and times in one redo transaction. Larger ones write the bytes once to
// staging blocks (mapped under this mount's staging inode number, past the
// files' numbers), then commit one transaction of copy records (staging ->
// the file's blocks, 24 bytes each, merged where both sides continue) with
// the size and times; the copies are applied, and replayed after a crash,
// from the staging blocks, which are zeroed and freed only once the
// transaction is retired. A write whose copy records overflow the log
// (tens of MiB scattered over a hash table) commits in pieces.
#include <linux/falloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "common/units.h"
#include "file/file_data.h"
#include "map/mapper.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "medium/redo_log.h"
#include "medium/shared.h"

namespace mapfs::file {

using meta::format::Inode;

namespace {
constexpr uint64_t kBlock = map::format::kBlockSize;
constexpr int kShift = map::format::kBlockShift;
constexpr uint64_t kHole = ~uint64_t{0};

#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;  // Linux 5.14; older kernels refuse it (EINVAL): best effort
#endif

// Whether lookups need the pool's kMap lock (see the header comment).
bool LookupsLock(const map::Mapper& m) { return m.kind() == map::Kind::kCuckoo; }
}  // namespace

void FileData::UseBlocks(std::unique_ptr<map::Mapper> mapper) {
  mapper_ = std::move(mapper);
  populated_ = std::make_unique<std::atomic<uint64_t>[]>(pool_->header().map_len / kChunkSize / 64 + 1);
}

uint64_t FileData::FileInoLimit() const { return mapper_->max_ino() - medium::kMaxMounts; }

int FileData::LookupBlock(map::Cursor* c, uint64_t ino, uint64_t fblk, map::Mapping* m) {
  if (!LookupsLock(*mapper_)) return mapper_->Lookup(c, ino, map::FileBlock(fblk), m);
  medium::PoolLock l(pool_, medium::LockId::kMap);
  return mapper_->Lookup(c, ino, map::FileBlock(fblk), m);
}

template <typename Fn>
Status FileData::ForRuns(map::Cursor* c, uint64_t ino, uint64_t from, uint64_t to, Fn&& fn) {
  // An inode number the mapping area has no room for has no blocks.
  if (ino == 0 || ino >= mapper_->max_ino()) {
    if (from < to) return fn(from, kHole, to - from);
    return Status::Ok();
  }
  uint64_t p = from;
  while (p < to) {
    map::Mapping m;
    uint64_t fblk = p >> kShift;
    int rc = LookupBlock(c, ino, fblk, &m);
    if (rc == -EINVAL && fblk > map::format::kMaxFileBlock - 1) return fn(p, kHole, to - p);
    if (rc != 0) return Status::Error(-rc, "inode " + std::to_string(ino) + ": file block " + std::to_string(fblk) +
                                               (rc == -EUCLEAN ? ": mapping damaged" : ": mapping lookup failed"));
    uint64_t run_end = std::min(to, (fblk + std::max<uint64_t>(m.len, 1)) << kShift);
    uint64_t pool_off = m.mapped ? mapper_->block_offset(m.blk) + (p - (fblk << kShift)) : kHole;
    if (m.mapped && (pool_off < pool_->header().map_off || pool_off + (run_end - p) > pool_->size()))
      return Status::Error(EUCLEAN, "inode " + std::to_string(ino) + ": block outside the mapping area");
    MAPFS_RETURN_IF_ERROR(fn(p, pool_off, run_end - p));
    p = run_end;
  }
  return Status::Ok();
}

template <typename Fn>
Status FileData::ForMapped(map::Cursor* c, uint64_t ino, uint64_t from, uint64_t to, Fn&& fn) {
  if (from >= to || ino == 0 || ino >= mapper_->max_ino()) return Status::Ok();
  const uint64_t b0 = from >> kShift, b1 = (to + kBlock - 1) >> kShift;
  if (b0 >= map::format::kMaxFileBlock) return Status::Ok();
  const uint64_t area_lo = pool_->header().map_off, pool_end = pool_->size();
  auto each = [&](map::FileBlock f, map::Block b, uint64_t n) -> Status {
    uint64_t lo = std::max(from, f.v << kShift), hi = std::min(to, (f.v + n) << kShift);
    if (lo >= hi) return Status::Ok();
    uint64_t po = mapper_->block_offset(b) + (lo - (f.v << kShift));
    if (po < area_lo || po + (hi - lo) > pool_end)
      return Status::Error(EUCLEAN, "inode " + std::to_string(ino) + ": block outside the mapping area");
    return fn(lo, po, hi - lo);
  };
  auto walk = [&] {
    return mapper_->ForEachMappingIn(c, ino, map::FileBlock(b0), b1 - b0, each);
  };
  if (!LookupsLock(*mapper_)) return walk();
  medium::PoolLock l(pool_, medium::LockId::kMap);
  return walk();
}

Result<uint64_t> FileData::MappedEnd(uint64_t ino, uint64_t to) {
  uint64_t last = 0;
  map::Cursor c{};
  MAPFS_RETURN_IF_ERROR(ForMapped(&c, ino, 0, to, [&](uint64_t p, uint64_t, uint64_t n) {
    last = std::max(last, AlignUp(p + n, kBlock));
    return Status::Ok();
  }));
  return last;
}

Status FileData::MapBlocks(map::Cursor* c, uint64_t ino, uint64_t from, uint64_t to) {
  if (from >= to) return Status::Ok();
  if (ino == 0 || ino >= mapper_->max_ino()) return Status::Error(EINVAL, "no mapping for inode 0");
  uint64_t b0 = from >> kShift, b1 = (to + kBlock - 1) >> kShift;
  if (b1 > map::format::kMaxFileBlock) return Status::Error(EFBIG, "write past the largest block-mapped file");
  // A range longer than the whole block area cannot be mapped (its holes
  // outnumber the free blocks): ENOSPC now, not after a walk of its holes.
  if (b1 - b0 > mapper_->nblocks()) return Status::Error(ENOSPC, "the mapping area is full");
  // Holes of the range, then one Insert per hole (contiguous where the
  // design and free space allow).
  std::vector<std::pair<uint64_t, uint64_t>> holes;
  MAPFS_RETURN_IF_ERROR(ForRuns(c, ino, b0 << kShift, b1 << kShift, [&](uint64_t p, uint64_t po, uint64_t n) {
    if (po == kHole) {
      if (!holes.empty() && holes.back().first + holes.back().second == (p >> kShift))
        holes.back().second += n >> kShift;
      else
        holes.push_back({p >> kShift, n >> kShift});
    }
    return Status::Ok();
  }));
  if (holes.empty()) return Status::Ok();
  {
    medium::PoolLock l(pool_, medium::LockId::kMap);
    for (auto [fb, count] : holes) MAPFS_RETURN_IF_ERROR(mapper_->Insert(c, ino, map::FileBlock(fb), count));
  }
  // A pool takes memory as it is used: the new blocks' memory is taken now
  // (a chunk at a time), so that a full medium (a tmpfs at its size) is
  // ENOSPC here, not SIGBUS at the first store.
  Status st;
  for (auto [fb, count] : holes) {
    if (!st.ok()) break;
    st = ForRuns(c, ino, fb << kShift, (fb + count) << kShift, [&](uint64_t, uint64_t po, uint64_t n) {
      return po == kHole ? Status::Ok() : Backed(po, n);
    });
  }
  if (st.ok()) return st;
  medium::PoolLock l(pool_, medium::LockId::kMap);
  for (auto [fb, count] : holes) (void)mapper_->Remove(c, ino, map::FileBlock(fb), count);
  return st;
}

Status FileData::Backed(uint64_t pool_off, uint64_t len) {
  const uint64_t area = pool_->header().map_off;
  for (uint64_t ch = (pool_off - area) / kChunkSize; ch <= (pool_off + len - 1 - area) / kChunkSize; ch++) {
    std::atomic<uint64_t>& w = populated_[ch / 64];
    uint64_t bit = uint64_t{1} << (ch % 64);
    if (w.load(std::memory_order_relaxed) & bit) continue;
    if (::madvise(pool_->base() + area + ch * kChunkSize, kChunkSize, kPopulateWrite) != 0 && errno != EINVAL)
      return Status::Error(ENOSPC, "the pool's backing file system is full");
    w.fetch_or(bit, std::memory_order_relaxed);
  }
  return Status::Ok();
}

Status FileData::ZeroBlocks(map::Cursor* c, uint64_t ino, uint64_t from, uint64_t to) {
  return ForMapped(c, ino, from, to, [&](uint64_t, uint64_t po, uint64_t n) {
    medium::ZeroNt(pool_->base() + po, n);
    return Status::Ok();
  });
}

Status FileData::FreeBlocks(map::Cursor* c, uint64_t ino, uint64_t fblk, uint64_t to) {
  if (ino == 0 || ino >= mapper_->max_ino()) return Status::Ok();
  uint64_t from = fblk << kShift, end = AlignUp(to, kBlock);
  if (from >= end) return Status::Ok();
  MAPFS_RETURN_IF_ERROR(ZeroBlocks(c, ino, from, end));
  medium::Fence();
  medium::PoolLock l(pool_, medium::LockId::kMap);
  // A bounded range (no block lies past `to`: blocks_end, or the staging
  // blocks' first hole): hashfs probes for each block instead of sweeping
  // its whole table, as it does for "to the end".
  return mapper_->Remove(c, ino, map::FileBlock(fblk), (end - from) >> kShift);
}

Status FileData::ReleaseBlocks(uint64_t ino, const Inode* in) {
  if (!mapper_) return Status::Ok();
  map::Cursor c{};
  return FreeBlocks(&c, ino, 0, std::max(in->size, in->blocks_end));
}

void FileData::RaiseBlocksEnd(Inode* in, uint64_t end) {
  if (end <= in->blocks_end) return;
  medium::Store64(&in->blocks_end, AlignUp(end, uint64_t{1} << 20));
  medium::Persist(&in->blocks_end, 8);
}

Status FileData::TrimBlocks(uint64_t ino, Inode* in) {
  uint64_t keep = AlignUp(in->size, kBlock);
  if (in->blocks_end <= keep) return Status::Ok();
  map::Cursor c{};
  MAPFS_RETURN_IF_ERROR(ZeroBlocks(&c, ino, keep, in->blocks_end));
  medium::Fence();
  {
    medium::PoolLock l(pool_, medium::LockId::kMap);
    MAPFS_RETURN_IF_ERROR(mapper_->Remove(&c, ino, map::FileBlock(keep >> kShift), (in->blocks_end - keep) >> kShift));
  }
  medium::Store64(&in->blocks_end, keep);
  medium::Persist(&in->blocks_end, 8);
  return Status::Ok();
}

Result<size_t> FileData::BlockRead(uint64_t ino, const Inode* in, void* buf, size_t n, uint64_t off) {
  uint64_t size = medium::Load64(&in->size);
  if (off >= size || n == 0) return size_t{0};
  n = std::min<uint64_t>(n, size - off);
  char* dst = static_cast<char*>(buf);
  map::Cursor c{};
  MAPFS_RETURN_IF_ERROR(ForRuns(&c, ino, off, off + n, [&](uint64_t p, uint64_t po, uint64_t len) {
    if (po == kHole)
      std::memset(dst + (p - off), 0, len);
    else
      std::memcpy(dst + (p - off), pool_->base() + po, len);
    return Status::Ok();
  }));
  return n;
}

Result<size_t> FileData::BlockWrite(uint64_t ino, Inode* in, uint64_t in_voff, const void* buf, size_t n,
                                    uint64_t off, Mode mode) {
  if (off > max_size_ || n > max_size_ - off) return Status::Error(EFBIG, "write past the largest file size");
  uint64_t size = in->size, end = off + n;
  if (ino == 0 || ino >= FileInoLimit())
    return Status::Error(ENOSPC, "inode " + std::to_string(ino) + " is past the " + std::to_string(FileInoLimit()) +
                                     " files the mapping area was made for");
  map::Cursor c{};
  RaiseBlocksEnd(in, end);
  MAPFS_RETURN_IF_ERROR(MapBlocks(&c, ino, off, end));
  const char* src = static_cast<const char*>(buf);
  if (mode == Mode::kStrict && off < size && n > pool_->redo().capacity() / 2) {
    MAPFS_RETURN_IF_ERROR(BlockStagedOverwrite(&c, ino, in_voff, src, n, off, std::max(size, end)));
    return n;
  }
  if (mode == Mode::kStrict && off < size) {
    // Small: the new bytes themselves go through the redo log.
    uint64_t piece_max = pool_->redo().capacity() / 2;
    uint64_t p = off;
    while (p < end) {
      uint64_t stop = std::min(end, p + piece_max);
      medium::Tx tx;
      MAPFS_RETURN_IF_ERROR(ForRuns(&c, ino, p, stop, [&](uint64_t q, uint64_t po, uint64_t len) {
        if (po == kHole) return Status::Error(EUCLEAN, "block vanished under the inode's lock");
        for (uint64_t k = 0; k < len;) {  // one record per block
          uint64_t take = std::min(len - k, kBlock - ((q + k) & (kBlock - 1)));
          tx.PutBytesRef(po + k, src + (q + k - off), take);
          k += take;
        }
        return Status::Ok();
      }));
      if (stop == end)
        MAPFS_RETURN_IF_ERROR(PutSizeAndTimes(in_voff, std::max(size, end), static_cast<uint64_t>(NowNs()), &tx));
      MAPFS_RETURN_IF_ERROR(pool_->redo().Commit(tx));
      p = stop;
    }
    return n;
  }
  // Exposed bytes between the old end and the write read as zero.
  if (off > size) MAPFS_RETURN_IF_ERROR(ZeroBlocks(&c, ino, size, off));
  MAPFS_RETURN_IF_ERROR(ForRuns(&c, ino, off, end, [&](uint64_t p, uint64_t po, uint64_t len) {
    if (po == kHole) return Status::Error(EUCLEAN, "block vanished under the inode's lock");
    medium::CopyNt(pool_->base() + po, src + (p - off), len);
    return Status::Ok();
  }));
  // As for contiguous files: a larger size never becomes durable before the
  // data (the blocks past the old end may hold this file's older bytes).
  bool fenced = end > size;
  if (fenced) medium::Fence();
  PublishSize(in, std::max(size, end), mode, fenced);
  return n;
}

Status FileData::ClearStaging(uint64_t s_ino) {
  // Staging blocks fill file blocks 0, 1, ... : the first hole ends them.
  map::Cursor c{};
  uint64_t end = 0;
  for (;;) {
    map::Mapping m;
    int rc = LookupBlock(&c, s_ino, end >> kShift, &m);
    if (rc != 0) return Status::Error(-rc, "staging blocks: mapping lookup failed");
    if (!m.mapped) break;
    end += m.len << kShift;
  }
  if (end == 0) return Status::Ok();
  return FreeBlocks(&c, s_ino, 0, end);
}

Status FileData::ClearAllStaging() {
  if (!mapper_) return Status::Ok();
  // After a crash the first hole does not end a slot's staging blocks: an
  // Insert or Remove of many blocks fences once, so a crash may keep any
  // subset of its stores (found by the crash-state enumeration and the
  // kills once fsck looked for staging blocks). So each slot's last mapped
  // block is found first: one pass over a global table, or a walk of the
  // slot's tree, whose holes are skipped a subtree at a time.
  const uint64_t first = FileInoLimit();
  std::vector<uint64_t> end(medium::kMaxMounts, 0);
  if (mapper_->kind() == map::Kind::kHashFs || mapper_->kind() == map::Kind::kCuckoo) {
    MAPFS_RETURN_IF_ERROR(mapper_->ForEachMapping([&](map::Ino ino, map::FileBlock f, map::Block, uint64_t n) {
      if (ino >= first && ino - first < end.size()) end[ino - first] = std::max(end[ino - first], f.v + n);
    }));
  } else {
    for (size_t slot = 0; slot < end.size(); slot++) {
      map::Cursor c{};
      for (uint64_t f = 0; f < map::format::kMaxFileBlock;) {
        map::Mapping m;
        int rc = mapper_->Lookup(&c, first + slot, map::FileBlock(f), &m);
        if (rc != 0) return Status::Error(-rc, "staging blocks: mapping lookup failed");
        uint64_t n = std::max<uint64_t>(m.len, 1);
        if (m.mapped) end[slot] = f + n;
        f += n;
      }
    }
  }
  for (size_t slot = 0; slot < end.size(); slot++) {
    if (end[slot] == 0) continue;
    map::Cursor c{};
    MAPFS_RETURN_IF_ERROR(FreeBlocks(&c, first + slot, 0, end[slot] << kShift));
  }
  return Status::Ok();
}

Status FileData::BlockStagedOverwrite(map::Cursor* c, uint64_t ino, uint64_t in_voff, const char* src, size_t n,
                                      uint64_t off, uint64_t new_size) {
  std::lock_guard<std::mutex> g(staging_mu_);
  const uint64_t s_ino = FileInoLimit() + static_cast<uint64_t>(pool_->mount_slot());
  // A mount that died in this slot may have left its staging blocks.
  MAPFS_RETURN_IF_ERROR(ClearStaging(s_ino));
  // Staging byte head + i holds byte i of the write, so that each of the
  // file's block pieces has its source in one staging block.
  const uint64_t head = off & (kBlock - 1), end = off + n;
  map::Cursor sc{};
  Status st = MapBlocks(&sc, s_ino, 0, head + n);
  struct Run {
    uint64_t at, pool_off, len;
  };
  std::vector<Run> staged, target;
  if (st.ok())
    st = ForRuns(&sc, s_ino, head, head + n, [&](uint64_t p, uint64_t po, uint64_t len) {
      if (po == kHole) return Status::Error(EUCLEAN, "staging block vanished");
      medium::CopyNt(pool_->base() + po, src + (p - head), len);
      staged.push_back({p - head + off, po, len});
      return Status::Ok();
    });
  if (st.ok())
    st = ForRuns(c, ino, off, end, [&](uint64_t p, uint64_t po, uint64_t len) {
      if (po == kHole) return Status::Error(EUCLEAN, "block vanished under the inode's lock");
      target.push_back({p, po, len});
      return Status::Ok();
    });
  medium::Fence();  // the staged bytes are durable before any record names them
  // Copy records, in pieces that each fit the log.
  size_t i = 0, j = 0;
  uint64_t p = off;
  while (st.ok() && p < end) {
    medium::Tx tx;
    while (p < end && tx.payload_bytes() + 24 * 5 < pool_->redo().capacity()) {
      while (target[i].at + target[i].len <= p) i++;
      while (staged[j].at + staged[j].len <= p) j++;
      uint64_t len = std::min(target[i].at + target[i].len, staged[j].at + staged[j].len) - p;
      tx.PutCopy(target[i].pool_off + (p - target[i].at), staged[j].pool_off + (p - staged[j].at), len);
      p += len;
    }
    if (p == end) st = PutSizeAndTimes(in_voff, new_size, static_cast<uint64_t>(NowNs()), &tx);
    if (st.ok()) st = pool_->redo().Commit(tx);
  }
  Status cl = ClearStaging(s_ino);
  return st.ok() ? cl : st;
}

Status FileData::BlockTruncate(uint64_t ino, Inode* in, uint64_t size, Mode mode, bool mapped) {
  uint64_t old = in->size;
  if (size > max_size_) return Status::Error(EFBIG, "size past the largest file size");
  map::Cursor c{};
  if (size > old) {
    // blocks_end covers every size (fsck's rule: a size past it is damage),
    // and is durable before the size is.
    RaiseBlocksEnd(in, size);
    MAPFS_RETURN_IF_ERROR(ZeroBlocks(&c, ino, old, size));
    if (mode != Mode::kPosix) medium::Fence();
    medium::Store64(&in->size, size);
    medium::Persist(&in->size, 8);
    return Status::Ok();
  }
  if (size == old) return Status::Ok();
  // The smaller size first: a crash then leaves blocks past the end (which
  // growth zeroes), never a size over freed blocks.
  medium::Store64(&in->size, size);
  medium::Persist(&in->size, 8);
  // Past the new end, bytes read as zero through a memory map too.
  uint64_t keep_to = AlignUp(size, kBlock);
  MAPFS_RETURN_IF_ERROR(ZeroBlocks(&c, ino, size, mapped ? old : std::min(old, keep_to)));
  medium::Fence();
  if (mapped) return Status::Ok();
  MAPFS_RETURN_IF_ERROR(FreeBlocks(&c, ino, keep_to >> kShift, std::max(old, in->blocks_end)));
  medium::Store64(&in->blocks_end, keep_to);
  medium::Persist(&in->blocks_end, 8);
  return Status::Ok();
}

Status FileData::BlockFallocate(uint64_t ino, Inode* in, int fmode, uint64_t off, uint64_t len, Mode mode,
                                bool mapped) {
  if (off > max_size_ || len > max_size_ - off) return Status::Error(EFBIG, "fallocate past the largest file size");
  bool keep = fmode & FALLOC_FL_KEEP_SIZE;
  uint64_t size = in->size, end = off + len;
  map::Cursor c{};
  if (fmode & FALLOC_FL_PUNCH_HOLE) {
    if (!keep || (fmode & FALLOC_FL_ZERO_RANGE)) return Status::Error(EOPNOTSUPP, "PUNCH_HOLE needs KEEP_SIZE");
    uint64_t stop = std::min(end, size);
    if (off >= stop) return Status::Ok();
    // Partial blocks at the edges are zeroed; whole blocks in between are
    // zeroed and freed, unless a map holds them.
    uint64_t w0 = AlignUp(off, kBlock), w1 = AlignDown(stop, kBlock);
    if (mapped || w0 >= w1) {
      MAPFS_RETURN_IF_ERROR(ZeroBlocks(&c, ino, off, stop));
    } else {
      MAPFS_RETURN_IF_ERROR(ZeroBlocks(&c, ino, off, w0));
      MAPFS_RETURN_IF_ERROR(ZeroBlocks(&c, ino, w1, stop));
      MAPFS_RETURN_IF_ERROR(ZeroBlocks(&c, ino, w0, w1));
      medium::Fence();
      medium::PoolLock l(pool_, medium::LockId::kMap);
      MAPFS_RETURN_IF_ERROR(mapper_->Remove(&c, ino, map::FileBlock(w0 >> kShift), (w1 - w0) >> kShift));
    }
    PublishSize(in, size, mode, false);
    return Status::Ok();
  }
  uint64_t new_size = keep ? size : std::max(size, end);
  RaiseBlocksEnd(in, end);
  MAPFS_RETURN_IF_ERROR(MapBlocks(&c, ino, off, end));
  if (fmode & FALLOC_FL_ZERO_RANGE) MAPFS_RETURN_IF_ERROR(ZeroBlocks(&c, ino, off, end));
  if (new_size > size) MAPFS_RETURN_IF_ERROR(ZeroBlocks(&c, ino, size, new_size));
  PublishSize(in, new_size, mode, false);
  return Status::Ok();
}

Status FileData::BlockMapPool(uint64_t ino, Inode* in, uint64_t off, uint64_t len, std::vector<PoolRun>* runs) {
  if (ino == 0 || ino >= FileInoLimit()) return Status::Error(ENOSPC, "inode past the mapping area's files");
  map::Cursor c{};
  RaiseBlocksEnd(in, off + len);
  MAPFS_RETURN_IF_ERROR(MapBlocks(&c, ino, off, off + len));
  runs->clear();
  return ForRuns(&c, ino, off, off + len, [&](uint64_t, uint64_t po, uint64_t n) {
    if (po == kHole) return Status::Error(EUCLEAN, "block vanished under the inode's lock");
    if (!runs->empty() && runs->back().pool_off + runs->back().len == po)
      runs->back().len += n;
    else
      runs->push_back({po, n});
    return Status::Ok();
  });
}

void FileData::BlockSync(uint64_t ino, const Inode* in, bool mapped) {
  if (mapped) {
    // Data written through a map sits in the cache: write its lines back.
    map::Cursor c{};
    (void)ForMapped(&c, ino, 0, AlignUp(medium::Load64(&in->size), kBlock), [&](uint64_t, uint64_t po, uint64_t n) {
      medium::Flush(pool_->base() + po, n);
      return Status::Ok();
    });
  }
  medium::Fence();
  medium::Persist(in, 64);
}

uint64_t FileData::BlockAllocated(uint64_t ino, const Inode* in) {
  uint64_t bytes = 0;
  map::Cursor c{};
  (void)ForMapped(&c, ino, 0, AlignUp(medium::Load64(&in->size), kBlock), [&](uint64_t, uint64_t, uint64_t n) {
    bytes += n;
    return Status::Ok();
  });
  return bytes;
}

}  // namespace mapfs::file
