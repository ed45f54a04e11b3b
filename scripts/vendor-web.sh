#!/usr/bin/env bash
# Install the web UI's npm packages from web/package-lock.json (exact versions, integrity
# hashes) and, with --copy, refresh the browser builds the page serves from
# src/microrag_engine/server/static/vendor/ (committed: the page loads nothing remote,
# and the wheel carries them). tests/server/test_webui.py checks the committed copies are
# byte-identical to the locked packages. `make test` runs this without --copy.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "vendor-web: npm not found and not root to install it; the web UI's accessibility audit will be skipped" >&2
    exit 0
  fi
fi
# Skip the install when node_modules was installed from this very lock.
if ! cmp -s web/package-lock.json web/node_modules/.installed-from.json 2>/dev/null; then
  npm ci --prefix web --no-audit --no-fund --loglevel=error
  cp web/package-lock.json web/node_modules/.installed-from.json
fi
if [ "${1:-}" = "--copy" ]; then
  out=src/microrag_engine/server/static/vendor
  m=web/node_modules
  cp $m/markdown-it/dist/browser/markdown-it.umd.min.js "$out/markdown-it.min.js"
  cp $m/dompurify/dist/purify.min.js "$out/purify.min.js"
  rm -f "$out"/*.LICENSE
  # markdown-it's browser build bundles its dependencies: every licence shipped goes along.
  {
    echo "Third-party code in this folder, as published on the npm registry (versions: web/package-lock.json)."
    echo "markdown-it.min.js bundles markdown-it and its dependencies; purify.min.js is DOMPurify."
    for pkg in markdown-it entities linkify-it mdurl uc.micro punycode.js dompurify; do
      ver=$(node -p "const p = require('./$m/$pkg/package.json'); p.version + ' (' + p.license + ')'")
      printf '\n==== %s %s ====\n\n' "$pkg" "$ver"
      cat $(ls $m/$pkg/LICENSE* | head -1)
    done
  } > "$out/THIRD-PARTY-LICENSES.txt"
  echo "vendor-web: copied markdown-it and DOMPurify into $out" >&2
fi
