// What the linear kernels' FFI handlers share (linear.cc, dot.cc): a packed weight's shape
// and layer, and the inputs' bits.

#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "simd.h"

namespace flint {

// The inputs' bfloat16 bits.
inline const uint16_t* input_bits(const ffi::Buffer<ffi::BF16>& x) { return reinterpret_cast<const uint16_t*>(x.typed_data()); }

// A packed weight's [..., n / kLanes, k / kStep, block] as (n, k), where `block` is the
// build's block in the weight's elements (kBlockElements; half that in bytes for 4-bit
// values); n < 0 where the last dimension is not (packed for another CPU).
inline std::pair<int64_t, int64_t> unpacked_shape(ffi::Span<const int64_t> dims, int64_t block, int64_t step) {
  const size_t rank = dims.size();
  if (rank < 3 || dims[rank - 1] != block) return {-1, -1};
  return {dims[rank - 3] * kLanes, dims[rank - 2] * step};
}

// The packed weight's (n, k) against the inputs' k and the groups: an error naming what
// is wrong, or success. `step`: the inputs a step of the product folds.
inline ffi::Error check_shapes(int64_t k, int64_t n, int64_t k_weight, int64_t group, int64_t step) {
  if (n < 0) return ffi::Error::InvalidArgument("flint_linear: a weight not packed for this build's blocks");
  if (k != k_weight) return ffi::Error::InvalidArgument("flint_linear: x and weight disagree on inputs");
  if (group <= 0 || group % step != 0 || k % group != 0)
    return ffi::Error::InvalidArgument("flint_linear: groups not served by the native kernel");
  return ffi::Error::Success();
}

// A grouped weight's groups a row (from its scales [..., n / kLanes, groups, kLanes]) and
// their size, checked against its inputs and its offsets (`mins`, the scales' shape, or
// null); groups <= 0 where they do not fit.
struct Groups {
  int64_t count = 0, size = 0;
};

inline ffi::Error groups_of(const ffi::AnyBuffer& scales, const ffi::AnyBuffer* mins, int64_t k_weight,
                            Groups& groups) {
  auto dims = scales.dimensions();
  groups.count = dims[dims.size() - 2];
  if (groups.count <= 0 || k_weight % groups.count != 0) return ffi::Error::InvalidArgument("flint_linear: bad scales");
  if (mins != nullptr && mins->element_count() != scales.element_count())
    return ffi::Error::InvalidArgument("flint_linear: the offsets and the scales disagree");
  groups.size = k_weight / groups.count;
  return ffi::Error::Success();
}

// A grouped weight's scales (or offsets) as the products read them, [n / kLanes, groups,
// kLanes] from a layer's first: float32 or fp16 (a GGUF format's own: integer_weight.py Int8Weight)
// each, or int8 integers of a float32 factor per super-block of a power of two of groups (a
// K-quant's d: integer_weight.py `scale_factors`), whose product is the same float32 scale exactly.
template <typename Scale>
struct PlainScales {
  const Scale* at;
  int64_t groups;
  fvec get(int64_t rows, int64_t g) const { return load(at + (rows * groups + g) * kLanes); }
};

struct FactoredScales {
  const int8_t* at;
  const float* factors;  // [n / kLanes, supers, kLanes]
  int64_t groups, supers;
  int shift;  // log2 of the groups a super-block (a K-quant's 8 or 16): a group's super-block without a division
  fvec get(int64_t rows, int64_t g) const {
    return widen(at + (rows * groups + g) * kLanes) * load(factors + (rows * supers + (g >> shift)) * kLanes);
  }
};

// log2 of `count`, or -1 where it is not a power of two.
inline int power_of_two_shift(int64_t count) {
  int shift = 0;
  while ((int64_t{1} << shift) < count) ++shift;
  return count > 0 && (int64_t{1} << shift) == count ? shift : -1;
}

// A grouped weight's scales and offsets (`mins`, or null) with their factors (null where
// they have none), of the stack's layer `index`, of n rows in `groups` groups a row.
struct ScaleBuffers {
  const ffi::AnyBuffer& scales;
  const ffi::AnyBuffer* mins;
  const ffi::AnyBuffer* factors;
  const ffi::AnyBuffer* min_factors;
};

template <typename Scale>
PlainScales<Scale> plain(const ffi::AnyBuffer* buffer, int64_t first, int64_t groups) {
  return {buffer == nullptr ? nullptr : static_cast<const Scale*>(buffer->untyped_data()) + first, groups};
}

inline FactoredScales factored(const ffi::AnyBuffer* buffer, const ffi::AnyBuffer* factors, int64_t index, int64_t n,
                               int64_t groups, int64_t supers) {
  const int shift = power_of_two_shift(groups / supers);
  if (buffer == nullptr) return {nullptr, nullptr, groups, supers, shift};
  return {static_cast<const int8_t*>(buffer->untyped_data()) + index * n * groups,
          static_cast<const float*>(factors->untyped_data()) + index * n * supers, groups, supers, shift};
}

// `run(scales, mins)` with readers of the weight's scales and offsets (above): float32, fp16,
// or int8 of float32 factors; an error naming what does not fit.
template <typename Run>
ffi::Error with_scales(const ScaleBuffers& b, int64_t index, int64_t n, int64_t groups, Run run) {
  if (b.mins != nullptr && b.mins->element_type() != b.scales.element_type())
    return ffi::Error::InvalidArgument("flint_linear: the offsets and the scales differ in type");
  if (b.factors != nullptr) {
    const auto dims = b.factors->dimensions();
    const int64_t supers = dims[dims.size() - 2];
    const bool fits = b.scales.element_type() == ffi::DataType::S8 && b.factors->element_type() == ffi::DataType::F32 &&
                      supers > 0 && groups % supers == 0 && power_of_two_shift(groups / supers) >= 0 &&
                      (b.mins == nullptr || (b.min_factors != nullptr &&
                                             b.min_factors->element_count() == b.factors->element_count()));
    if (!fits) return ffi::Error::InvalidArgument("flint_linear: factored scales of another form");
    return run(factored(&b.scales, b.factors, index, n, groups, supers),
               factored(b.mins, b.min_factors, index, n, groups, supers));
  }
  const int64_t first = index * n * groups;
  switch (b.scales.element_type()) {
    case ffi::DataType::F32: return run(plain<float>(&b.scales, first, groups), plain<float>(b.mins, first, groups));
    case ffi::DataType::F16: return run(plain<Half>(&b.scales, first, groups), plain<Half>(b.mins, first, groups));
    default: return ffi::Error::InvalidArgument("flint_linear: scales neither float32 nor float16");
  }
}

// A grouped product's FFI handler (linear.cc, dot.cc): x (bfloat16), the values and the
// scales (then, as `...`, the scales' factors, the offsets and theirs, where the weight has
// them), the layer, and y (float32). Values and scales are bound untyped: ops.py `linear`
// names the target by the values' kind, and the scales are float32, fp16 or factored int8.
#define FLINT_GROUPED_HANDLER(symbol, function, ...)                     \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(symbol, function,                        \
                                ffi::Ffi::Bind()                         \
                                    .Ctx<ffi::ThreadPool>()              \
                                    .Arg<ffi::Buffer<ffi::BF16>>()       \
                                    .Arg<ffi::AnyBuffer>()               \
                                    .Arg<ffi::AnyBuffer>() __VA_ARGS__   \
                                    .Arg<ffi::Buffer<ffi::S32>>()        \
                                    .Ret<ffi::Buffer<ffi::F32>>());

// A factored weight's further arguments after its scales: their factors, the offsets and
// theirs.
#define FLINT_FACTORED_MINS .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()

// The layer of a stack (a leading dimension past the packed three) read in place at
// `layer` (a scan over layers would otherwise copy each one out); 0 for a matrix.
inline int64_t layer_index(ffi::Span<const int64_t> dims, const ffi::Buffer<ffi::S32>& layer) {
  return dims.size() < 4 ? 0 : layer_in_range(layer.typed_data()[0], dims[0]);
}

// How many of x's `rows` are live: `layer`'s second element where the step gives one (its
// real tokens, ops.py `at_layer`; a bucket's padding follows them), else all. A padding
// row's products are never summed: its outputs are zeros (`zero_padding`), and a live
// row's are the same bits either way (each output is summed in one order at every count).
inline int64_t live_rows(const ffi::Buffer<ffi::S32>& layer, int64_t rows) {
  return layer.element_count() < 2 ? rows : std::clamp<int64_t>(layer.typed_data()[1], 0, rows);
}

inline void zero_padding(float* y, int64_t live, int64_t rows, int64_t n) {
  std::memset(y + live * n, 0, (rows - live) * n * sizeof(float));
}

}  // namespace flint
