"""tools/bench/embed.py (`tools/bench.py embed`): its sentences span the token range asked, and
Flint's side runs on a tiny embedder (sentence-transformers, the peer, is no dependency here)."""

from __future__ import annotations

import numpy as np
from tools.bench import cli, embed

from engine.loader.sentence_transformers import load_encoder
from tests.engine.bert_reference import write_sentence_transformer


def test_sentences_spread_over_the_token_range(tmp_path):
    write_sentence_transformer(tmp_path)
    tokenizer = load_encoder(tmp_path).tokenizer
    made = embed.sentences(tokenizer, 8, seed=1, low=10, high=40)
    counts = [len(tokenizer.encode(text)) for text in made]
    assert all(10 - 2 <= count <= 40 for count in counts) and counts[-1] - counts[0] >= 20


def test_flint_alone_prints_a_rate_per_batch(tmp_path, capsys):
    write_sentence_transformer(tmp_path / "embedder")
    assert cli.main(["embed", "--model", str(tmp_path / "embedder"), "--batches", "1", "4", "--repeats", "1"]) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("| 1 |") or line.startswith("| 4 |")]
    assert len(rows) == 2 and all(float(row.split("|")[2]) > 0 for row in rows)


def test_the_server_table_compares_rates_and_vectors(capsys):
    from tools.bench import embed_servers

    vectors = np.eye(2, 4)
    results = {"Flint": ({1: 0.5, 8: 1.0}, vectors), "llama-server": ({1: 1.0, 8: 2.0}, vectors * 3),
               "version": "version: 1 (abc)"}
    embed_servers.print_server_table([1, 8], results)
    printed = capsys.readouterr().out
    assert "| 1 | 2.0 | 1.0 | 2.00x |" in printed and "| 8 | 8.0 | 4.0 | 2.00x |" in printed
    assert "least cosine between the two servers' vectors: 1.000000" in printed


def test_llama_server_gets_whole_sentences_in_a_physical_batch(tmp_path):
    from tools.bench import embed_servers

    command = embed_servers.llama_command(tmp_path / "llama-server", tmp_path / "m.gguf", 1, 32, 600, "mean")
    def flags(name: str) -> str:
        return command[command.index(name) + 1]

    assert flags("-ub") == flags("-b") == "1024" and int(flags("-c")) >= 32 * 600 and flags("--pooling") == "mean"
