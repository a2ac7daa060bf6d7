// Global cuckoo table (paper §3.2.1): one table for every file, created at
// format, mapping (inode, file block) -> (block, run length, back index).
//
// Buckets are 64-byte cache lines of 4 entries; a key lives in one of the
// buckets of two hash functions (SlotOf with kSeedPrimary/kSeedSecondary),
// so a lookup reads at most two cache lines. An insert whose two buckets
// are full displaces entries to their other bucket along the shortest path
// a bounded breadth-first search finds (at most cuckoo_max_path moves,
// default kDefaultMaxPath); if there is none (a displacement cycle, or a
// table too full) it fails with ENOSPC and changes nothing.
//
// Runs (map_format.h): each entry of a run of contiguous blocks records how
// many blocks of the run start at it (a lower bound, so appends need not
// rewrite earlier entries) and how many may precede it (an upper bound on
// the walk that narrows earlier entries when blocks are removed). Invariant:
// if the entry of file block f says (b, run r), file blocks f .. f+r-1 are
// mapped to b .. b+r-1. Removal narrows first, then unmaps, so a crash
// between the two keeps the invariant.
//
// Consistency: every change (entries written, entries moved by a
// displacement, bitmap words) is one redo-log transaction per step, as the
// paper logs its complex inserts; a step is at most one allocated run of
// blocks. Mutations serialise on a mutex; lookups take no lock but a
// sequence counter (odd while a step is applied) makes them retry instead
// of reading a half-moved entry. Blocks come from a BlockBitmap.
#pragma once

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "map/block_bitmap.h"
#include "map/mapper.h"

namespace mapfs::medium {
class Tx;
}

namespace mapfs::map {

class CuckooMapper final : public Mapper {
 public:
  static constexpr uint32_t kDefaultMaxPath = 8;

  CuckooMapper(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h);

  int Lookup(Cursor* c, Ino ino, FileBlock fblk, Mapping* out) override;
  Status Insert(Cursor* c, Ino ino, FileBlock fblk, uint64_t count) override;
  Status Remove(Cursor* c, Ino ino, FileBlock from, uint64_t count) override;
  Status Check() override;
  Status ForEachMapping(const MappingFn& fn) override;
  // A range of at least a quarter of the entries: one sweep of the table.
  Status ForEachMappingIn(Cursor* c, Ino ino, FileBlock from, uint64_t count, const RunFn& fn) override;
  Usage usage() const override;

  void Load() { bm_.Load(); }
  // The two buckets of a key (distinct when there are two or more buckets).
  std::pair<uint32_t, uint32_t> Buckets(uint64_t key) const;
  uint32_t nbuckets() const { return nb_; }

 private:
  using Entry = format::CuckooEntry;
  // An entry of the table, as the step being planned sees it.
  Entry Get(uint64_t idx) const;
  void Put(uint64_t idx, const Entry& e) { overlay_[idx] = e; }
  // Index of the entry holding `key` (planning view), or -1.
  int64_t FindPlanned(uint64_t key) const;
  // Index of the entry holding `key` (lock-free readers), or -1; *value
  // receives its value word.
  int64_t FindLive(uint64_t key, uint64_t* value) const;
  // Places `e` in the planning view, displacing entries if needed.
  bool Place(const Entry& e);
  // Commits the planned entries and the bitmap words as one transaction.
  Status CommitStep(medium::Tx* tx);
  Status RemoveLocked(Ino ino, FileBlock from, uint64_t count);

  Entry* table_;
  uint32_t nb_;
  uint32_t max_path_;
  uint64_t table_off_;
  uint64_t bitmap_off_;
  uint64_t fixed_bytes_;
  BlockBitmap bm_;
  std::mutex mu_;                          // serialises mutations
  std::atomic<uint64_t> seq_{0};           // odd while a step is applied
  std::unordered_map<uint64_t, Entry> overlay_;  // the step being planned
};

}  // namespace mapfs::map
