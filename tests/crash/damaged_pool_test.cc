// Damaged pools (issue 7, part 4). A small populated pool (directories with
// block splits, files of every partition size, symlinks, hard links) is
// damaged one structure at a time (pool_image.h finds each one without the
// core): bit flips, zeroed ranges, random bytes and all-ones words, and,
// for checksummed structures, fields changed with the checksum recomputed
// ("forged"). On each damaged copy the real `mapfs` CLI runs (a process of
// its own, under a timeout):
//   1. `mapfs fsck IMG`: exit 0 (nothing wrong found) or 1 with a message
//      (refused at mount, or problems listed) - never a signal, a sanitizer
//      report or a hang. Where a checksum covers the damaged bytes, exit 1.
//   2. a child process mounts it with the C API and reads (up to 4 MiB of)
//      every file it reaches: errors are fine, a crash or a hang is not;
//   3. when fsck found something: `mapfs fsck --repair IMG`, which either
//      repairs (exit 0) or refuses (exit 1 with a message: beyond repair);
//   4. when the pool is (now) clean: fsck says clean again, and the pool is
//      usable: put, cat (the bytes come back), rm, fsck clean.
// Prints "damaged-pools: N images, ..." with the outcome counts per
// structure. MAPFS_CRASH_FULL=1 damages many more copies; MAPFS_CRASH_VERBOSE=1
// prints each image's outcome; MAPFS_CRASH_KEEP=DIR keeps the failing ones.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "fs/fs_test_util.h"
#include "pool_image.h"

namespace mapfs::crash {
namespace {

using fstest::FsPool;
using fstest::Rng;

bool Full() { return std::getenv("MAPFS_CRASH_FULL") != nullptr; }
bool Verbose() { return std::getenv("MAPFS_CRASH_VERBOSE") != nullptr; }
// The last line of a command's output that says something.
std::string LastLine(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  size_t nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}
uint64_t Seed() {
  const char* s = std::getenv("MAPFS_CRASH_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261123;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
bool WriteAllFile(const std::string& path, const std::string& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
  return out.good();
}

struct RunResult {
  int code = -1;    // exit code, or -1
  int signal = 0;   // terminating signal
  bool timeout = false;
  std::string out;  // stdout + stderr
};

// Runs the CLI with `args`, stdout and stderr captured, killed after
// `timeout_s` seconds.
RunResult RunCli(const std::vector<std::string>& args, int timeout_s = 30) {
  RunResult r;
  char tmpl[] = "/tmp/mapfs-damaged-out-XXXXXX";
  int ofd = ::mkstemp(tmpl);
  if (ofd < 0) return r;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(ofd, 1);
    ::dup2(ofd, 2);
    // Sanitizer reports must not pass for fsck's "problems" (exit 1).
    std::string asan = "exitcode=86:detect_leaks=0:handle_segv=1:allow_user_segv_handler=1";
    ::setenv("ASAN_OPTIONS", asan.c_str(), 1);
    ::setenv("UBSAN_OPTIONS", "halt_on_error=1:exitcode=86:print_stacktrace=1", 1);
    std::vector<std::string> a = {MAPFS_CLI};
    a.insert(a.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  auto t0 = std::chrono::steady_clock::now();
  int st = 0;
  for (;;) {
    pid_t w = ::waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(timeout_s)) {
      r.timeout = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      break;
    }
    ::usleep(1000);
  }
  if (WIFEXITED(st)) r.code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  ::close(ofd);
  r.out = ReadAll(tmpl);
  ::unlink(tmpl);
  return r;
}

// "" when the run ended in an orderly way (exit 0 or 1, no sanitizer
// report); else what went wrong.
std::string Orderly(const RunResult& r, const std::string& what) {
  std::string tail = r.out.size() > 1500 ? r.out.substr(r.out.size() - 1500) : r.out;
  if (r.timeout) return what + " hung (killed after the timeout)\n" + tail;
  if (r.signal) return what + " died of signal " + std::to_string(r.signal) + " (" + strsignal(r.signal) + ")\n" + tail;
  if (r.out.find("Sanitizer") != std::string::npos || r.out.find("runtime error") != std::string::npos)
    return what + ": sanitizer report\n" + tail;
  if (r.code != 0 && r.code != 1) return what + " exited " + std::to_string(r.code) + "\n" + tail;
  if (r.code == 1 && r.out.empty()) return what + " failed without a word";
  return "";
}

// Reads (a bounded amount of) every file and link it can reach, through
// the C API in a child process; "" or what went wrong (a signal, a hang, a
// sanitizer report). Errors from the calls are fine: the pool is damaged.
void ReadTree(mapfs_t* fs, const std::string& dir, int depth) {
  mapfs_dir_t* d = mapfs_opendir(fs, dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  for (int i = 0; i < 300; i++) {
    struct dirent* e = mapfs_readdir(d);
    if (e == nullptr) break;
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
  }
  mapfs_closedir(d);
  static char buf[1 << 16];
  for (auto& n : names) {
    std::string p = (dir == "/" ? "" : dir) + "/" + n;
    struct stat st;
    if (mapfs_lstat(fs, p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (depth > 0) ReadTree(fs, p, depth - 1);
    } else if (S_ISLNK(st.st_mode)) {
      (void)mapfs_readlink(fs, p.c_str(), buf, sizeof buf);
    } else {
      int fd = mapfs_open(fs, p.c_str(), O_RDONLY);
      if (fd < 0) continue;
      for (off_t off = 0; off < (4 << 20); off += sizeof buf)
        if (mapfs_pread(fs, fd, buf, sizeof buf, off) <= 0) break;
      mapfs_close(fs, fd);
    }
  }
}
std::string ReadEverything(const std::string& img) {
  char tmpl[] = "/tmp/mapfs-damaged-read-XXXXXX";
  int efd = ::mkstemp(tmpl);
  if (efd < 0) return "mkstemp failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(efd, 2);
    ::alarm(60);
    mapfs_t* fs = mapfs_mount(img.c_str(), nullptr);
    if (fs != nullptr) {
      ReadTree(fs, "/", 3);
      (void)mapfs_unmount(fs);
    }
    _exit(0);
  }
  int st = 0;
  auto t0 = std::chrono::steady_clock::now();
  bool hung = false;
  while (::waitpid(pid, &st, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(30)) {
      hung = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      break;
    }
    ::usleep(1000);
  }
  ::close(efd);
  std::string err = ReadAll(tmpl);
  ::unlink(tmpl);
  if (hung) return "reading every file hung";
  if (WIFSIGNALED(st)) return "reading every file died of signal " + std::to_string(WTERMSIG(st)) + "\n" + err;
  if (err.find("Sanitizer") != std::string::npos || err.find("runtime error") != std::string::npos)
    return "reading every file: sanitizer report\n" + err;
  return "";
}

// The shared-memory segment of a pool image (its uuid names it).
void DropSegment(const std::string& image) {
  if (image.size() < 32) return;
  static const char* hex = "0123456789abcdef";
  std::string name = "/mapfs-";
  for (int i = 16; i < 32; i++) {
    name += hex[static_cast<uint8_t>(image[i]) >> 4];
    name += hex[static_cast<uint8_t>(image[i]) & 15];
  }
  ::shm_unlink(name.c_str());
}

// The populated pool: what the tests read back.
const std::vector<std::pair<std::string, size_t>>& Files() {
  static const std::vector<std::pair<std::string, size_t>> f = [] {
    std::vector<std::pair<std::string, size_t>> v = {
        {"/small", 100}, {"/l1", 20000}, {"/l2", 200000}, {"/big", 2500000}, {"/a/b/deep", 5000}};
    for (int i = 0; i < 150; i++) v.push_back({"/a/f" + std::to_string(i), static_cast<size_t>(i * 37)});
    return v;
  }();
  return f;
}

constexpr int kLinks = 14000;

// The pool size for MakeImage: 16 MiB, or 32 MiB on the tree designs,
// which take a node block per file: MakeImage's 155 files (2.7 MB) do not
// fit the 4 MiB mapping area of a 16 MiB pool there (ENOSPC).
uint64_t ImagePoolSize() {
  const char* f = testing::TestFiles();
  bool trees = f != nullptr && (std::string(f) == "extent" || std::string(f) == "radix");
  return trees ? 32ull << 20 : 16ull << 20;
}

std::string MakeImage(const std::string& path) {
  mapfs_t* fs = fstest::MountC(path);
  if (fs == nullptr) return "";
  bool ok = mapfs_mkdir(fs, "/a", 0755) == 0 && mapfs_mkdir(fs, "/a/b", 0700) == 0;
  for (auto& [p, n] : Files()) {
    std::string c(n, '\0');
    fstest::FillPattern(c.data(), n, p.size() + n, 0);
    int fd = mapfs_open(fs, p.c_str(), O_CREAT | O_WRONLY, 0644);
    ok = ok && fd >= 0 && fstest::WriteAll(fs, fd, c.data(), n, 0) && mapfs_close(fs, fd) == 0;
  }
  ok = ok && mapfs_symlink(fs, "/a/f1", "/short-link") == 0 && mapfs_symlink(fs, std::string(300, 'x').c_str(), "/long-link") == 0;
  ok = ok && mapfs_link(fs, "/small", "/a/b/hard") == 0 && mapfs_unlink(fs, "/a/f7") == 0;
  // A directory big enough for index nodes (more blocks than the root's
  // top array holds): hard links to one file, so no inode each.
  ok = ok && mapfs_mkdir(fs, "/n", 0755) == 0;
  for (int i = 0; ok && i < kLinks; i++) ok = mapfs_link(fs, "/l1", ("/n/" + std::to_string(i)).c_str()) == 0;
  ok = mapfs_unmount(fs) == 0 && ok;
  return ok ? ReadAll(path) : "";
}

enum class Kind { kBit, kBits, kZeroRange, kZeroAll, kRandom, kOnes, kForged };
const char* KindName(Kind k) {
  switch (k) {
    case Kind::kBit: return "1 bit flipped";
    case Kind::kBits: return "8 bits flipped";
    case Kind::kZeroRange: return "range zeroed";
    case Kind::kZeroAll: return "piece zeroed";
    case Kind::kRandom: return "random bytes";
    case Kind::kOnes: return "word all ones";
    case Kind::kForged: return "forged (checksum fixed)";
  }
  return "?";
}

// Rewrites the checksums the damage may have invalidated (forged damage).
void FixChecksums(std::string* img, const Structure& s) {
  char* b = img->data();
  if (s.name == "pool header") {
    uint32_t c = Crc32c(b, offsetof(medium::format::PoolHeader, checksum));
    std::memcpy(b + offsetof(medium::format::PoolHeader, checksum), &c, 4);
  } else if (s.name == "superblock") {
    uint64_t o = s.ranges[0].off;
    uint32_t c = Crc32c(b + o, offsetof(meta::format::Superblock, checksum));
    std::memcpy(b + o + offsetof(meta::format::Superblock, checksum), &c, 4);
  } else if (s.name == "mapping header") {
    uint64_t o = s.ranges[0].off;
    uint32_t c = Crc32c(b + o, offsetof(map::format::MapHeader, checksum));
    std::memcpy(b + o + offsetof(map::format::MapHeader, checksum), &c, 4);
  } else if (s.name == "directory roots") {
    for (auto& r : s.ranges) {
      char buf[dir::format::kRootCrcBytes];
      std::memcpy(buf, b + r.off, sizeof buf);
      std::memset(buf + offsetof(dir::format::Root, crc), 0, 4);
      uint32_t c = Crc32c(buf, sizeof buf);
      std::memcpy(b + r.off + offsetof(dir::format::Root, crc), &c, 4);
    }
  }
}

// Damages `img` in structure `s`; returns a description and whether a
// checksum covers a changed byte.
std::string Damage(std::string* img, const Structure& s, Kind k, Rng& rng, bool* covered) {
  const auto& from = !s.live.empty() && rng.Below(4) != 0 ? s.live : s.ranges;
  const Range& r = from[rng.Below(from.size())];
  std::string before = *img;
  uint64_t at = r.off + rng.Below(r.len), len = 1;
  auto clamp = [&](uint64_t n) { return std::min<uint64_t>(n, r.off + r.len - at); };
  char* b = img->data();
  switch (k) {
    case Kind::kBit: b[at] ^= static_cast<char>(1u << rng.Below(8)); break;
    case Kind::kBits:
      for (int i = 0; i < 8; i++) {
        uint64_t o = r.off + rng.Below(r.len);
        b[o] ^= static_cast<char>(1u << rng.Below(8));
      }
      break;
    case Kind::kZeroRange:
      len = clamp(8 + rng.Below(256));
      std::memset(b + at, 0, len);
      break;
    case Kind::kZeroAll:
      at = r.off;
      len = r.len;
      std::memset(b + at, 0, len);
      break;
    case Kind::kRandom:
      len = clamp(1 + rng.Below(64));
      for (uint64_t i = 0; i < len; i++) b[at + i] = static_cast<char>(rng.Next());
      break;
    case Kind::kOnes:
    case Kind::kForged:
      at &= ~uint64_t{7};
      len = clamp(8);
      if (k == Kind::kOnes) {
        std::memset(b + at, 0xff, len);
      } else {
        uint64_t v = rng.Below(2) ? rng.Next() : uint64_t{1} << rng.Below(64);
        std::memcpy(b + at, &v, len);
      }
      break;
  }
  if (k == Kind::kForged) FixChecksums(img, s);
  *covered = false;
  if (k != Kind::kForged)
    for (auto& c : s.checksummed)
      for (uint64_t i = c.off; i < c.off + c.len; i++) *covered |= before[i] != (*img)[i];
  char d[160];
  std::snprintf(d, sizeof d, "%s: %s at pool offset %llu (+%llu)", s.name.c_str(), KindName(k),
                static_cast<unsigned long long>(at), static_cast<unsigned long long>(len));
  return d;
}

// Every test starts from a populated pool: `pool`, and `good`, its image
// (MakeImage).
class crash_damaged : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(MAPFS_CLI, X_OK) != 0) GTEST_SKIP() << "no mapfs CLI at " << MAPFS_CLI;
    ASSERT_EQ(pool.error(), "");
    good = MakeImage(pool.path());
    ASSERT_FALSE(good.empty()) << "could not populate the pool";
  }
  FsPool pool{ImagePoolSize()};
  std::string good;
};

struct Outcome {
  long images = 0, refused = 0, reported = 0, undetected = 0, repaired = 0, beyond = 0;
};

TEST_F(crash_damaged, EveryStructure) {
  const uint64_t seed = Seed();
  std::printf("seed %llu (MAPFS_CRASH_SEED)\n", static_cast<unsigned long long>(seed));
  PoolImage pi(good);
  auto structures = pi.Structures();
  const std::string img = pool.path() + ".damaged", local = pool.path() + ".local";
  std::string payload(70000, '\0');
  fstest::FillPattern(payload.data(), payload.size(), 4242, 0);
  ASSERT_TRUE(WriteAllFile(local, payload));

  Rng rng(seed);
  // Sanitized builds run every command several times slower: half as many.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const int per_kind = Full() ? 40 : 2;
#else
  const int per_kind = Full() ? 40 : 4;
#endif
  std::map<std::string, Outcome> by;
  Outcome total;
  long violations = 0;
  for (const Structure& s : structures) {
    ASSERT_FALSE(s.ranges.empty()) << s.name << ": not found in the image";
    for (Kind k : {Kind::kBit, Kind::kBits, Kind::kZeroRange, Kind::kZeroAll, Kind::kRandom, Kind::kOnes, Kind::kForged}) {
      if (k == Kind::kForged && s.checksummed.empty()) continue;
      for (int i = 0; i < per_kind; i++) {
        std::string bad = good;
        bool covered = false;
        std::string what = Damage(&bad, s, k, rng, &covered);
        if (bad == good) continue;
        SCOPED_TRACE(what);
        Outcome& o = by[s.name];
        o.images++;
        ASSERT_TRUE(WriteAllFile(img, bad));
        std::string err, verdict;
        RunResult f = RunCli({"fsck", img});
        verdict = "fsck " + std::to_string(f.code) + ": " + LastLine(f.out);
        err = Orderly(f, "fsck");
        bool detected = f.code == 1;
        if (err.empty() && covered && !detected) err = "checksummed bytes changed, yet fsck says clean:\n" + f.out;
        if (err.empty()) err = ReadEverything(img);
        if (err.empty() && detected) {
          (f.out.find("mapfs fsck:") != std::string::npos ? o.refused : o.reported)++;
          RunResult rp = RunCli({"fsck", "--repair", img});
          verdict += " | repair " + std::to_string(rp.code) + ": " + (rp.code ? rp.out : LastLine(rp.out));
          err = Orderly(rp, "fsck --repair");
          if (err.empty() && rp.code == 0) {
            o.repaired++;
          } else if (err.empty()) {
            o.beyond++;
          }
          if (err.empty() && rp.code == 0) {
            RunResult again = RunCli({"fsck", img});
            err = Orderly(again, "fsck after --repair");
            if (err.empty() && again.code != 0) err = "fsck after a successful --repair is not clean:\n" + again.out;
          }
          detected = rp.code != 0;  // beyond repair: nothing more to use
        } else if (err.empty()) {
          o.undetected++;
        }
        if (err.empty() && !detected) {
          // Usable: a file goes in, comes back, goes away; fsck clean.
          RunResult put = RunCli({"put", img, local, "/usable"});
          RunResult cat = RunCli({"cat", img, "/usable"});
          RunResult rm = RunCli({"rm", img, "/usable"});
          RunResult fin = RunCli({"fsck", img});
          err = Orderly(put, "put");
          if (err.empty()) err = Orderly(cat, "cat");
          if (err.empty()) err = Orderly(rm, "rm");
          if (err.empty()) err = Orderly(fin, "final fsck");
          if (err.empty() && (put.code || cat.code || rm.code || cat.out != payload))
            err = "the pool is not usable: put " + std::to_string(put.code) + ", cat " + std::to_string(cat.code) +
                  (cat.code == 0 && cat.out != payload ? " (other bytes)" : "") + ", rm " + std::to_string(rm.code) +
                  "\n" + put.out + (cat.code ? cat.out : "") + rm.out;
          if (err.empty() && fin.code != 0) err = "fsck after use is not clean:\n" + fin.out;
        }
        DropSegment(bad);
        if (Verbose()) std::printf("%s -> %s\n", what.c_str(), verdict.c_str());
        if (!err.empty()) {
          violations++;
          if (const char* keep = std::getenv("MAPFS_CRASH_KEEP"))  // a directory for the images that failed
            WriteAllFile(std::string(keep) + "/damaged-" + std::to_string(violations) + ".pool", bad);
          ADD_FAILURE() << what << ": " << err;
          if (violations > 20) FAIL() << "too many";
        }
      }
    }
  }
  ::unlink(img.c_str());
  ::unlink(local.c_str());
  for (auto& [name, o] : by) {
    std::printf("damaged-pools: %-22s %4ld images: %3ld refused at mount, %3ld reported by fsck (%ld repaired, %ld beyond repair), %3ld undetected\n",
                name.c_str(), o.images, o.refused, o.reported, o.repaired, o.beyond, o.undetected);
    total.images += o.images;
    total.refused += o.refused;
    total.reported += o.reported;
    total.repaired += o.repaired;
    total.beyond += o.beyond;
    total.undetected += o.undetected;
  }
  std::printf("damaged-pools: %ld images, %ld violations (%ld refused at mount, %ld reported by fsck, %ld repaired, %ld beyond repair, %ld undetected; seed %llu)\n",
              total.images, violations, total.refused, total.reported, total.repaired, total.beyond, total.undetected,
              static_cast<unsigned long long>(seed));
}

// Regression (found by EveryStructure): with the pool state's superblock
// pointer zeroed, a mount (so `mapfs fsck`) took the pool for a new one and
// formatted a file system over the old (after an unclean shutdown it first
// freed every partition as a leak). Now the mount refuses, naming the word,
// and nothing is lost: with the word put back, every file is there.
TEST_F(crash_damaged, LostSuperblockPointerIsRefused) {
  constexpr uint64_t kSuperWord = medium::format::kStateOff + offsetof(medium::format::PoolState, fs_super);
  constexpr uint64_t kDirtyWord = medium::format::kStateOff + offsetof(medium::format::PoolState, dirty);
  for (bool dirty : {false, true}) {
    SCOPED_TRACE(dirty ? "after an unclean shutdown" : "after a clean one");
    std::string bad = good;
    std::memset(bad.data() + kSuperWord, 0, 8);
    if (dirty) bad[kDirtyWord] = 1;
    ASSERT_TRUE(WriteAllFile(pool.path(), bad));
    for (auto* verb : {"fsck", "ls"}) {
      RunResult r = RunCli(verb == std::string("ls") ? std::vector<std::string>{"ls", pool.path(), "/"}
                                                      : std::vector<std::string>{"fsck", pool.path()});
      EXPECT_EQ(Orderly(r, verb), "");
      EXPECT_EQ(r.code, 1) << r.out;
      EXPECT_NE(r.out.find("no superblock pointer"), std::string::npos) << r.out;
    }
    // Put the word back: the file system is intact.
    std::string now = ReadAll(pool.path());
    ASSERT_EQ(now.size(), good.size());
    std::memcpy(now.data() + kSuperWord, good.data() + kSuperWord, 8);
    ASSERT_TRUE(WriteAllFile(pool.path(), now));
    RunResult f = RunCli({"fsck", pool.path()});
    EXPECT_EQ(f.code, 0) << f.out;
    mapfs_t* fs = fstest::MountC(pool.path());
    ASSERT_NE(fs, nullptr);
    for (auto& [p, n] : Files()) {
      if (p == "/a/f7") continue;
      std::string c;
      ASSERT_TRUE(fstest::ReadFile(fs, p, &c)) << p;
      EXPECT_EQ(c.size(), n) << p;
      EXPECT_EQ(fstest::PatternMismatch(c.data(), c.size(), p.size() + n, 0), -1) << p;
    }
    ASSERT_EQ(mapfs_unmount(fs), 0);
  }
}

// Regression (found by the fuzzer): a dirty pool whose recovery failed on
// damage (here an L3 partition header) was closed as clean, so the next
// mount skipped recovery and served the damaged pool (then crashed reading
// it). The pool must stay dirty: every mount refuses the same way.
TEST_F(crash_damaged, FailedRecoveryKeepsThePoolDirty) {
  std::string img = good;
  constexpr uint64_t kDirtyWord = medium::format::kStateOff + offsetof(medium::format::PoolState, dirty);
  uint64_t l3 = 0;
  for (auto& r : PoolImage(img).PartitionHeaders())
    if (r.len == 72) l3 = r.off;
  ASSERT_NE(l3, 0u) << "no L3 partition header in the image";
  std::memset(img.data() + l3, 0, 8);
  img[kDirtyWord] = 1;
  ASSERT_TRUE(WriteAllFile(pool.path(), img));
  std::string first;
  for (int i = 0; i < 3; i++) {
    RunResult r = RunCli({"fsck", pool.path()});
    EXPECT_EQ(Orderly(r, "fsck"), "");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("mapfs fsck:"), std::string::npos) << "mount " << i << " did not refuse:\n" << r.out;
    if (i == 0) first = r.out;
    EXPECT_EQ(r.out, first) << "mount " << i << " saw another pool";
    EXPECT_EQ(ReadAll(pool.path())[kDirtyWord], 1) << "the dirty flag was cleared after mount " << i;
  }
}

// Regression (found by the fuzzer): a regular file's partition word naming
// a partition outside the region sent reads and writes there (SIGSEGV).
// They fail with EUCLEAN now, fsck reports the inode, and the rest works.
TEST_F(crash_damaged, DamagedPartitionWordFailsTheCall) {
  PoolImage pi(good);
  std::vector<uint64_t> victims;  // /l1 (20000 bytes, L1) and /big (L3+)
  for (auto& [ino, p] : pi.Inodes()) {
    auto in = pi.Get<meta::format::Inode>(p);
    if (S_ISREG(in.mode) && (in.size == 20000 || in.size == 2500000)) victims.push_back(p);
  }
  ASSERT_EQ(victims.size(), 2u);
  const uint64_t words[] = {meta::format::PartWord(uint64_t{1} << 46, 1), meta::format::PartWord(4096 * 3, 3),
                            meta::format::PartWord(0, 15)};
  for (uint64_t w : words) {
    SCOPED_TRACE("partition word " + std::to_string(w));
    std::string bad = good;
    for (uint64_t p : victims) std::memcpy(bad.data() + p + offsetof(meta::format::Inode, part), &w, 8);
    ASSERT_TRUE(WriteAllFile(pool.path(), bad));
    for (const char* f : {"/l1", "/big"}) {
      RunResult cat = RunCli({"cat", pool.path(), f});
      EXPECT_EQ(Orderly(cat, std::string("cat ") + f), "");
      EXPECT_EQ(cat.code, 1) << cat.out.substr(0, 300);
      RunResult put = RunCli({"put", pool.path(), "/dev/null", f});
      EXPECT_EQ(Orderly(put, std::string("put ") + f), "");
    }
    RunResult fsck = RunCli({"fsck", pool.path()});
    EXPECT_EQ(Orderly(fsck, "fsck"), "");
    EXPECT_EQ(fsck.code, 1) << fsck.out;
    RunResult other = RunCli({"cat", pool.path(), "/l2"});
    EXPECT_EQ(other.code, 0) << other.out.substr(0, 300);
    EXPECT_EQ(other.out.size(), 200000u);
    DropSegment(bad);
  }
}

// Regression (found by the fuzzer): reading a small file (below L3) touched
// its pages and left unbacked ones to the fault handler, which allocates
// them; where it could not (the page bitmap full or damaged) the reader died
// of SIGSEGV. A read copies backed pages and zeroes holes, allocating none.
TEST_F(crash_damaged, ReadOfUnbackedPagesNeverFaults) {
  std::string img = good;
  PoolImage pi(img);
  uint64_t small = 0;
  for (auto& [ino, p] : pi.Inodes()) {
    auto in = pi.Get<meta::format::Inode>(p);
    if (S_ISREG(in.mode) && in.size == 100) small = p;
  }
  ASSERT_NE(small, 0u);
  // /small: an L0 partition in a chunk nothing backs, every page in use.
  const uint64_t voff = (uint64_t{1} << pi.header().vspace_shift) - (4u << 20);
  ASSERT_EQ(pi.Translate(voff), UINT64_MAX) << "the chunk is backed";
  uint64_t part = meta::format::PartWord(voff, 0), size = 4096;
  std::memcpy(img.data() + small + offsetof(meta::format::Inode, part), &part, 8);
  std::memcpy(img.data() + small + offsetof(meta::format::Inode, size), &size, 8);
  std::memset(img.data() + pi.header().bitmap_off, 0xff, pi.header().bitmap_bytes);
  ASSERT_TRUE(WriteAllFile(pool.path(), img));
  RunResult cat = RunCli({"cat", pool.path(), "/small"});
  EXPECT_EQ(Orderly(cat, "cat /small"), "");
  EXPECT_EQ(cat.code, 0) << cat.out.substr(0, 300);
  EXPECT_EQ(cat.out, std::string(4096, '\0'));
  EXPECT_EQ(ReadEverything(pool.path()), "");
}

// Regression (found by the fuzzer): readlink of a long symlink copied its
// target from wherever its partition word pointed (outside the region, or a
// page nothing backs): SIGSEGV. It fails with EUCLEAN now.
TEST_F(crash_damaged, DamagedSymlinkTargetFailsTheCall) {
  PoolImage pi(good);
  uint64_t link = 0;
  for (auto& [ino, p] : pi.Inodes()) {
    auto in = pi.Get<meta::format::Inode>(p);
    if (S_ISLNK(in.mode) && in.size == 300) link = p;
  }
  ASSERT_NE(link, 0u);
  const uint64_t region = uint64_t{1} << pi.header().vspace_shift;
  for (uint64_t part : {meta::format::PartWord(region - (4u << 20), 0), meta::format::PartWord(region, 0),
                        meta::format::PartWord(uint64_t{1} << 46, 0)}) {
    SCOPED_TRACE("partition word " + std::to_string(part));
    std::string bad = good;
    std::memcpy(bad.data() + link + offsetof(meta::format::Inode, part), &part, 8);
    ASSERT_TRUE(WriteAllFile(pool.path(), bad));
    EXPECT_EQ(ReadEverything(pool.path()), "");
    RunResult ls = RunCli({"ls", "-l", pool.path(), "/"});
    EXPECT_EQ(Orderly(ls, "ls -l"), "");
    DropSegment(bad);
  }
}

// Regression (found by EveryStructure with MAPFS_CRASH_FULL): an inode
// segment or a directory partition named by a well-formed reference to a
// page nothing backs (a PPT entry lost, a pointer flipped) was touched, and
// in a pool that could not allocate the page the fault killed fsck
// (SIGSEGV). Segments are backed when the table opens (or the mount fails),
// directory references to unbacked pages are damage.
TEST_F(crash_damaged, UnbackedMetadataIsDamageNotAFault) {
  PoolImage pi(good);
  const auto& h = pi.header();
  const uint64_t region = uint64_t{1} << h.vspace_shift;
  const uint64_t unbacked = region - (4u << 20);  // 2 MiB aligned, nothing there
  ASSERT_EQ(pi.Translate(unbacked), UINT64_MAX);
  uint64_t sp = pi.Translate(pi.SuperVoff());
  ASSERT_NE(sp, UINT64_MAX);
  std::vector<Range> roots, blocks, nodes;
  pi.Directories(&roots, &blocks, &nodes);
  ASSERT_FALSE(roots.empty());
  struct Case {
    const char* what;
    uint64_t off, value;
  };
  const Case cases[] = {
      {"inode segment 1 pointer", sp + offsetof(meta::format::Superblock, seg) + 8, unbacked},
      {"directory top array child", roots[0].off + offsetof(dir::format::Root, top) + 8, unbacked},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::string bad = good;
    std::memcpy(bad.data() + c.off, &c.value, 8);
    std::memset(bad.data() + h.bitmap_off, 0xff, h.bitmap_bytes);  // no page can be allocated
    ASSERT_TRUE(WriteAllFile(pool.path(), bad));
    RunResult f = RunCli({"fsck", pool.path()});
    EXPECT_EQ(Orderly(f, "fsck"), "");
    EXPECT_EQ(f.code, 1) << f.out;
    EXPECT_EQ(ReadEverything(pool.path()), "");
    DropSegment(bad);
  }
}

// Regression (found by EveryStructure with MAPFS_CRASH_FULL): with an
// inode segment's bitmap zeroed, fsck --repair restored the bits of live
// inodes but not those of the bitmap's own slots, said "all repaired", and
// the next create was handed the bitmap slot and failed. fsck reports the
// clear bits and --repair sets them.
TEST_F(crash_damaged, RepairRestoresTheBitmapsOwnSlots) {
  std::string img = good;
  PoolImage pi(img);
  auto sb = pi.Super();
  ASSERT_GE(sb.segments, 2u);
  for (int seg : {0, 1}) {
    uint64_t p = pi.Translate(sb.seg[seg]);
    ASSERT_NE(p, UINT64_MAX);
    std::memset(img.data() + p, 0, 16);  // the first 128 bits: the own slot's and some inodes'
  }
  ASSERT_TRUE(WriteAllFile(pool.path(), img));
  RunResult f = RunCli({"fsck", pool.path()});
  EXPECT_EQ(f.code, 1) << f.out;
  EXPECT_NE(f.out.find("own slot"), std::string::npos) << f.out;
  RunResult r = RunCli({"fsck", "--repair", pool.path()});
  EXPECT_EQ(r.code, 0) << r.out;
  RunResult again = RunCli({"fsck", pool.path()});
  EXPECT_EQ(again.code, 0) << again.out;
  const std::string local = pool.path() + ".local";
  ASSERT_TRUE(WriteAllFile(local, "some bytes"));
  for (int i = 0; i < 3; i++) {
    std::string name = "/new" + std::to_string(i);
    RunResult put = RunCli({"put", pool.path(), local, name});
    EXPECT_EQ(put.code, 0) << put.out;
    RunResult cat = RunCli({"cat", pool.path(), name});
    EXPECT_EQ(cat.out, "some bytes");
  }
  ::unlink(local.c_str());
  EXPECT_EQ(RunCli({"fsck", pool.path()}).code, 0);
}

// Pool offsets of the present entries of the PPT's level-1 and level-0
// tables (the first `per_table` of each table).
void LowEntries(const PoolImage& pi, uint64_t table, int level, size_t per_table, std::vector<uint64_t>* out) {
  size_t taken = 0;
  for (int i = 0; i < vm::ppt::kEntries; i++) {
    uint64_t o = table + 8 * uint64_t(i), e = pi.Get<uint64_t>(o);
    if (!vm::ppt::IsPresent(e)) continue;
    if (level <= 1 && taken++ < per_table) out->push_back(o);
    if (level >= 1 && vm::ppt::IsTable(e)) LowEntries(pi, vm::ppt::Target(e), level - 1, per_table, out);
  }
}

// Regression (found by EveryStructure): a page-table entry pointing past the
// end of the pool was mapped as it was, and the first touch of that chunk
// (a mount reading the inode table, fsck, a read) died of SIGBUS. Damaged
// entries are never mapped, walked or freed now: the calls that need them
// fail with EUCLEAN, fsck reports them and --repair clears them.
TEST_F(crash_damaged, DamagedPageTableEntryFailsTheCall) {
  PoolImage pi(good);
  std::vector<uint64_t> entries;
  LowEntries(pi, pi.header().ppt_root_off, 3, 3, &entries);
  ASSERT_GE(entries.size(), 3u);
  const uint64_t bad_values[] = {~uint64_t{0}, vm::ppt::Leaf(pi.header().pool_size), vm::ppt::Table(4096)};
  for (uint64_t o : entries) {
    for (uint64_t v : bad_values) {
      SCOPED_TRACE("entry at pool offset " + std::to_string(o) + " set to " + std::to_string(v));
      std::string bad = good;
      std::memcpy(bad.data() + o, &v, 8);
      ASSERT_TRUE(WriteAllFile(pool.path(), bad));
      RunResult f = RunCli({"fsck", pool.path()});
      EXPECT_EQ(Orderly(f, "fsck"), "");
      EXPECT_EQ(f.code, 1) << f.out;
      EXPECT_EQ(ReadEverything(pool.path()), "");
      RunResult r = RunCli({"fsck", "--repair", pool.path()});
      EXPECT_EQ(Orderly(r, "fsck --repair"), "");
      DropSegment(bad);
    }
  }
}

}  // namespace
}  // namespace mapfs::crash
