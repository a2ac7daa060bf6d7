// The virtual engine against a model: random writes, appends, truncates
// and reads of one virtualized file compared with a std::string, across
// log wrap-arounds, checkpoints and reopenings; and the Engine interface
// (creation formats, plain files stay plain, FixStat).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <dirent.h>

#include "virtual_test_util.h"

namespace mapfs::overlay::vrt::testing {
namespace {

std::string ReadAll(VFile& f) {
  auto size = f.Size();
  EXPECT_TRUE(size.ok());
  std::string out(*size, '\0');
  auto r = f.Pread(out.data(), out.size(), 0);
  EXPECT_TRUE(r.ok()) << r.status().message();
  out.resize(r.ok() ? *r : 0);
  return out;
}

void ModelWrite(std::string& m, uint64_t off, const std::string& data) {
  if (m.size() < off + data.size()) m.resize(off + data.size(), '\0');
  m.replace(off, data.size(), data);
}

std::string Pattern(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

TEST(VirtualModel, RandomOpsMatchModelAcrossReopens) {
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path));
  std::mt19937_64 rng(15);
  std::string model;
  auto f = OpenVirtual(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  for (int op = 0; op < 3000; op++) {
    int kind = static_cast<int>(rng() % 10);
    if (kind < 5) {
      uint64_t off = rng() % 300000;
      size_t n = 1 + rng() % (rng() % 4 == 0 ? 20000 : 5000);
      std::string d = Pattern(rng, n);
      auto w = (*f)->Pwrite(d.data(), d.size(), off);
      ASSERT_TRUE(w.ok()) << w.status().message();
      ASSERT_EQ(*w, n);
      ModelWrite(model, off, d);
    } else if (kind < 7) {
      std::string d = Pattern(rng, 1 + rng() % 6000);
      auto a = (*f)->Append(d.data(), d.size());
      ASSERT_TRUE(a.ok()) << a.status().message();
      ASSERT_EQ(*a, model.size());
      model += d;
    } else if (kind < 8) {
      uint64_t size = rng() % 320000;
      ASSERT_TRUE((*f)->Truncate(size).ok());
      model.resize(size, '\0');
    } else {
      uint64_t off = rng() % 330000;
      size_t n = rng() % 12000;
      std::string got(n, '\0');
      auto r = (*f)->Pread(got.data(), n, off);
      ASSERT_TRUE(r.ok());
      size_t want = off >= model.size() ? 0 : std::min<size_t>(n, model.size() - off);
      ASSERT_EQ(*r, want) << "op " << op;
      if (want > 0) {
        ASSERT_EQ(got.substr(0, want), model.substr(off, want)) << "op " << op;
      }
    }
    auto size = (*f)->Size();
    ASSERT_TRUE(size.ok());
    ASSERT_EQ(*size, model.size()) << "op " << op;
    if (op % 500 == 499) {
      // Reopen: the checkpointed table plus the replayed log is the content.
      f = OpenVirtual(path);
      ASSERT_TRUE(f.ok()) << f.status().message();
      ASSERT_EQ(ReadAll(**f), model);
      std::string report;
      Status c = CheckFile(path, &report);
      ASSERT_TRUE(c.ok()) << c.message();
    }
  }
  ASSERT_EQ(ReadAll(**f), model);
}

TEST(VirtualModel, TruncateZeroesTheTailOfAPartialBlock) {
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path));
  auto f = OpenVirtual(path);
  ASSERT_TRUE(f.ok());
  std::string d(10000, 'x');
  ASSERT_TRUE((*f)->Pwrite(d.data(), d.size(), 0).ok());
  ASSERT_TRUE((*f)->Truncate(5000).ok());
  ASSERT_TRUE((*f)->Truncate(9000).ok());
  std::string want = std::string(5000, 'x') + std::string(4000, '\0');
  ASSERT_EQ(ReadAll(**f), want);
}

TEST(VirtualModel, OverwritesReuseBlocksAfterGc) {
  // Copy-on-write must not grow the file without bound: the GC frees
  // superseded blocks for reuse.
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path));
  auto f = OpenVirtual(path);
  ASSERT_TRUE(f.ok());
  std::string d(64 * 1024, 'y');
  for (int i = 0; i < 2000; i++) ASSERT_TRUE((*f)->Pwrite(d.data(), d.size(), 0).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  const uint64_t meta = uint64_t{(*f)->header().data_start} * 4096;
  EXPECT_LT(static_cast<uint64_t>(st.st_size), meta + 8 * 1024 * 1024) << "2000 x 64 KiB overwrites";
}

TEST(VirtualModel, RewritesReuseSupersededBlocksBeforeTheFileGrows) {
  // A 4 MiB file rewritten whole, then block by block, with a log large
  // enough that the checkpoint at half the ring never comes: copy-on-write
  // must still not take twice the content from the kernel (each page of it
  // costs an allocation and a zeroing; docs/OVERLAY.md "Growth"). Blocks
  // superseded since the last checkpoint are reused before the file grows.
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path, FormatOptions{16384, 1u << 16, 1u << 18}));
  auto f = OpenVirtual(path, true, Mode::kPosix);
  ASSERT_TRUE(f.ok());
  const uint64_t content = 4 << 20;
  std::string d(content, 'a');
  ASSERT_TRUE((*f)->Pwrite(d.data(), content, 0).ok());
  std::string b(content, 'b');
  ASSERT_TRUE((*f)->Pwrite(b.data(), content, 0).ok());
  std::string c(4096, 'c');
  for (uint64_t off = 0; off < content; off += 4096) {
    ASSERT_TRUE((*f)->Pwrite(c.data(), c.size(), off).ok());
    std::memcpy(b.data() + off, c.data(), c.size());
  }
  ASSERT_EQ(ReadAll(**f), b);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  // Allocated bytes past the metadata: the content and at most half more
  // (a 1 MiB commit needs its fresh blocks before it supersedes any; growth
  // steps of an eighth; record blocks), where growing before reusing took
  // three times the content (12 MiB, no checkpoint on the way).
  const uint64_t meta = uint64_t{(*f)->header().data_start} * 4096;
  EXPECT_LE(static_cast<uint64_t>(st.st_size), meta + content + content / 2);
  EXPECT_LE(static_cast<uint64_t>(st.st_blocks) * 512, meta + content + content / 2);
  f->reset();
  std::string report;
  EXPECT_TRUE(CheckFile(path, &report).ok()) << report;
}

TEST(VirtualModel, ALargeWriteOverScatteredFreeBlocksGrowsInsteadOfFailing) {
  // Free space made of single blocks only: every other block of the file
  // rewritten (the new copies fill the slack growth left), the slack then
  // used up exactly by an append, and a GC frees the old copies. A 1 MiB
  // commit then finds 256 pieces, more runs than one commit records: it
  // must take fresh space past the end, not fail with ENOSPC.
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path, FormatOptions{16384, 1u << 16, 1u << 18}));
  auto f = OpenVirtual(path, true, Mode::kPosix);
  ASSERT_TRUE(f.ok());
  const uint64_t blocks = 1025;  // growth doubles to 2048: ~1023 blocks of slack
  std::string model(blocks * 4096, 'a');
  ASSERT_TRUE((*f)->Pwrite(model.data(), model.size(), 0).ok());
  std::string c(4096, 'b');
  for (uint64_t b = 0; b < blocks; b += 2) {
    ASSERT_TRUE((*f)->Pwrite(c.data(), c.size(), b * 4096).ok());
    std::memcpy(model.data() + b * 4096, c.data(), c.size());
  }
  const uint64_t data_start = (*f)->header().data_start;
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  const uint64_t used = blocks + (blocks + 1) / 2;  // the content and the superseded copies
  const uint64_t phys = static_cast<uint64_t>(st.st_size) / 4096 - data_start;
  ASSERT_GT(phys, used) << "no slack left to use up";
  std::string fill((phys - used) * 4096, 'f');
  ASSERT_TRUE((*f)->Pwrite(fill.data(), fill.size(), model.size()).ok());
  model += fill;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  ASSERT_EQ(static_cast<uint64_t>(st.st_size) / 4096 - data_start, phys) << "the append grew the file";
  ASSERT_TRUE((*f)->Gc(true).ok());
  std::string big(1 << 20, 'z');
  auto w = (*f)->Pwrite(big.data(), big.size(), 0);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::memcpy(model.data(), big.data(), big.size());
  ASSERT_EQ(ReadAll(**f), model);
  f->reset();
  std::string report;
  EXPECT_TRUE(CheckFile(path, &report).ok()) << report;
}

// Resident bytes of this process's mapping that starts at `base`
// (/proc/self/smaps), or -1 if there is none.
long long MappedRss(const char* base) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return -1;
  char line[512];
  bool in = false;
  long long rss = -1;
  const auto want = reinterpret_cast<unsigned long long>(base);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line, "%llx-%llx ", &lo, &hi) == 2) {
      in = lo == want;
    } else if (in && std::sscanf(line, "Rss: %lld kB", &rss) == 1) {
      rss *= 1024;
      break;
    }
  }
  std::fclose(f);
  return rss;
}

TEST(VirtualModel, WholeBlockAppendsOnTmpfsFillPagesWithoutMappingThem) {
  // On tmpfs whole fresh blocks go by pwrite (vfile.h, pwrite_data_): the
  // kernel fills the page without zeroing it and the writer maps nothing,
  // where stores through the map paid a zeroing, a page-table entry and its
  // removal per page (docs/OVERLAY.md "Appends by pwrite"). The content
  // must read back through maps, the writer's and another handle's.
  if (const char* e = std::getenv("MAPFS_VIRTUAL_DATA"); e != nullptr && std::string(e) == "map")
    GTEST_SKIP() << "MAPFS_VIRTUAL_DATA=map: stores through the map";
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path, FormatOptions{16384, 1u << 16, 1u << 18}));
  auto f = OpenVirtual(path, true, Mode::kPosix);
  ASSERT_TRUE(f.ok());
  std::mt19937_64 rng(7);
  std::string model;
  for (int i = 0; i < 256; i++) {
    std::string d = Pattern(rng, 4096);
    auto a = (*f)->Append(d.data(), d.size());
    ASSERT_TRUE(a.ok()) << a.status().message();
    model += d;
  }
  // 1 MiB appended; the map holds metadata pages (and their neighbours,
  // mapped by the kernel's fault-around), no data page (through the map:
  // every data page, 1 MiB and more).
  const long long rss = MappedRss((*f)->base());
  ASSERT_GE(rss, 0) << "no smaps entry for the file's mapping";
  EXPECT_LT(rss, 512 * 1024) << "data pages mapped by the writer";
  // A write with partial first and last blocks over fresh blocks: its
  // whole middle blocks by pwrite, its edges through the map.
  std::string mid = Pattern(rng, 5 * 4096);
  ASSERT_TRUE((*f)->Pwrite(mid.data(), mid.size(), model.size() + 100).ok());
  ModelWrite(model, model.size() + 100, mid);
  auto r = OpenVirtual(path, false, Mode::kPosix);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(ReadAll(**r), model);
  EXPECT_EQ(ReadAll(**f), model);
  f->reset();
  std::string report;
  EXPECT_TRUE(CheckFile(path, &report).ok()) << report;
}

TEST(VirtualModel, SmallAppendsComposeTheirEdgesAndCopyOutScatteredRunsWhole) {
  // LevelDB's appends: 1 KiB log records and ~4 KiB table blocks, never
  // block-aligned. On tmpfs the partial first and last blocks of each are
  // composed (the old bytes around the new ones) and written by pwritev
  // with the record block (vwrite.cc); every partial block is copied on
  // write, so the file's blocks end up in runs of one or two, which a map's
  // fill (CopyOut) and a reused map's refill (PreadByKernel) copy as one
  // scattered batch through the engine's map (vfile.cc, ByRuns). Gaps past
  // the end (a hole inside a block, and whole hole blocks) and rewrites
  // of earlier bytes are mixed in; every copy must equal the model.
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path, FormatOptions{16384, 1u << 16, 1u << 18}));
  auto f = OpenVirtual(path, true, Mode::kPosix);
  ASSERT_TRUE(f.ok());
  std::mt19937_64 rng(11);
  std::string model;
  for (int i = 0; i < 700; i++) {
    std::string d = Pattern(rng, i % 3 == 2 ? 4230 : 1071);
    if (i % 97 == 50) {
      // Past the end: a gap inside the last block, or whole blocks of holes.
      uint64_t at = model.size() + (i % 2 == 0 ? 300 : 3 * 4096 + 17);
      ASSERT_TRUE((*f)->Pwrite(d.data(), d.size(), at).ok());
      ModelWrite(model, at, d);
    } else if (i % 41 == 7) {
      // A rewrite of earlier bytes (the map path).
      uint64_t at = rng() % (model.size() - d.size() + 1);
      ASSERT_TRUE((*f)->Pwrite(d.data(), d.size(), at).ok());
      ModelWrite(model, at, d);
    } else {
      auto a = (*f)->Append(d.data(), d.size());
      ASSERT_TRUE(a.ok()) << a.status().message();
      ASSERT_EQ(*a, model.size());
      model += d;
    }
    if (i % 150 == 149) {
      ASSERT_TRUE((*f)->Gc(true).ok());
    }
  }
  EXPECT_EQ(ReadAll(**f), model);
  // The scattered path is the one taken: most blocks are runs of one.
  const uint64_t blocks = (model.size() + 4095) / 4096;
  uint64_t runs = 0;
  uint32_t prev = 0;
  for (uint64_t v = 0; v < blocks; v++) {
    auto p = (*f)->PhysOf(v);
    ASSERT_TRUE(p.ok());
    if (*p == 0 || *p != prev + 1) runs++;
    prev = *p;
  }
  EXPECT_GT(runs, blocks / 3) << "blocks in long runs: the scattered copy is not exercised";
  auto r = OpenVirtual(path, false, Mode::kPosix);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(ReadAll(**r), model);
  for (VFile* h : {f->get(), r->get()}) {
    // A map's fill: into a fresh memfd, holes left unwritten.
    int mfd = memfd_create("copyout", MFD_CLOEXEC);
    ASSERT_GE(mfd, 0);
    ASSERT_EQ(ftruncate(mfd, static_cast<off_t>(model.size())), 0);
    auto c = h->CopyOut(mfd, 0, model.size(), 0);
    ASSERT_TRUE(c.ok()) << c.status().message();
    ASSERT_EQ(*c, model.size());
    std::string got(model.size(), '\0');
    ASSERT_EQ(pread(mfd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
    close(mfd);
    EXPECT_TRUE(got == model) << "CopyOut differs from the content";
    // A reused map's refill, whole and from an unaligned offset.
    std::string buf(model.size(), 'x');
    auto k = h->PreadByKernel(buf.data(), buf.size(), 0);
    ASSERT_TRUE(k.ok()) << k.status().message();
    EXPECT_TRUE(buf == model) << "PreadByKernel differs from the content";
    std::string part(model.size() - 5000, 'x');
    k = h->PreadByKernel(part.data(), part.size(), 5000 - 123);
    ASSERT_TRUE(k.ok());
    ASSERT_EQ(*k, part.size());
    EXPECT_TRUE(part == model.substr(5000 - 123, part.size())) << "PreadByKernel at an offset differs";
  }
  r->reset();
  f->reset();
  std::string report;
  EXPECT_TRUE(CheckFile(path, &report).ok()) << report;
}

TEST(VirtualModel, ReadOnlyAttachSeesContentAndRefusesWrites) {
  TempDir dir;
  std::string path = dir.File("f");
  ASSERT_TRUE(MakeVirtual(path));
  {
    auto f = OpenVirtual(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite("hello", 5, 4090).ok());
  }
  auto r = OpenVirtual(path, false);
  ASSERT_TRUE(r.ok()) << r.status().message();
  char buf[5];
  ASSERT_EQ(*(*r)->Pread(buf, 5, 4090), 5u);
  EXPECT_EQ(std::string(buf, 5), "hello");
  EXPECT_EQ((*r)->Pwrite("x", 1, 0).status().code(), EBADF);
}

TEST(VirtualEngine, CreateFormatsPlainStaysPlainFixStatGivesContentSize) {
  TempDir dir;
  auto e = NewVirtualEngine(Options{dir.path(), EngineKind::kVirtual, Mode::kSync});
  ASSERT_TRUE(e.ok()) << e.status().message();
  std::string vpath = dir.File("v"), ppath = dir.File("p");
  int fd = open(vpath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  auto of = (*e)->Adopt(fd, O_RDWR | O_CREAT);
  ASSERT_TRUE(of.ok()) << of.status().message();
  ASSERT_EQ(*(*of)->Pwrite("abc", 3, 0), 3u);
  ASSERT_EQ(*(*of)->Append("def", 3), 3u);
  // A second description of the same file in the process sees the writes.
  int fd2 = open(vpath.c_str(), O_RDONLY | O_CLOEXEC);
  auto of2 = (*e)->Adopt(fd2, O_RDONLY);
  ASSERT_TRUE(of2.ok());
  char buf[6];
  ASSERT_EQ(*(*of2)->Pread(buf, 6, 0), 6u);
  EXPECT_EQ(std::string(buf, 6), "abcdef");
  struct stat st {};
  ASSERT_EQ(stat(vpath.c_str(), &st), 0);
  EXPECT_GT(st.st_size, 6);  // the kernel sees the metadata region
  ASSERT_TRUE((*e)->FixStat(vpath.c_str(), &st).ok());
  EXPECT_EQ(st.st_size, 6);
  // A map is a copy of the content (vview.h), not of the file's blocks.
  auto m = (*of)->Map(nullptr, 4096, PROT_READ, MAP_SHARED, 0);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(std::string(static_cast<const char*>(*m), 6), "abcdef");
  ASSERT_TRUE((*e)->UnmapViews(*m, 4096).ok());
  ASSERT_EQ(munmap(*m, 4096), 0);
  ASSERT_TRUE((*of)->Close().ok());
  ASSERT_TRUE((*of2)->Close().ok());

  // A plain file with content is served by the kernel, untouched.
  int pfd = open(ppath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_EQ(write(pfd, "plain", 5), 5);
  auto pf = (*e)->Adopt(pfd, O_RDWR);
  ASSERT_TRUE(pf.ok());
  ASSERT_EQ(*(*pf)->Pwrite("P", 1, 0), 1u);
  ASSERT_TRUE((*pf)->Close().ok());
  std::string out;
  FILE* fp = fopen(ppath.c_str(), "r");
  ASSERT_NE(fp, nullptr);
  char pb[16] = {};
  out.assign(pb, fread(pb, 1, sizeof(pb), fp));
  fclose(fp);
  EXPECT_EQ(out, "Plain");
}

// Whether this process still holds a descriptor of `path` after its unlink.
bool HoldsDeleted(const std::string& path) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* de = readdir(d)) {
    char target[4096];
    ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
    if (n > 0 && std::string(target, static_cast<size_t>(n)) == path + " (deleted)") found = true;
  }
  closedir(d);
  return found;
}

// The engine keeps a file attached after its last close (no mmap, replay or
// page-table refill at the next open). What a user relies on still holds:
// a reopen sees what another process wrote meanwhile (past a checkpoint
// too), a file the kernel emptied and the engine formatted again is the new
// file, not the kept one, and an unlinked file's space is not held.
TEST(VirtualEngine, KeptAfterCloseSeesOtherWritersReformatsAndLetsGoOfUnlinked) {
  TempDir dir;
  auto e = NewVirtualEngine(Options{dir.path(), EngineKind::kVirtual, Mode::kPosix});
  ASSERT_TRUE(e.ok()) << e.status().message();
  std::string vpath = dir.File("v");
  auto adopt = [&](int flags) {
    int fd = open(vpath.c_str(), flags | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0);
    return (*e)->Adopt(fd, flags);
  };
  auto of = adopt(O_RDWR | O_CREAT);
  ASSERT_TRUE(of.ok()) << of.status().message();
  ASSERT_EQ(*(*of)->Pwrite("one", 3, 0), 3u);
  ASSERT_TRUE((*of)->Close().ok());

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto f = OpenVirtual(vpath, true, Mode::kPosix);
    if (!f.ok()) _exit(2);
    std::string d(4096, 'w');
    for (int i = 0; i < 50; i++)
      if (!(*f)->Pwrite(d.data(), d.size(), uint64_t(i % 5) * 4096).ok()) _exit(3);
    if (!(*f)->Pwrite("two!", 4, 0).ok() || !(*f)->Gc(true).ok() || !(*f)->Pwrite("2", 1, 20480).ok()) _exit(4);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  of = adopt(O_RDWR);
  ASSERT_TRUE(of.ok());
  ASSERT_EQ(*(*of)->Size(), 20481u);
  char buf[8] = {};
  ASSERT_EQ(*(*of)->Pread(buf, 5, 0), 5u);
  EXPECT_EQ(std::string(buf, 5), "two!w");
  ASSERT_TRUE((*of)->Close().ok());
  struct stat sb {};
  ASSERT_EQ(stat(vpath.c_str(), &sb), 0);
  ASSERT_TRUE((*e)->FixStat(vpath.c_str(), &sb).ok());
  EXPECT_EQ(sb.st_size, 20481);

  // Emptied by a program outside the shim, then created again through it.
  ASSERT_EQ(truncate(vpath.c_str(), 0), 0);
  of = adopt(O_RDWR | O_CREAT | O_TRUNC);
  ASSERT_TRUE(of.ok()) << of.status().message();
  ASSERT_EQ(*(*of)->Pwrite("x", 1, 0), 1u);
  ASSERT_EQ(*(*of)->Size(), 1u);
  ASSERT_EQ(*(*of)->Pread(buf, 8, 0), 1u);
  EXPECT_EQ(buf[0], 'x');
  ASSERT_TRUE((*of)->Close().ok());
  {
    // As any other process finds it (the kept handle's log position was
    // the old file's).
    auto f = OpenVirtual(vpath, false);
    ASSERT_TRUE(f.ok()) << f.status().message();
    EXPECT_EQ(*(*f)->Size(), 1u);
    std::string report;
    EXPECT_TRUE(CheckFile(vpath, &report).ok()) << report;
  }

  // Unlinked while kept: let go at the next adoption.
  ASSERT_EQ(unlink(vpath.c_str()), 0);
  EXPECT_TRUE(HoldsDeleted(vpath));
  int fd = open(dir.File("w").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  auto ow = (*e)->Adopt(fd, O_RDWR | O_CREAT);
  ASSERT_TRUE(ow.ok());
  EXPECT_FALSE(HoldsDeleted(vpath));
  ASSERT_TRUE((*ow)->Close().ok());
}

TEST(VirtualTools, ImportExportRoundTrip) {
  TempDir dir;
  std::string path = dir.File("f");
  std::mt19937_64 rng(7);
  std::string content = Pattern(rng, 300000);
  {
    FILE* fp = fopen(path.c_str(), "w");
    ASSERT_NE(fp, nullptr);
    fwrite(content.data(), 1, content.size(), fp);
    fclose(fp);
  }
  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  Status s = ImportFile(path);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(ImportFile(path).code(), EEXIST);
  auto f = OpenVirtual(path, false);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(ReadAll(**f), content);
  std::string report;
  ASSERT_TRUE(CheckFile(path, &report).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  s = ExportFile(path);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  ASSERT_EQ(static_cast<size_t>(st.st_size), content.size());
  std::string back(content.size(), '\0');
  int fd = open(path.c_str(), O_RDONLY);
  ASSERT_EQ(pread(fd, back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
  close(fd);
  EXPECT_EQ(back, content);
}

}  // namespace
}  // namespace mapfs::overlay::vrt::testing
