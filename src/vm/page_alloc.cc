#include "vm/page_alloc.h"

#include <fcntl.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <bit>

#include "common/units.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "vm/shared_vm.h"

namespace mapfs::vm {

using medium::Persist;

namespace {
std::atomic_ref<uint64_t> Ref(uint64_t* w) { return std::atomic_ref<uint64_t>(*w); }

#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;  // Linux 5.14
#endif

// Pages of a bitmap word nobody used may not be backed by the pool file yet
// (a pool takes memory as it is used): they are populated when handed out,
// so that a full medium (a tmpfs at its size) is ENOSPC here, not SIGBUS
// at the first store. A kernel without the call (EINVAL) backs them at
// first touch, as before.
bool Backable(char* at, uint64_t len) { return ::madvise(at, len, kPopulateWrite) == 0 || errno == EINVAL; }
constexpr uint64_t kWordsPerChunk = kPagesPerChunk / 64;
}  // namespace

PageAllocator::PageAllocator(medium::Pool* pool)
    : pool_(pool),
      bitmap_(pool->at<uint64_t>(pool->header().bitmap_off)),
      pages_(pool->size() / kPageSize),
      words_(pool->header().bitmap_bytes / 8),
      first_data_page_(pool->header().meta_end / kPageSize) {}

void PageAllocator::SetBits(uint64_t first, uint64_t n, bool used, Durability d) {
  uint64_t p = first;
  uint64_t end = first + n;
  while (p < end) {
    uint64_t w = p / 64;
    uint64_t lo = p % 64;
    uint64_t cnt = std::min<uint64_t>(64 - lo, end - p);
    uint64_t mask = cnt == 64 ? ~uint64_t{0} : ((uint64_t{1} << cnt) - 1) << lo;
    if (used)
      Ref(word(w)).fetch_or(mask);
    else
      Ref(word(w)).fetch_and(~mask);
    medium::TraceStore(word(w), 8);
    if (d == Durability::kDefer) pool_->DeferWriteBack(word(w));
    p += cnt;
  }
  if (d == Durability::kDefer) return;
  medium::Flush(word(first / 64), ((end - 1) / 64 - first / 64 + 1) * 8);
  if (d == Durability::kFence) medium::Fence();
}

Result<uint64_t> PageAllocator::AllocChunk() {
  auto* sh = VmShared(pool_->shared());
  const uint64_t nchunks = pages_ / kPagesPerChunk;
  const uint64_t first = first_data_page_ / kPagesPerChunk;
  uint64_t start = sh->chunk_cursor.load(std::memory_order_relaxed);
  if (start < first || start >= nchunks) start = first;
  for (uint64_t k = 0; k < nchunks - first; k++) {
    uint64_t c = start + k;
    if (c >= nchunks) c -= nchunks - first;
    uint64_t w0 = c * kWordsPerChunk;
    bool free = true;
    for (uint64_t i = 0; i < kWordsPerChunk && free; i++) free = Ref(word(w0 + i)).load() == 0;
    if (!free) continue;
    // Claim word by word; back out if another allocator got in first.
    uint64_t got = 0;
    for (; got < kWordsPerChunk; got++) {
      uint64_t expect = 0;
      if (!Ref(word(w0 + got)).compare_exchange_strong(expect, ~uint64_t{0})) break;
    }
    if (got < kWordsPerChunk) {
      for (uint64_t i = 0; i < got; i++) Ref(word(w0 + i)).store(0);
      continue;
    }
    medium::TraceStore(word(w0), kWordsPerChunk * 8);
    Persist(word(w0), kWordsPerChunk * 8);
    sh->chunk_cursor.store(c + 1, std::memory_order_relaxed);
    return c * kChunkSize;
  }
  return Status::Error(ENOSPC, "pool is full: no free 2 MiB chunk");
}

Result<uint64_t> PageAllocator::AllocPage(bool durable) {
  auto* sh = VmShared(pool_->shared());
  const uint64_t first_w = first_data_page_ / 64;
  uint64_t start = sh->page_cursor.load(std::memory_order_relaxed);
  if (start < first_w || start >= words_) start = first_w;
  // Two passes: first only words that are partly used (so single pages do
  // not break up free chunks), then any word.
  for (int pass = 0; pass < 2; pass++) {
    for (uint64_t k = 0; k < words_ - first_w; k++) {
      uint64_t w = start + k;
      if (w >= words_) w -= words_ - first_w;
      uint64_t v = Ref(word(w)).load(std::memory_order_relaxed);
      while (v != ~uint64_t{0} && (pass == 1 || v != 0)) {
        int bit = std::countr_one(v);
        uint64_t page = w * 64 + static_cast<uint64_t>(bit);
        if (page >= pages_) break;
        uint64_t mask = uint64_t{1} << bit;
        uint64_t old = Ref(word(w)).fetch_or(mask);
        if ((old & mask) == 0) {
          if (old == 0 && !Backable(pool_->base() + page * kPageSize, kPageSize)) {
            Ref(word(w)).fetch_and(~mask);
            return Status::Error(ENOSPC, "the pool's backing file system is full");
          }
          medium::TraceStore(word(w), 8);
          medium::Flush(word(w), 8);
          if (durable) medium::Fence();
          sh->page_cursor.store(w, std::memory_order_relaxed);
          return page * kPageSize;
        }
        v = old | mask;
      }
    }
  }
  return Status::Error(ENOSPC, "pool is full: no free page");
}

Status PageAllocator::AllocPages(uint64_t n, uint64_t* out, bool durable) {
  auto* sh = VmShared(pool_->shared());
  const uint64_t first_w = first_data_page_ / 64;
  uint64_t start = sh->page_cursor.load(std::memory_order_relaxed);
  if (start < first_w || start >= words_) start = first_w;
  uint64_t got = 0, last_w = start;
  // As AllocPage: partly used words first, then any.
  for (int pass = 0; pass < 2 && got < n; pass++) {
    for (uint64_t k = 0; k < words_ - first_w && got < n; k++) {
      uint64_t w = start + k;
      if (w >= words_) w -= words_ - first_w;
      // Bits past the last page of the pool are never handed out.
      uint64_t valid = w * 64 + 64 <= pages_ ? ~uint64_t{0} : (uint64_t{1} << (pages_ - w * 64)) - 1;
      uint64_t v = Ref(word(w)).load(std::memory_order_relaxed);
      while ((~v & valid) != 0 && (pass == 1 || v != 0)) {
        uint64_t free = ~v & valid, mask = 0;
        for (uint64_t want = n - got; free != 0 && want > 0; want--) {
          uint64_t bit = free & (~free + 1);
          mask |= bit;
          free ^= bit;
        }
        if (!Ref(word(w)).compare_exchange_weak(v, v | mask)) continue;  // v reloaded
        if (v == 0 && !Backable(pool_->base() + w * 64 * kPageSize, 64 * kPageSize)) {
          Ref(word(w)).fetch_and(~mask);
          for (uint64_t i = 0; i < got; i++) SetBits(out[i] / kPageSize, 1, false, Durability::kFlush);
          medium::Fence();
          return Status::Error(ENOSPC, "the pool's backing file system is full");
        }
        medium::TraceStore(word(w), 8);
        medium::Flush(word(w), 8);
        for (uint64_t m = mask; m != 0; m &= m - 1)
          out[got++] = (w * 64 + static_cast<uint64_t>(std::countr_zero(m))) * kPageSize;
        last_w = w;
        break;
      }
    }
  }
  if (got < n) {
    for (uint64_t i = 0; i < got; i++) SetBits(out[i] / kPageSize, 1, false, Durability::kFlush);
    medium::Fence();
    return Status::Error(ENOSPC, "pool is full: not enough free pages");
  }
  if (durable) medium::Fence();
  sh->page_cursor.store(last_w, std::memory_order_relaxed);
  return Status::Ok();
}

void PageAllocator::Discard(uint64_t off, uint64_t len) {
  // Zeroed in place: the pages stay resident (a punched page would cost a
  // kernel allocation, zeroing and fault at its next use).
  medium::ZeroNt(pool_->base() + off, len);
  medium::Fence();
}

void PageAllocator::ZeroFresh(uint64_t off, uint64_t len) { Discard(off, len); }

void PageAllocator::FreePages(uint64_t off, uint64_t npages, bool durable) {
  // Not durable: cleared but not written back now; lost at a crash, the
  // pages only leak until recovery (the pool writes the lines back later).
  SetBits(off / kPageSize, npages, false, durable ? Durability::kFence : Durability::kDefer);
  // First fit: the next chunk allocation starts at the lowest chunk that may
  // now be free, so freed (resident) chunks are reused before untouched
  // ones, which the kernel would first have to allocate and zero.
  auto& cursor = VmShared(pool_->shared())->chunk_cursor;
  uint64_t c = off / kChunkSize, cur = cursor.load(std::memory_order_relaxed);
  while (c < cur && !cursor.compare_exchange_weak(cur, c, std::memory_order_relaxed)) {
  }
  // Single pages: the next one is looked for from the word just freed
  // into (last in, first out). Strict write-and-swap frees a page for every
  // one it allocates, at a random place in the file: a cursor that only
  // moved down (lowest free first) had each allocation scan past hundreds of
  // full words to reach the page freed last. A plain store: the cursor is
  // a hint, and a lost race only starts some scan elsewhere.
  VmShared(pool_->shared())->page_cursor.store((off / kPageSize) / 64, std::memory_order_relaxed);
}

Result<uint64_t> PageAllocator::Trim() {
  uint64_t punched = 0;
  const uint64_t first_w = AlignUp(first_data_page_, 64) / 64;
  for (uint64_t w0 = first_w; w0 < words_; w0 += kWordsPerChunk) {
    uint64_t n = std::min(kWordsPerChunk, words_ - w0);
    // Claim every free page of this chunk (the bits say "in use" while it
    // is punched); a crash meanwhile only leaks them to the next recovery.
    uint64_t claimed[kWordsPerChunk] = {};
    bool any = false;
    for (uint64_t i = 0; i < n; i++) {
      uint64_t v = Ref(word(w0 + i)).load();
      while (v != ~uint64_t{0} && !Ref(word(w0 + i)).compare_exchange_weak(v, ~uint64_t{0})) {
      }
      claimed[i] = ~v;
      any |= claimed[i] != 0;
    }
    if (!any) continue;
    medium::TraceStore(word(w0), n * 8);
    Status st;
    for (uint64_t i = 0; i < n && st.ok(); i++) {
      for (uint64_t b = claimed[i]; b && st.ok();) {
        int lo = std::countr_zero(b);
        int len = std::countr_one(b >> lo);
        uint64_t page = (w0 + i) * 64 + static_cast<uint64_t>(lo);
        uint64_t cnt = std::min<uint64_t>(static_cast<uint64_t>(len), pages_ > page ? pages_ - page : 0);
        if (cnt > 0) {
          if (::fallocate(pool_->fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(page * kPageSize),
                          static_cast<off_t>(cnt * kPageSize)) != 0)
            st = Status::FromErrno("cannot punch free pages of the pool");
          else {
            // A hole reads as zero at once, with no flush to wait for.
            medium::TraceNtStore(pool_->base() + page * kPageSize, cnt * kPageSize);
            punched += cnt * kPageSize;
          }
        }
        b = len >= 64 ? 0 : b & ~(((uint64_t{1} << len) - 1) << lo);
      }
    }
    for (uint64_t i = 0; i < n; i++) Ref(word(w0 + i)).fetch_and(~claimed[i]);
    medium::TraceStore(word(w0), n * 8);
    Persist(word(w0), n * 8);
    if (!st.ok()) return st;
  }
  return punched;
}

bool PageAllocator::IsUsed(uint64_t off) const {
  uint64_t p = off / kPageSize;
  return (Ref(word(p / 64)).load() >> (p % 64)) & 1;
}

uint64_t PageAllocator::UsedPages() const {
  uint64_t n = 0;
  for (uint64_t w = 0; w < words_; w++) n += std::popcount(Ref(word(w)).load(std::memory_order_relaxed));
  return n;
}

uint64_t PageAllocator::FreeChunks() const {
  uint64_t n = 0;
  for (uint64_t c = first_data_page_ / kPagesPerChunk; c < pages_ / kPagesPerChunk; c++) {
    bool free = true;
    for (uint64_t i = 0; i < kWordsPerChunk && free; i++) free = Ref(word(c * kWordsPerChunk + i)).load() == 0;
    n += free ? 1 : 0;
  }
  return n;
}

std::pair<uint64_t, uint64_t> PageAllocator::Reconcile(const std::vector<uint64_t>& referenced) {
  uint64_t leaked = 0, unmarked = 0;
  for (uint64_t w = 0; w < words_; w++) {
    uint64_t have = Ref(word(w)).load();
    uint64_t want = referenced[w];
    if (have == want) continue;
    uint64_t extra = have & ~want;
    uint64_t missing = want & ~have;
    unmarked += std::popcount(missing);
    leaked += std::popcount(extra);  // freed as they are (resident medium)
    medium::Store64(word(w), want);
    Persist(word(w), 8);
  }
  return {leaked, unmarked};
}

}  // namespace mapfs::vm
