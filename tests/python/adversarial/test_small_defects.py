"""The small defects a hostile user found: each now gives the right number, the right
device, or a clear error instead of a silent no-op."""

import gc

import pytest
import torch

import torch_openreg
from adversary import sentinels, wat_kernel  # noqa: F401  (fixture)


def test_pinned_out_of_memory_names_host_memory_not_a_device():
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(1 << 46, dtype=torch.uint8, pin_memory=True)
    message = str(info.value)
    assert "64.0 TiB of pinned host memory" in message, message
    assert "4294967295" not in message


def test_negative_device_indices_are_named_as_given(sentinels):
    with pytest.raises(torch.AcceleratorError, match="invalid openreg device index -1:"):
        torch.openreg.set_device(-1)
    with pytest.raises(torch.AcceleratorError, match="invalid openreg device index -3:"):
        torch.openreg.memory_stats(-3)
    with pytest.raises(torch.AcceleratorError, match="invalid device index -2"):
        torch_openreg._C.synchronize(-2)
    assert torch.openreg.current_device() == 0


def test_a_launch_on_a_missing_stream_names_that_stream():
    module = torch_openreg._C.load_module(
        0, "adversarial_noop", b'(module (import "env" "memory" (memory 1)) (func (export "adv_noop")))'
    )
    with pytest.raises(ValueError, match="openreg:0 has no stream 77"):
        torch_openreg._C.launch(0, 77, "adv_noop", [], module=module)
    with pytest.raises(ValueError, match="stream id -5 is not a stream of openreg:0"):
        torch_openreg._C.launch(0, -5, "adv_noop", [], module=module)


def test_elapsed_time_between_events_of_two_devices_raises():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    start.record(torch.openreg.current_stream(0))
    end.record(torch.openreg.current_stream(1))
    end.synchronize()
    start.synchronize()
    with pytest.raises(ValueError, match=r"recorded on different devices \(openreg:0 and openreg:1\)"):
        start.elapsed_time(end)


def test_mem_get_info_total_is_the_device_memory(sentinels):
    for i in range(2):
        free, total = torch.openreg.mem_get_info(i)
        assert total == torch.openreg.get_device_properties(i).total_memory
        assert free <= total - torch.openreg.memory_reserved(i)


def test_memory_stats_keep_running_totals_and_count_peaks_and_reset_them(sentinels):
    gc.collect()
    torch.openreg.synchronize(1)
    torch.openreg.reset_peak_memory_stats(1)
    torch.openreg.reset_accumulated_memory_stats(1)
    base = torch.openreg.memory_stats(1)
    assert base["allocation.all.allocated"] == base["allocated_bytes.all.allocated"] == 0
    tensors = [torch.empty(1000, device="openreg:1") for _ in range(5)]
    del tensors
    gc.collect()
    stats = torch.openreg.memory_stats(1)
    assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == 5
    assert stats["allocated_bytes.all.allocated"] == stats["allocated_bytes.all.freed"] == 5 * 4096
    assert stats["active.all.peak"] == base["active.all.current"] + 5
    assert stats["active.all.current"] == base["active.all.current"]
    assert stats["segment.all.peak"] >= stats["segment.all.current"] >= 1
    # torch.accelerator sees the same, and its reset works too.
    assert torch.accelerator.memory_stats(1)["active.all.peak"] == stats["active.all.peak"]
    torch.accelerator.reset_accumulated_memory_stats(1)
    assert torch.openreg.memory_stats(1)["allocation.all.allocated"] == 0


def test_a_kernel_writing_through_a_null_pointer_is_reported(sentinels):
    store = wat_kernel(1, "adv_null_store", "(param $p i32)", "(i32.store (local.get $p) (i32.const 9))")
    store(0)
    with pytest.raises(RuntimeError, match="adv_null_store` trapped on openreg:1: null-pointer-write"):
        torch.openreg.synchronize(1)
    # The guard is clean again: a kernel that reads it sees zeros, and launches go on.
    store(sentinels[1].data_ptr() + 4 * 4095)
    torch.openreg.synchronize(1)
    sentinels[1][4095] = 2040.5  # restore what the store overwrote, for the sentinel check
