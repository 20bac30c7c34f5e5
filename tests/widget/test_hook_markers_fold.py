"""A hook stays visible whatever the fold, and the status line leads with the run's headline.

Found from outside (stranger UI probe): a backward hook turned on by clicking a node inside
layer2.0 vanished from the view when the graph was then folded at depth 0 and re-run: the
folded layer2 node had no hook marker and the status line no longer named the hook, although
the readout showed it firing. And for a model whose loss is its own output.loss, the note
saying so came first in the one-line status and pushed the run's summary out of it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.widget.controller import status_line


class Block(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.conv2(out) + x)


class ResNetish(nn.Module):
    """A stem, a frozen stage, two stages of two identical blocks, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.ReLU())
        self.layer1 = nn.Sequential(Block(8, 8), Block(8, 8))
        self.layer2 = nn.Sequential(Block(8, 8), Block(8, 8))
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(x.mean((2, 3)))


@pytest.fixture
def resnet_explorer():
    torch.manual_seed(0)
    net = ResNetish()
    for p in net.layer1.parameters():
        p.requires_grad_(False)
    ex = GradExplorer(net, torch.randn(2, 3, 8, 8), loss_fn=nn.CrossEntropyLoss(),
                      target=torch.tensor([0, 2]))  # fmt: skip
    yield ex
    ex.close()


def hooked(w) -> dict[str, str]:
    """node id -> its hook words, for the nodes the pane marks hooked."""
    return {i: n.get("hooked_text", "") for i, n in w.pane.nodes.items() if n["hooked"]}


def relu_in(w, module: str) -> str:
    return next(n.id for n in w.view.nodes if n.module == module and "Relu" in n.op)


def test_a_hook_inside_a_folded_module_marks_the_folded_node(resnet_explorer):
    w = resnet_explorer.show(depth="full")
    w.click_node(relu_in(w, "layer2.0"))  # the ReLU op of layer2.0: hooks layer2.0
    assert resnet_explorer.hooks == [("layer2.0", "backward")]
    assert "backward hook on at layer2.0" in w.status_text
    # fold at 0 (the toolbar's "fold at"), then Run
    w.controls.depth_box.value = 0
    w.controls.run_button.click()
    assert resnet_explorer.hooks == [("layer2.0", "backward")] and resnet_explorer.events
    assert "module:layer2" in w.pane.nodes
    marked = hooked(w)
    assert set(marked) == {"module:layer2"}  # the folded stage holding the hook, only it
    assert marked["module:layer2"] == "hooked: backward at layer2.0"  # the tooltip's words
    # the status line still says which hooks are on, after the run's headline
    assert "hooks on: backward at layer2.0" in w.status_text
    assert w.status_text.startswith(resnet_explorer.report.headline())


def test_the_marker_follows_a_fold_change_without_a_rerun(resnet_explorer):
    w = resnet_explorer.show(depth="full")
    w.click_node(relu_in(w, "layer2.1"))
    runs = w.runs
    w.controls.depth_box.value = 1  # layer2.1 folded into its own node
    assert w.runs == runs and set(hooked(w)) == {"module:layer2.1"}
    w.toggle_scope("layer2")  # the page's double-click on the frame: layer2 folded
    assert set(hooked(w)) == {"module:layer2"}
    # a hook turned on from code on a module folded away shows at once (no run yet)
    resnet_explorer.set_hook("layer2.0.conv1", on=True)
    assert set(hooked(w)) == {"module:layer2"}
    assert hooked(w)["module:layer2"] == (
        "hooked: backward at layer2.1, backward at layer2.0.conv1"
    )


def test_a_grouped_run_of_blocks_shows_the_hook_of_one_block():
    torch.manual_seed(0)
    # enough identical blocks that the folded view groups them into one "×N" node
    blocks = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(160)])
    ex = GradExplorer(blocks, torch.randn(2, 4))
    try:
        ex.set_hook("7.0", on=True)  # the Linear of the eighth block
        ex.run()
        w = ex.show(depth=0)
        group = next(n for n in w.view.nodes if n.id.startswith("group:"))  # 0–159 ×160
        assert set(hooked(w)) == {group.id}
        assert hooked(w)[group.id] == "hooked: backward at 7.0"
        ex.set_hook("7.0", on=False)
        assert hooked(w) == {}
    finally:
        ex.close()


def test_a_hook_on_a_parent_does_not_mark_its_folded_children(resnet_explorer):
    resnet_explorer.set_hook("layer2", on=True)
    resnet_explorer.run()
    w = resnet_explorer.show(depth=1)  # layer2.0 and layer2.1 folded, layer2 open
    assert not {"module:layer2.0", "module:layer2.1"} & set(hooked(w))


def test_a_hook_on_an_open_module_marks_its_frame(resnet_explorer):
    """A hook on a container whose children are drawn marked nothing: no op node is its own
    (they are its children's) and no folded node stands for it. Its frame carries it now."""
    ex = resnet_explorer
    ex.set_hook("layer2", on=True)
    ex.set_modifier("layer2.0", scale=0.5)
    ex.run()
    w = ex.show(depth=1)  # layer2 open (a frame), layer2.0 and layer2.1 folded inside it
    assert w.pane.clusters == {
        "layer2": {"hooked": True, "hooked_text": "hooked: backward at layer2"}
    }
    w.toggle_scope("layer2.0")  # now open too: its modifier marks its frame
    assert w.pane.clusters["layer2.0"]["hooked_text"] == "hooked: scale by 0.5 at layer2.0"
    ex.set_hook("layer2", on=False)  # from code, not run: the markers follow the plan
    assert "layer2" not in w.pane.clusters
    w.toggle_scope("layer2")  # folded: the folded node shows the modifier, no frame is left
    assert w.pane.clusters == {}
    assert "module:layer2" in hooked(w)


def test_the_offline_page_marks_the_same_frames(resnet_explorer):
    from gradviz_widgets.render.page import views

    ex = resnet_explorer
    ex.set_hook("layer2", on=True)
    ex.run()
    by_depth = {v["depth"]: v for v in views(ex.graph, (ex.hooks, ex.modifiers))}
    assert by_depth[1]["clusters"] == {
        "layer2": {"hooked": True, "hooked_text": "hooked: backward at layer2"}
    }
    assert by_depth[0]["clusters"] == {}  # layer2 folded: its node carries the marker
    assert by_depth[0]["nodes"]["module:layer2"]["hooked"]


def test_the_status_line_leads_with_the_runs_headline(resnet_explorer):
    """A frozen stage is a finding; the count and range of the gradients still come first."""
    w = resnet_explorer.show()
    report = resnet_explorer.report
    assert report.findings  # layer1's parameters get no gradient
    n = len(report.params)
    frozen = sum(p.status == "none" for p in report.params)
    assert w.status_text.startswith(f"{n} parameters: {n - frozen} healthy, {frozen} no gradient")
    assert "‖g‖ from" in w.status_text.split("; ran in")[0]
    # every finding follows, whole
    assert w.status_text.endswith("; ".join(report.findings))
    assert w.pane.status_level == "warning"


def test_a_models_own_loss_note_follows_the_headline():
    transformers = pytest.importorskip("transformers")
    from small_models import HF_VOCAB, tiny_gpt2_config

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(tiny_gpt2_config())
    ids = torch.randint(0, HF_VOCAB, (2, 8))
    ex = GradExplorer(model, dict(input_ids=ids, labels=ids))
    try:
        w = ex.show()
        report = ex.report
        note = next(f for f in report.notes if f.startswith("no loss_fn given"))
        assert not w.status_text.startswith("no loss_fn given")
        assert w.status_text.startswith(report.headline())
        assert "gradients healthy" in w.status_text.split(";")[0]
        assert note in w.status_text  # the note is still there, whole, after the headline
        assert w.status_text == status_line(report)
        assert w.pane.status_level == "info"  # a healthy run: the note is no warning
    finally:
        ex.close()
