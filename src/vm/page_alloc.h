// PageAllocator: the physical allocator over the pool's pages.
//
// State is the persistent page bitmap (1 bit per 4 KiB pool page, 1 = in use).
// Chunks are 2 MiB-aligned runs of 512 pages, handed out whole for data; single
// pages serve PPT tables and the holes of split chunks.
//
// Invariants:
//  * A page's bit is set and durable before any PPT entry refers to it, and is
//    cleared only after no durable entry refers to it. A crash can therefore
//    only leak pages (bit set, unreferenced), never hand out a page in use;
//    Vm::Rebuild reclaims leaks after a crash.
//  * The medium is resident: a freed page keeps its memory and its bytes
//    (no hole punch, no zeroing on free), so reusing it costs no kernel
//    allocation, zeroing or fault. Allocated pages therefore hold whatever
//    their last owner left; whoever makes them readable zeroes what a reader
//    could see (Vm::Populate zeroes fresh pages before the entry that backs
//    them is durable; PPT tables are zeroed before they are linked). Only
//    Trim() gives free pages back to the kernel, in bulk, on request.
//
// Lock-free: bits are claimed with atomic RMW on the bitmap words, so threads
// and processes allocate concurrently without a lock.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace mapfs::medium {
class Pool;
}

namespace mapfs::vm {

class PageAllocator {
 public:
  explicit PageAllocator(medium::Pool* pool);

  // A free 2 MiB-aligned chunk; ENOSPC when none is left.
  Result<uint64_t> AllocChunk();
  // A free 4 KiB page; prefers pages in partly used chunks. durable =
  // false: its bit is written back but not fenced; the caller fences before
  // any entry that names the page can be durable.
  Result<uint64_t> AllocPage(bool durable = true);
  // n free pages (pool offsets into out[0..n)), claimed a bitmap word at a
  // time, lowest free pages first, so most come in contiguous runs.
  // ENOSPC (nothing claimed) when fewer are free. `durable` as AllocPage.
  Status AllocPages(uint64_t n, uint64_t* out, bool durable = true);
  // Frees [off, off + npages pages); their bytes stay (resident medium).
  // durable = false: the bits are not even written back now (the pool
  // writes the lines back later, Pool::DeferWriteBack); a crash before that
  // only leaks the pages to Vm::Rebuild.
  void FreePages(uint64_t off, uint64_t npages, bool durable = true);
  // Makes the pages read as zero without freeing them (non-temporal
  // stores, fenced: durable on return).
  void Discard(uint64_t off, uint64_t len);
  // Zeroes the page at `off` (freshly allocated, not yet referenced by any
  // durable entry) durably, so it can serve as an empty table.
  void ZeroFresh(uint64_t off, uint64_t len);
  // Gives the memory of every free page back to the kernel (hole punch of
  // the pool file), so an idle pool costs only what it holds. Free pages
  // are claimed while they are punched, so concurrent allocators never get
  // one mid-punch (but may find the pool fuller than it is, up to ENOSPC,
  // while a chunk is being punched). Returns the bytes punched; EOPNOTSUPP
  // where the medium cannot punch (a DAX device).
  Result<uint64_t> Trim();

  bool IsUsed(uint64_t off) const;
  uint64_t UsedPages() const;
  uint64_t TotalPages() const { return pages_; }
  uint64_t FreeChunks() const;  // fully free chunks

  // Recovery: makes the bitmap equal `referenced` (same layout as the
  // bitmap). Pages in use but unreferenced are discarded and freed. Returns
  // (leaked pages reclaimed, referenced pages that were not marked).
  std::pair<uint64_t, uint64_t> Reconcile(const std::vector<uint64_t>& referenced);
  uint64_t bitmap_words() const { return words_; }

 private:
  uint64_t* word(uint64_t i) const { return bitmap_ + i; }
  // How SetBits makes its words durable: written back and fenced, written
  // back only (the caller fences), or left to the pool (DeferWriteBack:
  // only for clears, whose loss is a leak).
  enum class Durability { kFence, kFlush, kDefer };
  void SetBits(uint64_t first_page, uint64_t n, bool used, Durability d = Durability::kFence);

  medium::Pool* pool_;
  uint64_t* bitmap_;
  uint64_t pages_;
  uint64_t words_;
  uint64_t first_data_page_;
};

}  // namespace mapfs::vm
