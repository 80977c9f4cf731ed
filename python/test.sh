#!/usr/bin/env bash
# Builds the Python package's wheel and runs its tests against the installed wheel.
#   python/test.sh            -> target/wheels/flowbox-*.whl, then pytest python/tests on
#                                CPython 3.11 and, when pyenv has it, 3.13 (the abi3 wheel is
#                                the same file for both)
#   python/test.sh build      -> only the wheel
# The pinned maturin and pytest live in target/python-venv (and target/python313-venv);
# installing them is skipped when they are already there.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
requirements=python/tests/requirements.txt

venv() { # venv DIR PYTHON: a virtualenv with the pinned requirements
    if [[ ! -f "$1/installed" || "$requirements" -nt "$1/installed" ]]; then
        "$2" -m venv "$1"
        "$1/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
        touch "$1/installed"
    fi
}

venv target/python-venv python3
target/python-venv/bin/python python/same_features.py
# workflow-middleware's own package (its examples, which the drop-in's tests run with the
# import changed), pinned by version and checked by hash; nothing of it is committed.
wm=target/workflow-middleware
wm_sdist=workflow_middleware-0.1.0.tar.gz
wm_sha256=dbe292e5480267cb55aacc4710b39f1f6d83b1c830d2f05c9a29e39eb8e5f2ea
if [[ ! -d "$wm/workflow_middleware-0.1.0" ]]; then
    target/python-venv/bin/pip download --quiet --disable-pip-version-check --no-deps \
        --no-binary :all: -d "$wm" workflow-middleware==0.1.0
    echo "$wm_sha256  $wm/$wm_sdist" | sha256sum --check --quiet
    tar -xzf "$wm/$wm_sdist" -C "$wm"
fi
target/python-venv/bin/ruff check --quiet python
target/python-venv/bin/ruff format --quiet --check python
rm -rf target/wheels
target/python-venv/bin/maturin build --quiet --release --locked -m python/Cargo.toml --out target/wheels
wheel="$(ls target/wheels/flowbox-*.whl)"
[[ "${1:-}" == "build" ]] && exit 0

# The tests' runtimes cache the compiled guest in the workspace's cache, as the Rust tests do,
# not in the user's.
export FLOWBOX_CACHE_DIR="${FLOWBOX_CACHE_DIR:-$repo/target/flowbox-cache}"
pythons=(target/python-venv)
python313="$(command -v pyenv >/dev/null && echo "$(pyenv root)/versions/3.13.0/bin/python3" || true)"
if [[ -x "$python313" ]]; then
    venv target/python313-venv "$python313"
    pythons+=(target/python313-venv)
fi
for env in "${pythons[@]}"; do
    "$env/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
    # The installed package type-checks, and its stub says what the native module has.
    (cd target && "../$env/bin/python" -m mypy --no-error-summary -p flowbox \
        && "../$env/bin/python" -m mypy.stubtest flowbox._native)
    echo "python/tests on $("$env/bin/python" --version)"
    timeout 900 "$env/bin/pytest" -q python/tests
done
