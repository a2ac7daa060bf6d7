// CIB directories against a model (std::map): random operations, several per
// transaction, some transactions abandoned, the pool reopened between
// rounds. Also: stores of several operations composing in one transaction,
// and a full pool.
#include <map>

#include "dir_test_util.h"

namespace mapfs::testing {
namespace {

using Model = std::map<std::string, dir::Entry>;

uint64_t Fnv(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
uint64_t Coarse16(std::string_view s) { return Fnv(s) % 16 * 0x1000000000000000ull; }

struct Params {
  const char* name;
  uint64_t seed;
  int index_cap;                        // 0: real capacities
  uint64_t (*hash)(std::string_view);   // nullptr: the real hash
  int names;                            // distinct candidate names
};

void PrintTo(const Params& p, std::ostream* os) { *os << p.name; }

class dir_model : public ::testing::TestWithParam<Params> {};

void ExpectMatches(DirFixture& fx, uint64_t root, const Model& m, const std::string& when) {
  SCOPED_TRACE(when);
  auto checked = fx.Checked(root);
  EXPECT_TRUE(SameEntries(checked, m)) << "Check lists " << checked.size() << ", model " << m.size();
  EXPECT_TRUE(SameEntries(fx.ListAll(root), m));
  auto n = fx.cib->Count(root);
  DIR_EXPECT_OK(n);
  EXPECT_EQ(*n, m.size());
}

TEST_P(dir_model, RandomOperations) {
  const Params& p = GetParam();
  dir::SetIndexCapacityForTesting(p.index_cap);
  dir::SetHashForTesting(p.hash);
  TempPool tp(128 * MiB);
  DirFixture fx;
  ASSERT_TRUE(fx.Open(tp.path()));
  auto r = fx.cib->Create();
  DIR_ASSERT_OK(r);
  const uint64_t root = *r;
  Model model;
  Rng rng(p.seed);
  auto name = [&](uint64_t j) { return NameFor(j, p.seed); };
  for (int round = 0; round < 6; round++) {
    for (int t = 0; t < 1000; t++) {
      auto tx = fx.Tx();
      Model next = model;
      int ops = 1 + static_cast<int>(rng.Below(8));
      // Inserts dominate early so the directory grows and splits.
      for (int k = 0; k < ops; k++) {
        std::string n = name(rng.Below(p.names));
        dir::Entry e{1 + rng.Below(1000000), static_cast<uint8_t>(1 + rng.Below(12))};
        uint64_t op = rng.Below(10);
        bool present = next.count(n) != 0;
        if (op < (round < 3 ? 6u : 4u)) {
          Status st = fx.cib->Insert(root, n, e, &tx);
          ASSERT_EQ(st.code(), present ? EEXIST : 0) << "insert " << n << ": " << Describe(st);
          if (!present) next[n] = e;
        } else if (op < 8) {
          Status st = fx.cib->Remove(root, n, &tx);
          ASSERT_EQ(st.code(), present ? 0 : ENOENT) << "remove " << n << ": " << Describe(st);
          next.erase(n);
        } else {
          Status st = fx.cib->Replace(root, n, e, &tx);
          ASSERT_EQ(st.code(), present ? 0 : ENOENT) << "replace " << n << ": " << Describe(st);
          if (present) next[n] = e;
        }
      }
      if (rng.Below(10) == 0) continue;  // abandoned: nothing of it may show
      DIR_ASSERT_OK(tx.Commit());
      model.swap(next);
      if (t % 50 == 0) {
        for (int k = 0; k < 20; k++) {
          std::string n = name(rng.Below(p.names));
          auto e = fx.cib->Lookup(root, n);
          auto it = model.find(n);
          if (it == model.end()) {
            ASSERT_EQ(e.status().code(), ENOENT) << n;
          } else {
            ASSERT_TRUE(e.ok()) << n << ": " << Describe(e);
            ASSERT_EQ(e->ino, it->second.ino) << n;
            ASSERT_EQ(e->type, it->second.type) << n;
          }
        }
      }
    }
    ExpectMatches(fx, root, model, "round " + std::to_string(round));
    if (HasFailure()) break;
    fx.Close();
    ASSERT_TRUE(fx.Open(tp.path()));
    ExpectMatches(fx, root, model, "reopened after round " + std::to_string(round));
  }
  std::printf("%s: %zu entries, %llu blocks, depth %u\n", p.name, model.size(),
              (unsigned long long)fx.cib->Stats(root)->blocks, fx.cib->Stats(root)->depth);
  fx.Close();
  dir::SetIndexCapacityForTesting(0);
  dir::SetHashForTesting(nullptr);
}

INSTANTIATE_TEST_SUITE_P(Seeds, dir_model,
                         ::testing::Values(Params{"Seed1", 1, 0, nullptr, 3000}, Params{"Seed2", 2, 0, nullptr, 6000},
                                           Params{"Seed3DeepIndex", 3, 3, nullptr, 3000},
                                           Params{"Seed4Cap5", 4, 5, nullptr, 6000},
                                           Params{"Seed5Coarse", 5, 0, &Coarse16, 2000},
                                           Params{"Seed6CoarseDeep", 6, 3, &Coarse16, 2000}),
                         [](const auto& i) { return std::string(i.param.name); });

class dir_tx : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fx_.Open(tp_.path()));
    auto r = fx_.cib->Create();
    DIR_ASSERT_OK(r);
    root_ = *r;
  }
  void TearDown() override { fx_.Close(); }
  TempPool tp_{128 * MiB};
  DirFixture fx_;
  uint64_t root_ = 0;
};

// Several operations on one block (one bitmap word) in one transaction.
TEST_F(dir_tx, OperationsComposeInOneTransaction) {
  DIR_ASSERT_OK(fx_.Insert(root_, "old", 1));
  DIR_ASSERT_OK(fx_.Insert(root_, "keep", 2));
  auto tx = fx_.Tx();
  DIR_ASSERT_OK(fx_.cib->Insert(root_, "a", {10, DT_REG}, &tx));
  DIR_ASSERT_OK(fx_.cib->Insert(root_, "b", {11, DT_REG}, &tx));
  DIR_ASSERT_OK(fx_.cib->Insert(root_, std::string(200, 'c'), {12, DT_REG}, &tx));
  EXPECT_EQ(fx_.cib->Insert(root_, "a", {99, DT_REG}, &tx).code(), EEXIST) << "pending insert not seen";
  DIR_ASSERT_OK(fx_.cib->Remove(root_, "a", &tx));
  EXPECT_EQ(fx_.cib->Remove(root_, "a", &tx).code(), ENOENT) << "pending remove not seen";
  DIR_ASSERT_OK(fx_.cib->Insert(root_, "a", {13, DT_DIR}, &tx));  // the slot of the first "a" again
  DIR_ASSERT_OK(fx_.cib->Replace(root_, "b", {14, DT_LNK}, &tx));
  DIR_ASSERT_OK(fx_.cib->Replace(root_, "b", {15, DT_LNK}, &tx));
  DIR_ASSERT_OK(fx_.cib->Remove(root_, "old", &tx));
  DIR_ASSERT_OK(fx_.cib->Insert(root_, "old", {16, DT_REG}, &tx));  // rename over itself
  DIR_ASSERT_OK(fx_.cib->Remove(root_, std::string(200, 'c'), &tx));
  DIR_ASSERT_OK(fx_.cib->Insert(root_, std::string(201, 'c'), {17, DT_REG}, &tx));
  // Exchange.
  DIR_ASSERT_OK(fx_.cib->Replace(root_, "keep", {15, DT_LNK}, &tx));
  DIR_ASSERT_OK(fx_.cib->Replace(root_, "b", {2, DT_REG}, &tx));
  // Nothing visible before the commit.
  EXPECT_EQ(fx_.cib->Lookup(root_, "a").status().code(), ENOENT);
  EXPECT_EQ(fx_.cib->Lookup(root_, "old")->ino, 1u);
  EXPECT_EQ(*fx_.cib->Count(root_), 2u);
  DIR_ASSERT_OK(tx.Commit());
  Model want{{"a", {13, DT_DIR}},   {"b", {2, DT_REG}},   {"keep", {15, DT_LNK}},
             {"old", {16, DT_REG}}, {std::string(201, 'c'), {17, DT_REG}}};
  ExpectMatches(fx_, root_, want, "after commit");
}

// A transaction whose later inserts split blocks its earlier operations
// touched: the pending stores must follow the moved entries.
TEST_F(dir_tx, SplitsInsideATransaction) {
  for (int cap : {0, 3}) {
    SCOPED_TRACE("index cap " + std::to_string(cap));
    dir::SetIndexCapacityForTesting(cap);
    auto r = fx_.cib->Create();
    DIR_ASSERT_OK(r);
    Model m;
    for (int i = 0; i < 500; i++) {
      DIR_ASSERT_OK(fx_.Insert(*r, NameFor(i), 1 + i));
      m[NameFor(i)] = {1u + i, DT_REG};
    }
    Rng rng(11 + cap);
    auto blocks_start = fx_.cib->Stats(*r)->blocks;
    for (int round = 0; round < 8; round++) {
      auto tx = fx_.Tx();
      Model next = m;
      auto blocks0 = fx_.cib->Stats(*r)->blocks;
      for (int k = 0; k < 250; k++) {
        // Remove and replace existing entries, insert new ones: interleaved,
        // so that splits land between them.
        auto it = next.begin();
        std::advance(it, rng.Below(next.size()));
        std::string victim = it->first;
        if (k % 3 == 0) {
          DIR_ASSERT_OK(fx_.cib->Remove(*r, victim, &tx));
          next.erase(victim);
        } else if (k % 3 == 1) {
          dir::Entry e{5000u + k, DT_DIR};
          DIR_ASSERT_OK(fx_.cib->Replace(*r, victim, e, &tx));
          next[victim] = e;
        }
        std::string n = (k % 25 == 0 ? NameFor(k) : "") + "new" + std::to_string(round * 1000 + k);
        DIR_ASSERT_OK(fx_.cib->Insert(*r, n, {7u + k, DT_REG}, &tx));
        next[n] = {7u + k, DT_REG};
        if (k % 40 == 39) {  // insert, remove, insert again the same new name
          DIR_ASSERT_OK(fx_.cib->Remove(*r, n, &tx));
          DIR_ASSERT_OK(fx_.cib->Insert(*r, n, {8u + k, DT_REG}, &tx));
          next[n] = {8u + k, DT_REG};
        }
      }
      std::printf("round %d: %llu -> %llu blocks\n", round, (unsigned long long)blocks0,
                  (unsigned long long)fx_.cib->Stats(*r)->blocks);
      if (round % 2 == 1) {
        // Abandoned after its splits committed: contents unchanged.
        ExpectMatches(fx_, *r, m, "abandoned round " + std::to_string(round));
        continue;
      }
      DIR_ASSERT_OK(tx.Commit());
      m.swap(next);
      ExpectMatches(fx_, *r, m, "round " + std::to_string(round));
    }
    EXPECT_GE(fx_.cib->Stats(*r)->blocks, blocks_start + 8) << "the transactions should have split blocks";
    dir::SetIndexCapacityForTesting(0);
  }
}

// RemoveAt with the slot a Lookup found, after inserts in the same
// transaction split that block (and may have reused the slot for a new
// entry): the named entry goes, nothing else does (rename's Insert then
// RemoveAt). With the real hash and with 16 hash values (overflow blocks).
TEST_F(dir_tx, RemoveAtFollowsEntriesMovedBySplits) {
  for (auto* hash : {static_cast<uint64_t (*)(std::string_view)>(nullptr), &Coarse16}) {
    dir::SetHashForTesting(hash);
    auto r = fx_.cib->Create();
    DIR_ASSERT_OK(r);
    Model m;
    for (int i = 0; i < 300; i++) {
      DIR_ASSERT_OK(fx_.Insert(*r, NameFor(i), 1 + i));
      m[NameFor(i)] = {1u + i, DT_REG};
    }
    Rng rng(hash ? 5 : 6);
    auto blocks0 = fx_.cib->Stats(*r)->blocks;
    for (int k = 0; k < 300; k++) {
      auto it = m.begin();
      std::advance(it, rng.Below(m.size()));
      std::string victim = it->first;
      dir::EntryLoc loc;
      auto e = fx_.cib->Lookup(*r, victim, &loc);
      DIR_ASSERT_OK(e);
      auto tx = fx_.Tx();
      Model next = m;
      // Enough new names to split the victim's block now and then, and to
      // land in its old slot after a split moved it (the slot is free on
      // media and in the pending view then).
      for (int j = 0; j < 1 + static_cast<int>(rng.Below(30)); j++) {
        std::string n = "n" + std::to_string(k) + "-" + std::to_string(j) + (j == 2 ? std::string(60, 'x') : "");
        DIR_ASSERT_OK(fx_.cib->Insert(*r, n, {9000u + k, DT_REG}, &tx));
        next[n] = {9000u + k, DT_REG};
      }
      DIR_ASSERT_OK(fx_.cib->RemoveAt(*r, loc, victim, &tx));
      next.erase(victim);
      EXPECT_EQ(fx_.cib->RemoveAt(*r, loc, victim, &tx).code(), ENOENT) << "pending remove not seen";
      DIR_ASSERT_OK(tx.Commit());
      m.swap(next);
      if (k % 50 == 49) ExpectMatches(fx_, *r, m, "step " + std::to_string(k));
      if (HasFailure()) break;
    }
    ExpectMatches(fx_, *r, m, "end");
    EXPECT_GE(fx_.cib->Stats(*r)->blocks, blocks0 + 10) << "the inserts should have split blocks";
    dir::SetHashForTesting(nullptr);
  }
}

// Hashes in name order: "e<N>" high, "s<N>" low (below every "e").
uint64_t OrderedHash(std::string_view s) {
  uint64_t n = std::stoull(std::string(s.substr(1)));
  return s[0] == 'e' ? (n + 1) << 40 : n + 1;
}

// The case the pending view alone misses: a split moves the entry out of
// its slot and a later insert of the same transaction takes that slot. The
// bit at `loc` is then set in the pending view, for the newcomer.
TEST_F(dir_tx, RemoveAtDoesNotClearANewcomerInTheMovedEntrysSlot) {
  dir::SetHashForTesting(&OrderedHash);
  auto r = fx_.cib->Create();
  DIR_ASSERT_OK(r);
  Model m;
  for (int i = 1; i <= 62; i++) {  // one full block, e1 in slot 2 ... e62 in slot 63
    DIR_ASSERT_OK(fx_.Insert(*r, "e" + std::to_string(i), i));
    m["e" + std::to_string(i)] = {static_cast<uint64_t>(i), DT_REG};
  }
  dir::EntryLoc loc;
  DIR_ASSERT_OK(fx_.cib->Lookup(*r, "e40", &loc));  // in the upper half: a split moves it
  auto tx = fx_.Tx();
  DIR_ASSERT_OK(fx_.cib->Insert(*r, "e63", {63, DT_REG}, &tx));  // splits
  m["e63"] = {63, DT_REG};
  ASSERT_EQ(fx_.cib->Stats(*r)->blocks, 2u);
  for (int j = 1; j <= 20; j++) {  // the lower block's freed slots, e40's among them
    DIR_ASSERT_OK(fx_.cib->Insert(*r, "s" + std::to_string(j), {100u + j, DT_REG}, &tx));
    m["s" + std::to_string(j)] = {100u + static_cast<uint64_t>(j), DT_REG};
  }
  DIR_ASSERT_OK(fx_.cib->RemoveAt(*r, loc, "e40", &tx));
  m.erase("e40");
  DIR_ASSERT_OK(tx.Commit());
  ExpectMatches(fx_, *r, m, "after commit");
  dir::SetHashForTesting(nullptr);
}

// InsertAt at the spot FindForInsert gave: the entry lands as Insert would
// put it, and a spot made stale by stores of the same transaction in the
// block, or by a split committed since, is not used (the directory stays
// exact and no entry is overwritten).
TEST_F(dir_tx, InsertAtUsesOnlyASpotThatStillStands) {
  Model m;
  for (int i = 0; i < 200; i++) {
    DIR_ASSERT_OK(fx_.Insert(root_, NameFor(i), 1 + i));
    m[NameFor(i)] = {1u + i, DT_REG};
  }
  dir::InsertSpot spot;
  auto found = fx_.cib->FindForInsert(root_, NameFor(7), &spot);
  DIR_ASSERT_OK(found);
  EXPECT_EQ(found->ino, 8u);
  for (int k = 0; k < 300; k++) {
    std::string a = "a" + std::to_string(k), b = "b" + std::to_string(k);
    ASSERT_EQ(fx_.cib->FindForInsert(root_, a, &spot).status().code(), ENOENT);
    auto tx = fx_.Tx();
    if (k % 3 == 1) {
      // The same transaction fills the block first (its slots are pending).
      dir::InsertSpot other;
      ASSERT_EQ(fx_.cib->FindForInsert(root_, b, &other).status().code(), ENOENT);
      DIR_ASSERT_OK(fx_.cib->InsertAt(root_, other, b, {500u + k, DT_REG}, &tx));
      m[b] = {500u + k, DT_REG};
    } else if (k % 3 == 2) {
      // Committed changes since the spot was taken (splits among them).
      for (int j = 0; j < 8; j++) {
        std::string c = b + "-" + std::to_string(j);
        DIR_ASSERT_OK(fx_.Insert(root_, c, 700u + j));
        m[c] = {700u + static_cast<uint64_t>(j), DT_REG};
      }
    }
    DIR_ASSERT_OK(fx_.cib->InsertAt(root_, spot, a, {1000u + k, DT_DIR}, &tx));
    m[a] = {1000u + k, DT_DIR};
    DIR_ASSERT_OK(tx.Commit());
    if (k % 50 == 49) ExpectMatches(fx_, root_, m, "step " + std::to_string(k));
    if (HasFailure()) break;
  }
  ExpectMatches(fx_, root_, m, "end");
}

TEST(dir_full, EnospcLeavesDirectoryConsistent) {
  TempPool tp(16 * MiB);
  ASSERT_TRUE(tp.status().ok()) << Describe(tp.status());
  DirFixture fx;
  ASSERT_TRUE(fx.Open(tp.path()));
  auto r = fx.cib->Create();
  DIR_ASSERT_OK(r);
  Model m;
  Status st;
  int i = 0;
  for (; i < 2000000; i++) {
    std::string n = "full" + std::to_string(i) + std::string(100 + i % 120, 'x');
    auto tx = fx.Tx();
    st = fx.cib->Insert(*r, n, {1u + i, DT_REG}, &tx);
    if (!st.ok()) break;
    st = tx.Commit();
    ASSERT_TRUE(st.ok()) << Describe(st);
    m[n] = {1u + i, DT_REG};
  }
  ASSERT_EQ(st.code(), ENOSPC) << Describe(st);
  std::printf("pool full after %d entries\n", i);
  ExpectMatches(fx, *r, m, "at ENOSPC");
  for (auto& [n, e] : m) {
    auto got = fx.cib->Lookup(*r, n);
    ASSERT_TRUE(got.ok()) << n;
    ASSERT_EQ(got->ino, e.ino);
  }
  // Short names still fit in the free slots of existing blocks; removal
  // works; everything survives a reopen.
  int more = 0;
  for (int k = 0; k < 50; k++) {
    std::string n = "s" + std::to_string(k);
    Status s2 = fx.Insert(*r, n, 3);
    if (s2.ok()) {
      m[n] = {3, DT_REG};
      more++;
    } else {
      ASSERT_EQ(s2.code(), ENOSPC);
    }
  }
  for (int k = 0; k < 100 && !m.empty(); k++) {
    auto it = m.begin();
    DIR_ASSERT_OK(fx.Remove(*r, it->first));
    m.erase(it);
  }
  fx.Close();
  ASSERT_TRUE(fx.Open(tp.path()));
  ExpectMatches(fx, *r, m, "reopened");
  fx.Close();
}

}  // namespace
}  // namespace mapfs::testing
