#include "file/file_data.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/units.h"
#include "map/mapper.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "meta/meta_tx.h"
#include "space/partitions.h"
#include "vm/vm.h"

namespace mapfs::file {

using meta::format::Inode;
using meta::format::PartLevel;
using meta::format::PartVoff;
using meta::format::PartWord;

namespace {
uint64_t PartBytes(int level) { return kPageSize << (3 * level); }
uint64_t PagesFor(uint64_t bytes) { return (bytes + kPageSize - 1) / kPageSize; }
}  // namespace

int64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

FileData::FileData(medium::Pool* pool, vm::Vm* vm, space::Partitions* space)
    : pool_(pool), vm_(vm), space_(space), max_size_(PartBytes(space->top_level() - 1)) {}

FileData::~FileData() = default;

int FileData::LevelFor(uint64_t bytes) {
  int l = 0;
  while (PartBytes(l) < bytes) l++;
  return l;
}

Status FileData::CheckPart(const Inode* in) const {
  uint64_t w = medium::Load64(&in->part);
  if (w == 0) return Status::Ok();
  int level = PartLevel(w);
  uint64_t v = PartVoff(w);
  if (level >= space_->top_level() || v % PartBytes(level) != 0 || v >= vm_->size() ||
      PartBytes(level) > vm_->size() - v)
    return Status::Error(EUCLEAN, "inode partition word damaged: 0x" + [w] {
      char b[20];
      std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(w));
      return std::string(b);
    }() + " (run fsck)");
  return Status::Ok();
}

uint64_t FileData::Capacity(const Inode* in) const {
  uint64_t w = medium::Load64(&in->part);
  return w == 0 ? 0 : PartBytes(PartLevel(w));
}

char* FileData::Pointer(const Inode* in) {
  uint64_t w = medium::Load64(&in->part);
  return w == 0 || !CheckPart(in).ok() ? nullptr : vm_->at(PartVoff(w));
}

uint64_t FileData::AllocatedBytes(const Inode* in, uint64_t ino) {
  if (mapper_) return BlockAllocated(ino, in);
  uint64_t w = medium::Load64(&in->part);
  if (w == 0) return 0;
  if (PartLevel(w) < 3) return PartBytes(PartLevel(w));
  return std::min(PartBytes(PartLevel(w)), AlignUp(medium::Load64(&in->size), kPageSize));
}

Status FileData::Prepare(const Inode* in, uint64_t off, uint64_t n) {
  if (n == 0) return Status::Ok();
  uint64_t w = in->part;
  uint64_t v = PartVoff(w) + off;
  if (PartLevel(w) < 3) return vm_->Map(v, n);
  // Fresh pages below the durable size are holes and must read as zero;
  // from the size up they are past the end, which every size increase
  // zeroes or writes before publishing it (zero on extend).
  uint64_t base = PartVoff(w);
  // Not mapped in the region: the data path copies through the pool view.
  return vm_->Populate(v, n, vm::ZeroRange{base, base + medium::Load64(&in->size)}, /*map_here=*/false);
}

void FileData::CopyIn(uint64_t voff, const void* buf, size_t n) {
  const char* src = static_cast<const char*>(buf);
  while (n > 0) {
    uint64_t run = 0;
    char* dst = vm_->PoolRun(voff, n, &run);
    if (dst == nullptr) {  // not backed: the region faults it in
      medium::CopyNt(vm_->at(voff), src, n);
      return;
    }
    medium::CopyNt(dst, src, run);
    voff += run, src += run, n -= run;
  }
}

void FileData::CopyWithin(uint64_t dst, uint64_t src, uint64_t n) {
  while (n > 0) {
    uint64_t run = 0;
    const char* from = vm_->PoolRun(src, n, &run);
    if (from == nullptr) {  // not backed: the region faults it in
      CopyIn(dst, vm_->at(src), n);
      return;
    }
    CopyIn(dst, from, run);
    dst += run, src += run, n -= run;
  }
}

Status FileData::Zero(const Inode* in, uint64_t from, uint64_t to) {
  if (from >= to || in->part == 0) return Status::Ok();
  to = std::min(to, Capacity(in));
  if (from >= to) return Status::Ok();
  // Backed bytes are zeroed in place; unbacked pages read as zero already
  // and are zeroed when backed below the size (Prepare).
  return vm_->Discard(PartVoff(in->part) + from, to - from);
}

void FileData::PublishSize(Inode* in, uint64_t size, Mode mode, bool data_fenced) {
  bool grows = size > in->size;
  auto now = static_cast<uint64_t>(NowNs());
  auto* mtime = reinterpret_cast<uint64_t*>(&in->mtime_ns);
  auto* ctime = reinterpret_cast<uint64_t*>(&in->ctime_ns);
  if (mode == Mode::kPosix) {  // durable at fsync or close
    if (grows) medium::Store64(&in->size, size);
    medium::Store64(mtime, now);
    medium::Store64(ctime, now);
    return;
  }
  // A larger size must not be durable before the data; when the size
  // stays, one fence makes the data and the times durable together (no
  // mode promises times atomic with the data). Size, mtime and ctime share
  // the inode's first line: regular stores and one write-back of the line,
  // which stays in the cache for the next call to read. (Non-temporal
  // stores evict it: on this machine, 2026-11-26, the next call's read of
  // the size then cost a memory round trip, 1.33 µs per 4 KiB append
  // against 0.70 µs with the write-back.)
  if (!data_fenced && grows) medium::Fence();
  if (grows) medium::Store64(&in->size, size);
  medium::Store64(mtime, now);
  medium::Store64(ctime, now);
  medium::Flush(&in->size, offsetof(Inode, ctime_ns) + 8 - offsetof(Inode, size));
  medium::Fence();
}

// Small partitions (below L3) share 2 MiB chunks with their neighbours;
// moving their pages with pswap would split those chunks' single mappings
// into per-page ones (more kernel mappings, no huge pages). Their data is
// at most 256 KiB, so they move by copy instead: the new partition is filled
// while unreachable, then one transaction switches the inode to it.
// Partitions of L3 and above move with pswap (whole 2 MiB entries).
Status FileData::MoveByCopy(Inode* in, uint64_t in_voff, int level, uint64_t keep, const Patch* patch,
                            uint64_t new_size) {
  uint64_t old = in->part;
  auto nv = space_->Alloc(level);
  if (!nv.ok()) return nv.status();
  uint64_t cap = PartBytes(level);
  uint64_t fill = std::min(keep, cap);
  if (patch) fill = std::max(fill, patch->off + patch->n);
  // Bytes the copy below does not cover must read as zero (a size set past
  // the old partition); fresh pages past the new size need nothing.
  uint64_t copied = old != 0 && keep > 0 ? std::min({keep, cap, PartBytes(PartLevel(old))}) : 0;
  Status st = fill == 0    ? Status::Ok()
              : level >= 3 ? vm_->Populate(*nv, fill, vm::ZeroRange{*nv + AlignDown(copied, kPageSize), *nv + new_size})
                           : vm_->Map(*nv, fill);
  if (st.ok() && old != 0 && keep > 0) st = vm_->Map(PartVoff(old), std::min(keep, PartBytes(PartLevel(old))));
  if (!st.ok()) {
    (void)space_->Free(*nv);
    return st;
  }
  if (old != 0 && keep > 0) CopyWithin(*nv, PartVoff(old), std::min({keep, cap, PartBytes(PartLevel(old))}));
  if (patch) CopyIn(*nv + patch->off, patch->data, patch->n);
  medium::Fence();
  meta::MetaTx tx(pool_, vm_);
  st = tx.Store64(in_voff + offsetof(Inode, part), PartWord(*nv, level));
  if (st.ok()) st = tx.Store64(in_voff + offsetof(Inode, size), new_size);
  if (st.ok() && patch) {
    int64_t now = NowNs();
    st = tx.Store64(in_voff + offsetof(Inode, mtime_ns), static_cast<uint64_t>(now));
    if (st.ok()) st = tx.Store64(in_voff + offsetof(Inode, ctime_ns), static_cast<uint64_t>(now));
  }
  if (st.ok()) st = tx.Commit();
  if (!st.ok()) {
    (void)space_->Free(*nv);
    return st;
  }
  return old == 0 ? Status::Ok() : space_->Free(PartVoff(old));
}

Status FileData::Grow(Inode* in, uint64_t in_voff, uint64_t need, bool mapped) {
  uint64_t old = in->part;
  if (old != 0 && PartBytes(PartLevel(old)) >= need) return Status::Ok();
  if (need > max_size_) return Status::Error(EFBIG, "file would exceed the largest partition");
  int level = LevelFor(need);
  uint64_t size = in->size;
  uint64_t pages = old == 0 ? 0 : PagesFor(std::min(size, PartBytes(PartLevel(old))));
  // A mapped file's pages are held by maps of the pool file, past the size
  // too: all of them move, with pswap, never by copy.
  if (mapped && old != 0) pages = PartBytes(PartLevel(old)) / kPageSize;
  if (pages == 0) {
    auto nv = space_->Alloc(level);
    if (!nv.ok()) return nv.status();
    // Nothing to move: one atomic store switches the partition.
    medium::Store64(&in->part, PartWord(*nv, level));
    medium::Persist(&in->part, 8);
  } else if (PartLevel(old) < 3 && !mapped) {
    return MoveByCopy(in, in_voff, level, size, nullptr, size);
  } else {
    // Everything that can fail before the swap is checked before the
    // allocation, and the swap's failure frees it: no error leaks it.
    auto off = vm_->Translate(in_voff + offsetof(Inode, part));
    if (!off.ok()) return off.status();
    auto nv = space_->Alloc(level);
    if (!nv.ok()) return nv.status();
    medium::Tx tx;
    tx.Put64(*off, PartWord(*nv, level));
    Status st = vm_->Pswap(PartVoff(old), *nv, pages, &tx, mapped);
    if (!st.ok()) {
      (void)space_->Free(*nv);
      return st;
    }
  }
  if (old != 0) MAPFS_RETURN_IF_ERROR(space_->Free(PartVoff(old)));
  return Status::Ok();
}

Status FileData::Shrink(Inode* in, uint64_t in_voff, int level, uint64_t keep) {
  if (level < 3) return MoveByCopy(in, in_voff, level, keep, nullptr, keep);
  uint64_t old = in->part;
  // As in Grow: translate first, so that no error path leaks the partition.
  auto part_off = vm_->Translate(in_voff + offsetof(Inode, part));
  auto size_off = vm_->Translate(in_voff + offsetof(Inode, size));
  if (!part_off.ok() || !size_off.ok()) return Status::Error(EUCLEAN, "inode not backed");
  auto nv = space_->Alloc(level);
  if (!nv.ok()) return nv.status();
  medium::Tx tx;
  tx.Put64(*part_off, PartWord(*nv, level));
  tx.Put64(*size_off, keep);
  Status st = vm_->Pswap(PartVoff(old), *nv, PagesFor(keep), &tx);
  if (!st.ok()) {
    (void)space_->Free(*nv);
    return st;
  }
  return space_->Free(PartVoff(old));
}

Result<size_t> FileData::Read(const Inode* in, void* buf, size_t n, uint64_t off, uint64_t ino) {
  if (mapper_) return BlockRead(ino, in, buf, n, off);
  MAPFS_RETURN_IF_ERROR(CheckPart(in));
  uint64_t size = medium::Load64(&in->size);
  if (off >= size || n == 0) return size_t{0};
  n = std::min<uint64_t>(n, size - off);
  char* dst = static_cast<char*>(buf);
  uint64_t w = medium::Load64(&in->part);
  if (w == 0) {
    std::memset(dst, 0, n);
    return n;
  }
  uint64_t base = PartVoff(w);
  // Data past the partition (a size set by truncate beyond it) is a hole.
  uint64_t cap = PartBytes(PartLevel(w));
  uint64_t in_part = off < cap ? std::min<uint64_t>(n, cap - off) : 0;
  // Files may have holes: copy backed runs (through the pool view), zero
  // the rest, so that reading a hole does not allocate it (nor fault, where
  // it cannot be allocated: a full or damaged pool).
  uint64_t p = off, end = off + in_part;
  while (p < end) {
    uint64_t run = 0;
    if (const char* src = vm_->PoolRun(base + p, end - p, &run)) {
      std::memcpy(dst + (p - off), src, run);
      p += run;
    } else {
      uint64_t stop = std::min(end, AlignDown(p, kPageSize) + kPageSize);
      std::memset(dst + (p - off), 0, stop - p);
      p = stop;
    }
  }
  if (in_part < n) std::memset(dst + in_part, 0, n - in_part);
  return n;
}

Result<size_t> FileData::Write(Inode* in, uint64_t in_voff, const void* buf, size_t n, uint64_t off, Mode mode,
                               bool mapped, uint64_t ino) {
  if (n == 0) return size_t{0};
  if (mapper_) return BlockWrite(ino, in, in_voff, buf, n, off, mode);
  MAPFS_RETURN_IF_ERROR(CheckPart(in));
  if (off > max_size_ || n > max_size_ - off) return Status::Error(EFBIG, "write past the largest file size");
  uint64_t end = off + n, size = in->size;
  MAPFS_RETURN_IF_ERROR(Grow(in, in_voff, end, mapped));
  if (mode == Mode::kStrict && off < size) {
    MAPFS_RETURN_IF_ERROR(StrictOverwrite(in, in_voff, buf, n, off, mapped, std::max(size, end)));
    return n;
  }
  // Within backed pages (most writes) there is nothing to prepare.
  uint64_t run = 0;
  char* dst = vm_->PoolRun(PartVoff(in->part) + off, n, &run);
  if (run < n) MAPFS_RETURN_IF_ERROR(Prepare(in, off, n));
  if (off > size) MAPFS_RETURN_IF_ERROR(Zero(in, size, off));
  if (run == n)
    medium::CopyNt(dst, buf, n);
  else
    CopyIn(PartVoff(in->part) + off, buf, n);
  // Pages past the old end may hold a former file's bytes until written:
  // the new size must not become durable before the data, in posix mode
  // too. An overwrite needs no fence of its own (PublishSize's covers it).
  bool fenced = end > size;
  if (fenced) medium::Fence();
  PublishSize(in, std::max(size, end), mode, fenced);
  return n;
}

Status FileData::StrictOverwrite(Inode* in, uint64_t in_voff, const void* buf, size_t n, uint64_t off, bool mapped,
                                 uint64_t new_size) {
  uint64_t base = PartVoff(in->part);
  if (!vm_->Backed(base + off, n)) MAPFS_RETURN_IF_ERROR(Prepare(in, off, n));
  // Whole pages go to fresh pages (ctFS write-and-swap), where the file
  // owns its chunks (large partitions), pages are 4 KiB, and no map holds
  // the file's pages.
  uint64_t w0 = AlignUp(off, kPageSize), w1 = AlignDown(off + n, kPageSize);
  if (!mapped && w0 < w1 && PartLevel(in->part) >= 3 && pool_->header().page_shift == 12 &&
      (w1 - w0) / kPageSize <= strict_swap_max_pages_) {
    // 24 bytes per entry, 16 + data per partial page, 3 inode words.
    uint64_t logged = (w1 - w0) / kPageSize * 24 + 2 * 16 + (w0 - off) + (off + n - w1) + 3 * 24 + 16;
    if (logged <= pool_->redo().capacity()) {
      Status s = StrictSwap(in, in_voff, buf, n, off, new_size);
      // A full pool has no fresh pages, but the file changed nowhere: an
      // overwrite that fits the redo log still goes through it below.
      if (s.code() != ENOSPC) return s;
    }
  }
  medium::Tx meta;
  MAPFS_RETURN_IF_ERROR(PutSizeAndTimes(in_voff, new_size, static_cast<uint64_t>(NowNs()), &meta));

  if (n + 2 * kPageSize <= pool_->redo().capacity()) {
    // Small: the new bytes go through the redo log (written twice, applied
    // in place, so every mapping of the file keeps seeing the file).
    medium::Tx tx;
    const char* src = static_cast<const char*>(buf);
    uint64_t p = off, end = off + n;
    while (p < end) {
      uint64_t stop = std::min(end, AlignDown(p, kPageSize) + kPageSize);
      auto po = vm_->Translate(base + p);
      if (!po.ok()) return po.status();
      tx.PutBytesRef(*po, src + (p - off), stop - p);
      p = stop;
    }
    tx.Append(meta);
    return pool_->redo().Commit(tx);
  }
  if (PartLevel(in->part) < 3 && !mapped) {
    // A small file: write-and-switch the whole partition (at most 256 KiB),
    // cheaper than swapping pages inside a shared 2 MiB chunk; not when the
    // file is mapped, as its address would change under the mapping.
    Patch patch{buf, n, off};
    return MoveByCopy(in, in_voff, PartLevel(in->part), in->size, &patch, new_size);
  }
  if (mapped) {
    // Maps of the pool file hold the file's pages: a write too large for
    // the log goes in place, all-or-nothing no more than a store through a
    // map would be.
    CopyIn(base + off, buf, n);
    medium::Fence();
    return pool_->redo().Commit(meta);
  }
  // Large: write-and-swap. The staging range keeps the file range's offset
  // within a 2 MiB chunk when the write spans chunks, so whole chunks swap
  // as single PMD entries.
  uint64_t p0 = AlignDown(off, kPageSize), p1 = AlignUp(off + n, kPageSize);
  uint64_t span = p1 - p0;
  uint64_t lead = span >= kChunkSize ? p0 % kChunkSize : 0;
  int level = LevelFor(lead + span);
  auto st = space_->Alloc(level);
  if (!st.ok()) return st.status();
  uint64_t sv = *st + lead;
  // The staging pages are written whole below: no zeroing.
  Status s = level >= 3 ? vm_->Populate(sv, span, vm::ZeroRange{0, 0}, /*map_here=*/false) : vm_->Map(sv, span);
  if (s.ok()) s = Prepare(in, p0, span);
  if (!s.ok()) {
    (void)space_->Free(*st);
    return s;
  }
  // Through the pool view: fresh region mappings would take a page fault
  // per page.
  if (off > p0) CopyWithin(sv, base + p0, off - p0);
  CopyIn(sv + (off - p0), buf, n);
  if (off + n < p1) CopyWithin(sv + (off + n - p0), base + off + n, p1 - (off + n));
  medium::Fence();
  s = vm_->Pswap(base + p0, sv, span / kPageSize, &meta);
  Status f = space_->Free(*st);
  return s.ok() ? f : s;
}

Status FileData::PutSizeAndTimes(uint64_t in_voff, uint64_t size, uint64_t now, medium::Tx* tx) {
  auto size_off = vm_->Translate(in_voff + offsetof(Inode, size));
  auto mt_off = vm_->Translate(in_voff + offsetof(Inode, mtime_ns));
  auto ct_off = vm_->Translate(in_voff + offsetof(Inode, ctime_ns));
  if (!size_off.ok() || !mt_off.ok() || !ct_off.ok()) return Status::Error(EUCLEAN, "inode not backed");
  tx->Put64(*size_off, size);
  tx->Put64(*mt_off, now);
  tx->Put64(*ct_off, now);
  return Status::Ok();
}

Status FileData::StrictSwap(Inode* in, uint64_t in_voff, const void* buf, size_t n, uint64_t off,
                            uint64_t new_size) {
  const char* src = static_cast<const char*>(buf);
  uint64_t base = PartVoff(in->part);
  uint64_t p0 = AlignUp(off, kPageSize), p1 = AlignDown(off + n, kPageSize);
  uint64_t npages = (p1 - p0) / kPageSize;
  // 1. The whole pages' new bytes, written once, to fresh pages (their
  //    bitmap bits written back with them).
  uint64_t inline_fresh[8];
  std::vector<uint64_t> heap_fresh;
  uint64_t* fresh = inline_fresh;
  if (npages > std::size(inline_fresh)) {
    heap_fresh.resize(npages);
    fresh = heap_fresh.data();
  }
  auto free_fresh = [&](uint64_t k) {
    for (uint64_t i = 0; i < k; i++) vm_->pages().FreePages(fresh[i], 1);
  };
  MAPFS_RETURN_IF_ERROR(vm_->pages().AllocPages(npages, fresh, /*durable=*/false));
  for (uint64_t i = 0; i < npages;) {
    uint64_t j = i + 1;  // a run of pages contiguous in the pool: one copy
    while (j < npages && fresh[j] == fresh[j - 1] + kPageSize) j++;
    medium::CopyNt(pool_->base() + fresh[i], src + (p0 - off) + i * kPageSize, (j - i) * kPageSize);
    i = j;
  }
  auto now = static_cast<uint64_t>(NowNs());
  Status s;
  if (npages == 1 && off == p0 && off + n == p1 && new_size == in->size) {
    // 2a. One page, nothing else: the times first (no mode makes them
    //     atomic with the data), then one 8-byte page-table entry store is
    //     the commit.
    medium::Store64(reinterpret_cast<uint64_t*>(&in->mtime_ns), now);
    medium::Store64(reinterpret_cast<uint64_t*>(&in->ctime_ns), now);
    medium::Flush(&in->mtime_ns, 16);  // one line, kept in the cache (PublishSize)
    medium::Fence();
    s = vm_->ReplacePages(base + p0, fresh, 1, nullptr);
  } else {
    // 2b. Partial head and tail pages through the log, committed with the
    //     new entries, the size and the times in one transaction.
    medium::Tx tx;
    if (off < p0) {
      auto po = vm_->Translate(base + off);
      if (!po.ok()) s = po.status();
      else tx.PutBytesRef(*po, src, p0 - off);
    }
    if (s.ok() && p1 < off + n) {
      auto po = vm_->Translate(base + p1);
      if (!po.ok()) s = po.status();
      else tx.PutBytesRef(*po, src + (p1 - off), off + n - p1);
    }
    if (s.ok()) s = PutSizeAndTimes(in_voff, new_size, now, &tx);
    if (s.ok()) {
      medium::Fence();
      s = vm_->ReplacePages(base + p0, fresh, npages, &tx);
    }
  }
  // On failure nothing names the fresh pages.
  if (!s.ok()) free_fresh(npages);
  return s;
}

Status FileData::Truncate(Inode* in, uint64_t in_voff, uint64_t size, Mode mode, bool mapped, uint64_t ino) {
  if (mapper_) return BlockTruncate(ino, in, size, mode, mapped);
  MAPFS_RETURN_IF_ERROR(CheckPart(in));
  uint64_t old = in->size;
  if (size > max_size_) return Status::Error(EFBIG, "size past the largest file size");
  if (size > old) {
    // Exposed bytes inside the current partition must read as zero; space
    // past it is allocated only when written.
    MAPFS_RETURN_IF_ERROR(Zero(in, old, size));
    if (mode != Mode::kPosix) medium::Fence();
    medium::Store64(&in->size, size);
    medium::Persist(&in->size, 8);
    return Status::Ok();
  }
  if (size == old) return Status::Ok();
  uint64_t w = in->part;
  if (w == 0) {
    medium::Store64(&in->size, size);
    medium::Persist(&in->size, 8);
    return Status::Ok();
  }
  if (mapped) {
    // Maps of the pool file hold the partition's pages: keep every one of
    // them where it is; the bytes past the new end read as zero (once the
    // new size is durable, as below).
    medium::Store64(&in->size, size);
    medium::Persist(&in->size, 8);
    return Zero(in, size, old);
  }
  if (size == 0) {
    meta::MetaTx tx(pool_, vm_);
    MAPFS_RETURN_IF_ERROR(tx.Store64(in_voff + offsetof(Inode, size), 0));
    MAPFS_RETURN_IF_ERROR(tx.Store64(in_voff + offsetof(Inode, part), 0));
    MAPFS_RETURN_IF_ERROR(tx.Commit());
    return space_->Free(PartVoff(w));
  }
  // Bytes past the new end must read as zero through a memory map (as
  // the kernel's page cache shows them), in the new last page and, in a
  // partition below 2 MiB whose pages stay, up to the old end. Done once
  // the new size is durable, so a crash never shows zeros inside the old
  // size; if it is lost, reads still see zeros (growth zeroes what it
  // exposes). Whole pages of a larger partition are unmapped below.
  auto zero_tail = [&](Status st) {
    if (!st.ok() || in->part == 0) return st;
    uint64_t end = PartLevel(in->part) >= 3 ? std::min(AlignUp(size, kPageSize), old) : old;
    (void)Zero(in, size, end);
    return st;
  };
  int level = LevelFor(size);
  if (level < PartLevel(w)) {
    Status st = Shrink(in, in_voff, level, size);
    if (st.code() != ENOSPC) return zero_tail(st);
    // No room for a smaller partition: keep this one.
  }
  medium::Store64(&in->size, size);
  medium::Persist(&in->size, 8);
  (void)zero_tail(Status::Ok());
  if (PartLevel(w) >= 3) {
    // Whole pages past the end go back to the pool. Only the partition's
    // own pages: the old size may lie past the partition (truncate up
    // allocates nothing), and the range beyond it belongs to neighbours —
    // other files, or the header page of a Partitioned sibling.
    uint64_t cap = PartBytes(PartLevel(w));
    uint64_t from = AlignUp(size, kPageSize), to = std::min(AlignUp(old, kPageSize), cap);
    if (to > from) MAPFS_RETURN_IF_ERROR(vm_->Unmap(PartVoff(w) + from, to - from));
  }
  return Status::Ok();
}

Status FileData::Fallocate(Inode* in, uint64_t in_voff, int fmode, uint64_t off, uint64_t len, Mode mode,
                           bool mapped, uint64_t ino) {
  const int known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
  if (fmode & ~known) return Status::Error(EOPNOTSUPP, "fallocate mode not supported");
  if (len == 0) return Status::Error(EINVAL, "fallocate: zero length");
  if (mapper_) return BlockFallocate(ino, in, fmode, off, len, mode, mapped);
  MAPFS_RETURN_IF_ERROR(CheckPart(in));
  if (off > max_size_ || len > max_size_ - off) return Status::Error(EFBIG, "fallocate past the largest file size");
  bool keep = fmode & FALLOC_FL_KEEP_SIZE;
  uint64_t size = in->size, end = off + len;
  if (fmode & FALLOC_FL_PUNCH_HOLE) {
    if (!keep || (fmode & FALLOC_FL_ZERO_RANGE)) return Status::Error(EOPNOTSUPP, "PUNCH_HOLE needs KEEP_SIZE");
    MAPFS_RETURN_IF_ERROR(Zero(in, off, std::min(end, size)));
    PublishSize(in, size, mode, false);
    return Status::Ok();
  }
  uint64_t new_size = keep ? size : std::max(size, end);
  MAPFS_RETURN_IF_ERROR(Grow(in, in_voff, end, mapped));
  MAPFS_RETURN_IF_ERROR(Prepare(in, off, len));
  if (fmode & FALLOC_FL_ZERO_RANGE) MAPFS_RETURN_IF_ERROR(Zero(in, off, end));
  if (new_size > size) MAPFS_RETURN_IF_ERROR(Zero(in, size, std::min(off, new_size)));
  if (new_size > size && !(fmode & FALLOC_FL_ZERO_RANGE)) MAPFS_RETURN_IF_ERROR(Zero(in, std::max(size, off), end));
  PublishSize(in, new_size, mode, false);
  return Status::Ok();
}

Status FileData::MapPool(Inode* in, uint64_t in_voff, uint64_t off, uint64_t len, std::vector<PoolRun>* runs,
                         uint64_t ino) {
  MAPFS_RETURN_IF_ERROR(CheckPart(in));
  if (len == 0 || !IsAligned(off, kPageSize) || !IsAligned(len, kPageSize))
    return Status::Error(EINVAL, "map: unaligned range");
  if (off > max_size_ || len > max_size_ - off) return Status::Error(EFBIG, "map past the largest file size");
  if (mapper_) return BlockMapPool(ino, in, off, len, runs);
  MAPFS_RETURN_IF_ERROR(Grow(in, in_voff, off + len, true));
  uint64_t base = PartVoff(in->part) + off;
  MAPFS_RETURN_IF_ERROR(vm_->Populate(base, len));
  runs->clear();
  for (uint64_t p = 0; p < len; p += kPageSize) {
    auto t = vm_->Translate(base + p);
    if (!t.ok()) return t.status();
    if (!runs->empty() && runs->back().pool_off + runs->back().len == *t)
      runs->back().len += kPageSize;
    else
      runs->push_back({*t, kPageSize});
  }
  return Status::Ok();
}

void FileData::Sync(const Inode* in, bool mapped, uint64_t ino) {
  if (mapper_) return BlockSync(ino, in, mapped);
  if (mapped && in->part != 0 && CheckPart(in).ok()) {
    uint64_t n = std::min(medium::Load64(&in->size), Capacity(in));
    uint64_t base = PartVoff(in->part);
    // Only backed pages can hold data written through a pointer.
    for (uint64_t p = 0; p < n; p += kChunkSize) {
      uint64_t len = std::min<uint64_t>(kChunkSize, n - p);
      if (vm_->Backed(base + p, len) && vm_->Map(base + p, len).ok()) medium::Flush(vm_->at(base + p), len);
    }
  }
  medium::Fence();
  medium::Persist(in, 64);
}

Status FileData::Release(Inode* in, uint64_t /*in_voff*/) {
  uint64_t w = in->part;
  if (w == 0) return Status::Ok();
  MAPFS_RETURN_IF_ERROR(CheckPart(in));
  return space_->Free(PartVoff(w));
}

}  // namespace mapfs::file
