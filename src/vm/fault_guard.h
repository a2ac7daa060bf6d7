// Copies through shared maps of files that another process may shrink.
//
// A load or store through a MAP_SHARED map of a file, at a page wholly past
// the file's end, raises SIGBUS (BUS_ADRERR). The overlay's split engine
// copies the bytes of read(2) and write(2) through maps of ordinary files,
// which any process may truncate through the kernel while the engine holds
// them open. The kernel's own read and write answer such a call (a short
// count; a write past the end grows the file with a hole); they never kill
// the program. GuardedCopy runs a copy with a per-thread guard armed, and
// mapfs's fault handler (fault_signals.cc) turns a kernel-raised SIGBUS at
// an address inside the copy's source or destination into a return from
// GuardedCopy that says the copy stopped. The caller then learns the file's
// size from the kernel and does what the kernel would.
//
// Any other fault (another address, a SIGBUS sent by a process, SIGSEGV)
// goes where it went before: a guard changes nothing for it.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace mapfs::vm {

using CopyFn = void (*)(void* dst, const void* src, size_t n);

// Makes mapfs's fault handler the kernel's for SIGSEGV and SIGBUS (as the
// first pool mount does), so that a guarded copy can be given back: an
// engine that copies through file maps calls it once before its first
// GuardedCopy. Without it a SIGBUS kills the process as it would without
// mapfs.
Status EnableGuardedCopies();

// Copies `n` bytes from `src` to `dst` with `fn`. False if a SIGBUS at an
// address in [dst, dst + n) or [src, src + n) stopped it: some prefix of
// unknown length was copied, nothing after the fault. The thread's signal
// mask and protection-key rights are as they were at the call either way.
// Not nested: a GuardedCopy inside `fn` copies unguarded. `fn` must hold no
// lock and allocate nothing (it may be abandoned half way).
bool GuardedCopy(void* dst, const void* src, size_t n, CopyFn fn);

// For the fault handler: if this thread is in a GuardedCopy whose ranges
// hold `addr`, continues at its end (false) and does not return; returns
// otherwise. `uctx` is the handler's ucontext (the interrupted code's
// signal mask comes back from it). Async-signal-safe.
void EscapeGuardedCopy(const void* addr, const void* uctx);

}  // namespace mapfs::vm
