// The native attention's parts (attention.cc): keys and values widened as they are read, a
// vectorized exp, and the online softmax of a token's queries folded a block of keys at a time.

#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "simd.h"

namespace flint {

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

constexpr int64_t kMaxBlockKeys = 256;  // the most keys a page may hold (its buffers' size)

// Keys and values of one KV head (a page, or a block of pages) widened to float32
// (load_cached's lanes), once for every query that reads them: the queries of a token's group, and of the tokens of a
// prompt chunk, which share their pages. Widening is exact, so a query's sums are the same
// bits whichever page buffer it reads.
struct WidenedKeys {
  float* keys;    // [keys, d]
  float* values;  // [keys, d]
};

template <int DV, typename Cache>
void widen_page(const Cache& cache, int64_t page, int64_t keys, int64_t head, const WidenedKeys& out) {
  constexpr int64_t d = DV * kLanes;
  for (int64_t s = 0; s < keys; ++s) {
    const auto* key = cache.k + cache.offset(page, s, head);
    const auto* value = cache.v + cache.offset(page, s, head);
    for (int i = 0; i < DV; ++i) {
      const fvec k = load_cached(key + i * kLanes), v = load_cached(value + i * kLanes);
      std::memcpy(out.keys + s * d + i * kLanes, &k, sizeof k);
      std::memcpy(out.values + s * d + i * kLanes, &v, sizeof v);
    }
  }
}

// kLanes keys' scores (`count` of them, the rest -inf), one a lane, for each of NQ queries:
// each key read once for all of them, its lanes of products summed across by lane_sums for
// kLanes keys at a time rather than one horizontal sum a key.
template <int DV, int NQ>
void scores_of(const float* keys, const fvec* queries, int64_t count, fvec* scores) {
  constexpr int64_t d = DV * kLanes;
  fvec partial[NQ][kLanes];
  for (int s = 0; s < kLanes; ++s) {
    fvec key[DV];
    for (int i = 0; i < DV; ++i) key[i] = s < count ? load(keys + s * d + i * kLanes) : fvec{};
    for (int q = 0; q < NQ; ++q) {
      fvec p = queries[q * DV] * key[0];
      for (int i = 1; i < DV; ++i) p = fused_multiply_add(queries[q * DV + i], key[i], p);
      partial[q][s] = p;
    }
  }
  const ivec valid = lane_index() < ivec{} + int32_t(count);
  for (int q = 0; q < NQ; ++q) scores[q] = valid ? lane_sums(partial[q]) : splat(-std::numeric_limits<float>::infinity());
}

// Folds the first `keys` keys of a widened block into the states of NQ queries [NQ, DV] that
// see the same keys (a token's group); `scores` holds NQ blocks of scores, each
// kMaxBlockKeys + kLanes. A query's sums are the same bits whatever NQ it is folded among:
// the queries share loads, not sums.
template <int DV, int NQ>
void fold_block(const WidenedKeys& block, const fvec* queries, int64_t keys, float* scores, SoftmaxState<DV>* states) {
  constexpr int64_t d = DV * kLanes, stride = kMaxBlockKeys + kLanes;
  fvec largest[NQ];
  for (int q = 0; q < NQ; ++q) largest[q] = splat(-std::numeric_limits<float>::infinity());
  for (int64_t s = 0; s < keys; s += kLanes) {
    fvec vector[NQ];  // each query's scores of these kLanes keys
    scores_of<DV, NQ>(block.keys + s * d, queries, std::min<int64_t>(kLanes, keys - s), vector);
    for (int q = 0; q < NQ; ++q) {
      std::memcpy(scores + q * stride + s, &vector[q], sizeof vector[q]);
      largest[q] = largest[q] < vector[q] ? vector[q] : largest[q];
    }
  }
  fvec out[NQ][DV];
  for (int q = 0; q < NQ; ++q) {
    SoftmaxState<DV>& state = states[q];
    const float new_max = std::max(state.running_max, max_of(largest[q]));
    const float rescale = std::exp(state.running_max - new_max);  // 0 at the first page (-inf)
    fvec total{};
    for (int64_t s = 0; s < keys; s += kLanes) {
      const fvec p = exp_lanes(load(scores + q * stride + s) - splat(new_max));
      std::memcpy(scores + q * stride + s, &p, sizeof p);
      total += p;
    }
    for (int i = 0; i < DV; ++i) out[q][i] = state.out[i] * splat(rescale);
    state.normaliser = state.normaliser * rescale + sum(total);
    state.running_max = new_max;
  }
  // Each value read once for the NQ queries: NQ x DV independent sums, not DV.
  for (int64_t s = 0; s < keys; ++s) {
    const float* value = block.values + s * d;
    for (int i = 0; i < DV; ++i) {
      const fvec v = load(value + i * kLanes);
      for (int q = 0; q < NQ; ++q) out[q][i] = fused_multiply_add(splat(scores[q * stride + s]), v, out[q][i]);
    }
  }
  for (int q = 0; q < NQ; ++q)
    for (int i = 0; i < DV; ++i) states[q].out[i] = out[q][i];
}

// The most queries fold_block takes at once (more, for a group of more, in turns).
constexpr int kFoldQueries = 4;

// fold_block for `count` queries, in turns of up to kFoldQueries.
template <int DV>
void fold_queries(const WidenedKeys& block, const fvec* queries, int64_t count, int64_t keys, float* scores,
                  SoftmaxState<DV>* states) {
  for (int64_t first = 0; first < count; first += kFoldQueries) {
    const fvec* q = queries + first * DV;
    SoftmaxState<DV>* st = states + first;
    switch (std::min<int64_t>(kFoldQueries, count - first)) {
      case 1: fold_block<DV, 1>(block, q, keys, scores, st); break;
      case 2: fold_block<DV, 2>(block, q, keys, scores, st); break;
      case 3: fold_block<DV, 3>(block, q, keys, scores, st); break;
      default: fold_block<DV, 4>(block, q, keys, scores, st); break;
    }
  }
}

// A query of head_dim DV x kLanes as the folds take it: scaled by kWidenedScale of the
// keys' type (a float8 key is read 2^8 small).
template <int DV, typename Key>
void load_query(const float* q, fvec* query) {
  for (int i = 0; i < DV; ++i) query[i] = load(q + i * kLanes) * splat(kWidenedScale<Key>);
}

// A query's state out: m, l and acc [DV x kLanes], the weighted sum scaled back by
// kWidenedScale of the values' type.
template <int DV, typename Value>
void store_state(const SoftmaxState<DV>& state, float* m, float* l, float* acc) {
  *m = state.running_max;
  *l = state.normaliser;
  for (int i = 0; i < DV; ++i) {
    const fvec weighted = state.out[i] * splat(kWidenedScale<Value>);
    std::memcpy(acc + i * kLanes, &weighted, sizeof weighted);
  }
}

// body(std::integral_constant<int, DV>{}) for head_dim = DV x kLanes of 32, 64, 128 or 256,
// the head dims the attentions serve; false for another.
template <typename Body>
bool with_head_dim(int64_t head_dim, const Body& body) {
  switch (head_dim) {
    case 32: body(std::integral_constant<int, 32 / kLanes>{}); return true;
    case 64: body(std::integral_constant<int, 64 / kLanes>{}); return true;
    case 128: body(std::integral_constant<int, 128 / kLanes>{}); return true;
    case 256: body(std::integral_constant<int, 256 / kLanes>{}); return true;
    default: return false;
  }
}

}  // namespace flint
