#!/usr/bin/env bash
# Builds the flowbox guest component, or with `test` runs the SDK's tests on native CPython.
#   guest-python/build.sh          -> components/flowbox_guest.wasm.gz (~15 s), the component
#                                     the flowbox crate embeds and its package ships
#   guest-python/build.sh test     -> pytest guest-python/tests (extra args go to pytest)
# Tools live in <repo>/.venv, pinned; installing them is skipped when they are already there.
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1
PYTEST_VERSION=8.4.2

guest="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$guest")"
venv="$repo/.venv"

if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi

installed_version() {
    "$venv/bin/python" -c 'import importlib.metadata as m, sys
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass' "$1"
}

ensure() {
    if [[ "$(installed_version "$1")" != "$2" ]]; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$1==$2"
    fi
}

ensure componentize-py "$COMPONENTIZE_PY_VERSION"
ensure pytest "$PYTEST_VERSION"

if [[ "${1:-}" == "test" ]]; then
    shift
    cd "$guest"
    exec "$venv/bin/python" -m pytest "$@"
fi

out="$repo/components"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$guest"
# The second module path is the script contract's folder: the SDK reads script.json from the
# module path while componentize-py pre-initialises it, and the snapshot keeps what it read.
"$venv/bin/componentize-py" -d "$repo/wit" -w workflow componentize app \
    -p "$guest" -p "$repo/host/flowbox/contract" -o "$work/flowbox_guest.wasm"
# Compressed so the crate's package stays under the registry's 10 MiB (18 MB -> ~6 MB); -n
# keeps the name and time out of the header, so the same component gives the same bytes.
gzip -9 -n -c "$work/flowbox_guest.wasm" > "$work/flowbox_guest.wasm.gz"
mv "$work/flowbox_guest.wasm.gz" "$out/flowbox_guest.wasm.gz"
# What the library embeds is the decompressed component; its SHA-256 keys the compile cache and
# is `Runtime::guest_sha256()` (components/README.md).
sha256="$(sha256sum "$work/flowbox_guest.wasm" | cut -d' ' -f1)"
echo "built components/flowbox_guest.wasm.gz: componentize-py $COMPONENTIZE_PY_VERSION, sha256 $sha256"
