"""Matrix products on the device engine's gemm kernel: mm, addmm, bmm, baddbmm, addmv, mv,
dot/vdot and the composites built on them (matmul, linear, einsum), against torch's CPU
kernels, with the CPU fallback refused."""

import pytest
import torch
import torch.nn.functional as F

DEV = "openreg"

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)

# (m, k, n): single elements, one tile, edges of every blocking constant (float32 tile 3 x 8, k slices
# of 256, 96 rows and 1024 columns packed at once), vectors, and an empty sum.
SHAPES = [(1, 1, 1), (7, 5, 3), (6, 8, 8), (33, 300, 17), (100, 513, 70), (97, 40, 1030), (1, 64, 50), (50, 64, 1),
          (5, 0, 4),
          (9, 300, 1000), (5, 8000, 9)]  # short and wide: workers split the columns (the last share is one)


def _random(shape, dtype, generator):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    low = 0 if dtype == torch.uint8 else -4
    return torch.randint(low, 5, shape, generator=generator, dtype=dtype)


def _tolerance(dtype, k=1):
    if dtype in (torch.float16, torch.bfloat16):
        # CPU rounds float16 products and partial sums differently; both accumulate in float32
        return {"rtol": 2e-2, "atol": 2e-2 * max(1, k) ** 0.5}
    if dtype == torch.float32:
        return {"rtol": 1e-5, "atol": 1e-5 * max(1, k) ** 0.5}
    return {}


def _check(fn, *args, dtype, k=1, **kwargs):
    """fn on CPU and on openreg (fallback refused) agree; returns the device result."""
    expected = fn(*args, **kwargs)
    on_device = [a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args]
    with torch.openreg.fallback_policy("error"):
        actual = fn(*on_device, **kwargs)
    assert actual.device.type == DEV
    torch.testing.assert_close(actual.cpu(), expected, **_tolerance(dtype, k))
    return actual


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_mm_layouts(dtype, m, k, n):
    g = torch.Generator().manual_seed(m * 10007 + k * 101 + n)
    a, b = _random((m, k), dtype, g), _random((k, n), dtype, g)
    layouts = {
        "contiguous": (a, b),
        "a transposed": (a.t().contiguous().t(), b),
        "b transposed": (a, b.t().contiguous().t()),
        "both transposed": (a.t().contiguous().t(), b.t().contiguous().t()),
    }
    for label, (x, y) in layouts.items():
        _check(torch.mm, x, y, dtype=dtype, k=k)
    # sliced and expanded operands, read in place
    big_a = _random((2 * m, 3 * k + 1), dtype, g)
    _check(torch.mm, big_a[::2, 1::3], b, dtype=dtype, k=k)
    _check(torch.mm, a[:, :1].expand(m, k), b, dtype=dtype, k=k)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=str)
def test_every_depth_up_to_two_chunks(dtype):
    # The register tile runs k in chunks of 16 steps, then the pairs left over (0 to 7) and an odd
    # step: every k up to 33 takes each of those ends, for 7 rows (two tiles and one row) and both
    # orientations of the product.
    g = torch.Generator().manual_seed(33)
    for k in range(1, 34):
        a, b = _random((7, k), dtype, g), _random((k, 10), dtype, g)
        _check(torch.mm, a, b, dtype=dtype, k=k)
        _check(torch.mm, b.t(), a.t(), dtype=dtype, k=k)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16, torch.int64), ids=str)
def test_addmm_scalars_and_bias_broadcast(dtype):
    g = torch.Generator().manual_seed(1)
    a, b, c = _random((20, 30), dtype, g), _random((30, 40), dtype, g), _random((20, 40), dtype, g)
    bias = _random((40,), dtype, g)
    scalars = [{"beta": 0.5, "alpha": 2.0}, {"beta": 1, "alpha": -1}] if dtype.is_floating_point else \
        [{"beta": 2, "alpha": 3}, {"beta": 0, "alpha": -1}]
    for kw in scalars:
        _check(torch.addmm, c, a, b, dtype=dtype, k=30, **kw)
        _check(torch.addmm, bias, a, b, dtype=dtype, k=30, **kw)
    # in place, and with the sum empty (k = 0): out = beta * self
    _check(lambda c, a, b: c.clone().addmm_(a, b, beta=2, alpha=3), c, a, b, dtype=dtype, k=30)
    _check(torch.addmm, c, a[:, :0], b[:0], beta=2, dtype=dtype)


def test_beta_zero_ignores_nan_in_self():
    c = torch.full((3, 4), float("nan"), device=DEV)
    a, b = torch.ones(3, 2, device=DEV), torch.ones(2, 4, device=DEV)
    assert torch.equal(torch.addmm(c, a, b, beta=0).cpu(), torch.full((3, 4), 2.0))
    # beta = 1 does propagate it
    assert torch.addmm(c, a, b).isnan().all()


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.float16, torch.int32), ids=str)
def test_out_forms(dtype):
    g = torch.Generator().manual_seed(2)
    a, b = _random((9, 13), dtype, g), _random((13, 11), dtype, g)

    def into_transposed(x, y):  # an out= tensor with column-major strides keeps them
        out = torch.empty(11, 9, dtype=dtype, device=x.device).t()
        torch.mm(x, y, out=out)
        assert out.stride() == (1, 9)
        return out

    def into_wrong_shape(x, y):  # resized, with CPU's warning
        out = torch.empty(3, 3, dtype=dtype, device=x.device)
        with pytest.warns(UserWarning, match="resized"):
            torch.mm(x, y, out=out)
        return out

    _check(into_transposed, a, b, dtype=dtype, k=13)
    _check(into_wrong_shape, a, b, dtype=dtype, k=13)
    _check(lambda x, y: torch.mm(x, y, out=torch.empty(0, dtype=dtype, device=x.device)), a, b, dtype=dtype, k=13)


def test_out_sharing_memory_with_an_input():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(16, 16, generator=g)
    d = a.to(DEV)
    torch.mm(d, d, out=d)
    torch.testing.assert_close(d.cpu(), a @ a)
    c, x = torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g)
    dc, dx = c.to(DEV), x.to(DEV)
    dc.addmm_(dc, dx)  # self is also mat1
    torch.testing.assert_close(dc.cpu(), c.addmm(c, x))


@pytest.mark.parametrize("dtype", FLOATS + (torch.int64,), ids=str)
def test_batched(dtype):
    g = torch.Generator().manual_seed(4)
    for bs, m, k, n in [(3, 5, 7, 9), (4, 64, 300, 20), (2, 1, 5, 6), (0, 3, 4, 5)]:
        a, b, c = _random((bs, m, k), dtype, g), _random((bs, k, n), dtype, g), _random((bs, m, n), dtype, g)
        _check(torch.bmm, a, b, dtype=dtype, k=k)
        _check(torch.bmm, a.transpose(1, 2).contiguous().transpose(1, 2), b, dtype=dtype, k=k)
        _check(torch.bmm, a[:1].expand(bs, m, k), b, dtype=dtype, k=k)  # batch stride 0
        beta = 0.25 if dtype.is_floating_point else 2
        _check(torch.baddbmm, c, a, b, beta=beta, alpha=2, dtype=dtype, k=k)
        _check(torch.baddbmm, c[:, :1], a, b, dtype=dtype, k=k)  # self broadcast
    _check(torch.matmul, _random((2, 3, 4, 5), dtype, g), _random((5, 6), dtype, g), dtype=dtype, k=5)
    _check(torch.matmul, _random((2, 3, 4, 5), dtype, g), _random((3, 5, 6), dtype, g), dtype=dtype, k=5)


@pytest.mark.parametrize("dtype", FLOATS + (torch.int64, torch.uint8), ids=str)
def test_vectors(dtype):
    g = torch.Generator().manual_seed(5)
    for m, k in [(1, 1), (10, 300), (300, 10), (700, 1000)]:
        mat, vec, bias = _random((m, k), dtype, g), _random((k,), dtype, g), _random((m,), dtype, g)
        _check(torch.mv, mat, vec, dtype=dtype, k=k)
        _check(torch.mv, mat.t().contiguous().t(), vec, dtype=dtype, k=k)  # columns contiguous
        _check(torch.mv, mat, _random((2 * k,), dtype, g)[::2], dtype=dtype, k=k)
        beta = 0.5 if dtype.is_floating_point else 3
        _check(torch.addmv, bias, mat, vec, beta=beta, alpha=2, dtype=dtype, k=k)
        _check(torch.dot, vec, _random((k,), dtype, g), dtype=dtype, k=k)
        _check(torch.vdot, _random((3 * k,), dtype, g)[::3], vec, dtype=dtype, k=k)
        _check(torch.matmul, vec, _random((k, 7), dtype, g), dtype=dtype, k=k)  # vector @ matrix
        _check(torch.matmul, _random((2, 7, k), dtype, g), vec, dtype=dtype, k=k)


def test_linear_and_einsum_forward_and_backward():
    g = torch.Generator().manual_seed(6)
    x, w, bias = torch.randn(4, 8, 16, generator=g), torch.randn(12, 16, generator=g), torch.randn(12, generator=g)
    leaves_cpu = [t.clone().requires_grad_() for t in (x, w, bias)]
    leaves_dev = [t.to(DEV).requires_grad_() for t in (x, w, bias)]
    outs = []
    for (xx, ww, bb), policy in ((leaves_cpu, "allow"), (leaves_dev, "error")):
        with torch.openreg.fallback_policy(policy):
            y = F.linear(xx, ww, bb)
            z = torch.einsum("bij,kj->bik", xx, ww)
            (y.square().sum() + z.sum()).backward()
        outs.append((y, z))
    for cpu_t, dev_t in zip(outs[0], outs[1]):
        torch.testing.assert_close(dev_t.detach().cpu(), cpu_t.detach(), rtol=1e-5, atol=1e-5)
    for cpu_leaf, dev_leaf in zip(leaves_cpu, leaves_dev):
        torch.testing.assert_close(dev_leaf.grad.cpu(), cpu_leaf.grad, rtol=1e-5, atol=1e-4)


def test_results_do_not_depend_on_the_other_sizes():
    # An output element's value depends only on k and its operands' layout: rows computed alone,
    # inside a large product, or as one matrix of a batch are bit-identical. (A single row or
    # column is a matrix-vector product, which sums in another order.)
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(200, 700, generator=g).to(DEV), torch.randn(700, 1100, generator=g).to(DEV)
    full = torch.mm(a, b)
    assert torch.equal(torch.mm(a[37:39], b).cpu(), full[37:39].cpu())
    assert torch.equal(torch.mm(a[90:110], b[:, 1000:1100]).cpu(), full[90:110, 1000:1100].cpu())
    batch = torch.bmm(torch.stack([a, a.flip(0)]), b.expand(2, 700, 1100))
    assert torch.equal(batch[0].cpu(), full.cpu())
    assert torch.equal(torch.mm(a, b).cpu(), full.cpu())  # and run to run


def test_errors_match_cpu():
    a, b = torch.ones(2, 3, device=DEV), torch.ones(4, 5, device=DEV)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(a, b)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(a, torch.ones(3, 2, dtype=torch.float64, device=DEV))
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(a, torch.ones(3, 2))
    with pytest.raises(RuntimeError, match="same device"):
        torch.addmm(torch.ones(2, 2), a, torch.ones(3, 2, device=DEV))
    with pytest.raises(NotImplementedError, match="Bool"):
        torch.mm(a.bool(), torch.ones(3, 2, dtype=torch.bool, device=DEV))
    with pytest.raises(RuntimeError, match="1D tensors expected"):
        torch.dot(a, a)
    with pytest.raises(RuntimeError, match="inconsistent tensor size"):
        torch.dot(torch.ones(3, device=DEV), torch.ones(4, device=DEV))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.dot(torch.ones(3, device=DEV), torch.ones(3, dtype=torch.float64, device=DEV))
    # the device is still usable
    torch.testing.assert_close(torch.mm(a, a.t()).cpu(), torch.full((2, 2), 3.0))


def test_complex_goes_through_the_fallback():
    a = torch.randn(3, 3, dtype=torch.complex64)
    torch.testing.assert_close(torch.mm(a.to(DEV), a.to(DEV)).cpu(), a @ a)
    with torch.openreg.fallback_policy("error"), pytest.raises(RuntimeError, match="fallback"):
        torch.mm(a.to(DEV), a.to(DEV))


def test_mse_loss_on_the_device():
    g = torch.Generator().manual_seed(8)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for reduction in ("mean", "sum", "none"):
            x, y = torch.randn(5, 7, generator=g).to(dtype), torch.randn(7, generator=g).to(dtype)
            xc, xd = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
            lc = F.mse_loss(xc, y.expand(5, 7), reduction=reduction)
            with torch.openreg.fallback_policy("error"):
                ld = F.mse_loss(xd, y.to(DEV).expand(5, 7), reduction=reduction)
                seed = torch.randn(lc.shape, generator=g).to(dtype)
                ld.backward(seed.to(DEV))
            lc.backward(seed)
            tol = _tolerance(dtype, 35)
            torch.testing.assert_close(ld.detach().cpu(), lc.detach(), **tol)
            torch.testing.assert_close(xd.grad.cpu(), xc.grad, **tol)


def test_cross_products_match_cpu():
    g = torch.Generator().manual_seed(31)
    with torch.openreg.fallback_policy("error"):
        for dtype in (torch.float32, torch.float64, torch.int64):
            a = (torch.randn(4, 3, 5, generator=g) * 5).to(dtype)
            b = (torch.randn(1, 3, 5, generator=g) * 5).to(dtype)
            expected = torch.linalg.cross(a, b, dim=1)
            actual = torch.linalg.cross(a.to("openreg"), b.to("openreg"), dim=1).cpu()
            torch.testing.assert_close(actual, expected)
        with pytest.raises(RuntimeError):
            torch.linalg.cross(torch.ones(2, 4, device="openreg"), torch.ones(2, 4, device="openreg"))


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 2.0, 3.0, float("inf")])
def test_cdist_and_its_gradient_match_cpu(p):
    g = torch.Generator().manual_seed(32)
    x1 = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    x2 = torch.randn(1, 6, 4, generator=g, dtype=torch.float64)
    x2[0, 0] = x1[0, 1]  # a zero distance
    with torch.openreg.fallback_policy("error"):
        results = []
        for device in ("cpu", "openreg"):
            a = x1.to(device).requires_grad_()
            b = x2.to(device).requires_grad_()
            d = torch.cdist(a, b, p=p)
            ga, gb = torch.autograd.grad((d * torch.arange(d.numel(), device=device).view_as(d)).sum(), (a, b))
            results.append([t.detach().cpu() for t in (d, ga, gb)])
        for actual, expected in zip(results[1], results[0]):
            torch.testing.assert_close(actual, expected)
        # more than 25 rows: for p = 2 the matrix-product path (|a|^2 + |b|^2 - 2 a.b, whose
        # rounding differs with the GEMM's summation order)
        big1, big2 = torch.randn(30, 4, generator=g), torch.randn(27, 4, generator=g)
        torch.testing.assert_close(torch.cdist(big1.to("openreg"), big2.to("openreg"), p=p).cpu(),
                                   torch.cdist(big1, big2, p=p), atol=1e-4, rtol=1e-4)
