#!/usr/bin/env bash
# Install Debian's Tesseract (English) for the OCR extra's test on scanned PDFs, once. Idempotent.
set -euo pipefail
command -v tesseract >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-ocr: needs root for apt-get; skipping (the real-Tesseract OCR test will be skipped)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq tesseract-ocr tesseract-ocr-eng >/dev/null
echo "install-ocr: $(tesseract --version 2>&1 | head -1)" >&2
