/*
 * The elementwise engine of `openreg.engine`: `elementwise` applies any op of
 * OR_ELEMENTWISE_OPS over the iteration space its parameter block describes,
 * `elementwise_list` one op over a list of contiguous operand sets (torch's
 * _foreach_ ops), each as a 1-d `elementwise` (see openreg_engine.h).
 *
 * Structure (PyTorch's gpu_kernel in aten/src/ATen/native/cuda/Loops.cuh is
 * the model):
 *   - an op is an expression over `a`, `b`, `c` and the arguments `A0`, `A1`,
 *     written once per compute type (float, double, int64) in the tables
 *     below;
 *   - OR_LOOPS instantiates, per op and compute type, three row loops: a
 *     contiguous one on the compute type's own storage type (vectorized by
 *     clang with SIMD128), a strided one on the same types, and a generic one
 *     that converts every operand from and to its own dtype;
 *   - `walk` runs a row loop over every row of the (up to 16-dimensional)
 *     iteration space, in a fixed order, so results never depend on how work
 *     is split.
 * Scalar operands are copied into a local of the compute type and read with
 * stride 0.
 *
 * Compiled for wasm32 and wasm64 from this one source (device-kernels/build.rs).
 */
#include "dtype.h"

/* Every function here may use relaxed SIMD (fma_f32 below); the runtime
 * compiles it in wasmtime's deterministic mode, so it has one result on every
 * host. clang does not contract a * b + c into it on its own. */
#pragma clang attribute push(__attribute__((target("relaxed-simd"))), apply_to = function)

/* ---- exact remainder (C's fmod) ---- */

/*
 * x - trunc(x / y) * y, exactly: binary long division of the significands,
 * one exponent step at a time (the remainder of two floats is always
 * representable, so nothing rounds). NAME(x, y) for a float type of BITS
 * bits with MANT_BITS explicit significand bits.
 */
#define OR_DEFINE_FMOD(NAME, T, U, BITS, MANT_BITS, TO_BITS, FROM_BITS)                  \
  static T NAME(T x, T y) {                                                              \
    const U sign_bit = (U)1 << (BITS - 1);                                               \
    const U implicit = (U)1 << MANT_BITS;                                                \
    const U mant_mask = implicit - 1;                                                    \
    const U inf = ((((U)1 << (BITS - 1 - MANT_BITS)) - 1)) << MANT_BITS;                 \
    U ux = TO_BITS(x), uy = TO_BITS(y);                                                  \
    const U sign = ux & sign_bit;                                                        \
    ux &= ~sign_bit;                                                                     \
    uy &= ~sign_bit;                                                                     \
    if (uy == 0 || ux >= inf || uy > inf) {                                              \
      return (x * y) / (x * y); /* NaN: y is 0, x is infinite, or a NaN */               \
    }                                                                                    \
    if (ux < uy) {                                                                       \
      return x; /* |x| < |y| (or y infinite) */                                          \
    }                                                                                    \
    int ex = (int)(ux >> MANT_BITS), ey = (int)(uy >> MANT_BITS);                        \
    U mx = ux & mant_mask, my = uy & mant_mask;                                          \
    if (ex) {                                                                            \
      mx |= implicit;                                                                    \
    } else {                                                                             \
      for (ex = 1; !(mx & implicit); ex--) {                                             \
        mx <<= 1;                                                                        \
      }                                                                                  \
    }                                                                                    \
    if (ey) {                                                                            \
      my |= implicit;                                                                    \
    } else {                                                                             \
      for (ey = 1; !(my & implicit); ey--) {                                             \
        my <<= 1;                                                                        \
      }                                                                                  \
    }                                                                                    \
    /* mx < 2 * my holds after each step, so one subtraction per bit suffices. */        \
    for (; ex > ey; ex--) {                                                              \
      if (mx >= my) {                                                                    \
        mx -= my;                                                                        \
      }                                                                                  \
      mx <<= 1;                                                                          \
    }                                                                                    \
    if (mx >= my) {                                                                      \
      mx -= my;                                                                          \
    }                                                                                    \
    if (mx == 0) {                                                                       \
      return FROM_BITS(sign);                                                            \
    }                                                                                    \
    for (; !(mx & implicit); ey--) {                                                     \
      mx <<= 1;                                                                          \
    }                                                                                    \
    const U r = ey > 0 ? ((U)ey << MANT_BITS) | (mx & mant_mask) : mx >> (1 - ey);       \
    return FROM_BITS(r | sign);                                                          \
  }

OR_DEFINE_FMOD(fmod_f32, float, uint32_t, 32, 23, m_f32_bits, m_f32_from_bits)
OR_DEFINE_FMOD(fmod_f64, double, uint64_t, 64, 52, m_f64_bits, m_f64_from_bits)

/* torch.div(rounding_mode='floor') on floats, as PyTorch's CPU kernel computes it. */
#define OR_DEFINE_DIV_FLOOR(NAME, T, FMOD, FLOOR, COPYSIGN)           \
  static T NAME(T a, T b) {                                          \
    if (b == 0) {                                                    \
      return a / b;                                                  \
    }                                                                \
    const T mod = FMOD(a, b);                                        \
    T div = (a - mod) / b;                                           \
    if (mod != 0 && (b < 0) != (mod < 0)) {                          \
      div -= (T)1;                                                   \
    }                                                                \
    if (div == 0) {                                                  \
      return COPYSIGN((T)0, a / b);                                  \
    }                                                                \
    T floordiv = FLOOR(div);                                         \
    if (div - floordiv > (T)0.5) {                                   \
      floordiv += (T)1;                                              \
    }                                                                \
    return floordiv;                                                 \
  }

OR_DEFINE_DIV_FLOOR(div_floor_f32, float, fmod_f32, __builtin_floorf, __builtin_copysignf)
OR_DEFINE_DIV_FLOOR(div_floor_f64, double, fmod_f64, __builtin_floor, __builtin_copysign)

/* Python's %: the result has the sign of b. */
#define OR_DEFINE_REMAINDER(NAME, T, FMOD)                           \
  static T NAME(T a, T b) {                                          \
    T mod = FMOD(a, b);                                              \
    if (mod != 0 && (b < 0) != (mod < 0)) {                          \
      mod += b;                                                      \
    }                                                                \
    return mod;                                                      \
  }

OR_DEFINE_REMAINDER(remainder_f32, float, fmod_f32)
OR_DEFINE_REMAINDER(remainder_f64, double, fmod_f64)


#define ARG_F32(s) ((float)(s).f)
#define ARG_F64(s) ((s).f)
#define ARG_I64(s) ((s).i)


/* ---- the ops, per compute type ---- */

/* Float ops (T is float or double; SQRT etc. are the wasm instructions). */
#define F_MAX(x, y) ((x) < (y) ? (y) : (x))
#define F_MIN(x, y) ((y) < (x) ? (y) : (x))
#define F_ISNAN(x) ((x) != (x))

/*
 * a * b + c as PyTorch's vectorized CPU kernels compute it for add with alpha,
 * lerp and addcmul: for float32 (and float16/bfloat16, computed in float32)
 * a fused multiply-add, rounded once. Wasm has no scalar FMA; relaxed SIMD's
 * multiply-add, which the runtime compiles in wasmtime's deterministic mode,
 * is fused on every host (one x86 or ARM instruction, or a library call on a
 * CPU without FMA), so each lane's result is the correctly rounded one and
 * the same everywhere, in every loop that computes it. For float64, unfused.
 */
ALWAYS_INLINE float fma_f32(float a, float b, float c) {
  const v128_t r = wasm_f32x4_relaxed_madd(wasm_f32x4_splat(a), wasm_f32x4_splat(b), wasm_f32x4_splat(c));
  return wasm_f32x4_extract_lane(r, 0);
}

ALWAYS_INLINE double fma_f64(double a, double b, double c) {
  return a * b + c;
}

/* Activations as PyTorch's CPU kernels write them (GeluKernel.cpp, Activation.cpp). */
#define K_SQRT1_2 0.70710678118654752440
#define K_GELU_BETA 0.79788456080286535588 /* sqrt(2 / pi) */
#define K_GELU_KAPPA 0.044715
#define K_GELU_PDF 0.39894228040143267794  /* 1 / sqrt(2 pi) */
#define K_LOG2E 1.44269504088896340736
#define K_LOG10E 0.43429448190325182765
#define K_LN2 0.69314718055994530942

#define OR_DEFINE_ACTIVATIONS(T, S)                                                          \
  ALWAYS_INLINE T gelu_tanh_##S(T x) {                                                      \
    const T inner = (T)K_GELU_BETA * (x + (T)K_GELU_KAPPA * x * x * x);                    \
    return (T)0.5 * x * ((T)1 + m_tanh_##S(inner));                                         \
  }                                                                                         \
  ALWAYS_INLINE T gelu_backward_##S(T dy, T x) {                                            \
    const T cdf = (T)0.5 * ((T)1 + (T)m_erf_##S(x * (T)K_SQRT1_2));                         \
    const T pdf = (T)K_GELU_PDF * m_exp_##S(x * x * (T)-0.5);                               \
    return dy * (cdf + x * pdf);                                                            \
  }                                                                                         \
  ALWAYS_INLINE T gelu_tanh_backward_##S(T dy, T x) {                                       \
    const T x_sq = x * x;                                                                   \
    const T inner = (T)K_GELU_BETA * (x + (T)K_GELU_KAPPA * x_sq * x);                     \
    const T t = m_tanh_##S(inner);                                                          \
    const T left = (T)0.5 * x;                                                              \
    const T right = (T)1 + t;                                                               \
    const T inner_derivative = (T)K_GELU_BETA * ((T)1 + (T)3 * (T)K_GELU_KAPPA * x_sq);     \
    return dy * ((T)0.5 * right + left * ((T)1 - t * t) * inner_derivative);                \
  }                                                                                         \
  ALWAYS_INLINE T silu_backward_##S(T dy, T x) {                                            \
    const T sig = (T)1 / ((T)1 + m_exp_##S(-x));                                            \
    return dy * sig * ((T)1 + x * ((T)1 - sig));                                            \
  }

OR_DEFINE_ACTIVATIONS(float, f32)
OR_DEFINE_ACTIVATIONS(double, f64)

/* More ops as PyTorch's CPU kernels write them (BinaryOpsKernel.cpp,
 * UnaryOpsKernel.cpp, Activation.cpp): log-add-exp, sinc, the regression
 * losses. */
#define K_PI 3.14159265358979323846
#define OR_DEFINE_MORE_OPS(T, S, FABS)                                                      \
  ALWAYS_INLINE T logaddexp_##S(T a, T b) {                                                 \
    const T m = F_MAX(a, b);                                                                \
    const T r = m + m_log1p_##S(m_exp_##S(-FABS(a - b)));                                   \
    return (a == b && FABS(a) == (T)__builtin_inf()) ? a : r;                               \
  }                                                                                         \
  ALWAYS_INLINE T logaddexp2_##S(T a, T b) {                                                \
    const T m = F_MAX(a, b);                                                                \
    const T r = m + m_log1p_##S(m_exp2_##S(-FABS(a - b))) * (T)(1.0 / K_LN2);               \
    return (a == b && FABS(a) == (T)__builtin_inf()) ? a : r;                               \
  }                                                                                         \
  ALWAYS_INLINE T sinc_##S(T a) {                                                           \
    const T product = (T)K_PI * a;                                                          \
    return a == (T)0 ? (T)1 : (T)m_sin_f64((double)product) / product;                      \
  }                                                                                         \
  ALWAYS_INLINE T smooth_l1_##S(T diff, T beta) {                                           \
    const T z = FABS(diff);                                                                 \
    return z < beta ? (T)0.5 * z * z / beta : z - (T)0.5 * beta;                            \
  }                                                                                         \
  ALWAYS_INLINE T smooth_l1_backward_##S(T x, T grad, T norm, T beta) {                     \
    return x <= -beta ? -norm * grad : x >= beta ? norm * grad : norm * x * grad / beta;    \
  }                                                                                         \
  ALWAYS_INLINE T huber_##S(T diff, T delta) {                                              \
    const T z = FABS(diff);                                                                 \
    return z < delta ? (T)0.5 * z * z : delta * (z - (T)0.5 * delta);                       \
  }                                                                                         \
  ALWAYS_INLINE T huber_backward_##S(T x, T grad, T norm, T delta) {                        \
    return x <= -delta ? -norm * grad * delta : x >= delta ? norm * grad * delta : norm * x * grad; \
  }

OR_DEFINE_MORE_OPS(float, f32, __builtin_fabsf)
OR_DEFINE_MORE_OPS(double, f64, __builtin_fabs)

#define m_signbit_f32(x) ((uint8_t)(m_f32_bits(x) >> 31))
#define m_signbit_f64(x) ((uint8_t)(m_f64_bits(x) >> 63))

/* Ops written the same way in every compute type T. */
#define OR_COMMON_OPS(X, T)                                                                           \
  X(FILL, 0, T, A0)                                                                                   \
  X(COPY, 1, T, a)                                                                                    \
  X(LOGICAL_NOT, 1, uint8_t, a == 0)                                                                  \
  X(THRESHOLD, 2, T, a <= A0 ? A1 : b)                                                                \
  X(EQ, 2, uint8_t, a == b)                                                                           \
  X(NE, 2, uint8_t, a != b)                                                                           \
  X(LT, 2, uint8_t, a < b)                                                                            \
  X(LE, 2, uint8_t, a <= b)                                                                           \
  X(GT, 2, uint8_t, a > b)                                                                            \
  X(GE, 2, uint8_t, a >= b)                                                                           \
  X(LOGICAL_AND, 2, uint8_t, (a != 0) & (b != 0))                                                     \
  X(LOGICAL_OR, 2, uint8_t, (a != 0) | (b != 0))                                                      \
  X(LOGICAL_XOR, 2, uint8_t, (a != 0) ^ (b != 0))                                                     \
  X(WHERE, 3, T, a != 0 ? b : c)

#define OR_FLOAT_OPS(X, T, FSQRT, FFLOOR, FCEIL, FTRUNC, FRINT, FFABS, SUFFIX)                                     \
  OR_COMMON_OPS(X, T)                                                                                 \
  X(NEG, 1, T, -a)                                                                                    \
  X(ABS, 1, T, FFABS(a))                                                                               \
  X(SIGN, 1, T, (T)((0 < a) - (a < 0)))                                                               \
  X(SQRT, 1, T, FSQRT(a))                                                                              \
  X(RSQRT, 1, T, (T)1 / FSQRT(a))                                                                      \
  X(RECIPROCAL, 1, T, (T)1 / a)                                                                       \
  X(FLOOR, 1, T, FFLOOR(a))                                                                            \
  X(CEIL, 1, T, FCEIL(a))                                                                              \
  X(TRUNC, 1, T, FTRUNC(a))                                                                            \
  X(ROUND, 1, T, FRINT(a))                                                                             \
  X(BITWISE_NOT, 1, T, (TRAP(), a))                                                                   \
  X(ISNAN, 1, uint8_t, F_ISNAN(a))                                                                    \
  X(CLAMP, 1, T, F_ISNAN(a) ? a : F_MIN(F_MAX(a, A0), A1))                                            \
  X(CLAMP_MIN, 1, T, F_ISNAN(a) ? a : F_MAX(a, A0))                                                   \
  X(CLAMP_MAX, 1, T, F_ISNAN(a) ? a : F_MIN(a, A0))                                                   \
  X(ADD, 2, T, A0 == (T)1 ? a + b : A0 == (T)-1 ? a - b : fma_##SUFFIX(b, A0, a))                          \
  X(MUL, 2, T, a * b)                                                                                 \
  X(DIV, 2, T, a / b)                                                                                 \
  X(DIV_TRUNC, 2, T, FTRUNC(a / b))                                                                    \
  X(MAXIMUM, 2, T, F_ISNAN(a) ? a : F_ISNAN(b) ? b : F_MAX(a, b))                                     \
  X(MINIMUM, 2, T, F_ISNAN(a) ? a : F_ISNAN(b) ? b : F_MIN(a, b))                                     \
  X(BITWISE_AND, 2, T, (TRAP(), a))                                                                   \
  X(BITWISE_OR, 2, T, (TRAP(), a))                                                                    \
  X(BITWISE_XOR, 2, T, (TRAP(), a))                                                                   \
  X(LERP, 3, T, FFABS(c) < (T)0.5 ? fma_##SUFFIX(c, b - a, a) : fma_##SUFFIX(c - (T)1, b - a, b))      \
  X(ADDCMUL, 3, T, fma_##SUFFIX(A0 * b, c, a))                                                        \
  X(ADDCDIV, 3, T, a + A0 * b / c)                                                                    \
  X(LERP_SCALAR, 2, T, FFABS(A0) < (T)0.5 ? fma_##SUFFIX(A0, b - a, a) : fma_##SUFFIX(A0 - (T)1, b - a, b)) \
  X(DIV_FLOOR, 2, T, div_floor_##SUFFIX(a, b))                                                        \
  X(REMAINDER, 2, T, remainder_##SUFFIX(a, b))                                                        \
  X(FMOD, 2, T, fmod_##SUFFIX(a, b))                                                                  \
  X(EXP, 1, T, m_exp_##SUFFIX(a))                                                                     \
  X(EXP2, 1, T, m_exp2_##SUFFIX(a))                                                                     \
  X(EXPM1, 1, T, m_expm1_##SUFFIX(a))                                                                 \
  X(LOG, 1, T, m_log_##SUFFIX(a))                                                                     \
  X(LOG2, 1, T, m_log_##SUFFIX(a) * (T)K_LOG2E)                                                       \
  X(LOG10, 1, T, m_log_##SUFFIX(a) * (T)K_LOG10E)                                                     \
  X(LOG1P, 1, T, m_log1p_##SUFFIX(a))                                                                 \
  X(TANH, 1, T, m_tanh_##SUFFIX(a))                                                                   \
  X(SIGMOID, 1, T, m_sigmoid_##SUFFIX(a))                                                             \
  X(ERF, 1, T, m_erf_##SUFFIX(a))                                                                     \
  X(SILU, 1, T, a / ((T)1 + m_exp_##SUFFIX(-a)))                                                      \
  X(MISH, 1, T, a * m_tanh_##SUFFIX(m_log1p_##SUFFIX(m_exp_##SUFFIX(a))))                             \
  X(GELU, 1, T, a * (T)0.5 * ((T)1 + m_erf_##SUFFIX(a * (T)K_SQRT1_2)))                               \
  X(GELU_TANH, 1, T, gelu_tanh_##SUFFIX(a))                                                           \
  X(SOFTPLUS, 1, T, a * A0 > A1 ? a : m_log1p_##SUFFIX(m_exp_##SUFFIX(a * A0)) / A0)                  \
  X(ELU, 1, T, a <= (T)0 ? m_expm1_##SUFFIX(a * A2) * A0 : a * A1)                                    \
  X(LEAKY_RELU, 1, T, a > (T)0 ? a : a * A0)                                                          \
  X(TANH_BACKWARD, 2, T, a * ((T)1 - b * b))                                                          \
  X(SIGMOID_BACKWARD, 2, T, a * ((T)1 - b) * b)                                                       \
  X(SILU_BACKWARD, 2, T, silu_backward_##SUFFIX(a, b))                                                \
  X(GELU_BACKWARD, 2, T, gelu_backward_##SUFFIX(a, b))                                                \
  X(GELU_TANH_BACKWARD, 2, T, gelu_tanh_backward_##SUFFIX(a, b))                                      \
  X(SOFTPLUS_BACKWARD, 2, T, b * A0 > A1 ? a : a * m_exp_##SUFFIX(b * A0) / (m_exp_##SUFFIX(b * A0) + (T)1)) \
  X(LEAKY_RELU_BACKWARD, 2, T, a > (T)0 ? b : b * A0)                                               \
  X(ELU_BACKWARD, 2, T, b <= (T)0 ? a * A2 * A0 * m_exp_##SUFFIX(b * A2) : a * A1)                     \
  X(ELU_BACKWARD_RESULT, 2, T, b <= (T)0 ? a * A2 * (b + A0) : a * A1)                                \
  X(SIN, 1, T, m_sin_fast_##SUFFIX(a))                                                                \
  X(COS, 1, T, m_cos_fast_##SUFFIX(a))                                                                \
  X(ASIN, 1, T, m_asin_##SUFFIX(a))                                                                   \
  X(ACOS, 1, T, m_acos_##SUFFIX(a))                                                                   \
  X(ATAN, 1, T, m_atan_##SUFFIX(a))                                                                   \
  X(ATAN2, 2, T, m_atan2_##SUFFIX(a, b))                                                              \
  X(SINH, 1, T, (T)m_sinh_f64((double)a))                                                             \
  X(COSH, 1, T, (T)m_cosh_f64((double)a))                                                             \
  X(ASINH, 1, T, (T)m_asinh_f64((double)a))                                                           \
  X(ACOSH, 1, T, (T)m_acosh_f64((double)a))                                                           \
  X(ATANH, 1, T, (T)m_atanh_f64((double)a))                                                           \
  X(TAN, 1, T, m_tan_fast_##SUFFIX(a))                                                                \
  X(POW, 2, T, m_pow_##SUFFIX(a, b))                                                                  \
  X(POW_SCALAR, 1, T, m_pow_##SUFFIX(a, A0_F64))                                                   \
  X(NAN_TO_NUM, 1, T, F_ISNAN(a) ? A0 : a == (T)__builtin_inf() ? A1 : a == -(T)__builtin_inf() ? A2 : a) \
  X(HARDTANH_BACKWARD, 2, T, (b <= A0 || b >= A1) ? (T)0 : a)                                        \
  X(CLAMP_TENSOR, 3, T, F_ISNAN(b) ? b : F_ISNAN(c) ? c : F_ISNAN(a) ? a : F_MIN(F_MAX(a, b), c))      \
  X(SQUARED_DIFF, 2, T, (a - b) * (a - b))                                                            \
  X(MSE_BACKWARD, 3, T, A0 * (a - b) * c)                                                             \
  X(MUL_ADD, 3, T, a * b + c)                                                                         \
  X(LSHIFT, 2, T, (TRAP(), a))                                                                        \
  X(RSHIFT, 2, T, (TRAP(), a))                                                                        \
  X(ROUND_DECIMALS, 1, T, A1 != (T)0 ? FRINT(a / A0) * A0 : FRINT(a * A0) / A0)                       \
  X(HARDSIGMOID, 1, T, F_MIN(F_MAX(a + (T)3, (T)0), (T)6) / (T)6)                                     \
  X(HARDSIGMOID_BACKWARD, 2, T, (b > (T)-3 && b < (T)3) ? a * (T)(1.0 / 6.0) : (T)0)                  \
  X(HARDSWISH, 1, T, a * F_MIN(F_MAX(a + (T)3, (T)0), (T)6) / (T)6)                                   \
  X(HARDSWISH_BACKWARD, 2, T, b < (T)-3 ? (T)0 : b <= (T)3 ? a * (b / (T)3 + (T)0.5) : a)             \
  X(HARDSHRINK, 1, T, (a >= -A0 && a <= A0) ? (T)0 : a)                                               \
  X(SOFTSHRINK, 1, T, a > A0 ? a - A0 : a < -A0 ? a + A0 : a * (T)0)                                  \
  X(SHRINK_BACKWARD, 2, T, (b >= -A0 && b <= A0) ? (T)0 : a)                                          \
  X(GLU, 2, T, a * ((T)1 / ((T)1 + m_exp_##SUFFIX(-b))))                                              \
  X(GLU_BACKWARD, 3, T, ((T)1 - a) * a * b * c)                                                       \
  X(PRELU, 2, T, a > (T)0 ? a : b * a)                                                                \
  X(PRELU_BACKWARD_INPUT, 3, T, a > (T)0 ? c : b * c)                                                 \
  X(PRELU_BACKWARD_WEIGHT, 2, T, a > (T)0 ? (T)0 : a * b)                                             \
  X(LOGADDEXP, 2, T, logaddexp_##SUFFIX(a, b))                                                        \
  X(LOGADDEXP2, 2, T, logaddexp2_##SUFFIX(a, b))                                                      \
  X(HYPOT, 2, T, m_hypot_##SUFFIX(a, b))                                                              \
  X(COPYSIGN, 2, T, m_copysign_##SUFFIX(a, b))                                                        \
  X(XLOGY, 2, T, F_ISNAN(b) ? b : a == (T)0 ? (T)0 : a * m_log_##SUFFIX(b))                          \
  X(XLOG1PY, 2, T, F_ISNAN(b) ? b : a == (T)0 ? (T)0 : a * m_log1p_##SUFFIX(b))                      \
  X(FRAC, 1, T, a - FTRUNC(a))                                                                        \
  X(HEAVISIDE, 2, T, a == (T)0 ? b : (T)(a > (T)0))                                                   \
  X(FMAX, 2, T, F_ISNAN(a) ? b : F_ISNAN(b) ? a : F_MAX(a, b))                                        \
  X(FMIN, 2, T, F_ISNAN(a) ? b : F_ISNAN(b) ? a : F_MIN(a, b))                                        \
  X(SIGNBIT, 1, uint8_t, m_signbit_##SUFFIX(a))                                                       \
  X(GCD, 2, T, (TRAP(), a))                                                                           \
  X(LCM, 2, T, (TRAP(), a))                                                                           \
  X(SINC, 1, T, sinc_##SUFFIX(a))                                                                     \
  X(SMOOTH_L1, 2, T, smooth_l1_##SUFFIX(a - b, A0))                                                   \
  X(SMOOTH_L1_BACKWARD, 3, T, smooth_l1_backward_##SUFFIX(a - b, c, A0, A1))                          \
  X(HUBER, 2, T, huber_##SUFFIX(a - b, A0))                                                           \
  X(HUBER_BACKWARD, 3, T, huber_backward_##SUFFIX(a - b, c, A0, A1))                                  \
  X(ERFC, 1, T, (T)m_erfc_f64((double)a))                                                             \
  X(ERFINV, 1, T, (T)m_erfinv_f64((double)a))                                                         \
  X(LGAMMA, 1, T, (T)m_lgamma_f64((double)a))                                                         \
  X(DIGAMMA, 1, T, (T)m_digamma_f64((double)a))                                                      \
  X(POLYGAMMA, 1, T, (T)m_polygamma_f64((double)A0, (double)a))                                     \
  X(ENTR, 1, T, (T)m_entr_f64((double)a))                                                             \
  X(ANGLE, 1, T, F_ISNAN(a) ? a : a < (T)0 ? (T)K_PI : (T)0)                                          \
  X(ERFCX, 1, T, (T)m_erfcx_f64((double)a))                                                           \
  X(NDTRI, 1, T, (T)m_ndtri_f64((double)a))                                                           \
  X(LOG_NDTR, 1, T, (T)m_log_ndtr_f64((double)a))                                                     \
  X(I0, 1, T, (T)m_bessel_i_f64(0, (double)a, 0))                                                     \
  X(I0E, 1, T, (T)m_bessel_i_f64(0, (double)a, 1))                                                    \
  X(I1, 1, T, (T)m_bessel_i_f64(1, (double)a, 0))                                                     \
  X(I1E, 1, T, (T)m_bessel_i_f64(1, (double)a, 1))                                                    \
  X(RENORM_FACTOR, 1, T, a > A0 ? A0 / (a + (T)1e-7) : (T)1)                                         \
  X(CUBE, 1, T, (a * a) * a)                                                                          \
  X(RECIPROCAL_SQUARE, 1, T, (T)1 / (a * a))

/* Integer powers as CPU computes them: by squaring, wrapping; a negative
 * exponent gives 1 for base 1, +-1 for base -1, and 0 otherwise. */
static int64_t i_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    return base == 1 ? 1 : base == -1 ? ((exp & 1) ? -1 : 1) : 0;
  }
  uint64_t r = 1, b = (uint64_t)base, e = (uint64_t)exp;
  while (e) {
    if (e & 1) {
      r *= b;
    }
    b *= b;
    e >>= 1;
  }
  return (int64_t)r;
}

/* gcd and lcm as CPU computes them (Euclid's algorithm on magnitudes). */
static int64_t i_gcd(int64_t a, int64_t b) {
  uint64_t x = a < 0 ? 0 - (uint64_t)a : (uint64_t)a;
  uint64_t y = b < 0 ? 0 - (uint64_t)b : (uint64_t)b;
  while (x != 0) {
    const uint64_t t = x;
    x = y % x;
    y = t;
  }
  return (int64_t)y;
}

static int64_t i_lcm(int64_t a, int64_t b) {
  const int64_t g = i_gcd(a, b);
  if (g == 0) {
    return 0;
  }
  const uint64_t m = (uint64_t)(a / g) * (uint64_t)b;
  return (int64_t)m < 0 ? (int64_t)(0 - m) : (int64_t)m;
}

/* Integer ops, in int64 with wrapping arithmetic (through uint64). */
#define I_WRAP(expr) ((int64_t)(expr))
#define I_U(x) ((uint64_t)(x))
#define I_MAX(x, y) ((x) < (y) ? (y) : (x))
#define I_MIN(x, y) ((y) < (x) ? (y) : (x))
/* Division by zero traps (PyTorch raises ZeroDivisionError); INT64_MIN / -1 wraps. */
#define I_DIV_TRUNC(x, y) ((y) == -1 ? I_WRAP(0 - I_U(x)) : (x) / (y))

ALWAYS_INLINE int64_t i_div_floor(int64_t a, int64_t b) {
  if (b == -1) {
    return I_WRAP(0 - I_U(a));
  }
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

ALWAYS_INLINE int64_t i_remainder(int64_t a, int64_t b) {
  if (b == -1) {
    return 0;
  }
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

#define OR_INT_OPS(X)                                                                                 \
  OR_COMMON_OPS(X, int64_t)                                                                           \
  X(NEG, 1, int64_t, I_WRAP(0 - I_U(a)))                                                              \
  X(ABS, 1, int64_t, a < 0 ? I_WRAP(0 - I_U(a)) : a)                                                  \
  X(SIGN, 1, int64_t, (int64_t)((0 < a) - (a < 0)))                                                   \
  X(SQRT, 1, int64_t, (TRAP(), a))                                                                    \
  X(RSQRT, 1, int64_t, (TRAP(), a))                                                                   \
  X(RECIPROCAL, 1, int64_t, (TRAP(), a))                                                              \
  X(FLOOR, 1, int64_t, a)                                                                             \
  X(CEIL, 1, int64_t, a)                                                                              \
  X(TRUNC, 1, int64_t, a)                                                                             \
  X(ROUND, 1, int64_t, a)                                                                             \
  X(BITWISE_NOT, 1, int64_t, ~a)                                                                      \
  X(ISNAN, 1, uint8_t, 0 * a)                                                                         \
  X(CLAMP, 1, int64_t, I_MIN(I_MAX(a, A0), A1))                                                       \
  X(CLAMP_MIN, 1, int64_t, I_MAX(a, A0))                                                              \
  X(CLAMP_MAX, 1, int64_t, I_MIN(a, A0))                                                              \
  X(ADD, 2, int64_t, I_WRAP(I_U(a) + I_U(A0) * I_U(b)))                                               \
  X(MUL, 2, int64_t, I_WRAP(I_U(a) * I_U(b)))                                                         \
  X(DIV, 2, int64_t, (TRAP(), a))                                                                     \
  X(DIV_TRUNC, 2, int64_t, I_DIV_TRUNC(a, b))                                                         \
  X(MAXIMUM, 2, int64_t, I_MAX(a, b))                                                                 \
  X(MINIMUM, 2, int64_t, I_MIN(a, b))                                                                 \
  X(BITWISE_AND, 2, int64_t, a & b)                                                                   \
  X(BITWISE_OR, 2, int64_t, a | b)                                                                    \
  X(BITWISE_XOR, 2, int64_t, a ^ b)                                                                   \
  X(LERP, 3, int64_t, (TRAP(), a))                                                                    \
  X(ADDCMUL, 3, int64_t, I_WRAP(I_U(a) + I_U(A0) * I_U(b) * I_U(c)))                                  \
  X(ADDCDIV, 3, int64_t, (TRAP(), a))                                                                \
  X(LERP_SCALAR, 2, int64_t, (TRAP(), a))                                                            \
  X(DIV_FLOOR, 2, int64_t, i_div_floor(a, b))                                                         \
  X(REMAINDER, 2, int64_t, i_remainder(a, b))                                                         \
  X(FMOD, 2, int64_t, (b == -1 ? 0 : a % b))                                                         \
  X(EXP, 1, int64_t, (TRAP(), a))                                                                     \
  X(EXP2, 1, int64_t, (TRAP(), a))                                                                    \
  X(EXPM1, 1, int64_t, (TRAP(), a))                                                                   \
  X(LOG, 1, int64_t, (TRAP(), a))                                                                     \
  X(LOG2, 1, int64_t, (TRAP(), a))                                                                    \
  X(LOG10, 1, int64_t, (TRAP(), a))                                                                   \
  X(LOG1P, 1, int64_t, (TRAP(), a))                                                                   \
  X(TANH, 1, int64_t, (TRAP(), a))                                                                    \
  X(SIGMOID, 1, int64_t, (TRAP(), a))                                                                 \
  X(ERF, 1, int64_t, (TRAP(), a))                                                                     \
  X(SILU, 1, int64_t, (TRAP(), a))                                                                    \
  X(MISH, 1, int64_t, (TRAP(), a))                                                                    \
  X(GELU, 1, int64_t, (TRAP(), a))                                                                    \
  X(GELU_TANH, 1, int64_t, (TRAP(), a))                                                               \
  X(SOFTPLUS, 1, int64_t, (TRAP(), a))                                                                \
  X(ELU, 1, int64_t, (TRAP(), a))                                                                     \
  X(LEAKY_RELU, 1, int64_t, (TRAP(), a))                                                              \
  X(TANH_BACKWARD, 2, int64_t, (TRAP(), a))                                                           \
  X(SIGMOID_BACKWARD, 2, int64_t, (TRAP(), a))                                                        \
  X(SILU_BACKWARD, 2, int64_t, (TRAP(), a))                                                           \
  X(GELU_BACKWARD, 2, int64_t, (TRAP(), a))                                                           \
  X(GELU_TANH_BACKWARD, 2, int64_t, (TRAP(), a))                                                      \
  X(SOFTPLUS_BACKWARD, 2, int64_t, (TRAP(), a))                                                       \
  X(LEAKY_RELU_BACKWARD, 2, int64_t, (TRAP(), a))                                                     \
  X(ELU_BACKWARD, 2, int64_t, (TRAP(), a))                                                            \
  X(ELU_BACKWARD_RESULT, 2, int64_t, (TRAP(), a))                                                    \
  X(SIN, 1, int64_t, (TRAP(), a))                                                                     \
  X(COS, 1, int64_t, (TRAP(), a))                                                                     \
  X(ASIN, 1, int64_t, (TRAP(), a))                                                                    \
  X(ACOS, 1, int64_t, (TRAP(), a))                                                                    \
  X(ATAN, 1, int64_t, (TRAP(), a))                                                                    \
  X(ATAN2, 2, int64_t, (TRAP(), a))                                                                   \
  X(SINH, 1, int64_t, (TRAP(), a))                                                                    \
  X(COSH, 1, int64_t, (TRAP(), a))                                                                    \
  X(ASINH, 1, int64_t, (TRAP(), a))                                                                   \
  X(ACOSH, 1, int64_t, (TRAP(), a))                                                                   \
  X(ATANH, 1, int64_t, (TRAP(), a))                                                                   \
  X(TAN, 1, int64_t, (TRAP(), a))                                                                     \
  X(POW, 2, int64_t, i_pow(a, b))                                                                     \
  X(POW_SCALAR, 1, int64_t, i_pow(a, A0))                                                             \
  X(NAN_TO_NUM, 1, int64_t, (TRAP(), a))                                                              \
  X(HARDTANH_BACKWARD, 2, int64_t, (TRAP(), a))                                                      \
  X(CLAMP_TENSOR, 3, int64_t, I_MIN(I_MAX(a, b), c))                                                 \
  X(SQUARED_DIFF, 2, int64_t, (TRAP(), a))                                                           \
  X(MSE_BACKWARD, 3, int64_t, (TRAP(), a))                                                           \
  X(MUL_ADD, 3, int64_t, (TRAP(), a))                                                               \
  X(LSHIFT, 2, int64_t, (b < 0 || b >= 64) ? 0 : I_WRAP(I_U(a) << b))                                \
  X(RSHIFT, 2, int64_t, (b < 0 || b >= 64) ? (a < 0 ? -1 : 0) : a >> b)                              \
  X(ROUND_DECIMALS, 1, int64_t, (TRAP(), a))                                                         \
  X(HARDSIGMOID, 1, int64_t, (TRAP(), a))                                                            \
  X(HARDSIGMOID_BACKWARD, 2, int64_t, (TRAP(), a))                                                   \
  X(HARDSWISH, 1, int64_t, (TRAP(), a))                                                              \
  X(HARDSWISH_BACKWARD, 2, int64_t, (TRAP(), a))                                                     \
  X(HARDSHRINK, 1, int64_t, (TRAP(), a))                                                             \
  X(SOFTSHRINK, 1, int64_t, (TRAP(), a))                                                             \
  X(SHRINK_BACKWARD, 2, int64_t, (TRAP(), a))                                                        \
  X(GLU, 2, int64_t, (TRAP(), a))                                                                    \
  X(GLU_BACKWARD, 3, int64_t, (TRAP(), a))                                                           \
  X(PRELU, 2, int64_t, (TRAP(), a))                                                                  \
  X(PRELU_BACKWARD_INPUT, 3, int64_t, (TRAP(), a))                                                   \
  X(PRELU_BACKWARD_WEIGHT, 2, int64_t, (TRAP(), a))                                                  \
  X(LOGADDEXP, 2, int64_t, (TRAP(), a))                                                              \
  X(LOGADDEXP2, 2, int64_t, (TRAP(), a))                                                             \
  X(HYPOT, 2, int64_t, (TRAP(), a))                                                                  \
  X(COPYSIGN, 2, int64_t, (TRAP(), a))                                                               \
  X(XLOGY, 2, int64_t, (TRAP(), a))                                                                  \
  X(XLOG1PY, 2, int64_t, (TRAP(), a))                                                                \
  X(FRAC, 1, int64_t, (TRAP(), a))                                                                   \
  X(HEAVISIDE, 2, int64_t, a == 0 ? b : (int64_t)(a > 0))                                            \
  X(FMAX, 2, int64_t, I_MAX(a, b))                                                                   \
  X(FMIN, 2, int64_t, I_MIN(a, b))                                                                   \
  X(SIGNBIT, 1, uint8_t, a < 0)                                                                      \
  X(GCD, 2, int64_t, i_gcd(a, b))                                                                    \
  X(LCM, 2, int64_t, i_lcm(a, b))                                                                    \
  X(SINC, 1, int64_t, (TRAP(), a))                                                                   \
  X(SMOOTH_L1, 2, int64_t, (TRAP(), a))                                                              \
  X(SMOOTH_L1_BACKWARD, 3, int64_t, (TRAP(), a))                                                     \
  X(HUBER, 2, int64_t, (TRAP(), a))                                                                  \
  X(HUBER_BACKWARD, 3, int64_t, (TRAP(), a))                                                         \
  X(ERFC, 1, int64_t, (TRAP(), a))                                                                   \
  X(ERFINV, 1, int64_t, (TRAP(), a))                                                                 \
  X(LGAMMA, 1, int64_t, (TRAP(), a))                                                                 \
  X(DIGAMMA, 1, int64_t, (TRAP(), a))                                                                \
  X(POLYGAMMA, 1, int64_t, (TRAP(), a))                                                              \
  X(ENTR, 1, int64_t, (TRAP(), a))                                                                   \
  X(ANGLE, 1, int64_t, (TRAP(), a))                                                                  \
  X(ERFCX, 1, int64_t, (TRAP(), a))                                                                  \
  X(NDTRI, 1, int64_t, (TRAP(), a))                                                                  \
  X(LOG_NDTR, 1, int64_t, (TRAP(), a))                                                               \
  X(I0, 1, int64_t, (TRAP(), a))                                                                     \
  X(I0E, 1, int64_t, (TRAP(), a))                                                                    \
  X(I1, 1, int64_t, (TRAP(), a))                                                                     \
  X(I1E, 1, int64_t, (TRAP(), a))                                                                    \
  X(RENORM_FACTOR, 1, int64_t, (TRAP(), a))                                                           \
  X(CUBE, 1, int64_t, (TRAP(), a))                                                                    \
  X(RECIPROCAL_SQUARE, 1, int64_t, (TRAP(), a))

/* ---- row loops ---- */

/* One row: `n` elements; operand k starts at ptr[k] and steps st[k] bytes. */
typedef void (*or_row)(char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args, const uint32_t *dt);

/* The value type of an op's result: the compute type, or a truth value
 * (uint8_t) that is stored as the output's dtype. */
#define RESULT_NATIVE(RT, C) (sizeof(RT) == 1 ? OR_BOOL : NATIVE_##C)

/* io = EXPR over a row of n elements, a, b and c (of type T) read as given
 * (io's elements when an input is the output). */
#define OR_CONTIG_LOOP(T, RT, A, B, C, EXPR)                                                                           \
  _Pragma("clang loop interleave_count(4)")                                                                           \
  for (int64_t j = 0; j < n; j++) {                                                                                   \
    const T a = A;                                                                                                    \
    const T b = B;                                                                                                    \
    const T c = C;                                                                                                    \
    (void)a;                                                                                                          \
    (void)b;                                                                                                          \
    (void)c;                                                                                                          \
    io[j] = (RT)(EXPR);                                                                                               \
  }

/*
 * Instantiates the three row loops of op NAME in compute type C (storage type
 * T): `contig` (every operand of the native dtype and contiguous), `strided`
 * (native dtypes, any strides), `generic` (any dtypes and strides).
 */
#define OR_LOOPS(C, T, NAME, ARITY, RT, EXPR)                                                                         \
  _Static_assert(ARITY == OR_ARITY_##NAME, "the arity of " #NAME " differs from openreg_engine.h");                  \
  static void contig_##NAME##_##C(char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args,              \
                                  const uint32_t *dt) {                                                               \
    (void)st;                                                                                                         \
    (void)dt;                                                                                                         \
    const T A0 = ARG_##C(args[0]);                                                                                    \
    const T A1 = ARG_##C(args[1]);                                                                                    \
    const T A2 = ARG_##C(args[2]);                                                                                    \
    const double A0_F64 = args[0].f; /* a float exponent as given (pow) */                                           \
    (void)A0;                                                                                                         \
    (void)A1;                                                                                                         \
    (void)A2;                                                                                                         \
    (void)A0_F64;                                                                                                     \
    RT *io = (RT *)ptr[0];                                                                                            \
    const T *ia = (const T *)ptr[ARITY >= 1 ? 1 : 0];                                                                 \
    const T *ib = (const T *)ptr[ARITY >= 2 ? 2 : 0];                                                                 \
    const T *ic = (const T *)ptr[ARITY >= 3 ? 3 : 0];                                                                 \
    (void)ia;                                                                                                         \
    (void)ib;                                                                                                         \
    (void)ic;                                                                                                         \
    /* In place (out is a, as in x.add_(y), or b): clang guards its vector loop                                       \
     * with a runtime check that the output is at least a vector group away                                           \
     * from each input, so an in-place op would take the scalar loop; the                                             \
     * input that is the output is read through it instead. Four vectors per                                          \
     * iteration: wasmtime checks the watchdog's epoch at every loop header,                                          \
     * and a vector live across that check (a splat argument) is spilled and                                          \
     * reloaded each time round, a store-to-load chain of several cycles that                                         \
     * one vector per iteration cannot hide. */                                                                       \
    if (sizeof(RT) == sizeof(T) && ARITY >= 1 && ptr[1] == ptr[0]) {                                                  \
      OR_CONTIG_LOOP(T, RT, (T)io[j], ARITY >= 2 ? ib[j] : (T)0, ARITY >= 3 ? ic[j] : (T)0, EXPR)                     \
    } else if (sizeof(RT) == sizeof(T) && ARITY >= 2 && ptr[2] == ptr[0]) {                                           \
      OR_CONTIG_LOOP(T, RT, ia[j], (T)io[j], ARITY >= 3 ? ic[j] : (T)0, EXPR)                                         \
    } else {                                                                                                          \
      OR_CONTIG_LOOP(T, RT, ARITY >= 1 ? ia[j] : (T)0, ARITY >= 2 ? ib[j] : (T)0, ARITY >= 3 ? ic[j] : (T)0, EXPR)    \
    }                                                                                                                 \
  }                                                                                                                   \
  static void strided_##NAME##_##C(char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args,             \
                                   const uint32_t *dt) {                                                              \
    (void)dt;                                                                                                         \
    const T A0 = ARG_##C(args[0]);                                                                                    \
    const T A1 = ARG_##C(args[1]);                                                                                    \
    const T A2 = ARG_##C(args[2]);                                                                                    \
    const double A0_F64 = args[0].f; /* a float exponent as given (pow) */                                           \
    (void)A0;                                                                                                         \
    (void)A1;                                                                                                         \
    (void)A2;                                                                                                         \
    (void)A0_F64;                                                                                                     \
    for (int64_t j = 0; j < n; j++) {                                                                                 \
      const T a = ARITY >= 1 ? *(const T *)(ptr[1] + j * st[1]) : (T)0;                                              \
      const T b = ARITY >= 2 ? *(const T *)(ptr[2] + j * st[2]) : (T)0;                                              \
      const T c = ARITY >= 3 ? *(const T *)(ptr[3] + j * st[3]) : (T)0;                                              \
      (void)a;                                                                                                        \
      (void)b;                                                                                                        \
      (void)c;                                                                                                        \
      *(RT *)(ptr[0] + j * st[0]) = (RT)(EXPR);                                                                       \
    }                                                                                                                 \
  }                                                                                                                   \
  /* (no memcpy: a copy between chunks would become a memory.copy call, see copy_bytes) */                         \
  __attribute__((no_builtin("memcpy"))) static void generic_##NAME##_##C(                                             \
      char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args, const uint32_t *dt) {                    \
    const T A0 = ARG_##C(args[0]);                                                                                    \
    const T A1 = ARG_##C(args[1]);                                                                                    \
    const T A2 = ARG_##C(args[2]);                                                                                    \
    const double A0_F64 = args[0].f; /* a float exponent as given (pow) */                                           \
    (void)A0;                                                                                                         \
    (void)A1;                                                                                                         \
    (void)A2;                                                                                                         \
    (void)A0_F64;                                                                                                     \
    T in[3][OR_CHUNK];                                                                                                \
    T res[OR_CHUNK];                                                                                                  \
    for (int64_t j0 = 0; j0 < n; j0 += OR_CHUNK) {                                                                    \
      const int64_t m = n - j0 < OR_CHUNK ? n - j0 : OR_CHUNK;                                                        \
      for (int k = 1; k <= ARITY; k++) {                                                                              \
        if (st[k] != 0 || j0 == 0) { /* a broadcast value (stride 0) fills its buffer once */                        \
          load_row_##C(in[k - 1], ptr[k] + j0 * st[k], st[k], dt[k], m);                                             \
        }                                                                                                             \
      }                                                                                                               \
      _Pragma("clang loop interleave_count(4)") for (int64_t j = 0; j < m; j++) {                                     \
        const T a = ARITY >= 1 ? in[0][j] : (T)0;                                                                     \
        const T b = ARITY >= 2 ? in[1][j] : (T)0;                                                                     \
        const T c = ARITY >= 3 ? in[2][j] : (T)0;                                                                     \
        (void)a;                                                                                                      \
        (void)b;                                                                                                      \
        (void)c;                                                                                                      \
        res[j] = (T)(RT)(EXPR);                                                                                       \
      }                                                                                                               \
      store_row_##C(ptr[0] + j0 * st[0], st[0], dt[0], res, m);                                                      \
    }                                                                                                                 \
  }

#define OR_LOOPS_F32(NAME, ARITY, RT, EXPR) OR_LOOPS(F32, float, NAME, ARITY, RT, EXPR)
#define OR_LOOPS_F64(NAME, ARITY, RT, EXPR) OR_LOOPS(F64, double, NAME, ARITY, RT, EXPR)
#define OR_LOOPS_I64(NAME, ARITY, RT, EXPR) OR_LOOPS(I64, int64_t, NAME, ARITY, RT, EXPR)

OR_FLOAT_OPS(OR_LOOPS_F32, float, __builtin_sqrtf, __builtin_floorf, __builtin_ceilf, __builtin_truncf,
             __builtin_rintf, __builtin_fabsf, f32)
OR_FLOAT_OPS(OR_LOOPS_F64, double, __builtin_sqrt, __builtin_floor, __builtin_ceil, __builtin_trunc, __builtin_rint,
             __builtin_fabs, f64)
OR_INT_OPS(OR_LOOPS_I64)

/* sin, cos and tan for inputs the fast loops above cannot take (|x| >= 2^20,
 * infinities, NaN): the same ops through math.h's exact reduction, branches
 * and all. Engine-internal: a launch takes them when its inputs need them
 * (needs_exact_trig). */
#define OR_ARITY_SIN_EXACT 1
#define OR_ARITY_COS_EXACT 1
#define OR_ARITY_TAN_EXACT 1
#define OR_EXACT_TRIG(C, T)                                      \
  OR_LOOPS(C, T, SIN_EXACT, 1, T, (T)m_sin_f64((double)a))       \
  OR_LOOPS(C, T, COS_EXACT, 1, T, (T)m_cos_f64((double)a))       \
  OR_LOOPS(C, T, TAN_EXACT, 1, T, (T)m_tan_f64((double)a))
OR_EXACT_TRIG(F32, float)
OR_EXACT_TRIG(F64, double)

/* io = cond ? B : C over a row of n elements of type T. */
#define OR_WHERE_LOOP(T, B, C)                                                                                    \
  for (int64_t j = 0; j < n; j++) {                                                                               \
    const T bj = B, cj = C;                                                                                       \
    io[j] = cond[j] ? bj : cj;                                                                                    \
  }

/* WHERE with a bool condition (torch.where's own form): the condition is read
 * as bytes, the values as the compute type, without the converting loop. */
#define OR_WHERE_BOOL(C, T)                                                                                       \
  static void where_bool_contig_##C(char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args,       \
                                    const uint32_t *dt) {                                                         \
    (void)st;                                                                                                     \
    (void)args;                                                                                                   \
    (void)dt;                                                                                                     \
    T *io = (T *)ptr[0];                                                                                          \
    const uint8_t *cond = (const uint8_t *)ptr[1];                                                                \
    const T *b = (const T *)ptr[2];                                                                               \
    const T *c = (const T *)ptr[3];                                                                               \
    /* Both values are read before the choice, so clang selects values (a                                         \
     * vector bit select) rather than addresses (a gather). In place                                              \
     * (masked_fill_ writes where(mask, value, self) into self), the input that                                   \
     * is the output is read through it, as in OR_LOOPS' contig. */                                               \
    if (ptr[3] == ptr[0]) {                                                                                       \
      OR_WHERE_LOOP(T, b[j], io[j])                                                                               \
    } else if (ptr[2] == ptr[0]) {                                                                                \
      OR_WHERE_LOOP(T, io[j], c[j])                                                                               \
    } else {                                                                                                      \
      OR_WHERE_LOOP(T, b[j], c[j])                                                                                \
    }                                                                                                             \
  }                                                                                                               \
  static void where_bool_strided_##C(char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args,      \
                                     const uint32_t *dt) {                                                        \
    (void)args;                                                                                                   \
    (void)dt;                                                                                                     \
    for (int64_t j = 0; j < n; j++) {                                                                             \
      *(T *)(ptr[0] + j * st[0]) =                                                                                \
          *(const uint8_t *)(ptr[1] + j * st[1]) ? *(const T *)(ptr[2] + j * st[2]) : *(const T *)(ptr[3] + j * st[3]); \
    }                                                                                                             \
  }
OR_WHERE_BOOL(F32, float)
OR_WHERE_BOOL(F64, double)
OR_WHERE_BOOL(I64, int64_t)

static const struct {
  or_row contig;
  or_row strided;
} WHERE_BOOL[OR_COMPUTE_COUNT] = {
    [OR_COMPUTE_F32] = {where_bool_contig_F32, where_bool_strided_F32},
    [OR_COMPUTE_F64] = {where_bool_contig_F64, where_bool_strided_F64},
    [OR_COMPUTE_I64] = {where_bool_contig_I64, where_bool_strided_I64},
};

/* ---- dispatch tables: [op][compute] ---- */

typedef struct or_loops {
  or_row contig;
  or_row strided;
  or_row generic;
  uint32_t arity;
  uint32_t result_dtype; /* the output dtype of the contig and strided loops */
} or_loops;

#define OR_ENTRY(C, NAME, ARITY, RT)                                                           \
  [OR_OP_##NAME][OR_COMPUTE_##C] = {contig_##NAME##_##C, strided_##NAME##_##C, generic_##NAME##_##C, ARITY, \
                                    RESULT_NATIVE(RT, C)},
#define OR_ENTRY_F32(NAME, ARITY, RT, EXPR) OR_ENTRY(F32, NAME, ARITY, RT)
#define OR_ENTRY_F64(NAME, ARITY, RT, EXPR) OR_ENTRY(F64, NAME, ARITY, RT)
#define OR_ENTRY_I64(NAME, ARITY, RT, EXPR) OR_ENTRY(I64, NAME, ARITY, RT)

static const or_loops LOOPS[OR_OP_COUNT][OR_COMPUTE_COUNT] = {
    OR_FLOAT_OPS(OR_ENTRY_F32, float, _, _, _, _, _, _, _) OR_FLOAT_OPS(OR_ENTRY_F64, double, _, _, _, _, _, _, _)
        OR_INT_OPS(OR_ENTRY_I64)};

/* Every op of openreg_engine.h has an entry in each table. */
#define OR_COUNT_ONE(...) +1
_Static_assert(0 OR_FLOAT_OPS(OR_COUNT_ONE, _, _, _, _, _, _, _, _) == OR_OP_COUNT, "float ops missing");
_Static_assert(0 OR_INT_OPS(OR_COUNT_ONE) == OR_OP_COUNT, "int ops missing");

static const uint32_t NATIVE[OR_COMPUTE_COUNT] = {OR_F32, OR_F64, OR_I64};

#define OR_EXACT_ENTRY(C, NAME) {contig_##NAME##_##C, strided_##NAME##_##C, generic_##NAME##_##C, 1, NATIVE_##C}
static const or_loops EXACT_TRIG[3][2] = {
    {OR_EXACT_ENTRY(F32, SIN_EXACT), OR_EXACT_ENTRY(F64, SIN_EXACT)},
    {OR_EXACT_ENTRY(F32, COS_EXACT), OR_EXACT_ENTRY(F64, COS_EXACT)},
    {OR_EXACT_ENTRY(F32, TAN_EXACT), OR_EXACT_ENTRY(F64, TAN_EXACT)},
};

/* Whether operand 1 (of dtype `dt`, strides `st`) holds, in this launch's
 * box, a value the fast sin/cos/tan cannot take: |x| >= 2^20, an infinity or
 * a NaN. A read of the input, about a tenth of the cost of the function. */
static int needs_exact_trig(const or_elementwise *p, const char *base, const int64_t *st, uint32_t dt) {
  int64_t counter[OR_MAX_DIMS] = {0};
  const int64_t n0 = p->sizes[0];
  const char *row = base;
  int wide = 0;
  for (;;) {
    if (dt == OR_F32 && st[0] == 4) {
      const float *x = (const float *)row;
      for (int64_t j = 0; j < n0; j++) wide |= !(__builtin_fabsf(x[j]) < 1048576.0f);
    } else {
      for (int64_t j = 0; j < n0; j++) wide |= !(__builtin_fabs(load_F64(row + j * st[0], dt)) < 1048576.0);
    }
    if (wide) {
      return 1;
    }
    uint32_t d = 1;
    for (; d < p->ndim; d++) {
      row += st[d];
      if (++counter[d] < p->sizes[d]) {
        break;
      }
      row -= st[d] * p->sizes[d];
      counter[d] = 0;
    }
    if (d >= p->ndim) {
      return 0;
    }
  }
}


/* Rows are cut into tiles of this many elements when an operand steps
 * through memory with a large stride along them (a transposed copy reads one
 * cache line per element): a TILE x TILE block of two dimensions is done
 * before the next, so the lines it touches are reused. */
#define OR_TILE 32
#define OR_TILE_STRIDE 256

/* Fills n elements of `size` bytes at `dst` (16-byte aligned) with the one
 * at `src`: 16 bytes per store, the value splatted (a memcpy of a runtime
 * size per element would be a memory.copy call each). */
static void spread_value(char *dst, const char *src, uint32_t size, int64_t n) {
  v128_t v;
  switch (size) {
  case 8:
    v = wasm_v128_load64_splat(src);
    break;
  case 4:
    v = wasm_v128_load32_splat(src);
    break;
  case 2:
    v = wasm_v128_load16_splat(src);
    break;
  default:
    v = wasm_v128_load8_splat(src);
    break;
  }
  const int64_t bytes = n * size;
  for (int64_t j = 0; j < bytes; j += 16) { /* the buffer's padding takes the last partial vector */
    wasm_v128_store(dst + j, v);
  }
}

/*
 * Rows whose inputs are each contiguous or constant along them (a Python
 * scalar, a broadcast dimension), all of the compute type's native dtype,
 * into a contiguous output: the constant inputs are spread over a chunk
 * buffer, so `contig` (the vectorized loop) runs over the row chunk by chunk
 * instead of the strided loop element by element. A chunk is as many
 * elements as the buffers hold (spread_span: 512 float32s), since each call
 * of `contig` costs a few dozen cycles of set-up. Short rows whose other
 * operands run on from one row into the next go several to a chunk, each
 * row's constants side by side.
 */
#define OR_SPREAD_BYTES (OR_CHUNK * sizeof(double))

/* The elements a chunk buffer holds for every constant operand. */
static int64_t spread_span(const int64_t *st, const uint32_t *dt, uint32_t nt) {
  int64_t span = OR_SPREAD_BYTES;
  for (uint32_t k = 1; k < nt; k++) {
    if (st[k] == 0 && span > (int64_t)(OR_SPREAD_BYTES / dtype_size(dt[k]))) {
      span = (int64_t)(OR_SPREAD_BYTES / dtype_size(dt[k]));
    }
  }
  return span;
}

/* `rows` rows of n elements from `ptr`, dimension-1 strides `st1`: one row,
 * or (rows > 1) rows that fit one chunk together, whose operands other than
 * the constant ones satisfy st1[k] == n * st[k]; `span` is spread_span's. */
static void rows_spread(or_row contig, char *const *ptr, const int64_t *st, const int64_t *st1, int64_t n,
                        int64_t rows, int64_t span, const or_scalar *args, const uint32_t *dt, uint32_t nt) {
  /* 16 bytes of slack: a row's fill rounds up to whole vectors */
  _Alignas(16) char spread[OR_MAX_OPERANDS][OR_SPREAD_BYTES + 16];
  char *chunk[OR_MAX_OPERANDS];
  chunk[0] = ptr[0];
  if (rows > 1) {
    for (uint32_t k = 1; k < nt; k++) {
      chunk[k] = ptr[k];
      if (st[k] == 0) {
        const uint32_t size = dtype_size(dt[k]);
        for (int64_t r = 0; r < rows; r++) {
          spread_value(spread[k] + r * n * size, ptr[k] + r * st1[k], size, n);
        }
        chunk[k] = spread[k];
      }
    }
    contig(chunk, st, rows * n, args, dt);
    return;
  }
  if (span > n) {
    span = n;
  }
  for (uint32_t k = 1; k < nt; k++) {
    if (st[k] == 0) {
      spread_value(spread[k], ptr[k], dtype_size(dt[k]), span);
    }
  }
  for (int64_t j0 = 0; j0 < n; j0 += span) {
    const int64_t m = n - j0 < span ? n - j0 : span;
    chunk[0] = ptr[0] + j0 * st[0];
    for (uint32_t k = 1; k < nt; k++) {
      chunk[k] = st[k] == 0 ? spread[k] : ptr[k] + j0 * st[k];
    }
    contig(chunk, st, m, args, dt);
  }
}

/*
 * A plane copied across its diagonal: out contiguous along dimension 0 and
 * `in` along dimension 1 (x.t().contiguous(), NCHW to NHWC), elements of
 * 2, 4 or 8 bytes. Tile by tile (32 x 32 elements), in square blocks of 16
 * bytes a row (8 x 8, 4 x 4, 2 x 2): a block's rows of `in` read as vectors
 * and transposed in registers by interleaving shuffles. The edges go
 * element by element. Row by row through the strided loop a transpose cost
 * 3 ns per element (1024 x 1024 float32: 3.1 ms on one worker).
 *
 * Rows a multiple of 2 KB apart (a power-of-two matrix) share L1 sets, and
 * a tile's 32 rows then evict each other's lines between uses (1024 x 1024:
 * 0.83 ms against 0.29 for 1000 x 1000). Such planes go through a tile
 * buffer instead: blocks of `in`'s rows into the buffer, then its rows out
 * whole, so each row of `in` and of out is read or written in one go
 * (0.37 ms; other sizes lose to the buffer's extra pass and copy directly).
 */
#define OR_TRANSPOSE_TILE 32

/* The 8 x 8 block of 2-byte elements at src (rows `s` bytes apart), transposed, to dst (rows `d` apart). */
ALWAYS_INLINE void transpose_block_2(char *dst, int64_t d, const char *src, int64_t s) {
  v128_t r[8], a[8], b[8];
  for (int i = 0; i < 8; i++) r[i] = wasm_v128_load(src + i * s);
  for (int i = 0; i < 8; i += 2) { /* pairs of rows, element by element */
    a[i] = wasm_i16x8_shuffle(r[i], r[i + 1], 0, 8, 1, 9, 2, 10, 3, 11);
    a[i + 1] = wasm_i16x8_shuffle(r[i], r[i + 1], 4, 12, 5, 13, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) { /* quads of rows, pair by pair */
    b[i] = wasm_i32x4_shuffle(a[i], a[i + 2], 0, 4, 1, 5);
    b[i + 1] = wasm_i32x4_shuffle(a[i], a[i + 2], 2, 6, 3, 7);
    b[i + 2] = wasm_i32x4_shuffle(a[i + 1], a[i + 3], 0, 4, 1, 5);
    b[i + 3] = wasm_i32x4_shuffle(a[i + 1], a[i + 3], 2, 6, 3, 7);
  }
  for (int c = 0; c < 4; c++) { /* the two quads' halves: columns 2c and 2c + 1 */
    wasm_v128_store(dst + 2 * c * d, wasm_i64x2_shuffle(b[c], b[c + 4], 0, 2));
    wasm_v128_store(dst + (2 * c + 1) * d, wasm_i64x2_shuffle(b[c], b[c + 4], 1, 3));
  }
}

/* The 4 x 4 block of 4-byte elements. */
ALWAYS_INLINE void transpose_block_4(char *dst, int64_t d, const char *src, int64_t s) {
  const v128_t r0 = wasm_v128_load(src), r1 = wasm_v128_load(src + s);
  const v128_t r2 = wasm_v128_load(src + 2 * s), r3 = wasm_v128_load(src + 3 * s);
  const v128_t lo01 = wasm_i32x4_shuffle(r0, r1, 0, 4, 1, 5), hi01 = wasm_i32x4_shuffle(r0, r1, 2, 6, 3, 7);
  const v128_t lo23 = wasm_i32x4_shuffle(r2, r3, 0, 4, 1, 5), hi23 = wasm_i32x4_shuffle(r2, r3, 2, 6, 3, 7);
  wasm_v128_store(dst, wasm_i64x2_shuffle(lo01, lo23, 0, 2));
  wasm_v128_store(dst + d, wasm_i64x2_shuffle(lo01, lo23, 1, 3));
  wasm_v128_store(dst + 2 * d, wasm_i64x2_shuffle(hi01, hi23, 0, 2));
  wasm_v128_store(dst + 3 * d, wasm_i64x2_shuffle(hi01, hi23, 1, 3));
}

/* The 2 x 2 block of 8-byte elements. */
ALWAYS_INLINE void transpose_block_8(char *dst, int64_t d, const char *src, int64_t s) {
  const v128_t r0 = wasm_v128_load(src), r1 = wasm_v128_load(src + s);
  wasm_v128_store(dst, wasm_i64x2_shuffle(r0, r1, 0, 2));
  wasm_v128_store(dst + d, wasm_i64x2_shuffle(r0, r1, 1, 3));
}

/* transpose_plane_<E>: elements of E bytes, blocks of B x B. */
#define OR_DEFINE_TRANSPOSE(E, B, U)                                                                             \
  NOINLINE static void transpose_plane_##E(char *out, int64_t out_s1, const char *in, int64_t in_s0, int64_t n0, \
                                           int64_t n1) {                                                         \
    _Alignas(16) char tile[OR_TRANSPOSE_TILE * OR_TRANSPOSE_TILE * (E)];                                         \
    const int64_t tile_row = OR_TRANSPOSE_TILE * (E);                                                            \
    const int buffered = in_s0 % 2048 == 0 || out_s1 % 2048 == 0;                                                \
    const int64_t m0 = n0 / (B) * (B), m1 = n1 / (B) * (B);                                                      \
    for (int64_t t1 = 0; t1 < m1; t1 += OR_TRANSPOSE_TILE) {                                                     \
      const int64_t w1 = m1 - t1 < OR_TRANSPOSE_TILE ? m1 - t1 : OR_TRANSPOSE_TILE;                              \
      for (int64_t t0 = 0; t0 < m0; t0 += OR_TRANSPOSE_TILE) {                                                   \
        const int64_t w0 = m0 - t0 < OR_TRANSPOSE_TILE ? m0 - t0 : OR_TRANSPOSE_TILE;                            \
        const char *src = in + t0 * in_s0 + t1 * (E);                                                            \
        if (!buffered) {                                                                                         \
          for (int64_t i1 = 0; i1 < w1; i1 += (B)) {                                                             \
            for (int64_t i0 = 0; i0 < w0; i0 += (B)) {                                                          \
              transpose_block_##E(out + (t0 + i0) * (E) + (t1 + i1) * out_s1, out_s1, src + i0 * in_s0 + i1 * (E), \
                                  in_s0);                                                                        \
            }                                                                                                    \
          }                                                                                                      \
          continue;                                                                                              \
        }                                                                                                        \
        for (int64_t i0 = 0; i0 < w0; i0 += (B)) {                                                              \
          for (int64_t i1 = 0; i1 < w1; i1 += (B)) {                                                            \
            transpose_block_##E(tile + i1 * tile_row + i0 * (E), tile_row, src + i0 * in_s0 + i1 * (E), in_s0);  \
          }                                                                                                      \
        }                                                                                                        \
        for (int64_t i1 = 0; i1 < w1; i1++) {                                                                    \
          char *row = out + t0 * (E) + (t1 + i1) * out_s1;                                                       \
          for (int64_t i0 = 0; i0 < w0 * (E); i0 += 16) {                                                        \
            wasm_v128_store(row + i0, wasm_v128_load(tile + i1 * tile_row + i0));                                \
          }                                                                                                      \
        }                                                                                                        \
      }                                                                                                          \
    }                                                                                                            \
    for (int64_t i1 = 0; i1 < n1; i1++) { /* the edges: rows i0 >= m0 of every column, columns i1 >= m1 */      \
      for (int64_t i0 = i1 < m1 ? m0 : 0; i0 < n0; i0++) {                                                      \
        *(U *)(out + i0 * (E) + i1 * out_s1) = *(const U *)(in + i0 * in_s0 + i1 * (E));                         \
      }                                                                                                          \
    }                                                                                                            \
  }
OR_DEFINE_TRANSPOSE(2, 8, uint16_t)
OR_DEFINE_TRANSPOSE(4, 4, uint32_t)
OR_DEFINE_TRANSPOSE(8, 2, uint64_t)

/* out[j] = in[-j] for j < n, elements of `es` bytes (1, 2, 4 or 8): a row of
 * flip, whose source walks backwards. 16 bytes at a time with their lanes
 * reversed; element by element through the strided loop, flip(1) of
 * 512 x 512 float32 took 0.21 ms on one worker. */
NOINLINE static void reverse_row(char *out, const char *in, int64_t n, int64_t es) {
  const int64_t lanes = 16 / es;
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    const v128_t v = wasm_v128_load(in - (j + lanes - 1) * es);
    v128_t r;
    switch (es) {
    case 1:
      r = wasm_i8x16_shuffle(v, v, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
      break;
    case 2:
      r = wasm_i16x8_shuffle(v, v, 7, 6, 5, 4, 3, 2, 1, 0);
      break;
    case 4:
      r = wasm_i32x4_shuffle(v, v, 3, 2, 1, 0);
      break;
    default:
      r = wasm_i64x2_shuffle(v, v, 1, 0);
      break;
    }
    wasm_v128_store(out + j * es, r);
  }
  for (; j < n; j++) move_element(out + j * es, in - j * es, (uint32_t)es);
}

/* Dimensions 0 and 1 at the given bases: rows of dimension 0, one per index
 * of dimension 1, tiled when `tiled`. */
static void walk_plane(const or_elementwise *p, or_row row, or_row spread, char *const *base,
                       int64_t st[OR_MAX_OPERANDS][OR_MAX_DIMS], const uint32_t *dt, int tiled) {
  const uint32_t nt = p->ntensors;
  const int64_t n0 = p->sizes[0];
  const int64_t n1 = p->ndim > 1 ? p->sizes[1] : 1;
  char *ptr[OR_MAX_OPERANDS] = {0};
  int64_t row_stride[OR_MAX_OPERANDS] = {0}, plane_stride[OR_MAX_OPERANDS] = {0};
  for (uint32_t k = 0; k < nt; k++) {
    row_stride[k] = st[k][0];
    plane_stride[k] = p->ndim > 1 ? st[k][1] : 0;
  }
  /* flip's rows: a contiguous output from a source walking backwards */
  if (p->op == OR_OP_COPY && !spread && nt == 2 && dt[0] == dt[1] && dtype_size(dt[0]) <= 8 &&
      row_stride[0] == (int64_t)dtype_size(dt[0]) && row_stride[1] == -row_stride[0]) {
    for (int64_t i1 = 0; i1 < n1; i1++) {
      reverse_row(base[0] + i1 * plane_stride[0], base[1] + i1 * plane_stride[1], n0, row_stride[0]);
    }
    return;
  }
  /* A copy between contiguous rows of one dtype: the plane's rows in one
   * loop here. A call of the row function per row cost about 12 ns, as long
   * as copying a row of 32 floats (attention's head permutes). */
  if (p->op == OR_OP_COPY && !spread && !tiled && nt == 2 && dt[0] == dt[1] && n1 > 1) {
    const int64_t size = (int64_t)dtype_size(dt[0]);
    if (row_stride[0] == size && row_stride[1] == size) {
      for (int64_t i1 = 0; i1 < n1; i1++) {
        copy_bytes(base[0] + i1 * plane_stride[0], base[1] + i1 * plane_stride[1], (usize)(n0 * size));
      }
      return;
    }
  }
  const int64_t esize = p->op == OR_OP_COPY && nt == 2 && dt[0] == dt[1] ? (int64_t)dtype_size(dt[0]) : 0;
  const int square = esize == 2 || esize == 4 || esize == 8; /* a block is 16 / esize elements square */
  if (square && !spread && n0 >= 16 / esize && n1 >= 16 / esize && row_stride[0] == esize &&
      plane_stride[1] == esize) {
    if (esize == 2) {
      transpose_plane_2(base[0], plane_stride[0], base[1], row_stride[1], n0, n1);
    } else if (esize == 4) {
      transpose_plane_4(base[0], plane_stride[0], base[1], row_stride[1], n0, n1);
    } else {
      transpose_plane_8(base[0], plane_stride[0], base[1], row_stride[1], n0, n1);
    }
    return;
  }
  /* rows per call of rows_spread: several when they are short and run on */
  const int64_t span = spread ? spread_span(row_stride, dt, nt) : 0;
  int64_t per = 1;
  if (spread && !tiled && p->ndim > 1 && n0 <= span / 2) {
    int runs_on = 1;
    for (uint32_t k = 0; k < nt; k++) {
      runs_on &= (k > 0 && row_stride[k] == 0) || plane_stride[k] == n0 * row_stride[k];
    }
    per = runs_on ? span / n0 : 1;
  }
  const int64_t step0 = tiled ? OR_TILE : n0;
  const int64_t step1 = tiled ? OR_TILE : n1;
  for (int64_t i1b = 0; i1b < n1; i1b += step1) {
    const int64_t e1 = i1b + step1 < n1 ? i1b + step1 : n1;
    for (int64_t i0b = 0; i0b < n0; i0b += step0) {
      const int64_t len = i0b + step0 < n0 ? step0 : n0 - i0b;
      for (int64_t i1 = i1b; i1 < e1; i1 += per) {
        for (uint32_t k = 0; k < nt; k++) {
          ptr[k] = base[k] + i1 * plane_stride[k] + i0b * st[k][0];
        }
        if (spread) {
          rows_spread(spread, ptr, row_stride, plane_stride, len, e1 - i1 < per ? e1 - i1 : per, span, p->args, dt,
                      nt);
        } else {
          row(ptr, row_stride, len, p->args, dt);
        }
      }
    }
  }
}

/*
 * Runs `row` over every element of the iteration space: dimensions 0 and 1
 * by walk_plane, the others with a counter, last dimension outermost. The
 * order is fixed, so results never depend on how the work is split.
 */
static void walk(const or_elementwise *p, or_row row, or_row spread, char **base,
                 int64_t st[OR_MAX_OPERANDS][OR_MAX_DIMS], const uint32_t *dt) {
  const uint32_t nt = p->ntensors;
  const uint32_t ndim = p->ndim;
  for (uint32_t d = 0; d < ndim; d++) {
    if (p->sizes[d] <= 0) {
      return; /* no elements */
    }
  }
  int tiled = 0;
  if (ndim > 1 && p->sizes[0] > OR_TILE && p->sizes[1] > 1) {
    for (uint32_t k = 0; k < nt; k++) {
      const int64_t s0 = st[k][0] < 0 ? -st[k][0] : st[k][0];
      tiled |= s0 > OR_TILE_STRIDE;
    }
  }
  int64_t counter[OR_MAX_DIMS] = {0};
  char *ptr[OR_MAX_OPERANDS];
  for (uint32_t k = 0; k < OR_MAX_OPERANDS; k++) {
    ptr[k] = base[k];
  }
  for (;;) {
    walk_plane(p, row, spread, ptr, st, dt, tiled);
    uint32_t d = 2;
    for (; d < ndim; d++) {
      counter[d]++;
      for (uint32_t k = 0; k < nt; k++) {
        ptr[k] += st[k][d];
      }
      if (counter[d] < p->sizes[d]) {
        break;
      }
      for (uint32_t k = 0; k < nt; k++) {
        ptr[k] -= st[k][d] * p->sizes[d];
      }
      counter[d] = 0;
    }
    if (d >= ndim) {
      return;
    }
  }
}

/* ---- float32 fused multiply-adds, four lanes at a time ----
 *
 * ADD with an alpha other than +-1, ADDCMUL and LERP_SCALAR (the optimizers'
 * updates) are one fma_f32 per element; clang does not vectorize the
 * splats and lane extraction of fma_f32, so these row loops run the
 * multiply-add four lanes at a time (unrolled four times: the loop header's
 * epoch check costs as much as a step): the same fused operation, so
 * bit-identical to fma_f32, which their odd ends and the strided and
 * converting loops use. Each step reads its inputs before writing its
 * outputs, so an output that is an input is fine.
 */
ALWAYS_INLINE v128_t fma4_f32(v128_t a, v128_t b, v128_t c) {
  return wasm_f32x4_relaxed_madd(a, b, c);
}

/* ADD: a + alpha * b = fma(b, alpha, a); alpha +-1 takes the plain loop's
 * a + b or a - b. */
static void fma_add_f32(char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args, const uint32_t *dt) {
  const float alpha = ARG_F32(args[0]);
  if (alpha == 1.0f || alpha == -1.0f) {
    contig_ADD_F32(ptr, st, n, args, dt);
    return;
  }
  float *out = (float *)ptr[0];
  const float *a = (const float *)ptr[1], *b = (const float *)ptr[2];
  const v128_t va = wasm_f32x4_splat(alpha);
  int64_t j = 0;
  _Pragma("clang loop unroll_count(4)") for (; j + 4 <= n; j += 4) {
    wasm_v128_store(out + j, fma4_f32(wasm_v128_load(b + j), va, wasm_v128_load(a + j)));
  }
  for (; j < n; j++) out[j] = fma_f32(b[j], alpha, a[j]);
}

/* ADDCMUL: a + value * b * c = fma(value * b, c, a). */
static void fma_addcmul_f32(char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args,
                            const uint32_t *dt) {
  (void)st;
  (void)dt;
  const float value = ARG_F32(args[0]);
  float *out = (float *)ptr[0];
  const float *a = (const float *)ptr[1], *b = (const float *)ptr[2], *c = (const float *)ptr[3];
  const v128_t vv = wasm_f32x4_splat(value);
  int64_t j = 0;
  _Pragma("clang loop unroll_count(4)") for (; j + 4 <= n; j += 4) {
    const v128_t t = wasm_f32x4_mul(vv, wasm_v128_load(b + j));
    wasm_v128_store(out + j, fma4_f32(t, wasm_v128_load(c + j), wasm_v128_load(a + j)));
  }
  for (; j < n; j++) out[j] = fma_f32(value * b[j], c[j], a[j]);
}

/* LERP_SCALAR: a + w * (b - a), as fma(w, b - a, a) for |w| < 0.5, else
 * fma(w - 1, b - a, b). */
static void fma_lerp_f32(char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args, const uint32_t *dt) {
  (void)st;
  (void)dt;
  const float w = ARG_F32(args[0]);
  const int near = __builtin_fabsf(w) < 0.5f;
  const float wk = near ? w : w - 1.0f;
  float *out = (float *)ptr[0];
  const float *a = (const float *)ptr[1], *b = (const float *)ptr[2];
  const float *base = near ? a : b;
  const v128_t vw = wasm_f32x4_splat(wk);
  int64_t j = 0;
  _Pragma("clang loop unroll_count(4)") for (; j + 4 <= n; j += 4) {
    const v128_t d = wasm_f32x4_sub(wasm_v128_load(b + j), wasm_v128_load(a + j));
    wasm_v128_store(out + j, fma4_f32(vw, d, wasm_v128_load(base + j)));
  }
  for (; j < n; j++) out[j] = fma_f32(wk, b[j] - a[j], base[j]);
}

/* ---- float32 ops through math.h's vector functions ----
 *
 * exp, sigmoid, erf, SiLU and GELU (and the backward ops of SiLU and GELU) run
 * four lanes at a time with fused multiply-adds (math.h, v_exp_f32 and
 * v_erf_f32) in every loop: contiguous rows directly, strided rows and other
 * dtypes through a chunk of float32 values, and a row's last one to three
 * elements as a vector padded with zeros. So an element's result is the same
 * whatever the layout, the dtype it converts from or the split between
 * workers. */
/*
 * float32's fmod four lanes at a time, in double arithmetic, exact where
 * |x / y| < 2^29 (fmod_f32's long division takes a step per bit of the
 * exponents' difference, about 70 cycles per element with its branches):
 * q = trunc(x / y) in double is the true quotient's integer part, or one
 * more if the rounded quotient reached the next integer (it cannot fall
 * below an integer the true one reaches: rounding is monotonic and such
 * integers are doubles); q * y is exact (24 + 29 bits) and so is x - q * y,
 * and one too many shows as a remainder of the wrong sign, which adding |y|
 * with x's sign corrects, exactly. The other lanes (y zero or infinite, x
 * infinite, a NaN, a larger quotient) take fmod_f32: every lane has
 * fmod_f32's bits.
 */
/* Two lanes (x and y widened): the remainder, and in *bad the lanes left to fmod_f32. */
ALWAYS_INLINE v128_t v_fmod_f64x2(v128_t dx, v128_t dy, v128_t *bad) {
  const v128_t sign = wasm_f64x2_splat(-0.0), zero = wasm_f64x2_splat(0.0);
  const v128_t ay = wasm_f64x2_abs(dy);
  const v128_t q = wasm_f64x2_trunc(wasm_f64x2_div(dx, dy));
  *bad = wasm_v128_or(wasm_v128_not(wasm_f64x2_lt(wasm_f64x2_abs(q), wasm_f64x2_splat(536870912.0))),
                      wasm_f64x2_eq(ay, wasm_f64x2_splat(__builtin_inf())));
  const v128_t step = wasm_v128_or(ay, wasm_v128_and(dx, sign)); /* |y| with x's sign */
  v128_t r = wasm_f64x2_sub(dx, wasm_f64x2_mul(q, dy));
  const v128_t wrong_sign =
      wasm_v128_and(wasm_f64x2_ne(r, zero), wasm_v128_xor(wasm_f64x2_lt(r, zero), wasm_f64x2_lt(dx, zero)));
  r = wasm_v128_bitselect(wasm_f64x2_add(r, step), r, wrong_sign);
  /* a zero remainder has x's sign */
  return wasm_v128_bitselect(wasm_v128_and(dx, sign), r, wasm_f64x2_eq(r, zero));
}

ALWAYS_INLINE v128_t v_fmod_f32(v128_t a, v128_t b) {
  v128_t bad_lo, bad_hi;
  const v128_t lo = v_fmod_f64x2(wasm_f64x2_promote_low_f32x4(a), wasm_f64x2_promote_low_f32x4(b), &bad_lo);
  const v128_t hi = v_fmod_f64x2(wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(a, a, 2, 3, 0, 1)),
                                 wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(b, b, 2, 3, 0, 1)), &bad_hi);
  v128_t r = wasm_i32x4_shuffle(wasm_f32x4_demote_f64x2_zero(lo), wasm_f32x4_demote_f64x2_zero(hi), 0, 1, 4, 5);
  const v128_t bad = wasm_i32x4_shuffle(bad_lo, bad_hi, 0, 2, 4, 6); /* one 32-bit mask per lane */
  if (wasm_v128_any_true(bad)) {
    float x[4], y[4], out[4];
    int32_t left[4];
    wasm_v128_store(x, a);
    wasm_v128_store(y, b);
    wasm_v128_store(out, r);
    wasm_v128_store(left, bad);
    for (int l = 0; l < 4; l++) {
      if (left[l]) {
        out[l] = fmod_f32(x[l], y[l]);
      }
    }
    r = wasm_v128_load(out);
  }
  return r;
}

/* The lanes where a remainder is nonzero and its sign differs from b's
 * (where Python's % and // step from fmod's truncation to floor). */
ALWAYS_INLINE v128_t v_sign_differs_f32(v128_t mod, v128_t b) {
  const v128_t zero = wasm_f32x4_splat(0.0f);
  return wasm_v128_and(wasm_f32x4_ne(mod, zero), wasm_v128_xor(wasm_f32x4_lt(b, zero), wasm_f32x4_lt(mod, zero)));
}

#define K_GELU_PDF_F32 ((float)K_GELU_PDF)
ALWAYS_INLINE v128_t v_op_f32(uint32_t op, v128_t a, v128_t b) {
  const v128_t one = wasm_f32x4_splat(1.0f), half = wasm_f32x4_splat(0.5f);
  switch (op) {
  case OR_OP_EXP:
    return v_exp_f32(a);
  case OR_OP_SIGMOID:
    return v_sigmoid_f32(a);
  case OR_OP_ERF:
    return v_erf_f32(a);
  case OR_OP_SILU: /* a / (1 + e^-a) */
    return wasm_f32x4_div(a, wasm_f32x4_add(one, v_exp_f32(wasm_f32x4_neg(a))));
  case OR_OP_GELU: /* a / 2 (1 + erf(a / sqrt 2)) */
    return wasm_f32x4_mul(wasm_f32x4_mul(a, half),
                          wasm_f32x4_add(one, v_erf_f32(wasm_f32x4_mul(a, wasm_f32x4_splat((float)K_SQRT1_2)))));
  case OR_OP_SILU_BACKWARD: { /* dy s (1 + x (1 - s)), s = sigmoid(x) */
    const v128_t s = v_sigmoid_f32(b);
    return wasm_f32x4_mul(wasm_f32x4_mul(a, s), wasm_f32x4_add(one, wasm_f32x4_mul(b, wasm_f32x4_sub(one, s))));
  }
  case OR_OP_FMOD:
    return v_fmod_f32(a, b);
  case OR_OP_REMAINDER: { /* Python's %: fmod, plus b where its sign differs from b's */
    const v128_t mod = v_fmod_f32(a, b);
    return wasm_v128_bitselect(wasm_f32x4_add(mod, b), mod, v_sign_differs_f32(mod, b));
  }
  case OR_OP_DIV_FLOOR: { /* div_floor_f32 lane by lane, its steps as selects */
    const v128_t zero = wasm_f32x4_splat(0.0f), sign = wasm_f32x4_splat(-0.0f);
    const v128_t mod = v_fmod_f32(a, b), quotient = wasm_f32x4_div(a, b);
    v128_t div = wasm_f32x4_div(wasm_f32x4_sub(a, mod), b);
    div = wasm_v128_bitselect(wasm_f32x4_sub(div, one), div, v_sign_differs_f32(mod, b));
    v128_t floordiv = wasm_f32x4_floor(div);
    floordiv = wasm_v128_bitselect(wasm_f32x4_add(floordiv, one), floordiv,
                                   wasm_f32x4_gt(wasm_f32x4_sub(div, floordiv), half));
    const v128_t r = wasm_v128_bitselect(wasm_v128_and(quotient, sign), floordiv, wasm_f32x4_eq(div, zero));
    return wasm_v128_bitselect(quotient, r, wasm_f32x4_eq(b, zero));
  }
  default: { /* GELU_BACKWARD: dy (cdf + x pdf) */
    const v128_t cdf = wasm_f32x4_mul(half, wasm_f32x4_add(one, v_erf_f32(wasm_f32x4_mul(b, wasm_f32x4_splat((float)K_SQRT1_2)))));
    const v128_t pdf = wasm_f32x4_mul(wasm_f32x4_splat(K_GELU_PDF_F32),
                                      v_exp_f32(wasm_f32x4_mul(wasm_f32x4_mul(b, b), wasm_f32x4_splat(-0.5f))));
    return wasm_f32x4_mul(a, v_madd_f32(b, pdf, cdf));
  }
  }
}

/* out[j] = op(a[j], b[j]) for j < n (b unread for unary ops): contiguous
 * float32, out may be a or b. */
ALWAYS_INLINE void v_row_f32(uint32_t op, float *out, const float *a, const float *b, int64_t n) {
  int64_t j = 0;
  _Pragma("clang loop unroll_count(2)") for (; j + 4 <= n; j += 4) {
    wasm_v128_store(out + j, v_op_f32(op, wasm_v128_load(a + j), wasm_v128_load(b + j)));
  }
  if (j < n) {
    const int64_t m = n - j;
    store_f32_partial(out + j, v_op_f32(op, load_f32_partial(a + j, m), load_f32_partial(b + j, m)), m);
  }
}

#define OR_VECTOR_ROWS(NAME, ARITY)                                                                      \
  static void vcontig_##NAME(char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args,      \
                             const uint32_t *dt) {                                                       \
    (void)st, (void)args, (void)dt;                                                                      \
    v_row_f32(OR_OP_##NAME, (float *)ptr[0], (const float *)ptr[1],                                      \
              (const float *)ptr[ARITY >= 2 ? 2 : 1], n);                                                \
  }                                                                                                      \
  __attribute__((no_builtin("memcpy"))) static void vchunks_##NAME(                                      \
      char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args, const uint32_t *dt) {        \
    (void)args;                                                                                          \
    float in[2][OR_CHUNK];                                                                               \
    float res[OR_CHUNK];                                                                                 \
    for (int64_t j0 = 0; j0 < n; j0 += OR_CHUNK) {                                                       \
      const int64_t m = n - j0 < OR_CHUNK ? n - j0 : OR_CHUNK;                                           \
      for (int k = 1; k <= ARITY; k++) {                                                                 \
        if (st[k] != 0 || j0 == 0) { /* a broadcast value fills its buffer once */                      \
          load_row_F32(in[k - 1], ptr[k] + j0 * st[k], st[k], dt[k], m);                                 \
        }                                                                                                \
      }                                                                                                  \
      v_row_f32(OR_OP_##NAME, res, in[0], in[ARITY - 1], m);                                             \
      store_row_F32(ptr[0] + j0 * st[0], st[0], dt[0], res, m);                                          \
    }                                                                                                    \
  }
OR_VECTOR_ROWS(EXP, 1)
OR_VECTOR_ROWS(SIGMOID, 1)
OR_VECTOR_ROWS(ERF, 1)
OR_VECTOR_ROWS(SILU, 1)
OR_VECTOR_ROWS(GELU, 1)
OR_VECTOR_ROWS(SILU_BACKWARD, 2)
OR_VECTOR_ROWS(GELU_BACKWARD, 2)
OR_VECTOR_ROWS(FMOD, 2)
OR_VECTOR_ROWS(REMAINDER, 2)
OR_VECTOR_ROWS(DIV_FLOOR, 2)

/* The vector loops of `op` in float32 (contig, then strided and converting), or nulls. */
static void vector_rows_f32(uint32_t op, or_row *contig, or_row *chunks) {
#define OR_VECTOR_CASE(NAME)  \
  case OR_OP_##NAME:          \
    *contig = vcontig_##NAME; \
    *chunks = vchunks_##NAME; \
    return;
  switch (op) {
    OR_VECTOR_CASE(EXP)
    OR_VECTOR_CASE(SIGMOID)
    OR_VECTOR_CASE(ERF)
    OR_VECTOR_CASE(SILU)
    OR_VECTOR_CASE(GELU)
    OR_VECTOR_CASE(SILU_BACKWARD)
    OR_VECTOR_CASE(GELU_BACKWARD)
    OR_VECTOR_CASE(FMOD)
    OR_VECTOR_CASE(REMAINDER)
    OR_VECTOR_CASE(DIV_FLOOR)
  default:
    *contig = 0;
    *chunks = 0;
  }
#undef OR_VECTOR_CASE
}

/* The float32 row loop of `op` when it is one of the above, else null. */
static or_row fma_row_f32(uint32_t op) {
  switch (op) {
  case OR_OP_ADD:
    return fma_add_f32;
  case OR_OP_ADDCMUL:
    return fma_addcmul_f32;
  case OR_OP_LERP_SCALAR:
    return fma_lerp_f32;
  default:
    return 0;
  }
}

/* ---- copies that convert (x.double(), x.half(), mask.long(), ...) ---- */

/* float64 to float32, each rounded to nearest as a C conversion rounds. */
ALWAYS_INLINE void f64_to_f32(float *dst, const double *src, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v128_t a = wasm_f32x4_demote_f64x2_zero(wasm_v128_load(src + j));
    const v128_t b = wasm_f32x4_demote_f64x2_zero(wasm_v128_load(src + j + 2));
    const v128_t c = wasm_f32x4_demote_f64x2_zero(wasm_v128_load(src + j + 4));
    const v128_t d = wasm_f32x4_demote_f64x2_zero(wasm_v128_load(src + j + 6));
    wasm_v128_store(dst + j, wasm_i32x4_shuffle(a, b, 0, 1, 4, 5));
    wasm_v128_store(dst + j + 4, wasm_i32x4_shuffle(c, d, 0, 1, 4, 5));
  }
  for (; j < n; j++) dst[j] = (float)src[j];
}

/* float32 to int64, truncating: four at a time through int32 while every
 * lane is within int32's range (not a NaN), else those four one by one as
 * the scalar conversion does. */
ALWAYS_INLINE void f32_to_i64(int64_t *dst, const float *src, int64_t n) {
  const v128_t limit = wasm_f32x4_splat(2147483648.0f);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const v128_t x = wasm_v128_load(src + j);
    if (wasm_i32x4_all_true(wasm_f32x4_lt(wasm_f32x4_abs(x), limit))) {
      const v128_t t = wasm_i32x4_trunc_sat_f32x4(x);
      wasm_v128_store(dst + j, wasm_i64x2_extend_low_i32x4(t));
      wasm_v128_store(dst + j + 2, wasm_i64x2_extend_high_i32x4(t));
    } else {
      for (int q = 0; q < 4; q++) dst[j + q] = float_to_i64((double)src[j + q]);
    }
  }
  for (; j < n; j++) dst[j] = float_to_i64((double)src[j]);
}

/* A contiguous row of n elements from dtype `from` to dtype `to`, for the
 * pairs with a loop of their own; 0 for the others. Each gives the value
 * the compute type's load and store would. */
static int convert_contig(char *out, uint32_t to, const char *in, uint32_t from, int64_t n) {
  if (from == OR_F32) {
    switch (to) {
    case OR_F64:
      f32_to_f64((double *)out, (const float *)in, n);
      return 1;
    case OR_F16: /* the flag a constant in each call: one loop each, no test per step */
      f32_to_halves((uint16_t *)out, (const float *)in, n, 0);
      return 1;
    case OR_BF16:
      f32_to_halves((uint16_t *)out, (const float *)in, n, 1);
      return 1;
    case OR_BOOL:
      f32_to_bool((uint8_t *)out, (const float *)in, n);
      return 1;
    case OR_I64:
      f32_to_i64((int64_t *)out, (const float *)in, n);
      return 1;
    default:
      return 0;
    }
  }
  if (to == OR_F32) {
    switch (from) {
    case OR_F64:
      f64_to_f32((float *)out, (const double *)in, n);
      return 1;
    case OR_F16:
      halves_to_f32((float *)out, (const uint16_t *)in, n, 0);
      return 1;
    case OR_BF16:
      halves_to_f32((float *)out, (const uint16_t *)in, n, 1);
      return 1;
    case OR_BOOL:
    case OR_U8:
      bytes_to_f32((float *)out, (const uint8_t *)in, n, from == OR_BOOL);
      return 1;
    default:
      return 0;
    }
  }
  if (to == OR_I64 && (from == OR_BOOL || from == OR_U8)) {
    bytes_to_i64((int64_t *)out, (const uint8_t *)in, n, from == OR_BOOL);
    return 1;
  }
  return 0;
}

/* The rows of a copy between dtypes: contiguous rows of the pairs above
 * directly, others chunk by chunk through the compute type, as the generic
 * loop does without its op's pass over each chunk. */
#define OR_DEFINE_CONVERT(C, T)                                                                          \
  __attribute__((no_builtin("memcpy"))) static void convert_##C(                                         \
      char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args, const uint32_t *dt) {        \
    (void)args;                                                                                          \
    if (st[0] == (int64_t)dtype_size(dt[0]) && st[1] == (int64_t)dtype_size(dt[1]) &&                     \
        convert_contig(ptr[0], dt[0], ptr[1], dt[1], n)) {                                               \
      return;                                                                                            \
    }                                                                                                    \
    T buf[OR_CHUNK];                                                                                     \
    for (int64_t j0 = 0; j0 < n; j0 += OR_CHUNK) {                                                       \
      const int64_t m = n - j0 < OR_CHUNK ? n - j0 : OR_CHUNK;                                           \
      load_row_##C(buf, ptr[1] + j0 * st[1], st[1], dt[1], m);                                           \
      store_row_##C(ptr[0] + j0 * st[0], st[0], dt[0], buf, m);                                          \
    }                                                                                                    \
  }
OR_DEFINE_CONVERT(F32, float)
OR_DEFINE_CONVERT(F64, double)
OR_DEFINE_CONVERT(I64, int64_t)

/* ---- logic on bool tensors, a byte per element ----
 * (Through the int64 compute type each byte became eight and back.) Each
 * input byte counts as true when nonzero, as the int64 loads read it; a
 * contiguous row takes 16 at a time. */
#define OR_DEFINE_BOOL_ROW(NAME, ARITY, VEXPR, EXPR)                                                      \
  static void bool_##NAME(char *const *ptr, const int64_t *st, int64_t n, const or_scalar *args,          \
                          const uint32_t *dt) {                                                          \
    (void)args, (void)dt;                                                                                \
    uint8_t *out = (uint8_t *)ptr[0];                                                                    \
    const uint8_t *pa = (const uint8_t *)ptr[1], *pb = (const uint8_t *)ptr[ARITY];                      \
    const int64_t so = st[0], sa = st[1], sb = st[ARITY];                                                \
    int64_t j = 0;                                                                                       \
    if (so == 1 && sa == 1 && (sb == 1 || sb == 0)) { /* b may be a scalar */                           \
      const v128_t zero = wasm_i8x16_splat(0), one = wasm_i8x16_splat(1);                                \
      const v128_t b_scalar = wasm_i8x16_ne(wasm_i8x16_splat((int8_t)pb[0]), zero);                      \
      for (; j + 16 <= n; j += 16) {                                                                     \
        const v128_t a = wasm_i8x16_ne(wasm_v128_load(pa + j), zero);                                    \
        const v128_t b = sb ? wasm_i8x16_ne(wasm_v128_load(pb + j), zero) : b_scalar;                    \
        (void)b;                                                                                         \
        wasm_v128_store(out + j, wasm_v128_and(VEXPR, one));                                             \
      }                                                                                                  \
    }                                                                                                    \
    for (; j < n; j++) {                                                                                 \
      const int a = pa[j * sa] != 0, b = pb[j * sb] != 0;                                                \
      (void)b;                                                                                           \
      out[j * so] = (uint8_t)(EXPR);                                                                     \
    }                                                                                                    \
  }
OR_DEFINE_BOOL_ROW(LOGICAL_NOT, 1, wasm_v128_not(a), !a)
OR_DEFINE_BOOL_ROW(LOGICAL_AND, 2, wasm_v128_and(a, b), a & b)
OR_DEFINE_BOOL_ROW(LOGICAL_OR, 2, wasm_v128_or(a, b), a | b)
OR_DEFINE_BOOL_ROW(LOGICAL_XOR, 2, wasm_v128_xor(a, b), a ^ b)
OR_DEFINE_BOOL_ROW(EQ, 2, wasm_v128_not(wasm_v128_xor(a, b)), a == b)
OR_DEFINE_BOOL_ROW(NE, 2, wasm_v128_xor(a, b), a != b)

/* The bool row of `op` when every operand (output included) is a bool
 * tensor, or the second an int64 scalar 0 or 1 (mask == 0, mask != True:
 * its low byte then reads as the bool), else null. The bitwise ops of
 * bools are the logical ones. */
static or_row bool_row(const or_elementwise *p, const uint32_t *dt) {
  for (uint32_t k = 0; k < p->ntensors; k++) {
    const int scalar = (p->scalar_mask >> k) & 1;
    if (scalar ? !(k == 2 && p->compute == OR_COMPUTE_I64 && (uint64_t)p->scalars[k].i <= 1) : dt[k] != OR_BOOL) {
      return 0;
    }
  }
  switch (p->op) {
  case OR_OP_LOGICAL_NOT:
  case OR_OP_BITWISE_NOT:
    return bool_LOGICAL_NOT;
  case OR_OP_LOGICAL_AND:
  case OR_OP_BITWISE_AND:
    return bool_LOGICAL_AND;
  case OR_OP_LOGICAL_OR:
  case OR_OP_BITWISE_OR:
    return bool_LOGICAL_OR;
  case OR_OP_LOGICAL_XOR:
  case OR_OP_BITWISE_XOR:
    return bool_LOGICAL_XOR;
  case OR_OP_EQ:
    return bool_EQ;
  case OR_OP_NE:
    return bool_NE;
  default:
    return 0;
  }
}

/* Traps on a block whose op, compute type or counts are out of range. */
static void check_block(const or_elementwise *p) {
  if (p->op >= OR_OP_COUNT || p->compute >= OR_COMPUTE_COUNT || p->ndim < 1 || p->ndim > OR_MAX_DIMS ||
      p->ntensors < 1 || p->ntensors > OR_MAX_OPERANDS) {
    TRAP();
  }
}

static void run(const or_elementwise *p);

EXPORT(elementwise) void elementwise(const or_elementwise *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  or_elementwise part = *params;
  check_block(&part);
  if (workers > 1 &&
      !RESTRICT_BOX(part, part.ntensors, split_dim(part.sizes, 0, part.ndim, workers), worker, workers)) {
    return;
  }
  run(&part);
}

EXPORT(elementwise_list) void elementwise_list(const or_elementwise_list *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  const or_elementwise head = params->head;
  const uint32_t items = params->items;
  const int32_t value_to = params->value_to;
  const uint32_t broadcast = params->broadcast_mask;
  check_block(&head);
  if (items > OR_LIST_MAX || value_to < -1 || value_to >= (int32_t)head.ntensors || value_to > 3 ||
      (broadcast & 1) != 0 || (broadcast >> head.ntensors) != 0) {
    TRAP();
  }
  int64_t lo, hi;
  list_part(&params->item[0].n, sizeof(or_list_item), items, worker, workers, &lo, &hi);
  int64_t start = 0;
  for (uint32_t i = 0; i < items && start < hi; i++) {
    const or_list_item *item = &params->item[i];
    const int64_t b = lo > start ? lo : start;
    const int64_t e = hi < start + item->n ? hi : start + item->n;
    if (b < e) {
      or_elementwise part = head;
      part.ndim = 1;
      part.sizes[0] = e - b;
      for (uint32_t k = 0; k < part.ntensors; k++) {
        const int64_t size = (broadcast >> k) & 1 ? 0 : (int64_t)dtype_size(part.dtypes[k]);
        part.data[k] = item->data[k] + (uint64_t)((b - start) * size);
        part.strides[k][0] = size;
      }
      if (value_to == 0) {
        part.args[0] = item->value;
      } else if (value_to > 0) {
        part.scalar_mask |= 1u << value_to;
        part.scalars[value_to] = item->value;
      }
      run(&part);
    }
    start += item->n;
  }
}

/* One op over the block's iteration space (a worker's part of it). */
static void run(const or_elementwise *p) {
  const or_loops *loops = &LOOPS[p->op][p->compute];
  if (p->ntensors != loops->arity + 1) {
    TRAP();
  }
  const int trig = p->op == OR_OP_SIN ? 0 : p->op == OR_OP_COS ? 1 : p->op == OR_OP_TAN ? 2 : -1;
  const uint32_t nt = p->ntensors;
  const uint32_t ndim = p->ndim;
  const uint32_t native = NATIVE[p->compute];
  /* Scalars live here, as the compute type's native storage type. */
  union {
    float f32;
    double f64;
    int64_t i64;
  } scalars[OR_MAX_OPERANDS];
  char *base[OR_MAX_OPERANDS] = {0};
  int64_t st[OR_MAX_OPERANDS][OR_MAX_DIMS];
  uint32_t dt[OR_MAX_OPERANDS] = {0};
  for (uint32_t k = 0; k < nt; k++) {
    const int scalar = k > 0 && ((p->scalar_mask >> k) & 1);
    for (uint32_t d = 0; d < ndim; d++) {
      st[k][d] = scalar ? 0 : p->strides[k][d];
    }
    if (scalar) {
      switch (p->compute) {
      case OR_COMPUTE_F32:
        scalars[k].f32 = (float)p->scalars[k].f;
        break;
      case OR_COMPUTE_F64:
        scalars[k].f64 = p->scalars[k].f;
        break;
      default:
        scalars[k].i64 = p->scalars[k].i;
        break;
      }
      base[k] = (char *)&scalars[k];
      dt[k] = native;
    } else {
      base[k] = device_ptr(p->data[k]);
      dt[k] = p->dtypes[k];
      (void)dtype_size(dt[k]); /* traps on an unknown dtype */
    }
  }
  if (trig >= 0 && p->compute != OR_COMPUTE_I64 && needs_exact_trig(p, base[1], st[1], dt[1])) {
    loops = &EXACT_TRIG[trig][p->compute == OR_COMPUTE_F64];
  }
  /* Choose the row loop once: the row strides are the same for every row.
   * Operands of the dtypes the loops read (`want`) take the contiguous loop
   * when every row is contiguous, or when the inputs are contiguous or
   * constant along rows (rows_spread), else the strided loop; any other dtype
   * mix takes the converting loop. */
  or_row contig = loops->contig;
  or_row strided = loops->strided;
  uint32_t want[OR_MAX_OPERANDS];
  want[0] = loops->result_dtype;
  for (uint32_t k = 1; k < nt; k++) {
    want[k] = native;
  }
  or_row generic = loops->generic;
  const or_row fma = p->compute == OR_COMPUTE_F32 ? fma_row_f32(p->op) : 0;
  if (fma) {
    contig = fma;
  }
  if (p->compute == OR_COMPUTE_F32) {
    or_row vcontig, vchunks;
    vector_rows_f32(p->op, &vcontig, &vchunks);
    if (vcontig) {
      contig = vcontig;
      strided = generic = vchunks;
    }
  }
  if (p->op == OR_OP_WHERE && dt[1] == OR_BOOL) {
    want[1] = OR_BOOL;
    contig = WHERE_BOOL[p->compute].contig;
    strided = WHERE_BOOL[p->compute].strided;
  }
  int typed = 1, contiguous = 1, spreadable = 1;
  for (uint32_t k = 0; k < nt; k++) {
    const int64_t size = (int64_t)dtype_size(want[k]);
    typed = typed && dt[k] == want[k];
    contiguous = contiguous && st[k][0] == size && !((p->scalar_mask >> k) & 1);
    spreadable = spreadable && (st[k][0] == size || (k > 0 && st[k][0] == 0));
  }
  const or_row logic = bool_row(p, dt);
  if (logic) {
    generic = logic;
  }
  if (p->op == OR_OP_COPY && !typed) {
    generic = p->compute == OR_COMPUTE_F32 ? convert_F32 : p->compute == OR_COMPUTE_F64 ? convert_F64 : convert_I64;
  }
  const or_row row = !typed ? generic : contiguous ? contig : strided;
  walk(p, row, typed && !contiguous && spreadable ? contig : 0, base, st, dt);
}

#pragma clang attribute pop
