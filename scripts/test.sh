#!/usr/bin/env bash
# The whole test suite from a fresh machine: set-up, lint, JS tests, Python tests (unit, widget,
# notebooks, benchmark smoke, end-to-end in JupyterLab + headless Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
(cd js && npm test --silent && npm run typecheck --silent)   # node tests; tsc --checkJs
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
