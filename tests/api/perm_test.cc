// Permission matrix: the same calls, made by the same users, on a tmpfs
// directory (the kernel's answers) and in a pool through the C API, must
// succeed or fail alike, with the same errno, and leave the same modes and
// owners. Users: the owner of everything (60001), a member of its group
// (60002), another user (60003), root, and a process whose real id is the
// other user's and effective id the owner's (access() vs AT_EACCESS). Each
// runs in a forked child that switches its ids (setgroups, setresgid,
// setresuid; the uids need no /etc/passwd entries) across directory modes
// (sticky, search-only, no search) and file modes.
//
// Needs root to switch ids; not root, only the owner's rows run (as the
// calling user, on its own files).
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <sstream>

#include "api/api_util.h"
#include "api/perm_matrix.h"

namespace mapfs::apitest {
namespace {

using namespace mapfs::permtest;  // NOLINT: the matrix's vocabulary

class Pool : public Side {
 public:
  Pool(mapfs_t* fs, std::string root) : fs_(fs), root_(std::move(root)) {}
  std::string P(const std::string& p) const { return root_ + "/" + p; }
  int Open(const std::string& p, int flags, mode_t m) override {
    int fd = mapfs_open(fs_, P(p).c_str(), flags, m);
    if (fd < 0) return errno;
    mapfs_close(fs_, fd);
    return 0;
  }
  int Mkdir(const std::string& p, mode_t m) override { return Rc(mapfs_mkdir(fs_, P(p).c_str(), m)); }
  int Unlink(const std::string& p) override { return Rc(mapfs_unlink(fs_, P(p).c_str())); }
  int Rmdir(const std::string& p) override { return Rc(mapfs_rmdir(fs_, P(p).c_str())); }
  int Rename(const std::string& a, const std::string& b) override {
    return Rc(mapfs_rename(fs_, P(a).c_str(), P(b).c_str()));
  }
  int Link(const std::string& a, const std::string& b) override {
    return Rc(mapfs_link(fs_, P(a).c_str(), P(b).c_str()));
  }
  int Symlink(const std::string& t, const std::string& p) override {
    return Rc(mapfs_symlink(fs_, t.c_str(), P(p).c_str()));
  }
  int Chmod(const std::string& p, mode_t m) override { return Rc(mapfs_chmod(fs_, P(p).c_str(), m)); }
  int Chown(const std::string& p, uid_t u, gid_t g) override { return Rc(mapfs_chown(fs_, P(p).c_str(), u, g)); }
  int Utimens(const std::string& p, const struct timespec* ts) override {
    return Rc(mapfs_utimens(fs_, P(p).c_str(), ts));
  }
  int Truncate(const std::string& p) override { return Rc(mapfs_truncate(fs_, P(p).c_str(), 0)); }
  int Stat(const std::string& p, struct stat* st) override { return Rc(mapfs_stat(fs_, P(p).c_str(), st)); }
  int Access(const std::string& p, int mode, int flags) override {
    return Rc(mapfs_access(fs_, P(p).c_str(), mode, flags));
  }
  int WriteByte(const std::string& p) override {
    int fd = mapfs_open(fs_, P(p).c_str(), O_WRONLY);
    if (fd < 0) return errno;
    int rc = mapfs_write(fs_, fd, "x", 1) == 1 ? 0 : errno;
    mapfs_close(fs_, fd);
    return rc;
  }

 private:
  mapfs_t* fs_;
  std::string root_;
};

// Runs the calls as `a` in a child (kernel first, then the pool: the same
// order of effects on both sides); returns the two transcripts.
std::pair<std::string, std::string> RunAs(const Actor& a, const std::string& pool, const std::string& kroot,
                                          const std::string& proot, bool switch_ids) {
  return TranscriptsFromChild(
      [&]() -> std::pair<std::string, std::string> {
        // Mount as root (the pool file is root's), then become the user.
        mapfs_t* fs = mapfs_mount(pool.c_str(), nullptr);
        if (fs == nullptr) return {std::string("child mount failed: ") + mapfs_last_error(), ""};
        std::pair<std::string, std::string> r;
        if (switch_ids && !SwitchTo(a)) {
          r.first = std::string("switching ids failed: ") + strerror(errno);
        } else {
          mapfs_refresh_credentials();
          Kernel ks(kroot);
          Pool ps(fs, proot);
          r.first = RunOps(ks);
          r.second = RunOps(ps);
        }
        mapfs_unmount(fs);
        return r;
      },
      /*clean_exit=*/false);
}

class PermMatrix : public ::testing::Test {
 protected:
  void SetUp() override {
    ::umask(0);
    char tmpl[] = "/dev/shm/mapfs-perm-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    kdir_ = tmpl;
    ASSERT_EQ(::chmod(kdir_.c_str(), 0755), 0);  // the test users search it
    pool_ = std::make_unique<MountedPool>(256 * kMiB);
    ASSERT_TRUE(pool_->formatted()) << pool_->mkfs_error();
    ASSERT_TRUE(pool_->Mount()) << mapfs_last_error();
  }
  void TearDown() override {
    pool_.reset();
    if (!kdir_.empty()) {
      std::string cmd = "rm -rf '" + kdir_ + "'";
      if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", kdir_.c_str());
    }
  }

  // Every actor x directory mode x file mode; failures name the case.
  void RunMatrix(const std::vector<Actor>& actors, const std::vector<mode_t>& dir_modes,
                 const std::vector<mode_t>& file_modes, bool as_root) {
    int n = 0, mismatches = 0;
    for (const Actor& a : actors)
      for (mode_t dm : dir_modes)
        for (mode_t fm : file_modes) {
          std::string name = "c" + std::to_string(n++);
          std::string kroot = kdir_ + "/" + name, proot = "/" + name;
          ASSERT_EQ(::mkdir(kroot.c_str(), 0755), 0);
          ASSERT_OK(mapfs_mkdir(pool_->fs(), proot.c_str(), 0755));
          Kernel ks(kroot);
          Pool ps(pool_->fs(), proot);
          uid_t owner = as_root ? kOwner : ::geteuid();
          gid_t group = as_root ? kGroup : ::getegid();
          ASSERT_EQ(MakeTree(ks, dm, fm, owner, group, as_root), 0) << "kernel setup";
          ASSERT_EQ(MakeTree(ps, dm, fm, owner, group, as_root), 0) << "pool setup: " << mapfs_last_error();
          auto [k, p] = RunAs(a, pool_->path(), kroot, proot, as_root);
          ASSERT_FALSE(k.empty()) << "no transcript from the child";
          ASSERT_EQ(k.find("failed"), std::string::npos) << k;
          std::string d = Diff(k, p);
          // Root reads back the state on both sides.
          std::string sd = Diff(State(ks), State(ps));
          if (!d.empty() || !sd.empty()) {
            mismatches++;
            char modes[64];
            std::snprintf(modes, sizeof modes, "dir %04o file %04o", dm, fm);
            ADD_FAILURE() << a.name << ", " << modes << ":\n" << d << sd;
            if (mismatches > 10) return;
          }
        }
  }

  std::string kdir_;
  std::unique_ptr<MountedPool> pool_;
};

TEST_F(PermMatrix, EveryUserGetsTheKernelsAnswers) {
  if (::geteuid() != 0) {
    // Only the files' owner can be tried: the calling user on its own files.
    Actor self{"self", ::getuid(), ::geteuid(), ::getgid(), ::getegid(), {}};
    RunMatrix({self}, kDirModes, kFileModes, false);
    return;
  }
  RunMatrix(Actors(), kDirModes, kFileModes, true);
}

}  // namespace
}  // namespace mapfs::apitest
