// HashFS specifics: the batched SIMD hashing gives the scalar results on
// every path, collisions and long probe chains, tombstones, the translation
// cache, concurrent inserts, and damage Check() must find.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "map/hash.h"
#include "map/hashfs.h"
#include "map_test_util.h"

namespace mapfs::map {
namespace {

using testing::Rng;

TEST(MapHash, EveryInstructionSetGivesTheScalarSlots) {
  const HashIsa saved = CurrentHashIsa();
  Rng rng(1);
  std::vector<HashIsa> isas;
  for (HashIsa isa : {HashIsa::kScalar, HashIsa::kAvx2, HashIsa::kAvx512})
    if (HashIsaSupported(isa)) isas.push_back(isa);
  if (isas.size() == 1) GTEST_LOG_(INFO) << "only the scalar path runs on this CPU";
  for (int round = 0; round < 2000; round++) {
    uint64_t key = rng.Next();
    if (round % 7 == 0) key = (key | 0xffffffffull) - rng.Below(40);  // low half about to wrap
    uint32_t count = 1 + static_cast<uint32_t>(rng.Below(48));
    uint32_t n = round % 5 == 0 ? 0xffffffffu : 1 + static_cast<uint32_t>(rng.Below(1u << 30));
    uint32_t seed = round % 2 ? kSeedSecondary : kSeedPrimary;
    for (HashIsa isa : isas) {
      ASSERT_TRUE(SetHashIsa(isa));
      uint32_t out[48];
      HashConsecutive(key, count, seed, n, out);
      for (uint32_t i = 0; i < count; i++)
        ASSERT_EQ(out[i], SlotOf(key + i, seed, n)) << ToString(isa) << " key " << key << " + " << i << " n " << n;
    }
  }
  ASSERT_TRUE(SetHashIsa(saved));
}

class HashFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mp_ = std::make_unique<MapPool>(area_len_);
    FormatOptions opt;
    opt.kind = Kind::kHashFs;
    opt.max_ino = 1 << 20;
    ASSERT_TRUE(mp_->Format(opt).ok());
    ASSERT_TRUE(mp_->OpenMapper().ok());
  }
  Mapper* m() { return mp_->m(); }
  uint64_t* slots() {
    return reinterpret_cast<uint64_t*>(mp_->area() + reinterpret_cast<format::MapHeader*>(mp_->area())->table_off);
  }
  uint32_t n() { return static_cast<uint32_t>(m()->nblocks()); }
  // `count` inodes whose file block 0 hashes to `home`.
  std::vector<Ino> CollidingInodes(uint32_t home, int count) {
    std::vector<Ino> v;
    for (Ino ino = 1; static_cast<int>(v.size()) < count && ino < (1 << 20); ino++)
      if (SlotOf(format::MakeKey(ino, 0), kSeedPrimary, n()) == home) v.push_back(ino);
    EXPECT_EQ(static_cast<int>(v.size()), count);
    return v;
  }

  uint64_t area_len_ = 1 * MiB;
  std::unique_ptr<MapPool> mp_;
};

TEST_F(HashFsTest, CollidingKeysFormOneProbeChainThatSurvivesRemovals) {
  const uint32_t home = n() - 5;  // the chain wraps around the end of the table
  std::vector<Ino> inos = CollidingInodes(home, 24);
  Cursor c;
  for (Ino ino : inos) ASSERT_TRUE(m()->Insert(&c, ino, FileBlock(0), 1).ok());
  // The slot is the block: the chain occupies home, home+1, ... in order.
  for (size_t i = 0; i < inos.size(); i++) {
    Cursor fresh;
    Mapping mp;
    ASSERT_EQ(m()->Lookup(&fresh, inos[i], FileBlock(0), &mp), 0);
    ASSERT_TRUE(mp.mapped);
    EXPECT_EQ(mp.blk.v, (home + i) % n());
  }
  Cursor fresh;
  Mapping mp;
  ASSERT_EQ(m()->Lookup(&fresh, inos.back(), FileBlock(0), &mp), 0);
  EXPECT_GE(HashFsMapper::last_probes(), 24u) << "the last key needs the whole chain";
  // Removing a key in the middle leaves a tombstone: the keys after it stay
  // reachable, and the next colliding insert reuses the tombstone.
  ASSERT_TRUE(m()->Remove(&c, inos[10], FileBlock(0), 1).ok());
  for (size_t i = 11; i < inos.size(); i++) {
    Cursor f;
    ASSERT_EQ(m()->Lookup(&f, inos[i], FileBlock(0), &mp), 0);
    ASSERT_TRUE(mp.mapped) << "key " << i << " lost behind a removed one";
  }
  std::vector<Ino> more = CollidingInodes(home, 25);
  ASSERT_TRUE(m()->Insert(&c, more.back(), FileBlock(0), 1).ok());
  Cursor f;
  ASSERT_EQ(m()->Lookup(&f, more.back(), FileBlock(0), &mp), 0);
  EXPECT_EQ(mp.blk.v, (home + 10) % n());
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
}

TEST_F(HashFsTest, AFullTableWithoutEmptySlotsStillAnswers) {
  Cursor c;
  const uint32_t total = n();
  for (uint32_t i = 0; i < total; i++) ASSERT_TRUE(m()->Insert(&c, 1 + i % 7, FileBlock(i / 7), 1).ok());
  EXPECT_EQ(m()->Insert(&c, 9, FileBlock(0), 1).code(), ENOSPC);
  // Turn every slot into a key or a tombstone: lookups of absent keys must
  // stop after one round of the table.
  ASSERT_TRUE(m()->Remove(&c, 3, FileBlock(0), kToEnd).ok());
  Mapping mp;
  Cursor f;
  ASSERT_EQ(m()->Lookup(&f, 9, FileBlock(0), &mp), 0);
  EXPECT_FALSE(mp.mapped);
  for (uint32_t i = 0; i < total; i++) {
    Ino ino = 1 + i % 7;
    Cursor g;
    ASSERT_EQ(m()->Lookup(&g, ino, FileBlock(i / 7), &mp), 0);
    EXPECT_EQ(mp.mapped, ino != 3);
  }
  EXPECT_TRUE(m()->Insert(&c, 9, FileBlock(0), 3).ok());
  EXPECT_TRUE(m()->Check().ok());
}

TEST_F(HashFsTest, AMissFillsTheTranslationCacheWithTheNextBlocks) {
  Cursor c;
  ASSERT_TRUE(m()->Insert(&c, 5, FileBlock(0), 32).ok());
  Cursor reader;
  Mapping mp;
  ASSERT_EQ(m()->Lookup(&reader, 5, FileBlock(8), &mp), 0);
  for (uint64_t fb = 8; fb < 16; fb++) {
    const Cursor::Translation& t = reader.cache[fb % Cursor::kCacheEntries];
    EXPECT_EQ(t.fblk, fb) << "block " << fb << " was not prefetched";
    EXPECT_EQ(t.len, 1u);
  }
  // A removal through another cursor makes the cached translations stale.
  Cursor other;
  ASSERT_TRUE(m()->Remove(&other, 5, FileBlock(12), 1).ok());
  ASSERT_EQ(m()->Lookup(&reader, 5, FileBlock(12), &mp), 0);
  EXPECT_FALSE(mp.mapped);
}

TEST_F(HashFsTest, ConcurrentInsertsOfDifferentFilesTakeDistinctBlocks) {
  constexpr int kThreads = 4;
  const uint64_t per = n() / kThreads / 2;
  std::vector<std::thread> th;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; t++) {
    th.emplace_back([&, t] {
      Cursor c;
      for (uint64_t b = 0; b < per; b++)
        if (!m()->Insert(&c, 100 + t, FileBlock(b), 1).ok()) failures++;
    });
  }
  for (auto& x : th) x.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<uint64_t> blocks;
  for (int t = 0; t < kThreads; t++) {
    std::vector<uint64_t> out(per);
    Cursor c;
    ASSERT_EQ(m()->LookupRange(&c, 100 + t, FileBlock(0), per, out.data()), 0);
    for (uint64_t b : out) {
      ASSERT_NE(b, Mapper::kNoBlock);
      EXPECT_TRUE(blocks.insert(b).second) << "block " << b << " mapped twice";
    }
  }
  EXPECT_EQ(m()->usage().used_blocks, per * kThreads);
  EXPECT_TRUE(m()->Check().ok());
}

TEST_F(HashFsTest, CheckFindsUnreachableAndDuplicatedKeys) {
  const uint32_t home = 100;
  std::vector<Ino> inos = CollidingInodes(home, 4);
  Cursor c;
  for (Ino ino : inos) ASSERT_TRUE(m()->Insert(&c, ino, FileBlock(0), 1).ok());
  ASSERT_TRUE(m()->Check().ok());
  uint64_t saved = slots()[home + 1];
  slots()[home + 1] = 0;  // an empty slot cuts the chain
  Status st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("unreachable"), std::string::npos) << st.message();
  slots()[home + 1] = saved;
  slots()[home + 4] = slots()[home + 3];  // the same key in two slots
  st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("twice"), std::string::npos) << st.message();
  slots()[home + 4] = format::MakeKey(0, 3);  // inode 0
  st = m()->Check();
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("out of range"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mapfs::map
