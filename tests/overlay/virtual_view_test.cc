// Maps of virtualized files through the engine (overlay/virtual/vview.h):
// what the shim's mmap, msync and munmap rely on, and the engine's side of
// O_TRUNC, write-only opens, SEEK_DATA/HOLE and fallocate.
#include <fcntl.h>
#include <linux/falloc.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "overlay/virtual/virtual_engine.h"
#include "overlay/virtual/vtrack.h"
#include "overlay/virtual/vview.h"
#include "vm/fault.h"
#include "test_util.h"
#include "virtual_test_util.h"

namespace mapfs::overlay::vrt::testing {
namespace {

// The permissions /proc/self/maps shows for the page holding `p` ("rw-s"),
// or "" if unmapped: whether dirty tracking left it write-protected.
std::string Perms(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms;
    in >> range >> perms;
    size_t dash = range.find('-');
    uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (a >= lo && a < hi) return perms;
  }
  return "";
}

// The process's private anonymous memory in KiB (/proc/self/smaps_rollup).
long AnonymousKb() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  long kb = -1;
  while (in >> key)
    if (key == "Anonymous:" && in >> kb) return kb;
  return -1;
}

class VirtualView : public ::testing::Test {
 protected:
  // Every writable shared map is tracked here (vview.h: by default a
  // file's first kUntrackedViews are not), so that the tests below reach the
  // tracking with one map; AFilesFirstMapsAreNotWriteProtected restores the
  // default.
  void SetUp() override {
    // These tests cover the copies (vview.h) and their dirty tracking:
    // writable shared maps are direct by default (vdirect.h, tested in
    // virtual_multiprocess_test.cc), copies when asked.
    setenv("MAPFS_VIRTUAL_SHARED_MAPS", "copy", 1);
    setenv("MAPFS_OVERLAY_TRACK_FROM", "0", 1);
    auto e = NewVirtualEngine(Options{dir_.path(), EngineKind::kVirtual, Mode::kPosix});
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_ = std::move(*e);
  }
  // Opens `name` under the directory as the shim would: the kernel opens
  // it (without O_TRUNC: TruncatesAtAdopt), the engine adopts it.
  std::unique_ptr<OverlayFile> Open(const std::string& name, int flags) {
    int kflags = engine_->TruncatesAtAdopt() ? flags & ~O_TRUNC : flags;
    int fd = ::open(dir_.File(name).c_str(), kflags | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << name;
    auto f = engine_->Adopt(fd, flags);
    EXPECT_TRUE(f.ok()) << f.status().message();
    return f.ok() ? std::move(*f) : nullptr;
  }
  std::string Read(OverlayFile& f, uint64_t off, size_t n) {
    std::string s(n, '\0');
    auto r = f.Pread(s.data(), n, off);
    EXPECT_TRUE(r.ok());
    s.resize(r.ok() ? *r : 0);
    return s;
  }
  TempDir dir_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(VirtualView, SharedMapStoresReachTheFileAtSyncAndUnmap) {
  auto f = Open("a", O_RDWR | O_CREAT);
  ASSERT_TRUE(f && !f->KernelIsContent());
  std::string content(3 * 4096 + 100, 'c');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok()) << m.status().message();
  char* p = static_cast<char*>(*m);
  EXPECT_EQ(std::string(p, content.size()), content);
  EXPECT_TRUE(engine_->HasViews());
  std::memcpy(p + 10, "STORE", 5);
  // A read of the range sees the store (written back first).
  EXPECT_EQ(Read(*f, 10, 5), "STORE");
  // A write shows in the map.
  ASSERT_TRUE(f->Pwrite("WRITE", 5, 5000).ok());
  EXPECT_EQ(std::string(p + 5000, 5), "WRITE");
  // msync: stores in another page reach the file; a process that does not
  // share the map (a second engine: another process) reads them.
  std::memcpy(p + 8192, "SYNC", 4);
  ASSERT_TRUE(engine_->SyncViews(p, content.size()).ok());
  {
    auto other = NewVirtualEngine(Options{dir_.path(), EngineKind::kVirtual, Mode::kPosix});
    ASSERT_TRUE(other.ok());
    int fd = ::open(dir_.File("a").c_str(), O_RDONLY | O_CLOEXEC);
    auto g = (*other)->Adopt(fd, O_RDONLY);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(Read(**g, 8192, 4), "SYNC");
    EXPECT_EQ(Read(**g, 10, 5), "STORE");
  }
  // Stores past the end are dropped, as a kernel map's are.
  std::memcpy(p + content.size(), "PAST", 4);
  std::memcpy(p + 12000, "LAST", 4);
  ASSERT_TRUE(f->Close().ok());  // the map outlives the descriptor
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
  EXPECT_FALSE(engine_->HasViews());
  auto h = Open("a", O_RDONLY);
  EXPECT_EQ(Read(*h, 12000, 4), "LAST");
  EXPECT_EQ(*h->Size(), content.size());
}

TEST_F(VirtualView, PartialUnmapKeepsTheRestOfTheMapWorking) {
  auto f = Open("b", O_RDWR | O_CREAT);
  std::string content(8 * 4096, 'b');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  for (int pg = 0; pg < 8; pg++) p[pg * 4096 + 1] = static_cast<char>('0' + pg);
  // Cut pages 3..4 out of the middle: their stores are written back, the
  // two sides stay maps of their own.
  ASSERT_TRUE(engine_->UnmapViews(p + 3 * 4096, 2 * 4096).ok());
  ASSERT_EQ(::munmap(p + 3 * 4096, 2 * 4096), 0);
  EXPECT_TRUE(engine_->ViewsMeet(p, 4096));
  EXPECT_TRUE(engine_->ViewsMeet(p + 7 * 4096, 1));
  EXPECT_FALSE(engine_->ViewsMeet(p + 3 * 4096, 2 * 4096));
  p[7 * 4096 + 2] = 'R';
  p[2] = 'L';
  ASSERT_TRUE(f->Pwrite("W", 1, 6 * 4096 + 3).ok());  // shown in the right part
  EXPECT_EQ(p[6 * 4096 + 3], 'W');
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
  std::string got = Read(*f, 0, content.size());
  for (int pg = 0; pg < 8; pg++) EXPECT_EQ(got[pg * 4096 + 1], '0' + pg) << pg;
  EXPECT_EQ(got[2], 'L');
  EXPECT_EQ(got[7 * 4096 + 2], 'R');
  EXPECT_EQ(got[6 * 4096 + 3], 'W');
}

TEST_F(VirtualView, PrivateMapStoresStayPrivate) {
  auto f = Open("c", O_RDWR | O_CREAT);
  ASSERT_TRUE(f->Pwrite("private content", 15, 0).ok());
  auto m = f->Map(nullptr, 15, PROT_READ | PROT_WRITE, MAP_PRIVATE, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  EXPECT_EQ(std::string(p, 15), "private content");
  std::memcpy(p, "PRIVATE", 7);
  EXPECT_FALSE(engine_->HasViews());
  ASSERT_EQ(::munmap(p, 15), 0);
  EXPECT_EQ(Read(*f, 0, 15), "private content");
}

TEST_F(VirtualView, TruncateAtAdoptKeepsTheFormatForOtherHandles) {
  auto f = Open("d", O_RDWR | O_CREAT);
  std::string content(20000, 'd');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto reader = Open("d", O_RDONLY);
  auto w = Open("d", O_WRONLY | O_TRUNC);  // write-only, emptied by the engine
  ASSERT_TRUE(w && !w->KernelIsContent());
  EXPECT_EQ(*reader->Size(), 0u);
  ASSERT_TRUE(w->Pwrite("new", 3, 0).ok());
  EXPECT_EQ(Read(*reader, 0, 100), "new");
  std::string report;
  EXPECT_TRUE(CheckFile(dir_.File("d"), &report).ok()) << report;
}

TEST_F(VirtualView, SeekDataHoleAndFallocate) {
  auto f = Open("e", O_RDWR | O_CREAT);
  ASSERT_TRUE(f->Pwrite("x", 1, 3 * 4096 + 10).ok());
  EXPECT_EQ(*f->SeekData(0, false), 3u * 4096 + 0);  // at the block: the kernel's granularity
  EXPECT_EQ(*f->SeekData(0, true), 0u);
  EXPECT_EQ(*f->SeekData(3 * 4096 + 5, true), 3u * 4096 + 11);  // the end is a hole
  EXPECT_EQ(f->SeekData(3 * 4096 + 11, false).status().code(), ENXIO);
  ASSERT_TRUE(f->Fallocate(0, 0, 10 * 4096).ok());
  EXPECT_EQ(*f->Size(), 10u * 4096);
  ASSERT_TRUE(f->Fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 3 * 4096, 4096).ok());
  EXPECT_EQ(Read(*f, 3 * 4096 + 10, 1), std::string(1, '\0'));
  EXPECT_EQ(*f->Size(), 10u * 4096);
  EXPECT_EQ(f->Fallocate(FALLOC_FL_COLLAPSE_RANGE, 0, 4096).code(), EOPNOTSUPP);
}

TEST_F(VirtualView, ThreadsStoreAndWriteWhileAnotherSyncs) {
  // Concurrency of the view bookkeeping (run under TSan): one thread stores
  // through the map and syncs, one writes other bytes through the file.
  auto f = Open("g", O_RDWR | O_CREAT);
  std::string content(16 * 4096, '.');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  std::thread writer([&] {
    for (int i = 0; i < 200; i++) ASSERT_TRUE(f->Pwrite("w", 1, 8 * 4096 + static_cast<uint64_t>(i)).ok());
  });
  for (int i = 0; i < 200; i++) {
    __atomic_store_n(p + i, 's', __ATOMIC_RELAXED);
    ASSERT_TRUE(engine_->SyncViews(p, 4096).ok());
  }
  writer.join();
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
  std::string got = Read(*f, 0, content.size());
  EXPECT_EQ(got.substr(0, 200), std::string(200, 's'));
  EXPECT_EQ(got.substr(8 * 4096, 200), std::string(200, 'w'));
}

// By default a file's first maps are plain writable maps, compared whole
// at each write-back: the kernel may store into them directly (a recv, a
// read(2) made inside the C library, which the shim never sees) without the
// EFAULT a write-protected page would give; only later maps are tracked.
TEST_F(VirtualView, AFilesFirstMapsAreNotWriteProtected) {
  unsetenv("MAPFS_OVERLAY_TRACK_FROM");
  auto f = Open("few", O_RDWR | O_CREAT);
  std::string content(2 * 4096, '.');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  std::vector<char*> maps;
  for (size_t i = 0; i <= kUntrackedViews; i++) {
    auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
    ASSERT_TRUE(m.ok()) << m.status().message();
    maps.push_back(static_cast<char*>(*m));
  }
  for (size_t i = 0; i < kUntrackedViews; i++) EXPECT_EQ(Perms(maps[i]), "rw-s") << "map " << i;
  EXPECT_EQ(Perms(maps.back()), "r--s");  // the one past them: tracked
  int pfd[2];
  ASSERT_EQ(::pipe(pfd), 0);
  ASSERT_EQ(::write(pfd[1], "kernel", 6), 6);
  EXPECT_EQ(::read(pfd[0], maps[0] + 100, 6), 6) << strerror(errno);  // the kernel's store
  ::close(pfd[0]);
  ::close(pfd[1]);
  EXPECT_EQ(Read(*f, 100, 6), "kernel");
  maps.back()[4096 + 1] = 'x';  // through the tracked map: faults, marked
  EXPECT_EQ(Read(*f, 4096, 2), ".x");
  for (char* p : maps) {
    ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
    ASSERT_EQ(::munmap(p, content.size()), 0);
  }
  EXPECT_EQ(Read(*f, 100, 6) + Read(*f, 4096, 2), "kernel.x");
}

// Dirty tracking (vtrack.h): clean pages of a writable map are write-
// protected, the first store marks its page and makes it writable, a
// write-back re-arms the page, so stores after it are seen too.
TEST_F(VirtualView, StoresInSeveralPagesAreTrackedAndPagesRearmed) {
  auto f = Open("t", O_RDWR | O_CREAT);
  std::string content(6 * 4096, '.');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  EXPECT_EQ(Perms(p), "r--s");  // clean: write-protected
  EXPECT_EQ(Perms(p + 3 * 4096), "r--s");
  p[1 * 4096 + 5] = 'a';
  p[3 * 4096 + 7] = 'b';
  p[5 * 4096 + 4095] = 'c';
  EXPECT_EQ(Perms(p + 1 * 4096), "rw-s");  // dirty: the application's prot
  EXPECT_EQ(Perms(p + 2 * 4096), "r--s");
  EXPECT_EQ(Read(*f, 4096, 3 * 4096).substr(5, 1) + Read(*f, 3 * 4096 + 7, 1), "ab");
  EXPECT_EQ(Perms(p + 1 * 4096), "r--s");  // written back: re-armed
  // The same pages again, several times: each store after a write-back is
  // caught by the re-armed page.
  for (char c = 'A'; c <= 'E'; c++) {
    p[1 * 4096 + 5] = c;
    p[3 * 4096 + 7] = c;
    EXPECT_EQ(Read(*f, 4096 + 5, 1), std::string(1, c));
    ASSERT_TRUE(engine_->SyncViews(p, content.size()).ok());
    EXPECT_EQ(Read(*f, 3 * 4096 + 7, 1), std::string(1, c));
  }
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
  std::string got = Read(*f, 0, content.size());
  EXPECT_EQ(got[1 * 4096 + 5], 'E');
  EXPECT_EQ(got[3 * 4096 + 7], 'E');
  EXPECT_EQ(got[5 * 4096 + 4095], 'c');
  EXPECT_EQ(got[0], '.');
}

// The kernel's mappings of a tracked map: each isolated dirty page splits
// it in three, and a process has at most vm.max_map_count of them. Past
// Track::kMaxDirtyPages a fault gives the map up (writable whole, compared
// whole): stores still reach the file, and the map's range holds a few
// mappings, not thousands.
TEST_F(VirtualView, ScatteredStoresPastTheBudgetGiveTheMapUpNotTheMappings) {
  auto f = Open("budget", O_RDWR | O_CREAT);
  const size_t stores = static_cast<size_t>(Track::kMaxDirtyPages) + 16;
  const size_t len = (2 * stores + 2) * 4096;
  std::string zeros(len, '\0');
  ASSERT_TRUE(f->Pwrite(zeros.data(), zeros.size(), 0).ok());
  auto m = f->Map(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok()) << m.status().message();
  char* p = static_cast<char*>(*m);
  EXPECT_EQ(Perms(p + 4096), "r--s");
  for (size_t i = 0; i < stores; i++) p[2 * i * 4096 + 7] = static_cast<char>('a' + i % 26);
  EXPECT_LE(::mapfs::testing::CountVmas(p, len), 8);  // the kernel's mappings over the map's range
  EXPECT_EQ(Perms(p + 4096), "rw-s");  // given up: a page nobody stored to is writable
  std::string got = Read(*f, 0, len);
  for (size_t i = 0; i < stores; i++) ASSERT_EQ(got[2 * i * 4096 + 7], static_cast<char>('a' + i % 26)) << i;
  // Stores after the write-back still reach the file (compared whole).
  p[4096 + 9] = 'Z';
  EXPECT_EQ(Read(*f, 4096 + 9, 1), "Z");
  ASSERT_TRUE(engine_->UnmapViews(p, len).ok());
  ASSERT_EQ(::munmap(p, len), 0);
  // A later map is tracked again, from a fresh budget.
  auto m2 = f->Map(nullptr, 4 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m2.ok());
  char* q = static_cast<char*>(*m2);
  EXPECT_EQ(Perms(q), "r--s");
  q[5] = 'y';
  EXPECT_EQ(Perms(q), "rw-s");
  EXPECT_EQ(Perms(q + 4096), "r--s");
  EXPECT_EQ(Read(*f, 5, 1), "y");
  ASSERT_TRUE(engine_->UnmapViews(q, 4 * 4096).ok());
  ASSERT_EQ(::munmap(q, 4 * 4096), 0);
}

TEST_F(VirtualView, ApplicationMprotectToReadOnlyAndBack) {
  auto f = Open("mp", O_RDWR | O_CREAT);
  std::string content(4 * 4096, '.');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  p[10] = '1';  // page 0 dirty, not yet written back
  ASSERT_EQ(engine_->ProtectViews(p, content.size(), PROT_READ), 0);
  EXPECT_EQ(Perms(p), "r--s");
  EXPECT_EQ(Read(*f, 10, 1), "1");  // the store made before survives
  ASSERT_EQ(engine_->ProtectViews(p, content.size(), PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(Perms(p), "r--s");  // clean pages stay write-protected
  p[10] = '2';
  p[2 * 4096] = '3';
  EXPECT_EQ(Perms(p + 2 * 4096), "rw-s");
  // Part of the map only, with a dirty page in it: it keeps its stores.
  ASSERT_EQ(engine_->ProtectViews(p + 2 * 4096, 4096, PROT_READ), 0);
  EXPECT_EQ(Perms(p + 2 * 4096), "r--s");
  ASSERT_EQ(engine_->ProtectViews(p + 2 * 4096, 4096, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(Perms(p + 2 * 4096), "rw-s");  // still dirty: writable again
  p[2 * 4096 + 1] = '4';
  ASSERT_TRUE(engine_->SyncViews(p, content.size()).ok());
  EXPECT_EQ(Read(*f, 10, 1), "2");
  EXPECT_EQ(Read(*f, 2 * 4096, 2), "34");
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
}

// Write access is the description's: a shared map made through a read-only
// description cannot be made writable (EACCES, as the kernel answers, and
// nothing changed), one made through a read-write description can, and so
// can what is left of it after a partial unmap. With a protection key the
// pages get it and keep the tracking's protection.
TEST_F(VirtualView, MprotectToWritableFollowsTheDescriptionsAccess) {
  std::string content(3 * 4096, 'r');
  {
    auto w = Open("acc", O_RDWR | O_CREAT);
    ASSERT_TRUE(w->Pwrite(content.data(), content.size(), 0).ok());
  }
  auto ro = Open("acc", O_RDONLY);
  auto m = ro->Map(nullptr, content.size(), PROT_READ, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  EXPECT_EQ(engine_->ProtectViews(p, content.size(), PROT_READ | PROT_WRITE), EACCES);
  EXPECT_EQ(Perms(p), "r--s");
  EXPECT_EQ(engine_->ProtectViews(p, content.size(), PROT_READ), 0);
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);

  auto rw = Open("acc", O_RDWR);
  m = rw->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  p = static_cast<char*>(*m);
  ASSERT_TRUE(engine_->UnmapViews(p, 4096).ok());  // the first page goes: the rest is a view of its own
  ASSERT_EQ(::munmap(p, 4096), 0);
  ASSERT_EQ(engine_->ProtectViews(p + 4096, 2 * 4096, PROT_READ), 0);
  ASSERT_EQ(engine_->ProtectViews(p + 4096, 2 * 4096, PROT_READ | PROT_WRITE), 0);
  int key = pkey_alloc(0, 0);
  if (key >= 0) {
    ASSERT_EQ(engine_->ProtectViews(p + 4096, 2 * 4096, PROT_READ | PROT_WRITE, key), 0);
    EXPECT_EQ(Perms(p + 4096), "r--s");  // clean: still write-protected, now with the key
  }
  p[4096 + 3] = 'W';  // tracked as before
  EXPECT_EQ(Read(*rw, 4096 + 3, 1), "W");
  ASSERT_TRUE(engine_->UnmapViews(p + 4096, 2 * 4096).ok());
  ASSERT_EQ(::munmap(p + 4096, 2 * 4096), 0);
  if (key >= 0) pkey_free(key);
}

TEST_F(VirtualView, StoresRacingReadsOfOtherThreadsAreNeverLost) {
  // Each thread stores a counter into its own bytes of the same pages and
  // reads it back through the file (read-your-writes), while the others'
  // reads write the pages back, clearing and re-arming them: a store
  // landing between a write-back's clear and its protect, or a fault
  // served meanwhile, must still be seen.
  auto f = Open("race", O_RDWR | O_CREAT);
  std::string content(4 * 4096, '\0');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  constexpr int kThreads = 4, kRounds = 2000;
  std::atomic<int> lost{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      for (int i = 1; i <= kRounds; i++) {
        size_t at = static_cast<size_t>((i % 4) * 4096 + t * 8);
        char v = static_cast<char>(1 + (i + t) % 250);
        __atomic_store_n(p + at, v, __ATOMIC_RELAXED);
        char back = 0;
        auto r = f->Pread(&back, 1, at);
        if (!r.ok() || back != v) lost++;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(lost.load(), 0);
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
}

TEST_F(VirtualView, KernelStoresIntoAMapArePreparedFor) {
  // A kernel copy into a write-protected page fails with EFAULT (it does
  // not fault): the shim prepares the buffer of a read(2) it passes on.
  auto f = Open("k", O_RDWR | O_CREAT);
  std::string content(3 * 4096, '.');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "PIPE", 4), 4);
  engine_->PrepareKernelStores(p + 4096 + 10, 4);
  EXPECT_EQ(Perms(p + 4096), "rw-s");
  EXPECT_EQ(::read(fds[0], p + 4096 + 10, 4), 4);
  EXPECT_EQ(Read(*f, 4096 + 10, 4), "PIPE");
  ::close(fds[0]);
  ::close(fds[1]);
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
}

TEST_F(VirtualView, TruncateZeroesTheMapAndStoresPastTheEndAreDropped) {
  auto f = Open("tr", O_RDWR | O_CREAT);
  std::string content(40 * 4096, 'x');  // large enough that whole pages are released
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  p[30 * 4096] = 'S';  // written back by the truncate, then cut
  ASSERT_TRUE(f->Truncate(5000).ok());
  EXPECT_EQ(p[4999], 'x');
  EXPECT_EQ(p[5000], '\0');  // the partial page
  EXPECT_EQ(p[8191], '\0');
  EXPECT_EQ(p[20 * 4096], '\0');  // released pages read zeros
  EXPECT_EQ(p[30 * 4096], '\0');
  p[100] = 'Y';
  p[6000] = 'P';       // past the end in the last page
  p[25 * 4096] = 'Z';  // past the end, a whole page
  ASSERT_TRUE(engine_->SyncViews(p, content.size()).ok());
  EXPECT_EQ(*f->Size(), 5000u);
  EXPECT_EQ(Read(*f, 100, 1), "Y");
  // Grown again: what was stored past the end is not the file's.
  ASSERT_TRUE(f->Truncate(content.size()).ok());
  EXPECT_EQ(Read(*f, 6000, 1), std::string(1, '\0'));
  EXPECT_EQ(Read(*f, 25 * 4096, 1), std::string(1, '\0'));
  EXPECT_EQ(Read(*f, 30 * 4096, 1), std::string(1, '\0'));
  // A store into the grown part reaches the file.
  p[26 * 4096] = 'G';
  EXPECT_EQ(Read(*f, 26 * 4096, 1), "G");
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
}

// A shared map made through a read-only description keeps no twin (it can
// never be stored into): it still shows the process's writes and
// truncates, through partial unmaps and after a fork, and a read-only
// descriptor's read never writes anything back.
TEST_F(VirtualView, ReadOnlyMapsFollowWritesWithoutATwin) {
  auto rw = Open("rv", O_RDWR | O_CREAT);
  std::string content(40 * 4096, 'o');
  ASSERT_TRUE(rw->Pwrite(content.data(), content.size(), 0).ok());
  auto ro = Open("rv", O_RDONLY);
  auto m = ro->Map(nullptr, content.size(), PROT_READ, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok()) << m.status().message();
  char* p = static_cast<char*>(*m);
  EXPECT_EQ(std::string(p, content.size()), content);
  ASSERT_TRUE(rw->Pwrite("AB", 2, 4095).ok());  // across two pages
  EXPECT_EQ(std::string(p + 4095, 2), "AB");
  // Cut pages 10..11: both sides follow later writes.
  ASSERT_TRUE(engine_->UnmapViews(p + 10 * 4096, 2 * 4096).ok());
  ASSERT_EQ(::munmap(p + 10 * 4096, 2 * 4096), 0);
  ASSERT_TRUE(rw->Pwrite("L", 1, 9 * 4096).ok());
  ASSERT_TRUE(rw->Pwrite("R", 1, 30 * 4096).ok());
  EXPECT_EQ(p[9 * 4096], 'L');
  EXPECT_EQ(p[30 * 4096], 'R');
  // A fork child's write shows in the shared pages; the parent's read
  // through the read-only descriptor returns the file's bytes and writes
  // nothing back.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(rw->Pwrite("C", 1, 20 * 4096).ok() && p[20 * 4096] == 'C' ? 0 : 1);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ(p[20 * 4096], 'C');
  EXPECT_EQ(Read(*ro, 20 * 4096, 1), "C");
  EXPECT_EQ(Read(*ro, 0, 4), "oooo");
  // A truncate zeroes both pieces past the new end (whole pages released).
  ASSERT_TRUE(rw->Truncate(5000).ok());
  EXPECT_EQ(p[4096], 'B');
  EXPECT_EQ(p[5000], '\0');
  EXPECT_EQ(p[9 * 4096], '\0');
  EXPECT_EQ(p[30 * 4096], '\0');
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
  EXPECT_FALSE(engine_->HasViews());
  EXPECT_EQ(*rw->Size(), 5000u);

  // What a read-only map costs: its copy, and no private twin of it.
  std::string big(8 << 20, 'b');
  ASSERT_TRUE(rw->Pwrite(big.data(), big.size(), 0).ok());
  long before = AnonymousKb();
  m = ro->Map(nullptr, big.size(), PROT_READ, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  long after = AnonymousKb();
  ASSERT_GE(before, 0);
  EXPECT_LT(after - before, 2048) << "KiB of private memory for an 8 MiB read-only map";
  p = static_cast<char*>(*m);
  EXPECT_EQ(p[(8 << 20) - 1], 'b');
  ASSERT_TRUE(engine_->UnmapViews(p, big.size()).ok());
  ASSERT_EQ(::munmap(p, big.size()), 0);
}

// The memory of a read-only map unmapped whole is reused for the next
// one (vview.h, spare aliases): the new map shows its own file only, with
// zeros in its holes and past its end, never the former map's bytes; and
// memory shared with a fork child is never reused while the child may
// still see it.
TEST_F(VirtualView, AReusedReadOnlyMapShowsOnlyItsOwnFile) {
  const size_t big = 40 * 4096, small = 36 * 4096 + 100;  // the second fits the first's memory
  {
    auto a = Open("ra", O_RDWR | O_CREAT);
    std::string ca(big, 'a');
    ASSERT_TRUE(a->Pwrite(ca.data(), ca.size(), 0).ok());
    auto b = Open("rb", O_RDWR | O_CREAT);
    std::string cb(small, 'b');
    ASSERT_TRUE(b->Pwrite(cb.data(), 4096, 0).ok());                   // page 0
    ASSERT_TRUE(b->Pwrite(cb.data(), small - 8 * 4096, 8 * 4096).ok());  // a hole at pages 1..7
  }
  auto ra = Open("ra", O_RDONLY);
  auto m = ra->Map(nullptr, big, PROT_READ, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  EXPECT_EQ(p[big - 1], 'a');
  ASSERT_TRUE(engine_->UnmapViews(p, big).ok());
  ASSERT_EQ(::munmap(p, big), 0);
  auto rb = Open("rb", O_RDONLY);
  const size_t L = 37 * 4096;
  m = rb->Map(nullptr, small, PROT_READ, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  p = static_cast<char*>(*m);
  std::string want(L, '\0');
  std::memset(want.data(), 'b', 4096);
  std::memset(want.data() + 8 * 4096, 'b', small - 8 * 4096);
  EXPECT_EQ(std::string(p, L), want);
  EXPECT_EQ(Perms(p), "r--s");
  // It still follows the process's writes.
  auto wb = Open("rb", O_RDWR);
  ASSERT_TRUE(wb->Pwrite("NEW", 3, 2 * 4096).ok());
  EXPECT_EQ(std::string(p + 2 * 4096, 3), "NEW");

  // The shim forgets a view before the kernel unmaps it (munmap), and a
  // MAP_FIXED map forgets the views it replaces before its own mapping
  // exists: until the application's map is gone, its memory is not reused.
  {
    auto m1 = ra->Map(nullptr, small, PROT_READ, MAP_SHARED, 0);
    ASSERT_TRUE(m1.ok());
    char* a1 = static_cast<char*>(*m1);
    ASSERT_TRUE(engine_->UnmapViews(a1, small).ok());  // its munmap has not happened (yet)
    auto m2 = rb->Map(nullptr, small, PROT_READ, MAP_SHARED, 0);
    ASSERT_TRUE(m2.ok());
    EXPECT_EQ(a1[0], 'a') << "a map the application still holds shows another file";
    EXPECT_EQ(static_cast<char*>(*m2)[0], 'b');
    ASSERT_TRUE(engine_->UnmapViews(*m2, small).ok());
    ASSERT_EQ(::munmap(*m2, small), 0);
    ASSERT_EQ(::munmap(a1, small), 0);
  }

  // A fork child holds the map: after the parent unmaps it, another map
  // must not reuse its memory (the child would see that file instead).
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char c = 0;
    (void)!::write(ready[1], "r", 1);
    (void)!::read(done[0], &c, 1);
    bool same = std::memcmp(p, "bbbb", 4) == 0 && std::memcmp(p + 2 * 4096, "NEW", 3) == 0;
    ::_exit(same ? 0 : 1);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_TRUE(engine_->UnmapViews(p, small).ok());
  ASSERT_EQ(::munmap(p, small), 0);
  auto m2 = ra->Map(nullptr, small, PROT_READ, MAP_SHARED, 0);  // a size the memory would fit
  ASSERT_TRUE(m2.ok());
  char* q = static_cast<char*>(*m2);
  EXPECT_EQ(q[0], 'a');
  ASSERT_EQ(::write(done[1], "d", 1), 1);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the child's map changed under it: " << st;
  ASSERT_TRUE(engine_->UnmapViews(q, small).ok());
  ASSERT_EQ(::munmap(q, small), 0);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
}

TEST_F(VirtualView, AForkChildsStoresReachTheFile) {
  auto f = Open("fk", O_RDWR | O_CREAT);
  std::string content(3 * 4096, '.');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  p[0] = 'P';  // dirty in the parent before the fork
  EXPECT_EQ(Read(*f, 0, 1), "P");
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child's stores go to the shared pages; only the parent writes back.
    p[2 * 4096 + 7] = 'C';
    p[0] = 'Q';
    ::_exit(0);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ(Read(*f, 2 * 4096 + 7, 1), "C");
  EXPECT_EQ(Read(*f, 0, 1), "Q");
  p[4096] = 'R';  // the parent's own stores after the fork too
  EXPECT_EQ(Read(*f, 4096, 1), "R");
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
}

TEST_F(VirtualView, MapsBeyondTheTrackingTableAreComparedWhole) {
  auto f = Open("many", O_RDWR | O_CREAT);
  ASSERT_TRUE(f->Pwrite("0123456789", 10, 0).ok());
  std::vector<char*> maps;
  for (size_t i = 0; i < Track::kSlots + 4; i++) {
    auto m = f->Map(nullptr, 10, PROT_READ | PROT_WRITE, MAP_SHARED, 0);
    ASSERT_TRUE(m.ok()) << i << ": " << m.status().message();
    maps.push_back(static_cast<char*>(*m));
  }
  EXPECT_EQ(Perms(maps.front()), "r--s");  // tracked: clean
  EXPECT_EQ(Perms(maps.back()), "rw-s");   // untracked: writable from the start
  maps.back()[3] = 'U';
  EXPECT_EQ(Read(*f, 3, 1), "U");
  maps.front()[4] = 'T';
  EXPECT_EQ(Read(*f, 4, 1), "T");
  for (char* m : maps) {
    ASSERT_TRUE(engine_->UnmapViews(m, 10).ok());
    ASSERT_EQ(::munmap(m, 10), 0);
  }
  EXPECT_EQ(Read(*f, 0, 10), "012UT56789");
}

// The program's own SIGSEGV handler (installed before mapfs's, which then
// passes it what is not mapfs's) still gets the faults on its own memory
// and on a map it made read-only, never the ones dirty tracking serves.
sigjmp_buf g_jump;
std::atomic<int> g_program_faults{0};
void* g_fault_addr = nullptr;
void ProgramHandler(int, siginfo_t* info, void*) {
  g_program_faults++;
  g_fault_addr = info->si_addr;
  siglongjmp(g_jump, 1);
}

TEST_F(VirtualView, TheProgramsOwnFaultsStillReachItsHandler) {
  // Installed as the shim installs a program's action: into the program's
  // view once mapfs's handler holds the signal (an earlier test in this
  // process made a writable map), else in the kernel (recorded then).
  g_program_faults = 0;
  vm::KernelSigaction act{reinterpret_cast<uintptr_t>(&ProgramHandler), SA_SIGINFO, 0, 0}, old{};
  ASSERT_EQ(vm::ProgramSigaction(SIGSEGV, &act, &old, false), 0);
  auto f = Open("sig", O_RDWR | O_CREAT);
  std::string content(2 * 4096, '.');
  ASSERT_TRUE(f->Pwrite(content.data(), content.size(), 0).ok());
  auto m = f->Map(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  volatile char* vp = p;
  vp[5] = 'w';  // served by mapfs: not the program's
  EXPECT_EQ(g_program_faults.load(), 0);
  auto* ro = static_cast<char*>(::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(ro, MAP_FAILED);
  if (sigsetjmp(g_jump, 1) == 0) *static_cast<volatile char*>(ro) = 1;
  EXPECT_EQ(g_program_faults.load(), 1);
  EXPECT_EQ(g_fault_addr, ro);
  // The program made the view read-only: its store is its own fault.
  ASSERT_EQ(engine_->ProtectViews(p, content.size(), PROT_READ), 0);
  if (sigsetjmp(g_jump, 1) == 0) vp[4096 + 1] = 'x';
  EXPECT_EQ(g_program_faults.load(), 2);
  EXPECT_EQ(g_fault_addr, p + 4096 + 1);
  ASSERT_EQ(engine_->ProtectViews(p, content.size(), PROT_READ | PROT_WRITE), 0);
  vp[4096 + 1] = 'y';
  EXPECT_EQ(g_program_faults.load(), 2);
  EXPECT_EQ(Read(*f, 4096 + 1, 1), "y");
  EXPECT_EQ(Read(*f, 5, 1), "w");
  ::munmap(ro, 4096);
  ASSERT_TRUE(engine_->UnmapViews(p, content.size()).ok());
  ASSERT_EQ(::munmap(p, content.size()), 0);
  vm::ProgramSigaction(SIGSEGV, &old, nullptr, false);
}


// Writes racing the fill of a new map (issue 15): the map is a copy, filled
// from the file and then added to the file's views, and a write whose
// commit lands in between must still reach it. Each round one thread
// writes counters into slots spread over the range while this one maps it
// several times (through a read-only description, reusing the memory of
// the last round's read-only maps; through a read-write one, with a twin;
// writable and tracked) and cuts a page out of the first (the pieces must
// go on following writes); once the writer has stopped, every map must
// equal the file exactly.
TEST_F(VirtualView, WritesRacingTheFillOfAMapReachIt) {
  auto rw = Open("wm", O_RDWR | O_CREAT);
  auto ro = Open("wm", O_RDONLY);
  ASSERT_TRUE(rw && ro);
  const size_t len = 4 * 4096;
  std::string zeros(len, '\0');
  ASSERT_TRUE(rw->Pwrite(zeros.data(), len, 0).ok());
  constexpr int kRounds = 300, kMaps = 4;
  constexpr uint64_t kSlots = 61;  // 8-byte slots 264 bytes apart: all four pages
  uint64_t k = 0;
  int stale = 0;
  std::atomic<int> failed{0};
  for (int r = 0; r < kRounds; r++) {
    std::atomic<bool> stop{false};
    std::thread writer([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        k++;
        if (!rw->Pwrite(&k, sizeof k, (k % kSlots) * 264).ok()) failed++;
      }
    });
    std::vector<char*> maps;
    for (int i = 0; i < kMaps; i++) {
      int kind = (r + i) % 3;
      auto m = (kind == 0 ? *ro : *rw).Map(nullptr, len, kind == 2 ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, 0);
      if (m.ok()) maps.push_back(static_cast<char*>(*m));
      else failed++;
    }
    ASSERT_FALSE(maps.empty());
    char* cut = maps[0];  // page 1 unmapped while the writer runs
    ASSERT_TRUE(engine_->UnmapViews(cut + 4096, 4096).ok());
    ASSERT_EQ(::munmap(cut + 4096, 4096), 0);
    stop = true;
    writer.join();
    std::string file = Read(*rw, 0, len);
    for (char* p : maps) {
      if (p == cut) {
        if (std::string(p, 4096) != file.substr(0, 4096) || std::string(p + 8192, 8192) != file.substr(8192)) stale++;
        for (char* piece : {p, p + 8192}) {
          ASSERT_TRUE(engine_->UnmapViews(piece, piece == p ? 4096 : 8192).ok());
          ASSERT_EQ(::munmap(piece, piece == p ? 4096 : 8192), 0);
        }
        continue;
      }
      if (std::string(p, len) != file) stale++;
      ASSERT_TRUE(engine_->UnmapViews(p, len).ok());
      ASSERT_EQ(::munmap(p, len), 0);
    }
  }
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(stale, 0) << "maps missing a write that raced their fill, of " << kRounds * kMaps;
}

// A write that fails commits nothing, and its bytes must not show in the
// maps either (a failed write still tells the views, which then reload the
// file's bytes, never the caller's).
TEST_F(VirtualView, AFailedWriteLeavesTheMapsAsTheFile) {
  auto rw = Open("fw", O_RDWR | O_CREAT);
  ASSERT_TRUE(rw);
  ASSERT_TRUE(rw->Pwrite("file", 4, 0).ok());
  for (int prot : {PROT_READ, PROT_READ | PROT_WRITE}) {
    auto m = rw->Map(nullptr, 4096, prot, MAP_SHARED, 0);
    ASSERT_TRUE(m.ok());
    char* p = static_cast<char*>(*m);
    // Past the block table (EFBIG, refused before the buffer is read: only
    // the bytes over the map could be copied from it).
    std::string fail(4096, 'F');
    EXPECT_EQ(rw->Pwrite(fail.data(), uint64_t{1} << 40, 0).status().code(), EFBIG);
    EXPECT_EQ(rw->Truncate(uint64_t{1} << 40).code(), EFBIG);
    EXPECT_EQ(std::string(p, 8), std::string("file\0\0\0\0", 8));
    EXPECT_EQ(Read(*rw, 0, 8), "file");
    ASSERT_TRUE(engine_->UnmapViews(p, 4096).ok());
    ASSERT_EQ(::munmap(p, 4096), 0);
  }
}

// The kernel leaves a map's stores alone when a write fails: a failed
// write or append (EFBIG, refused before anything is committed) must not
// reload the bytes the application stored into and has not written back.
// A map that is tracked and one compared whole.
TEST_F(VirtualView, AFailedWriteKeepsTheStoresInTheMaps) {
  auto rw = Open("fs", O_RDWR | O_CREAT);
  ASSERT_TRUE(rw);
  const std::string init(8192, 'a');
  const std::string fail(4096, 'F');
  for (const char* track_from : {"0", "100"}) {
    setenv("MAPFS_OVERLAY_TRACK_FROM", track_from, 1);
    ASSERT_TRUE(rw->Pwrite(init.data(), init.size(), 0).ok());
    auto m = rw->Map(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, 0);
    ASSERT_TRUE(m.ok());
    char* p = static_cast<char*>(*m);
    p[10] = 'S';
    p[5000] = 'T';
    EXPECT_EQ(rw->Pwrite(fail.data(), uint64_t{1} << 40, 0).status().code(), EFBIG);
    EXPECT_EQ(p[10], 'S') << track_from;
    EXPECT_EQ(rw->Append(fail.data(), size_t{1} << 40).status().code(), EFBIG);
    EXPECT_EQ(p[10], 'S') << track_from;
    EXPECT_EQ(p[5000], 'T') << track_from;
    ASSERT_TRUE(engine_->SyncViews(p, 8192).ok());
    EXPECT_EQ(Read(*rw, 10, 1), "S") << track_from;
    EXPECT_EQ(Read(*rw, 5000, 1), "T") << track_from;
    EXPECT_EQ(Read(*rw, 11, 4), "aaaa") << track_from;
    ASSERT_TRUE(engine_->UnmapViews(p, 8192).ok());
    ASSERT_EQ(::munmap(p, 8192), 0);
  }
  setenv("MAPFS_OVERLAY_TRACK_FROM", "0", 1);
}

// The reads of a reload (SetReloadReadForTest): the first returns
// one page, the next ones fail (a medium failing part-way).
std::atomic<int> reload_reads{0};
Result<size_t> PageThenFail(VFile& f, void* buf, size_t n, uint64_t off) {
  if (reload_reads++ > 0) return Status::Error(EIO, "test: the medium fails");
  return f.Pread(buf, std::min<size_t>(n, 4096), off);
}

// A reload whose read of the file fails part-way must leave alias and twin
// alike: a twin holding part of the file's newer content while the alias
// keeps the older would have the next write-back write the older bytes
// over the file. Here another process changed the file (this map is a
// snapshot for it), then a failed write's reload fails after one page.
TEST_F(VirtualView, AFailedReloadWritesNoOldBytesBack) {
  auto rw = Open("fr", O_RDWR | O_CREAT);
  ASSERT_TRUE(rw);
  const std::string init(8192, 'a');
  ASSERT_TRUE(rw->Pwrite(init.data(), init.size(), 0).ok());
  auto m = rw->Map(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok());
  char* p = static_cast<char*>(*m);
  {
    auto other = NewVirtualEngine(Options{dir_.path(), EngineKind::kVirtual, Mode::kPosix});
    ASSERT_TRUE(other.ok());
    int fd = ::open(dir_.File("fr").c_str(), O_RDWR | O_CLOEXEC);
    auto g = (*other)->Adopt(fd, O_RDWR);
    ASSERT_TRUE(g.ok());
    const std::string b(8192, 'b');
    ASSERT_TRUE((*g)->Pwrite(b.data(), b.size(), 0).ok());
    ASSERT_TRUE((*g)->Close().ok());
  }
  p[100] = 'S';  // its page is written back (compared with the twin)
  reload_reads = 0;
  SetReloadReadForTest(&PageThenFail);
  const std::string fail(4096, 'F');
  EXPECT_EQ(rw->Pwrite(fail.data(), uint64_t{1} << 40, 0).status().code(), EFBIG);
  SetReloadReadForTest(nullptr);
  EXPECT_GE(reload_reads.load(), 2);  // the reload read, and failed
  ASSERT_TRUE(engine_->SyncViews(p, 8192).ok());
  std::string want(8192, 'b');
  want[100] = 'S';
  const std::string got = Read(*rw, 0, 8192);
  auto diff = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
  EXPECT_TRUE(got == want) << "first difference at byte " << (diff.first - got.begin());
  ASSERT_TRUE(engine_->UnmapViews(p, 8192).ok());
  ASSERT_EQ(::munmap(p, 8192), 0);
}

// A fork child does not have the parent's other threads: their writes in
// flight at the fork never end there and must not keep every write of the
// child from being alone (each would then read the file back).
TEST_F(VirtualView, AForkChildForgetsTheParentsWritesInFlight) {
  ViewList list;
  (void)list.Begin();  // another thread's write, in flight at the fork
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(list.Begin().alone ? 0 : 1);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the child's write is not alone";
  EXPECT_FALSE(list.Begin().alone);  // in the parent the other write is still in flight
}

// Three threads writing the same bytes (and one of them truncating): their
// commits are ordered, and the maps must end with the last one, as the
// file does — not with whichever thread updated the maps last. Each round
// every thread writes once, together; then the maps must equal the file.
TEST_F(VirtualView, ConcurrentWritesToTheSameBytesLeaveTheMapsAsTheFile) {
  // Sync mode: each write's fdatasync after its commit widens the window
  // in which another thread's commit and map update can overtake it.
  auto e = NewVirtualEngine(Options{dir_.path(), EngineKind::kVirtual, Mode::kSync});
  ASSERT_TRUE(e.ok());
  engine_ = std::move(*e);
  auto rw = Open("ww", O_RDWR | O_CREAT);
  auto ro = Open("ww", O_RDONLY);
  ASSERT_TRUE(rw && ro);
  const size_t len = 2 * 4096;
  std::string init(len, '.');
  ASSERT_TRUE(rw->Pwrite(init.data(), len, 0).ok());
  auto m1 = ro->Map(nullptr, len, PROT_READ, MAP_SHARED, 0);
  auto m2 = rw->Map(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, 0);
  ASSERT_TRUE(m1.ok() && m2.ok());
  char* maps[] = {static_cast<char*>(*m1), static_cast<char*>(*m2)};
#if defined(__SANITIZE_THREAD__)
  constexpr int kRounds = 8000;  // TSan (25 s for 40,000) judges the threads' accesses, not the outcome
#else
  constexpr int kRounds = 40000;
#endif
  std::atomic<int> go{0}, done{0}, failed{0};
  auto run = [&](int t) {
    std::string buf(300, '\0');
    for (int r = 1; r <= kRounds; r++) {
      while (go.load() < r) std::this_thread::yield();
      std::memset(buf.data(), 'A' + t * 26 + r % 26, buf.size());
      bool ok = t == 1 && r % 8 == 0 ? rw->Truncate(4096 + 150).ok()
                                     : rw->Pwrite(buf.data(), buf.size(), 4096 - 100 + t * 50).ok();
      if (!ok) failed++;
      done++;
    }
  };
  std::thread a(run, 0), b(run, 1), c(run, 2);
  int stale = 0;
  for (int r = 1; r <= kRounds; r++) {
    go = r;
    while (done.load() < 3 * r) std::this_thread::yield();
    std::string file = Read(*rw, 0, len);
    file.resize(len, '\0');  // a map reads zeros past the end
    for (char* p : maps)
      if (std::string(p, len) != file) stale++;
  }
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(stale, 0) << "map checks that differed from the file, of " << 2 * kRounds;  // (two maps)
  for (char* p : maps) {
    ASSERT_TRUE(engine_->UnmapViews(p, len).ok());
    ASSERT_EQ(::munmap(p, len), 0);
  }
}

}  // namespace
}  // namespace mapfs::overlay::vrt::testing
