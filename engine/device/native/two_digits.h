// A token's inputs as dot.cc multiplies them: per group of the weight's inputs, two int8
// digits, x = d (q + r / 254), q = round(x / d) with d = max |x| / 127 and r the rest in
// 254ths of d (dot.cc says why two). AVX-512 only: dot.cc includes it where it builds the
// integer dot products.

#pragma once

#include <cstdint>
#include <vector>

#include "simd.h"

namespace flint {

constexpr float kRest = 254.0f;  // the second digit's steps in one of the first's

// Each token's inputs quantized per group in two int8 digits (the module's comment): the
// digits, the group's scale d, each digit's sum, and the group's sum as the digits stand
// for it, d (sum q + sum r / 254).
struct QuantizedInputs {
  std::vector<int8_t> high, low;         // [tokens, k]
  std::vector<float> scales, totals;     // [tokens, groups]
  std::vector<int32_t> high_sums, low_sums;  // [tokens, groups]
  int64_t k, groups;
};

// 16 bfloat16 inputs as float32.
inline __m512 sixteen_inputs(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(p))), 16));
}

// One group of a token's inputs in two digits, 16 lanes at a time: the digits written at
// `high` and `low`, the group's scale and sums at `at`.
inline void quantize_group(const uint16_t* x, int64_t group, int8_t* high, int8_t* low, QuantizedInputs& in, int64_t at) {
  __m512 largest = _mm512_setzero_ps();
  for (int64_t i = 0; i < group; i += 16) largest = _mm512_max_ps(largest, _mm512_abs_ps(sixteen_inputs(x + i)));
  const float most = _mm512_reduce_max_ps(largest);
  const __m512 inverse = _mm512_set1_ps(most > 0.0f ? 127.0f / most : 0.0f), rest = _mm512_set1_ps(kRest);
  const __m512 bound = _mm512_set1_ps(127.0f);
  __m512i high_sums = _mm512_setzero_si512(), low_sums = _mm512_setzero_si512();
  for (int64_t i = 0; i < group; i += 16) {
    const __m512 steps = _mm512_mul_ps(sixteen_inputs(x + i), inverse);
    const __m512 whole = _mm512_roundscale_ps(steps, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 part = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_sub_ps(steps, whole), rest),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    part = _mm512_min_ps(_mm512_max_ps(part, _mm512_sub_ps(_mm512_setzero_ps(), bound)), bound);
    const __m512i whole_int = _mm512_cvtps_epi32(whole), part_int = _mm512_cvtps_epi32(part);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(high + i), _mm512_cvtepi32_epi8(whole_int));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(low + i), _mm512_cvtepi32_epi8(part_int));
    high_sums = _mm512_add_epi32(high_sums, whole_int);
    low_sums = _mm512_add_epi32(low_sums, part_int);
  }
  const float scale = most / 127.0f;
  in.scales[at] = scale;
  in.high_sums[at] = _mm512_reduce_add_epi32(high_sums);
  in.low_sums[at] = _mm512_reduce_add_epi32(low_sums);
  in.totals[at] = scale * (float(in.high_sums[at]) + float(in.low_sums[at]) / kRest);
}

// Every token's inputs in two digits, group by group (groups of 16 or 32), the tokens
// spread over the pool (each writes its own rows: the same bits however they are spread).
inline QuantizedInputs quantized(ffi::ThreadPool& pool, const uint16_t* x, int64_t tokens, int64_t k, int64_t group) {
  const int64_t groups = k / group, count = tokens * groups;
  QuantizedInputs in{std::vector<int8_t>(tokens * k), std::vector<int8_t>(tokens * k), std::vector<float>(count),
                     std::vector<float>(count), std::vector<int32_t>(count), std::vector<int32_t>(count), k, groups};
  parallel_for(pool, tokens, [&](int64_t token) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t first = token * k + g * group;
      quantize_group(x + first, group, in.high.data() + first, in.low.data() + first, in, token * groups + g);
    }
  });
  return in;
}

}  // namespace flint
