// SIGSEGV and SIGBUS: mapfs's handler in the kernel, the program's actions
// in a record (the program's view; see fault.h).
//
// The view is read in the signal handler, on any thread, while another
// thread may change it (a program's sigaction, or SA_RESETHAND taking
// effect in a handler): a seqlock per signal. Readers take no lock and
// never wait for one another. Writers exclude one another through
// `writer` (the writing process's pid) and write with every signal
// blocked, so no handler runs on a thread in the middle of its write and
// a write never waits for a handler interrupting its own thread.
//
// A fork can catch another thread's write half done: in the child the
// writer is the parent's pid, which no thread of the child will release.
// Whoever finds it so (a writer, or a reader finding the sequence odd)
// takes it over and completes the record from `pending`, the value being
// written, which is stored before the sequence turns odd. (A child that
// shares the parent's memory would take over a live writer: under the
// shim vfork() is fork(), and nothing here runs in glibc's posix_spawn
// child.)
//
// Everything here is async-signal-safe: atomics, sigaction, sigprocmask,
// getpid, raise.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "medium/protection.h"
#include "vm/fault.h"
#include "vm/fault_guard.h"

namespace mapfs::vm {
namespace {

constexpr uint64_t Bit(int sig) { return uint64_t{1} << (sig - 1); }
constexpr uint64_t Flag(int f) { return static_cast<uint32_t>(f); }

// Linux's uapi flag values the C library does not name.
constexpr uint64_t kSaRestorer = 0x04000000;
constexpr uint64_t kSaExposeTagbits = 0x800;
// The flags rt_sigaction keeps (the kernel clears any other bit).
constexpr uint64_t kUapiFlags = Flag(SA_NOCLDSTOP) | Flag(SA_NOCLDWAIT) | Flag(SA_SIGINFO) | Flag(SA_ONSTACK) |
                                Flag(SA_RESTART) | Flag(SA_NODEFER) | Flag(SA_RESETHAND) | kSaExposeTagbits |
                                kSaRestorer;
// Signals a handler's mask never holds.
constexpr uint64_t kUnblockable = Bit(SIGKILL) | Bit(SIGSTOP);

constexpr uintptr_t kDfl = 0, kIgn = 1;  // SIG_DFL, SIG_IGN
constexpr int kSignals[2] = {SIGSEGV, SIGBUS};
int Slot(int sig) { return sig == SIGSEGV ? 0 : sig == SIGBUS ? 1 : -1; }

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The C library's sigaction (under the shim, ::sigaction is the shim's
// wrapper, which comes back here). Found on first use, not in a static
// initialiser; the first use is Vm::Open or a program's first sigaction
// for a fault signal, in the program's normal flow.
using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
std::atomic<SigactionFn> real_sigaction{nullptr};

SigactionFn Real() {
  SigactionFn f = real_sigaction.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = reinterpret_cast<SigactionFn>(::dlsym(RTLD_NEXT, "sigaction"));
    if (f == nullptr) f = &::sigaction;  // nothing after us: ::sigaction is the C library's
    real_sigaction.store(f, std::memory_order_release);
  }
  return f;
}

struct Record {
  std::atomic<uint32_t> seq{0};          // odd while a write is under way
  std::atomic<uint64_t> word[4] = {};    // handler, flags, restorer, mask
  std::atomic<uint64_t> pending[4] = {};  // the value being written
};
Record records[2];
// Whether mapfs's handler holds the signal in the kernel (from the first
// Vm::Open on): the view is then the program's only record of its action.
std::atomic<bool> owned[2];
std::atomic<pid_t> writer{0};
// The C library's signal trampoline (sa_restorer), as its sigaction
// reports it; a view set through the C library records it.
std::atomic<uintptr_t> libc_restorer{0};

void Pack(const KernelSigaction& a, uint64_t w[4]) {
  w[0] = a.handler;
  w[1] = a.flags;
  w[2] = a.restorer;
  w[3] = a.mask;
}
KernelSigaction Unpack(const uint64_t w[4]) { return KernelSigaction{w[0], w[1], w[2], w[3]}; }

struct sigaction ToLibc(const KernelSigaction& k) {
  struct sigaction sa {};
  sa.sa_handler = reinterpret_cast<sighandler_t>(k.handler);
  sa.sa_flags = static_cast<int>(static_cast<uint32_t>(k.flags));
  sa.sa_restorer = reinterpret_cast<void (*)()>(k.restorer);
  sigemptyset(&sa.sa_mask);
  std::memcpy(&sa.sa_mask, &k.mask, sizeof k.mask);  // signals 1..64: the first word
  return sa;
}

KernelSigaction FromLibc(const struct sigaction& sa) {
  KernelSigaction k{};
  k.handler = reinterpret_cast<uintptr_t>(sa.sa_handler);
  k.flags = static_cast<uint32_t>(sa.sa_flags);
  k.restorer = reinterpret_cast<uintptr_t>(sa.sa_restorer);
  std::memcpy(&k.mask, &sa.sa_mask, sizeof k.mask);
  return k;
}

// Completes every record a write left odd (needs `writer`).
void Repair() {
  for (Record& r : records) {
    uint32_t s = r.seq.load(std::memory_order_acquire);
    if ((s & 1) == 0) continue;
    for (int i = 0; i < 4; i++) r.word[i].store(r.pending[i].load(std::memory_order_relaxed), std::memory_order_release);
    r.seq.store(s + 1, std::memory_order_release);
  }
}

// A writer no thread of this process will release: one of the process
// this one was forked from (the threads of a process share its pid).
bool Stale(pid_t holder) { return holder != 0 && holder != ::getpid(); }

// Holds `writer` with every signal blocked.
class WriterScope {
 public:
  WriterScope() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &saved_);
    pid_t me = ::getpid();
    for (;;) {
      pid_t cur = 0;
      if (writer.compare_exchange_weak(cur, me, std::memory_order_acquire)) return;
      if (Stale(cur) && writer.compare_exchange_strong(cur, me, std::memory_order_acquire)) {
        Repair();
        return;
      }
      CpuRelax();
    }
  }
  ~WriterScope() {
    writer.store(0, std::memory_order_release);
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  WriterScope(const WriterScope&) = delete;
  WriterScope& operator=(const WriterScope&) = delete;

 private:
  sigset_t saved_;
};

// Needs `writer`.
KernelSigaction ReadLocked(int slot) {
  uint64_t w[4];
  for (int i = 0; i < 4; i++) w[i] = records[slot].word[i].load(std::memory_order_relaxed);
  return Unpack(w);
}

// Needs `writer`. pending before the odd sequence, the odd sequence
// before each word (release stores), so a reader that saw any new word
// sees the sequence changed.
void WriteLocked(int slot, const KernelSigaction& a) {
  Record& r = records[slot];
  uint64_t w[4];
  Pack(a, w);
  for (int i = 0; i < 4; i++) r.pending[i].store(w[i], std::memory_order_relaxed);
  uint32_t s = r.seq.load(std::memory_order_relaxed);
  r.seq.store(s + 1, std::memory_order_release);
  for (int i = 0; i < 4; i++) r.word[i].store(w[i], std::memory_order_release);
  r.seq.store(s + 2, std::memory_order_release);
}

// Lock-free read: retried while a write runs or ran meanwhile.
KernelSigaction Read(int slot) {
  Record& r = records[slot];
  for (;;) {
    uint32_t s1 = r.seq.load(std::memory_order_acquire);
    if (s1 & 1) {
      if (Stale(writer.load(std::memory_order_relaxed))) {
        WriterScope take_over;  // completes the record
      } else {
        CpuRelax();
      }
      continue;
    }
    uint64_t w[4];
    for (int i = 0; i < 4; i++) w[i] = r.word[i].load(std::memory_order_acquire);
    if (r.seq.load(std::memory_order_acquire) == s1) return Unpack(w);
  }
}

void OnFault(int sig, siginfo_t* info, void* uctx);

bool IsOurs(const struct sigaction& sa) { return (sa.sa_flags & SA_SIGINFO) && sa.sa_sigaction == OnFault; }

// Makes the kernel's action mapfs's handler with what it mirrors of the
// view: SA_ONSTACK (runs on the program's alternate stack, where a stack
// overflow can be reported), SA_RESTART (a kill()ed SIGSEGV interrupts
// system calls as the program asked) and the mask. Always SA_NODEFER: the
// signal itself is blocked, or not, in PassOn as the view says. Needs
// `writer`. 0 or an errno.
int InstallLocked(int sig, const KernelSigaction& view) {
  struct sigaction sa {};
  sa.sa_sigaction = OnFault;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | static_cast<int>(view.flags & Flag(SA_ONSTACK | SA_RESTART));
  sigemptyset(&sa.sa_mask);
  std::memcpy(&sa.sa_mask, &view.mask, sizeof view.mask);
  return Real()(sig, &sa, nullptr) == 0 ? 0 : errno;
}

// A fault raised by the kernel at the faulting instruction, which faults
// again when it runs again (BUS_MCEERR_AO reports memory found bad
// elsewhere, asynchronously; si_code <= 0: sent by a process).
bool Synchronous(int sig, const siginfo_t* info) {
  if (info == nullptr || info->si_code <= 0) return false;
  return !(sig == SIGBUS && info->si_code == BUS_MCEERR_AO);
}

// The default action (core dump and death for both signals). A synchronous
// fault simply runs its instruction again with SIG_DFL in place: the
// process dies with the signal at that instruction, as without mapfs. A
// sent one is sent again, now unblocked. A fault on another thread
// meanwhile (even mapfs's) kills the process too: it is dying anyway.
void Default(int sig, const siginfo_t* info) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  Real()(sig, &dfl, nullptr);
  if (Synchronous(sig, info)) return;
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
  raise(sig);
}

// Delivers a fault that is not mapfs's as the kernel would have under the
// view.
void PassOn(int sig, int slot, siginfo_t* info, void* uctx) {
  KernelSigaction a = Read(slot);
  if (a.handler != kDfl && a.handler != kIgn && (a.flags & Flag(SA_RESETHAND))) {
    // As the kernel does on delivery: the handler becomes SIG_DFL, the
    // flags stay. Under `writer`, so two threads faulting at once do not
    // both run a one-shot handler.
    WriterScope w;
    a = ReadLocked(slot);
    if (a.flags & Flag(SA_RESETHAND)) {
      KernelSigaction reset = a;
      reset.handler = kDfl;
      WriteLocked(slot, reset);
    }
  }
  if (a.handler == kIgn) {  // the kernel ignores a sent signal, never a fault
    if (Synchronous(sig, info)) Default(sig, info);
    return;
  }
  if (a.handler == kDfl) {
    Default(sig, info);
    return;
  }
  // The kernel's mask for the handler: the thread's, the handler's mask,
  // and the signal itself unless SA_NODEFER. Returning from OnFault
  // restores the thread's mask from the context, as after the program's
  // own handler returns to the kernel.
  sigset_t m;
  sigemptyset(&m);
  std::memcpy(&m, &a.mask, sizeof a.mask);
  if (!(a.flags & Flag(SA_NODEFER))) sigaddset(&m, sig);
  pthread_sigmask(SIG_BLOCK, &m, nullptr);
  if (a.flags & Flag(SA_SIGINFO))
    reinterpret_cast<void (*)(int, siginfo_t*, void*)>(a.handler)(sig, info, uctx);
  else
    reinterpret_cast<void (*)(int)>(a.handler)(sig);
}

void OnFault(int sig, siginfo_t* info, void* uctx) {
  int saved_errno = errno;
  // mapfs's faults: a kernel-raised SIGSEGV (si_addr is only meaningful
  // then) on a region page the Vm can map, or one a fault server serves.
  // A protection-key fault is never one: the page is mapped, and the
  // application stored to memory of mapfs's outside a call.
  if (sig == SIGSEGV && info != nullptr && info->si_code > 0 && info->si_code != SEGV_PKUERR) {
    // The kernel enters a handler with the key closed (its initial PKRU);
    // serving the fault writes the pool's shared state. The program's
    // handler below runs with the rights closed again.
    medium::protection::Inside in;
    if (ServeFault(info->si_addr)) {
      errno = saved_errno;
      return;
    }
  }
  errno = saved_errno;  // the program's handler sees the interrupted code's errno
  // A copy through a file map that the file's end moved past (fault_guard.h):
  // back to the copy, which reports it.
  if (sig == SIGBUS && info != nullptr && info->si_code == BUS_ADRERR) EscapeGuardedCopy(info->si_addr, uctx);
  int slot = Slot(sig);
  if (slot >= 0) PassOn(sig, slot, info, uctx);
}

}  // namespace

bool IsFaultSignal(int sig) { return Slot(sig) >= 0; }

int OwnFaultSignals() {
  WriterScope w;
  for (int slot = 0; slot < 2; slot++) {
    int sig = kSignals[slot];
    struct sigaction cur;
    if (Real()(sig, nullptr, &cur) != 0) return errno;
    if (IsOurs(cur)) continue;
    // What the kernel holds is the program's (its start-up state, or what
    // it installed before: through the C library, or, without the shim,
    // past mapfs's handler): it becomes the view.
    KernelSigaction view = FromLibc(cur);
    view.flags &= kUapiFlags;
    WriteLocked(slot, view);
    if (int e = InstallLocked(sig, view); e != 0) return e;
    struct sigaction back;
    if (libc_restorer.load(std::memory_order_relaxed) == 0 && Real()(sig, nullptr, &back) == 0)
      libc_restorer.store(reinterpret_cast<uintptr_t>(back.sa_restorer), std::memory_order_relaxed);
    owned[slot].store(true, std::memory_order_release);
  }
  return 0;
}

int ProgramSigaction(int sig, const KernelSigaction* act, KernelSigaction* old, bool libc) {
  int slot = Slot(sig);
  if (slot < 0) return EINVAL;
  KernelSigaction next{};
  if (act != nullptr) next = *act;  // before anything is written: act and old may be one struct
  WriterScope w;
  if (!owned[slot].load(std::memory_order_acquire)) {
    // No Vm yet: the kernel holds the program's action.
    struct sigaction a = ToLibc(next), o;
    if (Real()(sig, act != nullptr ? &a : nullptr, old != nullptr ? &o : nullptr) != 0) return errno;
    if (old != nullptr) *old = FromLibc(o);
    return 0;
  }
  KernelSigaction cur = ReadLocked(slot);
  if (act != nullptr) {
    if (libc) {
      next.flags |= kSaRestorer;
      next.restorer = libc_restorer.load(std::memory_order_relaxed);
    }
    next.flags &= kUapiFlags;
    next.mask &= ~kUnblockable;
    WriteLocked(slot, next);
    if (int e = InstallLocked(sig, next); e != 0) {
      WriteLocked(slot, cur);
      return e;
    }
  }
  if (old != nullptr) *old = cur;
  return 0;
}

void BeforeExec() {
  int e = errno;
  WriterScope w;
  for (int slot = 0; slot < 2; slot++) {
    if (!owned[slot].load(std::memory_order_acquire) || ReadLocked(slot).handler != kIgn) continue;
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    Real()(kSignals[slot], &ign, nullptr);
  }
  errno = e;
}

void AfterFailedExec() {
  int e = errno;
  WriterScope w;
  for (int slot = 0; slot < 2; slot++)
    if (owned[slot].load(std::memory_order_acquire)) InstallLocked(kSignals[slot], ReadLocked(slot));
  errno = e;
}

void ResetFaultHandlerAfterFork() {
  if (Stale(writer.load(std::memory_order_relaxed))) {
    WriterScope take_over;
  }
}

}  // namespace mapfs::vm
