#include "overlay/split/relink.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace mapfs::overlay::split {
namespace {

// linux/ext4.h is not a UAPI header on every distribution.
struct MoveExtent {
  uint32_t reserved;
  uint32_t donor_fd;
  uint64_t orig_start;   // in blocks
  uint64_t donor_start;  // in blocks
  uint64_t len;          // in blocks
  uint64_t moved_len;    // out
};
#define MAPFS_EXT4_IOC_MOVE_EXT _IOWR('f', 15, MoveExtent)

constexpr long kXfsMagic = 0x58465342;
constexpr long kBtrfsMagic = 0x9123683E;

uint64_t RoundUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Copies staged bytes from the staging file's mapping with plain writes of
// up to 1 MiB: on ext4 and tmpfs ~25 % less CPU a page than copy_file_range,
// which splices page by page (2026-11-27: 1.3 against 1.7 us a page on ext4,
// 2.7 against 3.4 on tmpfs, 16 MiB relinked). The mapping covers the whole
// staging file, so no page of it is past the file's end (no SIGBUS).
Status CopyFromMap(const char* src, int dst, uint64_t doff, uint64_t len) {
  constexpr uint64_t kStep = 1 << 20;  // bounds the time of one call (a signal waits for it)
  while (len > 0) {
    ssize_t w = pwrite(dst, src, static_cast<size_t>(std::min(len, kStep)), static_cast<off_t>(doff));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Status::FromErrno("overlay relink: write target");
    src += w;
    doff += static_cast<uint64_t>(w);
    len -= static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Status PlainCopy(int src, uint64_t soff, int dst, uint64_t doff, uint64_t len, const char* src_map = nullptr) {
  if (src_map != nullptr) return CopyFromMap(src_map + soff, dst, doff, len);
  while (len > 0) {
    loff_t s = static_cast<loff_t>(soff), d = static_cast<loff_t>(doff);
    ssize_t r = copy_file_range(src, &s, dst, &d, len, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // unsupported (or a short source): the loop below
    soff += static_cast<uint64_t>(r);
    doff += static_cast<uint64_t>(r);
    len -= static_cast<uint64_t>(r);
  }
  std::vector<char> buf(len > 0 ? 1 << 20 : 0);
  while (len > 0) {
    size_t k = static_cast<size_t>(std::min<uint64_t>(len, buf.size()));
    ssize_t r = pread(src, buf.data(), k, static_cast<off_t>(soff));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno("overlay relink: read staging");
    if (r == 0) {  // past the staging file's end: zeros
      std::memset(buf.data(), 0, k);
      r = static_cast<ssize_t>(k);
    }
    ssize_t w = pwrite(dst, buf.data(), static_cast<size_t>(r), static_cast<off_t>(doff));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Status::FromErrno("overlay relink: write target");
    soff += static_cast<uint64_t>(w);
    doff += static_cast<uint64_t>(w);
    len -= static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

}  // namespace

namespace {

// Tries `m` as Relink uses it: a target with one written block and room
// for one more, a staging file whose second block is written and synced.
bool Probe(int dir_fd, RelinkMethod m) {
  char tn[64], sn[64];
  snprintf(tn, sizeof tn, "probe-t-%d", static_cast<int>(getpid()));
  snprintf(sn, sizeof sn, "probe-s-%d", static_cast<int>(getpid()));
  int t = openat(dir_fd, tn, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int s = openat(dir_fd, sn, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = false;
  struct stat sb{};
  if (t >= 0 && s >= 0 && fstat(t, &sb) == 0) {
    auto block = static_cast<uint64_t>(sb.st_blksize > 0 ? sb.st_blksize : 4096);
    std::vector<char> a(block * 2, 'T'), b(block * 2, 'S'), got(block);
    if (pwrite(t, a.data(), block, 0) == static_cast<ssize_t>(block) &&
        pwrite(s, b.data(), b.size(), 0) == static_cast<ssize_t>(b.size()) && fdatasync(t) == 0 &&
        fdatasync(s) == 0) {
      RelinkMethod used;
      ok = Relink(m, t, s, block, block, block, block, &used).ok() && used == m &&
           pread(t, got.data(), block, static_cast<off_t>(block)) == static_cast<ssize_t>(block) &&
           std::memcmp(got.data(), b.data(), block) == 0;
    }
  }
  if (t >= 0) close(t);
  if (s >= 0) close(s);
  unlinkat(dir_fd, tn, 0);
  unlinkat(dir_fd, sn, 0);
  return ok;
}

}  // namespace

RelinkMethod DetectRelinkMethod(int dir_fd, const char** fs_name, std::string* why) {
  struct statfs sf{};
  long type = fstatfs(dir_fd, &sf) == 0 ? static_cast<long>(sf.f_type) : 0;
  RelinkMethod m = RelinkMethod::kCopy;
  const char* name = "other";
  if (type == static_cast<long>(EXT4_SUPER_MAGIC)) {
    m = RelinkMethod::kMoveExtents;
    name = "ext4";
  } else if (type == kXfsMagic || type == kBtrfsMagic) {
    m = RelinkMethod::kClone;
    name = type == kXfsMagic ? "xfs" : "btrfs";
  } else if (type == static_cast<long>(TMPFS_MAGIC)) {
    name = "tmpfs";
  }
  if (const char* o = getenv("MAPFS_OVERLAY_RELINK")) {
    if (strcmp(o, "copy") == 0) m = RelinkMethod::kCopy;
    if (strcmp(o, "move") == 0) m = RelinkMethod::kMoveExtents;
    if (strcmp(o, "clone") == 0) m = RelinkMethod::kClone;
  }
  if (fs_name != nullptr) *fs_name = name;
  why->clear();
  if (m != RelinkMethod::kCopy && !Probe(dir_fd, m)) {
    *why = std::string(ToString(m)) + " failed its read-back probe on this kernel";
    m = RelinkMethod::kCopy;
  }
  return m;
}

Status CopyRange(int src, uint64_t src_off, int dst, uint64_t dst_off, uint64_t len, bool data_only) {
  if (!data_only) return PlainCopy(src, src_off, dst, dst_off, len);
  uint64_t end = src_off + len, at = src_off;
  while (at < end) {
    off_t d = lseek(src, static_cast<off_t>(at), SEEK_DATA);
    if (d < 0) break;  // ENXIO: no data left
    auto ud = static_cast<uint64_t>(d);
    if (ud >= end) break;
    off_t h = lseek(src, d, SEEK_HOLE);
    uint64_t uh = h < 0 ? end : std::min(end, static_cast<uint64_t>(h));
    MAPFS_RETURN_IF_ERROR(PlainCopy(src, ud, dst, dst_off + (ud - src_off), uh - ud));
    at = uh;
  }
  return Status::Ok();
}

Status Relink(RelinkMethod m, int target_fd, int stage_fd, uint64_t off, uint64_t len, uint64_t stage_off,
              uint64_t block, RelinkMethod* used, const char* stage_map) {
  *used = RelinkMethod::kCopy;
  uint64_t end = off + len;
  // Whole blocks only for the cheap methods: the head up to the first block
  // boundary is the target's old last block, shared with bytes it keeps.
  uint64_t head_end = std::min(end, RoundUp(off, block));
  if (m == RelinkMethod::kCopy || head_end >= end) return PlainCopy(stage_fd, stage_off, target_fd, off, len, stage_map);
  // The target may already reach past `end`: another process made it
  // longer while these bytes were staged (SplitFile::Revalidate). Its bytes
  // there stay: the size is never cut back to `end`, and a last partial
  // block is copied, not moved or cloned (a whole block would bring the
  // staging file's bytes past `end` over them).
  struct stat sb {};
  if (fstat(target_fd, &sb) != 0) return Status::FromErrno("overlay relink: size of target");
  const auto ksize = static_cast<uint64_t>(sb.st_size);
  const uint64_t body_end = ksize > end ? end / block * block : end;
  if (body_end <= head_end) return PlainCopy(stage_fd, stage_off, target_fd, off, len, stage_map);
  uint64_t body = body_end - head_end, sbody = stage_off + (head_end - off);
  // Copied in any case: the head, and the tail past the last whole block
  // when the target reaches past `end`.
  auto head_and_tail = [&]() -> Status {
    MAPFS_RETURN_IF_ERROR(PlainCopy(stage_fd, stage_off, target_fd, off, head_end - off, stage_map));
    return PlainCopy(stage_fd, stage_off + (body_end - off), target_fd, body_end, end - body_end, stage_map);
  };
  if (m == RelinkMethod::kMoveExtents) {
    // The target's range must exist (unwritten) for extents to be swapped
    // into it: a hole is skipped by the kernel.
    if (ksize < end && ftruncate(target_fd, static_cast<off_t>(end)) != 0)
      return Status::FromErrno("overlay relink: extend target");
    if (fallocate(target_fd, 0, static_cast<off_t>(head_end), static_cast<off_t>(body)) == 0) {
      MoveExtent me{};
      me.donor_fd = static_cast<uint32_t>(stage_fd);
      me.orig_start = head_end / block;
      me.donor_start = sbody / block;
      me.len = RoundUp(body, block) / block;
      int r = ioctl(target_fd, MAPFS_EXT4_IOC_MOVE_EXT, &me);
      // The kernel moves blocks in order and reports how many it moved:
      // those now hold the target's old (unwritten) blocks in the staging
      // file, so only the rest may be copied.
      uint64_t moved = std::min<uint64_t>(me.moved_len * block, body);
      if (moved > 0) *used = RelinkMethod::kMoveExtents;
      if (r == 0 || moved > 0) {
        MAPFS_RETURN_IF_ERROR(head_and_tail());
        return PlainCopy(stage_fd, sbody + moved, target_fd, head_end + moved, body - moved, stage_map);
      }
    }
  } else if (m == RelinkMethod::kClone) {
    file_clone_range fcr{};
    fcr.src_fd = stage_fd;
    fcr.src_offset = sbody;
    fcr.src_length = RoundUp(body, block);
    fcr.dest_offset = head_end;
    if (ioctl(target_fd, FICLONERANGE, &fcr) == 0) {
      // The clone's last block may reach past the end: cut it back, to
      // `end` (the target ended at or before it: body_end is end then).
      if (ksize <= end && ftruncate(target_fd, static_cast<off_t>(end)) != 0)
        return Status::FromErrno("overlay relink: trim target");
      *used = RelinkMethod::kClone;
      return head_and_tail();
    }
  }
  // Refused before anything moved: the copy.
  return PlainCopy(stage_fd, stage_off, target_fd, off, len, stage_map);
}

}  // namespace mapfs::overlay::split
