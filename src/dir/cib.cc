// CIB directory operations: create, lookup, insert, remove, replace, count,
// list, destroy, partition walk. Splits and index growth are in
// cib_split.cc, fsck in cib_check.cc.
//
// Consistency. Insert, Remove and Replace only add 8-byte stores to the
// caller's transaction (entry words, the block's bitmap, fingerprint and
// long-name words, the root's count), so the caller commits the directory
// change and its inode changes as one redo transaction. Entries are written
// through the transaction too, never directly: a slot freed earlier in the
// same transaction (or by a split) may still have pending stores recorded,
// and only a later record is sure to win over them at replay. A slot
// removed in the pending transaction is not reused by it (its entry is still
// live on media until the commit).
#include "dir/cib.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "common/crc32c.h"
#include "dir/cib_internal.h"
#include "medium/persist.h"
#include "space/partitions.h"

namespace mapfs::dir {

namespace internal {

namespace {
std::atomic<uint64_t (*)(std::string_view)> g_test_hash{nullptr};
std::atomic<int> g_test_cap{0};

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

uint64_t Mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// A MurmurHash3-style 64-bit hash, keyed by the directory's seed.
uint64_t NameHash(uint64_t seed, std::string_view s) {
  if (auto fn = g_test_hash.load(std::memory_order_relaxed)) return fn(s);
  constexpr uint64_t c1 = 0x87c37b91114253d5ull, c2 = 0x4cf5ad432745937full;
  uint64_t h = seed ^ (s.size() * 0x9E3779B97F4A7C15ull);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t k;
    std::memcpy(&k, s.data() + i, 8);
    k *= c1;
    k = Rotl(k, 31);
    k *= c2;
    h ^= k;
    h = Rotl(h, 27) * 5 + 0x52dce729;
  }
  uint64_t k = LoadTail(s.data() + i, s.size() - i);
  k *= c2;
  k = Rotl(k, 33);
  k *= c1;
  h ^= k;
  return Mix64(h ^ s.size());
}

Status ValidName(std::string_view name) {
  if (name.size() > kMaxName) return Status::Error(ENAMETOOLONG, "name longer than 255 bytes");
  if (name.empty()) return Status::Error(EINVAL, "empty name");
  if (name == "." || name == "..") return Status::Error(EINVAL, "\".\" and \"..\" are not stored");
  // Eight bytes at a time (every lookup and insert pays this; a byte loop
  // cost ~80 instructions for a 12-byte name): a word holds a NUL or a '/'
  // exactly when HasZero finds a zero byte in it or in it XOR "////////".
  // The tail is padded with 'a', which is neither.
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHighs = 0x8080808080808080ull;
  constexpr uint64_t kSlashes = kOnes * '/';
  auto has_zero = [](uint64_t v) { return ((v - kOnes) & ~v & kHighs) != 0; };
  uint64_t bad_nul = 0, bad_slash = 0;
  size_t i = 0;
  for (; i + 8 <= name.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, name.data() + i, 8);
    bad_nul |= has_zero(w);
    bad_slash |= has_zero(w ^ kSlashes);
  }
  if (i < name.size()) {
    size_t n = name.size() - i;  // 1..7
    uint64_t w = LoadTail(name.data() + i, n) | ((kOnes * 'a') & ~((uint64_t{1} << (8 * n)) - 1));
    bad_nul |= has_zero(w);
    bad_slash |= has_zero(w ^ kSlashes);
  }
  if (bad_slash) return Status::Error(EINVAL, "name holds '/'");
  if (bad_nul) return Status::Error(EINVAL, "name holds NUL");
  return Status::Ok();
}

int TopCap() {
  int c = g_test_cap.load(std::memory_order_relaxed);
  return c > 0 ? std::min(c, f::kTopCap) : f::kTopCap;
}
int NodeCap() {
  int c = g_test_cap.load(std::memory_order_relaxed);
  return c > 0 ? std::min(c, f::kNodeCap) : f::kNodeCap;
}

uint32_t RootCrc(const f::Root& r) {
  // Every lookup checks its directory's root: eight words in registers,
  // the crc field (the high half of word 1) read as 0, no copy.
  static_assert(f::kRootCrcBytes == 64 && offsetof(f::Root, crc) == 12);
  uint64_t w[8];
  std::memcpy(w, &r, sizeof w);
  w[1] &= 0xffffffffull;
  return Crc32cWords(w, 8);
}

// ---------------------------------------------------------------- Dir

Status Dir::Damaged(uint64_t voff, const std::string& what) const {
  return Status::Error(EUCLEAN, "directory " + Hex(root_) + ": " + what + " at virtual offset " + Hex(voff));
}

Status Dir::Open() {
  if (env_.vm == nullptr || env_.pool == nullptr) return Status::Error(EINVAL, "directory layer without a pool");
  if (!Plausible(root_)) return Status::Error(EUCLEAN, "directory root at bad virtual offset " + Hex(root_));
  const auto* r = At<f::Root>(root_);
  if (r->magic != f::kRootMagic) return Damaged(root_, "root: bad magic");
  if (r->version != f::kVersion) return Damaged(root_, "root: unknown version " + std::to_string(r->version));
  if (r->crc != RootCrc(*r)) return Damaged(root_, "root: checksum mismatch");
  if (r->self != root_) return Damaged(root_, "root: belongs at " + Hex(r->self));
  if (r->depth > static_cast<uint32_t>(f::kMaxDepth)) return Damaged(root_, "root: index depth out of range");
  if (r->top_count < 1 || r->top_count > static_cast<uint32_t>(f::kTopCap))
    return Damaged(root_, "root: top array count out of range");
  r_ = r;
  return Status::Ok();
}

Status Dir::CheckBlock(uint64_t voff, uint16_t kind) const {
  if (!Plausible(voff)) return Damaged(voff, "block reference out of range");
  const auto* b = At<f::BlockHeader>(voff);
  if (b->tag != f::kBlockTag || b->version != f::kVersion) return Damaged(voff, "block: bad tag");
  if (b->kind != kind) return Damaged(voff, kind == f::kPrimary ? "block: not a primary block" : "block: not an overflow block");
  if (b->owner != root_) return Damaged(voff, "block: belongs to directory " + Hex(b->owner));
  if (b->min > b->max) return Damaged(voff, "block: empty range");
  if ((b->bitmap & ~f::kSlotMask) != 0) return Damaged(voff, "block: header slots marked live");
  return Status::Ok();
}

Status Dir::CheckNode(uint64_t voff, int level) const {
  if (!Plausible(voff)) return Damaged(voff, "index node reference out of range");
  const auto* n = At<f::Node>(voff);
  if (n->tag != f::kNodeTag || n->version != f::kVersion) return Damaged(voff, "index node: bad tag");
  if (n->owner != root_) return Damaged(voff, "index node: belongs to directory " + Hex(n->owner));
  if (n->level != level) return Damaged(voff, "index node: level " + std::to_string(n->level) + ", expected " + std::to_string(level));
  if (n->count < 1 || n->count > static_cast<uint32_t>(f::kNodeCap)) return Damaged(voff, "index node: count out of range");
  return Status::Ok();
}

Status Dir::Descend(uint64_t h, Path* p) const {
  p->levels.clear();
  uint64_t node = 0, arr = root_ + offsetof(f::Root, top);
  int count = static_cast<int>(r_->top_count);
  uint64_t lo = 0, hi = ~uint64_t{0};
  for (int lvl = static_cast<int>(r_->depth);; lvl--) {
    const auto* e = At<f::Elem>(arr);
    if (e[0].min != lo) return Damaged(node ? node : root_, "index array does not start at its range");
    int a = 0, b = count - 1;
    while (a < b) {
      int m = (a + b + 1) / 2;
      if (e[m].min <= h) a = m;
      else b = m - 1;
    }
    uint64_t child_hi = hi;
    if (a + 1 < count) {
      if (e[a + 1].min <= e[a].min || e[a + 1].min > hi) return Damaged(node ? node : root_, "index array out of order");
      child_hi = e[a + 1].min - 1;
    }
    if (!p->levels.push_back({node, arr, count, a, lvl})) return Damaged(root_, "index deeper than its depth");
    lo = e[a].min;
    hi = child_hi;
    uint64_t child = e[a].child;
    if (lvl == 0) {
      MAPFS_RETURN_IF_ERROR(CheckBlock(child, f::kPrimary));
      const auto* blk = At<f::BlockHeader>(child);
      if (blk->min != lo || blk->max != hi) return Damaged(child, "block range disagrees with the index");
      p->block = child;
      p->lo = lo;
      p->hi = hi;
      return Status::Ok();
    }
    MAPFS_RETURN_IF_ERROR(CheckNode(child, lvl));
    node = child;
    arr = child + offsetof(f::Node, e);
    count = static_cast<int>(At<f::Node>(child)->count);
  }
}

Status Dir::ReadWord(uint64_t voff, const meta::MetaTx* tx, uint64_t* out) const {
  if (tx == nullptr) {
    *out = *At<uint64_t>(voff);
    return Status::Ok();
  }
  auto v = tx->Load64(voff);
  if (!v.ok()) return v.status();
  *out = *v;
  return Status::Ok();
}

Status Dir::ReadSlot(uint64_t blk, int i, const meta::MetaTx* tx, f::Slot* out) const {
  if (tx == nullptr) {
    std::memcpy(out, At<char>(SlotVoff(blk, i)), sizeof *out);
    return Status::Ok();
  }
  uint64_t w[8];
  for (int k = 0; k < 8; k++) MAPFS_RETURN_IF_ERROR(ReadWord(SlotVoff(blk, i) + 8 * k, tx, &w[k]));
  std::memcpy(out, w, sizeof *out);
  return Status::Ok();
}

Status Dir::ReadName(uint64_t blk, const f::Slot& head, const meta::MetaTx* tx, char* out, size_t* len) const {
  size_t n = head.name_len;
  if (n == 0) return Damaged(blk, "entry with an empty name");
  std::memcpy(out, head.name, std::min(n, f::kInlineName));
  int nc = f::ContSlots(n);
  for (int k = 0; k < nc; k++) {
    int c = head.cont[k];
    if (c < f::kFirstSlot || c >= f::kSlots) return Damaged(blk, "long name with a bad continuation slot");
    size_t at = f::kInlineName + k * f::kContName, part = std::min(f::kContName, n - at);
    if (tx == nullptr) {
      std::memcpy(out + at, At<char>(SlotVoff(blk, c)), part);
    } else {
      for (size_t w = 0; w * 8 < part; w++) {
        uint64_t v;
        MAPFS_RETURN_IF_ERROR(ReadWord(SlotVoff(blk, c) + 8 * w, tx, &v));
        std::memcpy(out + at + 8 * w, &v, std::min<size_t>(8, part - 8 * w));
      }
    }
  }
  *len = n;
  return Status::Ok();
}

Status Dir::LoadPend(uint64_t blk, const meta::MetaTx* tx, PendBlock* pb) const {
  const auto* b = At<f::BlockHeader>(blk);
  pb->voff = blk;
  pb->M = b->bitmap;
  pb->LM = b->longmap;
  MAPFS_RETURN_IF_ERROR(ReadWord(blk + offsetof(f::BlockHeader, bitmap), tx, &pb->P));
  MAPFS_RETURN_IF_ERROR(ReadWord(blk + offsetof(f::BlockHeader, longmap), tx, &pb->LP));
  if (((pb->M | pb->P) & ~f::kSlotMask) != 0) return Damaged(blk, "block: header slots marked live");
  pb->occupied = pb->M | pb->P;
  // Continuation slots of long names: live media heads (whose long bit was
  // committed with them) and heads only the pending transaction added.
  uint64_t longs = (pb->M & pb->LM) | (pb->P & ~pb->M & pb->LP);
  for (uint64_t m = longs; m; m &= m - 1) {
    int i = __builtin_ctzll(m);
    f::Slot s;
    MAPFS_RETURN_IF_ERROR(ReadSlot(blk, i, (pb->M & Bit(i)) ? nullptr : tx, &s));
    int nc = f::ContSlots(s.name_len);
    for (int k = 0; k < nc; k++) {
      int c = s.cont[k];
      if (c < f::kFirstSlot || c >= f::kSlots) return Damaged(blk, "long name with a bad continuation slot");
      pb->occupied |= Bit(c);
    }
  }
  return Status::Ok();
}

namespace {
// Bit i set where fp[i] == v: the fingerprint filter for a whole block at
// once (a block holds up to 62 entries; comparing them one byte at a time
// was the largest single cost of a lookup).
uint64_t FpMatches(const uint8_t* fp, uint8_t v) {
  static_assert(f::kSlots == 64, "one fingerprint byte per bit of a 64-bit mask");
#if defined(__x86_64__)
  const __m128i k = _mm_set1_epi8(static_cast<char>(v));
  uint64_t m = 0;
  for (int q = 0; q < 4; q++) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(fp + 16 * q));
    m |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, k)))) << (16 * q);
  }
  return m;
#else
  uint64_t m = 0;
  for (int i = 0; i < f::kSlots; i++)
    if (fp[i] == v) m |= Bit(i);
  return m;
#endif
}
}  // namespace

Status Dir::FindInBlock(const PendBlock& pb, uint64_t h, std::string_view name, const meta::MetaTx* tx,
                        int* slot) const {
  *slot = -1;
  const auto* b = At<f::BlockHeader>(pb.voff);
  const uint8_t fp = static_cast<uint8_t>(h);
  char buf[kMaxName + 1];
  // Heads committed on media never change hash or name: read them in
  // place, filtered by fingerprint. Heads the pending transaction added
  // are read through it (all of them: their fingerprint is pending too).
  uint64_t media_live = pb.P & pb.M;
  uint64_t candidates = (pb.P & ~pb.M) | (media_live ? media_live & FpMatches(b->fp, fp) : 0);
  for (uint64_t m = candidates; m; m &= m - 1) {
    int i = __builtin_ctzll(m);
    bool media = (pb.M & Bit(i)) != 0;
    f::Slot s;
    if (media) {
      const auto* in_place = At<f::Slot>(SlotVoff(pb.voff, i));
      if (in_place->hash != h || in_place->name_len != name.size()) continue;
      if (name.size() <= f::kInlineName) {
        // The whole name is in the head: compared in place, no copies.
        if (std::memcmp(in_place->name, name.data(), name.size()) == 0) {
          *slot = i;
          return Status::Ok();
        }
        continue;
      }
      MAPFS_RETURN_IF_ERROR(ReadSlot(pb.voff, i, nullptr, &s));
    } else {
      MAPFS_RETURN_IF_ERROR(ReadSlot(pb.voff, i, tx, &s));
      if (s.hash != h) continue;
    }
    if (s.name_len != name.size()) continue;
    size_t len = 0;
    MAPFS_RETURN_IF_ERROR(ReadName(pb.voff, s, media ? nullptr : tx, buf, &len));
    if (std::string_view(buf, len) == name) {
      *slot = i;
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Status Dir::Group(uint64_t h, BlockList* blocks, Path* path) const {
  MAPFS_RETURN_IF_ERROR(Descend(h, path));
  blocks->clear();
  blocks->push_back(path->block);
  uint64_t v = At<f::BlockHeader>(path->block)->overflow;
  uint64_t limit = r_->nblocks;
  while (v != 0) {
    if (blocks->size() > limit) return Damaged(path->block, "overflow chain longer than the block count");
    MAPFS_RETURN_IF_ERROR(CheckBlock(v, f::kOverflow));
    const auto* o = At<f::BlockHeader>(v);
    if (o->min != path->lo || o->max != path->hi) return Damaged(v, "overflow block range differs from its primary");
    blocks->push_back(v);
    v = o->overflow;
  }
  if (blocks->size() > 1 && path->lo != path->hi) return Damaged(path->block, "overflow chain on a block of several hash values");
  return Status::Ok();
}

}  // namespace internal

using internal::Bit;
using internal::Dir;
using internal::PendBlock;
using internal::SlotVoff;
namespace f = format;

void SetHashForTesting(uint64_t (*fn)(std::string_view)) { internal::g_test_hash.store(fn); }
void SetIndexCapacityForTesting(int cap) { internal::g_test_cap.store(cap >= 3 ? cap : 0); }

Cib::Cib(Env env) : env_(env) {}

Result<uint64_t> Cib::Create() {
  auto root = env_.space->Alloc(0);
  if (!root.ok()) return root.status();
  auto blk = env_.space->Alloc(0);
  if (!blk.ok()) {
    (void)env_.space->Free(*root);
    return blk.status();
  }
  // Both partitions are unreachable until the caller stores the root's
  // offset, so they are written directly and made durable here.
  f::BlockHeader b{};
  b.tag = f::kBlockTag;
  b.version = f::kVersion;
  b.kind = f::kPrimary;
  b.min = 0;
  b.max = ~uint64_t{0};
  b.owner = *root;
  auto r = std::make_unique<f::Root>();
  std::memset(r.get(), 0, sizeof *r);
  r->magic = f::kRootMagic;
  r->version = f::kVersion;
  r->self = *root;
  r->seed = internal::Mix64(*root ^ 0x6d617066735f6369ull);
  r->depth = 0;
  r->top_count = 1;
  r->nblocks = 1;
  r->top[0] = {0, *blk};
  r->crc = internal::RootCrc(*r);
  medium::CopyNt(env_.vm->at(*blk), &b, sizeof b);
  medium::CopyNt(env_.vm->at(*root), r.get(), sizeof *r);
  medium::Fence();
  return *root;
}

namespace {
// The entry FindInBlock found in `slot` of block `blk`, and where it is.
Entry FoundAt(const Dir& d, uint64_t blk, int slot, EntryLoc* loc) {
  const auto* s = d.At<f::Slot>(SlotVoff(blk, slot));
  if (loc != nullptr) *loc = EntryLoc{blk, slot};
  return Entry{s->ino, s->type};
}
}  // namespace

Result<Entry> Cib::Lookup(uint64_t root, std::string_view name, EntryLoc* loc) {
  MAPFS_RETURN_IF_ERROR(internal::ValidName(name));
  Dir d(env_, root);
  MAPFS_RETURN_IF_ERROR(d.Open());
  uint64_t h = d.Hash(name);
  internal::Path path;
  Dir::BlockList group;
  MAPFS_RETURN_IF_ERROR(d.Group(h, &group, &path));
  for (uint64_t blk : group) {
    PendBlock pb;
    pb.voff = blk;
    pb.M = pb.P = d.At<f::BlockHeader>(blk)->bitmap;
    int slot;
    MAPFS_RETURN_IF_ERROR(d.FindInBlock(pb, h, name, nullptr, &slot));
    if (slot >= 0) return FoundAt(d, blk, slot, loc);
  }
  return Status::Error(ENOENT, "no such entry");
}

bool Cib::StillNames(uint64_t root, const EntryLoc& loc, std::string_view name, uint64_t ino) {
  if (loc.block == 0 || loc.slot < f::kFirstSlot || loc.slot >= f::kSlots || !internal::ValidName(name).ok())
    return false;
  Dir d(env_, root);
  if (!d.Open().ok()) return false;
  // The same checks as a descent makes before trusting a block: the hint
  // came from this directory, but the caller held no lock in between.
  if (!d.CheckBlock(loc.block, f::kPrimary).ok() && !d.CheckBlock(loc.block, f::kOverflow).ok()) return false;
  PendBlock pb;
  pb.voff = loc.block;
  pb.M = pb.P = medium::Load64(&d.At<f::BlockHeader>(loc.block)->bitmap);
  int slot = -1;
  if (!d.FindInBlock(pb, d.Hash(name), name, nullptr, &slot).ok() || slot != loc.slot) return false;
  return medium::Load64(&d.At<f::Slot>(SlotVoff(loc.block, slot))->ino) == ino;
}

namespace {

// Where a name lives in the pending view: its block and slot.
struct Found {
  uint64_t blk = 0;
  int slot = -1;
  PendBlock pb;
};

Status FindPending(Dir& d, uint64_t h, std::string_view name, const meta::MetaTx* tx, Found* out,
                   internal::SmallVec<PendBlock, 2>* group_view, internal::Path* path) {
  Dir::BlockList group;
  MAPFS_RETURN_IF_ERROR(d.Group(h, &group, path));
  if (group_view) group_view->clear();
  for (uint64_t blk : group) {
    PendBlock pb;
    MAPFS_RETURN_IF_ERROR(d.LoadPend(blk, tx, &pb));
    if (group_view) group_view->push_back(pb);
    int slot;
    if (out->slot < 0) {
      MAPFS_RETURN_IF_ERROR(d.FindInBlock(pb, h, name, tx, &slot));
      if (slot >= 0) {
        out->blk = blk;
        out->slot = slot;
        out->pb = pb;
        if (!group_view) return Status::Ok();
      }
    }
  }
  return Status::Ok();
}

Status AddCount(uint64_t root, meta::MetaTx* tx, int64_t delta) {
  uint64_t voff = root + offsetof(f::Root, count);
  auto c = tx->Load64(voff);
  if (!c.ok()) return c.status();
  return tx->Store64(voff, *c + static_cast<uint64_t>(delta));
}

// Records the stores of a new entry at `head` (continuation slots `conts`)
// of the block in `pb`.
Status WriteEntry(uint64_t root, const PendBlock& pb, int head, const int* conts, uint64_t h,
                  std::string_view name, Entry e, meta::MetaTx* tx) {
  const uint64_t blk = pb.voff;
  const int nc = f::ContSlots(name.size());
  f::Slot s{};
  s.hash = h;
  s.ino = e.ino;
  s.type = e.type;
  s.name_len = static_cast<uint8_t>(name.size());
  for (int k = 0; k < nc; k++) s.cont[k] = static_cast<uint8_t>(conts[k]);
  size_t inl = std::min(name.size(), f::kInlineName);
  std::memcpy(s.name, name.data(), inl);
  uint64_t w[8];
  std::memcpy(w, &s, sizeof w);
  // Only the words that carry the name; bytes past name_len are never read.
  size_t words = (offsetof(f::Slot, name) + inl + 7) / 8;
  for (size_t k = 0; k < words; k++) MAPFS_RETURN_IF_ERROR(tx->Store64(SlotVoff(blk, head) + 8 * k, w[k]));
  for (int k = 0; k < nc; k++) {
    size_t at = f::kInlineName + k * f::kContName, part = std::min(f::kContName, name.size() - at);
    uint64_t cw[8] = {};
    std::memcpy(cw, name.data() + at, part);
    for (size_t j = 0; j * 8 < part; j++) MAPFS_RETURN_IF_ERROR(tx->Store64(SlotVoff(blk, conts[k]) + 8 * j, cw[j]));
  }
  uint64_t fpw = blk + offsetof(f::BlockHeader, fp) + (head / 8) * 8;
  auto fv = tx->Load64(fpw);
  if (!fv.ok()) return fv.status();
  int sh = 8 * (head % 8);
  MAPFS_RETURN_IF_ERROR(tx->Store64(fpw, (*fv & ~(uint64_t{0xff} << sh)) | (uint64_t{static_cast<uint8_t>(h)} << sh)));
  bool want_long = nc > 0, is_long = (pb.LP & Bit(head)) != 0;
  if (want_long != is_long)
    MAPFS_RETURN_IF_ERROR(tx->Store64(blk + offsetof(f::BlockHeader, longmap), pb.LP ^ Bit(head)));
  MAPFS_RETURN_IF_ERROR(tx->Store64(blk + offsetof(f::BlockHeader, bitmap), pb.P | Bit(head)));
  return AddCount(root, tx, 1);
}

}  // namespace

Status Cib::Insert(uint64_t root, std::string_view name, Entry e, meta::MetaTx* tx) {
  MAPFS_RETURN_IF_ERROR(internal::ValidName(name));
  if (tx == nullptr) return Status::Error(EINVAL, "insert without a transaction");
  Dir d(env_, root);
  MAPFS_RETURN_IF_ERROR(d.Open());
  const uint64_t h = d.Hash(name);
  const int need = 1 + f::ContSlots(name.size());
  // Each round either places the entry or makes room (one split or one
  // overflow block, committed); a round that makes room strictly shrinks the
  // target range or adds space, so a few rounds always suffice.
  for (int round = 0; round < 16; round++) {
    Found found;
    internal::SmallVec<PendBlock, 2> group;
    internal::Path path;
    MAPFS_RETURN_IF_ERROR(FindPending(d, h, name, tx, &found, &group, &path));
    if (found.slot >= 0) return Status::Error(EEXIST, "entry exists");
    for (const PendBlock& pb : group) {
      if (pb.FreeSlots() < need) continue;
      uint64_t free = f::kSlotMask & ~pb.occupied;
      int slots[1 + f::kMaxCont];
      for (int k = 0; k < need; k++) {
        slots[k] = __builtin_ctzll(free);
        free &= free - 1;
      }
      return WriteEntry(root, pb, slots[0], slots + 1, h, name, e, tx);
    }
    if (path.lo == path.hi) {
      MAPFS_RETURN_IF_ERROR(d.AddOverflow(path));
    } else {
      MAPFS_RETURN_IF_ERROR(d.Split(path, h, need, tx));
    }
    MAPFS_RETURN_IF_ERROR(d.Open());  // the root changed
  }
  return d.Damaged(root, "insert found no room after repeated splits");
}

Result<Entry> Cib::FindForInsert(uint64_t root, std::string_view name, InsertSpot* spot, EntryLoc* loc) {
  *spot = InsertSpot{};
  MAPFS_RETURN_IF_ERROR(internal::ValidName(name));
  Dir d(env_, root);
  MAPFS_RETURN_IF_ERROR(d.Open());
  const uint64_t h = d.Hash(name);
  const int need = 1 + f::ContSlots(name.size());
  spot->hash = h;
  internal::Path path;
  Dir::BlockList group;
  MAPFS_RETURN_IF_ERROR(d.Group(h, &group, &path));
  for (uint64_t blk : group) {
    PendBlock pb;
    MAPFS_RETURN_IF_ERROR(d.LoadPend(blk, nullptr, &pb));  // media: no transaction yet
    int slot;
    MAPFS_RETURN_IF_ERROR(d.FindInBlock(pb, h, name, nullptr, &slot));
    if (slot >= 0) return FoundAt(d, blk, slot, loc);
    // The first block with room, as Insert picks it.
    if (spot->block == 0 && pb.FreeSlots() >= need) {
      spot->block = blk;
      spot->bitmap = pb.M;
      spot->longmap = pb.LM;
      spot->occupied = pb.occupied;
    }
  }
  return Status::Error(ENOENT, "no such entry");
}

Status Cib::InsertAt(uint64_t root, const InsertSpot& spot, std::string_view name, Entry e, meta::MetaTx* tx) {
  if (tx == nullptr) return Status::Error(EINVAL, "insert without a transaction");
  if (spot.block == 0 || name.size() > kMaxName) return Insert(root, name, e, tx);
  const auto* b = reinterpret_cast<const f::BlockHeader*>(env_.vm->at(spot.block));
  // The write lock held since FindForInsert already keeps all of this;
  // checked anyway (a few loads of a line in cache): a spot whose block
  // changed is only a cost, never a misplaced entry.
  if (medium::Load64(&b->bitmap) != spot.bitmap || medium::Load64(&b->longmap) != spot.longmap ||
      spot.hash < b->min || spot.hash > b->max)
    return Insert(root, name, e, tx);
  auto mine = tx->StoresIn(spot.block, f::kPartSize);
  if (!mine.ok()) return mine.status();
  if (*mine) return Insert(root, name, e, tx);
  // The pending view equals media here (no store of tx in the block), so
  // this is the PendBlock Insert would have built.
  PendBlock pb;
  pb.voff = spot.block;
  pb.M = pb.P = spot.bitmap;
  pb.LM = pb.LP = spot.longmap;
  pb.occupied = spot.occupied;
  const int need = 1 + f::ContSlots(name.size());
  if (pb.FreeSlots() < need) return Insert(root, name, e, tx);
  uint64_t free = f::kSlotMask & ~pb.occupied;
  int slots[1 + f::kMaxCont];
  for (int k = 0; k < need; k++) {
    slots[k] = __builtin_ctzll(free);
    free &= free - 1;
  }
  return WriteEntry(root, pb, slots[0], slots + 1, spot.hash, name, e, tx);
}

Status Cib::Remove(uint64_t root, std::string_view name, meta::MetaTx* tx) {
  MAPFS_RETURN_IF_ERROR(internal::ValidName(name));
  if (tx == nullptr) return Status::Error(EINVAL, "remove without a transaction");
  Dir d(env_, root);
  MAPFS_RETURN_IF_ERROR(d.Open());
  const uint64_t h = d.Hash(name);
  Found found;
  internal::Path path;
  MAPFS_RETURN_IF_ERROR(FindPending(d, h, name, tx, &found, nullptr, &path));
  if (found.slot < 0) return Status::Error(ENOENT, "no such entry");
  // CIB delete: one validity bit.
  MAPFS_RETURN_IF_ERROR(tx->Store64(found.blk + offsetof(f::BlockHeader, bitmap), found.pb.P & ~Bit(found.slot)));
  return AddCount(root, tx, -1);
}

Status Cib::RemoveAt(uint64_t root, const EntryLoc& loc, std::string_view name, meta::MetaTx* tx) {
  if (tx == nullptr) return Status::Error(EINVAL, "remove without a transaction");
  if (loc.block == 0 || loc.slot < f::kFirstSlot || loc.slot >= f::kSlots) return Remove(root, name, tx);
  // The caller's StillNames (or Lookup) checked this block (placement,
  // tag, owner) and the entry's hash, name and inode under the lock held
  // since. A media bit set now means the slot still holds that committed
  // entry: live entries are never rewritten in place by a commit, and a
  // slot whose entry moves (Split) has its media bit cleared in the same
  // commit; blocks stay in their directory until it is destroyed.
  const uint64_t bitmap = loc.block + offsetof(f::BlockHeader, bitmap);
  const uint64_t bit = Bit(loc.slot);
  if ((medium::Load64(reinterpret_cast<const uint64_t*>(env_.vm->at(bitmap))) & bit) == 0)
    return Remove(root, name, tx);
  auto p = tx->Load64(bitmap);
  if (!p.ok()) return p.status();
  if ((*p & bit) == 0) return Remove(root, name, tx);  // removed in the pending view: Remove says ENOENT
  // CIB delete: one validity bit.
  MAPFS_RETURN_IF_ERROR(tx->Store64(bitmap, *p & ~bit));
  return AddCount(root, tx, -1);
}

Status Cib::Replace(uint64_t root, std::string_view name, Entry e, meta::MetaTx* tx) {
  MAPFS_RETURN_IF_ERROR(internal::ValidName(name));
  if (tx == nullptr) return Status::Error(EINVAL, "replace without a transaction");
  Dir d(env_, root);
  MAPFS_RETURN_IF_ERROR(d.Open());
  const uint64_t h = d.Hash(name);
  Found found;
  internal::Path path;
  MAPFS_RETURN_IF_ERROR(FindPending(d, h, name, tx, &found, nullptr, &path));
  if (found.slot < 0) return Status::Error(ENOENT, "no such entry");
  uint64_t s = SlotVoff(found.blk, found.slot);
  MAPFS_RETURN_IF_ERROR(tx->Store64(s + offsetof(f::Slot, ino), e.ino));
  auto w2 = tx->Load64(s + offsetof(f::Slot, type));
  if (!w2.ok()) return w2.status();
  return tx->Store64(s + offsetof(f::Slot, type), (*w2 & ~uint64_t{0xff}) | e.type);
}

Result<uint64_t> Cib::Count(uint64_t root) {
  Dir d(env_, root);
  MAPFS_RETURN_IF_ERROR(d.Open());
  return medium::Load64(&d.r()->count);
}

Result<CibStats> Cib::Stats(uint64_t root) {
  Dir d(env_, root);
  MAPFS_RETURN_IF_ERROR(d.Open());
  CibStats s;
  s.entries = d.r()->count;
  s.blocks = d.r()->nblocks;
  s.nodes = d.r()->nnodes;
  s.depth = d.r()->depth;
  return s;
}

Status Cib::List(uint64_t root, uint64_t after,
                 const std::function<bool(uint64_t, std::string_view, Entry)>& fn) {
  Dir d(env_, root);
  MAPFS_RETURN_IF_ERROR(d.Open());
  constexpr uint64_t kMaxCookie = (uint64_t{1} << 63) - 1;
  if (after >= kMaxCookie) return Status::Ok();
  // Smallest hash whose cookie is > after.
  uint64_t start = after < 3 ? 0 : (after + 1) << 1;
  internal::Path path;
  MAPFS_RETURN_IF_ERROR(d.Descend(start, &path));
  struct Item {
    uint64_t hash;
    uint64_t blk;
    int slot;
  };
  std::vector<Item> items;
  std::vector<uint64_t> group;
  char buf[kMaxName + 1];
  bool stopping = false;
  uint64_t stop_cookie = 0;
  uint64_t blk = path.block, steps = 0;
  while (blk != 0) {
    if (++steps > d.r()->nblocks) return d.Damaged(blk, "block chain longer than the block count");
    MAPFS_RETURN_IF_ERROR(d.CheckBlock(blk, f::kPrimary));
    const auto* b = d.At<f::BlockHeader>(blk);
    group.assign(1, blk);
    for (uint64_t o = b->overflow; o != 0; o = d.At<f::BlockHeader>(o)->overflow) {
      if (group.size() > d.r()->nblocks) return d.Damaged(blk, "overflow chain longer than the block count");
      MAPFS_RETURN_IF_ERROR(d.CheckBlock(o, f::kOverflow));
      group.push_back(o);
    }
    items.clear();
    for (uint64_t g : group) {
      for (uint64_t m = d.At<f::BlockHeader>(g)->bitmap; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        uint64_t hh = d.At<f::Slot>(SlotVoff(g, i))->hash;
        if (internal::Cookie(hh) > after) items.push_back({hh, g, i});
      }
    }
    std::sort(items.begin(), items.end(), [](const Item& x, const Item& y) {
      return x.hash != y.hash ? x.hash < y.hash : (x.blk != y.blk ? x.blk < y.blk : x.slot < y.slot);
    });
    for (const Item& it : items) {
      uint64_t c = internal::Cookie(it.hash);
      if (stopping && c != stop_cookie) return Status::Ok();
      f::Slot s;
      MAPFS_RETURN_IF_ERROR(d.ReadSlot(it.blk, it.slot, nullptr, &s));
      size_t len = 0;
      MAPFS_RETURN_IF_ERROR(d.ReadName(it.blk, s, nullptr, buf, &len));
      if (!fn(c, std::string_view(buf, len), Entry{s.ino, s.type}) && !stopping) {
        stopping = true;
        stop_cookie = c;
      }
    }
    blk = b->next;
  }
  return Status::Ok();
}

Status Cib::ForEachPartition(uint64_t root, const std::function<void(uint64_t)>& fn) {
  Dir d(env_, root);
  MAPFS_RETURN_IF_ERROR(d.Open());
  fn(root);
  std::unordered_set<uint64_t> seen{root};
  // Depth-first over the index; blocks are the children of level-0 arrays.
  struct Frame {
    uint64_t arr;
    int count;
    int level;
  };
  std::vector<Frame> stack{{root + offsetof(f::Root, top), static_cast<int>(d.r()->top_count), static_cast<int>(d.r()->depth)}};
  Status first;
  auto note = [&](Status st) {
    if (first.ok() && !st.ok()) first = st;
  };
  while (!stack.empty()) {
    Frame fr = stack.back();
    stack.pop_back();
    const auto* e = d.At<f::Elem>(fr.arr);
    for (int i = 0; i < fr.count; i++) {
      uint64_t c = e[i].child;
      if (!seen.insert(c).second) {
        note(d.Damaged(c, "partition referenced twice"));
        continue;
      }
      if (fr.level > 0) {
        // The children of an array at level L > 0 are level-L nodes.
        Status st = d.CheckNode(c, fr.level);
        if (!st.ok()) {
          note(st);
          continue;
        }
        fn(c);
        stack.push_back({c + offsetof(f::Node, e), static_cast<int>(d.At<f::Node>(c)->count), fr.level - 1});
        continue;
      }
      Status st = d.CheckBlock(c, f::kPrimary);
      if (!st.ok()) {
        note(st);
        continue;
      }
      fn(c);
      for (uint64_t o = d.At<f::BlockHeader>(c)->overflow; o != 0; o = d.At<f::BlockHeader>(o)->overflow) {
        Status so = d.CheckBlock(o, f::kOverflow);
        if (!so.ok() || !seen.insert(o).second) {
          note(so.ok() ? d.Damaged(o, "partition referenced twice") : so);
          break;
        }
        fn(o);
      }
    }
  }
  return first;
}

Status Cib::Destroy(uint64_t root) {
  std::vector<uint64_t> parts;
  Status walk = ForEachPartition(root, [&](uint64_t v) { parts.push_back(v); });
  if (parts.empty()) return walk;
  // Blocks and nodes first, the root (parts[0]) last: a crash part-way
  // leaves partitions nothing references, which recovery reclaims.
  Status first = walk;
  for (size_t i = parts.size(); i-- > 0;) {
    Status st = env_.space->Free(parts[i]);
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

}  // namespace mapfs::dir
