"""Engine configs that several test modules share.

An engine's compiled programs depend on every shape its config sets (sequences, token
budget, pages, model length, embedding rows), and compiling a tiny engine's two essential
buckets costs about 15 s of CPU, most of it in the sampler. Modules whose tests need no
shape of their own build their engines from one of these, so that every engine after the
first loads its programs from the session's compilation cache (tests/conftest.py).
"""

from __future__ import annotations

from engine.config import EngineConfig

# Room for 32 sequences of up to 256 tokens with no preemption (test_engine_tiny's CRAMPED
# is the same with too few pages).
ROOMY = EngineConfig(max_model_len=256, max_num_seqs=32, max_num_batched_tokens=128, page_size=4, num_pages=2400)
# 16 sequences of up to 128 tokens: beams and concurrent streams.
SIXTEEN_SEQUENCES = EngineConfig(max_model_len=128, max_num_seqs=16, max_num_batched_tokens=64, page_size=4,
                                 num_pages=300)
# A few sequences, prompts in 32-token chunks, two replaced embeddings a step at most.
FOUR_SEQUENCES = EngineConfig(max_model_len=128, max_num_seqs=4, max_num_batched_tokens=32, page_size=4,
                              num_pages=200, max_embedding_rows=2)
