#include "meta/meta_tx.h"

#include <algorithm>
#include <string>

#include "common/units.h"
#include "medium/persist.h"
#include "medium/pool.h"
#include "vm/vm.h"

namespace mapfs::meta {

namespace {
Status NotBacked(uint64_t voff) {
  return Status::Error(EUCLEAN, "metadata at virtual offset " + std::to_string(voff) + " is not backed");
}

// Each thread keeps the (empty) buffers of its last two transactions: a
// structural change (a directory split) commits a transaction of its own
// while the operation's is pending, so two may be alive at once. Buffers
// that grew past kKeepBytes (a large split's) go back to the heap.
struct Spare {
  medium::Tx tx;
  std::vector<std::pair<uint64_t, uint64_t>> words;
};
constexpr int kSpares = 2;
constexpr size_t kKeepBytes = 64 * 1024;
// The spares die with their thread, before the code that runs at a
// process's exit (the shim's clean unmount) is done with transactions:
// once they are gone, transactions take fresh buffers.
struct Spares {
  Spare s[kSpares];
  int n = 0;
  ~Spares() { gone = true; }
  static thread_local bool gone;  // trivially destructible: valid to the end
};
thread_local bool Spares::gone = false;
thread_local Spares spares;
}  // namespace

MetaTx::MetaTx(medium::Pool* pool, vm::Vm* vm) : pool_(pool), vm_(vm) {
  if (!Spares::gone && spares.n > 0) {
    Spare& s = spares.s[--spares.n];
    std::swap(tx_, s.tx);
    std::swap(words_, s.words);
    return;
  }
  // Room for a namespace operation up front: two allocations, not one per
  // doubling.
  tx_.Reserve(32, 512);
  words_.reserve(24);
}

MetaTx::~MetaTx() {
  if (Spares::gone || spares.n == kSpares || tx_.heap_bytes() > kKeepBytes || words_.capacity() > kKeepBytes / 16) return;
  tx_.Clear();
  words_.clear();
  Spare& s = spares.s[spares.n++];
  std::swap(tx_, s.tx);
  std::swap(words_, s.words);
}

Result<uint64_t> MetaTx::Translate(uint64_t voff) const {
  // One page remembered: an operation's stores come in runs on one page
  // (an inode, a directory block), and a page's mapping cannot change
  // under the caller's locks while the transaction is built.
  uint64_t page = AlignDown(voff, kPageSize);
  if (page != cached_page_) {
    auto off = vm_->Translate(page);
    if (!off.ok()) return off;
    cached_page_ = page;
    cached_pool_ = *off;
  }
  return cached_pool_ + (voff - page);
}

Result<uint64_t> MetaTx::Load64(uint64_t voff) const {
  auto off = Translate(voff);
  if (!off.ok()) return NotBacked(voff);
  for (auto it = words_.rbegin(); it != words_.rend(); ++it)
    if (it->first == *off) return it->second;
  return medium::Load64(pool_->at<uint64_t>(*off));
}

Result<bool> MetaTx::StoresIn(uint64_t voff, uint64_t len) const {
  if (words_.empty()) return false;
  auto off = Translate(voff);
  if (!off.ok()) return NotBacked(voff);
  for (const auto& [at, v] : words_)
    if (at - *off < len) return true;
  return false;
}

Status MetaTx::Store64(uint64_t voff, uint64_t value) {
  if (voff % 8 != 0) return Status::Error(EINVAL, "unaligned metadata word");
  auto off = Translate(voff);
  if (!off.ok()) return NotBacked(voff);
  tx_.Put64(*off, value);
  words_.push_back({*off, value});
  return Status::Ok();
}

Status MetaTx::StoreBytes(uint64_t voff, const void* data, size_t len) {
  const char* src = static_cast<const char*>(data);
  // Pages of one partition need not be contiguous in the pool: one record
  // per page.
  while (len > 0) {
    size_t n = std::min<uint64_t>(len, AlignDown(voff, kPageSize) + kPageSize - voff);
    auto off = Translate(voff);
    if (!off.ok()) return NotBacked(voff);
    tx_.PutBytes(*off, src, n);
    voff += n;
    src += n;
    len -= n;
  }
  return Status::Ok();
}

void MetaTx::MoveTo(medium::Tx* tx) {
  if (tx->empty())
    std::swap(*tx, tx_);
  else
    tx->Append(tx_);
  tx_.Clear();
  words_.clear();
}

Status MetaTx::Commit() {
  Status st = tx_.empty() ? Status::Ok() : pool_->redo().Commit(tx_);
  tx_.Clear();
  words_.clear();
  return st;
}

}  // namespace mapfs::meta
