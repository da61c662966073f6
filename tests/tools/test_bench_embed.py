"""tools/bench_embed.py (`tools/bench.py embed`): its sentences span the token range asked, and
Flint's side runs on a tiny embedder (sentence-transformers, the peer, is no dependency here)."""

from __future__ import annotations

from tools import bench, bench_embed

from engine.loader.sentence_transformers import load_encoder
from tests.engine.bert_reference import write_sentence_transformer


def test_sentences_spread_over_the_token_range(tmp_path):
    write_sentence_transformer(tmp_path)
    tokenizer = load_encoder(tmp_path).tokenizer
    made = bench_embed.sentences(tokenizer, 8, seed=1, low=10, high=40)
    counts = [len(tokenizer.encode(text)) for text in made]
    assert all(10 - 2 <= count <= 40 for count in counts) and counts[-1] - counts[0] >= 20


def test_flint_alone_prints_a_rate_per_batch(tmp_path, capsys):
    write_sentence_transformer(tmp_path / "embedder")
    assert bench.main(["embed", "--model", str(tmp_path / "embedder"), "--batches", "1", "4", "--repeats", "1"]) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("| 1 |") or line.startswith("| 4 |")]
    assert len(rows) == 2 and all(float(row.split("|")[2]) > 0 for row in rows)
