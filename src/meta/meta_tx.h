// MetaTx: one atomic change to file system metadata.
//
// Metadata lives in partitions of the virtual region and is addressed by
// virtual offset. A MetaTx collects stores (8-byte words and byte ranges)
// addressed that way, lets the operation read back its own pending words
// (an overlay, so two changes to one bitmap word in one operation compose),
// and commits everything as one redo transaction: after a crash the pool
// shows all of the stores or none of them.
//
// Nothing is written to the pool before Commit(). The caller holds the
// locks that protect every word it stores (the redo log applies absolute
// values, so a concurrent writer of the same word would be overwritten).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "medium/redo_log.h"

namespace mapfs::medium {
class Pool;
}
namespace mapfs::vm {
class Vm;
}

namespace mapfs::meta {

class MetaTx {
 public:
  // A namespace operation records a dozen words and one inode. The buffers
  // for them come from the thread's spares (the last transactions'), so
  // building one allocates nothing in the usual case.
  MetaTx(medium::Pool* pool, vm::Vm* vm);
  ~MetaTx();
  MetaTx(const MetaTx&) = delete;
  MetaTx& operator=(const MetaTx&) = delete;

  // The word at `voff` (8-byte aligned) as this transaction would leave it.
  Result<uint64_t> Load64(uint64_t voff) const;
  // Records an 8-byte store (voff 8-byte aligned). Readers that do not hold
  // the caller's locks never see the word torn.
  Status Store64(uint64_t voff, uint64_t value);
  // Records a store of `len` bytes; the range may cross pages.
  Status StoreBytes(uint64_t voff, const void* data, size_t len);

  // Whether an 8-byte store recorded so far (the words Load64 overlays)
  // lies in [voff, voff + len), a range within one page.
  Result<bool> StoresIn(uint64_t voff, uint64_t len) const;

  bool empty() const { return tx_.empty(); }
  // Moves every recorded store into `tx` (for operations that commit the
  // metadata together with a pswap, vm::Vm::Pswap's `with`).
  void MoveTo(medium::Tx* tx);
  // Commits every recorded store as one redo transaction, durable on
  // return. E2BIG when the stores exceed one redo slot. The transaction is
  // empty afterwards, whatever the outcome.
  Status Commit();

 private:
  // Pool offset of `voff` (vm::Vm::Translate, one page cached).
  Result<uint64_t> Translate(uint64_t voff) const;

  medium::Pool* pool_;
  vm::Vm* vm_;
  mutable uint64_t cached_page_ = UINT64_MAX;  // virtual offset of the page last translated
  mutable uint64_t cached_pool_ = 0;           // and its pool offset
  // The records, in the order they were made (replay keeps it), built as
  // the redo transaction itself: Commit hands it to the log as it is.
  medium::Tx tx_;
  // The 8-byte stores again, (pool offset, value) in order, for Load64.
  std::vector<std::pair<uint64_t, uint64_t>> words_;
};

}  // namespace mapfs::meta
