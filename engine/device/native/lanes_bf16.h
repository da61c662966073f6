// lanes.h's product in pairs of bfloat16, where the CPU has AVX512_BF16 (`vdpbf16ps`).
//
// lanes.h's float32 tile makes one multiply-add of 16 lanes an instruction; `vdpbf16ps`
// makes two in each lane, a pair of bfloat16 inputs times a pair of bfloat16 weights summed
// into a float32 lane: twice the products an instruction (a tile alone, one thread: 220-230
// against 114 GFLOP/s). So a vector holds 16 tokens' inputs i and i + 1, the weights' pair
// (i, i + 1) is broadcast as one 32-bit value, and the sums stay float32. Nothing is rounded
// here: the inputs come in bfloat16 (every path of the product takes them so, ops.py
// `linear`), an int8 weight is exact in bfloat16 (as is a bfloat16 one), and each group's
// scale multiplies the group's float32 sum.

#pragma once

#if defined(__AVX512BF16__)
#define FLINT_LANES_IN_BFLOAT16 1

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "simd.h"
#include "weight_rows.h"

namespace flint {

constexpr int kPairVectors = 2;                          // vectors of 16 tokens a tile
constexpr int64_t kPairTokens = kPairVectors * 16;       // tokens of a block
constexpr int kPairRowTile = 8;                          // rows a tile: 16 sums and 16 partial sums
constexpr int64_t kPairRowsPerChunk = 32;                // rows a thread takes at a time

// x [tokens, k] as blocks of kPairTokens tokens, each [k / 2, kPairTokens] of pairs of inputs
// (2 x bfloat16 in 32 bits). Zeros past the last token.
inline void pair_tokens(ffi::ThreadPool& pool, const uint16_t* x, int64_t tokens, int64_t k,
                        std::vector<uint32_t>& blocks) {
  const int64_t count = (tokens + kPairTokens - 1) / kPairTokens, pairs = k / 2;
  blocks.assign(count * pairs * kPairTokens, 0);
  parallel_for(pool, count, [&](int64_t block) {
    uint32_t* out = blocks.data() + block * pairs * kPairTokens;
    for (int64_t t = block * kPairTokens; t < std::min(tokens, (block + 1) * kPairTokens); ++t)
      for (int64_t pair = 0; pair < pairs; ++pair)
        std::memcpy(out + pair * kPairTokens + t % kPairTokens, x + t * k + pair * 2, 4);
  });
}

// `rows` rows from `row`, unscaled, as bfloat16 into `buffer` [rows, k]: exact, an int8 or a
// bfloat16 value being a bfloat16 one.
template <typename Rows>
void widen_rows_bf16(const Rows& w, int64_t row, int64_t rows, uint16_t* buffer) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < w.k; i += kLanes) {
      const __m256bh narrow = _mm512_cvtneps_pbh((__m512)w.at(row + r, i));
      std::memcpy(buffer + r * w.k + i, &narrow, sizeof narrow);
    }
}

// R rows from `row` (their bfloat16 values in `rows` [R, k]) times one block of paired
// tokens, into `sums` [R, kPairTokens]. Each group's products are summed apart and scaled
// once into the row's sums.
template <int R, typename Rows>
void rows_by_pair_block(const Rows& w, int64_t row, const uint16_t* rows, const uint32_t* block, float* sums) {
  constexpr int V = kPairVectors;
  __m512 acc[R][V], part[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t g = 0; g < w.k / w.group; ++g) {
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) part[r][v] = _mm512_setzero_ps();
    for (int64_t pair = g * w.group / 2; pair < (g + 1) * w.group / 2; ++pair) {
      __m512bh xs[V];
      for (int v = 0; v < V; ++v) xs[v] = (__m512bh)_mm512_loadu_si512(block + pair * kPairTokens + v * 16);
      for (int r = 0; r < R; ++r) {
        int32_t both;
        std::memcpy(&both, rows + r * w.k + pair * 2, 4);
        const __m512bh weights = (__m512bh)_mm512_set1_epi32(both);
        for (int v = 0; v < V; ++v) part[r][v] = _mm512_dpbf16_ps(part[r][v], weights, xs[v]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_set1_ps(w.scale(row + r, g));
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(part[r][v], scale, acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(sums + r * kPairTokens + v * 16, acc[r][v]);
}

// x [tokens, k] in bfloat16 times the weights, as lanes.h's matmul_tokens_in_lanes: a
// chunk's rows widened once, then each block of tokens meets every tile of them.
template <typename Rows>
void matmul_pairs(ffi::ThreadPool& pool, const Rows& w, const uint16_t* x, int64_t tokens, int64_t n, float* y) {
  std::vector<uint32_t> blocks;
  pair_tokens(pool, x, tokens, w.k, blocks);
  const int64_t chunks = (n + kPairRowsPerChunk - 1) / kPairRowsPerChunk;
  parallel_for(pool, chunks, [&](int64_t chunk) {
    const int64_t first = chunk * kPairRowsPerChunk, rows = std::min(n, first + kPairRowsPerChunk) - first;
    std::vector<uint16_t> widened(rows * w.k);
    std::vector<float> sums(rows * kPairTokens);
    widen_rows_bf16(w, first, rows, widened.data());
    for (int64_t token = 0; token < tokens; token += kPairTokens) {
      const uint32_t* block = blocks.data() + token / kPairTokens * (w.k / 2) * kPairTokens;
      int64_t r = 0;
      for (; r + kPairRowTile <= rows; r += kPairRowTile)
        rows_by_pair_block<kPairRowTile>(w, first + r, widened.data() + r * w.k, block, sums.data() + r * kPairTokens);
      for (; r < rows; r += kRowTile)  // whole register tiles of rows (linear.cc check_shapes)
        rows_by_pair_block<kRowTile>(w, first + r, widened.data() + r * w.k, block, sums.data() + r * kPairTokens);
      scatter_sums(sums.data(), kPairTokens, rows, std::min(kPairTokens, tokens - token), n, first, token, y);
    }
  });
}

}  // namespace flint

#endif  // __AVX512BF16__
