// PendingWords: the 8-byte stores of one step of a tree update, kept in DRAM
// until they are committed as one redo transaction, and visible to the step
// itself (Get) before that. Fresh tree nodes, which nothing reachable points
// to yet, are written directly instead (and fenced before the commit).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "map/map_persist.h"
#include "medium/pool.h"
#include "medium/redo_log.h"

namespace mapfs::map {

class PendingWords {
 public:
  uint64_t Get(const uint64_t* w) const {
    auto it = words_.find(w);
    return it != words_.end() ? it->second : Load64(w);
  }
  void Put(uint64_t* w, uint64_t v) { words_[w] = v; }
  size_t size() const { return words_.size(); }
  bool empty() const { return words_.empty(); }
  // Adds every pending store to `tx` and forgets them.
  void MoveTo(medium::Pool* pool, medium::Tx* tx) {
    for (const auto& [w, v] : words_) tx->Put64(pool->offset_of(w), v);
    words_.clear();
  }
  void Clear() { words_.clear(); }

 private:
  std::unordered_map<const uint64_t*, uint64_t> words_;
};

}  // namespace mapfs::map
