// Crash tests of the redo log, through the core's trace hooks.
//
// A forked child runs Commit with a TraceHook that _exit()s just before the
// Nth store, flush or fence; the parent then reopens the pool (recovery runs)
// and checks the transaction landed completely or not at all. On a tmpfs
// pool every store issued before the "crash" reaches the file, so this
// checks the commit protocol's step order (and recovery), not lost cache
// lines; the ordering test below checks the flushes and fences that make
// each step durable on real persistent memory.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "medium/persist.h"
#include "medium/redo_log.h"
#include "medium/trace.h"
#include "medium_test_util.h"
#include "test_util.h"

namespace mapfs::medium {
namespace {

using testing::DescribeWait;
using testing::HangGuard;
using testing::Rng;
using testing::RunInChild;
using testing::TempPool;

constexpr uint64_t kSize = 32 * MiB;
constexpr int kCrashed = 77;

struct Event {
  enum Kind { kStore, kFlush, kFence, kNtStore } kind;
  uintptr_t addr;
  size_t n;
};

class Recorder : public TraceHook {
 public:
  void OnStore(const void* a, size_t n) override { ev.push_back({Event::kStore, Addr(a), n}); }
  // Non-temporal stores are durable at the next fence with no flush.
  void OnNtStore(const void* a, size_t n) override { ev.push_back({Event::kNtStore, Addr(a), n}); }
  void OnFlush(const void* a, size_t n) override { ev.push_back({Event::kFlush, Addr(a), n}); }
  void OnFence() override { ev.push_back({Event::kFence, 0, 0}); }
  static bool IsStore(const Event& e) { return e.kind == Event::kStore || e.kind == Event::kNtStore; }
  static uintptr_t Addr(const void* a) { return reinterpret_cast<uintptr_t>(a); }
  std::vector<Event> ev;
};

// Stops the process just before the Nth traced operation.
class CrashAt : public TraceHook {
 public:
  explicit CrashAt(long n) : left_(n) {}
  void OnStore(const void*, size_t) override { Tick(); }
  void OnFlush(const void*, size_t) override { Tick(); }
  void OnFence() override { Tick(); }

 private:
  void Tick() {
    if (--left_ == 0) ::_exit(kCrashed);
  }
  long left_;
};

// Stops the process at the first store that touches [lo, hi).
class CrashAtStoreTo : public TraceHook {
 public:
  CrashAtStoreTo(const void* lo, size_t n) : lo_(Recorder::Addr(lo)), hi_(lo_ + n) {}
  void OnStore(const void* a, size_t n) override {
    uintptr_t s = Recorder::Addr(a);
    if (s < hi_ && s + n > lo_) ::_exit(kCrashed);
  }
  void OnFlush(const void*, size_t) override {}
  void OnFence() override {}

 private:
  uintptr_t lo_, hi_;
};

bool Covers(const Event& e, uintptr_t lo, size_t n) { return e.addr <= lo && e.addr + e.n >= lo + n; }
bool Overlaps(const Event& e, uintptr_t lo, size_t n) { return e.addr < lo + n && e.addr + e.n > lo; }

void ExpectNoPendingSlots(Pool* p) {
  const auto& h = p->header();
  for (uint32_t s = 0; s < h.redo_slots; s++)
    EXPECT_EQ(p->at<RedoSlotHeader>(h.redo_off + uint64_t{s} * h.redo_slot_size)->seq, 0u) << "slot " << s;
}

uint64_t Slot0Seq(Pool* p) { return p->at<RedoSlotHeader>(p->header().redo_off)->seq; }

TEST(MediumTrace, HookSeesEveryPrimitive) {
  EXPECT_EQ(CurrentTraceHook(), nullptr);
  Recorder rec;
  alignas(64) static char buf[4096];
  alignas(64) static char src[4096];
  SetTraceHook(&rec);
  EXPECT_EQ(CurrentTraceHook(), &rec);
  CopyNt(buf + 1, src, 300);
  ZeroNt(buf + 512, 1000);
  Store64(reinterpret_cast<uint64_t*>(buf + 2048), 5);
  Write(buf + 3000, src, 17);
  Persist(buf + 10, 100);
  Fence();
  SetTraceHook(nullptr);
  EXPECT_EQ(CurrentTraceHook(), nullptr);
  const size_t recorded = rec.ev.size();
  CopyNt(buf, src, 64);  // not recorded any more
  EXPECT_EQ(rec.ev.size(), recorded) << "a removed hook still receives events";

  // Each primitive reports what it did, in program order (an implementation
  // may report more, e.g. the flushes of a copy's unaligned edges).
  const uintptr_t b = Recorder::Addr(buf);
  struct Want {
    Event::Kind kind;
    uintptr_t addr;
    size_t n;
  } want[] = {
      {Event::kNtStore, b + 1, 300}, {Event::kNtStore, b + 512, 1000}, {Event::kStore, b + 2048, 8},
      {Event::kStore, b + 3000, 17}, {Event::kFlush, b + 10, 100},  {Event::kFence, 0, 0},
      {Event::kFence, 0, 0},
  };
  size_t at = 0;
  for (const Want& w : want) {
    while (at < rec.ev.size() &&
           !(rec.ev[at].kind == w.kind && (w.kind == Event::kFence || Covers(rec.ev[at], w.addr, w.n))))
      at++;
    ASSERT_LT(at, rec.ev.size()) << "missing event: kind " << w.kind << " at buf+" << (w.addr ? w.addr - b : 0)
                                 << " n=" << w.n;
    at++;
  }
}

// The commit protocol, as seen by the hook: payload, {bytes, crc}, flush,
// fence, seq, flush, fence, apply, fence, retire.
TEST(MediumTrace, CommitOrdersPayloadHeaderApplyAndRetire) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto r = Pool::Open(tp.path());
  ASSERT_TRUE(r.ok());
  Pool* p = r->get();
  p->FinishOpen();
  const uint64_t d = p->header().meta_end;
  const uintptr_t word = Recorder::Addr(p->at<char>(d));      // Put64, aligned
  const uintptr_t text = Recorder::Addr(p->at<char>(d + 4099));  // PutBytes, unaligned
  char payload_text[100];
  std::memset(payload_text, 'q', sizeof payload_text);
  Tx tx;
  tx.Put64(d, 0xdeadbeef);
  tx.PutBytes(d + 4099, payload_text, sizeof payload_text);
  const size_t payload_bytes = tx.payload_bytes();

  Recorder rec;
  SetTraceHook(&rec);
  Status st = p->redo().Commit(tx);
  SetTraceHook(nullptr);
  ASSERT_TRUE(st.ok());
  const auto& ev = rec.ev;

  // Which slot? The one whose {bytes, crc} word was written.
  const auto& h = p->header();
  const uintptr_t slots_lo = Recorder::Addr(p->at<char>(h.redo_off));
  const uintptr_t slots_hi = slots_lo + uint64_t{h.redo_slots} * h.redo_slot_size;
  long C = -1;
  uintptr_t slot = 0;
  for (size_t i = 0; i < ev.size(); i++)
    if (Recorder::IsStore(ev[i]) && ev[i].addr >= slots_lo && ev[i].addr < slots_hi &&
        (ev[i].addr - slots_lo) % h.redo_slot_size == 0) {
      ADD_FAILURE() << "a store at the start of a slot header before its length and checksum (event " << i
                    << ", " << ev[i].n << " bytes)";
      break;
    } else if (Recorder::IsStore(ev[i]) && ev[i].n == 8 && ev[i].addr >= slots_lo && ev[i].addr < slots_hi &&
               (ev[i].addr - slots_lo) % h.redo_slot_size == 8) {
      C = static_cast<long>(i);
      slot = ev[i].addr - 8;
      break;
    }
  ASSERT_GE(C, 0) << "no 8-byte store of a slot's length and checksum";

  auto find = [&](long from, long to, auto pred) -> long {
    for (long i = from; i < to; i++)
      if (pred(ev[i])) return i;
    return -1;
  };
  auto last = [&](long from, long to, auto pred) -> long {
    for (long i = to - 1; i >= from; i--)
      if (pred(ev[i])) return i;
    return -1;
  };
  const long end = static_cast<long>(ev.size());
  auto is_fence = [](const Event& e) { return e.kind == Event::kFence; };
  // The first fence after which the store at event i to [a, a+n) is
  // durable: a non-temporal store needs only the fence, a regular one a
  // covering flush first. -1 if never.
  auto durable_at = [&](long i, uintptr_t a, size_t n) -> long {
    long from = i + 1;
    if (ev[i].kind == Event::kStore) {
      long f = find(i + 1, end, [&](const Event& e) { return e.kind == Event::kFlush && Covers(e, a, n); });
      if (f < 0) return -1;
      from = f + 1;
    }
    return find(from, end, is_fence);
  };

  // 1. The payload, the {bytes, crc} word and the sequence word are all
  // stored, and durable, by the first fence: the commit point. The checksum
  // covers a fresh seq (EveryCommitTakesAFreshSequenceWord), so a crash that
  // persists only some of these words never validates (issue 16, defect 6,
  // without a fence of its own).
  long P = find(0, C, [&](const Event& e) { return Recorder::IsStore(e) && Covers(e, slot + 64, payload_bytes); });
  ASSERT_GE(P, 0) << "payload not stored before the header";
  long H = find(0, end, [&](const Event& e) { return Recorder::IsStore(e) && Overlaps(e, slot, 8); });
  ASSERT_GE(H, 0) << "sequence word never stored";
  EXPECT_EQ(ev[H].n, 8u) << "the sequence word is stored alone";
  EXPECT_GT(H, C) << "sequence word stored before the length and checksum";
  long F1 = durable_at(H, slot, 8);
  ASSERT_GE(F1, 0) << "sequence word never made durable";
  EXPECT_EQ(F1, find(H + 1, end, is_fence)) << "the commit must be durable at the first fence after it";
  EXPECT_LE(durable_at(C, slot + 8, 8), F1) << "length and checksum not durable with the sequence word";
  for (long i = 0; i < F1; i++)
    if (Recorder::IsStore(ev[i])) {
      EXPECT_FALSE(Overlaps(ev[i], word, 8)) << "target word written before the commit was durable (event " << i << ")";
      EXPECT_FALSE(Overlaps(ev[i], text, sizeof payload_text)) << "target bytes written before commit (event " << i << ")";
    }

  // 2. Apply: both targets stored after F1; a fence makes all of it
  // durable before the record is retired.
  long SA = find(F1 + 1, end, [&](const Event& e) { return Recorder::IsStore(e) && Covers(e, word, 8); });
  long SB = find(F1 + 1, end, [&](const Event& e) { return Recorder::IsStore(e) && Covers(e, text, sizeof payload_text); });
  ASSERT_GE(SA, 0) << "target word never stored";
  ASSERT_GE(SB, 0) << "target bytes never stored";
  long F2 = std::max(durable_at(SA, word, 8), durable_at(SB, text, sizeof payload_text));
  ASSERT_GE(std::min(durable_at(SA, word, 8), durable_at(SB, text, sizeof payload_text)), 0) << "apply never durable";

  // 3. Retire: seq cleared (one 8-byte store) only after the apply fence,
  // and durable at a fence of its own: before a later transaction may
  // change the same words, which a replay of this record would undo.
  long R = last(0, end, [&](const Event& e) { return Recorder::IsStore(e) && e.addr == slot && e.n == 8; });
  ASSERT_GT(R, H) << "slot never retired";
  EXPECT_GT(R, F2) << "record retired before its application was durable";
  EXPECT_GE(durable_at(R, slot, 8), 0) << "retirement never made durable";

  // Nothing outside the slot and the targets is written.
  for (long i = 0; i < end; i++)
    if (Recorder::IsStore(ev[i])) {
      bool in_slot = ev[i].addr >= slot && ev[i].addr + ev[i].n <= slot + h.redo_slot_size;
      bool in_target = Covers({Event::kStore, word, 8}, ev[i].addr, ev[i].n) ||
                       Covers({Event::kStore, text, sizeof payload_text}, ev[i].addr, ev[i].n);
      EXPECT_TRUE(in_slot || in_target) << "stray store at pool offset " << p->offset_of(reinterpret_cast<void*>(ev[i].addr));
    }
  EXPECT_EQ(std::count_if(ev.begin(), ev.end(), is_fence), 3) << "a commit needs exactly three fences";
  ASSERT_TRUE(p->Close().ok());
}

// Each commit's sequence word is fresh: nonzero, and never the value an
// earlier commit left beside the slot's length and checksum. With one
// fence for the whole header, PM may persist the new seq without the new
// {bytes, crc} word; a constant seq would then validate the previous
// commit's checksum over a payload that still holds its bytes, and replay
// an old transaction over newer state.
TEST(MediumTrace, EveryCommitTakesAFreshSequenceWord) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto r = Pool::Open(tp.path());
  ASSERT_TRUE(r.ok());
  Pool* p = r->get();
  p->FinishOpen();
  const auto& h = p->header();
  // Reads every slot's seq word at each fence: the commit fence is the
  // first one after the seq store, so the committed value is still there.
  struct SeqSpy : TraceHook {
    Pool* p = nullptr;
    std::vector<uint64_t> seen;
    void OnStore(const void*, size_t) override {}
    void OnFlush(const void*, size_t) override {}
    void OnFence() override {
      const auto& hh = p->header();
      for (uint32_t s = 0; s < hh.redo_slots; s++) {
        uint64_t v = p->at<RedoSlotHeader>(hh.redo_off + uint64_t{s} * hh.redo_slot_size)->seq;
        if (v != 0 && (seen.empty() || seen.back() != v)) seen.push_back(v);
      }
    }
  } spy;
  spy.p = p;
  const uint64_t d = h.meta_end;
  const int kCommits = 3 * static_cast<int>(h.redo_slots);  // every slot is used several times
  SetTraceHook(&spy);
  for (int i = 0; i < kCommits; i++) {
    Tx tx;
    tx.Put64(d, 42);  // the same transaction every time: only seq tells them apart
    ASSERT_TRUE(p->redo().Commit(tx).ok());
  }
  SetTraceHook(nullptr);
  ASSERT_EQ(spy.seen.size(), static_cast<size_t>(kCommits)) << "one committed sequence word per commit";
  std::vector<uint64_t> sorted = spy.seen;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "a sequence word was reused";
  ExpectNoPendingSlots(p);
  ASSERT_TRUE(p->Close().ok());
}

// ------------------------------------------------------------ crash points

struct Targets {
  uint64_t word;    // Put64, aligned
  uint64_t oddw;    // Put64, unaligned
  uint64_t text;    // PutBytes, 100 bytes, unaligned
  uint64_t big;     // PutBytes, 5000 bytes across a page boundary
  uint64_t state;   // a PoolState word
};

Tx MakeTx(const Targets& t, uint64_t seed) {
  Rng rng(seed);
  Tx tx;
  tx.Put64(t.word, rng.Next());
  tx.Put64(t.oddw, rng.Next());
  std::vector<uint8_t> text(100), big(5000);
  for (auto& b : text) b = static_cast<uint8_t>(rng.Next());
  for (auto& b : big) b = static_cast<uint8_t>(rng.Next());
  tx.PutBytes(t.text, text.data(), text.size());
  tx.PutBytes(t.big, big.data(), big.size());
  tx.Put64(t.state, rng.Next());
  return tx;
}

// The bytes a transaction made with `seed` leaves at the targets.
std::vector<uint8_t> Image(Pool* p, const Targets& t) {
  std::vector<uint8_t> v;
  auto add = [&](uint64_t off, size_t n) { v.insert(v.end(), p->at<uint8_t>(off), p->at<uint8_t>(off) + n); };
  add(t.word, 8);
  add(t.oddw, 8);
  add(t.text, 100);
  add(t.big, 5000);
  add(t.state, 8);
  return v;
}

enum class Outcome { kOld, kNew, kMixed };

// Formats a pool holding transaction `old_seed`, lets a child die before
// operation n of committing `new_seed`, recovers, and classifies the result.
// *completed is set if the child got through the whole commit.
Outcome CrashCommitAt(long n, bool* completed) {
  TempPool tp(kSize);
  EXPECT_TRUE(tp.status().ok());
  Targets t;
  std::vector<uint8_t> old_img, new_img;
  {
    auto r = Pool::Open(tp.path());
    EXPECT_TRUE(r.ok());
    Pool* p = r->get();
    p->FinishOpen();
    uint64_t d = p->header().meta_end;
    t = {d, d + 4096 + 3, d + 8192 + 5, d + 3 * 4096 - 1000,
         format::kStateOff + offsetof(format::PoolState, space_root)};
    // Learn the new image on a scratch commit, then put the old one in place.
    EXPECT_TRUE(p->redo().Commit(MakeTx(t, 2)).ok());
    new_img = Image(p, t);
    EXPECT_TRUE(p->redo().Commit(MakeTx(t, 1)).ok());
    old_img = Image(p, t);
    EXPECT_TRUE(p->Close().ok());
  }
  std::string path = tp.path();
  int st = RunInChild(
      [&]() -> int {
        auto r = Pool::Open(path);
        if (!r.ok()) return 2;
        (*r)->FinishOpen();
        Tx tx = MakeTx(t, 2);
        CrashAt hook(n);
        SetTraceHook(&hook);
        Status s = (*r)->redo().Commit(tx);
        SetTraceHook(nullptr);
        ::_exit(s.ok() ? 0 : 3);  // no clean close: the process just ends
      },
      30);
  *completed = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  EXPECT_TRUE(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == kCrashed))
      << "n=" << n << ": child " << DescribeWait(st);

  auto r = Pool::Open(tp.path());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return Outcome::kMixed;
  EXPECT_TRUE((*r)->needs_recovery()) << "the child never closed the pool";
  ExpectNoPendingSlots(r->get());
  auto img = Image(r->get(), t);
  if (img == old_img) return Outcome::kOld;
  if (img == new_img) return Outcome::kNew;
  return Outcome::kMixed;
}

TEST(MediumRedoCrash, EveryCrashPointIsAllOrNothing) {
  bool completed = false;
  bool seen_new = false;
  long n = 1;
  for (; n < 1000 && !completed; n++) {
    Outcome o = CrashCommitAt(n, &completed);
    ASSERT_NE(o, Outcome::kMixed) << "crash before operation " << n << " left a partly applied transaction";
    if (n == 1) {
      EXPECT_EQ(o, Outcome::kOld) << "nothing was written yet";
    }
    if (seen_new) {
      EXPECT_EQ(o, Outcome::kNew) << "crash before operation " << n << " lost a transaction that "
                                                << "survived an earlier crash point";
    }
    seen_new |= o == Outcome::kNew;
    if (completed) {
      EXPECT_EQ(o, Outcome::kNew) << "a completed commit was lost";
    }
  }
  EXPECT_TRUE(completed) << "the commit never completed within " << n << " operations";
  EXPECT_GT(n, 8) << "a commit with five records takes more steps than that";
}

// Crashes only at fences (the points where durability is decided).
TEST(MediumRedoCrash, EveryFenceIsAllOrNothing) {
  // Count the fences of one commit first.
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  long fences = 0;
  std::vector<Outcome> outcomes;
  {
    auto r = Pool::Open(tp.path());
    ASSERT_TRUE(r.ok());
    (*r)->FinishOpen();
    uint64_t d = (*r)->header().meta_end;
    Targets t{d, d + 4096 + 3, d + 8192 + 5, d + 3 * 4096 - 1000,
              format::kStateOff + offsetof(format::PoolState, space_root)};
    Recorder rec;
    Tx tx = MakeTx(t, 2);
    SetTraceHook(&rec);
    ASSERT_TRUE((*r)->redo().Commit(tx).ok());
    SetTraceHook(nullptr);
    for (size_t i = 0; i < rec.ev.size(); i++) {
      if (rec.ev[i].kind != Event::kFence) continue;
      fences++;
      // Crash right at this fence = before operation i+1.
      bool completed = false;
      Outcome o = CrashCommitAt(static_cast<long>(i) + 1, &completed);
      EXPECT_NE(o, Outcome::kMixed) << "fence " << fences;
      EXPECT_FALSE(completed);
      outcomes.push_back(o);
    }
  }
  ASSERT_GE(fences, 3);
  // The first fence is the commit point: every word of the record and its
  // header is stored before it, so on this pool (every store reaches the
  // file) a crash there already recovers the new state; the crash points
  // before it are EveryCrashPointIsAllOrNothing's. By the last fence the
  // transaction is applied; once it survives a crash, it always does.
  EXPECT_EQ(outcomes.front(), Outcome::kNew);
  EXPECT_EQ(outcomes.back(), Outcome::kNew);
  for (size_t i = 1; i < outcomes.size(); i++)
    if (outcomes[i - 1] == Outcome::kNew) {
      EXPECT_EQ(outcomes[i], Outcome::kNew) << "fence " << i + 1;
    }
}

// A process dies holding a lock after committing but before applying: the
// next taker of the lock replays its record, while the pool stays open.
TEST(MediumRedoCrash, DeadLockHolderRecordIsReplayedByTheNextTaker) {
  CreateOptions opt;
  opt.redo_slots = 1;  // the dead process's slot must be handed back
  TempPool tp(kSize, opt);
  ASSERT_TRUE(tp.status().ok());
  auto r = Pool::Open(tp.path());
  ASSERT_TRUE(r.ok());
  Pool* p = r->get();
  p->FinishOpen();
  const uint64_t d = p->header().meta_end;
  *p->at<uint64_t>(d) = 1111;
  std::string path = tp.path();
  int st = RunInChild(
      [&]() -> int {
        auto c = Pool::Open(path);
        if (!c.ok()) return 2;
        if ((*c)->exclusive_open()) return 3;
        (*c)->FinishOpen();
        (*c)->Lock(LockId::kSpace);
        Tx tx;
        tx.Put64(d, 2222);
        tx.PutBytes(d + 8, "after", 5);
        CrashAtStoreTo hook((*c)->at<char>(d), 13);
        SetTraceHook(&hook);
        (void)(*c)->redo().Commit(tx);
        return 4;  // the hook should have ended the process
      },
      30);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == kCrashed) << DescribeWait(st);
  ASSERT_EQ(*p->at<uint64_t>(d), 1111u) << "precondition: the record was not applied yet";
  ASSERT_NE(Slot0Seq(p), 0u) << "precondition: a committed record is pending";

  HangGuard guard(30);
  p->Lock(LockId::kSpace);
  EXPECT_EQ(*p->at<uint64_t>(d), 2222u) << "the dead holder's committed record was not replayed";
  EXPECT_EQ(std::memcmp(p->at<char>(d + 8), "after", 5), 0);
  EXPECT_EQ(Slot0Seq(p), 0u);
  p->Unlock(LockId::kSpace);
  // The only slot is usable again.
  Tx tx;
  tx.Put64(d + 16, 3333);
  ASSERT_TRUE(p->redo().Commit(tx).ok());
  EXPECT_EQ(*p->at<uint64_t>(d + 16), 3333u);
}

}  // namespace
}  // namespace mapfs::medium
