// Flint's native attention among a step's own tokens, called from jitted JAX programs through
// XLA's FFI (engine/device/attention/native_cpu.py attend_to_step): each token against the
// earlier tokens of its row in the step, and itself.
//
// The jnp reference scores every token of the step against every other and masks all but
// those: a bucket of 512 tokens holding four prompts of 128 computes sixteen times the scores
// it keeps, in broadcast products XLA's CPU backend runs slowly (about 450 of a 830 ms
// prefill step of SmolLM2). Here each token reads only the keys it sees, with the online
// softmax of attention.cc (softmax.h). The reference stays the definition:
// tests/engine/test_native_cpu.py compares the two.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "simd.h"
#include "softmax.h"

using namespace flint;

namespace {

// The step's own keys and values [tokens, kv_heads, d], float32; a block of keys starts at
// the token `first`.
struct StepView {
  using Key = float;
  using Value = float;
  const float* k;
  const float* v;
  int64_t kv_heads, d;

  int64_t offset(int64_t first, int64_t slot, int64_t head) const { return ((first + slot) * kv_heads + head) * d; }
};

// Where each token's run starts. The runner packs a row's tokens as one run of consecutive
// positions (engine/device/runner.py pack), so the keys a token sees, its row's at positions
// up to its own, are those from its run's start to itself. (Padding, row -1, makes runs of
// its own: each padding token sees at least itself, so no state comes out empty and the
// padding's outputs stay finite, as the reference's do.)
std::vector<int64_t> run_starts(const int32_t* rows, const int32_t* positions, int64_t tokens) {
  std::vector<int64_t> starts(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    const bool continues = t > 0 && rows[t] == rows[t - 1] && positions[t] == positions[t - 1] + 1;
    starts[t] = continues ? starts[t - 1] : t;
  }
  return starts;
}

ffi::Error StepAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                         ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::S32> positions, ffi::Buffer<ffi::S32> token_rows,
                         ffi::ResultBuffer<ffi::F32> m, ffi::ResultBuffer<ffi::F32> l,
                         ffi::ResultBuffer<ffi::F32> acc) {
  auto qd = q.dimensions();  // [tokens, kv_heads, group, d]
  auto kd = k.dimensions();  // [tokens, kv_heads, d]
  const int64_t tokens = qd[0], kv_heads = qd[1], group = qd[2], d = qd[3];
  if (kd.size() != 3 || kd[0] != tokens || kd[1] != kv_heads || kd[2] != d ||
      !std::equal(kd.begin(), kd.end(), v.dimensions().begin(), v.dimensions().end()))
    return ffi::Error::InvalidArgument("flint_step_attention: queries, keys and values disagree");
  const std::vector<int64_t> starts = run_starts(token_rows.typed_data(), positions.typed_data(), tokens);
  const StepView view{k.typed_data(), v.typed_data(), kv_heads, d};
  const bool served = with_head_dim(d, [&](auto vectors) {
    parallel_for(pool, tokens * kv_heads, [&](int64_t task) {
      const int64_t token = task / kv_heads, head = task % kv_heads, at = task * group;
      attend_group<decltype(vectors)::value>(
          view, q.typed_data() + at * d, head, group, m->typed_data() + at, l->typed_data() + at,
          acc->typed_data() + at * d, [&](auto&& fold) {
            for (int64_t first = starts[token]; first <= token; first += kMaxBlockKeys)
              fold(first, std::min(kMaxBlockKeys, token + 1 - first));
          });
    });
  });
  if (!served) return ffi::Error::InvalidArgument("flint_step_attention: head_dim not served");
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FlintStepAttention, StepAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
