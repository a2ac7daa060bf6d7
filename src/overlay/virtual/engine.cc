// The `virtual` engine: Engine/OverlayFile over VFile, plus plain files.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <utility>

#include "overlay/virtual/virtual_engine.h"

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

class VirtualEngine;

// A virtualized file: the application's descriptor (kept for fstat, locks)
// and the process's shared VFile of that file.
class VirtualFile final : public OverlayFile {
 public:
  VirtualFile(int fd, std::shared_ptr<VFile> f) : fd_(fd), f_(std::move(f)) {}
  ~VirtualFile() override {
    if (fd_ >= 0) close(fd_);
  }
  Result<size_t> Pread(void* buf, size_t n, uint64_t off) override { return f_->Pread(buf, n, off); }
  Result<size_t> Pwrite(const void* buf, size_t n, uint64_t off) override { return f_->Pwrite(buf, n, off); }
  Result<uint64_t> Append(const void* buf, size_t n) override { return f_->Append(buf, n); }
  Result<uint64_t> Size() override { return f_->Size(); }
  Status Truncate(uint64_t size) override { return f_->Truncate(size); }
  Status Sync() override { return f_->Sync(); }
  Result<void*> Map(void*, size_t, int, int, uint64_t) override {
    // The content is scattered over copy-on-write blocks whose mapping a
    // commit by any process may change at any time; a kernel mapping of it
    // cannot follow (docs/OVERLAY.md).
    return Status::Error(ENODEV, "virtual engine: mmap of a virtualized file is not supported");
  }
  Status Close() override {
    // Every write is committed (and, in sync/strict mode, durable) when it
    // returns: nothing is pending; posix mode need not be durable here.
    Status st = Status::Ok();
    f_.reset();
    int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0 && st.ok()) st = Status::FromErrno("close");
    return st;
  }
  int fd() const override { return fd_; }

 private:
  int fd_;
  std::shared_ptr<VFile> f_;
};

class VirtualEngine final : public Engine {
 public:
  explicit VirtualEngine(const Options& o) : opt_(o) {}

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

  Status FixStatOpen(int fd, struct stat* st) {
    auto v = vrt::IsVirtualized(fd);
    if (!v.ok() || !*v) return Status::Ok();
    std::shared_ptr<VFile> f = Find({st->st_dev, st->st_ino});
    if (!f) {
      auto a = VFile::Attach(fd, false, opt_.mode);
      if (!a.ok()) return a.status();
      f = std::move(*a);
    }
    auto size = f->Size();
    if (!size.ok()) return size.status();
    st->st_size = static_cast<off_t>(*size);
    return Status::Ok();
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
    if (st.st_size == 0 && writable && (flags & (O_CREAT | O_TRUNC))) {
      // Created (or emptied) under the engine: format it. The flock keeps
      // two processes creating one file from formatting it twice.
      int rw = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR | O_CLOEXEC);
      if (rw < 0) return Status::FromErrno("virtual: reopen to format");
      Status s = Status::Ok();
      if (flock(rw, LOCK_EX) == 0) {
        struct stat now {};
        if (fstat(rw, &now) == 0 && now.st_size == 0) s = vrt::Format(rw);
        flock(rw, LOCK_UN);
      }
      close(rw);
      MAPFS_RETURN_IF_ERROR(s);
    }
    auto v = vrt::IsVirtualized(fd);
    if (!v.ok() && v.status().code() == EBADF) {
      // A write-only descriptor: look through a read-only one.
      int ro = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
      if (ro < 0) return Status::FromErrno("virtual: reopen to read the header");
      v = vrt::IsVirtualized(ro);
      close(ro);
    }
    if (!v.ok()) return v.status();
    if (!*v) return std::unique_ptr<OverlayFile>(new PlainFile(fd));
    std::shared_ptr<VFile> f;
    {
      std::lock_guard<std::mutex> g(mu_);
      Key k{st.st_dev, st.st_ino};
      f = files_[k].lock();
      if (!f || (writable && !f->writable())) {
        auto a = VFile::Attach(fd, writable || (f && f->writable()), opt_.mode);
        if (!a.ok()) return a.status();
        f = std::shared_ptr<VFile>(std::move(*a));
        files_[k] = f;
      }
    }
    return std::unique_ptr<OverlayFile>(new VirtualFile(fd, std::move(f)));
  }

  Options opt_;
  std::mutex mu_;
  std::map<Key, std::weak_ptr<VFile>> files_;
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
