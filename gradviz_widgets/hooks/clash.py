"""When register_full_backward_hook cannot work, as a typed signal, and what runs learned from it.

torch says so only in an error's text; `inplace_clash` is the one place that reads it
(tests/hooks/test_hook_clash.py triggers the real errors, so a change of wording fails loudly there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

from ..errors import GradExplorerError

#: torch's words when an in-place op modifies what a full backward hook's Function returned
#: ("Output 0 of BackwardHookFunction is a view and is being modified inplace. This view was
#: created inside a custom Function ..."), directly or through a view of it ("Output 0 of
#: Select is a view ... created inside a custom Function")
TORCH_CLASH_TEXT = ("BackwardHookFunction", "created inside a custom Function")
DEFAULT_REASON = "register_full_backward_hook failed here"


@dataclasses.dataclass(frozen=True)
class InplaceClash:
    """register_full_backward_hook cannot be used in a run: why, and on which module if known.

    torch does not say which module's output was modified in place, so `target` is None then.
    """

    reason: str = DEFAULT_REASON
    target: str | None = None


class Unhookable(GradExplorerError):
    """register_full_backward_hook cannot see a module (it returns no tensor or tuple)."""

    def __init__(self, message: str, clash: InplaceClash) -> None:
        super().__init__(message)
        self.clash = clash


def inplace_clash(error: BaseException) -> InplaceClash | None:
    """The clash `error` (or an exception it was raised from) reports, else None.

    Example:
        >>> inplace_clash(RuntimeError("Output 0 of BackwardHookFunction is a view"))
        InplaceClash(reason='register_full_backward_hook failed here', target=None)
        >>> inplace_clash(ValueError("shapes do not match")) is None
        True
    """
    for e in _chain(error):
        if isinstance(e, Unhookable):
            return e.clash
        # our own messages quote torch's; only torch's own exception counts
        torchs = isinstance(e, RuntimeError) and not isinstance(e, GradExplorerError)
        if torchs and any(words in str(e) for words in TORCH_CLASH_TEXT):
            return InplaceClash()
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


@dataclasses.dataclass(frozen=True)
class HookFacts:
    """What runs learned about the model's modules; the explorer keeps it between runs, apart
    from the plan. `fallback`: module path -> why its backward hook is done with tensor hooks;
    `writes_args`: modules seen writing into an argument in place (their arguments are hooked as
    they are, not through an alias, whose in-place write would add view-replay nodes and move
    the graph's ids).

    Example:
        >>> facts = HookFacts().falling_back(["fc"], InplaceClash())
        >>> dict(facts.fallback), facts.can_fall_back(["fc"])
        ({'fc': 'register_full_backward_hook failed here'}, False)
    """

    fallback: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    writes_args: frozenset[str] = frozenset()

    def can_fall_back(self, backward_targets: Iterable[str]) -> bool:
        """Whether some backward hook still uses register_full_backward_hook."""
        return any(t not in self.fallback for t in backward_targets)

    def falling_back(self, backward_targets: Iterable[str], clash: InplaceClash) -> HookFacts:
        """These facts with every backward hook done with tensor hooks: the fallback is
        all-or-nothing, torch does not say which module's output was modified in place."""
        reasons = dict(self.fallback)
        if clash.target is not None:
            reasons.setdefault(clash.target, clash.reason)
        for t in backward_targets:
            reasons.setdefault(t, clash.reason if clash.target is None else DEFAULT_REASON)
        return dataclasses.replace(self, fallback=MappingProxyType(reasons))

    def with_fallback(self, target: str, reason: str) -> HookFacts:
        """These facts with `target`'s backward hook done with tensor hooks."""
        if target in self.fallback:
            return self
        return dataclasses.replace(
            self, fallback=MappingProxyType({**self.fallback, target: reason})
        )

    def writing(self, target: str) -> HookFacts:
        """These facts with `target` known to write into an argument in place."""
        return dataclasses.replace(self, writes_args=self.writes_args | {target})
