// Hashing of table keys (hashfs, cuckoo), one key or a batch at a time.
//
// The hash works on 32-bit lanes so that a batch of consecutive file blocks
// can be hashed with AVX2 (8 lanes) or AVX-512 (16 lanes); the scalar code
// computes exactly the same values (the tests compare every path). The
// instruction set is chosen once at run time by __builtin_cpu_supports.
//
// Slot of a key in a table of n entries (n < 2^32): (Hash32(key, seed) * n)
// >> 32, which spreads the 32-bit hash over [0, n) without a division.
#pragma once

#include <cstdint>

namespace mapfs::map {

enum class HashIsa { kScalar, kAvx2, kAvx512 };

constexpr uint32_t kSeedPrimary = 0;
constexpr uint32_t kSeedSecondary = 0x5bd1e995u;  // the cuckoo table's second function

inline uint32_t Hash32(uint64_t key, uint32_t seed) {
  uint32_t a = static_cast<uint32_t>(key);
  uint32_t b = static_cast<uint32_t>(key >> 32) + seed;
  uint32_t h = a * 0x9E3779B1u ^ b * 0x85EBCA77u;
  h ^= h >> 15;
  h *= 0xC2B2AE3Du;
  h ^= h >> 13;
  h *= 0x27D4EB2Fu;
  h ^= h >> 16;
  return h;
}

inline uint32_t Reduce(uint32_t h, uint32_t n) {
  return static_cast<uint32_t>((uint64_t{h} * n) >> 32);
}

inline uint32_t SlotOf(uint64_t key, uint32_t seed, uint32_t n) { return Reduce(Hash32(key, seed), n); }

// out[i] = SlotOf(first_key + i, seed, n) for i < count: the keys of
// consecutive file blocks of one file. Uses the chosen instruction set.
void HashConsecutive(uint64_t first_key, uint32_t count, uint32_t seed, uint32_t n, uint32_t* out);

// The instruction set in use, and an override for tests and benchmarks
// (false if the CPU lacks it).
HashIsa CurrentHashIsa();
bool SetHashIsa(HashIsa isa);
bool HashIsaSupported(HashIsa isa);
const char* ToString(HashIsa isa);

}  // namespace mapfs::map
