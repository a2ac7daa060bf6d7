#include "meta/inode_table.h"

#include <time.h>

#include <bit>
#include <cstring>
#include <string>

#include "common/crc32c.h"
#include "common/units.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "meta/shared_fs.h"
#include "space/partitions.h"
#include "vm/vm.h"

namespace mapfs::meta {

using namespace format;  // NOLINT: the on-media names are this layer's vocabulary

namespace {
uint64_t SuperWordOff() { return medium::format::kStateOff + offsetof(medium::format::PoolState, fs_super); }
uint64_t PartBytes(int level) { return kPageSize << (3 * level); }

uint32_t SuperChecksum(const Superblock* s) {
  return Crc32c(s, offsetof(Superblock, checksum));
}

Status Damaged(uint64_t voff, const std::string& what) {
  return Status::Error(EUCLEAN, "superblock at virtual offset " + std::to_string(voff) + ": " + what);
}
}  // namespace

Result<std::unique_ptr<InodeTable>> InodeTable::Open(medium::Pool* pool, vm::Vm* vm, space::Partitions* space) {
  uint64_t super = medium::Load64(pool->at<uint64_t>(SuperWordOff()));
  if (super == 0) return Status::Error(ENOENT, "pool has no file system yet");
  if (super % kPageSize != 0 || super >= vm->size()) return Damaged(super, "pointer outside the region");
  if (!vm->Translate(super).ok()) return Damaged(super, "not backed by the pool");
  MAPFS_RETURN_IF_ERROR(vm->Map(super, kPageSize));
  auto* s = reinterpret_cast<const Superblock*>(vm->at(super));
  if (s->magic != kSuperMagic) return Damaged(super, "bad magic");
  if (s->checksum != SuperChecksum(s)) return Damaged(super, "bad checksum");
  if (s->version != kSuperVersion) return Damaged(super, "unsupported version " + std::to_string(s->version));
  if (s->inode_size != kInodeSize || s->max_segments != kMaxSegments || s->root_ino != kRootIno)
    return Damaged(super, "unexpected geometry");
  if (s->segments == 0 || s->segments > kMaxSegments) return Damaged(super, "bad segment count");
  std::unique_ptr<InodeTable> t(new InodeTable(pool, vm, space, super));
  for (uint64_t i = 0; i < s->segments; i++) {
    uint64_t v = s->seg[i];
    if (v == 0 || v % PartBytes(SegLevel(static_cast<int>(i))) != 0 || v >= vm->size())
      return Damaged(super, "segment " + std::to_string(i) + " pointer is invalid");
    // Every page must be backed: inodes are touched directly, and a page
    // the fault handler could not allocate later (a full or damaged pool)
    // would kill the process instead of failing the mount. A segment once
    // populated stays backed, so usually this is a walk of the PPT, and the
    // mapping waits for the segment's first use (SegVoff): a mount does no
    // mapping work per segment.
    uint64_t bytes = PartBytes(SegLevel(static_cast<int>(i)));
    if (vm->Backed(v, bytes)) continue;
    Status st = vm->Populate(v, bytes);
    if (!st.ok()) return Damaged(super, "segment " + std::to_string(i) + " cannot be backed: " + st.message());
  }
  return t;
}

Status InodeTable::Format(medium::Pool* pool, vm::Vm* vm, space::Partitions* space,
                          const std::function<Status(InodeTable*, MetaTx*)>& make_root) {
  auto super = space->Alloc(0);
  if (!super.ok()) return super.status();
  auto seg0 = space->Alloc(SegLevel(0));
  if (!seg0.ok()) return seg0.status();
  // Neither partition is reachable yet: fill them directly, persist, then
  // one transaction links them.
  MAPFS_RETURN_IF_ERROR(vm->Map(*super, kPageSize));
  MAPFS_RETURN_IF_ERROR(vm->Map(*seg0, PartBytes(SegLevel(0))));
  Superblock s{};
  s.magic = kSuperMagic;
  s.version = kSuperVersion;
  s.inode_size = kInodeSize;
  s.root_ino = kRootIno;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  s.created_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  s.max_segments = kMaxSegments;
  s.checksum = SuperChecksum(&s);
  s.segments = 1;
  s.seg[0] = *seg0;
  medium::Write(vm->at(*super), &s, sizeof s);
  // Bitmap of segment 0: the bitmap slot itself and the root are in use.
  uint64_t bits = 1ull | (1ull << kRootIno);
  medium::Write(vm->at(*seg0), &bits, sizeof bits);
  medium::Persist(vm->at(*super), sizeof s);
  medium::Persist(vm->at(*seg0), 8);
  std::unique_ptr<InodeTable> t(new InodeTable(pool, vm, space, *super));
  MetaTx tx(pool, vm);
  MAPFS_RETURN_IF_ERROR(make_root(t.get(), &tx));
  medium::Tx raw;
  tx.MoveTo(&raw);
  raw.Put64(SuperWordOff(), *super);
  return pool->redo().Commit(raw);
}

Superblock* InodeTable::sb() const { return reinterpret_cast<Superblock*>(vm_->at(super_)); }

uint64_t InodeTable::segments() { return medium::Load64(&sb()->segments); }

uint64_t InodeTable::SegVoff(int seg) {
  uint64_t v = seg_cache_[seg].load(std::memory_order_acquire);
  if (v != 0) return v;
  v = medium::Load64(&sb()->seg[seg]);
  if (v == 0) return 0;
  if (!vm_->Map(v, PartBytes(SegLevel(seg))).ok()) return 0;
  seg_cache_[seg].store(v, std::memory_order_release);
  return v;
}

bool InodeTable::Valid(uint64_t ino) {
  if (ino == 0 || ino >= kMaxInodes) return false;
  int seg = SegOf(ino);
  if (ino - SegBase(seg) < SegBitmapSlots(seg)) return false;
  return SegVoff(seg) != 0;
}

char* InodeTable::VmBase(vm::Vm* vm) { return vm->base(); }

Inode* InodeTable::GetSlow(int seg, uint64_t slot) {
  uint64_t v = SegVoff(seg);
  if (v == 0) return nullptr;
  return reinterpret_cast<Inode*>(vm_->at(v + slot * kInodeSize));
}

uint64_t InodeTable::VoffOf(uint64_t ino) const {
  int seg = SegOf(ino);
  uint64_t v = seg_cache_[seg].load(std::memory_order_acquire);
  if (v == 0) v = medium::Load64(&sb()->seg[seg]);
  return v + (ino - SegBase(seg)) * kInodeSize;
}

std::atomic<uint64_t>* InodeTable::BitmapWord(int seg, uint64_t slot) {
  return reinterpret_cast<std::atomic<uint64_t>*>(vm_->at(SegVoff(seg))) + slot / 64;
}

Status InodeTable::AddSegment(int seg) {
  // Holds kInodes.
  if (seg >= kMaxSegments) return Status::Error(ENOSPC, "inode table is full");
  auto v = space_->Alloc(SegLevel(seg));
  if (!v.ok()) return v.status();
  uint64_t bytes = PartBytes(SegLevel(seg));
  if (SegLevel(seg) >= 3) {
    Status st = vm_->Populate(*v, bytes);
    if (!st.ok()) {
      (void)space_->Free(*v);
      return st;
    }
  } else {
    MAPFS_RETURN_IF_ERROR(vm_->Map(*v, bytes));
  }
  // Mark the bitmap's own slots used before the segment is reachable.
  uint64_t b = SegBitmapSlots(seg);
  uint64_t w = (b >= 64) ? ~0ull : ((1ull << b) - 1);
  medium::Store64(reinterpret_cast<uint64_t*>(vm_->at(*v)), w);
  medium::Persist(vm_->at(*v), 8);
  MetaTx tx(pool_, vm_);
  MAPFS_RETURN_IF_ERROR(tx.Store64(super_ + offsetof(Superblock, seg) + 8 * seg, *v));
  MAPFS_RETURN_IF_ERROR(tx.Store64(super_ + offsetof(Superblock, segments), seg + 1));
  return tx.Commit();
}

// Claims the lowest clear bit of `word` by compare-and-swap; -1 when none is
// clear. Concurrent claimers of one word each get a different bit: the CAS
// fails for all but one of them, and the losers retry with the word they
// read.
int InodeTable::ClaimBit(std::atomic<uint64_t>* word) {
  uint64_t v = word->load(std::memory_order_relaxed);
  for (;;) {
    if (~v == 0) return -1;
    int bit = std::countr_zero(~v);
    if (word->compare_exchange_weak(v, v | (1ull << bit), std::memory_order_acq_rel, std::memory_order_relaxed)) {
      // Reported after the store, as the page allocator's atomic updates
      // are: the crash recorder sees the word's new value at the flush.
      medium::TraceStore(word, 8);
      // Written back, not fenced: the caller's commit fence (this thread's
      // next) makes the bit durable no later than the inode.
      medium::Flush(word, 8);
      return bit;
    }
  }
}

Result<uint64_t> InodeTable::TryReserve() {
  FsShared* sh = FsSharedOf(pool_);
  uint64_t nseg = segments();
  uint64_t hint = sh->inode_hint.load(std::memory_order_relaxed);
  if (hint >= SegBase(static_cast<int>(nseg))) hint = 0;
  // Two passes: from the word holding the hint to the end, then from the
  // start. The first pass starts at that word directly (segment bases are
  // multiples of 64): a create must not cost a step per inode made before.
  const int hint_seg = SegOf(hint);
  const uint64_t hint_word = (hint - SegBase(hint_seg)) / 64;
  for (int pass = 0; pass < 2; pass++) {
    for (int seg = pass == 0 ? hint_seg : 0; seg < static_cast<int>(nseg); seg++) {
      // A segment being added by another thread may be counted before its
      // pointer reads back here: it has no slot for us yet.
      if (SegVoff(seg) == 0) continue;
      for (uint64_t w = pass == 0 && seg == hint_seg ? hint_word : 0; w < SegSlots(seg) / 64; w++) {
        int bit = ClaimBit(BitmapWord(seg, w * 64));
        if (bit < 0) continue;
        uint64_t ino = SegBase(seg) + w * 64 + static_cast<uint64_t>(bit);
        sh->inode_hint.store(ino + 1, std::memory_order_relaxed);
        return ino;
      }
    }
  }
  return Status::Error(ENOSPC, "no free inode slot");
}

Result<uint64_t> InodeTable::Reserve() {
  // Lock-free: slots are claimed by compare-and-swap on the bitmap words,
  // so creates in different directories do not serialise on a pool-wide
  // lock. Only growing the table takes kInodes.
  auto r = TryReserve();
  if (r.ok()) return r;
  medium::PoolLock lock(pool_, medium::LockId::kInodes);
  // Another thread may have added a segment (or freed a slot) meanwhile.
  r = TryReserve();
  if (r.ok()) return r;
  int seg = static_cast<int>(segments());
  MAPFS_RETURN_IF_ERROR(AddSegment(seg));
  // The new segment is visible to lock-free reservers from its commit on:
  // claim a slot in it like they do (its bitmap's own slots are marked).
  for (uint64_t w = 0; w < SegSlots(seg) / 64; w++) {
    int bit = ClaimBit(BitmapWord(seg, w * 64));
    if (bit < 0) continue;
    uint64_t ino = SegBase(seg) + w * 64 + static_cast<uint64_t>(bit);
    FsSharedOf(pool_)->inode_hint.store(ino + 1, std::memory_order_relaxed);
    return ino;
  }
  return TryReserve();  // others filled the new segment already
}

void InodeTable::Release(uint64_t ino) {
  if (!Valid(ino)) return;
  int seg = SegOf(ino);
  uint64_t slot = ino - SegBase(seg);
  auto* word = BitmapWord(seg, slot);
  // Atomic: reservers claim other bits of the word concurrently, without a
  // lock. Written back, not fenced: until some later fence makes the clear
  // bit durable, a crash leaves the set bit over a free slot, a leak that
  // Reconcile returns (as it does for a crash just before this store).
  word->fetch_and(~(1ull << (slot % 64)), std::memory_order_acq_rel);
  medium::TraceStore(word, 8);
  medium::Flush(word, 8);
  FsShared* sh = FsSharedOf(pool_);
  if (ino < sh->inode_hint.load(std::memory_order_relaxed)) sh->inode_hint.store(ino, std::memory_order_relaxed);
}

void InodeTable::ForEach(const std::function<void(uint64_t, Inode*)>& fn) {
  uint64_t nseg = segments();
  for (int seg = 0; seg < static_cast<int>(nseg); seg++) {
    if (SegVoff(seg) == 0) continue;
    for (uint64_t slot = SegBitmapSlots(seg); slot < SegSlots(seg); slot++) {
      uint64_t w = BitmapWord(seg, slot)->load();
      if (w == 0 && slot % 64 == 0) {
        slot += 63;
        continue;
      }
      if (w & (1ull << (slot % 64))) fn(SegBase(seg) + slot, Get(SegBase(seg) + slot));
    }
  }
}

void InodeTable::ForEachPartition(const std::function<void(uint64_t)>& fn) {
  fn(super_);
  uint64_t nseg = segments();
  for (int seg = 0; seg < static_cast<int>(nseg); seg++)
    if (uint64_t v = SegVoff(seg)) fn(v);
}

Status InodeTable::Reconcile(std::vector<uint64_t>* orphans, uint64_t* fixed) {
  uint64_t nseg = segments();
  for (int seg = 0; seg < static_cast<int>(nseg); seg++) {
    if (SegVoff(seg) == 0) return Damaged(super_, "segment " + std::to_string(seg) + " missing");
    // The bitmap's own slots are always in use (never handed out).
    for (uint64_t slot = 0; slot < SegBitmapSlots(seg); slot++) {
      auto* word = BitmapWord(seg, slot);
      if (word->load() & (1ull << (slot % 64))) continue;
      medium::Store64(reinterpret_cast<uint64_t*>(word), word->load() | (1ull << (slot % 64)));
      medium::Persist(word, 8);
      (*fixed)++;
    }
    for (uint64_t slot = SegBitmapSlots(seg); slot < SegSlots(seg); slot++) {
      uint64_t ino = SegBase(seg) + slot;
      Inode* in = Get(ino);
      auto* word = BitmapWord(seg, slot);
      bool bit = word->load() & (1ull << (slot % 64));
      bool live = in->mode != 0;
      if (live && in->nlink == 0 && ino != kRootIno) orphans->push_back(ino);
      if (bit == live) continue;
      uint64_t v = word->load() ^ (1ull << (slot % 64));
      medium::Store64(reinterpret_cast<uint64_t*>(word), v);
      medium::Persist(word, 8);
      (*fixed)++;
    }
  }
  return Status::Ok();
}

Status InodeTable::Check(std::vector<std::string>* problems) {
  uint64_t nseg = segments();
  for (int seg = 0; seg < static_cast<int>(nseg); seg++) {
    if (SegVoff(seg) == 0) {
      problems->push_back("inode segment " + std::to_string(seg) + " missing");
      continue;
    }
    for (uint64_t slot = 0; slot < SegBitmapSlots(seg); slot++)
      if (!(BitmapWord(seg, slot)->load() & (1ull << (slot % 64))))
        problems->push_back("inode segment " + std::to_string(seg) + ": bitmap bit of its own slot " +
                            std::to_string(slot) + " is clear");
    for (uint64_t slot = SegBitmapSlots(seg); slot < SegSlots(seg); slot++) {
      uint64_t ino = SegBase(seg) + slot;
      Inode* in = Get(ino);
      bool bit = BitmapWord(seg, slot)->load() & (1ull << (slot % 64));
      bool live = in->mode != 0;
      if (bit && !live)
        problems->push_back("inode " + std::to_string(ino) + ": bitmap bit set on a free slot (leak)");
      else if (!bit && live)
        problems->push_back("inode " + std::to_string(ino) + ": live inode without its bitmap bit");
    }
  }
  return Status::Ok();
}

}  // namespace mapfs::meta
