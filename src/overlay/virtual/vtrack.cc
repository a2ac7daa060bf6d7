// Dirty tracking of shared views by write protection (vtrack.h).
#include "overlay/virtual/vtrack.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <new>

#include "common/raw_syscall.h"
#include "vm/fault.h"

namespace mapfs::overlay::vrt {

int RawProtect(void* p, size_t len, int prot, int pkey) {
  long r = pkey == -1 ? RawSyscall(SYS_mprotect, reinterpret_cast<long>(p), static_cast<long>(len), prot)
                       : RawSyscall(SYS_pkey_mprotect, reinterpret_cast<long>(p), static_cast<long>(len), prot, pkey);
  return r == 0 ? 0 : errno;
}

namespace {

// The page state byte: the application's prot (PROT_READ | PROT_WRITE |
// PROT_EXEC), whether the page is a live page of the view, and dirty.
constexpr uint8_t kProt = PROT_READ | PROT_WRITE | PROT_EXEC;
constexpr uint8_t kValid = 0x10;
constexpr uint8_t kDirty = 0x20;

size_t Page() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

struct Slot {
  std::atomic<uint32_t> gen{0};       // odd while assigned or released
  std::atomic<uint32_t> inflight{0};  // handlers between their two reads of gen and their end
  std::atomic<std::atomic<uint8_t>*> pages{nullptr};
  std::atomic<size_t> npages{0};
  std::atomic<long> ndirty{0};  // at least the dirty bits set (Mark)
  std::atomic<uint64_t> owner{0};
  // Given up (Saturate): every page has the application's prot and stays
  // dirty, so the view is compared whole, as an untracked one.
  std::atomic<bool> whole{false};
  // This slot's share of dirty_total (the dirty bits it set while not
  // whole, less those cleared since); discharged whole at Saturate and at
  // release, so dirty_total is always the sum of the slots' shares.
  std::atomic<long> charged{0};
};
// The handler scans bounds (dense: one cache line per four slots), then
// validates in the slot. Both never freed; slots are reused.
struct Bounds {
  std::atomic<uintptr_t> lo{0}, hi{0};
};
Slot slots[Track::kSlots];
Bounds bounds[Track::kSlots];
std::atomic<size_t> used{0};  // slots [0, used) have been assigned at some time

// Assignment and release (normal code): the free slots below `used`.
std::mutex mu;
size_t free_slots[Track::kSlots];
size_t nfree = 0;
uint64_t next_id = 1;
std::atomic<uint64_t> fork_epoch{0};
// The forks this process came out of as the child (ChildEpoch).
std::atomic<uint64_t> child_epoch{0};

// Dirty bits set over every slot. Each run of dirty pages inside a clean
// (write-protected) map costs the kernel up to two more mappings (VMAs),
// and a process has at most vm.max_map_count of them (65,530 by default):
// past kMaxDirtyPages, a fault gives its view up (Saturate) instead of
// splitting it further, so tracking never exhausts the process's mappings
// (malloc, thread stacks and the program's own mmaps need them too).
constexpr long kMaxDirtyPages = Track::kMaxDirtyPages;
std::atomic<long> dirty_total{0};

void Charge(Slot& s) {
  if (s.whole.load()) return;  // a given-up view splits nothing
  s.charged.fetch_add(1);
  dirty_total.fetch_add(1);
}
void Discharge(Slot& s) {
  long c = s.charged.load();
  while (c > 0 && !s.charged.compare_exchange_weak(c, c - 1)) {
  }
  if (c > 0) dirty_total.fetch_sub(1);
}
void DischargeAll(Slot& s) { dirty_total.fetch_sub(s.charged.exchange(0)); }

// Sets p's dirty bit if p is a live page (a page forgotten meanwhile stays
// 0: a write-back must never protect an address that may be another map's
// by then).
//
// ndirty is counted up before the bit is set (and TakeDirty and Forget
// count down only after they clear one), so it is never below the number
// of bits set: AnyDirty never answers "clean" while a page is dirty. When
// the count followed the bit, a handler preempted between the two while a
// write-back cleared its page left the count one short for an instant, and
// a read on a third thread, finding the count 0, skipped the write-back of
// its own store (VirtualView.StoresRacingReadsOfOtherThreadsAreNeverLost,
// about 1 run in 600 under load).
void Mark(Slot& s, std::atomic<uint8_t>* st, size_t p) {
  uint8_t b = st[p].load();
  if (!(b & kValid) || (b & kDirty)) return;
  s.ndirty.fetch_add(1);
  while ((b & kValid) && !(b & kDirty))
    if (st[p].compare_exchange_weak(b, static_cast<uint8_t>(b | kDirty))) {
      Charge(s);
      return;
    }
  s.ndirty.fetch_sub(1);  // set by another meanwhile, or forgotten
}

void WaitHandlers(Slot& s) {
  while (s.inflight.load() != 0) CpuRelax();
}

// Gives the view of slot s up (from the handler, or when a protect fails):
// every live page is marked dirty and given the application's prot, run by
// run (one mprotect per run of one prot, which merges the mappings the
// tracking split rather than splitting more). From then on the slot stays
// `whole`: write-backs compare every page and protect nothing. Returns
// whether page p now has its prot. Async-signal-safe.
bool Saturate(Slot& s, std::atomic<uint8_t>* st, uintptr_t lo, size_t np, size_t p) {
  s.whole.store(true);
  DischargeAll(s);
  for (size_t i = 0; i < np; i++) Mark(s, st, i);
  bool ok = false;
  size_t i = 0;
  while (i < np) {
    uint8_t b = st[i].load() & (kValid | kProt);
    size_t j = i + 1;
    while (j < np && (st[j].load() & (kValid | kProt)) == b) j++;
    if ((b & kValid) && RawProtect(reinterpret_cast<void*>(lo + i * Page()), (j - i) * Page(), b & kProt) == 0 &&
        p >= i && p < j)
      ok = true;
    i = j;
  }
  return ok;
}

// The fault server (vm/fault.h): a store into a clean page of a tracked
// view. Async-signal-safe: atomics and one system call.
bool ServeViewFault(void* addr) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const size_t n = used.load();
  for (size_t i = 0; i < n; i++) {
    if (a < bounds[i].lo.load() || a >= bounds[i].hi.load()) continue;
    Slot& s = slots[i];
    uint32_t g = s.gen.load();
    if (g & 1) continue;
    s.inflight.fetch_add(1);
    bool served = false;
    uintptr_t lo = bounds[i].lo.load();
    if (s.gen.load() == g && a >= lo && a < bounds[i].hi.load()) {
      // The slot is what it was at the first read, and stays so until
      // inflight drops (a release waits for it).
      std::atomic<uint8_t>* st = s.pages.load();
      size_t p = (a - lo) / Page();
      uint8_t b = st != nullptr && p < s.npages.load() ? st[p].load() : 0;
      if ((b & kValid) && (b & PROT_WRITE)) {
        Mark(s, st, p);
        // Past the budget, or when the kernel refuses the split (ENOMEM:
        // the process's mappings are exhausted), the view is given up:
        // protecting it whole merges its mappings.
        if (s.whole.load() || dirty_total.load() > kMaxDirtyPages) {
          served = Saturate(s, st, lo, s.npages.load(), p);
        } else if (RawProtect(reinterpret_cast<void*>(lo + p * Page()), Page(), b & kProt) == 0) {
          Mark(s, st, p);  // again: a write-back may have cleared it meanwhile
          served = true;
        } else {
          served = Saturate(s, st, lo, s.npages.load(), p);
        }
      }
    }
    s.inflight.fetch_sub(1);
    // A slot whose page is not live (a map forgotten and its address
    // reused) does not answer for the address: another slot may.
    if (served) return true;
  }
  return false;
}

void AtforkPrepare() { fork_epoch.fetch_add(1); }

// In the child (one thread): its pages get their application prot, so its
// stores go straight to the shared pages (the parent compares those views
// whole), and the table is emptied. The state arrays are left to their
// Tracks (whose owner no longer matches: they do nothing).
void AtforkChild() {
  child_epoch.fetch_add(1);
  const size_t n = used.load();
  for (size_t i = 0; i < n; i++) {
    Slot& s = slots[i];
    std::atomic<uint8_t>* st = s.pages.load();
    uintptr_t lo = bounds[i].lo.load();
    if (s.owner.load() != 0 && st != nullptr && lo != 0 && !(s.gen.load() & 1)) {
      size_t np = s.npages.load(), p = 0;
      while (p < np) {
        uint8_t b = st[p].load() & (kValid | kProt);
        size_t q = p + 1;
        while (q < np && (st[q].load() & (kValid | kProt)) == b) q++;
        if ((b & kValid) && (b & PROT_WRITE))
          (void)RawProtect(reinterpret_cast<void*>(lo + p * Page()), (q - p) * Page(), b & kProt);
        p = q;
      }
    }
    bounds[i].lo.store(0);
    bounds[i].hi.store(0);
    s.pages.store(nullptr);
    s.npages.store(0);
    s.ndirty.store(0);
    s.owner.store(0);
    s.whole.store(false);
    s.charged.store(0);
    s.inflight.store(0);
    s.gen.store(0);
  }
  used.store(0);
  dirty_total.store(0);
  nfree = 0;
  new (&mu) std::mutex;  // a thread of the parent may have held it at the fork
}

void ForkHandlersOnce() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(AtforkPrepare, nullptr, AtforkChild); });
}

// Installs the fault server and the fork handlers once. false if the
// handler cannot be installed.
bool Setup() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    (void)Page();  // its static is set here, never first in the handler
    ok = vm::RegisterFaultServer(&ServeViewFault).ok();
  });
  if (ok) ForkHandlersOnce();
  return ok;
}

}  // namespace

void CountForks() { ForkHandlersOnce(); }

uint64_t ForkEpoch() { return fork_epoch.load(std::memory_order_acquire); }

uint64_t ChildEpoch() { return child_epoch.load(std::memory_order_acquire); }

std::unique_ptr<Track> Track::Make(char* addr, size_t npages, int prot) {
  if (npages == 0 || npages > kMaxPages || !Setup()) return nullptr;
  auto* st = new (std::nothrow) std::atomic<uint8_t>[npages];
  if (st == nullptr) return nullptr;
  for (size_t p = 0; p < npages; p++) st[p].store(static_cast<uint8_t>((prot & kProt) | kValid));
  std::lock_guard<std::mutex> g(mu);
  size_t i;
  if (nfree > 0) {
    i = free_slots[--nfree];
  } else if (used.load() < kSlots) {
    i = used.load();
  } else {
    delete[] st;
    return nullptr;
  }
  Slot& s = slots[i];
  uint64_t id = next_id++;
  s.gen.fetch_add(1);  // odd: no handler acts on the slot while it changes
  s.pages.store(st);
  s.npages.store(npages);
  s.ndirty.store(0);
  s.whole.store(false);
  s.charged.store(0);
  s.owner.store(id);
  bounds[i].lo.store(reinterpret_cast<uintptr_t>(addr));
  bounds[i].hi.store(reinterpret_cast<uintptr_t>(addr) + npages * Page());
  s.gen.fetch_add(1);
  if (i == used.load()) used.store(i + 1);
  return std::unique_ptr<Track>(new Track(i, id, addr));
}

bool Track::Mine() const { return slots[slot_].owner.load() == id_; }

Track::~Track() {
  std::atomic<uint8_t>* st = nullptr;
  {
    std::lock_guard<std::mutex> g(mu);
    if (!Mine()) return;  // emptied by a fork (this is the child): the array is leaked
    Slot& s = slots[slot_];
    s.gen.fetch_add(1);
    bounds[slot_].lo.store(0);
    bounds[slot_].hi.store(0);
    WaitHandlers(s);  // none holds the array after this
    st = s.pages.exchange(nullptr);
    s.npages.store(0);
    s.ndirty.store(0);
    DischargeAll(s);
    s.owner.store(0);
    s.gen.fetch_add(1);
    free_slots[nfree++] = slot_;
  }
  delete[] st;
}

bool Track::AnyDirty() const { return slots[slot_].ndirty.load() != 0; }

void Track::TakeDirty(size_t first, size_t last, std::vector<std::pair<size_t, size_t>>* runs) {
  if (!Mine()) return;
  Slot& s = slots[slot_];
  std::atomic<uint8_t>* st = s.pages.load();
  last = std::min(last, s.npages.load());
  size_t p = first;
  if (s.whole.load()) {  // given up: every live page is compared, none protected
    while (p < last) {
      size_t q = p;
      while (q < last && (st[q].load() & kValid)) q++;
      if (q > p) runs->emplace_back(p, q - p);
      p = q + 1;
    }
    return;
  }
  while (p < last) {
    uint8_t b = st[p].load();
    if ((b & (kDirty | kValid)) != (kDirty | kValid)) {
      p++;
      continue;
    }
    // A run of dirty pages with one prot: one mprotect.
    size_t q = p + 1;
    const uint8_t key = kDirty | kValid | kProt;
    while (q < last && (st[q].load() & key) == (b & key)) q++;
    for (size_t i = p; i < q; i++)
      if (st[i].fetch_and(static_cast<uint8_t>(~kDirty)) & kDirty) {
        s.ndirty.fetch_sub(1);
        Discharge(s);
      }
    int e = RawProtect(base_ + p * Page(), (q - p) * Page(), (b & kProt) & ~PROT_WRITE);
    // A handler in flight may have made a page writable after the
    // protect (or the protect failed: the pages stay writable): they stay
    // dirty, so the next write-back compares them again.
    if (e != 0 || s.inflight.load() != 0)
      for (size_t i = p; i < q; i++) Mark(s, st, i);
    runs->emplace_back(p, q - p);
    p = q;
  }
}

void Track::Forget(size_t first, size_t last) {
  if (!Mine()) return;
  Slot& s = slots[slot_];
  std::atomic<uint8_t>* st = s.pages.load();
  last = std::min(last, s.npages.load());
  for (size_t p = first; p < last; p++)
    if (st[p].exchange(0) & kDirty) {
      s.ndirty.fetch_sub(1);
      Discharge(s);
    }
  WaitHandlers(s);
}

void Track::Unprotect(size_t first, size_t last) {
  if (!Mine()) return;
  Slot& s = slots[slot_];
  std::atomic<uint8_t>* st = s.pages.load();
  last = std::min(last, s.npages.load());
  size_t p = first;
  while (p < last) {
    uint8_t b = st[p].load();
    size_t q = p + 1;
    while (q < last && (st[q].load() & (kValid | kProt)) == (b & (kValid | kProt))) q++;
    if ((b & kValid) && (b & PROT_WRITE)) {
      for (size_t i = p; i < q; i++) Mark(s, st, i);  // before the pages turn writable (the invariant)
      (void)RawProtect(base_ + p * Page(), (q - p) * Page(), b & kProt);
    }
    p = q;
  }
}

int Track::Protect(size_t first, size_t last, int prot, int pkey) {
  if (!Mine()) return RawProtect(base_ + first * Page(), (last - first) * Page(), prot, pkey);
  Slot& s = slots[slot_];
  std::atomic<uint8_t>* st = s.pages.load();
  last = std::min(last, s.npages.load());
  for (size_t p = first; p < last; p++) {
    uint8_t b = st[p].load();
    while (!st[p].compare_exchange_weak(b, static_cast<uint8_t>((b & ~kProt) | (prot & kProt)))) {
    }
  }
  WaitHandlers(s);  // a handler that read the old prot has applied it: ours comes after
  int first_err = 0;
  size_t p = first;
  const bool whole = s.whole.load();
  while (p < last) {
    bool dirty = whole || (st[p].load() & kDirty);
    size_t q = p + 1;
    while (q < last && (whole || static_cast<bool>(st[q].load() & kDirty) == dirty)) q++;
    int e = RawProtect(base_ + p * Page(), (q - p) * Page(), dirty ? prot : prot & ~PROT_WRITE, pkey);
    if (first_err == 0) first_err = e;
    p = q;
  }
  return first_err;
}

}  // namespace mapfs::overlay::vrt
