// Mounting a file system: formatting on first use, recovery after a crash,
// and the file system's part of fsck.
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "common/units.h"
#include "fs/fs_internal.h"
#include "map/mapper.h"
#include "medium/persist.h"
#include "space/partitions.h"
#include "vm/vm.h"

namespace mapfs::fs {

using meta::MetaTx;
using meta::format::Inode;

namespace {
// st_dev of every file of the pool, stable per pool (from its UUID) and
// shaped like the kernel's anonymous devices (tmpfs, FUSE): major 0 and a
// 20-bit minor, so makedev(major(d), minor(d)) == d and tools that store
// the pair (tar, rsync, statx's stx_dev_major/minor) see the same device.
// The kernel hands out anonymous minors from the bottom up; taking ours
// from the top half keeps a pool's number away from the kernel's file
// systems in practice (a clash would make a program take a pool file and a
// kernel file with the same inode number for one file).
uint64_t DeviceOf(const uint8_t (&uuid)[16]) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the whole UUID
  for (uint8_t b : uuid) h = (h ^ b) * 0x100000001b3ull;
  uint32_t minor = 0x80000u | static_cast<uint32_t>((h ^ (h >> 32)) & 0x7ffffu);
  return makedev(0, minor);
}

// A block-mapped pool's mapping area (pool header: files_kind, map_off,
// map_len), formatted with the file system. The trees keep a root per
// inode number: room for one file per 16 blocks (at least 4,096 files);
// the hash tables key any inode number.
Status FormatMapArea(medium::Pool* p) {
  const auto& h = p->header();
  map::FormatOptions o;
  o.kind = static_cast<map::Kind>(h.files_kind);
  uint64_t blocks = h.map_len / map::format::kBlockSize;
  o.max_ino = meta::format::kMaxInodes;
  if (o.kind == map::Kind::kExtent || o.kind == map::Kind::kRadix)
    o.max_ino = std::min<uint64_t>(o.max_ino, std::max<uint64_t>(4096, blocks / 16));
  o.max_ino += medium::kMaxMounts;  // each mount slot's staging inode (file/block_file.cc)
  return map::Mapper::Format(p, h.map_off, h.map_len, o);
}
}  // namespace

Result<std::unique_ptr<FileSystem>> FileSystem::Mount(const std::string& pool, const FsOptions& opt) {
  std::unique_ptr<FileSystem> fs(new FileSystem());
  // Recovery of the file system layers runs before other processes are let
  // in, so Mount::Open must not finish the open yet.
  MountOptions mo;
  mo.vm = opt.vm;
  mo.defer_finish = true;
  // A dead mount's slot may be reused once its lock holds are cleared.
  mo.pool.scrub_slot = &meta::InodeLocks::ScrubSlot;
  mo.pool.take_handoff = opt.take_handoff;
  mo.pool.protect = opt.protect;
  auto m = mapfs::Mount::Open(pool, mo);
  if (!m.ok()) return m.status();
  fs->mount_ = std::move(*m);
  medium::Pool& p = fs->mount_->pool();
  vm::Vm& vm = fs->mount_->vm();
  space::Partitions& sp = fs->mount_->space();
  fs->recovered_ = fs->mount_->recovered();
  fs->cib_ = std::make_unique<dir::Cib>(dir::Env{&p, &vm, &sp});
  fs->data_ = std::make_unique<file::FileData>(&p, &vm, &sp);
  fs->shared_ = meta::FsSharedOf(&p);
  fs->names_.Attach(&fs->shared_->names_removed);
  fs->changes_ = std::make_unique<ChangePublisher>(&fs->shared_->changes, &p);
  fs->locks_ = std::make_unique<meta::InodeLocks>(&p);
  fs->dev_ = DeviceOf(p.header().uuid);
  int mode = opt.mode >= 0 ? opt.mode : static_cast<int>(p.header().default_mode);
  if (mode < 0 || mode > 2) mode = 1;
  fs->default_mode_ = static_cast<file::Mode>(mode);
  // Kept in the form a target is compared with: one leading slash, none
  // at the end ("/" itself means no prefix: the pool is everything).
  fs->prefix_ = opt.prefix;
  while (fs->prefix_.size() > 1 && fs->prefix_[1] == '/') fs->prefix_.erase(0, 1);
  while (!fs->prefix_.empty() && fs->prefix_.back() == '/') fs->prefix_.pop_back();

  auto t = meta::InodeTable::Open(&p, &vm, &sp);
  if (!t.ok() && t.status().code() == ENOENT) {
    if (!p.exclusive_open())
      return Status::Error(EBUSY, pool + ": no file system yet and the pool is open elsewhere");
    // An interrupted format leaves at most its own partitions: the
    // superblock, inode segment 0 and the root directory's root and first
    // block (three L0, one L1). More means the superblock pointer was lost,
    // not that the pool is new: refuse, rather than format over the files
    // (and, after a crash, free every one of them as a leak).
    space::SpaceStats ss = sp.Stats();
    uint64_t parts = 0, big = 0;
    for (int l = 0; l <= space::format::kMaxLevel; l++) {
      parts += ss.allocated[l];
      if (l >= 2) big += ss.allocated[l];
    }
    if (parts > 4 || big > 0 || ss.allocated[1] > 1)
      return Status::Error(EUCLEAN, pool + ": pool state damaged: no superblock pointer (fs_super = 0 at pool offset " +
                                        std::to_string(medium::format::kStateOff +
                                                       offsetof(medium::format::PoolState, fs_super)) +
                                        ") but " + std::to_string(parts) +
                                        " partitions are allocated; refusing to format over them");
    // A crash during an earlier format leaves only leaked partitions.
    if (fs->recovered_) MAPFS_RETURN_IF_ERROR(fs->CollectLeaks(nullptr));
    if (p.header().files_kind != medium::format::kFilesContiguous) MAPFS_RETURN_IF_ERROR(FormatMapArea(&p));
    Status st = meta::InodeTable::Format(&p, &vm, &sp, [&](meta::InodeTable* it, MetaTx* tx) -> Status {
      auto root = fs->cib_->Create();
      if (!root.ok()) return root.status();
      Inode in{};
      in.mode = S_IFDIR | 0755;
      in.nlink = 2;
      int64_t now = file::NowNs();
      in.atime_ns = in.mtime_ns = in.ctime_ns = in.btime_ns = now;
      in.generation = 1;
      in.parent = meta::format::kRootIno;
      in.part = *root;
      return tx->StoreBytes(it->VoffOf(meta::format::kRootIno), &in, sizeof in);
    });
    if (!st.ok()) return st;
    t = meta::InodeTable::Open(&p, &vm, &sp);
  }
  if (!t.ok()) return t.status();
  fs->inodes_ = std::move(*t);
  if (p.header().files_kind != medium::format::kFilesContiguous) {
    auto m = map::Mapper::Open(&p, p.header().map_off, p.header().map_len);
    if (!m.ok()) return Status::Error(m.status().code(), pool + ": mapping area: " + m.status().message());
    if (static_cast<uint32_t>((*m)->kind()) != p.header().files_kind)
      return Status::Error(EUCLEAN, pool + ": mapping area holds another design than the pool header names");
    fs->data_->UseBlocks(std::move(*m));
  }
  if (fs->recovered_) MAPFS_RETURN_IF_ERROR(fs->Recover());
  p.FinishOpen();
  return fs;
}

FileSystem::~FileSystem() { (void)Unmount(); }

std::unique_ptr<ChangeFollower> FileSystem::FollowChanges() {
  return std::make_unique<ChangeFollower>(&shared_->changes, mount_->pool().mount_token());
}

Status FileSystem::Unmount() {
  if (!mount_) return Status::Ok();
  // Stores through maps of mirrored files reach the file before it goes
  // (the maps themselves stay the process's: the memfds live on in them).
  SyncMirrors();
  {
    std::lock_guard<std::mutex> g(mirrors_mu_);
    mirrors_.clear();
    n_mirrors_.store(0);
  }
  {
    std::lock_guard<std::mutex> g(block_views_mu_);
    for (auto& [ino, views] : block_views_)
      for (const BlockView& v : views) ::munmap(v.addr, v.len);
    block_views_.clear();
  }
  inodes_.reset();
  Status st = mount_->Close();
  mount_.reset();
  return st;
}

void FileSystem::Abandon() {
  if (!mount_) return;
  inodes_.reset();
  mount_->Abandon();
  mount_.reset();
}

void FileSystem::CollectReferenced(std::vector<uint64_t>* refs) {
  inodes_->ForEachPartition([&](uint64_t v) { refs->push_back(v); });
  inodes_->ForEach([&](uint64_t, Inode* in) {
    if (in->mode == 0 || in->part == 0) return;
    if (S_ISDIR(in->mode))
      (void)cib_->ForEachPartition(in->part, [&](uint64_t v) { refs->push_back(v); });
    else if (S_ISREG(in->mode) || (S_ISLNK(in->mode) && !(in->flags & meta::format::kFlagInlineLink)))
      refs->push_back(meta::format::PartVoff(in->part));
  });
}

// Frees every allocated partition nothing references: what a crash between
// an allocation and the transaction that would have linked it (or between
// an unlinking transaction and the free) leaves behind.
Status FileSystem::CollectLeaks(uint64_t* freed) {
  std::vector<uint64_t> refs;
  if (inodes_) CollectReferenced(&refs);
  std::sort(refs.begin(), refs.end());
  std::vector<space::PartitionInfo> all;
  MAPFS_RETURN_IF_ERROR(mount_->space().Check(&all));
  for (auto& p : all) {
    if (std::binary_search(refs.begin(), refs.end(), p.voff)) continue;
    MAPFS_RETURN_IF_ERROR(mount_->space().Free(p.voff));
    if (freed) (*freed)++;
  }
  return Status::Ok();
}

Status FileSystem::Recover() {
  if (data_->block_mapped()) {
    // Blocks a crashed write or allocation mapped past a file's end, and
    // staging blocks of dead mounts, go back to the mapping area.
    MAPFS_RETURN_IF_ERROR(data_->ClearAllStaging());
    Status st;
    inodes_->ForEach([&](uint64_t ino, Inode* in) {
      if (st.ok() && in->mode != 0 && S_ISREG(in->mode)) st = data_->TrimBlocks(ino, in);
    });
    MAPFS_RETURN_IF_ERROR(st);
  }
  std::vector<uint64_t> orphans;
  uint64_t fixed = 0;
  MAPFS_RETURN_IF_ERROR(inodes_->Reconcile(&orphans, &fixed));
  for (uint64_t ino : orphans) MAPFS_RETURN_IF_ERROR(KillInode(ino));
  return CollectLeaks(nullptr);
}

FsCheckReport FileSystem::Check() {
  FsCheckReport r;
  (void)inodes_->Check(&r.problems);
  if (data_->block_mapped()) {
    Status ms = data_->mapper()->Check();
    if (!ms.ok()) r.problems.push_back("mapping area: " + ms.message());
    // Whom it maps for: live files within their blocks_end, each block once.
    std::vector<file::FileData::BlockFinding> found;
    Status bs = data_->CheckBlocks([&](uint64_t ino) -> const Inode* { return inodes_->Get(ino); },
                                   mount_->pool().exclusive_open(), &found);
    if (!bs.ok()) r.problems.push_back("mapping area: " + bs.message());
    for (auto& f : found) r.problems.push_back(f.what);
  }
  // Partitions: every reference must be an allocated partition of the
  // level the inode says, referenced once; every allocated one referenced.
  std::vector<space::PartitionInfo> all;
  Status st = mount_->space().Check(&all);
  if (!st.ok()) r.problems.push_back("space: " + st.message());
  std::map<uint64_t, int> alloc_level;
  for (auto& p : all) alloc_level[p.voff] = p.level;
  std::map<uint64_t, int> refcount;
  inodes_->ForEachPartition([&](uint64_t v) { refcount[v]++; });
  std::map<uint64_t, uint64_t> links;   // ino -> directory entries naming it
  std::map<uint64_t, uint64_t> subdirs; // dir ino -> child directories
  inodes_->ForEach([&](uint64_t ino, Inode* in) {
    if (in->mode == 0) return;
    r.inodes++;
    std::string where = "inode " + std::to_string(ino);
    if (S_ISDIR(in->mode)) {
      r.directories++;
      (void)cib_->ForEachPartition(in->part, [&](uint64_t v) { refcount[v]++; });
      std::vector<std::pair<std::string, dir::Entry>> entries;
      Status cs = cib_->Check(in->part, &entries);
      if (!cs.ok()) r.problems.push_back(where + " (directory): " + cs.message());
      for (auto& [name, e] : entries) {
        r.entries++;
        links[e.ino]++;
        Inode* child = inodes_->Get(e.ino);
        if (child == nullptr || child->mode == 0) {
          r.problems.push_back(where + ": entry '" + name + "' names free inode " + std::to_string(e.ino));
          continue;
        }
        if (DirentType(child->mode) != e.type)
          r.problems.push_back(where + ": entry '" + name + "' has the wrong type");
        if (S_ISDIR(child->mode)) {
          subdirs[ino]++;
          if (child->parent != ino)
            r.problems.push_back("inode " + std::to_string(e.ino) + ": parent is " + std::to_string(child->parent) +
                                 " but it is listed in " + std::to_string(ino));
        }
      }
    } else if (S_ISREG(in->mode)) {
      r.files++;
      if (in->part != 0) {
        uint64_t v = meta::format::PartVoff(in->part);
        refcount[v]++;
        auto it = alloc_level.find(v);
        if (it != alloc_level.end() && it->second != meta::format::PartLevel(in->part))
          r.problems.push_back(where + ": partition level " + std::to_string(meta::format::PartLevel(in->part)) +
                               " but the space layer says " + std::to_string(it->second));
        if (in->size > data_->max_size())
          r.problems.push_back(where + ": size past the largest file");
      } else if (data_->block_mapped()) {
        std::string bad = data_->CheckBlockSize(ino, in);
        if (!bad.empty()) r.problems.push_back(where + ": " + bad);
      }
    } else if (S_ISLNK(in->mode)) {
      r.symlinks++;
      if (!(in->flags & meta::format::kFlagInlineLink) && in->part != 0)
        refcount[meta::format::PartVoff(in->part)]++;
    }
  });
  for (auto& [v, n] : refcount) {
    if (!alloc_level.count(v))
      r.problems.push_back("partition at virtual offset " + std::to_string(v) + " is referenced but not allocated");
    if (n > 1) r.problems.push_back("partition at virtual offset " + std::to_string(v) + " is referenced " +
                                    std::to_string(n) + " times");
  }
  for (auto& [v, l] : alloc_level)
    if (!refcount.count(v))
      r.problems.push_back("partition at virtual offset " + std::to_string(v) + " (L" + std::to_string(l) +
                           ") is allocated but unreferenced (leak)");
  // Link counts.
  inodes_->ForEach([&](uint64_t ino, Inode* in) {
    if (in->mode == 0) return;
    uint64_t want = S_ISDIR(in->mode) ? 2 + subdirs[ino] : links[ino];
    if (ino != meta::format::kRootIno && links[ino] == 0)
      r.problems.push_back("inode " + std::to_string(ino) + " is not in any directory");
    if (in->nlink != want)
      r.problems.push_back("inode " + std::to_string(ino) + ": link count " + std::to_string(in->nlink) +
                           ", counted " + std::to_string(want));
  });
  return r;
}

FsCheckReport FileSystem::Repair() {
  FsCheckReport before = Check();
  FsCheckReport r;
  std::vector<uint64_t> orphans;
  uint64_t fixed = 0;
  Status st = inodes_->Reconcile(&orphans, &fixed);
  if (!st.ok()) r.problems.push_back(st.message());
  if (fixed) r.repairs.push_back("fixed " + std::to_string(fixed) + " inode bitmap bits");
  // Entries that name a free inode (or none) are removed.
  struct Dangling {
    uint64_t dir;
    std::string name;
    uint64_t ino;
  };
  std::vector<Dangling> dangling;
  inodes_->ForEach([&](uint64_t ino, Inode* in) {
    if (in->mode == 0 || !S_ISDIR(in->mode)) return;
    (void)cib_->List(in->part, 2, [&](uint64_t, std::string_view name, dir::Entry e) {
      Inode* c = inodes_->Get(e.ino);
      if (c == nullptr || c->mode == 0) dangling.push_back({ino, std::string(name), e.ino});
      return true;
    });
  });
  for (auto& d : dangling) {
    MetaTx tx(&mount_->pool(), &mount_->vm());
    std::string what = "inode " + std::to_string(d.dir) + ": entry '" + d.name + "' named free inode " +
                       std::to_string(d.ino);
    NoteNameRemoved();  // the entry may name a directory some walk cached
    Status s = cib_->Remove(Ino(d.dir)->part, d.name, &tx);
    if (s.ok()) s = tx.Commit();
    if (s.ok())
      r.repairs.push_back(what + ", removed");
    else
      r.problems.push_back(what + ", not removed: " + s.message());
  }
  // Link counts from the directories; inodes no directory names are freed.
  std::map<uint64_t, uint64_t> links, subdirs;
  inodes_->ForEach([&](uint64_t ino, Inode* in) {
    if (in->mode == 0 || !S_ISDIR(in->mode)) return;
    (void)cib_->List(in->part, 2, [&](uint64_t, std::string_view, dir::Entry e) {
      links[e.ino]++;
      Inode* c = inodes_->Get(e.ino);
      if (c && S_ISDIR(c->mode)) subdirs[ino]++;
      return true;
    });
  });
  inodes_->ForEach([&](uint64_t ino, Inode* in) {
    if (in->mode == 0) return;
    uint64_t want = S_ISDIR(in->mode) ? 2 + subdirs[ino] : links[ino];
    if (ino != meta::format::kRootIno && links[ino] == 0) {
      orphans.push_back(ino);
      return;
    }
    if (in->nlink != want) {
      MetaTx tx(&mount_->pool(), &mount_->vm());
      if (tx.Store64(inodes_->VoffOf(ino) + offsetof(Inode, nlink), want).ok() && tx.Commit().ok())
        r.repairs.push_back("inode " + std::to_string(ino) + ": link count set to " + std::to_string(want));
    }
  });
  std::sort(orphans.begin(), orphans.end());
  orphans.erase(std::unique(orphans.begin(), orphans.end()), orphans.end());
  for (uint64_t ino : orphans)
    if (KillInode(ino).ok()) r.repairs.push_back("inode " + std::to_string(ino) + ": unreachable, freed");
  if (data_->block_mapped()) {
    // Sizes past blocks_end first (cut to the last mapped block, blocks_end
    // raised over it), so that the blocks below such a size are not taken
    // for blocks past blocks_end and freed below.
    inodes_->ForEach([&](uint64_t ino, Inode* in) {
      if (in->mode == 0 || !S_ISREG(in->mode) || in->part != 0) return;
      std::string what;
      Status ss = data_->RepairBlockSize(ino, in, &what);
      if (!ss.ok())
        r.problems.push_back("inode " + std::to_string(ino) + ": size not repaired: " + ss.message());
      else if (!what.empty())
        r.repairs.push_back(what);
    });
    // Mappings no file owns (or past a file's blocks_end) go back to the
    // area, zeroed, after the orphaned inodes above freed theirs.
    std::vector<file::FileData::BlockFinding> found;
    Status bs = data_->CheckBlocks([&](uint64_t ino) -> const Inode* { return inodes_->Get(ino); },
                                   mount_->pool().exclusive_open(), &found);
    if (!bs.ok()) r.problems.push_back("mapping area: " + bs.message());
    for (auto& f : found) {
      if (!f.freeable) continue;
      Status fs = data_->RepairBlock(f);
      if (fs.ok())
        r.repairs.push_back("inode " + std::to_string(f.ino) + ": freed " + std::to_string(f.blocks) +
                            " orphaned block mappings");
      else
        r.problems.push_back("inode " + std::to_string(f.ino) + ": orphaned block mappings not freed: " + fs.message());
    }
  }
  uint64_t freed = 0;
  st = CollectLeaks(&freed);
  if (!st.ok()) r.problems.push_back("leak collection: " + st.message());
  if (freed) r.repairs.push_back("freed " + std::to_string(freed) + " leaked partitions");
  FsCheckReport after = Check();
  r.problems = after.problems;
  r.inodes = after.inodes;
  r.directories = after.directories;
  r.files = after.files;
  r.symlinks = after.symlinks;
  r.entries = after.entries;
  (void)before;
  return r;
}

}  // namespace mapfs::fs
