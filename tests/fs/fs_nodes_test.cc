// Special nodes and the owner of new inodes, in the core (fs::FileSystem):
//  - Mknod records FIFOs, sockets and character/block devices (type, mode,
//    st_rdev for devices), lists them with their type, links, renames and
//    unlinks them like any name; they survive a remount and fsck is clean.
//    Open of one fails with ENXIO (nothing in the core can serve it); a
//    directory or symlink type is EINVAL; an existing name is EEXIST.
//  - Mknod of S_IFREG (or no type) makes an empty regular file.
//  - An Owner given to Open(O_CREAT)/Mkdir/Symlink/Mknod is the new inode's
//    uid and gid from its creation on (the FUSE mount creates on behalf of
//    the requesting user in one transaction); without one, the process's
//    effective ids.
//  - In a set-group-ID directory, new inodes take the directory's group and
//    new directories its set-group-ID bit (as Linux).
#include <fcntl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <map>
#include <string>

#include "fs_test_util.h"

namespace mapfs::fstest {
namespace {

class FsNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pool_.error(), "");
    auto m = fs::FileSystem::Mount(pool_.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    fs_ = std::move(*m);
  }
  void Remount() {
    ASSERT_TRUE(fs_->Unmount().ok());
    fs_.reset();
    auto m = fs::FileSystem::Mount(pool_.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    fs_ = std::move(*m);
  }
  std::vector<std::string> Fsck() {
    EXPECT_TRUE(fs_->Unmount().ok());
    fs_.reset();
    return CheckPool(pool_.path());
  }
  struct stat Lstat(const std::string& p) {
    struct stat st {};
    Status s = fs_->Stat(p, &st, false);
    EXPECT_TRUE(s.ok()) << p << ": " << s.ToString();
    return st;
  }
  std::map<std::string, uint8_t> List(const std::string& dir) {
    std::map<std::string, uint8_t> out;
    auto d = fs_->Open(dir, O_RDONLY | O_DIRECTORY, 0);
    EXPECT_TRUE(d.ok());
    if (!d.ok()) return out;
    EXPECT_TRUE(fs_->ReadDir(**d, 0, [&](const fs::DirEntryOut& e) {
                  out[e.name] = e.type;
                  return true;
                }).ok());
    EXPECT_TRUE(fs_->Close(**d).ok());
    return out;
  }

  FsPool pool_;
  std::unique_ptr<fs::FileSystem> fs_;
};

TEST_F(FsNodes, SpecialNodesAreRecordedListedAndRemoved) {
  dev_t chr = makedev(1, 3), blk = makedev(8, 17);
  ASSERT_TRUE(fs_->Mkdir("/d", 0755).ok());
  ASSERT_TRUE(fs_->Mknod("/d/fifo", S_IFIFO | 0640, 0).ok());
  ASSERT_TRUE(fs_->Mknod("/d/sock", S_IFSOCK | 0600, 0).ok());
  ASSERT_TRUE(fs_->Mknod("/d/chr", S_IFCHR | 0666, chr).ok());
  ASSERT_TRUE(fs_->Mknod("/d/blk", S_IFBLK | 0660, blk).ok());
  ASSERT_TRUE(fs_->Mknod("/d/reg", S_IFREG | 0644, 0).ok());
  ASSERT_TRUE(fs_->Mknod("/d/notype", 0600, 0).ok());

  EXPECT_EQ(fs_->Mknod("/d/fifo", S_IFIFO | 0600, 0).code(), EEXIST);
  EXPECT_EQ(fs_->Mknod("/d/dir", S_IFDIR | 0755, 0).code(), EINVAL);
  EXPECT_EQ(fs_->Mknod("/d/lnk", S_IFLNK | 0777, 0).code(), EINVAL);
  EXPECT_EQ(fs_->Mknod("/nodir/fifo", S_IFIFO | 0600, 0).code(), ENOENT);

  for (int round = 0; round < 2; round++) {
    SCOPED_TRACE(round == 0 ? "mounted" : "after a remount");
    EXPECT_EQ(Lstat("/d/fifo").st_mode, S_IFIFO | 0640);
    EXPECT_EQ(Lstat("/d/sock").st_mode, S_IFSOCK | 0600);
    EXPECT_EQ(Lstat("/d/chr").st_mode, S_IFCHR | 0666);
    EXPECT_EQ(Lstat("/d/chr").st_rdev, chr);
    EXPECT_EQ(Lstat("/d/blk").st_mode, S_IFBLK | 0660);
    EXPECT_EQ(Lstat("/d/blk").st_rdev, blk);
    EXPECT_EQ(Lstat("/d/fifo").st_rdev, 0u);
    EXPECT_EQ(Lstat("/d/fifo").st_size, 0);
    EXPECT_EQ(Lstat("/d/reg").st_mode, S_IFREG | 0644);
    EXPECT_EQ(Lstat("/d/reg").st_size, 0);
    EXPECT_EQ(Lstat("/d/notype").st_mode, S_IFREG | 0600);
    auto l = List("/d");
    EXPECT_EQ(l["fifo"], DT_FIFO);
    EXPECT_EQ(l["sock"], DT_SOCK);
    EXPECT_EQ(l["chr"], DT_CHR);
    EXPECT_EQ(l["blk"], DT_BLK);
    EXPECT_EQ(l["reg"], DT_REG);
    if (round == 0) Remount();
  }

  // Nothing here can serve a FIFO, socket or device.
  for (const char* p : {"/d/fifo", "/d/sock", "/d/chr", "/d/blk"}) {
    EXPECT_EQ(fs_->Open(p, O_RDONLY, 0).status().code(), ENXIO) << p;
    EXPECT_EQ(fs_->Open(p, O_RDONLY | O_DIRECTORY, 0).status().code(), ENOTDIR) << p;
    EXPECT_EQ(fs_->Truncate(p, 0).code(), EINVAL) << p;
  }
  auto reg = fs_->Open("/d/reg", O_RDWR, 0);
  ASSERT_TRUE(reg.ok());
  EXPECT_TRUE(fs_->Close(**reg).ok());

  // Names of special nodes behave as any name.
  ASSERT_TRUE(fs_->Link("/d/fifo", "/d/fifo2").ok());
  EXPECT_EQ(Lstat("/d/fifo").st_nlink, 2u);
  ASSERT_TRUE(fs_->Rename("/d/chr", "/chr").ok());
  EXPECT_EQ(Lstat("/chr").st_rdev, chr);
  ASSERT_TRUE(fs_->Chmod("/d/sock", 0644, false).ok());
  EXPECT_EQ(Lstat("/d/sock").st_mode, S_IFSOCK | 0644);
  ASSERT_TRUE(fs_->Unlink("/d/fifo").ok());
  EXPECT_EQ(Lstat("/d/fifo2").st_nlink, 1u);
  ASSERT_TRUE(fs_->Unlink("/d/blk").ok());
  struct stat st;
  EXPECT_EQ(fs_->Stat("/d/blk", &st, false).code(), ENOENT);
  EXPECT_EQ(fs_->Rmdir("/d").code(), ENOTEMPTY);
  EXPECT_EQ(Fsck(), std::vector<std::string>{});
}

TEST_F(FsNodes, OwnerIsSetAtCreation) {
  fs::Owner o{4242, 4343};
  auto f = fs_->Open("/f", O_CREAT | O_EXCL | O_WRONLY, 0640, 0, &o);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(fs_->Close(**f).ok());
  ASSERT_TRUE(fs_->Mkdir("/d", 0755, 0, &o).ok());
  ASSERT_TRUE(fs_->Symlink("f", "/l", 0, &o).ok());
  ASSERT_TRUE(fs_->Mknod("/p", S_IFIFO | 0600, 0, 0, &o).ok());
  for (const char* p : {"/f", "/d", "/l", "/p"}) {
    struct stat st = Lstat(p);
    EXPECT_EQ(st.st_uid, 4242u) << p;
    EXPECT_EQ(st.st_gid, 4343u) << p;
  }
  // An existing file opened with O_CREAT keeps its owner.
  fs::Owner other{7, 8};
  f = fs_->Open("/f", O_CREAT | O_WRONLY, 0600, 0, &other);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(fs_->Close(**f).ok());
  EXPECT_EQ(Lstat("/f").st_uid, 4242u);
  // Without an owner: the process's effective ids.
  ASSERT_TRUE(fs_->Mknod("/mine", S_IFREG | 0600, 0).ok());
  EXPECT_EQ(Lstat("/mine").st_uid, geteuid());
  EXPECT_EQ(Lstat("/mine").st_gid, getegid());
  Remount();
  EXPECT_EQ(Lstat("/d").st_gid, 4343u);
  EXPECT_EQ(Fsck(), std::vector<std::string>{});
}

TEST_F(FsNodes, SetGroupIdDirectoryGivesItsGroup) {
  fs::Owner dir_owner{100, 200}, maker{300, 400};
  ASSERT_TRUE(fs_->Mkdir("/sg", 0755, 0, &dir_owner).ok());
  ASSERT_TRUE(fs_->Chmod("/sg", 02775, false).ok());
  auto f = fs_->Open("/sg/f", O_CREAT | O_EXCL | O_WRONLY, 0644, 0, &maker);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(fs_->Close(**f).ok());
  ASSERT_TRUE(fs_->Mkdir("/sg/d", 0755, 0, &maker).ok());
  ASSERT_TRUE(fs_->Symlink("f", "/sg/l", 0, &maker).ok());
  ASSERT_TRUE(fs_->Mknod("/sg/p", S_IFIFO | 0600, 0, 0, &maker).ok());
  for (const char* p : {"/sg/f", "/sg/d", "/sg/l", "/sg/p"}) {
    struct stat st = Lstat(p);
    EXPECT_EQ(st.st_uid, 300u) << p;
    EXPECT_EQ(st.st_gid, 200u) << p << ": the directory's group";
  }
  EXPECT_EQ(Lstat("/sg/d").st_mode, S_IFDIR | 02755) << "a new directory inherits set-group-ID";
  EXPECT_EQ(Lstat("/sg/f").st_mode, S_IFREG | 0644) << "a new file does not";
  // Deeper: the inherited bit passes the group on again.
  ASSERT_TRUE(fs_->Mkdir("/sg/d/e", 0700, 0, &maker).ok());
  EXPECT_EQ(Lstat("/sg/d/e").st_gid, 200u);
  EXPECT_EQ(Lstat("/sg/d/e").st_mode, S_IFDIR | 02700);
  // Without the bit, the maker's group.
  ASSERT_TRUE(fs_->Mkdir("/plain", 0755, 0, &dir_owner).ok());
  ASSERT_TRUE(fs_->Mkdir("/plain/d", 0755, 0, &maker).ok());
  EXPECT_EQ(Lstat("/plain/d").st_gid, 400u);
  EXPECT_EQ(Lstat("/plain/d").st_mode, S_IFDIR | 0755);
  EXPECT_EQ(Fsck(), std::vector<std::string>{});
}

}  // namespace
}  // namespace mapfs::fstest
