#!/usr/bin/env bash
# Install Debian's chromium when missing (tests/test_ui_browser.py renders the MLflow UI in it).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "note: chromium is not installed and cannot be installed here; the browser test will skip" >&2
  exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
