"""The registration styles of docs/integration-guide.md, each working end to end:
a TORCH_LIBRARY_IMPL kernel, an ATen dispatch stub, a new operator with its own
device, meta and autograd kernels, autograd Functions returning or aliasing
their input, per-operator fallbacks beside the global one."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import torch_openreg


def _ran(op):
    return torch.openreg.op_counts().get(op, {"device": 0, "fallback": 0})


def test_a_torch_library_impl_kernel_and_a_dispatch_stub_kernel_run_on_the_device():
    x = torch.randn(100)
    torch.openreg.reset_op_counts()
    with torch.openreg.fallback_policy("error"):
        added = torch.add(x.to("openreg"), 1)  # structured kernel, TORCH_LIBRARY_IMPL (OpenRegElementwise.cpp)
        absolute = torch.abs(x.to("openreg"))  # abs_stub (REGISTER_PRIVATEUSE1_DISPATCH)
    torch.testing.assert_close(added.cpu(), x + 1)
    torch.testing.assert_close(absolute.cpu(), x.abs())
    assert _ran("aten::add.Tensor")["device"] >= 1 and _ran("aten::abs")["device"] == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.int8])
def test_custom_abs_computes_on_the_device_like_torch_abs(dtype):
    x = (torch.randn(64) * 50).to(dtype)
    with torch.openreg.fallback_policy("error"):
        out = torch.ops.openreg.custom_abs(x.to("openreg"))
    assert out.dtype == dtype and out.device.type == "openreg"
    torch.testing.assert_close(out.cpu(), x.abs())


def test_custom_abs_has_a_meta_kernel_and_an_autograd_formula_and_passes_opcheck():
    with FakeTensorMode() as mode:
        fake = torch.ops.openreg.custom_abs(mode.from_tensor(torch.randn(2, 3, device="openreg:1")))
    assert fake.shape == (2, 3) and fake.device == torch.device("openreg:1")
    assert torch.ops.openreg.custom_abs(torch.empty(4, 2, device="meta")).shape == (4, 2)
    x = torch.randn(7, device="openreg", requires_grad=True)
    torch.ops.openreg.custom_abs(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), x.detach().cpu().sign())
    torch.library.opcheck(torch.ops.openreg.custom_abs.default, (torch.randn(3, 4, device="openreg"),))
    with pytest.raises(RuntimeError, match="complex input is not supported"):
        torch.ops.openreg.custom_abs(torch.ones(2, dtype=torch.complex64, device="openreg"))
    with pytest.raises(NotImplementedError):
        torch.ops.openreg.custom_abs(torch.ones(2))  # no CPU kernel


def test_an_autograd_function_may_return_its_input_or_a_view_of_it():
    x = torch.randn(5, 5, device="openreg", requires_grad=True)
    same = torch.ops.openreg.custom_autograd_fn_returns_self(x)
    same.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((5, 5), 0.5))
    x.grad = None
    view = torch.ops.openreg.custom_autograd_fn_aliasing(x)
    assert view.data_ptr() == x.data_ptr() and view._base is x
    view.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((5, 5), 0.5))


def test_ops_without_a_device_kernel_take_a_per_operator_or_the_global_fallback():
    # Structured ops are registered one by one to the fallback (they would otherwise
    # run a composite kernel around their .out form); the rest meet the global fallback.
    assert torch_openreg._C.runs_through_fallback("aten::special_zeta")  # per-operator registration
    assert torch_openreg._C.runs_through_fallback("aten::_fft_r2c")  # the global fallback
    assert torch_openreg._C.runs_through_fallback("aten::_convolution")  # a composite sent to the host whole
    assert not torch_openreg._C.runs_through_fallback("aten::add.Tensor")  # a device kernel
    assert not torch_openreg._C.runs_through_fallback("aten::no_such_op")
    a, q = torch.rand(8) + 1.5, torch.rand(8) + 0.5
    torch.openreg.reset_op_counts()
    zeta = torch.special.zeta(a.to("openreg"), q.to("openreg"))
    torch.testing.assert_close(zeta.cpu(), torch.special.zeta(a, q))
    assert _ran("aten::special_zeta") == {"device": 0, "fallback": 1}
    with torch.openreg.fallback_policy("error"), pytest.raises(RuntimeError, match="aten::_fft_r2c"):
        torch.fft.rfft(torch.ones(4, device="openreg"))
