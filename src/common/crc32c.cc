#include "common/crc32c.h"

#include <cstring>
#include <nmmintrin.h>

namespace mapfs {
namespace {

// Reflected CRC-32C polynomial.
constexpr uint32_t kPoly = 0x82F63B78u;

struct Tables {
  uint32_t bytewise[256];
  // shift_long[k][b] / shift_short[k][b]: the CRC register holding byte b at
  // position k (bits 8k..8k+7), advanced over kLong / kShort zero bytes.
  uint32_t shift_long[4][256];
  uint32_t shift_short[4][256];
};

// Hardware path: three independent streams over three consecutive blocks of
// a round, so the crc32 instruction's 3-cycle latency is hidden (one result
// per cycle), then the first two streams are advanced past the blocks that
// follow them and folded in. Sizes: a 4 KiB redo record is one long round
// plus short rounds; anything under a short round is one stream.
constexpr size_t kLong = 1024;  // bytes per stream in a long round
constexpr size_t kShort = 128;  // bytes per stream in a short round

// a * b modulo the polynomial (both reflected; bit 31 is x^0).
uint32_t MulMod(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(8n) modulo the polynomial: what advancing a register over n zero
// bytes multiplies it by.
uint32_t ZerosOperator(size_t n) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t sq = 1u << 23;      // x^8
  while (n) {
    if (n & 1) result = MulMod(sq, result);
    sq = MulMod(sq, sq);
    n >>= 1;
  }
  return result;
}

void FillShift(uint32_t table[4][256], size_t zeros) {
  uint32_t op = ZerosOperator(zeros);
  for (int k = 0; k < 4; k++)
    for (uint32_t b = 0; b < 256; b++) table[k][b] = MulMod(op, b << (8 * k));
}

const Tables& GetTables() {
  static const Tables* t = [] {
    auto* t = new Tables;
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c & 1) ? kPoly ^ (c >> 1) : c >> 1;
      t->bytewise[i] = c;
    }
    FillShift(t->shift_long, kLong);
    FillShift(t->shift_short, kShort);
    return t;
  }();
  return *t;
}

inline uint32_t Shift(const uint32_t table[4][256], uint32_t crc) {
  return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

uint32_t Software(const uint8_t* p, size_t n, uint32_t crc) {
  const Tables& t = GetTables();
  for (size_t i = 0; i < n; i++) crc = t.bytewise[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

inline uint64_t Word(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// One round of three streams of `len` bytes each; `shift` advances a
// register over `len` zero bytes.
__attribute__((target("sse4.2"))) inline uint32_t Round(const uint8_t* p, size_t len, uint32_t crc,
                                                         const uint32_t shift[4][256]) {
  uint64_t c0 = crc, c1 = 0, c2 = 0;
  for (size_t i = 0; i < len; i += 8) {
    c0 = _mm_crc32_u64(c0, Word(p + i));
    c1 = _mm_crc32_u64(c1, Word(p + len + i));
    c2 = _mm_crc32_u64(c2, Word(p + 2 * len + i));
  }
  // Registers are linear: stream 0 moves past blocks 1 and 2, stream 1
  // past block 2.
  uint32_t r = Shift(shift, static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
  return Shift(shift, r) ^ static_cast<uint32_t>(c2);
}

__attribute__((target("sse4.2"))) uint32_t Hardware(const uint8_t* p, size_t n, uint32_t crc) {
  if (n >= 3 * kShort) {
    const Tables& t = GetTables();
    while (n >= 3 * kLong) {
      crc = Round(p, kLong, crc, t.shift_long);
      p += 3 * kLong;
      n -= 3 * kLong;
    }
    while (n >= 3 * kShort) {
      crc = Round(p, kShort, crc, t.shift_short);
      p += 3 * kShort;
      n -= 3 * kShort;
    }
  }
  uint64_t c = crc;
  while (n >= 8) {
    c = _mm_crc32_u64(c, Word(p));
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");

__attribute__((target("sse4.2"))) uint32_t HardwareWords(const uint64_t* w, size_t n) {
  uint64_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = _mm_crc32_u64(c, w[i]);
  return ~static_cast<uint32_t>(c);
}

}  // namespace

uint32_t Crc32cWords(const uint64_t* w, size_t n) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "words are the bytes in memory order");
  return kHaveSse42 ? HardwareWords(w, n) : ~Software(reinterpret_cast<const uint8_t*>(w), 8 * n, 0xffffffffu);
}

uint32_t Crc32c(const void* data, size_t n, uint32_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = ~seed;
  crc = kHaveSse42 ? Hardware(p, n, crc) : Software(p, n, crc);
  return ~crc;
}

}  // namespace mapfs
