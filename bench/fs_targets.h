// The file systems under test, behind one POSIX-shaped interface: kernel
// file systems (tmpfs, ext4, or mapfs through the LD_PRELOAD shim when the
// process runs under it) through system calls on paths under a root, and
// mapfs through its C API in a given consistency mode. Paths are given
// from the root ("/dir/file"). Every call is safe from many threads.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "mapfs/mapfs.h"

namespace mapfs::bench {

struct Target {
  virtual ~Target() = default;
  virtual int Open(const std::string& p, int flags, mode_t m = 0644) = 0;
  virtual int Close(int fd) = 0;
  virtual ssize_t Pwrite(int fd, const void* b, size_t n, off_t o) = 0;
  virtual ssize_t Pread(int fd, void* b, size_t n, off_t o) = 0;
  virtual ssize_t Write(int fd, const void* b, size_t n) = 0;
  virtual int Stat(const std::string& p, struct stat* st) = 0;
  virtual int Unlink(const std::string& p) = 0;
  virtual int Rename(const std::string& a, const std::string& b) = 0;
  virtual int Mkdir(const std::string& p) = 0;
  virtual int Rmdir(const std::string& p) = 0;
  std::string name, mode = "-";
  std::string page = "4k";  // mapfs: the pool's page size (4k | 2m)
};

// System calls on files under `root`: tmpfs, ext4, or mapfs through the
// LD_PRELOAD shim when this process runs under it ("mapfs-preload").
struct SyscallTarget : Target {
  std::string root;
  int oflag = 0;  // or'ed into every open (the overlay suite's kernel/sync: O_DSYNC)
  explicit SyscallTarget(std::string r, std::string n = "tmpfs", std::string m = "-") : root(std::move(r)) {
    name = std::move(n);
    mode = std::move(m);
  }
  std::string P(const std::string& p) const { return root + p; }
  int Open(const std::string& p, int f, mode_t m) override { return ::open(P(p).c_str(), f | oflag, m); }
  int Close(int fd) override { return ::close(fd); }
  ssize_t Pwrite(int fd, const void* b, size_t n, off_t o) override { return ::pwrite(fd, b, n, o); }
  ssize_t Pread(int fd, void* b, size_t n, off_t o) override { return ::pread(fd, b, n, o); }
  ssize_t Write(int fd, const void* b, size_t n) override { return ::write(fd, b, n); }
  int Stat(const std::string& p, struct stat* st) override { return ::stat(P(p).c_str(), st); }
  int Unlink(const std::string& p) override { return ::unlink(P(p).c_str()); }
  int Rename(const std::string& a, const std::string& b) override { return ::rename(P(a).c_str(), P(b).c_str()); }
  int Mkdir(const std::string& p) override { return ::mkdir(P(p).c_str(), 0755); }
  int Rmdir(const std::string& p) override { return ::rmdir(P(p).c_str()); }
};

// mapfs through its C API; `m` (posix|sync|strict) is or'ed into every open.
struct MapfsTarget : Target {
  mapfs_t* fs;
  int oflag;
  MapfsTarget(mapfs_t* f, const std::string& m) : fs(f) {
    name = "mapfs";
    mode = m;
    oflag = m == "posix" ? MAPFS_O_POSIX : m == "strict" ? MAPFS_O_STRICT : MAPFS_O_SYNCMODE;
  }
  int Open(const std::string& p, int f, mode_t m) override { return mapfs_open(fs, p.c_str(), f | oflag, m); }
  int Close(int fd) override { return mapfs_close(fs, fd); }
  ssize_t Pwrite(int fd, const void* b, size_t n, off_t o) override { return mapfs_pwrite(fs, fd, b, n, o); }
  ssize_t Pread(int fd, void* b, size_t n, off_t o) override { return mapfs_pread(fs, fd, b, n, o); }
  ssize_t Write(int fd, const void* b, size_t n) override { return mapfs_write(fs, fd, b, n); }
  int Stat(const std::string& p, struct stat* st) override { return mapfs_stat(fs, p.c_str(), st); }
  int Unlink(const std::string& p) override { return mapfs_unlink(fs, p.c_str()); }
  int Rename(const std::string& a, const std::string& b) override { return mapfs_rename(fs, a.c_str(), b.c_str()); }
  int Mkdir(const std::string& p) override { return mapfs_mkdir(fs, p.c_str(), 0755); }
  int Rmdir(const std::string& p) override { return mapfs_rmdir(fs, p.c_str()); }
};

// Prints "mapfs bench: WHAT failed: <errno> (<mapfs reason>)" unless ok.
inline bool Check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "mapfs bench: %s failed: %s (%s)\n", what, std::strerror(errno), mapfs_last_error());
  return ok;
}

}  // namespace mapfs::bench
