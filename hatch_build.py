"""Hatchling build hook: build the GraphPane JS bundle (js/ -> gradviz_widgets/static/graph_pane.js).

Runs for wheel and editable builds when the bundle is missing or older than any source in
js/ (``*.js``, ``build.mjs``, ``package.json``, ``package-lock.json``): ``npm ci`` (or
``npm install`` without a lock file) when ``node_modules`` is missing or stale, then
``node build.mjs``. Set ``GRADVIZ_SKIP_JS_BUILD=1`` to skip (e.g. when the bundle is
provided another way).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

BUNDLE = Path("gradviz_widgets") / "static" / "graph_pane.js"
JS_DIR = Path("js")


def _newest_source(js_dir: Path) -> float:
    """Latest modification time among the front-end sources."""
    names = ["build.mjs", "package.json", "package-lock.json"]
    files = [*js_dir.glob("*.js"), *(js_dir / n for n in names)]
    return max((f.stat().st_mtime for f in files if f.is_file()), default=0.0)


def _needs_install(js_dir: Path) -> bool:
    """True when node_modules is missing or older than package.json / package-lock.json."""
    marker = js_dir / "node_modules" / ".package-lock.json"
    if not marker.is_file():
        return True
    deps = [js_dir / "package.json", js_dir / "package-lock.json"]
    newest = max((f.stat().st_mtime for f in deps if f.is_file()), default=0.0)
    return marker.stat().st_mtime < newest


class CustomBuildHook(BuildHookInterface):
    """Build the front-end bundle before the wheel (or editable wheel) is assembled."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Build the bundle if needed and make sure the wheel ships it."""
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        bundle = root / BUNDLE
        js_dir = root / JS_DIR
        build_data.setdefault("artifacts", []).append(BUNDLE.as_posix())
        if os.environ.get("GRADVIZ_SKIP_JS_BUILD") == "1":
            self.app.display_info("GRADVIZ_SKIP_JS_BUILD=1: not building the JS bundle")
            return
        if not (js_dir / "package.json").is_file():
            if bundle.is_file():
                return  # building from a tree that ships the bundle but not js/
            raise RuntimeError(f"{bundle} is missing and there is no js/ folder to build it from")
        if bundle.is_file() and bundle.stat().st_mtime >= _newest_source(js_dir):
            return
        npm = shutil.which("npm")
        node = shutil.which("node")
        if npm is None or node is None:
            msg = (
                "Building gradviz_widgets needs Node.js and npm to bundle the GraphPane front end "
                f"({BUNDLE}), but {'npm' if npm is None else 'node'} was not found on PATH. "
                "Install Node.js >= 18 (which includes npm) and rerun `pip install -e .`."
            )
            if bundle.is_file():
                self.app.display_warning(msg + " Using the existing, older bundle.")
                return
            raise RuntimeError(msg)
        if _needs_install(js_dir):
            has_lock = (js_dir / "package-lock.json").is_file()
            cmd = [npm, "ci" if has_lock else "install", "--no-audit", "--no-fund"]
            self._run(cmd, js_dir)
        self._run([node, "build.mjs"], js_dir)
        if not bundle.is_file():
            raise RuntimeError(f"node build.mjs finished but {bundle} was not written")

    def _run(self, cmd: list[str], cwd: Path) -> None:
        """Run a build command in ``cwd``, failing the build with its output on error."""
        self.app.display_info(
            f"[gradviz_widgets] {Path(cmd[0]).name} {' '.join(cmd[1:])} (in {cwd})"
        )
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"`{' '.join(cmd)}` failed in {cwd} (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        if proc.stdout.strip():
            self.app.display_info(proc.stdout.strip())
