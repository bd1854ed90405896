"""softmax, log_softmax, nll_loss and cross_entropy on the device (compositions of engine ops),
forward and backward, against torch's CPU kernels with the CPU fallback refused."""

import pytest
import torch
import torch.nn.functional as F

DEV = "openreg"


def _tolerance(dtype):
    return {"rtol": 2e-2, "atol": 2e-2} if dtype in (torch.float16, torch.bfloat16) else {"rtol": 1e-5, "atol": 1e-6}


def _forward_backward(fn, x, *rest, dtype):
    """fn(x, *rest) and d(sum of fn * seed)/dx on CPU and on openreg agree."""
    results = []
    for device, policy in (("cpu", "allow"), (DEV, "error")):
        leaf = x.detach().to(device).requires_grad_()
        args = [r.to(device) if isinstance(r, torch.Tensor) else r for r in rest]
        with torch.openreg.fallback_policy(policy):
            out = fn(leaf, *args)
            seed = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).to(device) / max(out.numel(), 1)
            (grad,) = torch.autograd.grad(out, leaf, seed)
        results.append((out.detach().cpu(), grad.cpu()))
    (out_cpu, grad_cpu), (out_dev, grad_dev) = results
    torch.testing.assert_close(out_dev, out_cpu, equal_nan=True, **_tolerance(dtype))
    torch.testing.assert_close(grad_dev, grad_cpu, equal_nan=True, **_tolerance(dtype))


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16), ids=str)
@pytest.mark.parametrize("dim", (0, 1, -1))
def test_softmax_and_log_softmax(dtype, dim):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 7, 5, generator=g) * 10).to(dtype)
    x[1, 2, 3] = float("-inf")  # a masked position
    for fn in (F.softmax, F.log_softmax):
        _forward_backward(lambda t: fn(t, dim), x, dtype=dtype)
        _forward_backward(lambda t: fn(t.transpose(0, 2), dim), x, dtype=dtype)  # strided input


def test_softmax_edge_cases():
    for x in (torch.tensor(3.0), torch.empty(0, 4), torch.full((2, 3), float("-inf")), torch.tensor([[1e30, 0.0]])):
        for fn in (torch.softmax, torch.log_softmax):
            with torch.openreg.fallback_policy("error"):
                actual = fn(x.to(DEV), -1).cpu()
            torch.testing.assert_close(actual, fn(x, -1), equal_nan=True)
    # half in, float out (half_to_float, as CUDA's fused kernel allows)
    h = torch.randn(3, 5).half()
    out = torch.ops.aten._softmax(h.to(DEV), 1, True)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), torch.softmax(h.float(), 1), rtol=1e-3, atol=1e-3)
    with pytest.raises(NotImplementedError, match="Long"):
        torch.softmax(torch.ones(3, dtype=torch.long, device=DEV), 0)


@pytest.mark.parametrize("reduction", ("mean", "sum", "none"))
def test_cross_entropy_and_nll_loss(reduction):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 5, generator=g)
    target = torch.tensor([0, 4, 2, -100, 1, 4])
    weight = torch.rand(5, generator=g) + 0.5
    cases = [
        lambda t: F.cross_entropy(t, target.to(t.device), reduction=reduction),
        lambda t: F.cross_entropy(t, target.to(t.device), weight=weight.to(t.device), reduction=reduction),
        lambda t: F.cross_entropy(t, target.to(t.device), label_smoothing=0.1, reduction=reduction),
        lambda t: F.nll_loss(F.log_softmax(t, 1), target.clamp(min=0).to(t.device), ignore_index=4,
                             reduction=reduction),
        lambda t: F.nll_loss(t[0], target[1].to(t.device), reduction=reduction),  # one sample, 1-d input
        lambda t: F.cross_entropy(t, F.softmax(t.detach() * 2, 1), reduction=reduction),  # class probabilities
    ]
    for fn in cases:
        _forward_backward(fn, logits, dtype=torch.float32)


def test_spatial_cross_entropy_uses_nll_loss2d_on_the_device():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 4, 3, 5, generator=g)
    target = torch.randint(0, 4, (2, 3, 5), generator=g)
    target[0, 1, 2] = -100
    weight = torch.rand(4, generator=g) + 0.5
    for reduction in ("mean", "sum", "none"):
        _forward_backward(lambda t: F.cross_entropy(t, target.to(t.device), weight=weight.to(t.device),
                                                    reduction=reduction), logits, dtype=torch.float32)
    volume = torch.randn(2, 3, 2, 2, 2, generator=g)  # (N, C, d1, d2, d3): folded into 2-d spatial dims
    _forward_backward(lambda t: F.cross_entropy(t, torch.zeros(2, 2, 2, 2, dtype=torch.long).to(t.device)), volume,
                      dtype=torch.float32)


def test_all_targets_ignored_and_empty_batch_match_cpu():
    logits = torch.randn(3, 4)
    ignored = torch.full((3,), -100)
    for reduction in ("mean", "sum", "none"):
        for x, t in ((logits, ignored), (torch.empty(0, 4), torch.empty(0, dtype=torch.long))):
            with torch.openreg.fallback_policy("error"):
                actual = F.cross_entropy(x.to(DEV), t.to(DEV), reduction=reduction).cpu()
            torch.testing.assert_close(actual, F.cross_entropy(x, t, reduction=reduction), equal_nan=True)


def test_bad_targets_raise_and_the_device_stays_usable():
    logits = torch.randn(3, 4, device=DEV)
    with pytest.raises(RuntimeError, match="multi-target not supported|0D or 1D target"):
        F.nll_loss(logits, torch.zeros(3, 2, dtype=torch.long, device=DEV))
    with pytest.raises(ValueError, match="Expected input batch_size"):  # as on CPU
        F.cross_entropy(logits, torch.zeros(2, dtype=torch.long, device=DEV))
    # a class index out of range stops the device's gather (a device-side check, as on CUDA)
    with pytest.raises(RuntimeError, match="trapped|out of range|out of bounds"):
        F.cross_entropy(logits, torch.tensor([0, 9, 1], device=DEV)).item()
    torch.testing.assert_close(
        F.cross_entropy(logits, torch.tensor([0, 3, 1], device=DEV)).cpu(),
        F.cross_entropy(logits.cpu(), torch.tensor([0, 3, 1])),
    )


def test_a_classifier_trains_on_the_device_as_on_cpu():
    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(64, 10, generator=g).to(device)
        y = torch.randint(0, 4, (64,), generator=g).to(device)
        losses = []
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            for _ in range(20):
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return losses

    cpu, dev = run("cpu"), run(DEV)
    assert dev[-1] < dev[0] * 0.8
    torch.testing.assert_close(torch.tensor(dev), torch.tensor(cpu), rtol=1e-4, atol=1e-5)
