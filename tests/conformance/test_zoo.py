"""Every registry case against a deep copy + plain `loss.backward()`, and the model untouched.

One run per case (cached); separate tests read its outcome, so an expected failure marks exactly
the aspect (norms, statuses, module norms, state) of exactly the case that fails today.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import pytest
import torch

from gradviz_widgets import GradExplorer

from . import models_calls, models_hf, models_more, models_special  # noqa: F401  (they register cases)
from .models import CASES, Case
from .reference import expected_status, reference
from .state import diff, optimizer_problems, snapshot
from .xfails import XFAIL


@dataclasses.dataclass
class Outcome:
    case: Case
    ref: dict
    ref_loss: float
    report: object = None
    hooked: object = None  # the report of a second run: hooks and an identity modifier on
    error: BaseException | None = None
    graph: object = None  # the first run's graph
    after_run: list = dataclasses.field(default_factory=list)
    after_close: list = dataclasses.field(default_factory=list)

    def result(self):
        if self.error is not None:
            raise self.error
        return self.report


@functools.cache
def outcome(name: str) -> Outcome:
    c = CASES[name]()
    model = c.model
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainable[0].grad = torch.full_like(trainable[0], 0.25)  # a user .grad must stay as it is
    model.register_forward_pre_hook(_user_hook)  # the user's own hooks must stay, and stay alone
    model.register_forward_hook(_user_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with c.context():
        ref, ref_loss = reference(c)
    result = Outcome(c, ref, ref_loss)
    outside = snapshot(model)
    ex = None
    with c.context():
        inside = snapshot(model)
        try:
            ex = GradExplorer(model, c.sample, loss_fn=c.loss_fn, target=c.target)
            result.report = ex.run()
            result.graph = ex.graph
        except Exception as e:  # noqa: BLE001  (re-raised by the tests that need the report)
            result.error = e
        if ex is not None and result.error is None:
            result.hooked = _hooked_run(ex, model)
        result.after_run = diff(inside, snapshot(model)) + optimizer_problems(opt, model)
    if ex is not None:
        ex.close()
    result.after_close = diff(outside, snapshot(model)) + optimizer_problems(opt, model)
    return result


def _user_hook(*args):
    return None


def _hooked_run(ex, model):
    try:
        for path, kind in _hook_targets(model):
            ex.set_hook(path, kind)
            if kind == "backward":
                ex.set_modifier(path, scale=1.0)  # runs the baseline + modified pair
        return ex.run()
    except Exception as e:  # noqa: BLE001  (re-raised by test_norms_match_with_module_hooks_on)
        return e


def _hook_targets(model) -> list[tuple[str, str]]:
    """A backward hook on the first child that holds parameters, a forward hook on the last."""
    holders = [
        p for p, m in model.named_modules() if p and any(True for _ in m.parameters(recurse=False))
    ]
    if not holders:
        return []
    return [(holders[0], "backward"), (holders[-1], "forward")]


def cases_for(test: str) -> list:
    return [
        pytest.param(n, id=n, marks=pytest.mark.xfail(strict=True, reason=XFAIL[test, n]))
        if (test, n) in XFAIL
        else n
        for n in CASES
    ]


@pytest.mark.parametrize("name", cases_for("norms"))
def test_norms_match_plain_backward(name: str) -> None:
    o = outcome(name)
    check_norms(o, o.result())


@pytest.mark.parametrize("name", cases_for("norms_hooked"))
def test_norms_match_with_module_hooks_on(name: str) -> None:
    """Backward and forward hooks (fallback included) observe and a scale-1 modifier changes no
    bit: the norms stay, and no parameter is marked modified."""
    o = outcome(name)
    o.result()
    if isinstance(o.hooked, BaseException):
        raise o.hooked
    check_norms(o, o.hooked)
    marked = {p.name: p.modified_by for p in o.hooked.params if p.modified_by}
    assert not marked, f"marked modified by a scale-1 modifier: {marked}"


def check_norms(o: Outcome, report) -> None:
    assert list(report.param_norms) == list(o.ref), "parameter names/order differ"
    wrong = {}
    for pname, ref in o.ref.items():
        got = report.param_norms[pname]
        if ref is None or got is None:
            if (ref is None) != (got is None):
                wrong[pname] = (got, ref)
        elif not math.isclose(got, ref[0], rel_tol=o.case.rtol, abs_tol=1e-12):
            wrong[pname] = (got, ref[0])
    assert not wrong, f"explorer vs reference norms: {wrong}"
    assert math.isclose(report.loss, o.ref_loss, rel_tol=1e-6, abs_tol=1e-7), (
        report.loss,
        o.ref_loss,
    )


@pytest.mark.parametrize("name", cases_for("status"))
def test_statuses_and_none_reasons(name: str) -> None:
    """none exactly where .grad is None (with a reason), zero where it is all zeros, and the
    documented threshold rules elsewhere."""
    o = outcome(name)
    report = o.result()
    status, reasons = report.param_status, report.none_reasons
    wrong = {}
    for pname, ref in o.ref.items():
        expected = expected_status(ref, report.thresholds)
        if status[pname] != expected:
            wrong[pname] = (status[pname], expected)
        if (expected == "none") != bool(reasons.get(pname)):
            wrong[pname] = ("none_reason", reasons.get(pname), expected)
    assert not wrong, f"status (got, expected): {wrong}"
    if not any(s == "nonfinite" for s in status.values()) and math.isfinite(o.ref_loss):
        assert report.nonfinite_origin is None, report.nonfinite_origin


@pytest.mark.parametrize("name", cases_for("rerun"))
def test_second_run_gives_identical_norms(name: str) -> None:
    """Seeded runs are deterministic: the run with hooks on repeats the first bit for bit."""
    o = outcome(name)
    first = o.result()
    if isinstance(o.hooked, BaseException):
        pytest.skip(f"the hooked run failed: {o.hooked!r}")

    def bits(report):  # NaN-safe exact comparison
        return {k: repr(v) for k, v in report.param_norms.items()}, repr(report.loss)

    assert bits(o.hooked) == bits(first)


@pytest.mark.parametrize("name", cases_for("module_norms"))
def test_module_norms_count_every_parameter(name: str) -> None:
    """A module's norm covers all of its parameters, tied ones included (each tensor once)."""
    o = outcome(name)
    report = o.result()
    wrong = {}
    for path, module in o.case.model.named_modules():
        norms = [o.ref[n] for n in _canonical_names(o.case.model, module)]
        present = [r[0] for r in norms if r is not None]
        got = report.module_norms.get(path, "missing")
        if not present:
            if got not in (None, "missing") and norms:
                wrong[path] = (got, None)
            continue
        expected = math.sqrt(math.fsum(v * v for v in present))
        if got in (None, "missing") or not math.isclose(got, expected, rel_tol=1e-5, abs_tol=1e-12):
            wrong[path] = (got, expected)
    assert not wrong, f"module_norms (got, expected): {wrong}"


def _canonical_names(model, module) -> list[str]:
    """The model-level names of `module`'s distinct parameters."""
    first = {}
    for n, p in model.named_parameters():
        first.setdefault(id(p), n)
    return [first[id(p)] for p in module.parameters()]


@pytest.mark.parametrize("name", cases_for("state_run"))
def test_model_untouched_by_run(name: str) -> None:
    problems = outcome(name).after_run
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", cases_for("state_close"))
def test_model_untouched_after_close(name: str) -> None:
    problems = outcome(name).after_close
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", cases_for("drawn"))
def test_drawn_node_ids_are_unique(name: str) -> None:
    """The page keys every node by its id: the drawn graph (ghosts added), in full and folded to
    the first view's depth, has each id once and every edge between drawn nodes."""
    from gradviz_widgets.graph.ghosts import add_ghosts
    from gradviz_widgets.render.dot import render_dot

    o = outcome(name)
    report = o.result()
    graph = add_ghosts(o.graph, report.none_reasons)
    for depth in (None, 0):
        view = graph.view(depth)
        ids = [n.id for n in view.nodes]
        assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
        assert {i for e in view.edges for i in (e.src, e.dst)} <= set(ids)
        keyed = [v for v in render_dot(view).keys.values() if v in set(ids)]
        assert len(keyed) == len(set(keyed))  # one drawn element per node
