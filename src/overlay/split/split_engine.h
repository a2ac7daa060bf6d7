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
// Reuse across opens (reuse.cc), as SplitFS keeps its mappings per inode:
//   - a file's state outlives its last close while it holds region maps
//     ("idle": refs == 0, nothing staged, its descriptors and maps kept), at
//     most kMaxIdleFiles files and kMaxIdleRegions regions in all, least
//     recently closed dropped first. Reopening it (same st_dev, st_ino)
//     takes the kernel's size afresh (regions wholly past it are unmapped),
//     so a map kept across close never reaches past a truncation another
//     process made meanwhile. An idle file whose last name is gone (unlink,
//     rename over it) is dropped at the next close that parks a file, so its
//     blocks are not held long; every idle file goes with the engine.
//   - a staging file outlives the file that used it ("spare", at most
//     kSpareStaging, kept mapped under its name s-TAG-PAIR with its pages
//     faulted in writable): the next file given that pair writes into
//     resident pages instead of faulting each one. Its pair's newest log
//     entry is a done (or none, posix), so recovery ignores its content.
// Across processes (docs/OVERLAY.md "Several processes"): a lock call of
// the process, on any descriptor, is a coherence point, as NFS makes it.
// BeforeLock relinks every file's staged bytes, so the next holder of the
// lock in another process finds them in the kernel's file (a relink that
// fails fails the lock call, which is then not made); AfterLock bumps
// epoch_, and each file's next call compares its FileState::epoch and
// takes the kernel's size afresh (one fstat) when they differ. Without
// locks, another process's change of the size is seen at the last-page
// check (CheckEnd), a fault, a stat that shows it (FixStat), or reopening.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <list>
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
constexpr size_t kMaxIdleFiles = 8;
constexpr size_t kMaxIdleRegions = 64;
constexpr uint32_t kSpareStaging = 4;
// Staging pages are faulted in writable ahead of the writes, doubling up to
// this much past the last byte written (one madvise per step, not a fault
// per page).
constexpr uint64_t kPrefaultAhead = 1 << 20;

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
  Status BeforeLock() override;
  bool PublishPending() const override { return publish_.load(std::memory_order_acquire) != 0; }
  void AfterLock() override { epoch_.fetch_add(1, std::memory_order_acq_rel); }

  // The lock epoch (FileState::epoch); starts at 1, so 0 is never current.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // A file went from nothing staged to staged (st.mu held): the next
  // BeforeLock has something to publish.
  void NoteStaged() {
    if (!(publish_.load(std::memory_order_acquire) & kMaybeStaged))
      publish_.fetch_or(kMaybeStaged, std::memory_order_acq_rel);
  }

  RelinkMethod method() const { return method_.load(std::memory_order_relaxed); }
  const char* fs_name() const { return fs_name_; }
  const std::string& method_note() const { return method_note_; }
  const RecoveryReport& recovery() const { return recovery_; }
  Mode mode() const { return opt_.mode; }

  // Internal to the engine's files.
  // The last close of a file: its state goes idle (maps kept) or away.
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
  // reuse.cc: the idle files and spare staging files.
  // A state that had no open file gets the kernel's size `ksize` (st.mu held).
  void Revive(FileState& st, uint64_t ksize);
  // Takes `st` off the idle list (mu_ held, st.refs was 0).
  void Unidle(FileState& st);
  // Unmaps and closes everything of a state no file has open (st.mu held).
  static void Shut(FileState& st);
  // A descriptor of the target (open through /proc/self/fd/`fd`) with
  // access mode `acc`, without O_APPEND; -1/errno (st.mu held).
  static int Reopen(FileState& st, int fd, int acc);
  // Closes FileState::held: the file's last close only (st.mu held).
  static void CloseHeld(FileState& st);
  // Drops idle files whose last name is gone (mu_ not held).
  void SweepUnlinked();
  bool TakeSpare(FileState& st);
  bool ParkSpare(FileState& st);
  void DropSpares();

  Options opt_;
  int root_fd_ = -1, dir_fd_ = -1;
  std::atomic<RelinkMethod> method_{RelinkMethod::kCopy};
  const char* fs_name_ = "other";
  std::string method_note_;  // why a cheaper method was not taken
  RecoveryReport recovery_;
  OpLog log_;
  std::atomic<uint64_t> epoch_{1};
  // BeforeLock's state, one word so that its fast exit is one load:
  // kMaybeStaged, some file may have staged bytes; above it, how many
  // BeforeLocks are publishing (kInFlight each). Invariant: a file's
  // staged bytes are published, or kMaybeStaged is set, or a BeforeLock
  // that will publish them is in flight. So a BeforeLock that sees 0 may
  // return at once; one that sees a publish in flight waits for it on
  // publish_mu_ (the bytes of its own thread may be among the ones being
  // relinked: returning early would let its unlock go first).
  static constexpr uint64_t kMaybeStaged = 1, kInFlight = 2;
  std::atomic<uint64_t> publish_{0};
  std::mutex publish_mu_;  // one publish at a time; taken before mu_ and any file's mu
  std::mutex mu_;  // files_
  std::map<std::pair<dev_t, ino_t>, std::shared_ptr<FileState>> files_;
  std::list<std::shared_ptr<FileState>> idle_;  // under mu_, most recently closed first
  size_t idle_regions_ = 0;                     // under mu_: regions the idle files hold
  struct Spare {
    int fd = -1;
    char* map = nullptr;
    uint64_t faulted = 0;
  };
  std::mutex spare_mu_;  // taken under a FileState's mu, never the other way
  Spare spares_[kSpareStaging];
};

}  // namespace mapfs::overlay::split
