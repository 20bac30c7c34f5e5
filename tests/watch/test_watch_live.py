"""The live view's cost while a run trains, and NaN/Inf cells told apart by more than colour.

No browser: the widgets' messages go through `comm.create_comm` (the comm package's seam for
a kernel's comm), serialised by a real `jupyter_client` Session as a kernel sends them.
"""

from __future__ import annotations

import time

import comm
import numpy as np
import pytest
import torch
from jupyter_client.session import Session
from torch import nn

from gradviz_widgets.examples import dead_branch_example, nan_mid_graph_net
from gradviz_widgets.vocabulary import STATUSES
from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.figures import NONFINITE_MARK


class _KernelComm(comm.DummyComm):
    """Serialises every message exactly as ipykernel's comm would, and keeps its size."""

    session = Session()
    sent: list[tuple[str, str, int]] = []

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):  # type: ignore[override]
        content = {"data": data, "comm_id": self.comm_id, **keys}
        msg = self.session.msg(msg_type, content=content, metadata=metadata or {})
        size = sum(len(p) for p in self.session.serialize(msg))
        size += sum(memoryview(b).nbytes for b in buffers or [])
        _KernelComm.sent.append((self.comm_id, msg_type, size))


@pytest.fixture
def kernel_comms(monkeypatch):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny net on a loaded machine: OpenMP spinning would dominate
    _KernelComm.sent = []
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: _KernelComm(*a, **k))
    yield _KernelComm.sent
    torch.set_num_threads(threads)


def _train(net, opt, x, y, steps, pause=0.0):
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        if pause:
            time.sleep(pause)


def test_live_view_throttles_and_sends_only_changes(tmp_path, kernel_comms):
    net, x, y = dead_branch_example()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    watch = GradWatch(net, optimizer=opt, path=tmp_path / "run", flush_s=0.02)
    _train(net, opt, x, y, 250)
    watch.history()
    view = watch.show()
    heat_id = view.heatmap.comm.comm_id

    def sent_since(n: int) -> list[int]:
        return [s for c, kind, s in kernel_comms[n:] if c == heat_id and kind == "comm_msg"]

    full = sum(sent_since(0))  # the first draw: every trace and the layout
    opened, t0 = len(kernel_comms), time.monotonic()
    _train(net, opt, x, y, 100, pause=0.01)  # the writer flushes every 20 ms: 50+ flushes
    watch.history()
    elapsed = time.monotonic() - t0
    redraws = view._sync[0].updates - 1  # Plotly updates sent after the first draw
    assert 1 <= redraws <= elapsed * 4 + 2, (redraws, elapsed)  # at most ~4 a second
    assert len(sent_since(opened)) <= 8 * redraws  # an update or two (+ Plotly bookkeeping) each
    # once the run is long, a redraw sends the newest block of columns, not the figure
    before, done = len(kernel_comms), view._sync[0].updates
    deadline = time.monotonic() + 30
    while view._sync[0].updates == done and time.monotonic() < deadline:
        _train(net, opt, x, y, 1, pause=0.05)
    delta = sum(sent_since(before))
    assert 0 < delta < full / 2, (delta, full)
    updated, added, layout_keys = view._sync[0].last_sent
    n = len(view.heatmap.data)
    # 4 heat maps per block of 32 steps (trace 4: the NaN/Inf marks, after the first block):
    # the blocks of steps 0-223 were complete before the view opened and are never sent again
    assert all(i == 4 or i >= 5 + 4 * 6 for i in updated), (updated, n)
    assert not layout_keys
    z = np.array(view.heatmap.data[-1].z, dtype=float)
    assert z.shape[1] <= 32 + 1  # the newest block (and its neighbour's last column: live.py)
    watch.close()


def test_live_view_cpu_stays_under_its_share(tmp_path, kernel_comms):
    net, x, y = dead_branch_example()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    watch = GradWatch(net, optimizer=opt, path=tmp_path / "run", flush_s=0.02)
    view = watch.show()
    t0 = time.monotonic()
    _train(net, opt, x, y, 200, pause=0.005)
    watch.history()
    elapsed = time.monotonic() - t0
    # the throttle spaces redraws by their CPU cost / 2 %: the last may have just begun
    assert view.updates >= 2
    assert view.throttle.spent_s <= 0.02 * elapsed + view.throttle.cost_s
    watch.close()


def test_nonfinite_cells_carry_a_mark_in_the_widget_and_the_page(tmp_path, kernel_comms):
    from gradviz_widgets.watch.page import page_data, watch_page_html
    from gradviz_widgets.watch.page_data import merge_buckets  # noqa: F401  (page module loads)

    torch.manual_seed(0)
    model = nan_mid_graph_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", flush_s=0.05)
    for step in range(6):
        x = torch.randn(4, 8)
        if step == 3:
            x[1] = 0.0  # NaN from here on
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 0])).backward()
        opt.step()
    watch.history()
    view = watch.show()
    heat, _ = view.figures()
    marks = next(t for t in heat["data"] if t["type"] == "scatter")
    assert marks["marker"]["symbol"].startswith("x") and "NaN / Inf" in marks["name"]
    assert NONFINITE_MARK in marks["name"] and "NaN / Inf" in marks["hovertemplate"]
    nan_rows = {y for y in marks["y"]}
    assert "fc1.weight" in nan_rows and sorted(set(marks["x"])) == [3, 4, 5]
    shown = [t for t in view.heatmap.data if t.type == "scatter"]
    assert shown and list(shown[0].y) == marks["y"] and shown[0].marker.symbol == "x-thin"
    # shown in a notebook (inside a VBox), the page gets the traces drawn so far, not the
    # empty figure the widget was created with (a blank live view in JupyterLab before)
    view._ipython_display_()
    assert len(view.heatmap._widget_data) == len(view.heatmap.data) > 4
    data = page_data(watch)
    assert data["marks"]["nonfinite"] == NONFINITE_MARK
    assert data["labels"]["nonfinite"] == "NaN / Inf"
    assert STATUSES.index("nonfinite") in np.frombuffer(
        _inflate(data["views"][0]["cells"]), dtype=np.uint8
    )
    # the page draws it on the cells (property names survive the bundling; the drawing itself
    # is checked in the browser, tests/ui/test_watch_page_ui.py)
    assert ".marks.nonfinite" in watch_page_html(watch)
    watch.close()


def _inflate(b64: str) -> bytes:
    import base64
    import zlib

    return zlib.decompress(base64.b64decode(b64))
