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
// - Shared maps: processes communicating through stores into a writable
//   MAP_SHARED map of one file (SQLite's -shm WAL index) see each other's
//   stores at once, and the file's writes and reads agree with them.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "overlay/virtual/format.h"
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

// Sets the 8-byte word at `word_off` of a file's meta block to this pid by
// hand (a slot of format.h MetaMappers), clears it 300 ms later from a
// thread, and checks that a 3-byte write made meanwhile waited for that and
// then landed. (Up here, before the first TEST: labels.Threads reads the
// text between two TESTs as the first one's body; the cases that call it
// are labelled threads in virtual_tests.cmake.)
void ExpectAWriteWaitsForASlot(size_t word_off, const char* what) {
  TempDir dir;
  std::string path = dir.File("f");
  auto e = MakeEngine(dir);
  ASSERT_TRUE(e);
  auto f = AdoptPath(*e, path, O_RDWR | O_CREAT);
  ASSERT_TRUE(f);
  std::string blk(4096, 'o');
  ASSERT_TRUE(f->Pwrite(blk.data(), blk.size(), 0).ok());
  int raw = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  void* m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, raw, 0);
  ASSERT_NE(m, MAP_FAILED);
  uint64_t* word = reinterpret_cast<uint64_t*>(static_cast<char*>(m) + word_off);
  std::atomic_ref<uint64_t>(*word).store(static_cast<uint64_t>(getpid()));
  auto start = std::chrono::steady_clock::now();
  std::thread clear([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::atomic_ref<uint64_t>(*word).store(0);
  });
  ASSERT_TRUE(f->Pwrite("new", 3, 100).ok());
  auto waited = std::chrono::steady_clock::now() - start;
  clear.join();
  EXPECT_GE(waited, std::chrono::milliseconds(250)) << what;
  char got[3] = {};
  ASSERT_TRUE(f->Pread(got, 3, 100).ok());
  EXPECT_EQ(std::memcmp(got, "new", 3), 0);
  munmap(m, 4096);
  ::close(raw);
  ASSERT_TRUE(f->Close().ok());
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
  ASSERT_EQ(ftruncate(fmt, static_cast<off_t>(FormatSize())), 0);  // as Format's first step
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

// The same race, unstaged: one engine creates files (formatting them)
// while another opens each without O_CREAT as soon as its name exists.
// Every open must find a virtualized file, whatever instant of the format
// it lands in (one that came after the format ended, though the file was
// still headerless at its first look, was once served as plain: SQLite's
// ftruncate of its -shm then cut the format through the kernel).
TEST(VirtualMultiProcess, OpensRacingFormatsAlwaysFindTheFormat) {
  TempDir dir;
  auto creator = MakeEngine(dir);
  auto opener = MakeEngine(dir);
  ASSERT_TRUE(creator && opener);
  constexpr int kFiles = 200;
  std::atomic<int> plain{0}, errors{0};
  std::thread t([&] {
    for (int i = 0; i < kFiles; i++) {
      std::string path = dir.File("f" + std::to_string(i));
      // Even files: opened with O_CREAT as soon as the name exists (the
      // open formats or waits for the format under flock: SQLite's opens).
      // Odd ones: without O_CREAT as soon as the file is not empty (inside
      // or just after the format). (An open without O_CREAT of a file
      // still empty is plain: docs/OVERLAY.md.)
      const int flags = i % 2 == 0 ? O_RDWR | O_CREAT : O_RDWR;
      int fd = -1;
      struct stat st {};
      while ((i % 2 == 1 && (::stat(path.c_str(), &st) != 0 || st.st_size == 0)) ||
             (fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC)) < 0)
        std::this_thread::yield();
      auto f = opener->Adopt(fd, flags);
      if (!f.ok()) {
        errors++;
        continue;
      }
      if ((*f)->KernelIsContent()) plain++;
      (void)(*f)->Close();
    }
  });
  for (int i = 0; i < kFiles; i++) {
    auto f = AdoptPath(*creator, dir.File("f" + std::to_string(i)), O_RDWR | O_CREAT);
    ASSERT_TRUE(f);
    ASSERT_TRUE(f->Close().ok());
  }
  t.join();
  EXPECT_EQ(plain.load(), 0) << "opens that served a virtualized file as plain";
  EXPECT_EQ(errors.load(), 0);
}

// State shared by the processes of a test: a model of the content and a
// step counter, in anonymous shared memory made before the forks.
struct Shared {
  std::atomic<int> step;
  std::atomic<int> failures;
  char model[8 * 4096];
  char note[256];
};

Shared* NewShared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return new (p) Shared{};
}

void WaitStep(Shared* sh, int step) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (sh->step.load() < step && sh->failures.load() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
}

// Process `me` (0 and 1 map the file, 2 writes and reads it with pwrite and
// pread) of three, each with an engine of its own as under the shim. Round
// r: process r % 3 changes some bytes (through its map, or pwrite), then
// every process compares the whole content with the model.
void MapPeer(const std::string& dir, const std::string& path, Shared* sh, int me, int rounds) {
  auto fail = [&](const std::string& what) {
    if (sh->failures.fetch_add(1) == 0) std::snprintf(sh->note, sizeof(sh->note), "%s", what.c_str());
  };
  auto e = NewVirtualEngine(Options{dir, EngineKind::kVirtual, Mode::kPosix});
  if (!e.ok()) return fail("engine");
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  auto f = (*e)->Adopt(fd, O_RDWR);
  if (!f.ok()) return fail("adopt: " + f.status().message());
  constexpr size_t kLen = sizeof(Shared::model);
  char* map = nullptr;
  if (me < 2) {
    auto m = (*f)->Map(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, 0);
    if (!m.ok()) return fail("map: " + m.status().message());
    map = static_cast<char*>(*m);
  }
  sh->step.fetch_add(1);  // steps 1-3: all three ready
  WaitStep(sh, 3);
  for (int r = 0; r < rounds; r++) {
    const int base = 3 + r * 4;  // writer's step, then three checks
    WaitStep(sh, base);
    if (r % 3 == me) {
      // A few spans, at offsets and lengths that straddle blocks.
      for (int k = 0; k < 3; k++) {
        size_t at = (static_cast<size_t>(r) * 7919 + k * 3001) % (kLen - 600);
        size_t n = 1 + (static_cast<size_t>(r) * 131 + k * 17) % 600;
        std::string bytes(n, static_cast<char>('A' + (r * 3 + k) % 26 + me));
        std::memcpy(sh->model + at, bytes.data(), n);
        if (map != nullptr) {
          std::memcpy(map + at, bytes.data(), n);
        } else {
          auto w = (*f)->Pwrite(bytes.data(), n, at);
          if (!w.ok() || *w != n) return fail("pwrite");
        }
      }
      sh->step.fetch_add(1);
    }
    WaitStep(sh, base + 1);
    std::string got(kLen, '\0');
    if (map != nullptr) {
      std::memcpy(got.data(), map, kLen);
    } else {
      auto rd = (*f)->Pread(got.data(), kLen, 0);
      if (!rd.ok() || *rd != kLen) return fail("pread");
    }
    if (std::memcmp(got.data(), sh->model, kLen) != 0) {
      size_t i = 0;
      while (got[i] == sh->model[i]) i++;
      return fail("round " + std::to_string(r) + ": process " + std::to_string(me) + " (" +
                  (map != nullptr ? "map" : "pread") + ") differs from the model at byte " + std::to_string(i));
    }
    sh->step.fetch_add(1);
    WaitStep(sh, base + 4);
  }
  if (map != nullptr) {
    (void)(*e)->UnmapViews(map, kLen);
    munmap(map, kLen);
  }
  (void)(*f)->Close();
}

// Two processes map one virtualized file MAP_SHARED writable and a third
// writes it with pwrite: each one's stores are seen by the others' loads
// (no msync) and reads, as on a kernel file. Before direct maps each map
// was a private copy written back at msync: process 1 never saw process
// 0's stores (SQLite's WAL index corrupted across processes).
TEST(VirtualMultiProcess, WritableSharedMapsAreCoherentAcrossProcesses) {
  TempDir dir;
  std::string path = dir.File("shm");
  {
    auto e = MakeEngine(dir);
    ASSERT_TRUE(e);
    auto f = AdoptPath(*e, path, O_RDWR | O_CREAT);
    ASSERT_TRUE(f);
    ASSERT_FALSE(f->KernelIsContent());
    // 8 blocks: the 3rd and 6th are holes (the map fills them).
    std::string blk(4096, 'x');
    for (int b : {0, 1, 3, 4, 6, 7}) ASSERT_TRUE(f->Pwrite(blk.data(), blk.size(), uint64_t(b) * 4096).ok());
    ASSERT_TRUE(f->Close().ok());
  }
  Shared* sh = NewShared();
  for (int b : {0, 1, 3, 4, 6, 7}) std::memset(sh->model + b * 4096, 'x', 4096);
  constexpr int kRounds = 30;
  pid_t pids[3];
  for (int me = 0; me < 3; me++) {
    pids[me] = fork();
    if (pids[me] == 0) {
      MapPeer(dir.path(), path, sh, me, kRounds);
      _exit(0);
    }
  }
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  EXPECT_EQ(sh->failures.load(), 0) << sh->note;
  EXPECT_EQ(sh->step.load(), 3 + kRounds * 4);
  // After the maps are gone: the content is the model's, the file checks
  // clean, and writes are copy-on-write again (a shrink is allowed).
  auto e = MakeEngine(dir);
  ASSERT_TRUE(e);
  auto f = AdoptPath(*e, path, O_RDWR);
  ASSERT_TRUE(f);
  std::string got(sizeof(sh->model), '\0');
  auto rd = f->Pread(got.data(), got.size(), 0);
  ASSERT_TRUE(rd.ok());
  EXPECT_EQ(std::memcmp(got.data(), sh->model, got.size()), 0);
  EXPECT_TRUE(f->Truncate(4096).ok());
  std::string report;
  EXPECT_TRUE(CheckFile(path, &report).ok()) << report;
  munmap(sh, sizeof(Shared));
}

// While a process holds a writable shared map of a file, shrinking it
// would free blocks the map holds: refused (EBUSY), in another process too;
// growing and writing go on.
TEST(VirtualMultiProcess, ShrinkIsRefusedWhileAnotherProcessMapsTheFile) {
  TempDir dir;
  std::string path = dir.File("f");
  auto e = MakeEngine(dir);
  ASSERT_TRUE(e);
  auto f = AdoptPath(*e, path, O_RDWR | O_CREAT);
  ASSERT_TRUE(f);
  std::string blk(3 * 4096, 'm');
  ASSERT_TRUE(f->Pwrite(blk.data(), blk.size(), 0).ok());
  auto m = f->Map(nullptr, blk.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok()) << m.status().message();
  char* map = static_cast<char*>(*m);
  pid_t pid = fork();
  if (pid == 0) {
    auto e2 = NewVirtualEngine(Options{dir.path(), EngineKind::kVirtual, Mode::kPosix});
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    auto g = (*e2)->Adopt(fd, O_RDWR);
    if (!g.ok()) _exit(10);
    Status s = (*g)->Truncate(4096);
    if (s.ok() || s.code() != EBUSY) _exit(11);
    if (!(*g)->Truncate(4 * 4096).ok()) _exit(12);
    if (!(*g)->Pwrite("child", 5, 4096).ok()) _exit(13);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(std::memcmp(map + 4096, "child", 5), 0) << "the child's write is not in the map";
  auto size = f->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 4u * 4096);
  EXPECT_TRUE(e->UnmapViews(map, blk.size()).ok());
  munmap(map, blk.size());
  EXPECT_TRUE(f->Truncate(4096).ok()) << "a shrink once the map is gone";
}

// The only process mapping a file may shrink it (fsx maps and truncates):
// its map's pages past the new end read zeros and keep no block of the
// file (so the blocks freed are mapped nowhere), the partial last page
// reads zeros past the end, the file checks clean, and the map still
// follows the file below the end.
TEST(VirtualMultiProcess, TheSoleMapperMayShrinkTheFile) {
  TempDir dir;
  std::string path = dir.File("f");
  auto e = MakeEngine(dir);
  ASSERT_TRUE(e);
  auto f = AdoptPath(*e, path, O_RDWR | O_CREAT);
  ASSERT_TRUE(f);
  std::string data(4 * 4096, 'd');
  ASSERT_TRUE(f->Pwrite(data.data(), data.size(), 0).ok());
  auto m = f->Map(nullptr, data.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok()) << m.status().message();
  char* map = static_cast<char*>(*m);
  Status s = f->Truncate(4096 + 100);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(map[4096 + 99], 'd');
  EXPECT_EQ(map[4096 + 100], 0) << "past the new end in the last page";
  EXPECT_EQ(map[3 * 4096], 0) << "a page past the new end";
  map[3 * 4096] = 'x';  // dropped: the page is no longer the file's
  ASSERT_TRUE(f->Pwrite("after", 5, 10).ok());
  EXPECT_EQ(std::memcmp(map + 10, "after", 5), 0) << "the map stopped following the file";
  map[20] = 'M';
  char c = 0;
  ASSERT_TRUE(f->Pread(&c, 1, 20).ok());
  EXPECT_EQ(c, 'M');
  // Growing again: zeros, not the old bytes or the dropped store.
  ASSERT_TRUE(f->Truncate(4 * 4096).ok());
  std::string got(4 * 4096, '\0');
  ASSERT_TRUE(f->Pread(got.data(), got.size(), 0).ok());
  EXPECT_EQ(got.find_first_not_of('\0', 4096 + 100), std::string::npos);
  std::string report;
  EXPECT_TRUE(CheckFile(path, &report).ok()) << report;
  EXPECT_TRUE(e->UnmapViews(map, data.size()).ok());
  munmap(map, data.size());
}

// One process maps and unmaps the file in a loop while two others write
// bytes of the same blocks (disjoint 64-byte stripes) with pwrite: each
// write goes in place or copy-on-write as mappers come and go. No write is
// lost (one process's copy-on-write commit must not move a block another
// wrote into in place: that writer must not trust a mapper slot before its
// barrier lands) and no block is reused while a writer stores into it
// (a commit that moves a block must wait for in-place writers after the
// last mapper left): the content is the model's, the file checks clean.
struct StressShared {
  std::atomic<int> done;
  std::atomic<int> maps;
  std::atomic<int> failures;
  char model[2][8 * 4096];
  char note[256];
};

void StressWriter(const std::string& dir, const std::string& path, StressShared* sh, int me, int writes) {
  auto fail = [&](const std::string& what) {
    if (sh->failures.fetch_add(1) == 0) std::snprintf(sh->note, sizeof(sh->note), "%s", what.c_str());
  };
  auto e = NewVirtualEngine(Options{dir, EngineKind::kVirtual, Mode::kPosix});
  if (!e.ok()) return fail("engine");
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  auto f = (*e)->Adopt(fd, O_RDWR);
  if (!f.ok()) return fail("adopt: " + f.status().message());
  uint64_t x = 0x9e3779b97f4a7c15ull * (me + 1);
  std::string got(sizeof(sh->model[0]), '\0');
  for (int i = 0; i < writes && sh->failures.load() == 0; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    // A stripe of this writer's parity, a span inside it.
    const size_t stripe = ((x % (sizeof(sh->model[0]) / 128)) * 2 + me) * 64;
    const size_t at = stripe + (x >> 20) % 32, n = 1 + (x >> 30) % 32;
    std::string bytes(n, static_cast<char>('!' + (i + me * 13) % 90));
    auto w = (*f)->Pwrite(bytes.data(), n, at);
    if (!w.ok() || *w != n) return fail("pwrite: " + (w.ok() ? std::string("short") : w.status().message()));
    std::memcpy(sh->model[me] + at, bytes.data(), n);
    // Checked as it goes: a lost write is soon written over again.
    if (i % 8 == 7) {
      auto rd = (*f)->Pread(got.data(), got.size(), 0);
      if (!rd.ok() || *rd != got.size()) return fail("pread");
      for (size_t b = me * 64; b < got.size(); b += 128)
        if (std::memcmp(got.data() + b, sh->model[me] + b, 64) != 0)
          return fail("write " + std::to_string(i) + " of process " + std::to_string(me) + ": stripe at " +
                      std::to_string(b) + " differs from the model");
    }
  }
  (void)(*f)->Close();
}

TEST(VirtualMultiProcess, WritesStayWhileAnotherProcessMapsAndUnmaps) {
  TempDir dir;
  std::string path = dir.File("f");
  constexpr size_t kLen = sizeof(StressShared::model[0]);
  {
    auto e = MakeEngine(dir);
    ASSERT_TRUE(e);
    auto f = AdoptPath(*e, path, O_RDWR | O_CREAT);
    ASSERT_TRUE(f);
    std::string init(kLen, '.');
    ASSERT_TRUE(f->Pwrite(init.data(), init.size(), 0).ok());
    ASSERT_TRUE(f->Close().ok());
  }
  void* p = mmap(nullptr, sizeof(StressShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  StressShared* sh = new (p) StressShared{};
  std::memset(sh->model, '.', sizeof(sh->model));
  pid_t writers[2];
  for (int me = 0; me < 2; me++) {
    writers[me] = fork();
    if (writers[me] == 0) {
      StressWriter(dir.path(), path, sh, me, 20000);
      sh->done.fetch_add(1);
      _exit(0);
    }
  }
  pid_t mapper = fork();
  if (mapper == 0) {
    auto e = NewVirtualEngine(Options{dir.path(), EngineKind::kVirtual, Mode::kPosix});
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    auto f = e.ok() ? (*e)->Adopt(fd, O_RDWR) : Result<std::unique_ptr<OverlayFile>>(e.status());
    if (!f.ok()) _exit(10);
    // Mapped and unmapped for a few microseconds each: writes see mappers
    // come and go while they copy and commit.
    uint64_t x = 88172645463325252ull;
    auto pause = [&] {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(x % 20);
      while (std::chrono::steady_clock::now() < until) {
      }
    };
    while (sh->done.load() < 2 && sh->failures.load() == 0) {
      pause();
      auto m = (*f)->Map(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, 0);
      if (!m.ok()) _exit(11);
      sh->maps.fetch_add(1);
      volatile char c = static_cast<char*>(*m)[(sh->done.load() * 4096) % kLen];
      (void)c;
      pause();
      (void)(*e)->UnmapViews(*m, kLen);
      munmap(*m, kLen);
    }
    (void)(*f)->Close();
    _exit(0);
  }
  for (pid_t w : writers) waitpid(w, nullptr, 0);
  int status = 0;
  waitpid(mapper, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_EQ(sh->failures.load(), 0) << sh->note;
  EXPECT_GT(sh->maps.load(), 10) << "the mapper hardly ran during the writes";
  std::string model(kLen, '.');
  for (size_t i = 0; i < kLen; i++) model[i] = sh->model[(i / 64) % 2][i];
  auto e = MakeEngine(dir);
  ASSERT_TRUE(e);
  auto f = AdoptPath(*e, path, O_RDWR);
  ASSERT_TRUE(f);
  std::string got(kLen, '\0');
  auto rd = f->Pread(got.data(), kLen, 0);
  ASSERT_TRUE(rd.ok());
  size_t diff = 0;
  while (diff < kLen && got[diff] == model[diff]) diff++;
  EXPECT_EQ(diff, kLen) << "lost or stray bytes from offset " << diff;
  ASSERT_TRUE(f->Close().ok());
  std::string report;
  EXPECT_TRUE(CheckFile(path, &report).ok()) << report;
  munmap(p, sizeof(StressShared));
}

// A writer storing in place holds an in-place slot (format.h MetaMappers);
// once the last mapper is gone, a copy-on-write commit that moves the block
// it stores into would let the GC reuse that block under its stores: the
// commit waits while any in-place slot is set. Here the slot is set by
// hand, with no mapper, and cleared 300 ms later.
TEST(VirtualMultiProcess, ACommitThatMovesABlockWaitsForInPlaceWriters) {
  ExpectAWriteWaitsForASlot(pmem::kMappersOffset + offsetof(pmem::MetaMappers, inplace) + 3 * 8,
                            "the commit did not wait for the in-place writer");
}

// A mapper slot counts for in-place writes only once it is ready (its
// barrier commit landed, vdirect.cc DirectBegin): before that, a commit
// that saw no mapper may still land and move the block a writer would
// store into. A slot claimed but not ready (set by hand, cleared 300 ms
// later) holds writes back: neither in place nor moving the block.
TEST(VirtualMultiProcess, AMapperSlotNotYetReadyHoldsWritesBack) {
  ExpectAWriteWaitsForASlot(pmem::kMappersOffset + offsetof(pmem::MetaMappers, mappers) + 5 * 8,
                            "the write did not wait for the mapper to be ready");
}

// The engine's own descriptor of a file (a VFile's) is closed through
// Opens like its others: a read-only attachment replaced at a read-write
// open, kept alive by a map, goes at the unmap while the program holds a
// record lock through its read-write descriptor; closing its descriptor
// then would have dropped the lock.
TEST(VirtualMultiProcess, AReplacedAttachmentGoingAtUnmapKeepsTheLocks) {
  TempDir dir;
  std::string path = dir.File("f");
  auto e = MakeEngine(dir);
  ASSERT_TRUE(e);
  {
    auto w = AdoptPath(*e, path, O_RDWR | O_CREAT);
    ASSERT_TRUE(w);
    ASSERT_TRUE(w->Pwrite(std::string(8192, 'r').data(), 8192, 0).ok());
    ASSERT_TRUE(w->Close().ok());
  }
  // A fresh engine: the read-only open attaches read-only.
  e = MakeEngine(dir);
  ASSERT_TRUE(e);
  auto ro = AdoptPath(*e, path, O_RDONLY);
  ASSERT_TRUE(ro);
  auto m = ro->Map(nullptr, 8192, PROT_READ, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_TRUE(ro->Close().ok());
  auto rw = AdoptPath(*e, path, O_RDWR);
  ASSERT_TRUE(rw);
  LockByte0(rw->fd());
  ASSERT_TRUE(LockedForOthers(path));
  EXPECT_TRUE(e->UnmapViews(*m, 8192).ok());
  munmap(*m, 8192);
  EXPECT_TRUE(LockedForOthers(path)) << "the unmap released the program's lock";
  ASSERT_TRUE(rw->Close().ok());
}

// An O_CREAT open of an empty file that someone holds flock'ed (another
// process, or this one through another open file description) returns
// (the format is skipped: an empty plain file) instead of waiting for the
// flock forever; and an open of a plain file whose first bytes are zeros,
// under someone's LOCK_EX, does not wait for a format that cannot be (it
// is not of the size a format starts with).
TEST(VirtualMultiProcess, OpensOfFilesHeldFlockedDoNotHang) {
  TempDir dir;
  std::string empty = dir.File("empty"), zeros = dir.File("zeros");
  int a = ::open(empty.c_str(), O_RDWR | O_CREAT, 0644);
  int b = ::open(zeros.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_EQ(pwrite(b, std::string(4096, '\0').data(), 4096, 0), 4096);
  ASSERT_EQ(pwrite(b, "tail", 4, 4096), 4);
  ASSERT_EQ(flock(a, LOCK_EX), 0);
  ASSERT_EQ(flock(b, LOCK_EX), 0);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    auto e = NewVirtualEngine(Options{dir.path(), EngineKind::kVirtual, Mode::kPosix});
    if (!e.ok()) _exit(10);
    int fd = ::open(empty.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    auto f = (*e)->Adopt(fd, O_RDWR | O_CREAT);
    if (!f.ok()) _exit(11);
    auto t1 = std::chrono::steady_clock::now();
    fd = ::open(zeros.c_str(), O_RDWR | O_CLOEXEC);
    auto g = (*e)->Adopt(fd, O_RDWR);
    if (!g.ok() || !(*g)->KernelIsContent()) _exit(12);
    auto t2 = std::chrono::steady_clock::now();
    if (t2 - t1 > std::chrono::milliseconds(500)) _exit(13);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << "the open hung (killed by its alarm)";
  if (WIFEXITED(status)) {
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  ::close(a);
  ::close(b);
}

}  // namespace
}  // namespace mapfs::overlay::vrt::testing
