"""Gradient modifiers a hook can apply to the gradient flowing back through a module or node."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence

import torch

from ..report.grad_report import GradReport

MODIFIER_KINDS = ("clip_norm", "clip_value", "scale")


@dataclasses.dataclass(frozen=True)
class Modifier:
    """Clip by total L2 norm (`clip_norm`, value = max_norm), clamp each element
    (`clip_value`, value = threshold) or multiply (`scale`, value = factor).

    The norm is taken over all gradients together, as `torch.nn.utils.clip_grad_norm_` does
    (seed material calls `torch.norm` on the tuple, which raises).

    Example:
        >>> Modifier("clip_norm", 1.0).apply([torch.tensor([3.0, 4.0])])[0]
        tensor([0.6000, 0.8000])
    """

    kind: str
    value: float

    def __post_init__(self) -> None:
        if self.kind not in MODIFIER_KINDS:
            raise ValueError(f"modifier kind must be one of {MODIFIER_KINDS}, got {self.kind!r}")
        value = self.value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{self.kind} must be a number, got {type(value).__name__} {value!r}")
        if math.isnan(value):
            raise ValueError(f"{self.kind} must be a number, got NaN")
        if self.kind in ("clip_norm", "clip_value") and not value > 0:
            raise ValueError(f"{self.kind} needs a positive value, got {value}")
        if self.kind == "scale" and not 0 <= value < math.inf:
            raise ValueError(
                f"scale must be a finite factor >= 0 (0 silences the gradient), got {value}; "
                "a negative factor would reverse it"
            )

    def describe(self) -> str:
        return {
            "clip_norm": f"clip by norm {self.value:g}",
            "clip_value": f"clip by value {self.value:g}",
            "scale": f"scale by {self.value:g}",
        }[self.kind]

    def apply(self, grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
        """Modified copies of `grads` (None entries stay None); the inputs are not changed."""
        present = [g for g in grads if g is not None]
        if not present:
            return list(grads)
        if self.kind == "scale":
            return [None if g is None else g * self.value for g in grads]
        if self.kind == "clip_value":
            return [None if g is None else g.clamp(-self.value, self.value) for g in grads]
        total = torch.linalg.vector_norm(
            torch.stack(
                [
                    torch.linalg.vector_norm(g.abs() if g.is_complex() else g, dtype=torch.float32)
                    for g in present
                ]
            )
        )
        factor = (self.value / (total + 1e-6)).clamp(max=1.0)  # no host sync, as clip_grad_norm_
        return [None if g is None else g * factor.to(g.dtype) for g in grads]


def mark_modified(report: GradReport, baseline: GradReport, modifiers: dict) -> GradReport:
    """Flag every parameter whose gradient differs from an unmodified run, with its old norm."""
    what = "; ".join(f"{m.describe()} at {t or 'root'}" for t, m in modifiers.items())
    before = baseline.param_norms
    params = tuple(
        dataclasses.replace(p, modified_by=what, norm_before=before.get(p.name))
        if not _same_norm(p.norm, before.get(p.name))
        else p
        for p in report.params
    )
    changed = sum(p.modified_by is not None for p in params)
    note = f"{changed} parameter gradients changed by modifiers ({what})"
    return dataclasses.replace(report, params=params, findings=(*report.findings, note))


def _same_norm(a: float | None, b: float | None) -> bool:
    """Equal norms, with NaN equal to NaN (a gradient NaN in both runs was not modified)."""
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))
