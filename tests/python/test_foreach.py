"""torch's _foreach_ ops on the device: one engine launch per list (the optimizers' default path).

Each list op must equal, bit for bit, the same op applied tensor by tensor on the device (the
path it replaces), and match CPU's foreach ops; lists the one-launch path does not take (mixed
dtypes, strided tensors, integers) still run tensor by tensor on the device.
"""

import pytest
import torch
from torch_openreg import _C

DEV = "openreg"
SHAPES = [(3, 5), (0,), (17,), (64, 33), (1,), (1000,)]


def _lists(dtype, count, seed):
    g = torch.Generator().manual_seed(seed)
    return [[(torch.rand(s, generator=g, dtype=torch.float64) + 0.5).to(dtype) for s in SHAPES] for _ in range(count)]


def _to(lists, device):
    return [[t.clone().to(device) for t in ts] for ts in lists]


def _launches():
    """Launches the device has run (its queue drained first)."""
    torch.openreg.synchronize()
    return sum(_C.launch_counts(0))


def _scalar(lists, value):
    """A 0-dim tensor of the lists' dtype on their device."""
    return torch.tensor(value, dtype=lists[0][0].dtype, device=lists[0][0].device)


# (name, foreach call, the same op on one tensor, number of tensor lists)
CASES = [
    ("add_.Scalar", lambda a: torch._foreach_add_(a[0], 0.25), lambda a, i: a[0][i].add_(0.25), 1),
    ("add.Scalar", lambda a: torch._foreach_add(a[0], -3), lambda a, i: a[0][i].add(-3), 1),
    ("add_.ScalarList", lambda a: torch._foreach_add_(a[0], [0.5 * i for i in range(len(SHAPES))]),
     lambda a, i: a[0][i].add_(0.5 * i), 1),
    ("add_.List", lambda a: torch._foreach_add_(a[0], a[1], alpha=-0.01), lambda a, i: a[0][i].add_(a[1][i], alpha=-0.01), 2),
    ("add.List", lambda a: torch._foreach_add(a[0], a[1]), lambda a, i: a[0][i].add(a[1][i]), 2),
    ("mul_.Scalar", lambda a: torch._foreach_mul_(a[0], 0.9), lambda a, i: a[0][i].mul_(0.9), 1),
    ("mul.ScalarList", lambda a: torch._foreach_mul(a[0], [1.5 + i for i in range(len(SHAPES))]),
     lambda a, i: a[0][i].mul(1.5 + i), 1),
    ("mul_.List", lambda a: torch._foreach_mul_(a[0], a[1]), lambda a, i: a[0][i].mul_(a[1][i]), 2),
    ("div_.ScalarList", lambda a: torch._foreach_div_(a[0], [0.3 + i for i in range(len(SHAPES))]),
     lambda a, i: a[0][i].div_(0.3 + i), 1),
    ("div.Scalar", lambda a: torch._foreach_div(a[0], 7.0), lambda a, i: a[0][i].div(7.0), 1),
    ("div_.List", lambda a: torch._foreach_div_(a[0], a[1]), lambda a, i: a[0][i].div_(a[1][i]), 2),
    ("lerp_.Scalar", lambda a: torch._foreach_lerp_(a[0], a[1], 0.1), lambda a, i: a[0][i].lerp_(a[1][i], 0.1), 2),
    ("lerp.Scalar", lambda a: torch._foreach_lerp(a[0], a[1], 0.8), lambda a, i: a[0][i].lerp(a[1][i], 0.8), 2),
    ("addcmul_.Scalar", lambda a: torch._foreach_addcmul_(a[0], a[1], a[2], value=0.001),
     lambda a, i: a[0][i].addcmul_(a[1][i], a[2][i], value=0.001), 3),
    ("addcmul_.ScalarList", lambda a: torch._foreach_addcmul_(a[0], a[1], a[2], [0.1 * i for i in range(len(SHAPES))]),
     lambda a, i: a[0][i].addcmul_(a[1][i], a[2][i], value=0.1 * i), 3),
    ("addcdiv_.ScalarList", lambda a: torch._foreach_addcdiv_(a[0], a[1], a[2], [-0.01 * (i + 1) for i in range(len(SHAPES))]),
     lambda a, i: a[0][i].addcdiv_(a[1][i], a[2][i], value=-0.01 * (i + 1)), 3),
    ("addcdiv.Scalar", lambda a: torch._foreach_addcdiv(a[0], a[1], a[2], value=2.0),
     lambda a, i: a[0][i].addcdiv(a[1][i], a[2][i], value=2.0), 3),
    ("mul_.Tensor", lambda a: torch._foreach_mul_(a[0], _scalar(a, 0.7)), lambda a, i: a[0][i].mul_(_scalar(a, 0.7)), 1),
    ("div.Tensor", lambda a: torch._foreach_div(a[0], _scalar(a, 3.0)), lambda a, i: a[0][i].div(_scalar(a, 3.0)), 1),
    ("add_.Tensor", lambda a: torch._foreach_add_(a[0], _scalar(a, 0.5), alpha=-2),
     lambda a, i: a[0][i].add_(_scalar(a, 0.5), alpha=-2), 1),
    ("sub_.Scalar", lambda a: torch._foreach_sub_(a[0], 0.125), lambda a, i: a[0][i].sub_(0.125), 1),
    ("sub.List", lambda a: torch._foreach_sub(a[0], a[1], alpha=3), lambda a, i: a[0][i].sub(a[1][i], alpha=3), 2),
    ("neg", lambda a: torch._foreach_neg(a[0]), lambda a, i: a[0][i].neg(), 1),
    ("maximum_.List", lambda a: torch._foreach_maximum_(a[0], a[1]), lambda a, i: a[0][i].copy_(torch.maximum(a[0][i], a[1][i])), 2),
    ("zero_", lambda a: torch._foreach_zero_(a[0]), lambda a, i: a[0][i].zero_(), 1),
    ("copy_", lambda a: torch._foreach_copy_(a[0], a[1]), lambda a, i: a[0][i].copy_(a[1][i]), 2),
    ("sqrt", lambda a: torch._foreach_sqrt(a[0]), lambda a, i: a[0][i].sqrt(), 1),
    ("sqrt_", lambda a: torch._foreach_sqrt_(a[0]), lambda a, i: a[0][i].sqrt_(), 1),
]


def _results(returned, lists):
    """What a call produced: its returned list, or (in place) its first list."""
    return [t.cpu() for t in (returned if returned is not None else lists[0])]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name,listed,single,count", CASES, ids=[c[0] for c in CASES])
def test_a_foreach_op_is_one_launch_and_equals_the_op_tensor_by_tensor(name, listed, single, count, dtype):
    values = _lists(dtype, count, seed=len(name))
    cpu = _to(values, "cpu")
    want = _results(listed(cpu), cpu)

    per_tensor = _to(values, DEV)
    single_results = [single(per_tensor, i) for i in range(len(SHAPES))]
    in_place = name.split(".")[0].endswith("_")
    by_tensor = _results(None if in_place else single_results, per_tensor)

    on_device = _to(values, DEV)
    torch.openreg.reset_op_counts()
    launches = _launches()
    with torch.openreg.fallback_policy("error"):
        returned = listed(on_device)
    assert _launches() - launches == 1  # every tensor of the lists in one launch
    counts = torch.openreg.op_counts()
    assert counts[f"aten::_foreach_{name}"]["device"] == 1, counts
    made = ("aten::_foreach_", "aten::empty") + (("aten::_copy_from",) if name.endswith(".Tensor") else ())
    assert not [op for op in counts if not op.startswith(made)], counts  # (.Tensor: its scalar's copy)

    got = _results(returned, on_device)
    tol = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {}
    for g, t, w in zip(got, by_tensor, want):
        assert torch.equal(g, t), name
        torch.testing.assert_close(g, w, **tol)


def test_lists_longer_than_one_launch_take_several():
    g = torch.Generator().manual_seed(1)
    values = [torch.randn(5, generator=g) for _ in range(600)]
    xs = [v.to(DEV) for v in values]
    launches = _launches()
    torch._foreach_mul_(xs, 3.0)
    assert _launches() - launches == 3  # 256 tensors per launch
    assert all(torch.equal(x.cpu(), v * 3.0) for x, v in zip(xs, values))


def test_large_lists_split_across_workers_give_the_same_bytes():
    g = torch.Generator().manual_seed(2)
    values = [torch.randn(s, generator=g) for s in (100_000, 3, 70_001, 40_000)]
    grads = [torch.randn_like(v) for v in values]
    xs, gs = [v.to(DEV) for v in values], [v.to(DEV) for v in grads]
    torch._foreach_addcmul_(xs, gs, gs, value=0.5)
    ys = [v.to(DEV) for v in values]
    for y, gr in zip(ys, gs):
        y.addcmul_(gr, gr, value=0.5)
    assert all(torch.equal(x.cpu(), y.cpu()) for x, y in zip(xs, ys))


def test_lists_the_launch_cannot_take_run_tensor_by_tensor_on_the_device():
    g = torch.Generator().manual_seed(3)
    mixed = [torch.randn(4, 3, generator=g).to(DEV), torch.randn(5, generator=g, dtype=torch.float64).to(DEV)]
    strided = [torch.randn(6, 4, generator=g).to(DEV).t(), torch.randn(3, generator=g).to(DEV)]
    ints = [torch.arange(6).to(DEV), torch.arange(3).to(DEV)]
    for xs in (mixed, strided, ints):
        want = [x.cpu() * 2 + 1 for x in xs]
        torch.openreg.reset_op_counts()
        with torch.openreg.fallback_policy("error"):
            torch._foreach_mul_(xs, 2)
            out = torch._foreach_add(xs, 1)
        assert all(torch.equal(o.cpu(), w) for o, w in zip(out, want))
        assert "aten::_foreach_mul_.Scalar" not in torch.openreg.op_counts()  # per tensor, not one launch
    with pytest.raises(RuntimeError, match="must match the size"):
        torch._foreach_add_([torch.ones(3, device=DEV)], [torch.ones(4, device=DEV)])
    with pytest.raises(RuntimeError, match="at least one tensor"):
        torch._foreach_add([], 1.0)
    assert torch.equal(torch._foreach_add([torch.ones(2, device=DEV)], 1.0)[0].cpu(), torch.full((2,), 2.0))


@pytest.mark.parametrize(
    "make",
    [lambda p, f: torch.optim.Adam(p, lr=1e-2, foreach=f),
     lambda p, f: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, foreach=f),
     lambda p, f: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3, foreach=f),
     lambda p, f: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5, foreach=f)],
    ids=("adam", "adamw", "sgd-nesterov", "rmsprop"),
)
def test_optimizers_step_the_same_with_and_without_foreach(make):
    g = torch.Generator().manual_seed(4)
    start = [torch.randn(33, 7, generator=g), torch.randn(7, generator=g), torch.randn(300, generator=g)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(3)]
    results = {}
    for device, foreach in (("cpu", True), (DEV, True), (DEV, False)):
        params = [p.clone().to(device).requires_grad_() for p in start]
        opt = make(params, foreach)
        torch.openreg.reset_op_counts()
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            for step in grads:
                for p, grad in zip(params, step):
                    p.grad = grad.to(device)
                opt.step()
        if device == DEV and foreach:
            assert any(op.startswith("aten::_foreach_") for op in torch.openreg.op_counts())
        results[(device, foreach)] = [p.detach().cpu() for p in params]
    for a, b, c in zip(results[(DEV, True)], results[(DEV, False)], results[("cpu", True)]):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_clip_grad_norm_scales_every_gradient_in_one_launch():
    g = torch.Generator().manual_seed(5)
    grads = [torch.randn(s, generator=g) * 3 for s in ((40, 7), (7,), (300,))]
    results = {}
    for device, foreach in (("cpu", True), (DEV, True), (DEV, False)):
        params = [torch.zeros_like(t, device=device, requires_grad=True) for t in grads]
        for p, t in zip(params, grads):
            p.grad = t.clone().to(device)
        torch.openreg.reset_op_counts()
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm=1.0, foreach=foreach)
        if device == DEV:
            assert ("aten::_foreach_mul_.Tensor" in torch.openreg.op_counts()) == foreach
        results[(device, foreach)] = (norm.cpu(), [p.grad.cpu() for p in params])
    (n1, g1), (n2, g2), (n0, g0) = results[(DEV, True)], results[(DEV, False)], results[("cpu", True)]
    assert torch.equal(n1, n2) and all(torch.equal(a, b) for a, b in zip(g1, g2))
    torch.testing.assert_close(n1, n0)
    for a, c in zip(g1, g0):
        torch.testing.assert_close(a, c)


@pytest.mark.parametrize("nesterov,maximize", [(True, False), (False, True)])
def test_fused_sgd_over_lists_equals_its_per_parameter_steps(nesterov, maximize):
    """fused=True SGD is one optim_list launch for every parameter when they are contiguous, and
    device ops per parameter otherwise (here: transposed views) that round alike: the same bits."""
    g = torch.Generator().manual_seed(6)
    start = [torch.randn(7, 33, generator=g), torch.randn(5, 9, generator=g)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(3)]
    results = []
    for transposed in (False, True):
        params = [(p.t().contiguous().to(DEV).t() if transposed else p.clone().to(DEV)).requires_grad_() for p in start]
        assert all(p.is_contiguous() != transposed for p in params)
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=nesterov, weight_decay=0.01,
                              maximize=maximize, fused=True)
        launches = _launches()
        with torch.openreg.fallback_policy("error"):
            for step in grads:
                for p, grad in zip(params, step):
                    p.grad = grad.to(DEV)
                opt.step()
        launches = _launches() - launches
        results.append(([p.detach().cpu() for p in params], launches))
    (lists, few), (per_param, many) = results
    assert few < many
    assert all(torch.equal(a, b) for a, b in zip(lists, per_param))
