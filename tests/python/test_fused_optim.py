"""fused=True Adam, AdamW, Adagrad and SGD: one launch of the engine's optim_list kernel per list
of parameters, one pass over each parameter's tensors.

The steps must match CPU's fused kernels (their arithmetic is the kernel's model), keep their
results whatever list the parameters come in (so however the workers split it), read the step
counts, a tensor learning rate and GradScaler's scale and inf flag on the device, and leave the
lists the kernel does not take (mixed dtypes, strided tensors) to per-parameter device ops.
"""

import pytest
import torch
from torch_openreg import _C

DEV = "openreg"
# odd sizes (partial vectors), one element, and one large enough to be split between workers
SHAPES = [(7, 3), (1,), (2,), (3,), (6,), (35,), (33, 5), (64, 32), (20001,)]

OPTIMIZERS = {
    "adam": lambda p, d: torch.optim.Adam(p, lr=0.05, fused=True),
    "adam-decay-amsgrad": lambda p, d: torch.optim.Adam(p, lr=0.05, fused=True, weight_decay=0.1, amsgrad=True),
    "adamw-device-lr-maximize": lambda p, d: torch.optim.AdamW(p, lr=torch.tensor(0.05, device=d), fused=True,
                                                               maximize=True),
    "adamw-cpu-lr": lambda p, d: torch.optim.AdamW(p, lr=torch.tensor(0.02), fused=True, weight_decay=0.3),
    "adamw-small-beta1": lambda p, d: torch.optim.AdamW(p, lr=0.01, betas=(0.2, 0.9), fused=True),
    "adagrad": lambda p, d: torch.optim.Adagrad(p, lr=0.05, fused=True, lr_decay=0.01, weight_decay=0.1,
                                                initial_accumulator_value=0.1),
    "sgd": lambda p, d: torch.optim.SGD(p, lr=0.05, fused=True),
    "sgd-nesterov-decay": lambda p, d: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01,
                                                      fused=True),
    "sgd-dampening-maximize-device-lr": lambda p, d: torch.optim.SGD(p, lr=torch.tensor(0.05, device=d), momentum=0.8,
                                                                    dampening=0.3, maximize=True, fused=True),
}
# largest difference from CPU after four steps, relative and absolute, by dtype
TOLERANCE = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-12, 1e-14), torch.bfloat16: (1.6e-2, 1e-2),
             torch.float16: (2e-3, 1e-3)}


def _launches():
    torch.openreg.synchronize()
    return sum(_C.launch_counts(0))


def _train(device, make, dtype=torch.float32, shapes=SHAPES, steps=4, seed=5, transposed=False):
    """Parameters and optimizer state after `steps` steps of `make` from seeded starts and gradients;
    on the device, also the launches of the last step."""
    g = torch.Generator().manual_seed(seed)
    start = [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]
    grads = [[torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes] for _ in range(steps)]
    if transposed:
        params = [p.t().contiguous().to(device).t().requires_grad_() for p in start]
    else:
        params = [p.clone().to(device).requires_grad_() for p in start]
    opt = make(params, device)
    with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
        for step in grads:
            for p, grad in zip(params, step):
                p.grad = grad.to(device)
            before = _launches() if device == DEV else 0
            opt.step()
    last_step = _launches() - before if device == DEV else None
    states = [{k: v.cpu() for k, v in opt.state[p].items() if k != "step"} for p in params]
    return [p.detach().cpu() for p in params], states, last_step


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_fused_steps_match_cpu(name, dtype):
    make = OPTIMIZERS[name]
    rtol, atol = TOLERANCE[dtype]
    torch.openreg.reset_op_counts()
    dev_params, dev_states, launches = _train(DEV, make, dtype)
    cpu_params, cpu_states, _ = _train("cpu", make, dtype)
    assert any(op.startswith("aten::_fused_") and c["device"] > 0 for op, c in torch.openreg.op_counts().items())
    # one optim_list launch (and the step counts' _foreach_add_), where per-parameter ops take dozens
    assert launches <= 2
    for p, q in zip(dev_params, cpu_params):
        assert p.dtype == dtype
        torch.testing.assert_close(p, q, rtol=rtol, atol=atol)
    for s, t in zip(dev_states, cpu_states):
        assert s.keys() == t.keys()
        for key in s:
            torch.testing.assert_close(s[key], t[key], rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["adam", "adam-decay-amsgrad", "adamw-device-lr-maximize", "adamw-small-beta1"])
def test_float64_adam_steps_equal_cpu_bits(name):
    """Adam's bias corrections 1 - beta^step are correctly rounded powers (double-double squaring),
    as C's pow gives them: float64 Adam and AdamW match CPU bit for bit, as the other dtypes do.
    Sizes are whole vectors of CPU's kernel (8 doubles): its scalar loop over the rest rounds its
    multiply-adds in another order, which the device does not copy."""
    shapes = [(64, 32), (16,), (8,), (20000,)]
    dev_params, dev_states, _ = _train(DEV, OPTIMIZERS[name], torch.float64, shapes=shapes, steps=6)
    cpu_params, cpu_states, _ = _train("cpu", OPTIMIZERS[name], torch.float64, shapes=shapes, steps=6)
    for p, q in zip(dev_params, cpu_params):
        assert torch.equal(p, q)
    for s, t in zip(dev_states, cpu_states):
        assert all(torch.equal(s[key], t[key]) for key in s)


def test_a_step_is_one_launch_per_list_and_the_same_bits_per_parameter():
    """Three hundred parameters step in two launches (the kernel takes 256 at a time), after the
    optimizer's step-count increment (a _foreach_add_, two launches too); stepping each parameter in a list of its own (so the workers
    split different element ranges) gives the same bits."""
    g = torch.Generator().manual_seed(2)
    start = [torch.randn(int(n), generator=g) for n in torch.randint(1, 400, (300,), generator=g)]
    start.append(torch.randn(40000, generator=g))  # split between workers
    grads = [torch.randn_like(p) for p in start]
    together = [p.clone().to(DEV).requires_grad_() for p in start]
    alone = [p.clone().to(DEV).requires_grad_() for p in start]
    make = lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05, amsgrad=True, fused=True)
    opt, opts = make(together), [make([p]) for p in alone]
    for p, q, grad in zip(together, alone, grads):
        p.grad, q.grad = grad.to(DEV), grad.to(DEV)
    with torch.openreg.fallback_policy("error"):
        opt.step()  # the first step also creates the state, a launch per tensor
        before = _launches()
        opt.step()
        assert _launches() - before == 4
        for _ in range(2):
            for o in opts:
                o.step()
    assert all(torch.equal(p.detach().cpu(), q.detach().cpu()) for p, q in zip(together, alone))


@pytest.mark.parametrize("name", ["adam-decay-amsgrad", "adamw-device-lr-maximize", "adagrad",
                                  "sgd-dampening-maximize-device-lr"])
def test_lists_the_kernel_does_not_take_step_per_parameter_as_on_cpu(name):
    """Strided parameters, and parameters of two dtypes, run as device ops per parameter. (CPU's
    fused kernels pair a strided parameter's elements with its gradient's by memory position, so
    the CPU answer is that of contiguous parameters.)"""
    make = OPTIMIZERS[name]
    shapes = [(7, 3), (33, 5), (64, 32)]
    cpu_params, _, _ = _train("cpu", make, shapes=shapes)
    for kwargs in ({"transposed": True}, {}):
        launches = _launches()
        dev_params, _, _ = _train(DEV, make, shapes=shapes, **kwargs)
        launches = _launches() - launches
        for p, q in zip(dev_params, cpu_params):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        if kwargs:
            per_parameter = launches
        else:
            assert launches < per_parameter
    mixed = [torch.randn(5, 3).to(DEV).requires_grad_(), torch.randn(4, dtype=torch.float64).to(DEV).requires_grad_()]
    expected = [p.detach().cpu().clone().requires_grad_() for p in mixed]
    for ps, device in ((mixed, DEV), (expected, "cpu")):
        opt = make(ps, device)
        for p in ps:
            p.grad = torch.ones_like(p)
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            opt.step()
    for p, q in zip(mixed, expected):
        torch.testing.assert_close(p.detach().cpu(), q.detach())


@pytest.mark.parametrize("strided", [False, True], ids=["lists", "per-parameter"])
@pytest.mark.parametrize("name", ["adam-decay-amsgrad", "adagrad", "sgd-nesterov-decay"])
def test_grad_scaler_steps_unscale_the_gradients_in_place_and_skip_on_inf(name, strided):
    make = OPTIMIZERS[name]
    g = torch.Generator().manual_seed(9)
    start = [torch.randn(6, 5, generator=g), torch.randn(37, generator=g)]
    grads = [torch.randn_like(p) * 1024 for p in start]
    results = {}
    for device in ("cpu", DEV):
        params = [p.clone().to(device).requires_grad_() for p in start]
        if strided and device == DEV:  # a transposed parameter: the per-parameter path
            params[0] = start[0].t().contiguous().to(DEV).t().requires_grad_()
        opt = make(params, device)
        scale = torch.tensor(1024.0, device=device)
        for p, grad in zip(params, grads):
            p.grad = grad.clone().to(device)  # the step unscales it in place
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            # GradScaler hands its tensors to a fused optimizer through these attributes
            opt.grad_scale, opt.found_inf = scale, torch.tensor(0.0, device=device)
            opt.step()
            unscaled = [p.grad.cpu() for p in params]
            stepped = [p.detach().cpu().clone() for p in params]
            opt.found_inf = torch.tensor(1.0, device=device)
            opt.step()
        results[device] = (unscaled, stepped, [p.detach().cpu() for p in params])
    (cpu_grads, cpu_stepped, _), (dev_grads, dev_stepped, dev_after_inf) = results["cpu"], results[DEV]
    for a, b, grad in zip(dev_grads, cpu_grads, grads):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, grad / 1024)
    for a, b, c in zip(dev_stepped, cpu_stepped, dev_after_inf):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        assert torch.equal(a, c)  # found_inf = 1: nothing changed


def test_a_step_with_lists_of_different_lengths_is_refused():
    p = [torch.randn(3, device=DEV)]
    zeros = [torch.zeros(3, device=DEV)]
    step = [torch.ones((), device=DEV)]
    for grads, steps in (([torch.randn(3, device=DEV)] * 2, step), ([], step), (zeros, [])):
        with pytest.raises(RuntimeError, match="_fused_adamw_: expected every tensor list"):
            torch._fused_adamw_(p, grads, zeros, zeros, [], steps, lr=0.1, beta1=0.9, beta2=0.999,
                                weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    with pytest.raises(RuntimeError, match="_fused_sgd_: expected every tensor list"):
        torch._fused_sgd_(p, [], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0, nesterov=False,
                          maximize=False, is_first_step=False)
    assert p[0].add(1).cpu().shape == (3,)  # the device is still usable


def test_step_counts_of_two_dtypes_step_per_parameter():
    """The kernel reads every step count as the first one's dtype: a list of float32 and float64
    counts (torch.optim makes them float32; a direct call may not) takes the per-parameter path."""
    g = torch.Generator().manual_seed(4)
    start = [torch.randn(5, generator=g), torch.randn(6, generator=g)]
    grads = [torch.randn_like(p) for p in start]
    results = []
    for device, dtypes in ((DEV, (torch.float32, torch.float64)), ("cpu", (torch.float32, torch.float32))):
        params = [p.clone().to(device) for p in start]
        states = [[torch.zeros_like(p) for p in params] for _ in range(2)]
        steps = [torch.tensor(3.0, dtype=dt, device=device) for dt in dtypes]
        torch._fused_adam_(params, [g.to(device) for g in grads], *states, [], steps, lr=0.1, beta1=0.9,
                           beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
        results.append([p.cpu() for p in params])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["adagrad", "sgd-nesterov-decay", "sgd-dampening-maximize-device-lr", "adam",
                                  "adam-decay-amsgrad", "adamw-device-lr-maximize", "adamw-cpu-lr"])
def test_per_parameter_steps_round_as_the_kernel(name, dtype):
    """The device ops that step strided parameters one by one are the kernel's fused multiply-adds
    (add with alpha, addcmul), lerp, divisions and float64 factors, so SGD, Adagrad, Adam and
    AdamW give its bits; float16 and bfloat16 parameters step in float32, as in the kernel (in
    half precision Adam's eps would round to 0 and a zero gradient give NaN)."""
    make = OPTIMIZERS[name]
    shapes = [(7, 33), (5, 9)]
    (kernel, _, _), (per_parameter, _, _) = (_train(DEV, make, dtype, shapes=shapes, transposed=t)
                                             for t in (False, True))
    assert all(torch.equal(a, b) for a, b in zip(kernel, per_parameter))
    if name.startswith("adam"):  # zero gradients: the step leaves the parameter finite
        p = torch.ones(3, 2, dtype=dtype, device=DEV).t().requires_grad_()
        p.grad = torch.zeros_like(p)
        make([p], DEV).step()
        assert torch.isfinite(p.detach().cpu()).all()
