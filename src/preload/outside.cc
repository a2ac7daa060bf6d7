// The kernel's side of a path that left the pool (outside.h).
#include "preload/outside.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload/real.h"

namespace mapfs::preload {

int WalkOutside(const std::string& path, bool follow_last, int* links, std::string* next) {
  const std::string& prefix = Shim::Get().prefix();
  auto under = [&](const std::string& p) {
    return p.size() >= prefix.size() && p.compare(0, prefix.size(), prefix) == 0 &&
           (p.size() == prefix.size() || p[prefix.size()] == '/');
  };
  // done: the walked part, a kernel path without symlinks ("" = "/"), so
  // ".." of it is its lexical parent. todo: the rest, from `pos`.
  std::string done, todo = path;
  size_t pos = 0;
  for (;;) {
    size_t b = todo.find_first_not_of('/', pos);
    if (b == std::string::npos) break;
    size_t e = std::min(todo.find('/', b), todo.size());
    std::string c = todo.substr(b, e - b);
    pos = e;
    bool last = todo.find_first_not_of('/', e) == std::string::npos;
    if (c == ".") continue;
    if (c == "..") {
      size_t k = done.rfind('/');
      done.resize(k == std::string::npos ? 0 : k);
      continue;
    }
    std::string cand = done + "/" + c;
    if (under(cand)) {  // back into the pool: the core walks the rest
      *next = cand + todo.substr(e);
      return 0;
    }
    if (last && !follow_last) {  // the call judges the last name itself
      *next = cand + todo.substr(e);
      return 0;
    }
    struct stat st;
    bool ok = REAL(lstat)(cand.c_str(), &st) == 0;
    if (!ok || (!S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode))) {
      // Missing, or a file: the call says what is wrong, or acts on it.
      *next = cand + todo.substr(e);
      return 0;
    }
    if (S_ISDIR(st.st_mode)) {
      done = std::move(cand);
      continue;
    }
    if (++*links > fs::kMaxSymlinks) return ELOOP;
    char t[PATH_MAX];
    ssize_t n = REAL(readlink)(cand.c_str(), t, sizeof t);
    if (n <= 0) {  // raced away, or an empty target: the call says why
      *next = cand + todo.substr(e);
      return 0;
    }
    if (t[0] == '/') done.clear();
    todo = std::string(t, static_cast<size_t>(n)) + todo.substr(e);
    pos = 0;
  }
  *next = done.empty() ? "/" : done;
  if (path.back() == '/' && *next != "/") *next += '/';
  return 0;
}

}  // namespace mapfs::preload
