// Mirrors: shared maps of fragmented files without one kernel mapping per
// run of blocks (issue 14).
//
// A shared map of a file is normally a map of the pool file at the file's
// pool pages (FileSystem::MapPool): one kernel mapping (VMA) per run of
// physically contiguous pages. A block-mapped file (hashfs above all, whose
// slots scatter consecutive blocks) has up to one run per 4 KiB block, and
// vm.max_map_count (65,530 by default) caps the VMAs of a process. When a
// map would need too many, the file gets a mirror in this process instead:
// a memfd holding a copy of the file's bytes [0, len) at their file
// offsets, which every shared map of the file in this process then maps
// (one VMA per map, as a kernel file system's page cache gives), plus two
// maps of the file system's own: `alias` (the same pages) and `twin` (a
// second memfd: the bytes as last read from or written to the file).
//
// Coherence (what docs/MAPPING.md refers to):
//  - All maps of the file in this process share the memfd's pages, so they
//    see each other's stores at once, as in the kernel.
//  - The file system's calls in this process keep it coherent: a read
//    first writes back the mirror's stores in its range; a write, truncate
//    or fallocate updates alias and twin (Written, Zeroed); fsync writes
//    back everything.
//  - Write-back compares alias with twin page by page and writes only the
//    bytes from the first to the last that differ, clamped to the size (as
//    a kernel map's stores past the end never reach the file): bytes
//    nobody stored through a map are never written, so writes by other
//    processes meanwhile to other bytes survive.
//  - A fork child shares both memfds (and the maps), so parent and child
//    see each other's stores through maps, and either one's write-back
//    updates the twin both compare with.
//  - Between unrelated processes the mirror is a copy: stores through it
//    reach the file at msync, munmap, fsync of the file, exec, unmount or
//    exit (not when the process is killed); writes by other processes show
//    in it only where it was not yet filled.
//
// Thread safety: every call takes the mirror's mutex. The memfds' size is
// the filled extent, shared with forks: Cover fills only past it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "common/status.h"

namespace mapfs::fs {

class MapMirror {
 public:
  // fill(dst, n, off): the file's bytes [off, off+n) into dst, zeros past
  // the end of the file. write(src, n, off): those bytes to the file.
  using FillFn = std::function<Status(char* dst, uint64_t n, uint64_t off)>;
  using WriteFn = std::function<Status(const char* src, uint64_t n, uint64_t off)>;

  static Result<std::unique_ptr<MapMirror>> Create();
  ~MapMirror();
  MapMirror(const MapMirror&) = delete;
  MapMirror& operator=(const MapMirror&) = delete;

  // The memfd the application's maps map (MAP_SHARED, at the file offset).
  int fd() const { return fd_; }
  // Makes [0, end) (a page multiple) hold the file's bytes: what lies past
  // the filled extent is filled through `fill`.
  Status Cover(uint64_t end, const FillFn& fill);
  // Stores through maps in [lo, hi), below `size`, reach the file.
  Status WriteBack(uint64_t lo, uint64_t hi, uint64_t size, const WriteFn& write);
  // The file's bytes [off, off+n) are now buf's (a write by this process).
  void Written(const void* buf, uint64_t off, uint64_t n);
  // The file's bytes [from, to) are now zero (truncation, hole punching,
  // growth over bytes stored past the old end).
  void Zeroed(uint64_t from, uint64_t to);

 private:
  MapMirror() = default;
  // Maps alias_ and twin_ over [0, filled) (mu_ held).
  Status Remap(uint64_t filled);

  std::mutex mu_;
  int fd_ = -1, twin_fd_ = -1;
  char* alias_ = nullptr;
  char* twin_ = nullptr;
  uint64_t len_ = 0;  // bytes of alias_ and twin_ mapped here
};

}  // namespace mapfs::fs
