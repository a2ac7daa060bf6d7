// The shim's own semantics, checked from inside a process that runs under
// it (shim_test.sh starts this binary with `mapfs run`): descriptor numbers,
// shared offsets across dup/fork/exec, stdio, directories, the current
// directory, locks between processes, memory maps and errors. Paths under
// /mapfs are the pool; everything else must still reach the kernel.
#include <dirent.h>
#include <linux/openat2.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

std::string Dir() {
  static int n = 0;
  std::string d = "/mapfs/t" + std::to_string(getpid()) + "_" + std::to_string(n++);
  EXPECT_EQ(mkdir(d.c_str(), 0755), 0) << d << ": " << strerror(errno);
  return d;
}

std::string ReadAll(const std::string& p) {
  int fd = open(p.c_str(), O_RDONLY);
  if (fd < 0) return "<" + std::string(strerror(errno)) + ">";
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  close(fd);
  return s;
}

void WriteAll(int fd, const std::string& s) { ASSERT_EQ(write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size())); }

int WaitChild(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(Shim, OpenWriteReadAndKernelPathsUntouched) {
  std::string d = Dir();
  mode_t old = umask(027);
  int fd = open((d + "/f").c_str(), O_CREAT | O_RDWR, 0666);
  umask(old);
  ASSERT_GE(fd, 0);
  WriteAll(fd, "hello mapfs");
  EXPECT_EQ(lseek(fd, 6, SEEK_SET), 6);
  char buf[16] = {};
  EXPECT_EQ(read(fd, buf, sizeof buf), 5);
  EXPECT_STREQ(buf, "mapfs");
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 11);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(close(fd), 0);
  // The kernel still serves everything else, and never saw the mapfs file.
  struct stat k;
  EXPECT_EQ(stat("/proc/self", &k), 0);
  EXPECT_EQ(stat((d + "/f").c_str(), &k), 0);
  EXPECT_NE(access("/mapfs", F_OK), -1);
  EXPECT_EQ(stat(("/dev/shm" + d).c_str(), &k), -1);
}

// The core caches the umask (a system call per create otherwise): every
// way a program sets it must reach that cache, or a create in the pool
// applies an old mask.
TEST(Shim, EveryUmaskChangeAppliesToCreates) {
  std::string d = Dir();
  mode_t old = umask(077);
  int a = open((d + "/umask-a").c_str(), O_CREAT | O_WRONLY, 0666);
  syscall(SYS_umask, 022);
  int b = open((d + "/umask-b").c_str(), O_CREAT | O_WRONLY, 0666);
  int m = mkdir((d + "/umask-d").c_str(), 0777);
  umask(old);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_EQ(m, 0);
  struct stat st;
  ASSERT_EQ(fstat(a, &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(fstat(b, &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(stat((d + "/umask-d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  close(a);
  close(b);
}

TEST(Shim, DescriptorNumbersAreReservedFromTheKernel) {
  std::string d = Dir();
  int m = open((d + "/f").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  ASSERT_GE(m, 0);
  int k = open("/dev/null", O_RDONLY);
  ASSERT_GE(k, 0);
  EXPECT_NE(m, k);
  EXPECT_EQ(fcntl(m, F_GETFD), FD_CLOEXEC);
  EXPECT_EQ(fcntl(m, F_SETFD, 0), 0);
  EXPECT_EQ(fcntl(m, F_GETFD), 0);
  EXPECT_EQ(fcntl(m, F_GETFL) & O_ACCMODE, O_RDWR);
  close(k);
  EXPECT_EQ(close(m), 0);
  EXPECT_EQ(close(m), -1);
  EXPECT_EQ(errno, EBADF);
  char c;
  EXPECT_EQ(read(m, &c, 1), -1);
  EXPECT_EQ(errno, EBADF);
  // The number is free again for anyone.
  int again = open("/dev/null", O_RDONLY);
  EXPECT_LE(again, m);
  close(again);
}

TEST(Shim, CloseFromForgetsMapfsDescriptors) {
  std::string d = Dir();
  int fd = open((d + "/f").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(dup2(fd, 200), 200);
  WriteAll(200, "x");
  sync();  // everything durable, the mapfs file included; must not fail
  closefrom(150);
  char c;
  EXPECT_EQ(read(200, &c, 1), -1);
  EXPECT_EQ(errno, EBADF);
  int k = open("/dev/null", O_RDONLY);
  ASSERT_EQ(dup2(k, 200), 200);  // the number is the kernel's again
  EXPECT_EQ(read(200, &c, 1), 0);
  close(200);
  close(k);
  close(fd);
  EXPECT_EQ(ReadAll(d + "/f"), "x");
}

TEST(Shim, DupSharesTheOffsetAndDup2Replaces) {
  std::string d = Dir();
  int a = open((d + "/f").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(a, 0);
  int b = dup(a);
  ASSERT_GE(b, 0);
  WriteAll(a, "abc");
  EXPECT_EQ(lseek(b, 0, SEEK_CUR), 3);
  WriteAll(b, "def");
  EXPECT_EQ(dup2(a, 77), 77);
  EXPECT_EQ(lseek(77, 0, SEEK_CUR), 6);
  int k = open("/dev/null", O_RDONLY);
  EXPECT_EQ(dup2(k, b), b);  // a kernel file takes b's number
  EXPECT_EQ(write(b, "x", 1), -1);  // /dev/null opened read-only: the kernel's answer
  EXPECT_EQ(errno, EBADF);
  close(k);
  EXPECT_EQ(fcntl(a, F_DUPFD, 100), 100);
  EXPECT_EQ(lseek(100, 0, SEEK_CUR), 6);
  for (int fd : {a, b, 77, 100}) close(fd);
  EXPECT_EQ(ReadAll(d + "/f"), "abcdef");
}

TEST(Shim, ForkSharesOffsetsBothWays) {
  std::string d = Dir();
  int fd = open((d + "/f").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  WriteAll(fd, "a");
  pid_t pid = fork();
  if (pid == 0) {
    bool ok = write(fd, "b", 1) == 1;
    int other = open((d + "/child").c_str(), O_CREAT | O_WRONLY, 0644);
    ok = ok && other >= 0 && write(other, "c", 1) == 1 && close(other) == 0;
    _exit(ok ? 0 : 1);
  }
  ASSERT_EQ(WaitChild(pid), 0);
  EXPECT_EQ(lseek(fd, 0, SEEK_CUR), 2) << "the child's write moved the shared offset";
  WriteAll(fd, "c");
  close(fd);
  EXPECT_EQ(ReadAll(d + "/f"), "abc");
  EXPECT_EQ(ReadAll(d + "/child"), "c");
}

// Regression (issue 16, defect 2): after a fork the shared offset lives in
// the kernel, and read/write did lseek + I/O + lseek unserialised: two
// threads, or parent and child, sharing the description lost updates (the
// kernel serialises them). 2 processes x 2 threads x 1,500 one-byte
// writes must leave 6,000 bytes, each written once.
TEST(Shim, KernelOffsetUpdatesAreNeverLost) {
  std::string d = Dir();
  int fd = open((d + "/shared").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  constexpr int kWrites = 1500;
  auto writers = [fd](char c) {
    auto one = [fd, c] {
      int bad = 0;
      for (int i = 0; i < kWrites; i++) bad += write(fd, &c, 1) != 1;
      return bad;
    };
    int bad2 = 0;
    std::thread t([&] { bad2 = one(); });
    int bad1 = one();
    t.join();
    return bad1 + bad2;
  };
  pid_t pid = fork();
  if (pid == 0) _exit(writers('c') == 0 ? 0 : 1);
  EXPECT_EQ(writers('p'), 0);
  ASSERT_EQ(WaitChild(pid), 0);
  EXPECT_EQ(lseek(fd, 0, SEEK_CUR), 4 * kWrites);
  close(fd);
  std::string all = ReadAll(d + "/shared");
  EXPECT_EQ(all.size(), size_t{4 * kWrites}) << "offset updates were lost";
  size_t p = 0;
  for (char ch : all) p += ch == 'p';
  EXPECT_EQ(p, size_t{2 * kWrites}) << "writes overwrote each other";
}

// Regression (issue 16, defect 2, at the fork itself): the first fork
// moves a description's offset from the shim into the kernel. A write
// another thread had in flight then updated the shim's copy after it was
// handed over, and the next write landed on it. A thread of the parent
// that held the position lock at the fork left it locked in the child,
// whose next write or lseek on that descriptor hung. Each round: a thread
// writes 'w' bytes while the main thread forks children that each write
// one 'c' (under alarm(): a hang kills the child). Every byte must be
// there, each written once, and the offset must count them all.
TEST(Shim, ForkNeverLosesAnOffsetUpdateInFlight) {
  std::string d = Dir();
  constexpr int kRounds = 40, kWrites = 1500, kForks = 3;
  for (int round = 0; round < kRounds; round++) {
    std::string path = d + "/f" + std::to_string(round);
    int fd = open(path.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    std::atomic<int> done{0};
    std::thread writer([&] {
      for (int i = 0; i < kWrites; i++) {
        if (write(fd, "w", 1) != 1) return;
        done.store(i + 1);
      }
    });
    int children = 0;
    for (int k = 0; k < kForks; k++) {
      // Fork while the writer is busy: before its first write the offset
      // is still the shim's, after the first fork the kernel's.
      while (done.load() < (k + 1) * kWrites / (kForks + 2)) std::this_thread::yield();
      pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        alarm(10);
        bool ok = write(fd, "c", 1) == 1 && lseek(fd, 0, SEEK_CUR) > 0;
        _exit(ok ? 0 : 1);
      }
      EXPECT_EQ(WaitChild(pid), 0) << "round " << round << ", child " << k << " (142: it hung)";
      children++;
    }
    writer.join();
    ASSERT_EQ(done.load(), kWrites) << "round " << round << ": " << strerror(errno);
    off_t end = lseek(fd, 0, SEEK_CUR);
    close(fd);
    std::string all = ReadAll(path);
    size_t c = 0;
    for (char ch : all) c += ch == 'c';
    ASSERT_EQ(all.size(), size_t{kWrites} + children) << "round " << round << ": bytes overwritten";
    ASSERT_EQ(c, size_t(children)) << "round " << round;
    ASSERT_EQ(end, static_cast<off_t>(all.size())) << "round " << round << ": offset updates lost";
  }
}

// Regression (issue 16, defect 3): dup2/dup3 onto one of the shim's own
// descriptors (the pool, the placeholder) replaced it and silently
// redirected later calls. Like close(), they are refused: EBADF.
TEST(Shim, Dup2OntoInternalDescriptorsIsRefused) {
  std::string d = Dir();
  int fd = open((d + "/f").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  WriteAll(fd, "kept");
  // The shim's descriptors live at 1000 and up (this program opens none
  // there); one of them is the pool file.
  std::vector<int> internal;
  bool pool_seen = false;
  char want[PATH_MAX];
  ASSERT_NE(realpath(getenv("MAPFS_POOL"), want), nullptr);
  for (int i = 1000; i < 4096; i++)
    if (fcntl(i, F_GETFD) >= 0) {
      internal.push_back(i);
      char link[PATH_MAX];
      ssize_t n = readlink(("/proc/self/fd/" + std::to_string(i)).c_str(), link, sizeof link - 1);
      if (n > 0 && std::string(link, static_cast<size_t>(n)) == want) pool_seen = true;
    }
  ASSERT_TRUE(pool_seen) << "the pool's descriptor was not found at 1000 and up";
  int other = open("/dev/null", O_RDONLY);
  ASSERT_GE(other, 0);
  for (int i : internal) {
    errno = 0;
    EXPECT_EQ(dup2(other, i), -1) << "dup2 onto internal descriptor " << i;
    EXPECT_EQ(errno, EBADF);
    errno = 0;
    EXPECT_EQ(dup3(other, i, O_CLOEXEC), -1) << "dup3 onto internal descriptor " << i;
    EXPECT_EQ(errno, EBADF);
  }
  close(other);
  // The pool still works.
  EXPECT_EQ(pwrite(fd, "more", 4, 4), 4);
  close(fd);
  EXPECT_EQ(ReadAll(d + "/f"), "keptmore");
}

TEST(Shim, ExecInheritsDescriptorsAndOffsets) {
  std::string d = Dir();
  int fd = open((d + "/f").c_str(), O_CREAT | O_RDWR | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  WriteAll(fd, "1");
  std::string cmd = "printf 2 >&" + std::to_string(fd) + "; printf 3 >> " + d + "/f; cat " + d + "/f > " + d + "/copy";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_EQ(WaitChild(pid), 0);
  WriteAll(fd, "4");
  close(fd);
  EXPECT_EQ(ReadAll(d + "/f"), "1234");
  EXPECT_EQ(ReadAll(d + "/copy"), "123");
  // system() and popen() reach the same files.
  EXPECT_EQ(system(("echo via-system > " + d + "/s").c_str()), 0);
  EXPECT_EQ(ReadAll(d + "/s"), "via-system\n");
  FILE* p = popen(("cat " + d + "/s").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[64] = {};
  ASSERT_NE(fgets(line, sizeof line, p), nullptr);
  EXPECT_STREQ(line, "via-system\n");
  EXPECT_EQ(pclose(p), 0);
}

TEST(Shim, StdioStreamsAreRealFiles) {
  std::string d = Dir();
  FILE* f = fopen((d + "/s").c_str(), "w");
  ASSERT_NE(f, nullptr);
  EXPECT_GT(fprintf(f, "line %d\n", 1), 0);
  EXPECT_GE(fputs("line 2\n", f), 0);
  struct stat st;
  ASSERT_EQ(fstat(fileno(f), &st), 0) << "fileno names the mapfs descriptor";
  EXPECT_EQ(fclose(f), 0);
  f = fopen((d + "/s").c_str(), "r");
  ASSERT_NE(f, nullptr);
  char line[32];
  ASSERT_NE(fgets(line, sizeof line, f), nullptr);
  EXPECT_STREQ(line, "line 1\n");
  EXPECT_EQ(fseek(f, 0, SEEK_END), 0);
  EXPECT_EQ(ftell(f), 14);
  fclose(f);
  f = fopen((d + "/s").c_str(), "a+");
  ASSERT_NE(f, nullptr);
  fputs("line 3\n", f);
  fclose(f);
  EXPECT_EQ(ReadAll(d + "/s"), "line 1\nline 2\nline 3\n");
  EXPECT_EQ(fopen((d + "/none").c_str(), "r"), nullptr);
  EXPECT_EQ(errno, ENOENT);
  // stdout redirected to a mapfs file (what a shell does for `cmd > f`).
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open((d + "/out").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, 1) != 1) _exit(1);
    close(fd);
    printf("printed %d\n", 42);
    fflush(stdout);
    _exit(0);
  }
  ASSERT_EQ(WaitChild(pid), 0);
  EXPECT_EQ(ReadAll(d + "/out"), "printed 42\n");
}

TEST(Shim, DirectoriesListEveryEntryOnce) {
  std::string d = Dir();
  for (int i = 0; i < 300; i++) close(open((d + "/e" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0644));
  ASSERT_EQ(mkdir((d + "/sub").c_str(), 0755), 0);
  DIR* dir = opendir(d.c_str());
  ASSERT_NE(dir, nullptr);
  std::set<std::string> seen;
  long mid = -1;
  std::string after_mid;
  while (struct dirent* e = readdir(dir)) {
    EXPECT_TRUE(seen.insert(e->d_name).second) << e->d_name;
    if (seen.size() == 100) mid = telldir(dir);
  }
  EXPECT_EQ(seen.size(), 303u);  // ., .., sub, 300 files
  EXPECT_TRUE(seen.count(".") && seen.count("..") && seen.count("sub"));
  ASSERT_GE(mid, 0);
  seekdir(dir, mid);
  int rest = 0;
  while (readdir(dir) != nullptr) rest++;
  EXPECT_EQ(rest, 203);
  struct stat st;
  EXPECT_EQ(fstat(dirfd(dir), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(closedir(dir), 0);
  struct dirent** list;
  int n = scandir(d.c_str(), &list, nullptr, alphasort);
  ASSERT_EQ(n, 303);
  EXPECT_STREQ(list[0]->d_name, ".");
  for (int i = 0; i < n; i++) free(list[i]);
  free(list);
  EXPECT_EQ(opendir((d + "/e1").c_str()), nullptr);
  EXPECT_EQ(errno, ENOTDIR);
}

TEST(Shim, CurrentDirectoryInsideMapfs) {
  std::string d = Dir();
  char old[PATH_MAX];
  ASSERT_NE(getcwd(old, sizeof old), nullptr);
  ASSERT_EQ(mkdir((d + "/sub").c_str(), 0755), 0);
  ASSERT_EQ(chdir((d + "/sub").c_str()), 0);
  char cwd[PATH_MAX];
  ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
  EXPECT_EQ(std::string(cwd), d + "/sub");
  int fd = open("rel", O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  struct stat st;
  EXPECT_EQ(stat("../sub/rel", &st), 0);
  EXPECT_EQ(stat((d + "/sub/rel").c_str(), &st), 0);
  char real[PATH_MAX];
  ASSERT_NE(realpath("../sub/./rel", real), nullptr);
  EXPECT_EQ(std::string(real), d + "/sub/rel");
  // Climbing out of the pool reaches the kernel's tree again.
  std::string up;
  for (size_t i = 0; i < 3; i++) up += "../";
  EXPECT_EQ(stat((up + "proc/self").c_str(), &st), 0);
  ASSERT_EQ(chdir(old), 0);
  ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
  EXPECT_STREQ(cwd, old);
}

// A child forked while the cwd was D must start its new image in D, even if
// the parent (or a sibling in a pipeline) moved on before the child exec'd.
TEST(Shim, ExecKeepsTheCwdOfItsFork) {
  std::string d = Dir();
  char old[PATH_MAX];
  ASSERT_NE(getcwd(old, sizeof old), nullptr);
  ASSERT_EQ(mkdir((d + "/sub").c_str(), 0755), 0);
  close(open((d + "/marker").c_str(), O_CREAT | O_WRONLY, 0644));
  ASSERT_EQ(chdir(d.c_str()), 0);
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t a = fork();
  if (a == 0) {
    char c;
    if (read(go[0], &c, 1) != 1) _exit(3);
    execl("/bin/sh", "sh", "-c", "test -e marker", static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_EQ(chdir("sub"), 0);
  pid_t b = fork();  // hands the new cwd off before A execs
  if (b == 0) {
    execl("/bin/sh", "sh", "-c", "test ! -e marker", static_cast<char*>(nullptr));
    _exit(127);
  }
  EXPECT_EQ(WaitChild(b), 0) << "B must run in sub";
  ASSERT_EQ(write(go[1], "x", 1), 1);
  EXPECT_EQ(WaitChild(a), 0) << "A must run in the directory it was forked in";
  close(go[0]);
  close(go[1]);
  ASSERT_EQ(chdir(old), 0);
}

TEST(Shim, ErrorsAreTheKernels) {
  std::string d = Dir();
  EXPECT_EQ(open((d + "/none").c_str(), O_RDONLY), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(open((d + "/" + std::string(300, 'n')).c_str(), O_CREAT | O_WRONLY, 0644), -1);
  EXPECT_EQ(errno, ENAMETOOLONG);
  EXPECT_EQ(unlink(d.c_str()), -1);
  EXPECT_EQ(errno, EISDIR);
  EXPECT_EQ(rmdir("/mapfs"), -1);
  int fd = open((d + "/f").c_str(), O_CREAT | O_WRONLY, 0644);
  close(fd);
  EXPECT_EQ(rename((d + "/f").c_str(), "/dev/shm/mapfs-shim-test-x"), -1);
  EXPECT_EQ(errno, EXDEV);
  EXPECT_EQ(link((d + "/f").c_str(), "/dev/shm/mapfs-shim-test-x"), -1);
  EXPECT_EQ(errno, EXDEV);
  EXPECT_EQ(mkdir((d + "/f/x").c_str(), 0755), -1);
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_EQ(open(d.c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EISDIR);
  fd = open((d + "/f").c_str(), O_RDONLY);
  EXPECT_EQ(write(fd, "x", 1), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(fcntl(fd, 12345), -1);
  EXPECT_EQ(errno, EINVAL);
  close(fd);
}

// Calls the shim does not see never act on the kernel's cwd: while the cwd
// is in the pool, the kernel's is a removed directory, so a relative bind()
// of a Unix socket or a system call made without syscall() fails with
// ENOENT instead of creating something where the program was started.
TEST(Shim, UnseenRelativeCallsNeverReachTheLaunchDirectory) {
  std::string d = Dir();
  char old[PATH_MAX];
  ASSERT_NE(getcwd(old, sizeof old), nullptr);
  const std::string bind_victim = std::string(old) + "/mapfs-bind-victim";
  const std::string raw_victim = std::string(old) + "/mapfs-raw-victim";
  ASSERT_EQ(mkdir((d + "/unseen").c_str(), 0755), 0);
  ASSERT_EQ(chdir((d + "/unseen").c_str()), 0);

  // A relative bind() names a socket in the pool's cwd (socket_calls.cc).
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, "mapfs-bind-victim");
  EXPECT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
  close(s);
  struct stat sst;
  EXPECT_EQ(lstat((d + "/unseen/mapfs-bind-victim").c_str(), &sst), 0);
  EXPECT_TRUE(S_ISSOCK(sst.st_mode));
  long rc;
  const char* name = "mapfs-raw-victim";
  asm volatile("syscall" : "=a"(rc) : "a"(SYS_mkdir), "D"(name), "S"(0755) : "rcx", "r11", "memory");
  EXPECT_EQ(rc, -ENOENT);
  // The shim's own calls still see the pool's directory.
  char cwd[PATH_MAX];
  ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
  EXPECT_EQ(std::string(cwd), d + "/unseen");
  int fd = open("here", O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  struct stat st;
  EXPECT_EQ(stat((d + "/unseen/here").c_str(), &st), 0);

  ASSERT_EQ(chdir(old), 0);
  bool bound = stat(bind_victim.c_str(), &st) == 0, made = stat(raw_victim.c_str(), &st) == 0;
  unlink(bind_victim.c_str());
  rmdir(raw_victim.c_str());
  EXPECT_FALSE(bound) << "bind() created a socket in the launch directory";
  EXPECT_FALSE(made) << "a raw mkdir created a directory in the launch directory";
  // Back in the kernel's directory, relative calls reach it again.
  fd = open("mapfs-back-home", O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_EQ(stat((std::string(old) + "/mapfs-back-home").c_str(), &st), 0);
  unlink("mapfs-back-home");
}

// File system calls made by number (syscall()) are routed like their libc
// wrappers: pool paths and descriptors are mapfs's, and a relative path
// with the cwd in the pool never reaches the kernel's cwd (the launch
// directory). Calls the shim cannot serve on pool files fail with ENOSYS.
TEST(Shim, SyscallNumbersAreRoutedLikeTheirWrappers) {
  std::string d = Dir();
  char old[PATH_MAX];
  ASSERT_NE(getcwd(old, sizeof old), nullptr);
  std::string victim = std::string(old) + "/mapfs-shim-syscall-victim";
  int k = open(victim.c_str(), O_CREAT | O_WRONLY, 0644);  // a kernel file in the launch directory
  ASSERT_GE(k, 0);
  close(k);
  struct stat st;

  ASSERT_EQ(syscall(SYS_mkdir, (d + "/m").c_str(), 0755), 0) << strerror(errno);
  ASSERT_EQ(syscall(SYS_mkdirat, AT_FDCWD, (d + "/m2").c_str(), 0700), 0);
  ASSERT_EQ(syscall(SYS_chdir, (d + "/m").c_str()), 0);
  char cwd[PATH_MAX];
  long len = syscall(SYS_getcwd, cwd, sizeof cwd);
  EXPECT_EQ(std::string(cwd), d + "/m");
  EXPECT_EQ(len, static_cast<long>(d.size() + 3)) << "the raw getcwd counts the NUL";
  int fd = static_cast<int>(syscall(SYS_creat, "mapfs-shim-syscall-victim", 0644));
  ASSERT_GE(fd, 0);
  EXPECT_EQ(syscall(SYS_write, fd, "hello", 5), 5);
  EXPECT_EQ(syscall(SYS_fchmod, fd, 0600), 0);
  EXPECT_EQ(syscall(SYS_fchown, fd, getuid(), getgid()), 0);
  EXPECT_EQ(syscall(SYS_utimensat, fd, nullptr, nullptr, 0), 0) << "a null path times the descriptor";
  close(fd);
  EXPECT_EQ(syscall(SYS_stat, "mapfs-shim-syscall-victim", &st), 0);
  EXPECT_EQ(st.st_size, 5);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(syscall(SYS_lstat, (d + "/m/mapfs-shim-syscall-victim").c_str(), &st), 0);
  EXPECT_EQ(syscall(SYS_access, "mapfs-shim-syscall-victim", R_OK), 0);
  EXPECT_EQ(syscall(SYS_faccessat, AT_FDCWD, "mapfs-shim-syscall-victim", W_OK), 0);
  EXPECT_EQ(syscall(SYS_chmod, "mapfs-shim-syscall-victim", 0640), 0);
  EXPECT_EQ(syscall(SYS_fchmodat, AT_FDCWD, "mapfs-shim-syscall-victim", 0644), 0);
  EXPECT_EQ(syscall(SYS_chown, "mapfs-shim-syscall-victim", getuid(), getgid()), 0);
  EXPECT_EQ(syscall(SYS_truncate, "mapfs-shim-syscall-victim", 3), 0);
  EXPECT_EQ(syscall(SYS_utimensat, AT_FDCWD, "mapfs-shim-syscall-victim", nullptr, 0), 0);
  EXPECT_EQ(syscall(SYS_newfstatat, AT_FDCWD, "mapfs-shim-syscall-victim", &st, 0), 0);
  EXPECT_EQ(st.st_size, 3);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(syscall(SYS_symlink, "mapfs-shim-syscall-victim", "sl"), 0);
  EXPECT_EQ(syscall(SYS_symlinkat, "mapfs-shim-syscall-victim", AT_FDCWD, "sl2"), 0);
  char buf[64] = {};
  EXPECT_EQ(syscall(SYS_readlink, "sl", buf, sizeof buf), 25);
  EXPECT_STREQ(buf, "mapfs-shim-syscall-victim");
  EXPECT_EQ(syscall(SYS_readlinkat, AT_FDCWD, "sl2", buf, sizeof buf), 25);
  EXPECT_EQ(syscall(SYS_link, "mapfs-shim-syscall-victim", "h1"), 0);
  EXPECT_EQ(syscall(SYS_linkat, AT_FDCWD, "h1", AT_FDCWD, "h2", 0), 0);
  EXPECT_EQ(syscall(SYS_rename, "h2", "h3"), 0);
  EXPECT_EQ(syscall(SYS_renameat, AT_FDCWD, "h3", AT_FDCWD, "h4"), 0);
  EXPECT_EQ(syscall(SYS_stat, "h4", &st), 0);
  EXPECT_EQ(st.st_nlink, 3u);
  open_how how = {};
  how.flags = O_RDONLY;
  fd = static_cast<int>(syscall(SYS_openat2, AT_FDCWD, "sl", &how, sizeof how));
  ASSERT_GE(fd, 0) << strerror(errno);
  EXPECT_EQ(syscall(SYS_read, fd, buf, sizeof buf), 3);
  char dents[1024];
  errno = 0;
  EXPECT_EQ(syscall(SYS_getdents64, fd, dents, sizeof dents), -1) << "a file, not a directory";
  EXPECT_EQ(errno, ENOTDIR);
  close(fd);
  for (const char* n : {"sl", "sl2", "h1", "h4", "mapfs-shim-syscall-victim"})
    EXPECT_EQ(syscall(SYS_unlink, n), 0) << n;
  EXPECT_EQ(syscall(SYS_unlinkat, AT_FDCWD, "../m2", AT_REMOVEDIR), 0);
  EXPECT_EQ(syscall(SYS_stat, victim.c_str(), &st), 0) << "the launch directory's file must be untouched";
  ASSERT_EQ(syscall(SYS_chdir, ".."), 0);
  EXPECT_EQ(syscall(SYS_rmdir, "m"), 0);
  ASSERT_EQ(chdir(old), 0);
  unlink(victim.c_str());
}

// fcntl(F_NOTIFY) on pool files: the kernel's checks, then the refusal of a
// kernel without dnotify (EINVAL) for a directory.
TEST(Shim, DnotifyIsRefusedAsWithoutDnotify) {
  std::string d = Dir();
  int dfd = open(d.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dfd, 0);
  int fd = open((d + "/f").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(fcntl(dfd, F_NOTIFY, DN_CREATE | DN_MULTISHOT), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(fcntl(fd, F_NOTIFY, DN_CREATE), -1);
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_EQ(fcntl(dfd, F_NOTIFY, 0), 0) << "no events: removes nothing, succeeds";
  close(fd);
  close(dfd);
}

// Unix sockets bound at pool paths: the pool holds a socket node, other
// processes connect through it; the kernel's answers for a name in use, a
// name that is no socket and a missing name; datagrams by address; nothing
// appears at the launch directory or a kernel /mapfs.
TEST(Shim, UnixSocketsAtPoolPaths) {
  std::string d = Dir();
  std::string path = d + "/sock";
  int srv = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(srv, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  socklen_t alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  ASSERT_EQ(bind(srv, reinterpret_cast<sockaddr*>(&a), alen), 0) << strerror(errno);
  ASSERT_EQ(listen(srv, 4), 0);
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  int again = socket(AF_UNIX, SOCK_STREAM, 0);
  EXPECT_EQ(bind(again, reinterpret_cast<sockaddr*>(&a), alen), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  close(again);

  pid_t pid = fork();
  if (pid == 0) {  // another process finds the socket by its pool name
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), alen) != 0) _exit(1);
    if (write(c, "ping", 4) != 4) _exit(2);
    char b[4];
    if (read(c, b, 4) != 4 || std::memcmp(b, "pong", 4) != 0) _exit(3);
    _exit(0);
  }
  int conn = accept(srv, nullptr, nullptr);
  ASSERT_GE(conn, 0) << strerror(errno);
  char b[4];
  ASSERT_EQ(read(conn, b, 4), 4);
  EXPECT_EQ(std::string(b, 4), "ping");
  ASSERT_EQ(write(conn, "pong", 4), 4);
  EXPECT_EQ(WaitChild(pid), 0);
  close(conn);

  // Datagrams sent to a pool name.
  std::string dpath = d + "/dgram";
  int ds = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un da{};
  da.sun_family = AF_UNIX;
  std::strcpy(da.sun_path, dpath.c_str());
  ASSERT_EQ(bind(ds, reinterpret_cast<sockaddr*>(&da), sizeof da), 0) << strerror(errno);
  int dc = socket(AF_UNIX, SOCK_DGRAM, 0);
  EXPECT_EQ(sendto(dc, "dg", 2, 0, reinterpret_cast<sockaddr*>(&da), sizeof da), 2) << strerror(errno);
  EXPECT_EQ(recv(ds, b, sizeof b, 0), 2);
  close(dc);
  close(ds);

  // The kernel's answers for names that are not sockets.
  int c = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un x{};
  x.sun_family = AF_UNIX;
  std::strcpy(x.sun_path, (d + "/missing").c_str());
  EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&x), sizeof x), -1);
  EXPECT_EQ(errno, ENOENT);
  int fd = open((d + "/plain").c_str(), O_CREAT | O_WRONLY, 0644);
  close(fd);
  std::strcpy(x.sun_path, (d + "/plain").c_str());
  EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&x), sizeof x), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  // Once the name is gone, nobody reaches the socket by it.
  ASSERT_EQ(unlink(path.c_str()), 0);
  EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&a), alen), -1);
  EXPECT_EQ(errno, ENOENT);
  close(c);
  close(srv);
}

TEST(Shim, RecordLocksAndFlockBetweenProcesses) {
  std::string d = Dir();
  std::string p = d + "/lk";
  int fd = open(p.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  struct flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 10;
  fl.l_len = 5;
  ASSERT_EQ(fcntl(fd, F_SETLK, &fl), 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    int c = open(p.c_str(), O_RDWR);
    struct flock w{};
    w.l_type = F_WRLCK;
    w.l_whence = SEEK_SET;
    w.l_start = 12;
    w.l_len = 1;
    if (fcntl(c, F_SETLK, &w) != -1 || (errno != EAGAIN && errno != EACCES)) _exit(1);
    struct flock g = w;
    if (fcntl(c, F_GETLK, &g) != 0 || g.l_type != F_WRLCK || g.l_pid != parent || g.l_start != 10 || g.l_len != 5)
      _exit(2);
    w.l_start = 15;  // just past the parent's range
    if (fcntl(c, F_SETLK, &w) != 0) _exit(3);
    if (flock(c, LOCK_EX | LOCK_NB) != -1 || errno != EWOULDBLOCK) _exit(4);
    _exit(0);
  }
  EXPECT_EQ(WaitChild(pid), 0);
  // Closing any descriptor of the file drops the process's record locks.
  int other = open(p.c_str(), O_RDONLY);
  close(other);
  pid = fork();
  if (pid == 0) {
    int c = open(p.c_str(), O_RDWR);
    struct flock w{};
    w.l_type = F_WRLCK;
    w.l_whence = SEEK_SET;
    w.l_start = 10;
    w.l_len = 5;
    _exit(c < 0 ? 100 : fcntl(c, F_SETLK, &w) == 0 ? 0 : errno);
  }
  EXPECT_EQ(WaitChild(pid), 0);
  close(fd);
}

TEST(Shim, SharedMapsSeeWritesAndWritesSeeMaps) {
  std::string d = Dir();
  int fd = open((d + "/m").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  std::string data(10000, 'a');
  WriteAll(fd, data);
  auto* p = static_cast<char*>(mmap(nullptr, 10000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(p[9999], 'a');
  ASSERT_EQ(pwrite(fd, "XYZ", 3, 5000), 3);
  EXPECT_EQ(std::string(p + 5000, 3), "XYZ");
  std::memcpy(p + 100, "mapped", 6);
  EXPECT_EQ(msync(p, 10000, MS_SYNC), 0);
  char buf[6];
  ASSERT_EQ(pread(fd, buf, 6, 100), 6);
  EXPECT_EQ(std::string(buf, 6), "mapped");
  auto* q = static_cast<char*>(mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 4096));
  ASSERT_NE(q, MAP_FAILED);
  EXPECT_EQ(std::string(q + 5000 - 4096, 3), "XYZ");
  EXPECT_EQ(munmap(q, 4096), 0);
  EXPECT_EQ(munmap(p, 10000), 0);
  close(fd);
  EXPECT_EQ(ReadAll(d + "/m").substr(100, 6), "mapped");
}

TEST(Shim, UnlinkedOpenFileStaysReadable) {
  std::string d = Dir();
  int fd = open((d + "/u").c_str(), O_CREAT | O_RDWR, 0644);
  WriteAll(fd, "still here");
  ASSERT_EQ(unlink((d + "/u").c_str()), 0);
  char buf[16] = {};
  EXPECT_EQ(pread(fd, buf, sizeof buf, 0), 10);
  EXPECT_STREQ(buf, "still here");
  close(fd);
  EXPECT_EQ(access((d + "/u").c_str(), F_OK), -1);
}

// Children started without fork handlers (system, popen, posix_spawn) must
// count the descriptions they inherit themselves: when such a child exits,
// an unlinked file the parent still has open must survive.
TEST(Shim, UnlinkedFileSurvivesSpawnedChildren) {
  std::string d = Dir();
  int fd = open((d + "/u").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  WriteAll(fd, "kept by the parent");
  ASSERT_EQ(unlink((d + "/u").c_str()), 0);
  std::string cmd = "/usr/bin/test -e /proc/self/fd/" + std::to_string(fd);  // not the shell builtin: a program that exits through exit()
  EXPECT_EQ(system(cmd.c_str()), 0);  // the child inherits fd, adopts it, exits
  FILE* p = popen("/bin/true", "r");
  ASSERT_NE(p, nullptr);
  pclose(p);
  pid_t pid;
  std::string arg = "/proc/self/fd/" + std::to_string(fd);
  char* argv[] = {const_cast<char*>("test"), const_cast<char*>("-e"), arg.data(), nullptr};
  ASSERT_EQ(posix_spawn(&pid, "/usr/bin/test", nullptr, nullptr, argv, environ), 0);
  ASSERT_EQ(WaitChild(pid), 0);  // it adopted fd and exited through exit()
  pid = fork();
  if (pid == 0) {
    execl("/bin/true", "true", static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_EQ(WaitChild(pid), 0);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the inode was freed under the parent: mode " << st.st_mode;
  EXPECT_EQ(st.st_size, 18);
  EXPECT_EQ(st.st_nlink, 0u);
  char buf[32] = {};
  EXPECT_EQ(pread(fd, buf, sizeof buf, 0), 18);
  EXPECT_STREQ(buf, "kept by the parent");
  int other = open((d + "/new").c_str(), O_CREAT | O_RDWR, 0644);  // must not reuse the inode
  WriteAll(other, "another file");
  EXPECT_EQ(pread(fd, buf, sizeof buf, 0), 18);
  EXPECT_STREQ(buf, "kept by the parent");
  close(other);
  close(fd);
}

TEST(Shim, CopyBetweenKernelAndMapfs) {
  std::string d = Dir();
  int in = open("/proc/self/exe", O_RDONLY);
  ASSERT_GE(in, 0);
  struct stat st;
  fstat(in, &st);
  int out = open((d + "/exe").c_str(), O_CREAT | O_WRONLY, 0755);
  ASSERT_GE(out, 0);
  off64_t total = 0;
  ssize_t n;
  while ((n = copy_file_range(in, nullptr, out, nullptr, 1 << 20, 0)) > 0) total += n;
  EXPECT_EQ(total, st.st_size);
  close(in);
  close(out);
  struct stat m;
  ASSERT_EQ(stat((d + "/exe").c_str(), &m), 0);
  EXPECT_EQ(m.st_size, st.st_size);
}

}  // namespace
