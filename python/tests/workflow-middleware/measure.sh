#!/usr/bin/env bash
# Runs workflow-middleware 0.1.0's own test suite (from its package, which python/test.sh
# fetches) against flowbox.langchain, with the import swapped (swap.py), and prints what passes.
# A measurement, not a test: it exits 0 whatever the counts; docs/testing.md says why each
# failing test fails.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$repo"
python/test.sh build
suite=target/workflow-middleware/suite
venv=target/workflow-middleware/venv
if [[ ! -x "$venv/bin/pytest" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        -r python/tests/requirements.txt pytest-asyncio==1.5.0
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    target/wheels/flowbox-*.whl
rm -rf "$suite"
mkdir -p "$suite"
cp -r target/workflow-middleware/workflow_middleware-0.1.0/{tests,pyproject.toml} "$suite/"
cp python/tests/workflow-middleware/swap.py "$suite/tests/_swap.py"
sed -i 's/^from __future__ import annotations$/&\nimport tests._swap  # noqa: E402,F401/' \
    "$suite/tests/conftest.py"
cd "$suite"
"$repo/$venv/bin/pytest" -q -p no:cacheprovider -rfs tests | grep -E '^(FAILED|SKIPPED)|^[0-9]+ (passed|failed)' \
    | sed 's/ - .*//' || true
