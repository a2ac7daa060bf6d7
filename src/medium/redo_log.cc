#include "medium/redo_log.h"

#include <sched.h>

#include <cstring>
#include <iterator>

#include "common/crc32c.h"
#include "medium/persist.h"
#include "medium/pool.h"

namespace mapfs::medium {

// ---------------------------------------------------------------- Tx

void Tx::Put64(uint64_t pool_off, uint64_t value) {
  recs_.push_back({pool_off, 8, nullptr, own_.size()});
  own_.push_back(value);
  bytes_ += 24;
}

void Tx::PutBytes(uint64_t pool_off, const void* data, size_t len) {
  // A zero-length store changes nothing; recording it would make the record
  // set malformed (len 0) and cost every record after it.
  if (len == 0) return;
  size_t words = (len + 7) / 8;
  recs_.push_back({pool_off, len, nullptr, own_.size()});
  own_.resize(own_.size() + words, 0);
  std::memcpy(own_.data() + recs_.back().own, data, len);
  bytes_ += 16 + words * 8;
}

void Tx::PutBytesRef(uint64_t pool_off, const void* data, size_t len) {
  if (len == 0) return;
  recs_.push_back({pool_off, len, data, 0});
  bytes_ += 16 + (len + 7) / 8 * 8;
}

void Tx::PutCopy(uint64_t dst, uint64_t src, size_t len) {
  if (len == 0) return;
  if (!recs_.empty()) {
    Rec& b = recs_.back();
    if (b.src != kNoSrc && b.off + b.len == dst && b.src + b.len == src) {
      b.len += len;
      return;
    }
  }
  recs_.push_back({dst, len, nullptr, 0, src});
  bytes_ += 24;
}

void Tx::Append(const Tx& o) {
  size_t base = own_.size();
  own_.insert(own_.end(), o.own_.begin(), o.own_.end());
  for (Rec r : o.recs_) {
    if (!r.ext) r.own += base;
    recs_.push_back(r);
  }
  bytes_ += o.bytes_;
}

void Tx::Clear() {
  recs_.clear();
  own_.clear();
  bytes_ = 0;
}

// ---------------------------------------------------------------- RedoLog

namespace {

uint64_t Mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A sequence word for a new commit by mount `token`: nonzero and, with
// overwhelming probability, different from every value a slot held before
// (see Commit). A per-thread generator seeded from the time stamp counter;
// the mount token (unique among the pool's mounts) is mixed in because a
// child of fork() inherits the generator's state.
uint64_t NextSeq(uint64_t token) {
  static thread_local uint64_t state = 0;
  if (state == 0) state = __builtin_ia32_rdtsc() ^ reinterpret_cast<uintptr_t>(&state);
  uint64_t z = Mix(state += 0x9e3779b97f4a7c15ull) ^ Mix(token);
  return z == 0 ? 1 : z;
}

uint32_t SlotCrc(const RedoSlotHeader* h, const uint64_t* payload) {
  uint32_t crc = Crc32c(&h->seq, sizeof h->seq);
  crc = Crc32c(&h->bytes, sizeof h->bytes, crc);
  return Crc32c(payload, h->bytes, crc);
}

// Record layout in a slot: {off, len, data padded to 8 bytes}, or for a
// copy within the pool {off, len | kCopyBit, src}.
constexpr uint64_t kCopyBit = uint64_t{1} << 63;

// Walks the records in `payload`, calling fn(off, len, data, src) for each
// (data null and src the source offset for a copy); stops and returns false
// at the first record that is malformed or lies outside a pool of `size`
// bytes.
template <typename Fn>
bool ForEachRecord(const uint64_t* payload, size_t bytes, uint64_t size, Fn fn) {
  size_t words = bytes / 8;
  size_t i = 0;
  while (i + 2 <= words) {
    uint64_t off = payload[i];
    uint64_t len = payload[i + 1];
    i += 2;
    if (len & kCopyBit) {
      len &= ~kCopyBit;
      if (i + 1 > words) return false;
      uint64_t src = payload[i++];
      if (len == 0 || off > size || len > size - off || src > size || len > size - src ||
          (src < off + len && off < src + len))
        return false;
      fn(off, len, nullptr, src);
      continue;
    }
    if (len == 0 || off > size || len > size - off || (len + 7) / 8 > words - i) return false;
    fn(off, len, payload + i, uint64_t{0});
    i += (len + 7) / 8;
  }
  return i == words;
}

// True if `payload` is a well-formed list of records that all lie inside a
// pool of `size` bytes.
bool RecordsValid(const uint64_t* payload, size_t bytes, uint64_t size) {
  return ForEachRecord(payload, bytes, size, [](uint64_t, uint64_t, const uint64_t*, uint64_t) {});
}

// Applies the records in `payload`; returns false, applying nothing, if they
// are malformed (which a valid checksum makes impossible short of a bug or
// collision). Checking first keeps even a bad record set all-or-nothing.
bool ApplyRecords(Pool* pool, const uint64_t* payload, size_t bytes) {
  if (!RecordsValid(payload, bytes, pool->size())) return false;
  ForEachRecord(payload, bytes, pool->size(), [pool](uint64_t off, uint64_t len, const uint64_t* data, uint64_t src) {
    char* dst = pool->base() + off;
    if (data == nullptr) {
      CopyNt(dst, pool->base() + src, len);
    } else if (len == 8 && off % 8 == 0) {
      Store64(reinterpret_cast<uint64_t*>(dst), *data);
      Flush(dst, 8);
    } else {
      CopyNt(dst, data, len);
    }
  });
  Fence();
  return true;
}

}  // namespace

RedoSlotHeader* RedoLog::slot_header(int slot) const {
  const auto& h = pool_->header();
  return pool_->at<RedoSlotHeader>(h.redo_off + uint64_t(slot) * h.redo_slot_size);
}

size_t RedoLog::capacity() const { return pool_->header().redo_slot_size - sizeof(RedoSlotHeader); }

int RedoLog::AcquireSlot() {
  const int n = static_cast<int>(pool_->header().redo_slots);
  const uint64_t me = pool_->mount_token();
  // Start at a per-thread position so threads rarely collide.
  static thread_local unsigned start = static_cast<unsigned>(reinterpret_cast<uintptr_t>(&start) >> 6);
  for (int round = 0;; round++) {
    for (int k = 0; k < n; k++) {
      int s = static_cast<int>((start + k) % n);
      uint64_t expect = 0;
      if (pool_->shared()->redo_owner[s].compare_exchange_strong(expect, me)) {
        start = s + 1;
        return s;
      }
    }
    // All slots busy: maybe their owners died.
    if (round % 64 == 63) RecoverDead();
    sched_yield();
  }
}

// A release store (a plain mov on x86), not the sequentially consistent
// one (an xchg, which drains the store buffer: ~13 % of a create's samples
// were spent there). What the slot's next owner needs is that everything
// this commit wrote to the slot is visible before the slot reads as free:
// the caller fenced (sfence) after its last non-temporal store to the
// slot, and sfence orders every earlier store, non-temporal ones included,
// before this later one; release orders the earlier ordinary stores (the
// applied words). Nothing here needs a later load ordered after the store
// (no store-load pairing with another thread: owners are taken by CAS,
// which is a full barrier on the acquiring side), and the owner words live
// in shared DRAM, not the pool, so durability does not depend on it: a
// process that dies with the store in its store buffer still drains it.
void RedoLog::ReleaseSlot(int slot) { pool_->shared()->redo_owner[slot].store(0, std::memory_order_release); }

uint32_t RedoLog::WriteRecords(const Tx& tx, uint64_t* payload, uint32_t crc) {
  // Record headers and small data gather in `stage` and go out in one
  // non-temporal copy; large data goes straight from its source. The
  // checksum follows the bytes in log order.
  alignas(64) uint64_t stage[128];
  size_t staged = 0;  // words in stage
  auto* out = reinterpret_cast<char*>(payload);
  auto flush_stage = [&] {
    if (staged == 0) return;
    CopyNt(out, stage, staged * 8);
    crc = Crc32c(stage, staged * 8, crc);
    out += staged * 8;
    staged = 0;
  };
  constexpr size_t kDirect = 256;  // data at least this large is not staged
  for (const Tx::Rec& r : tx.recs_) {
    if (r.src != Tx::kNoSrc) {
      if (staged + 3 > std::size(stage)) flush_stage();
      stage[staged++] = r.off;
      stage[staged++] = r.len | kCopyBit;
      stage[staged++] = r.src;
      continue;
    }
    if (r.len == 8) {
      // Most records of a namespace operation are one word: no
      // variable-length copy (a call to memcpy) for them.
      if (staged + 3 > std::size(stage)) flush_stage();
      stage[staged++] = r.off;
      stage[staged++] = 8;
      std::memcpy(&stage[staged++], tx.data(r), 8);
      continue;
    }
    size_t words = (r.len + 7) / 8;
    if (staged + 2 + (r.len < kDirect ? words : 0) > std::size(stage)) flush_stage();
    stage[staged++] = r.off;
    stage[staged++] = r.len;
    if (r.len < kDirect) {
      stage[staged + words - 1] = 0;  // padding reads as zero
      std::memcpy(stage + staged, tx.data(r), r.len);
      staged += words;
      continue;
    }
    flush_stage();
    CopyNt(out, tx.data(r), r.len);
    crc = Crc32c(tx.data(r), r.len, crc);
    out += r.len;
    if (size_t pad = words * 8 - r.len) {
      static constexpr char kZeros[8] = {};
      CopyNt(out, kZeros, pad);
      crc = Crc32c(kZeros, pad, crc);
      out += pad;
    }
  }
  flush_stage();
  return crc;
}

Status RedoLog::Commit(const Tx& tx) {
  if (tx.empty()) return Status::Ok();
  size_t bytes = tx.payload_bytes();
  if (bytes > capacity()) return Status::Error(E2BIG, "redo transaction too large");
  // Refuse a record that could not be applied before anything is written:
  // committing it would apply the records before it and silently drop the rest.
  const uint64_t size = pool_->size();
  for (const Tx::Rec& r : tx.recs_) {
    if (r.off > size || r.len > size - r.off || (r.len & kCopyBit))
      return Status::Error(EINVAL, "redo transaction stores outside the pool");
    if (r.src != Tx::kNoSrc &&
        (r.src > size || r.len > size - r.src || (r.src < r.off + r.len && r.off < r.src + r.len)))
      return Status::Error(EINVAL, "redo transaction copies from outside the pool or onto its source");
  }
  // Test-only: the classic logging bug the crash checker must catch.
  if (BugInjected(InjectedBug::kApplyBeforeCommit)) Apply(tx);
  int slot = AcquireSlot();
  RedoSlotHeader* h = slot_header(slot);
  auto* payload = reinterpret_cast<uint64_t*>(h + 1);
  // 1. Payload and header in one go, all non-temporal, one fence: once
  //    durable, the transaction is committed. Real PM persists these
  //    8-byte words in any order, so a crash may leave any mix of the new
  //    payload, the new header words and what the slot held before (its
  //    last commit's `bytes`, `crc` and payload beside `seq` = 0). The
  //    checksum covers `seq`, `bytes` and the payload, and `seq` is fresh
  //    for every commit (never the value a previous commit left in this
  //    slot), so no such mix validates: neither a new `seq` over a partly
  //    written payload nor a new `seq` beside the previous commit's length
  //    and checksum (which a constant `seq` would validate over a payload
  //    whose prefix had not changed yet). The header words are
  //    non-temporal: nothing reads them on this path, and a write-back of
  //    a cached line costs more.
  RedoSlotHeader nh{};
  nh.seq = NextSeq(pool_->mount_token());
  nh.bytes = static_cast<uint32_t>(bytes);
  uint32_t crc = Crc32c(&nh.seq, sizeof nh.seq);
  crc = Crc32c(&nh.bytes, sizeof nh.bytes, crc);
  nh.crc = WriteRecords(tx, payload, crc);
  uint64_t len_crc;
  static_assert(offsetof(RedoSlotHeader, crc) == offsetof(RedoSlotHeader, bytes) + 4);
  std::memcpy(&len_crc, &nh.bytes, 8);
  StoreNt64(reinterpret_cast<uint64_t*>(&h->bytes), len_crc);
  StoreNt64(&h->seq, nh.seq);
  Fence();
  // 2. Apply, from the transaction's own buffers (in cache) rather than the
  //    log; ends with a fence: every record durable before the slot is
  //    retired. 3. Retire: durable before the slot can be reused and before
  //    any later transaction (of any thread) changes the same words, which
  //    a replay of this one would otherwise undo.
  Apply(tx);
  StoreNt64(&h->seq, 0);
  Fence();
  ReleaseSlot(slot);
  return Status::Ok();
}

// 8-byte words are applied with single atomic stores (lock-free readers
// never see one torn) and stay in the cache; each cache line they touch is
// written back once, after the last store to it, however many words of the
// line the transaction changes (a create changes several words of one
// directory block line and of one inode line). Byte ranges go
// non-temporal. Ends with the fence that makes every record durable.
void RedoLog::Apply(const Tx& tx) {
  char* base = pool_->base();
  constexpr size_t kMaxLines = 32;
  uintptr_t lines[kMaxLines];
  size_t nlines = 0;
  for (const Tx::Rec& r : tx.recs_) {
    char* dst = base + r.off;
    if (r.src != Tx::kNoSrc) {
      CopyNt(dst, base + r.src, r.len);
      continue;
    }
    if (r.len != 8 || r.off % 8 != 0) {
      CopyNt(dst, tx.data(r), r.len);
      continue;
    }
    uint64_t v;  // a referenced record's bytes may sit at any address
    std::memcpy(&v, tx.data(r), 8);
    Store64(reinterpret_cast<uint64_t*>(dst), v);
    uintptr_t line = reinterpret_cast<uintptr_t>(dst) & ~uintptr_t{63};
    bool seen = false;
    for (size_t i = 0; i < nlines && !seen; i++) seen = lines[i] == line;
    if (seen) continue;
    if (nlines == kMaxLines) {
      // Rare (a structural transaction): write the oldest back now; a
      // later store to it is written back again.
      Flush(reinterpret_cast<const void*>(lines[0]), 64);
      std::memmove(lines, lines + 1, sizeof lines[0] * (kMaxLines - 1));
      nlines--;
    }
    lines[nlines++] = line;
  }
  for (size_t i = 0; i < nlines; i++) Flush(reinterpret_cast<const void*>(lines[i]), 64);
  Fence();
}

bool RedoLog::ReplaySlot(int slot) {
  RedoSlotHeader* h = slot_header(slot);
  if (Load64(&h->seq) == 0) return false;
  bool valid = h->bytes <= capacity() && h->bytes % 8 == 0 &&
               h->crc == SlotCrc(h, reinterpret_cast<const uint64_t*>(h + 1));
  bool applied = valid && ApplyRecords(pool_, reinterpret_cast<const uint64_t*>(h + 1), h->bytes);
  // Uncommitted (torn) or replayed: either way the slot is retired.
  Store64(&h->seq, 0);
  Persist(&h->seq, 8);
  return applied;
}

int RedoLog::RecoverAll() {
  int n = 0;
  for (int s = 0; s < static_cast<int>(pool_->header().redo_slots); s++) n += ReplaySlot(s) ? 1 : 0;
  return n;
}

int RedoLog::RecoverDead() {
  PoolLock lock(pool_, LockId::kRecovery);
  return RecoverDeadLocked();
}

int RedoLog::RecoverDeadLocked() {
  SharedState* sh = pool_->shared();
  int n = 0;
  for (int s = 0; s < static_cast<int>(pool_->header().redo_slots); s++) {
    uint64_t owner = sh->redo_owner[s].load();
    if (owner == 0) continue;
    // An owner no entry names any more is gone: entries are freed by a
    // clean close (after its last commit) or reused, under this lock, only
    // after this very replay.
    bool dead = true;
    for (int m = 0; m < kMaxMounts; m++)
      if (sh->mounts[m].token.load() == owner) dead = !pool_->MountAlive(m);
    if (!dead) continue;
    n += ReplaySlot(s) ? 1 : 0;
    sh->redo_owner[s].store(0);
  }
  // The mount entries of dead mounts stay registered on purpose: the last
  // clean close sees them and leaves the pool dirty, so the next exclusive
  // open reclaims whatever the dead mount leaked. (An entry reused for a new
  // mount is counted in SharedState::vanished instead.)
  return n;
}

}  // namespace mapfs::medium
