// Torn redo headers (issue 16, defect 6), through the core's trace hooks.
//
// A commit stores its payload, the {bytes, crc} word and the sequence word
// with non-temporal 8-byte stores and makes them durable with one fence.
// Real persistent memory may persist any subset of those words before a
// power cut, in any order: a 64-byte header is not written atomically.
// Retiring a slot clears only `seq`, so the slot keeps the previous
// commit's length, checksum and payload. The dangerous mix is a new `seq`
// beside the old {bytes, crc} over a payload whose prefix is unchanged:
// with a constant `seq` that validates, and recovery replays the *old*
// transaction over newer state. The log avoids it by covering a fresh
// `seq` with the checksum (see RedoLog::Commit), which keeps the commit at
// three fences.
//
// This test proves it by enumeration rather than by argument: it captures
// the words a real commit wrote to its slot by its commit fence, then for
// every subset of them builds the slot a power cut could leave (new words
// where chosen, the retired previous commit's words elsewhere), runs
// recovery, and requires "before" or "after", never the old transaction
// replayed and never a partial one.
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "medium/persist.h"
#include "medium/pool.h"
#include "medium/redo_log.h"
#include "medium/trace.h"
#include "medium_test_util.h"
#include "test_util.h"

namespace mapfs::medium {
namespace {

using testing::TempPool;

// Finds the slot a commit writes (its sequence word store) and copies the
// slot's first `words` words at the commit's first fence: the words that
// fence makes durable.
class SlotCapture : public TraceHook {
 public:
  SlotCapture(Pool* p, size_t words) : p_(p), words_(words) {}
  void OnStore(const void* a, size_t n) override { Seen(a, n); }
  void OnNtStore(const void* a, size_t n) override { Seen(a, n); }
  void OnFlush(const void*, size_t) override {}
  void OnFence() override {
    if (slot_ < 0 || !image.empty()) return;
    const auto* w = reinterpret_cast<const uint64_t*>(SlotAddr(slot_));
    image.assign(w, w + words_);
  }
  int slot() const { return slot_; }
  std::vector<uint64_t> image;

 private:
  uintptr_t SlotAddr(int s) const {
    const auto& h = p_->header();
    return reinterpret_cast<uintptr_t>(p_->at<char>(h.redo_off + uint64_t(s) * h.redo_slot_size));
  }
  void Seen(const void* a, size_t n) {
    if (slot_ >= 0 || n != 8) return;
    const auto& h = p_->header();
    uintptr_t lo = SlotAddr(0), x = reinterpret_cast<uintptr_t>(a);
    if (x < lo || x >= lo + uint64_t{h.redo_slots} * h.redo_slot_size) return;
    if ((x - lo) % h.redo_slot_size == 0) slot_ = static_cast<int>((x - lo) / h.redo_slot_size);
  }
  Pool* p_;
  size_t words_;
  int slot_ = -1;
};

uint64_t* SlotWords(Pool* p, int s) {
  const auto& h = p->header();
  return p->at<uint64_t>(h.redo_off + uint64_t(s) * h.redo_slot_size);
}

// Commits `tx` and returns the slot it used and the slot's first `words`
// words as of its commit fence.
void CommitCaptured(Pool* p, const Tx& tx, size_t words, int* slot, std::vector<uint64_t>* image) {
  SlotCapture cap(p, words);
  SetTraceHook(&cap);
  Status st = p->redo().Commit(tx);
  SetTraceHook(nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_GE(cap.slot(), 0) << "no sequence word store seen";
  ASSERT_EQ(cap.image.size(), words) << "no fence after the sequence word";
  *slot = cap.slot();
  *image = cap.image;
}

TEST(MediumRedoTorn, EveryTornHeaderAndPayloadIsAllOrNothing) {
  TempPool tp(32 * MiB);
  ASSERT_TRUE(tp.status().ok());
  auto r = Pool::Open(tp.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Pool* p = r->get();
  p->FinishOpen();
  const uint64_t X = p->header().meta_end, Y = X + 64, Z = X + 128;
  uint64_t* x = p->at<uint64_t>(X);
  uint64_t* y = p->at<uint64_t>(Y);
  uint64_t* z = p->at<uint64_t>(Z);

  // A: X = 1, in slot a, then retired (seq cleared, the rest kept).
  Tx a;
  a.Put64(X, 1);
  int slot_a = -1;
  std::vector<uint64_t> a_img;
  constexpr size_t kHdr = sizeof(RedoSlotHeader) / 8;  // payload starts after it
  ASSERT_NO_FATAL_FAILURE(CommitCaptured(p, a, kHdr + 3, &slot_a, &a_img));
  // Newer state: X = 2 (another transaction, another slot or the same).
  Tx c;
  c.Put64(X, 2);
  ASSERT_TRUE(p->redo().Commit(c).ok());
  ASSERT_EQ(*x, 2u);

  // B starts with exactly A's record, so A's payload is a prefix of B's.
  Tx b;
  b.Put64(X, 1);
  b.Put64(Y, 7);
  b.Put64(Z, 9);
  const size_t words = kHdr + b.payload_bytes() / 8;
  // The words a commit writes: seq, {bytes, crc} and the payload (the
  // header's reserved words are never written).
  std::vector<size_t> written = {0, 1};
  for (size_t w = kHdr; w < words; w++) written.push_back(w);
  ASSERT_EQ(written.size(), 2u + 9u);
  int slot_b = -1;
  std::vector<uint64_t> b_img;
  ASSERT_NO_FATAL_FAILURE(CommitCaptured(p, b, words, &slot_b, &b_img));
  ASSERT_NE(b_img[0], 0u) << "committed slot without a sequence word";
  ASSERT_EQ(std::memcmp(&a_img[kHdr], &b_img[kHdr], 3 * 8), 0) << "A's payload is not a prefix of B's";

  // The retired slot A left behind: what B overwrites word by word (as if
  // B had been given A's slot; the checksum does not cover the slot index).
  uint64_t* sa = SlotWords(p, slot_a);
  ASSERT_EQ(sa[0], 0u) << "slot A not retired";
  std::vector<uint64_t> old(sa, sa + words);

  int before = 0, after = 0, wholes = 0;
  const uint32_t all = (1u << written.size()) - 1;
  for (uint32_t mask = 0; mask <= all; mask++) {
    // The state before B, and every other slot retired.
    Store64(x, 2);
    Store64(y, 0);
    Store64(z, 0);
    for (uint32_t s = 0; s < p->header().redo_slots; s++) ASSERT_EQ(SlotWords(p, static_cast<int>(s))[0], 0u);
    for (size_t w = 0; w < words; w++) Store64(&sa[w], old[w]);
    for (size_t k = 0; k < written.size(); k++)
      if (mask >> k & 1) Store64(&sa[written[k]], b_img[written[k]]);
    // Words equal in both (A's prefix) make several subsets the whole commit.
    bool whole = true;
    for (size_t w : written) whole &= sa[w] == b_img[w];
    wholes += whole;
    p->redo().RecoverAll();
    uint64_t vx = *x, vy = *y, vz = *z;
    if (vx == 2 && vy == 0 && vz == 0) {
      before++;
    } else if (vx == 1 && vy == 7 && vz == 9) {
      after++;
      EXPECT_TRUE(whole) << "persisted words " << std::hex << mask << std::dec
                         << ": a transaction validated with some of its words missing";
    } else {
      ADD_FAILURE() << "persisted words " << std::hex << mask << std::dec << ": recovery left X=" << vx
                    << " Y=" << vy << " Z=" << vz
                    << (vx == 1 && vy == 0 ? " (the retired transaction replayed over newer state)" : "");
    }
    EXPECT_EQ(sa[0], 0u) << "recovery left the slot live";
  }
  EXPECT_EQ(after, wholes) << "every fully persisted commit must replay";
  EXPECT_EQ(before + after, static_cast<int>(all) + 1);
  for (size_t w = 0; w < words; w++) Store64(&sa[w], old[w]);
  ASSERT_TRUE(p->Close().ok());
}

}  // namespace
}  // namespace mapfs::medium
