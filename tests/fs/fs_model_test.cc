// Model-based random test of the namespace and data calls.
//
// A long random sequence of calls (valid and deliberately invalid ones) runs
// against mapfs and, call by call, against the model of fs_model.h: every
// return value and errno must match, every read must return the model's
// bytes, every stat its size, type and link count, every readdir its names.
// Periodically the pool is unmounted and mounted again and the whole tree is
// compared byte for byte; at the end FileSystem::Check must find nothing.
//
// The same sequences also run against the kernel (tmpfs in /dev/shm): that
// keeps the model honest, since its expectations are meant to be Linux's.
//
// Parameters: mode (posix/sync/strict) x page size (4k/2m) x seed.
// Environment: MAPFS_MODEL_OPS (calls per seed, default 2000),
// MAPFS_MODEL_SEEDS (default 4), MAPFS_MODEL_SEED (first seed, default 1),
// MAPFS_MODEL_SHRINK=1 (on a failure, shrink the sequence to a minimal one
// that still fails and print it), MAPFS_MODEL_STATS=1 (histogram of calls).
//
// A divergence in errno alone (both sides failed, so their states still
// agree) is recorded and the run goes on; it fails the test at the end with
// a list of every kind seen. Any other divergence stops the run and prints
// the last calls.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "fs_model.h"

namespace mapfs::fstest {
namespace {

constexpr int kRemountEvery = 250;
constexpr uint64_t kMaxTotalBytes = 40ull << 20;
constexpr uint64_t kMaxFileBytes = 6ull << 20;

const char* const kNames[] = {"a", "b", "c", "d", "e", "f", "g", "h"};

std::string FlagsStr(int f) {
  std::string s = (f & O_ACCMODE) == O_RDONLY ? "RD" : (f & O_ACCMODE) == O_WRONLY ? "WR" : "RDWR";
  if (f & O_CREAT) s += "|CREAT";
  if (f & O_EXCL) s += "|EXCL";
  if (f & O_TRUNC) s += "|TRUNC";
  if (f & O_APPEND) s += "|APPEND";
  if (f & O_DIRECTORY) s += "|DIRECTORY";
  if (f & O_NOFOLLOW) s += "|NOFOLLOW";
  return s;
}
std::string Short(const std::string& p) {
  if (p.size() <= 60) return p;
  return p.substr(0, 12) + "...(" + std::to_string(p.size()) + ")..." + p.substr(p.size() - 10);
}

// One call of a sequence, as data: sequences can be replayed and shrunk.
enum class K {
  kOpen, kClose, kWrite, kRead, kLseek, kFtruncate, kFstat, kFsync, kTruncate, kStat, kLstat, kReaddir,
  kMkdir, kRmdir, kUnlink, kLink, kSymlink, kReadlink, kRename, kRemount
};
struct Op {
  explicit Op(K kind) : k(kind) {}
  K k;
  std::string a, b;   // paths (symlink: a = target, b = path)
  int flags = 0;      // open flags, rename flags, lseek whence
  int64_t x = 0;      // offset (-1: the description's), size, lseek offset
  int64_t y = 0;      // length
  uint64_t data = 0;  // seed of the bytes written
  int fd_op = -1;     // index of the open this call uses
};

std::string Describe(const Op& o) {
  std::string fd = "fd@" + std::to_string(o.fd_op);
  switch (o.k) {
    case K::kOpen: return "open(" + Short(o.a) + ", " + FlagsStr(o.flags) + ")";
    case K::kClose: return "close(" + fd + ")";
    case K::kWrite:
      return o.x < 0 ? "write(" + fd + ", " + std::to_string(o.y) + ")"
                     : "pwrite(" + fd + ", " + std::to_string(o.y) + " @" + std::to_string(o.x) + ")";
    case K::kRead:
      return o.x < 0 ? "read(" + fd + ", " + std::to_string(o.y) + ")"
                     : "pread(" + fd + ", " + std::to_string(o.y) + " @" + std::to_string(o.x) + ")";
    case K::kLseek:
      return "lseek(" + fd + ", " + std::to_string(o.x) + ", " +
             (o.flags == SEEK_SET ? "SET" : o.flags == SEEK_CUR ? "CUR" : "END") + ")";
    case K::kFtruncate: return "ftruncate(" + fd + ", " + std::to_string(o.x) + ")";
    case K::kFstat: return "fstat(" + fd + ")";
    case K::kFsync: return "fsync(" + fd + ")";
    case K::kTruncate: return "truncate(" + Short(o.a) + ", " + std::to_string(o.x) + ")";
    case K::kStat: return "stat(" + Short(o.a) + ")";
    case K::kLstat: return "lstat(" + Short(o.a) + ")";
    case K::kReaddir: return "readdir(" + Short(o.a) + ")";
    case K::kMkdir: return "mkdir(" + Short(o.a) + ")";
    case K::kRmdir: return "rmdir(" + Short(o.a) + ")";
    case K::kUnlink: return "unlink(" + Short(o.a) + ")";
    case K::kLink: return "link(" + Short(o.a) + ", " + Short(o.b) + ")";
    case K::kSymlink: return "symlink(" + o.a + ", " + Short(o.b) + ")";
    case K::kReadlink: return "readlink(" + Short(o.a) + ")";
    case K::kRename: {
      std::string f = o.flags == 0 ? "" : o.flags == RENAME_NOREPLACE ? ", NOREPLACE"
                                      : o.flags == RENAME_EXCHANGE  ? ", EXCHANGE"
                                                                    : ", NOREPLACE|EXCHANGE";
      return "rename(" + Short(o.a) + ", " + Short(o.b) + f + ")";
    }
    case K::kRemount: return "remount + compare the whole tree";
  }
  return "?";
}
const char* KindName(K k) {
  static const char* n[] = {"open",  "close",   "write", "read",  "lseek",   "ftruncate", "fstat",
                            "fsync", "truncate", "stat",  "lstat", "readdir", "mkdir",     "rmdir",
                            "unlink", "link",   "symlink", "readlink", "rename", "remount"};
  return n[static_cast<int>(k)];
}

class Runner {
 public:
  // `root_paths`: "/" itself may be an argument (not for the kernel run, whose
  // "/" is a scratch directory that rmdir or rename would treat as any other).
  Runner(Target& t, uint64_t seed, bool root_paths = true) : t_(t), rng_(seed), seed_(seed), root_paths_(root_paths) {}

  // Generates and runs `n` calls plus a remount every kRemountEvery and at
  // the end; false after a divergence that stops the run (failure() says
  // what; ops() holds the sequence up to the failing call).
  bool Run(int n) {
    for (int i = 0; i < n; i++) {
      ops_.push_back(Generate());
      if (!Exec(static_cast<int>(ops_.size()) - 1)) return false;
      if ((i + 1) % kRemountEvery == 0 || i + 1 == n) {
        ops_.push_back(Op{K::kRemount});
        if (!Exec(static_cast<int>(ops_.size()) - 1)) return false;
      }
    }
    return true;
  }
  // Runs a given sequence (calls on descriptors whose open is not in it, or
  // failed, are skipped), then a remount; false on a divergence.
  bool Replay(const std::vector<Op>& ops) {
    ops_ = ops;
    for (int i = 0; i < static_cast<int>(ops_.size()); i++)
      if (!Exec(i)) return false;
    ops_.push_back(Op{K::kRemount});
    return Exec(static_cast<int>(ops_.size()) - 1);
  }

  const std::vector<Op>& ops() const { return ops_; }
  const std::string& failure() const { return failure_; }
  // errno-only divergences: kind -> (count, first example).
  const std::map<std::string, std::pair<int, std::string>>& soft() const { return soft_; }
  std::string SoftReport() const {
    std::string s;
    for (auto& [k, v] : soft_) s += "  " + k + " (x" + std::to_string(v.first) + "), e.g. " + v.second + "\n";
    return s;
  }
  int calls() const { return calls_; }
  int remounts() const { return remounts_; }
  std::string Stats() const {
    std::string s;
    for (auto& [k, n] : stats_) s += "  " + k + ": " + std::to_string(n) + "\n";
    return s;
  }

  // Closes the target's descriptors (before unmounting for good).
  void CloseAll() {
    for (auto& [op, fds] : open_) t_.Close(fds.second);
    open_.clear();
    m_.CloseAll();
  }

 private:
  // ---- comparison

  void Log(const std::string& s) {
    log_.push_back("#" + std::to_string(cur_) + " " + s);
    if (log_.size() > 40) log_.pop_front();
  }
  bool Hard(const std::string& what) {
    failure_ = "seed " + std::to_string(seed_) + ", call #" + std::to_string(cur_) + " on " + t_.name() + ": " +
               what + "\nlast calls (fd@N = the descriptor opened by call #N):\n";
    for (auto& l : log_) failure_ += "  " + l + "\n";
    return false;
  }
  // Compares an outcome; true if the run can go on.
  bool Expect(const Op& op, Outcome want, int64_t got, int got_err, bool check_ret) {
    calls_++;
    std::string call = Describe(op);
    std::string res = got < 0 ? "-1 " + ErrName(got_err) : std::to_string(got);
    stats_[std::string(KindName(op.k)) + (op.k == K::kRename && (op.flags & RENAME_EXCHANGE) ? "(x)" : "") + " " +
           (got < 0 ? ErrName(got_err) : "ok")]++;
    Log(call + " = " + res + (want.err ? "  [model: " + ErrName(want.err) + "]" : ""));
    if (want.err != 0) {
      if (got >= 0) return Hard(call + ": succeeded (" + res + "), model expects " + ErrName(want.err));
      if (got_err != want.err) Soft(std::string(KindName(op.k)) + ": " + ErrName(got_err) + " where Linux gives " +
                                        ErrName(want.err), call);
      return true;
    }
    if (got < 0) return Hard(call + ": failed with " + ErrName(got_err) + ", model expects success");
    if (check_ret && got != want.ret)
      return Hard(call + ": returned " + std::to_string(got) + ", model expects " + std::to_string(want.ret));
    return true;
  }
  // Expect with the errno of the call just made (read before anything else).
  bool Check(const Op& op, Outcome want, int64_t got) {
    int e = errno;
    return Expect(op, want, got, e, true);
  }
  void Soft(const std::string& kind, const std::string& example) {
    auto& e = soft_[kind];
    if (e.first++ == 0) e.second = example;
  }
  bool CheckStat(const std::string& call, int id, const struct stat& st) {
    const Node& n = m_.node(id);
    mode_t fmt = n.type == NType::kDir ? S_IFDIR : n.type == NType::kLink ? S_IFLNK : S_IFREG;
    if ((st.st_mode & S_IFMT) != fmt) return Hard(call + ": wrong file type");
    if (static_cast<int>(st.st_nlink) != m_.Nlink(id))
      return Hard(call + ": st_nlink " + std::to_string(st.st_nlink) + ", model " + std::to_string(m_.Nlink(id)));
    if (n.type != NType::kDir && static_cast<uint64_t>(st.st_size) != n.data.size())
      return Hard(call + ": st_size " + std::to_string(st.st_size) + ", model " + std::to_string(n.data.size()));
    return true;
  }

  // ---- random arguments

  std::string RandomName() {
    uint64_t r = rng_.Below(100);
    if (r < 95) return kNames[rng_.Below(8)];
    if (r < 99) return std::string(200, 'L') + kNames[rng_.Below(3)];  // a long (valid) name
    return std::string(256, 'X');                                       // ENAMETOOLONG
  }
  std::string Any() {
    if (root_paths_) return paths_[rng_.Below(paths_.size())].first;
    if (paths_.size() == 1) return NewPath();
    return paths_[1 + rng_.Below(paths_.size() - 1)].first;  // paths_[0] is "/"
  }
  std::string DirPath() {
    std::vector<const std::string*> dirs;
    for (auto& p : paths_)
      if (m_.node(p.second).type == NType::kDir && m_.Depth(p.second) < 4) dirs.push_back(&p.first);
    return *dirs[rng_.Below(dirs.size())];
  }
  std::string NewPath() { return JoinPath(DirPath(), RandomName()); }
  // A path for a call that wants `want`: mostly an existing one of that
  // type, often a new name, sometimes one through a non-directory (ENOTDIR)
  // or a missing directory (ENOENT).
  std::string PathFor(NType want) {
    uint64_t r = rng_.Below(100);
    if (r < 55) {
      std::vector<const std::string*> c;
      for (auto& p : paths_)
        if (m_.node(p.second).type == want && p.first != "/") c.push_back(&p.first);
      if (!c.empty() && rng_.Below(10) < 8) return *c[rng_.Below(c.size())];
      return Any();
    }
    if (r < 90) return NewPath();
    if (r < 95) return JoinPath(Any(), RandomName());
    return JoinPath(NewPath(), RandomName());
  }
  // Relative targets only (see fs_model.h): a sibling, a path below, ".".
  std::string LinkTarget(const std::string& link_path) {
    uint64_t r = rng_.Below(100);
    if (r < 50) return kNames[rng_.Below(8)];
    if (r < 80) return std::string(kNames[rng_.Below(8)]) + "/" + kNames[rng_.Below(8)];
    if (r < 85) return ".";
    std::string prefix = link_path.substr(0, link_path.rfind('/')) + "/";
    std::vector<std::string> c;
    for (auto& p : paths_)
      if (p.first.size() > prefix.size() && p.first.compare(0, prefix.size(), prefix) == 0)
        c.push_back(p.first.substr(prefix.size()));
    if (c.empty()) return kNames[rng_.Below(8)];
    return c[rng_.Below(c.size())];
  }
  size_t RandomLen() {
    uint64_t r = rng_.Below(100);
    if (r < 40) return 1 + rng_.Below(64);
    if (r < 80) return 1 + rng_.Below(8192);
    if (r < 96) return 1 + rng_.Below(200 * 1024);
    return 1 + rng_.Below(2500 * 1024);
  }
  uint64_t RandomOffset(uint64_t size) {
    uint64_t r = rng_.Below(100);
    if (r < 50) return rng_.Below(size + 1);
    if (r < 80) return rng_.Below(size + 65536);
    if (r < 95) return rng_.Below(512 * 1024);
    return rng_.Below(kMaxFileBytes);
  }
  // Keeps the data within the pool's means.
  size_t ClampLen(uint64_t at, size_t n) {
    if (at >= kMaxFileBytes) return 1;
    n = static_cast<size_t>(std::min<uint64_t>(n, kMaxFileBytes - at));
    if (m_.TotalBytes() + n + at > kMaxTotalBytes) n = std::min<size_t>(n, 64);
    return std::max<size_t>(n, 1);
  }

  // ---- generation (from the model's state)

  Op Generate() {
    paths_.clear();
    m_.Paths(&paths_);
    uint64_t r = rng_.Below(100);
    if (m_.nodes().size() > 120 && rng_.Below(2) == 0) r = 60 + rng_.Below(20);  // shrink the tree
    bool have_fd = !open_.empty();
    if (open_.size() > 8) r = 14;  // close
    if (r < 9) return GenOpen(true);
    if (r < 14) return GenOpen(false);
    if (r < 19) return have_fd ? GenFd(K::kClose) : GenOpen(true);
    if (r < 33) return have_fd ? GenWrite() : GenOpen(true);
    if (r < 40) return have_fd ? GenRead() : GenOpen(false);
    if (r < 42) return have_fd ? GenLseek() : GenPath(K::kStat);
    if (r < 46) return have_fd ? GenFtruncate() : GenTruncate();
    if (r < 48) return have_fd ? GenFd(K::kFstat) : GenPath(K::kLstat);
    if (r < 51) return GenTruncate();
    if (r < 52) return have_fd ? GenFd(K::kFsync) : GenPath(K::kReaddir);
    if (r < 60) return GenRename();
    if (r < 64) return GenLink();
    if (r < 71) return GenPath(K::kUnlink);
    if (r < 77) return GenPath(K::kRmdir);
    if (r < 80) return GenRename();
    if (r < 86) return GenPath(K::kMkdir);
    if (r < 89) return GenSymlink();
    if (r < 91) return GenPath(K::kReadlink);
    if (r < 94) return GenPath(K::kStat);
    if (r < 96) return GenPath(K::kLstat);
    return GenPath(K::kReaddir);
  }

  Op GenOpen(bool create) {
    Op o{K::kOpen};
    if (create) {
      o.a = PathFor(NType::kFile);
      static const int acc[] = {O_WRONLY, O_RDWR, O_RDWR, O_RDONLY};
      o.flags = acc[rng_.Below(4)] | O_CREAT;
      uint64_t k = rng_.Below(10);
      if (k < 4) o.flags |= O_EXCL;
      else if (k < 6 && (o.flags & O_ACCMODE) != O_RDONLY) o.flags |= O_TRUNC;
      if (rng_.Below(4) == 0) o.flags |= O_APPEND;
    } else {
      uint64_t k = rng_.Below(10);
      o.a = PathFor(k < 7 ? NType::kFile : k < 9 ? NType::kLink : NType::kDir);
      static const int acc[] = {O_RDONLY, O_WRONLY, O_RDWR};
      o.flags = acc[rng_.Below(3)];
      k = rng_.Below(20);
      if (k < 3 && (o.flags & O_ACCMODE) != O_RDONLY) o.flags |= O_TRUNC;
      else if (k < 5) o.flags |= O_APPEND;
      else if (k < 7) o.flags |= O_DIRECTORY;
      else if (k < 9) o.flags |= O_NOFOLLOW;
    }
    return o;
  }
  int RandomFdOp() {
    auto it = open_.begin();
    std::advance(it, static_cast<long>(rng_.Below(open_.size())));
    return it->first;
  }
  const Desc& DescOf(int fd_op) { return m_.descs().at(open_.at(fd_op).first); }
  Op GenFd(K k) {
    Op o{k};
    o.fd_op = RandomFdOp();
    return o;
  }
  Op GenWrite() {
    Op o = GenFd(K::kWrite);
    const Desc& d = DescOf(o.fd_op);
    uint64_t size = m_.node(d.node).data.size();
    bool positional = rng_.Below(3) == 0;
    uint64_t at = positional ? RandomOffset(size) : (d.flags & O_APPEND) ? size : d.off;
    o.x = positional ? static_cast<int64_t>(at) : -1;
    o.y = static_cast<int64_t>(ClampLen(at, RandomLen()));
    o.data = rng_.Next();
    return o;
  }
  Op GenRead() {
    Op o = GenFd(K::kRead);
    uint64_t size = m_.node(DescOf(o.fd_op).node).data.size();
    o.x = rng_.Below(2) == 0 ? static_cast<int64_t>(RandomOffset(size)) : -1;
    o.y = static_cast<int64_t>(RandomLen());
    return o;
  }
  Op GenLseek() {
    Op o = GenFd(K::kLseek);
    static const int wh[] = {SEEK_SET, SEEK_CUR, SEEK_END};
    o.flags = wh[rng_.Below(3)];
    o.x = static_cast<int64_t>(rng_.Below(70000)) - (o.flags == SEEK_SET ? 100 : 35000);
    return o;
  }
  Op GenFtruncate() {
    Op o = GenFd(K::kFtruncate);
    uint64_t size = m_.node(DescOf(o.fd_op).node).data.size();
    uint64_t k = rng_.Below(100);
    uint64_t ns = k < 40 ? rng_.Below(size + 1)
                 : k < 70 ? size + rng_.Below(65536)
                 : k < 92 ? rng_.Below(1 << 20)
                          : rng_.Below(kMaxFileBytes);
    if (m_.TotalBytes() + ns > kMaxTotalBytes) ns = rng_.Below(size + 1);
    o.x = static_cast<int64_t>(ns);
    return o;
  }
  Op GenTruncate() {
    Op o{K::kTruncate};
    o.a = PathFor(NType::kFile);
    o.x = static_cast<int64_t>(rng_.Below(100) < 70 ? rng_.Below(65536) : rng_.Below(1 << 20));
    if (rng_.Below(50) == 0) o.x = -1;
    if (m_.TotalBytes() + static_cast<uint64_t>(std::max<int64_t>(o.x, 0)) > kMaxTotalBytes) o.x = 0;
    return o;
  }
  Op GenPath(K k) {
    Op o{k};
    switch (k) {
      case K::kStat:
      case K::kLstat: {
        uint64_t j = rng_.Below(3);
        o.a = PathFor(j == 0 ? NType::kFile : j == 1 ? NType::kDir : NType::kLink);
        break;
      }
      case K::kReaddir: o.a = rng_.Below(5) == 0 ? PathFor(NType::kDir) : DirPath(); break;
      case K::kMkdir: o.a = PathFor(NType::kDir); break;
      case K::kRmdir: o.a = rng_.Below(40) == 0 && root_paths_ ? "/" : PathFor(NType::kDir); break;
      case K::kUnlink: o.a = PathFor(rng_.Below(5) == 0 ? NType::kLink : NType::kFile); break;
      case K::kReadlink: o.a = PathFor(NType::kLink); break;
      default: break;
    }
    return o;
  }
  Op GenLink() {
    Op o{K::kLink};
    o.a = PathFor(rng_.Below(6) == 0 ? NType::kLink : NType::kFile);
    o.b = rng_.Below(5) == 0 ? PathFor(NType::kFile) : NewPath();
    return o;
  }
  Op GenSymlink() {
    Op o{K::kSymlink};
    o.b = PathFor(NType::kLink);
    o.a = LinkTarget(o.b);
    return o;
  }
  Op GenRename() {
    Op o{K::kRename};
    uint64_t k = rng_.Below(10);
    NType ty = k < 5 ? NType::kFile : k < 9 ? NType::kDir : NType::kLink;
    o.a = PathFor(ty);
    uint64_t j = rng_.Below(100);
    if (j < 45) o.b = NewPath();
    else if (j < 75) o.b = PathFor(rng_.Below(2) ? ty : NType::kFile);       // over an existing one
    else if (j < 85 && ty == NType::kDir) o.b = JoinPath(o.a, RandomName());  // below itself: EINVAL
    else if (j < 90) o.b = o.a;                                              // onto itself
    else o.b = PathFor(NType::kDir);
    uint64_t f = rng_.Below(100);
    if (f < 15) o.flags = RENAME_NOREPLACE;
    else if (f < 30) o.flags = RENAME_EXCHANGE;
    else if (f < 31) o.flags = RENAME_NOREPLACE | RENAME_EXCHANGE;
    return o;
  }

  // ---- execution (model and target, compared)

  bool Exec(int i) {
    cur_ = i;
    const Op& o = ops_[static_cast<size_t>(i)];
    int md = -1, fd = -1;
    if (o.fd_op >= 0) {
      auto it = open_.find(o.fd_op);
      if (it == open_.end()) return true;  // replay without its open
      md = it->second.first;
      fd = it->second.second;
    }
    errno = 0;
    switch (o.k) {
      case K::kOpen: return ExecOpen(o, i);
      case K::kClose: {
        Outcome want = m_.Close(md);
        open_.erase(o.fd_op);
        int got = t_.Close(fd);
        return Expect(o, want, got, errno, true);
      }
      case K::kWrite: {
        std::string buf;
        Rng data(o.data);
        FillRandom(data, &buf, static_cast<size_t>(o.y));
        Outcome want = m_.Write(md, buf, o.x);
        errno = 0;
        ssize_t got = o.x >= 0 ? t_.Pwrite(fd, buf.data(), buf.size(), o.x) : t_.Write(fd, buf.data(), buf.size());
        return Expect(o, want, got, errno, true);
      }
      case K::kRead: {
        std::string want_bytes, buf(static_cast<size_t>(o.y), '\0');
        Outcome want = m_.Read(md, buf.size(), o.x, &want_bytes);
        errno = 0;
        ssize_t got = o.x >= 0 ? t_.Pread(fd, buf.data(), buf.size(), o.x) : t_.Read(fd, buf.data(), buf.size());
        if (!Expect(o, want, got, errno, true)) return false;
        if (want.err == 0 && buf.compare(0, static_cast<size_t>(got), want_bytes) != 0) {
          size_t k = 0;
          while (buf[k] == want_bytes[k]) k++;
          return Hard(Describe(o) + ": bytes differ from byte " + std::to_string(k) + " of the read");
        }
        return true;
      }
      case K::kLseek: return Check(o, m_.Lseek(md, o.x, o.flags), t_.Lseek(fd, o.x, o.flags));
      case K::kFtruncate: {
        Outcome want = m_.Ftruncate(md, o.x);
        return Check(o, want, t_.Ftruncate(fd, o.x));
      }
      case K::kFstat: {
        struct stat st {};
        int got = t_.Fstat(fd, &st);
        if (!Expect(o, Outcome::Ok(), got, errno, true)) return false;
        return CheckStat(Describe(o), m_.descs().at(md).node, st);
      }
      case K::kFsync: return Check(o, Outcome::Ok(), t_.Fsync(fd));
      case K::kTruncate: {
        Outcome want = m_.Truncate(o.a, o.x);
        return Check(o, want, t_.Truncate(o.a, o.x));
      }
      case K::kStat:
      case K::kLstat: {
        bool follow = o.k == K::kStat;
        int id = -1;
        Outcome want = m_.Stat(o.a, follow, &id);
        struct stat st {};
        int got = follow ? t_.Stat(o.a, &st) : t_.Lstat(o.a, &st);
        if (!Expect(o, want, got, errno, true)) return false;
        return want.err ? true : CheckStat(Describe(o), id, st);
      }
      case K::kReaddir: return ExecReaddir(o);
      case K::kMkdir: {
        Outcome want = m_.Mkdir(o.a);
        return Check(o, want, t_.Mkdir(o.a, 0755));
      }
      case K::kRmdir: {
        Outcome want = m_.Rmdir(o.a);
        return Check(o, want, t_.Rmdir(o.a));
      }
      case K::kUnlink: {
        Outcome want = m_.Unlink(o.a);
        return Check(o, want, t_.Unlink(o.a));
      }
      case K::kLink: {
        Outcome want = m_.Link(o.a, o.b);
        return Check(o, want, t_.Link(o.a, o.b));
      }
      case K::kSymlink: {
        Outcome want = m_.Symlink(o.a, o.b);
        return Check(o, want, t_.Symlink(o.a, o.b));
      }
      case K::kReadlink: {
        std::string want_t, got_t;
        Outcome want = m_.Readlink(o.a, &want_t);
        ssize_t got = t_.Readlink(o.a, &got_t);
        if (!Expect(o, want, got, errno, true)) return false;
        if (want.err == 0 && got_t != want_t) return Hard(Describe(o) + " = '" + got_t + "', model '" + want_t + "'");
        return true;
      }
      case K::kRename: {
        Outcome want = m_.Rename(o.a, o.b, static_cast<unsigned>(o.flags));
        return Check(o, want, t_.Rename(o.a, o.b, static_cast<unsigned>(o.flags)));
      }
      case K::kRemount: {
        CloseAll();
        std::string err;
        if (!t_.Remount(&err)) return Hard("remount: " + err);
        remounts_++;
        std::string diff = CompareTree(m_, t_);
        Log("remount + compare: " + (diff.empty() ? std::string("equal") : diff));
        if (!diff.empty()) return Hard("after remount: " + diff);
        return true;
      }
    }
    return true;
  }

  bool ExecOpen(const Op& o, int i) {
    int md = -1;
    Outcome want = m_.Open(o.a, o.flags, &md);
    errno = 0;
    int fd = t_.Open(o.a, o.flags, 0644);
    int e = errno;
    if (want.err && fd >= 0 && m_.Resolve(o.a, !(o.flags & O_NOFOLLOW)).node != -1 && !(o.flags & O_TRUNC)) {
      // Opened an existing file or directory the model refuses: nothing
      // changed, so note it and go on.
      calls_++;
      Log(Describe(o) + " = " + std::to_string(fd) + "  [model: " + ErrName(want.err) + "]");
      Soft("open: succeeds where Linux gives " + ErrName(want.err), Describe(o));
      t_.Close(fd);
      return true;
    }
    if (!Expect(o, want, fd, e, false)) return false;
    if (want.err) return true;
    if (m_.node(m_.descs().at(md).node).type == NType::kDir) {
      // Directories are only opened: reading one must say EISDIR.
      char c;
      std::string out;
      Outcome w2 = m_.Read(md, 1, -1, &out);
      errno = 0;
      ssize_t got = t_.Read(fd, &c, 1);
      Op r{K::kRead};
      r.fd_op = i;
      r.x = -1;
      r.y = 1;
      bool ok = Expect(r, w2, got, errno, true);
      m_.Close(md);
      t_.Close(fd);
      return ok;
    }
    open_[i] = {md, fd};
    return true;
  }

  bool ExecReaddir(const Op& o) {
    std::map<std::string, uint8_t> want_names, got_names;
    std::vector<std::string> dups;
    Outcome want = m_.ReadDir(o.a, &want_names);
    errno = 0;
    int got = t_.ReadDir(o.a, &got_names, &dups);
    if (!Expect(o, want, got, errno, true)) return false;
    if (want.err) return true;
    if (!dups.empty()) return Hard(Describe(o) + ": returned '" + Short(dups[0]) + "' twice");
    if (want_names != got_names) {
      std::string d;
      for (auto& [n, t] : want_names)
        if (!got_names.count(n)) d += " missing '" + Short(n) + "'";
        else if (got_names[n] != t) d += " type of '" + Short(n) + "'";
      for (auto& [n, t] : got_names)
        if (!want_names.count(n)) d += " extra '" + Short(n) + "'";
      return Hard(Describe(o) + ":" + d);
    }
    return true;
  }

  Target& t_;
  Model m_;
  Rng rng_;
  uint64_t seed_;
  bool root_paths_;
  int cur_ = 0;
  int calls_ = 0;
  int remounts_ = 0;
  std::vector<Op> ops_;
  std::map<int, std::pair<int, int>> open_;  // index of the open -> (model description, target fd)
  std::vector<std::pair<std::string, int>> paths_;
  std::deque<std::string> log_;
  std::map<std::string, std::pair<int, std::string>> soft_;
  std::map<std::string, int> stats_;
  std::string failure_;
};

int Ops() { return static_cast<int>(EnvInt("MAPFS_MODEL_OPS", 2000)); }
std::vector<uint64_t> Seeds() {
  long n = EnvInt("MAPFS_MODEL_SEEDS", 4), first = EnvInt("MAPFS_MODEL_SEED", 1);
  std::vector<uint64_t> v;
  for (long i = 0; i < n; i++) v.push_back(static_cast<uint64_t>(first + i));
  return v;
}

// ---- mapfs against the model

struct Param {
  int mode;
  unsigned page_size;
  uint64_t seed;
};
std::string ParamName(const ::testing::TestParamInfo<Param>& i) {
  return std::string(ModeName(i.param.mode)) + (i.param.page_size == 4096 ? "_4k" : "_2m") + "_seed" +
         std::to_string(i.param.seed);
}
std::vector<Param> AllParams() {
  std::vector<Param> v;
  for (int mode : {MAPFS_MODE_POSIX, MAPFS_MODE_SYNC, MAPFS_MODE_STRICT})
    for (unsigned ps : {4096u, 2u << 20})
      for (uint64_t s : Seeds()) v.push_back({mode, ps, s});
  return v;
}
uint64_t PoolSize(unsigned page_size) { return page_size == 4096 ? 256ull << 20 : 512ull << 20; }

// Replays `ops` on a fresh pool; "" if nothing diverges and fsck is clean.
std::string ReplayFails(const Param& p, const std::vector<Op>& ops) {
  FsPool pool(PoolSize(p.page_size), p.page_size, p.mode);
  if (!pool.error().empty()) return "";
  std::string why;
  {
    MapfsTarget t(pool.path(), p.mode);
    if (!t.fs()) return "";
    Runner r(t, p.seed);
    if (!r.Replay(ops)) why = r.failure();
    r.CloseAll();
  }
  if (why.empty()) {
    auto probs = CheckPool(pool.path());
    if (!probs.empty()) why = "fsck: " + probs[0];
  }
  return why;
}

// Delta debugging: drops chunks of calls while the replay still fails.
std::vector<Op> Shrink(const Param& p, std::vector<Op> ops) {
  for (size_t chunk = ops.size() / 2; chunk >= 1;) {
    bool progress = false;
    for (size_t i = 0; i < ops.size();) {
      std::vector<Op> t(ops.begin(), ops.begin() + static_cast<long>(i));
      t.insert(t.end(), ops.begin() + static_cast<long>(std::min(ops.size(), i + chunk)), ops.end());
      if (!ReplayFails(p, t).empty()) {
        ops = std::move(t);
        progress = true;
      } else {
        i += chunk;
      }
    }
    if (!progress) chunk /= 2;
  }
  return ops;
}

class FsModel : public ::testing::TestWithParam<Param> {};

TEST_P(FsModel, RandomOpsMatchModel) {
  const Param& p = GetParam();
  FsPool pool(PoolSize(p.page_size), p.page_size, p.mode);
  ASSERT_EQ(pool.error(), "");
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Op> ops;
  bool ok;
  {
    MapfsTarget t(pool.path(), p.mode);
    ASSERT_NE(t.fs(), nullptr) << mapfs_last_error();
    Runner r(t, p.seed);
    ok = r.Run(Ops());
    EXPECT_TRUE(ok) << r.failure();
    EXPECT_TRUE(r.soft().empty()) << "errno differs from the model (Linux) in these cases (seed " << p.seed << "):\n"
                                  << r.SoftReport();
    r.CloseAll();
    EXPECT_EQ(t.Unmount(), 0) << mapfs_last_error();
    std::printf("[ model ] %s seed %llu: %d calls, %d remounts, %.2f s\n", ModeName(p.mode),
                static_cast<unsigned long long>(p.seed), r.calls(), r.remounts(), SecondsSince(t0));
    if (EnvInt("MAPFS_MODEL_STATS", 0)) std::printf("%s", r.Stats().c_str());
    ops = r.ops();
  }
  auto probs = CheckPool(pool.path());
  EXPECT_TRUE(probs.empty()) << "fsck problems (seed " << p.seed << "):\n" << Join(probs);
  if ((!ok || !probs.empty()) && EnvInt("MAPFS_MODEL_SHRINK", 0)) {
    std::vector<Op> small = Shrink(p, ops);
    std::string why = ReplayFails(p, small);
    std::string s;
    for (size_t i = 0; i < small.size(); i++) s += "  #" + std::to_string(i) + " " + Describe(small[i]) + "\n";
    ADD_FAILURE() << "shrunk to " << small.size() << " calls (fd@N: opened by the Nth of the full sequence):\n"
                  << s << "failure: " << why;
  }
}

INSTANTIATE_TEST_SUITE_P(All, FsModel, ::testing::ValuesIn(AllParams()), ParamName);

// ---- the kernel against the model (checks the oracle itself)

class FsModelOracle : public ::testing::TestWithParam<uint64_t> {};

TEST_P(FsModelOracle, LinuxMatchesModel) {
  LinuxTarget t;
  Runner r(t, GetParam(), /*root_paths=*/false);
  bool ok = r.Run(Ops());
  EXPECT_TRUE(ok) << "the model is wrong about Linux: " << r.failure();
  EXPECT_TRUE(r.soft().empty()) << "the model's errno is wrong about Linux:\n" << r.SoftReport();
  if (EnvInt("MAPFS_MODEL_STATS", 0)) std::printf("%s", r.Stats().c_str());
  r.CloseAll();
}

INSTANTIATE_TEST_SUITE_P(Seeds, FsModelOracle, ::testing::ValuesIn(Seeds()),
                         [](const ::testing::TestParamInfo<uint64_t>& i) { return "seed" + std::to_string(i.param); });

}  // namespace
}  // namespace mapfs::fstest
