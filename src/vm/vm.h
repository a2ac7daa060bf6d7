// Vm: the role of ctFS's kernel part (ctK), in user space on a stock kernel.
//
// A process reserves one virtual region (PROT_NONE, no backing) per open
// pool. Offsets into the region ("virtual offsets") are the only addresses
// the file system stores; the persistent page table (PPT, ppt_format.h)
// maps them to pool pages. The process's real page tables are filled from
// the PPT by mmap(MAP_FIXED|MAP_SHARED) of pool offsets: one mmap per 2 MiB
// chunk that maps to a whole pool chunk, one per run of contiguous pages in
// a chunk that pswap has split.
//
// Mappings are made lazily: either explicitly (Map/Populate, which the file
// system calls on entry) or by the SIGSEGV handler (fault.h) when code
// touches a region address not mapped yet. Every other fault goes to the
// program's own action for the signal, as the kernel would deliver it.
//
// Coherence across processes: every change that makes a mapping stale
// (pswap, Unmap, Discard) is published in a ring in shared memory
// (shared_vm.h). Sync() — one atomic load when nothing changed — drops this
// process's stale mappings; callers run it on entry to the library, after
// taking the lock that protects the range they are about to touch.
//
// Kernel mappings stay bounded: the number of runs mapped for split chunks
// is capped (Options::vma_budget); past it, split chunks are unmapped and
// re-faulted on demand.
//
// Thread safety: all methods are safe to call concurrently; callers exclude
// concurrent access to a range that is being swapped (the file layer's
// per-file locks), exactly as with ctFS's pswap.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "common/units.h"
#include "vm/page_alloc.h"
#include "vm/ppt_format.h"

namespace mapfs::medium {
class Pool;
class Tx;
}

namespace mapfs::vm {

struct VmOptions {
  // Maximum runs mapped for split chunks before they are evicted.
  uint64_t vma_budget = 16384;
  // pswap of at most this many pages, both sides fully populated, swaps the
  // contents by copying through the redo log instead of remapping (keeps the
  // mappings, and so the kernel's page tables and VMAs, untouched).
  // kAuto picks from `mapfs bench pswap` on the reference machine: with
  // 2 MiB pages remapping a few pages splits a huge page and copying wins up
  // to 4 pages; with 4 KiB pages remapping already wins at 1 page.
  static constexpr uint64_t kAuto = UINT64_MAX;
  uint64_t copy_swap_max_pages = kAuto;
};

// Which pages Vm::Populate must zero when it backs them. Free pool pages
// keep their last owner's bytes (PageAllocator: resident medium), so a page
// Populate backs is zeroed, durably and before the entry that backs it, if
// it meets [lo, hi) (virtual offsets); the others keep what they held. A
// caller narrows the range only to pages no reader can see before it
// writes them: past a file's durable end (the file layer's zero on
// extend), or a staging range it overwrites whole.
struct ZeroRange {
  uint64_t lo = 0;
  uint64_t hi = UINT64_MAX;
};

struct VmStats {
  uint64_t used_pages = 0;       // pool pages in use (including metadata)
  uint64_t total_pages = 0;
  uint64_t free_chunks = 0;
  uint64_t mapped_chunks = 0;    // chunks this process has mapped
  uint64_t mapped_runs = 0;      // mmap runs in this process (VMA estimate)
  uint64_t faults = 0;           // SIGSEGV-driven mappings in this process
  uint64_t invalidations = 0;    // ranges dropped because of other processes
};

struct RebuildReport {
  uint64_t referenced_pages = 0;
  uint64_t leaked_reclaimed = 0;
  uint64_t unmarked_fixed = 0;
  uint64_t double_refs = 0;   // pages referenced twice: damage, reported
  uint64_t bad_entries = 0;   // entries pointing outside the pool: cleared
};

class Vm {
 public:
  // Reserves the region, registers the fault handler, and when the pool was
  // not closed cleanly reclaims leaked pages (Rebuild).
  static Result<std::unique_ptr<Vm>> Open(medium::Pool* pool, const VmOptions& opt = {});
  ~Vm();
  Vm(const Vm&) = delete;
  Vm& operator=(const Vm&) = delete;

  char* base() const { return base_; }
  uint64_t size() const { return size_; }
  char* at(uint64_t voff) const { return base_ + voff; }
  bool Contains(const void* p) const {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base_);
    return a >= b && a - b < size_;
  }
  medium::Pool* pool() const { return pool_; }
  PageAllocator& pages() { return pages_; }

  // Backs every page of [voff, voff+len) with pool pages (allocating whole
  // chunks where nothing is mapped yet) and maps them in this process;
  // fresh pages are zeroed where they meet `zero` (see ZeroRange), and the
  // pool view's pages of a fresh chunk are populated in one call the first
  // time this process uses the chunk (not by a fault per page).
  // map_here = false: back the pages only, for callers that reach them
  // through the pool view (PoolRun) and never through the region; a chunk
  // whose pages were replaced one by one (ReplacePages) then stays
  // unmapped here instead of costing a mapping per run.
  Status Populate(uint64_t voff, uint64_t len, ZeroRange zero = {}, bool map_here = true);
  // True when every page of [voff, voff+len) is backed (no lock taken).
  bool Backed(uint64_t voff, uint64_t len);
  // True when touching [voff, voff+len) through the region can neither
  // fault into Populate (allocating pages) nor reach no pool page: the
  // range lies in one chunk this process mapped whole from a PPT leaf
  // (a process-local flag, O(1)), or else every page is Backed. The flag is
  // cleared before such a mapping is dropped or remapped, and other
  // processes' changes drop it at Sync(), so an unbacked page never passes
  // for one: a damaged reference to it is still refused, never touched.
  // For readers that validate a reference before following it (the
  // directory layer's Plausible).
  bool Readable(uint64_t voff, uint64_t len) {
    if (len != 0 && voff < size_ && len <= size_ - voff && voff / kChunkSize == (voff + len - 1) / kChunkSize) {
      const std::atomic<uint16_t>* arr = chunk_dir_[voff / kGiBytes].load(std::memory_order_acquire);
      if (arr != nullptr &&
          (arr[(voff / kChunkSize) % (kGiBytes / kChunkSize)].load(std::memory_order_acquire) & kWholeLeaf) != 0)
        return true;
    }
    return Backed(voff, len);
  }
  // Maps in this process whatever of [voff, voff+len) the PPT maps; pages
  // with no backing stay inaccessible (a touch faults and populates them).
  Status Map(uint64_t voff, uint64_t len);
  // Frees the pool pages behind [voff, voff+len) (page aligned).
  Status Unmap(uint64_t voff, uint64_t len);
  // Makes [voff, voff+len) read as zero: backed bytes are zeroed in place
  // (non-temporal stores, durable on return), unbacked pages already read
  // as zero; nothing is freed or unmapped.
  Status Discard(uint64_t voff, uint64_t len);
  // ctFS pswap: atomically swaps the mappings of [a, a+n pages) and
  // [b, b+n pages). Both page aligned, inside the region, not overlapping.
  // Where a and b are swap-aligned, whole 2 MiB / 1 GiB runs are swapped as
  // single PMD / PUD entries. Durable on return; a crash leaves either the
  // old or the new mappings. The stores in `with` (if any) commit in the
  // same redo transaction: the file layer publishes a file's new partition
  // or size atomically with the swap. keep_pages: the pool pages must move
  // with the mappings (memory maps of the pool file hold them), so small
  // swaps are never done by exchanging the pages' contents.
  Status Pswap(uint64_t a, uint64_t b, uint64_t npages, const medium::Tx* with = nullptr, bool keep_pages = false);
  // ctFS's write-and-swap for strict writes: makes the pages of
  // [voff, voff + npages pages) be `fresh` (pool pages the caller
  // allocated, filled and made durable, with their bitmap bits) and frees
  // the pages they replace. One page and no `with`: a single 8-byte entry
  // store publishes it; otherwise the entries commit in one redo
  // transaction together with the stores in `with`. Every page of the range
  // must be backed (ENOENT otherwise; nothing changes). Chunks mapped as one
  // leaf are split into page tables first. This process's mappings of the
  // range are dropped (the data path reads through the pool view), other
  // processes are told through the invalidation ring.
  Status ReplacePages(uint64_t voff, const uint64_t* fresh, uint64_t npages, const medium::Tx* with);
  // Drops mappings other processes have made stale. Cheap when none did.
  void Sync();
  // Drops this process's mappings of [voff, voff+len) (whole chunks); the
  // pool is untouched and the next access maps them again. Releases the
  // kernel's page tables for data that will not be touched for a while.
  void DropMappings(uint64_t voff, uint64_t len) { InvalidateLocal(voff, len); }

  // The pool-view address of `voff` and, in *run, how many bytes from it
  // (at most `len`) lie in pool pages contiguous with it; nullptr when
  // `voff` is not backed. The file layer copies data through the pool view:
  // its page-table entries stay for the life of the process (pool pages
  // are resident and the view is never remapped), while the region's are
  // rebuilt whenever a range is remapped (a new file, growth by pswap). The
  // caller must keep the range from being swapped or unmapped meanwhile
  // (the file's lock).
  char* PoolRun(uint64_t voff, uint64_t len, uint64_t* run);
  // Pool offset backing virtual offset `voff`, or ENOENT.
  Result<uint64_t> Translate(uint64_t voff) const;
  // Pool-view pointer to the byte at `voff` (must be backed).
  char* PoolPtr(uint64_t voff) const;

  VmStats Stats() const;
  // Walks the PPT and makes the page bitmap match what it references.
  RebuildReport Rebuild();
  // Walks the PPT and checks it against the bitmap without changing
  // anything; `strict` also requires every used page to be referenced
  // (true only when nothing else runs).
  Status Check(bool strict) const;

  // Fault handler entry (fault.cc): maps `addr` if it is ours.
  bool HandleFault(void* addr);

  // In the child of fork(), after the pool took its own mount
  // (Pool::AfterFork): takes the new mount token (changes the parent makes
  // from now on are another mount's, to be synced), re-creates the locks a
  // thread of the parent may have held, and drops this process's mappings
  // if a thread of the parent was changing them at the fork (the copies
  // may be stale). Only the calling thread may exist.
  void AfterFork();

  // Test hook: lets tests bound VMAs tightly.
  void set_vma_budget(uint64_t b) { opt_.vma_budget = b; }
  void set_copy_swap_max_pages(uint64_t n) { opt_.copy_swap_max_pages = n; }

 private:
  Vm(medium::Pool* pool, const VmOptions& opt);
  Status Reserve();

  // PPT access (pool view). Slot() returns the entry for `voff` at `level`,
  // creating missing tables above it when `create`; nullptr if absent.
  uint64_t* Slot(uint64_t voff, int level, bool create, Status* err);
  Status SplitLeaf(uint64_t* pmd);
  Status PswapRemap(uint64_t a, uint64_t b, uint64_t npages, const medium::Tx* with);
  Status PswapCopy(uint64_t a, uint64_t b, uint64_t npages, const medium::Tx* with, bool* done);
  // Takes the pool view's page faults for the chunk at `pool_off` in one
  // call the first time this process backs something with it (one bit per
  // chunk; a stale bit after a trim only costs faults).
  // False when the medium cannot back the chunk (a full tmpfs): a store
  // to it would raise SIGBUS.
  bool PopulateView(uint64_t pool_off);

  // Process mappings. chunk_state(c) = number of runs mapped (0 = none),
  // ORed with kWholeLeaf while the chunk is mapped as one run from a PPT
  // leaf (all its pages backed). Runs() strips the flag.
  static constexpr uint16_t kWholeLeaf = 0x8000;
  static constexpr uint64_t kGiBytes = uint64_t{1} << 30;
  static uint16_t Runs(uint16_t state) { return state & static_cast<uint16_t>(~kWholeLeaf); }
  std::atomic<uint16_t>& ChunkState(uint64_t chunk);
  // Clears kWholeLeaf of the chunks of [voff, voff+len) (chunk aligned);
  // needs map_mu_. Done before their mappings change, so Readable never
  // answers from a mapping that is going away.
  void ClearWhole(uint64_t voff, uint64_t len);
  // Maps what the PPT maps in `chunk`; false if an entry was damaged
  // (EntryValid), which stays unmapped. Needs map_mu_.
  bool MapChunk(uint64_t chunk);
  // A present entry of `level` must point into the data area, aligned to
  // what it maps (a table page, a 2 MiB chunk or a page) and wholly inside
  // the pool: damage must never send a mapping, a table walk or a free
  // elsewhere. Inline: every step of every PPT walk (Translate) checks it.
  bool EntryValid(uint64_t e, int level) const {
    const bool leaf = ppt::IsLeaf(e);
    if (leaf ? level > 1 : level < 1) return false;
    const uint64_t span = leaf ? ppt::Reach(level) : kPageSize;
    const uint64_t t = ppt::Target(e);
    return t >= meta_end_ && t <= pages_end_ && span <= pages_end_ - t && IsAligned(t, span);
  }
  Status Damaged(uint64_t voff) const;
  void InvalidateLocal(uint64_t voff, uint64_t len);  // takes map_mu_
  void DropLocal(uint64_t voff, uint64_t len);        // needs map_mu_; chunk aligned
  void RemapLocal(uint64_t voff, uint64_t len);       // needs map_mu_; within mapped chunks
  void InvalidateAllLocal();
  void Publish(uint64_t voff, uint64_t len);   // needs the PPT lock
  // Needs map_mu_. Evicts split chunks other than `keep` (the one a caller
  // is mapping right now) when over budget.
  void EnforceBudget(uint64_t keep = UINT64_MAX);

  medium::Pool* pool_;
  VmOptions opt_;
  PageAllocator pages_;
  char* base_ = nullptr;
  uint64_t size_ = 0;
  char* reserve_ = nullptr;
  uint64_t reserve_len_ = 0;
  uint64_t token_;
  // Pool header fields every PPT walk needs, fixed at mkfs and checked when
  // the pool was opened: read once here, not from the header on each step.
  const uint64_t ppt_root_off_;
  const uint64_t meta_end_;
  const uint64_t pages_end_;

  std::mutex map_mu_;   // serialises reading the PPT + mmap against invalidation
  std::mutex sync_mu_;
  std::vector<std::atomic<std::atomic<uint16_t>*>> chunk_dir_;  // per GiB, lazily
  std::atomic<uint16_t> overflow_state_{0};  // stands in when memory is short
  std::unique_ptr<std::atomic<uint64_t>[]> view_done_;  // PopulateView, a bit per pool chunk
  uint64_t view_words_ = 0;
  std::atomic<uint64_t> mapped_chunks_{0};
  std::atomic<uint64_t> mapped_runs_{0};
  std::atomic<uint64_t> faults_{0};
  std::atomic<uint64_t> invalidations_{0};
  std::atomic<uint64_t> seen_seq_{0};
  // Calls between publishing a mapping change (Publish) and updating this
  // process's own mappings to match; a child forked meanwhile cannot trust
  // its copies of them (AfterFork).
  std::atomic<uint32_t> changing_{0};
  struct Changing {
    explicit Changing(std::atomic<uint32_t>* c) : c_(c) { c_->fetch_add(1); }
    ~Changing() { c_->fetch_sub(1); }
    std::atomic<uint32_t>* c_;
  };
};

}  // namespace mapfs::vm
