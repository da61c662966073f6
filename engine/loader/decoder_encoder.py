"""Hugging Face decoder checkpoints of a served family (engine/models/) served as encoders
(engine/models/decoder_encoder.py):

- an embedder pools as its sentence-transformers `modules.json` says (Qwen3-Embedding and
  gte-Qwen2: the last token, normalised), or, without one, the last token normalised (what
  vLLM assumes of a decoder embedder); it is read without the head, which it never uses;
- a reranker (`--rerank-model`, or a config.json naming `classifier_from_token` as vLLM's
  overrides do) answers yes or no to Qwen3-Reranker's prompt (engine/text/rerank_prompt.py):
  its score is the probability of the second named token against the first ("no", "yes").

An embedding checkpoint saved from the bare model (`Qwen3Model`: tensors without `model.`,
no head) is read as its causal LM (loader/hf.py takes either naming).
"""

from __future__ import annotations

from engine.loader.encoder_checkpoint import CheckpointFiles, EncoderCheckpoint, matryoshka, max_seq_length
from engine.loader.hf import config_from_hf, load_hf_params
from engine.models import FAMILIES, family_for_hf
from engine.models.bert import HF_ARCHITECTURES
from engine.models.decoder_encoder import YesNoHead, decoder_encoder
from engine.models.pooling import Pooling, sentence_transformers_pooling
from engine.text.rerank_prompt import YesNoPrompt
from engine.text.tokenizer import Tokenizer

# The most tokens a text may have: a row's attention is [tokens, tokens] a head, and the
# runner compiles a bucket up to it (engine/device/encoder_runner.py).
DECODER_MAX_TOKENS = 2048
ANSWER_TOKENS = ("no", "yes")  # Qwen3-Reranker's


def causal_lm(architecture: str) -> str:
    """`Qwen3Model` -> `Qwen3ForCausalLM`: the bare model of a served causal LM is read as it."""
    named = architecture.removesuffix("Model") + "ForCausalLM"
    served = any(named in family.hf_architectures for family in FAMILIES)
    return named if architecture.endswith("Model") and served else architecture


def load_decoder_encoder(files: CheckpointFiles, config_json: dict, model_id: str,
                         task: str | None) -> EncoderCheckpoint:
    """The decoder checkpoint in `files` (a folder) as an embedder or a reranker (`task`
    "rerank", or config.json's `classifier_from_token`)."""
    if not files.path.is_dir():
        raise ValueError(f"{files.path}: a decoder checkpoint is read from a folder, not a zip")
    architectures = [causal_lm(name) for name in config_json.get("architectures") or []]
    try:
        family_for_hf(architectures)
    except ValueError as error:
        raise ValueError(f"{files.path}: {error}; or an encoder, {', '.join(HF_ARCHITECTURES)}") from None
    config_json = {**config_json, "architectures": architectures}
    config = config_from_hf(config_json)
    tokenizer = Tokenizer.from_hf_directory(files.path)
    limit = max_seq_length(files, min(config.max_position_embeddings, DECODER_MAX_TOKENS))
    common = dict(id=model_id, tokenizer=tokenizer, max_tokens=limit)
    if task == "rerank" or "classifier_from_token" in config_json:
        head = YesNoHead(*answer_ids(config_json, tokenizer))
        forward, weights = decoder_encoder(config, load_hf_params(files.path, config), head=head)
        return EncoderCheckpoint(config=config, weights=weights, forward=forward, task="rerank",
                                 pair_prompt=YesNoPrompt(tokenizer), **common)
    config = config.replace(tie_word_embeddings=True)  # the head is never read: an embedder has none to read
    pooling = (sentence_transformers_pooling(files.read_json("modules.json"), files.read_json)
               if files.exists("modules.json") else Pooling(mode="last", normalize=True))
    forward, weights = decoder_encoder(config, load_hf_params(files.path, config), pooling=pooling)
    return EncoderCheckpoint(config=config, weights=weights, forward=forward, task="embed", pooling=pooling,
                             matryoshka=matryoshka(config_json), **common)


def answer_ids(config_json: dict, tokenizer: Tokenizer) -> tuple[int, int]:
    """The ids of the "no" and "yes" tokens (config.json's `classifier_from_token` where it
    names them); ValueError naming one the vocabulary lacks."""
    tokens = config_json.get("classifier_from_token") or ANSWER_TOKENS
    if len(tokens) != 2:
        raise ValueError(f"classifier_from_token must name two tokens (no, yes), not {tokens}")
    ids = [tokenizer.token_to_id(token) for token in tokens]
    missing = [token for token, token_id in zip(tokens, ids) if token_id is None]
    if missing:
        raise ValueError(f"a yes/no reranker's vocabulary lacks the token {missing[0]!r}")
    return ids[0], ids[1]
