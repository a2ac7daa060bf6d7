// src/common: CRC-32C, size parsing/formatting, Status/Result, logging.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/crc32c.h"
#include "common/log.h"
#include "common/status.h"
#include "common/units.h"
#include "medium_test_util.h"
#include "test_util.h"

namespace mapfs {
namespace {

using testing::Rng;

// Bit-at-a-time reference (reflected polynomial 0x82F63B78), written here
// independently of the library's table and SSE4.2 paths.
uint32_t ReferenceCrc32c(const uint8_t* p, size_t n, uint32_t seed = 0) {
  uint32_t c = ~seed;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

// ------------------------------------------------------------------ CRC32C

TEST(CommonCrc32c, KnownVectors) {
  const char* digits = "123456789";
  EXPECT_EQ(Crc32c(digits, 9), 0xE3069283u);

  uint8_t buf[32];
  std::memset(buf, 0, sizeof buf);
  EXPECT_EQ(Crc32c(buf, 32), 0x8A9136AAu);  // RFC 3720 B.4
  std::memset(buf, 0xff, sizeof buf);
  EXPECT_EQ(Crc32c(buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++) buf[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; i++) buf[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(buf, 32), 0x113FDB5Cu);

  const char* fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(Crc32c(fox, std::strlen(fox)), 0x22620404u);
  EXPECT_EQ(Crc32c("a", 1), 0xC1D04330u);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

TEST(CommonCrc32c, MatchesBytewiseReferenceForRandomInputs) {
  Rng rng(42);
  // Lengths up to 40 KiB: the hardware path interleaves three streams in
  // rounds of 384 and 3,072 bytes and folds them together.
  std::vector<uint8_t> data(40960 + 64);
  for (auto& b : data) b = static_cast<uint8_t>(rng.Next());
  for (int iter = 0; iter < 3000; iter++) {
    size_t off = rng.Below(64);  // misaligned starts
    size_t n = iter < 300 ? static_cast<size_t>(iter) : rng.Below(iter % 2 ? 8192 : 40960);
    uint32_t seed = iter % 3 == 0 ? 0 : static_cast<uint32_t>(rng.Next());
    ASSERT_EQ(Crc32c(data.data() + off, n, seed), ReferenceCrc32c(data.data() + off, n, seed))
        << "off=" << off << " n=" << n << " seed=" << seed;
  }
}

TEST(CommonCrc32c, SeedChainsLikeOneBuffer) {
  Rng rng(7);
  std::vector<uint8_t> data(3000);
  for (auto& b : data) b = static_cast<uint8_t>(rng.Next());
  uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split : {0ul, 1ul, 7ul, 8ul, 9ul, 1500ul, 2999ul, 3000ul}) {
    uint32_t a = Crc32c(data.data(), split);
    EXPECT_EQ(Crc32c(data.data() + split, data.size() - split, a), whole) << "split=" << split;
  }
}

TEST(CommonCrc32c, DetectsEverySingleBitFlip) {
  Rng rng(9);
  std::vector<uint8_t> data(512);
  for (auto& b : data) b = static_cast<uint8_t>(rng.Next());
  uint32_t base = Crc32c(data.data(), data.size());
  for (size_t i = 0; i < data.size(); i++) {
    for (int bit = 0; bit < 8; bit++) {
      data[i] ^= static_cast<uint8_t>(1u << bit);
      ASSERT_NE(Crc32c(data.data(), data.size()), base) << "byte " << i << " bit " << bit;
      data[i] ^= static_cast<uint8_t>(1u << bit);
    }
  }
}

// ------------------------------------------------------------------ sizes

TEST(CommonUnits, ParseSizeAcceptsPlainNumbersAndSuffixes) {
  struct Case {
    const char* in;
    uint64_t want;
  } cases[] = {
      {"0", 0},
      {"4096", 4096},
      {"1k", KiB},
      {"1K", KiB},
      {"1KiB", KiB},
      {"1kib", KiB},
      {"1KB", KiB},
      {"1Ki", KiB},
      {"64M", 64 * MiB},
      {"2m", 2 * MiB},
      {"2MiB", 2 * MiB},
      {"1G", GiB},
      {"3g", 3 * GiB},
      {"1T", TiB},
      {"0G", 0},
      {"007k", 7 * KiB},
      {"18446744073709551615", UINT64_MAX},
      {"16777215T", 16777215ull * TiB},
  };
  for (const auto& c : cases) {
    auto r = ParseSize(c.in);
    ASSERT_TRUE(r.ok()) << c.in << ": " << r.status().ToString();
    EXPECT_EQ(*r, c.want) << c.in;
  }
}

TEST(CommonUnits, ParseSizeRejectsJunkWithEinval) {
  for (const char* in : {"", "abc", "-1", "+5", " 1G", "1G ", "1.5G", "1,5G", "12X", "1Gx", "1KiBB", "1iB", "0x10",
                         "G", "1 K", "1Bk"}) {
    auto r = ParseSize(in);
    EXPECT_FALSE(r.ok()) << "'" << in << "' was accepted as " << r.value();
    EXPECT_EQ(r.status().code(), EINVAL) << "'" << in << "': " << r.status().ToString();
    EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(CommonUnits, ParseSizeRejectsOverflowWithErange) {
  for (const char* in : {"18446744073709551616", "99999999999999999999999", "16777216T", "17179869184G",
                         "18014398509481984k"}) {
    auto r = ParseSize(in);
    EXPECT_FALSE(r.ok()) << in << " was accepted as " << r.value();
    EXPECT_EQ(r.status().code(), ERANGE) << in << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(in), std::string::npos) << r.status().message();
  }
}

TEST(CommonUnits, FormatSizePicksTheRightUnit) {
  EXPECT_EQ(FormatSize(0), "0 B");
  EXPECT_EQ(FormatSize(1), "1 B");
  EXPECT_EQ(FormatSize(1023), "1023 B");
  EXPECT_EQ(FormatSize(KiB), "1.0 KiB");
  EXPECT_EQ(FormatSize(KiB + KiB / 2), "1.5 KiB");
  EXPECT_EQ(FormatSize(16 * MiB), "16.0 MiB");
  EXPECT_EQ(FormatSize(GiB), "1.0 GiB");
  EXPECT_EQ(FormatSize(3 * TiB), "3.0 TiB");
  // Beyond TiB there is no larger unit: stays in TiB, never garbage.
  EXPECT_EQ(FormatSize(2048 * TiB), "2048.0 TiB");
  EXPECT_EQ(FormatSize(UINT64_MAX), "16777216.0 TiB");  // 2^64 B = 2^24 TiB
}

TEST(CommonUnits, AlignHelpers) {
  EXPECT_EQ(AlignUp(0, 4096), 0u);
  EXPECT_EQ(AlignUp(1, 4096), 4096u);
  EXPECT_EQ(AlignUp(4096, 4096), 4096u);
  EXPECT_EQ(AlignDown(4097, 4096), 4096u);
  EXPECT_EQ(AlignDown(kChunkSize - 1, kChunkSize), 0u);
  EXPECT_TRUE(IsAligned(3 * kChunkSize, kChunkSize));
  EXPECT_FALSE(IsAligned(3 * kChunkSize + kPageSize, kChunkSize));
  EXPECT_EQ(kPageSize, uint64_t{1} << kPageShift);
  EXPECT_EQ(kChunkSize, uint64_t{1} << kChunkShift);
  EXPECT_EQ(kPagesPerChunk, 512u);
}

// ------------------------------------------------------------------ Status

Status FailsWith(int code) { return code ? Status::Error(code, "inner failure") : Status::Ok(); }
Status Outer(int code, bool* reached_end) {
  MAPFS_RETURN_IF_ERROR(FailsWith(code));
  *reached_end = true;
  return Status::Ok();
}

TEST(CommonStatus, CarriesCodeMessageAndPropagates) {
  Status ok = Status::Ok();
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.code(), 0);
  EXPECT_EQ(ok.ToString(), "OK");

  Status e = Status::Error(ENOSPC, "pool full at offset 0x10");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), ENOSPC);
  EXPECT_EQ(e.message(), "pool full at offset 0x10");
  EXPECT_EQ(e.ToString(), std::string("pool full at offset 0x10 (") + std::strerror(ENOSPC) + ")");

  errno = EACCES;
  Status fe = Status::FromErrno("open x");
  EXPECT_EQ(fe.code(), EACCES);
  EXPECT_EQ(fe.message(), "open x");
  errno = 0;
  EXPECT_EQ(Status::FromErrno("no errno").code(), EIO) << "an error must never look like success";

  bool reached = false;
  Status s = Outer(EBADF, &reached);
  EXPECT_EQ(s.code(), EBADF);
  EXPECT_EQ(s.message(), "inner failure");
  EXPECT_FALSE(reached);
  EXPECT_TRUE(Outer(0, &reached).ok());
  EXPECT_TRUE(reached);
}

TEST(CommonStatus, ResultHoldsValueOrError) {
  Result<std::string> v(std::string("hello"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "hello");
  EXPECT_EQ(v->size(), 5u);
  Result<std::string> e(Status::Error(ENOENT, "missing"));
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ENOENT);
  EXPECT_EQ(e.status().message(), "missing");
}

// ------------------------------------------------------------------ logging
// The log destination is decided once per process, so every case runs in a
// fresh child.

std::string TempLogPath() {
  static int n = 0;
  return "/dev/shm/mapfs-test-log-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".log";
}

TEST(CommonLog, SilentUnlessMapfsLogIsSet) {
  int st = testing::RunInChild([] {
    ::unsetenv("MAPFS_LOG");
    if (LogEnabled()) return 1;
    Logf("this must go nowhere %d", 1);
    return 0;
  });
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << testing::DescribeWait(st);
  st = testing::RunInChild([] {
    ::setenv("MAPFS_LOG", "0", 1);
    return LogEnabled() ? 1 : 0;
  });
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "MAPFS_LOG=0 must disable logging; "
                                                     << testing::DescribeWait(st);
}

TEST(CommonLog, AppendsPrefixedLinesToFile) {
  std::string path = TempLogPath();
  ::unlink(path.c_str());
  pid_t child_pid = 0;
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  int st = testing::RunInChild([&] {
    ::setenv("MAPFS_LOG", path.c_str(), 1);
    if (!LogEnabled()) return 1;
    MAPFS_LOG("pool %s: %d records", "x.pool", 42);
    std::string longmsg(5000, 'z');
    Logf("%s", longmsg.c_str());
    pid_t me = ::getpid();
    if (::write(pipefd[1], &me, sizeof me) != sizeof me) return 2;
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << testing::DescribeWait(st);
  ASSERT_EQ(::read(pipefd[0], &child_pid, sizeof child_pid), static_cast<ssize_t>(sizeof child_pid));
  ::close(pipefd[0]);
  ::close(pipefd[1]);

  auto bytes = testing::ReadFileBytes(path);
  ::unlink(path.c_str());
  std::string text(bytes.begin(), bytes.end());
  std::string first = "mapfs[" + std::to_string(child_pid) + "]: pool x.pool: 42 records\n";
  ASSERT_GE(text.size(), first.size());
  EXPECT_EQ(text.substr(0, first.size()), first);
  // The over-long line is truncated but still one whole line.
  std::string second = text.substr(first.size());
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(second.back(), '\n');
  EXPECT_EQ(second.find('\n'), second.size() - 1);
  EXPECT_LE(second.size(), 1024u);
  EXPECT_EQ(second.rfind("mapfs[", 0), 0u);
}

}  // namespace
}  // namespace mapfs
