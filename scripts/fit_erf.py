"""Fits the polynomial behind the near branch of math.h's float32 erf (m_erf_f32, v_erf_f32):
erf x ~ x P(x^2 - 2) for |x| < 2, P of degree 9, minimising the largest relative error.

The variable is centred (u = x^2 - 2 on [-2, 2]): in powers of x^2 itself the fit's float32
coefficients cancel and the result erred by 5 ulp or more. Weighted least squares with Lawson's
reweighting towards the minimax fit, then the coefficients are rounded to float32 one at a time,
lowest first, each rounding followed by a refit of the ones above it. Prints them lowest degree
first, then the largest error in float32 ulp of x P(x^2 - 2) evaluated as the engine does (u
rounded to float32, Horner's rule with each step fused) against math.erf over a dense grid of
[0, 2). Run: python scripts/fit_erf.py
"""

import math

import numpy as np

DEGREE, Z_MAX, SHIFT = 9, 4.0, 2.0


def erf_over_x(z):
    x = np.sqrt(z)
    return np.array([math.erf(v) / v if v > 0 else 2 / math.sqrt(math.pi) for v in x])


def fit():
    n = 8000
    z = (np.cos(np.pi * (np.arange(n) + 0.5) / n) + 1) / 2 * Z_MAX  # Chebyshev nodes on [0, Z_MAX]
    f = erf_over_x(z)
    powers = np.vander(z - SHIFT, DEGREE + 1, increasing=True)
    weights = np.ones(n)
    for _ in range(40):
        scale = np.sqrt(weights) / f
        c, *_ = np.linalg.lstsq(powers * scale[:, None], f * scale, rcond=None)
        error = np.abs(powers @ c - f) / f
        weights = weights * (error + 1e-30)
        weights /= weights.sum()
    rounded = np.zeros(DEGREE + 1, dtype=np.float32)
    for i in range(DEGREE + 1):
        rounded[i] = np.float32(c[i])
        if i < DEGREE:
            rest = f - powers[:, : i + 1] @ rounded[: i + 1].astype(np.float64)
            c[i + 1 :], *_ = np.linalg.lstsq(powers[:, i + 1 :] / f[:, None], rest / f, rcond=None)
    return rounded


def worst_ulp(c):
    x = np.concatenate([np.linspace(0, 2, 300001), np.logspace(-30, math.log10(2), 3001)]).astype(np.float32)
    x = x[x < 2]
    z = x * x
    u = (z - np.float32(SHIFT)).astype(np.float32)
    p = np.full_like(u, c[-1])
    for ci in c[-2::-1]:  # a fused step: the exact product and sum, rounded once
        p = (p.astype(np.float64) * u.astype(np.float64) + np.float64(ci)).astype(np.float32)
    got = (x * p).astype(np.float64)
    reference = np.array([math.erf(float(v)) for v in x])
    ulp = np.spacing(np.abs(reference.astype(np.float32))).astype(np.float64)
    return float((np.abs(got - reference) / ulp).max())


def main():
    c = fit()
    print(", ".join(np.format_float_scientific(v, precision=9, unique=False) + "f" for v in c))
    print(f"largest error on [0, 2): {worst_ulp(c):.2f} ulp")


if __name__ == "__main__":
    main()
