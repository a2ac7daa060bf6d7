// One design's pool and file for `mapfs bench mapping` (mapping_target.h).
#include "mapping_target.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>

#include "common/units.h"
#include "fs/file_system.h"
#include "fs/layout_aging.h"
#include "medium/pool.h"
#include "mount/mount.h"
#include "vm/vm.h"

namespace mapfs::bench {

const std::vector<std::string>& MappingDesigns() {
  static const std::vector<std::string> d = {"contiguous", "hashfs", "cuckoo", "extent", "radix"};
  return d;
}

MappingTarget::~MappingTarget() {
  if (fs_) {
    if (f_) (void)fs_->Close(*f_);
    f_.reset();
    (void)fs_->Unmount();
    fs_.reset();
  }
  if (!path_.empty()) ::unlink(path_.c_str());
}

namespace {

Status WriteZeros(fs::FileSystem& fs, fs::OpenFile& f, uint64_t bytes) {
  std::vector<char> buf(1 * MiB, 0x5a);
  for (uint64_t p = 0; p < bytes;) {
    uint64_t n = std::min<uint64_t>(buf.size(), bytes - p);
    auto w = fs.Write(f, buf.data(), n, static_cast<int64_t>(p));
    if (!w.ok()) return w.status();
    p += n;
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<MappingTarget>> MappingTarget::Make(const TargetSpec& s) {
  std::unique_ptr<MappingTarget> t(new MappingTarget());
  const uint64_t blocks = std::max<uint64_t>(1, s.file_bytes / 4096);
  const bool contiguous = s.design == "contiguous";
  // Data space for the file at its share, plus room for the metadata
  // (inode table, redo log: a few MiB) and, block-mapped, the 90 % the
  // mapping area takes of what follows it (the area is about 0.9 x size -
  // 6 MiB, measured). The filler below sets the utilisation exactly.
  const uint64_t data = AlignUp(static_cast<uint64_t>(static_cast<double>(blocks) / s.file_share) * 4096, kChunkSize);
  medium::CreateOptions co;
  co.size = std::max<uint64_t>(64 * MiB, AlignUp((contiguous ? data : data + data / 9) + 24 * MiB, kChunkSize));
  if (!contiguous) {
    auto k = map::ParseKind(s.design);
    if (!k.ok()) return k.status();
    co.files_kind = static_cast<uint32_t>(*k);
    co.map_percent = 90;
  }
  MAPFS_RETURN_IF_ERROR(medium::Pool::Create(s.path, co));
  t->path_ = s.path;
  {
    auto fs = fs::FileSystem::Mount(s.path);
    if (!fs.ok()) return fs.status();
    if (!contiguous && s.design != "hashfs" && s.layout < 1.0) {
      fs::AgingReport r;
      MAPFS_RETURN_IF_ERROR(fs::AgeForLayout(**fs, s.layout, &r));
    }
    MAPFS_RETURN_IF_ERROR((*fs)->Unmount());
  }
  auto fs = fs::FileSystem::Mount(s.path);
  if (!fs.ok()) return fs.status();
  t->fs_ = std::move(*fs);
  t->m_ = t->fs_->data().mapper();
  t->pool_ = &t->fs_->mount().pool();
  t->vm_ = &t->fs_->mount().vm();
  t->lock_ = t->m_ != nullptr && t->m_->kind() == map::Kind::kCuckoo;

  // Filler first (it takes the aged runs as a file would), to `util`.
  uint64_t total = 0, used = 0;
  if (t->m_) {
    map::Usage u = t->m_->usage();
    total = u.blocks, used = u.used_blocks + u.node_blocks;
  } else {
    struct statvfs sv;
    MAPFS_RETURN_IF_ERROR(t->fs_->Statfs(&sv));
    total = sv.f_blocks * sv.f_frsize / 4096, used = (sv.f_blocks - sv.f_bfree) * sv.f_frsize / 4096;
  }
  const uint64_t want = static_cast<uint64_t>(s.util * static_cast<double>(total));
  if (used + blocks > want + total / 50)
    return Status::Error(ENOSPC, s.design + ": the file and the aging blocks exceed the utilisation asked");
  const uint64_t filler = want > used + blocks ? want - used - blocks : 0;
  if (filler > 0) {
    auto ff = t->fs_->Open("/filler", O_CREAT | O_RDWR, 0644);
    if (!ff.ok()) return ff.status();
    Status st = WriteZeros(*t->fs_, **ff, filler * 4096);
    (void)t->fs_->Close(**ff);
    MAPFS_RETURN_IF_ERROR(st);
  }

  auto f = t->fs_->Open("/file", O_CREAT | O_RDWR, 0644);
  if (!f.ok()) return f.status();
  t->f_ = std::move(*f);
  t->ino_ = t->f_->ino;
  t->blocks_ = blocks;
  std::vector<char> block(4096, 0x33);
  uint64_t cycles = 0;
  for (uint64_t b = 0; b < blocks; b++) {
    uint64_t c0 = __rdtsc();
    auto w = t->fs_->Write(*t->f_, block.data(), block.size(), static_cast<int64_t>(b * 4096));
    cycles += __rdtsc() - c0;
    if (!w.ok()) return w.status();
  }
  t->append_cycles_ = static_cast<double>(cycles) / static_cast<double>(blocks);
  MAPFS_RETURN_IF_ERROR(t->fs_->Fsync(*t->f_));
  if (t->m_) {
    auto ls = fs::LayoutScore(*t->fs_, *t->f_, blocks);
    t->layout_score_ = ls.ok() ? *ls : 0.0;  // one block: no pairs
  } else {
    uint64_t cap = 0;
    auto p = t->fs_->Map(*t->f_, &cap);
    if (!p.ok()) return p.status();
    t->voff_ = static_cast<uint64_t>(*p - t->vm_->base());
  }
  return t;
}

double MappingTarget::mapping_bytes_per_gib() const {
  if (!m_) return -1;
  // The file's node blocks are not told apart from the aging file's and
  // the filler's: nodes and fixed structures are pro-rated to the blocks
  // in use and to the whole area respectively.
  map::Usage u = m_->usage();
  const double b = static_cast<double>(blocks_);
  const double fixed = static_cast<double>(u.fixed_bytes) * b / static_cast<double>(u.blocks);
  const double nodes = static_cast<double>(u.node_blocks * 4096) * b / static_cast<double>(u.used_blocks);
  return (fixed + nodes) / (b * 4096.0 / GiB);
}

uint64_t MappingTarget::Map(map::Cursor* c, uint64_t fblk) {
  if (!m_) {
    uint64_t run = 0;
    return reinterpret_cast<uintptr_t>(vm_->PoolRun(voff_ + (fblk << 12), 4096, &run));
  }
  map::Mapping mp;
  int rc;
  if (lock_) {
    medium::PoolLock l(pool_, medium::LockId::kMap);
    rc = m_->Lookup(c, ino_, map::FileBlock(fblk), &mp);
  } else {
    rc = m_->Lookup(c, ino_, map::FileBlock(fblk), &mp);
  }
  return rc == 0 && mp.mapped ? m_->block_offset(mp.blk) : 0;
}

uint64_t MappingTarget::MapRange(uint64_t off, uint64_t len) {
  uint64_t sum = 0, p = off, end = off + len;
  if (!m_) {
    while (p < end) {
      uint64_t run = 0;
      sum += reinterpret_cast<uintptr_t>(vm_->PoolRun(voff_ + p, end - p, &run));
      p += std::max<uint64_t>(run, 4096);
    }
    return sum;
  }
  map::Cursor c{};
  while (p < end) {
    map::Mapping mp;
    uint64_t fblk = p >> 12;
    int rc;
    if (lock_) {
      medium::PoolLock l(pool_, medium::LockId::kMap);
      rc = m_->Lookup(&c, ino_, map::FileBlock(fblk), &mp);
    } else {
      rc = m_->Lookup(&c, ino_, map::FileBlock(fblk), &mp);
    }
    if (rc != 0) return sum;
    sum += mp.mapped ? m_->block_offset(mp.blk) : 0;
    p = std::min(end, (fblk + std::max<uint64_t>(mp.len, 1)) << 12);
  }
  return sum;
}

Result<double> MappingTarget::TruncateCycles() {
  uint64_t c0 = __rdtsc();
  MAPFS_RETURN_IF_ERROR(fs_->Ftruncate(*f_, 0));
  return static_cast<double>(__rdtsc() - c0) / static_cast<double>(blocks_);
}

CacheFlusher::CacheFlusher(size_t cap) {
  long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  size_t n = l3 > 0 ? static_cast<size_t>(l3) * 2 : 64 * MiB;
  buf_.assign(std::min<size_t>(n, cap ? cap : 256 * MiB), 1);
}

void CacheFlusher::Flush() {
  uint64_t sum = 0;
  for (size_t i = 0; i < buf_.size(); i += 64) sum += buf_[i]++;
  sink_ += sum;
  asm volatile("" : : "r"(sink_) : "memory");
}

}  // namespace mapfs::bench
