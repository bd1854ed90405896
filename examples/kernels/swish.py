"""Swish as a differentiable openreg operator written in Rust (``swish.rs``),
used inside an ``nn.Module`` that trains.

    python examples/kernels/swish.py

``torch.ops.examples.swish(x, beta)`` computes ``x * sigmoid(beta * x)`` with
the kernel ``swish_forward``; its backward formula calls a second operator,
``examples::swish_backward``, with the kernel ``swish_backward``. Both run
sandboxed on the tensors' openreg device. The script checks the forward and
the gradient against PyTorch's CPU reference, then trains the same small
model on openreg (with the kernel) and on CPU (with the reference) and
compares the losses.
"""

from __future__ import annotations

import pathlib

import torch
from torch import nn

import torch_openreg  # noqa: F401 - registers the openreg device
from torch_openreg import kernels

#: The module, built from source on first use (with the Rust toolchain `make` installs).
module = kernels.load(pathlib.Path(__file__).with_name("swish.rs"))


@kernels.custom_op("examples::swish", module["swish_forward"])
def swish(x: torch.Tensor, beta: float) -> torch.Tensor:
    """``x * sigmoid(beta * x)`` for a float32 tensor of any layout."""
    if x.dtype != torch.float32:
        raise TypeError(f"examples::swish: float32 only, got {x.dtype}")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@kernels.custom_op("examples::swish_backward", module["swish_backward"])
def swish_backward(grad: torch.Tensor, x: torch.Tensor, beta: float) -> torch.Tensor:
    """The gradient of :func:`swish` with respect to ``x``, times ``grad``."""
    if grad.shape != x.shape:
        raise ValueError(f"examples::swish_backward: grad {tuple(grad.shape)} and x {tuple(x.shape)} differ")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output):
    x, beta = inputs
    ctx.save_for_backward(x)
    ctx.beta = beta


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return swish_backward(grad, x, ctx.beta), None


swish.register_autograd(_backward, setup_context=_setup_context)


def reference(x: torch.Tensor, beta: float) -> torch.Tensor:
    """PyTorch's own formula, for CPU tensors and for checking."""
    return x * torch.sigmoid(beta * x)


class Swish(nn.Module):
    """The activation as a module: the kernel on openreg, the reference elsewhere."""

    def __init__(self, beta: float = 1.0):
        super().__init__()
        self.beta = beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "openreg":
            return swish(x, self.beta)
        return reference(x, self.beta)


def train(device: str, steps: int = 25, seed: int = 0) -> list[float]:
    """Fits a small MLP with Swish activations to a fixed regression task; returns the losses."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), Swish(1.5), nn.Linear(32, 32), Swish(0.5), nn.Linear(32, 1))
    x = torch.randn(64, 8)
    y = torch.sin(x.sum(1, keepdim=True))
    model, x, y = model.to(device), x.to(device), y.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    x = torch.randn(37, 19) * 6
    for beta in (1.0, 0.25, -2.0):
        for view in (x, x.t(), x[::2, 3:]):  # contiguous, transposed, sliced
            xo = view.to("openreg").requires_grad_()
            xc = view.clone().requires_grad_()
            out, expected = swish(xo, beta), reference(xc, beta)
            torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-6)
            grad = torch.randn_like(expected)
            out.backward(grad.to("openreg"))
            expected.backward(grad)
            torch.testing.assert_close(xo.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    print("swish forward and backward match CPU (3 slopes x contiguous/transposed/sliced)")

    on_device, on_cpu = train("openreg"), train("cpu")
    torch.testing.assert_close(on_device, on_cpu, rtol=1e-4, atol=1e-5)
    print(f"trained 25 steps on openreg: loss {on_device[0]:.4f} -> {on_device[-1]:.4f} (cpu: {on_cpu[-1]:.4f})")


if __name__ == "__main__":
    main()
