#include "medium/protection.h"

#include <cpuid.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/log.h"

namespace mapfs::medium::protection {

namespace detail {
std::atomic<uint32_t> key_bits{0};
std::atomic<uint32_t> closed_bits{0};
thread_local int depth __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace detail

namespace {

constexpr uint32_t kAccessDisable = 1, kWriteDisable = 2;  // PKRU bits per key

std::mutex enable_mu;
std::atomic<State> state{State::kUnused};
std::atomic<int> key{-1};

bool EnvOff() {
  const char* e = std::getenv("MAPFS_PKEYS");
  return e != nullptr && (std::strcmp(e, "0") == 0 || std::strcmp(e, "off") == 0 || std::strcmp(e, "no") == 0);
}

}  // namespace

bool CpuHasPkeys() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  // ECX bit 3: PKU (the CPU has keys); bit 4: OSPKE (the kernel turned them on).
  return (c & (1u << 3)) && (c & (1u << 4));
}

State Enable() {
  std::lock_guard<std::mutex> g(enable_mu);
  State s = state.load();
  if (s != State::kUnused) return s;
  if (EnvOff()) {
    s = State::kOffByEnv;
  } else if (!CpuHasPkeys()) {
    s = State::kNoCpu;
  } else {
    // Write-disabled for this thread from now on; the key is never freed
    // (mappings tagged with it may outlive any one mount).
    int k = ::pkey_alloc(0, PKEY_DISABLE_WRITE);
    if (k < 0) {
      s = State::kNoKey;
    } else {
      key.store(k);
      detail::closed_bits.store(kWriteDisable << (2 * k));
      detail::key_bits.store((kAccessDisable | kWriteDisable) << (2 * k));
      s = State::kOn;
    }
  }
  state.store(s);
  MAPFS_LOG("mapfs: protection keys: %s\n", Describe(s));
  return s;
}

State Probe() {
  if (EnvOff()) return State::kOffByEnv;
  if (!CpuHasPkeys()) return State::kNoCpu;
  int k = ::pkey_alloc(0, 0);
  if (k < 0) return State::kNoKey;
  ::pkey_free(k);
  return State::kOn;
}

State Current() { return state.load(); }
int Key() { return key.load(std::memory_order_relaxed); }

const char* Describe(State s) {
  switch (s) {
    case State::kUnused:
      return "not in use by this front";
    case State::kOn:
      return "on (the pool is write-protected outside mapfs calls)";
    case State::kOffByEnv:
      return "off (MAPFS_PKEYS=0)";
    case State::kNoCpu:
      return "off (the CPU or the kernel offers no protection keys: no pku/ospke)";
    case State::kNoKey:
      return "off (pkey_alloc failed: the kernel has no pkeys or none is free)";
  }
  return "?";
}

Status Tag(void* addr, size_t len, int prot) {
  int k = Key();
  if (k < 0 || len == 0) return Status::Ok();
  if (::pkey_mprotect(addr, len, prot, k) != 0) return Status::FromErrno("pkey_mprotect");
  return Status::Ok();
}

Status Untag(void* addr, size_t len, int prot) {
  if (Key() < 0 || len == 0) return Status::Ok();
  if (::pkey_mprotect(addr, len, prot, 0) != 0) return Status::FromErrno("pkey_mprotect (key 0)");
  return Status::Ok();
}

}  // namespace mapfs::medium::protection
