// The namespace through the C API: mkdir/rmdir, unlink, link, symlinks and
// path resolution, name limits, rename in all its forms, attributes, and
// directory link counts. Most sequences are run on Linux (tmpfs) too and
// must give the same results and errno.
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include "api/api_util.h"

namespace mapfs::apitest {
namespace {

class NamespaceTest : public ApiTest {};

// ---------------------------------------------------------------------------
// mkdir / rmdir / unlink

TEST_F(NamespaceTest, MkdirRmdirLikeLinux) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    r.mkdir("/a", 0750);
    r.stat("/a");
    r.mkdir("/a", 0755);
    r.mkdir("/a/b/c", 0755);
    r.mkdir("/a/b", 0700);
    r.nlink("/a");
    r.rmdir("/a");
    r.unlink("/a");
    r.unlink("/a/b");
    r.rmdir("/a/b/");  // a trailing slash names the directory
    r.nlink("/a");
    r.mkdir("/d/", 0755);  // and may end a new directory's name
    r.stat("/d");
    r.mkdir("/d//e//", 0755);
    r.stat("/d/e");
    r.rmdir("/d/e/.");
    r.rmdir("/d/e/..");
    r.rmdir("/d/.");
    r.rmdir("/missing");
    r.rmdir("/missing/x");
    int fd = r.open("/f", O_CREAT | O_WRONLY, 0644);
    r.close(fd);
    r.mkdir("/f", 0755);
    r.mkdir("/f/", 0755);
    r.mkdir("/f/x", 0755);
    r.rmdir("/f");
    r.rmdir("/f/");
    r.unlink("/f/");
    r.unlink("/missing");
    r.unlink("/d/");
    r.unlink("/d/e");
    r.rmdir("/d/e");
    r.rmdir("/d");
    r.list("/");
    r.unlink("/f");
    r.list("/");
    // Symlinks are not directories for rmdir, and unlink removes the link.
    r.mkdir("/t", 0755);
    r.symlink("t", "/lt");
    r.rmdir("/lt");
    r.rmdir("/lt/");
    r.unlink("/lt");
    r.stat("/t");
    r.lstat("/lt");
  });
}

// rmdir of the root is EBUSY on Linux (and "/." is EINVAL).
TEST_F(NamespaceTest, RmdirRootIsEbusy) {
  EXPECT_ERRNO(mapfs_rmdir(fs_, "/"), EBUSY);
  EXPECT_ERRNO(mapfs_rmdir(fs_, "/."), EINVAL);
  ASSERT_OK(mapfs_mkdir(fs_, "/a", 0755));
  EXPECT_ERRNO(mapfs_rmdir(fs_, "/a/."), EINVAL);
  EXPECT_ERRNO(mapfs_rmdir(fs_, "/a/.."), ENOTEMPTY);
  EXPECT_TRUE(Exists("/a"));
  EXPECT_ERRNO(mapfs_unlink(fs_, "/"), EISDIR);
  EXPECT_ERRNO(mapfs_mkdir(fs_, "/", 0755), EEXIST);
}

TEST_F(NamespaceTest, MkdirModeAndOwner) {
  mode_t old = umask(0);
  mapfs_refresh_credentials();  // the C API caches the umask
  EXPECT_OK(mapfs_mkdir(fs_, "/d", 0712));
  EXPECT_OK(mapfs_mkdir(fs_, "/s", 01777));
  umask(old);
  mapfs_refresh_credentials();
  struct stat st = Stat("/d");
  EXPECT_EQ(st.st_mode, S_IFDIR | 0712);
  EXPECT_EQ(Stat("/s").st_mode, S_IFDIR | 01777);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_gid, getegid());
  EXPECT_EQ(st.st_nlink, 2u);
}

// ---------------------------------------------------------------------------
// link

TEST_F(NamespaceTest, HardLinksLikeLinux) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    int fd = r.open("/f", O_CREAT | O_WRONLY, 0644);
    r.write(fd, "shared");
    r.close(fd);
    r.mkdir("/d");
    r.link("/f", "/g");
    r.link("/f", "/d/h");
    r.nlink("/f");
    r.stat("/g");
    fd = r.open("/g", O_WRONLY | O_APPEND);
    r.write(fd, "+more");
    r.close(fd);
    r.cat("/f");
    r.cat("/d/h");
    r.unlink("/f");
    r.nlink("/g");
    r.cat("/g");
    r.link("/d", "/d2");  // directories: EPERM
    r.link("/g", "/d/h");  // exists
    r.link("/g", "/d");
    r.link("/missing", "/x");
    r.link("/g", "/missing/x");
    r.link("/g/", "/x");
    r.link("/g", "/x/");
    r.link("/g", "/g");
    // A link to a symlink links the symlink itself (linkat without FOLLOW).
    r.symlink("g", "/sl");
    r.link("/sl", "/sl2");
    r.lstat("/sl2");
    r.readlink("/sl2");
    r.nlink("/sl");
    r.nlink("/g");
    r.unlink("/g");
    r.unlink("/d/h");
    r.lstat("/g");
  });
}

TEST_F(NamespaceTest, LinkedFileKeepsDataUntilLastLinkGoes) {
  ASSERT_TRUE(WriteFile("/a", std::string(100000, 'a')));
  struct statvfs v0, v1;
  ASSERT_OK(mapfs_link(fs_, "/a", "/b"));
  ASSERT_OK(mapfs_unlink(fs_, "/a"));
  EXPECT_EQ(ReadAll("/b"), std::string(100000, 'a'));
  ASSERT_OK(mapfs_statvfs(fs_, &v0));
  ASSERT_OK(mapfs_unlink(fs_, "/b"));
  ASSERT_OK(mapfs_statvfs(fs_, &v1));
  EXPECT_GT(v1.f_bfree, v0.f_bfree) << "the last unlink freed nothing";
  EXPECT_GT(v1.f_ffree, v0.f_ffree - 1) << "the inode was not freed";
}

// ---------------------------------------------------------------------------
// Symbolic links and resolution.

TEST_F(NamespaceTest, SymlinksAndReadlinkLikeLinux) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    int fd = r.open("/f", O_CREAT | O_WRONLY, 0600);
    r.write(fd, "target data");
    r.close(fd);
    r.symlink("f", "/short");
    r.lstat("/short");
    r.stat("/short");
    r.readlink("/short");
    r.readlink("/short", 1);  // truncated, no NUL
    r.readlink("/short", 0);
    r.readlink("/f");
    r.readlink("/missing");
    r.readlink("/");
    r.cat("/short");
    // Inline/out-of-line boundary and long targets, up to PATH_MAX - 1.
    for (size_t n : {size_t{60}, size_t{127}, size_t{128}, size_t{129}, size_t{200}, size_t{1000}, size_t{4095}}) {
      std::string t;
      while (t.size() < n) t += "dir" + std::to_string(t.size()) + "/";
      t.resize(n);
      std::string p = "/long" + std::to_string(n);
      r.symlink(t, p.c_str());
      r.lstat(p.c_str());
      r.readlink(p.c_str());
      r.readlink(p.c_str(), n - 1);
    }
    r.symlink(std::string(4096, 'x'), "/toolong");
    r.symlink("", "/empty");
    r.symlink("f", "/short");  // exists
    r.symlink("f", "/f");
    r.symlink("f", "/nodir/x");
    r.symlink("f", "/newdir/");
    // Dangling links.
    r.symlink("nothere", "/dangle");
    r.lstat("/dangle");
    r.stat("/dangle");
    r.open("/dangle", O_RDONLY);
    r.readlink("/dangle");
    // chmod/utimens follow, lchown does not.
    r.chmod("/short", 0640);
    r.stat("/f");
    r.lstat("/short");
  });
}

TEST_F(NamespaceTest, PathResolutionThroughSymlinksLikeLinux) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    r.mkdir("/d1");
    r.mkdir("/d1/d2");
    int fd = r.open("/d1/d2/f", O_CREAT | O_WRONLY, 0644);
    r.write(fd, "deep");
    r.close(fd);
    // A link to a directory in the middle of a path.
    r.symlink("d1/d2", "/s");
    r.cat("/s/f");
    r.stat("/s");
    r.lstat("/s");
    r.lstat("/s/");  // a trailing slash follows the link
    r.stat("/s/f");
    r.list("/s");
    r.list("/s/");
    // Relative targets are relative to the link's directory, ".." included.
    r.symlink("../d1/d2", "/d1/up");
    r.cat("/d1/up/f");
    r.symlink("..", "/d1/d2/parent");
    r.stat("/d1/d2/parent/d2/f");
    r.symlink("./d2/../d2/./f", "/d1/dots");
    r.cat("/d1/dots");
    // Chains.
    r.symlink("s", "/c1");
    r.symlink("c1", "/c2");
    r.symlink("c2/f", "/c3");
    r.cat("/c3");
    fd = r.open("/c2/new", O_CREAT | O_WRONLY, 0644);  // creating through a link
    r.close(fd);
    r.stat("/d1/d2/new");
    r.mkdir("/c2/sub");
    r.stat("/d1/d2/sub");
    // Through a file: ENOTDIR.
    r.symlink("d1/d2/f", "/lf");
    r.stat("/lf/x");
    r.stat("/lf/");
    // Loops.
    r.symlink("l2", "/l1");
    r.symlink("l1", "/l2");
    r.symlink("self", "/self");
    r.stat("/l1");
    r.stat("/self");
    r.lstat("/self");
    r.open("/l1", O_RDONLY);
    r.open("/l1", O_CREAT | O_WRONLY, 0644);
    r.stat("/l1/x");
    r.mkdir("/l1/x");
    r.readlink("/l1");
    r.unlink("/l1");
    // Chains of 40 links resolve; 41 is ELOOP.
    fd = r.open("/end", O_CREAT | O_WRONLY, 0644);
    r.close(fd);
    r.symlink("end", "/k0");
    for (int i = 1; i <= 41; i++) {
      std::string t = "k" + std::to_string(i - 1), p = "/k" + std::to_string(i);
      r.symlink(t, p.c_str());
    }
    r.stat("/k39");  // 40 links
    r.stat("/k40");  // 41 links
    r.stat("/k41");
    r.lstat("/k41");
    // ".." of a link's target directory, not of the link's directory.
    r.stat("/s/..");
    r.stat("/s/../d2/f");
    r.stat("/d1/d2/../../d1/./d2//f");
  });
}

TEST_F(NamespaceTest, AbsoluteSymlinkTargets) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d1", 0755));
  ASSERT_OK(mapfs_mkdir(fs_, "/d1/d2", 0755));
  ASSERT_TRUE(WriteFile("/d1/d2/f", "abs"));
  ASSERT_OK(mapfs_symlink(fs_, "/d1/d2", "/d1/abs"));
  EXPECT_EQ(ReadAll("/d1/abs/f"), "abs");
  ASSERT_OK(mapfs_symlink(fs_, "/d1/abs/f", "/d1/d2/absf"));
  EXPECT_EQ(ReadAll("/d1/d2/absf"), "abs");
  ASSERT_OK(mapfs_symlink(fs_, "/", "/root"));
  EXPECT_EQ(ReadAll("/root/root/root/d1/d2/f"), "abs");
  ASSERT_OK(mapfs_symlink(fs_, "/d1/abs/../d2/f", "/dotdot"));
  EXPECT_EQ(ReadAll("/dotdot"), "abs");
  char buf[64];
  ssize_t n = mapfs_readlink(fs_, "/d1/abs", buf, sizeof buf);
  ASSERT_EQ(n, 6);
  EXPECT_EQ(std::string(buf, 6), "/d1/d2");
  // Relative paths are taken from the root.
  EXPECT_EQ(ReadAll("d1/abs/f"), "abs");
  ASSERT_OK(mapfs_symlink(fs_, "/nowhere/x", "/dangling"));
  struct stat st;
  EXPECT_ERRNO(mapfs_stat(fs_, "/dangling", &st), ENOENT);
  EXPECT_ERRNO(mapfs_open(fs_, "/dangling", O_CREAT | O_WRONLY, 0644), ENOENT);
}

TEST_F(NamespaceTest, DotDotAtRootStaysAtRoot) {
  ASSERT_OK(mapfs_mkdir(fs_, "/a", 0755));
  ASSERT_TRUE(WriteFile("/a/f", "x"));
  struct stat root = Stat("/");
  EXPECT_TRUE(S_ISDIR(root.st_mode));
  for (const char* p : {"/..", "/../..", "/../../.", "..", "/a/../..", "/./../a/.."}) {
    struct stat st = Stat(p);
    EXPECT_EQ(st.st_ino, root.st_ino) << p;
  }
  EXPECT_EQ(ReadAll("/../../a/f"), "x");
  EXPECT_EQ(ReadAll("/a/../../../a/./f"), "x");
  ASSERT_OK(mapfs_symlink(fs_, "../../../a", "/a/up"));
  EXPECT_EQ(ReadAll("/a/up/f"), "x");
  // ".." in a listing of the root is the root.
  mapfs_dir_t* d = mapfs_opendir(fs_, "/");
  ASSERT_NE(d, nullptr);
  bool seen = false;
  while (struct dirent* e = mapfs_readdir(d))
    if (std::string(e->d_name) == "..") {
      seen = true;
      EXPECT_EQ(e->d_ino, root.st_ino);
    }
  EXPECT_TRUE(seen);
  mapfs_closedir(d);
}

TEST_F(NamespaceTest, TrailingSlashesLikeLinux) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    int fd = r.open("/file", O_CREAT | O_WRONLY, 0644);
    r.close(fd);
    r.mkdir("/dir");
    r.open("/file/", O_RDONLY);
    r.stat("/file/");
    r.lstat("/file/");
    r.stat("/dir/");
    r.stat("/dir//");
    r.stat("//dir");
    r.unlink("/file/");
    r.truncate("/file/", 0);
    r.chmod("/file/", 0600);
    r.rename("/file", "/other/");
    r.rename("/file/", "/other");
    r.rename("/dir/", "/dir2/");
    r.stat("/dir2");
    r.rename("/dir2", "/dir3//");
    r.stat("/dir3");
    r.link("/file", "/lnk/");
    r.symlink("file", "/sym/");
    r.mkdir("/newdir/");
    r.rmdir("/newdir/");
    r.list("/");
  });
}

// Linux: a 256-byte component is ENAMETOOLONG, so is a path of 4096 bytes
// or more (PATH_MAX counts the NUL); 255 and 4095 are fine.
TEST_F(NamespaceTest, NameAndPathLengthLimits) {
  std::string n255(255, 'n'), n256(256, 'n');
  std::string p255 = "/" + n255, p256 = "/" + n256;
  ASSERT_FD(fd, mapfs_open(fs_, p255.c_str(), O_CREAT | O_WRONLY, 0644));
  EXPECT_OK(mapfs_close(fs_, fd));
  EXPECT_OK(mapfs_mkdir(fs_, ("/d" + std::string(254, 'd')).c_str(), 0755));
  EXPECT_ERRNO(mapfs_open(fs_, p256.c_str(), O_CREAT | O_WRONLY, 0644), ENAMETOOLONG);
  EXPECT_ERRNO(mapfs_open(fs_, p256.c_str(), O_RDONLY), ENAMETOOLONG);
  EXPECT_ERRNO(mapfs_mkdir(fs_, p256.c_str(), 0755), ENAMETOOLONG);
  struct stat st;
  EXPECT_ERRNO(mapfs_stat(fs_, p256.c_str(), &st), ENAMETOOLONG);
  EXPECT_ERRNO(mapfs_stat(fs_, (p256 + "/x").c_str(), &st), ENAMETOOLONG);
  EXPECT_ERRNO(mapfs_symlink(fs_, "x", p256.c_str()), ENAMETOOLONG);
  EXPECT_ERRNO(mapfs_link(fs_, p255.c_str(), p256.c_str()), ENAMETOOLONG);
  EXPECT_ERRNO(mapfs_rename(fs_, p255.c_str(), p256.c_str()), ENAMETOOLONG);
  EXPECT_ERRNO(mapfs_unlink(fs_, p256.c_str()), ENAMETOOLONG);
  EXPECT_TRUE(Exists(p255.c_str()));
  // A 255-byte name is listed whole.
  mapfs_dir_t* d = mapfs_opendir(fs_, "/");
  ASSERT_NE(d, nullptr);
  int found = 0;
  while (struct dirent* e = mapfs_readdir(d)) found += std::string(e->d_name) == n255;
  mapfs_closedir(d);
  EXPECT_EQ(found, 1);
  // Paths: "/" repeated resolves to the root; 4095 bytes is fine, 4096 is not.
  EXPECT_OK(mapfs_stat(fs_, std::string(4095, '/').c_str(), &st));
  EXPECT_ERRNO(mapfs_stat(fs_, std::string(4096, '/').c_str(), &st), ENAMETOOLONG);
  std::string deep;  // a real 4095-byte path through nested directories
  while (deep.size() + 101 < 4000) {
    deep += "/" + std::string(100, 'x');
    ASSERT_OK(mapfs_mkdir(fs_, deep.c_str(), 0755)) << deep.size();
  }
  std::string f4095 = deep + "/" + std::string(4095 - deep.size() - 1, 'f');
  ASSERT_EQ(f4095.size(), 4095u);
  ASSERT_FD(fd2, mapfs_open(fs_, f4095.c_str(), O_CREAT | O_WRONLY, 0644));
  EXPECT_OK(mapfs_close(fs_, fd2));
  EXPECT_OK(mapfs_stat(fs_, f4095.c_str(), &st));
  std::string f4096 = f4095 + "g";
  EXPECT_ERRNO(mapfs_open(fs_, f4096.c_str(), O_CREAT | O_WRONLY, 0644), ENAMETOOLONG);
  EXPECT_ERRNO(mapfs_mkdir(fs_, f4096.c_str(), 0755), ENAMETOOLONG);
}

// ---------------------------------------------------------------------------
// rename

TEST_F(NamespaceTest, RenameLikeLinux) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    auto mk = [&](const char* p, const char* data) {
      int fd = r.open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
      r.write(fd, data);
      r.close(fd);
    };
    r.mkdir("/a");
    r.mkdir("/b");
    mk("/a/f", "F");
    // Same directory, across directories, and back.
    r.rename("/a/f", "/a/g");
    r.lstat("/a/f");
    r.cat("/a/g");
    r.rename("/a/g", "/b/g");
    r.list("/a");
    r.list("/b");
    r.cat("/b/g");
    r.rename("/b/g", "/a/f");
    // Over an existing file: the old one is gone, its open descriptor still works.
    mk("/b/old", "OLD");
    int keep = r.open("/b/old", O_RDWR);
    r.rename("/a/f", "/b/old");
    r.cat("/b/old");
    r.lstat("/a/f");
    r.pread(keep, 10, 0);
    r.pwrite(keep, "old2", 0);
    r.fstat(keep);
    r.cat("/b/old");
    r.close(keep);
    // Directories: over an empty directory, not over a non-empty one.
    r.mkdir("/a/d1");
    r.mkdir("/a/d1/inner");
    r.mkdir("/b/empty");
    r.mkdir("/b/full");
    mk("/b/full/x", "x");
    r.nlink("/a");
    r.nlink("/b");
    r.rename("/a/d1", "/b/full");
    r.rename("/a/d1", "/b/empty");
    r.nlink("/a");
    r.nlink("/b");
    r.nlink("/b/empty");
    r.list("/b/empty");
    r.lstat("/a/d1");
    // File over directory and directory over file.
    mk("/a/file", "file");
    r.rename("/a/file", "/b/full");
    r.rename("/b/full", "/a/file");
    r.rename("/a/file", "/b/empty/");
    // Into its own subtree.
    r.rename("/b/empty", "/b/empty/inner/x");
    r.rename("/b", "/b/full/x2");
    r.rename("/b", "/b/empty/inner");
    // Renaming onto itself is a no-op.
    r.rename("/a/file", "/a/file");
    r.rename("/b/full", "/b/full");
    r.cat("/a/file");
    // Missing source or target directory.
    r.rename("/a/missing", "/a/x");
    r.rename("/a/file", "/missing/x");
    r.rename("/a/file", "/a/file/x");
    // Flags.
    mk("/a/n1", "n1");
    mk("/a/n2", "n2");
    r.rename("/a/n1", "/a/n2", RENAME_NOREPLACE);
    r.rename("/a/n1", "/a/n3", RENAME_NOREPLACE);
    r.cat("/a/n3");
    r.rename("/a/n3", "/a/n2", RENAME_NOREPLACE | RENAME_EXCHANGE);
    r.rename("/a/n3", "/a/n2", 0x100);
    r.rename("/a/n3", "/a/missing", RENAME_EXCHANGE);
    r.list("/a");
    r.list("/b");
  });
}

TEST_F(NamespaceTest, RenameExchangeLikeLinux) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    auto mk = [&](const char* p, const char* data) {
      int fd = r.open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
      r.write(fd, data);
      r.close(fd);
    };
    r.mkdir("/p");
    r.mkdir("/q");
    mk("/p/x", "X");
    mk("/p/y", "Y");
    r.rename("/p/x", "/p/y", RENAME_EXCHANGE);
    r.cat("/p/x");
    r.cat("/p/y");
    // file <-> directory across directories: parents' link counts follow.
    r.mkdir("/q/dir");
    mk("/q/dir/inside", "in");
    r.nlink("/p");
    r.nlink("/q");
    r.rename("/p/x", "/q/dir", RENAME_EXCHANGE);
    r.lstat("/p/x");
    r.lstat("/q/dir");
    r.cat("/p/x/inside");
    r.cat("/q/dir");
    r.nlink("/p");
    r.nlink("/q");
    r.stat("/p/x/..");  // the moved directory's ".." is its new parent
    r.lstat("/p/x/../y");
    // directory <-> directory across directories.
    r.mkdir("/q/other");
    r.rename("/p/x", "/q/other", RENAME_EXCHANGE);
    r.list("/p");
    r.list("/q");
    r.cat("/q/other/inside");
    r.nlink("/p");
    r.nlink("/q");
    // A directory with its own descendant: EINVAL.
    r.mkdir("/q/other/sub");
    r.rename("/q/other", "/q/other/sub", RENAME_EXCHANGE);
    r.rename("/q/other/sub", "/q/other", RENAME_EXCHANGE);
    // Exchange with itself.
    r.rename("/p/y", "/p/y", RENAME_EXCHANGE);
    r.cat("/p/y");
    // Symlinks are exchanged, not followed.
    r.symlink("y", "/p/ly");
    r.rename("/p/ly", "/q/dir", RENAME_EXCHANGE);
    r.lstat("/p/ly");
    r.readlink("/q/dir");
  });
}

TEST_F(NamespaceTest, RenameOfHardLinkOntoSiblingIsNoOp) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    int fd = r.open("/f", O_CREAT | O_WRONLY, 0644);
    r.write(fd, "one file");
    r.close(fd);
    r.link("/f", "/g");
    r.rename("/f", "/g");
    r.nlink("/f");
    r.nlink("/g");
    r.cat("/f");
    r.cat("/g");
    r.list("/");
    r.rename("/f", "/g", RENAME_NOREPLACE);
    r.rename("/f", "/g", RENAME_EXCHANGE);
    r.list("/");
  });
}

// Linux: rename whose last component is "." or ".." is EBUSY (EEXIST with
// RENAME_NOREPLACE on the target side).
TEST_F(NamespaceTest, RenameOfDotIsEbusy) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    r.mkdir("/a");
    r.mkdir("/a/b");
    r.rename("/a/b/.", "/c");
    r.rename("/a/b/..", "/c");
    r.rename("/a/b", "/a/.");
    r.rename("/a/b", "/a/..");
    r.list("/a");
  });
}

TEST_F(NamespaceTest, RenameRootIsRefused) {
  ASSERT_OK(mapfs_mkdir(fs_, "/a", 0755));
  EXPECT_ERRNO(mapfs_rename(fs_, "/", "/a/x"), EBUSY);
  EXPECT_EQ(mapfs_rename(fs_, "/a", "/"), -1);
  EXPECT_TRUE(Exists("/a"));
}

TEST_F(NamespaceTest, RenameReplacingOpenFileFreesItAtClose) {
  ASSERT_TRUE(WriteFile("/victim", std::string(4 * kMiB, 'v')));
  ASSERT_TRUE(WriteFile("/new", "new"));
  ASSERT_FD(fd, mapfs_open(fs_, "/victim", O_RDONLY));
  struct statvfs v0, v1;
  ASSERT_OK(mapfs_rename(fs_, "/new", "/victim"));
  EXPECT_EQ(Fstat(fd).st_nlink, 0u);
  EXPECT_EQ(Fstat(fd).st_size, static_cast<off_t>(4 * kMiB));
  ASSERT_OK(mapfs_statvfs(fs_, &v0));
  char c;
  EXPECT_EQ(mapfs_pread(fs_, fd, &c, 1, 4 * kMiB - 1), 1);
  EXPECT_EQ(c, 'v');
  ASSERT_OK(mapfs_close(fs_, fd));
  ASSERT_OK(mapfs_statvfs(fs_, &v1));
  EXPECT_GE((v1.f_bfree - v0.f_bfree) * v1.f_frsize, 3 * kMiB) << "space not freed at the last close";
  EXPECT_EQ(ReadAll("/victim"), "new");
}

// ---------------------------------------------------------------------------
// Attributes.

TEST_F(NamespaceTest, ChmodChownUtimensLikeLinux) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    int fd = r.open("/f", O_CREAT | O_WRONLY, 0644);
    r.chmod("/f", 0600);
    r.stat("/f");
    r.chmod("/f", 07777);
    r.stat("/f");
    r.chmod("/f", 0100644);  // the type bits are not changed
    r.stat("/f");
    r.fchmod(fd, 0640);
    r.fstat(fd);
    r.mkdir("/d", 0755);
    r.chmod("/d", 0700);
    r.stat("/d");
    r.chmod("/missing", 0600);
    // chown (the tests run as root).
    r.chown("/f", 1234, 5678);
    r.stat("/f");
    r.chown("/f", static_cast<uid_t>(-1), 42);
    r.stat("/f");
    r.chown("/f", 99, static_cast<gid_t>(-1));
    r.stat("/f");
    r.symlink("f", "/l");
    r.chown("/l", 7, 8);  // follows
    r.stat("/f");
    r.lstat("/l");
    r.lchown("/l", 9, 10);  // the link itself
    r.lstat("/l");
    r.stat("/f");
    r.chmod("/l", 0604);  // follows
    r.stat("/f");
    // utimens: explicit, UTIME_OMIT, nanoseconds kept, links followed or not.
    struct timespec t1[2] = {{1000000, 123456789}, {2000000, 987654321}};
    r.utimens("/f", t1);
    r.times("/f");
    struct timespec t2[2] = {{5, UTIME_OMIT}, {3000000, 1}};
    r.utimens("/f", t2);
    r.times("/f");
    struct timespec t3[2] = {{4000000, 0}, {0, UTIME_OMIT}};
    r.utimens("/f", t3);
    r.times("/f");
    struct timespec omit[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
    r.utimens("/f", omit);
    r.times("/f");
    struct timespec bad[2] = {{0, 1000000000}, {0, 0}};
    r.utimens("/f", bad);
    struct timespec neg[2] = {{0, -5}, {0, 0}};
    r.utimens("/f", neg);
    r.times("/f");
    struct timespec t4[2] = {{111, 0}, {222, 0}};
    r.utimens("/l", t4);
    r.times("/f");
    struct timespec t5[2] = {{333, 0}, {444, 0}};
    r.utimens("/l", t5, false);
    r.times("/l");
    r.times("/f");
    r.utimens("/missing", t5);
    r.utimens("/d", t5);
    r.times("/d");
    r.close(fd);
  });
}

TEST_F(NamespaceTest, UtimensNowAndCtime) {
  ASSERT_TRUE(WriteFile("/f", "x"));
  struct timespec old[2] = {{1000, 0}, {2000, 0}};
  ASSERT_OK(mapfs_utimens(fs_, "/f", old));
  struct stat st0 = Stat("/f");
  time_t before = time(nullptr);
  struct timespec now_mtime[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  ASSERT_OK(mapfs_utimens(fs_, "/f", now_mtime));
  struct stat st = Stat("/f");
  EXPECT_EQ(st.st_atim.tv_sec, 1000);
  EXPECT_GE(st.st_mtim.tv_sec, before);
  // time() reads the tick-updated (coarse) clock, which can still show the
  // last second for a few ms after mapfs's CLOCK_REALTIME stamp moved on.
  struct timespec after;
  clock_gettime(CLOCK_REALTIME, &after);
  EXPECT_LE(st.st_mtim.tv_sec, after.tv_sec);
  EXPECT_GE(st.st_ctim.tv_sec, before);
  ASSERT_OK(mapfs_utimens(fs_, "/f", nullptr));
  st = Stat("/f");
  EXPECT_GE(st.st_atim.tv_sec, before);
  EXPECT_GE(st.st_mtim.tv_sec, before);
  // chmod and chown move ctime, not mtime.
  ASSERT_OK(mapfs_utimens(fs_, "/f", old));
  ASSERT_OK(mapfs_chmod(fs_, "/f", 0600));
  st = Stat("/f");
  EXPECT_EQ(st.st_mtim.tv_sec, 2000);
  EXPECT_GE(st.st_ctim.tv_sec, before);
  (void)st0;
}

// Linux: utimensat with both times UTIME_OMIT changes nothing, ctime included.
TEST_F(NamespaceTest, UtimensBothOmitLeavesCtime) {
  ASSERT_TRUE(WriteFile("/f", "x"));
  struct stat st0 = Stat("/f");
  usleep(20000);
  struct timespec omit[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
  ASSERT_OK(mapfs_utimens(fs_, "/f", omit));
  struct stat st = Stat("/f");
  EXPECT_EQ(st.st_ctim.tv_sec, st0.st_ctim.tv_sec);
  EXPECT_EQ(st.st_ctim.tv_nsec, st0.st_ctim.tv_nsec);
}

// ---------------------------------------------------------------------------
// Directory link counts: 2 + subdirectories.

TEST_F(NamespaceTest, DirectoryLinkCountsLikeLinux) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    r.nlink("/");
    r.mkdir("/a");
    r.mkdir("/b");
    r.nlink("/");
    r.nlink("/a");
    r.mkdir("/a/x");
    r.mkdir("/a/y");
    int fd = r.open("/a/file", O_CREAT | O_WRONLY, 0644);  // files do not count
    r.close(fd);
    r.nlink("/a");
    r.rename("/a/x", "/b/x");
    r.nlink("/a");
    r.nlink("/b");
    r.rename("/b/x", "/b/x2");
    r.nlink("/b");
    r.rename("/a/y", "/b/x2");  // replaces an empty directory
    r.nlink("/a");
    r.nlink("/b");
    r.rename("/a/file", "/b/file");
    r.nlink("/a");
    r.nlink("/b");
    r.rmdir("/b/x2");
    r.nlink("/b");
    r.mkdir("/b/m");
    r.rename("/b", "/a/b");
    r.nlink("/");
    r.nlink("/a");
    r.nlink("/a/b");
    r.rmdir("/a/b/m");
    r.unlink("/a/b/file");
    r.rmdir("/a/b");
    r.nlink("/a");
    r.rmdir("/a");
    r.nlink("/");
  });
}

// The namespace survives a remount exactly (ino numbers included).
TEST_F(NamespaceTest, TreeSurvivesRemount) {
  ASSERT_OK(mapfs_mkdir(fs_, "/a", 0755));
  ASSERT_OK(mapfs_mkdir(fs_, "/a/b", 0700));
  ASSERT_TRUE(WriteFile("/a/b/f", "data"));
  ASSERT_OK(mapfs_link(fs_, "/a/b/f", "/a/g"));
  ASSERT_OK(mapfs_symlink(fs_, "b/f", "/a/l"));
  ASSERT_OK(mapfs_rename(fs_, "/a/b", "/c"));
  ASSERT_OK(mapfs_chown(fs_, "/a/g", 5, 6));
  struct stat a = Stat("/a"), c = Stat("/c"), g = Stat("/a/g");
  Remount();
  struct stat a2 = Stat("/a"), c2 = Stat("/c"), g2 = Stat("/a/g");
  EXPECT_EQ(a.st_ino, a2.st_ino);
  EXPECT_EQ(a.st_nlink, a2.st_nlink);
  EXPECT_EQ(c.st_ino, c2.st_ino);
  EXPECT_EQ(c2.st_mode, S_IFDIR | 0700);
  EXPECT_EQ(g2.st_nlink, 2u);
  EXPECT_EQ(g2.st_uid, 5u);
  EXPECT_EQ(g2.st_gid, 6u);
  EXPECT_EQ(g.st_mtim.tv_nsec, g2.st_mtim.tv_nsec);
  EXPECT_EQ(ReadAll("/c/f"), "data");
  EXPECT_EQ(ReadAll("/a/g"), "data");
  struct stat l;
  EXPECT_ERRNO(mapfs_stat(fs_, "/a/l", &l), ENOENT);  // b moved away
  EXPECT_OK(mapfs_lstat(fs_, "/a/l", &l));
}

// st_dev is one device per pool, kept across mounts, and shaped like the
// kernel's anonymous devices: makedev(major(d), minor(d)) == d, major 0,
// a 20-bit minor (it was a 63-bit slice of the UUID, which no dev_t pair
// could hold; tar, rsync and statx store the pair).
TEST_F(NamespaceTest, StDevRoundTripsAndStaysPerPool) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  struct stat a, b;
  ASSERT_OK(mapfs_stat(fs_, "/", &a));
  ASSERT_OK(mapfs_stat(fs_, "/d", &b));
  EXPECT_EQ(a.st_dev, b.st_dev);
  EXPECT_EQ(makedev(major(a.st_dev), minor(a.st_dev)), a.st_dev);
  EXPECT_EQ(major(a.st_dev), 0u);
  EXPECT_LT(minor(a.st_dev), 1u << 20);
  struct statvfs v;
  ASSERT_OK(mapfs_statvfs(fs_, &v));
  EXPECT_EQ(v.f_fsid, a.st_dev);
  Remount();
  ASSERT_OK(mapfs_stat(fs_, "/d", &b));
  EXPECT_EQ(b.st_dev, a.st_dev);
}

}  // namespace
}  // namespace mapfs::apitest
