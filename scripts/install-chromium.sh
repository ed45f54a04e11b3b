#!/usr/bin/env bash
# Install Debian's Chromium for the web UI's end-to-end tests, once. Idempotent.
# (Playwright drives this binary; it downloads no browser of its own.)
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-chromium: needs root for apt-get; skipping (web UI tests will be skipped)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
echo "install-chromium: $(chromium --version)" >&2
