// Who may use a pool (docs/SECURITY.md): pools are created for their owner
// only, sharing follows the pool file's rights, and a pool that could have
// been planted or swapped by someone else — a symbolic link, a foreign file
// in a world-writable directory, a foreign shared-memory segment — is
// refused with a clear message and left as it was.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "medium/pool.h"
#include "test_util.h"

namespace mapfs::medium {
namespace {

using testing::TempPool;

constexpr uint64_t kSize = 32 * MiB;
constexpr uid_t kNobody = 65534;

std::string Hex(const uint8_t* u) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 16; i++) {
    s += d[u[i] >> 4];
    s += d[u[i] & 15];
  }
  return s;
}

// Opens the pool at `path` (the first opener creates its shared-memory
// segment), records the segment's name and rights, and closes it again
// (the last close removes the segment).
std::string ShmName(const std::string& path, struct stat* seg = nullptr) {
  auto p = Pool::Open(path);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return "";
  std::string name = "/mapfs-" + Hex((*p)->header().uuid);
  (*p)->FinishOpen();
  if (seg) {
    EXPECT_EQ(::stat(("/dev/shm" + name).c_str(), seg), 0) << name;
  }
  EXPECT_TRUE((*p)->Close().ok());
  return name;
}

struct stat StatOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st;
}

// A directory of its own under /dev/shm, removed with what it holds.
struct ScratchDir {
  std::string path = "/dev/shm/mapfs-access-" + std::to_string(::getpid());
  ScratchDir() { EXPECT_EQ(::mkdir(path.c_str(), 0755), 0); }
  ~ScratchDir() { (void)std::system(("rm -rf " + path).c_str()); }
};

TEST(PoolAccess, PoolsAreCreatedForTheirOwnerOnly) {
  mode_t old = ::umask(0);  // even with no umask at all
  TempPool tp(kSize);
  ::umask(old);
  ASSERT_TRUE(tp.status().ok()) << tp.status().ToString();
  EXPECT_EQ(StatOf(tp.path()).st_mode & 07777, 0600u);
  struct stat sh {};
  ShmName(tp.path(), &sh);
  EXPECT_EQ(sh.st_mode & 07777, 0600u) << "the shared-memory segment";
}

TEST(PoolAccess, SharingFollowsThePoolFile) {
  CreateOptions co;
  co.file_mode = 0660;
  co.group = 1;  // daemon: any group but the caller's own
  TempPool tp(kSize, co);
  ASSERT_TRUE(tp.status().ok()) << tp.status().ToString();
  struct stat st = StatOf(tp.path());
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  if (::geteuid() == 0) {
    EXPECT_EQ(st.st_gid, 1u);
  }
  struct stat sh {};
  ShmName(tp.path(), &sh);
  EXPECT_EQ(sh.st_mode & 07777, 0660u) << "the segment takes the pool's rights";
  EXPECT_EQ(sh.st_gid, st.st_gid) << "and its group";
}

TEST(PoolAccess, SymbolicLinksToAPoolAreRefused) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  std::string link = tp.path() + ".link";
  ASSERT_EQ(::symlink(tp.path().c_str(), link.c_str()), 0);
  auto r = Pool::Open(link);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ELOOP);
  EXPECT_NE(r.status().message().find("symbolic link"), std::string::npos) << r.status().message();
  CreateOptions co;
  co.size = kSize;
  Status st = Pool::Create(link, co);
  EXPECT_EQ(st.code(), ELOOP) << st.ToString();
  ::unlink(link.c_str());
  // The pool the link named is untouched and still opens.
  EXPECT_FALSE(ShmName(tp.path()).empty());
}

TEST(PoolAccess, PlantedPoolsInWorldWritableDirectoriesAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user";
  ScratchDir dir;
  ASSERT_EQ(::chmod(dir.path.c_str(), 01777), 0);
  std::string pool = dir.path + "/p.pool";
  CreateOptions co;
  co.size = kSize;
  ASSERT_TRUE(Pool::Create(pool, co).ok());
  // Root's pool in a root-owned sticky directory (like /dev/shm): fine.
  EXPECT_FALSE(ShmName(pool).empty());
  // Someone else's file there: anyone could have put it in place.
  ASSERT_EQ(::chown(pool.c_str(), kNobody, kNobody), 0);
  auto r = Pool::Open(pool);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EPERM);
  EXPECT_NE(r.status().message().find("owned by uid 65534"), std::string::npos) << r.status().message();
  // A world-writable directory that belongs to someone else: refused, and
  // mkfs creates nothing there.
  ASSERT_EQ(::chown(pool.c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(dir.path.c_str(), kNobody, kNobody), 0);
  r = Pool::Open(pool);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EPERM);
  EXPECT_NE(r.status().message().find("writable by everyone"), std::string::npos) << r.status().message();
  std::string fresh = dir.path + "/new.pool";
  EXPECT_EQ(Pool::Create(fresh, co).code(), EPERM);
  EXPECT_NE(::access(fresh.c_str(), F_OK), 0) << "mkfs created a file before refusing";
}

TEST(PoolAccess, ForeignSharedMemorySegmentIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user";
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  std::string shm = ShmName(tp.path());
  ASSERT_FALSE(shm.empty());
  // Someone else made the segment first (with rights the pool does not give).
  int fd = ::shm_open(shm.c_str(), O_RDWR | O_CREAT, 0666);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fchown(fd, kNobody, kNobody), 0);
  ASSERT_EQ(::fchmod(fd, 0666), 0);
  ::close(fd);
  auto r = Pool::Open(tp.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EPERM);
  EXPECT_NE(r.status().message().find("someone else created it"), std::string::npos) << r.status().message();
  ::shm_unlink(shm.c_str());
  EXPECT_FALSE(ShmName(tp.path()).empty()) << "the pool opens once the segment is gone";
}

}  // namespace
}  // namespace mapfs::medium
