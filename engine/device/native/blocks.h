// The one order in which a native product sums each output, whatever the count of tokens
// (linear.cc): what makes a row's product the same bits alone, among 511 others, in any
// bucket.
//
// An output (row, token) keeps one SIMD vector of sums. A step folds one block of inputs
// into it: kBlock consecutive inputs, each lane taking its own inputs of the block, in
// order along the row, from the first block to the last. The lanes are added last, by
// `sum` (simd.h), one fixed tree. Every tile of linear.cc, of one token or of many, runs
// exactly these steps for each of its outputs, so none can differ.
//
// Where the CPU has AVX512_BF16 a block is 32 inputs in pairs of bfloat16, folded by
// `vdpbf16ps` (two multiply-adds a lane an instruction, into float32 sums); elsewhere a
// block is kLanes inputs in float32, folded by one multiply-add. The inputs come in
// bfloat16 (ops.py `linear`). An int8 weight is its value times its group's scale: in
// pairs rounded to bfloat16 (a scale per group kept apart costs a multiply-add for every
// two blocks of a group of 64, which held products of many tokens to half the rate;
// tests/engine/test_quantization.py's gate holds either way), in float32 otherwise.

#pragma once

#include <cstdint>
#include <cstring>

#include "simd.h"

namespace flint {

inline fvec fused_multiply_add(fvec a, fvec b, fvec c) {
#if defined(__AVX512F__)
  return (fvec)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
  return (fvec)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;  // built with -ffp-contract=off: the same two roundings everywhere
#endif
}

#if defined(__AVX512BF16__)
#define FLINT_PRODUCTS_IN_PAIRS 1

constexpr int64_t kBlock = 32;  // inputs a step folds: 16 lanes of pairs
typedef uint16_t InputElement;  // the inputs as they are kept: bfloat16
typedef __m512bh WeightBlock;

inline WeightBlock block_of(const uint16_t* p) { return (WeightBlock)_mm512_loadu_si512(p); }

// 32 int8 weights times their group's scale, rounded to bfloat16, in order (cvtne2ps puts
// its second operand first).
inline WeightBlock block_of(const int8_t* p, float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 low = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  const __m512 high =
      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
  return _mm512_cvtne2ps_pbh(_mm512_mul_ps(high, s), _mm512_mul_ps(low, s));
}

inline fvec fold(fvec sums, WeightBlock weights, const InputElement* inputs) {
  return (fvec)_mm512_dpbf16_ps((__m512)sums, weights, (__m512bh)_mm512_loadu_si512(inputs));
}

// An input of bfloat16 bits as it is kept.
inline InputElement input_of(uint16_t bits) { return bits; }

#else

constexpr int64_t kBlock = kLanes;
typedef float InputElement;  // the inputs widened to float32 once
typedef fvec WeightBlock;

inline WeightBlock block_of(const uint16_t* p) { return widen(p); }
inline WeightBlock block_of(const int8_t* p, float scale) { return widen(p) * splat(scale); }

inline fvec fold(fvec sums, WeightBlock weights, const InputElement* inputs) {
  return fused_multiply_add(weights, load(inputs), sums);
}

inline InputElement input_of(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

#endif

// The weights' elements a block of a widened buffer holds, as a block carries them
// (linear.cc widens a chunk's rows once for many tokens).
#if defined(FLINT_PRODUCTS_IN_PAIRS)
typedef uint16_t BufferElement;
inline void store_block(BufferElement* out, WeightBlock block) { std::memcpy(out, &block, sizeof block); }
inline WeightBlock block_of_buffer(const BufferElement* p) { return block_of(p); }
#else
typedef float BufferElement;
inline void store_block(BufferElement* out, WeightBlock block) { std::memcpy(out, &block, sizeof block); }
inline WeightBlock block_of_buffer(const BufferElement* p) { return load(p); }
#endif

}  // namespace flint
