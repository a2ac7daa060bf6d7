// Redo log: makes a group of stores to the pool atomic across a crash.
//
// A transaction (Tx) is built in DRAM as a list of (pool offset, bytes)
// records. Commit writes it into a free slot with its checksum (fence: the
// commit point), applies every record to the pool (fence), and clears the
// slot (fence): three fences, each ordering what the next step needs. Recovery
// re-applies every slot whose checksum is valid: records hold absolute new
// values, so applying twice is harmless (replay is idempotent), and a slot
// whose checksum does not match was never committed, so nothing of it was
// applied.
//
// Slots are owned per call (not per thread): any number of threads and
// processes commit concurrently as long as a slot is free. Callers hold
// whatever lock protects the state they change; the log itself only
// serialises on slot ownership.
//
// Slot layout (docs/FORMAT.md):
//   RedoSlotHeader (64 bytes) | records: {u64 off, u64 len, data padded to 8}
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace mapfs::medium {

class Pool;

// Commit: payload, the {bytes, crc} word and `seq`, all non-temporal, one
// fence. `seq` is fresh for every commit and covered by the checksum, so a
// crash that persisted only some of these words never validates (see
// RedoLog::Commit).
struct RedoSlotHeader {
  uint64_t seq;        // nonzero while the slot holds a committed record set; fresh per commit
  uint32_t bytes;      // payload bytes after the header
  uint32_t crc;        // crc32c over seq, bytes and the payload
  uint64_t reserved[6];
};
static_assert(sizeof(RedoSlotHeader) == 64);
static_assert(offsetof(RedoSlotHeader, bytes) == 8 && offsetof(RedoSlotHeader, crc) == 12);

class Tx {
 public:
  // Records an 8-byte store; applied with a single atomic store, so a reader
  // that does not hold the caller's lock still never sees a torn word.
  void Put64(uint64_t pool_off, uint64_t value);
  // Records a store of `len` bytes (copied now).
  void PutBytes(uint64_t pool_off, const void* data, size_t len);
  // Records a store of `len` bytes read from `data` only at Commit: the
  // caller keeps them valid and unchanged until Commit returns. Large data
  // (strict-mode file writes) then goes from the caller's buffer straight
  // to the log and to its place, with no copy in between.
  void PutBytesRef(uint64_t pool_off, const void* data, size_t len);
  // Records a copy of `len` bytes from pool offset `src` to `dst`, applied
  // (and replayed after a crash) from the pool itself: 24 bytes in the log
  // whatever `len`. The caller keeps [src, src + len) unchanged until the
  // commit has returned (a replay reads it again), and the two ranges must
  // not overlap. Consecutive copies whose ranges continue each other merge.
  void PutCopy(uint64_t dst, uint64_t src, size_t len);
  // Appends every record of `o` (applied after this one's). References stay
  // references: `o`'s data must live until this transaction commits.
  void Append(const Tx& o);
  bool empty() const { return recs_.empty(); }
  // Room for `records` records and `bytes` of copied data without
  // reallocating.
  void Reserve(size_t records, size_t bytes) {
    recs_.reserve(records);
    own_.reserve(bytes / 8);
  }
  // Bytes the records take in a log slot.
  size_t payload_bytes() const { return bytes_; }
  // Heap bytes held for records and copied data (their capacity).
  size_t heap_bytes() const { return recs_.capacity() * sizeof(Rec) + own_.capacity() * sizeof(uint64_t); }
  void Clear();

 private:
  friend class RedoLog;
  struct Rec {
    uint64_t off;
    uint64_t len;
    const void* ext;  // the data, when referenced; else own_[own]...
    size_t own;
    uint64_t src = kNoSrc;  // a copy within the pool (PutCopy)
  };
  static constexpr uint64_t kNoSrc = ~uint64_t{0};
  const void* data(const Rec& r) const { return r.ext ? r.ext : static_cast<const void*>(own_.data() + r.own); }
  std::vector<Rec> recs_;
  std::vector<uint64_t> own_;
  size_t bytes_ = 0;
};

class RedoLog {
 public:
  explicit RedoLog(Pool* pool) : pool_(pool) {}

  // Largest payload one transaction may carry.
  size_t capacity() const;
  // Commits and applies `tx` atomically. E2BIG if it does not fit a slot.
  Status Commit(const Tx& tx);
  // Replays every committed slot (exclusive open, nobody else running).
  // Returns the number of slots replayed.
  int RecoverAll();
  // Replays the slots of dead mounts (Pool::MountAlive: the process died or
  // exec'd), e.g. when a robust lock reported its owner dead. Safe while
  // other processes run. Takes the kRecovery lock; ...Locked needs it held.
  int RecoverDead();
  int RecoverDeadLocked();

 private:
  // Writes tx's records into `payload` in their on-media form; returns
  // their checksum chained from `crc`.
  static uint32_t WriteRecords(const Tx& tx, uint64_t* payload, uint32_t crc);
  // Applies tx's records in place (ends with a fence).
  void Apply(const Tx& tx);
  int AcquireSlot();
  void ReleaseSlot(int slot);
  bool ReplaySlot(int slot);  // true if a committed record was applied
  RedoSlotHeader* slot_header(int slot) const;

  Pool* pool_;
};

}  // namespace mapfs::medium
