// Who may use a pool: the checks made before a pool file is trusted, and
// the rights of the objects mapfs creates beside it (docs/SECURITY.md).
//
// The pool file is the boundary: whoever may read and write it may use
// the file system in it. So a pool must be the file its user meant — not a
// symbolic link, not a file someone else could have planted or swapped —
// and the shared-memory segment and lock files that go with it must grant
// no more than the pool itself does.
#pragma once

#include <sys/stat.h>

#include <string>

#include "common/status.h"

namespace mapfs::medium {

// Checks the pool file open as `fd` (opened with O_NOFOLLOW from `path`):
// refuses a pool in a directory that everyone may write and that belongs
// to neither this user nor root, and a pool that belongs to neither in
// such a directory (anyone could have put it there, as ssh reasons about
// its files). Devices are judged the same way. EPERM with a message that
// names the path, the owner and the reason.
Status CheckPoolLocation(const std::string& path, int fd);
// The directory half of it, for use before a pool is created there.
Status CheckPoolDirectory(const std::string& path, bool* world_writable);

// The error for an open of `path` with O_NOFOLLOW that failed with `err`:
// ELOOP becomes a clear "is a symbolic link" refusal.
Status OpenError(const std::string& what, const std::string& path, int err);

// Gives a shared object (shared-memory segment, lock file) created beside
// the pool the pool's owner, group and read/write bits. Best effort: a
// user who may not change the owner keeps the object as created, with the
// pool's mode bits.
void ShareLikePool(int fd, const struct stat& pool);

// Accepts an existing shared object for the pool only if it belongs to the
// pool's owner, this user or root, and grants no one more than the pool
// does; EPERM otherwise (someone else created it first).
Status CheckSharedObject(const std::string& name, int fd, const struct stat& pool);

}  // namespace mapfs::medium
