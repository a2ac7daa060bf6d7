// Credentials and the permission rules of the core (see cred.h).
#include "fs/cred.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <new>

namespace mapfs::fs {

namespace {

void LoadProcessGroups(void*, std::vector<gid_t>* out) {
  // The list may grow between the two calls (another thread's setgroups):
  // ask again until it fits.
  for (int tries = 0; tries < 4; tries++) {
    int n = ::getgroups(0, nullptr);
    if (n <= 0) break;
    out->resize(static_cast<size_t>(n));
    int got = ::getgroups(n, out->data());
    if (got >= 0) {
      out->resize(static_cast<size_t>(got));
      return;
    }
  }
  out->clear();  // no supplementary groups known: only the effective gid counts
}

using detail::ThreadCred;
thread_local ThreadCred tcred;

// For a thread whose `tcred` was already destroyed (mapfs called from a
// later thread_local's destructor): an object in trivially destructible
// storage, built on demand and never destroyed (its group list leaks, once
// per such thread). Touching `tcred` again there would use freed memory.
thread_local bool tcred_dead = false;
alignas(ThreadCred) thread_local unsigned char tcred_late[sizeof(ThreadCred)];

ThreadCred& Mine() {
  ThreadCred* t = detail::tcred_fast;
  if (__builtin_expect(t != nullptr, 1)) return *t;
  t = tcred_dead ? new (tcred_late) ThreadCred() : &tcred;
  detail::tcred_fast = t;
  return *t;
}

}  // namespace

namespace detail {
__thread ThreadCred* tcred_fast __attribute__((tls_model("initial-exec"))) = nullptr;
std::atomic<uint64_t> cred_generation{1};
ThreadCred::~ThreadCred() {
  tcred_fast = nullptr;
  if (this == &tcred) tcred_dead = true;
}
}  // namespace detail

bool Cred::InGroup(gid_t g) const {
  if (g == gid) return true;
  if (!loaded) {
    if (load != nullptr) {
      groups.clear();
      load(ctx, &groups);
    }
    loaded = true;
  }
  return std::find(groups.begin(), groups.end(), g) != groups.end();
}

Cred Cred::Real() const {
  Cred r = *this;
  r.uid = ruid;
  r.gid = rgid;
  return r;
}

const Cred& ProcessCred() {
  ThreadCred& t = Mine();
  uint64_t gen = detail::cred_generation.load(std::memory_order_acquire);
  if (t.generation == gen) return t.cred;
  uid_t r, e, s;
  gid_t rg, eg, sg;
  // Cannot fail with valid pointers; keep the old values if they ever do.
  if (::getresuid(&r, &e, &s) == 0) t.cred.ruid = r, t.cred.uid = e;
  if (::getresgid(&rg, &eg, &sg) == 0) t.cred.rgid = rg, t.cred.gid = eg;
  t.cred.load = LoadProcessGroups;
  t.cred.ctx = nullptr;
  t.cred.loaded = false;
  t.generation = gen;
  return t.cred;
}

void InvalidateProcessCred() { detail::cred_generation.fetch_add(1, std::memory_order_acq_rel); }

const Cred& detail::CurrentCredSlow() {
  ThreadCred& t = Mine();
  return t.scope != nullptr ? *t.scope : ProcessCred();
}

CredScope::CredScope(const Cred* c) : prev_(Mine().scope) { Mine().scope = c; }
CredScope::~CredScope() { Mine().scope = prev_; }

Status PermissionFull(const Cred& c, uint64_t mode, uid_t uid, gid_t gid, int mask) {
  mask &= kMayRead | kMayWrite | kMayExec;
  uint64_t bits;
  if (c.uid == uid) {
    bits = mode >> 6;
  } else {
    // Only ask for the groups when the answer depends on them.
    uint64_t g = (mode >> 3) & 7, o = mode & 7;
    bits = ((g ^ o) & static_cast<uint64_t>(mask)) == 0 ? o : c.InGroup(gid) ? g : o;
  }
  if ((bits & static_cast<uint64_t>(mask)) == static_cast<uint64_t>(mask)) return Status::Ok();
  if (c.root() && (!(mask & kMayExec) || S_ISDIR(mode) || (mode & 0111))) return Status::Ok();
  return Status::Error(EACCES, "permission denied");
}

Status OwnerOrRoot(const Cred& c, uid_t uid, const char* what) {
  if (c.uid == uid || c.root()) return Status::Ok();
  return Status::Error(EPERM, std::string(what) + ": not the owner");
}

Status StickyOk(const Cred& c, uint64_t dir_mode, uid_t dir_uid, uid_t victim_uid) {
  if (!(dir_mode & S_ISVTX) || c.uid == victim_uid || c.uid == dir_uid || c.root()) return Status::Ok();
  return Status::Error(EPERM, "sticky directory: not the owner of the file or the directory");
}

uint64_t SetIdBitsToDrop(const Cred& c, uint64_t mode, gid_t gid, bool for_chown) {
  if (!(mode & (S_ISUID | S_ISGID))) return 0;
  if (for_chown ? S_ISDIR(mode) : (!S_ISREG(mode) || c.root())) return 0;
  uint64_t kill = mode & S_ISUID;
  if ((mode & S_ISGID) && ((mode & S_IXGRP) || !(c.root() || c.InGroup(gid)))) kill |= S_ISGID;
  return kill;
}

}  // namespace mapfs::fs
