#include "mount/mount.h"

namespace mapfs {

Result<std::unique_ptr<Mount>> Mount::Open(const std::string& pool_path, const MountOptions& opt) {
  std::unique_ptr<Mount> m(new Mount());
  auto pool = medium::Pool::Open(pool_path, opt.pool);
  if (!pool.ok()) return pool.status();
  m->pool_ = std::move(*pool);
  m->recovered_ = m->pool_->needs_recovery();
  auto vm = vm::Vm::Open(m->pool_.get(), opt.vm);
  if (!vm.ok()) return vm.status();
  m->vm_ = std::move(*vm);
  auto space = space::Partitions::Open(m->pool_.get(), m->vm_.get());
  if (!space.ok()) return space.status();
  m->space_ = std::move(*space);
  if (!opt.defer_finish) m->pool_->FinishOpen();
  return m;
}

Status Mount::Close() {
  if (!pool_) return Status::Ok();
  space_.reset();
  vm_.reset();
  Status st = pool_->Close();
  pool_.reset();
  return st;
}

void Mount::Abandon() {
  if (!pool_) return;
  space_.reset();
  vm_.reset();
  pool_->Abandon();
  pool_.reset();
}

Status Mount::AfterFork() {
  if (!pool_) return Status::Ok();
  MAPFS_RETURN_IF_ERROR(pool_->AfterFork());
  vm_->AfterFork();
  return Status::Ok();
}

Mount::~Mount() { (void)Close(); }

}  // namespace mapfs
