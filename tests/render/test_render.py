"""DOT output: deterministic, clustered by module, styled by status, safe for WASM Graphviz."""

from __future__ import annotations

import re
import shutil

import pytest
import torch

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import UnrolledLSTM, resnet18
from gradviz_widgets.render.dot import STATUS_STYLE, render_dot, svg_with_dot, to_dot
from gradviz_widgets.vocabulary import format_norm, legend


def test_dead_branch_dot_snapshot(dead_explorer, snapshot):
    snapshot("dead_branch.dot", to_dot(dead_explorer.graph, hooked={"gate/AddmmBackward0#0"}))


def test_dead_branch_folded_snapshot(dead_explorer, snapshot):
    snapshot("dead_branch_depth0.dot", to_dot(dead_explorer.graph.view(0)))


def test_dot_is_identical_across_runs(dead_explorer):
    first = to_dot(dead_explorer.graph)
    dead_explorer.run()
    assert to_dot(dead_explorer.graph) == first


def line_of(r, node_id):
    key = next(k for k, v in r.keys.items() if v == node_id and k.startswith("n"))
    return next(line for line in r.dot.splitlines() if line.strip().startswith(f"{key} ["))


def test_clusters_statuses_and_params_named(dead_explorer):
    r = render_dot(dead_explorer.graph)
    clusters = {v for k, v in r.keys.items() if k.startswith("c")}
    assert clusters == {"main1", "gate", "dead", "main2", "loss"}
    for key in (k for k in r.keys if k.startswith("c")):
        assert f"subgraph cluster_{key} {{" in r.dot and f'id="{key}"' in r.dot
    assert "param:gate.weight" in r.keys.values() and "gate.weight\\n(4, 4)" in r.dot
    # the dead gate's nodes are drawn in the "zero" style, the live path in the healthy one
    zero_fill, healthy_fill = STATUS_STYLE["zero"][0], STATUS_STYLE["healthy"][0]
    gate_line = line_of(r, "gate/AddmmBackward0#0")
    main_line = line_of(r, "main1/AddmmBackward0#0")
    assert zero_fill in gate_line and "dotted" in gate_line
    assert healthy_fill in main_line


def test_no_label_starts_with_newline(dead_explorer):
    # a leading newline in a label crashes WASM Graphviz (torchviz's loss node does that)
    labels = re.findall(r'label="((?:[^"\\]|\\.)*)"', to_dot(dead_explorer.graph))
    assert labels and not any(lab.startswith("\\n") for lab in labels)


def test_statuses_look_different():
    styles = {(fill, border, style) for fill, border, style, _ in STATUS_STYLE.values()}
    assert len(styles) == len(STATUS_STYLE) == 6
    assert [e["status"] for e in legend()] == list(STATUS_STYLE)


def test_format_norm_keeps_findings_apart():
    assert [format_norm(v) for v in (None, 0.0, 1e-30, float("nan"), float("inf"), 0.279)] == [
        "None",
        "0.0",
        "1e-30",
        "NaN",
        "Inf",
        "0.279",
    ]


def test_reused_module_folds_per_call():
    model = UnrolledLSTM(3, 4, steps=5)
    ex = GradExplorer(model, torch.randn(2, 5, 3))
    ids = set(render_dot(ex.graph.view(0)).keys.values())
    calls = [int(i.rpartition("@")[2]) for i in ids if re.fullmatch(r"module:cell@\d+", i)]
    assert sorted(calls) == list(range(5))
    assert "module:cell@params" in ids


@pytest.mark.skipif(shutil.which("dot") is None, reason="system Graphviz not installed")
def test_resnet_dot_lays_out_with_system_dot():
    ex = GradExplorer(resnet18(width=8), torch.randn(2, 3, 32, 32))
    view = ex.graph.view(ex.graph.auto_depth())
    svg = svg_with_dot(to_dot(view))
    drawn = [n for n in view.nodes if n.kind != "accumulate"]  # merged into their parameters
    assert svg.count('class="node"') == len(drawn) > 20


def test_dot_timeout_is_a_grad_explorer_error(monkeypatch):
    import subprocess

    from gradviz_widgets.errors import GradExplorerError
    from gradviz_widgets.render import dot as render

    def slow(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout"))

    monkeypatch.setattr(render.shutil, "which", lambda _: "/usr/bin/dot")
    monkeypatch.setattr(render.subprocess, "run", slow)
    with pytest.raises(GradExplorerError, match=r"export_svg\(path, depth=N\)"):
        svg_with_dot("digraph { a }", timeout=0.5)


def test_exploding_and_nonfinite_differ_without_colour():
    styles = {s: style for s, (_, _, style, _) in STATUS_STYLE.items()}
    assert styles["exploding"] != styles["nonfinite"]
    dashes = {e["status"]: e["dash"] for e in legend()}
    assert dashes["exploding"] != dashes["nonfinite"]


def test_a_thousand_module_drawing_is_built_in_one_pass() -> None:
    """The widget asks `node_ids` once per drawn node: it is built once per drawing (it was a
    new set per call, a quadratic 6 s refresh on the 1,000-layer chain at full depth), and
    clusters find their children from one index, nested and empty levels included."""
    from torch import nn

    from gradviz_widgets import GradExplorer
    from gradviz_widgets.render.dot import _children, render_dot

    net = nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.Tanh()) for _ in range(300)])
    ex = GradExplorer(net, torch.randn(1, 2))
    ex.run()
    drawn = render_dot(ex.graph)
    assert drawn.node_ids is drawn.node_ids
    assert len(drawn.node_ids) == sum(1 for n in ex.graph.nodes if n.kind != "accumulate")
    assert drawn.dot.count("subgraph cluster_") == 1 + 300 + 300 * 2  # root, blocks, layers
    tree = {(("a", 0), ("b", 0), ("c", 0)): [], (("a", 0),): [], (("d", 0),): []}
    assert _children(tree) == {
        (): {(("a", 0),), (("d", 0),)},
        (("a", 0),): {(("a", 0), ("b", 0))},
        (("a", 0), ("b", 0)): {(("a", 0), ("b", 0), ("c", 0))},
    }
