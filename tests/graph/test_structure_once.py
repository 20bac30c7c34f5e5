"""Each module is drawn once: a block of a ModuleList iterated in forward holds its parameters
inside its own call cluster (or folded node), not in a second box of the same name."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import gpt2_like
from gradviz_widgets.render.dot import render_dot


@pytest.fixture(scope="module")
def gpt2_graph():
    torch.manual_seed(0)
    model = gpt2_like(n_layer=3, d_model=16, n_head=2, vocab=64, seq=8)
    ex = GradExplorer(model, torch.randint(0, 64, (2, 8)))
    ex.run()
    return ex.graph


def drawn_paths(view) -> Counter:
    """module path -> how many drawn clusters and folded nodes stand for it."""
    drawn = render_dot(view)
    count = Counter(path for key, path in drawn.keys.items() if key.startswith("c"))
    count.update(n.module for n in view.nodes if n.kind == "module")
    return count


@pytest.mark.parametrize("depth", ["auto", None, 0, 1, 2])
def test_every_module_drawn_once(gpt2_graph, depth):
    d = gpt2_graph.auto_depth(120) if depth == "auto" else depth
    view = gpt2_graph.view(d)
    twice = {p: c for p, c in drawn_paths(view).items() if c > 1}
    assert not twice
    # the never-called ModuleList is no cluster of its own
    assert "h" not in drawn_paths(view)


def test_params_fold_with_their_block(gpt2_graph):
    view = gpt2_graph.view(0)
    block = view.node("module:h.1")
    assert "param:h.1.attn.c_attn.weight" in block.members
    assert "h.1.ln_1/NativeLayerNormBackward0#0" in block.members
    assert not any(n.id.startswith("param:h.") for n in view.nodes)


def test_param_scope_is_the_call_chain(gpt2_graph):
    param = gpt2_graph.node("param:h.0.mlp.c_fc.weight")
    assert [p for p, _ in param.scope] == ["h.0", "h.0.mlp", "h.0.mlp.c_fc"]
