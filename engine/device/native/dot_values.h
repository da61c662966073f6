// The weights a product over integer inputs reads (dot.cc): a pair of steps of 16 rows' values
// at a time, as two vectors of unsigned bytes for `vpdpbusd`, from each packed layout (ops.py
// `packed`; small_values.py `nibbles`, `six_bits`; int8), or from a chunk's blocks read once
// into a buffer. AVX512-VNNI builds only: dot.cc includes it where it builds the integer dot products.

#pragma once

#include <cstdint>

#include "simd.h"

namespace flint {

constexpr int64_t kDotStep = 4;                 // inputs a lane folds an instruction
constexpr int64_t kDotBytes = kLanes * kDotStep;  // a step's weights of 16 rows: 64 bytes

// A pair of steps' weights of 16 rows as unsigned bytes: 4-bit values, the pair's 64 bytes
// holding the first step in their low halves and the second in their high halves.
struct DotNibbles {
  using Element = uint8_t;
  static constexpr ffi::DataType kType = ffi::DataType::U8;
  const uint8_t* values;  // [n / 16, k / 8, 64]
  static constexpr int64_t kBlockBytes = kDotBytes / 2;
  static constexpr bool kUnpackOnce = false;  // a mask and a shift: cheaper than a buffer's stores
  static constexpr int kOneTokenBlocks = 2;   // blocks a one-token tile carries (dot.cc `dot_tokens`)
  void pair(int64_t block, int64_t pair, int64_t k, __m512i& first, __m512i& second) const {
    const __m512i bytes = _mm512_loadu_si512(values + (block * (k / (2 * kDotStep)) + pair) * kDotBytes);
    const __m512i mask = _mm512_set1_epi8(15);
    first = _mm512_and_si512(bytes, mask);
    second = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask);
  }
};

// 6-bit values: a pair of steps' low halves as `DotNibbles` reads them (64 bytes), then
// their top two bits four a byte (32 bytes: byte i holds values i, i + 32, i + 64, i + 96
// of the pair at bits 0, 2, 4, 6: small_values.py `six_bits`).
struct DotSixBits {
  using Element = uint8_t;
  static constexpr ffi::DataType kType = ffi::DataType::U8;
  const uint8_t* values;  // [n / 16, k / 4, 48]
  static constexpr int64_t kBlockBytes = kDotBytes * 3 / 4;
  static constexpr bool kUnpackOnce = true;  // read once for many tokens: 11-13% faster than each tile
  // Four: the top bits' shifts and masks leave the core waiting on fewer streams (the
  // 1B's ffn_down 10-13% and q|k|v 17-23% faster on one core than with 2; Q4_K gained nothing).
  static constexpr int kOneTokenBlocks = 4;
  void pair(int64_t block, int64_t pair, int64_t k, __m512i& first, __m512i& second) const {
    const uint8_t* at = values + (block * (k / (2 * kDotStep)) + pair) * 2 * kBlockBytes;
    const __m512i bytes = _mm512_loadu_si512(at);
    // Every byte of the top bytes in both halves; the upper half's read two bits further up
    // (a 16-bit shift: what it brings in from the next byte is masked off).
    const __m512i tops = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + kDotBytes)));
    const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i down = _mm512_srlv_epi16(tops, shifts);
    const __m512i mask = _mm512_set1_epi8(15), top_mask = _mm512_set1_epi8(0x30);
    first = _mm512_or_si512(_mm512_and_si512(bytes, mask), _mm512_and_si512(_mm512_slli_epi16(down, 4), top_mask));
    second = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask), _mm512_and_si512(down, top_mask));
  }
};

// int8 values, 64 bytes a step, their sign bits flipped as read (q + 128).
struct DotBytes {
  using Element = int8_t;
  static constexpr ffi::DataType kType = ffi::DataType::S8;
  const int8_t* values;  // [n / 16, k / 4, 64]
  static constexpr int64_t kBlockBytes = kDotBytes;
  static constexpr bool kUnpackOnce = false;
  static constexpr int kOneTokenBlocks = 2;
  void pair(int64_t block, int64_t pair, int64_t k, __m512i& first, __m512i& second) const {
    const int8_t* at = values + (block * (k / kDotStep) + 2 * pair) * kDotBytes;
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    first = _mm512_xor_si512(_mm512_loadu_si512(at), flip);
    second = _mm512_xor_si512(_mm512_loadu_si512(at + kDotBytes), flip);
  }
};

// A chunk's blocks from block `first`, each pair of steps already read into its two vectors
// of unsigned bytes (`unpacked`): for many tokens, which then meet each block's weights
// without widening them again, tile after tile.
struct DotUnpacked {
  const uint8_t* values;  // [blocks of the chunk, k / 8, 128]
  int64_t first;
  static constexpr int kOneTokenBlocks = 2;  // (a chunk is unpacked for many tokens only)
  void pair(int64_t block, int64_t pair, int64_t k, __m512i& low, __m512i& high) const {
    const uint8_t* at = values + ((block - first) * (k / (2 * kDotStep)) + pair) * 2 * kDotBytes;
    low = _mm512_loadu_si512(at);
    high = _mm512_loadu_si512(at + kDotBytes);
  }
};

}  // namespace flint
