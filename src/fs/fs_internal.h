// Internal to the fs layer.
#pragma once

#include <cstdint>
#include <string_view>

#include "fs/cred.h"
#include "fs/file_system.h"
#include "medium/persist.h"
#include "meta/shared_fs.h"

namespace mapfs::fs {

// DT_* value for a st_mode.
uint8_t DirentType(uint64_t mode);

// "." or "..": names that never live in a directory's index.
inline bool IsDot(std::string_view n) { return n == "." || n == ".."; }

// An inode's owner and group (one 64-bit word: read once, never torn).
inline uid_t UidOf(const meta::format::Inode* in) {
  return static_cast<uid_t>(medium::Load64(&in->uid_gid) & 0xffffffffu);
}
inline gid_t GidOf(const meta::format::Inode* in) { return static_cast<gid_t>(medium::Load64(&in->uid_gid) >> 32); }

// Permission() for an inode of the pool.
inline Status InodePermission(const Cred& c, const meta::format::Inode* in, int mask) {
  uint64_t ug = medium::Load64(&in->uid_gid);
  return Permission(c, medium::Load64(&in->mode), static_cast<uid_t>(ug & 0xffffffffu), static_cast<gid_t>(ug >> 32),
                    mask);
}

}  // namespace mapfs::fs
