// Memory protection keys (issue 16): the pool's memory is writable only
// while the process is inside a mapfs call, so a stray store from the
// application faults (SIGSEGV, si_code SEGV_PKUERR) instead of corrupting
// the file system.
//
// One key per process, allocated by the first mount of a front that asks
// for it (the C API and the shim call Enable; the CLI and the FUSE daemon
// run no application code and leave it off). From then on every mapping of
// a pool's memory this process makes is tagged with it (Tag): the pool
// view, the shared-memory segment, and the pool pages mapped into the
// virtual region. Views the application asked for (mmap of a mapfs file,
// mapfs_mmap) are separate mappings and keep key 0: they are the
// application's to write.
//
// Rights live in the PKRU register, per thread. Outside mapfs the key is
// write-disabled (reads stay allowed: the pool is the boundary anyway, see
// docs/SECURITY.md); an Inside scope write-enables it and puts back what
// it found. Invariants the scopes keep:
//  * Nested calls: an inner Inside puts back what it found (open rights
//    stay open); the thread's outermost one (depth 0) leaves the key
//    write-disabled, whatever it found: a thread that inherited open
//    rights (created inside a call) loses them at its first call, and one
//    that escaped a signal handler with siglongjmp (keeping the handler's
//    access-disable) or existed before the key was allocated (the kernel's
//    initial value, access-disable too) may read again after its next.
//  * Signal handlers: the kernel enters a handler with its initial PKRU
//    (our key access-disabled) and sigreturn restores the interrupted
//    value, so a handler's calls open and close by themselves and the
//    interrupted code, inside a call or not, gets its own rights back.
//  * Code mapfs runs on the application's behalf inside a call runs with
//    the rights closed: a thread it creates for a sigevent is created in
//    an Outside scope; the fault handler ends its Inside before it passes
//    a fault on to the program's handler.
//  * fork: the child copies the forking thread's PKRU and depth, and the
//    key stays allocated in the child. exec: a new image starts with the
//    kernel's initial PKRU and no keys; the shim enables again there.
// Cost with keys: one rdpkru and two wrpkru per Inside (~3-4 and ~15-20 ns
// by CPU clock on the virtual machine this was written on: 30-40 ns a
// call, docs/PERFORMANCE.md "Protection keys"); the rdpkru hides in the
// first wrpkru's latency, so caching PKRU would save nothing. A ReadOnly
// (calls that store nothing here: lseek) costs the rdpkru alone. Without
// pkeys (CPU, kernel, no free key, MAPFS_PKEYS=0) nothing is tagged and
// every scope costs one load and a branch.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace mapfs::medium::protection {

enum class State {
  kUnused,     // no front asked (CLI, FUSE daemon)
  kOn,         // key() tags the pool's memory
  kOffByEnv,   // MAPFS_PKEYS=0
  kNoCpu,      // the CPU lacks PKU or the kernel did not enable it (OSPKE)
  kNoKey,      // pkey_alloc failed (kernel without pkeys, or none free)
};

// Turns protection on for this process unless MAPFS_PKEYS=0 or the machine
// cannot; idempotent, thread-safe. Returns the resulting state.
State Enable();
State Current();
// What Enable would give in this process (for `mapfs info`), allocating
// nothing that stays.
State Probe();
// One line for `mapfs info` and the shim's log: the state and why.
const char* Describe(State s);
// What this machine offers, without allocating anything (for `mapfs info`).
bool CpuHasPkeys();
// The key, or -1 when protection is off.
int Key();

// Tags [addr, addr+len) (page aligned, mapped with `prot`) with the key;
// a no-op when protection is off. Every mapping of pool memory calls it.
Status Tag(void* addr, size_t len, int prot);
// Gives [addr, addr+len) (page aligned, inside a tagged mapping) back the
// default key 0, always writable: the one piece of pool memory a process
// leaves open, its own row of reader counters (meta::InodeLocks), so that a
// read path stores there without opening the rights. A no-op when off.
Status Untag(void* addr, size_t len, int prot);

namespace detail {
// The PKRU bits of the key (access- and write-disable), 0 when off.
extern std::atomic<uint32_t> key_bits;
// The bits that close the key: write-disable only.
extern std::atomic<uint32_t> closed_bits;
extern thread_local int depth __attribute__((tls_model("initial-exec")));

inline uint32_t Rdpkru() {
  uint32_t eax, edx;
  asm volatile(".byte 0x0f,0x01,0xee" : "=a"(eax), "=d"(edx) : "c"(0));
  return eax;
}
inline void Wrpkru(uint32_t v) { asm volatile(".byte 0x0f,0x01,0xef" : : "a"(v), "c"(0), "d"(0) : "memory"); }
}  // namespace detail

// The rights of mapfs code: held by every entry point of a front (the C
// API's calls, the shim's CoreScope) and by the fault handler.
class Inside {
 public:
  Inside() {
    uint32_t m = detail::key_bits.load(std::memory_order_relaxed);
    if (m == 0) return;
    on_ = true;
    outer_ = detail::depth++ == 0;
    entry_ = detail::Rdpkru();
    if (entry_ & m) detail::Wrpkru(entry_ & ~m);
  }
  // The other keys' bits are put back as found at entry: nothing inside a
  // call changes them (a signal handler's changes end at its sigreturn),
  // and rdpkru is not free (tens of ns where it is virtualised).
  ~Inside() {
    if (!on_) return;
    detail::depth--;
    uint32_t m = detail::key_bits.load(std::memory_order_relaxed);
    if (outer_) {
      // The thread leaves mapfs: write-disabled, whatever it came in with
      // (open rights inherited from a creator inside a call; the kernel's
      // access-disable of a handler it escaped with siglongjmp, or of a
      // thread older than the key). A handler's own value comes back at
      // sigreturn.
      detail::Wrpkru((entry_ & ~m) | detail::closed_bits.load(std::memory_order_relaxed));
    } else if (entry_ & m) {
      detail::Wrpkru(entry_);
    }
  }
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;

 private:
  bool on_ = false;
  bool outer_ = false;
  uint32_t entry_ = 0;  // PKRU at entry
};

// The rights of a call whose whole path stores nothing into the pool's
// memory (today lseek, in the C API and the shim): it reads pool memory
// but never writes it, so it skips the two wrpkru of an Inside (~30-40 ns
// by CPU clock here, docs/PERFORMANCE.md "Protection keys"), paying one
// rdpkru (~4 ns). Rules, the same as Inside's where they meet:
//  * It counts in the thread's depth: an Inside within it is nested, opens
//    for itself and puts back the closed rights it found (the guard a rare
//    store on such a path takes, e.g. the close of a description whose last
//    reference the call dropped).
//  * Reads must work: where the thread comes in access-disabled (a signal
//    handler's initial PKRU, a thread older than the key, one that left a
//    handler by siglongjmp) it turns the key to write-disabled only, and
//    puts the entry value back at the end unless it is the outermost.
//  * The outermost one leaves the key write-disabled, as Inside's does: a
//    thread that inherited open rights (created inside a call) loses them.
//  * Inside another scope with the rights open it changes nothing: a store
//    of the enclosing call after it still goes through.
// A store into the pool under a ReadOnly alone faults (SEGV_PKUERR) like
// the program's own: a path that may store must hold an Inside there.
class ReadOnly {
 public:
  ReadOnly() {
    uint32_t m = detail::key_bits.load(std::memory_order_relaxed);
    if (m == 0) return;
    on_ = true;
    outer_ = detail::depth++ == 0;
    entry_ = detail::Rdpkru();
    uint32_t c = detail::closed_bits.load(std::memory_order_relaxed);
    if ((entry_ & m & ~c) != 0) detail::Wrpkru((entry_ & ~m) | c);  // access-disabled: make it readable
  }
  ~ReadOnly() {
    if (!on_) return;
    detail::depth--;
    uint32_t m = detail::key_bits.load(std::memory_order_relaxed);
    uint32_t c = detail::closed_bits.load(std::memory_order_relaxed);
    uint32_t k = entry_ & m;
    if (outer_) {
      if (k == 0) detail::Wrpkru((entry_ & ~m) | c);  // inherited open rights: closed now
    } else if ((k & ~c) != 0) {
      detail::Wrpkru(entry_);  // a handler's access-disable, as the kernel gave it
    }
  }
  ReadOnly(const ReadOnly&) = delete;
  ReadOnly& operator=(const ReadOnly&) = delete;

 private:
  bool on_ = false;
  bool outer_ = false;
  uint32_t entry_ = 0;  // PKRU at entry
};

// Closed rights for application code that mapfs starts from inside a call
// (threads it creates, handlers it calls); the rights in force come back
// at the end of the scope.
class Outside {
 public:
  Outside() {
    uint32_t m = detail::key_bits.load(std::memory_order_relaxed);
    if (m == 0) return;
    on_ = true;
    uint32_t v = detail::Rdpkru();
    saved_ = v & m;
    uint32_t c = detail::closed_bits.load(std::memory_order_relaxed);
    if (saved_ != c) detail::Wrpkru((v & ~m) | c);
  }
  ~Outside() {
    if (on_) detail::Wrpkru((detail::Rdpkru() & ~detail::key_bits.load(std::memory_order_relaxed)) | saved_);
  }
  Outside(const Outside&) = delete;
  Outside& operator=(const Outside&) = delete;

 private:
  bool on_ = false;
  uint32_t saved_ = 0;
};

}  // namespace mapfs::medium::protection
