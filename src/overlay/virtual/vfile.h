// VFile: one process's handle on one virtualized file (format.h), shared by
// every OverlayFile of that file in the process.
//
// Concurrency (threads and processes at once, docs/OVERLAY.md):
// - A write copies its data to fresh blocks, then commits with ONE
//   compare-and-swap of the log slot at the tail. Writers never lock; a
//   writer that loses the race moves to the next slot and, if a block it
//   read-modify-wrote changed meanwhile, recopies that block first.
// - Each process replays committed entries, in log order, into a private
//   (DRAM) table; reads look a block up as the newer (by tag) of that table
//   and the checkpointed table in the file. Readers take no lock and never
//   wait for a writer or the GC: a read copies a block, then checks that
//   the block's mapping did not change while it copied, else retries. Only
//   the replay of entries this process has not seen yet is serialised by a
//   per-process mutex.
// - The GC (checkpoint) applies the log into the file's table, in order,
//   under a cross-process lock word (owner pid; a dead owner's lock is
//   taken over), then frees superseded data and record blocks. Readers of a
//   freed block notice the changed mapping and retry.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "medium/persist.h"
#include "overlay/engine.h"
#include "overlay/virtual/format.h"

namespace mapfs::overlay::vrt {

// Internal code of a commit refused because a direct map holds a block it
// would move (VFile::Commit): the caller plans the write again (in place).
// Never returned to a caller of VFile.
inline constexpr int kMappedNow = ESTALE;
// Bit 63 of a mapper slot: the mapper's barrier commit has landed
// (vdirect.cc DirectBegin); set only by the slot's owner.
inline constexpr uint64_t kMapperReady = uint64_t{1} << 63;

struct FormatOptions {
  uint32_t log_slots = 16384;          // power of two >= 64
  uint32_t vblocks_max = 1u << 20;     // 4 GiB of content
  uint32_t pblocks_max = 1u << 22;     // 16 GiB file
};

// Writes an empty virtualized file's metadata into `fd` (an empty regular
// file opened read-write). Durable on return.
Status Format(int fd, const FormatOptions& o = {});
// The size Format gives the file before it writes the header (its first
// step): a file of this size whose header is zeros may be mid-format.
uint64_t FormatSize(const FormatOptions& o = {});
// True if the file starts with the format's magic (a short or plain file is
// not virtualized). Errors only for I/O failures.
Result<bool> IsVirtualized(int fd);

// Reads and checks the meta block header of the virtualized file open as
// `fd` (magic, checksum, version, geometry, a file long enough for its
// metadata): EINVAL for a plain file, EUCLEAN with a message on damage.
Result<pmem::MetaHeader> ReadHeader(int fd);
// The content size of the virtualized file open as `fd` (readable), as an
// attach would find it after recovery (the checkpointed size, then the log
// since the checkpoint), without attaching: a read-only map of the meta
// block and the log, and a read of each record block the log names. Every
// entry is bounds-checked as a replay checks it (EUCLEAN on damage). For a
// stat of a file this process does not hold (vstat.cc).
Result<uint64_t> ContentSize(int fd);

class VFile {
 public:
  // Attaches to the virtualized file open as `fd` (not taken: VFile
  // reopens it through /proc/self/fd with O_RDWR, or O_RDONLY if
  // !writable). Validates the header and replays the log since the last
  // checkpoint (recovery): EUCLEAN with a message on damage.
  static Result<std::unique_ptr<VFile>> Attach(int fd, bool writable, Mode mode);
  // How the descriptor VFile opened of its own is closed when it goes
  // (default: close). The engine closes it through Opens: a close while
  // the application holds the inode open would drop its record locks.
  void SetCloser(std::function<void(int)> closer) { closer_ = std::move(closer); }
  ~VFile();
  VFile(const VFile&) = delete;
  VFile& operator=(const VFile&) = delete;

  Result<size_t> Pread(void* buf, size_t n, uint64_t off);
  // Content [off, off+n) into the file `out` at out_off, copied by the
  // kernel (no page of either file mapped here; see vview.cc, Fill): what
  // Pread would return; holes are left unwritten in `out` (which must read
  // zeros there: a fresh file). The count copied (short at the end), or
  // the kernel's error.
  Result<size_t> CopyOut(int out, uint64_t out_off, size_t n, uint64_t off);
  // Pread with the copy made by the kernel (pread of the file's blocks, run
  // by run): nothing of the file is mapped here for it. Into memory that
  // is already populated (a reused view), one copy and no fault.
  Result<size_t> PreadByKernel(void* buf, size_t n, uint64_t off);
  Result<size_t> Pwrite(const void* buf, size_t n, uint64_t off);
  Result<uint64_t> Append(const void* buf, size_t n);
  Result<uint64_t> Size();
  Status Truncate(uint64_t size);
  Status Sync();
  // Checkpoints the log into the table and frees superseded blocks. Waits
  // for another process's GC only if `wait`.
  Status Gc(bool wait);

  // Writable shared maps of the file's own blocks (vdirect.cc): the kernel
  // maps the physical blocks, so every process mapping them, and the
  // engine's stores through base_, share one page cache.
  // DirectBegin registers this process as a mapper of the file (first
  // call: a slot of MetaMappers, then a no-op commit that orders every
  // commit made without seeing the slot before the caller's lookups);
  // EAGAIN if every slot is held by a live process. The slot is claimed
  // first (commits refuse to move mapped blocks), ready once the barrier
  // has landed (writers may store in place). DirectEnd undoes one
  // DirectBegin; the last one frees the slot (in-place writers still
  // storing hold their own slots: Commit refuses moves while any is set).
  Status DirectBegin();
  void DirectEnd();
  // A run of the content [vblock, vblock+n) held by physical blocks
  // [phys, phys+n); phys 0: past the end of the content (no block).
  struct DirectRun {
    uint64_t vblock;
    uint32_t phys;
    uint32_t n;
  };
  // The runs of content [off, off+len) (off a block multiple) once every
  // hole below the end is given a zeroed block (a commit that lands only
  // on a hole). Only between DirectBegin and DirectEnd: the blocks then
  // stay the content's until DirectEnd.
  Result<std::vector<DirectRun>> DirectRuns(uint64_t off, size_t len);
  int map_fd() const { return fd_; }

  const pmem::MetaHeader& header() const { return hdr_; }
  bool dax() const { return dax_; }
  bool writable() const { return writable_; }
  // For handles kept attached after their last close (engine.cc): the
  // file's last name is gone (its blocks go back to the kernel only when
  // the handle does), and the blocks waiting in limbo for calls that
  // have returned go back to the bitmap now rather than at the handle's end.
  bool Unlinked() const;
  void ReclaimIdle() {
    if (writable_) Reclaim(false);
  }
  // fsck: checks the table, the log since the checkpoint and the bitmap
  // against each other (vcheck.cc). EUCLEAN with a message on damage.
  Status Check(std::string* report);
  // For fsck and tests: the file's mapping and the content block a virtual
  // block maps to now (0 = hole), after replaying the log.
  const char* base() const { return base_; }
  Result<uint32_t> PhysOf(uint64_t vblock);

 private:
  class Pin;
  VFile() = default;
  // CopyOut and PreadByKernel: the content [off, off+n) run by run of
  // physically consecutive blocks (or holes), each run checked against the
  // table after its copy and copied again if it changed. data(phys_off,
  // at, len) copies a long run of blocks, hole(at, len, retried) a run of
  // holes (`retried`: an earlier pass may have written there), and
  // scattered(iov, cnt, at) the content from `at` on, consecutive, whose
  // pieces are short runs read through this process's map of the file
  // (iov: base_ + their offsets), up to kScatterBlocks blocks at a time:
  // a file written by small appends is mostly runs of one block (each
  // partial block is copied on write), and a copy per run cost a system
  // call or two each (docs/OVERLAY.md, "Small appends").
  template <typename Data, typename Scattered, typename Hole>
  Result<size_t> ByRuns(size_t n, uint64_t off, Data data, Scattered scattered, Hole hole);
  Status Map(int fd, bool writable);
  pmem::MetaShared* shared() const { return reinterpret_cast<pmem::MetaShared*>(base_ + pmem::kSharedOffset); }
  uint64_t* slot(uint64_t seq) const { return log_ + (seq & (hdr_.log_slots - 1)); }
  // A record block this thread has just committed (entry `seq`, block
  // `phys`) and its bytes: its replay reads them here rather than through
  // the map, where a block written by pwrite is not mapped yet (a page
  // fault per small append).
  struct OwnRecord {
    uint64_t seq;
    uint32_t phys;
    const char* bytes;
  };
  // Brings the DRAM table and size up to the first empty log slot.
  Status CatchUp(const OwnRecord* own = nullptr);
  Status CatchUpLocked(const OwnRecord* own);
  // Validates entry `seq` and computes the size after it; with to_dtable,
  // also applies it to this process's table (the replay, under replay_mu_).
  // `record`: the bytes of its record block if the caller has them.
  // `rec_out` (kBlockSize bytes, or null): receives the record's header and
  // runs as validated (the GC applies them from there).
  Status ApplyEntry(uint64_t e, uint64_t seq, uint64_t* size, bool* recycled, bool to_dtable = true,
                    const char* record = nullptr, char* rec_out = nullptr);
  void SetDtable(uint64_t vblock, uint64_t entry);
  // The mapping (tagged table entry) of a virtual block now.
  Result<uint64_t> Lookup(uint64_t vblock) const;
  bool PhysOk(uint64_t phys) const;
  Status CheckPhys(uint64_t phys, const char* what) const;
  // One commit: at most kMaxRunBlocks blocks. `expect_size` (append)
  // commits only if the size at the commit point is that value.
  Result<size_t> WriteOnce(const char* buf, size_t n, uint64_t off, const uint64_t* expect_size, Pin* pin);
  // [vlo, vhi): the virtual blocks whose mapping the entry changes; with a
  // direct map of the file live, the commit is refused (kMappedNow) if one
  // of them is mapped, or with `sole_mapper` (a shrink by the only mapper,
  // whose own maps no longer hold them) if another process maps the file;
  // with `epoch` (DirectEpoch() read before the old bytes around the write
  // were copied) *retry_copy if a mapper registered since.
  Status Commit(uint64_t entry, uint64_t* seq_out, const uint64_t* head, uint64_t head_v,
                const uint64_t* tail, uint64_t tail_v, const uint64_t* expect_size, bool* retry_copy,
                uint64_t vlo = 0, uint64_t vhi = 0, bool sole_mapper = false, const uint64_t* epoch = nullptr);
  Status Durable(bool before_commit);
  // Direct maps (vdirect.cc). Mapped(): some mapper slot is set (one load
  // per word of two cache lines).
  pmem::MetaMappers* mappers() const { return reinterpret_cast<pmem::MetaMappers*>(base_ + pmem::kMappersOffset); }
  bool Mapped() const;
  uint64_t* direct_epoch() const { return reinterpret_cast<uint64_t*>(base_ + pmem::kDirectEpochOffset); }
  uint64_t DirectEpoch() const;
  // Some mapper slot is ready (kMapperReady: its barrier landed): only then
  // may a writer store in place.
  bool MappedReady() const;
  // Some writer holds an in-place slot (it may be storing into a block).
  bool InPlaceBusy() const;
  // Waiting for mappers and in-place writers (a refused commit's retry): a
  // yield, and now and then the slots of dead processes cleared.
  void AwaitMappers(unsigned* spins) const;
  // Some process other than this one holds a mapper slot.
  bool OthersMapped() const;
  // Clears the slots of `words` held by processes that are gone.
  void ClearDead(uint64_t* words, size_t n) const;
  // Whether a commit changing the mapping of virtual blocks [vlo, vhi)
  // would move a block a direct map holds (then it must not commit).
  Result<bool> MovesMapped(uint64_t vlo, uint64_t vhi) const;
  // Stores [buf, buf+n) at content offset `off` straight into the blocks
  // that hold it, while a process holds a direct map: the bytes written in
  // place from `off` on (consecutive mapped blocks), or 0 and in *cow the
  // bytes from `off` whose blocks are not mapped (holes, past the end:
  // copy-on-write them), or 0 and *cow 0 when no mapper is left.
  Result<size_t> WriteInPlace(const char* buf, size_t n, uint64_t off, size_t* cow);
  // Commits a record of no runs: size = max(size, `size`). With 0, a
  // barrier: every commit before it is replayed by whoever replays it.
  Status ExtendSize(uint64_t size);
  // Gives the hole `vblock` (table entry `was`) a zeroed block, unless it
  // stopped being a hole.
  Status FillHole(uint64_t vblock, uint64_t was, Pin* pin);
  // Sets or clears the ready bit of this process's mapper slot, if it has
  // one (under direct_mu_: the sole mapper's shrink, Truncate).
  void DirectReady(bool ready);
  std::mutex direct_mu_;
  size_t direct_maps_ = 0;   // DirectBegin calls not yet ended (under direct_mu_)
  int direct_slot_ = -1;     // the mapper slot claimed, -1 none
  uint64_t direct_pid_ = 0;  // the pid it holds (a fork child's is not its own)
  // Allocation from the bitmap (lock-free), growing the file by fallocate.
  // With `repin` (the caller's pin), blocks the log since the checkpoint
  // superseded are reused before the file grows: Alloc checkpoints (the
  // GC) and moves the caller's pin to the new epoch so that they leave
  // limbo at once. Only for callers that hold no block they looked up
  // under that pin (WriteOnce allocates before it looks anything up):
  // otherwise the GC could hand such a block out again while they read it.
  // `extends`: the blocks are for content past the end (the file grows in
  // larger steps for it: Grow).
  Status Alloc(uint32_t n, uint32_t* runs_phys, uint32_t* runs_len, uint32_t* nruns, uint32_t max_runs,
               Pin* repin = nullptr, bool extends = false);
  void Free(uint32_t phys, uint32_t n);
  // Grows the file by fallocate: by its data region's size for content
  // past the end (`extends`), else by an eighth of it; 64 KiB to 128 MiB.
  Status Grow(bool extends);
  Status GcLocked();
  bool TryGcLock();
  void GcUnlock();

  // Epochs (in-process reclamation of blocks the GC freed). Every call that
  // may look a block up runs pinned; the GC retires superseded blocks with
  // the epoch it ends, and they go back to the bitmap once no thread is
  // pinned at or before it. Other processes' readers are covered by the
  // validation of every copy (the mapping is looked up again after it).
  class Pin {
   public:
    explicit Pin(VFile* f);
    ~Pin();
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;
    // Moves the pin to the current epoch: the holder no longer relies on
    // any block it looked up before (Alloc's contract above).
    void Advance();

   private:
    VFile* f_;
    size_t slot_;
  };
  static constexpr size_t kPinSlots = 64;
  void Retire(std::vector<std::pair<uint32_t, uint32_t>>& blocks);
  void Reclaim(bool all);
  Result<size_t> PwriteUnpinned(const void* buf, size_t n, uint64_t off, Pin* pin);

  // Makes sure this process's page tables map blocks [phys, phys+n)
  // writable (readable for a read-only handle): per 2 MiB chunk of the
  // file, one madvise(MADV_POPULATE_*) fills it from the last populated
  // block up to the chunk's end or phys_end, instead of a page fault per
  // 4 KiB block (copy-on-write touches a fresh block on every write).
  // With pwrite_data_, not past max(phys+n, fresh_): fresh blocks stay
  // unpopulated (and unzeroed) for their pwrite.
  void Touch(uint64_t phys, uint64_t n = 1);
  // Per chunk: how many of its blocks, from its start, are populated.
  std::unique_ptr<std::atomic<uint16_t>[]> populated_;

  // Stores into the mapping. On DAX the mapping is the medium: data goes by
  // non-temporal stores, metadata lines are written back, and a fence makes
  // them durable. Elsewhere it is the page cache, made durable only by
  // fdatasync (Durable, Sync): a cache-line write-back buys nothing there
  // and costs a cache miss at the next touch of the line (clwb evicts it on
  // common CPUs: the log slot's next CAS, the bitmap word's next
  // allocation), so metadata words are plain stores, published in order by
  // the commit CAS (x86 keeps stores in order). Whole lines of data still
  // go by non-temporal stores: a fresh block's lines are cold, and a plain
  // store would first read each for ownership (measured: 0.8-1.0 us per 4
  // KiB overwrite against 1.1-1.3); a partial line (read-modify-write of a
  // block's edges) is plain, as the non-temporal copy would write its
  // edges back. The fence before the commit orders the non-temporal ones.
  // All go through the medium layer.
  void CopyData(char* dst, const void* src, size_t n) const {
    if (dax_ || ((reinterpret_cast<uintptr_t>(dst) | n) % 64) == 0)
      ::mapfs::medium::CopyNt(dst, src, n);
    else
      ::mapfs::medium::Write(dst, src, n);
  }
  void ZeroData(char* dst, size_t n) const;
  // Bytes for fresh blocks, written by the kernel (WritePieces): `len`
  // bytes from `src` at the start of block `phys` (whole blocks, the
  // record's included).
  struct Piece {
    uint64_t phys;
    const char* src;
    size_t len;
  };
  // Writes the pieces by pwritev on the file's descriptor instead of stores
  // through the map (pwrite_data_ only), one call per group of pieces that
  // follow each other in the file (sorted here by block). Errors: the
  // kernel's (ENOSPC, EIO...),
  // nothing committed yet.
  Status WritePieces(Piece* p, size_t n) const;
  void FlushMeta(const void* p, size_t n) const {
    if (dax_) ::mapfs::medium::Flush(p, n);
  }

  pmem::MetaHeader hdr_{};
  std::atomic<uint64_t> epoch_{1};
  std::atomic<uint64_t> pinned_[kPinSlots] = {};
  std::mutex limbo_mu_;
  struct Retired {
    uint32_t phys, n;
    uint64_t epoch;
  };
  std::vector<Retired> limbo_;
  Mode mode_ = Mode::kPosix;
  int fd_ = -1;
  std::function<void(int)> closer_;
  bool writable_ = false;
  bool dax_ = false;
  // Whole fresh data blocks go by pwrite, not through the map (tmpfs, set
  // at Map): the kernel's write fills a fallocated page without zeroing it
  // and maps nothing in the writer, while a store through the map first
  // populates the page (a zeroing, a page-table entry and, at munmap, its
  // removal: ~1.5 us a page here, docs/OVERLAY.md "Appends by pwrite").
  // The page cache is the map's, so readers through the map see the same
  // bytes; the commit CAS comes after pwrite returns, and fdatasync covers
  // both kinds of store, so the log protocol and every mode are unchanged.
  // Never on DAX (the map is the medium, stores are the cheap path).
  // Only for fresh blocks (at or past fresh_) of content past the end
  // (appends; vwrite.cc says why not rewrites): a block the kernel already
  // filled is cheaper to store into through the map (a 4 KiB pwrite costs
  // ~1.7 us here, a populated block's copy ~0.3).
  bool pwrite_data_ = false;
  // Blocks at or past this one have not been written by this process
  // since it attached (the file's growth hands them out fallocated, not
  // yet filled): whole blocks of them go by pwrite, and Touch does not
  // populate them ahead of need. A hint, not an invariant: another process
  // may have written some (a pwrite then merely costs more), and blocks
  // below it may be unwritten (they take the map path, as before).
  std::atomic<uint64_t> fresh_{0};
  void RaiseFresh(uint64_t end) {
    for (uint64_t f = fresh_.load(std::memory_order_relaxed);
         f < end && !fresh_.compare_exchange_weak(f, end, std::memory_order_relaxed);) {
    }
  }
  // The partial last block of this process's last append by pwrite
  // (vwrite.cc): its table entry (the commit's tag and the block) and its
  // bytes. The next small append's first block is that one, and its old
  // bytes come from here rather than through the map, where a block
  // written by pwrite is not mapped yet (a page fault per append). A table
  // entry names one commit's copy of a block, whose bytes never change
  // while it is mapped (copy-on-write), so an equal entry means equal bytes.
  // Only tried, never waited for: a fork while another thread holds it
  // leaves it held in the child, where the cache is then skipped (a miss
  // costs a read through the map), never a hang.
  std::mutex edge_mu_;
  uint64_t edge_entry_ = 0;              // 0: none
  std::unique_ptr<char[]> edge_bytes_;  // kBlockSize, at the first append by pwrite
  // Bytes [from, to) of the block whose table entry is `entry` into dst,
  // if it is the remembered one.
  bool EdgeBytes(uint64_t entry, char* dst, size_t from, size_t to) {
    std::unique_lock<std::mutex> g(edge_mu_, std::try_to_lock);
    if (!g.owns_lock() || entry != edge_entry_ || edge_bytes_ == nullptr) return false;
    std::memcpy(dst, edge_bytes_.get() + from, to - from);
    return true;
  }
  void RememberEdge(uint64_t entry, const char* block) {
    std::unique_lock<std::mutex> g(edge_mu_, std::try_to_lock);
    if (!g.owns_lock()) return;
    if (edge_bytes_ == nullptr) edge_bytes_.reset(new (std::nothrow) char[pmem::kBlockSize]);
    if (edge_bytes_ == nullptr) return;
    std::memcpy(edge_bytes_.get(), block, pmem::kBlockSize);
    edge_entry_ = entry;
  }
  char* base_ = nullptr;
  size_t map_len_ = 0;
  uint64_t* log_ = nullptr;
  uint64_t* bitmap_ = nullptr;
  uint64_t* ptable_ = nullptr;  // the checkpointed table, in the file
  uint64_t* dtable_ = nullptr;  // this process's replay, anonymous memory
  size_t dtable_len_ = 0;
  std::mutex replay_mu_;
  std::atomic<uint64_t> applied_{0};  // entries < applied_ are in dtable_/ptable_
  std::atomic<uint64_t> size_{0};
};

}  // namespace mapfs::overlay::vrt
