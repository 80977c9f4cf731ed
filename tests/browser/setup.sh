#!/usr/bin/env bash
# What the browser tests need, installed idempotently with the ordinary package clients:
# Chromium from the system's packages (never a browser download) and, into target/browser/,
# playwright-core (a driver only, no browsers) and the MCP App test's packages.
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
# One install for all (an install with --no-save drops what an earlier one added): the MCP
# App test's client, the extension's host-side bridge and what it needs, and esbuild, which
# bundles the bridge into one script the test's host page loads.
if [ ! -f target/browser/app-bridge.js ]; then
    mkdir -p target/browser
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix target/browser --no-audit --no-fund \
        --no-save --loglevel=error playwright-core@1 @modelcontextprotocol/ext-apps@2.0.4 \
        @modelcontextprotocol/client@2.4.0 @modelcontextprotocol/core@2.4.0 zod@4.6.7 \
        esbuild@0.28.2
    target/browser/node_modules/.bin/esbuild --bundle --format=iife --global-name=ExtApps \
        --log-level=warning --outfile=target/browser/app-bridge.js \
        target/browser/node_modules/@modelcontextprotocol/ext-apps/dist/src/app-bridge.js
fi
