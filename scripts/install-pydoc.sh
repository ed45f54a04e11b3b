#!/usr/bin/env bash
# Install the QA development corpus: the Python 3.11 documentation as HTML, from
# Debian's python3.11-doc package (PSF licence), into a cache folder. No root
# needed: `apt-get download` fetches the .deb, `dpkg-deb -x` unpacks it. Only the
# rendered pages are kept (not _sources/*.rst.txt, which would index every page twice,
# nor _static/_images). Prints the corpus folder. Idempotent.
set -euo pipefail
DEST=${MICRORAG_PYDOC:-$HOME/.cache/microrag/corpora/python3.11-doc}
if [ -f "$DEST/.complete" ]; then echo "$DEST"; exit 0; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && apt-get download python3.11-doc >/dev/null 2>&1) \
  || { echo "install-pydoc: 'apt-get download python3.11-doc' failed (needs a Debian/Ubuntu package index)" >&2; exit 1; }
dpkg-deb -x "$TMP"/python3.11-doc_*.deb "$TMP/x"
HTML="$TMP/x/usr/share/doc/python3.11/html"
rm -rf "$DEST" && mkdir -p "$DEST"
(cd "$HTML" && find . -name '*.html' -not -path './_*' -print0 | xargs -0 cp --parents -t "$DEST")
ls "$TMP"/python3.11-doc_*.deb | sed 's/.*python3.11-doc_/python3.11-doc /; s/_all.deb//' > "$DEST/.complete"
echo "$DEST"
