#include "vm/vm.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <new>

#include "common/log.h"
#include "common/units.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "medium/protection.h"
#include "vm/fault.h"
#include "vm/ppt_format.h"
#include "vm/shared_vm.h"

namespace mapfs::vm {

using medium::Load64;
using medium::LockId;
using medium::Persist;
using medium::PoolLock;
using medium::Store64;

namespace {
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kChunksPerGiB = kGiB / kChunkSize;
constexpr size_t kStateBytes = kChunksPerGiB * sizeof(std::atomic<uint16_t>);
#ifdef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE_ = MADV_POPULATE_WRITE;
#else
constexpr int MADV_POPULATE_WRITE_ = 23;  // Linux 5.14; older kernels refuse it (EINVAL): best effort
#endif
}  // namespace

// ---------------------------------------------------------------- open/close

Vm::Vm(medium::Pool* pool, const VmOptions& opt)
    : pool_(pool),
      opt_(opt),
      pages_(pool),
      token_(pool->mount_token()),
      ppt_root_off_(pool->header().ppt_root_off),
      meta_end_(pool->header().meta_end),
      pages_end_(pool->pages_end()) {
  view_words_ = (pool->size() / kChunkSize + 63) / 64;
  view_done_.reset(new (std::nothrow) std::atomic<uint64_t>[view_words_]());
  if (!view_done_) view_words_ = 0;
  if (opt_.copy_swap_max_pages == VmOptions::kAuto)
    opt_.copy_swap_max_pages = pool->header().page_shift == 21 && pool->huge_pages() ? 4 : 0;
}

Result<std::unique_ptr<Vm>> Vm::Open(medium::Pool* pool, const VmOptions& opt) {
  std::unique_ptr<Vm> vm(new Vm(pool, opt));
  MAPFS_RETURN_IF_ERROR(vm->Reserve());
  vm->seen_seq_ = VmShared(pool->shared())->inval_seq.load();
  if (pool->needs_recovery()) {
    RebuildReport r = vm->Rebuild();
    MAPFS_LOG("vm recovery: %llu pages referenced, %llu leaked pages reclaimed, %llu unmarked fixed, "
              "%llu double references, %llu bad entries",
              (unsigned long long)r.referenced_pages, (unsigned long long)r.leaked_reclaimed,
              (unsigned long long)r.unmarked_fixed, (unsigned long long)r.double_refs,
              (unsigned long long)r.bad_entries);
  }
  MAPFS_RETURN_IF_ERROR(RegisterFaultRegion(vm.get()));
  return vm;
}

Status Vm::Reserve() {
  size_ = uint64_t{1} << pool_->header().vspace_shift;
  uint64_t align = std::min<uint64_t>(size_, kGiB);
  reserve_len_ = size_ + align;
  void* m = ::mmap(nullptr, reserve_len_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return Status::FromErrno("cannot reserve " + FormatSize(size_) + " of address space");
  reserve_ = static_cast<char*>(m);
  base_ = reinterpret_cast<char*>(AlignUp(reinterpret_cast<uintptr_t>(reserve_), align));
  chunk_dir_ = std::vector<std::atomic<std::atomic<uint16_t>*>>((size_ + kGiB - 1) / kGiB);
  return Status::Ok();
}

Vm::~Vm() {
  UnregisterFaultRegion(this);
  if (reserve_ != nullptr) ::munmap(reserve_, reserve_len_);
  for (auto& p : chunk_dir_)
    if (p.load() != nullptr) ::munmap(p.load(), kStateBytes);
}

// ---------------------------------------------------------------- PPT access

Status Vm::Damaged(uint64_t voff) const {
  return Status::Error(EUCLEAN, "page table entry for virtual offset " + std::to_string(voff) +
                                    " is damaged (run mapfs fsck --repair)");
}

uint64_t* Vm::Slot(uint64_t voff, int level, bool create, Status* err) {
  auto* table = pool_->at<uint64_t>(ppt_root_off_);
  for (int l = ppt::kLevels - 1; l > level; --l) {
    uint64_t* e = &table[ppt::Index(voff, l)];
    uint64_t v = Load64(e);
    if (!ppt::IsPresent(v)) {
      if (!create) return nullptr;
      auto pg = pages_.AllocPage();
      if (!pg.ok()) {
        if (err) *err = pg.status();
        return nullptr;
      }
      pages_.ZeroFresh(*pg, kPageSize);  // an empty table before anything links it
      v = ppt::Table(*pg);
      Store64(e, v);
      Persist(e, 8);
    } else if (ppt::IsLeaf(v)) {
      if (err) *err = Status::Error(EEXIST, "leaf above requested level");
      return nullptr;
    }
    if (!EntryValid(v, l)) {
      if (err) *err = Damaged(voff);
      return nullptr;
    }
    table = pool_->at<uint64_t>(ppt::Target(v));
  }
  return &table[ppt::Index(voff, level)];
}

Result<uint64_t> Vm::Translate(uint64_t voff) const {
  if (voff >= size_) return Status::Error(EINVAL, "offset outside the region");
  auto* table = pool_->at<uint64_t>(ppt_root_off_);
  for (int l = ppt::kLevels - 1; l >= 0; --l) {
    uint64_t v = Load64(&table[ppt::Index(voff, l)]);
    if (!ppt::IsPresent(v)) return Status::Error(ENOENT, "not mapped");
    uint64_t t = ppt::Target(v);
    if (!EntryValid(v, l)) return Damaged(voff);
    if (ppt::IsLeaf(v) || l == 0) return t + (voff & (ppt::Reach(l) - 1));
    table = pool_->at<uint64_t>(t);
  }
  return Status::Error(ENOENT, "not mapped");
}

char* Vm::PoolPtr(uint64_t voff) const {
  auto t = Translate(voff);
  return t.ok() ? pool_->base() + *t : nullptr;
}

char* Vm::PoolRun(uint64_t voff, uint64_t len, uint64_t* run) {
  *run = 0;
  if (len == 0 || voff >= size_ || len > size_ - voff) return nullptr;
  uint64_t first = 0, p = voff, end = voff + len;
  while (p < end) {
    uint64_t cv = AlignDown(p, kChunkSize), stop = std::min(end, cv + kChunkSize);
    uint64_t* pmd = Slot(cv, 1, false, nullptr);
    uint64_t e = pmd ? Load64(pmd) : 0;
    if (!ppt::IsPresent(e) || !EntryValid(e, 1)) break;
    if (ppt::IsLeaf(e)) {
      uint64_t t = ppt::Target(e) + (p - cv);
      if (p == voff) first = t;
      if (t != first + (p - voff)) break;
      p = stop;
      continue;
    }
    auto* tbl = pool_->at<uint64_t>(ppt::Target(e));
    bool broke = false;
    while (p < stop) {
      uint64_t pe = Load64(&tbl[ppt::Index(p, 0)]);
      if (!ppt::IsPresent(pe) || !EntryValid(pe, 0)) { broke = true; break; }
      uint64_t t = ppt::Target(pe) + (p & (kPageSize - 1));
      if (p == voff) first = t;
      if (t != first + (p - voff)) { broke = true; break; }
      p = std::min(stop, AlignDown(p, kPageSize) + kPageSize);
    }
    if (broke) break;
  }
  if (p == voff) return nullptr;
  *run = p - voff;
  return pool_->base() + first;
}

bool Vm::PopulateView(uint64_t pool_off) {
  uint64_t c = pool_off / kChunkSize;
  if (c / 64 >= view_words_) return true;
  uint64_t bit = uint64_t{1} << (c % 64);
  if (view_done_[c / 64].fetch_or(bit) & bit) return true;
  if (::madvise(pool_->base() + AlignDown(pool_off, kChunkSize), kChunkSize, MADV_POPULATE_WRITE_) == 0 ||
      errno == EINVAL)  // a kernel without it: pages come at first touch
    return true;
  view_done_[c / 64].fetch_and(~bit);
  return false;
}

// Replaces a chunk leaf by an equivalent table of 512 PTEs. The mapping it
// describes does not change, so this needs no redo record and no notice to
// other processes: a crash either side of the store sees the same pages.
Status Vm::SplitLeaf(uint64_t* pmd) {
  uint64_t e = Load64(pmd);
  auto pg = pages_.AllocPage();
  if (!pg.ok()) return pg.status();
  auto* t = pool_->at<uint64_t>(*pg);
  for (int i = 0; i < ppt::kEntries; i++) t[i] = ppt::Leaf(ppt::Target(e) + uint64_t(i) * kPageSize);
  medium::TraceStore(t, kPageSize);
  Persist(t, kPageSize);
  Store64(pmd, ppt::Table(*pg));
  Persist(pmd, 8);
  return Status::Ok();
}

// ---------------------------------------------------------------- mapping

std::atomic<uint16_t>& Vm::ChunkState(uint64_t chunk) {
  auto& slot = chunk_dir_[chunk / kChunksPerGiB];
  std::atomic<uint16_t>* arr = slot.load(std::memory_order_acquire);
  if (arr == nullptr) {
    // mmap, not new: this runs inside the SIGSEGV handler too, where the
    // allocator's locks may be held. Anonymous memory starts zeroed.
    void* m = ::mmap(nullptr, kStateBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    auto* fresh = m == MAP_FAILED ? nullptr : static_cast<std::atomic<uint16_t>*>(m);
    if (fresh == nullptr) return overflow_state_;  // counts nothing; the chunk stays unmapped
    if (slot.compare_exchange_strong(arr, fresh))
      arr = fresh;
    else
      ::munmap(fresh, kStateBytes);
  }
  return arr[chunk % kChunksPerGiB];
}

bool Vm::MapChunk(uint64_t chunk) {
  uint64_t voff = chunk * kChunkSize;
  auto& st = ChunkState(chunk);
  st.fetch_and(static_cast<uint16_t>(~kWholeLeaf));  // until the new mapping stands
  uint64_t* pmd = Slot(voff, 1, false, nullptr);
  uint64_t e = pmd ? Load64(pmd) : 0;
  uint16_t runs = 0;
  bool ok = true;
  if (ppt::IsPresent(e) && !EntryValid(e, 1)) {
    ok = false;
    e = 0;  // damaged: map nothing of the chunk
  }
  const int prot = PROT_READ | PROT_WRITE;
  const int flags = pool_->map_flags() | MAP_FIXED;
  // Each run of pool pages is tagged with the protection key (a mapping
  // made by mmap has key 0). A run left untagged (pkey_mprotect can fail
  // only for want of kernel memory) works, unprotected.
  if (ppt::IsLeaf(e)) {
    if (::mmap(base_ + voff, kChunkSize, prot, flags, pool_->fd(), static_cast<off_t>(ppt::Target(e))) != MAP_FAILED) {
      runs = 1;
      if (pool_->protect()) (void)medium::protection::Tag(base_ + voff, kChunkSize, prot);
      // A whole aligned chunk can be one huge page where the pool's file
      // system offers them (tmpfs huge=advise needs the hint).
      if (pool_->header().page_shift == 21 && pool_->huge_pages()) ::madvise(base_ + voff, kChunkSize, MADV_HUGEPAGE);
    }
  } else if (ppt::IsTable(e)) {
    // Pages the table does not map must stay inaccessible.
    ::mmap(base_ + voff, kChunkSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    auto* t = pool_->at<uint64_t>(ppt::Target(e));
    int i = 0;
    while (i < ppt::kEntries) {
      uint64_t v = Load64(&t[i]);
      if (!ppt::IsPresent(v) || !EntryValid(v, 0)) {
        ok &= !ppt::IsPresent(v);
        i++;
        continue;
      }
      int j = i + 1;
      while (j < ppt::kEntries && Load64(&t[j]) == ppt::Leaf(ppt::Target(v) + uint64_t(j - i) * kPageSize)) j++;
      if (::mmap(base_ + voff + uint64_t(i) * kPageSize, uint64_t(j - i) * kPageSize, prot, flags, pool_->fd(),
                 static_cast<off_t>(ppt::Target(v))) != MAP_FAILED) {
        runs++;
        if (pool_->protect()) (void)medium::protection::Tag(base_ + voff + uint64_t(i) * kPageSize, uint64_t(j - i) * kPageSize, prot);
      }
      i = j;
    }
  }
  // One run from a leaf is the whole chunk, every page backed (Readable).
  const bool whole = runs == 1 && ppt::IsLeaf(e);
  uint16_t old = Runs(st.exchange(static_cast<uint16_t>(runs | (whole ? kWholeLeaf : 0))));
  mapped_runs_ += runs;
  mapped_runs_ -= old;
  if (old == 0 && runs != 0) mapped_chunks_++;
  if (old != 0 && runs == 0) mapped_chunks_--;
  if (runs > 1) EnforceBudget(chunk);
  return ok;
}

Status Vm::Map(uint64_t voff, uint64_t len) {
  if (len == 0) return Status::Ok();
  if (voff >= size_ || len > size_ - voff) return Status::Error(EINVAL, "range outside the region");
  for (uint64_t c = voff / kChunkSize; c <= (voff + len - 1) / kChunkSize; c++) {
    if (ChunkState(c).load(std::memory_order_acquire) != 0) continue;
    std::lock_guard<std::mutex> g(map_mu_);
    if (ChunkState(c).load() == 0 && !MapChunk(c)) return Damaged(c * kChunkSize);
  }
  return Status::Ok();
}

void Vm::InvalidateLocal(uint64_t voff, uint64_t len) {
  // Whole chunks: a chunk is either mapped as the PPT said when it was
  // mapped, or not at all, so the run count stays exact.
  uint64_t c0 = voff / kChunkSize, c1 = (voff + len - 1) / kChunkSize;
  std::lock_guard<std::mutex> g(map_mu_);
  DropLocal(c0 * kChunkSize, (c1 - c0 + 1) * kChunkSize);
}

void Vm::ClearWhole(uint64_t voff, uint64_t len) {
  uint64_t c0 = voff / kChunkSize, c1 = (voff + len - 1) / kChunkSize;
  for (uint64_t c = c0; c <= c1; c++) {
    std::atomic<uint16_t>* arr = chunk_dir_[c / kChunksPerGiB].load();
    if (arr == nullptr) {
      c = (c / kChunksPerGiB + 1) * kChunksPerGiB - 1;  // nothing mapped in this GiB
      continue;
    }
    arr[c % kChunksPerGiB].fetch_and(static_cast<uint16_t>(~kWholeLeaf));
  }
}

void Vm::DropLocal(uint64_t voff, uint64_t len) {
  uint64_t c0 = voff / kChunkSize, c1 = (voff + len - 1) / kChunkSize;
  ClearWhole(voff, len);  // before the mapping goes: Readable must not trust it
  ::mmap(base_ + voff, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  for (uint64_t c = c0; c <= c1; c++) {
    auto& slot = chunk_dir_[c / kChunksPerGiB];
    std::atomic<uint16_t>* arr = slot.load();
    if (arr == nullptr) {
      c = (c / kChunksPerGiB + 1) * kChunksPerGiB - 1;  // nothing mapped in this GiB
      continue;
    }
    uint16_t old = Runs(arr[c % kChunksPerGiB].exchange(0));
    mapped_runs_ -= old;
    if (old) mapped_chunks_--;
  }
}

void Vm::RemapLocal(uint64_t voff, uint64_t len) {
  uint64_t end = voff + len;
  uint64_t p = voff;
  while (p < end) {
    uint64_t chunk_end = std::min(end, AlignDown(p, kChunkSize) + kChunkSize);
    auto& st = ChunkState(p / kChunkSize);
    uint16_t runs = Runs(st.load());
    if (runs == 0) {  // not mapped here: the next touch maps it
      p = chunk_end;
      continue;
    }
    // Remapped in pieces, the chunk is no longer one leaf run (a page of
    // it may now be unbacked): Readable must stop trusting it first.
    ClearWhole(AlignDown(p, kChunkSize), kChunkSize);
    uint16_t added = 0;
    bool failed = false;
    while (p < chunk_end && !failed) {
      // Extend over pages whose targets continue contiguously (or that are
      // all unbacked), so each run costs one mmap.
      auto t = Translate(p);
      uint64_t q = p + kPageSize;
      while (q < chunk_end) {
        auto tq = Translate(q);
        if (t.ok() != tq.ok() || (t.ok() && *tq != *t + (q - p))) break;
        q += kPageSize;
      }
      void* r;
      if (t.ok()) {
        r = ::mmap(base_ + p, q - p, PROT_READ | PROT_WRITE, pool_->map_flags() | MAP_FIXED, pool_->fd(),
                   static_cast<off_t>(*t));
        if (r != MAP_FAILED && pool_->protect()) (void)medium::protection::Tag(r, q - p, PROT_READ | PROT_WRITE);
      } else {
        r = ::mmap(base_ + p, q - p, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
      }
      failed = r == MAP_FAILED;
      added += 2;  // a run remapped inside another splits it in up to three
      p = q;
    }
    if (failed) {
      DropLocal(AlignDown(p - 1, kChunkSize), kChunkSize);
      p = chunk_end;
      continue;
    }
    uint16_t now = static_cast<uint16_t>(std::min<int>(runs + added, 512));
    st.store(now);
    mapped_runs_ += now - runs;
  }
  EnforceBudget();
}

void Vm::InvalidateAllLocal() { InvalidateLocal(0, size_); }

void Vm::EnforceBudget(uint64_t keep) {
  if (mapped_runs_.load() <= opt_.vma_budget) return;
  // Unmap every split chunk; they come back on demand.
  for (size_t g = 0; g < chunk_dir_.size(); g++) {
    std::atomic<uint16_t>* arr = chunk_dir_[g].load();
    if (arr == nullptr) continue;
    for (uint64_t i = 0; i < kChunksPerGiB; i++) {
      if (Runs(arr[i].load()) <= 1 || g * kChunksPerGiB + i == keep) continue;
      uint64_t voff = (g * kChunksPerGiB + i) * kChunkSize;
      ::mmap(base_ + voff, kChunkSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
      uint16_t old = Runs(arr[i].exchange(0));
      mapped_runs_ -= old;
      mapped_chunks_--;
    }
  }
}

void Vm::Publish(uint64_t voff, uint64_t len) {
  auto* sh = VmShared(pool_->shared());
  uint64_t q = sh->inval_seq.load() + 1;
  InvalEntry& e = sh->ring[q % kInvalRing];
  e.seq.store(0);
  e.start.store(voff);
  e.length.store(len);
  e.origin.store(token_);
  e.seq.store(q);
  sh->inval_seq.store(q);
}

void Vm::Sync() {
  auto* sh = VmShared(pool_->shared());
  uint64_t s = sh->inval_seq.load(std::memory_order_acquire);
  if (s == seen_seq_.load(std::memory_order_relaxed)) return;
  // Following another process's mapping change is rare on a read path,
  // which may run with the rights closed (protection::ReadOnly).
  medium::protection::Inside rights;
  std::lock_guard<std::mutex> g(sync_mu_);
  uint64_t seen = seen_seq_.load();
  if (s - seen > static_cast<uint64_t>(kInvalRing) / 2) {
    InvalidateAllLocal();
    invalidations_++;
  } else {
    for (uint64_t q = seen + 1; q <= s; q++) {
      InvalEntry& e = sh->ring[q % kInvalRing];
      uint64_t s1 = e.seq.load();
      uint64_t start = e.start.load(), len = e.length.load(), origin = e.origin.load();
      uint64_t s2 = e.seq.load();
      if (s1 != q || s2 != q) {  // overwritten: we fell too far behind
        InvalidateAllLocal();
        invalidations_++;
        break;
      }
      if (origin == token_ || len == 0 || start >= size_) continue;
      InvalidateLocal(start, std::min(len, size_ - start));
      invalidations_++;
    }
  }
  seen_seq_.store(s);
}

bool Vm::HandleFault(void* addr) {
  uint64_t voff = static_cast<uint64_t>(static_cast<char*>(addr) - base_);
  uint64_t page = AlignDown(voff, kPageSize);
  if (!Translate(page).ok() && !Populate(page, kPageSize).ok()) return false;
  std::lock_guard<std::mutex> g(map_mu_);
  MapChunk(page / kChunkSize);
  faults_++;
  // If mapping failed the page is still inaccessible: report it rather than
  // fault forever.
  return ChunkState(page / kChunkSize).load() != 0;
}

void Vm::AfterFork() {
  token_ = pool_->mount_token();
  // A lock the fork caught held belongs to a thread that does not exist
  // here: re-create it (never unlocked, never destroyed while held).
  bool quiet = changing_.load() == 0;
  if (map_mu_.try_lock())
    map_mu_.unlock();
  else
    quiet = false;
  if (sync_mu_.try_lock())
    sync_mu_.unlock();
  else
    quiet = false;
  std::construct_at(&map_mu_);
  std::construct_at(&sync_mu_);
  changing_.store(0);
  ResetFaultHandlerAfterFork();
  // When nothing was in flight, every mapping here is what the parent had,
  // with the parent's own changes so far applied: keep them. Changes the
  // parent publishes from now on carry its token, no longer ours, so Sync
  // drops what they make stale.
  if (!quiet) {
    InvalidateAllLocal();
    invalidations_++;
  }
}

// ---------------------------------------------------------------- populate / unmap

// Lock-free: PPT entries are single words and tables are never freed, so a
// "backed" answer stays true until someone unmaps the range, which callers
// exclude with their own locks.
bool Vm::Backed(uint64_t voff, uint64_t len) {
  uint64_t end = voff + len;
  if (len != 0 && len <= kPageSize && AlignDown(voff, kPageSize) == AlignDown(end - 1, kPageSize)) {
    // One page (the directory layer asks this for every block it follows):
    // the walk straight down, each entry checked as Slot and the loop below
    // check it.
    const uint64_t* table = pool_->at<uint64_t>(ppt_root_off_);
    for (int l = ppt::kLevels - 1;; --l) {
      uint64_t e = Load64(&table[ppt::Index(voff, l)]);
      if (!ppt::IsPresent(e)) return false;
      if (l == 0) return true;
      if (ppt::IsLeaf(e) && l > 1) return false;  // Slot: a leaf above the PMD
      if (!EntryValid(e, l)) return false;
      if (ppt::IsLeaf(e)) return true;
      table = pool_->at<uint64_t>(ppt::Target(e));
    }
  }
  for (uint64_t c = voff / kChunkSize; c <= (end - 1) / kChunkSize; c++) {
    uint64_t cv = c * kChunkSize;
    uint64_t* pmd = Slot(cv, 1, false, nullptr);
    if (pmd == nullptr) return false;
    uint64_t e = Load64(pmd);
    if (!ppt::IsPresent(e) || !EntryValid(e, 1)) return false;
    if (ppt::IsLeaf(e)) continue;
    auto* t = pool_->at<uint64_t>(ppt::Target(e));
    uint64_t lo = std::max(voff, cv), hi = std::min(end, cv + kChunkSize);
    for (uint64_t p = AlignDown(lo, kPageSize); p < hi; p += kPageSize)
      if (!ppt::IsPresent(Load64(&t[ppt::Index(p, 0)]))) return false;
  }
  return true;
}

Status Vm::Populate(uint64_t voff, uint64_t len, ZeroRange zero, bool map_here) {
  if (len == 0) return Status::Ok();
  if (voff >= size_ || len > size_ - voff) return Status::Error(EINVAL, "range outside the region");
  uint64_t end = voff + len;
  if (Backed(voff, len)) return map_here ? Map(voff, len) : Status::Ok();
  // Pages meeting `zero`, page aligned; a fresh page there is zeroed before
  // its entry is durable, so a crash never shows a former owner's bytes.
  uint64_t zlo = AlignDown(std::min(zero.lo, size_), kPageSize);
  uint64_t zhi = zero.hi >= size_ ? size_ : AlignUp(zero.hi, kPageSize);
  auto zero_fresh = [&](uint64_t v, uint64_t pool_off, uint64_t n) {
    uint64_t a = std::max(v, zlo), b = std::min(v + n, zhi);
    if (a < b) pages_.Discard(pool_off + (a - v), b - a);
  };
  // Fresh chunks are allocated and their pool-view pages populated before
  // the PPT lock is taken (a cold chunk takes the kernel a while), for the
  // first few chunks found unbacked; the rest, and any a race leaves
  // short, under the lock. Populating is also where the medium says it is
  // full (a tmpfs at its size): ENOSPC then, before any entry names the
  // chunk, rather than SIGBUS at the first store. No heap: this runs in the
  // SIGSEGV handler too (HandleFault).
  // Built only on failure: Populate runs in the SIGSEGV handler too, where
  // the heap must not be touched on the way through.
  auto full = [] { return Status::Error(ENOSPC, "the pool's backing file system is full"); };
  uint64_t fresh[8];
  size_t nfresh = 0, used = 0;
  auto release_unused = [&] {
    for (size_t i = used; i < nfresh; i++) pages_.FreePages(fresh[i], kPagesPerChunk);
  };
  for (uint64_t c = voff / kChunkSize; c <= (end - 1) / kChunkSize && nfresh < std::size(fresh); c++) {
    uint64_t* pmd = Slot(c * kChunkSize, 1, false, nullptr);
    if (pmd != nullptr && ppt::IsPresent(Load64(pmd))) continue;
    auto ch = pages_.AllocChunk();
    if (!ch.ok()) break;  // the locked pass below reports it
    fresh[nfresh++] = *ch;
    if (!PopulateView(*ch)) {
      release_unused();
      return full();
    }
  }
  Status st = [&]() -> Status {
    PoolLock lock(pool_, LockId::kPpt);
    for (uint64_t c = voff / kChunkSize; c <= (end - 1) / kChunkSize; c++) {
      uint64_t cv = c * kChunkSize;
      Status err;
      uint64_t* pmd = Slot(cv, 1, true, &err);
      if (pmd == nullptr) return err;
      uint64_t e = Load64(pmd);
      if (!ppt::IsPresent(e)) {
        uint64_t ch;
        if (used < nfresh) {
          ch = fresh[used++];
        } else {
          auto a = pages_.AllocChunk();
          if (!a.ok()) return a.status();
          ch = *a;
          if (!PopulateView(ch)) {
            pages_.FreePages(ch, kPagesPerChunk);
            return full();
          }
        }
        zero_fresh(cv, ch, kChunkSize);
        Store64(pmd, ppt::Leaf(ch));
        Persist(pmd, 8);
      } else if (!EntryValid(e, 1)) {
        return Damaged(cv);
      } else if (ppt::IsTable(e)) {
        auto* t = pool_->at<uint64_t>(ppt::Target(e));
        uint64_t lo = std::max(voff, cv), hi = std::min(end, cv + kChunkSize);
        bool changed = false;
        for (uint64_t p = AlignDown(lo, kPageSize); p < hi; p += kPageSize) {
          uint64_t* pte = &t[ppt::Index(p, 0)];
          if (ppt::IsPresent(Load64(pte))) continue;
          auto pg = pages_.AllocPage();
          if (!pg.ok()) return pg.status();
          zero_fresh(p, *pg, kPageSize);
          Store64(pte, ppt::Leaf(*pg));
          Persist(pte, 8);
          changed = true;
        }
        // Others may have this chunk mapped with these pages inaccessible.
        if (changed) Publish(cv, kChunkSize);
      }
    }
    return Status::Ok();
  }();
  release_unused();
  if (!st.ok()) return st;
  return map_here ? Map(voff, len) : Status::Ok();
}

Status Vm::ReplacePages(uint64_t voff, const uint64_t* fresh, uint64_t npages, const medium::Tx* with) {
  if (npages == 0) return with ? pool_->redo().Commit(*with) : Status::Ok();
  uint64_t len = npages * kPageSize;
  if (!IsAligned(voff, kPageSize) || npages > size_ / kPageSize || voff >= size_ || len > size_ - voff)
    return Status::Error(EINVAL, "replace: range outside the region");
  Changing changing(&changing_);
  // The pages replaced, freed once no durable entry names them.
  uint64_t inline_old[8];
  std::vector<uint64_t> heap_old;
  uint64_t* old = inline_old;
  if (npages > std::size(inline_old)) {
    heap_old.resize(npages);
    old = heap_old.data();
  }
  {
    PoolLock lock(pool_, LockId::kPpt);
    medium::Tx tx;
    uint64_t* single = nullptr;
    for (uint64_t i = 0; i < npages; i++) {
      uint64_t v = voff + i * kPageSize;
      uint64_t* pmd = Slot(AlignDown(v, kChunkSize), 1, false, nullptr);
      uint64_t e = pmd ? Load64(pmd) : 0;
      if (!ppt::IsPresent(e)) return Status::Error(ENOENT, "replace: page not backed");
      if (!EntryValid(e, 1)) return Damaged(v);
      if (ppt::IsLeaf(e)) {
        MAPFS_RETURN_IF_ERROR(SplitLeaf(pmd));
        e = Load64(pmd);
      }
      uint64_t* pte = pool_->at<uint64_t>(ppt::Target(e)) + ppt::Index(v, 0);
      uint64_t pv = Load64(pte);
      if (!ppt::IsPresent(pv)) return Status::Error(ENOENT, "replace: page not backed");
      if (!EntryValid(pv, 0) || !EntryValid(ppt::Leaf(fresh[i]), 0)) return Damaged(v);
      old[i] = ppt::Target(pv);
      if (npages == 1 && with == nullptr)
        single = pte;
      else
        tx.Put64(pool_->offset_of(pte), ppt::Leaf(fresh[i]));
    }
    if (single) {
      Store64(single, ppt::Leaf(fresh[0]));
      Persist(single, 8);
    } else {
      if (with) tx.Append(*with);
      MAPFS_RETURN_IF_ERROR(pool_->redo().Commit(tx));
    }
    Publish(voff, len);
  }
  for (uint64_t i = 0; i < npages;) {  // runs of pages contiguous in the pool
    uint64_t j = i + 1;
    while (j < npages && old[j] == old[j - 1] + kPageSize) j++;
    pages_.FreePages(old[i], j - i, /*durable=*/false);
    i = j;
  }
  // This process's mappings of the old pages: dropped whole chunks at a
  // time, once (the data path does not map them again).
  for (uint64_t c = voff / kChunkSize; c <= (voff + len - 1) / kChunkSize; c++)
    if (ChunkState(c).load(std::memory_order_acquire) != 0) InvalidateLocal(c * kChunkSize, kChunkSize);
  return Status::Ok();
}

Status Vm::Unmap(uint64_t voff, uint64_t len) {
  if (len == 0) return Status::Ok();
  if (!IsAligned(voff, kPageSize) || !IsAligned(len, kPageSize)) return Status::Error(EINVAL, "unaligned unmap");
  if (voff >= size_ || len > size_ - voff) return Status::Error(EINVAL, "range outside the region");
  uint64_t end = voff + len;
  Changing changing(&changing_);
  std::vector<std::pair<uint64_t, uint64_t>> to_free;  // (pool offset, pages)
  bool changed = false;
  {
    PoolLock lock(pool_, LockId::kPpt);
    for (uint64_t c = voff / kChunkSize; c <= (end - 1) / kChunkSize; c++) {
      uint64_t cv = c * kChunkSize;
      uint64_t* pmd = Slot(cv, 1, false, nullptr);
      if (pmd == nullptr) {
        c = (c / kChunksPerGiB + 1) * kChunksPerGiB - 1;  // no PMD table: skip the GiB
        continue;
      }
      uint64_t e = Load64(pmd);
      if (!ppt::IsPresent(e)) continue;
      if (!EntryValid(e, 1)) return Damaged(cv);
      bool whole = voff <= cv && end >= cv + kChunkSize;
      changed = true;
      if (whole) {
        Store64(pmd, 0);
        Persist(pmd, 8);
        if (ppt::IsLeaf(e)) {
          to_free.push_back({ppt::Target(e), kPagesPerChunk});
        } else {
          auto* t = pool_->at<uint64_t>(ppt::Target(e));
          for (int i = 0; i < ppt::kEntries; i++)
            if (ppt::IsPresent(t[i]) && EntryValid(t[i], 0)) to_free.push_back({ppt::Target(t[i]), 1});
          to_free.push_back({ppt::Target(e), 1});
        }
        continue;
      }
      if (ppt::IsLeaf(e)) MAPFS_RETURN_IF_ERROR(SplitLeaf(pmd));
      e = Load64(pmd);
      auto* t = pool_->at<uint64_t>(ppt::Target(e));
      uint64_t lo = std::max(voff, cv), hi = std::min(end, cv + kChunkSize);
      for (uint64_t p = lo; p < hi; p += kPageSize) {
        uint64_t* pte = &t[ppt::Index(p, 0)];
        uint64_t v = Load64(pte);
        if (!ppt::IsPresent(v)) continue;
        Store64(pte, 0);
        medium::Flush(pte, 8);
        if (EntryValid(v, 0)) to_free.push_back({ppt::Target(v), 1});
      }
      medium::Fence();
      bool empty = true;
      for (int i = 0; i < ppt::kEntries && empty; i++) empty = !ppt::IsPresent(Load64(&t[i]));
      if (empty) {
        Store64(pmd, 0);
        Persist(pmd, 8);
        to_free.push_back({ppt::Target(e), 1});
      }
    }
    if (!changed) return Status::Ok();
    Publish(voff, len);
    // Pages may be reused only when no durable entry names them: every entry
    // cleared above was persisted before we get here.
    for (auto& [off, n] : to_free) pages_.FreePages(off, n);
  }
  InvalidateLocal(voff, len);
  return Status::Ok();
}

Status Vm::Discard(uint64_t voff, uint64_t len) {
  if (len == 0) return Status::Ok();
  if (voff >= size_ || len > size_ - voff) return Status::Error(EINVAL, "range outside the region");
  PoolLock lock(pool_, LockId::kPpt);
  uint64_t p = voff, end = voff + len;
  while (p < end) {
    uint64_t page_end = std::min(end, AlignDown(p, kPageSize) + kPageSize);
    auto t = Translate(p);
    if (t.ok()) {
      // Extend over following pages that are contiguous in the pool.
      uint64_t run_end = page_end;
      while (run_end < end) {
        auto t2 = Translate(run_end);
        if (!t2.ok() || *t2 != *t + (run_end - p)) break;
        run_end = std::min(end, run_end + kPageSize);
      }
      uint64_t n = run_end - p;
      if (IsAligned(*t, kPageSize) && IsAligned(n, kPageSize)) {
        pages_.Discard(*t, n);
      } else {
        medium::ZeroNt(pool_->base() + *t, n);
        medium::Fence();
      }
      p = run_end;
    } else {
      p = page_end;
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- statistics

VmStats Vm::Stats() const {
  VmStats s;
  s.used_pages = pages_.UsedPages();
  s.total_pages = pages_.TotalPages();
  s.free_chunks = pages_.FreeChunks();
  s.mapped_chunks = mapped_chunks_.load();
  s.mapped_runs = mapped_runs_.load();
  s.faults = faults_.load();
  s.invalidations = invalidations_.load();
  return s;
}

}  // namespace mapfs::vm
