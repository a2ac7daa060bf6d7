#include "preload/path_limits.h"

#include <limits.h>

#include <string>

namespace mapfs::preload {

void KeepLengthVerdict(Route* r, size_t len) {
  if (len < PATH_MAX) return;
  if (!r->mapfs) {
    r->path.clear();  // the kernel measures the caller's string
    return;
  }
  // A relative pool route carries the caller's string as is; an absolute
  // one lost the prefix. Leading slashes do not change what it names.
  if (!r->path.empty() && r->path[0] == '/' && r->path.size() < PATH_MAX)
    r->path.insert(0, PATH_MAX - r->path.size(), '/');
}

Result<uint64_t> LookupAnyLength(fs::FileSystem* f, std::string_view path) {
  uint64_t at = 0;  // 0: the pool root, for an absolute first piece
  constexpr size_t kPiece = PATH_MAX - 1;
  while (path.size() > kPiece) {
    // Cut at the last '/' that keeps the piece short enough; a name is at
    // most NAME_MAX bytes, so there is one (else the core says ENAMETOOLONG).
    size_t cut = path.rfind('/', kPiece);
    if (cut == std::string_view::npos || cut == 0) return f->Lookup(path, true, at);
    auto ino = f->Lookup(path.substr(0, cut), true, at);
    if (!ino.ok()) return ino;
    at = *ino;
    path.remove_prefix(cut);
    while (!path.empty() && path[0] == '/') path.remove_prefix(1);
    if (path.empty()) return at;
  }
  return f->Lookup(path, true, at);
}

}  // namespace mapfs::preload
