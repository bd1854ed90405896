"""Reductions and scans computed by the device engine's `reduce` kernel.

Every test runs under the ``error`` fallback policy, so a reduction that silently took the
CPU fallback fails. CPU is the oracle (exact for integer, bool and index results; within
``torch.testing``'s tolerances for floats, whose device sums accumulate in float64).
"""

import pytest
import torch

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]


@pytest.fixture(autouse=True)
def _no_fallback():
    with torch.openreg.fallback_policy("error"):
        yield


def _values(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.3
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 3).to(dtype)
    lo, hi = (0, 6) if dtype == torch.uint8 else (-5, 6)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def _check(fn, x, exact=False, **tol):
    """fn on CPU and on the device; results (tensors or tuples of them) must agree, errors too."""
    try:
        expected = fn(x)
    except Exception as error:  # noqa: BLE001 - whatever CPU raises, the device must raise
        with pytest.raises(type(error)):
            fn(x.to("openreg"))
        return
    actual = fn(x.to("openreg"))
    pairs = zip(actual, expected) if isinstance(expected, tuple) else [(actual, expected)]
    for a, e in pairs:
        assert a.device.type == "openreg"
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, e.dtype, a.shape, e.shape)
        if exact or not e.dtype.is_floating_point:
            torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(a.cpu(), e, equal_nan=True, **tol)


REDUCTIONS = {
    "sum": lambda x: x.sum(),
    "sum_dim": lambda x: x.sum(1),
    "sum_dims_keepdim": lambda x: x.sum((0, 2), keepdim=True),
    "prod_dim": lambda x: x[:, :4].prod(1),
    "amax": lambda x: x.amax((1, 2)),
    "amin": lambda x: x.amin(0),
    "max": lambda x: x.max(),
    "min": lambda x: x.min(),
    "max_dim": lambda x: x.max(2),
    "min_dim": lambda x: x.min(0, keepdim=True),
    "argmax": lambda x: x.argmax(),
    "argmax_dim": lambda x: x.argmax(1),
    "argmin_dim": lambda x: x.argmin(-1, keepdim=True),
    "aminmax": lambda x: torch.aminmax(x, dim=1),
    "aminmax_all": lambda x: torch.aminmax(x),
    "all": lambda x: x.all(),
    "all_dim": lambda x: x.all(1),
    "any_dims": lambda x: x.any((0, 2)),
    "count_nonzero": lambda x: torch.count_nonzero(x, 2),
    "cumsum": lambda x: x.cumsum(1),
    "cumsum_last": lambda x: x.cumsum(-1),
    "cumprod": lambda x: x[:, :4].cumprod(1),
}


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("op", REDUCTIONS, ids=str)
def test_reductions_match_cpu_for_every_dtype(op, dtype):
    low = dtype in (torch.float16, torch.bfloat16)
    _check(REDUCTIONS[op], _values((6, 7, 5), dtype), rtol=2e-2 if low else None, atol=2e-2 if low else None)


FLOAT_REDUCTIONS = {
    "mean": lambda x: x.mean(),
    "mean_dims": lambda x: x.mean((0, 2)),
    "nansum": lambda x: x.nansum(1),
    "var": lambda x: x.var(1),
    "var_correction0": lambda x: x.var((0, 1), correction=0, keepdim=True),
    "std": lambda x: x.std(),
    "var_mean": lambda x: torch.var_mean(x, 2),
    "std_mean": lambda x: torch.std_mean(x, (0, 1), correction=2),
    "norm2": lambda x: torch.linalg.vector_norm(x, dim=1),
    "norm1": lambda x: torch.linalg.vector_norm(x, 1, dim=(0, 2)),
    "norm0": lambda x: torch.linalg.vector_norm(x, 0),
    "norm_inf": lambda x: torch.linalg.vector_norm(x, float("inf"), dim=2),
    "norm_ninf": lambda x: torch.linalg.vector_norm(x, float("-inf"), dim=2),
    "norm_3": lambda x: torch.linalg.vector_norm(x, 3, dim=1),
    "norm_half": lambda x: torch.linalg.vector_norm(x, 0.5),
    "tensor_norm": lambda x: x.norm(),
    "logsumexp": lambda x: torch.logsumexp(x, 1),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", FLOAT_REDUCTIONS, ids=str)
def test_float_reductions_match_cpu(op, dtype):
    low = dtype in (torch.float16, torch.bfloat16)
    _check(FLOAT_REDUCTIONS[op], _values((6, 7, 5), dtype), rtol=2e-2 if low else None, atol=2e-2 if low else None)


@pytest.mark.parametrize("op", ["mean", "var", "norm2"])
def test_float_only_reductions_refuse_integers_like_cpu(op):
    _check(FLOAT_REDUCTIONS[op], _values((4, 5, 3), torch.int32))


def test_dtype_argument_and_promotion():
    x = _values((5, 300), torch.int32)
    _check(lambda t: t.sum(1), x)  # int32 sums to int64
    _check(lambda t: t.sum(1, dtype=torch.int8), x)  # wraps like CPU
    _check(lambda t: t.sum(1, dtype=torch.float64), x)
    _check(lambda t: t.cumsum(1, dtype=torch.float32), x)
    h = _values((5, 300), torch.float16)
    _check(lambda t: t.sum(1, dtype=torch.float32), h)
    _check(lambda t: t.mean(0, dtype=torch.float64), h)
    _check(lambda t: (t > 0).sum(), h)


def test_integer_sums_and_products_wrap_like_cpu():
    x = torch.full((4, 70), 2**62, dtype=torch.int64)
    _check(lambda t: t.sum(1), x)
    _check(lambda t: t.prod(1), torch.full((3, 70), 3, dtype=torch.int64))
    _check(lambda t: t.cumprod(1), torch.full((2, 50), 5, dtype=torch.int32))


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64], ids=str)
def test_integer_column_sums_match_cpu(dtype):
    # Integer sums down columns (a mask's count per column) run a row at a time in int64, wrapping
    # as CPU's do; several reduced dimensions come from an odometer.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(37, 5, 70, generator=g)
    t = x > 0 if dtype == torch.bool else (x * (1e18 if dtype == torch.int64 else 50)).to(dtype)
    for dims in (0, (0, 1), 1):
        assert torch.equal(t.to("openreg").sum(dims).cpu(), t.sum(dims)), dims
    assert torch.equal(torch.count_nonzero(t.to("openreg"), 0).cpu(), torch.count_nonzero(t, 0))


@pytest.mark.parametrize("rows", (1, 5, 16, 300, 600))
def test_variance_down_columns_is_the_line_fold_bit_for_bit(rows):
    # var/std/var_mean along dim 0 of a row-major float32 matrix run across 32 lines at a time
    # with the line fold's chunks (sum_F's lanes, squared deviations in order, Chan's merge): equal
    # to the same values read as strided lines (every other column of a wider matrix), not only
    # close to CPU's.
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 45, generator=g) * 5 + 3
    wide = torch.zeros(rows, 90)
    wide[:, ::2] = x
    d, strided = x.to("openreg"), wide.to("openreg")[:, ::2]
    for fn in (lambda t: t.var(0), lambda t: t.std(0, correction=0), lambda t: torch.var_mean(t, 0)[0],
               lambda t: torch.var_mean(t, 0)[1]):
        a, b = fn(d).cpu(), fn(strided).cpu()
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
        torch.testing.assert_close(a, fn(x), equal_nan=True, rtol=1e-5, atol=1e-5)


def test_nan_propagates_and_arg_ops_pick_the_first_extreme():
    x = torch.tensor([[1.0, float("nan"), 3.0, float("nan")], [2.0, 5.0, 5.0, -1.0], [-float("inf")] * 4])
    for fn in (
        lambda t: t.amax(1),
        lambda t: t.amin(1),
        lambda t: t.max(1),
        lambda t: t.min(1),
        lambda t: t.argmax(1),
        lambda t: t.argmin(1),
        lambda t: torch.aminmax(t, dim=1),
        lambda t: t.sum(1),
        lambda t: t.nansum(1),
        lambda t: t.all(1),
        lambda t: t.any(1),
        lambda t: torch.linalg.vector_norm(t, float("inf"), dim=1),
        lambda t: t.max(),
    ):
        _check(fn, x, exact=True)


@pytest.mark.parametrize("shape, dim", [((301, 70), 0), ((5, 3), 0), ((4, 19, 6), 1), ((2, 130, 3, 3), 1)], ids=str)
def test_arg_ops_across_lines_side_by_side_match_cpu(shape, dim):
    # Along a dimension whose lines lie side by side (x.argmax(0)), a row of lines advances at a
    # time: still the first index of the extreme, a NaN's if there is one, equal zeros the first.
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randint(-3, 4, shape, generator=g).float()
    x.view(-1)[::7] = -0.0
    x.view(-1)[::131] = float("nan")
    x.view(-1)[::59] = float("-inf")
    d = x.to("openreg")
    for fn in (lambda t: t.argmax(dim), lambda t: t.argmin(dim)):
        assert torch.equal(fn(d).cpu(), fn(x))
    for fn in (lambda t: t.max(dim), lambda t: t.min(dim, keepdim=True)):
        (v, i), (cv, ci) = fn(d), fn(x)
        assert torch.equal(i.cpu(), ci)
        assert torch.equal(v.cpu().nan_to_num(7.0), cv.nan_to_num(7.0)) and torch.equal(v.cpu().signbit(), cv.signbit())


@pytest.mark.parametrize("length", (1, 3, 16, 17, 33, 100, 1000))
def test_arg_ops_over_contiguous_float32_rows_match_cpu_and_the_strided_path(length):
    # Contiguous float32 rows find the extreme with SIMD and then its first position; strided rows
    # fold element by element. Ties, signed zeros, NaNs and infinities anywhere in a row.
    g = torch.Generator().manual_seed(length)
    x = torch.randint(-3, 4, (9, length), generator=g).float()  # many ties
    x[1] = -0.0
    x[2, length // 2:] = 0.0
    x[3, -1] = float("nan")
    x[4, length // 3] = float("nan")
    x[4, -1] = float("nan")
    x[5] = -float("inf")
    x[6] = float("inf")
    x[7, 0] = 7.0
    x[8, -1] = -7.0
    strided = x.t().contiguous().to("openreg").t()
    for fn in (lambda t: t.argmax(1), lambda t: t.argmin(1), lambda t: t.max(1), lambda t: t.min(1),
               lambda t: t.argmax(1, keepdim=True), lambda t: t.argmax()):
        _check(fn, x, exact=True)
        contiguous_result, strided_result = fn(x.to("openreg")), fn(strided)
        for a, b in zip(torch.atleast_1d(contiguous_result), torch.atleast_1d(strided_result)):
            assert torch.equal(a.cpu().nan_to_num(9.0), b.cpu().nan_to_num(9.0))


def test_float32_column_extremes_match_cpu():
    # x.amax(0) of a row-major matrix runs down columns, four rows at a time, in float32: NaNs
    # anywhere (they win), infinities, signed zeros and ties; row counts around the groups of four.
    g = torch.Generator().manual_seed(5)
    for rows in (1, 3, 4, 5, 9, 64):
        x = torch.randint(-3, 4, (rows, 37), generator=g).float()
        x[rows // 2, 3] = float("nan")
        x[-1, 4] = float("nan")
        x[:, 5] = -float("inf")
        x[0, 6] = float("inf")
        x[:, 7] = -0.0
        for fn in (lambda t: t.amax(0), lambda t: t.amin(0)):
            _check(fn, x, exact=True)
        _check(lambda t: t.reshape(rows, 37, 1).expand(rows, 37, 3).amax((0, 2)), x, exact=True)
        _check(lambda t: t.reshape(1, rows, 37).expand(2, rows, 37).amin((0, 1)), x, exact=True)
        _check(lambda t: t.amax(0), x.reshape(rows, 37, 1).expand(rows, 37, 2).reshape(rows, 74), exact=True)


def test_layouts_views_and_long_rows():
    x = _values((67, 300, 3), torch.float32)  # rows longer than one chunk of 256
    _check(lambda t: t.sum(1), x, rtol=1e-5, atol=1e-4)
    _check(lambda t: t.transpose(0, 2).sum(1), x, rtol=1e-5, atol=1e-4)
    _check(lambda t: t[::2, 5:, 1].amax(0), x)
    _check(lambda t: t.permute(2, 0, 1).mean((1, 2)), x, rtol=1e-5, atol=1e-5)
    _check(lambda t: t.sum(0), x, rtol=1e-5, atol=1e-4)  # down columns
    _check(lambda t: t[:, :, 0].prod(0), torch.full((40, 300, 1), 1.01))
    _check(lambda t: t.argmax(0), x)
    _check(lambda t: t.cumsum(0), x, rtol=1e-5, atol=1e-4)
    _check(lambda t: t.expand(4, 67, 300, 3).sum(0), x, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_scans_accumulate_as_cpu(dtype):
    """cumsum, cumprod and logcumsumexp run in CPU's accumulation type: float32 for
    float16 and bfloat16 outputs (rounded to the output at each position), float64 for float32
    and float64. Long lines whose sums are not exact in the element's type, along either
    dimension, and a half-precision input summed into a float32 output: CPU's bits."""
    g = torch.Generator().manual_seed(31)
    x = (torch.randn(6, 3000, generator=g)).to(dtype)
    near_one = (1 + torch.randn(6, 3000, generator=g) * 0.05).to(dtype)
    for fn in (lambda t: t.cumsum(1), lambda t: t.cumsum(0), lambda t: t.cumsum(1, dtype=torch.float32)):
        assert torch.equal(fn(x.to("openreg")).cpu(), fn(x))
    for fn in (lambda t: t.cumprod(1), lambda t: t.cumprod(0)):
        assert torch.equal(fn(near_one.to("openreg")).cpu(), fn(near_one))
    # logcumsumexp folds with the engine's log and exp in float64: CPU's bits once rounded to a
    # narrower type, within an ulp or two of them in float64
    exact = dtype != torch.float64
    for t in (x, near_one):
        torch.testing.assert_close(t.to("openreg").logcumsumexp(1).cpu(), t.logcumsumexp(1),
                                   rtol=0 if exact else 1e-15, atol=0)


def test_out_forms_and_in_place_scans():
    x = _values((8, 9), torch.float32)
    d = x.to("openreg")
    out = torch.empty(0, device="openreg")
    torch.sum(d, 1, out=out)
    torch.testing.assert_close(out.cpu(), x.sum(1))
    values, indices = torch.empty(0, device="openreg"), torch.empty(0, dtype=torch.int64, device="openreg")
    torch.max(d, 0, out=(values, indices))
    assert indices.cpu().tolist() == x.max(0).indices.tolist()
    v = torch.empty(0, device="openreg")
    torch.var(d, 1, out=v)
    torch.testing.assert_close(v.cpu(), x.var(1))
    d.cumsum_(1)
    torch.testing.assert_close(d.cpu(), x.cumsum(1))
    # an out= tensor of another dtype sets the result's dtype, as on CPU
    as_int = torch.empty(0, dtype=torch.int64, device="openreg")
    torch.sum(d, 1, out=as_int)
    assert as_int.cpu().tolist() == torch.sum(x.cumsum(1), 1, out=torch.empty(0, dtype=torch.int64)).tolist()
    with pytest.raises(RuntimeError, match="dtype"):
        torch.sum(d, 1, dtype=torch.float64, out=torch.empty(0, device="openreg"))


def test_empty_and_zero_dim_inputs_behave_like_cpu():
    e = torch.empty(0, 4)
    for fn in (
        lambda t: t.sum(0),
        lambda t: t.prod(0),
        lambda t: t.mean(0),
        lambda t: t.amax(1),
        lambda t: t.all(0),
        lambda t: t.cumsum(0),
        lambda t: t.var(1),
    ):
        _check(fn, e)
    with pytest.raises(RuntimeError):
        e.to("openreg").max()
    with pytest.raises((IndexError, RuntimeError)):
        e.to("openreg").argmax(0)
    s = torch.tensor(2.5)
    for fn in (lambda t: t.sum(), lambda t: t.max(), lambda t: t.argmax(), lambda t: t.cumsum(0), lambda t: t.mean()):
        _check(fn, s)


def test_bad_dims_raise_like_cpu():
    x = _values((3, 4), torch.float32)
    _check(lambda t: t.sum(5), x)
    _check(lambda t: t.amax((0, 0)), x)
    _check(lambda t: t.cumsum(2), x)
    _check(lambda t: t.max(3), x)


def test_results_do_not_depend_on_how_the_work_is_split():
    """Bit-identical whether a row is reduced alone or among others, on any device, every run."""
    x = _values((33, 1000), torch.float32, seed=3)
    d = x.to("openreg")
    rows = d.sum(1).cpu()
    for i in (0, 17, 32):
        assert torch.equal(d[i].sum().cpu(), rows[i])
    assert torch.equal(d.sum(1).cpu(), rows)
    if torch.openreg.device_count() > 1:
        assert torch.equal(x.to("openreg:1").sum(1).cpu(), rows)
    var = d.var(1).cpu()
    assert torch.equal(d[5].var().cpu(), var[5])


# Large enough that a reduction to one value is cut into segments, folded by all workers,
# then merged (or_reduce_phase): 5 segments of 65536 and a ragged last one.
SEGMENTED = 5 * 65536 + 1234

def _floating(t):
    return t if t.is_floating_point() else t.float()


WHOLE = {
    "sum": lambda t: t.sum(),
    "mean": lambda t: t.mean() if t.is_floating_point() else t.sum(),
    "nansum": lambda t: t.nansum(),
    "prod": lambda t: (t * 0 + (1 + 2**-20)).prod() if t.is_floating_point() else (t % 2 + 1).prod(),
    "amax": lambda t: t.amax(),
    "amin": lambda t: t.amin(),
    "max": lambda t: t.max(),
    "min": lambda t: t.min(),
    "argmax": lambda t: t.argmax(),
    "argmin": lambda t: t.argmin(),
    "aminmax": lambda t: torch.aminmax(t),
    "all": lambda t: (t != 3).all(),
    "any": lambda t: (t == 3).any(),
    "var": lambda t: _floating(t).var(),
    "std_mean": lambda t: torch.std_mean(t, correction=0) if t.is_floating_point() else t.sum(),
    "norm2": lambda t: torch.linalg.vector_norm(_floating(t)),
    "norm1": lambda t: torch.linalg.vector_norm(_floating(t), 1),
    "norm_inf": lambda t: torch.linalg.vector_norm(_floating(t), float("inf")),
    "norm_-inf": lambda t: torch.linalg.vector_norm(_floating(t), -float("inf")),
    "norm3": lambda t: torch.linalg.vector_norm(_floating(t), 3),
}


def _check_whole(fn, x):
    """fn on the device against fn on CPU, computed in float64 for float inputs (the device
    accumulates in float64; CPU's float32 sums of 300K values drift by 1e-5 relative)."""
    actual = fn(x.to("openreg"))
    expected = fn(x.double()) if x.is_floating_point() else fn(x)
    actual = actual if isinstance(actual, tuple) else (actual,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for a, e in zip(actual, expected, strict=True):
        assert a.device.type == "openreg"
        a = a.cpu()
        if e.is_floating_point():
            torch.testing.assert_close(a.double(), e.double(), rtol=2e-6, atol=1e-6, equal_nan=True)
        else:
            torch.testing.assert_close(a, e, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("op", WHOLE, ids=str)
def test_reductions_of_large_inputs_to_one_value_match_cpu(op, dtype):
    _check_whole(WHOLE[op], _values((SEGMENTED,), dtype, seed=5))
    # Not contiguous: two reduced dimensions, segments along the outer one.
    _check_whole(WHOLE[op], _values((700, 900), dtype, seed=6).t())


def test_large_reductions_to_one_value_keep_nan_and_the_first_index_across_segments():
    x = torch.zeros(SEGMENTED)
    x[70000] = x[200000] = 5.0  # equal maxima in different segments: the first index wins
    x[150000] = x[250000] = -2.0
    _check(lambda t: (t.argmax(), t.argmin(), t.max(), *t.aminmax()), x, exact=True)
    x[300000] = float("nan")
    x[100000] = float("nan")  # the first NaN, in an earlier segment
    _check(lambda t: (t.argmax(), t.argmin(), t.amax(), t.amin(), t.sum(), t.nansum()), x, exact=True)
    _check(lambda t: torch.linalg.vector_norm(t, float("inf")), x, exact=True)
    # All equal (the identity itself): index 0, as on CPU.
    _check(lambda t: (t.argmax(), t.argmin()), torch.full((SEGMENTED,), -float("inf")), exact=True)
    _check(lambda t: t.argmax(), torch.full((SEGMENTED,), 7, dtype=torch.int64), exact=True)


def test_large_float32_sums_stay_accurate_across_segments():
    x = torch.full((SEGMENTED * 3,), 0.1, dtype=torch.float32)
    exact = x.double().sum()
    assert abs(x.to("openreg").sum().cpu().double() - exact) / exact < 1e-7
    d = x.to("openreg")
    assert torch.equal(d.sum().cpu(), d.sum().cpu())  # every run the same


def test_float32_sums_are_accurate():
    # one million values of 0.1: float32 accumulation would drift by ~1e-3 relative.
    x = torch.full((1_000_000,), 0.1, dtype=torch.float32)
    exact = x.double().sum()
    assert abs(x.to("openreg").sum().cpu().double() - exact) / exact < 1e-7


def test_reductions_are_device_runs_and_gradients_flow():
    x = _values((6, 5), torch.float32).to("openreg").requires_grad_()
    torch.openreg.reset_op_counts()
    loss = x.sum(1).mean() + x.amax(0).sum() + x.var(0).sum() + torch.logsumexp(x, 1).sum()
    counts = torch.openreg.op_counts()
    for name in ("aten::sum.dim_IntList", "aten::amax", "aten::var.correction", "aten::mean.dim"):
        assert counts.get(name, {}).get("device", 0) >= 1, (name, counts)
    assert all(c.get("fallback", 0) == 0 for c in counts.values()), counts
    with torch.openreg.fallback_policy("allow"):
        loss.backward()
    cpu = x.detach().cpu().requires_grad_()
    (cpu.sum(1).mean() + cpu.amax(0).sum() + cpu.var(0).sum() + torch.logsumexp(cpu, 1).sum()).backward()
    torch.testing.assert_close(x.grad.cpu(), cpu.grad)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_sort_argsort_and_topk_match_cpu(dtype):
    x = _values((6, 40), dtype)  # small integer ranges: many ties, which a stable sort keeps in order
    _check(lambda t: t.sort(dim=1, stable=True), x)
    _check(lambda t: t.sort(dim=0, descending=True, stable=True), x)
    _check(lambda t: t.argsort(dim=-1, stable=True), x)
    if dtype.is_floating_point:
        distinct = torch.randperm(240).view(6, 40).to(dtype)  # topk's tie order is unspecified on CPU
        _check(lambda t: t.topk(5, 1), distinct)
        _check(lambda t: t.topk(2, 0, largest=False), distinct)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_topk_keeps_the_first_k_of_the_stable_sort(dtype):
    # A small k against the line runs as one pass with a heap of k: the result is exactly the
    # stable sort's first k (ties in their order, NaN above every number), in sorted order.
    def first_k(t, k, dim, largest):
        values, indices = t.sort(stable=True, dim=dim, descending=largest)
        return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)

    x = _values((3, 5, 400), dtype, seed=21)  # few distinct values: many ties
    if dtype.is_floating_point:
        x[0, :, ::7] = float("nan")
        x[1, 2] = float("nan")  # a line of NaN
    cases = [(x, 10, 2), (x, 1, 2), (x, 3, -1), (x.transpose(0, 2), 4, 0), (x[:, :, ::3], 2, 2)]
    cases.append((torch.arange(3000).to(dtype), 50, 0))
    cases.append((_values((40, 2000), dtype, seed=22), 7, 1))  # enough lines for every worker  # ascending: every element displaces the root, largest first
    for t, k, dim in cases:
        for largest in (True, False):
            d = t.to("openreg")
            values, indices = torch.topk(d, k, dim, largest)
            want_values, want_indices = first_k(t, k, dim, largest)
            torch.testing.assert_close(values.cpu(), want_values, rtol=0, atol=0, equal_nan=True)
            assert torch.equal(indices.cpu(), want_indices), (t.shape, k, dim, largest)
            cpu_values, _ = torch.topk(t, k, dim, largest)
            torch.testing.assert_close(values.cpu(), cpu_values, rtol=0, atol=0, equal_nan=True)
    # into given tensors, and the kth value (the last of the k smallest)
    values = torch.empty(0, dtype=dtype, device="openreg")
    indices = torch.empty(0, dtype=torch.int64, device="openreg")
    torch.topk(x.to("openreg"), 6, 2, out=(values, indices))
    assert torch.equal(indices.cpu(), first_k(x, 6, 2, True)[1])
    v, i = torch.kthvalue(x.to("openreg"), 9, 2)
    assert torch.equal(i.cpu(), first_k(x, 9, 2, False)[1][..., 8])
    torch.testing.assert_close(v.cpu(), torch.kthvalue(x, 9, 2)[0], rtol=0, atol=0, equal_nan=True)


def test_topk_of_a_bad_k_raises_as_on_cpu():
    x = torch.randn(4, 100)
    _check(lambda t: t.topk(101, 1), x)
    _check(lambda t: t.topk(-1, 1), x)
    _check(lambda t: t.topk(0, 1), x)
    _check(lambda t: t.topk(3, 1), x > 0)  # CPU has no bool topk
    d = x.to("openreg")
    assert torch.equal(d.topk(3, 1)[1].cpu(), x.topk(3, 1)[1])  # the device is still usable


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_long_stable_sorts_match_cpu_exactly(dtype):
    # Lines longer than the insertion sort's take the radix sort (a key per value that orders
    # as the values do); ties keep their order, -0 and +0 are equal, NaN is above everything.
    x = _values((5, 3000), dtype, seed=31)
    if dtype.is_floating_point:
        x[0, ::5] = float("nan")
        x[1, ::7] = -0.0
        x[1, 1::7] = 0.0
        x[2, ::11] = float("inf")
        x[2, 1::11] = -float("inf")
    elif dtype == torch.int64:
        x[3, ::13] = torch.iinfo(torch.int64).min
        x[3, 1::13] = torch.iinfo(torch.int64).max
    for dim, descending in ((1, False), (1, True), (0, False), (0, True)):
        values, indices = x.to("openreg").sort(stable=True, dim=dim, descending=descending)
        want_values, want_indices = x.sort(stable=True, dim=dim, descending=descending)
        assert torch.equal(indices.cpu(), want_indices), (dim, descending)
        torch.testing.assert_close(values.cpu(), want_values, rtol=0, atol=0, equal_nan=True)
        if dtype.is_floating_point:  # the values are the elements themselves: -0 stays -0
            assert torch.equal(values.cpu().signbit(), want_values.signbit())
    # a transposed input, a 1-D one (one worker), and into given tensors
    _check(lambda t: t.t().sort(stable=True, dim=0), x, exact=True)
    _check(lambda t: t.flatten().sort(stable=True, descending=True), x, exact=True)
    values = torch.empty(0, dtype=dtype, device="openreg")
    indices = torch.empty(0, dtype=torch.int64, device="openreg")
    torch.sort(x.to("openreg"), stable=True, dim=1, out=(values, indices))
    assert torch.equal(indices.cpu(), x.sort(stable=True, dim=1)[1])


def test_sort_puts_nan_above_every_number():
    x = torch.tensor([[3.0, float("nan"), -1.0, float("inf"), float("nan"), -float("inf")]])
    _check(lambda t: t.sort(dim=1, stable=True), x)
    _check(lambda t: t.sort(dim=1, descending=True, stable=True), x)
    _check(lambda t: t.sort(), torch.tensor(2.0))
    _check(lambda t: t.topk(7), x)  # k larger than the dimension: CPU's error


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=str)
def test_logsumexp_is_one_launch_and_matches_cpu_at_the_infinities(dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(5, 7, 300, generator=g) * 10).to(dtype)
    x[0, 0] = float("-inf")  # a line of -inf: -inf
    x[1, 1, 3] = float("inf")  # a +inf: +inf
    x[2, 2, 5] = float("nan")
    x[3, :, 7] = float("-inf")
    for dim in (0, 1, 2, -1):
        for keepdim in (False, True):
            with torch.openreg.fallback_policy("error"):
                actual = torch.logsumexp(x.to("openreg"), dim, keepdim=keepdim).cpu()
            torch.testing.assert_close(actual, torch.logsumexp(x, dim, keepdim=keepdim), equal_nan=True)
    # one launch of the softmax kernel, not ATen's composite of eight
    d = x.to("openreg")
    torch.logsumexp(d, 2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.PrivateUse1]) as prof:
        torch.logsumexp(d, 2)
        torch.openreg.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert kernels == ["softmax (logsumexp)"], kernels


@pytest.mark.parametrize("rows", (1, 3, 4, 5, 1031))
def test_column_sums_are_the_sequential_fold_in_double(rows):
    # Down columns, each output is added to in row order in double (rows are taken four at a
    # time, which must not change that): equal to CPU's float64 cumsum's last row, rounded.
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 67, generator=g) * torch.logspace(-3, 3, 67)
    expected = x.double().cumsum(0)[-1].float()
    assert torch.equal(x.to("openreg").sum(0).cpu(), expected)
    y = torch.randn(rows, 5, 8, generator=g)  # two reduced dimensions: rows come from an odometer
    expected = y.double().reshape(-1, 8).cumsum(0)[-1].float()
    assert torch.equal(y.to("openreg").sum((0, 1)).cpu(), expected)
    z = torch.randn(1, 67, generator=g).expand(rows, 67)  # broadcast: one row read `rows` times
    assert torch.equal(z.to("openreg").sum(0).cpu(), z.double().cumsum(0)[-1].float())


@pytest.mark.parametrize("length", (1, 3, 4, 5, 16, 63, 64, 200))
def test_short_row_sums_means_and_extremes_match_the_fold(length):
    # Many contiguous float32 rows take a loop of their own (four rows at a time when short); a
    # row below 64 elements is still summed in order in double from +0, and a longer one as
    # before. 1031 rows: groups of four and a tail, split between workers.
    g = torch.Generator().manual_seed(length)
    x = torch.randn(1031, length, generator=g) * torch.logspace(-3, 3, length)
    d = x.to("openreg")
    for t, dt in ((x, d), (x[::2], d[::2]), (x.view(1031, 1, length), d.view(1031, 1, length))):
        total = t.double().cumsum(-1)[..., -1]
        if length < 64:
            assert torch.equal(dt.sum(-1).cpu(), total.float())
            assert torch.equal(dt.mean(-1).cpu(), (total / length).float())
        else:
            torch.testing.assert_close(dt.sum(-1).cpu(), total.float(), rtol=1e-5, atol=1e-3)  # terms to 3e3
        assert torch.equal(dt.amax(-1).cpu(), t.amax(-1)) and torch.equal(dt.amin(-1).cpu(), t.amin(-1))
    y = x.clone()
    y[7, length // 2] = float("nan")
    y[9] = float("-inf")
    assert torch.equal(y.to("openreg").amax(1).cpu().nan_to_num(5.0), y.amax(1).nan_to_num(5.0))
    sums = y.to("openreg").sum(1).cpu()
    assert sums[7].isnan() and sums[9] == float("-inf") and torch.equal(sums[10:], d.sum(1).cpu()[10:])


@pytest.mark.parametrize("shape, dim", [((1031, 37), 1), ((37, 1031), 0), ((5, 3, 70), 1), ((3, 70, 9), 1),
                                        ((70, 2), 0), ((2, 70), 1)], ids=str)
def test_float32_cumsum_and_cumprod_are_the_running_value_in_double(shape, dim):
    # Lines side by side (dim 0 of a row-major matrix) run across a row at a time, contiguous
    # lines four at a time: each output is still the line's running sum (product) in double from
    # the first element, rounded once: CPU's float64 cumsum of the same values, rounded.
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g) * 4
    x.view(-1)[::41] = float("inf")
    x.view(-1)[::97] = float("nan")
    d = x.to("openreg")
    for t, dt in ((x, d), (x.transpose(0, -1), d.transpose(0, -1))):
        for k in range(t.dim()):
            assert torch.equal(dt.cumsum(k).cpu().nan_to_num(7.0), t.double().cumsum(k).float().nan_to_num(7.0))
    y = 1 + torch.rand(shape, generator=g) / 100
    assert torch.equal(y.to("openreg").cumprod(dim).cpu(), y.double().cumprod(dim).float())


def _with_nans(x):
    y = x.clone()
    y[..., 1] = float("nan")
    return y


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_cummax_cummin_and_logcumsumexp_match_cpu(dtype):
    x = _values((4, 9), dtype, seed=11)  # few distinct values: ties take the last index, as on CPU
    for dim in (0, 1, -1):
        _check(lambda t: torch.cummax(t, dim), x)
        _check(lambda t: torch.cummin(t, dim), x)
        _check(lambda t: torch.logcumsumexp(t, dim), x)
    if dtype.is_floating_point:
        _check(lambda t: torch.cummax(t, 1), _with_nans(x))  # NaN wins and stays, at its last position
        _check(lambda t: torch.cummin(t, 1), _with_nans(x))
        inf = torch.tensor([[-float("inf"), -float("inf"), 1.0, float("inf"), float("inf"), 2.0]], dtype=dtype)
        _check(lambda t: torch.logcumsumexp(t, 1), inf)
    _check(lambda t: torch.cummax(t, 0), x[0, 0])


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_order_statistics_match_cpu(dtype):
    x = _values((5, 8), dtype, seed=12)

    def by_value(fn):
        # CPU's choice among equal elements is unspecified: compare values, and the values at the indices
        def picked(t):
            values, indices = fn(t)
            kept = indices.dim() == t.dim()
            at = torch.take_along_dim(t, indices if kept else indices.unsqueeze(dim), dim)
            return values, at if kept else at.squeeze(dim)

        return picked

    for dim in (0, 1):
        for keepdim in (False, True):
            _check(by_value(lambda t: torch.median(t, dim, keepdim)), x)
            _check(by_value(lambda t: torch.nanmedian(t, dim, keepdim)), x)
            _check(by_value(lambda t: torch.kthvalue(t, 2, dim, keepdim)), x)
            _check(by_value(lambda t: torch.mode(t, dim, keepdim)), x)
    dim = 1
    _check(lambda t: torch.median(t), x)
    _check(lambda t: torch.nanmedian(t), x)
    if dtype.is_floating_point:
        nans = _with_nans(x)
        _check(lambda t: torch.median(t, 1), nans)  # NaN, at its first position
        _check(by_value(lambda t: torch.nanmedian(t, 1)), nans)
        _check(lambda t: torch.median(t), nans)
        _check(lambda t: torch.nanmedian(t), torch.full((3,), float("nan"), dtype=dtype))


def test_order_statistics_refuse_bad_arguments_like_cpu():
    x = _values((3, 4), torch.float32)
    _check(lambda t: torch.kthvalue(t, 5, 1), x)
    _check(lambda t: torch.kthvalue(t, 0, 1), x)
    _check(lambda t: torch.median(t), torch.empty(0))
    _check(lambda t: torch.mode(t, 1), torch.empty(2, 0))
    _check(lambda t: torch.median(t, 2), x)


def test_equal_trace_and_norm_with_dims_match_cpu():
    x = _values((4, 4), torch.float32, seed=13)
    assert torch.equal(x.to("openreg"), x.to("openreg"))
    assert not torch.equal(x.to("openreg"), (x + 1).to("openreg"))
    assert not torch.equal(x.to("openreg"), x[:3].to("openreg"))
    nan = torch.tensor([float("nan")], device="openreg")
    assert not torch.equal(nan, nan)
    assert torch.equal(torch.empty(0, device="openreg"), torch.empty(0, device="openreg"))
    for dtype in (torch.float32, torch.int32, torch.uint8):
        _check(torch.trace, _values((5, 3), dtype, seed=14))
    _check(torch.trace, _values((2, 2, 2), torch.float32))
    for p in (1, 2, 3.5, float("inf"), 0):
        _check(lambda t: torch.norm(t, p, dim=1, keepdim=True), x)
        _check(lambda t: torch.norm(t, p, dim=(0, 1), dtype=torch.float64), x)
    _check(lambda t: torch.dist(t, t.flip(0), 3), x)
    _check(lambda t: torch.nn.functional.pairwise_distance(t, t.flip(1)), x)


LONG_ROWS = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.bool]


@pytest.mark.parametrize("dtype", LONG_ROWS, ids=str)
def test_long_rows_fold_in_simd_like_cpu(dtype):
    """Rows long enough for the folds' SIMD loops (16 values a pass, chunks of 256, float32
    products 32 at a time) and with tails: extremes exactly as CPU's, NaN propagating from
    any position (a chunk's first element, its last, the tail); sums and products within
    tolerance (products against float64's, which the device's match more closely than CPU's
    float32 ones), integer ones exactly (they wrap)."""
    for n in (16, 31, 257, 1000, 4133):
        x = _values((6, n), dtype, seed=n)
        if dtype.is_floating_point:
            x[1, 0] = float("nan")
            x[2, n - 1] = float("nan")
            x[3, (n // 256) * 256 - 1 if n > 256 else n // 2] = float("nan")
            x[4, n // 3] = float("-inf")
            x[5] = x[5].abs() * 0 + 1.001
        for fn in (lambda t: t.amax(1), lambda t: t.amin(1), lambda t: t.max(1), lambda t: t.argmin(1)):
            _check(fn, x, exact=True)
        if dtype != torch.bool:
            _check(lambda t: torch.aminmax(t, dim=1), x, exact=True)
            _check(lambda t: torch.aminmax(t[:, 1:]), x, exact=True)
        _check(lambda t: t.all(1), x)
        _check(lambda t: t.any(1), x)
        if dtype in (torch.int64, torch.int32):  # wrapping products and sums (in int64)
            _check(lambda t: (t % 4 + 1).prod(1), x)
            _check(lambda t: (t * 2**58).sum(1), x)
        elif dtype.is_floating_point:
            half = {"rtol": 2e-3, "atol": 1e-2} if dtype == torch.float16 else {}
            # the device multiplies in float64, CPU in float32: float64's product is the oracle
            expected = x[4:].double().prod(1).to(dtype)
            torch.testing.assert_close(x.to("openreg")[4:].prod(1).cpu(), expected, equal_nan=True, **half)
            _check(lambda t: t[5:].double().prod(1), x)
            _check(lambda t: t.sum(1), x, **half)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8], ids=str)
def test_all_and_any_of_byte_rows_find_a_single_exception(dtype):
    """all and any of contiguous byte rows scan 64 bytes at a time: a lone zero (all) or nonzero
    (any) anywhere in a row (first byte, inside a block, in the tail) decides it."""
    for n in (1, 63, 64, 65, 200, 1000):
        for pos in sorted({0, n // 2, n - 1}):
            ones, zeros = torch.ones(3, n, dtype=dtype) * (2 if dtype == torch.uint8 else 1), torch.zeros(3, n, dtype=dtype)
            ones[1, pos], zeros[1, pos] = 0, 1
            for x in (ones, zeros):
                _check(lambda t: t.all(1), x)
                _check(lambda t: t.any(1), x)
                _check(lambda t: (t.all(), t.any()), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_extremes_keep_the_first_of_equal_zeros_and_the_nan_found(dtype):
    """Extremes fold 16 values a pass in SIMD lanes, which do not merge in the elements' order; an
    extreme of zero (-0 against +0) or a NaN is decided element by element, as CPU's: the first
    of equal zeros wins. Contiguous, strided and whole-tensor forms."""
    # (short float32 rows take a loop of their own; CPU's float64 rows of 16 pick a lane's last zero)
    for n in (6, 16, 40, 300, 1000) if dtype == torch.float32 else (40, 300, 1000):
        x = torch.full((4, n), -1.0, dtype=dtype)
        x[0, 1], x[0, 2] = 0.0, -0.0  # +0 first
        x[1, 5], x[1, n - 3] = -0.0, 0.0  # -0 first
        y = -x
        for t in (x, y):
            for fn in (lambda v: v.amax(1), lambda v: v.amin(1), lambda v: v[:, ::2].amax(1),
                       lambda v: torch.aminmax(v, dim=1).max, lambda v: torch.aminmax(v, dim=1).min,
                       lambda v: v[0].amax(), lambda v: v[1].amin()):
                expected, actual = fn(t), fn(t.to("openreg")).cpu()
                assert torch.equal(actual, expected) and torch.equal(actual.signbit(), expected.signbit()), (n, dtype)


def test_products_that_mix_zero_and_overflow_are_nan_like_cpu():
    """Products run in lanes (as CPU's do), so a zero and an overflowing run give 0 * inf = NaN."""
    x = torch.tensor([0.0] + [1e30] * 1000)
    _check(lambda t: t.prod(), x)
    _check(lambda t: t.view(1, -1).prod(1), x)
    _check(lambda t: t.double().pow(10).prod(), x[:32])


def _same_bits(a, b):
    """Equal bits (signed zeros told apart), NaNs equal whatever their payloads."""
    inf = float("inf")
    a, b = (t.nan_to_num(nan=7.0, posinf=inf, neginf=-inf).reshape(-1) for t in (a, b))
    return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _lane_fold_sum(row):
    """The device's sum of a row of floats (Python's doubles): chunks of 256 from the row's start,
    each summed in eight lanes (lane pair v takes elements 2v, 2v + 1 and 2v + 8, 2v + 9 of each 16,
    the pair's two added first), the lanes as (s0 + s1) + (s2 + s3) then lane 0 + lane 1, the
    chunk's tail in turn; the chunks' sums added in turn."""
    total = 0.0
    for k in range(0, len(row), 256):
        chunk = row[k:k + 256]
        s = [[0.0, 0.0] for _ in range(4)]
        j = 0
        while j + 16 <= len(chunk):
            for v in range(4):
                for lane in range(2):
                    s[v][lane] += chunk[j + 2 * v + lane] + chunk[j + 8 + 2 * v + lane]
            j += 16
        t = [(s[0][lane] + s[1][lane]) + (s[2][lane] + s[3][lane]) for lane in range(2)]
        part = t[0] + t[1]
        for value in chunk[j:]:
            part += value
        total += part
    return total


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_rows_sum_in_the_lane_order_and_keep_exact_extremes(dtype):
    """Contiguous float16 and bfloat16 rows are summed from the halves themselves, widened in
    registers into the float64 lanes of the chunk fold, in its order: bfloat16 rows where the
    order of float64 additions shows give the fold's sum (emulated here), rounded to the dtype.
    Their extremes are taken 256 values at a time in float32 lanes: exact, NaN propagating, and
    the first of equal zeros winning as in float32's fold. Strided rows and whole-tensor
    reductions too."""
    g = torch.Generator().manual_seed(3)
    for n in (2, 15, 16, 31, 33, 255, 256, 257, 1000, 4133):
        if dtype == torch.bfloat16 and n >= 16:
            # values of 64 to 127 (below half an ulp of 2^60) and, at a fifth of the positions,
            # +-2^60 in pairs that cancel: which small values a running 2^60 swallows depends on
            # the order of the additions, and the rounding of 2^60 + 200 against 2^60 + 100 + 100
            # shows as 256 in the result
            wide = torch.randint(64, 128, (4, n), generator=g).double()
            wide *= torch.randint(0, 2, (4, n), generator=g) * 2 - 1
            for r in range(4):
                spots = torch.randperm(n, generator=g)[: max(2, n // 5) // 2 * 2]
                wide[r, spots] = 2.0**60 * (torch.arange(len(spots)) % 2 * 2 - 1).double()
            wide = wide.to(dtype)
            expected = torch.tensor([_lane_fold_sum(r) for r in wide.double().tolist()], dtype=torch.float64)
            assert _same_bits(wide.to("openreg").sum(1).cpu(), expected.to(dtype)), n
        x = _values((6, n), dtype, seed=n)
        x[1, n // 2] = float("nan")
        x[2, n - 1] = float("inf")
        x[3, 0] = float("-inf")
        x[4], x[5] = -1.0, 1.0
        if n > 17:  # equal zeros whose SIMD lanes are in the other order (positions 3 and 17)
            x[4, 3], x[4, 17] = 0.0, -0.0
            x[5, 3], x[5, 17] = -0.0, 0.0
        d = x.to("openreg")
        for fn in (lambda t: t.sum(1), lambda t: t.mean(1), lambda t: t[:, ::2].sum(1), lambda t: t.sum()):
            # the widened rows take the float64 rows' fold: the same lanes, the same order
            assert _same_bits(fn(d).cpu(), fn(d.double()).cpu().to(dtype)), (n, dtype)
            torch.testing.assert_close(fn(d).cpu(), fn(x), equal_nan=True, rtol=1e-2, atol=1e-2)
        for fn in (lambda t: t.amax(1), lambda t: t.amin(1), lambda t: t[:, 1:].amax(1), lambda t: t.amax()):
            expected = fn(d.float()).cpu().to(dtype)
            actual = fn(d).cpu()
            assert _same_bits(actual, expected), (n, dtype)
            torch.testing.assert_close(actual, fn(x), equal_nan=True)
