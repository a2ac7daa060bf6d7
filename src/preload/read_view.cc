#include "preload/read_view.h"

#include <sys/mman.h>

#include <atomic>

#include "medium/pool.h"
#include "preload/real.h"

namespace mapfs::preload::read_view {
namespace {

// Set once, never unmapped (wrappers may run during exit; a fork child
// inherits the mapping at the same address).
std::atomic<char*> g_base{nullptr};
std::atomic<uint64_t> g_size{0};

}  // namespace

char* At(const medium::Pool& pool, uint64_t pool_off, uint64_t len) {
  uint64_t size = pool.size();
  if (len == 0 || pool_off > size || len > size - pool_off) return nullptr;
  char* base = g_base.load(std::memory_order_acquire);
  if (base == nullptr) {
    // Racing threads may both map it; one keeps its view, the other drops
    // its own. MAP_SHARED of the pool file: the pages every process writes.
    void* m = REAL(mmap)(nullptr, size, PROT_READ, MAP_SHARED, pool.fd(), 0);
    if (m == MAP_FAILED) return nullptr;
    char* mine = static_cast<char*>(m);
    g_size.store(size, std::memory_order_relaxed);
    if (g_base.compare_exchange_strong(base, mine, std::memory_order_acq_rel)) {
      base = mine;
    } else {
      REAL(munmap)(m, size);
    }
  }
  if (size > g_size.load(std::memory_order_relaxed)) return nullptr;
  return base + pool_off;
}

bool Meets(const void* p, size_t len) {
  char* base = g_base.load(std::memory_order_acquire);
  if (base == nullptr) return false;
  auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base);
  uint64_t size = g_size.load(std::memory_order_relaxed);
  return a < b + size && a + len > b;
}

}  // namespace mapfs::preload::read_view
