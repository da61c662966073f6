// The native product for more tokens than SIMD lanes (linear.cc's `matmul` calls it): in
// float32 here, in pairs of bfloat16 where the CPU has AVX512_BF16 (lanes_bf16.h).

#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "lanes_bf16.h"
#include "simd.h"
#include "weight_rows.h"

namespace flint {

// linear.cc's tiles hold sums along the inputs and load a vector of weights and one of inputs
// for every few multiply-adds, which at many tokens reads faster than a cache serves. Here
// a vector holds kLanes tokens' input i (x transposed once per call), each weight is
// broadcast, and a tile of kLaneRows rows x kTokenVectors vectors of tokens keeps its sums in
// registers: each step loads kTokenVectors vectors and broadcasts kLaneRows weights for
// kLaneRows x kTokenVectors multiply-adds, with no horizontal sums. (Six rows by four
// vectors, half the broadcasts per multiply-add, measured no faster at 64 to 512 tokens.)
constexpr int kTokenVectors = 2;
constexpr int64_t kBlockTokens = kTokenVectors * kLanes;  // tokens of one tile
constexpr int kLaneRows = kLanes == 16 ? 8 : 4;           // 16 sums of AVX-512's 32 registers, 8 of AVX2's 16

// x [tokens, k] (bfloat16) as blocks of kBlockTokens tokens, each [k, kBlockTokens] in
// float32, zeros past the last token.
inline void transpose_tokens(ffi::ThreadPool& pool, const uint16_t* x, int64_t tokens, int64_t k,
                             std::vector<float>& blocks) {
  const int64_t count = (tokens + kBlockTokens - 1) / kBlockTokens;
  blocks.assign(count * k * kBlockTokens, 0.0f);
  parallel_for(pool, count, [&](int64_t block) {
    float* out = blocks.data() + block * k * kBlockTokens;
    for (int64_t t = block * kBlockTokens; t < std::min(tokens, (block + 1) * kBlockTokens); ++t)
      for (int64_t i = 0; i < k; ++i) {
        const uint32_t bits = uint32_t(x[t * k + i]) << 16;
        std::memcpy(out + i * kBlockTokens + t % kBlockTokens, &bits, 4);
      }
  });
}

// R widened rows times one block of tokens, into `sums` [R, kBlockTokens].
template <int R>
void rows_by_token_block(const float* widened, int64_t k, const float* block, float* sums) {
  fvec acc[R][kTokenVectors] = {};
  for (int64_t i = 0; i < k; ++i) {
    fvec xs[kTokenVectors];
    for (int v = 0; v < kTokenVectors; ++v) xs[v] = load(block + i * kBlockTokens + v * kLanes);
    for (int r = 0; r < R; ++r) {
      const fvec weight = splat(widened[r * k + i]);
      for (int v = 0; v < kTokenVectors; ++v) acc[r][v] += weight * xs[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kTokenVectors; ++v) std::memcpy(sums + r * kBlockTokens + v * kLanes, &acc[r][v], sizeof(fvec));
}

// x [tokens, k] in bfloat16 times the weights: in pairs of bfloat16 where the CPU has them
// (lanes_bf16.h), in float32 otherwise.
template <typename Rows>
void matmul_tokens_in_lanes(ffi::ThreadPool& pool, const Rows& w, const uint16_t* x, int64_t tokens, int64_t n,
                            float* y) {
#ifdef FLINT_LANES_IN_BFLOAT16
  matmul_pairs(pool, w, x, tokens, n, y);
#else
  std::vector<float> blocks;
  transpose_tokens(pool, x, tokens, w.k, blocks);
  const int64_t chunks = (n + kRowsPerChunk - 1) / kRowsPerChunk;
  // A chunk's rows are widened once, then each block of tokens meets every tile of them.
  parallel_for(pool, chunks, [&](int64_t chunk) {
    const int64_t first = chunk * kRowsPerChunk, rows = std::min(n, first + kRowsPerChunk) - first;
    std::vector<float> widened(rows * w.k), sums(rows * kBlockTokens);
    widen_rows(w, first, rows, widened.data());
    for (int64_t token = 0; token < tokens; token += kBlockTokens) {
      const float* block = blocks.data() + token / kBlockTokens * w.k * kBlockTokens;
      int64_t r = 0;
      for (; r + kLaneRows <= rows; r += kLaneRows)
        rows_by_token_block<kLaneRows>(widened.data() + r * w.k, w.k, block, sums.data() + r * kBlockTokens);
      for (; r < rows; r += kRowTile)  // whole register tiles of rows (check_shapes)
        rows_by_token_block<kRowTile>(widened.data() + r * w.k, w.k, block, sums.data() + r * kBlockTokens);
      scatter_sums(sums.data(), kBlockTokens, rows, std::min(kBlockTokens, tokens - token), n, first, token, y);
    }
  });
#endif
}

}  // namespace flint
