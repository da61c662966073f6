"""Text in and out of the engine: the tokenizer and its incremental detokenizer, chat
templates and prompt encoding, GGUF vocabularies, stop strings, reasoning tags and the
grammars of structured output. Never touches the device side (tests/engine/test_engine_layout.py).
"""
