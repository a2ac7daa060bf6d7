#include "medium/persist.h"

#include <immintrin.h>

#include <cstdlib>
#include <cstring>

namespace mapfs::medium {
namespace {

constexpr uintptr_t kLine = 64;

// ---- write-back of cache lines ------------------------------------------

__attribute__((target("clwb"))) void FlushClwb(const void* addr, size_t n) {
  uintptr_t p = reinterpret_cast<uintptr_t>(addr) & ~(kLine - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(addr) + n;
  for (; p < end; p += kLine) _mm_clwb(reinterpret_cast<void*>(p));
}

__attribute__((target("clflushopt"))) void FlushClflushopt(const void* addr, size_t n) {
  uintptr_t p = reinterpret_cast<uintptr_t>(addr) & ~(kLine - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(addr) + n;
  for (; p < end; p += kLine) _mm_clflushopt(reinterpret_cast<void*>(p));
}

void FlushClflush(const void* addr, size_t n) {
  uintptr_t p = reinterpret_cast<uintptr_t>(addr) & ~(kLine - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(addr) + n;
  for (; p < end; p += kLine) _mm_clflush(reinterpret_cast<void*>(p));
}

void FlushNone(const void*, size_t) {}

// The flush used for the unaligned edges of a non-temporal copy.
detail::FlushFn edge_flush = FlushClwb;

// ---- non-temporal copies --------------------------------------------------
// Each copies the unaligned head and tail with memcpy (then writes those lines
// back) and streams the 64-byte-aligned middle.

template <typename Body>
inline void CopyFramed(void* dst, const void* src, size_t n, Body body) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (n < 2 * kLine) {
    std::memcpy(d, s, n);
    edge_flush(d, n);
    return;
  }
  size_t head = (kLine - (reinterpret_cast<uintptr_t>(d) & (kLine - 1))) & (kLine - 1);
  if (head) {
    std::memcpy(d, s, head);
    edge_flush(d, head);
    d += head;
    s += head;
    n -= head;
  }
  size_t body_len = n & ~(kLine - 1);
  body(d, s, body_len);
  size_t tail = n - body_len;
  if (tail) {
    std::memcpy(d + body_len, s + body_len, tail);
    edge_flush(d + body_len, tail);
  }
}

__attribute__((target("avx512f"))) void BodyAvx512(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    __m512i v = _mm512_loadu_si512(reinterpret_cast<const void*>(s + i));
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), v);
  }
}
__attribute__((target("avx2"))) void BodyAvx2(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
  }
}
void BodySse2(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), v);
  }
}

void CopyAvx512(void* d, const void* s, size_t n) { CopyFramed(d, s, n, BodyAvx512); }
void CopyAvx2(void* d, const void* s, size_t n) { CopyFramed(d, s, n, BodyAvx2); }
void CopySse2(void* d, const void* s, size_t n) { CopyFramed(d, s, n, BodySse2); }

template <typename Body>
inline void ZeroFramed(void* dst, size_t n, Body body) {
  auto* d = static_cast<char*>(dst);
  if (n < 2 * kLine) {
    std::memset(d, 0, n);
    edge_flush(d, n);
    return;
  }
  size_t head = (kLine - (reinterpret_cast<uintptr_t>(d) & (kLine - 1))) & (kLine - 1);
  if (head) {
    std::memset(d, 0, head);
    edge_flush(d, head);
    d += head;
    n -= head;
  }
  size_t body_len = n & ~(kLine - 1);
  body(d, body_len);
  if (n > body_len) {
    std::memset(d + body_len, 0, n - body_len);
    edge_flush(d + body_len, n - body_len);
  }
}

__attribute__((target("avx512f"))) void ZeroBodyAvx512(char* d, size_t n) {
  __m512i z = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 64) _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), z);
}
__attribute__((target("avx2"))) void ZeroBodyAvx2(char* d, size_t n) {
  __m256i z = _mm256_setzero_si256();
  for (size_t i = 0; i < n; i += 32) _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), z);
}
void ZeroBodySse2(char* d, size_t n) {
  __m128i z = _mm_setzero_si128();
  for (size_t i = 0; i < n; i += 16) _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), z);
}
void ZeroAvx512(void* d, size_t n) { ZeroFramed(d, n, ZeroBodyAvx512); }
void ZeroAvx2(void* d, size_t n) { ZeroFramed(d, n, ZeroBodyAvx2); }
void ZeroSse2(void* d, size_t n) { ZeroFramed(d, n, ZeroBodySse2); }

bool CpuHas(CopyIsa isa) {
  switch (isa) {
    case CopyIsa::kAvx512: return __builtin_cpu_supports("avx512f");
    case CopyIsa::kAvx2: return __builtin_cpu_supports("avx2");
    case CopyIsa::kSse2: return true;
  }
  return false;
}

bool CpuHas(FlushIsa isa) {
  // __builtin_cpu_supports knows neither clwb nor clflushopt on every
  // compiler, so read CPUID leaf 7 (EBX bit 24 = clwb, bit 23 = clflushopt).
  unsigned a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  switch (isa) {
    case FlushIsa::kClwb: return (b >> 24) & 1;
    case FlushIsa::kClflushopt: return (b >> 23) & 1;
    case FlushIsa::kClflush: return true;
  }
  return false;
}

PersistConfig current;

void Apply(const PersistConfig& cfg) {
  current = cfg;
  switch (cfg.copy) {
    case CopyIsa::kAvx512: detail::copy_nt = CopyAvx512; detail::zero_nt = ZeroAvx512; break;
    case CopyIsa::kAvx2: detail::copy_nt = CopyAvx2; detail::zero_nt = ZeroAvx2; break;
    case CopyIsa::kSse2: detail::copy_nt = CopySse2; detail::zero_nt = ZeroSse2; break;
  }
  detail::FlushFn f = FlushClflush;
  if (cfg.flush == FlushIsa::kClwb) f = FlushClwb;
  if (cfg.flush == FlushIsa::kClflushopt) f = FlushClflushopt;
  if (cfg.domain == Domain::kNone) f = FlushNone;
  detail::flush = f;
  edge_flush = f;
}

bool InitFromCpu() {
  PersistConfig cfg = DetectPersistConfig();
  const char* env = std::getenv("MAPFS_PERSIST");
  if (env != nullptr && std::strcmp(env, "none") == 0) cfg.domain = Domain::kNone;
  Apply(cfg);
  return true;
}

}  // namespace

namespace detail {
CopyFn copy_nt = CopySse2;
ZeroFn zero_nt = ZeroSse2;
FlushFn flush = FlushClflush;
}  // namespace detail

// Runs before main() in every program that links the core. It only reads
// CPUID and the environment: no libc lookups that could misbehave under
// sanitizers or LD_PRELOAD.
static const bool initialized = InitFromCpu();

PersistConfig DetectPersistConfig() {
  PersistConfig cfg;
  cfg.copy = CpuHas(CopyIsa::kAvx512) ? CopyIsa::kAvx512
             : CpuHas(CopyIsa::kAvx2) ? CopyIsa::kAvx2
                                      : CopyIsa::kSse2;
  cfg.flush = CpuHas(FlushIsa::kClwb)       ? FlushIsa::kClwb
              : CpuHas(FlushIsa::kClflushopt) ? FlushIsa::kClflushopt
                                              : FlushIsa::kClflush;
  cfg.domain = Domain::kFlush;
  return cfg;
}

const PersistConfig& CurrentPersistConfig() {
  (void)initialized;
  return current;
}

bool SetPersistConfig(const PersistConfig& cfg) {
  if (!CpuHas(cfg.copy) || !CpuHas(cfg.flush)) return false;
  Apply(cfg);
  return true;
}

const char* ToString(CopyIsa isa) {
  switch (isa) {
    case CopyIsa::kAvx512: return "avx512";
    case CopyIsa::kAvx2: return "avx2";
    case CopyIsa::kSse2: return "sse2";
  }
  return "?";
}
const char* ToString(FlushIsa isa) {
  switch (isa) {
    case FlushIsa::kClwb: return "clwb";
    case FlushIsa::kClflushopt: return "clflushopt";
    case FlushIsa::kClflush: return "clflush";
  }
  return "?";
}
const char* ToString(Domain d) { return d == Domain::kFlush ? "flush" : "none"; }

namespace trace_detail {
std::atomic<TraceHook*> hook{nullptr};
std::atomic<InjectedBug> bug{InjectedBug::kNone};
}  // namespace trace_detail
void SetTraceHook(TraceHook* h) { trace_detail::hook.store(h, std::memory_order_release); }
TraceHook* CurrentTraceHook() { return trace_detail::hook.load(std::memory_order_acquire); }
void SetInjectedBug(InjectedBug b) { trace_detail::bug.store(b, std::memory_order_release); }

}  // namespace mapfs::medium
