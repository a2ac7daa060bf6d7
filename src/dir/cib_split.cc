// CIB structural changes: block split, overflow blocks, index growth.
//
// Crash safety of a split (the CIB paper's "copy, then invalidate, with a
// flag for recovery"). The paper copies the upper half of a full block into
// a new block, links it, and only then clears the moved entries' bits in
// the old block; a flag in the bitmap tells recovery that a crash may have
// left both copies live. Here the same order is kept, and the redo log plays
// the flag's part:
//   1. the new block (and any new index node) is filled and persisted while
//      nothing references it, so no crash can expose a half-written copy;
//   2. one redo transaction then links the block into the chain, inserts it
//      into the index, lowers the old block's max and clears the moved bits.
// A crash before the transaction's header is durable leaves the old block
// untouched and the new one unreachable (a leaked partition that recovery
// finds through ForEachPartition). A crash after it leaves a committed
// record that recovery applies in full before anyone reads the directory:
// the committed record *is* the flag, and applying it finishes exactly the
// repair the paper's recovery would do. No state with an entry live twice
// or nowhere can be observed.
//
// The caller's pending transaction. A split runs in the middle of an
// Insert whose transaction may already hold stores to the block being split
// (entries inserted or removed by earlier calls, replaced inode numbers).
// Those are absolute word values computed before the split, so after it
// commits they are fixed up: the old block's bitmap word is re-recorded
// without the moved slots, entries the transaction inserted move to the new
// block with their bits recorded there, entries it removed have their new
// slots' bits cleared there, and replaced inode/type words are recorded
// again at the new slots. Stale records left for old slots only touch slots
// whose bit is clear (and any later reuse of such a slot in the same
// transaction records all its words again, after them).
#include <algorithm>
#include <climits>
#include <iterator>
#include <memory>
#include <utility>

#include "dir/cib_internal.h"
#include "medium/persist.h"
#include "space/partitions.h"

namespace mapfs::dir::internal {

namespace {

struct Head {
  int slot = 0;
  bool media = false, pend = false;
  int usage = 1;
  f::Slot img{};
  unsigned char conts[f::kMaxCont][64]{};
};

// A 4 KiB image in DRAM of a partition about to be written.
struct Page {
  alignas(64) unsigned char bytes[f::kPartSize];
};

Status AllocParts(space::Partitions* sp, int n, std::vector<uint64_t>* out) {
  out->clear();
  for (int i = 0; i < n; i++) {
    auto v = sp->Alloc(0);
    if (!v.ok()) {
      for (uint64_t p : *out) (void)sp->Free(p);
      out->clear();
      return v.status();
    }
    out->push_back(*v);
  }
  return Status::Ok();
}

void FreeParts(space::Partitions* sp, const std::vector<uint64_t>& parts) {
  for (uint64_t p : parts) (void)sp->Free(p);
}

// Records the root header words (bytes 0..63) that differ from `now`.
Status StoreRootHeader(meta::MetaTx* s, uint64_t root, const f::Root& now, f::Root* next) {
  next->crc = RootCrc(*next);
  uint64_t a[8], b[8];
  std::memcpy(a, &now, sizeof a);
  std::memcpy(b, next, sizeof b);
  for (int w = 0; w < 8; w++)
    if (a[w] != b[w]) MAPFS_RETURN_IF_ERROR(s->Store64(root + 8 * w, b[w]));
  return Status::Ok();
}

}  // namespace

Status Dir::Split(const Path& path, uint64_t h_new, int need_new, meta::MetaTx* tx) {
  const uint64_t X = path.block;
  const auto* xb = At<f::BlockHeader>(X);
  if (xb->overflow != 0) return Damaged(X, "overflow chain on a block of several hash values");

  // 1. Every entry occupying a slot in either view, with its contents:
  //    entries live on media as committed, entries only the pending
  //    transaction added as it would leave them.
  PendBlock pb;
  MAPFS_RETURN_IF_ERROR(LoadPend(X, tx, &pb));
  std::vector<Head> heads;
  heads.reserve(static_cast<size_t>(__builtin_popcountll(pb.M | pb.P)));
  // Slots claimed so far: every head, then each continuation slot once. A
  // block whose heads share continuation slots (or point them at a head)
  // is damaged; without this check the heads' usage could exceed the
  // block and step 4 would pack them past the new block's image.
  uint64_t claimed = pb.M | pb.P;
  for (uint64_t m = pb.M | pb.P; m; m &= m - 1) {
    Head& hd = heads.emplace_back();
    hd.slot = __builtin_ctzll(m);
    hd.media = (pb.M & Bit(hd.slot)) != 0;
    hd.pend = (pb.P & Bit(hd.slot)) != 0;
    const meta::MetaTx* view = hd.media ? nullptr : tx;
    MAPFS_RETURN_IF_ERROR(ReadSlot(X, hd.slot, view, &hd.img));
    if (hd.img.name_len == 0) return Damaged(X, "entry with an empty name");
    if (hd.img.hash < path.lo || hd.img.hash > path.hi) return Damaged(X, "entry outside its block's range");
    int nc = f::ContSlots(hd.img.name_len);
    hd.usage = 1 + nc;
    for (int k = 0; k < nc; k++) {
      int c = hd.img.cont[k];
      if (c < f::kFirstSlot || c >= f::kSlots) return Damaged(X, "long name with a bad continuation slot");
      if (claimed & Bit(c)) return Damaged(X, "continuation slot shared with another entry");
      claimed |= Bit(c);
      for (int w = 0; w < 8; w++) {
        uint64_t v;
        MAPFS_RETURN_IF_ERROR(ReadWord(SlotVoff(X, c) + 8 * w, view, &v));
        std::memcpy(hd.conts[k] + 8 * w, &v, 8);
      }
    }
  }

  // 2. The boundary b: X keeps [lo, b], the new block Y takes [b+1, hi].
  //    Candidates lie between distinct hash values; the new entry's side
  //    must end with room for it; among those the most even split wins.
  //    When none has room (one hash value fills the block), b isolates the
  //    new entry's hash value, so that a later round can give it an
  //    overflow block.
  //    The slots below a candidate come from prefix sums over the heads in
  //    hash order (a binary search per candidate), not from a pass over
  //    every head per candidate: that pass was most of a split's cost.
  std::vector<uint64_t> vals{h_new};
  for (const Head& hd : heads) vals.push_back(hd.img.hash);
  std::sort(vals.begin(), vals.end());
  vals.erase(std::unique(vals.begin(), vals.end()), vals.end());
  std::vector<std::pair<uint64_t, int>> by_hash;  // (hash, usage), then prefix sums of usage
  by_hash.reserve(heads.size());
  for (const Head& hd : heads) by_hash.push_back({hd.img.hash, hd.usage});
  std::sort(by_hash.begin(), by_hash.end());
  int total = 0;
  for (auto& [hash, usage] : by_hash) usage = (total += usage);
  bool have = false;
  uint64_t b = 0;
  int best = INT_MAX;
  auto eval = [&](uint64_t cand) {
    // Usage of the heads whose hash is <= cand.
    auto it = std::upper_bound(by_hash.begin(), by_hash.end(), cand,
                               [](uint64_t c, const std::pair<uint64_t, int>& e) { return c < e.first; });
    int lower = it == by_hash.begin() ? 0 : std::prev(it)->second;
    int upper = total - lower;
    bool new_low = h_new <= cand;
    if ((new_low ? lower : upper) + need_new > f::kUsableSlots) return;
    int score = std::abs((lower + (new_low ? need_new : 0)) - (upper + (new_low ? 0 : need_new)));
    if (score < best) {
      best = score;
      b = cand;
      have = true;
    }
  };
  for (uint64_t v : vals) {
    if (v < path.hi) eval(v);
    if (v > path.lo) eval(v - 1);
  }
  if (!have) b = h_new > path.lo ? h_new - 1 : h_new;

  // 3. Partitions: Y, plus one node per full index array on the way up
  //    (two when the root's top array itself is full: the index deepens).
  const auto& levels = path.levels;
  int extra = 0;
  bool deepen = false;
  for (int k = static_cast<int>(levels.size()) - 1; k >= 0; k--) {
    const Level& L = levels[k];
    int cap = L.node ? NodeCap() : TopCap();
    if (L.count + 1 <= cap) break;
    extra += L.node ? 1 : 2;
    deepen = L.node == 0;
  }
  if (deepen && r_->depth + 1 > static_cast<uint32_t>(f::kMaxDepth))
    return Status::Error(ENOSPC, "directory index at its maximum depth");
  std::vector<uint64_t> parts;
  MAPFS_RETURN_IF_ERROR(AllocParts(env_.space, 1 + extra, &parts));
  const uint64_t Y = parts[0];

  // 4. Y's image: the moved entries packed from the first slot.
  auto ypage = std::make_unique<Page>();
  std::memset(ypage->bytes, 0, sizeof ypage->bytes);
  auto* yb = reinterpret_cast<f::BlockHeader*>(ypage->bytes);
  yb->tag = f::kBlockTag;
  yb->version = f::kVersion;
  yb->kind = f::kPrimary;
  yb->min = b + 1;
  yb->max = path.hi;
  yb->next = xb->next;
  yb->overflow = 0;
  yb->owner = root_;
  struct Move {
    int from, to;
    bool media, pend;
  };
  std::vector<Move> moves;
  uint64_t moved_media = 0, moved_all = 0, y_media = 0, y_pend = 0;
  int next_slot = f::kFirstSlot;
  for (const Head& hd : heads) {
    if (hd.img.hash <= b) continue;
    // Cannot trigger after step 1's check (distinct slots fit the block);
    // kept so that no bytes are ever written past the image.
    if (next_slot + hd.usage > f::kSlots) {
      FreeParts(env_.space, parts);
      return Damaged(X, "block holds more slots than it has");
    }
    int to = next_slot++;
    f::Slot s = hd.img;
    int nc = hd.usage - 1;
    for (int k = 0; k < nc; k++) {
      int c = next_slot++;
      s.cont[k] = static_cast<uint8_t>(c);
      std::memcpy(ypage->bytes + f::SlotOff(c), hd.conts[k], 64);
    }
    std::memcpy(ypage->bytes + f::SlotOff(to), &s, sizeof s);
    yb->fp[to] = static_cast<uint8_t>(s.hash);
    if (nc > 0) yb->longmap |= Bit(to);
    moved_all |= Bit(hd.slot);
    if (hd.media) {
      moved_media |= Bit(hd.slot);
      y_media |= Bit(to);
    }
    if (hd.pend) y_pend |= Bit(to);
    moves.push_back({hd.slot, to, hd.media, hd.pend});
  }
  yb->bitmap = y_media;  // committed contents only; the pending ones follow the caller's tx

  // 5. One transaction: link, index, range, invalidation.
  meta::MetaTx s(env_.pool, env_.vm);
  f::Root rh{};
  std::memcpy(&rh, r_, f::kRootCrcBytes);
  rh.nblocks++;
  std::vector<std::pair<uint64_t, std::unique_ptr<Page>>> nodes;
  Status st;
  auto fail = [&](Status e) {
    FreeParts(env_.space, parts);
    return e;
  };
  if (!(st = s.Store64(X + offsetof(f::BlockHeader, max), b)).ok()) return fail(st);
  if (!(st = s.Store64(X + offsetof(f::BlockHeader, next), Y)).ok()) return fail(st);
  if (!(st = s.Store64(X + offsetof(f::BlockHeader, bitmap), pb.M & ~moved_media)).ok()) return fail(st);
  {
    size_t next_part = 1;
    int k = static_cast<int>(levels.size()) - 1;
    f::Elem el{b + 1, Y};
    int pos = levels[k].idx + 1;
    for (;;) {
      const Level& L = levels[k];
      const auto* cur = At<f::Elem>(L.arr);
      std::vector<f::Elem> v(cur, cur + L.count);
      v.insert(v.begin() + pos, el);
      int n = static_cast<int>(v.size());
      int cap = L.node ? NodeCap() : TopCap();
      if (n <= cap) {
        if (!(st = s.StoreBytes(L.arr + pos * sizeof(f::Elem), &v[pos], (n - pos) * sizeof(f::Elem))).ok())
          return fail(st);
        if (L.node) {
          if (!(st = s.Store64(L.node + offsetof(f::Node, count), static_cast<uint64_t>(n))).ok()) return fail(st);
        } else {
          rh.top_count = static_cast<uint32_t>(n);
        }
        break;
      }
      int half = n / 2;
      auto image = [&](int from, int to) {
        auto pg = std::make_unique<Page>();
        std::memset(pg->bytes, 0, sizeof pg->bytes);
        auto* nd = reinterpret_cast<f::Node*>(pg->bytes);
        nd->tag = f::kNodeTag;
        nd->version = f::kVersion;
        nd->level = static_cast<uint16_t>(L.level + 1);
        nd->count = static_cast<uint32_t>(to - from);
        nd->owner = root_;
        std::copy(v.begin() + from, v.begin() + to, nd->e);
        return pg;
      };
      if (L.node) {
        uint64_t N = parts[next_part++];
        nodes.emplace_back(N, image(half, n));
        if (!(st = s.StoreBytes(L.arr, v.data(), half * sizeof(f::Elem))).ok()) return fail(st);
        if (!(st = s.Store64(L.node + offsetof(f::Node, count), static_cast<uint64_t>(half))).ok()) return fail(st);
        rh.nnodes++;
        el = {v[half].min, N};
        k--;
        pos = levels[k].idx + 1;
        continue;
      }
      // The root's top array is full: its halves move into two new nodes
      // one level down and the top array points at them.
      uint64_t A = parts[next_part++], B = parts[next_part++];
      nodes.emplace_back(A, image(0, half));
      nodes.emplace_back(B, image(half, n));
      f::Elem top[2] = {{v[0].min, A}, {v[half].min, B}};
      if (!(st = s.StoreBytes(L.arr, top, sizeof top)).ok()) return fail(st);
      rh.top_count = 2;
      rh.depth++;
      rh.nnodes += 2;
      break;
    }
    if (next_part != parts.size()) return fail(Damaged(X, "index split used an unexpected number of nodes"));
  }
  if (!(st = StoreRootHeader(&s, root_, *r_, &rh)).ok()) return fail(st);

  // Copies first, durable before the transaction that makes them reachable.
  medium::CopyNt(env_.vm->at(Y), ypage->bytes, f::kPartSize);
  for (auto& [voff, pg] : nodes) medium::CopyNt(env_.vm->at(voff), pg->bytes, f::kPartSize);
  medium::Fence();
  if (!(st = s.Commit()).ok()) return fail(st);

  // 6. Fix up the caller's pending transaction (see the top of this file).
  //    X's bitmap is always re-recorded: a record it already holds (even one
  //    equal to the old media word) would otherwise bring back moved bits.
  if (tx != nullptr) {
    // Replaced inode/type words can only be pending where the caller's
    // transaction stored into X's slots (a create's holds none: its inode
    // words only); asked before X's bitmap is re-recorded below.
    auto slots_pending = tx->StoresIn(X + f::SlotOff(f::kFirstSlot), f::kPartSize - f::SlotOff(f::kFirstSlot));
    if (!slots_pending.ok()) return slots_pending.status();
    MAPFS_RETURN_IF_ERROR(tx->Store64(X + offsetof(f::BlockHeader, bitmap), pb.P & ~moved_all));
    if (y_pend != y_media) MAPFS_RETURN_IF_ERROR(tx->Store64(Y + offsetof(f::BlockHeader, bitmap), y_pend));
    for (const Move& mv : moves) {
      if (!*slots_pending) break;
      if (!mv.media || !mv.pend) continue;
      const auto* old = At<f::Slot>(SlotVoff(X, mv.from));
      uint64_t ino, w2;
      MAPFS_RETURN_IF_ERROR(ReadWord(SlotVoff(X, mv.from) + offsetof(f::Slot, ino), tx, &ino));
      MAPFS_RETURN_IF_ERROR(ReadWord(SlotVoff(X, mv.from) + offsetof(f::Slot, type), tx, &w2));
      if (ino != old->ino) MAPFS_RETURN_IF_ERROR(tx->Store64(SlotVoff(Y, mv.to) + offsetof(f::Slot, ino), ino));
      uint8_t type = static_cast<uint8_t>(w2);
      if (type != old->type) {
        uint64_t yw2 = *At<uint64_t>(SlotVoff(Y, mv.to) + offsetof(f::Slot, type));
        MAPFS_RETURN_IF_ERROR(tx->Store64(SlotVoff(Y, mv.to) + offsetof(f::Slot, type), (yw2 & ~uint64_t{0xff}) | type));
      }
    }
  }
  return Status::Ok();
}

Status Dir::AddOverflow(const Path& path) {
  const uint64_t X = path.block;
  std::vector<uint64_t> parts;
  MAPFS_RETURN_IF_ERROR(AllocParts(env_.space, 1, &parts));
  const uint64_t Z = parts[0];
  // The new overflow block goes first in the chain: written while
  // unreachable, then linked by one transaction.
  f::BlockHeader z{};
  z.tag = f::kBlockTag;
  z.version = f::kVersion;
  z.kind = f::kOverflow;
  z.min = path.lo;
  z.max = path.hi;
  z.overflow = At<f::BlockHeader>(X)->overflow;
  z.owner = root_;
  medium::CopyNt(env_.vm->at(Z), &z, sizeof z);
  medium::Fence();
  meta::MetaTx s(env_.pool, env_.vm);
  f::Root rh{};
  std::memcpy(&rh, r_, f::kRootCrcBytes);
  rh.nblocks++;
  Status st = s.Store64(X + offsetof(f::BlockHeader, overflow), Z);
  if (st.ok()) st = StoreRootHeader(&s, root_, *r_, &rh);
  if (st.ok()) st = s.Commit();
  if (!st.ok()) FreeParts(env_.space, parts);
  return st;
}

}  // namespace mapfs::dir::internal
