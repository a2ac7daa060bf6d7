// SIGSEGV and SIGBUS: the handler that maps region pages on first touch
// (lazy fault-in), and the program's own actions for those signals.
//
// One process-wide handler serves every open Vm. From the first Vm::Open on,
// mapfs's handler stays installed in the kernel for SIGSEGV and SIGBUS, and
// what the program installs for them is recorded instead ("the program's
// view", fault_signals.cc): a fault on a region page mapfs can map is
// served and never seen by the program; every other one (outside every
// region, a region fault the Vm cannot serve such as a full pool, any
// SIGBUS, a signal sent with kill) is passed on as the kernel would have
// delivered it under the program's view: its handler with its flags and
// mask, or the default action, which kills the process with that signal.
//
// The view is changed only through ProgramSigaction, which the LD_PRELOAD
// shim's sigaction/signal/... wrappers call. A program using the C API
// (no shim) that installs its own SIGSEGV handler after mounting replaces
// mapfs's in the kernel; the next Vm::Open takes it back and records it.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace mapfs::vm {

class Vm;

Status RegisterFaultRegion(Vm* vm);
void UnregisterFaultRegion(Vm* vm);
// In the child of fork(): releases the view's writer if a thread of the
// parent held it at the fork (the record is then completed from the value
// being written). Harmless to call when nothing was held.
void ResetFaultHandlerAfterFork();

// Between fault.cc (the regions) and fault_signals.cc (the handler):
// ServeRegionFault is true if `addr` lies in an open Vm's region and that
// Vm mapped it (the faulting access may run again); OwnFaultSignals makes
// mapfs's handler the kernel's for SIGSEGV and SIGBUS (once, and again if
// the program replaced it without the shim), returning 0 or an errno.
bool ServeRegionFault(void* addr);
int OwnFaultSignals();

// Fault servers beside the regions: memory of mapfs's outside every pool
// (the virtual overlay engine's write-protected maps, overlay/virtual/
// vtrack.h) whose faults the handler must serve too. A server is called
// for a kernel-raised SIGSEGV (not SEGV_PKUERR) at an address in no open
// Vm's region, on any thread, with any lock of the interrupted code held:
// it must be async-signal-safe and lock-free, and return true only if the
// faulting access may run again (it made the page accessible), false to
// pass the fault on to the program. RegisterFaultServer installs the
// handler (OwnFaultSignals) and adds `fn` once (a second call with the same
// function is a no-op); servers are never removed. ServeFault: the regions,
// then the servers.
using FaultServer = bool (*)(void* addr);
Status RegisterFaultServer(FaultServer fn);
bool ServeFault(void* addr);

// ---------------------------------------------------------------- the program's view

// A signal action as the kernel keeps it: the layout of rt_sigaction(2)'s
// struct (x86-64, arm64), so a raw syscall's argument can be used as is.
struct KernelSigaction {
  uintptr_t handler;   // SIG_DFL (0), SIG_IGN (1) or a function
  uint64_t flags;      // SA_* (Linux uapi values)
  uintptr_t restorer;  // with SA_RESTORER
  uint64_t mask;       // signals 1..64, bit (sig - 1)
};
static_assert(sizeof(KernelSigaction) == 32, "rt_sigaction's struct on LP64");

// Signals whose action the program's view holds: SIGSEGV and SIGBUS.
bool IsFaultSignal(int sig);

// rt_sigaction(sig, act, old) as the kernel would answer it, for a fault
// signal (IsFaultSignal). Before any Vm was opened the call reaches the
// kernel through the C library; from then on it reads and changes the
// program's view only (and the flags mapfs's handler mirrors from it:
// SA_ONSTACK, SA_RESTART and the mask). `libc`: the call came through the
// C library's sigaction, which sets SA_RESTORER and its own restorer, as
// the view then records. Flags are reduced to the uapi bits, SIGKILL and
// SIGSTOP removed from the mask, as the kernel does. Returns 0 or an errno.
// Async-signal-safe (a program's handler may call it).
int ProgramSigaction(int sig, const KernelSigaction* act, KernelSigaction* old, bool libc);

// Around exec: a new image inherits only ignored dispositions (handled
// ones become SIG_DFL), so where the view ignores a fault signal the kernel
// is set to ignore it before exec; AfterFailedExec puts mapfs's handler
// back.
void BeforeExec();
void AfterFailedExec();

}  // namespace mapfs::vm
