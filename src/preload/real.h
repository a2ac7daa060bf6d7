// The C library's own functions, found behind the shim with
// dlsym(RTLD_NEXT). Looked up on first use, never in a static initialiser
// (MadFS's mistake: that crashes under sanitizers and in early start-up).
#pragma once

#include <dirent.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace mapfs::preload::real {

// Returns the next definition of `name` after the shim, or null.
void* Lookup(const char* name);

}  // namespace mapfs::preload::real

// REAL(fn) is the C library's `fn`, typed like the shim's own declaration.
#define REAL(fn)                                                                    \
  ([]() {                                                                           \
    static decltype(&::fn) p = nullptr;                                             \
    if (__builtin_expect(p == nullptr, 0))                                          \
      p = reinterpret_cast<decltype(&::fn)>(::mapfs::preload::real::Lookup(#fn));   \
    return p;                                                                       \
  }())
