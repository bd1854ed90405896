"""Error paths: out of memory, bad device indices, kernel traps. Each one raises a clear
Python error, and the process and the devices keep working afterwards."""

import pytest
import torch

import torch_openreg

from conftest import DEVICE_MEMORY


def _device_still_works(device):
    x = torch.arange(6.0, device=device)
    torch.testing.assert_close((x * 2 + 1).cpu(), torch.arange(6.0) * 2 + 1)


def test_allocation_bigger_than_the_device_raises_out_of_memory(device):
    ooms = torch.openreg.memory_stats(device)["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError, match=f"out of memory on openreg:{device.index}"):
        torch.empty(DEVICE_MEMORY + (64 << 20), dtype=torch.uint8, device=device)
    assert torch.openreg.memory_stats(device)["num_ooms"] == ooms + 1
    _device_still_works(device)


def test_out_of_memory_message_has_the_numbers(device):
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(DEVICE_MEMORY * 2, dtype=torch.uint8, device=device)
    message = str(info.value)
    assert "MiB" in message or "GiB" in message, message


def test_out_of_memory_after_filling_the_device_then_recovers(device, collect):
    chunk = 96 << 20
    held = []
    with pytest.raises(torch.OutOfMemoryError):
        for _ in range(DEVICE_MEMORY // chunk + 1):
            held.append(torch.empty(chunk, dtype=torch.uint8, device=device))
    assert len(held) >= 3
    del held
    collect()
    big = torch.empty(chunk * 3, dtype=torch.uint8, device=device)
    big.fill_(1)
    assert big[-1].item() == 1
    del big
    _device_still_works(device)


def test_out_of_memory_is_a_runtime_error_too(device):
    with pytest.raises(RuntimeError):
        torch.zeros(DEVICE_MEMORY, dtype=torch.float32, device=device)


def test_set_device_with_a_bad_index_raises_accelerator_error():
    with pytest.raises(torch.AcceleratorError, match=r"99.*2|2.*99"):
        torch.openreg.set_device(99)
    assert torch.openreg.current_device() == 0
    _device_still_works("openreg:0")


def test_tensor_on_a_bad_device_index_raises():
    # The same type as every other entry point (CUDA: "invalid device ordinal").
    with pytest.raises(torch.AcceleratorError, match="invalid openreg device index 99: there are 2"):
        torch.ones(1, device="openreg:99")
    with pytest.raises(torch.AcceleratorError, match="99"):
        torch.empty(1).to("openreg:99")
    _device_still_works("openreg:0")


@pytest.mark.parametrize(
    "call",
    [
        lambda: torch.openreg.device(2),
        lambda: torch.openreg.memory_allocated(5),
        lambda: torch.openreg.synchronize("openreg:7"),
        lambda: torch.openreg.get_rng_state(3),
        lambda: torch.openreg.Stream(9),
        lambda: torch_openreg._C.mem_get_info(4),
    ],
    ids=["device", "memory_allocated", "synchronize", "get_rng_state", "Stream", "_C.mem_get_info"],
)
def test_every_device_argument_rejects_a_bad_index(call):
    with pytest.raises(torch.AcceleratorError, match="device"):
        call()


def test_moving_to_a_bad_device_index_raises():
    x = torch.ones(2)
    with pytest.raises(torch.AcceleratorError, match="9"):
        x.to("openreg:9")


# A kernel module whose kernel traps (the runtime's own trap tests use the same shape).
TRAP_WAT = b"""(module
  (import "env" "memory" (memory 1))
  (func (export "pytest_abort") unreachable))"""

def test_a_kernel_trap_raises_runtime_error_naming_kernel_and_device(device):
    idx = device.index
    torch_openreg._C.load_module(idx, "pytest_faults", TRAP_WAT)
    stream = torch.openreg.current_stream(device)
    torch_openreg._C.launch(idx, stream.stream_id, "pytest_abort", [])
    with pytest.raises(RuntimeError, match=f"pytest_abort.*openreg:{idx}"):
        torch.openreg.synchronize(device)
    torch.openreg.synchronize(device)  # reported once
    _device_still_works(device)
