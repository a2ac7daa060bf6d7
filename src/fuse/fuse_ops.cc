// libfuse3 high-level operations over fs::FileSystem (see fuse_ops.h).
//
// Paths come from libfuse, already resolved by the kernel component by
// component, so no call here follows a symlink in the last component.
// Handles (fi->fh) own one core OpenFile each; release closes it.
#include "fuse/fuse_ops.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <unordered_set>

namespace mapfs::fuse {

struct Handle {
  std::shared_ptr<fs::OpenFile> f;
};

struct MountState {
  std::unique_ptr<fs::FileSystem> fs;
  std::mutex mu;  // handles
  std::unordered_set<Handle*> handles;

  uint64_t Add(std::shared_ptr<fs::OpenFile> f) {
    auto* h = new Handle{std::move(f)};
    std::lock_guard<std::mutex> g(mu);
    handles.insert(h);
    return reinterpret_cast<uint64_t>(h);
  }
  Status Drop(uint64_t fh) {
    auto* h = reinterpret_cast<Handle*>(fh);
    {
      std::lock_guard<std::mutex> g(mu);
      handles.erase(h);
    }
    Status st = fs->Close(*h->f);
    delete h;
    return st;
  }
};

MountState* NewMountState(std::unique_ptr<fs::FileSystem> fs) {
  auto* s = new MountState;
  s->fs = std::move(fs);
  return s;
}

Status FinishMountState(MountState* s) {
  std::vector<Handle*> left;
  {
    std::lock_guard<std::mutex> g(s->mu);
    left.assign(s->handles.begin(), s->handles.end());
    s->handles.clear();
  }
  for (Handle* h : left) {
    (void)s->fs->Close(*h->f);
    delete h;
  }
  Status st = s->fs->Unmount();
  delete s;
  return st;
}

namespace {

MountState* State() { return static_cast<MountState*>(fuse_get_context()->private_data); }
fs::FileSystem& Fs() { return *State()->fs; }
fs::OpenFile& File(const struct fuse_file_info* fi) { return *reinterpret_cast<Handle*>(fi->fh)->f; }

int Err(const Status& st) {
  if (st.ok()) return 0;
  return -(st.code() ? st.code() : EIO);
}

// The core makes new inodes owned by the daemon's credentials; a request
// from another user gets its own.
int OwnNew(const char* path) {
  const struct fuse_context* c = fuse_get_context();
  if (c->uid == geteuid() && c->gid == getegid()) return 0;
  return Err(Fs().Chown(path, c->uid, c->gid, false));
}

// Flags for the core's Open: creation is the create op's, and O_APPEND is
// the kernel's business (it passes the offset of every write, also for the
// pages of a shared mapping), so the core writes where it is told.
int CoreFlags(int flags) { return flags & ~(O_APPEND | O_CREAT | O_EXCL | O_NOCTTY); }

void* Init(struct fuse_conn_info* conn, struct fuse_config* cfg) {
  (void)conn;
  cfg->use_ino = 1;       // st_ino is the core's inode number
  cfg->readdir_ino = 1;
  cfg->nullpath_ok = 1;   // calls on open handles use the handle
  cfg->hard_remove = 1;   // the core keeps unlinked open files itself
  // No kernel caching of names and attributes, and no page cache kept
  // across opens: another process (the shim, the C API) may change the pool
  // at any time (README "The FUSE mount").
  cfg->entry_timeout = 0;
  cfg->negative_timeout = 0;
  cfg->attr_timeout = 0;
  cfg->kernel_cache = 0;
  cfg->auto_cache = 0;
  cfg->direct_io = 0;
  return fuse_get_context()->private_data;
}

int Getattr(const char* path, struct stat* st, struct fuse_file_info* fi) {
  if (fi != nullptr) return Err(Fs().Fstat(File(fi), st));
  return Err(Fs().Stat(path, st, false));
}

int Readlink(const char* path, char* buf, size_t size) {
  auto r = Fs().Readlink(path);
  if (!r.ok()) return Err(r.status());
  if (size == 0) return -EINVAL;
  size_t n = std::min(size - 1, r->size());
  std::memcpy(buf, r->data(), n);
  buf[n] = '\0';
  return 0;
}

int Mknod(const char* path, mode_t mode, dev_t) {
  if (!S_ISREG(mode)) return -EPERM;  // the core has no device, FIFO or socket nodes
  auto r = Fs().Open(path, O_CREAT | O_EXCL | O_WRONLY, mode & 07777);
  if (!r.ok()) return Err(r.status());
  (void)Fs().Close(**r);
  return OwnNew(path);
}

int Mkdir(const char* path, mode_t mode) {
  int e = Err(Fs().Mkdir(path, mode));
  return e != 0 ? e : OwnNew(path);
}

int Unlink(const char* path) { return Err(Fs().Unlink(path)); }
int Rmdir(const char* path) { return Err(Fs().Rmdir(path)); }

int Symlink(const char* target, const char* path) {
  int e = Err(Fs().Symlink(target, path));
  return e != 0 ? e : OwnNew(path);
}

int Rename(const char* from, const char* to, unsigned flags) { return Err(Fs().Rename(from, to, flags)); }
int Link(const char* from, const char* to) { return Err(Fs().Link(from, to, false)); }

int Chmod(const char* path, mode_t mode, struct fuse_file_info* fi) {
  if (fi != nullptr) return Err(Fs().Fchmod(File(fi), mode));
  return Err(Fs().Chmod(path, mode, false));
}

int Chown(const char* path, uid_t uid, gid_t gid, struct fuse_file_info* fi) {
  if (fi != nullptr) return Err(Fs().Fchown(File(fi), uid, gid));
  return Err(Fs().Chown(path, uid, gid, false));
}

int Truncate(const char* path, off_t size, struct fuse_file_info* fi) {
  if (fi != nullptr) return Err(Fs().Ftruncate(File(fi), size));
  return Err(Fs().Truncate(path, size));
}

int Utimens(const char* path, const struct timespec ts[2], struct fuse_file_info* fi) {
  if (fi != nullptr) return Err(Fs().Futimens(File(fi), ts));
  return Err(Fs().Utimens(path, ts, false));
}

int Open(const char* path, struct fuse_file_info* fi) {
  auto r = Fs().Open(path, CoreFlags(fi->flags), 0);
  if (!r.ok()) return Err(r.status());
  fi->fh = State()->Add(std::move(*r));
  fi->keep_cache = 0;
  fi->direct_io = 0;
  return 0;
}

int Create(const char* path, mode_t mode, struct fuse_file_info* fi) {
  auto r = Fs().Open(path, CoreFlags(fi->flags) | O_CREAT | (fi->flags & O_EXCL), mode & 07777);
  if (!r.ok()) return Err(r.status());
  fi->fh = State()->Add(std::move(*r));
  return OwnNew(path);
}

int Read(const char*, char* buf, size_t size, off_t off, struct fuse_file_info* fi) {
  auto r = Fs().Read(File(fi), buf, size, off);
  return r.ok() ? static_cast<int>(*r) : Err(r.status());
}

int Write(const char*, const char* buf, size_t size, off_t off, struct fuse_file_info* fi) {
  auto r = Fs().Write(File(fi), buf, size, off);
  return r.ok() ? static_cast<int>(*r) : Err(r.status());
}

int Statfs(const char*, struct statvfs* st) { return Err(Fs().Statfs(st)); }

int Flush(const char*, struct fuse_file_info*) { return 0; }  // durability is fsync's and release's

int Release(const char*, struct fuse_file_info* fi) { return Err(State()->Drop(fi->fh)); }

int Fsync(const char*, int, struct fuse_file_info* fi) { return Err(Fs().Fsync(File(fi))); }

int Opendir(const char* path, struct fuse_file_info* fi) {
  auto r = Fs().Open(path, O_RDONLY | O_DIRECTORY, 0);
  if (!r.ok()) return Err(r.status());
  fi->fh = State()->Add(std::move(*r));
  return 0;
}

// Offsets are the core's stable cookies (the position after each entry).
int Readdir(const char*, void* buf, fuse_fill_dir_t filler, off_t off, struct fuse_file_info* fi,
            enum fuse_readdir_flags) {
  Status st = Fs().ReadDir(File(fi), static_cast<uint64_t>(off), [&](const fs::DirEntryOut& e) {
    struct stat s{};
    s.st_ino = e.ino;
    s.st_mode = static_cast<mode_t>(e.type) << 12;
    return filler(buf, e.name.c_str(), &s, static_cast<off_t>(e.cookie), static_cast<fuse_fill_dir_flags>(0)) == 0;
  });
  return Err(st);
}

int Releasedir(const char*, struct fuse_file_info* fi) { return Err(State()->Drop(fi->fh)); }

int Fsyncdir(const char*, int, struct fuse_file_info* fi) { return Err(Fs().Fsync(File(fi))); }

int Fallocate(const char*, int mode, off_t off, off_t len, struct fuse_file_info* fi) {
  return Err(Fs().Fallocate(File(fi), mode, off, len));
}

struct fuse_operations MakeOps() {
  struct fuse_operations o{};
  o.init = Init;
  o.getattr = Getattr;
  o.readlink = Readlink;
  o.mknod = Mknod;
  o.mkdir = Mkdir;
  o.unlink = Unlink;
  o.rmdir = Rmdir;
  o.symlink = Symlink;
  o.rename = Rename;
  o.link = Link;
  o.chmod = Chmod;
  o.chown = Chown;
  o.truncate = Truncate;
  o.utimens = Utimens;
  o.open = Open;
  o.create = Create;
  o.read = Read;
  o.write = Write;
  o.statfs = Statfs;
  o.flush = Flush;
  o.release = Release;
  o.fsync = Fsync;
  o.opendir = Opendir;
  o.readdir = Readdir;
  o.releasedir = Releasedir;
  o.fsyncdir = Fsyncdir;
  o.fallocate = Fallocate;
  // No lock/flock: the kernel keeps POSIX and flock locks of the mount
  // locally (README "The FUSE mount").
  return o;
}

}  // namespace

const struct fuse_operations& Operations() {
  static const struct fuse_operations ops = MakeOps();
  return ops;
}

}  // namespace mapfs::fuse
