// The calls that change the process's user and group ids, and its umask:
// each one goes to the C library, then tells the core (which caches them:
// fs/cred.h, common/process.h), so permission checks and creates inside the
// pool follow a program that drops or switches privileges or changes its
// mask. syscall() with these numbers comes here through syscall_calls.cc
// (which notes SYS_umask itself).
#include <grp.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/process.h"
#include "fs/cred.h"
#include "preload/calls.h"

namespace {
// After the call, successful or not: a failed setresuid may have changed
// some threads' ids before it failed; reading them again is always right.
template <typename R>
R Changed(R r) {
  int e = errno;
  mapfs::fs::InvalidateProcessCred();
  errno = e;
  return r;
}
}  // namespace

MAPFS_EXPORT int setuid(uid_t u) { return Changed(REAL(setuid)(u)); }
MAPFS_EXPORT int setgid(gid_t g) { return Changed(REAL(setgid)(g)); }
MAPFS_EXPORT int seteuid(uid_t u) { return Changed(REAL(seteuid)(u)); }
MAPFS_EXPORT int setegid(gid_t g) { return Changed(REAL(setegid)(g)); }
MAPFS_EXPORT int setreuid(uid_t r, uid_t e) { return Changed(REAL(setreuid)(r, e)); }
MAPFS_EXPORT int setregid(gid_t r, gid_t e) { return Changed(REAL(setregid)(r, e)); }
MAPFS_EXPORT int setresuid(uid_t r, uid_t e, uid_t s) { return Changed(REAL(setresuid)(r, e, s)); }
MAPFS_EXPORT int setresgid(gid_t r, gid_t e, gid_t s) { return Changed(REAL(setresgid)(r, e, s)); }
MAPFS_EXPORT int setgroups(size_t n, const gid_t* list) { return Changed(REAL(setgroups)(n, list)); }
// glibc's initgroups calls its own setgroups internally, past the shim.
MAPFS_EXPORT int initgroups(const char* user, gid_t g) { return Changed(REAL(initgroups)(user, g)); }
// The core checks with the effective ids, which setfsuid follows on Linux
// only while they agree; the cache is dropped so the next check reads them.
MAPFS_EXPORT int setfsuid(uid_t u) { return Changed(REAL(setfsuid)(u)); }
MAPFS_EXPORT int setfsgid(gid_t g) { return Changed(REAL(setfsgid)(g)); }

// The core caches the umask too (common/process.h): creates in the pool
// apply the mask the program set last. (Two threads racing to set it may
// leave the cache with the loser's value, as the kernel's with the
// winner's; a program that does that cannot know which one holds either.)
MAPFS_EXPORT mode_t umask(mode_t mask) {
  mode_t old = REAL(umask)(mask);
  mapfs::NoteUmask(mask);
  return old;
}
