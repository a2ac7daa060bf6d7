// One file's shared state in the split engine (see split_engine.h for the
// invariants) and the OverlayFile over it.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "overlay/engine.h"
#include "overlay/split/op_log.h"

namespace mapfs::overlay::split {

class SplitEngine;

struct FileState {
  dev_t dev = 0;
  ino_t ino = 0;
  std::mutex mu;
  int refs = 0;  // OverlayFiles open on it (the engine's files_ map, under its mu_)
  // Under the engine's mu_: on its idle list (refs == 0, maps kept), and
  // how many regions it held when it went there.
  bool idle = false;
  size_t idle_regions = 0;
  // The state's own descriptors of the target, reopened without O_APPEND
  // (positioned writes and relinks need that): rfd readable, wfd writable;
  // equal when an O_RDWR reopen was allowed, which alone permits writable maps.
  int rfd = -1, wfd = -1;
  // Descriptors of the target the engine no longer uses but must not close
  // while a program's descriptor of the file is open: closing any
  // descriptor of a file releases every POSIX record lock the process holds
  // on it. The descriptors reopens returned (the shim keeps the kernel's
  // low number when a lock is on the file, overlay_fds.h OverlayCoreOpened;
  // rfd and wfd are high duplicates) and descriptors replaced by a
  // read-write reopen.
  // Closed at the file's last close (Release), which comes with a close of
  // the program's own descriptor, and so releases those locks anyway.
  std::vector<int> held;
  uint64_t block = 4096;
  uint64_t ksize = 0;
  // The engine's lock epoch (SplitEngine::epoch) when ksize was last taken
  // from the kernel: a different one means a lock call of this process
  // came since, after which another process may have changed the file, so
  // the next call re-reads the size (one fstat). 0: re-read in any case.
  uint64_t epoch = 0;
  // Staging (pair < 0: none yet; no_staging: cannot, writes go to the kernel).
  int pair = -1;
  bool no_staging = false;
  bool linked = false;  // t-TAG-PAIR, a hard link to the target, exists
  int sfd = -1;
  char* smap = nullptr;
  uint64_t sbase = 0, salign = 0, send = 0;
  uint64_t sfaulted = 0;  // staging bytes [0, sfaulted) faulted in writable
  // Regions of the target mapped (index -> address), most recent at the front.
  bool maps_writable = false;
  std::list<std::pair<uint64_t, char*>> lru;
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, char*>>::iterator> regions;

  uint64_t Size() const { return send > sbase ? send : ksize; }
  int any_fd() const { return rfd >= 0 ? rfd : wfd; }  // one of the two, for reads and stats
  bool Staged() const { return send > sbase; }
};

// Unmaps every cached region (st.mu held, or the state no longer shared).
void UnmapRegions(FileState& st);
// Unmaps the regions wholly at or past `size` (st.mu held).
void UnmapRegionsFrom(FileState& st, uint64_t size);
// The commit entry of everything staged (sync and strict modes: each call
// durable), and the move of what is staged into the target (durable:
// logged and synced first). st.mu held.
Status CommitStaged(SplitEngine& e, FileState& st);
Status RelinkStaged(SplitEngine& e, FileState& st, bool durable);
// A file of the hidden directory: KIND-TAG-PAIR (s: staging, t: link).
std::string Name(const char* kind, const std::string& tag, int pair);

class SplitFile final : public OverlayFile {
 public:
  SplitFile(SplitEngine* e, std::shared_ptr<FileState> st, int fd, int flags)
      : engine_(e), st_(std::move(st)), fd_(fd), flags_(flags) {}
  ~SplitFile() override;
  Result<size_t> Pread(void* buf, size_t n, uint64_t off) override;
  Result<size_t> Pwrite(const void* buf, size_t n, uint64_t off) override;
  Result<uint64_t> Append(const void* buf, size_t n) override;
  Result<uint64_t> Size() override;
  Status Truncate(uint64_t size) override;
  Status Sync() override;
  Status Flush() override;
  Result<void*> Map(void* addr, size_t len, int prot, int flags, uint64_t off) override;
  Status Close() override;
  int fd() const override { return fd_; }

 private:
  bool readable() const { return (flags_ & O_ACCMODE) != O_WRONLY; }
  bool writable() const { return (flags_ & O_ACCMODE) != O_RDONLY; }
  Result<size_t> WriteLocked(const char* buf, size_t n, uint64_t off);
  Status StrictOverwrite(const char* buf, size_t n, uint64_t off);
  Status StageBytes(const char* buf, size_t n, uint64_t off);
  Status KernelWrite(const char* buf, size_t n, uint64_t off);
  Result<size_t> KernelRead(void* buf, size_t n, uint64_t off);
  // Copies through the region maps; *shrunk when the file turned out to
  // end before `off + n` (another process truncated it: vm/fault_guard.h),
  // some prefix copied. Shrunk() then learns the kernel's size.
  Status MapCopy(char* dst, const char* src, uint64_t off, size_t n, bool write, bool* shrunk);
  Status Shrunk();
  Status ShrinkTo(uint64_t size);  // Shrunk, the kernel's size known
  Status CheckEnd(uint64_t end);
  // The lock rule (SplitEngine::BeforeLock): after a lock call of this
  // process, the file's size is taken from the kernel again (st.mu held).
  bool Stale() const;
  Status Revalidate();
  Result<uint64_t> KernelSize();
  Status Commit();
  // Moves staged bytes into the target. durable: logged and synced first
  // (fsync, sync/strict modes), else just relinked (posix close, map, truncate).
  Status RelinkLocked(bool durable);
  char* Region(uint64_t idx, Status* err);

  SplitEngine* engine_;
  std::shared_ptr<FileState> st_;
  int fd_;
  int flags_;
  bool closed_ = false;
};

}  // namespace mapfs::overlay::split
