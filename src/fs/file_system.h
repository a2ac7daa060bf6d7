// FileSystem: the namespace and POSIX semantics over the core layers — what
// every front (C API, shim, FUSE, CLI) calls. One per mounted pool per
// process; every method is safe to call from many threads, and many
// processes may have the same pool mounted at once.
//
// Locking (meta/inode_locks.h): path resolution read-locks one directory at
// a time; an operation then locks everything it changes (parent
// directories, the inodes involved) in stripe order, looks its names up
// again under those locks and retries if they changed. Data calls take the
// file's lock (read for read, write for write/truncate), so readers run in
// parallel and different files never contend.
//
// Atomicity: every namespace operation is one redo transaction (MetaTx).
// Allocation happens before it (a crash leaves a leak that recovery
// collects), freeing after it (a crash leaves an orphan or a leak, ditto).
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/status.h"
#include "fs/change_ring.h"
#include "dir/cib.h"
#include "fs/cred.h"
#include "fs/map_mirror.h"
#include "fs/name_cache.h"
#include "file/file_data.h"
#include "meta/inode_locks.h"
#include "meta/inode_table.h"
#include "mount/mount.h"

namespace mapfs::fs {

// Per-open consistency-mode flags (bits Linux does not use for open(2)).
constexpr int kOpenModePosix = 0x10000000;
// Open for execution (the shim's execve reads the program): checks execute
// permission instead of read, as execve(2); the description reads.
constexpr int kOpenExec = 0x08000000;
constexpr int kOpenModeSync = 0x20000000;
constexpr int kOpenModeStrict = 0x40000000;
constexpr int kOpenModeMask = kOpenModePosix | kOpenModeSync | kOpenModeStrict;

struct FsOptions {
  vm::VmOptions vm;
  int mode = -1;  // default consistency mode (file::Mode); -1 = the pool's
  // Where the pool's root sits in the caller's namespace (the shim's
  // MAPFS_MOUNT, "/mapfs"), which gives a symlink's absolute target its
  // meaning: under the prefix it names a pool path, anything else is
  // outside the pool and a walk that meets it stops with kLeavesPool (as
  // does ".." at the pool's root). Empty (the C API, the CLI, FUSE): the
  // pool is the caller's whole namespace, as under chroot — an absolute
  // target is walked from the pool's root.
  std::string prefix;
  // The mount of a new image that takes over descriptions an exec handed
  // off (medium::OpenOptions::take_handoff).
  bool take_handoff = false;
  // The pool's memory carries the process's protection key (medium::OpenOptions::protect).
  bool protect = false;
};

// The Status code of a walk that leaves the pool (FsOptions::prefix): not
// an errno (above every errno value). The thread's LinkChain says where
// the path continues; a front must never hand this code to its caller.
constexpr int kLeavesPool = 0x10000;

// The symlinks of one path followed across namespaces (the shim's: pool,
// kernel, pool ...) count together against Linux's limit of 40. While a
// LinkChain lives on a thread, its walks start `links` links in, and a walk
// that leaves the pool records where the rest of the path goes. One at a
// time per thread (an inner one, of a wrapper calling another, only
// shares the outer one's count); the front that resolves the rest
// keeps counting and starts the next chain with its total.
class LinkChain {
 public:
  explicit LinkChain(int links = 0);
  ~LinkChain();
  LinkChain(const LinkChain&) = delete;
  LinkChain& operator=(const LinkChain&) = delete;
  // Starts over at `links` (a path that came back into the pool).
  void Restart(int links);
  // After a kLeavesPool: true once, with the absolute path in the caller's
  // namespace where the walk continues (a symlink's target plus the rest
  // of the path, its trailing slash kept) and the links followed so far.
  bool TakeExit(std::string* path, int* links);
};
// Symlinks Linux follows in one path before ELOOP (MAXSYMLINKS).
constexpr int kMaxSymlinks = 40;

// An open file description: shared by duplicated descriptors (offset too).
struct OpenFile {
  uint64_t ino = 0;
  int flags = 0;
  file::Mode mode = file::Mode::kSync;
  bool is_dir = false;
  std::mutex pos_mu;  // serialises offset updates of read/write/lseek
  uint64_t offset = 0;
  std::atomic<bool> mapped{false};  // a pointer to the data was handed out
};

// The owner of a new inode when the caller is not the one creating it (the
// FUSE daemon creates on behalf of the requesting user). Null: the calling
// process's effective uid and gid.
struct Owner {
  uid_t uid;
  gid_t gid;
};

struct DirEntryOut {
  uint64_t cookie;  // position after this entry
  uint64_t ino;
  uint8_t type;
  std::string name;
};

struct FsCheckReport {
  std::vector<std::string> problems;
  std::vector<std::string> repairs;
  uint64_t inodes = 0, directories = 0, files = 0, symlinks = 0, entries = 0;
};

class FileSystem {
 public:
  static Result<std::unique_ptr<FileSystem>> Mount(const std::string& pool, const FsOptions& opt = {});
  ~FileSystem();
  Status Unmount();
  void Abandon();  // tests: vanish as if the process died

  mapfs::Mount& mount() { return *mount_; }
  file::Mode default_mode() const { return default_mode_; }
  file::FileData& data() { return *data_; }
  bool recovered() const { return recovered_; }

  // Paths are absolute or relative to the directory `at` (root by default).
  Result<std::shared_ptr<OpenFile>> Open(std::string_view path, int flags, mode_t mode, uint64_t at = 0,
                                         const Owner* owner = nullptr);
  // Open into a description the caller made (fresh: ino 0), so that a
  // front can keep it inside its own object (one allocation per open, the
  // C API's). On success `f` is open and must be Closed; on failure it is
  // left closed (ino 0).
  Status OpenInto(OpenFile* f, std::string_view path, int flags, mode_t mode, uint64_t at = 0,
                  const Owner* owner = nullptr);
  Status Close(OpenFile& f);  // the last descriptor of `f` went away

  // Across fork and exec (the LD_PRELOAD shim; fs/inherit.cc).
  //
  // In the child of fork(), first thing (a pthread_atfork child handler;
  // only the calling thread exists): this copy becomes a mount of its own —
  // a new open file description of the pool with its own locks, a new
  // mount slot and token — and leaves every claim of the parent's mount
  // (redo slots, lock holds) to the parent. Mappings are kept. On error the
  // copy is abandoned (unmounted here only) and must not be used.
  Status AfterFork();
  // One more process holds the open description `f` (the child calls it for
  // each one it inherits): the inode's open count across processes grows
  // by one, so each process closes its own copy. (The OpenFile objects are
  // the caller's: a pos_mu another thread of the parent held at the fork
  // stays locked in the child's copy.)
  void RetainOpen(const OpenFile& f);
  // An open description of inode `ino` inherited across execve, opened with
  // `flags` (no O_TRUNC/O_CREAT effect). counted: the open count already
  // includes this description (the old image's count is taken over).
  // ESTALE when the inode is no longer live.
  Result<std::shared_ptr<OpenFile>> Adopt(uint64_t ino, int flags, bool counted);
  // open(2) of inode `ino` held by number (the FUSE mount: the kernel
  // walked the path): the checks of open(2) for the current caller
  // (flags may carry kOpenExec for a program's image; O_TRUNC is only
  // checked, the caller truncates), then as Adopt(ino, flags, false).
  Result<std::shared_ptr<OpenFile>> OpenIno(uint64_t ino, int flags);

  Result<size_t> Read(OpenFile& f, void* buf, size_t n, int64_t off = -1);
  // mode >= 0 overrides the open's consistency mode for this call.
  Result<size_t> Write(OpenFile& f, const void* buf, size_t n, int64_t off = -1, int mode = -1);
  Result<uint64_t> Seek(OpenFile& f, int64_t off, int whence);
  Status Fsync(OpenFile& f);
  Status Ftruncate(OpenFile& f, int64_t size);
  Status Fallocate(OpenFile& f, int mode, int64_t off, int64_t len);
  Status Fstat(OpenFile& f, struct stat* st);
  Status Fchmod(OpenFile& f, mode_t mode);
  Status Fchown(OpenFile& f, uid_t uid, gid_t gid);
  Status Futimens(OpenFile& f, const struct timespec ts[2]);
  // Pointer to the file's bytes (zero-copy access); the file's capacity in *cap.
  // The pointer is this process's view of the file's current partition: it
  // goes stale when the file grows past its capacity.
  Result<char*> Map(OpenFile& f, uint64_t* cap);
  // For a shared memory map of the pool file (mount().vm().pool()->fd(),
  // mapped with its map_flags()): backs [off, off+len) of the file (page
  // aligned; the size does not change) and returns the pool runs behind it
  // in file order. From then on the file's data keeps those pool pages,
  // whatever any process does to the file (file::FileData, `mapped`), so
  // such maps stay coherent with every call and every other map.
  Status MapPool(OpenFile& f, uint64_t off, uint64_t len, std::vector<file::PoolRun>* runs);
  // Shared maps of fragmented files (fs/map_mirror.h: when MapPool's runs
  // are too many to map one by one): the memfd of this process's mirror
  // of the file, created if needed and holding the file's bytes [0, end)
  // (a page multiple). Map it MAP_SHARED at the file offset. From then on
  // this process's calls on the file keep the mirror coherent.
  Result<int> MirrorFd(OpenFile& f, uint64_t end);
  bool Mirrored(uint64_t ino);
  // Stores through the mirror of `ino` in file bytes [lo, hi) reach the file.
  Status SyncMirror(uint64_t ino, uint64_t lo, uint64_t hi);
  // Every mirror's stores reach the file (before an exec; at unmount).
  void SyncMirrors();
  // No map of the file through its mirror is left: its stores are written
  // back and the mirror is forgotten.
  void DropMirror(uint64_t ino);
  // Entries after `cookie` (0 = start; "." and ".." come first); fn returns
  // false to stop.
  Status ReadDir(OpenFile& d, uint64_t cookie, const std::function<bool(const DirEntryOut&)>& fn);

  Status Stat(std::string_view path, struct stat* st, bool follow = true, uint64_t at = 0);
  Status Mkdir(std::string_view path, mode_t mode, uint64_t at = 0, const Owner* owner = nullptr);
  // mknod(2): a FIFO, socket, character or block device node (the type in
  // `mode`, `dev` kept as st_rdev for devices), or an empty regular file
  // (S_IFREG or no type). The pool only records special nodes: Open of one
  // fails with ENXIO (the kernel serves FIFOs and devices on the FUSE mount).
  Status Mknod(std::string_view path, mode_t mode, dev_t dev, uint64_t at = 0, const Owner* owner = nullptr);
  Status Rmdir(std::string_view path, uint64_t at = 0);
  Status Unlink(std::string_view path, uint64_t at = 0);
  // flags: RENAME_NOREPLACE, RENAME_EXCHANGE.
  Status Rename(std::string_view from, std::string_view to, unsigned flags = 0, uint64_t from_at = 0,
                uint64_t to_at = 0);
  Status Link(std::string_view from, std::string_view to, bool follow = false, uint64_t from_at = 0,
              uint64_t to_at = 0);
  Status Symlink(std::string_view target, std::string_view path, uint64_t at = 0, const Owner* owner = nullptr);
  Result<std::string> Readlink(std::string_view path, uint64_t at = 0);
  // access(2) / faccessat(2): `mode` is F_OK or R_OK|W_OK|X_OK; flags
  // AT_EACCESS (check with the effective ids, else the real ones, for the
  // path walk too) and AT_SYMLINK_NOFOLLOW.
  Status Access(std::string_view path, int mode, int flags = 0, uint64_t at = 0);
  Status AccessIno(uint64_t ino, int mode);
  Status Chmod(std::string_view path, mode_t mode, bool follow = true, uint64_t at = 0);
  Status Chown(std::string_view path, uid_t uid, gid_t gid, bool follow = true, uint64_t at = 0);
  // ts may be null (now); UTIME_NOW / UTIME_OMIT honoured.
  Status Utimens(std::string_view path, const struct timespec ts[2], bool follow = true, uint64_t at = 0);
  Status Truncate(std::string_view path, int64_t size, uint64_t at = 0);
  Status Statfs(struct statvfs* st);
  // The inode a path names (following symlinks unless !follow).
  Result<uint64_t> Lookup(std::string_view path, bool follow = true, uint64_t at = 0);

  // Calls on an inode held by number (the FUSE mount's node ids: the kernel
  // resolves names itself, one component at a time with LookupIn-like calls
  // `Stat(name, st, false, parent)`, and then names the inode). ENOENT when
  // the inode is free (removed meanwhile, maybe reused: callers that keep
  // numbers must hear of removals, see the change ring).
  // *generation (if asked): the slot's generation, different for each
  // inode that ever used the number (FUSE node ids are number + generation).
  Status StatIno(uint64_t ino, struct stat* st, uint64_t* generation = nullptr);
  Result<std::string> ReadlinkIno(uint64_t ino);
  Status ChmodIno(uint64_t ino, mode_t mode);
  // The set-ID bits a write or truncate by the caller drops, cleared at
  // his request (the FUSE mount: the kernel's drop comes as a chmod to
  // `mode`): EPERM unless `mode` only clears such bits of a regular file,
  // EACCES unless the caller may write it.
  Status DropSetIdIno(uint64_t ino, mode_t mode);
  Status ChownIno(uint64_t ino, uid_t uid, gid_t gid);
  Status UtimensIno(uint64_t ino, const struct timespec ts[2]);
  // link(2) of inode `ino` (not a directory, still linked) as `to`.
  Status LinkIno(uint64_t ino, std::string_view to, uint64_t to_at = 0);

  // Follows the changes every process (this one's other threads excepted)
  // commits to the pool from now on (fs/change_ring.h): the FUSE daemon's
  // way to keep its kernel's caches coherent.
  std::unique_ptr<ChangeFollower> FollowChanges();
  // Some process mapped inode `ino`'s data (its stores then reach the pool
  // without a call, so no change is published for them).
  bool MappedAnywhere(uint64_t ino) const { return ino < meta::format::kMaxInodes && Mapped(ino); }

  // fsck of the file system layers (the pool's own checks are separate).
  FsCheckReport Check();
  // Repairs what Check found and can be fixed safely.
  FsCheckReport Repair();

 private:
  FileSystem() = default;
  struct Walk {
    uint64_t parent = 0;  // directory holding `name`
    std::string name;     // last component ("." / ".." when the path ends so)
    uint64_t ino = 0;     // what it names, 0 = nothing yet
    uint8_t type = 0;     // DT_* of ino
    dir::EntryLoc loc;    // where `name` was found in `parent` (a hint, see Cib::StillNames)
    bool trailing_slash = false;
    bool too_long = false;  // keep_last only: the last name exceeds NAME_MAX (ino = 0)
    // pin_last only: the walk took an open count on `ino` under `parent`'s
    // read lock, right where it found the name (as OpenExisting would after
    // a recheck); the caller owns that count and drops it with Close.
    bool pinned = false;
    // Set by the caller of ResolveTo: a call that creates the last name
    // unless it exists (open O_CREAT|O_EXCL, mkdir, mknod, symlink) looks
    // it up itself under the parent's write lock, in the same descent that
    // finds where to insert it (CreateNode). The walk then stops at the
    // parent: `deferred` set, ino 0 (nothing known yet). Only for a plain
    // name without a trailing slash ("." and ".." are looked up as ever).
    bool defer_last = false;
    bool deferred = false;
    // Set by the caller of ResolveTo: whether it reads `name` (the last
    // component) afterwards. Copying it cost a stat ~75 instructions; a
    // stat never reads it, an open without O_CREAT only when the walk did
    // not pin (OpenExisting's recheck). Other fields are always set.
    enum class NameUse : uint8_t { kAlways, kUnlessPinned, kNever };
    NameUse name_use = NameUse::kAlways;
    // The error for a last component that names nothing.
    Status Missing() const {
      return too_long ? Status::Error(ENAMETOOLONG, "name too long") : Status::Error(ENOENT, "no such file or directory");
    }
  };
  // Walks `path` from `at` (0 or an absolute path: the root). follow_last:
  // resolve a symlink in the last component. keep_last: as the calls that
  // act on a name (mkdir, rmdir, unlink, rename, link targets), never follow
  // the last component and leave a trailing slash to the caller to judge.
  // With a prefix, a walk that leaves the pool returns kLeavesPool (see
  // LinkChain). depth 0: the caller's own path (its length limited), the
  // links followed before it (LinkChain) counted.
  //
  // Every directory the walk passes through (the last component's parent
  // included) must grant `c` search permission (EACCES otherwise).
  // pin_last: pin what the last component names when it is not a symlink
  // and the path has no trailing slash (Walk::pinned says when it did).
  Result<Walk> Resolve(const Cred& c, uint64_t at, std::string_view path, bool follow_last, int depth = 0,
                       bool keep_last = false, bool pin_last = false);
  // Resolve into `out` (a fresh Walk): the hot callers (stat, open) keep
  // the Walk in their frame instead of moving it through a Result.
  Status ResolveTo(Walk* out, const Cred& c, uint64_t at, std::string_view path, bool follow_last, int depth = 0,
                   bool keep_last = false, bool pin_last = false);
  // Records the exit of a walk leaving the pool; returns kLeavesPool.
  Status Leave(std::string path, int links, std::string_view link);
  // pin: take an open count on what `name` names, under the directory's
  // lock, unless it is a symlink; *pinned says whether it did.
  Result<dir::Entry> LookupIn(uint64_t dir, std::string_view name, dir::EntryLoc* loc = nullptr,
                              bool* pinned = nullptr);
  // Under `parent`'s lock: `name` still names `ino` there (a Walk's
  // finding, checked at its location first, else by a lookup).
  bool StillNames(uint64_t parent_root, const Walk& w, std::string_view name, uint64_t ino);
  Status LockAndRecheck(meta::LockSet* ls, const Walk& w, uint64_t ino, dir::EntryLoc* found = nullptr);
  Status CreateNode(const Walk& w, mode_t mode, const std::string* link_target, uint64_t* out_ino, bool pin,
                    const Owner* owner, uint64_t rdev = 0);
  bool IsAncestor(uint64_t anc, uint64_t d);
  Status FillStat(uint64_t ino, struct stat* st);
  // Opens what the walk found, after the checks of open(2) for `c`.
  // On success `f` (fresh) holds the open; on failure it is closed.
  Status OpenExisting(const Cred& c, const Walk& w, int flags, OpenFile* f);
  // The checks of open(2) on an inode for `c` (EACCES / EPERM).
  Status MayOpen(const Cred& c, const meta::format::Inode* in, int flags);
  // may_delete: `c` may remove `victim` from directory `dir` (write and
  // search on it, and the sticky rule). EACCES / EPERM.
  Status MayDelete(const Cred& c, uint64_t dir, uint64_t victim);
  // may_linkat with protected hardlinks. EPERM.
  Status MayLink(const Cred& c, const meta::format::Inode* in);
  // may_create: write and search on the directory. EACCES.
  Status MayCreate(const Cred& c, uint64_t dir);
  // Drops set-ID bits a write or truncate by `c` must clear (in place,
  // persisted; the caller holds the inode's write lock).
  void DropSetIdOnWrite(uint64_t ino);
  meta::format::Inode* Ino(uint64_t ino) { return inodes_->Get(ino); }
  uint64_t DirRoot(uint64_t ino);
  Status FillInode(uint64_t ino, mode_t mode, uint64_t parent, const Owner* owner, uint64_t rdev, meta::MetaTx* tx);
  Status TouchDir(uint64_t dir, int64_t now, int nlink_delta, meta::MetaTx* tx);
  // Drops one link of `ino` in `tx`; sets *free_after when the inode dies
  // with the transaction (no links, not open).
  Status DropLink(uint64_t ino, int64_t now, meta::MetaTx* tx, bool* free_after);
  // Frees an inode DropLink marked free_after: one whose mode the committed
  // transaction cleared, or a block-mapped regular file (killed here: its
  // blocks, then its mode).
  void FreeInode(uint64_t ino, uint64_t part, mode_t mode, uint64_t flags);
  // Frees the partition and slot of an inode whose mode is cleared.
  void FreeInodeSlot(uint64_t ino, uint64_t part, mode_t mode, uint64_t flags);
  // Clears an orphan (nlink 0) and frees it.
  Status KillInode(uint64_t ino);
  Status SetAttr(uint64_t ino, const std::function<Status(meta::format::Inode*, meta::MetaTx*, uint64_t)>& fn);
  Status Recover();
  Status CollectLeaks(uint64_t* freed);
  void CollectReferenced(std::vector<uint64_t>* refs);
  file::Mode ModeFor(int flags) const;
  Status CheckWritable(const OpenFile& f) const;
  // The inode is mapped in some process (or was: the mark stays until it is freed).
  bool Mapped(uint64_t ino) const;

  std::unique_ptr<mapfs::Mount> mount_;
  std::unique_ptr<meta::InodeTable> inodes_;
  std::unique_ptr<meta::InodeLocks> locks_;
  std::unique_ptr<dir::Cib> cib_;
  std::unique_ptr<file::FileData> data_;
  // Block-mapped pools: the views Map() built of files' blocks, by inode
  // number and generation (valid while that inode lives: a mapped file's
  // blocks never move); unmapped at Unmount.
  struct BlockView {
    uint64_t generation;
    char* addr;
    uint64_t len;
  };
  std::mutex block_views_mu_;
  std::map<uint64_t, std::vector<BlockView>> block_views_;
  Result<char*> MapBlocks(OpenFile& f, uint64_t* cap);
  // The mirrors of this process (MirrorFd), by inode number; n_mirrors_
  // lets MirrorOf (every data call's check) skip the lock while none exists.
  std::mutex mirrors_mu_;
  std::map<uint64_t, std::shared_ptr<MapMirror>> mirrors_;
  std::atomic<size_t> n_mirrors_{0};
  std::shared_ptr<MapMirror> MirrorOf(uint64_t ino);
  meta::FsShared* shared_ = nullptr;
  // Directories the walks passed through (name_cache.h); exact against
  // every process's removals through shared_->names_removed.
  NameCache names_;
  // Call under the directory's write lock, before the transaction that
  // removes or replaces one of its entries commits (name_cache.h).
  void NoteNameRemoved() { shared_->names_removed.fetch_add(1, std::memory_order_seq_cst); }
  std::unique_ptr<ChangePublisher> changes_;
  file::Mode default_mode_ = file::Mode::kSync;
  bool recovered_ = false;
  uint64_t dev_ = 0;
  std::string prefix_;  // FsOptions::prefix, normalised ("" or "/a/b")
};

}  // namespace mapfs::fs
