// Process-wide facts the fronts need and POSIX only offers awkwardly.
#pragma once

#include <sys/types.h>

namespace mapfs {

// The process's umask, which open(O_CREAT) and mkdir apply as the kernel
// does. umask() reads it only by replacing it, so it is replaced by the
// value it most likely holds already (the last one seen; at first the one
// /proc reports): in the usual case it never changes, not even for a moment
// in which another thread's kernel create could see a wrong mask.
mode_t CurrentUmask();

}  // namespace mapfs
