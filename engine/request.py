"""What a caller gives the engine (Request, SamplingParams) and what it gets back (RequestOutput)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    """Per-request generation settings; each becomes one row of the fused sampling step."""

    temperature: float = 1.0  # 0 means greedy
    seed: int | None = None  # None: the engine picks one and reports it
    max_tokens: int = 16  # most tokens to generate
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()  # end generation besides the model's EOS tokens
    # Distribution shaping (off at these defaults).
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0  # relative to the top token's probability
    typical_p: float = 1.0
    xtc_threshold: float = 0.1
    xtc_probability: float = 0.0
    # Penalties: frequency and presence over generated tokens (OpenAI), repetition over
    # prompt and generated tokens (HF / Keskar).
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    # Biases and bans.
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias in -100..100)
    bad_word_tokens: tuple[tuple[int, ...], ...] = ()  # phrases whose last token is banned after the rest
    no_repeat_ngram_size: int = 0
    # Length floors: EOS and stop tokens are banned until reached.
    min_tokens: int = 0
    min_total_tokens: int = 0
    # Mirostat v2 (off when the target is 0).
    mirostat_target: float = 0.0
    mirostat_lr: float = 0.1
    # Friendli's forced_output_tokens: the first outputs, whatever the model says.
    forced_output_tokens: tuple[int, ...] = ()
    logprobs: int | None = None  # top alternatives per sampled token (0-20); None: no logprobs
    # Logprobs of the prompt's tokens (echo, lm-eval's loglikelihood): top alternatives per
    # token (0-20), None: none. Such a prompt is computed in full, not read from the prefix cache.
    prompt_logprobs: int | None = None


SEED_MODULUS = 2**31 - 1


def choice_seeds(seed: int | list[int] | None, n: int, draw) -> list[int]:
    """One seed per choice of an n-choice request.

    A list (Friendli) gives each choice its own seed and must have n entries. A single seed
    gives choice i the seed derived from (seed, i): distinct and reproducible streams, the
    first equal to a one-choice request's. None draws each choice's seed with `draw()`.
    """
    if isinstance(seed, list):
        if len(seed) != n:
            raise ValueError(f"seed lists one seed per choice: expected {n}, got {len(seed)}")
        return list(seed)
    if seed is None:
        return [draw() for _ in range(n)]
    return [seed] + [hash((seed, i)) % SEED_MODULUS for i in range(1, n)]


@dataclass
class Request:
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log probabilities: under the model, and under the processed
    sampling distribution (Fireworks' logprob and sampling_logprob), with its rank and the
    most likely alternatives under the model (as many as the request asked for)."""

    token_id: int
    logprob: float
    sampling_logprob: float
    rank: int
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class PromptTokenLogprob:
    """A prompt token's log probability given the tokens before it."""

    token_id: int
    logprob: float
    rank: int
    is_greedy: bool  # it is the model's most likely next token (lm-eval's is_greedy)
    top: tuple[tuple[int, float], ...]


@dataclass
class RequestOutput:
    """One step's news for one request: the tokens it gained, and whether it finished."""

    request_id: str
    new_token_ids: list[int]
    text: str  # the text of new_token_ids, held back while it ends inside a UTF-8 character
    finish_reason: str | None  # "stop", "length", "abort", or None while running
    num_prompt_tokens: int
    num_cached_tokens: int  # prompt tokens served from the prefix cache
    num_output_tokens: int  # all generated so far
    seed: int = 0  # the seed actually used
    logprobs: list[TokenLogprob] | None = None  # one per new token, when the request asked
    # With the first output of a request that asked: one entry per prompt token after the
    # first (whose probability has no context to condition on).
    prompt_logprobs: list[PromptTokenLogprob] | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
