// The `virtual` engine: Engine/OverlayFile over VFile, plus plain files.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <linux/falloc.h>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

#include "overlay/virtual/virtual_engine.h"
#include "overlay/virtual/vview.h"

namespace mapfs::overlay {
namespace {

using vrt::VFile;

// A file without the format's magic: the kernel serves it.
class PlainFile final : public OverlayFile {
 public:
  explicit PlainFile(int fd) : fd_(fd) {}
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
    if (close(fd) != 0) return Status::FromErrno("close");
    return Status::Ok();
  }
  int fd() const override { return fd_; }

 private:
  int fd_;
};

// A virtualized file: the application's descriptor (kept for fstat, locks),
// the process's shared VFile of that file, and the file's maps in this
// process (kept coherent with what goes through this file: vview.h).
class VirtualFile final : public OverlayFile {
 public:
  // may_write: the description is open O_RDWR (what a shared map's
  // mprotect(PROT_WRITE) needs).
  VirtualFile(int fd, std::shared_ptr<VFile> f, std::shared_ptr<vrt::ViewList> views,
              vrt::ViewRegistry* registry, bool may_write)
      : fd_(fd), f_(std::move(f)), views_(std::move(views)), registry_(registry), may_write_(may_write) {}
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
    return st;
  }
  int fd() const override { return fd_; }

 private:
  Status WriteZeros(uint64_t off, uint64_t end);

  int fd_;
  std::shared_ptr<VFile> f_;
  std::shared_ptr<vrt::ViewList> views_;
  vrt::ViewRegistry* registry_;
  bool may_write_;
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
  explicit VirtualEngine(const Options& o) : opt_(o) {}
  // At exit (the shim deletes the engine): stores through maps reach the file.
  ~VirtualEngine() override { views_.SyncAll(); }

  bool TruncatesAtAdopt() const override { return true; }
  bool StatsByPath() const override { return true; }
  bool HasViews() const override { return !views_.empty(); }
  Status UnmapViews(void* addr, size_t len) override { return views_.Unmap(addr, len); }
  Status SyncViews(void* addr, size_t len) override { return views_.Sync(addr, len); }
  int ProtectViews(void* addr, size_t len, int prot, int pkey) override {
    return views_.Protect(addr, len, prot, pkey);
  }
  void PrepareKernelStores(void* addr, size_t len) override { views_.Unprotect(addr, len); }
  void SyncAllViews() override { views_.SyncAll(); }
  bool ViewsMeet(const void* addr, size_t len) override { return views_.Meets(addr, len); }

  Result<std::unique_ptr<OverlayFile>> Adopt(int fd, int flags) override {
    auto r = AdoptInner(fd, flags);
    if (!r.ok()) close(fd);
    return r;
  }

  Status FixStat(const char* path, struct stat* st) override {
    if (!S_ISREG(st->st_mode) || st->st_size < 64) return Status::Ok();
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return Status::Ok();  // unreadable: the kernel's view stands
    Status s = FixStatOpen(fd, st);
    close(fd);
    return s;
  }

  Status FixStatFd(int fd, struct stat* st) override {
    if (!S_ISREG(st->st_mode) || st->st_size < 64) return Status::Ok();
    char p[64];
    std::snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
    return FixStat(p, st);
  }

 private:
  using Key = std::pair<dev_t, ino_t>;

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

  Result<std::unique_ptr<OverlayFile>> AdoptInner(int fd, int flags) {
    struct stat st {};
    if (fstat(fd, &st) != 0) return Status::FromErrno("fstat");
    if (!S_ISREG(st.st_mode)) return std::unique_ptr<OverlayFile>(new PlainFile(fd));
    bool writable = (flags & O_ACCMODE) != O_RDONLY;
    bool trunc = writable && (flags & O_TRUNC);
    if (trunc && st.st_size != 0) {
      // The shim left O_TRUNC to us (TruncatesAtAdopt): a plain file is
      // emptied by the kernel (and then formatted below), a virtualized one
      // through its log, after attaching.
      auto v = IsVirtualizedAny(fd);
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
      Status s = Status::Ok();
      if (flock(rw, LOCK_EX) == 0) {
        struct stat now {};
        if (fstat(rw, &now) == 0 && now.st_size == 0) s = vrt::Format(rw);
        flock(rw, LOCK_UN);
      }
      close(rw);
      MAPFS_RETURN_IF_ERROR(s);
    }
    auto v = IsVirtualizedAny(fd);
    if (!v.ok()) return v.status();
    if (!*v) {
      std::lock_guard<std::mutex> g(mu_);
      Forget({st.st_dev, st.st_ino});
      return std::unique_ptr<OverlayFile>(new PlainFile(fd));
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
        if (src != fd) close(src);
        if (!a.ok()) return a.status();
        f = std::shared_ptr<VFile>(std::move(*a));
        files_[k] = f;
      }
      Keep(k, f);
    }
    auto views = ViewsOf({st.st_dev, st.st_ino});
    if (trunc) {
      auto t = views->Begin();
      Status s = f->Truncate(0);
      views->Truncated(*f, t, 0);
      MAPFS_RETURN_IF_ERROR(s);
    }
    return std::unique_ptr<OverlayFile>(
        new VirtualFile(fd, std::move(f), std::move(views), &views_, (flags & O_ACCMODE) == O_RDWR));
  }

  static Result<bool> IsVirtualizedAny(int fd) {
    auto v = vrt::IsVirtualized(fd);
    if (!v.ok() && v.status().code() == EBADF) {
      // A write-only descriptor: look through a read-only one.
      int ro = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
      if (ro < 0) return Status::FromErrno("virtual: reopen to read the header");
      v = vrt::IsVirtualized(ro);
      close(ro);
    }
    return v;
  }

  Options opt_;
  std::mutex mu_;
  std::map<Key, std::weak_ptr<VFile>> files_;
  std::map<Key, std::weak_ptr<vrt::ViewList>> lists_;
  static constexpr size_t kKeep = 8;
  std::deque<std::pair<Key, std::shared_ptr<VFile>>> kept_;  // most recently adopted first
  vrt::ViewRegistry views_;
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
