// Internals shared by cib.cc (operations), cib_split.cc (block splits,
// overflow blocks, index growth) and cib_check.cc (fsck). Not part of the
// layer's interface.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/bytes.h"
#include "dir/cib.h"
#include "dir/cib_format.h"
#include "vm/vm.h"

namespace mapfs::dir::internal {

namespace f = format;

uint64_t NameHash(uint64_t seed, std::string_view name);
uint64_t Mix64(uint64_t x);
// EINVAL / ENAMETOOLONG for names a directory cannot hold.
Status ValidName(std::string_view name);
// Elements per index array, honouring the test cap.
int TopCap();
int NodeCap();

inline uint64_t Bit(int i) { return uint64_t{1} << i; }
inline uint64_t SlotVoff(uint64_t blk, int i) { return blk + f::SlotOff(i); }
inline uint64_t Cookie(uint64_t hash) { return (hash >> 1) < 3 ? 3 : hash >> 1; }

// Computes the root header checksum.
uint32_t RootCrc(const f::Root& r);

// A list that keeps its first N elements inline and moves to the heap only
// past them: a block's overflow group is one block in all but the rarest
// directories (names sharing one 64-bit hash), and a lookup should not
// allocate for it.
template <typename T, size_t N>
class SmallVec {
 public:
  void clear() {
    n_ = 0;
    heap_.clear();
  }
  void push_back(const T& v) {
    if (n_ < N) {
      inl_[n_++] = v;
      return;
    }
    if (n_ == N) heap_.assign(inl_, inl_ + N);
    heap_.push_back(v);
    n_++;
  }
  size_t size() const { return n_; }
  const T* begin() const { return n_ <= N ? inl_ : heap_.data(); }
  const T* end() const { return begin() + n_; }
  const T& operator[](size_t i) const { return begin()[i]; }

 private:
  T inl_[N];
  std::vector<T> heap_;
  size_t n_ = 0;
};

// One position of a descent: an index array and the element taken.
struct Level {
  uint64_t node = 0;   // 0: the root's top array
  uint64_t arr = 0;    // virtual offset of element 0
  int count = 0;
  int idx = 0;
  int level = 0;       // level of the children's array owner: depth for the root
};
// The levels of one descent, root first, kept inline: a lookup allocates
// nothing. Open() bounds the depth, so a descent never has more. The slots
// are raw storage, written by push_back before they are read: constructing
// 17 Levels (their member initialisers) cost a lookup ~90 stores for the
// one or two levels it uses.
class LevelStack {
 public:
  static constexpr int kCap = f::kMaxDepth + 1;
  void clear() { n_ = 0; }
  bool push_back(const Level& l) {
    if (n_ == kCap) return false;
    std::memcpy(static_cast<void*>(&raw_[n_++ * sizeof(Level)]), &l, sizeof l);
    return true;
  }
  size_t size() const { return static_cast<size_t>(n_); }
  const Level& operator[](size_t i) const { return reinterpret_cast<const Level*>(raw_)[i]; }

 private:
  static_assert(std::is_trivially_copyable_v<Level> && std::is_trivially_destructible_v<Level>);
  alignas(Level) unsigned char raw_[kCap * sizeof(Level)];
  int n_ = 0;
};
struct Path {
  LevelStack levels;  // root first
  uint64_t block = 0;
  uint64_t lo = 0, hi = 0;    // the block's range
};

// The pending view of one block: bitmaps on media (M) and as the caller's
// transaction would leave them (P), and the slots in use in either.
struct PendBlock {
  uint64_t voff = 0;
  uint64_t M = 0, P = 0, LM = 0, LP = 0;
  uint64_t occupied = 0;  // heads and continuation slots of M | P
  int FreeSlots() const { return __builtin_popcountll(f::kSlotMask & ~occupied); }
};

// One operation on one directory. Reads go through the vm's mapping; every
// value read from the pool is checked before it is trusted.
class Dir {
 public:
  Dir(const Env& env, uint64_t root) : env_(env), root_(root) {}

  // Validates the root (placement, magic, version, checksum, counters).
  Status Open();

  const Env& env() const { return env_; }
  uint64_t root() const { return root_; }
  const f::Root* r() const { return r_; }
  uint64_t seed() const { return r_->seed; }
  uint64_t Hash(std::string_view name) const { return NameHash(r_->seed, name); }

  template <typename T>
  T* At(uint64_t voff) const { return reinterpret_cast<T*>(env_.vm->at(voff)); }
  // A virtual offset that may name one of this directory's partitions:
  // every one was written whole at creation, so its page is backed (a
  // damaged reference to an unbacked page must fail, not fault).
  // Vm::Readable answers from the chunk this process mapped whole when it
  // can, and walks the PPT otherwise.
  bool Plausible(uint64_t voff) const {
    return voff != 0 && voff % f::kPartSize == 0 && voff <= env_.vm->size() - f::kPartSize &&
           env_.vm->Readable(voff, f::kPartSize);
  }
  Status Damaged(uint64_t voff, const std::string& what) const;

  // Header checks of a block of `kind` / a node of `level`.
  Status CheckBlock(uint64_t voff, uint16_t kind) const;
  Status CheckNode(uint64_t voff, int level) const;

  // Index descent to the primary block whose range holds `h`.
  Status Descend(uint64_t h, Path* p) const;

  // Slot access: as on media (tx null) or as `tx` would leave it.
  Status ReadSlot(uint64_t blk, int i, const meta::MetaTx* tx, f::Slot* out) const;
  Status ReadWord(uint64_t voff, const meta::MetaTx* tx, uint64_t* out) const;
  // The name of the entry whose head is `head`; returns its length in *len.
  Status ReadName(uint64_t blk, const f::Slot& head, const meta::MetaTx* tx, char* out, size_t* len) const;

  Status LoadPend(uint64_t blk, const meta::MetaTx* tx, PendBlock* pb) const;
  // Finds the live (pending view) head with this hash and name; -1 if none.
  Status FindInBlock(const PendBlock& pb, uint64_t h, std::string_view name, const meta::MetaTx* tx,
                     int* slot) const;
  // The primary block for `h` and its overflow chain, in chain order.
  using BlockList = SmallVec<uint64_t, 4>;
  Status Group(uint64_t h, BlockList* blocks, Path* path) const;

  // Structural changes (cib_split.cc). Each commits its own transaction
  // and leaves the directory's contents unchanged; `tx` is the caller's
  // pending transaction, fixed up so that it still describes its changes.
  Status Split(const Path& path, uint64_t h_new, int need_new, meta::MetaTx* tx);
  Status AddOverflow(const Path& path);

 private:
  Env env_;
  uint64_t root_;
  const f::Root* r_ = nullptr;
};

}  // namespace mapfs::dir::internal
