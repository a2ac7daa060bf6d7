// VFile: attach, replay (recovery), lookups and reads. Writes are in
// vwrite.cc, allocation and the GC in vgc.cc.
#include "overlay/virtual/vfile.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <linux/magic.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/crc32c.h"
#include "common/raw_syscall.h"
#include "medium/persist.h"

namespace mapfs::overlay::vrt {

using namespace pmem;
namespace persist = ::mapfs::medium;

namespace {

uint64_t Ceil(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Orders the loads of a copy before the load that validates it (seqlock
// style). x86, the only target (medium/persist.h), never reorders loads
// with loads, so only the compiler must be stopped; a C++ fence would do
// the same but TSan does not support fences.
inline void LoadBarrier() { asm volatile("" ::: "memory"); }

// The geometry Format derives from the three options; Attach recomputes it
// and refuses a header that disagrees (damage the crc would not catch is
// impossible, but a reader must never trust offsets it did not check).
Result<MetaHeader> Geometry(const FormatOptions& o) {
  if (o.log_slots < 64 || o.log_slots > (1u << 20) || (o.log_slots & (o.log_slots - 1)) != 0)
    return Status::Error(EINVAL, "virtual: log_slots must be a power of two in [64, 2^20]");
  if (o.vblocks_max == 0 || o.vblocks_max > kMaxBlocks || o.pblocks_max > kMaxBlocks)
    return Status::Error(EINVAL, "virtual: vblocks_max/pblocks_max must be in [1, 2^24]");
  MetaHeader h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.block_shift = kBlockShift;
  h.log_slots = o.log_slots;
  h.log_start = 1;
  uint64_t log_blocks = Ceil(uint64_t{o.log_slots} * 8, kBlockSize);
  h.bitmap_start = static_cast<uint32_t>(h.log_start + log_blocks);
  h.bitmap_blocks = static_cast<uint32_t>(Ceil(Ceil(o.pblocks_max, 8), kBlockSize));
  h.table_start = h.bitmap_start + h.bitmap_blocks;
  h.table_blocks = static_cast<uint32_t>(Ceil(uint64_t{o.vblocks_max} * 8, kBlockSize));
  h.vblocks_max = o.vblocks_max;
  // Data starts 2 MiB-aligned so large runs can be mapped with huge pages.
  h.data_start = static_cast<uint32_t>(Ceil(h.table_start + h.table_blocks, 512) * 512);
  h.pblocks_max = o.pblocks_max;
  if (uint64_t{h.data_start} + 512 > h.pblocks_max)
    return Status::Error(EINVAL, "virtual: pblocks_max leaves no room for data");
  h.crc = Crc32c(&h, offsetof(MetaHeader, crc));
  return h;
}

// Whether whole fresh data blocks of the file open as `fd` go by pwrite
// (VFile::pwrite_data_): on tmpfs, where measured cheaper (docs/OVERLAY.md
// "Appends by pwrite"); elsewhere through the map as before.
// MAPFS_VIRTUAL_DATA=pwrite or =map forces either (tests cover both paths
// on one file system; measurements compare them).
bool DataByPwrite(int fd) {
  if (const char* e = std::getenv("MAPFS_VIRTUAL_DATA")) {
    if (std::strcmp(e, "pwrite") == 0) return true;
    if (std::strcmp(e, "map") == 0) return false;
  }
  struct statfs sf {};
  return fstatfs(fd, &sf) == 0 && static_cast<long>(sf.f_type) == static_cast<long>(TMPFS_MAGIC);
}

}  // namespace

Status Format(int fd, const FormatOptions& o) {
  auto g = Geometry(o);
  if (!g.ok()) return g.status();
  const MetaHeader& h = *g;
  // The metadata region is sparse: the table and bitmap cost nothing until
  // written. The header (magic) goes last, after the rest is durable, so a
  // crash mid-format leaves a file without magic (served as plain).
  if (ftruncate(fd, static_cast<off_t>(uint64_t{h.data_start} * kBlockSize)) != 0)
    return Status::FromErrno("virtual format: ftruncate");
  // Bitmap: the metadata blocks [0, data_start) are in use.
  std::vector<uint64_t> words(Ceil(h.data_start, 64), 0);
  for (uint32_t b = 0; b < h.data_start; b++) words[b / 64] |= uint64_t{1} << (b % 64);
  size_t nbytes = words.size() * 8;
  if (pwrite(fd, words.data(), nbytes, static_cast<off_t>(uint64_t{h.bitmap_start} * kBlockSize)) !=
      static_cast<ssize_t>(nbytes))
    return Status::FromErrno("virtual format: bitmap");
  MetaShared sh{};
  sh.phys_end = h.data_start;
  sh.alloc_hint = h.data_start;
  if (pwrite(fd, &sh, sizeof(sh), kSharedOffset) != static_cast<ssize_t>(sizeof(sh)))
    return Status::FromErrno("virtual format: shared words");
  if (fdatasync(fd) != 0) return Status::FromErrno("virtual format: fdatasync");
  if (pwrite(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h)))
    return Status::FromErrno("virtual format: header");
  if (fdatasync(fd) != 0) return Status::FromErrno("virtual format: fdatasync");
  return Status::Ok();
}

uint64_t FormatSize(const FormatOptions& o) {
  auto g = Geometry(o);
  return g.ok() ? uint64_t{g->data_start} * kBlockSize : 0;
}

Result<bool> IsVirtualized(int fd) {
  MetaHeader h{};
  ssize_t r = pread(fd, &h, sizeof(h), 0);
  if (r < 0) return Status::FromErrno("virtual: read magic");
  if (r != static_cast<ssize_t>(sizeof(h))) return false;
  if (h.magic == kMagic) return true;
  // A damaged magic must not turn a virtualized file into a plain one
  // (served raw, metadata and all): a header whose checksum holds with the
  // magic put back is ours.
  h.magic = kMagic;
  if (h.crc == Crc32c(&h, offsetof(MetaHeader, crc)))
    return Status::Error(EUCLEAN, "virtual: meta block header: damaged magic");
  return false;
}

Result<MetaHeader> ReadHeader(int fd) {
  MetaHeader h{};
  ssize_t r = pread(fd, &h, sizeof(h), 0);
  if (r < 0) return Status::FromErrno("virtual: read header");
  if (r != static_cast<ssize_t>(sizeof(h))) return Status::Error(EINVAL, "virtual: not a virtualized file (short)");
  if (h.magic != kMagic) {
    auto v = IsVirtualized(fd);  // EUCLEAN if only the magic is damaged
    if (!v.ok()) return v.status();
    return Status::Error(EINVAL, "virtual: not a virtualized file (no magic)");
  }
  if (h.crc != Crc32c(&h, offsetof(MetaHeader, crc)))
    return Status::Error(EUCLEAN, "virtual: meta block header: bad checksum");
  if (h.version != kVersion)
    return Status::Error(EUCLEAN, "virtual: meta block header: unsupported format version " +
                                      std::to_string(h.version));
  auto g = Geometry({h.log_slots, h.vblocks_max, h.pblocks_max});
  if (!g.ok() || std::memcmp(&*g, &h, sizeof(h)) != 0)
    return Status::Error(EUCLEAN, "virtual: meta block header: inconsistent geometry");
  struct stat st {};
  if (fstat(fd, &st) != 0) return Status::FromErrno("virtual: fstat");
  if (static_cast<uint64_t>(st.st_size) < uint64_t{h.data_start} * kBlockSize)
    return Status::Error(EUCLEAN, "virtual: file shorter than its metadata region");
  return h;
}

Result<std::unique_ptr<VFile>> VFile::Attach(int fd, bool writable, Mode mode) {
  auto hr = ReadHeader(fd);
  if (!hr.ok()) return hr.status();
  const MetaHeader& h = *hr;
  struct stat st {};
  std::unique_ptr<VFile> f(new VFile());
  f->hdr_ = h;
  f->mode_ = mode;
  MAPFS_RETURN_IF_ERROR(f->Map(fd, writable));
  MetaShared* sh = f->shared();
  uint64_t pe = persist::Load64(&sh->phys_end);
  // A writer publishes phys_end only after the fallocate that covers it, so
  // a size read after phys_end covers it (the first fstat may predate the
  // growth of another process's write).
  if (fstat(fd, &st) != 0) return Status::FromErrno("virtual: fstat");
  if (pe < h.data_start || pe > h.pblocks_max || pe * kBlockSize > static_cast<uint64_t>(st.st_size))
    return Status::Error(EUCLEAN, "virtual: meta block: allocated end " + std::to_string(pe) +
                                      " outside the file");
  uint64_t cs = persist::Load64(&sh->ckpt_size);
  if (cs > uint64_t{h.vblocks_max} * kBlockSize)
    return Status::Error(EUCLEAN, "virtual: meta block: checkpointed size too large");
  f->applied_.store(persist::Load64(&sh->ckpt_seq));
  f->size_.store(cs);
  // Recovery: replay what was committed since the last checkpoint. Entries
  // of a crashed writer are either committed (one CAS) or absent.
  MAPFS_RETURN_IF_ERROR(f->CatchUp());
  return f;
}

Status VFile::Map(int fd, bool writable) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  // A MAP_SHARED writable mapping needs a read-write descriptor; the
  // application's may be write-only or O_APPEND. The kernel checks the
  // permission again here.
  fd_ = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd_ < 0) return Status::FromErrno("virtual: reopen for mapping");
  writable_ = writable;
  map_len_ = uint64_t{hdr_.pblocks_max} * kBlockSize;
  int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  // Mapping past the end of the file is allowed; only blocks below
  // phys_end (fallocated) are ever touched. MAP_SYNC succeeds only on DAX.
  void* p = writable ? mmap(nullptr, map_len_, prot, MAP_SHARED_VALIDATE | MAP_SYNC, fd_, 0) : MAP_FAILED;
  dax_ = p != MAP_FAILED;
  if (p == MAP_FAILED) p = mmap(nullptr, map_len_, prot, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return Status::FromErrno("virtual: mmap");
  pwrite_data_ = writable && !dax_ && DataByPwrite(fd_);
  base_ = static_cast<char*>(p);
  log_ = reinterpret_cast<uint64_t*>(base_ + uint64_t{hdr_.log_start} * kBlockSize);
  bitmap_ = reinterpret_cast<uint64_t*>(base_ + uint64_t{hdr_.bitmap_start} * kBlockSize);
  ptable_ = reinterpret_cast<uint64_t*>(base_ + uint64_t{hdr_.table_start} * kBlockSize);
  dtable_len_ = uint64_t{hdr_.vblocks_max} * 8;
  void* d = mmap(nullptr, dtable_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (d == MAP_FAILED) return Status::FromErrno("virtual: table memory");
  dtable_ = static_cast<uint64_t*>(d);
  populated_.reset(new std::atomic<uint16_t>[hdr_.pblocks_max / 512 + 1]());
  fresh_.store(persist::Load64(&shared()->phys_end), std::memory_order_relaxed);
  return Status::Ok();
}

void VFile::Touch(uint64_t phys, uint64_t n) {
  for (uint64_t chunk = phys / 512; chunk * 512 < phys + n; chunk++) {
    std::atomic<uint16_t>& done = populated_[chunk];
    uint64_t need = std::min<uint64_t>(phys + n, (chunk + 1) * 512) - chunk * 512;
    uint16_t have = done.load(std::memory_order_relaxed);
    if (have >= need) continue;
    // Up to the chunk's end, or as far as the file is allocated: a chunk
    // the file has only partly grown into is filled further at a later call.
    uint64_t end = std::min<uint64_t>((chunk + 1) * 512, persist::Load64(&shared()->phys_end));
    // Not into fresh blocks beyond the ones asked for: their first write
    // goes by pwrite, which fills a page without zeroing it (pwrite_data_).
    if (pwrite_data_) end = std::min<uint64_t>(end, std::max(phys + n, fresh_.load(std::memory_order_relaxed)));
    if (end <= chunk * 512 + have) continue;
    uint16_t want = static_cast<uint16_t>(end - chunk * 512);
    // One thread populates a range; a racing one may repeat part of it
    // (harmless: populating a populated page only walks the page table).
    if (!done.compare_exchange_strong(have, want, std::memory_order_relaxed)) continue;
    // Best effort: without it (old kernels) the pages fault one by one.
    (void)madvise(base_ + (chunk * 512 + have) * kBlockSize, (want - have) * kBlockSize,
                  writable_ ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
    if (pwrite_data_) RaiseFresh(chunk * 512 + want);  // populated: no longer fresh
  }
}

namespace {

// Writes the whole vector at `at` of `fd` (the engine's own descriptors:
// the kernel's pwrite/pwritev, not the shim's wrappers, which would route
// them again under LD_PRELOAD; pwrite for one piece, since pwritev first
// copies and checks the vector). A short count (a signal) goes on from
// where it stopped. The vector is consumed.
Status PwriteAll(int fd, iovec* v, int cnt, off_t at, const char* what) {
  for (;;) {
    for (; cnt > 0 && v->iov_len == 0; v++) cnt--;  // nothing to write there
    if (cnt == 0) break;
    long w = cnt == 1 ? RawSyscall(SYS_pwrite64, fd, reinterpret_cast<long>(v->iov_base), static_cast<long>(v->iov_len),
                                   static_cast<long>(at))
                      : RawSyscall(SYS_pwritev, fd, reinterpret_cast<long>(v), static_cast<long>(cnt), static_cast<long>(at), 0);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Status::FromErrno(what);
    if (w == 0) return Status::Error(EIO, std::string(what) + " wrote nothing");
    at += w;
    size_t left = static_cast<size_t>(w);
    for (; cnt > 0 && left >= v->iov_len; v++, cnt--) left -= v->iov_len;
    if (cnt > 0) {
      v->iov_base = static_cast<char*>(v->iov_base) + left;
      v->iov_len -= left;
    }
  }
  return Status::Ok();
}

}  // namespace

Status VFile::WritePieces(Piece* p, size_t n) const {
  std::sort(p, p + n, [](const Piece& a, const Piece& b) { return a.phys < b.phys; });
  constexpr size_t kIov = 64;
  iovec iov[kIov];
  for (size_t i = 0; i < n;) {
    // A group: pieces each ending where the next begins in the file.
    size_t cnt = 0, len = 0;
    const off_t at = static_cast<off_t>(p[i].phys * kBlockSize);
    do {
      iov[cnt++] = {const_cast<char*>(p[i].src), p[i].len};
      len += p[i].len;
      i++;
    } while (i < n && cnt < kIov && static_cast<uint64_t>(at) + len == p[i].phys * kBlockSize);
    MAPFS_RETURN_IF_ERROR(PwriteAll(fd_, iov, static_cast<int>(cnt), at, "virtual: pwrite of data blocks"));
  }
  return Status::Ok();
}

void VFile::ZeroData(char* dst, size_t n) const {
  if (dax_) {
    persist::ZeroNt(dst, n);
    return;
  }
  static const char kZero[kBlockSize] = {};
  for (size_t done = 0; done < n; done += kBlockSize) persist::Write(dst + done, kZero, std::min(n - done, kBlockSize));
}

VFile::~VFile() {
  // No thread uses this VFile any more: blocks waiting for readers are free.
  if (base_ != nullptr && writable_) Reclaim(true);
  if (base_ != nullptr) munmap(base_, map_len_);
  if (dtable_ != nullptr) munmap(dtable_, dtable_len_);
  if (fd_ >= 0) {
    if (closer_)
      closer_(fd_);
    else
      close(fd_);
  }
}

bool VFile::Unlinked() const {
  struct stat st {};
  return fstat(fd_, &st) == 0 && st.st_nlink == 0;
}

bool VFile::PhysOk(uint64_t phys) const {
  uint64_t pe = persist::Load64(&shared()->phys_end);
  return phys >= hdr_.data_start && phys < pe && pe <= hdr_.pblocks_max;
}

Status VFile::CheckPhys(uint64_t phys, const char* what) const {
  if (!PhysOk(phys))
    return Status::Error(EUCLEAN, std::string("virtual: ") + what + ": block " + std::to_string(phys) +
                                      " outside the data region");
  return Status::Ok();
}

Result<uint64_t> VFile::Lookup(uint64_t vblock) const {
  uint64_t d = std::atomic_ref<uint64_t>(dtable_[vblock]).load(std::memory_order_acquire);
  uint64_t t = std::atomic_ref<uint64_t>(ptable_[vblock]).load(std::memory_order_acquire);
  uint64_t m = TableTag(d) >= TableTag(t) ? d : t;
  if (TablePhys(m) != 0) MAPFS_RETURN_IF_ERROR(CheckPhys(TablePhys(m), "block table"));
  return m;
}

Result<uint32_t> VFile::PhysOf(uint64_t vblock) {
  Pin pin(this);
  MAPFS_RETURN_IF_ERROR(CatchUp());
  if (vblock >= hdr_.vblocks_max) return uint32_t{0};
  auto m = Lookup(vblock);
  if (!m.ok()) return m.status();
  return TablePhys(*m);
}

Status VFile::CatchUp(const OwnRecord* own) {
  // Fast path, no lock: nothing committed since this process's last replay
  // (the slot after it is not of its lap) and no checkpoint overtook it.
  uint64_t a = applied_.load(std::memory_order_acquire);
  uint64_t e = persist::Load64(slot(a));
  if ((e == 0 || EntryLap(e) != LapOf(a, hdr_.log_slots)) && persist::Load64(&shared()->ckpt_seq) <= a)
    return Status::Ok();
  std::lock_guard<std::mutex> g(replay_mu_);
  return CatchUpLocked(own);
}

Status VFile::CatchUpLocked(const OwnRecord* own) {
  MetaShared* sh = shared();
  for (int restarts = 0;; restarts++) {
    uint64_t a = applied_.load(std::memory_order_relaxed);
    uint64_t size = size_.load(std::memory_order_relaxed);
    uint64_t ck = persist::Load64(&sh->ckpt_seq);
    if (a < ck) {
      // Entries this process had not replayed were checkpointed (their
      // slots may be reused): start from the checkpoint. Table entries older
      // than it are dominated by the file's table (tags).
      uint64_t cs = persist::Load64(&sh->ckpt_size);
      if (persist::Load64(&sh->ckpt_seq) != ck) continue;
      a = ck;
      size = cs;
    }
    uint64_t s = a;
    bool recycled = false;
    for (;;) {
      uint64_t e = persist::Load64(slot(s));
      if (e == 0 || EntryLap(e) != LapOf(s, hdr_.log_slots)) break;
      const bool mine = own != nullptr && own->seq == s && EntryType(e) == kIndirect && EntryPhys(e) == own->phys;
      MAPFS_RETURN_IF_ERROR(ApplyEntry(e, s, &size, &recycled, true, mine ? own->bytes : nullptr));
      if (recycled) break;
      s++;
      if (s - a > hdr_.log_slots) {
        recycled = true;  // more than a log's worth: the ring moved on
        break;
      }
    }
    // The slot after s not being of its lap means the tail, unless a
    // checkpoint passed s meanwhile (its slots may have been reused).
    if (!recycled && persist::Load64(&sh->ckpt_seq) <= s) {
      size_.store(size, std::memory_order_relaxed);
      applied_.store(s, std::memory_order_release);
      return Status::Ok();
    }
    if (restarts > 1000000) return Status::Error(EAGAIN, "virtual: log replay cannot keep up");
  }
}

void VFile::SetDtable(uint64_t vblock, uint64_t entry) {
  // Never back: a replay restarted from an older position (or the
  // checkpoint) must not show, even briefly, an older mapping than one
  // already published; a writer could copy from it and commit.
  std::atomic_ref<uint64_t> d(dtable_[vblock]);
  if (TableTag(d.load(std::memory_order_relaxed)) < TableTag(entry)) d.store(entry, std::memory_order_release);
}

Status VFile::ApplyEntry(uint64_t e, uint64_t seq, uint64_t* size, bool* recycled, bool to_dtable,
                         const char* record, char* rec_out) {
  // The message is built only on damage: replay runs for every entry.
  auto bad = [&](const char* what) {
    return Status::Error(EUCLEAN, "virtual: log entry " + std::to_string(seq) + ": " + what);
  };
  auto phys_ok = [&](uint64_t first, uint64_t n) { return PhysOk(first) && PhysOk(first + n - 1); };
  if (EntryType(e) == kInline) {
    uint64_t v = EntryVblock(e), p = EntryPhys(e), n = EntryBlocks(e);
    if (v + n > hdr_.vblocks_max) return bad("virtual blocks out of range");
    if (!phys_ok(p, n)) return bad("blocks outside the data region");
    if (to_dtable)
      for (uint64_t i = 0; i < n; i++) SetDtable(v + i, MakeTableEntry(seq, static_cast<uint32_t>(p + i)));
    *size = std::max(*size, (v + n) * kBlockSize);
    return Status::Ok();
  }
  if (EntryType(e) != kIndirect || ((e >> 24) & 0xffffffff) != 0)
    return bad("bad entry type");
  if (!phys_ok(EntryPhys(e), 1)) return bad("record block outside the data region");
  alignas(64) char own_rec[kBlockSize];
  char* rec = rec_out != nullptr ? rec_out : own_rec;
  // Its header, then as many runs as it says (at most kMaxRuns: a copy of
  // a recycled block is refused below), not the whole block.
  const char* src = record != nullptr ? record : base_ + uint64_t{EntryPhys(e)} * kBlockSize;
  std::memcpy(rec, src, sizeof(RecordHeader));
  const uint32_t nr = std::min<uint32_t>(reinterpret_cast<const RecordHeader*>(rec)->nruns, kMaxRuns);
  std::memcpy(rec + sizeof(RecordHeader), src + sizeof(RecordHeader), nr * sizeof(Run));
  // The record is freed only after a checkpoint passes seq: if none did,
  // what was copied is the record (a seqlock-style check).
  LoadBarrier();
  if (persist::Load64(&shared()->ckpt_seq) > seq) {
    *recycled = true;
    return Status::Ok();
  }
  RecordHeader rh;
  std::memcpy(&rh, rec, sizeof(rh));
  if (rh.magic != kRecordMagic || rh.nruns > kMaxRuns || (rh.size_op != kSizeExtend && rh.size_op != kSizeSet) ||
      rh.size > uint64_t{hdr_.vblocks_max} * kBlockSize)
    return bad("bad record block");
  uint32_t crc = rh.crc;
  reinterpret_cast<RecordHeader*>(rec)->crc = 0;
  if (crc != Crc32c(rec, sizeof(RecordHeader) + rh.nruns * sizeof(Run)))
    return bad("record block: bad checksum");
  const Run* runs = reinterpret_cast<const Run*>(rec + sizeof(RecordHeader));
  for (uint32_t i = 0; i < rh.nruns; i++) {
    const Run& r = runs[i];
    if (uint64_t{r.vblock} + r.nblocks > hdr_.vblocks_max)
      return bad("record run out of range");
    if (r.phys != 0 && !phys_ok(r.phys, r.nblocks)) return bad("record run outside the data region");
  }
  for (uint32_t i = 0; to_dtable && i < rh.nruns; i++) {
    const Run& r = runs[i];
    for (uint64_t b = 0; b < r.nblocks; b++)
      SetDtable(r.vblock + b, MakeTableEntry(seq, r.phys == 0 ? 0 : static_cast<uint32_t>(r.phys + b)));
  }
  *size = rh.size_op == kSizeSet ? rh.size : std::max(*size, rh.size);
  return Status::Ok();
}

Result<uint64_t> VFile::Size() {
  Pin pin(this);
  MAPFS_RETURN_IF_ERROR(CatchUp());
  return size_.load(std::memory_order_acquire);
}

Result<size_t> VFile::Pread(void* buf, size_t n, uint64_t off) {
  Pin pin(this);
  MAPFS_RETURN_IF_ERROR(CatchUp());
  uint64_t size = size_.load(std::memory_order_acquire);
  if (off >= size || n == 0) return size_t{0};
  n = static_cast<size_t>(std::min<uint64_t>(n, size - off));
  char* dst = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    uint64_t pos = off + done;
    uint64_t vb = pos / kBlockSize;
    size_t within = pos % kBlockSize;
    size_t len = std::min<size_t>(n - done, kBlockSize - within);
    // Lock-free read: copy, then check the mapping did not change (a
    // commit or the GC may have superseded and freed the block meanwhile).
    for (;;) {
      auto m1 = Lookup(vb);
      if (!m1.ok()) return m1.status();
      uint32_t p = TablePhys(*m1);
      if (p == 0) {
        std::memset(dst + done, 0, len);
      } else {
        Touch(p);
        std::memcpy(dst + done, base_ + uint64_t{p} * kBlockSize + within, len);
      }
      LoadBarrier();
      auto m2 = Lookup(vb);
      if (!m2.ok()) return m2.status();
      if (*m1 == *m2) break;
    }
    done += len;
  }
  return n;
}

namespace {

// Copies n bytes from `in` at `in_off` to `out` at `out_off` in the kernel,
// so that no page of either file is mapped in this process and whole pages
// written to a tmpfs or memfd destination are not zeroed first:
// copy_file_range where the two files allow it (the same file system),
// else sendfile (a splice: one copy, from the source's page cache), else
// through a small buffer. `out` is a descriptor of the caller's own whose
// offset sendfile moves. 0 or an errno.
int KernelCopy(int in, uint64_t in_off, int out, uint64_t out_off, size_t n) {
  static std::atomic<int> how{0};  // 0 copy_file_range, 1 sendfile, 2 pread + pwrite
  while (n > 0 && how.load(std::memory_order_relaxed) < 2) {
    ssize_t r;
    auto i = static_cast<off_t>(in_off);
    if (how.load(std::memory_order_relaxed) == 0) {
      auto o = static_cast<loff_t>(out_off);
      r = copy_file_range(in, &i, out, &o, n, 0);
    } else {
      r = lseek(out, static_cast<off_t>(out_off), SEEK_SET) < 0 ? -1 : sendfile(out, in, &i, n);
    }
    if (r > 0) {
      in_off += static_cast<uint64_t>(r), out_off += static_cast<uint64_t>(r), n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return EIO;  // the source ends early: damaged (blocks are inside the file)
    if (errno == EINTR) continue;
    if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return errno;
    // The next way (e.g. tmpfs or ext4 to a memfd: EXDEV), once per way
    // even when threads fail at the same time.
    int was = how.load(std::memory_order_relaxed);
    if (was < 2) how.compare_exchange_strong(was, was + 1, std::memory_order_relaxed);
  }
  char buf[64 * 1024];
  while (n > 0) {
    ssize_t r = pread(in, buf, std::min(n, sizeof buf), static_cast<off_t>(in_off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r == 0 ? EIO : errno;
    for (ssize_t w = 0; w < r;) {
      ssize_t k = pwrite(out, buf + w, static_cast<size_t>(r - w), static_cast<off_t>(out_off) + w);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return k == 0 ? EIO : errno;
      w += k;
    }
    in_off += static_cast<uint64_t>(r), out_off += static_cast<uint64_t>(r), n -= static_cast<size_t>(r);
  }
  return 0;
}

}  // namespace

// A run shorter than this many blocks goes into a scattered batch (ByRuns).
// A long run is copied by the kernel without mapping anything here; short
// ones cost a copy call each that way, where a batch costs one call for up
// to kScatterBlocks blocks and a page fault per 16 pages of the map (fault-
// around; the pages are in the page cache).
constexpr size_t kShortRun = 16;
constexpr size_t kScatterBlocks = 256;  // 1 MiB; as many iovecs at most (IOV_MAX is 1024)

template <typename Data, typename Scattered, typename Hole>
Result<size_t> VFile::ByRuns(size_t n, uint64_t off, Data data, Scattered scattered, Hole hole) {
  Pin pin(this);
  MAPFS_RETURN_IF_ERROR(CatchUp());
  uint64_t size = size_.load(std::memory_order_acquire);
  if (off >= size || n == 0) return size_t{0};
  n = static_cast<size_t>(std::min<uint64_t>(n, size - off));
  constexpr size_t kRunBlocks = 256;  // 1 MiB per copy
  static_assert(kScatterBlocks <= kRunBlocks);
  uint64_t seen[kRunBlocks];
  iovec iov[kScatterBlocks];
  bool retried = false;  // something may have been written where a hole now is
  size_t done = 0;
  while (done < n) {
    // A run: the virtual blocks from `pos` whose physical blocks follow
    // each other (or are all holes).
    uint64_t pos = off + done;
    uint64_t vb = pos / kBlockSize;
    auto first = Lookup(vb);
    if (!first.ok()) return first.status();
    const uint32_t p0 = TablePhys(*first);
    seen[0] = *first;
    size_t k = 1, len = std::min<size_t>(n - done, kBlockSize - pos % kBlockSize);
    for (; done + len < n && k < kRunBlocks; k++) {
      auto m = Lookup(vb + k);
      if (!m.ok()) return m.status();
      uint32_t p = TablePhys(*m);
      if (p0 == 0 ? p != 0 : p != p0 + k) break;
      seen[k] = *m;
      len += std::min<size_t>(n - done - len, kBlockSize);
    }
    Status st;
    if (p0 == 0) {
      st = hole(done, len, retried);
    } else if (k >= kShortRun) {
      st = data(uint64_t{p0} * kBlockSize + pos % kBlockSize, done, len);
    } else {
      // Short runs: this one and the following ones up to a hole or
      // kScatterBlocks blocks, as one scattered copy.
      int cnt = 1;
      iov[0] = {base_ + uint64_t{p0} * kBlockSize + pos % kBlockSize, len};
      uint32_t prev = p0 + static_cast<uint32_t>(k) - 1;
      for (; done + len < n && k < kScatterBlocks; k++) {
        auto m = Lookup(vb + k);
        if (!m.ok()) return m.status();
        uint32_t p = TablePhys(*m);
        if (p == 0) break;
        seen[k] = *m;
        size_t l = std::min<size_t>(n - done - len, kBlockSize);
        if (p == prev + 1) {
          iov[cnt - 1].iov_len += l;
        } else {
          iov[cnt++] = {base_ + uint64_t{p} * kBlockSize, l};
        }
        prev = p;
        len += l;
      }
      st = scattered(iov, cnt, done);
    }
    MAPFS_RETURN_IF_ERROR(st);
    // As Pread: the copy counts only if the mapping did not change under
    // it (another process's commit or GC); else the run is copied again.
    LoadBarrier();
    bool same = true;
    for (size_t i = 0; i < k && same; i++) {
      auto m = Lookup(vb + i);
      if (!m.ok()) return m.status();
      same = *m == seen[i];
    }
    if (same) done += len;
    else retried = true;
  }
  return n;
}

Result<size_t> VFile::CopyOut(int out, uint64_t out_off, size_t n, uint64_t off) {
  return ByRuns(
      n, off,
      [&](uint64_t phys_off, size_t at, size_t len) {
        int e = KernelCopy(fd_, phys_off, out, out_off + at, len);
        return e == 0 ? Status::Ok() : Status::Error(e, "virtual: copying content out");
      },
      [&](iovec* iov, int cnt, size_t at) {
        // One pwritev from the map into the memfd.
        return PwriteAll(out, iov, cnt, static_cast<off_t>(out_off + at), "virtual: copying content out");
      },
      [&](size_t at, size_t len, bool retried) {
        // A hole stays unwritten (the destination reads zeros there) unless
        // an earlier pass of the run wrote into it.
        if (!retried) return Status::Ok();
        return fallocate(out, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(out_off + at),
                         static_cast<off_t>(len)) == 0
                   ? Status::Ok()
                   : Status::FromErrno("virtual: clearing a hole copied out");
      });
}

Result<size_t> VFile::PreadByKernel(void* buf, size_t n, uint64_t off) {
  char* dst = static_cast<char*>(buf);
  return ByRuns(
      n, off,
      [&](uint64_t phys_off, size_t at, size_t len) {
        for (size_t d = 0; d < len;) {
          ssize_t r = pread(fd_, dst + at + d, len - d, static_cast<off_t>(phys_off + d));
          if (r < 0 && errno == EINTR) continue;
          if (r < 0) return Status::FromErrno("virtual: pread of content");
          if (r == 0) return Status::Error(EIO, "virtual: the file ends inside its blocks");
          d += static_cast<size_t>(r);
        }
        return Status::Ok();
      },
      [&](const iovec* iov, int cnt, size_t at) {
        // Short runs: copied from the map, as Pread does, without a call.
        for (int i = 0; i < cnt; i++) {
          std::memcpy(dst + at, iov[i].iov_base, iov[i].iov_len);
          at += iov[i].iov_len;
        }
        return Status::Ok();
      },
      [&](size_t at, size_t len, bool) {
        std::memset(dst + at, 0, len);
        return Status::Ok();
      });
}

Status VFile::Sync() {
  persist::Fence();
  if (!dax_ && writable_ && fdatasync(fd_) != 0) return Status::FromErrno("virtual: fdatasync");
  return Status::Ok();
}

}  // namespace mapfs::overlay::vrt
