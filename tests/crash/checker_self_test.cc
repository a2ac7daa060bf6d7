// The crash checker's own tests: it must catch known bugs, switched into
// the core on purpose (medium::InjectedBug, a test-only runtime switch), and its oracle must
// tell allowed states from forbidden ones.
#include <gtest/gtest.h>

#include "crash_workload.h"
#include "fs_test_util.h"
#include "medium/trace.h"

namespace mapfs::crash {
namespace {

class InjectedBugScope {
 public:
  explicit InjectedBugScope(medium::InjectedBug b) { medium::SetInjectedBug(b); }
  ~InjectedBugScope() { medium::SetInjectedBug(medium::InjectedBug::kNone); }
};

Workload Standard(const std::vector<std::string>& names) {
  Workload w{"", StandardTree, {}};
  for (const auto& n : names) {
    w.steps.push_back(CatalogueStep(n));
    w.name += n + " ";
  }
  return w;
}

// Without the bug the same workloads are clean: what the bug runs find is
// the bug's doing, not noise.
TEST(CrashCheckerSelfTest, CleanCoreHasNoViolations) {
  for (int mode : {MAPFS_MODE_SYNC, MAPFS_MODE_STRICT}) {
    Outcome o = RunWorkload(Standard({"create", "rename-replace", "write-pages"}), mode, Budget{});
    EXPECT_TRUE(o.violations.empty()) << o.violations.front();
    EXPECT_GT(o.counts.judged, 10u);
  }
}

// Flush() writing nothing back: stores stay in the cache, so a crash after
// the operation returned may lose them — the acknowledged create or write
// is gone (or half there). (File data is written with non-temporal stores,
// which need no flush, so a write is not among the victims.)
TEST(CrashCheckerSelfTest, CatchesMissingFlushes) {
  InjectedBugScope bug(medium::InjectedBug::kNoFlush);
  // Every subset of the lines in flight, so that catching the bug never
  // depends on which ones a sample happens to draw.
  Budget every_subset;
  every_subset.all_subsets_upto = 10;
  for (const char* op : {"create", "rename", "unlink-linked"}) {
    Outcome o = RunWorkload(Standard({op}), MAPFS_MODE_SYNC, every_subset);
    EXPECT_FALSE(o.violations.empty()) << op << ": a missing flush went unnoticed";
    if (!o.violations.empty()) std::printf("caught (%s): %s\n", op, o.violations.front().c_str());
  }
}

// Redo records applied in place before the transaction commits: a crash in
// the middle of that application leaves half an operation that recovery
// cannot undo or finish.
TEST(CrashCheckerSelfTest, CatchesInPlaceUpdateBeforeCommit) {
  InjectedBugScope bug(medium::InjectedBug::kApplyBeforeCommit);
  uint64_t caught = 0;
  for (const char* op : {"rename-replace", "rename-across", "unlink-linked", "create-in-dir"}) {
    Outcome o = RunWorkload(Standard({op}), MAPFS_MODE_SYNC, Budget{});
    caught += !o.violations.empty();
    if (!o.violations.empty()) std::printf("caught (%s): %s\n", op, o.violations.front().c_str());
  }
  EXPECT_GT(caught, 0u) << "an in-place update before the commit went unnoticed";
}

FsState OneFile(const std::string& bytes) {
  FsState s;
  s.tree["/f"] = Node{'f', 7, 0644, 1, 0, 0, ""};
  s.content[7] = bytes;
  return s;
}

TEST(CrashCheckerSelfTest, OracleTellsTornWritesByMode) {
  std::string old_bytes(256, 'o'), new_bytes(256, 'n'), torn = old_bytes;
  torn.replace(64, 64, std::string(64, 'n'));  // one line new, the rest old
  FsState before = OneFile(old_bytes), after = OneFile(new_bytes), got = OneFile(torn);
  std::vector<const FsState*> allowed{&before, &after};
  EXPECT_EQ(Judge(got, allowed, DataPromise::kPerLine), "");
  EXPECT_NE(Judge(got, allowed, DataPromise::kWholeFile), "");
  EXPECT_EQ(Judge(after, allowed, DataPromise::kWholeFile), "");
  // Bytes no version had, a size no version had, a renamed or lost name.
  FsState garbage = OneFile(std::string(256, 'x'));
  EXPECT_NE(Judge(garbage, allowed, DataPromise::kPerLine), "");
  FsState longer = OneFile(new_bytes + "x");
  EXPECT_NE(Judge(longer, allowed, DataPromise::kPerLine), "");
  FsState renamed = after;
  renamed.tree["/g"] = renamed.tree["/f"];
  renamed.tree.erase("/f");
  EXPECT_NE(Judge(renamed, allowed, DataPromise::kPerLine), "");
  FsState chmodded = after;
  chmodded.tree["/f"].perm = 0600;
  EXPECT_NE(Judge(chmodded, allowed, DataPromise::kPerLine), "");
}

}  // namespace
}  // namespace mapfs::crash
