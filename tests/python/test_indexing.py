"""Indexing and data movement on the device engine (`index`, `nonzero`, `positions` kernels,
and copies): advanced indexing, gather/scatter, index_select/index_add/index_fill,
masked_select, nonzero, cat/stack, flip/roll, tril/triu, arange/linspace/eye.

Every test runs under the ``error`` fallback policy; CPU is the oracle (exact: these ops move
values, they do not round them, except arange/linspace and the accumulating ones).
"""

import pytest
import torch

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool]


@pytest.fixture(autouse=True)
def _no_fallback():
    with torch.openreg.fallback_policy("error"):
        yield


def _values(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def _dev(*ts):
    return [t.to("openreg") if isinstance(t, torch.Tensor) else t for t in ts]


def _same(actual, expected, exact=True):
    for a, e in zip(actual, expected) if isinstance(expected, tuple) else [(actual, expected)]:
        assert a.device.type == "openreg"
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, e.dtype, a.shape, e.shape)
        if exact:
            torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(a.cpu(), e, equal_nan=True)


def _check(fn, *args, exact=True):
    _same(fn(*_dev(*args)), fn(*args), exact)


I = torch.tensor([[0, 2], [4, 1]])
J = torch.tensor([1, 3])
MOVES = {
    "index": lambda x, i, j: x[i],
    "index_negative": lambda x, i, j: x[-1 - i],
    "index_two": lambda x, i, j: x[i, :, j[:1]],
    "index_after_slice": lambda x, i, j: x[:, j],
    "index_non_adjacent": lambda x, i, j: x[j, :, j],
    "gather": lambda x, i, j: torch.gather(x, 1, torch.ones(5, 3, 7, dtype=torch.long, device=x.device).cumsum(2) % 6),
    "index_select": lambda x, i, j: x.index_select(2, j),
    "index_select_0dim": lambda x, i, j: x.index_select(0, j[0]),
    "take_along_dim": lambda x, i, j: torch.take_along_dim(x, j.view(1, 2, 1), 1),
    "masked_select": lambda x, i, j: torch.masked_select(x, x != x.flatten()[0]),
    "nonzero": lambda x, i, j: x.nonzero(),
    "cat": lambda x, i, j: torch.cat([x, x[:2], x[:0]], 0),
    "stack": lambda x, i, j: torch.stack([x, x], 2),
    "flip": lambda x, i, j: x.flip(0, 2),
    "flip_view": lambda x, i, j: x.transpose(0, 2)[1:].flip(-1),
    "roll": lambda x, i, j: x.roll((1, -2), (0, 2)),
    "roll_flat": lambda x, i, j: x.roll(3),
    "tril": lambda x, i, j: x.tril(),
    "triu": lambda x, i, j: x.triu(-1),
    "tril_view": lambda x, i, j: x.transpose(1, 2).tril(2),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", MOVES, ids=str)
def test_data_movement_matches_cpu_for_every_dtype(op, dtype):
    _check(MOVES[op], _values((5, 6, 7), dtype), I, J)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16, torch.bool], ids=str)
def test_puts_and_scatters_match_cpu(dtype):
    x = _values((5, 6), dtype)
    v = _values((2, 6), dtype, seed=1)
    rows = torch.tensor([3, 0])
    mask = _values((5, 6), torch.bool, seed=2)
    index = torch.stack([torch.randperm(5)[:3] for _ in range(6)], 1)  # no repeats within a column

    def put(t, r, val):
        t = t.clone()
        t[r] = val
        return t

    def put_mask(t, m):
        t = t.clone()
        t[m] = t.flatten()[0].clone()
        return t

    _check(put, x, rows, v)
    _check(lambda t, m: put_mask(t, m), x, mask)
    _check(lambda t, i, s: t.clone().scatter_(0, i, s), x, index, _values((3, 6), dtype, seed=3))
    _check(lambda t, i: t.clone().scatter_(0, i, 1), x, index)
    _check(lambda t, r: t.clone().index_fill_(1, r, 0), x, rows)
    _check(lambda t, r: t.clone().index_fill_(0, r, torch.tensor(1).to(t.device)), x, rows)


def test_accumulating_puts_add_repeated_indices_in_order():
    x = _values((5, 6), torch.float32)
    src = _values((4, 6), torch.float32, seed=1)
    rows = torch.tensor([1, 1, 4, 1])
    _check(lambda t, r, s: t.index_put((r,), s, accumulate=True), x, rows, src, exact=False)
    _check(lambda t, r, s: t.index_add(0, r, s, alpha=2), x, rows, src, exact=False)
    index = torch.tensor([[0, 1, 2, 0, 1, 2]] * 4)
    _check(lambda t, i, s: t.scatter_add(0, i, s), x, index, src, exact=False)
    _check(lambda t, i, s: t.scatter(0, i, s, reduce="multiply"), x, index, src, exact=False)
    ints = _values((5, 6), torch.int64)
    _check(lambda t, r, s: t.index_put((r,), s, accumulate=True), ints, rows, _values((4, 6), torch.int64, seed=1))


def test_out_of_range_indices_stop_the_kernel_and_the_device_stays_usable():
    x = torch.arange(5.0, device="openreg")
    for bad in (
        lambda: x[torch.tensor([7], device="openreg")].cpu(),
        lambda: x[torch.tensor([-6], device="openreg")].cpu(),
        lambda: x.index_select(0, torch.tensor([5], device="openreg")).cpu(),
        lambda: torch.gather(x, 0, torch.tensor([-1], device="openreg")).cpu(),
        lambda: x.clone().index_add_(0, torch.tensor([9], device="openreg"), torch.ones(1, device="openreg")).cpu(),
    ):
        with pytest.raises(RuntimeError, match="index is out of range"):
            bad()
    assert (x + 1).cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_bad_arguments_raise_like_cpu():
    x = _values((4, 5), torch.float32)
    with pytest.raises(IndexError):
        x.to("openreg")[torch.tensor([0.5], device="openreg")]
    with pytest.raises(RuntimeError, match="index_select"):
        x.to("openreg").index_select(0, torch.tensor([0.0], device="openreg"))
    with pytest.raises(IndexError):
        x.to("openreg").index_select(0, torch.zeros(2, 2, dtype=torch.long, device="openreg"))
    with pytest.raises(RuntimeError):
        torch.cat([x.to("openreg"), torch.ones(3, 4, device="openreg")], 1)
    with pytest.raises(RuntimeError, match="dim"):
        x.to("openreg").flip(0, 0)
    with pytest.raises(RuntimeError, match="masked_fill_ only supports boolean masks"):
        x.to("openreg").masked_fill_(torch.ones(4, 5, dtype=torch.int64, device="openreg"), 1.0)


def test_factories_match_cpu():
    for kwargs in ({}, {"dtype": torch.float64}, {"dtype": torch.int32}, {"dtype": torch.float16}):
        _same(torch.arange(0, 10, 3, device="openreg", **kwargs), torch.arange(0, 10, 3, **kwargs))
        _same(torch.arange(-1.5, 2.5, 0.25, device="openreg", **kwargs), torch.arange(-1.5, 2.5, 0.25, **kwargs),
              exact=False)
        _same(torch.linspace(-2, 7.5, 11, device="openreg", **kwargs), torch.linspace(-2, 7.5, 11, **kwargs),
              exact=False)
        _same(torch.eye(3, 5, device="openreg", **kwargs), torch.eye(3, 5, **kwargs))
    _same(torch.linspace(4.3, -3, 50, dtype=torch.int64, device="openreg"), torch.linspace(4.3, -3, 50,
                                                                                         dtype=torch.int64))
    _same(torch.arange(0, device="openreg"), torch.arange(0))


def test_long_factories_match_cpu_across_chunks_and_workers():
    # long enough for every worker and many chunks of a worker, with a ragged end
    for kwargs in ({}, {"dtype": torch.float64}, {"dtype": torch.int64}, {"dtype": torch.int16}):
        _same(torch.arange(-7, 300_001, device="openreg", **kwargs), torch.arange(-7, 300_001, **kwargs))
    _same(torch.arange(-7, 65_000, dtype=torch.float16, device="openreg"), torch.arange(-7, 65_000, dtype=torch.float16),
          exact=False)
    _same(torch.arange(-3.5, 70_000, 0.25, device="openreg"), torch.arange(-3.5, 70_000, 0.25), exact=False)
    for dtype in (torch.float32, torch.float64):
        _same(torch.linspace(-1, 2, 200_001, dtype=dtype, device="openreg"), torch.linspace(-1, 2, 200_001, dtype=dtype),
              exact=False)
    big = 2**62
    _same(torch.arange(big, big + 3 * 100_000, 3, device="openreg"), torch.arange(big, big + 3 * 100_000, 3))
    out = torch.empty(200_000, dtype=torch.int64, device="openreg")[::2]  # into a strided view
    torch.arange(100_000, out=out)
    _same(out, torch.arange(100_000))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonzero_matches_cpu_for_signed_zeros_nans_and_views(dtype):
    x = _values((4, 7, 33), dtype, seed=41)
    if dtype.is_floating_point:
        x[0, :, ::3] = -0.0  # a zero
        x[1, :, ::4] = float("nan")  # not a zero
        x[2, 1] = 0.0
    _check(lambda t: t.nonzero(), x)
    _check(lambda t: t.transpose(0, 2).nonzero(), x)  # strided rows
    _check(lambda t: t[:, ::2, 1:].nonzero(as_tuple=True), x)
    _check(lambda t: t[1, 2, 3].nonzero(), x)  # 0-dim
    _check(lambda t: t.flatten().nonzero(), x)
    _check(lambda t: t.flatten()[t.flatten() != 0], x)  # a boolean mask


@pytest.mark.parametrize("density", [0.0, 0.02, 0.5, 0.97, 1.0])
def test_nonzero_of_long_rows_matches_cpu(density):
    """Rows long enough for nonzero's blocks of 64 without a branch per element, with the last
    rows (fewer than 64 left to write) one at a time, in 1 to 3 dimensions and strided."""
    g = torch.Generator().manual_seed(int(density * 100))
    for shape in [(4099,), (37, 300), (3, 5, 129), (2, 64)]:
        x = torch.rand(shape, generator=g) < density
        _check(lambda t: t.nonzero(), x)
        _check(lambda t: (t.float() * 2).nonzero(as_tuple=True), x)
        _check(lambda t: t.transpose(0, -1).nonzero(), x)
        _check(lambda t: t.flatten()[::3].nonzero(), x)


def test_integer_index_add_and_bincount_wrap_like_cpu():
    """int64 index_add_ (bincount's counts) adds row by row in int64, wrapping, with alpha, over
    heavily repeated indices, contiguous rows and single elements alike."""
    g = torch.Generator().manual_seed(12)
    idx = torch.randint(0, 37, (5000,), generator=g)
    values = torch.randint(-2**62, 2**62, (5000,), generator=g)
    _check(lambda i, v: torch.zeros(37, dtype=torch.int64, device=i.device).index_add_(0, i, v), idx, values)
    _check(lambda i, v: torch.ones(37, dtype=torch.int64, device=i.device).index_add_(0, i, v, alpha=-3), idx, values)
    rows = torch.randint(-50, 50, (300, 70), generator=g)
    _check(lambda i, r: torch.zeros(37, 70, dtype=torch.int64, device=i.device).index_add_(0, i[:300], r), idx, rows)
    _check(lambda i: torch.bincount(i), idx)
    _check(lambda i: torch.bincount(i, minlength=40), idx)


def test_ops_built_on_these_stay_on_the_device():
    x = _values((6, 4), torch.float32).to("openreg")
    torch.openreg.reset_op_counts()
    emb = torch.nn.functional.embedding(torch.tensor([[0, 5], [2, 2]], device="openreg"), x)
    top = x[x.sum(1) > 0]
    both = torch.where(x > 0, x, torch.zeros_like(x)).repeat(2, 1)
    _same(emb, torch.nn.functional.embedding(torch.tensor([[0, 5], [2, 2]]), x.cpu()))
    _same(top, x.cpu()[x.cpu().sum(1) > 0])
    _same(both, torch.where(x.cpu() > 0, x.cpu(), 0).repeat(2, 1))
    counts = torch.openreg.op_counts()
    assert all(c.get("fallback", 0) == 0 for c in counts.values()), counts


def test_masked_scatter_on_the_device():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(4, 5, generator=g)
    source = torch.arange(40.0).view(8, 5)
    masks = [torch.rand(4, 5, generator=g) > 0.5, torch.tensor([True, False, True, False, True]),  # broadcast
             torch.zeros(4, 5, dtype=torch.bool), torch.ones(4, 5, dtype=torch.bool)]
    for mask in masks:
        expected = x.clone().masked_scatter_(mask, source)
        with torch.openreg.fallback_policy("error"):
            actual = x.to("openreg").masked_scatter_(mask.to("openreg"), source.to("openreg"))
            functional = torch.masked_scatter(x.to("openreg"), mask.to("openreg"), source.to("openreg"))
        torch.testing.assert_close(actual.cpu(), expected)
        torch.testing.assert_close(functional.cpu(), expected)
    d = torch.zeros(2, 3, device="openreg")
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        d.masked_scatter_(torch.ones(2, 3, dtype=torch.long, device="openreg"), torch.ones(6, device="openreg"))
    with pytest.raises(RuntimeError, match="source < number of ones"):
        d.masked_scatter_(torch.ones(2, 3, dtype=torch.bool, device="openreg"), torch.ones(5, device="openreg"))
    with pytest.raises(RuntimeError, match="same dtypes"):
        d.masked_scatter_(torch.ones(2, 3, dtype=torch.bool, device="openreg"),
                          torch.ones(6, dtype=torch.float64, device="openreg"))
    assert torch.equal(d.cpu(), torch.zeros(2, 3))


@pytest.mark.parametrize("dtype", (torch.float32, torch.int64, torch.bool), ids=str)
def test_unique_runs_on_the_device_and_matches_cpu(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 6, (4, 9), generator=g).to(dtype)
    if dtype.is_floating_point:
        x[1, 2] = x[3, 3] = float("nan")  # each NaN is its own value, as on CPU
    for kw in ({}, {"return_inverse": True}, {"return_counts": True}, {"return_inverse": True, "return_counts": True}):
        with torch.openreg.fallback_policy("error"):
            actual = torch.unique(x.to("openreg"), **kw)
            consecutive = torch.unique_consecutive(x.reshape(-1).to("openreg"), **kw)
        for a, e in ((actual, torch.unique(x, **kw)), (consecutive, torch.unique_consecutive(x.reshape(-1), **kw))):
            for got, want in zip(a if isinstance(a, tuple) else (a,), e if isinstance(e, tuple) else (e,)):
                torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    assert torch.unique(torch.empty(0, device="openreg")).numel() == 0


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.int64, torch.int32, torch.float16), ids=str)
def test_gathers_through_one_int64_index_match_cpu(dtype):
    # 4- and 8-byte elements take the gather's own row loops (one index per element, or one per
    # row for index_select and embedding); others, and int32 indices, the general one.
    g = torch.Generator().manual_seed(5)
    table = (torch.randn(50, 33, generator=g) * 100).to(dtype)
    flat = table.flatten()
    idx = torch.randint(-50, 50, (40,), generator=g)
    cases = [
        (lambda t, i: t.flatten()[i * 33 // 2], (flat, idx)),  # x[idx], negative indices wrap
        (lambda t, i: t.index_select(0, i % 50), (table, idx)),  # rows
        (lambda t, i: t.index_select(1, i % 33), (table, idx)),  # columns: strided rows
        (lambda t, i: t.t()[:, i % 50], (table, idx)),  # a transposed source
        (lambda t, i: torch.gather(t, 1, (i % 33).reshape(8, 5).repeat(7, 1)[:50]), (table, idx)),
        (lambda t, i: t[i % 50, 3:20:2], (table, idx)),
        (lambda t, i: t[i.to(torch.int32) % 50], (table, idx)),
    ]
    if dtype.is_floating_point:
        cases.append((lambda t, i: torch.nn.functional.embedding(i % 50, t), (table, idx)))
    for fn, (t, i) in cases:
        with torch.openreg.fallback_policy("error"):
            actual = fn(t.to("openreg"), i.to("openreg")).cpu()
        assert torch.equal(actual, fn(t, i))


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16), ids=str)
def test_scatters_through_one_int64_index_match_cpu(dtype):
    # float32/float64 adds and 4- and 8-byte moves take the scatter's own row loops (one index
    # per element, or one per row for index_add_ and embedding's backward); the rest the
    # general one. Repeated indices add in order; without repeats a put's result is defined.
    g = torch.Generator().manual_seed(6)
    scale = 100 if dtype != torch.bfloat16 else 1  # bfloat16: small integers, whose sums are exact
    table = (torch.randn(50, 33, generator=g) * scale).round().to(dtype)
    rows = torch.randint(-50, 50, (70,), generator=g)  # repeats, negative ones wrap
    src = (torch.randn(70, 33, generator=g) * scale).to(dtype)
    src = src.round() if dtype == torch.bfloat16 else src
    distinct = torch.randperm(50, generator=g)[:30]
    cols = torch.randint(0, 33, (50, 33), generator=g)
    cases = [  # (table, source, rows, distinct rows, columns)
        lambda t, s, r, d, c: t.index_add(0, r % 50, s),  # a row per index, contiguous
        lambda t, s, r, d, c: t.index_add(0, r % 50, s, alpha=3),
        lambda t, s, r, d, c: t.index_add(1, r[:33] % 33, s[:50, :33].t().contiguous().t()),  # strided rows
        lambda t, s, r, d, c: t.index_put((r,), s, accumulate=True),
        lambda t, s, r, d, c: t.flatten().index_put((r * 23,), s[:, 0], accumulate=True).view(50, 33),  # an index each
        lambda t, s, r, d, c: t.scatter_add(1, c, s[:50]),
        lambda t, s, r, d, c: t.index_put((d,), s[:30]),
        lambda t, s, r, d, c: (lambda i: t.t().index_put((i,), s.t()[: i.numel(), :50]))(d[d < 33]),  # strided
        lambda t, s, r, d, c: t.flatten().index_put((d * 33 + 5,), s[:30, 0]).view(50, 33),
    ]
    for k, fn in enumerate(cases):
        args = (table, src, rows, distinct, cols)
        with torch.openreg.fallback_policy("error"):
            actual = fn(*(a.to("openreg") for a in args)).cpu()
        expected = fn(*args)
        if dtype.is_floating_point and k <= 5:
            # sums: with alpha, the device rounds a product and a sum once (in float64);
            # bfloat16 rounds after each add
            torch.testing.assert_close(actual, expected)
        else:
            assert torch.equal(actual, expected), k
    # embedding's backward adds each index's gradient row into its weight row
    if dtype.is_floating_point:
        w = table.to("openreg").requires_grad_()
        torch.nn.functional.embedding((rows % 50).view(7, 10).to("openreg"), w).sum().backward()
        c = table.clone().requires_grad_()
        torch.nn.functional.embedding((rows % 50).view(7, 10), c).sum().backward()
        assert torch.equal(w.grad.cpu(), c.grad)
    with pytest.raises(RuntimeError, match="index is out of range"):
        table.to("openreg").index_add_(0, torch.tensor([0, 50], device="openreg"), src[:2].to("openreg")).cpu()
    d_rows = (rows % 50).to("openreg")
    assert torch.equal(table.to("openreg").index_add(0, d_rows, src.to("openreg")).cpu(), table.index_add(0, rows % 50, src))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_take_put_and_index_copy_match_cpu(dtype):
    x = _values((4, 5), dtype, seed=21)
    index = torch.tensor([[0, -1, 7], [19, 3, -20]])
    _same(torch.take(*_dev(x, index)), torch.take(x, index))
    _same(torch.take(*_dev(x.t(), index)), torch.take(x.t(), index))  # strided self: flattened logically
    source = _values((6,), dtype, seed=22)
    put_index = torch.tensor([0, 4, -1, 4, 7, 12])
    for accumulate in (False, True) if dtype != torch.bool else (False,):
        if accumulate and dtype in (torch.float16, torch.bfloat16):
            continue
        expected = x.t().clone().put_(put_index, source, accumulate=accumulate)
        actual = x.t().clone().to("openreg").put_(*_dev(put_index, source), accumulate=accumulate)
        _same(actual, expected)
    copy_index = torch.tensor([3, 0, 2])
    src = _values((4, 3), dtype, seed=23)
    _same(x.to("openreg").index_copy(1, *_dev(copy_index, src)), x.index_copy(1, copy_index, src))
    row = _values((1, 5), dtype, seed=27)
    _same(x.to("openreg").index_copy_(0, *_dev(torch.tensor([2]), row)), x.clone().index_copy_(0, torch.tensor([2]), row))


def test_take_and_put_errors_match_cpu_and_the_device_stays_usable():
    x = torch.arange(6.0)
    d = x.to("openreg")
    with pytest.raises(RuntimeError):  # a device-side index check: reported at the next sync
        torch.take(d, torch.tensor([6], device="openreg")).cpu()
    assert torch.equal(torch.take(d, torch.tensor([5], device="openreg")).cpu(), torch.tensor([5.0]))
    with pytest.raises(IndexError):
        d.put_(torch.tensor([0, 1], device="openreg"), torch.ones(3, device="openreg"))
    with pytest.raises(RuntimeError):
        d.put_(torch.tensor([0], device="openreg"), torch.ones(1, dtype=torch.float64, device="openreg"))
    with pytest.raises(RuntimeError):
        torch.take(d, torch.tensor([0], dtype=torch.int32, device="openreg"))


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
def test_half_precision_scatters_add_as_cpu(dtype):
    """CPU's scatter kernels add and multiply float16 and bfloat16 elements in float32 and round
    once (scatter_add, scatter with reduce, scatter_reduce's sum, prod and mean, and index_add where
    it runs as scatter_add: along the first or last dimension, alpha 1, an int64 index); index_add
    otherwise, accumulating index_put_ and embedding's backward round after every addition. With
    sums that are not exact in the element's type and many repeats, each form gives CPU's bits."""
    g = torch.Generator().manual_seed(12)
    x = (torch.randn(40, 8, generator=g) * 2).to(dtype)
    src = (torch.randn(300, 8, generator=g) * 1.1).to(dtype)
    index = torch.randint(0, 40, (300, 8), generator=g)
    rows = torch.randint(0, 40, (300,), generator=g)
    columns = torch.randint(0, 8, (40, 300), generator=g)
    wide = (torch.randn(40, 300, generator=g) * 1.1).to(dtype)
    cases = {
        "scatter_add": lambda x, s, i, r, c, w: x.scatter_add(0, i, s),
        "scatter_add_last": lambda x, s, i, r, c, w: x.scatter_add(1, c, w),
        "scatter_add_reduce": lambda x, s, i, r, c, w: x.scatter(0, i, s, reduce="add"),
        "scatter_multiply": lambda x, s, i, r, c, w: x.scatter(0, i, s, reduce="multiply"),
        "index_add": lambda x, s, i, r, c, w: x.index_add(0, r, s),
        "index_add_last": lambda x, s, i, r, c, w: x.index_add(1, r[:300] % 8, w),
        "index_add_alpha": lambda x, s, i, r, c, w: x.index_add(0, r, s, alpha=2),
        "index_add_int32": lambda x, s, i, r, c, w: x.index_add(0, r.int(), s),
        "index_add_1d": lambda x, s, i, r, c, w: x[:, 0].index_add(0, r, s[:, 0]),
        "index_put_accumulate": lambda x, s, i, r, c, w: x.index_put((r,), s, accumulate=True),
    }
    for reduce in ("sum", "prod", "mean"):
        for include_self in (True, False):
            cases[f"scatter_reduce_{reduce}_{include_self}"] = (
                lambda x, s, i, r, c, w, reduce=reduce, include_self=include_self:
                x.scatter_reduce(0, i, s, reduce, include_self=include_self))
    args = (x, src, index, rows, columns, wide)
    for name, fn in cases.items():
        with torch.openreg.fallback_policy("error"):
            actual = fn(*_dev(*args)).cpu()
        assert torch.equal(actual, fn(*args)), name
    w = x.to("openreg").requires_grad_()
    torch.nn.functional.embedding(rows.to("openreg"), w).backward(src.to("openreg"))
    c = x.clone().requires_grad_()
    torch.nn.functional.embedding(rows, c).backward(src)
    assert torch.equal(w.grad.cpu(), c.grad)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32], ids=str)
def test_scatter_reduce_and_index_reduce_match_cpu(reduce, include_self, dtype):
    x = _values((5, 4), dtype, seed=24)
    src = _values((6, 4), dtype, seed=25)
    index = torch.tensor([[0, 1, 4, 4], [2, 2, 2, 0], [1, 0, 4, 3], [0, 0, 0, 0], [3, 1, 2, 4], [4, 4, 1, 1]])
    expected = x.scatter_reduce(0, index, src, reduce, include_self=include_self)
    actual = x.to("openreg").scatter_reduce(0, *_dev(index, src), reduce, include_self=include_self)
    _same(actual, expected, exact=not dtype.is_floating_point or reduce in ("amax", "amin"))
    if reduce != "sum":
        rows = torch.tensor([4, 0, 4, 1, 4, 2])
        expected = x.index_reduce(0, rows, src, reduce, include_self=include_self)
        actual = x.to("openreg").index_reduce(0, *_dev(rows, src), reduce, include_self=include_self)
        _same(actual, expected, exact=not dtype.is_floating_point or reduce in ("amax", "amin"))
    if dtype.is_floating_point and reduce in ("amax", "amin"):
        src_nan = src.clone()
        src_nan[2, 1] = float("nan")
        expected = x.scatter_reduce(0, index, src_nan, reduce, include_self=include_self)
        _same(x.to("openreg").scatter_reduce(0, *_dev(index, src_nan), reduce, include_self=include_self), expected)


def test_repeat_interleave_with_tensor_repeats_matches_cpu():
    x = _values((4, 3), torch.float32, seed=26)
    repeats = torch.tensor([1, 0, 3, 2])
    _same(torch.repeat_interleave(*_dev(repeats)), torch.repeat_interleave(repeats))
    _same(torch.repeat_interleave(*_dev(repeats.int())), torch.repeat_interleave(repeats.int()))
    _same(x.to("openreg").repeat_interleave(*_dev(repeats), dim=0), x.repeat_interleave(repeats, dim=0))
    _same(x.to("openreg").repeat_interleave(*_dev(torch.tensor([2, 0, 1])), dim=1, output_size=3),
          x.repeat_interleave(torch.tensor([2, 0, 1]), dim=1, output_size=3))
    _same(torch.repeat_interleave(torch.tensor([0, 0], device="openreg")), torch.repeat_interleave(torch.tensor([0, 0])))
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device="openreg"))
    with pytest.raises(RuntimeError, match="1D"):
        torch.repeat_interleave(torch.ones(2, 2, dtype=torch.long, device="openreg"))


def test_searchsorted_and_bucketize_match_cpu():
    sorted_1d = torch.tensor([-1.0, 0.0, 0.0, 2.5, 3.0, float("nan")])
    values = torch.tensor([[-2.0, 0.0, 2.5], [3.0, 10.0, float("nan")]])
    for right in (False, True):
        for out_int32 in (False, True):
            _same(torch.searchsorted(*_dev(sorted_1d, values), right=right, out_int32=out_int32),
                  torch.searchsorted(sorted_1d, values, right=right, out_int32=out_int32))
    _same(torch.searchsorted(*_dev(sorted_1d, values), side="right"), torch.searchsorted(sorted_1d, values, side="right"))
    _same(torch.searchsorted(_dev(sorted_1d)[0], 0.0), torch.searchsorted(sorted_1d, 0.0))
    rows = torch.sort(torch.randn(3, 7, generator=torch.Generator().manual_seed(3)), dim=1).values
    queries = torch.randn(3, 4, generator=torch.Generator().manual_seed(4))
    _same(torch.searchsorted(*_dev(rows, queries)), torch.searchsorted(rows, queries))
    unsorted = torch.tensor([3, 1, 2, 0, 5])
    sorter = torch.argsort(unsorted)
    _same(torch.searchsorted(*_dev(unsorted, torch.tensor([2, 4, 9])), sorter=_dev(sorter)[0]),
          torch.searchsorted(unsorted, torch.tensor([2, 4, 9]), sorter=sorter))
    # promotion to the common dtype, as on CPU
    _same(torch.searchsorted(*_dev(torch.tensor([1, 2, 3]), torch.tensor([1.5, 2.0]))),
          torch.searchsorted(torch.tensor([1, 2, 3]), torch.tensor([1.5, 2.0])))
    boundaries = torch.tensor([1, 5, 9])
    x = torch.arange(12).view(3, 4)
    for right in (False, True):
        _same(torch.bucketize(*_dev(x, boundaries), right=right), torch.bucketize(x, boundaries, right=right))
    with pytest.raises(RuntimeError, match="side"):
        torch.searchsorted(*_dev(sorted_1d, values), side="middle")
    with pytest.raises(RuntimeError, match="boundaries"):
        torch.searchsorted(*_dev(rows, torch.randn(2, 4)))
    with pytest.raises(RuntimeError, match="boundaries"):
        torch.bucketize(*_dev(x, rows))


def test_bincount_and_histc_match_cpu():
    x = torch.tensor([0, 3, 3, 1, 7, 3])
    w = torch.tensor([0.5, 1.0, 2.0, -1.0, 3.0, 0.25])
    _same(torch.bincount(*_dev(x)), torch.bincount(x))
    _same(torch.bincount(*_dev(x), minlength=12), torch.bincount(x, minlength=12))
    _same(torch.bincount(*_dev(x, w)), torch.bincount(x, w))
    _same(torch.bincount(*_dev(x, w.double())), torch.bincount(x, w.double()))
    _same(torch.bincount(*_dev(x, w.half())), torch.bincount(x, w.half()))
    _same(torch.bincount(*_dev(torch.tensor([], dtype=torch.long)), minlength=3),
          torch.bincount(torch.tensor([], dtype=torch.long), minlength=3))
    for bad in (torch.tensor([1, -1]), torch.ones(2, 2, dtype=torch.long)):
        with pytest.raises(RuntimeError):
            torch.bincount(*_dev(bad))
    with pytest.raises(RuntimeError):
        torch.bincount(*_dev(torch.tensor([1.0])))
    data = torch.randn(1000, generator=torch.Generator().manual_seed(5)).mul(3)
    for dtype in (torch.float32, torch.float64):
        v = data.to(dtype)
        _same(torch.histc(*_dev(v)), torch.histc(v))
        _same(torch.histc(*_dev(v), bins=7, min=-2, max=2), torch.histc(v, bins=7, min=-2, max=2))
    edge = torch.tensor([0.0, 5e-6, 1e-5, 1.2e-5, float("nan")], dtype=torch.float64)
    _same(torch.histc(*_dev(edge), bins=1000, min=0.0, max=1e-5), torch.histc(edge, bins=1000, min=0.0, max=1e-5))
    _same(torch.histc(*_dev(torch.full((4,), 2.0))), torch.histc(torch.full((4,), 2.0)))
    with pytest.raises(RuntimeError):
        torch.histc(*_dev(torch.arange(4)))
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(*_dev(data), min=2, max=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32], ids=str)
def test_logspace_matches_cpu(dtype):
    for start, end, steps, base in ((0, 3, 7, 10.0), (-2, 2, 9, 2.0), (1, 1, 1, 10.0), (0, 1, 0, 10.0), (4, 0, 5, 3.0)):
        expected = torch.logspace(start, end, steps, base, dtype=dtype)
        actual = torch.logspace(start, end, steps, base, dtype=dtype, device="openreg")
        _same(actual, expected, exact=not dtype.is_floating_point)


def test_isin_matches_cpu_in_every_form():
    elements = torch.tensor([[1, 5, 2], [7, 2, 9]])
    test = torch.tensor([2.0, 9.0, 3.5, 2.0])
    for invert in (False, True):
        _same(torch.isin(*_dev(elements, test), invert=invert), torch.isin(elements, test, invert=invert))
        _same(torch.isin(*_dev(elements), 2, invert=invert), torch.isin(elements, 2, invert=invert))
        _same(torch.isin(7, *_dev(elements), invert=invert), torch.isin(7, elements, invert=invert))
    nan = torch.tensor([float("nan"), 1.0])
    _same(torch.isin(*_dev(nan, nan)), torch.isin(nan, nan))
    _same(torch.isin(*_dev(elements, torch.tensor([], dtype=torch.long))), torch.isin(elements, torch.tensor([], dtype=torch.long)))


@pytest.mark.parametrize("offset", [-3, -1, 0, 2, 9])
def test_triangle_indices_match_cpu(offset):
    for rows, cols in ((4, 5), (5, 3), (0, 3), (1, 1)):
        for fn in (torch.tril_indices, torch.triu_indices):
            for dtype in (torch.long, torch.int32):
                expected = fn(rows, cols, offset, dtype=dtype)
                actual = fn(rows, cols, offset, dtype=dtype, device="openreg")
                _same(actual, expected)
                assert actual.is_contiguous()
    with pytest.raises(RuntimeError, match="row must be non-negative"):
        torch.tril_indices(-1, 3, device="openreg")


def test_shuffles_and_narrow_copy_match_cpu():
    x = _values((2, 8, 4, 6), torch.float32, seed=30)
    _same(torch.nn.functional.pixel_shuffle(*_dev(x), 2), torch.nn.functional.pixel_shuffle(x, 2))
    _same(torch.nn.functional.pixel_unshuffle(*_dev(x), 2), torch.nn.functional.pixel_unshuffle(x, 2))
    _same(torch.nn.functional.channel_shuffle(*_dev(x), 4), torch.nn.functional.channel_shuffle(x, 4))
    _same(x.to("openreg").narrow_copy(3, 1, 4), x.narrow_copy(3, 1, 4))
    with pytest.raises(RuntimeError, match="divisible"):
        torch.nn.functional.channel_shuffle(*_dev(x), 3)


def test_triangles_of_every_layout_and_dtype_match_cpu():
    """tril/triu a row at a time: contiguous rows as block copies and fills, strided rows element by
    element, in place or not, diagonals past either edge, batches."""
    g = torch.Generator().manual_seed(0)
    for shape in [(5, 7), (7, 5), (3, 4, 6), (2, 3, 33, 17), (1, 1), (40, 40)]:
        for dtype in (torch.float32, torch.bool, torch.float16, torch.int64, torch.uint8):
            x = (torch.randn(shape, generator=g) * 5).to(dtype)
            for k in (-2**63, -50, -3, -1, 0, 1, 2, 50, 2**63 - 1):
                for fn in (lambda t: t.tril(k), lambda t: t.triu(k), lambda t: t.transpose(-1, -2).tril(k),
                           lambda t: t.clone().tril_(k), lambda t: t.transpose(-1, -2).clone().triu_(k)):
                    assert torch.equal(fn(x.to("openreg")).cpu(), fn(x)), (shape, dtype, k)


def test_flips_of_every_element_size_match_cpu():
    """flip's rows that walk their source backwards: 16 bytes at a time with the lanes reversed, and
    the ragged ends, for 1-, 2-, 4- and 8-byte elements."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16, torch.float64, torch.int64, torch.bool, torch.uint8, torch.int32):
        for shape in [(1,), (5,), (17,), (33,), (3, 40), (2, 3, 37)]:
            x = (torch.randn(shape, generator=g) * 100).to(dtype)
            for dims in [(-1,), (0,), tuple(range(len(shape)))]:
                assert torch.equal(x.to("openreg").flip(dims).cpu(), x.flip(dims)), (dtype, shape, dims)
