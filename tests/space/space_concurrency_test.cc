// Concurrency: threads sharing one Mount, and processes each with their own
// Mount of the same pool, allocate and free at once. No partition may be
// handed to two holders: every holder stamps what it gets (a new partition
// must read as zero) and checks the stamp before freeing; the final sets must
// be disjoint and equal to what Check lists.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <mutex>
#include <thread>

#include "space_test_util.h"

namespace mapfs::testing {
namespace {

using space::format::LevelSize;

struct Held {
  int level;
  uint64_t tag;
};

struct WorkerResult {
  std::map<uint64_t, Held> held;
  std::string error;  // first problem seen, empty if none
  uint64_t allocs = 0, frees = 0, enospc = 0;
};

// Offsets currently held by any thread of this process; a new partition
// must not intersect one (checked under the mutex, inserted after Alloc
// returns and erased before Free is called).
struct Registry {
  std::mutex mu;
  Model held;
};

constexpr int kOpenTimedOut = 20, kWorkTimedOut = 21;
volatile sig_atomic_t g_phase = 0;  // child: 0 opening, 1 working

uint64_t StampLen(int level) { return level < 3 ? LevelSize(level) : kPageSize; }

void Worker(Mount& m, uint64_t seed, int ops, size_t max_held, Registry* reg, WorkerResult* out) {
  auto& sp = m.space();
  auto& vm = m.vm();
  Rng rng(seed);
  auto fail = [&](const std::string& what) {
    if (out->error.empty()) out->error = "worker " + std::to_string(seed) + ": " + what;
  };
  for (int op = 0; op < ops && out->error.empty(); op++) {
    bool alloc = out->held.empty() || (out->held.size() < max_held && rng.Below(100) < 60);
    if (alloc) {
      uint64_t r100 = rng.Below(100);
      int level = r100 < 55 ? 0 : r100 < 80 ? 1 : r100 < 95 ? 2 : 3;
      auto r = sp.Alloc(level);
      if (!r.ok()) {
        if (r.status().code() != ENOSPC) fail("Alloc: " + Describe(r));
        out->enospc++;
        continue;
      }
      uint64_t v = *r, size = LevelSize(level);
      if (v % size != 0 || v + size > vm.size()) fail("bad partition at " + std::to_string(v));
      if (reg) {
        std::lock_guard<std::mutex> g(reg->mu);
        if (Intersecting(reg->held, v, v + size) != 0)
          fail("L" + std::to_string(level) + " at " + std::to_string(v) + " is held by another thread");
        reg->held.emplace(v, level);
      }
      // Drop mappings other processes made stale before touching the data
      // (what the file layer does on entry).
      vm.Sync();
      if (!ReadsZero(vm, v, StampLen(level)))
        fail("new L" + std::to_string(level) + " at " + std::to_string(v) + " is not zero (held twice?)");
      Status st = vm.Populate(v, StampLen(level));
      if (!st.ok()) fail("Populate: " + Describe(st));
      uint64_t tag = (seed << 40) ^ rng.Next();
      Stamp(vm, v, StampLen(level), tag);
      out->held.emplace(v, Held{level, tag});
      out->allocs++;
    } else {
      auto it = out->held.begin();
      std::advance(it, static_cast<long>(rng.Below(out->held.size())));
      uint64_t v = it->first;
      if (!StampIntact(vm, v, StampLen(it->second.level), it->second.tag))
        fail("data of the L" + std::to_string(it->second.level) + " at " + std::to_string(v) +
             " changed while held (handed out twice?)");
      if (reg) {
        std::lock_guard<std::mutex> g(reg->mu);
        reg->held.erase(v);
      }
      Status st = sp.Free(v);
      if (!st.ok()) fail("Free(" + std::to_string(v) + "): " + Describe(st));
      out->held.erase(it);
      out->frees++;
    }
  }
}

// Adds `part` to `all`, failing on any overlap with what is there.
void Merge(Model* all, std::map<uint64_t, Held>* tags, const std::map<uint64_t, Held>& part) {
  for (auto& [v, h] : part) {
    EXPECT_EQ(Intersecting(*all, v, v + LevelSize(h.level)), 0u) << "partition at " << v << " held twice";
    all->emplace(v, h.level);
    tags->emplace(v, h);
  }
}

void DrainAndCheck(Mount& m, const Model& all, const std::map<uint64_t, Held>& tags, uint64_t fresh_used) {
  auto& sp = m.space();
  EXPECT_EQ(CheckedList(sp), all);
  EXPECT_EQ(GeometryProblem(all, sp.top_level()), "");
  m.vm().Sync();
  for (auto& [v, h] : tags)
    EXPECT_TRUE(StampIntact(m.vm(), v, StampLen(h.level), h.tag)) << "data of the partition at " << v;
  for (auto& [v, l] : all) SPACE_ASSERT_OK(sp.Free(v));
  ExpectAllFree(m);
  ExpectNoLeak(m, fresh_used);
}

TEST(SpaceConcurrency, ThreadsShareOneMount) {
  TempPool tp(64 * MiB, SmallRegion(4));  // small region: threads also meet ENOSPC
  SPACE_ASSERT_OK(tp.status());
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  const uint64_t fresh_used = m->vm().Stats().used_pages;
  constexpr int kThreads = 4;
  Registry reg;
  std::vector<WorkerResult> res(kThreads);
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; t++)
    th.emplace_back([&, t] { Worker(*m, 100 + t, 3000, 400, &reg, &res[t]); });
  for (auto& t : th) t.join();

  Model all;
  std::map<uint64_t, Held> tags;
  uint64_t enospc = 0;
  for (auto& r : res) {
    EXPECT_EQ(r.error, "");
    EXPECT_GT(r.frees, 500u);
    enospc += r.enospc;
    Merge(&all, &tags, r.held);
  }
  EXPECT_EQ(reg.held, all);
  RecordProperty("enospc", std::to_string(enospc));

  // Free everything from all threads at once (merges race with each other).
  std::vector<std::thread> fr;
  for (int t = 0; t < kThreads; t++)
    fr.emplace_back([&, t] {
      for (auto& [v, h] : res[t].held) EXPECT_TRUE(m->space().Free(v).ok());
    });
  for (auto& t : fr) t.join();
  DrainAndCheck(*m, {}, {}, fresh_used);
}

// Two child processes and the parent, each with its own Mount, work at once.
// Each child reports the partitions it still holds through a pipe and closes
// its Mount; the parent checks that the three sets are disjoint, that Check
// lists exactly their union, and that every stamp is intact.
TEST(SpaceConcurrency, ProcessesWithTheirOwnMounts) {
  TempPool tp(256 * MiB, SmallRegion(5));
  SPACE_ASSERT_OK(tp.status());
  auto m = OpenMount(tp.path());
  ASSERT_TRUE(m);
  const uint64_t fresh_used = m->vm().Stats().used_pages;

  constexpr int kChildren = 2;
  struct Child {
    pid_t pid;
    int fd;
  };
  std::vector<Child> kids;
  for (int c = 0; c < kChildren; c++) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(p[0]);
      // Never hang the suite: a child stuck past its deadline exits with
      // kOpenTimedOut or kWorkTimedOut.
      ::signal(SIGALRM, [](int) { _exit(g_phase == 0 ? kOpenTimedOut : kWorkTimedOut); });
      ::alarm(30);
      auto cm = Mount::Open(tp.path());
      if (!cm.ok()) {
        std::fprintf(stderr, "child: %s\n", Describe(cm).c_str());
        _exit(2);
      }
      g_phase = 1;
      ::alarm(240);
      // Tell the parent this child is in; everyone starts working together.
      char ready = 'R';
      if (::write(p[1], &ready, 1) != 1) _exit(3);
      WorkerResult r;
      Worker(**cm, 200 + c, 3000, 300, nullptr, &r);
      for (auto& [v, h] : r.held) {
        uint64_t rec[3] = {v, static_cast<uint64_t>(h.level), h.tag};
        if (::write(p[1], rec, sizeof rec) != static_cast<ssize_t>(sizeof rec)) _exit(3);
      }
      ::close(p[1]);
      if (!r.error.empty()) std::fprintf(stderr, "child: %s\n", r.error.c_str());
      if (r.frees < 500) std::fprintf(stderr, "child: only %llu frees\n", (unsigned long long)r.frees);
      bool closed = (*cm)->Close().ok();
      _exit(r.error.empty() && r.frees >= 500 && closed ? 0 : 1);
    }
    ::close(p[1]);
    kids.push_back({pid, p[0]});
  }

  for (auto& k : kids) {
    char ready = 0;
    EXPECT_EQ(::read(k.fd, &ready, 1), 1) << "child never opened the pool";
    EXPECT_EQ(ready, 'R');
  }
  WorkerResult mine;
  Worker(*m, 300, 3000, 300, nullptr, &mine);
  EXPECT_EQ(mine.error, "");

  Model all;
  std::map<uint64_t, Held> tags;
  Merge(&all, &tags, mine.held);
  for (auto& k : kids) {
    std::map<uint64_t, Held> theirs;
    uint64_t rec[3];
    while (::read(k.fd, rec, sizeof rec) == static_cast<ssize_t>(sizeof rec))
      theirs.emplace(rec[0], Held{static_cast<int>(rec[1]), rec[2]});
    ::close(k.fd);
    int st = 0;
    ASSERT_EQ(::waitpid(k.pid, &st, 0), k.pid);
    ASSERT_TRUE(WIFEXITED(st)) << "child killed by signal " << WTERMSIG(st);
    EXPECT_NE(WEXITSTATUS(st), kOpenTimedOut)
        << "the child's Mount::Open blocked for 30 s while the parent had the pool open";
    EXPECT_EQ(WEXITSTATUS(st), 0) << "child failed (see its stderr)";
    Merge(&all, &tags, theirs);
  }
  DrainAndCheck(*m, all, tags, fresh_used);
}

}  // namespace
}  // namespace mapfs::testing
