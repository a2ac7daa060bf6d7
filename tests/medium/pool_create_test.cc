// Pool::Create: the formatted header and layout are what was asked for, and
// bad requests are refused without touching anything.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "medium_test_util.h"
#include "test_util.h"

namespace mapfs::medium {
namespace {

using testing::FileExists;
using testing::FileSize;
using testing::ReadFileBytes;
using testing::ReadHeader;
using testing::ReadState;
using testing::TempPool;

bool BitmapBit(const std::vector<uint8_t>& file, const format::PoolHeader& h, uint64_t page) {
  uint64_t word;
  std::memcpy(&word, file.data() + h.bitmap_off + page / 64 * 8, 8);
  return (word >> (page % 64)) & 1;
}

bool UuidNonzero(const format::PoolHeader& h) {
  for (uint8_t b : h.uuid)
    if (b != 0) return true;
  return false;
}

// Layout invariants every formatted header must satisfy.
void ExpectSaneLayout(const format::PoolHeader& h) {
  EXPECT_EQ(h.redo_off, format::kRedoOff);
  EXPECT_LE(h.redo_off + uint64_t{h.redo_slots} * h.redo_slot_size, h.bitmap_off);
  EXPECT_EQ(h.bitmap_bytes, AlignUp(h.pool_size / kPageSize, 64) / 8);
  EXPECT_LE(h.bitmap_off + h.bitmap_bytes, h.ppt_root_off);
  EXPECT_TRUE(IsAligned(h.ppt_root_off, kPageSize));
  EXPECT_LE(h.ppt_root_off + kPageSize, h.meta_end);
  EXPECT_TRUE(IsAligned(h.meta_end, kChunkSize));
  EXPECT_LT(h.meta_end, h.pool_size);
  EXPECT_EQ(h.vspace_shift, 12 + 3 * h.top_level);
  EXPECT_EQ(h.options, 0u);
  EXPECT_EQ(h.checksum, testing::HeaderCrc(h));
}

TEST(MediumPoolCreate, HeaderHoldsRequestedGeometry) {
  CreateOptions opt;
  opt.page_shift = 21;
  opt.mode = format::Mode::kStrict;
  opt.top_level = 7;
  opt.redo_slots = 8;
  opt.redo_slot_size = 64 * KiB;
  TempPool tp(64 * MiB, opt);
  ASSERT_TRUE(tp.status().ok()) << tp.status().ToString();
  EXPECT_EQ(FileSize(tp.path()), 64 * MiB);

  format::PoolHeader h = ReadHeader(tp.path());
  EXPECT_EQ(std::memcmp(h.magic, "MAPFSPL1", 8), 0);
  EXPECT_EQ(h.version, mapfs::medium::format::kVersion);
  EXPECT_EQ(h.header_size, 512u);
  EXPECT_EQ(h.pool_size, 64 * MiB);
  EXPECT_EQ(h.page_shift, 21u);
  EXPECT_EQ(h.default_mode, static_cast<uint32_t>(format::Mode::kStrict));
  EXPECT_EQ(h.top_level, 7u);
  EXPECT_EQ(h.vspace_shift, 33u);
  EXPECT_EQ(h.redo_slots, 8u);
  EXPECT_EQ(h.redo_slot_size, 64 * KiB);
  EXPECT_TRUE(UuidNonzero(h));
  EXPECT_NE(h.mkfs_time_ns, 0u);
  ExpectSaneLayout(h);
  EXPECT_TRUE(Pool::ValidateHeader(h, 64 * MiB).ok());

  // A fresh pool is clean and has never been opened.
  format::PoolState s = ReadState(tp.path());
  EXPECT_EQ(s.dirty, 0u);
  EXPECT_EQ(s.open_count, 0u);
  EXPECT_EQ(s.recoveries, 0u);

  // The pool sees the same header through its own mapping.
  auto p = Pool::Open(tp.path());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->size(), 64 * MiB);
  EXPECT_EQ(std::memcmp(&(*p)->header(), &h, sizeof h), 0);
  (*p)->FinishOpen();
  EXPECT_TRUE((*p)->Close().ok());
}

TEST(MediumPoolCreate, DefaultsAndDerivedTopLevel) {
  for (uint64_t size : {16 * MiB, 32 * MiB, 256 * MiB, 4 * GiB, 64 * GiB}) {
    TempPool tp(size);
    ASSERT_TRUE(tp.status().ok()) << size << ": " << tp.status().ToString();
    format::PoolHeader h = ReadHeader(tp.path());
    EXPECT_EQ(h.pool_size, size);
    EXPECT_EQ(h.page_shift, 12u);
    EXPECT_EQ(h.default_mode, static_cast<uint32_t>(format::Mode::kSync));
    EXPECT_EQ(h.redo_slots, 16u);
    EXPECT_EQ(h.redo_slot_size, 128 * KiB);
    ASSERT_GE(h.top_level, 4u);
    ASSERT_LE(h.top_level, 11u);
    // The smallest level whose region is at least 8x the pool (or L11).
    if (h.top_level < 11) {
      EXPECT_GE(uint64_t{1} << h.vspace_shift, 8 * size) << size;
    }
    if (h.top_level > 4) {
      EXPECT_LT(uint64_t{1} << (h.vspace_shift - 3), 8 * size) << size;
    }
    ExpectSaneLayout(h);
    EXPECT_TRUE(Pool::ValidateHeader(h, FileSize(tp.path())).ok());
  }
}

TEST(MediumPoolCreate, SizeIsRoundedDownToAChunk) {
  TempPool tp(64 * MiB + 12345);
  ASSERT_TRUE(tp.status().ok()) << tp.status().ToString();
  EXPECT_EQ(ReadHeader(tp.path()).pool_size, 64 * MiB);
  EXPECT_EQ(FileSize(tp.path()), 64 * MiB);
  TempPool tp2(16 * MiB + kChunkSize - 1);
  ASSERT_TRUE(tp2.status().ok()) << tp2.status().ToString();
  EXPECT_EQ(ReadHeader(tp2.path()).pool_size, 16 * MiB);
}

TEST(MediumPoolCreate, BoundaryOptionsAreAccepted) {
  for (uint32_t level : {4u, 11u}) {
    CreateOptions opt;
    opt.top_level = level;
    TempPool tp(32 * MiB, opt);
    ASSERT_TRUE(tp.status().ok()) << "top level " << level << ": " << tp.status().ToString();
    EXPECT_EQ(ReadHeader(tp.path()).top_level, level);
  }
  for (auto mode : {format::Mode::kPosix, format::Mode::kSync, format::Mode::kStrict}) {
    CreateOptions opt;
    opt.mode = mode;
    TempPool tp(32 * MiB, opt);
    ASSERT_TRUE(tp.status().ok()) << tp.status().ToString();
    EXPECT_EQ(ReadHeader(tp.path()).default_mode, static_cast<uint32_t>(mode));
  }
  CreateOptions opt;
  opt.redo_slots = 64;
  opt.redo_slot_size = 4096;
  TempPool tp(16 * MiB, opt);
  ASSERT_TRUE(tp.status().ok()) << tp.status().ToString();
  EXPECT_EQ(ReadHeader(tp.path()).redo_slots, 64u);
}

TEST(MediumPoolCreate, EveryPoolGetsItsOwnUuid) {
  TempPool a(16 * MiB), b(16 * MiB);
  ASSERT_TRUE(a.status().ok() && b.status().ok());
  format::PoolHeader ha = ReadHeader(a.path()), hb = ReadHeader(b.path());
  EXPECT_NE(std::memcmp(ha.uuid, hb.uuid, 16), 0);
}

// The layout: metadata pages are marked in use, every other page is free
// and reads as zero, even when the file held garbage before.
TEST(MediumPoolCreate, OverwritesGarbageAndMarksOnlyMetadataInUse) {
  TempPool tp(32 * MiB);
  std::vector<uint8_t> junk(32 * MiB + 5 * MiB);
  testing::Rng rng(11);
  for (size_t i = 0; i < junk.size(); i += 8) {
    uint64_t v = rng.Next();
    std::memcpy(&junk[i], &v, 8);
  }
  ASSERT_TRUE(testing::WriteWholeFile(tp.path(), junk));
  CreateOptions opt;
  opt.size = 32 * MiB;
  ASSERT_TRUE(Pool::Create(tp.path(), opt).ok());
  EXPECT_EQ(FileSize(tp.path()), 32 * MiB);

  auto file = ReadFileBytes(tp.path());
  ASSERT_EQ(file.size(), 32 * MiB);
  format::PoolHeader h;
  std::memcpy(&h, file.data(), sizeof h);
  ASSERT_TRUE(Pool::ValidateHeader(h, file.size()).ok());
  uint64_t meta_pages = h.meta_end / kPageSize;
  for (uint64_t p = 0; p < h.pool_size / kPageSize; p++)
    ASSERT_EQ(BitmapBit(file, h, p), p < meta_pages) << "page " << p;
  // Padding bits past the last page are not marked either.
  for (uint64_t p = h.pool_size / kPageSize; p < h.bitmap_bytes * 8; p++) ASSERT_FALSE(BitmapBit(file, h, p));
  for (uint64_t i = h.meta_end; i < file.size(); i++) ASSERT_EQ(file[i], 0) << "data byte " << i;
  for (uint64_t i = sizeof h; i < h.bitmap_off; i++) ASSERT_EQ(file[i], 0) << "state/redo byte " << i;
  for (uint64_t i = h.ppt_root_off; i < h.meta_end; i++) ASSERT_EQ(file[i], 0) << "ppt root byte " << i;
}

// ------------------------------------------------------------ rejections

struct BadCreate {
  const char* name;
  uint64_t size;
  CreateOptions opt;
  const char* message_part;
};

std::vector<BadCreate> BadCreates() {
  std::vector<BadCreate> v;
  auto add = [&](const char* name, uint64_t size, auto mutate, const char* msg) {
    CreateOptions o;
    mutate(o);
    v.push_back({name, size, o, msg});
  };
  add("zero size", 0, [](CreateOptions&) {}, "at least");
  add("15 MiB", 15 * MiB, [](CreateOptions&) {}, "at least");
  add("16 MiB minus a byte", 16 * MiB - 1, [](CreateOptions&) {}, "at least");
  add("page shift 0", 32 * MiB, [](CreateOptions& o) { o.page_shift = 0; }, "page size");
  add("page shift 13", 32 * MiB, [](CreateOptions& o) { o.page_shift = 13; }, "page size");
  add("page shift 20", 32 * MiB, [](CreateOptions& o) { o.page_shift = 20; }, "page size");
  add("page shift 30", 32 * MiB, [](CreateOptions& o) { o.page_shift = 30; }, "page size");
  add("top level 1", 32 * MiB, [](CreateOptions& o) { o.top_level = 1; }, "top level");
  add("top level 3", 32 * MiB, [](CreateOptions& o) { o.top_level = 3; }, "top level");
  add("top level 12", 32 * MiB, [](CreateOptions& o) { o.top_level = 12; }, "top level");
  add("no redo slots", 32 * MiB, [](CreateOptions& o) { o.redo_slots = 0; }, "redo");
  add("65 redo slots", 32 * MiB, [](CreateOptions& o) { o.redo_slots = 65; }, "redo");
  add("redo slot size 0", 32 * MiB, [](CreateOptions& o) { o.redo_slot_size = 0; }, "redo");
  add("redo slot size 1000", 32 * MiB, [](CreateOptions& o) { o.redo_slot_size = 1000; }, "redo");
  add("redo slot size 4097", 32 * MiB, [](CreateOptions& o) { o.redo_slot_size = 4097; }, "redo");
  add("metadata larger than pool", 32 * MiB,
      [](CreateOptions& o) {
        o.redo_slots = 64;
        o.redo_slot_size = 1 * MiB;
      },
      "too small");
  return v;
}

TEST(MediumPoolCreate, BadRequestsAreRefusedWithEinvalAndCreateNothing) {
  for (const BadCreate& c : BadCreates()) {
    std::string path = "/dev/shm/mapfs-test-badcreate-" + std::to_string(::getpid()) + ".pool";
    ::unlink(path.c_str());
    CreateOptions opt = c.opt;
    opt.size = c.size;
    Status st = Pool::Create(path, opt);
    EXPECT_FALSE(st.ok()) << c.name << " was accepted";
    EXPECT_EQ(st.code(), EINVAL) << c.name << ": " << st.ToString();
    EXPECT_NE(st.message().find(c.message_part), std::string::npos) << c.name << ": " << st.message();
    EXPECT_FALSE(FileExists(path)) << c.name << ": a refused create left a file behind";
    ::unlink(path.c_str());
  }
}

// mkfs with bad options over an existing pool must not destroy that pool.
TEST(MediumPoolCreate, RefusedCreateLeavesAnExistingPoolIntact) {
  TempPool tp(32 * MiB);
  ASSERT_TRUE(tp.status().ok());
  const auto before = ReadFileBytes(tp.path());
  for (const BadCreate& c : BadCreates()) {
    CreateOptions opt = c.opt;
    opt.size = c.size;
    EXPECT_FALSE(Pool::Create(tp.path(), opt).ok()) << c.name;
    EXPECT_TRUE(ReadFileBytes(tp.path()) == before) << c.name << ": the existing pool was modified";
  }
  auto p = Pool::Open(tp.path());
  EXPECT_TRUE(p.ok()) << p.status().ToString();
}

}  // namespace
}  // namespace mapfs::medium
