// Layout aging (`mapfs mkfs --layout-score S`, fs/layout_aging.h): a pool
// aged for score S gives a file written afterwards a layout score within
// 0.03 of S, measured from the file's mapping as the HashFS paper defines
// it (share of blocks adjacent on the medium to the block before); the
// data reads back, and fsck is clean with the aging file in place. Designs
// that cannot have a layout (hashfs, contiguous files) are refused.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "fs/file_system.h"
#include "fs/layout_aging.h"
#include "fs_test_util.h"

namespace mapfs::fstest {
namespace {

std::string Mkfs(const TempPool& tp, const char* files) {
  mapfs_mkfs_options o{};
  o.size = 128ull << 20;
  o.page_size = 4096;
  o.mode = MAPFS_MODE_SYNC;
  o.files = files;
  return mapfs_mkfs(tp.path().c_str(), &o) == 0 ? "" : mapfs_last_error();
}

class LayoutAging : public ::testing::TestWithParam<std::tuple<const char*, double>> {};

TEST_P(LayoutAging, FileWrittenAfterAgingHasTheScore) {
  auto [files, score] = GetParam();
  TempPool tp(1ull << 20);
  ASSERT_EQ(Mkfs(tp, files), "");
  {
    auto fs = fs::FileSystem::Mount(tp.path());
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    fs::AgingReport r;
    Status st = fs::AgeForLayout(**fs, score, &r);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_GT(r.kept, 100u);
    ASSERT_TRUE((*fs)->Unmount().ok());
  }
  // A later mount, as after `mapfs mkfs`: 4,000 blocks (16 MiB) written
  // in 64 KiB pieces.
  constexpr uint64_t kBlocks = 4000, kPiece = 16;
  std::vector<char> buf(kPiece * 4096);
  auto fs = fs::FileSystem::Mount(tp.path());
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  auto f = (*fs)->Open("/data", O_CREAT | O_RDWR, 0644);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  for (uint64_t b = 0; b < kBlocks; b += kPiece) {
    FillPattern(buf.data(), buf.size(), 3, b * 4096);
    auto w = (*fs)->Write(**f, buf.data(), buf.size(), static_cast<int64_t>(b * 4096));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
  }
  auto s = fs::LayoutScore(**fs, **f, kBlocks);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NEAR(*s, score, 0.03) << files;
  for (uint64_t b = 0; b < kBlocks; b += kPiece) {
    auto rd = (*fs)->Read(**f, buf.data(), buf.size(), static_cast<int64_t>(b * 4096));
    ASSERT_TRUE(rd.ok());
    ASSERT_EQ(PatternMismatch(buf.data(), buf.size(), 3, b * 4096), -1) << "block " << b;
  }
  ASSERT_TRUE((*fs)->Close(**f).ok());
  ASSERT_TRUE((*fs)->Unmount().ok());
  FS_EXPECT_CLEAN(tp.path());
}

INSTANTIATE_TEST_SUITE_P(Designs, LayoutAging,
                         ::testing::Combine(::testing::Values("cuckoo", "extent", "radix"),
                                            ::testing::Values(0.85, 0.7)),
                         [](const auto& i) {
                           return std::string(std::get<0>(i.param)) + "_" +
                                  std::to_string(static_cast<int>(std::get<1>(i.param) * 100));
                         });

// Without aging, next fit gives a fresh pool's file one run: the score the
// aged rows are judged against is not what any pool gives anyway.
TEST(LayoutAgingBase, FreshPoolGivesOneRun) {
  TempPool tp(1ull << 20);
  ASSERT_EQ(Mkfs(tp, "extent"), "");
  auto fs = fs::FileSystem::Mount(tp.path());
  ASSERT_TRUE(fs.ok());
  auto f = (*fs)->Open("/data", O_CREAT | O_RDWR, 0644);
  ASSERT_TRUE(f.ok());
  std::vector<char> buf(64 * 4096, 1);
  for (int i = 0; i < 20; i++) ASSERT_TRUE((*fs)->Write(**f, buf.data(), buf.size(), -1).ok());
  auto s = fs::LayoutScore(**fs, **f, 20 * 64);
  ASSERT_TRUE(s.ok());
  EXPECT_GT(*s, 0.99);
  ASSERT_TRUE((*fs)->Close(**f).ok());
  ASSERT_TRUE((*fs)->Unmount().ok());
}

TEST(LayoutAgingBase, HashfsAndContiguousAreRefused) {
  for (const char* files : {"hashfs", "contiguous"}) {
    TempPool tp(1ull << 20);
    ASSERT_EQ(Mkfs(tp, files), "");
    auto fs = fs::FileSystem::Mount(tp.path());
    ASSERT_TRUE(fs.ok());
    fs::AgingReport r;
    EXPECT_EQ(fs::AgeForLayout(**fs, 0.85, &r).code(), EINVAL) << files;
    ASSERT_TRUE((*fs)->Unmount().ok());
  }
}

}  // namespace
}  // namespace mapfs::fstest
