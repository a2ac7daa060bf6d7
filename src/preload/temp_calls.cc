// Temporary names (mkstemp and friends). glibc makes them with its own
// internal open/mkdir/lstat, which the shim cannot see, so templates under
// the mount are filled in here and created with the shim's calls.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "preload/calls.h"

namespace mapfs::preload {
namespace {

constexpr char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

// Tries names for `tmpl` (ending in XXXXXX then `suffix` bytes) until `make`
// succeeds or fails with something other than EEXIST.
template <typename Make>
int Generate(char* tmpl, int suffix, Make make) {
  size_t len = std::strlen(tmpl);
  if (suffix < 0 || len < 6 + static_cast<size_t>(suffix) ||
      std::memcmp(tmpl + len - suffix - 6, "XXXXXX", 6) != 0)
    return FailErrno(EINVAL);
  char* x = tmpl + len - suffix - 6;
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(::getpid())};
  for (int attempt = 0; attempt < 10000; attempt++) {
    uint64_t r = rng();
    for (int i = 0; i < 6; i++, r /= 62) x[i] = kLetters[r % 62];
    int rc = make(tmpl);
    if (rc >= 0 || errno != EEXIST) return rc;
  }
  return FailErrno(EEXIST);
}

bool UnderMount(const char* tmpl) { return tmpl != nullptr && MapfsPath(AT_FDCWD, tmpl).mapfs; }

int MakeFile(char* tmpl, int suffix, int flags) {
  flags &= O_APPEND | O_CLOEXEC | O_SYNC | O_DSYNC | O_NOATIME;
  return Generate(tmpl, suffix, [&](char* p) { return ::open(p, O_RDWR | O_CREAT | O_EXCL | flags, 0600); });
}

}  // namespace
}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

MAPFS_EXPORT int mkstemp(char* tmpl) { return UnderMount(tmpl) ? MakeFile(tmpl, 0, 0) : REAL(mkstemp)(tmpl); }
MAPFS_EXPORT int mkstemp64(char* tmpl) { return mkstemp(tmpl); }
MAPFS_EXPORT int mkostemp(char* tmpl, int flags) {
  return UnderMount(tmpl) ? MakeFile(tmpl, 0, flags) : REAL(mkostemp)(tmpl, flags);
}
MAPFS_EXPORT int mkostemp64(char* tmpl, int flags) { return mkostemp(tmpl, flags); }
MAPFS_EXPORT int mkstemps(char* tmpl, int suffix) {
  return UnderMount(tmpl) ? MakeFile(tmpl, suffix, 0) : REAL(mkstemps)(tmpl, suffix);
}
MAPFS_EXPORT int mkstemps64(char* tmpl, int suffix) { return mkstemps(tmpl, suffix); }
MAPFS_EXPORT int mkostemps(char* tmpl, int suffix, int flags) {
  return UnderMount(tmpl) ? MakeFile(tmpl, suffix, flags) : REAL(mkostemps)(tmpl, suffix, flags);
}
MAPFS_EXPORT int mkostemps64(char* tmpl, int suffix, int flags) { return mkostemps(tmpl, suffix, flags); }
MAPFS_EXPORT char* mkdtemp(char* tmpl) {
  if (!UnderMount(tmpl)) return REAL(mkdtemp)(tmpl);
  return Generate(tmpl, 0, [](char* p) { return ::mkdir(p, 0700); }) == 0 ? tmpl : nullptr;
}
