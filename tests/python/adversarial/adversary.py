"""What every adversarial test shares: sentinels that an attack must leave untouched, a
check that both devices still compute, and fresh Python processes for the cases that
need their own configuration or their own life (fork, signals, exit, the watchdog).

Each test of the suite states the attack, asserts the clear error it gets, and (through
the ``sentinels`` fixture) that a sentinel tensor on each device is unchanged and that
both devices still compute correctly afterwards.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_openreg

DEVICES = ("openreg:0", "openreg:1")
SENTINEL = torch.arange(4096, dtype=torch.float32) * 0.5 - 7.0


def devices_still_compute():
    for name in DEVICES:
        x = torch.arange(1000.0, device=name)
        torch.testing.assert_close((x * 2 + 1).sum().cpu(), (torch.arange(1000.0) * 2 + 1).sum())


@pytest.fixture
def sentinels():
    """A known tensor on each device; after the test, each is unchanged and both devices compute."""
    held = [SENTINEL.to(name) for name in DEVICES]
    yield held
    for name, tensor in zip(DEVICES, held):
        torch.openreg.synchronize(torch.device(name))
        assert torch.equal(tensor.cpu(), SENTINEL), f"the sentinel on {name} changed"
    devices_still_compute()


def wat_kernel(device, name, params, body):
    """Loads a one-kernel module (``(func (export name) params body)``, WAT) on ``device``
    and returns a function that launches it on the device's current stream."""
    wat = f'(module (import "env" "memory" (memory 1)) (func (export "{name}") {params} {body}))'
    module = torch_openreg._C.load_module(device, f"adversarial_{name}", wat.encode())

    def launch(*args):
        stream = torch.openreg.current_stream(device).stream_id
        torch_openreg._C.launch(device, stream, name, list(args), module=module)

    return launch


def run_python(code, timeout=120, **env):
    """Runs ``code`` in a fresh interpreter with two 512 MiB devices (plus ``env``);
    returns the finished process (text output)."""
    full_env = dict(os.environ, OPENREG_DEVICE_COUNT="2", OPENREG_DEVICE_MEMORY="512MiB")
    full_env.update({key: str(value) for key, value in env.items()})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def resident_bytes():
    """This process's resident memory (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
