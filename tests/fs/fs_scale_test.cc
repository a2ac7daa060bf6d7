// The file system at scale, through the C API:
//  - one directory of 100,000 entries (names of 1 to 255 bytes): create,
//    stat, readdir, remount, readdir, unlink every one, rmdir, fsck;
//  - the pool space 100,000 files of 1 KiB take (ctFS would give each its
//    own 2 MiB partition; mapfs gives a small file the smallest partition
//    that holds it), and that deleting them gives the space back;
//  - readdir of a directory that changes during the scan, and telldir /
//    seekdir positions taken in the middle of one.
//
// Per-operation times are printed, never asserted. Label "scale": CI runs
// these in the normal build only (too slow under sanitizers).
// MAPFS_SCALE_FILES overrides the 100,000 (e.g. for a quick run).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "fs_test_util.h"
#include "meta/fs_format.h"
#include "meta/inode_table.h"

namespace mapfs::fstest {
namespace {

using Clock = std::chrono::steady_clock;

long ScaleFiles() { return EnvInt("MAPFS_SCALE_FILES", 100000); }

// Name of entry i: unique (its number first), of varying length: most are
// 1..60 bytes, every 50th is 200..255 bytes, every 7th holds bytes >= 0x80
// (names are bytes, not text).
std::string BigName(long i) {
  std::string n = std::to_string(i);
  size_t len = static_cast<size_t>(1 + (i * 7919) % 60);
  if (i % 50 == 0) len = static_cast<size_t>(200 + (i / 50) % 56);
  n += '_';
  for (size_t k = 0; n.size() < len; k++) {
    char c = static_cast<char>('a' + (i + k) % 26);
    if (i % 7 == 3 && k % 5 == 1) c = static_cast<char>(0xc3), n += c, c = static_cast<char>(0xa9);  // "é"
    n += c;
  }
  if (n.size() > 255) n.resize(255);
  return n;
}

// Bytes written into entry i (most are empty).
size_t BigSize(long i) { return i % 100 == 0 ? static_cast<size_t>(1 + i % 3000) : 0; }

uint64_t UsedBytes(mapfs_t* fs) {
  struct statvfs sv{};
  EXPECT_EQ(mapfs_statvfs(fs, &sv), 0) << mapfs_last_error();
  return (sv.f_blocks - sv.f_bfree) * sv.f_frsize;
}

// Inode segments in use (the pool must not be mounted through the C API).
int InodeSegments(const std::string& pool) {
  auto fs = fs::FileSystem::Mount(pool);
  EXPECT_TRUE(fs.ok()) << fs.status().ToString();
  if (!fs.ok()) return -1;
  Mount& m = (*fs)->mount();
  auto t = meta::InodeTable::Open(&m.pool(), &m.vm(), &m.space());
  EXPECT_TRUE(t.ok());
  int n = t.ok() ? static_cast<int>((*t)->segments()) : -1;
  if (t.ok()) t->reset();  // before the unmount
  EXPECT_TRUE((*fs)->Unmount().ok());
  return n;
}
uint64_t SegmentBytes(int from, int to) {
  uint64_t b = 0;
  for (int s = from; s < to; s++) b += 4096ull << (3 * meta::format::SegLevel(s));
  return b;
}

// Reads a whole directory stream: names (without . and ..) in order, and
// how often each of "." and ".." came back. Fails on a readdir error.
struct Listing {
  std::vector<std::string> names;
  std::vector<uint64_t> inos;
  std::vector<uint8_t> types;
  int dots = 0, dotdots = 0;
  uint64_t dot_ino = 0, dotdot_ino = 0;
};
Listing ReadAll(mapfs_dir_t* d) {
  Listing l;
  for (;;) {
    errno = 0;
    struct dirent* e = mapfs_readdir(d);
    if (e == nullptr) {
      EXPECT_EQ(errno, 0) << "readdir: " << mapfs_last_error();
      break;
    }
    std::string n = e->d_name;
    if (n == ".") {
      l.dots++;
      l.dot_ino = e->d_ino;
    } else if (n == "..") {
      l.dotdots++;
      l.dotdot_ino = e->d_ino;
    } else {
      l.names.push_back(n);
      l.inos.push_back(e->d_ino);
      l.types.push_back(e->d_type);
    }
  }
  return l;
}

// Every expected name exactly once with its inode, nothing else; . and ..
// once each.
void ExpectComplete(const Listing& l, const std::vector<std::string>& names, const std::vector<uint64_t>& inos,
                    uint64_t dir_ino, uint64_t parent_ino) {
  EXPECT_EQ(l.dots, 1);
  EXPECT_EQ(l.dotdots, 1);
  EXPECT_EQ(l.dot_ino, dir_ino);
  EXPECT_EQ(l.dotdot_ino, parent_ino);
  std::unordered_map<std::string, size_t> want;
  want.reserve(names.size());
  for (size_t i = 0; i < names.size(); i++) want.emplace(names[i], i);
  std::unordered_map<std::string, int> seen;
  seen.reserve(l.names.size());
  size_t dup = 0, unknown = 0, bad_ino = 0, bad_type = 0;
  std::string first_bad;
  for (size_t k = 0; k < l.names.size(); k++) {
    const std::string& n = l.names[k];
    if (++seen[n] > 1) {
      if (dup++ == 0 && first_bad.empty()) first_bad = "twice: " + n;
      continue;
    }
    auto it = want.find(n);
    if (it == want.end()) {
      if (unknown++ == 0 && first_bad.empty()) first_bad = "unknown: " + n;
      continue;
    }
    if (l.inos[k] != inos[it->second] && bad_ino++ == 0 && first_bad.empty()) first_bad = "wrong d_ino: " + n;
    if (l.types[k] != DT_REG && bad_type++ == 0 && first_bad.empty()) first_bad = "wrong d_type: " + n;
  }
  size_t missing = 0;
  for (auto& n : names)
    if (!seen.count(n) && missing++ == 0 && first_bad.empty()) first_bad = "missing: " + n.substr(0, 40);
  EXPECT_EQ(l.names.size(), names.size());
  EXPECT_EQ(dup, 0u);
  EXPECT_EQ(unknown, 0u);
  EXPECT_EQ(missing, 0u);
  EXPECT_EQ(bad_ino, 0u);
  EXPECT_EQ(bad_type, 0u);
  EXPECT_TRUE(first_bad.empty()) << "first problem: " << first_bad;
}

double Us(Clock::time_point t0, long n) { return SecondsSince(t0) * 1e6 / static_cast<double>(n); }

// a. One directory of 100,000 entries.
TEST(fs_scale, HundredThousandEntryDirectory) {
  const long n = ScaleFiles();
  FsPool pool(1ull << 30);
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  ASSERT_EQ(mapfs_mkdir(fs, "/big", 0755), 0) << mapfs_last_error();
  struct stat dst{}, rst{};
  ASSERT_EQ(mapfs_stat(fs, "/big", &dst), 0);
  ASSERT_EQ(mapfs_stat(fs, "/", &rst), 0);

  std::vector<std::string> names(static_cast<size_t>(n));
  std::vector<uint64_t> inos(static_cast<size_t>(n));
  size_t long_names = 0, max_len = 0;
  for (long i = 0; i < n; i++) {
    names[i] = BigName(i);
    long_names += names[i].size() >= 200;
    max_len = std::max(max_len, names[i].size());
  }
  ASSERT_GT(long_names, 0u);
  if (n >= 3000) {
    ASSERT_EQ(max_len, 255u);
  }

  // Create.
  std::string data(3000, 0);
  FillPattern(data.data(), data.size(), 77, 0);
  auto t0 = Clock::now();
  for (long i = 0; i < n; i++) {
    std::string p = "/big/" + names[i];
    int fd = mapfs_open(fs, p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << "create #" << i << " (" << names[i].size() << " bytes): " << mapfs_last_error();
    if (size_t sz = BigSize(i)) {
      ASSERT_EQ(mapfs_write(fs, fd, data.data(), sz), static_cast<ssize_t>(sz));
    }
    struct stat st{};
    ASSERT_EQ(mapfs_fstat(fs, fd, &st), 0);
    inos[i] = st.st_ino;
    ASSERT_EQ(mapfs_close(fs, fd), 0);
  }
  double create_us = Us(t0, n);
  {
    std::set<uint64_t> distinct(inos.begin(), inos.end());
    EXPECT_EQ(distinct.size(), static_cast<size_t>(n)) << "two files share an inode number";
  }
  ASSERT_EQ(mapfs_stat(fs, "/big", &dst), 0);
  EXPECT_EQ(dst.st_nlink, 2u);

  // Lookup: every name found, with its inode and size.
  t0 = Clock::now();
  long bad = 0;
  for (long i = 0; i < n; i++) {
    std::string p = "/big/" + names[i];
    struct stat st{};
    if (mapfs_stat(fs, p.c_str(), &st) != 0) {
      if (bad++ < 5) ADD_FAILURE() << "stat #" << i << ": " << ErrName(errno) << " " << mapfs_last_error();
      continue;
    }
    if ((st.st_ino != inos[i] || st.st_size != static_cast<off_t>(BigSize(i)) || !S_ISREG(st.st_mode)) &&
        bad++ < 5)
      ADD_FAILURE() << "stat #" << i << ": ino " << st.st_ino << " (want " << inos[i] << "), size " << st.st_size
                    << " (want " << BigSize(i) << ")";
  }
  double lookup_us = Us(t0, n);
  EXPECT_EQ(bad, 0);
  // A name one byte longer than NAME_MAX and absent names are not found.
  struct stat st{};
  EXPECT_EQ(mapfs_stat(fs, ("/big/" + std::string(256, 'q')).c_str(), &st), -1);
  EXPECT_EQ(errno, ENAMETOOLONG);
  EXPECT_EQ(mapfs_stat(fs, ("/big/" + std::to_string(n) + "_").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  // Content of the files that have some.
  for (long i = 0; i < n; i += 1000) {
    std::string got;
    ASSERT_TRUE(ReadFile(fs, "/big/" + names[i], &got)) << mapfs_last_error();
    EXPECT_EQ(got, data.substr(0, BigSize(i))) << "#" << i;
  }

  // readdir: each exactly once, plus . and ..
  t0 = Clock::now();
  mapfs_dir_t* d = mapfs_opendir(fs, "/big");
  ASSERT_NE(d, nullptr);
  Listing l = ReadAll(d);
  double readdir_us = Us(t0, n);
  mapfs_closedir(d);
  ExpectComplete(l, names, inos, dst.st_ino, rst.st_ino);

  // Remount; fsck the full directory on the way; readdir again.
  ASSERT_EQ(mapfs_unmount(fs), 0);
  t0 = Clock::now();
  fs::FsCheckReport rep;
  auto problems = CheckPool(pool.path(), &rep);
  double check_s = SecondsSince(t0);
  EXPECT_TRUE(problems.empty()) << Join(problems);
  EXPECT_EQ(rep.files, static_cast<uint64_t>(n));
  EXPECT_EQ(rep.entries, static_cast<uint64_t>(n) + 1);  // + "big" in the root
  fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  d = mapfs_opendir(fs, "/big");
  ASSERT_NE(d, nullptr);
  ExpectComplete(ReadAll(d), names, inos, dst.st_ino, rst.st_ino);
  mapfs_closedir(d);

  // Delete every entry, in an order unrelated to creation.
  t0 = Clock::now();
  bad = 0;
  for (long k = 0; k < n; k++) {
    long i = static_cast<long>((static_cast<uint64_t>(k) * 7919) % static_cast<uint64_t>(n));
    std::string p = "/big/" + names[i];
    if (mapfs_unlink(fs, p.c_str()) != 0 && bad++ < 5)
      ADD_FAILURE() << "unlink #" << i << ": " << ErrName(errno) << " " << mapfs_last_error();
  }
  double unlink_us = Us(t0, n);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(mapfs_stat(fs, ("/big/" + names[0]).c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  d = mapfs_opendir(fs, "/big");
  ASSERT_NE(d, nullptr);
  l = ReadAll(d);
  mapfs_closedir(d);
  EXPECT_EQ(l.dots, 1);
  EXPECT_EQ(l.dotdots, 1);
  EXPECT_TRUE(l.names.empty()) << l.names.size() << " entries left, first " << l.names[0];
  EXPECT_EQ(mapfs_rmdir(fs, "/big"), 0) << mapfs_last_error();
  EXPECT_EQ(mapfs_stat(fs, "/big", &st), -1);
  ASSERT_EQ(mapfs_unmount(fs), 0);
  FS_EXPECT_CLEAN(pool.path());

  std::printf("[ scale    ] %ld entries in one directory (%zu names of 200+ bytes): create %.2f us, "
              "stat %.2f us, readdir %.3f us, unlink %.2f us per entry; fsck of the full pool %.2f s\n",
              n, long_names, create_us, lookup_us, readdir_us, unlink_us, check_s);
}

// b. Space that 100,000 files of 1 KiB take, and its return.
TEST(fs_scale, SpaceOfSmallFiles) {
  const long n = ScaleFiles();
  const long per_dir = 1000, ndirs = (n + per_dir - 1) / per_dir;
  FsPool pool(2ull << 30);
  ASSERT_EQ(pool.error(), "");
  const int seg0 = InodeSegments(pool.path());
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  const uint64_t used0 = UsedBytes(fs);

  char kib[1024];
  auto t0 = Clock::now();
  for (long dn = 0; dn < ndirs; dn++) {
    std::string dir = "/d" + std::to_string(dn);
    ASSERT_EQ(mapfs_mkdir(fs, dir.c_str(), 0755), 0) << mapfs_last_error();
    for (long k = 0; k < per_dir && dn * per_dir + k < n; k++) {
      long i = dn * per_dir + k;
      std::string p = dir + "/f" + std::to_string(k);
      int fd = mapfs_open(fs, p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
      ASSERT_GE(fd, 0) << p << ": " << mapfs_last_error();
      FillPattern(kib, sizeof kib, static_cast<uint64_t>(i), 0);
      ASSERT_EQ(mapfs_write(fs, fd, kib, sizeof kib), 1024) << p << ": " << mapfs_last_error();
      ASSERT_EQ(mapfs_close(fs, fd), 0);
    }
  }
  double create_us = Us(t0, n);
  const uint64_t used1 = UsedBytes(fs);
  ASSERT_EQ(mapfs_unmount(fs), 0);
  const int seg1 = InodeSegments(pool.path());
  const double per_file = static_cast<double>(used1 - used0) / static_cast<double>(n);
  std::printf("[ scale    ] %ldK x 1 KiB files: %.1f MiB of pool (%.0f bytes per file; %.1f MiB of it inode "
              "table); create+write %.2f us per file\n",
              n / 1000, static_cast<double>(used1 - used0) / (1 << 20), per_file,
              static_cast<double>(SegmentBytes(seg0, seg1)) / (1 << 20), create_us);
  // ctFS's shortcut would be a 2 MiB partition per file; a 1 KiB file must
  // take about one 4 KiB page plus its share of inode table and directory.
  EXPECT_LT(per_file, 16384.0);
  EXPECT_GE(per_file, 1024.0);  // the data itself is somewhere

  // Remount: the content is all there (sampled).
  fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  EXPECT_EQ(UsedBytes(fs), used1);
  for (long i = 0; i < n; i += 997) {
    std::string got;
    std::string p = "/d" + std::to_string(i / per_dir) + "/f" + std::to_string(i % per_dir);
    ASSERT_TRUE(ReadFile(fs, p, &got)) << p;
    ASSERT_EQ(got.size(), 1024u);
    EXPECT_EQ(PatternMismatch(got.data(), got.size(), static_cast<uint64_t>(i), 0), -1) << p;
  }

  // Delete everything: the space comes back. Two things keep some: the
  // inode table keeps its segments (their slots are reused), and a freed
  // small partition that shares its 2 MiB L3 with the header of a
  // partitioned parent (an L3 that is child 0 of an L4 kept by other
  // partitions, e.g. an inode segment) stays backed, zeroed, reusable only
  // by small partitions. Together well under 10% of what was taken.
  t0 = Clock::now();
  for (long dn = 0; dn < ndirs; dn++) {
    std::string dir = "/d" + std::to_string(dn);
    for (long k = 0; k < per_dir && dn * per_dir + k < n; k++)
      ASSERT_EQ(mapfs_unlink(fs, (dir + "/f" + std::to_string(k)).c_str()), 0) << mapfs_last_error();
    ASSERT_EQ(mapfs_rmdir(fs, dir.c_str()), 0) << dir << ": " << mapfs_last_error();
  }
  double delete_us = Us(t0, n);
  const uint64_t used2 = UsedBytes(fs);
  ASSERT_EQ(mapfs_unmount(fs), 0);
  const uint64_t table = SegmentBytes(seg0, InodeSegments(pool.path()));
  std::printf("[ scale    ] after deleting them: %.2f MiB above the empty file system (inode table %.2f MiB, "
              "%.2f MiB other); unlink %.2f us per file\n",
              (static_cast<double>(used2) - static_cast<double>(used0)) / (1 << 20),
              static_cast<double>(table) / (1 << 20),
              (static_cast<double>(used2) - static_cast<double>(used0 + table)) / (1 << 20), delete_us);
  EXPECT_LE(used2, used0 + table + (used1 - used0 - table) / 10) << "used " << used0 << " -> " << used1 << " -> "
                                                                  << used2;
  FS_EXPECT_CLEAN(pool.path());

  // Reuse: the same files again take no more space than the first time,
  // and no new inode segment.
  fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  EXPECT_EQ(UsedBytes(fs), used2);
  for (long dn = 0; dn < ndirs; dn++) {
    std::string dir = "/d" + std::to_string(dn);
    ASSERT_EQ(mapfs_mkdir(fs, dir.c_str(), 0755), 0);
    for (long k = 0; k < per_dir && dn * per_dir + k < n; k++) {
      int fd = mapfs_open(fs, (dir + "/f" + std::to_string(k)).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
      ASSERT_GE(fd, 0) << mapfs_last_error();
      ASSERT_EQ(mapfs_write(fs, fd, kib, sizeof kib), 1024);
      ASSERT_EQ(mapfs_close(fs, fd), 0);
    }
  }
  const uint64_t used3 = UsedBytes(fs);
  std::printf("[ scale    ] the same files again: %.1f MiB of pool (first time %.1f MiB)\n",
              static_cast<double>(used3 - used0) / (1 << 20), static_cast<double>(used1 - used0) / (1 << 20));
  EXPECT_LE(used3, used1 + (1ull << 20)) << "space freed by the deletes was not reused";
  ASSERT_EQ(mapfs_unmount(fs), 0);
  EXPECT_EQ(InodeSegments(pool.path()), seg1) << "the inode table grew although its slots were free";
  FS_EXPECT_CLEAN(pool.path());
}

// c. readdir while the directory changes; telldir / seekdir.
TEST(fs_scale, ReaddirWhileChanging) {
  constexpr int kN = 5000;
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  mapfs_t* fs = MountC(pool.path());
  ASSERT_NE(fs, nullptr);
  ASSERT_EQ(mapfs_mkdir(fs, "/d", 0755), 0);
  auto name = [](const char* p, int i) { return std::string(p) + std::to_string(i) + std::string(i % 37, 'z'); };
  for (int i = 0; i < kN; i++) {
    int fd = mapfs_open(fs, ("/d/" + name("e", i)).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(mapfs_close(fs, fd), 0);
  }

  // Read half.
  mapfs_dir_t* d = mapfs_opendir(fs, "/d");
  ASSERT_NE(d, nullptr);
  std::map<std::string, int> returned;
  std::vector<std::string> order;
  while (order.size() < kN / 2) {
    struct dirent* e = mapfs_readdir(d);
    ASSERT_NE(e, nullptr) << "ended after " << order.size();
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    returned[n]++;
    order.push_back(n);
  }
  // Change the directory: 2000 new names, 500 deleted that were returned,
  // 500 deleted that were not yet.
  std::set<std::string> deleted;
  Rng rng(5);
  for (int i = 0; i < 2000; i++) {
    int fd = mapfs_open(fs, ("/d/" + name("n", i)).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(mapfs_close(fs, fd), 0);
  }
  int del_seen = 0, del_unseen = 0;
  for (int i = 0; del_seen < 500 || del_unseen < 500; i = (i + 1) % kN) {
    std::string n = name("e", i);
    if (deleted.count(n) || rng.Below(4) != 0) continue;
    bool seen = returned.count(n) > 0;
    if (seen ? del_seen >= 500 : del_unseen >= 500) continue;
    ASSERT_EQ(mapfs_unlink(fs, ("/d/" + n).c_str()), 0);
    deleted.insert(n);
    (seen ? del_seen : del_unseen)++;
  }
  // Finish the scan.
  for (;;) {
    errno = 0;
    struct dirent* e = mapfs_readdir(d);
    if (e == nullptr) {
      ASSERT_EQ(errno, 0);
      break;
    }
    std::string n = e->d_name;
    ASSERT_NE(n, ".");
    ASSERT_NE(n, "..");
    returned[n]++;
    order.push_back(n);
  }
  mapfs_closedir(d);
  int missing = 0, twice = 0, news = 0;
  for (int i = 0; i < kN; i++) {
    std::string n = name("e", i);
    if (deleted.count(n)) continue;
    if (returned[n] != 1 && missing++ < 5) ADD_FAILURE() << n << " returned " << returned[n] << " times";
  }
  for (auto& [n, c] : returned) {
    if (c > 1 && twice++ < 5) ADD_FAILURE() << n << " returned " << c << " times";
    if (n[0] == 'n') news++;
  }
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(twice, 0);
  std::printf("[ scale    ] readdir during change: %zu returned, %d of the 2000 names created mid-scan\n", order.size(),
              news);

  // telldir mid-scan, nothing changing: seekdir resumes exactly there.
  d = mapfs_opendir(fs, "/d");
  ASSERT_NE(d, nullptr);
  Listing all = ReadAll(d);
  ASSERT_EQ(all.names.size(), static_cast<size_t>(kN - 1000 + 2000));
  mapfs_rewinddir(d);
  EXPECT_EQ(ReadAll(d).names, all.names) << "rewinddir";
  for (size_t at : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{2999}, all.names.size() - 1}) {
    mapfs_rewinddir(d);
    for (size_t k = 0; k < at + 3; k++) ASSERT_NE(mapfs_readdir(d), nullptr);  // . .. and entries 0..at
    long pos = mapfs_telldir(d);
    ASSERT_GE(pos, 0);
    std::vector<std::string> rest(all.names.begin() + static_cast<long>(at) + 1, all.names.end());
    EXPECT_EQ(ReadAll(d).names, rest) << "after entry " << at;
    mapfs_seekdir(d, pos);
    EXPECT_EQ(mapfs_telldir(d), pos);
    EXPECT_EQ(ReadAll(d).names, rest) << "seekdir to the position after entry " << at;
  }
  // A position stays valid while the directory changes: after it, the
  // entries present throughout come back once each, in the same order.
  mapfs_rewinddir(d);
  for (size_t k = 0; k < 1002; k++) ASSERT_NE(mapfs_readdir(d), nullptr);
  long pos = mapfs_telldir(d);
  for (int i = 0; i < 300; i++) {
    int fd = mapfs_open(fs, ("/d/" + name("m", i)).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(mapfs_close(fs, fd), 0);
  }
  std::set<std::string> gone;
  for (size_t k = 0; k < all.names.size(); k += 13) {
    ASSERT_EQ(mapfs_unlink(fs, ("/d/" + all.names[k]).c_str()), 0);
    gone.insert(all.names[k]);
  }
  mapfs_seekdir(d, pos);
  std::vector<std::string> after = ReadAll(d).names, kept;
  std::vector<std::string> want;
  for (size_t k = 1000; k < all.names.size(); k++)
    if (!gone.count(all.names[k])) want.push_back(all.names[k]);
  for (auto& n : after)
    if (n[0] != 'm') kept.push_back(n);
  EXPECT_EQ(kept, want);
  std::set<std::string> uniq(after.begin(), after.end());
  EXPECT_EQ(uniq.size(), after.size()) << "a name came back twice";
  for (auto& n : after) EXPECT_FALSE(gone.count(n)) << n << " was deleted before the seekdir";
  mapfs_closedir(d);
  ASSERT_EQ(mapfs_unmount(fs), 0);
  FS_EXPECT_CLEAN(pool.path());
}

}  // namespace
}  // namespace mapfs::fstest
