#!/bin/sh
# Installs what the end-to-end tests need: Debian's Chromium (and ripgrep, and the headers
# node-pty builds against), then code-server 4.100.3 (VS Code 1.100.3) with the three
# work-arounds described in VSCODE-E2E.md. Idempotent; about a minute the first time.
set -e
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v chromium >/dev/null || ! command -v rg >/dev/null || ! dpkg -s libkrb5-dev >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium ripgrep libkrb5-dev
fi
if [ -f "$here/node_modules/code-server/out/node/entry.js" ] && [ -f "$here/node_modules/.installed" ]; then
    exit 0
fi
tmp=$(mktemp -d)
mkdir -p "$tmp/vscode-ripgrep-cache-1.15.11" "$tmp/rg"
cp "$(command -v rg)" "$tmp/rg/rg"
tar -C "$tmp/rg" -czf "$tmp/vscode-ripgrep-cache-1.15.11/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" rg
cd "$here"
TMPDIR="$tmp" npm_config_unsafe_perm=true npm_config_yes=true npm ci --no-audit --no-fund
touch node_modules/.installed
rm -rf "$tmp"
