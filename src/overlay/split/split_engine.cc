// The split engine: opening an overlay (recovery first), adopting kernel
// descriptors into shared per-file state, staging files, stat corrections.
#include "overlay/split/split_engine.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "common/log.h"
#include "overlay/split/file_state.h"
#include "overlay/split/relink.h"
#include "vm/fault_guard.h"

namespace mapfs::overlay::split {
std::string Name(const char* kind, const std::string& tag, int pair) {
  char b[96];
  snprintf(b, sizeof b, "%s-%s-%d", kind, tag.c_str(), pair);
  return b;
}

namespace {

std::string ProcFd(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

}  // namespace

SplitEngine::~SplitEngine() {
  // OverlayFiles must be closed before their engine; what is left is
  // released here without relinking (the process is going away). Idle
  // files have nothing pending.
  bool open_files = false;
  for (auto& [k, st] : files_) {
    open_files = open_files || st->refs > 0;
    DropStaging(*st, true);
    Shut(*st);
  }
  idle_.clear();
  DropSpares();
  // Nothing pending once every file is closed: the log goes (a crash
  // leaves it to the next OpenOverlay's recovery instead).
  if (!open_files && dir_fd_ >= 0 && !log_.tag().empty()) unlinkat(dir_fd_, ("log-" + log_.tag()).c_str(), 0);
  if (dir_fd_ >= 0) close(dir_fd_);
  if (root_fd_ >= 0) close(root_fd_);
}

Result<std::unique_ptr<SplitEngine>> SplitEngine::Open(const Options& o) {
  std::unique_ptr<SplitEngine> e(new SplitEngine());
  e->opt_ = o;
  e->root_fd_ = open(o.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (e->root_fd_ < 0) return Status::FromErrno("overlay root " + o.dir);
  if (mkdirat(e->root_fd_, kHiddenDir, 0700) != 0 && errno != EEXIST)
    return Status::FromErrno("overlay: create " + o.dir + "/" + kHiddenDir);
  e->dir_fd_ = openat(e->root_fd_, kHiddenDir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (e->dir_fd_ < 0) return Status::FromErrno("overlay: open " + o.dir + "/" + kHiddenDir);
  e->method_ = DetectRelinkMethod(e->dir_fd_, &e->fs_name_, &e->method_note_);
  // Reads and writes copy through maps of files other processes may
  // shrink: mapfs's handler turns the SIGBUS into a short copy.
  if (Status g = vm::EnableGuardedCopies(); !g.ok())
    MAPFS_LOG("overlay %s: %s; a file shrunk by another process while open here may kill this one (SIGBUS)\n",
              o.dir.c_str(), g.ToString().c_str());
  MAPFS_RETURN_IF_ERROR(e->Recover());
  MAPFS_RETURN_IF_ERROR(e->log_.Create(e->dir_fd_));
  MAPFS_LOG("overlay %s: split engine on %s, relink by %s%s%s; recovery: %d dead logs, %d relinks finished, %d lost\n",
            o.dir.c_str(), e->fs_name_, ToString(e->method_.load()), e->method_note_.empty() ? "" : " ",
            e->method_note_.c_str(), e->recovery_.logs, e->recovery_.redone, e->recovery_.lost);
  return e;
}

void SplitEngine::RefusedMethod() {
  // Called under a FileState's mu: not mu_ (Release nests them the other way).
  RelinkMethod was = method_.exchange(RelinkMethod::kCopy);
  if (was == RelinkMethod::kCopy) return;
  MAPFS_LOG("overlay %s: %s refused by the file system, relinking by copy\n", opt_.dir.c_str(), ToString(was));
}

Status SplitEngine::Recover() {
  int dfd = dup(dir_fd_);
  if (dfd < 0) return Status::FromErrno("overlay recovery: dup");
  DIR* d = fdopendir(dfd);
  if (d == nullptr) {
    close(dfd);
    return Status::FromErrno("overlay recovery: opendir");
  }
  std::vector<std::string> logs, others;
  while (dirent* de = readdir(d)) {
    std::string n = de->d_name;
    if (n.rfind("log-", 0) == 0) logs.push_back(n);
    else if (n.rfind("s-", 0) == 0 || n.rfind("t-", 0) == 0) others.push_back(n);
  }
  closedir(d);
  std::set<std::string> dead;
  std::vector<int> held;  // dead logs stay locked until their files are gone
  for (const std::string& n : logs) {
    int fd = -1;
    auto r = RecoverLogFile(n, &fd);
    if (fd >= 0) held.push_back(fd);
    if (!r.ok()) {
      for (int h : held) close(h);
      return r.status();
    }
    if (*r) dead.insert(n.substr(4));
  }
  // A dead log's staging files and links go with it.
  for (const std::string& n : others) {
    size_t last = n.rfind('-');
    if (last != std::string::npos && dead.count(n.substr(2, last - 2))) unlinkat(dir_fd_, n.c_str(), 0);
  }
  for (const std::string& t : dead) unlinkat(dir_fd_, ("log-" + t).c_str(), 0);
  for (int h : held) close(h);
  return Status::Ok();
}

Result<bool> SplitEngine::RecoverLogFile(const std::string& name, int* held) {
  int fd = openat(dir_fd_, name.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat lst{};
  // Locked: its process is alive. Unlinked: another process recovered it
  // between our readdir and our lock.
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 || fstat(fd, &lst) != 0 || lst.st_nlink == 0) {
    close(fd);
    return false;
  }
  *held = fd;
  std::vector<char> buf(kLogBytes);
  ssize_t got = pread(fd, buf.data(), buf.size(), 0);
  recovery_.logs++;
  if (got <= 0) return true;
  std::string tag = name.substr(4);
  for (const LogEntry& e : OpLog::Pending(buf.data(), static_cast<size_t>(got))) {
    if (e.kind != static_cast<uint16_t>(EntryKind::kCommit)) continue;
    int pair = static_cast<int>(e.pair);
    int t = openat(dir_fd_, Name("t", tag, pair).c_str(), O_RDWR | O_CLOEXEC);
    int s = openat(dir_fd_, Name("s", tag, pair).c_str(), O_RDONLY | O_CLOEXEC);
    Status st = t < 0 || s < 0 ? Status::Error(ENOENT, "overlay recovery: target or staging file gone")
                               : CopyRange(s, e.stage_off, t, e.off, e.len,
                                           e.method == static_cast<uint16_t>(RelinkMethod::kMoveExtents));
    struct stat sb{};
    if (st.ok() && fstat(t, &sb) == 0 && static_cast<uint64_t>(sb.st_size) < e.new_size &&
        ftruncate(t, static_cast<off_t>(e.new_size)) != 0)
      st = Status::FromErrno("overlay recovery: size");
    if (st.ok() && fdatasync(t) != 0) st = Status::FromErrno("overlay recovery: fdatasync");
    if (t >= 0) close(t);
    if (s >= 0) close(s);
    if (st.ok()) {
      recovery_.redone++;
    } else {
      recovery_.lost++;
      MAPFS_LOG("overlay %s: recovery of %s pair %d: %s\n", opt_.dir.c_str(), name.c_str(), pair,
                st.ToString().c_str());
    }
  }
  return true;
}

Result<std::unique_ptr<OverlayFile>> SplitEngine::Adopt(int fd, int flags) {
  // Read before the fstat: a lock call between the two leaves the size
  // taken here marked as older than that lock (re-read on first use).
  const uint64_t epoch0 = epoch();
  struct stat sb{};
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    int e = errno ? errno : EINVAL;
    close(fd);
    return Status::Error(S_ISREG(sb.st_mode) ? e : EINVAL, "overlay: adopt: not a regular file");
  }
  std::shared_ptr<FileState> st;
  bool revive = false;  // no file had it open: its cached size may be stale
  {
    std::lock_guard<std::mutex> g(mu_);
    auto& slot = files_[{sb.st_dev, sb.st_ino}];
    if (!slot) {
      slot = std::make_shared<FileState>();
      slot->dev = sb.st_dev;
      slot->ino = sb.st_ino;
      slot->ksize = static_cast<uint64_t>(sb.st_size);
      slot->epoch = epoch0;  // unshared until mu_ is released
      slot->block = sb.st_blksize > 0 ? static_cast<uint64_t>(sb.st_blksize) : 4096;
    } else if (slot->refs == 0) {
      revive = true;
      Unidle(*slot);
    }
    slot->refs++;
    st = slot;
  }
  bool missing;
  int reopen_errno = 0;
  {
    std::lock_guard<std::mutex> g(st->mu);
    if (revive) {
      Revive(*st, static_cast<uint64_t>(sb.st_size));
      st->epoch = epoch0;
    }
    // The state's own descriptors, without O_APPEND: O_RDWR when the
    // permissions allow (writable maps), else what this open was allowed.
    // Nothing of the file is closed here: the program may hold POSIX locks
    // on it (FileState::held).
    int acc = flags & O_ACCMODE;
    if (!st->maps_writable && (st->rfd < 0 || st->wfd < 0)) {
      int rw = Reopen(*st, fd, O_RDWR);
      if (rw >= 0) {
        UnmapRegions(*st);  // read-only maps until now
        if (st->rfd >= 0) st->held.push_back(st->rfd);
        if (st->wfd >= 0 && st->wfd != st->rfd) st->held.push_back(st->wfd);
        st->rfd = st->wfd = rw;
        st->maps_writable = true;
      } else {
        if (st->rfd < 0 && acc != O_WRONLY) st->rfd = Reopen(*st, fd, O_RDONLY);
        if (st->wfd < 0 && acc != O_RDONLY) st->wfd = Reopen(*st, fd, O_WRONLY);
      }
    }
    missing = (acc != O_WRONLY && st->rfd < 0) || (acc != O_RDONLY && st->wfd < 0);
    reopen_errno = errno;
    if (flags & O_TRUNC) {  // the kernel emptied the file at open
      st->ksize = 0;
      st->sbase = st->send = st->salign = 0;
    }
  }
  auto f = std::make_unique<SplitFile>(this, st, fd, flags);
  if (missing) {
    (void)f->Close();  // releases the state and closes fd
    return Status::Error(reopen_errno ? reopen_errno : EACCES, "overlay: reopen of the file");
  }
  return std::unique_ptr<OverlayFile>(std::move(f));
}

int SplitEngine::Reopen(FileState& st, int fd, int acc) {
  // Under the shim the new descriptor keeps the kernel's (low) number:
  // moving it high would close that number (OverlayCoreOpened). The
  // duplicate is made high (dup in the core is DupHigh); the low one waits
  // in `held` for the file's last close.
  int low = open(ProcFd(fd).c_str(), acc | O_CLOEXEC);
  if (low < 0) return -1;
  if (low >= InternalFdBase()) return low;  // already up there (or no host)
  int high = dup(low);
  if (high < 0) return low;  // out of descriptors: the low one serves
  st.held.push_back(low);
  return high;
}

void SplitEngine::CloseHeld(FileState& st) {
  for (int h : st.held) close(h);
  st.held.clear();
}

Status SplitEngine::EnsureStaging(FileState& st, int some_fd) {
  if (st.sfd >= 0) return Status::Ok();
  if (st.no_staging) return Status::Error(ENOSPC, "overlay: no staging for this file");
  if (st.pair < 0) {
    st.pair = log_.AllocPair();
    if (st.pair < 0) {
      st.no_staging = true;
      return Status::Error(ENOSPC, "overlay: log full");
    }
  }
  if (!st.linked) {
    // Recovery finds the target through this link, renamed or not.
    if (linkat(AT_FDCWD, ProcFd(some_fd).c_str(), dir_fd_, Name("t", log_.tag(), st.pair).c_str(),
               AT_SYMLINK_FOLLOW) != 0) {
      st.no_staging = true;
      log_.FreePair(st.pair);
      st.pair = -1;
      return Status::FromErrno("overlay: link to target");
    }
    st.linked = true;
  }
  if (TakeSpare(st)) return Status::Ok();
  std::string sname = Name("s", log_.tag(), st.pair);
  int fd = openat(dir_fd_, sname.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno("overlay: staging file");
  if (fallocate(fd, 0, 0, static_cast<off_t>(kStagingBytes)) != 0 &&
      ftruncate(fd, static_cast<off_t>(kStagingBytes)) != 0) {
    Status s = Status::FromErrno("overlay: staging size");
    close(fd);
    unlinkat(dir_fd_, sname.c_str(), 0);
    return s;
  }
  void* p = mmap(nullptr, kStagingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    Status s = Status::FromErrno("overlay: map staging");
    close(fd);
    unlinkat(dir_fd_, sname.c_str(), 0);
    return s;
  }
  st.sfd = fd;
  st.smap = static_cast<char*>(p);
  st.sfaulted = 0;
  return Status::Ok();
}

void SplitEngine::DropStaging(FileState& st, bool all) {
  // The file's last close: its staging file may serve the next file.
  if (all && st.sfd >= 0 && st.pair >= 0 && ParkSpare(st)) {
    st.sfd = -1;
    st.smap = nullptr;
  }
  if (st.smap != nullptr) munmap(st.smap, kStagingBytes);
  st.smap = nullptr;
  if (st.sfd >= 0) {
    close(st.sfd);
    unlinkat(dir_fd_, Name("s", log_.tag(), st.pair).c_str(), 0);
  }
  st.sfd = -1;
  st.sfaulted = 0;
  if (!all || st.pair < 0) return;
  if (st.linked) unlinkat(dir_fd_, Name("t", log_.tag(), st.pair).c_str(), 0);
  st.linked = false;
  log_.FreePair(st.pair);
  st.pair = -1;
}

Status SplitEngine::FixStatFd(int, struct stat* st) { return FixStat(nullptr, st); }

Status SplitEngine::BeforeLock() {
  if (publish_.load(std::memory_order_acquire) == 0) return Status::Ok();  // nothing staged, nothing in flight
  // In flight before the flag is cleared, until every file is relinked:
  // another thread's BeforeLock that finds the flag cleared by this one
  // waits for this publish instead of returning before its bytes are in.
  publish_.fetch_add(kInFlight, std::memory_order_acq_rel);
  std::lock_guard<std::mutex> serial(publish_mu_);
  // Cleared before the files are looked at: a file staged meanwhile sets
  // it again and is published by the next lock call (or this one).
  publish_.fetch_and(~kMaybeStaged, std::memory_order_acq_rel);
  std::vector<std::shared_ptr<FileState>> open;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [key, st] : files_)
      if (st->refs > 0) open.push_back(st);
  }
  // mu_ released first: Release takes mu_ then a file's mu, never the reverse.
  // A relink that fails leaves the bytes staged and fails the lock call
  // (the first error; every file is still tried): had the lock call gone
  // ahead, another process would append at the kernel's end, where this
  // one later relinks its bytes over it.
  Status first;
  for (auto& st : open) {
    std::lock_guard<std::mutex> g(st->mu);
    Status r = RelinkStaged(*this, *st, opt_.mode != Mode::kPosix);
    if (r.ok()) continue;
    NoteStaged();  // the next lock call tries again
    if (first.ok()) first = r;
  }
  publish_.fetch_sub(kInFlight, std::memory_order_acq_rel);
  return first;
}

Status SplitEngine::FixStat(const char*, struct stat* sb) {
  if (!S_ISREG(sb->st_mode)) return Status::Ok();
  std::shared_ptr<FileState> st;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = files_.find({sb->st_dev, sb->st_ino});
    // An idle file (no descriptor open, maps kept) has nothing staged and a
    // size that may be stale: the kernel's stat is the truth for it.
    if (it == files_.end() || it->second->refs == 0) return Status::Ok();
    st = it->second;
  }
  std::lock_guard<std::mutex> g(st->mu);
  const auto kernel = static_cast<uint64_t>(sb->st_size);
  uint64_t size = kernel;
  if (st->Staged()) {
    // What this process wrote, not yet in the kernel's file (as it would be
    // after a kernel write); more if another process wrote past it.
    size = std::max(st->Size(), kernel);
  } else if (kernel != st->ksize) {
    // Another process changed the size: the kernel's answer stands, and
    // the file's next call here takes it too (a program that saw the new
    // size in a stat reads up to it, as through the kernel).
    st->epoch = 0;
  }
  sb->st_size = static_cast<off_t>(size);
  auto blocks = static_cast<blkcnt_t>((size + 511) / 512);
  if (sb->st_blocks < blocks) sb->st_blocks = blocks;
  if (st->linked && sb->st_nlink > 1) sb->st_nlink--;  // our t- link is not the user's
  return Status::Ok();
}

}  // namespace mapfs::overlay::split
