// Batched hashing of consecutive keys: scalar, AVX2 and AVX-512 paths that
// compute the same slots (hash.h).
#include "map/hash.h"

#include <immintrin.h>

#include <atomic>

namespace mapfs::map {
namespace {

void HashScalar(uint64_t first_key, uint32_t count, uint32_t seed, uint32_t n, uint32_t* out) {
  for (uint32_t i = 0; i < count; i++) out[i] = SlotOf(first_key + i, seed, n);
}

// The vector paths need the low halves of the keys not to wrap inside the
// batch (then the high half is one constant); the caller checks.
__attribute__((target("avx2"))) void HashAvx2(uint64_t first_key, uint32_t count, uint32_t seed, uint32_t n,
                                              uint32_t* out) {
  const uint32_t lo = static_cast<uint32_t>(first_key);
  const uint32_t bterm = (static_cast<uint32_t>(first_key >> 32) + seed) * 0x85EBCA77u;
  const __m256i step = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i vb = _mm256_set1_epi32(static_cast<int>(bterm));
  const __m256i vn = _mm256_set1_epi32(static_cast<int>(n));
  uint32_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256i a = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(lo + i)), step);
    __m256i h = _mm256_xor_si256(_mm256_mullo_epi32(a, _mm256_set1_epi32(static_cast<int>(0x9E3779B1u))), vb);
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 15));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xC2B2AE3Du)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x27D4EB2Fu)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    // (h * n) >> 32 per lane: even lanes from one 32x32->64 multiply, odd
    // lanes from another after shifting them down.
    __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(h, vn), 32);
    __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(h, 32), vn);
    __m256i r = _mm256_blend_epi32(even, odd, 0xAA);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), r);
  }
  HashScalar(first_key + i, count - i, seed, n, out + i);
  // Clean upper register halves before returning to code built for SSE:
  // the scalar tail above is a tail call otherwise, the compiler then
  // emits no vzeroupper, and the caller's next SSE instruction stalls on
  // the dirty state (~2,000 cycles per random HashFS lookup on this Xeon).
  _mm256_zeroupper();
}

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_epi32(), which its
// flow analysis reports as "maybe uninitialized" (a known false positive).
// (Clang has no such warning, nor the false positive.)
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) void HashAvx512(uint64_t first_key, uint32_t count, uint32_t seed, uint32_t n,
                                                   uint32_t* out) {
  const uint32_t lo = static_cast<uint32_t>(first_key);
  const uint32_t bterm = (static_cast<uint32_t>(first_key >> 32) + seed) * 0x85EBCA77u;
  const __m512i step = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i vb = _mm512_set1_epi32(static_cast<int>(bterm));
  const __m512i vn = _mm512_set1_epi32(static_cast<int>(n));
  uint32_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512i a = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(lo + i)), step);
    __m512i h = _mm512_xor_si512(_mm512_mullo_epi32(a, _mm512_set1_epi32(static_cast<int>(0x9E3779B1u))), vb);
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0xC2B2AE3Du)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x27D4EB2Fu)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(h, vn), 32);
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(h, 32), vn);
    __m512i r = _mm512_mask_blend_epi32(0xAAAA, even, odd);
    _mm512_storeu_si512(out + i, r);
  }
  HashAvx2(first_key + i, count - i, seed, n, out + i);
  _mm256_zeroupper();  // as in HashAvx2: no tail call, clean upper state
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

HashIsa Detect() {
  if (__builtin_cpu_supports("avx512f")) return HashIsa::kAvx512;
  if (__builtin_cpu_supports("avx2")) return HashIsa::kAvx2;
  return HashIsa::kScalar;
}

std::atomic<HashIsa>& Chosen() {
  static std::atomic<HashIsa> isa{Detect()};
  return isa;
}

}  // namespace

bool HashIsaSupported(HashIsa isa) {
  switch (isa) {
    case HashIsa::kScalar: return true;
    case HashIsa::kAvx2: return __builtin_cpu_supports("avx2");
    case HashIsa::kAvx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2");
  }
  return false;
}

HashIsa CurrentHashIsa() { return Chosen().load(std::memory_order_relaxed); }

bool SetHashIsa(HashIsa isa) {
  if (!HashIsaSupported(isa)) return false;
  Chosen().store(isa, std::memory_order_relaxed);
  return true;
}

const char* ToString(HashIsa isa) {
  switch (isa) {
    case HashIsa::kScalar: return "scalar";
    case HashIsa::kAvx2: return "avx2";
    case HashIsa::kAvx512: return "avx512";
  }
  return "?";
}

void HashConsecutive(uint64_t first_key, uint32_t count, uint32_t seed, uint32_t n, uint32_t* out) {
  // A batch whose low key halves wrap is hashed key by key (rare: a file
  // block crossing a multiple of 2^32).
  const bool wraps = static_cast<uint64_t>(static_cast<uint32_t>(first_key)) + count > (uint64_t{1} << 32);
  HashIsa isa = wraps ? HashIsa::kScalar : CurrentHashIsa();
  switch (isa) {
    case HashIsa::kAvx512: HashAvx512(first_key, count, seed, n, out); return;
    case HashIsa::kAvx2: HashAvx2(first_key, count, seed, n, out); return;
    case HashIsa::kScalar: HashScalar(first_key, count, seed, n, out); return;
  }
}

}  // namespace mapfs::map
