// Fragmentation by layout score (HashFS paper §4 preamble, issue 14):
// ages a freshly made block-mapped pool so that files created afterwards
// get a given share of contiguous blocks, without slow aging runs.
//
// The layout score of a file is the share of its blocks (after the first)
// that follow the previous one on the medium: 1.0 = one run, 0.0 = no two
// blocks adjacent. The bitmap designs (cuckoo, extent, radix) allocate next
// fit, continuing a file's run where the next block is free; so if free
// space is runs of mean length L separated by used blocks, a file written
// through it breaks once per run: score 1 - 1/L. AgeForLayout lays that
// pattern over the whole block area: runs of L = 1/(1 - S) blocks (by error
// diffusion, so the mean is exact) between single blocks kept by the file
// kAgingName, which is an ordinary file (fsck sees its blocks as owned;
// deleting it undoes the aging). It holds (1 - S) / (2 - S) of the area:
// 13 % for S = 0.85, 23 % for S = 0.7.
//
// HashFS places each block at its key's hash, so its files have no layout
// to set (score about 0 at any age); contiguous files' blocks are found
// by the page table, not by runs. Both are refused (EINVAL).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace mapfs::fs {

class FileSystem;
struct OpenFile;

// Root-directory name of the file holding the aging blocks; its name ends
// with the score it was made for ("/.mapfs-aged-0.85"), which is how
// `mapfs info` reports it.
constexpr const char* kAgingPrefix = ".mapfs-aged-";

struct AgingReport {
  std::string name;     // the file holding the kept blocks
  uint64_t kept = 0;    // blocks it holds
  uint64_t runs = 0;    // free runs made
};

// Ages the block area of `fs` (block-mapped, not hashfs) for layout score
// `score` in [0.5, 1.0] (1.0 does nothing). Meant for a fresh pool: run it
// right after mkfs, then unmount (the allocator's next-fit rover starts at
// the bottom of the area at the next mount, where the runs are).
Status AgeForLayout(FileSystem& fs, double score, AgingReport* out);

// The layout score of file `f`'s first `blocks` blocks, from its mapping
// (block-mapped pools only): contiguous pairs / (mapped blocks - 1).
Result<double> LayoutScore(FileSystem& fs, const OpenFile& f, uint64_t blocks);

}  // namespace mapfs::fs
