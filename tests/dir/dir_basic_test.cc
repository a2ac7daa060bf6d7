// CIB directories: basic operations, errors, names, persistence, partition
// ownership, damage detection.
#include <dirent.h>

#include <cstring>

#include "dir/cib_format.h"
#include "dir_test_util.h"
#include "space/partitions.h"

namespace mapfs::testing {
namespace {

class dir_basic : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tp_.status().ok()) << Describe(tp_.status());
    ASSERT_TRUE(fx_.Open(tp_.path()));
    auto r = fx_.cib->Create();
    ASSERT_TRUE(r.ok()) << Describe(r);
    root_ = *r;
  }
  void TearDown() override { fx_.Close(); }
  void Reopen() {
    fx_.Close();
    ASSERT_TRUE(fx_.Open(tp_.path()));
  }

  TempPool tp_{64 * MiB};
  DirFixture fx_;
  uint64_t root_ = 0;
};

TEST_F(dir_basic, EmptyDirectory) {
  auto n = fx_.cib->Count(root_);
  DIR_ASSERT_OK(n);
  EXPECT_EQ(*n, 0u);
  EXPECT_TRUE(fx_.ListAll(root_).empty());
  EXPECT_TRUE(fx_.Checked(root_).empty());
  EXPECT_EQ(fx_.cib->Lookup(root_, "x").status().code(), ENOENT);
  auto s = fx_.cib->Stats(root_);
  DIR_ASSERT_OK(s);
  EXPECT_EQ(s->blocks, 1u);
  EXPECT_EQ(s->nodes, 0u);
}

TEST_F(dir_basic, InsertLookupRemoveReplace) {
  DIR_ASSERT_OK(fx_.Insert(root_, "alpha", 10, DT_REG));
  DIR_ASSERT_OK(fx_.Insert(root_, "beta", 11, DT_DIR));
  auto a = fx_.cib->Lookup(root_, "alpha");
  DIR_ASSERT_OK(a);
  EXPECT_EQ(a->ino, 10u);
  EXPECT_EQ(a->type, DT_REG);
  auto b = fx_.cib->Lookup(root_, "beta");
  DIR_ASSERT_OK(b);
  EXPECT_EQ(b->ino, 11u);
  EXPECT_EQ(b->type, DT_DIR);
  EXPECT_EQ(*fx_.cib->Count(root_), 2u);

  EXPECT_EQ(fx_.Insert(root_, "alpha", 99).code(), EEXIST);
  EXPECT_EQ(fx_.cib->Lookup(root_, "alpha")->ino, 10u) << "a refused insert changed the entry";

  DIR_ASSERT_OK(fx_.Replace(root_, "alpha", 20, DT_LNK));
  a = fx_.cib->Lookup(root_, "alpha");
  EXPECT_EQ(a->ino, 20u);
  EXPECT_EQ(a->type, DT_LNK);
  EXPECT_EQ(*fx_.cib->Count(root_), 2u);

  DIR_ASSERT_OK(fx_.Remove(root_, "alpha"));
  EXPECT_EQ(fx_.cib->Lookup(root_, "alpha").status().code(), ENOENT);
  EXPECT_EQ(fx_.Remove(root_, "alpha").code(), ENOENT);
  EXPECT_EQ(fx_.Replace(root_, "alpha", 1).code(), ENOENT);
  EXPECT_EQ(*fx_.cib->Count(root_), 1u);
  // The name can come back.
  DIR_ASSERT_OK(fx_.Insert(root_, "alpha", 30));
  EXPECT_EQ(fx_.cib->Lookup(root_, "alpha")->ino, 30u);
  auto all = fx_.ListAll(root_);
  EXPECT_EQ(all.size(), 2u);
  EXPECT_EQ(all["alpha"].ino, 30u);
  EXPECT_EQ(all["beta"].ino, 11u);
  EXPECT_EQ(fx_.Checked(root_).size(), 2u);
}

TEST_F(dir_basic, NameRules) {
  auto tx = fx_.Tx();
  EXPECT_EQ(fx_.cib->Insert(root_, "", {1, DT_REG}, &tx).code(), EINVAL);
  EXPECT_EQ(fx_.cib->Insert(root_, "a/b", {1, DT_REG}, &tx).code(), EINVAL);
  EXPECT_EQ(fx_.cib->Insert(root_, std::string_view("a\0b", 3), {1, DT_REG}, &tx).code(), EINVAL);
  EXPECT_EQ(fx_.cib->Insert(root_, ".", {1, DT_REG}, &tx).code(), EINVAL);
  EXPECT_EQ(fx_.cib->Insert(root_, "..", {1, DT_REG}, &tx).code(), EINVAL);
  EXPECT_EQ(fx_.cib->Insert(root_, std::string(256, 'x'), {1, DT_REG}, &tx).code(), ENAMETOOLONG);
  EXPECT_EQ(fx_.cib->Lookup(root_, std::string(256, 'x')).status().code(), ENAMETOOLONG);
  EXPECT_TRUE(tx.empty()) << "a refused insert recorded stores";

  // Lengths around every slot boundary: 1, inline limit (42), one more,
  // each continuation boundary, and 255. Names differing only in the last
  // byte or only in length must stay distinct.
  std::vector<std::string> names;
  for (size_t len : {1, 2, 41, 42, 43, 105, 106, 107, 169, 170, 171, 233, 234, 235, 254, 255}) {
    names.push_back(std::string(len, 'n'));
    std::string v(len, 'n');
    v.back() = 'z';
    names.push_back(v);
  }
  names.push_back(".a");
  names.push_back("...");
  names.push_back("\xff\xfe");
  uint64_t ino = 100;
  for (auto& n : names) DIR_ASSERT_OK(fx_.Insert(root_, n, ino++));
  ino = 100;
  for (auto& n : names) {
    auto e = fx_.cib->Lookup(root_, n);
    DIR_ASSERT_OK(e);
    EXPECT_EQ(e->ino, ino++) << "length " << n.size();
  }
  EXPECT_EQ(fx_.cib->Lookup(root_, std::string(44, 'n')).status().code(), ENOENT);
  auto all = fx_.ListAll(root_);
  EXPECT_EQ(all.size(), names.size());
  for (auto& n : names) EXPECT_EQ(all.count(n), 1u) << "length " << n.size();
  EXPECT_EQ(fx_.Checked(root_).size(), names.size());
  // Remove the long ones: their continuation slots must become reusable.
  for (auto& n : names)
    if (n.size() > 42) DIR_ASSERT_OK(fx_.Remove(root_, n));
  for (int i = 0; i < 40; i++) DIR_ASSERT_OK(fx_.Insert(root_, "again" + std::to_string(i) + std::string(200, 'q'), 1));
  DIR_EXPECT_OK(fx_.cib->Check(root_));
}

TEST_F(dir_basic, Persistence) {
  for (int i = 0; i < 2000; i++) DIR_ASSERT_OK(fx_.Insert(root_, NameFor(i), 1000 + i, DT_REG));
  DIR_ASSERT_OK(fx_.Replace(root_, NameFor(7), 7, DT_DIR));
  DIR_ASSERT_OK(fx_.Remove(root_, NameFor(8)));
  Reopen();
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(*fx_.cib->Count(root_), 1999u);
  for (int i = 0; i < 2000; i++) {
    auto e = fx_.cib->Lookup(root_, NameFor(i));
    if (i == 8) {
      EXPECT_EQ(e.status().code(), ENOENT);
      continue;
    }
    DIR_ASSERT_OK(e);
    EXPECT_EQ(e->ino, i == 7 ? 7u : 1000u + i);
    EXPECT_EQ(e->type, i == 7 ? DT_DIR : DT_REG);
  }
  EXPECT_EQ(fx_.Checked(root_).size(), 1999u);
}

TEST_F(dir_basic, TwoDirectoriesAreIndependent) {
  auto r2 = fx_.cib->Create();
  DIR_ASSERT_OK(r2);
  DIR_ASSERT_OK(fx_.Insert(root_, "same", 1));
  DIR_ASSERT_OK(fx_.Insert(*r2, "same", 2));
  EXPECT_EQ(fx_.cib->Lookup(root_, "same")->ino, 1u);
  EXPECT_EQ(fx_.cib->Lookup(*r2, "same")->ino, 2u);
  // One transaction spanning both (rename across directories).
  auto tx = fx_.Tx();
  DIR_ASSERT_OK(fx_.cib->Remove(root_, "same", &tx));
  DIR_ASSERT_OK(fx_.cib->Insert(*r2, "moved", {1, DT_REG}, &tx));
  DIR_ASSERT_OK(tx.Commit());
  EXPECT_EQ(*fx_.cib->Count(root_), 0u);
  EXPECT_EQ(*fx_.cib->Count(*r2), 2u);
  EXPECT_EQ(fx_.cib->Lookup(*r2, "moved")->ino, 1u);
  DIR_EXPECT_OK(fx_.cib->Check(root_));
  DIR_EXPECT_OK(fx_.cib->Check(*r2));
}

TEST_F(dir_basic, PartitionsOwnedAndDestroyed) {
  auto& sp = fx_.mount->space();
  std::vector<space::PartitionInfo> before;
  DIR_ASSERT_OK(sp.Check(&before));
  auto r2 = fx_.cib->Create();
  DIR_ASSERT_OK(r2);
  for (int i = 0; i < 15000; i++) DIR_ASSERT_OK(fx_.Insert(*r2, NameFor(i), i + 1));
  std::set<uint64_t> owned;
  DIR_ASSERT_OK(fx_.cib->ForEachPartition(*r2, [&](uint64_t v) { EXPECT_TRUE(owned.insert(v).second) << v; }));
  auto st = fx_.cib->Stats(*r2);
  DIR_ASSERT_OK(st);
  EXPECT_EQ(owned.size(), 1 + st->blocks + st->nodes);
  EXPECT_GT(st->nodes, 0u) << "15000 entries should need index nodes";
  std::vector<space::PartitionInfo> during;
  DIR_ASSERT_OK(sp.Check(&during));
  std::set<uint64_t> fresh;
  for (auto& p : during) fresh.insert(p.voff);
  for (auto& p : before) fresh.erase(p.voff);
  EXPECT_EQ(fresh, owned) << "the directory's partitions are exactly those it allocated";
  DIR_ASSERT_OK(fx_.cib->Destroy(*r2));
  std::vector<space::PartitionInfo> after;
  DIR_ASSERT_OK(sp.Check(&after));
  EXPECT_EQ(after.size(), before.size());
  // The first directory is untouched.
  DIR_EXPECT_OK(fx_.cib->Check(root_));
}

TEST_F(dir_basic, DamageIsReportedNotTrusted) {
  for (int i = 0; i < 300; i++) DIR_ASSERT_OK(fx_.Insert(root_, NameFor(i), i + 1));
  auto& vm = fx_.mount->vm();
  auto* r = reinterpret_cast<dir::format::Root*>(vm.at(root_));
  // A changed counter breaks the root checksum.
  uint64_t saved = r->nblocks;
  r->nblocks += 1;
  auto e = fx_.cib->Lookup(root_, NameFor(1));
  EXPECT_EQ(e.status().code(), EUCLEAN);
  EXPECT_NE(e.status().message().find("checksum"), std::string::npos) << e.status().message();
  EXPECT_EQ(fx_.cib->Check(root_).code(), EUCLEAN);
  r->nblocks = saved;
  DIR_ASSERT_OK(fx_.cib->Check(root_));

  // A flipped hash in an entry: Check names the slot's offset.
  uint64_t blk = r->depth == 0 ? r->top[0].child : 0;
  ASSERT_NE(blk, 0u);
  auto* b = reinterpret_cast<dir::format::BlockHeader*>(vm.at(blk));
  ASSERT_NE(b->bitmap, 0u);
  int slot = __builtin_ctzll(b->bitmap);
  auto* s = reinterpret_cast<dir::format::Slot*>(vm.at(blk + 64 * slot));
  s->hash ^= 1;
  Status cs = fx_.cib->Check(root_);
  EXPECT_EQ(cs.code(), EUCLEAN);
  char want[32];
  std::snprintf(want, sizeof want, "0x%llx", static_cast<unsigned long long>(blk + 64 * slot));
  EXPECT_NE(cs.message().find(want), std::string::npos) << cs.message();
  s->hash ^= 1;
  DIR_ASSERT_OK(fx_.cib->Check(root_));

  // A block claiming another owner; a root at a bad offset.
  b->owner ^= 4096;
  int damaged = 0;
  for (int i = 0; i < 300; i++) {
    auto got = fx_.cib->Lookup(root_, NameFor(i));
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), EUCLEAN);
      damaged++;
    }
  }
  EXPECT_GT(damaged, 0) << "names of the damaged block must not be served";
  EXPECT_EQ(fx_.cib->List(root_, 0, [](uint64_t, std::string_view, dir::Entry) { return true; }).code(), EUCLEAN);
  b->owner ^= 4096;
  EXPECT_EQ(fx_.cib->Lookup(root_ + 8, "x").status().code(), EUCLEAN);
  EXPECT_EQ(fx_.cib->Count(0).status().code(), EUCLEAN);
  DIR_EXPECT_OK(fx_.cib->Check(root_));
}

// Regression (issue 16, defect 1): a damaged block whose heads share
// continuation slots looks nearly empty to an insert, but a split packs
// every head with its own continuations into the new 4 KiB block. It used
// to write far past that block's buffer; it must report the damage.
TEST_F(dir_basic, SplitOfHeadsSharingContinuationsIsDamage) {
  const std::string base(255, 'n');
  for (int i = 0; i < 12; i++) DIR_ASSERT_OK(fx_.Insert(root_, base.substr(0, 250) + std::to_string(100 + i), i + 1));
  auto& vm = fx_.mount->vm();
  auto* r = reinterpret_cast<dir::format::Root*>(vm.at(root_));
  ASSERT_EQ(r->depth, 0u);
  uint64_t blk = r->top[0].child;
  auto* b = reinterpret_cast<dir::format::BlockHeader*>(vm.at(blk));
  ASSERT_EQ(__builtin_popcountll(b->bitmap), 12);
  // Every slot but the first head's continuations becomes a copy of the
  // first head (same continuation slots), at the top of the block's range.
  int h0 = __builtin_ctzll(b->bitmap);
  auto* s0 = reinterpret_cast<dir::format::Slot*>(vm.at(blk + 64 * h0));
  s0->hash = b->max;
  uint64_t conts = 0;
  for (int k = 0; k < dir::format::kMaxCont; k++) conts |= uint64_t{1} << s0->cont[k];
  for (int i = dir::format::kFirstSlot; i < dir::format::kSlots; i++) {
    if (i == h0 || (conts >> i & 1)) continue;
    std::memcpy(vm.at(blk + 64 * i), s0, sizeof *s0);
    b->bitmap |= uint64_t{1} << i;
    b->longmap |= uint64_t{1} << i;
    b->fp[i] = b->fp[h0];
  }
  // No room for another long name: the insert splits the block.
  Status st = fx_.Insert(root_, std::string(255, 'z'), 99);
  EXPECT_EQ(st.code(), EUCLEAN) << Describe(st);
  EXPECT_EQ(fx_.cib->Check(root_).code(), EUCLEAN);
}

}  // namespace
}  // namespace mapfs::testing
