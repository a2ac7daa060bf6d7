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
//  * Free pages read as zero: freeing discards the contents (hole punch, or
//    non-temporal zeroing where the medium cannot punch) before clearing the
//    bit, and mkfs starts from a zeroed file. Allocation never has to zero.
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
  // A free 4 KiB page; prefers pages in partly used chunks.
  Result<uint64_t> AllocPage();
  // Discards the contents of [off, off + npages pages) and frees them.
  void FreePages(uint64_t off, uint64_t npages);
  // Makes the pages read as zero without freeing them.
  void Discard(uint64_t off, uint64_t len);

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
  void SetBits(uint64_t first_page, uint64_t n, bool used);

  medium::Pool* pool_;
  uint64_t* bitmap_;
  uint64_t pages_;
  uint64_t words_;
  uint64_t first_data_page_;
};

}  // namespace mapfs::vm
