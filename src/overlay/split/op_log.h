// The split engine's operation log: one small file per process,
// `.mapfs-overlay/log-TAG` under the overlay's root, of 64-byte entries.
//
// Each file that stages bytes owns a pair of slots (the pair's index is also
// the number of its staging file `s-TAG-I` and of the hard link `t-TAG-I`
// to the target, which lets recovery open the target after a rename). The
// newest valid entry of a pair says what recovery must do:
//   kCommit: the staged bytes [stage_off, stage_off+len) of s-TAG-I belong
//            at [off, off+len) of the target, whose size is then at least
//            new_size. Recovery copies them (idempotent) and syncs.
//   kDone:   nothing pending.
// Entries alternate between the two slots of a pair, so a torn write (its
// checksum fails) leaves the previous entry of the pair in force.
//
// The owner holds an exclusive flock on its log for its lifetime: recovery
// (OpenOverlay) takes only logs whose owner is gone, so overlays used by
// several processes at once never recover each other's live work.
//
// Stores go through medium/persist.h (non-temporal stores + fence); the log
// is a page of a kernel file, so each entry is also msync'ed: a commit must
// survive a power cut, and a done must reach the medium before the staging
// file it releases is reused.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace mapfs::overlay::split {

// How staged bytes reach their target (relink.h).
enum class RelinkMethod : uint16_t { kCopy = 0, kMoveExtents = 1, kClone = 2 };
const char* ToString(RelinkMethod m);

enum class EntryKind : uint16_t { kCommit = 1, kDone = 2 };

struct LogEntry {
  uint32_t magic;
  uint16_t kind;    // EntryKind
  uint16_t method;  // RelinkMethod used (recovery of a move copies only data ranges)
  uint64_t seq;     // increases per log; the newer valid slot of a pair wins
  uint64_t pair;    // the pair's index (names the staging file and the link)
  uint64_t off;     // target offset of the first staged byte
  uint64_t len;
  uint64_t new_size;   // the target's size after the relink (at least)
  uint64_t stage_off;  // staging-file offset of the byte at `off`
  uint32_t reserved;
  uint32_t crc;  // crc32c of the 60 bytes before it
};
static_assert(sizeof(LogEntry) == 64, "one cache line per entry");

constexpr uint32_t kLogMagic = 0x4c4f5053;  // "SPOL"
constexpr uint32_t kLogPairs = 512;
constexpr size_t kLogBytes = size_t{kLogPairs} * 2 * sizeof(LogEntry);

class OpLog {
 public:
  OpLog() = default;
  ~OpLog();
  OpLog(const OpLog&) = delete;
  OpLog& operator=(const OpLog&) = delete;

  // Creates this process's log in `dir_fd` (the hidden directory) and locks it.
  Status Create(int dir_fd);
  const std::string& tag() const { return tag_; }
  // A free pair, or -1 when all are taken (the caller then writes through the kernel).
  int AllocPair();
  void FreePair(int pair);
  // Writes `e` (seq and crc filled here) to the older slot of its pair, durably.
  Status Append(LogEntry e);

  // Reads a log file's entries: per pair, the newest valid one (magic and
  // checksum right); pairs with none are left out.
  static std::vector<LogEntry> Pending(const void* log, size_t bytes);
  static bool Valid(const LogEntry& e);
  static uint32_t Checksum(const LogEntry& e);

 private:
  int fd_ = -1;
  LogEntry* map_ = nullptr;
  std::string tag_;
  std::mutex mu_;
  uint64_t seq_ = 0;
  std::vector<bool> used_;
};

}  // namespace mapfs::overlay::split
