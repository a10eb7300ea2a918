#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need, then lint + pytest.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m pip install -q -r requirements-dev.txt
# The browser test drives Debian's Chromium through Playwright (never a downloaded browser).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium not installed: browser test will skip"
fi
python3 -m ruff check .
python3 -m pytest -q "$@"
