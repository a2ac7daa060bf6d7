// Maps of virtualized files (mmap through the shim): copy-on-map views.
// Since 2026-11-28 a writable MAP_SHARED map is a direct map of the file's
// blocks instead (vdirect.h: coherent across processes); the views here
// serve read-only shared and private maps, and writable shared ones when
// MAPFS_VIRTUAL_SHARED_MAPS=copy.
//
// A virtualized file's content is scattered over copy-on-write blocks whose
// mapping any process's commit may change at any moment, and the GC reuses
// superseded blocks: a kernel mapping of the file's blocks could not follow
// a later write, and stores through it could land in another block's data.
// So a map is a copy (docs/OVERLAY.md "mmap of a virtualized file"):
// - MAP_PRIVATE: anonymous private memory filled with the content at map
//   time. That is what POSIX promises for a private map (later changes of
//   the file may or may not show); nothing is written back.
// - MAP_SHARED: a memfd mapped at the application's address with its prot,
//   filled with the content, plus two engine-side maps: `alias` (the same
//   pages, read-write) and `twin` (private: the content as last written
//   back). Write-back compares the alias with the twin, page by page, and
//   writes each page's changed bytes (first to last) through the engine:
//   bytes nobody stored are never written, so writes made meanwhile through
//   write() or by other processes to other bytes survive. A fork child
//   shares the memfd pages, so parent and child see each other's stores.
//   The memfd is filled by the kernel (VFile::CopyOut): the application's
//   map faults in only the pages it touches.
// - MAP_SHARED through a description not open for writing: the same
//   without a twin (nothing can store into it; never compared), and its
//   memory, once unmapped whole, is reused for the next such map (spare
//   aliases, ViewRegistry below).
//
// Dirty tracking (vtrack.h): a writable shared view's application map is
// write-protected where its pages are clean, and the first store into a
// page marks it dirty (mapfs's SIGSEGV handler), so a write-back compares
// only the dirty pages, and a view nobody stored into costs one load. A
// view that cannot be tracked (table full) is compared whole, as is every
// view that existed at a fork (the other process's stores mark nothing).
// Only a file's views beyond its first kUntrackedViews are tracked
// (MAPFS_OVERLAY_TRACK_FROM=N overrides, 0: all): a write-protected page
// costs a fault per page stored to after each write-back, and the kernel's
// own stores into it (recv, or read(2) from inside the C library, which the
// shim does not see) fail with EFAULT. A program with a few maps of a file
// keeps maps that behave as the kernel's and pays a compare of each at a
// write-back; one that piles up maps (fsx maps for every read and never
// unmaps) pays per dirty page, not per map.
// A read-only view is never compared: nothing can store through it (an
// application's mprotect adding PROT_WRITE goes through Protect).
//
// Coherence within the process: a write or truncate through any descriptor
// of the file updates its views (alias and twin), also one racing another
// thread's map or write (ViewList); a read first writes back the views'
// stores in its range. A view's stores written back reach the file, not
// the process's other views of the same bytes. Between processes, a view is a snapshot
// until written back (msync, munmap, fsync of the file, exec, exit).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "overlay/virtual/vfile.h"
#include "overlay/virtual/vtrack.h"

namespace mapfs::overlay::vrt {

// The number of a file's shared views mapped before new ones are tracked.
constexpr size_t kUntrackedViews = 4;

// One shared view. Page-aligned: addr, alias, twin and len are page
// multiples; off is the content offset of addr.
struct View {
  char* addr = nullptr;
  char* alias = nullptr;
  char* twin = nullptr;
  size_t len = 0;
  uint64_t off = 0;
  std::shared_ptr<VFile> f;  // writes back through it (writable: MAP_SHARED+PROT_WRITE needs O_RDWR)
  // Dirty tracking: the map's Track (shared by the pieces a partial unmap
  // leaves) and the index of addr's page in it; or none, and then
  // `writable` says whether the application could ever store (compared
  // whole). `epoch`: ForkEpoch() when made (an older view is compared whole).
  std::shared_ptr<Track> track;
  size_t tpage = 0;
  bool writable = false;
  // Whether the description it was mapped through was open for reading and
  // writing: only then may the application's mprotect add PROT_WRITE (the
  // kernel's rule; the view itself is a map of the engine's own memory,
  // which the kernel would let anyone make writable).
  bool may_write = false;
  uint64_t epoch = 0;
  // Bytes of the view from which alias and twin are known to be all zeros
  // (fresh memory past the content at map time, or a truncate), raised by
  // writes and write-backs: a truncate zeroes only below it. Tracked views
  // only (a store into a clean page marks it dirty; Truncated zeroes
  // everything while a page is dirty). Under the list's lock.
  size_t zero_from = 0;
  ~View();  // unmaps alias and twin (not addr: the application's, unmapped by the kernel)
};

// The shared views of one file in this process.
//
// Coherence with the process's writes (issue 15). Writers commit without a
// lock (vfile.h) and update the views after; a map fills its view from the
// file and then lists it. Two rules make every view end with the file's
// content whatever the interleaving:
// 1. Every update of a view's bytes — Written, Truncated, the refill of
//    AddFilled — runs under mu_ and installs the file's content as it is
//    *then*. It reads the file, except a write that no other write of the
//    process can have overtaken: one that found no other write in flight
//    when it began (Begin) and sees, under mu_, that none began since. Its
//    own bytes are then the file's, and it copies them from its buffer
//    (reading them back costs more than the write: a 4 KiB write with one
//    map, 0.9 us CPU, rose to 1.9 us). A writer is any write, truncate or
//    write-back of views of this process to the file; the GC changes no
//    content. The content only moves forward, so no update installs older
//    bytes than an earlier one did: the last update of a byte after its
//    last commit leaves the file's value.
// 2. A write that commits while a map is being filled either finds the
//    new view listed or the map sees that it must refill: the writer bumps
//    gen_ after its commit and then loads n_; the mapper reads gen_ before
//    its fill, and after it lists the view and stores n_ under mu_, loads
//    gen_ again (all sequentially consistent: Dekker's pattern, so one side
//    sees the other). A writer that saw n_ != 0 takes mu_ and so updates
//    the view after it is listed (or after it is gone); a mapper that saw
//    gen_ move reloads the view under mu_, after the commit.
// Invariant: under mu_, each byte of a listed view that the application
// has not stored into since its last write-back holds, in alias and twin,
// the file's content at some moment after the commit of every write or
// truncate of this process whose update of the views has run; when a
// write or truncate call returns, its range in every view is the file's
// content from a moment after its commit (or newer). Twin before alias:
// a reload writes the twin (never stored into by the application) and
// then copies it to the alias, so an application store racing it is
// either overwritten in the alias or differs from the twin and is written
// back — it never lands in the twin unseen. Alias equals twin on those
// bytes whatever fails, since a write-back writes every byte where they
// differ: a reload reads the file into scratch memory and installs each
// piece only once it is read whole (a failed read installs nothing more),
// and a failed write's reload keeps the stores (Written). Not covered: other processes'
// writes (a view is a snapshot for them, vview.h's header).
class ViewList {
 public:
  ViewList();  // installs the fork handlers (CountForks: Begin after a fork)
  bool empty() const { return n_.load(std::memory_order_acquire) == 0; }
  size_t size() const { return n_.load(std::memory_order_acquire); }
  // Stores through views that fall in the content range [lo, hi) reach the
  // file (a read of that range follows, or a sync).
  Status WriteBack(uint64_t lo, uint64_t hi);
  // The write generation, read by a map before it fills a new view from
  // the file (AddFilled).
  uint64_t Generation() const { return gen_.load(std::memory_order_seq_cst); }
  // Every write and truncate of the process to the file, mapped or not,
  // calls Begin before it commits and then Written or Truncated with the
  // ticket (which ends it), failed ones too.
  struct Ticket {
    uint64_t begun;  // the count of writers begun, this one included
    bool alone;      // no other writer was in flight when it began
  };
  Ticket Begin();
  // After a write of content [off, off+n) of `f` from `buf`: the views
  // show the file's content there (rule 1 above). buf null for a failed
  // one, which may have committed part of it or nothing: the kernel leaves
  // a map's stores alone then, so only the bytes the application has not
  // stored into since the last write-back (alias equal to twin) take the
  // file's content; the others keep the store, written back later — below
  // `size_before`, the content's size before the write. At and past it a
  // store lies past the end (write-back leaves those in the alias, never
  // in the file), which the write's committed bytes replace, as the
  // kernel's write replaces them in its page cache.
  void Written(VFile& f, Ticket t, const void* buf, uint64_t off, uint64_t n, uint64_t size_before = UINT64_MAX);
  // After a truncate of `f` to `size` (or a failed one): views read zeros
  // past the end, and whatever a concurrent write put past `size` since.
  void Truncated(VFile& f, Ticket t, uint64_t size);
  // The application's mprotect of v's bytes [from, to) (page multiples).
  // 0 or an errno.
  int Protect(View& v, size_t from, size_t to, int prot, int pkey = -1);
  // v's bytes [from, to) are about to be stored to by the kernel.
  void Unprotect(View& v, size_t from, size_t to);
  // A new view, filled from its file after Generation() returned `g0`,
  // joins the list; reloaded first if a write or truncate committed since
  // (rule 2). An error (the reload failed) leaves it out of the list.
  Status AddFilled(std::shared_ptr<View> v, uint64_t g0);
  // The unmap of v's bytes [cut_lo, cut_hi) (page multiples), in one step:
  // v is shortened to cut_lo (or leaves the list if 0) and `right`, if not
  // null, the rest from cut_hi, is listed, so that no write meanwhile
  // misses a piece. right's off, len and alias are set by the caller.
  void Cut(View& v, size_t cut_lo, size_t cut_hi, const std::shared_ptr<View>& right);

 private:
  bool HoldsLocked(const View& v) const;
  std::mutex mu_;
  std::vector<std::shared_ptr<View>> views_;
  std::atomic<size_t> n_{0};
  std::atomic<uint64_t> gen_{0};
  // Writers (rule 1): the count begun since the list was made, times
  // kBegun, plus the count in flight (begun, not yet through their update).
  static constexpr uint64_t kBegun = uint64_t{1} << 24;
  std::atomic<uint64_t> writers_{0};
  void End() { writers_.fetch_sub(1, std::memory_order_release); }
  // A fork child inherits the count in flight of the parent's other
  // threads, which never end there: it would never be alone again (every
  // write read back). ChildEpoch() when the count was last cleared of
  // them; kClearing with it while a thread clears it (ForgetParentWriters).
  static constexpr uint64_t kClearing = uint64_t{1} << 63;
  std::atomic<uint64_t> child_epoch_;
  void ForgetParentWriters();
  // Whether a writer that got `t` still has no rival (under mu_).
  bool AloneLocked(Ticket t) const {
    return t.alone && writers_.load(std::memory_order_acquire) / kBegun == t.begun;
  }
};

// Tests only: the reads of the file that reload listed views (Written,
// Truncated; not the fill of a new map) go through `hook` when set, which
// may fail them as a failing medium would. nullptr: the file's Pread.
using ReloadRead = Result<size_t> (*)(VFile& f, void* buf, size_t n, uint64_t off);
void SetReloadReadForTest(ReloadRead hook);

// Every shared view of the engine, by address (munmap and msync name
// addresses, not files).
class ViewRegistry {
 public:
  ViewRegistry() = default;
  ~ViewRegistry();  // returns the spare aliases
  ViewRegistry(const ViewRegistry&) = delete;
  ViewRegistry& operator=(const ViewRegistry&) = delete;
  bool empty() const { return n_.load(std::memory_order_acquire) == 0; }
  // mmap of `f`'s content [off, off+len): see above. `list` is the file's;
  // `may_write`: mapped through a description open O_RDWR (View::may_write).
  Result<void*> Map(const std::shared_ptr<VFile>& f, const std::shared_ptr<ViewList>& list, void* addr,
                    size_t len, int prot, int flags, uint64_t off, bool may_write);
  // Views meeting [addr, addr+len): written back, then forgotten (unmap) or
  // just written back (sync). The kernel unmaps the application's range.
  Status Unmap(void* addr, size_t len);
  Status Sync(void* addr, size_t len);
  // The application's mprotect of [addr, addr+len), which meets views: the
  // views' pages through their lists, the rest as the kernel would. 0 or
  // an errno; EACCES, with nothing changed, when PROT_WRITE is asked of a
  // view whose description was not open for writing (View::may_write).
  int Protect(void* addr, size_t len, int prot, int pkey = -1);
  // The kernel is about to store into [addr, addr+len) (read(2) into a
  // map): its clean pages are made writable (and dirty) first, since a
  // kernel copy into a write-protected page fails with EFAULT.
  void Unprotect(void* addr, size_t len);
  void SyncAll();
  bool Meets(const void* addr, size_t len);

 private:
  struct Entry {
    std::shared_ptr<View> view;
    std::shared_ptr<ViewList> list;
  };
  // A view's part that meets an address range: [a, b), in address order.
  struct Hit {
    Entry e;
    uintptr_t a, b;
  };
  // The views meeting [lo, hi), collected under mu_ (used after it).
  std::vector<Hit> Hits(uintptr_t lo, uintptr_t hi);
  // A new view, filled (after list->Generation() returned g0) and mapped at
  // v->addr, joins its list (ViewList::AddFilled) and the registry;
  // returns its address. On error the application's map is unmapped.
  Result<void*> Register(std::shared_ptr<View> v, const std::shared_ptr<ViewList>& list, uint64_t g0);
  // Spare aliases: the memory of read-only views unmapped whole, kept
  // (pages allocated, engine-side map populated) for the next read-only
  // view of about the same size, which is then filled by one copy with no
  // page allocated, zeroed or faulted and mapped at the application's
  // address with mremap (LevelDB maps and unmaps a table of ~2 MiB at a
  // time). Only views made since the last fork: a fork child shares the
  // pages of every shared view, so a spare from before it could be
  // refilled by both processes at once. Under mu_.
  // A spare is reused only once the application's map of its pages is
  // gone: `app` (its address then) no longer mapped at all — the
  // application's munmap runs after UnmapViews and may fail, and a
  // MAP_FIXED map unmaps views before its own mapping exists — and only in
  // the process that kept it, in the fork epoch of the view it came from.
  struct Spare {
    char* alias;
    size_t len;
    uint64_t epoch;
    pid_t pid;
    char* app;
  };
  char* TakeSpareLocked(size_t len);
  void KeepSpareLocked(const View& v);
  std::vector<Spare> spares_;  // oldest first
  size_t spare_bytes_ = 0;
  std::mutex mu_;
  std::map<uintptr_t, Entry> by_addr_;
  std::atomic<size_t> n_{0};
};

}  // namespace mapfs::overlay::vrt
