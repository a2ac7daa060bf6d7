// A full pool through the C API: ENOSPC (not another error, not a crash),
// everything written before intact, space usable again after unlink or
// truncate, and a consistent pool after remount.
#include <linux/falloc.h>
#include <sys/statvfs.h>

#include <map>

#include "api/api_util.h"

namespace mapfs::apitest {
namespace {

class EnospcTest : public ApiPageTest {
 protected:
  uint64_t PoolSize() const override { return 64 * kMiB; }

  struct FileInfo {
    uint64_t seed, size;
  };
  // Checks every file in `files` against its pattern.
  void CheckAll(const std::map<std::string, FileInfo>& files) {
    for (auto& [path, f] : files) {
      int fd = mapfs_open(fs_, path.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
      EXPECT_EQ(Fstat(fd).st_size, static_cast<off_t>(f.size)) << path;
      EXPECT_TRUE(CheckPattern(fd, f.seed, f.size)) << path;
      mapfs_close(fs_, fd);
    }
  }
  uint64_t FreeBytes() {
    struct statvfs v;
    EXPECT_OK(mapfs_statvfs(fs_, &v));
    EXPECT_LE(v.f_bfree, v.f_blocks);
    return v.f_bfree * v.f_frsize;
  }
};
INSTANTIATE_TEST_SUITE_P(Pages, EnospcTest, ::testing::Values(4096u, kHugePage), PageName);

// Writes `n` pattern bytes at `off`; on a short or failed write records
// what landed. Returns bytes written, or -1 with errno.
ssize_t WritePattern(mapfs_t* fs, int fd, uint64_t seed, uint64_t off, size_t n) {
  std::string d = Pattern(seed, off, n);
  return mapfs_pwrite(fs, fd, d.data(), n, static_cast<off_t>(off));
}

TEST_P(EnospcTest, FillWithFilesThenFreeAndRemount) {
  const uint64_t free0 = FreeBytes();
  std::map<std::string, FileInfo> files;
  int full_errno = 0;
  for (int i = 0; i < 1000 && full_errno == 0; i++) {
    std::string path = "/f" + std::to_string(i);
    int fd = mapfs_open(fs_, path.c_str(), O_CREAT | O_RDWR, 0644);
    if (fd < 0) {
      full_errno = errno;
      break;
    }
    const uint64_t want = kMiB + static_cast<uint64_t>(i) * 4097;
    uint64_t size = 0;
    while (size < want) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(want - size, 300000));
      ssize_t w = WritePattern(fs_, fd, i, size, n);
      if (w <= 0) {
        full_errno = w < 0 ? errno : -1;  // a zero-byte write is not an answer
        break;
      }
      size += static_cast<uint64_t>(w);  // short: the next one must fail
    }
    // Whatever happened, the file holds exactly what the calls reported.
    EXPECT_EQ(Fstat(fd).st_size, static_cast<off_t>(size)) << path;
    ASSERT_OK(mapfs_close(fs_, fd));
    files[path] = {static_cast<uint64_t>(i), size};
  }
  ASSERT_EQ(ErrName(full_errno), ErrName(ENOSPC)) << mapfs_last_error();
  uint64_t total = 0;
  for (auto& [p, f] : files) total += f.size;
  // Files of 1-2 MiB each occupy a whole 2 MiB chunk (ctFS L3 backing), so
  // about half of the ~56 MiB of data pages hold file bytes.
  EXPECT_GE(total, 16 * kMiB) << "a 64 MiB pool held only " << total << " bytes of file data";
  EXPECT_LE(FreeBytes(), 4 * kMiB) << "ENOSPC with space left";
  ASSERT_NO_FATAL_FAILURE(CheckAll(files));
  // Metadata operations on a full pool: success or ENOSPC, nothing else.
  for (int i = 0; i < 20; i++) {
    std::string p = "/meta" + std::to_string(i);
    if (mapfs_mkdir(fs_, p.c_str(), 0755) != 0) {
      EXPECT_EQ(ErrName(errno), ErrName(ENOSPC)) << p;
    }
  }
  {
    int fd = mapfs_open(fs_, "/f0", O_RDWR);
    ASSERT_GE(fd, 0);
    errno = 0;
    int r = mapfs_fallocate(fs_, fd, 0, 0, 16 * kMiB);
    if (r != 0) {
      EXPECT_EQ(ErrName(errno), ErrName(ENOSPC));
      EXPECT_EQ(Fstat(fd).st_size, static_cast<off_t>(files["/f0"].size)) << "a failed fallocate changed the size";
    } else {
      files["/f0"].size = std::max<uint64_t>(files["/f0"].size, 16 * kMiB);
      ADD_FAILURE() << "fallocate of 16 MiB succeeded on a full pool";
    }
    mapfs_close(fs_, fd);
  }
  ASSERT_NO_FATAL_FAILURE(CheckAll(files));
  // Unlinking some makes room again.
  int removed = 0;
  for (auto it = files.begin(); it != files.end();) {
    if (removed++ % 2 == 0) {
      ASSERT_OK(mapfs_unlink(fs_, it->first.c_str()));
      it = files.erase(it);
    } else {
      ++it;
    }
  }
  EXPECT_GE(FreeBytes(), 8 * kMiB);
  {
    int fd = mapfs_open(fs_, "/after", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << strerror(errno);
    ASSERT_EQ(WritePattern(fs_, fd, 5000, 0, 4 * kMiB), static_cast<ssize_t>(4 * kMiB)) << strerror(errno);
    ASSERT_OK(mapfs_close(fs_, fd));
    files["/after"] = {5000, 4 * kMiB};
  }
  ASSERT_NO_FATAL_FAILURE(CheckAll(files));
  // After a remount everything is still there and consistent.
  uint64_t free_before = FreeBytes();
  Remount();
  EXPECT_EQ(FreeBytes(), free_before);
  ASSERT_NO_FATAL_FAILURE(CheckAll(files));
  // Removing everything gives all the space back.
  for (auto& [p, f] : files) ASSERT_OK(mapfs_unlink(fs_, p.c_str()));
  for (int i = 0; i < 20; i++) mapfs_rmdir(fs_, ("/meta" + std::to_string(i)).c_str());
  EXPECT_GE(FreeBytes() + 4 * std::max<uint64_t>(PageSize(), 64 * kKiB), free0);
}

// One file appended until the pool is full: growth fails cleanly (the
// partition upgrade needs room), the file keeps what it had, truncation
// frees space and writing works again.
TEST_P(EnospcTest, SingleFileGrowsUntilFull) {
  ASSERT_FD(fd, mapfs_open(fs_, "/big", O_CREAT | O_RDWR, 0644));
  const uint64_t seed = 77;
  uint64_t size = 0;
  int err = 0;
  for (int i = 0; i < 1000; i++) {
    size_t n = kMiB + 333;
    ssize_t w = WritePattern(fs_, fd, seed, size, n);
    if (w < 0) {
      err = errno;
      break;
    }
    size += static_cast<uint64_t>(w);
  }
  ASSERT_EQ(ErrName(err), ErrName(ENOSPC)) << mapfs_last_error();
  EXPECT_GE(size, 16 * kMiB);
  EXPECT_EQ(Fstat(fd).st_size, static_cast<off_t>(size));
  EXPECT_TRUE(CheckPattern(fd, seed, size));
  // A small append may still fit or fail; it never corrupts.
  ssize_t w = WritePattern(fs_, fd, seed, size, 100);
  if (w > 0) {
    size += static_cast<uint64_t>(w);
  } else {
    EXPECT_EQ(ErrName(errno), ErrName(ENOSPC));
  }
  // Shrink to half: space comes back, and the file grows again.
  uint64_t half = size / 2;
  ASSERT_OK(mapfs_ftruncate(fs_, fd, static_cast<off_t>(half)));
  size = half;
  EXPECT_TRUE(CheckPattern(fd, seed, size));
  EXPECT_GE(FreeBytes(), 4 * kMiB);
  ASSERT_EQ(WritePattern(fs_, fd, seed, size, 2 * kMiB), static_cast<ssize_t>(2 * kMiB)) << strerror(errno);
  size += 2 * kMiB;
  EXPECT_TRUE(CheckPattern(fd, seed, size));
  ASSERT_OK(mapfs_close(fs_, fd));
  Remount();
  ASSERT_FD(fd2, mapfs_open(fs_, "/big", O_RDONLY));
  EXPECT_EQ(Fstat(fd2).st_size, static_cast<off_t>(size));
  EXPECT_TRUE(CheckPattern(fd2, seed, size));
  ASSERT_OK(mapfs_close(fs_, fd2));
}

// Thousands of small files until full, in a few directories.
TEST_P(EnospcTest, ManySmallFilesUntilFull) {
  std::map<std::string, FileInfo> files;
  int err = 0;
  for (int d = 0; d < 100 && err == 0; d++) {
    std::string dir = "/d" + std::to_string(d);
    if (mapfs_mkdir(fs_, dir.c_str(), 0755) != 0) {
      err = errno;
      break;
    }
    for (int i = 0; i < 1000; i++) {
      std::string p = dir + "/s" + std::to_string(i);
      int fd = mapfs_open(fs_, p.c_str(), O_CREAT | O_WRONLY, 0644);
      if (fd < 0) {
        err = errno;
        break;
      }
      uint64_t seed = static_cast<uint64_t>(d) * 1000 + static_cast<uint64_t>(i);
      ssize_t w = WritePattern(fs_, fd, seed, 0, 3000);
      int werr = errno;
      ASSERT_OK(mapfs_close(fs_, fd));
      if (w < 0) {
        err = werr;
        files[p] = {seed, 0};
        break;
      }
      ASSERT_EQ(w, 3000);
      files[p] = {seed, 3000};
    }
  }
  ASSERT_EQ(ErrName(err), ErrName(ENOSPC)) << mapfs_last_error();
  EXPECT_GE(files.size(), 1000u);
  ASSERT_NO_FATAL_FAILURE(CheckAll(files));
  // Free 200 files; 100 new ones fit.
  int k = 0;
  for (auto it = files.begin(); it != files.end() && k < 200; k++) {
    ASSERT_OK(mapfs_unlink(fs_, it->first.c_str()));
    it = files.erase(it);
  }
  std::string last_dir;
  for (auto& [p, f] : files) last_dir = p.substr(0, p.rfind('/'));
  for (int i = 0; i < 100; i++) {
    std::string p = last_dir + "/again" + std::to_string(i);
    int fd = mapfs_open(fs_, p.c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << p << ": " << strerror(errno);
    ASSERT_EQ(WritePattern(fs_, fd, 900000 + i, 0, 3000), 3000) << p << ": " << strerror(errno);
    ASSERT_OK(mapfs_close(fs_, fd));
    files[p] = {900000 + static_cast<uint64_t>(i), 3000};
  }
  Remount();
  ASSERT_NO_FATAL_FAILURE(CheckAll(files));
  // Listings hold exactly the files that exist.
  std::map<std::string, size_t> per_dir;
  for (auto& [p, f] : files) per_dir[p.substr(0, p.rfind('/'))]++;
  for (auto& [dir, n] : per_dir) {
    mapfs_dir_t* dd = mapfs_opendir(fs_, dir.c_str());
    ASSERT_NE(dd, nullptr);
    size_t count = 0;
    while (mapfs_readdir(dd)) count++;
    mapfs_closedir(dd);
    EXPECT_EQ(count, n + 2) << dir;
  }
}

// On a full pool, an overwrite that needs staging space either happens
// whole or fails with ENOSPC leaving the old bytes (strict and atomic).
TEST_P(EnospcTest, StrictOverwriteOnFullPoolIsAllOrNothing) {
  ASSERT_FD(fd, mapfs_open(fs_, "/target", O_CREAT | O_RDWR | MAPFS_O_STRICT, 0644));
  const uint64_t tsize = 12 * kMiB;
  std::string model = Pattern(1, 0, tsize);
  ASSERT_EQ(mapfs_write(fs_, fd, model.data(), tsize), static_cast<ssize_t>(tsize));
  // Fill the rest of the pool.
  ASSERT_FD(filler, mapfs_open(fs_, "/filler", O_CREAT | O_RDWR, 0644));
  uint64_t fsize = 0;
  for (int i = 0; i < 1000; i++) {
    ssize_t w = WritePattern(fs_, filler, 2, fsize, 256 * kKiB);
    if (w < 0) break;
    fsize += static_cast<uint64_t>(w);
  }
  for (int i = 0; i < 1000; i++) {  // and the crumbs
    std::string p = "/crumb" + std::to_string(i);
    int c = mapfs_open(fs_, p.c_str(), O_CREAT | O_WRONLY, 0644);
    if (c < 0) break;
    ssize_t w = WritePattern(fs_, c, 3, 0, 4096);
    mapfs_close(fs_, c);
    if (w < 0) break;
  }
  int k = 0;
  for (size_t n : {size_t{1} << 20, size_t{4} << 20, size_t{100}, size_t{70000}}) {
    for (int atomic = 0; atomic < 2; atomic++, k++) {
      uint64_t off = 12345 + static_cast<uint64_t>(k) * 777777;
      std::string d = Pattern(100 + k, off, n);
      errno = 0;
      ssize_t w = atomic ? mapfs_pwrite_atomic(fs_, fd, d.data(), n, static_cast<off_t>(off))
                         : mapfs_pwrite(fs_, fd, d.data(), n, static_cast<off_t>(off));
      if (w == static_cast<ssize_t>(n)) {
        model.replace(off, n, d);
      } else {
        EXPECT_EQ(w, -1) << "partial strict overwrite";
        EXPECT_EQ(ErrName(errno), ErrName(ENOSPC));
      }
      std::string got(tsize, '\0');
      ASSERT_EQ(mapfs_pread(fs_, fd, got.data(), tsize, 0), static_cast<ssize_t>(tsize));
      ASSERT_EQ(FirstDiff(got.data(), model.data(), tsize), "") << (atomic ? "atomic " : "strict ") << n << " bytes";
    }
  }
  // Overwrites that fit the redo log need no free page: they succeed on a
  // full pool (whole pages too, which otherwise go to fresh pages).
  for (size_t n : {size_t{4096}, size_t{3 * 4096}, size_t{100}}) {
    uint64_t off = 5 * kMiB;
    std::string d = Pattern(200 + static_cast<int>(n), off, n);
    ASSERT_EQ(mapfs_pwrite(fs_, fd, d.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n))
        << n << " bytes on a full pool: " << ErrName(errno);
    model.replace(off, n, d);
  }
  EXPECT_TRUE(CheckPattern(filler, 2, fsize));
  ASSERT_OK(mapfs_close(fs_, filler));
  ASSERT_OK(mapfs_close(fs_, fd));
  Remount();
  std::string got = ReadAll("/target");
  ASSERT_EQ(got.size(), tsize);
  EXPECT_EQ(FirstDiff(got.data(), model.data(), tsize), "");
}

}  // namespace
}  // namespace mapfs::apitest
