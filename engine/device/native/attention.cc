// Flint's native decode attention, called from jitted JAX programs through XLA's FFI
// (engine/device/attention/native_cpu.py).
//
// XLA's CPU backend gathers a decode token's cached pages into a copy, then runs
// broadcast-reduce products over it. This kernel reads each page where it lies, widened
// once for every query that reads it, with the online softmax kept per query. The jnp reference
// stays the definition: tests/engine/test_native_cpu.py compares the two.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

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

// Tokens of the step that read the same pages: a prompt chunk's tokens share their row's
// block table. Runs of up to kRunTokens consecutive tokens with equal tables (a decode
// row is a run of one) share each page's widening; each token's sums are its own, in the
// same order whatever run it is in.
constexpr int64_t kRunTokens = 16;

// Keys a fold takes at once (whole pages, at least one): the online softmax's rescaling,
// sums and maxima come once a block rather than once a page. Blocks start at fixed
// positions of the sequence (every kFoldKeys / page_size pages), so a token's folds are the
// same whatever else the step holds.
constexpr int64_t kFoldKeys = 64;

struct Run {
  int64_t first, count;
};

std::vector<Run> runs_of(const int32_t* tables, int64_t tokens, int64_t table_len) {
  std::vector<Run> runs;
  for (int64_t token = 0; token < tokens; ++token) {
    const int32_t* table = tables + token * table_len;
    const bool joins = !runs.empty() && runs.back().count < kRunTokens &&
                       std::equal(table, table + table_len, tables + runs.back().first * table_len);
    if (joins) ++runs.back().count;
    else runs.push_back({token, 1});
  }
  return runs;
}

inline void grow(std::vector<float>& scratch, size_t size) {
  if (scratch.size() < size) scratch.resize(size);
}

// Where one query's inputs and outputs lie: q [group, d] of a (token, KV head), and m, l
// [group], acc [group, d] from the same index.
struct QueryRows {
  const float* q;
  float *m, *l, *acc;
  int64_t heads, group, d;
  int64_t at(int64_t token, int64_t head) const { return (token * heads + head) * group; }
};

// Pages [first, last) of `table` (one KV head, the keys of the first `longest`) widened
// into `block`, one after another.
template <int DV, typename Cache>
void widen_block(const Cache& cache, const int32_t* table, int64_t first, int64_t last, int64_t longest,
                 int64_t head, const WidenedKeys& block) {
  constexpr int64_t d = DV * kLanes;
  const int64_t page_size = cache.page_size;
  for (int64_t j = first; j < last; ++j) {
    int64_t page = table[j];
    if (page < 0 || page >= cache.pages) page = 0;  // the null page: never out of bounds
    const int64_t at = (j - first) * page_size * d;
    widen_page<DV>(cache, page, std::min(page_size, longest - j * page_size), head,
                   WidenedKeys{block.keys + at, block.values + at});
  }
}

// One KV head of a run of tokens: each page, widened once, folded into the state of every
// query of every token whose context reaches it; then the states out.
template <int DV, typename Cache>
void attend_run(const Cache& cache, const QueryRows& rows, const int32_t* table, int64_t table_len,
                const int32_t* contexts, const Run& run, int64_t head) {
  using Key = typename Cache::Key;
  constexpr int64_t d = DV * kLanes;
  const int64_t page_size = cache.page_size, group = rows.group;
  std::vector<SoftmaxState<DV>> states(run.count * group);
  std::vector<fvec> queries(run.count * group * DV);
  std::vector<int64_t> lengths(run.count);
  int64_t longest = 0;
  for (int64_t t = 0; t < run.count; ++t) {
    lengths[t] = std::max<int32_t>(contexts[run.first + t], 0);
    longest = std::max(longest, lengths[t]);
    for (int64_t g = 0; g < group; ++g)
      load_query<DV, Key>(rows.q + (rows.at(run.first + t, head) + g) * d, queries.data() + (t * group + g) * DV);
  }
  const int64_t pages = std::min(table_len, (longest + page_size - 1) / page_size);
  const int64_t per_block = std::max<int64_t>(1, kFoldKeys / page_size), block_keys = per_block * page_size;
  // Scratch of this thread's, grown once and reused: zeroing 37 KiB a task was nearly half
  // of a short decode row's attention (67 against 37 us for 200 keys, 8 x 4 queries).
  static thread_local std::vector<float> widened, scores;
  grow(widened, 2 * block_keys * d);
  grow(scores, kFoldQueries * (kMaxBlockKeys + kLanes));
  const WidenedKeys block{widened.data(), widened.data() + block_keys * d};
  for (int64_t first = 0; first < pages; first += per_block) {
    const int64_t last = std::min(pages, first + per_block), start = first * page_size;
    widen_block<DV>(cache, table, first, last, longest, head, block);
    for (int64_t t = 0; t < run.count; ++t) {
      const int64_t keys = std::min((last - first) * page_size, lengths[t] - start);
      if (keys <= 0) continue;
      fold_queries<DV>(block, queries.data() + t * group * DV, group, keys, scores.data(), states.data() + t * group);
    }
  }
  for (int64_t t = 0; t < run.count; ++t)
    for (int64_t g = 0; g < group; ++g) {
      const int64_t at = rows.at(run.first + t, head) + g;
      store_state<DV, typename Cache::Value>(states[t * group + g], rows.m + at, rows.l + at, rows.acc + at * d);
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
  if (cd[2] > kMaxBlockKeys) return ffi::Error::InvalidArgument("flint_decode_attention: page size not served");
  const int64_t layer_index = layer_in_range(layer, cd[0]);
  const int64_t layer_size = cd[1] * cd[2] * cd[3] * cd[4];
  Cache cache{static_cast<const K*>(k_cache.untyped_data()) + layer_index * layer_size,
              static_cast<const V*>(v_cache.untyped_data()) + layer_index * layer_size, cd[1], cd[2], kv_heads, d};
  const int64_t table_len = tables.dimensions()[1];
  const int32_t* table_data = tables.typed_data();
  const int32_t* contexts = context_lens.typed_data();
  const QueryRows rows{q.typed_data(), m_out, l_out, acc_out, kv_heads, group, d};
  const std::vector<Run> runs = runs_of(table_data, tokens, table_len);
  const bool served = with_head_dim(d, [&](auto vectors) {
    parallel_for(pool, int64_t(runs.size()) * kv_heads, [&](int64_t task) {
      const Run& run = runs[task / kv_heads];
      attend_run<decltype(vectors)::value>(cache, rows, table_data + run.first * table_len, table_len, contexts, run,
                                           task % kv_heads);
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
