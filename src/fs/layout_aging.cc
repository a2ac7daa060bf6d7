// Layout aging (layout_aging.h).
#include "fs/layout_aging.h"

#include <fcntl.h>

#include <cstdio>
#include <vector>

#include "fs/file_system.h"
#include "map/mapper.h"

namespace mapfs::fs {
namespace {

constexpr uint64_t kBlock = map::format::kBlockSize;
constexpr const char* kSpacer = "/.mapfs-aging-spacer";

map::Mapper* BitmapMapper(FileSystem& fs) {
  map::Mapper* m = fs.data().mapper();
  if (m == nullptr || m->kind() == map::Kind::kHashFs) return nullptr;
  return m;
}

}  // namespace

Status AgeForLayout(FileSystem& fs, double score, AgingReport* out) {
  *out = {};
  if (!(score >= 0.5 && score <= 1.0)) return Status::Error(EINVAL, "layout score must be in [0.5, 1.0]");
  map::Mapper* m = BitmapMapper(fs);
  if (m == nullptr)
    return Status::Error(EINVAL, "a layout score needs block-mapped files with runs (--files cuckoo, extent or radix): "
                                 "hashfs places every block at its hash, contiguous files have no runs");
  if (score == 1.0) return Status::Ok();
  char name[64];
  std::snprintf(name, sizeof name, "/%s%.2f", kAgingPrefix, score);
  out->name = name;
  map::Usage u = m->usage();
  const uint64_t free_blocks = u.blocks - u.used_blocks - u.node_blocks;
  // Room left unaged for the trees' nodes (taken from the top of the area)
  // and the aging file's own nodes.
  const uint64_t reserve = std::max<uint64_t>(free_blocks / 50, 256);
  if (free_blocks <= reserve * 2) return Status::Error(ENOSPC, "the block area is too small to age");
  const uint64_t target = free_blocks - reserve;

  auto keep = fs.Open(name, O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (!keep.ok()) return keep.status();
  auto spacer = fs.Open(kSpacer, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (!spacer.ok()) {
    (void)fs.Close(**keep);
    return spacer.status();
  }
  // Free runs of mean length 1 / (1 - score): each spacer block adds
  // (1 - score) to the error; a run ends when it reaches 1.
  const double step = 1.0 - score;
  std::vector<char> zeros(64 * kBlock, 0);
  double err = 0;
  uint64_t done = 0, spacer_off = 0;
  Status st;
  while (done < target && st.ok()) {
    uint64_t run = 0;
    while (err < 1.0 && done + run + 1 < target) {
      err += step;
      run++;
    }
    err -= 1.0;
    for (uint64_t p = 0; p < run && st.ok();) {
      uint64_t n = std::min<uint64_t>(run - p, zeros.size() / kBlock);
      auto w = fs.Write(**spacer, zeros.data(), n * kBlock, static_cast<int64_t>(spacer_off));
      if (!w.ok()) st = w.status();
      spacer_off += n * kBlock, p += n;
    }
    if (!st.ok()) break;
    auto w = fs.Write(**keep, zeros.data(), kBlock, static_cast<int64_t>(out->kept * kBlock));
    if (!w.ok()) st = w.status();
    done += run + 1;
    out->kept++, out->runs++;
  }
  Status c1 = fs.Close(**spacer), c2 = fs.Close(**keep);
  // The spacer's blocks become the free runs.
  Status un = fs.Unlink(kSpacer);
  if (!st.ok()) return st;
  if (!c1.ok()) return c1;
  if (!c2.ok()) return c2;
  return un;
}

Result<double> LayoutScore(FileSystem& fs, const OpenFile& f, uint64_t blocks) {
  map::Mapper* m = fs.data().mapper();
  if (m == nullptr) return Status::Error(EINVAL, "contiguous files have no block layout");
  map::Cursor c{};
  uint64_t mapped = 0, adjacent = 0, prev = ~uint64_t{0};
  for (uint64_t b = 0; b < blocks; b++) {
    map::Mapping mp;
    int rc = m->Lookup(&c, f.ino, map::FileBlock(b), &mp);
    if (rc != 0) return Status::Error(-rc, "mapping lookup failed");
    if (!mp.mapped) {
      prev = ~uint64_t{0};
      continue;
    }
    if (mapped > 0 && mp.blk.v == prev + 1) adjacent++;
    mapped++;
    prev = mp.blk.v;
  }
  if (mapped < 2) return Status::Error(EINVAL, "fewer than two mapped blocks");
  return static_cast<double>(adjacent) / static_cast<double>(mapped - 1);
}

}  // namespace mapfs::fs
