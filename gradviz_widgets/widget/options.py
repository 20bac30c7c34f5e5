"""`GradExplorer.show()`'s options, checked before anything is built: each wrong value is a
GradExplorerError naming the option and what it takes (they were traitlets' "Invalid
selection: value not found", or accepted and drawn wrong)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import GradExplorerError

#: what the chart draws: a bar per parameter or per module
CHART_MODES = ("param", "module")
_CSS_LENGTH = re.compile(r"\d+(\.\d+)?(px|em|rem|vh|%)")


def checked_depth(depth: Any) -> int | str | None:
    """ "auto", "full" (or None, as "full": returned as None) or a fold depth, an int >= 0.

    Example:
        >>> checked_depth("full"), checked_depth(2)
        (None, 2)
    """
    if depth in ("auto", "full", None):
        return None if depth == "full" else depth
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise GradExplorerError(
            f"depth must be 'auto', 'full' or a fold depth (an int >= 0), got {depth!r}"
        )
    return depth


def checked_height(height: Any) -> str:
    """A CSS length ("520px", "60vh", "40em"); an int is pixels.

    Example:
        >>> checked_height(600), checked_height("60vh")
        ('600px', '60vh')
    """
    if isinstance(height, int) and not isinstance(height, bool) and height > 0:
        return f"{height}px"
    if isinstance(height, str) and _CSS_LENGTH.fullmatch(height.strip()):
        return height.strip()
    raise GradExplorerError(
        f"height must be a CSS length such as '520px' or '60vh' (an int is pixels), got {height!r}"
    )


def checked_chart_mode(chart_mode: Any) -> str:
    """ "param" (a bar per parameter) or "module"."""
    if chart_mode not in CHART_MODES:
        raise GradExplorerError(f"chart_mode must be one of {CHART_MODES}, got {chart_mode!r}")
    return str(chart_mode)


def checked_max_nodes(max_nodes: Any) -> int:
    """The auto view's node budget: an int >= 1."""
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise GradExplorerError(f"max_nodes must be an int >= 1, got {max_nodes!r}")
    return max_nodes


def check_names(options: Mapping[str, Any], takes: Callable[..., Any]) -> None:
    """Every option is one `takes` (the widget's constructor) has a parameter for: a misspelt
    one is a GradExplorerError listing them (it was a TypeError about __init__).

    Example:
        >>> def widget(explorer, *, depth="auto", height="520px"): ...
        >>> check_names({"depht": 1}, widget)
        Traceback (most recent call last):
        ...
        gradviz_widgets.errors.GradExplorerError: show() takes no option 'depht'; its options: depth, height
    """
    params = inspect.signature(takes).parameters
    names = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = [k for k in options if k not in names]
    if unknown:
        said = ", ".join(repr(k) for k in unknown)
        raise GradExplorerError(f"show() takes no option {said}; its options: {', '.join(names)}")
