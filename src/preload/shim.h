// The shim's state: which paths belong to mapfs, the mounted pool, and the
// table of mapfs descriptors.
//
// Descriptor numbers come from the kernel: every mapfs descriptor is backed
// by a kernel descriptor (a "placeholder") with the same number, so the
// kernel never hands that number to anything else and close/dup/dup2/
// O_CLOEXEC/fork/exec keep working on numbers as programs expect. A
// placeholder is a dup of one read-only /dev/null descriptor (cheap); when
// the process forks, spawns or execs, each description's placeholder is
// swapped for a read-only memfd of its own ("handoff"): its kernel file
// position then carries the description's offset (shared with children, as
// POSIX wants) and its contents a record that lets a new image adopt it.
//
// Invariant: table[fd] != null  <=>  fd is a placeholder of that entry's
// description. Entries are set after the placeholder exists and cleared
// before it is closed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <sys/types.h>

#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "fs/file_system.h"
#include "medium/protection.h"

namespace mapfs::preload {

// One open file description as the shim sees it.
struct Desc {
  Desc(fs::FileSystem* f, std::shared_ptr<fs::OpenFile> o) : fsys(f), file(std::move(o)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc();
  fs::FileSystem* fsys;
  std::shared_ptr<fs::OpenFile> file;
  // After a handoff the offset lives in the kernel, in the position of the
  // placeholder memfd (shared with other processes).
  std::atomic<bool> kernel_offset{false};
  int status_flags = 0;  // O_APPEND | O_NONBLOCK ... as F_SETFL changes them
  std::string path;      // mapfs path it was opened by (for /proc-like uses: fchdir, realpath)
  std::atomic<int> lock_fd{-1};  // this description's own descriptor of the lock file (OFD locks, flock)
  // The description's position lock, as Linux's f_pos lock: held by every
  // read, write and lseek that uses the offset (PositionLock), wherever
  // the offset lives, and by the hand-off that moves it into the kernel,
  // so no update in flight is lost at a fork. `pos_mu` serialises this
  // process's threads; once the offset is in the kernel, an OFD lock on
  // `pos_fd` (this process's own description of the placeholder memfd,
  // opened by process `pos_pid`) serialises the processes sharing it.
  std::mutex pos_mu;
  int pos_fd = -1;
  pid_t pos_pid = 0;
};
using DescRef = std::shared_ptr<Desc>;

// Holds a description's position lock (see Desc::pos_mu) for one read,
// write or lseek that uses its offset. kernel() says, stable while held,
// whether the offset lives in the kernel (the placeholder's position) or
// in the shim's OpenFile.
class PositionLock {
 public:
  PositionLock(Desc& d, int fd);
  ~PositionLock();
  PositionLock(const PositionLock&) = delete;
  PositionLock& operator=(const PositionLock&) = delete;
  bool kernel() const { return kernel_; }

 private:
  Desc* d_;
  bool kernel_ = false;
  bool ofd_ = false;
};

// A path sorted: the kernel's, or mapfs's (relative to directory `at`).
struct Route {
  bool mapfs = false;
  uint64_t at = 0;
  std::string path;  // mapfs: the path within the pool; kernel: a rewritten path, or empty
  std::string base;  // mapfs, relative paths: the pool path of `at`
  // The path the kernel should see.
  const char* Kernel(const char* orig) const { return path.empty() ? orig : path.c_str(); }
};

class Shim {
 public:
  // The process's shim; set up on first use. Never null.
  static Shim& Get();

  // Whether mapfs is configured at all (MAPFS_POOL set).
  bool enabled() const { return enabled_; }
  const std::string& prefix() const { return prefix_; }

  // The mounted file system, mounting on first use; null with errno set.
  fs::FileSystem* Fs();

  // Sorts a path given to a call relative to `dirfd` (AT_FDCWD for plain calls).
  Route Classify(int dirfd, const char* path);

  // Descriptor table.
  DescRef Lookup(int fd) const;
  bool IsMapfs(int fd) const;
  // Installs `d` at a fresh placeholder >= min_fd; returns the fd or -1/errno.
  int Install(DescRef d, bool cloexec, int min_fd = 0);
  // Makes `newfd` a descriptor of `d` (dup2/dup3). -1/errno on failure.
  int InstallAt(DescRef d, int newfd, bool cloexec);
  // Forgets `fd` (the caller closes the kernel placeholder). Returns the entry.
  DescRef Remove(int fd);
  // Kernel descriptors are about to be replaced by dup2/dup3 or closed by
  // close_range: forget any mapfs entry there.
  void ForgetRange(unsigned lo, unsigned hi);

  // Offsets: read and update the description's offset whichever side holds it.
  int64_t Offset(const Desc& d, int fd);
  void SetOffset(Desc& d, int fd, int64_t off);

  // fsync of every description this process has open (sync(2)).
  void SyncAll();

  // Before vfork/posix_spawn/system/popen/exec: move every description's
  // offset into the kernel and write its adoption record.
  void Handoff();
  // Around fork() (pthread_atfork): ForkPrepare hands off like Handoff and
  // keeps the table unchanged and every description's position lock held until
  // ForkDone (in the parent, and in the child after AfterForkChild), so the
  // child inherits none of them held by a thread it does not have. A
  // thread that forks while it holds a position lock itself (a signal
  // handler interrupting its own read) would wait forever; nothing in the
  // shim does.
  void ForkPrepare();
  void ForkDone();
  // True if this process holds nothing of the pool that it must give back
  // before it ends: no mapfs descriptor, no map of a mapfs file.
  bool HoldsNothing();
  // MarkIdleExit of the process's mount (medium/pool.h), when it holds
  // nothing: before exec (on, then off if exec fails) and at _exit.
  void MarkIdleExit(bool on);
  // Before an exec that replaces this image (after Handoff): marks how the
  // mount ends so that the pool stays clean — idle when it holds nothing;
  // otherwise as handing its descriptions to the next image, writing the
  // ones the exec will not carry (close-on-exec, or held only by a map) to
  // a "drop" memfd the next image closes for it. Only in a process whose
  // one thread is this one (no call can be in progress in another).
  // UnmarkExec undoes it when the exec failed.
  struct ExecMark {
    int kind = 0;  // 0 nothing marked, 1 idle, 2 hand-off
    uint64_t n = 0;
    int drop_fd = -1;
  };
  ExecMark MarkExec();
  // _exit/_Exit, which skip the unmount: in a process whose one thread is
  // this one (a fork child, typically), closes every description it holds
  // (as its exit would have: open counts, orphans) and marks its mount idle,
  // so the pool stays clean. Otherwise it marks it idle only if it holds
  // nothing. No stdio flush: _exit does none.
  void EndAtExit();
  void UnmarkExec(ExecMark& m);
  // In the child of fork(): own mount identity, own open counts.
  void AfterForkChild();

  // Current directory inside mapfs (empty: the kernel's cwd is current).
  bool CwdIsMapfs() const;
  std::string CwdPath() const;
  int Chdir(uint64_t ino, std::string mapfs_path);
  void LeaveMapfsCwd();

  // At process exit: flush stdio, close every description, unmount, so
  // the pool is left clean. Later calls on mapfs paths fail with EIO.
  void Shutdown();

  // stdin/stdout/stderr are redirected to mapfs: let stdio reach them.
  void FixStdio(int fd);

  std::shared_mutex& table_mu() { return mu_; }

 private:
  Shim();
  void Adopt();           // descriptors and cwd inherited across exec
  void AdoptCwd(int fd);  // from the cwd memfd
  void AdoptCwdFromEnv();  // from MAPFS_CWD when no memfd came
  // Closes, for the old image, the descriptions in a drop memfd (MarkExec).
  // The number closed, or -1 if any could not be.
  int64_t AdoptDrops(int fd, bool counted);
  bool adopting_ = false;  // Adopt runs: the first mount takes a hand-off
  Route ClassifySlow(int dirfd, std::string_view path);  // Classify past its fast path

  int Placeholder(bool cloexec, int min_fd);
  int AnyFdOf(const Desc* d) const;  // some descriptor of d, or -1
  DescRef& SlotLocked(int fd);       // table entry of fd (mu_ held exclusively)

  bool enabled_ = false;
  std::string pool_, prefix_;
  std::string prefix_name_;  // last component of the prefix ("mapfs")
  std::once_flag mount_once_;
  std::unique_ptr<fs::FileSystem> fs_;
  int mount_errno_ = 0;
  std::atomic<bool> down_{false};
  int devnull_ = -1;

  mutable std::shared_mutex mu_;
  static constexpr int kL1 = 1024, kL2 = 1024;  // fds below 1M
  std::atomic<DescRef*> table_[kL1] = {};
  // Moves every description out of the table (the caller holds mu_
  // exclusively); dropping the result closes them.
  std::vector<DescRef> TakeAllLocked();
  mutable std::mutex cwd_mu_;
  uint64_t cwd_ino_ = 0;
  std::string cwd_path_;
  // While the cwd is in mapfs, a memfd (not close-on-exec) that tells a new
  // image where it is: the kernel's cwd cannot be in mapfs, and shells
  // rebuild their children's environment, so the environment cannot say.
  int cwd_fd_ = -1;
  std::string cwd_fd_path_;  // the cwd cwd_fd_ holds
  void HandoffCwd();
  // Handoff with mu_ held (exclusively, or shared with fork_mu_); keep_pos:
  // leave the position lock of every description in the table held,
  // listed in fork_held_.
  void HandoffLocked(bool keep_pos);
  std::mutex fork_mu_;              // held from ForkPrepare to ForkDone
  std::vector<DescRef> fork_held_;  // see ForkPrepare
  std::atomic<bool> cwd_mapfs_{false};
};

// Reentrancy guard: while the core runs (it calls open, mmap, ... itself),
// every wrapper goes straight to the C library. It is also the shim's entry
// into mapfs for the protection keys (medium/protection.h): the pool is
// writable while one is held.
extern thread_local int in_core __attribute__((tls_model("initial-exec")));
template <class Rights>
struct CoreScopeWith {
  CoreScopeWith() { in_core++; }
  ~CoreScopeWith() { in_core--; }
  CoreScopeWith(const CoreScopeWith&) = delete;
  CoreScopeWith& operator=(const CoreScopeWith&) = delete;

 private:
  Rights rights_;
};
using CoreScope = CoreScopeWith<medium::protection::Inside>;
// For a wrapper whose common path stores nothing into the pool's memory
// but this mount's own row of reader counters, left writable (lseek; read,
// pread, readv, stat, fstat): reentrancy as CoreScope, the rights of
// protection::ReadOnly (no switch). Rare stores on these paths open the
// rights themselves; a description it drops last closes under ~Desc's own
// CoreScope.
using CoreReadScope = CoreScopeWith<medium::protection::ReadOnly>;

// Lexically normalises an absolute path ("//", ".", ".."), keeping a trailing slash.
std::string NormalizePath(std::string_view p);

// Moves a descriptor the shim or the core keeps for itself (the pool file,
// the lock file, the placeholder template) above the numbers programs use
// (shells dup2 onto 3..9 and park saved copies at 10 and up) and marks it
// internal: a program's close/close_range/closefrom does not reach it (the
// program never opened it; it sees EBADF, as if the number were free).
int MoveHigh(int fd);
// Where the internal descriptors start: above what programs use, below the
// descriptor limit.
int HighBase();
// A close-on-exec duplicate of `fd` made straight in that range and marked
// internal. Not MoveHigh(dup(fd)): its close of the low duplicate would
// release every POSIX record lock the process holds on the file (closing
// any descriptor of a file does), e.g. SQLite's locks, when a second
// connection opens a database the first one has locked.
int DupHigh(int fd);
// Marks `fd` internal where it is (no move, so no close); returns it.
int KeepInternal(int fd);
bool IsInternal(int fd);
// The first internal descriptor in [from, to], or -1.
int NextInternal(unsigned from, unsigned to);
// Closes an internal descriptor (the shim's own close of one).
int CloseInternal(int fd);

// Stores through maps of mirrored files (fs/map_mirror.h) written back to
// the files (mmap_calls.cc), before an exec or a spawn.
void SyncMirroredMaps();
// Shared maps of mapfs files (mmap_calls.cc). Each holds its description.
// In the child of fork(), first thing: the descriptions the inherited maps
// hold (each once).
std::vector<DescRef> MappedDescs();
// At exit: releases the descriptions the maps hold (the maps stay).
void DropMaps();

// Status -> -1/errno.
int Fail(const Status& st);
inline int FailErrno(int e) {
  errno = e;
  return -1;
}

}  // namespace mapfs::preload
