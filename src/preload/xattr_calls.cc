// Extended attributes: a pool stores none. Every xattr call on a mapfs
// path or descriptor fails with ENOTSUP, the answer programs (ls, cp -a,
// tar, rsync -X) expect from a file system without them, after the path is
// checked, so a missing file is still ENOENT.
#include <sys/stat.h>
#include <sys/xattr.h>

#include "preload/calls.h"
#include "preload/outside.h"

namespace mapfs::preload {
namespace {

int NoXattrPath(const Route& r, bool follow) {
  fs::FileSystem* f = FsOrFail();
  if (f == nullptr) return -1;
  struct stat st;
  CoreScope cs;
  Status s = f->Stat(r.path, &st, follow, r.at);
  if (!s.ok()) return Fail(s);
  return FailErrno(ENOTSUP);
}

}  // namespace
}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

#define MAPFS_XATTR_PATH(name, follow, ret, params, args)                   \
  MAPFS_EXPORT ret name params {                                            \
    return FollowOut(AT_FDCWD, path, follow, [&](int, const char* p) -> ret { \
      Route r = MapfsPath(AT_FDCWD, p);                                     \
      if (!r.mapfs) return REAL(name)(r.Kernel(p), args);                   \
      return NoXattrPath(r, follow);                                        \
    });                                                                     \
  }
#define MAPFS_XATTR_FD(name, ret, params, args)                        \
  MAPFS_EXPORT ret name params {                                       \
    if (MapfsFd(fd)) return FailErrno(ENOTSUP);                        \
    return REAL(name)(fd, args);                                       \
  }
#define A(...) __VA_ARGS__

MAPFS_XATTR_PATH(getxattr, true, ssize_t, (const char* path, const char* n, void* v, size_t s), A(n, v, s))
MAPFS_XATTR_PATH(lgetxattr, false, ssize_t, (const char* path, const char* n, void* v, size_t s), A(n, v, s))
MAPFS_XATTR_PATH(setxattr, true, int, (const char* path, const char* n, const void* v, size_t s, int fl), A(n, v, s, fl))
MAPFS_XATTR_PATH(lsetxattr, false, int, (const char* path, const char* n, const void* v, size_t s, int fl), A(n, v, s, fl))
MAPFS_XATTR_PATH(listxattr, true, ssize_t, (const char* path, char* l, size_t s), A(l, s))
MAPFS_XATTR_PATH(llistxattr, false, ssize_t, (const char* path, char* l, size_t s), A(l, s))
MAPFS_XATTR_PATH(removexattr, true, int, (const char* path, const char* n), A(n))
MAPFS_XATTR_PATH(lremovexattr, false, int, (const char* path, const char* n), A(n))
MAPFS_XATTR_FD(fgetxattr, ssize_t, (int fd, const char* n, void* v, size_t s), A(n, v, s))
MAPFS_XATTR_FD(fsetxattr, int, (int fd, const char* n, const void* v, size_t s, int fl), A(n, v, s, fl))
MAPFS_XATTR_FD(flistxattr, ssize_t, (int fd, char* l, size_t s), A(l, s))
MAPFS_XATTR_FD(fremovexattr, int, (int fd, const char* n), A(n))
