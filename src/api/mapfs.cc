// C API front: the only symbols with C linkage in libmapfs.so.
#include "mapfs/mapfs.h"

#include "medium/pool_format.h"

extern "C" {

const char* mapfs_version(void) { return "0.1.0"; }

unsigned mapfs_format_version(void) { return mapfs::medium::format::kVersion; }

}  // extern "C"
