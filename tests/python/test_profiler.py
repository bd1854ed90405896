"""The profiler with openreg work: device times from the device's own event
timestamps (``use_device="openreg"``), never negative, with key_averages and
the Chrome trace export working."""

import json

import torch
from torch.profiler import ProfilerActivity, profile


def _work():
    x = torch.randn(1 << 22, device="openreg")
    y = (x + 1).sin().sum()
    return y.cpu()


def test_device_profiling_reports_each_ops_device_time_from_device_events(tmp_path):
    _work()  # warm up: the first op of a device starts it
    with torch.autograd.profiler.profile(use_device="openreg") as prof:
        _work()
    events = {e.name: e for e in prof.function_events}
    assert {"aten::add", "aten::sin", "aten::sum"} <= events.keys()
    for event in prof.function_events:
        assert event.device_time_total >= 0 and event.cpu_time_total >= 0, event
    # A 4M-element sin keeps the device busy: it shows up as device time.
    assert events["aten::sin"].device_time_total > 0
    averages = prof.key_averages()
    assert "OPENREG total" in averages.table(row_limit=5)
    assert sum(a.self_device_time_total for a in averages) > 0
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert "aten::sin" in names


def test_a_kineto_profile_of_openreg_work_has_no_negative_times(tmp_path):
    _work()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        _work()
    averages = prof.key_averages()
    assert {"aten::add", "aten::sin", "aten::sum"} <= {a.key for a in averages}
    for a in averages:
        assert a.cpu_time_total >= 0 and a.self_cpu_time_total >= 0 and a.device_time_total >= 0, a.key
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    assert all(e.get("dur", 0) >= 0 for e in json.loads(trace.read_text())["traceEvents"])


def test_profiling_leaves_the_devices_usable_and_creates_no_lasting_events():
    before = torch.openreg.memory_allocated()
    with torch.autograd.profiler.profile(use_device="openreg"):
        for device in ("openreg:0", "openreg:1"):
            torch.ones(8, device=device).mul(2).sum().item()
    torch.testing.assert_close((torch.ones(3, device="openreg") * 2).cpu(), torch.full((3,), 2.0))
    assert torch.openreg.memory_allocated() == before
