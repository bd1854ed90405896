"""Matrix multiplication over strided tensors, as an openreg operator written
in C (``matmul.c``).

    python examples/kernels/matmul.py

``torch.ops.examples.matmul(a, b)`` runs the kernel ``matmul_f32`` or
``matmul_f64`` (chosen by dtype) on three tensor views: the kernel reads each
operand's sizes and strides from its descriptor, so transposed and sliced
inputs need no copy. The script checks it against ``torch.mm`` on CPU for
contiguous, transposed, sliced and expanded operands.
"""

from __future__ import annotations

import pathlib

import torch

import torch_openreg  # noqa: F401 - registers the openreg device
from torch_openreg import kernels

module = kernels.load(pathlib.Path(__file__).with_name("matmul.c"))


@kernels.custom_op("examples::matmul", {torch.float32: module["matmul_f32"], torch.float64: module["matmul_f64"]})
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for 2-D float32 or float64 tensors of any strides."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"examples::matmul: cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise TypeError(f"examples::matmul: a is {a.dtype} but b is {b.dtype}")
    return a.new_empty(a.shape[0], b.shape[1])


def cases(dtype: torch.dtype) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """CPU operand pairs of every layout the kernel handles."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(45, 70, dtype=dtype, generator=g)
    b = torch.randn(70, 33, dtype=dtype, generator=g)
    return {
        "contiguous": (a, b),
        "transposed a": (a.t().contiguous().t(), b),
        "transposed b": (a, b.t().contiguous().t()),
        "sliced": (a[::2, 1:61], b[5:65, ::3]),
        "expanded": (a[:, :1].expand(45, 70), b),
        "empty k": (a[:, :0], b[:0]),
    }


def main() -> None:
    for dtype in (torch.float32, torch.float64):
        for label, (a, b) in cases(dtype).items():
            out = matmul(a.to("openreg"), b.to("openreg"))
            tolerance = {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.float32 else {}
            torch.testing.assert_close(out.cpu(), a @ b, **tolerance)
        print(f"examples::matmul matches torch.mm on CPU for {dtype} ({', '.join(cases(dtype))})")


if __name__ == "__main__":
    main()
