"""Every line of JS and CSS lives in js/ (bundled, type-checked and tested in node), never in a
Python string: the offline pages and the marimo mirror read their built files from static/.

Read with `ast` (nothing imported); docstrings are prose and are not checked.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "gradviz_widgets"
#: "more than a few lines" of code in one string fails
MAX_CODE_LINES = 2

_JS = re.compile(
    r"\bfunction\b\s*[\w$]*\s*\(|=>|\b(?:const|let|var)\s+[\w$\[{]|\bdocument\.|"
    r"\.addEventListener\(|\bexport\s+default\b|\breturn\b[^.\n]*;\s*$"
)
# a rule on one line (`sel { prop: value; }`), or one declaration line of a longer rule
_CSS = re.compile(
    r"^\s*[^\s{}()][^{}]*\{\{?\s*[-a-z]+\s*:[^;{}]*;|^\s*[-a-z]+\s*:\s*[^;{}]+;\s*(\}\}?)?\s*$"
)


def code_lines(text: str) -> int:
    """How many lines of `text` read as JS or CSS.

    Example:
        >>> code_lines("const a = 1;\\nbody { margin: 0; }\\nplain words: here")
        2
    """
    return sum(bool(_JS.search(line) or _CSS.search(line)) for line in text.splitlines())


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def code_strings(package: pathlib.Path) -> list[str]:
    """`module:line (n lines)` of each string constant in `package` holding JS or CSS."""
    out = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in skip
            ):
                n = code_lines(node.value)
                if n > MAX_CODE_LINES:
                    out.append(f"{path.relative_to(package.parent)}:{node.lineno} ({n} lines)")
    return out


def test_no_js_or_css_in_python_strings() -> None:
    found = code_strings(PKG)
    assert not found, f"JS/CSS in Python strings (move it to js/, read it from static/): {found}"


def test_the_check_sees_the_old_shapes(tmp_path: pathlib.Path) -> None:
    """The page script, a stylesheet and a `{{`-escaped template style are all found."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        'SCRIPT = r"""\nconst D = JSON.parse(x);\nfunction el(tag) {\n  return 1;\n}\n"""\n'
        'STYLE = """\nbody { font: 14px; }\n.sw { width: 4px;\n  height: 2px; }\n"""\n'
        'PAGE = """<style>\nbody {{ margin: 0; }}\nmain {{ gap: 2px; }}\n#g {{ flex: 1; }}\n"""\n'
        'TEXT = """Prose: with colons; and semicolons.\nAnd a {placeholder}.\n"""\n'
    )
    assert [f.split(" ")[0] for f in code_strings(tmp_path / "pkg")] == [
        "pkg/a.py:1",
        "pkg/a.py:7",
        "pkg/a.py:12",
    ]


def test_the_built_files_come_from_js() -> None:
    """Each file the Python side reads from static/ has its source in js/."""
    from gradviz_widgets.frontend import COPIED

    for name in (*COPIED, "watch_page.js", "marimo_mirror.js"):
        assert (ROOT / "js" / name).is_file(), name
    build = (ROOT / "js" / "build.mjs").read_text(encoding="utf-8")
    for name in ("watch_page", "marimo_mirror", "watch_page.css", "marimo_mirror.css"):
        assert f'"{name}"' in build, name
