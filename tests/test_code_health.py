"""Structure that keeps the code easy to change: one-way imports, short functions, thin widget.

These read the source with `ast` (nothing is imported), so they are fast and fail with the
offending module named. Every import counts: at module level, under `if TYPE_CHECKING:` and
inside functions. See docs/architecture.md for the packages and the arrows between them.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from typing import NamedTuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "gradviz_widgets"

#: the analysis side (packages, and the shared modules at the root): never imports widget code
#: or notebook-UI libraries
ANALYSIS_PACKAGES = ("graph", "report", "stats", "trace", "hooks", "run", "distributed", "explorer")
ANALYSIS_ROOT = ("vocabulary", "ids", "errors", "export", "distributed_fsdp")
UI_LIBS = ("ipywidgets", "anywidget", "traitlets", "plotly", "IPython")
WIDGET_CODE = ("widget", "render.chart", "watch.widget", "watch.figures")
MAX_FUNCTION_LINES = 60

#: the import circles there are, each inside one package and closed by a lazy import in a
#: convenience method; a new circle fails until it is broken or named here
NAMED_CIRCLES = {
    frozenset({"graph.grad_graph", "graph.groups", "graph.view"}): "GradGraph.view() folds",
    frozenset({"report.grad_report", "report.compare"}): "GradReport.compare()",
    frozenset({"watch.watch", "watch.recorded", "watch.page"}): "RecordedRun.export_html()",
}
#: package faces other modules may import names from (they are the public face of their
#: package, not a compatibility path); the examples import what users import, from any face
FACES = ("examples", "watch")
#: private names taken across modules (none: keep it so)
PRIVATE_EXCEPTIONS: set[tuple[str, str, str]] = set()


class Import(NamedTuple):
    target: str  # the module imported from (dotted, inside the package; "" is the package)
    name: str | None  # the name taken from it (None for `import a.b`)
    lazy: bool  # inside a function: runs when called, not when the module loads


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _package(name: str) -> str:
    """The top-level subpackage of a module, or the module itself at the root."""
    return name.split(".")[0]


def _walk(tree: ast.AST, lazy: bool = False):  # type: ignore[no-untyped-def]
    for node in ast.iter_child_nodes(tree):
        yield node, lazy
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _walk(node, inner)


@functools.cache
def _imports(name: str) -> list[Import]:
    """Every package-internal import of module `name`: module level, TYPE_CHECKING, functions."""
    path = MODULES[name]
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    package = [p for p in package if p]
    found = []
    for node, lazy in _walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if not (node.module or "").startswith("gradviz_widgets"):
                    continue
                base: list[str] = []
                mod = (node.module or "").removeprefix("gradviz_widgets").lstrip(".")
            else:
                base = package[: len(package) - node.level + 1]
                mod = node.module or ""
            target = ".".join([*base, *([mod] if mod else [])]).strip(".")
            for a in node.names:
                sub = f"{target}.{a.name}".strip(".")
                if sub in MODULES:  # `from . import ids`: the module itself
                    found.append(Import(sub, None, lazy))
                else:
                    found.append(Import(target, a.name, lazy))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gradviz_widgets"):
                    found.append(
                        Import(a.name.removeprefix("gradviz_widgets").lstrip("."), None, lazy)
                    )
    return found


def _graph(include_lazy: bool) -> dict[str, set[str]]:
    graph = {
        m: {i.target for i in _imports(m) if (include_lazy or not i.lazy) and i.target in MODULES}
        for m in MODULES
    }
    graph.pop("", None)  # the package __init__ re-exports; it is never imported by its parts
    for m, deps in graph.items():
        deps.discard("")
        deps.discard(m)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected parts with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                part = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    part.add(w)
                    if w == v:
                        break
                if len(part) > 1:
                    out.append(frozenset(part))
    return out


def test_module_level_imports_go_one_way() -> None:
    """Without the imports inside functions (TYPE_CHECKING ones count), there is no circle."""
    circles = _circles(_graph(include_lazy=False))
    assert not circles, f"import circles at module level: {[sorted(c) for c in circles]}"


def test_every_circle_is_inside_one_package_and_named() -> None:
    circles = set(_circles(_graph(include_lazy=True)))
    for c in circles:
        packages = {_package(m) for m in c}
        assert len(packages) == 1, f"import circle across packages {packages}: {sorted(c)}"
    unnamed = circles - set(NAMED_CIRCLES)
    assert not unnamed, (
        f"new import circles (break them, or name them): {[sorted(c) for c in unnamed]}"
    )


def test_packages_depend_one_way() -> None:
    """Packages (and the modules at the root) form a graph without circles: every import."""
    graph: dict[str, set[str]] = {}
    for m, deps in _graph(include_lazy=True).items():
        graph.setdefault(_package(m), set()).update(
            _package(d) for d in deps if _package(d) != _package(m)
        )
    circles = _circles(graph)
    assert not circles, f"packages import each other: {[sorted(c) for c in circles]}"


def test_no_module_takes_another_modules_private_names() -> None:
    found = {
        (m, i.target, i.name)
        for m in MODULES
        for i in _imports(m)
        if i.name and i.name.startswith("_") and not i.name.startswith("__") and i.target != m
    }
    assert found <= PRIVATE_EXCEPTIONS, f"private names taken: {sorted(found - PRIVATE_EXCEPTIONS)}"


@functools.cache
def _defined(name: str) -> set[str]:
    """Names module `name` defines itself (not the ones it imports)."""
    out = set()
    for node in ast.parse(MODULES[name].read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return out


def test_names_come_from_the_module_that_defines_them() -> None:
    """Inside the package nobody uses a re-export (the thin modules at documented paths, such
    as `gradviz_widgets.export`, are for users)."""
    bad = [
        f"{m} takes {i.name} from {i.target}"
        for m in MODULES
        if m  # the package face re-exports by design
        for i in _imports(m)
        if i.name and i.target in MODULES and i.target not in FACES
        if not (m.startswith("examples.") and MODULES[i.target].name == "__init__.py")
        if i.name not in _defined(i.target)
    ]
    assert not bad, f"re-exports used inside the package: {bad}"


def _analysis() -> list[str]:
    return [m for m in MODULES if _package(m) in ANALYSIS_PACKAGES or m in ANALYSIS_ROOT]


def _external(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_analysis_never_imports_widget_code() -> None:
    """UI libraries: not even lazily. Widget code: only lazily, in `GradExplorer.show()` and
    `compare()` (the convenience methods that build the widget)."""
    assert len(_analysis()) > 40
    for name in _analysis():
        bad = _external(MODULES[name]) & set(UI_LIBS)
        assert not bad, f"{name} imports {bad}"
        inner = {
            i.target
            for i in _imports(name)
            if not i.lazy and (i.target + ".").startswith(tuple(w + "." for w in WIDGET_CODE))
        }
        assert not inner, f"{name} imports widget code {inner}"


def test_functions_stay_short() -> None:
    """No function or method over 60 lines (decorators and docstring included), as formatted."""
    long = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them): {long}"


#: classes whose annotations name attributes their own code never assigns: a mixin re-declaring
#: its host's state (issue 22). None in widget/; each one left is named with its reason.
REDECLARING: dict[str, str] = {}
#: bases whose class-level annotations are fields (assigned by the generated __init__)
FIELD_BASES = {"NamedTuple", "Protocol", "TypedDict", "Enum", "IntEnum", "StrEnum"}


def _classes() -> dict[str, ast.ClassDef]:
    """Every class of the package as module.Class (nested classes included)."""
    out = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                out[f"{name}.{node.name}"] = node
    return out


def _base_names(cls: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases}


def _has_fields(cls: ast.ClassDef) -> bool:
    decorated = any("dataclass" in ast.unparse(d) for d in cls.decorator_list)
    return decorated or bool(_base_names(cls) & FIELD_BASES)


def _assigned(cls: ast.ClassDef) -> set[str]:
    """Attributes the class's own code sets on `self` (or registers as a buffer by name)."""
    out = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                out.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "register_buffer"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            out.add(str(node.args[0].value))
    return out


def test_no_class_declares_attributes_it_never_assigns() -> None:
    """An annotation without a value in a class body that the class never assigns is another
    class's attribute re-declared (a mixin typing its host). Split by parts that own their
    state instead (docs/architecture.md, the widget)."""
    bad = {}
    for name, cls in _classes().items():
        if _has_fields(cls):
            continue
        declared = [
            s.target.id
            for s in cls.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is None
        ]
        foreign = sorted(set(declared) - _assigned(cls))
        if foreign:
            bad[name] = foreign
    assert set(bad) == set(REDECLARING), f"classes re-declaring others' attributes: {bad}"


def test_the_explorer_widget_is_one_class_composed_of_parts() -> None:
    """No class of widget/ or explorer/ is built from other classes of the package (mixins):
    ExplorerWidget and GradExplorer are each one class in one file, ExplorerWidget holding its
    parts as attributes."""
    classes = _classes()
    ours = {name.rsplit(".", 1)[1] for name in classes}
    mixed = {
        name: sorted(_base_names(cls) & ours)
        for name, cls in classes.items()
        if name.startswith(("widget.", "explorer.")) and _base_names(cls) & ours
    }
    assert not mixed, f"widget/explorer classes built from package classes (mixins): {mixed}"
    assert not classes["explorer.session.GradExplorer"].bases
    widget = classes["widget.explorer_widget.ExplorerWidget"]
    assert [ast.unparse(b) for b in widget.bases] == ["W.VBox"]
