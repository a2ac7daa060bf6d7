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

}  // namespace mapfs::vm
