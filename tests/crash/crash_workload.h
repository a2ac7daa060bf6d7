// Workloads for the crash-state checker: a set-up, then a short sequence
// of file system calls, each one traced and then crashed at every fence.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "crash_checker.h"
#include "fs/file_system.h"

namespace mapfs::crash {

using FsCall = std::function<Status(fs::FileSystem&)>;

struct Step {
  std::string name;
  FsCall run;  // its error (ENOENT, ENOSPC, ...) is part of the workload, not a failure
  // Posix mode only: false for a write through a descriptor left open (its
  // data is durable at the next fsync or close, not on return).
  bool durable = true;
};

struct Workload {
  std::string name;
  FsCall setup;  // runs untraced on a fresh pool; may be null
  std::vector<Step> steps;
  uint64_t pool_size = 16ull << 20;
};

struct Outcome {
  CheckCounts counts;
  std::vector<std::string> violations;  // includes trace problems (untraced stores)
  std::vector<std::string> step_errors;  // what each step returned ("0" or the error)
};

// Formats a pool in `mode` (MAPFS_MODE_*), runs the workload traced, checks
// every crash image. Fails the current test (gtest) on harness errors.
Outcome RunWorkload(const Workload& w, int mode, const Budget& budget);

// ---- the operation catalogue (tests/crash/crash_workload.cc)

// The starting tree every catalogue operation expects:
//   /a   file, 5000 bytes        /b, /d/h  one file, 2 links, 100 bytes
//   /d   directory               /d/x      file, 10 bytes
//   /e   empty directory         /l        symlink -> a
//   /big file, 200 KiB (a larger partition)
Status StandardTree(fs::FileSystem& fs);
// Every namespace and data operation, named.
const std::vector<Step>& Catalogue();
const Step& CatalogueStep(const std::string& name);

// Helpers for writing steps.
Status WriteAt(fs::FileSystem& fs, const std::string& path, uint64_t off, size_t n, uint64_t tag, int extra_flags = 0);
Status CreateFile(fs::FileSystem& fs, const std::string& path);

}  // namespace mapfs::crash
