"""Shared setup of the torch_openreg test suite.

The runtime reads its configuration once, when the first device is used, so the
environment is fixed here, before torch (whose ``torch.backends`` entry point loads
torch_openreg) is imported: two devices of 512 MiB each, small enough that an
out-of-memory test is cheap.

CPU is the oracle: most tests run the same code on ``cpu`` and on ``openreg`` tensors
and compare with ``torch.testing.assert_close``.
"""

import os

os.environ["OPENREG_DEVICE_COUNT"] = "2"
os.environ["OPENREG_DEVICE_MEMORY"] = "512MiB"

import gc  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_openreg  # noqa: E402,F401

DEVICE_COUNT = 2
DEVICE_MEMORY = 512 * 2**20


@pytest.fixture(params=range(DEVICE_COUNT), ids=lambda i: f"openreg{i}")
def device(request):
    """Each openreg device in turn, as a ``torch.device``."""
    return torch.device("openreg", request.param)


@pytest.fixture(autouse=True)
def _restore_current_device_and_streams():
    """Each test starts and ends on openreg:0 with the default streams current."""
    torch.openreg.set_device(0)
    yield
    for i in range(DEVICE_COUNT):
        torch.openreg.set_stream(torch.openreg.default_stream(i))
    torch.openreg.set_device(0)


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.detach().to(device).requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    return value


def _compare(actual, expected, **tolerances):
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual).__name__}"
        assert actual.device.type == "openreg", f"result on {actual.device}, expected an openreg device"
        torch.testing.assert_close(actual.cpu(), expected, **tolerances)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _compare(a, e, **tolerances)
    else:
        assert actual == expected


@pytest.fixture
def against_cpu(device):
    """``against_cpu(fn, *cpu_inputs, **tolerances)``: runs ``fn`` on the CPU inputs and on
    copies of them on the test's openreg device, checks that results (tensors, or lists and
    tuples of them) are on openreg and equal to CPU's, and returns the openreg result."""

    def run(fn, *inputs, **tolerances):
        expected = fn(*inputs)
        actual = fn(*_to(inputs, device))
        _compare(actual, expected, **tolerances)
        return actual

    return run


@pytest.fixture
def collect():
    """Frees what Python holds and waits for both devices, so allocator stats are settled."""

    def run():
        gc.collect()
        for i in range(DEVICE_COUNT):
            torch.openreg.synchronize(i)

    return run
