// The §4.8 filebench personalities (bench/filebench_workloads.h) leave a
// pool fsck-clean, count the operations they claim, and give back every
// block once their file set is removed. Runs on contiguous files and, via
// the files matrix (MAPFS_TEST_FILES), on every block-mapping design: the
// workloads' creates, appends, whole-file writes and deletes from two
// threads are the churn `mapfs bench mapping` puts each design through.
#include <sys/statvfs.h>

#include <gtest/gtest.h>

#include "api/api_util.h"
#include "filebench_workloads.h"
#include "fs/file_system.h"
#include "fs_targets.h"

namespace mapfs {
namespace {

std::vector<std::string> Fsck(const std::string& pool) {
  auto fs = fs::FileSystem::Mount(pool);
  if (!fs.ok()) return {"mount: " + fs.status().ToString()};
  fs::FsCheckReport r = (*fs)->Check();
  Status st = (*fs)->Unmount();
  if (!st.ok()) r.problems.push_back("unmount: " + st.ToString());
  return r.problems;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += "  " + x + "\n";
  return s;
}

class BenchFilebench : public ::testing::TestWithParam<const char*> {};

TEST_P(BenchFilebench, RunLeavesThePoolCleanAndCleanupFreesEveryBlock) {
  const std::string personality = GetParam();
  apitest::MountedPool pool(128ull << 20);
  ASSERT_TRUE(pool.formatted()) << pool.mkfs_error();
  ASSERT_TRUE(pool.Mount()) << mapfs_last_error();
  struct statvfs before {};
  ASSERT_EQ(mapfs_statvfs(pool.fs(), &before), 0);

  // Small file sets, two threads, several loops: every flowop runs on
  // files of many sizes (gamma distributed around the mean).
  bench::FilebenchSpec s = personality == "fileserver" ? bench::Fileserver(60, 40, 2) : bench::Webproxy(80, 40, 2);
  bench::Filebench fb(s);
  bench::MapfsTarget t(pool.fs(), "sync");
  ASSERT_TRUE(fb.Prepare(t));
  bench::FilebenchResult r;
  ASSERT_TRUE(fb.Run(t, &r));
  EXPECT_EQ(r.ops, s.loops * 2 * fb.ops_per_loop());
  EXPECT_GT(r.bytes, 0u);
  ASSERT_TRUE(fb.Run(t, &r)) << "a second run over the aged file set";

  ASSERT_EQ(pool.Unmount(), 0);
  auto problems = Fsck(pool.path());
  EXPECT_TRUE(problems.empty()) << "fsck after " << personality << ":\n" << Join(problems);

  ASSERT_TRUE(pool.Mount()) << mapfs_last_error();
  bench::MapfsTarget again(pool.fs(), "sync");
  fb.Cleanup(again);
  struct stat st;
  EXPECT_NE(mapfs_stat(pool.fs(), s.root.c_str(), &st), 0) << "Cleanup left the file set's root";
  struct statvfs after {};
  ASSERT_EQ(mapfs_statvfs(pool.fs(), &after), 0);
  EXPECT_EQ(after.f_bfree, before.f_bfree) << "blocks not given back once the file set is gone";
  ASSERT_EQ(pool.Unmount(), 0);
  problems = Fsck(pool.path());
  EXPECT_TRUE(problems.empty()) << "fsck after cleanup:\n" << Join(problems);
}

INSTANTIATE_TEST_SUITE_P(Personalities, BenchFilebench, ::testing::Values("fileserver", "webproxy"));

}  // namespace
}  // namespace mapfs
