// BlockBitmap: allocation in a DRAM shadow, committed through the caller's
// redo transaction (block_bitmap.h).
#include "map/block_bitmap.h"

#include <algorithm>

#include "map/map_persist.h"
#include "medium/redo_log.h"

namespace mapfs::map {

BlockBitmap::BlockBitmap(uint64_t* words, uint64_t pool_off, uint64_t nblocks)
    : words_(words),
      pool_off_(pool_off),
      nblocks_(nblocks),
      nwords_((nblocks + 63) / 64),
      shadow_(nwords_, 0),
      mark_(nwords_, 0),
      high_(nwords_ ? nwords_ - 1 : 0) {}

uint64_t BlockBitmap::Word(uint64_t w) const {
  if (mark_[w]) return shadow_[w];
  return Load64(&words_[w]) & ValidBits(w);
}

uint64_t BlockBitmap::ValidBits(uint64_t w) const {
  if (w == nwords_ - 1 && nblocks_ % 64) return (uint64_t{1} << (nblocks_ % 64)) - 1;
  return ~uint64_t{0};
}

void BlockBitmap::Load() {
  touched_.clear();
  std::fill(mark_.begin(), mark_.end(), 0);
  used_ = used();
  used_before_ = used_;
}

uint64_t BlockBitmap::used() const {
  uint64_t n = 0;
  for (uint64_t w = 0; w < nwords_; w++) n += static_cast<uint64_t>(__builtin_popcountll(Word(w)));
  return n;
}

bool BlockBitmap::UsedOnMedia(uint64_t blk) const { return (Load64(&words_[blk / 64]) >> (blk % 64)) & 1; }

void BlockBitmap::Touch(uint64_t w) {
  if (mark_[w]) return;
  shadow_[w] = Word(w);  // the area's word, as other processes left it
  mark_[w] = 1;
  touched_.emplace_back(w, shadow_[w]);
}

Result<std::pair<uint64_t, uint64_t>> BlockBitmap::Alloc(uint64_t want, uint64_t hint) {
  if (want == 0) want = 1;
  uint64_t start = nblocks_;
  if (hint < nblocks_ && !Used(hint)) {
    start = hint;
  } else {
    // Next fit by words: skip full words, then the first clear bit.
    uint64_t w = rover_ / 64;
    for (uint64_t i = 0; i <= nwords_; i++, w = (w + 1 == nwords_ ? 0 : w + 1)) {
      uint64_t free_bits = ~Word(w) & ValidBits(w);
      if (free_bits) {
        start = w * 64 + static_cast<uint64_t>(__builtin_ctzll(free_bits));
        break;
      }
    }
    if (start >= nblocks_) return Status::Error(ENOSPC, "mapping: no free block");
  }
  uint64_t n = 0;
  while (n < want && start + n < nblocks_ && !Used(start + n)) {
    uint64_t b = start + n;
    Touch(b / 64);
    shadow_[b / 64] |= uint64_t{1} << (b % 64);
    n++;
  }
  used_ += n;
  rover_ = start + n < nblocks_ ? start + n : 0;
  return std::make_pair(start, n);
}

Result<std::pair<uint64_t, uint64_t>> BlockBitmap::AllocHigh() {
  uint64_t w = high_ < nwords_ ? high_ : nwords_ - 1;
  for (uint64_t i = 0; i < nwords_; i++, w = (w == 0 ? nwords_ - 1 : w - 1)) {
    uint64_t free_bits = ~Word(w) & ValidBits(w);
    if (!free_bits) continue;
    uint64_t b = w * 64 + 63 - static_cast<uint64_t>(__builtin_clzll(free_bits));
    Touch(w);
    shadow_[w] |= uint64_t{1} << (b % 64);
    used_++;
    high_ = w;
    return std::make_pair(b, uint64_t{1});
  }
  return Status::Error(ENOSPC, "mapping: no free block");
}

void BlockBitmap::Free(uint64_t blk, uint64_t n) {
  for (uint64_t b = blk; b < blk + n && b < nblocks_; b++) {
    if (!Used(b)) continue;
    Touch(b / 64);
    shadow_[b / 64] &= ~(uint64_t{1} << (b % 64));
    used_--;
  }
}

void BlockBitmap::AddTo(medium::Tx* tx) const {
  for (const auto& t : touched_) tx->Put64(pool_off_ + t.first * 8, shadow_[t.first]);
}

void BlockBitmap::Committed() {
  for (const auto& t : touched_) mark_[t.first] = 0;
  touched_.clear();
  used_before_ = used_;
}

void BlockBitmap::Undo() {
  for (auto it = touched_.rbegin(); it != touched_.rend(); ++it) {
    shadow_[it->first] = it->second;
    mark_[it->first] = 0;
  }
  touched_.clear();
  used_ = used_before_;
}

}  // namespace mapfs::map
