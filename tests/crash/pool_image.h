// Reading a pool image as bytes, without the core: where each on-media
// structure lives (pool offsets), found by walking the formats of
// docs/FORMAT.md. Used by the damaged-pool test and the fuzzer's seed
// generator to aim damage at one structure at a time.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "dir/cib_format.h"
#include "map/map_format.h"
#include "medium/pool_format.h"
#include "medium/redo_log.h"
#include "meta/fs_format.h"
#include "space/partition_format.h"
#include "vm/ppt_format.h"

namespace mapfs::crash {

struct Range {
  uint64_t off, len;
};

// One structure: its name, its byte ranges in the pool, the ranges a
// checksum covers (any change there must be reported), and the bytes in use
// (live inodes and entries, present table entries, headers in use), where
// most damage is aimed: most of a structure's bytes are free space.
struct Structure {
  std::string name;
  std::vector<Range> ranges;
  std::vector<Range> checksummed;
  std::vector<Range> live;
};

class PoolImage {
 public:
  explicit PoolImage(std::string bytes) : b_(std::move(bytes)) {}
  const std::string& bytes() const { return b_; }
  template <typename T>
  T Get(uint64_t off) const {
    T v{};
    if (off + sizeof(T) <= b_.size()) std::memcpy(&v, b_.data() + off, sizeof(T));
    return v;
  }
  const medium::format::PoolHeader& header() const {
    return *reinterpret_cast<const medium::format::PoolHeader*>(b_.data());
  }
  const medium::format::PoolState& state() const {
    return *reinterpret_cast<const medium::format::PoolState*>(b_.data() + medium::format::kStateOff);
  }

  // Pool offset of virtual offset `voff`, or UINT64_MAX when unmapped.
  uint64_t Translate(uint64_t voff) const {
    uint64_t table = header().ppt_root_off;
    for (int level = 3; level >= 0; level--) {
      uint64_t e = Get<uint64_t>(table + 8 * uint64_t(vm::ppt::Index(voff, level)));
      if (!vm::ppt::IsPresent(e)) return UINT64_MAX;
      uint64_t t = vm::ppt::Target(e);
      if (t >= b_.size()) return UINT64_MAX;
      if (vm::ppt::IsLeaf(e)) return t + (voff & (vm::ppt::Reach(level) - 1));
      table = t;
    }
    return UINT64_MAX;
  }
  // The pool ranges backing [voff, voff+len), page by page.
  std::vector<Range> Pages(uint64_t voff, uint64_t len) const {
    std::vector<Range> r;
    for (uint64_t v = voff & ~uint64_t{4095}; v < voff + len; v += 4096) {
      uint64_t p = Translate(v);
      if (p != UINT64_MAX) r.push_back({p, 4096});
    }
    return r;
  }

  // Every table page of the PPT (the root included).
  std::vector<Range> PptTables() const {
    std::vector<Range> r;
    Walk(header().ppt_root_off, 3, &r);
    return r;
  }

  // Header words of every Partitioned partition.
  std::vector<Range> PartitionHeaders() const {
    std::vector<Range> r;
    if (state().space_root == space::format::kPartitioned) Part(0, static_cast<int>(header().top_level), &r);
    return r;
  }

  uint64_t SuperVoff() const { return state().fs_super; }
  meta::format::Superblock Super() const {
    meta::format::Superblock sb{};
    uint64_t p = Translate(SuperVoff());
    if (p != UINT64_MAX && p + sizeof sb <= b_.size()) std::memcpy(&sb, b_.data() + p, sizeof sb);
    return sb;
  }
  // Inode segments (bitmaps and slots).
  std::vector<Range> InodeSegments() const {
    std::vector<Range> r;
    auto sb = Super();
    for (uint64_t s = 0; s < sb.segments && s < meta::format::kMaxSegments; s++) {
      auto p = Pages(sb.seg[s], space::format::LevelSize(meta::format::SegLevel(static_cast<int>(s))));
      r.insert(r.end(), p.begin(), p.end());
    }
    return r;
  }
  // Live inodes: number -> pool offset of the slot.
  std::map<uint64_t, uint64_t> Inodes() const {
    std::map<uint64_t, uint64_t> m;
    auto sb = Super();
    for (uint64_t s = 0; s < sb.segments && s < meta::format::kMaxSegments; s++) {
      int seg = static_cast<int>(s);
      for (uint64_t i = meta::format::SegBitmapSlots(seg); i < meta::format::SegSlots(seg); i++) {
        uint64_t p = Translate(sb.seg[s] + i * meta::format::kInodeSize);
        if (p == UINT64_MAX) continue;
        if (Get<uint64_t>(p) != 0) m[meta::format::SegBase(seg) + i] = p;
      }
    }
    return m;
  }
  // Directory partitions: roots, blocks (primary and overflow) and nodes.
  void Directories(std::vector<Range>* roots, std::vector<Range>* blocks, std::vector<Range>* nodes) const {
    for (auto& [ino, p] : Inodes()) {
      auto in = Get<meta::format::Inode>(p);
      if (!S_ISDIR(in.mode) || in.part == 0) continue;
      uint64_t rv = meta::format::PartVoff(in.part), rp = Translate(rv);
      if (rp == UINT64_MAX) continue;
      roots->push_back({rp, 4096});
      auto root = Get<dir::format::Root>(rp);
      std::set<uint64_t> seen;
      for (uint32_t i = 0; i < root.top_count && i < dir::format::kTopCap; i++)
        DirChild(root.top[i].child, root.depth, blocks, nodes, &seen);
    }
  }
  // Data pages of regular files (up to their size).
  std::vector<Range> FileData() const {
    std::vector<Range> r;
    for (auto& [ino, p] : Inodes()) {
      auto in = Get<meta::format::Inode>(p);
      if (!S_ISREG(in.mode) || in.part == 0) continue;
      auto pg = Pages(meta::format::PartVoff(in.part), in.size);
      r.insert(r.end(), pg.begin(), pg.end());
    }
    return r;
  }

  std::vector<Structure> Structures() const {
    namespace f = medium::format;
    std::vector<Structure> s;
    const auto& h = header();
    s.push_back({"pool header", {{f::kHeaderOff, sizeof(f::PoolHeader)}}, {{f::kHeaderOff, sizeof(f::PoolHeader)}}, {}});
    s.push_back({"pool state", {{f::kStateOff, sizeof(f::PoolState)}}, {}, {{f::kStateOff, 40}}});
    std::vector<Range> slot_headers;
    for (uint64_t i = 0; i < h.redo_slots && i < 64; i++) slot_headers.push_back({h.redo_off + i * h.redo_slot_size, 64});
    s.push_back({"redo log", {{h.redo_off, uint64_t(h.redo_slots) * h.redo_slot_size}}, {}, slot_headers});
    s.push_back({"page bitmap", {{h.bitmap_off, h.bitmap_bytes}}, {}, {}});
    std::vector<Range> tables = PptTables(), entries;
    for (auto& t : tables)
      for (uint64_t o = t.off; o < t.off + t.len; o += 8)
        if (Get<uint64_t>(o) != 0) entries.push_back({o, 8});
    s.push_back({"page table", tables, {}, entries});
    s.push_back({"partition headers", PartitionHeaders(), {}, {}});
    uint64_t sp = Translate(SuperVoff());
    if (sp != UINT64_MAX)
      s.push_back({"superblock", {{sp, 4096}}, {{sp, 40}}, {{sp, 40}, {sp + 512, 8 + 8 * std::min<uint64_t>(Super().segments, 440)}}});
    std::vector<Range> inodes;
    for (auto& [ino, p] : Inodes()) inodes.push_back({p, 104});
    s.push_back({"inode table", InodeSegments(), {}, inodes});
    std::vector<Range> roots, blocks, nodes;
    Directories(&roots, &blocks, &nodes);
    std::vector<Range> root_crc, root_live, block_live;
    for (auto& r : roots) {
      root_crc.push_back({r.off, dir::format::kRootCrcBytes});
      root_live.push_back({r.off, 128 + 16 * uint64_t(std::min<uint32_t>(Get<dir::format::Root>(r.off).top_count, 248))});
    }
    for (auto& b : blocks) {
      block_live.push_back({b.off, 128});
      uint64_t bm = Get<dir::format::BlockHeader>(b.off).bitmap;
      for (int i = dir::format::kFirstSlot; i < dir::format::kSlots; i++)
        if ((bm >> i) & 1) block_live.push_back({b.off + dir::format::SlotOff(i), 64});
    }
    s.push_back({"directory roots", roots, root_crc, root_live});
    s.push_back({"directory blocks", blocks, {}, block_live});
    if (!nodes.empty()) s.push_back({"directory index nodes", nodes, {}, {}});
    // Block-mapped pools keep files' bytes in the mapping area ("mapped
    // blocks" below), not in partitions.
    if (auto fd = FileData(); !fd.empty() || h.files_kind == 0) s.push_back({"file data", fd, {}, {}});
    MappingArea(&s);
    return s;
  }

  // Block-mapped pools (mkfs --files): the mapping area's header (its own
  // checksum), the design's table (hash slots, cuckoo entries) or tree
  // roots and nodes, and the block bitmap; live = entries in use.
  const map::format::MapHeader* MapHeader() const {
    const auto& h = header();
    if (h.files_kind == 0 || h.map_off == 0 || h.map_off + sizeof(map::format::MapHeader) > b_.size()) return nullptr;
    return reinterpret_cast<const map::format::MapHeader*>(b_.data() + h.map_off);
  }
  void MappingArea(std::vector<Structure>* s) const {
    namespace m = map::format;
    const m::MapHeader* mh = MapHeader();
    if (mh == nullptr) return;
    const uint64_t a = header().map_off;
    s->push_back({"mapping header", {{a, sizeof(m::MapHeader)}}, {{a, sizeof(m::MapHeader)}}, {{a, 112}}});
    auto in = [&](uint64_t off, uint64_t len) { return off != 0 && a + off + len <= b_.size(); };
    const auto kind = static_cast<m::Kind>(mh->kind);
    if (kind == m::Kind::kHashFs && in(mh->table_off, mh->table_bytes)) {
      std::vector<Range> live;
      for (uint64_t o = a + mh->table_off; o < a + mh->table_off + mh->table_bytes; o += 8)
        if (Get<uint64_t>(o) != m::kEmptyKey) live.push_back({o, 8});
      s->push_back({"hash slots", {{a + mh->table_off, mh->table_bytes}}, {}, live});
    }
    if (kind == m::Kind::kCuckoo && in(mh->table_off, mh->table_bytes)) {
      std::vector<Range> live;
      for (uint64_t o = a + mh->table_off; o < a + mh->table_off + mh->table_bytes; o += 16)
        if (Get<uint64_t>(o) != m::kEmptyKey) live.push_back({o, 16});
      s->push_back({"cuckoo entries", {{a + mh->table_off, mh->table_bytes}}, {}, live});
    }
    if ((kind == m::Kind::kExtent || kind == m::Kind::kRadix) && in(mh->roots_off, mh->roots_bytes)) {
      std::vector<Range> live, nodes;
      for (uint64_t o = a + mh->roots_off; o < a + mh->roots_off + mh->roots_bytes; o += 16) {
        auto r = Get<m::RootRecord>(o);
        if (r.root == 0) continue;
        live.push_back({o, 16});
        TreeNodes(*mh, kind, r.root - 1, static_cast<int>(r.height) - 1, &nodes);
      }
      s->push_back({"tree roots", {{a + mh->roots_off, mh->roots_bytes}}, {}, live});
      if (!nodes.empty()) s->push_back({"tree nodes", nodes, {}, {}});
    }
    if (in(mh->bitmap_off, mh->bitmap_bytes)) {
      std::vector<Range> live;
      for (uint64_t o = a + mh->bitmap_off; o < a + mh->bitmap_off + mh->bitmap_bytes; o += 8)
        if (Get<uint64_t>(o) != 0) live.push_back({o, 8});
      s->push_back({"block bitmap", {{a + mh->bitmap_off, mh->bitmap_bytes}}, {}, live});
    }
    // Blocks in use (hashfs: live slots; the others: bitmap bits, tree
    // nodes included), the first 4096.
    std::vector<Range> used;
    for (uint64_t b = 0; b < mh->nblocks && used.size() < 4096; b++) {
      bool u = kind == m::Kind::kHashFs
                   ? (Get<uint64_t>(a + mh->table_off + 8 * b) != m::kEmptyKey &&
                      Get<uint64_t>(a + mh->table_off + 8 * b) != m::kTombKey)
                   : (Get<uint64_t>(a + mh->bitmap_off + b / 64 * 8) >> (b % 64) & 1) != 0;
      uint64_t o = a + mh->data_off + b * m::kBlockSize;
      if (u && o + m::kBlockSize <= b_.size()) used.push_back({o, m::kBlockSize});
    }
    if (!used.empty()) s->push_back({"mapped blocks", used, {}, {}});
  }

 private:
  // The nodes of one file's tree (level = height - 1 at its root).
  void TreeNodes(const map::format::MapHeader& mh, map::format::Kind kind, uint64_t blk, int level,
                 std::vector<Range>* out) const {
    namespace m = map::format;
    if (blk >= mh.nblocks || level < 0 || level > 8 || out->size() > 4096) return;
    const uint64_t n = header().map_off + mh.data_off + blk * m::kBlockSize;
    if (n + m::kBlockSize > b_.size()) return;
    if (kind == m::Kind::kExtent) {
      out->push_back({n, m::kBlockSize});
      auto h = Get<m::ExtentNodeHeader>(n);
      if (level == 0 || h.magic != m::kExtentMagic) return;
      for (uint32_t i = 0; i < h.count && i < m::kExtentIndexCap; i++)
        TreeNodes(mh, kind, Get<m::ExtentIndex>(n + sizeof h + 16 * uint64_t(i)).child, level - 1, out);
    } else {
      out->push_back({n, m::kBlockSize});
      if (level == 0) return;
      for (uint64_t i = 0; i < m::kRadixFanout; i++)
        if (uint64_t p = Get<uint64_t>(n + 8 * i)) TreeNodes(mh, kind, p - 1, level - 1, out);
    }
  }
  void Walk(uint64_t table, int level, std::vector<Range>* r) const {
    if (table + 4096 > b_.size()) return;
    r->push_back({table, 4096});
    if (level == 0) return;
    for (int i = 0; i < vm::ppt::kEntries; i++) {
      uint64_t e = Get<uint64_t>(table + 8 * uint64_t(i));
      if (vm::ppt::IsTable(e)) Walk(vm::ppt::Target(e), level - 1, r);
    }
  }
  void Part(uint64_t voff, int level, std::vector<Range>* r) const {
    if (level < 3) return;
    uint64_t p = Translate(voff);
    if (p == UINT64_MAX) return;
    uint64_t h = p + space::format::HeaderOffset(level);
    r->push_back({h, 8 * uint64_t(space::format::HeaderWords(level))});
    if (level == 3) return;
    uint64_t w0 = Get<uint64_t>(h);
    for (int c = 0; c < 8; c++)
      if (((w0 >> (2 * c)) & 3) == space::format::kPartitioned)
        Part(voff + uint64_t(c) * space::format::LevelSize(level - 1), level - 1, r);
  }
  void DirChild(uint64_t v, uint32_t depth, std::vector<Range>* blocks, std::vector<Range>* nodes,
                std::set<uint64_t>* seen) const {
    if (!seen->insert(v).second || seen->size() > 100000) return;
    uint64_t p = Translate(v);
    if (p == UINT64_MAX) return;
    if (depth > 0) {
      nodes->push_back({p, 4096});
      auto n = Get<dir::format::Node>(p);
      for (uint32_t i = 0; i < n.count && i < dir::format::kNodeCap; i++) DirChild(n.e[i].child, depth - 1, blocks, nodes, seen);
      return;
    }
    blocks->push_back({p, 4096});
    for (uint64_t o = Get<dir::format::BlockHeader>(p).overflow; o != 0 && seen->insert(o).second;) {
      uint64_t op = Translate(o);
      if (op == UINT64_MAX) break;
      blocks->push_back({op, 4096});
      o = Get<dir::format::BlockHeader>(op).overflow;
    }
  }

  std::string b_;
};

}  // namespace mapfs::crash
