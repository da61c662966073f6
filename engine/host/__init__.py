"""The engine's host side: which sequences run, in which pages, and what their outputs become.

The scheduler, the block manager (pages, reference counts, copy-on-write, the prefix
cache), sequences and requests, the output stage, beams, speculation's drafts, decode
windows and grammar masks. Plain Python over ints, lists and deques: nothing here imports
JAX (tests/engine/test_engine_layout.py checks it), so it tests in milliseconds.
"""
