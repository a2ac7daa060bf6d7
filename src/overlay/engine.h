// The overlay engines' common interface: a user-space data path for the
// files of an ordinary directory of a kernel file system (ext4, XFS, tmpfs),
// SplitFS's `split` engine and MadFS's `virtual` engine (README.md here).
//
// Division of labour. The kernel keeps names, permissions, owners, quotas
// and allocation: the shim opens every overlay file through the kernel with
// the caller's flags (so every permission check is the kernel's) and hands
// the descriptor to the engine, which owns it from then on. The engine serves
// the file's bytes; metadata calls by path go to the kernel, corrected by
// FixStat where the engine knows better (a virtualized file's content size,
// appends not yet relinked).
//
// Invariants every engine keeps:
// - Two OverlayFiles of one file in one process see each other's writes at
//   once, as two kernel descriptors would (engines keep per-file state keyed
//   by device and inode number).
// - After Sync or Close returns, a process that does not use the overlay (or
//   a later one that does) sees the same content (split: staged appends are
//   relinked; virtual: through `mapfs overlay cat|export`).
// - Errors are Status values with a POSIX code; nothing here throws, asserts
//   or aborts on what a user or the medium can cause (a damaged virtualized
//   file is EUCLEAN with a message, never a crash).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace mapfs::overlay {

enum class EngineKind : uint32_t { kSplit = 0, kVirtual = 1 };

// The pool's three modes, read for an overlay (docs/OVERLAY.md):
// posix: durable at fsync; sync: every call durable on return; strict: every
// call durable and atomic (all of a write or none of it after a crash).
enum class Mode : uint32_t { kPosix = 0, kSync = 1, kStrict = 2 };

struct Options {
  std::string dir;  // the overlay's root: absolute, normalised, no trailing '/'
  EngineKind engine = EngineKind::kSplit;
  Mode mode = Mode::kPosix;
};

// One open description of an overlay file (what a kernel file description
// is to a descriptor). Offsets and sizes are the file's plain content.
// Thread-safe: calls on one OverlayFile may come from several threads.
class OverlayFile {
 public:
  virtual ~OverlayFile() = default;
  // Reads up to n bytes at off; 0 at or past the end.
  virtual Result<size_t> Pread(void* buf, size_t n, uint64_t off) = 0;
  // Writes n bytes at off, extending the file (with zeros between the old
  // end and off) as needed.
  virtual Result<size_t> Pwrite(const void* buf, size_t n, uint64_t off) = 0;
  // Writes n bytes at the end as one step (O_APPEND); returns the offset
  // they were written at.
  virtual Result<uint64_t> Append(const void* buf, size_t n) = 0;
  virtual Result<uint64_t> Size() = 0;
  virtual Status Truncate(uint64_t size) = 0;
  // fsync/fdatasync: everything written is durable and the kernel's view of
  // the file is its content.
  virtual Status Sync() = 0;
  // Makes the kernel's view of the file its content (split: staged appends
  // relinked) without the cost of durability: the shim calls it before a
  // fork, exec or spawn hands the descriptor to a process that reaches the
  // file through the kernel. Engines whose kernel view is never the content
  // (virtual) override it with nothing to do.
  virtual Status Flush() { return Sync(); }
  // Maps [off, off+len) of the content as mmap(2) would (flags MAP_SHARED or
  // MAP_PRIVATE, prot as given; addr a hint or MAP_FIXED address). Engines
  // that cannot map a file return ENODEV.
  virtual Result<void*> Map(void* addr, size_t len, int prot, int flags, uint64_t off) = 0;
  // Whether the kernel's view of the file is its content once Flush
  // returned (split files, plain files), so that a process reaching the
  // descriptor through the kernel (a fork child dropping the engine, an
  // exec'd image) reads and writes it correctly. False for a virtualized
  // file: every process must reach it through the engine.
  virtual bool KernelIsContent() const { return true; }
  // lseek SEEK_DATA (hole false) or SEEK_HOLE (hole true) from `off`, as
  // the kernel answers for a file with this content: ENXIO at or past the
  // end. The default asks the kernel after a Flush.
  virtual Result<uint64_t> SeekData(uint64_t off, bool hole) {
    // The kernel knows the holes once the engine's bytes are in the file.
    MAPFS_RETURN_IF_ERROR(Flush());
    off_t r = lseek(fd(), static_cast<off_t>(off), hole ? SEEK_HOLE : SEEK_DATA);
    if (r < 0) return Status::FromErrno("lseek");
    return static_cast<uint64_t>(r);
  }
  // fallocate(2) of the content, for engines whose kernel view is not the
  // content (the shim lets the kernel do it for the others): EOPNOTSUPP here.
  virtual Status Fallocate(int /*mode*/, uint64_t /*off*/, uint64_t /*len*/) {
    return Status::Error(EOPNOTSUPP, "overlay: fallocate is the kernel's for this file");
  }
  // Ends the description: pending work is finished (as Sync, except that
  // posix mode need not make it durable) and the kernel descriptor closed.
  virtual Status Close() = 0;
  // The kernel descriptor the engine owns (for fstat, locks, fchmod...).
  virtual int fd() const = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Takes ownership of `fd`, a descriptor of a regular file under the
  // overlay's root that the caller opened through the kernel with `flags`
  // (O_ACCMODE, O_APPEND, O_TRUNC... as the application asked; O_CREAT'd
  // files arrive already created, empty). On error the fd is closed.
  // If TruncatesAtAdopt(), the shim opened a writable O_TRUNC open WITHOUT
  // O_TRUNC (a virtualized file emptied by the kernel would lose its
  // format under every other process using it) and Adopt empties the file
  // itself.
  virtual Result<std::unique_ptr<OverlayFile>> Adopt(int fd, int flags) = 0;
  virtual bool TruncatesAtAdopt() const { return false; }
  // Whether `path` (a stat of it) may need FixStat: the shim skips the call
  // (an open and a read) for engines that keep per-file state only for
  // files open in the process.
  virtual bool StatsByPath() const { return false; }
  // Maps an engine made itself rather than by the kernel (Map of a file the
  // kernel cannot map: docs/OVERLAY.md "mmap"). HasViews is one load, for the
  // shim's munmap/msync fast path. UnmapViews: before the kernel unmaps
  // [addr, addr+len), stores made through the engine's maps in that range
  // reach the file and the engine forgets them. SyncViews: msync of the
  // range. SyncAllViews: before exec and at exit. ProtectViews: the
  // application's mprotect of a range that meets them (ViewsMeet); 0 or an
  // errno, as the kernel's.
  virtual bool HasViews() const { return false; }
  virtual int ProtectViews(void* /*addr*/, size_t /*len*/, int /*prot*/, int /*pkey*/ = -1) { return ENOSYS; }
  // The kernel is about to store into [addr, addr+len) (a read(2) into a
  // buffer that may lie in the engine's maps).
  virtual void PrepareKernelStores(void* /*addr*/, size_t /*len*/) {}
  virtual Status UnmapViews(void* /*addr*/, size_t /*len*/) { return Status::Ok(); }
  virtual Status SyncViews(void* /*addr*/, size_t /*len*/) { return Status::Ok(); }
  virtual void SyncAllViews() {}
  virtual bool ViewsMeet(const void* /*addr*/, size_t /*len*/) { return false; }
  // A lock call of the process (fcntl record and OFD locks, flock, lockf;
  // on any descriptor, since a lock on one file may guard another's bytes)
  // is a coherence point between processes, as NFS makes it
  // (docs/OVERLAY.md "Several processes"). BeforeLock, just before the
  // kernel's call: what only this process sees reaches the kernel's file,
  // for the lock's next holder. AfterLock, once the kernel set the lock:
  // each file's next call takes what another process may have changed
  // (its size) from the kernel again. Both cheap when there is nothing to
  // do (one load); the defaults do nothing. A BeforeLock that could not
  // publish returns the error: the shim then fails the lock call without
  // making it (an unlock keeps the lock, so no other process goes ahead
  // on a file this process still has bytes of).
  virtual Status BeforeLock() { return Status::Ok(); }
  // Whether BeforeLock could have anything to do now (one load): the shim
  // asks before calls that release locks as a side effect (close,
  // close_range, dup2 and dup3 over an open descriptor), which publish
  // first, as an unlock does.
  virtual bool PublishPending() const { return false; }
  virtual void AfterLock() {}
  // Corrects a kernel stat of a regular file under the root, by path: the
  // content size (and blocks) where the engine's view differs from the
  // kernel's. Leaves `st` alone for files the engine does not hold.
  virtual Status FixStat(const char* path, struct stat* st) = 0;
  // Same, for a descriptor the engine does not own (fstat of an O_PATH fd).
  virtual Status FixStatFd(int fd, struct stat* st) = 0;
};

// Opens the overlay at o.dir: checks the directory, then runs recovery (a
// crashed process's interrupted relinks or commits are finished or
// discarded) before any file is served.
Result<std::unique_ptr<Engine>> OpenOverlay(const Options& o);

// The lowest descriptor number the host (the shim) keeps for its own
// descriptors; 0 without a host. An engine that must keep a descriptor of a
// program's file away from the program's numbers duplicates it up there
// only when the kernel gave it a lower one (one descriptor, not two, for
// every file the shim already moved high).
void SetInternalFdBase(int base);
int InternalFdBase();

}  // namespace mapfs::overlay
