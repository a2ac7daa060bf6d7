// VFile writes: copy-on-write to fresh blocks, one CAS to commit.
//
// A write of blocks [b0, b1]:
//  1. allocates b1-b0+1 fresh blocks (bitmap, lock-free);
//  2. copies the caller's bytes there, and for a partial first/last block
//     the old bytes around them (read-modify-write) from the block mapped
//     now, remembering that mapping: through the map, or on tmpfs, for
//     fresh blocks past the end, composed in buffers and written by
//     pwritev with the whole blocks and the record (vfile.h, pwrite_data_);
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
                     const uint64_t* tail, uint64_t tail_v, const uint64_t* expect_size, bool* retry_copy,
                     uint64_t vlo, uint64_t vhi, bool sole_mapper, const uint64_t* epoch) {
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
    // Checked after slot s was found free, so after every commit before s
    // was replayed: a mapper's registration is then either seen here, or
    // its barrier entry (DirectBegin) comes after s, and the mapper
    // replays this entry before it looks a block up (vdirect.cc). The
    // mapper slots first, then the in-place ones: a writer claims its
    // in-place slot, then looks for a ready mapper (WriteInPlace), so a
    // writer still storing after the last mapper left is seen here.
    if (vlo < vhi && sole_mapper) {
      if (OthersMapped() || InPlaceBusy()) return Status::Error(kMappedNow, "virtual: another process maps the file");
    } else if (vlo < vhi && (Mapped() || InPlaceBusy())) {
      auto moves = MovesMapped(vlo, vhi);
      if (!moves.ok()) return moves.status();
      if (*moves) return Status::Error(kMappedNow, "virtual: a direct map holds a block of this write");
    }
    // After the mapper slots: a mapper not seen there either bumped the
    // epoch before (seen here) or gets its barrier after this entry.
    if (epoch != nullptr && DirectEpoch() != *epoch) {
      *retry_copy = true;
      return Status::Ok();
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
  // The caller's bytes: block i of the write through the map.
  auto copy_in = [&](uint32_t i) {
    uint64_t blk = (b0 + i) * kBlockSize;
    uint64_t from = std::max(off, blk), to = std::min(off + n, blk + kBlockSize);
    CopyData(base_ + uint64_t{a.At(i)} * kBlockSize + (from - blk), buf + (from - off), to - from);
  };
  // Content past the end goes into fresh blocks by the kernel's pwrite,
  // without mapping them here (vfile.h, pwrite_data_): whole blocks from
  // the caller's buffer, a partial first or last block composed here (the
  // old bytes around the new ones, from the block mapped now), the record
  // block from `rb`; one pwritev per group of blocks that follow each
  // other in the file (a small append: its block and its record, mostly).
  // Through the map, a fresh block would first be populated (a zeroing and
  // a page-table entry: MADV_POPULATE_WRITE, ~8 us a call in LevelDB's
  // small appends, docs/OVERLAY.md "Small appends").
  // Only for content past the end (appends): a rewrite's fresh blocks go
  // through the map, its chunk populated at once as before. Random 4 KiB
  // overwrites of a growing file, one pwrite per fresh block, cost 2.2-2.5
  // us a write in the run that grew the file against 0.8-0.9 (the loop of
  // mapfs-virtual-bench --engines).
  const uint64_t fresh = pwrite_data_ && extends ? fresh_.load(std::memory_order_relaxed) : ~uint64_t{0};
  // Pieces for WritePieces: one per fresh run, the record and the two
  // edges; written early if the runs are many (kMaxRuns at most).
  constexpr size_t kPieces = 16;
  Piece pieces[kPieces];
  size_t npieces = 0;
  bool head_composed = false, tail_composed = false;
  uint64_t fresh_end = 0;  // past the last fresh block written by pwrite
  uint32_t lo = 0;
  for (uint32_t r = 0; r < a.nruns; r++) {
    const uint32_t hi = lo + a.len[r];  // blocks [lo, hi) of the write are run r
    const uint32_t wlo = lo + (lo == 0 && head_partial ? 1 : 0);
    const uint32_t whi = hi - (hi == nb && tail_partial ? 1 : 0);
    if (a.phys[r] >= fresh) {
      if (npieces == kPieces - 3) {
        Status st = WritePieces(pieces, npieces);
        npieces = 0;
        if (!st.ok()) {
          release();
          return st;
        }
      }
      if (wlo < whi)
        pieces[npieces++] = Piece{uint64_t{a.phys[r]} + (wlo - lo), buf + ((b0 + wlo) * kBlockSize - off),
                                  size_t{whi - wlo} * kBlockSize};
      if (wlo > lo) head_composed = true;
      if (whi < hi) tail_composed = true;
      fresh_end = std::max<uint64_t>(fresh_end, uint64_t{a.phys[r]} + a.len[r]);
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
  const bool rec_composed = rec != 0 && rec >= fresh;
  // A whole block: what is not header and runs is written too (zeros, not
  // this stack's old bytes) when it goes by pwrite in a group.
  alignas(64) char rb[kBlockSize];
  if (!inline_entry) {
    std::memset(rb, 0, rec_composed ? kBlockSize : sizeof(RecordHeader) + a.nruns * sizeof(Run));
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
    if (rec_composed) {
      pieces[npieces++] = Piece{rec, rb, kBlockSize};
      fresh_end = std::max<uint64_t>(fresh_end, uint64_t{rec} + 1);
    } else {
      Touch(rec);
      CopyData(base_ + uint64_t{rec} * kBlockSize, rb, len);
    }
  }
  // The partial first and last blocks, composed (head_composed and
  // tail_composed); one buffer when they are the same block.
  alignas(64) char edge[2][kBlockSize];
  uint64_t entry = inline_entry ? MakeInline(0, static_cast<uint32_t>(b0), a.phys[0], nb) : MakeIndirect(0, rec);
  for (;;) {
    // Old bytes around a partial first/last block, from the block mapped
    // now; the commit checks it is still the one mapped.
    MAPFS_RETURN_IF_ERROR(CatchUp());
    // Before the old bytes are copied: a mapper that comes and goes before
    // the commit may have let writers change them in place.
    const uint64_t epoch = DirectEpoch();
    uint64_t head_v = 0, tail_v = 0;
    // Bytes [from, to) of virtual block vb as mapped now into dst.
    auto old_bytes = [&](uint64_t vb, char* dst, size_t from, size_t to, uint64_t* mv, bool composed) -> Status {
      auto m = Lookup(vb);
      if (!m.ok()) return m.status();
      *mv = *m;
      if (TablePhys(*m) == 0) {
        if (composed) {
          std::memset(dst, 0, to - from);
        } else {
          ZeroData(dst, to - from);
        }
      } else if (composed) {
        if (!EdgeBytes(*m, dst, from, to))
          std::memcpy(dst, base_ + uint64_t{TablePhys(*m)} * kBlockSize + from, to - from);
      } else {
        CopyData(dst, base_ + uint64_t{TablePhys(*m)} * kBlockSize + from, to - from);
      }
      return Status::Ok();
    };
    // A composed edge block: old bytes, then the caller's over them.
    auto new_bytes = [&](uint64_t vb, char* blk) {
      uint64_t at = vb * kBlockSize;
      uint64_t from = std::max(off, at), to = std::min(off + n, at + kBlockSize);
      std::memcpy(blk + (from - at), buf + (from - off), to - from);
    };
    Status st;
    char* const tail_blk = nb == 1 ? edge[0] : edge[1];
    if (head_partial) {
      char* dst = head_composed ? edge[0] : base_ + uint64_t{a.At(0)} * kBlockSize;
      st = old_bytes(b0, dst, 0, head_len, &head_v, head_composed);
    }
    if (st.ok() && tail_partial) {
      char* dst = tail_composed ? tail_blk + tail_off : base_ + uint64_t{a.At(nb - 1)} * kBlockSize + tail_off;
      st = old_bytes(b1, dst, tail_off, kBlockSize, &tail_v, tail_composed);
    }
    if (st.ok() && (head_composed || tail_composed)) {
      size_t np = npieces;
      if (head_composed) {
        new_bytes(b0, edge[0]);
        pieces[np++] = Piece{a.At(0), edge[0], kBlockSize};
      }
      if (tail_composed && !(nb == 1 && head_composed)) {
        new_bytes(b1, tail_blk);
        pieces[np++] = Piece{a.At(nb - 1), tail_blk, kBlockSize};
      }
      st = WritePieces(pieces, np);
      npieces = 0;  // whole blocks and the record are written: a retry rewrites the edges only
    } else if (st.ok() && npieces > 0) {
      st = WritePieces(pieces, npieces);
      npieces = 0;
    }
    if (st.ok() && fresh_end != 0) RaiseFresh(fresh_end);
    if (st.ok()) st = Durable(true);
    uint64_t seq = 0;
    bool retry_copy = false;
    if (st.ok())
      st = Commit(entry, &seq, head_partial ? &b0 : nullptr, head_v, tail_partial ? &b1 : nullptr, tail_v,
                  expect_size, &retry_copy, b0, b1 + 1, false, head_partial || tail_partial ? &epoch : nullptr);
    if (!st.ok()) {
      release();
      return st;
    }
    if (retry_copy) continue;
    if (tail_composed) RememberEdge(MakeTableEntry(seq, a.At(nb - 1)), tail_blk);
    // Read-your-writes in this process, then a checkpoint if half the ring
    // is waiting (without waiting for another process's). A record written
    // by pwrite is still in rb (all of its block): its replay here need not
    // map the block.
    const OwnRecord own{seq, rec, rb};
    MAPFS_RETURN_IF_ERROR(CatchUp(rec_composed ? &own : nullptr));
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
  unsigned spins = 0;
  while (done < n) {
    uint64_t pos = off + done;
    uint64_t limit = (pos / kBlockSize + kMaxRunBlocks) * kBlockSize;
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, limit - pos));
    if (Mapped()) {
      // A direct map is live: blocks it may hold are written in place, the
      // rest (holes, past the end) copy-on-write as always.
      size_t cow = 0;
      auto ip = WriteInPlace(static_cast<const char*>(buf) + done, n - done, pos, &cow);
      if (!ip.ok()) {
        if (done > 0) break;
        return ip.status();
      }
      if (*ip > 0) {
        done += *ip;
        continue;
      }
      if (cow > 0) chunk = std::min(chunk, cow);
    }
    auto r = WriteOnce(static_cast<const char*>(buf) + done, chunk, pos, nullptr, pin);
    if (!r.ok() && r.status().code() == kMappedNow) {
      // A map came, or one is not ready yet, or a writer stores in place
      // with no mapper left: plan again.
      AwaitMappers(&spins);
      continue;
    }
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
  unsigned spins = 0;
  for (;;) {
    MAPFS_RETURN_IF_ERROR(CatchUp());
    uint64_t off = size_.load(std::memory_order_acquire);
    if (n == 0) return off;
    if (off >= max || n > max - off) return Status::Error(EFBIG, "virtual: beyond the file's block table");
    if (Mapped()) {
      // While a direct map is live, at the size read now: the last block
      // may be written in place, so the append cannot be one commit
      // conditional on the size (appenders in other processes at the same
      // moment may overlap: docs/OVERLAY.md).
      auto r = PwriteUnpinned(buf, n, off, &pin);
      if (!r.ok()) return r.status();
      return off;
    }
    uint64_t limit = (off / kBlockSize + kMaxRunBlocks) * kBlockSize;
    size_t first = static_cast<size_t>(std::min<uint64_t>(n, limit - off));
    // The first commit lands only at the end it was computed for.
    auto r = WriteOnce(static_cast<const char*>(buf), first, off, &off, &pin);
    if (!r.ok() && r.status().code() == kMappedNow) AwaitMappers(&spins);
    if (!r.ok() && (r.status().code() == kSizeMoved || r.status().code() == kMappedNow)) continue;
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
  // A shrink by the sole mapper holds direct_mu_ (this process's slot stays
  // as it is) and keeps the slot claimed but not ready from before its
  // commit until the bytes past the new end are zeroed: an in-place writer
  // that claimed its slot before then is seen by the commit (refused,
  // tried again), one after it finds no ready mapper (copy-on-write,
  // ordered by the log), so none stores into a block the shrink frees.
  std::unique_lock<std::mutex> direct(direct_mu_, std::defer_lock);
  struct Unready {
    VFile* f = nullptr;
    ~Unready() {
      if (f != nullptr) f->DirectReady(true);
    }
  } unready;
  unsigned spins = 0;
  for (;;) {
    MAPFS_RETURN_IF_ERROR(CatchUp());
    uint64_t old = size_.load(std::memory_order_acquire);
    const uint64_t epoch = DirectEpoch();  // before the partial block's bytes are copied (WriteOnce)
    if (old == new_size) {
      Free(rec, 1);
      return Status::Ok();
    }
    // A shrink frees the blocks it cuts, which a direct map may hold (its
    // stores would then land in blocks reused for other content): refused
    // while another live process holds one (docs/OVERLAY.md). This
    // process's own direct maps were cut first by the engine (their pages
    // past the new end no longer map the file: DirectMaps::CutPast), so
    // the shrink then commits only if no other process registered
    // meanwhile, and the partial last block is zeroed in place once it
    // has (it stays mapped).
    bool sole = false;
    if (new_size < old && Mapped()) {
      if (!direct.owns_lock()) {
        direct.lock();
        continue;  // looked at again under the lock
      }
      ClearDead(mappers()->mappers, 16);
      if (OthersMapped() || direct_slot_ < 0 || direct_pid_ != static_cast<uint64_t>(getpid())) {
        Free(rec, 1);
        return Status::Error(EBUSY, "virtual: truncate: another process holds a writable shared map of the file");
      }
      sole = true;
      if (unready.f == nullptr) {
        DirectReady(false);
        unready.f = this;
      }
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
    // The sole mapper's partial last block is zeroed in place after the
    // commit (its maps see it; a kernel map's last page reads zeros past
    // the end), not copied.
    bool partial = new_size < old && new_size % kBlockSize != 0 && !sole;
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
    // Sole mapper: the commit lands only if no other process maps the file
    // and no writer is in place by then (Commit checks the slots instead
    // of the blocks).
    Status st = Commit(MakeIndirect(0, rec), &seq, partial ? &pb : nullptr, pv, nullptr, 0, &old, &retry,
                       new_size < old ? pb : 0, new_size < old ? had : 0, sole, partial ? &epoch : nullptr);
    if (retry || (!st.ok() && (st.code() == kSizeMoved || st.code() == kMappedNow))) {
      if (part != 0) Free(part, 1);
      if (!st.ok() && st.code() == kMappedNow) AwaitMappers(&spins);
      continue;
    }
    if (!st.ok()) {
      if (part != 0) Free(part, 1);
      Free(rec, 1);
      return st;
    }
    MAPFS_RETURN_IF_ERROR(CatchUp());
    if (sole && new_size % kBlockSize != 0) {
      // No commit can move the block (this process's slot is set) and no
      // writer stores in place (not ready): zeros past the new end.
      auto m = Lookup(pb);
      if (!m.ok()) return m.status();
      if (TablePhys(*m) != 0) {
        Touch(TablePhys(*m));
        ZeroData(base_ + uint64_t{TablePhys(*m)} * kBlockSize + new_size % kBlockSize,
                 kBlockSize - new_size % kBlockSize);
      }
    }
    return Durable(false);
  }
}

}  // namespace mapfs::overlay::vrt
