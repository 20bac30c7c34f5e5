"""export_watch_html: one self-contained offline page of a GradWatch history."""

from __future__ import annotations

import functools
import json
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from gradviz_widgets.examples import dead_branch_example
from gradviz_widgets.frontend import script_json
from gradviz_widgets.vocabulary import STATUSES, Thresholds, plain_text
from gradviz_widgets.watch import Anomaly, GradWatch, Overview
from gradviz_widgets.watch.history import COLUMNS
from gradviz_widgets.watch.page import export_watch_html, page_data
from gradviz_widgets.watch.store import ParamInfo

HOSTILE = "<img src=x onerror=alert(1)>\"'\\\n\r\x07&amp;@\u2028漢字</script>"


class Synthetic:
    """A recorded run built in memory: `n_params` x `n_steps` log-normal random walks, one
    parameter turning NaN, one exactly 0.0, one None; duck-types GradWatch.open's result."""

    def __init__(self, n_params: int, n_steps: int, names: list[str] | None = None) -> None:
        rng = np.random.default_rng(0)
        self.path = Path("synthetic")
        self.thresholds = Thresholds()
        names = names or [
            f"layers.{i // 2}.{'weight' if i % 2 == 0 else 'bias'}" for i in range(n_params)
        ]
        self.params = [
            ParamInfo(i, n, n.rsplit(".", 1)[0], (4, 4), 16, 0) for i, n in enumerate(names)
        ]
        self._ov = Overview(400)
        level = rng.normal(-2, 1.5, n_params)
        block = 1000
        for first in range(0, n_steps, block):
            steps = np.arange(first, min(first + block, n_steps))
            level = level + rng.normal(0, 0.01, n_params)
            norm = 10 ** (level + rng.normal(0, 0.15, (len(steps), n_params)))
            norm[:, 0] = np.where(steps >= n_steps // 2, np.nan, norm[:, 0])
            norm[:, 1] = 0.0
            norm[:, 2] = np.nan
            status = np.full(norm.shape, STATUSES.index("healthy"), dtype=np.uint8)
            status[:, 0] = np.where(
                steps >= n_steps // 2, STATUSES.index("nonfinite"), status[:, 0]
            )
            status[:, 1], status[:, 2] = STATUSES.index("zero"), STATUSES.index("none")
            self._ov.add_many(steps, norm, status)
        self.anomalies = [
            Anomaly(0, "zero", [names[1]]),
            Anomaly(0, "none", [names[2]]),
            Anomaly(n_steps // 2, "nonfinite", [names[0]]),
        ]

    def overview(self, n_buckets: int = 400) -> Overview:
        return self._ov

    def history(
        self, params: object = None, start: object = None, stop: object = None
    ) -> pd.DataFrame:
        return pd.DataFrame({k: [] for k in COLUMNS})


class Ranked(Synthetic):
    """Two ranks whose overview() has no `rank` argument: the page reads the history's `rank`
    column instead (every norm 0.1 on rank 0, 0.01 on rank 1)."""

    ranks = [0, 1]

    def history(
        self, params: object = None, start: object = None, stop: object = None
    ) -> pd.DataFrame:
        rows = [
            (r, s, p.name, 10.0 ** -(r + 1), "healthy")
            for r in (0, 1)
            for s in range(5)
            for p in self.params
        ]
        frame = pd.DataFrame(rows, columns=["rank", "step", "param", "norm", "status"])
        return frame if params is None else frame.head(0)


@functools.lru_cache(maxsize=1)
def big_run() -> Synthetic:
    """1,000 parameters x 100,000 steps (built once per test session, ~10 s)."""
    return Synthetic(1000, 100_000)


def _data(text: str) -> dict:
    raw = re.search(r'<script type="application/json" id="watch-data">(.*?)</script>', text, re.S)
    assert raw is not None
    return json.loads(raw.group(1))


def _train(path: Path | None = None, steps: int = 6, lr: float = 0.1) -> GradWatch:
    net, x, y = dead_branch_example()
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    watch = GradWatch(net, optimizer=opt, path=path)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return watch


def _self_contained(text: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in text
    assert "<link" not in text.lower() and "import(" not in text and "fetch(" not in text


def test_live_watch_and_store_path_give_the_same_page(tmp_path: Path) -> None:
    watch = _train(tmp_path / "run")
    live = watch.export_html(tmp_path / "live.html", title="tiny run")
    watch.close()
    disk = export_watch_html(tmp_path / "run", tmp_path / "disk.html", title="tiny run")
    also = GradWatch.open(tmp_path / "run").export_html(tmp_path / "open.html", title="tiny run")
    file = export_watch_html(
        watch.rank_path / "watch.sqlite", tmp_path / "file.html", title="tiny run"
    )
    texts = [p.read_text(encoding="utf-8") for p in (live, disk, also, file)]
    assert texts[1] == texts[2] == texts[3]
    for text in texts:
        _self_contained(text)
        data = _data(text)
        assert "gate.weight" in data["names"] and data["views"][0]["buckets"] == 6
        assert data["title"] == "tiny run"
    assert _data(texts[0])["views"] == _data(texts[1])["views"]
    kinds = {
        (k, _data(texts[1])["names"][r])
        for _, k, rows, _ in _data(texts[1])["anomalies"]
        for r in rows
    }
    assert ("zero", "gate.weight") in kinds


def test_anomalies_and_default_lines_follow_the_worst(tmp_path: Path) -> None:
    data = page_data(Synthetic(12, 3000))
    kinds = {(k, data["names"][r]) for _, k, rows, _ in data["anomalies"] for r in rows}
    assert ("nonfinite", "layers.0.weight") in kinds and ("zero", "layers.0.bias") in kinds
    assert [data["names"][r] for r in data["selected"][:2]] == ["layers.0.weight", "layers.0.bias"]
    assert data["threshold_text"] == ["1e-07", "1e+04"]


def test_hostile_names_are_data_everywhere(tmp_path: Path) -> None:
    names = [HOSTILE, "ok.weight", HOSTILE + ".bias"]
    text = export_watch_html(Synthetic(3, 50, names), tmp_path / "h.html", title=HOSTILE).read_text(
        encoding="utf-8"
    )
    _self_contained(text)
    assert "<img" not in text and '</script>"' not in text and "\u2028" not in text
    assert text.count("</script>") == 2  # the data element's and the script's own
    assert "&lt;img src=x onerror=alert(1)&gt;" in text  # the <title>
    data = _data(text)
    # shown as text with its control characters made visible, as the explorer shows names
    assert data["names"][0] == plain_text(HOSTILE) and data["title"] == HOSTILE
    assert script_json("</script>\u2029&") == '"\\u003c/script\\u003e\\u2029\\u0026"'


def test_big_history_stays_under_3_mb(tmp_path: Path) -> None:
    run = big_run()
    start = time.perf_counter()
    path = export_watch_html(run, tmp_path / "big.html")
    elapsed = time.perf_counter() - start
    size = path.stat().st_size
    data = _data(path.read_text(encoding="utf-8"))
    print(f"1,000 params x 100,000 steps: {size / 1e6:.2f} MB in {elapsed:.1f} s")
    assert size <= 3_000_000
    assert data["views"][0]["buckets"] <= 400 and data["views"][0]["width"] >= 250
    small = export_watch_html(run, tmp_path / "small.html", max_steps=100)
    assert _data(small.read_text(encoding="utf-8"))["views"][0]["buckets"] <= 100
    with pytest.raises(ValueError, match="max_steps"):
        export_watch_html(run, tmp_path / "none.html", max_steps=0)


@pytest.mark.parametrize("max_steps", [1, 7, 400])
def test_merged_buckets_keep_spikes_dips_and_the_worst_status(max_steps: int) -> None:
    from gradviz_widgets.watch.page_data import merge_buckets

    ov = Overview(400)
    norm = np.full((1000, 2), 1.0)
    norm[333, 0], norm[777, 0] = 1e9, 1e-12
    status = np.full(norm.shape, STATUSES.index("healthy"), dtype=np.uint8)
    status[500, 1] = STATUSES.index("nonfinite")
    ov.add_many(np.arange(1000), norm, status)
    small = merge_buckets(ov, max_steps)
    assert small.used <= max_steps
    assert (
        np.nanmax(small.hi[: small.used, 0]) == 1e9
        and np.nanmin(small.lo[: small.used, 0]) == 1e-12
    )
    assert 333 in small.hi_step[: small.used, 0] and 777 in small.lo_step[: small.used, 0]
    assert (small.status[: small.used, 1] == STATUSES.index("nonfinite")).sum() == 1


def test_rank_column_gives_one_view_per_rank(tmp_path: Path) -> None:
    data = page_data(Ranked(3, 5))
    assert [v["label"] for v in data["views"]] == ["rank 0", "rank 1"]
    assert data["views"][0]["table"] == ["0.1"] and data["views"][1]["table"] == ["0.01"]


def test_a_record_of_two_ranks_gets_one_view_each(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    for rank, steps in ((0, 4), (1, 7)):  # the rank folders of earlier versions
        watch = _train(tmp_path / "src", steps=steps, lr=0.1 * (rank + 1))
        watch.close()
        watch.rank_path.rename(tmp_path / "run" / f"rank{rank}")
    data = page_data(GradWatch.open(tmp_path / "run"))
    assert [v["label"] for v in data["views"]] == ["rank 0", "rank 1"]
    assert [v["buckets"] for v in data["views"]] == [4, 7]
    single = page_data(GradWatch.open(tmp_path / "run" / "rank0"))
    assert [v["label"] for v in single["views"]] == [""]


def test_other_anomaly_kinds_get_a_colour_and_their_detail() -> None:
    run = Synthetic(4, 20)
    run.anomalies.append(Anomaly(7, "rank_divergence", ["layers.1.weight"], detail="<b>1 & 3</b>"))
    data = page_data(run)
    assert data["kinds"]["rank_divergence"][1] == "rank divergence"
    assert data["anomalies"][-1] == [7, "rank_divergence", [2], "<b>1 & 3</b>"]


def test_spikes_are_marked_in_the_page_data_and_the_live_heat_map(tmp_path: Path) -> None:
    from test_watch_spikes import spike_run

    from gradviz_widgets.watch.figures import heatmap_figure

    watch = spike_run(tmp_path / "run")
    (spike,) = watch.spikes
    data = page_data(watch)
    ((step, end, rows, sentence),) = data["spikes"]
    assert (step, sentence) == (spike.step, spike.sentence) and end >= step
    assert data["names"][rows[0]] == spike.params[0] == "0.weight"
    assert "spike" in data["kinds"] and any(a[1] == "spike" for a in data["anomalies"])
    watch.close()
    run = GradWatch.open(tmp_path / "run")
    assert page_data(run)["spikes"] == data["spikes"]  # the offline page of the record: the same
    figure = heatmap_figure(run.overview(), run.params, run.thresholds, [], run.spikes)
    rects = [s for s in figure["layout"]["shapes"] if s.get("name") == "spike lead"]
    assert rects and rects[0]["x0"] <= spike.step <= rects[0]["x1"]
    # the title says what the outlines are (a reader took them for an anomaly's parameters)
    assert "red outlines: each spike's first movers" in figure["layout"]["title"]["text"]
    calm = heatmap_figure(run.overview(), run.params, run.thresholds, [], [])
    assert "red outlines" not in calm["layout"]["title"]["text"]


def test_default_lines_start_from_the_nan_the_anomaly_blames(tmp_path: Path) -> None:
    """A NaN held in the last layer spreads to every parameter at the next step: every row is
    NaN alike, and the lines open on the parameter holding it, not on the first four."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(6, 6) for _ in range(4)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path)
    for k in range(4):
        if k == 2:
            with torch.no_grad():
                model[3].weight[0, 0] = float("nan")
        opt.zero_grad()
        model(torch.randn(5, 6)).sum().backward()
        opt.step()
    bad = [a for a in watch.anomalies if a.kind == "nonfinite"][0]
    assert bad.step == 2 and bad.held == ["3.weight"] and "3.weight" not in bad.params
    data = page_data(watch)
    assert data["names"][data["selected"][0]] == "3.weight"
    watch.close()


def test_every_spike_reaches_the_page() -> None:
    """An outside tester's 12,000-step run held 594 spikes; the page marked the first 200
    (the last at step 4119) and said nothing of the rest."""
    from types import SimpleNamespace

    from gradviz_widgets.watch.page import _spikes

    spikes = [
        SimpleNamespace(step=20 * i, end=20 * i + 2, params=["w"], sentence="s") for i in range(600)
    ]
    marked = _spikes(spikes, {"w": 0})
    assert len(marked) == 600 and marked[-1][0] == 11980


def test_a_long_name_is_elided_in_the_live_heat_map_and_the_page_shows_names_as_text(
    tmp_path: Path,
) -> None:
    """From outside: a 300-character name's tick made Plotly's margin take the live heat map's
    whole width; a U+202E in a name drew the offline page's label reversed."""
    from gradviz_widgets.watch.figures import HEAT_LABEL_CHARS, heatmap_figure

    inner: nn.Module = nn.Linear(3, 3)
    for _ in range(12):  # wrapper in wrapper, as FSDP and checkpointing wrap
        inner = nn.ModuleDict({"_fsdp_wrapped_module": inner})
    model = nn.ModuleDict({"w": inner, "a\u202eb": nn.Linear(3, 1)})
    long = "w." + "_fsdp_wrapped_module." * 11 + "_fsdp_wrapped_module"
    first = model.get_submodule(long)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path)
    for _ in range(3):
        opt.zero_grad()
        model["a\u202eb"](first(torch.randn(2, 3))).sum().backward()
        opt.step()
    names = page_data(watch)["names"]
    assert long + ".weight" in names and not any("\u202e" in n for n in names)
    assert plain_text("a\u202eb.weight") in names
    watch.close()
    run = GradWatch.open(tmp_path)
    axis = heatmap_figure(run.overview(), run.params, run.thresholds)["layout"]["yaxis"]
    assert axis["tickvals"][0] == long + ".weight"  # the hover's %{y}: whole
    assert len(axis["ticktext"][0]) == HEAT_LABEL_CHARS and "…" in axis["ticktext"][0]


def test_a_none_cell_says_why_in_the_page_and_the_live_heat_map(tmp_path: Path) -> None:
    """From outside: a frozen head and a trainable head never called were both plain "no
    gradient (None)"; the hover now says which, from the parameter events (an unfrozen
    layer reads trainable from its step on)."""
    from gradviz_widgets.watch.figures import heatmap_figure
    from gradviz_widgets.watch.widget import WatchWidget

    torch.manual_seed(0)
    model = nn.ModuleDict(
        {"body": nn.Linear(3, 3), "frozen": nn.Linear(3, 3), "unused": nn.Linear(3, 3)}
    )
    model["frozen"].requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path)
    for _ in range(4):
        opt.zero_grad()
        model["frozen"](model["body"](torch.randn(2, 3))).sum().backward()
        opt.step()
    data = page_data(watch)
    why = {n: data["none_why"][r] for r, n in enumerate(data["names"])}
    assert why["frozen.weight"] == [[0, 2]] and why["unused.weight"] == []
    assert data["none_words"][2] == "frozen"
    for figure in (
        heatmap_figure(watch.overview(), GradWatch.open(tmp_path).params, watch.thresholds,
                       events=watch.events),
        WatchWidget(watch).figures()[0],
    ):  # fmt: skip
        said = {
            t["hovertemplate"].split("<br>")[-1]
            for t in figure["data"]
            if t.get("legendgroup") == "none"
        }
        assert said == {
            "no gradient (None): frozen<extra></extra>",
            "no gradient (None): trainable, but no gradient reached it<extra></extra>",
        }
    watch.close()
