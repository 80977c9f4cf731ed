#!/usr/bin/env bash
# `make bench`'s Python figures (target/bench/python.json): flowbox from Python against
# pydantic-monty 1.4.0 and pyeryx 0.11.0 in one process. pyeryx needs CPython >= 3.12: the
# benchmark runs on pyenv's 3.13.0 (or PYTHON313=path), in target/bench/python-venv.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
python="${PYTHON313:-$(pyenv root 2>/dev/null)/versions/3.13.0/bin/python3}"
if [[ ! -x "$python" ]]; then
    echo "python/bench/bench.sh: needs CPython 3.13 (pyeryx needs >= 3.12); set PYTHON313" >&2
    exit 1
fi
python/test.sh build
venv=target/bench/python-venv
if [[ ! -f "$venv/installed" ]]; then
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        pydantic-monty==1.4.0 pyeryx==0.11.0
    touch "$venv/installed"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    target/wheels/flowbox-*.whl
mkdir -p target/bench
cd python/bench
PEERS_CACHE="$repo/target/bench/eryx-cache" "$repo/$venv/bin/python" bench.py \
    "$repo/target/bench/python.json"
