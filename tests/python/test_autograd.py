"""Autograd on openreg devices: gradients and a short training run match CPU."""

import copy

import torch
from torch import nn


def test_gradients_of_a_small_function_match_cpu(device):
    g = torch.Generator().manual_seed(0)
    x_cpu = torch.randn(6, 4, generator=g, requires_grad=True)
    w_cpu = torch.randn(4, 3, generator=g, requires_grad=True)
    x = x_cpu.detach().to(device).requires_grad_()
    w = w_cpu.detach().to(device).requires_grad_()

    def f(x, w):
        h = torch.tanh(x @ w) * 2.0 + x.sum(dim=1, keepdim=True)
        return (h.sigmoid() ** 2).mean() + (w * w).sum()

    f(x_cpu, w_cpu).backward()
    loss = f(x, w)
    loss.backward()
    assert loss.device == device
    assert x.grad.device == device and w.grad.device == device
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad)


def test_autograd_grad_through_views_and_in_place_ops(device):
    x_cpu = torch.randn(5, 5, generator=torch.Generator().manual_seed(1), requires_grad=True)
    x = x_cpu.detach().to(device).requires_grad_()

    def f(x):
        y = x.clone()
        y[:, 1:3].mul_(3.0)
        return y.t()[::2].exp().sum()

    (expected,) = torch.autograd.grad(f(x_cpu), x_cpu)
    (actual,) = torch.autograd.grad(f(x), x)
    torch.testing.assert_close(actual.cpu(), expected)


def test_gradient_flows_across_devices():
    x_cpu = torch.randn(4, generator=torch.Generator().manual_seed(2), requires_grad=True)
    x = x_cpu.detach().to("openreg:0").requires_grad_()
    (x.to("openreg:1") * 3).pow(2).sum().backward()
    (x_cpu * 3).pow(2).sum().backward()
    assert x.grad.device == torch.device("openreg:0")
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)


def _train(model, x, y, steps=5):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_an_mlp_gives_the_losses_of_cpu(device):
    torch.manual_seed(0)
    model_cpu = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
    model = copy.deepcopy(model_cpu).to(device)
    assert all(p.device == device for p in model.parameters())
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 16, generator=g), torch.randn(64, 1, generator=g)

    expected = _train(model_cpu, x, y)
    losses = _train(model, x.to(device), y.to(device))

    assert expected[-1] < expected[0], "the CPU run does not learn: the test proves nothing"
    torch.testing.assert_close(losses, expected, rtol=1e-5, atol=1e-5)
    for p, p_cpu in zip(model.parameters(), model_cpu.parameters()):
        assert p.device == device
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-5)


def test_module_to_keeps_its_parameter_objects():
    # As for CUDA: `param.data` takes the device tensor, so an optimizer built before the move
    # trains the moved parameters, and gradients stay attached.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    weight = model.weight
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model.to("openreg")
    assert model.weight is weight and weight.device.type == "openreg"
    before = weight.detach().cpu().clone()
    model(torch.ones(3, 4, device="openreg")).sum().backward()
    opt.step()
    torch.testing.assert_close(weight.detach().cpu(), before - 0.5 * 3)
    model.to("cpu")
    assert model.weight is weight and weight.device.type == "cpu"
