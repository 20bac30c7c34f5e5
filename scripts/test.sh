#!/usr/bin/env bash
# The whole test suite from a fresh machine: set-up, lint, type checks (mypy, tsc --checkJs), JS
# tests, docstring examples, Python tests (unit, conformance zoo, widget, notebooks, benchmark
# smoke, distributed over gloo, end-to-end in JupyterLab / Notebook 7 / marimo + headless Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .                               # one formatter (config: pyproject)
.venv/bin/mypy                                                # type check (config: pyproject)
(cd js && npm test --silent && npm run typecheck --silent)   # node tests; tsc --checkJs
.venv/bin/python -m pytest -q -p no:cacheprovider --doctest-modules gradviz_widgets  # docstrings run
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
