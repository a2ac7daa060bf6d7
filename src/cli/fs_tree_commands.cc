// CLI verbs that change a pool's namespace: rm, mkdir, mv, ln.
#include <dirent.h>
#include <fcntl.h>

#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/fs_util.h"
#include "cli/parse.h"

namespace mapfs::cli {
namespace {

// rm -r of the directory at `path`: its entries depth first, then itself.
// Goes on past failures (each is reported) as rm does; returns the exit code.
int RemoveTree(FsSession& s, const std::string& path) {
  fs::FileSystem& fs = s.fs();
  std::vector<std::pair<std::string, uint8_t>> entries;
  {
    auto d = fs.Open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
    if (!d.ok()) return s.Error(path, d.status());
    PoolFile dir(&fs, std::move(*d));
    Status st = fs.ReadDir(*dir, 0, [&](const fs::DirEntryOut& e) {
      if (e.name != "." && e.name != "..") entries.push_back({e.name, e.type});
      return true;
    });
    if (!st.ok()) return s.Error(path, st);
  }
  int rc = 0;
  for (auto& [name, type] : entries) {
    std::string child = JoinPath(path, name);
    if (type == DT_UNKNOWN) {
      struct stat st;
      if (fs.Stat(child, &st, false).ok() && S_ISDIR(st.st_mode)) type = DT_DIR;
    }
    if (type == DT_DIR) {
      rc |= RemoveTree(s, child);
      continue;
    }
    Status st = fs.Unlink(child);
    if (!st.ok()) rc = s.Error(child, st);
  }
  if (rc != 0) return rc;  // the directory cannot be empty: say nothing more
  Status st = fs.Rmdir(path);
  return st.ok() ? 0 : s.Error(path, st);
}

int RemoveOne(FsSession& s, const std::string& path, bool recursive, bool force) {
  fs::FileSystem& fs = s.fs();
  std::string base = BaseName(path);
  if (base == "/") return s.Error(path, Status::Error(EBUSY, "refusing to remove the root directory"));
  if (base == "." || base == "..")
    return s.Error(path, Status::Error(EINVAL, "refusing to remove '.' or '..'"));
  struct stat st;
  Status r = fs.Stat(path, &st, false);
  if (!r.ok()) return force && r.code() == ENOENT ? 0 : s.Error(path, r);
  if (!S_ISDIR(st.st_mode)) {
    r = fs.Unlink(path);
    return r.ok() || (force && r.code() == ENOENT) ? 0 : s.Error(path, r);
  }
  if (!recursive) return s.Error(path, Status::Error(EISDIR, "is a directory; use rm -r to remove it"));
  return RemoveTree(s, path);
}

// mkdir -p: every missing component of `path`; the last one gets `mode`,
// the ones above it `parent_mode`. Existing directories are left alone.
Status MakeParents(fs::FileSystem& fs, std::string path, mode_t parent_mode, mode_t mode) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t pos = 0;
  while (pos < path.size()) {
    size_t next = path.find('/', pos + 1);
    if (next == std::string::npos) next = path.size();
    std::string prefix = path.substr(0, next);
    pos = next;
    if (prefix.empty() || prefix.back() == '/') continue;  // "//" or the root
    Status st = fs.Mkdir(prefix, next == path.size() ? mode : parent_mode);
    if (st.ok()) continue;
    if (st.code() != EEXIST) return st;
    if (!IsPoolDir(fs, prefix)) return Status::Error(ENOTDIR, prefix + ": not a directory");
  }
  return Status::Ok();
}

// The paths of `mv` and `ln`: SOURCE... TARGET; with one source a TARGET
// that is a directory receives it under its own name, as mv and ln do.
// Calls `op(from, to)` for each source; a failure is reported as
// "FROM -> TO: message" (FROM as written with `raw_from`, for a symlink's
// target). Returns the exit code.
template <typename Op>
int IntoTarget(FsSession& s, const std::vector<std::string>& pos, bool raw_from, Op op) {
  std::string target = PoolPath(pos.back());
  bool into = IsPoolDir(s.fs(), target);
  if (pos.size() > 3 && !into) return s.Error(target, Status::Error(ENOTDIR, "not a directory"));
  int rc = 0;
  for (size_t i = 1; i + 1 < pos.size(); i++) {
    std::string to = into ? JoinPath(target, BaseName(pos[i])) : target;
    Status st = op(pos[i], to);
    if (!st.ok()) rc = s.Error((raw_from ? pos[i] : PoolPath(pos[i])) + " -> " + to, st);
  }
  return rc;
}

}  // namespace

int Rm(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {}, "rRf");
  if (!p.error.empty() || p.pos.empty()) return UsageError("rm", "rm [-r] [-f] POOL PATH...", p.error);
  if (p.pos.size() < 2 && !p.Has("-f")) return UsageError("rm", "rm [-r] [-f] POOL PATH...", "no path given");
  bool recursive = p.Has("-r") || p.Has("-R"), force = p.Has("-f");
  auto s = FsSession::Mount("rm", p.pos[0]);
  if (!s) return 1;
  int rc = 0;
  for (size_t i = 1; i < p.pos.size(); i++) rc |= RemoveOne(*s, PoolPath(p.pos[i]), recursive, force);
  return s->Finish(rc);
}

int Mkdir(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {}, "p");
  if (!p.error.empty() || p.pos.size() < 2) return UsageError("mkdir", "mkdir [-p] POOL PATH...", p.error);
  bool parents = p.Has("-p");
  mode_t mode = 0777 & ~CurrentUmask();
  auto s = FsSession::Mount("mkdir", p.pos[0]);
  if (!s) return 1;
  int rc = 0;
  for (size_t i = 1; i < p.pos.size(); i++) {
    std::string path = PoolPath(p.pos[i]);
    // -p makes the parents writable and searchable by the owner, as mkdir does.
    Status st = parents ? MakeParents(s->fs(), path, mode | S_IWUSR | S_IXUSR, mode) : s->fs().Mkdir(path, mode);
    if (!st.ok()) rc = s->Error(path, st);
  }
  return s->Finish(rc);
}

int Mv(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {});
  if (!p.error.empty() || p.pos.size() < 3) return UsageError("mv", "mv POOL FROM... TO", p.error);
  auto s = FsSession::Mount("mv", p.pos[0]);
  if (!s) return 1;
  fs::FileSystem& fs = s->fs();
  int rc = IntoTarget(*s, p.pos, false, [&](const std::string& from, const std::string& to) {
    return fs.Rename(PoolPath(from), to);
  });
  return s->Finish(rc);
}

int Ln(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {}, "s");
  if (!p.error.empty() || p.pos.size() < 3) return UsageError("ln", "ln [-s] POOL FROM... TO", p.error);
  bool symbolic = p.Has("-s");
  auto s = FsSession::Mount("ln", p.pos[0]);
  if (!s) return 1;
  fs::FileSystem& fs = s->fs();
  // A symlink's target is kept as written: a relative one stays relative.
  int rc = IntoTarget(*s, p.pos, symbolic, [&](const std::string& from, const std::string& to) {
    return symbolic ? fs.Symlink(from, to) : fs.Link(PoolPath(from), to);
  });
  return s->Finish(rc);
}

}  // namespace mapfs::cli
