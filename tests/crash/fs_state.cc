#include "fs_state.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <set>

namespace mapfs::crash {
namespace {

Status ReadAll(fs::FileSystem& fs, const std::string& path, std::string* out) {
  auto f = fs.Open(path, O_RDONLY | O_NOFOLLOW, 0);
  if (!f.ok()) return f.status();
  Status st;
  for (;;) {
    char buf[65536];
    auto n = fs.Read(**f, buf, sizeof buf, static_cast<int64_t>(out->size()));
    if (!n.ok()) {
      st = n.status();
      break;
    }
    if (*n == 0) break;
    out->append(buf, *n);
  }
  Status c = fs.Close(**f);
  return st.ok() ? c : st;
}

Status Walk(fs::FileSystem& fs, const std::string& dir, FsState* s) {
  auto d = fs.Open(dir, O_RDONLY | O_DIRECTORY, 0);
  if (!d.ok()) return d.status();
  std::vector<std::string> names;
  Status st = fs.ReadDir(**d, 0, [&](const fs::DirEntryOut& e) {
    if (e.name != "." && e.name != "..") names.push_back(e.name);
    return true;
  });
  Status c = fs.Close(**d);
  if (!st.ok()) return st;
  if (!c.ok()) return c;
  for (const auto& name : names) {
    std::string path = dir == "/" ? "/" + name : dir + "/" + name;
    struct stat sb {};
    MAPFS_RETURN_IF_ERROR(fs.Stat(path, &sb, /*follow=*/false));
    Node n;
    n.ino = sb.st_ino;
    n.perm = sb.st_mode & 07777;
    n.nlink = sb.st_nlink;
    n.uid = sb.st_uid;
    n.gid = sb.st_gid;
    if (S_ISDIR(sb.st_mode)) {
      n.type = 'd';
      s->tree[path] = n;
      MAPFS_RETURN_IF_ERROR(Walk(fs, path, s));
    } else if (S_ISLNK(sb.st_mode)) {
      n.type = 'l';
      auto t = fs.Readlink(path);
      if (!t.ok()) return t.status();
      n.target = *t;
      s->tree[path] = n;
    } else if (S_ISREG(sb.st_mode)) {
      n.type = 'f';
      s->tree[path] = n;
      if (!s->content.count(n.ino)) {
        std::string bytes;
        MAPFS_RETURN_IF_ERROR(ReadAll(fs, path, &bytes));
        if (bytes.size() != static_cast<uint64_t>(sb.st_size))
          return Status::Error(EIO, path + ": read " + std::to_string(bytes.size()) + " bytes of a file of " +
                                        std::to_string(sb.st_size));
        s->content[n.ino] = std::move(bytes);
      }
    } else {
      return Status::Error(EINVAL, path + ": unexpected file type");
    }
  }
  return Status::Ok();
}

std::string NodeText(const Node& n) {
  std::string s(1, n.type);
  s += " ino " + std::to_string(n.ino) + " perm " + std::to_string(n.perm) + " nlink " + std::to_string(n.nlink) +
       " uid " + std::to_string(n.uid) + " gid " + std::to_string(n.gid);
  if (n.type == 'l') s += " -> " + n.target;
  return s;
}

// First difference between two trees, for the report.
std::string TreeDiff(const std::map<std::string, Node>& got, const std::map<std::string, Node>& want) {
  for (const auto& [p, n] : want) {
    auto it = got.find(p);
    if (it == got.end()) return "missing " + p + " (" + NodeText(n) + ")";
    if (!(it->second == n)) return p + ": " + NodeText(it->second) + " instead of " + NodeText(n);
  }
  for (const auto& [p, n] : got)
    if (!want.count(p)) return "extra " + p + " (" + NodeText(n) + ")";
  return "same";
}

char LineByte(const std::string& s, uint64_t i) { return i < s.size() ? s[i] : 0; }

std::string JudgeContent(uint64_t ino, const std::string& got, const std::vector<const std::string*>& versions,
                         DataPromise promise) {
  const std::string where = "inode " + std::to_string(ino) + ": ";
  if (versions.empty()) return where + "content of a file no allowed state has";
  if (promise == DataPromise::kWholeFile) {
    for (const std::string* v : versions)
      if (*v == got) return "";
    return where + "bytes (" + std::to_string(got.size()) + ") are no allowed version's: a torn strict write";
  }
  bool size_ok = false;
  for (const std::string* v : versions) size_ok |= v->size() == got.size();
  if (!size_ok) return where + "size " + std::to_string(got.size()) + " is no allowed version's";
  for (uint64_t at = 0; at < got.size(); at += 64) {
    bool line_ok = false;
    for (const std::string* v : versions) {
      bool same = true;
      for (uint64_t i = at; i < at + 64 && i < got.size() && same; i++) same = got[i] == LineByte(*v, i);
      line_ok |= same;
    }
    if (!line_ok) return where + "bytes at " + std::to_string(at) + " are no allowed version's";
  }
  return "";
}

}  // namespace

Result<FsState> Capture(fs::FileSystem& fs) {
  FsState s;
  MAPFS_RETURN_IF_ERROR(Walk(fs, "/", &s));
  return s;
}

std::string Judge(const FsState& got, const std::vector<const FsState*>& allowed,
                  const std::vector<const FsState*>& data_allowed, DataPromise promise) {
  bool tree_ok = false;
  for (const FsState* a : allowed) tree_ok |= a->tree == got.tree;
  if (!tree_ok) {
    std::string why = "the tree is no allowed state's:";
    for (size_t i = 0; i < allowed.size(); i++)
      why += " [vs state " + std::to_string(i) + ": " + TreeDiff(got.tree, allowed[i]->tree) + "]";
    return why;
  }
  for (const auto& [ino, bytes] : got.content) {
    std::vector<const std::string*> versions;
    for (const FsState* a : data_allowed) {
      auto it = a->content.find(ino);
      if (it != a->content.end()) versions.push_back(&it->second);
    }
    std::string why = JudgeContent(ino, bytes, versions, promise);
    if (!why.empty()) return why;
  }
  return "";
}

std::string Summary(const FsState& s) {
  std::string out;
  for (const auto& [p, n] : s.tree) {
    out += "  " + p + " " + NodeText(n);
    if (n.type == 'f') out += " size " + std::to_string(s.content.at(n.ino).size());
    out += "\n";
  }
  return out;
}

}  // namespace mapfs::crash
