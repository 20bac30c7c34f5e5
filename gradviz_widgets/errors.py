"""The one exception type users catch."""

from __future__ import annotations

import os
import sys


class GradExplorerError(RuntimeError):
    """Bad input or a failing model, with a message that says what to do.

    Example:
        >>> try:
        ...     raise GradExplorerError("device 'cuda' is not available; available: cpu")
        ... except GradExplorerError as e:
        ...     print(e)
        device 'cuda' is not available; available: cpu
    """


def did_you_mean(close: list[str]) -> str:
    """The suggestion part of a "no such name" message: nothing when nothing is close.

    Example:
        >>> did_you_mean(["gate", "gate2"]), did_you_mean([])
        (" (did you mean 'gate' or 'gate2'?)", '')
    """
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    return f" (did you mean {' or '.join(quoted) if len(quoted) < 3 else ', '.join(quoted)}?)"


def user_stacklevel() -> int:
    """The `stacklevel` for a `warnings.warn` called right after this that names the first
    frame outside this package and torch: the user's line (an optimizer hook's warning
    otherwise points into the package, which says nothing to whoever reads it).

    Example:
        >>> user_stacklevel() >= 1
        True
    """
    skip = tuple(_package_dirs())
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def _package_dirs() -> list[str]:
    dirs = [os.path.dirname(os.path.abspath(__file__)) + os.sep]
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)  # never imported here
    if torch_file:
        dirs.append(os.path.dirname(os.path.abspath(torch_file)) + os.sep)
    return dirs
