#!/usr/bin/env bash
# Install the browser the console's browser tests (tests/integration/console) drive: Debian's
# Chromium (/usr/bin/chromium), run headless by Playwright for Python (pyproject's dev extra;
# Playwright's own browser downloads are never used). Idempotent: does nothing when chromium is
# there. Needs root for apt-get; without root it says what is missing and fails.
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
source "$(dirname "$0")/_apt.sh"
apt_install setup-browser "the console's browser tests" "${missing[@]}"
