// Descriptors of virtualized files that reach a process through the kernel
// (overlay_fds.h): a fork child's, and those an exec'd image inherits. The
// kernel's view of a virtualized file is its format, not its content, so
// such a descriptor must be served by the process's own engine before the
// program uses it. Its offset is the description's kernel position, which
// the hand-off before the fork or exec put there (OverlayHandoff).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/raw_syscall.h"
#include "preload/calls.h"
#include "preload/overlay_fds.h"

namespace mapfs::preload {
namespace {

// Adopts the description `fd` names (also named by `others`) if it is a
// virtualized file; anything else stays the kernel's.
void Readopt(int fd, const std::vector<int>& others) {
  overlay::Engine* e = OverlayEngine();
  if (e == nullptr) return;
  int flags = REAL(fcntl)(fd, F_GETFL);
  if (flags < 0) return;
  int mine = DupHigh(fd);
  if (mine < 0) return;
  // Neither O_CREAT nor O_TRUNC: the file is adopted as it is.
  auto f = e->Adopt(mine, flags & (O_ACCMODE | O_APPEND));
  if (!f.ok()) {
    std::string line = "mapfs: overlay: an inherited descriptor of a virtualized file cannot be served (" +
                       f.status().message() + "); the kernel's view of it is its format\n";
    (void)!REAL(write)(2, line.data(), line.size());
    return;
  }
  if ((*f)->KernelIsContent()) return;  // a plain file: the kernel serves it (the adoption closes)
  auto o = std::make_shared<OvOpen>();
  o->file = std::move(*f);
  o->acc = flags & O_ACCMODE;
  o->append = (flags & O_APPEND) != 0;
  o->kernel_offset = true;
  for (int n : others) OvInstall(n, o);
}

}  // namespace

void OverlayReadopt(const std::vector<std::vector<int>>& fds) {
  CoreScope cs;
  for (auto& group : fds)
    if (!group.empty()) Readopt(group[0], group);
}

void OverlayAdoptInherited() {
  if (!OverlayVirtual()) return;
  CoreScope cs;
  int dir = REAL(open)("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  std::vector<int> fds;
  alignas(8) char buf[4096];
  for (;;) {
    long n = RawSyscall(SYS_getdents64, dir, reinterpret_cast<long>(buf), sizeof buf);
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      auto* d = reinterpret_cast<struct dirent64*>(buf + at);
      at += d->d_reclen;
      char* end = nullptr;
      long v = std::strtol(d->d_name, &end, 10);
      if (end != d->d_name && *end == '\0' && v != dir && v >= 0 && v < INT_MAX) fds.push_back(static_cast<int>(v));
    }
  }
  REAL(close)(dir);
  for (int fd : fds) {
    struct stat st;
    // A virtualized file holds at least its metadata blocks.
    if (REAL(fstat)(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 4096) continue;
    char path[PATH_MAX];
    std::string link = "/proc/self/fd/" + std::to_string(fd);
    ssize_t k = REAL(readlink)(link.c_str(), path, sizeof path - 1);
    if (k <= 0) continue;
    path[k] = '\0';
    if (!OverlayPath(AT_FDCWD, path)) continue;
    Readopt(fd, {fd});
  }
}

namespace {
// At load, before the program's first I/O (which may be through stdio,
// whose writes the shim never sees as opens).
__attribute__((constructor)) void OverlayAtLoad() { OverlayAdoptInherited(); }
}  // namespace

}  // namespace mapfs::preload
