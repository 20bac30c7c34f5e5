"""Chart labels readable at the chart's real width (an outside tester's GPT-2 report): every bar
has a label of its own, no two labels overprint at 440-1100 px, value labels are legible or
not drawn, threshold labels sit over the bars; the full, escaped name is always in the hover."""

from __future__ import annotations

import html
import math
import unicodedata

import pytest
from fake_report import report

from gradviz_widgets.render.chart import PATTERNS, figure_dict, plotly_text, short_names
from gradviz_widgets.render.chart_compare import compare_figure
from gradviz_widgets.report.grad_report import GradReport

WIDTHS = (440, 500, 760, 846, 1100)  # beside the graph 440-760, under it the cell's width
LAYER = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias"]
LAYER += ["attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias"]
LAYER += ["mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]
#: GPT2LMHeadModel(n_layer=2).named_parameters(): 28 (lm_head.weight is tied to wte)
GPT2 = ["transformer.wte.weight", "transformer.wpe.weight"]
GPT2 += [f"transformer.h.{i}.{p}" for i in range(2) for p in LAYER]
GPT2 += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
HOSTILE = [
    "branches.encoder_<img src=x onerror=alert(1)>",
    "branches.a\"quote's & <b>bold</b> projection",
    "branches.amp&amp;lt;_attention_output",
    "branches.<script>alert(2)</script>_mlp",
    "branches.x\\ny{}|[]_layernorm_final",
    "head",
]
HOSTILE12 = [f"{m}.{p}" for m in HOSTILE for p in ("weight", "bias")]
SMALL = [f"{m}.{p}" for m in ("fc1", "fc2", "gate", "out") for p in ("weight", "bias")]
CHAIN60 = [f"{i}.{p}" for i in range(30) for p in ("weight", "bias")]
MODELS = {"gpt2": GPT2, "hostile12": HOSTILE12, "small": SMALL, "chain60": CHAIN60}


def make_report(names: list[str], norms: dict[str, float | None] | None = None) -> GradReport:
    """`names` in order, each with its norm in `norms` or 0.01 x its position."""
    given = norms or {}
    return report({k: given.get(k, 0.01 * (i + 1)) for i, k in enumerate(names)})


def est_px(text: str, size: float = 11) -> float:
    """A glyph-width estimate of its own (not the chart's): 0.6 em, CJK 1 em."""
    plain = html.unescape(text.replace("<b>", "").replace("</b>", ""))
    return size * sum(1.0 if unicodedata.east_asian_width(c) in "WF" else 0.6 for c in plain)


def bar_labels(fig: dict) -> list[str]:
    """What each bar shows as its own label (upright two-level: the lower row)."""
    bar = fig["data"][0]
    axis = bar["y"] if bar["orientation"] == "h" else bar["x"]
    return axis[1] if axis and isinstance(axis[0], list) else axis


def overlaps(fig: dict, width: int) -> list[str]:
    """Tick labels that would overprint their neighbours at `width` px, estimated: upright
    ticks wider than their bar's slot (or, rotated 45 degrees, slots under a line's height),
    module groups wider than their bars, flat rows lower than a line."""
    bar, layout = fig["data"][0], fig["layout"]
    font = layout["yaxis" if bar["orientation"] == "h" else "xaxis"]["tickfont"]["size"]
    if bar["orientation"] == "h":
        rows = len(bar["y"])
        plot = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
        return [] if plot / rows >= 1.3 * font else [f"rows {plot / rows:.1f} px"]
    slot = (width - 90) / len(bar["x"][0] if isinstance(bar["x"][0], list) else bar["x"])
    bad = []
    if isinstance(bar["x"][0], list):
        groups = bar["x"][0]
        for g in dict.fromkeys(groups):
            if est_px(g, font) > groups.count(g) * slot:
                bad.append(f"group {g!r}")
    angle = layout["xaxis"].get("tickangle", 0)
    for t in bar_labels(fig):
        if angle == 0 and est_px(t, font) > slot:
            bad.append(t)
        elif angle != 0 and slot * abs(math.sin(math.radians(angle))) < 1.2 * font:
            bad.append(f"rotated {t!r} in {slot:.1f} px")
    return bad


@pytest.mark.parametrize("width", [None, *WIDTHS])
def test_gpt2_every_bar_has_a_label_of_its_own(width):
    """The tester saw 28 ticks saying only 'weight' or 'bias': the embeddings alike."""
    fig = figure_dict(make_report(GPT2), width=width)
    labels = bar_labels(fig)
    assert len(labels) == len(set(labels)) == 28, labels
    assert not {"weight", "bias"} & set(labels)
    assert "wte.weight" in labels and "wpe.weight" in labels
    assert "h.0.attn.c_attn.weight" in labels and "h.1.attn.c_attn.weight" in labels


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode", ["param", "module"])
def test_no_two_tick_labels_overlap(model, width, mode):
    fig = figure_dict(make_report(MODELS[model]), mode, width=width)
    assert overlaps(fig, width) == []


def test_default_width_is_the_narrowest_beside_the_graph():
    """The widget does not pass a width yet: the default must read at 440 px."""
    fig = figure_dict(make_report(GPT2))
    assert overlaps(fig, 440) == []


def test_small_models_keep_the_two_level_axis_where_it_fits():
    fig = figure_dict(make_report(SMALL), width=760)
    bar = fig["data"][0]
    assert bar["orientation"] == "v" and bar["x"][0][:2] == ["fc1", "fc1"]
    assert bar["x"][1][:2] == ["weight", "bias"]
    assert fig["layout"]["xaxis"]["tickangle"] == 0  # horizontal when they fit


def test_value_labels_legible_or_hidden():
    for width in (440, 760):
        fig = figure_dict(make_report(GPT2), width=width)
        assert fig["data"][0]["textfont"]["size"] >= 10
        assert fig["layout"]["uniformtext"] == {"mode": "hide", "minsize": 10}


def test_threshold_labels_drawn_over_the_bars_on_a_box():
    """The lines run under the bars and their value labels, which carry a white halo: a line
    drawn over them crossed "None" and values ending near a threshold (a frozen layer's
    "None" under the 1e-7 line on a flat chart)."""
    fig = figure_dict(make_report(SMALL), width=760)
    layout = fig["layout"]
    assert {s["layer"] for s in layout["shapes"]} == {"between"}
    assert layout["hovermode"] == "x"  # a tiny zero / None bar clicks from its whole column
    assert figure_dict(make_report(GPT2), width=440)["layout"]["hovermode"] == "y"  # flat
    assert "#fff" in fig["data"][0]["textfont"]["shadow"]
    labels = layout["annotations"]
    assert [a["text"] for a in labels] == ["vanishing < 1e-07", "exploding > 10000"]
    for a in labels:
        assert a["bgcolor"].startswith("rgba(255,255,255,") and a["font"]["size"] >= 10


def test_hover_keeps_the_full_escaped_name_and_clicks_the_raw_one():
    for width in (440, 1100):
        fig = figure_dict(make_report(HOSTILE12), width=width)
        bar = fig["data"][0]
        assert [c[0] for c in bar["customdata"]] == HOSTILE12
        assert [c[4] for c in bar["customdata"]] == [plotly_text(n) for n in HOSTILE12]
        for label in bar_labels(fig):
            assert "<" not in label and ">" not in label, label
        assert "%{customdata[4]}" in bar["hovertemplate"]


def test_statuses_keep_their_text_and_pattern_when_flat():
    norms = {SMALL[0]: 0.0, SMALL[1]: None, SMALL[2]: math.nan}
    for width in (200, 1100):  # flat, upright
        bar = figure_dict(make_report(SMALL, norms), width=width)["data"][0]
        assert bar["text"][:3] == ["0.0", "None", "NaN"]
        assert bar["marker"]["pattern"]["shape"][:3] == [
            PATTERNS[s] for s in ("zero", "none", "nonfinite")
        ]
    assert figure_dict(make_report(SMALL, norms), width=200)["data"][0]["orientation"] == "h"


def test_short_names():
    assert short_names(GPT2, params=True)[:3] == ["wte.weight", "wpe.weight", "h.0.ln_1.weight"]
    assert short_names(["a.b.weight", "c.b.weight"], params=True) == ["a.b.weight", "c.b.weight"]
    assert short_names(["layers.0.fc", "layers.1.fc"]) == ["layers.0.fc", "layers.1.fc"]
    assert short_names(["w", "m.w"]) == ["w", "m.w"]  # a name inside another stays whole
    assert short_names(["", "enc"]) == ["(root)", "enc"]


def test_compare_with_a_width_has_readable_unique_names():
    fig = compare_figure(make_report(GPT2), make_report(GPT2), width=500)
    run_a = fig["data"][0]
    assert run_a["orientation"] == "h" and fig["data"][2]["orientation"] == "h"
    assert len(set(run_a["y"])) == 28 and "wte.weight" in run_a["y"]
    assert fig["layout"]["legend"]["yref"] == "container"  # in the header, not on the rows
    wide = compare_figure(make_report(SMALL), make_report(SMALL), width=1100)
    assert wide["data"][0]["orientation"] == "v" and "fc1.weight" in wide["data"][0]["x"]


def test_real_gpt2_parameter_list():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100)
    names = [n for n, _ in transformers.GPT2LMHeadModel(cfg).named_parameters()]
    assert names == GPT2


def test_every_row_keeps_which_half_of_the_model_it_is_in():
    """T5's encoder and decoder rows: each keeps its first part at any width (a row's shortest
    distinct suffix dropped "encoder." from the rows only the encoder has), and only the
    prefix all rows share is left out."""
    from gradviz_widgets.render.chart import fitted_names

    layers = {
        "encoder": ("SelfAttention.q", "DenseReluDense.wi"),
        "decoder": ("SelfAttention.q", "EncDecAttention.q", "DenseReluDense.wi"),
    }
    names = ["shared.weight"] + [
        f"{half}.block.{i}.layer.{j}.{kind}.weight"
        for half, kinds in layers.items()
        for i in range(2)
        for j, kind in enumerate(kinds)
    ]
    for limit in (24, 31, 40):
        fitted = fitted_names(names, limit, params=True)
        assert len(set(fitted)) == len(names)
        for name, label in zip(names[1:], fitted[1:]):
            assert label.split(".")[0] == name.split(".")[0], (limit, label)
    prefixed = fitted_names(["model." + n for n in names], 40, params=True)
    assert prefixed == fitted_names(names, 40, params=True)
