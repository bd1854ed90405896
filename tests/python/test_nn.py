"""softmax, log_softmax, nll_loss and cross_entropy on the device (compositions of engine ops),
forward and backward, against torch's CPU kernels with the CPU fallback refused."""

import pytest
import torch
import torch.nn.functional as F

DEV = "openreg"


def _tolerance(dtype):
    return {"rtol": 2e-2, "atol": 2e-2} if dtype in (torch.float16, torch.bfloat16) else {"rtol": 1e-5, "atol": 1e-6}


def _forward_backward(fn, x, *rest, dtype, tol=None):
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
    tol = tol or _tolerance(dtype)
    torch.testing.assert_close(out_dev, out_cpu, equal_nan=True, **tol)
    torch.testing.assert_close(grad_dev, grad_cpu, equal_nan=True, **tol)


def _train(device, make_model, make_opt, x, y, steps):
    """Losses of `steps` cross_entropy training steps on `device`; the fallback refused on openreg."""
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = make_opt(model.parameters())
    x, y = x.to(device), y.to(device)
    losses = []
    with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
        for _ in range(steps):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16), ids=str)
@pytest.mark.parametrize("dim", (0, 1, -1))
def test_softmax_and_log_softmax(dtype, dim):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 7, 5, generator=g) * 10).to(dtype)
    x[1, 2, 3] = float("-inf")  # a masked position
    for fn in (F.softmax, F.log_softmax):
        _forward_backward(lambda t: fn(t, dim), x, dtype=dtype)
        _forward_backward(lambda t: fn(t.transpose(0, 2), dim), x, dtype=dtype)  # strided input


@pytest.mark.parametrize("length", (1, 3, 4, 257, 1000))
def test_contiguous_float32_lines_match_the_strided_path_bit_for_bit(length):
    # Contiguous float32 lines take their own loops; a transposed copy of the same data takes the
    # general chunked ones. Same arithmetic in the same order: the results must be equal, not close.
    g = torch.Generator().manual_seed(length)
    x = torch.randn(6, length, generator=g) * 8
    x[1, 0] = float("-inf")
    x[2, -1] = float("nan")
    x[3] = float("-inf")
    grad = torch.randn(6, length, generator=g)
    contiguous, strided = x.to(DEV), x.t().contiguous().to(DEV).t()
    grad_contiguous, grad_strided = grad.to(DEV), grad.t().contiguous().to(DEV).t()
    assert length == 1 or not strided.is_contiguous()
    for fn in (torch.softmax, torch.log_softmax):
        a, b = fn(contiguous, 1), fn(strided, 1)
        assert torch.equal(a.cpu().nan_to_num(7.0), b.cpu().nan_to_num(7.0)), fn.__name__
        torch.testing.assert_close(a.cpu(), fn(x, 1), equal_nan=True)
    y = torch.softmax(contiguous, 1)
    for op in (torch.ops.aten._softmax_backward_data, torch.ops.aten._log_softmax_backward_data):
        forward = y if op is torch.ops.aten._softmax_backward_data else torch.log_softmax(contiguous, 1)
        a = op(grad_contiguous, forward, 1, torch.float32)
        b = op(grad_strided, forward.t().contiguous().t(), 1, torch.float32)
        assert torch.equal(a.cpu().nan_to_num(7.0), b.cpu().nan_to_num(7.0)), op
        torch.testing.assert_close(a.cpu(), op(grad, forward.cpu(), 1, torch.float32), equal_nan=True)


@pytest.mark.parametrize(
    "shape, dim",
    (
        ((300, 70), 0),  # lines of 300 down the rows, 64 + 6 of them side by side
        ((5, 3), 0),  # shorter than a lane group, narrower than a vector
        ((17, 2, 129), 0),
        ((2, 19, 6, 7), 1),  # an NCHW batch's channels: H and W side by side as one dimension
        ((3, 33, 1, 5), 1),
    ),
    ids=str,
)
def test_lines_side_by_side_match_one_line_at_a_time_bit_for_bit(shape, dim):
    # Softmax along a dimension other than the last runs across adjacent lines, a row of vectors
    # at a time. Same arithmetic per line as the line loops: equal to the same data with the
    # dimension moved last, not only close.
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g) * 8
    x.view(-1)[::23] = float("-inf")
    x.view(-1)[5] = float("nan")
    grad = torch.randn(shape, generator=g)
    dev, grad_dev = x.to(DEV), grad.to(DEV)
    last, grad_last = dev.movedim(dim, -1).contiguous(), grad_dev.movedim(dim, -1).contiguous()

    def same(a, b, what):
        assert torch.equal(a.cpu().nan_to_num(7.0), b.cpu().nan_to_num(7.0)), what

    with torch.openreg.fallback_policy("error"):
        for fn in (torch.softmax, torch.log_softmax):
            out = fn(dev, dim)
            same(out, fn(last, -1).movedim(-1, dim), fn.__name__)
            torch.testing.assert_close(out.cpu(), fn(x, dim), equal_nan=True, rtol=1e-5, atol=1e-5)
        same(torch.logsumexp(dev, dim), torch.logsumexp(last, -1), "logsumexp")
        torch.testing.assert_close(torch.logsumexp(dev, dim).cpu(), torch.logsumexp(x, dim), equal_nan=True)
        finite = x.nan_to_num(nan=0.0, neginf=-30.0)
        for op, fn in ((torch.ops.aten._softmax_backward_data, torch.softmax),
                       (torch.ops.aten._log_softmax_backward_data, torch.log_softmax)):
            y = fn(finite, dim)
            a = op(grad_dev, y.to(DEV), dim, torch.float32)
            b = op(grad_last, y.to(DEV).movedim(dim, -1).contiguous(), -1, torch.float32)
            same(a, b.movedim(-1, dim), op)
            torch.testing.assert_close(a.cpu(), op(grad, y, dim, torch.float32), rtol=1e-5, atol=1e-5)


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


def test_nll_loss_is_one_kernel_for_any_dtype_layout_and_target_range():
    g = torch.Generator().manual_seed(3)
    logp = torch.randn(7, 9, generator=g).log_softmax(1)
    target = torch.tensor([0, 8, 3, -100, 3, 5, 1])
    weight = torch.rand(9, generator=g) + 0.5
    # one launch forward, a fill and one launch backward
    leaf = logp.to(DEV).requires_grad_()
    kernels = _device_kernels(lambda: F.nll_loss(leaf, target.to(DEV)).backward())
    assert {"nll_loss (forward)", "nll_loss (backward)"} <= kernels, kernels
    assert not any(k.startswith(("index", "reduce")) for k in kernels), kernels
    for reduction in ("mean", "sum", "none"):
        # a transposed input, a strided target, weights
        _forward_backward(lambda t: F.nll_loss(t.t().contiguous().t(), target.repeat_interleave(2)[::2].to(t.device),
                                               weight=weight.to(t.device), reduction=reduction), logp,
                          dtype=torch.float32)
        # uint8 targets, as CPU takes them
        _forward_backward(lambda t: F.nll_loss(t, target.clamp(min=0).to(torch.uint8).to(t.device),
                                               reduction=reduction), logp, dtype=torch.float32)
        for half in (torch.float16, torch.bfloat16):
            x, w = logp.to(half), weight.to(half)
            expected = F.nll_loss(x, target, weight=w, reduction=reduction)
            actual = F.nll_loss(x.to(DEV), target.to(DEV), weight=w.to(DEV), reduction=reduction)
            assert actual.dtype == half
            torch.testing.assert_close(actual.cpu(), expected, rtol=1e-2, atol=1e-2)
    # a class out of range (not ignore_index) stops the kernel; the device stays usable
    with pytest.raises(RuntimeError, match="out of range of the classes"):
        F.nll_loss(logp.to(DEV), torch.tensor([0, 9, 1, 1, 1, 1, 1]).to(DEV)).item()
    with pytest.raises(RuntimeError, match="out of range of the classes"):
        F.nll_loss(logp.to(DEV), torch.tensor([0, -3, 1, 1, 1, 1, 1]).to(DEV)).item()
    torch.testing.assert_close(F.nll_loss(logp.to(DEV), target.to(DEV)).cpu(), F.nll_loss(logp, target))


def test_nll_loss_refuses_what_cpu_refuses():
    g = torch.Generator().manual_seed(4)
    logp, image = torch.randn(3, 4, generator=g), torch.randn(2, 4, 3, 5, generator=g)
    target, spatial = torch.tensor([1, 2, 3]), torch.randint(0, 4, (2, 3, 5), generator=g)
    cases = [  # the same call on both sides, with what CPU says
        (lambda d: F.nll_loss(logp.to(d), target.to(d), weight=torch.ones(4, dtype=torch.float64, device=d)),
         "expected scalar type Float but found Double"),
        (lambda d: F.nll_loss(image.to(d), spatial.to(d), weight=torch.ones(4, dtype=torch.float64, device=d)),
         "expected scalar type Float but found Double"),
        (lambda d: F.nll_loss(image.to(d), spatial.int().to(d)), "expected target dtype to be Long or Byte"),
        (lambda d: F.nll_loss(image.to(d), spatial.to(torch.uint8).to(d)), "expected scalar type Long but found Byte"),
    ]
    for call, message in cases:
        with pytest.raises(RuntimeError, match=message):
            call("cpu")
        with pytest.raises(RuntimeError, match=message):
            call(DEV)
    # nll_loss2d's backward checks its gradient's shape (it has no meta function to do it)
    x = image.to(DEV)
    out, total = torch.ops.aten.nll_loss2d_forward(x, spatial.to(DEV), None, 0, -100)
    with pytest.raises(RuntimeError, match="size mismatch"):
        torch.ops.aten.nll_loss2d_backward(torch.ones(1, 1, 1, device=DEV), x, spatial.to(DEV), None, 0, -100, total)
    with pytest.raises(RuntimeError, match="single element grad_output"):
        torch.ops.aten.nll_loss2d_backward(torch.ones(2, device=DEV), x, spatial.to(DEV), None, 1, -100, total)
    # a one-element grad_output of shape (1,) is taken, as on CPU
    grad = torch.ops.aten.nll_loss2d_backward(torch.ones(1, device=DEV), x, spatial.to(DEV), None, 1, -100, total)
    expected = torch.ops.aten.nll_loss2d_backward(torch.ones(1), image, spatial, None, 1, -100, total.cpu())
    torch.testing.assert_close(grad.cpu(), expected)
    torch.testing.assert_close(out.cpu(), torch.ops.aten.nll_loss2d_forward(image, spatial, None, 0, -100)[0])


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
    # the engine's nll_loss kernel, whatever the layout: channels last, a slice whose positions are
    # not one run of strides (copied first), a transposed target
    wide = torch.randn(2, 4, 3, 10, generator=g)
    for x, t, view in ((logits.to(memory_format=torch.channels_last), target, lambda v: v),
                       (wide, target, lambda v: v[..., :5]),  # sliced on the device: rows 10 apart, 5 long
                       (logits.transpose(2, 3), target.transpose(1, 2), lambda v: v)):
        for reduction in ("mean", "none"):
            _forward_backward(lambda v: F.cross_entropy(view(v), t.to(v.device), weight=weight.to(v.device),
                                                        reduction=reduction), x, dtype=torch.float32)
    leaf = logits.to(DEV).requires_grad_()
    kernels = _device_kernels(lambda: F.cross_entropy(leaf, target.to(DEV)).backward())
    assert {"nll_loss (forward)", "nll_loss (backward)"} <= kernels, kernels


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
    # a class index out of range stops the device's nll_loss kernel (a device-side check, as on CUDA)
    with pytest.raises(RuntimeError, match="trapped|out of range|out of bounds"):
        F.cross_entropy(logits, torch.tensor([0, 9, 1], device=DEV)).item()
    torch.testing.assert_close(
        F.cross_entropy(logits, torch.tensor([0, 3, 1], device=DEV)).cpu(),
        F.cross_entropy(logits.cpu(), torch.tensor([0, 3, 1])),
    )


def test_a_classifier_trains_on_the_device_as_on_cpu():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 10, generator=g), torch.randint(0, 4, (64,), generator=g)

    def make_model():
        return torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def make_opt(params):
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)

    cpu, dev = (_train(d, make_model, make_opt, x, y, 20) for d in ("cpu", DEV))
    assert dev[-1] < dev[0] * 0.8
    torch.testing.assert_close(torch.tensor(dev), torch.tensor(cpu), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16), ids=str)
def test_layer_norm(dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(4, 6, 10, generator=g) * 3 + 1).to(dtype)
    w, b = torch.randn(6, 10, generator=g).to(dtype), torch.randn(6, 10, generator=g).to(dtype)
    _forward_backward(lambda t: F.layer_norm(t, (10,)), x, dtype=dtype)
    _forward_backward(lambda t: F.layer_norm(t, (6, 10), w.to(t.device), b.to(t.device)), x, dtype=dtype)
    # the weight's and bias's gradients, and the saved statistics
    for device in ("cpu", DEV):
        wd, bd = w[0].to(device).requires_grad_(), b[0].to(device).requires_grad_()
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            out, mean, rstd = torch.native_layer_norm(x.to(device), (10,), wd, bd, 1e-5)
            out.sum().backward()
        if device == "cpu":
            expected = [t.detach() for t in (out, mean, rstd, wd.grad, bd.grad)]
        else:
            for e, a in zip(expected, (out, mean, rstd, wd.grad, bd.grad)):
                assert a.shape == e.shape and a.dtype == e.dtype
                torch.testing.assert_close(a.detach().cpu(), e, **_tolerance(dtype))


def test_layer_norm_of_16_bit_input_with_float_parameters_keeps_float_statistics():
    x = torch.randn(3, 8).half()
    w, b = torch.randn(8), torch.randn(8)
    expected = torch.native_layer_norm(x, (8,), w, b, 1e-5)
    actual = torch.native_layer_norm(x.to(DEV), (8,), w.to(DEV), b.to(DEV), 1e-5)
    for e, a in zip(expected, actual):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a.cpu(), e, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("affine,track", [(True, True), (False, True), (True, False)])
def test_batch_norm_training_and_eval(affine, track):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 3, 5, 4, generator=g) * 2 + 0.5
    models = {}
    for device in ("cpu", DEV):
        torch.manual_seed(0)
        models[device] = torch.nn.BatchNorm2d(3, affine=affine, track_running_stats=track, momentum=0.3).to(device)
    outs = {}
    for device, bn in models.items():
        leaf = x.clone().to(device).requires_grad_()
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            for _ in range(3):  # running statistics move three times
                y = bn(leaf)
            (y * torch.arange(y.numel()).reshape(y.shape).to(device) / 100).sum().backward()
            bn.eval()
            z = bn(leaf.detach() + 1)
        outs[device] = [y.detach(), leaf.grad, z] + [t for t in (bn.running_mean, bn.running_var) if t is not None]
        if affine:
            outs[device] += [bn.weight.grad, bn.bias.grad]
    for e, a in zip(outs["cpu"], outs[DEV]):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [1, 3, 4, 7, 129])
def test_layer_norm_runs_as_norm_launches(length):
    # float32 rows (and float16 ones, computed in float32) take the engine's norm kernel: the
    # vector loop, the last length % 4 elements one by one, with and without weight and bias
    g = torch.Generator().manual_seed(length)
    x = torch.randn(5, length, generator=g) * 2 + 3
    w, b = torch.randn(length, generator=g), torch.randn(length, generator=g)
    tol = {"rtol": 1e-5, "atol": 2e-5}
    _forward_backward(lambda t: F.layer_norm(t, (length,), w.to(t.device), b.to(t.device)), x, dtype=torch.float32,
                      tol=tol)
    _forward_backward(lambda t: F.layer_norm(t, (length,)), x, dtype=torch.float32, tol=tol)
    _forward_backward(lambda t: F.layer_norm(t, (length,), w.to(t.device)), x.half(), dtype=torch.float16)
    _forward_backward(lambda t: F.layer_norm(t, (length,), None, b.to(t.device)), x, dtype=torch.float32, tol=tol)
    # the weight's and bias's gradients: columns summed down the rows (strips of 8, then one by one)
    seed = torch.randn(5, length, generator=g)
    expected = torch.autograd.grad((F.layer_norm(x, (length,), w.requires_grad_(), b.requires_grad_()) * seed).sum(),
                                   (w, b))
    xd, wd, bd = x.to(DEV).requires_grad_(), w.detach().to(DEV).requires_grad_(), b.detach().to(DEV).requires_grad_()
    actual = torch.autograd.grad((F.layer_norm(xd, (length,), wd, bd) * seed.to(DEV)).sum(), (wd, bd))
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=2e-5)
    kernels = _device_kernels(lambda: F.layer_norm(xd, (length,), wd, bd).sum().backward())
    assert {"norm (layer_forward)", "norm (layer_backward)", "norm (layer_params)"} <= kernels, kernels


@pytest.mark.parametrize("shape", [(7, 3, 5, 3), (1, 4, 2, 2), (2, 5, 9), (6, 3), (300, 70)])
def test_batch_norm_backward_runs_as_two_norm_launches(shape):
    # training's input gradient: the channels' sums in one launch, the gradient in another;
    # planes of a multiple of 4 elements or not, one sample, 1-d batch norm, (N, C) rows (whose
    # channels run side by side, 64 at a time)
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g) * 3 - 1
    w, b = torch.rand(shape[1], generator=g) + 0.5, torch.randn(shape[1], generator=g)
    tol = {"rtol": 1e-5, "atol": 1e-5}
    for weight, bias in ((w, b), (None, None)):
        _forward_backward(lambda t: F.batch_norm(t, None, None, weight if weight is None else weight.to(t.device),
                                                 bias if bias is None else bias.to(t.device), training=True),
                          x, dtype=torch.float32, tol=tol)
    xd = x.to(DEV).requires_grad_()
    wd, bd = w.to(DEV).requires_grad_(), b.to(DEV).requires_grad_()
    kernels = _device_kernels(lambda: F.batch_norm(xd, None, None, wd, bd, training=True).square().sum().backward())
    assert {"norm (batch_stats)", "norm (batch_backward)"} <= kernels, kernels
    # the parameters' gradients come from the same sums
    expected = torch.autograd.grad(F.batch_norm(x, None, None, w.requires_grad_(), b.requires_grad_(),
                                                training=True).square().sum(), (w, b))
    actual = torch.autograd.grad(F.batch_norm(xd, None, None, wd, bd, training=True).square().sum(), (wd, bd))
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-4)


def test_a_single_large_row_or_channel_keeps_the_composites():
    # the norm kernel's workers split rows and channels: one large row (or channel) takes the
    # composites, which split it; a small one still takes the kernel
    g = torch.Generator().manual_seed(12)
    row, channel = torch.randn(1, 70000, generator=g), torch.randn(300, 1, 250, generator=g)
    _forward_backward(lambda t: F.layer_norm(t, (70000,)), row, dtype=torch.float32, tol={"rtol": 1e-5, "atol": 1e-5})
    _forward_backward(lambda t: F.batch_norm(t, None, None, training=True), channel, dtype=torch.float32,
                      tol={"rtol": 1e-5, "atol": 1e-5})
    rows = row.to(DEV).requires_grad_()
    kernels = _device_kernels(lambda: F.layer_norm(rows, (70000,)).sum().backward())
    assert not any(k.startswith("norm") for k in kernels), kernels
    channels = channel.to(DEV).requires_grad_()
    kernels = _device_kernels(lambda: F.batch_norm(channels, None, None, training=True).square().sum().backward())
    assert not any(k.startswith("norm") for k in kernels), kernels
    small = row[:, :100].to(DEV).requires_grad_()
    assert "norm (layer_forward)" in _device_kernels(lambda: F.layer_norm(small, (100,)))


def test_batch_norm_backward_of_half_and_channels_last_inputs():
    # float16 computes in float32 (the norm kernel); a channels_last input keeps its layout in the
    # gradient, as on CPU (the composite path)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(4, 6, 5, 7, generator=g) * 2 + 1
    w, b = torch.rand(6, generator=g) + 0.5, torch.randn(6, generator=g)
    _forward_backward(lambda t: F.batch_norm(t, None, None, w.to(t.device), b.to(t.device), training=True),
                      x.half(), dtype=torch.float16)
    last = x.to(memory_format=torch.channels_last)
    grads = []
    for device in ("cpu", DEV):
        leaf = last.to(device).requires_grad_()
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            out = F.batch_norm(leaf, None, None, w.to(device), b.to(device), training=True)
            (grad,) = torch.autograd.grad(out.square().sum(), leaf)
        grads.append(grad)
    assert grads[1].is_contiguous(memory_format=torch.channels_last) == grads[0].is_contiguous(
        memory_format=torch.channels_last)
    torch.testing.assert_close(grads[1].cpu(), grads[0], rtol=1e-5, atol=1e-4)


def test_embedding_backward_with_padding_and_frequency_scaling():
    g = torch.Generator().manual_seed(5)
    weight = torch.randn(10, 4, generator=g)
    idx = torch.tensor([[1, 2, 2, 0], [9, 2, 1, 0]])
    for kw in ({}, {"padding_idx": 0}, {"scale_grad_by_freq": True}, {"padding_idx": 2, "scale_grad_by_freq": True}):
        _forward_backward(lambda w: F.embedding(idx.to(w.device), w, **kw), weight, dtype=torch.float32)
    # max_norm renormalizes the looked-up rows in place, on the device
    for device in ("cpu", DEV):
        w = weight.clone().to(device)
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            out = F.embedding(idx.to(device), w, max_norm=1.0)
        if device == "cpu":
            expected = (out, w)
        else:
            torch.testing.assert_close(out.cpu(), expected[0])
            torch.testing.assert_close(w.cpu(), expected[1])


def test_a_transformer_layer_trains_on_the_device_as_on_cpu():
    def run(device):
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        emb, head = torch.nn.Embedding(50, 32), torch.nn.Linear(32, 50)
        params = [*layer.parameters(), *emb.parameters(), *head.parameters()]
        for module in (layer, emb, head):
            module.to(device)
        opt = torch.optim.AdamW(params, lr=1e-3)
        ids = torch.randint(0, 50, (4, 12), generator=torch.Generator().manual_seed(1)).to(device)
        losses = []
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            for _ in range(8):
                opt.zero_grad()
                logits = head(layer(emb(ids)))
                loss = F.cross_entropy(logits.reshape(-1, 50), ids.reshape(-1))
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return losses

    cpu, dev = run("cpu"), run(DEV)
    assert dev[-1] < dev[0]
    torch.testing.assert_close(torch.tensor(dev), torch.tensor(cpu), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16), ids=str)
def test_conv2d_geometries(dtype):
    g = torch.Generator().manual_seed(6)
    cases = [  # (input shape, weight shape, keyword arguments)
        ((2, 3, 9, 8), (4, 3, 3, 3), {"padding": 1}),
        ((2, 4, 9, 8), (6, 2, 3, 2), {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "groups": 2}),
        ((1, 4, 7, 7), (4, 1, 3, 3), {"groups": 4, "padding": 2, "dilation": 2}),  # depthwise
        ((2, 6, 6, 5), (6, 1, 3, 2), {"groups": 6, "stride": (1, 2), "padding": 1}),  # depthwise, input grad as one multiply
        ((2, 3, 6, 6), (6, 1, 3, 3), {"groups": 3, "padding": 1}),  # two outputs per group
        ((3, 5, 9, 7), (5, 1, 5, 3), {"groups": 5, "padding": (2, 0)}),  # depthwise, stride 1: whole planes
        ((3, 2, 5, 5), (5, 2, 1, 1), {"stride": 2}),
    ]
    for in_shape, w_shape, kw in cases:
        x = torch.randn(in_shape, generator=g).to(dtype)
        w = torch.randn(w_shape, generator=g).to(dtype)
        b = torch.randn(w_shape[0], generator=g).to(dtype)
        _forward_backward(lambda t: F.conv2d(t, w.to(t.device), b.to(t.device), **kw), x, dtype=dtype)
        # The weight's gradient: each bfloat16 element sums one product per output position (135
        # in the 5x3 depthwise case), and CPU's kernels round them differently by host (with
        # AVX512-BF16 or without: on a Zen 3 host the device differed from CPU by 0.029 in one of
        # 75 elements, both within 0.07 of the float64 gradient): compared within 0.05.
        _forward_backward(lambda t: F.conv2d(x.to(t.device), t, **kw), w, dtype=dtype,
                          tol={"rtol": 5e-2, "atol": 5e-2} if dtype == torch.bfloat16 else None)
    x1, w1 = torch.randn(2, 3, 20, generator=g).to(dtype), torch.randn(4, 3, 5, generator=g).to(dtype)
    _forward_backward(lambda t: F.conv1d(t, w1.to(t.device), stride=3, padding=2), x1, dtype=dtype)


def _device_kernels(fn):
    """The names of the device kernels that fn() launches (profiler activity records)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.PrivateUse1]) as prof:
        fn()
        torch.openreg.synchronize()
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1}


def test_winograd_convolutions_match_cpu():
    # 3x3, stride 1 float32 convolutions with 16 or more channels on both sides run as Winograd
    # F(2x2, 3x3): odd and tiny sizes (partial tiles), every padding edge, the input gradient
    # (rotated kernels, padding 2 - p) and transposed convolutions (the same two paths swapped).
    g = torch.Generator().manual_seed(8)
    tol = {"rtol": 1e-5, "atol": 1e-4}  # sums of up to 288 terms of size 1, in another order than CPU's
    cases = [  # (input shape, output channels, padding)
        ((2, 16, 9, 7), 16, 1), ((1, 16, 5, 6), 24, 0), ((3, 20, 1, 1), 16, 1), ((2, 16, 4, 3), 17, 2),
        ((1, 16, 6, 5), 16, (1, 0)), ((2, 32, 13, 70), 16, 1), ((1, 16, 7, 7), 16, 3),  # padding 3: col2im input grad
        ((1, 16, 3, 300), 16, 1),  # tile rows in several chunks
    ]
    for in_shape, out_channels, padding in cases:
        x = torch.randn(in_shape, generator=g)
        w = torch.randn(out_channels, in_shape[1], 3, 3, generator=g)
        b = torch.randn(out_channels, generator=g)
        _forward_backward(lambda t: F.conv2d(t, w.to(t.device), b.to(t.device), padding=padding), x,
                          dtype=torch.float32, tol=tol)
        _forward_backward(lambda t: F.conv2d(x.to(t.device), t, padding=padding), w, dtype=torch.float32, tol=tol)
        _forward_backward(lambda t: F.conv_transpose2d(t, w.transpose(0, 1).to(t.device), padding=0), x,
                          dtype=torch.float32, tol=tol)
    x, w = torch.randn(2, 16, 8, 8, generator=g).to(DEV), torch.randn(16, 16, 3, 3, generator=g).to(DEV)
    assert {"pool (winograd_weight)", "pool (winograd_input)", "pool (winograd_output)"} <= _device_kernels(
        lambda: F.conv2d(x, w, padding=1))
    x.requires_grad_(), w.requires_grad_()
    backward = _device_kernels(lambda: F.conv2d(x, w, padding=1).sum().backward())
    assert {"pool (winograd_weight_rotated)", "pool (winograd_grad)", "pool (winograd_weight_grad)"} <= backward
    assert "pool (im2col)" not in backward and "pool (col2im)" not in backward, backward
    x, w = x.detach(), w.detach()
    # below 16 channels, or other kernels, strides and dtypes: im2col and one product
    for fn in (lambda: F.conv2d(x[:, :8], w[:, :8], padding=1), lambda: F.conv2d(x, w, stride=2),
               lambda: F.conv2d(x.double(), w.double()), lambda: F.conv2d(x, w[..., :2])):
        kernels = _device_kernels(fn)
        assert "pool (im2col)" in kernels and not any("winograd" in k for k in kernels), kernels


def test_winograd_gives_cpus_infinities_and_nans():
    # The transforms subtract patch elements: without the fix-up, an infinite input gives NaN
    # where CPU's direct sum gives +-inf. Forward, input and weight gradients, against CPU.
    g = torch.Generator().manual_seed(9)
    x, w = torch.randn(2, 16, 7, 6, generator=g), torch.rand(16, 16, 3, 3, generator=g)
    x[0, 3, 2, 2], x[1, 5, 0, 5], x[1, 7, 4, 1] = float("inf"), float("-inf"), float("nan")
    seed = torch.rand(2, 16, 7, 6, generator=g)
    bad_seed = seed.clone()  # the input gradient's own input
    bad_seed[0, 1, 3, 3], bad_seed[1, 2, 6, 0], bad_seed[0, 9, 0, 0] = float("inf"), float("-inf"), float("nan")
    results = []
    for device in ("cpu", DEV):
        xd, wd = x.to(device).requires_grad_(), w.to(device).requires_grad_()
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            out = F.conv2d(xd, wd, padding=1)
            (weight_grad,) = torch.autograd.grad(out, wd, seed.to(device), retain_graph=True)
            (input_grad,) = torch.autograd.grad(out, xd, bad_seed.to(device))
        results.append([t.detach().cpu() for t in (out, weight_grad, input_grad)])
    for got, expected in zip(results[1], results[0]):
        assert expected.isinf().any() and expected.isnan().any()
        assert torch.equal(got.isnan(), expected.isnan())
        assert torch.equal(got.isinf(), expected.isinf()) and torch.equal(got.isposinf(), expected.isposinf())
        finite = expected.isfinite()
        torch.testing.assert_close(got[finite], expected[finite], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("size", [(4, 16), (7, 19), (2, 8)])
def test_max_pool2d_2x2_picks_cpus_maximum_and_index_for_nan_ties_and_infinities(size):
    # 2x2 windows with stride 2 run four outputs at a time (a path of their own).
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-2, 3, (3, 2, *size), generator=g).float()  # many ties
    w = size[1] // 2
    for q, (dy, dx) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        x[0, 0, dy, 2 * q + dx] = float("nan")  # a NaN at each window position
        x[0, 1, dy, 2 * q + dx] = float("-inf")
        x[0, 1, 1 - dy, 2 * q + 1 - dx] = float("-inf")
    x[1, 0, :2, :2] = float("-inf")  # a window of -inf only
    x[1, 1, :2, 2:4] = float("nan")  # NaN against NaN: the last wins
    x[2, 0, :, : 2 * w] = 5.0  # all ties: the first position wins
    with torch.openreg.fallback_policy("error"):
        values, indices = F.max_pool2d(x.to(DEV), 2, return_indices=True)
    expected = F.max_pool2d(x, 2, return_indices=True)
    torch.testing.assert_close(values.cpu(), expected[0], equal_nan=True)
    assert torch.equal(indices.cpu(), expected[1])


@pytest.mark.parametrize("size", [(4, 16), (6, 10), (8, 24), (5, 11), (7, 9)])
def test_max_pool2d_2x2_backward_is_cpus_bit_for_bit_for_any_indices(size):
    # Gradients add into a zeroed plane at each index, wherever it points. 2 x 2 windows write
    # four windows at a time (the last ones of a row one by one, an odd last row and column
    # zeroed); indices outside their windows send the plane back to the scatter-add, from the
    # vector part or from the last windows of a row.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, *size, generator=g)
    x[0, 0, 0, 0] = float("nan")
    _, indices = F.max_pool2d(x, 2, return_indices=True)
    grad = torch.randn(indices.shape, generator=g)
    grad[0, 0, 0, :2] = -0.0  # 0 + (-0) is +0 on CPU
    grad[1, 2, 1, 1] = float("nan")
    elsewhere = indices.clone()
    elsewhere[1, 1] = 0  # every gradient of a plane added at its first element
    elsewhere[0, 2, 0, 0] = size[1] * 2 + 3  # one index in another window
    elsewhere[1, 0, -1, -1] = 0  # the last window of the plane, taken one by one when OW % 4 != 0
    for idx in (indices, elsewhere):
        # the gradient's memory held NaN before: every element must be written
        torch.full(x.shape, float("nan"), device=DEV)
        with torch.openreg.fallback_policy("error"):
            got = torch.ops.aten.max_pool2d_with_indices_backward(grad.to(DEV), x.to(DEV), [2, 2], [2, 2], [0, 0],
                                                                  [1, 1], False, idx.to(DEV)).cpu()
        expected = torch.ops.aten.max_pool2d_with_indices_backward(grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx)
        assert torch.equal(got.view(torch.int32), expected.view(torch.int32))


@pytest.mark.parametrize("kw", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
                                {"kernel_size": (3, 2), "stride": (2, 1), "dilation": (2, 1), "ceil_mode": True},
                                {"kernel_size": 3, "stride": 2, "ceil_mode": True}])
def test_max_pool2d(kw):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, 9, 10, generator=g)
    x[0, 1, 2, 2] = float("nan")
    x[1, 0, :3, :3] = 1.0  # ties: the first maximum wins
    _forward_backward(lambda t: F.max_pool2d(t, **kw), x, dtype=torch.float32)
    for device in ("cpu", DEV):
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            values, indices = F.max_pool2d(x.to(device), return_indices=True, **kw)
        if device == "cpu":
            expected = (values, indices)
        else:
            torch.testing.assert_close(values.cpu(), expected[0], equal_nan=True)
            assert torch.equal(indices.cpu(), expected[1])
    unbatched = x[0].to(DEV)
    torch.testing.assert_close(F.max_pool2d(unbatched, **kw).cpu(), F.max_pool2d(x[0], **kw), equal_nan=True)


def test_a_cnn_trains_on_the_device_as_on_cpu():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 3, 8, 8, generator=g), torch.randint(0, 5, (6,), generator=g)

    def make_model():
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 8, 3, padding=1, groups=2), torch.nn.ReLU(), torch.nn.Flatten(),
            torch.nn.Linear(8 * 4 * 4, 5))

    def make_opt(params):
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)

    cpu, dev = (_train(d, make_model, make_opt, x, y, 10) for d in ("cpu", DEV))
    assert dev[-1] < dev[0]
    torch.testing.assert_close(torch.tensor(dev), torch.tensor(cpu), rtol=1e-4, atol=1e-4)


def test_an_autoencoder_with_transposed_conv_pooling_and_upsampling_trains_as_on_cpu():
    # conv_transpose2d, group_norm, avg and adaptive pooling, bilinear and nearest upsampling,
    # reflection padding, binary_cross_entropy_with_logits (log-sigmoid), fused Adam: forward,
    # backward and step with the fallback refused.
    g = torch.Generator().manual_seed(2)
    x = torch.rand(4, 3, 12, 12, generator=g)

    class AutoEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Sequential(
                torch.nn.ReflectionPad2d(1), torch.nn.Conv2d(3, 8, 3), torch.nn.GroupNorm(2, 8), torch.nn.SiLU(),
                torch.nn.AvgPool2d(2), torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU())
            self.squeeze = torch.nn.AdaptiveAvgPool2d((3, 3))
            self.dec = torch.nn.Sequential(
                torch.nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1), torch.nn.ReLU(),
                torch.nn.Upsample(scale_factor=2, mode="bilinear"), torch.nn.Conv2d(8, 3, 3, padding=1))

        def forward(self, t):
            h = self.enc(t)
            h = h + F.interpolate(self.squeeze(h), size=h.shape[-2:], mode="nearest")
            return self.dec(F.adaptive_max_pool2d(h, (3, 3)))

    losses = {}
    for device in ("cpu", DEV):
        torch.manual_seed(0)
        model = AutoEncoder().to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
        xs = x.to(device)
        losses[device] = []
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            for _ in range(8):
                opt.zero_grad()
                loss = F.binary_cross_entropy_with_logits(model(xs), xs)
                loss.backward()
                opt.step()
                losses[device].append(loss.item())
    assert losses[DEV][-1] < losses[DEV][0]
    torch.testing.assert_close(torch.tensor(losses[DEV]), torch.tensor(losses["cpu"]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16), ids=str)
def test_pooling_upsampling_and_padding_in_16_bit_and_channels_last(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 9, 7, generator=g).to(dtype)
    for fn in (lambda t: F.avg_pool2d(t, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
               lambda t: F.avg_pool2d(t, 2, divisor_override=3), lambda t: F.adaptive_avg_pool2d(t, (4, 3)),
               lambda t: F.adaptive_max_pool2d(t, (2, 5)), lambda t: F.interpolate(t, scale_factor=1.7, mode="nearest"),
               lambda t: F.interpolate(t, size=(5, 11), mode="bilinear", align_corners=True),
               lambda t: F.interpolate(t, size=(5, 11), mode="nearest-exact"),
               lambda t: F.pad(t, (2, 1, 3, 0), mode="reflect"), lambda t: F.pad(t, (2, -1, 3, 4), mode="replicate")):
        _forward_backward(fn, x, dtype=dtype)
        _forward_backward(lambda t: fn(t.contiguous(memory_format=torch.channels_last)), x, dtype=dtype)


def test_avg_pool2d_of_integers_truncates_as_cpu():
    x = torch.arange(2 * 5 * 5).reshape(1, 2, 5, 5) * 7 - 60
    for kw in ({"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1}):
        with torch.openreg.fallback_policy("error"):
            actual = F.avg_pool2d(x.to(DEV), **kw).cpu()
        assert torch.equal(actual, F.avg_pool2d(x, **kw))


@pytest.mark.parametrize("groups, dilation", ((1, 1), (2, 2)))
def test_conv_transpose_matches_cpu(groups, dilation):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 4, 5, 6, generator=g)
    w = torch.randn(4, 6 // groups, 3, 2, generator=g)
    b = torch.randn(6, generator=g)
    for stride, padding, output_padding in ((1, 0, 0), (2, 1, 1), ((3, 2), (0, 1), (2, 1))):
        fn = lambda t, w=w: F.conv_transpose2d(t, w.to(t.device), b.to(t.device), stride=stride, padding=padding,
                                               output_padding=output_padding, groups=groups, dilation=dilation)
        # sums over channels and kernel positions in another order than CPU's
        _forward_backward(fn, x, dtype=torch.float32, tol={"rtol": 1e-5, "atol": 1e-5})
    fn1 = lambda t: F.conv_transpose1d(t, torch.ones(4, 3, 2, device=t.device), stride=2, output_padding=1)
    _forward_backward(fn1, x[:, :, 0], dtype=torch.float32, tol={"rtol": 1e-5, "atol": 1e-5})
    with pytest.raises(RuntimeError):  # an output padding as large as the stride and the dilation, as CPU
        F.conv_transpose2d(x.to(DEV), w.to(DEV), stride=1, output_padding=1, groups=groups)


def test_depthwise_conv_transpose_matches_cpu():
    # one channel in and out per group: the forward is the depthwise input gradient (window
    # products over whole planes with stride 1, the general products otherwise)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 6, 7, 5, generator=g)
    w = torch.randn(6, 1, 3, 3, generator=g)
    for kw in ({"stride": 1, "padding": 1}, {"stride": 2, "padding": 1, "output_padding": 1},
               {"stride": 1, "dilation": 2}, {"stride": 1, "dilation": 2, "output_padding": 1},
               {"stride": 1, "dilation": 2, "padding": (0, 1), "output_padding": (0, 1)}):
        _forward_backward(lambda t: F.conv_transpose2d(t, w.to(t.device), groups=6, **kw), x, dtype=torch.float32,
                          tol={"rtol": 1e-5, "atol": 1e-5})
        _forward_backward(lambda t: F.conv_transpose2d(x.to(t.device), t, groups=6, **kw), w, dtype=torch.float32,
                          tol={"rtol": 1e-5, "atol": 1e-4})


def test_depthwise_weight_gradient_keeps_an_infinity_to_the_windows_that_read_it():
    # the weight gradient multiplies whole padded planes; the columns past each output row read
    # input that no window of the convolution reads, and must stay out of the sums
    x = torch.randn(2, 3, 5, 6)
    x[:, :, 2, -1] = float("inf")
    w = torch.randn(3, 1, 3, 3)
    _forward_backward(lambda t: F.conv2d(x.to(t.device), t, groups=3, padding=1), w, dtype=torch.float32,
                      tol={"rtol": 1e-5, "atol": 1e-4})


def test_binary_cross_entropy_checks_its_range_and_the_device_stays_usable():
    p = torch.tensor([0.2, 0.9, 0.5], device=DEV, requires_grad=True)
    t = torch.tensor([0.0, 1.0, 0.3], device=DEV)
    w = torch.tensor([1.0, 2.0, 0.5], device=DEV)
    for reduction in ("none", "sum", "mean"):
        _forward_backward(lambda x: F.binary_cross_entropy(x, t.cpu().to(x.device), w.cpu().to(x.device),
                                                           reduction=reduction), p.detach().cpu(), dtype=torch.float32)
    for bad_input, bad_target in (([1.5, 0.5, 0.5], [0.0, 1.0, 0.3]), ([0.2, 0.9, 0.5], [0.0, -1.0, 0.3])):
        with pytest.raises(RuntimeError, match="between 0 and 1"):
            F.binary_cross_entropy(torch.tensor(bad_input, device=DEV), torch.tensor(bad_target, device=DEV))
    # a log that would be -inf is clamped at -100, as on CPU
    edge = F.binary_cross_entropy(torch.tensor([0.0, 1.0], device=DEV), torch.tensor([1.0, 0.0], device=DEV))
    assert edge.item() == 100.0
    assert F.binary_cross_entropy(p, t).item() > 0


@pytest.mark.parametrize(
    "make",
    [lambda p: torch.optim.Adam(p, lr=0.05, fused=True, weight_decay=0.1, amsgrad=True),
     lambda p: torch.optim.AdamW(p, lr=torch.tensor(0.05), fused=True, maximize=True),
     lambda p: torch.optim.SGD(p, lr=0.05, fused=True, momentum=0.9, nesterov=True, weight_decay=0.01),
     lambda p: torch.optim.SGD(p, lr=0.05, fused=True, momentum=0.8, dampening=0.3),
     lambda p: torch.optim.Adagrad(p, lr=0.05, fused=True, lr_decay=0.01, weight_decay=0.1)],
    ids=("adam-amsgrad", "adamw-tensor-lr", "sgd-nesterov", "sgd-dampening", "adagrad"),
)
def test_fused_optimizers_step_on_the_device_as_on_cpu(make):
    g = torch.Generator().manual_seed(5)
    start = [torch.randn(7, 3, generator=g), torch.randn(3, generator=g)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(4)]
    result = {}
    for device in ("cpu", DEV):
        params = [p.clone().to(device).requires_grad_() for p in start]
        opt = make(params)
        torch.openreg.reset_op_counts()
        with torch.openreg.fallback_policy("error" if device == DEV else "allow"):
            for step in grads:
                for p, grad in zip(params, step):
                    p.grad = grad.to(device)
                opt.step()
        result[device] = [p.detach().cpu() for p in params]
    assert any(name.startswith("aten::_fused_") and c["device"] > 0 for name, c in torch.openreg.op_counts().items())
    for dev, cpu in zip(result[DEV], result["cpu"]):
        torch.testing.assert_close(dev, cpu, rtol=1e-5, atol=1e-6)


def test_fused_adam_skips_the_step_when_grad_scaler_finds_an_inf():
    model = torch.nn.Linear(3, 1).to(DEV)
    opt = torch.optim.Adam(model.parameters(), fused=True)
    scaler = torch.amp.GradScaler("openreg")
    before = model.weight.detach().cpu().clone()
    with torch.openreg.fallback_policy("error"):
        scaler.scale(model(torch.full((2, 3), float("inf"), device=DEV)).sum()).backward()
        scaler.step(opt)
        scaler.update()
        assert torch.equal(model.weight.detach().cpu(), before) and scaler.get_scale() < 65536.0
        opt.zero_grad()
        scaler.scale(model(torch.ones(2, 3, device=DEV)).sum()).backward()
        scaler.step(opt)
        scaler.update()
    assert not torch.equal(model.weight.detach().cpu(), before)


def test_max_pool_backward_with_an_index_outside_the_plane_stops_the_kernel():
    x = torch.randn(1, 2, 4, 4, device=DEV)
    grad = torch.ones(1, 2, 2, 2, device=DEV)
    indices = torch.zeros(1, 2, 2, 2, dtype=torch.long, device=DEV)
    indices[0, 1, 1, 1] = 16  # one past a 4 x 4 plane: it would land in the next plane
    with pytest.raises(RuntimeError, match="trapped|pool"):
        torch.ops.aten.max_pool2d_with_indices_backward(grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices).cpu()
    assert torch.equal(F.max_pool2d(torch.arange(16.0, device=DEV).view(1, 1, 4, 4), 2).cpu().view(-1),
                       torch.tensor([5.0, 7.0, 13.0, 15.0]))


def test_unfold_and_fold_match_cpu_and_are_each_others_gradient():
    g = torch.Generator().manual_seed(41)
    x = torch.randn(2, 3, 7, 9, generator=g, dtype=torch.float64)
    with torch.openreg.fallback_policy("error"):
        for kw in ({"kernel_size": 3}, {"kernel_size": (2, 3), "dilation": (2, 1), "padding": (1, 2), "stride": (2, 3)}):
            expected = torch.nn.functional.unfold(x, **kw)
            xd = x.to("openreg").requires_grad_()
            cols = torch.nn.functional.unfold(xd, **kw)
            torch.testing.assert_close(cols.cpu(), expected)
            folded = torch.nn.functional.fold(cols.detach(), (7, 9), **kw)
            torch.testing.assert_close(folded.cpu(), torch.nn.functional.fold(expected, (7, 9), **kw))
            (grad,) = torch.autograd.grad((cols * cols.detach()).sum(), xd)  # col2im of the columns, on the device
            torch.testing.assert_close(grad.cpu(), torch.nn.functional.fold(expected, (7, 9), **kw))
        with pytest.raises(RuntimeError, match="sliding blocks"):
            torch.nn.functional.unfold(x.to("openreg"), kernel_size=10)
        with pytest.raises(RuntimeError, match="divisible"):
            torch.nn.functional.fold(torch.ones(1, 5, 4, device="openreg"), (3, 3), kernel_size=2)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.bool), ids=str)
def test_window_copies_match_cpu_bit_for_bit_at_every_edge(dtype):
    """im2col (unfold) copies and col2im (fold) sums each element's window terms in window order, as
    CPU does: equal results, also where windows lie partly or wholly in the padding."""
    g = torch.Generator().manual_seed(43)
    cases = [  # (image size, keyword arguments)
        ((2, 3), {"kernel_size": 3, "padding": 4}),  # whole rows and columns of windows in the padding
        ((7, 9), {"kernel_size": (2, 3), "stride": (3, 2), "dilation": (2, 3), "padding": (2, 1)}),
        ((6, 5), {"kernel_size": 1, "stride": 2}),
        ((5, 5), {"kernel_size": 5}),  # one window
        ((4, 11), {"kernel_size": (1, 4), "stride": (1, 5), "padding": (0, 3)}),  # stride wider than the window
    ]
    for size, kw in cases:
        x = torch.randn(2, 3, *size, generator=g, dtype=torch.float64)
        x = (x > 0) if dtype == torch.bool else x.to(dtype)
        with torch.openreg.fallback_policy("error"):
            cols = torch.nn.functional.unfold(x.to("openreg"), **kw)
        expected = torch.nn.functional.unfold(x, **kw)
        assert cols.dtype == dtype and torch.equal(cols.cpu(), expected), kw
        if dtype == torch.bool:
            continue
        c = torch.randn(expected.shape, generator=g, dtype=torch.float64).to(dtype)
        with torch.openreg.fallback_policy("error"):
            image = torch.nn.functional.fold(c.to("openreg"), size, **kw)
        assert torch.equal(image.cpu(), torch.nn.functional.fold(c, size, **kw)), kw


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_and_its_gradients_match_cpu(mode):
    g = torch.Generator().manual_seed(42)
    weight = torch.randn(10, 4, generator=g, dtype=torch.float64)
    weight[3] = weight[5]  # equal rows: max picks the first occurrence
    indices = torch.tensor([3, 5, 1, 1, 9, 0, 2, 7, 3])
    for offsets, last in ((torch.tensor([0, 2, 2, 6]), False), (torch.tensor([0, 4, 4, 9]), True)):  # an empty bag
        for padding_idx in (None, 1):
            for scale in (False, True) if mode != "max" else (False,):  # (max refuses scale_grad_by_freq)
                psw = torch.rand(9, generator=g, dtype=torch.float64) if mode == "sum" else None
                results = []
                for device in ("cpu", "openreg"):
                    w = weight.to(device).requires_grad_()
                    p = psw.to(device).requires_grad_() if psw is not None else None
                    with torch.openreg.fallback_policy("error" if device == "openreg" else "allow"):
                        out = torch.nn.functional.embedding_bag(
                            indices.to(device), w, offsets.to(device), mode=mode, per_sample_weights=p,
                            include_last_offset=last, padding_idx=padding_idx, scale_grad_by_freq=scale)
                        seed = torch.arange(out.numel(), dtype=out.dtype, device=device).view_as(out)
                        grads = torch.autograd.grad((out * seed).sum(), [w] + ([p] if p is not None else []))
                    results.append([out.detach().cpu()] + [t.cpu() for t in grads])
                for actual, expected in zip(results[1], results[0]):
                    torch.testing.assert_close(actual, expected)


def test_embedding_bag_refuses_bad_offsets_like_cpu():
    w = torch.randn(5, 3, device="openreg")
    with pytest.raises(RuntimeError, match="offsets\\[0\\] has to be 0"):
        torch.nn.functional.embedding_bag(torch.tensor([0, 1], device="openreg"), w, torch.tensor([1], device="openreg"))
    with pytest.raises(RuntimeError, match="per_sample_weights"):
        torch.nn.functional.embedding_bag(torch.tensor([[0, 1]], device="openreg"), w, mode="mean",
                                          per_sample_weights=torch.ones(1, 2, device="openreg"))
    out = torch.nn.functional.embedding_bag(torch.tensor([[0, 1]], device="openreg"), w)  # still usable
    assert out.shape == (1, 3)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16), ids=str)
def test_group_norm_is_two_passes_on_the_device_and_matches_cpu(dtype):
    # native_group_norm: the groups' statistics, then (x - mean) * (rstd * weight) + bias
    g = torch.Generator().manual_seed(0)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    for shape, groups in [((4, 6, 5, 5), 3), ((2, 8, 7), 4), ((3, 4, 2, 3, 2), 2), ((0, 4, 5), 2)]:
        for affine in (False, True):
            x = torch.randn(shape, generator=g).to(dtype)
            w = torch.randn(shape[1], generator=g).to(dtype) if affine else None
            b = torch.randn(shape[1], generator=g).to(dtype) if affine else None
            _forward_backward(lambda t: F.group_norm(t, groups, w if w is None else w.to(t.device),
                                                     b if b is None else b.to(t.device)), x, dtype=dtype)
            hw = x[0, 0].numel() if shape[0] else shape[-1]
            device = torch.ops.aten.native_group_norm(x.to(DEV), None, None, shape[0], shape[1], hw, groups, 1e-5)
            cpu = torch.ops.aten.native_group_norm(x, None, None, shape[0], shape[1], hw, groups, 1e-5)
            for a, c in zip(device, cpu):
                assert a.dtype == c.dtype and a.shape == c.shape
                torch.testing.assert_close(a.cpu(), c, **tol)
    # a group of one element: x - mean is exactly 0, so the result is the bias (CPU's one-pass form,
    # x * scale + (bias - scale * mean), is about 3e-5 off here)
    x, w, b = torch.randn(5, 6, 1, 1, generator=g) * 3, torch.randn(6, generator=g), torch.randn(6, generator=g)
    y = F.group_norm(x.to(DEV), 6, w.to(DEV), b.to(DEV)).cpu()
    assert torch.equal(y, b.view(1, 6, 1, 1).expand(5, 6, 1, 1))
    with pytest.raises(RuntimeError, match="HxW"):
        F.group_norm(torch.randn(2, 4, 0, device=DEV), 2)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(torch.randn(2, 5, 3, device=DEV), 2)
