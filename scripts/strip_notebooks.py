#!/usr/bin/env python
"""Strip outputs, execution counts and run-time metadata from notebooks before they are committed.

    python scripts/strip_notebooks.py                 # every notebooks/*.ipynb, in place
    python scripts/strip_notebooks.py a.ipynb b.ipynb
    python scripts/strip_notebooks.py --check         # exit 1 if any notebook would change

Kept: the cells' sources, their ids, cell tags, and the notebook's kernelspec. Dropped: outputs,
execution counts, per-cell run metadata (timings, scroll state) and saved widget state, which
holds a copy of every displayed widget's data and changes on every run.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
CELL_METADATA_KEPT = ("tags",)
NOTEBOOK_METADATA_KEPT = ("kernelspec", "language_info")


def strip(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without outputs or run-time state (changes `nb` in place and returns it)."""
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict(
            {k: v for k, v in cell.metadata.items() if k in CELL_METADATA_KEPT}
        )
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        if "attachments" in cell and not cell.attachments:
            del cell["attachments"]
    meta = {k: v for k, v in nb.metadata.items() if k in NOTEBOOK_METADATA_KEPT}
    if "language_info" in meta:  # the interpreter version of whoever ran it last: noise
        meta["language_info"] = {"name": meta["language_info"].get("name", "python")}
    nb.metadata = nbformat.from_dict(meta)
    return nb


def text_of(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths",
        nargs="*",
        type=pathlib.Path,
        help="notebooks to strip (default: notebooks/*.ipynb)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a notebook has outputs or run-time state",
    )
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "notebooks").glob("*.ipynb"))
    changed = []
    for path in paths:
        before = path.read_text(encoding="utf-8")
        nb = nbformat.reads(before, as_version=nbformat.NO_CONVERT)
        after = text_of(strip(nb))
        if after != before:
            changed.append(path)
            if not args.check:
                path.write_text(after, encoding="utf-8")
    for path in changed:
        print(f"{'would strip' if args.check else 'stripped'} {path}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
