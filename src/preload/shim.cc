#include "preload/shim.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "preload/cwd_env.h"
#include "preload/path_limits.h"
#include "preload/real.h"
#include "preload/stdio_redirect.h"

namespace mapfs::preload {

thread_local int in_core __attribute__((tls_model("initial-exec"))) = 0;

int Fail(const Status& st) {
  // A walk that left the pool in a call that cannot follow it there (a
  // wrapper without FollowOut: rename, link, symlink's parent ...): the
  // path crosses into another file system.
  if (st.code() == fs::kLeavesPool) {
    errno = EXDEV;
    return -1;
  }
  errno = st.code() ? st.code() : EIO;
  return -1;
}

namespace {

Shim* g_shim = nullptr;

void AtforkPrepare() {
  if (g_shim != nullptr && g_shim->enabled()) g_shim->ForkPrepare();
}
void AtforkParent() {
  if (g_shim != nullptr && g_shim->enabled()) g_shim->ForkDone();
}
void AtforkChild() {
  if (g_shim != nullptr && g_shim->enabled()) {
    g_shim->AfterForkChild();
    g_shim->ForkDone();
  }
}

// Lexically normalises an absolute path (collapses "//", ".", ".."),
// keeping a trailing slash.
std::string Normalize(std::string_view p) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < p.size()) {
    while (i < p.size() && p[i] == '/') i++;
    size_t j = i;
    while (j < p.size() && p[j] != '/') j++;
    std::string_view c = p.substr(i, j - i);
    if (c.empty() || c == ".") {
    } else if (c == "..") {
      if (!parts.empty()) parts.pop_back();
    } else {
      parts.push_back(c);
    }
    i = j;
  }
  std::string out;
  for (auto c : parts) {
    out += '/';
    out += c;
  }
  if (out.empty()) out = "/";
  else if (p.size() > 1 && p.back() == '/') out += '/';
  return out;
}

bool HasComponent(std::string_view p, std::string_view name) {
  size_t i = 0;
  while ((i = p.find(name, i)) != std::string_view::npos) {
    bool start = i == 0 || p[i - 1] == '/';
    bool end = i + name.size() == p.size() || p[i + name.size()] == '/';
    if (start && end) return true;
    i += name.size();
  }
  return false;
}

bool HasDotDot(std::string_view p) {
  size_t i = 0;
  while ((i = p.find("..", i)) != std::string_view::npos) {
    bool start = i == 0 || p[i - 1] == '/';
    bool end = i + 2 == p.size() || p[i + 2] == '/';
    if (start && end) return true;
    i += 2;
  }
  return false;
}

// Whether walking `rel` lexically from depth `depth` below the pool root
// climbs above it.
bool Escapes(std::string_view rel, int depth) {
  size_t i = 0;
  while (i < rel.size()) {
    while (i < rel.size() && rel[i] == '/') i++;
    size_t j = i;
    while (j < rel.size() && rel[j] != '/') j++;
    std::string_view c = rel.substr(i, j - i);
    if (c == "..") {
      if (--depth < 0) return true;
    } else if (!c.empty() && c != ".") {
      depth++;
    }
    i = j;
  }
  return false;
}

int Depth(std::string_view p) {
  int d = 0;
  for (size_t i = 0; i < p.size(); i++)
    if (p[i] != '/' && (i == 0 || p[i - 1] == '/')) d++;
  return d;
}

}  // namespace

std::string NormalizePath(std::string_view p) { return Normalize(p); }

namespace {
constexpr int kMaxInternal = 1 << 20;
std::atomic<uint64_t> g_internal[kMaxInternal / 64];
void MarkInternal(int fd, bool on) {
  if (fd < 0 || fd >= kMaxInternal) return;
  uint64_t bit = uint64_t{1} << (fd % 64);
  if (on) g_internal[fd / 64].fetch_or(bit);
  else g_internal[fd / 64].fetch_and(~bit);
}
}  // namespace

bool IsInternal(int fd) {
  return fd >= 0 && fd < kMaxInternal && (g_internal[fd / 64].load(std::memory_order_relaxed) >> (fd % 64) & 1);
}

int NextInternal(unsigned from, unsigned to) {
  for (unsigned w = from / 64; w < kMaxInternal / 64 && w * 64 <= to; w++) {
    uint64_t bits = g_internal[w].load(std::memory_order_relaxed);
    if (w == from / 64) bits &= ~uint64_t{0} << (from % 64);
    if (bits == 0) continue;
    unsigned fd = w * 64 + static_cast<unsigned>(__builtin_ctzll(bits));
    return fd <= to ? static_cast<int>(fd) : -1;
  }
  return -1;
}

int CloseInternal(int fd) {
  MarkInternal(fd, false);
  return REAL(close)(fd);
}

int HighBase() {
  static int base = [] {
    struct rlimit rl;
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1000;
    return rl.rlim_cur > 1100 ? 1000 : static_cast<int>(rl.rlim_cur * 3 / 4);
  }();
  return base;
}

int DupHigh(int fd) {
  int high = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, HighBase());
  if (high < 0) high = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 0);  // no room up there: a low number
  if (high >= 0) MarkInternal(high, true);
  return high;
}

int KeepInternal(int fd) {
  MarkInternal(fd, true);
  return fd;
}

int MoveHigh(int fd) {
  const int base = HighBase();
  if (fd < 0) return fd;
  if (fd >= base) {
    MarkInternal(fd, true);
    return fd;
  }
  int fl = REAL(fcntl)(fd, F_GETFD);
  int high = REAL(fcntl)(fd, (fl & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, base);
  if (high < 0) high = fd;  // no room up there: keep the low number
  else REAL(close)(fd);
  MarkInternal(high, true);
  return high;
}

PositionLock::PositionLock(Desc& d, int fd) : d_(&d) {
  d.pos_mu.lock();
  // Read under the lock: a hand-off sets it while holding the lock.
  kernel_ = d.kernel_offset.load(std::memory_order_acquire);
  if (!kernel_) return;
  // A forked child holds the parent's descriptor of the memfd, the same
  // description: OFD locks would not exclude each other. Each process
  // takes its own.
  pid_t me = ::getpid();
  if (d.pos_pid != me) {
    if (d.pos_fd >= 0) CloseInternal(d.pos_fd);
    std::string self = "/proc/self/fd/" + std::to_string(fd);
    d.pos_fd = MoveHigh(REAL(open)(self.c_str(), O_RDWR | O_CLOEXEC));
    d.pos_pid = me;
  }
  if (d.pos_fd < 0) return;  // cannot reopen: threads are still serialised
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  l.l_start = 0;
  l.l_len = 1;
  while (REAL(fcntl)(d.pos_fd, F_OFD_SETLKW, &l) != 0) {
    if (errno != EINTR) return;
  }
  ofd_ = true;
}

PositionLock::~PositionLock() {
  if (ofd_) {
    struct flock l {};
    l.l_type = F_UNLCK;
    l.l_whence = SEEK_SET;
    l.l_start = 0;
    l.l_len = 1;
    REAL(fcntl)(d_->pos_fd, F_OFD_SETLK, &l);
  }
  d_->pos_mu.unlock();
}

Desc::~Desc() {
  if (pos_fd >= 0) CloseInternal(pos_fd);
  if (lock_fd.load() >= 0) CloseInternal(lock_fd.load());  // drops its OFD locks and flock
  if (file) {
    CoreScope cs;
    (void)fsys->Close(*file);
  }
}

Shim& Shim::Get() {
  static Shim* s = [] {
    auto* p = new Shim();  // never destroyed: wrappers may run during exit
    g_shim = p;
    if (p->enabled_) {
      // The protection key, before anything maps the pool (the mount is
      // lazy, Adopt may mount now): every later CoreScope opens it.
      // (In a CoreScope: its log line must not come back through the
      // wrappers into this initialisation.)
      {
        CoreScope cs;
        (void)medium::protection::Enable();
      }
      ::pthread_atfork(AtforkPrepare, AtforkParent, AtforkChild);
      p->Adopt();
    }
    return p;
  }();
  return *s;
}

Shim::Shim() {
  CoreScope cs;
  const char* pool = std::getenv("MAPFS_POOL");
  if (pool == nullptr || *pool == '\0') return;
  pool_ = pool;
  const char* mnt = std::getenv("MAPFS_MOUNT");
  prefix_ = Normalize(mnt && *mnt ? mnt : "/mapfs");
  if (prefix_.size() > 1 && prefix_.back() == '/') prefix_.pop_back();
  if (prefix_ == "/") {  // the whole tree cannot belong to mapfs: route nothing, and say so
    static const char kWhy[] = "mapfs: MAPFS_MOUNT=/ would give every path to the pool: the shim routes nothing\n";
    (void)!REAL(write)(2, kWhy, sizeof kWhy - 1);
    return;
  }
  prefix_name_ = prefix_.substr(prefix_.rfind('/') + 1);
  devnull_ = MoveHigh(REAL(open)("/dev/null", O_RDONLY | O_CLOEXEC));
  if (devnull_ < 0) return;
  enabled_ = true;
}

fs::FileSystem* Shim::Fs() {
  if (!enabled_) {
    errno = ENOSYS;
    return nullptr;
  }
  std::call_once(mount_once_, [this] {
    CoreScope cs;
    fs::FsOptions fo;
    fo.prefix = prefix_;  // symlink targets are paths of this process's namespace
    fo.take_handoff = adopting_;
    fo.protect = true;  // every wrapper holds the rights (CoreScope)
    if (const char* m = std::getenv("MAPFS_MODE")) {
      if (!std::strcmp(m, "posix")) fo.mode = 0;
      else if (!std::strcmp(m, "sync")) fo.mode = 1;
      else if (!std::strcmp(m, "strict")) fo.mode = 2;
    }
    auto r = fs::FileSystem::Mount(pool_, fo);
    if (r.ok()) {
      fs_ = std::move(*r);
    } else {
      mount_errno_ = r.status().code() ? r.status().code() : EIO;
      // Said once per process, on stderr: every call on the prefix fails
      // from now on and errno alone cannot say why (`mapfs run` checks
      // the pool before it starts the program; a bare LD_PRELOAD does not).
      std::string line = "mapfs: " + prefix_ + " is unusable: " + r.status().message();
      if (r.status().message().find(pool_) == std::string::npos) line += " (pool " + pool_ + ")";
      line += "\n";
      (void)!REAL(write)(2, line.data(), line.size());
    }
  });
  if (!fs_ || down_.load(std::memory_order_acquire)) {
    errno = fs_ ? EIO : mount_errno_;
    return nullptr;
  }
  return fs_.get();
}

void Shim::Shutdown() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  if (!enabled_ || !fs_ || down_.exchange(true)) return;
  ::fflush(nullptr);  // cookie streams write through the file system
  std::vector<DescRef> all;
  {
    std::unique_lock<std::shared_mutex> g(mu_);
    all = TakeAllLocked();
  }
  DropMaps();
  all.clear();  // closes the descriptions this process holds
  CoreScope cs;
  (void)fs_->Unmount();
}

namespace {
// At load: descriptors inherited across exec must be adopted before the
// program does its first I/O, which may be through stdio (whose writes the
// shim never sees) rather than a call that would start the shim lazily.
__attribute__((constructor)) void ShimAtLoad() {
  const char* pool = std::getenv("MAPFS_POOL");
  if (pool != nullptr && *pool != '\0') (void)Shim::Get();
}

// Runs after main's atexit handlers and before the C library's own flush of
// stdio, which is why Shutdown flushes first.
__attribute__((destructor)) void ShimAtExit() {
  if (g_shim != nullptr) g_shim->Shutdown();
}
}  // namespace

Route Shim::Classify(int dirfd, const char* path) {
  Route r;
  if (!enabled_ || path == nullptr || in_core) return r;
  // The common case, first and cheap: an absolute kernel path (not under
  // the prefix, no "//" that could hide it, no ".." that could lead in).
  if (path[0] == '/' && path[1] != '/' && std::strncmp(path, prefix_.c_str(), prefix_.size()) != 0 &&
      std::strstr(path, "..") == nullptr)
    return r;
  std::string_view p(path);
  if (p.empty()) return r;
  r = ClassifySlow(dirfd, p);
  KeepLengthVerdict(&r, p.size());
  return r;
}

Route Shim::ClassifySlow(int dirfd, std::string_view p) {
  Route r;
  std::string full;
  if (p[0] != '/') {
    uint64_t at;
    std::string base;
    bool mapfs_dir = false;
    if (dirfd == AT_FDCWD) {
      mapfs_dir = cwd_mapfs_.load(std::memory_order_acquire);
      if (mapfs_dir) {
        std::lock_guard<std::mutex> g(cwd_mu_);
        at = cwd_ino_;
        base = cwd_path_;
      }
    } else if (IsMapfs(dirfd)) {
      DescRef d = Lookup(dirfd);
      if (!d) return r;
      mapfs_dir = true;
      at = d->file->ino;
      base = d->path;
    }
    if (!mapfs_dir) {
      // A kernel directory: the path can only enter mapfs through the
      // mount's own name (rsync walks "/" then "mapfs" with openat).
      if (!HasComponent(p, prefix_name_)) return r;
      char dir[PATH_MAX];
      if (dirfd == AT_FDCWD) {
        if (REAL(getcwd)(dir, sizeof dir) == nullptr) return r;
      } else {
        std::string self = "/proc/self/fd/" + std::to_string(dirfd);
        ssize_t n = REAL(readlink)(self.c_str(), dir, sizeof dir - 1);
        if (n <= 0 || dir[0] != '/') return r;
        dir[n] = '\0';
      }
      full = std::string(dir) + "/" + std::string(p);
      p = full;
    } else if (!HasDotDot(p) || !Escapes(p, Depth(base))) {
      r.mapfs = true;
      r.at = at;
      r.path.assign(p);
      r.base = std::move(base);
      return r;
    } else {
      full = prefix_ + base + "/" + std::string(p);
      p = full;
    }
  }
  // Absolute. Fast path: a plain prefix match.
  std::string_view q = p;
  while (q.size() > 1 && q[0] == '/' && q[1] == '/') q.remove_prefix(1);
  auto under = [&](std::string_view s) {
    return s.size() >= prefix_.size() && s.compare(0, prefix_.size(), prefix_) == 0 &&
           (s.size() == prefix_.size() || s[prefix_.size()] == '/');
  };
  if (!HasDotDot(q)) {
    if (!under(q)) return r;
    r.mapfs = true;
    r.path = q.size() == prefix_.size() ? "/" : std::string(q.substr(prefix_.size()));
    return r;
  }
  std::string n = Normalize(q);
  if (!under(n)) {
    // Leaves mapfs (or never entered it): the kernel gets the normalised path.
    if (under(q)) r.path = n;  // keep the kernel from seeing "/mapfs/.."
    return r;
  }
  r.mapfs = true;
  r.path = under(q) ? std::string(q.substr(prefix_.size())) : n.substr(prefix_.size());
  if (r.path.empty()) r.path = "/";
  return r;
}

// ---------------------------------------------------------------- table

bool Shim::IsMapfs(int fd) const {
  if (fd < 0 || fd >= kL1 * kL2) return false;
  DescRef* blk = table_[fd / kL2].load(std::memory_order_acquire);
  if (blk == nullptr) return false;
  // A racy peek is enough to say "not ours": numbers are only ours while
  // their placeholder exists, and a call racing its own close is a bug of
  // the program's. Callers that go on take the lock in Lookup.
  std::shared_lock<std::shared_mutex> g(mu_);
  return static_cast<bool>(blk[fd % kL2]);
}

DescRef Shim::Lookup(int fd) const {
  if (fd < 0 || fd >= kL1 * kL2) return nullptr;
  DescRef* blk = table_[fd / kL2].load(std::memory_order_acquire);
  if (blk == nullptr) return nullptr;
  std::shared_lock<std::shared_mutex> g(mu_);
  return blk[fd % kL2];
}

int Shim::Placeholder(bool cloexec, int min_fd) {
  return REAL(fcntl)(devnull_, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, min_fd);
}

int Shim::AnyFdOf(const Desc* d) const {
  std::shared_lock<std::shared_mutex> g(mu_);
  for (int b = 0; b < kL1; b++) {
    DescRef* blk = table_[b].load();
    if (blk == nullptr) continue;
    for (int i = 0; i < kL2; i++)
      if (blk[i].get() == d) return b * kL2 + i;
  }
  return -1;
}

DescRef& Shim::SlotLocked(int fd) {
  DescRef* blk = table_[fd / kL2].load();
  if (blk == nullptr) {
    blk = new DescRef[kL2];
    table_[fd / kL2].store(blk, std::memory_order_release);
  }
  return blk[fd % kL2];
}

int Shim::Install(DescRef d, bool cloexec, int min_fd) {
  int fd = Placeholder(cloexec, min_fd);
  if (fd < 0) return -1;
  if (fd >= kL1 * kL2) {
    REAL(close)(fd);
    return FailErrno(EMFILE);
  }
  if (d->kernel_offset.load()) {
    // The description already has its memfd: share it.
    int src = AnyFdOf(d.get());
    if (src >= 0) REAL(dup3)(src, fd, cloexec ? O_CLOEXEC : 0);
  }
  std::unique_lock<std::shared_mutex> g(mu_);
  SlotLocked(fd) = std::move(d);
  return fd;
}

int Shim::InstallAt(DescRef d, int newfd, bool cloexec) {
  if (newfd < 0 || newfd >= kL1 * kL2) return FailErrno(EBADF);
  int src = AnyFdOf(d.get());  // a descriptor of `d` to duplicate onto newfd
  DescRef old;
  std::unique_lock<std::shared_mutex> g(mu_);
  int r = src >= 0 ? REAL(dup3)(src, newfd, cloexec ? O_CLOEXEC : 0) : -1;
  if (src < 0) {
    int tmp = REAL(fcntl)(devnull_, F_DUPFD_CLOEXEC, 0);
    if (tmp < 0) return -1;
    r = REAL(dup3)(tmp, newfd, cloexec ? O_CLOEXEC : 0);
    REAL(close)(tmp);
  }
  if (r < 0) return -1;
  DescRef& slot = SlotLocked(newfd);
  old = std::move(slot);
  slot = std::move(d);
  g.unlock();
  old.reset();
  if (newfd <= 2) FixStdio(newfd);
  return newfd;
}

DescRef Shim::Remove(int fd) {
  if (fd < 0 || fd >= kL1 * kL2) return nullptr;
  DescRef* blk = table_[fd / kL2].load();
  if (blk == nullptr) return nullptr;
  std::unique_lock<std::shared_mutex> g(mu_);
  return std::move(blk[fd % kL2]);
}

void Shim::ForgetRange(unsigned lo, unsigned hi) {
  std::vector<DescRef> gone;
  std::unique_lock<std::shared_mutex> g(mu_);
  for (int b = static_cast<int>(lo / kL2); b < kL1 && static_cast<unsigned>(b) * kL2 <= hi; b++) {
    DescRef* blk = table_[b].load();
    if (blk == nullptr) continue;
    for (int i = 0; i < kL2; i++) {
      unsigned fd = static_cast<unsigned>(b * kL2 + i);
      if (fd >= lo && fd <= hi && blk[i]) gone.push_back(std::move(blk[i]));
    }
  }
  g.unlock();
}

// ---------------------------------------------------------------- offsets

int64_t Shim::Offset(const Desc& d, int fd) {
  if (d.kernel_offset.load(std::memory_order_acquire)) return REAL(lseek)(fd, 0, SEEK_CUR);
  return static_cast<int64_t>(d.file->offset);
}

void Shim::SetOffset(Desc& d, int fd, int64_t off) {
  if (d.kernel_offset.load(std::memory_order_acquire)) REAL(lseek)(fd, off, SEEK_SET);
  else d.file->offset = static_cast<uint64_t>(off);
}

std::vector<DescRef> Shim::TakeAllLocked() {
  std::vector<DescRef> all;
  for (int b = 0; b < kL1; b++) {
    DescRef* blk = table_[b].load();
    if (blk == nullptr) continue;
    for (int i = 0; i < kL2; i++)
      if (blk[i]) all.push_back(std::move(blk[i]));
  }
  return all;
}

void Shim::SyncAll() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  std::vector<DescRef> all;
  {
    std::shared_lock<std::shared_mutex> g(mu_);
    for (int b = 0; b < kL1; b++) {
      DescRef* blk = table_[b].load();
      if (blk == nullptr) continue;
      for (int i = 0; i < kL2; i++)
        if (blk[i]) all.push_back(blk[i]);
    }
  }
  CoreScope cs;
  for (auto& d : all) (void)d->fsys->Fsync(*d->file);
}

}  // namespace mapfs::preload
