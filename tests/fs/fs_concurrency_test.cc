// Concurrency of the file system: many threads on one mount, many processes
// on one pool, and processes that die holding a file's lock or an open file.
//
// Each test names the property it checks; each fails (wrong bytes or names,
// an fsck problem, a call that got through a lock it should have waited for,
// or the deadline below) when that property breaks.
//
// No test hangs: a SIGALRM deadline aborts the binary with the test's name
// (a deadlock fails instead of blocking CI); children have their own alarm
// and the parent kills a child that outlives its wait. Children never use
// gtest assertions: they print a diagnostic to stderr and exit with a code
// the parent checks. Forks happen while the parent has only one thread.
//
// Environment: MAPFS_CONC_SCALE=N multiplies the iteration counts (and the
// deadlines) for longer local runs; the default keeps the binary well under
// a minute in a normal build.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <thread>

#include "fs_test_util.h"
#include "meta/inode_locks.h"

namespace mapfs::fstest {
namespace {

using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------ helpers

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

long Scale() { return std::max(1L, EnvInt("MAPFS_CONC_SCALE", 1)); }
// A time limit: generous under sanitizers and with a larger scale.
unsigned Limit(unsigned seconds) { return seconds * (kSanitized ? 4u : 1u) * static_cast<unsigned>(Scale()); }

std::string Err() { return ErrName(errno) + " (" + mapfs_last_error() + ")"; }

// Aborts the binary when a test outlives its deadline, naming the test: a
// deadlock fails instead of hanging. A signal, not a thread, so that forks
// stay single-threaded.
class Deadline {
 public:
  explicit Deadline(unsigned seconds) {
    // ctest gives each test 300 s: fire first, with the diagnostic.
    if (Scale() == 1) seconds = std::min(seconds, 280u);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    len_ = std::snprintf(msg_, sizeof msg_, "\n*** DEADLINE: %s.%s still running after %u s (deadlock?)\n",
                         info ? info->test_suite_name() : "?", info ? info->name() : "?", seconds);
    len_ = std::min<int>(len_, static_cast<int>(sizeof msg_) - 1);
    struct sigaction sa {};
    sa.sa_handler = OnAlarm;
    ::sigaction(SIGALRM, &sa, &old_);
    ::alarm(seconds);
  }
  ~Deadline() {
    ::alarm(0);
    ::sigaction(SIGALRM, &old_, nullptr);
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

 private:
  static void OnAlarm(int) {
    ssize_t r = ::write(2, msg_, static_cast<size_t>(len_));
    (void)r;
    std::abort();
  }
  static inline char msg_[256];
  static inline int len_ = 0;
  struct sigaction old_ {};
};

// Failures seen by worker threads (reported by the test's thread).
class Errors {
 public:
  void Add(const std::string& s) {
    std::lock_guard<std::mutex> l(mu_);
    if (v_.size() < 30) v_.push_back(s);
    n_.fetch_add(1);
  }
  bool any() const { return n_.load() != 0; }
  std::string Report() {
    std::lock_guard<std::mutex> l(mu_);
    return std::to_string(n_.load()) + " failure(s):\n" + Join(v_, 30);
  }

 private:
  std::mutex mu_;
  std::vector<std::string> v_;
  std::atomic<int> n_{0};
};
#define EXPECT_NO_ERRORS(errs) EXPECT_FALSE((errs).any()) << (errs).Report()

// A call that should have finished is blocked for good (a lock nobody will
// release): the thread cannot be joined, so the binary aborts, saying what.
[[noreturn]] void Stuck(const std::string& what) {
  std::fprintf(stderr, "\n*** STUCK: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A child's failure: a diagnostic on stderr and an exit code.
int ChildFail(int code, const std::string& msg) {
  std::fprintf(stderr, "[child %d] %s\n", static_cast<int>(::getpid()), msg.c_str());
  std::fflush(stderr);
  return code;
}

// "" if the file holds exactly `size` bytes of pattern `tag`, else why not.
std::string VerifyFile(mapfs_t* fs, const std::string& path, uint64_t tag, uint64_t size) {
  std::string data;
  if (!ReadFile(fs, path, &data)) return path + ": read: " + Err();
  if (data.size() != size)
    return path + ": " + std::to_string(data.size()) + " bytes, expected " + std::to_string(size);
  int64_t bad = PatternMismatch(data.data(), data.size(), tag, 0);
  if (bad >= 0) return path + ": wrong byte at offset " + std::to_string(bad);
  return "";
}

// Writes `size` bytes of pattern `tag` from offset `from` with mapfs_write
// (the descriptor's offset) in random chunks; "" or why it failed.
std::string WriteChunks(mapfs_t* fs, int fd, Rng& rng, uint64_t tag, uint64_t from, uint64_t size,
                        uint64_t max_chunk) {
  std::vector<char> buf;
  for (uint64_t done = 0; done < size;) {
    uint64_t n = std::min<uint64_t>(size - done, 1 + rng.Below(max_chunk));
    buf.resize(n);
    FillPattern(buf.data(), n, tag, from + done);
    ssize_t w = mapfs_write(fs, fd, buf.data(), n);
    if (w != static_cast<ssize_t>(n))
      return "write of " + std::to_string(n) + " at " + std::to_string(from + done) + " returned " +
             std::to_string(w) + ": " + Err();
    done += n;
  }
  return "";
}

uint64_t FreeBlocks(mapfs_t* fs) {
  struct statvfs sv {};
  if (mapfs_statvfs(fs, &sv) != 0) return 0;
  return sv.f_bfree;
}

// Every entry below `dir` (recursively), with its type. Directories that
// vanish while walking are skipped.
void WalkTree(mapfs_t* fs, const std::string& dir, std::vector<std::pair<std::string, unsigned char>>* out,
              int depth = 0) {
  mapfs_dir_t* d = mapfs_opendir(fs, dir.c_str());
  if (d == nullptr) return;
  std::string prefix = dir == "/" ? "" : dir;
  std::vector<std::pair<std::string, unsigned char>> here;
  while (struct dirent* e = mapfs_readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") here.push_back({prefix + "/" + n, e->d_type});
  }
  mapfs_closedir(d);
  for (auto& [p, t] : here) {
    out->push_back({p, t});
    if (t == DT_DIR && depth < 64) WalkTree(fs, p, out, depth + 1);
  }
}

std::string Basename(const std::string& p) { return p.substr(p.rfind('/') + 1); }

// ===================================================== 1. threads, one mount

// Four threads create, write, append, overwrite, rename, read and unlink
// their own files in one shared directory and in their own directories at
// once. Every read in between returns exactly the writer's bytes; at the end
// each directory lists exactly the surviving names, every file holds its
// writer's bytes (also after a remount), and fsck finds nothing.
TEST(FsConcurrency, ThreadsOnOneMountKeepEveryFileIntact) {
  Deadline dl(Limit(120));
  FsPool pool(512ull << 20);
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  constexpr int kThreads = 4;
  const int ops = static_cast<int>(1000 * Scale());
  ASSERT_EQ(mapfs_mkdir(fs, "/shared", 0755), 0) << Err();
  for (int t = 0; t < kThreads; t++)
    ASSERT_EQ(mapfs_mkdir(fs, ("/own" + std::to_string(t)).c_str(), 0755), 0) << Err();

  struct FileState {
    uint64_t tag, size;
  };
  std::vector<std::map<std::string, FileState>> models(kThreads);
  Errors errs;
  auto worker = [&](int t) {
    Rng rng(1000 + static_cast<uint64_t>(t));
    auto& m = models[static_cast<size_t>(t)];
    const std::string own = "/own" + std::to_string(t);
    uint64_t gen = 0;
    auto fail = [&](const std::string& what) { errs.Add("thread " + std::to_string(t) + ": " + what); };
    auto pick = [&]() -> std::map<std::string, FileState>::iterator {
      if (m.empty()) return m.end();
      auto it = m.begin();
      std::advance(it, static_cast<long>(rng.Below(m.size())));
      return it;
    };
    auto file_size = [&]() -> uint64_t {
      return rng.Below(4) == 0 ? rng.Below(384 << 10) : rng.Below(16 << 10);
    };
    for (int i = 0; i < ops && !errs.any(); i++) {
      uint64_t op = rng.Below(100);
      if (m.size() < 3 || (op < 30 && m.size() < 24)) {  // create
        std::string path = (rng.Below(2) ? "/shared" : own) + "/t" + std::to_string(t) + "_" + std::to_string(i);
        FileState st{(static_cast<uint64_t>(t + 1) << 40) | ++gen, file_size()};
        int fd = mapfs_open(fs, path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) return fail("create " + path + ": " + Err());
        std::string e = WriteChunks(fs, fd, rng, st.tag, 0, st.size, 64 << 10);
        mapfs_close(fs, fd);
        if (!e.empty()) return fail(path + ": " + e);
        m[path] = st;
        e = VerifyFile(fs, path, st.tag, st.size);
        if (!e.empty()) return fail("after create: " + e);
      } else if (op < 45) {  // append
        auto it = pick();
        uint64_t n = 1 + rng.Below(32 << 10);
        int fd = mapfs_open(fs, it->first.c_str(), O_WRONLY | O_APPEND);
        if (fd < 0) return fail("open " + it->first + ": " + Err());
        std::string e = WriteChunks(fs, fd, rng, it->second.tag, it->second.size, n, 8 << 10);
        mapfs_close(fs, fd);
        if (!e.empty()) return fail(it->first + " append: " + e);
        it->second.size += n;
        struct stat sb {};
        if (mapfs_stat(fs, it->first.c_str(), &sb) != 0) return fail("stat " + it->first + ": " + Err());
        if (static_cast<uint64_t>(sb.st_size) != it->second.size)
          return fail(it->first + ": size " + std::to_string(sb.st_size) + " after append, expected " +
                      std::to_string(it->second.size));
      } else if (op < 55) {  // overwrite with new contents
        auto it = pick();
        FileState st{(static_cast<uint64_t>(t + 1) << 40) | ++gen, file_size()};
        int fd = mapfs_open(fs, it->first.c_str(), O_WRONLY | O_TRUNC);
        if (fd < 0) return fail("open O_TRUNC " + it->first + ": " + Err());
        std::string e = WriteChunks(fs, fd, rng, st.tag, 0, st.size, 64 << 10);
        mapfs_close(fs, fd);
        if (!e.empty()) return fail(it->first + " overwrite: " + e);
        it->second = st;
        e = VerifyFile(fs, it->first, st.tag, st.size);
        if (!e.empty()) return fail("after overwrite: " + e);
      } else if (op < 65) {  // pwrite in the middle (same bytes) and read the window back
        auto it = pick();
        if (it->second.size == 0) continue;
        uint64_t off = rng.Below(it->second.size);
        uint64_t n = std::min<uint64_t>(it->second.size - off, 1 + rng.Below(8 << 10));
        std::vector<char> buf(n), back(n);
        FillPattern(buf.data(), n, it->second.tag, off);
        int fd = mapfs_open(fs, it->first.c_str(), O_RDWR);
        if (fd < 0) return fail("open " + it->first + ": " + Err());
        bool ok = WriteAll(fs, fd, buf.data(), n, static_cast<off_t>(off)) &&
                  mapfs_pread(fs, fd, back.data(), n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
        mapfs_close(fs, fd);
        if (!ok) return fail(it->first + ": pwrite/pread: " + Err());
        if (back != buf) return fail(it->first + ": pread after pwrite returned other bytes");
      } else if (op < 75) {  // rename between the shared and the own directory
        auto it = pick();
        std::string name = Basename(it->first);
        std::string to = (it->first.rfind("/shared/", 0) == 0 ? own : "/shared") + "/" + name;
        if (mapfs_rename(fs, it->first.c_str(), to.c_str()) != 0)
          return fail("rename " + it->first + " -> " + to + ": " + Err());
        struct stat sb {};
        if (mapfs_stat(fs, it->first.c_str(), &sb) == 0 || errno != ENOENT)
          return fail(it->first + " still exists after rename");
        FileState st = it->second;
        m.erase(it);
        m[to] = st;
      } else if (op < 87) {  // unlink
        auto it = pick();
        if (mapfs_unlink(fs, it->first.c_str()) != 0) return fail("unlink " + it->first + ": " + Err());
        struct stat sb {};
        if (mapfs_stat(fs, it->first.c_str(), &sb) == 0 || errno != ENOENT)
          return fail(it->first + " still exists after unlink");
        m.erase(it);
      } else {  // read a whole file back
        auto it = pick();
        std::string e = VerifyFile(fs, it->first, it->second.tag, it->second.size);
        if (!e.empty()) return fail(e);
      }
    }
  };
  {
    std::vector<std::thread> th;
    for (int t = 0; t < kThreads; t++) th.emplace_back(worker, t);
    for (auto& x : th) x.join();
  }
  EXPECT_NO_ERRORS(errs);

  auto verify_all = [&](mapfs_t* f, const char* when) {
    std::map<std::string, std::vector<std::string>> want;  // directory -> names
    want["/shared"];
    for (int t = 0; t < kThreads; t++) want["/own" + std::to_string(t)];
    for (auto& m : models)
      for (auto& [path, st] : m) {
        want[path.substr(0, path.rfind('/'))].push_back(Basename(path));
        std::string e = VerifyFile(f, path, st.tag, st.size);
        EXPECT_EQ(e, "") << when;
      }
    for (auto& [dir, names] : want) {
      std::vector<std::string> got;
      ASSERT_EQ(ListDir(f, dir, &got), 0) << dir;
      std::sort(got.begin(), got.end());
      std::sort(names.begin(), names.end());
      EXPECT_EQ(got, names) << "readdir of " << dir << " " << when;
    }
  };
  verify_all(fs, "before remount");
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  verify_all(fs, "after remount");
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(pool.path());
}

// ============================================= 2. reader/writer exclusion

// A record of `bytes` bytes whose 8-byte words all hold the generation g.
void FillGeneration(std::vector<uint64_t>* buf, uint64_t g) { std::fill(buf->begin(), buf->end(), g); }
// "" when every word of a record read back holds the same generation.
std::string TornWhere(const std::vector<uint64_t>& buf) {
  for (size_t i = 1; i < buf.size(); i++)
    if (buf[i] != buf[0])
      return "torn read: word 0 is generation " + std::to_string(buf[0]) + " but word " + std::to_string(i) +
             " (byte " + std::to_string(i * 8) + ") is " + std::to_string(buf[i]);
  return "";
}

struct TornParam {
  int mode;
  size_t bytes;
};
void PrintTo(const TornParam& p, std::ostream* os) { *os << ModeName(p.mode) << ", " << (p.bytes >> 10) << " KiB"; }
std::string TornName(const ::testing::TestParamInfo<TornParam>& p) {
  return std::string(ModeName(p.param.mode)) + "_" + std::to_string(p.param.bytes >> 10) + "k";
}

class TornRead : public ::testing::TestWithParam<TornParam> {};

// One thread rewrites a whole record again and again (every 8-byte word =
// the generation g, g+1 each time) while three threads read it whole: a
// read must never mix two generations (the file's reader/writer lock keeps
// a write and a read apart) and never go back to an older generation.
// 256 KiB in strict mode (a small partition) is switched to a new
// partition by copy; 1 MiB (an L3 partition) has its pages swapped for
// fresh ones.
TEST_P(TornRead, ReadersNeverSeeHalfAWrite) {
  Deadline dl(Limit(120));
  const int mode = GetParam().mode;
  const size_t words = GetParam().bytes / 8;
  FsPool pool(256ull << 20, 4096, mode);
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path(), mode);
  ASSERT_NE(fs, nullptr);
  int wfd = mapfs_open(fs, "/record", O_CREAT | O_RDWR, 0644);
  ASSERT_GE(wfd, 0) << Err();
  std::vector<uint64_t> first(words);
  FillGeneration(&first, 1);
  ASSERT_TRUE(WriteAll(fs, wfd, first.data(), words * 8, 0)) << Err();

  constexpr int kReaders = 3;
  const uint64_t min_writes = 1000 * static_cast<uint64_t>(Scale());
  const uint64_t min_reads = 1000 * static_cast<uint64_t>(Scale());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads[kReaders] = {};
  std::atomic<uint64_t> distinct[kReaders] = {};
  Errors errs;
  std::thread writer([&] {
    auto t0 = Clock::now();
    std::vector<uint64_t> buf(words);
    for (uint64_t g = 2;; g++) {
      FillGeneration(&buf, g);
      ssize_t w = mapfs_pwrite(fs, wfd, buf.data(), words * 8, 0);
      if (w != static_cast<ssize_t>(words * 8)) {
        errs.Add("pwrite of generation " + std::to_string(g) + " returned " + std::to_string(w) + ": " + Err());
        break;
      }
      if (errs.any()) break;
      // Go on until every reader has overlapped several writes.
      if (g >= min_writes) {
        bool all = true;
        for (int r = 0; r < kReaders; r++) all = all && reads[r].load() >= min_reads && distinct[r].load() >= 10;
        if (all) break;
      }
      if (SecondsSince(t0) > Limit(60)) {
        errs.Add("after " + std::to_string(g) + " writes the readers had not seen 10 generations each");
        break;
      }
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; r++)
    readers.emplace_back([&, r] {
      int fd = mapfs_open(fs, "/record", O_RDONLY);
      if (fd < 0) return errs.Add("open: " + Err());
      std::vector<uint64_t> buf(words);
      uint64_t last = 0;
      while (!stop.load() && !errs.any()) {
        ssize_t n = mapfs_pread(fs, fd, buf.data(), words * 8, 0);
        if (n != static_cast<ssize_t>(words * 8)) {
          errs.Add("reader " + std::to_string(r) + ": pread returned " + std::to_string(n) + ": " + Err());
          break;
        }
        std::string e = TornWhere(buf);
        if (!e.empty()) {
          errs.Add("reader " + std::to_string(r) + ": " + e);
          break;
        }
        if (buf[0] < last) {
          errs.Add("reader " + std::to_string(r) + ": generation went back from " + std::to_string(last) + " to " +
                   std::to_string(buf[0]));
          break;
        }
        if (buf[0] != last) distinct[r]++;
        last = buf[0];
        reads[r]++;
      }
      mapfs_close(fs, fd);
    });
  writer.join();
  for (auto& t : readers) t.join();
  EXPECT_NO_ERRORS(errs);
  // The readers overlapped the writer: they saw several generations.
  for (int r = 0; r < kReaders && !errs.any(); r++) EXPECT_GE(distinct[r].load(), 10u) << "reader " << r;
  ASSERT_EQ(mapfs_close(fs, wfd), 0);
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(pool.path());
}

INSTANTIATE_TEST_SUITE_P(Modes, TornRead,
                         ::testing::Values(TornParam{MAPFS_MODE_POSIX, 64 << 10}, TornParam{MAPFS_MODE_SYNC, 64 << 10},
                                           TornParam{MAPFS_MODE_STRICT, 64 << 10},
                                           TornParam{MAPFS_MODE_STRICT, 256 << 10},
                                           TornParam{MAPFS_MODE_STRICT, 1024 << 10}),
                         TornName);

class TornReadAcrossProcesses : public ::testing::TestWithParam<TornParam> {};

// The same across processes: a child process (its own mount) rewrites the
// record while two threads of the parent read it. The lock lives in shared
// memory, and a strict 256 KiB write swaps the file's pages, which the
// reading process must see whole (invalidation ring).
TEST_P(TornReadAcrossProcesses, ReadersNeverSeeHalfAWrite) {
  Deadline dl(Limit(120));
  const int mode = GetParam().mode;
  const size_t words = GetParam().bytes / 8;
  FsPool pool(256ull << 20, 4096, mode);
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path(), mode);
  ASSERT_NE(fs, nullptr);
  int fd0 = mapfs_open(fs, "/record", O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd0, 0) << Err();
  std::vector<uint64_t> first(words);
  FillGeneration(&first, 1);
  ASSERT_TRUE(WriteAll(fs, fd0, first.data(), words * 8, 0)) << Err();
  ASSERT_EQ(mapfs_close(fs, fd0), 0);

  struct Shared {
    std::atomic<int> stop{0};
    std::atomic<uint64_t> writes{0};
  };
  SharedMem<Shared> sh;
  const std::string path = pool.path();
  pid_t pid = ForkChild(
      [&]() -> int {
        mapfs_options o{};
        o.mode = mode;
        mapfs_t* c = mapfs_mount(path.c_str(), &o);
        if (c == nullptr) return ChildFail(2, "mount: " + Err());
        int fd = mapfs_open(c, "/record", O_RDWR);
        if (fd < 0) return ChildFail(3, "open: " + Err());
        std::vector<uint64_t> buf(words);
        for (uint64_t g = 2; !sh->stop.load(); g++) {
          FillGeneration(&buf, g);
          if (mapfs_pwrite(c, fd, buf.data(), words * 8, 0) != static_cast<ssize_t>(words * 8))
            return ChildFail(4, "pwrite: " + Err());
          sh->writes.fetch_add(1);
        }
        mapfs_close(c, fd);
        if (mapfs_unmount(c) != 0) return ChildFail(5, "unmount: " + Err());
        return 0;
      },
      Limit(100));
  ASSERT_GT(pid, 0);

  constexpr int kReaders = 2;
  const uint64_t min_reads = 500 * static_cast<uint64_t>(Scale());
  const uint64_t min_writes = 300 * static_cast<uint64_t>(Scale());
  std::atomic<uint64_t> distinct[kReaders] = {};
  std::atomic<bool> stop{false};
  Errors errs;
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; r++)
    readers.emplace_back([&, r] {
      int fd = mapfs_open(fs, "/record", O_RDONLY);
      if (fd < 0) return errs.Add("open: " + Err());
      std::vector<uint64_t> buf(words);
      uint64_t last = 0, n_reads = 0;
      auto t0 = Clock::now();
      while (!errs.any() && !stop.load()) {
        if (n_reads >= min_reads && sh->writes.load() >= min_writes && distinct[r].load() >= 10) break;
        if (SecondsSince(t0) > Limit(60)) {
          errs.Add("reader " + std::to_string(r) + ": " + std::to_string(n_reads) + " reads saw " +
                   std::to_string(distinct[r].load()) + " generations of the writer's " +
                   std::to_string(sh->writes.load()) + " in " + std::to_string(Limit(60)) + " s");
          break;
        }
        ssize_t n = mapfs_pread(fs, fd, buf.data(), words * 8, 0);
        if (n != static_cast<ssize_t>(words * 8)) {
          errs.Add("reader " + std::to_string(r) + ": pread returned " + std::to_string(n) + ": " + Err());
          break;
        }
        std::string e = TornWhere(buf);
        if (!e.empty()) {
          errs.Add("reader " + std::to_string(r) + ": " + e);
          break;
        }
        if (buf[0] < last) {
          errs.Add("reader " + std::to_string(r) + ": generation went back from " + std::to_string(last) + " to " +
                   std::to_string(buf[0]));
          break;
        }
        if (buf[0] != last) distinct[r]++;
        last = buf[0];
        n_reads++;
      }
      mapfs_close(fs, fd);
    });
  for (auto& t : readers) t.join();
  sh->stop = 1;
  int rc = WaitChildFor(pid, Limit(60));
  EXPECT_EQ(rc, 0) << "writer child: " << DescribeExit(rc);
  EXPECT_NO_ERRORS(errs);
  for (int r = 0; r < kReaders && !errs.any(); r++) EXPECT_GE(distinct[r].load(), 10u) << "reader " << r;
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(pool.path());
}

INSTANTIATE_TEST_SUITE_P(Modes, TornReadAcrossProcesses,
                         ::testing::Values(TornParam{MAPFS_MODE_POSIX, 64 << 10},
                                           TornParam{MAPFS_MODE_STRICT, 256 << 10},
                                           TornParam{MAPFS_MODE_STRICT, 1024 << 10}),
                         TornName);

// ====================================== 3. readers in parallel, no deadlock

// The file's lock taken directly (a second mount in this process holds it):
// while it is held for reading, a read through the C API goes through and a
// write waits; while it is held for writing, a read waits. Released, the
// waiting call finishes.
TEST(FsConcurrency, ReadLockAdmitsReadersAndHoldsOffWriters) {
  Deadline dl(Limit(60));
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  constexpr size_t kN = 16 << 10;
  std::vector<char> v1(kN), v2(kN);
  FillPattern(v1.data(), kN, 31, 0);
  FillPattern(v2.data(), kN, 32, 0);
  int fd = mapfs_open(fs, "/f", O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << Err();
  ASSERT_TRUE(WriteAll(fs, fd, v1.data(), kN, 0)) << Err();

  auto other = fs::FileSystem::Mount(pool.path());
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  auto ino = (*other)->Lookup("/f");
  ASSERT_TRUE(ino.ok()) << ino.status().ToString();
  meta::InodeLocks locks(&(*other)->mount().pool());
  const uint32_t stripe = meta::InodeLocks::StripeOf(*ino);
  const double kShort = 0.3, kLong = Limit(10);

  // Held for reading: a reader passes, a writer waits.
  locks.ReadLock(stripe);
  std::atomic<int> read_done{0};
  std::thread reader([&] {
    std::vector<char> b(kN);
    read_done = mapfs_pread(fs, fd, b.data(), kN, 0) == static_cast<ssize_t>(kN) && b == v1 ? 1 : 2;
  });
  bool read_passed = WaitUntil([&] { return read_done.load() != 0; }, kLong);
  std::atomic<int> write_done{0};
  std::thread writer([&] { write_done = WriteAll(fs, fd, v2.data(), kN, 0) ? 1 : 2; });
  ::usleep(static_cast<useconds_t>(kShort * 1e6));
  int write_early = write_done.load();
  locks.ReadUnlock(stripe);
  bool write_finished = WaitUntil([&] { return write_done.load() != 0; }, kLong);
  reader.join();
  writer.join();
  EXPECT_TRUE(read_passed) << "a read waited for another reader";
  EXPECT_EQ(read_done.load(), 1) << "the read failed or returned other bytes";
  EXPECT_EQ(write_early, 0) << "a write went through while the file was read-locked";
  EXPECT_TRUE(write_finished);
  EXPECT_EQ(write_done.load(), 1) << Err();

  // Held for writing: a read waits, then sees the last write.
  locks.WriteLock(stripe);
  read_done = 0;
  std::thread reader2([&] {
    std::vector<char> b(kN);
    read_done = mapfs_pread(fs, fd, b.data(), kN, 0) == static_cast<ssize_t>(kN) && b == v2 ? 1 : 2;
  });
  ::usleep(static_cast<useconds_t>(kShort * 1e6));
  int read_early = read_done.load();
  locks.WriteUnlock(stripe);
  bool read_finished = WaitUntil([&] { return read_done.load() != 0; }, kLong);
  reader2.join();
  EXPECT_EQ(read_early, 0) << "a read went through while the file was write-locked";
  EXPECT_TRUE(read_finished);
  EXPECT_EQ(read_done.load(), 1) << "the read after the unlock failed or returned other bytes";

  ASSERT_TRUE((*other)->Unmount().ok());
  other->reset();
  ASSERT_EQ(mapfs_close(fs, fd), 0);
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(pool.path());
}

// Closes race an unlink of the file they hold (a close that has nothing to
// persist takes the inode's read lock while the inode has links, the write
// lock otherwise): whichever comes last frees the file, exactly once. Every
// round's 64 KiB come back (none leaked by a close that missed being the
// last), and fsck finds nothing freed twice.
TEST(FsConcurrency, ClosesRacingAnUnlinkFreeTheFileOnce) {
  Deadline dl(Limit(60));
  FsPool pool(64ull << 20);
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  std::vector<char> data(64 << 10, 'x');
  auto make = [&]() {
    int fd = mapfs_open(fs, "/f", O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return false;
    bool ok = mapfs_write(fs, fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
    return mapfs_close(fs, fd) == 0 && ok;
  };
  ASSERT_TRUE(make()) << Err();
  ASSERT_EQ(mapfs_unlink(fs, "/f"), 0) << Err();
  const uint64_t free0 = FreeBlocks(fs);
  const int rounds = static_cast<int>(300 * Scale());
  for (int r = 0; r < rounds; r++) {
    ASSERT_TRUE(make()) << "round " << r << ": " << Err();
    int a = mapfs_open(fs, "/f", O_RDONLY), b = mapfs_open(fs, "/f", O_RDONLY);
    ASSERT_GE(a, 0) << Err();
    ASSERT_GE(b, 0) << Err();
    std::atomic<int> go{0};
    std::atomic<int> bad{0};
    auto closer = [&](int fd) {
      go.fetch_add(1);
      while (go.load() < 3) {
      }
      if (mapfs_close(fs, fd) != 0) bad.fetch_add(1);
    };
    std::thread t1(closer, a), t2(closer, b);
    go.fetch_add(1);
    while (go.load() < 3) {
    }
    if (mapfs_unlink(fs, "/f") != 0) bad.fetch_add(1);
    t1.join();
    t2.join();
    ASSERT_EQ(bad.load(), 0) << "round " << r << ": a close or the unlink failed: " << Err();
    ASSERT_EQ(FreeBlocks(fs), free0) << "round " << r << ": the file's pages were not returned";
  }
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(pool.path());
}

// Two threads keep files open and read (and stat) them while a third creates,
// writes, renames and unlinks other files and directories in the same
// directory: nothing deadlocks (deadline), every read returns the file's
// bytes, and the directory ends with exactly the two readers' files.
TEST(FsConcurrency, ReadersKeepReadingWhileTheDirectoryChurns) {
  Deadline dl(Limit(90));
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  ASSERT_EQ(mapfs_mkdir(fs, "/d", 0755), 0) << Err();
  constexpr uint64_t kSize = 256 << 10;
  for (int i = 0; i < 2; i++) {
    std::vector<char> b(kSize);
    FillPattern(b.data(), kSize, 40 + static_cast<uint64_t>(i), 0);
    int fd = mapfs_open(fs, ("/d/r" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << Err();
    ASSERT_TRUE(WriteAll(fs, fd, b.data(), kSize, 0)) << Err();
    ASSERT_EQ(mapfs_close(fs, fd), 0);
  }
  const int churn_ops = static_cast<int>(1500 * Scale());
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads[2] = {};
  Errors errs;
  std::vector<std::thread> th;
  for (int i = 0; i < 2; i++)
    th.emplace_back([&, i] {
      const std::string path = "/d/r" + std::to_string(i);
      int fd = mapfs_open(fs, path.c_str(), O_RDONLY);
      if (fd < 0) return errs.Add("open " + path + ": " + Err());
      Rng rng(70 + static_cast<uint64_t>(i));
      std::vector<char> b(64 << 10);
      while (!done.load() && !errs.any()) {
        uint64_t off = rng.Below(kSize), n = 1 + rng.Below(b.size());
        n = std::min(n, kSize - off);
        ssize_t r = mapfs_pread(fs, fd, b.data(), n, static_cast<off_t>(off));
        if (r != static_cast<ssize_t>(n)) return errs.Add(path + ": pread returned " + std::to_string(r) + ": " + Err());
        if (int64_t bad = PatternMismatch(b.data(), n, 40 + static_cast<uint64_t>(i), off); bad >= 0)
          return errs.Add(path + ": wrong byte at " + std::to_string(off + static_cast<uint64_t>(bad)));
        struct stat sb {};
        if (mapfs_stat(fs, path.c_str(), &sb) != 0 || static_cast<uint64_t>(sb.st_size) != kSize)
          return errs.Add("stat " + path + ": " + Err());
        if (i == 1) {  // also open and close it by name, through the churning directory
          int fd2 = mapfs_open(fs, path.c_str(), O_RDONLY);
          if (fd2 < 0) return errs.Add("reopen " + path + ": " + Err());
          mapfs_close(fs, fd2);
        }
        reads[i]++;
      }
      mapfs_close(fs, fd);
    });
  th.emplace_back([&] {
    Rng rng(77);
    std::set<std::string> live;
    std::vector<char> b(32 << 10);
    for (int k = 0; k < churn_ops && !errs.any(); k++) {
      uint64_t op = rng.Below(10);
      if (live.empty() || op < 4) {
        std::string p = "/d/c" + std::to_string(k);
        int fd = mapfs_open(fs, p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) return errs.Add("create " + p + ": " + Err());
        size_t n = 1 + rng.Below(b.size());
        bool ok = WriteAll(fs, fd, b.data(), n, 0);
        mapfs_close(fs, fd);
        if (!ok) return errs.Add("write " + p + ": " + Err());
        live.insert(p);
      } else if (op < 6) {
        std::string p = "/d/m" + std::to_string(k);
        if (mapfs_mkdir(fs, p.c_str(), 0755) != 0) return errs.Add("mkdir " + p + ": " + Err());
        if (mapfs_rmdir(fs, p.c_str()) != 0) return errs.Add("rmdir " + p + ": " + Err());
      } else if (op < 8) {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng.Below(live.size())));
        std::string to = "/d/n" + std::to_string(k);
        if (mapfs_rename(fs, it->c_str(), to.c_str()) != 0) return errs.Add("rename " + *it + ": " + Err());
        live.erase(it);
        live.insert(to);
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng.Below(live.size())));
        if (mapfs_unlink(fs, it->c_str()) != 0) return errs.Add("unlink " + *it + ": " + Err());
        live.erase(it);
      }
    }
    for (auto& p : live)
      if (mapfs_unlink(fs, p.c_str()) != 0) errs.Add("unlink " + p + ": " + Err());
    // Let the readers overlap the churn for at least a few reads each.
    WaitUntil([&] { return errs.any() || (reads[0].load() >= 5 && reads[1].load() >= 5); }, Limit(30));
    done = true;
  });
  for (auto& t : th) t.join();
  EXPECT_NO_ERRORS(errs);
  EXPECT_GE(reads[0].load(), 5u);
  EXPECT_GE(reads[1].load(), 5u);
  std::vector<std::string> names;
  ASSERT_EQ(ListDir(fs, "/d", &names), 0);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"r0", "r1"}));
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(pool.path());
}

// ========================================================== 4. renames race

// Contents of file id k in the rename test: the id, then a pattern.
uint64_t RenameFileSize(uint64_t id) { return 4096 + 997 * id; }
std::string RenameFileBytes(uint64_t id) {
  std::string s(RenameFileSize(id), '\0');
  FillPattern(s.data(), s.size(), 500 + id, 0);
  std::memcpy(s.data(), &id, 8);
  return s;
}

// Two threads move files /a/fK <-> /b/fK (competing for the same files,
// some moves RENAME_NOREPLACE, some RENAME_EXCHANGE of two files), while two
// others move directories d0..d3 (each holding a file) between /a, /b and
// into each other (EINVAL for a move into its own subtree, ENOENT when the
// source moved meanwhile), and create/rename/remove scratch directories.
// Afterwards every name fK is in exactly one of /a and /b, every file's
// contents appear exactly once and intact, every directory is reachable
// from the root exactly once with its file inside (no cycle cut loose),
// and fsck is clean.
TEST(FsConcurrency, RacingRenamesLoseNothing) {
  Deadline dl(Limit(120));
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  constexpr int kFiles = 24, kDirs = 4;
  const int ops = static_cast<int>(2000 * Scale());
  ASSERT_EQ(mapfs_mkdir(fs, "/a", 0755), 0);
  ASSERT_EQ(mapfs_mkdir(fs, "/b", 0755), 0);
  auto put = [&](const std::string& path, const std::string& bytes) {
    int fd = mapfs_open(fs, path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << path << ": " << Err();
    ASSERT_TRUE(WriteAll(fs, fd, bytes.data(), bytes.size(), 0)) << Err();
    ASSERT_EQ(mapfs_close(fs, fd), 0);
  };
  for (uint64_t k = 0; k < kFiles; k++)
    put((k % 2 ? "/b/f" : "/a/f") + std::to_string(k), RenameFileBytes(k));
  for (uint64_t d = 0; d < kDirs; d++) {
    std::string dir = (d % 2 ? "/b/d" : "/a/d") + std::to_string(d);
    ASSERT_EQ(mapfs_mkdir(fs, dir.c_str(), 0755), 0);
    put(dir + "/in" + std::to_string(d), RenameFileBytes(100 + d));
  }
  auto find_dir = [&](const std::string& name) -> std::string {
    for (int attempt = 0; attempt < 50; attempt++) {
      std::vector<std::pair<std::string, unsigned char>> all;
      WalkTree(fs, "/", &all);
      for (auto& [p, t] : all)
        if (t == DT_DIR && Basename(p) == name) return p;
    }
    return "";
  };

  Errors errs;
  std::atomic<uint64_t> moved{0}, dir_moved{0}, into_own{0};
  std::vector<std::thread> th;
  for (int t = 0; t < 2; t++)
    th.emplace_back([&, t] {
      Rng rng(300 + static_cast<uint64_t>(t));
      for (int i = 0; i < ops && !errs.any(); i++) {
        std::string k = std::to_string(rng.Below(kFiles));
        std::string a = "/a/f" + k, b = "/b/f" + k;
        if (rng.Below(5) == 0) {
          std::string other = std::to_string(rng.Below(kFiles));
          std::string x = (rng.Below(2) ? "/a/f" : "/b/f") + k, y = (rng.Below(2) ? "/a/f" : "/b/f") + other;
          if (mapfs_rename2(fs, x.c_str(), y.c_str(), RENAME_EXCHANGE) == 0)
            moved++;
          else if (errno != ENOENT)
            errs.Add("exchange " + x + " " + y + ": " + Err());
          continue;
        }
        unsigned flags = rng.Below(2) ? RENAME_NOREPLACE : 0;
        bool ab = rng.Below(2);
        const std::string& from = ab ? a : b;
        const std::string& to = ab ? b : a;
        if (mapfs_rename2(fs, from.c_str(), to.c_str(), flags) == 0) {
          moved++;
        } else if (errno != ENOENT) {
          // EEXIST would mean fK was in both directories at once.
          errs.Add("rename " + from + " -> " + to + ": " + Err());
        }
      }
    });
  for (int t = 0; t < 2; t++)
    th.emplace_back([&, t] {
      Rng rng(400 + static_cast<uint64_t>(t));
      for (int i = 0; i < ops / 3 && !errs.any(); i++) {
        // This thread moves d<t> and d<t+2>; the other thread's moves make
        // its paths go stale, which is what ENOENT stands for.
        int mine = t + 2 * static_cast<int>(rng.Below(2));
        std::string name = "d" + std::to_string(mine);
        std::string from = find_dir(name);
        if (from.empty()) {
          errs.Add(name + " is nowhere to be found");
          break;
        }
        std::string to;
        uint64_t where = rng.Below(3);
        if (where == 0) {
          to = "/a/" + name;
        } else if (where == 1) {
          to = "/b/" + name;
        } else {
          std::string into = find_dir("d" + std::to_string((mine + 1 + rng.Below(kDirs - 1)) % kDirs));
          if (into.empty()) continue;
          to = into + "/" + name;
        }
        if (mapfs_rename(fs, from.c_str(), to.c_str()) == 0)
          dir_moved++;
        else if (errno == EINVAL)
          into_own++;
        else if (errno != ENOENT)
          errs.Add("rename " + from + " -> " + to + ": " + Err());
        // A scratch directory that only this thread names: every step works.
        std::string s1 = "/b/s" + std::to_string(t), s2 = "/a/s" + std::to_string(t);
        if (mapfs_mkdir(fs, s1.c_str(), 0755) != 0) errs.Add("mkdir " + s1 + ": " + Err());
        else if (mapfs_rename(fs, s1.c_str(), s2.c_str()) != 0) errs.Add("rename " + s1 + ": " + Err());
        else if (mapfs_rmdir(fs, s2.c_str()) != 0) errs.Add("rmdir " + s2 + ": " + Err());
      }
    });
  for (auto& t : th) t.join();
  EXPECT_NO_ERRORS(errs);
  EXPECT_GT(moved.load(), 0u);
  EXPECT_GT(dir_moved.load(), 0u);

  auto verify = [&](mapfs_t* f, const char* when) {
    SCOPED_TRACE(when);
    std::vector<std::pair<std::string, unsigned char>> all;
    WalkTree(f, "/", &all);
    std::map<std::string, int> fnames, dirs;
    std::map<uint64_t, int> ids;
    for (auto& [p, t] : all) {
      std::string base = Basename(p);
      if (p == "/a" || p == "/b") continue;
      if (t == DT_DIR) {
        dirs[base]++;
        continue;
      }
      std::string data;
      ASSERT_TRUE(ReadFile(f, p, &data)) << p << ": " << Err();
      uint64_t id = ~0ull;
      if (data.size() >= 8) std::memcpy(&id, data.data(), 8);
      if (base[0] == 'f') {
        fnames[base]++;
        EXPECT_TRUE(p == "/a/" + base || p == "/b/" + base) << p << " is not where file moves go";
        EXPECT_LT(id, static_cast<uint64_t>(kFiles)) << p;
      } else {
        // in<d> stays inside d<d>, with its own contents.
        EXPECT_EQ(base.substr(0, 2), "in") << "unexpected entry " << p;
        std::string d = base.substr(2);
        EXPECT_EQ(Basename(p.substr(0, p.rfind('/'))), "d" + d) << p;
        EXPECT_EQ(id, 100 + std::stoull(d)) << p;
      }
      ids[id]++;
      if (id < 200) {
        EXPECT_EQ(data, RenameFileBytes(id)) << p << " holds damaged contents";
      }
    }
    for (int k = 0; k < kFiles; k++) {
      EXPECT_EQ(fnames["f" + std::to_string(k)], 1) << "name f" << k;
      EXPECT_EQ(ids[static_cast<uint64_t>(k)], 1) << "contents of file " << k;
    }
    for (int d = 0; d < kDirs; d++) {
      EXPECT_EQ(dirs["d" + std::to_string(d)], 1) << "directory d" << d << " (a cycle cut loose?)";
      EXPECT_EQ(ids[100 + static_cast<uint64_t>(d)], 1) << "file in d" << d;
    }
    EXPECT_EQ(dirs.size(), static_cast<size_t>(kDirs)) << "leftover directories";
    EXPECT_EQ(ids.size(), static_cast<size_t>(kFiles + kDirs)) << "unexpected files";
  };
  verify(fs, "before remount");
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(pool.path());
  fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  verify(fs, "after remount");
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  std::printf("  %lu file moves, %lu directory moves, %lu refused as into their own subtree\n",
              static_cast<unsigned long>(moved.load()), static_cast<unsigned long>(dir_moved.load()),
              static_cast<unsigned long>(into_own.load()));
}

// Two threads flip one file between /a/f and /b/f with RENAME_NOREPLACE,
// each trying both directions. The file is only ever under one name, so a
// rename may find its source gone (ENOENT) but never its target taken
// (EEXIST): the two lookups must be judged at one moment, under the locks.
// (Regression: the target's lookup, made after the source's and without
// locks, saw the file the other thread had just moved there.)
TEST(FsConcurrency, RenameNoreplaceSeesOneConsistentMoment) {
  Deadline dl(Limit(60));
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  ASSERT_EQ(mapfs_mkdir(fs, "/a", 0755), 0);
  ASSERT_EQ(mapfs_mkdir(fs, "/b", 0755), 0);
  int fd = mapfs_open(fs, "/a/f", O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << Err();
  ASSERT_EQ(mapfs_close(fs, fd), 0);
  const int iters = static_cast<int>(5000 * Scale());
  Errors errs;
  std::atomic<uint64_t> moved{0};
  auto flip = [&](int t) {
    for (int i = 0; i < iters && !errs.any(); i++) {
      bool ab = (i + t) % 2 == 0;
      const char* from = ab ? "/a/f" : "/b/f";
      const char* to = ab ? "/b/f" : "/a/f";
      if (mapfs_rename2(fs, from, to, RENAME_NOREPLACE) == 0)
        moved++;
      else if (errno != ENOENT)
        // (One append at a time: GCC 12 at -O1 warns, wrongly, of an out-of-bounds
        // copy in a chain of operator+ on temporaries, -Warray-bounds.)
        errs.Add(std::string("rename ").append(from).append(" -> ").append(to).append(": ").append(Err()));
    }
  };
  std::thread t0(flip, 0), t1(flip, 1);
  t0.join();
  t1.join();
  EXPECT_NO_ERRORS(errs);
  EXPECT_GT(moved.load(), 0u);
  struct stat sa {}, sb {};
  bool in_a = mapfs_stat(fs, "/a/f", &sa) == 0, in_b = mapfs_stat(fs, "/b/f", &sb) == 0;
  EXPECT_NE(in_a, in_b) << "the file must be under exactly one name";
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(pool.path());
}

// Two chains /a/x1/x2 and /b/y1/y2. One thread moves x1 into y2 and back,
// the other y1 into x2 and back. Both moves together would make a cycle
// x1 -> x2 -> y1 -> y2 -> x1 cut loose from the root; their lock sets are
// disjoint, so only the pool's rename lock and the ancestry check under it
// keep one of them out (EINVAL, or ENOENT when its path is gone). A move
// that succeeded is always undone successfully, and at the end all four
// directories hang from the root as at the start.
TEST(FsConcurrency, CrossDirectoryMovesNeverMakeACycle) {
  Deadline dl(Limit(90));
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  for (const char* d : {"/a", "/b", "/a/x1", "/a/x1/x2", "/b/y1", "/b/y1/y2"})
    ASSERT_EQ(mapfs_mkdir(fs, d, 0755), 0) << d << ": " << Err();
  const int iters = static_cast<int>(3000 * Scale());
  Errors errs;
  std::atomic<uint64_t> in[2] = {}, refused[2] = {};
  auto mover = [&](int t, const char* home, const char* away) {
    for (int i = 0; i < iters && !errs.any(); i++) {
      if (mapfs_rename(fs, home, away) == 0) {
        in[t]++;
        if (mapfs_rename(fs, away, home) != 0) errs.Add(std::string("moving back ") + away + ": " + Err());
      } else if (errno == EINVAL || errno == ENOENT) {
        refused[t]++;
      } else {
        errs.Add(std::string("rename ") + home + " -> " + away + ": " + Err());
      }
    }
  };
  std::thread tx(mover, 0, "/a/x1", "/b/y1/y2/x1");
  std::thread ty(mover, 1, "/b/y1", "/a/x1/x2/y1");
  tx.join();
  ty.join();
  EXPECT_NO_ERRORS(errs);
  EXPECT_GT(in[0].load() + in[1].load(), 0u);
  std::vector<std::pair<std::string, unsigned char>> all;
  WalkTree(fs, "/", &all);
  std::vector<std::string> paths;
  for (auto& e : all) paths.push_back(e.first);
  std::sort(paths.begin(), paths.end());
  EXPECT_EQ(paths, (std::vector<std::string>{"/a", "/a/x1", "/a/x1/x2", "/b", "/b/y1", "/b/y1/y2"}));
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(pool.path());
  std::printf("  moves in: %lu + %lu, refused: %lu + %lu\n", static_cast<unsigned long>(in[0].load()),
              static_cast<unsigned long>(in[1].load()), static_cast<unsigned long>(refused[0].load()),
              static_cast<unsigned long>(refused[1].load()));
}

// ==================================================== 5. shared file offset

struct Record {
  uint32_t magic, who, seq, check;
};
static_assert(sizeof(Record) == 16);
constexpr uint32_t kRecMagic = 0x52454344;  // "RECD"
Record MakeRecord(uint32_t who, uint32_t seq) { return {kRecMagic, who, seq, ~(kRecMagic ^ who * 0x9e3779b9u ^ seq)}; }
bool RecordOk(const Record& r) { return r.magic == kRecMagic && r.check == ~(kRecMagic ^ r.who * 0x9e3779b9u ^ r.seq); }

// Four threads write 16-byte records with mapfs_write through dup()ed
// descriptors of one description (no O_APPEND): the shared offset moves
// atomically with each write, so the file is exactly 4 x N records, none
// overlapping, each thread's in order, and the offset ends at the size.
TEST(FsConcurrency, DupedDescriptorsShareTheOffsetAtomically) {
  Deadline dl(Limit(90));
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  constexpr int kThreads = 4;
  const uint32_t n = static_cast<uint32_t>(1000 * Scale());
  int fd = mapfs_open(fs, "/log", O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << Err();
  int fds[kThreads];
  for (int& d : fds) {
    d = mapfs_dup(fs, fd);
    ASSERT_GE(d, 0) << Err();
  }
  Errors errs;
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; t++)
    th.emplace_back([&, t] {
      for (uint32_t s = 0; s < n && !errs.any(); s++) {
        Record r = MakeRecord(static_cast<uint32_t>(t), s);
        ssize_t w = mapfs_write(fs, fds[t], &r, sizeof r);
        if (w != static_cast<ssize_t>(sizeof r)) errs.Add("write returned " + std::to_string(w) + ": " + Err());
      }
    });
  for (auto& t : th) t.join();
  EXPECT_NO_ERRORS(errs);
  const uint64_t want = uint64_t{kThreads} * n * sizeof(Record);
  struct stat sb {};
  ASSERT_EQ(mapfs_fstat(fs, fd, &sb), 0);
  EXPECT_EQ(static_cast<uint64_t>(sb.st_size), want);
  EXPECT_EQ(static_cast<uint64_t>(mapfs_lseek(fs, fds[0], 0, SEEK_CUR)), want) << "the shared offset";
  std::vector<Record> recs(static_cast<size_t>(sb.st_size) / sizeof(Record));
  ASSERT_EQ(mapfs_pread(fs, fd, recs.data(), recs.size() * sizeof(Record), 0),
            static_cast<ssize_t>(recs.size() * sizeof(Record)));
  std::vector<uint32_t> next(kThreads, 0);
  size_t bad = 0;
  for (size_t i = 0; i < recs.size(); i++) {
    const Record& r = recs[i];
    if (!RecordOk(r) || r.who >= kThreads || r.seq != next[r.who]) {
      if (bad++ < 5)
        ADD_FAILURE() << "record " << i << ": magic " << r.magic << " who " << r.who << " seq " << r.seq
                      << (RecordOk(r) ? " (out of order)" : " (damaged: records overlap)");
      continue;
    }
    next[r.who]++;
  }
  EXPECT_EQ(bad, 0u);
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(next[static_cast<size_t>(t)], n) << "records of thread " << t;
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(pool.path());
}

// ============================================================ 6. processes

// Log records of varying length: header, then a pattern.
struct LogHeader {
  uint32_t magic;
  uint16_t who, len;
  uint32_t seq, check;
};
static_assert(sizeof(LogHeader) == 16);
constexpr uint32_t kLogMagic = 0x4c4f4752;  // "LOGR"
uint16_t LogLen(uint32_t seq) { return static_cast<uint16_t>(16 + 8 * (seq % 13)); }
std::string LogRecord(uint16_t who, uint32_t seq) {
  LogHeader h{kLogMagic, who, LogLen(seq), seq, ~(kLogMagic ^ (uint32_t{who} << 16) ^ seq)};
  std::string s(h.len, '\0');
  std::memcpy(s.data(), &h, sizeof h);
  FillPattern(s.data() + 16, h.len - 16u, (uint64_t{who} << 32) | seq, 0);
  return s;
}

// Four processes, each with its own mount of the pool (mounting at the same
// time): each writes its own file of several MiB in random chunks and reads
// it back, all read a file the parent made before forking, and two of them
// append records to one log with O_APPEND. Afterwards (remounted) every
// file holds exactly its writer's bytes, the log is exactly the sum of the
// records with none damaged or lost and each process's in order, and fsck
// is clean.
TEST(FsConcurrency, ProcessesShareOnePool) {
  Deadline dl(Limit(150));
  FsPool pool(512ull << 20);
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  constexpr int kChildren = 4, kAppenders = 2;
  constexpr uint64_t kSharedSize = 2 << 20, kSharedTag = 7;
  const uint64_t own_size = (4ull << 20) * static_cast<uint64_t>(Scale());
  const uint32_t log_records = static_cast<uint32_t>(2000 * Scale());
  {
    mapfs_t* fs = MountC(path);
    ASSERT_NE(fs, nullptr);
    ASSERT_EQ(mapfs_mkdir(fs, "/p", 0755), 0);
    std::vector<char> b(kSharedSize);
    FillPattern(b.data(), kSharedSize, kSharedTag, 0);
    int fd = mapfs_open(fs, "/shared", O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << Err();
    ASSERT_TRUE(WriteAll(fs, fd, b.data(), kSharedSize, 0));
    ASSERT_EQ(mapfs_close(fs, fd), 0);
    ASSERT_EQ(mapfs_unmount(fs), 0);
  }
  struct Shared {
    std::atomic<int> mounted{0};
  };
  SharedMem<Shared> sh;
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; c++) {
    pid_t pid = ForkChild(
        [&, c]() -> int {
          mapfs_t* fs = mapfs_mount(path.c_str(), nullptr);
          if (fs == nullptr) return ChildFail(2, "mount: " + Err());
          // Start the work together.
          sh->mounted.fetch_add(1);
          if (!WaitUntil([&] { return sh->mounted.load() >= kChildren; }, Limit(30)))
            return ChildFail(3, "the other children did not mount");
          Rng rng(600 + static_cast<uint64_t>(c));
          const std::string mine = "/p/c" + std::to_string(c);
          const uint64_t tag = 100 + static_cast<uint64_t>(c);
          int fd = mapfs_open(fs, mine.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644);
          if (fd < 0) return ChildFail(4, "create " + mine + ": " + Err());
          int sfd = mapfs_open(fs, "/shared", O_RDONLY);
          if (sfd < 0) return ChildFail(5, "open /shared: " + Err());
          int lfd = -1;
          if (c < kAppenders) {
            lfd = mapfs_open(fs, "/log", O_CREAT | O_WRONLY | O_APPEND, 0644);
            if (lfd < 0) return ChildFail(6, "open /log: " + Err());
          }
          std::vector<char> buf;
          uint64_t written = 0;
          uint32_t seq = 0;
          while (written < own_size || (lfd >= 0 && seq < log_records)) {
            if (written < own_size) {
              uint64_t n = std::min<uint64_t>(own_size - written, 1 + rng.Below(256 << 10));
              buf.resize(n);
              FillPattern(buf.data(), n, tag, written);
              if (mapfs_write(fs, fd, buf.data(), n) != static_cast<ssize_t>(n))
                return ChildFail(7, mine + ": write: " + Err());
              // Read back a random window of what is written so far.
              uint64_t off = rng.Below(written + n), m = std::min<uint64_t>(written + n - off, 64 << 10);
              buf.resize(m);
              if (mapfs_pread(fs, fd, buf.data(), m, static_cast<off_t>(off)) != static_cast<ssize_t>(m) ||
                  PatternMismatch(buf.data(), m, tag, off) >= 0)
                return ChildFail(8, mine + ": read back a window at " + std::to_string(off) + " wrong");
              written += n;
            }
            for (int k = 0; k < 4 && lfd >= 0 && seq < log_records; k++, seq++) {
              std::string r = LogRecord(static_cast<uint16_t>(c), seq);
              if (mapfs_write(fs, lfd, r.data(), r.size()) != static_cast<ssize_t>(r.size()))
                return ChildFail(9, "append: " + Err());
            }
            uint64_t off = rng.Below(kSharedSize), m = std::min<uint64_t>(kSharedSize - off, 1 + rng.Below(128 << 10));
            buf.resize(m);
            if (mapfs_pread(fs, sfd, buf.data(), m, static_cast<off_t>(off)) != static_cast<ssize_t>(m) ||
                PatternMismatch(buf.data(), m, kSharedTag, off) >= 0)
              return ChildFail(10, "/shared: window at " + std::to_string(off) + " wrong");
          }
          std::string e = VerifyFile(fs, mine, tag, own_size);
          if (!e.empty()) return ChildFail(11, e);
          e = VerifyFile(fs, "/shared", kSharedTag, kSharedSize);
          if (!e.empty()) return ChildFail(12, e);
          mapfs_close(fs, fd);
          mapfs_close(fs, sfd);
          if (lfd >= 0) mapfs_close(fs, lfd);
          if (mapfs_unmount(fs) != 0) return ChildFail(13, "unmount: " + Err());
          return 0;
        },
        Limit(120));
    ASSERT_GT(pid, 0);
    pids.push_back(pid);
  }
  for (int c = 0; c < kChildren; c++) {
    int rc = WaitChildFor(pids[static_cast<size_t>(c)], Limit(130));
    EXPECT_EQ(rc, 0) << "child " << c << ": " << DescribeExit(rc);
  }

  mapfs_t* fs = MountC(path);
  ASSERT_NE(fs, nullptr);
  for (int c = 0; c < kChildren; c++)
    EXPECT_EQ(VerifyFile(fs, "/p/c" + std::to_string(c), 100 + static_cast<uint64_t>(c), own_size), "");
  EXPECT_EQ(VerifyFile(fs, "/shared", kSharedTag, kSharedSize), "");
  std::string log;
  ASSERT_TRUE(ReadFile(fs, "/log", &log)) << Err();
  uint64_t want = 0;
  for (uint32_t s = 0; s < log_records; s++) want += LogLen(s);
  EXPECT_EQ(log.size(), want * kAppenders) << "log size: sum of the appended records";
  std::vector<uint32_t> next(kAppenders, 0);
  for (size_t pos = 0; pos < log.size();) {
    LogHeader h{};
    if (log.size() - pos < sizeof h) {
      ADD_FAILURE() << "log: partial record at " << pos;
      break;
    }
    std::memcpy(&h, log.data() + pos, sizeof h);
    if (h.magic != kLogMagic || h.who >= kAppenders || h.seq != next[h.who] || h.len != LogLen(h.seq) ||
        pos + h.len > log.size() || log.compare(pos, h.len, LogRecord(h.who, h.seq)) != 0) {
      ADD_FAILURE() << "log: damaged, overlapping or out-of-order record at " << pos << " (who " << h.who << " seq "
                    << h.seq << ")";
      break;
    }
    next[h.who]++;
    pos += h.len;
  }
  for (int c = 0; c < kAppenders; c++) EXPECT_EQ(next[static_cast<size_t>(c)], log_records) << "appender " << c;
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(path);
}

// Two processes with a mount each and two threads in each create files in a
// directory of their own, append to them across partition levels (small
// partitions moved by copy, 2 MiB and larger ones by pswap, the old one
// freed each time) and unlink them, all at once: inode slots and partitions
// are claimed by several allocators at the same moment, without a pool-wide
// lock. A slot handed out twice shows as two live files with one inode
// number (each live file's number is claimed by compare-and-swap in a table
// in shared memory, and given back before its owner unlinks it); a
// partition handed out twice, as another file's bytes in a file. Every
// file is checked before it is unlinked and at the end; afterwards (one
// mount) the survivors hold their bytes, their numbers are distinct and
// fsck is clean.
TEST(FsConcurrency, ParallelAllocationNeverHandsOutAnInodeOrPartitionTwice) {
  Deadline dl(Limit(200));
  FsPool pool(768ull << 20);
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  constexpr int kProcs = 2, kThreads = 2;
  constexpr uint64_t kInoTable = 1 << 16;
  const int ops = static_cast<int>(300 * Scale());
  struct Shared {
    std::atomic<int> mounted{0};
    std::atomic<uint32_t> owner[kInoTable];  // live file's writer id + 1 per inode number
  };
  SharedMem<Shared> sh;
  auto tag_of = [](int who, uint64_t i) { return (static_cast<uint64_t>(who + 1) << 40) | i; };
  auto dir_of = [](int who) { return "/w" + std::to_string(who); };
  {
    mapfs_t* fs = MountC(path);
    ASSERT_NE(fs, nullptr);
    for (int w = 0; w < kProcs * kThreads; w++) ASSERT_EQ(mapfs_mkdir(fs, dir_of(w).c_str(), 0755), 0) << Err();
    ASSERT_EQ(mapfs_unmount(fs), 0);
  }
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; p++) {
    pid_t pid = ForkChild(
        [&, p]() -> int {
          mapfs_t* fs = mapfs_mount(path.c_str(), nullptr);
          if (fs == nullptr) return ChildFail(2, "mount: " + Err());
          sh->mounted.fetch_add(1);
          if (!WaitUntil([&] { return sh->mounted.load() >= kProcs; }, Limit(30)))
            return ChildFail(3, "the other process did not mount");
          Errors errs;
          auto worker = [&](int t) {
            const int who = p * kThreads + t;
            const uint32_t id = static_cast<uint32_t>(who + 1);
            Rng rng(4200 + static_cast<uint64_t>(who));
            struct Live {
              std::string path;
              uint64_t tag, size, ino;
            };
            std::vector<Live> live;
            auto fail = [&](const std::string& what) { errs.Add("writer " + std::to_string(who) + ": " + what); };
            // Mostly small (L0-L2), now and then past 2 MiB (L3, L4).
            auto grow_by = [&]() -> uint64_t {
              return rng.Below(10) == 0 ? 1 + rng.Below(5 << 19) : 1 + rng.Below(48 << 10);
            };
            for (int i = 0; i < ops && !errs.any(); i++) {
              uint64_t r = rng.Below(100);
              if (live.size() < 3 || (r < 40 && live.size() < 12)) {  // create
                Live f{dir_of(who) + "/f" + std::to_string(i), tag_of(who, static_cast<uint64_t>(i)), grow_by(), 0};
                int fd = mapfs_open(fs, f.path.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644);
                if (fd < 0) return fail("create " + f.path + ": " + Err());
                struct stat st;
                if (mapfs_fstat(fs, fd, &st) != 0) return fail("fstat " + f.path + ": " + Err());
                f.ino = static_cast<uint64_t>(st.st_ino);
                uint32_t none = 0;
                if (f.ino >= kInoTable) return fail(f.path + ": inode number " + std::to_string(f.ino) + " past the test's table");
                if (!sh->owner[f.ino].compare_exchange_strong(none, id))
                  return fail(f.path + ": inode " + std::to_string(f.ino) + " also belongs to a live file of writer " +
                              std::to_string(none - 1));
                std::string e = WriteChunks(fs, fd, rng, f.tag, 0, f.size, 64 << 10);
                mapfs_close(fs, fd);
                if (!e.empty()) return fail(f.path + ": " + e);
                live.push_back(f);
              } else if (r < 75) {  // append, then check the whole file
                Live& f = live[rng.Below(live.size())];
                int fd = mapfs_open(fs, f.path.c_str(), O_WRONLY | O_APPEND);
                if (fd < 0) return fail("open " + f.path + ": " + Err());
                uint64_t n = grow_by();
                std::string e = WriteChunks(fs, fd, rng, f.tag, f.size, n, 64 << 10);
                mapfs_close(fs, fd);
                if (!e.empty()) return fail(f.path + ": " + e);
                f.size += n;
                e = VerifyFile(fs, f.path, f.tag, f.size);
                if (!e.empty()) return fail(e);
              } else {  // check, give the number back, unlink (frees inode and partition)
                size_t k = rng.Below(live.size());
                Live f = live[k];
                live.erase(live.begin() + static_cast<long>(k));
                std::string e = VerifyFile(fs, f.path, f.tag, f.size);
                if (!e.empty()) return fail("before unlink: " + e);
                uint32_t mine = id;
                if (!sh->owner[f.ino].compare_exchange_strong(mine, 0))
                  return fail(f.path + ": inode " + std::to_string(f.ino) + " was taken by writer " +
                              std::to_string(mine - 1) + " while live");
                if (mapfs_unlink(fs, f.path.c_str()) != 0) return fail("unlink " + f.path + ": " + Err());
              }
            }
            for (const Live& f : live) {
              std::string e = VerifyFile(fs, f.path, f.tag, f.size);
              if (!e.empty()) return fail("at the end: " + e);
            }
          };
          std::vector<std::thread> ts;
          for (int t = 0; t < kThreads; t++) ts.emplace_back(worker, t);
          for (auto& th : ts) th.join();
          if (errs.any()) return ChildFail(4, errs.Report());
          if (mapfs_unmount(fs) != 0) return ChildFail(5, "unmount: " + Err());
          return 0;
        },
        Limit(180));
    ASSERT_GT(pid, 0);
    pids.push_back(pid);
  }
  for (int p = 0; p < kProcs; p++) {
    int rc = WaitChildFor(pids[static_cast<size_t>(p)], Limit(190));
    EXPECT_EQ(rc, 0) << "process " << p << ": " << DescribeExit(rc);
  }

  mapfs_t* fs = MountC(path);
  ASSERT_NE(fs, nullptr);
  std::set<uint64_t> inos;
  int survivors = 0;
  for (int w = 0; w < kProcs * kThreads; w++) {
    std::vector<std::string> names;
    ASSERT_EQ(ListDir(fs, dir_of(w), &names), 0) << Err();
    for (const std::string& n : names) {
      if (n == "." || n == "..") continue;
      std::string p = dir_of(w) + "/" + n, data;
      struct stat st;
      ASSERT_EQ(mapfs_stat(fs, p.c_str(), &st), 0) << p << ": " << Err();
      EXPECT_TRUE(inos.insert(static_cast<uint64_t>(st.st_ino)).second) << p << ": inode " << st.st_ino << " twice";
      ASSERT_TRUE(ReadFile(fs, p, &data)) << p << ": " << Err();
      EXPECT_LT(PatternMismatch(data.data(), data.size(), tag_of(w, std::stoull(n.substr(1))), 0), 0)
          << p << ": another file's bytes";
      survivors++;
    }
  }
  EXPECT_GT(survivors, 0);
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(path);
}

// ======================================= 7. killed while holding a lock

// A child process writes 1 MiB at a time to F until it is SIGKILLed, most
// likely inside a write (holding F's lock, perhaps a pool lock or a redo
// slot), in each mode. The parent's mount, alive all along, then writes
// and reads F and creates a file within seconds (the dead mount's locks are
// reaped), and the pool recovers to a clean fsck.
TEST(FsConcurrency, KilledWriterDoesNotBlockTheFile) {
  Deadline dl(Limit(150));
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  mapfs_t* fs = MountC(path);
  ASSERT_NE(fs, nullptr);
  int fd = mapfs_open(fs, "/F", O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << Err();
  struct Shared {
    std::atomic<uint64_t> writes{0};
  };
  SharedMem<Shared> sh;
  Rng rng(700);
  const int rounds = static_cast<int>(12 * Scale());
  constexpr uint64_t kMiB = 1 << 20;
  std::vector<char> mine(kMiB), back(kMiB);
  for (int round = 0; round < rounds; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int mode = round % 3;
    sh->writes = 0;
    pid_t pid = ForkChild(
        [&]() -> int {
          mapfs_options o{};
          o.mode = mode;
          mapfs_t* c = mapfs_mount(path.c_str(), &o);
          if (c == nullptr) return ChildFail(2, "mount: " + Err());
          int cfd = mapfs_open(c, "/F", O_RDWR);
          if (cfd < 0) return ChildFail(3, "open: " + Err());
          std::vector<char> buf(kMiB, static_cast<char>('a' + round));
          for (uint64_t i = 0;; i++) {
            if (mapfs_pwrite(c, cfd, buf.data(), kMiB, static_cast<off_t>((i % 6) * kMiB)) != static_cast<ssize_t>(kMiB))
              return ChildFail(4, "pwrite: " + Err());
            sh->writes.fetch_add(1);
          }
        },
        Limit(60));
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(WaitUntil([&] { return sh->writes.load() >= 2; }, Limit(30))) << "the child never wrote";
    ::usleep(static_cast<useconds_t>(rng.Below(20000)));
    ::kill(pid, SIGKILL);
    int rc = WaitChildFor(pid, Limit(30));
    ASSERT_EQ(rc, 128 + SIGKILL) << "child: " << DescribeExit(rc);

    auto t0 = Clock::now();
    FillPattern(mine.data(), kMiB, 800 + static_cast<uint64_t>(round), 0);
    ASSERT_TRUE(WriteAll(fs, fd, mine.data(), kMiB, 0)) << Err();
    ASSERT_EQ(mapfs_pread(fs, fd, back.data(), kMiB, 0), static_cast<ssize_t>(kMiB)) << Err();
    EXPECT_EQ(PatternMismatch(back.data(), kMiB, 800 + static_cast<uint64_t>(round), 0), -1);
    std::string g = "/G" + std::to_string(round);
    int gfd = mapfs_open(fs, g.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644);
    ASSERT_GE(gfd, 0) << Err();
    ASSERT_TRUE(WriteAll(fs, gfd, mine.data(), 64 << 10, 0)) << Err();
    ASSERT_EQ(mapfs_close(fs, gfd), 0);
    EXPECT_EQ(VerifyFile(fs, g, 800 + static_cast<uint64_t>(round), 64 << 10), "");
    double took = SecondsSince(t0);
    EXPECT_LT(took, Limit(5)) << "the parent waited " << took << " s for the dead child's locks";
  }
  ASSERT_EQ(mapfs_close(fs, fd), 0);
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  // The next mount is alone and recovers what the children left.
  FS_EXPECT_CLEAN(path);
  fs = MountC(path);
  ASSERT_NE(fs, nullptr);
  std::string f;
  ASSERT_TRUE(ReadFile(fs, "/F", &f)) << Err();
  ASSERT_GE(f.size(), kMiB);
  EXPECT_EQ(PatternMismatch(f.data(), kMiB, 800 + static_cast<uint64_t>(rounds - 1), 0), -1);
  ASSERT_EQ(mapfs_unmount(fs), 0);
}

class DeadLockHolder : public ::testing::TestWithParam<bool> {};

// A child takes F's lock itself (meta::InodeLocks, for writing or for
// reading) and SIGKILLs itself while holding it. While it lives, the
// parent's write to F waits (the lock is real); once it is dead and reaped,
// the write goes through within seconds and a read sees it.
TEST_P(DeadLockHolder, ParentGetsTheLockOfAKilledProcess) {
  Deadline dl(Limit(90));
  const bool write_lock = GetParam();
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  mapfs_t* fs = MountC(path);
  ASSERT_NE(fs, nullptr);
  constexpr size_t kN = 64 << 10;
  std::vector<char> v1(kN), v2(kN);
  FillPattern(v1.data(), kN, 51, 0);
  FillPattern(v2.data(), kN, 52, 0);
  int fd = mapfs_open(fs, "/F", O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << Err();
  ASSERT_TRUE(WriteAll(fs, fd, v1.data(), kN, 0));
  struct Shared {
    std::atomic<int> child{0}, parent{0};
  };
  SharedMem<Shared> sh;
  pid_t pid = ForkChild(
      [&]() -> int {
        auto fail = [&](int code, const std::string& msg) {
          sh->child = -1;
          return ChildFail(code, msg);
        };
        auto m = fs::FileSystem::Mount(path);
        if (!m.ok()) return fail(2, "mount: " + m.status().ToString());
        auto ino = (*m)->Lookup("/F");
        if (!ino.ok()) return fail(3, "lookup: " + ino.status().ToString());
        meta::InodeLocks locks(&(*m)->mount().pool());
        uint32_t s = meta::InodeLocks::StripeOf(*ino);
        if (write_lock)
          locks.WriteLock(s);
        else
          locks.ReadLock(s);
        sh->child = 1;
        if (!WaitUntil([&] { return sh->parent.load() != 0; }, 60)) return ChildFail(4, "parent never said go");
        ::raise(SIGKILL);
        return 5;
      },
      Limit(60));
  ASSERT_GT(pid, 0);
  if (!WaitUntil([&] { return sh->child.load() != 0; }, Limit(30)) || sh->child.load() != 1) {
    int rc = WaitChildFor(pid, 1);
    FAIL() << "the child never took the lock: " << DescribeExit(rc);
  }
  if (!write_lock) {
    // A reader does not wait for a (live) reader in another process.
    std::atomic<int> read{0};
    std::thread reader([&] {
      std::vector<char> b(kN);
      read = mapfs_pread(fs, fd, b.data(), kN, 0) == static_cast<ssize_t>(kN) && b == v1 ? 1 : 2;
    });
    if (!WaitUntil([&] { return read.load() != 0; }, Limit(10)))
      Stuck("a read waited for a reader in another process");
    reader.join();
    EXPECT_EQ(read.load(), 1) << "the read failed or returned other bytes";
  }
  std::atomic<int> done{0};
  std::thread writer([&] { done = WriteAll(fs, fd, v2.data(), kN, 0) ? 1 : 2; });
  ::usleep(300 * 1000);
  int early = done.load();
  auto t0 = Clock::now();
  sh->parent = 1;
  int rc = WaitChildFor(pid, Limit(30));
  if (!WaitUntil([&] { return done.load() != 0; }, Limit(20)))
    Stuck("the write to F still waits for the lock of a killed process (" + DescribeExit(rc) + ")");
  double took = SecondsSince(t0);
  writer.join();
  EXPECT_EQ(early, 0) << "the write went through while another process held F's lock";
  EXPECT_EQ(rc, 128 + SIGKILL) << "child: " << DescribeExit(rc);
  EXPECT_EQ(done.load(), 1) << Err();
  EXPECT_LT(took, Limit(5)) << "the dead holder's lock took " << took << " s to reap";
  std::vector<char> b(kN);
  ASSERT_EQ(mapfs_pread(fs, fd, b.data(), kN, 0), static_cast<ssize_t>(kN)) << Err();
  EXPECT_EQ(b, v2);
  // Other calls on the file and the namespace work too.
  struct stat sb {};
  EXPECT_EQ(mapfs_fstat(fs, fd, &sb), 0) << Err();
  EXPECT_EQ(mapfs_rename(fs, "/F", "/F2"), 0) << Err();
  ASSERT_EQ(mapfs_close(fs, fd), 0);
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(path);
}

INSTANTIATE_TEST_SUITE_P(Lock, DeadLockHolder, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Writer" : "Reader"; });

class KilledOpenUnlinked : public ::testing::TestWithParam<bool> {};

// A child creates an 8 MiB file, unlinks it while keeping it open and is
// SIGKILLed. Nobody can close it any more; the next mount that is alone
// (after the parent's mount, if any, went away) reclaims it: fsck is clean
// and the free space is back to what it was before the file.
TEST_P(KilledOpenUnlinked, ReclaimedAtTheNextExclusiveMount) {
  Deadline dl(Limit(90));
  const bool parent_mounted = GetParam();
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  constexpr uint64_t kSize = 8 << 20;
  std::vector<char> data(kSize);
  FillPattern(data.data(), kSize, 61, 0);
  mapfs_t* fs = MountC(path);
  ASSERT_NE(fs, nullptr);
  // Warm up: the same file made and removed once, so that whatever metadata
  // it needs exists before the free space is measured.
  {
    int fd = mapfs_open(fs, "/victim", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << Err();
    ASSERT_TRUE(WriteAll(fs, fd, data.data(), kSize, 0));
    ASSERT_EQ(mapfs_close(fs, fd), 0);
    ASSERT_EQ(mapfs_unlink(fs, "/victim"), 0);
  }
  const uint64_t free0 = FreeBlocks(fs);
  ASSERT_GT(free0, 0u);
  if (!parent_mounted) {
    ASSERT_EQ(mapfs_unmount(fs), 0);
    fs = nullptr;
  }
  struct Shared {
    std::atomic<uint64_t> free_open{0};
  };
  SharedMem<Shared> sh;
  pid_t pid = ForkChild(
      [&]() -> int {
        mapfs_t* c = mapfs_mount(path.c_str(), nullptr);
        if (c == nullptr) return ChildFail(2, "mount: " + Err());
        int fd = mapfs_open(c, "/victim", O_CREAT | O_EXCL | O_RDWR, 0644);
        if (fd < 0) return ChildFail(3, "create: " + Err());
        if (!WriteAll(c, fd, data.data(), kSize, 0)) return ChildFail(4, "write: " + Err());
        if (mapfs_unlink(c, "/victim") != 0) return ChildFail(5, "unlink: " + Err());
        struct stat sb {};
        if (mapfs_fstat(c, fd, &sb) != 0 || sb.st_nlink != 0 || static_cast<uint64_t>(sb.st_size) != kSize)
          return ChildFail(6, "fstat after unlink: " + Err());
        sh->free_open = FreeBlocks(c);
        ::raise(SIGKILL);
        return 7;
      },
      Limit(60));
  ASSERT_GT(pid, 0);
  int rc = WaitChildFor(pid, Limit(60));
  ASSERT_EQ(rc, 128 + SIGKILL) << "child: " << DescribeExit(rc);
  // While it existed the file held its 8 MiB.
  EXPECT_LE(sh->free_open.load() + kSize / 4096, free0);
  if (parent_mounted) {
    struct stat sb {};
    EXPECT_NE(mapfs_stat(fs, "/victim", &sb), 0);
    // Still usable next to the dead mount.
    int fd = mapfs_open(fs, "/other", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << Err();
    ASSERT_TRUE(WriteAll(fs, fd, data.data(), 4096, 0));
    ASSERT_EQ(mapfs_close(fs, fd), 0);
    ASSERT_EQ(mapfs_unlink(fs, "/other"), 0);
    ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  }
  fs = MountC(path);  // alone: recovers
  ASSERT_NE(fs, nullptr);
  EXPECT_EQ(FreeBlocks(fs), free0) << "the killed process's unlinked file was not reclaimed";
  ASSERT_EQ(mapfs_unmount(fs), 0);
  FS_EXPECT_CLEAN(path);
}

INSTANTIATE_TEST_SUITE_P(Parent, KilledOpenUnlinked, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Mounted" : "Unmounted"; });

// ============================================= 8. open-unlinked, processes

// Process A (a child) opens F; process B (the parent) unlinks it. A still
// reads all of F, grows it, and reads it again, also after B has written
// another file of the same size (F's pages are not reused while it is
// open). When A closes F, its space comes back at once: free space returns
// to the level before F existed, with no remount.
TEST(FsConcurrency, OpenUnlinkedFileLivesUntilTheLastCloseInAnotherProcess) {
  Deadline dl(Limit(90));
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  const std::string path = pool.path();
  constexpr uint64_t kHalf = 4 << 20, kTag = 11;
  std::vector<char> data(2 * kHalf);
  FillPattern(data.data(), data.size(), kTag, 0);
  mapfs_t* fs = MountC(path);
  ASSERT_NE(fs, nullptr);
  auto make = [&](const char* p, uint64_t n) {
    int fd = mapfs_open(fs, p, O_CREAT | O_EXCL | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << p << ": " << Err();
    ASSERT_TRUE(WriteAll(fs, fd, data.data(), n, 0)) << Err();
    ASSERT_EQ(mapfs_close(fs, fd), 0);
  };
  // Warm up as F will be used (4 MiB, grown to 8 MiB), then measure.
  make("/F", kHalf);
  {
    int fd = mapfs_open(fs, "/F", O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(WriteAll(fs, fd, data.data() + kHalf, kHalf, kHalf));
    ASSERT_EQ(mapfs_close(fs, fd), 0);
    ASSERT_EQ(mapfs_unlink(fs, "/F"), 0);
  }
  const uint64_t free0 = FreeBlocks(fs);
  make("/F", kHalf);

  struct Shared {
    std::atomic<int> child{0}, parent{0};
  };
  SharedMem<Shared> sh;
  pid_t pid = ForkChild(
      [&]() -> int {
        auto ChildFail = [&](int code, const std::string& msg) {
          sh->child = -1;
          return fstest::ChildFail(code, msg);
        };
        mapfs_t* c = mapfs_mount(path.c_str(), nullptr);
        if (c == nullptr) return ChildFail(2, "mount: " + Err());
        int fd = mapfs_open(c, "/F", O_RDWR);
        if (fd < 0) return ChildFail(3, "open: " + Err());
        sh->child = 1;
        if (!WaitUntil([&] { return sh->parent.load() >= 1; }, 60)) return ChildFail(4, "no unlink");
        struct stat sb {};
        if (mapfs_stat(c, "/F", &sb) == 0 || errno != ENOENT) return ChildFail(5, "/F still has a name");
        if (mapfs_fstat(c, fd, &sb) != 0 || sb.st_nlink != 0 || static_cast<uint64_t>(sb.st_size) != kHalf)
          return ChildFail(6, "fstat after unlink: nlink " + std::to_string(sb.st_nlink) + " size " +
                                  std::to_string(sb.st_size));
        std::vector<char> b(2 * kHalf);
        if (mapfs_pread(c, fd, b.data(), kHalf, 0) != static_cast<ssize_t>(kHalf) ||
            PatternMismatch(b.data(), kHalf, kTag, 0) >= 0)
          return ChildFail(7, "read after unlink: wrong");
        if (!WriteAll(c, fd, data.data() + kHalf, kHalf, kHalf)) return ChildFail(8, "grow: " + Err());
        if (mapfs_pread(c, fd, b.data(), 2 * kHalf, 0) != static_cast<ssize_t>(2 * kHalf) ||
            PatternMismatch(b.data(), 2 * kHalf, kTag, 0) >= 0)
          return ChildFail(9, "read after growing: wrong");
        sh->child = 2;
        if (!WaitUntil([&] { return sh->parent.load() >= 2; }, 60)) return ChildFail(10, "parent stuck");
        std::fill(b.begin(), b.end(), 0);
        if (mapfs_pread(c, fd, b.data(), 2 * kHalf, 0) != static_cast<ssize_t>(2 * kHalf) ||
            PatternMismatch(b.data(), 2 * kHalf, kTag, 0) >= 0)
          return ChildFail(11, "read after the parent's write: wrong (pages reused?)");
        if (mapfs_close(c, fd) != 0) return ChildFail(12, "close: " + Err());
        if (mapfs_unmount(c) != 0) return ChildFail(13, "unmount: " + Err());
        return 0;
      },
      Limit(60));
  ASSERT_GT(pid, 0);
  auto child_at = [&](int stage) {
    return WaitUntil([&] { return sh->child.load() >= stage || sh->child.load() < 0; }, Limit(30)) &&
           sh->child.load() >= stage;
  };
  auto child_failed = [&] {
    int rc = WaitChildFor(pid, Limit(30));
    return "child: " + DescribeExit(rc);
  };
  if (!child_at(1)) FAIL() << child_failed();
  EXPECT_EQ(mapfs_unlink(fs, "/F"), 0) << Err();
  sh->parent = 1;
  if (!child_at(2)) FAIL() << child_failed();
  // Held open elsewhere, the unlinked file keeps its space...
  EXPECT_LE(FreeBlocks(fs) + 2 * kHalf / 4096, free0);
  // ...and its pages are not handed to another file.
  make("/G", 2 * kHalf);
  EXPECT_EQ(VerifyFile(fs, "/G", kTag, 2 * kHalf), "");
  sh->parent = 2;
  int rc = WaitChildFor(pid, Limit(60));
  EXPECT_EQ(rc, 0) << "child: " << DescribeExit(rc);
  ASSERT_EQ(mapfs_unlink(fs, "/G"), 0);
  EXPECT_EQ(FreeBlocks(fs), free0) << "F's space did not come back at its last close";
  std::vector<std::string> names;
  ASSERT_EQ(ListDir(fs, "/", &names), 0);
  EXPECT_TRUE(names.empty());
  ASSERT_EQ(mapfs_unmount(fs), 0) << Err();
  FS_EXPECT_CLEAN(path);
}

}  // namespace
}  // namespace mapfs::fstest
