// Small loads of byte strings as words, for the name paths (hash, checks,
// the walk's name cache) that every lookup runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mapfs {

// The n < 8 bytes at p as a little-endian word, zero above them, without a
// call to memcpy (a variable-sized copy is one, ~15 instructions and a
// call): two overlapping loads, or three single bytes below 4.
inline uint64_t LoadTail(const char* p, size_t n) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the word is the bytes in memory order");
  auto b = [p](size_t i) { return static_cast<uint64_t>(static_cast<unsigned char>(p[i])); };
  if (n >= 4) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return uint64_t{lo} | (uint64_t{hi} << (8 * (n - 4)));
  }
  if (n == 0) return 0;
  return b(0) | (b(n / 2) << (8 * (n / 2))) | (b(n - 1) << (8 * (n - 1)));
}

}  // namespace mapfs
