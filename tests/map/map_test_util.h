// Helpers for the mapper tests: a pool with a mapping area, and a model of
// what should be mapped (std::map) that does not trust the mapper.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/units.h"
#include "map/mapper.h"
#include "medium/pool.h"
#include "test_util.h"

namespace mapfs::map {

inline std::string Describe(const Status& s) { return s.ok() ? "OK" : s.ToString(); }

// The designs every parametrised suite runs over.
inline const std::vector<Kind>& AllKinds() {
  static const std::vector<Kind> k = {Kind::kHashFs, Kind::kCuckoo, Kind::kExtent, Kind::kRadix};
  return k;
}
inline std::string KindName(const ::testing::TestParamInfo<Kind>& info) { return ToString(info.param); }

// A temporary pool whose bytes [meta_end, meta_end + area_len) are a mapping
// area. The area is outside the vm layer's knowledge: nothing else allocates
// in these tests, so the mapper may use those pages directly.
class MapPool {
 public:
  explicit MapPool(uint64_t area_len, uint64_t pool_size = 48 * MiB) : tp_(pool_size), area_len_(area_len) {
    EXPECT_TRUE(tp_.status().ok()) << Describe(tp_.status());
    OpenPool();
  }
  ~MapPool() {
    mapper_.reset();
    if (pool_) (void)pool_->Close();
  }
  Status Format(const FormatOptions& opt) { return Mapper::Format(pool_.get(), area_off_, area_len_, opt); }
  // (Re)opens the mapper from the pool bytes.
  Status OpenMapper() {
    mapper_.reset();
    auto m = Mapper::Open(pool_.get(), area_off_, area_len_);
    if (!m.ok()) return m.status();
    mapper_ = std::move(*m);
    return Status::Ok();
  }
  // Closes the mapper and the pool and opens both again.
  Status Reopen() {
    mapper_.reset();
    Status st = pool_->Close();
    pool_.reset();
    if (!st.ok()) return st;
    OpenPool();
    return OpenMapper();
  }
  Mapper* m() const { return mapper_.get(); }
  medium::Pool* pool() const { return pool_.get(); }
  char* area() const { return pool_->base() + area_off_; }
  uint64_t area_len() const { return area_len_; }

 private:
  void OpenPool() {
    auto p = medium::Pool::Open(tp_.path());
    EXPECT_TRUE(p.ok()) << Describe(p.status());
    if (!p.ok()) return;
    pool_ = std::move(*p);
    pool_->FinishOpen();
    area_off_ = pool_->header().meta_end;
  }

  testing::TempPool tp_;
  uint64_t area_len_;
  uint64_t area_off_ = 0;
  std::unique_ptr<medium::Pool> pool_;
  std::unique_ptr<Mapper> mapper_;
};

// What must be mapped: (ino, file block) -> block, plus the reverse, so a
// block handed out twice is caught.
struct Model {
  std::map<std::pair<Ino, uint64_t>, uint64_t> fwd;
  std::map<uint64_t, std::pair<Ino, uint64_t>> rev;

  bool Mapped(Ino ino, uint64_t fb) const { return fwd.count({ino, fb}) != 0; }
  // Records what the mapper returns for blocks just inserted; false (with a
  // test failure) if a block is out of range or already someone else's.
  bool Add(Mapper* m, Ino ino, uint64_t fb, uint64_t count) {
    Cursor c;
    for (uint64_t i = 0; i < count; i++) {
      Mapping mp;
      int rc = m->Lookup(&c, ino, FileBlock(fb + i), &mp);
      EXPECT_EQ(rc, 0);
      EXPECT_TRUE(mp.mapped) << "ino " << ino << " fblk " << fb + i << " not mapped after insert";
      if (rc || !mp.mapped) return false;
      EXPECT_LT(mp.blk.v, m->nblocks());
      auto [it, fresh] = rev.emplace(mp.blk.v, std::make_pair(ino, fb + i));
      EXPECT_TRUE(fresh) << "block " << mp.blk.v << " given to ino " << ino << " fblk " << fb + i
                         << " is already ino " << it->second.first << " fblk " << it->second.second;
      if (!fresh) return false;
      fwd[{ino, fb + i}] = mp.blk.v;
      Tag(m, mp.blk.v, ino, fb + i);
    }
    return true;
  }
  void Erase(Ino ino, uint64_t from, uint64_t count) {
    for (auto it = fwd.lower_bound({ino, from}); it != fwd.end() && it->first.first == ino;) {
      if (count != kToEnd && it->first.second >= from + count) break;
      rev.erase(it->second);
      it = fwd.erase(it);
    }
  }
  // Writes (ino, file block) into the block, as file data would be: a block
  // that is also a tree node, or another file's, is then found.
  static void Tag(Mapper* m, uint64_t blk, Ino ino, uint64_t fb) {
    uint64_t tag[2] = {ino, fb};
    std::memcpy(m->block_ptr(Block(blk)), tag, sizeof tag);
  }
  static bool TagIs(Mapper* m, uint64_t blk, Ino ino, uint64_t fb) {
    uint64_t tag[2];
    std::memcpy(tag, m->block_ptr(Block(blk)), sizeof tag);
    return tag[0] == ino && tag[1] == fb;
  }
};

// Compares every file block of inodes [1, nino) below `span` with the model,
// by single lookups (with runs) and by LookupRange, and the data tags.
inline void ExpectMatches(Mapper* m, const Model& model, Ino nino, uint64_t span) {
  std::vector<uint64_t> out(span);
  for (Ino ino = 1; ino < nino; ino++) {
    Cursor c;
    ASSERT_EQ(m->LookupRange(&c, ino, FileBlock(0), span, out.data()), 0);
    for (uint64_t fb = 0; fb < span; fb++) {
      auto it = model.fwd.find({ino, fb});
      uint64_t want = it == model.fwd.end() ? Mapper::kNoBlock : it->second;
      ASSERT_EQ(out[fb], want) << "LookupRange ino " << ino << " fblk " << fb;
    }
    Cursor c2;
    for (uint64_t fb = 0; fb < span;) {
      Mapping mp;
      ASSERT_EQ(m->Lookup(&c2, ino, FileBlock(fb), &mp), 0);
      ASSERT_GE(mp.len, 1u);
      for (uint64_t k = 0; k < mp.len && fb + k < span; k++) {
        auto it = model.fwd.find({ino, fb + k});
        if (mp.mapped) {
          ASSERT_TRUE(it != model.fwd.end()) << "ino " << ino << " fblk " << fb + k << " run claims a hole";
          ASSERT_EQ(it->second, mp.blk.v + k) << "ino " << ino << " fblk " << fb + k;
          ASSERT_TRUE(Model::TagIs(m, it->second, ino, fb + k)) << "block " << it->second << " was overwritten";
        } else {
          ASSERT_TRUE(it == model.fwd.end()) << "ino " << ino << " fblk " << fb + k << " hole claims a mapping";
        }
      }
      fb += mp.len;
    }
  }
  EXPECT_EQ(m->usage().used_blocks, model.fwd.size());
}

// The first block of `m`'s block area that holds a nonzero byte, or -1.
// Free blocks must read as zero: Insert hands them to files as fresh data.
inline int64_t FirstNonzeroBlock(Mapper* m) {
  static const char zero[format::kBlockSize] = {};
  for (uint64_t b = 0; b < m->nblocks(); b++)
    if (std::memcmp(m->block_ptr(Block(b)), zero, sizeof zero) != 0) return static_cast<int64_t>(b);
  return -1;
}

}  // namespace mapfs::map
