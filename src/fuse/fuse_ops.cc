// libfuse3 high-level operations over fs::FileSystem (see fuse_ops.h).
//
// Paths come from libfuse, already resolved by the kernel component by
// component, so no call here follows a symlink in the last component.
// Handles (fi->fh) own one core OpenFile each; release closes it.
//
// Unlinked open files. libfuse's path API cannot name a file that is open
// but has no name any more, and the kernel sends fstat of it without a
// handle, so a plain unlink would make fstat of such a file fail (ESTALE).
// So hard_remove is off: to unlink (or rename over) a name that is open on
// the mount, libfuse renames it to a hidden name ".fuse_hidden<id>" and
// unlinks that name after the last release. Rename recognises that move and
// unlinks the file in the core at once (so its link count is 0 and it is in
// no directory, as on Linux) while it keeps an open description of it under
// the hidden name; the calls that come by path (stat, chmod, chown,
// truncate, utimens) use that description, and the unlink of the hidden name
// closes it. The hidden names exist only in the daemon, never in the pool.
#include "fuse/fuse_ops.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mapfs::fuse {

struct Handle {
  std::shared_ptr<fs::OpenFile> f;
};

struct MountState {
  std::unique_ptr<fs::FileSystem> fs;
  std::mutex mu;  // handles, hidden
  std::unordered_set<Handle*> handles;
  // Hidden name -> an open description of the unlinked file (see above).
  std::unordered_map<std::string, std::shared_ptr<fs::OpenFile>> hidden;

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
  for (auto& [name, f] : s->hidden) (void)s->fs->Close(*f);
  s->hidden.clear();
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

constexpr std::string_view kHiddenPrefix = ".fuse_hidden";  // libfuse's hide_node()

bool IsHiddenName(std::string_view path) {
  size_t slash = path.rfind('/');
  return path.substr(slash == std::string_view::npos ? 0 : slash + 1).starts_with(kHiddenPrefix);
}

// The unlinked open file libfuse calls `path`, or null.
std::shared_ptr<fs::OpenFile> Hidden(const char* path) {
  if (path == nullptr || !IsHiddenName(path)) return nullptr;
  MountState* s = State();
  std::lock_guard<std::mutex> g(s->mu);
  auto it = s->hidden.find(path);
  return it == s->hidden.end() ? nullptr : it->second;
}

// libfuse hides `from` (open on the mount) under the new name `to`: unlink
// it in the core, keeping an open description under `to`.
int Hide(const char* from, const char* to) {
  // O_RDWR: truncate by path may come for it (the kernel checked access).
  auto f = Fs().Open(from, O_RDWR | O_NOFOLLOW, 0);
  if (!f.ok()) return Err(f.status());
  Status st = Fs().Unlink(from);
  if (!st.ok()) {
    (void)Fs().Close(**f);
    return Err(st);
  }
  MountState* s = State();
  std::lock_guard<std::mutex> g(s->mu);
  s->hidden[to] = std::move(*f);
  return 0;
}

// The last release of a hidden file: libfuse unlinks its hidden name.
bool Unhide(const char* path) {
  if (!IsHiddenName(path)) return false;
  MountState* s = State();
  std::shared_ptr<fs::OpenFile> f;
  {
    std::lock_guard<std::mutex> g(s->mu);
    auto it = s->hidden.find(path);
    if (it == s->hidden.end()) return false;
    f = std::move(it->second);
    s->hidden.erase(it);
  }
  (void)Fs().Close(*f);
  return true;
}

// The requesting process's supplementary groups (libfuse reads them from
// /proc: only asked for when a check needs them, fs/cred.h).
void LoadRequestGroups(void*, std::vector<gid_t>* out) {
  out->resize(32);
  for (int tries = 0; tries < 4; tries++) {
    int n = fuse_getgroups(static_cast<int>(out->size()), out->data());
    if (n < 0) break;
    if (static_cast<size_t>(n) <= out->size()) {
      out->resize(static_cast<size_t>(n));
      return;
    }
    out->resize(static_cast<size_t>(n));
  }
  out->clear();
}

// Every operation runs with its request's credentials, so the core checks
// permissions as the requesting user (with or without the kernel's
// default_permissions in front).
template <auto Fn>
struct AsCaller;
template <typename R, typename... A, R (*Fn)(A...)>
struct AsCaller<Fn> {
  static R Call(A... a) {
    const struct fuse_context* c = fuse_get_context();
    fs::Cred cred;
    cred.uid = cred.ruid = c->uid;
    cred.gid = cred.rgid = c->gid;
    cred.load = LoadRequestGroups;
    fs::CredScope scope(&cred);
    return Fn(a...);
  }
};

// New inodes belong to the user whose request made them, set in the same
// transaction that creates them.
fs::Owner Caller() {
  const struct fuse_context* c = fuse_get_context();
  return fs::Owner{c->uid, c->gid};
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
  cfg->hard_remove = 0;   // unlinked open files: see the top of this file
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
  if (auto h = Hidden(path)) return Err(Fs().Fstat(*h, st));
  return Err(Fs().Stat(path, st, false));
}

// Reached only without default_permissions (else the kernel answers).
int Access(const char* path, int mask) { return Err(Fs().Access(path, mask, AT_EACCESS)); }

int Readlink(const char* path, char* buf, size_t size) {
  auto r = Fs().Readlink(path);
  if (!r.ok()) return Err(r.status());
  if (size == 0) return -EINVAL;
  size_t n = std::min(size - 1, r->size());
  std::memcpy(buf, r->data(), n);
  buf[n] = '\0';
  return 0;
}

// FIFOs, sockets and devices are nodes in the pool; the kernel serves them.
int Mknod(const char* path, mode_t mode, dev_t dev) {
  fs::Owner o = Caller();
  return Err(Fs().Mknod(path, mode, dev, 0, &o));
}

int Mkdir(const char* path, mode_t mode) {
  fs::Owner o = Caller();
  return Err(Fs().Mkdir(path, mode, 0, &o));
}

int Unlink(const char* path) { return Unhide(path) ? 0 : Err(Fs().Unlink(path)); }
int Rmdir(const char* path) { return Err(Fs().Rmdir(path)); }

int Symlink(const char* target, const char* path) {
  fs::Owner o = Caller();
  return Err(Fs().Symlink(target, path, 0, &o));
}

int Rename(const char* from, const char* to, unsigned flags) {
  if (flags == 0 && IsHiddenName(to) && !IsHiddenName(from)) return Hide(from, to);
  return Err(Fs().Rename(from, to, flags));
}
int Link(const char* from, const char* to) { return Err(Fs().Link(from, to, false)); }

int Chmod(const char* path, mode_t mode, struct fuse_file_info* fi) {
  if (fi != nullptr) return Err(Fs().Fchmod(File(fi), mode));
  if (auto h = Hidden(path)) return Err(Fs().Fchmod(*h, mode));
  return Err(Fs().Chmod(path, mode, false));
}

int Chown(const char* path, uid_t uid, gid_t gid, struct fuse_file_info* fi) {
  if (fi != nullptr) return Err(Fs().Fchown(File(fi), uid, gid));
  if (auto h = Hidden(path)) return Err(Fs().Fchown(*h, uid, gid));
  return Err(Fs().Chown(path, uid, gid, false));
}

int Truncate(const char* path, off_t size, struct fuse_file_info* fi) {
  if (fi != nullptr) return Err(Fs().Ftruncate(File(fi), size));
  if (auto h = Hidden(path)) return Err(Fs().Ftruncate(*h, size));
  return Err(Fs().Truncate(path, size));
}

int Utimens(const char* path, const struct timespec ts[2], struct fuse_file_info* fi) {
  if (fi != nullptr) return Err(Fs().Futimens(File(fi), ts));
  if (auto h = Hidden(path)) return Err(Fs().Futimens(*h, ts));
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
  fs::Owner o = Caller();
  auto r = Fs().Open(path, CoreFlags(fi->flags) | O_CREAT | (fi->flags & O_EXCL), mode & 07777, 0, &o);
  if (!r.ok()) return Err(r.status());
  fi->fh = State()->Add(std::move(*r));
  return 0;
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

// The kernel sends only SEEK_DATA and SEEK_HOLE here (it keeps the offset).
off_t Lseek(const char*, off_t off, int whence, struct fuse_file_info* fi) {
  auto r = Fs().Seek(File(fi), off, whence);
  return r.ok() ? static_cast<off_t>(*r) : Err(r.status());
}

// One request for the whole range instead of a page-by-page splice through
// the kernel: read and write through the core in 1 MiB steps.
ssize_t CopyFileRange(const char*, struct fuse_file_info* fi_in, off_t off_in, const char*,
                      struct fuse_file_info* fi_out, off_t off_out, size_t len, int flags) {
  if (flags != 0) return -EINVAL;
  std::vector<char> buf(std::min<size_t>(len, 1 << 20));
  size_t done = 0;
  while (done < len) {
    size_t want = std::min(buf.size(), len - done);
    auto r = Fs().Read(File(fi_in), buf.data(), want, off_in + static_cast<off_t>(done));
    if (!r.ok()) return done > 0 ? static_cast<ssize_t>(done) : Err(r.status());
    if (*r == 0) break;
    auto w = Fs().Write(File(fi_out), buf.data(), *r, off_out + static_cast<off_t>(done));
    if (!w.ok()) return done > 0 ? static_cast<ssize_t>(done) : Err(w.status());
    done += *w;
    if (*w < *r) break;
  }
  return static_cast<ssize_t>(done);
}

struct fuse_operations MakeOps() {
  struct fuse_operations o{};
  o.init = Init;
  o.getattr = AsCaller<Getattr>::Call;
  o.readlink = AsCaller<Readlink>::Call;
  o.access = AsCaller<Access>::Call;
  o.mknod = AsCaller<Mknod>::Call;
  o.mkdir = AsCaller<Mkdir>::Call;
  o.unlink = AsCaller<Unlink>::Call;
  o.rmdir = AsCaller<Rmdir>::Call;
  o.symlink = AsCaller<Symlink>::Call;
  o.rename = AsCaller<Rename>::Call;
  o.link = AsCaller<Link>::Call;
  o.chmod = AsCaller<Chmod>::Call;
  o.chown = AsCaller<Chown>::Call;
  o.truncate = AsCaller<Truncate>::Call;
  o.utimens = AsCaller<Utimens>::Call;
  o.open = AsCaller<Open>::Call;
  o.create = AsCaller<Create>::Call;
  o.read = AsCaller<Read>::Call;
  o.write = AsCaller<Write>::Call;
  o.statfs = AsCaller<Statfs>::Call;
  o.flush = AsCaller<Flush>::Call;
  o.release = AsCaller<Release>::Call;
  o.fsync = AsCaller<Fsync>::Call;
  o.opendir = AsCaller<Opendir>::Call;
  o.readdir = AsCaller<Readdir>::Call;
  o.releasedir = AsCaller<Releasedir>::Call;
  o.fsyncdir = AsCaller<Fsyncdir>::Call;
  o.fallocate = AsCaller<Fallocate>::Call;
  o.lseek = AsCaller<Lseek>::Call;
  o.copy_file_range = AsCaller<CopyFileRange>::Call;
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
