// An in-memory model of a POSIX tree with Linux semantics (the oracle of the
// model-based and recovery suites), and the two systems it is compared with:
// mapfs through its C API, and the real kernel in a scratch directory (which
// keeps the model itself honest: every sequence the model accepts for mapfs
// it must also predict exactly for Linux).
//
// The model covers directories, regular files with their bytes, hard links,
// symbolic links (relative targets only, so that the kernel run in a
// subdirectory resolves them the same way), open file descriptions with
// offsets and O_APPEND, and unlinked-but-open files. It follows the kernel's
// order of checks (fs/namei.c) so that expected errno values are exact.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fs_test_util.h"

namespace mapfs::fstest {

enum class NType { kFile, kDir, kLink };

inline uint8_t DtOf(NType t) { return t == NType::kDir ? DT_DIR : t == NType::kLink ? DT_LNK : DT_REG; }

struct Node {
  NType type = NType::kFile;
  std::string data;                  // file bytes, or the symlink's target
  std::map<std::string, int> kids;   // directories: name -> node
  int parent = 0;                    // directories: the parent (root: itself)
  int links = 0;                     // files and symlinks: entries naming it
  int open = 0;                      // open descriptions
};

// The outcome of one call: return value and errno (0 on success).
struct Outcome {
  int64_t ret = 0;
  int err = 0;
  static Outcome Err(int e) { return {-1, e}; }
  static Outcome Ok(int64_t r = 0) { return {r, 0}; }
};

struct Desc {
  int node;
  int flags;
  uint64_t off = 0;
};

inline std::vector<std::string> SplitPath(std::string_view p) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    if (j > i) out.emplace_back(p.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

inline std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

class Model {
 public:
  static constexpr int kRoot = 1;

  Model() {
    Node r;
    r.type = NType::kDir;
    r.parent = kRoot;
    nodes_[kRoot] = r;
  }

  const std::map<int, Node>& nodes() const { return nodes_; }
  const Node& node(int id) const { return nodes_.at(id); }
  const std::map<int, Desc>& descs() const { return descs_; }

  int Nlink(int id) const {
    const Node& n = nodes_.at(id);
    if (n.type != NType::kDir) return n.links;
    int sub = 0;
    for (auto& [name, k] : n.kids) sub += nodes_.at(k).type == NType::kDir;
    return 2 + sub;
  }
  uint64_t TotalBytes() const {
    uint64_t t = 0;
    for (auto& [id, n] : nodes_) t += n.type == NType::kFile ? n.data.size() : 0;
    return t;
  }

  // Result of a path walk. `node` is -1 when the last component is absent
  // (then parent/name say where it would be created).
  struct Res {
    int err = 0;
    int parent = -1;
    std::string name;
    int node = -1;
  };

  // Walks `path` as the kernel does: intermediate symlinks are followed, the
  // last one only if `follow_last`. With `parent_only` the walk stops at the
  // last component without looking it up (filename_parentat). An empty
  // component list ("/") names the root with name ".".
  Res Resolve(std::string_view path, bool follow_last, bool parent_only = false) const {
    Res r;
    std::deque<std::string> comps;
    for (auto& c : SplitPath(path)) comps.push_back(c);
    int cur = kRoot, follows = 0;
    if (comps.empty()) {
      r.parent = kRoot;
      r.name = ".";
      r.node = kRoot;
      return r;
    }
    while (!comps.empty()) {
      std::string c = comps.front();
      comps.pop_front();
      bool last = comps.empty();
      if (last && parent_only) {
        r.parent = cur;
        r.name = c;
        return r;
      }
      if (c.size() > 255) return Fail(ENAMETOOLONG);
      int child;
      if (c == ".") {
        child = cur;
      } else if (c == "..") {
        child = nodes_.at(cur).parent;
      } else {
        auto& kids = nodes_.at(cur).kids;
        auto it = kids.find(c);
        if (it == kids.end()) {
          if (last) {
            r.parent = cur;
            r.name = c;
            r.node = -1;
            return r;
          }
          return Fail(ENOENT);
        }
        child = it->second;
      }
      const Node& n = nodes_.at(child);
      if (n.type == NType::kLink && (!last || follow_last)) {
        if (++follows > 40) return Fail(ELOOP);
        auto t = SplitPath(n.data);
        if (!n.data.empty() && n.data[0] == '/') cur = kRoot;
        comps.insert(comps.begin(), t.begin(), t.end());
        if (comps.empty()) {  // a target of "/" (never generated)
          r.parent = cur;
          r.name = ".";
          r.node = cur;
          return r;
        }
        continue;
      }
      if (last) {
        r.parent = cur;
        r.name = c;
        r.node = child;
        return r;
      }
      if (n.type != NType::kDir) return Fail(ENOTDIR);
      cur = child;
    }
    return Fail(ENOENT);
  }

  // ---- namespace calls (each mutates the model only on success)

  Outcome Mkdir(const std::string& path) {
    Res r = Resolve(path, false);
    if (r.err) return Outcome::Err(r.err);
    if (r.node != -1) return Outcome::Err(EEXIST);
    int id = NewNode(NType::kDir);
    nodes_[id].parent = r.parent;
    nodes_[r.parent].kids[r.name] = id;
    return Outcome::Ok();
  }

  Outcome Rmdir(const std::string& path) {
    Res p = Resolve(path, false, true);
    if (p.err) return Outcome::Err(p.err);
    if (SplitPath(path).empty()) return Outcome::Err(EBUSY);
    if (p.name == ".") return Outcome::Err(EINVAL);
    if (p.name == "..") return Outcome::Err(ENOTEMPTY);
    Res r = Resolve(path, false);
    if (r.err) return Outcome::Err(r.err);
    if (r.node == -1) return Outcome::Err(ENOENT);
    const Node& n = nodes_.at(r.node);
    if (n.type != NType::kDir) return Outcome::Err(ENOTDIR);
    if (!n.kids.empty()) return Outcome::Err(ENOTEMPTY);
    nodes_[r.parent].kids.erase(r.name);
    nodes_.erase(r.node);
    return Outcome::Ok();
  }

  Outcome Unlink(const std::string& path) {
    Res p = Resolve(path, false, true);
    if (p.err) return Outcome::Err(p.err);
    if (SplitPath(path).empty() || p.name == "." || p.name == "..") return Outcome::Err(EISDIR);
    Res r = Resolve(path, false);
    if (r.err) return Outcome::Err(r.err);
    if (r.node == -1) return Outcome::Err(ENOENT);
    if (nodes_.at(r.node).type == NType::kDir) return Outcome::Err(EISDIR);
    nodes_[r.parent].kids.erase(r.name);
    nodes_[r.node].links--;
    MaybeFree(r.node);
    return Outcome::Ok();
  }

  Outcome Link(const std::string& from, const std::string& to) {
    Res s = Resolve(from, false);
    if (s.err) return Outcome::Err(s.err);
    if (s.node == -1) return Outcome::Err(ENOENT);
    Res d = Resolve(to, false);
    if (d.err) return Outcome::Err(d.err);
    if (d.node != -1) return Outcome::Err(EEXIST);
    if (nodes_.at(s.node).type == NType::kDir) return Outcome::Err(EPERM);
    nodes_[d.parent].kids[d.name] = s.node;
    nodes_[s.node].links++;
    return Outcome::Ok();
  }

  Outcome Symlink(const std::string& target, const std::string& path) {
    if (target.empty()) return Outcome::Err(ENOENT);
    Res d = Resolve(path, false);
    if (d.err) return Outcome::Err(d.err);
    if (d.node != -1) return Outcome::Err(EEXIST);
    int id = NewNode(NType::kLink);
    nodes_[id].data = target;
    nodes_[id].links = 1;
    nodes_[d.parent].kids[d.name] = id;
    return Outcome::Ok();
  }

  Outcome Readlink(const std::string& path, std::string* target) const {
    Res r = Resolve(path, false);
    if (r.err) return Outcome::Err(r.err);
    if (r.node == -1) return Outcome::Err(ENOENT);
    const Node& n = nodes_.at(r.node);
    if (n.type != NType::kLink) return Outcome::Err(EINVAL);
    *target = n.data;
    return Outcome::Ok(static_cast<int64_t>(n.data.size()));
  }

  // stat/lstat: *id gets the node.
  Outcome Stat(const std::string& path, bool follow, int* id) const {
    Res r = Resolve(path, follow);
    if (r.err) return Outcome::Err(r.err);
    if (r.node == -1) return Outcome::Err(ENOENT);
    *id = r.node;
    return Outcome::Ok();
  }

  Outcome Truncate(const std::string& path, int64_t size) {
    if (size < 0) return Outcome::Err(EINVAL);
    Res r = Resolve(path, true);
    if (r.err) return Outcome::Err(r.err);
    if (r.node == -1) return Outcome::Err(ENOENT);
    Node& n = nodes_.at(r.node);
    if (n.type == NType::kDir) return Outcome::Err(EISDIR);
    if (n.type != NType::kFile) return Outcome::Err(EINVAL);
    n.data.resize(static_cast<size_t>(size), '\0');
    return Outcome::Ok();
  }

  // renameat2 (fs/namei.c do_renameat2 + vfs_rename + shmem_rename2).
  Outcome Rename(const std::string& from, const std::string& to, unsigned flags) {
    if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) return Outcome::Err(EINVAL);
    if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)) return Outcome::Err(EINVAL);
    bool exchange = flags & RENAME_EXCHANGE;
    Res sp = Resolve(from, false, true);
    if (sp.err) return Outcome::Err(sp.err);
    Res dp = Resolve(to, false, true);
    if (dp.err) return Outcome::Err(dp.err);
    bool sdot = SplitPath(from).empty() || sp.name == "." || sp.name == "..";
    bool ddot = SplitPath(to).empty() || dp.name == "." || dp.name == "..";
    if (sdot) return Outcome::Err(EBUSY);
    if (ddot) return Outcome::Err((flags & RENAME_NOREPLACE) ? EEXIST : EBUSY);
    if (sp.name.size() > 255) return Outcome::Err(ENAMETOOLONG);
    auto sit = nodes_.at(sp.parent).kids.find(sp.name);
    if (sit == nodes_.at(sp.parent).kids.end()) return Outcome::Err(ENOENT);
    int s = sit->second;
    if (dp.name.size() > 255) return Outcome::Err(ENAMETOOLONG);
    auto dit = nodes_.at(dp.parent).kids.find(dp.name);
    int d = dit == nodes_.at(dp.parent).kids.end() ? -1 : dit->second;
    if ((flags & RENAME_NOREPLACE) && d != -1) return Outcome::Err(EEXIST);
    if (exchange && d == -1) return Outcome::Err(ENOENT);
    // lock_rename's trap: the child of the upper parent on the way to the
    // lower one, when one parent is an ancestor of the other.
    if (sp.parent != dp.parent) {
      int trap = ChildTowards(sp.parent, dp.parent);
      if (trap != -1 && trap == s) return Outcome::Err(EINVAL);
      trap = ChildTowards(dp.parent, sp.parent);
      if (trap != -1 && trap == d) return Outcome::Err(exchange ? EINVAL : ENOTEMPTY);
    }
    if (s == d) return Outcome::Ok();  // the same inode: nothing happens
    bool sdir = nodes_.at(s).type == NType::kDir;
    bool ddir = d != -1 && nodes_.at(d).type == NType::kDir;
    if (d != -1 && !exchange) {
      if (sdir && !ddir) return Outcome::Err(ENOTDIR);
      if (!sdir && ddir) return Outcome::Err(EISDIR);
      if (ddir && !nodes_.at(d).kids.empty()) return Outcome::Err(ENOTEMPTY);
    }
    if (exchange) {
      nodes_[sp.parent].kids[sp.name] = d;
      nodes_[dp.parent].kids[dp.name] = s;
      if (sdir) nodes_[s].parent = dp.parent;
      if (ddir) nodes_[d].parent = sp.parent;
      return Outcome::Ok();
    }
    if (d != -1) {
      if (ddir) {
        nodes_.erase(d);
      } else {
        nodes_[d].links--;
      }
    }
    nodes_[sp.parent].kids.erase(sp.name);
    nodes_[dp.parent].kids[dp.name] = s;
    if (sdir) nodes_[s].parent = dp.parent;
    if (d != -1 && !ddir) MaybeFree(d);
    return Outcome::Ok();
  }

  // open(2) without O_DIRECTORY|O_CREAT and O_CREAT|O_NOFOLLOW (whose
  // order of checks changed between kernels). *fd_out gets the description.
  Outcome Open(const std::string& path, int flags, int* fd_out) {
    int acc = flags & O_ACCMODE;
    bool creat = flags & O_CREAT, excl = creat && (flags & O_EXCL);
    Res r;
    if (excl) {
      // The last component is never followed; "/" with O_CREAT: EEXIST.
      r = Resolve(path, false);
      if (r.err) return Outcome::Err(r.err);
      if (r.node != -1) return Outcome::Err(EEXIST);
    } else {
      r = Resolve(path, !(flags & O_NOFOLLOW));
      if (r.err) return Outcome::Err(r.err);
      if (r.node == -1 && !creat) return Outcome::Err(ENOENT);
    }
    int id = r.node;
    if (id == -1) {
      id = NewNode(NType::kFile);
      nodes_[id].links = 1;
      nodes_[r.parent].kids[r.name] = id;
    } else {
      const Node& n = nodes_.at(id);
      if (creat && n.type == NType::kDir) return Outcome::Err(EISDIR);
      if ((flags & O_DIRECTORY) && n.type != NType::kDir) return Outcome::Err(ENOTDIR);
      if (n.type == NType::kLink) return Outcome::Err(ELOOP);
      if (n.type == NType::kDir && (acc != O_RDONLY || (flags & O_TRUNC))) return Outcome::Err(EISDIR);
      if ((flags & O_TRUNC) && n.type == NType::kFile) nodes_[id].data.clear();
    }
    int fd = next_desc_++;
    descs_[fd] = Desc{id, flags, 0};
    nodes_[id].open++;
    *fd_out = fd;
    return Outcome::Ok(fd);
  }

  Outcome Close(int fd) {
    auto it = descs_.find(fd);
    if (it == descs_.end()) return Outcome::Err(EBADF);
    int id = it->second.node;
    descs_.erase(it);
    nodes_[id].open--;
    MaybeFree(id);
    return Outcome::Ok();
  }

  // write / pwrite (off < 0: at the description's offset).
  Outcome Write(int fd, const std::string& buf, int64_t off) {
    Desc& d = descs_.at(fd);
    int acc = d.flags & O_ACCMODE;
    if (acc == O_RDONLY) return Outcome::Err(EBADF);
    Node& n = nodes_.at(d.node);
    if (n.type == NType::kDir) return Outcome::Err(EISDIR);
    uint64_t at = (d.flags & O_APPEND) ? n.data.size() : off < 0 ? d.off : static_cast<uint64_t>(off);
    if (n.data.size() < at + buf.size()) n.data.resize(at + buf.size(), '\0');
    std::copy(buf.begin(), buf.end(), n.data.begin() + static_cast<int64_t>(at));
    if (off < 0) d.off = at + buf.size();
    return Outcome::Ok(static_cast<int64_t>(buf.size()));
  }

  Outcome Read(int fd, size_t len, int64_t off, std::string* out) {
    Desc& d = descs_.at(fd);
    if ((d.flags & O_ACCMODE) == O_WRONLY) return Outcome::Err(EBADF);
    const Node& n = nodes_.at(d.node);
    if (n.type == NType::kDir) return Outcome::Err(EISDIR);
    uint64_t at = off < 0 ? d.off : static_cast<uint64_t>(off);
    out->clear();
    if (at < n.data.size()) *out = n.data.substr(at, len);
    if (off < 0) d.off = at + out->size();
    return Outcome::Ok(static_cast<int64_t>(out->size()));
  }

  Outcome Lseek(int fd, int64_t off, int whence) {
    Desc& d = descs_.at(fd);
    int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? static_cast<int64_t>(d.off)
                                                              : static_cast<int64_t>(nodes_.at(d.node).data.size());
    if (base + off < 0) return Outcome::Err(EINVAL);
    d.off = static_cast<uint64_t>(base + off);
    return Outcome::Ok(base + off);
  }

  Outcome Ftruncate(int fd, int64_t size) {
    Desc& d = descs_.at(fd);
    if (size < 0) return Outcome::Err(EINVAL);
    Node& n = nodes_.at(d.node);
    if (n.type != NType::kFile || (d.flags & O_ACCMODE) == O_RDONLY) return Outcome::Err(EINVAL);
    n.data.resize(static_cast<size_t>(size), '\0');
    return Outcome::Ok();
  }

  // Names in a directory, "." and ".." included, with their d_type.
  Outcome ReadDir(const std::string& path, std::map<std::string, uint8_t>* out) const {
    Res r = Resolve(path, true);
    if (r.err) return Outcome::Err(r.err);
    if (r.node == -1) return Outcome::Err(ENOENT);
    const Node& n = nodes_.at(r.node);
    if (n.type != NType::kDir) return Outcome::Err(ENOTDIR);
    out->clear();
    (*out)["."] = DT_DIR;
    (*out)[".."] = DT_DIR;
    for (auto& [name, k] : n.kids) (*out)[name] = DtOf(nodes_.at(k).type);
    return Outcome::Ok();
  }

  // Every path in the tree with its node (depth first, sorted).
  void Paths(std::vector<std::pair<std::string, int>>* out, int dir = kRoot, const std::string& at = "/",
             int depth = 0) const {
    if (dir == kRoot) out->push_back({"/", kRoot});
    for (auto& [name, k] : nodes_.at(dir).kids) {
      std::string p = JoinPath(at, name);
      out->push_back({p, k});
      if (nodes_.at(k).type == NType::kDir) Paths(out, k, p, depth + 1);
    }
  }
  int Depth(int dir) const {
    int d = 0;
    while (dir != kRoot) {
      dir = nodes_.at(dir).parent;
      d++;
    }
    return d;
  }

  // Drops every open description (what an unmount does).
  void CloseAll() {
    while (!descs_.empty()) Close(descs_.begin()->first);
  }

 private:
  static Res Fail(int e) {
    Res r;
    r.err = e;
    return r;
  }
  int NewNode(NType t) {
    int id = next_id_++;
    Node n;
    n.type = t;
    nodes_[id] = n;
    return id;
  }
  void MaybeFree(int id) {
    auto it = nodes_.find(id);
    if (it != nodes_.end() && it->second.type != NType::kDir && it->second.links == 0 && it->second.open == 0)
      nodes_.erase(it);
  }
  // If `up` is a proper ancestor of `down`: its child on the way to `down`.
  int ChildTowards(int up, int down) const {
    int p = down;
    while (p != kRoot) {
      int q = nodes_.at(p).parent;
      if (q == up) return p;
      p = q;
    }
    return -1;
  }

  std::map<int, Node> nodes_;
  std::map<int, Desc> descs_;
  int next_id_ = kRoot + 1;
  int next_desc_ = 1;
};

// ---- the systems under comparison

class Target {
 public:
  virtual ~Target() = default;
  virtual const char* name() const = 0;
  virtual int Open(const std::string& p, int flags, mode_t mode) = 0;
  virtual int Close(int fd) = 0;
  virtual ssize_t Read(int fd, void* b, size_t n) = 0;
  virtual ssize_t Pread(int fd, void* b, size_t n, off_t off) = 0;
  virtual ssize_t Write(int fd, const void* b, size_t n) = 0;
  virtual ssize_t Pwrite(int fd, const void* b, size_t n, off_t off) = 0;
  virtual off_t Lseek(int fd, off_t off, int whence) = 0;
  virtual int Ftruncate(int fd, off_t size) = 0;
  virtual int Fsync(int fd) = 0;
  virtual int Fstat(int fd, struct stat* st) = 0;
  virtual int Truncate(const std::string& p, off_t size) = 0;
  virtual int Stat(const std::string& p, struct stat* st) = 0;
  virtual int Lstat(const std::string& p, struct stat* st) = 0;
  virtual int Mkdir(const std::string& p, mode_t mode) = 0;
  virtual int Rmdir(const std::string& p) = 0;
  virtual int Unlink(const std::string& p) = 0;
  virtual int Rename(const std::string& a, const std::string& b, unsigned flags) = 0;
  virtual int Link(const std::string& a, const std::string& b) = 0;
  virtual int Symlink(const std::string& target, const std::string& p) = 0;
  virtual ssize_t Readlink(const std::string& p, std::string* out) = 0;
  // Entries (with "." and ".."), each name once; -1/errno on failure.
  // Duplicates are reported through *dups.
  virtual int ReadDir(const std::string& p, std::map<std::string, uint8_t>* out, std::vector<std::string>* dups) = 0;
  // Closes everything and mounts again; false with a message on failure.
  virtual bool Remount(std::string* err) = 0;
};

class MapfsTarget : public Target {
 public:
  MapfsTarget(std::string pool, int mode) : pool_(std::move(pool)), mode_(mode) { fs_ = Mount(); }
  ~MapfsTarget() override {
    if (fs_) mapfs_unmount(fs_);
  }
  mapfs_t* fs() { return fs_; }
  // Unmounts for good (before FileSystem::Check).
  int Unmount() {
    int r = fs_ ? mapfs_unmount(fs_) : 0;
    fs_ = nullptr;
    return r;
  }
  const char* name() const override { return "mapfs"; }
  int Open(const std::string& p, int flags, mode_t mode) override { return mapfs_open(fs_, p.c_str(), flags, mode); }
  int Close(int fd) override { return mapfs_close(fs_, fd); }
  ssize_t Read(int fd, void* b, size_t n) override { return mapfs_read(fs_, fd, b, n); }
  ssize_t Pread(int fd, void* b, size_t n, off_t off) override { return mapfs_pread(fs_, fd, b, n, off); }
  ssize_t Write(int fd, const void* b, size_t n) override { return mapfs_write(fs_, fd, b, n); }
  ssize_t Pwrite(int fd, const void* b, size_t n, off_t off) override { return mapfs_pwrite(fs_, fd, b, n, off); }
  off_t Lseek(int fd, off_t off, int whence) override { return mapfs_lseek(fs_, fd, off, whence); }
  int Ftruncate(int fd, off_t size) override { return mapfs_ftruncate(fs_, fd, size); }
  int Fsync(int fd) override { return mapfs_fsync(fs_, fd); }
  int Fstat(int fd, struct stat* st) override { return mapfs_fstat(fs_, fd, st); }
  int Truncate(const std::string& p, off_t size) override { return mapfs_truncate(fs_, p.c_str(), size); }
  int Stat(const std::string& p, struct stat* st) override { return mapfs_stat(fs_, p.c_str(), st); }
  int Lstat(const std::string& p, struct stat* st) override { return mapfs_lstat(fs_, p.c_str(), st); }
  int Mkdir(const std::string& p, mode_t mode) override { return mapfs_mkdir(fs_, p.c_str(), mode); }
  int Rmdir(const std::string& p) override { return mapfs_rmdir(fs_, p.c_str()); }
  int Unlink(const std::string& p) override { return mapfs_unlink(fs_, p.c_str()); }
  int Rename(const std::string& a, const std::string& b, unsigned flags) override {
    return mapfs_rename2(fs_, a.c_str(), b.c_str(), flags);
  }
  int Link(const std::string& a, const std::string& b) override { return mapfs_link(fs_, a.c_str(), b.c_str()); }
  int Symlink(const std::string& t, const std::string& p) override { return mapfs_symlink(fs_, t.c_str(), p.c_str()); }
  ssize_t Readlink(const std::string& p, std::string* out) override {
    char buf[4096];
    ssize_t n = mapfs_readlink(fs_, p.c_str(), buf, sizeof buf);
    if (n >= 0) out->assign(buf, static_cast<size_t>(n));
    return n;
  }
  int ReadDir(const std::string& p, std::map<std::string, uint8_t>* out, std::vector<std::string>* dups) override {
    mapfs_dir_t* d = mapfs_opendir(fs_, p.c_str());
    if (d == nullptr) return -1;
    out->clear();
    for (;;) {
      errno = 0;
      struct dirent* e = mapfs_readdir(d);
      if (e == nullptr) break;
      if (!out->emplace(e->d_name, e->d_type).second) dups->push_back(e->d_name);
    }
    int err = errno;
    mapfs_closedir(d);
    errno = err;
    return err ? -1 : 0;
  }
  bool Remount(std::string* err) override {
    if (fs_ && mapfs_unmount(fs_) != 0) *err = std::string("unmount: ") + mapfs_last_error();
    fs_ = Mount();
    if (!fs_) *err += std::string(" mount: ") + ErrName(errno) + " " + mapfs_last_error();
    return fs_ != nullptr && err->empty();
  }

 private:
  mapfs_t* Mount() {
    mapfs_options o{};
    o.mode = mode_;
    return mapfs_mount(pool_.c_str(), &o);
  }
  std::string pool_;
  int mode_;
  mapfs_t* fs_ = nullptr;
};

// The kernel, in a scratch directory (the model's "/" is `root`).
class LinuxTarget : public Target {
 public:
  LinuxTarget() {
    static int counter = 0;
    root_ = "/dev/shm/mapfs-oracle-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    ::mkdir(root_.c_str(), 0755);
  }
  ~LinuxTarget() override {
    std::string cmd = "rm -rf '" + root_ + "'";
    if (std::system(cmd.c_str()) != 0) {
    }
  }
  const char* name() const override { return "linux"; }
  std::string P(const std::string& p) const { return root_ + p; }
  int Open(const std::string& p, int flags, mode_t mode) override { return ::open(P(p).c_str(), flags, mode); }
  int Close(int fd) override { return ::close(fd); }
  ssize_t Read(int fd, void* b, size_t n) override { return ::read(fd, b, n); }
  ssize_t Pread(int fd, void* b, size_t n, off_t off) override { return ::pread(fd, b, n, off); }
  ssize_t Write(int fd, const void* b, size_t n) override { return ::write(fd, b, n); }
  ssize_t Pwrite(int fd, const void* b, size_t n, off_t off) override { return ::pwrite(fd, b, n, off); }
  off_t Lseek(int fd, off_t off, int whence) override { return ::lseek(fd, off, whence); }
  int Ftruncate(int fd, off_t size) override { return ::ftruncate(fd, size); }
  int Fsync(int fd) override { return ::fsync(fd); }
  int Fstat(int fd, struct stat* st) override { return ::fstat(fd, st); }
  int Truncate(const std::string& p, off_t size) override { return ::truncate(P(p).c_str(), size); }
  int Stat(const std::string& p, struct stat* st) override { return ::stat(P(p).c_str(), st); }
  int Lstat(const std::string& p, struct stat* st) override { return ::lstat(P(p).c_str(), st); }
  int Mkdir(const std::string& p, mode_t mode) override { return ::mkdir(P(p).c_str(), mode); }
  int Rmdir(const std::string& p) override { return ::rmdir(P(p).c_str()); }
  int Unlink(const std::string& p) override { return ::unlink(P(p).c_str()); }
  int Rename(const std::string& a, const std::string& b, unsigned flags) override {
    return ::renameat2(AT_FDCWD, P(a).c_str(), AT_FDCWD, P(b).c_str(), flags);
  }
  int Link(const std::string& a, const std::string& b) override { return ::link(P(a).c_str(), P(b).c_str()); }
  int Symlink(const std::string& t, const std::string& p) override { return ::symlink(t.c_str(), P(p).c_str()); }
  ssize_t Readlink(const std::string& p, std::string* out) override {
    char buf[4096];
    ssize_t n = ::readlink(P(p).c_str(), buf, sizeof buf);
    if (n >= 0) out->assign(buf, static_cast<size_t>(n));
    return n;
  }
  int ReadDir(const std::string& p, std::map<std::string, uint8_t>* out, std::vector<std::string>* dups) override {
    DIR* d = ::opendir(P(p).c_str());
    if (d == nullptr) return -1;
    out->clear();
    for (;;) {
      errno = 0;
      struct dirent* e = ::readdir(d);
      if (e == nullptr) break;
      if (!out->emplace(e->d_name, e->d_type).second) dups->push_back(e->d_name);
    }
    int err = errno;
    ::closedir(d);
    errno = err;
    return err ? -1 : 0;
  }
  bool Remount(std::string*) override { return true; }

 private:
  std::string root_;
};

// Compares the whole tree of `t` with the model: the entries of every
// directory (names and types), link counts, sizes, every byte of every file,
// every symlink target, and that two names share an inode exactly when the
// model says they do. Returns "" or the first difference. `file_ok` may
// replace the byte comparison of chosen files (recovery: a write in flight).
inline std::string CompareTree(const Model& m, Target& t,
                               const std::function<std::string(int node, const std::string& got)>& file_ok = nullptr,
                               int dir = Model::kRoot, const std::string& at = "/",
                               std::map<int, ino_t>* ino_of = nullptr, std::map<ino_t, int>* node_of = nullptr) {
  std::map<int, ino_t> ino_of_local;
  std::map<ino_t, int> node_of_local;
  if (!ino_of) {
    ino_of = &ino_of_local;
    node_of = &node_of_local;
  }
  std::map<std::string, uint8_t> got, want;
  std::vector<std::string> dups;
  if (t.ReadDir(at, &got, &dups) != 0) return "readdir(" + at + "): " + ErrName(errno);
  if (!dups.empty()) return "readdir(" + at + ") returned '" + dups[0] + "' twice";
  (void)m.ReadDir(at, &want);
  if (got != want) {
    std::string d = "readdir(" + at + ") differs:";
    for (auto& [n, ty] : want)
      if (!got.count(n)) d += " missing '" + n + "'";
      else if (got[n] != ty) d += " '" + n + "' type " + std::to_string(got[n]) + " want " + std::to_string(ty);
    for (auto& [n, ty] : got)
      if (!want.count(n)) d += " extra '" + n + "'";
    return d;
  }
  auto check_node = [&](const std::string& p, int id) -> std::string {
    const Node& n = m.node(id);
    struct stat st {};
    if (t.Lstat(p, &st) != 0) return "lstat(" + p + "): " + ErrName(errno);
    mode_t want_fmt = n.type == NType::kDir ? S_IFDIR : n.type == NType::kLink ? S_IFLNK : S_IFREG;
    if ((st.st_mode & S_IFMT) != want_fmt) return "lstat(" + p + "): wrong type";
    if (static_cast<int>(st.st_nlink) != m.Nlink(id))
      return "lstat(" + p + "): nlink " + std::to_string(st.st_nlink) + " want " + std::to_string(m.Nlink(id));
    auto [it, fresh] = ino_of->emplace(id, st.st_ino);
    if (!fresh && it->second != st.st_ino) return p + ": hard links of one file have different inode numbers";
    auto [it2, fresh2] = node_of->emplace(st.st_ino, id);
    if (!fresh2 && it2->second != id) return p + ": shares its inode number with a different file";
    if (n.type == NType::kFile) {
      if (static_cast<uint64_t>(st.st_size) != n.data.size() && !file_ok)
        return "lstat(" + p + "): size " + std::to_string(st.st_size) + " want " + std::to_string(n.data.size());
      std::string data;
      int fd = t.Open(p, O_RDONLY, 0);
      if (fd < 0) return "open(" + p + "): " + ErrName(errno);
      data.resize(static_cast<size_t>(st.st_size) + 1);
      ssize_t r = t.Pread(fd, data.data(), data.size(), 0);
      int e = errno;
      t.Close(fd);
      if (r < 0) return "pread(" + p + "): " + ErrName(e);
      data.resize(static_cast<size_t>(r));
      if (file_ok) {
        std::string why = file_ok(id, data);
        if (!why.empty()) return p + ": " + why;
      } else if (data != n.data) {
        size_t i = 0;
        while (i < data.size() && i < n.data.size() && data[i] == n.data[i]) i++;
        return p + ": content differs at byte " + std::to_string(i) + " (read " + std::to_string(data.size()) +
               " bytes, want " + std::to_string(n.data.size()) + ")";
      }
    } else if (n.type == NType::kLink) {
      std::string target;
      if (t.Readlink(p, &target) < 0) return "readlink(" + p + "): " + ErrName(errno);
      if (target != n.data) return "readlink(" + p + ") = '" + target + "' want '" + n.data + "'";
      if (static_cast<uint64_t>(st.st_size) != n.data.size()) return "lstat(" + p + "): symlink size";
    }
    return "";
  };
  if (dir == Model::kRoot) {
    std::string w = check_node("/", Model::kRoot);
    if (!w.empty()) return w;
  }
  for (auto& [name, id] : m.node(dir).kids) {
    std::string p = JoinPath(at, name);
    std::string w = check_node(p, id);
    if (!w.empty()) return w;
    if (m.node(id).type == NType::kDir) {
      w = CompareTree(m, t, file_ok, id, p, ino_of, node_of);
      if (!w.empty()) return w;
    }
  }
  return "";
}

}  // namespace mapfs::fstest
