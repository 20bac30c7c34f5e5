"""The one exception type users catch."""

from __future__ import annotations


class GradExplorerError(RuntimeError):
    """Bad input or a failing model, with a message that says what to do.

    Example:
        >>> try:
        ...     raise GradExplorerError("device 'cuda' is not available; available: cpu")
        ... except GradExplorerError as e:
        ...     print(e)
        device 'cuda' is not available; available: cpu
    """
