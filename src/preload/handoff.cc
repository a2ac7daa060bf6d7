// Handing descriptions and the working directory from one process image to
// the next: fork (the child adopts the parent's descriptions), exec (each
// description the new image keeps is described in a memfd record it adopts
// at load), and exit (whether the pool is left idle). The records are
// bytes inherited from another process and are checked before use.
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

namespace {

constexpr char kRecordMagic[8] = {'M', 'A', 'P', 'F', 'S', 'F', 'D', '1'};
constexpr char kMemfdName[] = "mapfs-fd";
constexpr char kCwdMagic[8] = {'M', 'A', 'P', 'F', 'S', 'C', 'W', 'D'};
constexpr char kCwdMemfdName[] = "mapfs-cwd";
// The descriptions an exec does not carry (Shim::MarkExec): magic, then
// uint32 pool path length and uint32 count, the pool path, and `count`
// 64-bit inode numbers.
constexpr char kDropMagic[8] = {'M', 'A', 'P', 'F', 'S', 'D', 'R', 'P'};
constexpr char kDropMemfdName[] = "mapfs-drop";
constexpr uint32_t kMaxDrops = 1u << 20;

// What a placeholder memfd holds after a handoff: enough for a new image
// (after exec) to adopt the description.
struct HandoffRecord {
  char magic[8];
  uint64_t ino;
  int32_t flags;
  int32_t status_flags;
  uint32_t pool_len;
  uint32_t path_len;
  // followed by the pool path, then the mapfs path
};

// Hand-off records are bytes inherited from another process: one that does
// not parse is ignored (its descriptor stays a plain memfd of the program)
// and reported once per process, not once per record.
void WarnBadRecord(const char* kind, int fd) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    MAPFS_LOG("mapfs: ignoring a malformed inherited %s record (descriptor %d); any more are ignored silently",
              kind, fd);
}

// Reads the two strings (pool path, mapfs path) after a hand-off record's
// header at `at`. The lengths are inherited bytes: each must be a path
// length (the pool's at most PATH_MAX; the mapfs path may be a cwd deeper
// than that, up to kMaxRecordPath) and the memfd must hold them exactly;
// their sum is taken in 64 bits.
bool ReadRecordTail(int fd, size_t at, uint32_t a, uint32_t b, std::string* out) {
  if (a > PATH_MAX || b > kMaxRecordPath) return false;
  uint64_t n = uint64_t{a} + b;
  struct stat st;
  if (REAL(fstat)(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != at + n) return false;
  out->assign(n, '\0');
  return REAL(pread)(fd, out->data(), n, static_cast<off_t>(at)) == static_cast<ssize_t>(n);
}

}  // namespace

// ---------------------------------------------------------------- ending

bool Shim::HoldsNothing() {
  {
    std::shared_lock<std::shared_mutex> g(mu_);
    for (int b = 0; b < kL1; b++) {
      DescRef* blk = table_[b].load();
      if (blk == nullptr) continue;
      for (int i = 0; i < kL2; i++)
        if (blk[i]) return false;
    }
  }
  return MappedDescs().empty();
}

void Shim::MarkIdleExit(bool on) {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  if (!enabled_ || !fs_ || down_.load()) return;
  fs_->mount().pool().MarkIdleExit(on);
}

namespace {
// True when the calling thread is the process's only one
// (/proc/self/stat, field 20).
bool SingleThreaded() {
  int fd = REAL(open)("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = REAL(read)(fd, buf, sizeof buf - 1);
  REAL(close)(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold anything
  if (p == nullptr) return false;
  // Fields after the name: 3 (state) ... 20 (num_threads).
  for (int field = 2; field < 20 && p != nullptr; field++) p = std::strchr(p + 1, ' ');
  return p != nullptr && std::strtol(p + 1, nullptr, 10) == 1;
}
}  // namespace

Shim::ExecMark Shim::MarkExec() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  ExecMark m;
  if (!enabled_ || !fs_ || down_.load() || !SingleThreaded()) return m;
  // Each description this image holds, once: `kept` ones have a descriptor
  // that survives the exec (its hand-off record goes with it), the others
  // are lost with the image and must be closed by the next one.
  std::vector<DescRef> kept, lost;
  auto has = [](const std::vector<DescRef>& v, const Desc* d) {
    for (const DescRef& o : v)
      if (o.get() == d) return true;
    return false;
  };
  {
    std::shared_lock<std::shared_mutex> g(mu_);
    for (int b = 0; b < kL1; b++) {
      DescRef* blk = table_[b].load();
      if (blk == nullptr) continue;
      for (int i = 0; i < kL2; i++) {
        if (!blk[i]) continue;
        int fl = REAL(fcntl)(b * kL2 + i, F_GETFD);
        if (!has(kept, blk[i].get()) && fl >= 0 && !(fl & FD_CLOEXEC) && blk[i]->kernel_offset.load()) {
          kept.push_back(blk[i]);
          for (auto it = lost.begin(); it != lost.end(); ++it)
            if (it->get() == blk[i].get()) {
              lost.erase(it);
              break;
            }
        } else if (!has(kept, blk[i].get()) && !has(lost, blk[i].get())) {
          lost.push_back(blk[i]);
        }
      }
    }
  }
  for (const DescRef& d : MappedDescs())
    if (!has(kept, d.get()) && !has(lost, d.get())) lost.push_back(d);
  if (kept.empty() && lost.empty()) {
    fs_->mount().pool().MarkIdleExit(true);
    m.kind = 1;
    return m;
  }
  if (!lost.empty()) {
    CoreScope cs;
    std::string rec(kDropMagic, 8);
    uint32_t lens[2] = {static_cast<uint32_t>(pool_.size()), static_cast<uint32_t>(lost.size())};
    rec.append(reinterpret_cast<const char*>(lens), sizeof lens);
    rec += pool_;
    for (const DescRef& d : lost) rec.append(reinterpret_cast<const char*>(&d->file->ino), sizeof(uint64_t));
    // Not close-on-exec: it is for the next image.
    int fd = MoveHigh(::memfd_create(kDropMemfdName, 0));
    if (fd < 0) return m;
    if (REAL(pwrite)(fd, rec.data(), rec.size(), 0) != static_cast<ssize_t>(rec.size())) {
      CloseInternal(fd);
      return m;
    }
    m.drop_fd = fd;
  }
  m.n = kept.size() + lost.size();
  m.kind = 2;
  fs_->mount().pool().MarkHandoffExit(m.n, true);
  return m;
}

void Shim::EndAtExit() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  if (!enabled_ || !fs_ || down_.load()) return;
  if (SingleThreaded()) {
    // A signal handler may have interrupted this thread inside a wrapper
    // that holds the table: then leave it all to recovery.
    std::vector<DescRef> all;
    {
      std::unique_lock<std::shared_mutex> g(mu_, std::try_to_lock);
      if (!g.owns_lock()) return;
      all = TakeAllLocked();
    }
    DropMaps();
    all.clear();  // the last references: each description is closed in the core
  }
  if (HoldsNothing()) MarkIdleExit(true);
}

void Shim::UnmarkExec(ExecMark& m) {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  if (m.drop_fd >= 0) CloseInternal(m.drop_fd);
  m.drop_fd = -1;
  if (m.kind == 1) MarkIdleExit(false);
  if (m.kind == 2 && fs_ && !down_.load()) fs_->mount().pool().MarkHandoffExit(m.n, false);
  m.kind = 0;
}

int64_t Shim::AdoptDrops(int fd, bool counted) {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  struct {
    char magic[8];
    uint32_t pool_len, count;
  } h;
  struct stat st;
  if (REAL(pread)(fd, &h, sizeof h, 0) != sizeof h || std::memcmp(h.magic, kDropMagic, 8) != 0 ||
      h.pool_len > PATH_MAX || h.count > kMaxDrops || REAL(fstat)(fd, &st) != 0 ||
      static_cast<uint64_t>(st.st_size) != sizeof h + uint64_t{h.pool_len} + uint64_t{h.count} * 8)
    return -1;
  std::string rest(static_cast<size_t>(st.st_size) - sizeof h, '\0');
  if (REAL(pread)(fd, rest.data(), rest.size(), sizeof h) != static_cast<ssize_t>(rest.size())) return -1;
  if (rest.compare(0, h.pool_len, pool_) != 0 || h.pool_len != pool_.size()) return -1;
  // Started by posix_spawn & co.: the counts are not this process's to close.
  if (!counted) return -1;
  fs::FileSystem* f = Fs();
  if (f == nullptr) return -1;
  int64_t closed = 0;
  for (uint32_t i = 0; i < h.count; i++) {
    uint64_t ino;
    std::memcpy(&ino, rest.data() + h.pool_len + size_t{i} * 8, 8);
    // Taking the old image's count over and closing it, as that image's
    // exit would have: an unlinked file open nowhere else is freed.
    auto of = f->Adopt(ino, O_RDONLY, true);
    if (!of.ok()) return -1;
    (void)f->Close(**of);
    closed++;
  }
  return closed;
}

// ---------------------------------------------------------------- handoff

void Shim::Handoff() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  SyncMirroredMaps();  // what the next program reads (and what an exec would lose) is in the file
  std::unique_lock<std::shared_mutex> g(mu_);
  HandoffLocked(false);
}

// The table lock is held shared across the fork: a child may release a
// read lock its parent took (glibc takes a write lock's owner from the
// thread id, which the child does not share), and shared is enough to keep
// the table unchanged. fork_mu_ keeps two forking threads apart.
void Shim::ForkPrepare() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  fork_mu_.lock();
  mu_.lock_shared();
  HandoffLocked(true);
}

void Shim::ForkDone() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  for (const DescRef& d : fork_held_) d->pos_mu.unlock();
  fork_held_.clear();  // the table still holds every one of them
  mu_.unlock_shared();
  fork_mu_.unlock();
}

void Shim::HandoffLocked(bool keep_pos) {
  // Group the descriptor numbers by description. Each one's position lock
  // is taken before its offset is read: a read or write in flight on the
  // shim's offset finishes first, and any later one sees the offset in the
  // kernel (PositionLock reads kernel_offset under the lock).
  std::vector<std::pair<Desc*, std::vector<int>>> groups;
  std::vector<DescRef> held;
  for (int b = 0; b < kL1; b++) {
    DescRef* blk = table_[b].load();
    if (blk == nullptr) continue;
    for (int i = 0; i < kL2; i++) {
      if (!blk[i]) continue;
      Desc* d = blk[i].get();
      auto h = held.begin();
      while (h != held.end() && h->get() != d) ++h;
      if (h == held.end()) {
        d->pos_mu.lock();
        held.push_back(blk[i]);
      }
      if (d->kernel_offset.load()) continue;
      auto it = groups.begin();
      while (it != groups.end() && it->first != d) ++it;
      if (it == groups.end()) groups.push_back({d, {b * kL2 + i}});
      else it->second.push_back(b * kL2 + i);
    }
  }
  struct Release {
    std::vector<DescRef>* held;
    std::vector<DescRef>* keep;
    ~Release() {
      if (keep != nullptr) {
        *keep = std::move(*held);
        return;
      }
      for (const DescRef& d : *held) d->pos_mu.unlock();
    }
  } release{&held, keep_pos ? &fork_held_ : nullptr};
  CoreScope cs;
  HandoffCwd();
  for (auto& [d, fds] : groups) {
    int mfd = ::memfd_create(kMemfdName, MFD_CLOEXEC);
    if (mfd < 0) continue;
    HandoffRecord rec{};
    std::memcpy(rec.magic, kRecordMagic, 8);
    rec.ino = d->file->ino;
    rec.flags = d->file->flags;
    rec.status_flags = d->status_flags;
    rec.pool_len = static_cast<uint32_t>(pool_.size());
    rec.path_len = static_cast<uint32_t>(d->path.size());
    std::string buf(reinterpret_cast<const char*>(&rec), sizeof rec);
    buf += pool_;
    buf += d->path;
    bool ok = REAL(pwrite)(mfd, buf.data(), buf.size(), 0) == static_cast<ssize_t>(buf.size());
    // A read-only description of the memfd: a raw write() that bypasses the
    // shim fails instead of vanishing into the record.
    std::string self = "/proc/self/fd/" + std::to_string(mfd);
    int ro = ok ? REAL(open)(self.c_str(), O_RDONLY | O_CLOEXEC) : -1;
    REAL(close)(mfd);
    if (ro < 0) continue;
    REAL(lseek)(ro, static_cast<off_t>(d->file->offset), SEEK_SET);
    for (int fd : fds) {
      int fdflags = REAL(fcntl)(fd, F_GETFD);
      REAL(dup3)(ro, fd, (fdflags & FD_CLOEXEC) ? O_CLOEXEC : 0);
    }
    REAL(close)(ro);
    d->kernel_offset.store(true);
  }
}

void Shim::HandoffCwd() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  std::string path;
  if (cwd_mapfs_.load()) {
    std::lock_guard<std::mutex> g(cwd_mu_);
    path = cwd_path_;
  }
  if (cwd_fd_ >= 0 && path == cwd_fd_path_) return;
  // Never rewritten in place: children forked earlier (and siblings of a
  // pipeline, racing to exec) share the old memfd and must read the cwd
  // they were started with. A change gets a new one.
  if (cwd_fd_ >= 0) CloseInternal(cwd_fd_);
  cwd_fd_ = -1;
  cwd_fd_path_.clear();
  if (path.empty()) return;
  int fd = MoveHigh(::memfd_create(kCwdMemfdName, 0));
  if (fd < 0) return;
  std::string rec(kCwdMagic, 8);
  uint32_t lens[2] = {static_cast<uint32_t>(pool_.size()), static_cast<uint32_t>(path.size())};
  rec.append(reinterpret_cast<const char*>(lens), sizeof lens);
  rec += pool_;
  rec += path;
  if (REAL(pwrite)(fd, rec.data(), rec.size(), 0) != static_cast<ssize_t>(rec.size())) {
    CloseInternal(fd);
    return;
  }
  cwd_fd_ = fd;
  cwd_fd_path_ = std::move(path);
}

void Shim::AfterForkChild() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  if (!fs_) return;
  CoreScope cs;
  (void)fs_->AfterFork();
  for (int b = 0; b < kL1; b++) {
    DescRef* blk = table_[b].load();
    if (blk == nullptr) continue;
    std::vector<Desc*> seen;
    for (int i = 0; i < kL2; i++) {
      if (!blk[i]) continue;
      bool dup = false;
      for (Desc* s : seen) dup |= s == blk[i].get();
      if (dup) continue;
      seen.push_back(blk[i].get());
      fs_->RetainOpen(*blk[i]->file);
    }
  }
  // Descriptions only a memory map holds are this process's too.
  for (const DescRef& d : MappedDescs()) {
    bool held = false;
    for (int b = 0; b < kL1 && !held; b++) {
      DescRef* blk = table_[b].load();
      for (int i = 0; blk != nullptr && i < kL2 && !held; i++) held = blk[i].get() == d.get();
    }
    if (!held) fs_->RetainOpen(*d->file);
  }
}

void Shim::Adopt() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  CoreScope cs;
  // Started by posix_spawn/system/popen: the inherited open counts are the
  // parent's, so this image adds its own (see proc_calls.cc).
  bool counted = std::getenv("MAPFS_SPAWNED") == nullptr;
  ::unsetenv("MAPFS_SPAWNED");
  DIR* dir = REAL(opendir)("/proc/self/fd");
  if (dir == nullptr) return;
  std::vector<int> fds;
  while (struct dirent* e = REAL(readdir64) ? reinterpret_cast<struct dirent*>(REAL(readdir64)(dir)) : nullptr) {
    int fd = std::atoi(e->d_name);
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == REAL(dirfd)(dir)) continue;
    fds.push_back(fd);
  }
  REAL(closedir)(dir);
  std::vector<std::pair<ino_t, DescRef>> by_memfd;
  // Descriptions taken over from the old image (ConfirmHandoff), and
  // whether any could not be.
  uint64_t taken = 0, seen = 0;
  bool missed = false;
  adopting_ = counted;
  for (int fd : fds) {
    char link[64];
    std::string self = "/proc/self/fd/" + std::to_string(fd);
    ssize_t n = REAL(readlink)(self.c_str(), link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    if (std::strncmp(link, "/memfd:mapfs-cwd", 16) == 0) {
      AdoptCwd(fd);
      continue;
    }
    if (std::strncmp(link, "/memfd:mapfs-drop", 17) == 0) {
      int64_t n = AdoptDrops(fd, counted);
      if (n < 0) missed = true;
      else taken += static_cast<uint64_t>(n);
      REAL(close)(fd);
      continue;
    }
    if (std::strncmp(link, "/memfd:mapfs-fd", 15) != 0) continue;
    struct stat st;
    if (REAL(fstat)(fd, &st) != 0) continue;
    DescRef d;
    for (auto& [i, dr] : by_memfd)
      if (i == st.st_ino) d = dr;
    if (!d) {
      seen++;
      HandoffRecord rec;
      std::string tail;
      if (REAL(pread)(fd, &rec, sizeof rec, 0) != sizeof rec || std::memcmp(rec.magic, kRecordMagic, 8) != 0 ||
          !ReadRecordTail(fd, sizeof rec, rec.pool_len, rec.path_len, &tail)) {
        WarnBadRecord("descriptor", fd);
        continue;
      }
      if (tail.substr(0, rec.pool_len) != pool_) continue;
      fs::FileSystem* f = Fs();
      if (f == nullptr) continue;
      auto of = f->Adopt(rec.ino, rec.flags, counted);
      if (!of.ok()) continue;
      taken++;
      d = std::make_shared<Desc>(f, std::move(*of));
      d->status_flags = rec.status_flags;
      d->path = tail.substr(rec.pool_len);
      d->kernel_offset.store(true);
      by_memfd.push_back({st.st_ino, d});
    }
    std::unique_lock<std::shared_mutex> g(mu_);
    SlotLocked(fd) = d;
  }
  for (int fd = 0; fd <= 2; fd++)
    if (IsMapfs(fd)) FixStdio(fd);
  AdoptCwdFromEnv();
  // Every description the old image handed over is this image's now: its
  // mount's end needs no recovery (medium::Pool::ConfirmHandoff).
  if (adopting_ && fs_) fs_->mount().pool().ConfirmHandoff(taken, missed || taken < seen);
  adopting_ = false;
}

// ---------------------------------------------------------------- cwd

void Shim::AdoptCwd(int fd) {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  char hdr[16];
  std::string path;
  if (REAL(pread)(fd, hdr, sizeof hdr, 0) == sizeof hdr && std::memcmp(hdr, kCwdMagic, 8) == 0) {
    uint32_t lens[2];
    std::memcpy(lens, hdr + 8, sizeof lens);
    std::string tail;
    if (!ReadRecordTail(fd, sizeof hdr, lens[0], lens[1], &tail)) WarnBadRecord("cwd", fd);
    else if (tail.substr(0, lens[0]) == pool_) path = tail.substr(lens[0]);
  } else {
    WarnBadRecord("cwd", fd);
  }
  REAL(close)(fd);  // a later handoff makes a new one for this image's children
  if (path.empty() || path[0] != '/') return;
  fs::FileSystem* f = Fs();
  if (f == nullptr) return;
  CoreScope cs;
  auto ino = LookupAnyLength(f, path);  // a cwd may be longer than PATH_MAX
  if (ino.ok()) Chdir(*ino, path);
}

bool Shim::CwdIsMapfs() const { return cwd_mapfs_.load(std::memory_order_acquire); }

std::string Shim::CwdPath() const {
  std::lock_guard<std::mutex> g(cwd_mu_);
  return cwd_path_;
}

namespace {

// The kernel's cwd while the shim's is in the pool: a directory made and
// removed at once. A relative path in a call the shim does not see (bind()
// of a Unix socket, a raw system call, a library's own) then fails with
// ENOENT instead of acting on the directory the program started in. A new
// one for every chdir into the pool, so that MAPFS_CWD (below) names the
// moment it was written for. If none can be made, the kernel's cwd stays.
void EnterRemovedDirectory() {
  static const char* const kParents[] = {"/dev/shm", "/tmp", "/var/tmp"};  // tmpfs first: cheap
  for (const char* parent : kParents) {
    for (int attempt = 0; attempt < 4; attempt++) {
      uint64_t r = 0;
      if (::getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r)
        r = static_cast<uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(attempt);
      char name[96];
      std::snprintf(name, sizeof name, "%s/.mapfs-cwd-%d-%016llx", parent, static_cast<int>(::getpid()),
                    static_cast<unsigned long long>(r));
      if (REAL(mkdir)(name, 0700) != 0) {
        if (errno == EEXIST) continue;
        break;  // this parent is unusable
      }
      int rc = REAL(chdir)(name);
      REAL(rmdir)(name);
      if (rc == 0) return;
    }
  }
}

}  // namespace

int Shim::Chdir(uint64_t ino, std::string mapfs_path) {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  {
    std::lock_guard<std::mutex> g(cwd_mu_);
    cwd_ino_ = ino;
    cwd_path_ = std::move(mapfs_path);
    cwd_mapfs_.store(true, std::memory_order_release);
  }
  int saved = errno;
  EnterRemovedDirectory();
  errno = saved;
  // Second channel for new images, for programs that close every inherited
  // descriptor before exec (Python's subprocess) but pass `environ` on:
  // the kernel's cwd (which stays where it was) names the moment it is
  // valid for, so a stale copy of the environment is not believed.
  struct stat st;
  if (REAL(stat)(".", &st) == 0) {
    std::string v = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + CwdPath();
    SetCwdEnv(v);  // not setenv: it would keep every value (see cwd_env.h)
  }
  return 0;
}

void Shim::AdoptCwdFromEnv() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  const char* v = std::getenv("MAPFS_CWD");
  if (v == nullptr || cwd_mapfs_.load()) return;
  unsigned long long dev = 0, ino = 0;
  int n = 0;
  if (std::sscanf(v, "%llu:%llu:%n", &dev, &ino, &n) != 2 || v[n] != '/') return;
  struct stat st;
  if (REAL(stat)(".", &st) != 0 || st.st_dev != dev || st.st_ino != ino) return;
  fs::FileSystem* f = Fs();
  if (f == nullptr) return;
  CoreScope cs;
  auto i = LookupAnyLength(f, v + n);
  if (i.ok()) Chdir(*i, v + n);
}

void Shim::LeaveMapfsCwd() {
  medium::protection::Inside rights;  // the pool's rights: not always inside a CoreScope
  cwd_mapfs_.store(false, std::memory_order_release);
  ClearCwdEnv();
}

void Shim::FixStdio(int fd) { RedirectStdStream(fd); }

}  // namespace mapfs::preload
