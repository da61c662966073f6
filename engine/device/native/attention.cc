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
#include "softmax.h"

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

// One (token, KV head): each of its `group` queries against the first `context` cached keys
// of `table`, a page at a time (DV vectors of head_dim). (Widening a narrow cache's page once
// for the whole group, into a buffer, was slower: 32 decode rows of SmolLM2, 3 queries a
// KV head, took 3 ms more a step.)
template <int DV, typename Cache>
void attend_one(const Cache& cache, const float* q, const int32_t* table, int64_t table_len, int64_t context,
                int64_t head, int64_t group, float* m, float* l, float* acc) {
  const int64_t page_size = cache.page_size;
  const int64_t num_pages = std::min(table_len, (context + page_size - 1) / page_size);
  attend_group<DV>(cache, q, head, group, m, l, acc, [&](auto&& fold) {
    for (int64_t j = 0; j < num_pages; ++j) {
      int64_t page = table[j];
      if (page < 0 || page >= cache.pages) page = 0;  // the null page: never out of bounds
      fold(page, std::min(page_size, context - j * page_size));
    }
  });
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
  if (cd[2] > kMaxBlockKeys) return ffi::Error::InvalidArgument("flint_decode_attention: page size not served");
  const int64_t layer_index = layer_in_range(layer, cd[0]);
  const int64_t layer_size = cd[1] * cd[2] * cd[3] * cd[4];
  Cache cache{static_cast<const K*>(k_cache.untyped_data()) + layer_index * layer_size,
              static_cast<const V*>(v_cache.untyped_data()) + layer_index * layer_size, cd[1], cd[2], kv_heads, d};
  const int64_t table_len = tables.dimensions()[1];
  const float* queries = q.typed_data();
  const int32_t* table_data = tables.typed_data();
  const int32_t* contexts = context_lens.typed_data();
  const bool served = with_head_dim(d, [&](auto vectors) {
    parallel_for(pool, tokens * kv_heads, [&](int64_t task) {
      const int64_t token = task / kv_heads, head = task % kv_heads;
      const int64_t context = std::max<int32_t>(contexts[token], 0);
      const int64_t at = task * group;
      attend_one<decltype(vectors)::value>(cache, queries + at * d, table_data + token * table_len, table_len,
                                           context, head, group, m_out + at, l_out + at, acc_out + at * d);
    });
  });
  if (!served) return ffi::Error::InvalidArgument("flint_decode_attention: head_dim not served");
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
