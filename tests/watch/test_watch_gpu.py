"""GradWatch on CUDA: the device path, no host sync inside a step, a model moved to the GPU."""

from __future__ import annotations

import warnings

import pytest
import torch
from small_models import CE, data, mlp

from gradviz_widgets.examples import nan_mid_graph_net
from gradviz_widgets.watch import GradWatch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_cuda_norms_match_and_no_sync_inside_steps(tmp_path):
    model = mlp().cuda()
    x, y = (t.cuda() for t in data())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=True)
    seen = []
    for k in range(4):
        opt.zero_grad()
        CE(model(x), y).backward()
        seen.append({n: p.grad.double().norm().item() for n, p in model.named_parameters()})
        if k >= 2:  # after warm-up: any host sync inside the watched step raises
            torch.cuda.set_sync_debug_mode("error")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                opt.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    h = watch.history()
    assert h.step.nunique() == 4
    for k, expected in enumerate(seen):
        rows = h[h.step == k].set_index("param")
        for n, v in expected.items():
            assert rows.loc[n].norm == pytest.approx(v, rel=1e-6)
        assert rows.update_ratio.notna().all()
    watch.close()


def test_model_moved_to_cuda_mid_run(tmp_path):
    model = mlp()
    x, y = data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    for dev in ("cpu", "cuda"):
        if dev == "cuda":
            model.cuda()
            x, y = x.cuda(), y.cuda()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                opt.zero_grad()
                CE(model(x), y).backward()
                opt.step()
        if dev == "cuda":
            assert any("moved from cpu" in str(w.message) for w in caught)
    h = watch.history()
    assert h.step.nunique() == 4 and h[h.step == 3].norm.notna().all()
    watch.close()


@pytest.mark.parametrize("sync_check", [True, False])
def test_flight_recorder_on_cuda(tmp_path, sync_check):
    torch.manual_seed(0)
    model = nan_mid_graph_net().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", sync_check=sync_check)
    for step in range(4):
        x = torch.randn(4, 8, device="cuda")
        if step == 2:
            x[1] = 0.0
        opt.zero_grad()
        CE(model(x), torch.tensor([0, 1, 2, 0], device="cuda")).backward()
        opt.step()
    nan = [a for a in watch.anomalies if a.kind == "nonfinite"][0]
    assert nan.step == 2
    assert (nan.flight_record is not None) == sync_check
    if sync_check:
        assert nan.explore().report.nonfinite_origin is not None
    watch.close()
