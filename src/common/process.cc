#include "common/process.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdio>

namespace mapfs {

namespace {

// The cached mask; -1 until first read. Process-wide, as the umask is.
std::atomic<int> cached_umask{-1};

mode_t UmaskFromProc() {
  unsigned m = 022;
  if (FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[128];
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "Umask: %o", &m) == 1) break;
    std::fclose(f);
  }
  return static_cast<mode_t>(m & 0777);
}

}  // namespace

void RefreshUmask() {
  int c = cached_umask.load(std::memory_order_relaxed);
  mode_t g = c >= 0 ? static_cast<mode_t>(c) : UmaskFromProc();
  mode_t old = ::umask(g);
  if (old != g) ::umask(old);
  cached_umask.store(static_cast<int>(old), std::memory_order_relaxed);
}

mode_t CurrentUmask() {
  int c = cached_umask.load(std::memory_order_relaxed);
  if (__builtin_expect(c < 0, 0)) {
    RefreshUmask();
    c = cached_umask.load(std::memory_order_relaxed);
  }
  return static_cast<mode_t>(c);
}

void NoteUmask(mode_t mask) { cached_umask.store(static_cast<int>(mask & 0777), std::memory_order_relaxed); }

}  // namespace mapfs
