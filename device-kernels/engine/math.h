/*
 * math.h: the elementary functions of the engine (a wasm module has no libm).
 *
 * Every function is written for this engine: range reduction plus a
 * polynomial, with selects instead of branches so that loops over it
 * vectorize (the float32 polynomials are Chebyshev interpolants fitted for
 * the engine, or Taylor series; sin, cos, tan, pow and the hyperbolic and
 * inverse hyperbolic functions of float32 compute in double and round once).
 * Accuracy: a few ulp, within what PyTorch's OpInfo tests allow for CPU
 * results (tests/python/test_engine.py measures ulp against float64 and
 * compares with torch's CPU kernels). Results depend only on the inputs: the
 * same on every host.
 *
 * Included by every kernel family through dtype.h.
 */
#ifndef OPENREG_ENGINE_MATH_H
#define OPENREG_ENGINE_MATH_H

#include <stdint.h>
#include <wasm_simd128.h>

#define MATH_INLINE static inline __attribute__((always_inline))

MATH_INLINE float m_f32_from_bits(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

MATH_INLINE uint32_t m_f32_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}

MATH_INLINE double m_f64_from_bits(uint64_t u) {
  double d;
  __builtin_memcpy(&d, &u, 8);
  return d;
}

MATH_INLINE uint64_t m_f64_bits(double d) {
  uint64_t u;
  __builtin_memcpy(&u, &d, 8);
  return u;
}

/* The magnitude of `magnitude` with the sign of `sign`, by bits: SIMD has no
 * copysign, and clang would copy lane by lane. */
MATH_INLINE float m_copysign_f32(float magnitude, float sign) {
  return m_f32_from_bits((m_f32_bits(magnitude) & 0x7fffffffu) | (m_f32_bits(sign) & 0x80000000u));
}

/* 2^n for integer n in [-252, 254] (float) as two factors, each a normal
 * number, so a product with them can reach the subnormal range. */
MATH_INLINE float m_scale_f32(float p, int32_t n) {
  const int32_t n1 = n >> 1; /* a shift, not n / 2: SIMD has no integer division */
  const int32_t n2 = n - n1;
  return p * m_f32_from_bits((uint32_t)(n1 + 127) << 23) * m_f32_from_bits((uint32_t)(n2 + 127) << 23);
}

MATH_INLINE double m_scale_f64(double p, int64_t n) {
  const int64_t n1 = n >> 1;
  const int64_t n2 = n - n1;
  return p * m_f64_from_bits((uint64_t)(n1 + 1023) << 52) * m_f64_from_bits((uint64_t)(n2 + 1023) << 52);
}

/* An integer-valued k (|k| < 2^22, or 2^51 in double) as an integer, from the
 * low bits of k + 1.5 * 2^23 (2^52): SIMD converts floats to integers only
 * with saturation, which costs several instructions per vector, or not at all
 * from double. */
MATH_INLINE int32_t m_int_of_f32(float k) {
  return (int32_t)(m_f32_bits(k + 12582912.0f) - m_f32_bits(12582912.0f));
}

MATH_INLINE int64_t m_int_of_f64(double k) {
  return (int64_t)(m_f64_bits(k + 6755399441055744.0) - m_f64_bits(6755399441055744.0));
}

/* ---- exp ---- */

/* e^x: x = k ln2 + r, |r| <= ln2 / 2 (ln2 split in two so k ln2 is exact),
 * e^r by its Taylor polynomial, times 2^k. The polynomial is 1 + (r + r^2 h)
 * with h(r) = 1/2 + r/6 + ... by Estrin's scheme (pairs of terms, then
 * pairs of pairs): Horner's rule made one chain of 14 dependent operations,
 * and a vector loop of exp waited on that chain's latency. float32 exp took
 * 15-20% less time, and its worst error over every float with a finite,
 * normal result fell from 1.22 to 1.05 ulp (checked exhaustively against
 * double). Adding 1 and r last keeps the rounding of the large terms to two
 * operations, as in Horner's rule. */
MATH_INLINE float m_exp_poly_f32(float r) { /* e^r for |r| <= ln2 / 2 */
  const float r2 = r * r;
  const float h = ((0.5f + r * (1.0f / 6.0f)) + r2 * (1.0f / 24.0f + r * (1.0f / 120.0f))) +
                  (r2 * r2) * (1.0f / 720.0f + r * (1.0f / 5040.0f));
  return 1.0f + (r + r2 * h);
}

/* Outside [-110, 89] e^x is below half the smallest subnormal or above the
 * largest float, and the scaling rounds it to 0 or inf by itself; clamping x
 * there (two min/max, where testing the result took three compares and
 * selects, and k a clamp of its own) keeps k inside m_scale_f32's range.
 * Every float gave the same bits as testing the result did (checked
 * exhaustively against that version, with the same polynomial). */
MATH_INLINE float m_exp_f32(float x) {
  float xc = x < -110.0f ? -110.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  const float k = __builtin_rintf(xc * 1.44269504088896341f);
  const float r = (xc - k * 0.693145751953125f) - k * 1.428606765330187045e-06f;
  const float y = m_scale_f32(m_exp_poly_f32(r), m_int_of_f32(k));
  return x != x ? x : y;
}

MATH_INLINE double m_exp_f64(double x) {
  const double k = __builtin_rint(x * 1.44269504088896338700e+00);
  const double r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
  /* 1 + (r + r^2 h), h = 1/2! + r/3! + ... + r^11/13! by Estrin's scheme (m_exp_poly_f32) */
  const double r2 = r * r, r4 = r2 * r2;
  const double h0 = (1.0 / 2.0 + r * (1.0 / 6.0)) + r2 * (1.0 / 24.0 + r * (1.0 / 120.0));
  const double h1 = (1.0 / 720.0 + r * (1.0 / 5040.0)) + r2 * (1.0 / 40320.0 + r * (1.0 / 362880.0));
  const double h2 = (1.0 / 3628800.0 + r * (1.0 / 39916800.0)) + r2 * (1.0 / 479001600.0 + r * (1.0 / 6227020800.0));
  const double p = 1.0 + (r + r2 * ((h0 + r4 * h1) + (r4 * r4) * h2));
  const int64_t n = m_int_of_f64(k < -2100.0 ? -2100.0 : k > 2046.0 ? 2046.0 : k); /* NaN: any n */
  double y = m_scale_f64(p, n);
  y = x > 709.782712893383973096 ? __builtin_inf() : y;
  y = x < -746.0 ? 0.0 : y;
  return x != x ? x : y;
}

/* 2^x = 2^k e^(r ln2), k = rint(x), r = x - k exact. */
MATH_INLINE float m_exp2_f32(float x) {
  const float k = __builtin_rintf(x);
  const float p = m_exp_poly_f32((x - k) * 0.693147180559945309f);
  const int32_t n = m_int_of_f32(k < -252.0f ? -252.0f : k > 254.0f ? 254.0f : k);
  float y = m_scale_f32(p, n);
  y = x >= 128.0f ? __builtin_inff() : y;
  y = x < -151.0f ? 0.0f : y;
  return x != x ? x : y;
}

MATH_INLINE double m_exp2_f64(double x) {
  const double k = __builtin_rint(x);
  const double p = m_exp_f64((x - k) * 6.93147180559945309417e-01);
  const int64_t n = m_int_of_f64(k < -2100.0 ? -2100.0 : k > 2046.0 ? 2046.0 : k);
  double y = m_scale_f64(p, n);
  y = x >= 1024.0 ? __builtin_inf() : y;
  y = x < -1080.0 ? 0.0 : y;
  return x != x ? x : y;
}

/* e^x - 1, accurate near 0: a Taylor polynomial on |x| < ln2 / 2, else exp - 1. */
MATH_INLINE float m_expm1_f32(float x) {
  const float x2 = x * x; /* Estrin's scheme, as m_exp_poly_f32 */
  const float p = ((0.5f + x * (1.0f / 6.0f)) + x2 * (1.0f / 24.0f + x * (1.0f / 120.0f))) +
                  (x2 * x2) * ((1.0f / 720.0f + x * (1.0f / 5040.0f)) + x2 * (1.0f / 40320.0f));
  const float small = x + x2 * p;
  return __builtin_fabsf(x) < 0.34657359f ? small : m_exp_f32(x) - 1.0f;
}

MATH_INLINE double m_expm1_f64(double x) {
  if (!(__builtin_fabs(x) < 0.34657359027997264)) {
    return m_exp_f64(x) - 1.0;
  }
  double p = 1.0 / 87178291200.0; /* 1/14! */
  p = p * x + 1.0 / 6227020800.0;
  p = p * x + 1.0 / 479001600.0;
  p = p * x + 1.0 / 39916800.0;
  p = p * x + 1.0 / 3628800.0;
  p = p * x + 1.0 / 362880.0;
  p = p * x + 1.0 / 40320.0;
  p = p * x + 1.0 / 5040.0;
  p = p * x + 1.0 / 720.0;
  p = p * x + 1.0 / 120.0;
  p = p * x + 1.0 / 24.0;
  p = p * x + 1.0 / 6.0;
  p = p * x + 0.5;
  return x + x * x * p;
}

/* ---- log ---- */

/* ln x: x = 2^e m with m in [sqrt(2)/2, sqrt(2)), s = (m - 1) / (m + 1),
 * ln m = 2 atanh s = 2s (1 + s^2/3 + s^4/5 + ...), ln x = e ln2 + ln m. */
MATH_INLINE float m_log_f32(float x) {
  const int sub = x < 1.17549435e-38f;
  const float xs = sub ? x * 8388608.0f : x; /* 2^23: subnormals to normals */
  const uint32_t u = m_f32_bits(xs);
  int32_t e = (int32_t)(u >> 23) - 127 - (sub ? 23 : 0);
  float m = m_f32_from_bits((u & 0x7fffff) | 0x3f800000);
  const int big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e += big;
  const float f = m - 1.0f;
  const float s = f / (2.0f + f);
  const float z = s * s;
  float p = 1.0f / 9.0f;
  p = p * z + 1.0f / 7.0f;
  p = p * z + 1.0f / 5.0f;
  p = p * z + 1.0f / 3.0f;
  const float lnm = f - s * (f - 2.0f * z * p); /* 2s (1 + z p), as 2s = f - s f */
  const float ef = (float)e;
  float y = ef * 0.693145751953125f + (lnm + ef * 1.428606765330187045e-06f);
  y = x == 0.0f ? -__builtin_inff() : y;
  y = x < 0.0f ? __builtin_nanf("") : y;
  y = x == __builtin_inff() ? x : y;
  return x != x ? x : y;
}

/* A normal double x as 2^e m with m in [sqrt(2)/2, sqrt(2)); f = m - 1 and
 * s = f / (2 + f) (ln m = 2 atanh s), z = s^2. */
MATH_INLINE void m_log_parts_f64(double x, int32_t *e, double *f, double *s, double *z) {
  const uint64_t u = m_f64_bits(x);
  double m = m_f64_from_bits((u & 0xfffffffffffffull) | 0x3ff0000000000000ull);
  const int big = m > 1.4142135623730951;
  m = big ? m * 0.5 : m;
  *e = (int32_t)((u >> 52) & 0x7ff) - 1023 + big;
  *f = m - 1.0;
  *s = *f / (2.0 + *f);
  *z = *s * *s;
}

MATH_INLINE double m_log_f64(double x) {
  const int sub = x < 2.2250738585072014e-308;
  int32_t e;
  double f, s, z;
  m_log_parts_f64(sub ? x * 18014398509481984.0 : x, &e, &f, &s, &z); /* 2^54: subnormals to normals */
  e -= sub ? 54 : 0;
  double p = 1.0 / 23.0;
  p = p * z + 1.0 / 21.0;
  p = p * z + 1.0 / 19.0;
  p = p * z + 1.0 / 17.0;
  p = p * z + 1.0 / 15.0;
  p = p * z + 1.0 / 13.0;
  p = p * z + 1.0 / 11.0;
  p = p * z + 1.0 / 9.0;
  p = p * z + 1.0 / 7.0;
  p = p * z + 1.0 / 5.0;
  p = p * z + 1.0 / 3.0;
  const double lnm = f - s * (f - 2.0 * z * p);
  const double ed = (double)e;
  double y = ed * 6.93147180369123816490e-01 + (lnm + ed * 1.90821492927058770002e-10);
  y = x == 0.0 ? -__builtin_inf() : y;
  y = x < 0.0 ? __builtin_nan("") : y;
  y = x == __builtin_inf() ? x : y;
  return x != x ? x : y;
}

/* ln(1 + x), accurate near 0: ln(u) x / (u - 1) with u = 1 + x rounded. */
MATH_INLINE float m_log1p_f32(float x) {
  const float u = 1.0f + x;
  const float y = u == 1.0f ? x : m_log_f32(u) * (x / (u - 1.0f));
  return x == __builtin_inff() ? x : y;
}

MATH_INLINE double m_log1p_f64(double x) {
  const double u = 1.0 + x;
  if (u == 1.0) {
    return x;
  }
  return x == __builtin_inf() ? x : m_log_f64(u) * (x / (u - 1.0));
}

/* ---- hyperbolic, logistic, error function ---- */

/* tanh x = x P(x^2) / Q(x^2) for |x| <= 9.1, in double, rounded once; +-1 beyond (where
 * the float result is 1). P has degree 5 and Q degree 4: a rational function fitted for the
 * engine to tanh on [0, 9.1] (relative error 1.4e-9, scripts/fit_tanh.py), each polynomial by
 * Estrin's scheme. Every float32 result is within 0.53 ulp (all but 0.1% correctly rounded,
 * checked exhaustively against double). The float32 form through expm1, a division and two
 * branches' selects took 2.9 ns per element on one worker and erred by up to 3 ulp; this one
 * takes 2.3 (a float32 rational function erred by 6 ulp near 1). */
MATH_INLINE float m_tanh_f32(float x) {
  const float ax = __builtin_fabsf(x);
  const double a = (double)(ax < 9.1f ? ax : 9.1f), s = a * a, s2 = s * s;
  const double p = (9.99999998557353664e-01 + 1.36761418662097761e-01 * s) +
                   s2 * ((3.86359930796136182e-03 + 2.79120571258967252e-05 * s) +
                         s2 * (3.03557856625617626e-08 - 1.20337977841335395e-11 * s));
  const double q = (1.0 + 4.70094738044951277e-01 * s) +
                   s2 * ((2.72285344690548145e-02 + 3.93029418837812286e-04 * s) + 1.28070271101741824e-06 * s2);
  const float t = (float)(a * p / q);
  return x != x ? x : m_copysign_f32(t, x);
}

MATH_INLINE double m_tanh_f64(double x) {
  const double ax = __builtin_fabs(x);
  if (x != x) {
    return x;
  }
  if (ax > 19.1) {
    return __builtin_copysign(1.0, x);
  }
  const double e = m_expm1_f64(2.0 * ax);
  return __builtin_copysign(e / (e + 2.0), x);
}

/* The logistic function 1 / (1 + e^-x), as PyTorch's CPU kernel writes it. */
MATH_INLINE float m_sigmoid_f32(float x) {
  return 1.0f / (1.0f + m_exp_f32(-x));
}

MATH_INLINE double m_sigmoid_f64(double x) {
  return 1.0 / (1.0 + m_exp_f64(-x));
}

/* The continued fraction of erfc, erfc x = e^-x^2 / sqrt(pi) / t with
 * t = x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))), to `terms` terms (60
 * keep 1e-16 from x = 2 on, 150 from 1.2 on). */
MATH_INLINE double m_erfc_cf_f64(double ax, int terms) {
  double t = ax;
  for (int k = terms; k >= 1; k--) {
    t = ax + (0.5 * (double)k) / t;
  }
  return t;
}

/* erfc x for x >= 2 (or 1.2 with 150 terms). */
MATH_INLINE double m_erfc_tail_f64(double ax, int terms) {
  return m_exp_f64(-ax * ax) * 0.56418958354775628695 / m_erfc_cf_f64(ax, terms); /* 1 / sqrt(pi) */
}

/* erf x: for |x| < 2 its Taylor series (alternating, terms below 1.2 in
 * size, so little cancellation); for |x| >= 2 from erfc's continued fraction
 * erfc x = e^-x^2 / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))));
 * +-1 past 6. Computed in double for both types. */
MATH_INLINE double m_erf_f64(double x) {
  const double ax = __builtin_fabs(x);
  if (x != x) {
    return x;
  }
  if (ax >= 6.0) {
    return __builtin_copysign(1.0, x);
  }
  if (ax < 2.0) {
    const double x2 = x * x;
    double term = x; /* (-1)^n x^(2n+1) / n! */
    double sum = x;
    for (int n = 1; n < 40; n++) {
      term *= -x2 / (double)n;
      sum += term / (double)(2 * n + 1);
    }
    return sum * 1.12837916709551257390; /* 2 / sqrt(pi) */
  }
  return __builtin_copysign(1.0 - m_erfc_tail_f64(ax, 60), x);
}

/* erf x in float32, without branches (so loops over it vectorize): x P(x^2 - 2)
 * for |x| < 2 (P of degree 9, minimax for erf(x) / x, scripts/fit_erf.py:
 * within 2 ulp, centred because in powers of x^2 the float32 coefficients
 * cancel), 1 - e^-x^2 Q(|x| - 5/2) for 2 <= |x| < 3.92 (Q a Chebyshev
 * interpolant of erfc(x) e^(x^2), fitted for this engine on [1, 3.92]); +-1
 * past 3.92, where erfc is below half an ulp of 1. The near branch reaches 2,
 * not 1, so that most vectors of activations (gelu takes erf of x / sqrt 2)
 * compute it alone. */
static const float M_ERF_NEAR[10] = {6.749332547e-01f,  -1.305559278e-01f, 2.986967564e-02f,  -6.082850974e-03f,
                                     1.070689643e-03f,  -1.635926455e-04f, 2.185212361e-05f,  -2.613530569e-06f,
                                     3.071031927e-07f,  -2.901572671e-08f};
MATH_INLINE float m_erf_f32(float x) {
  const float ax = __builtin_fabsf(x);
  const float z = ax * ax;
  const float t = z - 2.0f;
  float p = M_ERF_NEAR[9];
  for (int i = 8; i >= 0; i--) {
    p = p * t + M_ERF_NEAR[i];
  }
  const float u = (ax < 3.92f ? ax : 3.92f) - 2.5f;
  float q = 1.772887460e-6f;
  q = q * u - 6.248156551e-6f;
  q = q * u + 1.390466695e-5f;
  q = q * u - 5.417795328e-5f;
  q = q * u + 2.136442193e-4f;
  q = q * u - 7.381609229e-4f;
  q = q * u + 2.465595174e-3f;
  q = q * u - 7.999776151e-3f;
  q = q * u + 2.493827408e-2f;
  q = q * u - 7.434754245e-2f;
  q = q * u + 2.108063559e-1f;
  float r = ax < 2.0f ? ax * p : 1.0f - m_exp_f32(-z) * q;
  r = ax >= 3.92f ? 1.0f : r;
  return x != x ? x : m_copysign_f32(r, x);
}

/* x^y for x >= 0 (or NaN), as e^(y ln x): within a few ulp of the exact
 * power while |y ln x| stays moderate (norms, pow's float32 path). */
MATH_INLINE double m_pow_nonneg_f64(double x, double y) {
  if (y == 0.0) {
    return 1.0; /* also for a NaN x, as C's pow */
  }
  if (x == 0.0) {
    return y > 0.0 ? 0.0 : __builtin_inf();
  }
  if (y == 1.0) {
    return x;
  }
  return m_exp_f64(y * m_log_f64(x));
}

/* ---- sin, cos, tan (double; float32 rounds the double result) ----
 * x = k pi/2 + r with |r| <= pi/4: k = rint(x 2/pi), r from pi/2 split in
 * three parts (33, 33 and 53 bits, so k * part is exact for |k| < 2^20;
 * from |x| = 2^20 on, m_reduce_pio2_wide), then
 * Taylor series of sin and cos on r, to r^21 and r^20. */
MATH_INLINE double m_sin_poly(double r) {
  const double z = r * r;
  double p = -1.0 / 51090942171709440000.0; /* -1/21! */
  p = p * z + 1.0 / 121645100408832000.0;
  p = p * z - 1.0 / 355687428096000.0;
  p = p * z + 1.0 / 1307674368000.0;
  p = p * z - 1.0 / 6227020800.0;
  p = p * z + 1.0 / 39916800.0;
  p = p * z - 1.0 / 362880.0;
  p = p * z + 1.0 / 5040.0;
  p = p * z - 1.0 / 120.0;
  p = p * z + 1.0 / 6.0;
  return r - r * z * p;
}

MATH_INLINE double m_cos_poly(double r) {
  const double z = r * r;
  double p = 1.0 / 2432902008176640000.0; /* 1/20! */
  p = p * z - 1.0 / 6402373705728000.0;
  p = p * z + 1.0 / 20922789888000.0;
  p = p * z - 1.0 / 87178291200.0;
  p = p * z + 1.0 / 479001600.0;
  p = p * z - 1.0 / 3628800.0;
  p = p * z + 1.0 / 40320.0;
  p = p * z - 1.0 / 720.0;
  p = p * z + 1.0 / 24.0;
  p = p * z - 0.5;
  return 1.0 + z * p;
}

/* 2/pi in 24-bit pieces: 2/pi = sum of M_TWO_OVER_PI[j] 2^(-24 (j + 1)), 1152 bits. */
static const uint32_t M_TWO_OVER_PI[48] = {
    0xa2f983, 0x6e4e44, 0x1529fc, 0x2757d1, 0xf534dd, 0xc0db62, 0x95993c, 0x439041,
    0xfe5163, 0xabdebb, 0xc561b7, 0x246e3a, 0x424dd2, 0xe00649, 0x2eea09, 0xd1921c,
    0xfe1deb, 0x1cb129, 0xa73ee8, 0x8235f5, 0x2ebb44, 0x84e99c, 0x7026b4, 0x5f7e41,
    0x3991d6, 0x398353, 0x39f49c, 0x845f8b, 0xbdf928, 0x3b1ff8, 0x97ffde, 0x05980f,
    0xef2f11, 0x8b5a0a, 0x6d1f6d, 0x367ecf, 0x27cb09, 0xb74f46, 0x3f669e, 0x5fea2d,
    0x7527ba, 0xc7ebe5, 0xf17b3d, 0x0739f7, 0x8a5292, 0xea6bfb, 0x5fb11f, 0x8d5d08,
};

/* hi + lo = a + b exactly (Knuth's two-sum). */
MATH_INLINE void m_two_sum(double a, double b, double *hi, double *lo) {
  const double s = a + b;
  const double bb = s - a;
  *hi = s;
  *lo = (a - (s - bb)) + (b - bb);
}

/*
 * x = k pi/2 + r for a finite |x| >= 2^20, where the three-part reduction of
 * m_sincos_f64 loses its exactness (Payne and Hanek's method): x split into a
 * 26-bit and a 27-bit part, each times 24-bit pieces of 2/pi is exact; the
 * pieces whose products are multiples of 4 are skipped, each other product is
 * taken mod 4 (exactly) and the eight that matter are summed in double-double.
 * Returns r (|r| <= pi/4 or a hair above) and sets *k to k mod 4.
 */
__attribute__((noinline)) static double m_reduce_pio2_wide(double x, int64_t *k) {
  const uint64_t bits = m_f64_bits(x);
  const int e = (int)((bits >> 52) & 0x7ff) - 1023;
  /* |x| = m 2^e with m in [1, 2); the pieces carry the 2^e (so no product underflows) */
  const double m = m_f64_from_bits((bits & 0xfffffffffffffull) | 0x3ff0000000000000ull);
  const double xh = m_f64_from_bits(m_f64_bits(m) & ~((1ull << 27) - 1));
  const double xl = m - xh;
  /* xl's products with pieces below j0 are multiples of 4 (xh's from a lower j on) */
  const int j0 = e >= 78 ? (e - 78) / 24 + 1 : 0;
  double hi = 0.0, lo = 0.0;
  for (int j = j0; j < j0 + 8 && j < 48; j++) {
    const double piece = (double)M_TWO_OVER_PI[j] * m_f64_from_bits((uint64_t)(1023 + e - 24 * (j + 1)) << 52);
    const double parts[2] = {xh * piece, xl * piece};
    for (int i = 0; i < 2; i++) {
      const double t = parts[i] - 4.0 * __builtin_floor(parts[i] * 0.25);
      double s, err;
      m_two_sum(hi, t, &s, &err);
      hi = s - 4.0 * __builtin_floor(s * 0.25); /* exact: s's bits from 2^1 down stay */
      lo += err;
    }
  }
  const double q = __builtin_rint(hi + lo);
  double fh, fl;
  m_two_sum(hi - q, lo, &fh, &fl);
  /* r = f pi/2, with pi/2 in two parts */
  double r = fh * 1.5707963267948966 + (fh * 6.123233995736766e-17 + fl * 1.5707963267948966);
  int64_t n = (int64_t)q & 3;
  if (x < 0.0) {
    r = -r;
    n = (4 - n) & 3;
  }
  *k = n;
  return r;
}

/* sin (quadrant q = 0) or cos (q = 1) of x. */
MATH_INLINE double m_sincos_f64(double x, int64_t q) {
  if (!(__builtin_fabs(x) < __builtin_inf())) {
    return x - x; /* NaN for NaN and +-inf */
  }
  if (__builtin_fabs(x) >= 1048576.0) {
    int64_t k;
    const double r = m_reduce_pio2_wide(x, &k);
    const int64_t n = (k + q) & 3;
    const double v = (n & 1) ? m_cos_poly(r) : m_sin_poly(r);
    return (n & 2) ? -v : v;
  }
  const double k = __builtin_rint(x * 0.6366197723675814);
  const double r = ((x - k * 1.5707963267341256) - k * 6.077100506303966e-11) - k * 2.0222662487959506e-21;
  const int64_t n = ((int64_t)k + q) & 3;
  const double v = (n & 1) ? m_cos_poly(r) : m_sin_poly(r);
  return (n & 2) ? -v : v;
}

MATH_INLINE double m_sin_f64(double x) {
  return m_sincos_f64(x, 0);
}

MATH_INLINE double m_cos_f64(double x) {
  return m_sincos_f64(x, 1);
}

MATH_INLINE double m_tan_f64(double x) {
  return m_sincos_f64(x, 0) / m_sincos_f64(x, 1);
}

/*
 * The same functions without branches, so loops over them vectorize: for
 * finite |x| < 2^20 only (the three-part reduction; the elementwise engine
 * checks its inputs and takes the functions above otherwise). The quadrant
 * k mod 4 comes from the fraction of k / 4, in floating point (clang would
 * convert k to an integer lane by lane); both polynomials are evaluated and
 * the quadrant's chosen. float32 keeps the reduction in double and shortens
 * the series to what a float result needs (to r^11 and r^12, below 2^-36).
 */
MATH_INLINE void m_sincos_fast_f64(double x, double *sin_x, double *cos_x) {
  const double k = __builtin_rint(x * 0.6366197723675814);
  const double r = ((x - k * 1.5707963267341256) - k * 6.077100506303966e-11) - k * 2.0222662487959506e-21;
  const double s = m_sin_poly(r), c = m_cos_poly(r);
  const double quarter = k * 0.25;
  const double frac = quarter - __builtin_floor(quarter); /* 0, 1/4, 1/2 or 3/4 */
  const int odd = frac == 0.25 || frac == 0.75;
  const double sq = odd ? c : s, cq = odd ? -s : c;
  *sin_x = frac >= 0.5 ? -sq : sq;
  *cos_x = frac >= 0.5 ? -cq : cq;
}

MATH_INLINE void m_sincos_fast_f32(float xf, double *sin_x, double *cos_x) {
  const double x = (double)xf;
  const double k = __builtin_rint(x * 0.6366197723675814);
  const double r = ((x - k * 1.5707963267341256) - k * 6.077100506303966e-11) - k * 2.0222662487959506e-21;
  const double z = r * r;
  double ps = 1.0 / 39916800.0;
  ps = ps * z - 1.0 / 362880.0;
  ps = ps * z + 1.0 / 5040.0;
  ps = ps * z - 1.0 / 120.0;
  ps = ps * z + 1.0 / 6.0;
  const double s = r - r * z * ps;
  double pc = 1.0 / 479001600.0;
  pc = pc * z - 1.0 / 3628800.0;
  pc = pc * z + 1.0 / 40320.0;
  pc = pc * z - 1.0 / 720.0;
  pc = pc * z + 1.0 / 24.0;
  pc = pc * z - 0.5;
  const double c = 1.0 + z * pc;
  const double quarter = k * 0.25;
  const double frac = quarter - __builtin_floor(quarter);
  const int odd = frac == 0.25 || frac == 0.75;
  const double sq = odd ? c : s, cq = odd ? -s : c;
  *sin_x = frac >= 0.5 ? -sq : sq;
  *cos_x = frac >= 0.5 ? -cq : cq;
}

#define OR_DEFINE_TRIG_FAST(S, T)                       \
  MATH_INLINE T m_sin_fast_##S(T x) {                   \
    double s, c;                                        \
    m_sincos_fast_##S(x, &s, &c);                       \
    return (T)s;                                        \
  }                                                     \
  MATH_INLINE T m_cos_fast_##S(T x) {                   \
    double s, c;                                        \
    m_sincos_fast_##S(x, &s, &c);                       \
    return (T)c;                                        \
  }                                                     \
  MATH_INLINE T m_tan_fast_##S(T x) {                   \
    double s, c;                                        \
    m_sincos_fast_##S(x, &s, &c);                       \
    return (T)(s / c);                                  \
  }
OR_DEFINE_TRIG_FAST(f32, float)
OR_DEFINE_TRIG_FAST(f64, double)

/* ---- inverse trigonometric and hyperbolic (double; float32 rounds the double result) ---- */

#define M_PI_HI 3.14159265358979311600e+00
#define M_PI_LO 1.22464679914735317720e-16
#define M_LN2_F64 6.93147180559945286227e-01

MATH_INLINE double m_copysign_f64(double magnitude, double sign) {
  return m_f64_from_bits((m_f64_bits(magnitude) & 0x7fffffffffffffffull) | (m_f64_bits(sign) & 0x8000000000000000ull));
}

/* atan on [0, 1]: above tan(pi/8), t = (y - 1) / (y + 1) and atan y = pi/4 + atan t,
 * so |t| <= tan(pi/8) and t^2 <= 0.1716; then the Taylor series of atan t to t^49
 * (its last term is below 2^-60 of t). */
MATH_INLINE double m_atan_unit_f64(double y) {
  const int shift = y > 0.41421356237309503;
  const double t = shift ? (y - 1.0) / (y + 1.0) : y;
  const double z = t * t;
  double p = 1.0 / 49.0;
  for (int n = 23; n >= 0; --n) {
    p = p * z + ((n & 1) ? -1.0 : 1.0) / (double)(2 * n + 1);
  }
  const double r = t * p;
  return shift ? (0.25 * M_PI_HI + r) + 0.25 * M_PI_LO : r;
}

/* atan x: for |x| > 1, pi/2 - atan(1/|x|); the sign of x (so atan(-0) = -0). */
MATH_INLINE double m_atan_f64(double x) {
  const double ax = m_copysign_f64(x, 1.0);
  const double r = ax > 1.0 ? (0.5 * M_PI_HI - m_atan_unit_f64(1.0 / ax)) + 0.5 * M_PI_LO : m_atan_unit_f64(ax);
  return x != x ? x : m_copysign_f64(r, x);
}

/* atan2(y, x), with C's special cases for zeros and infinities; the sign of y. */
MATH_INLINE double m_atan2_f64(double y, double x) {
  if (y != y || x != x) {
    return y + x;
  }
  const int x_negative = (m_f64_bits(x) >> 63) != 0;
  const double ay = m_copysign_f64(y, 1.0), ax = m_copysign_f64(x, 1.0);
  const double inf = __builtin_inf();
  double r;
  if (ay == inf && ax == inf) {
    r = x_negative ? 0.75 * M_PI_HI : 0.25 * M_PI_HI;
  } else if (ax == inf || (ay == 0.0 && ax == 0.0)) {
    r = x_negative ? M_PI_HI : 0.0;
  } else {
    const double q = ay / ax; /* inf for x = 0 or huge ratios: atan gives pi/2 */
    const double a = q > 1.0 ? (0.5 * M_PI_HI - m_atan_unit_f64(1.0 / q)) + 0.5 * M_PI_LO : m_atan_unit_f64(q);
    r = x_negative ? (M_PI_HI - a) + M_PI_LO : a;
  }
  return m_copysign_f64(r, y);
}

/* atan2 for float32, in double and without branches (so its loops
 * vectorize; m_atan2_f64's branches and 24-term series took 66 ns per
 * element): the smaller magnitude over the larger, reduced past tan(pi/8)
 * as in m_atan_unit_f64, then atan's Taylor series to t^21 (the next term is
 * below 2^-32 of t), and the quadrant; C's special cases for two zeros and
 * two infinities. Rounded once. */
MATH_INLINE float m_atan2_f32(float yf, float xf) {
  const double y = yf, x = xf;
  const double ay = m_copysign_f64(y, 1.0), ax = m_copysign_f64(x, 1.0);
  const int x_negative = (m_f32_bits(xf) >> 31) != 0;
  const int swap = ay > ax;
  const double q = (swap ? ax : ay) / (swap ? ay : ax); /* in [0, 1]; NaN for two zeros or infinities */
  const int shift = q > 0.41421356237309503;
  const double t = shift ? (q - 1.0) / (q + 1.0) : q;
  const double z = t * t;
  double p = 1.0 / 21.0;
  p = p * z - 1.0 / 19.0;
  p = p * z + 1.0 / 17.0;
  p = p * z - 1.0 / 15.0;
  p = p * z + 1.0 / 13.0;
  p = p * z - 1.0 / 11.0;
  p = p * z + 1.0 / 9.0;
  p = p * z - 1.0 / 7.0;
  p = p * z + 1.0 / 5.0;
  p = p * z - 1.0 / 3.0;
  p = p * z + 1.0;
  double a = t * p + (shift ? 0.25 * M_PI_HI : 0.0);
  a = swap ? 0.5 * M_PI_HI - a : a;
  a = x_negative ? M_PI_HI - a : a;
  const double inf = __builtin_inf();
  a = ay == 0.0 && ax == 0.0 ? (x_negative ? M_PI_HI : 0.0) : a;
  a = ay == inf && ax == inf ? (x_negative ? 0.75 * M_PI_HI : 0.25 * M_PI_HI) : a;
  const float r = (float)m_copysign_f64(a, y);
  return yf != yf || xf != xf ? yf + xf : r;
}

/* asin x = atan(x / sqrt((1 - x)(1 + x))): +-pi/2 at +-1, NaN past them. */
MATH_INLINE double m_asin_f64(double x) {
  return m_atan_f64(x / __builtin_sqrt((1.0 - x) * (1.0 + x)));
}

/* acos x = 2 atan(sqrt((1 - x) / (1 + x))): accurate near 1 (where pi/2 - asin x is not). */
MATH_INLINE double m_acos_f64(double x) {
  return 2.0 * m_atan_f64(__builtin_sqrt((1.0 - x) / (1.0 + x)));
}

/* atan for float32, without branches: 1/|x| past 1, then (y - 1) / (y + 1)
 * past tan(pi/8), so |t| <= tan(pi/8); atan t = t P(t^2), P a Chebyshev
 * interpolant of atan(t) / t fitted for this engine (within 2.4 ulp of atan). */
MATH_INLINE float m_atan_f32(float x) {
  const float ax = __builtin_fabsf(x);
  const int invert = ax > 1.0f;
  const float y = invert ? 1.0f / ax : ax;
  const int shift = y > 0.41421356f;
  const float t = shift ? (y - 1.0f) / (y + 1.0f) : y;
  const float z = t * t;
  float p = -6.026305206e-2f;
  p = p * z + 1.056982880e-1f;
  p = p * z - 1.423953267e-1f;
  p = p * z + 1.999818304e-1f;
  p = p * z - 3.333330689e-1f;
  p = p * z + 9.999999994e-1f;
  float r = t * p;
  r = shift ? 0.78539818525f + (r - 2.1855695e-8f) : r;       /* pi/4 in two parts */
  r = invert ? 1.57079637051f - (r + 4.3711390e-8f) : r;      /* pi/2 in two parts */
  return x != x ? x : m_copysign_f32(r, x);
}

/* asin and acos for float32 from atan, as the double versions. */
MATH_INLINE float m_asin_f32(float x) {
  return m_atan_f32(x / __builtin_sqrtf((1.0f - x) * (1.0f + x)));
}

MATH_INLINE float m_acos_f32(float x) {
  return 2.0f * m_atan_f32(__builtin_sqrtf((1.0f - x) / (1.0f + x)));
}

/* sinh |x| = (E + E / (E + 1)) / 2 with E = expm1|x| (accurate near 0); past 22,
 * e^|x| / 2 as (e^(|x|/2) / 2) e^(|x|/2), finite wherever sinh is. */
MATH_INLINE double m_sinh_f64(double x) {
  const double ax = m_copysign_f64(x, 1.0);
  double r;
  if (ax < 22.0) {
    const double e = m_expm1_f64(ax);
    r = 0.5 * (e + e / (e + 1.0));
  } else {
    const double h = m_exp_f64(0.5 * ax);
    r = (0.5 * h) * h;
  }
  return x != x ? x : m_copysign_f64(r, x);
}

/* cosh x = (e^|x| + e^-|x|) / 2; past 22 as sinh. */
MATH_INLINE double m_cosh_f64(double x) {
  const double ax = m_copysign_f64(x, 1.0);
  if (ax < 22.0) {
    const double e = m_exp_f64(ax);
    return 0.5 * (e + 1.0 / e);
  }
  const double h = m_exp_f64(0.5 * ax);
  return x != x ? x : (0.5 * h) * h;
}

/* asinh |x| = log1p(|x| + x^2 / (1 + sqrt(1 + x^2))); past 2^28, ln|x| + ln 2. */
MATH_INLINE double m_asinh_f64(double x) {
  const double ax = m_copysign_f64(x, 1.0);
  const double r = ax > 268435456.0 ? m_log_f64(ax) + M_LN2_F64
                                    : m_log1p_f64(ax + ax * ax / (1.0 + __builtin_sqrt(1.0 + ax * ax)));
  return x != x ? x : m_copysign_f64(r, x);
}

/* acosh x = log1p(t + sqrt(2t + t^2)) with t = x - 1 (accurate near 1); past 2^28,
 * ln x + ln 2; NaN below 1. */
MATH_INLINE double m_acosh_f64(double x) {
  if (!(x >= 1.0)) {
    return x != x ? x : __builtin_nan("");
  }
  if (x > 268435456.0) {
    return m_log_f64(x) + M_LN2_F64;
  }
  const double t = x - 1.0;
  return m_log1p_f64(t + __builtin_sqrt(2.0 * t + t * t));
}

/* atanh x = log1p(2|x| / (1 - |x|)) / 2, the sign of x; +-inf at +-1, NaN past them. */
MATH_INLINE double m_atanh_f64(double x) {
  const double ax = m_copysign_f64(x, 1.0);
  if (!(ax <= 1.0)) {
    return x != x ? x : __builtin_nan("");
  }
  return m_copysign_f64(0.5 * m_log1p_f64(2.0 * ax / (1.0 - ax)), x);
}

/* A double-double: hi + lo, |lo| at most half an ulp of hi. */
typedef struct {
  double hi, lo;
} m_dd;

/* a * b exactly, as hi + lo: Dekker's product of Veltkamp halves (26 bits
 * each, so every partial product is exact without a fused multiply-add,
 * which scalar wasm lacks). Exact while |a|, |b| < 2^995 and |a b| > 2^-916
 * (the product of the low halves stays normal). */
MATH_INLINE m_dd m_two_prod(double a, double b) {
#pragma STDC FP_CONTRACT OFF
  const double ca = 134217729.0 * a, ah = ca - (ca - a), al = a - ah;
  const double cb = 134217729.0 * b, bh = cb - (cb - b), bl = b - bh;
  const double p = a * b;
  return (m_dd){p, ((ah * bh - p) + ah * bl + al * bh) + al * bl};
}

/* a * b in double-double (relative error about 2^-104). */
MATH_INLINE m_dd m_dd_mul(m_dd a, m_dd b) {
#pragma STDC FP_CONTRACT OFF
  const m_dd p = m_two_prod(a.hi, b.hi);
  const double e = p.lo + (a.hi * b.lo + a.lo * b.hi);
  const double hi = p.hi + e;
  return (m_dd){hi, e - (hi - p.hi)};
}

/* Scales v (hi positive and normal) by a power of two to hi in [1, 2);
 * returns the power taken out. In two factors, 2^-(e/2) and 2^-(e - e/2),
 * each a normal double (2^-1023 alone is not), so both parts stay exact. */
MATH_INLINE int64_t m_dd_normalize(m_dd *v) {
  const int64_t e = (int64_t)((m_f64_bits(v->hi) >> 52) & 0x7ff) - 1023;
  const int64_t e1 = e / 2;
  const double s1 = m_f64_from_bits((uint64_t)(1023 - e1) << 52);
  const double s2 = m_f64_from_bits((uint64_t)(1023 - (e - e1)) << 52);
  v->hi = v->hi * s1 * s2;
  v->lo = v->lo * s1 * s2;
  return e;
}

/* v 2^e, rounded once (v positive, normal). */
MATH_INLINE double m_scale2(double v, int64_t e) {
  if (e > 2100) {
    e = 2100;
  } else if (e < -2200) {
    e = -2200;
  }
  while (e > 1000) {
    v *= 0x1p1000;
    e -= 1000;
  }
  while (e < -1000) { /* exact while v stays normal; the last one rounds */
    v *= 0x1p-1000;
    e += 1000;
  }
  return v * m_f64_from_bits((uint64_t)(1023 + e) << 52);
}

/*
 * |x|^n (|x| finite and nonzero; n >= 1 an integer) by squaring in
 * double-double, each partial product scaled to [1, 2) with its power of
 * two kept aside, then rounded to double once: the error before that
 * rounding is about (2 log2 n) 2^-104 of the result, so the result is the
 * correctly rounded power except where the exact one lies that close to a
 * rounding boundary (and for subnormal results, which round twice). glibc's
 * pow is nearly always correctly rounded too (it drifts by an ulp in a few
 * cases per hundred at exponents of tens of thousands), so float64 powers
 * and Adam's bias corrections match CPU's bits where plain squaring, which
 * rounded up to 2 log2 n times, did not. For 1 / |x|^n: the reciprocal of
 * the double-double power with one Newton correction.
 */
MATH_INLINE double m_pow_int_dd(double x, uint64_t n, int negative) {
#pragma STDC FP_CONTRACT OFF
  /* a subnormal |x| scaled up by 2^64 first, so that its parts are normal */
  const int subnormal = __builtin_fabs(x) < 0x1p-1022;
  m_dd base = {subnormal ? __builtin_fabs(x) * 0x1p64 : __builtin_fabs(x), 0.0}, r = {1.0, 0.0};
  int64_t eb = m_dd_normalize(&base) - (subnormal ? 64 : 0), er = 0;
  for (;;) {
    if (n & 1) {
      r = m_dd_mul(r, base);
      er += eb + m_dd_normalize(&r);
    }
    n >>= 1;
    if (!n) {
      break;
    }
    base = m_dd_mul(base, base);
    eb = 2 * eb + m_dd_normalize(&base);
  }
  if (!negative) {
    return m_scale2(r.hi + r.lo, er);
  }
  /* q = 1 / r: q0 = 1 / r.hi, then q0 + q0 (1 - q0 r), the residual from an
   * exact product */
  const double q0 = 1.0 / r.hi;
  const m_dd p = m_two_prod(q0, r.hi);
  const double residual = ((1.0 - p.hi) - p.lo) - q0 * r.lo;
  return m_scale2(q0 + q0 * residual, -er);
}

/* x^y as C's pow: integer powers (|y| < 2^53) of a finite nonzero x by squaring in
 * double-double (m_pow_int_dd), others as e^(y ln|x|), with pow's special
 * cases for signs, zeros and infinities. */
MATH_INLINE double m_pow_f64(double x, double y) {
  if (y == 0.0 || x == 1.0 || (x == -1.0 && __builtin_fabs(y) == __builtin_inf())) {
    return 1.0;
  }
  if (x != x || y != y) {
    return x + y;
  }
  const int integral = __builtin_floor(y) == y;
  const int odd = integral && __builtin_fabs(y) < 9007199254740992.0 && ((int64_t)y & 1);
  if (x < 0.0 && !integral && __builtin_fabs(x) != __builtin_inf()) {
    return __builtin_nan("");
  }
  const double ax = __builtin_fabs(x);
  double r;
  if (integral && __builtin_fabs(y) < 9007199254740992.0 && ax != 0.0 && ax != __builtin_inf()) {
    r = m_pow_int_dd(x, (uint64_t)__builtin_fabs(y), y < 0.0);
  } else {
    r = m_pow_nonneg_f64(ax, y);
  }
  return (x < 0.0 || (x == 0.0 && __builtin_signbit(x))) && odd ? -r : r;
}

/*
 * ax^y (ax >= 0, or NaN) to float precision, in double without branches:
 * ln ax by the series of m_log_f64 cut at s^15 (below 2^-40 of the result),
 * t = y ln ax clamped to where a float result is 0 or inf, then e^t with
 * its Taylor series cut at r^10 (below 2^-34) and one scale by 2^k (k stays
 * within double's normal exponents). About half the work of the full
 * double functions, with an error far below a float's ulp.
 */
MATH_INLINE double m_pow_core_f32(double ax, double y) {
  int32_t e;
  double f, s, z;
  m_log_parts_f64(ax, &e, &f, &s, &z); /* float inputs: never subnormal in double */
  double p = 1.0 / 15.0;
  p = p * z + 1.0 / 13.0;
  p = p * z + 1.0 / 11.0;
  p = p * z + 1.0 / 9.0;
  p = p * z + 1.0 / 7.0;
  p = p * z + 1.0 / 5.0;
  p = p * z + 1.0 / 3.0;
  const double ln = (double)e * 6.93147180559945286227e-01 + (f - s * (f - 2.0 * z * p));
  double t = y * ln;
  const double tc = t < -120.0 ? -120.0 : t > 100.0 ? 100.0 : t;
  const double k = __builtin_rint(tc * 1.44269504088896338700e+00);
  const double r = tc - k * 6.93147180559945286227e-01;
  double q = 1.0 / 3628800.0;
  q = q * r + 1.0 / 362880.0;
  q = q * r + 1.0 / 40320.0;
  q = q * r + 1.0 / 5040.0;
  q = q * r + 1.0 / 720.0;
  q = q * r + 1.0 / 120.0;
  q = q * r + 1.0 / 24.0;
  q = q * r + 1.0 / 6.0;
  q = q * r + 0.5;
  q = q * r + 1.0;
  q = q * r + 1.0;
  double v = q * m_f64_from_bits((uint64_t)(m_int_of_f64(k) + 1023) << 52);
  /* zeros and infinities by their limits (their ln above is finite); NaN stays NaN */
  v = t != t ? t : v;
  v = (ax == 0.0 && y < 0.0) || (ax == __builtin_inf() && y > 0.0) ? __builtin_inf() : v;
  v = (ax == 0.0 && y > 0.0) || (ax == __builtin_inf() && y < 0.0) ? 0.0 : v;
  return v;
}

/* A float32 x to the power y (a float32 exponent, or a Python number kept in
 * double as CPU keeps it), without branches: e^(y ln|x|) in double
 * (m_pow_core_f32: its error far below a float's ulp, so integer powers come
 * out exact), with C pow's special cases for signs, zeros and infinities. */
MATH_INLINE float m_pow_f32(float x, double y) {
  const double ay = __builtin_fabs(y);
  const int integral = __builtin_floor(y) == y;
  const int odd = integral && ay < 9007199254740992.0 && __builtin_floor(ay * 0.5) * 2.0 != ay;
  const double ax = __builtin_fabs((double)x);
  float r = (float)m_pow_core_f32(ax, y);
  r = (x < 0.0f || (x == 0.0f && __builtin_signbit(x))) && odd ? -r : r;
  r = x < 0.0f && !integral && ax != __builtin_inf() ? __builtin_nanf("") : r;
  r = (x != x || y != y) ? (float)(x + y) : r;
  r = (x == -1.0f && ay == __builtin_inf()) ? 1.0f : r;
  return (y == 0.0 || x == 1.0f) ? 1.0f : r;
}

/* ---- special functions (double; float32 rounds the double result) ----
 * Per element and with branches: they serve accuracy, not loop speed, so
 * each is one out-of-line function instead of being copied into every loop. */
#define MATH_SPECIAL static inline __attribute__((noinline))

/* hypot for float32: the squares are exact in double, so one sqrt rounds
 * (vectorizes); +inf when either is infinite, even against a NaN (C's rule). */
MATH_INLINE float m_hypot_f32(float x, float y) {
  const double dx = x, dy = y;
  const float r = (float)__builtin_sqrt(dx * dx + dy * dy);
  return (__builtin_fabsf(x) == __builtin_inff() || __builtin_fabsf(y) == __builtin_inff()) ? __builtin_inff() : r;
}

/* hypot in double: the larger magnitude times sqrt(1 + r^2), r = smaller /
 * larger, so nothing overflows or underflows in between. */
MATH_SPECIAL double m_hypot_f64(double x, double y) {
  const double ax = __builtin_fabs(x), ay = __builtin_fabs(y);
  if (ax == __builtin_inf() || ay == __builtin_inf()) {
    return __builtin_inf();
  }
  if (ax != ax || ay != ay) {
    return x + y;
  }
  const double big = ax < ay ? ay : ax;
  const double small = ax < ay ? ax : ay;
  if (big == 0.0) {
    return 0.0;
  }
  const double r = small / big;
  return big * __builtin_sqrt(1.0 + r * r);
}

/* erfc x: 1 - erf x while |x| < 1.2 (erfc(1.2) = 0.09, so the difference
 * keeps 15 digits), the continued fraction beyond; erfc(-x) = 2 - erfc x. */
MATH_SPECIAL double m_erfc_f64(double x) {
  const double ax = __builtin_fabs(x);
  if (!(ax >= 1.2)) {
    return x != x ? x : 1.0 - m_erf_f64(x);
  }
  const double tail = m_erfc_tail_f64(ax, 150);
  return x < 0.0 ? 2.0 - tail : tail;
}

/* erfcx x = e^(x^2) erfc x for x >= 0, without overflow or underflow: the
 * continued fraction alone from 1.2 on. */
MATH_INLINE double m_erfcx_nonneg_f64(double x) {
  if (x >= 1.2) {
    return 0.56418958354775628695 / m_erfc_cf_f64(x, 150);
  }
  return m_exp_f64(x * x) * (1.0 - m_erf_f64(x));
}

/* erfcx for any x: below 0, 2 e^(x^2) - erfcx(-x) (+inf once e^(x^2) overflows). */
MATH_SPECIAL double m_erfcx_f64(double x) {
  if (x != x) {
    return x;
  }
  if (x >= 0.0) {
    return m_erfcx_nonneg_f64(x);
  }
  const double big = x < -26.7 ? __builtin_inf() : 2.0 * m_exp_f64(x * x);
  return big - m_erfcx_nonneg_f64(-x);
}

/* ln erfc x for x >= 0: ln erfcx(x) - x^2, finite long after erfc underflows. */
MATH_INLINE double m_log_erfc_nonneg_f64(double x) {
  return m_log_f64(m_erfcx_nonneg_f64(x)) - x * x;
}

/* M. Giles' single-precision approximation of erfinv ("Approximating the
 * erfinv function", GPU Computing Gems Jade, 2011), as a first guess: x with
 * erf x = 1 - q, for 0 < q <= 1. */
MATH_INLINE double m_erfinv_guess_f64(double q) {
  double w = -m_log_f64(q * (2.0 - q));
  double p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = __builtin_sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  return p * (1.0 - q);
}

#define M_TWO_OVER_SQRT_PI 1.12837916709551257390

/* The x >= 0 with erf x = y for 0 <= y < 1/2: Newton steps on erf. */
MATH_INLINE double m_erfinv_small_f64(double y) {
  double x = m_erfinv_guess_f64(1.0 - y);
  for (int i = 0; i < 3; i++) {
    x -= (m_erf_f64(x) - y) / (M_TWO_OVER_SQRT_PI * m_exp_f64(-x * x));
  }
  return x;
}

/* The x > 0 with erfc x = q for 0 < q <= 1/2: Newton steps on ln erfc x =
 * ln q (q is given exactly, and the logarithm keeps the steps in scale far
 * into the tail: g' = -(2 / sqrt(pi)) / erfcx x). */
MATH_INLINE double m_erfcinv_tail_f64(double q) {
  /* below 1e-10 (past the first guess's range), from erfc x ~ e^-x^2 / (x sqrt(pi)):
   * x^2 ~ L - ln(pi L) / 2 with L = -ln q */
  const double l = -m_log_f64(q);
  double x = q < 1e-10 ? __builtin_sqrt(l - 0.5 * m_log_f64(M_PI_HI * l)) : m_erfinv_guess_f64(q);
  const double target = -l;
  for (int i = 0; i < 5; i++) {
    x += (m_log_erfc_nonneg_f64(x) - target) * m_erfcx_nonneg_f64(x) / M_TWO_OVER_SQRT_PI;
  }
  return x;
}

/* erfinv y: Newton steps on erf while |y| < 1/2, on ln erfc beyond (where
 * 1 - |y| is exact); +-inf at +-1, NaN past them. */
MATH_SPECIAL double m_erfinv_f64(double y) {
  const double ay = __builtin_fabs(y);
  if (!(ay < 1.0)) {
    return y != y ? y : ay == 1.0 ? m_copysign_f64(__builtin_inf(), y) : __builtin_nan("");
  }
  return m_copysign_f64(ay < 0.5 ? m_erfinv_small_f64(ay) : m_erfcinv_tail_f64(1.0 - ay), y);
}

/* erfcinv z for 0 <= z <= 2 (erfc x = z): from the side where z or its
 * complement is exact. */
MATH_INLINE double m_erfcinv_f64(double z) {
  const double w = z > 1.0 ? 2.0 - z : z; /* erfcinv(z) = -erfcinv(2 - z), 2 - z exact */
  const double x = w >= 0.5 ? m_erfinv_small_f64(1.0 - w) : w <= 0.0 ? __builtin_inf() : m_erfcinv_tail_f64(w);
  return z > 1.0 ? -x : x;
}

/* ndtri p: the standard normal quantile, -sqrt(2) erfcinv(2p); -inf at 0,
 * +inf at 1, NaN outside [0, 1]. */
MATH_SPECIAL double m_ndtri_f64(double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    return p != p ? p : __builtin_nan("");
  }
  return p == 1.0 ? __builtin_inf() : -1.41421356237309504880 * m_erfcinv_f64(2.0 * p) + 0.0; /* +0 at 1/2 */
}

/* log_ndtr x: ln of the standard normal CDF, ln(erfc(-x / sqrt 2) / 2); for
 * x > 0 as log1p(-erfc(x / sqrt 2) / 2), for very negative x from ln erfc. */
MATH_SPECIAL double m_log_ndtr_f64(double x) {
  if (x != x) {
    return x;
  }
  const double z = x * 0.70710678118654752440;
  if (x > 0.0) {
    return m_log1p_f64(-0.5 * m_erfc_f64(z));
  }
  return m_log_erfc_nonneg_f64(-z) - M_LN2_F64;
}

/* entr x = -x ln x: 0 at 0, -inf below it. */
MATH_INLINE double m_entr_f64(double x) {
  if (x != x) {
    return x;
  }
  return x > 0.0 ? -x * m_log_f64(x) : x == 0.0 ? 0.0 : -__builtin_inf();
}

/* The modified Bessel functions I0 and I1 (order `nu`), scaled by e^-|x|
 * when `scaled`: their power series while |x| <= 15 (positive terms, so no
 * cancellation), else the asymptotic series
 * e^x / sqrt(2 pi x) sum_k (-1)^k prod_{j<=k} (4 nu^2 - (2j - 1)^2) / (k! (8x)^k),
 * stopped at its smallest term. I1 is odd, I0 even. */
MATH_SPECIAL double m_bessel_i_f64(int nu, double x, int scaled) {
  if (x != x) {
    return x;
  }
  const double ax = __builtin_fabs(x);
  double r;
  if (ax <= 15.0) {
    const double q = 0.25 * x * x;
    double term = nu ? 0.5 * ax : 1.0;
    double sum = term;
    for (int k = 1; k < 200 && term > sum * 1e-17; k++) {
      term *= q / ((double)k * (double)(k + nu));
      sum += term;
    }
    r = scaled ? sum * m_exp_f64(-ax) : sum;
  } else {
    const double mu = 4.0 * (double)(nu * nu);
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 60; k++) {
      const double odd = (double)(2 * k - 1);
      const double next = -term * (mu - odd * odd) / ((double)k * 8.0 * ax);
      if (__builtin_fabs(next) >= __builtin_fabs(term)) {
        break;
      }
      term = next;
      sum += term;
    }
    const double root = sum / __builtin_sqrt(2.0 * M_PI_HI * ax);
    if (scaled) {
      r = root;
    } else {
      const double h = m_exp_f64(0.5 * ax); /* e^x as (e^(x/2))^2: finite wherever I is */
      r = root * h * h;
    }
  }
  return nu && x < 0.0 ? -r : r;
}

/* ln Gamma(x) for x > 0: the recurrence Gamma(x) = Gamma(x + n) / (x (x + 1)
 * ... (x + n - 1)) up to 15, then Stirling's series to its 1/x^13 term
 * (the next is below 1e-19 there); exactly 0 at 1 and 2, as C's lgamma. */
MATH_INLINE double m_lgamma_positive_f64(double x) {
  if (x == 1.0 || x == 2.0) {
    return 0.0;
  }
  double product = 1.0;
  while (x < 15.0) {
    product *= x;
    x += 1.0;
  }
  const double z = 1.0 / (x * x);
  double s = 1.0 / 156.0;
  s = s * z - 691.0 / 360360.0;
  s = s * z + 1.0 / 1188.0;
  s = s * z - 1.0 / 1680.0;
  s = s * z + 1.0 / 1260.0;
  s = s * z - 1.0 / 360.0;
  s = s * z + 1.0 / 12.0;
  const double stirling = (x - 0.5) * m_log_f64(x) - x + 0.91893853320467274178 + s / x; /* ln sqrt(2 pi) */
  return product == 1.0 ? stirling : stirling - m_log_f64(product);
}

/* x less its nearest integer, in [-1/2, 1/2]: exact, so sin(pi x) and
 * tan(pi x) reduce without error (0 at the integers). */
MATH_INLINE double m_frac_nearest_f64(double x) {
  return x - __builtin_rint(x);
}

/* ln |Gamma(x)|: below 0 by the reflection Gamma(x) Gamma(1 - x) = pi / sin(pi x);
 * +inf at the poles 0, -1, -2, ... and at +-inf. */
MATH_SPECIAL double m_lgamma_f64(double x) {
  if (x != x) {
    return x;
  }
  if (__builtin_fabs(x) == __builtin_inf()) {
    return __builtin_inf();
  }
  if (x > 0.0) {
    return m_lgamma_positive_f64(x);
  }
  const double r = m_frac_nearest_f64(x);
  if (r == 0.0) {
    return __builtin_inf();
  }
  return m_log_f64(M_PI_HI / __builtin_fabs(m_sin_f64(M_PI_HI * r))) - m_lgamma_positive_f64(1.0 - x);
}

/* digamma (psi) x: the recurrence psi(x) = psi(x + 1) - 1/x up to 10, then
 * the asymptotic series ln x - 1/(2x) - sum B_2k / (2k x^2k) to k = 7;
 * below 0 by the reflection psi(x) = psi(1 - x) - pi / tan(pi x). As CPU:
 * psi(+-0) = -+inf, NaN at the negative integers. */
MATH_SPECIAL double m_digamma_f64(double x) {
  if (x == 0.0) {
    return m_copysign_f64(__builtin_inf(), -x);
  }
  if (x != x || x == __builtin_inf()) {
    return x;
  }
  double acc = 0.0;
  if (x < 0.0) {
    const double r = m_frac_nearest_f64(x); /* tan has period pi */
    if (r == 0.0) {
      return __builtin_nan("");
    }
    acc = -M_PI_HI / m_tan_f64(M_PI_HI * r);
    x = 1.0 - x;
  }
  while (x < 10.0) {
    acc -= 1.0 / x;
    x += 1.0;
  }
  const double z = 1.0 / (x * x);
  double s = 1.0 / 12.0;
  s = 691.0 / 32760.0 - z * s;
  s = 1.0 / 132.0 - z * s;
  s = 1.0 / 240.0 - z * s;
  s = 1.0 / 252.0 - z * s;
  s = 1.0 / 120.0 - z * s;
  s = 1.0 / 12.0 - z * s;
  return acc + (m_log_f64(x) - 0.5 / x - z * s);
}

/* trigamma (psi') x: the recurrence psi'(x) = psi'(x + 1) + 1/x^2 up to 10,
 * then the asymptotic series 1/x + 1/(2x^2) + sum B_2k / x^(2k+1) to k = 7;
 * below 1/2 by the reflection psi'(x) + psi'(1 - x) = pi^2 / sin^2(pi x)
 * (+inf at the poles 0, -1, ...). */
MATH_INLINE double m_trigamma_f64(double x) {
  double acc = 0.0, sign = 1.0;
  if (x < 0.5) {
    const double s = m_sin_f64(M_PI_HI * m_frac_nearest_f64(x));
    acc = M_PI_HI * M_PI_HI / (s * s);
    sign = -1.0;
    x = 1.0 - x;
  }
  double sum = 0.0;
  while (x < 10.0) {
    sum += 1.0 / (x * x);
    x += 1.0;
  }
  const double z = 1.0 / (x * x);
  double t = 7.0 / 6.0;
  t = 691.0 / 2730.0 - z * t;
  t = 5.0 / 66.0 - z * t;
  t = 1.0 / 30.0 - z * t;
  t = 1.0 / 42.0 - z * t;
  t = 1.0 / 30.0 - z * t;
  t = 1.0 / 6.0 - z * t;
  sum += 1.0 / x + 0.5 * z + z * t / x;
  return acc + sign * sum;
}

/* b^e for an integer e >= 0, by squaring. */
MATH_INLINE double m_pow_int_f64(double b, int64_t e) {
  double r = 1.0;
  while (e > 0) {
    r = (e & 1) ? r * b : r;
    b *= b;
    e >>= 1;
  }
  return r;
}

/* Hurwitz's zeta(s, q) = sum over k >= 0 of (q + k)^-s for an integer s >= 2:
 * the terms below q + k = 10 + s summed, the rest by Euler-Maclaurin
 * (a^(1-s) / (s-1) + a^-s / 2 + the Bernoulli terms to B_14). Terms more
 * than 10^4 below zero are left out (they are below 10^-8 of the nearest). */
MATH_INLINE double m_hurwitz_zeta_f64(double s, double q) {
  static const double bernoulli[7] = {1.0 / 12.0, -1.0 / 720.0, 1.0 / 30240.0, -1.0 / 1209600.0,
                                      1.0 / 47900160.0, -691.0 / 1307674368000.0, 1.0 / 74724249600.0};
  if (q != q || q == __builtin_inf()) {
    return q != q ? q : 0.0;
  }
  const int64_t e = (int64_t)s;
  if (q < -1e4) {
    q += __builtin_floor(-1e4 - q);
  }
  double sum = 0.0;
  while (q < 10.0 + s) {
    sum += m_pow_int_f64(1.0 / q, e);
    q += 1.0;
  }
  const double inv = 1.0 / q;
  const double qs = m_pow_int_f64(inv, e);
  double tail = q * qs / (s - 1.0) + 0.5 * qs;
  double factor = s * qs * inv;
  for (int j = 0; j < 7; j++) {
    tail += bernoulli[j] * factor;
    factor *= (s + 2.0 * j + 1.0) * (s + 2.0 * j + 2.0) * inv * inv;
  }
  return sum + tail;
}

/* polygamma(n, x), the n-th derivative of digamma: (-1)^(n+1) n! zeta(n + 1, x)
 * for n >= 2. */
MATH_SPECIAL double m_polygamma_f64(double n, double x) {
  if (n == 0.0) {
    return m_digamma_f64(x);
  }
  if (n == 1.0) {
    return m_trigamma_f64(x);
  }
  double factorial = 1.0;
  for (double k = 2.0; k <= n; k += 1.0) {
    factorial *= k;
  }
  return (((int64_t)n & 1) ? 1.0 : -1.0) * factorial * m_hurwitz_zeta_f64(n + 1.0, x);
}

/* ---- four float32 lanes at a time (relaxed SIMD) ----
 *
 * The float32 forms above are plain C that clang vectorizes, multiplies and
 * adds rounded apart: wasm has no fused multiply-add outside relaxed SIMD,
 * which clang never forms by itself. These are written on vectors with
 * relaxed SIMD's madd, which the runtime compiles in wasmtime's
 * deterministic mode, where it always fuses (a library call on a host
 * without FMA): results are the same on every host. The elementwise engine
 * runs exp, sigmoid, erf, SiLU and GELU (and their backward ops) through them in
 * every loop, so a lane's result depends only on its inputs, never on the
 * layout, the dtype's conversions or the split between workers. */
#define MATH_VECTOR static inline __attribute__((always_inline, target("relaxed-simd")))

MATH_VECTOR v128_t v_madd_f32(v128_t a, v128_t b, v128_t c) { /* a b + c, rounded once */
  return wasm_f32x4_relaxed_madd(a, b, c);
}

/* e^r for |r| <= ln2 / 2: 1 + (r + r^2 h), h = 1/2 + r/6 + ... + r^5/7!, by
 * Estrin's scheme (pairs, then pairs of pairs: a shorter chain than Horner's
 * rule), each step fused. */
MATH_VECTOR v128_t v_exp_poly_f32(v128_t r) {
  const v128_t r2 = wasm_f32x4_mul(r, r);
  const v128_t h01 = v_madd_f32(r, wasm_f32x4_splat(1.0f / 6.0f), wasm_f32x4_splat(0.5f));
  const v128_t h23 = v_madd_f32(r, wasm_f32x4_splat(1.0f / 120.0f), wasm_f32x4_splat(1.0f / 24.0f));
  const v128_t h45 = v_madd_f32(r, wasm_f32x4_splat(1.0f / 5040.0f), wasm_f32x4_splat(1.0f / 720.0f));
  const v128_t h = v_madd_f32(wasm_f32x4_mul(r2, r2), h45, v_madd_f32(r2, h23, h01));
  return wasm_f32x4_add(wasm_f32x4_splat(1.0f), v_madd_f32(r2, h, r));
}

/* x = k ln2 + r (ln2 in two parts, each step fused): k, and e^r. */
MATH_VECTOR v128_t v_exp_reduce_f32(v128_t x, v128_t *k) {
  *k = wasm_f32x4_nearest(wasm_f32x4_mul(x, wasm_f32x4_splat(1.44269504088896341f)));
  const v128_t r = v_madd_f32(*k, wasm_f32x4_splat(-0.693145751953125f), x);
  return v_exp_poly_f32(v_madd_f32(*k, wasm_f32x4_splat(-1.428606765330187045e-06f), r));
}

/* k (integer-valued, |k| < 2^22) as an integer, as m_int_of_f32. */
MATH_VECTOR v128_t v_int_of_f32(v128_t k) {
  return wasm_i32x4_sub(wasm_f32x4_add(k, wasm_f32x4_splat(12582912.0f)), wasm_f32x4_splat(12582912.0f));
}

/* e^x: m_exp_f32's reduction and Taylor polynomial, with each step fused.
 * When every lane lies in [-86, 88], where 2^k is a normal float, the
 * scaling adds k to the exponent's bits, and nothing needs clamping (a NaN
 * fails the test); otherwise the vector clamps as m_exp_f32 does and scales
 * by m_scale_f32's two factors. For a normal result both scalings are
 * exact, so a lane's bits do not depend on its neighbours. (The common path
 * without the clamps and NaN's select: 1.02 to 1.23 G elements/s per
 * worker.) */
MATH_VECTOR v128_t v_exp_normal_f32(v128_t x) { /* every lane in [-86, 88] */
  v128_t k;
  const v128_t p = v_exp_reduce_f32(x, &k);
  return wasm_i32x4_add(p, wasm_i32x4_shl(v_int_of_f32(k), 23));
}

MATH_VECTOR v128_t v_exp_f32(v128_t x) {
  v128_t k;
  if (wasm_i32x4_all_true(wasm_v128_and(wasm_f32x4_ge(x, wasm_f32x4_splat(-86.0f)), wasm_f32x4_le(x, wasm_f32x4_splat(88.0f))))) {
    return v_exp_normal_f32(x);
  }
  const v128_t xc = wasm_f32x4_pmin(wasm_f32x4_pmax(x, wasm_f32x4_splat(-110.0f)), wasm_f32x4_splat(89.0f));
  const v128_t p = v_exp_reduce_f32(xc, &k);
  const v128_t n = v_int_of_f32(k);
  const v128_t n1 = wasm_i32x4_shr(n, 1), n2 = wasm_i32x4_sub(n, n1);
  const v128_t y = wasm_f32x4_mul(wasm_f32x4_mul(p, wasm_i32x4_shl(wasm_i32x4_add(n1, wasm_i32x4_splat(127)), 23)),
                                  wasm_i32x4_shl(wasm_i32x4_add(n2, wasm_i32x4_splat(127)), 23));
  return wasm_v128_bitselect(x, y, wasm_f32x4_ne(x, x));
}

/* 1 / (1 + e^-x), as m_sigmoid_f32. */
MATH_VECTOR v128_t v_sigmoid_f32(v128_t x) {
  return wasm_f32x4_div(wasm_f32x4_splat(1.0f), wasm_f32x4_add(wasm_f32x4_splat(1.0f), v_exp_f32(wasm_f32x4_neg(x))));
}

/* erf x: m_erf_f32's two approximations with each step fused; a vector
 * whose lanes all lie on one side of |x| = 2 computes only that side's. */
MATH_VECTOR v128_t v_erf_f32(v128_t x) {
  const v128_t ax = wasm_f32x4_abs(x);
  const v128_t z = wasm_f32x4_mul(ax, ax);
  const v128_t small = wasm_f32x4_lt(ax, wasm_f32x4_splat(2.0f));
  v128_t near = wasm_i32x4_splat(0), far = near;
  if (wasm_v128_any_true(small)) {
    const v128_t u = wasm_f32x4_sub(z, wasm_f32x4_splat(2.0f));
    v128_t p = wasm_f32x4_splat(M_ERF_NEAR[9]);
    for (int i = 8; i >= 0; i--) {
      p = v_madd_f32(p, u, wasm_f32x4_splat(M_ERF_NEAR[i]));
    }
    near = wasm_f32x4_mul(ax, p);
  }
  if (!wasm_i32x4_all_true(small)) {
    const v128_t u = wasm_f32x4_sub(wasm_f32x4_pmin(ax, wasm_f32x4_splat(3.92f)), wasm_f32x4_splat(2.5f));
    /* q by Estrin's scheme: the coefficients' pairs, then their pairs, ... */
    const v128_t u2 = wasm_f32x4_mul(u, u), u4 = wasm_f32x4_mul(u2, u2);
    const v128_t q0 = v_madd_f32(u, wasm_f32x4_splat(-7.434754245e-2f), wasm_f32x4_splat(2.108063559e-1f));
    const v128_t q1 = v_madd_f32(u, wasm_f32x4_splat(-7.999776151e-3f), wasm_f32x4_splat(2.493827408e-2f));
    const v128_t q2 = v_madd_f32(u, wasm_f32x4_splat(-7.381609229e-4f), wasm_f32x4_splat(2.465595174e-3f));
    const v128_t q3 = v_madd_f32(u, wasm_f32x4_splat(-5.417795328e-5f), wasm_f32x4_splat(2.136442193e-4f));
    const v128_t q4 = v_madd_f32(u, wasm_f32x4_splat(-6.248156551e-6f), wasm_f32x4_splat(1.390466695e-5f));
    const v128_t q01 = v_madd_f32(u2, q1, q0), q23 = v_madd_f32(u2, q3, q2);
    const v128_t q45 = v_madd_f32(u2, wasm_f32x4_splat(1.772887460e-6f), q4);
    const v128_t q = v_madd_f32(wasm_f32x4_mul(u4, u4), q45, v_madd_f32(u4, q23, q01));
    /* 1 - e^-z q, and 1 from 3.92 on (erfc below half an ulp of 1), where
     * z is capped (at 16) so that e^-z stays normal: those lanes' values are
     * replaced, and a NaN's at the end. */
    const v128_t e = v_exp_normal_f32(wasm_f32x4_neg(wasm_f32x4_pmin(z, wasm_f32x4_splat(16.0f))));
    far = v_madd_f32(wasm_f32x4_neg(e), q, wasm_f32x4_splat(1.0f));
    far = wasm_v128_bitselect(wasm_f32x4_splat(1.0f), far, wasm_f32x4_ge(ax, wasm_f32x4_splat(3.92f)));
  }
  const v128_t r = wasm_v128_bitselect(near, far, small);
  /* the sign of x (copysign by bits), NaN as it came */
  const v128_t sign = wasm_f32x4_splat(-0.0f);
  const v128_t signed_r = wasm_v128_or(wasm_v128_andnot(r, sign), wasm_v128_and(x, sign));
  return wasm_v128_bitselect(x, signed_r, wasm_f32x4_ne(x, x));
}

#endif /* OPENREG_ENGINE_MATH_H */
