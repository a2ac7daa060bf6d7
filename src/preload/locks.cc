#include "preload/locks.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>

#include "medium/pool.h"
#include "medium/pool_access.h"
#include "preload/calls.h"

namespace mapfs::preload {
namespace {

constexpr int kSpanShift = 40;
constexpr off_t kSpan = off_t(1) << kSpanShift;
constexpr off_t kFlockBase = off_t(1) << 62;

std::atomic<int> g_process_lock_fd{-1};
std::atomic<bool> g_any_record_lock{false};
std::mutex g_open_mu;

// kind: "locks" (record locks) or "ofd" (OFD locks and flock).
std::string LockFilePath(fs::FileSystem* f, const char* kind) {
  const uint8_t* u = f->mount().pool().header().uuid;
  char hex[33];
  for (int i = 0; i < 16; i++) std::snprintf(hex + 2 * i, 3, "%02x", u[i]);
  return std::string("/dev/shm/mapfs-") + hex + "." + kind;
}

// The lock files take the pool's owner, group and mode (medium/pool_access.h):
// whoever may use the pool may lock in it, no one else. One that exists
// already is used only if no one else could have made it. -1 + errno.
int OpenLockFile(fs::FileSystem* f, const char* kind) {
  CoreScope cs;
  struct stat pool {};
  if (::fstat(f->mount().pool().fd(), &pool) != 0) return -1;
  std::string path = LockFilePath(f, kind);
  int fd = REAL(open)(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    medium::ShareLikePool(fd, pool);
  } else if (errno == EEXIST) {
    fd = REAL(open)(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && !medium::CheckSharedObject(path, fd, pool).ok()) {
      REAL(close)(fd);
      errno = EACCES;
      return -1;
    }
  }
  return fd < 0 ? -1 : MoveHigh(fd);
}

int ProcessLockFd(fs::FileSystem* f) {
  int fd = g_process_lock_fd.load();
  if (fd >= 0) return fd;
  std::lock_guard<std::mutex> g(g_open_mu);
  fd = g_process_lock_fd.load();
  if (fd < 0) {
    fd = OpenLockFile(f, "locks");
    g_process_lock_fd.store(fd);
  }
  return fd;
}

int DescLockFd(Desc& d) {
  int fd = d.lock_fd.load();
  if (fd >= 0) return fd;
  std::lock_guard<std::mutex> g(g_open_mu);
  fd = d.lock_fd.load();
  if (fd < 0) {
    fd = OpenLockFile(d.fsys, "ofd");
    d.lock_fd.store(fd);
  }
  return fd;
}

}  // namespace

int RecordLock(Desc& d, int fd, int cmd, struct flock* fl) {
  if (fl == nullptr) return FailErrno(EFAULT);
  bool ofd = cmd == F_OFD_GETLK || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
  if (fl->l_type != F_RDLCK && fl->l_type != F_WRLCK && fl->l_type != F_UNLCK) return FailErrno(EINVAL);
  if (ofd && fl->l_pid != 0) return FailErrno(EINVAL);
  bool set = cmd != F_GETLK && cmd != F_OFD_GETLK;
  int acc = d.file->flags & O_ACCMODE;
  if (set && ((fl->l_type == F_RDLCK && acc == O_WRONLY) || (fl->l_type == F_WRLCK && acc == O_RDONLY)))
    return FailErrno(EBADF);
  // The range in file offsets.
  int64_t base;
  switch (fl->l_whence) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = Shim::Get().Offset(d, fd); break;
    case SEEK_END: {
      struct stat st;
      CoreScope cs;
      Status s = d.fsys->Fstat(*d.file, &st);
      if (!s.ok()) return Fail(s);
      base = st.st_size;
      break;
    }
    default: return FailErrno(EINVAL);
  }
  int64_t start = base + fl->l_start, len = fl->l_len;
  if (len < 0) {
    start += len;
    len = -len;
  }
  if (start < 0) return FailErrno(EINVAL);
  if (start >= kSpan - 1) start = kSpan - 2;
  if (len == 0 || start + len > kSpan - 1) len = kSpan - 1 - start;  // to the end of the file's span
  off_t origin = static_cast<off_t>(d.file->ino) << kSpanShift;
  struct flock k = *fl;
  k.l_whence = SEEK_SET;
  k.l_start = origin + start;
  k.l_len = len;
  int lfd = ofd ? DescLockFd(d) : ProcessLockFd(d.fsys);
  if (lfd < 0) return -1;
  if (!ofd && set && fl->l_type != F_UNLCK) g_any_record_lock.store(true);
  int r;
  {
    CoreScope cs;
    r = REAL(fcntl)(lfd, cmd, &k);
  }
  if (r != 0 || set) return r;
  // F_GETLK: report the conflicting lock in the file's terms.
  fl->l_type = k.l_type;
  if (k.l_type != F_UNLCK) {
    fl->l_whence = SEEK_SET;
    fl->l_start = k.l_start - origin;
    fl->l_len = k.l_start + k.l_len >= origin + kSpan - 1 ? 0 : k.l_len;
    fl->l_pid = k.l_pid;
  }
  return 0;
}

int FileLock(Desc& d, int op) {
  int kind = op & ~LOCK_NB;
  short type = kind == LOCK_SH ? F_RDLCK : kind == LOCK_EX ? F_WRLCK : kind == LOCK_UN ? F_UNLCK : -1;
  if (type < 0) return FailErrno(EINVAL);
  int lfd = DescLockFd(d);
  if (lfd < 0) return -1;
  struct flock k{};
  k.l_type = type;
  k.l_whence = SEEK_SET;
  k.l_start = kFlockBase + static_cast<off_t>(d.file->ino);
  k.l_len = 1;
  CoreScope cs;
  int r = REAL(fcntl)(lfd, (op & LOCK_NB) ? F_OFD_SETLK : F_OFD_SETLKW, &k);
  if (r != 0 && (errno == EAGAIN || errno == EACCES)) errno = EWOULDBLOCK;
  return r;
}

void ReleaseProcessLocks(uint64_t ino) {
  if (!g_any_record_lock.load()) return;
  int lfd = g_process_lock_fd.load();
  if (lfd < 0) return;
  struct flock k{};
  k.l_type = F_UNLCK;
  k.l_whence = SEEK_SET;
  k.l_start = static_cast<off_t>(ino) << kSpanShift;
  k.l_len = kSpan;
  CoreScope cs;
  REAL(fcntl)(lfd, F_SETLK, &k);
}

}  // namespace mapfs::preload
