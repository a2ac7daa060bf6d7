// Copy-on-map views of virtualized files (vview.h).
#include "overlay/virtual/vview.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/raw_syscall.h"

namespace mapfs::overlay::vrt {
namespace {

size_t Page() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}
size_t RoundUp(size_t n) { return (n + Page() - 1) / Page() * Page(); }

// How many of a file's shared views are mapped before new ones are tracked
// (vview.h): kUntrackedViews, or MAPFS_OVERLAY_TRACK_FROM. Read at each map
// (not cached: tests change it), never in the fault handler.
size_t TrackFrom() {
  const char* e = getenv("MAPFS_OVERLAY_TRACK_FROM");
  if (e == nullptr || *e < '0' || *e > '9') return kUntrackedViews;
  return static_cast<size_t>(strtoul(e, nullptr, 10));
}

// A truncate zeroes up to this many bytes of a view by hand rather than
// releasing the pages: a file cut and grown again (fsx does it all the
// time) refills them at once, and a refault costs more than a memset
// (fsx 8,000 ops with ~1,000 live maps: 16 s releasing every whole page,
// 4.0 s with this bound, the same as never releasing).
constexpr size_t kZeroByHand = 64 * 1024;

// The kernel's madvise, not the shim's wrapper (which routes views back
// here). 0 or an errno.
int RawAdvise(void* p, size_t len, int advice) {
  return RawSyscall(SYS_madvise, reinterpret_cast<long>(p), static_cast<long>(len), advice) == 0 ? 0 : errno;
}

// Calls read(done) (-> Result<size_t>, the bytes copied from content offset
// off + done into the destination at done) until `len` bytes are copied or
// the content ends. `filled`: the bytes copied.
template <typename Read>
Status FillBy(size_t len, size_t* filled, Read read) {
  size_t done = 0;
  while (done < len) {
    auto r = read(done);
    if (!r.ok()) return r.status();
    if (*r == 0) break;  // the end
    done += *r;
  }
  if (filled != nullptr) *filled = done;
  return Status::Ok();
}

// Fills dst with content [off, off+len): zeros past the end. `filled`:
// the bytes read (the rest is fresh memory: zeros).
Status Fill(VFile& f, char* dst, size_t len, uint64_t off, size_t* filled = nullptr) {
  return FillBy(len, filled, [&](size_t done) { return f.Pread(dst + done, len - done, off + done); });
}

// The same into the fresh memfd `mfd` of a shared view, copied by the
// kernel (VFile::CopyOut): no page of the file or of the memfd is mapped
// here for it, whole pages are not zeroed first, and the application's
// map then faults in only the pages it touches, as a kernel map of a file
// would. (Filling through the alias cost a zeroed page, a page-table entry
// in the alias and one in the engine's map of the file for every page of
// the range, read or not: LevelDB maps each table whole and reads a few
// blocks of it.)
Status FillFd(VFile& f, int mfd, size_t len, uint64_t off, size_t* filled) {
  return FillBy(len, filled, [&](size_t done) { return f.CopyOut(mfd, done, len - done, off + done); });
}

// A view of f's content [off, off+len) with nothing mapped yet.
std::shared_ptr<View> NewView(const std::shared_ptr<VFile>& f, size_t len, uint64_t off, bool may_write) {
  auto v = std::make_shared<View>();
  v->len = len;
  v->off = off;
  v->f = f;
  v->epoch = ForkEpoch();
  v->may_write = may_write;
  return v;
}

// Writes back the stores made through v in its byte range [from, to)
// (page multiples): per page, the bytes from the first to the last that
// differ from the twin, clamped to the content's size (stores past the end
// are lost, as a kernel map's are). The bytes are copied once, so a store
// racing the write-back is either in this write or found by the next one.
// commit(bytes, n, at) writes them to the file (a writer: ViewList, rule 1).
template <typename Commit>
Status SyncOne(View& v, size_t from, size_t to, Commit commit) {
  auto size = v.f->Size();
  if (!size.ok()) return size.status();
  const size_t pg = Page();
  std::vector<char> tmp(pg);
  for (size_t p = from; p < to; p += pg) {
    uint64_t at = v.off + p;
    if (at >= *size) break;
    size_t n = static_cast<size_t>(std::min<uint64_t>(pg, *size - at));
    if (std::memcmp(v.alias + p, v.twin + p, n) == 0) continue;
    std::memcpy(tmp.data(), v.alias + p, n);
    size_t i = 0, j = n;
    while (i < j && tmp[i] == v.twin[p + i]) i++;
    while (j > i && tmp[j - 1] == v.twin[p + j - 1]) j--;
    if (i == j) continue;  // the stores were undone meanwhile
    auto w = commit(tmp.data() + i, j - i, at + i);
    if (!w.ok()) return w.status();
    std::memcpy(v.twin + p + i, tmp.data() + i, j - i);
  }
  return Status::Ok();
}

// The copy of v's bytes that the application never stores into: its twin,
// or its alias when it has none (a view nobody can store into).
char* Stable(View& v) { return v.twin != nullptr ? v.twin : v.alias; }

// Sets v's bytes [at, at+len) to `src`: the twin first, then the alias
// from it (vview.h, "twin before alias").
void Load(View& v, size_t at, size_t len, const char* src) {
  if (v.twin != nullptr) {
    std::memcpy(v.twin + at, src, len);
    std::memcpy(v.alias + at, v.twin + at, len);
  } else {
    std::memcpy(v.alias + at, src, len);
  }
}

// Sets v's twin [at, at+len) to `src`, and its alias only where it still
// equals the twin's former bytes: where the application stored since the
// last write-back the store stays, to be written back (a failed write,
// Written). Where the twin already holds src nothing is touched, so when
// the failed write committed nothing (the common case) a store racing this
// is never lost; elsewhere one racing the compare of its own byte may be,
// as with any reload.
void Merge(View& v, size_t at, size_t len, const char* src) {
  if (v.twin == nullptr) {  // nothing stores into it
    std::memcpy(v.alias + at, src, len);
    return;
  }
  char* t = v.twin + at;
  char* a = v.alias + at;
  if (std::memcmp(t, src, len) == 0) return;
  for (size_t i = 0; i < len; i++) {
    if (t[i] == src[i]) continue;
    const char old = t[i];
    t[i] = src[i];  // twin before alias
    if (a[i] == old) a[i] = src[i];
  }
}

std::atomic<ReloadRead> reload_read{nullptr};

// How a reload installs what it read: over alias and twin (Load: a
// write's or truncate's range, which replaces any store there, as the
// kernel's write does), or keeping the stores (Merge: a failed write).
enum class Install { kReplace, kMerge };

// Reads scratch memory at a time (a failed append reloads whole views).
constexpr size_t kReloadChunk = 64 * 1024;

// Sets v's bytes [at, at+len) to f's content there (zeros past its end),
// as `how` says. The content is read into `scratch` and installed a chunk
// at a time once read: a failed read leaves the chunk it was reading, and
// those after, unchanged in alias and twin alike (vview.h's invariant: a
// twin holding bytes the alias does not would have the alias written back
// over newer content). False if f cannot be read. A view without a twin is
// read into directly: nothing compares it.
bool Load(View& v, size_t at, size_t len, VFile& f, Install how, std::vector<char>& scratch) {
  ReloadRead hook = reload_read.load(std::memory_order_relaxed);
  auto fill = [&](char* dst, size_t n, uint64_t off) {
    size_t filled = 0;
    Status s = hook == nullptr ? Fill(f, dst, n, off, &filled)
                               : FillBy(n, &filled, [&](size_t done) { return hook(f, dst + done, n - done, off + done); });
    if (!s.ok()) return false;
    std::memset(dst + filled, 0, n - filled);
    return true;
  };
  if (v.twin == nullptr) return fill(v.alias + at, len, v.off + at);
  scratch.resize(std::min(len, kReloadChunk));
  for (size_t done = 0; done < len;) {
    size_t n = std::min(len - done, scratch.size());
    if (!fill(scratch.data(), n, v.off + at + done)) return false;
    if (how == Install::kReplace)
      Load(v, at + done, n, scratch.data());
    else
      Merge(v, at + done, n, scratch.data());
    done += n;
  }
  return true;
}

// What a truncate to `size` does to v (under its list's lock): zeros past
// the end, as far as the view may hold anything else there.
void ZeroPast(View& v, uint64_t size) {
  size_t from = size > v.off ? static_cast<size_t>(size - v.off) : 0;
  // Where stores may have gone unseen (untracked writable views, views
  // older than a fork, dirty pages), everything past the end is zeroed;
  // elsewhere only up to zero_from (zeros beyond it already).
  bool whole_view = v.epoch != ForkEpoch() || (v.track == nullptr && v.writable) ||
                    (v.track != nullptr && v.track->AnyDirty());
  size_t end = whole_view ? v.len : std::min(v.zero_from, v.len);
  if (from >= end) return;
  v.zero_from = from;
  // Up to kZeroByHand by memset; more is released, which costs what it
  // holds, not its size: MADV_REMOVE frees the memfd's pages (the
  // application's map reads zeros there too), MADV_DONTNEED the twin's
  // (private anonymous: zeros). Stores made there later differ from the
  // twin's zeros and are dropped at write-back (past the end).
  end = RoundUp(end);
  size_t whole = end - from <= kZeroByHand ? end : std::min(RoundUp(from), end);
  std::memset(v.alias + from, 0, whole - from);
  if (v.twin != nullptr) std::memset(v.twin + from, 0, whole - from);
  if (whole == end) return;
  if (RawAdvise(v.alias + whole, end - whole, MADV_REMOVE) != 0) std::memset(v.alias + whole, 0, end - whole);
  if (v.twin != nullptr && RawAdvise(v.twin + whole, end - whole, MADV_DONTNEED) != 0)
    std::memset(v.twin + whole, 0, end - whole);
}

}  // namespace

void SetReloadReadForTest(ReloadRead hook) { reload_read.store(hook, std::memory_order_relaxed); }

View::~View() {
  if (alias != nullptr) munmap(alias, len);
  if (twin != nullptr) munmap(twin, len);
}

Status ViewList::WriteBack(uint64_t lo, uint64_t hi) {
  std::lock_guard<std::mutex> g(mu_);
  Status first = Status::Ok();
  const uint64_t epoch = ForkEpoch();
  std::vector<std::pair<size_t, size_t>> runs;
  for (auto& v : views_) {
    auto commit = [&](const char* b, size_t n, uint64_t at) {
      (void)Begin();
      auto w = v->f->Pwrite(b, n, at);
      End();
      return w;
    };
    // Untracked: read-only views hold no store; writable ones (and every
    // view older than the last fork) are compared whole.
    // Views without a twin can hold no store of this process's (below).
    bool whole = v->epoch != epoch || (v->track == nullptr && v->writable);
    if (v->twin == nullptr || (!whole && (v->track == nullptr || !v->track->AnyDirty()))) continue;
    uint64_t a = std::max(lo, v->off), b = std::min(hi, v->off + v->len);
    if (a >= b) continue;
    size_t from = static_cast<size_t>(a - v->off) / Page() * Page();
    size_t to = std::min(RoundUp(static_cast<size_t>(b - v->off)), v->len);
    if (whole) {
      Status s = SyncOne(*v, from, to, commit);
      if (first.ok()) first = s;
      continue;
    }
    // The dirty pages, write-protected before they are compared (vtrack.h).
    runs.clear();
    v->track->TakeDirty(v->tpage + from / Page(), v->tpage + to / Page(), &runs);
    for (auto [p, n] : runs) {
      size_t at = (p - v->tpage) * Page();
      Status s = SyncOne(*v, at, at + n * Page(), commit);
      if (first.ok()) first = s;
      v->zero_from = std::max(v->zero_from, at + n * Page());  // stores past the end stay in the alias
    }
  }
  return first;
}

ViewList::ViewList() : child_epoch_(0) {
  CountForks();  // before the first Begin: a fork after it moves ChildEpoch in the child
  child_epoch_.store(ChildEpoch(), std::memory_order_relaxed);
}

void ViewList::ForgetParentWriters() {
  // In a fork child, the first thread to get here clears the count in
  // flight (the parent's threads') while the others wait: none of this
  // process can have begun, since each Begin comes here first until the
  // epoch is stored. A kClearing of an older epoch was left by a thread
  // that is not in this process (a fork while it cleared): taken over.
  const uint64_t now = ChildEpoch();
  for (;;) {
    uint64_t seen = child_epoch_.load(std::memory_order_acquire);
    if (seen == now) return;
    if (seen == (now | kClearing)) {
      sched_yield();
      continue;
    }
    if (child_epoch_.compare_exchange_weak(seen, now | kClearing, std::memory_order_acq_rel)) {
      uint64_t w = writers_.load(std::memory_order_acquire);
      writers_.store(w - w % kBegun, std::memory_order_relaxed);  // the begun count stays
      child_epoch_.store(now, std::memory_order_release);
      return;
    }
  }
}

ViewList::Ticket ViewList::Begin() {
  // (Two loads: the epoch moves only in a fork child.)
  if (child_epoch_.load(std::memory_order_acquire) != ChildEpoch()) ForgetParentWriters();
  uint64_t old = writers_.fetch_add(kBegun + 1, std::memory_order_acq_rel);
  return Ticket{old / kBegun + 1, old % kBegun == 0};
}

void ViewList::Written(VFile& f, Ticket t, const void* buf, uint64_t off, uint64_t n, uint64_t size_before) {
  // Rule 2 (vview.h): the bump, then the load of n_, against AddFilled's
  // store of n_, then load of gen_.
  gen_.fetch_add(1, std::memory_order_seq_cst);
  if (n == 0 || n_.load(std::memory_order_seq_cst) == 0) return End();
  const uint64_t end = n > UINT64_MAX - off ? UINT64_MAX : off + n;
  std::unique_lock<std::mutex> g(mu_);
  // Rule 1: the caller's bytes if no other writer can have overtaken it;
  // else the file's, read once for the first view over the range (into
  // its stable copy) and copied from there into the others that fall
  // within what it read (a view reaching further reads for itself).
  // A failed write (buf null) keeps the application's stores (Merge).
  const bool from_buf = buf != nullptr && AloneLocked(t);
  const Install how = buf != nullptr ? Install::kReplace : Install::kMerge;
  const char* src = nullptr;  // content [src_lo, src_hi)
  uint64_t src_lo = 0, src_hi = 0;
  std::vector<char> scratch;
  // [a, b) of view v, installed as `how2` says.
  auto update = [&](View& v, uint64_t a, uint64_t b, Install how2) {
    size_t at = static_cast<size_t>(a - v.off), len = static_cast<size_t>(b - a);
    if (from_buf) {
      Load(v, at, len, static_cast<const char*>(buf) + (a - off));
    } else if (src != nullptr && src_lo <= a && b <= src_hi) {
      if (how2 == Install::kReplace)
        Load(v, at, len, src + (a - src_lo));
      else
        Merge(v, at, len, src + (a - src_lo));
    } else if (Load(v, at, len, f, how2, scratch)) {
      src = Stable(v) + at;
      src_lo = a;
      src_hi = b;
    } else if (buf != nullptr) {
      // The file could not be read: the caller's bytes, right unless
      // another thread's write to them committed after this one.
      Load(v, at, len, static_cast<const char*>(buf) + (a - off));
    }
    // Raised even when the file could not be read: a partial reload may
    // have installed bytes up to there, which a later truncate must zero.
    v.zero_from = std::max(v.zero_from, at + len);
  };
  for (auto& v : views_) {
    uint64_t a = std::max(off, v->off), b = std::min(end, v->off + v->len);
    if (a >= b) continue;
    // A failed write merges only below the size before it (see vview.h).
    uint64_t split = how == Install::kMerge ? std::clamp(size_before, a, b) : a;
    if (a < split) update(*v, a, split, Install::kMerge);
    if (split < b) update(*v, split, b, Install::kReplace);
  }
  g.unlock();
  End();
}

void ViewList::Truncated(VFile& f, Ticket, uint64_t size) {
  gen_.fetch_add(1, std::memory_order_seq_cst);  // rule 2, as Written
  if (n_.load(std::memory_order_seq_cst) == 0) return End();
  std::unique_lock<std::mutex> g(mu_);
  // Rule 1: a write of another thread may have committed past `size` after
  // this truncate and updated the views already (or the truncate failed):
  // the zeroing below is what the file holds past its size *now*, and what
  // it holds between `size` and that is reloaded from it (in the common
  // case there is nothing between). If the size cannot be read, the
  // truncate's own result.
  auto cur = f.Size();
  const uint64_t now = cur.ok() ? std::max(*cur, size) : size;
  std::vector<char> scratch;  // (rarely used: a write racing the truncate)
  for (auto& v : views_) {
    if (size >= v->off + v->len) continue;
    ZeroPast(*v, size);
    if (now == size) continue;
    uint64_t a = std::max(size, v->off), b = std::min(now, v->off + v->len);
    if (a >= b) continue;
    size_t at = static_cast<size_t>(a - v->off), len = static_cast<size_t>(b - a);
    // A failed read leaves zeros (what the truncate made of the range) or
    // part of the file's bytes: either way zero_from must cover it.
    (void)Load(*v, at, len, f, Install::kReplace, scratch);
    v->zero_from = std::max(v->zero_from, at + len);
  }
  g.unlock();
  End();
}

// A view found in the registry may be in the middle of an Unmap by
// another thread, which changes it (len, track) only while it is out of
// the list: a view no longer (or not yet again) in the list is left alone.
bool ViewList::HoldsLocked(const View& v) const {
  return std::any_of(views_.begin(), views_.end(), [&](const auto& x) { return x.get() == &v; });
}

void ViewList::Unprotect(View& v, size_t from, size_t to) {
  std::lock_guard<std::mutex> g(mu_);
  if (!HoldsLocked(v) || to > v.len) return;
  if (v.track != nullptr) v.track->Unprotect(v.tpage + from / Page(), v.tpage + to / Page());
}

int ViewList::Protect(View& v, size_t from, size_t to, int prot, int pkey) {
  std::lock_guard<std::mutex> g(mu_);  // no write-back between its clear and its protect meanwhile
  if (!HoldsLocked(v) || to > v.len) return 0;  // being unmapped by another thread
  if (v.track != nullptr) return v.track->Protect(v.tpage + from / Page(), v.tpage + to / Page(), prot, pkey);
  if (prot & PROT_WRITE) v.writable = true;  // untracked: compared whole from now on
  return RawProtect(v.addr + from, to - from, prot, pkey);
}

Status ViewList::AddFilled(std::shared_ptr<View> v, uint64_t g0) {
  std::lock_guard<std::mutex> g(mu_);
  views_.push_back(v);
  n_.store(views_.size(), std::memory_order_seq_cst);
  if (gen_.load(std::memory_order_seq_cst) == g0) return Status::Ok();
  // A write or truncate committed since the fill began and may have found
  // the list without this view: reloaded whole from the file (rule 2),
  // under the lock, so the writers waiting for it update the view after.
  // Map has not returned it yet: the application holds no store in it (a
  // MAP_FIXED map at an address another thread stores into meanwhile is
  // that program's race, as with the kernel). Twin before alias; past the
  // content, zeros up to where the fill had put anything.
  char* dst = Stable(*v);
  size_t filled = 0;
  Status s = Fill(*v->f, dst, v->len, v->off, &filled);
  if (!s.ok()) {
    views_.pop_back();
    n_.store(views_.size(), std::memory_order_seq_cst);
    return s;
  }
  size_t end = std::max(filled, std::min(v->zero_from, v->len));
  std::memset(dst + filled, 0, end - filled);
  if (v->twin != nullptr) std::memcpy(v->alias, v->twin, end);
  v->zero_from = filled;
  return Status::Ok();
}

void ViewList::Cut(View& v, size_t cut_lo, size_t cut_hi, const std::shared_ptr<View>& right) {
  std::lock_guard<std::mutex> g(mu_);
  if (right != nullptr) {
    // What changes under the lock (zero_from, writable) is copied under it.
    right->zero_from = v.zero_from > cut_hi ? v.zero_from - cut_hi : 0;
    right->writable = v.writable;
    views_.push_back(right);
  }
  if (cut_lo > 0) {
    v.len = cut_lo;
    v.zero_from = std::min(v.zero_from, cut_lo);
  } else {
    views_.erase(std::remove_if(views_.begin(), views_.end(), [&](auto& x) { return x.get() == &v; }),
                 views_.end());
  }
  n_.store(views_.size(), std::memory_order_seq_cst);
}

// Spare aliases (vview.h): at most this many bytes, and this many of them.
constexpr size_t kSpareBytes = size_t{64} << 20;
constexpr size_t kSpares = 16;

ViewRegistry::~ViewRegistry() {
  for (const Spare& sp : spares_) munmap(sp.alias, sp.len);
}

// Returns the tail [p, p+len) of a spare's alias to the kernel: its memfd
// pages first (the memfd lives on while the rest of the alias maps it, so
// an unmap alone would free none of them), then the mapping. Only where
// nothing else maps those pages (TakeSpareLocked checked it).
void DropTail(char* p, size_t len) {
  (void)RawAdvise(p, len, MADV_REMOVE);
  munmap(p, len);
}

// Whether nothing is mapped at [p, p+len) any more (mincore: ENOMEM when
// a page of the range is unmapped; a failed or pending munmap leaves all
// of it, a MAP_FIXED replacement maps all of it, so the first and the last
// page tell).
bool Unmapped(char* p, size_t len) {
  unsigned char v;
  auto gone = [&](char* q) {
    return RawSyscall(SYS_mincore, reinterpret_cast<long>(q), static_cast<long>(Page()), reinterpret_cast<long>(&v)) ==
               -1 &&
           errno == ENOMEM;
  };
  return gone(p) && gone(p + len - Page());
}

// A spare of at least `len` bytes and at most twice that (what is past
// `len` is returned to the kernel: freeing a page costs less than
// allocating one), the smallest such, that may be reused (Spare); the
// ones that never may again are dropped on the way.
char* ViewRegistry::TakeSpareLocked(size_t len) {
  const uint64_t epoch = ForkEpoch();
  const pid_t pid = getpid();
  constexpr size_t kNone = ~size_t{0};  // (not size(): the loop erases)
  size_t best = kNone;
  for (size_t i = 0; i < spares_.size();) {
    const Spare& sp = spares_[i];
    if (sp.epoch != epoch || sp.pid != pid) {
      // A fork since (counted, or a child that did not run the handlers):
      // another process may map these pages. Unmapped only: a release of
      // the pages (MADV_REMOVE) would take them from its maps too.
      munmap(sp.alias, sp.len);
      spare_bytes_ -= sp.len;
      spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (sp.len >= len && sp.len / 2 <= len && (best == kNone || sp.len < spares_[best].len)) best = i;
    i++;
  }
  if (best == kNone) return nullptr;
  Spare sp = spares_[best];
  spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(best));
  spare_bytes_ -= sp.len;
  if (!Unmapped(sp.app, sp.len)) {  // the application still maps them (or maps something new there)
    munmap(sp.alias, sp.len);
    return nullptr;
  }
  if (sp.len > len) DropTail(sp.alias + len, sp.len - len);
  return sp.alias;
}

void ViewRegistry::KeepSpareLocked(const View& v) {
  // (munmap alone: the pages go with the last map of the memfd.)
  if (v.len > kSpareBytes / 4) {
    munmap(v.alias, v.len);
    return;
  }
  while (!spares_.empty() && (spares_.size() >= kSpares || spare_bytes_ + v.len > kSpareBytes)) {
    munmap(spares_.front().alias, spares_.front().len);
    spare_bytes_ -= spares_.front().len;
    spares_.erase(spares_.begin());
  }
  spares_.push_back({v.alias, v.len, v.epoch, getpid(), v.addr});
  spare_bytes_ += v.len;
}

Result<void*> ViewRegistry::Map(const std::shared_ptr<VFile>& f, const std::shared_ptr<ViewList>& list,
                                void* addr, size_t len, int prot, int flags, uint64_t off, bool may_write) {
  if (len == 0 || off % Page() != 0) return Status::Error(EINVAL, "mmap: bad length or offset");
  CountForks();  // before any view exists: its epoch must change at a fork
  size_t L = RoundUp(len);
  int type = flags & MAP_TYPE;
  // Placement flags pass through; the type is ours.
  int place = flags & (MAP_FIXED | MAP_FIXED_NOREPLACE | MAP_POPULATE | MAP_NORESERVE | MAP_LOCKED);
  if (flags & MAP_FIXED) MAPFS_RETURN_IF_ERROR(Unmap(addr, L));  // views replaced there
  if (type == MAP_PRIVATE) {
    void* p = mmap(addr, L, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | place, -1, 0);
    if (p == MAP_FAILED) return Status::FromErrno("mmap");
    Status s = Fill(*f, static_cast<char*>(p), L, off);
    if (s.ok() && prot != (PROT_READ | PROT_WRITE) && mprotect(p, L, prot) != 0) s = Status::FromErrno("mprotect");
    if (!s.ok()) {
      munmap(p, L);
      return s;
    }
    return p;
  }
  if (type != MAP_SHARED && type != MAP_SHARED_VALIDATE) return Status::Error(EINVAL, "mmap: bad type");
  if (flags & MAP_SYNC) return Status::Error(EOPNOTSUPP, "mmap: MAP_SYNC of a virtualized file");
  // A view mapped through a description not open for writing can never
  // be stored into by this process (PROT_WRITE is refused, here and at
  // mprotect: Protect) and the kernel's stores into a read-only page fail
  // as they would on a kernel map, so its alias changes only with the
  // file's own writes (Written, Truncated): it needs no twin and is never
  // compared. (A fork child's write() reaches the shared alias too; the
  // child's write is already in the file, so skipping it is right.) That
  // saves a copy of the whole range and its fresh pages, per map of a
  // table LevelDB reads (docs/OVERLAY.md "Maps of virtualized files").
  const bool twin = may_write || (prot & PROT_WRITE) != 0;
  if (!twin && place == 0 && addr == nullptr) {
    char* a;
    {
      std::lock_guard<std::mutex> g(mu_);
      a = TakeSpareLocked(L);
    }
    if (a != nullptr) {
      const uint64_t g0 = list->Generation();  // before the fill (ViewList::AddFilled)
      auto v = NewView(f, L, off, false);
      v->alias = a;  // the View owns it from here (its destructor unmaps it)
      size_t filled = 0;
      MAPFS_RETURN_IF_ERROR(
          FillBy(L, &filled, [&](size_t done) { return f->PreadByKernel(a + done, L - done, off + done); }));
      std::memset(a + filled, 0, L - filled);  // the spare's former content
      v->zero_from = filled;
      // A second map of the alias's pages at a place of the kernel's
      // choosing (the hint, without MAP_FIXED, may be ignored), then the
      // application's protection.
      long p = RawSyscall(SYS_mremap, reinterpret_cast<long>(a), 0, static_cast<long>(L), MREMAP_MAYMOVE);
      if (p == -1) return Status::FromErrno("mremap");
      if (int e = RawProtect(reinterpret_cast<void*>(p), L, prot); e != 0) {
        munmap(reinterpret_cast<void*>(p), L);
        return Status::Error(e, "mprotect");
      }
      v->addr = reinterpret_cast<char*>(p);
      return Register(std::move(v), list, g0);
    }
  }
  int mfd = memfd_create("mapfs-virtual-view", MFD_CLOEXEC);
  if (mfd < 0) return Status::FromErrno("memfd_create");
  auto v = NewView(f, L, off, may_write);
  Status s = Status::Ok();
  if (ftruncate(mfd, static_cast<off_t>(L)) != 0) s = Status::FromErrno("ftruncate");
  if (s.ok()) {
    void* a = mmap(nullptr, L, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    void* t = twin ? mmap(nullptr, L, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : nullptr;
    if (a != MAP_FAILED) v->alias = static_cast<char*>(a);
    if (t != MAP_FAILED) v->twin = static_cast<char*>(t);
    if (a == MAP_FAILED || t == MAP_FAILED) s = Status::FromErrno("mmap");
  }
  const uint64_t g0 = list->Generation();  // before the fill (ViewList::AddFilled)
  if (s.ok()) s = FillFd(*f, mfd, L, off, &v->zero_from);
  if (s.ok()) {
    if (twin) std::memcpy(v->twin, v->alias, L);
    // Writable: past the file's first views (TrackFrom), mapped clean
    // (write-protected) and tracked; otherwise, or if it cannot be tracked,
    // given PROT_WRITE and compared whole.
    bool w = prot & PROT_WRITE;
    bool track = w && list->size() >= TrackFrom();
    void* p = mmap(addr, L, track ? prot & ~PROT_WRITE : prot, MAP_SHARED | place, mfd, 0);
    if (p == MAP_FAILED) {
      s = Status::FromErrno("mmap");
    } else {
      v->addr = static_cast<char*>(p);
      if (track) v->track = Track::Make(v->addr, L / Page(), prot);
      if (w && v->track == nullptr) {
        v->writable = true;
        if (int e = track ? RawProtect(p, L, prot) : 0; e != 0) {
          s = Status::Error(e, "mprotect");
          munmap(p, L);
        }
      }
    }
  }
  close(mfd);
  if (!s.ok()) return s;  // v's destructor unmaps alias and twin
  return Register(std::move(v), list, g0);
}

Result<void*> ViewRegistry::Register(std::shared_ptr<View> v, const std::shared_ptr<ViewList>& list, uint64_t g0) {
  if (Status s = list->AddFilled(v, g0); !s.ok()) {
    munmap(v->addr, v->len);  // v's destructor returns alias and twin
    return s;
  }
  std::lock_guard<std::mutex> g(mu_);
  void* addr = v->addr;
  by_addr_[reinterpret_cast<uintptr_t>(addr)] = Entry{std::move(v), list};
  n_.store(by_addr_.size(), std::memory_order_release);
  return addr;
}

std::vector<ViewRegistry::Hit> ViewRegistry::Hits(uintptr_t lo, uintptr_t hi) {
  std::vector<Hit> hits;
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_addr_.upper_bound(lo);
  if (it != by_addr_.begin()) --it;
  for (; it != by_addr_.end() && it->first < hi; ++it) {
    uintptr_t a = std::max(lo, it->first), b = std::min(hi, it->first + it->second.view->len);
    if (a < b) hits.push_back({it->second, a, b});
  }
  return hits;
}

Status ViewRegistry::Sync(void* addr, size_t len) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(addr), hi = lo + RoundUp(len);
  Status first = Status::Ok();
  for (auto& h : Hits(lo, hi)) {
    uint64_t o = h.e.view->off;
    uintptr_t base = reinterpret_cast<uintptr_t>(h.e.view->addr);
    Status s = h.e.list->WriteBack(o + (h.a - base), o + (h.b - base));
    if (first.ok()) first = s;
  }
  return first;
}

int ViewRegistry::Protect(void* addr, size_t len, int prot, int pkey) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(addr), hi = lo + RoundUp(len);
  if (lo % Page() != 0) return EINVAL;
  std::vector<Hit> hits = Hits(lo, hi);
  // The kernel refuses write access to a shared map of a description not
  // open for writing before it changes anything.
  if (prot & PROT_WRITE)
    for (auto& h : hits)
      if (!h.e.view->may_write) return EACCES;
  // In address order: what lies between views as the kernel would, the
  // views' pages through their lists. The first error is returned (the
  // kernel too may have changed part of the range when it fails).
  int first = 0;
  uintptr_t cur = lo;
  for (auto& h : hits) {
    if (h.a > cur) {
      int e = RawProtect(reinterpret_cast<void*>(cur), h.a - cur, prot, pkey);
      if (first == 0) first = e;
    }
    uintptr_t base = reinterpret_cast<uintptr_t>(h.e.view->addr);
    int e = h.e.list->Protect(*h.e.view, h.a - base, h.b - base, prot, pkey);
    if (first == 0) first = e;
    cur = h.b;
  }
  if (cur < hi) {
    int e = RawProtect(reinterpret_cast<void*>(cur), hi - cur, prot, pkey);
    if (first == 0) first = e;
  }
  return first;
}

void ViewRegistry::Unprotect(void* addr, size_t len) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(addr) / Page() * Page();
  uintptr_t hi = RoundUp(reinterpret_cast<uintptr_t>(addr) + len);
  // Untracked views: a no-op in their list (which reads `track` under its lock).
  for (auto& h : Hits(lo, hi)) {
    uintptr_t base = reinterpret_cast<uintptr_t>(h.e.view->addr);
    h.e.list->Unprotect(*h.e.view, h.a - base, h.b - base);
  }
}

Status ViewRegistry::Unmap(void* addr, size_t len) {
  if (empty()) return Status::Ok();
  Status first = Sync(addr, len);
  uintptr_t lo = reinterpret_cast<uintptr_t>(addr), hi = lo + RoundUp(len);
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_addr_.upper_bound(lo);
  if (it != by_addr_.begin()) --it;
  while (it != by_addr_.end() && it->first < hi) {
    Entry e = it->second;
    View& v = *e.view;
    uintptr_t a = std::max(lo, it->first), b = std::min(hi, it->first + v.len);
    if (a >= b) {
      ++it;
      continue;
    }
    it = by_addr_.erase(it);
    const size_t vlen = v.len;  // (changed only here, under mu_)
    size_t cut_lo = a - reinterpret_cast<uintptr_t>(v.addr), cut_hi = b - reinterpret_cast<uintptr_t>(v.addr);
    // What is left of the view on either side of the cut lives on as views
    // of their own (the unmapped part of alias and twin is returned). The
    // list trades v for them in one step: a write meanwhile reaches them.
    std::shared_ptr<View> right;
    if (cut_hi < vlen) {
      right = std::make_shared<View>();
      right->addr = v.addr + cut_hi;
      right->alias = v.alias + cut_hi;
      right->twin = v.twin != nullptr ? v.twin + cut_hi : nullptr;
      right->len = vlen - cut_hi;
      right->off = v.off + cut_hi;
      right->f = v.f;
      right->track = v.track;
      right->tpage = v.tpage + cut_hi / Page();
      right->may_write = v.may_write;
      right->epoch = v.epoch;
    }
    e.list->Cut(v, cut_lo, cut_hi, right);
    // The cut pages' stores were written back above; from now on their
    // addresses are no longer the view's (the kernel unmaps them next).
    if (v.track != nullptr) v.track->Forget(v.tpage + cut_lo / Page(), v.tpage + cut_hi / Page());
    if (right != nullptr) {
      it = by_addr_.emplace(reinterpret_cast<uintptr_t>(right->addr), Entry{right, e.list}).first;
      ++it;
    }
    // A read-only view unmapped whole, made since the last fork, leaves
    // its alias as a spare (TakeSpareLocked); any other goes back.
    if (cut_lo == 0 && cut_hi == vlen && v.twin == nullptr && v.track == nullptr && v.epoch == ForkEpoch())
      KeepSpareLocked(v);
    else
      munmap(v.alias + cut_lo, cut_hi - cut_lo);
    if (v.twin != nullptr) munmap(v.twin + cut_lo, cut_hi - cut_lo);
    if (cut_lo > 0) {
      by_addr_.emplace(reinterpret_cast<uintptr_t>(v.addr), Entry{e.view, e.list});
    } else {
      v.alias = v.twin = nullptr;  // all of it returned above (or now owned by `right`)
      v.len = 0;
      v.track.reset();  // the slot is released with the last piece
    }
  }
  n_.store(by_addr_.size(), std::memory_order_release);
  return first;
}

bool ViewRegistry::Meets(const void* addr, size_t len) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(addr), hi = lo + std::max<size_t>(RoundUp(len), 1);
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_addr_.upper_bound(lo);
  if (it != by_addr_.begin()) --it;
  for (; it != by_addr_.end() && it->first < hi; ++it)
    if (it->first + it->second.view->len > lo) return true;
  return false;
}

void ViewRegistry::SyncAll() {
  std::vector<Entry> all;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [a, e] : by_addr_) all.push_back(e);
  }
  for (auto& e : all) (void)e.list->WriteBack(e.view->off, e.view->off + e.view->len);
}

}  // namespace mapfs::overlay::vrt
