#!/bin/sh
# The peer comparison of `make bench`: installs the newest pydantic-monty the package index
# serves into a virtualenv under target/ (ignored by git) and prints its figures as JSON, from
# the same workloads as the Python benchmark's (python/bench/peers.py).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/../../../../target/bench/peer-venv"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" >&2
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pydantic-monty >&2
exec "$venv/bin/python" "$here/../../../../python/bench/peers.py" monty
