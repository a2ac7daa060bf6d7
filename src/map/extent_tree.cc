// Per-file extent tree (extent_tree.h).
#include "map/extent_tree.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "map/designs.h"
#include "map/map_persist.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "medium/redo_log.h"

namespace mapfs::map {
namespace {

using format::Extent;
using format::ExtentIndex;
using format::ExtentNodeHeader;
using format::kBlockSize;
using format::kExtentIndexCap;
using format::kExtentLeafCap;
using format::kExtentMagic;

constexpr uint64_t kNoBound = ~uint64_t{0};
// The bytes a dropped node is overwritten with (Commit).
alignas(64) constexpr char kZeroBlock[kBlockSize] = {};

uint32_t Cap(int level) { return level == 0 ? kExtentLeafCap : kExtentIndexCap; }
const ExtentNodeHeader* Hdr(const char* n) { return reinterpret_cast<const ExtentNodeHeader*>(n); }
const Extent* Exts(const char* n) { return reinterpret_cast<const Extent*>(n + sizeof(ExtentNodeHeader)); }
const ExtentIndex* Idx(const char* n) { return reinterpret_cast<const ExtentIndex*>(n + sizeof(ExtentNodeHeader)); }

// Last index whose key is <= f, else 0 (keys of an internal node).
uint32_t ChildFor(const ExtentIndex* k, uint32_t cnt, uint64_t f) {
  uint32_t lo = 0, hi = cnt;  // first index with key > f
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (k[mid].fblk <= f) lo = mid + 1;
    else hi = mid;
  }
  return lo == 0 ? 0 : lo - 1;
}

// First extent whose first file block is > f.
uint32_t UpperBound(const Extent* x, uint32_t cnt, uint64_t f) {
  uint32_t lo = 0, hi = cnt;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (x[mid].fblk <= f) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

}  // namespace

struct ExtentMapper::Img {
  uint64_t blk = 0;
  bool fresh = false;
  bool dropped = false;
  alignas(64) char b[kBlockSize];
  ExtentNodeHeader& h() { return *reinterpret_cast<ExtentNodeHeader*>(b); }
  Extent* ext() { return reinterpret_cast<Extent*>(b + sizeof(ExtentNodeHeader)); }
  ExtentIndex* idx() { return reinterpret_cast<ExtentIndex*>(b + sizeof(ExtentNodeHeader)); }
  int level() { return h().level; }
  uint32_t count() { return h().count; }
  // Lowest key the node holds.
  uint64_t low() { return level() == 0 ? ext()[0].fblk : idx()[0].fblk; }
};

ExtentMapper::ExtentMapper(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h)
    : Mapper(pool, area_off, h),
      roots_off_(h.roots_off),
      bitmap_off_(h.bitmap_off),
      fixed_bytes_(kBlockSize + h.roots_bytes + h.bitmap_bytes),
      bm_(reinterpret_cast<uint64_t*>(base_ + h.bitmap_off), area_off + h.bitmap_off, h.nblocks) {}

uint64_t ExtentMapper::height(Ino ino) const { return Load64(&root(ino)->height); }

bool ExtentMapper::NodeOk(const char* n, int level) const {
  const ExtentNodeHeader* h = Hdr(n);
  return h->magic == kExtentMagic && h->level == level && h->count >= 1 && h->count <= Cap(level);
}

void ExtentMapper::Load() {
  bm_.Load();
  std::vector<uint8_t> seen(nblocks_, 0);
  uint64_t nodes = 0;
  std::vector<std::pair<uint64_t, int>> stack;
  for (Ino ino = 1; ino < max_ino_; ino++) {
    uint64_t r = Load64(&root(ino)->root), h = Load64(&root(ino)->height);
    if (r == 0 || r - 1 >= nblocks_ || h == 0 || h > kMaxHeight) continue;
    stack.emplace_back(r - 1, static_cast<int>(h) - 1);
    while (!stack.empty()) {
      auto [blk, level] = stack.back();
      stack.pop_back();
      if (seen[blk] || !NodeOk(node(blk), level)) continue;
      seen[blk] = 1;
      nodes++;
      if (level == 0) continue;
      const ExtentIndex* k = Idx(node(blk));
      for (uint32_t i = 0; i < Hdr(node(blk))->count; i++)
        if (k[i].child < nblocks_) stack.emplace_back(k[i].child, level - 1);
    }
  }
  node_blocks_ = nodes;
}

// ---- lookups ----

int ExtentMapper::FromLeaf(const char* leaf, uint64_t f, uint64_t hi, Mapping* out) const {
  const Extent* x = Exts(leaf);
  const uint32_t cnt = Hdr(leaf)->count;
  const uint32_t ub = UpperBound(x, cnt, f);
  if (ub > 0) {
    const Extent& e = x[ub - 1];
    if (f - e.fblk < e.len) {
      if (e.blk >= nblocks_ || e.len > nblocks_ - e.blk) return -EUCLEAN;
      *out = {true, Block(e.blk + (f - e.fblk)), e.len - (f - e.fblk)};
      return 0;
    }
  }
  uint64_t next = std::min(ub < cnt ? x[ub].fblk : hi, format::kMaxFileBlock);
  *out = {false, Block(), next > f ? next - f : 1};
  return 0;
}

int ExtentMapper::Lookup(Cursor* c, Ino ino, FileBlock fblk, Mapping* out) {
  if (int rc = CheckArgs(ino, fblk, 1)) return rc;
  Refresh(c, ino);
  const uint64_t f = fblk.v;
  if (c->leaf && f >= c->leaf_lo && f < c->leaf_hi) return FromLeaf(node(c->leaf - 1), f, c->leaf_hi, out);
  uint64_t r = Load64(&root(ino)->root), h = Load64(&root(ino)->height);
  if (r == 0) {
    *out = {false, Block(), format::kMaxFileBlock - f};
    return 0;
  }
  if (r - 1 >= nblocks_ || h == 0 || h > kMaxHeight) return -EUCLEAN;
  uint64_t blk = r - 1, lo = 0, hi = kNoBound;
  for (int level = static_cast<int>(h) - 1; level > 0; level--) {
    const char* n = node(blk);
    if (!NodeOk(n, level)) return -EUCLEAN;
    const ExtentIndex* k = Idx(n);
    const uint32_t cnt = Hdr(n)->count;
    const uint32_t i = ChildFor(k, cnt, f);
    if (i > 0) lo = k[i].fblk;
    if (i + 1 < cnt) hi = k[i + 1].fblk;
    blk = k[i].child;
    if (blk >= nblocks_) return -EUCLEAN;
  }
  const char* leaf = node(blk);
  if (!NodeOk(leaf, 0)) return -EUCLEAN;
  c->leaf = blk + 1;
  c->leaf_lo = lo;
  c->leaf_hi = hi;
  return FromLeaf(leaf, f, hi, out);
}

uint64_t ExtentMapper::LeafBound(Ino ino, uint64_t f) const {
  uint64_t r = Load64(&root(ino)->root), h = Load64(&root(ino)->height);
  if (r == 0 || r - 1 >= nblocks_ || h == 0 || h > kMaxHeight) return kNoBound;
  uint64_t blk = r - 1, hi = kNoBound;
  for (int level = static_cast<int>(h) - 1; level > 0; level--) {
    const char* n = node(blk);
    if (!NodeOk(n, level)) return kNoBound;
    const ExtentIndex* k = Idx(n);
    const uint32_t cnt = Hdr(n)->count;
    const uint32_t i = ChildFor(k, cnt, f);
    if (i + 1 < cnt) hi = k[i + 1].fblk;
    blk = k[i].child;
    if (blk >= nblocks_) return kNoBound;
  }
  return hi;
}

// ---- the nodes of a step ----

Result<ExtentMapper::Img*> ExtentMapper::Get(uint64_t blk, int level) {
  auto it = imgs_.find(blk);
  if (it != imgs_.end()) {
    if (it->second->dropped || it->second->level() != level)
      return Damage("extent node", data_off_ + blk * kBlockSize, "node reached twice");
    return it->second.get();
  }
  if (blk >= nblocks_) return Damage("extent node", data_off_, "child block outside the block area");
  if (!NodeOk(node(blk), level)) return Damage("extent node", data_off_ + blk * kBlockSize, "bad node header");
  auto img = std::make_unique<Img>();
  img->blk = blk;
  std::memcpy(img->b, node(blk), kBlockSize);
  Img* p = img.get();
  imgs_.emplace(blk, std::move(img));
  return p;
}

Result<ExtentMapper::Img*> ExtentMapper::NewNode(int level, uint64_t) {
  auto r = bm_.AllocHigh();  // nodes from the top, so data runs stay contiguous
  if (!r.ok()) return r.status();
  auto img = std::make_unique<Img>();
  img->blk = r->first;
  img->fresh = true;
  std::memset(img->b, 0, kBlockSize);
  img->h().magic = kExtentMagic;
  img->h().level = static_cast<uint16_t>(level);
  node_delta_++;
  Img* p = img.get();
  imgs_[p->blk] = std::move(img);
  return p;
}

void ExtentMapper::Drop(Img* img) {
  img->dropped = true;
  bm_.Free(img->blk, 1);
  node_delta_--;
}

void ExtentMapper::Abort() {
  bm_.Undo();
  imgs_.clear();
  node_delta_ = 0;
}

Status ExtentMapper::Commit(Ino ino, uint64_t new_root, uint64_t new_height) {
  medium::Tx tx;
  bool fresh = false;
  for (auto& [blk, img] : imgs_) {
    char* dst = block_ptr(Block(blk));
    if (img->dropped) {
      // Free blocks read as zero (src/file/block_file.cc): a node this step
      // unlinks is zeroed by the same transaction that frees it, else a
      // later Insert would hand its extents to a file as data (found by the
      // crash-state enumeration on extent pools). Fresh nodes were never
      // written.
      if (!img->fresh) tx.PutBytesRef(pool_->offset_of(dst), kZeroBlock, kBlockSize);
      continue;
    }
    if (img->fresh) {
      medium::CopyNt(dst, img->b, kBlockSize);  // unlinked until the commit
      fresh = true;
      continue;
    }
    // Only the words that changed go into the transaction.
    const uint64_t* a = reinterpret_cast<const uint64_t*>(img->b);
    const uint64_t* o = reinterpret_cast<const uint64_t*>(dst);
    size_t lo = 0, hi = kBlockSize / 8;
    while (lo < hi && a[lo] == o[lo]) lo++;
    while (hi > lo && a[hi - 1] == o[hi - 1]) hi--;
    if (lo < hi) tx.PutBytes(pool_->offset_of(dst) + lo * 8, img->b + lo * 8, (hi - lo) * 8);
  }
  if (fresh) medium::Fence();
  if (Load64(&root(ino)->root) != new_root) tx.Put64(pool_->offset_of(&root(ino)->root), new_root);
  if (Load64(&root(ino)->height) != new_height) tx.Put64(pool_->offset_of(&root(ino)->height), new_height);
  bm_.AddTo(&tx);
  Status st = tx.empty() ? Status::Ok() : pool_->redo().Commit(tx);
  if (st.ok()) {
    bm_.Committed();
    node_blocks_ += node_delta_;
  } else {
    bm_.Undo();
  }
  imgs_.clear();
  node_delta_ = 0;
  return st;
}

// ---- node contents as vectors ----

// Writes `v` back into `n`, splitting off a new right node if it does not
// fit: the split's key is the right node's lowest key.
template <typename T>
Result<std::optional<ExtentMapper::Split>> ExtentMapper::WriteBack(Img* n, const std::vector<T>& v) {
  const uint32_t cap = Cap(n->level());
  T* arr = reinterpret_cast<T*>(n->b + sizeof(ExtentNodeHeader));
  if (v.size() <= cap) {
    if (!v.empty()) std::memcpy(static_cast<void*>(arr), v.data(), v.size() * sizeof(T));
    n->h().count = static_cast<uint16_t>(v.size());
    return std::optional<Split>();
  }
  if (v.size() > 2 * size_t{cap}) return Status::Error(EIO, "extent tree: node overflow");
  auto r = NewNode(n->level(), nblocks_);
  if (!r.ok()) return r.status();
  Img* right = *r;
  const size_t mid = v.size() / 2;
  std::memcpy(static_cast<void*>(arr), v.data(), mid * sizeof(T));
  n->h().count = static_cast<uint16_t>(mid);
  T* rarr = reinterpret_cast<T*>(right->b + sizeof(ExtentNodeHeader));
  std::memcpy(static_cast<void*>(rarr), v.data() + mid, (v.size() - mid) * sizeof(T));
  right->h().count = static_cast<uint16_t>(v.size() - mid);
  return std::optional<Split>(Split{v[mid].fblk, right->blk});
}

// ---- insert ----

Result<std::optional<ExtentMapper::Split>> ExtentMapper::InsertRec(Img* n, const Extent& e) {
  if (n->level() == 0) {
    Extent* x = n->ext();
    const uint32_t cnt = n->count();
    const uint32_t pos = UpperBound(x, cnt, e.fblk);
    if (pos > 0 && x[pos - 1].fblk + x[pos - 1].len == e.fblk && x[pos - 1].blk + x[pos - 1].len == e.blk) {
      x[pos - 1].len += e.len;  // the file and its blocks both continue
      if (pos < cnt && x[pos - 1].fblk + x[pos - 1].len == x[pos].fblk &&
          x[pos - 1].blk + x[pos - 1].len == x[pos].blk) {
        // ... and the extent after it continues them too (a hole refilled).
        x[pos - 1].len += x[pos].len;
        std::memmove(x + pos, x + pos + 1, (cnt - pos - 1) * sizeof(Extent));
        n->h().count = static_cast<uint16_t>(cnt - 1);
      }
      return std::optional<Split>();
    }
    if (pos < cnt && e.fblk + e.len == x[pos].fblk && e.blk + e.len == x[pos].blk) {
      x[pos] = {e.fblk, e.blk, e.len + x[pos].len};
      return std::optional<Split>();
    }
    std::vector<Extent> v(x, x + cnt);
    v.insert(v.begin() + pos, e);
    return WriteBack(n, v);
  }
  ExtentIndex* k = n->idx();
  const uint32_t cnt = n->count();
  const uint32_t i = ChildFor(k, cnt, e.fblk);
  if (e.fblk < k[i].fblk) k[i].fblk = e.fblk;  // only child 0: its key falls to the new lowest block
  auto child = Get(k[i].child, n->level() - 1);
  if (!child.ok()) return child.status();
  auto split = InsertRec(*child, e);
  if (!split.ok() || !*split) return split;
  std::vector<ExtentIndex> v(k, k + cnt);
  v.insert(v.begin() + i + 1, ExtentIndex{(*split)->key, (*split)->blk});
  return WriteBack(n, v);
}

Status ExtentMapper::InsertExtent(Ino ino, const Extent& e) {
  uint64_t r = Load64(&root(ino)->root), h = Load64(&root(ino)->height);
  if (r == 0) {
    auto leaf = NewNode(0, nblocks_);
    if (!leaf.ok()) return leaf.status();
    (*leaf)->ext()[0] = e;
    (*leaf)->h().count = 1;
    return Commit(ino, (*leaf)->blk + 1, 1);
  }
  if (r - 1 >= nblocks_ || h == 0 || h > kMaxHeight)
    return Damage("extent root", roots_off_ + ino * sizeof(format::RootRecord), "bad root or height");
  auto top = Get(r - 1, static_cast<int>(h) - 1);
  if (!top.ok()) return top.status();
  auto split = InsertRec(*top, e);
  if (!split.ok()) return split.status();
  if (*split) {  // the root split: a new root above both halves
    if (h == kMaxHeight) return Status::Error(ENOSPC, "extent tree: too high");
    auto nr = NewNode(static_cast<int>(h), nblocks_);
    if (!nr.ok()) return nr.status();
    (*nr)->idx()[0] = {(*top)->low(), (*top)->blk};
    (*nr)->idx()[1] = {(*split)->key, (*split)->blk};
    (*nr)->h().count = 2;
    return Commit(ino, (*nr)->blk + 1, h + 1);
  }
  return Commit(ino, r, h);
}

Status ExtentMapper::Insert(Cursor* c, Ino ino, FileBlock fblk, uint64_t count) {
  if (int rc = CheckArgs(ino, fblk, count)) return Status::Error(-rc, "extent insert: inode or file block out of range");
  std::lock_guard<std::mutex> lock(mu_);
  BumpGeneration();  // splits move extents between leaves
  Refresh(c, ino);
  Cursor probe;
  for (uint64_t i = 0; i < count;) {
    Mapping m;
    if (int rc = Lookup(&probe, ino, fblk + i, &m)) return Status::Error(-rc, "extent insert: damaged tree");
    if (m.mapped) return Status::Error(EEXIST, "extent insert: file block already mapped");
    i += m.len;
  }
  uint64_t done = 0;
  while (done < count) {
    const uint64_t at = fblk.v + done;
    uint64_t hint = nblocks_;
    if (at > 0) {
      Mapping prev;
      if (Lookup(&probe, ino, FileBlock(at - 1), &prev) == 0 && prev.mapped) hint = prev.blk.v + 1;
    }
    auto run = bm_.Alloc(count - done, hint);
    Status st = run.status();
    if (st.ok()) {
      st = InsertExtent(ino, Extent{at, run->first, run->second});
      if (!st.ok()) Abort();
    }
    if (!st.ok()) {
      // Nothing of this call may stay mapped.
      if (done) (void)RemoveLocked(ino, fblk.v, fblk.v + done);
      return st;
    }
    done += run->second;
    probe = Cursor{};
  }
  return Status::Ok();
}

// ---- remove ----

Result<std::optional<ExtentMapper::Split>> ExtentMapper::RemoveRec(Img* n, uint64_t lo, uint64_t hi, uint64_t from,
                                                                   uint64_t end) {
  if (n->level() == 0) {
    std::vector<Extent> v;
    v.reserve(n->count() + 1);
    for (uint32_t j = 0; j < n->count(); j++) {
      const Extent x = n->ext()[j];
      const uint64_t xs = x.fblk, xe = x.fblk + x.len;
      if (xe <= from || xs >= end) {
        v.push_back(x);
        continue;
      }
      if (x.len == 0 || x.blk >= nblocks_ || x.len > nblocks_ - x.blk)
        return Damage("extent node", data_off_ + n->blk * kBlockSize, "extent outside the block area");
      const uint64_t cut_lo = std::max(xs, from), cut_hi = std::min(xe, end);
      bm_.Free(x.blk + (cut_lo - xs), cut_hi - cut_lo);
      if (xs < from) v.push_back({xs, x.blk, from - xs});
      if (xe > end) v.push_back({end, x.blk + (end - xs), xe - end});
    }
    return WriteBack(n, v);
  }
  const int level = n->level();
  std::vector<ExtentIndex> v(n->idx(), n->idx() + n->count());
  // Children whose ranges meet [from, end), right to left so that inserted
  // split halves do not shift the ones still to visit.
  size_t first = ChildFor(v.data(), static_cast<uint32_t>(v.size()), from);
  size_t last = ChildFor(v.data(), static_cast<uint32_t>(v.size()), end - 1);
  for (size_t i = last + 1; i-- > first;) {
    const uint64_t clo = i == 0 ? lo : v[i].fblk;
    const uint64_t chi = i + 1 < v.size() ? v[i + 1].fblk : hi;
    auto child = Get(v[i].child, level - 1);
    if (!child.ok()) return child.status();
    auto split = RemoveRec(*child, clo, chi, from, end);
    if (!split.ok()) return split.status();
    if (*split) v.insert(v.begin() + i + 1, ExtentIndex{(*split)->key, (*split)->blk});
    if ((*child)->count() == 0) {
      Drop(*child);
      v.erase(v.begin() + i);
    }
  }
  // Merge a touched child into its left neighbour when both fit in 3/4 of a
  // node, so that removals do not leave a trail of near-empty nodes.
  const uint32_t cap = Cap(level - 1);
  size_t hi_i = std::min(v.size(), last + 2);
  for (size_t j = hi_i; j-- > (first > 0 ? first : 1);) {
    if (j >= v.size()) continue;
    auto left = Get(v[j - 1].child, level - 1);
    auto right = Get(v[j].child, level - 1);
    if (!left.ok()) return left.status();
    if (!right.ok()) return right.status();
    Img* l = *left;
    Img* r = *right;
    if (l->count() + r->count() > cap * 3 / 4) continue;
    const size_t es = level - 1 == 0 ? sizeof(Extent) : sizeof(ExtentIndex);
    std::memcpy(l->b + sizeof(ExtentNodeHeader) + l->count() * es, r->b + sizeof(ExtentNodeHeader), r->count() * es);
    l->h().count = static_cast<uint16_t>(l->count() + r->count());
    Drop(r);
    v.erase(v.begin() + j);
  }
  return WriteBack(n, v);
}

Status ExtentMapper::RemoveStep(Ino ino, uint64_t from, uint64_t end, uint64_t* next) {
  uint64_t r = Load64(&root(ino)->root), h = Load64(&root(ino)->height);
  *next = end;
  if (r == 0) return Status::Ok();
  if (r - 1 >= nblocks_ || h == 0 || h > kMaxHeight)
    return Damage("extent root", roots_off_ + ino * sizeof(format::RootRecord), "bad root or height");
  const uint64_t step_end = std::min(end, LeafBound(ino, from));  // one leaf per step
  *next = step_end;
  auto top = Get(r - 1, static_cast<int>(h) - 1);
  if (!top.ok()) return top.status();
  auto split = RemoveRec(*top, 0, kNoBound, from, step_end);
  if (!split.ok()) return split.status();
  Img* t = *top;
  if (*split) {
    if (h == kMaxHeight) return Status::Error(ENOSPC, "extent tree: too high");
    auto nr = NewNode(static_cast<int>(h), nblocks_);
    if (!nr.ok()) return nr.status();
    (*nr)->idx()[0] = {t->low(), t->blk};
    (*nr)->idx()[1] = {(*split)->key, (*split)->blk};
    (*nr)->h().count = 2;
    return Commit(ino, (*nr)->blk + 1, h + 1);
  }
  // Lower the root while it has a single child; free it once empty.
  while (t->count() == 1 && t->level() > 0) {
    auto child = Get(t->idx()[0].child, t->level() - 1);
    if (!child.ok()) return child.status();
    Drop(t);
    t = *child;
    h--;
  }
  if (t->count() == 0) {
    Drop(t);
    return Commit(ino, 0, 0);
  }
  return Commit(ino, t->blk + 1, h);
}

Status ExtentMapper::RemoveLocked(Ino ino, uint64_t from, uint64_t end) {
  while (from < end) {
    uint64_t next = end;
    Status st = RemoveStep(ino, from, end, &next);
    if (!st.ok()) {
      Abort();
      return st;
    }
    if (Load64(&root(ino)->root) == 0) break;
    from = next;
  }
  return Status::Ok();
}

Status ExtentMapper::Remove(Cursor* c, Ino ino, FileBlock from, uint64_t count) {
  if (int rc = CheckArgs(ino, from, count == kToEnd ? 0 : count))
    return Status::Error(-rc, "extent remove: inode or file block out of range");
  std::lock_guard<std::mutex> lock(mu_);
  BumpGeneration();
  Refresh(c, ino);
  return RemoveLocked(ino, from.v, count == kToEnd ? format::kMaxFileBlock : from.v + count);
}

// ---- fsck ----

Status ExtentMapper::Check() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint8_t> ref(nblocks_, 0);
  struct Frame {
    uint64_t blk;
    int level;
    uint64_t lo, hi;
  };
  std::vector<Frame> stack;
  for (Ino ino = 1; ino < max_ino_; ino++) {
    const uint64_t rwhere = roots_off_ + ino * sizeof(format::RootRecord);
    uint64_t r = Load64(&root(ino)->root), h = Load64(&root(ino)->height);
    if (r == 0) {
      if (h != 0) return Damage("extent root", rwhere, "height without a root");
      continue;
    }
    if (r - 1 >= nblocks_ || h == 0 || h > kMaxHeight) return Damage("extent root", rwhere, "bad root or height");
    stack.push_back({r - 1, static_cast<int>(h) - 1, 0, kNoBound});
    while (!stack.empty()) {
      Frame f = stack.back();
      stack.pop_back();
      const uint64_t at = data_off_ + f.blk * kBlockSize;
      if (ref[f.blk]++) return Damage("extent node", at, "node block referenced twice");
      if (!bm_.UsedOnMedia(f.blk)) return Damage("extent node", at, "node block free in the bitmap");
      const char* n = node(f.blk);
      if (!NodeOk(n, f.level)) return Damage("extent node", at, "bad magic, level or count");
      const uint32_t cnt = Hdr(n)->count;
      if (f.level > 0) {
        const ExtentIndex* k = Idx(n);
        for (uint32_t i = 0; i < cnt; i++) {
          const uint64_t next = i + 1 < cnt ? k[i + 1].fblk : f.hi;
          if (k[i].fblk < f.lo || k[i].fblk >= next) return Damage("extent node", at + 64 + 16 * i, "keys out of order");
          if (k[i].child >= nblocks_) return Damage("extent node", at + 64 + 16 * i, "child outside the block area");
          stack.push_back({k[i].child, f.level - 1, k[i].fblk, next});
        }
        continue;
      }
      const Extent* x = Exts(n);
      uint64_t prev_end = f.lo;
      for (uint32_t i = 0; i < cnt; i++) {
        const uint64_t xat = at + 64 + 24 * i;
        if (x[i].len == 0 || x[i].fblk < prev_end || x[i].fblk >= format::kMaxFileBlock ||
            x[i].len > format::kMaxFileBlock - x[i].fblk || x[i].fblk + x[i].len > f.hi)
          return Damage("extent node", xat, "extents overlap or leave their leaf's range");
        if (x[i].blk >= nblocks_ || x[i].len > nblocks_ - x[i].blk)
          return Damage("extent node", xat, "extent outside the block area");
        for (uint64_t b = x[i].blk; b < x[i].blk + x[i].len; b++) {
          if (ref[b]++) return Damage("extent node", xat, "block " + std::to_string(b) + " referenced twice");
          if (!bm_.UsedOnMedia(b)) return Damage("extent node", xat, "block " + std::to_string(b) + " free in the bitmap");
        }
        prev_end = x[i].fblk + x[i].len;
      }
    }
  }
  for (uint64_t b = 0; b < nblocks_; b++)
    if (bm_.UsedOnMedia(b) && !ref[b])
      return Damage("extent bitmap", bitmap_off_ + b / 64 * 8, "block " + std::to_string(b) + " in use but not referenced");
  return Status::Ok();
}

Usage ExtentMapper::usage() const {
  Usage u;
  u.blocks = nblocks_;
  u.node_blocks = node_blocks_;
  uint64_t used = bm_.used();  // node_blocks_ is this process's count: never above what is used
  u.used_blocks = used - std::min(used, node_blocks_);
  u.fixed_bytes = fixed_bytes_;
  return u;
}

Result<std::unique_ptr<Mapper>> OpenExtent(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h) {
  auto m = std::make_unique<ExtentMapper>(pool, area_off, h);
  m->Load();
  return std::unique_ptr<Mapper>(std::move(m));
}

}  // namespace mapfs::map
