// Flint's native CPU kernels, called from jitted JAX programs through XLA's FFI
// (engine/device/native/__init__.py registers them; ops.py calls them).
//
// XLA's CPU backend cannot express two things a decode step on a CPU is bound by:
// - a product with int8 weights that widens them in registers: it writes the widened
//   layer to memory first (about half of a one-token step on jax 0.11);
// - paged attention that reads each cached page in place: it gathers the pages into a
//   copy, then runs broadcast-reduce products over it.
// Both kernels below read their operands where they lie, and are threaded over XLA's own
// intra-op pool; the product also serves a bfloat16 head. The jnp code they replace stays
// the reference (and the fallback where this library was not built):
// tests/engine/test_native_cpu.py compares the two.
//
// The SIMD is GCC's vector extensions: 16 lanes of float32 where AVX-512 is compiled in
// (-march=native, at install time), 8 otherwise; the widenings and the horizontal sum are
// spelled in intrinsics where GCC's generic forms go lane by lane.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include <immintrin.h>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

#ifdef __AVX512F__
constexpr int kLanes = 16;
constexpr int kTokenTile = 4;  // tokens per register tile (4 rows x 4 tokens: 16 of 32 zmm)
#else
constexpr int kLanes = 8;
constexpr int kTokenTile = 2;  // 4 rows x 2 tokens: 8 of 16 ymm
#endif
constexpr int kRowTile = 4;  // output rows per register tile
constexpr int64_t kPrefetchRows = 2 * kRowTile;  // how far ahead the weights are prefetched

typedef float fvec __attribute__((vector_size(kLanes * 4)));
typedef int32_t ivec __attribute__((vector_size(kLanes * 4)));

inline fvec load(const float* p) {
  fvec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline fvec splat(float s) { return fvec{} + s; }

inline float sum(fvec v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps((__m512)v);
#else
  float total = 0.0f;
  for (int i = 0; i < kLanes; ++i) total += v[i];
  return total;
#endif
}

// kLanes int8 weights as float32. (GCC's __builtin_convertvector widens int8 to float
// one lane at a time, so the widening is spelled out.)
inline fvec widen(const int8_t* p) {
#if defined(__AVX512F__)
  return (fvec)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX2__)
  return (fvec)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  fvec v;
  for (int i = 0; i < kLanes; ++i) v[i] = p[i];
  return v;
#endif
}

// kLanes bfloat16 weights as float32: a bfloat16 is a float32's upper half.
inline fvec widen(const uint16_t* p) {
#if defined(__AVX512F__)
  __m512i bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
  return (fvec)_mm512_castsi512_ps(bits);
#elif defined(__AVX2__)
  __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
  return (fvec)_mm256_castsi256_ps(bits);
#else
  fvec v;
  for (int i = 0; i < kLanes; ++i) {
    uint32_t bits = uint32_t(p[i]) << 16;
    std::memcpy(&v[i], &bits, 4);
  }
  return v;
#endif
}

// Runs body(chunk) for chunk in [0, chunks) on the calling thread and XLA's intra-op pool.
// Helpers claim chunks from a shared counter, so the caller waits only for chunks a helper
// actually took: a helper the pool starts late finds none left and never touches `body`.
// (Workers of the kernels' own that spin between calls, so as to join each call at once,
// measured slower: on a small CPU they take cores from XLA's threads.)
template <typename Body>
void parallel_for(ffi::ThreadPool& pool, int64_t chunks, const Body& body) {
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), chunks) - 1;
  if (helpers <= 0) {
    for (int64_t chunk = 0; chunk < chunks; ++chunk) body(chunk);
    return;
  }
  struct Claims {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> busy{0};
  };
  auto claims = std::make_shared<Claims>();
  auto run = [claims, chunks, &body] {
    claims->busy.fetch_add(1);
    for (int64_t chunk; (chunk = claims->next.fetch_add(1)) < chunks;) body(chunk);
    claims->busy.fetch_sub(1);
  };
  for (int64_t helper = 0; helper < helpers; ++helper) pool.Schedule(decltype(run)(run));
  for (int64_t chunk; (chunk = claims->next.fetch_add(1)) < chunks;) body(chunk);
  while (claims->busy.load() > 0) std::this_thread::yield();
}

// ---------------------------------------------------------------------------------------
// y [tokens, n] = x [tokens, k] times a weight [n, k]: int8 with a float32 scale per group
// of `group` inputs of each row (engine/device/weights.py Int8Weight), or bfloat16.

struct Int8Rows {
  const int8_t* values;  // [n, k]
  const float* scales;   // [n, k / group]
  int64_t k, group;

  float scale(int64_t row, int64_t g) const { return scales[row * (k / group) + g]; }
  fvec at(int64_t row, int64_t i) const { return widen(values + row * k + i); }
  static constexpr int64_t kLineElements = 64;  // a cache line of int8
  void prefetch(int64_t row, int64_t i) const { __builtin_prefetch(values + row * k + i); }
};

struct Bf16Rows {
  const uint16_t* values;  // [n, k]
  int64_t k, group;        // group == k: one implicit scale of 1 per row

  float scale(int64_t, int64_t) const { return 1.0f; }
  fvec at(int64_t row, int64_t i) const { return widen(values + row * k + i); }
  static constexpr int64_t kLineElements = 32;  // a cache line of bfloat16
  void prefetch(int64_t row, int64_t i) const { __builtin_prefetch(values + row * k + i); }
};

// kRowTile rows from `row` times TT tokens from `token`, widening the weights in registers:
// the form for few tokens, where the product is bound by reading the weights.
template <int TT, typename Rows>
void tile_in_registers(const Rows& w, const float* x, int64_t n, int64_t row, int64_t token, float* y) {
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
    for (int r = 0; r < kRowTile; ++r)
      for (int64_t i = 0; i < w.k; i += kLanes) {
        fvec weight = w.at(row + r, i) * splat(w.scale(row + r, i / w.group));
        std::memcpy(buffer.data() + r * w.k + i, &weight, sizeof weight);
      }
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

constexpr int64_t kRowsPerChunk = 64;  // output rows a thread takes at a time

template <typename Rows>
void matmul(ffi::ThreadPool& pool, const Rows& w, const float* x, int64_t tokens, int64_t n, float* y) {
  const int64_t chunks = (n + kRowsPerChunk - 1) / kRowsPerChunk;
  parallel_for(pool, chunks, [&](int64_t chunk) {
    std::vector<float> buffer;
    const int64_t end = std::min(n, (chunk + 1) * kRowsPerChunk);
    for (int64_t row = chunk * kRowsPerChunk; row < end; row += kRowTile)
      rows_times_tokens(w, x, tokens, n, row, y, buffer);
  });
}

// A weight's matrix: the last two dimensions; a leading one is the layers of a stack, of
// which `layer` is read in place (a scan over layers would otherwise copy each one out).
template <typename Dims>
int64_t clamp_layer(const Dims& dims, int32_t layer) {
  if (dims.size() < 3) return 0;
  return std::clamp<int64_t>(layer, 0, dims[0] - 1);
}

ffi::Error check_shapes(int64_t k, int64_t n, int64_t k_weight, int64_t group) {
  if (k != k_weight) return ffi::Error::InvalidArgument("flint_linear: x and weight disagree on inputs");
  if (n % kRowTile != 0 || k % kLanes != 0 || group % kLanes != 0 || k % group != 0)
    return ffi::Error::InvalidArgument("flint_linear: shape not served by the native kernel");
  return ffi::Error::Success();
}

ffi::Error LinearInt8(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> values,
                      ffi::Buffer<ffi::F32> scales, ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  auto dims = values.dimensions();
  auto scale_dims = scales.dimensions();
  const int64_t tokens = x.dimensions()[0], k = x.dimensions()[1];
  const int64_t n = dims[dims.size() - 2], k_weight = dims[dims.size() - 1];
  const int64_t groups = scale_dims[scale_dims.size() - 1];
  if (groups <= 0 || k_weight % groups != 0) return ffi::Error::InvalidArgument("flint_linear: bad scales");
  const int64_t group = k_weight / groups;
  if (auto error = check_shapes(k, n, k_weight, group); error.failure()) return error;
  const int64_t index = clamp_layer(dims, layer.typed_data()[0]);
  Int8Rows w{values.typed_data() + index * n * k, scales.typed_data() + index * n * groups, k, group};
  matmul(pool, w, x.typed_data(), tokens, n, y->typed_data());
  return ffi::Error::Success();
}

ffi::Error LinearBf16(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::BF16> values,
                      ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  auto dims = values.dimensions();
  const int64_t tokens = x.dimensions()[0], k = x.dimensions()[1];
  const int64_t n = dims[dims.size() - 2], k_weight = dims[dims.size() - 1];
  if (auto error = check_shapes(k, n, k_weight, k_weight); error.failure()) return error;
  const int64_t index = clamp_layer(dims, layer.typed_data()[0]);
  Bf16Rows w{reinterpret_cast<const uint16_t*>(values.typed_data()) + index * n * k, k, k};
  matmul(pool, w, x.typed_data(), tokens, n, y->typed_data());
  return ffi::Error::Success();
}

// ---------------------------------------------------------------------------------------
// Attention of decode tokens to their cached context, read page by page in place: the
// online-softmax state (max, normaliser, weighted values) over the cached keys only, which
// the caller merges with the step's own keys (engine/device/attention/reference.py).

struct CacheView {
  const float* k;  // [pages, page_size, kv_heads, d] of one layer
  const float* v;
  int64_t pages, page_size, kv_heads, d;

  int64_t offset(int64_t page, int64_t slot, int64_t head) const {
    return ((page * page_size + slot) * kv_heads + head) * d;
  }
};

constexpr int64_t kMaxPageSize = 256;

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

// One (token, KV head): each of its `group` queries against the first `context` cached keys
// of `table`, a page at a time, the output kept in registers (DV vectors of head_dim).
template <int DV>
void attend_one(const CacheView& cache, const float* q, const int32_t* table, int64_t table_len, int64_t context,
                int64_t head, int64_t group, float* m, float* l, float* acc) {
  constexpr int64_t d = DV * kLanes;
  const int64_t page_size = cache.page_size;
  const int64_t num_pages = std::min(table_len, (context + page_size - 1) / page_size);
  alignas(64) float scores[kMaxPageSize + kLanes];
  for (int64_t g = 0; g < group; ++g) {
    fvec query[DV], out[DV] = {};
    for (int i = 0; i < DV; ++i) query[i] = load(q + g * d + i * kLanes);
    float running_max = -std::numeric_limits<float>::infinity(), normaliser = 0.0f;
    for (int64_t j = 0; j < num_pages; ++j) {
      int64_t page = table[j];
      if (page < 0 || page >= cache.pages) page = 0;  // the null page: never out of bounds
      const int64_t keys = std::min(page_size, context - j * page_size);
      float block_max = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < keys; ++s) {
        const float* key = cache.k + cache.offset(page, s, head);
        fvec partial = query[0] * load(key);
        for (int i = 1; i < DV; ++i) partial += query[i] * load(key + i * kLanes);
        scores[s] = sum(partial);
        block_max = std::max(block_max, scores[s]);
      }
      for (int64_t s = keys; s < ((keys + kLanes - 1) / kLanes) * kLanes; ++s)
        scores[s] = -std::numeric_limits<float>::infinity();  // whole vectors below; exp gives 0
      const float new_max = std::max(running_max, block_max);
      const float rescale = std::exp(running_max - new_max);  // 0 at the first page (-inf)
      fvec total{};
      for (int64_t s = 0; s < keys; s += kLanes) {
        const fvec p = exp_lanes(load(scores + s) - splat(new_max));
        std::memcpy(scores + s, &p, sizeof p);
        total += p;
      }
      for (int i = 0; i < DV; ++i) out[i] *= splat(rescale);
      for (int64_t s = 0; s < keys; ++s) {
        const float* value = cache.v + cache.offset(page, s, head);
        const fvec p = splat(scores[s]);
        for (int i = 0; i < DV; ++i) out[i] += p * load(value + i * kLanes);
      }
      normaliser = normaliser * rescale + sum(total);
      running_max = new_max;
    }
    m[g] = running_max;
    l[g] = normaliser;
    for (int i = 0; i < DV; ++i) std::memcpy(acc + g * d + i * kLanes, &out[i], sizeof out[i]);
  }
}

using AttendOne = void (*)(const CacheView&, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                           float*, float*, float*);

AttendOne attend_one_for(int64_t head_dim) {
  switch (head_dim) {
    case 32: return attend_one<32 / kLanes>;
    case 64: return attend_one<64 / kLanes>;
    case 128: return attend_one<128 / kLanes>;
    case 256: return attend_one<256 / kLanes>;
    default: return nullptr;
  }
}

ffi::Error DecodeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k_cache,
                           ffi::Buffer<ffi::F32> v_cache, ffi::Buffer<ffi::S32> layer, ffi::Buffer<ffi::S32> tables,
                           ffi::Buffer<ffi::S32> context_lens, ffi::ResultBuffer<ffi::F32> m,
                           ffi::ResultBuffer<ffi::F32> l, ffi::ResultBuffer<ffi::F32> acc) {
  auto qd = q.dimensions();      // [tokens, kv_heads, group, d]
  auto cd = k_cache.dimensions();  // [layers, pages, page_size, kv_heads, d]
  const int64_t tokens = qd[0], kv_heads = qd[1], group = qd[2], d = qd[3];
  if (cd.size() != 5 || cd[3] != kv_heads || cd[4] != d)
    return ffi::Error::InvalidArgument("flint_decode_attention: cache and queries disagree");
  const AttendOne attend = attend_one_for(d);
  if (attend == nullptr || cd[2] > kMaxPageSize)
    return ffi::Error::InvalidArgument("flint_decode_attention: head_dim or page size not served");
  const int64_t layer_index = std::clamp<int64_t>(layer.typed_data()[0], 0, cd[0] - 1);
  const int64_t layer_size = cd[1] * cd[2] * cd[3] * cd[4];
  CacheView cache{k_cache.typed_data() + layer_index * layer_size, v_cache.typed_data() + layer_index * layer_size,
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

XLA_FFI_DEFINE_HANDLER_SYMBOL(FlintLinearInt8, LinearInt8,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(FlintLinearBf16, LinearBf16,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(FlintDecodeAttention, DecodeAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

// The library is a Python module (setup.py builds it as one): `targets()` gives each
// kernel's FFI handler as a capsule, for jax.ffi.register_ffi_target.
#include <Python.h>

static PyObject* Targets(PyObject*, PyObject*) {
  PyObject* targets = PyDict_New();
  const std::pair<const char*, XLA_FFI_Handler*> handlers[] = {
      {"flint_linear_int8", FlintLinearInt8},
      {"flint_linear_bf16", FlintLinearBf16},
      {"flint_decode_attention", FlintDecodeAttention},
  };
  for (const auto& [name, handler] : handlers) {
    PyObject* capsule = PyCapsule_New(reinterpret_cast<void*>(handler), nullptr, nullptr);
    if (capsule == nullptr || PyDict_SetItemString(targets, name, capsule) != 0) {
      Py_XDECREF(capsule);
      Py_DECREF(targets);
      return nullptr;
    }
    Py_DECREF(capsule);
  }
  return targets;
}

static PyMethodDef kMethods[] = {
    {"targets", Targets, METH_NOARGS, "The kernels' FFI handlers by target name, as capsules."},
    {nullptr, nullptr, 0, nullptr},
};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_cpu_kernels", nullptr, -1, kMethods};

PyMODINIT_FUNC PyInit__cpu_kernels(void) { return PyModule_Create(&kModule); }
