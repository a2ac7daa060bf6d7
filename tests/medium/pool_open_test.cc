// Pool::Open and Pool::ValidateHeader: a good pool opens; anything that is
// not a good pool is refused with a clear error and left byte-for-byte as it
// was.
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "medium_test_util.h"
#include "test_util.h"

namespace mapfs::medium {
namespace {

using format::PoolHeader;
using testing::FileSize;
using testing::ReadFileBytes;
using testing::ReadHeader;
using testing::TempPool;
using testing::WriteHeader;

constexpr uint64_t kSize = 32 * MiB;

// Opens `path`, expects a refusal with `code` whose message names the path
// and contains `part`, and checks that the file was not modified.
void ExpectRefused(const std::string& path, int code, const std::string& part, const std::string& what) {
  SCOPED_TRACE(what);
  const auto before = ReadFileBytes(path);
  const uint64_t size_before = FileSize(path);
  auto r = Pool::Open(path);
  ASSERT_FALSE(r.ok()) << "opened a bad pool";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
  EXPECT_EQ(FileSize(path), size_before);
  EXPECT_TRUE(ReadFileBytes(path) == before) << "a refused open modified the file";
}

TEST(MediumPoolOpen, CreateThenOpen) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok()) << tp.status().ToString();
  PoolHeader h = ReadHeader(tp.path());
  auto r = Pool::Open(tp.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Pool& p = **r;
  ASSERT_NE(p.base(), nullptr);
  EXPECT_EQ(p.size(), kSize);
  EXPECT_EQ(p.path(), tp.path());
  EXPECT_GE(p.fd(), 0);
  EXPECT_EQ(std::memcmp(&p.header(), &h, sizeof h), 0);
  EXPECT_EQ(std::memcmp(p.at<char>(0), "MAPFSPL1", 8), 0);
  EXPECT_EQ(p.offset_of(p.at<char>(h.meta_end)), h.meta_end);
  EXPECT_EQ(static_cast<void*>(p.state()), static_cast<void*>(p.base() + format::kStateOff));
  EXPECT_TRUE(p.exclusive_open());
  EXPECT_FALSE(p.needs_recovery());
  EXPECT_EQ(p.replayed_at_open(), 0);
  EXPECT_NE(p.mount_token(), 0u);
  ASSERT_NE(p.shared(), nullptr);
  EXPECT_EQ(std::memcmp(p.shared()->uuid, h.uuid, 16), 0);
  struct statfs sfs {};
  ASSERT_EQ(::statfs(tp.path().c_str(), &sfs), 0);
  EXPECT_STREQ(p.fs_kind(), sfs.f_type == TMPFS_MAGIC ? "tmpfs" : "file");
  // The whole pool is mapped and writable.
  *p.at<uint64_t>(kSize - 8) = 0x1234;
  p.FinishOpen();
  ASSERT_TRUE(p.Close().ok());
  uint64_t last = 0;
  auto bytes = ReadFileBytes(tp.path());
  std::memcpy(&last, bytes.data() + kSize - 8, 8);
  EXPECT_EQ(last, 0x1234u);
}

TEST(MediumPoolOpen, MissingFileIsEnoent) {
  std::string path = "/dev/shm/mapfs-test-does-not-exist-" + std::to_string(::getpid()) + ".pool";
  auto r = Pool::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOENT);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_FALSE(testing::FileExists(path)) << "open must not create a pool file";
}

TEST(MediumPoolOpen, EmptyShortAndRandomFilesAreNotPools) {
  TempPool tp(kSize);  // only for its unique path
  ASSERT_TRUE(testing::WriteWholeFile(tp.path(), {}));
  ExpectRefused(tp.path(), EINVAL, "not a mapfs pool", "empty file");

  ASSERT_TRUE(testing::WriteWholeFile(tp.path(), std::vector<uint8_t>(100, 'x')));
  ExpectRefused(tp.path(), EINVAL, "not a mapfs pool", "100-byte file");

  std::vector<uint8_t> junk(4 * MiB);
  testing::Rng rng(5);
  for (auto& b : junk) b = static_cast<uint8_t>(rng.Next());
  ASSERT_TRUE(testing::WriteWholeFile(tp.path(), junk));
  ExpectRefused(tp.path(), EINVAL, "not a mapfs pool", "random bytes");

  std::vector<uint8_t> zeros(kSize);
  ASSERT_TRUE(testing::WriteWholeFile(tp.path(), zeros));
  ExpectRefused(tp.path(), EINVAL, "not a mapfs pool", "all zeros");
}

TEST(MediumPoolOpen, DirectoryIsRefused) {
  auto r = Pool::Open("/dev/shm");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().code(), 0);
}

TEST(MediumPoolOpen, WrongVersionIsRefused) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  const PoolHeader good = ReadHeader(tp.path());
  for (uint32_t v : {0u, 1u, 3u, 0xffffffffu}) {  // 1: pools from before the file system
    PoolHeader h = good;
    h.version = v;
    ASSERT_TRUE(WriteHeader(tp.path(), h, /*fix_checksum=*/true));
    ExpectRefused(tp.path(), EPROTONOSUPPORT, "version " + std::to_string(v), "version " + std::to_string(v));
    Status st = Pool::ValidateHeader(ReadHeader(tp.path()), kSize);
    EXPECT_EQ(st.code(), EPROTONOSUPPORT) << st.ToString();
  }
  ASSERT_TRUE(WriteHeader(tp.path(), good, false));
  EXPECT_TRUE(Pool::Open(tp.path()).ok());
}

// Every single byte of the header matters: damage anywhere is refused.
TEST(MediumPoolOpen, EveryFlippedHeaderByteIsRefused) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  const PoolHeader good = ReadHeader(tp.path());
  const auto meta_before = ReadFileBytes(tp.path(), 256 * KiB);
  for (size_t i = 0; i < sizeof(PoolHeader); i++) {
    PoolHeader h = good;
    reinterpret_cast<uint8_t*>(&h)[i] ^= static_cast<uint8_t>(1u << (i % 8));
    ASSERT_TRUE(testing::WriteFileAt(tp.path(), 0, &h, sizeof h));
    int want = i < 8 ? EINVAL : i < 12 ? EPROTONOSUPPORT : EUCLEAN;
    auto r = Pool::Open(tp.path());
    ASSERT_FALSE(r.ok()) << "opened a pool whose header byte " << i << " was damaged";
    EXPECT_EQ(r.status().code(), want) << "byte " << i << ": " << r.status().ToString();
    if (want == EUCLEAN) {
      EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << "byte " << i << ": "
                                                                         << r.status().message();
    }
    auto meta_after = ReadFileBytes(tp.path(), 256 * KiB);
    std::memcpy(meta_after.data(), &good, sizeof good);  // undo our own damage before comparing
    ASSERT_TRUE(meta_after == meta_before) << "refused open (byte " << i << ") modified the pool";
  }
  ASSERT_TRUE(testing::WriteFileAt(tp.path(), 0, &good, sizeof good));
  EXPECT_TRUE(Pool::Open(tp.path()).ok());
}

TEST(MediumPoolOpen, ValidateHeaderRejectsEverySingleBitFlip) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  const PoolHeader good = ReadHeader(tp.path());
  ASSERT_TRUE(Pool::ValidateHeader(good, kSize).ok());
  for (size_t i = 0; i < sizeof(PoolHeader); i++) {
    for (int bit = 0; bit < 8; bit++) {
      PoolHeader h = good;
      reinterpret_cast<uint8_t*>(&h)[i] ^= static_cast<uint8_t>(1u << bit);
      Status st = Pool::ValidateHeader(h, kSize);
      ASSERT_FALSE(st.ok()) << "byte " << i << " bit " << bit;
      ASSERT_FALSE(st.message().empty());
    }
  }
}

TEST(MediumPoolOpen, TruncatedPoolIsRefused) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  for (uint64_t len : {kSize - kChunkSize, kSize - 1, uint64_t{4 * MiB}, uint64_t{4096}, uint64_t{512}}) {
    ASSERT_EQ(::truncate(tp.path().c_str(), static_cast<off_t>(len)), 0);
    ExpectRefused(tp.path(), EUCLEAN, "truncated", "truncated to " + std::to_string(len));
  }
  for (uint64_t len : {uint64_t{511}, uint64_t{8}}) {
    ASSERT_EQ(::truncate(tp.path().c_str(), static_cast<off_t>(len)), 0);
    ExpectRefused(tp.path(), EINVAL, "not a mapfs pool", "truncated to " + std::to_string(len));
  }
}

TEST(MediumPoolOpen, FileLongerThanThePoolOpens) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  ASSERT_EQ(::truncate(tp.path().c_str(), static_cast<off_t>(kSize + kChunkSize)), 0);
  auto r = Pool::Open(tp.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size(), kSize);
}

// Headers with a valid checksum but impossible geometry (a bad mkfs, or a
// checksum collision) must not reach the layers that index with them.
struct GeometryCase {
  const char* name;
  std::function<void(PoolHeader&)> mutate;
};

std::vector<GeometryCase> GeometryCases() {
  return {
      {"bitmap inside the redo area", [](PoolHeader& h) { h.bitmap_off = h.redo_off + h.redo_slot_size; }},
      {"bitmap at offset 0", [](PoolHeader& h) { h.bitmap_off = 0; }},
      {"bitmap too small", [](PoolHeader& h) { h.bitmap_bytes -= 8; }},
      {"bitmap too large", [](PoolHeader& h) { h.bitmap_bytes += 8; }},
      {"ppt root overlaps bitmap", [](PoolHeader& h) { h.ppt_root_off = h.bitmap_off; }},
      {"ppt root unaligned", [](PoolHeader& h) { h.ppt_root_off += 8; }},
      {"ppt root past meta_end", [](PoolHeader& h) { h.ppt_root_off = h.meta_end; }},
      {"meta_end unaligned", [](PoolHeader& h) { h.meta_end += kPageSize; }},
      {"meta_end at pool end", [](PoolHeader& h) { h.meta_end = h.pool_size; }},
      {"meta_end past pool end", [](PoolHeader& h) { h.meta_end = h.pool_size + kChunkSize; }},
      {"redo_off moved", [](PoolHeader& h) { h.redo_off = 8192; }},
      {"no redo slots", [](PoolHeader& h) { h.redo_slots = 0; }},
      {"65 redo slots", [](PoolHeader& h) { h.redo_slots = 65; }},
      {"redo slots overrun bitmap", [](PoolHeader& h) { h.redo_slots = 64; }},
      {"redo slot size 1000", [](PoolHeader& h) { h.redo_slot_size = 1000; }},
      {"redo slot size 0", [](PoolHeader& h) { h.redo_slot_size = 0; }},
      {"page shift 13", [](PoolHeader& h) { h.page_shift = 13; }},
      {"mode 3", [](PoolHeader& h) { h.default_mode = 3; }},
      {"unknown format options", [](PoolHeader& h) { h.options = 1; }},
      {"top level 3", [](PoolHeader& h) {
         h.top_level = 3;
         h.vspace_shift = 21;
       }},
      {"top level 12", [](PoolHeader& h) {
         h.top_level = 12;
         h.vspace_shift = 48;
       }},
      {"vspace shift mismatch", [](PoolHeader& h) { h.vspace_shift += 1; }},
      {"pool size not chunk aligned", [](PoolHeader& h) { h.pool_size -= kPageSize; }},
      {"pool size below minimum", [](PoolHeader& h) { h.pool_size = 8 * MiB; }},
      {"header size 511", [](PoolHeader& h) { h.header_size = 511; }},
      {"header size 1024", [](PoolHeader& h) { h.header_size = 1024; }},
  };
}

TEST(MediumPoolOpen, InconsistentGeometryWithValidChecksumIsRefused) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  const PoolHeader good = ReadHeader(tp.path());
  for (const auto& c : GeometryCases()) {
    PoolHeader h = good;
    c.mutate(h);
    h.checksum = testing::HeaderCrc(h);
    Status st = Pool::ValidateHeader(h, kSize);
    EXPECT_EQ(st.code(), EUCLEAN) << c.name << ": " << st.ToString();
    EXPECT_NE(st.message().find("damaged"), std::string::npos) << c.name << ": " << st.message();
    ASSERT_TRUE(WriteHeader(tp.path(), h, false));
    ExpectRefused(tp.path(), EUCLEAN, "damaged", c.name);
  }
  ASSERT_TRUE(WriteHeader(tp.path(), good, false));
  EXPECT_TRUE(Pool::Open(tp.path()).ok());
}

TEST(MediumPoolOpen, ValidateHeaderDirectly) {
  TempPool tp(kSize);
  ASSERT_TRUE(tp.status().ok());
  const PoolHeader good = ReadHeader(tp.path());
  EXPECT_TRUE(Pool::ValidateHeader(good, kSize).ok());
  EXPECT_TRUE(Pool::ValidateHeader(good, 2 * kSize).ok());

  Status st = Pool::ValidateHeader(good, kSize - 1);
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("truncated"), std::string::npos) << st.message();
  st = Pool::ValidateHeader(good, 100);
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find("not a mapfs pool"), std::string::npos) << st.message();

  PoolHeader zero{};
  st = Pool::ValidateHeader(zero, kSize);
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find("magic"), std::string::npos) << st.message();

  PoolHeader bad_sum = good;
  bad_sum.checksum ^= 0x80000000u;
  st = Pool::ValidateHeader(bad_sum, kSize);
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st.message();

  // Editing a field and fixing the checksum is accepted when the result is
  // still a consistent pool (the checksum is over exactly [0, 508)).
  PoolHeader edited = good;
  edited.default_mode = static_cast<uint32_t>(format::Mode::kPosix);
  edited.mkfs_time_ns += 1;
  edited.checksum = testing::HeaderCrc(edited);
  EXPECT_TRUE(Pool::ValidateHeader(edited, kSize).ok());
}

}  // namespace
}  // namespace mapfs::medium
