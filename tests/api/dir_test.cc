// Directory streams through the C API: every entry exactly once with the
// right d_type, telldir/seekdir, rewinddir, listing while the directory
// changes (CIB splits underneath), and directories removed while open.
#include <map>
#include <set>

#include "api/api_util.h"

namespace mapfs::apitest {
namespace {

class DirTest : public ApiTest {
 protected:
  // Name -> d_type of every entry readdir returns; fails on a duplicate.
  ::testing::AssertionResult ListOnce(const char* path, std::map<std::string, int>* out) {
    mapfs_dir_t* d = mapfs_opendir(fs_, path);
    if (d == nullptr) return ::testing::AssertionFailure() << "opendir " << path << ": " << strerror(errno);
    out->clear();
    errno = 0;
    std::string dup;
    while (struct dirent* e = mapfs_readdir(d)) {
      if (!out->emplace(e->d_name, e->d_type).second && dup.empty()) dup = e->d_name;
    }
    int err = errno;
    mapfs_closedir(d);
    if (err) return ::testing::AssertionFailure() << "readdir: " << strerror(err);
    if (!dup.empty()) return ::testing::AssertionFailure() << "\"" << dup << "\" returned twice";
    return ::testing::AssertionSuccess();
  }
  // Creates entry i of a populated directory: a file, a directory or a symlink.
  int Kind(int i) { return i % 10 == 3 ? DT_DIR : i % 7 == 5 ? DT_LNK : DT_REG; }
  bool Make(const std::string& path, int kind) {
    if (kind == DT_DIR) return mapfs_mkdir(fs_, path.c_str(), 0755) == 0;
    if (kind == DT_LNK) return mapfs_symlink(fs_, "target", path.c_str()) == 0;
    int fd = mapfs_open(fs_, path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    return fd >= 0 && mapfs_close(fs_, fd) == 0;
  }
  static std::string Name(int i) {
    char b[32];
    snprintf(b, sizeof b, "entry-%06d", i);
    return b;
  }
};

class DirSizeTest : public DirTest, public ::testing::WithParamInterface<int> {};
INSTANTIATE_TEST_SUITE_P(Sizes, DirSizeTest, ::testing::Values(0, 1, 1000, 20000),
                         [](const ::testing::TestParamInfo<int>& i) { return "n" + std::to_string(i.param); });

TEST_P(DirSizeTest, ReaddirReturnsEveryEntryOnceWithType) {
  const int n = GetParam();
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  for (int i = 0; i < n; i++) ASSERT_TRUE(Make("/d/" + Name(i), Kind(i))) << i << ": " << strerror(errno);
  std::map<std::string, int> got;
  ASSERT_TRUE(ListOnce("/d", &got));
  EXPECT_EQ(got.size(), static_cast<size_t>(n) + 2);
  EXPECT_EQ(got["."], DT_DIR);
  EXPECT_EQ(got[".."], DT_DIR);
  int missing = 0, wrong = 0;
  for (int i = 0; i < n; i++) {
    auto it = got.find(Name(i));
    if (it == got.end()) {
      if (missing++ < 5) ADD_FAILURE() << "missing " << Name(i);
    } else if (it->second != Kind(i)) {
      if (wrong++ < 5) ADD_FAILURE() << Name(i) << " has d_type " << it->second << ", want " << Kind(i);
    }
  }
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(wrong, 0);
  // d_ino matches stat for a sample; "." and ".." are the directory and its parent.
  mapfs_dir_t* d = mapfs_opendir(fs_, "/d");
  ASSERT_NE(d, nullptr);
  int checked = 0;
  while (struct dirent* e = mapfs_readdir(d)) {
    std::string name = e->d_name;
    if (name == ".") {
      EXPECT_EQ(e->d_ino, Stat("/d").st_ino);
    }
    if (name == "..") {
      EXPECT_EQ(e->d_ino, Stat("/").st_ino);
    }
    if (name != "." && name != ".." && checked++ % 97 == 0) {
      struct stat st;
      ASSERT_OK(mapfs_lstat(fs_, ("/d/" + name).c_str(), &st));
      EXPECT_EQ(e->d_ino, st.st_ino) << name;
    }
  }
  mapfs_closedir(d);
  // The directory's link count and the listing survive a remount.
  EXPECT_EQ(Stat("/d").st_nlink, 2u + static_cast<unsigned>((n + 6) / 10));
  Remount();
  std::map<std::string, int> again;
  ASSERT_TRUE(ListOnce("/d", &again));
  EXPECT_EQ(again, got);
  // And it empties completely.
  for (int i = 0; i < n; i++) {
    std::string p = "/d/" + Name(i);
    ASSERT_EQ(Kind(i) == DT_DIR ? mapfs_rmdir(fs_, p.c_str()) : mapfs_unlink(fs_, p.c_str()), 0) << p;
  }
  ASSERT_TRUE(ListOnce("/d", &got));
  EXPECT_EQ(got.size(), 2u);
  EXPECT_OK(mapfs_rmdir(fs_, "/d"));
}

TEST_F(DirTest, ListingMatchesLinux) {
  ExpectLinuxParity(fs_, [](Rec& r) {
    r.list("/");
    r.mkdir("/d");
    int fd = r.open("/d/file", O_CREAT | O_WRONLY, 0644);
    r.close(fd);
    r.mkdir("/d/sub");
    r.symlink("file", "/d/link");
    r.symlink("sub", "/d/dirlink");
    r.link("/d/file", "/d/hard");
    r.list("/d");
    r.list("/d/dirlink");
    r.list("/d/dirlink/");
    r.list("/d/sub");
    r.list("/d/file");
    r.list("/d/link");
    r.list("/missing");
    r.unlink("/d/hard");
    r.rename("/d/file", "/d/renamed");
    r.list("/d");
  });
}

TEST_F(DirTest, OpendirErrorsAndReaddirOnFileDescriptor) {
  ASSERT_TRUE(WriteFile("/f", "x"));
  EXPECT_NULL_ERRNO(mapfs_opendir(fs_, "/f"), ENOTDIR);
  EXPECT_NULL_ERRNO(mapfs_opendir(fs_, "/missing"), ENOENT);
  EXPECT_NULL_ERRNO(mapfs_opendir(fs_, "/f/"), ENOTDIR);
  // Reading a directory with read() is EISDIR.
  ASSERT_FD(fd, mapfs_open(fs_, "/", O_RDONLY | O_DIRECTORY));
  char b[16];
  EXPECT_ERRNO(mapfs_read(fs_, fd, b, sizeof b), EISDIR);
  EXPECT_OK(mapfs_close(fs_, fd));
}

TEST_F(DirTest, TelldirSeekdirResumeExactly) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  const int n = 3000;
  for (int i = 0; i < n; i++) ASSERT_TRUE(Make("/d/" + Name(i), DT_REG));
  mapfs_dir_t* d = mapfs_opendir(fs_, "/d");
  ASSERT_NE(d, nullptr);
  // Record the position before each entry.
  std::vector<long> pos;
  std::vector<std::string> names;
  for (;;) {
    long p = mapfs_telldir(d);
    struct dirent* e = mapfs_readdir(d);
    if (e == nullptr) break;
    pos.push_back(p);
    names.push_back(e->d_name);
  }
  ASSERT_EQ(names.size(), static_cast<size_t>(n) + 2);
  long end = mapfs_telldir(d);
  // Seek to positions at random: the next entry is the one that followed.
  testing::Rng rng(1);
  for (int k = 0; k < 500; k++) {
    size_t i = rng.Below(names.size());
    mapfs_seekdir(d, pos[i]);
    struct dirent* e = mapfs_readdir(d);
    ASSERT_NE(e, nullptr) << "seekdir to position of entry " << i;
    ASSERT_EQ(std::string(e->d_name), names[i]) << "seekdir to position of entry " << i;
    // And the rest of the stream from there continues in order for a bit.
    for (size_t j = i + 1; j < std::min(names.size(), i + 5); j++) {
      e = mapfs_readdir(d);
      ASSERT_NE(e, nullptr);
      ASSERT_EQ(std::string(e->d_name), names[j]);
    }
  }
  // Seeking to the end gives nothing more; to the middle, the whole tail.
  mapfs_seekdir(d, end);
  EXPECT_EQ(mapfs_readdir(d), nullptr);
  mapfs_seekdir(d, pos[n / 2]);
  size_t count = 0;
  while (mapfs_readdir(d)) count++;
  EXPECT_EQ(count, names.size() - n / 2);
  EXPECT_OK(mapfs_closedir(d));
}

// A position stays valid while other entries come and go (the brief:
// "stable cookies for telldir/seekdir").
TEST_F(DirTest, TelldirPositionsSurviveChanges) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  for (int i = 0; i < 2000; i++) ASSERT_TRUE(Make("/d/" + Name(i), DT_REG));
  mapfs_dir_t* d = mapfs_opendir(fs_, "/d");
  ASSERT_NE(d, nullptr);
  std::set<std::string> before;
  for (int i = 0; i < 1000; i++) {
    struct dirent* e = mapfs_readdir(d);
    ASSERT_NE(e, nullptr);
    before.insert(e->d_name);
  }
  long mid = mapfs_telldir(d);
  // Insert many entries (forcing splits) and remove some not yet read.
  for (int i = 2000; i < 8000; i++) ASSERT_TRUE(Make("/d/" + Name(i), DT_REG));
  std::set<std::string> removed;
  for (int i = 0; i < 2000; i += 3) {
    std::string nm = Name(i);
    if (before.count(nm)) continue;
    ASSERT_OK(mapfs_unlink(fs_, ("/d/" + nm).c_str()));
    removed.insert(nm);
  }
  mapfs_seekdir(d, mid);
  std::set<std::string> after;
  while (struct dirent* e = mapfs_readdir(d)) {
    std::string nm = e->d_name;
    EXPECT_FALSE(before.count(nm)) << nm << " returned before and after the position";
    EXPECT_TRUE(after.insert(nm).second) << nm << " returned twice";
  }
  // Every original entry that was never removed shows up on one side.
  for (int i = 0; i < 2000; i++) {
    std::string nm = Name(i);
    if (removed.count(nm)) continue;
    EXPECT_TRUE(before.count(nm) || after.count(nm)) << nm << " was lost";
  }
  EXPECT_OK(mapfs_closedir(d));
}

// Listing in small steps while other entries are created and deleted:
// entries that exist throughout come back exactly once, nothing twice.
TEST_F(DirTest, ReaddirWhileDirectoryChanges) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  const int keep = 3000, churn = 3000;
  for (int i = 0; i < keep; i++) ASSERT_TRUE(Make("/d/keep-" + std::to_string(i), Kind(i)));
  for (int i = 0; i < churn; i++) ASSERT_TRUE(Make("/d/del-" + std::to_string(i), DT_REG));
  mapfs_dir_t* d = mapfs_opendir(fs_, "/d");
  ASSERT_NE(d, nullptr);
  std::map<std::string, int> seen;
  int created = 0, deleted = 0;
  for (int round = 0;; round++) {
    bool done = false;
    for (int k = 0; k < 37; k++) {
      struct dirent* e = mapfs_readdir(d);
      if (e == nullptr) {
        done = true;
        break;
      }
      seen[e->d_name]++;
    }
    if (done) break;
    ASSERT_LT(round, 100000) << "readdir never ends";
    // Between readdir calls: create new names and delete old churn names.
    for (int k = 0; k < 20; k++) {
      ASSERT_TRUE(Make("/d/new-" + std::to_string(created++), DT_REG));
    }
    for (int k = 0; k < 10 && deleted < churn; k++, deleted++)
      ASSERT_OK(mapfs_unlink(fs_, ("/d/del-" + std::to_string(deleted)).c_str()));
  }
  EXPECT_OK(mapfs_closedir(d));
  int twice = 0, missing = 0;
  for (auto& [name, n] : seen)
    if (n > 1 && twice++ < 10) ADD_FAILURE() << name << " returned " << n << " times";
  for (int i = 0; i < keep; i++)
    if (!seen.count("keep-" + std::to_string(i)) && missing++ < 10) ADD_FAILURE() << "keep-" << i << " never returned";
  EXPECT_EQ(twice, 0);
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(seen["."], 1);
  EXPECT_EQ(seen[".."], 1);
  // The final state lists exactly what exists.
  std::map<std::string, int> final_list;
  ASSERT_TRUE(ListOnce("/d", &final_list));
  for (auto& [name, t] : final_list) {
    if (name == "." || name == "..") continue;
    struct stat st;
    EXPECT_OK(mapfs_lstat(fs_, ("/d/" + name).c_str(), &st)) << name;
  }
  EXPECT_EQ(final_list.size(), static_cast<size_t>(2 + keep + created + churn - deleted));
}

TEST_F(DirTest, RewinddirSeesCurrentContents) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  for (int i = 0; i < 500; i++) ASSERT_TRUE(Make("/d/" + Name(i), DT_REG));
  mapfs_dir_t* d = mapfs_opendir(fs_, "/d");
  ASSERT_NE(d, nullptr);
  std::multiset<std::string> first, second;
  while (struct dirent* e = mapfs_readdir(d)) first.insert(e->d_name);
  EXPECT_EQ(first.size(), 502u);
  EXPECT_EQ(mapfs_readdir(d), nullptr);  // stays at the end
  ASSERT_TRUE(Make("/d/added-after", DT_REG));
  ASSERT_OK(mapfs_unlink(fs_, ("/d/" + Name(7)).c_str()));
  mapfs_rewinddir(d);
  EXPECT_EQ(mapfs_telldir(d), 0);
  while (struct dirent* e = mapfs_readdir(d)) second.insert(e->d_name);
  EXPECT_EQ(second.size(), 502u);
  EXPECT_EQ(second.count("added-after"), 1u);
  EXPECT_EQ(second.count(Name(7)), 0u);
  EXPECT_EQ(std::set<std::string>(second.begin(), second.end()).size(), second.size()) << "duplicates after rewind";
  // Partial read, then rewind: starts over at ".".
  mapfs_rewinddir(d);
  struct dirent* e = mapfs_readdir(d);
  ASSERT_NE(e, nullptr);
  EXPECT_STREQ(e->d_name, ".");
  EXPECT_OK(mapfs_closedir(d));
}

TEST_F(DirTest, ReaddirOfRemovedDirectoryReturnsNothing) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  mapfs_dir_t* d = mapfs_opendir(fs_, "/d");
  ASSERT_NE(d, nullptr);
  ASSERT_OK(mapfs_rmdir(fs_, "/d"));
  errno = 0;
  EXPECT_EQ(mapfs_readdir(d), nullptr);
  EXPECT_EQ(errno, 0) << "end of a removed directory is not an error on Linux";
  mapfs_rewinddir(d);
  EXPECT_EQ(mapfs_readdir(d), nullptr);
  EXPECT_OK(mapfs_closedir(d));
  // Read partly, then removed (it must be empty: "." and ".." read).
  ASSERT_OK(mapfs_mkdir(fs_, "/e", 0755));
  d = mapfs_opendir(fs_, "/e");
  ASSERT_NE(d, nullptr);
  ASSERT_NE(mapfs_readdir(d), nullptr);
  ASSERT_OK(mapfs_rmdir(fs_, "/e"));
  // Entries already fetched may still come (glibc buffers them too), but
  // only "." and "..", and then the end.
  int more = 0;
  while (struct dirent* e = mapfs_readdir(d)) {
    EXPECT_TRUE(std::string(e->d_name) == ".." || std::string(e->d_name) == ".") << e->d_name;
    ASSERT_LT(++more, 3);
  }
  EXPECT_EQ(mapfs_readdir(d), nullptr);
  // A new directory of the same name is not the old stream's.
  ASSERT_OK(mapfs_mkdir(fs_, "/e", 0755));
  ASSERT_TRUE(Make("/e/x", DT_REG));
  mapfs_rewinddir(d);
  EXPECT_EQ(mapfs_readdir(d), nullptr);
  EXPECT_OK(mapfs_closedir(d));
  // A stream left open is closed by unmount without trouble.
  mapfs_dir_t* left_open = mapfs_opendir(fs_, "/e");
  ASSERT_NE(left_open, nullptr);
  ASSERT_NE(mapfs_readdir(left_open), nullptr);
}

// Linux: a directory open as a stream still lists after it is renamed.
TEST_F(DirTest, StreamFollowsRenamedDirectory) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  for (int i = 0; i < 300; i++) ASSERT_TRUE(Make("/d/" + Name(i), DT_REG));
  mapfs_dir_t* d = mapfs_opendir(fs_, "/d");
  ASSERT_NE(d, nullptr);
  std::set<std::string> names;
  for (int i = 0; i < 100; i++) names.insert(mapfs_readdir(d)->d_name);
  ASSERT_OK(mapfs_mkdir(fs_, "/other", 0755));
  ASSERT_OK(mapfs_rename(fs_, "/d", "/other/d"));
  while (struct dirent* e = mapfs_readdir(d)) EXPECT_TRUE(names.insert(e->d_name).second) << e->d_name;
  EXPECT_EQ(names.size(), 302u);
  EXPECT_OK(mapfs_closedir(d));
}

// Entries of many sizes of name, including ones that cannot be inline.
TEST_F(DirTest, NamesOfEveryLength) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  std::set<std::string> want = {".", ".."};
  for (int len = 1; len <= 255; len++) {
    std::string nm(static_cast<size_t>(len), static_cast<char>('a' + len % 26));
    nm[0] = static_cast<char>('A' + len % 26);
    if (len > 1) nm[static_cast<size_t>(len) - 1] = static_cast<char>('0' + len % 10);
    if (want.count(nm)) continue;
    ASSERT_TRUE(Make("/d/" + nm, DT_REG)) << len;
    want.insert(nm);
  }
  std::map<std::string, int> got;
  ASSERT_TRUE(ListOnce("/d", &got));
  std::set<std::string> names;
  for (auto& [n, t] : got) names.insert(n);
  EXPECT_EQ(names, want);
  for (auto& n : want) {
    if (n == "." || n == "..") continue;
    struct stat st;
    EXPECT_OK(mapfs_stat(fs_, ("/d/" + n).c_str(), &st)) << n.size();
  }
}

// Names that differ only slightly (hash neighbours, binary bytes).
TEST_F(DirTest, SimilarAndBinaryNamesAreDistinct) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  std::set<std::string> want;
  for (int i = 0; i < 256; i++) {
    if (i == 0 || i == '/') continue;
    std::string nm = "x";
    nm += static_cast<char>(i);
    ASSERT_TRUE(Make("/d/" + nm, DT_REG)) << i;
    want.insert(nm);
  }
  for (const char* nm : {"a", "A", "a ", " a", "a.", ".a", "..a", "...", "a\t"}) {
    ASSERT_TRUE(Make(std::string("/d/") + nm, DT_REG)) << nm;
    want.insert(nm);
  }
  std::map<std::string, int> got;
  ASSERT_TRUE(ListOnce("/d", &got));
  got.erase(".");
  got.erase("..");
  std::set<std::string> names;
  for (auto& [n, t] : got) names.insert(n);
  EXPECT_EQ(names, want);
}

// Regression (issue 16, defect 7): mapfs_unmount left directory streams
// open, and a later mapfs_closedir closed their description through the
// freed file system (a use after free, caught by ASan). Unmount closes
// them; the handle reads as closed and mapfs_closedir frees it.
TEST_F(DirTest, UnmountClosesDirectoryStreams) {
  ASSERT_OK(mapfs_mkdir(fs_, "/d", 0755));
  ASSERT_TRUE(Make("/d/a", DT_REG));
  mapfs_dir_t* d = mapfs_opendir(fs_, "/d");
  ASSERT_NE(d, nullptr);
  ASSERT_NE(mapfs_readdir(d), nullptr);
  mapfs_dir_t* e = mapfs_opendir(fs_, "/");
  ASSERT_NE(e, nullptr);
  EXPECT_OK(mapfs_closedir(e));  // closed before: not touched by unmount
  ASSERT_OK(pool_->Unmount());
  fs_ = nullptr;
  errno = 0;
  EXPECT_EQ(mapfs_readdir(d), nullptr);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(mapfs_closedir(d), 0);
  // The stream's description was closed: the pool unmounted cleanly and
  // its directory is still whole.
  Remount();
  EXPECT_EQ(Stat("/d/a").st_nlink, 1u);
  ASSERT_OK(mapfs_unlink(fs_, "/d/a"));
  ASSERT_OK(mapfs_rmdir(fs_, "/d"));
}

}  // namespace
}  // namespace mapfs::apitest
