#include "vm/fault.h"

#include <signal.h>

#include <atomic>
#include <mutex>

#include "vm/vm.h"

namespace mapfs::vm {
namespace {

constexpr int kMaxRegions = 64;
std::atomic<Vm*> regions[kMaxRegions];
struct sigaction previous;
std::once_flag installed;
int install_error = 0;

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

void Install() {
  struct sigaction sa {};
  sa.sa_sigaction = OnSegv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &previous) != 0) install_error = errno;
}

}  // namespace

Status RegisterFaultRegion(Vm* vm) {
  std::call_once(installed, Install);
  if (install_error != 0) return Status::Error(install_error, "cannot install the SIGSEGV handler");
  for (auto& r : regions) {
    Vm* expect = nullptr;
    if (r.compare_exchange_strong(expect, vm)) return Status::Ok();
  }
  return Status::Error(EMFILE, "too many open pools in one process");
}

void UnregisterFaultRegion(Vm* vm) {
  for (auto& r : regions) {
    Vm* expect = vm;
    r.compare_exchange_strong(expect, nullptr);
  }
}

}  // namespace mapfs::vm
