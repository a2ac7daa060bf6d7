// Directory streams on mapfs directories. A mapfs DIR is one of a fixed
// array of MapfsDir objects, so telling it from a glibc DIR is a range
// check, not a lookup.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // readdir_r must be provided
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "fs/dir_stream.h"
#include "preload/calls.h"
#include "preload/outside.h"

namespace mapfs::preload {
namespace {

struct MapfsDir {
  bool used = false;
  int fd = -1;
  DescRef d;
  fs::DirStream stream;
};

constexpr int kMaxDirs = 4096;
MapfsDir g_dirs[kMaxDirs];
std::mutex g_dirs_mu;

MapfsDir* Ours(void* p) {
  auto* d = static_cast<MapfsDir*>(p);
  if (d < g_dirs || d >= g_dirs + kMaxDirs) return nullptr;
  return d;
}

DIR* NewDir(int fd, DescRef d) {
  std::lock_guard<std::mutex> g(g_dirs_mu);
  for (auto& x : g_dirs)
    if (!x.used) {
      x.used = true;
      x.fd = fd;
      x.d = std::move(d);
      x.stream.Seek(0);
      return reinterpret_cast<DIR*>(&x);
    }
  errno = EMFILE;
  return nullptr;
}

struct dirent64* Next(MapfsDir* d) {
  CoreScope cs;
  Status st;
  auto* e = d->stream.Next(*d->d->fsys, *d->d->file, &st);
  if (!st.ok()) Fail(st);
  return const_cast<struct dirent64*>(e);
}

int ScanMapfs(DIR* dir, struct dirent64*** list, int (*filter)(const struct dirent64*),
              int (*cmp)(const struct dirent64**, const struct dirent64**)) {
  std::vector<struct dirent64*> out;
  int saved = errno;
  errno = 0;
  while (struct dirent64* e = Next(Ours(dir))) {
    if (filter && !filter(e)) continue;
    auto* c = static_cast<struct dirent64*>(std::malloc(sizeof *e));
    if (c == nullptr) {
      for (auto* p : out) std::free(p);
      closedir(dir);
      errno = ENOMEM;
      return -1;
    }
    std::memcpy(c, e, sizeof *e);
    out.push_back(c);
  }
  int err = errno;
  closedir(dir);
  if (err != 0) {
    for (auto* p : out) std::free(p);
    errno = err;
    return -1;
  }
  errno = saved;
  if (cmp) std::qsort(out.data(), out.size(), sizeof(void*), reinterpret_cast<int (*)(const void*, const void*)>(cmp));
  auto* arr = static_cast<struct dirent64**>(std::malloc(std::max<size_t>(1, out.size()) * sizeof(void*)));
  if (arr == nullptr) {
    for (auto* p : out) std::free(p);
    errno = ENOMEM;
    return -1;
  }
  std::memcpy(arr, out.data(), out.size() * sizeof(void*));
  *list = arr;
  return static_cast<int>(out.size());
}

}  // namespace

// The kernel's getdents/getdents64 records. The position of a mapfs
// directory descriptor is the cookie after the last entry returned (what
// d_off says, and what lseek(fd, d_off, SEEK_SET) resumes from), so
// getdents, lseek and a DIR* opened later agree as on the kernel.
ssize_t GetDents(int fd, void* out, size_t n, bool is64) {
  DescRef d = MapfsFd(fd);
  if (!d) return FailErrno(EBADF);
  if (!d->file->is_dir) return FailErrno(ENOTDIR);
  CoreScope cs;
  Shim& s = Shim::Get();
  PositionLock pos(*d, fd);
  uint64_t cookie = static_cast<uint64_t>(s.Offset(*d, fd));
  char* buf = static_cast<char*>(out);
  size_t used = 0;
  bool full = false;
  Status st = d->fsys->ReadDir(*d->file, cookie, [&](const fs::DirEntryOut& e) {
    // linux_dirent64: ino, off, reclen, type, name; linux_dirent: ino, off,
    // reclen, name, then the type in the record's last byte. 8-aligned.
    size_t head = is64 ? offsetof(struct dirent64, d_name) : 2 * sizeof(unsigned long) + sizeof(unsigned short);
    size_t len = (head + e.name.size() + 1 + (is64 ? 0 : 1) + 7) & ~size_t{7};
    if (used + len > n) {
      full = true;
      return false;
    }
    char* r = buf + used;
    std::memset(r, 0, len);
    unsigned short reclen = static_cast<unsigned short>(len);
    if (is64) {
      auto* x = reinterpret_cast<struct dirent64*>(r);
      x->d_ino = e.ino;
      x->d_off = static_cast<off64_t>(e.cookie);
      x->d_reclen = reclen;
      x->d_type = e.type;
    } else {
      unsigned long ino = e.ino, off = e.cookie;
      std::memcpy(r, &ino, sizeof ino);
      std::memcpy(r + sizeof ino, &off, sizeof off);
      std::memcpy(r + 2 * sizeof ino, &reclen, sizeof reclen);
      r[len - 1] = static_cast<char>(e.type);
    }
    std::memcpy(r + head, e.name.data(), e.name.size());
    used += len;
    cookie = e.cookie;
    return true;
  });
  if (!st.ok()) return Fail(st);
  if (used == 0 && full) return FailErrno(EINVAL);  // as the kernel: the buffer holds no entry
  s.SetOffset(*d, fd, static_cast<int64_t>(cookie));
  return static_cast<ssize_t>(used);
}

}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

MAPFS_EXPORT DIR* fdopendir(int fd) {
  DescRef d = MapfsFd(fd);
  if (!d) return REAL(fdopendir)(fd);
  if (!d->file->is_dir) {
    errno = ENOTDIR;
    return nullptr;
  }
  return NewDir(fd, std::move(d));
}

// glibc's own wrapper of the call (2.30 and later).
MAPFS_EXPORT ssize_t getdents64(int fd, void* buf, size_t n) {
  if (MapfsFd(fd)) return GetDents(fd, buf, n, true);
  return REAL(getdents64)(fd, buf, n);
}

MAPFS_EXPORT DIR* opendir(const char* path) {
  return FollowOut(AT_FDCWD, path, true, [](int, const char* p) -> DIR* {
    Route r = MapfsPath(AT_FDCWD, p);
    if (!r.mapfs) return REAL(opendir)(r.Kernel(p));
    int fd = OpenMapfs(r, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0) return nullptr;
    DIR* d = fdopendir(fd);
    if (d == nullptr) {
      int e = errno;
      close(fd);
      errno = e;
    }
    return d;
  });
}

MAPFS_EXPORT int closedir(DIR* dir) {
  MapfsDir* d = Ours(dir);
  if (d == nullptr) return REAL(closedir)(dir);
  int fd = d->fd;
  {
    std::lock_guard<std::mutex> g(g_dirs_mu);
    d->d.reset();
    d->stream.Seek(0);
    d->used = false;
  }
  return close(fd);
}

MAPFS_EXPORT struct dirent64* readdir64(DIR* dir) {
  if (MapfsDir* d = Ours(dir)) return Next(d);
  return REAL(readdir64)(dir);
}
MAPFS_EXPORT struct dirent* readdir(DIR* dir) {
  if (MapfsDir* d = Ours(dir)) return reinterpret_cast<struct dirent*>(Next(d));
  return REAL(readdir)(dir);
}
MAPFS_EXPORT int readdir64_r(DIR* dir, struct dirent64* ent, struct dirent64** out) {
  MapfsDir* d = Ours(dir);
  if (d == nullptr) return REAL(readdir64_r)(dir, ent, out);
  int saved = errno;
  errno = 0;
  struct dirent64* e = Next(d);
  int err = errno;
  errno = saved;
  if (e == nullptr) {
    *out = nullptr;
    return err;
  }
  std::memcpy(ent, e, sizeof *e);
  *out = ent;
  return 0;
}
MAPFS_EXPORT int readdir_r(DIR* dir, struct dirent* ent, struct dirent** out) {
  if (!Ours(dir)) return REAL(readdir_r)(dir, ent, out);
  return readdir64_r(dir, reinterpret_cast<struct dirent64*>(ent), reinterpret_cast<struct dirent64**>(out));
}
MAPFS_EXPORT void seekdir(DIR* dir, long pos) {
  MapfsDir* d = Ours(dir);
  if (d == nullptr) return REAL(seekdir)(dir, pos);
  if (pos >= 0) d->stream.Seek(static_cast<uint64_t>(pos));
}
MAPFS_EXPORT long telldir(DIR* dir) {
  MapfsDir* d = Ours(dir);
  if (d == nullptr) return REAL(telldir)(dir);
  return static_cast<long>(d->stream.Tell());
}
MAPFS_EXPORT void rewinddir(DIR* dir) {
  if (!Ours(dir)) return REAL(rewinddir)(dir);
  seekdir(dir, 0);
}
MAPFS_EXPORT int dirfd(DIR* dir) {
  if (MapfsDir* d = Ours(dir)) return d->fd;
  return REAL(dirfd)(dir);
}

MAPFS_EXPORT int scandir64(const char* path, struct dirent64*** list, int (*filter)(const struct dirent64*),
                           int (*cmp)(const struct dirent64**, const struct dirent64**)) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(scandir64)(r.Kernel(path), list, filter, cmp);
  DIR* d = opendir(path);
  if (d == nullptr) return -1;
  return ScanMapfs(d, list, filter, cmp);
}
MAPFS_EXPORT int scandir(const char* path, struct dirent*** list, int (*filter)(const struct dirent*),
                         int (*cmp)(const struct dirent**, const struct dirent**)) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return REAL(scandir)(r.Kernel(path), list, filter, cmp);
  DIR* d = opendir(path);
  if (d == nullptr) return -1;
  return ScanMapfs(d, reinterpret_cast<struct dirent64***>(list), reinterpret_cast<int (*)(const struct dirent64*)>(filter),
                   reinterpret_cast<int (*)(const struct dirent64**, const struct dirent64**)>(cmp));
}
MAPFS_EXPORT int scandirat(int dirfd, const char* path, struct dirent*** list, int (*filter)(const struct dirent*),
                           int (*cmp)(const struct dirent**, const struct dirent**)) {
  Route r = MapfsPath(dirfd, path);
  if (!r.mapfs) return REAL(scandirat)(dirfd, r.Kernel(path), list, filter, cmp);
  int fd = OpenMapfs(r, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return -1;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return -1;
  }
  return ScanMapfs(d, reinterpret_cast<struct dirent64***>(list), reinterpret_cast<int (*)(const struct dirent64*)>(filter),
                   reinterpret_cast<int (*)(const struct dirent64**, const struct dirent64**)>(cmp));
}
