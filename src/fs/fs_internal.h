// Internal to the fs layer.
#pragma once

#include <cstdint>
#include <string_view>

#include "fs/file_system.h"
#include "meta/shared_fs.h"

namespace mapfs::fs {

// DT_* value for a st_mode.
uint8_t DirentType(uint64_t mode);

// "." or "..": names that never live in a directory's index.
inline bool IsDot(std::string_view n) { return n == "." || n == ".."; }

}  // namespace mapfs::fs
