#!/usr/bin/env bash
# Idempotent set-up: system packages (Chromium for browser tests, Graphviz for optional export),
# a virtual environment in .venv with torch pinned to 2.13.0 (our CI's CPU wheel; users may have
# any torch >= 2.2), the package in editable mode (its build hook bundles js/ with esbuild).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "note: ${need_apt[*]} not installed (needs root + apt); browser tests / dot export will skip or fail" >&2
  fi
fi
command -v npm >/dev/null 2>&1 || { echo "error: Node.js + npm are needed to build the widget's JS" >&2; exit 1; }

[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=".venv/bin/python -m pip"
stamp=.venv/.gradviz-setup
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  $PIP install -q --upgrade pip >/dev/null
  $PIP install -q "torch==2.13.0" numpy
  $PIP install -q "torch==2.13.0" -e ".[test]"
  touch "$stamp"
else
  # sources of the JS bundle changed? rebuild it through the build hook
  $PIP install -q "torch==2.13.0" --no-deps -e . >/dev/null
fi
