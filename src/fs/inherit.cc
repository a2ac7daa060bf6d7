// Mounts and open files across fork and exec: what the LD_PRELOAD shim needs
// to run programs that fork and exec.
//
// fork: the child gets a copy of the parent's FileSystem, including the
// parent's mount identity. AfterFork gives the copy one of its own, so the
// two processes behave as two mounts; RetainOpen counts the open
// descriptions the child inherited.
//
// exec: the new image mounts afresh (the old image's mount dies with its
// O_CLOEXEC pool fd, and its slot is reused later) and Adopt rebuilds each
// open description it inherited from the inode number and flags the shim
// saved, taking over the open count the old image held.
#include <fcntl.h>

#include "fs/fs_internal.h"

namespace mapfs::fs {

using meta::InodeLock;
using meta::format::Inode;

Status FileSystem::AfterFork() {
  if (!mount_) return Status::Ok();
  Status st = mount_->AfterFork();
  if (!st.ok()) {
    // The copy has no identity of its own; using it would act as the
    // parent's mount. Drop it here (the parent is untouched).
    Abandon();
    return st;
  }
  locks_->AfterFork();
  return Status::Ok();
}

void FileSystem::RetainOpen(const OpenFile& f) {
  // The description is open in the parent, so the inode cannot be freed
  // meanwhile: no lock needed.
  if (f.ino != 0) shared_->open_count[f.ino].fetch_add(1);
}

Result<std::shared_ptr<OpenFile>> FileSystem::Adopt(uint64_t ino, int flags, bool counted) {
  if ((flags & O_ACCMODE) == O_ACCMODE) return Status::Error(EINVAL, "bad access mode");
  if (ino == 0 || !inodes_->Valid(ino)) return Status::Error(ESTALE, "inode " + std::to_string(ino) + " is gone");
  // The write lock keeps the last close of an unlinked file (which frees
  // the inode) and an unlink's "is it open?" decision out while we look and
  // count.
  InodeLock l(locks_.get(), ino, true);
  Inode* in = Ino(ino);
  if (in == nullptr || in->mode == 0) return Status::Error(ESTALE, "inode " + std::to_string(ino) + " is gone");
  uint64_t mode = in->mode;
  int acc = flags & O_ACCMODE;
  if (S_ISLNK(mode)) return Status::Error(ELOOP, "is a symbolic link");
  if ((flags & O_DIRECTORY) && !S_ISDIR(mode)) return Status::Error(ENOTDIR, "not a directory");
  if (S_ISDIR(mode) && acc != O_RDONLY) return Status::Error(EISDIR, "is a directory");
  uint32_t open = shared_->open_count[ino].load();
  // A counted description keeps the count above zero. Zero means the count
  // was lost: the shared state was rebuilt by an exclusive open in between
  // (whose recovery freed every unlinked inode), so count it again.
  if (!counted || open == 0) {
    // Unlinked and open nowhere: an orphan about to be freed — unless this
    // is the hand-off that kept recovery from collecting it (the old image
    // of this process held it open; medium::Pool::taking_handoff).
    if (in->nlink == 0 && open == 0 && !mount_->pool().taking_handoff())
      return Status::Error(ESTALE, "inode " + std::to_string(ino) + " was removed");
    shared_->open_count[ino].fetch_add(1);
  }
  auto f = std::make_shared<OpenFile>();
  f->ino = ino;
  f->flags = flags & ~(O_CREAT | O_EXCL | O_TRUNC);
  f->mode = ModeFor(flags);
  f->is_dir = S_ISDIR(mode);
  return f;
}

Result<std::shared_ptr<OpenFile>> FileSystem::OpenIno(uint64_t ino, int flags) {
  if (ino == 0 || !inodes_->Valid(ino)) return Status::Error(ESTALE, "inode " + std::to_string(ino) + " is gone");
  {
    InodeLock l(locks_.get(), ino, false);
    Inode* in = Ino(ino);
    if (in == nullptr || in->mode == 0) return Status::Error(ESTALE, "inode " + std::to_string(ino) + " is gone");
    MAPFS_RETURN_IF_ERROR(MayOpen(CurrentCred(), in, flags));
  }
  // A chmod between the check and Adopt's count is the same race open(2)
  // has between may_open and the file's use: the check stands.
  return Adopt(ino, flags & ~(kOpenExec | O_TRUNC), false);
}

}  // namespace mapfs::fs
