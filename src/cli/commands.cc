#include "cli/commands.h"

#include <sys/stat.h>
#include <fcntl.h>
#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cli/parse.h"
#include "common/units.h"
#include "fs/file_system.h"
#include "fs/layout_aging.h"
#include "map/mapper.h"
#include "mapfs/mapfs.h"
#include "medium/persist.h"
#include "medium/protection.h"
#include "mount/mount.h"

namespace mapfs::cli {
namespace {

const char* ModeName(uint32_t m) {
  switch (m) {
    case 0: return "posix";
    case 1: return "sync";
    case 2: return "strict";
  }
  return "?";
}

// May this process give a file it owns to group `gid` (chown's rule): root,
// or a member of it (effective or supplementary).
bool MayGiveGroup(gid_t gid) {
  if (::geteuid() == 0 || ::getegid() == gid) return true;
  int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  n = ::getgroups(n, groups.data());
  for (int i = 0; i < n; i++)
    if (groups[static_cast<size_t>(i)] == gid) return true;
  return false;
}

}  // namespace

int Mkfs(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {"--size", "--page", "--mode", "--top-level", "--perm", "--group", "--files", "--map-percent",
                          "--layout-score"},
                   {"--reserve"});
  if (!p.error.empty() || p.pos.size() != 1 || !p.Has("--size")) {
    std::fprintf(stderr,
                 "usage: mapfs mkfs POOL --size SIZE [--page 4k|2m] [--mode posix|sync|strict] [--top-level N] "
                 "[--reserve] [--perm OCTAL] [--group GROUP] [--files contiguous|hashfs|cuckoo|extent|radix] "
                 "[--map-percent N] [--layout-score S]%s%s\n",
                 p.error.empty() ? "" : "\nmapfs mkfs: ", p.error.c_str());
    return 2;
  }
  medium::CreateOptions co;
  auto size = ParseSize(*p.Get("--size"));
  if (!size.ok()) return Fail("mkfs", size.status());
  co.size = *size;
  if (auto* page = p.Get("--page")) {
    if (*page == "4k" || *page == "4K") co.page_shift = 12;
    else if (*page == "2m" || *page == "2M") co.page_shift = 21;
    else return Fail("mkfs", Status::Error(EINVAL, "--page must be 4k or 2m"));
  }
  if (auto* mode = p.Get("--mode")) {
    if (*mode == "posix") co.mode = medium::format::Mode::kPosix;
    else if (*mode == "sync") co.mode = medium::format::Mode::kSync;
    else if (*mode == "strict") co.mode = medium::format::Mode::kStrict;
    else return Fail("mkfs", Status::Error(EINVAL, "--mode must be posix, sync or strict"));
  }
  if (auto* tl = p.Get("--top-level")) {
    char* end = nullptr;
    long v = std::strtol(tl->c_str(), &end, 10);
    if (end == tl->c_str() || *end != '\0' || v < 4 || v > 11)
      return Fail("mkfs", Status::Error(EINVAL, "--top-level must be 4..11"));
    co.top_level = static_cast<uint32_t>(v);
  }
  co.reserve = p.Has("--reserve");
  if (auto* files = p.Get("--files"); files && *files != "contiguous") {
    auto k = map::ParseKind(*files);
    if (!k.ok()) return Fail("mkfs", Status::Error(EINVAL, "--files must be contiguous, hashfs, cuckoo, extent or radix"));
    co.files_kind = static_cast<uint32_t>(*k);
  }
  if (auto* mp = p.Get("--map-percent")) {
    char* end = nullptr;
    long v = std::strtol(mp->c_str(), &end, 10);
    if (end == mp->c_str() || *end != '\0' || v < 1 || v > 95 || co.files_kind == medium::format::kFilesContiguous)
      return Fail("mkfs", Status::Error(EINVAL, "--map-percent must be 1..95, with --files other than contiguous"));
    co.map_percent = static_cast<uint32_t>(v);
  }
  double layout = 1.0;
  if (auto* ls = p.Get("--layout-score")) {
    char* end = nullptr;
    layout = std::strtod(ls->c_str(), &end);
    bool runs = co.files_kind == static_cast<uint32_t>(map::Kind::kCuckoo) ||
                co.files_kind == static_cast<uint32_t>(map::Kind::kExtent) ||
                co.files_kind == static_cast<uint32_t>(map::Kind::kRadix);
    if (end == ls->c_str() || *end != '\0' || !(layout >= 0.5 && layout <= 1.0) || !runs)
      return Fail("mkfs", Status::Error(EINVAL, "--layout-score must be 0.5..1.0, with --files cuckoo, extent or radix "
                                                "(hashfs places blocks by hash, contiguous files have no runs)"));
  }
  if (auto* perm = p.Get("--perm")) {
    char* end = nullptr;
    long v = std::strtol(perm->c_str(), &end, 8);
    if (end == perm->c_str() || *end != '\0' || v < 0 || v > 0777 || (v & 0600) != 0600)
      return Fail("mkfs", Status::Error(EINVAL, "--perm must be octal rights that include 0600 (e.g. 0660 to share with the group)"));
    co.file_mode = static_cast<uint32_t>(v);
  }
  if (auto* group = p.Get("--group")) {
    struct group* g = ::getgrnam(group->c_str());
    char* end = nullptr;
    long v = std::strtol(group->c_str(), &end, 10);
    if (g != nullptr) co.group = g->gr_gid;
    else if (end != group->c_str() && *end == '\0' && v >= 0) co.group = v;
    else return Fail("mkfs", Status::Error(EINVAL, "--group: no such group: " + *group));
    // Said before anything is created: the kernel would refuse the chown
    // only after the file exists, with a bare EPERM.
    if (!MayGiveGroup(static_cast<gid_t>(co.group)))
      return Fail("mkfs", Status::Error(EPERM, "--group " + *group +
                                                   ": you are not a member of that group (only root may give a pool "
                                                   "to any group)"));
    // Sharing with a group is the only point of --group: without --perm
    // the group gets read and write.
    if (!p.Has("--perm")) co.file_mode = 0660;
  }
  Status st = medium::Pool::Create(p.pos[0], co);
  if (!st.ok()) return Fail("mkfs", st);
  // The first mount formats the file system (superblock, inodes, root).
  auto fs = fs::FileSystem::Mount(p.pos[0]);
  if (!fs.ok()) return Fail("mkfs", p.pos[0], fs.status());
  const medium::Pool& pool = (*fs)->mount().pool();
  bool huge = pool.huge_pages(), device = std::strcmp(pool.fs_kind(), "devdax") == 0;
  bool tmpfs = std::strcmp(pool.fs_kind(), "tmpfs") == 0;
  std::string reason = pool.huge_reason();
  fs::AgingReport aging;
  if (layout < 1.0) {
    // Ages the fresh pool (fs/layout_aging.h); the unmount below leaves the
    // allocator to start at the aged runs at the next mount.
    st = fs::AgeForLayout(**fs, layout, &aging);
    if (!st.ok()) {
      (void)(*fs)->Unmount();
      ::unlink(p.pos[0].c_str());
      return Fail("mkfs", p.pos[0], st);
    }
  }
  st = (*fs)->Unmount();
  if (!st.ok()) return Fail("mkfs", p.pos[0], st);
  std::string bytes = FormatSize(AlignDown(co.size, kChunkSize));
  std::printf("formatted %s: %s, %s pages, mode %s, rights %04o, files %s\n", p.pos[0].c_str(), bytes.c_str(),
              co.page_shift == 12 ? "4 KiB" : "2 MiB", ModeName(static_cast<uint32_t>(co.mode)), co.file_mode & 0666,
              co.files_kind ? map::ToString(static_cast<map::Kind>(co.files_kind)) : "contiguous");
  if (aging.kept > 0)
    std::printf("aged for layout score %.2f: %" PRIu64 " free runs, %" PRIu64 " blocks held by %s\n", layout,
                aging.runs, aging.kept, aging.name.c_str());
  // Which pages the kernel will give (docs/PERFORMANCE.md, "2 MiB pages").
  if (co.page_shift == 21 && huge)
    std::printf("pages: 2 MiB huge pages (%s)\n", reason.c_str());
  else if (co.page_shift == 21)
    std::printf("pages: 2 MiB mappings over 4 KiB kernel pages (%s); for huge pages put the pool on a tmpfs "
                "mounted huge=always (or huge=advise)\n", reason.c_str());
  else
    std::printf("pages: 4 KiB%s\n", huge ? " (this medium offers 2 MiB pages: --page 2m)" : "");
  // What it costs in memory, and when (docs/FORMAT.md, "Memory").
  if (device)
    std::printf("memory: the device's own; no DRAM\n");
  else if (co.reserve)
    std::printf("memory: %s, all taken now (--reserve); freed pages stay with the pool until `mapfs trim`\n",
                bytes.c_str());
  else
    std::printf("memory: up to %s%s, taken 2 MiB at a time as files first use it; freed pages stay with the pool "
                "(reused without the kernel) until `mapfs trim`\n",
                bytes.c_str(), tmpfs ? "" : " of page cache");
  return 0;
}

int Trim(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {});
  if (!p.error.empty() || p.pos.size() != 1) {
    std::fprintf(stderr, "usage: mapfs trim POOL\n");
    return 2;
  }
  auto fs = fs::FileSystem::Mount(p.pos[0]);
  if (!fs.ok()) return Fail("trim", fs.status());
  auto n = (*fs)->mount().vm().pages().Trim();
  Status st = (*fs)->Unmount();
  if (!n.ok()) return Fail("trim", p.pos[0], n.status());
  if (!st.ok()) return Fail("trim", p.pos[0], st);
  struct stat sb {};
  std::string held = ::stat(p.pos[0].c_str(), &sb) == 0 ? FormatSize(static_cast<uint64_t>(sb.st_blocks) * 512) : "?";
  std::printf("trimmed %s: gave %s of free pages back; the pool now holds %s\n", p.pos[0].c_str(),
              FormatSize(*n).c_str(), held.c_str());
  return 0;
}

int Info(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {});
  if (!p.error.empty() || p.pos.size() != 1) {
    std::fprintf(stderr, "usage: mapfs info POOL\n");
    return 2;
  }
  auto fs = fs::FileSystem::Mount(p.pos[0]);
  if (!fs.ok()) return Fail("info", fs.status());
  mapfs::Mount* m = &(*fs)->mount();
  medium::Pool& pool = m->pool();
  const auto& h = pool.header();
  char uuid[40];
  std::snprintf(uuid, sizeof uuid, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", h.uuid[0],
                h.uuid[1], h.uuid[2], h.uuid[3], h.uuid[4], h.uuid[5], h.uuid[6], h.uuid[7], h.uuid[8], h.uuid[9],
                h.uuid[10], h.uuid[11], h.uuid[12], h.uuid[13], h.uuid[14], h.uuid[15]);
  vm::VmStats vs = m->vm().Stats();
  space::SpaceStats ss = m->space().Stats();
  const auto& pc = medium::CurrentPersistConfig();
  std::printf("pool            %s\n", pool.path().c_str());
  std::printf("medium          %s, MAP_SYNC %s, huge pages %s (%s)\n", pool.fs_kind(), pool.map_sync() ? "yes" : "no",
              pool.huge_pages() ? "available" : "not available", pool.huge_reason().c_str());
  std::printf("format          version %u, uuid %s\n", h.version, uuid);
  std::printf("size            %s (%" PRIu64 " bytes)\n", FormatSize(h.pool_size).c_str(), h.pool_size);
  std::printf("page size       %s\n", h.page_shift == 12 ? "4 KiB" : "2 MiB");
  std::printf("default mode    %s\n", ModeName(h.default_mode));
  std::printf("virtual region  %s (top partition L%u)\n", FormatSize(uint64_t{1} << h.vspace_shift).c_str(), h.top_level);
  std::printf("metadata        %s (redo log %u x %s)\n", FormatSize(h.meta_end).c_str(), h.redo_slots,
              FormatSize(h.redo_slot_size).c_str());
  if (h.files_kind == medium::format::kFilesContiguous) {
    std::printf("files           contiguous (ctFS partitions)\n");
  } else if (map::Mapper* mp = (*fs)->data().mapper()) {
    map::Usage u = mp->usage();
    std::printf("files           block-mapped, %s; mapping area %s at offset %" PRIu64 ", %" PRIu64 " of %" PRIu64
                " blocks used, %s of mapping structures\n",
                map::ToString(mp->kind()), FormatSize(h.map_len).c_str(), h.map_off, u.used_blocks + u.node_blocks,
                u.blocks, FormatSize(u.mapping_bytes()).c_str());
    // Aged at mkfs (--layout-score): the aging file's name carries the
    // score (0.50 .. 0.99 in hundredths); looked up by name, not by a walk
    // of the root directory, which may be large.
    std::string aged;
    for (int k = 50; k < 100 && aged.empty(); k++) {
      char name[64];
      std::snprintf(name, sizeof name, "%s0.%02d", fs::kAgingPrefix, k);
      struct stat st;
      if ((*fs)->Stat(std::string("/") + name, &st).ok()) aged = name;
    }
    if (!aged.empty())
      std::printf("layout          aged at mkfs for layout score %s (free space in runs between blocks of /%s)\n",
                  aged.substr(std::strlen(fs::kAgingPrefix)).c_str(), aged.c_str());
    else
      std::printf("layout          not aged\n");
  }
  std::printf("space used      %s of %s (%.2f%%), %" PRIu64 " free chunks\n",
              FormatSize(vs.used_pages * kPageSize).c_str(), FormatSize(vs.total_pages * kPageSize).c_str(),
              100.0 * static_cast<double>(vs.used_pages) / static_cast<double>(vs.total_pages), vs.free_chunks);
  std::printf("space free      %s\n", FormatSize((vs.total_pages - vs.used_pages) * kPageSize).c_str());
  std::printf("persistence     copy %s, flush %s, domain %s\n", medium::ToString(pc.copy), medium::ToString(pc.flush),
              medium::ToString(pc.domain));
  // What a program under the shim or on the C API gets here (the CLI
  // itself runs no application code and uses no key).
  std::printf("protection keys %s for the shim and the C API\n",
              medium::protection::Describe(medium::protection::Probe()));
  std::printf("state           %s, opened %" PRIu64 " times, %" PRIu64 " recoveries\n",
              m->recovered() ? "recovered at this open" : "clean", pool.state()->open_count, pool.state()->recoveries);
  std::printf("partitions      availability level %s\n",
              ss.availability_level < 0 ? "none (full)" : ("L" + std::to_string(ss.availability_level)).c_str());
  std::printf("  %-5s %-10s %12s %12s\n", "level", "size", "allocated", "partitioned");
  for (int l = 0; l <= ss.top_level; l++)
    std::printf("  L%-4d %-10s %12" PRIu64 " %12" PRIu64 "\n", l, FormatSize(space::format::LevelSize(l)).c_str(),
                ss.allocated[l], ss.partitioned[l]);
  // Cheap figures only (no walk of the tree): inode slots from statvfs.
  struct statvfs sv;
  if ((*fs)->Statfs(&sv).ok())
    std::printf("file system     %" PRIu64 " inode slots allocated, %" PRIu64 " more possible\n",
                static_cast<uint64_t>(sv.f_files - sv.f_ffree), static_cast<uint64_t>(sv.f_ffree));
  Status st = (*fs)->Unmount();
  if (!st.ok()) return Fail("info", st);
  return 0;
}

int Fsck(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {}, {"--repair"});
  if (!p.error.empty() || p.pos.size() != 1) {
    std::fprintf(stderr, "usage: mapfs fsck POOL [--repair]\n");
    return 2;
  }
  bool repair = p.Has("--repair");
  // Mounting the file system runs the recovery of every layer first.
  auto mounted = fs::FileSystem::Mount(p.pos[0]);
  if (!mounted.ok()) return Fail("fsck", mounted.status());
  fs::FileSystem& fs = **mounted;
  mapfs::Mount& m = fs.mount();
  if (fs.recovered()) std::printf("%s was not closed cleanly: recovery ran at mount\n", p.pos[0].c_str());
  uint64_t problems = 0, remaining = 0;
  // Only a strict check (no leaked pages) when we are the only user.
  bool alone = m.pool().exclusive_open();
  Status vs = m.vm().Check(alone);
  if (!vs.ok()) {
    problems++;
    std::printf("page table: %s\n", vs.message().c_str());
    if (repair) {
      vm::RebuildReport r = m.vm().Rebuild();
      std::printf("  repaired: %" PRIu64 " leaked pages reclaimed, %" PRIu64 " pages re-marked, %" PRIu64
                  " bad entries cleared (%" PRIu64 " pages mapped twice remain)\n",
                  r.leaked_reclaimed, r.unmarked_fixed, r.bad_entries, r.double_refs);
    } else {
      std::printf("  --repair would rebuild the page bitmap from the page table\n");
    }
  }
  Status ss = m.space().Check();
  if (!ss.ok()) {
    problems++;
    std::printf("partitions: %s\n", ss.message().c_str());
    if (!repair) std::printf("  --repair would reconcile the partition headers with the page table\n");
  }
  if (repair && problems) {
    Status r = m.space().Reconcile();
    if (!r.ok()) std::printf("  partition repair failed: %s\n", r.message().c_str());
    Status v2 = m.vm().Check(alone), s2 = m.space().Check();
    if (!v2.ok()) std::printf("  page table still wrong: %s\n", v2.message().c_str());
    if (!s2.ok()) std::printf("  partitions still wrong: %s\n", s2.message().c_str());
    remaining += !v2.ok() + !s2.ok();
  }
  // The file system layers: inodes, directories, link counts, references.
  fs::FsCheckReport r = fs.Check();
  for (auto& pr : r.problems) std::printf("file system: %s\n", pr.c_str());
  problems += r.problems.size();
  if (!r.problems.empty()) {
    if (repair) {
      r = fs.Repair();
      for (auto& rp : r.repairs) std::printf("  repaired: %s\n", rp.c_str());
      for (auto& pr : r.problems) std::printf("  still wrong: %s\n", pr.c_str());
      remaining += r.problems.size();
    } else {
      std::printf("  --repair would fix inode bitmap bits and link counts, free unreachable inodes and "
                  "collect leaked partitions (and orphaned block mappings; block-mapped sizes past blocks_end are "
                  "cut to the last mapped block)\n");
    }
  }
  std::printf("file system: %" PRIu64 " inodes (%" PRIu64 " directories, %" PRIu64 " files, %" PRIu64
              " symlinks), %" PRIu64 " directory entries\n",
              r.inodes, r.directories, r.files, r.symlinks, r.entries);
  Status st = fs.Unmount();
  if (!st.ok()) return Fail("fsck", st);
  if (problems == 0)
    std::printf("%s: clean\n", p.pos[0].c_str());
  else if (!repair)
    std::printf("%s: %" PRIu64 " problems\n", p.pos[0].c_str(), problems);
  else if (remaining == 0)
    std::printf("%s: %" PRIu64 " problems, all repaired\n", p.pos[0].c_str(), problems);
  else
    std::printf("%s: %" PRIu64 " problems, %" PRIu64 " remain after repair\n", p.pos[0].c_str(), problems, remaining);
  return (repair ? remaining : problems) ? 1 : 0;
}

int Version(const std::vector<std::string>&) {
  std::printf("mapfs %s, on-media format %u\n", mapfs_version(), mapfs_format_version());
  return 0;
}

}  // namespace mapfs::cli
