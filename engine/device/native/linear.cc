// Flint's native int8 (and bfloat16) product, called from jitted JAX programs through XLA's
// FFI (engine/device/native/ops.py linear).
//
// XLA's CPU backend widens int8 weights to float32 in memory before a product reads them
// (about half of a one-token step on jax 0.11). This product widens them in registers and
// reads a layer of the stacked weights in place, at the scan's traced index; the same code
// serves a bfloat16 head. The jnp code it replaces stays the reference:
// tests/engine/test_native_cpu.py compares the two. The inputs come in bfloat16 at every count
// of tokens, so that a row's product does not depend on how many rows share the call (past
// 16, the pairs of bfloat16 in lanes_bf16.h take them so). Here: one token, and register
// tiles of a few; the weights' rows are weight_rows.h, more tokens than SIMD lanes lanes.h.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lanes.h"
#include "simd.h"
#include "weight_rows.h"

using namespace flint;

namespace {

// Tokens per register tile: 4 rows x 4 tokens hold 16 of AVX-512's 32 registers, 4 x 2 hold
// 8 of AVX2's 16.
constexpr int kTokenTile = kLanes == 16 ? 4 : 2;
constexpr int64_t kPrefetchRows = 2 * kRowTile;  // how far ahead the weights are prefetched

// Independent sums per row for one token: an FMA's latency is four of its issue slots.
constexpr int kChains = 4;

// One row's sum over groups of `w.group` inputs, longer than kChains vectors (a bfloat16 row
// is one group): the chains run inside each group, and the group's scale multiplies each product.
template <typename Rows>
fvec row_by_long_groups(const Rows& w, const float* xs, int64_t row) {
  fvec acc[kChains] = {};
  for (int64_t g = 0; g < w.k / w.group; ++g) {
    const fvec scale = splat(w.scale(row, g));
    int64_t i = g * w.group;
    const int64_t group_end = i + w.group;
    for (; i + kChains * kLanes <= group_end; i += kChains * kLanes)
      for (int c = 0; c < kChains; ++c) acc[c] += w.at(row, i + c * kLanes) * scale * load(xs + i + c * kLanes);
    for (; i < group_end; i += kLanes) acc[0] += w.at(row, i) * scale * load(xs + i);
  }
  for (int c = 1; c < kChains; ++c) acc[0] += acc[c];
  return acc[0];
}

// The same over groups of kVectors vectors, up to kChains (the layers' groups of 64 inputs,
// an int8 head in GGUF's blocks of 32): kChains groups at a time, each summed unscaled and
// then scaled into a chain of its own, so no chain waits on another and each input costs one
// multiply-add. The group's width is a constant here, so its loop unrolls. (Scaling each
// product instead, as above, read a one-token head of groups of 64 10% slower, of 32 30%.)
template <int kVectors, typename Rows>
fvec row_by_short_groups(const Rows& w, const float* xs, int64_t row) {
  constexpr int64_t kGroup = kVectors * kLanes;
  fvec acc[kChains] = {};
  const int64_t groups = w.k / kGroup;
  auto group_sum = [&](int64_t g) {
    fvec part = {};
    for (int v = 0; v < kVectors; ++v) part += w.at(row, g * kGroup + v * kLanes) * load(xs + g * kGroup + v * kLanes);
    return part * splat(w.scale(row, g));
  };
  int64_t g = 0;
  for (; g + kChains <= groups; g += kChains)
    for (int c = 0; c < kChains; ++c) acc[c] += group_sum(g + c);
  for (; g < groups; ++g) acc[0] += group_sum(g);
  for (int c = 1; c < kChains; ++c) acc[0] += acc[c];
  return acc[0];
}

template <typename Rows>
fvec row_sum(const Rows& w, const float* xs, int64_t row) {
  switch (w.group / kLanes) {  // a group is a whole number of vectors (check_shapes)
    case 1: return row_by_short_groups<1>(w, xs, row);
    case 2: return row_by_short_groups<2>(w, xs, row);
    case 3: return row_by_short_groups<3>(w, xs, row);
    case 4: return row_by_short_groups<4>(w, xs, row);
    default: return row_by_long_groups(w, xs, row);  // more than kChains vectors: a bfloat16 row
  }
}

// kRowTile rows from `row` times one token, each row read whole before the next: the rows of
// a tile lie one after another, so this reads memory in its own order, one stream the
// hardware prefetcher follows (reading the tile's rows a cache line each in turn held a
// thread to a third of the memory's rate). x is in L1 cache either way.
template <typename Rows>
void rows_in_order(const Rows& w, const float* x, int64_t n, int64_t row, int64_t token, float* y) {
  const float* xs = x + token * w.k;
  for (int r = 0; r < kRowTile; ++r) y[token * n + row + r] = sum(row_sum(w, xs, row + r));
}

// kRowTile rows from `row` times TT tokens from `token`, widening the weights in registers:
// the form for few tokens, where the product is bound by reading the weights.
template <int TT, typename Rows>
void tile_in_registers(const Rows& w, const float* x, int64_t n, int64_t row, int64_t token, float* y) {
  if constexpr (TT == 1) {
    rows_in_order(w, x, n, row, token, y);
    return;
  }
  fvec acc[kRowTile][TT] = {};
  const int64_t groups = w.k / w.group;
  for (int64_t g = 0; g < groups; ++g) {
    fvec scale[kRowTile];
    for (int r = 0; r < kRowTile; ++r) scale[r] = splat(w.scale(row + r, g));
    const int64_t group_end = (g + 1) * w.group;
    for (int64_t line = g * w.group; line < group_end; line += Rows::kLineElements) {
      // The rows a few tiles on, a cache line at a time as this tile reaches it: the
      // hardware prefetcher alone falls behind one stream per row.
      for (int r = 0; r < kRowTile; ++r) w.prefetch(row + kPrefetchRows + r, line);
      for (int64_t i = line; i < std::min(line + Rows::kLineElements, group_end); i += kLanes) {
        fvec xs[TT];
        for (int t = 0; t < TT; ++t) xs[t] = load(x + (token + t) * w.k + i);
        for (int r = 0; r < kRowTile; ++r) {
          fvec weight = w.at(row + r, i) * scale[r];
          for (int t = 0; t < TT; ++t) acc[r][t] += weight * xs[t];
        }
      }
    }
  }
  for (int r = 0; r < kRowTile; ++r)
    for (int t = 0; t < TT; ++t) y[(token + t) * n + row + r] = sum(acc[r][t]);
}

// kRowTile rows already widened into `rows` [kRowTile, k] times TT tokens from `token`.
template <int TT>
void tile_from_buffer(const float* rows, int64_t k, const float* x, int64_t n, int64_t row, int64_t token,
                      float* y) {
  fvec acc[kRowTile][TT] = {};
  for (int64_t i = 0; i < k; i += kLanes) {
    fvec xs[TT];
    for (int t = 0; t < TT; ++t) xs[t] = load(x + (token + t) * k + i);
    for (int r = 0; r < kRowTile; ++r) {
      fvec weight = load(rows + r * k + i);
      for (int t = 0; t < TT; ++t) acc[r][t] += weight * xs[t];
    }
  }
  for (int r = 0; r < kRowTile; ++r)
    for (int t = 0; t < TT; ++t) y[(token + t) * n + row + r] = sum(acc[r][t]);
}

template <int TT, typename Rows>
void tile(const Rows& w, const float* x, int64_t n, int64_t row, int64_t token, float* y, const float* buffer) {
  if (buffer == nullptr) {
    tile_in_registers<TT>(w, x, n, row, token, y);
  } else {
    tile_from_buffer<TT>(buffer, w.k, x, n, row, token, y);
  }
}

// Every token times the kRowTile rows from `row`. With more tokens than one register tile
// the rows are widened once into `buffer` and every tile reads them from there.
template <typename Rows>
void rows_times_tokens(const Rows& w, const float* x, int64_t tokens, int64_t n, int64_t row, float* y,
                       std::vector<float>& buffer) {
  const float* widened = nullptr;
  if (tokens > kTokenTile) {
    buffer.resize(kRowTile * w.k);
    widen_rows(w, row, kRowTile, buffer.data());
    widened = buffer.data();
  }
  int64_t token = 0;
  for (; token + kTokenTile <= tokens; token += kTokenTile) tile<kTokenTile>(w, x, n, row, token, y, widened);
  switch (tokens - token) {  // the last, partial tile
    case 3: tile<3>(w, x, n, row, token, y, widened); break;
    case 2: tile<2>(w, x, n, row, token, y, widened); break;
    case 1: tile<1>(w, x, n, row, token, y, widened); break;
    default: break;
  }
}

// x [tokens, k] (bfloat16) times the weights into y [tokens, n] (float32).
template <typename Rows>
void matmul(ffi::ThreadPool& pool, const Rows& w, const uint16_t* x, int64_t tokens, int64_t n, float* y) {
  if (tokens > kLanes) {
    matmul_tokens_in_lanes(pool, w, x, tokens, n, y);
    return;
  }
  // The tiles below read each input for many rows: widened once here.
  std::vector<float> inputs(tokens * w.k);
  for (int64_t i = 0; i < tokens * w.k; i += kLanes) {
    const fvec input = widen(x + i);
    std::memcpy(inputs.data() + i, &input, sizeof input);
  }
  const int64_t chunks = (n + kRowsPerChunk - 1) / kRowsPerChunk;
  parallel_for(pool, chunks, [&](int64_t chunk) {
    std::vector<float> buffer;
    const int64_t end = std::min(n, (chunk + 1) * kRowsPerChunk);
    for (int64_t row = chunk * kRowsPerChunk; row < end; row += kRowTile)
      rows_times_tokens(w, inputs.data(), tokens, n, row, y, buffer);
  });
}

// The inputs' bfloat16 bits.
const uint16_t* input_bits(const ffi::Buffer<ffi::BF16>& x) { return reinterpret_cast<const uint16_t*>(x.typed_data()); }

ffi::Error check_shapes(int64_t k, int64_t n, int64_t k_weight, int64_t group) {
  if (k != k_weight) return ffi::Error::InvalidArgument("flint_linear: x and weight disagree on inputs");
  if (n % kRowTile != 0 || k % kLanes != 0 || group % kLanes != 0 || k % group != 0)
    return ffi::Error::InvalidArgument("flint_linear: shape not served by the native kernel");
  return ffi::Error::Success();
}

ffi::Error LinearInt8(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::Buffer<ffi::S8> values,
                      ffi::Buffer<ffi::F32> scales, ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  auto dims = values.dimensions();
  auto scale_dims = scales.dimensions();
  const int64_t tokens = x.dimensions()[0], k = x.dimensions()[1];
  const int64_t n = dims[dims.size() - 2], k_weight = dims[dims.size() - 1];
  const int64_t groups = scale_dims[scale_dims.size() - 1];
  if (groups <= 0 || k_weight % groups != 0) return ffi::Error::InvalidArgument("flint_linear: bad scales");
  const int64_t group = k_weight / groups;
  if (auto error = check_shapes(k, n, k_weight, group); error.failure()) return error;
  // A weight's matrix: the last two dimensions; a leading one is the layers of a stack, of
  // which `layer` is read in place (a scan over layers would otherwise copy each one out).
  const int64_t index = dims.size() < 3 ? 0 : layer_in_range(layer.typed_data()[0], dims[0]);
  Int8Rows w{values.typed_data() + index * n * k, scales.typed_data() + index * n * groups, k, group};
  matmul(pool, w, input_bits(x), tokens, n, y->typed_data());
  return ffi::Error::Success();
}

ffi::Error LinearBf16(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> x, ffi::Buffer<ffi::BF16> values,
                      ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  auto dims = values.dimensions();
  const int64_t tokens = x.dimensions()[0], k = x.dimensions()[1];
  const int64_t n = dims[dims.size() - 2], k_weight = dims[dims.size() - 1];
  if (auto error = check_shapes(k, n, k_weight, k_weight); error.failure()) return error;
  const int64_t index = dims.size() < 3 ? 0 : layer_in_range(layer.typed_data()[0], dims[0]);
  Bf16Rows w{reinterpret_cast<const uint16_t*>(values.typed_data()) + index * n * k, k, k};
  matmul(pool, w, input_bits(x), tokens, n, y->typed_data());
  return ffi::Error::Success();
}

}  // namespace

// Whether products of many tokens run in pairs of bfloat16 here (lanes_bf16.h): then they
// outrun XLA's matmul at every count (module.cc `products_in_pairs`).
extern "C" int FlintProductsInPairs() {
#ifdef FLINT_LANES_IN_BFLOAT16
  return 1;
#else
  return 0;
#endif
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(FlintLinearInt8, LinearInt8,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(FlintLinearBf16, LinearBf16,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
