// libfuse3 low-level operations over fs::FileSystem (see fuse_ops.h).
//
// Node ids. A node id is the inode number, with the pool's generation of
// the slot: the kernel may still hold a node for a number the pool freed
// and reused (a removed directory's node, marked dead, lingers until its
// forget), and a new generation makes it take a fresh node instead of the
// old one. Handles (fi->fh) own one core
// OpenFile each; release closes it.
//
// Unlinked open files need nothing special here: the kernel sends unlink by
// name, the core keeps the inode while a handle has it open (open count),
// and getattr/setattr come by inode number, which still works.
#include "fuse/fuse_ops.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fuse/mount_state.h"

namespace mapfs::fuse {

MountState* NewMountState(std::unique_ptr<fs::FileSystem> fs, const CachePolicy& cache) {
  auto* s = new MountState;
  s->fs = std::move(fs);
  s->cache = cache;
  return s;
}

void SetSession(MountState* s, struct fuse_session* se) { s->se.store(se); }

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

uint64_t MountState::Add(std::shared_ptr<fs::OpenFile> f) {
  auto* h = new Handle{std::move(f)};
  std::lock_guard<std::mutex> g(mu);
  handles.insert(h);
  return reinterpret_cast<uint64_t>(h);
}

Status MountState::Drop(uint64_t fh) {
  auto* h = reinterpret_cast<Handle*>(fh);
  {
    std::lock_guard<std::mutex> g(mu);
    handles.erase(h);
  }
  Status st = fs->Close(*h->f);
  delete h;
  return st;
}

void MountState::Remember(uint64_t ino, uint64_t parent, std::string_view name) {
  std::lock_guard<std::mutex> g(known_mu);
  Known& k = known[ino];
  k.nlookup++;
  for (auto& [p, n] : k.names)
    if (p == parent && n == name) return;
  // Bounded: a file with thousands of hard links keeps the first ones; the
  // others expire with the entry timeout.
  if (k.names.size() < 64) k.names.emplace_back(parent, std::string(name));
}

void MountState::Forget(uint64_t ino, uint64_t n) {
  std::lock_guard<std::mutex> g(known_mu);
  auto it = known.find(ino);
  if (it == known.end()) return;
  if (it->second.nlookup <= n)
    known.erase(it);
  else
    it->second.nlookup -= n;
}

bool MountState::Knows(uint64_t ino) {
  if (ino == FUSE_ROOT_ID) return true;
  std::lock_guard<std::mutex> g(known_mu);
  return known.count(ino) != 0;
}

namespace {

MountState* State(fuse_req_t req) { return static_cast<MountState*>(fuse_req_userdata(req)); }
fs::FileSystem& Fs(fuse_req_t req) { return *State(req)->fs; }
fs::OpenFile& File(const struct fuse_file_info* fi) { return *reinterpret_cast<Handle*>(fi->fh)->f; }

int Errno(const Status& st) { return st.ok() ? 0 : (st.code() > 0 ? st.code() : EIO); }
void ReplyStatus(fuse_req_t req, const Status& st) { fuse_reply_err(req, Errno(st)); }

// The requesting process's supplementary groups (libfuse reads them from
// /proc: only asked for when a check needs them, fs/cred.h).
void LoadRequestGroups(void* req, std::vector<gid_t>* out) {
  out->resize(32);
  for (int tries = 0; tries < 4; tries++) {
    int n = fuse_req_getgroups(static_cast<fuse_req_t>(req), static_cast<int>(out->size()), out->data());
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
template <typename... A, void (*Fn)(fuse_req_t, A...)>
struct AsCaller<Fn> {
  static void Call(fuse_req_t req, A... a) {
    const struct fuse_ctx* c = fuse_req_ctx(req);
    fs::Cred cred;
    cred.uid = cred.ruid = c->uid;
    cred.gid = cred.rgid = c->gid;
    cred.load = LoadRequestGroups;
    cred.ctx = req;
    fs::CredScope scope(&cred);
    Fn(req, a...);
  }
};

// New inodes belong to the user whose request made them, set in the same
// transaction that creates them.
fs::Owner Caller(fuse_req_t req) {
  const struct fuse_ctx* c = fuse_req_ctx(req);
  return fs::Owner{c->uid, c->gid};
}

// Flags for the core: creation is the create op's, and O_APPEND is the
// kernel's business (it passes the offset of every write, also for the
// pages of a shared mapping), so the core writes where it is told.
// The kernel's __FMODE_EXEC, which it leaves in the flags of the open
// behind an execve (no O_ flag uses the bit): the core checks execute
// permission for it instead of read.
constexpr int kFmodeExec = 0x20;

int CoreFlags(int flags) { return flags & ~(O_APPEND | O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC | kFmodeExec); }

// Replies with the entry for inode `st` (and counts the kernel's new
// reference to it).
void ReplyEntry(fuse_req_t req, MountState* s, fuse_ino_t parent, const char* name, const struct stat& st,
                uint64_t generation) {
  struct fuse_entry_param e{};
  e.ino = st.st_ino;
  e.generation = generation;
  e.attr = st;
  e.attr_timeout = s->cache.attr_timeout;
  e.entry_timeout = s->cache.entry_timeout;
  s->Remember(st.st_ino, parent, name);
  if (fuse_reply_entry(req, &e) != 0) s->Forget(st.st_ino, 1);  // the kernel did not take it
}

// What `name` in `parent` names now: its attributes and generation. An
// inode removed between the lookup and the stat is looked up again.
Status StatEntry(fs::FileSystem& f, fuse_ino_t parent, const char* name, struct stat* st, uint64_t* gen) {
  for (int i = 0;; i++) {
    auto ino = f.Lookup(name, false, parent);
    if (!ino.ok()) return ino.status();
    Status r = f.StatIno(*ino, st, gen);
    if (r.code() != ENOENT || i == 100) return r;
  }
}

// Reached only without default_permissions (else the kernel answers).
void Access(fuse_req_t req, fuse_ino_t ino, int mask) { ReplyStatus(req, Fs(req).AccessIno(ino, mask)); }

void StatAndReplyEntry(fuse_req_t req, fuse_ino_t parent, const char* name) {
  struct stat st;
  uint64_t gen = 0;
  Status r = StatEntry(Fs(req), parent, name, &st, &gen);
  if (!r.ok()) return ReplyStatus(req, r);
  ReplyEntry(req, State(req), parent, name, st, gen);
}

void Init(void* userdata, struct fuse_conn_info* conn) {
  (void)userdata;
  // O_TRUNC of an existing file comes as a separate setattr, never with
  // open. With atomic O_TRUNC the kernel sends the open first and checks
  // only afterwards whether the file may be truncated (an O_RDONLY|O_TRUNC
  // open of a running program must fail with ETXTBSY, and leave it intact);
  // meanwhile it has already set its cached size to 0 under the program,
  // whose next page fault in the file then fails (pjdfstest open::etxtbsy).
  // The kernel strips O_TRUNC from open requests when this is off.
  conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
  // Writes of a shared mapping and of O_APPEND come with their offsets; no
  // writeback cache (see README: a write must reach the pool before the
  // call returns, for the shim and for crash consistency).
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // The follower tells the kernel which pages others changed. With
  // automatic invalidation on, the kernel would also drop every cached page
  // of a file whenever it saw a new mtime — after each of its own writes.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
}

// A name that is not there is cached too (a negative entry, node id 0):
// a create then costs one request, not a lookup and a create. Another
// process's create of the name reaches the kernel through the change ring
// like any other name change.
void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  struct stat st;
  uint64_t gen = 0;
  Status r = StatEntry(Fs(req), parent, name, &st, &gen);
  if (r.code() == ENOENT && State(req)->cache.negative_timeout > 0) {
    struct fuse_entry_param e{};
    e.entry_timeout = State(req)->cache.negative_timeout;
    fuse_reply_entry(req, &e);
    return;
  }
  if (!r.ok()) return ReplyStatus(req, r);
  ReplyEntry(req, State(req), parent, name, st, gen);
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  State(req)->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; i++) State(req)->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void Getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  struct stat st;
  Status r = fi != nullptr ? Fs(req).Fstat(File(fi), &st) : Fs(req).StatIno(ino, &st);
  if (!r.ok()) return ReplyStatus(req, r);
  fuse_reply_attr(req, &st, State(req)->cache.attr_timeout);
}

// In the kernel's order of notify_change: mode, owner, size, times.
void Setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, struct fuse_file_info* fi) {
  fs::FileSystem& f = Fs(req);
  Status r;
  if (to_set & FUSE_SET_ATTR_MODE) {
    r = f.ChmodIno(ino, attr->st_mode);
    // The kernel drops a file's set-ID bits before a write or truncate by
    // sending this chmod as the writer (libfuse 3.14 cannot take the drop
    // over: FUSE_CAP_HANDLE_KILLPRIV never reaches the kernel, libfuse
    // issue 884). The core allows the writer that much (DropSetIdIno).
    if (r.code() == EPERM && f.DropSetIdIno(ino, attr->st_mode).ok()) r = Status::Ok();
  }
  if (r.ok() && (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
    uid_t uid = (to_set & FUSE_SET_ATTR_UID) ? attr->st_uid : static_cast<uid_t>(-1);
    gid_t gid = (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : static_cast<gid_t>(-1);
    r = f.ChownIno(ino, uid, gid);
  }
  if (r.ok() && (to_set & FUSE_SET_ATTR_SIZE)) {
    if (fi != nullptr) {
      r = f.Ftruncate(File(fi), attr->st_size);
    } else {
      // truncate(2) by name: a description of our own for the call, for
      // a caller who may write the file.
      auto h = f.OpenIno(ino, O_WRONLY);
      if (!h.ok()) {
        r = h.status().code() == ESTALE ? Status::Error(ENOENT, "file was removed") : h.status();
      } else {
        r = f.Ftruncate(**h, attr->st_size);
        Status c = f.Close(**h);
        if (r.ok()) r = c;
      }
    }
  }
  if (r.ok() && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
    struct timespec tv[2];
    tv[0].tv_sec = tv[1].tv_sec = 0;
    tv[0].tv_nsec = tv[1].tv_nsec = UTIME_OMIT;
    if (to_set & FUSE_SET_ATTR_ATIME_NOW)
      tv[0].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_ATIME)
      tv[0] = attr->st_atim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW)
      tv[1].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_MTIME)
      tv[1] = attr->st_mtim;
    r = f.UtimensIno(ino, tv);
  }
  if (!r.ok()) return ReplyStatus(req, r);
  Getattr(req, ino, fi);
}

void Readlink(fuse_req_t req, fuse_ino_t ino) {
  auto r = Fs(req).ReadlinkIno(ino);
  if (!r.ok()) return ReplyStatus(req, r.status());
  fuse_reply_readlink(req, r->c_str());
}

// FIFOs, sockets and devices are nodes in the pool; the kernel serves them.
void Mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  fs::Owner o = Caller(req);
  Status r = Fs(req).Mknod(name, mode, rdev, parent, &o);
  if (!r.ok()) return ReplyStatus(req, r);
  StatAndReplyEntry(req, parent, name);
}

void Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  fs::Owner o = Caller(req);
  Status r = Fs(req).Mkdir(name, mode, parent, &o);
  if (!r.ok()) return ReplyStatus(req, r);
  StatAndReplyEntry(req, parent, name);
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) { ReplyStatus(req, Fs(req).Unlink(name, parent)); }
void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) { ReplyStatus(req, Fs(req).Rmdir(name, parent)); }

void Symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  fs::Owner o = Caller(req);
  Status r = Fs(req).Symlink(target, name, parent, &o);
  if (!r.ok()) return ReplyStatus(req, r);
  StatAndReplyEntry(req, parent, name);
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
            unsigned flags) {
  ReplyStatus(req, Fs(req).Rename(name, newname, flags, parent, newparent));
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  Status r = Fs(req).LinkIno(ino, newname, newparent);
  if (!r.ok()) return ReplyStatus(req, r);
  StatAndReplyEntry(req, newparent, newname);
}

void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  fs::FileSystem& f = Fs(req);
  // The core checks open(2)'s rights as the caller (the kernel has too
  // with default_permissions; without, this is the check).
  int flags = CoreFlags(fi->flags) | ((fi->flags & kFmodeExec) ? fs::kOpenExec : 0);
  auto r = f.OpenIno(ino, flags);
  if (!r.ok()) return ReplyStatus(req, r.status().code() == ESTALE ? Status::Error(ENOENT, "removed") : r.status());
  // Pages stay cached across opens unless some process maps the file:
  // its stores through the map publish no change.
  fi->keep_cache = State(req)->cache.keep_cache && !f.MappedAnywhere(ino);
  fi->noflush = 1;  // Flush has nothing to do: writes reach the pool before they return
  fi->fh = State(req)->Add(std::move(*r));
  fi->direct_io = 0;
  if (fuse_reply_open(req, fi) != 0) (void)State(req)->Drop(fi->fh);  // interrupted: no release will come
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, struct fuse_file_info* fi) {
  MountState* s = State(req);
  fs::Owner o = Caller(req);
  int flags = CoreFlags(fi->flags) | O_CREAT | (fi->flags & (O_EXCL | O_TRUNC));
  auto r = s->fs->Open(name, flags, mode & 07777, parent, &o);
  if (!r.ok()) return ReplyStatus(req, r.status());
  struct stat st;
  uint64_t gen = 0;
  Status fst = s->fs->StatIno((*r)->ino, &st, &gen);
  if (!fst.ok()) {
    (void)s->fs->Close(**r);
    return ReplyStatus(req, fst);
  }
  fi->fh = s->Add(std::move(*r));
  fi->keep_cache = s->cache.keep_cache;
  fi->noflush = 1;
  struct fuse_entry_param e{};
  e.ino = st.st_ino;
  e.generation = gen;
  e.attr = st;
  e.attr_timeout = s->cache.attr_timeout;
  e.entry_timeout = s->cache.entry_timeout;
  s->Remember(st.st_ino, parent, name);
  if (fuse_reply_create(req, &e, fi) != 0) {
    s->Forget(st.st_ino, 1);
    (void)s->Drop(fi->fh);
  }
}

void Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, struct fuse_file_info* fi) {
  // One buffer per worker thread: reads never exceed max_read (128 KiB+).
  thread_local std::vector<char> buf;
  if (buf.size() < size) buf.resize(size);
  auto r = Fs(req).Read(File(fi), buf.data(), size, off);
  if (!r.ok()) return ReplyStatus(req, r.status());
  fuse_reply_buf(req, buf.data(), *r);
}

void Write(fuse_req_t req, fuse_ino_t, const char* data, size_t size, off_t off, struct fuse_file_info* fi) {
  auto r = Fs(req).Write(File(fi), data, size, off);
  if (!r.ok()) return ReplyStatus(req, r.status());
  fuse_reply_write(req, *r);
}

void Statfs(fuse_req_t req, fuse_ino_t) {
  struct statvfs st;
  Status r = Fs(req).Statfs(&st);
  if (!r.ok()) return ReplyStatus(req, r);
  fuse_reply_statfs(req, &st);
}

// Durability is fsync's and release's.
void Flush(fuse_req_t req, fuse_ino_t, struct fuse_file_info*) { fuse_reply_err(req, 0); }

void Release(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) { ReplyStatus(req, State(req)->Drop(fi->fh)); }

void Fsync(fuse_req_t req, fuse_ino_t, int, struct fuse_file_info* fi) { ReplyStatus(req, Fs(req).Fsync(File(fi))); }

void Opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  auto r = Fs(req).OpenIno(ino, O_RDONLY | O_DIRECTORY);
  if (!r.ok()) return ReplyStatus(req, r.status().code() == ESTALE ? Status::Error(ENOENT, "removed") : r.status());
  fi->fh = State(req)->Add(std::move(*r));
  // The kernel may keep the listing only as long as names are cached.
  fi->cache_readdir = 0;
  if (fuse_reply_open(req, fi) != 0) (void)State(req)->Drop(fi->fh);
}

// Offsets are the core's stable cookies (the position after each entry).
void Readdir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, struct fuse_file_info* fi) {
  std::vector<char> buf(size);
  size_t used = 0;
  Status st = Fs(req).ReadDir(File(fi), static_cast<uint64_t>(off), [&](const fs::DirEntryOut& e) {
    struct stat s{};
    s.st_ino = e.ino;
    s.st_mode = static_cast<mode_t>(e.type) << 12;
    size_t need = fuse_add_direntry(req, buf.data() + used, size - used, e.name.c_str(), &s,
                                    static_cast<off_t>(e.cookie));
    if (need > size - used) return false;  // full: the kernel asks again from the last cookie
    used += need;
    return true;
  });
  if (!st.ok() && used == 0) return ReplyStatus(req, st);
  fuse_reply_buf(req, buf.data(), used);
}

void Releasedir(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  ReplyStatus(req, State(req)->Drop(fi->fh));
}

void Fsyncdir(fuse_req_t req, fuse_ino_t, int, struct fuse_file_info* fi) {
  ReplyStatus(req, Fs(req).Fsync(File(fi)));
}

void Fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t off, off_t len, struct fuse_file_info* fi) {
  ReplyStatus(req, Fs(req).Fallocate(File(fi), mode, off, len));
}

// The kernel sends only SEEK_DATA and SEEK_HOLE here (it keeps the offset).
void Lseek(fuse_req_t req, fuse_ino_t, off_t off, int whence, struct fuse_file_info* fi) {
  auto r = Fs(req).Seek(File(fi), off, whence);
  if (!r.ok()) return ReplyStatus(req, r.status());
  fuse_reply_lseek(req, static_cast<off_t>(*r));
}

// One request for the whole range instead of a page-by-page splice through
// the kernel: read and write through the core in 1 MiB steps.
void CopyFileRange(fuse_req_t req, fuse_ino_t, off_t off_in, struct fuse_file_info* fi_in, fuse_ino_t,
                   off_t off_out, struct fuse_file_info* fi_out, size_t len, int flags) {
  if (flags != 0) return (void)fuse_reply_err(req, EINVAL);
  fs::FileSystem& f = Fs(req);
  std::vector<char> buf(std::min<size_t>(len, 1 << 20));
  size_t done = 0;
  while (done < len) {
    size_t want = std::min(buf.size(), len - done);
    auto r = f.Read(File(fi_in), buf.data(), want, off_in + static_cast<off_t>(done));
    if (!r.ok()) {
      if (done == 0) return ReplyStatus(req, r.status());
      break;
    }
    if (*r == 0) break;
    auto w = f.Write(File(fi_out), buf.data(), *r, off_out + static_cast<off_t>(done));
    if (!w.ok()) {
      if (done == 0) return ReplyStatus(req, w.status());
      break;
    }
    done += *w;
    if (*w < *r) break;
  }
  fuse_reply_write(req, done);
}

struct fuse_lowlevel_ops MakeOps() {
  struct fuse_lowlevel_ops o{};
  o.init = Init;
  o.lookup = AsCaller<Lookup>::Call;
  o.forget = AsCaller<Forget>::Call;
  o.forget_multi = AsCaller<ForgetMulti>::Call;
  o.getattr = AsCaller<Getattr>::Call;
  o.setattr = AsCaller<Setattr>::Call;
  o.readlink = AsCaller<Readlink>::Call;
  o.access = AsCaller<Access>::Call;
  o.mknod = AsCaller<Mknod>::Call;
  o.mkdir = AsCaller<Mkdir>::Call;
  o.unlink = AsCaller<Unlink>::Call;
  o.rmdir = AsCaller<Rmdir>::Call;
  o.symlink = AsCaller<Symlink>::Call;
  o.rename = AsCaller<Rename>::Call;
  o.link = AsCaller<Link>::Call;
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
  // No getlk/setlk/flock: the kernel keeps POSIX and flock locks of the
  // mount locally (README).
  return o;
}

}  // namespace

const struct fuse_lowlevel_ops& Operations() {
  static const struct fuse_lowlevel_ops ops = MakeOps();
  return ops;
}

}  // namespace mapfs::fuse
