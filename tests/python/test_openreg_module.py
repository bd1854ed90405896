"""Every function of ``torch.openreg`` (the torch.cuda-like device module), at least once,
and the methods the package adds to ``torch.Tensor`` and ``torch.nn.Module``."""

import inspect
import os
import threading

import pytest
import torch
from conftest import DEVICE_COUNT, DEVICE_MEMORY

import torch_openreg


def test_the_backend_is_registered_as_openreg():
    assert torch._C._get_privateuse1_backend_name() == "openreg"
    assert torch.openreg is torch_openreg.openreg
    assert torch.get_device_module("openreg") is torch.openreg


def test_every_public_function_has_a_docstring():
    missing = [
        name
        for name in torch.openreg.__all__
        if not inspect.getdoc(getattr(torch.openreg, name))
    ]
    assert not missing, f"no docstring: {missing}"


def test_is_available_and_device_count():
    assert torch.openreg.is_available() is True
    assert torch.openreg.device_count() == DEVICE_COUNT


def test_is_initialized_after_first_use():
    torch.ones(1, device="openreg")
    torch.openreg.init()
    assert torch.openreg.is_initialized()
    assert torch.openreg._is_in_bad_fork() is False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_refuses_the_devices_but_can_still_seed():
    torch.ones(1, device="openreg")  # the parent has used the devices
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report through the pipe, never return into pytest
        try:
            os.close(r)
            status = [torch.openreg._is_in_bad_fork(), torch.openreg.is_initialized()]
            torch.manual_seed(1)  # skips openreg's generators in a bad fork
            for attempt in (torch.openreg.current_device, lambda: torch.ones(1, device="openreg")):
                try:
                    attempt()
                    status.append("usable")
                except RuntimeError as e:
                    status.append("refused" if "Cannot re-initialize openreg in forked subprocess" in str(e) else f"other: {e}")
            os.write(w, repr(status).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as pipe:
        report = pipe.read()
    os.waitpid(pid, 0)
    assert report == repr([True, False, "refused", "refused"])
    assert torch.openreg._is_in_bad_fork() is False


@pytest.mark.parametrize("spelling", [1, "openreg:1", torch.device("openreg", 1)], ids=repr)
def test_set_device_and_current_device(spelling):
    torch.openreg.set_device(spelling)
    assert torch.openreg.current_device() == 1
    assert torch.ones(1, device="openreg").device == torch.device("openreg:1")
    torch.openreg.set_device(0)
    assert torch.openreg.current_device() == 0


def test_set_device_with_a_negative_index_raises_and_changes_nothing():
    torch.openreg.set_device(1)
    with pytest.raises(torch.AcceleratorError, match="invalid openreg device index -1"):
        torch.openreg.set_device(-1)
    assert torch.openreg.current_device() == 1


@pytest.mark.parametrize("spelling", [1, "openreg:1", torch.device("openreg:1")], ids=repr)
def test_device_context_manager_selects_and_restores(spelling):
    assert torch.openreg.current_device() == 0
    with torch.openreg.device(spelling):
        assert torch.openreg.current_device() == 1
        assert torch.empty(1, device="openreg").device.index == 1
        with torch.openreg.device(0):
            assert torch.openreg.current_device() == 0
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 0


def test_device_context_manager_restores_on_error():
    with pytest.raises(KeyError):
        with torch.openreg.device(1):
            raise KeyError("boom")
    assert torch.openreg.current_device() == 0


def test_device_context_manager_with_none_is_a_no_op():
    with torch.openreg.device(None):
        assert torch.openreg.current_device() == 0


def test_current_device_is_per_thread():
    seen = []
    torch.openreg.set_device(1)
    t = threading.Thread(target=lambda: seen.append(torch.openreg.current_device()))
    t.start()
    t.join()
    assert seen == [0]
    assert torch.openreg.current_device() == 1


def test_device_arguments_reject_other_device_types():
    with pytest.raises(ValueError, match="openreg"):
        torch.openreg.memory_allocated("cpu")


def test_synchronize_waits_for_queued_work(device):
    x = torch.randn(1 << 18, device=device)
    y = x * 2 + 1
    torch.openreg.synchronize(device)
    torch.openreg.synchronize()  # the current device
    torch.testing.assert_close(y.cpu(), x.cpu() * 2 + 1)


def test_get_device_properties_and_name(device):
    props = torch.openreg.get_device_properties(device)
    assert props.index == device.index
    assert props.total_memory == DEVICE_MEMORY
    assert props.memory64 is False
    assert props.kernel_timeout_ms > 0
    assert f"openreg:{device.index}" in props.name
    assert torch.openreg.get_device_name(device) == props.name
    assert torch.openreg.get_device_name() == torch.openreg.get_device_name(0)


# ---- streams and events -------------------------------------------------------------


def test_stream_is_an_openreg_torch_stream(device):
    s = torch.openreg.Stream(device)
    assert isinstance(s, torch.Stream)
    assert s.device == device
    assert s != torch.openreg.default_stream(device)


def test_stream_on_the_current_device_by_default():
    with torch.openreg.device(1):
        assert torch.openreg.Stream().device_index == 1


def test_stream_priority_is_kept_and_clamped():
    high = torch.openreg.Stream(0, priority=-1)
    assert high.priority == -1
    assert torch.openreg.Stream(0, priority=-100).priority == -2
    assert torch.openreg.Stream(0, priority=5).priority == 0
    assert torch.openreg.default_stream(0).priority == 0


def test_default_and_current_stream(device):
    default = torch.openreg.default_stream(device)
    assert isinstance(default, torch.openreg.Stream)
    assert default.device == device
    assert torch.openreg.current_stream(device) == default
    assert torch.openreg.current_stream(device) == torch.accelerator.current_stream(device.index)


def test_stream_context_manager_selects_and_restores(device):
    s = torch.openreg.Stream(device)
    with torch.openreg.stream(s):
        assert torch.openreg.current_stream(device) == s
        assert torch.openreg.current_device() == device.index
        x = torch.ones(1000, device=device) * 3
    assert torch.openreg.current_stream(device) == torch.openreg.default_stream(device)
    assert torch.openreg.current_device() == 0
    s.synchronize()
    assert s.query()
    torch.testing.assert_close(x.cpu(), torch.full((1000,), 3.0))


def test_stream_context_manager_with_none_is_a_no_op():
    before = torch.openreg.current_stream()
    with torch.openreg.stream(None):
        assert torch.openreg.current_stream() == before


def test_set_stream_makes_a_stream_current():
    s = torch.openreg.Stream(1)
    torch.openreg.set_stream(s)
    assert torch.openreg.current_stream(1) == s
    assert torch.openreg.current_device() == 1


def test_event_records_and_synchronizes(device):
    e = torch.openreg.Event(enable_timing=True)
    assert isinstance(e, torch.Event) and isinstance(e, torch.openreg.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.openreg.Event)
    start = torch.openreg.Event(enable_timing=True)
    with torch.openreg.device(device):
        start.record()
        x = torch.randn(1 << 20, device=device)
        for _ in range(5):
            x = x * 1.0001 + 0.5
        e.record()
    e.synchronize()
    assert e.query()
    assert e.device == device, "an event belongs to the device it was recorded on"
    assert start.elapsed_time(e) > 0


def test_events_work_with_stream_apis(device):
    s = torch.openreg.Stream(device)
    done = torch.openreg.Event()
    with torch.openreg.stream(s):
        x = torch.full((1 << 16,), 2.0, device=device)
        done.record(s)
    other = torch.openreg.Stream(device)
    other.wait_event(done)
    with torch.openreg.stream(other):
        y = x * x
    other.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((1 << 16,), 4.0))


def test_event_rejects_interprocess():
    with pytest.raises(ValueError, match="interprocess"):
        torch.openreg.Event(interprocess=True)


# ---- memory ---------------------------------------------------------------------

STAT_KEYS = {
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
    "active.all.current",
    "segment.all.current",
    "num_alloc_retries",
    "num_ooms",
    "allocation.all.allocated",
    "allocation.all.freed",
    "allocated_bytes.all.allocated",
    "allocated_bytes.all.freed",
    "active.all.peak",
    "segment.all.peak",
}


def test_memory_stats_have_torch_cuda_keys(device):
    stats = torch.openreg.memory_stats(device)
    assert STAT_KEYS <= set(stats)
    assert all(isinstance(v, int) and v >= 0 for v in stats.values())


def test_memory_functions_track_a_new_tensor(device, collect):
    collect()
    before = torch.openreg.memory_stats(device)
    t = torch.empty(1 << 20, dtype=torch.uint8, device=device)
    after = torch.openreg.memory_stats(device)
    assert torch.openreg.memory_allocated(device) >= before["allocated_bytes.all.current"] + (1 << 20)
    assert torch.openreg.max_memory_allocated(device) >= torch.openreg.memory_allocated(device)
    assert torch.openreg.memory_reserved(device) >= torch.openreg.memory_allocated(device)
    assert torch.openreg.max_memory_reserved(device) >= torch.openreg.memory_reserved(device)
    assert after["allocation.all.allocated"] == before["allocation.all.allocated"] + 1
    assert after["active.all.current"] == before["active.all.current"] + 1
    del t
    collect()
    assert torch.openreg.memory_stats(device)["allocation.all.freed"] == before["allocation.all.freed"] + 1


def test_reset_peak_memory_stats(device, collect):
    t = torch.empty(4 << 20, dtype=torch.uint8, device=device)
    del t
    collect()
    assert torch.openreg.max_memory_allocated(device) > torch.openreg.memory_allocated(device)
    torch.openreg.reset_peak_memory_stats(device)
    assert torch.openreg.max_memory_allocated(device) == torch.openreg.memory_allocated(device)
    assert torch.openreg.max_memory_reserved(device) == torch.openreg.memory_reserved(device)


def test_mem_get_info_and_empty_cache(device, collect):
    collect()
    torch.openreg.empty_cache(device)  # no cached segment to serve the allocation below
    free, total = torch.openreg.mem_get_info(device)
    # total is the device memory, as cudaMemGetInfo reports it; the runtime's static area,
    # parameter area and kernel stack (16 MiB) are never free.
    assert total == torch.openreg.get_device_properties(device).total_memory == DEVICE_MEMORY
    assert 0 < free <= total - (16 << 20)
    t = torch.empty(16 << 20, dtype=torch.uint8, device=device)
    assert torch.openreg.mem_get_info(device)[0] <= free - (16 << 20)
    del t
    collect()
    torch.openreg.empty_cache(device)
    assert torch.openreg.mem_get_info(device)[0] >= free
    torch.openreg.empty_cache()  # every device


# ---- random number generators ----------------------------------------------------


def test_seed_functions(device):
    with torch.openreg.device(device):
        torch.openreg.manual_seed(42)
        assert torch.openreg.initial_seed() == 42
        s = torch.openreg.seed()
        assert torch.openreg.initial_seed() == s
    torch.openreg.manual_seed_all(5)
    for i in range(DEVICE_COUNT):
        with torch.openreg.device(i):
            assert torch.openreg.initial_seed() == 5
    common = torch.openreg.seed_all()
    for i in range(DEVICE_COUNT):
        with torch.openreg.device(i):
            assert torch.openreg.initial_seed() == common


def test_negative_seeds_wrap_like_torch_manual_seed():
    torch.openreg.manual_seed(-1)
    assert torch.openreg.initial_seed() == 2**64 - 1
    torch.manual_seed(-1)
    assert torch.openreg.initial_seed() == torch.initial_seed()


def test_rng_state_all_round_trip():
    torch.openreg.manual_seed_all(8)
    states = torch.openreg.get_rng_state_all()
    assert len(states) == DEVICE_COUNT
    first = [torch.randn(5, device=f"openreg:{i}").cpu() for i in range(DEVICE_COUNT)]
    torch.openreg.set_rng_state_all(states)
    again = [torch.randn(5, device=f"openreg:{i}").cpu() for i in range(DEVICE_COUNT)]
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---- op accounting (more in test_ops.py) ---------------------------------------------


def test_op_counts_have_device_and_fallback_numbers():
    torch.openreg.reset_op_counts()
    torch.ones(3, device="openreg").exp()
    counts = torch.openreg.op_counts()
    assert counts, "no op was counted"
    for op, entry in counts.items():
        assert isinstance(op, str)
        assert set(entry) == {"device", "fallback"}
        assert entry["device"] + entry["fallback"] > 0


# ---- generated methods ----------------------------------------------------------


def test_tensor_openreg_and_is_openreg():
    t = torch.arange(4.0)
    assert not t.is_openreg
    d = t.openreg()
    assert d.is_openreg and d.device == torch.device("openreg:0")
    assert t.openreg(1).device == torch.device("openreg:1")
    torch.testing.assert_close(d.cpu(), t)


def test_module_openreg_moves_parameters_and_buffers():
    m = torch.nn.BatchNorm1d(3)
    assert m.openreg() is m
    assert all(p.is_openreg for p in m.parameters())
    assert all(b.is_openreg for b in m.buffers())
