"""ReLU as an openreg operator written by hand in WebAssembly text (``relu.wat``).

    python examples/kernels/relu.py

The kernel ``relu_f32(out, x, n)`` takes bare data pointers and a count
rather than tensor descriptors, so the binding maps the op's arguments
itself (``args=``): ``kernels.ptr(t)`` passes a tensor's data address, and a
non-contiguous input is made contiguous first (that copy runs on the device,
in order before the kernel on the same stream). The script checks it against
``torch.relu`` on CPU, special values included.
"""

from __future__ import annotations

import pathlib

import torch

import torch_openreg  # noqa: F401 - registers the openreg device
from torch_openreg import kernels

module = kernels.load(pathlib.Path(__file__).with_name("relu.wat"))


@kernels.custom_op(
    "examples::relu",
    module["relu_f32"],
    args=lambda x, out: (kernels.ptr(out), kernels.ptr(x.contiguous()), x.numel()),
)
def relu(x: torch.Tensor) -> torch.Tensor:
    """``max(x, 0)`` for float32, NaN kept."""
    if x.dtype != torch.float32:
        raise TypeError(f"examples::relu: float32 only, got {x.dtype}")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def main() -> None:
    x = torch.randn(1001)
    x[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])
    for view in (x, x.reshape(7, 143).t(), x[1::3]):
        torch.testing.assert_close(relu(view.to("openreg")).cpu(), torch.relu(view), equal_nan=True)
    print("examples::relu matches torch.relu on CPU (contiguous, transposed, strided; nan and inf)")


if __name__ == "__main__":
    main()
