// The permission matrix (tests/api/perm_matrix.h) on a directory reached
// through libc: the same calls go to a tmpfs directory (the kernel's
// answers) and to PERM_DIR — a path under the shim's prefix when run under
// `mapfs run` (tests/preload/perm_shim_test.sh), or a FUSE mount of a pool
// (tests/fuse/perm_test.sh, with and without default_permissions). Trees
// are made by root and then called by forked children that switch ids
// with setgroups/setresgid/setresuid (the shim sees the switch and reads
// the ids again; the FUSE daemon sees each request's ids). Not root, the
// calling user's own rows run. PERM_DIR must exist and be writable by the
// caller; the test makes PERM_DIR/perm.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <sstream>

#include "api/perm_matrix.h"

namespace {

using namespace mapfs::permtest;  // NOLINT: the matrix's vocabulary


// Runs the calls as `a` in a child; returns the two transcripts.
std::pair<std::string, std::string> RunAs(const Actor& a, const std::string& kroot, const std::string& mroot,
                                          bool switch_ids) {
  return TranscriptsFromChild(
      [&]() -> std::pair<std::string, std::string> {
        if (switch_ids && !SwitchTo(a)) return {std::string("switching ids failed: ") + strerror(errno), ""};
        Kernel ks(kroot), ms(mroot);
        std::string k = RunOps(ks);
        return {k, RunOps(ms)};
      },
      /*clean_exit=*/true);  // under the shim: its clean exit
}

// PERM_ACCEPT="call=KERNEL>MAPFS ...": a difference of errno the side
// under test cannot avoid, accepted where the kernel's answer is KERNEL
// (fuse/perm_test.sh says which and why). The line becomes the kernel's.
std::string Accept(const std::string& kernel, std::string got) {
  const char* env = std::getenv("PERM_ACCEPT");
  if (env == nullptr) return got;
  std::istringstream rules(env);
  for (std::string r; rules >> r;) {
    size_t eq = r.find('='), gt = r.find('>');
    if (eq == std::string::npos || gt == std::string::npos || gt < eq) continue;
    std::string want = r.substr(0, gt) + "\n", have = r.substr(0, eq + 1) + r.substr(gt + 1) + "\n";
    size_t at = got.find(have);
    if (at != std::string::npos && (at == 0 || got[at - 1] == '\n') && kernel.find(want) != std::string::npos)
      got.replace(at, have.size(), want);
  }
  return got;
}

TEST(PermDir, EveryUserGetsTheKernelsAnswers) {
  const char* dir = std::getenv("PERM_DIR");
  ASSERT_NE(dir, nullptr) << "PERM_DIR names the directory under test (perm_shim_test.sh, fuse/perm_test.sh)";
  ::umask(0);
  char tmpl[] = "/dev/shm/mapfs-permshim-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string kdir = tmpl, mdir = std::string(dir) + "/perm";
  ASSERT_EQ(::chmod(kdir.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(mdir.c_str(), 0755), 0) << strerror(errno);
  bool root = ::geteuid() == 0;
  std::vector<Actor> actors = root ? Actors()
                                   : std::vector<Actor>{{"self", ::getuid(), ::geteuid(), ::getgid(), ::getegid(), {}}};
  int n = 0, mismatches = 0;
  for (const Actor& a : actors)
    for (mode_t dm : kDirModes)
      for (mode_t fm : kFileModes) {
        std::string name = "/c" + std::to_string(n++);
        ASSERT_EQ(::mkdir((kdir + name).c_str(), 0755), 0);
        ASSERT_EQ(::mkdir((mdir + name).c_str(), 0755), 0) << strerror(errno);
        Kernel ks(kdir + name), ms(mdir + name);
        uid_t owner = root ? kOwner : ::geteuid();
        gid_t group = root ? kGroup : ::getegid();
        ASSERT_EQ(MakeTree(ks, dm, fm, owner, group, root), 0) << "kernel setup";
        ASSERT_EQ(MakeTree(ms, dm, fm, owner, group, root), 0) << "pool setup";
        auto [k, p] = RunAs(a, kdir + name, mdir + name, root);
        ASSERT_FALSE(k.empty()) << "no transcript from the child";
        ASSERT_EQ(k.find("failed"), std::string::npos) << k;
        std::string d = Diff(k, Accept(k, p)), sd = Diff(State(ks), State(ms));
        if (!d.empty() || !sd.empty()) {
          char modes[64];
          std::snprintf(modes, sizeof modes, "dir %04o file %04o", dm, fm);
          ADD_FAILURE() << a.name << ", " << modes << ":\n" << d << sd;
          if (++mismatches > 10) break;
        }
      }
  // Not root, the cases left directories their owner may not search
  // (0644, 0333): give him the rights back first.
  std::string cmd = "chmod -R u+rwx '" + kdir + "' && rm -rf '" + kdir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

}  // namespace
