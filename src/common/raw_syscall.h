// The kernel's system calls by number, never through an interposed
// syscall(): the shim exports syscall() so that a program's raw calls reach
// mapfs (a raw read of a virtualized file gives its content), and the
// library's own raw calls (the fault handler's mprotect of a tracked view,
// madvise of a view, futexes, getdents64 of /proc/self/fd) must not come
// back into those wrappers: inside a fault handler that would wait on the
// handler itself.
#pragma once

#include <cerrno>

#if !defined(__x86_64__)
#error "RawSyscall is written for x86-64 (the registers of its system call convention)"
#endif

namespace mapfs {

// Result of system call `n`, or -1 with errno set, as syscall() returns it.
inline long RawSyscall(long n, long a0 = 0, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0) {
  long r;
  register long r10 asm("r10") = a3;
  register long r8 asm("r8") = a4;
  register long r9 asm("r9") = a5;
  asm volatile("syscall"
               : "=a"(r)
               : "a"(n), "D"(a0), "S"(a1), "d"(a2), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  if (r < 0 && r > -4096) {
    errno = static_cast<int>(-r);
    return -1;
  }
  return r;
}

}  // namespace mapfs
