"""Automatic mixed precision on openreg: autocast with CUDA's operator lists and
casting policies, and torch.amp.GradScaler with its two device ops."""

import pytest
import torch
from torch import nn

# Representative ops of each of autocast's lists (ATen's autocast_mode.h, the
# lists CUDA registers), each with the dtype it gives under float16 autocast
# for float32 inputs (and a float16 input where the policy is about widening).
A, B = torch.randn(6, 6), torch.randn(6, 6)
POLICIES = {
    # lower precision: matmuls, convolutions, linear layers
    "mm": (lambda a, b: torch.mm(a, b), torch.float16),
    "matmul": (lambda a, b: a @ b, torch.float16),
    "addmm": (lambda a, b: torch.addmm(a, a, b), torch.float16),
    "bmm": (lambda a, b: torch.bmm(a[None], b[None]), torch.float16),
    "linear": (lambda a, b: nn.functional.linear(a, b), torch.float16),
    "conv2d": (lambda a, b: nn.functional.conv2d(a[None, None], b[None, None, :3, :3]), torch.float16),
    # float32: numerically sensitive ops, even on float16 inputs
    "exp of half": (lambda a, b: torch.exp(a.half()), torch.float32),
    "log_softmax of half": (lambda a, b: torch.log_softmax(a.half(), 1), torch.float32),
    "layer_norm of half": (lambda a, b: nn.functional.layer_norm(a.half(), (6,)), torch.float32),
    "mse_loss of half": (lambda a, b: nn.functional.mse_loss(a.half(), b.half()), torch.float32),
    "sum of half": (lambda a, b: a.half().sum(), torch.float32),
    "cumsum of half": (lambda a, b: a.half().cumsum(0), torch.float32),
    "norm of half": (lambda a, b: a.half().norm(), torch.float32),
    # promote: the widest input dtype
    "addcmul": (lambda a, b: torch.addcmul(a, a.half(), b), torch.float32),
    "atan2": (lambda a, b: torch.atan2(a.half(), b), torch.float32),
    # on no list: the inputs' dtype
    "add": (lambda a, b: a + b, torch.float32),
    "relu of half": (lambda a, b: torch.relu(a.half()), torch.float16),
}


def test_openreg_supports_float16_and_bfloat16_autocast_defaulting_to_float16():
    assert torch.openreg.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.openreg.is_bf16_supported()
    assert torch.get_autocast_dtype("openreg") == torch.float16
    assert torch.amp.is_autocast_available("openreg")


@pytest.mark.parametrize("name", list(POLICIES))
def test_autocast_casts_each_op_by_cudas_policy_and_matches_cpu(name):
    fn, expected = POLICIES[name]
    a, b = A.to("openreg"), B.to("openreg")
    with torch.autocast("openreg"):
        assert torch.is_autocast_enabled("openreg")
        out = fn(a, b)
    assert out.dtype == expected and out.device.type == "openreg"
    # CPU computes the same op on inputs cast the way the policy casts them.
    if expected == torch.float16 and name not in ("relu of half",):
        reference = fn(A.half().float(), B.half().float())
        torch.testing.assert_close(out.float().cpu(), reference, rtol=2e-3, atol=2e-3)
    else:
        torch.testing.assert_close(out.cpu(), fn(A, B).to(expected), rtol=2e-3, atol=2e-3)


def test_bfloat16_autocast_and_nested_and_disabled_regions():
    a, b = A.to("openreg"), B.to("openreg")
    with torch.autocast("openreg", dtype=torch.bfloat16):
        assert torch.mm(a, b).dtype == torch.bfloat16
        assert torch.get_autocast_dtype("openreg") == torch.bfloat16
        with torch.autocast("openreg", enabled=False):
            assert torch.mm(a, b).dtype == torch.float32
        with torch.autocast("openreg", dtype=torch.float16):
            assert torch.mm(a, b).dtype == torch.float16
        assert torch.mm(a, b).dtype == torch.bfloat16
    assert torch.mm(a, b).dtype == torch.float32
    # openreg autocast leaves CPU tensors alone, and CPU autocast leaves openreg tensors alone.
    with torch.autocast("openreg"):
        assert torch.mm(A, B).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.mm(a, b).dtype == torch.float32


def test_autocast_rejects_dtypes_the_device_does_not_list():
    with pytest.warns(UserWarning, match="openreg"):
        with torch.autocast("openreg", dtype=torch.float64):
            assert not torch.is_autocast_enabled("openreg")


def _copies() -> int:
    return sum(v["device"] + v["fallback"] for k, v in torch.openreg.op_counts().items() if "copy" in k)


@pytest.mark.parametrize("cache_enabled", [True, False])
def test_the_autocast_cache_casts_a_leaf_weight_once_per_region(cache_enabled):
    w = torch.randn(8, 8, device="openreg", requires_grad=True)
    x = torch.randn(8, 8, device="openreg")
    with torch.autocast("openreg", cache_enabled=cache_enabled):
        torch.openreg.reset_op_counts()
        torch.mm(w, x)
        first = _copies()
        torch.openreg.reset_op_counts()
        torch.mm(w, x)
        second = _copies()
    # The second call casts x again; w only without the cache.
    assert first - second == (1 if cache_enabled else 0)


def test_binary_cross_entropy_is_banned_under_autocast_as_on_cuda():
    p = torch.rand(4, device="openreg")
    with torch.autocast("openreg"):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            nn.functional.binary_cross_entropy(p, p)
        nn.functional.binary_cross_entropy_with_logits(p, p)


def test_grad_scaler_ops_run_on_the_device_and_match_cpu():
    cases = [
        [torch.tensor([1.0, 2.0]), torch.ones(3, dtype=torch.float16)],
        [torch.tensor([1.0, float("inf")]), torch.ones(2)],
        [torch.tensor([float("nan")]), torch.empty(0)],
        [torch.tensor(3.0)],
    ]
    for grads in cases:
        found, inv = torch.zeros(1), torch.full((1,), 0.25)
        device_grads = [g.to("openreg") for g in grads]
        device_found, device_inv = found.to("openreg"), inv.to("openreg")
        with torch.openreg.fallback_policy("error"):
            torch._amp_foreach_non_finite_check_and_unscale_(device_grads, device_found, device_inv)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
        assert torch.equal(device_found.cpu(), found)
        for d, g in zip(device_grads, grads):
            torch.testing.assert_close(d.cpu(), g, equal_nan=True)

    scale, tracker = torch.full((1,), 1024.0), torch.zeros(1, dtype=torch.int32)
    device_scale, device_tracker = scale.to("openreg"), tracker.to("openreg")
    # Clean steps grow the scale every 3 steps; an overflow backs off and resets the count;
    # a scale that would overflow float32 stays.
    for step, found_inf in enumerate([0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]):
        if step == 8:
            scale.fill_(3e38)
            device_scale.fill_(3e38)
        found = torch.full((1,), float(found_inf))
        with torch.openreg.fallback_policy("error"):
            torch._amp_update_scale_(device_scale, device_tracker, found.to("openreg"), 2.0, 0.5, 3)
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3)
        assert torch.equal(device_scale.cpu(), scale), step
        assert torch.equal(device_tracker.cpu(), tracker), step


def test_grad_scaler_ops_check_their_arguments():
    grads = [torch.ones(2, device="openreg")]
    with pytest.raises(RuntimeError, match="found_inf must be a 1-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, torch.zeros(2, device="openreg"), torch.ones(1, device="openreg"))
    with pytest.raises(RuntimeError, match="inv_scale must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            grads, torch.zeros(1, device="openreg"), torch.ones(1, dtype=torch.float64, device="openreg")
        )
    with pytest.raises(RuntimeError, match="same device as found_inf"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            [torch.ones(2, device="openreg:1")], torch.zeros(1, device="openreg"), torch.ones(1, device="openreg")
        )
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor"):
        torch._amp_update_scale_(
            torch.ones(1, device="openreg"), torch.zeros(1, device="openreg"), torch.zeros(1, device="openreg"), 2.0, 0.5, 3
        )


def _train(device, steps=30, use_amp=True):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    x, y = torch.randn(128, 16).to(device), torch.randint(0, 4, (128,)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**14, growth_interval=5, enabled=use_amp)
    losses, scales = [], []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.float16, enabled=use_amp):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales


def test_a_mixed_precision_training_loop_learns_and_tracks_the_float32_loop():
    losses, scales = _train("openreg")
    full, _ = _train("openreg", use_amp=False)
    assert losses[-1] < 0.7 * losses[0]
    torch.testing.assert_close(losses, full, rtol=0.05, atol=0.02)
    assert scales[-1] >= 2.0**14  # no overflow in this loop: the scale grew
    assert scales != sorted(scales, reverse=True)


def test_an_overflowing_gradient_skips_the_step_and_backs_off_the_scale():
    model = nn.Linear(4, 1).to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("openreg", init_scale=256.0)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    with torch.autocast("openreg"):
        loss = model(torch.randn(2, 4, device="openreg")).sum()
    scaler.scale(loss).backward()
    model.weight.grad[0, 0] = float("inf")
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 128.0
    for b, p in zip(before, model.parameters()):
        assert torch.equal(b, p.detach().cpu())
