"""Outside tests of GradWatch's history page and its records: hostile names (`</script>`,
U+2028), no steps, one parameter, all NaN, a store still being written, max_steps=1, long
names, a title with markup; one process writes `watch.sqlite` with rank 0; folders mixing a
single-process record and rank folders; the record file after close."""

from __future__ import annotations

import json
import math
import re
import shutil
import warnings
from pathlib import Path

import torch
from torch import nn

from gradviz_widgets.vocabulary import Thresholds, plain_text
from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.page import export_watch_html

EVIL = "<img src=x onerror=alert(1)>\"'\\\n\r\x07&amp;@%{y}\u2028漢字</script>"
TITLE = "<b>t</b></title><script>alert(1)</script>\u2028"


def page_data(text: str) -> dict:
    raw = re.search(r'<script type="application/json" id="watch-data">(.*?)</script>', text, re.S)
    assert raw is not None
    return json.loads(raw.group(1))


def self_contained_and_escaped(text: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "https://" not in text and "<link" not in text.lower()
    assert text.count("</script>") == 2  # the data and the script elements, nothing more
    assert "<img" not in text and "<b>t</b>" not in text and "\u2028" not in text
    assert "alert(1)</script>" not in text


def train(path: Path, steps: int, model: nn.Module | None = None, x=None) -> GradWatch:
    torch.manual_seed(0)
    model = model or nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = GradWatch(model, optimizer=opt, path=path)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 3) if x is None else x).sum().backward()
        opt.step()
    watch._opt = opt  # type: ignore[attr-defined]  # kept for more steps
    return watch


class OneParam(nn.Module):
    """A single parameter under a hostile, very long name."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.register_parameter(name, nn.Parameter(torch.ones(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (next(iter(self.parameters())) * x).sum()


def test_page_of_zero_steps_live_and_from_disk(tmp_path: Path) -> None:
    watch = train(tmp_path / "run", steps=0)
    assert watch.history().empty
    live = page_data(watch.export_html(tmp_path / "live.html").read_text(encoding="utf-8"))
    assert live["views"][0]["buckets"] == 0 and live["anomalies"] == []
    watch.close()
    text = GradWatch.open(tmp_path / "run").export_html(tmp_path / "disk.html").read_text("utf-8")
    assert page_data(text)["views"][0]["buckets"] == 0
    assert len(page_data(text)["names"]) == 4


def test_one_hostile_long_all_nan_parameter_max_steps_1(tmp_path: Path) -> None:
    name = EVIL.replace("\n", " ") + "x" * 5000  # parameter names may hold anything but "."
    model = OneParam(name)
    watch = train(tmp_path / "nan", steps=5, model=model, x=torch.tensor(float("nan")))
    h = watch.history()
    assert len(h) == 5 and (h.status == "nonfinite").all() and h["norm"].isna().all()
    for max_steps in (1, 2, 400):
        out = watch.export_html(tmp_path / f"p{max_steps}.html", max_steps=max_steps, title=TITLE)
        text = out.read_text(encoding="utf-8")
        self_contained_and_escaped(text)
        data = page_data(text)
        assert data["names"] == [plain_text(name)] and data["title"] == TITLE
        assert data["views"][0]["buckets"] == min(max_steps, 5)
        assert data["views"][0]["table"] == []  # no finite norm to write
        assert [a[:3] for a in data["anomalies"]] == [[0, "nonfinite", [0]]]
        assert "&lt;b&gt;t&lt;/b&gt;&lt;/title&gt;" in re.search("<title>(.*)</title>", text)[1]
    watch.close()
    text = export_watch_html(watch.rank_path / "watch.sqlite", tmp_path / "d.html").read_text(
        encoding="utf-8"
    )
    self_contained_and_escaped(text.replace("<b>t</b>", ""))
    assert page_data(text)["names"] == [plain_text(name)]


def test_page_of_a_store_still_being_written(tmp_path: Path) -> None:
    watch = train(tmp_path / "run", steps=3)
    watch.history()  # waits for the writer: three steps on disk
    run = GradWatch.open(tmp_path / "run")
    first = page_data(run.export_html(tmp_path / "a.html").read_text(encoding="utf-8"))
    opt = watch._opt  # type: ignore[attr-defined]
    model = nn.Sequential(*[m for m in watch._model.children()])  # type: ignore[union-attr]
    for _ in range(4):
        opt.zero_grad()
        model(torch.randn(5, 3)).sum().backward()
        opt.step()
    assert len(watch.history()) == 7 * 4
    again = page_data(run.export_html(tmp_path / "b.html").read_text(encoding="utf-8"))
    assert first["views"][0]["buckets"] == 3 and again["views"][0]["buckets"] == 7
    assert len(run.history()) == 7 * 4
    run.close()
    watch.close()


def test_one_process_writes_watch_sqlite_with_rank_0(tmp_path: Path) -> None:
    watch = train(tmp_path / "one", steps=2)
    assert (watch.rank, watch.world) == (0, 1)
    assert watch.rank_path == watch.run_path == tmp_path / "one" / watch.run_id
    h = watch.history()
    assert (watch.run_path / "watch.sqlite").exists()
    assert not list(watch.run_path.glob("rank*"))
    assert h["rank"].tolist() == [0] * len(h) and len(h) == 2 * 4
    watch.close()
    run = GradWatch.open(tmp_path / "one")
    assert run.ranks == [0] and run.history()["rank"].unique().tolist() == [0]
    run.close()


def test_rank_folders_alone_are_read_side_by_side(tmp_path: Path) -> None:
    for r in (0, 1):  # the layout of earlier versions: rank folders directly in the path
        watch = train(tmp_path / "src" / str(r), steps=2)
        watch.close()
        (tmp_path / "run" / f"rank{r}").mkdir(parents=True)
        shutil.copy(watch.rank_path / "watch.sqlite", tmp_path / "run" / f"rank{r}")
    (tmp_path / "run" / "rankX").mkdir()  # not a rank folder: ignored
    run = GradWatch.open(tmp_path / "run")
    assert run.ranks == [0, 1]
    h = run.history()
    assert sorted(h["rank"].unique().tolist()) == [0, 1] and len(h) == 2 * 2 * 4
    data = page_data(run.export_html(tmp_path / "r.html").read_text(encoding="utf-8"))
    assert [v["label"] for v in data["views"]] == ["rank 0", "rank 1"]
    run.close()


def _open_mixed(path: Path) -> tuple[list[int], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = GradWatch.open(path)
        ranks = list(run.ranks)
        run.close()
    return ranks, [str(w.message) for w in caught]


def test_mixed_folder_warns(tmp_path: Path) -> None:
    for where, steps in (("", 2), ("rank1", 3)):  # earlier versions' layout, mixed
        watch = train(tmp_path / "src" / str(steps), steps=steps)
        watch.close()
        (tmp_path / "run" / where).mkdir(parents=True, exist_ok=True)
        shutil.copy(watch.rank_path / "watch.sqlite", tmp_path / "run" / where)
    ranks, messages = _open_mixed(tmp_path / "run")
    assert ranks != [0] or any("rank" in m for m in messages), (ranks, messages)


def test_record_file_is_complete_after_close(tmp_path: Path) -> None:
    watch = train(tmp_path / "run", steps=3)
    assert len(watch.history()) == 3 * 4  # a user looks at the history, then closes
    watch.close()
    (tmp_path / "copy").mkdir()
    shutil.copy(watch.rank_path / "watch.sqlite", tmp_path / "copy")  # share the one file
    run = GradWatch.open(tmp_path / "copy")
    assert len(run.history()) == 3 * 4
    run.close()


def test_record_file_is_complete_after_close_without_history(tmp_path: Path) -> None:
    watch = train(tmp_path / "run", steps=3)
    watch.close()
    assert not (watch.rank_path / "watch.sqlite-wal").exists()
    (tmp_path / "copy").mkdir()
    shutil.copy(watch.rank_path / "watch.sqlite", tmp_path / "copy")
    run = GradWatch.open(tmp_path / "copy")
    assert len(run.history()) == 3 * 4
    run.close()


def test_reading_a_finished_record_leaves_its_folder_as_it_was(tmp_path: Path) -> None:
    watch = train(tmp_path / "run", steps=3)
    watch.close()
    before = sorted(p.name for p in watch.rank_path.iterdir())
    run = GradWatch.open(tmp_path / "run")
    assert len(run.history()) == 3 * 4
    assert sorted(p.name for p in watch.rank_path.iterdir()) == before  # no -wal / -shm
    run.close()
    assert sorted(p.name for p in watch.rank_path.iterdir()) == before


def test_page_with_exploding_check_turned_off(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = GradWatch(model, optimizer=opt, thresholds=Thresholds(exploding=math.inf))
    opt.zero_grad()
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    assert (watch.history().status == "healthy").all()
    watch.export_html(tmp_path / "p.html")
    watch.close()
