// Helpers of the CLI verbs that work on a pool's file system without
// mounting it in the kernel (ls, cat, put, get, rm, mkdir, mv, ln, stat, df):
// each verb mounts the pool through fs::FileSystem for the length of one
// process and unmounts at the end.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "fs/file_system.h"

namespace mapfs::cli {

constexpr size_t kCopyChunk = size_t{1} << 20;  // cat/put/get stream 1 MiB at a time

// The file system of one verb. Mount() prints "mapfs VERB: POOL: message"
// on failure and returns null; Finish() unmounts and folds an unmount
// failure into the exit code.
class FsSession {
 public:
  static std::unique_ptr<FsSession> Mount(const char* verb, const std::string& pool);
  ~FsSession();
  fs::FileSystem& fs() { return *fs_; }
  const char* verb() const { return verb_; }
  int Finish(int rc);
  // Prints "mapfs VERB: PATH: message" and returns 1.
  int Error(const std::string& path, const Status& st) const;

 private:
  FsSession() = default;
  const char* verb_ = "";
  std::unique_ptr<fs::FileSystem> fs_;
};

// An open file of the pool, closed on destruction.
class PoolFile {
 public:
  PoolFile(fs::FileSystem* fs, std::shared_ptr<fs::OpenFile> f) : fs_(fs), f_(std::move(f)) {}
  PoolFile(const PoolFile&) = delete;
  PoolFile& operator=(const PoolFile&) = delete;
  ~PoolFile() {
    if (f_) (void)fs_->Close(*f_);
  }
  fs::OpenFile& operator*() { return *f_; }

 private:
  fs::FileSystem* fs_;
  std::shared_ptr<fs::OpenFile> f_;
};

// A path inside the pool as the user wrote it, made absolute ("a/b" is
// "/a/b"); the empty path stays empty (the core refuses it).
std::string PoolPath(const std::string& p);
// The last component of a path ("/a/b/" -> "b", "/" -> "/").
std::string BaseName(const std::string& p);
// DIR/NAME without doubling the slash.
std::string JoinPath(const std::string& dir, const std::string& name);
// True when PATH names a directory in the pool (following symlinks).
bool IsPoolDir(fs::FileSystem& fs, const std::string& path);
// The process umask (without changing it).
mode_t CurrentUmask();

// "drwxr-xr-x" (type letter and permissions, setuid/setgid/sticky as ls).
std::string ModeString(mode_t mode);
// "regular file", "directory", ... as stat(1).
const char* TypeName(const struct stat& st);
// Local time as "YYYY-MM-DD HH:MM" (ls -l) or, with `full`,
// "YYYY-MM-DD HH:MM:SS.nnnnnnnnn +zzzz" (stat).
std::string FormatTime(const struct timespec& ts, bool full);

// Copies the whole file `f` to the local descriptor `fd` in kCopyChunk
// pieces. On failure *local_failed says whether the local side (the write
// to `fd`) or the pool side failed, so the caller can name the right path.
Status CopyOut(fs::FileSystem& fs, fs::OpenFile& f, int fd, bool* local_failed);
// Copies everything readable from the local descriptor `fd` into `f` from
// offset 0 on; *local_failed as for CopyOut.
Status CopyIn(fs::FileSystem& fs, fs::OpenFile& f, int fd, bool* local_failed);

}  // namespace mapfs::cli
