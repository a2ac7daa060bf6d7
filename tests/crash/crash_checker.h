// CrashChecker: the image half of the crash-state checker.
//
// From a CrashRecorder's trace it builds crash images — at every crash
// point, the durable state plus subsets of the lines in flight: all subsets
// when there are few, otherwise none, all, and a seeded random sample — and
// judges each one like a user would after a power failure:
//
//   1. mount it (recovery of every layer runs), which must succeed;
//   2. fsck: page table, partitions and the file system layers are clean;
//   3. the tree and the file bytes are a state the running operation
//      allows (fs_state.h: before or after it, data per the mode's promise),
//      and so everything an earlier operation acknowledged is there;
//   4. the file system is fully usable: create, write, read back, rename,
//      delete, mkdir, rmdir all work.
//
// Identical images (same lines, same values) are judged once.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "crash_recorder.h"
#include "fs_state.h"

namespace mapfs::crash {

struct Budget {
  int all_subsets_upto = 4;  // in-flight lines up to this many: every subset
  int samples = 8;           // otherwise: none, all, and this many random subsets
  uint64_t seed = 1;
};

struct CheckCounts {
  uint64_t points = 0;     // crash points
  uint64_t images = 0;     // images generated
  uint64_t judged = 0;     // distinct images mounted and judged
  uint64_t violations = 0;
};

class CrashChecker {
 public:
  // states[i] is the state after operation i (states[0]: before the first);
  // durable[i]: the file data of states[i] is durable (always, but in posix
  // mode after writes through a descriptor that is still open).
  CrashChecker(const CrashRecorder& rec, const std::vector<FsState>& states, std::vector<bool> durable,
               DataPromise promise, Budget budget, fs::FsOptions mount_options = {});
  ~CrashChecker();

  // Judges every image; returns a description of each violation (the
  // first few in full).
  std::vector<std::string> Run(CheckCounts* counts);

 private:
  // "" when the image in image_ is fine.
  std::string JudgeImage(const CrashPoint& p);
  void Subsets(size_t m, uint64_t point, std::vector<std::vector<bool>>* out);
  uint64_t LineHash(uint64_t line, const char* bytes) const;

  const CrashRecorder& rec_;
  const std::vector<FsState>& states_;
  std::vector<bool> durable_;
  DataPromise promise_;
  Budget budget_;
  fs::FsOptions mount_options_;
  std::string image_;  // the durable state at the current point
  std::string path_;   // where images are written to be mounted
  char* file_ = nullptr;  // path_ mapped (shared)
  uint64_t key_ = 0;   // hash of image_ (XOR of its lines that differ from the base)
  std::unordered_set<uint64_t> seen_;
};

}  // namespace mapfs::crash
