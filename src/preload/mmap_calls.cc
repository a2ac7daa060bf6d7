// Memory maps of mapfs files. A shared map is the file's own bytes: a
// pointer into its contiguous range of the region (zero copy, and coherent
// with write() by construction). A private map is a copy. munmap of a
// pointer into the region only forgets it: the region belongs to mapfs.
#include <fcntl.h>
#include <stdarg.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "medium/persist.h"
#include "preload/calls.h"
#include "vm/vm.h"

namespace mapfs::preload {
namespace {

bool InRegion(const void* p) {
  Shim& s = Shim::Get();
  if (!s.enabled()) return false;
  fs::FileSystem* f = s.Fs();
  return f != nullptr && f->mount().vm().Contains(p);
}

void* MapMapfs(Desc& d, void* addr, size_t len, int prot, int flags, off_t off) {
  long page = ::sysconf(_SC_PAGESIZE);
  if (len == 0 || off < 0 || off % page != 0) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  if (d.file->is_dir) {
    errno = ENODEV;
    return MAP_FAILED;
  }
  int acc = d.file->flags & O_ACCMODE;
  if (acc == O_WRONLY || ((flags & MAP_TYPE) == MAP_SHARED && (prot & PROT_WRITE) && acc != O_RDWR)) {
    errno = EACCES;
    return MAP_FAILED;
  }
  CoreScope cs;
  if ((flags & MAP_TYPE) == MAP_PRIVATE) {
    void* m = REAL(mmap)(addr, len, PROT_READ | PROT_WRITE, (flags & ~MAP_TYPE) | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return m;
    auto r = d.fsys->Read(*d.file, m, len, off);
    if (!r.ok()) {
      REAL(munmap)(m, len);
      Fail(r.status());
      return MAP_FAILED;
    }
    if (prot != (PROT_READ | PROT_WRITE)) ::mprotect(m, len, prot);
    return m;
  }
  if (flags & MAP_FIXED) {
    errno = EINVAL;  // the file's bytes have their own address
    return MAP_FAILED;
  }
  uint64_t cap = 0;
  auto p = d.fsys->Map(*d.file, &cap);
  if (!p.ok()) {
    Fail(p.status());
    return MAP_FAILED;
  }
  uint64_t end = static_cast<uint64_t>(off) + len;
  if (end > cap) {
    // Reserve room without changing the size, as a map past the end needs.
    Status st = d.fsys->Fallocate(*d.file, FALLOC_FL_KEEP_SIZE, 0, static_cast<int64_t>(end));
    if (!st.ok()) {
      Fail(st);
      return MAP_FAILED;
    }
    p = d.fsys->Map(*d.file, &cap);
    if (!p.ok() || end > cap) {
      errno = ENOMEM;
      return MAP_FAILED;
    }
  }
  return *p + off;
}

}  // namespace
}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

MAPFS_EXPORT void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (!(flags & MAP_ANONYMOUS))
    if (DescRef d = MapfsFd(fd)) return MapMapfs(*d, addr, len, prot, flags, off);
  return REAL(mmap)(addr, len, prot, flags, fd, off);
}
MAPFS_EXPORT void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off64_t off) {
  return mmap(addr, len, prot, flags, fd, off);
}
MAPFS_EXPORT int munmap(void* addr, size_t len) {
  if (!in_core && InRegion(addr)) return 0;
  return REAL(munmap)(addr, len);
}
MAPFS_EXPORT int msync(void* addr, size_t len, int flags) {
  if (!in_core && InRegion(addr)) {
    if ((flags & MS_SYNC) || (flags & MS_ASYNC)) mapfs::medium::Persist(addr, len);
    return 0;
  }
  return REAL(msync)(addr, len, flags);
}
MAPFS_EXPORT void* mremap(void* old, size_t old_len, size_t new_len, int flags, ...) {
  if (!in_core && InRegion(old)) {
    errno = EINVAL;  // a file's map moves with the file, not on request
    return MAP_FAILED;
  }
  void* fixed = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    fixed = va_arg(ap, void*);
    va_end(ap);
  }
  return REAL(mremap)(old, old_len, new_len, flags, fixed);
}
MAPFS_EXPORT int mprotect(void* addr, size_t len, int prot) {
  if (!in_core && InRegion(addr)) return 0;  // the region's pages stay as mapfs set them
  return REAL(mprotect)(addr, len, prot);
}
MAPFS_EXPORT int madvise(void* addr, size_t len, int advice) {
  if (!in_core && InRegion(addr)) return 0;  // advice only; never drop a file's pages
  return REAL(madvise)(addr, len, advice);
}
