// The weights a native product reads (linear.cc): y [tokens, n] = x [tokens, k] times a
// weight [n, k], int8 with a float32 scale per group of `group` inputs of each row
// (engine/device/weights.py Int8Weight), or bfloat16; and a chunk of either's rows widened
// once into a buffer, for products of many tokens. Each gives a row's blocks (blocks.h):
// an int8 weight times its group's scale, as every path widens it.

#pragma once

#include <cstdint>
#include <vector>

#include "blocks.h"

namespace flint {

constexpr int kRowTile = 4;            // rows a tile of several tokens takes (n is a multiple)
constexpr int64_t kRowsPerChunk = 64;  // output rows a thread takes at a time

struct Int8Rows {
  const int8_t* values;  // [n, k]
  const float* scales;   // [n, k / group]
  int64_t k, group;

  float scale(int64_t row, int64_t g) const { return scales[row * (k / group) + g]; }
  WeightBlock block(int64_t row, int64_t i) const { return block_of(values + row * k + i, scale(row, i / group)); }
};

struct Bf16Rows {
  const uint16_t* values;  // [n, k]
  int64_t k;

  WeightBlock block(int64_t row, int64_t i) const { return block_of(values + row * k + i); }
};

// `rows` rows of a weight from `first`, widened into a buffer [rows, k] and read from
// there: the same blocks.
struct BufferedRows {
  const BufferElement* buffer;  // [rows, k]
  int64_t first, k;

  WeightBlock block(int64_t row, int64_t i) const { return block_of_buffer(buffer + (row - first) * k + i); }
};

template <typename Rows>
BufferedRows buffered(const Rows& w, int64_t first, int64_t rows, std::vector<BufferElement>& buffer) {
  buffer.resize(rows * w.k);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < w.k; i += kBlock) store_block(buffer.data() + r * w.k + i, w.block(first + r, i));
  return BufferedRows{buffer.data(), first, w.k};
}

}  // namespace flint
