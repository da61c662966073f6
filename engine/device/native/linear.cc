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
#include <vector>

#include "blocks.h"
#include "simd.h"
#include "weight_rows.h"

using namespace flint;

namespace {

// The tiles: rows x tokens of outputs whose sums stay in registers. Up to kFewTokens tokens
// a tile takes one row, widened in registers as read: each row is read whole before the
// next, one stream the hardware prefetcher follows (a tile of 2 or 4 rows side by side, 2-4
// streams, read a 56 MB bfloat16 head at half the rate). Past that a chunk's rows are widened once
// and meet tiles of kRowTile rows x kManyTokens tokens (16 sums in registers; 4 x 3, 4 x 6,
// 6 x 4 and 8 x 2 measured within the noise of it).
constexpr int kFewTokens = 4;
constexpr int kManyTokens = 4;

// R rows from `row` times T tokens from `token` of the inputs x [tokens, k], into y
// [tokens, n]: each output by blocks.h's steps, one vector of sums along the row.
template <int R, int T, typename Rows>
void tile(const Rows& w, const InputElement* x, int64_t n, int64_t row, int64_t token, float* y) {
  fvec sums[R][T] = {};
  for (int64_t i = 0; i < w.k; i += kBlock)
    for (int r = 0; r < R; ++r) {
      const WeightBlock weights = w.block(row + r, i);
      for (int t = 0; t < T; ++t) sums[r][t] = fold(sums[r][t], weights, x + (token + t) * w.k + i);
    }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[(token + t) * n + row + r] = sum(sums[r][t]);
}

// The rows [first, end) times `tokens` tokens from `token`, in tiles of R rows and T tokens.
template <int R, int T, typename Rows>
void tiles_of_rows(const Rows& w, const InputElement* x, int64_t n, int64_t first, int64_t end, int64_t token,
                   float* y) {
  int64_t row = first;
  for (; row + R <= end; row += R) tile<R, T>(w, x, n, row, token, y);
  for (; row < end; row += kRowTile) tile<kRowTile, T>(w, x, n, row, token, y);  // n: whole kRowTiles
}

// The rows [first, end) times every token, T at a time, the last tile with the rest.
template <int R, int T, typename Rows>
void tiles_of_tokens(const Rows& w, const InputElement* x, int64_t tokens, int64_t n, int64_t first, int64_t end,
                     float* y) {
  int64_t token = 0;
  for (; token + T <= tokens; token += T) tiles_of_rows<R, T>(w, x, n, first, end, token, y);
  switch (tokens - token) {
    case 3: tiles_of_rows<R, 3>(w, x, n, first, end, token, y); break;
    case 2: tiles_of_rows<R, 2>(w, x, n, first, end, token, y); break;
    case 1: tiles_of_rows<R, 1>(w, x, n, first, end, token, y); break;
    default: break;
  }
}

// The rows [first, end) times a few tokens, a row at a time, widened in registers as read.
template <typename Rows>
void few_tokens(const Rows& w, const InputElement* x, int64_t tokens, int64_t n, int64_t first, int64_t end,
                float* y) {
  for (int64_t row = first; row < end; ++row) switch (tokens) {
      case 1: tile<1, 1>(w, x, n, row, 0, y); break;
      case 2: tile<1, 2>(w, x, n, row, 0, y); break;
      case 3: tile<1, 3>(w, x, n, row, 0, y); break;
      default: tile<1, 4>(w, x, n, row, 0, y); break;
    }
}

// x [tokens, k] (bfloat16) times the weights into y [tokens, n] (float32). A thread takes a
// chunk of rows at a time; past a few tokens the chunk's rows are widened once first.
template <typename Rows>
void matmul(ffi::ThreadPool& pool, const Rows& w, const uint16_t* x, int64_t tokens, int64_t n, float* y) {
  std::vector<InputElement> inputs(tokens * w.k);
  for (int64_t i = 0; i < tokens * w.k; ++i) inputs[i] = input_of(x[i]);
  const int64_t chunks = (n + kRowsPerChunk - 1) / kRowsPerChunk;
  parallel_for(pool, chunks, [&](int64_t chunk) {
    const int64_t first = chunk * kRowsPerChunk, end = std::min(n, first + kRowsPerChunk);
    if (tokens <= kFewTokens) {
      few_tokens(w, inputs.data(), tokens, n, first, end, y);
      return;
    }
    std::vector<BufferElement> buffer;
    const auto rows = buffered(w, first, end - first, buffer);
    tiles_of_tokens<kRowTile, kManyTokens>(rows, inputs.data(), tokens, n, first, end, y);
  });
}

// The inputs' bfloat16 bits.
const uint16_t* input_bits(const ffi::Buffer<ffi::BF16>& x) { return reinterpret_cast<const uint16_t*>(x.typed_data()); }

ffi::Error check_shapes(int64_t k, int64_t n, int64_t k_weight, int64_t group) {
  if (k != k_weight) return ffi::Error::InvalidArgument("flint_linear: x and weight disagree on inputs");
  if (n % kRowTile != 0 || k % kBlock != 0 || group % kBlock != 0 || k % group != 0)
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
  Bf16Rows w{reinterpret_cast<const uint16_t*>(values.typed_data()) + index * n * k, k};
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
