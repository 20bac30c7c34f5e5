"""The lesson notebooks: each one runs headless from top to bottom, and none has outputs committed.

The notebooks end with assertion cells on what a learner should see, so running them is a test
of the lessons and of the API they use. The kernel is this interpreter (`sys.executable`) with
the repository root on PYTHONPATH, started in notebooks/ as a learner's would be.

    pytest -m notebooks tests/test_notebooks.py        # run the lessons (about 1-3 minutes)
    pytest -m "not notebooks"                          # everything else
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import AsyncKernelManager  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 120
KERNEL_NAME = "gradviz-lessons-test"


def _ids(paths: list[pathlib.Path]) -> list[str]:
    return [p.stem for p in paths]


@pytest.fixture(scope="session")
def kernel_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """A kernelspec whose argv is this interpreter, so the kernel sees this environment's
    packages whatever `python` on PATH is, and whose env puts the repository on PYTHONPATH."""
    base = tmp_path_factory.mktemp("kernels")
    spec_dir = base / KERNEL_NAME
    spec_dir.mkdir()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "gradviz lessons (test)",
        "language": "python",
        "env": {"PYTHONPATH": path},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return [str(base)]


def _error_summary(err: Exception) -> str:
    text = str(err)
    return text[-4000:] if len(text) > 4000 else text


def test_there_are_lessons() -> None:
    names = {p.name for p in NOTEBOOKS}
    assert "quickstart.ipynb" in names, sorted(names)
    assert len(NOTEBOOKS) >= 10, sorted(names)


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs(path: pathlib.Path, kernel_dirs: list[str]) -> None:
    _execute(nbformat.read(path, as_version=4), kernel_dirs, path.name)


def _execute(nb: Any, kernel_dirs: list[str], name: str) -> None:
    """Run `nb` top to bottom in a fresh lesson kernel started in notebooks/."""
    km = AsyncKernelManager(
        kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=kernel_dirs)
    )
    client = nbclient.NotebookClient(
        nb, km=km, timeout=CELL_TIMEOUT_S, resources={"metadata": {"path": str(NOTEBOOK_DIR)}}
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{name} failed:\n{_error_summary(err)}", pytrace=False)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_has_no_outputs(path: pathlib.Path) -> None:
    """Outputs are not committed: run scripts/strip_notebooks.py before committing."""
    nb = nbformat.read(path, as_version=4)
    dirty = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)
    ]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; run scripts/strip_notebooks.py"
    assert "widgets" not in nb.metadata, f"{path.name} holds widget state; strip it"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_shape(path: pathlib.Path) -> None:
    """Every lesson opens with "What you will see", ends with "What to remember", and checks
    itself with assertions before that."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.cells[0].cell_type == "markdown" and "What you will see" in nb.cells[0].source
    assert nb.cells[-1].cell_type == "markdown" and "What to remember" in nb.cells[-1].source
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert any("assert " in s for s in code[-3:]), f"{path.name} ends without assertion cells"


# a learner's click (it toggles the module's hook and re-runs) after the cell shown, on the
# node the lesson points at: the lessons promise their checks hold whatever was clicked
CLICKS = [
    ("quickstart", 13, 'ex.toggle_hook("gate")\n_ = ex.run()'),
    ("05_module_hooks", 18, 'ex_inplace.toggle_hook("fc1")\n_ = ex_inplace.run()'),
    ("09_mixed_precision_checkpointing", 5, 'ex_bf16.toggle_hook("fc1")\n_ = ex_bf16.run()'),
]


@pytest.mark.notebooks
@pytest.mark.parametrize(("stem", "after", "click"), CLICKS, ids=[c[0] for c in CLICKS])
def test_checks_hold_after_a_click(stem: str, after: int, click: str, kernel_dirs: list[str]):
    """From a student: a click after the hook was turned off (quickstart), on the hooked module
    (05) or on another one (09) failed the lesson's own checks, which read live state."""
    path = NOTEBOOK_DIR / f"{stem}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(after + 1, nbformat.v4.new_code_cell(click))
    _execute(nb, kernel_dirs, f"{path.name} with a click")
