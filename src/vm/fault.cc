// The regions the fault handler serves (the handler itself and the
// program's view are in fault_signals.cc).
#include "vm/fault.h"

#include <atomic>

#include "vm/vm.h"

namespace mapfs::vm {

namespace {

constexpr int kMaxRegions = 64;
std::atomic<Vm*> regions[kMaxRegions];

}  // namespace

bool ServeRegionFault(void* addr) {
  for (auto& r : regions) {
    Vm* vm = r.load(std::memory_order_acquire);
    if (vm != nullptr && vm->Contains(addr)) return vm->HandleFault(addr);
  }
  return false;
}

Status RegisterFaultRegion(Vm* vm) {
  if (int err = OwnFaultSignals(); err != 0) return Status::Error(err, "cannot install the SIGSEGV/SIGBUS handler");
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
