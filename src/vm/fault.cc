#include "vm/fault.h"

#include <signal.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "vm/vm.h"

namespace mapfs::vm {
namespace {

constexpr int kMaxRegions = 64;
std::atomic<Vm*> regions[kMaxRegions];
struct sigaction previous;
std::mutex install_mu;

void Chain(int sig, siginfo_t* info, void* uctx) {
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != nullptr) {
      previous.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  // Default action: restore it and return; the faulting instruction runs
  // again and the kernel delivers the signal with its default effect.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
}

void OnSegv(int sig, siginfo_t* info, void* uctx) {
  int saved_errno = errno;
  void* addr = info->si_addr;
  for (auto& r : regions) {
    Vm* vm = r.load(std::memory_order_acquire);
    if (vm != nullptr && vm->Contains(addr)) {
      if (vm->HandleFault(addr)) {
        errno = saved_errno;
        return;
      }
      break;
    }
  }
  errno = saved_errno;
  Chain(sig, info, uctx);
}

// Installs the handler unless it is already the current one. An
// application that installed its own handler since (replacing ours) becomes
// the one we chain to.
int Install() {
  std::lock_guard<std::mutex> g(install_mu);
  struct sigaction cur {};
  if (sigaction(SIGSEGV, nullptr, &cur) != 0) return errno;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == OnSegv) return 0;
  struct sigaction sa {};
  sa.sa_sigaction = OnSegv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  struct sigaction old {};
  if (sigaction(SIGSEGV, &sa, &old) != 0) return errno;
  previous = old;
  return 0;
}

}  // namespace

Status RegisterFaultRegion(Vm* vm) {
  if (int err = Install(); err != 0) return Status::Error(err, "cannot install the SIGSEGV handler");
  for (auto& r : regions) {
    Vm* expect = nullptr;
    if (r.compare_exchange_strong(expect, vm)) return Status::Ok();
  }
  return Status::Error(EMFILE, "too many open pools in one process");
}

void ResetFaultHandlerAfterFork() { std::construct_at(&install_mu); }

void UnregisterFaultRegion(Vm* vm) {
  for (auto& r : regions) {
    Vm* expect = vm;
    r.compare_exchange_strong(expect, nullptr);
  }
}

}  // namespace mapfs::vm
