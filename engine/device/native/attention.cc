// Flint's native decode attention, called from jitted JAX programs through XLA's FFI
// (engine/device/attention/native_cpu.py).
//
// XLA's CPU backend gathers a decode token's cached pages into a copy, then runs
// broadcast-reduce products over it. This kernel reads each page where it lies, with the
// online softmax kept per (token, KV head) and the output in registers. The jnp reference
// stays the definition: tests/engine/test_native_cpu.py compares the two.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "simd.h"

using namespace flint;

namespace {

// Each decode token's attention to its cached context: the online-softmax state (max,
// normaliser, weighted values) over the cached keys only, which the caller merges with the
// step's own keys (engine/device/attention/reference.py).

// T: float, or uint16_t for a bfloat16 cache (widened to float32 as it is read).
template <typename T>
struct CacheView {
  const T* k;  // [pages, page_size, kv_heads, d] of one layer
  const T* v;
  int64_t pages, page_size, kv_heads, d;

  int64_t offset(int64_t page, int64_t slot, int64_t head) const {
    return ((page * page_size + slot) * kv_heads + head) * d;
  }
};

constexpr int64_t kMaxPageSize = 256;

// kLanes of a cached key or value as float32.
inline fvec load_cached(const float* p) { return load(p); }
inline fvec load_cached(const uint16_t* p) { return widen(p); }

// exp of each lane, for x <= 0 (scores less their running max), to about float32's
// precision: exp(x) = 2^n exp(r) with n = round(x / ln 2), |r| <= ln 2 / 2, and exp(r) by a
// degree-7 polynomial (Cephes' expf coefficients). Below -87 (and at -inf) it is 0.
inline fvec exp_lanes(fvec x) {
  const fvec clamped = x < splat(-87.0f) ? splat(-87.0f) : x;
  const ivec n = -__builtin_convertvector(splat(0.5f) - clamped * splat(1.44269504088896341f), ivec);
  const fvec nf = __builtin_convertvector(n, fvec);
  const fvec r = clamped - nf * splat(0.693359375f) + nf * splat(2.12194440e-4f);
  fvec y = splat(1.9875691500e-4f);
  y = y * r + splat(1.3981999507e-3f);
  y = y * r + splat(8.3334519073e-3f);
  y = y * r + splat(4.1665795894e-2f);
  y = y * r + splat(1.6666665459e-1f);
  y = y * r + splat(5.0000001201e-1f);
  y = y * r * r + r + splat(1.0f);
  const ivec bits = (n + 127) << 23;
  fvec two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return x < splat(-87.0f) ? splat(0.0f) : y * two_n;
}

// The online-softmax state of one query over the keys folded in so far: the running max,
// the normaliser and the weighted values (DV vectors of head_dim), in registers.
template <int DV>
struct SoftmaxState {
  fvec out[DV] = {};
  float running_max = -std::numeric_limits<float>::infinity();
  float normaliser = 0.0f;
};

// Folds the first `keys` keys of `page` (KV head `head`) into `state` for `query`;
// `scores` holds a page of scores and whole vectors past it.
template <int DV, typename T>
void fold_page(const CacheView<T>& cache, const fvec* query, int64_t page, int64_t keys, int64_t head, float* scores,
               SoftmaxState<DV>& state) {
  float block_max = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < keys; ++s) {
    const T* key = cache.k + cache.offset(page, s, head);
    fvec partial = query[0] * load_cached(key);
    for (int i = 1; i < DV; ++i) partial += query[i] * load_cached(key + i * kLanes);
    scores[s] = sum(partial);
    block_max = std::max(block_max, scores[s]);
  }
  for (int64_t s = keys; s < ((keys + kLanes - 1) / kLanes) * kLanes; ++s)
    scores[s] = -std::numeric_limits<float>::infinity();  // whole vectors below; exp gives 0
  const float new_max = std::max(state.running_max, block_max);
  const float rescale = std::exp(state.running_max - new_max);  // 0 at the first page (-inf)
  fvec total{};
  for (int64_t s = 0; s < keys; s += kLanes) {
    const fvec p = exp_lanes(load(scores + s) - splat(new_max));
    std::memcpy(scores + s, &p, sizeof p);
    total += p;
  }
  for (int i = 0; i < DV; ++i) state.out[i] *= splat(rescale);
  for (int64_t s = 0; s < keys; ++s) {
    const T* value = cache.v + cache.offset(page, s, head);
    const fvec p = splat(scores[s]);
    for (int i = 0; i < DV; ++i) state.out[i] += p * load_cached(value + i * kLanes);
  }
  state.normaliser = state.normaliser * rescale + sum(total);
  state.running_max = new_max;
}

// One (token, KV head): each of its `group` queries against the first `context` cached keys
// of `table`, a page at a time (DV vectors of head_dim).
template <int DV, typename T>
void attend_one(const CacheView<T>& cache, const float* q, const int32_t* table, int64_t table_len, int64_t context,
                int64_t head, int64_t group, float* m, float* l, float* acc) {
  constexpr int64_t d = DV * kLanes;
  const int64_t page_size = cache.page_size;
  const int64_t num_pages = std::min(table_len, (context + page_size - 1) / page_size);
  alignas(64) float scores[kMaxPageSize + kLanes];
  for (int64_t g = 0; g < group; ++g) {
    fvec query[DV];
    for (int i = 0; i < DV; ++i) query[i] = load(q + g * d + i * kLanes);
    SoftmaxState<DV> state;
    for (int64_t j = 0; j < num_pages; ++j) {
      int64_t page = table[j];
      if (page < 0 || page >= cache.pages) page = 0;  // the null page: never out of bounds
      fold_page(cache, query, page, std::min(page_size, context - j * page_size), head, scores, state);
    }
    m[g] = state.running_max;
    l[g] = state.normaliser;
    for (int i = 0; i < DV; ++i) std::memcpy(acc + g * d + i * kLanes, &state.out[i], sizeof state.out[i]);
  }
}

template <typename T>
using AttendOne = void (*)(const CacheView<T>&, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                           float*, float*, float*);

template <typename T>
AttendOne<T> attend_one_for(int64_t head_dim) {
  switch (head_dim) {
    case 32: return attend_one<32 / kLanes, T>;
    case 64: return attend_one<64 / kLanes, T>;
    case 128: return attend_one<128 / kLanes, T>;
    case 256: return attend_one<256 / kLanes, T>;
    default: return nullptr;
  }
}

// KV: the cache's type, F32 or BF16 (its elements uint16_t).
template <ffi::DataType KV>
ffi::Error DecodeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<KV> k_cache,
                           ffi::Buffer<KV> v_cache, ffi::Buffer<ffi::S32> layer, ffi::Buffer<ffi::S32> tables,
                           ffi::Buffer<ffi::S32> context_lens, ffi::ResultBuffer<ffi::F32> m,
                           ffi::ResultBuffer<ffi::F32> l, ffi::ResultBuffer<ffi::F32> acc) {
  auto qd = q.dimensions();      // [tokens, kv_heads, group, d]
  auto cd = k_cache.dimensions();  // [layers, pages, page_size, kv_heads, d]
  const int64_t tokens = qd[0], kv_heads = qd[1], group = qd[2], d = qd[3];
  if (cd.size() != 5 || cd[3] != kv_heads || cd[4] != d)
    return ffi::Error::InvalidArgument("flint_decode_attention: cache and queries disagree");
  using T = ffi::NativeType<KV>;
  const AttendOne<T> attend = attend_one_for<T>(d);
  if (attend == nullptr || cd[2] > kMaxPageSize)
    return ffi::Error::InvalidArgument("flint_decode_attention: head_dim or page size not served");
  const int64_t layer_index = layer_in_range(layer.typed_data()[0], cd[0]);
  const int64_t layer_size = cd[1] * cd[2] * cd[3] * cd[4];
  CacheView<T> cache{k_cache.typed_data() + layer_index * layer_size, v_cache.typed_data() + layer_index * layer_size,
                  cd[1], cd[2], kv_heads, d};
  const int64_t table_len = tables.dimensions()[1];
  const float* queries = q.typed_data();
  const int32_t* table_data = tables.typed_data();
  const int32_t* contexts = context_lens.typed_data();
  float *m_out = m->typed_data(), *l_out = l->typed_data(), *acc_out = acc->typed_data();
  parallel_for(pool, tokens * kv_heads, [&](int64_t task) {
    const int64_t token = task / kv_heads, head = task % kv_heads;
    const int64_t context = std::max<int32_t>(contexts[token], 0);
    const int64_t at = task * group;
    attend(cache, queries + at * d, table_data + token * table_len, table_len, context, head, group, m_out + at,
           l_out + at, acc_out + at * d);
  });
  return ffi::Error::Success();
}

}  // namespace

// One binding per cache type: the float32 cache, and the bfloat16 one (`--kv-cache-dtype`).
#define FLINT_DECODE_ATTENTION(name, kv)                                                   \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(name, DecodeAttention<kv>,                                 \
                                ffi::Ffi::Bind()                                           \
                                    .Ctx<ffi::ThreadPool>()                                \
                                    .Arg<ffi::Buffer<ffi::F32>>()                          \
                                    .Arg<ffi::Buffer<kv>>()                                \
                                    .Arg<ffi::Buffer<kv>>()                                \
                                    .Arg<ffi::Buffer<ffi::S32>>()                          \
                                    .Arg<ffi::Buffer<ffi::S32>>()                          \
                                    .Arg<ffi::Buffer<ffi::S32>>()                          \
                                    .Ret<ffi::Buffer<ffi::F32>>()                          \
                                    .Ret<ffi::Buffer<ffi::F32>>()                          \
                                    .Ret<ffi::Buffer<ffi::F32>>())

FLINT_DECODE_ATTENTION(FlintDecodeAttention, ffi::F32);
FLINT_DECODE_ATTENTION(FlintDecodeAttentionBf16, ffi::BF16);
