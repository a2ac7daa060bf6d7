// Process-wide facts the fronts need and POSIX only offers awkwardly.
#pragma once

#include <sys/types.h>

namespace mapfs {

// The process's umask, which open(O_CREAT) and mkdir apply as the kernel
// does. Cached, like the credentials (fs/cred.h): umask() reads the mask
// only by replacing it, a system call per create (~115 ns on the project's
// VM, where a whole create is meant to cost 1.5 us). The value is read on
// first use and again by RefreshUmask; whoever changes the mask afterwards
// must say so: the shim's umask() wrapper calls NoteUmask, mapfs_mount and
// mapfs_refresh_credentials call RefreshUmask (a program on the C API that
// changes its umask calls the latter, as it does after changing its ids).
mode_t CurrentUmask();
// Reads the process's umask again. It is replaced by the value it most
// likely holds already (the cached one; at first the one /proc reports),
// so in the usual case it never changes, not even for a moment in which
// another thread's kernel create could see a wrong mask.
void RefreshUmask();
// The process's umask is now `mask` (a wrapper of umask() that set it).
void NoteUmask(mode_t mask);

}  // namespace mapfs
