// Relinking: how staged bytes of a staging file become part of their target
// without (where the file system allows) copying them.
//
//   ext4:        EXT4_IOC_MOVE_EXT swaps whole blocks of the staging file
//                into the target (whose range is first allocated unwritten);
//   XFS, btrfs:  FICLONERANGE shares the staging blocks with the target;
//   elsewhere:   (tmpfs...) a copy: written from the staging file's
//                mapping, or copy_file_range without one.
// The partial block at the head of a relink (the target's old last block)
// is always copied. A method the file system refuses at run time falls back
// to the copy (and the engine stops trying it).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "overlay/split/op_log.h"

namespace mapfs::overlay::split {

// The method for the file system of directory `dir_fd`;
// MAPFS_OVERLAY_RELINK=copy|move|clone overrides. A cheap method is first
// tried on two scratch files in the directory and its bytes read back: a
// kernel that reports an extent move it did not make (seen on 6.18: success
// and moved_len set, the target's bytes unchanged, the donor's lost) or
// refuses a clone gets the copy, and `why` says so.
RelinkMethod DetectRelinkMethod(int dir_fd, const char** fs_name, std::string* why);

// Puts staged bytes at target [off, off+len); the staging file holds the
// byte at `off` at offset `stage_off`, and `stage_off - off` is a multiple
// of `block`. Afterwards the target's size is at least off+len, and its
// bytes past off+len (another process's, which made it longer) are kept:
// neither cut off nor covered by a moved or cloned block. `used` says
// which method did it (the copy when `m` was refused). For kMoveExtents the
// staging file's range holds the target's old (unwritten) blocks afterwards.
// `stage_map`, when not null, maps the whole staging file (MAP_SHARED):
// bytes that are copied are written from it (cheaper than copy_file_range).
Status Relink(RelinkMethod m, int target_fd, int stage_fd, uint64_t off, uint64_t len, uint64_t stage_off,
              uint64_t block, RelinkMethod* used, const char* stage_map = nullptr);

// Copies [src_off, src_off+len) of src to dst_off of dst. data_only: only
// the data ranges of src (SEEK_DATA/SEEK_HOLE), for a staging file whose
// moved blocks came back as holes (recovery after kMoveExtents).
Status CopyRange(int src, uint64_t src_off, int dst, uint64_t dst_off, uint64_t len, bool data_only);

}  // namespace mapfs::overlay::split
