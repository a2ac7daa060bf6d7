// The permission matrix shared by the C API's and the shim's tests: the
// users, the tree each case starts from, the calls, and the comparison of
// two transcripts (a tmpfs directory's, the kernel's answers, and the
// pool's). See tests/api/perm_test.cc.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace mapfs::permtest {

inline std::string ErrName(int e) {
  const char* n = strerrorname_np(e);
  return n ? n : ("errno " + std::to_string(e));
}

constexpr uid_t kOwner = 60001, kMember = 60002, kOther = 60003;
constexpr gid_t kGroup = 60001, kMemberGid = 60002, kOtherGid = 60003, kExtraGid = 60010, kForeignGid = 60099;

struct Actor {
  const char* name;
  uid_t ruid, euid;
  gid_t rgid, egid;
  std::vector<gid_t> groups;
};

// One side of the comparison: the calls of the matrix on paths relative to
// a root, each returning 0 or the errno it failed with.
class Side {
 public:
  virtual ~Side() = default;
  virtual int Open(const std::string& p, int flags, mode_t m = 0) = 0;  // opens and closes
  virtual int Mkdir(const std::string& p, mode_t m) = 0;
  virtual int Unlink(const std::string& p) = 0;
  virtual int Rmdir(const std::string& p) = 0;
  virtual int Rename(const std::string& a, const std::string& b) = 0;
  virtual int Link(const std::string& a, const std::string& b) = 0;
  virtual int Symlink(const std::string& t, const std::string& p) = 0;
  virtual int Chmod(const std::string& p, mode_t m) = 0;
  virtual int Chown(const std::string& p, uid_t u, gid_t g) = 0;
  virtual int Utimens(const std::string& p, const struct timespec* ts) = 0;
  virtual int Truncate(const std::string& p) = 0;
  virtual int Stat(const std::string& p, struct stat* st) = 0;
  virtual int Access(const std::string& p, int mode, int flags) = 0;
  virtual int WriteByte(const std::string& p) = 0;  // open O_WRONLY, write one byte
};

inline int Rc(int r) { return r < 0 ? errno : 0; }

class Kernel : public Side {
 public:
  explicit Kernel(std::string root) : root_(std::move(root)) {}
  std::string P(const std::string& p) const { return root_ + "/" + p; }
  int Open(const std::string& p, int flags, mode_t m) override {
    int fd = ::open(P(p).c_str(), flags, m);
    if (fd < 0) return errno;
    ::close(fd);
    return 0;
  }
  int Mkdir(const std::string& p, mode_t m) override { return Rc(::mkdir(P(p).c_str(), m)); }
  int Unlink(const std::string& p) override { return Rc(::unlink(P(p).c_str())); }
  int Rmdir(const std::string& p) override { return Rc(::rmdir(P(p).c_str())); }
  int Rename(const std::string& a, const std::string& b) override { return Rc(::rename(P(a).c_str(), P(b).c_str())); }
  int Link(const std::string& a, const std::string& b) override { return Rc(::link(P(a).c_str(), P(b).c_str())); }
  int Symlink(const std::string& t, const std::string& p) override { return Rc(::symlink(t.c_str(), P(p).c_str())); }
  int Chmod(const std::string& p, mode_t m) override { return Rc(::chmod(P(p).c_str(), m)); }
  int Chown(const std::string& p, uid_t u, gid_t g) override { return Rc(::chown(P(p).c_str(), u, g)); }
  int Utimens(const std::string& p, const struct timespec* ts) override {
    return Rc(::utimensat(AT_FDCWD, P(p).c_str(), ts, 0));
  }
  int Truncate(const std::string& p) override { return Rc(::truncate(P(p).c_str(), 0)); }
  int Stat(const std::string& p, struct stat* st) override { return Rc(::stat(P(p).c_str(), st)); }
  int Access(const std::string& p, int mode, int flags) override {
    return Rc(::faccessat(AT_FDCWD, P(p).c_str(), mode, flags));
  }
  int WriteByte(const std::string& p) override {
    int fd = ::open(P(p).c_str(), O_WRONLY);
    if (fd < 0) return errno;
    int rc = ::write(fd, "x", 1) == 1 ? 0 : errno;
    ::close(fd);
    return rc;
  }

 private:
  std::string root_;
};

// The tree of one case, made by root (or, not root, by the caller):
//   d           dir_mode, owner:group
//   d/<name>    for each file: file_mode (some fixed), owner:group
//   d/sub_*     directories for rmdir, cross-directory rename, search
//   d2          0777: the other side of cross-directory renames
inline const char* const kFiles[] = {"f_r",  "f_w",  "f_rw", "f_tr", "f_trr", "f_na", "f_u",  "f_mv", "f_tgt",
                              "f_c",  "f_g",  "f_o",  "f_o2", "f_cg", "f_cg2", "f_un", "f_ue", "f_s",
                              "f_t",  "f_l",  "f_ax", "f_ar", "f_aw"};

inline int MakeTree(Side& s, mode_t dir_mode, mode_t file_mode, uid_t owner, gid_t group, bool chown_ok) {
  auto own = [&](const std::string& p, gid_t g = 0) {
    return chown_ok ? s.Chown(p, owner, g ? g : group) : 0;
  };
  int rc = 0;
  auto step = [&](int r, const std::string& what) {
    if (r != 0 && rc == 0) {
      rc = r;
      std::fprintf(stderr, "setup %s: %s\n", what.c_str(), strerror(r));
    }
  };
  step(s.Mkdir("d", 0700), "d");
  step(s.Mkdir("d2", 0777), "d2");
  step(s.Chmod("d2", 0777), "d2 mode");
  for (const char* f : kFiles) {
    step(s.Open(std::string("d/") + f, O_CREAT | O_EXCL | O_WRONLY, 0600), f);
    step(own(std::string("d/") + f, std::string(f) == "f_g" ? kForeignGid : 0), f);
    mode_t m = file_mode;
    if (std::string(f) == "f_g") m = 0755;
    step(s.Chmod(std::string("d/") + f, m), f);
  }
  // A set-ID file everyone may write: writes by others than root drop the bits.
  step(s.Open("d/f_suid", O_CREAT | O_EXCL | O_WRONLY, 0600), "f_suid");
  step(own("d/f_suid"), "f_suid");
  step(s.Chmod("d/f_suid", 06777), "f_suid");
  // A set-ID file for chown (root's too drops S_ISUID).
  step(s.Open("d/f_suid2", O_CREAT | O_EXCL | O_WRONLY, 0600), "f_suid2");
  step(own("d/f_suid2"), "f_suid2");
  step(s.Chmod("d/f_suid2", 06755), "f_suid2");
  for (const char* sub : {"sub_r", "sub_mv", "sub_x"}) {
    step(s.Mkdir(std::string("d/") + sub, 0700), sub);
    step(own(std::string("d/") + sub), sub);
  }
  step(s.Open("d/sub_x/in", O_CREAT | O_EXCL | O_WRONLY, 0644), "sub_x/in");
  step(s.Chmod("d/sub_x/in", 0644), "sub_x/in");
  step(s.Chmod("d/sub_r", 0755), "sub_r");
  step(s.Chmod("d/sub_mv", file_mode), "sub_mv");   // its ".." changes on a move
  step(s.Chmod("d/sub_x", file_mode), "sub_x");     // search and read of a directory
  step(s.Open("d2/src", O_CREAT | O_EXCL | O_WRONLY, 0666), "d2/src");
  step(s.Open("d2/src2", O_CREAT | O_EXCL | O_WRONLY, 0666), "d2/src2");
  step(own("d"), "d");
  step(s.Chmod("d", dir_mode), "d mode");
  return rc;
}

// The matrix's calls; one line per call: "name=errno".
inline std::string RunOps(Side& s) {
  std::ostringstream out;
  auto rec = [&](const char* name, int r) { out << name << "=" << (r ? ErrName(r) : "0") << "\n"; };
  rec("open_r", s.Open("d/f_r", O_RDONLY));
  rec("open_w", s.Open("d/f_w", O_WRONLY));
  rec("open_rw", s.Open("d/f_rw", O_RDWR));
  rec("open_wtrunc", s.Open("d/f_tr", O_WRONLY | O_TRUNC));
  rec("open_rtrunc", s.Open("d/f_trr", O_RDONLY | O_TRUNC));
  rec("open_noatime", s.Open("d/f_na", O_RDONLY | O_NOATIME));
  rec("open_dir", s.Open("d/sub_x", O_RDONLY | O_DIRECTORY));
  rec("create", s.Open("d/new", O_CREAT | O_EXCL | O_WRONLY, 0644));
  rec("create_existing", s.Open("d/f_rw", O_CREAT | O_RDWR, 0644));
  rec("mkdir", s.Mkdir("d/newdir", 0755));
  rec("mkdir_existing", s.Mkdir("d/sub_r", 0755));
  rec("symlink", s.Symlink("f_r", "d/sl"));
  rec("link", s.Link("d/f_l", "d/f_l2"));
  rec("link_in", s.Link("d2/src2", "d/f_l3"));
  rec("unlink", s.Unlink("d/f_u"));
  rec("unlink_missing", s.Unlink("d/nothing"));
  rec("rmdir", s.Rmdir("d/sub_r"));
  rec("rename_in", s.Rename("d/f_mv", "d/f_mv2"));
  rec("rename_out", s.Rename("d/f_rw", "d2/f_rw"));
  rec("rename_over", s.Rename("d2/src", "d/f_tgt"));
  rec("rename_dir_cross", s.Rename("d/sub_mv", "d2/sub_mv"));
  rec("chmod", s.Chmod("d/f_c", 0640));
  rec("chmod_sgid", s.Chmod("d/f_g", 02755));
  rec("chown", s.Chown("d/f_o", kOther, static_cast<gid_t>(-1)));
  rec("chown_same", s.Chown("d/f_o2", kOwner, static_cast<gid_t>(-1)));
  rec("chgrp_in", s.Chown("d/f_cg", static_cast<uid_t>(-1), kExtraGid));
  rec("chgrp_out", s.Chown("d/f_cg2", static_cast<uid_t>(-1), kForeignGid));
  rec("chown_suid", s.Chown("d/f_suid2", static_cast<uid_t>(-1), static_cast<gid_t>(-1)));
  rec("utimens_now", s.Utimens("d/f_un", nullptr));
  struct timespec ts[2] = {{1, 0}, {2, 0}};
  rec("utimens_explicit", s.Utimens("d/f_ue", ts));
  struct timespec now_omit[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  rec("utimens_now_omit", s.Utimens("d/f_un", now_omit));
  struct stat st;
  rec("stat", s.Stat("d/f_s", &st));
  rec("stat_below", s.Stat("d/sub_x/in", &st));
  rec("truncate", s.Truncate("d/f_t"));
  rec("write_suid", s.WriteByte("d/f_suid"));
  rec("access_x_real", s.Access("d/f_ax", X_OK, 0));
  rec("access_x_eff", s.Access("d/f_ax", X_OK, AT_EACCESS));
  rec("access_r_real", s.Access("d/f_ar", R_OK, 0));
  rec("access_r_eff", s.Access("d/f_ar", R_OK, AT_EACCESS));
  rec("access_w_eff", s.Access("d/f_aw", W_OK, AT_EACCESS));
  rec("access_f", s.Access("d/f_aw", F_OK, 0));
  rec("access_dir_x", s.Access("d/sub_x", X_OK, AT_EACCESS));
  return out.str();
}

// What the calls left behind (modes and owners), read back by root.
inline std::string State(Side& s) {
  std::ostringstream out;
  for (const char* f : {"d/f_c", "d/f_g", "d/f_o", "d/f_o2", "d/f_cg", "d/f_cg2", "d/f_suid", "d/f_suid2", "d/f_tgt",
                        "d2/sub_mv", "d/sub_mv", "d/new", "d/newdir"}) {
    struct stat st;
    int r = s.Stat(f, &st);
    out << f << ": ";
    if (r != 0)
      out << ErrName(r);
    else
      out << std::oct << (st.st_mode & 07777) << std::dec << " " << st.st_uid << ":" << st.st_gid;
    out << "\n";
  }
  return out.str();
}

inline bool SwitchTo(const Actor& a) {
  return ::setgroups(a.groups.size(), a.groups.data()) == 0 && ::setresgid(a.rgid, a.egid, a.egid) == 0 &&
         ::setresuid(a.ruid, a.euid, a.euid) == 0;
}

inline std::string Diff(const std::string& want, const std::string& got) {
  std::istringstream a(want), b(got);
  std::string la, lb, out;
  while (true) {
    bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) break;
    if (la != lb) out += "  kernel: " + (ga ? la : "<none>") + "   mapfs: " + (gb ? lb : "<none>") + "\n";
  }
  return out;
}

inline const std::vector<mode_t> kDirModes = {0755, 0775, 0777, 01777, 0711, 0333, 0644};
inline const std::vector<mode_t> kFileModes = {0644, 0664, 0600, 0444, 0711, 0222, 0000, 0606};


// The users of the matrix; root must run it to switch to them.
inline std::vector<Actor> Actors() {
  return {
      {"owner", kOwner, kOwner, kGroup, kGroup, {kGroup, kExtraGid}},
      {"group member", kMember, kMember, kMemberGid, kMemberGid, {kMemberGid, kGroup}},
      {"other", kOther, kOther, kOtherGid, kOtherGid, {kOtherGid}},
      {"root", 0, 0, 0, 0, {0}},
      {"real other, effective owner", kOther, kOwner, kOtherGid, kGroup, {kGroup}},
  };
}

// Runs `body` (returning the kernel's and the side under test's
// transcripts) in a forked child, so that switching ids never touches the
// test process, and returns what it produced, sent back through a pipe. The
// child ends with exit() when `clean_exit` (a shim's exit handlers run),
// else with _exit().
template <typename Body>
std::pair<std::string, std::string> TranscriptsFromChild(Body body, bool clean_exit) {
  int fds[2];
  if (::pipe(fds) != 0) return {"pipe failed", ""};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    auto [k, p] = body();
    std::string msg = k + '\0' + p;
    size_t off = 0;
    while (off < msg.size()) {
      ssize_t n = ::write(fds[1], msg.data() + off, msg.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    if (clean_exit) std::exit(0);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  size_t z = all.find('\0');
  if (z == std::string::npos) return {"child died: " + all, ""};
  return {all.substr(0, z), all.substr(z + 1)};
}

}  // namespace mapfs::permtest
