// Per-file radix tree (radix_tree.h).
#include "map/radix_tree.h"

#include <algorithm>
#include <string>
#include <vector>

#include "map/designs.h"
#include "medium/persist.h"

namespace mapfs::map {
namespace {

using format::kRadixBits;
using format::kRadixFanout;
using format::kRadixMaxHeight;

constexpr size_t kStepWords = 2048;  // pending words that close a removal step
constexpr uint64_t kRunScan = 16;    // entries a lookup scans for a run or hole

// File blocks one entry of a level-`level` node covers (level 0 = leaf).
constexpr uint64_t EntrySpan(int level) { return uint64_t{1} << (kRadixBits * level); }
// File blocks a tree of `height` levels covers (saturates).
constexpr uint64_t Capacity(uint64_t height) {
  return kRadixBits * height >= 64 ? ~uint64_t{0} : uint64_t{1} << (kRadixBits * height);
}

}  // namespace

RadixMapper::RadixMapper(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h)
    : Mapper(pool, area_off, h),
      roots_off_(h.roots_off),
      bitmap_off_(h.bitmap_off),
      fixed_bytes_(format::kBlockSize + h.roots_bytes + h.bitmap_bytes),
      bm_(reinterpret_cast<uint64_t*>(base_ + h.bitmap_off), area_off + h.bitmap_off, h.nblocks) {}

uint64_t RadixMapper::height(Ino ino) const { return Load64(&root(ino)->height); }

void RadixMapper::Load() {
  bm_.Load();
  // Count node blocks (lenient: damage is Check's to report).
  std::vector<uint8_t> seen(nblocks_, 0);
  uint64_t nodes = 0;
  struct Frame {
    uint64_t blk;
    int level;
  };
  std::vector<Frame> stack;
  for (Ino ino = 1; ino < max_ino_; ino++) {
    uint64_t r = Load64(&root(ino)->root), h = Load64(&root(ino)->height);
    if (!BlockOk(r) || h == 0 || h > kRadixMaxHeight) continue;
    stack.push_back({r - 1, static_cast<int>(h) - 1});
    while (!stack.empty()) {
      Frame f = stack.back();
      stack.pop_back();
      if (seen[f.blk]) continue;
      seen[f.blk] = 1;
      nodes++;
      if (f.level == 0) continue;
      const uint64_t* n = node(f.blk);
      for (uint64_t i = 0; i < kRadixFanout; i++) {
        uint64_t p = Load64(&n[i]);
        if (BlockOk(p)) stack.push_back({p - 1, f.level - 1});
      }
    }
  }
  node_blocks_ = nodes;
}

int RadixMapper::Lookup(Cursor* c, Ino ino, FileBlock fblk, Mapping* out) {
  if (int rc = CheckArgs(ino, fblk, 1)) return rc;
  Refresh(c, ino);
  uint64_t leaf;
  if (c->leaf && fblk.v >= c->leaf_lo && fblk.v < c->leaf_hi) {
    leaf = c->leaf - 1;  // the cursor: no walk from the root
  } else {
    uint64_t r = Load64(&root(ino)->root), h = Load64(&root(ino)->height);
    if (r == 0 || fblk.v >= Capacity(h)) {
      *out = {false, Block(), format::kMaxFileBlock - fblk.v};
      return 0;
    }
    if (!BlockOk(r) || h == 0 || h > kRadixMaxHeight) return -EUCLEAN;
    uint64_t blk = r - 1;
    for (int level = static_cast<int>(h) - 1; level > 0; level--) {
      uint64_t p = Load64(&node(blk)[(fblk.v >> (kRadixBits * level)) & (kRadixFanout - 1)]);
      if (p == 0) {
        const uint64_t span = EntrySpan(level);
        *out = {false, Block(), span - (fblk.v & (span - 1))};
        return 0;
      }
      if (!BlockOk(p)) return -EUCLEAN;
      blk = p - 1;
    }
    leaf = blk;
    c->leaf = leaf + 1;
    c->leaf_lo = fblk.v & ~(kRadixFanout - 1);
    c->leaf_hi = c->leaf_lo + kRadixFanout;
  }
  const uint64_t* n = node(leaf);
  const uint64_t idx = fblk.v & (kRadixFanout - 1);
  const uint64_t e = Load64(&n[idx]);
  const uint64_t limit = std::min(kRadixFanout - idx, kRunScan);
  uint64_t len = 1;
  if (e == 0) {
    while (len < limit && Load64(&n[idx + len]) == 0) len++;
    *out = {false, Block(), len};
    return 0;
  }
  if (!BlockOk(e)) return -EUCLEAN;
  while (len < limit && Load64(&n[idx + len]) == e + len && e + len - 1 < nblocks_) len++;
  *out = {true, Block(e - 1), len};
  return 0;
}

Result<uint64_t> RadixMapper::NewNode(uint64_t) {
  auto r = bm_.AllocHigh();  // nodes from the top, so data runs stay contiguous
  if (!r.ok()) return r.status();
  uint64_t blk = r->first;
  medium::ZeroNt(block_ptr(Block(blk)), format::kBlockSize);  // fenced in Commit
  node_delta_++;
  return blk;
}

Status RadixMapper::Commit() {
  medium::Tx tx;
  pend_.MoveTo(pool_, &tx);
  bm_.AddTo(&tx);
  Status st = Status::Ok();
  if (!tx.empty()) {
    medium::Fence();  // fresh nodes durable before anything links them
    st = pool_->redo().Commit(tx);
  }
  if (st.ok()) {
    bm_.Committed();
    node_blocks_ += node_delta_;
  } else {
    bm_.Undo();
  }
  node_delta_ = 0;
  return st;
}

Status RadixMapper::InsertStep(Ino ino, uint64_t f, uint64_t count, uint64_t* done) {
  const uint64_t end = std::min(f + count, (f | (kRadixFanout - 1)) + 1);  // one leaf per step
  uint64_t* rw = &root(ino)->root;
  uint64_t* hw = &root(ino)->height;
  uint64_t r = pend_.Get(rw), h = pend_.Get(hw);
  uint64_t need = 1;
  while (Capacity(need) < end) need++;
  auto fail = [&](Status st) {
    pend_.Clear();
    bm_.Undo();
    node_delta_ = 0;
    return st;
  };
  if (r == 0) {
    auto nb = NewNode(nblocks_);
    if (!nb.ok()) return fail(nb.status());
    r = *nb + 1;
    h = need;
    pend_.Put(rw, r);
    pend_.Put(hw, h);
  } else {
    if (!BlockOk(r) || h == 0 || h > kRadixMaxHeight)
      return fail(Damage("radix root", roots_off_ + ino * sizeof(format::RootRecord), "bad root or height"));
    while (h < need) {  // grow: the old root becomes child 0 of a new root
      auto nb = NewNode(r - 1);
      if (!nb.ok()) return fail(nb.status());
      medium::Store64(node(*nb), r);
      medium::Flush(node(*nb), 8);
      r = *nb + 1;
      h++;
      pend_.Put(rw, r);
      pend_.Put(hw, h);
    }
  }
  uint64_t blk = r - 1;
  for (int level = static_cast<int>(h) - 1; level > 0; level--) {
    uint64_t* w = &node(blk)[(f >> (kRadixBits * level)) & (kRadixFanout - 1)];
    uint64_t p = pend_.Get(w);
    if (p == 0) {
      auto nb = NewNode(blk + 1);
      if (!nb.ok()) return fail(nb.status());
      p = *nb + 1;
      pend_.Put(w, p);
    } else if (!BlockOk(p)) {
      return fail(Damage("radix node", data_off_ + blk * format::kBlockSize, "pointer outside the block area"));
    }
    blk = p - 1;
  }
  uint64_t* leaf = node(blk);
  for (uint64_t i = f; i < end;) {
    uint64_t prev = (i & (kRadixFanout - 1)) ? pend_.Get(&leaf[(i & (kRadixFanout - 1)) - 1]) : 0;
    auto run = bm_.Alloc(end - i, BlockOk(prev) ? prev : nblocks_);
    if (!run.ok()) return fail(run.status());
    for (uint64_t k = 0; k < run->second; k++) pend_.Put(&leaf[(i + k) & (kRadixFanout - 1)], run->first + k + 1);
    i += run->second;
  }
  MAPFS_RETURN_IF_ERROR(Commit());
  *done = end - f;
  return Status::Ok();
}

Status RadixMapper::Insert(Cursor* c, Ino ino, FileBlock fblk, uint64_t count) {
  if (int rc = CheckArgs(ino, fblk, count)) return Status::Error(-rc, "radix insert: inode or file block out of range");
  std::lock_guard<std::mutex> lock(mu_);
  Refresh(c, ino);
  Cursor probe;
  for (uint64_t i = 0; i < count;) {
    Mapping m;
    if (int rc = Lookup(&probe, ino, fblk + i, &m)) return Status::Error(-rc, "radix insert: damaged tree");
    if (m.mapped) return Status::Error(EEXIST, "radix insert: file block already mapped");
    i += m.len;
  }
  uint64_t done = 0;
  while (done < count) {
    uint64_t n = 0;
    Status st = InsertStep(ino, fblk.v + done, count - done, &n);
    if (!st.ok()) {
      // Nothing of this call may stay mapped.
      BumpGeneration();
      if (done) (void)RemoveLocked(ino, fblk.v, fblk.v + done);
      return st;
    }
    done += n;
  }
  return Status::Ok();
}

Status RadixMapper::ClearEntries(Ino ino, uint64_t from, uint64_t end) {
  uint64_t r = Load64(&root(ino)->root), h = Load64(&root(ino)->height);
  if (r == 0) return Status::Ok();
  if (!BlockOk(r) || h == 0 || h > kRadixMaxHeight)
    return Damage("radix root", roots_off_ + ino * sizeof(format::RootRecord), "bad root or height");
  end = std::min(end, Capacity(h));
  if (from >= end) return Status::Ok();
  struct Frame {
    uint64_t blk;
    int level;
    uint64_t base;
  };
  std::vector<Frame> stack = {{r - 1, static_cast<int>(h) - 1, 0}};
  while (!stack.empty()) {
    Frame fr = stack.back();
    stack.pop_back();
    uint64_t* n = node(fr.blk);
    const uint64_t span = EntrySpan(fr.level);
    const uint64_t first = from > fr.base ? (from - fr.base) / span : 0;
    const uint64_t last = std::min<uint64_t>(kRadixFanout - 1, (end - 1 - fr.base) / span);
    // Children pushed in reverse so the walk goes up the file (any order works).
    for (uint64_t i = last + 1; i-- > first;) {
      uint64_t p = pend_.Get(&n[i]);
      if (p == 0) continue;
      if (!BlockOk(p)) return Damage("radix node", data_off_ + fr.blk * format::kBlockSize + 8 * i, "pointer outside the block area");
      if (fr.level == 0) {
        bm_.Free(p - 1, 1);
        pend_.Put(&n[i], 0);
        if (pend_.size() >= kStepWords) MAPFS_RETURN_IF_ERROR(Commit());
      } else {
        stack.push_back({p - 1, fr.level - 1, fr.base + i * span});
      }
    }
  }
  return Commit();
}

bool RadixMapper::NodeEmpty(uint64_t blk) const {
  const uint64_t* n = node(blk);
  for (uint64_t i = 0; i < kRadixFanout; i++)
    if (pend_.Get(&n[i]) != 0) return false;
  return true;
}

Status RadixMapper::PruneNode(uint64_t* w, int level, uint64_t base, uint64_t from, uint64_t end) {
  uint64_t p = pend_.Get(w);
  if (p == 0) return Status::Ok();
  if (!BlockOk(p)) return Damage("radix node", pool_->offset_of(w) - area_off_, "pointer outside the block area");
  const uint64_t blk = p - 1;
  if (level > 0) {
    const uint64_t span = EntrySpan(level);
    const uint64_t first = from > base ? (from - base) / span : 0;
    const uint64_t last = std::min<uint64_t>(kRadixFanout - 1, (end - 1 - base) / span);
    for (uint64_t i = first; i <= last; i++)
      MAPFS_RETURN_IF_ERROR(PruneNode(&node(blk)[i], level - 1, base + i * span, from, end));
  }
  if (NodeEmpty(blk)) {
    // The node and the pointer to it go in the same transaction.
    bm_.Free(blk, 1);
    node_delta_--;
    pend_.Put(w, 0);
    if (w == &prune_root_->root) pend_.Put(&prune_root_->height, 0);
    if (pend_.size() >= kStepWords) MAPFS_RETURN_IF_ERROR(Commit());
  }
  return Status::Ok();
}

Status RadixMapper::Prune(Ino ino, uint64_t from, uint64_t end) {
  uint64_t h = Load64(&root(ino)->height);
  if (Load64(&root(ino)->root) == 0 || h == 0 || h > kRadixMaxHeight) return Status::Ok();
  end = std::min(end, Capacity(h));
  if (from >= end) return Status::Ok();
  prune_root_ = root(ino);
  MAPFS_RETURN_IF_ERROR(PruneNode(&root(ino)->root, static_cast<int>(h) - 1, 0, from, end));
  return Commit();
}

Status RadixMapper::Shrink(Ino ino) {
  uint64_t* rw = &root(ino)->root;
  uint64_t* hw = &root(ino)->height;
  for (;;) {
    uint64_t r = pend_.Get(rw), h = pend_.Get(hw);
    if (r == 0 || h <= 1 || h > kRadixMaxHeight || !BlockOk(r)) break;
    const uint64_t* n = node(r - 1);
    bool only_first = true;
    for (uint64_t i = 1; i < kRadixFanout && only_first; i++) only_first = Load64(&n[i]) == 0;
    if (!only_first || Load64(&n[0]) == 0) break;
    // Lower by a level: child 0 becomes the root.
    pend_.Put(rw, Load64(&n[0]));
    pend_.Put(hw, h - 1);
    // The freed root must read as zero (free blocks do; a later Insert may
    // hand it to a file): its one pointer goes in the same transaction.
    pend_.Put(node(r - 1), 0);
    bm_.Free(r - 1, 1);
    node_delta_--;
  }
  return Commit();
}

Status RadixMapper::Remove(Cursor* c, Ino ino, FileBlock from, uint64_t count) {
  if (int rc = CheckArgs(ino, from, count == kToEnd ? 0 : count))
    return Status::Error(-rc, "radix remove: inode or file block out of range");
  std::lock_guard<std::mutex> lock(mu_);
  BumpGeneration();  // nodes may be freed: cursors let go of their leaf
  Refresh(c, ino);
  return RemoveLocked(ino, from.v, count == kToEnd ? format::kMaxFileBlock : from.v + count);
}

Status RadixMapper::RemoveLocked(Ino ino, uint64_t from, uint64_t end) {
  MAPFS_RETURN_IF_ERROR(ClearEntries(ino, from, end));
  MAPFS_RETURN_IF_ERROR(Prune(ino, from, end));
  return Shrink(ino);
}

Status RadixMapper::Check() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint8_t> ref(nblocks_, 0);
  auto claim = [&](uint64_t blk, uint64_t where, const char* what) -> Status {
    if (ref[blk]++) return Damage("radix node", where, std::string(what) + " block " + std::to_string(blk) + " referenced twice");
    if (!bm_.UsedOnMedia(blk))
      return Damage("radix node", where, std::string(what) + " block " + std::to_string(blk) + " in use but free in the bitmap");
    return Status::Ok();
  };
  struct Frame {
    uint64_t blk;
    int level;
  };
  std::vector<Frame> stack;
  for (Ino ino = 1; ino < max_ino_; ino++) {
    const uint64_t where = roots_off_ + ino * sizeof(format::RootRecord);
    uint64_t r = Load64(&root(ino)->root), h = Load64(&root(ino)->height);
    if (r == 0) {
      if (h != 0) return Damage("radix root", where, "height without a root");
      continue;
    }
    if (!BlockOk(r) || h == 0 || h > kRadixMaxHeight) return Damage("radix root", where, "bad root or height");
    MAPFS_RETURN_IF_ERROR(claim(r - 1, where, "node"));
    stack.push_back({r - 1, static_cast<int>(h) - 1});
    while (!stack.empty()) {
      Frame f = stack.back();
      stack.pop_back();
      const uint64_t* n = node(f.blk);
      for (uint64_t i = 0; i < kRadixFanout; i++) {
        uint64_t p = Load64(&n[i]);
        if (p == 0) continue;
        const uint64_t at = data_off_ + f.blk * format::kBlockSize + 8 * i;
        if (!BlockOk(p)) return Damage("radix node", at, "pointer outside the block area");
        MAPFS_RETURN_IF_ERROR(claim(p - 1, at, f.level == 0 ? "data" : "node"));
        if (f.level > 0) stack.push_back({p - 1, f.level - 1});
      }
    }
  }
  for (uint64_t blk = 0; blk < nblocks_; blk++)
    if (bm_.UsedOnMedia(blk) && !ref[blk])
      return Damage("radix bitmap", bitmap_off_ + blk / 64 * 8, "block " + std::to_string(blk) + " in use but not referenced");
  return Status::Ok();
}

Usage RadixMapper::usage() const {
  Usage u;
  u.blocks = nblocks_;
  u.node_blocks = node_blocks_;
  uint64_t used = bm_.used();  // node_blocks_ is this process's count: never above what is used
  u.used_blocks = used - std::min(used, node_blocks_);
  u.fixed_bytes = fixed_bytes_;
  return u;
}

Result<std::unique_ptr<Mapper>> OpenRadix(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h) {
  auto m = std::make_unique<RadixMapper>(pool, area_off, h);
  m->Load();
  return std::unique_ptr<Mapper>(std::move(m));
}

}  // namespace mapfs::map
