#!/usr/bin/env bash
# What the browser tests need, installed idempotently with the ordinary package clients:
# Chromium from the system's packages (never a browser download) and playwright-core (a
# driver only, no browsers) into target/browser/.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
    else
        echo "browser tests need chromium: apt-get install chromium (as root)" >&2
        exit 1
    fi
fi
if [ ! -f target/browser/node_modules/playwright-core/package.json ]; then
    mkdir -p target/browser
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix target/browser --no-audit --no-fund \
        --no-save playwright-core@1
fi
