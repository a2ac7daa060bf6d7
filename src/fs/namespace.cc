// Path resolution and the namespace operations of FileSystem.
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <unistd.h>

#include <cstring>

#include "common/units.h"
#include "fs/fs_internal.h"
#include "medium/persist.h"
#include "space/partitions.h"
#include "vm/vm.h"

namespace mapfs::fs {

using meta::InodeLock;
using meta::LockSet;
using meta::MetaTx;
using meta::format::Inode;

namespace {

uint8_t DtOf(uint64_t mode) {
  switch (mode & S_IFMT) {
    case S_IFDIR: return DT_DIR;
    case S_IFLNK: return DT_LNK;
    case S_IFREG: return DT_REG;
    case S_IFIFO: return DT_FIFO;
    case S_IFSOCK: return DT_SOCK;
    case S_IFCHR: return DT_CHR;
    case S_IFBLK: return DT_BLK;
  }
  return DT_UNKNOWN;
}
}  // namespace

uint8_t DirentType(uint64_t mode) { return DtOf(mode); }

namespace {
// The thread's LinkChain: walks start `start` links in; `exit` holds where
// the last walk that left the pool continues (valid while `left`).
struct ChainState {
  int active = 0;  // LinkChains alive (a wrapper calling another nests them)
  bool left = false;
  int links = 0;
  std::string exit;
};
thread_local ChainState chain;
// The `start` of the thread's chain, which every walk reads: apart from
// `chain` (whose string makes each access a TLS wrapper call and a
// __tls_get_addr), initial-exec, one %fs-relative load. 4 bytes of the
// static TLS surplus glibc keeps for dlopen'ed libraries (see cred.h).
thread_local int chain_start __attribute__((tls_model("initial-exec"))) = 0;

// `t` (one leading slash) is `prefix` or below it.
bool UnderPrefix(std::string_view t, std::string_view prefix) {
  return t.size() >= prefix.size() && t.compare(0, prefix.size(), prefix) == 0 &&
         (t.size() == prefix.size() || t[prefix.size()] == '/');
}
}  // namespace

// Only the outermost chain of a thread starts and ends the count.
LinkChain::LinkChain(int links) {
  if (chain.active++ == 0) Restart(links);
}
LinkChain::~LinkChain() {
  if (--chain.active == 0) Restart(0);
}
void LinkChain::Restart(int links) {
  chain_start = links;
  chain.left = false;
  chain.exit.clear();
}
bool LinkChain::TakeExit(std::string* path, int* links) {
  if (!chain.left) return false;
  chain.left = false;
  *path = std::move(chain.exit);
  *links = chain.links;
  return true;
}

Status FileSystem::Leave(std::string path, int links, std::string_view link) {
  chain.left = true;
  chain.links = links;
  chain.exit = std::move(path);
  return Status::Error(kLeavesPool, "path leaves the pool at '" + std::string(link) + "' for " + chain.exit);
}

uint64_t FileSystem::DirRoot(uint64_t ino) { return Ino(ino)->part; }

Result<dir::Entry> FileSystem::LookupIn(uint64_t d, std::string_view name, dir::EntryLoc* loc, bool* pinned) {
  InodeLock l(locks_.get(), d, false);
  Inode* in = Ino(d);
  if (in == nullptr || in->mode == 0 || in->nlink == 0) return Status::Error(ENOENT, "directory was removed");
  if (!S_ISDIR(in->mode)) return Status::Error(ENOTDIR, "not a directory");
  auto e = cib_->Lookup(in->part, name, loc);
  if (!e.ok()) return e;
  // Under the directory's lock an entry never names a free inode (the
  // transaction that frees one removes its last entry): only damage does,
  // and every caller would retry forever waiting for it to go away.
  Inode* c = Ino(e->ino);
  if (c == nullptr || medium::Load64(&c->mode) == 0)
    return Status::Error(EUCLEAN, "entry '" + std::string(name) + "' of directory inode " + std::to_string(d) +
                                      " names free inode " + std::to_string(e->ino) + " (run fsck --repair)");
  // The pin OpenExisting takes after rechecking the name under this same
  // lock: an unlink needs the directory's write lock, so it either ran
  // before (no entry) or runs after and sees the count.
  if (pinned != nullptr && e->type != DT_LNK) {
    shared_->open_count[e->ino].fetch_add(1);
    *pinned = true;
  }
  return e;
}

bool FileSystem::StillNames(uint64_t parent_root, const Walk& w, std::string_view name, uint64_t ino) {
  if (cib_->StillNames(parent_root, w.loc, name, ino)) return true;
  auto e = cib_->Lookup(parent_root, name);
  return ino == 0 ? !e.ok() && e.status().code() == ENOENT : e.ok() && e->ino == ino;
}

Result<FileSystem::Walk> FileSystem::Resolve(const Cred& cr, uint64_t at, std::string_view path, bool follow_last,
                                              int depth, bool keep_last, bool pin_last) {
  Walk w;
  Status st = ResolveTo(&w, cr, at, path, follow_last, depth, keep_last, pin_last);
  if (!st.ok()) return st;
  return Result<Walk>(std::move(w));
}

Status FileSystem::ResolveTo(Walk* out, const Cred& cr, uint64_t at, std::string_view path, bool follow_last,
                             int depth, bool keep_last, bool pin_last) {
  if (path.empty()) return Status::Error(ENOENT, "empty path");
  // Only the caller's path is limited: a symlink's target spliced into the
  // rest of the path may grow past PATH_MAX (a link to itself plus more
  // names), and Linux then says ELOOP after kMaxSymlinks, not ENAMETOOLONG.
  if (depth == 0) {
    // Directory blocks are read through this process's mappings of the
    // region: drop those other processes made stale first.
    mount_->vm().Sync();
    if (path.size() >= PATH_MAX) return Status::Error(ENAMETOOLONG, "path too long");
    depth = chain_start;  // links followed before the path came into the pool
  }
  uint64_t cur = (path[0] == '/' || at == 0) ? meta::format::kRootIno : at;
  // Components are taken one at a time (no list is built): `at` is where
  // the next one starts, after any slashes.
  size_t at_comp = path.find_first_not_of('/');
  bool trailing = path.back() == '/';
  Walk& w = *out;
  w.trailing_slash = trailing;
  if (at_comp == std::string_view::npos) {
    w.parent = cur;
    w.name.assign(1, '.');  // assign(1, c): GCC 12 -Wrestrict misfires on operator=(".")
    w.ino = cur;
    w.type = DT_DIR;
    return Status::Ok();
  }
  while (at_comp != std::string_view::npos) {
    size_t end = std::min(path.find('/', at_comp), path.size());
    std::string_view c = path.substr(at_comp, end - at_comp);
    at_comp = path.find_first_not_of('/', end);
    bool last = at_comp == std::string_view::npos;
    // Search permission on the directory before anything in it is looked
    // at, "." and ".." too, and before a name's length is judged (Linux's
    // may_lookup comes first).
    Inode* d = Ino(cur);
    if (d == nullptr || !S_ISDIR(d->mode)) return Status::Error(ENOTDIR, "not a directory");
    MAPFS_RETURN_IF_ERROR(InodePermission(cr, d, kMayExec));
    if (c.size() > dir::kMaxName) {
      // A name-acting call looks its last component up after other checks
      // (Linux's order), so it gets the verdict in the Walk.
      if (!(last && keep_last)) return Status::Error(ENAMETOOLONG, "name too long");
      w.parent = cur;
      w.name.assign(c.data(), c.size());
      w.too_long = true;
      return Status::Ok();
    }
    uint64_t child;
    uint8_t type;
    if (c == ".") {
      child = cur;
      type = DT_DIR;
    } else if (c == "..") {
      // The root's ".." is the directory holding the prefix, outside.
      if (cur == meta::format::kRootIno && !prefix_.empty()) {
        std::string up = prefix_.substr(0, prefix_.rfind('/'));
        up += path.substr(end);
        if (up.empty()) up = "/";
        return Leave(std::move(up), depth, "..");
      }
      child = medium::Load64(&d->parent);
      type = DT_DIR;
    } else {
      // A pin is taken only where the walk surely ends on this entry with
      // success: the last component, no trailing slash to judge, not a
      // symlink (LookupIn's check) that may be followed.
      bool pin = pin_last && last && !trailing;
      if (last && w.defer_last && !trailing) {
        w.parent = cur;
        w.name.assign(c.data(), c.size());
        w.ino = 0;
        w.deferred = true;
        return Status::Ok();
      }
      // A directory passed through may come from the name cache; the
      // epoch is read before the lookup whose answer is stored.
      uint64_t epoch = last ? 0 : names_.Epoch();
      if (!last && names_.Find(cur, c, epoch, &child)) {
        type = DT_DIR;
      } else {
        auto e = LookupIn(cur, c, last ? &w.loc : nullptr, pin ? &w.pinned : nullptr);
        if (!e.ok()) {
          if (e.status().code() == ENOENT && last) {
            w.parent = cur;
            if (w.name_use != Walk::NameUse::kNever) w.name.assign(c.data(), c.size());
            w.ino = 0;
            return Status::Ok();
          }
          return e.status();
        }
        child = e->ino;
        type = e->type;
        if (!last && type == DT_DIR) names_.Put(cur, c, epoch, child);
      }
    }
    if (type == DT_LNK && (!last || follow_last || (trailing && !keep_last))) {
      if (depth >= kMaxSymlinks) return Status::Error(ELOOP, "too many levels of symbolic links");
      auto target = ReadlinkIno(child);
      if (!target.ok()) return target.status();
      if (target->empty()) return Status::Error(ENOENT, "empty symlink");
      // The target, then the rest of the path after this component (its
      // slashes, and a trailing one, come along).
      std::string rest = *target;
      rest += path.substr(end);
      if (rest[0] == '/' && !prefix_.empty()) {
        // An absolute target is a path of the caller's namespace: below
        // the prefix it is the pool's, else the walk goes on outside.
        std::string_view t = rest;
        while (t.size() > 1 && t[1] == '/') t.remove_prefix(1);
        if (!UnderPrefix(t, prefix_)) return Leave(std::move(rest), depth + 1, c);
        rest = t.size() == prefix_.size() ? std::string("/") : std::string(t.substr(prefix_.size()));
      }
      const Walk::NameUse use = w.name_use;
      const bool defer = w.defer_last;
      w = Walk{};  // the walk of the target starts afresh (nothing was pinned: a symlink)
      w.name_use = use;
      w.defer_last = defer;
      return ResolveTo(out, cr, rest[0] == '/' ? meta::format::kRootIno : cur, rest, follow_last, depth + 1,
                       keep_last, pin_last);
    }
    if (last) {
      w.parent = cur;
      if (w.name_use == Walk::NameUse::kAlways || (w.name_use == Walk::NameUse::kUnlessPinned && !w.pinned))
        w.name.assign(c.data(), c.size());
      w.ino = child;
      w.type = type;
      if (trailing && type != DT_DIR && !keep_last) return Status::Error(ENOTDIR, "not a directory");
      return Status::Ok();
    }
    if (type != DT_DIR) return Status::Error(ENOTDIR, "not a directory");
    cur = child;
  }
  return Status::Error(ENOENT, "unreachable");
}

Result<uint64_t> FileSystem::Lookup(std::string_view path, bool follow, uint64_t at) {
  auto w = Resolve(CurrentCred(), at, path, follow);
  if (!w.ok()) return w.status();
  if (w->ino == 0) return Status::Error(ENOENT, "no such file or directory");
  return w->ino;
}

Result<std::string> FileSystem::ReadlinkIno(uint64_t ino) {
  if (ino == 0 || !inodes_->Valid(ino)) return Status::Error(EINVAL, "not a symbolic link");
  InodeLock l(locks_.get(), ino, false);
  Inode* in = Ino(ino);
  if (in == nullptr || !S_ISLNK(in->mode)) return Status::Error(EINVAL, "not a symbolic link");
  uint64_t n = in->size;
  if (in->flags & meta::format::kFlagInlineLink) {
    if (n > meta::format::kInlineLinkMax) return Status::Error(EUCLEAN, "symlink length damaged");
    return std::string(in->inline_data, n);
  }
  if (n >= kPageSize || in->part == 0) return Status::Error(EUCLEAN, "symlink target damaged");
  uint64_t v = meta::format::PartVoff(in->part);
  // The target's page must exist: a damaged word must fail, not fault.
  vm::Vm& vm = mount_->vm();
  if (v >= vm.size() || kPageSize > vm.size() - v || !vm.Backed(v, kPageSize))
    return Status::Error(EUCLEAN, "symlink target damaged");
  MAPFS_RETURN_IF_ERROR(vm.Map(v, kPageSize));
  return std::string(vm.at(v), n);
}

Result<std::string> FileSystem::Readlink(std::string_view path, uint64_t at) {
  auto w = Resolve(CurrentCred(), at, path, false);
  if (!w.ok()) return w.status();
  if (w->ino == 0) return Status::Error(ENOENT, "no such file or directory");
  return ReadlinkIno(w->ino);
}

Status FileSystem::Access(std::string_view path, int mode, int flags, uint64_t at) {
  if (mode & ~(R_OK | W_OK | X_OK)) return Status::Error(EINVAL, "bad access mode");
  if (flags & ~(AT_EACCESS | AT_SYMLINK_NOFOLLOW)) return Status::Error(EINVAL, "bad access flags");
  const Cred& eff = CurrentCred();
  Cred real;
  if (!(flags & AT_EACCESS) && (eff.ruid != eff.uid || eff.rgid != eff.gid)) real = eff.Real();
  const Cred& c = (flags & AT_EACCESS) || (eff.ruid == eff.uid && eff.rgid == eff.gid) ? eff : real;
  for (;;) {
    auto w = Resolve(c, at, path, !(flags & AT_SYMLINK_NOFOLLOW));
    if (!w.ok()) return w.status();
    if (w->ino == 0) return Status::Error(ENOENT, "no such file or directory");
    if (mode == F_OK) return Status::Ok();
    InodeLock l(locks_.get(), w->ino, false);
    Inode* in = Ino(w->ino);
    if (in == nullptr || in->mode == 0) continue;  // removed meanwhile
    return InodePermission(c, in, mode);
  }
}

// The FUSE mount's access (without default_permissions): the kernel walked
// the path; the request's ids are the effective ones (as AT_EACCESS).
Status FileSystem::AccessIno(uint64_t ino, int mode) {
  if (mode & ~(R_OK | W_OK | X_OK)) return Status::Error(EINVAL, "bad access mode");
  if (ino == 0 || !inodes_->Valid(ino)) return Status::Error(ENOENT, "no such file or directory");
  InodeLock l(locks_.get(), ino, false);
  Inode* in = Ino(ino);
  if (in == nullptr || in->mode == 0) return Status::Error(ENOENT, "file was removed");
  return mode == F_OK ? Status::Ok() : InodePermission(CurrentCred(), in, mode);
}

// Linux with fs.protected_hardlinks = 1 (every major distribution's
// default): who does not own a file may link it only if it is a regular
// file without set-ID bits that he may read and write.
Status FileSystem::MayLink(const Cred& c, const Inode* in) {
  if (c.root() || c.uid == UidOf(in)) return Status::Ok();
  uint64_t m = medium::Load64(&in->mode);
  bool safe = S_ISREG(m) && !(m & S_ISUID) && (m & (S_ISGID | S_IXGRP)) != (S_ISGID | S_IXGRP) &&
              InodePermission(c, in, kMayRead | kMayWrite).ok();
  return safe ? Status::Ok() : Status::Error(EPERM, "hard link to a file of another user (protected hardlinks)");
}

Status FileSystem::MayCreate(const Cred& c, uint64_t dir) { return InodePermission(c, Ino(dir), kMayWrite | kMayExec); }

Status FileSystem::MayDelete(const Cred& c, uint64_t dir, uint64_t victim) {
  Inode* d = Ino(dir);
  MAPFS_RETURN_IF_ERROR(InodePermission(c, d, kMayWrite | kMayExec));
  return StickyOk(c, medium::Load64(&d->mode), UidOf(d), UidOf(Ino(victim)));
}

Status FileSystem::FillInode(uint64_t ino, mode_t mode, uint64_t parent, const Owner* owner, uint64_t rdev,
                             MetaTx* tx) {
  Inode* old = Ino(ino);
  if (old == nullptr) return Status::Error(EUCLEAN, "reserved inode outside the table");
  Inode in{};
  // The caller's effective ids as the permission checks see them (cached:
  // fs/cred.h), not two system calls per create.
  const Cred& cr = CurrentCred();
  uid_t uid = owner ? owner->uid : cr.uid;
  gid_t gid = owner ? owner->gid : cr.gid;
  // A set-group-ID directory gives its group to what is made in it, and
  // its set-group-ID bit to new directories (Linux's inode_init_owner; the
  // kernel, not the core, strips the bit from files of other groups).
  Inode* p = Ino(parent);
  if (p != nullptr && (p->mode & S_ISGID) && S_ISDIR(p->mode)) {
    gid = static_cast<gid_t>(p->uid_gid >> 32);
    if (S_ISDIR(mode)) mode |= S_ISGID;
  }
  in.mode = mode;
  in.nlink = S_ISDIR(mode) ? 2 : 1;
  in.uid_gid = static_cast<uint64_t>(uid) | (static_cast<uint64_t>(gid) << 32);
  in.rdev = rdev;
  int64_t now = file::NowNs();
  in.atime_ns = in.mtime_ns = in.ctime_ns = in.btime_ns = now;
  in.generation = old->generation + 1;
  in.parent = parent;
  // Every field but inline_data: those bytes are read only for a symlink
  // whose flags say its target is inline, and such a symlink stores its
  // target there in the same transaction. Two cache lines fewer to log and
  // to write back on every create.
  static_assert(offsetof(Inode, inline_data) == 128);
  return tx->StoreBytes(inodes_->VoffOf(ino), &in, offsetof(Inode, inline_data));
}

Status FileSystem::TouchDir(uint64_t d, int64_t now, int nlink_delta, MetaTx* tx) {
  uint64_t v = inodes_->VoffOf(d);
  MAPFS_RETURN_IF_ERROR(tx->Store64(v + offsetof(Inode, mtime_ns), static_cast<uint64_t>(now)));
  MAPFS_RETURN_IF_ERROR(tx->Store64(v + offsetof(Inode, ctime_ns), static_cast<uint64_t>(now)));
  if (nlink_delta != 0) {
    auto n = tx->Load64(v + offsetof(Inode, nlink));
    if (!n.ok()) return n.status();
    MAPFS_RETURN_IF_ERROR(tx->Store64(v + offsetof(Inode, nlink), *n + static_cast<uint64_t>(nlink_delta)));
  }
  return Status::Ok();
}

Status FileSystem::DropLink(uint64_t ino, int64_t now, MetaTx* tx, bool* free_after) {
  uint64_t v = inodes_->VoffOf(ino);
  Inode* in = Ino(ino);
  auto n = tx->Load64(v + offsetof(Inode, nlink));
  if (!n.ok()) return n.status();
  uint64_t left = S_ISDIR(in->mode) || *n == 0 ? 0 : *n - 1;
  MAPFS_RETURN_IF_ERROR(tx->Store64(v + offsetof(Inode, nlink), left));
  MAPFS_RETURN_IF_ERROR(tx->Store64(v + offsetof(Inode, ctime_ns), static_cast<uint64_t>(now)));
  *free_after = false;
  if (left == 0 && shared_->open_count[ino].load() == 0) {
    // A block-mapped file's blocks go before its inode (FreeInode): the
    // inode stays an orphan until then, so a crash leaves it for recovery
    // to kill, never a free inode number whose blocks are still mapped.
    if (!(data_->block_mapped() && S_ISREG(in->mode)))
      MAPFS_RETURN_IF_ERROR(tx->Store64(v + offsetof(Inode, mode), 0));
    *free_after = true;
  }
  return Status::Ok();
}

void FileSystem::FreeInode(uint64_t ino, uint64_t part, mode_t mode, uint64_t flags) {
  if (data_->block_mapped() && S_ISREG(mode)) {
    (void)KillInode(ino);  // an orphan (DropLink); recovery retries on error
    return;
  }
  FreeInodeSlot(ino, part, mode, flags);
}

void FileSystem::FreeInodeSlot(uint64_t ino, uint64_t part, mode_t mode, uint64_t flags) {
  shared_->mapped[ino].store(0);
  // The transaction that cleared the mode committed: a crash from here on
  // leaves only leaks, which recovery collects.
  if (part != 0) {
    if (S_ISDIR(mode))
      (void)cib_->Destroy(part);
    else if (S_ISREG(mode) || (S_ISLNK(mode) && !(flags & meta::format::kFlagInlineLink)))
      (void)mount_->space().Free(meta::format::PartVoff(part));
  }
  inodes_->Release(ino);
}

Status FileSystem::KillInode(uint64_t ino) {
  Inode* in = Ino(ino);
  uint64_t part = in->part, flags = in->flags;
  mode_t mode = static_cast<mode_t>(in->mode);
  if (data_->block_mapped() && S_ISREG(mode)) MAPFS_RETURN_IF_ERROR(data_->ReleaseBlocks(ino, in));
  MetaTx tx(&mount_->pool(), &mount_->vm());
  MAPFS_RETURN_IF_ERROR(tx.Store64(inodes_->VoffOf(ino) + offsetof(Inode, mode), 0));
  MAPFS_RETURN_IF_ERROR(tx.Commit());
  FreeInodeSlot(ino, part, mode, flags);
  return Status::Ok();
}

// Takes the locks of `ls` (the parent's write lock among them), then checks
// that the walk's parent is live and its `name` still names `ino`: at the
// slot where the walk found it, or else by a lookup. Returns EAGAIN (locks
// released) to retry. ino 0 (the name must still be absent) checks only the
// parent: the caller's Cib::Insert, under these locks, refuses a name that
// appeared meanwhile (EEXIST), so a second lookup here would only repeat it.
// `found` (optional, ino != 0): where the name was seen under the locks, for
// Cib::RemoveAt (block 0 when not known: "." / "..").
Status FileSystem::LockAndRecheck(LockSet* ls, const Walk& w, uint64_t ino, dir::EntryLoc* found) {
  ls->Acquire();
  if (found != nullptr) *found = dir::EntryLoc{};
  Inode* p = Ino(w.parent);
  if (p == nullptr || p->mode == 0 || p->nlink == 0) return Status::Error(ENOENT, "directory was removed");
  if (IsDot(w.name) || ino == 0) return Status::Ok();
  if (cib_->StillNames(p->part, w.loc, w.name, ino)) {
    if (found != nullptr) *found = w.loc;
    return Status::Ok();
  }
  dir::EntryLoc loc;
  auto e = cib_->Lookup(p->part, w.name, &loc);
  uint64_t now = e.ok() ? e->ino : 0;
  if (!e.ok() && e.status().code() != ENOENT) return e.status();
  if (now != ino) {
    ls->Release();
    return Status::Error(EAGAIN, "changed");
  }
  if (found != nullptr) *found = loc;
  return Status::Ok();
}

Status FileSystem::CreateNode(const Walk& w, mode_t mode, const std::string* link_target, uint64_t* out_ino,
                              bool pin, const Owner* owner, uint64_t rdev) {
  LockSet ls(locks_.get());
  ls.Add(w.parent, true);
  Status st = LockAndRecheck(&ls, w, 0);
  if (!st.ok()) return st;
  // A deferred walk left the last name to this lookup, under the write
  // lock: EEXIST if present (before the permission to create is judged, as
  // Linux does), else where Insert will put it, with no second descent.
  dir::InsertSpot spot;
  if (w.deferred) {
    Inode* p = Ino(w.parent);
    if (!S_ISDIR(p->mode)) return Status::Error(ENOENT, "directory was removed");
    auto e = cib_->FindForInsert(p->part, w.name, &spot, nullptr);
    if (e.ok()) {
      // LookupIn's check: under the lock an entry never names a free inode.
      Inode* c = Ino(e->ino);
      if (c == nullptr || medium::Load64(&c->mode) == 0)
        return Status::Error(EUCLEAN, "entry '" + w.name + "' of directory inode " + std::to_string(w.parent) +
                                          " names free inode " + std::to_string(e->ino) + " (run fsck --repair)");
      return Status::Error(EEXIST, "file exists");
    }
    if (e.status().code() != ENOENT) return e.status();
  }
  if (w.name.size() > dir::kMaxName) return Status::Error(ENAMETOOLONG, "name too long");
  MAPFS_RETURN_IF_ERROR(MayCreate(CurrentCred(), w.parent));
  auto ino = inodes_->Reserve();
  if (!ino.ok()) return ino.status();
  uint64_t extra_part = 0;
  auto undo = [&](Status s) {
    if (extra_part) {
      if (S_ISDIR(mode))
        (void)cib_->Destroy(extra_part);
      else
        (void)mount_->space().Free(meta::format::PartVoff(extra_part));
    }
    inodes_->Release(*ino);
    return s;
  };
  MetaTx tx(&mount_->pool(), &mount_->vm());
  st = FillInode(*ino, mode, w.parent, owner, rdev, &tx);
  if (!st.ok()) return undo(st);
  uint64_t iv = inodes_->VoffOf(*ino);
  if (S_ISDIR(mode)) {
    auto root = cib_->Create();
    if (!root.ok()) return undo(root.status());
    extra_part = *root;
    st = tx.Store64(iv + offsetof(Inode, part), *root);
  } else if (S_ISLNK(mode)) {
    const std::string& t = *link_target;
    st = tx.Store64(iv + offsetof(Inode, size), t.size());
    if (st.ok() && t.size() <= meta::format::kInlineLinkMax) {
      st = tx.Store64(iv + offsetof(Inode, flags), meta::format::kFlagInlineLink);
      if (st.ok()) st = tx.StoreBytes(iv + offsetof(Inode, inline_data), t.data(), t.size());
    } else if (st.ok()) {
      auto p = mount_->space().Alloc(0);
      if (!p.ok()) return undo(p.status());
      extra_part = meta::format::PartWord(*p, 0);
      st = mount_->vm().Map(*p, kPageSize);
      if (st.ok()) {
        medium::Write(mount_->vm().at(*p), t.data(), t.size());
        medium::Persist(mount_->vm().at(*p), t.size());
        st = tx.Store64(iv + offsetof(Inode, part), extra_part);
      }
    }
  }
  if (st.ok()) {
    st = w.deferred ? cib_->InsertAt(DirRoot(w.parent), spot, w.name, {*ino, DtOf(mode)}, &tx)
                    : cib_->Insert(DirRoot(w.parent), w.name, {*ino, DtOf(mode)}, &tx);
    // The name appeared since the walk (LockAndRecheck leaves that check to
    // Insert): walk again, which opens it or says EEXIST as the call wants.
    // (Not after a deferred walk: the name was absent under this lock.)
    if (st.code() == EEXIST) st = Status::Error(EAGAIN, "changed");
  }
  if (st.ok()) st = TouchDir(w.parent, file::NowNs(), S_ISDIR(mode) ? 1 : 0, &tx);
  if (st.ok()) st = tx.Commit();
  if (!st.ok()) return undo(st);
  if (pin) shared_->open_count[*ino].fetch_add(1);
  changes_->Name(w.parent, w.name, *ino);
  if (out_ino) *out_ino = *ino;
  return Status::Ok();
}

Status FileSystem::Mkdir(std::string_view path, mode_t mode, uint64_t at, const Owner* owner) {
  for (;;) {
    // The last name is looked up by CreateNode, under the write lock
    // (Walk::defer_last).
    Walk walk;
    walk.defer_last = true;
    MAPFS_RETURN_IF_ERROR(ResolveTo(&walk, CurrentCred(), at, path, false, 0, true));
    Walk* w = &walk;
    if (w->ino != 0) return Status::Error(EEXIST, "file exists");
    if (w->too_long) return Status::Error(ENAMETOOLONG, "name too long");
    Status st = CreateNode(*w, S_IFDIR | (mode & 07777), nullptr, nullptr, false, owner);
    if (st.code() != EAGAIN) return st;
  }
}

Status FileSystem::Mknod(std::string_view path, mode_t mode, dev_t dev, uint64_t at, const Owner* owner) {
  mode_t type = mode & S_IFMT;
  if (type == 0) type = S_IFREG;
  if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK && type != S_IFCHR && type != S_IFBLK)
    return Status::Error(EINVAL, "mknod of a directory, symlink or unknown type");
  uint64_t rdev = (type == S_IFCHR || type == S_IFBLK) ? static_cast<uint64_t>(dev) : 0;
  for (;;) {
    // The last name is looked up by CreateNode, under the write lock
    // (Walk::defer_last).
    Walk walk;
    walk.defer_last = true;
    MAPFS_RETURN_IF_ERROR(ResolveTo(&walk, CurrentCred(), at, path, false, 0, true));
    Walk* w = &walk;
    if (w->ino != 0) return Status::Error(EEXIST, "file exists");
    if (w->too_long) return Status::Error(ENAMETOOLONG, "name too long");
    if (w->trailing_slash) return Status::Error(ENOENT, "no such directory");
    Status st = CreateNode(*w, type | (mode & 07777), nullptr, nullptr, false, owner, rdev);
    if (st.code() != EAGAIN) return st;
  }
}

Status FileSystem::Symlink(std::string_view target, std::string_view path, uint64_t at, const Owner* owner) {
  if (target.empty()) return Status::Error(ENOENT, "empty symlink target");
  if (target.size() >= PATH_MAX) return Status::Error(ENAMETOOLONG, "symlink target too long");
  std::string t(target);
  for (;;) {
    // The last name is looked up by CreateNode, under the write lock
    // (Walk::defer_last).
    Walk walk;
    walk.defer_last = true;
    MAPFS_RETURN_IF_ERROR(ResolveTo(&walk, CurrentCred(), at, path, false, 0, true));
    Walk* w = &walk;
    if (w->ino != 0) return Status::Error(EEXIST, "file exists");
    if (w->too_long) return Status::Error(ENAMETOOLONG, "name too long");
    if (w->trailing_slash) return Status::Error(ENOENT, "no such directory");
    Status st = CreateNode(*w, S_IFLNK | 0777, &t, nullptr, false, owner);
    if (st.code() != EAGAIN) return st;
  }
}

Status FileSystem::Unlink(std::string_view path, uint64_t at) {
  for (;;) {
    auto w = Resolve(CurrentCred(), at, path, false, 0, true);
    if (!w.ok()) return w.status();
    if (w->ino == 0) return w->Missing();
    // "name/" is judged before permissions (Linux's do_unlinkat), a
    // directory without the slash after them (may_delete).
    if (w->trailing_slash)
      return w->type == DT_DIR ? Status::Error(EISDIR, "is a directory") : Status::Error(ENOTDIR, "not a directory");
    LockSet ls(locks_.get());
    ls.Add(w->parent, true);
    ls.Add(w->ino, true);
    dir::EntryLoc at_loc;
    Status st = LockAndRecheck(&ls, *w, w->ino, &at_loc);
    if (st.code() == EAGAIN) continue;
    if (!st.ok()) return st;
    MAPFS_RETURN_IF_ERROR(MayDelete(CurrentCred(), w->parent, w->ino));
    Inode* in = Ino(w->ino);
    uint64_t part = in->part, flags = in->flags;
    mode_t mode = static_cast<mode_t>(in->mode);
    if (S_ISDIR(mode)) return Status::Error(EISDIR, "is a directory");
    MetaTx tx(&mount_->pool(), &mount_->vm());
    int64_t now = file::NowNs();
    bool free_after = false;
    // Unlink never removes a directory (EISDIR above), but an entry whose
    // type says directory may be cached (name_cache.h) whatever its inode.
    if (w->type == DT_DIR) NoteNameRemoved();
    // Where the recheck found the name, under the locks still held: no
    // second search of the directory.
    MAPFS_RETURN_IF_ERROR(cib_->RemoveAt(DirRoot(w->parent), at_loc, w->name, &tx));
    MAPFS_RETURN_IF_ERROR(TouchDir(w->parent, now, 0, &tx));
    MAPFS_RETURN_IF_ERROR(DropLink(w->ino, now, &tx, &free_after));
    MAPFS_RETURN_IF_ERROR(tx.Commit());
    changes_->Name(w->parent, w->name, w->ino);
    if (free_after) FreeInode(w->ino, part, mode, flags);
    return Status::Ok();
  }
}

Status FileSystem::Rmdir(std::string_view path, uint64_t at) {
  if (!path.empty() && path.find_first_not_of('/') == std::string_view::npos)
    return Status::Error(EBUSY, "cannot remove the root");
  for (;;) {
    auto w = Resolve(CurrentCred(), at, path, false, 0, true);
    if (!w.ok()) return w.status();
    if (w->ino == 0) return w->Missing();
    if (w->name == ".") return Status::Error(EINVAL, "cannot remove '.'");
    if (w->name == "..") return Status::Error(ENOTEMPTY, "cannot remove '..'");
    if (w->ino == meta::format::kRootIno) return Status::Error(EBUSY, "cannot remove the root");
    LockSet ls(locks_.get());
    ls.Add(w->parent, true);
    ls.Add(w->ino, true);
    Status st = LockAndRecheck(&ls, *w, w->ino);
    if (st.code() == EAGAIN) continue;
    if (!st.ok()) return st;
    // Permissions before the type (may_delete's order).
    MAPFS_RETURN_IF_ERROR(MayDelete(CurrentCred(), w->parent, w->ino));
    Inode* in = Ino(w->ino);
    if (!S_ISDIR(in->mode)) return Status::Error(ENOTDIR, "not a directory");
    auto n = cib_->Count(in->part);
    if (!n.ok()) return n.status();
    if (*n != 0) return Status::Error(ENOTEMPTY, "directory not empty");
    uint64_t part = in->part;
    MetaTx tx(&mount_->pool(), &mount_->vm());
    int64_t now = file::NowNs();
    bool free_after = false;
    NoteNameRemoved();
    MAPFS_RETURN_IF_ERROR(cib_->Remove(DirRoot(w->parent), w->name, &tx));
    MAPFS_RETURN_IF_ERROR(TouchDir(w->parent, now, -1, &tx));
    MAPFS_RETURN_IF_ERROR(DropLink(w->ino, now, &tx, &free_after));
    MAPFS_RETURN_IF_ERROR(tx.Commit());
    changes_->Name(w->parent, w->name, w->ino);
    if (free_after) FreeInode(w->ino, part, S_IFDIR, 0);
    return Status::Ok();
  }
}

Status FileSystem::Link(std::string_view from, std::string_view to, bool follow, uint64_t from_at, uint64_t to_at) {
  // Only the target's walk can go stale (EAGAIN below): the source's inode
  // is checked again under its lock.
  auto s = Resolve(CurrentCred(), from_at, from, follow);
  if (!s.ok()) return s.status();
  if (s->ino == 0) return Status::Error(ENOENT, "no such file or directory");
  return LinkIno(s->ino, to, to_at);
}

Status FileSystem::LinkIno(uint64_t ino, std::string_view to, uint64_t to_at) {
  if (ino == 0 || !inodes_->Valid(ino)) return Status::Error(ENOENT, "no such file or directory");
  for (;;) {
    const Cred& cr = CurrentCred();
    auto d = Resolve(cr, to_at, to, false, 0, true);
    if (!d.ok()) return d.status();
    if (d->ino != 0) return Status::Error(EEXIST, "file exists");
    if (d->too_long) return Status::Error(ENAMETOOLONG, "name too long");
    if (d->trailing_slash) return Status::Error(ENOENT, "no such directory");
    LockSet ls(locks_.get());
    ls.Add(d->parent, true);
    ls.Add(ino, true);
    Status st = LockAndRecheck(&ls, *d, 0);
    if (st.code() == EAGAIN) continue;
    if (!st.ok()) return st;
    // may_linkat (protected hardlinks), may_create, then the directory's
    // EPERM (do_linkat's and vfs_link's order).
    MAPFS_RETURN_IF_ERROR(MayLink(cr, Ino(ino)));
    MAPFS_RETURN_IF_ERROR(MayCreate(cr, d->parent));
    Inode* in = Ino(ino);
    if (in->mode == 0 || in->nlink == 0) return Status::Error(ENOENT, "file was removed");
    if (S_ISDIR(in->mode)) return Status::Error(EPERM, "hard link to a directory");
    if (d->name.size() > dir::kMaxName) return Status::Error(ENAMETOOLONG, "name too long");
    MetaTx tx(&mount_->pool(), &mount_->vm());
    int64_t now = file::NowNs();
    uint64_t iv = inodes_->VoffOf(ino);
    MAPFS_RETURN_IF_ERROR(cib_->Insert(DirRoot(d->parent), d->name, {ino, DtOf(in->mode)}, &tx));
    MAPFS_RETURN_IF_ERROR(tx.Store64(iv + offsetof(Inode, nlink), in->nlink + 1));
    MAPFS_RETURN_IF_ERROR(tx.Store64(iv + offsetof(Inode, ctime_ns), static_cast<uint64_t>(now)));
    MAPFS_RETURN_IF_ERROR(TouchDir(d->parent, now, 0, &tx));
    MAPFS_RETURN_IF_ERROR(tx.Commit());
    changes_->Name(d->parent, d->name, ino);
    return Status::Ok();
  }
}

// True when `anc` is `d` or one of its ancestors. Callers hold the rename lock.
bool FileSystem::IsAncestor(uint64_t anc, uint64_t d) {
  for (int i = 0; i < 100000; i++) {
    if (d == anc) return true;
    if (d == meta::format::kRootIno) return false;
    Inode* in = Ino(d);
    if (in == nullptr) return false;
    d = medium::Load64(&in->parent);
  }
  return false;
}

Status FileSystem::Rename(std::string_view from, std::string_view to, unsigned flags, uint64_t from_at,
                          uint64_t to_at) {
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) return Status::Error(EINVAL, "unknown rename flags");
  if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
    return Status::Error(EINVAL, "RENAME_NOREPLACE with RENAME_EXCHANGE");
  bool exchange = flags & RENAME_EXCHANGE;
  // A plain rename usually moves a name to a free one: the target's last
  // name is then looked up once, under the parents' write locks, by the
  // descent that finds where to insert it (Walk::defer_last). If it exists
  // after all, what that lookup found completes the target's walk, as the
  // walk would have found it, and the rename goes round once more with the
  // two walks it has (`found_target`): its inode is locked too this time,
  // and the found name is rechecked under the locks like any walk's.
  Walk source, target;
  bool found_target = false;
  for (;;) {
    const Cred& cr = CurrentCred();
    if (!found_target) {
      source = Walk{};
      MAPFS_RETURN_IF_ERROR(ResolveTo(&source, cr, from_at, from, false, 0, true));
      target = Walk{};
      target.defer_last = flags == 0;
      MAPFS_RETURN_IF_ERROR(ResolveTo(&target, cr, to_at, to, false, 0, true));
    }
    found_target = false;
    Walk* s = &source;
    Walk* d = &target;
    // Linux's order: "." / ".." / the root as a last component, then
    // existence, then trailing slashes on non-directories.
    // RENAME_NOREPLACE turns a target of "." / ".." / the root into EEXIST
    // (it names something that exists); the source's EBUSY comes first.
    if (IsDot(s->name)) return Status::Error(EBUSY, "cannot rename '.', '..' or the root");
    if (IsDot(d->name))
      return (flags & RENAME_NOREPLACE) ? Status::Error(EEXIST, "file exists")
                                        : Status::Error(EBUSY, "cannot rename onto '.', '..' or the root");
    if (s->ino == meta::format::kRootIno || d->ino == meta::format::kRootIno)
      return Status::Error(EBUSY, "cannot rename the root");
    if (s->ino == 0) return s->Missing();
    if (d->too_long) return d->Missing();
    if (d->ino == 0 && exchange) return Status::Error(ENOENT, "no such file or directory");
    if (d->ino != 0 && (flags & RENAME_NOREPLACE)) {
      // The two names were looked up one after the other without locks: a
      // rename in between may have moved the source onto the target. EEXIST
      // only if both still name what they did, under the parents' locks
      // (as Linux, which looks both up under them: ENOENT or success).
      LockSet ls(locks_.get());
      ls.Add(s->parent, true);
      ls.Add(d->parent, true);
      Status st = LockAndRecheck(&ls, *s, s->ino);
      if (st.ok()) {
        Inode* dp = Ino(d->parent);
        auto e = dp && dp->mode != 0 && dp->nlink != 0 ? cib_->Lookup(dp->part, d->name)
                                                       : Result<dir::Entry>(Status::Error(ENOENT, "gone"));
        if (!e.ok() || e->ino != d->ino) st = Status::Error(EAGAIN, "changed");
      }
      if (st.code() == EAGAIN) continue;
      if (!st.ok()) return st;
      return Status::Error(EEXIST, "file exists");
    }
    bool sdir = s->type == DT_DIR;
    if (!sdir && (s->trailing_slash || (!exchange && d->trailing_slash)))
      return Status::Error(ENOTDIR, "not a directory");
    if (exchange && d->type != DT_DIR && d->trailing_slash) return Status::Error(ENOTDIR, "not a directory");
    if (d->name.size() > dir::kMaxName) return Status::Error(ENAMETOOLONG, "name too long");
    bool cross = s->parent != d->parent;
    bool need_rename_lock = cross && (sdir || d->type == DT_DIR);
    if (need_rename_lock) mount_->pool().Lock(medium::LockId::kRename);
    struct Unlocker {
      FileSystem* fs;
      bool on;
      ~Unlocker() {
        if (on) fs->mount_->pool().Unlock(medium::LockId::kRename);
      }
    } unlocker{this, need_rename_lock};
    LockSet ls(locks_.get());
    ls.Add(s->parent, true);
    ls.Add(d->parent, true);
    ls.Add(s->ino, true);
    ls.Add(d->ino, true);
    dir::EntryLoc s_loc;
    Status st = LockAndRecheck(&ls, *s, s->ino, &s_loc);
    if (st.ok()) {
      Inode* dp = Ino(d->parent);
      if (dp == nullptr || dp->mode == 0 || dp->nlink == 0) return Status::Error(ENOENT, "directory was removed");
      // A target that was absent must still be: Insert below checks that
      // (EEXIST, turned into a retry).
      if (d->ino != 0 && !StillNames(dp->part, *d, d->name, d->ino)) st = Status::Error(EAGAIN, "changed");
    }
    if (st.code() == EAGAIN) continue;
    if (!st.ok()) return st;
    dir::InsertSpot spot;
    if (d->deferred) {
      Inode* dp = Ino(d->parent);
      if (!S_ISDIR(dp->mode)) return Status::Error(ENOENT, "directory was removed");
      dir::EntryLoc loc;
      auto e = cib_->FindForInsert(dp->part, d->name, &spot, &loc);
      if (e.ok()) {
        // LookupIn's check: under the lock an entry never names a free inode.
        Inode* c = Ino(e->ino);
        if (c == nullptr || medium::Load64(&c->mode) == 0)
          return Status::Error(EUCLEAN, "entry '" + d->name + "' of directory inode " + std::to_string(d->parent) +
                                            " names free inode " + std::to_string(e->ino) + " (run fsck --repair)");
        d->ino = e->ino;
        d->type = e->type;
        d->loc = loc;
        d->deferred = false;
        found_target = true;  // round again with its inode locked (locks released here)
        continue;
      }
      if (e.status().code() != ENOENT) return e.status();
    }
    if (s->ino == d->ino) return Status::Ok();  // two links of one file: nothing to do
    Inode* si = Ino(s->ino);
    Inode* di = d->ino ? Ino(d->ino) : nullptr;
    bool ddir = di && S_ISDIR(di->mode);
    // Ancestry before types, as Linux: a directory may not move below
    // itself, and a target that is an ancestor of the source is not empty.
    if (sdir && cross && IsAncestor(s->ino, d->parent)) return Status::Error(EINVAL, "move into its own subtree");
    if (ddir && cross && IsAncestor(d->ino, s->parent))
      return Status::Error(exchange ? EINVAL : ENOTEMPTY, exchange ? "move into its own subtree" : "directory not empty");
    // vfs_rename's checks: remove the source from its directory, create or
    // remove the target in its own, and a directory that changes parent
    // must be writable (its ".." changes).
    MAPFS_RETURN_IF_ERROR(MayDelete(cr, s->parent, s->ino));
    MAPFS_RETURN_IF_ERROR(di ? MayDelete(cr, d->parent, d->ino) : MayCreate(cr, d->parent));
    if (cross && S_ISDIR(si->mode)) MAPFS_RETURN_IF_ERROR(InodePermission(cr, si, kMayWrite));
    if (cross && exchange && ddir) MAPFS_RETURN_IF_ERROR(InodePermission(cr, di, kMayWrite));
    if (di && !exchange) {
      if (sdir && !ddir) return Status::Error(ENOTDIR, "not a directory");
      if (!sdir && ddir) return Status::Error(EISDIR, "is a directory");
      if (ddir) {
        auto n = cib_->Count(di->part);
        if (!n.ok()) return n.status();
        if (*n != 0) return Status::Error(ENOTEMPTY, "directory not empty");
      }
    }

    MetaTx tx(&mount_->pool(), &mount_->vm());
    int64_t now = file::NowNs();
    uint64_t sroot = DirRoot(s->parent), droot = DirRoot(d->parent);
    uint64_t sv = inodes_->VoffOf(s->ino);
    bool free_after = false;
    uint64_t dpart = di ? di->part : 0, dflags = di ? di->flags : 0;
    mode_t dmode = di ? static_cast<mode_t>(di->mode) : 0;
    if (exchange) {
      // Name caches hold directories only: the entry (and the inode, in
      // case damage made them disagree) say whether one may be stale.
      if (sdir || ddir || s->type == DT_DIR || d->type == DT_DIR) NoteNameRemoved();
      MAPFS_RETURN_IF_ERROR(cib_->Replace(sroot, s->name, {d->ino, DtOf(di->mode)}, &tx));
      MAPFS_RETURN_IF_ERROR(cib_->Replace(droot, d->name, {s->ino, DtOf(si->mode)}, &tx));
      uint64_t dv = inodes_->VoffOf(d->ino);
      MAPFS_RETURN_IF_ERROR(tx.Store64(sv + offsetof(Inode, ctime_ns), static_cast<uint64_t>(now)));
      MAPFS_RETURN_IF_ERROR(tx.Store64(dv + offsetof(Inode, ctime_ns), static_cast<uint64_t>(now)));
      int sdelta = 0, ddelta = 0;  // link count changes of the parents
      if (cross && sdir) {
        MAPFS_RETURN_IF_ERROR(tx.Store64(sv + offsetof(Inode, parent), d->parent));
        sdelta--, ddelta++;
      }
      if (cross && ddir) {
        MAPFS_RETURN_IF_ERROR(tx.Store64(dv + offsetof(Inode, parent), s->parent));
        sdelta++, ddelta--;
      }
      MAPFS_RETURN_IF_ERROR(TouchDir(s->parent, now, sdelta, &tx));
      if (cross) MAPFS_RETURN_IF_ERROR(TouchDir(d->parent, now, ddelta, &tx));
      MAPFS_RETURN_IF_ERROR(tx.Commit());
      changes_->Name(s->parent, s->name, s->ino);
      changes_->Name(d->parent, d->name, d->ino);
      return Status::Ok();
    }
    if (di) {
      if (ddir || d->type == DT_DIR) NoteNameRemoved();
      MAPFS_RETURN_IF_ERROR(cib_->Replace(droot, d->name, {s->ino, DtOf(si->mode)}, &tx));
      MAPFS_RETURN_IF_ERROR(DropLink(d->ino, now, &tx, &free_after));
    } else {
      Status ins = d->deferred ? cib_->InsertAt(droot, spot, d->name, {s->ino, DtOf(si->mode)}, &tx)
                               : cib_->Insert(droot, d->name, {s->ino, DtOf(si->mode)}, &tx);
      if (ins.code() == EEXIST) continue;  // the target appeared since the walk
      MAPFS_RETURN_IF_ERROR(ins);
    }
    if (sdir || s->type == DT_DIR) NoteNameRemoved();
    // At the slot the recheck saw, unless the Insert or Replace above moved
    // it (a split of the same block: RemoveAt then searches).
    MAPFS_RETURN_IF_ERROR(cib_->RemoveAt(sroot, s_loc, s->name, &tx));
    MAPFS_RETURN_IF_ERROR(tx.Store64(sv + offsetof(Inode, ctime_ns), static_cast<uint64_t>(now)));
    int sdelta = 0, ddelta = 0;
    if (sdir && cross) {
      MAPFS_RETURN_IF_ERROR(tx.Store64(sv + offsetof(Inode, parent), d->parent));
      sdelta--, ddelta++;
    }
    if (ddir) ddelta--;  // the replaced directory's ".." goes away
    MAPFS_RETURN_IF_ERROR(TouchDir(s->parent, now, cross ? sdelta : sdelta + ddelta, &tx));
    if (cross) MAPFS_RETURN_IF_ERROR(TouchDir(d->parent, now, ddelta, &tx));
    MAPFS_RETURN_IF_ERROR(tx.Commit());
    changes_->Name(s->parent, s->name, s->ino);
    changes_->Name(d->parent, d->name, d->ino);  // d->ino: the replaced inode (0 if none)
    if (d->ino != 0) changes_->Attr(s->ino);
    if (free_after) FreeInode(d->ino, dpart, dmode, dflags);
    return Status::Ok();
  }
}

Status FileSystem::SetAttr(uint64_t ino, const std::function<Status(Inode*, MetaTx*, uint64_t)>& fn) {
  InodeLock l(locks_.get(), ino, true);
  Inode* in = Ino(ino);
  if (in == nullptr || in->mode == 0) return Status::Error(ENOENT, "file was removed");
  MetaTx tx(&mount_->pool(), &mount_->vm());
  MAPFS_RETURN_IF_ERROR(fn(in, &tx, inodes_->VoffOf(ino)));
  MAPFS_RETURN_IF_ERROR(tx.Commit());
  changes_->Attr(ino);
  return Status::Ok();
}

namespace {
// chmod(2): the owner or root. Who is neither in the file's group nor root
// cannot set S_ISGID (setattr_prepare drops it silently).
Status ChmodFn(const Cred& c, mode_t mode, Inode* in, MetaTx* tx, uint64_t v) {
  MAPFS_RETURN_IF_ERROR(OwnerOrRoot(c, UidOf(in), "chmod"));
  if ((mode & S_ISGID) && !c.root() && !c.InGroup(GidOf(in))) mode &= ~S_ISGID;
  MAPFS_RETURN_IF_ERROR(tx->Store64(v + offsetof(Inode, mode), (in->mode & S_IFMT) | (mode & 07777)));
  return tx->Store64(v + offsetof(Inode, ctime_ns), static_cast<uint64_t>(file::NowNs()));
}
// chown(2): only root gives a file away; the owner may change its group to
// one he is in (chown_ok, chgrp_ok). A non-directory loses its set-ID bits
// (chown_common), whoever changes it.
Status ChownFn(const Cred& c, uid_t uid, gid_t gid, Inode* in, MetaTx* tx, uint64_t v) {
  uint64_t u = in->uid_gid & 0xffffffffu, g = in->uid_gid >> 32;
  if (uid != static_cast<uid_t>(-1) && !c.root() && !(c.uid == u && uid == u))
    return Status::Error(EPERM, "chown: only root may change a file's owner");
  if (gid != static_cast<gid_t>(-1) && !c.root() && !(c.uid == u && (gid == g || c.InGroup(gid))))
    return Status::Error(EPERM, "chgrp: only the owner, to a group he is in, or root");
  uint64_t drop = SetIdBitsToDrop(c, in->mode, static_cast<gid_t>(g), true);
  // Dropping them is a mode change: the owner's or root's (so a chown with
  // no ids by anyone else fails on a set-ID file, as on Linux).
  if (drop != 0) MAPFS_RETURN_IF_ERROR(OwnerOrRoot(c, static_cast<uid_t>(u), "chown"));
  if (uid != static_cast<uid_t>(-1)) u = uid;
  if (gid != static_cast<gid_t>(-1)) g = gid;
  MAPFS_RETURN_IF_ERROR(tx->Store64(v + offsetof(Inode, uid_gid), u | (g << 32)));
  if (drop != 0) MAPFS_RETURN_IF_ERROR(tx->Store64(v + offsetof(Inode, mode), in->mode & ~drop));
  return tx->Store64(v + offsetof(Inode, ctime_ns), static_cast<uint64_t>(file::NowNs()));
}
// utimensat(2): explicit times need the owner or root (EPERM); "now" (no
// times, or both UTIME_NOW) also whoever may write the file (EACCES).
Status UtimensFn(const Cred& c, const struct timespec* ts, Inode* in, MetaTx* tx, uint64_t v) {
  // Both UTIME_OMIT: nothing changes, not even ctime (as Linux).
  if (ts != nullptr && ts[0].tv_nsec == UTIME_OMIT && ts[1].tv_nsec == UTIME_OMIT) return Status::Ok();
  for (int i = 0; ts != nullptr && i < 2; i++)
    if (ts[i].tv_nsec != UTIME_OMIT && ts[i].tv_nsec != UTIME_NOW && (ts[i].tv_nsec < 0 || ts[i].tv_nsec >= 1000000000))
      return Status::Error(EINVAL, "bad timestamp");
  bool touch = ts == nullptr || (ts[0].tv_nsec == UTIME_NOW && ts[1].tv_nsec == UTIME_NOW);
  if (!(c.root() || c.uid == UidOf(in))) {
    if (!touch) return Status::Error(EPERM, "utimens: explicit times need the owner");
    MAPFS_RETURN_IF_ERROR(InodePermission(c, in, kMayWrite));
  }
  int64_t now = file::NowNs();
  for (int i = 0; i < 2; i++) {
    int64_t t = now;
    if (ts != nullptr) {
      if (ts[i].tv_nsec == UTIME_OMIT) continue;
      if (ts[i].tv_nsec != UTIME_NOW) {
        if (ts[i].tv_nsec < 0 || ts[i].tv_nsec >= 1000000000) return Status::Error(EINVAL, "bad timestamp");
        t = static_cast<int64_t>(ts[i].tv_sec) * 1000000000 + ts[i].tv_nsec;
      }
    }
    MAPFS_RETURN_IF_ERROR(tx->Store64(v + (i == 0 ? offsetof(Inode, atime_ns) : offsetof(Inode, mtime_ns)),
                                      static_cast<uint64_t>(t)));
  }
  return tx->Store64(v + offsetof(Inode, ctime_ns), static_cast<uint64_t>(now));
}
}  // namespace

Status FileSystem::Chmod(std::string_view path, mode_t mode, bool follow, uint64_t at) {
  auto ino = Lookup(path, follow, at);
  if (!ino.ok()) return ino.status();
  const Cred& c = CurrentCred();
  return SetAttr(*ino, [&](Inode* in, MetaTx* tx, uint64_t v) { return ChmodFn(c, mode, in, tx, v); });
}
Status FileSystem::Fchmod(OpenFile& f, mode_t mode) {
  const Cred& c = CurrentCred();
  return SetAttr(f.ino, [&](Inode* in, MetaTx* tx, uint64_t v) { return ChmodFn(c, mode, in, tx, v); });
}
Status FileSystem::Chown(std::string_view path, uid_t uid, gid_t gid, bool follow, uint64_t at) {
  auto ino = Lookup(path, follow, at);
  if (!ino.ok()) return ino.status();
  const Cred& c = CurrentCred();
  return SetAttr(*ino, [&](Inode* in, MetaTx* tx, uint64_t v) { return ChownFn(c, uid, gid, in, tx, v); });
}
Status FileSystem::Fchown(OpenFile& f, uid_t uid, gid_t gid) {
  const Cred& c = CurrentCred();
  return SetAttr(f.ino, [&](Inode* in, MetaTx* tx, uint64_t v) { return ChownFn(c, uid, gid, in, tx, v); });
}
Status FileSystem::Utimens(std::string_view path, const struct timespec ts[2], bool follow, uint64_t at) {
  auto ino = Lookup(path, follow, at);
  if (!ino.ok()) return ino.status();
  const Cred& c = CurrentCred();
  return SetAttr(*ino, [&](Inode* in, MetaTx* tx, uint64_t v) { return UtimensFn(c, ts, in, tx, v); });
}
Status FileSystem::Futimens(OpenFile& f, const struct timespec ts[2]) { return UtimensIno(f.ino, ts); }
// By inode number (the FUSE mount's node ids), checked as the caller.
Status FileSystem::ChmodIno(uint64_t ino, mode_t mode) {
  if (ino == 0 || !inodes_->Valid(ino)) return Status::Error(ENOENT, "no such file or directory");
  const Cred& c = CurrentCred();
  return SetAttr(ino, [&](Inode* in, MetaTx* tx, uint64_t v) { return ChmodFn(c, mode, in, tx, v); });
}
// A chmod that only clears set-ID bits a write by `c` would clear, by a
// caller who may write the file: what the kernel sends for its
// file_remove_privs on the FUSE mount. It grants nothing new: the same
// caller drops those bits by truncating the file to its own size.
Status FileSystem::DropSetIdIno(uint64_t ino, mode_t mode) {
  if (ino == 0 || !inodes_->Valid(ino)) return Status::Error(ENOENT, "no such file or directory");
  const Cred& c = CurrentCred();
  return SetAttr(ino, [&](Inode* in, MetaTx* tx, uint64_t v) {
    uint64_t cur = in->mode, drop = SetIdBitsToDrop(c, cur, GidOf(in), false);
    uint64_t cleared = cur & 07777 & ~static_cast<uint64_t>(mode), added = mode & 07777 & ~cur;
    if (!S_ISREG(cur) || cleared == 0 || added != 0 || (cleared & ~drop) != 0)
      return Status::Error(EPERM, "chmod: only the owner or root");
    MAPFS_RETURN_IF_ERROR(InodePermission(c, in, kMayWrite));
    MAPFS_RETURN_IF_ERROR(tx->Store64(v + offsetof(Inode, mode), cur & ~cleared));
    return tx->Store64(v + offsetof(Inode, ctime_ns), static_cast<uint64_t>(file::NowNs()));
  });
}
Status FileSystem::ChownIno(uint64_t ino, uid_t uid, gid_t gid) {
  if (ino == 0 || !inodes_->Valid(ino)) return Status::Error(ENOENT, "no such file or directory");
  const Cred& c = CurrentCred();
  return SetAttr(ino, [&](Inode* in, MetaTx* tx, uint64_t v) { return ChownFn(c, uid, gid, in, tx, v); });
}
Status FileSystem::UtimensIno(uint64_t ino, const struct timespec ts[2]) {
  if (ino == 0 || !inodes_->Valid(ino)) return Status::Error(ENOENT, "no such file or directory");
  const Cred& c = CurrentCred();
  return SetAttr(ino, [&](Inode* in, MetaTx* tx, uint64_t v) { return UtimensFn(c, ts, in, tx, v); });
}

}  // namespace mapfs::fs
