"""The sdist ships the built front end, so a wheel built from it needs no Node.js.

Builds without isolation (hatchling and hatch-jupyter-builder come with the test extras), so
no network is needed.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUNDLE = "gradviz_widgets/static/graph_pane.js"

pytest.importorskip("build")
pytest.importorskip("hatch_jupyter_builder")


def _build(
    src: pathlib.Path, kind: str, out: pathlib.Path, env: dict | None = None
) -> pathlib.Path:
    cmd = [sys.executable, "-m", "build", f"--{kind}", "--no-isolation", "-o", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    suffix = ".tar.gz" if kind == "sdist" else ".whl"
    (built,) = [p for p in out.iterdir() if p.name.endswith(suffix)]
    return built


def test_sdist_ships_bundle_and_wheel_from_it_needs_no_node(tmp_path: pathlib.Path) -> None:
    if not (ROOT / BUNDLE).is_file():
        pytest.skip("bundle not built in this checkout")
    sdist = _build(ROOT, "sdist", tmp_path / "dist")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        assert f"{top}/{BUNDLE}" in names
        assert not any("/node_modules/" in n for n in names)
        tar.extractall(tmp_path / "src", filter="data")
    # a PATH with python but without node / npm
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("sh", "bash", "git", "uname"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}:{bare}"}
    assert shutil.which("npm", path=env["PATH"]) is None
    wheel = _build(tmp_path / "src" / top, "wheel", tmp_path / "wheel", env=env)
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(BUNDLE)
        assert info.file_size > 100_000  # the real bundle (WASM Graphviz inside), not a stub
        assert (
            "export function pageModel" in zf.read("gradviz_widgets/static/page_host.js").decode()
        )  # export_html works from a wheel
        # the offline watch page and the marimo mirror, built from js/ (not Python strings)
        built = {
            name: zf.read(f"gradviz_widgets/static/{name}").decode()
            for name in (
                "watch_page.js",
                "watch_page.css",
                "marimo_mirror.js",
                "marimo_mirror.css",
                "explorer_page.css",
            )
        }
        assert "watch-data" in built["watch_page.js"] and "#heat" in built["watch_page.css"]
        assert "export{" in built["marimo_mirror.js"].replace(" ", "")
        assert (
            ".gvm-button" in built["marimo_mirror.css"] and "#chart" in built["explorer_page.css"]
        )
        # every module of every subpackage ships (graph/, render/, watch/, ...)
        sources = {
            p.relative_to(ROOT).as_posix()
            for p in (ROOT / "gradviz_widgets").rglob("*.py")
            if "__pycache__" not in p.parts
        }
        assert sources <= set(zf.namelist()), sorted(sources - set(zf.namelist()))
