// Pool: one file (regular file, tmpfs/hugetlbfs file, DAX device or a file on
// a DAX file system) holding the whole file system, mapped once into the
// process as the "pool view": pool offset o lives at base() + o.
//
// Open protocol (several processes may open one pool):
//   byte 1 of the file is an open/close mutex (OFD write lock);
//   byte 0 is held read-locked by every open mount.
// The opener that can write-lock byte 0 is alone: it (re)initialises the
// shared-memory segment and, if the pool was not closed cleanly (dirty flag),
// runs recovery before anyone else gets in. The last mount to close clears
// the dirty flag unless a mount vanished without closing.
//
// Mount identity: each mount registers a slot in SharedState::mounts with a
// unique token, and holds an OFD write lock on byte kLiveByte + slot for as
// long as it is alive (MountAlive). The pool fd is O_CLOEXEC, so a mount
// dies with its process or with its process image (execve); a child of
// fork() takes an identity of its own (AfterFork). The slot of a dead mount
// is reused when a new mount needs one, after its committed redo records
// are replayed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "medium/pool_format.h"
#include "medium/protection.h"
#include "medium/redo_log.h"
#include "medium/shared.h"

namespace mapfs::medium {

struct CreateOptions {
  uint64_t size = 0;             // bytes; rounded down to a chunk multiple
  uint32_t page_shift = 12;      // 12 (4 KiB mappings) or 21 (2 MiB)
  format::Mode mode = format::Mode::kSync;
  uint32_t top_level = 0;        // 0 = derive from the size
  uint32_t redo_slots = 16;
  uint32_t redo_slot_size = 128 * 1024;
  // Allocate the whole file's memory now (fallocate) instead of 2 MiB at a
  // time as chunks are first used; ignored for a DAX device.
  bool reserve = false;
  // Rights of the pool file (regular files; a device keeps its own): only
  // its owner by default. Sharing follows the pool file (docs/SECURITY.md).
  uint32_t file_mode = 0600;
  int64_t group = -1;  // a gid to give the pool file, -1 = the creator's
  // Regular files' data: format::kFilesContiguous, or a block mapper design
  // (map::format::Kind) whose area takes `map_percent` % of the pages past
  // the metadata area, at the end of the pool (formatted at first mount).
  uint32_t files_kind = format::kFilesContiguous;
  uint32_t map_percent = 75;
};

class Pool;

struct OpenOptions {
  // Clears what the layers above keep per mount slot (the meta layer's lock
  // holds) before the slot of a dead mount is reused; called under the
  // kRecovery lock. Free slots (never used, or freed by a clean close or an
  // idle end) hold nothing and are taken without it. Without a hook, only
  // free slots are taken: a dead mount's leftovers could otherwise pass for
  // the new mount's.
  void (*scrub_slot)(Pool* pool, int slot) = nullptr;
  // The opener is the image an exec of this process started and is about
  // to take over what the old image handed off (ConfirmHandoff follows).
  // An exclusive open then counts the old image's hand-off as an idle end
  // provisionally, and ConfirmHandoff settles it.
  bool take_handoff = false;
  // Tag this pool's memory with the process's protection key (when one is
  // allocated, medium/protection.h): only for a front whose every entry
  // holds the rights (the C API, the shim). Code that drives the core
  // directly (the CLI, the FUSE daemon, tests) leaves its pools untagged.
  bool protect = false;
};

class Pool {
 public:
  // Formats `path` (created if missing; an existing file is overwritten).
  static Status Create(const std::string& path, const CreateOptions& opt);
  // Opens an existing pool. On success the caller must run the layers'
  // recovery if needs_recovery() and then call FinishOpen().
  static Result<std::unique_ptr<Pool>> Open(const std::string& path, const OpenOptions& opt = {});
  // Checks a header image; used by Open and by tests on damaged images.
  static Status ValidateHeader(const format::PoolHeader& h, uint64_t file_size);
  // Checks, without mounting, that `path` is a pool this process would
  // open: not a symbolic link, not planted (pool_access.h), a valid header.
  // The same errors and messages as Open.
  static Status Probe(const std::string& path);

  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Ends recovery: lets other openers in.
  void FinishOpen();
  // Clean close: marks the pool clean when this is the last mount.
  Status Close();
  // Drops the mapping without any clean-close bookkeeping, as if the process
  // had died here (tests of recovery).
  void Abandon();
  // In the child of fork(), before anything else uses the pool: gives this
  // copy its own mount (a new open file description of the pool file with
  // its own read lock on byte 0 and liveness lock, a new slot and token) and
  // drops the parent's, which stays the parent's. The mappings are kept.
  // Only the calling thread may exist (pthread_atfork child handler). On
  // error the copy is unusable and must only be abandoned.
  Status AfterFork();
  // A process whose mount holds nothing — no open file, no map, no redo
  // slot or lock, no call in progress (the caller, the shim, knows) — and
  // that is about to end without Close: exec (on: before it, off again if
  // it fails) or _exit. Its entry is marked idle, so that the last close
  // and later mounts free it as if it had closed cleanly, instead of leaving
  // the pool for recovery.
  void MarkIdleExit(bool on);
  // An exec (on: before it, off again if it fails) by a process whose
  // mount holds only open descriptions, `n` of them, all of which it hands
  // to the next image (the shim's hand-off records; a description that
  // does not survive the exec is handed over to be closed). Its entry
  // counts as a vanished mount — recovery counts the open files again —
  // unless the next image confirms that it took over all `n`.
  void MarkHandoffExit(uint64_t n, bool on);
  // In the new image, after taking over `n` descriptions inherited across
  // exec: the latest dead entry of this process that handed off exactly `n`
  // (and holds no redo slot) becomes an idle end (MarkIdleExit), so the
  // pool ends clean. Anything else — `missed`: a description could not be
  // taken over — leaves the entries to recovery (after an exclusive open
  // that trusted the hand-off, the pool is left dirty for the next one).
  void ConfirmHandoff(uint64_t n, bool missed);
  // Between an exclusive open that trusted an exec's hand-off and its
  // ConfirmHandoff: the open counts were rebuilt (zero) and recovery did not
  // run, so an unlinked inode the old image held is still live, not an
  // orphan to collect.
  bool taking_handoff() const { return handoff_expected_ != 0; }
  // True while the mount in `slot` is alive: it holds its liveness lock.
  // A mount that cannot be checked counts as alive (never steal a live
  // mount's locks).
  bool MountAlive(int slot) const;

  char* base() const { return base_; }
  uint64_t size() const { return header().pool_size; }
  // End of the pages the page allocator and the PPT may use: the pool's
  // end, or the start of a block-mapped pool's mapping area.
  uint64_t pages_end() const { return header().map_len ? header().map_off : header().pool_size; }
  const format::PoolHeader& header() const { return *reinterpret_cast<const format::PoolHeader*>(base_); }
  format::PoolState* state() const { return reinterpret_cast<format::PoolState*>(base_ + format::kStateOff); }
  template <typename T>
  T* at(uint64_t off) const { return reinterpret_cast<T*>(base_ + off); }
  uint64_t offset_of(const void* p) const { return static_cast<uint64_t>(static_cast<const char*>(p) - base_); }

  // Stores to the cache line holding `addr` whose loss at a crash is
  // harmless — a freed page's bitmap bit: lost, the page only leaks until
  // recovery reconciles the bitmap — need not be written back now, which
  // would make the caller's next locked instruction wait for the line. The
  // pool remembers the line and writes it back later: when it is displaced
  // from the small set of remembered lines, and for all of them before this
  // mount ends (Close, or an idle or hand-off exit, after which nobody runs
  // recovery for it). Lock-free; call after the store.
  void DeferWriteBack(const void* addr);
  // Writes back every deferred line, fenced.
  void WriteBackDeferred();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool map_sync() const { return map_sync_; }     // mapped with MAP_SYNC (DAX)
  // The file system gives 2 MiB pages (worked out on first use).
  bool huge_pages() const {
    DetectHugePages();
    return huge_pages_;
  }
  // Why (or why not): "tmpfs huge=always", "shmem_enabled=force", ...
  const std::string& huge_reason() const {
    DetectHugePages();
    return huge_reason_;
  }
  const char* fs_kind() const { return fs_kind_; }
  bool exclusive_open() const { return exclusive_; }
  bool needs_recovery() const { return needs_recovery_; }
  int replayed_at_open() const { return replayed_; }
  // Whether this pool's mappings carry the protection key (OpenOptions::protect).
  bool protect() const { return protect_; }
  uint64_t mount_token() const { return token_; }
  int mount_slot() const { return mount_slot_; }  // index in SharedState::mounts

  SharedState* shared() const { return shared_; }
  RedoLog& redo() { return redo_; }

  // Cross-process locks (robust): a dead holder's redo records are replayed
  // before the lock is handed on.
  void Lock(LockId id);
  void Unlock(LockId id);

  // Extra mmap flags the vm layer must use to map pool pages elsewhere.
  int map_flags() const { return map_flags_; }

 private:
  Pool() : redo_(this) {}
  Status OpenImpl(const std::string& path);
  // Takes a slot in SharedState::mounts for this mount (fd_ must be open):
  // a free one, or else a dead mount's.
  Status RegisterMount();
  // Frees the entries of dead mounts that ended idle (MarkIdleExit).
  void FreeIdleExits();
  // Exclusive open, before the shared state is rebuilt: true if the old
  // segment shows that every mount ended cleanly or idle.
  // handoff_mark: the pid value of an entry that handed off to this opener
  // (OpenOptions::take_handoff), or 0; *handoff gets that entry's count.
  static bool EndedIdle(const SharedState* old, int64_t handoff_mark, uint64_t* handoff);
  bool TakeLiveLock(int slot);
  void DropLiveLock(int slot);
  Status MapShared();
  void Unmap();

  std::string path_;
  int fd_ = -1;
  char* base_ = nullptr;
  uint64_t mapped_ = 0;
  SharedState* shared_ = nullptr;
  std::string shm_name_;
  ino_t shm_ino_ = 0;  // identifies the segment we mapped (AfterFork)
  bool map_sync_ = false;
  void DetectHugePages() const;
  mutable std::once_flag huge_once_;
  mutable bool huge_pages_ = false;
  mutable std::string huge_reason_;
  const char* fs_kind_ = "file";
  bool exclusive_ = false;
  bool needs_recovery_ = false;
  // Exclusive open: the previous mounts all ended (every one closed or
  // ended idle, MarkIdleExit), so a dirty flag left by an idle end needs
  // no recovery.
  bool ended_idle_ = false;
  // Exclusive open that trusted an exec's hand-off (take_handoff): the
  // number of descriptions ConfirmHandoff must report, 0 once settled.
  uint64_t handoff_expected_ = 0;
  bool open_lock_held_ = false;
  bool closed_ = false;
  int replayed_ = 0;
  int mount_slot_ = -1;
  bool protect_ = false;
  uint64_t token_ = 0;
  pid_t owner_pid_ = -1;  // process that registered the mount
  int map_flags_ = 0;
  OpenOptions opt_;
  RedoLog redo_;
  // DeferWriteBack's lines: pool offset | 1 (0 = empty), one slot per line
  // hash. A slot that already names the line is not stored to again.
  static constexpr int kDeferredLines = 64;
  std::atomic<uint64_t> deferred_[kDeferredLines] = {};
  // Set while marked for an idle or hand-off end: lines are not deferred.
  std::atomic<bool> ending_{false};
};

// RAII for Pool::Lock.
// Holds the rights (protection::Inside) for its whole life: the mutex and
// what it guards live in tagged memory, and a read path that runs with the
// rights closed (ReadOnly) may come to one, e.g. a mapper's lookup under
// kMap. Nested in a call's own Inside it costs an rdpkru, no switch.
class PoolLock {
 public:
  PoolLock(Pool* p, LockId id) : p_(p), id_(id) { p_->Lock(id_); }
  ~PoolLock() { p_->Unlock(id_); }
  PoolLock(const PoolLock&) = delete;
  PoolLock& operator=(const PoolLock&) = delete;

 private:
  protection::Inside rights_;  // first: open before Lock, closed after Unlock
  Pool* p_;
  LockId id_;
};

}  // namespace mapfs::medium
