// CRC-32C (Castagnoli), hardware-accelerated with SSE4.2 where present.
// Used for every checksummed on-media structure (pool header, redo records).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mapfs {

uint32_t Crc32c(const void* data, size_t n, uint32_t seed = 0);

}  // namespace mapfs
