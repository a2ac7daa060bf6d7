// SIGSEGV and SIGBUS belong to the core's fault handler (vm/fault.h): the
// C library's ways of setting a signal's action are intercepted for those
// two signals and reach the program's view instead of the kernel, so a
// handler a program installs (Python's faulthandler, GNU diff's stack
// overflow handler, a JVM) never receives mapfs's own page faults, and
// sigaction(sig, NULL, &old) reports what the program installed, never
// mapfs's handler. Every other signal goes to the C library untouched.
// syscall(SYS_rt_sigaction, ...) is routed here by syscall_calls.cc.
//
// Each wrapper builds the action the C library's version would pass to
// rt_sigaction (flags, mask) and lets the core answer as the kernel would.
// The wrappers test no `in_core` and use no shim state: the core never
// calls them, and a program's handler may call them at any time (all are
// async-signal-safe, as the C library's are).
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "preload/calls.h"
#include "vm/fault.h"

// sigset, sigignore and siginterrupt are deprecated in glibc's headers; the
// shim must still stand in for them.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

using namespace mapfs::preload;  // NOLINT: wrapper files only
using mapfs::vm::KernelSigaction;

namespace {

constexpr uint64_t Bit(int sig) { return uint64_t{1} << (sig - 1); }

// siginterrupt's per-signal choice that signal() consults (the C library
// keeps its own for the other signals).
std::atomic<bool> interrupts[2];
std::atomic<bool>& Interrupts(int sig) { return interrupts[sig == SIGSEGV ? 0 : 1]; }

KernelSigaction FromLibc(const struct sigaction& sa) {
  KernelSigaction k{};
  k.handler = reinterpret_cast<uintptr_t>(sa.sa_handler);
  k.flags = static_cast<uint32_t>(sa.sa_flags);
  k.restorer = reinterpret_cast<uintptr_t>(sa.sa_restorer);
  std::memcpy(&k.mask, &sa.sa_mask, sizeof k.mask);  // the kernel's mask: signals 1..64
  return k;
}

// As the C library fills `old` from the kernel's answer: the rest of
// sa_mask beyond the kernel's 64 signals is left as the caller had it.
void ToLibc(const KernelSigaction& k, struct sigaction* sa) {
  sa->sa_handler = reinterpret_cast<sighandler_t>(k.handler);
  sa->sa_flags = static_cast<int>(static_cast<uint32_t>(k.flags));
  sa->sa_restorer = reinterpret_cast<void (*)()>(k.restorer);
  std::memcpy(&sa->sa_mask, &k.mask, sizeof k.mask);
}

int Sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  KernelSigaction k{}, o{};
  if (act != nullptr) k = FromLibc(*act);
  if (int e = mapfs::vm::ProgramSigaction(sig, act ? &k : nullptr, old ? &o : nullptr, true); e != 0)
    return FailErrno(e);
  if (old != nullptr) ToLibc(o, old);
  return 0;
}

// Installs `h` with `flags` and `mask` (a fault signal); the old handler
// or SIG_ERR, as signal() and its relatives return.
sighandler_t SetHandler(int sig, sighandler_t h, uint64_t flags, uint64_t mask) {
  if (h == SIG_ERR) {
    errno = EINVAL;
    return SIG_ERR;
  }
  KernelSigaction k{reinterpret_cast<uintptr_t>(h), flags, 0, mask}, o{};
  if (int e = mapfs::vm::ProgramSigaction(sig, &k, &o, true); e != 0) {
    errno = e;
    return SIG_ERR;
  }
  return reinterpret_cast<sighandler_t>(o.handler);
}

// signal(), bsd_signal(), ssignal(): BSD semantics, as glibc's: the signal
// blocked in its handler, system calls restarted unless siginterrupt said
// otherwise.
sighandler_t BsdSignal(int sig, sighandler_t h) {
  uint64_t flags = Interrupts(sig).load(std::memory_order_relaxed) ? 0 : static_cast<uint32_t>(SA_RESTART);
  return SetHandler(sig, h, flags, Bit(sig));
}

// sysv_signal(): one-shot, not blocked in its handler, no restart (glibc
// also passes SA_INTERRUPT, a bit the kernel drops).
sighandler_t SysvSignal(int sig, sighandler_t h) {
  return SetHandler(sig, h, static_cast<uint32_t>(SA_RESETHAND) | static_cast<uint32_t>(SA_NODEFER), 0);
}

}  // namespace

MAPFS_EXPORT int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (!mapfs::vm::IsFaultSignal(sig)) return REAL(sigaction)(sig, act, old);
  return Sigaction(sig, act, old);
}

MAPFS_EXPORT int __sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  return sigaction(sig, act, old);
}

MAPFS_EXPORT sighandler_t signal(int sig, sighandler_t h) {
  if (!mapfs::vm::IsFaultSignal(sig)) return REAL(signal)(sig, h);
  return BsdSignal(sig, h);
}

MAPFS_EXPORT sighandler_t bsd_signal(int sig, sighandler_t h) { return signal(sig, h); }

MAPFS_EXPORT sighandler_t ssignal(int sig, sighandler_t h) { return signal(sig, h); }

MAPFS_EXPORT sighandler_t sysv_signal(int sig, sighandler_t h) {
  if (!mapfs::vm::IsFaultSignal(sig)) return REAL(sysv_signal)(sig, h);
  return SysvSignal(sig, h);
}

MAPFS_EXPORT sighandler_t __sysv_signal(int sig, sighandler_t h) { return sysv_signal(sig, h); }

// sigset(): SIG_HOLD blocks the signal; any other disposition is installed
// (flags 0, empty mask) and the signal unblocked. Returns SIG_HOLD when the
// signal was blocked before, else the old handler (glibc's order of steps).
MAPFS_EXPORT sighandler_t sigset(int sig, sighandler_t disp) {
  if (!mapfs::vm::IsFaultSignal(sig)) return REAL(sigset)(sig, disp);
  sigset_t one, before;
  sigemptyset(&one);
  sigaddset(&one, sig);
  if (disp == SIG_HOLD) {
    if (sigprocmask(SIG_BLOCK, &one, &before) != 0) return SIG_ERR;
    if (sigismember(&before, sig)) return SIG_HOLD;
    struct sigaction o;
    if (Sigaction(sig, nullptr, &o) != 0) return SIG_ERR;
    return o.sa_handler;
  }
  sighandler_t old = SetHandler(sig, disp, 0, 0);
  if (old == SIG_ERR) return SIG_ERR;
  if (sigprocmask(SIG_UNBLOCK, &one, &before) != 0) return SIG_ERR;
  return sigismember(&before, sig) ? SIG_HOLD : old;
}

MAPFS_EXPORT int sigignore(int sig) {
  if (!mapfs::vm::IsFaultSignal(sig)) return REAL(sigignore)(sig);
  return SetHandler(sig, SIG_IGN, 0, 0) == SIG_ERR ? -1 : 0;
}

// siginterrupt(): toggles SA_RESTART of the current action and remembers
// the choice for later signal() calls.
MAPFS_EXPORT int siginterrupt(int sig, int flag) {
  if (!mapfs::vm::IsFaultSignal(sig)) return REAL(siginterrupt)(sig, flag);
  struct sigaction a;
  if (Sigaction(sig, nullptr, &a) != 0) return -1;
  Interrupts(sig).store(flag != 0, std::memory_order_relaxed);
  if (flag != 0)
    a.sa_flags &= ~SA_RESTART;
  else
    a.sa_flags |= SA_RESTART;
  return Sigaction(sig, &a, nullptr);
}
