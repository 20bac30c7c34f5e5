"""The GradWatch page in headless Chromium over file://, every other request aborted: the heat
map and lines draw, hover shows Python's numbers, picking changes the lines, user text never runs,
no horizontal scroll at 1280x800."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from harness import ARTIFACTS, wait_until
from offline_page import open_offline_page

from gradviz_widgets.vocabulary import plain_text
from gradviz_widgets.watch.page import export_watch_html, page_data

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1] / "watch")
)  # tests/watch/test_watch_page.py
from test_watch_page import HOSTILE, Ranked, Synthetic, _train, big_run  # noqa: E402


def _open(browser, path: Path):  # noqa: ANN001, ANN202
    return open_offline_page(browser, path, "body[data-ready]")


def _open_at(browser, path: Path, size: tuple[int, int]):  # noqa: ANN001, ANN202
    return open_offline_page(browser, path, "body[data-ready]", size)


def _pixel(page, row: int, bucket: int) -> list[int]:  # noqa: ANN001
    return page.evaluate(
        "([r, b]) => { const c = document.getElementById('heat'), k = Number(c.dataset.scale);"
        " return Array.from(c.getContext('2d')"  # k x k pixels a cell; (1, 0) is off the ✕
        ".getImageData(b * k + (k > 2 ? 1 : 0), r * k, 1, 1).data); }",
        [row, bucket],
    )


def _hover_cell(page, row: int, bucket: int, buckets: int) -> str:  # noqa: ANN001
    box = page.locator("#heat").bounding_box()
    row_h = box["height"] / page.evaluate(
        "(c => c.height / Number(c.dataset.scale))(document.getElementById('heat'))"
    )
    page.mouse.move(
        box["x"] + (bucket + 0.5) * box["width"] / buckets, box["y"] + (row + 0.5) * row_h
    )
    return page.locator("#tip").text_content() or ""


def _legend(page) -> str:  # noqa: ANN001
    return page.locator("#lines-legend").text_content() or ""


@pytest.mark.ui
def test_watch_page_draws_hovers_and_picks(browser, tmp_path: Path) -> None:
    watch = _train(tmp_path / "run", steps=8)
    path = export_watch_html(watch, tmp_path / "run.html")
    watch.close()
    data = page_data(__import__("gradviz_widgets").watch.GradWatch.open(tmp_path / "run"))
    names, table = data["names"], data["views"][0]["table"]
    page, problems = _open(browser, path)
    assert page.locator("#title").text_content() == f"GradWatch: run/{watch.run_id}"  # no /tmp/...
    assert page.title() == f"GradWatch: run/{watch.run_id}"
    zero = names.index("gate.weight")
    assert _pixel(page, zero, 3) == [0, 0, 0, 255]  # exactly 0.0: black
    healthy = names.index("main1.weight")
    assert _pixel(page, healthy, 3)[3] == 255 and _pixel(page, healthy, 3)[:3] != [0, 0, 0]
    text = _hover_cell(page, healthy, 3, 8)
    assert text.startswith("main1.weight\nmain1 · 8 x 4\nstep 3\nstatus: healthy\n")
    norm = re.search(r"max ‖g‖ = (\S+) at step 3", text)
    assert norm is not None and norm.group(1) in table
    # default lines: the most alarming first (gate.* are exactly 0.0)
    assert "gate.weight" in _legend(page)
    assert page.locator("#lines .band.zero").count() >= 1
    assert (
        page.locator("#lines line.threshold").count() + page.locator("#lines .anomaly").count() >= 1
    )
    page.select_option("#pick", label="main2.weight")
    wait_until(lambda: "main2.weight" in _legend(page), 5, "the picked parameter drawn")
    assert "gate.weight" not in _legend(page)
    line = page.locator("#lines path.line").first
    line.scroll_into_view_if_needed()
    mx, my = (float(v) for v in line.get_attribute("d")[1:].split("L")[0].split())
    box = page.locator("#lines").bounding_box()
    page.mouse.move(box["x"] + mx, box["y"] + my)
    tip = wait_until(lambda: page.locator("#tip").text_content(), 5, "line hover text")
    first = re.fullmatch(r"main2\.weight\nstep (\d+)\n‖g‖ = (\S+)", tip)
    assert first is not None and first.group(1) == "0" and first.group(2) in table
    # a heat-map row click adds that parameter to the lines
    page.locator("#heat").scroll_into_view_if_needed()
    _hover_cell(page, healthy, 2, 8)
    page.mouse.down()
    page.mouse.up()
    wait_until(lambda: "main1.weight" in _legend(page), 5, "the clicked row drawn")
    assert "main2.weight" in _legend(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert page.locator("#no-anomalies").is_hidden()  # the table has rows
    assert problems == []
    page.close()


@pytest.mark.ui
def test_a_record_without_anomalies_says_so(browser, tmp_path: Path) -> None:
    import torch
    from torch import nn

    from gradviz_widgets import GradWatch

    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    assert watch.anomalies == []
    path = export_watch_html(watch, tmp_path / "run.html")
    watch.close()
    page, problems = _open(browser, path)
    assert page.locator("#anomalies tbody tr").count() == 0
    assert page.locator("#no-anomalies").is_visible()
    assert "No anomalies" in (page.locator("#no-anomalies").text_content() or "")
    assert problems == []
    page.close()


@pytest.mark.ui
def test_hostile_names_show_as_text_and_run_nothing(browser, tmp_path: Path) -> None:
    names = [HOSTILE, "ok.weight", HOSTILE + ".bias"]
    path = export_watch_html(Synthetic(3, 40, names), tmp_path / "h.html", title=HOSTILE)
    page, problems = _open(browser, path)
    assert page.locator("img").count() == 0
    assert page.locator("#title").text_content() == HOSTILE
    options = page.locator("#pick option")
    shown = plain_text(HOSTILE)  # its control characters made visible, as in the explorer
    # the list elides long names in the middle; their hover holds them whole, as text
    titles = [options.nth(i).get_attribute("title") for i in range(options.count())]
    assert shown in titles and shown + ".bias" in titles
    texts = options.all_text_contents()
    assert texts[0].startswith(shown[:14]) and texts[1].endswith(".bias")
    assert shown in page.locator("#anomalies").text_content()
    text = _hover_cell(page, 0, 5, 40)
    assert text.startswith(shown + "\n")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert problems == []
    page.close()


LONG = "_fsdp_wrapped_module." * 12 + "layers.3.self_attn.q_proj.lora_A.default.weight"


@pytest.mark.ui
@pytest.mark.parametrize("size", [(1280, 800), (1920, 1080)])
def test_a_long_name_leaves_the_heat_map_its_width(browser, tmp_path: Path, size) -> None:
    """From outside: one 300-character name took the label column's whole width and the heat
    map drew 0 px wide; a U+202E in a name drew it reversed ("layers.thgiew.live")."""
    names = [LONG, "layers.\u202eevil.weight", *(f"layers.{i}.weight" for i in range(4))]
    path = export_watch_html(Synthetic(6, 40, names), tmp_path / "long.html")
    page, problems = _open_at(browser, path, size)
    heat = page.locator("#heat").bounding_box()
    labels = page.locator("#heat-labels").bounding_box()
    assert labels["width"] <= 201 and heat["width"] >= size[0] - 300
    first = page.locator("#heat-labels div").first
    assert first.get_attribute("title") == LONG  # whole in its hover
    text = first.text_content() or ""
    assert "…" in text and text.endswith("default.weight")
    assert "\u202e" not in (page.locator("#heat-labels").text_content() or "")
    # the pick list elides in the middle too: it cut the name at its right edge, and two long
    # names differing at their end read alike
    option = page.locator("#pick option").first
    picked = option.text_content() or ""
    assert option.get_attribute("title") == LONG
    assert "…" in picked and picked.endswith("default.weight") and len(picked) <= 30
    assert page.evaluate("document.documentElement.scrollWidth") <= size[0]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"watch_long_names_{size[0]}.png"))
    assert problems == []
    page.close()


@pytest.mark.ui
def test_a_none_cell_says_whether_the_parameter_is_frozen(browser, tmp_path: Path) -> None:
    """From outside: a frozen head and a trainable head the forward never called were both
    plain grey "no gradient (None)", the forgotten layer not told from the intended one."""
    import torch
    from torch import nn

    from gradviz_widgets.watch import GradWatch

    torch.manual_seed(0)
    model = nn.ModuleDict(
        {"body": nn.Linear(4, 4), "frozen": nn.Linear(4, 4), "unused": nn.Linear(4, 4)}
    )
    model["frozen"].requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    for _ in range(6):
        opt.zero_grad()
        model["frozen"](model["body"](torch.randn(3, 4))).sum().backward()
        opt.step()
    path = export_watch_html(watch, tmp_path / "why.html")
    watch.close()
    names = page_data(GradWatch.open(tmp_path / "run"))["names"]
    page, problems = _open(browser, path)
    for name, why in (
        ("frozen.weight", "frozen"),
        ("unused.weight", "trainable, but no gradient reached it"),
    ):
        text = _hover_cell(page, names.index(name), 3, 6)
        assert f"no gradient (None): {why}" in text, text
    assert problems == []
    page.close()


@pytest.mark.ui
def test_big_history_page_draws_quickly(browser, tmp_path: Path) -> None:
    path = export_watch_html(big_run(), tmp_path / "big.html")
    start = time.perf_counter()
    page, problems = _open(browser, path)
    elapsed = time.perf_counter() - start
    print(f"1,000 x 100,000 page ({path.stat().st_size / 1e6:.2f} MB) ready in {elapsed:.1f} s")
    assert elapsed < 20
    assert page.locator("#lines path.line").count() >= 2
    assert _pixel(page, 1, 10) == [0, 0, 0, 255]  # layers.0.bias: exactly 0.0
    assert _pixel(page, 0, 390)[:3] == [0xD5, 0x5E, 0x00]  # layers.0.weight: NaN later on
    # NaN/Inf cells carry a drawn ✕ (its diagonal is black), not colour alone; the legend says so
    k, ink = page.evaluate(
        "(c => [Number(c.dataset.scale), Array.from(c.getContext('2d')"
        ".getImageData(390 * Number(c.dataset.scale), 0, 1, 1).data)])"
        "(document.getElementById('heat'))"
    )
    assert k >= 3 and ink == [0, 0, 0, 255]
    assert "NaN / Inf (✕ on the cell)" in page.locator("#legend").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert problems == []
    page.close()


@pytest.mark.ui
def test_rank_selector_switches_the_drawing(browser, tmp_path: Path) -> None:
    path = export_watch_html(Ranked(3, 5), tmp_path / "ranks.html")
    page, problems = _open(browser, path)
    assert page.locator("#rank-box").is_visible()
    assert page.locator("#rank option").all_text_contents() == ["rank 0", "rank 1"]
    assert "max ‖g‖ = 0.1 at step 2" in _hover_cell(page, 0, 2, 5)
    page.select_option("#rank", label="rank 1")
    wait_until(lambda: page.evaluate("document.body.dataset.ready") == "1", 5, "rank 1 drawn")
    assert "max ‖g‖ = 0.01 at step 2" in _hover_cell(page, 0, 2, 5)
    assert problems == []
    page.close()


@pytest.mark.ui
@pytest.mark.parametrize("off", [{"vanishing": 0.0}, {"exploding": float("inf")}], ids=str)
def test_a_check_turned_off_draws_no_line_and_no_error(browser, tmp_path: Path, off) -> None:
    """Thresholds(vanishing=0) / (exploding=inf) turn a check off: the page sends null for it,
    draws the heat map and the other line, and the script raises nothing."""
    from gradviz_widgets.vocabulary import Thresholds

    run = Synthetic(4, 60)
    run.thresholds = Thresholds(**off)
    path = export_watch_html(run, tmp_path / "off.html")
    page, problems = _open(browser, path)
    kinds = page.evaluate(
        "() => [...document.querySelectorAll('line.threshold')].map(l => l.getAttribute('stroke'))"
    )
    assert len(kinds) <= 1  # the check still on, when inside the axis
    assert _pixel(page, 3, 10)[3] == 255  # the heat map is drawn
    assert problems == []
    page.close()


@pytest.mark.ui
def test_spikes_are_marked_on_the_axis_and_their_leading_rows(browser, tmp_path: Path) -> None:
    from test_watch_spikes import spike_run

    watch = spike_run(tmp_path / "run")
    (spike,) = watch.spikes
    path = export_watch_html(watch, tmp_path / "run.html")
    watch.close()
    page, problems = _open(browser, path)
    marks = page.locator("#heat-axis rect.spike")
    assert marks.count() == 1
    assert spike.sentence in (marks.first.locator("title").text_content() or "")
    lead = page.locator("#heat-labels div.spike-lead")
    assert lead.count() >= 1 and lead.first.text_content() == spike.params[0]
    assert int(page.evaluate("document.getElementById('heat').dataset.spikeMarks")) >= 1
    assert not problems


def _lines_of(page, selector: str) -> list[tuple[str, int]]:  # noqa: ANN001
    """(text, how many line boxes it takes) of each element matching `selector`."""
    return [
        tuple(x)
        for x in page.evaluate(
            "s => [...document.querySelectorAll(s)].map(e => { const r = document.createRange();"
            " r.selectNodeContents(e); const tops = new Set([...r.getClientRects()]"
            ".filter(b => b.width > 0).map(b => Math.round(b.top)));"
            " return [e.textContent, tops.size]; })",
            selector,
        )
    ]


@pytest.mark.ui
def test_steps_the_gradscaler_skipped_are_hatched_named_and_counted(
    browser, tmp_path: Path
) -> None:
    from test_page_skips import BAD, _scaled_run

    watch = _scaled_run(tmp_path / "run", steps=40, bad=(*BAD, 30))
    path = export_watch_html(watch, tmp_path / "run.html")
    watch.close()
    names = page_data(__import__("gradviz_widgets").watch.GradWatch.open(tmp_path / "run"))["names"]
    page, problems = _open(browser, path)
    summary = page.locator("#summary").text_content() or ""
    assert summary.endswith("· 4 steps skipped by GradScaler: 2, 3, 7, 30")
    assert "skipped by GradScaler (hatched column)" in page.locator("#legend").inner_text()
    # one hatched column per skipped step, over the canvas, not catching the hover
    hatch = page.locator("#heat-skips .skip.all")
    assert hatch.count() == 4 and page.locator("#heat-skips .skip.some").count() == 0
    assert page.evaluate("document.getElementById('heat').dataset.skipColumns") == "4"
    # the skipped step 30 (no anomaly: not the first NaN/Inf) is no applied NaN/Inf cell
    row = names.index("0.weight")
    assert _pixel(page, row, 30)[:3] == [0xE4, 0xE4, 0xE4]  # the skipped fill, not NaN orange
    assert _pixel(page, row, 29)[:3] != [0xE4, 0xE4, 0xE4]
    text = _hover_cell(page, row, 30, 40)
    assert "\nstep 30\nstatus: NaN / Inf\nskipped by GradScaler (Inf/NaN gradients" in text
    assert "skipped" not in _hover_cell(page, row, 29, 40)
    marks = page.locator("#heat-axis rect.skipped")
    assert marks.count() == 4
    assert (marks.nth(3).locator("title").text_content() or "").startswith(
        "step 30: skipped by GradScaler"
    )
    assert page.locator("#lines rect.skipped").count() == 4
    # the anomalies table: headers, steps and kinds on one line each at 1280x800
    assert all(n == 1 for _, n in _lines_of(page, "#anomalies th")), _lines_of(
        page, "#anomalies th"
    )
    cells = "#anomalies td:nth-child(1), #anomalies td:nth-child(2)"
    assert all(n == 1 for _, n in _lines_of(page, cells)), _lines_of(page, cells)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert problems == []
    page.close()


@pytest.mark.ui
def test_anomaly_table_headers_do_not_wrap_at_1280(browser, tmp_path: Path) -> None:
    """Long details and many names: the short columns keep their words whole. A long name in
    a detail (a spike's leaders, a NaN's holder) breaks too: unbroken, it set the table 1591 px
    wide at 1280 and squeezed the parameters to ~75 px (an outside try-out)."""
    run = Synthetic(
        30,
        200,
        [f"block.{i}.attention.{HOSTILE if i == 3 else 'q'}_proj.weight" for i in range(30)],
    )
    run.anomalies = [
        __import__("gradviz_widgets").watch.Anomaly(
            7,
            "nonfinite",
            [p.name for p in run.params],
            detail="a long detail " * 40 + "held first by " + "L" * 200 + ".weight",
        ),
        *run.anomalies,
    ]
    path = export_watch_html(run, tmp_path / "long.html")
    page, problems = _open(browser, path)
    heads = _lines_of(page, "#anomalies th")
    assert [t for t, _ in heads] == ["step", "kind", "parameters", "detail"]
    assert all(n == 1 for _, n in heads), heads
    cells = _lines_of(page, "#anomalies td:nth-child(1), #anomalies td:nth-child(2)")
    assert cells and all(n == 1 for _, n in cells), cells
    heights = {
        round(page.locator(f"#anomalies th >> nth={i}").bounding_box()["height"]) for i in range(4)
    }
    assert len(heights) == 1  # one line each
    # the table fills the width: the details are not squeezed into a narrow column
    table = page.locator("#anomalies").bounding_box()
    assert table["width"] >= 1200
    names = page.locator("#anomalies td:nth-child(3)").first.bounding_box()
    assert names["width"] >= 0.3 * table["width"], (names, table)
    # text, never markup (its control characters made visible)
    assert plain_text(HOSTILE) in (page.locator("#anomalies").text_content() or "")
    assert page.locator("img").count() == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert problems == []
    page.close()


def _deep_spike_run(path: Path, layers: int) -> object:
    """`layers` Linear(8, 8) + Tanh (2 parameters each), the batch of step 30 scaled x30."""
    import warnings

    import torch

    from gradviz_widgets import GradWatch

    torch.manual_seed(0)
    parts: list = []
    for _ in range(layers):
        parts += [torch.nn.Linear(8, 8), torch.nn.Tanh()]
    net = torch.nn.Sequential(*parts)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    watch = GradWatch(net, optimizer=opt, path=path)
    g = torch.Generator().manual_seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(40):
            x = torch.randn(32, 8, generator=g) * (30.0 if step == 30 else 1.0)
            loss = (net(x) - x.sin()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return watch


@pytest.mark.ui
@pytest.mark.parametrize("layers", [26, 65], ids=["52 rows", "130 rows"])
def test_rows_too_short_to_label_still_name_a_spikes_leaders(
    browser, tmp_path: Path, layers: int
) -> None:
    """52 parameters (a GPT-2's) had no row labels at all, so the red leading rows went unnamed;
    now every row is labelled down to 8 px rows, and below that the leading rows are."""
    watch = _deep_spike_run(tmp_path / "run", layers)
    spikes = watch.spikes
    assert spikes, "the corrupted batch makes a spike"
    path = export_watch_html(watch, tmp_path / "run.html")
    watch.close()
    page, problems = _open(browser, path)
    lead = page.locator("#heat-labels div.spike-lead")
    assert page.locator("#heat-labels").is_visible()
    assert spikes[0].params[0] in lead.all_text_contents()
    labels = page.locator("#heat-labels div").count()
    assert labels == (2 * layers if layers <= 30 else lead.count())
    # each label sits at its row: its middle within a label's height of the row's middle (a
    # label is pushed off its row only by an adjacent leading row's)
    rows = page.locator("#heat").bounding_box()
    row_h = rows["height"] / (2 * layers)
    names = page.evaluate("JSON.parse(document.getElementById('watch-data').textContent).names")
    for i in range(lead.count()):
        box = lead.nth(i).bounding_box()
        text = lead.nth(i).text_content()
        r = names.index(text)
        middle = rows["y"] + (r + 0.5) * row_h
        assert abs(box["y"] + box["height"] / 2 - middle) <= box["height"] + row_h, text
    assert not problems
