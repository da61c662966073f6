// What Flint's native CPU kernels share (linear.cc, attention.cc): SIMD vectors of float32
// and the threading over XLA's intra-op pool.
//
// The SIMD is GCC's vector extensions: 16 lanes of float32 where AVX-512 is compiled in
// (-march=native, at install time), 8 otherwise; the widenings and the horizontal sum are
// spelled in intrinsics where GCC's generic forms go lane by lane.

#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include <immintrin.h>

#include "xla/ffi/api/ffi.h"

namespace flint {

namespace ffi = xla::ffi;

#ifdef __AVX512F__
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif

typedef float fvec __attribute__((vector_size(kLanes * 4)));
typedef int32_t ivec __attribute__((vector_size(kLanes * 4)));

inline fvec load(const float* p) {
  fvec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// s in every lane. (GCC's `fvec{} + s` is an add of zero, kept without fast-math, before
// the broadcast; the intrinsic broadcasts straight from memory.)
inline fvec splat(float s) {
#if defined(__AVX512F__)
  return (fvec)_mm512_set1_ps(s);
#elif defined(__AVX__)
  return (fvec)_mm256_set1_ps(s);
#else
  return fvec{} + s;
#endif
}

inline float sum(fvec v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps((__m512)v);
#else
  float total = 0.0f;
  for (int i = 0; i < kLanes; ++i) total += v[i];
  return total;
#endif
}

inline fvec fused_multiply_add(fvec a, fvec b, fvec c) {
#if defined(__AVX512F__)
  return (fvec)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
  return (fvec)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;  // built with -ffp-contract=off: the same two roundings everywhere
#endif
}

inline float max_of(fvec v) {
#if defined(__AVX512F__)
  return _mm512_reduce_max_ps((__m512)v);
#else
  float most = v[0];
  for (int i = 1; i < kLanes; ++i) most = std::max(most, v[i]);
  return most;
#endif
}

// 0, 1, ..., kLanes - 1.
inline ivec lane_index() {
  ivec lanes;
  for (int i = 0; i < kLanes; ++i) lanes[i] = i;
  return lanes;
}

// Lane i of combine<S>(a, b): a's and b's keys, of S lanes each, as keys of S / 2 lanes,
// a's first (upper: each key's upper half of lanes, else its lower).
template <int S, bool kUpper>
constexpr int combined_lane(int i) {
  const int half = S / 2, key = i / half, keys_a = kLanes / S;
  const int first = key < keys_a ? key * S : kLanes + (key - keys_a) * S;
  return first + i % half + (kUpper ? half : 0);
}

template <int S, size_t... I>
inline fvec combine(fvec a, fvec b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, combined_lane<S, false>(I)...) +
         __builtin_shufflevector(a, b, combined_lane<S, true>(I)...);
}

// Folds v[0..S) (each kLanes / S keys of S lanes) into v[0..S / 2) until one vector holds
// a key a lane.
template <int S>
inline void fold_halves(fvec* v) {
  if constexpr (S > 1) {
    for (int j = 0; j < S / 2; ++j) v[j] = combine<S>(v[2 * j], v[2 * j + 1], std::make_index_sequence<kLanes>{});
    fold_halves<S / 2>(v);
  }
}

// The sums of kLanes vectors, vector s's in lane s: halves added pairwise, log2(kLanes)
// levels of shuffles and adds for all of them, where one horizontal sum a vector would
// take as many for each. `v` is overwritten.
inline fvec lane_sums(fvec* v) {
  fold_halves<kLanes>(v);
  return v[0];
}

// A bfloat16's value: a float32's upper half.
inline float bfloat16_value(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

// kLanes int8 weights as float32. (GCC's __builtin_convertvector widens int8 to float
// one lane at a time, so the widening is spelled out.)
inline fvec widen(const int8_t* p) {
#if defined(__AVX512F__)
  return (fvec)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX2__)
  return (fvec)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  fvec v;
  for (int i = 0; i < kLanes; ++i) v[i] = p[i];
  return v;
#endif
}

// An fp16's bits: a GGUF format's own scale or offset, kept as it is (integer_weight.py Int8Weight).
struct Half {
  uint16_t bits;
};

// An fp16's value, spelled out where the CPU has no F16C.
inline float half_value(uint16_t bits) {
  const uint32_t sign = uint32_t(bits & 0x8000) << 16, exponent = (bits >> 10) & 31, mantissa = bits & 1023;
  float magnitude;
  if (exponent == 0) magnitude = std::ldexp(float(mantissa), -24);  // zero, or subnormal
  else if (exponent == 31) magnitude = mantissa ? __builtin_nanf("") : __builtin_inff();
  else magnitude = std::ldexp(float(mantissa | 1024), int(exponent) - 25);
  uint32_t wide;
  std::memcpy(&wide, &magnitude, 4);
  wide |= sign;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

// kLanes fp16 scales as float32, exactly.
inline fvec load(const Half* p) {
#if defined(__AVX512F__)
  return (fvec)_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#elif defined(__F16C__)
  return (fvec)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
  fvec v;
  for (int i = 0; i < kLanes; ++i) v[i] = half_value(p[i].bits);
  return v;
#endif
}

// kLanes bfloat16 weights as float32: a bfloat16 is a float32's upper half.
inline fvec widen(const uint16_t* p) {
#if defined(__AVX512F__)
  __m512i bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
  return (fvec)_mm512_castsi512_ps(bits);
#elif defined(__AVX2__)
  __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
  return (fvec)_mm256_castsi256_ps(bits);
#else
  fvec v;
  for (int i = 0; i < kLanes; ++i) {
    uint32_t bits = uint32_t(p[i]) << 16;
    std::memcpy(&v[i], &bits, 4);
  }
  return v;
#endif
}

// Runs body(chunk) for chunk in [0, chunks) on the calling thread and XLA's intra-op pool.
// Helpers claim chunks from a shared counter, so the caller waits only for chunks a helper
// actually took: a helper the pool starts late finds none left and never touches `body`.
// (Workers of the kernels' own that spin between calls, so as to join each call at once,
// measured slower: on a small CPU they take cores from XLA's threads.)
// A traced layer index kept within the stack's `layers`: an out-of-range index reads the
// nearest layer rather than past the buffer.
inline int64_t layer_in_range(int32_t layer, int64_t layers) { return std::clamp<int64_t>(layer, 0, layers - 1); }

template <typename Body>
void parallel_for(ffi::ThreadPool& pool, int64_t chunks, const Body& body) {
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), chunks) - 1;
  if (helpers <= 0) {
    for (int64_t chunk = 0; chunk < chunks; ++chunk) body(chunk);
    return;
  }
  struct Claims {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> busy{0};
  };
  auto claims = std::make_shared<Claims>();
  auto run = [claims, chunks, &body] {
    claims->busy.fetch_add(1);
    for (int64_t chunk; (chunk = claims->next.fetch_add(1)) < chunks;) body(chunk);
    claims->busy.fetch_sub(1);
  };
  for (int64_t helper = 0; helper < helpers; ++helper) pool.Schedule(decltype(run)(run));
  for (int64_t chunk; (chunk = claims->next.fetch_add(1)) < chunks;) body(chunk);
  while (claims->busy.load() > 0) std::this_thread::yield();
}


}  // namespace flint
