// FileData: the data path of a contiguous file (ctFS).
//
// A regular file is one partition of the virtual region: byte i of the file
// is at partition start + i, so read and write are one copy and the MMU does
// the file mapping. The inode's partition word names the partition and its
// level; a file without data has none.
//
// Growth past the partition allocates the smallest fitting level and moves
// the file's pages into it with pswap; the new partition word commits in the
// same redo transaction as the swap, so a crash shows the file whole in
// either partition. Truncation to a smaller level moves the pages down the
// same way; within a level, pages past the end of a large file go back to
// the pool.
//
// Invariant (zero on extend): bytes past the file size are undefined on the
// medium, backed or not: pool pages are reused without being zeroed
// (resident medium, vm/page_alloc.h), so a page past the end may hold a
// deleted file's bytes. Every operation that moves the size up zeroes the
// bytes it exposes and does not write itself, and makes them durable before
// the new size can be. So neither a truncation nor a crashed write needs to
// clean up past the end, and an append of whole pages zeroes nothing.
// Below the size, an unbacked page is a hole and reads as zero; backing it
// zeroes it first (Prepare), so a crash never shows a former owner's bytes.
//
// Consistency modes (DESIGN.md): posix writes data with non-temporal stores
// and publishes the size without waiting (but never before the data when
// the size grows: see the invariant above); sync fences data, then persists
// the size; strict makes each write all-or-nothing: appends publish the size
// after the data; overwrites of large files (L3 and up, 4 KiB pages, not
// mapped) write whole pages once to fresh pages and swap them in page by
// page (StrictSwap), or through a staging range when very large; the rest
// (partial pages, small files, 2 MiB pages) goes through the redo log, or
// in place for a mapped file too large for the log.
//
// Callers hold the inode's lock: read for Read, write for everything else.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "meta/fs_format.h"

namespace mapfs::medium {
class Pool;
class Tx;
}
namespace mapfs::vm {
class Vm;
}
namespace mapfs::space {
class Partitions;
}
namespace mapfs::map {
class Mapper;
struct Cursor;
struct Mapping;
}

namespace mapfs::file {

enum class Mode : uint32_t { kPosix = 0, kSync = 1, kStrict = 2 };

// `len` bytes of a file at pool offset `pool_off` (MapPool).
struct PoolRun {
  uint64_t pool_off;
  uint64_t len;
};

class FileData {
 public:
  FileData(medium::Pool* pool, vm::Vm* vm, space::Partitions* space);
  ~FileData();

  // Block-mapped pools (HashFS study, issue 14; block_file.cc): regular
  // files keep their data in 4 KiB blocks of the pool's mapping area, found
  // through `mapper`, and have no partition. Every call below then needs
  // the file's inode number (`ino`); contiguous pools ignore it.
  void UseBlocks(std::unique_ptr<map::Mapper> mapper);
  bool block_mapped() const { return mapper_ != nullptr; }
  map::Mapper* mapper() const { return mapper_.get(); }
  // Frees every block of `ino`, an unreachable inode (zeroed first: free
  // blocks read as zero).
  Status ReleaseBlocks(uint64_t ino, const meta::format::Inode* in);
  // Frees the staging blocks every mount slot may have left (recovery).
  Status ClearAllStaging();
  // Recovery: frees the blocks a crashed write or allocation left past the
  // end of `ino` (between its size and its blocks_end).
  Status TrimBlocks(uint64_t ino, meta::format::Inode* in);

  // fsck of a block-mapped pool (block_check.cc): what the mapping area
  // maps, against the inodes. `inode(ino)` is inode `ino` or null (out of
  // range). Findings, one per inode and kind: blocks mapped twice (not
  // freeable: two owners claim them); blocks of an inode that is not a live
  // regular file (an orphaned mapping); blocks at or past a file's
  // blocks_end (no write maps there: the invariant recovery relies on);
  // staging blocks when `alone` (no other mount may be mid-write: on a
  // clean pool they are all freed). The mapper's own Check runs apart.
  struct BlockFinding {
    uint64_t ino = 0;
    uint64_t from = 0, to = 0;  // file blocks [from, to) holding the mappings
    uint64_t blocks = 0;        // mapped blocks in that range
    bool freeable = false;      // RepairBlock may free them
    std::string what;
  };
  using InodeFn = std::function<const meta::format::Inode*(uint64_t)>;
  Status CheckBlocks(const InodeFn& inode, bool alone, std::vector<BlockFinding>* out);
  // fsck --repair: zeroes, then unmaps, the blocks of a freeable finding.
  Status RepairBlock(const BlockFinding& f);
  // fsck of a block-mapped file's size and blocks_end (block_check.cc):
  // every call that raises the size raises blocks_end first (durably), so
  // on any pool, crashed or not, size <= blocks_end; and blocks_end is a
  // multiple of 4 KiB no larger than the largest file. "" if both hold,
  // else what is wrong. Holes are no finding: a sparse file's size is
  // covered by blocks_end whether or not blocks back it.
  std::string CheckBlockSize(uint64_t ino, const meta::format::Inode* in) const;
  // --repair of such a file: the size becomes at most the end of its last
  // mapped block (no mapped byte below the size is lost; nothing past that
  // was written), and blocks_end covers it and every mapped block below
  // the size. `what` says what changed.
  Status RepairBlockSize(uint64_t ino, meta::format::Inode* in, std::string* what);

  // Largest file size: the largest partition below the top level.
  uint64_t max_size() const { return max_size_; }
  // Strict overwrites of up to this many whole pages replace them page by
  // page (StrictSwap); larger ones swap a staging range (tests lower it to
  // reach that path with small files).
  void set_strict_swap_max_pages(uint64_t n) { strict_swap_max_pages_ = n; }

  // Copies up to n bytes at `off` into buf; returns the count (0 at EOF).
  Result<size_t> Read(const meta::format::Inode* in, void* buf, size_t n, uint64_t off, uint64_t ino = 0);
  // Writes n bytes at `off`, growing the file. EFBIG beyond max_size(),
  // ENOSPC when the pool is full (the file is then unchanged).
  //
  // `mapped` (here and below): the file is, or was, mapped — a pointer to
  // the data is out (mapfs_mmap) or a process maps its pool pages
  // (MapPool). Its data then never leaves its pool pages: growth moves them
  // with pswap (never by copy), strict writes go in place, truncation keeps
  // the partition and every page (zeroing what lies past the end).
  Result<size_t> Write(meta::format::Inode* in, uint64_t in_voff, const void* buf, size_t n, uint64_t off,
                       Mode mode, bool mapped = false, uint64_t ino = 0);
  // Sets the size (up: zeros; down: frees what is no longer needed).
  Status Truncate(meta::format::Inode* in, uint64_t in_voff, uint64_t size, Mode mode, bool mapped = false,
                  uint64_t ino = 0);
  // fallocate(2) modes 0, FALLOC_FL_KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE.
  Status Fallocate(meta::format::Inode* in, uint64_t in_voff, int fmode, uint64_t off, uint64_t len, Mode mode,
                   bool mapped = false, uint64_t ino = 0);
  // For a shared memory map of the pool file: backs [off, off+len) of the
  // file (page aligned; grows the partition, never the size) and returns
  // the pool runs behind it in file order. The caller must treat the file
  // as mapped from now on (every call above with mapped = true), so that
  // these pool pages stay the file's.
  Status MapPool(meta::format::Inode* in, uint64_t in_voff, uint64_t off, uint64_t len, std::vector<PoolRun>* runs,
                 uint64_t ino = 0);
  // Makes the file's data and attributes durable. `mapped`: the file may
  // have been written through a pointer, so its cache lines are written back.
  void Sync(const meta::format::Inode* in, bool mapped, uint64_t ino = 0);
  // Frees the file's partition (the inode is being freed).
  Status Release(meta::format::Inode* in, uint64_t in_voff);
  // A pointer to the file's bytes [0, capacity), mapped in this process;
  // nullptr if the file has no partition (always, for block-mapped files).
  char* Pointer(const meta::format::Inode* in);
  uint64_t Capacity(const meta::format::Inode* in) const;
  // Pool bytes the file occupies (st_blocks * 512).
  uint64_t AllocatedBytes(const meta::format::Inode* in, uint64_t ino = 0);

 private:
  static int LevelFor(uint64_t bytes);
  // Makes the partition hold at least `need` bytes (no data changes).
  // EUCLEAN unless the inode's partition word names a partition that can
  // exist: a file level below the top, aligned to its size, inside the
  // region (damage must fail a call, never send a copy outside the region).
  Status CheckPart(const meta::format::Inode* in) const;
  Status Grow(meta::format::Inode* in, uint64_t in_voff, uint64_t need, bool mapped);
  // Moves the file to a partition of `level` (smaller), keeping `keep` bytes.
  Status Shrink(meta::format::Inode* in, uint64_t in_voff, int level, uint64_t keep);
  struct Patch {
    const void* data;
    size_t n;
    uint64_t off;
  };
  // Moves the file to a new partition of `level` by copying its first
  // `keep` bytes (and applying `patch`), then publishes partition and size
  // in one transaction.
  Status MoveByCopy(meta::format::Inode* in, uint64_t in_voff, int level, uint64_t keep, const Patch* patch,
                    uint64_t new_size);
  // Backs and maps [off, off+n) of the file's partition.
  Status Prepare(const meta::format::Inode* in, uint64_t off, uint64_t n);
  // Copies n bytes into the region at `voff` (backed), through the pool
  // view where the pool pages are contiguous (Vm::PoolRun): no page faults
  // on ranges the region has just remapped.
  void CopyIn(uint64_t voff, const void* buf, size_t n);
  // The same from one backed range of the region to another.
  void CopyWithin(uint64_t dst, uint64_t src, uint64_t n);
  // Zeroes [from, to) of the file (both inside the partition).
  Status Zero(const meta::format::Inode* in, uint64_t from, uint64_t to);
  Status StrictOverwrite(meta::format::Inode* in, uint64_t in_voff, const void* buf, size_t n, uint64_t off, bool mapped,
                         uint64_t new_size);
  // Write-and-swap (ctFS): the whole pages of [off, off+n) are written to
  // fresh pool pages and published by replacing the file's page-table
  // entries; partial head and tail pages go through the redo log in the
  // same commit. The range is backed; the file owns its chunks.
  Status StrictSwap(meta::format::Inode* in, uint64_t in_voff, const void* buf, size_t n, uint64_t off,
                    uint64_t new_size);

  void PublishSize(meta::format::Inode* in, uint64_t size, Mode mode, bool data_fenced);
  // Records the inode's size, mtime and ctime (= now) in `tx`; EUCLEAN if
  // the inode at `in_voff` is not backed.
  Status PutSizeAndTimes(uint64_t in_voff, uint64_t size, uint64_t now, medium::Tx* tx);

  // The block engine (block_file.cc).
  Result<size_t> BlockRead(uint64_t ino, const meta::format::Inode* in, void* buf, size_t n, uint64_t off);
  Result<size_t> BlockWrite(uint64_t ino, meta::format::Inode* in, uint64_t in_voff, const void* buf, size_t n,
                            uint64_t off, Mode mode);
  Status BlockTruncate(uint64_t ino, meta::format::Inode* in, uint64_t size, Mode mode, bool mapped);
  Status BlockFallocate(uint64_t ino, meta::format::Inode* in, int fmode, uint64_t off, uint64_t len, Mode mode,
                        bool mapped);
  Status BlockMapPool(uint64_t ino, meta::format::Inode* in, uint64_t off, uint64_t len, std::vector<PoolRun>* runs);
  void BlockSync(uint64_t ino, const meta::format::Inode* in, bool mapped);
  uint64_t BlockAllocated(uint64_t ino, const meta::format::Inode* in);
  // Inode numbers of files are below this; the kMaxMounts numbers from it
  // are the mount slots' staging inodes.
  uint64_t FileInoLimit() const;
  // The mapper's Lookup, under the kMap lock where the design needs it.
  int LookupBlock(map::Cursor* c, uint64_t ino, uint64_t fblk, map::Mapping* m);
  Status BlockStagedOverwrite(map::Cursor* c, uint64_t ino, uint64_t in_voff, const char* src, size_t n, uint64_t off,
                              uint64_t new_size);
  Status ClearStaging(uint64_t s_ino);
  // Makes blocks_end cover `end` (durably, in 1 MiB steps) before blocks
  // up to there are mapped.
  void RaiseBlocksEnd(meta::format::Inode* in, uint64_t end);
  // Makes the medium back the chunks of the mapping area that hold
  // [pool_off, pool_off + len); ENOSPC when it is full.
  Status Backed(uint64_t pool_off, uint64_t len);
  // Maps every unmapped block of [from, to) (bytes) to a fresh, zero block.
  Status MapBlocks(map::Cursor* c, uint64_t ino, uint64_t from, uint64_t to);
  // Calls fn(file offset, pool offset or ~0 for a hole, bytes) for the
  // runs of [from, to) in order; stops at the first error.
  template <typename Fn>
  Status ForRuns(map::Cursor* c, uint64_t ino, uint64_t from, uint64_t to, Fn&& fn);
  // Calls fn(file offset, pool offset, bytes) for the mapped pieces of
  // [from, to), in no particular order; stops at the first error. Unlike
  // ForRuns its cost does not grow with the holes (Mapper::ForEachMappingIn):
  // the walks over a whole file use it.
  template <typename Fn>
  Status ForMapped(map::Cursor* c, uint64_t ino, uint64_t from, uint64_t to, Fn&& fn);
  // The end (bytes) of the last block of `ino` mapped below byte `to`; 0 if none.
  Result<uint64_t> MappedEnd(uint64_t ino, uint64_t to);
  // Zeroes the mapped bytes of [from, to) with non-temporal stores.
  Status ZeroBlocks(map::Cursor* c, uint64_t ino, uint64_t from, uint64_t to);
  // Zeroes, then unmaps, the whole blocks from file block `fblk` on, up
  // to byte `to` (blocks past it are unmapped without zeroing).
  Status FreeBlocks(map::Cursor* c, uint64_t ino, uint64_t fblk, uint64_t to);

  medium::Pool* pool_;
  vm::Vm* vm_;
  std::unique_ptr<map::Mapper> mapper_;
  std::mutex staging_mu_;  // this process's staging inode (one per mount slot)
  // 2 MiB chunks of the mapping area this process has made the medium back.
  std::unique_ptr<std::atomic<uint64_t>[]> populated_;
  space::Partitions* space_;
  uint64_t max_size_;
  // 2,048 entries (48 KiB of redo records) per commit; past that, a staging
  // range swaps whole chunks as single entries.
  uint64_t strict_swap_max_pages_ = 2048;
};

int64_t NowNs();

}  // namespace mapfs::file
