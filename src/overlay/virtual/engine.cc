// The `virtual` engine: Engine/OverlayFile over VFile, plus plain files.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <linux/falloc.h>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

#include "overlay/virtual/virtual_engine.h"
#include "overlay/virtual/vdirect.h"
#include "overlay/virtual/vview.h"

namespace mapfs::overlay {
namespace {

using vrt::VFile;
using Key = std::pair<dev_t, ino_t>;

// The inodes this process has open through the engine, and the engine's
// own descriptors of them waiting to be closed.
//
// Why: a process's POSIX record locks (fcntl F_SETLK, what SQLite locks
// with) on a file are all released when the process closes ANY descriptor
// of that file. The engine opens files of its own (a stat by path reads the
// header; a write-only descriptor is reopened to read it; a format reopens
// read-write): closing one of those while the application holds locks on
// the file silently dropped them, and two SQLite processes then wrote at
// once (lost commits, "database disk image is malformed"). Invariant: the
// engine closes a descriptor of its own on an inode only while the process
// has no descriptor of that inode open through the engine; otherwise the
// close waits for the application's last close of the inode (which releases
// the locks anyway). Descriptors the process opened outside the shim are
// not seen (docs/OVERLAY.md, "Locks").
class Opens {
 public:
  void Hold(const Key& k) {
    std::lock_guard<std::mutex> g(mu_);
    n_[k]++;
  }
  void Release(const Key& k) {
    std::vector<int> fds;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = n_.find(k);
      if (it == n_.end() || --it->second > 0) return;
      n_.erase(it);
      for (auto d = deferred_.find(k); d != deferred_.end() && d->first == k; d = deferred_.erase(d))
        fds.push_back(d->second);
    }
    for (int fd : fds) close(fd);
  }
  bool IsOpen(const Key& k) {
    std::lock_guard<std::mutex> g(mu_);
    return n_.count(k) != 0;
  }
  // Closes the engine's own descriptor `fd` of inode `k` now, or at the
  // application's last close of `k` if it has the inode open.
  // Bounded: past kMaxDeferred descriptors waiting on one inode (a program
  // reopening a zero-headed plain file while holding it open), the close is
  // done at once, as before.
  void Close(const Key& k, int fd) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (n_.count(k) != 0 && deferred_.count(k) < kMaxDeferred) {
        deferred_.emplace(k, fd);
        return;
      }
    }
    close(fd);
  }

 private:
  std::mutex mu_;
  std::map<Key, int> n_;
  std::multimap<Key, int> deferred_;
  static constexpr size_t kMaxDeferred = 16;
};

// One application descriptor's hold on its inode in Opens, dropped once at
// Close or destruction.
class OpenRef {
 public:
  OpenRef(std::shared_ptr<Opens> o, Key k) : opens_(std::move(o)), key_(k) {}
  ~OpenRef() { Drop(); }
  OpenRef(const OpenRef&) = delete;
  OpenRef& operator=(const OpenRef&) = delete;
  void Drop() {
    if (opens_) opens_->Release(key_);
    opens_.reset();
  }

 private:
  std::shared_ptr<Opens> opens_;
  Key key_;
};

// A file without the format's magic: the kernel serves it.
class PlainFile final : public OverlayFile {
 public:
  PlainFile(int fd, std::unique_ptr<OpenRef> ref) : fd_(fd), ref_(std::move(ref)) {}
  ~PlainFile() override {
    if (fd_ >= 0) close(fd_);
  }
  Result<size_t> Pread(void* buf, size_t n, uint64_t off) override {
    ssize_t r = pread(fd_, buf, n, static_cast<off_t>(off));
    if (r < 0) return Status::FromErrno("pread");
    return static_cast<size_t>(r);
  }
  Result<size_t> Pwrite(const void* buf, size_t n, uint64_t off) override {
    ssize_t r = pwrite(fd_, buf, n, static_cast<off_t>(off));
    if (r < 0) return Status::FromErrno("pwrite");
    return static_cast<size_t>(r);
  }
  Result<uint64_t> Append(const void* buf, size_t n) override {
    // O_APPEND descriptors append atomically in the kernel; others are
    // appended at the size (as close as the kernel lets a descriptor get).
    int fl = fcntl(fd_, F_GETFL);
    if (fl >= 0 && (fl & O_APPEND)) {
      off_t end = lseek(fd_, 0, SEEK_END);
      ssize_t r = write(fd_, buf, n);
      if (r < 0) return Status::FromErrno("write");
      off_t now = lseek(fd_, 0, SEEK_CUR);
      return static_cast<uint64_t>(now >= r ? now - r : end);
    }
    struct stat st {};
    if (fstat(fd_, &st) != 0) return Status::FromErrno("fstat");
    auto r = Pwrite(buf, n, static_cast<uint64_t>(st.st_size));
    if (!r.ok()) return r.status();
    return static_cast<uint64_t>(st.st_size);
  }
  Result<uint64_t> Size() override {
    struct stat st {};
    if (fstat(fd_, &st) != 0) return Status::FromErrno("fstat");
    return static_cast<uint64_t>(st.st_size);
  }
  Status Truncate(uint64_t size) override {
    if (ftruncate(fd_, static_cast<off_t>(size)) != 0) return Status::FromErrno("ftruncate");
    return Status::Ok();
  }
  Status Sync() override {
    if (fsync(fd_) != 0) return Status::FromErrno("fsync");
    return Status::Ok();
  }
  Result<void*> Map(void* addr, size_t len, int prot, int flags, uint64_t off) override {
    void* p = mmap(addr, len, prot, flags, fd_, static_cast<off_t>(off));
    if (p == MAP_FAILED) return Status::FromErrno("mmap");
    return p;
  }
  Status Close() override {
    int fd = fd_;
    fd_ = -1;
    int r = close(fd);
    ref_->Drop();  // after the close: it may close the engine's own descriptors
    if (r != 0) return Status::FromErrno("close");
    return Status::Ok();
  }
  int fd() const override { return fd_; }

 private:
  int fd_;
  std::unique_ptr<OpenRef> ref_;  // destroyed after the destructor's close
};

// A virtualized file: the application's descriptor (kept for fstat, locks),
// the process's shared VFile of that file, and the file's maps in this
// process (kept coherent with what goes through this file: vview.h).
class VirtualFile final : public OverlayFile {
 public:
  // may_write: the description is open O_RDWR (what a shared map's
  // mprotect(PROT_WRITE) needs).
  VirtualFile(int fd, std::shared_ptr<VFile> f, std::shared_ptr<vrt::ViewList> views,
              vrt::ViewRegistry* registry, vrt::DirectMaps* direct, bool may_write, std::unique_ptr<OpenRef> ref)
      : fd_(fd), f_(std::move(f)), views_(std::move(views)), registry_(registry), direct_(direct),
        may_write_(may_write), ref_(std::move(ref)) {}
  ~VirtualFile() override {
    if (fd_ >= 0) close(fd_);
  }
  Result<size_t> Pread(void* buf, size_t n, uint64_t off) override {
    if (!views_->empty()) MAPFS_RETURN_IF_ERROR(views_->WriteBack(off, off + n));
    return f_->Pread(buf, n, off);
  }
  // Every write and truncate tells the views, mapped or not (ViewList:
  // a map being filled meanwhile may need it), failed ones too (part of
  // it may be committed, or none: the views take what the file holds,
  // never the caller's bytes, where the application has not stored).
  Result<size_t> Pwrite(const void* buf, size_t n, uint64_t off) override {
    // The size before: a failed write keeps the stores below it (Written).
    // (Only with views listed: a Size per write.)
    uint64_t before = UINT64_MAX;
    if (!views_->empty()) {
      auto size = f_->Size();
      if (size.ok()) before = *size;
    }
    auto t = views_->Begin();
    auto r = f_->Pwrite(buf, n, off);
    if (r.ok())
      views_->Written(*f_, t, buf, off, *r);
    else
      views_->Written(*f_, t, nullptr, off, n, before);
    return r;
  }
  Result<uint64_t> Append(const void* buf, size_t n) override {
    // A failed append's offset is unknown, but not below the size before
    // it (unless a truncate races it: the views may then miss what it
    // committed, shown as zeros, never written back): the views reload
    // from there, or all they hold if they were listed only since or the
    // size cannot be read. (Only with views listed: a Size per append.)
    uint64_t from = 0, before = UINT64_MAX;  // before: as Pwrite's
    if (!views_->empty()) {
      auto size = f_->Size();
      if (size.ok()) from = before = *size;
    }
    auto t = views_->Begin();
    auto r = f_->Append(buf, n);
    if (r.ok())
      views_->Written(*f_, t, buf, *r, n);
    else
      views_->Written(*f_, t, nullptr, from, UINT64_MAX, before);
    return r;
  }
  Result<uint64_t> Size() override { return f_->Size(); }
  Status Truncate(uint64_t size) override {
    if (!views_->empty()) MAPFS_RETURN_IF_ERROR(views_->WriteBack(0, UINT64_MAX));
    if (direct_ != nullptr) direct_->CutPast(f_.get(), size);  // a shrink must not free blocks this process maps
    auto t = views_->Begin();
    Status s = f_->Truncate(size);
    views_->Truncated(*f_, t, size);
    return s;
  }
  Status Sync() override {
    if (!views_->empty()) MAPFS_RETURN_IF_ERROR(views_->WriteBack(0, UINT64_MAX));
    return f_->Sync();
  }
  // The kernel's view is never the content; a fork or exec hands the
  // descriptor to a process that re-adopts it. Stores through maps are
  // written back, so the next image reads them.
  Status Flush() override { return views_->empty() ? Status::Ok() : views_->WriteBack(0, UINT64_MAX); }
  Result<void*> Map(void* addr, size_t len, int prot, int flags, uint64_t off) override {
    // A copy of the content (vview.h): the stores of other maps of the file
    // in this process are written back first, so the copy holds them.
    if (!views_->empty()) MAPFS_RETURN_IF_ERROR(views_->WriteBack(off, off + len));
    // A writable shared map: the file's own blocks (vdirect.h), so that
    // other processes' maps, reads and writes of the file see its stores
    // and it sees theirs. Read-only and private maps: a copy.
    if (direct_ != nullptr && (flags & MAP_TYPE) != MAP_PRIVATE && (prot & PROT_WRITE)) {
      if (flags & MAP_FIXED) {
        MAPFS_RETURN_IF_ERROR(registry_->Unmap(addr, len));  // maps replaced there
        direct_->Unmap(addr, len);
      }
      return direct_->Map(f_, addr, len, prot, flags, off);
    }
    if ((flags & MAP_FIXED) && direct_ != nullptr) direct_->Unmap(addr, len);
    return registry_->Map(f_, views_, addr, len, prot, flags, off, may_write_);
  }
  bool KernelIsContent() const override { return false; }
  Result<uint64_t> SeekData(uint64_t off, bool hole) override {
    // Holes are unmapped blocks (never written, or cut by a truncate), at
    // block granularity; the end is a hole.
    auto size = f_->Size();
    if (!size.ok()) return size.status();
    if (off >= *size) return Status::Error(ENXIO, "lseek: past the end");
    for (uint64_t vb = off / vrt::pmem::kBlockSize; vb * vrt::pmem::kBlockSize < *size; vb++) {
      auto p = f_->PhysOf(vb);
      if (!p.ok()) return p.status();
      if ((*p == 0) == hole) return std::max(off, vb * vrt::pmem::kBlockSize);
    }
    if (hole) return *size;
    return Status::Error(ENXIO, "lseek: no data past the offset");
  }
  Status Fallocate(int mode, uint64_t off, uint64_t len) override;
  Status Close() override {
    // Every write is committed (and, in sync/strict mode, durable) when it
    // returns: nothing is pending; posix mode need not be durable here.
    // Maps of the file outlive the descriptor (they hold the VFile), and so
    // does the engine's keep list (VirtualEngine::Keep).
    Status st = Status::Ok();
    f_->ReclaimIdle();
    f_.reset();
    int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0 && st.ok()) st = Status::FromErrno("close");
    ref_->Drop();
    return st;
  }
  int fd() const override { return fd_; }

 private:
  Status WriteZeros(uint64_t off, uint64_t end);

  int fd_;
  std::shared_ptr<VFile> f_;
  std::shared_ptr<vrt::ViewList> views_;
  vrt::ViewRegistry* registry_;
  vrt::DirectMaps* direct_;
  bool may_write_;
  std::unique_ptr<OpenRef> ref_;
};

Status VirtualFile::WriteZeros(uint64_t off, uint64_t end) {
  static const char kZeros[64 * 1024] = {};
  while (off < end) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(kZeros), end - off));
    auto r = Pwrite(kZeros, n, off);
    if (!r.ok()) return r.status();
    off += *r;
  }
  return Status::Ok();
}

Status VirtualFile::Fallocate(int mode, uint64_t off, uint64_t len) {
  // Space is the engine's to allocate (at write time, copy-on-write), so a
  // reservation reserves nothing; what fallocate does to the content is done.
  if (len == 0) return Status::Error(EINVAL, "fallocate: zero length");
  auto size = f_->Size();
  if (!size.ok()) return size.status();
  uint64_t end = off + len;
  bool keep = (mode & FALLOC_FL_KEEP_SIZE) != 0;
  switch (mode & ~FALLOC_FL_KEEP_SIZE) {
    case 0:
      return !keep && end > *size ? Truncate(end) : Status::Ok();
    case FALLOC_FL_PUNCH_HOLE:
      if (!keep) return Status::Error(EINVAL, "fallocate: PUNCH_HOLE needs KEEP_SIZE");
      return WriteZeros(off, std::min(end, *size));
    case FALLOC_FL_ZERO_RANGE: {
      MAPFS_RETURN_IF_ERROR(WriteZeros(off, std::min(end, *size)));
      return !keep && end > *size ? Truncate(end) : Status::Ok();
    }
    default:
      return Status::Error(EOPNOTSUPP, "fallocate: this mode is not supported for a virtualized file");
  }
}

class VirtualEngine final : public Engine {
 public:
  // MAPFS_VIRTUAL_SHARED_MAPS=copy: writable shared maps are copies as
  // before 2026-11-28 (coherent within the process only): for the tests
  // of the copy machinery (dirty tracking), which read-only shared maps
  // still use, and for comparisons. Default: direct (vdirect.h).
  explicit VirtualEngine(const Options& o) : opt_(o) {
    const char* e = std::getenv("MAPFS_VIRTUAL_SHARED_MAPS");
    direct_maps_ = e == nullptr || std::strcmp(e, "copy") != 0;
  }
  // At exit (the shim deletes the engine): stores through maps reach the file.
  ~VirtualEngine() override { views_.SyncAll(); }

  bool TruncatesAtAdopt() const override { return true; }
  bool StatsByPath() const override { return true; }
  // Direct maps (vdirect.h) are the kernel's maps of the file's blocks:
  // msync is the kernel's; munmap and mprotect only need them known.
  bool HasViews() const override { return !views_.empty() || !direct_.empty(); }
  Status UnmapViews(void* addr, size_t len) override {
    direct_.Unmap(addr, len);
    return views_.Unmap(addr, len);
  }
  Status SyncViews(void* addr, size_t len) override { return views_.Sync(addr, len); }
  int ProtectViews(void* addr, size_t len, int prot, int pkey) override {
    if (!views_.Meets(addr, len)) return direct_.Protect(addr, len, prot, pkey);
    return views_.Protect(addr, len, prot, pkey);
  }
  void PrepareKernelStores(void* addr, size_t len) override { views_.Unprotect(addr, len); }
  void SyncAllViews() override { views_.SyncAll(); }
  bool ViewsMeet(const void* addr, size_t len) override { return views_.Meets(addr, len) || direct_.Meets(addr, len); }

  Result<std::unique_ptr<OverlayFile>> Adopt(int fd, int flags) override {
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      Status s = Status::FromErrno("fstat");
      close(fd);
      return s;
    }
    // Held from here: the engine's own descriptors of this inode opened
    // while adopting are closed only after the application's last close.
    Key k{st.st_dev, st.st_ino};
    opens_->Hold(k);
    auto ref = std::make_unique<OpenRef>(opens_, k);
    auto r = AdoptInner(fd, flags, st, ref);
    if (!r.ok()) {
      close(fd);
      ref.reset();  // after the close
    }
    return r;
  }

  Status FixStat(const char* path, struct stat* st) override {
    if (!S_ISREG(st->st_mode) || st->st_size < 64) return Status::Ok();
    Key k{st->st_dev, st->st_ino};
    // A file this process holds answers without an open of its own: closing
    // that descriptor would release the process's record locks (Opens).
    if (std::shared_ptr<VFile> f = Find(k)) {
      auto size = f->Size();
      if (!size.ok()) return size.status();
      st->st_size = static_cast<off_t>(*size);
      return Status::Ok();
    }
    if (opens_->IsOpen(k)) return Status::Ok();  // open here and plain: the kernel's
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return Status::Ok();  // unreadable: the kernel's view stands
    Status s = FixStatOpen(fd, st);
    opens_->Close(k, fd);
    return s;
  }

  Status FixStatFd(int fd, struct stat* st) override {
    if (!S_ISREG(st->st_mode) || st->st_size < 64) return Status::Ok();
    char p[64];
    std::snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
    return FixStat(p, st);
  }

 private:

  // Keeps `f` attached after its last close (under mu_), as the split
  // engine keeps its maps: reopening the file then costs no mmap, no replay
  // of the log since the checkpoint and no refilling of page tables
  // (MADV_POPULATE per 2 MiB), and closing it no munmap. At most kKeep
  // files, the least recently adopted let go first; a kept file whose last
  // name is gone is let go at the next adoption, so its space returns to
  // the kernel then, not at exit. A kept handle is one of the same inode
  // (it holds the file open), so it serves any later open of the file.
  void Keep(const Key& k, const std::shared_ptr<VFile>& f) {
    Forget(k);
    for (auto it = kept_.begin(); it != kept_.end();) it = it->second->Unlinked() ? kept_.erase(it) : it + 1;
    kept_.emplace_front(k, f);
    if (kept_.size() > kKeep) kept_.pop_back();
  }
  // Drops the engine's hold on the file `k` (under mu_): it was found plain,
  // or is about to be formatted afresh (emptied by the kernel meanwhile).
  void Forget(const Key& k) {
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (it->first == k) {
        kept_.erase(it);
        return;
      }
  }

  Status FixStatOpen(int fd, struct stat* st) {
    auto v = vrt::IsVirtualized(fd);
    if (!v.ok() || !*v) return Status::Ok();
    // A file this process holds answers from its replay; any other is not
    // attached for a stat (ContentSize reads only its log since the
    // checkpoint), so `ls -l` of a directory stays cheap.
    std::shared_ptr<VFile> f = Find({st->st_dev, st->st_ino});
    auto size = f ? f->Size() : vrt::ContentSize(fd);
    if (!size.ok()) return size.status();
    st->st_size = static_cast<off_t>(*size);
    return Status::Ok();
  }

  std::shared_ptr<vrt::ViewList> ViewsOf(Key k) {
    std::lock_guard<std::mutex> g(mu_);
    auto l = lists_[k].lock();
    if (!l) {
      l = std::make_shared<vrt::ViewList>();
      lists_[k] = l;
    }
    return l;
  }

  std::shared_ptr<VFile> Find(Key k) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = files_.find(k);
    return it == files_.end() ? nullptr : it->second.lock();
  }

  Result<std::unique_ptr<OverlayFile>> AdoptInner(int fd, int flags, struct stat st, std::unique_ptr<OpenRef>& ref) {
    const Key key{st.st_dev, st.st_ino};
    if (!S_ISREG(st.st_mode)) return std::unique_ptr<OverlayFile>(new PlainFile(fd, std::move(ref)));
    bool writable = (flags & O_ACCMODE) != O_RDONLY;
    bool trunc = writable && (flags & O_TRUNC);
    if (trunc && st.st_size != 0) {
      // The shim left O_TRUNC to us (TruncatesAtAdopt): a plain file is
      // emptied by the kernel (and then formatted below), a virtualized one
      // through its log, after attaching.
      auto v = IsVirtualizedAny(fd, key);
      if (!v.ok()) return v.status();
      if (!*v) {
        if (ftruncate(fd, 0) != 0) return Status::FromErrno("virtual: O_TRUNC");
        st.st_size = 0;
      }
    }
    if (st.st_size == 0 && writable && (flags & (O_CREAT | O_TRUNC))) {
      // Created (or emptied) under the engine: format it. The flock keeps
      // two processes creating one file from formatting it twice.
      int rw = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR | O_CLOEXEC);
      if (rw < 0) return Status::FromErrno("virtual: reopen to format");
      {
        // A handle kept on this inode describes a format the kernel cut.
        std::lock_guard<std::mutex> g(mu_);
        Forget({st.st_dev, st.st_ino});
        files_.erase({st.st_dev, st.st_ino});
      }
      // Non-blocking, bounded (as SettledFormat): the holder may be the
      // application (another process, or this one through another open
      // file description); then the file is left as it is, empty and plain.
      Status s = Status::Ok();
      for (int i = 0; i < 2000; i++) {  // 2 s: a format is a few system calls
        if (flock(rw, LOCK_EX | LOCK_NB) == 0) {
          struct stat now {};
          if (fstat(rw, &now) == 0 && now.st_size == 0) s = vrt::Format(rw);
          flock(rw, LOCK_UN);
          break;
        }
        if (errno != EWOULDBLOCK && errno != EINTR) break;
        usleep(1000);
      }
      opens_->Close(key, rw);
      MAPFS_RETURN_IF_ERROR(s);
    }
    auto v = IsVirtualizedAny(fd, key);
    if (v.ok() && !*v && st.st_size != 0) v = SettledFormat(fd, key, static_cast<uint64_t>(st.st_size));
    if (!v.ok()) return v.status();
    if (!*v) {
      std::lock_guard<std::mutex> g(mu_);
      Forget({st.st_dev, st.st_ino});
      return std::unique_ptr<OverlayFile>(new PlainFile(fd, std::move(ref)));
    }
    std::shared_ptr<VFile> f;
    {
      std::lock_guard<std::mutex> g(mu_);
      Key k{st.st_dev, st.st_ino};
      f = files_[k].lock();
      if (!f || (writable && !f->writable())) {
        // A write-only descriptor cannot read the header: attach through a
        // read-write one (the kernel checks read permission here).
        int src = fd;
        if ((flags & O_ACCMODE) == O_WRONLY) {
          src = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR | O_CLOEXEC);
          if (src < 0) return Status::FromErrno("virtual: reopen a write-only descriptor");
        }
        auto a = VFile::Attach(src, writable || (f && f->writable()), opt_.mode);
        if (src != fd) opens_->Close(key, src);
        if (!a.ok()) return a.status();
        (*a)->SetCloser([o = opens_, key](int d) { o->Close(key, d); });
        f = std::shared_ptr<VFile>(std::move(*a));
        files_[k] = f;
      }
      Keep(k, f);
    }
    auto views = ViewsOf({st.st_dev, st.st_ino});
    if (trunc) {
      auto t = views->Begin();
      direct_.CutPast(f.get(), 0);
      Status s = f->Truncate(0);
      views->Truncated(*f, t, 0);
      MAPFS_RETURN_IF_ERROR(s);
    }
    return std::unique_ptr<OverlayFile>(
        new VirtualFile(fd, std::move(f), std::move(views), &views_, direct_maps_ ? &direct_ : nullptr,
                        (flags & O_ACCMODE) == O_RDWR,
                        std::move(ref)));
  }

  // A file without magic whose first 64 bytes are zeros may be one another
  // process is formatting (Format grows the file, then writes the header
  // last, under flock LOCK_EX): served as plain, its metadata would be its
  // content. Waits for the format (a shared flock on a descriptor of its
  // own) and looks again. Bounded, non-blocking attempts: the holder of
  // the flock may be this very process (the application's own flock on
  // the file), and then the file stays what it is.
  Result<bool> SettledFormat(int fd, const Key& key, uint64_t size) {
    // Only at the size Format gives the file first (it starts on an empty
    // file): a plain file whose first bytes are zeros, held under someone's
    // LOCK_EX, is not waited for.
    if (size != vrt::FormatSize()) return false;
    int ro = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (ro < 0) return false;  // unreadable: as before, plain
    char head[64];
    static const char kZero[64] = {};
    if (pread(ro, head, sizeof(head), 0) == static_cast<ssize_t>(sizeof(head)) &&
        std::memcmp(head, kZero, sizeof(head)) == 0) {
      for (int i = 0; i < 2000; i++) {  // 2 s: a format is a few system calls
        if (flock(ro, LOCK_SH | LOCK_NB) == 0) {
          flock(ro, LOCK_UN);
          break;
        }
        if (errno != EWOULDBLOCK) break;
        usleep(1000);
      }
    }
    // Looked at again in every case: the format may have ended between the
    // caller's look and this one (the header is then there, not zeros).
    Result<bool> v = vrt::IsVirtualized(ro);
    opens_->Close(key, ro);
    return v;
  }

  Result<bool> IsVirtualizedAny(int fd, const Key& key) {
    auto v = vrt::IsVirtualized(fd);
    if (!v.ok() && v.status().code() == EBADF) {
      // A write-only descriptor: look through the attached file's own
      // descriptor if the process holds it (no new descriptor: Opens),
      // else through a read-only one.
      if (std::shared_ptr<VFile> f = Find(key)) return vrt::IsVirtualized(f->map_fd());
      int ro = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
      if (ro < 0) return Status::FromErrno("virtual: reopen to read the header");
      v = vrt::IsVirtualized(ro);
      opens_->Close(key, ro);
    }
    return v;
  }

  Options opt_;
  std::shared_ptr<Opens> opens_ = std::make_shared<Opens>();
  std::mutex mu_;
  std::map<Key, std::weak_ptr<VFile>> files_;
  std::map<Key, std::weak_ptr<vrt::ViewList>> lists_;
  static constexpr size_t kKeep = 8;
  std::deque<std::pair<Key, std::shared_ptr<VFile>>> kept_;  // most recently adopted first
  vrt::ViewRegistry views_;
  vrt::DirectMaps direct_;  // after views_: destroyed first (its registrations end)
  bool direct_maps_ = true;
};

}  // namespace

Result<std::unique_ptr<Engine>> NewVirtualEngine(const Options& o) {
  struct stat st {};
  if (stat(o.dir.c_str(), &st) != 0) return Status::FromErrno("virtual engine: " + o.dir);
  if (!S_ISDIR(st.st_mode)) return Status::Error(ENOTDIR, "virtual engine: " + o.dir + " is not a directory");
  // Recovery is per file, at attach (replay of the log since its
  // checkpoint): nothing to do for the directory as a whole.
  return std::unique_ptr<Engine>(new VirtualEngine(o));
}

}  // namespace mapfs::overlay
