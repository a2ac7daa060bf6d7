// Cib: CIB directories (content-indexed browsing), see src/dir/README.md and
// docs/FORMAT.md ("Directories") for the layout.
//
// A directory is its own index: fixed-size entries keyed by a 64-bit name
// hash, kept in blocks that each hold one hash range, blocks linked in range
// order and reachable through an array of (min hash, block) in range order
// (cut into 4 KiB index nodes once it outgrows the root). Lookup, insert and
// delete binary-search that array, then look at one block: O(log n), no
// scan. Delete clears one validity bit. A full block splits: the upper half
// is copied to a new block first, then one redo transaction links it.
//
// Cib keeps no state of its own; everything is in the pool. It takes no
// locks: callers hold the directory's lock (read lock for Lookup, Count,
// List, Check, ForEachPartition; write lock for everything else).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "meta/meta_tx.h"

namespace mapfs::medium {
class Pool;
}
namespace mapfs::vm {
class Vm;
}
namespace mapfs::space {
class Partitions;
}

namespace mapfs::dir {

struct Env {
  medium::Pool* pool;
  vm::Vm* vm;
  space::Partitions* space;
};
struct Entry {
  uint64_t ino;
  uint8_t type;  // DT_REG, DT_DIR, DT_LNK ... (<dirent.h> values)
};
// Where a lookup found an entry: its block and head slot. Valid only as a
// hint: the entry may have been removed or moved (a split) since.
struct EntryLoc {
  uint64_t block = 0;  // 0: unknown
  int slot = -1;
};
constexpr size_t kMaxName = 255;
// Where Insert would put a name: found by Cib::FindForInsert, used by
// Cib::InsertAt. The block's words as they were then on media.
struct InsertSpot {
  uint64_t hash = 0;
  uint64_t block = 0;  // 0: no block of the name's group had room (InsertAt splits)
  uint64_t bitmap = 0, longmap = 0;
  uint64_t occupied = 0;  // slots in use: heads and continuation slots
};

struct CibStats {
  uint64_t entries = 0;
  uint64_t blocks = 0;  // primary + overflow
  uint64_t nodes = 0;   // index nodes
  uint32_t depth = 0;   // index node levels below the root
};

class Cib {
 public:
  explicit Cib(Env env);

  // Creates an empty directory (two L0 partitions: root and first block),
  // durable on return; returns the root's virtual offset, which the inode
  // stores. Until the caller links it, a crash leaks both partitions
  // (ForEachPartition lets recovery find them).
  Result<uint64_t> Create();

  // ENOENT if absent; ENAMETOOLONG / EINVAL for names Insert would refuse.
  // Where it was found goes to *loc when given.
  Result<Entry> Lookup(uint64_t root, std::string_view name, EntryLoc* loc = nullptr);
  // True when `name` still names `ino` from the slot at `loc` (an earlier
  // Lookup's): one block searched instead of a descent, for callers that
  // looked a name up without the directory's lock and must check, under
  // it, that the name still stands. False (never an error) when the entry
  // was removed or moved (a split), or `loc` does not name a block of this
  // directory: the caller then looks up again.
  bool StillNames(uint64_t root, const EntryLoc& loc, std::string_view name, uint64_t ino);

  // Adds the entry's stores to `tx`, which the caller commits together with
  // its inode changes. EEXIST if present, ENAMETOOLONG if longer than 255
  // bytes, EINVAL for an empty name, ".", "..", or a name holding '/' or
  // NUL. Preparation that needs new blocks (a split, an overflow block, index
  // growth) is done and committed before returning, in transactions of its
  // own that leave the directory's contents unchanged; ENOSPC when the pool
  // is full (contents unchanged). Any number of Insert/Remove/Replace calls,
  // on one or several directories, may share `tx`: each reads the others'
  // pending stores through tx->Load64.
  Status Insert(uint64_t root, std::string_view name, Entry e, meta::MetaTx* tx);
  // The lookup of a caller that holds the directory's write lock and will
  // insert `name` if it is absent: one descent answers both. The entry if
  // present (as Lookup, where it is in *loc when given); else ENOENT with
  // *spot set for InsertAt.
  Result<Entry> FindForInsert(uint64_t root, std::string_view name, InsertSpot* spot, EntryLoc* loc = nullptr);
  // Insert at `spot` (FindForInsert's, for this name, under the write lock
  // held since): the entry's stores without a second search. A spot stands
  // while its block's bitmap and long-name words are unchanged on media and
  // `tx` holds no Store64 into the block (MetaTx::StoresIn sees those only:
  // no caller writes a directory block with StoreBytes in the same
  // transaction); otherwise (or spot.block 0) this is Insert, which
  // searches and makes room.
  Status InsertAt(uint64_t root, const InsertSpot& spot, std::string_view name, Entry e, meta::MetaTx* tx);
  // ENOENT if absent. Adds one bitmap word (one bit cleared) and the count.
  Status Remove(uint64_t root, std::string_view name, meta::MetaTx* tx);
  // Remove without the search, for a caller that holds the directory's
  // write lock and, under it, saw StillNames(root, loc, name, ...) say true
  // (or a Lookup find `name` at `loc`). Only changes committed under that
  // lock can have moved the entry since, and every one of them (a split or
  // an overflow of this directory, by an Insert sharing `tx`) clears its
  // media bit where it was; so the entry is still at `loc` exactly when
  // its bit is set on media and in tx's pending view, and then this clears
  // it as Remove would. Otherwise (or loc.block 0) it is Remove.
  Status RemoveAt(uint64_t root, const EntryLoc& loc, std::string_view name, meta::MetaTx* tx);
  // Changes the inode and type of an existing entry. ENOENT if absent.
  Status Replace(uint64_t root, std::string_view name, Entry e, meta::MetaTx* tx);

  // Number of entries (not counting "." and ".."); O(1).
  Result<uint64_t> Count(uint64_t root);

  // readdir: calls fn for every entry whose cookie is > `after`, in cookie
  // order, until fn returns false. Cookies are max(3, hash >> 1): stable
  // while other entries come and go and blocks split. Entries sharing a
  // cookie are all delivered before a stop is honoured, so resuming from the
  // last cookie seen misses nothing and repeats nothing.
  Status List(uint64_t root, uint64_t after,
              const std::function<bool(uint64_t cookie, std::string_view name, Entry e)>& fn);

  // Frees every partition of the directory (after rmdir committed).
  Status Destroy(uint64_t root);
  // Calls fn for every partition (virtual offset) the directory owns. On
  // damage, reports what it could reach and returns EUCLEAN.
  Status ForEachPartition(uint64_t root, const std::function<void(uint64_t voff)>& fn);

  // fsck: verifies every invariant (docs/FORMAT.md, "Directories") and reports the
  // first problem with its virtual offset (EUCLEAN). Appends every entry to
  // `entries` when given.
  Status Check(uint64_t root, std::vector<std::pair<std::string, Entry>>* entries = nullptr);

  // Counters from the root (no walk).
  Result<CibStats> Stats(uint64_t root);

 private:
  Env env_;
};

// Test hook: replaces the 64-bit name hash (e.g. with one that collides a
// lot). nullptr restores the default (seeded per directory).
void SetHashForTesting(uint64_t (*fn)(std::string_view));
// Test hook: caps the elements per index array (root and nodes) at `cap`
// (>= 3) so that deep indexes can be tested with few entries. 0 restores.
// Only changes when arrays split, never how they are read.
void SetIndexCapacityForTesting(int cap);

}  // namespace mapfs::dir
