// Mapper: formatting and opening a mapping area, and what all designs share.
#include "map/mapper.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/crc32c.h"
#include "common/units.h"
#include "map/designs.h"
#include "medium/persist.h"
#include "medium/pool.h"

namespace mapfs::map {
namespace {

using format::kBlockSize;
using format::MapHeader;

uint32_t HeaderCrc(const MapHeader& h) { return Crc32c(&h, offsetof(MapHeader, checksum)); }

uint64_t BitmapBytes(uint64_t nblocks) { return AlignUp((nblocks + 63) / 64 * 8, kBlockSize); }

uint64_t DefaultBuckets(uint64_t nblocks) {
  // Every block mapped leaves the table at 80 % load, which bucketized
  // cuckoo hashing with two functions and 4 slots reaches easily.
  return (nblocks * 5 / 4 + format::kCuckooSlots - 1) / format::kCuckooSlots;
}

// Fills the offsets of `h` for h.nblocks blocks; returns the bytes needed.
uint64_t Place(MapHeader& h, const FormatOptions& opt) {
  uint64_t off = kBlockSize;  // the header's block
  h.table_off = h.table_bytes = h.roots_off = h.roots_bytes = h.bitmap_off = h.bitmap_bytes = 0;
  h.cuckoo_buckets = 0;
  switch (opt.kind) {
    case Kind::kHashFs:
      h.table_off = off;
      h.table_bytes = AlignUp(h.nblocks * 8, kBlockSize);
      off += h.table_bytes;
      break;
    case Kind::kCuckoo:
      h.cuckoo_buckets = opt.cuckoo_buckets ? opt.cuckoo_buckets : DefaultBuckets(h.nblocks);
      h.table_off = off;
      h.table_bytes = AlignUp(h.cuckoo_buckets * format::kCuckooBucketBytes, kBlockSize);
      off += h.table_bytes;
      break;
    case Kind::kExtent:
    case Kind::kRadix:
      h.roots_off = off;
      h.roots_bytes = AlignUp(h.max_ino * sizeof(format::RootRecord), kBlockSize);
      off += h.roots_bytes;
      break;
  }
  if (opt.kind != Kind::kHashFs) {
    h.bitmap_off = off;
    h.bitmap_bytes = BitmapBytes(h.nblocks);
    off += h.bitmap_bytes;
  }
  h.data_off = off;
  return off + h.nblocks * kBlockSize;
}

}  // namespace

Result<MapHeader> PlanLayout(uint64_t area_len, const FormatOptions& opt) {
  if (opt.kind != Kind::kHashFs && opt.kind != Kind::kCuckoo && opt.kind != Kind::kExtent &&
      opt.kind != Kind::kRadix)
    return Status::Error(EINVAL, "mapping: unknown design");
  if (opt.max_ino < 2 || opt.max_ino > format::kMaxIno)
    return Status::Error(EINVAL, "mapping: max_ino out of range");
  MapHeader h{};
  std::memcpy(h.magic, format::kMagic, sizeof h.magic);
  h.version = format::kVersion;
  h.kind = static_cast<uint32_t>(opt.kind);
  h.area_len = area_len;
  h.max_ino = opt.max_ino;
  h.cuckoo_max_path = opt.cuckoo_max_path;
  // The largest block count that fits (the layout grows with it), below 2^32
  // so that hashing can reduce 32-bit hashes.
  uint64_t lo = 0, hi = std::min<uint64_t>(area_len / kBlockSize, (uint64_t{1} << 32) - 1);
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo + 1) / 2;
    h.nblocks = mid;
    if (Place(h, opt) <= area_len) lo = mid;
    else hi = mid - 1;
  }
  h.nblocks = lo;
  Place(h, opt);
  if (h.nblocks == 0) return Status::Error(EINVAL, "mapping: area too small");
  if (opt.kind == Kind::kCuckoo && h.cuckoo_buckets > (uint64_t{1} << 32) - 1)
    return Status::Error(EINVAL, "mapping: too many cuckoo buckets");
  h.checksum = HeaderCrc(h);
  return h;
}

Status Mapper::Format(medium::Pool* pool, uint64_t area_off, uint64_t area_len, const FormatOptions& opt) {
  if (!IsAligned(area_off, kBlockSize) || area_off + area_len > pool->size() || area_off + area_len < area_off)
    return Status::Error(EINVAL, "mapping: area not 4 KiB aligned or outside the pool");
  auto h = PlanLayout(area_len, opt);
  if (!h.ok()) return h.status();
  char* base = pool->base() + area_off;
  // Structures first, the header last: an area whose format a crash cut
  // short has no valid header and is refused at open.
  medium::ZeroNt(base, kBlockSize);
  if (h->table_bytes) medium::ZeroNt(base + h->table_off, h->table_bytes);
  if (h->roots_bytes) medium::ZeroNt(base + h->roots_off, h->roots_bytes);
  if (h->bitmap_bytes) medium::ZeroNt(base + h->bitmap_off, h->bitmap_bytes);
  medium::Fence();
  medium::Write(base, &*h, sizeof *h);
  medium::Persist(base, sizeof *h);
  return Status::Ok();
}

Result<std::unique_ptr<Mapper>> Mapper::Open(medium::Pool* pool, uint64_t area_off, uint64_t area_len) {
  if (!IsAligned(area_off, kBlockSize) || area_off + area_len > pool->size() || area_len < kBlockSize)
    return Status::Error(EINVAL, "mapping: area not 4 KiB aligned or outside the pool");
  MapHeader h;
  std::memcpy(&h, pool->base() + area_off, sizeof h);
  char where[64];
  std::snprintf(where, sizeof where, " at pool offset 0x%llx", static_cast<unsigned long long>(area_off));
  if (std::memcmp(h.magic, format::kMagic, sizeof h.magic) != 0)
    return Status::Error(EUCLEAN, std::string("mapping header: bad magic") + where);
  if (h.checksum != HeaderCrc(h)) return Status::Error(EUCLEAN, std::string("mapping header: bad checksum") + where);
  if (h.version != format::kVersion)
    return Status::Error(EUCLEAN, std::string("mapping header: unknown version") + where);
  // The stored layout must be the one this code derives: every offset used
  // later is then known to lie inside the area.
  FormatOptions opt;
  opt.kind = static_cast<Kind>(h.kind);
  opt.max_ino = h.max_ino;
  opt.cuckoo_buckets = h.cuckoo_buckets;
  opt.cuckoo_max_path = h.cuckoo_max_path;
  auto plan = PlanLayout(h.area_len, opt);
  if (!plan.ok() || h.area_len != area_len || std::memcmp(&*plan, &h, sizeof h) != 0)
    return Status::Error(EUCLEAN, std::string("mapping header: layout does not fit the area") + where);
  switch (opt.kind) {
    case Kind::kHashFs: return OpenHashFs(pool, area_off, h);
    case Kind::kCuckoo: return OpenCuckoo(pool, area_off, h);
    case Kind::kExtent: return OpenExtent(pool, area_off, h);
    case Kind::kRadix: return OpenRadix(pool, area_off, h);
  }
  return Status::Error(EUCLEAN, std::string("mapping header: unknown design") + where);
}

Mapper::Mapper(medium::Pool* pool, uint64_t area_off, const MapHeader& h)
    : pool_(pool),
      base_(pool->base() + area_off),
      area_off_(area_off),
      kind_(static_cast<Kind>(h.kind)),
      nblocks_(h.nblocks),
      max_ino_(h.max_ino),
      data_off_(h.data_off) {}

int Mapper::CheckArgs(Ino ino, FileBlock fblk, uint64_t n) const {
  if (ino == 0 || ino >= max_ino_) return -EINVAL;
  if (fblk.v >= format::kMaxFileBlock || n > format::kMaxFileBlock - fblk.v) return -EINVAL;
  return 0;
}

int Mapper::LookupRange(Cursor* c, Ino ino, FileBlock fblk, uint64_t n, uint64_t* out) {
  if (int rc = CheckArgs(ino, fblk, n)) return rc;
  uint64_t i = 0;
  while (i < n) {
    Mapping m;
    if (int rc = Lookup(c, ino, fblk + i, &m)) return rc;
    uint64_t take = std::min(m.len, n - i);
    for (uint64_t k = 0; k < take; k++) out[i + k] = m.mapped ? m.blk.v + k : kNoBlock;
    i += take;
  }
  return 0;
}

Status Mapper::Damage(const char* structure, uint64_t off, const std::string& what) const {
  char buf[96];
  std::snprintf(buf, sizeof buf, " at area offset 0x%llx (pool offset 0x%llx)", static_cast<unsigned long long>(off),
                static_cast<unsigned long long>(area_off_ + off));
  return Status::Error(EUCLEAN, std::string("mapping ") + structure + ": " + what + buf);
}

const char* ToString(Kind k) {
  switch (k) {
    case Kind::kHashFs: return "hashfs";
    case Kind::kCuckoo: return "cuckoo";
    case Kind::kExtent: return "extent";
    case Kind::kRadix: return "radix";
  }
  return "?";
}

Result<Kind> ParseKind(const std::string& s) {
  for (Kind k : {Kind::kHashFs, Kind::kCuckoo, Kind::kExtent, Kind::kRadix})
    if (s == ToString(k)) return k;
  return Status::Error(EINVAL, "unknown mapping design '" + s + "' (hashfs, cuckoo, extent, radix)");
}

Status Mapper::ForEachMapping(const MappingFn& fn) {
  for (Ino ino = 1; ino < max_ino_; ino++) {
    Cursor c{};
    uint64_t f = 0;
    while (f < format::kMaxFileBlock) {
      Mapping m;
      int rc = Lookup(&c, ino, FileBlock(f), &m);
      if (rc != 0)
        return Status::Error(-rc, "inode " + std::to_string(ino) + " file block " + std::to_string(f) +
                                      ": mapping lookup failed");
      uint64_t n = std::min<uint64_t>(std::max<uint64_t>(m.len, 1), format::kMaxFileBlock - f);
      if (m.mapped) {
        if (m.blk.v >= nblocks_ || n > nblocks_ - m.blk.v)
          return Status::Error(EUCLEAN, "inode " + std::to_string(ino) + " file block " + std::to_string(f) +
                                            ": run outside the block area");
        fn(ino, FileBlock(f), m.blk, n);
      }
      f += n;
    }
  }
  return Status::Ok();
}

Status Mapper::ForEachMappingIn(Cursor* c, Ino ino, FileBlock from, uint64_t count, const RunFn& fn) {
  if (ino == 0 || ino >= max_ino_ || from.v >= format::kMaxFileBlock) return Status::Ok();  // nothing can be mapped
  const uint64_t end = count >= format::kMaxFileBlock - from.v ? format::kMaxFileBlock : from.v + count;
  for (uint64_t f = from.v; f < end;) {
    Mapping m;
    int rc = Lookup(c, ino, FileBlock(f), &m);
    if (rc != 0)
      return Status::Error(-rc, "inode " + std::to_string(ino) + " file block " + std::to_string(f) +
                                    ": mapping lookup failed");
    uint64_t n = std::min<uint64_t>(std::max<uint64_t>(m.len, 1), end - f);
    if (m.mapped) {
      if (m.blk.v >= nblocks_ || n > nblocks_ - m.blk.v)
        return Status::Error(EUCLEAN, "inode " + std::to_string(ino) + " file block " + std::to_string(f) +
                                          ": run outside the block area");
      MAPFS_RETURN_IF_ERROR(fn(FileBlock(f), m.blk, n));
    }
    f += n;
  }
  return Status::Ok();
}

}  // namespace mapfs::map
