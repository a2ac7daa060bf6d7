// Focused regressions found by the model-based random test (fs_model_test),
// each reduced to the few calls that trigger it:
//  - TruncateDownKeepsNeighbours: a sparse file whose size lies past its
//    partition (truncate up allocates nothing), truncated down within the
//    same partition level, returned the pages from the new end up to the
//    *old size* — past its partition, into the next partitions: other
//    files' data and the header pages of Partitioned partitions (content
//    lost, EUCLEAN from later allocations, fsck "referenced but not
//    allocated"). Only the partition's own pages may go.
//  - SymlinkLoopGrowingThePathIsEloop: a symlink whose target names itself
//    plus more components makes every expansion longer; the length check
//    meant for the caller's path said ENAMETOOLONG where Linux says ELOOP.
//  - TruncateDownZeroesPastTheEnd (found by fsx through the shim): after a
//    truncate down, the bytes past the new end were left as they were, so
//    a memory map of the last page (and, in partitions below 2 MiB, of the
//    pages up to the old end) showed stale data where the kernel shows
//    zeros.
//  - RenameNoreplaceOntoDotIsEexist: rename(x, "/" or "." or "..",
//    RENAME_NOREPLACE) is EEXIST on Linux (EBUSY without the flag, and for
//    a "." source either way); mapfs said EBUSY.
#include <fcntl.h>
#include <linux/fs.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "fs_test_util.h"

namespace mapfs::fstest {
namespace {

std::string Pat(uint64_t tag, size_t n, uint64_t from = 0) {
  std::string s(n, '\0');
  FillPattern(s.data(), n, tag, from);
  return s;
}

std::string Check(mapfs_t* fs, const std::string& path, const std::string& want) {
  std::string got;
  if (!ReadFile(fs, path, &got)) return path + ": read failed: " + ErrName(errno) + " " + mapfs_last_error();
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) i++;
  return path + ": size " + std::to_string(got.size()) + " (want " + std::to_string(want.size()) +
         "), first difference at byte " + std::to_string(i);
}

class FsRegression : public ::testing::TestWithParam<unsigned> {};

TEST_P(FsRegression, TruncateDownKeepsNeighbours) {
  constexpr uint64_t kMiB = 1 << 20;
  FsPool pool(512ull << 20, GetParam(), MAPFS_MODE_POSIX);
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);

  // A: 4 KiB of data (a 4 KiB partition), then a size of 5 MiB that no
  // partition backs, then a write at 1 MiB: A moves to a 2 MiB partition
  // and its size (5 MiB) stays past the partition's end.
  std::string a = Pat(1, 4096);
  int fd = mapfs_open(fs, "/a", O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << mapfs_last_error();
  ASSERT_TRUE(WriteAll(fs, fd, a.data(), a.size(), 0)) << mapfs_last_error();
  ASSERT_EQ(mapfs_ftruncate(fs, fd, 5 * kMiB), 0) << mapfs_last_error();
  std::string mid = Pat(2, 4096);
  ASSERT_TRUE(WriteAll(fs, fd, mid.data(), mid.size(), kMiB)) << mapfs_last_error();
  a.resize(5 * kMiB, '\0');
  a.replace(kMiB, mid.size(), mid);

  // Neighbours: 2 MiB files allocated after A's partition (the allocator
  // packs them beside it, and a new 16 MiB partition's header page comes
  // with the first one past A's).
  std::vector<std::string> nb;
  for (int i = 0; i < 10; i++) {
    std::string p = "/n" + std::to_string(i);
    nb.push_back(Pat(100 + i, 2 * kMiB - 4096 * i));
    int nfd = mapfs_open(fs, p.c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(nfd, 0) << mapfs_last_error();
    ASSERT_TRUE(WriteAll(fs, nfd, nb.back().data(), nb.back().size(), 0)) << mapfs_last_error();
    ASSERT_EQ(mapfs_close(fs, nfd), 0);
  }

  // Down to 1 MiB + 100: the same partition level, so A keeps its
  // partition and only returns its pages past the new end.
  ASSERT_EQ(mapfs_ftruncate(fs, fd, kMiB + 100), 0) << mapfs_last_error();
  a.resize(kMiB + 100);
  ASSERT_EQ(mapfs_close(fs, fd), 0);

  EXPECT_EQ(Check(fs, "/a", a), "");
  for (size_t i = 0; i < nb.size(); i++) EXPECT_EQ(Check(fs, "/n" + std::to_string(i), nb[i]), "");
  // The space layer still works: allocate and free more partitions.
  std::string more = Pat(200, 3 * kMiB);
  fd = mapfs_open(fs, "/more", O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << mapfs_last_error();
  EXPECT_TRUE(WriteAll(fs, fd, more.data(), more.size(), 0)) << ErrName(errno) << " " << mapfs_last_error();
  EXPECT_EQ(mapfs_ftruncate(fs, fd, 10000), 0) << ErrName(errno) << " " << mapfs_last_error();
  ASSERT_EQ(mapfs_close(fs, fd), 0);
  more.resize(10000);
  ASSERT_EQ(mapfs_unmount(fs), 0) << mapfs_last_error();

  FS_EXPECT_CLEAN(pool.path());
  fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  EXPECT_EQ(Check(fs, "/a", a), "");
  for (size_t i = 0; i < nb.size(); i++) EXPECT_EQ(Check(fs, "/n" + std::to_string(i), nb[i]), "");
  EXPECT_EQ(Check(fs, "/more", more), "");
  ASSERT_EQ(mapfs_unmount(fs), 0) << mapfs_last_error();
}

TEST_P(FsRegression, TruncateDownZeroesPastTheEnd) {
  FsPool pool(64ull << 20, GetParam(), MAPFS_MODE_SYNC);
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  // 256 KiB (a partition below 2 MiB) and 3 MiB (a 2 MiB-page-sized one).
  for (uint64_t len : {uint64_t{256} << 10, uint64_t{3} << 20}) {
    std::string name = "/t" + std::to_string(len);
    int fd = mapfs_open(fs, name.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << mapfs_last_error();
    std::string data(len, 'x');
    ASSERT_TRUE(WriteAll(fs, fd, data.data(), data.size(), 0)) << mapfs_last_error();
    uint64_t cut = len / 2 + 100;
    ASSERT_EQ(mapfs_ftruncate(fs, fd, static_cast<off_t>(cut)), 0) << mapfs_last_error();
    size_t cap = 0;
    auto* p = static_cast<const char*>(mapfs_mmap(fs, fd, &cap));
    ASSERT_NE(p, nullptr) << mapfs_last_error();
    uint64_t page_end = (cut + 4095) / 4096 * 4096;
    for (uint64_t i = cut; i < std::min<uint64_t>(page_end, cap); i++)
      ASSERT_EQ(p[i], 0) << name << ": byte " << i << " past the end of the mapped last page";
    // Growing again shows zeros up to the old end, through read and map.
    ASSERT_EQ(mapfs_ftruncate(fs, fd, static_cast<off_t>(len)), 0) << mapfs_last_error();
    std::string back(len, '?');
    ASSERT_EQ(mapfs_pread(fs, fd, back.data(), len, 0), static_cast<ssize_t>(len));
    EXPECT_EQ(back.find_first_not_of('x'), cut) << name;
    EXPECT_EQ(back.find_first_not_of('\0', cut), std::string::npos) << name;
    p = static_cast<const char*>(mapfs_mmap(fs, fd, &cap));
    ASSERT_NE(p, nullptr);
    for (uint64_t i = cut; i < std::min<uint64_t>(len, cap); i++) ASSERT_EQ(p[i], 0) << name << ": mapped byte " << i;
    mapfs_close(fs, fd);
  }
  ASSERT_EQ(mapfs_unmount(fs), 0);
}

TEST_P(FsRegression, SymlinkLoopGrowingThePathIsEloop) {
  FsPool pool(64ull << 20, GetParam(), MAPFS_MODE_POSIX);
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  ASSERT_EQ(mapfs_mkdir(fs, "/d", 0755), 0);
  // /d/s -> s/LLL...L: each expansion adds 202 bytes; 40 of them pass
  // PATH_MAX (4096) long before the symlink limit.
  ASSERT_EQ(mapfs_symlink(fs, ("s/" + std::string(200, 'L')).c_str(), "/d/s"), 0) << mapfs_last_error();
  struct stat st {};
  for (const char* p : {"/d/s", "/d/s/", "/d/s/x"}) {
    errno = 0;
    EXPECT_EQ(mapfs_stat(fs, p, &st), -1) << p;
    EXPECT_EQ(errno, ELOOP) << p << ": " << ErrName(errno);
  }
  errno = 0;
  EXPECT_EQ(mapfs_link(fs, "/d/s/x", "/d/y"), -1);
  EXPECT_EQ(errno, ELOOP) << ErrName(errno);
  errno = 0;
  EXPECT_EQ(mapfs_open(fs, "/d/s/x", O_CREAT | O_WRONLY, 0644), -1);
  EXPECT_EQ(errno, ELOOP) << ErrName(errno);
  // The caller's own path is still limited.
  errno = 0;
  EXPECT_EQ(mapfs_stat(fs, ("/" + std::string(PATH_MAX, 'a')).c_str(), &st), -1);
  EXPECT_EQ(errno, ENAMETOOLONG) << ErrName(errno);
  ASSERT_EQ(mapfs_unmount(fs), 0) << mapfs_last_error();
  FS_EXPECT_CLEAN(pool.path());
}

TEST_P(FsRegression, RenameNoreplaceOntoDotIsEexist) {
  FsPool pool(64ull << 20, GetParam(), MAPFS_MODE_POSIX);
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  ASSERT_EQ(mapfs_mkdir(fs, "/d", 0755), 0);
  ASSERT_EQ(mapfs_mkdir(fs, "/d/e", 0755), 0);
  struct Case {
    const char *from, *to;
    unsigned flags;
    int err;
  };
  for (const Case& c : std::vector<Case>{{"/d/e", "/", RENAME_NOREPLACE, EEXIST},
                                         {"/d/e", "/d/.", RENAME_NOREPLACE, EEXIST},
                                         {"/d/e", "/d/..", RENAME_NOREPLACE, EEXIST},
                                         {"/d/e", "/", 0, EBUSY},
                                         {"/d/e", "/d/.", 0, EBUSY},
                                         {"/d/e", "/d/..", RENAME_EXCHANGE, EBUSY},
                                         {"/d/.", "/x", RENAME_NOREPLACE, EBUSY},
                                         {"/", "/d/e", RENAME_NOREPLACE, EBUSY},
                                         {"/d/e/.", "/", RENAME_NOREPLACE, EBUSY}}) {
    errno = 0;
    EXPECT_EQ(mapfs_rename2(fs, c.from, c.to, c.flags), -1) << c.from << " -> " << c.to;
    EXPECT_EQ(errno, c.err) << c.from << " -> " << c.to << " flags " << c.flags << ": " << ErrName(errno);
  }
  ASSERT_EQ(mapfs_unmount(fs), 0) << mapfs_last_error();
  FS_EXPECT_CLEAN(pool.path());
}

// Issue 16, defect 4: truncate(path) resolved the name, then truncated the
// inode number without holding it open. An unlink and a create reusing
// the inode in between made it truncate another file. One thread
// truncates "/victim" up to 1 byte while another recycles the inode
// under "/other" with 8 bytes; "/other" must never change size. A race:
// on the old code the first hit came anywhere from round 400 to 55,000
// (2026-11-26, loaded machine), so 60,000 rounds; the loop stops at the
// first hit. Under ThreadSanitizer 2,000: it judges the two threads'
// accesses, not whether the race lands (60,000 rounds took 100 s there, a
// sixth of the CI step), and the plain and ASan runs keep all of them.
#if defined(__SANITIZE_THREAD__)
constexpr int kTruncateRounds = 2000;
#else
constexpr int kTruncateRounds = 60000;
#endif
TEST_P(FsRegression, TruncateByPathNeverReachesAReusedInode) {
  FsPool pool(64ull << 20, GetParam(), MAPFS_MODE_SYNC);
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  std::atomic<bool> stop{false};
  std::thread truncator([&] {
    while (!stop.load()) (void)mapfs_truncate(fs, "/victim", 1);
  });
  std::string bad;
  for (int i = 0; i < kTruncateRounds && bad.empty(); i++) {
    int fd = mapfs_open(fs, "/victim", O_CREAT | O_WRONLY, 0644);
    if (fd < 0 || mapfs_close(fs, fd) != 0 || mapfs_unlink(fs, "/victim") != 0) {
      bad = "victim: " + ErrName(errno);
      break;
    }
    fd = mapfs_open(fs, "/other", O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0 || mapfs_write(fs, fd, "12345678", 8) != 8 || mapfs_close(fs, fd) != 0) {
      bad = "other: " + ErrName(errno);
      break;
    }
    struct stat st;
    if (mapfs_stat(fs, "/other", &st) != 0) bad = "stat: " + ErrName(errno);
    else if (st.st_size != 8) bad = "round " + std::to_string(i) + ": /other has size " + std::to_string(st.st_size);
    if (mapfs_unlink(fs, "/other") != 0 && bad.empty()) bad = "unlink other: " + ErrName(errno);
  }
  stop = true;
  truncator.join();
  EXPECT_EQ(bad, "");
  ASSERT_EQ(mapfs_unmount(fs), 0) << mapfs_last_error();
  FS_EXPECT_CLEAN(pool.path());
}

INSTANTIATE_TEST_SUITE_P(PageSize, FsRegression, ::testing::Values(4096u, 2u << 20),
                         [](const ::testing::TestParamInfo<unsigned>& i) {
                           return std::string(i.param == 4096 ? "page_4k" : "page_2m");
                         });

}  // namespace
}  // namespace mapfs::fstest
