// The SIGSEGV handler that maps region pages on first touch (lazy fault-in).
//
// One process-wide handler serves every open Vm. A fault outside every
// region, or one the Vm cannot serve (pool full), is passed to the handler
// the application had installed before (or to the default action).
#pragma once

#include "common/status.h"

namespace mapfs::vm {

class Vm;

Status RegisterFaultRegion(Vm* vm);
void UnregisterFaultRegion(Vm* vm);
// In the child of fork(): re-creates the installer's lock, which a thread
// of the parent may have held at the fork.
void ResetFaultHandlerAfterFork();

}  // namespace mapfs::vm
