// Crash consistency of CIB directories (traced build).
//
// Each scenario fills a directory up to the point where one more operation
// changes its structure (a block split, index growth, an overflow block, or
// a transaction of many operations with splits in its middle). A forked
// child opens the pool, installs a hook that _exits at the Nth fence and runs
// the operation; N goes from 1 until the child finishes. After each death
// the pool is reopened (recovery runs) and the directory must pass Check and
// hold exactly the entries before the operation or exactly those after it;
// the only partitions allocated but not owned by the directory are ones the
// operation allocated (leaks recovery would reclaim), none once it
// completed; and the directory keeps working.
//
// Pools live in /dev/shm, which keeps every store: this checks the ordering
// and recovery logic at every fence, not the loss of unflushed lines.
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <set>

#include "dir_test_util.h"
#include "medium/trace.h"
#include "space/partitions.h"

namespace mapfs::testing {
namespace {

constexpr int kDiedAtFence = 42, kCompleted = 43, kOpFailed = 44, kOpenFailed = 45;

class FenceKiller : public medium::TraceHook {
 public:
  explicit FenceKiller(int n) : n_(n) {}
  void OnStore(const void*, size_t) override {}
  void OnFlush(const void*, size_t) override {}
  void OnFence() override {
    if (++seen_ == n_) _exit(kDiedAtFence);
  }

 private:
  int n_;
  int seen_ = 0;
};

uint64_t ConstHash(std::string_view) { return 0x5555aaaa5555aaaaull; }

using Model = std::map<std::string, dir::Entry>;

enum class Trigger { kBlocks, kNodes };

struct Scenario {
  const char* name;
  uint64_t (*hash)(std::string_view);
  int index_cap;
  Trigger trigger;
  bool big_tx;  // the operation is one transaction of many operations
};

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

const Scenario kScenarios[] = {
    {"BlockSplit", nullptr, 0, Trigger::kBlocks, false},
    {"IndexNodeSplit", nullptr, 3, Trigger::kNodes, false},
    {"OverflowBlock", &ConstHash, 0, Trigger::kBlocks, false},
    {"TransactionWithSplits", nullptr, 3, Trigger::kBlocks, true},
};

std::string Name(int i) { return NameFor(i, 3); }

// The operation: one insert, or one transaction that removes, replaces and
// inserts many entries (the model is updated to the state after it).
Status RunOp(DirFixture& fx, uint64_t root, int k, bool big, Model* m) {
  auto tx = fx.Tx();
  if (!big) {
    MAPFS_RETURN_IF_ERROR(fx.cib->Insert(root, Name(k), {5000u + k, DT_REG}, &tx));
    (*m)[Name(k)] = {5000u + static_cast<uint64_t>(k), DT_REG};
    return tx.Commit();
  }
  for (int j = 0; j < 90; j++) {
    if (j % 3 == 0) {
      MAPFS_RETURN_IF_ERROR(fx.cib->Remove(root, Name(j), &tx));
      m->erase(Name(j));
    } else if (j % 3 == 1) {
      MAPFS_RETURN_IF_ERROR(fx.cib->Replace(root, Name(j), {9000u + j, DT_DIR}, &tx));
      (*m)[Name(j)] = {9000u + static_cast<uint64_t>(j), DT_DIR};
    }
    MAPFS_RETURN_IF_ERROR(fx.cib->Insert(root, Name(k + j), {5000u + k + j, DT_REG}, &tx));
    (*m)[Name(k + j)] = {5000u + static_cast<uint64_t>(k + j), DT_REG};
  }
  return tx.Commit();
}

struct Reference {
  int k = 0;  // entries before the operation
  Model pre, post;
  dir::CibStats pre_stats;
  uint64_t root = 0;
};

class dir_crash : public ::testing::TestWithParam<Scenario> {
 protected:
  void SetUp() override {
    dir::SetHashForTesting(GetParam().hash);
    dir::SetIndexCapacityForTesting(GetParam().index_cap);
  }
  void TearDown() override {
    dir::SetHashForTesting(nullptr);
    dir::SetIndexCapacityForTesting(0);
  }

  static uint64_t Stat(const dir::CibStats& s, Trigger t) { return t == Trigger::kBlocks ? s.blocks : s.nodes; }

  // Fills a fresh directory with entries 0..k-1.
  static void Fill(DirFixture& fx, uint64_t root, int k, Model* m) {
    for (int i = 0; i < k; i++) {
      DIR_ASSERT_OK(fx.Insert(root, Name(i), 1u + i));
      (*m)[Name(i)] = {1u + static_cast<uint64_t>(i), DT_REG};
    }
  }

  // Finds k, the directory size on which the operation changes the
  // triggering counter, and the states around the operation.
  void MakeReference(Reference* ref) {
    const Scenario& s = GetParam();
    int k = 300;
    if (!s.big_tx) {
      // One pass: the first insert that changes the counter.
      TempPool tp(64 * MiB);
      DirFixture fx;
      ASSERT_TRUE(fx.Open(tp.path()));
      auto root = fx.cib->Create();
      DIR_ASSERT_OK(root);
      for (k = 0;; k++) {
        ASSERT_LT(k, 100000) << "no insert changed the structure";
        auto st0 = fx.cib->Stats(*root);
        Model dummy;
        DIR_ASSERT_OK(RunOp(fx, *root, k, false, &dummy));
        if (Stat(*fx.cib->Stats(*root), s.trigger) != Stat(*st0, s.trigger)) break;
      }
      fx.Close();
    }
    for (;; k += 50) {
      ASSERT_LT(k, 5000) << "the transaction never changed the structure";
      TempPool tp(64 * MiB);
      DirFixture fx;
      ASSERT_TRUE(fx.Open(tp.path()));
      auto root = fx.cib->Create();
      DIR_ASSERT_OK(root);
      Model m;
      Fill(fx, *root, k, &m);
      ASSERT_FALSE(HasFatalFailure());
      auto before = fx.cib->Stats(*root);
      DIR_ASSERT_OK(before);
      Model post = m;
      DIR_ASSERT_OK(RunOp(fx, *root, k, s.big_tx, &post));
      auto after = fx.cib->Stats(*root);
      bool changed = Stat(*after, s.trigger) != Stat(*before, s.trigger);
      if (!s.big_tx) {
        ASSERT_TRUE(changed) << "directory layout is not deterministic";
      }
      if (!changed) continue;
      ref->k = k;
      ref->pre = m;
      ref->post = post;
      ref->pre_stats = *before;
      ref->root = *root;
      EXPECT_TRUE(SameEntries(fx.Checked(*root), post));
      std::printf("%s: operation on %d entries, %llu -> %llu blocks, %llu -> %llu nodes\n", s.name, k,
                  (unsigned long long)before->blocks, (unsigned long long)after->blocks,
                  (unsigned long long)before->nodes, (unsigned long long)after->nodes);
      fx.Close();
      return;
    }
  }

  static int RunChild(const std::string& path, uint64_t root, int k, bool big, int n) {
    pid_t pid = ::fork();
    if (pid == 0) {
      DirFixture fx;
      auto m = Mount::Open(path);
      if (!m.ok()) _exit(kOpenFailed);
      fx.mount = std::move(*m);
      fx.cib = std::make_unique<dir::Cib>(dir::Env{&fx.mount->pool(), &fx.mount->vm(), &fx.mount->space()});
      FenceKiller killer(n);
      medium::SetTraceHook(&killer);
      Model dummy;
      Status st = RunOp(fx, root, k, big, &dummy);
      _exit(st.ok() ? kCompleted : kOpFailed);
    }
    int st = 0;
    if (pid < 0 || ::waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
};

TEST_P(dir_crash, RecoverAtEveryFence) {
  const Scenario& s = GetParam();
  Reference ref;
  MakeReference(&ref);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_FALSE(SameEntries(ref.pre, ref.post));
  int befores = 0, afters = 0, leaks = 0;
  for (int n = 1; n < 100000; n++) {
    SCOPED_TRACE("crash at fence " + std::to_string(n));
    TempPool tp(64 * MiB);
    std::set<uint64_t> allocated_before;
    {
      DirFixture fx;
      ASSERT_TRUE(fx.Open(tp.path()));
      auto root = fx.cib->Create();
      DIR_ASSERT_OK(root);
      ASSERT_EQ(*root, ref.root) << "setup is not deterministic";
      Model m;
      Fill(fx, *root, ref.k, &m);
      ASSERT_FALSE(HasFatalFailure());
      auto st = fx.cib->Stats(*root);
      ASSERT_EQ(st->blocks, ref.pre_stats.blocks) << "setup is not deterministic";
      std::vector<space::PartitionInfo> parts;
      DIR_ASSERT_OK(fx.mount->space().Check(&parts));
      for (auto& p : parts) allocated_before.insert(p.voff);
      fx.Close();
    }
    int code = RunChild(tp.path(), ref.root, ref.k, s.big_tx, n);
    ASSERT_TRUE(code == kDiedAtFence || code == kCompleted) << "child exit " << code;
    DirFixture fx;
    ASSERT_TRUE(fx.Open(tp.path()));
    EXPECT_TRUE(fx.mount->recovered());
    auto now = fx.Checked(ref.root);
    bool before = SameEntries(now, ref.pre), after = SameEntries(now, ref.post);
    EXPECT_TRUE(before || after) << "recovered to " << now.size() << " entries: neither before (" << ref.pre.size()
                                 << ") nor after (" << ref.post.size() << ")";
    if (code == kCompleted) {
      EXPECT_TRUE(after) << "a completed operation was lost";
    }
    EXPECT_TRUE(SameEntries(fx.ListAll(ref.root), now));
    EXPECT_EQ(*fx.cib->Count(ref.root), now.size());
    // Partitions: the directory owns only allocated ones; the rest of what is
    // allocated is what it had before plus, at most, what the operation
    // allocated and did not link yet.
    std::set<uint64_t> owned, allocated;
    DIR_EXPECT_OK(fx.cib->ForEachPartition(ref.root, [&](uint64_t v) { owned.insert(v); }));
    std::vector<space::PartitionInfo> parts;
    DIR_EXPECT_OK(fx.mount->space().Check(&parts));
    for (auto& p : parts) allocated.insert(p.voff);
    for (uint64_t v : owned) {
      EXPECT_TRUE(allocated.count(v)) << "directory owns a free partition " << v;
    }
    for (uint64_t v : allocated_before) {
      EXPECT_TRUE(allocated.count(v)) << "a partition was freed " << v;
    }
    std::vector<uint64_t> leaked;
    for (uint64_t v : allocated)
      if (!owned.count(v)) leaked.push_back(v);
    EXPECT_LE(leaked.size(), 3u);
    if (code == kCompleted) {
      EXPECT_TRUE(leaked.empty());
    }
    leaks += !leaked.empty();
    // Recovery's job for leaks, then the directory keeps working.
    for (uint64_t v : leaked) {
      DIR_EXPECT_OK(fx.mount->space().Free(v));
    }
    for (int i = 0; i < 200; i++) DIR_ASSERT_OK(fx.Insert(ref.root, "later" + std::to_string(i), 1));
    EXPECT_EQ(fx.Checked(ref.root).size(), now.size() + 200);
    fx.Close();
    if (HasFailure()) return;
    if (code == kCompleted) break;
    (after ? afters : befores)++;
  }
  std::printf("%s: %d crash points before the commit, %d after, %d leaving a leak\n", s.name, befores, afters, leaks);
  EXPECT_GT(befores, 0);
  EXPECT_GT(afters, 0);
  EXPECT_GT(leaks, 0) << "some crash point should fall between an allocation and its link";
}

INSTANTIATE_TEST_SUITE_P(DirOps, dir_crash, ::testing::ValuesIn(kScenarios),
                         [](const auto& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace mapfs::testing
