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
}  // namespace

Result<uint64_t> MetaTx::Load64(uint64_t voff) const {
  auto off = vm_->Translate(voff);
  if (!off.ok()) return NotBacked(voff);
  for (auto it = words_.rbegin(); it != words_.rend(); ++it)
    if (it->first == *off) return it->second;
  return medium::Load64(pool_->at<uint64_t>(*off));
}

Status MetaTx::Store64(uint64_t voff, uint64_t value) {
  if (voff % 8 != 0) return Status::Error(EINVAL, "unaligned metadata word");
  auto off = vm_->Translate(voff);
  if (!off.ok()) return NotBacked(voff);
  order_.push_back({true, words_.size()});
  words_.push_back({*off, value});
  return Status::Ok();
}

Status MetaTx::StoreBytes(uint64_t voff, const void* data, size_t len) {
  const char* src = static_cast<const char*>(data);
  // Pages of one partition need not be contiguous in the pool: one record
  // per page.
  while (len > 0) {
    size_t n = std::min<uint64_t>(len, AlignDown(voff, kPageSize) + kPageSize - voff);
    auto off = vm_->Translate(voff);
    if (!off.ok()) return NotBacked(voff);
    order_.push_back({false, bytes_.size()});
    bytes_.push_back({*off, std::vector<char>(src, src + n)});
    voff += n;
    src += n;
    len -= n;
  }
  return Status::Ok();
}

void MetaTx::MoveTo(medium::Tx* tx) {
  for (auto [is_word, i] : order_) {
    if (is_word)
      tx->Put64(words_[i].first, words_[i].second);
    else
      tx->PutBytes(bytes_[i].pool_off, bytes_[i].data.data(), bytes_[i].data.size());
  }
  words_.clear();
  bytes_.clear();
  order_.clear();
}

Status MetaTx::Commit() {
  medium::Tx tx;
  MoveTo(&tx);
  if (tx.empty()) return Status::Ok();
  return pool_->redo().Commit(tx);
}

}  // namespace mapfs::meta
