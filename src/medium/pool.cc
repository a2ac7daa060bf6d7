#include "medium/pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>

#include "common/crc32c.h"
#include "common/log.h"
#include "common/units.h"
#include "medium/persist.h"
#include "medium/pool_access.h"
#include "medium/protection.h"

#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif
#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif

namespace mapfs::medium {
namespace {

constexpr uint64_t kMinPoolSize = 16 * MiB;
constexpr int kMaxLevel = 11;  // L11 = 32 TiB

std::string Hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; i++) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

std::string Hex64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

uint32_t HeaderChecksum(const format::PoolHeader& h) {
  return Crc32c(&h, offsetof(format::PoolHeader, checksum));
}

// OFD byte-range locks: released by the kernel when the fd closes or the
// process dies, and distinct per open file description (so two mounts in
// one process behave like two processes).
int OfdLock(int fd, off_t byte, short type, bool wait) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = byte;
  fl.l_len = 1;
  int r;
  do {
    r = ::fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
  } while (r < 0 && errno == EINTR);
  return r;
}

// Size of a DAX character device, from sysfs.
Result<uint64_t> DevdaxSize(const struct stat& st) {
  char path[128];
  std::snprintf(path, sizeof path, "/sys/dev/char/%u:%u/size", major(st.st_rdev), minor(st.st_rdev));
  std::ifstream f(path);
  uint64_t size = 0;
  if (!(f >> size)) return Status::Error(ENODEV, std::string("cannot read device size from ") + path);
  return size;
}

// The tmpfs "huge=" option of the mount holding `path`, if it is one.
std::string TmpfsHugeOption(const std::string& path) {
  char real[PATH_MAX];
  if (::realpath(path.c_str(), real) == nullptr) return "";
  std::ifstream mounts("/proc/self/mounts");
  std::string dev, dir, type, opts, best_opts;
  size_t best = 0;
  while (mounts >> dev >> dir >> type >> opts) {
    std::string rest;
    std::getline(mounts, rest);
    if (type != "tmpfs") continue;
    std::string d = dir == "/" ? "/" : dir + "/";
    if ((std::strncmp(real, d.c_str(), d.size()) == 0 || dir == real) && dir.size() >= best) {
      best = dir.size();
      best_opts = opts;
    }
  }
  size_t pos = best_opts.find("huge=");
  if (pos == std::string::npos) return best ? "never" : "";
  size_t end = best_opts.find(',', pos);
  return best_opts.substr(pos + 5, end == std::string::npos ? std::string::npos : end - pos - 5);
}

// The selected value of /sys/kernel/mm/transparent_hugepage/shmem_enabled
// ("never", "force", ...), or "" when unknown.
std::string ShmemEnabled() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string line;
  std::getline(f, line);
  size_t a = line.find('['), b = line.find(']');
  return a == std::string::npos || b == std::string::npos || b < a ? "" : line.substr(a + 1, b - a - 1);
}

struct FileInfo {
  uint64_t size = 0;
  bool is_device = false;
  bool hugetlbfs = false;
  bool tmpfs = false;
};

Result<FileInfo> Inspect(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno("fstat " + path);
  FileInfo fi;
  if (S_ISCHR(st.st_mode)) {
    auto sz = DevdaxSize(st);
    if (!sz.ok()) return sz.status();
    fi.size = *sz;
    fi.is_device = true;
  } else if (S_ISREG(st.st_mode)) {
    fi.size = static_cast<uint64_t>(st.st_size);
  } else {
    return Status::Error(EINVAL, path + ": not a regular file or DAX device");
  }
  struct statfs sfs {};
  if (::fstatfs(fd, &sfs) == 0) {
    fi.hugetlbfs = sfs.f_type == HUGETLBFS_MAGIC;
    fi.tmpfs = sfs.f_type == TMPFS_MAGIC;
  }
  return fi;
}

uint32_t DefaultTopLevel(uint64_t pool_size) {
  // The virtual region is sparse; make it 8x the pool so files can be sparse
  // and partitions can grow, but at least L4 (16 MiB) and at most L11.
  for (uint32_t l = 4; l <= kMaxLevel; l++) {
    uint64_t sz = uint64_t{4096} << (3 * l);
    if (sz >= pool_size * 8) return l;
  }
  return kMaxLevel;
}


// The LD_PRELOAD shim's shadow directory of Unix sockets bound at pool
// paths (src/preload/socket_calls.cc): kernel socket files named by inode
// number. Nobody can be listening on one in a pool no one has open.
void RemoveSocketShadows(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return;
  if (DIR* d = ::fdopendir(dfd)) {
    while (struct dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ::unlinkat(dfd, e->d_name, 0);
    ::closedir(d);
  } else {
    ::close(dfd);
  }
  ::rmdir(dir.c_str());
}

}  // namespace

// ---------------------------------------------------------------- create

Status Pool::Create(const std::string& path, const CreateOptions& opt) {
  uint64_t size = AlignDown(opt.size, kChunkSize);
  if (size < kMinPoolSize)
    return Status::Error(EINVAL, "pool size must be at least " + FormatSize(kMinPoolSize));
  if (opt.page_shift != 12 && opt.page_shift != 21)
    return Status::Error(EINVAL, "page size must be 4k or 2m");
  if (opt.redo_slots == 0 || opt.redo_slots > kMaxRedoSlots || opt.redo_slot_size % kPageSize != 0 ||
      opt.redo_slot_size < kPageSize)
    return Status::Error(EINVAL, "bad redo log geometry");
  if (opt.top_level != 0 && (opt.top_level < 4 || opt.top_level > kMaxLevel))
    return Status::Error(EINVAL, "top level must be between 4 and 11");

  // The whole geometry is checked before the file is touched: a refused
  // request must not destroy an existing pool.
  format::PoolHeader h{};
  std::memcpy(h.magic, format::kMagic, sizeof h.magic);
  h.version = format::kVersion;
  h.header_size = sizeof(format::PoolHeader);
  std::random_device rd;
  for (auto& b : h.uuid) b = static_cast<uint8_t>(rd());
  h.pool_size = size;
  h.page_shift = opt.page_shift;
  h.default_mode = static_cast<uint32_t>(opt.mode);
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  h.mkfs_time_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  h.redo_off = format::kRedoOff;
  h.redo_slots = opt.redo_slots;
  h.redo_slot_size = opt.redo_slot_size;
  uint64_t pages = size / kPageSize;
  h.bitmap_off = AlignUp(h.redo_off + uint64_t{h.redo_slots} * h.redo_slot_size, kPageSize);
  h.bitmap_bytes = AlignUp(pages, 64) / 8;
  h.ppt_root_off = AlignUp(h.bitmap_off + h.bitmap_bytes, kPageSize);
  h.meta_end = AlignUp(h.ppt_root_off + kPageSize, kChunkSize);
  h.top_level = opt.top_level ? opt.top_level : DefaultTopLevel(size);
  h.vspace_shift = 12 + 3 * h.top_level;
  if (h.meta_end + 4 * kChunkSize > size) return Status::Error(EINVAL, "pool too small for its metadata");
  h.files_kind = opt.files_kind;
  if (opt.files_kind > format::kFilesMaxKind) return Status::Error(EINVAL, "unknown file mapping design");
  if (opt.files_kind != format::kFilesContiguous) {
    if (opt.map_percent < 1 || opt.map_percent > 95)
      return Status::Error(EINVAL, "the mapping area must take 1 to 95 % of the pool");
    // The metadata (inodes, directories) keeps its partitions in the pages
    // before the area: at least 4 chunks.
    h.map_len = std::min(AlignDown((size - h.meta_end) / 100 * opt.map_percent, kChunkSize),
                         size - h.meta_end - 4 * kChunkSize);
    h.map_off = size - h.map_len;
    if (h.map_len < kChunkSize) return Status::Error(EINVAL, "pool too small for a mapping area and its metadata");
  }

  if (opt.file_mode & ~0777u) return Status::Error(EINVAL, "pool mode must be read/write/execute bits only");
  bool world_writable = false;  // judged again, with the file, once it is open
  MAPFS_RETURN_IF_ERROR(CheckPoolDirectory(path, &world_writable));
  // An existing file is opened without O_CREAT, so that one someone else
  // put there is judged (and refused by name, below) rather than failing
  // with a bare EACCES where fs.protected_regular forbids O_CREAT on it; a
  // new one is created exclusively, so no one can slip a file in between.
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 3; tries++) {
    fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT)
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, opt.file_mode & 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return OpenError("cannot create pool", path, errno);
  auto fi = Inspect(fd, path);
  Status where = fi.ok() ? CheckPoolLocation(path, fd) : fi.status();
  if (!where.ok()) {
    ::close(fd);
    return where;
  }
  if (fi->hugetlbfs) {
    ::close(fd);
    return Status::Error(ENOTSUP, path + ": pools on hugetlbfs are not supported yet (use a tmpfs mounted huge=always)");
  }
  if (OfdLock(fd, 0, F_WRLCK, false) != 0) {
    ::close(fd);
    return Status::Error(EBUSY, path + ": pool is open by another process");
  }
  if (!fi->is_device) {
    // An existing file being formatted (no one has it open) gets the pool's rights too.
    bool ok = opt.group < 0 || ::fchown(fd, static_cast<uid_t>(-1), static_cast<gid_t>(opt.group)) == 0;
    if (!ok || ::fchmod(fd, opt.file_mode & 0666) != 0) {
      Status st = Status::FromErrno("cannot set the rights of pool " + path);
      ::close(fd);
      return st;
    }
  }
  if (fi->is_device) {
    if (fi->size < size) {
      ::close(fd);
      return Status::Error(ENOSPC, path + ": device holds only " + FormatSize(fi->size));
    }
  } else {
    // Truncating to zero first makes every page read as zero (the metadata
    // area relies on it; data pages are zeroed when used, vm/page_alloc.h).
    if (::ftruncate(fd, 0) != 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      Status st = Status::FromErrno("cannot size pool " + path);
      ::close(fd);
      return st;
    }
    if (opt.reserve && ::fallocate(fd, 0, 0, static_cast<off_t>(size)) != 0) {
      Status st = Status::FromErrno("cannot reserve " + FormatSize(size) + " for pool " + path);
      (void)::ftruncate(fd, 0);
      ::close(fd);
      return st;
    }
  }

  h.checksum = HeaderChecksum(h);

  void* m = ::mmap(nullptr, h.meta_end, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    Status st = Status::FromErrno("cannot map pool " + path);
    ::close(fd);
    return st;
  }
  char* base = static_cast<char*>(m);
  if (fi->is_device) ZeroNt(base, h.meta_end);  // a device keeps old bytes
  // Metadata area pages are in use from the start.
  auto* bitmap = reinterpret_cast<uint64_t*>(base + h.bitmap_off);
  uint64_t meta_pages = h.meta_end / kPageSize;
  for (uint64_t p = 0; p < meta_pages; p++) bitmap[p / 64] |= uint64_t{1} << (p % 64);
  Persist(bitmap, AlignUp(meta_pages, 64) / 8);
  // So are the mapping area's (chunk aligned: whole bitmap words).
  if (h.map_len != 0) {
    std::memset(bitmap + h.map_off / kPageSize / 64, 0xff, h.map_len / kPageSize / 8);
    Persist(bitmap + h.map_off / kPageSize / 64, h.map_len / kPageSize / 8);
  }
  // The header goes last: until it is durable the file is not a pool.
  Write(base, &h, sizeof h);
  Persist(base, sizeof h);
  ::munmap(m, h.meta_end);
  if (fi->is_device) {
    // Data pages of a device are not zero; zero them so the allocator's
    // invariant (free pages read as zero) holds.
    void* all = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (all != MAP_FAILED) {
      ZeroNt(static_cast<char*>(all) + h.meta_end, size - h.meta_end);
      Fence();
      ::munmap(all, size);
    }
  }
  if (::fsync(fd) != 0 && errno != EINVAL) {
    Status st = Status::FromErrno("fsync " + path);
    ::close(fd);
    return st;
  }
  ::close(fd);
  return Status::Ok();
}

// ---------------------------------------------------------------- validate

Status Pool::ValidateHeader(const format::PoolHeader& h, uint64_t file_size) {
  if (file_size < sizeof(format::PoolHeader))
    return Status::Error(EINVAL, "not a mapfs pool: file is only " + std::to_string(file_size) + " bytes");
  if (std::memcmp(h.magic, format::kMagic, sizeof h.magic) != 0)
    return Status::Error(EINVAL, "not a mapfs pool: bad magic at offset 0x0");
  if (h.version != format::kVersion)
    return Status::Error(EPROTONOSUPPORT, "pool format version " + std::to_string(h.version) +
                                              " is not supported (this build reads version " +
                                              std::to_string(format::kVersion) + ")");
  if (h.checksum != HeaderChecksum(h))
    return Status::Error(EUCLEAN, "pool header damaged: checksum mismatch at offset " +
                                      Hex64(offsetof(format::PoolHeader, checksum)));
  if (h.header_size != sizeof(format::PoolHeader))
    return Status::Error(EUCLEAN, "pool header damaged: header size " + std::to_string(h.header_size));
  if (file_size < h.pool_size)
    return Status::Error(EUCLEAN, "pool truncated: header says " + std::to_string(h.pool_size) +
                                      " bytes, file has " + std::to_string(file_size));
  // Geometry must be self-consistent; a checksum collision or a bad mkfs
  // must not let later layers index outside the pool.
  uint64_t pages = h.pool_size / kPageSize;
  bool bad = h.pool_size < kMinPoolSize || !IsAligned(h.pool_size, kChunkSize) ||
             (h.page_shift != 12 && h.page_shift != 21) || h.default_mode > 2 || h.options != 0 ||
             h.redo_off != format::kRedoOff || h.redo_slots == 0 || h.redo_slots > kMaxRedoSlots ||
             h.redo_slot_size < kPageSize || h.redo_slot_size % kPageSize != 0 ||
             h.bitmap_off < h.redo_off + uint64_t{h.redo_slots} * h.redo_slot_size ||
             h.bitmap_bytes != AlignUp(pages, 64) / 8 || h.ppt_root_off < h.bitmap_off + h.bitmap_bytes ||
             !IsAligned(h.ppt_root_off, kPageSize) || h.ppt_root_off + kPageSize > h.meta_end ||
             !IsAligned(h.meta_end, kChunkSize) || h.meta_end >= h.pool_size || h.top_level < 4 ||
             h.top_level > kMaxLevel || h.vspace_shift != 12 + 3 * h.top_level;
  bool bad_map = h.files_kind > format::kFilesMaxKind || h.files_reserved != 0 ||
                 (h.files_kind == format::kFilesContiguous
                      ? h.map_off != 0 || h.map_len != 0
                      : !IsAligned(h.map_off, kChunkSize) || !IsAligned(h.map_len, kChunkSize) || h.map_len == 0 ||
                            h.map_off < h.meta_end + 4 * kChunkSize || h.map_off > h.pool_size ||
                            h.map_len != h.pool_size - h.map_off);
  if (bad || bad_map) return Status::Error(EUCLEAN, "pool header damaged: inconsistent geometry");
  return Status::Ok();
}

// ---------------------------------------------------------------- open

Status Pool::Probe(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return OpenError("cannot open pool", path, errno);
  Status st;
  auto fi = Inspect(fd, path);
  if (!fi.ok()) st = fi.status();
  if (st.ok()) st = CheckPoolLocation(path, fd);
  format::PoolHeader h{};
  if (st.ok()) {
    ssize_t n = ::pread(fd, &h, sizeof h, 0);
    if (n < 0) st = Status::FromErrno("cannot read pool header of " + path);
    else if (static_cast<size_t>(n) < sizeof h)
      st = Status::Error(EINVAL, path + ": not a mapfs pool: file is only " + std::to_string(n) + " bytes");
  }
  if (st.ok()) {
    Status v = ValidateHeader(h, fi->size);
    if (!v.ok()) st = Status::Error(v.code(), path + ": " + v.message());
  }
  ::close(fd);
  return st;
}

Result<std::unique_ptr<Pool>> Pool::Open(const std::string& path, const OpenOptions& opt) {
  std::unique_ptr<Pool> p(new Pool());
  p->opt_ = opt;
  p->protect_ = opt.protect;
  Status st = p->OpenImpl(path);
  if (!st.ok()) {
    p->Unmap();
    return st;
  }
  return p;
}

Status Pool::OpenImpl(const std::string& path) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd_ < 0) return OpenError("cannot open pool", path, errno);
  auto fi = Inspect(fd_, path);
  if (!fi.ok()) return fi.status();
  MAPFS_RETURN_IF_ERROR(CheckPoolLocation(path, fd_));

  format::PoolHeader h{};
  ssize_t n = ::pread(fd_, &h, sizeof h, 0);
  if (n < 0) return Status::FromErrno("cannot read pool header of " + path);
  if (static_cast<size_t>(n) < sizeof h)
    return Status::Error(EINVAL, path + ": not a mapfs pool: file is only " + std::to_string(n) + " bytes");
  Status v = ValidateHeader(h, fi->size);
  if (!v.ok()) return Status::Error(v.code(), path + ": " + v.message());

  // Serialise against other openers and closers, then find out whether we
  // are alone.
  if (OfdLock(fd_, 1, F_WRLCK, true) != 0) return Status::FromErrno("lock pool " + path);
  open_lock_held_ = true;
  exclusive_ = OfdLock(fd_, 0, F_WRLCK, false) == 0;
  // Every mount holds byte 0 read-locked; the exclusive opener converts its
  // probe write lock at once (byte 1 keeps others out until FinishOpen), or
  // every later opener would wait forever for its read lock.
  if (OfdLock(fd_, 0, F_RDLCK, !exclusive_) != 0) return Status::FromErrno("lock pool " + path);

  // Map the whole pool: MAP_SYNC where the kernel offers it (DAX), so that
  // flushed stores are durable without msync.
  int flags = MAP_SHARED_VALIDATE | MAP_SYNC;
  void* m = ::mmap(nullptr, h.pool_size, PROT_READ | PROT_WRITE, flags, fd_, 0);
  if (m == MAP_FAILED) {
    flags = MAP_SHARED;
    m = ::mmap(nullptr, h.pool_size, PROT_READ | PROT_WRITE, flags, fd_, 0);
    if (m == MAP_FAILED) return Status::FromErrno("cannot map pool " + path);
  } else {
    map_sync_ = true;
  }
  map_flags_ = flags;
  base_ = static_cast<char*>(m);
  mapped_ = h.pool_size;
  // Writable only inside mapfs calls where the front asked for keys.
  if (protect_) MAPFS_RETURN_IF_ERROR(protection::Tag(base_, mapped_, PROT_READ | PROT_WRITE));
  fs_kind_ = fi->is_device ? "devdax" : fi->tmpfs ? "tmpfs" : "file";
  // Whether huge pages are available takes reading /proc/self/mounts (a
  // large share of a mount's time): only pools of 2 MiB pages need to know
  // now; for the others it is worked out when first asked (DetectHugePages).
  if (header().page_shift == 21) {
    DetectHugePages();
    if (huge_pages_) ::madvise(base_, mapped_, MADV_HUGEPAGE);
  }

  MAPFS_RETURN_IF_ERROR(MapShared());

  MAPFS_RETURN_IF_ERROR(RegisterMount());
  FreeIdleExits();

  if (exclusive_) {
    // A pool closed cleanly has no committed slot (every commit retires its
    // slot before returning, and the last close comes after every commit):
    // reading the slot headers would only fault their pages in.
    if (Load64(&state()->dirty) != 0) replayed_ = redo_.RecoverAll();
    needs_recovery_ = (Load64(&state()->dirty) != 0 && !ended_idle_) || replayed_ > 0;
    if (needs_recovery_) {
      Store64(&state()->recoveries, Load64(&state()->recoveries) + 1);
      MAPFS_LOG("%s: not closed cleanly; recovering (%d redo records replayed)", path.c_str(), replayed_);
    }
    Store64(&state()->dirty, 1);
    Store64(&state()->open_count, Load64(&state()->open_count) + 1);
    Persist(state(), sizeof(format::PoolState));
  }
  return Status::Ok();
}

void Pool::DetectHugePages() const {
  std::call_once(huge_once_, [this] {
    if (std::strcmp(fs_kind_, "devdax") == 0) {
      huge_pages_ = true;
      huge_reason_ = "device";
    } else if (std::strcmp(fs_kind_, "tmpfs") == 0) {
      // A tmpfs file gets huge pages from its mount's huge= option (advise:
      // with MADV_HUGEPAGE, which mapfs gives); shmem_enabled=force and deny
      // override every mount.
      std::string huge = TmpfsHugeOption(path_), shmem = ShmemEnabled();
      huge_pages_ = huge == "always" || huge == "within_size" || huge == "advise";
      huge_reason_ = "tmpfs huge=" + huge;
      if (shmem == "force" || shmem == "deny") {
        huge_pages_ = shmem == "force";
        huge_reason_ = "shmem_enabled=" + shmem;
      }
    } else {
      huge_reason_ = "not tmpfs or a device";
    }
  });
}

Status Pool::MapShared() {
  shm_name_ = "/mapfs-" + Hex(header().uuid, 16);
  // The segment takes the pool's owner, group and mode; one that already
  // exists is used only if no one but the pool's users could have made it.
  struct stat pst {};
  if (::fstat(fd_, &pst) != 0) return Status::FromErrno("fstat " + path_);
  int sfd = ::shm_open(shm_name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, pst.st_mode & 0600);
  if (sfd >= 0) {
    ShareLikePool(sfd, pst);
  } else if (errno == EEXIST) {
    sfd = ::shm_open(shm_name_.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (sfd < 0) return Status::FromErrno("shm_open " + shm_name_);
    Status st = CheckSharedObject("shared-memory segment /dev/shm" + shm_name_, sfd, pst);
    if (!st.ok()) {
      ::close(sfd);
      return st;
    }
  } else {
    return Status::FromErrno("shm_open " + shm_name_);
  }
  if (exclusive_) {
    // What the previous mounts left: if every one ended idle (the last
    // one exec'd or _exit'ed holding nothing), the dirty flag they left
    // asks for no recovery.
    struct stat ost {};
    if (::fstat(sfd, &ost) == 0 && static_cast<size_t>(ost.st_size) == sizeof(SharedState)) {
      void* old = ::mmap(nullptr, sizeof(SharedState), PROT_READ, MAP_SHARED, sfd, 0);
      if (old != MAP_FAILED) {
        uint64_t handoff = 0;
        int64_t mark = opt_.take_handoff ? int64_t{::getpid()} | kHandoffBit : 0;
        ended_idle_ = EndedIdle(static_cast<const SharedState*>(old), mark, &handoff);
        if (ended_idle_) handoff_expected_ = handoff;
        ::munmap(old, sizeof(SharedState));
      }
    }
  }
  if (exclusive_ && ::ftruncate(sfd, 0) != 0) {
    Status st = Status::FromErrno("ftruncate " + shm_name_);
    ::close(sfd);
    return st;
  }
  if (::ftruncate(sfd, sizeof(SharedState)) != 0) {
    Status st = Status::FromErrno("ftruncate " + shm_name_);
    ::close(sfd);
    return st;
  }
  struct stat sst {};
  if (::fstat(sfd, &sst) == 0) shm_ino_ = sst.st_ino;
  void* m = ::mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
  ::close(sfd);
  if (m == MAP_FAILED) return Status::FromErrno("mmap " + shm_name_);
  shared_ = static_cast<SharedState*>(m);
  if (Status st = protect_ ? protection::Tag(m, sizeof(SharedState), PROT_READ | PROT_WRITE) : Status::Ok(); !st.ok()) {
    ::munmap(m, sizeof(SharedState));
    shared_ = nullptr;
    return st;
  }
  if (exclusive_) {
    // Alone: the segment was just truncated to zero; build it.
    shared_->magic = kSharedMagic;
    shared_->layout_version = kSharedLayoutVersion;
    std::memcpy(shared_->uuid, header().uuid, 16);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    for (auto& mu : shared_->locks) pthread_mutex_init(&mu, &a);
    pthread_mutexattr_destroy(&a);
  } else if (shared_->magic != kSharedMagic || shared_->layout_version != kSharedLayoutVersion ||
             std::memcmp(shared_->uuid, header().uuid, 16) != 0) {
    return Status::Error(EPROTO, "shared state " + shm_name_ + " belongs to another pool or build");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- mount identity

bool Pool::TakeLiveLock(int slot) {
  return OfdLock(fd_, static_cast<off_t>(kLiveByte + static_cast<uint64_t>(slot)), F_WRLCK, false) == 0;
}

void Pool::DropLiveLock(int slot) {
  OfdLock(fd_, static_cast<off_t>(kLiveByte + static_cast<uint64_t>(slot)), F_UNLCK, false);
}

bool Pool::MountAlive(int slot) const {
  // Our own lock never conflicts with our own open file description.
  if (slot == mount_slot_) return true;
  if (slot < 0 || slot >= kMaxMounts || fd_ < 0) return true;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(kLiveByte + static_cast<uint64_t>(slot));
  fl.l_len = 1;
  if (::fcntl(fd_, F_OFD_GETLK, &fl) != 0) return true;
  return fl.l_type != F_UNLCK;
}

void Pool::DeferWriteBack(const void* addr) {
  const uint64_t line = (offset_of(addr) & ~uint64_t{63}) | 1;
  std::atomic<uint64_t>& slot = deferred_[(line >> 6) % kDeferredLines];
  if (ending_.load(std::memory_order_relaxed)) {
    // Marked idle or handing off: the mount may end without another
    // WriteBackDeferred (a thread still finishing a call at exit), and no
    // recovery would follow an idle end, so the line goes back now.
    Flush(base_ + (line & ~uint64_t{1}), 64);
    return;
  }
  // Why the quick check is safe: the caller's store is a locked RMW, seen by
  // all before this load; if the load still finds the line here, whoever
  // takes it out later (exchange, then write-back) writes back that store.
  if (slot.load(std::memory_order_relaxed) == line) return;
  uint64_t old = slot.exchange(line);
  if (old != 0 && old != line) Flush(base_ + (old & ~uint64_t{1}), 64);
}

void Pool::WriteBackDeferred() {
  if (base_ == nullptr) return;
  for (auto& slot : deferred_) {
    uint64_t line = slot.exchange(0);
    if (line != 0) Flush(base_ + (line & ~uint64_t{1}), 64);
  }
  Fence();
}

void Pool::MarkIdleExit(bool on) {
  if (closed_ || shared_ == nullptr || mount_slot_ < 0 || owner_pid_ != ::getpid()) return;
  ending_.store(on);
  if (on) WriteBackDeferred();
  const int64_t pid = ::getpid();
  shared_->mounts[mount_slot_].pid.store(on ? -pid : pid);
}

void Pool::MarkHandoffExit(uint64_t n, bool on) {
  if (closed_ || shared_ == nullptr || mount_slot_ < 0 || owner_pid_ != ::getpid()) return;
  ending_.store(on);
  if (on) WriteBackDeferred();
  const int64_t pid = ::getpid();
  MountEntry& e = shared_->mounts[mount_slot_];
  // The count first: whoever sees the mark sees the count it goes with.
  e.handoff.store(on ? n : 0);
  e.pid.store(on ? pid | kHandoffBit : pid);
}

void Pool::ConfirmHandoff(uint64_t n, bool missed) {
  if (closed_ || shared_ == nullptr) return;
  if (handoff_expected_ != 0) {
    // The exclusive open skipped recovery on the strength of this hand-off
    // (the old entry went with the old shared state): if it did not all
    // arrive, what is missing (an open count, an orphan) is for the next
    // exclusive open's recovery to collect.
    if (missed || n != handoff_expected_) {
      shared_->vanished.fetch_add(1);
      MAPFS_LOG("%s: an exec handed off %llu descriptions, %llu taken over; the pool is left for recovery",
                path_.c_str(), static_cast<unsigned long long>(handoff_expected_), static_cast<unsigned long long>(n));
    }
    handoff_expected_ = 0;
    return;
  }
  if (missed || n == 0) return;
  const int64_t mark = int64_t{::getpid()} | kHandoffBit;
  int best = -1;
  uint64_t best_token = 0;
  for (int i = 0; i < kMaxMounts; i++) {
    MountEntry& e = shared_->mounts[i];
    uint64_t t = e.token.load();
    if (i == mount_slot_ || t == 0 || e.pid.load() != mark || e.handoff.load() != n || MountAlive(i)) continue;
    bool owns_redo = false;
    for (const auto& o : shared_->redo_owner) owns_redo |= o.load() == t;
    // The latest image of this process: an older entry of the same pid
    // whose hand-off nobody confirmed stays for recovery.
    if (!owns_redo && t > best_token) best = i, best_token = t;
  }
  if (best < 0) return;
  int64_t expect = mark;
  if (shared_->mounts[best].token.load() == best_token &&
      shared_->mounts[best].pid.compare_exchange_strong(expect, -int64_t{::getpid()}))
    FreeIdleExits();
}

bool Pool::EndedIdle(const SharedState* old, int64_t handoff_mark, uint64_t* handoff) {
  *handoff = 0;
  if (old->magic != kSharedMagic || old->layout_version != kSharedLayoutVersion || old->vanished.load() != 0)
    return false;
  bool any_idle = false;
  for (const auto& e : old->mounts) {
    if (e.token.load() == 0) continue;
    int64_t pid = e.pid.load();
    if (handoff_mark != 0 && pid == handoff_mark && *handoff == 0 && e.handoff.load() != 0) {
      // This process's old image, which handed its descriptions to this
      // opener: provisionally idle (ConfirmHandoff settles it).
      *handoff = e.handoff.load();
    } else if (pid >= 0) {
      return false;  // a mount that died without ending idle
    }
    any_idle = true;
  }
  for (const auto& o : old->redo_owner)
    if (o.load() != 0) return false;
  return any_idle;
}

void Pool::FreeIdleExits() {
  for (int i = 0; i < kMaxMounts; i++) {
    MountEntry& e = shared_->mounts[i];
    if (i == mount_slot_ || e.token.load() == 0 || e.pid.load() >= 0 || MountAlive(i)) continue;
    // Ended idle and now dead: it held no redo slot, lock or open count,
    // so freeing its entry is all a clean close would have done. (Its
    // liveness lock is free, so no one else frees or reuses it meanwhile
    // but under this same check.)
    uint64_t t = e.token.load();
    if (e.pid.load() < 0 && e.token.compare_exchange_strong(t, 0)) e.pid.store(0);
  }
}

Status Pool::RegisterMount() {
  token_ = shared_->next_token.fetch_add(1) + 1;
  const int64_t pid = ::getpid();
  owner_pid_ = static_cast<pid_t>(pid);
  // A free slot. The liveness lock comes first, so an entry never names a
  // mount that does not hold it: whoever finds the lock free may treat the
  // entry's mount as dead. A free slot needs no scrub: it was never used
  // since the shared state was built (zeroed), or its mount ended holding
  // nothing (a clean close, or an idle end: MarkIdleExit). Only a dead
  // mount's slot, below, holds leftovers — so a mount costs no scan of the
  // layers' per-slot state unless it reuses one.
  for (int i = 0; i < kMaxMounts; i++) {
    MountEntry& e = shared_->mounts[i];
    if (e.token.load() != 0) continue;
    if (!TakeLiveLock(i)) continue;  // a mount is closing there, or another opener took it
    uint64_t expect = 0;
    if (e.token.compare_exchange_strong(expect, token_)) {
      e.handoff.store(0);
      e.pid.store(pid);
      mount_slot_ = i;
      return Status::Ok();
    }
    DropLiveLock(i);
  }
  if (opt_.scrub_slot == nullptr) return Status::Error(EMFILE, path_ + ": too many mounts of one pool");
  // Every entry is taken: reuse the slot of a mount that died or exec'd
  // without closing. Under the recovery lock, so that no reaper (which
  // takes it too) releases the dead mount's locks after they became ours.
  PoolLock lock(this, LockId::kRecovery);
  for (int i = 0; i < kMaxMounts; i++) {
    MountEntry& e = shared_->mounts[i];
    if (!TakeLiveLock(i)) continue;  // alive
    uint64_t dead = e.token.load();
    if (dead != 0 && e.pid.load() < 0) {
      // Ended idle (MarkIdleExit): nothing to recover.
      e.token.store(0);
    } else if (dead != 0) {
      // What it committed is made whole before its identity goes (its
      // redo slots name its token; holding its liveness lock, we see it
      // dead), and the pool stays dirty: it may have leaked space or left
      // an orphan that only an exclusive open's recovery collects.
      redo_.RecoverDeadLocked();
      shared_->vanished.fetch_add(1);
      MAPFS_LOG("%s: reusing mount slot %d of a vanished mount (pid %lld)", path_.c_str(), i,
                static_cast<long long>(e.pid.load()));
    }
    opt_.scrub_slot(this, i);
    e.token.store(token_);
    e.handoff.store(0);
    e.pid.store(pid);
    mount_slot_ = i;
    return Status::Ok();
  }
  return Status::Error(EMFILE, path_ + ": too many mounts of one pool");
}

Status Pool::AfterFork() {
  // Whatever happens next, this copy no longer speaks for the parent's
  // mount: the parent keeps its slot, token, redo slots and locks.
  mount_slot_ = -1;
  token_ = 0;
  if (closed_ || base_ == nullptr || fd_ < 0) return Status::Ok();
  const int inherited = fd_;
  auto fail = [&](Status st) {
    // Unusable: Close must not touch the shared state, and the parent's
    // open file description must not stay alive in this process.
    closed_ = true;
    if (fd_ != inherited && fd_ >= 0) ::close(fd_);
    ::close(inherited);
    fd_ = -1;
    return st;
  };
  // A new open file description of the same file (the path may have been
  // renamed or replaced since the mount).
  char proc[64];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", inherited);
  int fd = ::open(proc, O_RDWR | O_CLOEXEC);
  if (fd < 0) fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return fail(Status::FromErrno("cannot reopen pool " + path_));
  fd_ = fd;
  struct stat a {}, b {};
  if (::fstat(inherited, &a) != 0 || ::fstat(fd, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
    return fail(Status::Error(ESTALE, path_ + ": the pool file was replaced"));
  // A read lock on byte 0 as every mount holds, taken while the inherited
  // description still holds one, so the pool never looks closed in between.
  // Never waited for: the only description that can hold byte 0 (or the
  // open lock, byte 1) against us now is the inherited one, which is ours
  // too and would never let go. It holds byte 0 write-locked only when the
  // parent unmounted as the last mount after the fork (it saw no other
  // description) and retired the shared state: this copy cannot go on.
  // Nor does it need the open lock: no opener can be alone (exclusive)
  // while the inherited description holds its read lock.
  Status gone = Status::Error(ESTALE, path_ + ": the pool was unmounted while forking");
  if (OfdLock(fd_, 0, F_RDLCK, false) != 0)
    return fail(errno == EAGAIN || errno == EACCES ? gone : Status::FromErrno("lock pool " + path_));
  struct stat sst {};
  int sfd = ::shm_open(shm_name_.c_str(), O_RDONLY | O_CLOEXEC, 0);
  bool same = sfd >= 0 && ::fstat(sfd, &sst) == 0 && sst.st_ino == shm_ino_;
  if (sfd >= 0) ::close(sfd);
  if (!same) return fail(gone);
  exclusive_ = false;
  needs_recovery_ = false;
  replayed_ = 0;
  open_lock_held_ = false;
  Status st = RegisterMount();
  if (!st.ok()) return fail(st);
  // Drops nothing of the parent's: OFD locks go only with the last
  // descriptor of their description, and the parent still has it.
  ::close(inherited);
  return Status::Ok();
}

void Pool::FinishOpen() {
  if (open_lock_held_) {
    OfdLock(fd_, 1, F_UNLCK, false);
    open_lock_held_ = false;
  }
  needs_recovery_ = false;
}

// ---------------------------------------------------------------- close

Status Pool::Close() {
  if (closed_ || base_ == nullptr) return Status::Ok();
  WriteBackDeferred();  // before the mount's entry goes: then nobody would recover its lines
  closed_ = true;
  if (owner_pid_ != ::getpid()) {
    // A copy inherited by fork() that never took a mount of its own
    // (AfterFork): the mount and the open file description are the
    // parent's, so drop only this process's mappings and descriptor.
    Unmap();
    return Status::Ok();
  }
  if (!open_lock_held_ && OfdLock(fd_, 1, F_WRLCK, true) != 0) return Status::FromErrno("lock pool " + path_);
  open_lock_held_ = true;
  if (mount_slot_ >= 0) {
    shared_->mounts[mount_slot_].pid.store(0);
    shared_->mounts[mount_slot_].token.store(0);
  }
  if (OfdLock(fd_, 0, F_WRLCK, false) == 0) {
    // Last one out. A mount still registered vanished without closing, or
    // this one's recovery never finished (the open failed before
    // FinishOpen, e.g. on damage): leave the pool dirty so the next opener
    // runs recovery (and refuses again) instead of trusting the pool.
    FreeIdleExits();
    bool stale = shared_->vanished.load() != 0 || needs_recovery_;
    for (auto& e : shared_->mounts) stale |= e.token.load() != 0;
    if (!stale) {
      Store64(&state()->dirty, 0);
      Persist(&state()->dirty, 8);
    }
    ::shm_unlink(shm_name_.c_str());
    // The LD_PRELOAD shim's lock files (src/preload/locks.h) are named after
    // the segment; nobody holds a lock in a pool no one has open.
    for (const char* kind : {".locks", ".ofd"}) ::unlink(("/dev/shm" + shm_name_ + kind).c_str());
    RemoveSocketShadows("/dev/shm" + shm_name_ + ".sockets");
  }
  Status st;
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) st = Status::FromErrno("fsync " + path_);
  // Closing the fd would drop our locks, but only if no child of fork()
  // still shares the description (one that has not called AfterFork yet,
  // or never will): it would keep others out of byte 1, or the pool looking
  // open, for as long as it lives.
  struct flock all {};
  all.l_type = F_UNLCK;
  all.l_whence = SEEK_SET;
  ::fcntl(fd_, F_OFD_SETLK, &all);
  Unmap();
  return st;
}

void Pool::Abandon() {
  closed_ = true;
  Unmap();
}

void Pool::Unmap() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
  base_ = nullptr;
  if (shared_ != nullptr) ::munmap(shared_, sizeof(SharedState));
  shared_ = nullptr;
  if (fd_ >= 0) ::close(fd_);  // drops the OFD locks
  fd_ = -1;
}

Pool::~Pool() {
  if (!closed_) (void)Close();
  Unmap();
}

// ---------------------------------------------------------------- locks

void Pool::Lock(LockId id) {
  pthread_mutex_t* mu = &shared_->locks[static_cast<int>(id)];
  int r = pthread_mutex_lock(mu);
  if (r == EOWNERDEAD) {
    // The holder died, possibly between committing and applying a redo
    // record. Finish its work before anyone sees the state it protected.
    MAPFS_LOG("%s: a process died holding lock %d; recovering", path_.c_str(), static_cast<int>(id));
    if (id == LockId::kRecovery) {
      pthread_mutex_consistent(mu);
    } else {
      redo_.RecoverDead();
      pthread_mutex_consistent(mu);
    }
  }
}

void Pool::Unlock(LockId id) { pthread_mutex_unlock(&shared_->locks[static_cast<int>(id)]); }

}  // namespace mapfs::medium
