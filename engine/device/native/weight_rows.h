// The weights a native product reads (linear.cc, lanes.h): y [tokens, n] = x [tokens, k]
// times a weight [n, k], int8 with a float32 scale per group of `group` inputs of each row
// (engine/device/weights.py Int8Weight), or bfloat16.

#pragma once

#include <cstdint>
#include <cstring>

#include "simd.h"

namespace flint {

constexpr int kRowTile = 4;            // output rows per register tile
constexpr int64_t kRowsPerChunk = 64;  // output rows a thread takes at a time

struct Int8Rows {
  const int8_t* values;  // [n, k]
  const float* scales;   // [n, k / group]
  int64_t k, group;

  float scale(int64_t row, int64_t g) const { return scales[row * (k / group) + g]; }
  fvec at(int64_t row, int64_t i) const { return widen(values + row * k + i); }
  static constexpr int64_t kLineElements = 64;  // a cache line of int8
  void prefetch(int64_t row, int64_t i) const { __builtin_prefetch(values + row * k + i); }
};

struct Bf16Rows {
  const uint16_t* values;  // [n, k]
  int64_t k, group;        // group == k: one implicit scale of 1 per row

  float scale(int64_t, int64_t) const { return 1.0f; }
  fvec at(int64_t row, int64_t i) const { return widen(values + row * k + i); }
  static constexpr int64_t kLineElements = 32;  // a cache line of bfloat16
  void prefetch(int64_t row, int64_t i) const { __builtin_prefetch(values + row * k + i); }
};

// `rows` rows widened (and scaled) into `buffer` [rows, k].
template <typename Rows>
void widen_rows(const Rows& w, int64_t row, int64_t rows, float* buffer) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < w.k / w.group; ++g) {
      const fvec scale = splat(w.scale(row + r, g));
      for (int64_t i = g * w.group; i < (g + 1) * w.group; i += kLanes) {
        fvec weight = w.at(row + r, i) * scale;
        std::memcpy(buffer + r * w.k + i, &weight, sizeof weight);
      }
    }
}

// A block's sums [rows, block_tokens], rows from `row` and the first `tokens` tokens from
// `token`, into y [tokens, n]: a token's rows lie side by side in y, so each token's are
// written as one run. (Written from the registers a row at a time, token after token, the
// stores went n floats apart: at n = 3072, a multiple of 4 KiB, all into one set of the L1
// cache, which cost a third of a product's time.)
inline void scatter_sums(const float* sums, int64_t block_tokens, int64_t rows, int64_t tokens, int64_t n,
                         int64_t row, int64_t token, float* y) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) y[(token + t) * n + row + r] = sums[r * block_tokens + t];
}

}  // namespace flint
