#include "preload/cwd_env.h"

#include <stdlib.h>

#include <cstring>
#include <mutex>

namespace mapfs::preload {
namespace {

constexpr char kName[] = "MAPFS_CWD=";
constexpr size_t kNameLen = sizeof kName - 1;

// Two buffers, written in turn: the one `environ` points at is never
// written while it is published, so a thread reading the environment
// (getenv, or an exec copying it) during a chdir sees the old value or the
// new one, never a mix. A buffer that is too small is replaced by one at
// least twice its size and the old one is kept, not freed: a concurrent
// exec may still be reading it. The kept ones sum to less than the live
// ones, so the total stays within a small multiple of the longest value.
struct Slot {
  char* buf = nullptr;
  size_t cap = 0;
};
std::mutex g_mu;
Slot g_slot[2];
int g_cur = 0;

}  // namespace

void SetCwdEnv(std::string_view value) {
  std::lock_guard<std::mutex> g(g_mu);
  Slot& s = g_slot[1 - g_cur];
  size_t need = kNameLen + value.size() + 1;
  if (need > s.cap) {
    size_t cap = s.cap * 2 > need ? s.cap * 2 : need;
    if (cap < 256) cap = 256;
    char* b = static_cast<char*>(std::malloc(cap));
    if (b == nullptr) return;  // the environment keeps the old value: a new image may then lose the cwd
    s.buf = b;  // the old buffer is deliberately kept (see above)
    s.cap = cap;
  }
  std::memcpy(s.buf, kName, kNameLen);
  std::memcpy(s.buf + kNameLen, value.data(), value.size());
  s.buf[kNameLen + value.size()] = '\0';
  if (::putenv(s.buf) != 0) return;
  g_cur = 1 - g_cur;
}

void ClearCwdEnv() {
  std::lock_guard<std::mutex> g(g_mu);
  ::unsetenv("MAPFS_CWD");
}

}  // namespace mapfs::preload
