// Persistence primitives (medium/persist.h): every copy ISA the CPU offers
// must produce exactly the requested bytes, at every size and alignment, and
// never touch a byte outside the destination.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "medium/persist.h"
#include "test_util.h"

namespace mapfs::medium {
namespace {

using testing::Rng;

constexpr size_t kGuard = 192;  // checked bytes on each side of a destination

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], AlignedFree>;

Buffer AllocAligned(size_t n) {
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(4096, AlignUp(n, 4096))));
}

// Saves the persistence configuration in force and restores it afterwards,
// whatever the test does.
class PersistConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = CurrentPersistConfig(); }
  void TearDown() override {
    ASSERT_TRUE(SetPersistConfig(saved_)) << "could not restore the persistence configuration";
    EXPECT_EQ(CurrentPersistConfig().copy, saved_.copy);
    EXPECT_EQ(CurrentPersistConfig().flush, saved_.flush);
    EXPECT_EQ(CurrentPersistConfig().domain, saved_.domain);
  }
  PersistConfig saved_{};
};

class MediumPersistCopy : public PersistConfigTest, public ::testing::WithParamInterface<CopyIsa> {
 protected:
  // Selects the ISA under test; false (and a skip) if the CPU lacks it.
  bool Select() {
    PersistConfig cfg = saved_;
    cfg.copy = GetParam();
    if (!SetPersistConfig(cfg)) {
      // SSE2 is part of x86-64: refusing it is a bug, not a missing feature.
      EXPECT_NE(GetParam(), CopyIsa::kSse2) << "SetPersistConfig refused SSE2";
      return false;
    }
    EXPECT_EQ(CurrentPersistConfig().copy, GetParam());
    return true;
  }
};

// Copies n bytes from src+soff to dst+doff and checks the destination and
// the guard bytes around it. The destination is pre-filled with the bitwise
// complement of the source, so a byte that was not copied always differs.
::testing::AssertionResult CheckCopy(uint8_t* dst, const uint8_t* src, size_t doff, size_t soff, size_t n) {
  uint8_t* d = dst + doff;
  const uint8_t* s = src + soff;
  for (size_t i = 0; i < kGuard; i++) d[-static_cast<ptrdiff_t>(i) - 1] = static_cast<uint8_t>(0xA5 ^ i);
  for (size_t i = 0; i < n; i++) d[i] = static_cast<uint8_t>(~s[i]);
  for (size_t i = 0; i < kGuard; i++) d[n + i] = static_cast<uint8_t>(0x5A ^ i);
  CopyNt(d, s, n);
  Fence();
  if (n != 0 && std::memcmp(d, s, n) != 0) {
    size_t i = 0;
    while (d[i] == s[i]) i++;
    return ::testing::AssertionFailure() << "n=" << n << " doff=" << doff << " soff=" << soff
                                         << ": first wrong byte at " << i;
  }
  for (size_t i = 0; i < kGuard; i++) {
    if (d[-static_cast<ptrdiff_t>(i) - 1] != static_cast<uint8_t>(0xA5 ^ i))
      return ::testing::AssertionFailure() << "n=" << n << " doff=" << doff << " soff=" << soff
                                           << ": wrote " << i + 1 << " bytes before the destination";
    if (d[n + i] != static_cast<uint8_t>(0x5A ^ i))
      return ::testing::AssertionFailure() << "n=" << n << " doff=" << doff << " soff=" << soff
                                           << ": wrote byte " << i << " after the destination";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CheckZero(uint8_t* dst, size_t doff, size_t n, Rng& rng) {
  uint8_t* d = dst + doff;
  for (size_t i = 0; i < kGuard; i++) d[-static_cast<ptrdiff_t>(i) - 1] = static_cast<uint8_t>(0xA5 ^ i);
  for (size_t i = 0; i < n; i++) d[i] = static_cast<uint8_t>(rng.Next() | 1);  // never zero
  for (size_t i = 0; i < kGuard; i++) d[n + i] = static_cast<uint8_t>(0x5A ^ i);
  ZeroNt(d, n);
  Fence();
  for (size_t i = 0; i < n; i++)
    if (d[i] != 0) return ::testing::AssertionFailure() << "n=" << n << " doff=" << doff << ": byte " << i << " not zero";
  for (size_t i = 0; i < kGuard; i++) {
    if (d[-static_cast<ptrdiff_t>(i) - 1] != static_cast<uint8_t>(0xA5 ^ i))
      return ::testing::AssertionFailure() << "n=" << n << " doff=" << doff << ": zeroed " << i + 1
                                           << " bytes before the destination";
    if (d[n + i] != static_cast<uint8_t>(0x5A ^ i))
      return ::testing::AssertionFailure() << "n=" << n << " doff=" << doff << ": zeroed byte " << i
                                           << " after the destination";
  }
  return ::testing::AssertionSuccess();
}

TEST_P(MediumPersistCopy, CopyNtEverySizeAndAlignment) {
  if (!Select()) GTEST_SKIP() << "CPU does not support " << ToString(GetParam());
  constexpr size_t kMax = 5000;
  auto src = AllocAligned(kMax + 2 * kGuard + 128);
  auto dst = AllocAligned(kMax + 2 * kGuard + 128);
  Rng rng(1);
  for (size_t i = 0; i < kMax + 2 * kGuard + 128; i++) src[i] = static_cast<uint8_t>(rng.Next());
  std::vector<uint8_t> src_copy(src.get(), src.get() + kMax + 2 * kGuard + 128);

  // Every size with every destination misalignment; the source alignment
  // varies with both.
  for (size_t n = 0; n <= kMax; n++)
    for (size_t dm = 0; dm < 64; dm++)
      ASSERT_TRUE(CheckCopy(dst.get(), src.get(), kGuard + dm, kGuard + (n * 7 + dm * 3) % 64, n));
  // The full source x destination grid at the sizes where the head/body/tail
  // split changes.
  for (size_t n : {1ul, 15ul, 16ul, 17ul, 63ul, 64ul, 65ul, 127ul, 128ul, 129ul, 191ul, 192ul, 193ul, 255ul,
                   256ul, 4095ul, 4096ul, 4097ul})
    for (size_t dm = 0; dm < 64; dm++)
      for (size_t sm = 0; sm < 64; sm++)
        ASSERT_TRUE(CheckCopy(dst.get(), src.get(), kGuard + dm, kGuard + sm, n));
  EXPECT_EQ(std::memcmp(src.get(), src_copy.data(), src_copy.size()), 0) << "CopyNt wrote to its source";
}

TEST_P(MediumPersistCopy, CopyNtLargeSizes) {
  if (!Select()) GTEST_SKIP() << "CPU does not support " << ToString(GetParam());
  constexpr size_t kMax = 4 * MiB + 4096;
  auto src = AllocAligned(kMax + 2 * kGuard + 128);
  auto dst = AllocAligned(kMax + 2 * kGuard + 128);
  Rng rng(2);
  for (size_t i = 0; i < kMax + 2 * kGuard + 128; i++) src[i] = static_cast<uint8_t>(rng.Next());
  for (size_t n : {size_t{64 * KiB}, size_t{MiB} + 13, size_t{2 * MiB}, size_t{4 * MiB} + 4095})
    for (size_t dm : {0ul, 1ul, 33ul, 63ul})
      for (size_t sm : {0ul, 8ul, 63ul})
        ASSERT_TRUE(CheckCopy(dst.get(), src.get(), kGuard + dm, kGuard + sm, n));
}

TEST_P(MediumPersistCopy, ZeroNtEverySizeAndAlignment) {
  if (!Select()) GTEST_SKIP() << "CPU does not support " << ToString(GetParam());
  constexpr size_t kMax = 5000;
  auto dst = AllocAligned(kMax + 2 * kGuard + 128);
  Rng rng(3);
  for (size_t n = 0; n <= kMax; n++)
    for (size_t dm = 0; dm < 64; dm++) ASSERT_TRUE(CheckZero(dst.get(), kGuard + dm, n, rng));
  auto big = AllocAligned(4 * MiB + 8192 + 2 * kGuard + 128);
  for (size_t n : {size_t{MiB} + 13, size_t{4 * MiB} + 4095})
    for (size_t dm : {0ul, 1ul, 63ul}) ASSERT_TRUE(CheckZero(big.get(), kGuard + dm, n, rng));
}

// The copy must also be right into a shared file mapping (how pools are
// mapped), under every flush ISA and domain (they change the edge flush).
TEST_P(MediumPersistCopy, CopyAndZeroIntoFileMappingUnderEveryFlushIsa) {
  if (!Select()) GTEST_SKIP() << "CPU does not support " << ToString(GetParam());
  std::string path = "/dev/shm/mapfs-test-persist-" + std::to_string(::getpid()) + ".bin";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ::unlink(path.c_str());
  constexpr size_t kLen = 256 * KiB;
  ASSERT_EQ(::ftruncate(fd, kLen), 0);
  void* m = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  ::close(fd);
  auto* map = static_cast<uint8_t*>(m);
  std::vector<uint8_t> src(kLen);
  Rng rng(4);
  for (auto& b : src) b = static_cast<uint8_t>(rng.Next());
  for (FlushIsa f : {FlushIsa::kClwb, FlushIsa::kClflushopt, FlushIsa::kClflush}) {
    for (Domain dom : {Domain::kFlush, Domain::kNone}) {
      PersistConfig cfg{GetParam(), f, dom};
      if (!SetPersistConfig(cfg)) {
        EXPECT_NE(f, FlushIsa::kClflush) << "clflush is part of x86-64 and must be accepted";
        continue;
      }
      for (size_t n : {0ul, 5ul, 100ul, 1000ul, 70000ul})
        for (size_t dm : {0ul, 3ul, 64ul + 17})
          ASSERT_TRUE(CheckCopy(map, src.data(), kGuard + dm, kGuard + (dm * 5) % 64, n))
              << ToString(f) << "/" << ToString(dom);
      for (size_t n : {0ul, 7ul, 200ul, 70000ul})
        ASSERT_TRUE(CheckZero(map, kGuard + 9, n, rng)) << ToString(f) << "/" << ToString(dom);
    }
  }
  ::munmap(m, kLen);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, MediumPersistCopy,
                         ::testing::Values(CopyIsa::kAvx512, CopyIsa::kAvx2, CopyIsa::kSse2),
                         [](const ::testing::TestParamInfo<CopyIsa>& i) { return std::string(ToString(i.param)); });

// ------------------------------------------------------------------ flush

using MediumPersistFlush = PersistConfigTest;

TEST_F(MediumPersistFlush, FlushFencePersistKeepDataUnderEveryIsaAndDomain) {
  std::string path = "/dev/shm/mapfs-test-flush-" + std::to_string(::getpid()) + ".bin";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ::unlink(path.c_str());
  constexpr size_t kLen = 64 * KiB;
  ASSERT_EQ(::ftruncate(fd, kLen), 0);
  void* m = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* file_map = static_cast<uint8_t*>(m);
  auto anon = AllocAligned(kLen);
  int configs = 0;
  for (FlushIsa f : {FlushIsa::kClwb, FlushIsa::kClflushopt, FlushIsa::kClflush}) {
    for (Domain dom : {Domain::kFlush, Domain::kNone}) {
      PersistConfig cfg{saved_.copy, f, dom};
      if (!SetPersistConfig(cfg)) {
        EXPECT_NE(f, FlushIsa::kClflush) << "clflush must always be accepted";
        continue;
      }
      configs++;
      EXPECT_EQ(CurrentPersistConfig().flush, f);
      EXPECT_EQ(CurrentPersistConfig().domain, dom);
      for (uint8_t* buf : {file_map, anon.get()}) {
        Rng rng(static_cast<uint64_t>(f) * 10 + static_cast<uint64_t>(dom));
        std::vector<uint8_t> want(kLen);
        for (auto& b : want) b = static_cast<uint8_t>(rng.Next());
        std::memcpy(buf, want.data(), kLen);
        // Ranges that start and end mid-line, cover single bytes, zero bytes
        // and the whole buffer.
        Flush(buf, 0);
        Flush(buf + 1, 1);
        Flush(buf + 63, 2);
        Flush(buf + 100, 5000);
        Fence();
        Persist(buf + 4095, 4098);
        Persist(buf, kLen);
        uint64_t* word = reinterpret_cast<uint64_t*>(buf + 8192);
        Store64(word, 0x0123456789abcdefull);
        Persist(word, 8);
        std::memcpy(want.data() + 8192, word, 8);
        EXPECT_EQ(Load64(word), 0x0123456789abcdefull);
        Write(buf + 9000, "persisted", 9);
        Persist(buf + 9000, 9);
        std::memcpy(want.data() + 9000, "persisted", 9);
        EXPECT_EQ(std::memcmp(buf, want.data(), kLen), 0) << ToString(f) << "/" << ToString(dom);
      }
    }
  }
  EXPECT_GE(configs, 2) << "at least clflush in both domains must be usable";
  // The file mapping really holds the data: read it back through the fd.
  std::vector<uint8_t> back(kLen);
  ASSERT_EQ(::pread(fd, back.data(), kLen, 0), static_cast<ssize_t>(kLen));
  EXPECT_EQ(std::memcmp(back.data(), file_map, kLen), 0);
  ::munmap(m, kLen);
  ::close(fd);
}

TEST_F(MediumPersistFlush, DetectedConfigIsTheBestTheCpuAccepts) {
  PersistConfig d = DetectPersistConfig();
  EXPECT_EQ(d.domain, Domain::kFlush);
  ASSERT_TRUE(SetPersistConfig(d)) << "the detected configuration must be usable";
  // Nothing better than what was detected is accepted.
  if (d.copy != CopyIsa::kAvx512) {
    EXPECT_FALSE(SetPersistConfig({CopyIsa::kAvx512, d.flush, d.domain}));
  }
  if (d.copy == CopyIsa::kSse2) {
    EXPECT_FALSE(SetPersistConfig({CopyIsa::kAvx2, d.flush, d.domain}));
  }
  if (d.flush != FlushIsa::kClwb) {
    EXPECT_FALSE(SetPersistConfig({d.copy, FlushIsa::kClwb, d.domain}));
  }
  if (d.flush == FlushIsa::kClflush) {
    EXPECT_FALSE(SetPersistConfig({d.copy, FlushIsa::kClflushopt, d.domain}));
  }
  // A refused request leaves the configuration unchanged.
  ASSERT_TRUE(SetPersistConfig({CopyIsa::kSse2, FlushIsa::kClflush, Domain::kNone}));
  if (!SetPersistConfig({CopyIsa::kAvx512, FlushIsa::kClwb, Domain::kFlush})) {
    EXPECT_EQ(CurrentPersistConfig().copy, CopyIsa::kSse2);
    EXPECT_EQ(CurrentPersistConfig().flush, FlushIsa::kClflush);
    EXPECT_EQ(CurrentPersistConfig().domain, Domain::kNone);
  }
  // The configuration in force at start-up is the detected one, unless
  // MAPFS_PERSIST=none asked for the kNone domain.
  const char* env = std::getenv("MAPFS_PERSIST");
  bool none = env != nullptr && std::strcmp(env, "none") == 0;
  EXPECT_EQ(saved_.copy, d.copy);
  EXPECT_EQ(saved_.flush, d.flush);
  EXPECT_EQ(saved_.domain, none ? Domain::kNone : Domain::kFlush);
}

TEST(MediumPersistNames, EveryIsaHasADistinctName) {
  std::set<std::string> names;
  for (CopyIsa i : {CopyIsa::kAvx512, CopyIsa::kAvx2, CopyIsa::kSse2}) names.insert(ToString(i));
  for (FlushIsa i : {FlushIsa::kClwb, FlushIsa::kClflushopt, FlushIsa::kClflush}) names.insert(ToString(i));
  for (Domain d : {Domain::kFlush, Domain::kNone}) names.insert(ToString(d));
  EXPECT_EQ(names.size(), 8u);
  EXPECT_EQ(names.count("?"), 0u);
}

}  // namespace
}  // namespace mapfs::medium
