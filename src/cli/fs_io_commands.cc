// CLI verbs that move file contents in and out of a pool: cat, put, get.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/fs_util.h"
#include "cli/parse.h"

namespace mapfs::cli {
namespace {

// Streams the pool file at `path` to `fd`, naming `local` if writing fails.
int CopyOutTo(FsSession& s, const std::string& path, int fd, const std::string& local) {
  auto f = s.fs().Open(path, O_RDONLY, 0);
  if (!f.ok()) return s.Error(path, f.status());
  PoolFile file(&s.fs(), std::move(*f));
  bool local_failed = false;
  Status st = CopyOut(s.fs(), *file, fd, &local_failed);
  if (!st.ok()) return s.Error(local_failed ? local : path, st);
  return 0;
}

// put from `fd` (named `local`, "-" for stdin) to `path` in the pool.
int PutFrom(FsSession& s, int fd, const std::string& local, std::string path, mode_t mode) {
  // As cp: into an existing directory under the local file's name.
  if (IsPoolDir(s.fs(), path)) {
    if (local == "-") return s.Error(path, Status::Error(EISDIR, "is a directory; name the file to put stdin into"));
    path = JoinPath(path, BaseName(local));
  }
  auto f = s.fs().Open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (!f.ok()) return s.Error(path, f.status());
  PoolFile file(&s.fs(), std::move(*f));
  bool local_failed = false;
  Status st = CopyIn(s.fs(), *file, fd, &local_failed);
  if (!st.ok()) return s.Error(local_failed ? local : path, st);
  return 0;
}

// get into a local file (or into a local directory under the pool name).
int GetToFile(FsSession& s, const std::string& path, std::string local) {
  // Open the pool file first, so a missing one leaves no empty local file.
  auto f = s.fs().Open(path, O_RDONLY, 0);
  if (!f.ok()) return s.Error(path, f.status());
  PoolFile file(&s.fs(), std::move(*f));
  struct stat pst;
  Status st = s.fs().Fstat(*file, &pst);
  if (!st.ok()) return s.Error(path, st);
  struct stat lst;
  if (::stat(local.c_str(), &lst) == 0 && S_ISDIR(lst.st_mode)) local = JoinPath(local, BaseName(path));
  int fd = ::open(local.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, pst.st_mode & 0777);
  if (fd < 0) return Fail("get", local, Status::FromErrno("open"));
  bool local_failed = false;
  st = CopyOut(s.fs(), *file, fd, &local_failed);
  int rc = st.ok() ? 0 : s.Error(local_failed ? local : path, st);
  if (::close(fd) != 0 && rc == 0) rc = Fail("get", local, Status::FromErrno("close"));
  return rc;
}

}  // namespace

int Cat(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {});
  if (!p.error.empty() || p.pos.size() < 2) return UsageError("cat", "cat POOL PATH...", p.error);
  auto s = FsSession::Mount("cat", p.pos[0]);
  if (!s) return 1;
  int rc = 0;
  // As cat: report a file that cannot be read and go on with the next.
  for (size_t i = 1; i < p.pos.size(); i++) rc |= CopyOutTo(*s, PoolPath(p.pos[i]), STDOUT_FILENO, "stdout");
  return s->Finish(rc);
}

int Put(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {});
  if (!p.error.empty() || p.pos.size() != 3) return UsageError("put", "put POOL LOCAL PATH", p.error);
  const std::string& local = p.pos[1];
  bool from_stdin = local == "-";
  int fd = STDIN_FILENO;
  mode_t mode = 0666;
  if (!from_stdin) {
    fd = ::open(local.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Fail("put", local, Status::FromErrno("open"));
    struct stat st;
    Status e;
    if (::fstat(fd, &st) != 0) e = Status::FromErrno("stat");
    else if (S_ISDIR(st.st_mode)) e = Status::Error(EISDIR, "is a directory");
    if (!e.ok()) {
      ::close(fd);
      return Fail("put", local, e);
    }
    mode = st.st_mode & 0777;
  }
  int rc = 1;
  if (auto s = FsSession::Mount("put", p.pos[0])) rc = s->Finish(PutFrom(*s, fd, local, PoolPath(p.pos[2]), mode & ~CurrentUmask()));
  if (!from_stdin) ::close(fd);
  return rc;
}

int Get(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {});
  if (!p.error.empty() || p.pos.size() != 3) return UsageError("get", "get POOL PATH LOCAL", p.error);
  auto s = FsSession::Mount("get", p.pos[0]);
  if (!s) return 1;
  std::string path = PoolPath(p.pos[1]);
  if (p.pos[2] == "-") return s->Finish(CopyOutTo(*s, path, STDOUT_FILENO, "stdout"));
  return s->Finish(GetToFile(*s, path, p.pos[2]));
}

}  // namespace mapfs::cli
