// Every mapper design against a std::map model: random inserts, punches,
// truncations and lookups; a full area; 95 % utilisation; reopening from
// the pool bytes. One suite, instantiated for each design.
#include <gtest/gtest.h>

#include "map_test_util.h"

namespace mapfs::map {
namespace {

using testing::Rng;

class MapModel : public ::testing::TestWithParam<Kind> {
 protected:
  void Format(uint64_t area_len, FormatOptions opt = {}) {
    mp_ = std::make_unique<MapPool>(area_len);
    opt.kind = GetParam();
    opt.max_ino = 64;
    ASSERT_TRUE(mp_->Format(opt).ok());
    Status st = mp_->OpenMapper();
    ASSERT_TRUE(st.ok()) << Describe(st);
  }
  Mapper* m() { return mp_->m(); }
  std::unique_ptr<MapPool> mp_;
};

constexpr Ino kFiles = 9;       // inodes 1..8
constexpr uint64_t kSpan = 256; // file blocks used per file

TEST_P(MapModel, RandomOperationsMatchTheModel) {
  Format(8 * MiB);
  Model model;
  Rng rng(14);
  Cursor cur[kFiles];
  for (int op = 0; op < 3000; op++) {
    Ino ino = 1 + rng.Below(kFiles - 1);
    uint64_t fb = rng.Below(kSpan);
    switch (rng.Below(8)) {
      case 0: case 1: case 2: {  // insert a range, often at the end of the file
        uint64_t count = 1 + rng.Below(std::min<uint64_t>(12, kSpan - fb));
        bool clash = false;
        for (uint64_t k = 0; k < count; k++) clash |= model.Mapped(ino, fb + k);
        Status st = m()->Insert(&cur[ino], ino, FileBlock(fb), count);
        if (clash) {
          ASSERT_EQ(st.code(), EEXIST) << "op " << op << ": " << Describe(st);
        } else if (st.code() == ENOSPC) {
          ASSERT_GT(model.fwd.size() + count, m()->nblocks() / 2) << "ENOSPC while the area is half empty";
        } else {
          ASSERT_TRUE(st.ok()) << "op " << op << ": " << Describe(st);
          ASSERT_TRUE(model.Add(m(), ino, fb, count)) << "op " << op;
        }
        break;
      }
      case 3: {  // punch a hole
        uint64_t count = 1 + rng.Below(16);
        ASSERT_TRUE(m()->Remove(&cur[ino], ino, FileBlock(fb), count).ok());
        model.Erase(ino, fb, count);
        break;
      }
      case 4: {  // truncate
        if (rng.Below(4)) break;
        ASSERT_TRUE(m()->Remove(&cur[ino], ino, FileBlock(fb), kToEnd).ok());
        model.Erase(ino, fb, kToEnd);
        break;
      }
      default: {  // look up through the file's cursor
        Mapping mp;
        ASSERT_EQ(m()->Lookup(&cur[ino], ino, FileBlock(fb), &mp), 0);
        ASSERT_GE(mp.len, 1u);
        auto it = model.fwd.find({ino, fb});
        ASSERT_EQ(mp.mapped, it != model.fwd.end()) << "op " << op << " ino " << ino << " fblk " << fb;
        if (mp.mapped) {
          ASSERT_EQ(mp.blk.v, it->second) << "op " << op;
        }
        for (uint64_t k = 1; k < mp.len && fb + k < kSpan; k++) {
          auto jt = model.fwd.find({ino, fb + k});
          if (mp.mapped) {
            ASSERT_TRUE(jt != model.fwd.end() && jt->second == mp.blk.v + k) << "op " << op << " run too long";
          } else {
            ASSERT_TRUE(jt == model.fwd.end()) << "op " << op << " hole too long";
          }
        }
      }
    }
    if (op % 500 == 499) {
      ExpectMatches(m(), model, kFiles, kSpan);
      Status st = m()->Check();
      ASSERT_TRUE(st.ok()) << "op " << op << ": " << Describe(st);
    }
  }
  ExpectMatches(m(), model, kFiles, kSpan);
  ASSERT_TRUE(mp_->Reopen().ok());
  ExpectMatches(m(), model, kFiles, kSpan);
  EXPECT_TRUE(m()->Check().ok());
}

TEST_P(MapModel, FullAreaFailsWithEnospcAndLosesNothing) {
  Format(2 * MiB);
  Model model;
  Cursor cur[kFiles];
  uint64_t next[kFiles] = {};
  Status st;
  // Append one block at a time to files in turn until the area is full.
  for (int i = 0;; i++) {
    Ino ino = 1 + i % (kFiles - 1);
    st = m()->Insert(&cur[ino], ino, FileBlock(next[ino]), 1);
    if (!st.ok()) break;
    ASSERT_TRUE(model.Add(m(), ino, next[ino], 1));
    next[ino]++;
  }
  ASSERT_EQ(st.code(), ENOSPC) << Describe(st);
  EXPECT_GE(model.fwd.size(), m()->nblocks() * 85 / 100) << "area reported full too early";
  // A multi-block insert that cannot fit leaves nothing of itself behind.
  EXPECT_EQ(m()->Insert(&cur[1], 1, FileBlock(100000), 8).code(), ENOSPC);
  uint64_t span = *std::max_element(next, next + kFiles) + 1;
  ExpectMatches(m(), model, kFiles, span);
  Mapping mp;
  ASSERT_EQ(m()->Lookup(&cur[1], 1, FileBlock(100000), &mp), 0);
  EXPECT_FALSE(mp.mapped);
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
  // Freeing space makes inserts work again.
  ASSERT_TRUE(m()->Remove(&cur[2], 2, FileBlock(0), kToEnd).ok());
  model.Erase(2, 0, kToEnd);
  ASSERT_TRUE(m()->Insert(&cur[1], 1, FileBlock(next[1]), 4).ok());
  ASSERT_TRUE(model.Add(m(), 1, next[1], 4));
  ExpectMatches(m(), model, kFiles, span + 4);
  EXPECT_TRUE(m()->Check().ok());
}

TEST_P(MapModel, NinetyFivePercentUtilisation) {
  Format(4 * MiB);
  Model model;
  Rng rng(95);
  const uint64_t target = m()->nblocks() * 95 / 100;
  std::vector<uint64_t> next(64, 0);
  Cursor c;
  while (model.fwd.size() < target) {
    Ino ino = 1 + rng.Below(62);
    uint64_t count = std::min<uint64_t>(1 + rng.Below(8), target - model.fwd.size());
    Status st = m()->Insert(&c, ino, FileBlock(next[ino]), count);
    ASSERT_TRUE(st.ok()) << "at " << model.fwd.size() << " of " << m()->nblocks() << ": " << Describe(st);
    ASSERT_TRUE(model.Add(m(), ino, next[ino], count));
    next[ino] += count;
  }
  ExpectMatches(m(), model, 63, *std::max_element(next.begin(), next.end()));
  EXPECT_TRUE(m()->Check().ok()) << Describe(m()->Check());
  Usage u = m()->usage();
  EXPECT_EQ(u.used_blocks, target);
  EXPECT_LE(u.used_blocks + u.node_blocks, u.blocks);
}

TEST_P(MapModel, ReopenFromThePoolBytes) {
  Format(4 * MiB);
  Model model;
  Cursor c;
  for (Ino ino = 1; ino < kFiles; ino++) {
    ASSERT_TRUE(m()->Insert(&c, ino, FileBlock(0), 20 * ino).ok());
    ASSERT_TRUE(model.Add(m(), ino, 0, 20 * ino));
  }
  ASSERT_TRUE(m()->Remove(&c, 3, FileBlock(10), 5).ok());
  model.Erase(3, 10, 5);
  ASSERT_TRUE(m()->Remove(&c, 5, FileBlock(7), kToEnd).ok());
  model.Erase(5, 7, kToEnd);
  Usage before = m()->usage();
  ASSERT_TRUE(mp_->Reopen().ok());
  ExpectMatches(m(), model, kFiles, 200);
  Usage after = m()->usage();
  EXPECT_EQ(after.used_blocks, before.used_blocks);
  EXPECT_EQ(after.node_blocks, before.node_blocks);
  EXPECT_TRUE(m()->Check().ok());
}

TEST_P(MapModel, ArgumentsOutOfRangeAreRefused) {
  Format(2 * MiB);
  Cursor c;
  Mapping mp;
  EXPECT_EQ(m()->Lookup(&c, 0, FileBlock(0), &mp), -EINVAL);
  EXPECT_EQ(m()->Lookup(&c, m()->max_ino(), FileBlock(0), &mp), -EINVAL);
  EXPECT_EQ(m()->Lookup(&c, 1, FileBlock(format::kMaxFileBlock), &mp), -EINVAL);
  EXPECT_EQ(m()->Insert(&c, 1, FileBlock(format::kMaxFileBlock - 1), 2).code(), EINVAL);
  EXPECT_EQ(m()->Insert(&c, 0, FileBlock(0), 1).code(), EINVAL);
  EXPECT_TRUE(m()->Insert(&c, 1, FileBlock(format::kMaxFileBlock - 1), 1).ok());
  ASSERT_EQ(m()->Lookup(&c, 1, FileBlock(format::kMaxFileBlock - 1), &mp), 0);
  EXPECT_TRUE(mp.mapped);
  EXPECT_TRUE(m()->Check().ok());
}

TEST_P(MapModel, DamagedHeaderIsRefusedAtOpen) {
  Format(2 * MiB);
  mp_->area()[40] ^= 1;  // a layout field under the checksum
  Status st = mp_->OpenMapper();
  EXPECT_EQ(st.code(), EUCLEAN) << Describe(st);
  EXPECT_NE(st.message().find("mapping header"), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Designs, MapModel, ::testing::ValuesIn(AllKinds()), KindName);

}  // namespace
}  // namespace mapfs::map
