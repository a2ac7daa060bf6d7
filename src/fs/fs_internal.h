// Internal to the fs layer.
#pragma once

#include <cstdint>

#include "fs/file_system.h"
#include "meta/shared_fs.h"

namespace mapfs::fs {

// DT_* value for a st_mode.
uint8_t DirentType(uint64_t mode);

}  // namespace mapfs::fs
