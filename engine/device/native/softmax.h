// The native attention's parts (attention.cc): keys and values widened as they are read, a
// vectorized exp, and the online softmax of one query folded a page of keys at a time.

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

// Folds the first `keys` keys of `page` (KV head `head`) into `state` for `query`;
// `scores` holds a page of scores and whole vectors past it. `Cache` says where a key and
// a value lie (`k`, `v`, `offset(page, slot, head)`) and their types (`Key`, `Value`).
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

constexpr int64_t kMaxBlockKeys = 256;  // the most keys fold_page takes at once

// Each of `group` queries q [group, DV x kLanes] of one (token, KV head) against the keys
// `blocks` names: blocks(fold) calls fold(page, keys) for each block of keys in turn. The
// softmax state goes to m, l [group] and acc [group, DV x kLanes].
template <int DV, typename Cache, typename Blocks>
void attend_group(const Cache& cache, const float* q, int64_t head, int64_t group, float* m, float* l, float* acc,
                  const Blocks& blocks) {
  constexpr int64_t d = DV * kLanes;
  alignas(64) float scores[kMaxBlockKeys + kLanes];
  for (int64_t g = 0; g < group; ++g) {
    fvec query[DV];
    for (int i = 0; i < DV; ++i) query[i] = load(q + g * d + i * kLanes) * splat(kWidenedScale<typename Cache::Key>);
    SoftmaxState<DV> state;
    blocks([&](int64_t page, int64_t keys) { fold_page(cache, query, page, keys, head, scores, state); });
    m[g] = state.running_max;
    l[g] = state.normaliser;
    for (int i = 0; i < DV; ++i) {
      const fvec weighted = state.out[i] * splat(kWidenedScale<typename Cache::Value>);
      std::memcpy(acc + g * d + i * kLanes, &weighted, sizeof weighted);
    }
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
