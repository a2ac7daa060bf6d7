// Linked only into libmapfs-preload-traced.so, a copy of the LD_PRELOAD shim
// that kill_test.cc's ShimNthFence runs programs under: with
// MAPFS_TEST_EXIT_AT_FENCE=N in the environment, the process _exits with
// status 42 at its Nth store fence (counted from its start), as if killed
// right there.
#include <unistd.h>

#include <cstdlib>

#include "medium/trace.h"

namespace {

class FenceExit : public mapfs::medium::TraceHook {
 public:
  explicit FenceExit(long n) : n_(n) {}
  void OnStore(const void*, size_t) override {}
  void OnFlush(const void*, size_t) override {}
  void OnFence() override {
    if (++seen_ == n_) _exit(42);
  }

 private:
  long n_;
  long seen_ = 0;
};

__attribute__((constructor)) void InstallFenceExit() {
  const char* n = std::getenv("MAPFS_TEST_EXIT_AT_FENCE");
  if (n == nullptr || std::atol(n) <= 0) return;
  static FenceExit hook(std::atol(n));
  mapfs::medium::SetTraceHook(&hook);
}

}  // namespace
