#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "preload/calls.h"
#include "preload/overlay_fds.h"
#include "preload/stdio_redirect.h"

namespace mapfs::preload {
namespace {

// Streams made here, with the descriptor each one works on (for fileno).
std::mutex g_streams_mu;
std::unordered_map<FILE*, int>* g_streams = nullptr;

struct Cookie {
  int fd;
};

ssize_t CookieRead(void* c, char* buf, size_t n) { return ::read(static_cast<Cookie*>(c)->fd, buf, n); }
ssize_t CookieWrite(void* c, const char* buf, size_t n) {
  ssize_t r = ::write(static_cast<Cookie*>(c)->fd, buf, n);
  return r < 0 ? 0 : r;  // fopencookie: 0 means an error
}
int CookieSeek(void* c, off64_t* off, int whence) {
  off64_t r = ::lseek(static_cast<Cookie*>(c)->fd, *off, whence);
  if (r < 0) return -1;
  *off = r;
  return 0;
}
int CookieClose(void* c) {
  auto* k = static_cast<Cookie*>(c);
  int r = ::close(k->fd);
  delete k;
  return r;
}

const cookie_io_functions_t kIo = {CookieRead, CookieWrite, CookieSeek, CookieClose};

FILE* StreamOn(int fd, const char* mode) {
  auto* k = new (std::nothrow) Cookie{fd};
  if (k == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  FILE* f = ::fopencookie(k, mode, kIo);
  if (f == nullptr) {
    delete k;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(g_streams_mu);
  if (g_streams == nullptr) g_streams = new std::unordered_map<FILE*, int>();
  (*g_streams)[f] = fd;
  return f;
}

int StreamFd(FILE* f) {
  std::lock_guard<std::mutex> g(g_streams_mu);
  if (g_streams == nullptr) return -1;
  auto it = g_streams->find(f);
  return it == g_streams->end() ? -1 : it->second;
}

void Forget(FILE* f) {
  std::lock_guard<std::mutex> g(g_streams_mu);
  if (g_streams) g_streams->erase(f);
}

// fopen's mode to open flags and the mode fopencookie understands.
bool ParseMode(const char* mode, int* flags, std::string* cookie_mode) {
  if (mode == nullptr) return false;
  int acc;
  int extra = 0;
  switch (mode[0]) {
    case 'r': acc = O_RDONLY; break;
    case 'w': acc = O_WRONLY; extra = O_CREAT | O_TRUNC; break;
    case 'a': acc = O_WRONLY; extra = O_CREAT | O_APPEND; break;
    default: return false;
  }
  bool plus = false;
  for (const char* p = mode + 1; *p && *p != ','; p++) {
    if (*p == '+') plus = true;
    else if (*p == 'x') extra |= O_EXCL;
    else if (*p == 'e') extra |= O_CLOEXEC;
  }
  if (plus) acc = O_RDWR;
  *flags = acc | extra;
  *cookie_mode = std::string(1, mode[0]) + (plus ? "+" : "");
  return true;
}

}  // namespace

void RedirectStdStream(int fd) {
  if (fd < 0 || fd > 2) return;
  FILE** var = fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr;
  if (StreamFd(*var) == fd) return;  // already ours
  FILE* f = StreamOn(fd, fd == 0 ? "r" : "w");
  if (f == nullptr) return;
  FILE* old = *var;
  if (fd != 0) ::fflush(old);
  if (fd == 2) ::setvbuf(f, nullptr, _IONBF, 0);
  else if (fd == 1 && REAL(isatty)(1)) ::setvbuf(f, nullptr, _IOLBF, 0);
  *var = f;
}

}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

namespace {

// Opens `path` as fopen's `mode` says; the mode for fopencookie in *cm.
int OpenForMode(const char* path, const char* mode, std::string* cm) {
  int flags;
  if (!ParseMode(mode, &flags, cm)) return FailErrno(EINVAL);
  return open(path, flags, 0666);
}

FILE* OpenStream(const char* path, const char* mode) {
  std::string cm;
  int fd = OpenForMode(path, mode, &cm);
  if (fd < 0) return nullptr;
  FILE* f = StreamOn(fd, cm.c_str());
  if (f == nullptr) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return f;
}

}  // namespace

MAPFS_EXPORT FILE* fopen(const char* path, const char* mode) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs && !OverlayPath(AT_FDCWD, r.Kernel(path))) return REAL(fopen)(r.Kernel(path), mode);
  return OpenStream(path, mode);
}
MAPFS_EXPORT FILE* fopen64(const char* path, const char* mode) {
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs && !OverlayPath(AT_FDCWD, r.Kernel(path))) return REAL(fopen64)(r.Kernel(path), mode);
  return OpenStream(path, mode);
}

MAPFS_EXPORT FILE* fdopen(int fd, const char* mode) {
  if (!MapfsFd(fd) && !OverlayFd(fd)) return REAL(fdopen)(fd, mode);
  int flags;
  std::string cm;
  if (!ParseMode(mode, &flags, &cm)) {
    errno = EINVAL;
    return nullptr;
  }
  return StreamOn(fd, cm.c_str());
}

MAPFS_EXPORT FILE* freopen(const char* path, const char* mode, FILE* stream) {
  Route r = MapfsPath(AT_FDCWD, path);
  int std_fd = stream == stdin ? 0 : stream == stdout ? 1 : stream == stderr ? 2 : -1;
  if (!r.mapfs && StreamFd(stream) < 0) return REAL(freopen)(r.Kernel(path), mode, stream);
  if (path == nullptr) {
    errno = EINVAL;  // changing only the mode of a mapfs stream is not supported
    return nullptr;
  }
  if (std_fd >= 0) {
    // The stream keeps its number: open the file there (the stream variable
    // becomes a cookie stream for that number).
    ::fflush(stream);
    std::string cm;
    int fd = OpenForMode(path, mode, &cm);
    if (fd < 0) return nullptr;
    if (fd != std_fd) {
      if (dup2(fd, std_fd) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return nullptr;
      }
      close(fd);
    }
    RedirectStdStream(std_fd);
    return std_fd == 0 ? stdin : std_fd == 1 ? stdout : stderr;
  }
  fclose(stream);
  return OpenStream(path, mode);
}
MAPFS_EXPORT FILE* freopen64(const char* path, const char* mode, FILE* stream) { return freopen(path, mode, stream); }

MAPFS_EXPORT int fclose(FILE* f) {
  if (g_streams != nullptr) Forget(f);
  // The C library closes the descriptor itself (not through the shim's
  // close): published here, as close does (OverlayBeforeRelease).
  int published = OverlayBeforeRelease(), err = errno;
  int r = REAL(fclose)(f);
  if (r == 0 && published != 0) return FailErrno(err);
  return r;
}

MAPFS_EXPORT int fileno(FILE* f) {
  int fd = g_streams ? StreamFd(f) : -1;
  return fd >= 0 ? fd : REAL(fileno)(f);
}
MAPFS_EXPORT int fileno_unlocked(FILE* f) {
  int fd = g_streams ? StreamFd(f) : -1;
  return fd >= 0 ? fd : REAL(fileno_unlocked)(f);
}

// fread of a stream the kernel serves may read into the buffer directly
// (a read larger than the stream's own buffer), from inside the C library
// where the shim's read does not see it: a clean page of a virtualized
// file's map there would fail it with EFAULT (OvBeforeKernelStores).
namespace {
void BeforeFread(void* ptr, size_t size, size_t n) {
  if (OvHasViews() && size != 0 && n <= SIZE_MAX / size) OvBeforeKernelStores(ptr, size * n);
}
}  // namespace
MAPFS_EXPORT size_t fread(void* ptr, size_t size, size_t n, FILE* f) {
  BeforeFread(ptr, size, n);
  return REAL(fread)(ptr, size, n, f);
}
MAPFS_EXPORT size_t fread_unlocked(void* ptr, size_t size, size_t n, FILE* f) {
  BeforeFread(ptr, size, n);
  return REAL(fread_unlocked)(ptr, size, n, f);
}
MAPFS_EXPORT size_t __fread_chk(void* ptr, size_t ptrlen, size_t size, size_t n, FILE* f) {
  FortifyCheck(size != 0 && n > ptrlen / size);
  return fread(ptr, size, n, f);
}
MAPFS_EXPORT size_t __fread_unlocked_chk(void* ptr, size_t ptrlen, size_t size, size_t n, FILE* f) {
  FortifyCheck(size != 0 && n > ptrlen / size);
  return fread_unlocked(ptr, size, n, f);
}
