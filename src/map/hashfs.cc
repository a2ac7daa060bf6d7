// HashFS: the global linear-probing table that is also the allocator (hashfs.h).
#include "map/hashfs.h"

#include <algorithm>
#include <string>
#include <unordered_set>

#include "map/designs.h"
#include "map/hash.h"
#include "map/map_persist.h"
#include "medium/persist.h"

namespace mapfs::map {
namespace {

using format::kEmptyKey;
using format::kTombKey;
using format::MakeKey;

thread_local uint64_t t_probes = 0;         // slots probed by the last Find
thread_local uint64_t t_lookup_probes = 0;  // ... for the block asked of the last Lookup
thread_local uint64_t t_visited = 0;        // slots read by Find and sweeps, ever

}  // namespace

HashFsMapper::HashFsMapper(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h)
    : Mapper(pool, area_off, h),
      slots_(reinterpret_cast<uint64_t*>(base_ + h.table_off)),
      n_(static_cast<uint32_t>(h.nblocks)),
      table_off_(h.table_off),
      fixed_bytes_(format::kBlockSize + h.table_bytes) {}

uint64_t HashFsMapper::last_probes() { return t_lookup_probes; }
uint64_t HashFsMapper::slots_visited() { return t_visited; }

void HashFsMapper::Scan() {
  uint64_t live = 0;
  for (uint32_t s = 0; s < n_; s++) {
    uint64_t v = Load64(&slots_[s]);
    live += v != kEmptyKey && v != kTombKey;
  }
  used_.store(live, std::memory_order_relaxed);
}

int64_t HashFsMapper::Find(uint64_t key, uint32_t home) const {
  uint32_t s = home;
  for (uint32_t i = 0; i < n_; i++) {
    uint64_t v = Load64(&slots_[s]);
    if (v == key) {
      t_probes = i + 1;
      t_visited += i + 1;
      return s;
    }
    if (v == kEmptyKey) {
      t_probes = i + 1;
      t_visited += i + 1;
      return -1;
    }
    if (++s == n_) s = 0;
  }
  t_probes = n_;
  t_visited += n_;
  return -1;  // no empty slot anywhere: the whole ring was probed
}

int64_t HashFsMapper::Claim(uint64_t key, uint32_t home) {
  for (;;) {
    // The first free slot (empty or tombstone) of the chain; probing on to
    // the chain's end proves the key absent.
    int64_t free_slot = -1;
    uint64_t free_was = 0;
    uint32_t s = home;
    for (uint32_t i = 0; i < n_; i++) {
      uint64_t v = Load64(&slots_[s]);
      if (v == key) return -EEXIST;
      if (v == kEmptyKey || v == kTombKey) {
        if (free_slot < 0) {
          free_slot = s;
          free_was = v;
        }
        if (v == kEmptyKey) break;
      }
      if (++s == n_) s = 0;
    }
    if (free_slot < 0) return -ENOSPC;
    uint64_t expected = free_was;
    if (Cas64(&slots_[free_slot], expected, key)) {
      medium::Flush(&slots_[free_slot], 8);
      return free_slot;
    }
    // Another inode's insert took the slot first: probe again.
  }
}

void HashFsMapper::Untake(const std::vector<uint32_t>& taken) {
  for (uint32_t s : taken) {
    uint64_t cur = Load64(&slots_[s]);
    // The caller's lock on the inode keeps its own slots stable.
    if (Cas64(&slots_[s], cur, kTombKey)) medium::Flush(&slots_[s], 8);
  }
  medium::Fence();
  used_.fetch_sub(taken.size(), std::memory_order_relaxed);
}

void HashFsMapper::CacheTranslation(Cursor* c, uint64_t fblk, uint64_t blk) {
  c->cache[fblk % Cursor::kCacheEntries] = {fblk, blk, 1};
}

int HashFsMapper::Lookup(Cursor* c, Ino ino, FileBlock fblk, Mapping* out) {
  if (int rc = CheckArgs(ino, fblk, 1)) return rc;
  Refresh(c, ino);
  const Cursor::Translation& t = c->cache[fblk.v % Cursor::kCacheEntries];
  if (t.len && fblk.v >= t.fblk && fblk.v - t.fblk < t.len) {
    c->last = fblk.v;
    *out = {true, Block(t.blk + (fblk.v - t.fblk)), t.len - (fblk.v - t.fblk)};
    return 0;
  }
  // Miss. Sequential access (the block after the last one looked up): look
  // up this block and the next ones in one batch, hashed together, their
  // home slots prefetched so the probes overlap, and cache them. Random
  // access: this block only (a batch would probe 7 slots for nothing).
  constexpr uint32_t kAhead = Cursor::kCacheEntries;
  const bool sequential = fblk.v == c->last + 1;
  c->last = fblk.v;
  uint32_t count = sequential ? static_cast<uint32_t>(std::min<uint64_t>(kAhead, format::kMaxFileBlock - fblk.v)) : 1;
  uint32_t homes[kAhead];
  const uint64_t key = MakeKey(ino, fblk.v);
  HashConsecutive(key, count, kSeedPrimary, n_, homes);
  for (uint32_t i = 0; i < count; i++) __builtin_prefetch(&slots_[homes[i]]);
  int64_t found[kAhead] = {-1, -1, -1, -1, -1, -1, -1, -1};
  for (uint32_t i = 0; i < count; i++) {
    found[i] = Find(key + i, homes[i]);
    if (i == 0) t_lookup_probes = t_probes;
    if (found[i] >= 0) CacheTranslation(c, fblk.v + i, static_cast<uint64_t>(found[i]));
  }
  uint64_t len = 1;
  if (found[0] >= 0) {
    while (len < count && found[len] == found[0] + static_cast<int64_t>(len)) len++;
    *out = {true, Block(static_cast<uint64_t>(found[0])), len};
  } else {
    while (len < count && found[len] < 0) len++;
    *out = {false, Block(), len};
  }
  return 0;
}

int HashFsMapper::LookupRange(Cursor* c, Ino ino, FileBlock fblk, uint64_t n, uint64_t* out) {
  if (int rc = CheckArgs(ino, fblk, n)) return rc;
  Refresh(c, ino);
  uint32_t homes[kBatch];
  for (uint64_t i = 0; i < n; i += kBatch) {
    uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(kBatch, n - i));
    const uint64_t key = MakeKey(ino, fblk.v + i);
    HashConsecutive(key, count, kSeedPrimary, n_, homes);
    for (uint32_t k = 0; k < count; k++) __builtin_prefetch(&slots_[homes[k]]);
    for (uint32_t k = 0; k < count; k++) {
      int64_t s = Find(key + k, homes[k]);
      out[i + k] = s >= 0 ? static_cast<uint64_t>(s) : kNoBlock;
      if (s >= 0) CacheTranslation(c, fblk.v + i + k, static_cast<uint64_t>(s));
    }
  }
  return 0;
}

Status HashFsMapper::Insert(Cursor* c, Ino ino, FileBlock fblk, uint64_t count) {
  if (int rc = CheckArgs(ino, fblk, count)) return Status::Error(-rc, "hashfs insert: inode or file block out of range");
  Refresh(c, ino);
  std::vector<uint32_t> taken;
  taken.reserve(std::min<uint64_t>(count, 1024));
  uint32_t homes[kBatch];
  for (uint64_t i = 0; i < count; i += kBatch) {
    uint32_t batch = static_cast<uint32_t>(std::min<uint64_t>(kBatch, count - i));
    const uint64_t key = MakeKey(ino, fblk.v + i);
    HashConsecutive(key, batch, kSeedPrimary, n_, homes);
    for (uint32_t k = 0; k < batch; k++) {
      int64_t s = Claim(key + k, homes[k]);
      if (s < 0) {
        // Nothing of this call may stay mapped.
        medium::Fence();
        used_.fetch_add(taken.size(), std::memory_order_relaxed);
        Untake(taken);
        c->Reset(ino, generation());
        return Status::Error(static_cast<int>(-s), s == -ENOSPC ? "hashfs insert: table full"
                                                                 : "hashfs insert: file block already mapped");
      }
      taken.push_back(static_cast<uint32_t>(s));
      CacheTranslation(c, fblk.v + i + k, static_cast<uint64_t>(s));
    }
  }
  medium::Fence();  // every claimed slot flushed in Claim
  used_.fetch_add(taken.size(), std::memory_order_relaxed);
  return Status::Ok();
}

Status HashFsMapper::Remove(Cursor* c, Ino ino, FileBlock from, uint64_t count) {
  if (int rc = CheckArgs(ino, from, count == kToEnd ? 0 : count))
    return Status::Error(-rc, "hashfs remove: inode or file block out of range");
  BumpGeneration();  // cached translations of the removed blocks go stale
  Refresh(c, ino);
  uint64_t removed = 0;
  auto drop = [&](uint32_t s, uint64_t key) {
    uint64_t expected = key;
    if (Cas64(&slots_[s], expected, kTombKey)) {
      medium::Flush(&slots_[s], 8);
      removed++;
    }
  };
  if (count == kToEnd || count >= n_ / 4) {
    // Cheaper (and bounded) to sweep the table than to probe for each block.
    const uint64_t end = count == kToEnd ? format::kMaxFileBlock : from.v + count;
    for (uint32_t s = 0; s < n_; s++) {
      uint64_t v = Load64(&slots_[s]);
      if (v == kEmptyKey || v == kTombKey || format::KeyIno(v) != ino) continue;
      uint64_t fb = format::KeyFileBlock(v);
      if (fb >= from.v && fb < end) drop(s, v);
    }
  } else {
    uint32_t homes[kBatch];
    for (uint64_t i = 0; i < count; i += kBatch) {
      uint32_t batch = static_cast<uint32_t>(std::min<uint64_t>(kBatch, count - i));
      const uint64_t key = MakeKey(ino, from.v + i);
      HashConsecutive(key, batch, kSeedPrimary, n_, homes);
      for (uint32_t k = 0; k < batch; k++) {
        int64_t s = Find(key + k, homes[k]);
        if (s >= 0) drop(static_cast<uint32_t>(s), key + k);
      }
    }
  }
  medium::Fence();
  used_.fetch_sub(removed, std::memory_order_relaxed);
  return Status::Ok();
}

Status HashFsMapper::Check() {
  // 1. Every slot holds empty, tombstone or a key of a valid inode.
  uint32_t first_empty = n_;
  for (uint32_t s = 0; s < n_; s++) {
    uint64_t v = Load64(&slots_[s]);
    if (v == kEmptyKey) {
      if (first_empty == n_) first_empty = s;
      continue;
    }
    if (v == kTombKey) continue;
    uint64_t ino = format::KeyIno(v);
    if (ino == 0 || ino >= max_ino_)
      return Damage("hashfs slot", table_off_ + 8ull * s, "inode " + std::to_string(ino) + " out of range");
  }
  // 2. Every key is reachable from its home slot: walking the ring from an
  // empty slot, a key's home lies inside the run of non-empty slots that
  // holds it. 3. No key is live twice.
  std::unordered_set<uint64_t> seen;
  seen.reserve(used_.load(std::memory_order_relaxed) + 16);
  uint32_t run_start = first_empty == n_ ? 0 : first_empty;  // ring position of the current run
  for (uint32_t i = 0; i < n_; i++) {
    uint32_t s = first_empty == n_ ? i : (first_empty + i) % n_;
    uint64_t v = Load64(&slots_[s]);
    if (v == kEmptyKey) {
      run_start = (s + 1) % n_;
      continue;
    }
    if (v == kTombKey) continue;
    if (first_empty != n_) {
      uint32_t home = SlotOf(v, kSeedPrimary, n_);
      uint64_t dist = (uint64_t{s} + n_ - home) % n_;
      uint64_t span = (uint64_t{s} + n_ - run_start) % n_;
      if (dist > span)
        return Damage("hashfs slot", table_off_ + 8ull * s,
                      "key of inode " + std::to_string(format::KeyIno(v)) + " file block " +
                          std::to_string(format::KeyFileBlock(v)) + " is unreachable from its home slot");
    }
    if (!seen.insert(v).second)
      return Damage("hashfs slot", table_off_ + 8ull * s,
                    "inode " + std::to_string(format::KeyIno(v)) + " file block " +
                        std::to_string(format::KeyFileBlock(v)) + " is mapped twice");
  }
  return Status::Ok();
}

// The slot index is the block: one pass over the table.
Status HashFsMapper::ForEachMapping(const MappingFn& fn) {
  for (uint32_t s = 0; s < n_; s++) {
    uint64_t v = Load64(&slots_[s]);
    if (v == kEmptyKey || v == kTombKey) continue;
    fn(format::KeyIno(v), FileBlock(format::KeyFileBlock(v)), Block(s), 1);
  }
  return Status::Ok();
}

Status HashFsMapper::ForEachMappingIn(Cursor* c, Ino ino, FileBlock from, uint64_t count, const RunFn& fn) {
  if (count < n_ / 4) return Mapper::ForEachMappingIn(c, ino, from, count, fn);
  if (ino == 0 || ino >= max_ino_ || from.v >= format::kMaxFileBlock) return Status::Ok();
  const uint64_t end = count >= format::kMaxFileBlock - from.v ? format::kMaxFileBlock : from.v + count;
  // Consecutive slots holding consecutive file blocks form one run.
  uint64_t run_f = 0, run_b = 0, run_n = 0;
  for (uint32_t s = 0; s < n_; s++) {
    uint64_t v = Load64(&slots_[s]);
    if (v == kEmptyKey || v == kTombKey || format::KeyIno(v) != ino) continue;
    uint64_t fb = format::KeyFileBlock(v);
    if (fb < from.v || fb >= end) continue;
    if (run_n && run_f + run_n == fb && run_b + run_n == s) {
      run_n++;
      continue;
    }
    if (run_n) MAPFS_RETURN_IF_ERROR(fn(FileBlock(run_f), Block(run_b), run_n));
    run_f = fb;
    run_b = s;
    run_n = 1;
  }
  t_visited += n_;
  if (run_n) MAPFS_RETURN_IF_ERROR(fn(FileBlock(run_f), Block(run_b), run_n));
  return Status::Ok();
}

Usage HashFsMapper::usage() const {
  Usage u;
  u.blocks = n_;
  u.used_blocks = used_.load(std::memory_order_relaxed);
  u.fixed_bytes = fixed_bytes_;
  return u;
}

Result<std::unique_ptr<Mapper>> OpenHashFs(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h) {
  auto m = std::make_unique<HashFsMapper>(pool, area_off, h);
  m->Scan();
  return std::unique_ptr<Mapper>(std::move(m));
}

}  // namespace mapfs::map
