// Products of a GGUF file's own blocks over integer inputs: each token's inputs are
// quantized per group of the weight's, as ggml does, but in two int8 digits: x = d (q + r /
// 254), q = round(x / d) with d = max |x| / 127, and r the rest in 254ths of d. A group's
// product is two exact integer dot products by AVX512-VNNI's `vpdpbusd` (four u8 x s8
// products a lane an instruction, 64 a vector), joined and scaled into the row's float32
// sum with the weight's and the inputs' scales, then the group's offset times its inputs'
// sum. (engine/device/native/ops.py `linear`; the weights' layout: ops.py `packed`.)
//
// Why two digits: one (ggml's) moved SmolLM2's distributions 4 times as far from float32
// as bfloat16 inputs do (KL 4.2e-3 against 1.0e-3), further than the int8 weights it
// replaces; the second digit brings the inputs' rounding under bfloat16's (BENCHMARKS.md).
//
// Four times the products an instruction of the bfloat16 pairs (linear.cc), and no
// widening of 4-bit values but a mask and a shift. Every output is still summed in one
// order, group by group, whatever the count of tokens: a token's quantized inputs depend
// on its own inputs alone, so a row's product is the same bits among any others.
//
// The weights are unsigned in the products (dot_values.h): 4- and 6-bit values as they are
// (Q4_0's q - 8 kept as q, the 8 taken off as 8 x the inputs' sum; Q6_K's q - 32 likewise),
// int8 values with their sign bit flipped (q + 128, the 128 taken off likewise): all exact,
// in integers. Built where the CPU has
// AVX512-VNNI and AVX512BW; elsewhere `FlintIntegerDots` says 0 and no weight is packed so.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "blocks.h"
#include "shapes.h"
#include "simd.h"
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
#include "dot_values.h"
#include "two_digits.h"
#endif

using namespace flint;

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
#define FLINT_INTEGER_DOTS 1

namespace {

constexpr int kDotTokens = 4;   // tokens a tile carries
constexpr int kDotBlocks = 2;   // blocks of rows a tile carries
// Rows a thread claims at a time: one token's call streams its weights, and a long run of
// blocks keeps each stream (values, scales, offsets, factors) long enough for the
// prefetcher; with 64 the scales' short runs missed at every claim (the 1B's ffn_down at
// one token: 0.62 -> 0.42 ms). Many tokens reuse each chunk's weights from a buffer.
constexpr int64_t kStreamedRows = 512, kBufferedRows = 64;

template <typename Values, int kBias, bool kMins, typename Scales>
struct DotRows {
  static constexpr int kOneTokenBlocks = Values::kOneTokenBlocks;
  Values values;
  Scales scales;  // shapes.h: PlainScales (float32 or fp16) or FactoredScales
  Scales mins;    // where kMins
  int64_t k, group;
};

inline fvec as_float(__m512i integers) { return (fvec)_mm512_cvtepi32_ps(integers); }

// Four inputs of a token, in every lane.
inline __m512i four_inputs(const int8_t* p) {
  int32_t four;
  std::memcpy(&four, p, sizeof four);
  return _mm512_set1_epi32(four);
}

// C blocks of rows from `block` times T tokens from `token`, into y [tokens, n]: a group's
// integer dot, then its scales and offset, group after group. kPairs: a group's pairs of
// steps (2 or 4: groups of 16 or 32 inputs), known when built so the loop over them unrolls
// (counted at run time, its registers spilled the sums: one token's Q4_K gate|up 12% and
// 128 tokens' 6-bit ffn_down 13% slower on one core).
template <int C, int T, int kPairs, typename Rows, int kBias, bool kMins>
void dot_tile(const Rows& w, const QuantizedInputs& in, int64_t n, int64_t block, int64_t token, float* y) {
  fvec sums[C][T] = {};
  const int64_t k = w.k;
  for (int64_t g = 0; g < in.groups; ++g) {
    __m512i highs[C][T], lows[C][T];
    for (int c = 0; c < C; ++c)
      for (int t = 0; t < T; ++t) highs[c][t] = lows[c][t] = _mm512_setzero_si512();
    for (int64_t p = 0; p < kPairs; ++p) {
      const int64_t pair = g * kPairs + p;
      __m512i first[C], second[C];
      for (int c = 0; c < C; ++c) w.values.pair(block + c, pair, k, first[c], second[c]);
      for (int t = 0; t < T; ++t) {  // a token's four broadcasts, then every block's products
        const int64_t at = (token + t) * k + pair * 2 * kDotStep;
        const __m512i high0 = four_inputs(in.high.data() + at), high1 = four_inputs(in.high.data() + at + kDotStep);
        const __m512i low0 = four_inputs(in.low.data() + at), low1 = four_inputs(in.low.data() + at + kDotStep);
        for (int c = 0; c < C; ++c) {
          highs[c][t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(highs[c][t], first[c], high0), second[c], high1);
          lows[c][t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(lows[c][t], first[c], low0), second[c], low1);
        }
      }
    }
    for (int c = 0; c < C; ++c) {
      const fvec scale = w.scales.get(block + c, g);
      for (int t = 0; t < T; ++t) {
        const int64_t at = (token + t) * in.groups + g;
        const fvec high = as_float(_mm512_sub_epi32(highs[c][t], _mm512_set1_epi32(kBias * in.high_sums[at])));
        const fvec low = as_float(_mm512_sub_epi32(lows[c][t], _mm512_set1_epi32(kBias * in.low_sums[at])));
        const fvec dot = fused_multiply_add(low, splat(1.0f / kRest), high);
        sums[c][t] = fused_multiply_add(dot, scale * splat(in.scales[at]), sums[c][t]);
        if constexpr (kMins) {
          const fvec min = w.mins.get(block + c, g);
          sums[c][t] = fused_multiply_add(min, splat(in.totals[at]), sums[c][t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) std::memcpy(y + (token + t) * n + (block + c) * kLanes, &sums[c][t], sizeof(fvec));
}

template <int C, int T, int kPairs, typename Rows, int kBias, bool kMins>
void dot_blocks(const Rows& w, const QuantizedInputs& in, int64_t n, int64_t first, int64_t end, int64_t token,
                float* y) {
  int64_t block = first;
  for (; block + C <= end; block += C) dot_tile<C, T, kPairs, Rows, kBias, kMins>(w, in, n, block, token, y);
  for (; block < end; ++block) dot_tile<1, T, kPairs, Rows, kBias, kMins>(w, in, n, block, token, y);
}

// Every token, kDotTokens at a time, the last tile with the rest; kDotBlocks blocks a
// tile, and for a single token the values' kOneTokenBlocks (dot_values.h): two or four
// streams of weights (one was a third slower at the 1B's ffn_down: each group's short
// chain of products left the core waiting).
template <int kPairs, typename Rows, int kBias, bool kMins>
void dot_tokens(const Rows& w, const QuantizedInputs& in, int64_t tokens, int64_t n, int64_t first, int64_t end,
                float* y) {
  if (tokens == 1) return dot_blocks<Rows::kOneTokenBlocks, 1, kPairs, Rows, kBias, kMins>(w, in, n, first, end, 0, y);
  int64_t token = 0;
  for (; token + kDotTokens <= tokens; token += kDotTokens)
    dot_blocks<kDotBlocks, kDotTokens, kPairs, Rows, kBias, kMins>(w, in, n, first, end, token, y);
  switch (tokens - token) {
    case 3: dot_blocks<kDotBlocks, 3, kPairs, Rows, kBias, kMins>(w, in, n, first, end, token, y); break;
    case 2: dot_blocks<kDotBlocks, 2, kPairs, Rows, kBias, kMins>(w, in, n, first, end, token, y); break;
    case 1: dot_blocks<kDotBlocks, 1, kPairs, Rows, kBias, kMins>(w, in, n, first, end, token, y); break;
    default: break;
  }
}

// The tokens' products over groups of 16 inputs (Q6_K's: 2 pairs of steps) or 32 (every
// other GGUF block's: 4), the only groups `dot_product` takes.
template <typename Rows, int kBias, bool kMins>
void dot_groups(const Rows& w, const QuantizedInputs& in, int64_t tokens, int64_t n, int64_t first, int64_t end,
                float* y) {
  if (w.group == 16) return dot_tokens<2, Rows, kBias, kMins>(w, in, tokens, n, first, end, y);
  dot_tokens<4, Rows, kBias, kMins>(w, in, tokens, n, first, end, y);
}

// Blocks [first, end) of `w` read once into `buffer` as the products take them (the same
// bytes, so the same sums): for a call of more tokens than a tile carries.
template <typename Values, int kBias, bool kMins, typename Scales>
DotRows<DotUnpacked, kBias, kMins, Scales> unpacked(const DotRows<Values, kBias, kMins, Scales>& w, int64_t first,
                                                     int64_t end, std::vector<uint8_t>& buffer) {
  const int64_t pairs = w.k / (2 * kDotStep);
  buffer.resize((end - first) * pairs * 2 * kDotBytes);
  for (int64_t block = first; block < end; ++block)
    for (int64_t pair = 0; pair < pairs; ++pair) {
      __m512i low, high;
      w.values.pair(block, pair, w.k, low, high);
      uint8_t* at = buffer.data() + ((block - first) * pairs + pair) * 2 * kDotBytes;
      _mm512_storeu_si512(at, low);
      _mm512_storeu_si512(at + kDotBytes, high);
    }
  return {DotUnpacked{buffer.data(), first}, w.scales, w.mins, w.k, w.group};
}

template <typename Values, int kBias, bool kMins>
ffi::Error dot_product(ffi::ThreadPool& pool, const ffi::Buffer<ffi::BF16>& x, const ffi::AnyBuffer& values,
                       const ScaleBuffers& scales, const ffi::Buffer<ffi::S32>& layer, float* y) {
  if (values.element_type() != Values::kType) return ffi::Error::InvalidArgument("flint_dot: values of another type");
  const int64_t rows = x.dimensions()[0], tokens = live_rows(layer, rows), k = x.dimensions()[1];
  const auto dims = values.dimensions();
  const auto [n, k_weight] = unpacked_shape(dims, Values::kBlockBytes, kDotStep);
  Groups found;
  if (auto error = groups_of(scales.scales, scales.mins, k_weight, found); error.failure()) return error;
  const int64_t groups = found.count, group = found.size;
  if (auto error = check_shapes(k, n, k_weight, group, 2 * kDotStep); error.failure()) return error;
  if (group != 16 && group != 32) return ffi::Error::InvalidArgument("flint_dot: groups of 16 or 32 inputs only");
  const int64_t index = layer_index(dims, layer);
  const int64_t layer_bytes = (n / kLanes) * (k / kDotStep) * Values::kBlockBytes;
  const auto* base = static_cast<const uint8_t*>(values.untyped_data()) + index * layer_bytes;
  zero_padding(y, tokens, rows, n);
  const QuantizedInputs in = quantized(pool, input_bits(x), tokens, k, group);
  return with_scales(scales, index, n, groups, [&](auto kept, auto offsets) {
    using Rows = DotRows<Values, kBias, kMins, decltype(kept)>;
    const Rows w{Values{reinterpret_cast<decltype(Values::values)>(base)}, kept, offsets, k, group};
    const int64_t blocks = n / kLanes, per_chunk = (tokens == 1 ? kStreamedRows : kBufferedRows) / kLanes;
    const int64_t chunks = (blocks + per_chunk - 1) / per_chunk;
    parallel_for(pool, chunks, [&](int64_t chunk) {
      const int64_t first = chunk * per_chunk, end = std::min(blocks, first + per_chunk);
      if (tokens <= kDotTokens || !Values::kUnpackOnce)
        return dot_groups<Rows, kBias, kMins>(w, in, tokens, n, first, end, y);
      std::vector<uint8_t> buffer;
      const auto chunk_rows = unpacked(w, first, end, buffer);
      dot_groups<decltype(chunk_rows), kBias, kMins>(chunk_rows, in, tokens, n, first, end, y);
    });
    return ffi::Error::Success();
  });
}

}  // namespace

#else

namespace {

struct DotBytes {};
struct DotNibbles {};
struct DotSixBits {};

template <typename Values, int kBias, bool kMins>
ffi::Error dot_product(ffi::ThreadPool&, const ffi::Buffer<ffi::BF16>&, const ffi::AnyBuffer&, const ScaleBuffers&,
                       const ffi::Buffer<ffi::S32>&, float*) {
  return ffi::Error::InvalidArgument("flint_dot: this build has no integer dot products");
}

}  // namespace

#endif

namespace {

// The handlers: int8 values (their sign bits flipped as read: a bias of 128), 4-bit less 8
// (GGUF's Q4_0) or 6-bit less 32 (Q6_K), without offsets; int8, 4-bit or 6-bit from 0
// (Q4_1, Q4_K, Q5_K, mixed stacks) with them; and a K-quant's, its scales (and offsets)
// int8 under their factors.
template <typename Values, int kBias>
ffi::Error Dot(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::AnyBuffer values, ffi::AnyBuffer scales,
               ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  return dot_product<Values, kBias, false>(pool, x, values, {scales, nullptr, nullptr, nullptr}, layer,
                                           y->typed_data());
}

template <typename Values, int kBias>
ffi::Error DotMins(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::AnyBuffer values, ffi::AnyBuffer scales,
                   ffi::AnyBuffer mins, ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  return dot_product<Values, kBias, true>(pool, x, values, {scales, &mins, nullptr, nullptr}, layer, y->typed_data());
}

template <typename Values, int kBias>
ffi::Error DotFactored(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::AnyBuffer values, ffi::AnyBuffer scales,
                       ffi::AnyBuffer factors, ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  return dot_product<Values, kBias, false>(pool, x, values, {scales, nullptr, &factors, nullptr}, layer,
                                           y->typed_data());
}

template <typename Values, int kBias>
ffi::Error DotFactoredMins(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::AnyBuffer values,
                           ffi::AnyBuffer scales, ffi::AnyBuffer factors, ffi::AnyBuffer mins,
                           ffi::AnyBuffer min_factors, ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  return dot_product<Values, kBias, true>(pool, x, values, {scales, &mins, &factors, &min_factors}, layer,
                                          y->typed_data());
}

}  // namespace

// Whether this build has the integer dot products (module.cc `integer_dots`).
extern "C" int FlintIntegerDots() {
#ifdef FLINT_INTEGER_DOTS
  return 1;
#else
  return 0;
#endif
}

namespace {
constexpr auto* DotInt8 = &Dot<DotBytes, 128>;
constexpr auto* DotInt8Mins = &DotMins<DotBytes, 128>;
constexpr auto* DotS4 = &Dot<DotNibbles, 8>;
constexpr auto* DotU4Mins = &DotMins<DotNibbles, 0>;
constexpr auto* DotS6 = &Dot<DotSixBits, 32>;
constexpr auto* DotU6Mins = &DotMins<DotSixBits, 0>;
constexpr auto* DotU4MinsFactored = &DotFactoredMins<DotNibbles, 0>;
constexpr auto* DotS6Factored = &DotFactored<DotSixBits, 32>;
constexpr auto* DotU6MinsFactored = &DotFactoredMins<DotSixBits, 0>;
}  // namespace

FLINT_GROUPED_HANDLER(FlintDotInt8, DotInt8)
FLINT_GROUPED_HANDLER(FlintDotInt8Mins, DotInt8Mins, .Arg<ffi::AnyBuffer>())
FLINT_GROUPED_HANDLER(FlintDotS4, DotS4)
FLINT_GROUPED_HANDLER(FlintDotU4Mins, DotU4Mins, .Arg<ffi::AnyBuffer>())
FLINT_GROUPED_HANDLER(FlintDotS6, DotS6)
FLINT_GROUPED_HANDLER(FlintDotU6Mins, DotU6Mins, .Arg<ffi::AnyBuffer>())
FLINT_GROUPED_HANDLER(FlintDotU4MinsFactored, DotU4MinsFactored, FLINT_FACTORED_MINS)
FLINT_GROUPED_HANDLER(FlintDotS6Factored, DotS6Factored, .Arg<ffi::AnyBuffer>())
FLINT_GROUPED_HANDLER(FlintDotU6MinsFactored, DotU6MinsFactored, FLINT_FACTORED_MINS)
