// VFile allocation (bitmap, fallocate growth) and garbage collection
// (checkpoint of the log into the file's table, freeing superseded blocks).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "common/crc32c.h"
#include "medium/persist.h"
#include "overlay/virtual/vfile.h"

namespace mapfs::overlay::vrt {

using namespace pmem;
namespace persist = ::mapfs::medium;

Status VFile::Grow(bool extends) {
  MetaShared* sh = shared();
  uint64_t pe = persist::Load64(&sh->phys_end);
  if (pe >= hdr_.pblocks_max)
    return Status::Error(ENOSPC, "virtual: file full (" + std::to_string(hdr_.pblocks_max) + " blocks)");
  // For content past the end (the file must keep what it grows by), steps
  // double with the data region, 64 KiB (small files stay small) to 128
  // MiB: a 1 GiB file takes about 20 fallocates, then one per 128 MiB (on
  // ext4 and XFS each is a journal transaction: steps of an eighth made
  // the suite's appends 1.6-1.9x dearer there). For a rewrite, an eighth:
  // Alloc checkpoints before it grows, so the blocks a rewrite supersedes
  // come back soon, and the file grows by what the rewrite holds until
  // then, not to twice its size (every page the kernel gives costs an
  // allocation, a zeroing, a page-table entry and a release).
  uint64_t data = pe - hdr_.data_start;
  uint64_t chunk = std::clamp<uint64_t>(extends ? data : data / 8, 16, 32768);
  uint64_t end = std::min<uint64_t>(pe + chunk, hdr_.pblocks_max);
  // Concurrent growers may allocate overlapping ranges: fallocate is
  // idempotent on allocated space and never shrinks.
  if (fallocate(fd_, 0, static_cast<off_t>(pe * kBlockSize), static_cast<off_t>((end - pe) * kBlockSize)) != 0)
    return Status::FromErrno("virtual: fallocate");
  std::atomic_ref<uint64_t> w(sh->phys_end);
  uint64_t cur = w.load();
  while (cur < end && !w.compare_exchange_weak(cur, end)) {
  }
  persist::Persist(&sh->phys_end, 8);
  return Status::Ok();
}

Status VFile::Alloc(uint32_t n, uint32_t* runs_phys, uint32_t* runs_len, uint32_t* nruns, uint32_t max_runs,
                    Pin* repin, bool extends) {
  MetaShared* sh = shared();
  *nruns = 0;
  uint32_t need = n;
  bool checkpointed = false;
  bool fragmented = false;  // gave back a scattered allocation and grew (below)
  auto give_back = [&]() {
    for (uint32_t r = 0; r < *nruns; r++) Free(runs_phys[r], runs_len[r]);
    *nruns = 0;
  };
  for (;;) {
    bool restart = false;
    uint64_t pe = persist::Load64(&sh->phys_end);
    uint64_t words = (pe + 63) / 64, first = hdr_.data_start / 64;  // data_start is 512-aligned
    uint64_t span = words > first ? words - first : 0;  // 0 until the first growth
    uint64_t start = span == 0 ? first : std::clamp<uint64_t>(persist::Load64(&sh->alloc_hint) / 64, first, words - 1);
    for (uint64_t k = 0; k < span && need > 0; k++) {
      uint64_t w = first + (start - first + k) % span;
      std::atomic_ref<uint64_t> word(bitmap_[w]);
      uint64_t v = word.load(std::memory_order_acquire);
      while (v != ~uint64_t{0} && need > 0) {
        uint32_t b = static_cast<uint32_t>(__builtin_ctzll(~v));
        uint64_t phys = w * 64 + b;
        if (phys >= pe) break;
        uint32_t len = 1;
        while (len < need && b + len < 64 && !(v >> (b + len) & 1) && phys + len < pe) len++;
        uint64_t mask = (len == 64 ? ~uint64_t{0} : ((uint64_t{1} << len) - 1)) << b;
        if (!word.compare_exchange_weak(v, v | mask, std::memory_order_acq_rel)) continue;
        v |= mask;
        FlushMeta(&bitmap_[w], 8);
        if (*nruns > 0 && runs_phys[*nruns - 1] + runs_len[*nruns - 1] == phys) {
          runs_len[*nruns - 1] += len;
        } else {
          if (*nruns == max_runs) {
            // Free space in more pieces than one commit records (single
            // blocks left by rewrites): give it back and take fresh space
            // past the end in one piece instead, once per call.
            Free(static_cast<uint32_t>(phys), len);
            give_back();
            if (fragmented) return Status::Error(ENOSPC, "virtual: free space too fragmented for one commit");
            fragmented = true;
            Status st = Grow(true);
            if (!st.ok()) return st;
            std::atomic_ref<uint64_t>(sh->alloc_hint).store(pe, std::memory_order_relaxed);
            need = n;
            restart = true;
            break;
          }
          runs_phys[*nruns] = static_cast<uint32_t>(phys);
          runs_len[*nruns] = len;
          ++*nruns;
        }
        need -= len;
        std::atomic_ref<uint64_t>(sh->alloc_hint).store(phys + len, std::memory_order_relaxed);
      }
      if (restart) break;
    }
    if (restart) continue;  // scan again, from the new space
    if (need == 0) return Status::Ok();
    // Blocks waiting in limbo for readers to move on come before growth.
    size_t before = 0;
    {
      std::lock_guard<std::mutex> g(limbo_mu_);
      before = limbo_.size();
    }
    if (before > 0) {
      Reclaim(false);
      std::lock_guard<std::mutex> g(limbo_mu_);
      if (limbo_.size() < before) continue;
    }
    // Then the blocks the log since the checkpoint superseded: a
    // checkpoint now, rather than growing and leaving them to the one at
    // half the ring. A file rewritten once would otherwise take twice its
    // size from the kernel, and every page of it costs an allocation, a
    // zeroing and a release (docs/OVERLAY.md, "Growth"). Once per call:
    // what it could not free, growth provides. Applying entries earlier
    // is no extra work (each is applied by exactly one checkpoint), and a
    // file that no longer grows checkpoints at half the ring as before.
    if (repin != nullptr && !checkpointed && applied_.load() > persist::Load64(&sh->ckpt_seq)) {
      checkpointed = true;
      Status g = Gc(false);
      if (!g.ok()) {
        give_back();
        return g;
      }
      // The caller holds no block it looked up (Alloc's contract), so its
      // own pin need not keep the retired blocks in limbo.
      repin->Advance();
      Reclaim(false);
      continue;
    }
    Status st = Grow(extends);
    if (!st.ok()) {
      give_back();
      return st;
    }
  }
}

void VFile::Free(uint32_t phys, uint32_t n) {
  for (uint32_t i = 0; i < n;) {
    uint64_t b = uint64_t{phys} + i;
    uint32_t bit = b % 64;
    uint32_t len = std::min<uint32_t>(n - i, 64 - bit);
    uint64_t mask = (len == 64 ? ~uint64_t{0} : ((uint64_t{1} << len) - 1)) << bit;
    std::atomic_ref<uint64_t>(bitmap_[b / 64]).fetch_and(~mask, std::memory_order_acq_rel);
    FlushMeta(&bitmap_[b / 64], 8);
    i += len;
  }
}

VFile::Pin::Pin(VFile* f) : f_(f) {
  static std::atomic<size_t> next{0};
  thread_local size_t home = next.fetch_add(1);
  for (size_t i = 0;; i++) {
    slot_ = (home + i) % kPinSlots;
    uint64_t e = f_->epoch_.load();
    uint64_t zero = 0;
    if (!f_->pinned_[slot_].compare_exchange_strong(zero, e)) {
      if (i % kPinSlots == kPinSlots - 1) std::this_thread::yield();
      continue;
    }
    // Dekker with the GC (which bumps the epoch, then scans the pins):
    // either it sees this pin, or this thread sees the new epoch and pins
    // that instead, after which it sees the GC's table.
    for (uint64_t now = f_->epoch_.load(); now != e; now = f_->epoch_.load()) {
      f_->pinned_[slot_].store(now);
      e = now;
    }
    return;
  }
}

void VFile::Pin::Advance() {
  // As the constructor's Dekker loop: the GC either sees the new pin or
  // this thread sees its newer epoch and pins that.
  for (uint64_t e = f_->epoch_.load();;) {
    f_->pinned_[slot_].store(e);
    uint64_t now = f_->epoch_.load();
    if (now == e) return;
    e = now;
  }
}

VFile::Pin::~Pin() { f_->pinned_[slot_].store(0, std::memory_order_release); }

void VFile::Retire(std::vector<std::pair<uint32_t, uint32_t>>& blocks) {
  uint64_t e = epoch_.fetch_add(1);
  {
    std::lock_guard<std::mutex> g(limbo_mu_);
    for (auto& [p, n] : blocks) limbo_.push_back(Retired{p, n, e});
  }
  Reclaim(false);
}

void VFile::Reclaim(bool all) {
  uint64_t oldest = ~uint64_t{0};
  if (!all)
    for (auto& p : pinned_) {
      uint64_t v = p.load(std::memory_order_acquire);
      if (v != 0) oldest = std::min(oldest, v);
    }
  std::lock_guard<std::mutex> g(limbo_mu_);
  size_t kept = 0;
  for (const Retired& r : limbo_) {
    if (r.epoch < oldest) {
      Free(r.phys, r.n);
    } else {
      limbo_[kept++] = r;
    }
  }
  limbo_.resize(kept);
  persist::Fence();
}

bool VFile::TryGcLock() {
  std::atomic_ref<uint64_t> lock(shared()->gc_lock);
  uint64_t me = static_cast<uint64_t>(getpid());
  uint64_t v = lock.load();
  if (v == 0) return lock.compare_exchange_strong(v, me);
  // A GC whose process died left its lock: its work is redone (idempotent).
  if (v != me && kill(static_cast<pid_t>(v), 0) != 0 && errno == ESRCH) return lock.compare_exchange_strong(v, me);
  return false;
}

void VFile::GcUnlock() {
  std::atomic_ref<uint64_t>(shared()->gc_lock).store(0);
  persist::Persist(&shared()->gc_lock, 8);
}

Status VFile::Gc(bool wait) {
  if (!writable_) return Status::Ok();
  while (!TryGcLock()) {
    if (!wait) return Status::Ok();
    // Another GC runs (in this or another process): it frees the ring.
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    uint64_t ck = persist::Load64(&shared()->ckpt_seq);
    if (applied_.load() < ck + hdr_.log_slots) return Status::Ok();
  }
  Status st = GcLocked();
  GcUnlock();
  return st;
}

Status VFile::GcLocked() {
  MetaShared* sh = shared();
  const uint64_t ck = persist::Load64(&sh->ckpt_seq);
  uint64_t size = persist::Load64(&sh->ckpt_size);
  std::vector<std::pair<uint32_t, uint32_t>> to_free;  // (phys, nblocks)
  alignas(64) char rec[kBlockSize];
  auto apply = [&](uint64_t seq, uint32_t v, uint32_t p, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
      uint64_t* t = &ptable_[v + i];
      uint64_t old = persist::Load64(t);
      // A tag at or above seq+1: applied by a GC that crashed before its
      // checkpoint; what it superseded then is lost (a leak, never a double
      // free). Entry seq's own block was superseded and freed by it.
      if (TableTag(old) >= seq + 1) {
        if (TableTag(old) > seq + 1 && p != 0) to_free.emplace_back(p + i, 1);
        continue;
      }
      if (TablePhys(old) != 0) to_free.emplace_back(TablePhys(old), 1);
      persist::Store64(t, MakeTableEntry(seq, p == 0 ? 0 : p + i));
      FlushMeta(t, 8);
    }
  };
  uint64_t s = ck;
  for (; s - ck < hdr_.log_slots; s++) {
    uint64_t e = persist::Load64(slot(s));
    if (e == 0 || EntryLap(e) != LapOf(s, hdr_.log_slots)) break;
    bool recycled = false;
    uint64_t check_size = size;
    // Validates the entry (and its record) as a replay does, copying the
    // record into rec (under the GC lock no checkpoint can free it).
    MAPFS_RETURN_IF_ERROR(ApplyEntry(e, s, &check_size, &recycled, /*to_dtable=*/false, nullptr, rec));
    if (recycled) return Status::Error(EUCLEAN, "virtual: checkpoint moved under the GC lock");
    size = check_size;
    if (EntryType(e) == kInline) {
      apply(s, EntryVblock(e), EntryPhys(e), EntryBlocks(e));
      continue;
    }
    const RecordHeader* rh = reinterpret_cast<const RecordHeader*>(rec);
    const Run* runs = reinterpret_cast<const Run*>(rec + sizeof(RecordHeader));
    for (uint32_t i = 0; i < rh->nruns; i++) apply(s, runs[i].vblock, runs[i].phys, runs[i].nblocks);
    to_free.emplace_back(EntryPhys(e), 1);
  }
  if (s == ck) return Status::Ok();
  persist::Fence();
  // The table is durable; now the checkpoint moves (size first: replaying
  // from an older checkpoint over a newer size is idempotent).
  persist::Store64(&sh->ckpt_size, size);
  persist::Store64(&sh->ckpt_seq, s);
  persist::Persist(&sh->ckpt_seq, 16);
  // Only now may superseded blocks be reused: in this process once no
  // thread that could have looked them up is still pinned; readers in other
  // processes that copied one notice the changed mapping and retry.
  Retire(to_free);
  return Status::Ok();
}

}  // namespace mapfs::overlay::vrt
