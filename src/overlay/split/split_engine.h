// The split engine (SplitFS): files stay plain files of the kernel file
// system. Reads and overwrites go through cached MAP_SHARED maps of the file
// in aligned regions of 2 MiB (at most kMaxRegions per file, least recently
// used unmapped first); appends go to a pre-allocated staging file in the
// hidden directory `.mapfs-overlay/` and are relinked into the target
// (relink.h) at Sync, Close, truncate, map, or when staging fills. The
// operation log (op_log.h) makes committed staged bytes recoverable.
//
// Per-file state is shared by every OverlayFile of one (st_dev, st_ino) in
// the process, so two descriptors see each other's writes at once. Its
// invariants (under FileState::mu):
//   - ksize is the kernel's size of the target; staged bytes, if any, are
//     target offsets [sbase, send) with sbase == ksize, held in the staging
//     file at offset (x - salign) for target offset x, where salign is
//     sbase rounded down to the block size (so whole blocks line up for
//     extent moves and clones);
//   - the content is the target's first ksize bytes followed by the staged
//     bytes; its size is send when anything is staged, else ksize.
// Not covered: another process changing the file's size through the kernel
// while this one has it open (its cached size goes stale; a shrink can make
// a read through a map fault).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "overlay/engine.h"
#include "overlay/split/op_log.h"

namespace mapfs::overlay::split {

constexpr uint64_t kRegionBytes = 2 << 20;
constexpr size_t kMaxRegions = 64;
constexpr uint64_t kStagingBytes = 8 << 20;
constexpr const char* kHiddenDir = ".mapfs-overlay";

struct FileState;
class SplitEngine;

// What OpenOverlay's recovery did (also for `mapfs overlay info`).
struct RecoveryReport {
  int logs = 0;      // dead logs found
  int redone = 0;    // committed relinks finished
  int lost = 0;      // committed relinks whose target was gone
};

class SplitEngine final : public Engine {
 public:
  ~SplitEngine() override;
  static Result<std::unique_ptr<SplitEngine>> Open(const Options& o);

  Result<std::unique_ptr<OverlayFile>> Adopt(int fd, int flags) override;
  Status FixStat(const char* path, struct stat* st) override;
  Status FixStatFd(int fd, struct stat* st) override;

  RelinkMethod method() const { return method_; }
  const char* fs_name() const { return fs_name_; }
  const std::string& method_note() const { return method_note_; }
  const RecoveryReport& recovery() const { return recovery_; }
  Mode mode() const { return opt_.mode; }

  // Internal to the engine's files.
  void Release(const std::shared_ptr<FileState>& st);
  Status EnsureStaging(FileState& st, int some_fd);
  // Closes and removes the staging file; with `all`, also the link to the
  // target and the log pair (the file's last close).
  void DropStaging(FileState& st, bool all);
  OpLog& log() { return log_; }
  void RefusedMethod();  // the file system refused method_: copy from now on
  int dir_fd() const { return dir_fd_; }

 private:
  SplitEngine() = default;
  Status Recover();
  // Recovers one log if its owner is gone; true if it was a dead one.
  // *held: the log's descriptor, locked, when it was a dead one (the caller
  // closes it after removing its files).
  Result<bool> RecoverLogFile(const std::string& name, int* held);

  Options opt_;
  int root_fd_ = -1, dir_fd_ = -1;
  RelinkMethod method_ = RelinkMethod::kCopy;
  const char* fs_name_ = "other";
  std::string method_note_;  // why a cheaper method was not taken
  RecoveryReport recovery_;
  OpLog log_;
  std::mutex mu_;  // files_
  std::map<std::pair<dev_t, ino_t>, std::shared_ptr<FileState>> files_;
};

}  // namespace mapfs::overlay::split
