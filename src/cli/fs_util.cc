#include "cli/fs_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <vector>

#include "cli/parse.h"

namespace mapfs::cli {

std::unique_ptr<FsSession> FsSession::Mount(const char* verb, const std::string& pool) {
  auto m = fs::FileSystem::Mount(pool);
  if (!m.ok()) {
    Fail(verb, pool, m.status());
    return nullptr;
  }
  std::unique_ptr<FsSession> s(new FsSession());
  s->verb_ = verb;
  s->fs_ = std::move(*m);
  return s;
}

FsSession::~FsSession() {
  if (fs_) (void)fs_->Unmount();
}

int FsSession::Finish(int rc) {
  Status st = fs_->Unmount();
  fs_.reset();
  if (!st.ok()) return Fail(verb_, "unmount", st);
  return rc;
}

int FsSession::Error(const std::string& path, const Status& st) const { return Fail(verb_, path, st); }

std::string PoolPath(const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return "/" + p;
}

std::string BaseName(const std::string& p) {
  size_t end = p.find_last_not_of('/');
  if (end == std::string::npos) return p.empty() ? p : "/";
  size_t start = p.find_last_of('/', end);
  start = start == std::string::npos ? 0 : start + 1;
  return p.substr(start, end + 1 - start);
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

bool IsPoolDir(fs::FileSystem& fs, const std::string& path) {
  struct stat st;
  return fs.Stat(path, &st, true).ok() && S_ISDIR(st.st_mode);
}

mode_t CurrentUmask() {
  mode_t m = ::umask(022);
  ::umask(m);
  return m;
}

std::string ModeString(mode_t m) {
  std::string s(10, '-');
  switch (m & S_IFMT) {
    case S_IFDIR: s[0] = 'd'; break;
    case S_IFLNK: s[0] = 'l'; break;
    case S_IFCHR: s[0] = 'c'; break;
    case S_IFBLK: s[0] = 'b'; break;
    case S_IFIFO: s[0] = 'p'; break;
    case S_IFSOCK: s[0] = 's'; break;
    case S_IFREG: break;
    default: s[0] = '?';
  }
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; i++)
    if (m & (1u << (8 - i))) s[1 + i] = rwx[i];
  if (m & S_ISUID) s[3] = (m & S_IXUSR) ? 's' : 'S';
  if (m & S_ISGID) s[6] = (m & S_IXGRP) ? 's' : 'S';
  if (m & S_ISVTX) s[9] = (m & S_IXOTH) ? 't' : 'T';
  return s;
}

const char* TypeName(const struct stat& st) {
  switch (st.st_mode & S_IFMT) {
    case S_IFREG: return st.st_size == 0 ? "regular empty file" : "regular file";
    case S_IFDIR: return "directory";
    case S_IFLNK: return "symbolic link";
    case S_IFCHR: return "character special file";
    case S_IFBLK: return "block special file";
    case S_IFIFO: return "fifo";
    case S_IFSOCK: return "socket";
  }
  return "weird file";
}

std::string FormatTime(const struct timespec& ts, bool full) {
  struct tm tm;
  time_t t = ts.tv_sec;
  if (::localtime_r(&t, &tm) == nullptr) return "?";
  char buf[64];
  if (!full) {
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
    return buf;
  }
  char zone[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  std::strftime(zone, sizeof zone, "%z", &tm);
  char out[96];
  std::snprintf(out, sizeof out, "%s.%09ld %s", buf, static_cast<long>(ts.tv_nsec), zone);
  return out;
}

namespace {

Status WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("write");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

}  // namespace

Status CopyOut(fs::FileSystem& fs, fs::OpenFile& f, int fd, bool* local_failed) {
  *local_failed = false;
  std::vector<char> buf(kCopyChunk);
  uint64_t off = 0;
  for (;;) {
    auto r = fs.Read(f, buf.data(), buf.size(), static_cast<int64_t>(off));
    if (!r.ok()) return r.status();
    if (*r == 0) return Status::Ok();
    Status st = WriteAll(fd, buf.data(), *r);
    if (!st.ok()) {
      *local_failed = true;
      return st;
    }
    off += *r;
  }
}

Status CopyIn(fs::FileSystem& fs, fs::OpenFile& f, int fd, bool* local_failed) {
  *local_failed = false;
  std::vector<char> buf(kCopyChunk);
  uint64_t off = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      *local_failed = true;
      return Status::FromErrno("read");
    }
    if (n == 0) return Status::Ok();
    size_t done = 0;
    while (done < static_cast<size_t>(n)) {
      auto w = fs.Write(f, buf.data() + done, static_cast<size_t>(n) - done, static_cast<int64_t>(off));
      if (!w.ok()) return w.status();
      if (*w == 0) return Status::Error(EIO, "write made no progress");
      done += *w;
      off += *w;
    }
  }
}

}  // namespace mapfs::cli
