// Flint's native int8 (and bfloat16) product, called from jitted JAX programs through XLA's
// FFI (engine/device/native/ops.py linear).
//
// XLA's CPU backend widens int8 weights to float32 in memory before a product reads them
// (about half of a one-token step on jax 0.11). This product widens them in registers and
// reads a layer of the stacked weights in place, at the scan's traced index; the same code
// serves a bfloat16 head. The jnp code it replaces stays the reference:
// tests/engine/test_native_cpu.py compares the two.
//
// Every output is summed in one order (blocks.h), by every tile: one token's, a few
// tokens', or a many-token call's, which widens a chunk's rows once and meets them with
// tiles of tokens. So a row's product is the same bits however many tokens share the call,
// and which: the tiles differ only in how many outputs they carry side by side.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "blocks.h"
#include "simd.h"
#include "shapes.h"
#include "weight_rows.h"

using namespace flint;

namespace {

// The tiles: blocks x tokens of vectors of sums kept in registers, each beside its group's
// partial sum. Up to kFewTokens tokens a tile takes one block, widened in registers as read
// (one stream of weights, which the hardware prefetcher follows); past that a chunk's
// blocks are widened once and met by tiles of kManyBlocks blocks x kManyTokens tokens.
constexpr int kFewTokens = 4;
constexpr int kManyTokens = 4;
constexpr int kManyBlocks = kLanes == 16 ? 2 : 1;  // AVX2's 16 registers hold one block's 4 x 2

// The inputs as the tiles read them: x [tokens, k] and, for weights with offsets, each
// token's sum of each group of inputs [tokens, k / group] (`input_sums`).
struct Inputs {
  const InputElement* x;
  const float* group_sums;
};

// C blocks of rows from `block` times T tokens from `token` of the inputs x [tokens, k], into
// y [tokens, n]: each output by blocks.h's steps, a group's unscaled sum at a time, scaled
// into the row's sum, then the group's offset times the group's inputs' sum where it has one.
template <int C, int T, typename Rows>
void tile(const Rows& w, const Inputs& in, int64_t n, int64_t block, int64_t token, float* y) {
  const InputElement* x = in.x;
  const int64_t groups = w.k / w.group;
  fvec sums[C][T] = {};
  const int64_t steps = w.group / kStep;
  for (int64_t g = 0; g < groups; ++g) {
    fvec group[C][T] = {};
    for (int64_t step = g * steps; step < (g + 1) * steps; ++step)
      for (int c = 0; c < C; ++c) {
        const WeightBlock weights = w.block(block + c, step);
        for (int t = 0; t < T; ++t) group[c][t] = fold(group[c][t], weights, x + (token + t) * w.k + step * kStep);
      }
    for (int c = 0; c < C; ++c) {
      const fvec scale = w.scale(block + c, g);
      for (int t = 0; t < T; ++t)
        sums[c][t] = Rows::kScaled ? fused_multiply_add(group[c][t], scale, sums[c][t]) : group[c][t];
      if constexpr (Rows::kHasMins) {
        const fvec min = w.min(block + c, g);
        for (int t = 0; t < T; ++t)
          sums[c][t] = fused_multiply_add(min, splat(in.group_sums[(token + t) * groups + g]), sums[c][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) std::memcpy(y + (token + t) * n + (block + c) * kLanes, &sums[c][t], sizeof(fvec));
}

// The blocks [first, end) times T tokens from `token`, C blocks at a time, then one.
template <int C, int T, typename Rows>
void tiles_of_blocks(const Rows& w, const Inputs& x, int64_t n, int64_t first, int64_t end, int64_t token,
                     float* y) {
  int64_t block = first;
  for (; block + C <= end; block += C) tile<C, T>(w, x, n, block, token, y);
  for (; block < end; ++block) tile<1, T>(w, x, n, block, token, y);
}

// The blocks [first, end) times every token, T at a time, the last tile with the rest.
template <int C, int T, typename Rows>
void tiles_of_tokens(const Rows& w, const Inputs& x, int64_t tokens, int64_t n, int64_t first, int64_t end,
                     float* y) {
  int64_t token = 0;
  for (; token + T <= tokens; token += T) tiles_of_blocks<C, T>(w, x, n, first, end, token, y);
  switch (tokens - token) {
    case 3: tiles_of_blocks<C, 3>(w, x, n, first, end, token, y); break;
    case 2: tiles_of_blocks<C, 2>(w, x, n, first, end, token, y); break;
    case 1: tiles_of_blocks<C, 1>(w, x, n, first, end, token, y); break;
    default: break;
  }
}

// x [tokens, k] (bfloat16) times the weights into y [tokens, n] (float32). A thread takes a
// chunk of blocks at a time; past a few tokens the chunk's blocks are widened once first.
// Each token's sum of each group of its inputs [tokens, k / group], in float32, in order:
// what a group's offset multiplies. A token's sums depend on its inputs alone.
std::vector<float> input_sums(const uint16_t* x, int64_t tokens, int64_t k, int64_t group) {
  std::vector<float> sums(tokens * (k / group));
  for (int64_t token = 0; token < tokens; ++token)
    for (int64_t g = 0; g < k / group; ++g) {
      float total = 0.0f;
      for (int64_t i = token * k + g * group; i < token * k + (g + 1) * group; ++i) total += bfloat16_value(x[i]);
      sums[token * (k / group) + g] = total;
    }
  return sums;
}

template <typename Rows>
void matmul(ffi::ThreadPool& pool, const Rows& w, const uint16_t* x, int64_t tokens, int64_t n, float* y) {
  std::vector<InputElement> elements(tokens * w.k);
  for (int64_t i = 0; i < tokens * w.k; ++i) elements[i] = input_of(x[i]);
  std::vector<float> group_sums;
  if constexpr (Rows::kHasMins) group_sums = input_sums(x, tokens, w.k, w.group);
  const Inputs inputs{elements.data(), group_sums.data()};
  const int64_t blocks = n / kLanes, chunks = (blocks + kBlocksPerChunk - 1) / kBlocksPerChunk;
  parallel_for(pool, chunks, [&](int64_t chunk) {
    const int64_t first = chunk * kBlocksPerChunk, end = std::min(blocks, first + kBlocksPerChunk);
    if (tokens <= kFewTokens) {
      tiles_of_tokens<1, kFewTokens>(w, inputs, tokens, n, first, end, y);
      return;
    }
    std::vector<BufferElement> buffer;
    const auto rows = buffered(w, first, end - first, buffer);
    tiles_of_tokens<kManyBlocks, kManyTokens>(rows, inputs, tokens, n, first, end, y);
  });
}

// x times integer weights with group scales (and `mins`, where kMins: the same shape as the
// scales), of a stack's layer at `layer`: the products of every Int8Weight form, its scales
// float32 or fp16 (shapes.h `by_scale_type`).
template <typename Values, bool kMins>
ffi::Error grouped_product(ffi::ThreadPool& pool, const ffi::Buffer<ffi::BF16>& x, const ffi::AnyBuffer& values,
                           const ScaleBuffers& scales, const ffi::Buffer<ffi::S32>& layer, float* y) {
  if (values.element_type() != Values::kType) return ffi::Error::InvalidArgument("flint_linear: values of another type");
  const int64_t rows = x.dimensions()[0], tokens = live_rows(layer, rows), k = x.dimensions()[1];
  const auto dims = values.dimensions();
  const auto [n, k_weight] = unpacked_shape(dims, Values::kBlockBytes, kStep);
  Groups found;
  if (auto error = groups_of(scales.scales, scales.mins, k_weight, found); error.failure()) return error;
  const int64_t groups = found.count, group = found.size;
  if (auto error = check_shapes(k, n, k_weight, group, kStep); error.failure()) return error;
  const int64_t index = layer_index(dims, layer);
  const auto* base = static_cast<const typename Values::Element*>(values.untyped_data()) +
                     index * (n / kLanes) * (k / kStep) * Values::kBlockBytes;
  return with_scales(scales, index, n, groups, [&](auto kept, auto offsets) {
    GroupedRows<Values, kMins, decltype(kept)> w{Values{base}, kept, offsets, k, group};
    zero_padding(y, tokens, rows, n);
    matmul(pool, w, input_bits(x), tokens, n, y);
    return ffi::Error::Success();
  });
}

// The grouped products' handlers: int8 values, 4-bit less 8 (GGUF's Q4_0) or 6-bit less 32
// (Q6_K), without offsets; int8, 4-bit or 6-bit from 0 (Q4_1, Q4_K, Q5_K, and a stack of
// Q4_K and Q6_K layers: integer_weight.py `alike`) with them; and a K-quant's, its scales (and
// offsets) int8 under their factors.
template <typename Values>
ffi::Error Grouped(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::AnyBuffer values, ffi::AnyBuffer scales,
                   ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  return grouped_product<Values, false>(pool, x, values, {scales, nullptr, nullptr, nullptr}, layer, y->typed_data());
}

template <typename Values>
ffi::Error GroupedMins(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::AnyBuffer values, ffi::AnyBuffer scales,
                       ffi::AnyBuffer mins, ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  return grouped_product<Values, true>(pool, x, values, {scales, &mins, nullptr, nullptr}, layer, y->typed_data());
}

template <typename Values>
ffi::Error GroupedFactored(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::AnyBuffer values,
                           ffi::AnyBuffer scales, ffi::AnyBuffer factors, ffi::Buffer<ffi::S32> layer,
                           ffi::ResultBuffer<ffi::F32> y) {
  return grouped_product<Values, false>(pool, x, values, {scales, nullptr, &factors, nullptr}, layer, y->typed_data());
}

template <typename Values>
ffi::Error GroupedFactoredMins(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::AnyBuffer values,
                               ffi::AnyBuffer scales, ffi::AnyBuffer factors, ffi::AnyBuffer mins,
                               ffi::AnyBuffer min_factors, ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  return grouped_product<Values, true>(pool, x, values, {scales, &mins, &factors, &min_factors}, layer,
                                       y->typed_data());
}

ffi::Error LinearBf16(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::Buffer<ffi::BF16> values,
                      ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  auto dims = values.dimensions();
  const int64_t rows = x.dimensions()[0], tokens = live_rows(layer, rows), k = x.dimensions()[1];
  const auto [n, k_weight] = unpacked_shape(dims, kBlockElements, kStep);
  if (auto error = check_shapes(k, n, k_weight, k_weight, kStep); error.failure()) return error;
  const int64_t index = layer_index(dims, layer);
  Bf16Rows w{reinterpret_cast<const uint16_t*>(values.typed_data()) + index * n * k, k, k};
  zero_padding(y->typed_data(), tokens, rows, n);
  matmul(pool, w, input_bits(x), tokens, n, y->typed_data());
  return ffi::Error::Success();
}

}  // namespace

// Whether the products run in pairs of bfloat16 here (blocks.h; module.cc `products_in_pairs`).
extern "C" int FlintProductsInPairs() {
#ifdef FLINT_PRODUCTS_IN_PAIRS
  return 1;
#else
  return 0;
#endif
}

// The packed blocks' shape (ops.py `packed`): rows a block, inputs a step.
extern "C" int FlintBlockRows() { return kLanes; }
extern "C" int FlintBlockStep() { return kStep; }

FLINT_GROUPED_HANDLER(FlintLinearInt8, Grouped<Int8Values>)
FLINT_GROUPED_HANDLER(FlintLinearInt8Mins, GroupedMins<Int8Values>, .Arg<ffi::AnyBuffer>())
FLINT_GROUPED_HANDLER(FlintLinearS4, Grouped<NibbleValues<8>>)
FLINT_GROUPED_HANDLER(FlintLinearU4Mins, GroupedMins<NibbleValues<0>>, .Arg<ffi::AnyBuffer>())
FLINT_GROUPED_HANDLER(FlintLinearS6, Grouped<SixBitValues<32>>)
FLINT_GROUPED_HANDLER(FlintLinearU6Mins, GroupedMins<SixBitValues<0>>, .Arg<ffi::AnyBuffer>())
FLINT_GROUPED_HANDLER(FlintLinearU4MinsFactored, GroupedFactoredMins<NibbleValues<0>>, FLINT_FACTORED_MINS)
FLINT_GROUPED_HANDLER(FlintLinearS6Factored, GroupedFactored<SixBitValues<32>>, .Arg<ffi::AnyBuffer>())
FLINT_GROUPED_HANDLER(FlintLinearU6MinsFactored, GroupedFactoredMins<SixBitValues<0>>, FLINT_FACTORED_MINS)

XLA_FFI_DEFINE_HANDLER_SYMBOL(FlintLinearBf16, LinearBf16,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
