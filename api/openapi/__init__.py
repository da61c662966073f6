"""The contract served at GET /openapi.json (contract.py), built from spec/openapi: the
specs' components in one namespace (specs.py), the completions operations (completions.py)
and each operation's error answers (errors.py).
"""
