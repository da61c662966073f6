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
#include <type_traits>

#include "simd.h"

using namespace flint;

namespace {

// Each decode token's attention to its cached context: the online-softmax state (max,
// normaliser, weighted values) over the cached keys only, which the caller merges with the
// step's own keys (engine/device/attention/reference.py).

// K, V: float, uint16_t for a bfloat16 cache or uint8_t for a float8_e4m3fn one (widened to
// float32 as they are read).
template <typename K, typename V>
struct CacheView {
  using Key = K;
  using Value = V;
  const K* k;  // [pages, page_size, kv_heads, d] of one layer
  const V* v;
  int64_t pages, page_size, kv_heads, d;

  int64_t offset(int64_t page, int64_t slot, int64_t head) const {
    return ((page * page_size + slot) * kv_heads + head) * d;
  }
};

constexpr int64_t kMaxPageSize = 256;

// kLanes of a cached key or value as float32.
inline fvec load_cached(const float* p) { return load(p); }
inline fvec load_cached(const uint16_t* p) { return widen(p); }

// kLanes float8_e4m3fn values as float32 times 2^-8, by way of float16: a float8's exponent
// and mantissa moved 7 bits up are a float16's (exponent bias 15, not 7: the value times
// 2^-8, subnormals included, which the hardware conversion widens exactly). Sign-extended
// first, so the shift leaves the sign on top and one stray bit below it to clear. The 2^8
// is put back once (kWidenedScale), on the query and on the weighted sum, not per value.
// (The cache holds no NaN: kv_cache.py `stored` saturates.)
inline fvec load_cached(const uint8_t* p) {
#if defined(__AVX512F__)
  const __m256i words = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return (fvec)_mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(words, 7), _mm256_set1_epi16(int16_t(0xbfff))));
#elif defined(__AVX2__) && defined(__F16C__)
  const __m128i words = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return (fvec)_mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(words, 7), _mm_set1_epi16(int16_t(0xbfff))));
#else
  fvec v;
  for (int i = 0; i < kLanes; ++i) {
    const int magnitude = p[i] & 0x7f, exponent = magnitude >> 3, mantissa = magnitude & 7;
    const float value = exponent == 0 ? std::ldexp(float(mantissa), -17) : std::ldexp(float(8 + mantissa), exponent - 18);
    v[i] = p[i] & 0x80 ? -value : value;
  }
  return v;
#endif
}

// What load_cached's lanes are short of: 2^8 for float8 (above), nothing for the others.
template <typename T>
constexpr float kWidenedScale = 1.0f;
template <>
constexpr float kWidenedScale<uint8_t> = 256.0f;

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
template <int DV, typename Cache>
void fold_page(const Cache& cache, const fvec* query, int64_t page, int64_t keys, int64_t head, float* scores,
               SoftmaxState<DV>& state) {
  float block_max = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < keys; ++s) {
    const auto* key = cache.k + cache.offset(page, s, head);
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
    const auto* value = cache.v + cache.offset(page, s, head);
    const fvec p = splat(scores[s]);
    for (int i = 0; i < DV; ++i) state.out[i] += p * load_cached(value + i * kLanes);
  }
  state.normaliser = state.normaliser * rescale + sum(total);
  state.running_max = new_max;
}

// One (token, KV head): each of its `group` queries against the first `context` cached keys
// of `table`, a page at a time (DV vectors of head_dim). (Widening a narrow cache's page once
// for the whole group, into a buffer, was slower: 32 decode rows of SmolLM2, 3 queries a
// KV head, took 3 ms more a step.)
template <int DV, typename Cache>
void attend_one(const Cache& cache, const float* q, const int32_t* table, int64_t table_len, int64_t context,
                int64_t head, int64_t group, float* m, float* l, float* acc) {
  constexpr int64_t d = DV * kLanes;
  const int64_t page_size = cache.page_size;
  const int64_t num_pages = std::min(table_len, (context + page_size - 1) / page_size);
  alignas(64) float scores[kMaxPageSize + kLanes];
  for (int64_t g = 0; g < group; ++g) {
    fvec query[DV];
    for (int i = 0; i < DV; ++i) query[i] = load(q + g * d + i * kLanes) * splat(kWidenedScale<typename Cache::Key>);
    SoftmaxState<DV> state;
    for (int64_t j = 0; j < num_pages; ++j) {
      int64_t page = table[j];
      if (page < 0 || page >= cache.pages) page = 0;  // the null page: never out of bounds
      fold_page(cache, query, page, std::min(page_size, context - j * page_size), head, scores, state);
    }
    m[g] = state.running_max;
    l[g] = state.normaliser;
    for (int i = 0; i < DV; ++i) {
      const fvec weighted = state.out[i] * splat(kWidenedScale<typename Cache::Value>);
      std::memcpy(acc + g * d + i * kLanes, &weighted, sizeof weighted);
    }
  }
}

template <typename Cache>
using AttendOne = void (*)(const Cache&, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                           float*, float*, float*);

template <typename Cache>
AttendOne<Cache> attend_one_for(int64_t head_dim) {
  switch (head_dim) {
    case 32: return attend_one<32 / kLanes, Cache>;
    case 64: return attend_one<64 / kLanes, Cache>;
    case 128: return attend_one<128 / kLanes, Cache>;
    case 256: return attend_one<256 / kLanes, Cache>;
    default: return nullptr;
  }
}

// The kernel over caches of key type K and value type V: float, uint16_t (bfloat16) or
// uint8_t (float8_e4m3fn).
template <typename K, typename V>
ffi::Error Attend(ffi::ThreadPool& pool, const ffi::Buffer<ffi::F32>& q, const ffi::AnyBuffer& k_cache,
                  const ffi::AnyBuffer& v_cache, int32_t layer, const ffi::Buffer<ffi::S32>& tables,
                  const ffi::Buffer<ffi::S32>& context_lens, float* m_out, float* l_out, float* acc_out) {
  auto qd = q.dimensions();        // [tokens, kv_heads, group, d]
  auto cd = k_cache.dimensions();  // [layers, pages, page_size, kv_heads, d]
  auto vd = v_cache.dimensions();
  const int64_t tokens = qd[0], kv_heads = qd[1], group = qd[2], d = qd[3];
  if (cd.size() != 5 || cd[3] != kv_heads || cd[4] != d || !std::equal(cd.begin(), cd.end(), vd.begin(), vd.end()))
    return ffi::Error::InvalidArgument("flint_decode_attention: cache and queries disagree");
  using Cache = CacheView<K, V>;
  const AttendOne<Cache> attend = attend_one_for<Cache>(d);
  if (attend == nullptr || cd[2] > kMaxPageSize)
    return ffi::Error::InvalidArgument("flint_decode_attention: head_dim or page size not served");
  const int64_t layer_index = layer_in_range(layer, cd[0]);
  const int64_t layer_size = cd[1] * cd[2] * cd[3] * cd[4];
  Cache cache{static_cast<const K*>(k_cache.untyped_data()) + layer_index * layer_size,
              static_cast<const V*>(v_cache.untyped_data()) + layer_index * layer_size, cd[1], cd[2], kv_heads, d};
  const int64_t table_len = tables.dimensions()[1];
  const float* queries = q.typed_data();
  const int32_t* table_data = tables.typed_data();
  const int32_t* contexts = context_lens.typed_data();
  parallel_for(pool, tokens * kv_heads, [&](int64_t task) {
    const int64_t token = task / kv_heads, head = task % kv_heads;
    const int64_t context = std::max<int32_t>(contexts[token], 0);
    const int64_t at = task * group;
    attend(cache, queries + at * d, table_data + token * table_len, table_len, context, head, group, m_out + at,
           l_out + at, acc_out + at * d);
  });
  return ffi::Error::Success();
}

// The caches come as they lie, of any served pair of types (`--kv-cache-dtype`): float32,
// bfloat16 or float8_e4m3fn both, or keys in bfloat16 with values in float8_e4m3fn. A
// float8 cache's arrays are its bytes, U8 (engine/device/kv_cache.py FLOAT8_BYTES).
ffi::Error DecodeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::AnyBuffer k_cache,
                           ffi::AnyBuffer v_cache, ffi::Buffer<ffi::S32> layer, ffi::Buffer<ffi::S32> tables,
                           ffi::Buffer<ffi::S32> context_lens, ffi::ResultBuffer<ffi::F32> m,
                           ffi::ResultBuffer<ffi::F32> l, ffi::ResultBuffer<ffi::F32> acc) {
  using DT = ffi::DataType;
  const DT keys = k_cache.element_type(), values = v_cache.element_type();
  // Attend over element types K and V, named by null pointers of those types.
  auto attend = [&](auto* key_type, auto* value_type) {
    using K = std::remove_pointer_t<decltype(key_type)>;
    using V = std::remove_pointer_t<decltype(value_type)>;
    return Attend<K, V>(pool, q, k_cache, v_cache, layer.typed_data()[0], tables, context_lens, m->typed_data(),
                        l->typed_data(), acc->typed_data());
  };
  if (keys == DT::F32 && values == DT::F32) return attend((float*)nullptr, (float*)nullptr);
  if (keys == DT::BF16 && values == DT::BF16) return attend((uint16_t*)nullptr, (uint16_t*)nullptr);
  if (keys == DT::U8 && values == DT::U8) return attend((uint8_t*)nullptr, (uint8_t*)nullptr);
  if (keys == DT::BF16 && values == DT::U8) return attend((uint16_t*)nullptr, (uint8_t*)nullptr);
  return ffi::Error::InvalidArgument("flint_decode_attention: a pair of cache dtypes it does not serve");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FlintDecodeAttention, DecodeAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
