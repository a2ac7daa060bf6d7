#include "preload/real.h"

#include <dlfcn.h>

namespace mapfs::preload::real {

void* Lookup(const char* name) { return ::dlsym(RTLD_NEXT, name); }

}  // namespace mapfs::preload::real
