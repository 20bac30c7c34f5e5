"""`python -m gradviz_widgets.demo OUT_DIR`: the explorer on the dead-branch demo model, headless.

Writes OUT_DIR/graph.svg, grad_norms.csv, grad_report.json and index.html (the interactive
standalone page of `GradExplorer.export_html`: graph, chart and findings; opens offline).

`python -m gradviz_widgets.demo --workdir DIR` copies the lesson notebooks into DIR (kept when
there already) and prints DIR: `scripts/demo.sh` opens that working copy, so running the lessons
and the widget's exports never change the tracked notebooks.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from torch import nn

from .errors import GradExplorerError
from .examples import dead_branch_example
from .explorer.session import GradExplorer
from .render.dot import svg_with_dot, to_dot

_JS_DIR = Path(__file__).resolve().parent.parent / "js"
_NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def prepare_workdir(dest: str | Path = ".demo", lessons: str | Path = _NOTEBOOKS) -> Path:
    """Copy the lesson notebooks into `dest` for the demo to open; returns its absolute path.

    A copy already there is the learner's (outputs, edits) and is kept; when its lesson changed
    since, a note on stderr says how to get the new one. The copies are plain notebooks: the
    kernel imports the installed package, and exports land beside them.

    Example:
        >>> prepare_workdir(".demo")       # doctest: +SKIP
        PosixPath('/path/to/checkout/.demo')
    """
    dest, lessons = Path(dest).resolve(), Path(lessons).resolve()
    if dest == lessons:
        raise ValueError(f"{dest} holds the tracked lessons; the working copy goes elsewhere")
    dest.mkdir(parents=True, exist_ok=True)
    for lesson in sorted(lessons.glob("*.ipynb")):
        copy = dest / lesson.name
        if not copy.exists():
            shutil.copyfile(lesson, copy)
        elif (
            lesson.stat().st_mtime > copy.stat().st_mtime
            and lesson.read_bytes() != copy.read_bytes()
        ):
            print(
                f"note: {lesson.name} changed since your copy {copy} was made; delete the copy "
                "to get the new version",
                file=sys.stderr,
            )
    return dest


def layout_svg(dot: str) -> str:
    """SVG from DOT: the system `dot` when installed, else WASM Graphviz under Node.js."""
    if shutil.which("dot"):
        return svg_with_dot(dot)
    viz = _JS_DIR / "node_modules" / "@viz-js" / "viz"
    if shutil.which("node") and viz.exists():
        script = (
            "import {instance} from '@viz-js/viz';let s='';process.stdin.on('data',d=>s+=d);"
            "process.stdin.on('end',async()=>{process.stdout.write((await instance())"
            ".renderString(s,{format:'svg'}));});"
        )
        done = subprocess.run(
            ["node", "--input-type=module", "-e", script],
            input=dot.encode(),
            capture_output=True,
            cwd=_JS_DIR,
            timeout=120,
            check=False,
        )
        if done.returncode == 0:
            return done.stdout.decode()
    raise GradExplorerError(
        "no Graphviz layout available: install graphviz (`dot`) or run "
        "`npm ci` in js/ so WASM Graphviz can run under Node.js"
    )


def write_demo(out_dir: str | Path) -> dict[str, Path]:
    """Run the explorer on the dead-branch network and write the files; returns their paths.

    Example:
        >>> paths = write_demo("out")      # doctest: +SKIP
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    net, x, y = dead_branch_example()
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    ex.toggle_hook("gate")
    ex.run()
    svg = layout_svg(to_dot(ex.graph, title="DeadBranchNet: backward graph by module"))
    paths = {
        "svg": out / "graph.svg",
        "csv": ex.export_csv(out / "grad_norms.csv"),
        "json": ex.export_json(out / "grad_report.json"),
        "html": out / "index.html",
    }
    paths["svg"].write_text(svg, encoding="utf-8")
    ex.export_html(paths["html"], title="DeadBranchNet: gradient flow")
    ex.close()
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", nargs="?", default="out", help="folder to write into")
    parser.add_argument(
        "--workdir",
        metavar="DIR",
        help="copy the lesson notebooks into DIR (kept if there) and print DIR",
    )
    args = parser.parse_args(argv)
    if args.workdir:
        try:
            print(prepare_workdir(args.workdir))
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    try:
        paths = write_demo(args.out_dir)
    except GradExplorerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for kind, path in paths.items():
        print(f"{kind:5} {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
