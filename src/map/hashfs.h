// HashFS (paper §3.2.2): one global linear-probing hash table, created at
// format, whose slot index *is* the block: the key (inode, file block) found
// in slot s means that file block lives in block s. Inserting a mapping
// therefore allocates its block, in one 8-byte compare-and-swap.
//
// Slot words (map_format.h): 0 empty, ~0 tombstone, else ino << 40 | file
// block. Invariants:
//  * a live key sits at its home slot (SlotOf(key, kSeedPrimary, n)) or
//    after it with no empty slot in between (linear probing);
//  * no key is live in two slots.
// Entries never move (moving one would move its data), so removal leaves a
// tombstone that later inserts reuse; tombstones are never turned back into
// empty slots (with only per-file locks, doing so could cut off a chain a
// concurrent insert of another file just extended). Probe chains therefore
// grow with churn; a rebuild that clears them offline is not built yet.
//
// Concurrency: inserts and removals of different inodes race only on slots,
// and every slot changes by compare-and-swap; lookups read slots with
// single atomic loads. Nothing locks.
//
// The per-file DRAM translation cache (Cursor::cache, 8 entries indexed by
// file block mod 8 so that 8 consecutive blocks never evict each other) is
// filled by batched lookups: a miss during sequential access (the block
// after the last one looked up) hashes the next 8 file blocks at once
// (AVX2/AVX-512, hash.h), prefetches their home slots, and caches what it
// finds; a random miss looks up its own block only. LookupRange and Insert
// always hash in batches of 16.
#pragma once

#include <atomic>
#include <vector>

#include "map/mapper.h"

namespace mapfs::map {

class HashFsMapper final : public Mapper {
 public:
  HashFsMapper(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h);

  int Lookup(Cursor* c, Ino ino, FileBlock fblk, Mapping* out) override;
  int LookupRange(Cursor* c, Ino ino, FileBlock fblk, uint64_t n, uint64_t* out) override;
  Status Insert(Cursor* c, Ino ino, FileBlock fblk, uint64_t count) override;
  Status Remove(Cursor* c, Ino ino, FileBlock from, uint64_t count) override;
  Status Check() override;
  Status ForEachMapping(const MappingFn& fn) override;
  // A range of at least a quarter of the table: one sweep of the table
  // (the slot index is the block), instead of a probe per file block.
  Status ForEachMappingIn(Cursor* c, Ino ino, FileBlock from, uint64_t count, const RunFn& fn) override;
  Usage usage() const override;

  // Counts the live entries (at open).
  void Scan();
  // Slots probed for the asked block by this thread's last Lookup that
  // missed the translation cache (tests of probe chains).
  static uint64_t last_probes();
  // Slots this thread has read in lookups and sweeps since it started
  // (tests: a walk's cost, counted instead of timed).
  static uint64_t slots_visited();

 private:
  static constexpr uint32_t kBatch = 16;
  // Slot holding `key`, probing from `home`; -1 if absent.
  int64_t Find(uint64_t key, uint32_t home) const;
  // Claims a free slot for `key` (absent) from `home`: the slot, -ENOSPC
  // if the table is full, -EEXIST if the key is already there.
  int64_t Claim(uint64_t key, uint32_t home);
  void Untake(const std::vector<uint32_t>& slots);
  void CacheTranslation(Cursor* c, uint64_t fblk, uint64_t blk);

  uint64_t* slots_;
  uint32_t n_;
  uint64_t table_off_;
  uint64_t fixed_bytes_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace mapfs::map
