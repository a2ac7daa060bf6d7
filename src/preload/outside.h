// Paths that leave the pool through a symlink, and paths of the kernel's
// tree that come back into it.
//
// A symlink's target is a path in the process's namespace: `/mapfs/d` is
// the pool's `/d`, `/etc/hostname` the kernel's file. The core walks a
// pool path until it meets an absolute target outside the prefix (or ".."
// at the pool's root) and then stops with fs::kLeavesPool, saying where the
// rest of the path goes (fs::LinkChain). FollowOut picks that up, walks the
// rest in the kernel's tree one name at a time (a kernel symlink may lead
// back under the prefix, which the kernel itself cannot follow) and runs
// the call again on the path it arrives at: a kernel path with no symlink
// left to follow, or a path under the prefix, which the core walks again.
// The links of both namespaces count together: ELOOP after 40, as Linux.
#pragma once

#include <fcntl.h>

#include <cerrno>
#include <string>

#include "fs/file_system.h"
#include "preload/shim.h"

namespace mapfs::preload {

// Walks `path` (absolute, the process's namespace) through the kernel's
// tree, following symlinks (the last name's only if follow_last) and
// counting them on from *links. Stops at the first name that is the prefix
// or below it: *next is then that name plus the rest of the path. Else
// *next is the path with every symlink expanded (but an unfollowed last
// one; a trailing slash kept), or, at a name that does not exist, the path
// up to it plus the rest, for the call to report. 0, or ELOOP.
int WalkOutside(const std::string& path, bool follow_last, int* links, std::string* next);

// Runs `call(dirfd, path)`; when the walk of a pool path left the pool,
// runs `call(AT_FDCWD, p)` again with where it leads, until the call was
// made in one namespace. `follow_last`: the call follows a symlink in the
// last name (stat, open) or not (lstat, unlink, mkdir). A call that left
// the pool without FollowOut fails with EXDEV (see Fail).
template <class Call>
auto FollowOut(int dirfd, const char* path, bool follow_last, Call call) -> decltype(call(dirfd, path)) {
  if (in_core) return call(dirfd, path);
  fs::LinkChain chain;
  auto r = call(dirfd, path);
  std::string exit, next;
  int links = 0;
  // Each round follows a link or moves past the prefix (".." at the
  // root), so the bound only guards against a tree changing under us.
  for (int round = 0; chain.TakeExit(&exit, &links); round++) {
    int e = round > 2 * fs::kMaxSymlinks ? ELOOP : WalkOutside(exit, follow_last, &links, &next);
    if (e != 0) {
      errno = e;
      return r;  // the call's failure value (-1, null)
    }
    chain.Restart(links);
    r = call(AT_FDCWD, next.c_str());
  }
  return r;
}

}  // namespace mapfs::preload
