"""Structure that keeps the code easy to change: one-way imports, short functions, thin widget.

These read the source with `ast` (nothing is imported), so they are fast and fail with the
offending module named.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "gradviz_widgets"

#: the analysis side: never imports widget code or notebook-UI libraries
ANALYSIS = (
    "trace.attribution",
    "run.backward",
    "run.capture",
    "run.freeze",
    "run.stages",
    "run.model_state",
    "run.checks",
    "report.compare",
    "run.devices",
    "report.diagnose",
    "distributed.ddp",
    "distributed.fsdp",
    "errors",
    "explorer",
    "explorer_export",
    "explorer_hooks",
    "graph.grad_graph",
    "graph.nodes",
    "hooks.clash",
    "hooks.config",
    "hooks.events",
    "hooks.fallback",
    "hooks.plan",
    "hooks.recorder",
    "hooks.run",
    "ids",
    "run.inputs",
    "hooks.modifiers",
    "report.grad_report",
    "run.settings",
    "run.state",
    "stats.norms",
    "stats.tensor",
    "vocabulary",
    "trace.walk",
)
UI_LIBS = ("ipywidgets", "anywidget", "traitlets", "plotly", "IPython")
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: pathlib.Path) -> set[str]:
    """Package-internal modules imported at module level (not inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            if node.level == 0:
                if not (node.module or "").startswith("gradviz_widgets"):
                    continue
                base = []
                mod = (node.module or "").removeprefix("gradviz_widgets").lstrip(".")
            else:
                mod = node.module or ""
            target = ".".join([*base, *([mod] if mod else [])]).strip(".")
            found.add(target)
            found.update(f"{target}.{a.name}".strip(".") for a in node.names)
    return found


def _external(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_import_cycles() -> None:
    mods = _modules()
    graph = {m: {i for i in _imports(m, p) if i in mods and i != m} for m, p in mods.items()}
    graph.pop("", None)  # the package __init__ re-exports; it is never imported by its parts
    for deps in graph.values():
        deps.discard("")
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in graph.get(m, ()):
            assert state.get(d) != 1, f"import cycle: {' -> '.join([*stack, m, d])}"
            if d not in state:
                visit(d, [*stack, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


def test_analysis_never_imports_widget_code() -> None:
    mods = _modules()
    for name in ANALYSIS:
        path = mods[name]
        bad = _external(path) & set(UI_LIBS)
        assert not bad, f"{name} imports {bad}"
        inner = {
            i
            for i in _imports(name, path)
            if i.startswith(
                ("widget", "graph_pane", "render.chart", "render.readout", "watch.widget")
            )
        }
        assert not inner, f"{name} imports widget code {inner}"


def test_functions_stay_short() -> None:
    """No function or method over 60 lines (decorators and docstring included), as formatted."""
    long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them): {long}"
