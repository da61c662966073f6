#!/usr/bin/env bash
# Prints the Python that `make` builds .venv with: 3.12, the GPU image's, whose JAX
# (0.11.2) the project pins; else a later one. A python3.12 on PATH first, then pyenv's
# (its shims on PATH answer only for the version pyenv has selected, so ask pyenv itself).
set -uo pipefail

runs_312_or_later() {
    "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null
}

pyenv_pythons() {  # pyenv's installed 3.12.x first, newest first; then later minors
    command -v pyenv >/dev/null || return 0
    local root versions
    root=$(pyenv root)
    versions=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.[0-9]+\.[0-9]+$' | sort -V -r)
    for version in $(grep -E '^3\.12\.' <<<"$versions") $(grep -vE '^3\.12\.' <<<"$versions"); do
        echo "$root/versions/$version/bin/python3"
    done
}

for candidate in python3.12 $(pyenv_pythons) python3.13 python3; do
    if command -v "$candidate" >/dev/null && runs_312_or_later "$candidate"; then
        command -v "$candidate"
        exit 0
    fi
done
echo "Flint needs Python 3.12 or later (jax 0.11 does): install one, or pass PYTHON=/path/to/python3.12" >&2
exit 1
