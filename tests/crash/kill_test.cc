// Process kills (issue 7, part 3). A writer process works through a seeded
// stream of writes, creates, renames, unlinks, truncates and fsyncs
// (kill_workload.h) and reports each operation before it starts and after
// it is acknowledged. It is killed:
//  - CApiRandom:   a forked child on the C API, SIGKILLed at random moments;
//  - CApiNthFence: the same stream from one fixed pool image, the child
//                  ending itself (_exit) at its Nth store fence, for every
//                  fence of the stream (about 60 of them, evenly spaced,
//                  in CI);
//  - ShimRandom:   kill_writer, a plain libc program, under the LD_PRELOAD
//                  shim (`mapfs run`), SIGKILLed at random moments;
//  - ShimNthFence: kill_writer under a copy of the shim with a fence hook,
//                  ending at its Nth fence (every 3rd N in CI);
//  - ShimLockHolder: a process under the shim holding an flock or fcntl
//                  lock (and often the core's per-file lock) is SIGKILLed;
//                  another process gets the lock and uses the file;
// in each mode (posix, sync, strict). After every kill: the next mount
// recovers, fsck is clean, every acknowledged operation is there and the
// one in flight is done or not as the mode promises (kill_model.h), and the
// pool is usable (a file is created, written, read back and deleted).
//
// Seeds come from MAPFS_CRASH_SEED (default fixed) and are printed; each test
// prints "crash-kill: <test>: N kills, V violations". MAPFS_CRASH_FULL=1
// runs many more rounds and every fence.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "fs/fs_test_util.h"
#include "kill_model.h"
#include "medium/trace.h"

namespace mapfs::crash {
namespace {

using fstest::CheckPool;
using fstest::FsPool;
using fstest::Join;

bool Full() { return std::getenv("MAPFS_CRASH_FULL") != nullptr; }
uint64_t Seed() {
  const char* s = std::getenv("MAPFS_CRASH_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261123;
}
const char* ModeArg(int mode) { return mode == 0 ? "posix" : mode == 1 ? "sync" : "strict"; }

// Reads what `fd` delivers until EOF or `ms` (< 0: EOF only).
std::string ReadFor(int fd, int ms) {
  std::string s;
  auto t0 = std::chrono::steady_clock::now();
  char buf[4096];
  for (;;) {
    int wait = -1;
    if (ms >= 0) {
      wait = ms - static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now() - t0)
                                       .count());
      if (wait <= 0) break;
    }
    struct pollfd p = {fd, POLLIN, 0};
    int r = ::poll(&p, 1, wait);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
  }
  return s;
}

class MapfsIo : public Io {
 public:
  explicit MapfsIo(mapfs_t* fs) : fs_(fs) {}
  int Open(const std::string& p, int flags) override { return mapfs_open(fs_, ("/" + p).c_str(), flags, 0644); }
  ssize_t Pwrite(int fd, const void* b, size_t n, off_t off) override { return mapfs_pwrite(fs_, fd, b, n, off); }
  int Fsync(int fd) override { return mapfs_fsync(fs_, fd); }
  int Close(int fd) override { return mapfs_close(fs_, fd); }
  int Rename(const std::string& a, const std::string& b) override {
    return mapfs_rename(fs_, ("/" + a).c_str(), ("/" + b).c_str());
  }
  int Unlink(const std::string& p) override { return mapfs_unlink(fs_, ("/" + p).c_str()); }
  int Truncate(const std::string& p, off_t size) override { return mapfs_truncate(fs_, ("/" + p).c_str(), size); }

 private:
  mapfs_t* fs_;
};

class FenceExit : public medium::TraceHook {
 public:
  explicit FenceExit(long n) : n_(n) {}
  void OnStore(const void*, size_t) override {}
  void OnFlush(const void*, size_t) override {}
  void OnFence() override {
    if (++seen_ == n_) _exit(kDied);
  }
  long seen() const { return seen_; }
  static constexpr int kDied = 42;

 private:
  long n_;
  long seen_ = 0;
};

// The files under /k and /k/d, path ("k/...") -> content.
std::map<std::string, std::string> ReadTree(mapfs_t* fs, std::string* err) {
  std::map<std::string, std::string> t;
  for (std::string dir : {"k", "k/d"}) {
    std::vector<std::string> names;
    if (int e = fstest::ListDir(fs, "/" + dir, &names)) {
      *err += "cannot list /" + dir + ": " + fstest::ErrName(e) + "; ";
      continue;
    }
    for (auto& n : names) {
      std::string p = dir + "/" + n;
      if (p == "k/d") continue;
      std::string c;
      if (!fstest::ReadFile(fs, "/" + p, &c)) *err += "cannot read /" + p + ": " + mapfs_last_error() + "; ";
      t[p] = c;
    }
  }
  return t;
}

// Makes /k and /k/d and the files of `m` (their last candidate).
void Populate(const std::string& pool, const Model& m) {
  mapfs_t* fs = fstest::MountC(pool);
  ASSERT_NE(fs, nullptr);
  ASSERT_EQ(mapfs_mkdir(fs, "/k", 0755), 0);
  ASSERT_EQ(mapfs_mkdir(fs, "/k/d", 0755), 0);
  for (auto& [p, f] : m) {
    int fd = mapfs_open(fs, ("/" + p).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(fstest::WriteAll(fs, fd, f.cand.back().data(), f.cand.back().size(), 0));
    ASSERT_EQ(mapfs_close(fs, fd), 0);
  }
  ASSERT_EQ(mapfs_unmount(fs), 0);
}

Model StartModel() {
  Model m;
  for (int i = 0; i < 4; i++) m["k/" + std::string(i == 3 ? "d/" : "") + "f" + std::to_string(i)].cand = {Pattern(1000 + i, 0, 5000u + 70000u * i)};
  return m;
}

std::vector<std::string> Names(const Model& m) {
  std::vector<std::string> v;
  for (auto& [p, f] : m) v.push_back(p);
  return v;
}

// The checks after one kill; returns the violations ("" if none) and, when
// there are none, sets *m to what the pool holds now.
std::string AfterKill(const std::string& pool, Model* m, const Progress& pr, int mode) {
  std::vector<std::string> problems = CheckPool(pool);  // the first mount recovers
  if (!problems.empty()) return "fsck after recovery:\n" + Join(problems);
  mapfs_options o{};
  o.mode = mode;
  mapfs_t* fs = mapfs_mount(pool.c_str(), &o);
  if (fs == nullptr) return std::string("mount after recovery: ") + mapfs_last_error();
  std::string err;
  auto got = ReadTree(fs, &err);
  Model done = *m;
  for (auto& op : pr.done) ApplyOp(&done, op, mode == 0);
  if (err.empty()) err = CheckState(done, pr, mode == 0, mode == 2, got);
  // Usable: a new file is created, written, read back and deleted.
  std::string data = Pattern(7, 0, 150000), back;
  int fd = mapfs_open(fs, "/usable", O_CREAT | O_EXCL | O_RDWR, 0644);
  if (fd < 0 || !fstest::WriteAll(fs, fd, data.data(), data.size(), 0) || mapfs_close(fs, fd) != 0 ||
      !fstest::ReadFile(fs, "/usable", &back) || back != data || mapfs_unlink(fs, "/usable") != 0)
    err += std::string("the pool is not usable: ") + mapfs_last_error() + "; ";
  if (mapfs_unmount(fs) != 0) err += std::string("unmount: ") + mapfs_last_error() + "; ";
  if (err.empty()) {
    m->clear();
    for (auto& [p, c] : got) (*m)[p].cand = {c};
  }
  return err;
}

struct Tally {
  long kills = 0, in_flight = 0, acked = 0, violations = 0;
  void Print(const std::string& name, uint64_t seed) const {
    std::printf("crash-kill: %s: %ld kills, %ld violations (%ld operations acknowledged, %ld in flight at the kill; seed %llu)\n",
                name.c_str(), kills, violations, acked, in_flight, static_cast<unsigned long long>(seed));
    std::fflush(stdout);
  }
};

std::string TestName() {
  auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(t->test_suite_name()) + "." + t->name();
}

// One kill's reports: counts them, checks the pool, records violations.
void Judge(const std::string& pool, Model* m, const std::string& text, int rc, int mode, Tally* t,
           const std::string& what) {
  Progress pr = ParseReports(text);
  EXPECT_EQ(pr.error, "") << what << ": the writer failed";
  t->kills++;
  t->acked += static_cast<long>(pr.done.size());
  t->in_flight += pr.in_flight;
  (void)rc;
  std::string err = AfterKill(pool, m, pr, mode);
  if (!err.empty()) {
    t->violations++;
    ADD_FAILURE() << what << ": " << err << "\nacknowledged " << pr.done.size()
                  << " operations; in flight: " << (pr.in_flight ? pr.flight.text : "none");
  }
}

class crash_kill : public ::testing::TestWithParam<int> {};

TEST_P(crash_kill, CApiRandom) {
  const int mode = GetParam();
  const uint64_t seed = Seed() + static_cast<uint64_t>(mode);
  std::printf("seed %llu (MAPFS_CRASH_SEED)\n", static_cast<unsigned long long>(Seed()));
  FsPool pool(64ull << 20);
  ASSERT_EQ(pool.error(), "");
  Model m = StartModel();
  Populate(pool.path(), m);
  fstest::Rng rng(seed);
  Tally t;
  const long rounds = Full() ? 1000 : 100;
  uint64_t seq = 0;
  for (long r = 0; r < rounds && t.violations == 0; r++) {
    int delay = static_cast<int>(rng.Below(r % 3 == 0 ? 120 : 40));
    int pfd[2];
    ASSERT_EQ(::pipe(pfd), 0);
    std::string path = pool.path();
    std::vector<std::string> names = Names(m);
    pid_t pid = fstest::ForkChild([&] {
      ::close(pfd[0]);
      mapfs_options o{};
      o.mode = mode;
      mapfs_t* fs = mapfs_mount(path.c_str(), &o);
      if (fs == nullptr) return Say(pfd[1], std::string("X 0 0 mount: ") + mapfs_last_error()), 3;
      MapfsIo io(fs);
      return RunWriter(io, pfd[1], seed * 1000 + static_cast<uint64_t>(r), seq, -1, names);
    });
    ASSERT_GT(pid, 0);
    ::close(pfd[1]);
    std::string text = ReadFor(pfd[0], delay);
    ::kill(pid, SIGKILL);
    int rc = fstest::WaitChild(pid);
    text += ReadFor(pfd[0], -1);
    ::close(pfd[0]);
    EXPECT_EQ(rc, 128 + SIGKILL) << "the writer ended by itself: " << text.substr(text.size() > 500 ? text.size() - 500 : 0);
    Progress pr = ParseReports(text);
    if (pr.last_seq >= 0) seq = static_cast<uint64_t>(pr.last_seq) + 1;
    Judge(pool.path(), &m, text, rc, mode, &t, "round " + std::to_string(r) + " (kill after " + std::to_string(delay) + " ms)");
  }
  t.Print(TestName(), seed);
  EXPECT_GE(t.acked, rounds) << "the writer hardly ran: the test tested little";
  FS_EXPECT_CLEAN(pool.path());
}

// The Nth-fence kills: one fixed stream from one pool image.
TEST_P(crash_kill, CApiNthFence) {
  const int mode = GetParam();
  const uint64_t seed = Seed() + 10 + static_cast<uint64_t>(mode);
  std::printf("seed %llu (MAPFS_CRASH_SEED)\n", static_cast<unsigned long long>(Seed()));
  const long ops = Full() ? 100 : 40;
  FsPool pool(32ull << 20);
  ASSERT_EQ(pool.error(), "");
  const Model m0 = StartModel();
  Populate(pool.path(), m0);
  std::string image;
  {
    std::ifstream in(pool.path(), std::ios::binary);
    image.assign(std::istreambuf_iterator<char>(in), {});
    ASSERT_EQ(image.size(), 32ull << 20);
  }
  auto restore = [&] {
    std::ofstream out(pool.path(), std::ios::binary | std::ios::trunc);
    out.write(image.data(), static_cast<std::streamsize>(image.size()));
    return out.good();
  };
  // One run to completion counts the fences; then kills at fence 1, 1 +
  // stride, ... (stride 1 with MAPFS_CRASH_FULL, else about 60 kills).
  auto run = [&](long n, std::string* text) -> int {
    int pfd[2];
    if (::pipe(pfd) != 0) return -1;
    std::string path = pool.path();
    pid_t pid = fstest::ForkChild([&] {
      ::close(pfd[0]);
      mapfs_options o{};
      o.mode = mode;
      mapfs_t* fs = mapfs_mount(path.c_str(), &o);
      if (fs == nullptr) return Say(pfd[1], std::string("X 0 0 mount: ") + mapfs_last_error()), 3;
      FenceExit hook(n);
      medium::SetTraceHook(&hook);
      MapfsIo io(fs);
      int rc = RunWriter(io, pfd[1], seed, 0, ops, Names(m0));
      medium::SetTraceHook(nullptr);
      Say(pfd[1], "N " + std::to_string(hook.seen()));
      return rc;
    });
    ::close(pfd[1]);
    *text = ReadFor(pfd[0], -1);
    ::close(pfd[0]);
    return pid > 0 ? fstest::WaitChild(pid) : -1;
  };
  Tally t;
  std::string text;
  ASSERT_TRUE(restore());
  ASSERT_EQ(run(-1, &text), 0) << text;
  ASSERT_EQ(ParseReports(text).done.size(), static_cast<size_t>(ops)) << text;
  const long fences = std::stol(text.substr(text.rfind("\nN ") + 3));
  {
    Model m = m0;
    Judge(pool.path(), &m, text, 0, mode, &t, "the stream run to completion");
    t.kills--;  // it was not killed
  }
  const long stride = Full() ? 1 : std::max(1L, fences / 60);
  for (long n = 1; n <= fences && t.violations == 0; n += stride) {
    ASSERT_TRUE(restore());
    int rc = run(n, &text);
    ASSERT_EQ(rc, FenceExit::kDied) << "fence " << n << " of " << fences << ": the writer exited " << rc << "\n" << text;
    Model m = m0;
    Judge(pool.path(), &m, text, rc, mode, &t, "killed at fence " + std::to_string(n) + " of " + std::to_string(fences));
  }
  std::printf("%ld fences in the stream, every %ld-th killed at\n", fences, stride);
  t.Print(TestName(), seed);
}

// ------------------------------------------------------------ the shim

#ifdef MAPFS_CLI
constexpr const char* kMount = "/mapfs-kill";

// Starts `mapfs run --pool POOL --mode MODE -- kill_writer ARGS...` with the
// write end of a pipe as its report descriptor; returns its pid and the
// pipe's read end.
pid_t Spawn(const std::string& pool, int mode, const std::vector<std::string>& args, int* rfd,
            const std::vector<std::pair<std::string, std::string>>& env = {}) {
  int pfd[2];
  if (::pipe(pfd) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pfd[0]);
    for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    int out = ::dup2(pfd[1], 100);
    std::vector<std::string> a = {MAPFS_CLI, "run", "--pool", pool, "--mount", kMount, "--mode", ModeArg(mode),
                                  "--", KILL_WRITER};
    a.push_back(args[0]);
    a.push_back(kMount);
    a.push_back(std::to_string(out));
    a.insert(a.end(), args.begin() + 1, args.end());
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(pfd[1]);
  *rfd = pfd[0];
  return pid;
}

bool HaveShim() {
  return ::access(MAPFS_CLI, X_OK) == 0 && ::access(PRELOAD_LIB, R_OK) == 0;
}

TEST_P(crash_kill, ShimRandom) {
  if (!HaveShim()) GTEST_SKIP() << "no LD_PRELOAD shim in this build (sanitized builds have none)";
  const int mode = GetParam();
  const uint64_t seed = Seed() + 20 + static_cast<uint64_t>(mode);
  std::printf("seed %llu (MAPFS_CRASH_SEED)\n", static_cast<unsigned long long>(Seed()));
  FsPool pool(64ull << 20);
  ASSERT_EQ(pool.error(), "");
  Model m = StartModel();
  Populate(pool.path(), m);
  fstest::Rng rng(seed);
  Tally t;
  const long rounds = Full() ? 500 : 60;
  uint64_t seq = 0;
  for (long r = 0; r < rounds && t.violations == 0; r++) {
    // mapfs run execs the writer: its start costs a few ms more.
    int delay = 10 + static_cast<int>(rng.Below(r % 3 == 0 ? 150 : 50));
    std::vector<std::string> args = {"write", std::to_string(seed * 1000 + static_cast<uint64_t>(r)),
                                     std::to_string(seq), "-1"};
    for (auto& n : Names(m)) args.push_back(n);
    int rfd = -1;
    pid_t pid = Spawn(pool.path(), mode, args, &rfd);
    ASSERT_GT(pid, 0);
    std::string text = ReadFor(rfd, delay);
    ::kill(pid, SIGKILL);
    int rc = fstest::WaitChild(pid);
    text += ReadFor(rfd, -1);
    ::close(rfd);
    EXPECT_EQ(rc, 128 + SIGKILL) << "the writer ended by itself: " << text.substr(text.size() > 500 ? text.size() - 500 : 0);
    Progress pr = ParseReports(text);
    if (pr.last_seq >= 0) seq = static_cast<uint64_t>(pr.last_seq) + 1;
    Judge(pool.path(), &m, text, rc, mode, &t, "round " + std::to_string(r) + " (kill after " + std::to_string(delay) + " ms)");
  }
  t.Print(TestName(), seed);
  EXPECT_GE(t.acked, rounds) << "the writer hardly ran under the shim: the test tested little";
  FS_EXPECT_CLEAN(pool.path());
}
// The Nth-fence kills under the shim: the same stream from one pool image,
// kill_writer under a copy of the shim with a fence hook, which _exits at
// the process's Nth store fence (from its start: the shim's mount too).
TEST_P(crash_kill, ShimNthFence) {
  if (!HaveShim() || ::access(PRELOAD_TRACED, R_OK) != 0) GTEST_SKIP() << "no traced LD_PRELOAD shim in this build";
  const int mode = GetParam();
  const uint64_t seed = Seed() + 40 + static_cast<uint64_t>(mode);
  std::printf("seed %llu (MAPFS_CRASH_SEED)\n", static_cast<unsigned long long>(Seed()));
  const long ops = Full() ? 60 : 20;
  FsPool pool(32ull << 20);
  ASSERT_EQ(pool.error(), "");
  const Model m0 = StartModel();
  Populate(pool.path(), m0);
  std::string image;
  {
    std::ifstream in(pool.path(), std::ios::binary);
    image.assign(std::istreambuf_iterator<char>(in), {});
  }
  const long stride = Full() ? 1 : 3;
  Tally t;
  bool completed = false;
  for (long n = 1; !completed && t.violations == 0 && n < 100000; n += stride) {
    {
      std::ofstream out(pool.path(), std::ios::binary | std::ios::trunc);
      out.write(image.data(), static_cast<std::streamsize>(image.size()));
      ASSERT_TRUE(out.good());
    }
    std::vector<std::string> args = {"write", std::to_string(seed), "0", std::to_string(ops)};
    for (auto& nm : Names(m0)) args.push_back(nm);
    int rfd = -1;
    pid_t pid = Spawn(pool.path(), mode, args, &rfd,
                      {{"MAPFS_PRELOAD_LIB", PRELOAD_TRACED}, {"MAPFS_TEST_EXIT_AT_FENCE", std::to_string(n)}});
    ASSERT_GT(pid, 0);
    std::string text = ReadFor(rfd, -1);
    ::close(rfd);
    int rc = fstest::WaitChild(pid);
    ASSERT_TRUE(rc == 42 || rc == 0) << "fence " << n << ": the writer exited " << rc << "\n" << text;
    completed = rc == 0;
    if (completed) {
      ASSERT_EQ(ParseReports(text).done.size(), static_cast<size_t>(ops)) << text;
    }
    Model m = m0;
    Judge(pool.path(), &m, text, rc, mode, &t, "killed at fence " + std::to_string(n));
  }
  EXPECT_TRUE(completed || t.violations > 0) << "the stream never completed";
  t.Print(TestName(), seed);
}

// Reads lines from `fd` until one equals `want` (true), EOF or `ms`.
bool WaitLine(int fd, const std::string& want, int ms, std::string* seen) {
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    if (("\n" + *seen).find("\n" + want + "\n") != std::string::npos) return true;
    int left = ms - static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - t0)
                                         .count());
    if (left <= 0) return false;
    struct pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, std::min(left, 100)) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return ("\n" + *seen).find("\n" + want + "\n") != std::string::npos;
    seen->append(buf, static_cast<size_t>(n));
  }
}

// A process under the shim takes an flock or fcntl lock on a file and keeps
// writing it (so it is often inside the core's per-file lock too) until it
// is SIGKILLed. A second process under the shim, trying the lock meanwhile,
// finds it busy while the holder lives and gets it within seconds of the
// kill; it then writes and reads the file (the core's lock was freed too).
class crash_kill_lock : public ::testing::TestWithParam<const char*> {};

TEST_P(crash_kill_lock, ShimLockHolder) {
  if (!HaveShim()) GTEST_SKIP() << "no LD_PRELOAD shim in this build (sanitized builds have none)";
  const std::string kind = GetParam();
  const uint64_t seed = Seed() + 30;
  std::printf("seed %llu (MAPFS_CRASH_SEED)\n", static_cast<unsigned long long>(Seed()));
  FsPool pool(64ull << 20);
  ASSERT_EQ(pool.error(), "");
  Populate(pool.path(), {});
  fstest::Rng rng(seed);
  Tally t;
  const int rounds = Full() ? 30 : 6;
  for (int r = 0; r < rounds; r++) {
    SCOPED_TRACE("round " + std::to_string(r));
    const int mode = r % 3;
    int hfd = -1, wfd = -1;
    pid_t holder = Spawn(pool.path(), mode, {"lock", kind}, &hfd);
    ASSERT_GT(holder, 0);
    std::string hs, ws;
    ASSERT_TRUE(WaitLine(hfd, "L", 20000, &hs)) << "the holder never took the lock: " << hs;
    pid_t waiter = Spawn(pool.path(), mode, {"trylock", kind}, &wfd);
    ASSERT_GT(waiter, 0);
    bool busy = WaitLine(wfd, "BUSY", 20000, &ws);
    ::usleep(static_cast<useconds_t>(rng.Below(30000)));
    ::kill(holder, SIGKILL);
    int hrc = fstest::WaitChild(holder);
    auto t0 = std::chrono::steady_clock::now();
    bool got = WaitLine(wfd, "OK", 10000, &ws);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!got) ::kill(waiter, SIGKILL);
    int wrc = fstest::WaitChild(waiter);
    ::close(hfd);
    ::close(wfd);
    t.kills++;
    bool ok = busy && got && hrc == 128 + SIGKILL && wrc == 0;
    EXPECT_TRUE(busy) << "the lock was not held while its holder lived: " << ws;
    EXPECT_TRUE(got) << "the other process never got the lock or could not use the file after the kill: " << ws;
    EXPECT_EQ(hrc, 128 + SIGKILL);
    EXPECT_EQ(wrc, 0) << ws;
    EXPECT_LT(took, 5.0);
    auto problems = CheckPool(pool.path());
    EXPECT_TRUE(problems.empty()) << Join(problems);
    ok = ok && problems.empty();
    t.violations += !ok;
    if (!ok) break;
  }
  t.Print(TestName(), seed);
}

INSTANTIATE_TEST_SUITE_P(Kinds, crash_kill_lock, ::testing::Values("flock", "fcntl"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });
#endif

INSTANTIATE_TEST_SUITE_P(Modes, crash_kill, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& p) { return std::string(ModeArg(p.param)); });

}  // namespace
}  // namespace mapfs::crash
