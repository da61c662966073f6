// The weights a native product reads (linear.cc): y [tokens, n] = x [tokens, k] times a
// weight [n, k] packed in blocks of kLanes rows (blocks.h; ops.py `packed`): int8 with a
// float32 scale per group of `group` inputs of each row (engine/device/weights.py
// Int8Weight), or bfloat16; and a chunk of either's blocks widened once into a buffer, for
// products of many tokens. Each gives a block's steps of weights and its rows' scales.

#pragma once

#include <cstdint>
#include <vector>

#include "blocks.h"

namespace flint {

constexpr int64_t kBlocksPerChunk = 64 / kLanes;  // blocks of rows a thread takes at a time: 64 rows

struct Int8Rows {
  const int8_t* values;  // [n / kLanes, k / kStep, kBlockElements]
  const float* scales;   // [n / kLanes, k / group, kLanes]
  int64_t k, group;
  static constexpr bool kScaled = true;

  WeightBlock block(int64_t rows, int64_t step) const {
    return block_of(values + (rows * (k / kStep) + step) * kBlockElements);
  }
  fvec scale(int64_t rows, int64_t g) const { return load(scales + (rows * (k / group) + g) * kLanes); }
};

struct Bf16Rows {
  const uint16_t* values;  // [n / kLanes, k / kStep, kBlockElements]
  int64_t k, group;        // group: k, one sum a row, never scaled
  static constexpr bool kScaled = false;

  WeightBlock block(int64_t rows, int64_t step) const {
    return block_of(values + (rows * (k / kStep) + step) * kBlockElements);
  }
  fvec scale(int64_t, int64_t) const { return splat(1.0f); }
};

// `count` blocks of a weight's rows from block `first`, widened into a buffer and read from
// there: the same weights, the same scales.
template <typename Rows>
struct BufferedRows {
  const BufferElement* buffer;  // [count, k / kStep, kBlockElements]
  const Rows& rows;
  int64_t first, k, group;
  static constexpr bool kScaled = Rows::kScaled;

  WeightBlock block(int64_t block, int64_t step) const {
    return block_of_buffer(buffer + ((block - first) * (k / kStep) + step) * kBlockElements);
  }
  fvec scale(int64_t block, int64_t g) const { return rows.scale(block, g); }
};

template <typename Rows>
BufferedRows<Rows> buffered(const Rows& w, int64_t first, int64_t count, std::vector<BufferElement>& buffer) {
  const int64_t steps = w.k / kStep;
  buffer.resize(count * steps * kBlockElements);
  for (int64_t b = 0; b < count; ++b)
    for (int64_t step = 0; step < steps; ++step)
      store_block(buffer.data() + (b * steps + step) * kBlockElements, w.block(first + b, step));
  return BufferedRows<Rows>{buffer.data(), w, first, w.k, w.group};
}

}  // namespace flint
