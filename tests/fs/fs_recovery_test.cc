// What survives an unmount, a process crash, and damage:
//  - RemountKeeps: every kind of operation (create, writes of each mode,
//    append, truncate, fallocate, each kind of rename, link, symlink,
//    unlink, mkdir, rmdir, chmod, chown, utimens), then unmount and mount
//    again: the exact state is still there (bytes, sizes, modes, link
//    counts, times), and fsck finds nothing;
//  - Crash: a child process mounts, works and dies without unmounting
//    (_exit, or SIGKILL at random moments); the next mount recovers, fsck
//    is clean, everything the child reported done (after fsync) is there
//    byte for byte, and the one operation in flight is either done or not
//    (atomically where the mode promises it);
//  - a file unlinked while open in a process that died is reclaimed at the
//    next exclusive open;
//  - Fsck: damage made by hand (wrong link count, a leaked inode bit, an
//    entry naming a free inode, an inode in no directory) is reported with
//    its location, repaired with a word on what was done, and the file
//    system is usable afterwards.
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <poll.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dir/cib.h"
#include "fs_test_util.h"
#include "medium/persist.h"
#include "meta/fs_format.h"
#include "meta/inode_table.h"
#include "meta/meta_tx.h"
#include "vm/vm.h"

namespace mapfs::fstest {
namespace {

// ------------------------------------------------------------------ helpers

std::string Pat(uint64_t tag, size_t n, uint64_t from = 0) {
  std::string s(n, '\0');
  FillPattern(s.data(), n, tag, from);
  return s;
}
// `s` with `data` written at `off` (zeros fill a gap), as a write does.
std::string Overlay(std::string s, uint64_t off, const std::string& data) {
  if (s.size() < off + data.size()) s.resize(off + data.size(), '\0');
  s.replace(off, data.size(), data);
  return s;
}
std::string Resized(std::string s, size_t n) {
  s.resize(n, '\0');
  return s;
}

// Where two contents first differ (for messages).
std::string Diff(const std::string& got, const std::string& want) {
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) i++;
  return "size " + std::to_string(got.size()) + " (want " + std::to_string(want.size()) + "), first difference at " +
         std::to_string(i);
}

void Put(mapfs_t* fs, const std::string& p, const std::string& content, mode_t mode = 0644) {
  int fd = mapfs_open(fs, p.c_str(), O_CREAT | O_TRUNC | O_WRONLY, mode);
  ASSERT_GE(fd, 0) << p << ": " << mapfs_last_error();
  ASSERT_TRUE(WriteAll(fs, fd, content.data(), content.size(), 0)) << p << ": " << mapfs_last_error();
  ASSERT_EQ(mapfs_close(fs, fd), 0);
}

struct stat Lstat(mapfs_t* fs, const std::string& p) {
  struct stat st{};
  EXPECT_EQ(mapfs_lstat(fs, p.c_str(), &st), 0) << p << ": " << ErrName(errno) << " " << mapfs_last_error();
  return st;
}

void ExpectFile(mapfs_t* fs, const std::string& p, const std::string& content, mode_t perm = 0644,
                nlink_t nlink = 1) {
  struct stat st{};
  ASSERT_EQ(mapfs_lstat(fs, p.c_str(), &st), 0) << p << ": " << ErrName(errno) << " " << mapfs_last_error();
  EXPECT_TRUE(S_ISREG(st.st_mode)) << p;
  EXPECT_EQ(st.st_mode & 07777, perm) << p;
  EXPECT_EQ(st.st_nlink, nlink) << p;
  EXPECT_EQ(st.st_size, static_cast<off_t>(content.size())) << p;
  std::string got;
  ASSERT_TRUE(ReadFile(fs, p, &got)) << p << ": " << mapfs_last_error();
  EXPECT_TRUE(got == content) << p << ": " << Diff(got, content);
}
void ExpectDir(mapfs_t* fs, const std::string& p, mode_t perm, nlink_t nlink, std::vector<std::string> names) {
  struct stat st{};
  ASSERT_EQ(mapfs_lstat(fs, p.c_str(), &st), 0) << p << ": " << mapfs_last_error();
  EXPECT_TRUE(S_ISDIR(st.st_mode)) << p;
  EXPECT_EQ(st.st_mode & 07777, perm) << p;
  EXPECT_EQ(st.st_nlink, nlink) << p;
  std::vector<std::string> got;
  ASSERT_EQ(ListDir(fs, p, &got), 0) << p;
  std::sort(got.begin(), got.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(got, names) << p;
}
void ExpectAbsent(mapfs_t* fs, const std::string& p) {
  struct stat st{};
  EXPECT_EQ(mapfs_lstat(fs, p.c_str(), &st), -1) << p << " exists";
  EXPECT_EQ(errno, ENOENT) << p;
}
uint64_t InoOf(mapfs_t* fs, const std::string& p) { return Lstat(fs, p).st_ino; }
uint64_t Used(mapfs_t* fs) {
  struct statvfs sv{};
  EXPECT_EQ(mapfs_statvfs(fs, &sv), 0);
  return (sv.f_blocks - sv.f_bfree) * sv.f_frsize;
}

// ------------------------------------------- a. remount after each operation

struct Ctx {
  uint64_t used = 0;                    // statvfs bytes in use, when recorded
  std::map<std::string, uint64_t> ino;  // recorded by setup or op
  std::map<std::string, struct stat> st;
};
using Step = std::function<void(mapfs_t*, Ctx&)>;
struct Case {
  std::string name;
  Step setup, op, verify;
};

Step Nothing() {
  return [](mapfs_t*, Ctx&) {};
}

// Writes: a small one (100 bytes inside, 50 past the end leaving a hole)
// and a large one (200 KiB inside: strict mode's staging path; 3 MiB past
// the end: growth), in each mode, plus a new file written by 64 KiB writes.
void AddWriteCases(std::vector<Case>* cases) {
  struct M {
    const char* name;
    int flag;
  };
  for (M m : {M{"posix", MAPFS_O_POSIX}, M{"sync", MAPFS_O_SYNCMODE}, M{"strict", MAPFS_O_STRICT}}) {
    int flag = m.flag;
    cases->push_back({std::string("write_small_") + m.name,
                      [](mapfs_t* fs, Ctx&) { Put(fs, "/f", Pat(1, 10000)); },
                      [flag](mapfs_t* fs, Ctx&) {
                        int fd = mapfs_open(fs, "/f", O_WRONLY | flag);
                        ASSERT_GE(fd, 0);
                        ASSERT_EQ(mapfs_pwrite(fs, fd, Pat(2, 100).data(), 100, 5000), 100);
                        ASSERT_EQ(mapfs_pwrite(fs, fd, Pat(3, 50).data(), 50, 12000), 50);
                        ASSERT_EQ(mapfs_close(fs, fd), 0);
                      },
                      [](mapfs_t* fs, Ctx&) {
                        ExpectFile(fs, "/f", Overlay(Overlay(Pat(1, 10000), 5000, Pat(2, 100)), 12000, Pat(3, 50)));
                      }});
    cases->push_back({std::string("write_large_") + m.name,
                      [](mapfs_t* fs, Ctx&) { Put(fs, "/f", Pat(1, 300000)); },
                      [flag](mapfs_t* fs, Ctx&) {
                        int fd = mapfs_open(fs, "/f", O_WRONLY | flag);
                        ASSERT_GE(fd, 0);
                        ASSERT_TRUE(WriteAll(fs, fd, Pat(2, 200 << 10).data(), 200 << 10, 50000));
                        ASSERT_TRUE(WriteAll(fs, fd, Pat(3, 3 << 20).data(), 3 << 20, 250000));
                        ASSERT_EQ(mapfs_close(fs, fd), 0);
                        fd = mapfs_open(fs, "/g", O_CREAT | O_EXCL | O_WRONLY | flag, 0600);
                        ASSERT_GE(fd, 0);
                        std::string g = Pat(4, 5 << 20);
                        for (size_t o = 0; o < g.size(); o += 65536)
                          ASSERT_EQ(mapfs_write(fs, fd, g.data() + o, 65536), 65536);
                        ASSERT_EQ(mapfs_close(fs, fd), 0);
                      },
                      [](mapfs_t* fs, Ctx&) {
                        ExpectFile(fs, "/f",
                                   Overlay(Overlay(Pat(1, 300000), 50000, Pat(2, 200 << 10)), 250000, Pat(3, 3 << 20)));
                        ExpectFile(fs, "/g", Pat(4, 5 << 20), 0600);
                      }});
  }
}

std::vector<Case> Cases() {
  std::vector<Case> c;
  c.push_back({"create", Nothing(),
               [](mapfs_t* fs, Ctx& x) {
                 int fd = mapfs_open(fs, "/f", O_CREAT | O_EXCL | O_WRONLY, 0640);
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(mapfs_close(fs, fd), 0);
                 ASSERT_EQ(mapfs_mkdir(fs, "/d", 0755), 0);
                 fd = mapfs_creat(fs, "/d/g", 0600);
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(mapfs_close(fs, fd), 0);
                 x.ino["/f"] = InoOf(fs, "/f");
               },
               [](mapfs_t* fs, Ctx& x) {
                 ExpectFile(fs, "/f", "", 0640);
                 ExpectFile(fs, "/d/g", "", 0600);
                 EXPECT_EQ(InoOf(fs, "/f"), x.ino["/f"]);
                 ExpectDir(fs, "/", 0755, 3, {"f", "d"});
               }});
  AddWriteCases(&c);
  c.push_back({"append", [](mapfs_t* fs, Ctx&) { Put(fs, "/f", Pat(1, 1000)); },
               [](mapfs_t* fs, Ctx&) {
                 int fd = mapfs_open(fs, "/f", O_WRONLY | O_APPEND);
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(mapfs_write(fs, fd, Pat(2, 10).data(), 10), 10);
                 ASSERT_EQ(mapfs_lseek(fs, fd, 0, SEEK_SET), 0);
                 ASSERT_EQ(mapfs_write(fs, fd, Pat(3, 5000).data(), 5000), 5000);  // still at the end
                 ASSERT_TRUE(WriteAll(fs, fd, Pat(4, 70000).data(), 70000, 0));     // pwrite on O_APPEND appends too
                 ASSERT_EQ(mapfs_close(fs, fd), 0);
               },
               [](mapfs_t* fs, Ctx&) { ExpectFile(fs, "/f", Pat(1, 1000) + Pat(2, 10) + Pat(3, 5000) + Pat(4, 70000)); }});
  c.push_back({"truncate_up",
               [](mapfs_t* fs, Ctx&) {
                 Put(fs, "/f", Pat(1, 5000));
                 Put(fs, "/g", Pat(2, 100));
               },
               [](mapfs_t* fs, Ctx&) {
                 int fd = mapfs_open(fs, "/f", O_WRONLY);
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(mapfs_ftruncate(fs, fd, 20000), 0);
                 ASSERT_EQ(mapfs_close(fs, fd), 0);
                 ASSERT_EQ(mapfs_truncate(fs, "/g", 3 << 20), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectFile(fs, "/f", Resized(Pat(1, 5000), 20000));
                 ExpectFile(fs, "/g", Resized(Pat(2, 100), 3 << 20));
               }});
  c.push_back({"truncate_down",
               [](mapfs_t* fs, Ctx&) {
                 Put(fs, "/f", Pat(1, 300000));
                 Put(fs, "/g", Pat(2, 3 << 20));
               },
               [](mapfs_t* fs, Ctx&) {
                 int fd = mapfs_open(fs, "/f", O_WRONLY);
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(mapfs_ftruncate(fs, fd, 1234), 0);
                 ASSERT_EQ(mapfs_close(fs, fd), 0);
                 ASSERT_EQ(mapfs_truncate(fs, "/g", 0), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectFile(fs, "/f", Pat(1, 1234));
                 ExpectFile(fs, "/g", "");
               }});
  // Down then up again: the cut bytes must not come back.
  c.push_back({"truncate_down_up", [](mapfs_t* fs, Ctx&) { Put(fs, "/f", Pat(1, 300000)); },
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_truncate(fs, "/f", 1234), 0);
                 ASSERT_EQ(mapfs_truncate(fs, "/f", 200000), 0);
               },
               [](mapfs_t* fs, Ctx&) { ExpectFile(fs, "/f", Resized(Pat(1, 1234), 200000)); }});
  c.push_back({"fallocate", [](mapfs_t* fs, Ctx&) { Put(fs, "/f", Pat(1, 10000)); },
               [](mapfs_t* fs, Ctx&) {
                 int fd = mapfs_open(fs, "/f", O_WRONLY);
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(mapfs_fallocate(fs, fd, 0, 8000, 100000), 0) << mapfs_last_error();
                 ASSERT_EQ(mapfs_close(fs, fd), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectFile(fs, "/f", Resized(Pat(1, 10000), 108000));
                 EXPECT_GE(Lstat(fs, "/f").st_blocks * 512, 108000);
               }});
  // The preallocation beyond the end stays (statvfs; st_blocks of a file
  // in a 2 MiB+ partition counts only up to the size).
  c.push_back({"fallocate_keep_size",
               [](mapfs_t* fs, Ctx& x) {
                 Put(fs, "/f", Pat(1, 10000));
                 x.used = Used(fs);
               },
               [](mapfs_t* fs, Ctx&) {
                 int fd = mapfs_open(fs, "/f", O_WRONLY);
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(mapfs_fallocate(fs, fd, FALLOC_FL_KEEP_SIZE, 0, 1 << 20), 0) << mapfs_last_error();
                 ASSERT_EQ(mapfs_close(fs, fd), 0);
               },
               [](mapfs_t* fs, Ctx& x) {
                 ExpectFile(fs, "/f", Pat(1, 10000));
                 EXPECT_GE(Used(fs), x.used + (1 << 20) - 32768) << "the preallocation is gone";
               }});
  c.push_back({"fallocate_punch_hole", [](mapfs_t* fs, Ctx&) { Put(fs, "/f", Pat(1, 100000)); },
               [](mapfs_t* fs, Ctx&) {
                 int fd = mapfs_open(fs, "/f", O_WRONLY);
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(mapfs_fallocate(fs, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 5000, 50000), 0)
                     << mapfs_last_error();
                 ASSERT_EQ(mapfs_fallocate(fs, fd, FALLOC_FL_ZERO_RANGE, 90000, 20000), 0) << mapfs_last_error();
                 ASSERT_EQ(mapfs_close(fs, fd), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectFile(fs, "/f", Resized(Overlay(Overlay(Pat(1, 100000), 5000, std::string(50000, '\0')), 90000,
                                                      std::string(10000, '\0')),
                                              110000));
               }});
  c.push_back({"rename_plain",
               [](mapfs_t* fs, Ctx& x) {
                 Put(fs, "/a", Pat(1, 5000));
                 x.ino["/a"] = InoOf(fs, "/a");
               },
               [](mapfs_t* fs, Ctx&) { ASSERT_EQ(mapfs_rename(fs, "/a", "/b"), 0); },
               [](mapfs_t* fs, Ctx& x) {
                 ExpectAbsent(fs, "/a");
                 ExpectFile(fs, "/b", Pat(1, 5000));
                 EXPECT_EQ(InoOf(fs, "/b"), x.ino["/a"]);
               }});
  c.push_back({"rename_over_existing",
               [](mapfs_t* fs, Ctx&) {
                 Put(fs, "/a", Pat(1, 5000));
                 Put(fs, "/b", Pat(2, 7000));
                 ASSERT_EQ(mapfs_link(fs, "/b", "/b2"), 0);
                 Put(fs, "/c", Pat(3, 300000));  // replaced with its last link: freed
                 Put(fs, "/d", Pat(4, 10));
               },
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_rename(fs, "/a", "/b"), 0);
                 ASSERT_EQ(mapfs_rename(fs, "/d", "/c"), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectAbsent(fs, "/a");
                 ExpectAbsent(fs, "/d");
                 ExpectFile(fs, "/b", Pat(1, 5000));
                 ExpectFile(fs, "/b2", Pat(2, 7000));
                 ExpectFile(fs, "/c", Pat(4, 10));
               }});
  c.push_back({"rename_noreplace",
               [](mapfs_t* fs, Ctx&) {
                 Put(fs, "/a", Pat(1, 5000));
                 Put(fs, "/b", Pat(2, 7000));
               },
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_rename2(fs, "/a", "/b", RENAME_NOREPLACE), -1);
                 ASSERT_EQ(errno, EEXIST);
                 ASSERT_EQ(mapfs_rename2(fs, "/a", "/c", RENAME_NOREPLACE), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectAbsent(fs, "/a");
                 ExpectFile(fs, "/b", Pat(2, 7000));
                 ExpectFile(fs, "/c", Pat(1, 5000));
               }});
  c.push_back({"rename_exchange",
               [](mapfs_t* fs, Ctx& x) {
                 Put(fs, "/p", Pat(1, 5000));
                 Put(fs, "/q", Pat(2, 70000), 0600);
                 Put(fs, "/a", Pat(3, 100));
                 ASSERT_EQ(mapfs_mkdir(fs, "/d", 0700), 0);
                 Put(fs, "/d/x", Pat(4, 200));
                 x.ino["/d"] = InoOf(fs, "/d");
               },
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_rename2(fs, "/p", "/q", RENAME_EXCHANGE), 0);
                 ASSERT_EQ(mapfs_rename2(fs, "/a", "/d", RENAME_EXCHANGE), 0);  // a file and a directory
               },
               [](mapfs_t* fs, Ctx& x) {
                 ExpectFile(fs, "/p", Pat(2, 70000), 0600);
                 ExpectFile(fs, "/q", Pat(1, 5000));
                 ExpectFile(fs, "/d", Pat(3, 100));
                 ExpectDir(fs, "/a", 0700, 2, {"x"});
                 ExpectFile(fs, "/a/x", Pat(4, 200));
                 EXPECT_EQ(InoOf(fs, "/a"), x.ino["/d"]);
                 ExpectDir(fs, "/", 0755, 3, {"p", "q", "a", "d"});
               }});
  c.push_back({"rename_dir_across",
               [](mapfs_t* fs, Ctx& x) {
                 ASSERT_EQ(mapfs_mkdir(fs, "/s", 0755), 0);
                 ASSERT_EQ(mapfs_mkdir(fs, "/t", 0755), 0);
                 ASSERT_EQ(mapfs_mkdir(fs, "/s/sub", 0750), 0);
                 ASSERT_EQ(mapfs_mkdir(fs, "/s/sub/inner", 0755), 0);
                 Put(fs, "/s/sub/f", Pat(1, 9000));
                 x.ino["/t"] = InoOf(fs, "/t");
                 x.ino["/sub"] = InoOf(fs, "/s/sub");
               },
               [](mapfs_t* fs, Ctx&) { ASSERT_EQ(mapfs_rename(fs, "/s/sub", "/t/sub"), 0); },
               [](mapfs_t* fs, Ctx& x) {
                 ExpectAbsent(fs, "/s/sub");
                 ExpectDir(fs, "/s", 0755, 2, {});
                 ExpectDir(fs, "/t", 0755, 3, {"sub"});
                 ExpectDir(fs, "/t/sub", 0750, 3, {"inner", "f"});
                 ExpectFile(fs, "/t/sub/f", Pat(1, 9000));
                 EXPECT_EQ(InoOf(fs, "/t/sub"), x.ino["/sub"]);
                 EXPECT_EQ(InoOf(fs, "/t/sub/.."), x.ino["/t"]) << "'..' of the moved directory";
                 EXPECT_EQ(InoOf(fs, "/t/sub/inner/../.."), x.ino["/t"]);
                 mapfs_dir_t* d = mapfs_opendir(fs, "/t/sub");
                 ASSERT_NE(d, nullptr);
                 uint64_t dotdot = 0;
                 while (struct dirent* e = mapfs_readdir(d))
                   if (std::string(e->d_name) == "..") dotdot = e->d_ino;
                 mapfs_closedir(d);
                 EXPECT_EQ(dotdot, x.ino["/t"]) << "readdir's '..' of the moved directory";
               }});
  c.push_back({"link",
               [](mapfs_t* fs, Ctx&) {
                 Put(fs, "/a", Pat(1, 5000));
                 ASSERT_EQ(mapfs_mkdir(fs, "/d", 0755), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_link(fs, "/a", "/d/l"), 0);
                 ASSERT_EQ(mapfs_link(fs, "/a", "/l2"), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectFile(fs, "/a", Pat(1, 5000), 0644, 3);
                 ExpectFile(fs, "/d/l", Pat(1, 5000), 0644, 3);
                 ExpectFile(fs, "/l2", Pat(1, 5000), 0644, 3);
                 EXPECT_EQ(InoOf(fs, "/a"), InoOf(fs, "/d/l"));
               }});
  c.push_back({"symlink", [](mapfs_t* fs, Ctx&) { Put(fs, "/f", Pat(1, 5000)); },
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_symlink(fs, "f", "/s1"), 0);
                 ASSERT_EQ(mapfs_symlink(fs, ("/" + std::string(300, 'x') + "/y").c_str(), "/s2"), 0);  // not inline
                 ASSERT_EQ(mapfs_symlink(fs, "/nowhere", "/s3"), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 std::string long_target = "/" + std::string(300, 'x') + "/y";
                 for (auto [p, t] : {std::pair<std::string, std::string>{"/s1", "f"}, {"/s2", long_target},
                                     {"/s3", "/nowhere"}}) {
                   struct stat st = Lstat(fs, p);
                   EXPECT_TRUE(S_ISLNK(st.st_mode)) << p;
                   EXPECT_EQ(st.st_size, static_cast<off_t>(t.size())) << p;
                   char buf[1024];
                   ssize_t n = mapfs_readlink(fs, p.c_str(), buf, sizeof buf);
                   ASSERT_EQ(n, static_cast<ssize_t>(t.size())) << p;
                   EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), t) << p;
                 }
                 std::string got;
                 ASSERT_TRUE(ReadFile(fs, "/s1", &got));
                 EXPECT_EQ(got, Pat(1, 5000));
               }});
  c.push_back({"unlink",
               [](mapfs_t* fs, Ctx&) {
                 Put(fs, "/a", Pat(1, 300000));
                 Put(fs, "/b", Pat(2, 5000));
                 ASSERT_EQ(mapfs_link(fs, "/b", "/b2"), 0);
                 ASSERT_EQ(mapfs_symlink(fs, "/b", "/s"), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_unlink(fs, "/a"), 0);
                 ASSERT_EQ(mapfs_unlink(fs, "/b"), 0);
                 ASSERT_EQ(mapfs_unlink(fs, "/s"), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectAbsent(fs, "/a");
                 ExpectAbsent(fs, "/b");
                 ExpectAbsent(fs, "/s");
                 ExpectFile(fs, "/b2", Pat(2, 5000));
                 ExpectDir(fs, "/", 0755, 2, {"b2"});
               }});
  c.push_back({"mkdir", Nothing(),
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_mkdir(fs, "/d", 0750), 0);
                 ASSERT_EQ(mapfs_mkdir(fs, "/d/e", 0700), 0);
                 ASSERT_EQ(mapfs_mkdir(fs, "/d/f", 0755), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectDir(fs, "/", 0755, 3, {"d"});
                 ExpectDir(fs, "/d", 0750, 4, {"e", "f"});
                 ExpectDir(fs, "/d/e", 0700, 2, {});
                 EXPECT_EQ(InoOf(fs, "/d/e/.."), InoOf(fs, "/d"));
               }});
  c.push_back({"rmdir",
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_mkdir(fs, "/d", 0755), 0);
                 ASSERT_EQ(mapfs_mkdir(fs, "/d/e", 0755), 0);
                 ASSERT_EQ(mapfs_mkdir(fs, "/d/f", 0755), 0);
                 for (int i = 0; i < 300; i++) Put(fs, "/d/f/" + std::to_string(i), "");  // a grown directory
                 for (int i = 0; i < 300; i++) ASSERT_EQ(mapfs_unlink(fs, ("/d/f/" + std::to_string(i)).c_str()), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_rmdir(fs, "/d/e"), 0);
                 ASSERT_EQ(mapfs_rmdir(fs, "/d/f"), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectAbsent(fs, "/d/e");
                 ExpectAbsent(fs, "/d/f");
                 ExpectDir(fs, "/d", 0755, 2, {});
                 ExpectDir(fs, "/", 0755, 3, {"d"});
               }});
  c.push_back({"chmod",
               [](mapfs_t* fs, Ctx&) {
                 Put(fs, "/f", Pat(1, 100));
                 Put(fs, "/g", Pat(2, 100));
                 ASSERT_EQ(mapfs_mkdir(fs, "/d", 0755), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_chmod(fs, "/f", 04711), 0);
                 ASSERT_EQ(mapfs_chmod(fs, "/d", 01750), 0);
                 int fd = mapfs_open(fs, "/g", O_RDONLY);
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(mapfs_fchmod(fs, fd, 0), 0);
                 ASSERT_EQ(mapfs_close(fs, fd), 0);
               },
               [](mapfs_t* fs, Ctx&) {
                 ExpectFile(fs, "/f", Pat(1, 100), 04711);
                 ExpectFile(fs, "/g", Pat(2, 100), 0);
                 ExpectDir(fs, "/d", 01750, 2, {});
               }});
  c.push_back({"chown",
               [](mapfs_t* fs, Ctx& x) {
                 Put(fs, "/f", Pat(1, 100));
                 Put(fs, "/g", Pat(2, 100));
                 ASSERT_EQ(mapfs_symlink(fs, "/g", "/s"), 0);
                 x.st["/g"] = Lstat(fs, "/g");
               },
               [](mapfs_t* fs, Ctx&) {
                 ASSERT_EQ(mapfs_chown(fs, "/f", 1234, 5678), 0);
                 ASSERT_EQ(mapfs_chown(fs, "/f", static_cast<uid_t>(-1), 91), 0);  // gid only
                 ASSERT_EQ(mapfs_lchown(fs, "/s", 42, 43), 0);                      // the link, not /g
               },
               [](mapfs_t* fs, Ctx& x) {
                 struct stat f = Lstat(fs, "/f"), s = Lstat(fs, "/s"), g = Lstat(fs, "/g");
                 EXPECT_EQ(f.st_uid, 1234u);
                 EXPECT_EQ(f.st_gid, 91u);
                 EXPECT_EQ(s.st_uid, 42u);
                 EXPECT_EQ(s.st_gid, 43u);
                 EXPECT_EQ(g.st_uid, x.st["/g"].st_uid);
                 EXPECT_EQ(g.st_gid, x.st["/g"].st_gid);
                 ExpectFile(fs, "/f", Pat(1, 100));
               }});
  c.push_back({"utimens",
               [](mapfs_t* fs, Ctx& x) {
                 Put(fs, "/f", Pat(1, 100));
                 Put(fs, "/g", Pat(2, 100));
                 ASSERT_EQ(mapfs_mkdir(fs, "/d", 0755), 0);
                 x.st["/g"] = Lstat(fs, "/g");
               },
               [](mapfs_t* fs, Ctx&) {
                 struct timespec ts[2] = {{1000000000, 123456789}, {1234567890, 987654321}};
                 ASSERT_EQ(mapfs_utimens(fs, "/f", ts), 0);
                 struct timespec ts2[2] = {{0, UTIME_OMIT}, {42, 7}};
                 ASSERT_EQ(mapfs_utimens(fs, "/g", ts2), 0);
                 struct timespec ts3[2] = {{5, 0}, {6, 999999999}};
                 int fd = mapfs_open(fs, "/d", O_RDONLY | O_DIRECTORY);
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(mapfs_futimens(fs, fd, ts3), 0);
                 ASSERT_EQ(mapfs_close(fs, fd), 0);
               },
               [](mapfs_t* fs, Ctx& x) {
                 struct stat f = Lstat(fs, "/f"), g = Lstat(fs, "/g"), d = Lstat(fs, "/d");
                 EXPECT_EQ(f.st_atim.tv_sec, 1000000000);
                 EXPECT_EQ(f.st_atim.tv_nsec, 123456789);
                 EXPECT_EQ(f.st_mtim.tv_sec, 1234567890);
                 EXPECT_EQ(f.st_mtim.tv_nsec, 987654321);
                 EXPECT_EQ(g.st_atim.tv_sec, x.st["/g"].st_atim.tv_sec);
                 EXPECT_EQ(g.st_atim.tv_nsec, x.st["/g"].st_atim.tv_nsec);
                 EXPECT_EQ(g.st_mtim.tv_sec, 42);
                 EXPECT_EQ(g.st_mtim.tv_nsec, 7);
                 EXPECT_EQ(d.st_atim.tv_sec, 5);
                 EXPECT_EQ(d.st_atim.tv_nsec, 0);
                 EXPECT_EQ(d.st_mtim.tv_sec, 6);
                 EXPECT_EQ(d.st_mtim.tv_nsec, 999999999);
                 ExpectFile(fs, "/f", Pat(1, 100));
               }});
  return c;
}

class RemountKeeps : public ::testing::TestWithParam<int> {};

TEST_P(RemountKeeps, Op) {
  static const std::vector<Case> cases = Cases();
  const Case& c = cases[static_cast<size_t>(GetParam())];
  ::umask(022);
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  Ctx x;
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  {
    SCOPED_TRACE("setup");
    c.setup(fs, x);
  }
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(mapfs_unmount(fs), 0);
  fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  {
    SCOPED_TRACE("operation");
    c.op(fs, x);
  }
  ASSERT_FALSE(HasFailure());
  {
    SCOPED_TRACE("before unmount");
    c.verify(fs, x);
  }
  ASSERT_EQ(mapfs_unmount(fs), 0);
  fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  {
    SCOPED_TRACE("after unmount and mount");
    c.verify(fs, x);
  }
  ASSERT_EQ(mapfs_unmount(fs), 0);
  FS_EXPECT_CLEAN(pool.path());
}

INSTANTIATE_TEST_SUITE_P(fs, RemountKeeps, ::testing::Range(0, static_cast<int>(Cases().size())),
                         [](const ::testing::TestParamInfo<int>& i) { return Cases()[static_cast<size_t>(i.param)].name; });

// ------------------------------------------------------ b. process crashes

// The crash tests' work: random operations on files /k/n0 .. /k/n11, each
// followed by fsync. The child and the parent generate the same sequence
// from the same model and generator (the child is a fork), so the child
// only reports how far it got: "B <seq>" before an operation, "E <seq>"
// after it (and its fsync) returned, "X <seq> <errno> <message>" on an
// unexpected failure.
constexpr int kCrashNames = 12;
using Model = std::map<std::string, std::string>;  // path -> content

struct COp {
  enum Kind { kCreate, kWrite, kTruncate, kRename, kUnlink } k;
  std::string a, b;
  uint64_t tag = 0, off = 0, len = 0;
  int mflag = 0;
};

std::string Describe(const COp& o) {
  static const char* kinds[] = {"create", "write", "truncate", "rename", "unlink"};
  std::string m = o.mflag == MAPFS_O_POSIX ? "posix" : o.mflag == MAPFS_O_STRICT ? "strict" : "sync";
  return std::string(kinds[o.k]) + " " + o.a + (o.b.empty() ? "" : " -> " + o.b) + " off " + std::to_string(o.off) +
         " len " + std::to_string(o.len) + " (" + m + ")";
}

COp NextOp(Rng& rng, const Model& m, uint64_t seq) {
  std::vector<std::string> present, absent;
  for (int i = 0; i < kCrashNames; i++) {
    std::string p = "/k/n" + std::to_string(i);
    (m.count(p) ? present : absent).push_back(p);
  }
  COp o{};
  o.tag = 1000 + seq;
  static const int kModes[] = {MAPFS_O_POSIX, MAPFS_O_SYNCMODE, MAPFS_O_STRICT};
  o.mflag = kModes[rng.Below(3)];
  o.len = rng.Below(4) == 0 ? 1 + rng.Below(400000) : 1 + rng.Below(20000);
  uint64_t r = rng.Below(100);
  if (present.empty() || (r < 25 && !absent.empty())) {
    o.k = COp::kCreate;
    o.a = absent[rng.Below(absent.size())];
    return o;
  }
  o.a = present[rng.Below(present.size())];
  uint64_t size = m.at(o.a).size();
  if (r < 55 || (r < 65 && size > (4u << 20))) {
    o.k = COp::kWrite;
    o.off = size > (4u << 20) ? rng.Below(1u << 20) : rng.Below(size + 1);
  } else if (r < 65) {
    o.k = COp::kTruncate;
    o.len = rng.Below(2) ? rng.Below(size + 1) : size + rng.Below(100000);
  } else if (r < 85) {
    o.k = COp::kRename;
    do o.b = "/k/n" + std::to_string(rng.Below(kCrashNames));
    while (o.b == o.a);
  } else {
    o.k = COp::kUnlink;
  }
  return o;
}

void Apply(Model* m, const COp& o) {
  switch (o.k) {
    case COp::kCreate: (*m)[o.a] = Pat(o.tag, o.len); break;
    case COp::kWrite: (*m)[o.a] = Overlay((*m)[o.a], o.off, Pat(o.tag, o.len, o.off)); break;
    case COp::kTruncate: (*m)[o.a] = Resized((*m)[o.a], o.len); break;
    case COp::kRename: {
      std::string c = (*m)[o.a];
      m->erase(o.a);
      (*m)[o.b] = c;
      break;
    }
    case COp::kUnlink: m->erase(o.a); break;
  }
}

// Runs one operation in the child; 0 or an errno.
int RunOp(mapfs_t* fs, const COp& o) {
  auto fail = [] { return errno ? errno : EIO; };
  switch (o.k) {
    case COp::kCreate:
    case COp::kWrite:
    case COp::kTruncate: {
      int flags = O_WRONLY | o.mflag | (o.k == COp::kCreate ? O_CREAT | O_EXCL : 0);
      int fd = mapfs_open(fs, o.a.c_str(), flags, 0644);
      if (fd < 0) return fail();
      bool ok = true;
      if (o.k == COp::kTruncate) {
        ok = mapfs_ftruncate(fs, fd, static_cast<off_t>(o.len)) == 0;
      } else {
        std::string d = Pat(o.tag, o.len, o.off);
        ok = WriteAll(fs, fd, d.data(), d.size(), static_cast<off_t>(o.off));
      }
      ok = ok && mapfs_fsync(fs, fd) == 0;
      int e = fail();
      mapfs_close(fs, fd);
      return ok ? 0 : e;
    }
    case COp::kRename: return mapfs_rename(fs, o.a.c_str(), o.b.c_str()) == 0 ? 0 : fail();
    case COp::kUnlink: return mapfs_unlink(fs, o.a.c_str()) == 0 ? 0 : fail();
  }
  return EINVAL;
}

void Report(int fd, const std::string& line) {
  std::string l = line + "\n";
  (void)!::write(fd, l.data(), l.size());  // < PIPE_BUF: atomic
}

// Child: mounts, runs `n` operations (-1: until killed), each reported,
// then `tail` on the same mount; returns without unmounting.
int CrashChild(const std::string& pool, int out, Rng rng, Model m, uint64_t seq0, long n,
               const std::function<int(mapfs_t*)>& tail = nullptr) {
  mapfs_t* fs = mapfs_mount(pool.c_str(), nullptr);
  if (fs == nullptr) {
    Report(out, "X 0 " + std::to_string(errno) + " mount: " + mapfs_last_error());
    return 3;
  }
  Report(out, "M");
  for (uint64_t seq = seq0; n < 0 || static_cast<long>(seq - seq0) < n; seq++) {
    COp o = NextOp(rng, m, seq);
    Report(out, "B " + std::to_string(seq));
    if (int e = RunOp(fs, o)) {
      Report(out, "X " + std::to_string(seq) + " " + std::to_string(e) + " " + Describe(o) + ": " + mapfs_last_error());
      return 4;
    }
    Apply(&m, o);
    Report(out, "E " + std::to_string(seq));
  }
  return tail ? tail(fs) : 0;
}

struct Progress {
  bool mounted = false;
  long began = -1, ended = -1;  // last sequence numbers (-1 none)
  std::string error;
};
Progress Parse(const std::string& text) {
  Progress p;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line == "M") p.mounted = true;
    else if (line.rfind("B ", 0) == 0) p.began = std::stol(line.substr(2));
    else if (line.rfind("E ", 0) == 0) p.ended = std::stol(line.substr(2));
    else if (line.rfind("X ", 0) == 0) p.error = line;
  }
  return p;
}

// Reads from `fd` until EOF, until `deadline_ms` passed (-1: EOF only) or,
// with `line`, until a whole line came.
std::string ReadPipe(int fd, int deadline_ms, bool line = false) {
  std::string s;
  auto t0 = std::chrono::steady_clock::now();
  char buf[4096];
  for (;;) {
    int wait = -1;
    if (deadline_ms >= 0) {
      int left = deadline_ms - static_cast<int>(SecondsSince(t0) * 1000);
      if (left <= 0) break;
      wait = left;
    }
    struct pollfd p = {fd, POLLIN, 0};
    int r = ::poll(&p, 1, wait);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
    if (line && s.find('\n') != std::string::npos) break;
  }
  return s;
}

Model ReadTree(mapfs_t* fs) {
  Model m;
  std::vector<std::string> names;
  EXPECT_EQ(ListDir(fs, "/k", &names), 0);
  for (auto& n : names) {
    std::string c;
    EXPECT_TRUE(ReadFile(fs, "/k/" + n, &c)) << n << ": " << mapfs_last_error();
    m["/k/" + n] = c;
  }
  return m;
}

// True when `got` is a state a torn (not all-or-nothing) write of `o` can
// leave: each byte old or new, the size between.
bool TornWriteOk(const std::string& before, const std::string& after, const std::string& got) {
  if (got.size() < before.size() || got.size() > after.size()) return false;
  for (size_t i = 0; i < got.size(); i++) {
    bool old_ok = i < before.size() ? got[i] == before[i] : got[i] == 0;
    if (!old_ok && got[i] != after[i]) return false;
  }
  return true;
}

// Checks the state after a crash: `m` holds every reported operation; `u`
// (if any) was in flight. Returns "" or what is wrong.
std::string CheckCrashState(const Model& m, const COp* u, const Model& got) {
  std::set<std::string> touched;
  if (u) {
    touched.insert(u->a);
    if (!u->b.empty()) touched.insert(u->b);
  }
  std::string err;
  auto Get = [](const Model& x, const std::string& p) -> const std::string* {
    auto it = x.find(p);
    return it == x.end() ? nullptr : &it->second;
  };
  std::set<std::string> all;
  for (auto& [p, c] : m) all.insert(p);
  for (auto& [p, c] : got) all.insert(p);
  for (auto& p : all) {
    if (touched.count(p)) continue;
    const std::string *w = Get(m, p), *g = Get(got, p);
    if (!w) err += p + " exists but should not; ";
    else if (!g) err += p + " is missing; ";
    else if (*w != *g) err += p + ": " + Diff(*g, *w) + "; ";
  }
  if (!u) return err;
  Model after = m;
  Apply(&after, *u);
  const std::string *b = Get(m, u->a), *a = Get(after, u->a), *g = Get(got, u->a);
  auto same = [](const std::string* x, const std::string* y) { return (!x && !y) || (x && y && *x == *y); };
  bool strict = u->mflag == MAPFS_O_STRICT;
  switch (u->k) {
    case COp::kCreate:
      if (g && !(g->empty() || *g == *a || (!strict && TornWriteOk("", *a, *g))))
        err += "in-flight " + Describe(*u) + " left " + Diff(*g, *a) + "; ";
      break;
    case COp::kWrite:
      if (!g || !(same(g, b) || same(g, a) || (!strict && TornWriteOk(*b, *a, *g))))
        err += "in-flight " + Describe(*u) + " left " + (g ? Diff(*g, *a) : std::string("no file")) + "; ";
      break;
    case COp::kTruncate:
    case COp::kUnlink:
      if (!same(g, b) && !same(g, a)) err += "in-flight " + Describe(*u) + " left neither state; ";
      break;
    case COp::kRename: {
      const std::string *gb = Get(got, u->b), *bb = Get(m, u->b);
      bool before_state = same(g, b) && same(gb, bb);
      bool after_state = !g && same(gb, b);
      if (!before_state && !after_state) err += "in-flight " + Describe(*u) + " left neither state (not atomic); ";
      break;
    }
  }
  return err;
}

// A child that _exits without unmounting after a batch: every operation is
// there after recovery, the files it had open (one unlinked) are closed
// and reclaimed.
TEST(fs_crash, ExitWithoutUnmount) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  {
    mapfs_t* fs = MountC(pool.path());
    ASSERT_NE(fs, nullptr);
    ASSERT_EQ(mapfs_mkdir(fs, "/k", 0755), 0);
    ASSERT_EQ(mapfs_unmount(fs), 0);
  }
  Rng rng(11);
  Model m;
  constexpr long kOps = 150;
  int pfd[2];
  ASSERT_EQ(::pipe(pfd), 0);
  std::string path = pool.path();
  pid_t pid = ForkChild([&] {
    ::close(pfd[0]);
    // More, not in the model: a directory, a symlink, an open file
    // unlinked, a posix-mode file fsync'd and left open.
    return CrashChild(path, pfd[1], rng, m, 0, kOps, [&](mapfs_t* fs) {
      if (mapfs_mkdir(fs, "/x", 0700) != 0 || mapfs_symlink(fs, "/k", "/x/ln") != 0) return 6;
      int fd = mapfs_open(fs, "/x/open-unlinked", O_CREAT | O_RDWR, 0644);
      std::string big = Pat(9, 8 << 20);
      if (fd < 0 || !WriteAll(fs, fd, big.data(), big.size(), 0) || mapfs_fsync(fs, fd) != 0) return 7;
      if (mapfs_unlink(fs, "/x/open-unlinked") != 0) return 8;
      int fd2 = mapfs_open(fs, "/x/kept", O_CREAT | O_WRONLY | MAPFS_O_POSIX, 0600);
      if (fd2 < 0 || !WriteAll(fs, fd2, big.data(), 4096, 0) || mapfs_fsync(fs, fd2) != 0) return 9;
      struct statvfs sv{};
      if (mapfs_statvfs(fs, &sv) != 0) return 10;
      Report(pfd[1], "DONE " + std::to_string((sv.f_blocks - sv.f_bfree) * sv.f_frsize));
      return 0;  // ForkChild _exits: no unmount, no close
    });
  });
  ASSERT_GT(pid, 0);
  ::close(pfd[1]);
  std::string text = ReadPipe(pfd[0], -1);
  ::close(pfd[0]);
  ASSERT_EQ(WaitChild(pid), 0) << text.substr(text.size() > 2000 ? text.size() - 2000 : 0);
  Progress pr = Parse(text);
  ASSERT_EQ(pr.error, "");
  ASSERT_EQ(pr.ended, kOps - 1);
  ASSERT_NE(text.find("DONE"), std::string::npos);
  for (long s = 0; s < kOps; s++) Apply(&m, NextOp(rng, m, static_cast<uint64_t>(s)));

  // The first mount recovers; fsck must then be clean.
  fs::FsCheckReport rep;
  auto problems = CheckPool(pool.path(), &rep);
  EXPECT_TRUE(problems.empty()) << Join(problems);
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  Model got = ReadTree(fs);
  EXPECT_EQ(CheckCrashState(m, nullptr, got), "");
  EXPECT_EQ(got.size(), m.size());
  ExpectDir(fs, "/x", 0700, 2, {"ln", "kept"});
  ExpectFile(fs, "/x/kept", Pat(9, 4096), 0600);
  char buf[64];
  EXPECT_EQ(mapfs_readlink(fs, "/x/ln", buf, sizeof buf), 2);
  // The 8 MiB of the unlinked file are free again: recovery took them
  // back from what the child saw in use just before it exited.
  struct statvfs sv{};
  ASSERT_EQ(mapfs_statvfs(fs, &sv), 0);
  uint64_t used = (sv.f_blocks - sv.f_bfree) * sv.f_frsize;
  uint64_t used_child = std::stoull(text.substr(text.find("DONE") + 5));
  EXPECT_LE(used + (8u << 20), used_child + (256u << 10))
      << "used " << used_child << " before the exit, " << used << " after recovery";
  ASSERT_EQ(mapfs_unmount(fs), 0);
  FS_EXPECT_CLEAN(pool.path());
}

// SIGKILL at random moments, many times over the same pool.
TEST(fs_crash, KilledAtRandomMoments) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  {
    mapfs_t* fs = MountC(pool.path());
    ASSERT_NE(fs, nullptr);
    ASSERT_EQ(mapfs_mkdir(fs, "/k", 0755), 0);
    ASSERT_EQ(mapfs_unmount(fs), 0);
  }
  const long iterations = EnvInt("MAPFS_CRASH_ITERATIONS", 40);
  Rng rng(EnvInt("MAPFS_CRASH_SEED", 7));
  Rng delays(99);
  Model m;
  uint64_t seq = 0;
  long total_done = 0, in_flight = 0, not_mounted = 0;
  for (long it = 0; it < iterations; it++) {
    // Delays from 0 (during the mount) to ~300 ms.
    int delay = it < 3 ? static_cast<int>(it) : static_cast<int>(delays.Below(it % 4 == 0 ? 300 : 60));
    SCOPED_TRACE("iteration " + std::to_string(it) + ", kill after " + std::to_string(delay) + " ms");
    int pfd[2];
    ASSERT_EQ(::pipe(pfd), 0);
    std::string path = pool.path();
    pid_t pid = ForkChild([&] {
      ::close(pfd[0]);
      return CrashChild(path, pfd[1], rng, m, seq, -1);
    });
    ASSERT_GT(pid, 0);
    ::close(pfd[1]);
    std::string text = ReadPipe(pfd[0], delay);
    ::kill(pid, SIGKILL);
    int rc = WaitChild(pid);
    text += ReadPipe(pfd[0], -1);
    ::close(pfd[0]);
    Progress pr = Parse(text);
    ASSERT_EQ(pr.error, "") << "child failed";
    ASSERT_EQ(rc, 128 + SIGKILL) << "child ended by itself";
    not_mounted += !pr.mounted;
    // Replay what the child reported done; the operation after it may be
    // in flight.
    long done = pr.ended < 0 ? 0 : pr.ended - static_cast<long>(seq) + 1;
    for (long k = 0; k < done; k++) Apply(&m, NextOp(rng, m, seq++));
    std::unique_ptr<COp> u;
    if (pr.began >= static_cast<long>(seq)) {
      u = std::make_unique<COp>(NextOp(rng, m, seq++));
      in_flight++;
    }
    total_done += done;

    auto problems = CheckPool(pool.path());
    ASSERT_TRUE(problems.empty()) << "after " << done << " operations, in flight: "
                                  << (u ? Describe(*u) : std::string("none")) << "\n"
                                  << Join(problems);
    mapfs_t* fs = MountC(pool.path());
    ASSERT_NE(fs, nullptr);
    Model got = ReadTree(fs);
    std::string err = CheckCrashState(m, u.get(), got);
    EXPECT_EQ(err, "") << "in flight: " << (u ? Describe(*u) : std::string("none"));
    ASSERT_EQ(mapfs_unmount(fs), 0);
    if (!err.empty()) break;
    m = got;  // the in-flight operation's outcome, whichever it was
  }
  std::printf("[ crash    ] %ld kills: %ld operations reported done and found, %ld in flight, %ld before the mount "
              "finished\n",
              iterations, total_done, in_flight, not_mounted);
  EXPECT_GE(total_done, 20) << "the children hardly ran: the test tested little";
  FS_EXPECT_CLEAN(pool.path());
}

uint64_t UsedBytes(const std::string& pool) {
  mapfs_t* fs = MountC(pool);
  if (fs == nullptr) return 0;
  struct statvfs sv{};
  EXPECT_EQ(mapfs_statvfs(fs, &sv), 0);
  EXPECT_EQ(mapfs_unmount(fs), 0);
  return (sv.f_blocks - sv.f_bfree) * sv.f_frsize;
}

// A child holding an unlinked file open; the parent learns its statvfs.
pid_t HoldOrphan(const std::string& path, int out) {
  return ForkChild([path, out] {
    mapfs_t* fs = mapfs_mount(path.c_str(), nullptr);
    if (fs == nullptr) return 3;
    int fd = mapfs_open(fs, "/orphan", O_CREAT | O_RDWR, 0644);
    std::string big = Pat(5, 16 << 20);
    if (fd < 0 || !WriteAll(fs, fd, big.data(), big.size(), 0) || mapfs_fsync(fs, fd) != 0) return 4;
    if (mapfs_unlink(fs, "/orphan") != 0) return 5;
    struct statvfs sv{};
    mapfs_statvfs(fs, &sv);
    Report(out, std::to_string((sv.f_blocks - sv.f_bfree) * sv.f_frsize));
    for (;;) ::pause();
  });
}

// A file unlinked while open in a process that is killed: its space comes
// back at the next exclusive open.
TEST(fs_crash, OpenUnlinkedFileOfKilledProcessIsReclaimed) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const uint64_t used0 = UsedBytes(pool.path());
  int pfd[2];
  ASSERT_EQ(::pipe(pfd), 0);
  pid_t pid = HoldOrphan(pool.path(), pfd[1]);
  ASSERT_GT(pid, 0);
  ::close(pfd[1]);
  std::string line = ReadPipe(pfd[0], 60000, true);
  ASSERT_FALSE(line.empty()) << "child exited " << WaitChild(pid);
  uint64_t used_child = std::stoull(line);
  EXPECT_GE(used_child, used0 + (16u << 20));
  // While the child lives, the file is open: its space stays taken, the
  // name is gone.
  {
    mapfs_t* fs = MountC(pool.path());
    ASSERT_NE(fs, nullptr);
    ExpectAbsent(fs, "/orphan");
    struct statvfs sv{};
    ASSERT_EQ(mapfs_statvfs(fs, &sv), 0);
    EXPECT_GE((sv.f_blocks - sv.f_bfree) * sv.f_frsize, used0 + (16u << 20));
    ASSERT_EQ(mapfs_unmount(fs), 0);
  }
  ::kill(pid, SIGKILL);
  EXPECT_EQ(WaitChild(pid), 128 + SIGKILL);
  ::close(pfd[0]);
  const uint64_t used1 = UsedBytes(pool.path());  // exclusive: recovers
  EXPECT_LE(used1, used0 + (256u << 10)) << "the open-unlinked file's space was not reclaimed: " << used0 << " -> "
                                         << used_child << " -> " << used1;
  FS_EXPECT_CLEAN(pool.path());
}

// The same while another process keeps the pool mounted: nothing is
// reclaimed while it is there (the pool is not opened exclusively), and
// after it unmounts cleanly, the next open still recovers.
TEST(fs_crash, OrphanReclaimedAfterOtherMountLeaves) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const uint64_t used0 = UsedBytes(pool.path());
  int ofd[2], bfd[2], bgo[2];
  ASSERT_EQ(::pipe(ofd), 0);
  ASSERT_EQ(::pipe(bfd), 0);
  ASSERT_EQ(::pipe(bgo), 0);
  std::string path = pool.path();
  // B: mounts, says so, waits for a byte, unmounts cleanly, exits.
  pid_t b = ForkChild([&] {
    ::close(bfd[0]);
    ::close(bgo[1]);
    mapfs_t* fs = mapfs_mount(path.c_str(), nullptr);
    if (fs == nullptr) return 3;
    Report(bfd[1], "B");
    char c;
    if (::read(bgo[0], &c, 1) != 1) return 4;
    return mapfs_unmount(fs) == 0 ? 0 : 5;
  });
  ASSERT_GT(b, 0);
  ::close(bfd[1]);
  ::close(bgo[0]);
  ASSERT_EQ(ReadPipe(bfd[0], 60000, true), "B\n");
  pid_t a = HoldOrphan(path, ofd[1]);
  ASSERT_GT(a, 0);
  ::close(ofd[1]);
  std::string line = ReadPipe(ofd[0], 60000, true);
  ASSERT_FALSE(line.empty()) << "child exited " << WaitChild(a);
  ::kill(a, SIGKILL);
  EXPECT_EQ(WaitChild(a), 128 + SIGKILL);
  ::close(ofd[0]);
  {
    mapfs_t* fs = MountC(path);  // B is still there: not exclusive
    ASSERT_NE(fs, nullptr);
    ExpectAbsent(fs, "/orphan");
    Put(fs, "/other", Pat(1, 1000));  // the file system works meanwhile
    ASSERT_EQ(mapfs_unmount(fs), 0);
  }
  ASSERT_EQ(::write(bgo[1], "x", 1), 1);
  EXPECT_EQ(WaitChild(b), 0);
  ::close(bgo[1]);
  ::close(bfd[0]);
  const uint64_t used1 = UsedBytes(path);  // last mount left: this one is exclusive
  EXPECT_LE(used1, used0 + (512u << 10)) << "the dead process's open-unlinked file was never reclaimed: " << used0
                                         << " -> " << line << " -> " << used1;
  FS_EXPECT_CLEAN(path);
}

// --------------------------------------------------------------- c. fsck

// Mounts a pool with FileSystem and gives raw access to its inode table, to
// damage it; unmounts cleanly (no recovery runs at the next mount).
class Poke {
 public:
  explicit Poke(const std::string& path) {
    auto fs = fs::FileSystem::Mount(path);
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    if (!fs.ok()) return;
    fs_ = std::move(*fs);
    Mount& m = fs_->mount();
    auto it = meta::InodeTable::Open(&m.pool(), &m.vm(), &m.space());
    EXPECT_TRUE(it.ok());
    if (it.ok()) it_ = std::move(*it);
  }
  ~Poke() {
    it_.reset();
    if (fs_) {
      EXPECT_TRUE(fs_->Unmount().ok());
    }
  }
  bool ok() const { return it_ != nullptr; }
  meta::format::Inode* Ino(uint64_t ino) { return it_->Get(ino); }
  void Set(uint64_t ino, size_t field_off, uint64_t v) {
    auto* p = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(Ino(ino)) + field_off);
    medium::Store64(p, v);
    medium::Persist(p, 8);
  }
  uint64_t* BitmapWord(uint64_t ino) {
    int seg = meta::format::SegOf(ino);
    auto* sb = reinterpret_cast<meta::format::Superblock*>(fs_->mount().vm().at(it_->super_voff()));
    uint64_t slot = ino - meta::format::SegBase(seg);
    return reinterpret_cast<uint64_t*>(fs_->mount().vm().at(sb->seg[seg])) + slot / 64;
  }
  bool Bit(uint64_t ino) {
    uint64_t slot = ino - meta::format::SegBase(meta::format::SegOf(ino));
    return (*BitmapWord(ino) >> (slot % 64)) & 1;
  }
  void SetBit(uint64_t ino, bool on) {
    uint64_t slot = ino - meta::format::SegBase(meta::format::SegOf(ino));
    uint64_t* w = BitmapWord(ino);
    medium::Store64(w, on ? *w | (1ull << (slot % 64)) : *w & ~(1ull << (slot % 64)));
    medium::Persist(w, 8);
  }
  // A directory entry changed behind the inodes' back, in one transaction.
  Status RemoveEntry(uint64_t dir, const std::string& name) {
    Mount& m = fs_->mount();
    dir::Cib cib(dir::Env{&m.pool(), &m.vm(), &m.space()});
    meta::MetaTx tx(&m.pool(), &m.vm());
    MAPFS_RETURN_IF_ERROR(cib.Remove(Ino(dir)->part, name, &tx));
    return tx.Commit();
  }
  Status InsertEntry(uint64_t dir, const std::string& name, uint64_t ino, uint8_t type) {
    Mount& m = fs_->mount();
    dir::Cib cib(dir::Env{&m.pool(), &m.vm(), &m.space()});
    meta::MetaTx tx(&m.pool(), &m.vm());
    MAPFS_RETURN_IF_ERROR(cib.Insert(Ino(dir)->part, name, {ino, type}, &tx));
    return tx.Commit();
  }

 private:
  std::unique_ptr<fs::FileSystem> fs_;
  std::unique_ptr<meta::InodeTable> it_;
};

bool AnyHas(const std::vector<std::string>& v, const std::string& a, const std::string& b = "") {
  for (auto& s : v)
    if (s.find(a) != std::string::npos && s.find(b) != std::string::npos) return true;
  return false;
}

class Fsck : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pool_.error(), "");
    mapfs_t* fs = MountC(pool_.path());
    ASSERT_NE(fs, nullptr);
    ASSERT_EQ(mapfs_mkdir(fs, "/d", 0755), 0);
    Put(fs, "/d/keep", Pat(1, 50000));
    Put(fs, "/victim", Pat(2, 30000));
    victim_ = InoOf(fs, "/victim");
    d_ = InoOf(fs, "/d");
    struct statvfs sv{};
    ASSERT_EQ(mapfs_statvfs(fs, &sv), 0);
    ASSERT_EQ(mapfs_unmount(fs), 0);
    FS_EXPECT_CLEAN(pool_.path());
  }

  // Check finds problems naming `a` (and `b`); Repair says it did `fix`
  // (and `fix2`) and leaves nothing; then fsck is clean and the file system
  // works: /d/keep intact, a new file can be written, read, deleted.
  void CheckAndRepair(const std::string& a, const std::string& b, const std::string& fix,
                      const std::string& fix2 = "") {
    {
      auto fs = fs::FileSystem::Mount(pool_.path());
      ASSERT_TRUE(fs.ok()) << fs.status().ToString();
      EXPECT_FALSE((*fs)->recovered()) << "the damage must reach fsck, not recovery";
      fs::FsCheckReport c = (*fs)->Check();
      EXPECT_TRUE(AnyHas(c.problems, a, b)) << "Check does not report '" << a << "' ... '" << b << "'; it says:\n"
                                            << Join(c.problems);
      EXPECT_TRUE(c.repairs.empty());
      fs::FsCheckReport r = (*fs)->Repair();
      EXPECT_TRUE(AnyHas(r.repairs, fix)) << "Repair does not say '" << fix << "'; it says:\n"
                                          << Join(r.repairs) << "problems left:\n"
                                          << Join(r.problems);
      if (!fix2.empty()) {
        EXPECT_TRUE(AnyHas(r.repairs, fix2)) << "Repair does not say '" << fix2 << "':\n" << Join(r.repairs);
      }
      EXPECT_TRUE(r.problems.empty()) << "left after Repair:\n" << Join(r.problems);
      fs::FsCheckReport again = (*fs)->Check();
      EXPECT_TRUE(again.problems.empty()) << "Check after Repair:\n" << Join(again.problems);
      ASSERT_TRUE((*fs)->Unmount().ok());
    }
    FS_EXPECT_CLEAN(pool_.path());
    mapfs_t* fs = MountC(pool_.path());
    ASSERT_NE(fs, nullptr);
    ExpectFile(fs, "/d/keep", Pat(1, 50000));
    for (int i = 0; i < 50; i++) Put(fs, "/d/new" + std::to_string(i), Pat(10 + i, 5000 + i));
    for (int i = 0; i < 50; i++) ExpectFile(fs, "/d/new" + std::to_string(i), Pat(10 + i, 5000 + i));
    for (int i = 0; i < 50; i++) ASSERT_EQ(mapfs_unlink(fs, ("/d/new" + std::to_string(i)).c_str()), 0);
    ASSERT_EQ(mapfs_unmount(fs), 0);
    FS_EXPECT_CLEAN(pool_.path());
  }

  FsPool pool_;
  uint64_t victim_ = 0, d_ = 0;
};

TEST_F(Fsck, WrongLinkCount) {
  {
    Poke p(pool_.path());
    ASSERT_TRUE(p.ok());
    p.Set(victim_, offsetof(meta::format::Inode, nlink), 5);
    p.Set(d_, offsetof(meta::format::Inode, nlink), 7);
  }
  std::string v = "inode " + std::to_string(victim_), d = "inode " + std::to_string(d_);
  CheckAndRepair(v + ":", "link count 5, counted 1", v + ": link count set to 1");
  mapfs_t* fs = MountC(pool_.path());
  ASSERT_NE(fs, nullptr);
  ExpectFile(fs, "/victim", Pat(2, 30000));
  ExpectDir(fs, "/d", 0755, 2, {"keep"});
  // The file dies with its last link (with a count of 5 it would linger).
  ASSERT_EQ(mapfs_unlink(fs, "/victim"), 0);
  ASSERT_EQ(mapfs_unmount(fs), 0);
  FS_EXPECT_CLEAN(pool_.path());
}

TEST_F(Fsck, WrongDirectoryLinkCount) {
  {
    Poke p(pool_.path());
    ASSERT_TRUE(p.ok());
    p.Set(d_, offsetof(meta::format::Inode, nlink), 7);
  }
  std::string d = "inode " + std::to_string(d_);
  CheckAndRepair(d + ":", "link count 7, counted 2", d + ": link count set to 2");
}

TEST_F(Fsck, LeakedInodeBit) {
  uint64_t free_ino = 0;
  {
    Poke p(pool_.path());
    ASSERT_TRUE(p.ok());
    for (uint64_t i = victim_ + 1; i < 128 && free_ino == 0; i++)
      if (p.Ino(i)->mode == 0 && !p.Bit(i)) free_ino = i;
    ASSERT_NE(free_ino, 0u);
    p.SetBit(free_ino, true);
  }
  std::string f = "inode " + std::to_string(free_ino);
  CheckAndRepair(f + ":", "bitmap bit set on a free slot", "fixed 1 inode bitmap bits");
  {
    Poke p(pool_.path());
    ASSERT_TRUE(p.ok());
    EXPECT_FALSE(p.Bit(free_ino));
  }
}

TEST_F(Fsck, LiveInodeWithoutBit) {
  {
    Poke p(pool_.path());
    ASSERT_TRUE(p.ok());
    p.SetBit(victim_, false);
  }
  std::string v = "inode " + std::to_string(victim_);
  CheckAndRepair(v + ":", "without its bitmap bit", "fixed 1 inode bitmap bits");
  mapfs_t* fs = MountC(pool_.path());
  ASSERT_NE(fs, nullptr);
  ExpectFile(fs, "/victim", Pat(2, 30000));
  // The slot is not handed out twice.
  Put(fs, "/new", Pat(3, 10));
  EXPECT_NE(InoOf(fs, "/new"), victim_);
  ExpectFile(fs, "/victim", Pat(2, 30000));
  ASSERT_EQ(mapfs_unmount(fs), 0);
}

TEST_F(Fsck, EntryNamingFreeInode) {
  uint64_t free_ino = 0;
  {
    Poke p(pool_.path());
    ASSERT_TRUE(p.ok());
    for (uint64_t i = victim_ + 1; i < 128 && free_ino == 0; i++)
      if (p.Ino(i)->mode == 0 && !p.Bit(i)) free_ino = i;
    ASSERT_NE(free_ino, 0u);
    Status st = p.InsertEntry(d_, "dangling", free_ino, DT_REG);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  CheckAndRepair("inode " + std::to_string(d_) + ": entry 'dangling'", "free inode " + std::to_string(free_ino),
                 "'dangling'");
  mapfs_t* fs = MountC(pool_.path());
  ASSERT_NE(fs, nullptr);
  ExpectDir(fs, "/d", 0755, 2, {"keep"});
  Put(fs, "/d/dangling", Pat(4, 100));  // the name is usable again
  ExpectFile(fs, "/d/dangling", Pat(4, 100));
  ASSERT_EQ(mapfs_unmount(fs), 0);
  FS_EXPECT_CLEAN(pool_.path());
}

// The inode of a file freed (mode cleared, bit cleared) while its entry
// stays: the entry dangles and the data partition leaks.
TEST_F(Fsck, EntryOfLostInode) {
  {
    Poke p(pool_.path());
    ASSERT_TRUE(p.ok());
    p.Set(victim_, offsetof(meta::format::Inode, mode), 0);
    p.SetBit(victim_, false);
  }
  // The freed inode's data is left behind: on contiguous files its
  // partition (collected as a leak); on block-mapped pools its 8 blocks
  // (30,000 bytes), which the area check finds still mapped to the dead
  // inode number and the repair zeroes and frees.
  std::string v = std::to_string(victim_);
  std::string data_fix = "leaked partition";
  if (testing::TestFiles() != nullptr) {
    auto fs = fs::FileSystem::Mount(pool_.path());
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    fs::FsCheckReport c = (*fs)->Check();
    EXPECT_TRUE(AnyHas(c.problems, "mapping area: inode " + v + ": 8 blocks mapped at file blocks 0..7",
                       "not a live regular file"))
        << "Check does not report the dead inode's blocks; it says:\n"
        << Join(c.problems);
    ASSERT_TRUE((*fs)->Unmount().ok());
    data_fix = "inode " + v + ": freed 8 orphaned block mappings";
  }
  CheckAndRepair("inode 1: entry 'victim'", "free inode " + v, "'victim'", data_fix);
  mapfs_t* fs = MountC(pool_.path());
  ASSERT_NE(fs, nullptr);
  ExpectAbsent(fs, "/victim");
  ExpectDir(fs, "/", 0755, 3, {"d"});
  ASSERT_EQ(mapfs_unmount(fs), 0);
}

TEST_F(Fsck, UnreachableInode) {
  {
    Poke p(pool_.path());
    ASSERT_TRUE(p.ok());
    Status st = p.RemoveEntry(meta::format::kRootIno, "victim");
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  std::string v = "inode " + std::to_string(victim_);
  CheckAndRepair(v + " is not in any directory", "", v + ": unreachable");
  mapfs_t* fs = MountC(pool_.path());
  ASSERT_NE(fs, nullptr);
  ExpectAbsent(fs, "/victim");
  ExpectDir(fs, "/", 0755, 3, {"d"});
  ASSERT_EQ(mapfs_unmount(fs), 0);
  {
    // The slot is free again: bit clear, mode 0 (and fsck above found its
    // data partition neither leaked nor referenced).
    Poke p(pool_.path());
    ASSERT_TRUE(p.ok());
    EXPECT_FALSE(p.Bit(victim_));
    EXPECT_EQ(p.Ino(victim_)->mode, 0u);
  }
}

}  // namespace
}  // namespace mapfs::fstest
