// The file layer's data path, below the file system: error paths that must
// leave the space allocator as they found it.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "file/file_data.h"
#include "meta/fs_format.h"
#include "mount/mount.h"
#include "space/partition_format.h"
#include "space/partitions.h"
#include "test_util.h"

namespace mapfs {
namespace {

using testing::TempPool;

class FileDataErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pool_.status().ok()) << pool_.status().ToString();
    auto m = Mount::Open(pool_.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mount_ = std::move(*m);
    data_ = std::make_unique<file::FileData>(&mount_->pool(), &mount_->vm(), &mount_->space());
  }
  void TearDown() override {
    data_.reset();
    if (mount_) {
      EXPECT_TRUE(mount_->Close().ok());
    }
  }
  std::vector<uint64_t> Partitions() {
    std::vector<space::PartitionInfo> v;
    EXPECT_TRUE(mount_->space().Check(&v).ok());
    std::vector<uint64_t> out;
    for (auto& p : v) out.push_back(p.voff | static_cast<uint64_t>(p.level));
    return out;
  }
  // A file of `size` bytes in a fresh partition of `level`, whose inode's
  // virtual offset `*in_voff` names unbacked memory: a transaction that
  // records the inode (a move by pswap) cannot translate it.
  void MakeFile(int level, uint64_t size, meta::format::Inode* in, uint64_t* in_voff) {
    auto p = mount_->space().Alloc(level);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    std::memset(in, 0, sizeof *in);
    in->mode = S_IFREG | 0644;
    in->nlink = 1;
    in->part = meta::format::PartWord(*p, level);
    std::string bytes(size, 'x');
    auto w = data_->Write(in, 0, bytes.data(), bytes.size(), 0, file::Mode::kSync);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    auto spare = mount_->space().Alloc(3);  // never written: not backed
    ASSERT_TRUE(spare.ok());
    *in_voff = *spare;
    ASSERT_FALSE(mount_->vm().Translate(*in_voff).ok());
  }

  TempPool pool_{256 * MiB};
  std::unique_ptr<Mount> mount_;
  std::unique_ptr<file::FileData> data_;
};

// Regression (issue 16, defect 5): Grow allocated the larger partition,
// then failed to record the inode and returned, leaking the partition.
TEST_F(FileDataErrors, FailedGrowFreesTheNewPartition) {
  meta::format::Inode in;
  uint64_t in_voff = 0;
  ASSERT_NO_FATAL_FAILURE(MakeFile(3, 1 * MiB, &in, &in_voff));
  auto before = Partitions();
  std::string more(4096, 'y');
  auto w = data_->Write(&in, in_voff, more.data(), more.size(), 3 * MiB, file::Mode::kSync);
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(Partitions(), before) << "a failed growth must not keep a partition";
  EXPECT_EQ(in.part & 0xfff, 3u);
}

// Regression (issue 16, defect 5): the same in Shrink (a truncation to a
// smaller level of 2 MiB or more).
TEST_F(FileDataErrors, FailedShrinkFreesTheNewPartition) {
  meta::format::Inode in;
  uint64_t in_voff = 0;
  ASSERT_NO_FATAL_FAILURE(MakeFile(4, 5 * MiB, &in, &in_voff));
  auto before = Partitions();
  Status st = data_->Truncate(&in, in_voff, 1 * MiB, file::Mode::kSync);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(Partitions(), before) << "a failed shrink must not keep a partition";
  EXPECT_EQ(in.part & 0xfff, 4u);
}

}  // namespace
}  // namespace mapfs
