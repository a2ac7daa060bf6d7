// Dirty tracking of shared views (vview.h) by write protection.
//
// A tracked view's application map is mapped without PROT_WRITE where its
// pages are clean (as last written back). The first store into a clean
// page faults; mapfs's SIGSEGV handler (vm/fault.h, a fault server) finds
// the page here, marks it dirty and gives it the application's prot, and
// the store runs again. A write-back then visits only the dirty pages: it
// clears their bits and write-protects them FIRST, then compares them with
// the twin, so a store racing it either is in the compare or faults and
// marks the page again. A view with no dirty page costs one load.
//
// The table the handler reads is a fixed array of slots (kSlots), one per
// tracked map, each with a per-page state byte (the application's prot,
// valid, dirty). The handler takes no lock and allocates nothing:
// - a slot's `gen` is odd while it is assigned or released; the handler
//   reads it, announces itself in the slot's `inflight` counter, reads it
//   again, and only then touches the state array (seq_cst throughout);
// - whoever changes what a handler could act on (release of the slot,
//   forgetting pages before the kernel unmaps them, the application's
//   mprotect) changes the state first and then waits for `inflight` to
//   drain: a handler that read the old state has finished, and every later
//   one reads the new. So the state array is freed only when no handler
//   can hold it, and no handler changes the protection of pages that are
//   no longer a view's.
// - Invariant (outside a write-back between its clear and its compare):
//   a page the application can store to without faulting has its dirty
//   bit set. The handler sets the bit before and after making the page
//   writable; a write-back that finds a handler in flight after its
//   write-protect sets the bit again (the page is compared anyway).
//
// When the table is full, or a map is larger than kMaxPages, Make returns
// nullptr and the view is compared whole at every write-back (the cost
// before dirty tracking), never wrong.
//
// fork(): the child inherits the protections and the table. Its pages are
// given their application prot and the table emptied (a child's stores go
// straight to the shared pages), and every view that existed at the fork
// is compared whole from then on, in parent and child (ForkEpoch), since
// the other process's stores mark nothing here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace mapfs::overlay::vrt {

class Track {
 public:
  static constexpr size_t kSlots = 4096;
  static constexpr size_t kMaxPages = size_t{1} << 20;  // 4 GiB of 4 KiB pages
  // Dirty pages, over every tracked map, past which a fault gives its map
  // up (it becomes writable whole and is compared whole, as an untracked
  // one): each run of dirty pages in a clean map costs the kernel up to two
  // more mappings, and a process has at most vm.max_map_count (65,530).
  // Also when the kernel refuses the split (ENOMEM).
  static constexpr long kMaxDirtyPages = 8192;

  // Tracks the application's map [addr, addr + npages pages), just mapped
  // with `prot` minus PROT_WRITE (every page clean). nullptr when it cannot
  // be tracked (table full, too large, the handler cannot be installed).
  static std::unique_ptr<Track> Make(char* addr, size_t npages, int prot);
  ~Track();  // releases the slot: the handler no longer serves its pages
  Track(const Track&) = delete;
  Track& operator=(const Track&) = delete;

  // Whether some page may be dirty (one load).
  bool AnyDirty() const;
  // Pages [first, last) that are dirty: their bits cleared and write-
  // protected, then returned as runs (first page, count) to compare.
  void TakeDirty(size_t first, size_t last, std::vector<std::pair<size_t, size_t>>* runs);
  // Pages [first, last) are no longer the view's (before the kernel unmaps
  // them): never served again.
  void Forget(size_t first, size_t last);
  // The application's mprotect of pages [first, last): records `prot` and
  // applies it (minus PROT_WRITE on clean pages), with protection key
  // `pkey` unless -1 (pkey_mprotect). 0 or an errno.
  int Protect(size_t first, size_t last, int prot, int pkey = -1);
  // Pages [first, last) that the application may store to: marked dirty
  // and given its prot now, for a store the kernel makes (read(2) into the
  // map: a kernel copy into a write-protected page fails with EFAULT, it
  // does not fault).
  void Unprotect(size_t first, size_t last);
  char* base() const { return base_; }

 private:
  Track(size_t slot, uint64_t id, char* base) : slot_(slot), id_(id), base_(base) {}
  bool Mine() const;
  size_t slot_;
  uint64_t id_;  // the slot's owner while assigned (ids are never reused)
  char* base_;
};

// Counts the forks of this process (pthread_atfork prepare): a view made
// before the last fork is compared whole, and its memory is never reused
// (vview.h, spare aliases). Forks are counted once CountForks (or the first
// tracked map) has run: every view is made after it.
uint64_t ForkEpoch();
void CountForks();
// The forks this process came out of as the child (its ancestors' too),
// counted as ForkEpoch is: it changes only in a child, so state that names
// other threads (which the child does not have) is reset when it moves.
uint64_t ChildEpoch();

// The kernel's mprotect (pkey_mprotect with a key other than -1), not the
// shim's wrapper (which takes locks and routes views back here): async-
// signal-safe. 0 or an errno. mprotect keeps a range's key, so only the
// application's pkey_mprotect passes one.
int RawProtect(void* p, size_t len, int prot, int pkey = -1);

}  // namespace mapfs::overlay::vrt
