// Writable shared maps of virtualized files that are coherent across
// processes: *direct* maps of the file's own blocks (docs/OVERLAY.md, "Maps
// shared between processes").
//
// A copy (vview.h) cannot serve a map that processes communicate through
// (SQLite's -shm WAL index, LMDB's lock file): each process's stores stay in
// its copy. A direct map instead maps, run by run, the physical blocks that
// hold the content (mmap MAP_SHARED|MAP_FIXED of the engine's descriptor at
// each run's block offset), so every process mapping them shares the
// kernel's page cache pages, and the engine's own reads and writes through
// its map of the file (VFile::base_) see and make the same bytes.
//
// That holds only while no commit moves a mapped block (copy-on-write
// would remap the content elsewhere; the GC would reuse the old block).
// So while any process holds a direct map of a file (a pid slot in the
// file, format.h MetaMappers), writes to blocks that hold content go in
// place and a commit that would move one is refused and planned again
// (VFile::Commit); holes in the mapped range are given blocks at map time;
// shrinking the file is refused (EBUSY). Past the content's end a direct
// map is anonymous memory (stores there are dropped, as the copies'
// are). Only writable MAP_SHARED maps are direct: read-only and private
// maps keep the copy (a LevelDB table is hundreds of one-block runs, one
// mmap each: slower than one copy).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "common/status.h"
#include "overlay/virtual/vfile.h"

namespace mapfs::overlay::vrt {

class DirectMaps {
 public:
  DirectMaps() = default;
  ~DirectMaps();
  DirectMaps(const DirectMaps&) = delete;
  DirectMaps& operator=(const DirectMaps&) = delete;
  bool empty() const { return n_.load(std::memory_order_acquire) == 0; }
  // mmap(addr, len, prot, flags) of `f`'s content from `off` (a page
  // multiple), direct. EAGAIN if the file's mapper slots are all held by
  // live processes.
  Result<void*> Map(const std::shared_ptr<VFile>& f, void* addr, size_t len, int prot, int flags, uint64_t off);
  // Forgets the maps' pages in [addr, addr+len) (the kernel unmaps them);
  // a map all of whose pages are gone ends its registration.
  void Unmap(void* addr, size_t len);
  bool Meets(const void* addr, size_t len);
  // Before this process shrinks `f` to `end`: the pages of its direct maps
  // of `f` past the end become anonymous zeros (a kernel map would raise
  // SIGBUS there; the copies read zeros and drop stores, and so do these
  // now), so that the blocks the shrink frees are mapped by no page of the
  // process (VFile::Truncate).
  void CutPast(const VFile* f, uint64_t end);
  // The application's mprotect of a direct map: the kernel's, as is.
  int Protect(void* addr, size_t len, int prot, int pkey);

 private:
  // One registration (VFile::DirectBegin), ended when the last piece of
  // its map is forgotten.
  struct Reg {
    explicit Reg(std::shared_ptr<VFile> file) : f(std::move(file)) {}
    ~Reg() { f->DirectEnd(); }
    std::shared_ptr<VFile> f;
  };
  struct Piece {
    size_t len;
    uint64_t off;  // content offset of its first page
    int prot;      // as mapped (an mprotect since is not followed: the cut pages get this)
    std::shared_ptr<Reg> reg;
  };
  std::mutex mu_;
  std::map<uintptr_t, Piece> by_addr_;
  std::atomic<size_t> n_{0};
};

}  // namespace mapfs::overlay::vrt
