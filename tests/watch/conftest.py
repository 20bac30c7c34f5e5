"""tests/watch/test_watch_distributed.py starts its ranks with tests/distributed's launcher: make it
importable when tests/watch runs on its own (the whole suite collects tests/distributed first)."""

import sys
from pathlib import Path

LAUNCHER = str(Path(__file__).resolve().parents[1] / "distributed")
if LAUNCHER not in sys.path:
    sys.path.append(LAUNCHER)
