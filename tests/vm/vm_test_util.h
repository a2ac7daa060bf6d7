// Helpers for the vm tests: page patterns and forked "other processes".
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "common/units.h"
#include "medium/pool.h"
#include "mount/mount.h"
#include "test_util.h"
#include "vm/vm.h"

namespace mapfs::testing {

// A pool opened through the medium and vm layers only. (A full Mount would
// also run the space layer's recovery, which rightly frees every page that
// no partition owns — and these tests back raw ranges.)
class VmMount {
 public:
  static Result<std::unique_ptr<VmMount>> Open(const std::string& path, const MountOptions& opt = {}) {
    std::unique_ptr<VmMount> m(new VmMount());
    auto pool = medium::Pool::Open(path);
    if (!pool.ok()) return pool.status();
    m->pool_ = std::move(*pool);
    m->recovered_ = m->pool_->needs_recovery();
    auto vm = vm::Vm::Open(m->pool_.get(), opt.vm);
    if (!vm.ok()) return vm.status();
    m->vm_ = std::move(*vm);
    m->pool_->FinishOpen();
    return m;
  }
  ~VmMount() { (void)Close(); }
  Status Close() {
    if (!pool_) return Status::Ok();
    vm_.reset();
    Status st = pool_->Close();
    pool_.reset();
    return st;
  }
  void Abandon() {
    if (!pool_) return;
    vm_.reset();
    pool_->Abandon();
    pool_.reset();
  }
  vm::Vm& vm() { return *vm_; }
  medium::Pool& pool() { return *pool_; }
  bool recovered() const { return recovered_; }

 private:
  VmMount() = default;
  std::unique_ptr<medium::Pool> pool_;
  std::unique_ptr<vm::Vm> vm_;
  bool recovered_ = false;
};

// Fills page `voff` with a pattern derived from `tag`.
inline void FillPage(vm::Vm& vm, uint64_t voff, uint64_t tag) {
  auto* p = reinterpret_cast<uint64_t*>(vm.at(voff));
  for (uint64_t i = 0; i < kPageSize / 8; i++) p[i] = tag * 0x100000001b3ull + i;
}

// The tag a page was filled with, or UINT64_MAX if it holds no valid pattern.
inline uint64_t PageTag(vm::Vm& vm, uint64_t voff) {
  auto* p = reinterpret_cast<const uint64_t*>(vm.at(voff));
  uint64_t tag = p[0] / 0x100000001b3ull;
  for (uint64_t i = 0; i < kPageSize / 8; i += 61)
    if (p[i] != tag * 0x100000001b3ull + i) return UINT64_MAX;
  return tag;
}

inline bool PageIsZero(vm::Vm& vm, uint64_t voff) {
  auto* p = reinterpret_cast<const uint64_t*>(vm.at(voff));
  for (uint64_t i = 0; i < kPageSize / 8; i++)
    if (p[i] != 0) return false;
  return true;
}

// Runs `fn` in a child process; returns its exit status (or 128+signal).
template <typename Fn>
int InChild(Fn fn) {
  pid_t pid = fork();
  if (pid == 0) _exit(fn());
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace mapfs::testing
