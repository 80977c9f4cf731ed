#!/usr/bin/env bash
# Runs the guest SDK's tests on native CPython (no component build); arguments go to pytest.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/build.sh" test "$@"
