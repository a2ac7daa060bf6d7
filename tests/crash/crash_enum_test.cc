// Crash-state enumeration over every operation, in every mode (traced build).
//
// Each workload runs on a fresh pool with the CrashRecorder installed; the
// CrashChecker then mounts every crash image of every fence (see its
// header) and requires: recovery succeeds, fsck is clean, the tree and the
// bytes are the state before or after the operation that was running (file
// data per the mode's promise), and the file system still works.
//
// Workloads (ACE-style): every catalogue operation alone; sequences of two
// (all pairs with MAPFS_CRASH_FULL=1, a seeded sample otherwise); a fixed
// list of three-operation sequences; and the structural cases — partition
// upgrade and downgrade, pswap of a strict write, directory block splits,
// every redo slot reused, ENOSPC, and pool pages reused without zeroing.
//
// Each test prints a line "crash-enum: <test> <mode>: W workloads, P crash
// points, I images, J judged, V violations" that docs/RELIABILITY.md quotes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>

#include <cstdio>
#include <cstdlib>

#include "crash_workload.h"
#include "fs_test_util.h"
#include "medium/trace.h"

namespace mapfs::crash {
namespace {

bool Full() {
  const char* f = std::getenv("MAPFS_CRASH_FULL");
  return f && *f && std::string(f) != "0";
}

Budget DefaultBudget(uint64_t seed) {
  Budget b;
  b.seed = seed;
  if (Full()) {
    b.all_subsets_upto = 6;
    b.samples = 24;
  }
  return b;
}

class CrashEnum : public ::testing::TestWithParam<int> {
 protected:
  // Runs one workload and folds its outcome into the totals; a violation
  // fails the test with the workload's name and its step results.
  Outcome Check(const Workload& w) {
    Outcome o = RunWorkload(w, GetParam(), DefaultBudget(seed_++));
    workloads_++;
    counts_.points += o.counts.points;
    counts_.images += o.counts.images;
    counts_.judged += o.counts.judged;
    counts_.violations += o.violations.size();
    if (o.violations.empty()) return o;
    std::string steps;
    for (size_t i = 0; i < w.steps.size(); i++)
      steps += " " + w.steps[i].name + "=" + (i < o.step_errors.size() ? o.step_errors[i] : "?");
    std::string all;
    for (const auto& v : o.violations) all += v + "\n";
    ADD_FAILURE() << w.name << " [" << fstest::ModeName(GetParam()) << "] steps:" << steps << "\n" << all;
    return o;
  }

  void TearDown() override {
    std::printf("crash-enum: %s %s: %llu workloads, %llu crash points, %llu images, %llu judged, %llu violations\n",
                ::testing::UnitTest::GetInstance()->current_test_info()->name(), fstest::ModeName(GetParam()),
                static_cast<unsigned long long>(workloads_), static_cast<unsigned long long>(counts_.points),
                static_cast<unsigned long long>(counts_.images), static_cast<unsigned long long>(counts_.judged),
                static_cast<unsigned long long>(counts_.violations));
  }

  Workload Standard(std::string name, std::vector<Step> steps) {
    return Workload{std::move(name), StandardTree, std::move(steps)};
  }

  uint64_t seed_ = 1;
  uint64_t workloads_ = 0;
  CheckCounts counts_;
};

TEST_P(CrashEnum, EveryOperationAlone) {
  for (const Step& s : Catalogue()) Check(Standard(s.name, {s}));
}

// All ordered pairs of catalogue operations in the full run; in the bounded
// run a seeded sample of them (the seed is printed).
TEST_P(CrashEnum, PairsOfOperations) {
  const auto& c = Catalogue();
  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t i = 0; i < c.size(); i++)
    for (size_t j = 0; j < c.size(); j++) pairs.push_back({i, j});
  if (!Full()) {
    const uint64_t seed = 20261123 + GetParam();
    std::printf("pairs: sample of 40 of %zu, seed %llu (MAPFS_CRASH_FULL=1 runs all)\n", pairs.size(),
                static_cast<unsigned long long>(seed));
    testing::Rng rng(seed);
    for (size_t i = 0; i < 40; i++) std::swap(pairs[i], pairs[i + rng.Below(pairs.size() - i)]);
    pairs.resize(40);
  }
  for (auto [i, j] : pairs) Check(Standard(c[i].name + "," + c[j].name, {c[i], c[j]}));
}

TEST_P(CrashEnum, ThreeOperationSequences) {
  const std::vector<std::vector<std::string>> seqs = {
      {"create", "write-small", "rename-replace"},  // the atomic-replace idiom, on an empty file
      {"mkdir", "rename-across", "rmdir-nonempty"},
      {"link", "unlink", "rename"},
      {"append", "truncate-down", "append-upgrade"},
      {"rename-exchange", "rename-exchange", "unlink"},
      {"symlink", "rename-replace", "unlink-symlink"},
      {"truncate-zero", "write-pages", "fallocate"},
      {"rename-dir-into", "rmdir", "mkdir"},
      {"chmod", "chown", "rename"},
      {"write-big", "truncate-downgrade", "unlink-linked"},
  };
  for (const auto& names : seqs) {
    std::vector<Step> steps;
    std::string name;
    for (const auto& n : names) {
      steps.push_back(CatalogueStep(n));
      name += (name.empty() ? "" : ",") + n;
    }
    Check(Standard(name, steps));
  }
}

// Growth past each partition level moves the pages with pswap (upgrade);
// truncation returns them (downgrade).
TEST_P(CrashEnum, PartitionUpgradeAndDowngrade) {
  std::vector<Step> steps;
  uint64_t size = 0;
  for (uint64_t target : {3000ull, 9000ull, 70000ull, 600000ull}) {
    uint64_t n = target - size;
    steps.push_back({"grow-to-" + std::to_string(target),
                     [size, n](fs::FileSystem& fs) { return WriteAt(fs, "/g", size, n, 40 + size); }});
    size = target;
  }
  for (int64_t to : {100000, 5000, 0})
    steps.push_back({"shrink-to-" + std::to_string(to), [to](fs::FileSystem& fs) { return fs.Truncate("/g", to); }});
  Check(Workload{"upgrade-downgrade", [](fs::FileSystem& fs) { return CreateFile(fs, "/g"); }, steps});
}

// Overwrites of a file that owns its chunks: in strict mode whole pages go
// to fresh pages (one entry store for a single page, one redo commit with
// the partial pages and the size otherwise).
TEST_P(CrashEnum, LargeOverwrites) {
  auto setup = [](fs::FileSystem& fs) {
    MAPFS_RETURN_IF_ERROR(CreateFile(fs, "/f"));
    return WriteAt(fs, "/f", 0, 1 << 20, 50);
  };
  Check(Workload{"overwrite-1MiB", setup,
                 {{"overwrite-aligned", [](fs::FileSystem& fs) { return WriteAt(fs, "/f", 0, 512 << 10, 51); }},
                  {"overwrite-unaligned",
                   [](fs::FileSystem& fs) { return WriteAt(fs, "/f", 1000, 300 << 10, 52); }},
                  {"overwrite-one-page", [](fs::FileSystem& fs) { return WriteAt(fs, "/f", 8192, 4096, 53); }},
                  {"overwrite-page-and-tail",
                   [](fs::FileSystem& fs) { return WriteAt(fs, "/f", 12288, 4096 + 700, 54); }},
                  {"overwrite-past-end",
                   [](fs::FileSystem& fs) { return WriteAt(fs, "/f", (1 << 20) - 5000, 12288, 55); }},
                  {"overwrite-same-page-again",
                   [](fs::FileSystem& fs) { return WriteAt(fs, "/f", 8192, 4096, 56); }}}});
}

// The same with the page-by-page limit lowered: strict overwrites write a
// staging range and swap it in.
TEST_P(CrashEnum, StagedOverwrites) {
  auto setup = [](fs::FileSystem& fs) {
    fs.data().set_strict_swap_max_pages(16);
    MAPFS_RETURN_IF_ERROR(CreateFile(fs, "/f"));
    return WriteAt(fs, "/f", 0, 1 << 20, 60);
  };
  Check(Workload{"overwrite-staged", setup,
                 {{"staged-unaligned", [](fs::FileSystem& fs) { return WriteAt(fs, "/f", 1000, 300 << 10, 61); }},
                  {"staged-aligned", [](fs::FileSystem& fs) { return WriteAt(fs, "/f", 0, 512 << 10, 62); }}}});
}

// Creates into a directory one entry short of a full first block, through
// the block split, then deletes and renames among the moved entries.
TEST_P(CrashEnum, DirectoryBlockSplits) {
  auto setup = [](fs::FileSystem& fs) {
    MAPFS_RETURN_IF_ERROR(fs.Mkdir("/s", 0755));
    for (int i = 0; i < 60; i++) MAPFS_RETURN_IF_ERROR(CreateFile(fs, "/s/e" + std::to_string(i)));
    return Status::Ok();
  };
  std::vector<Step> steps;
  for (int i = 60; i < 66; i++) {
    std::string p = "/s/e" + std::to_string(i);
    steps.push_back({"create-" + p, [p](fs::FileSystem& fs) { return CreateFile(fs, p); }});
  }
  steps.push_back({"unlink-e3", [](fs::FileSystem& fs) { return fs.Unlink("/s/e3"); }});
  steps.push_back({"rename-e5-e61", [](fs::FileSystem& fs) { return fs.Rename("/s/e5", "/s/e61"); }});
  Check(Workload{"dir-split", setup, steps});
}

// More transactions in a row than the pool has redo slots (16): every slot
// is reused, each after its record was retired.
TEST_P(CrashEnum, RedoSlotsReused) {
  std::vector<Step> steps;
  for (int i = 0; i < 20; i++) {
    std::string p = "/r" + std::to_string(i % 4);
    if (i % 2 == 0)
      steps.push_back({"create-" + p, [p](fs::FileSystem& fs) { return CreateFile(fs, p); }});
    else
      steps.push_back({"unlink-" + p, [p](fs::FileSystem& fs) {
                         std::string q = "/r" + std::to_string((std::stoi(p.substr(2)) + 3) % 4);
                         Status s = fs.Unlink(q);
                         return s.code() == ENOENT ? fs.Rename(p, q) : s;
                       }});
  }
  Check(Workload{"redo-slot-reuse", nullptr, steps});
}

// A pool filled almost to the end: the writes, creates and growth that run
// out of space must fail cleanly and leave the state as it was.
TEST_P(CrashEnum, OutOfSpace) {
  auto setup = [](fs::FileSystem& fs) {
    MAPFS_RETURN_IF_ERROR(CreateFile(fs, "/fill"));
    // Fill with 1 MiB writes until the pool refuses.
    for (uint64_t off = 0;; off += 1 << 20) {
      Status s = WriteAt(fs, "/fill", off, 1 << 20, 60);
      if (s.code() == ENOSPC) break;
      MAPFS_RETURN_IF_ERROR(s);
    }
    return CreateFile(fs, "/small");
  };
  Check(Workload{"enospc", setup,
                 {{"append-1MiB", [](fs::FileSystem& fs) { return WriteAt(fs, "/small", 0, 1 << 20, 61); }},
                  {"append-64KiB", [](fs::FileSystem& fs) { return WriteAt(fs, "/small", 0, 64 << 10, 62); }},
                  {"fallocate-1MiB",
                   [](fs::FileSystem& fs) {
                     auto f = fs.Open("/small", O_WRONLY, 0);
                     if (!f.ok()) return f.status();
                     Status s = fs.Fallocate(**f, 0, 0, 1 << 20);
                     Status c = fs.Close(**f);
                     return s.ok() ? c : s;
                   }},
                  {"unlink-fill", [](fs::FileSystem& fs) { return fs.Unlink("/fill"); }},
                  {"append-after-free", [](fs::FileSystem& fs) { return WriteAt(fs, "/small", 0, 64 << 10, 63); }}}});
}

// Pool pages are reused without being zeroed (resident medium): after the
// set-up every data chunk of the pool holds a deleted file's bytes. New
// files then grow into those pages through holes, truncation up, growth by
// copy and by pswap, and fallocate; no crash state may show one byte of the
// deleted files in a hole or past an end (each line of a file must be one
// allowed version's, zeros past it).
TEST_P(CrashEnum, ReusedPagesNeverShowDeletedBytes) {
  auto setup = [](fs::FileSystem& fs) -> Status {
    int n = 0;
    for (;; n++) {
      std::string p = "/old" + std::to_string(n);
      MAPFS_RETURN_IF_ERROR(CreateFile(fs, p));
      Status s = WriteAt(fs, p, 0, 2 << 20, 80 + static_cast<uint64_t>(n));
      if (s.code() == ENOSPC) break;
      MAPFS_RETURN_IF_ERROR(s);
    }
    for (int i = 0; i <= n; i++) MAPFS_RETURN_IF_ERROR(fs.Unlink("/old" + std::to_string(i)));
    MAPFS_RETURN_IF_ERROR(CreateFile(fs, "/n"));
    return CreateFile(fs, "/m");
  };
  auto fallocate = [](const char* path, int mode, uint64_t off, uint64_t len) {
    return [=](fs::FileSystem& fs) -> Status {
      auto f = fs.Open(path, O_WRONLY, 0);
      if (!f.ok()) return f.status();
      Status s = fs.Fallocate(**f, mode, static_cast<int64_t>(off), static_cast<int64_t>(len));
      Status c = fs.Close(**f);
      return s.ok() ? c : s;
    };
  };
  Workload w{
      "reused-pages", setup,
      {{"truncate-up-hole", [](fs::FileSystem& fs) { return fs.Truncate("/n", 1536 << 10); }},
       {"write-into-hole", [](fs::FileSystem& fs) { return WriteAt(fs, "/n", 1 << 20, 100, 90); }},
       {"append-pages", [](fs::FileSystem& fs) { return WriteAt(fs, "/n", 0, 8192 + 100, 91, O_APPEND); }},
       {"write-past-end-gap", [](fs::FileSystem& fs) { return WriteAt(fs, "/n", 1600 << 10, 5000, 92); }},
       {"small-append", [](fs::FileSystem& fs) { return WriteAt(fs, "/m", 0, 10000, 93); }},
       {"small-truncate-up", [](fs::FileSystem& fs) { return fs.Truncate("/m", 300000); }},
       {"grow-by-copy", [](fs::FileSystem& fs) { return WriteAt(fs, "/m", 600000, 3000, 94); }},
       {"fallocate-keep-size", fallocate("/n", FALLOC_FL_KEEP_SIZE, 1700 << 10, 200 << 10)},
       {"truncate-up-over-fallocated", [](fs::FileSystem& fs) { return fs.Truncate("/n", 2 << 20); }},
       {"grow-by-pswap", [](fs::FileSystem& fs) { return WriteAt(fs, "/n", (2 << 20) + 4096, 4096, 95); }},
       {"truncate-down", [](fs::FileSystem& fs) { return fs.Truncate("/n", 5000); }},
       {"truncate-up-again", [](fs::FileSystem& fs) { return fs.Truncate("/n", 3 << 20); }},
       // The states the checker compares against are read from the running
       // file system: a missing zeroing would be in them too. So the live
       // bytes are checked here: each is zero or what a step wrote there.
       {"no-deleted-bytes", [](fs::FileSystem& fs) -> Status {
          for (const char* p : {"/n", "/m"}) {
            auto f = fs.Open(p, O_RDONLY, 0);
            if (!f.ok()) return f.status();
            std::string buf(4 << 20, 0);
            auto r = fs.Read(**f, buf.data(), buf.size(), 0);
            Status c = fs.Close(**f);
            if (!r.ok()) return r.status();
            for (size_t i = 0; i < *r; i++) {
              bool ok = buf[i] == 0;
              for (uint64_t tag = 90; tag <= 95 && !ok; tag++)
                ok = static_cast<uint8_t>(buf[i]) == fstest::PatternByte(tag, i);
              if (!ok) return Status::Error(EIO, std::string(p) + ": a deleted file's byte at " + std::to_string(i));
            }
            MAPFS_RETURN_IF_ERROR(c);
          }
          return Status::Ok();
        }}},
      24ull << 20};
  Outcome o = Check(w);
  for (size_t i = 0; i < o.step_errors.size(); i++) EXPECT_EQ(o.step_errors[i], "0") << w.steps[i].name;
}

INSTANTIATE_TEST_SUITE_P(Modes, CrashEnum, ::testing::Values(MAPFS_MODE_POSIX, MAPFS_MODE_SYNC, MAPFS_MODE_STRICT),
                         [](const auto& info) { return std::string(fstest::ModeName(info.param)); });

}  // namespace
}  // namespace mapfs::crash

namespace mapfs::crash {
namespace {

// Regression (found by this checker): in posix mode close() did not make
// the file's writes durable — data and size stayed unfenced after the
// program was told the file was closed, which DESIGN.md's posix promise
// ("durable at fsync/close") forbids.
TEST(CrashRegression, PosixCloseMakesWritesDurable) {
  for (const char* op : {"write-small", "append", "write-hole"}) {
    Workload w{op, StandardTree, {CatalogueStep(op)}};
    Outcome o = RunWorkload(w, MAPFS_MODE_POSIX, Budget{});
    EXPECT_TRUE(o.violations.empty()) << op << ": " << o.violations.front();
  }
}

}  // namespace
}  // namespace mapfs::crash

namespace mapfs::crash {
namespace {

// Writes through one descriptor kept open across steps, then fsync, more
// writes, close. In posix mode the data of an unsynced write may be lost
// (back to what the last fsync or close left); sync and strict must keep
// every write that returned.
TEST_P(CrashEnum, WritesOnAnOpenDescriptorThenFsync) {
  auto fd = std::make_shared<std::shared_ptr<fs::OpenFile>>();
  auto write = [fd](uint64_t off, size_t n, uint64_t tag) {
    return [fd, off, n, tag](fs::FileSystem& fs) -> Status {
      std::string buf(n, 0);
      fstest::FillPattern(buf.data(), n, tag, off);
      auto w = fs.Write(**fd, buf.data(), n, static_cast<int64_t>(off));
      return w.ok() ? Status::Ok() : w.status();
    };
  };
  std::vector<Step> steps = {
      {"open", [fd](fs::FileSystem& fs) -> Status {
         auto f = fs.Open("/a", O_RDWR, 0);
         if (!f.ok()) return f.status();
         *fd = *f;
         return Status::Ok();
       }},
      {"overwrite", write(100, 2000, 70), false},
      {"extend", write(4000, 9000, 71), false},
      {"fsync", [fd](fs::FileSystem& fs) { return fs.Fsync(**fd); }},
      {"overwrite-again", write(0, 300, 72), false},
      {"extend-again", write(13000, 70000, 73), false},
      {"close", [fd](fs::FileSystem& fs) { return fs.Close(**fd); }},
  };
  Check(Standard("open-write-fsync-close", steps));
}

}  // namespace
}  // namespace mapfs::crash
