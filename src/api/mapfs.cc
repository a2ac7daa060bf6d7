// C API front: the only symbols with C linkage in libmapfs.so. Turns
// Status values into -1/errno and keeps each mount's descriptor table.
#include "mapfs/mapfs.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sched.h>

#include <sys/stat.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>  // std::shared_lock
#include <string>
#include <vector>

#include "common/process.h"
#include "fs/dir_stream.h"
#include "fs/file_system.h"
#include "map/mapper.h"
#include "medium/pool.h"
#include "medium/pool_format.h"
#include "medium/protection.h"

using mapfs::Status;
using mapfs::fs::FileSystem;
using mapfs::fs::OpenFile;

namespace {

thread_local std::string last_error;

int Fail(const Status& st) {
  last_error = st.message();
  errno = st.code() ? st.code() : EIO;
  return -1;
}
int FailErrno(int code, const char* msg) {
  last_error = msg;
  errno = code;
  return -1;
}

// An open file description: its descriptors (and calls in flight) share
// it, and it closes when the last of them lets go. The fs layer's OpenFile
// lives inside it (FileSystem::OpenInto), so an open allocates once.
struct Description {
  explicit Description(FileSystem* s) : fs(s) {}
  Description(const Description&) = delete;
  Description& operator=(const Description&) = delete;
  // The last reference may go in any call, one that holds no rights too
  // (a ReadOnly call racing a mapfs_close): the close opens them itself.
  ~Description() {
    if (file.ino == 0) return;  // never opened (a failed open)
    mapfs::medium::protection::Inside rights;
    (void)fs->Close(file);
  }
  FileSystem* fs;
  OpenFile file;
};
using DescRef = std::shared_ptr<Description>;

// The lock of a mount's descriptor table: shared by the calls on a
// descriptor (the lookup of its description), exclusive for open, close,
// dup and the directory streams. Every holder keeps it for a few loads and
// stores of the table, never across a call into the file system (a
// description's close runs after the lock is released, except at unmount),
// so a waiter spins, then yields in case the holder lost its core. One
// atomic operation a side: std::shared_mutex (pthread_rwlock) cost ~75
// instructions a lock/unlock pair, twice per open + close.
// Writers go first: a reader enters only while no writer holds or waits.
class TableLock {
 public:
  void lock() {
    for (int round = 0;; round++) {
      uint32_t v = s_.load(std::memory_order_relaxed);
      if (!(v & kWriter) && s_.compare_exchange_weak(v, v | kWriter, std::memory_order_acquire)) break;
      Pause(round);
    }
    for (int round = 0; (s_.load(std::memory_order_acquire) & ~kWriter) != 0; round++) Pause(round);
  }
  void unlock() { s_.fetch_sub(kWriter, std::memory_order_release); }
  void lock_shared() {
    for (int round = 0;; round++) {
      uint32_t v = s_.load(std::memory_order_relaxed);
      if (!(v & kWriter) && s_.compare_exchange_weak(v, v + 1, std::memory_order_acquire)) return;
      Pause(round);
    }
  }
  void unlock_shared() { s_.fetch_sub(1, std::memory_order_release); }

 private:
  static constexpr uint32_t kWriter = 1u << 31;  // below it: the readers inside
  static void Pause(int round) {
    if (round < 64) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else {
      sched_yield();
    }
  }
  std::atomic<uint32_t> s_{0};
};

}  // namespace

struct mapfs_fs {
  std::unique_ptr<FileSystem> fs;
  TableLock mu;  // the descriptor table and the directory streams
  std::vector<DescRef> fds;
  std::set<mapfs_dir*> dirs;  // open streams, closed by mapfs_unmount

  DescRef Get(int fd) {
    std::shared_lock<TableLock> g(mu);
    if (fd < 0 || static_cast<size_t>(fd) >= fds.size()) return nullptr;
    return fds[static_cast<size_t>(fd)];
  }
  int Install(DescRef d, int at_least = 0) {
    std::unique_lock<TableLock> g(mu);
    for (size_t i = static_cast<size_t>(at_least); i < fds.size(); i++)
      if (!fds[i]) {
        fds[i] = std::move(d);
        return static_cast<int>(i);
      }
    if (fds.size() < static_cast<size_t>(at_least)) fds.resize(static_cast<size_t>(at_least));
    fds.push_back(std::move(d));
    return static_cast<int>(fds.size() - 1);
  }
};

// A directory stream. mapfs_unmount closes it (drops its description and
// its file system); the handle itself stays valid until mapfs_closedir.
struct mapfs_dir {
  mapfs_t* fs;  // null once the file system was unmounted
  DescRef d;
  mapfs::fs::DirStream stream;
};

#define MAPFS_GET_FD(fs, fd, var)                                          \
  if ((fs) == nullptr) return FailErrno(EINVAL, "null handle");            \
  DescRef var = (fs)->Get(fd);                                             \
  if (!var) return FailErrno(EBADF, "bad file descriptor")

#define MAPFS_CHECK_FS(fs) \
  if ((fs) == nullptr) return FailErrno(EINVAL, "null handle")
#define MAPFS_CHECK_PATH(p) \
  if ((p) == nullptr) return FailErrno(EFAULT, "null path")

static int Ret(const Status& st) { return st.ok() ? 0 : Fail(st); }

using mapfs::CurrentUmask;

#define MAPFS_CHECK_BUF(buf, n) \
  if ((buf) == nullptr && (n) != 0) return FailErrno(EFAULT, "null buffer")

// Every call that reaches the file system holds the pool's rights
// (medium/protection.h): outside them the pool is write-protected.
#define MAPFS_ENTRY mapfs::medium::protection::Inside mapfs_rights_
// A call whose path stores nothing into the pool's memory (its own, the
// shared segment's, the region's) but this mount's own row of reader
// counters, which is left writable: no switch (protection::ReadOnly). Only
// for calls where that is so on every common path; a rare store opens the
// rights around itself.
#define MAPFS_ENTRY_READONLY mapfs::medium::protection::ReadOnly mapfs_rights_

extern "C" {

const char* mapfs_version(void) { return MAPFS_VERSION_STRING; }
unsigned mapfs_format_version(void) { return mapfs::medium::format::kVersion; }
const char* mapfs_last_error(void) { return last_error.c_str(); }

int mapfs_mkfs(const char* pool, const struct mapfs_mkfs_options* opt) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(pool);
  if (opt == nullptr) return FailErrno(EINVAL, "mkfs needs options (the size)");
  mapfs::medium::CreateOptions co;
  co.size = opt->size;
  if (opt->page_size != 0 && opt->page_size != 4096 && opt->page_size != 2u * 1024 * 1024)
    return FailErrno(EINVAL, "page size must be 4096 or 2 MiB");
  co.page_shift = opt->page_size == 2u * 1024 * 1024 ? 21 : 12;
  if (opt->mode > 2 || opt->mode < -1) return FailErrno(EINVAL, "bad mode");
  co.mode = opt->mode < 0 ? mapfs::medium::format::Mode::kSync : static_cast<mapfs::medium::format::Mode>(opt->mode);
  if (opt->files != nullptr && std::strcmp(opt->files, "contiguous") != 0) {
    auto k = mapfs::map::ParseKind(opt->files);
    if (!k.ok()) return FailErrno(EINVAL, "files must be contiguous, hashfs, cuckoo, extent or radix");
    co.files_kind = static_cast<uint32_t>(*k);
  }
  Status st = mapfs::medium::Pool::Create(pool, co);
  if (!st.ok()) return Fail(st);
  auto fs = FileSystem::Mount(pool);
  if (!fs.ok()) return Fail(fs.status());
  return Ret((*fs)->Unmount());
}

mapfs_t* mapfs_mount(const char* pool, const struct mapfs_options* opt) {
  // The key first: FileSystem::Mount maps (and tags) the pool.
  (void)mapfs::medium::protection::Enable();
  MAPFS_ENTRY;
  if (pool == nullptr) {
    FailErrno(EFAULT, "null pool path");
    return nullptr;
  }
  mapfs::fs::FsOptions fo;
  fo.mode = opt ? opt->mode : -1;
  fo.protect = true;  // every call holds the rights (MAPFS_ENTRY)
  // The ids may have changed since an earlier mount (a forked child that
  // switched users and mounts): read them afresh.
  mapfs::fs::InvalidateProcessCred();
  mapfs::RefreshUmask();
  if (fo.mode > 2 || fo.mode < -1) {
    FailErrno(EINVAL, "bad mode");
    return nullptr;
  }
  if (fo.mode == -1) {
    if (const char* m = std::getenv("MAPFS_MODE")) {
      if (!std::strcmp(m, "posix")) fo.mode = 0;
      else if (!std::strcmp(m, "sync")) fo.mode = 1;
      else if (!std::strcmp(m, "strict")) fo.mode = 2;
      else {
        FailErrno(EINVAL, "MAPFS_MODE must be posix, sync or strict");
        return nullptr;
      }
    }
  }
  auto fs = FileSystem::Mount(pool, fo);
  if (!fs.ok()) {
    Fail(fs.status());
    return nullptr;
  }
  auto* m = new (std::nothrow) mapfs_fs();
  if (m == nullptr) {
    FailErrno(ENOMEM, "out of memory");
    return nullptr;
  }
  m->fs = std::move(*fs);
  return m;
}

int mapfs_unmount(mapfs_t* fs) {
  MAPFS_ENTRY;
  MAPFS_CHECK_FS(fs);
  {
    std::unique_lock<TableLock> g(fs->mu);
    fs->fds.clear();
    for (mapfs_dir* d : fs->dirs) {
      d->d.reset();
      d->fs = nullptr;
    }
    fs->dirs.clear();
  }
  Status st = fs->fs->Unmount();
  delete fs;
  return Ret(st);
}

int mapfs_open(mapfs_t* fs, const char* path, int flags, ...) {
  MAPFS_ENTRY;
  MAPFS_CHECK_FS(fs);
  MAPFS_CHECK_PATH(path);
  mode_t mode = 0;
  if (flags & (O_CREAT | __O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = static_cast<mode_t>(va_arg(ap, int));
    va_end(ap);
  }
  if ((flags & __O_TMPFILE) == __O_TMPFILE) return FailErrno(EOPNOTSUPP, "O_TMPFILE is not supported");
  if (flags & O_CREAT) mode &= ~CurrentUmask();
  auto d = std::make_shared<Description>(fs->fs.get());
  Status st = fs->fs->OpenInto(&d->file, path, flags, mode);
  if (!st.ok()) return Fail(st);
  return fs->Install(std::move(d));
}

int mapfs_creat(mapfs_t* fs, const char* path, mode_t mode) {
  MAPFS_ENTRY;
  return mapfs_open(fs, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

int mapfs_close(mapfs_t* fs, int fd) {
  MAPFS_ENTRY;
  MAPFS_CHECK_FS(fs);
  DescRef d;
  {
    std::unique_lock<TableLock> g(fs->mu);
    if (fd < 0 || static_cast<size_t>(fd) >= fs->fds.size() || !fs->fds[static_cast<size_t>(fd)])
      return FailErrno(EBADF, "bad file descriptor");
    d = std::move(fs->fds[static_cast<size_t>(fd)]);
  }
  return 0;  // the description closes when `d` is its last reference
}

int mapfs_dup(mapfs_t* fs, int fd) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  return fs->Install(d);
}

int mapfs_dup2(mapfs_t* fs, int fd, int newfd) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  if (newfd < 0 || newfd > (1 << 20)) return FailErrno(EBADF, "bad target descriptor");
  if (newfd == fd) return newfd;
  DescRef old;
  std::unique_lock<TableLock> g(fs->mu);
  if (fs->fds.size() <= static_cast<size_t>(newfd)) fs->fds.resize(static_cast<size_t>(newfd) + 1);
  old = std::move(fs->fds[static_cast<size_t>(newfd)]);
  fs->fds[static_cast<size_t>(newfd)] = d;
  return newfd;
}

// Read-only for the pool, like lseek: a reader stores only into its own
// row of reader counters, which this process leaves writable
// (meta/inode_locks.h); every rare store on these paths opens the rights
// itself (SyncMirror, Vm::Sync following a mapping change, PoolLock,
// ReapDead, ~Description). docs/SECURITY.md lists them.
ssize_t mapfs_read(mapfs_t* fs, int fd, void* buf, size_t n) {
  MAPFS_ENTRY_READONLY;
  MAPFS_GET_FD(fs, fd, d);
  MAPFS_CHECK_BUF(buf, n);
  auto r = fs->fs->Read(d->file, buf, n);
  return r.ok() ? static_cast<ssize_t>(*r) : Fail(r.status());
}

ssize_t mapfs_write(mapfs_t* fs, int fd, const void* buf, size_t n) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  MAPFS_CHECK_BUF(buf, n);
  auto r = fs->fs->Write(d->file, buf, n);
  return r.ok() ? static_cast<ssize_t>(*r) : Fail(r.status());
}

ssize_t mapfs_pread(mapfs_t* fs, int fd, void* buf, size_t n, off_t off) {
  MAPFS_ENTRY_READONLY;
  MAPFS_GET_FD(fs, fd, d);
  MAPFS_CHECK_BUF(buf, n);
  if (off < 0) return FailErrno(EINVAL, "negative offset");
  auto r = fs->fs->Read(d->file, buf, n, off);
  return r.ok() ? static_cast<ssize_t>(*r) : Fail(r.status());
}

ssize_t mapfs_pwrite(mapfs_t* fs, int fd, const void* buf, size_t n, off_t off) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  MAPFS_CHECK_BUF(buf, n);
  if (off < 0) return FailErrno(EINVAL, "negative offset");
  auto r = fs->fs->Write(d->file, buf, n, off);
  return r.ok() ? static_cast<ssize_t>(*r) : Fail(r.status());
}

ssize_t mapfs_pwrite_atomic(mapfs_t* fs, int fd, const void* buf, size_t n, off_t off) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  MAPFS_CHECK_BUF(buf, n);
  if (off < 0) return FailErrno(EINVAL, "negative offset");
  auto r = fs->fs->Write(d->file, buf, n, off, static_cast<int>(mapfs::file::Mode::kStrict));
  return r.ok() ? static_cast<ssize_t>(*r) : Fail(r.status());
}

// Read-only: FileSystem::Seek changes the description's offset (process
// memory) and reads the inode's size; it takes no inode lock. The one
// store into the pool a call may reach, the close of a description whose
// last reference it held, opens the rights itself (~Description).
off_t mapfs_lseek(mapfs_t* fs, int fd, off_t off, int whence) {
  MAPFS_ENTRY_READONLY;
  MAPFS_GET_FD(fs, fd, d);
  auto r = fs->fs->Seek(d->file, off, whence);
  return r.ok() ? static_cast<off_t>(*r) : Fail(r.status());
}

int mapfs_fsync(mapfs_t* fs, int fd) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  return Ret(fs->fs->Fsync(d->file));
}
int mapfs_fdatasync(mapfs_t* fs, int fd) { return mapfs_fsync(fs, fd); }

int mapfs_ftruncate(mapfs_t* fs, int fd, off_t size) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  return Ret(fs->fs->Ftruncate(d->file, size));
}

int mapfs_truncate(mapfs_t* fs, const char* path, off_t size) {
  MAPFS_ENTRY;
  MAPFS_CHECK_FS(fs);
  MAPFS_CHECK_PATH(path);
  return Ret(fs->fs->Truncate(path, size));
}

int mapfs_fallocate(mapfs_t* fs, int fd, int mode, off_t off, off_t len) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  return Ret(fs->fs->Fallocate(d->file, mode, off, len));
}

int mapfs_fstat(mapfs_t* fs, int fd, struct stat* st) {
  MAPFS_ENTRY_READONLY;
  MAPFS_GET_FD(fs, fd, d);
  if (st == nullptr) return FailErrno(EFAULT, "null stat buffer");
  return Ret(fs->fs->Fstat(d->file, st));
}

int mapfs_stat(mapfs_t* fs, const char* path, struct stat* st) {
  MAPFS_ENTRY_READONLY;
  MAPFS_CHECK_FS(fs);
  MAPFS_CHECK_PATH(path);
  if (st == nullptr) return FailErrno(EFAULT, "null stat buffer");
  return Ret(fs->fs->Stat(path, st, true));
}

int mapfs_lstat(mapfs_t* fs, const char* path, struct stat* st) {
  MAPFS_ENTRY_READONLY;
  MAPFS_CHECK_FS(fs);
  MAPFS_CHECK_PATH(path);
  if (st == nullptr) return FailErrno(EFAULT, "null stat buffer");
  return Ret(fs->fs->Stat(path, st, false));
}

int mapfs_statvfs(mapfs_t* fs, struct statvfs* st) {
  MAPFS_ENTRY;
  MAPFS_CHECK_FS(fs);
  if (st == nullptr) return FailErrno(EFAULT, "null statvfs buffer");
  return Ret(fs->fs->Statfs(st));
}

#define MAPFS_PATH_CALL(expr) \
  MAPFS_CHECK_FS(fs);         \
  return Ret(expr)

int mapfs_unlink(mapfs_t* fs, const char* path) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(path);
  MAPFS_PATH_CALL(fs->fs->Unlink(path));
}
int mapfs_rename(mapfs_t* fs, const char* from, const char* to) { return mapfs_rename2(fs, from, to, 0); }
int mapfs_rename2(mapfs_t* fs, const char* from, const char* to, unsigned flags) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(from);
  MAPFS_CHECK_PATH(to);
  MAPFS_PATH_CALL(fs->fs->Rename(from, to, flags));
}
int mapfs_link(mapfs_t* fs, const char* from, const char* to) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(from);
  MAPFS_CHECK_PATH(to);
  MAPFS_PATH_CALL(fs->fs->Link(from, to));
}
int mapfs_symlink(mapfs_t* fs, const char* target, const char* path) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(target);
  MAPFS_CHECK_PATH(path);
  MAPFS_PATH_CALL(fs->fs->Symlink(target, path));
}
ssize_t mapfs_readlink(mapfs_t* fs, const char* path, char* buf, size_t size) {
  MAPFS_ENTRY;
  MAPFS_CHECK_FS(fs);
  MAPFS_CHECK_PATH(path);
  if (size == 0) return FailErrno(EINVAL, "zero-sized buffer");
  MAPFS_CHECK_BUF(buf, size);
  auto r = fs->fs->Readlink(path);
  if (!r.ok()) return Fail(r.status());
  size_t n = std::min(size, r->size());
  std::memcpy(buf, r->data(), n);
  return static_cast<ssize_t>(n);
}
int mapfs_mkdir(mapfs_t* fs, const char* path, mode_t mode) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(path);
  MAPFS_PATH_CALL(fs->fs->Mkdir(path, mode & ~CurrentUmask()));
}
int mapfs_rmdir(mapfs_t* fs, const char* path) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(path);
  MAPFS_PATH_CALL(fs->fs->Rmdir(path));
}
int mapfs_chmod(mapfs_t* fs, const char* path, mode_t mode) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(path);
  MAPFS_PATH_CALL(fs->fs->Chmod(path, mode));
}
int mapfs_fchmod(mapfs_t* fs, int fd, mode_t mode) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  return Ret(fs->fs->Fchmod(d->file, mode));
}
int mapfs_chown(mapfs_t* fs, const char* path, uid_t uid, gid_t gid) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(path);
  MAPFS_PATH_CALL(fs->fs->Chown(path, uid, gid, true));
}
int mapfs_lchown(mapfs_t* fs, const char* path, uid_t uid, gid_t gid) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(path);
  MAPFS_PATH_CALL(fs->fs->Chown(path, uid, gid, false));
}
int mapfs_fchown(mapfs_t* fs, int fd, uid_t uid, gid_t gid) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  return Ret(fs->fs->Fchown(d->file, uid, gid));
}
int mapfs_access(mapfs_t* fs, const char* path, int mode, int flags) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(path);
  MAPFS_PATH_CALL(fs->fs->Access(path, mode, flags));
}
void mapfs_refresh_credentials(void) {
  mapfs::fs::InvalidateProcessCred();
  mapfs::RefreshUmask();
}
int mapfs_utimens(mapfs_t* fs, const char* path, const struct timespec ts[2]) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(path);
  MAPFS_PATH_CALL(fs->fs->Utimens(path, ts, true));
}
int mapfs_lutimens(mapfs_t* fs, const char* path, const struct timespec ts[2]) {
  MAPFS_ENTRY;
  MAPFS_CHECK_PATH(path);
  MAPFS_PATH_CALL(fs->fs->Utimens(path, ts, false));
}
int mapfs_futimens(mapfs_t* fs, int fd, const struct timespec ts[2]) {
  MAPFS_ENTRY;
  MAPFS_GET_FD(fs, fd, d);
  return Ret(fs->fs->Futimens(d->file, ts));
}

mapfs_dir_t* mapfs_opendir(mapfs_t* fs, const char* path) {
  MAPFS_ENTRY;
  if (fs == nullptr || path == nullptr) {
    FailErrno(EINVAL, "null argument");
    return nullptr;
  }
  auto desc = std::make_shared<Description>(fs->fs.get());
  Status st = fs->fs->OpenInto(&desc->file, path, O_RDONLY | O_DIRECTORY, 0);
  if (!st.ok()) {
    Fail(st);
    return nullptr;
  }
  auto* d = new (std::nothrow) mapfs_dir();
  if (d == nullptr) {
    FailErrno(ENOMEM, "out of memory");
    return nullptr;
  }
  d->fs = fs;
  d->d = std::move(desc);
  std::unique_lock<TableLock> g(fs->mu);
  fs->dirs.insert(d);
  return d;
}

struct dirent* mapfs_readdir(mapfs_dir_t* d) {
  MAPFS_ENTRY;
  if (d == nullptr) {
    FailErrno(EBADF, "null directory stream");
    return nullptr;
  }
  if (d->fs == nullptr) {
    FailErrno(EBADF, "directory stream closed by mapfs_unmount");
    return nullptr;
  }
  Status st;
  auto* e = d->stream.Next(*d->fs->fs, d->d->file, &st);
  if (!st.ok()) Fail(st);
  return reinterpret_cast<struct dirent*>(const_cast<struct dirent64*>(e));
}

int mapfs_closedir(mapfs_dir_t* d) {
  MAPFS_ENTRY;
  if (d == nullptr) return FailErrno(EBADF, "null directory stream");
  if (d->fs != nullptr) {
    std::unique_lock<TableLock> g(d->fs->mu);
    d->fs->dirs.erase(d);
  }
  delete d;
  return 0;
}

long mapfs_telldir(mapfs_dir_t* d) { return d ? static_cast<long>(d->stream.Tell()) : -1; }

// Like telldir, the stream's own memory only: no scope.
void mapfs_seekdir(mapfs_dir_t* d, long pos) {
  if (d == nullptr || pos < 0) return;
  d->stream.Seek(static_cast<uint64_t>(pos));
}

void mapfs_rewinddir(mapfs_dir_t* d) { mapfs_seekdir(d, 0); }

void* mapfs_mmap(mapfs_t* fs, int fd, size_t* capacity) {
  MAPFS_ENTRY;
  if (fs == nullptr) {
    FailErrno(EINVAL, "null handle");
    return nullptr;
  }
  DescRef d = fs->Get(fd);
  if (!d) {
    FailErrno(EBADF, "bad file descriptor");
    return nullptr;
  }
  uint64_t cap = 0;
  auto p = fs->fs->Map(d->file, &cap);
  if (!p.ok()) {
    Fail(p.status());
    return nullptr;
  }
  if (capacity) *capacity = cap;
  return *p;
}

}  // extern "C"
