// Symlinks whose absolute targets leave the pool (issue 18, item 1), at the
// core: with a prefix (FsOptions::prefix, the shim's MAPFS_MOUNT) an
// absolute target under the prefix is a pool path, any other one — and
// ".." at the pool's root — ends the walk with kLeavesPool and says where
// the path goes on (LinkChain), with the links followed so far; without a
// prefix (C API, CLI, FUSE) an absolute target is walked from the pool's
// root, as under chroot.
#include <fcntl.h>
#include <sys/stat.h>

#include <string>

#include "fs_test_util.h"

namespace mapfs::fstest {
namespace {

class FsLinks : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pool_.error(), "");
    fs::FsOptions o;
    o.prefix = "/mapfs/";  // the trailing slash is dropped
    auto m = fs::FileSystem::Mount(pool_.path(), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    fs_ = std::move(*m);
    ASSERT_TRUE(fs_->Mkdir("/d", 0755).ok());
    auto f = fs_->Open("/d/f", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(fs_->Close(**f).ok());
  }
  void TearDown() override {
    if (fs_) {
      EXPECT_TRUE(fs_->Unmount().ok());
    }
  }
  // The exit a walk left by, as "links path", or "" when it did not leave.
  static std::string Exit(fs::LinkChain& chain) {
    std::string p;
    int links = 0;
    if (!chain.TakeExit(&p, &links)) return "";
    return std::to_string(links) + " " + p;
  }

  FsPool pool_;
  std::unique_ptr<fs::FileSystem> fs_;
};

TEST_F(FsLinks, TargetUnderThePrefixIsThePoolsPath) {
  ASSERT_TRUE(fs_->Symlink("/mapfs/d", "/in").ok());
  ASSERT_TRUE(fs_->Symlink("//mapfs//d/", "/in2").ok());  // extra slashes: the same path
  fs::LinkChain chain;
  struct stat st;
  ASSERT_TRUE(fs_->Stat("/in/f", &st).ok());
  EXPECT_TRUE(S_ISREG(st.st_mode));
  ASSERT_TRUE(fs_->Stat("/in2/f", &st).ok());
  EXPECT_EQ(Exit(chain), "");
  auto t = fs_->Readlink("/in");  // the stored target, unchanged
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "/mapfs/d");
}

TEST_F(FsLinks, TargetOutsideThePrefixLeavesThePool) {
  ASSERT_TRUE(fs_->Symlink("/d", "/out").ok());  // the kernel's /d, not the pool's
  ASSERT_TRUE(fs_->Symlink("/mapfsx/y", "/near").ok());  // a name that only starts like the prefix
  fs::LinkChain chain;
  struct stat st;
  Status s = fs_->Stat("/out/f", &st);
  EXPECT_EQ(s.code(), fs::kLeavesPool) << s.ToString();
  EXPECT_EQ(Exit(chain), "1 /d/f");
  EXPECT_EQ(Exit(chain), "");  // taken once
  EXPECT_EQ(fs_->Stat("/near", &st).code(), fs::kLeavesPool);
  EXPECT_EQ(Exit(chain), "1 /mapfsx/y");
  // Name-acting calls leave by a link in the middle, never at the last name.
  EXPECT_EQ(fs_->Mkdir("/out/new/", 0755).code(), fs::kLeavesPool);
  EXPECT_EQ(Exit(chain), "1 /d/new/");
  struct stat lst;
  ASSERT_TRUE(fs_->Stat("/out", &lst, false).ok());
  EXPECT_TRUE(S_ISLNK(lst.st_mode));
  EXPECT_EQ(Exit(chain), "");
}

TEST_F(FsLinks, DotDotAtThePoolRootLeavesThePool) {
  ASSERT_TRUE(fs_->Symlink("../../etc/hostname", "/d/up").ok());
  ASSERT_TRUE(fs_->Symlink("/mapfs/../etc", "/dotdot").ok());
  fs::LinkChain chain;
  struct stat st;
  EXPECT_EQ(fs_->Stat("/d/up", &st).code(), fs::kLeavesPool);
  EXPECT_EQ(Exit(chain), "1 /etc/hostname");
  EXPECT_EQ(fs_->Stat("/dotdot/passwd", &st).code(), fs::kLeavesPool);
  EXPECT_EQ(Exit(chain), "1 /etc/passwd");
}

TEST_F(FsLinks, LinksFromBeforeCountTowardsTheLimit) {
  ASSERT_TRUE(fs_->Symlink("/mapfs/d", "/l0").ok());
  ASSERT_TRUE(fs_->Symlink("/mapfs/l0", "/l1").ok());
  struct stat st;
  {
    fs::LinkChain chain(fs::kMaxSymlinks - 2);  // 38 links followed outside: two more are fine
    EXPECT_TRUE(fs_->Stat("/l1/f", &st).ok());
  }
  {
    fs::LinkChain chain(fs::kMaxSymlinks - 1);
    EXPECT_EQ(fs_->Stat("/l1/f", &st).code(), ELOOP);
  }
  fs::LinkChain chain;  // counts start over with each chain
  EXPECT_TRUE(fs_->Stat("/l1/f", &st).ok());
}

TEST(FsLinksNoPrefix, AbsoluteTargetIsWalkedFromThePoolRoot) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  auto m = fs::FileSystem::Mount(pool.path());
  ASSERT_TRUE(m.ok());
  auto& f = *m;
  ASSERT_TRUE(f->Mkdir("/d", 0755).ok());
  ASSERT_TRUE(f->Symlink("/d", "/l").ok());
  ASSERT_TRUE(f->Symlink("../../d", "/d2").ok());  // ".." at the root stays there
  fs::LinkChain chain;
  struct stat st;
  EXPECT_TRUE(f->Stat("/l", &st).ok());
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_TRUE(f->Stat("/d2", &st).ok());
  std::string p;
  int links;
  EXPECT_FALSE(chain.TakeExit(&p, &links));
  EXPECT_TRUE(f->Unmount().ok());
}

}  // namespace
}  // namespace mapfs::fstest
