// stdio on mapfs descriptors. glibc's own FILE objects do their I/O with
// internal system calls the shim cannot see, so a stream on a mapfs file is
// a real glibc FILE made by fopencookie whose callbacks are the shim's
// read/write/lseek/close. When descriptor 0, 1 or 2 becomes a mapfs file
// (a shell redirect, or one inherited across exec), the stdin/stdout/stderr
// variables are pointed at such a stream for that number (it forwards to
// whatever the number is later, kernel or mapfs, so the switch is for good).
#pragma once

#include <stdio.h>

namespace mapfs::preload {

void RedirectStdStream(int fd);

}  // namespace mapfs::preload
