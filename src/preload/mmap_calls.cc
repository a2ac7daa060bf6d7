// Memory maps of mapfs files. A shared map is a map of the pool file itself,
// at the pool pages that hold the file's bytes (FileSystem::MapPool): the
// kernel's page cache of the pool is the one copy every process, every map
// and every read/write shares, and the core keeps a mapped file's data in
// those pages however the file changes. A private map is a copy.
//
// The shim keeps a table of its shared maps (start -> end, description,
// file offset): munmap trims it, mremap remaps through the core, mprotect
// checks the description's access, msync persists. An entry holds its
// description, so a file stays alive while it is mapped, as in the kernel.
//
// Kernel mappings are bounded (vm.max_map_count): a shared map takes one
// per pool run, and a block-mapped file may have one run per 4 KiB block.
// A map that would take the process's direct runs past a quarter of
// vm.max_map_count goes through the file's mirror instead
// (fs/map_mirror.h: a memfd copy, one mapping per map), and so does every later map of that file while one of its
// mirror maps lives; its direct maps are switched to the mirror then, so
// that all maps of a file in a process share pages.
//
// A read-only shared map of a file opened read-only, whose pages are one
// pool run, is a "view map": an address in the pool's read view
// (read_view.h), with no kernel mapping of its own. munmap forgets it;
// whatever the program does to the view outside its live view maps lends
// that range to it for good (g_lent), and no view map is served there again.
#include <fcntl.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <vector>

#include "medium/persist.h"
#include "medium/pool.h"
#include "preload/calls.h"
#include "preload/overlay_fds.h"
#include "preload/read_view.h"
#include "vm/vm.h"

namespace mapfs::preload {
namespace {

bool InRegion(const void* p) {
  Shim& s = Shim::Get();
  if (!s.enabled()) return false;
  fs::FileSystem* f = s.Fs();
  return f != nullptr && f->mount().vm().Contains(p);
}

struct MapEntry {
  uintptr_t end;
  DescRef desc;
  uint64_t off;  // file offset of the entry's start
  int prot;
  bool mirror = false;  // a map of the file's mirror, not of the pool file
  uint64_t runs = 0;    // direct maps: kernel mappings it took (at most)
  bool view = false;    // served from the pool's read view: no kernel mapping
};

// A stretch of a mirror map that was unmapped: its stores are written back
// and, when no map of that mirror is left, the mirror is dropped.
struct Forgotten {
  DescRef desc;
  uint64_t lo, hi;  // file offsets
};

// Never destroyed: wrappers may run during exit.
std::mutex* g_maps_mu = new std::mutex;
std::map<uintptr_t, MapEntry>* g_maps = new std::map<uintptr_t, MapEntry>;
std::atomic<size_t> g_map_count{0};  // entries; lets unrelated calls skip the lock
uint64_t g_direct_runs = 0;           // sum of the direct entries' runs (g_maps_mu)
// Ranges of the read view the program changed outside a view map (g_maps_mu;
// a handful at most: a program has no reason to touch addresses it does not
// map). Kept sorted by start, possibly overlapping.
std::vector<std::pair<uintptr_t, uintptr_t>>* g_lent = new std::vector<std::pair<uintptr_t, uintptr_t>>;

// A quarter of vm.max_map_count for the direct maps of mapfs files.
uint64_t DirectRunBudget() {
  static const uint64_t budget = [] {
    uint64_t max = 65530;
    int fd = ::open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);  // in the core: the kernel's
    if (fd >= 0) {
      char buf[32] = {};
      ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
      if (n > 0 && std::strtoull(buf, nullptr, 10) > 0) max = std::strtoull(buf, nullptr, 10);
      ::close(fd);
    }
    return max / 4;
  }();
  return budget;
}

bool SameFile(const DescRef& a, const DescRef& b) { return a->fsys == b->fsys && a->file->ino == b->file->ino; }

uint64_t PageSize() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }
uint64_t RoundUp(uint64_t v) { return (v + PageSize() - 1) / PageSize() * PageSize(); }

// Forgets [a, b) in the table (needs g_maps_mu); descriptions whose last
// entry went go to *drop, to be released without the lock; the mirror
// stretches forgotten go to *mirrored (FinishForget).
void ForgetLocked(uintptr_t a, uintptr_t b, std::vector<DescRef>* drop, std::vector<Forgotten>* mirrored) {
  auto it = g_maps->upper_bound(a);
  if (it != g_maps->begin()) --it;
  while (it != g_maps->end() && it->first < b) {
    uintptr_t s = it->first;
    MapEntry e = it->second;
    if (e.end <= a) {
      ++it;
      continue;
    }
    it = g_maps->erase(it);
    g_direct_runs -= e.runs;
    // A piece left on either side keeps at most as many runs as pages.
    auto piece = [&](uintptr_t from, uintptr_t to) {
      MapEntry p{to,     e.desc, e.off + (from - s), e.prot, e.mirror, std::min<uint64_t>(e.runs, (to - from) / PageSize()),
                 e.view};
      g_direct_runs += p.runs;
      return g_maps->emplace(from, std::move(p)).first;
    };
    if (s < a) piece(s, a);
    if (e.end > b) it = piece(b, e.end);
    if (e.mirror) {
      uintptr_t lo = std::max(s, a), hi = std::min(e.end, b);
      mirrored->push_back({e.desc, e.off + (lo - s), e.off + (hi - s)});
    }
    drop->push_back(std::move(e.desc));
  }
  g_map_count.store(g_maps->size());
}

// After ForgetLocked, without the lock: the stores through the forgotten
// mirror stretches reach the file; a mirror no map uses any more goes.
void FinishForget(std::vector<Forgotten>* mirrored) {
  if (mirrored->empty()) return;
  CoreScope cs;
  for (Forgotten& f : *mirrored) {
    (void)f.desc->fsys->SyncMirror(f.desc->file->ino, f.lo, f.hi);
    bool used = false;
    {
      std::lock_guard<std::mutex> g(*g_maps_mu);
      for (auto& [s, e] : *g_maps) used |= e.mirror && SameFile(e.desc, f.desc);
    }
    if (!used) f.desc->fsys->DropMirror(f.desc->file->ino);
  }
}

// The entry holding [a, a+len) entirely, or end().
std::map<uintptr_t, MapEntry>::iterator FindLocked(uintptr_t a, uint64_t len) {
  auto it = g_maps->upper_bound(a);
  if (it == g_maps->begin()) return g_maps->end();
  --it;
  return a + len <= it->second.end ? it : g_maps->end();
}

// Whether [a, b) meets an entry, or a lent range (needs g_maps_mu).
bool TakenLocked(uintptr_t a, uintptr_t b) {
  auto it = g_maps->lower_bound(b);
  if (it != g_maps->begin() && std::prev(it)->second.end > a) return true;
  for (auto& [lo, hi] : *g_lent)
    if (lo < b && hi > a) return true;
  return false;
}

// The program changed [a, b) of the read view outside a view map: the
// view maps there are gone (replaced or unmapped), and the range is the
// program's from now on (needs g_maps_mu). Other maps in it are the
// caller's business (a MAP_FIXED map just made there stays).
void LendLocked(uintptr_t a, uintptr_t b, std::vector<DescRef>* drop) {
  std::vector<std::pair<uintptr_t, uintptr_t>> views;
  auto it = g_maps->upper_bound(a);
  if (it != g_maps->begin()) --it;
  for (; it != g_maps->end() && it->first < b; ++it)
    if (it->second.view && it->second.end > a) views.emplace_back(std::max(a, it->first), std::min(b, it->second.end));
  std::vector<Forgotten> none;  // a view map is never a mirror map
  for (auto [lo, hi] : views) ForgetLocked(lo, hi, drop, &none);
  for (auto [lo, hi] : *g_lent)
    if (lo <= a && hi >= b) return;
  g_lent->emplace_back(a, b);
}

// For wrappers that let the kernel change [p, p+len) (MAP_FIXED, mremap,
// mprotect, madvise): the part of it in the read view is lent.
void LendIfView(const void* p, size_t len) {
  if (!read_view::Meets(p, len)) return;
  auto a = reinterpret_cast<uintptr_t>(p);
  std::vector<DescRef> drop;
  std::lock_guard<std::mutex> g(*g_maps_mu);
  LendLocked(a, a + RoundUp(len), &drop);
}

// Whether view maps cover all of [p, p+len).
bool WithinViewMaps(const void* p, size_t len) {
  auto a = reinterpret_cast<uintptr_t>(p), b = a + RoundUp(len);
  std::lock_guard<std::mutex> g(*g_maps_mu);
  auto it = g_maps->upper_bound(a);
  if (it == g_maps->begin()) return false;
  for (--it; it != g_maps->end() && a < b; ++it) {
    if (!it->second.view || it->first > a || it->second.end <= a) return false;
    a = it->second.end;
  }
  return a >= b;
}

// A view map of [off, off+n) of the file in `run` (MapShared), or nullptr
// when the request is not one a view can serve: see the top and read_view.h.
void* MapView(const DescRef& d, const file::PoolRun& run, uint64_t n, int prot, int map_flags, uint64_t off) {
  if (prot != PROT_READ || (map_flags & (MAP_FIXED | MAP_FIXED_NOREPLACE)) ||
      (d->file->flags & O_ACCMODE) != O_RDONLY || run.len != n)
    return nullptr;
  char* v = read_view::At(*d->fsys->mount().vm().pool(), run.pool_off, n);
  if (v == nullptr) return nullptr;
  auto a = reinterpret_cast<uintptr_t>(v);
  std::lock_guard<std::mutex> g(*g_maps_mu);
  if (TakenLocked(a, a + n)) return nullptr;  // another map of these pages: the kernel's way
  MapEntry e{a + n, d, off, prot};
  e.view = true;
  g_maps->emplace(a, std::move(e));
  g_map_count.store(g_maps->size());
  return v;
}

// Maps [off, off+n) of the file at `addr` from its mirror (see the top);
// the file's direct maps switch to the mirror.
void* MapMirrored(const DescRef& d, void* addr, uint64_t n, int prot, int map_flags, uint64_t off) {
  uint64_t end = off + n;
  {
    std::lock_guard<std::mutex> g(*g_maps_mu);
    for (auto& [s, e] : *g_maps)
      if (!e.mirror && SameFile(e.desc, d)) end = std::max(end, e.off + (e.end - s));
  }
  auto fd = d->fsys->MirrorFd(*d->file, end);
  if (!fd.ok()) {
    Fail(fd.status());
    return MAP_FAILED;
  }
  int keep = map_flags & (MAP_FIXED | MAP_FIXED_NOREPLACE);
  int pass = map_flags & (MAP_POPULATE | MAP_LOCKED | MAP_NONBLOCK);
  void* m = REAL(mmap)(addr, n, prot, MAP_SHARED | keep | pass, *fd, static_cast<off_t>(off));
  if (m == MAP_FAILED) return m;
  if ((keep & MAP_FIXED_NOREPLACE) && m != addr) {  // a kernel older than 4.17 took it as a hint
    REAL(munmap)(m, n);
    errno = EEXIST;
    return MAP_FAILED;
  }
  std::vector<DescRef> drop;
  std::vector<Forgotten> mirrored;
  {
    std::lock_guard<std::mutex> g(*g_maps_mu);
    for (auto& [s, e] : *g_maps) {
      if (e.mirror || !SameFile(e.desc, d)) continue;
      // The mirror holds the pool pages' bytes (stores through this map
      // included): the same bytes, now shared with the other maps. On
      // failure the map stays direct (coherent with the file, not with
      // the mirror's unsynced stores).
      if (REAL(mmap)(reinterpret_cast<void*>(s), e.end - s, e.prot, MAP_SHARED | MAP_FIXED, *fd,
                     static_cast<off_t>(e.off)) == MAP_FAILED)
        continue;
      g_direct_runs -= e.runs;
      e.runs = 0;
      e.mirror = true;
    }
    auto a = reinterpret_cast<uintptr_t>(m);
    ForgetLocked(a, a + n, &drop, &mirrored);  // MAP_FIXED over an earlier map
    g_maps->emplace(a, MapEntry{a + n, d, off, prot, true, 0});
    g_map_count.store(g_maps->size());
  }
  FinishForget(&mirrored);
  return m;
}

// Maps [off, off+len) of the file at `addr` (map_flags: MAP_FIXED and the
// like, as the caller asked) from the pool file, or from its mirror.
void* MapShared(const DescRef& d, void* addr, size_t len, int prot, int map_flags, uint64_t off) {
  uint64_t n = RoundUp(len);
  if (d->fsys->Mirrored(d->file->ino)) return MapMirrored(d, addr, n, prot, map_flags, off);
  std::vector<file::PoolRun> runs;
  Status st = d->fsys->MapPool(*d->file, off, n, &runs);
  if (!st.ok()) {
    Fail(st.code() == EFBIG ? Status::Error(ENOMEM, st.message()) : st);
    return MAP_FAILED;
  }
  bool too_many;
  {
    std::lock_guard<std::mutex> g(*g_maps_mu);
    // Only when the budget runs out: a direct map is coherent with every
    // process (the pool's pages), a mirror only within this one and its
    // forks (a SQLite WAL index shared by two processes needs the former).
    too_many = g_direct_runs + runs.size() > DirectRunBudget();
  }
  if (too_many) return MapMirrored(d, addr, n, prot, map_flags, off);
  if (runs.size() == 1)
    if (void* v = MapView(d, runs[0], n, prot, map_flags, off)) return v;
  medium::Pool* pool = d->fsys->mount().vm().pool();
  int keep = map_flags & (MAP_FIXED | MAP_FIXED_NOREPLACE);
  void* m = REAL(mmap)(addr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | keep, -1, 0);
  if (m == MAP_FAILED) return m;
  if ((keep & MAP_FIXED_NOREPLACE) && m != addr) {  // a kernel older than 4.17 took it as a hint
    REAL(munmap)(m, n);
    errno = EEXIST;
    return MAP_FAILED;
  }
  int pass = map_flags & (MAP_POPULATE | MAP_LOCKED | MAP_NONBLOCK);
  char* p = static_cast<char*>(m);
  for (const file::PoolRun& r : runs) {
    void* q = REAL(mmap)(p, r.len, prot, pool->map_flags() | MAP_FIXED | pass, pool->fd(), static_cast<off_t>(r.pool_off));
    if (q == MAP_FAILED) {
      int e = errno;
      REAL(munmap)(m, n);
      errno = e;
      return MAP_FAILED;
    }
    p += r.len;
  }
  std::vector<DescRef> drop;
  std::vector<Forgotten> mirrored;
  {
    std::lock_guard<std::mutex> g(*g_maps_mu);
    auto a = reinterpret_cast<uintptr_t>(m);
    ForgetLocked(a, a + n, &drop, &mirrored);  // MAP_FIXED over an earlier map
    g_maps->emplace(a, MapEntry{a + n, d, off, prot, false, runs.size()});
    g_direct_runs += runs.size();
    g_map_count.store(g_maps->size());
  }
  FinishForget(&mirrored);
  return m;
}

void* MapMapfs(const DescRef& dr, void* addr, size_t len, int prot, int flags, off_t off) {
  Desc& d = *dr;
  if (len == 0 || off < 0 || static_cast<uint64_t>(off) % PageSize() != 0) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  if (d.file->is_dir) {
    errno = ENODEV;
    return MAP_FAILED;
  }
  int acc = d.file->flags & O_ACCMODE;
  if (acc == O_WRONLY || ((flags & MAP_TYPE) == MAP_SHARED && (prot & PROT_WRITE) && acc != O_RDWR)) {
    errno = EACCES;
    return MAP_FAILED;
  }
  CoreScope cs;
  if ((flags & MAP_TYPE) == MAP_PRIVATE) {
    void* m = REAL(mmap)(addr, len, PROT_READ | PROT_WRITE, (flags & ~MAP_TYPE) | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return m;
    auto r = d.fsys->Read(*d.file, m, len, off);
    if (!r.ok()) {
      REAL(munmap)(m, len);
      Fail(r.status());
      return MAP_FAILED;
    }
    if (prot != (PROT_READ | PROT_WRITE)) ::mprotect(m, len, prot);
    return m;
  }
  return MapShared(dr, addr, len, prot, flags, static_cast<uint64_t>(off));
}

// munmap of [a, b) where it meets the read view (needs g_maps_mu): view
// maps are only forgotten (ForgetLocked, after); the kernel unmaps the
// rest, and what of it lies in the view is lent.
int UnmapAroundViewsLocked(uintptr_t a, uintptr_t b, std::vector<DescRef>* drop) {
  if (a % PageSize() != 0 || b <= a) return FailErrno(EINVAL);
  std::vector<std::pair<uintptr_t, uintptr_t>> gaps;
  uintptr_t at = a;
  auto it = g_maps->upper_bound(a);
  if (it != g_maps->begin()) --it;
  for (; it != g_maps->end() && it->first < b; ++it) {
    if (!it->second.view || it->second.end <= a) continue;
    if (at < it->first) gaps.emplace_back(at, it->first);
    at = std::max(at, it->second.end);
  }
  if (at < b) gaps.emplace_back(at, b);
  for (auto [lo, hi] : gaps) {
    if (REAL(munmap)(reinterpret_cast<void*>(lo), hi - lo) != 0) return -1;
    if (read_view::Meets(reinterpret_cast<void*>(lo), hi - lo)) LendLocked(lo, hi, drop);
  }
  return 0;
}

int UnmapMapfs(void* addr, size_t len) {
  bool view = read_view::Meets(addr, len);
  if (g_map_count.load() == 0 && !view) return REAL(munmap)(addr, len);
  auto a = reinterpret_cast<uintptr_t>(addr);
  std::vector<DescRef> drop;
  std::vector<Forgotten> mirrored;
  {
    // Under the lock: a switch to a mirror (MapMirrored) never maps over
    // a range unmapped but still in the table.
    std::lock_guard<std::mutex> g(*g_maps_mu);
    int r = view ? UnmapAroundViewsLocked(a, a + RoundUp(len), &drop) : REAL(munmap)(addr, len);
    if (r != 0) return r;
    ForgetLocked(a, a + RoundUp(len), &drop, &mirrored);
  }
  FinishForget(&mirrored);
  return 0;  // drop closes descriptions no descriptor or map holds any more
}

}  // namespace

void SyncMirroredMaps() {
  if (g_map_count.load() == 0) return;
  std::vector<Forgotten> all;
  {
    std::lock_guard<std::mutex> g(*g_maps_mu);
    for (auto& [s, e] : *g_maps)
      if (e.mirror) all.push_back({e.desc, e.off, e.off + (e.end - s)});
  }
  CoreScope cs;
  for (Forgotten& f : all) (void)f.desc->fsys->SyncMirror(f.desc->file->ino, f.lo, f.hi);
}

std::vector<DescRef> MappedDescs() {
  new (g_maps_mu) std::mutex;  // a thread of the parent may have held it at the fork
  std::vector<DescRef> out;
  for (auto& [s, e] : *g_maps) {
    bool dup = false;
    for (const DescRef& o : out) dup |= o.get() == e.desc.get();
    if (!dup) out.push_back(e.desc);
  }
  return out;
}

void DropMaps() {
  SyncMirroredMaps();  // while the maps still hold their files
  std::map<uintptr_t, MapEntry> all;
  {
    std::lock_guard<std::mutex> g(*g_maps_mu);
    all.swap(*g_maps);
    g_map_count.store(0);
    g_direct_runs = 0;
  }
}

}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

MAPFS_EXPORT void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  void* m;
  bool engine_placed = false;  // a map of a virtualized file: the engine replaces views itself
  if (!(flags & MAP_ANONYMOUS) && (MapfsFd(fd) || OverlayFd(fd))) {
    if (DescRef d = MapfsFd(fd)) {
      m = MapMapfs(d, addr, len, prot, flags, off);
    } else {
      m = OvMap(*OverlayFd(fd), addr, len, prot, flags, off);
      engine_placed = true;
    }
  } else {
    m = REAL(mmap)(addr, len, prot, flags, fd, off);
  }
  // A map placed over maps of virtualized files replaced them: their stores
  // (in the engine's alias, which stays) are written back and the engine
  // forgets them, or it would go on serving faults and protecting pages at
  // addresses that are now another map's. After the kernel succeeded: a
  // refused placement leaves the views as they were.
  if (m != MAP_FAILED && (flags & MAP_FIXED) && !engine_placed && !in_core && OvHasViews() && OvViewsMeet(m, len))
    OvUnmapViews(m, len);
  // A map the program placed over the read view (read_view.h).
  if (m != MAP_FAILED && (flags & MAP_FIXED) && !in_core) LendIfView(m, len);
  return m;
}
MAPFS_EXPORT void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off64_t off) {
  return mmap(addr, len, prot, flags, fd, off);
}
MAPFS_EXPORT int munmap(void* addr, size_t len) {
  if (in_core) return REAL(munmap)(addr, len);
  if (InRegion(addr)) return 0;  // the region belongs to mapfs
  // What the kernel refuses (EINVAL) changes nothing: no view is forgotten.
  if (reinterpret_cast<uintptr_t>(addr) % PageSize() != 0 || len == 0) return REAL(munmap)(addr, len);
  if (OvHasViews()) OvUnmapViews(addr, len);  // stores through maps of virtualized files written back
  return UnmapMapfs(addr, len);
}
MAPFS_EXPORT int msync(void* addr, size_t len, int flags) {
  if (!in_core && InRegion(addr)) return 0;
  if (OvHasViews() && (flags & (MS_SYNC | MS_ASYNC)) && OvSyncViews(addr, len) != 0) return -1;
  if (!in_core && g_map_count.load() != 0 && (flags & (MS_SYNC | MS_ASYNC))) {
    // Stores through a map of the pool are persisted as the core's are
    // (a view map takes none).
    auto a = reinterpret_cast<uintptr_t>(addr);
    bool ours = false;
    std::vector<Forgotten> mirrored;  // stretches of mirror maps in the range
    {
      std::lock_guard<std::mutex> g(*g_maps_mu);
      auto found = FindLocked(a, len);
      ours = found != g_maps->end() && !found->second.view;
      uintptr_t b = a + RoundUp(len);
      auto it = g_maps->upper_bound(a);
      if (it != g_maps->begin()) --it;
      for (; it != g_maps->end() && it->first < b; ++it) {
        uintptr_t lo = std::max(a, it->first), hi = std::min(b, it->second.end);
        if (lo < hi && it->second.mirror)
          mirrored.push_back({it->second.desc, it->second.off + (lo - it->first), it->second.off + (hi - it->first)});
      }
    }
    if (!mirrored.empty()) {
      CoreScope cs;
      for (Forgotten& f : mirrored) {
        Status st = f.desc->fsys->SyncMirror(f.desc->file->ino, f.lo, f.hi);
        if (!st.ok()) return Fail(st);
      }
    } else if (ours) {
      mapfs::medium::Persist(addr, len);
    }
  }
  return REAL(msync)(addr, len, flags);
}
static void* Mremap(void* old, size_t old_len, size_t new_len, int flags, void* fixed) {
  if (!in_core && InRegion(old)) {
    errno = EINVAL;  // the region belongs to mapfs
    return MAP_FAILED;
  }
  if (OvHasViews()) {
    // A map of a virtualized file is the engine's copy (overlay/virtual/
    // vview.h); moving or resizing it is not followed: refused, as the
    // kernel refuses what it cannot do.
    if (OvViewsMeet(old, old_len)) {
      errno = ENOMEM;
      return MAP_FAILED;
    }
  }
  if (in_core) return REAL(mremap)(old, old_len, new_len, flags, fixed);
  if (g_map_count.load() == 0) {
    void* m = REAL(mremap)(old, old_len, new_len, flags, fixed);
    if (m != MAP_FAILED) {
      LendIfView(old, old_len);  // the program moved or resized a piece of the read view
      LendIfView(m, new_len);
    }
    return m;
  }
  auto a = reinterpret_cast<uintptr_t>(old);
  DescRef d;
  uint64_t off = 0;
  int prot = 0;
  {
    std::lock_guard<std::mutex> g(*g_maps_mu);
    auto it = FindLocked(a, old_len);
    if (it != g_maps->end()) {
      d = it->second.desc;
      off = it->second.off + (a - it->first);
      prot = it->second.prot;
    }
  }
  if (!d) {
    void* m = REAL(mremap)(old, old_len, new_len, flags, fixed);
    if (m != MAP_FAILED) {
      LendIfView(old, old_len);
      LendIfView(m, new_len);
    }
    return m;
  }
  // A map of the file: the pages past the old end are the file's, not the
  // pool's next ones, so a larger map is a new map of the file.
  uint64_t o = RoundUp(old_len), n = RoundUp(new_len);
  if (new_len == 0 || (flags & ~(MREMAP_MAYMOVE | MREMAP_FIXED)) || ((flags & MREMAP_FIXED) && !(flags & MREMAP_MAYMOVE)) ||
      a % PageSize() != 0) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  if (n <= o && !(flags & MREMAP_FIXED)) {
    if (n < o && UnmapMapfs(static_cast<char*>(old) + n, o - n) != 0) return MAP_FAILED;
    return old;
  }
  CoreScope cs;
  void* m;
  if (flags & MREMAP_FIXED) {
    m = MapShared(d, fixed, new_len, prot, MAP_FIXED, off);
    if (m != MAP_FAILED) LendIfView(m, new_len);
  } else if (flags & MREMAP_MAYMOVE) {
    m = MapShared(d, nullptr, new_len, prot, 0, off);
  } else {
    // Grow in place or not at all.
    m = MapShared(d, static_cast<char*>(old) + o, n - o, prot, MAP_FIXED_NOREPLACE, off + o);
    if (m == MAP_FAILED) {
      if (errno == EEXIST) errno = ENOMEM;
      return MAP_FAILED;
    }
    return old;
  }
  if (m == MAP_FAILED) return m;
  UnmapMapfs(old, old_len);
  return m;
}
MAPFS_EXPORT void* mremap(void* old, size_t old_len, size_t new_len, int flags, ...) {
  void* fixed = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    fixed = va_arg(ap, void*);
    va_end(ap);
  }
  void* m = Mremap(old, old_len, new_len, flags, fixed);
  // A move onto maps of virtualized files replaced them (as a MAP_FIXED
  // mmap does): written back and forgotten.
  if (m != MAP_FAILED && (flags & MREMAP_FIXED) && !in_core && OvHasViews() && OvViewsMeet(m, new_len))
    OvUnmapViews(m, new_len);
  return m;
}
namespace {
// Whether [addr, addr+len) meets a pool file's shared map through a
// description not open for writing (which stays read-only: EACCES).
bool MeetsReadOnlyPoolMap(void* addr, size_t len) {
  auto a = reinterpret_cast<uintptr_t>(addr), b = a + RoundUp(len);
  std::lock_guard<std::mutex> g(*g_maps_mu);
  auto it = g_maps->upper_bound(a);
  if (it != g_maps->begin()) --it;
  for (; it != g_maps->end() && it->first < b; ++it)
    if (it->second.end > a && (it->second.desc->file->flags & O_ACCMODE) != O_RDWR) return true;
  return false;
}
}  // namespace

MAPFS_EXPORT int mprotect(void* addr, size_t len, int prot) {
  if (!in_core && InRegion(addr)) return 0;  // the region's pages stay as mapfs set them
  if (!in_core && g_map_count.load() != 0 && (prot & PROT_WRITE) && MeetsReadOnlyPoolMap(addr, len))
    return FailErrno(EACCES);
  // A map of a virtualized file (overlay/virtual/vview.h): the engine
  // keeps its clean pages write-protected (dirty tracking).
  if (!in_core && OvHasViews() && OvViewsMeet(addr, len)) return OvProtectViews(addr, len, prot);
  if (!in_core && read_view::Meets(addr, len)) {
    // View maps are read-only already; any other change to the read view
    // makes the range the program's (read_view.h).
    if (prot == PROT_READ && WithinViewMaps(addr, len)) return 0;
    int r = REAL(mprotect)(addr, len, prot);
    if (r == 0) LendIfView(addr, len);
    return r;
  }
  return REAL(mprotect)(addr, len, prot);
}
// pkey_mprotect(2): mprotect with a protection key (-1: none, exactly
// mprotect). The same rules hold: mapfs's region keeps what mapfs set, a
// shared map of a description not open for writing does not become
// writable (a virtualized file's map is of the engine's own memory, which
// the kernel alone would let anyone make writable: the engine refuses),
// and a virtualized file's map keeps its dirty tracking, the key applied
// by the engine with each page's protection.
MAPFS_EXPORT int pkey_mprotect(void* addr, size_t len, int prot, int pkey) {
  if (pkey == -1) return mprotect(addr, len, prot);
  if (!in_core && InRegion(addr)) return 0;  // as mprotect: the region's pages stay as mapfs set them
  if (!in_core && g_map_count.load() != 0 && (prot & PROT_WRITE) && MeetsReadOnlyPoolMap(addr, len))
    return FailErrno(EACCES);
  if (!in_core && OvHasViews() && OvViewsMeet(addr, len)) return OvProtectViews(addr, len, prot, pkey);
  int r = REAL(pkey_mprotect)(addr, len, prot, pkey);
  if (r == 0 && !in_core && read_view::Meets(addr, len)) LendIfView(addr, len);  // the program's now (read_view.h)
  return r;
}

MAPFS_EXPORT int madvise(void* addr, size_t len, int advice) {
  if (!in_core && InRegion(addr)) return 0;  // advice only; never drop a file's pages
  int r = REAL(madvise)(addr, len, advice);
  // Advice about the pages' use changes nothing a view map relies on
  // (MADV_DONTNEED on a shared map drops page-table entries, not data);
  // anything else (MADV_DONTFORK, ...) makes the range the program's.
  bool harmless = advice == MADV_NORMAL || advice == MADV_RANDOM || advice == MADV_SEQUENTIAL ||
                  advice == MADV_WILLNEED || advice == MADV_DONTNEED;
  if (r == 0 && !in_core && !harmless) LendIfView(addr, len);
  return r;
}
