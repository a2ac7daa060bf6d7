// Copy-on-map views of virtualized files (vview.h).
#include "overlay/virtual/vview.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace mapfs::overlay::vrt {
namespace {

size_t Page() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}
size_t RoundUp(size_t n) { return (n + Page() - 1) / Page() * Page(); }

// Fills dst with content [off, off+len): zeros past the end.
Status Fill(VFile& f, char* dst, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    auto r = f.Pread(dst + done, len - done, off + done);
    if (!r.ok()) return r.status();
    if (*r == 0) break;  // the end: the rest stays zero (fresh memory)
    done += *r;
  }
  return Status::Ok();
}

// Writes back the stores made through v in its byte range [from, to)
// (page multiples): per page, the bytes from the first to the last that
// differ from the twin, clamped to the content's size (stores past the end
// are lost, as a kernel map's are). The bytes are copied once, so a store
// racing the write-back is either in this write or found by the next one.
Status SyncOne(View& v, size_t from, size_t to) {
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
    auto w = v.f->Pwrite(tmp.data() + i, j - i, at + i);
    if (!w.ok()) return w.status();
    std::memcpy(v.twin + p + i, tmp.data() + i, j - i);
  }
  return Status::Ok();
}

}  // namespace

View::~View() {
  if (alias != nullptr) munmap(alias, len);
  if (twin != nullptr) munmap(twin, len);
}

Status ViewList::WriteBack(uint64_t lo, uint64_t hi) {
  std::lock_guard<std::mutex> g(mu_);
  Status first = Status::Ok();
  for (auto& v : views_) {
    uint64_t a = std::max(lo, v->off), b = std::min(hi, v->off + v->len);
    if (a >= b) continue;
    size_t from = static_cast<size_t>(a - v->off) / Page() * Page();
    size_t to = RoundUp(static_cast<size_t>(b - v->off));
    Status s = SyncOne(*v, from, std::min(to, v->len));
    if (first.ok()) first = s;
  }
  return first;
}

void ViewList::Written(const void* buf, uint64_t off, uint64_t n) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& v : views_) {
    uint64_t a = std::max(off, v->off), b = std::min(off + n, v->off + v->len);
    if (a >= b) continue;
    const char* src = static_cast<const char*>(buf) + (a - off);
    std::memcpy(v->alias + (a - v->off), src, b - a);
    std::memcpy(v->twin + (a - v->off), src, b - a);
  }
}

void ViewList::Truncated(uint64_t size) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& v : views_) {
    if (size >= v->off + v->len) continue;
    size_t from = size > v->off ? static_cast<size_t>(size - v->off) : 0;
    std::memset(v->alias + from, 0, v->len - from);
    std::memset(v->twin + from, 0, v->len - from);
  }
}

void ViewList::Add(std::shared_ptr<View> v) {
  std::lock_guard<std::mutex> g(mu_);
  views_.push_back(std::move(v));
  n_.store(views_.size(), std::memory_order_release);
}

void ViewList::Remove(const View* v) {
  std::lock_guard<std::mutex> g(mu_);
  views_.erase(std::remove_if(views_.begin(), views_.end(), [&](auto& x) { return x.get() == v; }), views_.end());
  n_.store(views_.size(), std::memory_order_release);
}

Result<void*> ViewRegistry::Map(const std::shared_ptr<VFile>& f, const std::shared_ptr<ViewList>& list,
                                void* addr, size_t len, int prot, int flags, uint64_t off) {
  if (len == 0 || off % Page() != 0) return Status::Error(EINVAL, "mmap: bad length or offset");
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
  int mfd = memfd_create("mapfs-virtual-view", MFD_CLOEXEC);
  if (mfd < 0) return Status::FromErrno("memfd_create");
  auto v = std::make_shared<View>();
  v->len = L;
  v->off = off;
  v->f = f;
  Status s = Status::Ok();
  if (ftruncate(mfd, static_cast<off_t>(L)) != 0) s = Status::FromErrno("ftruncate");
  if (s.ok()) {
    void* a = mmap(nullptr, L, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    void* t = mmap(nullptr, L, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a != MAP_FAILED) v->alias = static_cast<char*>(a);
    if (t != MAP_FAILED) v->twin = static_cast<char*>(t);
    if (a == MAP_FAILED || t == MAP_FAILED) s = Status::FromErrno("mmap");
  }
  if (s.ok()) s = Fill(*f, v->alias, L, off);
  if (s.ok()) {
    std::memcpy(v->twin, v->alias, L);
    void* p = mmap(addr, L, prot, MAP_SHARED | place, mfd, 0);
    if (p == MAP_FAILED) s = Status::FromErrno("mmap");
    else v->addr = static_cast<char*>(p);
  }
  close(mfd);
  if (!s.ok()) return s;  // v's destructor unmaps alias and twin
  list->Add(v);
  std::lock_guard<std::mutex> g(mu_);
  by_addr_[reinterpret_cast<uintptr_t>(v->addr)] = Entry{v, list};
  n_.store(by_addr_.size(), std::memory_order_release);
  return static_cast<void*>(v->addr);
}

Status ViewRegistry::Sync(void* addr, size_t len) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(addr), hi = lo + RoundUp(len);
  std::vector<std::pair<Entry, std::pair<uint64_t, uint64_t>>> hits;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = by_addr_.upper_bound(lo);
    if (it != by_addr_.begin()) --it;
    for (; it != by_addr_.end() && it->first < hi; ++it) {
      uintptr_t a = std::max(lo, it->first), b = std::min(hi, it->first + it->second.view->len);
      if (a >= b) continue;
      uint64_t o = it->second.view->off;
      hits.push_back({it->second, {o + (a - it->first), o + (b - it->first)}});
    }
  }
  Status first = Status::Ok();
  for (auto& [e, r] : hits) {
    Status s = e.list->WriteBack(r.first, r.second);
    if (first.ok()) first = s;
  }
  return first;
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
    size_t cut_lo = a - reinterpret_cast<uintptr_t>(v.addr), cut_hi = b - reinterpret_cast<uintptr_t>(v.addr);
    e.list->Remove(&v);
    // What is left of the view on either side of the cut lives on as views
    // of their own (the unmapped part of alias and twin is returned).
    if (cut_hi < v.len) {
      auto right = std::make_shared<View>();
      right->addr = v.addr + cut_hi;
      right->alias = v.alias + cut_hi;
      right->twin = v.twin + cut_hi;
      right->len = v.len - cut_hi;
      right->off = v.off + cut_hi;
      right->f = v.f;
      e.list->Add(right);
      it = by_addr_.emplace(reinterpret_cast<uintptr_t>(right->addr), Entry{right, e.list}).first;
      ++it;
    }
    munmap(v.alias + cut_lo, cut_hi - cut_lo);
    munmap(v.twin + cut_lo, cut_hi - cut_lo);
    if (cut_lo > 0) {
      v.len = cut_lo;
      e.list->Add(e.view);
      by_addr_.emplace(reinterpret_cast<uintptr_t>(v.addr), Entry{e.view, e.list});
    } else {
      v.alias = v.twin = nullptr;  // all of it returned above (or now owned by `right`)
      v.len = 0;
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
