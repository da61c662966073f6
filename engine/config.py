"""Static configuration: ModelConfig (from the checkpoint) and EngineConfig (from the server).

Both are frozen and hashable so they can be passed to jit as static arguments.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

# Of the layers' weights (engine/device/weights.py, fp8.py); gguf: a GGUF file's own blocks
# (engine/loader/gguf_blocks.py), its other tensors as int8.
QUANTIZATIONS = ("none", "int8", "fp8", "gguf")
INTEGER_QUANTIZATIONS = ("int8", "gguf")  # served as Int8Weights (engine/device/integer_weight.py)
AUTO = "auto"  # chosen for the backend: quantization and dtype (engine/device/weights.py), attention
ATTENTIONS = (AUTO, "reference", "mosaic_gpu", "ragged_tpu", "native_cpu")  # engine/device/attention's implementations
CPU_KERNELS = (AUTO, "native", "jnp")  # engine/device/native: the native CPU kernels, or the jnp path
# The projections a LoRA adapter may adapt, by PEFT's module names (engine/device/lora.py).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MAX_LORA_RANK = 256
SCAN, UNROLLED = "scan", "unrolled"
# float8_e4m3fn: a byte per key and value; float8_values: keys in bfloat16, values in
# float8_e4m3fn (engine/device/kv_cache.py cache_dtypes). Read by the jnp reference and the
# native CPU attention only.
FLOAT8_KV, FLOAT8_VALUES = "float8_e4m3fn", "float8_values"
KV_CACHE_DTYPES = (AUTO, "float32", "bfloat16", FLOAT8_KV, FLOAT8_VALUES)
LAYER_LOOPS = (AUTO, SCAN, UNROLLED)  # the forward's loop over layers (engine/models/layers.py)
SPECULATIVE = ("none", "ngram")  # draft sources besides predictions (engine/host/speculation.py)


LLAMA3, LINEAR = "llama3", "linear"  # RoPE scaling kinds


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling: Llama 3's frequency-dependent kind (rope_type "llama3"), or
    every frequency divided by `factor` ("linear", Gemma 3's global layers)."""

    factor: float
    low_freq_factor: float = 0.0  # llama3 only
    high_freq_factor: float = 0.0  # llama3 only
    original_max_position_embeddings: int = 0  # llama3 only
    kind: str = LLAMA3


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a model, and the features of its family (engine/models/). Comes from the
    checkpoint's config or metadata."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # biases on the q, k and v projections (Qwen2)
    qk_norm: bool = False  # RMSNorm over each head of q and k before RoPE (Qwen3)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    family: str = "llama"  # the registry's key (engine/models/__init__.py): the forward pass and weight layout
    # Per layer: how many of the latest keys it attends to (0: all of them). Empty: every
    # layer attends to all. Mistral windows every layer; Gemma alternates windowed ("local")
    # and full ("global") layers.
    layer_windows: tuple[int, ...] = ()
    attn_logit_softcapping: float | None = None  # scores become cap * tanh(score / cap) (Gemma 2)
    final_logit_softcapping: float | None = None  # the same on the logits (Gemma 2)
    query_pre_attn_scalar: float | None = None  # attention scale is its -1/2 power; None: head_dim's (Gemma)
    rope_local_theta: float | None = None  # RoPE base of the windowed layers, unscaled (Gemma 3)
    # Mixture of experts (engine/models/moe.py): every layer's MLP is num_experts experts of
    # moe_intermediate_size, of which a router picks num_experts_per_tok per token.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = True  # the picked experts' weights renormalized to sum to one

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def routing_shape(self) -> tuple[int, int]:
        """(layers, experts per token) of a token's routing: the experts each layer picked
        (engine/models/moe.py); (0, 0) for a model without experts."""
        return (self.num_layers, self.num_experts_per_tok) if self.num_experts else (0, 0)

    def windowed(self, max_len: int) -> bool:
        """Whether some layer's window hides keys from a sequence of up to `max_len` tokens."""
        return any(0 < window < max_len for window in self.layer_windows)

    def shared_window(self, max_len: int) -> int:
        """The keys every layer sees behind a token, where each layer's window hides some of
        a `max_len` sequence (0 otherwise): pages before the widest window are never read
        again (engine/host/block_manager.py `release_unseen`)."""
        if self.layer_windows and all(0 < window < max_len for window in self.layer_windows):
            return max(self.layer_windows)
        return 0

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)


def default_token_buckets(max_num_batched_tokens: int) -> tuple[int, ...]:
    """1, then powers of two from 4 up to the per-step token budget (which is always one).

    A bucket of its own for one token matters: XLA's CPU backend runs a one-row matmul as a
    matrix-vector product, several times faster than the same weights against 2 to 8 rows,
    and single-stream decode is exactly that step. Between 2 and 4 tokens the cost hardly
    changes, so 2 gets no bucket."""
    buckets = [1]
    size = 4
    while buckets[-1] < max_num_batched_tokens:
        buckets.append(min(size, max_num_batched_tokens))
        size *= 2
    return tuple(buckets)


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs a model: cache size, batch limits, shape buckets, dtype, mesh."""

    max_model_len: int = 2048  # longest sequence (prompt + output) the engine accepts
    max_num_seqs: int = 64  # most sequences running at once
    max_num_batched_tokens: int = 512  # most tokens (prefill chunks + decodes) in one step
    page_size: int = 16  # tokens per KV-cache page
    num_pages: int = 1024  # pages in the KV cache, page 0 included (it is the null page)
    token_buckets: tuple[int, ...] = ()  # empty: default_token_buckets(max_num_batched_tokens)
    dtype: str = AUTO  # compute and cache dtype; auto: float32 on CPU, bfloat16 on GPUs (resolved in Engine)
    quantization: str = "none"  # "int8", "fp8", "gguf": the layer weights' (engine/device/weights.py); "auto" resolves in Engine
    # The KV cache's dtype: float32, bfloat16, or auto (engine/device/kv_cache.py kv_cache_dtype).
    kv_cache_dtype: str = AUTO
    mesh_shape: tuple[int, ...] = (1,)  # devices along the tensor-parallel axis
    attention: str = "auto"  # engine/device/attention: auto (a kernel on GPUs and TPUs), reference, mosaic_gpu or ragged_tpu
    layer_loop: str = "auto"  # engine/models/layers.py: auto (unrolled on GPUs, a scan elsewhere), scan or unrolled
    # engine/device/native: auto (the native kernels on a one-device CPU where they were built), native or jnp
    cpu_kernels: str = "auto"
    enable_prefix_caching: bool = True
    max_prefill_rows: int = 4  # rows of several tokens (prompt chunks) in one step (engine/device/attention/reference.py)
    max_decode_steps: int = 8  # decode steps one device call may run (engine/device/runner.py); 1: one per call
    overlap_steps: bool = True  # dispatch the next decode window before the last one's results are back
    speculative: str = "none"  # "ngram": draft tokens by prompt lookup (engine/host/speculation.py)
    num_speculative_tokens: int = 15  # most draft tokens (n-gram or predicted) checked per sequence and step
    # Input embeddings a step may replace (Friendli's embedding_to_replace): a fixed number of
    # rows keeps the batch's shape static; the scheduler splits prompt chunks to fit them.
    max_embedding_rows: int = 16
    seed: int = 0  # seeds the random seeds of unseeded requests
    # Seconds a session stays live after its last request: its freed cached pages are evicted
    # after every other free page until then (engine/host/sessions.py).
    session_ttl: float = 600.0
    # False: compile the step with XLA's backend (LLVM) optimizations off. On a CPU that
    # saves about 45% of a step's compile CPU and slows its run (SmolLM2's decode twice
    # as slow): for tiny models that compile more than they run, as in the engine tests.
    optimize_compiled_code: bool = True
    # LoRA adapters (engine/device/lora.py): device slots for this many adapters at once,
    # each of rank up to max_lora_rank, on these projections (PEFT's module names). 0
    # slots: no adapter, and a step compiled exactly as without LoRA.
    max_loras: int = 0
    max_lora_rank: int = 16
    lora_targets: tuple[str, ...] = LORA_TARGETS

    def __post_init__(self) -> None:
        if not self.token_buckets:
            buckets = default_token_buckets(self.max_num_batched_tokens)
            object.__setattr__(self, "token_buckets", buckets)
        if self.token_buckets[-1] < self.max_num_batched_tokens:
            raise ValueError("the largest token bucket must hold max_num_batched_tokens")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, not {self.attention!r}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, not {self.kv_cache_dtype!r}")
        if self.cpu_kernels not in CPU_KERNELS:
            raise ValueError(f"cpu_kernels must be one of {', '.join(CPU_KERNELS)}, not {self.cpu_kernels!r}")
        if self.layer_loop not in LAYER_LOOPS:
            raise ValueError(f"layer_loop must be one of {', '.join(LAYER_LOOPS)}, not {self.layer_loop!r}")
        if self.speculative not in SPECULATIVE:
            raise ValueError(f"speculative must be one of {', '.join(SPECULATIVE)}, not {self.speculative!r}")
        if self.num_speculative_tokens < 0:
            raise ValueError("num_speculative_tokens must not be negative")
        if self.max_prefill_rows < 1 or self.max_decode_steps < 1 or self.max_embedding_rows < 1:
            raise ValueError("max_prefill_rows, max_decode_steps and max_embedding_rows must be at least 1")
        if self.max_num_seqs > self.max_num_batched_tokens:
            raise ValueError("max_num_seqs must not exceed max_num_batched_tokens")
        if self.max_pages_per_seq > self.num_pages - 1:
            raise ValueError("the KV cache must hold at least one sequence of max_model_len tokens")
        if self.max_loras < 0 or not 1 <= self.max_lora_rank <= MAX_LORA_RANK:
            raise ValueError(f"max_loras must not be negative, and max_lora_rank must lie in [1, {MAX_LORA_RANK}]")
        if not self.lora_targets or set(self.lora_targets) - set(LORA_TARGETS):
            raise ValueError(f"lora_targets must name some of {', '.join(LORA_TARGETS)}")

    @property
    def compiler_options(self) -> dict | None:
        """XLA options for the step's compile: a quick one (what jax_disable_most_optimizations
        sets, for this program alone) when `optimize_compiled_code` is False."""
        if self.optimize_compiled_code:
            return None
        return {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}

    @property
    def max_pages_per_seq(self) -> int:
        return math.ceil(self.max_model_len / self.page_size)

    @property
    def max_num_rows(self) -> int:
        """Rows of logits a step may sample: every running sequence, and room for one
        sequence's draft (engine/verification.py) even when only one runs."""
        return min(max(self.max_num_seqs, 1 + self.num_speculative_tokens), self.max_num_batched_tokens)

    def seq_bucket(self, token_bucket: int) -> int:
        """Rows of logits computed for a step of `token_bucket` tokens."""
        return min(token_bucket, self.max_num_rows)

    def token_bucket(self, num_tokens: int) -> int:
        """The smallest bucket that holds `num_tokens`."""
        for bucket in self.token_buckets:
            if bucket >= num_tokens:
                return bucket
        raise ValueError(f"{num_tokens} tokens exceed the largest bucket {self.token_buckets[-1]}")


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_num_pages(max_model_len: int, max_num_seqs: int, page_size: int) -> int:
    """Room for every sequence at an eighth of max_model_len, and always for one full-length
    sequence; plus the null page.

    At the defaults that is 64 sequences of 256 tokens (a chat turn's prompt and answer;
    the engine benchmark's 128 + 128), 16,384 tokens and 755 MB of float32 cache for
    SmolLM2, where a quarter held 1.5 GB, most of the server's memory, mostly unused.
    Requests are rarely all long, and when pages run out the scheduler preempts the newest
    sequence, to be recomputed later."""
    pages_per_seq = -(-max_model_len // page_size)
    return max(pages_per_seq, max_num_seqs * pages_per_seq // 8) + 1
