// Size constants and helpers shared by every layer.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace mapfs {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;
constexpr uint64_t GiB = 1024 * MiB;
constexpr uint64_t TiB = 1024 * GiB;

constexpr uint64_t kPageSize = 4 * KiB;   // a pool page, the smallest mapping unit
constexpr int kPageShift = 12;
constexpr uint64_t kChunkSize = 2 * MiB;  // a chunk: 512 pages, one PMD entry
constexpr int kChunkShift = 21;
constexpr uint64_t kPagesPerChunk = kChunkSize / kPageSize;

constexpr uint64_t AlignDown(uint64_t v, uint64_t a) { return v & ~(a - 1); }
constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
constexpr bool IsAligned(uint64_t v, uint64_t a) { return (v & (a - 1)) == 0; }

// Parses "64M", "1G", "4096", "2m", "1.5G" is rejected. Returns EINVAL on junk.
Result<uint64_t> ParseSize(const std::string& s);
// "1.0 GiB", "512.0 KiB", "4.0 KiB", "100 B".
std::string FormatSize(uint64_t bytes);

}  // namespace mapfs
