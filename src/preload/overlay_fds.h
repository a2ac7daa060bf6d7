// The shim's second kind of prefix: an overlay directory (MAPFS_OVERLAY,
// src/overlay/). Paths under it are opened by the kernel, with the caller's
// flags and permissions; a regular file's descriptor is then handed to the
// overlay engine, which serves its bytes. Everything else (names, modes,
// locks, directories) stays the kernel's.
//
// Unlike a pool descriptor, an overlay descriptor IS the kernel's
// descriptor of the file: dup, O_CLOEXEC, fcntl locks, fchmod and
// inheritance work on it unchanged. The engine holds its own dup of the
// same description (internal, high), so the application may close or
// replace its numbers freely; the engine's file closes with the last of
// them. The offset lives in the shim (OvOpen::offset) until a fork, exec or
// spawn, which moves it into the description's kernel position (shared with
// the children from then on) and relinks every file so the kernel's view is
// the content (OverlayHandoff). A fork child drops every overlay entry it
// inherited (it reaches those files through the kernel; its first own
// overlay open starts a fresh engine), so two processes never share one
// engine's staging files.
//
// Invariant: g_ov_count > 0 <=> the table may hold entries; every wrapper's
// check of a descriptor is one relaxed load while it is 0.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "overlay/engine.h"

struct statx;
struct iovec;

namespace mapfs::preload {

extern thread_local int in_core __attribute__((tls_model("initial-exec")));

// One open file description of an overlay file.
struct OvOpen {
  OvOpen() = default;
  OvOpen(const OvOpen&) = delete;
  OvOpen& operator=(const OvOpen&) = delete;
  ~OvOpen();  // the engine's file closes (staged bytes relinked)
  std::unique_ptr<overlay::OverlayFile> file;
  std::mutex pos_mu;  // each read, write, lseek that uses the offset
  uint64_t offset = 0;
  bool kernel_offset = false;  // after a hand-off: the description's kernel position
  std::atomic<bool> append{false};
  int acc = 0;  // O_ACCMODE of the open
};
using OvRef = std::shared_ptr<OvOpen>;

extern std::atomic<int> g_ov_count;
OvRef OverlayLookup(int fd);
inline OvRef OverlayFd(int fd) {
  if (in_core || g_ov_count.load(std::memory_order_relaxed) == 0) return nullptr;
  return OverlayLookup(fd);
}

// Whether MAPFS_OVERLAY is set (read once).
bool OverlayConfigured();
// A descriptor the core just opened (open, openat in a CoreScope) as
// `path`: moved to the internal range (MoveHigh), except the split engine's
// reopen of a program's file (through /proc/self/fd) while a record lock
// is on the file, which keeps the kernel's number, marked internal. Moving it would close the low
// number, and closing any descriptor of a file releases every POSIX record
// lock the process holds on it (a program that locked the file through one
// descriptor and then opened it again would lose its lock). The engine
// makes its own high duplicate (dup in a CoreScope is DupHigh) and closes
// the low one when the program's last descriptor of the file closes, which
// releases those locks anyway (split/file_state.h, FileState::held).
int OverlayCoreOpened(int fd, const char* path);
// Whether `path` (relative to dirfd) names something under the overlay's
// root, lexically (the hidden directory excluded).
bool OverlayPath(int dirfd, const char* path);
// The flags the kernel opens `path` with: the caller's, but O_TRUNC of a
// writable open under the root is left to an engine that TruncatesAtAdopt
// (the virtual engine: the kernel would truncate a virtualized file's
// format away under every process using it).
int OverlayKernelFlags(int dirfd, const char* path, int flags);
// After the kernel opened `path` as `fd` (with OverlayKernelFlags): adopts a
// regular file under the root. `flags` are the caller's. Returns fd, or
// -1/errno (fd closed) when the engine refused it.
int OverlayAfterOpen(int fd, int dirfd, const char* path, int flags);
// Whether the overlay's engine is the virtual one (its files must be
// reached through it by every process: stat by path, truncate by path,
// descriptors inherited across fork and exec are adopted again).
bool OverlayVirtual();

ssize_t OvRead(OvOpen& o, int fd, void* buf, size_t n, int64_t off);  // off < 0: the offset
ssize_t OvWrite(OvOpen& o, int fd, const void* buf, size_t n, int64_t off);
ssize_t OvReadV(OvOpen& o, int fd, const iovec* iov, int cnt, int64_t off);
ssize_t OvWriteV(OvOpen& o, int fd, const iovec* iov, int cnt, int64_t off);
off_t OvSeek(OvOpen& o, int fd, off_t off, int whence);
int OvSync(OvOpen& o);
int OvTruncate(OvOpen& o, off_t size);
int OvFallocate(OvOpen& o, int fd, int mode, off_t off, off_t len);
void* OvMap(OvOpen& o, void* addr, size_t len, int prot, int flags, off_t off);

// Descriptor bookkeeping (the caller does the kernel's part).
void OvInstall(int fd, OvRef o);  // fd now also names o (dup)
void OvForget(int fd);            // fd no longer names an overlay file
void OvForgetRange(unsigned lo, unsigned hi);

// Stat results of the kernel for overlay files, corrected (size of staged
// bytes, a virtualized file's content size). The file is `path` relative
// to `dirfd`, or the descriptor `dirfd` when path is null or empty.
void OvFixStat(struct stat* st, int dirfd, const char* path);
void OvFixStatx(struct statx* x, int dirfd, const char* path);

// Maps the engine made (mmap of virtualized files, vview.h): written back
// before the kernel unmaps them, and at msync. One load when there are none.
bool OvHasViews();
void OvUnmapViews(void* addr, size_t len);
int OvSyncViews(void* addr, size_t len);
bool OvViewsMeet(const void* addr, size_t len);
// mprotect (pkey_mprotect with a key other than -1) of a range that meets
// the engine's maps (OvViewsMeet): 0, or -1 with errno.
int OvProtectViews(void* addr, size_t len, int prot, int pkey = -1);
// Before a read(2)-like call the kernel serves into `buf`: pages of the
// engine's maps there are made writable (a kernel copy into a write-
// protected page fails with EFAULT). One load when there are no maps.
void OvBeforeKernelStores(void* buf, size_t n);
void OvBeforeKernelStores(const struct iovec* iov, int cnt);

// The kernel's stores into maps of virtualized files (OvBeforeKernelStores
// makes their pages writable first): a write-back on another thread may
// protect a page again between that and the call, which then fails with
// EFAULT (a kernel copy does not fault). Prepared again and retried; a
// buffer that is really bad gets its EFAULT all the same. Without views it
// is the plain call. (Not for receives: a datagram whose copy faulted is
// gone, socket_calls.cc.)
template <typename Prepare, typename Call>
ssize_t KernelStores(Prepare prepare, Call call) {
  for (int tries = 0;; tries++) {
    prepare();
    ssize_t r = call();
    if (r >= 0 || errno != EFAULT || tries == 3 || !OvHasViews()) return r;
  }
}

// Descriptors of virtualized files reached by a process through the kernel
// only: adopted again (overlay_inherit.cc). At load, for those inherited
// across exec; in a fork child, for those the parent had (`fds` each
// description's numbers).
void OverlayAdoptInherited();
void OverlayReadopt(const std::vector<std::vector<int>>& fds);
// The engine, opened on first use (null if unusable); for overlay_inherit.cc.
overlay::Engine* OverlayEngine();

// Before exec/spawn (and fork, through pthread_atfork): offsets into the
// kernel, staged bytes relinked.
void OverlayHandoff();
// sync(2): every overlay file durable.
void OverlaySyncAll();

// A lock call (fcntl F_SETLK/F_SETLKW/F_OFD_SETLK*, flock, lockf) on any
// descriptor is a coherence point between processes (Engine::BeforeLock):
// OverlayBeforeLock just before the kernel's call, OverlayAfterLock once it
// succeeded. One load each while no overlay file is open. OverlayBeforeLock
// returns -1 with errno set (EIO, ENOSPC, EFBIG...) when staged bytes could
// not be published: the wrapper then fails the lock call without making it
// (an unlock keeps the lock held, so no other process works on a file whose
// end this process still holds), else 0.
int OverlayBeforeLock();
void OverlayAfterLock();
// Before a call that releases locks as a side effect: close, close_range,
// dup2 and dup3 over an open descriptor (closing any descriptor of a file
// releases the process's POSIX record locks on it; the last of an open
// file description, its flock and OFD locks). Publishes as OverlayBeforeLock
// does, once the process has made a lock call (inherited across exec,
// locks are not seen: the new image made none); 0 or -1/errno. One load
// while nothing is staged or no lock call was made.
int OverlayBeforeRelease();
inline bool SetsLock(int cmd) {
  return cmd == F_SETLK || cmd == F_SETLKW || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
}

}  // namespace mapfs::preload
