// The regions the fault handler serves (the handler itself and the
// program's view are in fault_signals.cc).
#include "vm/fault.h"

#include <atomic>

#include "vm/vm.h"

namespace mapfs::vm {

namespace {

constexpr int kMaxRegions = 64;
std::atomic<Vm*> regions[kMaxRegions];
constexpr int kMaxServers = 8;
std::atomic<FaultServer> servers[kMaxServers];

}  // namespace

bool ServeRegionFault(void* addr) {
  for (auto& r : regions) {
    Vm* vm = r.load(std::memory_order_acquire);
    if (vm != nullptr && vm->Contains(addr)) return vm->HandleFault(addr);
  }
  return false;
}

bool ServeFault(void* addr) {
  if (ServeRegionFault(addr)) return true;
  for (auto& s : servers) {
    FaultServer fn = s.load(std::memory_order_acquire);
    if (fn == nullptr) break;  // filled in order, never emptied
    if (fn(addr)) return true;
  }
  return false;
}

Status RegisterFaultServer(FaultServer fn) {
  if (int err = OwnFaultSignals(); err != 0) return Status::Error(err, "cannot install the SIGSEGV/SIGBUS handler");
  for (auto& s : servers) {
    FaultServer expect = nullptr;
    if (s.compare_exchange_strong(expect, fn, std::memory_order_acq_rel) || expect == fn) return Status::Ok();
  }
  return Status::Error(EMFILE, "too many fault servers");
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
