// posix_spawn file actions that open pool paths.
//
// glibc runs a spawn's file actions in the child with its internal open,
// which the shim never sees, and the kernel can neither open a pool path nor
// resolve a relative one (its cwd is not the shim's). So an addopen of a pool
// path becomes, at once, a dup2 from a descriptor the shim reserves (a
// /dev/null placeholder at 1000 and up, close-on-exec). At each spawn
// (SpawnOpens) the shim opens the pool file itself with the action's flags
// and mode, and after the hand-off points the reserved descriptor at that
// open's placeholder, the memfd a new image adopts (Shim::Handoff, Adopt):
// the child's dup2 gives the program its pool file at the action's number.
// Not covered: an addchdir_np into the pool before a relative pool open
// (the path is taken from the parent's cwd), and addchdir_np into the pool
// itself (the kernel fails it in the child, ENOENT).
#include "preload/spawn_actions.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <string>

#include "preload/calls.h"

namespace mapfs::preload {
namespace {

struct PoolOpen {
  const posix_spawn_file_actions_t* fa;
  int reserved;
  std::string path;
  int oflag;
  mode_t mode;
};

std::mutex& Mu() {
  static std::mutex* m = new std::mutex;  // never destroyed: spawns may run at exit
  return *m;
}
std::vector<PoolOpen>& Table() {
  static auto* t = new std::vector<PoolOpen>;
  return *t;
}

// Back to a /dev/null placeholder (drops the reference to a memfd).
void Reset(int reserved) {
  int n = REAL(open)("/dev/null", O_RDONLY | O_CLOEXEC);
  if (n < 0) return;
  REAL(dup3)(n, reserved, O_CLOEXEC);
  REAL(close)(n);
}

// Forgets fa's pool opens (destroy, or init of a reused object).
void Forget(const posix_spawn_file_actions_t* fa) {
  std::lock_guard<std::mutex> g(Mu());
  auto& t = Table();
  for (auto it = t.begin(); it != t.end();) {
    if (it->fa == fa) {
      CloseInternal(it->reserved);
      it = t.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

int SpawnOpens::Open(const posix_spawn_file_actions_t* fa) {
  if (fa == nullptr) return 0;
  std::vector<PoolOpen> mine;
  {
    std::lock_guard<std::mutex> g(Mu());
    for (const PoolOpen& p : Table())
      if (p.fa == fa) mine.push_back(p);
  }
  for (const PoolOpen& p : mine) {
    // The shim's open; close-on-exec so the child gets it only at the
    // action's number.
    int fd = ::open(p.path.c_str(), p.oflag | O_CLOEXEC, p.mode);
    if (fd < 0) return errno;
    opens_.push_back({p.reserved, fd});
  }
  return 0;
}

void SpawnOpens::Point() {
  for (auto& [reserved, fd] : opens_) REAL(dup3)(fd, reserved, O_CLOEXEC);
}

SpawnOpens::~SpawnOpens() {
  int e = errno;
  for (auto& [reserved, fd] : opens_) {
    ::close(fd);
    Reset(reserved);
  }
  errno = e;
}

}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only

MAPFS_EXPORT int posix_spawn_file_actions_addopen(posix_spawn_file_actions_t* fa, int fd, const char* path,
                                                  int oflag, mode_t mode) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(posix_spawn_file_actions_addopen)(fa, fd, path, oflag, mode);
  if (fd < 0) return EBADF;  // as glibc
  int reserved = MoveHigh(REAL(open)("/dev/null", O_RDONLY | O_CLOEXEC));
  if (reserved < 0) return errno;
  int rc = REAL(posix_spawn_file_actions_adddup2)(fa, reserved, fd);
  if (rc != 0) {
    CloseInternal(reserved);
    return rc;
  }
  std::lock_guard<std::mutex> g(Mu());
  Table().push_back(PoolOpen{fa, reserved, path, oflag, mode});
  return 0;
}

MAPFS_EXPORT int posix_spawn_file_actions_init(posix_spawn_file_actions_t* fa) {
  if (!in_core) Forget(fa);
  return REAL(posix_spawn_file_actions_init)(fa);
}

MAPFS_EXPORT int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t* fa) {
  if (!in_core) Forget(fa);
  return REAL(posix_spawn_file_actions_destroy)(fa);
}
