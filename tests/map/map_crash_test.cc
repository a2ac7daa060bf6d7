// Crash consistency of the mappers (traced build).
//
// A workload of inserts, appends, punches and truncations (enough of them
// to split and merge tree nodes) runs with a trace hook that, at every
// fence, copies the pool's redo slots and mapping area into a second pool
// of the same geometry, replays its redo log as a mount would, opens the
// mapper there and judges the image:
//   * it opens, and Check() finds nothing (no block mapped twice, mapped
//     but free, or in use but unmapped; no broken chain, run or node);
//   * every mapping is one from before the operation in progress, with the
//     same block, or one the operation is inserting; every mapping from
//     before is still there unless the operation is removing it.
// The pool lives in /dev/shm, which keeps every store: this checks the
// order of the steps and the recovery at every fence, not the loss of
// unflushed cache lines.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "map_test_util.h"
#include "medium/trace.h"

namespace mapfs::map {
namespace {

using State = std::map<std::pair<Ino, uint64_t>, uint64_t>;
constexpr Ino kFiles = 5;
constexpr uint64_t kSpan = 1024;

medium::CreateOptions SmallPool() {
  medium::CreateOptions o;
  o.redo_slots = 2;
  return o;
}

State Read(Mapper* m) {
  State s;
  std::vector<uint64_t> out(kSpan);
  for (Ino ino = 1; ino < kFiles; ino++) {
    Cursor c;
    EXPECT_EQ(m->LookupRange(&c, ino, FileBlock(0), kSpan, out.data()), 0);
    for (uint64_t f = 0; f < kSpan; f++)
      if (out[f] != Mapper::kNoBlock) s[{ino, f}] = out[f];
  }
  return s;
}

struct Op {
  bool insert;
  Ino ino;
  uint64_t from, count;
  bool Covers(Ino i, uint64_t f) const { return i == ino && f >= from && (count == kToEnd || f - from < count); }
};

class Judge : public medium::TraceHook {
 public:
  Judge(medium::Pool* live, uint64_t area_off, uint64_t area_len, medium::Pool* shadow)
      : live_(live), area_off_(area_off), area_len_(area_len), shadow_(shadow) {}
  void Begin(const Op& op, const State& before) {
    op_ = op;
    before_ = before;
  }
  void OnStore(const void*, size_t) override {}
  void OnFlush(const void*, size_t) override {}
  void OnFence() override {
    if (busy_) return;  // the judging itself
    busy_ = true;
    JudgeImage();
    busy_ = false;
  }
  int images = 0, failures = 0;

 private:
  void JudgeImage() {
    images++;
    const auto& h = live_->header();
    const uint64_t redo_bytes = uint64_t{h.redo_slots} * h.redo_slot_size;
    std::memcpy(shadow_->base() + h.redo_off, live_->base() + h.redo_off, redo_bytes);
    std::memcpy(shadow_->base() + area_off_, live_->base() + area_off_, area_len_);
    shadow_->redo().RecoverAll();
    auto m = Mapper::Open(shadow_, area_off_, area_len_);
    if (!m.ok()) return Fail("open: " + m.status().ToString());
    Status st = (*m)->Check();
    if (!st.ok()) return Fail("check: " + st.ToString());
    State now = Read(m->get());
    for (const auto& [k, blk] : now) {
      auto it = before_.find(k);
      if (it != before_.end() && it->second == blk) continue;
      if (op_.insert && op_.Covers(k.first, k.second) && it == before_.end()) continue;
      return Fail("ino " + std::to_string(k.first) + " fblk " + std::to_string(k.second) + " maps to an unexpected block");
    }
    for (const auto& [k, blk] : before_)
      if (!now.count(k) && !(!op_.insert && op_.Covers(k.first, k.second)))
        return Fail("ino " + std::to_string(k.first) + " fblk " + std::to_string(k.second) + " lost");
  }
  void Fail(const std::string& why) {
    if (failures++ < 5) ADD_FAILURE() << "crash image " << images << ": " << why;
  }

  medium::Pool* live_;
  uint64_t area_off_, area_len_;
  medium::Pool* shadow_;
  Op op_{};
  State before_;
  bool busy_ = false;
};

class MapCrash : public ::testing::TestWithParam<Kind> {};

TEST_P(MapCrash, EveryFenceLeavesARecoverableImage) {
  constexpr uint64_t kArea = 2 * MiB;
  testing::TempPool live_file(16 * MiB, SmallPool()), shadow_file(16 * MiB, SmallPool());
  ASSERT_TRUE(live_file.status().ok() && shadow_file.status().ok());
  auto live = medium::Pool::Open(live_file.path());
  auto shadow = medium::Pool::Open(shadow_file.path());
  ASSERT_TRUE(live.ok() && shadow.ok());
  (*live)->FinishOpen();
  (*shadow)->FinishOpen();
  const uint64_t area_off = (*live)->header().meta_end;
  ASSERT_EQ(area_off, (*shadow)->header().meta_end);
  FormatOptions fo;
  fo.kind = GetParam();
  fo.max_ino = kFiles;
  ASSERT_TRUE(Mapper::Format(live->get(), area_off, kArea, fo).ok());
  auto mr = Mapper::Open(live->get(), area_off, kArea);
  ASSERT_TRUE(mr.ok());
  Mapper* m = mr->get();

  std::vector<Op> ops = {{true, 1, 0, 20},   {true, 2, 0, 5},   {true, 1, 20, 10}, {true, 3, 600, 3},
                         {false, 1, 5, 3},   {true, 2, 5, 40},  {false, 1, 25, kToEnd}};
  for (uint64_t i = 0; i < 180; i++) ops.push_back({true, 4, 2 * i, 1});  // extents that cannot merge: a leaf split
  ops.push_back({false, 4, 40, 250});  // leaves merge
  ops.push_back({false, 4, 0, kToEnd});
  ops.push_back({false, 3, 0, kToEnd});
  ops.push_back({false, 2, 0, kToEnd});

  Judge judge(live->get(), area_off, kArea, shadow->get());
  for (const Op& op : ops) {
    State before = Read(m);
    judge.Begin(op, before);
    medium::SetTraceHook(&judge);
    Cursor c;
    Status st = op.insert ? m->Insert(&c, op.ino, FileBlock(op.from), op.count)
                          : m->Remove(&c, op.ino, FileBlock(op.from), op.count);
    medium::SetTraceHook(nullptr);
    ASSERT_TRUE(st.ok()) << Describe(st);
    ASSERT_EQ(judge.failures, 0) << "after op ino " << op.ino << " from " << op.from;
  }
  EXPECT_GE(judge.images, static_cast<int>(ops.size())) << "too few fences judged";
  GTEST_LOG_(INFO) << ToString(GetParam()) << ": " << judge.images << " crash images judged";
  EXPECT_TRUE(m->Check().ok());
  mr->reset();
  (void)(*live)->Close();
  (void)(*shadow)->Close();
}

INSTANTIATE_TEST_SUITE_P(Designs, MapCrash, ::testing::ValuesIn(AllKinds()), KindName);

}  // namespace
}  // namespace mapfs::map
