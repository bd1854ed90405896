"""Fits the rational function behind math.h's m_tanh_f32: tanh x ~ x P(x^2) / Q(x^2) on
[0, 9.1], P of degree 5, Q of degree 4 with Q(0) = 1, minimising the largest relative error.

Linearised least squares (P - f Q, weighted by 1 / (f Q) of the previous step, Sanathanan-Koerner)
to a start, then Lawson's reweighting towards the minimax fit; the variable is scaled to [0, 1]
while fitting so the system stays well conditioned. Prints the coefficients of P and Q in x^2,
lowest degree first, and the largest relative error in double. Run: python scripts/fit_tanh.py
"""

import numpy as np

P_DEGREE, Q_DEGREE, X_MAX = 5, 4, 9.1


def main():
    x = np.concatenate([np.linspace(0, X_MAX, 40001), X_MAX * (1 - np.cos(np.linspace(0, np.pi / 2, 20001)))])
    x = np.unique(x[x > 0])
    u = x * x / (X_MAX * X_MAX)
    f = np.tanh(x) / x

    def solve(q_previous, weights):
        scale = np.sqrt(weights) / (f * q_previous)
        powers_p = u[:, None] ** np.arange(P_DEGREE + 1)
        powers_q = f[:, None] * u[:, None] ** np.arange(1, Q_DEGREE + 1)
        c, *_ = np.linalg.lstsq(np.concatenate([powers_p, -powers_q], axis=1) * scale[:, None], f * scale, rcond=None)
        p, q = c[: P_DEGREE + 1], np.concatenate([[1.0], c[P_DEGREE + 1 :]])
        q_values = np.polyval(q[::-1], u)
        return p, q, q_values, (np.polyval(p[::-1], u) / q_values - f) / f

    q_values, weights = np.ones_like(u), np.ones_like(u)
    for _ in range(30):
        p, q, q_values, error = solve(q_values, weights)
    best = None
    for _ in range(300):
        p, q, q_values, error = solve(q_values, weights)
        if best is None or np.abs(error).max() < best[0]:
            best = (np.abs(error).max(), p, q)
        weights = weights * (np.abs(error) + 1e-30)
        weights /= weights.sum()
    worst, p, q = best
    s_scale = X_MAX * X_MAX
    print("P:", ", ".join("%.17e" % c for c in p * s_scale ** -np.arange(P_DEGREE + 1.0)))
    print("Q:", ", ".join("%.17e" % c for c in q * s_scale ** -np.arange(Q_DEGREE + 1.0)))
    print("largest relative error: %.3g" % worst)


if __name__ == "__main__":
    main()
