// fsck of a virtualized file and the `mapfs overlay` tools (cat, import,
// export). None of them trusts the file: every block number is checked
// before it is touched, damage is EUCLEAN with a message.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "medium/persist.h"
#include "overlay/virtual/virtual_engine.h"

namespace mapfs::overlay::vrt {

using namespace pmem;
namespace persist = ::mapfs::medium;

Status VFile::Check(std::string* report) {
  Pin pin(this);
  MAPFS_RETURN_IF_ERROR(CatchUp());  // validates every entry since the checkpoint
  MetaShared* sh = shared();
  const uint64_t applied = applied_.load(), ck = persist::Load64(&sh->ckpt_seq);
  const uint64_t size = size_.load(), pe = persist::Load64(&sh->phys_end);
  std::string notes;
  uint64_t lock = persist::Load64(&sh->gc_lock);
  if (lock != 0) notes += "GC lock held by pid " + std::to_string(lock) + " (taken over if it is gone)\n";
  auto bit = [&](uint64_t b) { return (persist::Load64(&bitmap_[b / 64]) >> (b % 64)) & 1; };
  for (uint64_t b = 0; b < hdr_.data_start; b++)
    if (!bit(b)) return Status::Error(EUCLEAN, "virtual: bitmap: metadata block " + std::to_string(b) + " marked free");
  for (uint64_t b = pe; b < (pe + 63) / 64 * 64 && b < hdr_.pblocks_max; b++)
    if (bit(b)) return Status::Error(EUCLEAN, "virtual: bitmap: block " + std::to_string(b) + " past the file's end in use");
  std::vector<uint8_t> ref(pe, 0);  // 1 current mapping, 2 otherwise held (log, old table)
  const uint64_t live_blocks = (size + kBlockSize - 1) / kBlockSize;
  uint64_t mapped = 0;
  for (uint64_t v = 0; v < hdr_.vblocks_max; v++) {
    uint64_t t = persist::Load64(&ptable_[v]);
    if (t == 0 && dtable_[v] == 0) continue;
    if (TableTag(t) > applied)
      return Status::Error(EUCLEAN, "virtual: block table: entry " + std::to_string(v) + " newer than the log");
    if (TablePhys(t) != 0) {
      MAPFS_RETURN_IF_ERROR(CheckPhys(TablePhys(t), ("block table entry " + std::to_string(v)).c_str()));
      if (ref[TablePhys(t)] != 0)
        return Status::Error(EUCLEAN, "virtual: block table: block " + std::to_string(TablePhys(t)) + " mapped twice");
      ref[TablePhys(t)] = 2;
    }
    auto m = Lookup(v);
    if (!m.ok()) return m.status();
    uint32_t p = TablePhys(*m);
    if (p == 0) continue;
    if (v >= live_blocks)
      return Status::Error(EUCLEAN, "virtual: block " + std::to_string(v) + " mapped past the end of the content");
    if (!bit(p)) return Status::Error(EUCLEAN, "virtual: bitmap: mapped block " + std::to_string(p) + " marked free");
    if (ref[p] == 1) return Status::Error(EUCLEAN, "virtual: block " + std::to_string(p) + " mapped twice");
    ref[p] = 1;
    mapped++;
  }
  // Blocks named by entries not yet checkpointed (superseded ones stay
  // allocated until the GC) and their record blocks.
  for (uint64_t s = ck; s < applied; s++) {
    uint64_t e = persist::Load64(slot(s));
    if (EntryType(e) == kInline) {
      for (uint32_t i = 0; i < EntryBlocks(e); i++) ref[EntryPhys(e) + i] |= 2;
      continue;
    }
    ref[EntryPhys(e)] |= 2;
    const RecordHeader* rh = reinterpret_cast<const RecordHeader*>(base_ + uint64_t{EntryPhys(e)} * kBlockSize);
    const Run* runs = reinterpret_cast<const Run*>(rh + 1);
    for (uint32_t r = 0; r < rh->nruns; r++)
      if (runs[r].phys != 0)
        for (uint32_t i = 0; i < runs[r].nblocks; i++) ref[runs[r].phys + i] |= 2;
  }
  // Commits take the first empty slot, so no entry of its lap follows the
  // tail: one that does means a damaged entry cut the log short.
  for (uint64_t s = applied + 1; s < ck + hdr_.log_slots; s++) {
    uint64_t e = persist::Load64(slot(s));
    if (e != 0 && EntryLap(e) == LapOf(s, hdr_.log_slots))
      return Status::Error(EUCLEAN, "virtual: log: entry " + std::to_string(s) + " follows a damaged or missing entry " +
                                        std::to_string(applied));
  }
  uint64_t leaked = 0;
  for (uint64_t b = hdr_.data_start; b < pe; b++) {
    if (ref[b] != 0 && !bit(b))
      return Status::Error(EUCLEAN, "virtual: bitmap: block " + std::to_string(b) + " in use but marked free");
    if (ref[b] == 0 && bit(b)) leaked++;
  }
  if (leaked) notes += std::to_string(leaked) + " blocks allocated but unreferenced (left by a crashed writer; harmless)\n";
  if (report)
    *report = "clean: size " + std::to_string(size) + ", " + std::to_string(mapped) + " blocks mapped, " +
              std::to_string(applied - ck) + " log entries since the checkpoint, file " + std::to_string(pe) +
              " blocks\n" + notes;
  return Status::Ok();
}

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

Status WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Status::FromErrno("write");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// Copies the content of `in` (virtualized or not) to the descriptor `out`.
Status CopyOut(int in, int out) {
  std::vector<char> buf(1 << 20);
  auto v = IsVirtualized(in);
  if (!v.ok()) return v.status();
  if (!*v) {
    for (;;) {
      ssize_t r = read(in, buf.data(), buf.size());
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Status::FromErrno("read");
      if (r == 0) return Status::Ok();
      MAPFS_RETURN_IF_ERROR(WriteAll(out, buf.data(), static_cast<size_t>(r)));
    }
  }
  auto f = VFile::Attach(in, false, Mode::kPosix);
  if (!f.ok()) return f.status();
  for (uint64_t off = 0;;) {
    auto r = (*f)->Pread(buf.data(), buf.size(), off);
    if (!r.ok()) return r.status();
    if (*r == 0) return Status::Ok();
    MAPFS_RETURN_IF_ERROR(WriteAll(out, buf.data(), *r));
    off += *r;
  }
}

// Writes a new file beside `path` with `fill`, then renames it over `path`
// with path's permissions: a crash leaves the old file or the new one.
template <typename Fill>
Status Replace(const std::string& path, const struct stat& st, Fill fill) {
  std::string tmp = path + ".mapfs-XXXXXX";
  Fd t;
  t.fd = mkstemp(tmp.data());
  if (t.fd < 0) return Status::FromErrno("create " + tmp);
  Status s = fill(t.fd);
  if (s.ok() && fchmod(t.fd, st.st_mode & 07777) != 0) s = Status::FromErrno("fchmod");
  if (s.ok()) (void)!fchown(t.fd, st.st_uid, st.st_gid);  // best effort: only root may give files away
  if (s.ok() && fsync(t.fd) != 0) s = Status::FromErrno("fsync");
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) s = Status::FromErrno("rename");
  if (!s.ok()) unlink(tmp.c_str());
  return s;
}

}  // namespace

Status CatFile(const std::string& path, FILE* out) {
  Fd in;
  in.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in.fd < 0) return Status::FromErrno(path);
  std::fflush(out);
  return CopyOut(in.fd, fileno(out));
}

Status ImportFile(const std::string& path, const FormatOptions& o) {
  Fd in;
  in.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in.fd < 0) return Status::FromErrno(path);
  struct stat st {};
  if (fstat(in.fd, &st) != 0) return Status::FromErrno(path);
  if (!S_ISREG(st.st_mode)) return Status::Error(EINVAL, "not a regular file");
  auto v = IsVirtualized(in.fd);
  if (!v.ok()) return v.status();
  if (*v) return Status::Error(EEXIST, "already virtualized");
  FormatOptions fo = o;
  uint64_t blocks = (static_cast<uint64_t>(st.st_size) + kBlockSize - 1) / kBlockSize;
  if (blocks * 2 > fo.vblocks_max) fo.vblocks_max = static_cast<uint32_t>(std::min<uint64_t>(blocks * 2, kMaxBlocks));
  if (uint64_t{fo.vblocks_max} * 2 > fo.pblocks_max)
    fo.pblocks_max = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{fo.vblocks_max} * 2, kMaxBlocks));
  return Replace(path, st, [&](int fd) -> Status {
    MAPFS_RETURN_IF_ERROR(Format(fd, fo));
    auto f = VFile::Attach(fd, true, Mode::kPosix);
    if (!f.ok()) return f.status();
    std::vector<char> buf(1 << 20);
    for (uint64_t off = 0;;) {
      ssize_t r = pread(in.fd, buf.data(), buf.size(), static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Status::FromErrno("read " + path);
      if (r == 0) break;
      auto w = (*f)->Pwrite(buf.data(), static_cast<size_t>(r), off);
      if (!w.ok()) return w.status();
      off += static_cast<uint64_t>(r);
    }
    MAPFS_RETURN_IF_ERROR((*f)->Gc(true));
    return (*f)->Sync();
  });
}

Status ExportFile(const std::string& path) {
  Fd in;
  in.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in.fd < 0) return Status::FromErrno(path);
  struct stat st {};
  if (fstat(in.fd, &st) != 0) return Status::FromErrno(path);
  auto v = IsVirtualized(in.fd);
  if (!v.ok()) return v.status();
  if (!*v) return Status::Error(EINVAL, "not virtualized");
  return Replace(path, st, [&](int fd) { return CopyOut(in.fd, fd); });
}

Status CheckFile(const std::string& path, std::string* report) {
  Fd in;
  in.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in.fd < 0) return Status::FromErrno(path);
  auto v = IsVirtualized(in.fd);
  if (!v.ok()) return v.status();
  if (!*v) {
    // A plain file, or one whose magic was damaged: tell the two apart by
    // the rest of the header only if it could be ours.
    if (report) *report = "plain file (not virtualized): nothing to check\n";
    return Status::Ok();
  }
  auto f = VFile::Attach(in.fd, false, Mode::kPosix);
  if (!f.ok()) return f.status();
  return (*f)->Check(report);
}

}  // namespace mapfs::overlay::vrt
