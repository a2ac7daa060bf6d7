// Mount: a pool opened through every layer of the core, in order, with
// recovery run layer by layer before other processes are let in.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "medium/pool.h"
#include "space/partitions.h"
#include "vm/vm.h"

namespace mapfs {

struct MountOptions {
  vm::VmOptions vm;
  // Leave the pool's open protocol unfinished (other openers wait) so that
  // the layers above can recover first; they call pool().FinishOpen().
  bool defer_finish = false;
  // Passed to medium::Pool::Open (the file system sets scrub_slot).
  medium::OpenOptions pool;
};

class Mount {
 public:
  static Result<std::unique_ptr<Mount>> Open(const std::string& pool_path, const MountOptions& opt = {});
  ~Mount();

  // Clean unmount (also done by the destructor).
  Status Close();
  // Tests: vanish as if the process had died (no clean-close bookkeeping).
  void Abandon();
  // In the child of fork(): this copy becomes a mount of its own
  // (medium::Pool::AfterFork, vm::Vm::AfterFork). On error it is unusable.
  Status AfterFork();

  medium::Pool& pool() { return *pool_; }
  vm::Vm& vm() { return *vm_; }
  space::Partitions& space() { return *space_; }
  bool recovered() const { return recovered_; }

 private:
  Mount() = default;
  std::unique_ptr<medium::Pool> pool_;
  std::unique_ptr<vm::Vm> vm_;
  std::unique_ptr<space::Partitions> space_;
  bool recovered_ = false;
};

}  // namespace mapfs
