// Maps of virtualized files through the engine (overlay/virtual/vview.h):
// what the shim's mmap, msync and munmap rely on, and the engine's side of
// O_TRUNC, write-only opens, SEEK_DATA/HOLE and fallocate.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "overlay/virtual/virtual_engine.h"
#include "virtual_test_util.h"

namespace mapfs::overlay::vrt::testing {
namespace {

class VirtualView : public ::testing::Test {
 protected:
  void SetUp() override {
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

}  // namespace
}  // namespace mapfs::overlay::vrt::testing
