#!/usr/bin/env bash
# Opens the quickstart in JupyterLab (set-up included), on a working copy of the lessons in .demo/
# (ignored by git): running them, autosave and the widget's exports never touch notebooks/.
#   bash scripts/demo.sh [JUPYTER LAB OPTIONS]
#   bash scripts/demo.sh --headless [DIR]   no browser: writes DIR/index.html (standalone page),
#                                           graph.svg, grad_norms.csv, grad_report.json (DIR is
#                                           relative to where you run it; default: the repo's out/)
# Environment: GRADVIZ_DEMO_DIR   the working copy (default .demo; delete a copy to refresh it)
#              GRADVIZ_DEMO_PORT  serve on exactly this port (default: 8888 or the next free one)
# Runs as root too (fresh containers and VMs): passes --allow-root then. With no display it
# opens no browser; open the printed http://127.0.0.1:PORT/lab/tree/quickstart.ipynb?token=...
# URL yourself.
set -euo pipefail
caller=$(pwd)
# a relative DIR or GRADVIZ_DEMO_DIR is the caller's, not the repository's (it went into the
# checkout, where any name but out/ showed as untracked); the defaults stay in the repository
from_caller() { case "$1" in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$caller" "$1" ;; esac; }
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "${1:-}" = "--headless" ]; then
  out_dir=out
  if [ -n "${2:-}" ]; then
    out_dir=$(from_caller "$2")
  fi
  exec .venv/bin/python -m gradviz_widgets.demo "$out_dir"
fi
repo=$(pwd)
demo_dir=.demo
if [ -n "${GRADVIZ_DEMO_DIR:-}" ]; then
  demo_dir=$(from_caller "$GRADVIZ_DEMO_DIR")
fi
workdir=$(.venv/bin/python -m gradviz_widgets.demo --workdir "$demo_dir")
args=()
if [ "$(id -u)" = 0 ]; then
  args+=(--allow-root)
fi
if [ -n "${GRADVIZ_DEMO_PORT:-}" ]; then
  args+=("--port=$GRADVIZ_DEMO_PORT" --port-retries=0)
fi
if [ -z "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ "$(uname -s)" != Darwin ]; then
  args+=(--no-browser)
  echo "no display: open the http://127.0.0.1:...?token=... URL printed below in a browser" \
       "(from another machine: ssh -L PORT:127.0.0.1:PORT this-host)" >&2
fi
echo "working copy: $workdir (the tracked notebooks/ stay as committed)" >&2
cd "$workdir"
# default_url, not a file argument: the printed URL then names the notebook too (with a file
# argument JupyterLab prints /lab, which opens the launcher when typed in by hand)
exec "$repo/.venv/bin/jupyter" lab --LabApp.default_url=/lab/tree/quickstart.ipynb \
  ${args[@]+"${args[@]}"} "$@"
