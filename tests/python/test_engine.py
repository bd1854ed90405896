"""The device-compute engine: elementwise ops and copies computed by wasm on the device.

Every test here runs under the ``error`` fallback policy, so an op that silently took the
CPU fallback fails instead of passing. CPU is the oracle: each op runs on CPU tensors and
on openreg tensors built from the same values, and the results must agree (exactly for
integer and bool results; within ``torch.testing``'s dtype tolerances for floats).
"""

import math
import subprocess
import sys
import warnings
from fractions import Fraction

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]


@pytest.fixture(autouse=True)
def _no_fallback():
    """Fail any op that would leave the device."""
    with torch.openreg.fallback_policy("error"):
        yield


def _values(shape, dtype, seed=0, nonzero=False):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 4
        if nonzero:
            x = torch.where(x.abs() < 0.25, torch.full_like(x, 0.5), x)
        return x.to(dtype)
    lo, hi = (0, 50) if dtype == torch.uint8 else (-50, 50)
    x = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64)
    if nonzero:
        x = torch.where(x == 0, torch.ones_like(x), x)
    return x.to(dtype)


def _on(device, *tensors):
    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in tensors]


def _check(fn, *args, device="openreg", exact=False):
    """Run fn on CPU and on the device; compare (a CPU error must be the device's too)."""
    try:
        expected = fn(*args)
    except Exception as error:  # noqa: BLE001 - whatever CPU raises, the device must raise
        with pytest.raises(type(error)):
            fn(*_on(device, *args)).cpu()
        return
    actual = fn(*_on(device, *args))
    assert actual.device.type == "openreg"
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if exact or not expected.dtype.is_floating_point:
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)


BINARY = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=3),
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "fmod": torch.fmod,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
    "atan2": torch.atan2,
    "logaddexp": torch.logaddexp,
    "logaddexp2": torch.logaddexp2,
    "hypot": torch.hypot,
    "copysign": torch.copysign,
    "xlogy": lambda a, b: torch.xlogy(a, b.abs()),
    "xlog1py": lambda a, b: torch.special.xlog1py(a, b.abs()),
    "heaviside": torch.heaviside,
    "fmax": torch.fmax,
    "fmin": torch.fmin,
}
DIVIDES = {"div", "div_trunc", "div_floor", "floor_divide", "remainder", "fmod"}


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("op", BINARY, ids=str)
def test_binary_ops_match_cpu_for_every_dtype(op, dtype):
    a = _values((7, 9), dtype, seed=1)
    b = _values((7, 9), dtype, seed=2, nonzero=op in DIVIDES)
    _check(BINARY[op], a, b)


@pytest.mark.parametrize("dtype", INTS + [torch.bool], ids=str)
@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise_ops_match_cpu(op, dtype):
    _check(getattr(torch, op), _values((33,), dtype, 1), _values((33,), dtype, 2))
    _check(torch.bitwise_not, _values((33,), dtype, 3))


UNARY = {
    "neg": torch.neg,
    "abs": torch.abs,
    "sign": torch.sign,
    "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 1),
    "reciprocal": lambda x: torch.reciprocal(x),
    "floor": torch.floor,
    "ceil": torch.ceil,
    "trunc": torch.trunc,
    "round": torch.round,
    "logical_not": torch.logical_not,
    "clamp_min": lambda x: torch.clamp_min(x, 1),
    "clamp_max": lambda x: torch.clamp_max(x, -1),
    "clamp": lambda x: torch.clamp(x, -3, 4),
    "clamp_min_only": lambda x: torch.clamp(x, min=2),
    "clamp_inverted": lambda x: torch.clamp(x, 5, -5),
    "pow_2": lambda x: x**2,
    "pow_3": lambda x: torch.pow(x, 3),
    "pow_0": lambda x: x**0,
    "relu": torch.relu,
    "frac": torch.frac,
    "signbit": torch.signbit,
    "round_decimals": lambda x: torch.round(x * 3.7, decimals=2),
    "round_negative_decimals": lambda x: torch.round(x * 1000, decimals=-2),
}


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("op", UNARY, ids=str)
def test_unary_ops_match_cpu(op, dtype):
    x = _values((5, 13), dtype, seed=4, nonzero=op == "reciprocal")
    _check(UNARY[op], x)


TRANSCENDENTAL = {
    "exp": torch.exp,
    "exp2": torch.exp2,
    "expm1": torch.expm1,
    "log": lambda x: torch.log(x.abs()),
    "log2": lambda x: torch.log2(x.abs()),
    "log10": lambda x: torch.log10(x.abs()),
    "log1p": lambda x: torch.log1p(x.abs()),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "erf": torch.erf,
    "silu": torch.nn.functional.silu,
    "mish": torch.nn.functional.mish,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "softplus": lambda x: torch.nn.functional.softplus(x, beta=2, threshold=5),
    "elu": lambda x: torch.nn.functional.elu(x, alpha=0.7),
    "selu": torch.nn.functional.selu,
    "leaky_relu": lambda x: torch.nn.functional.leaky_relu(x, 0.1),
    "sin": torch.sin,
    "cos": torch.cos,
    "tan": torch.tan,
    "asin": torch.asin,  # NaN outside [-1, 1], as on CPU
    "acos": torch.acos,
    "atan": torch.atan,
    "sinh": torch.sinh,
    "cosh": torch.cosh,
    "asinh": torch.asinh,
    "acosh": torch.acosh,
    "atanh": torch.atanh,
    "pow_half": lambda x: torch.pow(x.abs(), 0.5),
    "pow_fraction": lambda x: torch.pow(x, 1.7),
    "pow_negative": lambda x: torch.pow(x, -2),
    "pow_float_base": lambda x: 2.5**x,  # pow.Scalar: a Python number raised to a tensor
    "pow_int_base": lambda x: torch.pow(2, x),
    "hardtanh": lambda x: torch.nn.functional.hardtanh(x, -0.5, 2.0),
    "nan_to_num": lambda x: torch.nan_to_num(torch.where(x > 1, x / 0, x), nan=1.5, neginf=-7),
    "erfc": torch.erfc,
    "erfinv": lambda x: torch.erfinv(torch.tanh(x)),
    "lgamma": torch.lgamma,
    "digamma": torch.digamma,
    # (away from the poles at 0, -1, ..., where CPU's float computation returns finite values)
    "trigamma": lambda x: torch.polygamma(1, x + 0.5),
    "polygamma_3": lambda x: torch.polygamma(3, x + 0.5),
    "sinc": torch.sinc,
    "hardsigmoid": torch.nn.functional.hardsigmoid,
    "hardswish": torch.nn.functional.hardswish,
    "hardshrink": lambda x: torch.nn.functional.hardshrink(x, 0.7),
    "softshrink": lambda x: torch.nn.functional.softshrink(x, 0.7),
    "glu": lambda x: torch.nn.functional.glu(x.narrow(-1, 0, 10), -1),
    "prelu": lambda x: torch.nn.functional.prelu(x, torch.tensor([0.25], dtype=x.dtype, device=x.device)),
}
# Where CPU's float32 kernels compute in float32 and the device in float64 (polygamma near its
# poles), float32 results are compared with CPU's float64 ones.
FLOAT64_ORACLE = {"trigamma", "polygamma_3", "digamma"}


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32], ids=str)
@pytest.mark.parametrize("op", TRANSCENDENTAL, ids=str)
def test_transcendental_ops_and_activations_match_cpu(op, dtype):
    x = _values((6, 11), dtype, seed=24)
    if op in FLOAT64_ORACLE and dtype == torch.float32:
        fn = TRANSCENDENTAL[op]
        actual = fn(x.to("openreg")).cpu()
        torch.testing.assert_close(actual, fn(x.double()).float(), equal_nan=True)
        return
    _check(TRANSCENDENTAL[op], x)
    if dtype == torch.float32:
        wide = torch.cat([torch.linspace(-100, 100, 401), torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e-8])])
        _check(TRANSCENDENTAL[op], wide)
        # At the infinities CPU's answer depends on where the element falls: its vector loop
        # gives gelu(inf) = nan, its scalar tail inf. Compare with CPU one element at a time.
        for special in (float("inf"), -float("inf"), float("nan")):
            _check(TRANSCENDENTAL[op], torch.tensor([special]))


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_shifts_gcd_and_lcm_match_cpu_for_every_integer_dtype(dtype):
    a = _values((64,), dtype, seed=5)
    bits = torch.iinfo(dtype).bits
    # shifts by every amount from -2 to past the type's width (0, or the sign, there)
    amount = torch.arange(-2, bits + 3).repeat(64)[:64].to(dtype)
    _check(lambda x, y: x << y, a, amount)
    _check(lambda x, y: x >> y, a, amount)
    _check(lambda x: x << 3, a)
    _check(lambda x: torch.bitwise_right_shift(x, 2), a)
    _check(torch.gcd, a, _values((64,), dtype, seed=6))
    _check(torch.lcm, a, _values((64,), dtype, seed=7))


def test_shifts_gcd_and_lcm_refuse_bool_and_floats_like_cpu():
    for dtype in (torch.bool, torch.float32):
        a = _values((5,), dtype, seed=1)
        for fn in (lambda x, y: x << y, lambda x, y: x >> y, torch.gcd, torch.lcm):
            _check(fn, a, a)


def test_special_functions_match_cpu_at_poles_zeros_and_infinities():
    special = torch.tensor([0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -2.5, 0.5, 1e-300, -1e-300, 171.5, 1e300,
                            float("inf"), -float("inf"), float("nan")], dtype=torch.float64)
    for fn in (torch.lgamma, torch.digamma, torch.erfc, torch.sinc):
        _check(fn, special)
    # trigamma's double poles at 0, -1, -2, ...: +inf (CPU returns inf at 0, and large finite
    # values at the negative integers, where its sin(pi x) is not exactly 0)
    trigamma = torch.polygamma(1, special.to("openreg")).cpu()
    poles = (special <= 0) & (special == special.round()) & special.isfinite()
    assert torch.isinf(trigamma[poles]).all() and (trigamma[poles] > 0).all()
    torch.testing.assert_close(trigamma[~poles], torch.polygamma(1, special[~poles]), equal_nan=True)
    _check(torch.erfinv, torch.tensor([-1.0, 1.0, -0.0, 0.0, 1.5, -1 + 1e-15, 1 - 1e-15, 0.999, float("nan")],
                                      dtype=torch.float64))
    for fn in (torch.special.erfcx, torch.special.log_ndtr, torch.special.i0, torch.special.i0e, torch.special.i1,
               torch.special.i1e, torch.special.entr, torch.angle):
        _check(fn, special)
    _check(torch.special.ndtri, torch.tensor([0.0, 1.0, 0.5, 1e-300, 5e-324, 1 - 1e-16, -0.1, 1.1, float("nan")],
                                             dtype=torch.float64))


@pytest.mark.parametrize("fn, lo, hi", [
    (torch.erfinv, -1.0, 1.0), (torch.erfc, -6.0, 11.0), (torch.lgamma, 2.5, 40.0),
    (torch.lgamma, -0.95, -0.05), (torch.digamma, 2.0, 60.0), (lambda x: torch.polygamma(2, x), 0.05, 30.0),
    (torch.special.erfcx, -5.0, 50.0), (torch.special.ndtri, 1e-12, 1 - 1e-12), (torch.special.log_ndtr, -30.0, 8.0),
    (torch.special.i0, -40.0, 40.0), (torch.special.i0e, -300.0, 300.0), (torch.special.i1, -40.0, 40.0),
    (torch.special.i1e, -300.0, 300.0), (torch.special.entr, 0.0, 20.0),
], ids=["erfinv", "erfc", "lgamma", "lgamma_negative", "digamma", "polygamma_2", "erfcx", "ndtri", "log_ndtr", "i0",
        "i0e", "i1", "i1e", "entr"])
def test_special_functions_are_accurate_in_float64(fn, lo, hi):
    # Computed in double: near CPU's float64 results (within 1e-13 relative), where the function
    # is well conditioned, and so within a rounding of the float32 result.
    x = torch.linspace(lo, hi, 20001, dtype=torch.float64)
    expected = fn(x)
    actual = fn(x.to("openreg")).cpu()
    torch.testing.assert_close(actual, expected, rtol=1e-13, atol=1e-300, equal_nan=True)
    worst = _worst_ulp(fn, x.float())
    assert worst <= 1, f"{worst} ulp"


def test_regression_losses_and_their_gradients_match_cpu():
    x = _values((6, 7), torch.float32, seed=8)
    t = _values((6, 7), torch.float32, seed=9)
    for loss in (torch.nn.functional.smooth_l1_loss, torch.nn.functional.huber_loss):
        for reduction in ("mean", "sum", "none"):
            for arg in (0.5, 2.0):
                def fn(a, b):
                    a = a.clone().requires_grad_()
                    kw = {"beta": arg} if loss is torch.nn.functional.smooth_l1_loss else {"delta": arg}
                    out = loss(a, b, reduction=reduction, **kw)
                    (grad,) = torch.autograd.grad(out.sum(), a)
                    return torch.cat([out.detach().reshape(-1), grad.reshape(-1)])

                _check(fn, x, t)
    with pytest.raises(RuntimeError, match="delta"):
        torch.nn.functional.huber_loss(x.to("openreg"), t.to("openreg"), delta=0.0)


def test_atan2_quadrants_signed_zeros_and_infinities_match_cpu():
    special = torch.tensor([0.0, -0.0, 1.0, -1.0, 3.0, -2.0, float("inf"), -float("inf"), float("nan")], dtype=torch.float64)
    y, x = torch.meshgrid(special, special, indexing="ij")
    for dtype in (torch.float64, torch.float32):
        expected = torch.atan2(y.to(dtype), x.to(dtype))
        actual = torch.atan2(y.to(dtype).to("openreg"), x.to(dtype).to("openreg")).cpu()
        torch.testing.assert_close(actual, expected, equal_nan=True)
        numbers = ~torch.isnan(expected)  # a NaN's sign means nothing
        assert torch.equal(torch.signbit(actual)[numbers], torch.signbit(expected)[numbers]), "signed zeros, sign of pi"


def _worst_ulp(fn, x):
    """The largest error of fn on openreg over float32 x, in ulp of the float64 result rounded to float32."""
    reference = fn(x.double()).float()
    actual = fn(x.to("openreg")).cpu()
    assert torch.equal(torch.isnan(actual), torch.isnan(reference)), fn.__name__
    infinite = torch.isinf(reference)
    assert torch.equal(actual[infinite], reference[infinite])
    # subnormal results are left out: CPU flushes some of them to 0, as the device does
    finite = torch.isfinite(reference) & ((reference == 0) | (reference.abs() >= torch.finfo(torch.float32).tiny))
    ulp = torch.nextafter(reference.abs(), torch.tensor(float("inf"))) - reference.abs()
    return ((actual.double() - reference.double()).abs() / ulp.double())[finite].max().item()


@pytest.mark.parametrize("fn, bound", [
    # computed in double, rounded once
    (torch.sinh, 1), (torch.cosh, 1), (torch.asinh, 1), (torch.acosh, 1), (torch.atanh, 1), (torch.tanh, 1),
    (lambda x: torch.pow(x.abs(), 1.7), 1),
    (lambda x: torch.pow(x, 5.0), 1), (lambda x: torch.pow(x.abs(), -0.75), 1),
    # float32 polynomials of their own (math.h)
    (torch.atan, 3), (torch.asin, 3), (torch.acos, 3), (torch.erf, 2), (torch.exp, 2), (torch.exp2, 2),
    (torch.sigmoid, 3),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_float32_functions_are_accurate_to_a_few_ulp(fn, bound):
    # Against float64 references rounded to float32, dense near 0 and across many orders of magnitude.
    x = torch.cat([torch.linspace(-4.5, 4.5, 90001, dtype=torch.float64), torch.logspace(-30, 30, 2001, dtype=torch.float64)])
    x = torch.cat([x, -x]).float()
    worst = _worst_ulp(fn, x)
    assert worst <= bound, f"{worst} ulp"


# The ops that run through math.h's vector functions (fused multiply-adds, four lanes at a time),
# as functions of the input (and, for the backward ops, of a gradient in the same layout).
_VECTOR_OPS = {
    "exp": lambda x, g: torch.exp(x),
    "sigmoid": lambda x, g: torch.sigmoid(x),
    "erf": lambda x, g: torch.special.erf(x),
    "silu": lambda x, g: torch.nn.functional.silu(x),
    "gelu": lambda x, g: torch.nn.functional.gelu(x),
    "silu_backward": lambda x, g: torch.ops.aten.silu_backward(g, x),
    "gelu_backward": lambda x, g: torch.ops.aten.gelu_backward(g, x),
}


def _vector_inputs(shape, seed):
    """Normal values with the edges of exp's fast scaling (|x| near 87, NaN, infinities) mixed into
    the same vectors, so that a vector's lanes take different paths."""
    x = _values(shape, torch.float32, seed=seed)
    edges = torch.tensor([88.5, -86.5, -100.0, 89.0, float("nan"), float("inf"), -float("inf"), -103.5, 0.0, -0.0])
    flat = x.reshape(-1)
    flat[7::13] = edges.repeat(flat[7::13].numel() // edges.numel() + 1)[: flat[7::13].numel()]
    return x


def _same_values(a, b):
    """Equal bit for bit (signed zeros included), with NaNs of any payload at the same places."""
    nan = torch.isnan(a)
    bits = {4: torch.int32, 2: torch.int16}[a.element_size()]
    return torch.equal(nan, torch.isnan(b)) and torch.equal(a[~nan].view(bits), b[~nan].view(bits))


@pytest.mark.parametrize("name", list(_VECTOR_OPS))
def test_vector_functions_give_the_same_bits_in_every_layout(name):
    fn = _VECTOR_OPS[name]
    x, g = _vector_inputs((37, 45), seed=3), _values((37, 45), torch.float32, seed=4)
    xd, gd = x.to("openreg"), g.to("openreg")
    with torch.openreg.fallback_policy("error"):
        base = fn(xd, gd).cpu()
        # a transposed view (its result takes its layout) and strided rows (every other column: the
        # chunked loop)
        assert _same_values(fn(xd.t(), gd.t()).cpu(), base.t())
        assert _same_values(fn(xd[:, ::2], gd[:, ::2]).cpu(), base[:, ::2])
        assert _same_values(fn(xd.t(), gd.t().contiguous()).cpu(), base.t())
        # every start offset: an element lands in a different lane, or in a row's padded last vector
        for k in range(1, 6):
            assert _same_values(fn(xd.reshape(-1)[k:], gd.reshape(-1)[k:]).cpu(), base.reshape(-1)[k:]), k
        # float16 and bfloat16 inputs compute in float32 and round once
        for dtype in (torch.float16, torch.bfloat16):
            xh, gh = x.to(dtype), g.to(dtype)
            actual = fn(xh.to("openreg"), gh.to("openreg")).cpu()
            assert _same_values(actual, fn(xh.float().to("openreg"), gh.float().to("openreg")).cpu().to(dtype)), dtype
    # against CPU (other formulas for some: tolerances), at finite inputs: CPU's vectorized erf makes
    # gelu(inf) NaN, where the device gives inf
    expected = fn(x, g)
    finite = torch.isfinite(x)
    torch.testing.assert_close(base[finite], expected[finite], equal_nan=True, rtol=1e-5, atol=1e-6)


def test_exp_scales_into_the_subnormals_and_overflows_like_cpu():
    # float64 references: the device's exp is within an ulp here, subnormal results included
    # (a vector with such a lane scales in two steps, which gives its other lanes the same bits)
    x = torch.tensor([-87.0, -87.5, -88.0, -95.0, -100.0, -103.0, -103.9, -104.0, -110.0, -1000.0,
                      88.0, 88.5, 88.72, 88.73, 89.0, 1000.0, 0.5, -0.5])
    actual = torch.exp(x.to("openreg")).cpu()
    reference = torch.exp(x.double())
    finite = torch.isfinite(reference.float())
    error = (actual.double() - reference).abs()[finite]
    assert torch.all(error <= torch.maximum(reference.abs()[finite] * 2.0 ** -23, torch.tensor(2.0 ** -150, dtype=torch.float64))), actual
    assert torch.equal(torch.isinf(actual), ~finite), "overflows to inf where float32 does"
    for k in range(len(x)):  # alone, each in a vector of its own: the same bits
        assert torch.equal(torch.exp(x[k:k + 1].to("openreg")).cpu(), actual[k:k + 1]), x[k]


def test_float32_atan2_is_within_an_ulp_in_every_quadrant():
    # float32 atan2 computes in double without branches and rounds once
    g = torch.Generator().manual_seed(2)
    y = torch.cat([torch.randn(100000, generator=g) * 10, torch.randn(1000, generator=g) * 1e-30,
                   torch.randn(1000, generator=g) * 1e30])
    x = torch.cat([torch.randn(100000, generator=g) * 10, torch.randn(1000, generator=g) * 1e30,
                   torch.randn(1000, generator=g) * 1e-30])
    actual = torch.atan2(y.to("openreg"), x.to("openreg")).cpu()
    reference = torch.atan2(y.double(), x.double())
    ulp = torch.nextafter(reference.float().abs(), torch.tensor(float("inf"))).double() - reference.float().abs().double()
    assert ((actual.double() - reference).abs() / ulp).max().item() <= 1.0
    assert torch.equal(torch.signbit(actual), torch.signbit(reference))


def test_pow_of_tensors_and_its_special_values_match_cpu():
    special = torch.tensor([-2.0, -0.5, 0.0, -0.0, 2.0, float("inf"), float("-inf"), float("nan"), 1.0, -1.0])
    base, exponent = torch.meshgrid(special, torch.tensor([3.0, 2.0, -1.0, -3.0, 0.5, -2.5, 0.0, float("nan"),
                                                           float("inf"), -float("inf")]), indexing="ij")
    for dtype in (torch.float32, torch.float64):
        _check(torch.pow, base.to(dtype), exponent.to(dtype))
    ints = torch.tensor([2, -3, 0, 1, -1, 5, 7])
    _check(torch.pow, ints, torch.tensor([3, 3, 0, -2, -3, 20, 30]))  # wraps like CPU
    _check(lambda x: x**-1, ints)  # integers to negative integer powers: refused like CPU


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, -2, -1, -0.5])
def test_pow_with_a_scalar_exponent_is_bit_identical_to_cpu_in_every_form(exponent):
    # 2, 3, -2 and -1 run as products and quotients (3 and -2 one engine op each, bfloat16's
    # two, rounded after each as on CPU), -0.5 as rsqrt, as on CPU; 0 and 1 as a fill and a copy.
    special = torch.tensor([-2.0, -0.5, 0.0, -0.0, 2.0, 3.7, float("inf"), float("-inf"), float("nan"), 1e-30, 1e30])
    values = torch.cat([special, torch.randn(300, generator=torch.Generator().manual_seed(4)) * 5])
    dtypes = (torch.float32, torch.float64) if exponent == -0.5 else (torch.float32, torch.float64, torch.float16,
                                                                     torch.bfloat16)
    for dtype in dtypes:
        x = values.to(dtype)
        expected = torch.pow(x, exponent)
        d = x.to("openreg")
        assert torch.equal(torch.pow(d, exponent).cpu().nan_to_num(7.0), expected.nan_to_num(7.0)), dtype
        out = torch.empty_like(d)
        torch.pow(d, exponent, out=out)
        assert torch.equal(out.cpu().nan_to_num(7.0), expected.nan_to_num(7.0)), dtype
        d.pow_(exponent)  # in place, the input also the output
        assert torch.equal(d.cpu().nan_to_num(7.0), expected.nan_to_num(7.0)), dtype
    ints = torch.arange(-5, 6)
    if float(exponent).is_integer():
        assert torch.equal(torch.pow(ints.to("openreg"), exponent if exponent >= 0 else 2).cpu(),
                           torch.pow(ints, exponent if exponent >= 0 else 2))


def test_pow_one_half_is_sqrt_as_on_cpu():
    """x ** 0.5 is sqrt for float32, float64 and bfloat16, as CPU computes it (-0 gives -0 and
    -inf NaN, where C's pow gives 0 and inf); float16's stays a pow, as CPU's does."""
    special = torch.tensor([-2.0, 0.0, -0.0, 2.0, 4.0, float("inf"), float("-inf"), float("nan"), 1e-30, 1e30])
    values = torch.cat([special, torch.randn(300, generator=torch.Generator().manual_seed(5)).abs() * 5])
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        x = values.to(dtype)
        d = x.to("openreg")
        results = [torch.pow(d, 0.5), d**0.5, torch.pow(d, 0.5, out=torch.empty_like(d)), d.clone().pow_(0.5)]
        # the correctly rounded root (CPU's own sqrt is off by an ulp for some float32 values):
        # float64's through Python's math.sqrt, the others through float64 (a double rounding
        # that is exact for sqrt), bfloat16's through float32, as the engine computes it
        if dtype == torch.float64:
            rounded = torch.tensor([math.sqrt(v) if v >= 0 else float("nan") for v in x.tolist()], dtype=dtype)
        else:
            rounded = x.double().sqrt().float().to(dtype)
        for r in results:
            r = r.cpu()
            if dtype != torch.float16:
                assert _bits_equal(r, rounded), dtype
            n = len(special)  # the special values' results are exact on both
            assert _bits_equal(r[:n], (x**0.5)[:n]), dtype
            torch.testing.assert_close(r, x**0.5, equal_nan=True)


def test_float64_integer_powers_are_correctly_rounded():
    """Integer powers of float64 (Adam's bias corrections beta^step among them) are squared in
    double-double and rounded once: each is the exact power rounded to nearest, computed here with
    rationals, for exponents up to thousands and bases near 1, where squaring in double drifted by
    up to a few ulp. Negative exponents too, and results far below 2^-1000 (normal ones)."""
    from fractions import Fraction

    g = torch.Generator().manual_seed(11)
    base = torch.cat([1 - torch.rand(150, generator=g, dtype=torch.float64) * 0.01,
                      torch.rand(150, generator=g, dtype=torch.float64) * 3, torch.tensor([0.9, 0.999, 0.99, 0.5])])
    exponent = torch.randint(-40, 4000, (base.numel(),), generator=g).double()
    exponent[:8] = torch.tensor([1.0, 2, 3, 4, 1023, 1024, 1025, 100000])
    actual = torch.pow(base.to("openreg"), exponent.to("openreg")).cpu()
    tiny = torch.finfo(torch.float64).tiny
    checked = 0
    for x, n, got in zip(base.tolist(), exponent.tolist(), actual.tolist()):
        if abs(n) > 5000:
            continue  # the exact rational would take long; checked against CPU's below
        exact = Fraction(x) ** int(n)
        if exact != 0 and tiny <= abs(exact) <= Fraction(torch.finfo(torch.float64).max):
            assert got == float(exact), (x, n)  # float(Fraction) rounds to nearest
            checked += 1
    assert checked > 200
    # 0.999^100000 is near 3.5e-44: within one ulp of C's pow, which drifts at such exponents
    torch.testing.assert_close(actual[7:8], torch.pow(base[7:8], exponent[7:8]), rtol=2.3e-16, atol=0)
    # the ends of the range: bases near the largest double, subnormal bases, results that
    # overflow, underflow or are subnormal
    edges = torch.tensor([1e308, 2.0**1023, -1e308, 2.0**-1023, 3e-320, -3e-320, 2.0**-1022, 10.0, 0.1, 1.5])
    powers = torch.tensor([1.0, 2.0, -1.0, 3.0, -1.0, 1.0, -1.0, 308.0, 323.0, -1800.0])
    torch.testing.assert_close(torch.pow(edges.to("openreg"), powers.to("openreg")).cpu(), torch.pow(edges, powers),
                               rtol=0, atol=0)


def test_trigonometry_is_accurate_over_a_wide_range():
    x = torch.linspace(-1e5, 1e5, 200001, dtype=torch.float64)
    for fn in (torch.sin, torch.cos):
        torch.testing.assert_close(fn(x.to("openreg")).cpu(), fn(x), rtol=0, atol=1e-15)
        torch.testing.assert_close(fn(x.float().to("openreg")).cpu(), fn(x.float()), rtol=0, atol=1.2e-7)


def test_trigonometry_of_huge_arguments_reduces_exactly():
    # From 2^20 on the reduction by pi/2 takes 2/pi to 1152 bits: sin(1e300) is as exact as sin(1).
    huge = torch.logspace(5, 308, 30001, dtype=torch.float64)
    edges = torch.tensor([2.0**20, 2.0**20 - 1, 2.0**1023, torch.finfo(torch.float64).max, 1.4454398e20, 3e38])
    x = torch.cat([huge, -huge, edges, -edges])
    for dtype, atol in ((torch.float64, 5e-16), (torch.float32, 1.2e-7)):
        xs = x.to(dtype)
        xs = xs[torch.isfinite(xs)]
        for fn in (torch.sin, torch.cos):
            actual = fn(xs.to("openreg")).cpu()
            torch.testing.assert_close(actual, fn(xs), rtol=0, atol=atol)
            assert actual.abs().max() <= 1
        torch.testing.assert_close(torch.tan(xs.to("openreg")).cpu(), torch.tan(xs), rtol=4 * torch.finfo(dtype).eps,
                                   atol=atol)
    # A launch whose inputs are all small takes branch-free loops; one huge value, an infinity or a
    # NaN anywhere sends it through the exact ones, in every form (in place too) and on every worker.
    small = torch.randn(300000, generator=torch.Generator().manual_seed(7)) * 10
    for special in (3e30, float("inf"), float("nan"), 2.0**20):
        x = small.clone()
        x[123457] = special
        for fn in (torch.sin, torch.cos, torch.tan):
            d = x.to("openreg")
            torch.testing.assert_close(fn(d).cpu(), fn(x), equal_nan=True, rtol=1e-6, atol=1.2e-7)
            getattr(d, fn.__name__ + "_")()
            torch.testing.assert_close(d.cpu(), fn(x), equal_nan=True, rtol=1e-6, atol=1.2e-7)


@pytest.mark.parametrize("op", ["tanh", "sigmoid", "silu", "gelu", "gelu_tanh", "softplus", "leaky_relu", "elu", "mish",
                                "hardtanh", "sin", "cos", "tan"])
def test_activation_gradients_run_on_the_device(op):
    x = _values((7, 5), torch.float64, seed=25)
    d = x.to("openreg").requires_grad_()
    c = x.clone().requires_grad_()
    grads = []
    for t in (d, c):
        out = TRANSCENDENTAL[op](t)
        (g,) = torch.autograd.grad(out, t, torch.ones_like(out))
        grads.append(g)
    torch.testing.assert_close(grads[0].cpu(), grads[1])


def test_rounding_is_half_to_even_and_special_values_propagate():
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, float("nan"), float("inf"), -float("inf"), -0.0, 0.0])
    for fn in (torch.round, torch.floor, torch.ceil, torch.trunc, torch.sign, torch.neg, torch.abs, torch.sqrt):
        _check(fn, x, exact=True)
    y = torch.tensor([1.0, float("nan"), -2.0, 0.0, -0.0, float("inf"), 3.0, float("nan"), 5.0, -5.0])
    for fn in (torch.maximum, torch.minimum, torch.eq, torch.lt, torch.ge, torch.fmod, torch.remainder):
        _check(fn, x, y, exact=True)
    _check(lambda a: a.clamp_min(0.0), y, exact=True)


def test_ternary_ops_match_cpu():
    a, b, c = (_values((4, 6), torch.float32, seed=s) for s in (5, 6, 7))
    cond = a > 0
    _check(torch.where, cond, b, c)
    _check(lambda k, x: torch.where(k, x, 0.0), cond, b)
    _check(lambda x, y, w: torch.lerp(x, y, w), a, b, c.abs() / 8)
    _check(lambda x, y: torch.lerp(x, y, 0.3), a, b)
    _check(lambda x, y: torch.lerp(x, y, 0.7), a, b)
    _check(lambda x, y, z: torch.addcmul(x, y, z, value=0.5), a, b, c)
    _check(lambda x, y, z: torch.addcdiv(x, y, z, value=-2), a, b, c + 10)
    i = _values((4, 6), torch.int32, seed=8)
    _check(torch.where, cond, i, _values((4, 6), torch.int32, seed=9))


def test_relu_backward_runs_on_the_device():
    x = _values((6, 5), torch.float32, seed=10)
    d = x.to("openreg").requires_grad_()
    c = x.clone().requires_grad_()
    # (no reduction: the gradient is given, as reductions are not device kernels yet)
    for t in (d, c):
        out = torch.relu(t).mul(3)
        out.backward(torch.ones_like(out))
    torch.testing.assert_close(d.grad.cpu(), c.grad)


# ---- broadcasting, type promotion, scalars, strides --------------------------------------


def test_broadcasting_python_scalars_and_cpu_scalar_tensors():
    a = _values((4, 1, 5), torch.float32, seed=11)
    b = _values((3, 1), torch.float32, seed=12)
    _check(lambda x, y: x * y + 3.0 - x / 2, a, b)
    _check(lambda x: 2 ** 0 * x - 1, a)
    _check(lambda x: x + torch.tensor(2.5), a)  # a 0-dim CPU tensor stays on the CPU
    _check(lambda x: torch.tensor(2.5) * x, a)
    _check(lambda x: x > 0.1, a)
    _check(lambda x: 1 - x, a)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.int64, torch.uint8), ids=str)
def test_operands_constant_along_rows_of_every_length(dtype):
    # A (rows, 1) operand is constant along each row: it is spread over a buffer as long as the
    # buffers allow (512 float32s, 1024 float16s, ...); rows longer than that run in chunks, and
    # short rows go several to a chunk (each row's value side by side), the last chunk partial.
    shapes = [(3, n) for n in (1, 7, 256, 511, 512, 513, 1024, 1500, 2049, 4100)] + [(300, 7), (1030, 2), (64, 100)]
    for rows, n in shapes:
        x, r, c = _values((rows, n), dtype, n), _values((rows, 1), dtype, n + 1), _values((1, 1), dtype, n + 2)
        _check(lambda a, b: a * b, x, r, exact=True)
        _check(lambda a, b, k: a * b + k, x, r, c, exact=True)
        _check(lambda a, b: torch.where(a > b, a, b), x, r, exact=True)


@pytest.mark.parametrize(
    "a_dtype,b_dtype",
    [
        (torch.int32, torch.float32),
        (torch.float16, torch.float32),
        (torch.bool, torch.int64),
        (torch.uint8, torch.int8),
        (torch.bfloat16, torch.float16),
        (torch.int64, torch.float64),
        (torch.bool, torch.float16),
    ],
    ids=str,
)
def test_type_promotion_matches_cpu(a_dtype, b_dtype):
    a, b = _values((6, 4), a_dtype, 13), _values((6, 4), b_dtype, 14, nonzero=True)
    for fn in (torch.add, torch.mul, torch.maximum, torch.eq, torch.div):
        _check(fn, a, b)
    _check(lambda x: x + 2.5, a)
    _check(lambda x: x * 3, a)


def test_non_contiguous_inputs_and_outputs():
    a = _values((8, 10), torch.float32, 15)
    b = _values((10, 8), torch.float32, 16)
    _check(lambda x, y: x + y.t(), a, b)
    _check(lambda x: x[::2, 1::3] * 2, a)
    _check(lambda x: x.expand(3, 8, 10) - x, a)
    _check(lambda x, y: torch.maximum(x[:, :5], y.t()[:, 3:8]), a, b)
    d = a.to("openreg")
    out = torch.zeros(10, 8, device="openreg").t()  # a transposed out= tensor
    torch.mul(d, 2, out=out)
    torch.testing.assert_close(out.cpu(), a * 2)


def test_empty_and_zero_dim_tensors():
    _check(lambda x: x + 1, torch.zeros(0, 3))
    _check(lambda x: x * 2, torch.tensor(3.0))
    _check(lambda x, y: x - y, torch.tensor(3), torch.tensor([1, 2]))


def test_many_dimensions_that_do_not_coalesce():
    x = _values((2,) * 10, torch.float32, 17).permute(9, 3, 1, 7, 0, 5, 2, 8, 4, 6)
    _check(lambda t: t * 3 + 1, x)


# ---- in-place and out= forms -----------------------------------------------------------


def test_in_place_forms_match_cpu():
    a, b = _values((5, 5), torch.float32, 18), _values((5, 5), torch.float32, 19)
    for method in ("add_", "sub_", "mul_", "div_", "clamp_min_"):
        arg = b if method != "clamp_min_" else 0.25
        c, d = a.clone(), a.to("openreg")
        getattr(c, method)(arg)
        getattr(d, method)(arg.to("openreg") if isinstance(arg, torch.Tensor) else arg)
        torch.testing.assert_close(d.cpu(), c)
    i = torch.tensor(range(10), device="openreg")
    i.mul_(3).add_(1).bitwise_and_(6)
    assert i.cpu().tolist() == [((k * 3 + 1) & 6) for k in range(10)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64], ids=str)
@pytest.mark.parametrize("n", [7, 16, 1000, 70001])
def test_outputs_that_are_inputs_match_cpu(n, dtype):
    """The output is the first input, the second, the third or two of them (the engine's in-place
    row loops read the input through the output), over lengths below, at and past its vector width
    and over a parallel launch's threshold, with a broadcast operand and a Python scalar."""
    a, b, c = (_values((n,), dtype, seed, nonzero=True) for seed in (40, 41, 42))
    row = _values((1,), dtype, 43, nonzero=True)
    cases = [
        ("x.add_(y)", lambda x, y, z, r: x.add_(y)),
        ("x.sub_(y, alpha=2)", lambda x, y, z, r: x.sub_(y, alpha=2)),
        ("torch.mul(x, y, out=y)", lambda x, y, z, r: torch.mul(x, y, out=y)),
        ("torch.sub(x, y, out=y)", lambda x, y, z, r: torch.sub(x, y, out=y)),
        ("x.add_(x)", lambda x, y, z, r: x.add_(x)),
        ("x.mul_(3)", lambda x, y, z, r: x.mul_(3)),
        ("x.neg_()", lambda x, y, z, r: x.neg_()),
        ("x.mul_(r) (broadcast)", lambda x, y, z, r: x.mul_(r)),
        ("x.addcmul_(y, z)", lambda x, y, z, r: x.addcmul_(y, z)),
        ("torch.addcmul(x, y, z, out=z)", lambda x, y, z, r: torch.addcmul(x, y, z, out=z)),
        ("x.masked_fill_(y > 0, 2)", lambda x, y, z, r: x.masked_fill_(y > 0, 2)),
        ("torch.where(y > 0, x, z, out=x)", lambda x, y, z, r: torch.where(y > 0, x, z, out=x)),
        ("torch.where(y > 0, z, x, out=x)", lambda x, y, z, r: torch.where(y > 0, z, x, out=x)),
    ]
    if dtype.is_floating_point:
        cases += [
            ("x.div_(y)", lambda x, y, z, r: x.div_(y)),
            ("x.lerp_(y, 0.25)", lambda x, y, z, r: x.lerp_(y, 0.25)),
            ("x.addcdiv_(y, z, value=-0.5)", lambda x, y, z, r: x.addcdiv_(y, z, value=-0.5)),
            ("x.tanh_()", lambda x, y, z, r: x.tanh_()),
        ]
    for name, fn in cases:
        cpu = [t.clone() for t in (a, b, c, row)]
        dev = [t.to("openreg") for t in (a, b, c, row)]
        fn(*cpu)
        fn(*dev)
        for want, got in zip(cpu, dev):
            torch.testing.assert_close(got.cpu(), want, msg=lambda m, name=name: f"{name}: {m}")


def test_vector_fused_multiply_adds_equal_the_element_loop():
    """add with alpha, addcmul and lerp with a scalar weight run a SIMD row loop for contiguous float32
    (fused multiply-adds four lanes at a time); strided operands take the element loop. Both
    compute the same operations, so the results are equal bit for bit, in place or not."""
    n = 4099  # a vector tail
    values = [_values((n,), torch.float32, seed) for seed in (50, 51, 52)]

    def operands(stride):
        out = []
        for v in values:
            t = torch.zeros(stride * n, device="openreg")[::stride]
            out.append(t.copy_(v.to("openreg")))
        return out

    cases = [
        lambda x, y, z: torch.add(x, y, alpha=0.3),
        lambda x, y, z: torch.sub(x, y, alpha=-2.5),
        lambda x, y, z: torch.addcmul(x, y, z, value=0.1),
        lambda x, y, z: torch.addcmul(x, y, z),
        lambda x, y, z: torch.lerp(x, y, 0.25),
        lambda x, y, z: torch.lerp(x, y, 0.75),
        lambda x, y, z: x.add_(y, alpha=1e-3),
        lambda x, y, z: x.addcmul_(y, z, value=-0.5),
        lambda x, y, z: x.lerp_(y, 0.9),
    ]
    for fn in cases:
        fast, element = fn(*operands(1)), fn(*operands(2))
        assert torch.equal(fast.cpu(), element.cpu())
        torch.testing.assert_close(fast.cpu(), fn(*[v.clone() for v in values]))


def _round_to_float32(q):
    """The float32 nearest the rational q, ties to even (q in float32's normal range)."""
    if q == 0:
        return 0.0
    sign, q = (-1 if q < 0 else 1), abs(q)
    exponent = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** exponent > q:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= q:
        exponent += 1
    ulp = Fraction(2) ** (exponent - 23)
    return sign * float(round(q / ulp) * ulp)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_float32_multiply_adds_round_once(layout):
    """add with alpha, addcmul and lerp compute a * b + c as one fused multiply-add, rounded once,
    as torch's vectorized CPU kernels do. Computing it in double and rounding that to float rounds
    twice: for a = 1 + 2^-18, b = 2^-24 (1 - 2^-18), c = 1 + 2^-23 the exact value lies just below
    the midpoint between c and the next float, the double lands on the midpoint, and the tie then
    rounds up. Checked against the exact value, correctly rounded, and against CPU."""
    a, b, c = 1 + 2**-18, 2**-24 * (1 - 2**-18), 1 + 2**-23
    n = 37  # vector steps and an odd end
    stride = 1 if layout == "contiguous" else 3

    def full(value):
        return torch.full((n * stride,), value, device="openreg")[::stride]

    want = _round_to_float32(Fraction(a) * Fraction(b) + Fraction(c))
    assert want == c  # and the twice-rounded value is not
    assert float(torch.tensor((a * b + c), dtype=torch.float64).float()) != want
    cases = {
        "add(alpha)": lambda x, y, z: torch.add(z, x, alpha=b),
        "addcmul": lambda x, y, z: torch.addcmul(z, x, y),
        "addcmul_": lambda x, y, z: z.clone().addcmul_(x, y),
    }
    for name, fn in cases.items():
        got = fn(full(a), full(b), full(c)).cpu()
        assert got.eq(want).all(), f"{name}: {got.unique().tolist()} != {want}"
        cpu = fn(torch.full((n,), a), torch.full((n,), b), torch.full((n,), c))
        assert torch.equal(got, cpu), name
    # Random operands: every element is the exact value rounded once.
    x, y, z = (_values((n,), torch.float32, seed) for seed in (60, 61, 62))
    d = [full(0.0).copy_(v.to("openreg")) for v in (x, y, z)]
    got = torch.addcmul(d[2], d[0], d[1], value=0.5).cpu()
    for i in range(n):
        # value * x rounds first, as on CPU; times 0.5 it is exact
        exact = Fraction(0.5) * Fraction(float(x[i])) * Fraction(float(y[i])) + Fraction(float(z[i]))
        assert float(got[i]) == _round_to_float32(exact), i


def test_in_place_errors_match_cpu():
    i = torch.ones(3, dtype=torch.int64, device="openreg")
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        i.add_(1.5)
    small = torch.ones(3, device="openreg")
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        small.add_(torch.ones(2, 3, device="openreg"))


def test_out_forms_resize_and_check_like_cpu():
    a, b = _values((4, 3), torch.float32, 20), _values((4, 3), torch.float32, 21)
    d, e = a.to("openreg"), b.to("openreg")
    out = torch.empty(4, 3, device="openreg")
    assert torch.add(d, e, out=out) is out
    torch.testing.assert_close(out.cpu(), a + b)
    wrong_shape = torch.empty(7, device="openreg")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.mul(d, e, out=wrong_shape)
    assert wrong_shape.shape == (4, 3) and any("resized" in str(w.message) for w in caught)
    torch.testing.assert_close(wrong_shape.cpu(), a * b)
    double = torch.empty(4, 3, dtype=torch.float64, device="openreg")
    torch.add(d, e, out=double)  # computed in float32, stored as float64, as on CPU
    torch.testing.assert_close(double.cpu(), torch.add(a, b, out=torch.empty(4, 3, dtype=torch.float64)))
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.add(d, e, out=torch.empty(4, 3, dtype=torch.int32, device="openreg"))
    mask = torch.empty(4, 3, dtype=torch.bool, device="openreg")
    torch.gt(d, e, out=mask)
    assert torch.equal(mask.cpu(), a > b)


# ---- errors ----------------------------------------------------------------------------


def test_unsupported_dtypes_raise_like_cpu():
    f = torch.ones(3, device="openreg")
    with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
        torch.bitwise_and(f, f)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        torch.lerp(torch.ones(2, dtype=torch.int64, device="openreg"), torch.ones(2, dtype=torch.int64, device="openreg"), 0.5)
    with pytest.raises(RuntimeError, match="value cannot be converted to type uint8_t without overflow"):
        torch.zeros(2, dtype=torch.uint8, device="openreg").fill_(300)


def test_tensors_on_two_devices_are_rejected():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="openreg:0") + torch.ones(2, device="openreg:1")


def test_integer_division_by_zero_is_reported_and_the_device_stays_usable():
    x = torch.tensor([4, 5], device="openreg")
    with pytest.raises(RuntimeError, match="divide-by-zero"):
        (x // torch.zeros(2, dtype=torch.int64, device="openreg")).cpu()
    assert (x * 2).cpu().tolist() == [8, 10]


# ---- copies and fills on the device ------------------------------------------------------


@pytest.mark.parametrize("dst", ALL, ids=str)
@pytest.mark.parametrize("src", ALL, ids=str)
def test_dtype_conversions_run_on_the_device(src, dst):
    x = _values((40,), src, seed=22)
    if src.is_floating_point:
        x = torch.cat([x, torch.tensor([0.5, -0.5, 1e-3, 300.7, -129.0, 70000.0], dtype=torch.float64).to(src)])
    torch.openreg.reset_op_counts()
    d = x.to("openreg").to(dst)
    counts = torch.openreg.op_counts()
    assert counts["aten::_copy_from"]["fallback"] == 0
    torch.testing.assert_close(d.cpu(), x.to(dst), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("half", (torch.float16, torch.bfloat16), ids=str)
def test_half_conversions_match_cpu_bit_for_bit(half):
    # every half (subnormals, infinities, NaNs included) to float32, and float32 values at
    # and around every rounding boundary (the ties round to even) back
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    halves = bits.view(half)
    wide = halves.to("openreg").float().cpu()
    nan = halves.isnan()
    assert torch.equal(wide.isnan(), nan)
    assert torch.equal(wide[~nan].view(torch.int32), halves[~nan].float().view(torch.int32))
    finite = halves[halves.isfinite()].double().unique()
    ties = (finite[:-1] + finite[1:]) / 2
    values = torch.cat([finite, ties, torch.nextafter(ties, torch.tensor(float("inf"), dtype=torch.float64)),
                        torch.nextafter(ties, torch.tensor(-float("inf"), dtype=torch.float64)),
                        torch.tensor([1e30, -1e30, 65520.0, -65520.0, 3.4e38, float("inf"), float("nan")],
                                     dtype=torch.float64)]).float()
    narrow = values.to("openreg").to(half).cpu()
    expected = values.to(half)
    nan = expected.isnan()
    assert torch.equal(narrow.isnan(), nan)
    assert torch.equal(narrow[~nan].view(torch.int16), expected[~nan].view(torch.int16))
    # strided (the element-by-element loops) agree with the contiguous ones
    assert torch.equal(values.to("openreg")[::3].to(half).cpu().view(torch.int16)[~nan[::3]],
                       expected[::3].view(torch.int16)[~nan[::3]])


def test_layout_changes_run_on_the_device_within_and_across_devices():
    x = _values((6, 8), torch.float32, 23)
    d = x.to("openreg:0")
    torch.openreg.reset_op_counts()
    t = d.t().contiguous()
    assert t.is_contiguous() and torch.equal(t.cpu(), x.t().contiguous())
    other = d.t().to("openreg:1", torch.float16)
    assert other.device == torch.device("openreg:1")
    torch.testing.assert_close(other.cpu(), x.t().half(), rtol=0, atol=0)
    target = torch.zeros(8, 12, device="openreg:1")
    target[:, ::2].copy_(d.t())  # a strided destination on another device
    expected = torch.zeros(8, 12)
    expected[:, ::2] = x.t()
    assert torch.equal(target.cpu(), expected)
    host_target = torch.zeros(8, 6, dtype=torch.float64)
    host_target.copy_(d.t())
    assert torch.equal(host_target, x.t().double())
    assert all(c["fallback"] == 0 for c in torch.openreg.op_counts().values())


def test_host_to_device_into_a_strided_view_keeps_the_gaps():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    d = base.to("openreg")
    d[:, 1::2] = torch.full((4, 3), -1.0, dtype=torch.float64)
    expected = base.clone()
    expected[:, 1::2] = -1.0
    assert torch.equal(d.cpu(), expected)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_fill_and_zero_for_every_dtype(dtype):
    value = True if dtype == torch.bool else 7
    d = torch.empty(5, 3, dtype=dtype, device="openreg")
    d.fill_(value)
    assert torch.equal(d.cpu(), torch.full((5, 3), value, dtype=dtype))
    d[:, 1].zero_()
    expected = torch.full((5, 3), value, dtype=dtype)
    expected[:, 1] = 0
    assert torch.equal(d.cpu(), expected)


# ---- property tests: random shapes, broadcasting, strides, dtypes -----------------------

_DTYPES = st.sampled_from([torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.uint8, torch.bool])


@st.composite
def _operands(draw):
    ndim = draw(st.integers(0, 4))
    shape = [draw(st.integers(1, 5)) for _ in range(ndim)]
    # b broadcasts: some of its dimensions are 1 or missing.
    b_shape = [s if draw(st.booleans()) else 1 for s in shape][draw(st.integers(0, ndim)) :]
    a = _values(shape, draw(_DTYPES), seed=draw(st.integers(0, 1000)))
    b = _values(b_shape, draw(_DTYPES), seed=draw(st.integers(0, 1000)))
    if ndim >= 2 and draw(st.booleans()):
        a = a.transpose(0, ndim - 1)
    return a, b


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_operands(), st.sampled_from(["add", "mul", "maximum", "eq", "lt", "where"]))
def test_random_shapes_strides_and_dtypes_match_cpu(operands, op):
    a, b = operands
    with torch.openreg.fallback_policy("error"):
        if op == "where":
            _check(lambda x, y: torch.where(x > 0, x, y), a, b)
        elif a.dtype == torch.bool and b.dtype == torch.bool and op == "add":
            _check(torch.logical_or, a, b)
        else:
            _check(getattr(torch, op), a, b)


def test_a_0_dim_input_wider_than_the_result_dtype_is_converted_first():
    # Type promotion lets a 0-dim tensor keep the result's dtype narrower than its own: CPU converts
    # its value first (int32 -6 is 250 as uint8; 1/3 rounds to float16), and so does the device.
    a = torch.tensor([[44, 3]], dtype=torch.uint8)
    for scalar in (torch.tensor(-6, dtype=torch.int32), torch.tensor(300, dtype=torch.int64)):
        for op in (torch.maximum, torch.add, torch.lt):
            with torch.openreg.fallback_policy("error"):
                _check(op, a, scalar, exact=True)  # a device 0-dim tensor
                _check(lambda x, y: op(x, y.cpu()), a, scalar, exact=True)  # a CPU scalar
    h = torch.tensor([1.0, 2.0], dtype=torch.float16)
    third = torch.tensor(1 / 3, dtype=torch.float64)
    with torch.openreg.fallback_policy("error"):
        _check(torch.mul, h, third, exact=True)
        _check(lambda x, y: torch.mul(x, y.cpu()), h, third, exact=True)


# ---- the fallback policy --------------------------------------------------------------


def test_error_policy_names_the_op_before_any_data_moves():
    x = torch.ones(4, device="openreg")
    torch.openreg.reset_op_counts()
    with pytest.raises(RuntimeError, match=r"aten::special_zeta.*fallback policy is 'error'"):
        torch.special.zeta(x, x)
    assert torch.openreg.op_counts().get("aten::special_zeta", {}).get("fallback", 0) == 0


def test_warn_policy_warns_once_per_op_and_allow_is_silent():
    x = torch.ones(4, device="openreg")
    with torch.openreg.fallback_policy("warn"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.special.zeta(x, x)
            torch.special.zeta(x, x)
        messages = [str(w.message) for w in caught if "aten::special_zeta" in str(w.message)]
        assert len(messages) == 1, messages
    with torch.openreg.fallback_policy("allow"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.special.zeta(x, x)
    assert torch.openreg.get_fallback_policy() == "error"  # restored by the context manager


def test_bad_policies_are_rejected():
    with pytest.raises(ValueError, match="not one of allow, warn, error"):
        torch.openreg.set_fallback_policy("sometimes")
    with pytest.raises(TypeError):
        torch.openreg.set_fallback_policy(2)


def test_the_policy_comes_from_the_environment():
    code = (
        "import torch, torch_openreg\n"
        "print(torch.openreg.get_fallback_policy())\n"
        "x = torch.ones(2, device='openreg')\n"
        "print((x + 1).cpu().tolist())\n"
        "try:\n    torch.special.zeta(x, x)\nexcept RuntimeError as e:\n    print('refused', 'aten::special_zeta' in str(e))\n"
    )
    env = {"OPENREG_FALLBACK": "error", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split("\n")[:3] == ["error", "[2.0, 2.0]", "refused True"], out.stderr
    env["OPENREG_FALLBACK"] = "bogus"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "OPENREG_FALLBACK" in out.stderr and "not one of allow, warn, error" in out.stderr, out.stderr


def _bits_equal(actual, expected):
    """The same values bit for bit (so -0 differs from 0), any NaN equal to any NaN."""
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[expected.dtype.itemsize]
    same = (actual.isnan() & expected.isnan()) | (actual.view(bits) == expected.view(bits))
    return bool(same.all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_fmod_remainder_and_floor_division_are_exact_in_every_lane(dtype):
    """float32's fmod runs four lanes at a time in double arithmetic and hands the lanes it does
    not cover (zero or infinite divisors, infinite or NaN dividends, quotients of 2^29 and more,
    subnormal divisors) to the exact long division. Every lane of a long row, of a scalar
    divisor and of a strided view must equal the exact remainder (float64's fmod of the same
    values, which is exact, rounded back); % and // must equal CPU's wherever CPU's own kernel
    is exact (quotients below 2^20, no subnormal divisor). 16-bit inputs compute in float32,
    so their oracle is CPU's float32 result rounded (CPU's float16 // rounds differently)."""
    g = torch.Generator().manual_seed(3)
    n = 4099
    x = (torch.randn(n, generator=g, dtype=torch.float64) * 30).to(dtype)
    y = (torch.randn(n, generator=g, dtype=torch.float64) * 2).to(dtype)
    specials = [0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"), float("nan"), 6e4, -6e4, 1e-7]
    for k, value in enumerate(specials):
        x[k::97] = value
        y[(k + 5)::89] = value
    # exact multiples: a zero remainder takes the dividend's sign
    x[:4] = torch.tensor([-6.0, 6.0, -7.5, 7.5], dtype=dtype)
    y[:4] = torch.tensor([2.0, -3.0, 2.5, -2.5], dtype=dtype)
    if dtype == torch.float32:
        x[3::101], y[3::101] = 3.0e38, 0.7  # a quotient far beyond 2^29
        y[7::103] = 1e-44  # a subnormal divisor
    xo, yo = x.to("openreg"), y.to("openreg")
    exact = torch.fmod(x.double(), y.double()).to(dtype)
    assert _bits_equal(torch.fmod(xo, yo).cpu(), exact)
    assert _bits_equal(torch.fmod(xo[::3], yo[::3]).cpu(), exact[::3])
    divisor = float(torch.tensor(0.7, dtype=dtype))  # 0.7 as the dtype holds it
    assert _bits_equal(torch.fmod(xo, 0.7).cpu(), torch.fmod(x.double(), divisor).to(dtype))
    ordinary = (x.double() / y.double()).abs() < 2**20
    ordinary &= (y.double().abs() > 1e-30) | (y == 0)
    for op in (torch.remainder, lambda a, b: a // b, lambda a, b: torch.div(a, b, rounding_mode="floor")):
        actual, expected = op(xo, yo).cpu(), op(x.float(), y.float()).to(dtype)
        assert _bits_equal(actual[ordinary], expected[ordinary])
        assert _bits_equal(op(xo, 1.5).cpu(), op(x.float(), 1.5).to(dtype))


def test_logic_on_bool_tensors_runs_on_bytes_like_cpu():
    """and, or, xor, not (logical and bitwise), == and != of bool tensors run a byte per element,
    16 at a time in a contiguous row, and with a scalar 0 or 1 (mask != 0, mask == True) too; other
    scalars and strided rows take the general loops. Lengths around the vector width, in place."""
    g = torch.Generator().manual_seed(9)
    for n in (1, 15, 16, 17, 100, 4099):
        a, b = torch.rand(n, generator=g) > 0.5, torch.rand(n, generator=g) > 0.3
        for fn in (lambda x, y: x & y, lambda x, y: x | y, lambda x, y: x ^ y, torch.logical_and, torch.logical_or,
                   torch.logical_xor, torch.eq, torch.ne, lambda x, y: ~x, torch.logical_not,
                   lambda x, y: x != 0, lambda x, y: x == 1, lambda x, y: x == True, lambda x, y: x != 2,  # noqa: E712
                   lambda x, y: x[::2] & y[1::2], lambda x, y: x.clone().logical_and_(y), lambda x, y: x.clone().__ixor__(y)):
            _check(fn, a, b, exact=True)
