// CLI verbs that look at a pool's file system: ls, stat, df.
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/fs_util.h"
#include "cli/parse.h"
#include "common/units.h"

namespace mapfs::cli {
namespace {

// One line of `ls` output.
struct LsItem {
  std::string name;  // as printed
  struct stat st {};
  std::string target;  // of a symlink, with -l
};

void PrintItems(std::vector<LsItem>& items, bool long_format, bool total) {
  std::sort(items.begin(), items.end(), [](const LsItem& a, const LsItem& b) { return a.name < b.name; });
  if (!long_format) {
    for (auto& i : items) std::printf("%s\n", i.name.c_str());
    return;
  }
  int wl = 1, wu = 1, wg = 1, ws = 1;
  uint64_t blocks_1k = 0;
  auto width = [](uint64_t v) { return static_cast<int>(std::to_string(v).size()); };
  for (auto& i : items) {
    wl = std::max(wl, width(i.st.st_nlink));
    wu = std::max(wu, width(i.st.st_uid));
    wg = std::max(wg, width(i.st.st_gid));
    ws = std::max(ws, width(static_cast<uint64_t>(i.st.st_size)));
    blocks_1k += (static_cast<uint64_t>(i.st.st_blocks) + 1) / 2;
  }
  if (total) std::printf("total %" PRIu64 "\n", blocks_1k);
  for (auto& i : items) {
    std::printf("%s %*" PRIu64 " %*u %*u %*" PRIu64 " %s %s", ModeString(i.st.st_mode).c_str(), wl,
                static_cast<uint64_t>(i.st.st_nlink), wu, static_cast<unsigned>(i.st.st_uid), wg,
                static_cast<unsigned>(i.st.st_gid), ws, static_cast<uint64_t>(i.st.st_size),
                FormatTime(i.st.st_mtim, false).c_str(), i.name.c_str());
    if (S_ISLNK(i.st.st_mode)) std::printf(" -> %s", i.target.c_str());
    std::printf("\n");
  }
}

// Fills item.st (lstat) and, with -l, a symlink's target.
Status StatItem(fs::FileSystem& fs, const std::string& path, bool long_format, LsItem* item) {
  MAPFS_RETURN_IF_ERROR(fs.Stat(path, &item->st, false));
  if (long_format && S_ISLNK(item->st.st_mode)) {
    auto t = fs.Readlink(path);
    if (!t.ok()) return t.status();
    item->target = *t;
  }
  return Status::Ok();
}

// Lists the directory at `path`; returns the exit code.
int ListDir(FsSession& s, const std::string& path, bool long_format, bool all) {
  fs::FileSystem& fs = s.fs();
  auto d = fs.Open(path, O_RDONLY | O_DIRECTORY, 0);
  if (!d.ok()) return s.Error(path, d.status());
  PoolFile dir(&fs, std::move(*d));
  std::vector<std::string> names;
  Status st = fs.ReadDir(*dir, 0, [&](const fs::DirEntryOut& e) {
    if (all || e.name[0] != '.') names.push_back(e.name);
    return true;
  });
  if (!st.ok()) return s.Error(path, st);
  int rc = 0;
  std::vector<LsItem> items;
  for (auto& n : names) {
    LsItem item;
    item.name = n;
    if (long_format) {
      std::string p = n == "." ? path : n == ".." ? JoinPath(path, "..") : JoinPath(path, n);
      Status is = StatItem(fs, p, true, &item);
      if (!is.ok()) {
        rc = s.Error(p, is);  // removed meanwhile
        continue;
      }
    }
    items.push_back(std::move(item));
  }
  PrintItems(items, long_format, true);
  return rc;
}

const char* UserName(uid_t uid) {
  struct passwd* pw = ::getpwuid(uid);
  return pw ? pw->pw_name : "UNKNOWN";
}

const char* GroupName(gid_t gid) {
  struct group* gr = ::getgrgid(gid);
  return gr ? gr->gr_name : "UNKNOWN";
}

}  // namespace

int Ls(const std::vector<std::string>& args) {
  const char* usage = "ls [-l] [-a] POOL [PATH...]";
  Parsed p = Parse(args, {}, {}, "la");
  if (!p.error.empty() || p.pos.empty()) return UsageError("ls", usage, p.error);
  bool long_format = p.Has("-l"), all = p.Has("-a");
  auto s = FsSession::Mount("ls", p.pos[0]);
  if (!s) return 1;
  fs::FileSystem& fs = s->fs();
  std::vector<std::string> operands(p.pos.begin() + 1, p.pos.end());
  if (operands.empty()) operands.push_back("/");
  int rc = 0;
  // As ls: the files named first, then each directory's listing.
  std::vector<LsItem> files;
  std::vector<std::string> dirs;
  for (auto& o : operands) {
    std::string path = PoolPath(o);
    LsItem item;
    item.name = o;
    Status st = StatItem(fs, path, long_format, &item);
    if (!st.ok()) {
      rc = s->Error(path, st);
      continue;
    }
    // A symlink to a directory is listed as the directory, except with -l.
    if (S_ISDIR(item.st.st_mode) || (S_ISLNK(item.st.st_mode) && !long_format && IsPoolDir(fs, path)))
      dirs.push_back(path);
    else
      files.push_back(std::move(item));
  }
  PrintItems(files, long_format, false);
  std::sort(dirs.begin(), dirs.end());
  bool headers = operands.size() > 1;
  for (size_t i = 0; i < dirs.size(); i++) {
    if (i > 0 || !files.empty()) std::printf("\n");
    if (headers) std::printf("%s:\n", dirs[i].c_str());
    rc |= ListDir(*s, dirs[i], long_format, all);
  }
  std::fflush(stdout);
  return s->Finish(rc);
}

int Stat(const std::vector<std::string>& args) {
  const char* usage = "stat [-L] POOL PATH...";
  Parsed p = Parse(args, {}, {}, "L");
  if (!p.error.empty() || p.pos.size() < 2) return UsageError("stat", usage, p.error);
  bool follow = p.Has("-L");
  auto s = FsSession::Mount("stat", p.pos[0]);
  if (!s) return 1;
  fs::FileSystem& fs = s->fs();
  int rc = 0;
  for (size_t i = 1; i < p.pos.size(); i++) {
    std::string path = PoolPath(p.pos[i]);
    struct stat st;
    Status r = fs.Stat(path, &st, follow);
    if (!r.ok()) {
      rc = s->Error(path, r);
      continue;
    }
    std::string name = path;
    if (S_ISLNK(st.st_mode)) {
      auto t = fs.Readlink(path);
      if (t.ok()) name += " -> " + *t;
    }
    std::printf("  File: %s\n", name.c_str());
    std::printf("  Size: %-15" PRIu64 " Blocks: %-10" PRIu64 " IO Block: %-6" PRIu64 " %s\n",
                static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_blocks),
                static_cast<uint64_t>(st.st_blksize), TypeName(st));
    std::printf("Device: %" PRIx64 "h/%" PRIu64 "d\tInode: %-11" PRIu64 " Links: %" PRIu64,
                static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_dev),
                static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_nlink));
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
      std::printf("     Device type: %u,%u", major(st.st_rdev), minor(st.st_rdev));
    std::printf("\n");
    std::printf("Access: (%04o/%s)  Uid: (%5u/%8s)   Gid: (%5u/%8s)\n", static_cast<unsigned>(st.st_mode & 07777),
                ModeString(st.st_mode).c_str(), static_cast<unsigned>(st.st_uid), UserName(st.st_uid),
                static_cast<unsigned>(st.st_gid), GroupName(st.st_gid));
    std::printf("Access: %s\n", FormatTime(st.st_atim, true).c_str());
    std::printf("Modify: %s\n", FormatTime(st.st_mtim, true).c_str());
    std::printf("Change: %s\n", FormatTime(st.st_ctim, true).c_str());
    std::printf(" Birth: -\n");
  }
  std::fflush(stdout);
  return s->Finish(rc);
}

int Df(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {});
  if (!p.error.empty() || p.pos.size() != 1) return UsageError("df", "df POOL", p.error);
  auto s = FsSession::Mount("df", p.pos[0]);
  if (!s) return 1;
  struct statvfs v;
  Status st = s->fs().Statfs(&v);
  if (!st.ok()) return s->Finish(s->Error(p.pos[0], st));
  uint64_t unit = v.f_frsize;
  uint64_t size = v.f_blocks * unit, avail = v.f_bavail * unit, used = (v.f_blocks - v.f_bfree) * unit;
  // As df(1): use% rounded up, of what a user could have.
  uint64_t denom = used + avail;
  uint64_t pct = denom == 0 ? 0 : (used * 100 + denom - 1) / denom;
  uint64_t iused = v.f_files - v.f_ffree;
  std::printf("pool      %s (%s file)\n", p.pos[0].c_str(), FormatSize(s->fs().mount().pool().header().pool_size).c_str());
  std::printf("size      %s (%" PRIu64 " bytes)\n", FormatSize(size).c_str(), size);
  std::printf("used      %s (%" PRIu64 " bytes)\n", FormatSize(used).c_str(), used);
  std::printf("free      %s (%" PRIu64 " bytes)\n", FormatSize(avail).c_str(), avail);
  std::printf("use%%      %" PRIu64 "%%\n", pct);
  std::printf("inodes    %" PRIu64 " of %" PRIu64 " allocated, %" PRIu64 " free\n", iused,
              static_cast<uint64_t>(v.f_files), static_cast<uint64_t>(v.f_ffree));
  std::fflush(stdout);
  return s->Finish(0);
}

}  // namespace mapfs::cli
