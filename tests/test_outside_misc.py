"""Outside tests: the torch-free data side, hostile module paths through ids, runs, hooks and
clicks, and the explorer's hook plan on a ResNet with in-place ReLUs (the user's own hooks)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from test_torch_free import run_script
from torch import nn

from gradviz_widgets import GradExplorer, Thresholds, ids
from gradviz_widgets.examples import dead_branch_example
from gradviz_widgets.examples.cnn import resnet18
from gradviz_widgets.render.chart import figure_dict
from gradviz_widgets.report.export import report_json

ROOT = Path(__file__).resolve().parents[1]

TORCH_FREE = """
import json, sys
sys.modules["torch"] = None  # every `import torch` raises
sys.path.insert(0, {root!r})
import gradviz_widgets
from gradviz_widgets.report.export import load_json
from gradviz_widgets.render.dot import render_dot
from gradviz_widgets.render.chart import figure_dict
from gradviz_widgets.render.chart_compare import compare_figure
from gradviz_widgets.render.compare_view import compare_html
report, graph = load_json(sys.stdin.read())
out = {{"dot": render_dot(graph.view(depth=0)).dot, "bars": figure_dict(report)["data"][0]["text"],
       "compare": len(compare_figure(report, report)["data"]),
       "table": list(report.compare(report).columns), "notes": compare_html(report, report)}}
try:
    from gradviz_widgets import GradExplorer
    out["error"] = None
except BaseException as e:
    out["error"] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def without_torch() -> dict:
    net, x, y = dead_branch_example()
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    ex.run()
    saved = report_json(ex.report, ex.graph)
    ex.close()
    return run_script(TORCH_FREE.format(root=str(ROOT)), saved)


def test_saved_report_renders_and_compares_without_torch(without_torch: dict) -> None:
    assert without_torch["dot"].startswith("digraph") and "gate" in without_torch["dot"]
    assert len(without_torch["bars"]) == 8 and without_torch["compare"] == 3
    assert without_torch["table"][:3] == ["module", "norm_a", "norm_b"]
    assert "no status changed" in without_torch["notes"]
    assert without_torch["error"] is not None and without_torch["error"][0] == "ImportError"


def test_explorer_without_torch_says_torch_is_missing(without_torch: dict) -> None:
    assert "torch" in without_torch["error"][1], without_torch["error"]


KEYS = ["a/b#0:c", "x#3", "p:q", "m@2", "g\\h", "1-2", "/", "#", ":", "acc:param:z", "output"]


class Keyed(nn.Module):
    def __init__(self, top: list[str]) -> None:
        super().__init__()
        self.d = nn.ModuleDict({k: nn.Linear(2, 2) for k in KEYS})
        for k in top:
            self.add_module(k, nn.Linear(2, 2))
        self.top = top

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in [*self.d.values(), *(getattr(self, k) for k in self.top)]:
            x = torch.tanh(m(x))
        return x.sum()


def op_node(view, module: str):
    return next(n for n in view.nodes if n.module == module and n.kind == "op")


def test_hostile_module_paths_round_trip_through_run_hooks_and_clicks() -> None:
    torch.manual_seed(0)
    ex = GradExplorer(Keyed(["param:w", "module:k", "input:0"]), torch.randn(3, 2))
    ex.run()
    w = ex.show(depth=None)
    paths = [*(f"d.{k}" for k in KEYS), "param:w", "module:k", "input:0"]
    for path in paths:
        nodes = [n for n in ex.graph.nodes if n.module == path and n.kind == "op"]
        assert nodes and all(ids.parse_op_id(n.id)[0] == path for n in nodes), path
        assert ex.toggle_hook(path, "backward") is True
    ex.run()  # one run with every hook: each fires under its own path
    assert {e.target for e in ex.events} == set(paths)
    ex.clear_hooks()
    for path in ["d.a/b#0:c", "d.m@2", "d.g\\h", "param:w"]:
        w.refresh()
        w.click_node(op_node(w.view, path).id)  # the widget hooks the same module
        assert ex.hooks == [(path, "backward")], (path, w.status_text)
        ex.clear_hooks()
        w.toggle_scope(path)  # folded, the module id parses back to the path
        folded = next(n.id for n in w.view.nodes if n.kind == "module" and n.module == path)
        assert ids.parse_module_id(folded) == (path, None)
        w.click_node(folded)
        assert ex.hooks == [(path, "backward")], (path, w.status_text)
        ex.clear_hooks()
        w.toggle_scope(path)
    ex.close()


def test_click_on_a_module_named_like_a_group_hooks_it() -> None:
    torch.manual_seed(0)
    ex = GradExplorer(Keyed(["group:a-b"]), torch.randn(3, 2))
    w = ex.show(depth=None)
    w.click_node(op_node(w.view, "group:a-b").id)
    assert ex.hooks == [("group:a-b", "backward")], w.status_text
    ex.close()


class LossHead(nn.Module):
    """A submodule named `loss` with parameters (a learned loss head)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(2, 2)
        self.loss = nn.Linear(2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.loss(torch.tanh(self.body(x))).sum()


@pytest.mark.xfail(
    strict=True,
    reason="ids.LOSS_SCOPE is the plain path 'loss': a user submodule named `loss` shares the "
    "loss computation's scope and widget_controller.module_of refuses to hook its nodes",
)
def test_click_on_a_submodule_named_loss_hooks_it() -> None:
    torch.manual_seed(0)
    ex = GradExplorer(LossHead(), torch.randn(3, 2), loss_fn=lambda out: out * 2.0)
    w = ex.show(depth=None)
    assert ex.report.param_status["loss.weight"] == "healthy"
    w.click_node(op_node(w.view, "loss").id)
    assert ex.hooks == [("loss", "backward")], w.status_text
    ex.close()


def hook_dicts(model: nn.Module) -> dict:
    names = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    return {
        path: {k: list(getattr(m, k)) for k in names} | {"full": m._is_full_backward_hook}
        for path, m in model.named_modules()
    }


def user_hooks(model: nn.Module, fired: list[str]) -> None:
    model.fc.register_forward_hook(lambda m, i, o: fired.append("fwd"))
    model.layer1[0].register_forward_pre_hook(lambda m, i: fired.append("pre"))
    model.fc.register_full_backward_hook(lambda m, gi, go: fired.append("bwd"))
    model.layer2[0].conv1.register_full_backward_pre_hook(lambda m, go: fired.append("bpre"))


PLAN = [
    ("layer1.0", "backward"),
    ("layer1.0.relu", "forward"),
    ("layer2.0.bn1", "backward"),
    ("layer3.0.relu", "forward_pre"),
]


@pytest.fixture(scope="module")
def resnet() -> tuple:
    torch.manual_seed(0)
    model = resnet18(num_classes=5, width=4)
    fired: list[str] = []
    user_hooks(model, fired)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 3])
    ex = GradExplorer(model, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    for target, kind in PLAN:
        ex.toggle_hook(target, kind)
    before = hook_dicts(model)
    ex.run()
    first = (list(fired), ex.hook_record, [(e.target, e.kind, e.call, e.phase) for e in ex.events])
    yield model, ex, fired, before, first, (x, y)
    ex.close()


def test_resnet_hooks_run_twice_clear_and_user_hooks(resnet) -> None:
    model, ex, fired, before, (fired1, record1, events1), (x, y) = resnet
    assert record1.clash is not None and ex.hook_plan.active == PLAN
    assert {(t, k) for t, k, _, _ in events1} == set(PLAN)
    assert ex.hook_mechanisms["layer1.0"].startswith("tensor hooks")
    assert {"fwd", "pre", "bwd", "bpre"} <= set(fired1)  # the user's module hooks fire
    assert hook_dicts(model) == before  # nothing of ours between runs
    fired.clear()
    ex.run()
    assert ex.hook_record.clash is None and fired == ["pre", "fwd", "bwd", "bpre"]
    assert [(e.target, e.kind, e.call, e.phase) for e in ex.events] == events1
    assert hook_dicts(model) == before
    ex.clear_hooks()
    fired.clear()
    ex.run()
    assert ex.events == [] and ex.hook_record.registered == 0 and ex.hooks == []
    assert fired == ["pre", "fwd", "bwd", "bpre"] and hook_dicts(model) == before
    fired.clear()
    nn.functional.cross_entropy(model(x), y).backward()  # the user's own step
    assert fired == ["pre", "fwd", "bwd", "bpre"] and model.fc.weight.grad is not None
    model.zero_grad(set_to_none=True)


@pytest.mark.xfail(
    strict=True,
    reason="capture/hook fallback: the first run that clashes with ReLU(inplace=True) is "
    "retried, and the user's own module hooks see the aborted forward too (fire twice)",
)
def test_user_hooks_fire_once_per_explorer_run(resnet) -> None:
    fired1 = resnet[4][0]
    assert fired1.count("pre") == 1, fired1


@pytest.mark.parametrize("th", [{"vanishing": 0.0}, {"exploding": math.inf}], ids=str)
def test_thresholds_that_turn_a_check_off_still_draw(th: dict, tmp_path: Path) -> None:
    torch.manual_seed(0)
    ex = GradExplorer(nn.Linear(3, 2), torch.randn(4, 3), thresholds=Thresholds(**th))
    report = ex.run()
    assert set(report.param_status.values()) == {"healthy"}
    figure_dict(report)
    w = ex.show()
    assert w.pane.status_level != "error", w.status_text
    ex.export_html(tmp_path / "run.html")
    ex.close()
