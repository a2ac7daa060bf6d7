// Credentials and the one permission check of the core.
//
// Every namespace and open path asks Permission() (Linux's
// generic_permission) or one of the owner rules below, with the caller's
// Cred. Where the Cred comes from is the front's business:
//  - the C API, the shim and the CLI act for the calling process: the
//    core reads its ids (ProcessCred);
//  - the FUSE daemon acts for the request's process: it installs that
//    Cred for the duration of the request (CredScope), so the mount may
//    keep or drop the kernel's default_permissions.
//
// "root" means effective uid 0 (as CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN
// and CAP_FSETID together); other capabilities are not consulted.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace mapfs::fs {

// Access masks: the same bits as R_OK / W_OK / X_OK (and MAY_* of Linux).
constexpr int kMayExec = 1;
constexpr int kMayWrite = 2;
constexpr int kMayRead = 4;

struct Cred {
  uid_t uid = 0;   // effective (file system) uid: the one checks use
  gid_t gid = 0;
  uid_t ruid = 0;  // real ids: access() and faccessat() without AT_EACCESS
  gid_t rgid = 0;

  // Supplementary groups, fetched on first need: most checks never ask
  // (the caller owns the file, or the group and other bits agree).
  // load(ctx, out) fills `out`; null: the list is `groups` as given.
  using GroupLoader = void (*)(void* ctx, std::vector<gid_t>* out);
  GroupLoader load = nullptr;
  void* ctx = nullptr;
  mutable bool loaded = false;
  mutable std::vector<gid_t> groups;

  bool root() const { return uid == 0; }
  // gid is the effective group or one of the supplementary groups.
  bool InGroup(gid_t g) const;
  // The same caller with its real ids as the effective ones (access()).
  Cred Real() const;
};

// The calling process's credentials (getresuid, getresgid; groups by
// getgroups on first need), cached per thread: a system call costs as much
// as a whole stat here (measured: 2.7 us for the two calls on the CI
// machine, against 1.1 us for mapfs_stat), so they are read once and again
// only after InvalidateProcessCred. Whoever changes the process's ids must
// call that: the shim's set*id wrappers do, mapfs_mount does, and a program
// on the C API calls mapfs_refresh_credentials.
const Cred& ProcessCred();
void InvalidateProcessCred();

namespace detail {
// The thread's credential state (cred.cc). Reached through `tcred_fast`,
// an initial-exec pointer: one %fs-relative load, where the thread_local
// object itself (it has a destructor) costs a call to its TLS wrapper and
// __tls_get_addr from this shared library, ~90 instructions a stat.
// Initial-exec TLS in a library that may be dlopen'ed is served from the
// surplus of static TLS glibc reserves for it (rtld.optional_static_tls,
// 512 bytes by default): fine for a few small variables (this is 8 bytes;
// the others are protection.h's depth and namespace.cc's chain_start),
// never for large ones. Null until the thread's first call, and again once
// the object is destroyed at thread exit (later calls go the slow way).
struct ThreadCred {
  Cred cred;
  uint64_t generation = 0;  // of cred_generation when `cred` was read; 0: never
  const Cred* scope = nullptr;  // the innermost CredScope's
  ~ThreadCred();
};
extern __thread ThreadCred* tcred_fast __attribute__((tls_model("initial-exec")));
extern std::atomic<uint64_t> cred_generation;  // bumped by InvalidateProcessCred
const Cred& CurrentCredSlow();
}  // namespace detail

// The credentials the core checks against on this thread: the innermost
// CredScope's, else the process's. Inline: every stat and open asks.
inline const Cred& CurrentCred() {
  const detail::ThreadCred* t = detail::tcred_fast;
  if (__builtin_expect(t != nullptr && t->scope == nullptr &&
                           t->generation == detail::cred_generation.load(std::memory_order_acquire),
                       1))
    return t->cred;
  return detail::CurrentCredSlow();
}

// While alive, calls on this thread act with `c` (the FUSE daemon: the
// request's caller). `c` must outlive the scope.
class CredScope {
 public:
  explicit CredScope(const Cred* c);
  ~CredScope();
  CredScope(const CredScope&) = delete;
  CredScope& operator=(const CredScope&) = delete;

 private:
  const Cred* prev_;
};

// generic_permission: may `c` do `mask` (kMay*) to an inode with `mode`,
// owner `uid`, group `gid`? EACCES when not. Root may read and write
// anything, search any directory, and execute a file with any x bit.
// Inline for its common verdict (a walk asks it for every directory it
// passes): the bits that apply grant the whole mask without the group list
// being needed; every other case goes the full way (PermissionFull).
Status PermissionFull(const Cred& c, uint64_t mode, uid_t uid, gid_t gid, int mask);
inline Status Permission(const Cred& c, uint64_t mode, uid_t uid, gid_t gid, int mask) {
  const uint64_t m = static_cast<uint64_t>(mask & (kMayRead | kMayWrite | kMayExec));
  // The owner's bits, or the other bits when the group bits say the same
  // about `m` (then membership does not matter).
  const uint64_t bits = c.uid == uid ? mode >> 6 : (((mode >> 3) ^ mode) & m) == 0 ? mode : 0;
  if ((bits & m) == m) return Status::Ok();
  return PermissionFull(c, mode, uid, gid, mask);
}
// The owner, or root (inode_owner_or_capable); EPERM otherwise.
Status OwnerOrRoot(const Cred& c, uid_t uid, const char* what);
// Sticky directories (check_sticky): in a directory with S_ISVTX only the
// file's owner, the directory's owner or root may remove or rename an
// entry. EPERM otherwise.
Status StickyOk(const Cred& c, uint64_t dir_mode, uid_t dir_uid, uid_t victim_uid);
// The set-ID bits a change by `c` drops from a file with `mode` and group
// `gid` (setattr_should_drop_suidgid): S_ISUID, and S_ISGID when the file
// is group-executable or `c` is neither in its group nor root. A write or
// truncate drops them from regular files, and not when `c` is root
// (CAP_FSETID); a chown (for_chown) from every non-directory, root's too.
uint64_t SetIdBitsToDrop(const Cred& c, uint64_t mode, gid_t gid, bool for_chown);

}  // namespace mapfs::fs
