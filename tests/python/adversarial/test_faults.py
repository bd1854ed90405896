"""Kernels that fault in every way a kernel can, and modules that break the contract.

A fault becomes a Python error naming the kernel and the device, reported once, and the
device (and the other one) keeps computing. A broken module is refused at load with the
reason, and a user module cannot take over the built-in kernels.
"""

import pytest
import torch

import torch_openreg
from adversary import devices_still_compute, run_python, sentinels  # noqa: F401  (fixture)

FAULTS = b"""(module
  (import "env" "memory" (memory 1))
  (func (export "adv_oob") (i32.store (i32.const 0x7ffffff0) (i32.const 1)))
  (func (export "adv_abort") unreachable)
  (func $recurse (export "adv_recurse") (param i32) (call $recurse (i32.add (local.get 0) (i32.const 1))))
  (func (export "adv_divide") (param i32) (drop (i32.div_s (i32.const 1) (local.get 0))))
  (func (export "adv_null") (i32.store (i32.const 16) (i32.const 42))))"""


@pytest.fixture(scope="module")
def faults():
    return {device: torch_openreg._C.load_module(device, "adversarial_faults", FAULTS) for device in (0, 1)}


@pytest.mark.parametrize(
    "kernel, args, trap",
    [
        ("adv_oob", [], "out-of-bounds"),
        ("adv_abort", [], "unreachable"),
        ("adv_recurse", [0], "stack-overflow"),
        ("adv_divide", [0], "integer-divide-by-zero"),
        ("adv_null", [], "null-pointer-write"),
    ],
)
@pytest.mark.parametrize("device", [0, 1])
def test_a_faulting_kernel_raises_once_and_the_devices_go_on(faults, sentinels, kernel, args, trap, device):
    stream = torch.openreg.current_stream(device).stream_id
    torch_openreg._C.launch(device, stream, kernel, args, module=faults[device])
    with pytest.raises(RuntimeError, match=f"kernel `{kernel}` trapped on openreg:{device}: {trap}"):
        torch.openreg.synchronize(device)
    torch.openreg.synchronize(device)  # reported once


def test_an_endless_kernel_is_stopped_by_the_watchdog_and_the_device_goes_on():
    result = run_python(
        """
        import time, torch, torch_openreg
        x = torch.full((256,), 2.0, device="openreg:0")
        m = torch_openreg._C.load_module(0, "endless", b'''(module (import "env" "memory" (memory 1))
            (func (export "adv_forever") (loop $l (br $l))))''')
        start = time.monotonic()
        torch_openreg._C.launch(0, torch.openreg.current_stream(0).stream_id, "adv_forever", [], module=m)
        try:
            torch.openreg.synchronize(0)
        except RuntimeError as e:
            print("error:", e)
        print("seconds:", round(time.monotonic() - start, 1))
        print("after:", (x * 3).sum().item(), torch.ones(4, device="openreg:1").sum().item())
        """,
        OPENREG_KERNEL_TIMEOUT_MS=300,
    )
    assert result.returncode == 0, result.stderr
    assert "kernel `adv_forever` on openreg:0 ran longer than the watchdog limit of 300 ms" in result.stdout
    assert "after: 1536.0 4.0" in result.stdout


BROKEN_MODULES = {
    "not wasm": (b"\x00asm garbage", "not a valid wasm module"),
    "not wasm or text": (b"\x7fELF\x02\x01", "not a wasm module"),
    "a host import": (
        b'(module (import "env" "memory" (memory 1)) (import "wasi" "fd_write" (func)) (func (export "k")))',
        "may import only its memory",
    ),
    "a start function": (
        b'(module (import "env" "memory" (memory 1)) (func $s) (start $s) (func (export "k")))',
        "start function",
    ),
    "its own memory": (b'(module (memory 1) (func (export "k")))', "defines its own memory"),
    "no kernels": (b'(module (import "env" "memory" (memory 1)))', "exports no functions"),
    "a kernel with results": (
        b'(module (import "env" "memory" (memory 1)) (func (export "k") (result i32) (i32.const 1)))',
        "returns values",
    ),
    "static data over the engine's": (
        b'(module (import "env" "memory" (memory 1)) (data (i32.const 14680064) "x") (func (export "k")))',
        "conflicts with `openreg.engine`",
    ),
    "data outside the static area": (
        b'(module (import "env" "memory" (memory 1)) (data (i32.const 0x2000000) "x") (func (export "k")))',
        "outside the device's static area",
    ),
    "endless nesting": (
        b'(module (import "env" "memory" (memory 1)) (func (export "k") '
        + b"(loop " * 40
        + b")" * 40
        + b"))",
        "nests loops more than 32 deep",
    ),
    "a huge module": (b"\x00" * (16 * 2**20 + 1), "may be at most 16.0 MiB"),
}


@pytest.mark.parametrize("case", list(BROKEN_MODULES), ids=str)
def test_a_broken_module_is_refused_with_the_reason(sentinels, case):
    wasm, reason = BROKEN_MODULES[case]
    with pytest.raises(ValueError, match="invalid kernel module|conflicts with") as info:
        torch_openreg._C.load_module(0, "adversarial_broken", wasm)
    assert reason in str(info.value)


def test_a_user_module_exporting_builtin_names_cannot_take_over_builtin_ops(sentinels):
    # Kernels named like the engine's and the old built-ins, that would write garbage.
    hijack = b"""(module (import "env" "memory" (memory 1))
      (func (export "elementwise") (param i32))
      (func (export "reduce") (param i32))
      (func (export "add_f32") (param i32 i32 i32 i32)))"""
    for device in (0, 1):
        torch_openreg._C.load_module(device, "adversarial_hijack", hijack)
    a = torch.arange(100.0)
    for device in ("openreg:0", "openreg:1"):
        x = a.to(device)
        torch.testing.assert_close((x + x).cpu(), a + a)
        torch.testing.assert_close(x.sum().cpu(), a.sum())
    devices_still_compute()


def test_a_module_loaded_twice_is_launched_by_module():
    twice = b"""(module (import "env" "memory" (memory 1))
      (func (export "adv_twice") (param $p i32) (i32.store (local.get $p) (i32.const 7))))"""
    first = torch_openreg._C.load_module(0, "adversarial_twice", twice)
    second = torch_openreg._C.load_module(0, "adversarial_twice", twice)
    assert first != second
    out = torch.zeros(1, dtype=torch.int32, device="openreg:0")
    stream = torch.openreg.current_stream(0).stream_id
    with pytest.raises(ValueError, match="exported by several modules.*launch it through its module id"):
        torch_openreg._C.launch(0, stream, "adv_twice", [out.data_ptr()])
    for module in (first, second):
        out.zero_()
        torch_openreg._C.launch(0, stream, "adv_twice", [out.data_ptr()], module=module)
        assert out.item() == 7
