// Helpers for the C API suites: a formatted and mounted pool, errno checks,
// deterministic file contents, and a harness that runs one sequence of calls
// on mapfs and on a real tmpfs directory and compares what they return.
#pragma once

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mapfs/mapfs.h"
#include "test_util.h"

namespace mapfs::apitest {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;
constexpr unsigned kHugePage = 2u * 1024 * 1024;

inline std::string ErrName(int e) {
  const char* n = strerrorname_np(e);
  return n ? n : ("errno " + std::to_string(e));
}

// Expects `expr` to fail with -1 (or NULL) and errno `err`.
#define EXPECT_ERRNO(expr, err)                                                                       \
  do {                                                                                                \
    errno = 0;                                                                                        \
    auto _r = (expr);                                                                                 \
    int _e = errno;                                                                                   \
    EXPECT_EQ(_r, -1) << #expr;                                                                       \
    EXPECT_EQ(::mapfs::apitest::ErrName(_e), ::mapfs::apitest::ErrName(err))                          \
        << #expr << " (" << mapfs_last_error() << ")";                                                \
  } while (0)
#define EXPECT_NULL_ERRNO(expr, err)                                                                  \
  do {                                                                                                \
    errno = 0;                                                                                        \
    auto _r = (expr);                                                                                 \
    int _e = errno;                                                                                   \
    EXPECT_EQ(_r, nullptr) << #expr;                                                                  \
    EXPECT_EQ(::mapfs::apitest::ErrName(_e), ::mapfs::apitest::ErrName(err))                          \
        << #expr << " (" << mapfs_last_error() << ")";                                                \
  } while (0)
// Expects `expr` to return `val`; on failure shows errno.
#define EXPECT_OK(expr) EXPECT_EQ((expr), 0) << #expr << ": " << strerror(errno) << " (" << mapfs_last_error() << ")"
#define ASSERT_OK(expr) ASSERT_EQ((expr), 0) << #expr << ": " << strerror(errno) << " (" << mapfs_last_error() << ")"
#define ASSERT_FD(var, expr)                                                                          \
  int var = (expr);                                                                                   \
  ASSERT_GE(var, 0) << #expr << ": " << strerror(errno) << " (" << mapfs_last_error() << ")"

// Byte `i` of the content generated from `seed`: position-dependent, so any
// range can be checked on its own.
inline uint8_t PatByte(uint64_t seed, uint64_t i) {
  uint64_t x = ((i >> 3) + 1) * 0x9E3779B97F4A7C15ull ^ (seed * 0xD1B54A32D192ED03ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<uint8_t>(x >> ((i & 7) * 8));
}
inline void Fill(uint64_t seed, uint64_t off, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  for (size_t k = 0; k < n; k++) p[k] = PatByte(seed, off + k);
}
inline std::string Pattern(uint64_t seed, uint64_t off, size_t n) {
  std::string s(n, '\0');
  Fill(seed, off, s.data(), n);
  return s;
}
// Empty string when equal, else where and how they differ.
inline std::string FirstDiff(const void* got, const void* want, size_t n, uint64_t base = 0) {
  auto* a = static_cast<const uint8_t*>(got);
  auto* b = static_cast<const uint8_t*>(want);
  if (std::memcmp(a, b, n) == 0) return "";
  size_t i = 0;
  while (a[i] == b[i]) i++;
  size_t j = n;
  while (a[j - 1] == b[j - 1]) j--;
  char msg[160];
  snprintf(msg, sizeof msg, "bytes differ in [%llu, %llu): first got 0x%02x want 0x%02x",
           static_cast<unsigned long long>(base + i), static_cast<unsigned long long>(base + j), a[i], b[i]);
  return msg;
}

// A pool formatted with mapfs_mkfs on a TempPool path and mounted.
class MountedPool {
 public:
  explicit MountedPool(uint64_t size = 256 * kMiB, unsigned page_size = 4096, int mode = MAPFS_MODE_DEFAULT)
      : pool_(std::min<uint64_t>(size, 64 * kMiB)) {
    mapfs_mkfs_options o{};
    o.size = size;
    o.page_size = page_size;
    o.mode = mode;
    o.files = testing::TestFiles();
    mkfs_rc_ = mapfs_mkfs(pool_.path().c_str(), &o);
    mkfs_errno_ = errno;
  }
  ~MountedPool() {
    if (fs_) mapfs_unmount(fs_);
  }
  // Mounts (after mkfs); false + errno on failure.
  bool Mount(const mapfs_options* o = nullptr) {
    fs_ = mapfs_mount(pool_.path().c_str(), o);
    return fs_ != nullptr;
  }
  int Unmount() {
    int rc = mapfs_unmount(fs_);
    fs_ = nullptr;
    return rc;
  }
  bool Remount(const mapfs_options* o = nullptr) {
    if (fs_ && Unmount() != 0) return false;
    return Mount(o);
  }
  bool formatted() const { return mkfs_rc_ == 0; }
  std::string mkfs_error() const { return strerror(mkfs_errno_) + std::string(" / ") + mapfs_last_error(); }
  mapfs_t* fs() const { return fs_; }
  const std::string& path() const { return pool_.path(); }

 private:
  testing::TempPool pool_;
  mapfs_t* fs_ = nullptr;
  int mkfs_rc_ = -1, mkfs_errno_ = 0;
};

// Base fixture: a fresh pool per test, mounted in SetUp.
class ApiTest : public ::testing::Test {
 protected:
  virtual uint64_t PoolSize() const { return 256 * kMiB; }
  virtual unsigned PageSize() const { return 4096; }
  virtual int PoolMode() const { return MAPFS_MODE_DEFAULT; }
  void SetUp() override {
    pool_ = std::make_unique<MountedPool>(PoolSize(), PageSize(), PoolMode());
    ASSERT_TRUE(pool_->formatted()) << "mkfs: " << pool_->mkfs_error();
    ASSERT_TRUE(pool_->Mount()) << "mount: " << strerror(errno) << " / " << mapfs_last_error();
    fs_ = pool_->fs();
  }
  void TearDown() override {
    if (pool_ && pool_->fs()) {
      EXPECT_OK(pool_->Unmount());
    }
    pool_.reset();
  }
  void Remount(const mapfs_options* o = nullptr) {
    ASSERT_TRUE(pool_->Remount(o)) << "remount: " << strerror(errno) << " / " << mapfs_last_error();
    fs_ = pool_->fs();
  }

  // Small conveniences on fs_.
  std::string ReadAll(const char* path) {
    int fd = mapfs_open(fs_, path, O_RDONLY);
    if (fd < 0) return "<open " + ErrName(errno) + ">";
    std::string out;
    char buf[65536];
    for (;;) {
      ssize_t n = mapfs_read(fs_, fd, buf, sizeof buf);
      if (n < 0) {
        out += "<read " + ErrName(errno) + ">";
        break;
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    mapfs_close(fs_, fd);
    return out;
  }
  bool WriteFile(const char* path, const std::string& data, int extra_flags = 0) {
    int fd = mapfs_open(fs_, path, O_CREAT | O_WRONLY | O_TRUNC | extra_flags, 0644);
    if (fd < 0) return false;
    bool ok = data.empty() || mapfs_write(fs_, fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
    return mapfs_close(fs_, fd) == 0 && ok;
  }
  // Checks [0, size) of `path` against Pattern(seed) in 1 MiB pieces.
  ::testing::AssertionResult CheckPattern(int fd, uint64_t seed, uint64_t size, uint64_t from = 0) {
    // Reused buffers: allocating 2 MiB per call costs more than the check.
    static std::vector<char> got(kMiB), want(kMiB);
    for (uint64_t off = from; off < size;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kMiB, size - off));
      ssize_t r = mapfs_pread(fs_, fd, got.data(), n, static_cast<off_t>(off));
      if (r != static_cast<ssize_t>(n))
        return ::testing::AssertionFailure() << "pread at " << off << " returned " << r << " (" << strerror(errno) << ")";
      Fill(seed, off, want.data(), n);
      std::string d = FirstDiff(got.data(), want.data(), n, off);
      if (!d.empty()) return ::testing::AssertionFailure() << d;
      off += n;
    }
    return ::testing::AssertionSuccess();
  }
  struct stat Stat(const char* path) {
    struct stat st {};
    EXPECT_OK(mapfs_stat(fs_, path, &st)) << path;
    return st;
  }
  struct stat Fstat(int fd) {
    struct stat st {};
    EXPECT_OK(mapfs_fstat(fs_, fd, &st));
    return st;
  }
  bool Exists(const char* path) {
    struct stat st;
    return mapfs_lstat(fs_, path, &st) == 0;
  }

  std::unique_ptr<MountedPool> pool_;
  mapfs_t* fs_ = nullptr;
};

// The same fixture, parameterised by the pool's page size.
class ApiPageTest : public ApiTest, public ::testing::WithParamInterface<unsigned> {
 protected:
  unsigned PageSize() const override { return GetParam(); }
};
inline std::string PageName(const ::testing::TestParamInfo<unsigned>& i) {
  return i.param == 4096 ? "page4k" : "page2m";
}

// ---------------------------------------------------------------------------
// Linux parity: one interface, two implementations.

class Target {
 public:
  virtual ~Target() = default;
  virtual const char* Name() const = 0;
  virtual int Open(const char* p, int flags, mode_t m) = 0;
  virtual int Close(int fd) = 0;
  virtual int Dup(int fd) = 0;
  virtual int Dup2(int fd, int nfd) = 0;
  virtual ssize_t Read(int fd, void* b, size_t n) = 0;
  virtual ssize_t Write(int fd, const void* b, size_t n) = 0;
  virtual ssize_t Pread(int fd, void* b, size_t n, off_t o) = 0;
  virtual ssize_t Pwrite(int fd, const void* b, size_t n, off_t o) = 0;
  virtual off_t Lseek(int fd, off_t o, int w) = 0;
  virtual int Fsync(int fd) = 0;
  virtual int Ftruncate(int fd, off_t n) = 0;
  virtual int Truncate(const char* p, off_t n) = 0;
  virtual int Fallocate(int fd, int mode, off_t o, off_t n) = 0;
  virtual int Fstat(int fd, struct stat* st) = 0;
  virtual int Stat(const char* p, struct stat* st) = 0;
  virtual int Lstat(const char* p, struct stat* st) = 0;
  virtual int Unlink(const char* p) = 0;
  virtual int Rename(const char* a, const char* b, unsigned flags) = 0;
  virtual int Link(const char* a, const char* b) = 0;
  virtual int Symlink(const char* t, const char* p) = 0;
  virtual ssize_t Readlink(const char* p, char* b, size_t n) = 0;
  virtual int Mkdir(const char* p, mode_t m) = 0;
  virtual int Rmdir(const char* p) = 0;
  virtual int Chmod(const char* p, mode_t m) = 0;
  virtual int Fchmod(int fd, mode_t m) = 0;
  virtual int Chown(const char* p, uid_t u, gid_t g) = 0;
  virtual int Lchown(const char* p, uid_t u, gid_t g) = 0;
  virtual int Utimens(const char* p, const struct timespec ts[2]) = 0;
  virtual int Lutimens(const char* p, const struct timespec ts[2]) = 0;
  // Names and d_types of a directory's entries, sorted ("." and ".." too).
  virtual int List(const char* p, std::vector<std::string>* out) = 0;
};

class MapfsTarget : public Target {
 public:
  explicit MapfsTarget(mapfs_t* fs) : fs_(fs) {}
  const char* Name() const override { return "mapfs"; }
  int Open(const char* p, int f, mode_t m) override { return mapfs_open(fs_, p, f, m); }
  int Close(int fd) override { return mapfs_close(fs_, fd); }
  int Dup(int fd) override { return mapfs_dup(fs_, fd); }
  int Dup2(int fd, int nfd) override { return mapfs_dup2(fs_, fd, nfd); }
  ssize_t Read(int fd, void* b, size_t n) override { return mapfs_read(fs_, fd, b, n); }
  ssize_t Write(int fd, const void* b, size_t n) override { return mapfs_write(fs_, fd, b, n); }
  ssize_t Pread(int fd, void* b, size_t n, off_t o) override { return mapfs_pread(fs_, fd, b, n, o); }
  ssize_t Pwrite(int fd, const void* b, size_t n, off_t o) override { return mapfs_pwrite(fs_, fd, b, n, o); }
  off_t Lseek(int fd, off_t o, int w) override { return mapfs_lseek(fs_, fd, o, w); }
  int Fsync(int fd) override { return mapfs_fsync(fs_, fd); }
  int Ftruncate(int fd, off_t n) override { return mapfs_ftruncate(fs_, fd, n); }
  int Truncate(const char* p, off_t n) override { return mapfs_truncate(fs_, p, n); }
  int Fallocate(int fd, int m, off_t o, off_t n) override { return mapfs_fallocate(fs_, fd, m, o, n); }
  int Fstat(int fd, struct stat* st) override { return mapfs_fstat(fs_, fd, st); }
  int Stat(const char* p, struct stat* st) override { return mapfs_stat(fs_, p, st); }
  int Lstat(const char* p, struct stat* st) override { return mapfs_lstat(fs_, p, st); }
  int Unlink(const char* p) override { return mapfs_unlink(fs_, p); }
  int Rename(const char* a, const char* b, unsigned f) override { return mapfs_rename2(fs_, a, b, f); }
  int Link(const char* a, const char* b) override { return mapfs_link(fs_, a, b); }
  int Symlink(const char* t, const char* p) override { return mapfs_symlink(fs_, t, p); }
  ssize_t Readlink(const char* p, char* b, size_t n) override { return mapfs_readlink(fs_, p, b, n); }
  int Mkdir(const char* p, mode_t m) override { return mapfs_mkdir(fs_, p, m); }
  int Rmdir(const char* p) override { return mapfs_rmdir(fs_, p); }
  int Chmod(const char* p, mode_t m) override { return mapfs_chmod(fs_, p, m); }
  int Fchmod(int fd, mode_t m) override { return mapfs_fchmod(fs_, fd, m); }
  int Chown(const char* p, uid_t u, gid_t g) override { return mapfs_chown(fs_, p, u, g); }
  int Lchown(const char* p, uid_t u, gid_t g) override { return mapfs_lchown(fs_, p, u, g); }
  int Utimens(const char* p, const struct timespec ts[2]) override { return mapfs_utimens(fs_, p, ts); }
  int Lutimens(const char* p, const struct timespec ts[2]) override { return mapfs_lutimens(fs_, p, ts); }
  int List(const char* p, std::vector<std::string>* out) override {
    mapfs_dir_t* d = mapfs_opendir(fs_, p);
    if (d == nullptr) return -1;
    out->clear();
    errno = 0;
    while (struct dirent* e = mapfs_readdir(d)) out->push_back(std::string(e->d_name) + ":" + std::to_string(e->d_type));
    int e = errno;
    mapfs_closedir(d);
    std::sort(out->begin(), out->end());
    errno = e;
    return e ? -1 : 0;
  }

 private:
  mapfs_t* fs_;
};

// The real kernel on a fresh directory in /dev/shm (tmpfs); "/x" means
// that directory's "x". umask is 0 while it lives, for the kernel and for
// mapfs (which caches the mask: told by mapfs_refresh_credentials).
class LinuxTarget : public Target {
 public:
  LinuxTarget() {
    static std::atomic<int> n{0};
    root_ = "/dev/shm/mapfs-ref-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    ::mkdir(root_.c_str(), 0755);
    old_umask_ = ::umask(0);
    mapfs_refresh_credentials();
  }
  ~LinuxTarget() override {
    ::umask(old_umask_);
    mapfs_refresh_credentials();
    std::string cmd = "rm -rf '" + root_ + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", root_.c_str());
  }
  const std::string& root() const { return root_; }
  const char* Name() const override { return "linux"; }
  std::string P(const char* p) const { return p[0] == '/' ? root_ + p : root_ + "/" + p; }
  int Open(const char* p, int f, mode_t m) override { return ::open(P(p).c_str(), f, m); }
  int Close(int fd) override { return ::close(fd); }
  int Dup(int fd) override { return ::dup(fd); }
  int Dup2(int fd, int nfd) override { return ::dup2(fd, nfd); }
  ssize_t Read(int fd, void* b, size_t n) override { return ::read(fd, b, n); }
  ssize_t Write(int fd, const void* b, size_t n) override { return ::write(fd, b, n); }
  ssize_t Pread(int fd, void* b, size_t n, off_t o) override { return ::pread(fd, b, n, o); }
  ssize_t Pwrite(int fd, const void* b, size_t n, off_t o) override { return ::pwrite(fd, b, n, o); }
  off_t Lseek(int fd, off_t o, int w) override { return ::lseek(fd, o, w); }
  int Fsync(int fd) override { return ::fsync(fd); }
  int Ftruncate(int fd, off_t n) override { return ::ftruncate(fd, n); }
  int Truncate(const char* p, off_t n) override { return ::truncate(P(p).c_str(), n); }
  int Fallocate(int fd, int m, off_t o, off_t n) override { return ::fallocate(fd, m, o, n); }
  int Fstat(int fd, struct stat* st) override { return ::fstat(fd, st); }
  int Stat(const char* p, struct stat* st) override { return ::stat(P(p).c_str(), st); }
  int Lstat(const char* p, struct stat* st) override { return ::lstat(P(p).c_str(), st); }
  int Unlink(const char* p) override { return ::unlink(P(p).c_str()); }
  int Rename(const char* a, const char* b, unsigned f) override {
    return ::renameat2(AT_FDCWD, P(a).c_str(), AT_FDCWD, P(b).c_str(), f);
  }
  int Link(const char* a, const char* b) override { return ::link(P(a).c_str(), P(b).c_str()); }
  int Symlink(const char* t, const char* p) override { return ::symlink(t, P(p).c_str()); }
  ssize_t Readlink(const char* p, char* b, size_t n) override { return ::readlink(P(p).c_str(), b, n); }
  int Mkdir(const char* p, mode_t m) override { return ::mkdir(P(p).c_str(), m); }
  int Rmdir(const char* p) override { return ::rmdir(P(p).c_str()); }
  int Chmod(const char* p, mode_t m) override { return ::chmod(P(p).c_str(), m); }
  int Fchmod(int fd, mode_t m) override { return ::fchmod(fd, m); }
  int Chown(const char* p, uid_t u, gid_t g) override { return ::chown(P(p).c_str(), u, g); }
  int Lchown(const char* p, uid_t u, gid_t g) override { return ::lchown(P(p).c_str(), u, g); }
  int Utimens(const char* p, const struct timespec ts[2]) override {
    return ::utimensat(AT_FDCWD, P(p).c_str(), ts, 0);
  }
  int Lutimens(const char* p, const struct timespec ts[2]) override {
    return ::utimensat(AT_FDCWD, P(p).c_str(), ts, AT_SYMLINK_NOFOLLOW);
  }
  int List(const char* p, std::vector<std::string>* out) override {
    DIR* d = ::opendir(P(p).c_str());
    if (d == nullptr) return -1;
    out->clear();
    errno = 0;
    while (struct dirent* e = ::readdir(d)) out->push_back(std::string(e->d_name) + ":" + std::to_string(e->d_type));
    int e = errno;
    ::closedir(d);
    std::sort(out->begin(), out->end());
    errno = e;
    return e ? -1 : 0;
  }

 private:
  std::string root_;
  mode_t old_umask_;
};

// Runs calls on a Target and records a line per call: what it returned
// (descriptors as "fd", byte counts and offsets as numbers, read data,
// the comparable fields of a stat) and errno on failure.
class Rec {
 public:
  explicit Rec(Target* t) : t_(t) {}
  std::vector<std::string> log;

  int open(const char* p, int f, mode_t m = 0) {
    return Fd(t_->Open(p, f, m), Fmt("open(%s, %s, 0%o)", p, Flags(f).c_str(), m));
  }
  int close(int fd) { return Int(t_->Close(fd), "close"); }
  int dup(int fd) { return Fd(t_->Dup(fd), "dup"); }
  // Descriptor numbers differ between the targets: "nfd" when it returned nfd.
  int dup2(int fd, int nfd) {
    int r = t_->Dup2(fd, nfd);
    int e = errno;
    Add("dup2", r < 0 ? Err(e) : r == nfd ? "nfd" : "other fd");
    errno = e;
    return r;
  }
  ssize_t read(int fd, size_t n) {
    std::string b(n, '\0');
    ssize_t r = t_->Read(fd, b.data(), n);
    return Data(r, b, Fmt("read(%zu)", n));
  }
  ssize_t write(int fd, const std::string& s) { return Int(t_->Write(fd, s.data(), s.size()), Fmt("write(%zu)", s.size())); }
  ssize_t pread(int fd, size_t n, off_t o) {
    std::string b(n, '\0');
    ssize_t r = t_->Pread(fd, b.data(), n, o);
    return Data(r, b, Fmt("pread(%zu, %lld)", n, static_cast<long long>(o)));
  }
  ssize_t pwrite(int fd, const std::string& s, off_t o) {
    return Int(t_->Pwrite(fd, s.data(), s.size(), o), Fmt("pwrite(%zu, %lld)", s.size(), static_cast<long long>(o)));
  }
  off_t lseek(int fd, off_t o, int w) {
    return Int(t_->Lseek(fd, o, w), Fmt("lseek(%lld, %d)", static_cast<long long>(o), w));
  }
  int fsync(int fd) { return Int(t_->Fsync(fd), "fsync"); }
  int ftruncate(int fd, off_t n) { return Int(t_->Ftruncate(fd, n), Fmt("ftruncate(%lld)", static_cast<long long>(n))); }
  int truncate(const char* p, off_t n) {
    return Int(t_->Truncate(p, n), Fmt("truncate(%s, %lld)", p, static_cast<long long>(n)));
  }
  int fallocate(int fd, int m, off_t o, off_t n) {
    return Int(t_->Fallocate(fd, m, o, n),
               Fmt("fallocate(%#x, %lld, %lld)", m, static_cast<long long>(o), static_cast<long long>(n)));
  }
  int fstat(int fd) {
    struct stat st {};
    return StatLine(t_->Fstat(fd, &st), st, "fstat");
  }
  int stat(const char* p) {
    struct stat st {};
    return StatLine(t_->Stat(p, &st), st, Fmt("stat(%s)", p));
  }
  int lstat(const char* p) {
    struct stat st {};
    return StatLine(t_->Lstat(p, &st), st, Fmt("lstat(%s)", p));
  }
  // Only whether it worked and nlink (no modes or sizes).
  int nlink(const char* p) {
    struct stat st {};
    int r = t_->Lstat(p, &st);
    int e = errno;
    Add(Fmt("nlink(%s)", p), r < 0 ? Err(e) : Fmt("%lu", static_cast<unsigned long>(st.st_nlink)));
    errno = e;
    return r;
  }
  int unlink(const char* p) { return Int(t_->Unlink(p), Fmt("unlink(%s)", p)); }
  int rename(const char* a, const char* b, unsigned f = 0) {
    return Int(t_->Rename(a, b, f), Fmt("rename(%s, %s, %u)", a, b, f));
  }
  int link(const char* a, const char* b) { return Int(t_->Link(a, b), Fmt("link(%s, %s)", a, b)); }
  int symlink(const std::string& t, const char* p) {
    return Int(t_->Symlink(t.c_str(), p), Fmt("symlink(%.40s.. [%zu], %s)", t.c_str(), t.size(), p));
  }
  ssize_t readlink(const char* p, size_t n = 8192) {
    std::string b(n, '\0');
    ssize_t r = t_->Readlink(p, b.data(), n);
    return Data(r, b, Fmt("readlink(%s, %zu)", p, n));
  }
  int mkdir(const char* p, mode_t m = 0755) { return Int(t_->Mkdir(p, m), Fmt("mkdir(%s, 0%o)", p, m)); }
  int rmdir(const char* p) { return Int(t_->Rmdir(p), Fmt("rmdir(%s)", p)); }
  int chmod(const char* p, mode_t m) { return Int(t_->Chmod(p, m), Fmt("chmod(%s, 0%o)", p, m)); }
  int fchmod(int fd, mode_t m) { return Int(t_->Fchmod(fd, m), Fmt("fchmod(0%o)", m)); }
  int chown(const char* p, uid_t u, gid_t g) { return Int(t_->Chown(p, u, g), Fmt("chown(%s, %d, %d)", p, u, g)); }
  int lchown(const char* p, uid_t u, gid_t g) { return Int(t_->Lchown(p, u, g), Fmt("lchown(%s, %d, %d)", p, u, g)); }
  int utimens(const char* p, const struct timespec* ts, bool follow = true) {
    std::string what = ts ? Fmt("(%lld.%ld, %lld.%ld)", static_cast<long long>(ts[0].tv_sec), ts[0].tv_nsec,
                                static_cast<long long>(ts[1].tv_sec), ts[1].tv_nsec)
                          : std::string("NULL");
    return Int(follow ? t_->Utimens(p, ts) : t_->Lutimens(p, ts), Fmt("%s(%s, %s)", follow ? "utimens" : "lutimens", p, what.c_str()));
  }
  // atime and mtime of a path (for explicit timestamps).
  int times(const char* p) {
    struct stat st {};
    int r = t_->Lstat(p, &st);
    int e = errno;
    Add(Fmt("times(%s)", p), r < 0 ? Err(e)
                                   : Fmt("a=%lld.%09ld m=%lld.%09ld", static_cast<long long>(st.st_atim.tv_sec),
                                         st.st_atim.tv_nsec, static_cast<long long>(st.st_mtim.tv_sec),
                                         st.st_mtim.tv_nsec));
    return r;
  }
  int list(const char* p) {
    std::vector<std::string> names;
    int r = t_->List(p, &names);
    int e = errno;
    std::string s;
    for (auto& n : names) s += n + " ";
    Add(Fmt("list(%s)", p), r < 0 ? Err(e) : s);
    return r;
  }
  // Reads a whole file by path into the log.
  void cat(const char* p) {
    int fd = t_->Open(p, O_RDONLY, 0);
    if (fd < 0) {
      Add(Fmt("cat(%s)", p), Err(errno));
      return;
    }
    std::string all;
    char b[65536];
    ssize_t n;
    while ((n = t_->Read(fd, b, sizeof b)) > 0) all.append(b, static_cast<size_t>(n));
    t_->Close(fd);
    Add(Fmt("cat(%s)", p), Show(all));
  }
  void note(const std::string& s) { Add("note", s); }

  static std::string Show(const std::string& s) {
    bool zero = std::all_of(s.begin(), s.end(), [](char c) { return c == 0; });
    if (s.size() > 64 || zero) {
      uint64_t h = 1469598103934665603ull;
      for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
      return Fmt("[%zu bytes%s, hash %016llx]", s.size(), zero && !s.empty() ? ", all zero" : "",
                 static_cast<unsigned long long>(h));
    }
    std::string o = "\"";
    for (char c : s) {
      if (c >= 32 && c < 127) o += c;
      else o += Fmt("\\x%02x", static_cast<uint8_t>(c));
    }
    return o + "\"";
  }
  template <typename... A>
  static std::string Fmt(const char* f, A... a) {
    char b[512];
    snprintf(b, sizeof b, f, a...);
    return b;
  }

 private:
  static std::string Err(int e) { return "-1 " + ErrName(e); }
  static std::string Flags(int f) {
    std::string s;
    switch (f & O_ACCMODE) {
      case O_RDONLY: s = "O_RDONLY"; break;
      case O_WRONLY: s = "O_WRONLY"; break;
      case O_RDWR: s = "O_RDWR"; break;
      default: s = "O_ACCMODE";
    }
    const std::pair<int, const char*> names[] = {{O_CREAT, "CREAT"},       {O_EXCL, "EXCL"},     {O_TRUNC, "TRUNC"},
                                                 {O_APPEND, "APPEND"},     {O_DIRECTORY, "DIRECTORY"},
                                                 {O_NOFOLLOW, "NOFOLLOW"}};
    for (auto& [bit, n] : names)
      if (f & bit) s += std::string("|") + n;
    return s;
  }
  void Add(const std::string& call, const std::string& res) { log.push_back(call + " -> " + res); }
  template <typename T>
  T Int(T r, const std::string& call) {
    int e = errno;
    Add(call, r < 0 ? Err(e) : std::to_string(r));
    errno = e;
    return r;
  }
  int Fd(int r, const std::string& call) {
    int e = errno;
    Add(call, r < 0 ? Err(e) : "fd");
    errno = e;
    return r;
  }
  ssize_t Data(ssize_t r, const std::string& b, const std::string& call) {
    int e = errno;
    Add(call, r < 0 ? Err(e) : Show(b.substr(0, static_cast<size_t>(r))));
    errno = e;
    return r;
  }
  int StatLine(int r, const struct stat& st, const std::string& call) {
    int e = errno;
    if (r < 0) {
      Add(call, Err(e));
    } else {
      std::string type = S_ISREG(st.st_mode)   ? "reg"
                         : S_ISDIR(st.st_mode) ? "dir"
                         : S_ISLNK(st.st_mode) ? "lnk"
                                               : "other";
      // Directory sizes differ between file systems; only files' and links' count.
      std::string size = S_ISDIR(st.st_mode) ? "" : Fmt(" size=%lld", static_cast<long long>(st.st_size));
      Add(call, Fmt("%s 0%o nlink=%lu uid=%u gid=%u%s", type.c_str(), st.st_mode & 07777,
                    static_cast<unsigned long>(st.st_nlink), st.st_uid, st.st_gid, size.c_str()));
    }
    errno = e;
    return r;
  }

  Target* t_;
};

// Runs `script` on Linux (tmpfs) and on `fs`, and fails on the first call
// whose outcome differs, showing both logs around it.
inline void ExpectLinuxParity(mapfs_t* fs, const std::function<void(Rec&)>& script) {
  LinuxTarget lin;
  MapfsTarget mt(fs);
  Rec a(&lin), b(&mt);
  script(a);
  script(b);
  size_t n = std::max(a.log.size(), b.log.size());
  int shown = 0;
  std::string report;
  for (size_t i = 0; i < n; i++) {
    std::string x = i < a.log.size() ? a.log[i] : "<none>";
    std::string y = i < b.log.size() ? b.log[i] : "<none>";
    if (x != y) {
      report += Rec::Fmt("step %zu:\n  linux: %s\n  mapfs: %s\n", i, x.c_str(), y.c_str());
      if (++shown == 8) break;
    }
  }
  EXPECT_TRUE(report.empty()) << "mapfs differs from Linux (tmpfs):\n" << report;
}

// Runs fn in a child process (a crash there must not take the suite down)
// and returns "" if it returned true, else what went wrong.
inline std::string InChild(const std::function<bool()>& fn) {
  fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) _exit(fn() ? 0 : 1);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return "waitpid failed";
  if (WIFSIGNALED(status)) return "crashed with signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  if (WEXITSTATUS(status) != 0) return "returned the wrong result / errno (exit " + std::to_string(WEXITSTATUS(status)) + ")";
  return "";
}

}  // namespace mapfs::apitest
