// CRC-32C (Castagnoli), hardware-accelerated with SSE4.2 where present.
// Used for every checksummed on-media structure (pool header, redo records).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mapfs {

uint32_t Crc32c(const void* data, size_t n, uint32_t seed = 0);
// Crc32c of `n` words as stored little-endian (the same value as Crc32c of
// their 8n bytes), for small headers checked on hot paths: no byte tail,
// no rounds, the words already in registers (a caller can mask a field).
uint32_t Crc32cWords(const uint64_t* w, size_t n);

}  // namespace mapfs
