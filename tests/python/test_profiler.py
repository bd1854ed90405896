"""The profiler with openreg work: every kernel launch and copy as a device
activity with the device's own timestamps, linked to the operator that queued
it (torch.profiler with ProfilerActivity.PrivateUse1, through the kineto
plugin); device times from device events around each op (the legacy
``use_device="openreg"`` profiler); never negative; key_averages and the
Chrome trace export working."""

import json
import os
import subprocess
import sys

import pytest
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


def _device_profile(fn):
    fn()  # warm up: the first op of a device starts it
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        fn()
    return prof


def _device_events(prof):
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]


def test_each_kernel_is_a_device_activity_linked_to_the_op_that_launched_it(tmp_path):
    x = torch.randn(1 << 22, device="openreg")

    def work():
        return (x + 1).sin().sum().cpu()

    prof = _device_profile(work)
    by_name = {e.name: e for e in _device_events(prof)}
    assert {"elementwise (add)", "elementwise (sin)", "reduce (sum)", "memcpy DtoH"} <= by_name.keys(), by_name.keys()
    ops = {e.name: e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU}
    # The operator's device time is its kernels' time, which it lists (a 4M-element sum is
    # two launches: partials on all workers, then their merge).
    for op, kernel, launches in (
        ("aten::add", "elementwise (add)", 1),
        ("aten::sin", "elementwise (sin)", 1),
        ("aten::sum", "reduce (sum)", 2),
    ):
        assert [k.name for k in ops[op].kernels] == [kernel] * launches, (op, ops[op].kernels)
        mine = [e for e in _device_events(prof) if e.name == kernel]
        assert ops[op].self_device_time_total == pytest.approx(sum(e.time_range.elapsed_us() for e in mine))
        # Device work starts after its op began queueing it, on the same clock.
        assert min(e.time_range.start for e in mine) >= ops[op].time_range.start
    # 4M-element sin keeps the device busy far longer than the 4-byte copy.
    assert by_name["elementwise (sin)"].time_range.elapsed_us() > 20 * by_name["memcpy DtoH"].time_range.elapsed_us()
    averages = {a.key: a for a in prof.key_averages()}
    assert averages["elementwise (sin)"].self_device_time_total > 0
    assert averages["aten::sin"].device_time_total == pytest.approx(averages["elementwise (sin)"].device_time_total)

    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = {e["name"]: e for e in events if e.get("cat") == "kernel"}
    sin = kernels["elementwise (sin)"]
    assert (sin["pid"], sin["tid"], sin["args"]["device"], sin["args"]["stream"]) == (0, 0, 0, 0)
    assert sin["args"]["workers"] == torch.openreg.get_device_properties(0).workers
    cpu_sin = next(e for e in events if e.get("name") == "aten::sin" and e.get("cat") == "cpu_op")
    assert sin["args"]["External id"] == cpu_sin["args"]["External id"]
    copy = next(e for e in events if e.get("cat") == "gpu_memcpy")
    assert copy["args"]["bytes"] == 4


def test_device_activity_names_the_device_and_stream_and_counts_copies():
    host = torch.arange(1 << 16, dtype=torch.float32)
    stream = torch.openreg.Stream(device="openreg:1")

    def work():
        with torch.openreg.stream(stream):
            y = host.to("openreg:1", non_blocking=False) * 2
            z = y.to("openreg:0")
        torch.openreg.synchronize("openreg:1")
        return z.cpu()

    prof = _device_profile(work)
    events = _device_events(prof)
    mul = next(e for e in events if e.name == "elementwise (mul)")
    assert (mul.device_index, mul.device_resource_id) == (1, stream.stream_id)
    h2d = next(e for e in events if e.name == "memcpy HtoD")
    assert (h2d.device_index, h2d.device_resource_id) == (1, stream.stream_id)
    peer = [e for e in events if e.name in ("memcpy PtoP", "memcpy DtoD")]
    assert peer, [e.name for e in events]
    copy_ops = [e for e in prof.events() if e.name == "aten::_copy_from"]
    assert any(k.name == "memcpy HtoD" for e in copy_ops for k in e.kernels), [[k.name for k in e.kernels] for e in copy_ops]


def test_engine_activities_name_the_op_or_the_products_shape():
    a, b = torch.randn(3, 4, device="openreg"), torch.randn(4, 5, device="openreg")
    images = torch.randn(2, 3, 8, 8, device="openreg")

    def work():
        torch.mm(a, b), torch.bmm(a.expand(6, 3, 4), b.expand(6, 4, 5)), a.sum(1), a.log_softmax(1)
        torch.nn.functional.max_pool2d(images, 2)
        torch.openreg.synchronize()

    names = {e.name for e in _device_events(_device_profile(work))}
    assert {"gemm (3x4 @ 4x5)", "gemm (6 x 3x4 @ 4x5)", "reduce (sum)", "softmax (log_softmax)",
            "pool (max)"} <= names, names


def test_a_cpu_only_profile_records_no_device_activity_and_recording_stops_after():
    x = torch.ones(1024, device="openreg")
    (x * 2).sum().item()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x * 2).sum().item()
    assert not _device_events(prof)
    assert "aten::mul" in {e.name for e in prof.events()}
    # A device profile after it still sees its own work, and only that.
    prof = _device_profile(lambda: (x * 3).sum().item())
    names = [e.name for e in _device_events(prof)]
    assert "elementwise (mul)" in names and names.count("elementwise (mul)") == 1, names


def test_softmax_kernel_launches_are_labelled_with_their_op():
    x = torch.randn(64, 100, device="openreg", requires_grad=True)

    def work():
        y = torch.log_softmax(x, 1)
        y.backward(torch.ones_like(y))
        torch.softmax(x.detach(), 1)
        torch.logsumexp(x.detach(), 1)

    names = {e.name for e in _device_events(_device_profile(work))}
    assert {"softmax (softmax)", "softmax (log_softmax)", "softmax (log_softmax_backward)",
            "softmax (logsumexp)"} <= names, names


_PERF_MAP_SCRIPT = """
import os, torch, torch_openreg
x = torch.randn(64, 64, device="openreg")
(x @ x).tanh().cpu()
print(os.getpid())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="perf maps are Linux perf's")
@pytest.mark.parametrize("value", ["1", "0"])
def test_perf_map_names_the_wasm_functions_for_linux_perf(value):
    # OPENREG_PERF_MAP=1: wasmtime lists each compiled function in /tmp/perf-<pid>.map, so that
    # `perf record` names samples in device code (the engine's gemm and tanh loops here).
    env = dict(os.environ, OPENREG_PERF_MAP=value)
    done = subprocess.run([sys.executable, "-c", _PERF_MAP_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    path = f"/tmp/perf-{done.stdout.strip().splitlines()[-1]}.map"
    try:
        if value == "0":
            assert not os.path.exists(path)
            return
        with open(path) as f:
            names = f.read()
        assert "tile_F32" in names and "contig_TANH_F32" in names, names[:500]
    finally:
        if os.path.exists(path):
            os.remove(path)


def test_a_bad_perf_map_setting_is_a_clear_error():
    env = dict(os.environ, OPENREG_PERF_MAP="maybe")
    done = subprocess.run([sys.executable, "-c", "import torch, torch_openreg; torch.ones(1, device='openreg')"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "OPENREG_PERF_MAP" in done.stderr, done.stderr[-2000:]
