// Global cuckoo table with run entries (cuckoo.h).
#include "map/cuckoo.h"

#include <algorithm>
#include <string>
#include <unordered_set>

#include "map/designs.h"
#include "map/hash.h"
#include "map/map_persist.h"
#include "medium/pool.h"
#include "medium/redo_log.h"

namespace mapfs::map {
namespace {

using format::CuckooValue;
using format::kCuckooSlots;
using format::kEmptyKey;
using format::kMaxRun;
using format::MakeKey;
using format::ValueBack;
using format::ValueBlock;
using format::ValueRun;

constexpr uint32_t kMaxSearchNodes = 2048;  // buckets a displacement search may visit

}  // namespace

CuckooMapper::CuckooMapper(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h)
    : Mapper(pool, area_off, h),
      table_(reinterpret_cast<Entry*>(base_ + h.table_off)),
      nb_(static_cast<uint32_t>(h.cuckoo_buckets)),
      max_path_(h.cuckoo_max_path ? h.cuckoo_max_path : kDefaultMaxPath),
      table_off_(h.table_off),
      bitmap_off_(h.bitmap_off),
      fixed_bytes_(format::kBlockSize + h.table_bytes + h.bitmap_bytes),
      bm_(reinterpret_cast<uint64_t*>(base_ + h.bitmap_off), area_off + h.bitmap_off, h.nblocks) {}

std::pair<uint32_t, uint32_t> CuckooMapper::Buckets(uint64_t key) const {
  uint32_t b1 = SlotOf(key, kSeedPrimary, nb_);
  uint32_t b2 = SlotOf(key, kSeedSecondary, nb_);
  if (b2 == b1 && nb_ > 1) b2 = b1 + 1 == nb_ ? 0 : b1 + 1;
  return {b1, b2};
}

CuckooMapper::Entry CuckooMapper::Get(uint64_t idx) const {
  auto it = overlay_.find(idx);
  if (it != overlay_.end()) return it->second;
  return {Load64(&table_[idx].key), Load64(&table_[idx].value)};
}

int64_t CuckooMapper::FindPlanned(uint64_t key) const {
  auto [b1, b2] = Buckets(key);
  for (uint32_t b : {b1, b2})
    for (uint32_t s = 0; s < kCuckooSlots; s++)
      if (Get(uint64_t{b} * kCuckooSlots + s).key == key) return int64_t{b} * kCuckooSlots + s;
  return -1;
}

int64_t CuckooMapper::FindLive(uint64_t key, uint64_t* value) const {
  auto [b1, b2] = Buckets(key);
  __builtin_prefetch(&table_[uint64_t{b2} * kCuckooSlots]);
  for (;;) {
    const uint64_t s0 = seq_.load(std::memory_order_acquire);
    if (s0 & 1) {
      __builtin_ia32_pause();
      continue;
    }
    int64_t found = -1;
    for (uint32_t b : {b1, b2}) {
      for (uint32_t s = 0; s < kCuckooSlots && found < 0; s++) {
        const Entry& e = table_[uint64_t{b} * kCuckooSlots + s];
        if (Load64(&e.key) == key) {
          found = int64_t{b} * kCuckooSlots + s;
          *value = Load64(&e.value);
        }
      }
      if (found >= 0) break;
    }
    // The entry words were read with acquire loads, so this re-read cannot
    // move before them: an unchanged even count means no step ran meanwhile.
    if (seq_.load(std::memory_order_acquire) == s0) return found;
  }
}

bool CuckooMapper::Place(const Entry& e) {
  auto [b1, b2] = Buckets(e.key);
  // Breadth-first search for a free slot: node i is a bucket reached by
  // moving the entry in slot `via` of node `parent` to its other bucket.
  struct Node {
    uint32_t bucket;
    int32_t parent;
    uint32_t via;
    uint32_t depth;
  };
  std::vector<Node> nodes = {{b1, -1, 0, 0}};
  if (b2 != b1) nodes.push_back({b2, -1, 0, 0});
  std::unordered_set<uint32_t> seen = {b1, b2};
  for (size_t i = 0; i < nodes.size(); i++) {
    const Node n = nodes[i];
    for (uint32_t s = 0; s < kCuckooSlots; s++) {
      uint64_t idx = uint64_t{n.bucket} * kCuckooSlots + s;
      if (Get(idx).key != kEmptyKey) continue;
      // Free slot: shift every entry on the path one step, from the end.
      int32_t cur = static_cast<int32_t>(i);
      uint64_t free_idx = idx;
      while (nodes[cur].parent >= 0) {
        const Node& p = nodes[nodes[cur].parent];
        uint64_t src = uint64_t{p.bucket} * kCuckooSlots + nodes[cur].via;
        Put(free_idx, Get(src));
        free_idx = src;
        cur = nodes[cur].parent;
      }
      Put(free_idx, e);
      return true;
    }
    if (n.depth >= max_path_ || nodes.size() >= kMaxSearchNodes) continue;
    for (uint32_t s = 0; s < kCuckooSlots; s++) {
      uint64_t k = Get(uint64_t{n.bucket} * kCuckooSlots + s).key;
      auto [k1, k2] = Buckets(k);
      uint32_t alt = n.bucket == k1 ? k2 : k1;
      if (seen.insert(alt).second) nodes.push_back({alt, static_cast<int32_t>(i), s, n.depth + 1});
    }
  }
  return false;  // every path within the bound ends in full buckets
}

Status CuckooMapper::CommitStep(medium::Tx* tx) {
  // Within an entry the value goes first, the key (the valid indicator) last.
  for (const auto& [idx, e] : overlay_) {
    tx->Put64(pool_->offset_of(&table_[idx].value), e.value);
    tx->Put64(pool_->offset_of(&table_[idx].key), e.key);
  }
  bm_.AddTo(tx);
  seq_.fetch_add(1, std::memory_order_acq_rel);  // readers retry while it is applied
  Status st = pool_->redo().Commit(*tx);
  seq_.fetch_add(1, std::memory_order_release);
  overlay_.clear();
  if (st.ok()) bm_.Committed();
  else bm_.Undo();
  return st;
}

int CuckooMapper::Lookup(Cursor* c, Ino ino, FileBlock fblk, Mapping* out) {
  if (int rc = CheckArgs(ino, fblk, 1)) return rc;
  Refresh(c, ino);
  for (const Cursor::Translation& t : c->cache) {
    if (t.len && fblk.v >= t.fblk && fblk.v - t.fblk < t.len) {
      *out = {true, Block(t.blk + (fblk.v - t.fblk)), t.len - (fblk.v - t.fblk)};
      return 0;
    }
  }
  uint64_t v = 0;
  if (FindLive(MakeKey(ino, fblk.v), &v) < 0) {
    *out = {false, Block(), 1};
    return 0;
  }
  uint64_t blk = ValueBlock(v), run = ValueRun(v);
  if (run == 0 || blk >= nblocks_ || run > nblocks_ - blk) return -EUCLEAN;
  // The run entry goes into the translation cache (paper: range entries are
  // cached too), so the next blocks of a sequential read hit it.
  c->cache[fblk.v % Cursor::kCacheEntries] = {fblk.v, blk, run};
  *out = {true, Block(blk), run};
  return 0;
}

Status CuckooMapper::Insert(Cursor* c, Ino ino, FileBlock fblk, uint64_t count) {
  if (int rc = CheckArgs(ino, fblk, count)) return Status::Error(-rc, "cuckoo insert: inode or file block out of range");
  std::lock_guard<std::mutex> lock(mu_);
  Refresh(c, ino);
  for (uint64_t i = 0; i < count; i++)
    if (FindPlanned(MakeKey(ino, fblk.v + i)) >= 0)
      return Status::Error(EEXIST, "cuckoo insert: file block already mapped");
  // Steps: one allocated run each, small enough for one redo transaction.
  const uint64_t step_max = std::min<uint64_t>(kMaxRun, pool_->redo().capacity() / (24 * 2 * (max_path_ + 2)) / 2);
  uint64_t done = 0;
  while (done < count) {
    const uint64_t at = fblk.v + done;
    uint64_t hint = nblocks_, back = 0, prev_blk = 0, prev_back = 0;
    bool prev = false;
    if (at > 0) {
      int64_t p = FindPlanned(MakeKey(ino, at - 1));
      if (p >= 0) {
        uint64_t pv = Get(static_cast<uint64_t>(p)).value;
        prev = true;
        prev_blk = ValueBlock(pv);
        prev_back = ValueBack(pv);
        hint = prev_blk + 1;
      }
    }
    auto run = bm_.Alloc(std::min(count - done, std::max<uint64_t>(step_max, 1)), hint);
    Status st = run.status();
    if (st.ok()) {
      auto [start, got] = *run;
      if (prev && prev_blk + 1 == start) back = std::min(prev_back + 1, kMaxRun);
      for (uint64_t i = 0; i < got && st.ok(); i++) {
        Entry e{MakeKey(ino, at + i), CuckooValue(start + i, got - i, std::min(back + i, kMaxRun))};
        if (!Place(e)) st = Status::Error(ENOSPC, "cuckoo insert: no displacement path (table too full)");
      }
      if (st.ok()) {
        medium::Tx tx;
        st = CommitStep(&tx);
        if (st.ok()) done += got;
      } else {
        overlay_.clear();
        bm_.Undo();
      }
    }
    if (!st.ok()) {
      // Nothing of this call may stay mapped.
      if (done) (void)RemoveLocked(ino, fblk, done);
      BumpGeneration();
      return st;
    }
  }
  return Status::Ok();
}

Status CuckooMapper::Remove(Cursor* c, Ino ino, FileBlock from, uint64_t count) {
  if (int rc = CheckArgs(ino, from, count == kToEnd ? 0 : count))
    return Status::Error(-rc, "cuckoo remove: inode or file block out of range");
  std::lock_guard<std::mutex> lock(mu_);
  BumpGeneration();
  Refresh(c, ino);
  return RemoveLocked(ino, from, count);
}

Status CuckooMapper::RemoveLocked(Ino ino, FileBlock from, uint64_t count) {
  // 1. Narrow the runs of earlier entries that reach into the range.
  uint64_t fv = 0;
  int64_t fi = FindLive(MakeKey(ino, from.v), &fv);
  if (fi >= 0 && from.v > 0) {
    const uint64_t fblk_blk = ValueBlock(fv);
    const uint64_t steps = std::min<uint64_t>({ValueBack(fv), kMaxRun, from.v});
    for (uint64_t d = 1; d <= steps; d++) {
      uint64_t v = 0;
      int64_t idx = FindLive(MakeKey(ino, from.v - d), &v);
      if (idx < 0 || ValueBlock(v) + d != fblk_blk) break;
      if (ValueRun(v) > d) Put(static_cast<uint64_t>(idx), {MakeKey(ino, from.v - d), CuckooValue(ValueBlock(v), d, ValueBack(v))});
    }
    if (!overlay_.empty()) {
      medium::Tx tx;
      MAPFS_RETURN_IF_ERROR(CommitStep(&tx));
    }
  }
  // 2. Unmap and free, a bounded number of entries per transaction.
  std::vector<uint64_t> victims;
  if (count == kToEnd || count >= uint64_t{nb_} * kCuckooSlots / 4) {
    const uint64_t end = count == kToEnd ? format::kMaxFileBlock : from.v + count;
    for (uint64_t idx = 0; idx < uint64_t{nb_} * kCuckooSlots; idx++) {
      uint64_t k = Load64(&table_[idx].key);
      if (k == kEmptyKey || format::KeyIno(k) != ino) continue;
      uint64_t fb = format::KeyFileBlock(k);
      if (fb >= from.v && fb < end) victims.push_back(idx);
    }
  } else {
    for (uint64_t i = 0; i < count; i++) {
      uint64_t v = 0;
      int64_t idx = FindLive(MakeKey(ino, from.v + i), &v);
      if (idx >= 0) victims.push_back(static_cast<uint64_t>(idx));
    }
  }
  const size_t per_tx = std::max<size_t>(1, pool_->redo().capacity() / 80);  // 2 words + a bitmap word each
  for (size_t i = 0; i < victims.size();) {
    size_t end = std::min(victims.size(), i + per_tx);
    for (; i < end; i++) {
      uint64_t blk = ValueBlock(Load64(&table_[victims[i]].value));
      if (blk < nblocks_) bm_.Free(blk, 1);
      Put(victims[i], {kEmptyKey, 0});
    }
    medium::Tx tx;
    MAPFS_RETURN_IF_ERROR(CommitStep(&tx));
  }
  return Status::Ok();
}

Status CuckooMapper::Check() {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t nent = uint64_t{nb_} * kCuckooSlots;
  std::unordered_map<uint64_t, uint64_t> live;  // key -> value
  std::vector<uint8_t> ref(nblocks_, 0);
  auto where = [&](uint64_t idx) { return table_off_ + idx * sizeof(Entry); };
  for (uint64_t idx = 0; idx < nent; idx++) {
    uint64_t k = Load64(&table_[idx].key), v = Load64(&table_[idx].value);
    if (k == kEmptyKey) continue;
    uint64_t ino = format::KeyIno(k);
    if (ino == 0 || ino >= max_ino_)
      return Damage("cuckoo entry", where(idx), "inode " + std::to_string(ino) + " out of range");
    auto [b1, b2] = Buckets(k);
    uint64_t b = idx / kCuckooSlots;
    if (b != b1 && b != b2) return Damage("cuckoo entry", where(idx), "key is in neither of its buckets");
    uint64_t blk = ValueBlock(v), run = ValueRun(v);
    if (run == 0 || blk >= nblocks_ || run > nblocks_ - blk)
      return Damage("cuckoo entry", where(idx), "block " + std::to_string(blk) + " run " + std::to_string(run) +
                                                    " outside the block area");
    if (!live.emplace(k, v).second) return Damage("cuckoo entry", where(idx), "file block mapped twice");
    if (ref[blk]++) return Damage("cuckoo entry", where(idx), "block " + std::to_string(blk) + " mapped twice");
    if (!bm_.UsedOnMedia(blk))
      return Damage("cuckoo entry", where(idx), "block " + std::to_string(blk) + " mapped but free in the bitmap");
  }
  // A run is valid if the next file block continues it with a run one shorter.
  for (const auto& [k, v] : live) {
    if (ValueRun(v) <= 1) continue;
    auto it = live.find(k + 1);
    if (format::KeyFileBlock(k) + 1 >= format::kMaxFileBlock || it == live.end() ||
        ValueBlock(it->second) != ValueBlock(v) + 1 || ValueRun(it->second) + 1 < ValueRun(v)) {
      int64_t idx = FindPlanned(k);
      return Damage("cuckoo entry", where(idx < 0 ? 0 : static_cast<uint64_t>(idx)),
                    "run of inode " + std::to_string(format::KeyIno(k)) + " file block " +
                        std::to_string(format::KeyFileBlock(k)) + " claims blocks not mapped after it");
    }
  }
  // 4. Every block in use is mapped.
  for (uint64_t blk = 0; blk < nblocks_; blk++)
    if (bm_.UsedOnMedia(blk) && !ref[blk])
      return Damage("cuckoo bitmap", bitmap_off_ + blk / 64 * 8, "block " + std::to_string(blk) + " in use but not mapped");
  return Status::Ok();
}

// One entry per mapped file block (a run entry names its own block first).
Status CuckooMapper::ForEachMapping(const MappingFn& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t nent = uint64_t{nb_} * kCuckooSlots;
  for (uint64_t idx = 0; idx < nent; idx++) {
    uint64_t k = Load64(&table_[idx].key), v = Load64(&table_[idx].value);
    if (k == kEmptyKey) continue;
    uint64_t blk = ValueBlock(v);
    if (blk >= nblocks_)
      return Damage("cuckoo entry", table_off_ + idx * sizeof(Entry), "block " + std::to_string(blk) + " outside the block area");
    fn(format::KeyIno(k), FileBlock(format::KeyFileBlock(k)), Block(blk), 1);
  }
  return Status::Ok();
}

Status CuckooMapper::ForEachMappingIn(Cursor* c, Ino ino, FileBlock from, uint64_t count, const RunFn& fn) {
  const uint64_t nent = uint64_t{nb_} * kCuckooSlots;
  if (count < nent / 4) return Mapper::ForEachMappingIn(c, ino, from, count, fn);
  if (ino == 0 || ino >= max_ino_ || from.v >= format::kMaxFileBlock) return Status::Ok();
  const uint64_t end = count >= format::kMaxFileBlock - from.v ? format::kMaxFileBlock : from.v + count;
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t idx = 0; idx < nent; idx++) {
    uint64_t k = Load64(&table_[idx].key);
    if (k == kEmptyKey || format::KeyIno(k) != ino) continue;
    uint64_t fb = format::KeyFileBlock(k), blk = ValueBlock(Load64(&table_[idx].value));
    if (fb < from.v || fb >= end) continue;
    if (blk >= nblocks_)
      return Damage("cuckoo entry", table_off_ + idx * sizeof(Entry), "block " + std::to_string(blk) + " outside the block area");
    MAPFS_RETURN_IF_ERROR(fn(FileBlock(fb), Block(blk), 1));
  }
  return Status::Ok();
}

Usage CuckooMapper::usage() const {
  Usage u;
  u.blocks = nblocks_;
  u.used_blocks = bm_.used();
  u.fixed_bytes = fixed_bytes_;
  return u;
}

Result<std::unique_ptr<Mapper>> OpenCuckoo(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h) {
  auto m = std::make_unique<CuckooMapper>(pool, area_off, h);
  m->Load();
  return std::unique_ptr<Mapper>(std::move(m));
}

}  // namespace mapfs::map
