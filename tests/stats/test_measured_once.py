"""What the run measures is read once and only where it can be non-zero (issue 21's cost), and
stays exact: views of one gradient share a measurement, and an embedding's weight gradient is
read from the rows the batch looked up.

References are float64 numbers computed independently from the tensors themselves.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.stats import norms as norms_module
from gradviz_widgets.stats.norms import NormBatch
from gradviz_widgets.stats.reduce import dense, distinct

REL = 1e-12


def ref(g: torch.Tensor) -> tuple[float, float, int]:
    """(L2 norm, max |g|, non-zero count) in float64."""
    d = g.detach().double()
    return d.norm().item(), d.abs().max().item(), int(torch.count_nonzero(d))


def test_views_of_one_gradient_share_one_measurement() -> None:
    """Reshapes, transposes and permutes (attention heads, a weight's `t()`) address the same
    elements: one measurement. A slice or an expanded view does not share it."""
    g = torch.randn(2, 128, 24)
    views = [g.view(256, 24), g.transpose(1, 2), g.permute(2, 0, 1), g.reshape(-1)]
    batch = NormBatch(torch.device("cpu"))
    first = batch.add([g], norms_only=True)
    assert all(batch.add([v], norms_only=True) == first for v in views)
    part = batch.add([g[:, 1:]], norms_only=True)
    assert part != first
    values = batch.resolve()
    assert values[first[0]] == pytest.approx(ref(g)[0], rel=REL)
    assert values[part[0]] == pytest.approx(ref(g[:, 1:])[0], rel=REL)


def test_a_permuted_gradient_is_read_in_memory_order_without_a_copy() -> None:
    g = torch.randn(4, 8, 16, 32).permute(0, 2, 1, 3)
    x, repeats = distinct(g)
    assert dense(g) and repeats == 1 and x.is_contiguous()
    assert x.data_ptr() == g.data_ptr()
    assert not dense(g[:, :3]) and not dense(g.expand(2, 4, 16, 8, 32))


def test_zero_outside_reads_rows_and_stays_exact() -> None:
    """Norm, max |g| and the non-zero count from the looked-up rows equal those of the whole
    table, for repeated indices, an index 0 and a negative-only row."""
    table = torch.zeros(20_000, 8)
    idx = torch.tensor([[0, 5, 5, 19_999], [3, 0, 7, 7]])
    table[idx.reshape(-1)] = torch.randn(8, 8)
    table[3] = -torch.rand(8) - 1.0  # max |g| from a negative row
    table[7, 2:] = 0.0  # zeros inside a looked-up row are counted as zeros
    batch = NormBatch(torch.device("cpu"))
    batch.zero_outside(table, idx)
    slots, at = batch.add_counted([table])
    values = batch.resolve()
    norm, top, nonzero = ref(table)
    assert batch.pair(values, slots[0]) == (pytest.approx(norm, rel=REL), top)
    assert values[at] == nonzero


class TiedLM(nn.Module):
    """An LM whose output layer is its embedding (GPT-2's tying), with a padding index."""

    def __init__(self, vocab: int = 50_000, dim: int = 16) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim, padding_idx=1)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mix(self.wte(tokens))))


class UntiedLM(nn.Module):
    def __init__(self, vocab: int = 50_000, dim: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(tokens).mean(1))


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.float().pow(2).mean()


def _measured_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The element counts of every large tensor the run measures (exact_sum/counted_squares)."""
    sizes: list[int] = []
    for name in ("exact_sum", "counted_squares", "exact_squares"):
        inner = getattr(norms_module, name)

        def spy(x: torch.Tensor, *args: object, _inner=inner) -> object:
            sizes.append(x.numel())
            return _inner(x, *args)

        monkeypatch.setattr(norms_module, name, spy)
    return sizes


@pytest.mark.parametrize("tied", [True, False])
def test_without_flow_an_embedding_is_still_read_from_its_rows(
    tied: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`track_flow=False` registers no flow hooks, but the lookup's node still tells the batch
    which rows its weight gradient holds: the table is never read whole for the lookup (the
    tied head's dense part and the sum still are), and the numbers equal the flow run's."""
    torch.manual_seed(0)
    model = TiedLM() if tied else UntiedLM()
    tokens = torch.tensor([[1, 7, 7, 42, 1, 9], [9, 9, 3, 7, 49_999, 0]])
    flowing = GradExplorer(model, tokens, loss_fn=_loss).run()
    sizes = _measured_sizes(monkeypatch)
    report = GradExplorer(model, tokens, loss_fn=_loss, track_flow=False).run()
    vocab_elems = (model.wte if tied else model.emb).weight.numel()
    assert sizes.count(vocab_elems) == (1 if tied else 0), sizes
    assert [(r.name, r.norm, r.max_abs, r.zero_fraction) for r in report.params] == [
        (r.name, r.norm, r.max_abs, r.zero_fraction) for r in flowing.params
    ]


@pytest.mark.parametrize("tied", [True, False])
def test_embedding_gradients_read_from_their_rows(
    tied: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedding's edge (tied: one of the leaf's two edges) and an untied embedding's own
    gradient are measured on the rows the tokens looked up, not on 50,000 x 16 elements, and
    equal float64 references: the edge against `embedding_dense_backward` of what reached the
    lookup, the parameter against `.grad` of a plain backward."""
    torch.manual_seed(0)
    model = TiedLM() if tied else UntiedLM()
    tokens = torch.tensor([[1, 7, 7, 42, 1, 9], [9, 9, 3, 7, 49_999, 0]])
    sizes = _measured_sizes(monkeypatch)
    ex = GradExplorer(model, tokens, loss_fn=_loss)
    report = ex.run()
    emb = model.wte if tied else model.emb
    name = "wte.weight" if tied else "emb.weight"
    vocab_elems = emb.weight.numel()
    # the tied head's own edge is the one dense 50,000 x 16 gradient left to read (and the
    # leaf's sum of both); the lookup's edge is never read whole
    assert sizes.count(vocab_elems) == (2 if tied else 0), sizes

    emb.weight.grad = None
    seen: dict[str, torch.Tensor] = {}
    looked_up = emb(tokens)
    looked_up.register_hook(lambda g: seen.setdefault("g", g))
    rest = model.head(torch.tanh(model.mix(looked_up))) if tied else model.out(looked_up.mean(1))
    _loss(rest).backward()
    norm, top, nonzero = ref(emb.weight.grad)
    record = next(r for r in report.params if r.name == name)
    assert record.norm == pytest.approx(norm, rel=REL) and record.max_abs == top
    assert record.zero_fraction == 1.0 - nonzero / vocab_elems
    partial = torch.ops.aten.embedding_dense_backward(
        seen["g"],
        tokens,
        emb.num_embeddings,
        -1 if emb.padding_idx is None else emb.padding_idx,
        False,
    )
    edge = next(e for e in ex.graph.edges if e.dst.endswith("EmbeddingBackward0#0"))
    assert edge.grad_norm == pytest.approx(ref(partial)[0], rel=REL)
    emb.weight.grad = None


class ViewedTable(nn.Module):
    """`F.embedding` over a view of the parameter (peft's LoRA embedding looks up
    `lora_embedding_A.T`): the lookup's rows are rows of the view, not of the parameter."""

    def __init__(self, form: str, vocab: int = 4_000, dim: int = 4) -> None:
        super().__init__()
        self.form, self.vocab, self.dim = form, vocab, dim
        shapes = {
            "t": (dim, vocab),
            "flat": (vocab * dim,),
            "squeeze": (1, vocab, dim),
            "pairs": (vocab // 2, 2 * dim),
        }
        self.w = nn.Parameter(torch.randn(shapes[form]))

    def table(self) -> torch.Tensor:
        if self.form == "t":
            return self.w.t()
        if self.form == "squeeze":
            return self.w.squeeze(0)
        return self.w.view(self.vocab, self.dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(tokens, self.table())


@pytest.mark.parametrize("form", ["t", "flat", "squeeze", "pairs"])
def test_a_lookup_in_a_view_of_a_parameter_stays_exact(form: str) -> None:
    """The parameter's gradient is a view of the lookup's gradient of another shape: it shares
    the measurement but is never read through the lookup's rows (which would index the wrong
    dimension: an IndexError, or silently wrong numbers for a flat parameter)."""
    torch.manual_seed(0)
    model = ViewedTable(form)
    tokens = torch.tensor([[3, 3, 2_999, 17], [0, 17, 42, 3_999]])
    report = GradExplorer(model, tokens, loss_fn=_loss).run()
    _loss(model(tokens)).backward()
    norm, top, nonzero = ref(model.w.grad)
    (record,) = report.params
    assert record.norm == pytest.approx(norm, rel=REL) and record.max_abs == top
    assert record.zero_fraction == 1.0 - nonzero / model.w.numel()


class Wide(nn.Module):
    """Linear layers whose weights (> 4,096 elements) reach their leaves through `t()`;
    `scale` doubles what flows into the second weight's `t()` (a user's tensor hook)."""

    def __init__(self, scale: bool = False) -> None:
        super().__init__()
        self.a, self.b, self.scale = nn.Linear(96, 128), nn.Linear(128, 64), scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.scale:
            return self.b(torch.tanh(self.a(x)))
        w = self.b.weight.t()
        w.register_hook(lambda g: g * 2.0)
        return torch.tanh(self.a(x)) @ w + self.b.bias


@pytest.mark.parametrize("scale", [False, True])
def test_a_linear_weight_gradient_is_read_once(
    scale: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What flows into a weight's `t()` is the weight's gradient: measured in full there (norm,
    max |g|, count) and found again by the read-back, not read twice. A hook that replaces
    the gradient on the way makes them different tensors: both are measured, both exact."""
    torch.manual_seed(0)
    model, x = Wide(scale), torch.randn(32, 96)
    sizes = _measured_sizes(monkeypatch)
    ex = GradExplorer(model, x, loss_fn=_loss)
    report = ex.run()
    weight_reads = sizes.count(96 * 128) + sizes.count(128 * 64)
    assert weight_reads == (3 if scale else 2), sizes
    _loss(model(x)).backward()
    for name, p in model.named_parameters():
        norm, top, nonzero = ref(p.grad)
        record = next(r for r in report.params if r.name == name)
        assert record.norm == pytest.approx(norm, rel=REL) and record.max_abs == top, name
        assert record.zero_fraction == 1.0 - nonzero / p.numel(), name
    view = next(e.dst for e in ex.graph.edges if e.src == "acc:param:b.weight")
    into_t = next(e for e in ex.graph.edges if e.src == view)
    flowed = ref(model.b.weight.grad)[0] / (2.0 if scale else 1.0)
    assert into_t.grad_norm == pytest.approx(flowed, rel=REL)


def test_parameter_gradients_are_measured_where_they_are_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every large parameter's gradient is measured in full during backward: a conv weight on
    its one edge and a Linear weight on its way into `t()`, in cache, found again as it
    arrives at the parameter; a tied embedding as it arrives, summed (a hook on the run's own
    stand-in). Nothing reads it again from memory after backward."""
    whole: list[int] = []
    inner, arrival = NormBatch.add_whole, NormBatch.add_leaf

    def spy(self: NormBatch, grads: list[torch.Tensor]) -> None:
        whole.extend(g.numel() for g in grads)
        inner(self, grads)

    def spy_arrival(self: NormBatch, g: torch.Tensor) -> tuple[int, int]:
        whole.append(g.numel())
        return arrival(self, g)

    monkeypatch.setattr(NormBatch, "add_whole", spy)
    monkeypatch.setattr(NormBatch, "add_leaf", spy_arrival)
    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(16, 64, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(3))
    x = torch.randn(2, 16, 8, 8)
    conv(x)  # materialise the lazy layer
    models = [(conv, x), (Wide(), torch.randn(8, 96)), (TiedLM(), torch.tensor([[1, 2, 2]]))]
    for model, inputs in models:
        whole.clear()
        sizes = _measured_sizes(monkeypatch)
        GradExplorer(model, inputs, loss_fn=_loss).run()
        large = [p.numel() for p in model.parameters() if p.numel() > NormBatch.SMALL]
        assert set(large) <= set(whole), (type(model), whole)
        read_twice = [n for n in large if sizes.count(n) > (2 if isinstance(model, TiedLM) else 1)]
        assert not read_twice, sizes


class DirectHead(nn.Module):
    """Its head multiplies by the real embedding Parameter, captured at construction (the run
    cannot swap a stand-in into a closure): the parameter is a leaf twice, stand-in and self."""

    def __init__(self, vocab: int = 5_000, dim: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        weight = self.emb.weight
        self.head = lambda h: h @ weight.t()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(tokens))


def test_measuring_a_shared_leaf_never_hooks_the_users_parameter() -> None:
    """The hook that measures a summed gradient goes on the run's own stand-in only: the
    model's Parameter, when the forward uses it directly, keeps its hook dict as it was."""
    torch.manual_seed(0)
    model = DirectHead()
    before = model.emb.weight._backward_hooks
    report = GradExplorer(model, torch.tensor([[1, 2, 2, 7]]), loss_fn=_loss).run()
    assert model.emb.weight._backward_hooks is before
    _loss(model(torch.tensor([[1, 2, 2, 7]]))).backward()
    assert report.params[0].norm == pytest.approx(ref(model.emb.weight.grad)[0], rel=REL)


class CheckpointedLookup(nn.Module):
    """An embedding inside a non-reentrant activation checkpoint: its saved indices can be
    unpacked once only, by its own backward."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.out = nn.Embedding(5_000, 8), nn.Linear(8, 3)

    def block(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.emb(tokens))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = torch.utils.checkpoint.checkpoint(self.block, tokens, use_reentrant=False)
        return self.out(hidden)


def test_a_checkpointed_lookup_is_read_from_its_rows_without_unpacking_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rows come from the lookup's arguments, recorded in forward: reading them back from
    the node would unpack its saved indices a second time, which checkpointing refuses."""
    torch.manual_seed(0)
    model, tokens = CheckpointedLookup(), torch.tensor([[1, 2, 2, 9]])
    sizes = _measured_sizes(monkeypatch)
    report = GradExplorer(model, tokens, loss_fn=_loss).run()
    assert model.emb.weight.numel() not in sizes, sizes
    _loss(model(tokens)).backward()
    for record in report.params:
        norm, top, nonzero = ref(dict(model.named_parameters())[record.name].grad)
        assert record.norm == pytest.approx(norm, rel=REL) and record.max_abs == top


class _Workspace(torch.autograd.Function):
    """Writes every weight gradient into one shared buffer through `.data` (no version bump)
    and returns it: autograd.grad hands both weights that buffer, holding the last write."""

    buffer: torch.Tensor | None = None

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
        x, w = ctx.saved_tensors
        if _Workspace.buffer is None or _Workspace.buffer.shape != w.shape:
            _Workspace.buffer = torch.empty_like(w)
        _Workspace.buffer.data.copy_(g.t() @ x)
        return g @ w, _Workspace.buffer


class SharedWorkspace(nn.Module):
    def __init__(self, dim: int = 96) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(dim, dim) * 0.1)
        self.w2 = nn.Parameter(torch.randn(dim, dim) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(_Workspace.apply(torch.relu(_Workspace.apply(x, self.w1)), self.w2))


def test_a_buffer_refilled_without_a_version_bump_is_measured_again() -> None:
    """A measurement made while the gradient flowed is found again by identity (pointer,
    size, version); a backward that refills one buffer through `.data` keeps all three, so
    each arrival is measured afresh, as it reaches its weight: the run reports what a plain
    `.backward()` puts in each `.grad` (a copy of the buffer at that moment), never one
    weight's numbers for the other (autograd.grad would hand both weights the buffer, holding
    the last write)."""
    torch.manual_seed(0)
    model, x = SharedWorkspace(), torch.randn(8, 96)
    report = GradExplorer(model, x, loss_fn=_loss).run()
    _loss(model(x)).backward()
    grads = [model.w1.grad, model.w2.grad]
    assert not torch.equal(grads[0], grads[1])
    for record, g in zip(report.params, grads, strict=True):
        norm, top, _ = ref(g)
        assert record.norm == pytest.approx(norm, rel=REL) and record.max_abs == top, record.name
