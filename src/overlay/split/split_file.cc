// The split engine's data path: reads and overwrites through region maps,
// appends into staging, relinks (split_engine.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "medium/persist.h"
#include "overlay/split/file_state.h"
#include "overlay/split/relink.h"
#include "overlay/split/split_engine.h"
#include "vm/fault_guard.h"

namespace mapfs::overlay::split {

void UnmapRegions(FileState& st) {
  for (auto& [idx, p] : st.lru) munmap(p, kRegionBytes);
  st.lru.clear();
  st.regions.clear();
}

void UnmapRegionsFrom(FileState& st, uint64_t size) {
  for (auto it = st.lru.begin(); it != st.lru.end();) {
    if (it->first * kRegionBytes < size) {
      ++it;
      continue;
    }
    munmap(it->second, kRegionBytes);
    st.regions.erase(it->first);
    it = st.lru.erase(it);
  }
}

namespace {

// Faults staging pages in writable ahead of a write ending at staging
// offset `end`: one madvise for many pages (half the cost of a fault per
// page on ext4 and tmpfs), ahead by as much as is written (at most
// kPrefaultAhead), so a small file pays for little more than it writes.
// Only for speed: on a kernel without MADV_POPULATE_WRITE (before 5.14)
// the stores fault the pages in as before.
void Prefault(FileState& st, uint64_t end) {
  if (end <= st.sfaulted) return;
  uint64_t want = std::min<uint64_t>(kStagingBytes, (end + std::min(end, kPrefaultAhead) + 4095) & ~uint64_t{4095});
  if (madvise(st.smap + st.sfaulted, want - st.sfaulted, MADV_POPULATE_WRITE) == 0) st.sfaulted = want;
  else st.sfaulted = kStagingBytes;  // refused: never asked again for this staging file
}

// The copies MapCopy guards (vm::CopyFn).
void CopyBytes(void* d, const void* s, size_t n) { std::memcpy(d, s, n); }
void CopyNtBytes(void* d, const void* s, size_t n) { medium::CopyNt(d, s, n); }

}  // namespace

SplitFile::~SplitFile() {
  if (!closed_) (void)Close();
}

char* SplitFile::Region(uint64_t idx, Status* err) {
  FileState& st = *st_;
  auto it = st.regions.find(idx);
  if (it != st.regions.end()) {
    st.lru.splice(st.lru.begin(), st.lru, it->second);
    return it->second->second;
  }
  if (st.lru.size() >= kMaxRegions) {
    munmap(st.lru.back().second, kRegionBytes);
    st.regions.erase(st.lru.back().first);
    st.lru.pop_back();
  }
  int fd = st.maps_writable ? st.wfd : st.rfd;
  int prot = PROT_READ | (st.maps_writable ? PROT_WRITE : 0);
  // A whole region even past the end of the file: only bytes below ksize
  // are ever touched, and the map stays valid as the file grows.
  // MAP_POPULATE: one fault-in of the region instead of a fault per page
  // on first touch (pages past the end are skipped by the kernel).
  void* p = mmap(nullptr, kRegionBytes, prot, MAP_SHARED | MAP_POPULATE, fd, static_cast<off_t>(idx * kRegionBytes));
  if (p == MAP_FAILED) {
    *err = Status::FromErrno("overlay: map region");
    return nullptr;
  }
  st.lru.emplace_front(idx, static_cast<char*>(p));
  st.regions[idx] = st.lru.begin();
  return static_cast<char*>(p);
}

// Copies between the caller's buffer and target bytes [off, off+n) < ksize.
// Every copy is guarded: a page of a region past the file's end (another
// process shrank the file through the kernel; ksize is this process's
// belief) raises SIGBUS, which ends the copy instead of the program.
Status SplitFile::MapCopy(char* dst, const char* src, uint64_t off, size_t n, bool write, bool* shrunk) {
  *shrunk = false;
  bool sync = engine_->mode() != Mode::kPosix;
  while (n > 0) {
    uint64_t idx = off / kRegionBytes, in = off % kRegionBytes;
    size_t k = static_cast<size_t>(std::min<uint64_t>(n, kRegionBytes - in));
    Status err;
    char* r = Region(idx, &err);
    if (r == nullptr) return err;
    const bool whole = write ? vm::GuardedCopy(r + in, src, k, sync ? CopyNtBytes : CopyBytes)
                             : vm::GuardedCopy(dst, r + in, k, CopyBytes);
    if (!whole) {
      *shrunk = true;
      return Status::Ok();
    }
    if (write && sync) {
      medium::Fence();
      // Not DAX: the page cache must reach the medium (fdatasync of the range).
      auto a = reinterpret_cast<uintptr_t>(r + in) & ~uintptr_t{4095};
      if (msync(reinterpret_cast<void*>(a), reinterpret_cast<uintptr_t>(r + in + k) - a, MS_SYNC) != 0)
        return Status::FromErrno("overlay: msync");
    }
    if (write)
      src += k;
    else
      dst += k;
    off += k;
    n -= k;
  }
  return Status::Ok();
}

// The file's size as the kernel has it now (another process may change it
// through the kernel at any time).
Result<uint64_t> SplitFile::KernelSize() {
  FileState& st = *st_;
  struct stat sb {};
  if (fstat(st.any_fd(), &sb) != 0) return Status::FromErrno("overlay: fstat");
  return static_cast<uint64_t>(sb.st_size);
}

// The file ends before ksize: it was shrunk through the kernel by another
// process while open here (st.mu held). Takes the kernel's size, drops the
// region maps wholly past it, and moves what is staged to where it belongs
// (past the new end: a hole between, as the kernel's own write at that
// offset would leave), so that the call can go again on a consistent state.
Status SplitFile::Shrunk() {
  auto size = KernelSize();
  if (!size.ok()) return size.status();
  return ShrinkTo(*size);
}

Status SplitFile::ShrinkTo(uint64_t size) {
  FileState& st = *st_;
  if (size < st.ksize) {
    st.ksize = size;
    UnmapRegionsFrom(st, size);
  }
  return RelinkLocked(engine_->mode() != Mode::kPosix);
}

// A copy through the maps learns of a shrink only at a page wholly past the
// new end (SIGBUS, MapCopy). In the file's last page it would read the
// zeros a map shows past the end as bytes of the file, or store bytes the
// kernel then drops while the call reports them written. So a call that
// reaches into the last page of the size this process believes in asks the
// kernel first (one fstat, only there): a shrink is taken as Shrunk takes
// it, and growth (nothing staged) is adopted, as the kernel's own read and
// write would see it (st.mu held).
Status SplitFile::CheckEnd(uint64_t end) {
  FileState& st = *st_;
  if (end <= (st.ksize & ~uint64_t{4095})) return Status::Ok();
  auto size = KernelSize();
  if (!size.ok()) return size.status();
  if (*size < st.ksize) return ShrinkTo(*size);
  if (*size > st.ksize && !st.Staged()) st.ksize = *size;
  return Status::Ok();
}

// After a lock call of this process (SplitEngine::BeforeLock), another
// process may have changed the file while holding that lock: its appends
// are in the kernel's file (it relinked them before unlocking), so the
// kernel's size is taken again, once per file per lock call. A shrink is
// taken as Shrunk takes it. Growth while this process has bytes staged
// (written since its last lock call, so not under the lock another
// process wrote under) puts them in first, at their offsets, then adopts
// the larger size.
// Callers test Stale() first: one load and compare, no Status made, on the
// path of every read and write.
inline bool SplitFile::Stale() const { return st_->epoch != engine_->epoch(); }

Status SplitFile::Revalidate() {
  FileState& st = *st_;
  const uint64_t e = engine_->epoch();
  auto size = KernelSize();
  if (!size.ok()) return size.status();
  st.epoch = e;  // a lock call since the load leaves it behind again
  if (*size < st.ksize) return ShrinkTo(*size);
  if (*size > st.ksize) {
    MAPFS_RETURN_IF_ERROR(RelinkLocked(engine_->mode() != Mode::kPosix));
    if (*size > st.ksize) st.ksize = *size;
  }
  return Status::Ok();
}

Result<size_t> SplitFile::Pread(void* buf, size_t n, uint64_t off) {
  if (!readable()) return Status::Error(EBADF, "overlay: not open for reading");
  FileState& st = *st_;
  std::lock_guard<std::mutex> g(st.mu);
  if (Stale()) MAPFS_RETURN_IF_ERROR(Revalidate());
  if (n > 0 && off < UINT64_MAX - n) MAPFS_RETURN_IF_ERROR(CheckEnd(off + n));
  for (int tries = 0;; tries++) {
    uint64_t size = st.Size();
    if (off >= size || n == 0) return size_t{0};
    size_t want = static_cast<size_t>(std::min<uint64_t>(n, size - off));
    char* out = static_cast<char*>(buf);
    uint64_t at = off, end = off + want;
    if (at < st.ksize) {
      size_t k = static_cast<size_t>(std::min(end, st.ksize) - at);
      bool shrunk;
      MAPFS_RETURN_IF_ERROR(MapCopy(out, nullptr, at, k, false, &shrunk));
      if (shrunk) {
        // Shrinking again while this thread learns the size: the kernel's read.
        if (tries == 2) return KernelRead(buf, n, off);
        MAPFS_RETURN_IF_ERROR(Shrunk());
        continue;
      }
      out += k;
      at += k;
    }
    if (at < end) std::memcpy(out, st.smap + (at - st.salign), static_cast<size_t>(end - at));
    return want;
  }
}

Result<size_t> SplitFile::KernelRead(void* buf, size_t n, uint64_t off) {
  FileState& st = *st_;
  for (;;) {
    ssize_t r = pread(st.any_fd(), buf, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno("overlay: read");
    return static_cast<size_t>(r);
  }
}

Status SplitFile::KernelWrite(const char* buf, size_t n, uint64_t off) {
  FileState& st = *st_;
  while (n > 0) {
    ssize_t w = pwrite(st.wfd, buf, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Status::FromErrno("overlay: write");
    buf += w;
    off += static_cast<uint64_t>(w);
    n -= static_cast<size_t>(w);
  }
  if (off > st.ksize) st.ksize = off;
  if (engine_->mode() != Mode::kPosix && fdatasync(st.wfd) != 0) return Status::FromErrno("overlay: fdatasync");
  return Status::Ok();
}

// The commit of everything staged (sync and strict modes: each call durable).
Status CommitStaged(SplitEngine& e, FileState& st) {
  uint64_t s0 = st.sbase - st.salign, n = st.send - st.sbase;
  auto a = reinterpret_cast<uintptr_t>(st.smap + s0) & ~uintptr_t{4095};
  if (msync(reinterpret_cast<void*>(a), reinterpret_cast<uintptr_t>(st.smap + s0 + n) - a, MS_SYNC) != 0)
    return Status::FromErrno("overlay: msync staging");
  LogEntry le{};
  le.kind = static_cast<uint16_t>(EntryKind::kCommit);
  le.method = static_cast<uint16_t>(e.method());
  le.pair = static_cast<uint64_t>(st.pair);
  le.off = st.sbase;
  le.len = n;
  le.new_size = st.send;
  le.stage_off = s0;
  return e.log().Append(le);
}

Status SplitFile::Commit() { return CommitStaged(*engine_, *st_); }

// Bytes at or past ksize, starting at or before the content's end (no
// hole: WriteLocked): into staging (st.mu held).
Status SplitFile::StageBytes(const char* buf, size_t n, uint64_t off) {
  FileState& st = *st_;
  uint64_t end = off + n;
  if (!st.Staged()) {
    engine_->NoteStaged();
    st.sbase = st.send = st.ksize;
    st.salign = st.ksize / st.block * st.block;
  }
  if (end - st.salign > kStagingBytes && st.Staged()) {
    MAPFS_RETURN_IF_ERROR(RelinkLocked(engine_->mode() != Mode::kPosix));
    st.sbase = st.send = st.ksize;
    st.salign = st.ksize / st.block * st.block;
  }
  if (end - st.salign > kStagingBytes || st.no_staging || engine_->EnsureStaging(st, fd_).code() != 0)
    return KernelWrite(buf, n, off);  // larger than staging, or no staging: the kernel's path
  Prefault(st, end - st.salign);
  if (engine_->mode() != Mode::kPosix) {
    medium::CopyNt(st.smap + (off - st.salign), buf, n);
    medium::Fence();
  } else {
    std::memcpy(st.smap + (off - st.salign), buf, n);
  }
  if (end > st.send) st.send = end;
  if (engine_->mode() != Mode::kPosix) return Commit();
  return Status::Ok();
}

// strict: an overwrite of target bytes is staged whole, committed, then
// copied in; a crash before the commit leaves the old bytes, after it
// recovery finishes the copy.
Status SplitFile::StrictOverwrite(const char* buf, size_t n, uint64_t off) {
  FileState& st = *st_;
  MAPFS_RETURN_IF_ERROR(RelinkLocked(true));
  uint64_t end = off + n;
  uint64_t salign = off / st.block * st.block;
  if (st.no_staging || end - salign > kStagingBytes || !engine_->EnsureStaging(st, fd_).ok())
    return Status::Error(EFBIG, "overlay strict: write larger than staging");
  Prefault(st, end - salign);
  medium::CopyNt(st.smap + (off - salign), buf, n);
  medium::Fence();
  // Committed as staged bytes [off, end) over the target's own.
  st.salign = salign;
  st.sbase = off;
  st.send = end;
  Status c = Commit();
  uint64_t new_size = std::max(st.ksize, end);
  st.sbase = st.send = st.ksize;  // nothing staged from the content's view
  MAPFS_RETURN_IF_ERROR(c);
  MAPFS_RETURN_IF_ERROR(CopyRange(st.sfd, off - salign, st.wfd, off, n, false));
  if (fdatasync(st.wfd) != 0) return Status::FromErrno("overlay: fdatasync");
  st.ksize = new_size;
  LogEntry d{};
  d.kind = static_cast<uint16_t>(EntryKind::kDone);
  d.pair = static_cast<uint64_t>(st.pair);
  return engine_->log().Append(d);
}

Result<size_t> SplitFile::WriteLocked(const char* buf, size_t n, uint64_t off) {
  FileState& st = *st_;
  if (n == 0) return size_t{0};
  const size_t total = n;
  if (Stale()) MAPFS_RETURN_IF_ERROR(Revalidate());
  if (off < st.ksize) MAPFS_RETURN_IF_ERROR(CheckEnd(off + n));
  uint64_t end = off + n;
  if (off < st.ksize && engine_->mode() == Mode::kStrict) {
    if (st.Staged() || end > st.ksize) MAPFS_RETURN_IF_ERROR(RelinkLocked(true));
    Status s = StrictOverwrite(buf, n, off);
    if (s.code() == EFBIG) MAPFS_RETURN_IF_ERROR(KernelWrite(buf, n, off));  // documented: not atomic
    else MAPFS_RETURN_IF_ERROR(s);
    return n;
  }
  if (off < st.ksize) {
    size_t k = static_cast<size_t>(std::min(end, st.ksize) - off);
    bool shrunk = false;
    if (st.maps_writable) MAPFS_RETURN_IF_ERROR(MapCopy(nullptr, buf, off, k, true, &shrunk));
    else MAPFS_RETURN_IF_ERROR(KernelWrite(buf, k, off));
    if (shrunk) {
      // The file ends inside [off, off + k) now: the kernel's write, which
      // grows it back over the range with a hole before, as it would have
      // for this call alone (bytes copied before the fault are rewritten).
      MAPFS_RETURN_IF_ERROR(Shrunk());
      MAPFS_RETURN_IF_ERROR(KernelWrite(buf, k, off));
    }
    buf += k;
    off += k;
    n -= k;
  }
  if (n > 0 && off > st.Size()) {
    // A write past the end leaves a hole. Staged, the hole would be zeros
    // that the relink copies over whatever another process wrote there
    // meanwhile (SQLite grows its -shm file by one-byte writes at the end
    // of each page while other processes store into it through their maps);
    // the kernel's own write leaves it a hole. Staged bytes go in first, so
    // the file's bytes keep the order they were written in.
    MAPFS_RETURN_IF_ERROR(RelinkLocked(engine_->mode() != Mode::kPosix));
    if (engine_->mode() == Mode::kStrict) {
      Status s = StrictOverwrite(buf, n, off);  // committed whole, as every strict append
      if (s.code() != EFBIG) {
        MAPFS_RETURN_IF_ERROR(s);
        return total;
      }
    }
    MAPFS_RETURN_IF_ERROR(KernelWrite(buf, n, off));
    return total;
  }
  if (n > 0) MAPFS_RETURN_IF_ERROR(StageBytes(buf, n, off));
  return total;
}

Result<size_t> SplitFile::Pwrite(const void* buf, size_t n, uint64_t off) {
  if (!writable()) return Status::Error(EBADF, "overlay: not open for writing");
  std::lock_guard<std::mutex> g(st_->mu);
  return WriteLocked(static_cast<const char*>(buf), n, off);
}

Result<uint64_t> SplitFile::Append(const void* buf, size_t n) {
  if (!writable()) return Status::Error(EBADF, "overlay: not open for writing");
  std::lock_guard<std::mutex> g(st_->mu);
  if (Stale()) MAPFS_RETURN_IF_ERROR(Revalidate());  // the end is another process's, if it appended under a lock
  uint64_t off = st_->Size();
  auto r = WriteLocked(static_cast<const char*>(buf), n, off);
  if (!r.ok()) return r.status();
  return off;
}

Result<uint64_t> SplitFile::Size() {
  std::lock_guard<std::mutex> g(st_->mu);
  if (Stale()) MAPFS_RETURN_IF_ERROR(Revalidate());
  return st_->Size();
}

// Moves what is staged into the target (st.mu held).
Status RelinkStaged(SplitEngine& e, FileState& st, bool durable) {
  if (!st.Staged()) return Status::Ok();
  uint64_t off = st.sbase, len = st.send - st.sbase, soff = st.sbase - st.salign;
  if (durable && e.mode() == Mode::kPosix) MAPFS_RETURN_IF_ERROR(CommitStaged(e, st));  // sync/strict: done per call
  if (e.method() == RelinkMethod::kMoveExtents) {
    // Dirty pages of the donor make the kernel refuse the move (EBUSY).
    auto a = reinterpret_cast<uintptr_t>(st.smap + soff) & ~uintptr_t{4095};
    if (msync(reinterpret_cast<void*>(a), reinterpret_cast<uintptr_t>(st.smap + soff + len) - a, MS_SYNC) != 0)
      return Status::FromErrno("overlay: msync staging");
  }
  RelinkMethod used;
  Status r = Relink(e.method(), st.wfd, st.sfd, off, len, soff, st.block, &used, st.smap);
  if (!r.ok()) return r;
  if (used != e.method()) e.RefusedMethod();
  st.ksize = st.send;
  st.sbase = st.send = st.ksize;
  if (used == RelinkMethod::kMoveExtents) e.DropStaging(st, false);  // holds the target's old blocks now
  if (durable || e.mode() != Mode::kPosix) {
    if (fdatasync(st.wfd) != 0) return Status::FromErrno("overlay: fdatasync");
    LogEntry d{};
    d.kind = static_cast<uint16_t>(EntryKind::kDone);
    d.pair = static_cast<uint64_t>(st.pair);
    if (st.pair >= 0) MAPFS_RETURN_IF_ERROR(e.log().Append(d));
  }
  return Status::Ok();
}

Status SplitFile::RelinkLocked(bool durable) { return RelinkStaged(*engine_, *st_, durable); }

Status SplitFile::Truncate(uint64_t size) {
  if (!writable()) return Status::Error(EINVAL, "overlay: not open for writing");
  FileState& st = *st_;
  std::lock_guard<std::mutex> g(st.mu);
  MAPFS_RETURN_IF_ERROR(RelinkLocked(engine_->mode() != Mode::kPosix));
  if (ftruncate(st.wfd, static_cast<off_t>(size)) != 0) return Status::FromErrno("overlay: ftruncate");
  st.ksize = size;
  st.sbase = st.send = size;
  if (engine_->mode() != Mode::kPosix && fdatasync(st.wfd) != 0) return Status::FromErrno("overlay: fdatasync");
  return Status::Ok();
}

Status SplitFile::Sync() {
  FileState& st = *st_;
  std::lock_guard<std::mutex> g(st.mu);
  MAPFS_RETURN_IF_ERROR(RelinkLocked(true));
  // Overwrites through the maps are dirty pages of the target.
  if (fsync(st.any_fd()) != 0) return Status::FromErrno("overlay: fsync");
  return Status::Ok();
}

Status SplitFile::Flush() {
  std::lock_guard<std::mutex> g(st_->mu);
  return RelinkLocked(engine_->mode() != Mode::kPosix);
}

Result<void*> SplitFile::Map(void* addr, size_t len, int prot, int flags, uint64_t off) {
  {
    std::lock_guard<std::mutex> g(st_->mu);
    MAPFS_RETURN_IF_ERROR(RelinkLocked(engine_->mode() != Mode::kPosix));
  }
  // A map of the target itself: the kernel's page cache, which the region
  // maps share, so both see each other's stores.
  void* p = mmap(addr, len, prot, flags, fd_, static_cast<off_t>(off));
  if (p == MAP_FAILED) return Status::FromErrno("overlay: mmap");
  return p;
}

Status SplitFile::Close() {
  if (closed_) return Status::Ok();
  closed_ = true;
  Status s;
  {
    std::lock_guard<std::mutex> g(st_->mu);
    s = RelinkLocked(engine_->mode() != Mode::kPosix);
  }
  engine_->Release(st_);
  st_.reset();
  if (close(fd_) != 0 && s.ok()) s = Status::FromErrno("overlay: close");
  return s;
}

}  // namespace mapfs::overlay::split
