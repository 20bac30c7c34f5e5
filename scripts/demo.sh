#!/usr/bin/env bash
# Opens notebooks/quickstart.ipynb in JupyterLab (set-up included).
#   bash scripts/demo.sh --headless [DIR]   no browser: writes DIR/index.html (standalone page),
#                                           graph.svg, grad_norms.csv, grad_report.json
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "${1:-}" = "--headless" ]; then
  exec .venv/bin/python -m gradviz_widgets.demo "${2:-out}"
fi
exec .venv/bin/jupyter lab notebooks/quickstart.ipynb
