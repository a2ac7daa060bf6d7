// VFile writes: copy-on-write to fresh blocks, one CAS to commit.
//
// A write of blocks [b0, b1]:
//  1. allocates b1-b0+1 fresh blocks (bitmap, lock-free);
//  2. copies the caller's bytes there (on tmpfs whole fresh blocks by
//     pwrite, the rest through the map: vfile.h, pwrite_data_), and for a
//     partial first/last block the old bytes around them (read-modify-write)
//     from the block mapped now, remembering that mapping;
//  3. if the write needs more than one inline entry can say (several
//     physical runs, or an end inside a block, which sets the size exactly),
//     writes a record block;
//  4. fences (data, record and bitmap durable before the commit), then
//     commits: replays what others committed, checks the remembered
//     mappings (a changed one means recopy that block, step 2), and CASes
//     the entry into the first empty log slot. Losing the CAS means
//     someone else committed first: replay and try the next slot.
// Nothing a write did is visible before the CAS; a crash before it leaves
// allocated, unreferenced blocks (fsck reports them as leaked).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/crc32c.h"
#include "medium/persist.h"
#include "overlay/virtual/vfile.h"

namespace mapfs::overlay::vrt {

using namespace pmem;
namespace persist = ::mapfs::medium;

namespace {

// Internal code for "the size moved under an append/truncate: start over".
constexpr int kSizeMoved = EAGAIN;

struct Alloced {
  uint32_t phys[kMaxRuns];
  uint32_t len[kMaxRuns];
  uint32_t nruns = 0;
  // The physical block of the i-th block of the write.
  uint32_t At(uint32_t i) const {
    for (uint32_t r = 0; r < nruns; r++) {
      if (i < len[r]) return phys[r] + i;
      i -= len[r];
    }
    return 0;
  }
};

}  // namespace

Status VFile::Durable(bool before_commit) {
  // Process crashes need only the order of stores (the page cache or the
  // medium keeps them); power loss needs them durable: fences on DAX, the
  // kernel's fdatasync elsewhere.
  persist::Fence();
  if (dax_ || mode_ == Mode::kPosix) return Status::Ok();
  if (before_commit && mode_ != Mode::kStrict) return Status::Ok();
  if (fdatasync(fd_) != 0) return Status::FromErrno("virtual: fdatasync");
  return Status::Ok();
}

Status VFile::Commit(uint64_t entry, uint64_t* seq_out, const uint64_t* head, uint64_t head_v,
                     const uint64_t* tail, uint64_t tail_v, const uint64_t* expect_size, bool* retry_copy) {
  MetaShared* sh = shared();
  const uint32_t slots = hdr_.log_slots;
  for (;;) {
    MAPFS_RETURN_IF_ERROR(CatchUp());
    uint64_t s = applied_.load(std::memory_order_acquire);
    uint64_t size = size_.load(std::memory_order_acquire);
    if (head != nullptr) {
      auto m = Lookup(*head);
      if (!m.ok()) return m.status();
      if (*m != head_v) *retry_copy = true;
    }
    if (tail != nullptr) {
      auto m = Lookup(*tail);
      if (!m.ok()) return m.status();
      if (*m != tail_v) *retry_copy = true;
    }
    if (*retry_copy) return Status::Ok();
    if (expect_size != nullptr && size != *expect_size) return Status::Error(kSizeMoved, "size moved");
    uint64_t ck = persist::Load64(&sh->ckpt_seq);
    // Behind the checkpoint: slot s may already hold a later lap's entry.
    if (s < ck) continue;
    if (s >= ck + slots) {
      // The ring is full of entries not yet checkpointed.
      MAPFS_RETURN_IF_ERROR(Gc(true));
      continue;
    }
    uint64_t old = persist::Load64(slot(s));
    uint32_t lap = LapOf(s, slots);
    if (old != 0 && EntryLap(old) == lap) continue;  // committed at s by another: replay
    bool free_slot = (old == 0 && s < slots) ||
                     (old != 0 && EntryLap(old) == ((lap + (1u << kLapBits) - 1) & ((1u << kLapBits) - 1)));
    if (!free_slot) {
      if (persist::Load64(&sh->ckpt_seq) != ck) continue;
      return Status::Error(EUCLEAN, "virtual: log slot of entry " + std::to_string(s) + " holds a stray entry");
    }
    uint64_t e = entry | (uint64_t{lap} << 58);
    if (std::atomic_ref<uint64_t>(*slot(s)).compare_exchange_strong(old, e, std::memory_order_acq_rel)) {
      FlushMeta(slot(s), 8);
      *seq_out = s;
      return Status::Ok();
    }
  }
}

Result<size_t> VFile::WriteOnce(const char* buf, size_t n, uint64_t off, const uint64_t* expect_size, Pin* pin) {
  const uint64_t b0 = off / kBlockSize, b1 = (off + n - 1) / kBlockSize;
  const uint32_t nb = static_cast<uint32_t>(b1 - b0 + 1);
  const size_t head_len = off % kBlockSize;                            // old bytes before
  const size_t tail_off = (off + n) % kBlockSize;                      // old bytes from here
  const bool head_partial = head_len != 0, tail_partial = tail_off != 0;
  Alloced a;
  // Allocation comes first, before any lookup: Alloc may advance the pin.
  // A write starting at or past the end is new content (the file grows
  // for it in larger steps); a racing writer may make that stale, which
  // only changes a growth step.
  const bool extends = off >= size_.load(std::memory_order_relaxed);
  MAPFS_RETURN_IF_ERROR(Alloc(nb, a.phys, a.len, &a.nruns, kMaxRuns, pin, extends));
  const bool inline_entry = a.nruns == 1 && !tail_partial;
  uint32_t rec = 0;
  if (!inline_entry) {
    uint32_t rl = 0, rn = 0;
    Status st = Alloc(1, &rec, &rl, &rn, 1, pin, extends);
    if (!st.ok()) {
      for (uint32_t r = 0; r < a.nruns; r++) Free(a.phys[r], a.len[r]);
      return st;
    }
  }
  auto release = [&]() {
    for (uint32_t r = 0; r < a.nruns; r++) Free(a.phys[r], a.len[r]);
    if (rec != 0) Free(rec, 1);
  };
  if (rec != 0) Touch(rec);
  // The caller's bytes: block i of the write through the map.
  auto copy_in = [&](uint32_t i) {
    uint64_t blk = (b0 + i) * kBlockSize;
    uint64_t from = std::max(off, blk), to = std::min(off + n, blk + kBlockSize);
    CopyData(base_ + uint64_t{a.At(i)} * kBlockSize + (from - blk), buf + (from - off), to - from);
  };
  // Whole blocks of a run of fresh blocks by pwrite, one call per run,
  // without mapping them here (vfile.h, pwrite_data_); the rest, and a
  // partial first or last block (the read-modify-write below copies into
  // it through the map), through the map.
  // Only for content past the end (appends): a rewrite's fresh blocks go
  // through the map, its chunk populated at once as before. Random 4 KiB
  // overwrites of a growing file, one pwrite per fresh block, cost 2.2-2.5
  // us a write in the run that grew the file against 0.8-0.9 (the loop of
  // mapfs-virtual-bench --engines).
  const uint64_t fresh = pwrite_data_ && extends ? fresh_.load(std::memory_order_relaxed) : ~uint64_t{0};
  uint32_t lo = 0;
  for (uint32_t r = 0; r < a.nruns; r++) {
    const uint32_t hi = lo + a.len[r];  // blocks [lo, hi) of the write are run r
    const uint32_t wlo = lo + (lo == 0 && head_partial ? 1 : 0);
    const uint32_t whi = hi - (hi == nb && tail_partial ? 1 : 0);
    if (a.phys[r] >= fresh && wlo < whi) {
      Status st = WriteBlocks(uint64_t{a.phys[r]} + (wlo - lo), buf + ((b0 + wlo) * kBlockSize - off),
                              size_t{whi - wlo} * kBlockSize);
      if (!st.ok()) {
        release();
        return st;
      }
      RaiseFresh(uint64_t{a.phys[r]} + a.len[r]);
      // A partial first or last block through the map, without Touch:
      // Touch would populate its chunk up to fresh_, i.e. the blocks just
      // written by pwrite and other threads' fresh ones; the store faults
      // in its own page alone.
      if (wlo > lo) copy_in(lo);
      if (whi < hi) copy_in(hi - 1);
    } else {
      // A rewrite populates the rest of its chunk ahead (Touch stops at
      // fresh_), as every write did before pwrite_data_.
      if (pwrite_data_ && !extends)
        RaiseFresh(std::min<uint64_t>(persist::Load64(&shared()->phys_end),
                                      (uint64_t{a.phys[r]} + a.len[r] + 511) / 512 * 512));
      Touch(a.phys[r], a.len[r]);
      for (uint32_t i = lo; i < hi; i++) copy_in(i);
    }
    lo = hi;
  }
  if (!inline_entry) {
    alignas(64) char rb[kBlockSize];
    std::memset(rb, 0, sizeof(RecordHeader) + a.nruns * sizeof(Run));
    RecordHeader* rh = reinterpret_cast<RecordHeader*>(rb);
    rh->magic = kRecordMagic;
    rh->nruns = a.nruns;
    rh->size = off + n;
    rh->size_op = kSizeExtend;
    Run* runs = reinterpret_cast<Run*>(rb + sizeof(RecordHeader));
    uint32_t v = static_cast<uint32_t>(b0);
    for (uint32_t r = 0; r < a.nruns; r++) {
      runs[r] = Run{v, a.phys[r], a.len[r], 0};
      v += a.len[r];
    }
    size_t len = sizeof(RecordHeader) + a.nruns * sizeof(Run);
    rh->crc = Crc32c(rb, len);
    CopyData(base_ + uint64_t{rec} * kBlockSize, rb, len);
  }
  uint64_t entry = inline_entry ? MakeInline(0, static_cast<uint32_t>(b0), a.phys[0], nb) : MakeIndirect(0, rec);
  for (;;) {
    // Old bytes around a partial first/last block, from the block mapped
    // now; the commit checks it is still the one mapped.
    MAPFS_RETURN_IF_ERROR(CatchUp());
    uint64_t head_v = 0, tail_v = 0;
    auto copy_old = [&](uint64_t vb, uint32_t phys, size_t from, size_t to, uint64_t* mv) -> Status {
      auto m = Lookup(vb);
      if (!m.ok()) return m.status();
      *mv = *m;
      char* dst = base_ + uint64_t{phys} * kBlockSize + from;
      if (TablePhys(*m) == 0) {
        ZeroData(dst, to - from);
      } else {
        CopyData(dst, base_ + uint64_t{TablePhys(*m)} * kBlockSize + from, to - from);
      }
      return Status::Ok();
    };
    Status st;
    if (head_partial) st = copy_old(b0, a.At(0), 0, head_len, &head_v);
    if (st.ok() && tail_partial) st = copy_old(b1, a.At(nb - 1), tail_off, kBlockSize, &tail_v);
    if (st.ok()) st = Durable(true);
    uint64_t seq = 0;
    bool retry_copy = false;
    if (st.ok())
      st = Commit(entry, &seq, head_partial ? &b0 : nullptr, head_v, tail_partial ? &b1 : nullptr, tail_v,
                  expect_size, &retry_copy);
    if (!st.ok()) {
      release();
      return st;
    }
    if (retry_copy) continue;
    // Read-your-writes in this process, then a checkpoint if half the ring
    // is waiting (without waiting for another process's).
    MAPFS_RETURN_IF_ERROR(CatchUp());
    if (seq + 1 - persist::Load64(&shared()->ckpt_seq) >= hdr_.log_slots / 2) MAPFS_RETURN_IF_ERROR(Gc(false));
    return n;
  }
}

Result<size_t> VFile::Pwrite(const void* buf, size_t n, uint64_t off) {
  Pin pin(this);
  return PwriteUnpinned(buf, n, off, &pin);
}

Result<size_t> VFile::PwriteUnpinned(const void* buf, size_t n, uint64_t off, Pin* pin) {
  if (!writable_) return Status::Error(EBADF, "virtual: not open for writing");
  if (n == 0) return size_t{0};
  uint64_t max = uint64_t{hdr_.vblocks_max} * kBlockSize;
  if (off >= max || n > max - off) return Status::Error(EFBIG, "virtual: beyond the file's block table");
  // Each commit covers at most kMaxRunBlocks blocks: a larger write is
  // several commits, each atomic (docs/OVERLAY.md).
  size_t done = 0;
  while (done < n) {
    uint64_t pos = off + done;
    uint64_t limit = (pos / kBlockSize + kMaxRunBlocks) * kBlockSize;
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, limit - pos));
    auto r = WriteOnce(static_cast<const char*>(buf) + done, chunk, pos, nullptr, pin);
    if (!r.ok()) {
      if (done > 0) break;
      return r.status();
    }
    done += *r;
  }
  MAPFS_RETURN_IF_ERROR(Durable(false));
  return done;
}

Result<uint64_t> VFile::Append(const void* buf, size_t n) {
  if (!writable_) return Status::Error(EBADF, "virtual: not open for writing");
  Pin pin(this);
  uint64_t max = uint64_t{hdr_.vblocks_max} * kBlockSize;
  for (;;) {
    MAPFS_RETURN_IF_ERROR(CatchUp());
    uint64_t off = size_.load(std::memory_order_acquire);
    if (n == 0) return off;
    if (off >= max || n > max - off) return Status::Error(EFBIG, "virtual: beyond the file's block table");
    uint64_t limit = (off / kBlockSize + kMaxRunBlocks) * kBlockSize;
    size_t first = static_cast<size_t>(std::min<uint64_t>(n, limit - off));
    // The first commit lands only at the end it was computed for.
    auto r = WriteOnce(static_cast<const char*>(buf), first, off, &off, &pin);
    if (!r.ok() && r.status().code() == kSizeMoved) continue;
    if (!r.ok()) return r.status();
    if (first < n) {
      auto rest = PwriteUnpinned(static_cast<const char*>(buf) + first, n - first, off + first, &pin);
      if (!rest.ok()) return rest.status();
    }
    MAPFS_RETURN_IF_ERROR(Durable(false));
    return off;
  }
}

Status VFile::Truncate(uint64_t new_size) {
  if (!writable_) return Status::Error(EBADF, "virtual: not open for writing");
  if (new_size > uint64_t{hdr_.vblocks_max} * kBlockSize)
    return Status::Error(EFBIG, "virtual: beyond the file's block table");
  Pin pin(this);
  uint32_t rec = 0, rl = 0, rn = 0;
  MAPFS_RETURN_IF_ERROR(Alloc(1, &rec, &rl, &rn, 1));
  for (;;) {
    MAPFS_RETURN_IF_ERROR(CatchUp());
    uint64_t old = size_.load(std::memory_order_acquire);
    if (old == new_size) {
      Free(rec, 1);
      return Status::Ok();
    }
    // Blocks past the end are never mapped (invariant), so shrinking unmaps
    // [ceil(new), ceil(old)) and rewrites a partial last block with zeros
    // after the new end: bytes of a mapped block past the size are zero.
    alignas(64) char rb[sizeof(RecordHeader) + 2 * sizeof(Run)] = {};
    RecordHeader* rh = reinterpret_cast<RecordHeader*>(rb);
    Run* runs = reinterpret_cast<Run*>(rb + sizeof(RecordHeader));
    rh->magic = kRecordMagic;
    rh->size = new_size;
    rh->size_op = kSizeSet;
    uint64_t keep = (new_size + kBlockSize - 1) / kBlockSize, had = (old + kBlockSize - 1) / kBlockSize;
    if (had > keep) runs[rh->nruns++] = Run{static_cast<uint32_t>(keep), 0, static_cast<uint32_t>(had - keep), 0};
    uint64_t pb = new_size / kBlockSize, pv = 0;
    uint32_t part = 0;
    bool partial = new_size < old && new_size % kBlockSize != 0;
    if (partial) {
      auto m = Lookup(pb);
      if (!m.ok()) return m.status();
      pv = *m;
      if (TablePhys(pv) != 0) {
        uint32_t pl = 0, pn = 0;
        MAPFS_RETURN_IF_ERROR(Alloc(1, &part, &pl, &pn, 1));
        char* dst = base_ + uint64_t{part} * kBlockSize;
        size_t keep_bytes = new_size % kBlockSize;
        CopyData(dst, base_ + uint64_t{TablePhys(pv)} * kBlockSize, keep_bytes);
        ZeroData(dst + keep_bytes, kBlockSize - keep_bytes);
        runs[rh->nruns++] = Run{static_cast<uint32_t>(pb), part, 1, 0};
      }
    }
    size_t len = sizeof(RecordHeader) + rh->nruns * sizeof(Run);
    rh->crc = Crc32c(rb, len);
    CopyData(base_ + uint64_t{rec} * kBlockSize, rb, len);
    MAPFS_RETURN_IF_ERROR(Durable(true));
    uint64_t seq = 0;
    bool retry = false;
    Status st = Commit(MakeIndirect(0, rec), &seq, partial ? &pb : nullptr, pv, nullptr, 0, &old, &retry);
    if (retry || (!st.ok() && st.code() == kSizeMoved)) {
      if (part != 0) Free(part, 1);
      continue;
    }
    if (!st.ok()) {
      if (part != 0) Free(part, 1);
      Free(rec, 1);
      return st;
    }
    MAPFS_RETURN_IF_ERROR(CatchUp());
    return Durable(false);
  }
}

}  // namespace mapfs::overlay::vrt
