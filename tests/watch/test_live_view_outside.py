"""The live view as an outside tester found it: a reloaded page, the last steps after close(),
a redraw racing another, and the parameter list of a view opened before the writer had them."""

from __future__ import annotations

import math
import re
import threading
import time

import numpy as np
import torch
from torch import nn

from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.writer import Writer


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _train(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()


def _watched(tmp_path) -> tuple:  # noqa: ANN001
    """A small model, its optimizer, a watch flushing every 50 ms and its live view."""
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", flush_s=0.05)
    return model, opt, watch, watch.show()


def _header_step(view) -> int:
    return int(re.search(r"up to step (-?\d+)", view.status.value).group(1))


def _columns(z) -> int:
    return len(z[0]) if len(z) else 0


def test_a_new_front_end_gets_the_figures_as_they_are_now(tmp_path):
    """A page reloaded while the kernel runs asks each widget for its whole state: it must hold
    the traces drawn since, not the empty figure of the view's creation (a blank view)."""
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", flush_s=0.05)
    view = watch.show()  # before the first step: the figures are empty now
    view._ipython_display_()
    _train(model, opt, 6)
    watch.history()
    view.refresh(force=True)  # drawn through the messages a page applies once
    assert _header_step(view) == 5
    heat = view.heatmap.get_state()  # what `request_state` (a reload) sends
    assert len(heat["_widget_data"]) == len(view.heatmap.data) > 4
    first = heat["_widget_data"][0]
    assert first["type"] == "heatmap" and _columns(first["z"]) == 6
    assert heat["_widget_layout"]["title"]["text"] == view.heatmap.layout.title.text
    lines = view.lines.get_state()
    assert [t["name"] for t in lines["_widget_data"]] == [t.name for t in view.lines.data]
    assert len(lines["_widget_data"]) == 4 and "shapes" in lines["_widget_layout"]
    # an update sends only its own keys (no copy of the figure per redraw)
    assert set(view.heatmap.get_state("_py2js_update")) == {"_py2js_update"}
    watch.close()


def test_close_draws_the_last_step_whatever_the_throttle(tmp_path):
    """The throttle skipped the redraws of the last flushes: the view stayed some steps behind
    the run's end for good (1 watch in 4 at step 252 of 310)."""
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", flush_s=0.05)
    view = watch.show()
    view.throttle.next_at = math.inf  # every live redraw from here on comes too soon
    _train(model, opt, 40)
    assert watch.history().step.max() == 39
    assert _header_step(view) < 39
    watch.close()
    assert _header_step(view) == 39
    assert view.lines.data[0].x[-1] == 39
    blocks = [t for t in view.heatmap.data if t.name == "log10 ‖g‖"]
    # each block after the first repeats its neighbour's last column (live.py: no seam)
    assert sum(_columns(t.z) for t in blocks) - (len(blocks) - 1) == 40


def test_a_view_the_throttle_holds_back_says_how_far_behind_it_is(tmp_path):
    """A 212-parameter view took 0.27 s a redraw, so it drew every ~14 s (2% of the kernel's
    time) and read "up to step 466" at step 1,800, unsaid (an outside try-out)."""
    model, opt, watch, view = _watched(tmp_path)
    _train(model, opt, 3)
    watch.history()
    view.refresh(force=True)
    assert _header_step(view) == 2 and "recorded up to" not in view.status.value
    view.throttle.next_at = time.monotonic() + 30.0  # as after a costly redraw
    _train(model, opt, 20)
    assert watch.history().step.max() == 22
    deadline = time.monotonic() + 10
    while "recorded up to step 22" not in view.status.value and time.monotonic() < deadline:
        time.sleep(0.05)
    text = view.status.value
    assert _header_step(view) == 2, text  # the drawing's own step comes first
    assert "recorded up to step 22; redrawn in ~" in text and "2% of the kernel" in text, text
    view.refresh(force=True)
    assert _header_step(view) == 22 and "recorded up to" not in view.status.value
    watch.close()


def test_a_redraw_that_read_older_numbers_never_lands_last(tmp_path):
    """Two redraws at once (a pick in the kernel's thread, a flush in the writer's): the one
    that read the numbers first must not send them after the other sent newer ones."""
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", flush_s=0.05)
    _train(model, opt, 3)
    watch.history()
    view = watch.show()
    watch._writer.listeners.remove(view._on_flush)  # only the two redraws below draw
    older = view.figures()
    _train(model, opt, 3)
    watch.history()
    read = view.figures
    other: list[threading.Thread] = []

    def slow_first_read():
        if other:
            return read()
        other.append(threading.Thread(target=view.refresh, kwargs={"force": True}))
        other[0].start()  # the newer redraw, asked for while this one is in progress
        time.sleep(0.3)
        return older

    view.figures = slow_first_read
    view.refresh(force=True)
    other[0].join(10)
    assert view.lines.data[0].x[-1] == 5
    watch.close()


def test_the_list_offers_parameters_the_writer_had_not_yet(tmp_path, monkeypatch):
    """A view opened before the writer thread took the model's parameters (the second watch
    of a kernel, shown at once) kept an empty list for the whole run."""
    taken = threading.Event()
    add = Writer._add_params

    def late(self, infos):
        taken.wait(10)
        add(self, infos)

    monkeypatch.setattr(Writer, "_add_params", late)
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", flush_s=0.05)
    view = watch.show()
    assert view.picker.options == ()
    taken.set()
    _train(model, opt, 5)
    watch.close()
    names = ("0.weight", "0.bias", "2.weight", "2.bias")
    assert view.picker.options == names
    assert set(view.picker.value) == set(names) and not view._picked  # not a user's pick
    view.picker.value = ("2.bias",)  # the user's pick survives the next redraws
    view.refresh(force=True)
    assert view._picked and [t.name for t in view.lines.data] == ["2.bias"]
    assert np.asarray(view.lines.data[0].x)[-1] == 4


def test_a_view_closes_and_the_record_goes_on(tmp_path):
    """`view.close()` raised AttributeError (the docs call it a VBox, which has one)."""
    model, opt, watch, view = _watched(tmp_path)
    _train(model, opt, 2)
    view.close()
    assert view._on_flush not in watch._writer.listeners
    for part in (view.picker, view.rank_menu, view.picker.layout, view.status, view.box):
        assert part.comm is None, part  # closed: the lines list and the menu too
    updates = view.updates
    _train(model, opt, 3)
    assert watch.history().step.max() == 4 and view.updates == updates
    watch.close()
