// Consistency modes and persistence through the C API: data and tree
// survive unmount + mount byte for byte in every mode (mount option or
// per-open flag), strict overwrites of every size read back exactly, the
// MAPFS_MODE environment variable, and mkfs/mount argument errors.
#include <sys/statvfs.h>

#include <map>

#include "api/api_util.h"

namespace mapfs::apitest {
namespace {

// How a test picks its mode: at mount, or per open.
struct ModeCase {
  const char* name;
  int mount_mode;  // mapfs_options.mode
  int open_flags;  // or'ed into every open
};
const ModeCase kModeCases[] = {
    {"mount_posix", MAPFS_MODE_POSIX, 0},        {"mount_sync", MAPFS_MODE_SYNC, 0},
    {"mount_strict", MAPFS_MODE_STRICT, 0},      {"open_posix", MAPFS_MODE_STRICT, MAPFS_O_POSIX},
    {"open_sync", MAPFS_MODE_POSIX, MAPFS_O_SYNCMODE}, {"open_strict", MAPFS_MODE_POSIX, MAPFS_O_STRICT},
};

void PrintTo(const ModeCase& c, std::ostream* os) { *os << c.name; }

class ModeTest : public ::testing::TestWithParam<std::tuple<ModeCase, unsigned>> {
 protected:
  void SetUp() override {
    pool_ = std::make_unique<MountedPool>(256 * kMiB, std::get<1>(GetParam()));
    ASSERT_TRUE(pool_->formatted()) << pool_->mkfs_error();
    opts_.mode = Case().mount_mode;
    ASSERT_TRUE(pool_->Mount(&opts_)) << strerror(errno) << " / " << mapfs_last_error();
    fs_ = pool_->fs();
  }
  void TearDown() override {
    if (pool_->fs()) {
      EXPECT_OK(pool_->Unmount());
    }
  }
  const ModeCase& Case() const { return std::get<0>(GetParam()); }
  void Remount() {
    ASSERT_TRUE(pool_->Remount(&opts_)) << strerror(errno) << " / " << mapfs_last_error();
    fs_ = pool_->fs();
  }
  int Open(const char* p, int flags, mode_t m = 0644) { return mapfs_open(fs_, p, flags | Case().open_flags, m); }
  std::string Read(const char* p) {
    int fd = mapfs_open(fs_, p, O_RDONLY);
    if (fd < 0) return "<" + ErrName(errno) + ">";
    struct stat st;
    mapfs_fstat(fs_, fd, &st);
    std::string s(static_cast<size_t>(st.st_size), '\0');
    ssize_t n = mapfs_pread(fs_, fd, s.data(), s.size(), 0);
    mapfs_close(fs_, fd);
    if (n != st.st_size) return "<short read>";
    return s;
  }

  // Builds a tree with files of many sizes written in odd pieces, returns
  // the expected content of each file.
  void BuildTree(std::map<std::string, std::string>* files) {
    ASSERT_OK(mapfs_mkdir(fs_, "/d1", 0755));
    ASSERT_OK(mapfs_mkdir(fs_, "/d1/d2", 0700));
    ASSERT_OK(mapfs_mkdir(fs_, "/d1/d2/d3", 0755));
    const uint64_t sizes[] = {0, 1, 4095, 4096, 4097, 100000, 2 * kMiB, 3 * kMiB + 17, 20 * kMiB + 5};
    int i = 0;
    for (uint64_t size : sizes) {
      std::string path = (i % 2 ? "/d1/d2/f" : "/f") + std::to_string(size);
      std::string data = Pattern(100 + i, 0, size);
      int fd = Open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC);
      ASSERT_GE(fd, 0) << strerror(errno);
      // Second half first (pwrite), then the first half in small writes.
      uint64_t half = size / 2;
      if (size > half) {
        ASSERT_EQ(mapfs_pwrite(fs_, fd, data.data() + half, size - half, static_cast<off_t>(half)),
                  static_cast<ssize_t>(size - half));
      }
      for (uint64_t off = 0; off < half;) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(half - off, 77777));
        ASSERT_EQ(mapfs_write(fs_, fd, data.data() + off, n), static_cast<ssize_t>(n));
        off += n;
      }
      // Overwrite a piece in the middle.
      if (size > 10) {
        std::string over = Pattern(900 + i, size / 3, std::min<uint64_t>(size / 3, 300000));
        ASSERT_EQ(mapfs_pwrite(fs_, fd, over.data(), over.size(), static_cast<off_t>(size / 3)),
                  static_cast<ssize_t>(over.size()));
        data.replace(size / 3, over.size(), over);
      }
      if (i % 3 == 0) {
        ASSERT_OK(mapfs_fsync(fs_, fd));
      }
      ASSERT_OK(mapfs_close(fs_, fd));
      (*files)[path] = data;
      i++;
    }
    // Sparse, truncated, appended files.
    int fd = Open("/sparse", O_CREAT | O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(mapfs_pwrite(fs_, fd, "island", 6, 10 * kMiB), 6);
    ASSERT_OK(mapfs_close(fs_, fd));
    std::string sparse(10 * kMiB + 6, '\0');
    sparse.replace(10 * kMiB, 6, "island");
    (*files)["/sparse"] = sparse;
    fd = Open("/trunc", O_CREAT | O_WRONLY);
    ASSERT_GE(fd, 0);
    std::string t = Pattern(7, 0, 5 * kMiB);
    ASSERT_EQ(mapfs_write(fs_, fd, t.data(), t.size()), static_cast<ssize_t>(t.size()));
    ASSERT_OK(mapfs_ftruncate(fs_, fd, kMiB + 3));
    ASSERT_OK(mapfs_ftruncate(fs_, fd, 2 * kMiB));
    ASSERT_OK(mapfs_close(fs_, fd));
    t.resize(kMiB + 3);
    t.resize(2 * kMiB, '\0');
    (*files)["/trunc"] = t;
    for (int k = 0; k < 50; k++) {
      fd = Open("/log", O_CREAT | O_WRONLY | O_APPEND);
      ASSERT_GE(fd, 0);
      std::string rec = "record " + std::to_string(k) + "\n";
      ASSERT_EQ(mapfs_write(fs_, fd, rec.data(), rec.size()), static_cast<ssize_t>(rec.size()));
      ASSERT_OK(mapfs_close(fs_, fd));
      (*files)["/log"] += rec;
    }
    // Links, renames, removals, attributes.
    ASSERT_OK(mapfs_symlink(fs_, "f4096", "/short-link"));
    ASSERT_OK(mapfs_symlink(fs_, std::string(300, 'L').c_str(), "/long-link"));
    ASSERT_OK(mapfs_link(fs_, "/d1/d2/f100000", "/d1/hard"));
    (*files)["/d1/hard"] = (*files)["/d1/d2/f100000"];
    ASSERT_OK(mapfs_rename(fs_, "/f4095", "/d1/d2/d3/moved"));
    (*files)["/d1/d2/d3/moved"] = (*files)["/f4095"];
    files->erase("/f4095");
    ASSERT_OK(mapfs_mkdir(fs_, "/gone", 0755));
    ASSERT_TRUE(Write("/gone/x", "x"));
    ASSERT_OK(mapfs_unlink(fs_, "/gone/x"));
    ASSERT_OK(mapfs_rmdir(fs_, "/gone"));
    ASSERT_OK(mapfs_chmod(fs_, "/f0", 0600));
    ASSERT_OK(mapfs_chown(fs_, "/f0", 1000, 2000));
    struct timespec ts[2] = {{12345, 678}, {23456, 789}};
    ASSERT_OK(mapfs_utimens(fs_, "/f0", ts));
    ASSERT_OK(mapfs_mkdir(fs_, "/many", 0755));
    for (int k = 0; k < 500; k++) {
      std::string p = "/many/e" + std::to_string(k);
      ASSERT_TRUE(Write(p.c_str(), std::to_string(k)));
      (*files)[p] = std::to_string(k);
    }
  }
  bool Write(const char* p, const std::string& s) {
    int fd = Open(p, O_CREAT | O_WRONLY | O_TRUNC);
    if (fd < 0) return false;
    bool ok = mapfs_write(fs_, fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
    return mapfs_close(fs_, fd) == 0 && ok;
  }
  void CheckTree(const std::map<std::string, std::string>& files) {
    for (auto& [path, want] : files) {
      std::string got = Read(path.c_str());
      ASSERT_EQ(got.size(), want.size()) << path << " " << (got.size() < 40 ? got : "");
      ASSERT_EQ(FirstDiff(got.data(), want.data(), want.size()), "") << path;
    }
    struct stat st;
    ASSERT_OK(mapfs_stat(fs_, "/f0", &st));
    EXPECT_EQ(st.st_mode, S_IFREG | 0600);
    EXPECT_EQ(st.st_uid, 1000u);
    EXPECT_EQ(st.st_gid, 2000u);
    EXPECT_EQ(st.st_atim.tv_sec, 12345);
    EXPECT_EQ(st.st_atim.tv_nsec, 678);
    EXPECT_EQ(st.st_mtim.tv_sec, 23456);
    EXPECT_EQ(st.st_mtim.tv_nsec, 789);
    ASSERT_OK(mapfs_stat(fs_, "/d1/d2", &st));
    EXPECT_EQ(st.st_mode, S_IFDIR | 0700);
    EXPECT_EQ(st.st_nlink, 3u);
    ASSERT_OK(mapfs_stat(fs_, "/d1/hard", &st));
    EXPECT_EQ(st.st_nlink, 2u);
    char buf[512];
    ASSERT_EQ(mapfs_readlink(fs_, "/short-link", buf, sizeof buf), 5);
    EXPECT_EQ(std::string(buf, 5), "f4096");
    ASSERT_EQ(mapfs_readlink(fs_, "/long-link", buf, sizeof buf), 300);
    EXPECT_EQ(std::string(buf, 300), std::string(300, 'L'));
    EXPECT_ERRNO(mapfs_stat(fs_, "/gone", &st), ENOENT);
    EXPECT_ERRNO(mapfs_stat(fs_, "/f4095", &st), ENOENT);
    // The listing of /many is exact.
    mapfs_dir_t* d = mapfs_opendir(fs_, "/many");
    ASSERT_NE(d, nullptr);
    size_t n = 0;
    while (mapfs_readdir(d)) n++;
    mapfs_closedir(d);
    EXPECT_EQ(n, 502u);
  }

  std::unique_ptr<MountedPool> pool_;
  mapfs_t* fs_ = nullptr;
  mapfs_options opts_{};
};

std::string ModeName(const ::testing::TestParamInfo<std::tuple<ModeCase, unsigned>>& i) {
  return std::string(std::get<0>(i.param).name) + (std::get<1>(i.param) == 4096 ? "_page4k" : "_page2m");
}
INSTANTIATE_TEST_SUITE_P(Modes, ModeTest, ::testing::Combine(::testing::ValuesIn(kModeCases), ::testing::Values(4096u, kHugePage)),
                         ModeName);

TEST_P(ModeTest, TreeAndDataSurviveRemount) {
  std::map<std::string, std::string> files;
  ASSERT_NO_FATAL_FAILURE(BuildTree(&files));
  ASSERT_NO_FATAL_FAILURE(CheckTree(files));
  struct statvfs v0, v1;
  ASSERT_OK(mapfs_statvfs(fs_, &v0));
  Remount();
  ASSERT_NO_FATAL_FAILURE(CheckTree(files));
  ASSERT_OK(mapfs_statvfs(fs_, &v1));
  EXPECT_EQ(v0.f_bfree, v1.f_bfree) << "free space changed across a clean remount";
  EXPECT_EQ(v0.f_ffree, v1.f_ffree);
  // Change everything once more and remount with the pool's default mode.
  ASSERT_OK(mapfs_unlink(fs_, "/f4097"));
  ASSERT_OK(mapfs_rename(fs_, "/d1", "/renamed"));
  std::map<std::string, std::string> moved;
  for (auto& [p, d] : files) {
    if (p.rfind("/d1", 0) == 0) moved["/renamed" + p.substr(3)] = d;
    else moved[p] = d;
  }
  ASSERT_TRUE(pool_->Remount(nullptr));
  fs_ = pool_->fs();
  for (auto& [p, d] : moved) {
    if (p == "/f4097") continue;
    std::string got = Read(p.c_str());
    ASSERT_EQ(got.size(), d.size()) << p;
    ASSERT_EQ(FirstDiff(got.data(), d.data(), d.size()), "") << p;
  }
  struct stat st;
  EXPECT_ERRNO(mapfs_stat(fs_, "/f4097", &st), ENOENT);
  EXPECT_ERRNO(mapfs_stat(fs_, "/d1", &st), ENOENT);
}

// Overwrites of 1 B .. 8 MiB at unaligned offsets in place (the strict
// path: undo/redo log for small ones, write-and-swap for large ones) read
// back exactly, now and after a remount.
TEST_P(ModeTest, OverwritesAtUnalignedOffsetsReadBackExactly) {
  const uint64_t size = 24 * kMiB + 4321;
  int fd = Open("/o", O_CREAT | O_RDWR);
  ASSERT_GE(fd, 0);
  std::string model = Pattern(1, 0, size);
  ASSERT_EQ(mapfs_write(fs_, fd, model.data(), size), static_cast<ssize_t>(size));
  testing::Rng rng(99);
  const size_t lens[] = {1, 4096, 65535, 65536, 65537, 1 << 20, 8 << 20, 4096, 1};
  int k = 0;
  for (size_t n : lens) {
    for (int rep = 0; rep < 3; rep++, k++) {
      // Unaligned: odd offsets, some straddling 2 MiB chunk boundaries.
      uint64_t off = rng.Below(size - n - 1) | 1;
      if (rep == 2) {
        uint64_t chunk = 2 * kMiB * (2 + rng.Below(size / (2 * kMiB) - 4));
        off = chunk > n / 2 + 1 ? chunk - n / 2 - 1 : 1;
      }
      if (off + n >= size) off = size - n - 1;
      std::string d = Pattern(1000 + k, off, n);
      ASSERT_EQ(mapfs_pwrite(fs_, fd, d.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n)) << n << "@" << off;
      model.replace(off, n, d);
      // The bytes around the write are untouched and the write is whole.
      uint64_t a = off > 5000 ? off - 5000 : 0, b = std::min(size, off + n + 5000);
      std::string got(b - a, '\0');
      ASSERT_EQ(mapfs_pread(fs_, fd, got.data(), got.size(), static_cast<off_t>(a)), static_cast<ssize_t>(got.size()));
      ASSERT_EQ(FirstDiff(got.data(), model.data() + a, got.size(), a), "") << "after writing " << n << " at " << off;
    }
  }
  struct stat st;
  ASSERT_OK(mapfs_fstat(fs_, fd, &st));
  EXPECT_EQ(st.st_size, static_cast<off_t>(size));
  // Extending overwrites: start inside, end past EOF.
  std::string tail = Pattern(77, size - 100, 3 * kMiB);
  ASSERT_EQ(mapfs_pwrite(fs_, fd, tail.data(), tail.size(), static_cast<off_t>(size - 100)), static_cast<ssize_t>(tail.size()));
  model.replace(size - 100, 100, tail.substr(0, 100));
  model += tail.substr(100);
  ASSERT_OK(mapfs_close(fs_, fd));
  std::string got = Read("/o");
  ASSERT_EQ(got.size(), model.size());
  ASSERT_EQ(FirstDiff(got.data(), model.data(), model.size()), "");
  Remount();
  got = Read("/o");
  ASSERT_EQ(got.size(), model.size());
  ASSERT_EQ(FirstDiff(got.data(), model.data(), model.size()), "") << "after remount";
}

// Strict mode swaps whole pages of large files for fresh ones (a single
// page with one page-table entry store): page writes after a large
// (staged) overwrite, single pages written again and again, and writes with
// partial pages read back exactly through pread, through a map of the file
// made afterwards (this process had the old pages mapped), and after a
// remount. In the other modes the same writes go in place.
TEST_P(ModeTest, PageOverwritesReadBackThroughReadsMapsAndRemounts) {
  const uint64_t size = 20 * kMiB;
  int fd = Open("/s", O_CREAT | O_RDWR);
  ASSERT_GE(fd, 0);
  std::string model = Pattern(3, 0, size);
  ASSERT_EQ(mapfs_pwrite(fs_, fd, model.data(), size, 0), static_cast<ssize_t>(size));
  // Larger than one swap transaction: staged and swapped in whole.
  std::string big = Pattern(4, kMiB + 123, 9 * kMiB);
  ASSERT_EQ(mapfs_pwrite(fs_, fd, big.data(), big.size(), kMiB + 123), static_cast<ssize_t>(big.size()));
  model.replace(kMiB + 123, big.size(), big);
  testing::Rng rng(7);
  for (int k = 0; k < 300; k++) {
    uint64_t off = rng.Below(size / 4096 - 4) * 4096, n = 4096;
    if (k % 5 == 1) off = 8192;                       // the same page again
    if (k % 5 == 2) n = 3 * 4096;                     // several pages
    if (k % 5 == 3) off += 100, n = 2 * 4096 + 300;   // partial head and tail
    std::string d = Pattern(100 + k, off, n);
    ASSERT_EQ(mapfs_pwrite(fs_, fd, d.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
    model.replace(off, n, d);
    std::string got(n + 200, '\0');
    uint64_t a = off >= 100 ? off - 100 : 0;
    ASSERT_EQ(mapfs_pread(fs_, fd, got.data(), got.size(), static_cast<off_t>(a)), static_cast<ssize_t>(got.size()));
    ASSERT_EQ(FirstDiff(got.data(), model.data() + a, got.size(), a), "") << "write " << k << ": " << n << "@" << off;
  }
  struct stat st;
  ASSERT_OK(mapfs_fstat(fs_, fd, &st));
  EXPECT_EQ(st.st_size, static_cast<off_t>(size));
  size_t cap = 0;
  auto* p = static_cast<const char*>(mapfs_mmap(fs_, fd, &cap));
  ASSERT_NE(p, nullptr);
  ASSERT_GE(cap, size);
  ASSERT_EQ(FirstDiff(p, model.data(), size), "") << "through a map";
  ASSERT_OK(mapfs_close(fs_, fd));
  Remount();
  std::string got = Read("/s");
  ASSERT_EQ(got.size(), model.size());
  ASSERT_EQ(FirstDiff(got.data(), model.data(), model.size()), "") << "after remount";
}

// The same sizes through mapfs_pwrite_atomic, whatever the mode.
TEST_P(ModeTest, AtomicWritesReadBackExactly) {
  const uint64_t size = 12 * kMiB + 7;
  int fd = Open("/a", O_CREAT | O_RDWR);
  ASSERT_GE(fd, 0);
  std::string model = Pattern(2, 0, size);
  ASSERT_EQ(mapfs_write(fs_, fd, model.data(), size), static_cast<ssize_t>(size));
  testing::Rng rng(5);
  int k = 0;
  for (size_t n : {size_t{1}, size_t{4096}, size_t{65536}, size_t{1 << 20}, size_t{8 << 20}}) {
    uint64_t off = rng.Below(size - n) | 1;
    std::string d = Pattern(50 + k++, off, n);
    ASSERT_EQ(mapfs_pwrite_atomic(fs_, fd, d.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
    model.replace(off, n, d);
  }
  ASSERT_OK(mapfs_close(fs_, fd));
  Remount();
  std::string got = Read("/a");
  ASSERT_EQ(got.size(), model.size());
  ASSERT_EQ(FirstDiff(got.data(), model.data(), model.size()), "");
}

// ---------------------------------------------------------------------------
// Mode selection: environment, options, pool default.

class ModeSelectTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("MAPFS_MODE"); }
};

TEST_F(ModeSelectTest, MapfsModeEnvironmentVariable) {
  MountedPool pool(64 * kMiB);
  ASSERT_TRUE(pool.formatted()) << pool.mkfs_error();
  for (const char* bad : {"bogus", "", "STRICT", "posix ", "3"}) {
    SCOPED_TRACE(std::string("MAPFS_MODE=\"") + bad + "\"");
    setenv("MAPFS_MODE", bad, 1);
    EXPECT_NULL_ERRNO(mapfs_mount(pool.path().c_str(), nullptr), EINVAL);
    mapfs_options def{MAPFS_MODE_DEFAULT};
    EXPECT_NULL_ERRNO(mapfs_mount(pool.path().c_str(), &def), EINVAL);
    // An explicit mode wins over the environment.
    mapfs_options strict{MAPFS_MODE_STRICT};
    mapfs_t* fs = mapfs_mount(pool.path().c_str(), &strict);
    EXPECT_NE(fs, nullptr) << strerror(errno);
    if (fs) {
      EXPECT_OK(mapfs_unmount(fs));
    }
  }
  for (const char* good : {"posix", "sync", "strict"}) {
    setenv("MAPFS_MODE", good, 1);
    mapfs_t* fs = mapfs_mount(pool.path().c_str(), nullptr);
    ASSERT_NE(fs, nullptr) << good << ": " << strerror(errno) << " / " << mapfs_last_error();
    int fd = mapfs_open(fs, (std::string("/") + good).c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(mapfs_pwrite(fs, fd, good, strlen(good), 0), static_cast<ssize_t>(strlen(good)));
    ASSERT_EQ(mapfs_pwrite(fs, fd, "X", 1, 1), 1);
    EXPECT_OK(mapfs_close(fs, fd));
    EXPECT_OK(mapfs_unmount(fs));
  }
  unsetenv("MAPFS_MODE");
  mapfs_t* fs = mapfs_mount(pool.path().c_str(), nullptr);
  ASSERT_NE(fs, nullptr);
  char b[8];
  for (const char* good : {"posix", "sync", "strict"}) {
    int fd = mapfs_open(fs, (std::string("/") + good).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ssize_t n = mapfs_read(fs, fd, b, sizeof b);
    ASSERT_EQ(n, static_cast<ssize_t>(strlen(good)));
    std::string want = good;
    want[1] = 'X';
    EXPECT_EQ(std::string(b, static_cast<size_t>(n)), want);
    mapfs_close(fs, fd);
  }
  EXPECT_OK(mapfs_unmount(fs));
}

TEST_F(ModeSelectTest, BadMountOptions) {
  MountedPool pool(64 * kMiB);
  ASSERT_TRUE(pool.formatted());
  for (int m : {3, 7, 100}) {
    mapfs_options o{m};
    errno = 0;
    mapfs_t* fs = mapfs_mount(pool.path().c_str(), &o);
    EXPECT_EQ(fs, nullptr) << "mode " << m;
    EXPECT_EQ(errno, EINVAL) << "mode " << m;
    if (fs) mapfs_unmount(fs);
  }
  EXPECT_NULL_ERRNO(mapfs_mount("/dev/shm/mapfs-api-no-such-pool", nullptr), ENOENT);
}

// Only MAPFS_MODE_DEFAULT (-1) is a valid negative mode.
TEST_F(ModeSelectTest, NegativeModeOtherThanDefaultIsEinval) {
  MountedPool pool(64 * kMiB);
  ASSERT_TRUE(pool.formatted());
  mapfs_options o{-2};
  errno = 0;
  mapfs_t* fs = mapfs_mount(pool.path().c_str(), &o);
  EXPECT_EQ(fs, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (fs) mapfs_unmount(fs);
  mapfs_mkfs_options mo{64 * kMiB, 4096, -2, nullptr};
  EXPECT_ERRNO(mapfs_mkfs(pool.path().c_str(), &mo), EINVAL);
}

TEST_F(ModeSelectTest, PerOpenModeFlagsCoexist) {
  MountedPool pool(128 * kMiB, 4096, MAPFS_MODE_POSIX);
  ASSERT_TRUE(pool.formatted());
  ASSERT_TRUE(pool.Mount());
  mapfs_t* fs = pool.fs();
  const int flags[] = {0, MAPFS_O_POSIX, MAPFS_O_SYNCMODE, MAPFS_O_STRICT, O_SYNC, O_DSYNC};
  std::map<std::string, std::string> files;
  int i = 0;
  for (int f : flags) {
    std::string p = "/m" + std::to_string(i);
    int fd = mapfs_open(fs, p.c_str(), O_CREAT | O_RDWR | f, 0644);
    ASSERT_GE(fd, 0) << std::hex << f << ": " << strerror(errno);
    std::string d = Pattern(i, 0, 3 * kMiB + 5);
    ASSERT_EQ(mapfs_write(fs, fd, d.data(), d.size()), static_cast<ssize_t>(d.size()));
    std::string o = Pattern(i + 50, 12345, 70000);
    ASSERT_EQ(mapfs_pwrite(fs, fd, o.data(), o.size(), 12345), static_cast<ssize_t>(o.size()));
    d.replace(12345, o.size(), o);
    // The mode flags are not visible as file status.
    struct stat st;
    ASSERT_OK(mapfs_fstat(fs, fd, &st));
    EXPECT_EQ(st.st_mode, S_IFREG | 0644);
    ASSERT_OK(mapfs_close(fs, fd));
    files[p] = d;
    i++;
  }
  ASSERT_TRUE(pool.Remount());
  fs = pool.fs();
  for (auto& [p, d] : files) {
    int fd = mapfs_open(fs, p.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    std::string got(d.size(), '\0');
    ASSERT_EQ(mapfs_read(fs, fd, got.data(), got.size()), static_cast<ssize_t>(d.size()));
    EXPECT_EQ(FirstDiff(got.data(), d.data(), d.size()), "") << p;
    mapfs_close(fs, fd);
  }
}

TEST_F(ModeSelectTest, PoolDefaultModeFromMkfs) {
  for (int m : {MAPFS_MODE_DEFAULT, MAPFS_MODE_POSIX, MAPFS_MODE_SYNC, MAPFS_MODE_STRICT}) {
    MountedPool pool(64 * kMiB, 4096, m);
    ASSERT_TRUE(pool.formatted()) << m << ": " << pool.mkfs_error();
    ASSERT_TRUE(pool.Mount()) << m;
    int fd = mapfs_open(pool.fs(), "/x", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(mapfs_write(pool.fs(), fd, "abcdef", 6), 6);
    ASSERT_EQ(mapfs_pwrite(pool.fs(), fd, "ZZ", 2, 2), 2);
    ASSERT_OK(mapfs_close(pool.fs(), fd));
    ASSERT_TRUE(pool.Remount());
    int fd2 = mapfs_open(pool.fs(), "/x", O_RDONLY);
    char b[6];
    ASSERT_EQ(mapfs_read(pool.fs(), fd2, b, 6), 6);
    EXPECT_EQ(std::string(b, 6), "abZZef");
    mapfs_close(pool.fs(), fd2);
  }
}

TEST_F(ModeSelectTest, MkfsArgumentErrors) {
  testing::TempPool tp(16 * kMiB);
  mapfs_mkfs_options o{64 * kMiB, 8192, MAPFS_MODE_DEFAULT, nullptr};
  EXPECT_ERRNO(mapfs_mkfs(tp.path().c_str(), &o), EINVAL);
  o = {64 * kMiB, 4096, 3, nullptr};
  EXPECT_ERRNO(mapfs_mkfs(tp.path().c_str(), &o), EINVAL);
  o = {1 * kMiB, 4096, MAPFS_MODE_DEFAULT, nullptr};
  EXPECT_ERRNO(mapfs_mkfs(tp.path().c_str(), &o), EINVAL);
  o = {64 * kMiB, 4096, MAPFS_MODE_DEFAULT, "btree"};  // not a file mapping design
  EXPECT_ERRNO(mapfs_mkfs(tp.path().c_str(), &o), EINVAL);
  o = {64 * kMiB, 0, MAPFS_MODE_DEFAULT, nullptr};  // 0 = default page size
  EXPECT_OK(mapfs_mkfs(tp.path().c_str(), &o));
  mapfs_t* fs = mapfs_mount(tp.path().c_str(), nullptr);
  ASSERT_NE(fs, nullptr);
  struct statvfs v;
  ASSERT_OK(mapfs_statvfs(fs, &v));
  EXPECT_EQ(v.f_frsize, 4096u);
  EXPECT_GT(v.f_blocks, 0u);
  EXPECT_LE(v.f_bfree, v.f_blocks);
  EXPECT_EQ(v.f_namemax, 255u);
  EXPECT_OK(mapfs_unmount(fs));
  // mkfs over an existing pool starts afresh.
  fs = mapfs_mount(tp.path().c_str(), nullptr);
  ASSERT_NE(fs, nullptr);
  ASSERT_OK(mapfs_mkdir(fs, "/old", 0755));
  ASSERT_OK(mapfs_unmount(fs));
  ASSERT_OK(mapfs_mkfs(tp.path().c_str(), &o));
  fs = mapfs_mount(tp.path().c_str(), nullptr);
  ASSERT_NE(fs, nullptr);
  struct stat st;
  EXPECT_ERRNO(mapfs_stat(fs, "/old", &st), ENOENT);
  EXPECT_OK(mapfs_unmount(fs));
}

// A file that is not a pool is refused with an error, not a crash.
TEST_F(ModeSelectTest, MountRefusesGarbage) {
  testing::TempPool tp(16 * kMiB);
  int fd = ::open(tp.path().c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  std::string junk = Pattern(1, 0, 1 << 20);
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  ::close(fd);
  errno = 0;
  mapfs_t* fs = mapfs_mount(tp.path().c_str(), nullptr);
  EXPECT_EQ(fs, nullptr);
  EXPECT_NE(errno, 0);
  EXPECT_STRNE(mapfs_last_error(), "");
  if (fs) mapfs_unmount(fs);
  // An empty file too.
  fd = ::open(tp.path().c_str(), O_WRONLY | O_TRUNC);
  ::close(fd);
  EXPECT_EQ(mapfs_mount(tp.path().c_str(), nullptr), nullptr);
}

TEST(ApiVersion, VersionStrings) {
  const char* v = mapfs_version();
  ASSERT_NE(v, nullptr);
  int a, b, c;
  EXPECT_EQ(sscanf(v, "%d.%d.%d", &a, &b, &c), 3) << v;
  // The same version the shared library and the package carry.
  EXPECT_STREQ(v, MAPFS_PROJECT_VERSION);
  EXPECT_GT(mapfs_format_version(), 0u);
}

}  // namespace
}  // namespace mapfs::apitest
