#!/usr/bin/env bash
# Idempotent set-up: system packages (Chromium for browser tests, Graphviz for optional export;
# Node.js + npm and python3-venv when missing), a virtual environment in .venv with torch pinned
# to 2.13.0 (our CI's CPU wheel; users may have any torch >= 2.2), the package in editable mode
# (its build hook bundles js/ with esbuild).
# Re-run: a full install when pyproject.toml is newer than the stamp (changed dependencies);
# else the package is reinstalled only when the JS bundle is missing or older than js/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
# Debian/Ubuntu split venv's pip bootstrap into python3-venv
[ -x .venv/bin/python ] || "$PY" -c "import ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "note: ${need_apt[*]} not installed (needs root + apt); browser tests / dot export will skip or fail" >&2
  fi
fi
bundle=gradviz_widgets/static/graph_pane.js
# every file js/build.mjs writes: one missing means a rebuild
built=(graph_pane.js page_host.js graph_pane.css watch_page.js watch_page.css marimo_mirror.js
  marimo_mirror.css explorer_page.css)
missing=""
for f in "${built[@]}"; do [ -f "gradviz_widgets/static/$f" ] || missing=1; done
# the JS sources changed since the bundle was built (or it is missing)
stale="$missing"
[ -n "$stale" ] || [ -z "$(find js -type f -newer "$bundle" -print -quit)" ] || stale=1
# npm is needed only to build: a working copy whose front end is built and current runs without
if [ -n "$stale" ]; then
  command -v npm >/dev/null 2>&1 || { echo "error: Node.js + npm are needed to build the widget's JS" >&2; exit 1; }
fi

if [ -e .venv ] && ! .venv/bin/python -c "" >/dev/null 2>&1; then
  # a .venv copied from another user or machine links to an interpreter this one cannot run
  # (venv then failed with a bare "Permission denied"), or an interrupted set-up left half of one
  echo "setup: $(pwd)/.venv/bin/python does not run here (a .venv copied from another user or" \
       "machine, or a set-up cut short?); delete it (rm -rf .venv) and run this again" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=".venv/bin/python -m pip"
stamp=.venv/.gradviz-setup
if [ -n "$missing" ]; then
  # a fresh clone or a source archive: build the front end first. The build hook decides by
  # file times (anything in js/ newer than static/), which an archive leaves all equal.
  (cd js && npm install --no-audit --no-fund --loglevel=error >/dev/null && npm run build >/dev/null)
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  $PIP install -q --upgrade pip >/dev/null
  $PIP install -q "torch==2.13.0" numpy
  $PIP install -q "torch==2.13.0" -e ".[test]"
  touch "$stamp"
elif [ -n "$stale" ] ||
     ! compgen -G ".venv/lib/python*/site-packages/gradviz_widgets-*.dist-info" >/dev/null; then
  # the JS sources changed (or the package is gone): rebuild the bundle through the build hook,
  # which uses the same test (anything in js/ newer than the bundle)
  $PIP install -q "torch==2.13.0" --no-deps -e . >/dev/null
fi
