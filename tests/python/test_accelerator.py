"""openreg through the device-generic API: torch.accelerator, torch.Stream, torch.Event."""

import pytest
import torch


def test_current_accelerator_is_openreg():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == "openreg"
    assert torch.accelerator.device_count() == torch.openreg.device_count() == 2


def test_set_and_current_device_index():
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    assert torch.openreg.current_device() == 1
    torch.accelerator.set_device_index(0)
    assert torch.accelerator.current_device_index() == 0


def test_device_index_context_manager():
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1
        assert torch.empty(1, device="openreg").device.index == 1
    assert torch.accelerator.current_device_index() == 0


def test_torch_stream_context_makes_it_current(device):
    s = torch.Stream(device=device)
    assert s.device == device
    with s:
        assert torch.accelerator.current_stream(device.index) == s
        y = torch.arange(100.0, device=device) * 2
    assert torch.accelerator.current_stream(device.index) != s
    s.synchronize()
    assert s.query()
    torch.testing.assert_close(y.cpu(), torch.arange(100.0) * 2)


def test_set_stream_switches_the_current_stream():
    s = torch.Stream(device="openreg:1")
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_stream(1) == s
    assert torch.accelerator.current_device_index() == 1


def test_event_record_query_synchronize(device):
    e = torch.Event(device=device)
    with torch.accelerator.device_index(device.index):
        x = torch.randn(1 << 20, device=device)
        y = x.abs() + 1
        e.record()
    e.synchronize()
    assert e.query()
    assert (y.cpu() >= 1).all()


def test_event_elapsed_time_is_positive_with_enable_timing(device):
    start = torch.Event(device=device, enable_timing=True)
    end = torch.Event(device=device, enable_timing=True)
    s = torch.Stream(device=device)
    with s:
        start.record(s)
        x = torch.randn(1 << 20, device=device)
        for _ in range(10):
            x = x * 0.5 + 1.0
        end.record(s)
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_a_stream_waits_for_an_event_on_another_stream(device):
    producer, consumer = torch.Stream(device=device), torch.Stream(device=device)
    x = torch.zeros(1 << 18, device=device)
    with producer:
        for _ in range(5):
            x.add_(1.0)
        done = producer.record_event()
    consumer.wait_event(done)
    with consumer:
        y = x * 2
    consumer.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((1 << 18,), 10.0))


def test_wait_stream_orders_two_streams(device):
    a, b = torch.Stream(device=device), torch.Stream(device=device)
    x = torch.ones(1 << 16, device=device)
    with a:
        x.mul_(4.0)
    b.wait_stream(a)
    with b:
        x.add_(1.0)
    torch.accelerator.synchronize(device.index)
    torch.testing.assert_close(x.cpu(), torch.full((1 << 16,), 5.0))


def test_accelerator_synchronize(device):
    x = torch.randn(1000, device=device)
    y = x.exp()
    torch.accelerator.synchronize(device)
    torch.testing.assert_close(y.cpu(), x.cpu().exp())


def test_device_capability_lists_the_dtypes_openreg_tensors_take():
    dtypes = torch.accelerator.get_device_capability("openreg:1")["supported_dtypes"]
    for dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                  torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128):
        assert dtype in dtypes, dtype
    assert torch.qint8 not in dtypes and torch.quint8 not in dtypes


def test_a_bad_device_index_raises_accelerator_error_from_every_entry_point():
    calls = [
        lambda: torch.ones(1, device="openreg:5"),
        lambda: torch.openreg.set_device(5),
        lambda: torch.accelerator.set_device_index(5),
        lambda: torch.openreg.synchronize(5),
        lambda: torch.openreg.memory_allocated(5),
        lambda: torch.openreg.Stream(5),
    ]
    for call in calls:
        with pytest.raises(torch.AcceleratorError, match="invalid openreg device index 5: there are 2"):
            call()
    assert torch.openreg.current_device() == 0
