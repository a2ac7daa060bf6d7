#include "vm/fault_guard.h"

#include <setjmp.h>
#include <signal.h>
#include <ucontext.h>

#include <atomic>
#include <cstdint>

#include "medium/protection.h"
#include "vm/fault.h"

namespace mapfs::vm {
namespace {

struct Guard {
  sigjmp_buf jb;
  uintptr_t lo[2];
  size_t len;
  sigset_t mask;  // the interrupted code's, restored after the jump
  bool keys;      // protection keys on: pkru is the rights to put back
  uint32_t pkru;
};

// Whether this CPU and kernel have protection keys (-1: not asked yet;
// cpuid traps to the hypervisor in a VM, so it is asked once). With keys,
// the kernel enters a handler with its default PKRU whoever set them (mapfs
// or the program itself), and siglongjmp skips the sigreturn that would
// put the interrupted code's value back.
std::atomic<int> cpu_keys{-1};

// Out of line: nothing of it lives in GuardedCopy's frame across sigsetjmp.
__attribute__((noinline)) void SaveRights(Guard* g) {
  int k = cpu_keys.load(std::memory_order_relaxed);
  if (k < 0) {
    k = medium::protection::CpuHasPkeys() ? 1 : 0;
    cpu_keys.store(k, std::memory_order_relaxed);
  }
  g->keys = k != 0;
  g->pkru = g->keys ? medium::protection::detail::Rdpkru() : 0;
}

// The armed guard of this thread (null: none). Initial-exec: the handler
// reads it on any thread, and a first access of a dynamic TLS block may
// allocate, which a signal handler must not.
thread_local Guard* armed __attribute__((tls_model("initial-exec"))) = nullptr;

}  // namespace

Status EnableGuardedCopies() {
  if (int e = OwnFaultSignals(); e != 0) return Status::Error(e, "cannot install the SIGBUS handler");
  return Status::Ok();
}

bool GuardedCopy(void* dst, const void* src, size_t n, CopyFn fn) {
  if (armed != nullptr || n == 0) {
    fn(dst, src, n);
    return true;
  }
  Guard g;
  g.lo[0] = reinterpret_cast<uintptr_t>(dst);
  g.lo[1] = reinterpret_cast<uintptr_t>(src);
  g.len = n;
  // The handler runs with the kernel's initial PKRU, and siglongjmp does
  // not restore it: the rights in force here (mapfs's key, and any key of
  // the program's own) are put back after a jump.
  SaveRights(&g);
  // savemask 0: no system call per copy. The mask the handler ran with
  // (SIGBUS blocked) is replaced after a jump by the interrupted code's.
  if (sigsetjmp(g.jb, 0) != 0) {
    pthread_sigmask(SIG_SETMASK, &g.mask, nullptr);
    if (g.keys) medium::protection::detail::Wrpkru(g.pkru);
    return false;
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  armed = &g;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  fn(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  armed = nullptr;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  return true;
}

void EscapeGuardedCopy(const void* addr, const void* uctx) {
  Guard* g = armed;
  if (g == nullptr) return;
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (a - g->lo[0] >= g->len && a - g->lo[1] >= g->len) return;
  armed = nullptr;
  if (uctx != nullptr)
    g->mask = static_cast<const ucontext_t*>(uctx)->uc_sigmask;
  else
    pthread_sigmask(SIG_SETMASK, nullptr, &g->mask);
  siglongjmp(g->jb, 1);
}

}  // namespace mapfs::vm
