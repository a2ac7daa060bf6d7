// One pool of one file-mapping design with one file in it, for
// `mapfs bench mapping` (mapping_bench.h): contiguous files (ctFS
// partitions) or block-mapped files (hashfs, cuckoo, extent, radix), made
// through mkfs and the file system, aged for a layout score and filled to a
// utilisation, so every design is measured through the same file layer.
//
// The common measure of "file mapping" is what FileData::Read does to find
// the pool bytes of a file offset: for a contiguous file Vm::PoolRun (a
// walk of the persistent page table from the partition's virtual offset),
// for a block-mapped file the mapper's Lookup (under the kMap lock for
// cuckoo, as block_file.cc takes it) and the block's pool offset. Map() and
// MapRange() repeat exactly those calls (the file layer keeps them private).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "map/mapper.h"

namespace mapfs {
namespace fs {
class FileSystem;
struct OpenFile;
}  // namespace fs
namespace vm {
class Vm;
}
namespace medium {
class Pool;
}

namespace bench {

// "contiguous", then the map::Kind names.
const std::vector<std::string>& MappingDesigns();

struct TargetSpec {
  std::string design;
  std::string path;          // pool file (removed by the Target)
  uint64_t file_bytes = 0;
  double util = 0.6;         // share of the data space in use once the file is written
  double layout = 0.85;      // aged for this score (cuckoo/extent/radix; others ignore it)
  double file_share = 0.5;   // the file's share of the data space (sizes the pool)
};

class MappingTarget {
 public:
  ~MappingTarget();
  // mkfs, age, remount, write the filler then the file by 4 KiB appends
  // (timed: append_cycles), Fsync.
  static Result<std::unique_ptr<MappingTarget>> Make(const TargetSpec& spec);

  bool contiguous() const { return m_ == nullptr; }
  uint64_t blocks() const { return blocks_; }
  double append_cycles() const { return append_cycles_; }   // per 4 KiB append
  double layout_score() const { return layout_score_; }     // measured; -1 for contiguous files
  double mapping_bytes_per_gib() const;                     // -1 for contiguous files
  fs::FileSystem& fs() { return *fs_; }
  fs::OpenFile& file() { return *f_; }

  // Pool offset of file block `fblk` (see the header comment), `c` the
  // caller's cursor (block-mapped; ignored for contiguous files).
  uint64_t Map(map::Cursor* c, uint64_t fblk);
  // What one read of [off, off+len) does to find its bytes: run by run
  // with one cursor, as FileData::ForRuns / the contiguous Read loop.
  uint64_t MapRange(uint64_t off, uint64_t len);
  // Ftruncate to 0, in cycles per block.
  Result<double> TruncateCycles();

 private:
  MappingTarget() = default;
  std::string path_;
  std::unique_ptr<fs::FileSystem> fs_;
  std::shared_ptr<fs::OpenFile> f_;
  map::Mapper* m_ = nullptr;
  medium::Pool* pool_ = nullptr;
  vm::Vm* vm_ = nullptr;
  uint64_t voff_ = 0, ino_ = 0, blocks_ = 0;
  bool lock_ = false;
  double append_cycles_ = 0, layout_score_ = -1;
};

// Reads a buffer twice the size of the last-level cache (at most 256 MiB,
// or `cap` bytes): what is touched afterwards comes from memory.
class CacheFlusher {
 public:
  explicit CacheFlusher(size_t cap = 0);
  void Flush();

 private:
  std::vector<uint8_t> buf_;
  uint64_t sink_ = 0;
};

}  // namespace bench
}  // namespace mapfs
