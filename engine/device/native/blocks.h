// The one order in which a native product sums each output, whatever the count of tokens
// (linear.cc): what makes a row's product the same bits alone, among 511 others, in any
// bucket.
//
// A weight is packed at load (ops.py `packed`) into blocks of kLanes rows: for each step of
// kStep inputs, the kLanes rows' kStep weights side by side. A vector of sums holds kLanes
// rows of one token, one row a lane, and a step folds the token's kStep inputs into every
// lane at once. So each output is one chain of steps along its row, from the first input
// to the last, with no sum across lanes at the end; a tile of one token and one of many
// run the same steps for each output, reading the same weights, so none can differ.
//
// An int8 weight's group (its scale's inputs) is summed unscaled from zero, then scaled
// into the row's sums by one multiply-add: the values widen exactly (|v| <= 127 has 8
// significant bits, as bfloat16 has), and one token widens no scale into every weight.
//
// Where the CPU has AVX512_BF16 a step is a pair of inputs in bfloat16, folded by
// `vdpbf16ps` (two multiply-adds a lane an instruction, into float32 sums); elsewhere a
// step is one input in float32, folded by one multiply-add. The inputs come in bfloat16
// (ops.py `linear`).

#pragma once

#include <cstdint>
#include <cstring>

#include "simd.h"

namespace flint {

#if defined(__AVX512BF16__)
#define FLINT_PRODUCTS_IN_PAIRS 1

constexpr int64_t kStep = 2;    // inputs a step folds into each row: a pair
typedef uint16_t InputElement;  // the inputs as they are kept: bfloat16
typedef __m512bh WeightBlock;   // a step's weights of kLanes rows: 32 bfloat16

inline WeightBlock block_of(const uint16_t* p) { return (WeightBlock)_mm512_loadu_si512(p); }

// 32 int8 weights as bfloat16, exactly, in order (cvtne2ps puts its second operand first).
inline WeightBlock block_of(const int8_t* p) {
  const __m512 low = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  const __m512 high =
      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
  return _mm512_cvtne2ps_pbh(high, low);
}

// 32 4-bit weights, two a byte (byte b: weight b in its low half, weight b + 16 in its
// high half: small_values.py `nibbles`), less kBias, as bfloat16, exactly.
template <int kBias>
inline WeightBlock block_of_nibbles(const uint8_t* p) {
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i bias = _mm512_set1_epi32(kBias);
  const __m512 low = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(bytes, _mm512_set1_epi32(15)), bias));
  const __m512 high = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(bytes, 4), bias));
  return _mm512_cvtne2ps_pbh(high, low);
}

// 32 6-bit weights: their low halves as `block_of_nibbles` reads them, then 8 bytes of
// their top two bits (byte i: weights i, i + 8, i + 16, i + 24 at bits 0, 2, 4, 6:
// small_values.py `six_bits`), less kBias, as bfloat16, exactly.
template <int kBias>
inline WeightBlock block_of_six(const uint8_t* p) {
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m128i eight = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16));
  const __m512i tops = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(eight, eight));  // lane l: byte l % 8
  const __m512i at = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  const __m512i three = _mm512_set1_epi32(3), bias = _mm512_set1_epi32(kBias);
  const __m512i further = _mm512_add_epi32(at, _mm512_set1_epi32(4));  // the high half's: weights 16 to 31
  const __m512i low_tops = _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(tops, at), three), 4);
  const __m512i high_tops = _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(tops, further), three), 4);
  const __m512i low = _mm512_or_si512(_mm512_and_si512(bytes, _mm512_set1_epi32(15)), low_tops);
  const __m512i high = _mm512_or_si512(_mm512_srli_epi32(bytes, 4), high_tops);
  return _mm512_cvtne2ps_pbh(_mm512_cvtepi32_ps(_mm512_sub_epi32(high, bias)),
                             _mm512_cvtepi32_ps(_mm512_sub_epi32(low, bias)));
}

// The step's pair of a token's inputs, in every lane, folded into each row's sum.
inline fvec fold(fvec sums, WeightBlock weights, const InputElement* inputs) {
  uint32_t pair;
  std::memcpy(&pair, inputs, sizeof pair);
  return (fvec)_mm512_dpbf16_ps((__m512)sums, weights, (__m512bh)_mm512_set1_epi32(int32_t(pair)));
}

// An input of bfloat16 bits as it is kept.
inline InputElement input_of(uint16_t bits) { return bits; }

#else

constexpr int64_t kStep = 1;
typedef float InputElement;  // the inputs widened to float32 once
typedef fvec WeightBlock;

inline WeightBlock block_of(const uint16_t* p) { return widen(p); }
inline WeightBlock block_of(const int8_t* p) { return widen(p); }

// kLanes 4-bit values, two a byte (byte b: value b in its low half, value b + kLanes / 2
// in its high half: small_values.py `nibbles`), as integers.
inline ivec nibble_integers(const uint8_t* p) {
#if defined(__AVX2__)
  __m128i packed;
  if constexpr (kLanes == 16) {
    packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  } else {
    int32_t four;
    std::memcpy(&four, p, sizeof four);
    packed = _mm_cvtsi32_si128(four);
  }
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i low = _mm_and_si128(packed, mask), high = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
  const __m128i bytes = kLanes == 16 ? _mm_unpacklo_epi64(low, high) : _mm_unpacklo_epi32(low, high);
#if defined(__AVX512F__)
  return (ivec)_mm512_cvtepu8_epi32(bytes);
#else
  return (ivec)_mm256_cvtepu8_epi32(bytes);
#endif
#else
  ivec v;
  for (int i = 0; i < kLanes / 2; ++i) {
    v[i] = p[i] & 15;
    v[i + kLanes / 2] = p[i] >> 4;
  }
  return v;
#endif
}

// kLanes 4-bit weights, two a byte, less kBias, as float32.
template <int kBias>
inline WeightBlock block_of_nibbles(const uint8_t* p) {
  return __builtin_convertvector(nibble_integers(p) - kBias, fvec);
}

// Lane l's top two bits of a 6-bit value lie in byte l % (kLanes / 4) of the block's top
// bytes, at bit 2 (l / (kLanes / 4)) (small_values.py `six_bits`): the shift that brings them down.
#if defined(__AVX512F__)
constexpr ivec kTopShifts = {0, 8, 16, 24, 2, 10, 18, 26, 4, 12, 20, 28, 6, 14, 22, 30};
#else
constexpr ivec kTopShifts = {0, 8, 2, 10, 4, 12, 6, 14};
#endif

// kLanes 6-bit weights: their low halves as `block_of_nibbles` reads them, then kLanes / 4
// bytes of their top two bits, less kBias, as float32.
template <int kBias>
inline WeightBlock block_of_six(const uint8_t* p) {
  int32_t tops = 0;
  std::memcpy(&tops, p + kLanes / 2, kLanes / 4);
  const ivec high = (((ivec){} + tops) >> kTopShifts & 3) << 4;
  return __builtin_convertvector((nibble_integers(p) | high) - kBias, fvec);
}

inline fvec fold(fvec sums, WeightBlock weights, const InputElement* inputs) {
  return fused_multiply_add(weights, splat(*inputs), sums);
}

inline InputElement input_of(uint16_t bits) { return bfloat16_value(bits); }

#endif

constexpr int64_t kBlockElements = kLanes * kStep;  // a packed block: a step's weights of kLanes rows

// The weights' elements a block of a widened buffer holds, as a block carries them
// (linear.cc widens a chunk's rows once for many tokens).
#if defined(FLINT_PRODUCTS_IN_PAIRS)
typedef uint16_t BufferElement;
inline WeightBlock block_of_buffer(const BufferElement* p) { return block_of(p); }
#else
typedef float BufferElement;
inline WeightBlock block_of_buffer(const BufferElement* p) { return load(p); }
#endif
inline void store_block(BufferElement* out, WeightBlock block) { std::memcpy(out, &block, sizeof block); }

}  // namespace flint
