// Path limits, deep directories, st_dev and PATH search under the shim
// (issue 18, items 5, 6 and 7), checked from inside a process under `mapfs
// run` (paths_test.sh). Where Linux's answer is the reference, the same
// checks run on a tmpfs directory (/dev/shm) and on the pool, in the same
// process, and must give the same results.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

std::string Err(int rc) { return rc == 0 ? "ok" : strerrorname_np(errno); }

// A fresh directory under `root` (a tmpfs directory or /mapfs).
std::string Fresh(const std::string& root, const char* tag) {
  std::string d = root + "/" + tag + std::to_string(getpid());
  EXPECT_EQ(mkdir(d.c_str(), 0755), 0) << d << ": " << strerror(errno);
  return d;
}

// `dir` + "/" + filler + `name`, exactly `len` bytes long: the filler is
// "./" names, which change nothing the path names.
std::string PathOfLength(const std::string& dir, const std::string& name, size_t len) {
  std::string p = dir + "/";
  size_t fill = len - p.size() - name.size();
  if (fill % 2) p += "/";
  for (size_t i = 0; i < fill / 2; i++) p += "./";
  p += name;
  EXPECT_EQ(p.size(), len);
  return p;
}

std::string RelativeOfLength(const std::string& name, size_t len) {
  std::string p;
  size_t fill = len - name.size();
  for (size_t i = 0; i < fill / 2; i++) p += "./";
  if (fill % 2) p += "/";
  p += name;
  EXPECT_EQ(p.size(), len);
  return p;
}

int Touch(const std::string& p) {
  int fd = open(p.c_str(), O_CREAT | O_WRONLY, 0644);
  return fd < 0 ? -1 : close(fd);
}

int StatOf(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st);
}

std::string GetcwdErr(size_t size) {
  std::vector<char> buf(size);
  return getcwd(buf.data(), size) != nullptr ? "ok" : strerrorname_np(errno);
}

// What a program started in the current directory by fork + exec sees:
// the length of its cwd and whether it reaches the file "f" there
// (cwd_report.c: this binary cannot be it, GoogleTest refuses to start in
// a cwd longer than PATH_MAX).
std::string ChildReport() {
  int p[2];
  if (pipe(p) != 0) return "pipe";
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    const char* report = getenv("PATHS_TEST_CWD_REPORT");
    if (report != nullptr) execl(report, report, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(p[1]);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return out;
}

// Linux's path limits, as results (one line per check), so that the
// tmpfs run and the pool run can be compared line by line. `dir` must be
// an empty directory.
std::vector<std::string> LimitChecks(const std::string& dir) {
  std::vector<std::string> out;
  auto add = [&](const std::string& what, const std::string& r) { out.push_back(what + ": " + r); };
  EXPECT_EQ(Touch(dir + "/f"), 0);
  // Absolute paths: strlen 4095 is fine, 4096 and more is ENAMETOOLONG.
  for (size_t len : {PATH_MAX - 2, PATH_MAX - 1, PATH_MAX, PATH_MAX + 1}) {
    std::string p = PathOfLength(dir, "f", len);
    add("stat abs " + std::to_string(len), Err(StatOf(p)));
    add("open abs " + std::to_string(len), Err(Touch(PathOfLength(dir, "n" + std::to_string(len), len))));
    add("mkdir abs " + std::to_string(len), Err(mkdir(PathOfLength(dir, "d" + std::to_string(len), len).c_str(), 0755)));
    add("access abs " + std::to_string(len), Err(access(p.c_str(), F_OK)));
  }
  // Names: 255 bytes is fine, 256 is ENAMETOOLONG (also where it is absent).
  for (size_t n : {NAME_MAX, NAME_MAX + 1}) {
    std::string name(n, 'n');
    add("create name " + std::to_string(n), Err(Touch(dir + "/" + name)));
    add("stat name " + std::to_string(n), Err(StatOf(dir + "/" + name)));
    add("mkdir name " + std::to_string(n), Err(mkdir((dir + "/" + std::string(n, 'm')).c_str(), 0755)));
    add("stat below name " + std::to_string(n), Err(StatOf(dir + "/" + name + "/x")));
  }
  // A cwd deeper than PATH_MAX, reached by relative chdir.
  char old[PATH_MAX];
  EXPECT_NE(getcwd(old, sizeof old), nullptr);
  EXPECT_EQ(chdir(dir.c_str()), 0);
  std::string comp(250, 'c');
  std::string deep = dir;
  int down = 0, ok = 0;
  while (deep.size() < 6000) {
    ok += mkdir(comp.c_str(), 0755) == 0 && chdir(comp.c_str()) == 0;
    deep += "/" + comp;
    down++;
  }
  add("walk down " + std::to_string(down), std::to_string(ok));
  add("create in deep cwd", Err(Touch("f")));
  add("stat in deep cwd", Err(StatOf("f")));
  for (size_t len : {PATH_MAX - 1, PATH_MAX}) {
    add("stat rel " + std::to_string(len), Err(StatOf(RelativeOfLength("f", len))));
    add("open rel " + std::to_string(len), Err(Touch(RelativeOfLength("r" + std::to_string(len), len))));
  }
  add("stat abs deep cwd", Err(StatOf(deep + "/f")));
  add("stat up and down", Err(StatOf("../" + comp + "/f")));
  // getcwd: ERANGE for a short buffer, the whole path from getcwd(NULL, 0).
  add("getcwd 4096", GetcwdErr(PATH_MAX));
  add("getcwd exact", GetcwdErr(deep.size()));
  add("getcwd +1", GetcwdErr(deep.size() + 1));
  char* whole = getcwd(nullptr, 0);
  add("getcwd NULL 0", whole == nullptr ? strerrorname_np(errno) : whole == deep ? "the path" : "other");
  free(whole);
  errno = 0;
  add("getcwd NULL 100", getcwd(nullptr, 100) == nullptr ? strerrorname_np(errno) : "ok");
  char* rp = realpath("f", nullptr);
  add("realpath NULL", rp == nullptr ? strerrorname_np(errno) : rp == deep + "/f" ? "the path" : "other");
  free(rp);
  std::vector<char> rbuf(PATH_MAX);
  add("realpath buf", realpath("f", rbuf.data()) == nullptr ? strerrorname_np(errno) : "ok");
  // A new image keeps the deep cwd.
  std::string child = ChildReport();
  add("child", child == std::to_string(deep.size()) + " f:ok\n" ? "cwd and f" : "lost: " + child);
  int up = 0;
  for (int i = 0; i < down; i++) up += chdir("..") == 0;
  add("walk up", std::to_string(up));
  whole = getcwd(nullptr, 0);
  add("back at", whole != nullptr && whole == dir ? "start" : "elsewhere");
  free(whole);
  EXPECT_EQ(chdir(old), 0);
  return out;
}

TEST(Paths, LimitsAreLinuxsOnThePoolAsOnTmpfs) {
  std::string k = Fresh("/dev/shm", "mapfs-paths-test-");
  std::string m = Fresh("/mapfs", "limits");
  std::vector<std::string> kernel = LimitChecks(k);
  std::vector<std::string> pool = LimitChecks(m);
  ASSERT_EQ(kernel.size(), pool.size());
  for (size_t i = 0; i < kernel.size(); i++) EXPECT_EQ(pool[i], kernel[i]) << "tmpfs and pool differ";
  // And tmpfs said what Linux says (so the comparison means something).
  auto has = [&](const std::string& line) {
    for (auto& l : kernel)
      if (l == line) return true;
    return false;
  };
  EXPECT_TRUE(has("stat abs 4095: ok"));
  EXPECT_TRUE(has("stat abs 4096: ENAMETOOLONG"));
  EXPECT_TRUE(has("create name 256: ENAMETOOLONG"));
  EXPECT_TRUE(has("stat rel 4095: ok"));
  EXPECT_TRUE(has("stat rel 4096: ENAMETOOLONG"));
  EXPECT_TRUE(has("getcwd 4096: ERANGE"));
  EXPECT_TRUE(has("getcwd NULL 0: the path"));
  EXPECT_TRUE(has("child: cwd and f"));
  if (HasFailure())
    for (size_t i = 0; i < kernel.size(); i++) std::printf("tmpfs %s | pool %s\n", kernel[i].c_str(), pool[i].c_str());
  std::string cmd = "rm -rf " + k;
  EXPECT_EQ(system(cmd.c_str()), 0);
}

// A field of /proc/self/status, in KiB.
long StatusKiB(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field) + 1);
  return -1;
}

// Walking 10,000 levels down and back must not keep a copy of every cwd
// on the way: before the fix glibc's setenv kept every MAPFS_CWD value,
// the square of the depth (RssAnon +13 MiB at 3,000 levels, +140 MiB at
// 10,000). Asserted on the process's private memory (RssAnon: the heap)
// and on VmRSS without RssShmem: VmRSS also counts the pool's own pages
// the walk touched (the 10,000 new directories, about 17 KiB each, linear
// in the depth and the file system's data, as tmpfs's directories are
// kernel memory that no VmRSS shows). Run in a fresh child, which reports
// through a pipe.
TEST(Paths, DeepWalkKeepsMemoryFlat) {
  std::string d = Fresh("/mapfs", "deep");
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    long anon0 = StatusKiB("RssAnon:"), rss0 = StatusKiB("VmRSS:") - StatusKiB("RssShmem:");
    int bad = chdir(d.c_str()) != 0;
    constexpr int kDepth = 10000;
    for (int i = 0; i < kDepth && !bad; i++) bad = mkdir("x", 0755) != 0 || chdir("x") != 0;
    for (int i = 0; i < kDepth && !bad; i++) bad = chdir("..") != 0;
    char* cwd = getcwd(nullptr, 0);
    bad |= cwd == nullptr || d != cwd;
    long anon1 = StatusKiB("RssAnon:"), rss1 = StatusKiB("VmRSS:") - StatusKiB("RssShmem:");
    char msg[160];
    int n = std::snprintf(msg, sizeof msg, "%d %ld %ld %ld", bad, anon1 - anon0, rss1 - rss0, StatusKiB("RssShmem:"));
    (void)!write(p[1], msg, static_cast<size_t>(n));
    _exit(0);
  }
  close(p[1]);
  char buf[160] = {};
  ASSERT_GT(read(p[0], buf, sizeof buf - 1), 0);
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  int bad = 1;
  long anon = 0, rss = 0, shmem = 0;
  ASSERT_EQ(std::sscanf(buf, "%d %ld %ld %ld", &bad, &anon, &rss, &shmem), 4) << buf;
  EXPECT_EQ(bad, 0) << "the walk failed";
  std::printf("10,000 levels down and up: RssAnon %+ld KiB, VmRSS-RssShmem %+ld KiB (RssShmem, the pool: %ld KiB)\n",
              anon, rss, shmem);
  EXPECT_LT(anon, 32 * 1024);
  EXPECT_LT(rss, 32 * 1024);
}

// st_dev is what the kernel could have given: it survives
// makedev(major, minor) and fits the kernel's 12-bit major, 20-bit minor.
TEST(Paths, StDevRoundTripsThroughMajorMinor) {
  std::string d = Fresh("/mapfs", "dev");
  ASSERT_EQ(Touch(d + "/f"), 0);
  struct stat a, b, r;
  ASSERT_EQ(stat((d + "/f").c_str(), &a), 0);
  ASSERT_EQ(stat(d.c_str(), &b), 0);
  ASSERT_EQ(stat("/mapfs", &r), 0);
  EXPECT_EQ(makedev(major(a.st_dev), minor(a.st_dev)), a.st_dev);
  EXPECT_LT(major(a.st_dev), 1u << 12);
  EXPECT_LT(minor(a.st_dev), 1u << 20);
  EXPECT_EQ(a.st_dev, b.st_dev);  // one device per pool
  EXPECT_EQ(a.st_dev, r.st_dev);
  struct stat k;
  ASSERT_EQ(stat("/dev/shm", &k), 0);
  EXPECT_NE(a.st_dev, k.st_dev);  // not the pool file's own file system
  struct statx x;
  ASSERT_EQ(statx(AT_FDCWD, (d + "/f").c_str(), 0, STATX_BASIC_STATS, &x), 0);
  EXPECT_EQ(makedev(x.stx_dev_major, x.stx_dev_minor), a.st_dev);
}

// Sets PATH for one test and puts the old one back.
class ScopedPath {
 public:
  explicit ScopedPath(const std::string& v) {
    const char* o = getenv("PATH");
    had_ = o != nullptr;
    if (had_) old_ = o;
    setenv("PATH", v.c_str(), 1);
  }
  ~ScopedPath() {
    if (had_) setenv("PATH", old_.c_str(), 1);
    else unsetenv("PATH");
  }

 private:
  bool had_ = false;
  std::string old_;
};

std::string ReadAll(const std::string& p) {
  int fd = open(p.c_str(), O_RDONLY);
  if (fd < 0) return "<" + std::string(strerror(errno)) + ">";
  std::string s;
  char buf[256];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  close(fd);
  return s;
}

int Wait(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A program in a PATH directory of the pool is found by posix_spawnp,
// execvp and execlp, and kernel programs after it still are.
TEST(Paths, PathSearchReachesPoolDirectories) {
  std::string d = Fresh("/mapfs", "bin");
  std::string bin = d + "/bin";
  ASSERT_EQ(mkdir(bin.c_str(), 0755), 0);
  int fd = open((bin + "/mapfs-hello").c_str(), O_CREAT | O_WRONLY, 0755);
  ASSERT_GE(fd, 0);
  std::string script = "#!/bin/sh\necho \"hello $1\" > \"$2\"\n";
  ASSERT_EQ(write(fd, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  ASSERT_EQ(close(fd), 0);
  // Not executable: found, but refused, and the search goes on.
  fd = open((bin + "/mapfs-noexec").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_EQ(close(fd), 0);
  ScopedPath path(d + "/nothing:" + bin + ":/usr/bin:/bin");

  std::string out = d + "/spawnp";
  char* argv[] = {const_cast<char*>("mapfs-hello"), const_cast<char*>("spawnp"), out.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawnp(&pid, "mapfs-hello", nullptr, nullptr, argv, environ), 0);
  EXPECT_EQ(Wait(pid), 0);
  EXPECT_EQ(ReadAll(out), "hello spawnp\n");

  char* tv[] = {const_cast<char*>("true"), nullptr};
  ASSERT_EQ(posix_spawnp(&pid, "true", nullptr, nullptr, tv, environ), 0);  // /usr/bin, after the pool
  EXPECT_EQ(Wait(pid), 0);
  EXPECT_EQ(posix_spawnp(&pid, "mapfs-no-such-program", nullptr, nullptr, tv, environ), ENOENT);
  EXPECT_EQ(posix_spawnp(&pid, "mapfs-noexec", nullptr, nullptr, tv, environ), EACCES);

  std::string out2 = d + "/execvp", out3 = d + "/execlp";
  pid = fork();
  if (pid == 0) {
    char* a[] = {const_cast<char*>("mapfs-hello"), const_cast<char*>("execvp"), out2.data(), nullptr};
    execvp("mapfs-hello", a);
    _exit(errno);
  }
  EXPECT_EQ(Wait(pid), 0);
  EXPECT_EQ(ReadAll(out2), "hello execvp\n");
  pid = fork();
  if (pid == 0) {
    execlp("mapfs-hello", "mapfs-hello", "execlp", out3.c_str(), static_cast<char*>(nullptr));
    _exit(errno);
  }
  EXPECT_EQ(Wait(pid), 0);
  EXPECT_EQ(ReadAll(out3), "hello execlp\n");
}

}  // namespace

