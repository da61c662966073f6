"""engine/text/tokenizer.py and engine/text/chat_template.py: tokenizers from GGUF metadata and from
Hugging Face directories, incremental detokenizing, chat templates in a sandbox.

Expectations come from outside the code under test: token spellings read straight from the
GGUF's vocabulary, SmolLM2's original tokenizer.json pipeline rebuilt here from the same
vocabulary, and tiny tokenizers trained in the test with the `tokenizers` library.
"""

from __future__ import annotations

import datetime
import json

import gguf
import jinja2
import pytest
import tokenizers
from jinja2.sandbox import SecurityError
from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors, trainers

from engine.loader.source import embedded_gguf_path
from engine.text.chat_template import ChatTemplate, ChatTemplateError, MissingChatTemplateError
from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.tokenizer import Tokenizer

TEXTS = [
    "Hello world",
    " hello",
    "hello",
    "The year 2024 had 366 days; π ≈ 3.14159.",
    "naïve café, Ünïcödé — ½ ² ①",
    "日本語のテキストと中文文本，한국어 텍스트",
    "emoji 🎉👍🏽 and a family 👨‍👩‍👧 and flags 🇫🇷",
    "def f(x):\n    return x  +  1\n\n\n# done",
    "  \t\n  spaces   and\ttabs \r\n",
    "I'm sure you're right, THEY'LL see",
    "<|im_start|>user\nhi<|im_end|>",
    "x" * 40 + " " + "ab" * 20,
]
MULTIBYTE = "日本語 🎉👍🏽 ok, 中文 and émoji 🇫🇷!"


@pytest.fixture(scope="module")
def smollm_reader():
    return gguf.GGUFReader(str(embedded_gguf_path()))  # ~5 s: parsed once for the module


@pytest.fixture(scope="module")
def smollm(smollm_reader):
    return Tokenizer.from_gguf(smollm_reader)


@pytest.fixture(scope="module")
def vocab(smollm_reader):
    return smollm_reader.fields["tokenizer.ggml.tokens"].contents()


@pytest.fixture(scope="module")
def smollm_original(smollm_reader, vocab):
    """SmolLM2's tokenizer.json pipeline (Digits then ByteLevel with its regex), same vocab."""
    merges = smollm_reader.fields["tokenizer.ggml.merges"].contents()
    original = tokenizers.Tokenizer(models.BPE(
        vocab={t: i for i, t in enumerate(vocab)}, merges=[tuple(m.split(" ")) for m in merges]
    ))
    original.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    original.decoder = decoders.ByteLevel()
    types = smollm_reader.fields["tokenizer.ggml.token_type"].contents()
    original.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, k in zip(vocab, types) if k == 3]
    )
    return original


# --- the embedded SmolLM2 GGUF ---------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_smollm_round_trips_and_matches_the_original_pipeline(smollm, smollm_original, text):
    ids = smollm.encode(text)
    assert ids == smollm_original.encode(text).ids
    assert smollm.decode(ids) == text


@pytest.mark.parametrize("text", TEXTS)
def test_smollm_token_bytes_join_to_the_text(smollm, text):
    # Each token's bytes, even a piece of a character, concatenate to the UTF-8 text.
    ids = smollm.encode(text, add_special_tokens=False)
    assert b"".join(smollm.token_bytes(i) for i in ids) == text.encode("utf-8")
    assert smollm.token_bytes(smollm.vocab_size) is None


def test_byte_fallback_vocabularies_give_the_byte(tmp_path):
    # A SentencePiece-style vocabulary spells raw bytes as <0xNN>.
    vocab = {"<unk>": 0, "<0x0A>": 1, "▁hi": 2}
    tok = Tokenizer(tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>")))
    assert tok.token_bytes(1) == b"\n"


def test_smollm_splits_digits_and_keeps_leading_spaces(smollm, vocab):
    assert smollm.encode("2024") == [vocab.index(d) for d in "2024"]
    assert smollm.encode(" hello") == [vocab.index("Ġhello")]
    assert smollm.encode("hello") == [vocab.index("hello")]
    assert smollm.encode("\n") == [vocab.index("Ċ")]


def test_smollm_special_tokens_and_ids_follow_the_metadata(smollm, smollm_reader, vocab):
    fields = smollm_reader.fields
    for name in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert smollm.encode(name) == [vocab.index(name)]
        assert smollm.token_to_id(name) == vocab.index(name)
        assert smollm.id_to_token(vocab.index(name)) == name
    assert fields["tokenizer.ggml.add_bos_token"].contents() is False
    assert smollm.add_bos_token is False and smollm.encode("Hi") == [vocab.index("Hi")]
    assert smollm.bos_token_id == fields["tokenizer.ggml.bos_token_id"].contents()
    assert smollm.eos_token_ids == (fields["tokenizer.ggml.eos_token_id"].contents(),)
    assert smollm.pad_token_id == fields["tokenizer.ggml.padding_token_id"].contents()
    assert smollm.vocab_size == len(vocab) == 49152
    assert smollm.decode([vocab.index("<|im_end|>"), vocab.index("Hi")], True) == "Hi"
    assert json.loads(smollm.to_json_str())["model"]["type"] == "BPE"


def test_smollm_chat_template_renders_chatml(smollm, vocab):
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
    prompt = smollm.render_chat(messages)
    assert prompt == (
        "<|im_start|>system\nBe terse.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = smollm.encode(prompt)
    start, end, newline = (vocab.index(t) for t in ("<|im_start|>", "<|im_end|>", "Ċ"))
    starts = [i for i, t in enumerate(ids) if t == start]
    ends = [i for i, t in enumerate(ids) if t == end]
    assert starts[0] == 0 and len(starts) == 3 and len(ends) == 2
    # Each turn closes with "\n" and the next opens at once; the prompt ends "assistant\n".
    assert [ids[i + 1 : i + 3] for i in ends] == [[newline, start], [newline, start]]
    assert ids[-1] == newline and smollm.decode(ids[starts[-1] + 1 : -1]) == "assistant"
    assert not smollm.render_chat(messages, add_generation_prompt=False).endswith("assistant\n")


# --- a tiny byte-level BPE, as a Hugging Face directory and as a GGUF --------------------

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, hello tokenizer; numbers 12345 and 678",
    "byte level pairs merge into longer and longer tokens",
] * 5
def every_token_bytes(tok: Tokenizer) -> int:
    """The longest token by measuring every one (what `longest_token_bytes` must equal)."""
    return max(max(len(tok.token_bytes(token) or b""), len(tok.decode([token]).encode()))
               for token in range(tok.vocab_size))


def test_longest_token_bytes_is_that_of_every_token_measured(smollm, tmp_path):
    # SmolLM2's byte-level vocabulary; a byte-fallback one whose longest token is a
    # multi-byte character; a tiny BPE with a long added token.
    fallback = Tokenizer(tokenizers.Tokenizer(models.BPE(vocab={"<unk>": 0, "<0x0A>": 1, "▁hi": 2, "日本語": 3},
                                                         merges=[], unk_token="<unk>")))
    tiny_bpe = train_tiny_bpe()
    tiny_bpe.add_tokens([AddedToken("<|a_rather_long_marker_token|>", special=True)])
    for tok in (smollm, fallback, Tokenizer(tiny_bpe)):
        assert tok.longest_token_bytes() == every_token_bytes(tok)
    assert fallback.longest_token_bytes() == len("日本語".encode())


SPECIALS = ["<s>", "</s>", "<|eot|>"]


def train_tiny_bpe(post_processor=None) -> tokenizers.Tokenizer:
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.add_tokens([AddedToken("<tool>", special=False, normalized=False)])
    tokenizer.post_processor = post_processor
    return tokenizer


def write_hf_directory(path, tokenizer, config, generation=None, template_file=None):
    path.mkdir()
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    if generation is not None:
        (path / "generation_config.json").write_text(json.dumps(generation))
    if template_file is not None:
        (path / "chat_template.jinja").write_text(template_file)
    return path


def test_hf_directory_adds_bos_and_collects_end_ids(tmp_path):
    trained = train_tiny_bpe()
    s, end, eot = (trained.token_to_id(t) for t in SPECIALS)
    config = {"bos_token": "<s>", "eos_token": {"content": "</s>", "special": True},
              "add_bos_token": True, "chat_template": "{{ bos_token }}{{ messages[0].content }}"}
    directory = write_hf_directory(
        tmp_path / "tiny", trained, config, generation={"eos_token_id": [end, eot]}
    )
    tok = Tokenizer.from_hf_directory(directory)
    plain = trained.encode("hello world").ids
    assert tok.encode("hello world") == [s, *plain] and tok.add_bos_token
    assert tok.encode("hello world", add_special_tokens=False) == plain
    assert (tok.bos_token_id, tok.eos_token_ids) == (s, (end, eot))
    assert tok.render_chat([{"role": "user", "content": "hi"}]) == "<s>hi"


def test_hf_directory_add_eos_and_template_file(tmp_path):
    trained = train_tiny_bpe()
    config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False,
              "add_eos_token": True, "chat_template": "from the config"}
    directory = write_hf_directory(tmp_path / "tiny", trained, config, template_file="from file")
    tok = Tokenizer.from_hf_directory(directory)
    assert tok.encode("fox") == [*trained.encode("fox").ids, trained.token_to_id("</s>")]
    assert tok.eos_token_ids == (trained.token_to_id("</s>"),)
    assert tok.chat_template == "from file"


def test_hf_directory_without_add_flags_keeps_tokenizer_json_processing(tmp_path):
    # As Llama 3's tokenizer.json does: its post-processor adds BOS, its config says nothing.
    trained = train_tiny_bpe()
    s = trained.token_to_id("<s>")
    trained.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", s)]
    )
    directory = write_hf_directory(tmp_path / "tiny", trained, {"bos_token": "<s>"})
    tok = Tokenizer.from_hf_directory(directory)
    assert tok.encode("dog")[0] == s and tok.add_bos_token
    with pytest.raises(MissingChatTemplateError, match="no chat template"):
        tok.render_chat([{"role": "user", "content": "hi"}])


def write_tiny_gguf(path, trained: tokenizers.Tokenizer, pre="gpt2", model="gpt2", **extra):
    spelled = json.loads(trained.to_str())
    vocab = trained.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.get)
    types = [3 if t in SPECIALS else 4 if t == "<tool>" else 1 for t in tokens]
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_merges([" ".join(pair) for pair in spelled["model"]["merges"]])
    writer.add_token_types(types)
    writer.add_bos_token_id(vocab["<s>"])
    writer.add_eos_token_id(vocab["</s>"])
    writer.add_eot_token_id(vocab["<|eot|>"])
    for key, value in extra.items():
        getattr(writer, f"add_{key}")(value)
    writer.add_tensor("token_embd.weight", gguf.np.zeros((len(tokens), 4), dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_tokenizer_matches_the_tokenizer_it_was_written_from(tmp_path):
    trained = train_tiny_bpe()
    path = write_tiny_gguf(tmp_path / "tiny.gguf", trained, add_bos_token=True,
                           chat_template="{{ eos_token }}")
    tok = Tokenizer.from_gguf(path)
    for text in [*TEXTS, *CORPUS[:3], "call <tool> then </s><|eot|>"]:
        expected = trained.encode(text).ids
        assert tok.encode(text) == [trained.token_to_id("<s>"), *expected]
        plain = tok.encode(text, add_special_tokens=False)
        assert tok.decode(plain) == trained.decode(expected, skip_special_tokens=False)
    end, eot = trained.token_to_id("</s>"), trained.token_to_id("<|eot|>")
    assert tok.eos_token_ids == (end, eot) and tok.render_chat([]) == "</s>"
    assert tok.vocab_size == trained.get_vocab_size(with_added_tokens=True)


@pytest.mark.parametrize("pre, expected", [
    ("gpt2", ["Hello", "Ġworld", "Ġ12345"]),
    ("smollm", ["Hello", "Ġworld", "Ġ", "1", "2", "3", "4", "5"]),
    ("llama-bpe", ["Hello", "Ġworld", "Ġ", "123", "45"]),
    ("qwen2", ["Hello", "Ġworld", "Ġ", "1", "2", "3", "4", "5"]),
    ("default", ["Hello", "Ġworld", "Ġ", "123", "45"]),
    ("tekken", ["Hello", "Ġworld", "Ġ", "1", "2", "3", "4", "5"]),
    ("gpt-4o", ["Hello", "Ġworld", "Ġ", "123", "45"]),
])
def test_gguf_pre_tokenizer_types_split_as_llama_cpp_does(tmp_path, pre, expected):
    # Splits worked out by hand from llama.cpp's regexes for each `tokenizer.ggml.pre`.
    tok = Tokenizer.from_gguf(write_tiny_gguf(tmp_path / "t.gguf", train_tiny_bpe(), pre=pre))
    rebuilt = tokenizers.Tokenizer.from_str(tok.to_json_str())
    assert [p for p, _ in rebuilt.pre_tokenizer.pre_tokenize_str("Hello world 12345")] == expected
    for text in TEXTS:
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    # llama.cpp adds BOS for these when the file does not say; this file does not.
    assert tok.add_bos_token == (pre in ("llama-bpe", "tekken"))


def test_gguf_refuses_what_it_cannot_build(tmp_path):
    trained = train_tiny_bpe()
    with pytest.raises(ValueError, match="unsupported GGUF tokenizer model 'llama'"):
        Tokenizer.from_gguf(write_tiny_gguf(tmp_path / "spm.gguf", trained, model="llama"))
    with pytest.raises(ValueError, match="unsupported GGUF pre-tokenizer 'martian'"):
        Tokenizer.from_gguf(write_tiny_gguf(tmp_path / "pre.gguf", trained, pre="martian"))


# --- incremental detokenizing ------------------------------------------------------------


@pytest.fixture(params=["byte pieces", "windows"])
def detokenizing(request, smollm, monkeypatch):
    """SmolLM2's tokenizer, detokenized as a byte-level vocabulary is (its tokens' bytes
    through an incremental UTF-8 decoder), or as any other is (windows decoded by the
    tokenizer), which the byte-level one is checked against."""
    if request.param == "windows":
        monkeypatch.setattr(smollm, "byte_pieces", lambda skip_special_tokens: None)
    return smollm


def test_detokenizer_never_emits_a_broken_character(detokenizing):
    smollm = detokenizing
    ids = smollm.encode(MULTIBYTE)
    # The test means something only if single tokens do end inside a character.
    assert sum("\ufffd" in smollm.decode([i]) for i in ids) >= 3
    detokenizer = IncrementalDetokenizer(smollm)
    deltas = [detokenizer.push([i]) for i in ids] + [detokenizer.flush()]
    assert not any("\ufffd" in d for d in deltas)
    assert "".join(deltas) == smollm.decode(ids) == MULTIBYTE


@pytest.mark.parametrize("chunk", [2, 3, 7])
def test_detokenizer_after_a_prompt_in_chunks(detokenizing, chunk):
    smollm = detokenizing
    prompt, generated = smollm.encode("Réponds: 日"), smollm.encode("本語 🎉 fin.")
    detokenizer = IncrementalDetokenizer(smollm, prompt_ids=prompt)
    deltas = [detokenizer.push(generated[i:i + chunk]) for i in range(0, len(generated), chunk)]
    assert not any("\ufffd" in d for d in deltas)
    assert smollm.decode(prompt) + "".join(deltas) == smollm.decode(prompt + generated)


def test_push_each_gives_what_a_push_a_token_gives(detokenizing):
    """A decode window's tokens pushed at once, each one's text apart (engine/host/
    window_output.py), after a prompt that ends inside a character."""
    smollm = detokenizing
    ids = smollm.encode("Réponds: 日本語 🎉 fin.")
    cut = next(k for k in range(1, len(ids)) if smollm.decode(ids[:k]).endswith("\ufffd"))
    prompt, generated = ids[:cut], ids[cut:]  # the prompt ends inside a character
    one_by_one = IncrementalDetokenizer(smollm, prompt_ids=prompt)
    expected = [one_by_one.push([token]) for token in generated]
    at_once = IncrementalDetokenizer(smollm, prompt_ids=prompt)
    assert at_once.push_each(generated[:5]) + at_once.push_each(generated[5:]) == expected
    assert at_once.flush() == one_by_one.flush()


def test_a_character_cut_short_by_a_whole_token_is_replaced_where_it_stood(smollm):
    """A token of whole characters is added as its text without the decoder only when no
    character is pending: after a character's first byte, the next whole token's text comes
    after that byte's U+FFFD, as the decoder gives it (a random model emits such runs)."""
    first_byte = next(token for token in range(smollm.vocab_size) if smollm.token_bytes(token) == b"\xe6")
    ids = [*smollm.encode("ok"), first_byte, *smollm.encode(" ab cd"), first_byte]
    expected = b"".join(smollm.token_bytes(token) for token in ids).decode("utf-8", errors="replace")
    for pushed in ("each", "runs"):
        detokenizer = IncrementalDetokenizer(smollm)
        texts = detokenizer.push_each(ids) if pushed == "each" else [detokenizer.push(ids[:3]), detokenizer.push(ids[3:])]
        assert "".join(texts) + detokenizer.flush() == expected == "ok\ufffd ab cd\ufffd"


def test_detokenizer_flush_releases_an_unfinished_character(detokenizing):
    smollm = detokenizing
    ids = smollm.encode("ok 🎉")
    detokenizer = IncrementalDetokenizer(smollm)
    held = "".join(detokenizer.push([i]) for i in ids[:-1])  # "ok", or "ok " with the space out early
    tail = detokenizer.flush()
    assert "\ufffd" not in held and held + tail == "ok \ufffd"


def test_detokenizer_skips_special_tokens(detokenizing, vocab):
    smollm = detokenizing
    ids = smollm.encode("Fine, thanks.") + [vocab.index("<|im_end|>")]
    detokenizer = IncrementalDetokenizer(smollm, skip_special_tokens=True)
    assert "".join(detokenizer.push([i]) for i in ids) == "Fine, thanks."


def test_detokenizer_decodes_a_small_window(smollm, monkeypatch):
    monkeypatch.setattr(smollm, "byte_pieces", lambda skip_special_tokens: None)  # the windows' way
    ids = smollm.encode(" ".join([MULTIBYTE] * 40))
    lengths, decode = [], smollm.decode

    def counting_decode(window, skip_special_tokens=False):
        lengths.append(len(window))
        return decode(window, skip_special_tokens)

    monkeypatch.setattr(smollm, "decode", counting_decode)
    detokenizer = IncrementalDetokenizer(smollm)
    text = "".join(detokenizer.push([i]) for i in ids)
    assert len(ids) > 400 and text == decode(ids)
    assert max(lengths) <= 8  # a few tokens of context and pending bytes, never the sequence


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_byte_pieces_give_the_tokenizer_s_text_for_any_tokens(smollm, skip_special_tokens):
    """Random runs of SmolLM2's tokens (special ones among them, characters cut anywhere,
    prompts ending inside one): the byte pieces' deltas join to the windows' text. (They
    may come sooner: the windows hold a delta back whole while it ends in a cut character,
    the UTF-8 decoder only the character's bytes.)"""
    import random

    rng = random.Random(7)
    special = sorted(smollm.added_token_ids(special=True))
    pieces = smollm.byte_pieces(skip_special_tokens)
    assert pieces is not None and pieces(special[0]) == (b"" if skip_special_tokens else smollm.decode(
        [special[0]]).encode())
    text = smollm.encode(MULTIBYTE)
    cuts = [cut for cut in range(1, len(text)) if smollm.decode(text[:cut]).endswith("\ufffd")]
    assert cuts  # prompts that end inside a character
    for trial in range(200):
        ids = [rng.choice(special) if rng.random() < 0.1 else rng.randrange(smollm.vocab_size)
               for _ in range(rng.randrange(1, 30))]
        prompt = [rng.randrange(smollm.vocab_size) for _ in range(rng.randrange(0, 8))]
        if trial < len(cuts):
            prompt, ids = text[:cuts[trial]], text[cuts[trial]:]
        byte_level = IncrementalDetokenizer(smollm, prompt_ids=prompt, skip_special_tokens=skip_special_tokens)
        smollm.byte_pieces = lambda skip: None  # an instance attribute over the method, taken back below
        windows = IncrementalDetokenizer(smollm, prompt_ids=prompt, skip_special_tokens=skip_special_tokens)
        del smollm.byte_pieces
        got = "".join([byte_level.push([i]) for i in ids] + [byte_level.flush()])
        assert got == "".join([windows.push([i]) for i in ids] + [windows.flush()]), (prompt, ids)
        if not prompt:
            assert got == smollm.decode(ids, skip_special_tokens)


def test_only_a_byte_level_decoder_joins_bytes():
    trained = train_tiny_bpe()
    assert Tokenizer(trained).byte_pieces(True) is not None
    trained.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])  # SentencePiece's: a token's place counts
    assert Tokenizer(trained).byte_pieces(True) is None


# --- chat templates ------------------------------------------------------------------------


def test_raise_exception_is_a_clear_template_error():
    template = ChatTemplate(
        "{% if messages[0].role != 'user' %}"
        "{{ raise_exception('first message must be from the user') }}{% endif %}"
    )
    with pytest.raises(ChatTemplateError, match="first message must be from the user") as error:
        template.render([{"role": "assistant", "content": "hi"}])
    assert isinstance(error.value, jinja2.TemplateError)


def test_strftime_now_tojson_and_special_tokens():
    tools = [{"name": "météo", "description": "<b>&'", "z": 1, "a": [1, 2]}]
    template = ChatTemplate(
        "{{ bos_token }}{{ strftime_now('%Y') }}|{{ tools | tojson }}"
        "|{{ tools[0] | tojson(indent=2) }}|{{ eos_token }}{{ extra }}",
        {"bos_token": "<s>", "eos_token": "</s>"},
    )
    years = {str(datetime.datetime.now().year + d) for d in (-1, 0)}
    head, as_json, indented, tail = template.render([], tools=tools, extra="!").split("|")
    assert head[:3] == "<s>" and head[3:] in years
    assert as_json == json.dumps(tools, ensure_ascii=False)  # no HTML escapes, keys unsorted
    assert indented == json.dumps(tools[0], ensure_ascii=False, indent=2)
    assert tail == "</s>!"


def test_template_options_match_transformers():
    source = ("{% for m in messages %}\n"
              "  {% if loop.index > 2 %}{% break %}{% endif %}\n"
              "{% generation %}{{ m.content }};{% endgeneration %}\n"
              "{% endfor %}\n"
              "{% if add_generation_prompt %}>{% endif %}")
    messages = [{"content": c} for c in "abc"]
    assert ChatTemplate(source).render(messages) == "a;b;>"  # trim_blocks, lstrip_blocks


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__ }}",
    "{{ messages.__class__.__name__ }}",
    "{{ cycler.__init__.__globals__ }}",
    "{% set items = [] %}{{ items.append(1) }}",
])
def test_sandbox_refuses_unsafe_templates(source):
    with pytest.raises(SecurityError):
        ChatTemplate(source).render([{"role": "user", "content": "hi"}])


def test_sandbox_renders_an_unsafe_attribute_as_nothing():
    # Jinja's sandbox makes a refused attribute undefined; printed alone it leaks nothing.
    assert ChatTemplate("[{{ raise_exception.__globals__ }}]").render([]) == "[]"


def test_invalid_template_is_a_template_error():
    with pytest.raises(ChatTemplateError, match="not valid Jinja"):
        ChatTemplate("{% for m in messages %}")
