"""The README's first command, `bash scripts/demo.sh`: it starts on a root machine (fresh
containers and VMs run as root), serves a working copy of the lessons outside the tracked tree,
and using it never changes the checkout or breaks `bash scripts/test.sh`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gradviz_widgets.demo import _JS_DIR, prepare_workdir

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
JUPYTER = ROOT / ".venv" / "bin" / "jupyter"
SERVER_UP_S = 90  # after set-up (already done here: the stamp exists, so it only re-checks)
SETUP_S = 300

sys.path.insert(0, str(Path(__file__).parent))
from test_demo import CLICK, run_notebook, with_cells_after  # noqa: E402

needs_git = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)


def footprint() -> set[str]:
    """`git status` entries the demo could cause: anything under notebooks/ (tracked or not) and
    untracked top-level entries. (Other edits elsewhere in the tree are not the demo's.)"""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=normal"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    entries = set()
    for line in out.splitlines():
        path = line[3:].strip('"')
        if path.startswith("notebooks/") or (line.startswith("??") and "/" not in path.rstrip("/")):
            entries.add(line)
    return entries


def assert_lessons_stripped() -> None:
    """test_notebooks.py::test_notebook_has_no_outputs, for every tracked lesson."""
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        dirty = [
            i
            for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)
        ]
        assert not dirty and "widgets" not in nb.metadata, f"{path.name} now has outputs"
    assert not (NOTEBOOKS / "gradviz_export").exists()


def isolated_env(tmp_path: Path) -> dict[str, str]:
    """HOME and Jupyter's folders in tmp_path; no display and no browser to open."""
    home = tmp_path / "home"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "JUPYTER_TOKEN", "GRADVIZ_DEMO_DIR")
    }
    dirs = {
        "HOME": home,
        "IPYTHONDIR": home / ".ipython",
        "JUPYTER_CONFIG_DIR": home / ".jupyter",
        "JUPYTER_DATA_DIR": home / "data",
        "JUPYTER_RUNTIME_DIR": home / "runtime",
        "JUPYTERLAB_SETTINGS_DIR": home / "lab-settings",
        "JUPYTERLAB_WORKSPACES_DIR": home / "lab-workspaces",
        "npm_config_cache": home / "npm",
    }
    for value in dirs.values():
        value.mkdir(parents=True, exist_ok=True)
    env.update({k: str(v) for k, v in dirs.items()})
    env["BROWSER"] = "true"  # should anything still try to open one
    return env


def test_working_copy_is_made_once_and_kept(tmp_path, capsys):
    dest = prepare_workdir(tmp_path / "work")
    names = sorted(p.name for p in dest.glob("*.ipynb"))
    assert (
        names == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) and "quickstart.ipynb" in names
    )
    assert (dest / "quickstart.ipynb").read_bytes() == (NOTEBOOKS / "quickstart.ipynb").read_bytes()
    (dest / "quickstart.ipynb").write_text("the learner's edits")
    assert prepare_workdir(tmp_path / "work") == dest
    assert (dest / "quickstart.ipynb").read_text() == "the learner's edits"
    os.utime(dest / "quickstart.ipynb", (1, 1))  # the lesson changed after the copy was made
    prepare_workdir(tmp_path / "work")
    assert (dest / "quickstart.ipynb").read_text() == "the learner's edits"
    assert "quickstart.ipynb changed" in capsys.readouterr().err
    with pytest.raises(ValueError, match="tracked"):
        prepare_workdir(NOTEBOOKS)


@needs_git
def test_default_working_copy_is_ignored_by_git():
    paths = [".demo/quickstart.ipynb", ".demo/gradviz_export/grad_norms.csv"]
    done = subprocess.run(
        ["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.stdout.split() == paths, ".demo/ is not in .gitignore"


@needs_git
@pytest.mark.notebooks
def test_using_the_demo_leaves_the_checkout_clean(tmp_path):
    """Prepare the working copy, work through it (the click, the export buttons) and save it
    with its outputs, as JupyterLab's autosave does: the checkout is unchanged and the lessons
    still pass test_notebooks' stripped-output check."""
    before = footprint()
    dest = prepare_workdir(tmp_path / "work")
    copy = dest / "quickstart.ipynb"
    nb = nbformat.read(copy, as_version=4)
    nb = with_cells_after(
        nb, {"quickstart-10": CLICK}, end="paths = [widget.export_csv(), widget.export_json()]"
    )
    run_notebook(nb, dest, tmp_path)  # the kernel starts in the copy's folder, as in JupyterLab
    nbformat.write(nb, copy)
    assert any(c.get("outputs") for c in nbformat.read(copy, as_version=4).cells)
    assert (dest / "gradviz_export" / "grad_norms.csv").is_file()
    assert footprint() == before
    assert_lessons_stripped()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, method: str = "GET", data: object = None) -> object:
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(
        url, data=body, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        answer = r.read()
    return json.loads(answer) if answer else None


def run_in_kernel(connection_file: Path, code: str) -> str:
    """stdout of `code` in the running kernel whose connection file is given."""
    from jupyter_client import BlockingKernelClient

    kc = BlockingKernelClient()
    kc.load_connection_file(str(connection_file))
    kc.start_channels()
    out: list[str] = []
    try:
        deadline = time.monotonic() + 90
        while True:  # the kernel is still starting (no heartbeat yet): ask again
            try:
                kc.wait_for_ready(timeout=30)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        reply = kc.execute_interactive(
            code,
            timeout=120,
            output_hook=lambda m: out.append(
                m["content"].get("text", "") if m["msg_type"] == "stream" else ""
            ),
        )
    finally:
        kc.stop_channels()
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


@needs_git
@pytest.mark.skipif(not JUPYTER.exists(), reason="no JupyterLab in .venv (run scripts/setup.sh)")
def test_demo_command_serves_the_working_copy(tmp_path):
    """`bash scripts/demo.sh` as it is typed, on this machine (root here), with no display:
    JupyterLab answers on the chosen port, serves the working copy, shuts down cleanly."""
    port, token = free_port(), os.urandom(12).hex()
    env = isolated_env(tmp_path)
    env.update(GRADVIZ_DEMO_PORT=str(port), JUPYTER_TOKEN=token)
    before = footprint()
    log = tmp_path / "demo.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "scripts/demo.sh"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    api = f"http://127.0.0.1:{port}/api"
    try:
        started, status = time.monotonic(), None
        while status is None:
            elapsed = time.monotonic() - started
            if proc.poll() is not None or elapsed > SETUP_S + SERVER_UP_S:
                pytest.fail(
                    f"demo.sh {'exited ' + str(proc.returncode) if proc.poll() is not None else 'not up'}"
                    f" after {elapsed:.0f} s:\n{log.read_text(errors='replace')[-3000:]}"
                )
            try:
                status = get_json(f"{api}/status?token={token}")
            except OSError:
                time.sleep(0.5)
        # the URL it prints names the quickstart (not the launcher), and the root redirects there
        printed = log.read_text(errors="replace")
        url = f"http://127.0.0.1:{port}/lab/tree/quickstart.ipynb?token="
        assert url in printed, printed[-3000:]
        # the server's root is the working copy (the quickstart is there, the repository is not)
        listing = get_json(f"{api}/contents?token={token}")
        names = {c["name"] for c in listing["content"]}
        assert "quickstart.ipynb" in names and "pyproject.toml" not in names, names
        # its default kernel is this environment's interpreter, where the package is installed
        specs = get_json(f"{api}/kernelspecs?token={token}")
        argv0 = specs["kernelspecs"][specs["default"]]["spec"]["argv"][0]
        assert argv0 == "python" or Path(argv0).resolve().is_relative_to(ROOT / ".venv"), argv0
        # opening the quickstart there: its kernel imports the package and works in the copy's
        # folder (so the widget's exports land in the copy too)
        assert get_json(f"{api}/contents/quickstart.ipynb?token={token}")["type"] == "notebook"
        session = get_json(
            f"{api}/sessions?token={token}",
            "POST",
            {
                "path": "quickstart.ipynb",
                "name": "quickstart.ipynb",
                "type": "notebook",
                "kernel": {"name": specs["default"]},
            },
        )
        connection = Path(env["JUPYTER_RUNTIME_DIR"]) / f"kernel-{session['kernel']['id']}.json"
        cwd, module = run_in_kernel(
            connection,
            "import os, gradviz_widgets\nprint(os.getcwd()); print(gradviz_widgets.__file__)",
        ).split()
        assert Path(cwd) == ROOT / ".demo" and Path(module).is_relative_to(ROOT / "gradviz_widgets")
        get_json(f"{api}/shutdown?token={token}", method="POST")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert "--allow-root" not in " ".join(proc.args)
    assert footprint() == before
    assert_lessons_stripped()


@pytest.mark.skipif(
    shutil.which("dot") is None and not (_JS_DIR / "node_modules" / "@viz-js" / "viz").exists(),
    reason="neither system Graphviz nor js/node_modules for WASM Graphviz",
)
def test_headless_demo_command(tmp_path):
    """Run from elsewhere with a relative DIR: the page lands there (it went into the checkout,
    as an untracked folder)."""
    env = isolated_env(tmp_path)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh"), "--headless", "headless out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SETUP_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (ROOT / "headless out").exists()
    assert {p.name for p in (tmp_path / "headless out").iterdir()} == {
        "index.html",
        "graph.svg",
        "grad_norms.csv",
        "grad_report.json",
    }


def test_setup_says_to_delete_a_venv_that_does_not_run_here(tmp_path):
    """A .venv copied from another user links to an interpreter this one cannot run: set-up
    says to delete it (it failed with a bare "Permission denied" from venv)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to("/nonexistent/bin/python3")
    done = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert "does not run here" in done.stderr and "rm -rf .venv" in done.stderr
