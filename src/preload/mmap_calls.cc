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
      MapEntry p{to, e.desc, e.off + (from - s), e.prot, e.mirror, std::min<uint64_t>(e.runs, (to - from) / PageSize())};
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

int UnmapMapfs(void* addr, size_t len) {
  if (g_map_count.load() == 0) return REAL(munmap)(addr, len);
  auto a = reinterpret_cast<uintptr_t>(addr);
  std::vector<DescRef> drop;
  std::vector<Forgotten> mirrored;
  {
    // Under the lock: a switch to a mirror (MapMirrored) never maps over
    // a range unmapped but still in the table.
    std::lock_guard<std::mutex> g(*g_maps_mu);
    int r = REAL(munmap)(addr, len);
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
  if (!(flags & MAP_ANONYMOUS)) {
    if (DescRef d = MapfsFd(fd)) return MapMapfs(d, addr, len, prot, flags, off);
    if (OvRef o = OverlayFd(fd)) return OvMap(*o, addr, len, prot, flags, off);
  }
  return REAL(mmap)(addr, len, prot, flags, fd, off);
}
MAPFS_EXPORT void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off64_t off) {
  return mmap(addr, len, prot, flags, fd, off);
}
MAPFS_EXPORT int munmap(void* addr, size_t len) {
  if (in_core) return REAL(munmap)(addr, len);
  if (InRegion(addr)) return 0;  // the region belongs to mapfs
  if (OvHasViews()) OvUnmapViews(addr, len);  // stores through maps of virtualized files written back
  return UnmapMapfs(addr, len);
}
MAPFS_EXPORT int msync(void* addr, size_t len, int flags) {
  if (!in_core && InRegion(addr)) return 0;
  if (OvHasViews() && (flags & (MS_SYNC | MS_ASYNC)) && OvSyncViews(addr, len) != 0) return -1;
  if (!in_core && g_map_count.load() != 0 && (flags & (MS_SYNC | MS_ASYNC))) {
    // Stores through a map of the pool are persisted as the core's are.
    auto a = reinterpret_cast<uintptr_t>(addr);
    bool ours = false;
    std::vector<Forgotten> mirrored;  // stretches of mirror maps in the range
    {
      std::lock_guard<std::mutex> g(*g_maps_mu);
      ours = FindLocked(a, len) != g_maps->end();
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
MAPFS_EXPORT void* mremap(void* old, size_t old_len, size_t new_len, int flags, ...) {
  void* fixed = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    fixed = va_arg(ap, void*);
    va_end(ap);
  }
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
  if (in_core || g_map_count.load() == 0) return REAL(mremap)(old, old_len, new_len, flags, fixed);
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
  if (!d) return REAL(mremap)(old, old_len, new_len, flags, fixed);
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
MAPFS_EXPORT int mprotect(void* addr, size_t len, int prot) {
  if (!in_core && InRegion(addr)) return 0;  // the region's pages stay as mapfs set them
  if (!in_core && g_map_count.load() != 0 && (prot & PROT_WRITE)) {
    // A shared map of a description not open for writing stays read-only.
    auto a = reinterpret_cast<uintptr_t>(addr), b = a + RoundUp(len);
    std::lock_guard<std::mutex> g(*g_maps_mu);
    auto it = g_maps->upper_bound(a);
    if (it != g_maps->begin()) --it;
    for (; it != g_maps->end() && it->first < b; ++it)
      if (it->second.end > a && (it->second.desc->file->flags & O_ACCMODE) != O_RDWR) return FailErrno(EACCES);
  }
  return REAL(mprotect)(addr, len, prot);
}
MAPFS_EXPORT int madvise(void* addr, size_t len, int advice) {
  if (!in_core && InRegion(addr)) return 0;  // advice only; never drop a file's pages
  return REAL(madvise)(addr, len, advice);
}
