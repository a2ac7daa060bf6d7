// The overlay's descriptors in the shim (overlay_fds.h).
#include "preload/overlay_fds.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "preload/calls.h"
#include "preload/vector_io.h"
#include "preload/stdio_redirect.h"

namespace mapfs::preload {

std::atomic<int> g_ov_count{0};

namespace {

struct Config {
  bool on = false;
  overlay::Options opt;
  std::string hidden;  // root + "/.mapfs-overlay"
};

const Config& Conf() {
  static const Config* c = [] {
    CoreScope cs;
    auto* k = new Config();
    const char* dir = std::getenv("MAPFS_OVERLAY");
    if (dir == nullptr || dir[0] != '/') return k;
    k->opt.dir = NormalizePath(dir);
    while (k->opt.dir.size() > 1 && k->opt.dir.back() == '/') k->opt.dir.pop_back();
    if (k->opt.dir == "/") return k;  // would route every file: nothing
    const char* e = std::getenv("MAPFS_OVERLAY_ENGINE");
    if (e != nullptr && std::strcmp(e, "virtual") == 0) k->opt.engine = overlay::EngineKind::kVirtual;
    const char* m = std::getenv("MAPFS_OVERLAY_MODE");
    if (m != nullptr && std::strcmp(m, "sync") == 0) k->opt.mode = overlay::Mode::kSync;
    if (m != nullptr && std::strcmp(m, "strict") == 0) k->opt.mode = overlay::Mode::kStrict;
    k->hidden = k->opt.dir + "/.mapfs-overlay";
    k->on = true;
    return k;
  }();
  return *c;
}

// The table: descriptor -> description (several numbers after dup).
std::shared_mutex g_mu;
std::unordered_map<int, OvRef>* g_table = nullptr;  // never destroyed: wrappers run during exit

std::mutex g_eng_mu;
overlay::Engine* g_engine = nullptr;  // owned; leaked in a fork child (its parent's)
bool g_engine_failed = false;

void AtforkPrepare() {
  if (g_ov_count.load() > 0) OverlayHandoff();
  g_eng_mu.lock();
  g_mu.lock();
}
void AtforkParent() {
  g_mu.unlock();
  g_eng_mu.unlock();
}
// The child reaches inherited overlay files through the kernel: the
// entries (and the engine, whose staging files are its parent's) are
// abandoned, not closed — closing would relink or remove the parent's work.
// Virtualized files are the exception: the kernel's view of them is not
// their content, so the child adopts their descriptors again, in an engine
// of its own (overlay_inherit.cc), at the offsets the hand-off put in the
// kernel (shared with the parent, as for any inherited description).
void AtforkChild() {
  std::vector<std::vector<int>> again;
  if (g_table != nullptr && !g_table->empty()) {
    auto* keep = new std::vector<OvRef>();  // leaked on purpose
    std::vector<OvOpen*> seen;
    for (auto& [fd, o] : *g_table) {
      if (o->file && !o->file->KernelIsContent()) {
        size_t i = 0;
        while (i < seen.size() && seen[i] != o.get()) i++;
        if (i == seen.size()) {
          seen.push_back(o.get());
          again.emplace_back();
          REAL(close)(o->file->fd());  // the parent engine's number, never used here
        }
        again[i].push_back(fd);
      }
      keep->push_back(std::move(o));
    }
    g_table->clear();
  }
  g_ov_count.store(0);
  g_engine = nullptr;  // leaked on purpose, like the entries
  // A fresh lock, not an unlock: glibc's rwlock takes a write unlock by a
  // thread id other than the locker's (the child's) for a read unlock.
  new (&g_mu) std::shared_mutex();
  g_eng_mu.unlock();
  if (!again.empty()) OverlayReadopt(again);
}

overlay::Engine* EngineLocked();
overlay::Engine* Engine() {
  std::lock_guard<std::mutex> g(g_eng_mu);
  return EngineLocked();
}
overlay::Engine* EngineLocked() {
  if (g_engine != nullptr || g_engine_failed) return g_engine;
  CoreScope cs;
  overlay::SetInternalFdBase(HighBase());
  auto e = overlay::OpenOverlay(Conf().opt);
  if (!e.ok()) {
    g_engine_failed = true;
    // Said once: every file under the directory goes to the kernel from now on.
    std::string line = "mapfs: overlay " + Conf().opt.dir + " is unusable, its files go to the kernel: " +
                       e.status().message() + "\n";
    (void)!REAL(write)(2, line.data(), line.size());
    return nullptr;
  }
  g_engine = e->release();
  static bool registered = false;
  if (!registered) {
    registered = true;
    pthread_atfork(AtforkPrepare, AtforkParent, AtforkChild);
  }
  return g_engine;
}

// Each description once, with one of its numbers.
std::vector<std::pair<int, OvRef>> AllOpen() {
  std::vector<std::pair<int, OvRef>> out;
  std::shared_lock<std::shared_mutex> g(g_mu);
  if (g_table == nullptr) return out;
  for (auto& [fd, o] : *g_table) {
    bool seen = false;
    for (auto& p : out) seen |= p.second == o;
    if (!seen) out.emplace_back(fd, o);
  }
  return out;
}

int64_t Pos(OvOpen& o, int fd) { return o.kernel_offset ? REAL(lseek)(fd, 0, SEEK_CUR) : static_cast<int64_t>(o.offset); }
void SetPos(OvOpen& o, int fd, uint64_t p) {
  if (o.kernel_offset) REAL(lseek)(fd, static_cast<off_t>(p), SEEK_SET);
  else o.offset = p;
}

}  // namespace

OvOpen::~OvOpen() {
  if (file) {
    CoreScope cs;
    (void)file->Close();
  }
}

bool OverlayConfigured() { return Conf().on; }
bool OverlayVirtual() { return Conf().on && Conf().opt.engine == overlay::EngineKind::kVirtual; }
overlay::Engine* OverlayEngine() { return Engine(); }

int OverlayKernelFlags(int dirfd, const char* path, int flags) {
  if (!(flags & O_TRUNC) || (flags & O_ACCMODE) == O_RDONLY || in_core || !OverlayVirtual()) return flags;
  return OverlayPath(dirfd, path) ? flags & ~O_TRUNC : flags;
}

int OverlayCoreOpened(int fd, const char* path) {
  // Only the split engine's reopens, which it knows to duplicate high and
  // hold (the virtual engine keeps the descriptors it opens past the
  // program's close: low numbers would stay taken). Told apart cheaply
  // (the first version read the link back: 2,400 instructions an open):
  // a path through /proc/self/fd, a regular file on the root's file
  // system; elsewhere (a mount inside the root) the link is read.
  const Config& c = Conf();
  if (fd < 0 || !c.on || c.opt.engine != overlay::EngineKind::kSplit || path == nullptr ||
      std::strncmp(path, "/proc/self/fd/", 14) != 0)
    return MoveHigh(fd);
  static const dev_t root_dev = [&] {
    struct stat rs;
    return REAL(stat)(c.opt.dir.c_str(), &rs) == 0 ? rs.st_dev : static_cast<dev_t>(-1);
  }();
  struct stat st;
  if (REAL(fstat)(fd, &st) != 0 || !S_ISREG(st.st_mode)) return MoveHigh(fd);
  if (st.st_dev != root_dev) {
    char buf[PATH_MAX];
    ssize_t n = REAL(readlink)(path, buf, sizeof buf - 1);
    if (n <= 0) return MoveHigh(fd);
    buf[n] = '\0';
    if (buf[0] != '/' || !OverlayPath(AT_FDCWD, buf)) return MoveHigh(fd);
  }
  // A low number kept is one the program's dup2 cannot take (EBADF) and
  // its opens skip, while the file is open: only when a lock may be lost.
  // The new description's OFD test conflicts with every record lock on the
  // file, this process's included (their owner is not this description):
  // none, and the move's close releases nothing. (A lock another thread
  // takes between this test and the close would be released: it must have
  // the file open through another descriptor and lock it in those few
  // instructions.)
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (REAL(fcntl)(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK) return MoveHigh(fd);
  return KeepInternal(fd);
}

OvRef OverlayLookup(int fd) {
  std::shared_lock<std::shared_mutex> g(g_mu);
  if (g_table == nullptr) return nullptr;
  auto it = g_table->find(fd);
  return it == g_table->end() ? nullptr : it->second;
}

bool OverlayPath(int dirfd, const char* path) {
  const Config& c = Conf();
  if (!c.on || path == nullptr || path[0] == '\0') return false;
  std::string abs;
  if (path[0] == '/') {
    // The common case decided without a copy: not even the root's prefix.
    if (std::strncmp(path, c.opt.dir.data(), c.opt.dir.size()) != 0) return false;
    abs = path;
  } else {
    CoreScope cs;
    char buf[PATH_MAX];
    if (dirfd == AT_FDCWD) {
      if (::getcwd(buf, sizeof buf) == nullptr) return false;
    } else {
      std::string link = "/proc/self/fd/" + std::to_string(dirfd);
      ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
      if (n <= 0) return false;
      buf[n] = '\0';
    }
    abs = std::string(buf) + "/" + path;
  }
  std::string n = NormalizePath(abs);
  auto under = [&](const std::string& root) {
    return n.size() > root.size() && n.compare(0, root.size(), root) == 0 && n[root.size()] == '/';
  };
  return under(c.opt.dir) && !under(c.hidden) && n != c.hidden;
}

int OverlayAfterOpen(int fd, int dirfd, const char* path, int flags) {
  if (fd < 0 || in_core || !Conf().on || (flags & (O_PATH | O_DIRECTORY))) return fd;
  if (!OverlayPath(dirfd, path)) return fd;
  struct stat st;
  if (REAL(fstat)(fd, &st) != 0 || !S_ISREG(st.st_mode)) return fd;
  overlay::Engine* e = Engine();
  // An O_TRUNC the kernel was not given (OverlayKernelFlags) and no engine
  // to do it: the kernel's, after all.
  bool kept_trunc = OverlayKernelFlags(dirfd, path, flags) != flags;
  if (e == nullptr) {
    if (kept_trunc && REAL(ftruncate)(fd, 0) != 0) {
      int err = errno;
      REAL(close)(fd);
      return FailErrno(err);
    }
    return fd;
  }
  CoreScope cs;
  // The engine's own number for the description: internal, close-on-exec.
  int mine = DupHigh(fd);
  if (mine < 0) return fd;  // out of descriptors: the kernel serves this one
  auto f = e->Adopt(mine, flags);
  if (!f.ok()) {
    REAL(close)(fd);
    return Fail(f.status());
  }
  auto o = std::make_shared<OvOpen>();
  o->file = std::move(*f);
  o->acc = flags & O_ACCMODE;
  o->append = (flags & O_APPEND) != 0;
  OvInstall(fd, std::move(o));
  return fd;
}

void OvInstall(int fd, OvRef o) {
  // stdio does its I/O with system calls the shim cannot see: a standard
  // stream on a virtualized file must be a stream over the shim's calls.
  bool std_stream = fd >= 0 && fd <= 2 && o->file && !o->file->KernelIsContent();
  OvRef old;
  std::unique_lock<std::shared_mutex> g(g_mu);
  if (g_table == nullptr) g_table = new std::unordered_map<int, OvRef>();
  auto [it, fresh] = g_table->try_emplace(fd, std::move(o));
  if (!fresh) {
    old = std::move(it->second);
    it->second = std::move(o);
  } else {
    g_ov_count.fetch_add(1);
  }
  g.unlock();  // old closes (relinks) outside the table's lock
  if (std_stream) RedirectStdStream(fd);
}

void OvForget(int fd) {
  OvRef old;
  {
    std::unique_lock<std::shared_mutex> g(g_mu);
    if (g_table == nullptr) return;
    auto it = g_table->find(fd);
    if (it == g_table->end()) return;
    old = std::move(it->second);
    g_table->erase(it);
    g_ov_count.fetch_sub(1);
  }
}

void OvForgetRange(unsigned lo, unsigned hi) {
  std::vector<OvRef> gone;
  {
    std::unique_lock<std::shared_mutex> g(g_mu);
    if (g_table == nullptr) return;
    for (auto it = g_table->begin(); it != g_table->end();) {
      auto u = static_cast<unsigned>(it->first);
      if (u >= lo && u <= hi) {
        gone.push_back(std::move(it->second));
        it = g_table->erase(it);
        g_ov_count.fetch_sub(1);
      } else {
        ++it;
      }
    }
  }
}

ssize_t OvRead(OvOpen& o, int fd, void* buf, size_t n, int64_t off) {
  if (o.acc == O_WRONLY) return FailErrno(EBADF);
  CoreScope cs;
  if (off >= 0) {
    auto r = o.file->Pread(buf, n, static_cast<uint64_t>(off));
    return r.ok() ? static_cast<ssize_t>(*r) : Fail(r.status());
  }
  std::lock_guard<std::mutex> g(o.pos_mu);
  int64_t cur = Pos(o, fd);
  if (cur < 0) return -1;
  auto r = o.file->Pread(buf, n, static_cast<uint64_t>(cur));
  if (!r.ok()) return Fail(r.status());
  SetPos(o, fd, static_cast<uint64_t>(cur) + *r);
  return static_cast<ssize_t>(*r);
}

ssize_t OvWrite(OvOpen& o, int fd, const void* buf, size_t n, int64_t off) {
  if (o.acc == O_RDONLY) return FailErrno(EBADF);
  CoreScope cs;
  bool append = o.append.load();
  if (off >= 0 && !append) {
    auto r = o.file->Pwrite(buf, n, static_cast<uint64_t>(off));
    return r.ok() ? static_cast<ssize_t>(*r) : Fail(r.status());
  }
  if (off >= 0) {  // pwrite on O_APPEND appends, as Linux does
    auto r = o.file->Append(buf, n);
    return r.ok() ? static_cast<ssize_t>(n) : Fail(r.status());
  }
  std::lock_guard<std::mutex> g(o.pos_mu);
  if (append) {
    auto r = o.file->Append(buf, n);
    if (!r.ok()) return Fail(r.status());
    SetPos(o, fd, *r + n);
    return static_cast<ssize_t>(n);
  }
  int64_t cur = Pos(o, fd);
  if (cur < 0) return -1;
  auto r = o.file->Pwrite(buf, n, static_cast<uint64_t>(cur));
  if (!r.ok()) return Fail(r.status());
  SetPos(o, fd, static_cast<uint64_t>(cur) + *r);
  return static_cast<ssize_t>(*r);
}

ssize_t OvReadV(OvOpen& o, int fd, const iovec* iov, int cnt, int64_t off) {
  return ScatterRead(iov, cnt, [&](void* buf, size_t n) { return OvRead(o, fd, buf, n, off); });
}

ssize_t OvWriteV(OvOpen& o, int fd, const iovec* iov, int cnt, int64_t off) {
  return GatherWrite(iov, cnt, [&](const void* buf, size_t n) { return OvWrite(o, fd, buf, n, off); });
}

off_t OvSeek(OvOpen& o, int fd, off_t off, int whence) {
  CoreScope cs;
  std::lock_guard<std::mutex> g(o.pos_mu);
  int64_t base;
  switch (whence) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = Pos(o, fd); break;
    case SEEK_END: {
      auto s = o.file->Size();
      if (!s.ok()) return Fail(s.status());
      base = static_cast<int64_t>(*s);
      break;
    }
    case SEEK_DATA:
    case SEEK_HOLE: {
      if (off < 0) return FailErrno(ENXIO);
      auto r = o.file->SeekData(static_cast<uint64_t>(off), whence == SEEK_HOLE);
      if (!r.ok()) return Fail(r.status());
      SetPos(o, fd, *r);
      return static_cast<off_t>(*r);
    }
    default: return FailErrno(EINVAL);
  }
  if (base < 0) return -1;
  int64_t to = base + off;
  if ((off > 0 && to < base) || to < 0) return FailErrno(off > 0 ? EOVERFLOW : EINVAL);
  SetPos(o, fd, static_cast<uint64_t>(to));
  return static_cast<off_t>(to);
}

int OvSync(OvOpen& o) {
  CoreScope cs;
  Status st = o.file->Sync();
  return st.ok() ? 0 : Fail(st);
}

int OvTruncate(OvOpen& o, off_t size) {
  if (size < 0) return FailErrno(EINVAL);
  if (o.acc == O_RDONLY) return FailErrno(EINVAL);  // as the kernel: not open for writing
  CoreScope cs;
  Status st = o.file->Truncate(static_cast<uint64_t>(size));
  return st.ok() ? 0 : Fail(st);
}

int OvFallocate(OvOpen& o, int fd, int mode, off_t off, off_t len) {
  if (off < 0 || len <= 0) return FailErrno(EINVAL);
  if (o.acc == O_RDONLY) return FailErrno(EBADF);
  CoreScope cs;
  if (!o.file->KernelIsContent()) {
    Status vs = o.file->Fallocate(mode, static_cast<uint64_t>(off), static_cast<uint64_t>(len));
    return vs.ok() ? 0 : Fail(vs);
  }
  Status st = o.file->Flush();
  if (!st.ok()) return Fail(st);
  if (REAL(fallocate)(fd, mode, off, len) != 0) return -1;
  // The kernel may have changed the size (mode 0, ZERO_RANGE, COLLAPSE...):
  // the engine takes the kernel's (its bytes are all in the file now).
  struct stat sb;
  auto size = o.file->Size();
  if (REAL(fstat)(fd, &sb) == 0 && size.ok() && static_cast<uint64_t>(sb.st_size) != *size) {
    st = o.file->Truncate(static_cast<uint64_t>(sb.st_size));
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

void* OvMap(OvOpen& o, void* addr, size_t len, int prot, int flags, off_t off) {
  // As the kernel checks the descriptor's access (the engine's own map may
  // be of something else: a virtualized file's copy).
  bool shared = (flags & MAP_TYPE) != MAP_PRIVATE;
  if (o.acc == O_WRONLY || (shared && (prot & PROT_WRITE) && o.acc != O_RDWR)) {
    errno = EACCES;
    return MAP_FAILED;
  }
  if (off < 0) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  CoreScope cs;
  auto r = o.file->Map(addr, len, prot, flags, static_cast<uint64_t>(off));
  if (!r.ok()) {
    Fail(r.status());
    return MAP_FAILED;
  }
  return *r;
}

void OvFixStat(struct stat* st, int dirfd, const char* path) {
  if (in_core || !S_ISREG(st->st_mode) || !Conf().on) return;
  if (OverlayVirtual()) {
    // Any virtualized file under the root, open here or not: its content
    // size is in the file (read by the engine). Files shorter than a
    // header are plain.
    if (st->st_size < 64) return;
    bool by_fd = path == nullptr || path[0] == '\0';
    if (by_fd) {
      if (OvRef o = OverlayFd(dirfd)) {
        CoreScope cs;
        auto s = o->file->Size();
        if (s.ok()) st->st_size = static_cast<off_t>(*s);
        return;
      }
    } else if (!OverlayPath(dirfd, path)) {
      return;
    }
    overlay::Engine* e = Engine();
    if (e == nullptr) return;
    CoreScope cs;
    std::string p;
    if (by_fd) p = "/proc/self/fd/" + std::to_string(dirfd);
    else if (path[0] != '/' && dirfd != AT_FDCWD) p = "/proc/self/fd/" + std::to_string(dirfd) + "/" + path;
    else p = path;
    (void)e->FixStat(p.c_str(), st);
    return;
  }
  if (g_engine == nullptr) return;
  CoreScope cs;
  std::lock_guard<std::mutex> g(g_eng_mu);
  if (g_engine != nullptr) (void)g_engine->FixStatFd(-1, st);
}

void OvFixStatx(struct statx* x, int dirfd, const char* path) {
  if (in_core || !S_ISREG(x->stx_mode) || !Conf().on) return;
  struct stat st{};
  st.st_dev = makedev(x->stx_dev_major, x->stx_dev_minor);
  st.st_ino = x->stx_ino;
  st.st_mode = x->stx_mode;
  st.st_size = static_cast<off_t>(x->stx_size);
  st.st_blocks = static_cast<blkcnt_t>(x->stx_blocks);
  st.st_nlink = x->stx_nlink;
  OvFixStat(&st, dirfd, path);
  x->stx_size = static_cast<uint64_t>(st.st_size);
  x->stx_blocks = static_cast<uint64_t>(st.st_blocks);
  x->stx_nlink = static_cast<uint32_t>(st.st_nlink);
}

bool OvHasViews() {
  overlay::Engine* e = g_engine;
  return e != nullptr && !in_core && e->HasViews();
}

void OvUnmapViews(void* addr, size_t len) {
  overlay::Engine* e = g_engine;
  if (e == nullptr) return;
  CoreScope cs;
  (void)e->UnmapViews(addr, len);  // munmap itself cannot fail for it
}

bool OvViewsMeet(const void* addr, size_t len) {
  overlay::Engine* e = g_engine;
  return e != nullptr && e->ViewsMeet(addr, len);
}

int OvProtectViews(void* addr, size_t len, int prot, int pkey) {
  overlay::Engine* e = g_engine;
  if (e == nullptr) return FailErrno(ENOSYS);
  CoreScope cs;
  int err = e->ProtectViews(addr, len, prot, pkey);
  return err == 0 ? 0 : FailErrno(err);
}

void OvBeforeKernelStores(void* buf, size_t n) {
  if (n == 0 || !OvHasViews()) return;
  overlay::Engine* e = g_engine;
  CoreScope cs;
  e->PrepareKernelStores(buf, n);
}

void OvBeforeKernelStores(const struct iovec* iov, int cnt) {
  if (!OvHasViews() || iov == nullptr || cnt <= 0) return;
  // The vector is the program's and may be bad (the kernel then answers
  // EFAULT): it is read with process_vm_readv, never dereferenced here.
  cnt = std::min(cnt, IOV_MAX);  // the kernel refuses more (EINVAL)
  struct iovec chunk[64];
  for (int i = 0; i < cnt; i += 64) {
    int k = std::min(cnt - i, 64);
    size_t bytes = static_cast<size_t>(k) * sizeof(struct iovec);
    struct iovec local{chunk, bytes}, remote{const_cast<struct iovec*>(iov + i), bytes};
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(bytes)) return;
    for (int j = 0; j < k; j++) OvBeforeKernelStores(chunk[j].iov_base, chunk[j].iov_len);
  }
}

int OvSyncViews(void* addr, size_t len) {
  overlay::Engine* e = g_engine;
  if (e == nullptr) return 0;
  CoreScope cs;
  Status st = e->SyncViews(addr, len);
  return st.ok() ? 0 : Fail(st);
}

void OverlayHandoff() {
  if (in_core || (g_ov_count.load() == 0 && !OvHasViews())) return;
  CoreScope cs;
  for (auto& [fd, o] : AllOpen()) {
    std::lock_guard<std::mutex> g(o->pos_mu);
    if (!o->kernel_offset) {
      REAL(lseek)(fd, static_cast<off_t>(o->offset), SEEK_SET);
      o->kernel_offset = true;
    }
    (void)o->file->Flush();
  }
  if (g_engine != nullptr) g_engine->SyncAllViews();  // maps of files no longer open too
}

// At exit (after main's atexit handlers): every overlay file closes, so
// staged bytes reach the kernel's file, and the engine removes its log.
__attribute__((destructor)) void OverlayAtExit() {
  if (g_engine == nullptr || in_core) return;
  ::fflush(nullptr);  // cookie streams write through the overlay
  std::vector<OvRef> all;
  {
    std::unique_lock<std::shared_mutex> g(g_mu);
    if (g_table != nullptr) {
      for (auto& [fd, o] : *g_table) all.push_back(std::move(o));
      g_table->clear();
    }
    g_ov_count.store(0);
  }
  all.clear();
  std::lock_guard<std::mutex> g(g_eng_mu);
  CoreScope cs;
  delete g_engine;
  g_engine = nullptr;
}

// No open overlay file: nothing staged (close relinks) and no size cached
// that a call could use without taking it afresh (a reopen does), so the
// engine need not hear of the lock.
int OverlayBeforeLock() {
  if (in_core || g_ov_count.load(std::memory_order_relaxed) == 0) return 0;
  overlay::Engine* e = g_engine;
  if (e == nullptr || !e->PublishPending()) return 0;
  int saved = errno;
  CoreScope cs;
  Status st = e->BeforeLock();
  if (!st.ok()) return Fail(st);
  errno = saved;
  return 0;
}

namespace {
// Set by the first lock call the process made (it cannot be told from the
// kernel cheaply): until then no close can release a lock.
std::atomic<bool> g_took_locks{false};
}  // namespace

int OverlayBeforeRelease() {
  if (!g_took_locks.load(std::memory_order_relaxed)) return 0;
  return OverlayBeforeLock();
}

void OverlayAfterLock() {
  // The engine's own locks (its op log's flock) go through the shim in the
  // core: they must not set the flag, or every close of the process would
  // take the publish path.
  if (in_core) return;
  if (!g_took_locks.load(std::memory_order_relaxed)) g_took_locks.store(true, std::memory_order_relaxed);
  if (g_ov_count.load(std::memory_order_relaxed) == 0) return;
  overlay::Engine* e = g_engine;
  if (e != nullptr) e->AfterLock();
}

void OverlaySyncAll() {
  if (in_core || g_ov_count.load() == 0) return;
  CoreScope cs;
  for (auto& [fd, o] : AllOpen()) (void)o->file->Sync();
}

}  // namespace mapfs::preload
