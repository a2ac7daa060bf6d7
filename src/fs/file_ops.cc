// Open files: open/close and the data calls of FileSystem.
#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/units.h"
#include "fs/fs_internal.h"
#include "map/mapper.h"
#include "medium/persist.h"
#include "medium/protection.h"
#include "space/partitions.h"
#include "vm/vm.h"

namespace mapfs::fs {

using meta::InodeLock;
using meta::LockSet;
using meta::MetaTx;
using meta::format::Inode;

file::Mode FileSystem::ModeFor(int flags) const {
  if (flags & kOpenModeStrict) return file::Mode::kStrict;
  if (flags & kOpenModeSync) return file::Mode::kSync;
  if (flags & kOpenModePosix) return file::Mode::kPosix;
  // O_SYNC / O_DSYNC ask for at least sync.
  if ((flags & O_DSYNC) && default_mode_ == file::Mode::kPosix) return file::Mode::kSync;
  return default_mode_;
}

Status FileSystem::CheckWritable(const OpenFile& f) const {
  int acc = f.flags & O_ACCMODE;
  if (acc != O_WRONLY && acc != O_RDWR) return Status::Error(EBADF, "not open for writing");
  return Status::Ok();
}

// may_open: the access the flags ask for (O_TRUNC writes; execution
// instead of reading for a program), then O_NOATIME for the owner only.
Status FileSystem::MayOpen(const Cred& cr, const meta::format::Inode* in, int flags) {
  uint64_t mode = medium::Load64(&in->mode);
  int acc = flags & O_ACCMODE;
  int mask = (flags & kOpenExec) ? kMayExec : acc == O_RDONLY ? kMayRead : acc == O_WRONLY ? kMayWrite : kMayRead | kMayWrite;
  if (flags & O_TRUNC) mask |= kMayWrite;
  if (flags & O_PATH) mask = 0;  // a handle to walk from or to fstat: no access to the file
  if ((flags & kOpenExec) && !S_ISREG(mode)) return Status::Error(EACCES, "not a regular file");
  Status perm = InodePermission(cr, in, mask);
  if (perm.ok() && (flags & O_NOATIME)) perm = OwnerOrRoot(cr, UidOf(in), "O_NOATIME");
  return perm;
}

Status FileSystem::OpenExisting(const Cred& cr, const Walk& w, int flags, OpenFile* f) {
  // Pin the inode (open count) while its name is locked: an unlink needs
  // the parent's write lock, so it either ran before (we see no entry) or
  // runs after (and sees the count). A walk with pin_last did that already
  // where it found the name (no second lookup of it).
  if (!w.pinned) {
    InodeLock l(locks_.get(), w.parent, false);
    Inode* p = Ino(w.parent);
    if (p == nullptr || p->mode == 0 || p->nlink == 0) return Status::Error(ENOENT, "directory was removed");
    if (w.name != "." && w.name != "..") {
      if (!StillNames(p->part, w, w.name, w.ino)) return Status::Error(EAGAIN, "changed");
    } else if (w.name == ".." && medium::Load64(&p->parent) != w.ino) {
      return Status::Error(EAGAIN, "changed");
    }
    shared_->open_count[w.ino].fetch_add(1);
  }
  // From here `f` holds the pin: every failure closes it (Close drops the
  // count and leaves f->ino 0).
  f->ino = w.ino;
  f->flags = flags;
  f->mode = ModeFor(flags);
  f->is_dir = false;
  Inode* in = Ino(w.ino);
  uint64_t mode = in->mode;
  auto fail = [&](Status s) {
    (void)Close(*f);
    return s;
  };
  int acc = flags & O_ACCMODE;
  if (S_ISLNK(mode)) return fail(Status::Error(ELOOP, "is a symbolic link"));
  if ((flags & O_DIRECTORY) && !S_ISDIR(mode)) return fail(Status::Error(ENOTDIR, "not a directory"));
  if (S_ISDIR(mode)) {
    if (acc != O_RDONLY || (flags & O_TRUNC)) return fail(Status::Error(EISDIR, "is a directory"));
    f->is_dir = true;
  }
  Status perm = MayOpen(cr, in, flags);
  if (!perm.ok()) return fail(perm);
  // FIFOs, sockets and devices are only recorded (Mknod): nothing here can
  // serve them (after the permission check, as a kernel's open would be).
  if (!S_ISREG(mode) && !S_ISDIR(mode)) return fail(Status::Error(ENXIO, "a special file (FIFO, socket or device)"));
  if ((flags & O_TRUNC) && acc != O_RDONLY && S_ISREG(mode)) {
    Status st = Ftruncate(*f, 0);
    if (!st.ok()) return fail(st);
  }
  return Status::Ok();
}

Result<std::shared_ptr<OpenFile>> FileSystem::Open(std::string_view path, int flags, mode_t mode, uint64_t at,
                                                   const Owner* owner) {
  auto f = std::make_shared<OpenFile>();
  Status st = OpenInto(f.get(), path, flags, mode, at, owner);
  if (!st.ok()) return st;
  return f;
}

Status FileSystem::OpenInto(OpenFile* f, std::string_view path, int flags, mode_t mode, uint64_t at,
                            const Owner* owner) {
  if ((flags & O_ACCMODE) == O_ACCMODE) return Status::Error(EINVAL, "bad access mode");
  // Linux >= 6.4 refuses this combination outright.
  if ((flags & O_CREAT) && (flags & O_DIRECTORY)) return Status::Error(EINVAL, "O_CREAT with O_DIRECTORY");
  const Cred& cr = CurrentCred();
  bool excl = (flags & O_CREAT) && (flags & O_EXCL);
  bool follow = !excl && !(flags & O_NOFOLLOW);
  if ((flags & O_CREAT) && !path.empty() && path.back() == '/') {
    // Linux judges the trailing slash before the last component: EISDIR
    // whatever "name/" is, once its directory resolves ("." and ".." and
    // the root go the usual way).
    auto w = Resolve(cr, at, path, false, 0, true);
    if (!w.ok()) return w.status();
    if (!IsDot(w->name)) return Status::Error(EISDIR, "is a directory");
  }
  for (;;) {
    // Without O_CREAT the walk pins what it finds (every path below hands
    // a pinned walk to OpenExisting, which owns the count from there).
    Walk w;
    // Without O_CREAT the name is read only to recheck a find the walk
    // could not pin (OpenExisting); a create needs it.
    if (!(flags & O_CREAT)) w.name_use = Walk::NameUse::kUnlessPinned;
    // O_EXCL: the name must not exist, so CreateNode looks it up under the
    // parent's write lock in the descent that inserts it. (Plain O_CREAT
    // usually opens an existing file: it keeps the read-locked lookup.)
    w.defer_last = excl;
    MAPFS_RETURN_IF_ERROR(ResolveTo(&w, cr, at, path, follow, 0, false, !(flags & O_CREAT)));
    if (w.ino == 0) {
      if (!(flags & O_CREAT)) return Status::Error(ENOENT, "no such file or directory");
      if (w.trailing_slash) return Status::Error(EISDIR, "is a directory");
      uint64_t ino = 0;
      Status st = CreateNode(w, S_IFREG | (mode & 07777), nullptr, &ino, true, owner);
      if (st.code() == EAGAIN) continue;
      if (!st.ok()) return st;
      f->ino = ino;
      f->flags = flags;
      f->mode = ModeFor(flags);
      f->is_dir = false;
      return Status::Ok();
    }
    if (excl) return Status::Error(EEXIST, "file exists");
    // O_CREAT never opens a directory, and never creates through "name/".
    if ((flags & O_CREAT) && (w.trailing_slash || w.type == DT_DIR)) return Status::Error(EISDIR, "is a directory");
    if ((flags & O_NOFOLLOW) && w.type == DT_LNK) return Status::Error(ELOOP, "is a symbolic link");
    Status st = OpenExisting(cr, w, flags, f);
    if (st.code() == EAGAIN) continue;
    return st;
  }
}

Status FileSystem::Close(OpenFile& f) {
  if (f.ino == 0) return Status::Ok();
  uint64_t ino = f.ino;
  f.ino = 0;
  const bool persist = f.mode == file::Mode::kPosix && (f.flags & O_ACCMODE) != O_RDONLY && !f.is_dir;
  if (!persist) {
    // The common close (nothing to make durable): under the read lock the
    // inode's mode and nlink cannot change (they change under its write
    // lock), so while it has links this is not the last close of an
    // unlinked file, and dropping the count is all there is to do. An
    // unlink that follows, under the write lock, sees the count dropped.
    InodeLock l(locks_.get(), ino, false);
    const Inode* in = Ino(ino);
    if (in != nullptr && in->mode != 0 && in->nlink != 0) {
      shared_->open_count[ino].fetch_sub(1);
      return Status::Ok();
    }
  }
  InodeLock l(locks_.get(), ino, true);
  uint32_t left = shared_->open_count[ino].fetch_sub(1) - 1;
  Inode* in = Ino(ino);
  // Posix mode promises durability at fsync *or close*: writes left their
  // data and size unfenced (found by the crash-state checker).
  if (persist && in->mode != 0)
    data_->Sync(in, f.mapped.load() || Mapped(ino), ino);
  if (left == 0 && in->mode != 0 && in->nlink == 0) {
    // Last close of an unlinked file.
    return KillInode(ino);
  }
  return Status::Ok();
}

Result<size_t> FileSystem::Read(OpenFile& f, void* buf, size_t n, int64_t off) {
  if ((f.flags & O_ACCMODE) == O_WRONLY) return Status::Error(EBADF, "not open for reading");
  if (f.is_dir) return Status::Error(EISDIR, "is a directory");
  if (off < -1) return Status::Error(EINVAL, "negative offset");
  std::unique_lock<std::mutex> pos;
  if (off < 0) pos = std::unique_lock<std::mutex>(f.pos_mu);
  uint64_t at = off < 0 ? f.offset : static_cast<uint64_t>(off);
  // Stores through maps of a mirrored file, in the range read, first.
  if (n > 0) MAPFS_RETURN_IF_ERROR(SyncMirror(f.ino, at, at + n < at ? UINT64_MAX : at + n));
  InodeLock l(locks_.get(), f.ino, false);
  mount_->vm().Sync();
  auto r = data_->Read(Ino(f.ino), buf, n, at, f.ino);
  if (r.ok() && off < 0) f.offset = at + *r;
  return r;
}

Result<size_t> FileSystem::Write(OpenFile& f, const void* buf, size_t n, int64_t off, int mode) {
  MAPFS_RETURN_IF_ERROR(CheckWritable(f));
  if (off < -1) return Status::Error(EINVAL, "negative offset");
  std::unique_lock<std::mutex> pos;
  if (off < 0) pos = std::unique_lock<std::mutex>(f.pos_mu);
  InodeLock l(locks_.get(), f.ino, true);
  mount_->vm().Sync();
  Inode* in = Ino(f.ino);
  if (in->mode & (S_ISUID | S_ISGID)) DropSetIdOnWrite(f.ino);
  // As Linux: O_APPEND appends even for pwrite.
  uint64_t at = (f.flags & O_APPEND) ? in->size : off < 0 ? f.offset : static_cast<uint64_t>(off);
  uint64_t old_size = in->size;
  auto r = data_->Write(in, inodes_->VoffOf(f.ino), buf, n, at, mode >= 0 ? static_cast<file::Mode>(mode) : f.mode,
                        Mapped(f.ino), f.ino);
  if (r.ok() && *r > 0) {
    if (auto m = MirrorOf(f.ino)) {
      if (at > old_size) m->Zeroed(old_size, at);  // stores past the old end never reached the file
      m->Written(buf, at, *r);
    }
  }
  if (r.ok() && off < 0) f.offset = at + *r;
  if (r.ok() && *r > 0) changes_->Data(f.ino, at, *r);
  return r;
}

void FileSystem::DropSetIdOnWrite(uint64_t ino) {
  Inode* in = Ino(ino);
  if (in == nullptr) return;  // an open file's inode always exists
  uint64_t drop = SetIdBitsToDrop(CurrentCred(), in->mode, GidOf(in), false);
  if (drop == 0) return;
  // One word in its own transaction: a failure leaves the bits (as a
  // crash before it would); the write itself goes on.
  MetaTx tx(&mount_->pool(), &mount_->vm());
  if (tx.Store64(inodes_->VoffOf(ino) + offsetof(Inode, mode), in->mode & ~drop).ok()) (void)tx.Commit();
}

Result<uint64_t> FileSystem::Seek(OpenFile& f, int64_t off, int whence) {
  std::lock_guard<std::mutex> pos(f.pos_mu);
  int64_t base;
  switch (whence) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = static_cast<int64_t>(f.offset); break;
    case SEEK_END: base = static_cast<int64_t>(medium::Load64(&Ino(f.ino)->size)); break;
    case SEEK_DATA:
    case SEEK_HOLE: {
      // Every byte counts as data; the only hole is at the end.
      int64_t size = static_cast<int64_t>(medium::Load64(&Ino(f.ino)->size));
      if (off < 0 || off >= size) return Status::Error(ENXIO, "offset past the end");
      f.offset = static_cast<uint64_t>(whence == SEEK_DATA ? off : size);
      return f.offset;
    }
    default: return Status::Error(EINVAL, "bad whence");
  }
  if ((off > 0 && base > INT64_MAX - off) || base + off < 0) return Status::Error(EINVAL, "resulting offset invalid");
  f.offset = static_cast<uint64_t>(base + off);
  return f.offset;
}

Status FileSystem::Fsync(OpenFile& f) {
  MAPFS_RETURN_IF_ERROR(SyncMirror(f.ino, 0, UINT64_MAX));
  InodeLock l(locks_.get(), f.ino, false);
  data_->Sync(Ino(f.ino), f.mapped.load() || Mapped(f.ino), f.ino);
  return Status::Ok();
}

Status FileSystem::Ftruncate(OpenFile& f, int64_t size) {
  if (size < 0) return Status::Error(EINVAL, "negative size");
  // As Linux: a directory or a read-only descriptor is EINVAL, not EISDIR/EBADF.
  if (f.is_dir) return Status::Error(EINVAL, "not a regular file");
  MAPFS_RETURN_IF_ERROR(CheckWritable(f).ok() ? Status::Ok() : Status::Error(EINVAL, "not open for writing"));
  InodeLock l(locks_.get(), f.ino, true);
  mount_->vm().Sync();
  Inode* in = Ino(f.ino);
  if (in->mode & (S_ISUID | S_ISGID)) DropSetIdOnWrite(f.ino);
  uint64_t old_size = in->size;
  MAPFS_RETURN_IF_ERROR(
      data_->Truncate(in, inodes_->VoffOf(f.ino), static_cast<uint64_t>(size), f.mode, Mapped(f.ino), f.ino));
  if (auto m = MirrorOf(f.ino)) m->Zeroed(std::min(old_size, in->size), std::max(old_size, in->size));
  int64_t now = file::NowNs();
  medium::Store64(reinterpret_cast<uint64_t*>(&in->mtime_ns), static_cast<uint64_t>(now));
  medium::Store64(reinterpret_cast<uint64_t*>(&in->ctime_ns), static_cast<uint64_t>(now));
  medium::Persist(in, 64);
  changes_->Data(f.ino, static_cast<uint64_t>(size), 0);
  return Status::Ok();
}

Status FileSystem::Truncate(std::string_view path, int64_t size, uint64_t at) {
  if (size < 0) return Status::Error(EINVAL, "negative size");
  // The inode is pinned (open count) under its parent's lock, as an open
  // pins it, so an unlink and a create that reuses the inode number cannot
  // slip in between the lookup and the truncation.
  for (;;) {
    const Cred& cr = CurrentCred();
    auto w = Resolve(cr, at, path, true);
    if (!w.ok()) return w.status();
    if (w->ino == 0) return Status::Error(ENOENT, "no such file or directory");
    if (w->type == DT_DIR) return Status::Error(EISDIR, "is a directory");
    OpenFile f;
    Status st = OpenExisting(cr, *w, O_WRONLY, &f);
    if (st.code() == EAGAIN) continue;
    // Special files cannot be opened here; truncate(2) calls them EINVAL.
    if (st.code() == ENXIO) return Status::Error(EINVAL, "not a regular file");
    if (!st.ok()) return st;
    st = Ftruncate(f, size);
    Status cl = Close(f);
    return st.ok() ? cl : st;
  }
}

Status FileSystem::Fallocate(OpenFile& f, int mode, int64_t off, int64_t len) {
  if (off < 0 || len <= 0) return Status::Error(EINVAL, "bad range");
  MAPFS_RETURN_IF_ERROR(CheckWritable(f));  // before EISDIR, as Linux orders them
  if (f.is_dir) return Status::Error(EISDIR, "is a directory");
  InodeLock l(locks_.get(), f.ino, true);
  mount_->vm().Sync();
  if (Ino(f.ino)->mode & (S_ISUID | S_ISGID)) DropSetIdOnWrite(f.ino);
  uint64_t old_size = Ino(f.ino)->size;
  Status st = data_->Fallocate(Ino(f.ino), inodes_->VoffOf(f.ino), mode, static_cast<uint64_t>(off),
                               static_cast<uint64_t>(len), f.mode, Mapped(f.ino), f.ino);
  std::shared_ptr<MapMirror> m = st.ok() ? MirrorOf(f.ino) : nullptr;
  if (m) {
    uint64_t new_size = Ino(f.ino)->size;
    if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))
      m->Zeroed(static_cast<uint64_t>(off), static_cast<uint64_t>(off) + static_cast<uint64_t>(len));
    if (new_size > old_size) m->Zeroed(old_size, new_size);
  }
  if (st.ok()) changes_->Data(f.ino, static_cast<uint64_t>(off), static_cast<uint64_t>(len));
  return st;
}

namespace {
void ToTimespec(int64_t ns, struct timespec* ts) {
  ts->tv_sec = ns / 1000000000;
  ts->tv_nsec = ns % 1000000000;
}
}  // namespace

Status FileSystem::FillStat(uint64_t ino, struct stat* st) {
  Inode* in = Ino(ino);
  if (in == nullptr || in->mode == 0) return Status::Error(ENOENT, "file was removed");
  std::memset(st, 0, sizeof *st);
  st->st_dev = dev_;
  st->st_ino = ino;
  st->st_mode = static_cast<mode_t>(in->mode);
  st->st_nlink = in->nlink;
  st->st_uid = static_cast<uid_t>(in->uid_gid & 0xffffffffu);
  st->st_gid = static_cast<gid_t>(in->uid_gid >> 32);
  st->st_rdev = in->rdev;
  st->st_blksize = kPageSize;
  if (S_ISDIR(in->mode)) {
    auto n = cib_->Count(in->part);
    st->st_size = static_cast<off_t>(((n.ok() ? *n : 0) + 2) * 32);
    st->st_blocks = 8;
  } else {
    st->st_size = static_cast<off_t>(in->size);
    st->st_blocks = S_ISREG(in->mode) ? static_cast<blkcnt_t>(data_->AllocatedBytes(in, ino) / 512) : 0;
  }
  ToTimespec(in->atime_ns, &st->st_atim);
  ToTimespec(in->mtime_ns, &st->st_mtim);
  ToTimespec(in->ctime_ns, &st->st_ctim);
  return Status::Ok();
}

Status FileSystem::Fstat(OpenFile& f, struct stat* st) {
  InodeLock l(locks_.get(), f.ino, false);
  return FillStat(f.ino, st);
}

Status FileSystem::StatIno(uint64_t ino, struct stat* st, uint64_t* generation) {
  if (ino == 0 || !inodes_->Valid(ino)) return Status::Error(ENOENT, "no such file or directory");
  InodeLock l(locks_.get(), ino, false);
  MAPFS_RETURN_IF_ERROR(FillStat(ino, st));
  if (generation != nullptr) *generation = medium::Load64(&Ino(ino)->generation);
  return Status::Ok();
}

Status FileSystem::Stat(std::string_view path, struct stat* st, bool follow, uint64_t at) {
  const Cred& cr = CurrentCred();
  for (;;) {
    Walk w;
    w.name_use = Walk::NameUse::kNever;
    MAPFS_RETURN_IF_ERROR(ResolveTo(&w, cr, at, path, follow));
    if (w.ino == 0) return Status::Error(ENOENT, "no such file or directory");
    InodeLock l(locks_.get(), w.ino, false);
    Status s = FillStat(w.ino, st);
    if (s.code() == ENOENT) continue;  // removed (and maybe reused) meanwhile
    return s;
  }
}

Result<char*> FileSystem::Map(OpenFile& f, uint64_t* cap) {
  if (f.is_dir) return Status::Error(EISDIR, "is a directory");
  // Under protection keys the region is write-protected outside mapfs
  // calls: the application gets a view of its own (key 0), as for a
  // block-mapped file, which stays the file's until it dies.
  if (data_->block_mapped() || (mount_->pool().protect() && medium::protection::Key() >= 0)) return MapBlocks(f, cap);
  InodeLock l(locks_.get(), f.ino, true);
  mount_->vm().Sync();
  Inode* in = Ino(f.ino);
  uint64_t size = in->size;
  if (size > 0 && data_->Capacity(in) < size)
    MAPFS_RETURN_IF_ERROR(
        data_->Fallocate(in, inodes_->VoffOf(f.ino), FALLOC_FL_KEEP_SIZE, 0, size, f.mode, Mapped(f.ino)));
  f.mapped = true;
  shared_->mapped[f.ino].store(1);
  *cap = data_->Capacity(in);
  char* p = data_->Pointer(in);
  if (p == nullptr) return Status::Error(ENODATA, "empty file has no data to map");
  return p;
}

// A block-mapped file has no contiguous bytes in the region: its view is
// built from its blocks, each run mapped from the pool file in place, for
// [0, size rounded up to a page). MapPool inserts every block of that range
// and marks the file mapped, so the view stays the file's until it dies.
Result<char*> FileSystem::MapBlocks(OpenFile& f, uint64_t* cap) {
  InodeLock l(locks_.get(), f.ino, true);
  Inode* in = Ino(f.ino);
  if (in == nullptr || in->mode == 0) return Status::Error(ESTALE, "file was removed");
  uint64_t len = AlignUp(in->size, kPageSize), gen = in->generation;
  if (len == 0) return Status::Error(ENODATA, "empty file has no data to map");
  std::lock_guard<std::mutex> g(block_views_mu_);
  for (const BlockView& v : block_views_[f.ino]) {
    if (v.generation == gen && v.len >= len) {
      f.mapped = true;
      *cap = v.len;
      return v.addr;
    }
  }
  f.mapped = true;
  shared_->mapped[f.ino].store(1);
  std::vector<file::PoolRun> runs;
  MAPFS_RETURN_IF_ERROR(data_->MapPool(in, inodes_->VoffOf(f.ino), 0, len, &runs, f.ino));
  void* base = ::mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return Status::FromErrno("cannot reserve a view of the file");
  char* at = static_cast<char*>(base);
  for (const file::PoolRun& r : runs) {
    void* m = ::mmap(at, r.len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, mount_->pool().fd(),
                     static_cast<off_t>(r.pool_off));
    if (m == MAP_FAILED) {
      Status st = Status::FromErrno("cannot map the file's blocks");
      ::munmap(base, len);
      return st;
    }
    at += r.len;
  }
  block_views_[f.ino].push_back({gen, static_cast<char*>(base), len});
  *cap = len;
  return static_cast<char*>(base);
}

Status FileSystem::MapPool(OpenFile& f, uint64_t off, uint64_t len, std::vector<file::PoolRun>* runs) {
  if (f.is_dir) return Status::Error(EISDIR, "is a directory");
  InodeLock l(locks_.get(), f.ino, true);
  mount_->vm().Sync();
  Inode* in = Ino(f.ino);
  if (in == nullptr || in->mode == 0) return Status::Error(ESTALE, "file was removed");
  // Marked before its pages are chosen, under the inode's lock that every
  // change of its data takes: no process moves them from here on.
  f.mapped = true;
  shared_->mapped[f.ino].store(1);
  return data_->MapPool(in, inodes_->VoffOf(f.ino), off, len, runs, f.ino);
}

std::shared_ptr<MapMirror> FileSystem::MirrorOf(uint64_t ino) {
  if (n_mirrors_.load(std::memory_order_acquire) == 0) return nullptr;  // no lock when none exists
  std::lock_guard<std::mutex> g(mirrors_mu_);
  auto it = mirrors_.find(ino);
  return it == mirrors_.end() ? nullptr : it->second;
}

bool FileSystem::Mirrored(uint64_t ino) { return MirrorOf(ino) != nullptr; }

Result<int> FileSystem::MirrorFd(OpenFile& f, uint64_t end) {
  if (f.is_dir) return Status::Error(EISDIR, "is a directory");
  InodeLock l(locks_.get(), f.ino, true);
  mount_->vm().Sync();
  Inode* in = Ino(f.ino);
  if (in == nullptr || in->mode == 0) return Status::Error(ESTALE, "file was removed");
  std::shared_ptr<MapMirror> m;
  {
    std::lock_guard<std::mutex> g(mirrors_mu_);
    std::shared_ptr<MapMirror>& slot = mirrors_[f.ino];
    if (!slot) {
      auto c = MapMirror::Create();
      if (!c.ok()) {
        mirrors_.erase(f.ino);
        return c.status();
      }
      slot = std::move(*c);
    }
    m = slot;
    n_mirrors_.store(mirrors_.size(), std::memory_order_release);
  }
  MAPFS_RETURN_IF_ERROR(m->Cover(end, [&](char* dst, uint64_t n, uint64_t off) -> Status {
    std::memset(dst, 0, n);  // past the end of the file
    for (uint64_t done = 0; done < n;) {
      auto r = data_->Read(in, dst + done, n - done, off + done, f.ino);
      if (!r.ok()) return r.status();
      if (*r == 0) break;
      done += *r;
    }
    return Status::Ok();
  }));
  return m->fd();
}

Status FileSystem::SyncMirror(uint64_t ino, uint64_t lo, uint64_t hi) {
  std::shared_ptr<MapMirror> m = MirrorOf(ino);
  if (!m) return Status::Ok();
  // A write-back (a mirrored map of the file exists) is rare on a read
  // path, which may run with the rights closed (protection::ReadOnly).
  medium::protection::Inside rights;
  InodeLock l(locks_.get(), ino, true);
  mount_->vm().Sync();
  Inode* in = Ino(ino);
  if (in == nullptr || in->mode == 0) return Status::Ok();
  return m->WriteBack(lo, hi, medium::Load64(&in->size), [&](const char* src, uint64_t n, uint64_t off) -> Status {
    auto r = data_->Write(in, inodes_->VoffOf(ino), src, n, off, default_mode_, Mapped(ino), ino);
    if (!r.ok()) return r.status();
    changes_->Data(ino, off, n);
    return Status::Ok();
  });
}

void FileSystem::SyncMirrors() {
  std::vector<uint64_t> inos;
  {
    std::lock_guard<std::mutex> g(mirrors_mu_);
    for (auto& [ino, m] : mirrors_) inos.push_back(ino);
  }
  for (uint64_t ino : inos) (void)SyncMirror(ino, 0, UINT64_MAX);
}

void FileSystem::DropMirror(uint64_t ino) {
  (void)SyncMirror(ino, 0, UINT64_MAX);
  std::shared_ptr<MapMirror> m;  // destroyed outside the lock
  std::lock_guard<std::mutex> g(mirrors_mu_);
  auto it = mirrors_.find(ino);
  if (it == mirrors_.end()) return;
  m = std::move(it->second);
  mirrors_.erase(it);
  n_mirrors_.store(mirrors_.size(), std::memory_order_release);
}

bool FileSystem::Mapped(uint64_t ino) const { return shared_->mapped[ino].load(std::memory_order_relaxed) != 0; }

Status FileSystem::ReadDir(OpenFile& d, uint64_t cookie, const std::function<bool(const DirEntryOut&)>& fn) {
  if (!d.is_dir) return Status::Error(ENOTDIR, "not a directory");
  InodeLock l(locks_.get(), d.ino, false);
  // The directory's blocks are read through this process's region mappings,
  // which another process may have made stale since this descriptor was
  // opened (as for a path walk: Resolve).
  mount_->vm().Sync();
  Inode* in = Ino(d.ino);
  if (in->mode == 0 || in->nlink == 0) return Status::Ok();  // removed: empty
  if (cookie == 0 && !fn({1, d.ino, DT_DIR, "."})) return Status::Ok();
  if (cookie <= 1 && !fn({2, medium::Load64(&in->parent), DT_DIR, ".."})) return Status::Ok();
  return cib_->List(in->part, std::max<uint64_t>(cookie, 2), [&](uint64_t c, std::string_view name, dir::Entry e) {
    return fn({c, e.ino, e.type, std::string(name)});
  });
}

Status FileSystem::Statfs(struct statvfs* st) {
  std::memset(st, 0, sizeof *st);
  auto vs = mount_->vm().Stats();
  st->f_bsize = kPageSize;
  st->f_frsize = kPageSize;
  st->f_blocks = vs.total_pages;
  st->f_bfree = st->f_bavail = vs.total_pages - vs.used_pages;
  if (data_->block_mapped()) {
    // File data lives only in the mapping area: its blocks are the file
    // system's blocks (the pages before it hold inodes and directories, as
    // a kernel file system's inode tables are not counted as free space).
    map::Usage u = data_->mapper()->usage();
    st->f_blocks = u.blocks;
    st->f_bfree = st->f_bavail = u.blocks - std::min(u.blocks, u.used_blocks + u.node_blocks);
  }
  st->f_files = meta::format::kMaxInodes;
  st->f_ffree = st->f_favail = meta::format::kMaxInodes - meta::format::SegBase(static_cast<int>(inodes_->segments()));
  st->f_fsid = dev_;
  st->f_namemax = dir::kMaxName;
  return Status::Ok();
}

}  // namespace mapfs::fs
