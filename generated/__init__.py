"""Pydantic v2 models generated from spec/ by tools/codegen.py.

Never edit these modules by hand: change spec/ and run `make codegen`.
"""
