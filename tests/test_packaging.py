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
        assert f"{top}/LICENSE" in names
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
        # the license file ships and matches the declared license
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        assert "License: MIT" in meta
        (lic,) = [n for n in zf.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert zf.read(lic).decode().startswith("MIT License")
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


def test_export_extra_holds_only_what_export_uses(tmp_path: pathlib.Path) -> None:
    """`[export]` promises what the exports need: they all run with nothing beyond the base
    install (graphviz's Python package blocked), so the extra lists nothing."""
    tomllib = pytest.importorskip("tomllib")

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert extras["export"] == []
    code = (
        "import sys; sys.modules['graphviz'] = None\n"
        "from gradviz_widgets import GradExplorer\n"
        "from gradviz_widgets.examples import dead_branch_example\n"
        "from torch import nn\n"
        "net, x, y = dead_branch_example()\n"
        "ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)\n"
        f"d = {str(tmp_path)!r}\n"
        "ex.export_html(d + '/p.html'); ex.export_csv(d + '/n.csv'); ex.export_json(d + '/r.json')\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
    assert (tmp_path / "p.html").stat().st_size > 100_000
