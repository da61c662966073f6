// The weights a native product reads (linear.cc): y [tokens, n] = x [tokens, k] times a
// weight [n, k] packed in blocks of kLanes rows (blocks.h; ops.py `packed`): int8 or 4-bit
// integers with a float32 or fp16 scale (and maybe an offset) per group of `group` inputs of each
// row (engine/device/integer_weight.py Int8Weight), or bfloat16; and a chunk of either's blocks widened once into a buffer, for
// products of many tokens. Each gives a block's steps of weights and its rows' scales.

#pragma once

#include <cstdint>
#include <vector>

#include "blocks.h"
#include "shapes.h"

namespace flint {

constexpr int64_t kBlocksPerChunk = 64 / kLanes;  // blocks of rows a thread takes at a time: 64 rows

// A block's steps of weights from its values: int8 as they are, 4-bit, two a byte
// (blocks.h `block_of_nibbles`), less kBias (8 for GGUF's Q4_0, whose values are q - 8).
struct Int8Values {
  using Element = int8_t;
  static constexpr ffi::DataType kType = ffi::DataType::S8;
  static constexpr int64_t kBlockBytes = kBlockElements;
  const int8_t* values;  // [n / kLanes, k / kStep, kBlockElements]
  WeightBlock block(int64_t index) const { return block_of(values + index * kBlockElements); }
};

template <int kBias>
struct NibbleValues {
  using Element = uint8_t;
  static constexpr ffi::DataType kType = ffi::DataType::U8;
  static constexpr int64_t kBlockBytes = kBlockElements / 2;
  const uint8_t* values;  // [n / kLanes, k / kStep, kBlockElements / 2]
  WeightBlock block(int64_t index) const { return block_of_nibbles<kBias>(values + index * (kBlockElements / 2)); }
};

// 6-bit values: a block's low halves two a byte, then their top two bits four a byte
// (blocks.h `block_of_six`), less kBias (32 for GGUF's Q6_K, whose values are q - 32).
template <int kBias>
struct SixBitValues {
  using Element = uint8_t;
  static constexpr ffi::DataType kType = ffi::DataType::U8;
  static constexpr int64_t kBlockBytes = kBlockElements * 3 / 4;
  const uint8_t* values;  // [n / kLanes, k / kStep, kBlockElements * 3 / 4]
  WeightBlock block(int64_t index) const { return block_of_six<kBias>(values + index * kBlockBytes); }
};

// Integer weights with a scale per group of `group` inputs of each row, and where kMins an
// offset too (float32, or the fp16 of GGUF's Q8_0, Q4_0 and Q4_1, widened as read): a weight is scale * q (+ min). Flint's own int8 (Int8Weight),
// and GGUF's blocks (engine/loader/gguf_blocks.py): Q8_0, Q4_0, Q6_K without offsets; Q4_1,
// Q4_K, Q5_K with them. A group's offset adds min x (the sum of the group's inputs) to each
// row: one multiply-add after the scaled sum, in the same place for every tile.
template <typename Values, bool kMins, typename Scales>
struct GroupedRows {
  Values values;
  Scales scales;  // shapes.h: PlainScales (float32 or fp16) or FactoredScales
  Scales mins;    // where kMins
  int64_t k, group;
  static constexpr bool kScaled = true;
  static constexpr bool kHasMins = kMins;

  WeightBlock block(int64_t rows, int64_t step) const { return values.block(rows * (k / kStep) + step); }
  fvec scale(int64_t rows, int64_t g) const { return scales.get(rows, g); }
  fvec min(int64_t rows, int64_t g) const { return mins.get(rows, g); }
};

struct Bf16Rows {
  const uint16_t* values;  // [n / kLanes, k / kStep, kBlockElements]
  int64_t k, group;        // group: k, one sum a row, never scaled
  static constexpr bool kScaled = false;
  static constexpr bool kHasMins = false;

  WeightBlock block(int64_t rows, int64_t step) const {
    return block_of(values + (rows * (k / kStep) + step) * kBlockElements);
  }
  fvec scale(int64_t, int64_t) const { return splat(1.0f); }
  fvec min(int64_t, int64_t) const { return fvec{}; }
};

// `count` blocks of a weight's rows from block `first`, widened into a buffer and read from
// there: the same weights, the same scales.
template <typename Rows>
struct BufferedRows {
  const BufferElement* buffer;  // [count, k / kStep, kBlockElements]
  const Rows& rows;
  int64_t first, k, group;
  static constexpr bool kScaled = Rows::kScaled;
  static constexpr bool kHasMins = Rows::kHasMins;

  WeightBlock block(int64_t block, int64_t step) const {
    return block_of_buffer(buffer + ((block - first) * (k / kStep) + step) * kBlockElements);
  }
  fvec scale(int64_t block, int64_t g) const { return rows.scale(block, g); }
  fvec min(int64_t block, int64_t g) const { return rows.min(block, g); }
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
