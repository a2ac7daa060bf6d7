// Several processes using one file through the virtual engine at once
// (issue 15): what SQLite, LMDB and friends rely on when their processes
// share a database file.
//
// - Record locks: a process's fcntl locks on a file are released when it
//   closes ANY descriptor of the file; the engine's own descriptors (a stat
//   by path, a reopen of a write-only descriptor) must not release them.
// - Formatting: a process opening a file another process is formatting
//   (grown, header not yet written) must not serve the metadata as plain
//   content.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "virtual_test_util.h"

namespace mapfs::overlay::vrt::testing {
namespace {

std::unique_ptr<Engine> MakeEngine(const TempDir& dir) {
  auto e = NewVirtualEngine(Options{dir.path(), EngineKind::kVirtual, Mode::kPosix});
  EXPECT_TRUE(e.ok());
  return e.ok() ? std::move(*e) : nullptr;
}

std::unique_ptr<OverlayFile> AdoptPath(Engine& e, const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return nullptr;
  auto f = e.Adopt(fd, flags);
  EXPECT_TRUE(f.ok()) << f.status().message();
  return f.ok() ? std::move(*f) : nullptr;
}

// Whether another process finds byte 0 of `path` write-locked (F_GETLK
// reports the lock of a process other than the caller only, hence a child).
bool LockedForOthers(const std::string& path) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(path.c_str(), O_RDWR);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    if (fd < 0 || fcntl(fd, F_GETLK, &fl) != 0) _exit(2);
    _exit(fl.l_type == F_UNLCK ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 1;
}

void LockByte0(int fd) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  ASSERT_EQ(fcntl(fd, F_SETLK, &fl), 0);
}

// SQLite stats the database by path at every commit (has it moved?) while
// it holds its locks; the engine used to open and close the file for the
// stat, which released them, and two processes then wrote at once.
TEST(VirtualMultiProcess, StatByPathKeepsTheProcesssRecordLocks) {
  TempDir dir;
  auto e = MakeEngine(dir);
  ASSERT_TRUE(e);
  for (const char* name : {"virtualized", "plain"}) {
    std::string path = dir.File(name);
    if (std::strcmp(name, "plain") == 0) {
      int p = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
      ASSERT_EQ(pwrite(p, std::string(4096, 'p').data(), 4096, 0), 4096);
      ::close(p);
    }
    auto f = AdoptPath(*e, path, O_RDWR | O_CREAT);
    ASSERT_TRUE(f);
    ASSERT_EQ(f->KernelIsContent(), std::strcmp(name, "plain") == 0) << name;
    std::string data(5000, 'd');
    ASSERT_TRUE(f->Pwrite(data.data(), data.size(), 0).ok());
    LockByte0(f->fd());
    ASSERT_TRUE(LockedForOthers(path)) << name;
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    ASSERT_TRUE(e->FixStat(path.c_str(), &st).ok());
    EXPECT_EQ(st.st_size, 5000) << name;
    EXPECT_TRUE(LockedForOthers(path)) << name << ": a stat by path released the lock";
    ASSERT_EQ(::fstat(f->fd(), &st), 0);
    ASSERT_TRUE(e->FixStatFd(f->fd(), &st).ok());
    EXPECT_TRUE(LockedForOthers(path)) << name << ": a stat by descriptor released the lock";
    ASSERT_TRUE(f->Close().ok());
  }
}

// A second open of a file the process has locked (SQLite opens the journal
// and database again; a write-only open is reopened by the engine to read
// the header) must not release the locks either.
TEST(VirtualMultiProcess, AnotherOpenOfALockedFileKeepsTheLocks) {
  TempDir dir;
  auto e = MakeEngine(dir);
  ASSERT_TRUE(e);
  std::string path = dir.File("f");
  auto f = AdoptPath(*e, path, O_RDWR | O_CREAT);
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->Pwrite("abc", 3, 0).ok());
  LockByte0(f->fd());
  // Kept open: the application's own close of one would release the locks
  // (POSIX), engine or not.
  std::vector<std::unique_ptr<OverlayFile>> more;
  for (int flags : {O_WRONLY, O_RDONLY, O_RDWR, O_WRONLY | O_TRUNC}) {
    more.push_back(AdoptPath(*e, path, flags));
    ASSERT_TRUE(more.back());
    EXPECT_TRUE(LockedForOthers(path)) << "open with flags " << flags << " released the lock";
  }
  ASSERT_TRUE(f->Close().ok());
}

// Another process formats a file (grown by ftruncate, header written last,
// all under flock): an open without O_CREAT meanwhile saw a non-empty file
// without magic and served the format's zeros as plain content.
TEST(VirtualMultiProcess, AnOpenDuringAnotherProcesssFormatWaitsForIt) {
  TempDir dir;
  auto e = MakeEngine(dir);
  ASSERT_TRUE(e);
  std::string path = dir.File("f");
  int fmt = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fmt, 0);
  ASSERT_EQ(flock(fmt, LOCK_EX), 0);
  ASSERT_EQ(ftruncate(fmt, 2 << 20), 0);  // as Format's first step
  std::thread formatter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(Format(fmt).ok());
    flock(fmt, LOCK_UN);
  });
  auto f = AdoptPath(*e, path, O_RDWR);
  formatter.join();
  ::close(fmt);
  ASSERT_TRUE(f);
  EXPECT_FALSE(f->KernelIsContent()) << "served as a plain file while another process formatted it";
  auto size = f->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 0u);
}

}  // namespace
}  // namespace mapfs::overlay::vrt::testing
