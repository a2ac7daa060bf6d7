// Redo log: transactions commit and apply; recovery replays exactly the
// committed record sets and nothing else.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/crc32c.h"
#include "medium/redo_log.h"
#include "medium_test_util.h"
#include "test_util.h"

namespace mapfs::medium {
namespace {

using testing::DescribeWait;
using testing::HangGuard;
using testing::Rng;
using testing::TempPool;

constexpr uint64_t kSize = 32 * MiB;

std::unique_ptr<Pool> MustOpen(const std::string& path) {
  auto r = Pool::Open(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  (*r)->FinishOpen();
  return std::move(*r);
}

RedoSlotHeader* Slot(Pool* p, int s) {
  const auto& h = p->header();
  return p->at<RedoSlotHeader>(h.redo_off + uint64_t(s) * h.redo_slot_size);
}

void ExpectAllSlotsRetired(Pool* p) {
  for (int s = 0; s < static_cast<int>(p->header().redo_slots); s++)
    EXPECT_EQ(Slot(p, s)->seq, 0u) << "slot " << s << " still holds a record set";
}

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng.Next());
  return v;
}

TEST(MediumRedoLog, CommitAppliesPut64AndPutBytes) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  const uint64_t d = p->header().meta_end;
  auto blob = RandomBytes(10000, 1);

  Tx tx;
  EXPECT_TRUE(tx.empty());
  tx.Put64(d, 0x1122334455667788ull);
  tx.Put64(d + 4096 + 4, 0xa1a2a3a4a5a6a7a8ull);  // unaligned word
  tx.PutBytes(d + 8192 + 3, "hello, pool", 11);
  tx.PutBytes(d + 3 * 4096 - 5, blob.data(), blob.size());  // crosses pages
  tx.Put64(d + 64, 1);
  tx.Put64(d + 64, 2);  // later records win
  EXPECT_FALSE(tx.empty());
  ASSERT_LE(tx.payload_bytes(), p->redo().capacity());
  Status st = p->redo().Commit(tx);
  ASSERT_TRUE(st.ok()) << st.ToString();

  EXPECT_EQ(*p->at<uint64_t>(d), 0x1122334455667788ull);
  uint64_t w;
  std::memcpy(&w, p->at<char>(d + 4096 + 4), 8);
  EXPECT_EQ(w, 0xa1a2a3a4a5a6a7a8ull);
  EXPECT_EQ(std::memcmp(p->at<char>(d + 8192 + 3), "hello, pool", 11), 0);
  EXPECT_EQ(std::memcmp(p->at<char>(d + 3 * 4096 - 5), blob.data(), blob.size()), 0);
  EXPECT_EQ(*p->at<uint64_t>(d + 64), 2u);
  // Bytes next to the targets are untouched (the pool's data area is zero).
  EXPECT_EQ(*p->at<uint8_t>(d + 8), 0);
  EXPECT_EQ(*p->at<uint8_t>(d + 4096 + 3), 0);
  EXPECT_EQ(*p->at<uint8_t>(d + 4096 + 12), 0);
  EXPECT_EQ(*p->at<uint8_t>(d + 8192 + 2), 0);
  EXPECT_EQ(*p->at<uint8_t>(d + 8192 + 14), 0);
  EXPECT_EQ(*p->at<uint8_t>(d + 3 * 4096 - 6), 0);
  EXPECT_EQ(*p->at<uint8_t>(d + 3 * 4096 - 5 + blob.size()), 0);
  ExpectAllSlotsRetired(p.get());

  // Durable: still there after a clean close and reopen, with nothing to replay.
  ASSERT_TRUE(p->Close().ok());
  auto q = Pool::Open(tp.path());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)->replayed_at_open(), 0);
  EXPECT_FALSE((*q)->needs_recovery());
  EXPECT_EQ(*(*q)->at<uint64_t>(d), 0x1122334455667788ull);
  EXPECT_EQ(std::memcmp((*q)->at<char>(d + 3 * 4096 - 5), blob.data(), blob.size()), 0);
}

// Referenced records (PutBytesRef) are read from the caller's buffer at
// commit, wherever it sits: an 8-byte record from an odd address to an
// aligned pool word, short and long ones, and a transaction appended to
// another, all apply exactly (the sanitizer build also checks no load is
// misaligned).
TEST(MediumRedoLog, ReferencedRecordsFromAnyAddressApplyExactly) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  const uint64_t d = p->header().meta_end;
  auto blob = RandomBytes(9000, 7);
  Tx tx, more;
  tx.PutBytesRef(d, blob.data() + 1, 8);          // a word from an odd address
  tx.PutBytesRef(d + 100, blob.data() + 3, 13);   // short, padded in the log
  tx.PutBytesRef(d + 4096 + 5, blob.data() + 17, 5000);  // long: not staged
  more.PutBytesRef(d + 16, blob.data() + 9, 8);
  more.Put64(d + 24, 77);
  tx.Append(more);
  ASSERT_EQ(tx.payload_bytes(), (16 + 8) + (16 + 16) + (16 + 5000) + (16 + 8) + 24u);
  ASSERT_TRUE(p->redo().Commit(tx).ok());
  EXPECT_EQ(std::memcmp(p->at<char>(d), blob.data() + 1, 8), 0);
  EXPECT_EQ(std::memcmp(p->at<char>(d + 100), blob.data() + 3, 13), 0);
  EXPECT_EQ(std::memcmp(p->at<char>(d + 4096 + 5), blob.data() + 17, 5000), 0);
  EXPECT_EQ(std::memcmp(p->at<char>(d + 16), blob.data() + 9, 8), 0);
  EXPECT_EQ(*p->at<uint64_t>(d + 24), 77u);
  EXPECT_EQ(*p->at<uint8_t>(d + 113), 0) << "padding reached the pool";
  ExpectAllSlotsRetired(p.get());
}

TEST(MediumRedoLog, EmptyTransactionIsANoop) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  Tx tx;
  EXPECT_TRUE(p->redo().Commit(tx).ok());
  tx.Put64(p->header().meta_end, 5);
  tx.Clear();
  EXPECT_TRUE(tx.empty());
  EXPECT_TRUE(p->redo().Commit(tx).ok());
  EXPECT_EQ(*p->at<uint64_t>(p->header().meta_end), 0u);
}

// A zero-length store is legal (an empty name, an empty extent list) and
// must not cost the records that follow it.
TEST(MediumRedoLog, ZeroLengthPutBytesDoesNotDropLaterRecords) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  const uint64_t d = p->header().meta_end;
  Tx tx;
  tx.Put64(d, 11);
  tx.PutBytes(d + 100, "", 0);
  tx.Put64(d + 8, 22);
  tx.PutBytes(d + 200, "abc", 3);
  ASSERT_TRUE(p->redo().Commit(tx).ok());
  EXPECT_EQ(*p->at<uint64_t>(d), 11u);
  EXPECT_EQ(*p->at<uint64_t>(d + 8), 22u);
  EXPECT_EQ(std::memcmp(p->at<char>(d + 200), "abc", 3), 0);
}

// A record that cannot be applied (outside the pool) must fail the whole
// transaction, not apply half of it and report success.
TEST(MediumRedoLog, RecordOutsideThePoolFailsTheWholeTransaction) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  const uint64_t d = p->header().meta_end;
  for (uint64_t bad_off : {kSize, kSize - 4, kSize + 4096, UINT64_MAX - 3}) {
    Tx tx;
    tx.Put64(d, 0xabcdef);
    tx.Put64(bad_off, 1);
    tx.Put64(d + 8, 0x123456);
    Status st = p->redo().Commit(tx);
    EXPECT_EQ(st.code(), EINVAL) << "off " << bad_off << ": " << st.ToString();
    EXPECT_EQ(*p->at<uint64_t>(d), 0u) << "half of a refused transaction was applied";
    EXPECT_EQ(*p->at<uint64_t>(d + 8), 0u);
    ExpectAllSlotsRetired(p.get());
  }
  Tx edge;  // the very last bytes of the pool are fine
  edge.PutBytes(kSize - 3, "xyz", 3);
  ASSERT_TRUE(p->redo().Commit(edge).ok());
  EXPECT_EQ(std::memcmp(p->at<char>(kSize - 3), "xyz", 3), 0);
}

TEST(MediumRedoLog, TooLargeIsE2bigAndChangesNothing) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  const uint64_t d = p->header().meta_end;
  const size_t cap = p->redo().capacity();
  EXPECT_EQ(cap, p->header().redo_slot_size - sizeof(RedoSlotHeader));

  // Exactly full: one record header (16 bytes) plus cap-16 bytes of data.
  auto fits = RandomBytes(cap - 16, 2);
  Tx full;
  full.PutBytes(d, fits.data(), fits.size());
  EXPECT_EQ(full.payload_bytes(), cap);
  ASSERT_TRUE(p->redo().Commit(full).ok());
  EXPECT_EQ(std::memcmp(p->at<char>(d), fits.data(), fits.size()), 0);

  // One word more does not fit.
  const uint64_t d2 = d + 2 * MiB;
  auto big = RandomBytes(cap - 16 + 1, 3);
  Tx over;
  over.Put64(d2 - 8, 77);
  over.PutBytes(d2, big.data(), big.size());
  EXPECT_GT(over.payload_bytes(), cap);
  std::vector<char> before(p->at<char>(d2 - 8), p->at<char>(d2 + big.size() + 8));
  Status st = p->redo().Commit(over);
  EXPECT_EQ(st.code(), E2BIG) << st.ToString();
  EXPECT_EQ(std::memcmp(p->at<char>(d2 - 8), before.data(), before.size()), 0);
  ExpectAllSlotsRetired(p.get());
}

// Each thread commits to its own words; with fewer slots than threads the
// slot hand-off is exercised too.
TEST(MediumRedoLog, ConcurrentCommitsFromManyThreadsAllApply) {
  CreateOptions opt;
  opt.redo_slots = 2;
  TempPool tp(kSize, opt);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  const uint64_t d = p->header().meta_end;
  constexpr int kThreads = 6, kCommits = 400;
  HangGuard guard(120);
  std::vector<std::thread> ts;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kCommits; i++) {
        uint64_t base = d + (uint64_t(t) * kCommits + i) * 64;
        Tx tx;
        tx.Put64(base, (uint64_t(t) << 32) | i);
        char text[40];
        int n = std::snprintf(text, sizeof text, "thread %d commit %d", t, i);
        tx.PutBytes(base + 13, text, n);
        if (!p->redo().Commit(tx).ok()) failures[t]++;
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int t = 0; t < kThreads; t++) {
    EXPECT_EQ(failures[t], 0);
    for (int i = 0; i < kCommits; i++) {
      uint64_t base = d + (uint64_t(t) * kCommits + i) * 64;
      ASSERT_EQ(*p->at<uint64_t>(base), (uint64_t(t) << 32) | i) << t << "/" << i;
      char text[40];
      int n = std::snprintf(text, sizeof text, "thread %d commit %d", t, i);
      ASSERT_EQ(std::memcmp(p->at<char>(base + 13), text, n), 0) << t << "/" << i;
    }
  }
  ExpectAllSlotsRetired(p.get());
}

TEST(MediumRedoLog, ConcurrentCommitsFromTwoProcessesAllApply) {
  CreateOptions opt;
  opt.redo_slots = 1;  // both processes contend for one slot
  TempPool tp(kSize, opt);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  const uint64_t d = p->header().meta_end;
  constexpr int kCommits = 2000;
  auto run = [&](Pool* pool, uint64_t tag) {
    for (int i = 0; i < kCommits; i++) {
      Tx tx;
      tx.Put64(d + (tag * kCommits + i) * 16, (tag << 32) | i);
      tx.Put64(d + (tag * kCommits + i) * 16 + 8, ~((tag << 32) | i));
      if (!pool->redo().Commit(tx).ok()) return false;
    }
    return true;
  };
  std::string path = tp.path();
  HangGuard guard(120);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(100);
    auto c = Pool::Open(path);
    if (!c.ok()) ::_exit(2);
    (*c)->FinishOpen();
    bool ok = run(c->get(), 1);
    ::_exit(ok && (*c)->Close().ok() ? 0 : 3);
  }
  EXPECT_TRUE(run(p.get(), 0));
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << DescribeWait(st);
  for (uint64_t tag : {0, 1})
    for (int i = 0; i < kCommits; i++) {
      ASSERT_EQ(*p->at<uint64_t>(d + (tag * kCommits + i) * 16), (tag << 32) | i);
      ASSERT_EQ(*p->at<uint64_t>(d + (tag * kCommits + i) * 16 + 8), ~((tag << 32) | i));
    }
}

// ------------------------------------------------------------ recovery
// Record sets written into a slot by hand, in the documented format:
//   RedoSlotHeader{seq != 0, bytes, crc32c(seq, bytes, payload)}
//   payload: {u64 pool offset, u64 length, data padded to 8 bytes} ...

struct Payload {
  std::vector<uint64_t> words;
  void Add(uint64_t off, const void* data, size_t len) {
    words.push_back(off);
    words.push_back(len);
    size_t at = words.size();
    words.resize(at + (len + 7) / 8, 0);
    std::memcpy(words.data() + at, data, len);
  }
  uint32_t bytes() const { return static_cast<uint32_t>(words.size() * 8); }
};

uint32_t SlotChecksum(uint64_t seq, uint32_t bytes, const void* payload, size_t payload_len) {
  std::vector<uint8_t> buf(12 + payload_len);
  std::memcpy(buf.data(), &seq, 8);
  std::memcpy(buf.data() + 8, &bytes, 4);
  std::memcpy(buf.data() + 12, payload, payload_len);
  return Crc32c(buf.data(), buf.size());
}

// Leaves slot `s` as a process that died right after committing would.
void WriteCommittedSlot(Pool* p, int s, const Payload& pl, uint64_t seq = 1) {
  RedoSlotHeader* h = Slot(p, s);
  std::memcpy(h + 1, pl.words.data(), pl.bytes());
  RedoSlotHeader nh{};
  nh.seq = seq;
  nh.bytes = pl.bytes();
  nh.crc = SlotChecksum(seq, nh.bytes, pl.words.data(), pl.bytes());
  std::memcpy(h, &nh, sizeof nh);
}

TEST(MediumRedoRecovery, CommittedSlotsAreReplayedAtOpen) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  auto p = MustOpen(tp.path());
  ASSERT_TRUE(p);
  const uint64_t d = p->header().meta_end;
  auto blob = RandomBytes(3000, 4);
  Payload a, b;
  uint64_t v = 0x5555aaaa5555aaaaull;
  a.Add(d, &v, 8);
  a.Add(d + 4093, blob.data(), blob.size());
  uint64_t root = 0x42;
  b.Add(format::kStateOff + offsetof(format::PoolState, space_root), &root, 8);
  WriteCommittedSlot(p.get(), 3, a, 1);
  WriteCommittedSlot(p.get(), 15, b, 987654321);
  p->Abandon();  // the process dies before applying

  auto q = MustOpen(tp.path());  // recovery runs here
  ASSERT_TRUE(q);
  EXPECT_EQ(q->replayed_at_open(), 2);
  EXPECT_EQ(*q->at<uint64_t>(d), v);
  EXPECT_EQ(std::memcmp(q->at<char>(d + 4093), blob.data(), blob.size()), 0);
  EXPECT_EQ(q->state()->space_root, 0x42u);
  ExpectAllSlotsRetired(q.get());
  ASSERT_TRUE(q->Close().ok());

  auto r = Pool::Open(tp.path());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->replayed_at_open(), 0) << "a replayed slot must not be replayed again";
  EXPECT_FALSE((*r)->needs_recovery());
}

// A crash image: the pool file as a process left it when it died after
// committing (slot written, dirty flag set), opened by a fresh process.
TEST(MediumRedoRecovery, CrashImageWrittenThroughTheFileIsRecovered) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  uint64_t d;
  {
    auto p = MustOpen(tp.path());
    ASSERT_TRUE(p);
    d = p->header().meta_end;
    ASSERT_TRUE(p->Close().ok());
  }
  Payload pl;
  uint64_t v = 99;
  pl.Add(d + 16, &v, 8);
  std::vector<uint8_t> slot(64 + pl.bytes());
  RedoSlotHeader nh{};
  nh.seq = 1;
  nh.bytes = pl.bytes();
  nh.crc = SlotChecksum(1, nh.bytes, pl.words.data(), pl.bytes());
  std::memcpy(slot.data(), &nh, 64);
  std::memcpy(slot.data() + 64, pl.words.data(), pl.bytes());
  ASSERT_TRUE(testing::WriteFileAt(tp.path(), format::kRedoOff, slot.data(), slot.size()));
  uint64_t one = 1;
  ASSERT_TRUE(testing::WriteFileAt(tp.path(), format::kStateOff + offsetof(format::PoolState, dirty), &one, 8));

  auto r = Pool::Open(tp.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->needs_recovery());
  EXPECT_EQ((*r)->replayed_at_open(), 1);
  EXPECT_EQ(*(*r)->at<uint64_t>(d + 16), 99u);
  ExpectAllSlotsRetired(r->get());
}

struct Damage {
  const char* name;
  void (*apply)(RedoSlotHeader* h, uint64_t* payload);
};

// Slots that were never (completely) committed must be discarded untouched.
TEST(MediumRedoRecovery, UncommittedOrDamagedSlotsAreDiscarded) {
  const Damage damages[] = {
      {"checksum flipped", [](RedoSlotHeader* h, uint64_t*) { h->crc ^= 1; }},
      {"payload byte flipped", [](RedoSlotHeader*, uint64_t* pl) { reinterpret_cast<uint8_t*>(pl)[20] ^= 0x10; }},
      {"target offset changed", [](RedoSlotHeader*, uint64_t* pl) { pl[0] += 8; }},
      {"length grown", [](RedoSlotHeader* h, uint64_t*) { h->bytes += 8; }},
      {"length not a multiple of 8", [](RedoSlotHeader* h, uint64_t*) { h->bytes -= 3; }},
      {"length beyond the slot", [](RedoSlotHeader* h, uint64_t*) { h->bytes = 0xfffffff8u; }},
      {"seq changed", [](RedoSlotHeader* h, uint64_t*) { h->seq = 2; }},
      {"never committed (seq 0)", [](RedoSlotHeader* h, uint64_t*) { h->seq = 0; }},
  };
  for (const Damage& dmg : damages) {
    SCOPED_TRACE(dmg.name);
    TempPool tp(kSize);
    ASSERT_TRUE(tp.status().ok());
    auto p = MustOpen(tp.path());
    ASSERT_TRUE(p);
    const uint64_t d = p->header().meta_end;
    *p->at<uint64_t>(d) = 0x01d01d01d;
    std::memcpy(p->at<char>(d + 100), "old text here", 13);
    Payload pl;
    uint64_t v = 0x0e0e0e0e;
    pl.Add(d, &v, 8);
    pl.Add(d + 100, "NEW TEXT HERE", 13);
    WriteCommittedSlot(p.get(), 5, pl);
    dmg.apply(Slot(p.get(), 5), reinterpret_cast<uint64_t*>(Slot(p.get(), 5) + 1));
    p->Abandon();

    auto q = MustOpen(tp.path());
    ASSERT_TRUE(q);
    EXPECT_EQ(q->replayed_at_open(), 0);
    EXPECT_EQ(*q->at<uint64_t>(d), 0x01d01d01du) << "a damaged record was applied";
    EXPECT_EQ(std::memcmp(q->at<char>(d + 100), "old text here", 13), 0) << "a damaged record was applied";
    ExpectAllSlotsRetired(q.get());
  }
}

}  // namespace
}  // namespace mapfs::medium
