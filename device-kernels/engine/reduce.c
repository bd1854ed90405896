/*
 * The reduction engine of `openreg.engine`: one kernel, `reduce`, that
 * applies any op of OR_REDUCE_OPS over the block's reduced dimensions, once
 * per output element (see openreg_engine.h).
 *
 * Structure:
 *   - every output element folds its slice of the input in one fixed order:
 *     dimension 0 innermost, in chunks of OR_CHUNK elements converted to the
 *     accumulator's type (double for every float dtype, int64 for integers
 *     and bool), so results never depend on how the work around them is cut;
 *   - sums add each chunk with four partial sums (then pairwise), and keep
 *     the total in double: float32 sums are far more accurate than float32
 *     accumulation, and float64 ones as good as CPU's cascade;
 *   - var/std combine per-chunk means and squared deviations (Chan et al.),
 *     so no division runs per element;
 *   - when the reduced dimension is not the contiguous one (`x.sum(0)` of a
 *     row-major matrix) the simple folds run down columns instead: a tile of
 *     OR_COLUMN_TILE neighbouring outputs advance together, one contiguous row of
 *     the input at a time, each output still folded in the same order;
 *   - scans (cumsum, cumprod, cummax/cummin with their indices, logcumsumexp)
 *     write every prefix along dimension 0.
 *
 * Compiled for wasm32 and wasm64 with the elementwise engine (build.rs).
 */
#include "dtype.h"

#include <wasm_simd128.h>

/* One output element's accumulator: `v` the value (sum, product, extreme,
 * flag), `w` a second value (MINMAX's maximum, VAR's sum of squared
 * deviations), `mean` and `n` VAR's running mean and count, `i` the index
 * of `v` (arg ops). */
typedef struct acc_f {
  double v, w, mean;
  int64_t i, n;
} acc_f;

typedef struct acc_i {
  int64_t v, w, i;
} acc_i;

#define ADD_F(x, y) ((x) + (y))
#define MUL_F(x, y) ((x) * (y))
#define ISNAN_F(x) ((x) != (x))
/* A running float16/bfloat16 sum, product or log-sum-exp kept in float32, as
 * CPU's scans accumulate those types (in acc_type: float; float32's in
 * double). */
#define NARROW_F(x, narrow) ((narrow) ? (double)(float)(x) : (x))
#define NARROW_I(x, narrow) ((void)(narrow), (x))
/* Integer sums and products wrap, as C++'s do on CPU (without C's UB). */
#define ADD_I(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))
#define MUL_I(x, y) ((int64_t)((uint64_t)(x) * (uint64_t)(y)))
#define ISNAN_I(x) 0

/* The folds of a chunk (at most OR_CHUNK values of the accumulator's type)
 * keep several partial results in SIMD lanes and take 16 values per pass:
 * a loop's running values go through the stack at each loop header (the
 * watchdog's epoch check), so a scalar chain costs a store and a reload per
 * element. Each combines its lanes in a fixed order, so a result depends
 * only on the chunk. */

/* NAME(x, m): x[0..m) combined by OP in eight lanes (four vectors of two),
 * lane l taking every eighth value from l, then the lanes and the tail in
 * turn by the scalar COMBINE, in ACC. Sums and products of float64 (an
 * order fixed by the chunk) and int64 sums (they wrap: any order gives the
 * same result). */
#define OR_DEFINE_LANE_FOLD(NAME, T, ACC, SPLAT, OP, EXTRACT, INIT, COMBINE)                    \
  static T NAME(const T *x, int64_t m) {                                                      \
    v128_t s0 = SPLAT(INIT), s1 = s0, s2 = s0, s3 = s0;                                       \
    int64_t j = 0;                                                                            \
    for (; j + 16 <= m; j += 16) {                                                            \
      s0 = OP(s0, OP(wasm_v128_load(x + j), wasm_v128_load(x + j + 8)));                      \
      s1 = OP(s1, OP(wasm_v128_load(x + j + 2), wasm_v128_load(x + j + 10)));                 \
      s2 = OP(s2, OP(wasm_v128_load(x + j + 4), wasm_v128_load(x + j + 12)));                 \
      s3 = OP(s3, OP(wasm_v128_load(x + j + 6), wasm_v128_load(x + j + 14)));                 \
    }                                                                                         \
    const v128_t t = OP(OP(s0, s1), OP(s2, s3));                                              \
    ACC total = COMBINE((ACC)EXTRACT(t, 0), (ACC)EXTRACT(t, 1));                              \
    for (; j < m; j++) {                                                                      \
      total = COMBINE(total, (ACC)x[j]);                                                      \
    }                                                                                         \
    return (T)total;                                                                          \
  }
#define OR_PLUS(a, b) ((a) + (b))
#define OR_TIMES(a, b) ((a) * (b))
OR_DEFINE_LANE_FOLD(sum_F, double, double, wasm_f64x2_splat, wasm_f64x2_add, wasm_f64x2_extract_lane, 0.0, OR_PLUS)
OR_DEFINE_LANE_FOLD(prod_F, double, double, wasm_f64x2_splat, wasm_f64x2_mul, wasm_f64x2_extract_lane, 1.0, OR_TIMES)
OR_DEFINE_LANE_FOLD(sum_I, int64_t, uint64_t, wasm_i64x2_splat, wasm_i64x2_add, wasm_i64x2_extract_lane, 0, OR_PLUS)

/* Integer products wrap, so any order gives the same result: four chains. */
static int64_t prod_I(const int64_t *x, int64_t m) {
  uint64_t p0 = 1, p1 = 1, p2 = 1, p3 = 1;
  int64_t j = 0;
  for (; j + 4 <= m; j += 4) {
    p0 *= (uint64_t)x[j], p1 *= (uint64_t)x[j + 1], p2 *= (uint64_t)x[j + 2], p3 *= (uint64_t)x[j + 3];
  }
  for (; j < m; j++) {
    p0 *= (uint64_t)x[j];
  }
  return (int64_t)(p0 * p1 * (p2 * p3));
}

/* Per-lane extremes that keep the first argument of two equal values. */
ALWAYS_INLINE v128_t lesser_i64x2(v128_t a, v128_t b) {
  return wasm_v128_bitselect(b, a, wasm_i64x2_lt(b, a));
}

ALWAYS_INLINE v128_t greater_i64x2(v128_t a, v128_t b) {
  return wasm_v128_bitselect(b, a, wasm_i64x2_gt(b, a));
}

#define OR_NAN_LANES_F(v) wasm_f64x2_ne(v, v)
#define OR_NAN_LANES_I(v) wasm_i64x2_splat(0)

/* NAME(x, m, want_lo, want_hi, lo, hi): the extremes of x[0..m), m >= 16,
 * into *lo and *hi (either may be skipped), 8 values a pass in per-lane
 * LESSER/GREATER, then the lanes and the tail; whether any value was a NaN
 * (which those do not propagate: the caller folds such a chunk element by
 * element). */
#define OR_DEFINE_EXTREMES(NAME, T, LESSER, GREATER, NAN_LANES, EXTRACT)                                  \
  static int NAME(const T *x, int64_t m, int want_lo, int want_hi, T *lo, T *hi) {                       \
    v128_t l0 = wasm_v128_load(x), l1 = wasm_v128_load(x + 2), l2 = wasm_v128_load(x + 4);             \
    v128_t l3 = wasm_v128_load(x + 6), h0 = l0, h1 = l1, h2 = l2, h3 = l3;                              \
    v128_t nan = wasm_v128_or(wasm_v128_or(NAN_LANES(l0), NAN_LANES(l1)),                                 \
                              wasm_v128_or(NAN_LANES(l2), NAN_LANES(l3)));                                \
    int64_t j = 8;                                                                                        \
    for (; j + 8 <= m; j += 8) {                                                                          \
      const v128_t u0 = wasm_v128_load(x + j), u1 = wasm_v128_load(x + j + 2);                            \
      const v128_t u2 = wasm_v128_load(x + j + 4), u3 = wasm_v128_load(x + j + 6);                        \
      if (want_lo) {                                                                                      \
        l0 = LESSER(l0, u0), l1 = LESSER(l1, u1), l2 = LESSER(l2, u2), l3 = LESSER(l3, u3);               \
      }                                                                                                   \
      if (want_hi) {                                                                                      \
        h0 = GREATER(h0, u0), h1 = GREATER(h1, u1), h2 = GREATER(h2, u2), h3 = GREATER(h3, u3);           \
      }                                                                                                   \
      nan = wasm_v128_or(nan, wasm_v128_or(wasm_v128_or(NAN_LANES(u0), NAN_LANES(u1)),                    \
                                           wasm_v128_or(NAN_LANES(u2), NAN_LANES(u3))));                  \
    }                                                                                                     \
    l0 = LESSER(LESSER(l0, l1), LESSER(l2, l3));                                                          \
    h0 = GREATER(GREATER(h0, h1), GREATER(h2, h3));                                                       \
    T l = EXTRACT(l0, 0), h = EXTRACT(h0, 0);                                                             \
    const T l_1 = EXTRACT(l0, 1), h_1 = EXTRACT(h0, 1);                                                   \
    l = l_1 < l ? l_1 : l;                                                                                \
    h = h_1 > h ? h_1 : h;                                                                                \
    int tail_nan = 0;                                                                                     \
    for (; j < m; j++) {                                                                                  \
      l = x[j] < l ? x[j] : l;                                                                            \
      h = x[j] > h ? x[j] : h;                                                                            \
      tail_nan |= x[j] != x[j];                                                                           \
    }                                                                                                     \
    *lo = l;                                                                                              \
    *hi = h;                                                                                              \
    return wasm_v128_any_true(nan) || tail_nan;                                                           \
  }
OR_DEFINE_EXTREMES(extremes_F, double, wasm_f64x2_pmin, wasm_f64x2_pmax, OR_NAN_LANES_F, wasm_f64x2_extract_lane)
OR_DEFINE_EXTREMES(extremes_I, int64_t, lesser_i64x2, greater_i64x2, OR_NAN_LANES_I, wasm_i64x2_extract_lane)

/* A chunk's max, min or both (m >= 16) merged into `a`: a NaN in `a` stays,
 * a NaN in the chunk wins, as the element-by-element fold does. Each lane
 * keeps the earlier of equal values but the lanes do not merge in the
 * elements' order, so where that matters (an extreme of zero: -0 against
 * +0; a NaN, whose own bits the result keeps) it returns 0 and the
 * element-by-element fold runs instead (CALL returns whether a NaN was seen,
 * TIE whether an extreme is zero). */
#define OR_DEFINE_FOLD_EXTREMES(S, T, ACC, ISNAN, CALL, TIE)                          \
  static int fold_extremes_##S(uint32_t op, ACC *a, const T *x, int64_t m) {          \
    if (m < 16 || (op != OR_REDUCE_MAX && op != OR_REDUCE_MIN && op != OR_REDUCE_MINMAX)) { \
      return 0;                                                                       \
    }                                                                                 \
    T lo, hi;                                                                         \
    if (CALL || (op != OR_REDUCE_MAX && TIE(lo)) || (op != OR_REDUCE_MIN && TIE(hi))) { \
      return 0;                                                                       \
    }                                                                                 \
    if (op != OR_REDUCE_MAX) {                                                        \
      a->v = ISNAN(a->v) ? a->v : (lo < a->v || ISNAN(lo)) ? lo : a->v;               \
    }                                                                                 \
    if (op != OR_REDUCE_MIN) {                                                        \
      T *h = op == OR_REDUCE_MAX ? &a->v : &a->w;                                     \
      *h = ISNAN(*h) ? *h : (hi > *h || ISNAN(hi)) ? hi : *h;                         \
    }                                                                                 \
    return 1;                                                                         \
  }
#define TIE_F(v) ((v) == 0)
#define TIE_I(v) 0
OR_DEFINE_FOLD_EXTREMES(F, double, acc_f, ISNAN_F,
                        extremes_F(x, m, op != OR_REDUCE_MAX, op != OR_REDUCE_MIN, &lo, &hi), TIE_F)
OR_DEFINE_FOLD_EXTREMES(I, int64_t, acc_i, ISNAN_I,
                        extremes_I(x, m, op != OR_REDUCE_MAX, op != OR_REDUCE_MIN, &lo, &hi), TIE_I)

/* The identity each op starts from. */
#define OR_DEFINE_INIT(S, ACC, T, LOWEST, HIGHEST)                                     \
  static ACC init_##S(const or_reduce *p) {                                           \
    ACC a = {0};                                                                      \
    switch (p->op) {                                                                  \
    case OR_REDUCE_PROD:                                                              \
    case OR_REDUCE_ALL:                                                               \
    case OR_REDUCE_CUMPROD:                                                           \
      a.v = 1;                                                                        \
      break;                                                                          \
    case OR_REDUCE_MAX:                                                               \
    case OR_REDUCE_ARGMAX:                                                            \
    case OR_REDUCE_MAX_INDEX:                                                         \
    case OR_REDUCE_CUMMAX:                                                            \
    case OR_REDUCE_LOGCUMSUMEXP:                                                      \
      a.v = LOWEST;                                                                   \
      break;                                                                          \
    case OR_REDUCE_MIN:                                                               \
    case OR_REDUCE_ARGMIN:                                                            \
    case OR_REDUCE_MIN_INDEX:                                                         \
    case OR_REDUCE_CUMMIN:                                                            \
      a.v = HIGHEST;                                                                  \
      break;                                                                          \
    case OR_REDUCE_MINMAX:                                                            \
      a.v = HIGHEST;                                                                  \
      a.w = LOWEST;                                                                   \
      break;                                                                          \
    case OR_REDUCE_NORM: /* -inf: the smallest magnitude */                           \
      a.v = p->args[0].f == -__builtin_inf() ? HIGHEST : 0;                           \
      break;                                                                          \
    default:                                                                          \
      break;                                                                          \
    }                                                                                 \
    return a;                                                                         \
  }

OR_DEFINE_INIT(F, acc_f, double, -__builtin_inf(), __builtin_inf())
OR_DEFINE_INIT(I, acc_i, int64_t, INT64_MIN, INT64_MAX)

/*
 * Folds x[0..m) (positions pos.. along dimension 0) into `a`, for the ops
 * both accumulator types have. A NaN wins max and min (it propagates) and
 * the arg ops (the first NaN's index), as on CPU; ties keep the first index.
 * Returns 0 for an op it does not handle.
 */
/* log(e^x + e^y), as CPU's logcumsumexp folds it (in double): equal
 * infinities give x. */
static double log_add_exp_F(double x, double y) {
  const double lo = y != y ? y : (x < y ? x : y);
  const double hi = y != y ? y : (x < y ? y : x);
  if (lo != hi || (lo - lo == 0.0)) { /* lo - lo == 0: lo is finite */
    return m_log1p_f64(m_exp_f64(lo - hi)) + hi;
  }
  return x;
}

#define log_add_exp_I(x, y) (TRAP(), (x)) /* a float-only scan */

#define OR_DEFINE_FOLD(S, T, ACC, ADD, MUL, ISNAN, NARROW)                             \
  static int fold_common_##S(uint32_t op, ACC *a, const T *x, int64_t m, int64_t pos) { \
    switch (op) {                                                                     \
    case OR_REDUCE_SUM:                                                               \
    case OR_REDUCE_MEAN:                                                              \
      a->v = ADD(a->v, sum_##S(x, m));                                                \
      return 1;                                                                       \
    case OR_REDUCE_NANSUM: {                                                          \
      T v = a->v;                                                                     \
      for (int64_t j = 0; j < m; j++) {                                               \
        v = ISNAN(x[j]) ? v : ADD(v, x[j]);                                           \
      }                                                                               \
      a->v = v;                                                                       \
      return 1;                                                                       \
    }                                                                                 \
    case OR_REDUCE_PROD:                                                              \
      a->v = MUL(a->v, prod_##S(x, m));                                               \
      return 1;                                                                       \
    case OR_REDUCE_MAX:                                                               \
    case OR_REDUCE_MIN: {                                                             \
      const int max = op == OR_REDUCE_MAX;                                            \
      T v = a->v;                                                                     \
      for (int64_t j = 0; j < m; j++) {                                               \
        v = ((max ? x[j] > v : x[j] < v) || ISNAN(x[j])) ? x[j] : v;                  \
      }                                                                               \
      a->v = v;                                                                       \
      return 1;                                                                       \
    }                                                                                 \
    case OR_REDUCE_ARGMAX:                                                            \
    case OR_REDUCE_MAX_INDEX:                                                         \
    case OR_REDUCE_ARGMIN:                                                            \
    case OR_REDUCE_MIN_INDEX: {                                                       \
      const int max = op == OR_REDUCE_ARGMAX || op == OR_REDUCE_MAX_INDEX;            \
      T v = a->v;                                                                     \
      int64_t i = a->i;                                                               \
      for (int64_t j = 0; j < m; j++) {                                               \
        if (!ISNAN(v) && ((max ? x[j] > v : x[j] < v) || ISNAN(x[j]))) {              \
          v = x[j];                                                                   \
          i = pos + j;                                                                \
        }                                                                             \
      }                                                                               \
      a->v = v;                                                                       \
      a->i = i;                                                                       \
      return 1;                                                                       \
    }                                                                                 \
    case OR_REDUCE_MINMAX: {                                                          \
      T lo = a->v, hi = a->w;                                                         \
      for (int64_t j = 0; j < m; j++) {                                               \
        lo = (x[j] < lo || ISNAN(x[j])) ? x[j] : lo;                                  \
        hi = (x[j] > hi || ISNAN(x[j])) ? x[j] : hi;                                  \
      }                                                                               \
      a->v = lo;                                                                      \
      a->w = hi;                                                                      \
      return 1;                                                                       \
    }                                                                                 \
    case OR_REDUCE_ALL:                                                               \
    case OR_REDUCE_ANY: {                                                             \
      /* A flag: all stays 1 until a zero, any 0 until a nonzero. */                  \
      const int all = op == OR_REDUCE_ALL;                                            \
      T v = a->v;                                                                     \
      for (int64_t j = 0; j < m; j++) {                                               \
        v = all ? (x[j] == 0 ? 0 : v) : (x[j] != 0 ? 1 : v);                          \
      }                                                                               \
      a->v = v;                                                                       \
      return 1;                                                                       \
    }                                                                                 \
    default:                                                                          \
      return 0;                                                                       \
    }                                                                                 \
  }                                                                                   \
  /* A scan: x (positions pos.. along dimension 0) becomes its running sums   \
   * (products, extremes, log-sum-exps) after `a`, in order; cummax and        \
   * cummin also write the extremes' positions into `idx`. `narrow`: the sums, \
   * products and log-sum-exps of a float16/bfloat16 output run in float32. */   \
  static void scan_##S(uint32_t op, ACC *a, T *x, int64_t *idx, int64_t m, int64_t pos, int narrow) { \
    T v = a->v;                                                                       \
    if (op == OR_REDUCE_CUMSUM) {                                                     \
      for (int64_t j = 0; j < m; j++) {                                               \
        v = NARROW(ADD(v, x[j]), narrow);                                             \
        x[j] = v;                                                                     \
      }                                                                               \
    } else if (op == OR_REDUCE_CUMPROD) {                                             \
      for (int64_t j = 0; j < m; j++) {                                               \
        v = NARROW(MUL(v, x[j]), narrow);                                             \
        x[j] = v;                                                                     \
      }                                                                               \
    } else if (op == OR_REDUCE_LOGCUMSUMEXP) {                                        \
      for (int64_t j = 0; j < m; j++) {                                               \
        v = NARROW(log_add_exp_##S(x[j], v), narrow);                                 \
        x[j] = v;                                                                     \
      }                                                                               \
    } else {                                                                          \
      const int max = op == OR_REDUCE_CUMMAX;                                         \
      int64_t i = a->i;                                                               \
      for (int64_t j = 0; j < m; j++) {                                               \
        if (ISNAN(x[j]) || (!ISNAN(v) && (max ? x[j] >= v : x[j] <= v))) {            \
          v = x[j];                                                                   \
          i = pos + j;                                                                \
        }                                                                             \
        x[j] = v;                                                                     \
        idx[j] = i;                                                                   \
      }                                                                               \
      a->i = i;                                                                       \
    }                                                                                 \
    a->v = v;                                                                         \
  }

OR_DEFINE_FOLD(F, double, acc_f, ADD_F, MUL_F, ISNAN_F, NARROW_F)
OR_DEFINE_FOLD(I, int64_t, acc_i, ADD_I, MUL_I, ISNAN_I, NARROW_I)

#define F_ABS(x) __builtin_fabs(x)

/* Merges a chunk of `m` elements with mean `mc` and squared deviations `m2`
 * into var's running moments (Chan et al.'s pairwise update). */
static void var_merge(acc_f *a, double mc, double m2, int64_t m) {
  if (a->n == 0) {
    a->mean = mc;
    a->w = m2;
  } else {
    const double n = (double)a->n;
    const double total = n + (double)m;
    const double delta = mc - a->mean;
    a->mean += delta * ((double)m / total);
    a->w += m2 + delta * delta * (n * (double)m / total);
  }
  a->n += m;
}

/* The float-only folds: the p-norm's sum (or extreme) and var's moments. */
static void fold_F(uint32_t op, acc_f *a, const double *x, int64_t m, int64_t pos, const or_reduce *p) {
  if (fold_extremes_F(op, a, x, m) || fold_common_F(op, a, x, m, pos)) {
    return;
  }
  if (op == OR_REDUCE_NORM) {
    const double ord = p->args[0].f;
    if (ord == 2.0) {
      double s0 = 0.0, s1 = 0.0;
      int64_t j = 0;
      for (; j + 2 <= m; j += 2) {
        s0 += x[j] * x[j];
        s1 += x[j + 1] * x[j + 1];
      }
      for (; j < m; j++) {
        s0 += x[j] * x[j];
      }
      a->v += s0 + s1;
    } else if (ord == 1.0) {
      for (int64_t j = 0; j < m; j++) a->v += F_ABS(x[j]);
    } else if (ord == 0.0) {
      for (int64_t j = 0; j < m; j++) a->v += x[j] != 0.0 ? 1.0 : 0.0;
    } else if (ord == __builtin_inf()) {
      for (int64_t j = 0; j < m; j++) {
        const double y = F_ABS(x[j]);
        a->v = (y > a->v || y != y) ? y : a->v;
      }
    } else if (ord == -__builtin_inf()) {
      for (int64_t j = 0; j < m; j++) {
        const double y = F_ABS(x[j]);
        a->v = (y < a->v || y != y) ? y : a->v;
      }
    } else {
      for (int64_t j = 0; j < m; j++) a->v += m_pow_nonneg_f64(F_ABS(x[j]), ord);
    }
    return;
  }
  if (op == OR_REDUCE_VAR) {
    /* This chunk's mean and squared deviations, merged into the running ones. */
    const double mc = sum_F(x, m) / (double)m;
    double m2 = 0.0;
    for (int64_t j = 0; j < m; j++) {
      const double d = x[j] - mc;
      m2 += d * d;
    }
    var_merge(a, mc, m2, m);
    return;
  }
  TRAP();
}

static void fold_I(uint32_t op, acc_i *a, const int64_t *x, int64_t m, int64_t pos, const or_reduce *p) {
  (void)p;
  if (!fold_extremes_I(op, a, x, m) && !fold_common_I(op, a, x, m, pos)) {
    TRAP(); /* a float-only op: the shim refuses these for integers */
  }
}

/* Writes one output element's result. `count` is the number of elements reduced. */
static void finish_F(const or_reduce *p, const acc_f *a, char *out0, char *out1, int64_t count) {
  const uint32_t *dt = p->dtypes;
  switch (p->op) {
  case OR_REDUCE_MEAN:
    store_F64(out0, dt[0], a->v / (double)count);
    return;
  case OR_REDUCE_ARGMAX:
  case OR_REDUCE_ARGMIN:
    store_I64(out0, dt[0], a->i);
    return;
  case OR_REDUCE_MAX_INDEX:
  case OR_REDUCE_MIN_INDEX:
    store_F64(out0, dt[0], a->v);
    store_I64(out1, dt[1], a->i);
    return;
  case OR_REDUCE_MINMAX:
    store_F64(out0, dt[0], a->v);
    store_F64(out1, dt[1], a->w);
    return;
  case OR_REDUCE_NORM: {
    const double ord = p->args[0].f;
    double v = a->v;
    if (ord == 2.0) {
      v = __builtin_sqrt(v);
    } else if (ord != 1.0 && ord != 0.0 && ord != __builtin_inf() && ord != -__builtin_inf()) {
      v = m_pow_nonneg_f64(v, 1.0 / ord);
    }
    store_F64(out0, dt[0], v);
    return;
  }
  case OR_REDUCE_VAR: {
    const double dof = (double)count - p->args[0].f;
    double v = a->w / (dof > 0.0 ? dof : 0.0);
    if (p->args[1].f != 0.0) {
      v = __builtin_sqrt(v);
    }
    store_F64(out0, dt[0], v);
    if (p->noutputs > 1) {
      store_F64(out1, dt[1], a->mean);
    }
    return;
  }
  default: /* sums, products, extremes, flags */
    store_F64(out0, dt[0], a->v);
    return;
  }
}

static void finish_I(const or_reduce *p, const acc_i *a, char *out0, char *out1, int64_t count) {
  (void)count;
  const uint32_t *dt = p->dtypes;
  switch (p->op) {
  case OR_REDUCE_ARGMAX:
  case OR_REDUCE_ARGMIN:
    store_I64(out0, dt[0], a->i);
    return;
  case OR_REDUCE_MAX_INDEX:
  case OR_REDUCE_MIN_INDEX:
    store_I64(out0, dt[0], a->v);
    store_I64(out1, dt[1], a->i);
    return;
  case OR_REDUCE_MINMAX:
    store_I64(out0, dt[0], a->v);
    store_I64(out1, dt[1], a->w);
    return;
  default:
    store_I64(out0, dt[0], a->v);
    return;
  }
}

/* ---- float32 rows read contiguously: the common case, in SIMD ---- */

/* The sum of x[0..n) in double: blocks of 64 elements summed in sixteen
 * float32 lanes (four values each, so a block's error stays near one float32
 * rounding of its partial sums), each block's lanes then added in double. */
NOINLINE static double sum_f32_contig(const float *x, int64_t n) {
  v128_t t0 = wasm_f64x2_splat(0.0), t1 = t0;
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    v128_t a = wasm_v128_load(x + j), b = wasm_v128_load(x + j + 4);
    v128_t c = wasm_v128_load(x + j + 8), d = wasm_v128_load(x + j + 12);
    for (int k = 16; k < 64; k += 16) {
      a = wasm_f32x4_add(a, wasm_v128_load(x + j + k));
      b = wasm_f32x4_add(b, wasm_v128_load(x + j + k + 4));
      c = wasm_f32x4_add(c, wasm_v128_load(x + j + k + 8));
      d = wasm_f32x4_add(d, wasm_v128_load(x + j + k + 12));
    }
    t0 = wasm_f64x2_add(t0, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(a), wasm_f64x2_promote_low_f32x4(b)));
    t1 = wasm_f64x2_add(t1, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(c), wasm_f64x2_promote_low_f32x4(d)));
    a = wasm_i32x4_shuffle(a, a, 2, 3, 0, 1);
    b = wasm_i32x4_shuffle(b, b, 2, 3, 0, 1);
    c = wasm_i32x4_shuffle(c, c, 2, 3, 0, 1);
    d = wasm_i32x4_shuffle(d, d, 2, 3, 0, 1);
    t0 = wasm_f64x2_add(t0, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(a), wasm_f64x2_promote_low_f32x4(b)));
    t1 = wasm_f64x2_add(t1, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(c), wasm_f64x2_promote_low_f32x4(d)));
  }
  const v128_t s = wasm_f64x2_add(t0, t1);
  double total = wasm_f64x2_extract_lane(s, 0) + wasm_f64x2_extract_lane(s, 1);
  for (; j < n; j++) {
    total += (double)x[j];
  }
  return total;
}

/* The maximum (minimum) of x[0..n), n > 0, NaN propagating: a plain
 * per-lane max (x86's maxps, as wasm's pmax), with a separate record of
 * whether any NaN was seen. One loop per op (a select between both would
 * compute both), 32 elements per pass (the watchdog's check at each loop
 * header reloads the loop's vectors from the stack: fewer passes, fewer
 * reloads). */
#define OR_DEFINE_EXTREME_F32(NAME, PICK, BETTER)                                           \
  NOINLINE static float NAME(const float *x, int64_t n) {                                   \
    float r = x[0];                                                                         \
    int64_t j = 0;                                                                          \
    if (n >= 32) {                                                                          \
      v128_t a = wasm_v128_load(x), b = wasm_v128_load(x + 4);                              \
      v128_t c = wasm_v128_load(x + 8), d = wasm_v128_load(x + 12);                         \
      v128_t nan = wasm_v128_or(wasm_v128_or(wasm_f32x4_ne(a, a), wasm_f32x4_ne(b, b)),     \
                                wasm_v128_or(wasm_f32x4_ne(c, c), wasm_f32x4_ne(d, d)));    \
      for (j = 16; j + 32 <= n; j += 32) {                                                  \
        const v128_t u0 = wasm_v128_load(x + j), u1 = wasm_v128_load(x + j + 4);            \
        const v128_t u2 = wasm_v128_load(x + j + 8), u3 = wasm_v128_load(x + j + 12);       \
        const v128_t u4 = wasm_v128_load(x + j + 16), u5 = wasm_v128_load(x + j + 20);      \
        const v128_t u6 = wasm_v128_load(x + j + 24), u7 = wasm_v128_load(x + j + 28);      \
        a = PICK(PICK(a, u0), u4);                                                          \
        b = PICK(PICK(b, u1), u5);                                                          \
        c = PICK(PICK(c, u2), u6);                                                          \
        d = PICK(PICK(d, u3), u7);                                                          \
        const v128_t n0 = wasm_v128_or(wasm_f32x4_ne(u0, u0), wasm_f32x4_ne(u1, u1));       \
        const v128_t n1 = wasm_v128_or(wasm_f32x4_ne(u2, u2), wasm_f32x4_ne(u3, u3));       \
        const v128_t n2 = wasm_v128_or(wasm_f32x4_ne(u4, u4), wasm_f32x4_ne(u5, u5));       \
        const v128_t n3 = wasm_v128_or(wasm_f32x4_ne(u6, u6), wasm_f32x4_ne(u7, u7));       \
        nan = wasm_v128_or(nan, wasm_v128_or(wasm_v128_or(n0, n1), wasm_v128_or(n2, n3)));  \
      }                                                                                     \
      if (wasm_v128_any_true(nan)) {                                                        \
        return __builtin_nanf("");                                                          \
      }                                                                                     \
      a = PICK(PICK(a, b), PICK(c, d));                                                     \
      for (int l = 0; l < 4; l++) {                                                         \
        const float y = wasm_f32x4_extract_lane(a, 0);                                      \
        r = BETTER(y, r) ? y : r;                                                           \
        a = wasm_i32x4_shuffle(a, a, 1, 2, 3, 0);                                           \
      }                                                                                     \
    }                                                                                       \
    for (; j < n; j++) {                                                                    \
      r = (r != r) ? r : (BETTER(x[j], r) || x[j] != x[j]) ? x[j] : r;                      \
    }                                                                                       \
    return r;                                                                               \
  }

#define GREATER(y, r) ((y) > (r))
#define LESS(y, r) ((y) < (r))
OR_DEFINE_EXTREME_F32(max_f32_contig, wasm_f32x4_pmax, GREATER)
OR_DEFINE_EXTREME_F32(min_f32_contig, wasm_f32x4_pmin, LESS)

/* The product of x[0..n) in double: sixteen lanes (eight vectors of two)
 * each multiplying every sixteenth element, widened exactly, then the lanes
 * in a fixed order and the tail in turn. One chain of products would wait
 * on each multiply; the accumulators also go through the stack at each loop
 * header (the epoch check), so a pass takes 32 elements. */
NOINLINE static double prod_f32_contig(const float *x, int64_t n) {
  v128_t p[8];
  for (int q = 0; q < 8; q++) {
    p[q] = wasm_f64x2_splat(1.0);
  }
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    for (int q = 0; q < 4; q++) {
      const v128_t u = wasm_v128_load(x + j + 4 * q), v = wasm_v128_load(x + j + 16 + 4 * q);
      p[2 * q] = wasm_f64x2_mul(p[2 * q], wasm_f64x2_mul(wasm_f64x2_promote_low_f32x4(u),
                                                         wasm_f64x2_promote_low_f32x4(v)));
      p[2 * q + 1] = wasm_f64x2_mul(p[2 * q + 1],
                                    wasm_f64x2_mul(wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(u, u, 2, 3, 0, 1)),
                                                   wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 0, 1))));
    }
  }
  for (int q = 1; q < 8; q++) {
    p[0] = wasm_f64x2_mul(p[0], p[q]);
  }
  double total = wasm_f64x2_extract_lane(p[0], 0) * wasm_f64x2_extract_lane(p[0], 1);
  for (; j < n; j++) {
    total *= (double)x[j];
  }
  return total;
}

/* The position of the first element of x[0..n) equal to `target` (the
 * first NaN when `target` is a NaN), which x holds: sixteen at a time. */
NOINLINE static int64_t find_f32_contig(const float *x, int64_t n, float target) {
  const int nan = target != target;
  const v128_t t = wasm_f32x4_splat(target);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    v128_t hit = wasm_i32x4_splat(0);
    for (int q = 0; q < 4; q++) {
      const v128_t u = wasm_v128_load(x + j + 4 * q);
      hit = wasm_v128_or(hit, nan ? wasm_f32x4_ne(u, u) : wasm_f32x4_eq(u, t));
    }
    if (wasm_v128_any_true(hit)) {
      break;
    }
  }
  for (; j < n; j++) {
    if (nan ? x[j] != x[j] : x[j] == target) {
      return j;
    }
  }
  TRAP(); /* the extreme came from x */
  return 0;
}

/* The sum of x[j]^2 (ord 2) or |x[j]| (ord 1) over x[0..n), in SIMD doubles:
 * each element widened exactly, four accumulators of two lanes. */
NOINLINE static double power_sum_f32_contig(const float *x, int64_t n, int squares) {
  const v128_t zero = wasm_f64x2_splat(0.0);
  v128_t s0 = zero, s1 = zero, s2 = zero, s3 = zero;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    v128_t u = wasm_v128_load(x + j), v = wasm_v128_load(x + j + 4);
    if (!squares) {
      u = wasm_f32x4_abs(u);
      v = wasm_f32x4_abs(v);
    }
    const v128_t d0 = wasm_f64x2_promote_low_f32x4(u);
    const v128_t d1 = wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(u, u, 2, 3, 0, 1));
    const v128_t d2 = wasm_f64x2_promote_low_f32x4(v);
    const v128_t d3 = wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
    s0 = wasm_f64x2_add(s0, squares ? wasm_f64x2_mul(d0, d0) : d0);
    s1 = wasm_f64x2_add(s1, squares ? wasm_f64x2_mul(d1, d1) : d1);
    s2 = wasm_f64x2_add(s2, squares ? wasm_f64x2_mul(d2, d2) : d2);
    s3 = wasm_f64x2_add(s3, squares ? wasm_f64x2_mul(d3, d3) : d3);
  }
  const v128_t s = wasm_f64x2_add(wasm_f64x2_add(s0, s1), wasm_f64x2_add(s2, s3));
  double total = wasm_f64x2_extract_lane(s, 0) + wasm_f64x2_extract_lane(s, 1);
  for (; j < n; j++) {
    const double y = (double)x[j];
    total += squares ? y * y : __builtin_fabs(y);
  }
  return total;
}

/* var's moments of a contiguous float32 row, chunk by chunk as fold_F does
 * (OR_CHUNK elements from the row's start, merged with var_merge), each
 * chunk's sum and squared deviations taken in SIMD doubles. */
NOINLINE static void var_f32_contig(acc_f *a, const float *x, int64_t n) {
  const v128_t zero = wasm_f64x2_splat(0.0);
  for (int64_t k = 0; k < n; k += OR_CHUNK) {
    const int64_t m = n - k < OR_CHUNK ? n - k : OR_CHUNK;
    const float *c = x + k;
    /* Four accumulators, each taking the sum of two vectors per pass of 16
     * elements: the accumulators go through the stack at every loop header
     * (the epoch check), so an iteration costs a store and a reload on each
     * chain; 16 elements per iteration instead of 8 halve that (batch
     * norm's statistics of 16 x 16 x 32 x 32, one worker: 0.88 to 0.56 ns
     * per element). */
    v128_t s0 = zero, s1 = zero, s2 = zero, s3 = zero;
    int64_t j = 0;
    for (; j + 16 <= m; j += 16) {
      const v128_t u = wasm_v128_load(c + j), v = wasm_v128_load(c + j + 4);
      const v128_t w = wasm_v128_load(c + j + 8), z = wasm_v128_load(c + j + 12);
      s0 = wasm_f64x2_add(s0, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(u), wasm_f64x2_promote_low_f32x4(w)));
      s1 = wasm_f64x2_add(s1, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(u, u, 2, 3, 0, 1)),
                                             wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(w, w, 2, 3, 0, 1))));
      s2 = wasm_f64x2_add(s2, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(v), wasm_f64x2_promote_low_f32x4(z)));
      s3 = wasm_f64x2_add(s3, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 0, 1)),
                                             wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(z, z, 2, 3, 0, 1))));
    }
    const v128_t s = wasm_f64x2_add(wasm_f64x2_add(s0, s1), wasm_f64x2_add(s2, s3));
    double sum = wasm_f64x2_extract_lane(s, 0) + wasm_f64x2_extract_lane(s, 1);
    for (int64_t t = j; t < m; t++) sum += (double)c[t];
    const double mc = sum / (double)m;
    const v128_t mean = wasm_f64x2_splat(mc);
    v128_t q0 = zero, q1 = zero, q2 = zero, q3 = zero;
    for (j = 0; j + 16 <= m; j += 16) {
      v128_t d[8];
      for (int h = 0; h < 4; h++) {
        const v128_t u = wasm_v128_load(c + j + 4 * h);
        d[2 * h] = wasm_f64x2_sub(wasm_f64x2_promote_low_f32x4(u), mean);
        d[2 * h + 1] = wasm_f64x2_sub(wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(u, u, 2, 3, 0, 1)), mean);
      }
      q0 = wasm_f64x2_add(q0, wasm_f64x2_add(wasm_f64x2_mul(d[0], d[0]), wasm_f64x2_mul(d[4], d[4])));
      q1 = wasm_f64x2_add(q1, wasm_f64x2_add(wasm_f64x2_mul(d[1], d[1]), wasm_f64x2_mul(d[5], d[5])));
      q2 = wasm_f64x2_add(q2, wasm_f64x2_add(wasm_f64x2_mul(d[2], d[2]), wasm_f64x2_mul(d[6], d[6])));
      q3 = wasm_f64x2_add(q3, wasm_f64x2_add(wasm_f64x2_mul(d[3], d[3]), wasm_f64x2_mul(d[7], d[7])));
    }
    const v128_t q = wasm_f64x2_add(wasm_f64x2_add(q0, q1), wasm_f64x2_add(q2, q3));
    double m2 = wasm_f64x2_extract_lane(q, 0) + wasm_f64x2_extract_lane(q, 1);
    for (int64_t t = j; t < m; t++) {
      const double d = (double)c[t] - mc;
      m2 += d * d;
    }
    var_merge(a, mc, m2, m);
  }
}

/* ---- float16 and bfloat16 rows read contiguously ---- */

/* The low (high) two float32 lanes of v widened to double. */
ALWAYS_INLINE v128_t widen_low(v128_t v) {
  return wasm_f64x2_promote_low_f32x4(v);
}

ALWAYS_INLINE v128_t widen_high(v128_t v) {
  return wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
}

/* sum_F of a chunk of m halves at q, reading the halves themselves: the same
 * lanes, the same additions in the same order as sum_F over the chunk
 * widened to double (lane pair s0 takes x[j..j+1] + x[j+8..j+9], s1 the next
 * two of each eight, ...), so the same bits, without the widened copy (a
 * float16 sum spent two thirds of its time writing and rereading it). */
#define OR_SUM_HALVES_STEP(j)                                                                  \
  {                                                                                            \
    v128_t a, b, c, d;                                                                         \
    halves8_to_f32(wasm_v128_load(q + (j)), bf16, &a, &b);     /* x[j..j+3], x[j+4..j+7] */    \
    halves8_to_f32(wasm_v128_load(q + (j) + 8), bf16, &c, &d); /* x[j+8..j+11], x[j+12..] */   \
    s0 = wasm_f64x2_add(s0, wasm_f64x2_add(widen_low(a), widen_low(c)));                       \
    s1 = wasm_f64x2_add(s1, wasm_f64x2_add(widen_high(a), widen_high(c)));                     \
    s2 = wasm_f64x2_add(s2, wasm_f64x2_add(widen_low(b), widen_low(d)));                       \
    s3 = wasm_f64x2_add(s3, wasm_f64x2_add(widen_high(b), widen_high(d)));                     \
  }

/* Two steps of 16 per pass: the sums go through the stack at each loop
 * header (the epoch check). */
ALWAYS_INLINE double sum_halves(const uint16_t *q, int64_t m, int bf16) {
  v128_t s0 = wasm_f64x2_splat(0.0), s1 = s0, s2 = s0, s3 = s0;
  int64_t j = 0;
  for (; j + 32 <= m; j += 32) {
    OR_SUM_HALVES_STEP(j)
    OR_SUM_HALVES_STEP(j + 16)
  }
  if (j + 16 <= m) {
    OR_SUM_HALVES_STEP(j)
    j += 16;
  }
  const v128_t t = wasm_f64x2_add(wasm_f64x2_add(s0, s1), wasm_f64x2_add(s2, s3));
  double total = wasm_f64x2_extract_lane(t, 0) + wasm_f64x2_extract_lane(t, 1);
  for (; j < m; j++) {
    total += (double)(bf16 ? bf16_to_f32(q[j]) : f16_to_f32(q[j]));
  }
  return total;
}

NOINLINE static double sum_f16_chunk(const uint16_t *q, int64_t m) {
  return sum_halves(q, m, 0);
}

NOINLINE static double sum_bf16_chunk(const uint16_t *q, int64_t m) {
  return sum_halves(q, m, 1);
}

/* The maximum (minimum) of a chunk of m > 0 halves at q, widened in
 * registers: per-lane extremes of 16 values a pass and a record of any NaN
 * (then NaN). A zero is returned as either zero: the caller refolds such a
 * chunk element by element. */
ALWAYS_INLINE float extreme_halves(const uint16_t *q, int64_t m, int bf16, int max) {
  float r = bf16 ? bf16_to_f32(q[0]) : f16_to_f32(q[0]);
  int64_t j = 0;
  if (m >= 16) {
    v128_t a, b, c, d;
    halves8_to_f32(wasm_v128_load(q), bf16, &a, &b);
    halves8_to_f32(wasm_v128_load(q + 8), bf16, &c, &d);
    v128_t nan = wasm_v128_or(wasm_v128_or(wasm_f32x4_ne(a, a), wasm_f32x4_ne(b, b)),
                              wasm_v128_or(wasm_f32x4_ne(c, c), wasm_f32x4_ne(d, d)));
    for (j = 16; j + 16 <= m; j += 16) {
      v128_t u0, u1, u2, u3;
      halves8_to_f32(wasm_v128_load(q + j), bf16, &u0, &u1);
      halves8_to_f32(wasm_v128_load(q + j + 8), bf16, &u2, &u3);
      a = max ? wasm_f32x4_pmax(a, u0) : wasm_f32x4_pmin(a, u0);
      b = max ? wasm_f32x4_pmax(b, u1) : wasm_f32x4_pmin(b, u1);
      c = max ? wasm_f32x4_pmax(c, u2) : wasm_f32x4_pmin(c, u2);
      d = max ? wasm_f32x4_pmax(d, u3) : wasm_f32x4_pmin(d, u3);
      nan = wasm_v128_or(nan, wasm_v128_or(wasm_v128_or(wasm_f32x4_ne(u0, u0), wasm_f32x4_ne(u1, u1)),
                                           wasm_v128_or(wasm_f32x4_ne(u2, u2), wasm_f32x4_ne(u3, u3))));
    }
    if (wasm_v128_any_true(nan)) {
      return __builtin_nanf("");
    }
    a = max ? wasm_f32x4_pmax(wasm_f32x4_pmax(a, b), wasm_f32x4_pmax(c, d))
            : wasm_f32x4_pmin(wasm_f32x4_pmin(a, b), wasm_f32x4_pmin(c, d));
    for (int l = 0; l < 4; l++) {
      const float y = wasm_f32x4_extract_lane(a, 0);
      r = (max ? y > r : y < r) ? y : r;
      a = wasm_i32x4_shuffle(a, a, 1, 2, 3, 0);
    }
  }
  for (; j < m; j++) {
    const float y = bf16 ? bf16_to_f32(q[j]) : f16_to_f32(q[j]);
    r = (r != r) ? r : ((max ? y > r : y < r) || y != y) ? y : r;
  }
  return r;
}

NOINLINE static float extreme_f16_chunk(const uint16_t *q, int64_t m, int max) {
  return max ? extreme_halves(q, m, 0, 1) : extreme_halves(q, m, 0, 0);
}

NOINLINE static float extreme_bf16_chunk(const uint16_t *q, int64_t m, int max) {
  return max ? extreme_halves(q, m, 1, 1) : extreme_halves(q, m, 1, 0);
}

/* A chunk of halves whose extreme is zero or NaN, folded element by element
 * as before (fold_common_F: fold_extremes_F leaves such chunks to it), its
 * widened copy on a stack frame of its own. */
NOINLINE static void refold_halves(uint32_t op, acc_f *a, const uint16_t *q, int64_t m, int64_t pos, int bf16) {
  double x[OR_CHUNK];
  if (bf16) { /* the flag a constant in each call: no test per step */
    halves_to_f64(x, q, m, 1);
  } else {
    halves_to_f64(x, q, m, 0);
  }
  fold_common_F(op, a, x, m, pos);
}

/* A contiguous float16 or bfloat16 row, chunk by chunk as fold_slice_F cuts
 * it: sums and means add sum_F's chunk totals (sum_halves); maxima and minima
 * take each chunk's extreme in float32 lanes (extreme_halves) and merge it
 * as a float32 row's is merged, a chunk whose extreme is zero or NaN (which
 * zero, which NaN) folding element by element as before. 0 for other ops. */
static int fold_halves_row(const or_reduce *p, acc_f *a, const uint16_t *q, int64_t n, int bf16) {
  const uint32_t op = p->op;
  if (op == OR_REDUCE_SUM || op == OR_REDUCE_MEAN) {
    for (int64_t k = 0; k < n; k += OR_CHUNK) {
      const int64_t m = n - k < OR_CHUNK ? n - k : OR_CHUNK;
      a->v += bf16 ? sum_bf16_chunk(q + k, m) : sum_f16_chunk(q + k, m);
    }
    return 1;
  }
  if (op != OR_REDUCE_MAX && op != OR_REDUCE_MIN) {
    return 0;
  }
  const int max = op == OR_REDUCE_MAX;
  for (int64_t k = 0; k < n; k += OR_CHUNK) {
    const int64_t m = n - k < OR_CHUNK ? n - k : OR_CHUNK;
    const double y = (double)(bf16 ? extreme_bf16_chunk(q + k, m, max) : extreme_f16_chunk(q + k, m, max));
    if (y == 0 || y != y) {
      refold_halves(op, a, q + k, m, k, bf16);
      continue;
    }
    a->v = a->v == a->v && (max ? y > a->v : y < a->v) ? y : a->v; /* a NaN in a stays */
  }
  return 1;
}

/* A whole contiguous float32 row folded at once, for the ops above (and a
 * float16 or bfloat16 one for some: fold_halves_row); 0 if the row or op is
 * not one of them. */
static int fold_contig_row(const or_reduce *p, acc_f *a, const char *row, int64_t n, uint32_t dtype, int64_t stride) {
  if ((dtype == OR_F16 || dtype == OR_BF16) && stride == 2) {
    return fold_halves_row(p, a, (const uint16_t *)row, n, dtype == OR_BF16);
  }
  if (dtype != OR_F32 || stride != 4) {
    return 0;
  }
  const float *x = (const float *)row;
  const uint32_t op = p->op;
  switch (op) {
  case OR_REDUCE_SUM:
  case OR_REDUCE_MEAN:
    a->v += sum_f32_contig(x, n);
    return 1;
  case OR_REDUCE_MAX:
  case OR_REDUCE_MIN: {
    const double y = (double)(op == OR_REDUCE_MAX ? max_f32_contig(x, n) : min_f32_contig(x, n));
    if (y == 0 || y != y) {
      return 0; /* which zero, or which NaN: the element-by-element fold decides (fold_extremes) */
    }
    a->v = a->v == a->v && (op == OR_REDUCE_MAX ? y > a->v : y < a->v) ? y : a->v; /* a NaN in a stays */
    return 1;
  }
  case OR_REDUCE_MINMAX: {
    if (n == 0) {
      return 1;
    }
    const double lo = (double)min_f32_contig(x, n), hi = (double)max_f32_contig(x, n);
    if (lo == 0 || hi == 0 || lo != lo || hi != hi) {
      return 0;
    }
    a->v = a->v == a->v && lo < a->v ? lo : a->v; /* a NaN in a stays */
    a->w = a->w == a->w && hi > a->w ? hi : a->w;
    return 1;
  }
  case OR_REDUCE_PROD:
    a->v *= prod_f32_contig(x, n);
    return 1;
  case OR_REDUCE_ARGMAX:
  case OR_REDUCE_MAX_INDEX:
  case OR_REDUCE_ARGMIN:
  case OR_REDUCE_MIN_INDEX: {
    /* The row's extreme (a NaN if it has one), then its first position: the
     * element fold_F's loop would keep, merged into `a` as that loop merges
     * one element. Positions count from the row's start, as there. */
    if (n == 0) {
      return 1;
    }
    const int max = op == OR_REDUCE_ARGMAX || op == OR_REDUCE_MAX_INDEX;
    const int64_t j = find_f32_contig(x, n, max ? max_f32_contig(x, n) : min_f32_contig(x, n));
    const double y = (double)x[j];
    if (a->v == a->v && ((max ? y > a->v : y < a->v) || y != y)) {
      a->v = y;
      a->i = j;
    }
    return 1;
  }
  case OR_REDUCE_VAR:
    var_f32_contig(a, x, n);
    return 1;
  case OR_REDUCE_NORM: {
    const double ord = p->args[0].f;
    if (ord != 2.0 && ord != 1.0) {
      return 0;
    }
    a->v += ord == 2.0 ? power_sum_f32_contig(x, n, 1) : power_sum_f32_contig(x, n, 0);
    return 1;
  }
  default:
    return 0;
  }
}

/* all and any of a contiguous row of bytes (bool or uint8), 64 at a time:
 * whether any byte is zero (all) or nonzero (any). 0 for other rows and ops. */
static int fold_bytes_row(const or_reduce *p, acc_i *a, const char *row, int64_t n, uint32_t dtype, int64_t stride) {
  const uint32_t op = p->op;
  if ((dtype != OR_BOOL && dtype != OR_U8) || stride != 1 || (op != OR_REDUCE_ALL && op != OR_REDUCE_ANY)) {
    return 0;
  }
  const uint8_t *x = (const uint8_t *)row;
  const int all = op == OR_REDUCE_ALL;
  const v128_t zero = wasm_i8x16_splat(0);
  int64_t j = 0;
  int hit = 0; /* a zero byte (all), a nonzero one (any) */
  for (; j + 64 <= n && !hit; j += 64) {
    v128_t found = zero;
    for (int q = 0; q < 4; q++) {
      const v128_t v = wasm_v128_load(x + j + 16 * q);
      found = wasm_v128_or(found, all ? wasm_i8x16_eq(v, zero) : v);
    }
    hit = wasm_v128_any_true(found);
  }
  for (; j < n && !hit; j++) {
    hit = all ? x[j] == 0 : x[j] != 0;
  }
  if (hit) {
    a->v = all ? 0 : 1;
  }
  return 1;
}

/* A chunk of the input as doubles: float32 rows (the common case) without
 * the per-element dtype switch. */
static void load_f64(double *dst, const char *p, int64_t stride, uint32_t dtype, int64_t m) {
  if (dtype == OR_F32) {
    for (int64_t j = 0; j < m; j++) dst[j] = (double)*(const float *)(p + j * stride);
  } else {
    load_row_F64(dst, p, stride, dtype, m);
  }
}

#define load_i64 load_row_I64

static int is_scan(uint32_t op) {
  return op == OR_REDUCE_CUMSUM || op == OR_REDUCE_CUMPROD || op == OR_REDUCE_CUMMAX || op == OR_REDUCE_CUMMIN ||
         op == OR_REDUCE_LOGCUMSUMEXP;
}

/* Scans that also write their positions (int64, out1). */
static int is_indexed_scan(uint32_t op) {
  return op == OR_REDUCE_CUMMAX || op == OR_REDUCE_CUMMIN;
}

/* The accumulator of the input slice at `in` over dimensions [0, nreduce),
 * dimension 0 innermost, chunk by chunk from each row's start. */
#define OR_DEFINE_FOLD_SLICE(S, T, ACC, LOAD, FAST_ROW, NATIVE)                                           \
  static ACC fold_slice_##S(const or_reduce *p, const char *in) {                                 \
    T buf[OR_CHUNK];                                                                              \
    ACC a = init_##S(p);                                                                          \
    const uint32_t nr = p->nreduce;                                                               \
    const uint32_t dt = p->dtypes[OR_REDUCE_IN];                                                  \
    const int64_t n0 = nr ? p->sizes[0] : 1;                                                      \
    const int64_t s0 = nr ? p->strides[OR_REDUCE_IN][0] : 0;                                      \
    int64_t counter[OR_MAX_DIMS] = {0};                                                           \
    const char *row = in;                                                                         \
    /* Rows already of the accumulator's type fold in place, chunk by chunk. */                   \
    const int native = dt == NATIVE && s0 == (int64_t)sizeof(T);                                  \
    for (;;) {                                                                                    \
      if (!FAST_ROW(p, &a, row, n0, dt, s0)) {                                                     \
        for (int64_t k = 0; k < n0; k += OR_CHUNK) {                                              \
          const int64_t m = n0 - k < OR_CHUNK ? n0 - k : OR_CHUNK;                                \
          const T *x = (const T *)(row + k * s0);                                                 \
          if (!native) {                                                                          \
            LOAD(buf, row + k * s0, s0, dt, m);                                                   \
            x = buf;                                                                              \
          }                                                                                       \
          fold_##S(p->op, &a, x, m, k, p);                                                        \
        }                                                                                         \
      }                                                                                           \
      uint32_t d = 1;                                                                             \
      for (; d < nr; d++) {                                                                       \
        row += p->strides[OR_REDUCE_IN][d];                                                       \
        if (++counter[d] < p->sizes[d]) {                                                         \
          break;                                                                                  \
        }                                                                                         \
        row -= p->strides[OR_REDUCE_IN][d] * p->sizes[d];                                         \
        counter[d] = 0;                                                                           \
      }                                                                                           \
      if (d >= nr) {                                                                              \
        return a;                                                                                 \
      }                                                                                           \
    }                                                                                             \
  }

/*
 * One output element (or, for scans, one line of outputs): folds the input
 * slice at `in` over dimensions [0, nreduce), dimension 0 innermost.
 */
#define OR_DEFINE_REDUCE_ONE(S, T, ACC, LOAD, STORE_ROW)                                        \
  static void reduce_one_##S(const or_reduce *p, const char *in, char *out0, char *out1,         \
                             int64_t count) {                                                     \
    ACC a = init_##S(p);                                                                          \
    if (is_scan(p->op)) { /* along dimension 0, a scan's one reduced dimension */               \
      T buf[OR_CHUNK];                                                                            \
      int64_t ibuf[OR_CHUNK];                                                                     \
      const int64_t n0 = p->sizes[0], s0 = p->strides[OR_REDUCE_IN][0];                           \
      const int64_t o0 = p->strides[OR_REDUCE_OUT0][0];                                           \
      const int64_t o1 = p->noutputs > 1 ? p->strides[OR_REDUCE_OUT1][0] : 0;                     \
      const int narrow = p->dtypes[OR_REDUCE_OUT0] == OR_F16 || p->dtypes[OR_REDUCE_OUT0] == OR_BF16; \
      for (int64_t k = 0; k < n0; k += OR_CHUNK) {                                                \
        const int64_t m = n0 - k < OR_CHUNK ? n0 - k : OR_CHUNK;                                  \
        LOAD(buf, in + k * s0, s0, p->dtypes[OR_REDUCE_IN], m);                                   \
        scan_##S(p->op, &a, buf, ibuf, m, k, narrow);                                             \
        STORE_ROW(out0 + k * o0, o0, p->dtypes[OR_REDUCE_OUT0], buf, m);                          \
        if (is_indexed_scan(p->op)) {                                                             \
          for (int64_t j = 0; j < m; j++) {                                                       \
            *(int64_t *)(out1 + (k + j) * o1) = ibuf[j];                                          \
          }                                                                                       \
        }                                                                                         \
      }                                                                                           \
      return;                                                                                     \
    }                                                                                             \
    a = fold_slice_##S(p, in);                                                                    \
    finish_##S(p, &a, out0, out1, count);                                                         \
  }

OR_DEFINE_FOLD_SLICE(F, double, acc_f, load_f64, fold_contig_row, OR_F64)
OR_DEFINE_FOLD_SLICE(I, int64_t, acc_i, load_i64, fold_bytes_row, OR_I64)
OR_DEFINE_REDUCE_ONE(F, double, acc_f, load_f64, store_row_F64)
OR_DEFINE_REDUCE_ONE(I, int64_t, acc_i, load_i64, store_row_I64)

/* ---- segmented reductions (or_reduce_phase) ---- */

_Static_assert(sizeof(acc_f) <= OR_REDUCE_PARTIAL_BYTES && sizeof(acc_i) <= OR_REDUCE_PARTIAL_BYTES,
               "a partial holds an accumulator");
_Static_assert(OR_REDUCE_SEGMENT_ALIGN % OR_CHUNK == 0 && OR_REDUCE_SEGMENT_ALIGN % 64 == 0,
               "segments start where a pass's chunks and SIMD blocks do");

/* Merges the accumulator `b` of the slice after `a`'s into `a`, for the ops
 * both accumulator types have, with the rules the folds use (NaN propagates
 * and wins the arg ops; ties keep the earlier index). Returns 0 for an op it
 * does not handle. */
#define OR_DEFINE_MERGE(S, ACC, ADD, MUL, ISNAN)                                        \
  static int merge_common_##S(uint32_t op, ACC *a, const ACC *b) {                      \
    switch (op) {                                                                       \
    case OR_REDUCE_SUM:                                                                 \
    case OR_REDUCE_MEAN:                                                                \
    case OR_REDUCE_NANSUM:                                                              \
      a->v = ADD(a->v, b->v);                                                           \
      return 1;                                                                         \
    case OR_REDUCE_PROD:                                                                \
      a->v = MUL(a->v, b->v);                                                           \
      return 1;                                                                         \
    case OR_REDUCE_MAX:                                                                 \
      a->v = (b->v > a->v || ISNAN(b->v)) && !ISNAN(a->v) ? b->v : a->v;                \
      return 1;                                                                         \
    case OR_REDUCE_MIN:                                                                 \
      a->v = (b->v < a->v || ISNAN(b->v)) && !ISNAN(a->v) ? b->v : a->v;                \
      return 1;                                                                         \
    case OR_REDUCE_ARGMAX:                                                              \
    case OR_REDUCE_MAX_INDEX:                                                           \
      if (!ISNAN(a->v) && (b->v > a->v || ISNAN(b->v))) {                               \
        a->v = b->v;                                                                    \
        a->i = b->i;                                                                    \
      }                                                                                 \
      return 1;                                                                         \
    case OR_REDUCE_ARGMIN:                                                              \
    case OR_REDUCE_MIN_INDEX:                                                           \
      if (!ISNAN(a->v) && (b->v < a->v || ISNAN(b->v))) {                               \
        a->v = b->v;                                                                    \
        a->i = b->i;                                                                    \
      }                                                                                 \
      return 1;                                                                         \
    case OR_REDUCE_MINMAX:                                                              \
      a->v = (b->v < a->v || ISNAN(b->v)) && !ISNAN(a->v) ? b->v : a->v;                \
      a->w = (b->w > a->w || ISNAN(b->w)) && !ISNAN(a->w) ? b->w : a->w;                \
      return 1;                                                                         \
    case OR_REDUCE_ALL:                                                                 \
      a->v = b->v == 0 ? 0 : a->v;                                                      \
      return 1;                                                                         \
    case OR_REDUCE_ANY:                                                                 \
      a->v = b->v != 0 ? 1 : a->v;                                                      \
      return 1;                                                                         \
    default:                                                                            \
      return 0;                                                                         \
    }                                                                                   \
  }

OR_DEFINE_MERGE(F, acc_f, ADD_F, MUL_F, ISNAN_F)
OR_DEFINE_MERGE(I, acc_i, ADD_I, MUL_I, ISNAN_I)

/* The float-only merges: the p-norm's sum (or extreme) and var's moments. */
static void merge_F(const or_reduce *p, acc_f *a, const acc_f *b) {
  if (merge_common_F(p->op, a, b)) {
    return;
  }
  if (p->op == OR_REDUCE_NORM) {
    const double ord = p->args[0].f;
    if (ord == __builtin_inf()) {
      a->v = (b->v > a->v || ISNAN_F(b->v)) && !ISNAN_F(a->v) ? b->v : a->v;
    } else if (ord == -__builtin_inf()) {
      a->v = (b->v < a->v || ISNAN_F(b->v)) && !ISNAN_F(a->v) ? b->v : a->v;
    } else {
      a->v += b->v;
    }
    return;
  }
  if (p->op == OR_REDUCE_VAR) {
    if (b->n > 0) {
      var_merge(a, b->mean, b->w, b->n);
    }
    return;
  }
  TRAP(); /* scans and sorts are not segmented */
}

static void merge_I(const or_reduce *p, acc_i *a, const acc_i *b) {
  if (!merge_common_I(p->op, a, b)) {
    TRAP();
  }
}

/* Phase PARTIALS: this worker's segments of the outermost reduced dimension,
 * each folded into its partial. */
static void reduce_partials(const or_reduce *p, int32_t worker, int32_t workers) {
  const uint32_t od = p->nreduce - 1;
  const int64_t total = p->sizes[od], seg = p->segment;
  const int64_t nseg = (total + seg - 1) / seg;
  int64_t lo, hi;
  split_range(nseg, 1, worker, workers, &lo, &hi);
  char *partials = device_ptr(p->scratch);
  for (int64_t s = lo; s < hi; s++) {
    or_reduce q = *p;
    q.sizes[od] = total - s * seg < seg ? total - s * seg : seg;
    const char *in = device_ptr(p->data[OR_REDUCE_IN]) + s * seg * p->strides[OR_REDUCE_IN][od];
    char *slot = partials + s * OR_REDUCE_PARTIAL_BYTES;
    if (p->compute == OR_COMPUTE_F64) {
      acc_f a = fold_slice_F(&q, in);
      a.i += od == 0 ? s * seg : 0; /* arg ops reduce one dimension: positions along it */
      *(acc_f *)slot = a;
    } else {
      acc_i a = fold_slice_I(&q, in);
      a.i += od == 0 ? s * seg : 0;
      *(acc_i *)slot = a;
    }
  }
}

/* Phase MERGE: the partials merged in segment order, then the outputs. */
static void reduce_merge(const or_reduce *p, char *out0, char *out1, int64_t count) {
  const int64_t nseg = (p->sizes[p->nreduce - 1] + p->segment - 1) / p->segment;
  const char *partials = device_ptr(p->scratch);
  if (p->compute == OR_COMPUTE_F64) {
    acc_f a = *(const acc_f *)partials;
    for (int64_t s = 1; s < nseg; s++) {
      merge_F(p, &a, (const acc_f *)(partials + s * OR_REDUCE_PARTIAL_BYTES));
    }
    finish_F(p, &a, out0, out1, count);
  } else {
    acc_i a = *(const acc_i *)partials;
    for (int64_t s = 1; s < nseg; s++) {
      merge_I(p, &a, (const acc_i *)(partials + s * OR_REDUCE_PARTIAL_BYTES));
    }
    finish_I(p, &a, out0, out1, count);
  }
}

/* The folds that run down columns: one accumulator per element, combined in
 * reduction order, so each output is the plain sequential fold. */
static int column_op(uint32_t op) {
  switch (op) {
  case OR_REDUCE_SUM:
  case OR_REDUCE_MEAN:
  case OR_REDUCE_NANSUM:
  case OR_REDUCE_PROD:
  case OR_REDUCE_MAX:
  case OR_REDUCE_MIN:
  case OR_REDUCE_ALL:
  case OR_REDUCE_ANY:
    return 1;
  default:
    return 0;
  }
}

static void combine_column(uint32_t op, double *acc, const double *x, int64_t m) {
  switch (op) {
  case OR_REDUCE_SUM:
  case OR_REDUCE_MEAN:
    for (int64_t j = 0; j < m; j++) acc[j] += x[j];
    return;
  case OR_REDUCE_NANSUM:
    for (int64_t j = 0; j < m; j++) acc[j] += x[j] != x[j] ? 0.0 : x[j];
    return;
  case OR_REDUCE_PROD:
    for (int64_t j = 0; j < m; j++) acc[j] *= x[j];
    return;
  case OR_REDUCE_MAX:
    for (int64_t j = 0; j < m; j++) acc[j] = (x[j] > acc[j] || x[j] != x[j]) ? x[j] : acc[j];
    return;
  case OR_REDUCE_MIN:
    for (int64_t j = 0; j < m; j++) acc[j] = (x[j] < acc[j] || x[j] != x[j]) ? x[j] : acc[j];
    return;
  case OR_REDUCE_ALL:
    for (int64_t j = 0; j < m; j++) acc[j] = x[j] == 0.0 ? 0.0 : acc[j];
    return;
  default: /* OR_REDUCE_ANY */
    for (int64_t j = 0; j < m; j++) acc[j] = x[j] != 0.0 ? 1.0 : acc[j];
    return;
  }
}

/* Outputs reduced together down columns: long contiguous row segments
 * stream well, and the accumulators (16 KiB) stay in the L1 cache. */
#define OR_COLUMN_TILE 2048

/* acc[j] += rows[0][j], then rows[1][j], ... (n rows, 1 to 4), in double.
 * Four rows (the common case) take a loop of their own, the rows unrolled:
 * with n unknown, the loop over rows kept its two accumulators on the stack
 * (a loop header's epoch check). */
ALWAYS_INLINE void add_rows_n_f32(double *acc, const float *const *rows, int n, int64_t m) {
  int64_t j = 0;
  for (; j + 4 <= m; j += 4) {
    v128_t lo = wasm_v128_load(acc + j), hi = wasm_v128_load(acc + j + 2);
    for (int r = 0; r < n; r++) {
      const v128_t u = wasm_v128_load(rows[r] + j);
      lo = wasm_f64x2_add(lo, wasm_f64x2_promote_low_f32x4(u));
      hi = wasm_f64x2_add(hi, wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(u, u, 2, 3, 0, 1)));
    }
    wasm_v128_store(acc + j, lo);
    wasm_v128_store(acc + j + 2, hi);
  }
  for (; j < m; j++) {
    for (int r = 0; r < n; r++) acc[j] += (double)rows[r][j];
  }
}

NOINLINE static void add_rows_f32(double *acc, const float *const *rows, int n, int64_t m) {
  if (n == 4) {
    add_rows_n_f32(acc, rows, 4, m);
  } else {
    add_rows_n_f32(acc, rows, n, m);
  }
}

/* acc[j] = the NaN-propagating max (min) of acc[j] and rows[0][j], then
 * rows[1][j], ... (n rows, 1 to 4), in float32: combine_column's selection
 * (each a float32 value, so the same in either type), four lanes at a time. */
ALWAYS_INLINE void extreme_rows_n_f32(float *acc, const float *const *rows, int n, int64_t m, int max) {
  int64_t j = 0;
  for (; j + 4 <= m; j += 4) {
    v128_t a = wasm_v128_load(acc + j);
    for (int r = 0; r < n; r++) {
      const v128_t u = wasm_v128_load(rows[r] + j);
      const v128_t better = max ? wasm_f32x4_gt(u, a) : wasm_f32x4_lt(u, a);
      a = wasm_v128_bitselect(u, a, wasm_v128_or(better, wasm_f32x4_ne(u, u)));
    }
    wasm_v128_store(acc + j, a);
  }
  for (; j < m; j++) {
    for (int r = 0; r < n; r++) {
      const float x = rows[r][j];
      acc[j] = ((max ? x > acc[j] : x < acc[j]) || x != x) ? x : acc[j];
    }
  }
}

NOINLINE static void extreme_rows_f32(float *acc, const float *const *rows, int n, int64_t m, int max) {
  if (n == 4) {
    extreme_rows_n_f32(acc, rows, 4, m, max);
  } else {
    extreme_rows_n_f32(acc, rows, n, m, max);
  }
}

/* Moves `row` to the next row of the reduced dimensions [0, nreduce)
 * (`counter` their odometer); returns nreduce after the last row. */
ALWAYS_INLINE uint32_t next_reduced_row(const or_reduce *p, const char **row, int64_t *counter) {
  uint32_t d = 0;
  for (; d < p->nreduce; d++) {
    *row += p->strides[OR_REDUCE_IN][d];
    if (++counter[d] < p->sizes[d]) {
      break;
    }
    *row -= p->strides[OR_REDUCE_IN][d] * p->sizes[d];
    counter[d] = 0;
  }
  return d;
}

/* Integer sums down columns (a mask's count per column, `mask.sum(0)`):
 * int64 accumulators that wrap, as reduce_one_I's, in any order the same. */
NOINLINE static void reduce_columns_i64(const or_reduce *p, const char *in, char *out0, uint32_t o, int64_t m) {
  int64_t acc[OR_COLUMN_TILE], buf[OR_COLUMN_TILE];
  for (int64_t j = 0; j < m; j++) acc[j] = 0;
  const uint32_t nr = p->nreduce;
  const int64_t es = p->strides[OR_REDUCE_IN][o];
  int64_t counter[OR_MAX_DIMS] = {0};
  const char *row = in;
  for (;;) {
    load_i64(buf, row, es, p->dtypes[OR_REDUCE_IN], m);
    _Pragma("clang loop interleave_count(4)") for (int64_t j = 0; j < m; j++) acc[j] = ADD_I(acc[j], buf[j]);
    const uint32_t d = next_reduced_row(p, &row, counter);
    if (d >= nr) {
      break;
    }
  }
  store_row_I64(out0, p->strides[OR_REDUCE_OUT0][o], p->dtypes[OR_REDUCE_OUT0], acc, m);
}

/* Outputs [0, m) along dimension `o` (the first output dimension, contiguous
 * in the input), all reduced together. */
static void reduce_columns(const or_reduce *p, const char *in, char *out0, uint32_t o, int64_t m, int64_t count) {
  if (p->compute == OR_COMPUTE_I64) {
    reduce_columns_i64(p, in, out0, o, m);
    return;
  }
  double acc[OR_COLUMN_TILE];
  union {
    double buf[OR_COLUMN_TILE];
    float extremes[OR_COLUMN_TILE];
  } scratch;
  double *const buf = scratch.buf;
  const acc_f a0 = init_F(p);
  for (int64_t j = 0; j < m; j++) {
    acc[j] = a0.v;
  }
  const uint32_t nr = p->nreduce;
  const uint32_t dt = p->dtypes[OR_REDUCE_IN];
  const int64_t es = p->strides[OR_REDUCE_IN][o];
  int64_t counter[OR_MAX_DIMS] = {0};
  const char *row = in;
  const int f32_sum = dt == OR_F32 && es == 4 && (p->op == OR_REDUCE_SUM || p->op == OR_REDUCE_MEAN);
  const int f32_extreme = dt == OR_F32 && es == 4 && (p->op == OR_REDUCE_MAX || p->op == OR_REDUCE_MIN);
  /* float32 sums take rows four at a time: each accumulator is loaded and
   * stored once per four additions (made in the same order as one row at a
   * time, so the result is the same); float32 maxima and minima too, kept
   * in float32 (`extremes`, sharing `buf`'s space: only the other folds use it) */
  float *const extremes = scratch.extremes;
  if (f32_extreme) {
    for (int64_t j = 0; j < m; j++) extremes[j] = (float)a0.v;
  }
  const float *rows[4];
  int pending = 0;
  for (;;) {
    if (f32_sum || f32_extreme) {
      rows[pending++] = (const float *)row;
    } else {
      load_f64(buf, row, es, dt, m);
      combine_column(p->op, acc, buf, m);
    }
    const uint32_t d = next_reduced_row(p, &row, counter);
    if (pending == 4 || (pending > 0 && d >= nr)) {
      if (f32_sum) {
        add_rows_f32(acc, rows, pending, m);
      } else {
        extreme_rows_f32(extremes, rows, pending, m, p->op == OR_REDUCE_MAX);
      }
      pending = 0;
    }
    if (d >= nr) {
      break;
    }
  }
  if (p->op == OR_REDUCE_MEAN) {
    for (int64_t j = 0; j < m; j++) acc[j] /= (double)count;
  }
  if (f32_extreme) {
    for (int64_t j = 0; j < m; j++) acc[j] = (double)extremes[j];
  }
  store_row_F64(out0, p->strides[OR_REDUCE_OUT0][o], p->dtypes[OR_REDUCE_OUT0], acc, m);
}

/* Whether to run down columns: a simple float fold whose reduced rows are
 * strided while the first output dimension is contiguous in the input. */
static int use_columns(const or_reduce *p) {
  const int ints = p->compute == OR_COMPUTE_I64 && p->op == OR_REDUCE_SUM; /* reduce_columns_i64 */
  if ((p->compute != OR_COMPUTE_F64 && !ints) || !column_op(p->op) || p->nreduce == 0 || p->ndim <= p->nreduce) {
    return 0;
  }
  const int64_t es = (int64_t)dtype_size(p->dtypes[OR_REDUCE_IN]);
  const int64_t s0 = p->strides[OR_REDUCE_IN][0];
  /* (a broadcast input, stride 0 along the reduction, reads one row again and again) */
  return p->strides[OR_REDUCE_IN][p->nreduce] == es && p->sizes[p->nreduce] >= 4 &&
         ((s0 < 0 ? -s0 : s0) > es || s0 == 0);
}

/*
 * Contiguous float32 rows (`x.sum(-1)` of a (N, 16) tensor): reduce_one_F's
 * calls and chunk set-up cost about 30 ns a row, more than summing 16
 * values. Rows of sums, means, maxima and minima of float32 into float32 go
 * through a loop of their own, short ones four rows at a time, with the
 * arithmetic fold_contig_row applies, so the bits are the same:
 *   - a sum below 64 elements is sequential in double from +0.0 (the tail
 *     of sum_f32_contig), longer ones are sum_f32_contig's;
 *   - an extreme is a value whatever the order it is found in, unless it
 *     is a zero (which one?) or a NaN (which?): a short row's is found in
 *     four lanes (row_max_f32), a long one's by max_f32_contig, and rows
 *     whose extreme is zero or NaN are folded again by reduce_one_F, which
 *     decides.
 */
#define OR_SHORT_SUM 64

static int rows_f32(const or_reduce *p) {
  const uint32_t op = p->op;
  return p->compute == OR_COMPUTE_F64 && p->nreduce == 1 && p->ndim > 1 && p->noutputs == 1 &&
         (op == OR_REDUCE_SUM || op == OR_REDUCE_MEAN || op == OR_REDUCE_MAX || op == OR_REDUCE_MIN) &&
         p->dtypes[OR_REDUCE_IN] == OR_F32 && p->dtypes[OR_REDUCE_OUT0] == OR_F32 && p->strides[OR_REDUCE_IN][0] == 4;
}

/* A row's extreme as a value, in any order: four lanes, then the tail; a
 * NaN anywhere gives NaN. */
#define OR_DEFINE_ROW_EXTREME(NAME, PICK, START, BETTER)                  \
  ALWAYS_INLINE float NAME(const float *x, int64_t n) {                   \
    v128_t m = wasm_f32x4_splat(START), nan = wasm_i32x4_splat(0);        \
    int64_t j = 0;                                                        \
    for (; j + 4 <= n; j += 4) {                                          \
      const v128_t v = wasm_v128_load(x + j);                             \
      m = PICK(m, v);                                                     \
      nan = wasm_v128_or(nan, wasm_f32x4_ne(v, v));                       \
    }                                                                     \
    m = PICK(m, wasm_i32x4_shuffle(m, m, 2, 3, 0, 1));                    \
    m = PICK(m, wasm_i32x4_shuffle(m, m, 1, 0, 3, 2));                    \
    float r = wasm_f32x4_extract_lane(m, 0);                              \
    int any_nan = wasm_v128_any_true(nan);                                \
    for (; j < n; j++) {                                                  \
      r = BETTER(x[j], r) ? x[j] : r;                                     \
      any_nan |= x[j] != x[j];                                            \
    }                                                                     \
    return any_nan ? __builtin_nanf("") : r;                              \
  }
OR_DEFINE_ROW_EXTREME(row_max_f32, wasm_f32x4_pmax, -__builtin_inff(), GREATER)
OR_DEFINE_ROW_EXTREME(row_min_f32, wasm_f32x4_pmin, __builtin_inff(), LESS)

/* Four rows' element j as one vector. */
ALWAYS_INLINE v128_t rows_at(const float *x, int64_t s, int64_t j) {
  return wasm_f32x4_make(x[j], x[s + j], x[2 * s + j], x[3 * s + j]);
}

/* The rows along dimension 1 (p->sizes[1] of them, at `in` and `out`). */
static void reduce_rows_f32(const or_reduce *p, const char *in, char *out) {
  const int64_t n = p->sizes[0], rows = p->sizes[1];
  const int64_t si = p->strides[OR_REDUCE_IN][1] / 4, so = p->strides[OR_REDUCE_OUT0][1];
  const uint32_t op = p->op;
  const float *x = (const float *)in;
  int64_t r = 0;
  if (op == OR_REDUCE_SUM || op == OR_REDUCE_MEAN) {
    const v128_t count = wasm_f64x2_splat((double)n);
    for (; n < OR_SHORT_SUM && r + 4 <= rows; r += 4) {
      const float *q = x + r * si;
      v128_t lo = wasm_f64x2_splat(0.0), hi = lo;
      for (int64_t j = 0; j < n; j++) {
        const v128_t v = rows_at(q, si, j);
        lo = wasm_f64x2_add(lo, wasm_f64x2_promote_low_f32x4(v));
        hi = wasm_f64x2_add(hi, wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 2, 3)));
      }
      if (op == OR_REDUCE_MEAN) {
        lo = wasm_f64x2_div(lo, count);
        hi = wasm_f64x2_div(hi, count);
      }
      char *o = out + r * so;
      *(float *)o = (float)wasm_f64x2_extract_lane(lo, 0);
      *(float *)(o + so) = (float)wasm_f64x2_extract_lane(lo, 1);
      *(float *)(o + 2 * so) = (float)wasm_f64x2_extract_lane(hi, 0);
      *(float *)(o + 3 * so) = (float)wasm_f64x2_extract_lane(hi, 1);
    }
    for (; r < rows; r++) {
      double t = 0.0;
      if (n < OR_SHORT_SUM) {
        for (int64_t j = 0; j < n; j++) t += (double)x[r * si + j];
      } else {
        t += sum_f32_contig(x + r * si, n);
      }
      *(float *)(out + r * so) = (float)(op == OR_REDUCE_MEAN ? t / (double)n : t);
    }
    return;
  }
  const int max = op == OR_REDUCE_MAX;
  for (; r < rows; r++) {
    const float *q = x + r * si;
    const float e = n >= 512 ? (max ? max_f32_contig(q, n) : min_f32_contig(q, n))
                             : (max ? row_max_f32(q, n) : row_min_f32(q, n));
    char *o = out + r * so;
    if (e == 0 || e != e) {
      reduce_one_F(p, (const char *)q, o, o, n); /* which zero, which NaN: the element-by-element fold */
    } else {
      *(float *)o = e;
    }
  }
}

/*
 * Cumulative sums and products of float32 into float32 (scan_F: a running
 * value in double from +0.0 or 1.0, each output that value rounded) over
 * many lines: one line at a time, each step waits on the last (about 4
 * cycles an element), and lines down a strided dimension read one element
 * a cache line. Lines side by side (dimension 1 contiguous, as for
 * x.cumsum(0)) run across, a row of up to OR_SCAN_COLS lines at a time;
 * contiguous lines (x.cumsum(-1)) run four at a time, one element of each a
 * step. Each line's running value takes the same steps in the same order.
 */
#define OR_SCAN_COLS 64

/* 1: contiguous lines, 2: lines side by side, 0: neither. */
static int scan_lines_f32(const or_reduce *p) {
  if (p->compute != OR_COMPUTE_F64 || (p->op != OR_REDUCE_CUMSUM && p->op != OR_REDUCE_CUMPROD) || p->nreduce != 1 ||
      p->ndim < 2 || p->noutputs != 1 || p->dtypes[OR_REDUCE_IN] != OR_F32 || p->dtypes[OR_REDUCE_OUT0] != OR_F32) {
    return 0;
  }
  if (p->strides[OR_REDUCE_IN][0] == 4 && p->strides[OR_REDUCE_OUT0][0] == 4) {
    return 1;
  }
  return p->strides[OR_REDUCE_IN][1] == 4 && p->strides[OR_REDUCE_OUT0][1] == 4 ? 2 : 0;
}

ALWAYS_INLINE v128_t scan_step(v128_t v, v128_t x, int prod) {
  return prod ? wasm_f64x2_mul(v, x) : wasm_f64x2_add(v, x);
}

/* Four running values (two vectors of double) rounded to float32. */
ALWAYS_INLINE v128_t scan_round(v128_t lo, v128_t hi) {
  return wasm_i32x4_shuffle(wasm_f32x4_demote_f64x2_zero(lo), wasm_f32x4_demote_f64x2_zero(hi), 0, 1, 4, 5);
}

/* The lines along dimension 1 (p->sizes[1] of them), at `in` and `out`. */
static void scan_f32(const or_reduce *p, const char *in, char *out, int layout) {
  const int64_t n = p->sizes[0], lines = p->sizes[1];
  const int prod = p->op == OR_REDUCE_CUMPROD;
  const v128_t start = wasm_f64x2_splat(prod ? 1.0 : 0.0);
  if (layout == 1) {
    const int64_t si = p->strides[OR_REDUCE_IN][1] / 4, so = p->strides[OR_REDUCE_OUT0][1] / 4;
    const float *x = (const float *)in;
    float *y = (float *)out;
    int64_t r = 0;
    for (; r + 4 <= lines; r += 4) {
      const float *q = x + r * si;
      float *o = y + r * so;
      v128_t lo = start, hi = start;
      for (int64_t j = 0; j < n; j++) {
        const v128_t v = rows_at(q, si, j);
        lo = scan_step(lo, wasm_f64x2_promote_low_f32x4(v), prod);
        hi = scan_step(hi, wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 2, 3)), prod);
        const v128_t f = scan_round(lo, hi);
        o[j] = wasm_f32x4_extract_lane(f, 0);
        o[so + j] = wasm_f32x4_extract_lane(f, 1);
        o[2 * so + j] = wasm_f32x4_extract_lane(f, 2);
        o[3 * so + j] = wasm_f32x4_extract_lane(f, 3);
      }
    }
    for (; r < lines; r++) {
      double v = prod ? 1.0 : 0.0;
      for (int64_t j = 0; j < n; j++) {
        v = prod ? v * (double)x[r * si + j] : v + (double)x[r * si + j];
        y[r * so + j] = (float)v;
      }
    }
    return;
  }
  const int64_t si = p->strides[OR_REDUCE_IN][0], so = p->strides[OR_REDUCE_OUT0][0];
  for (int64_t c = 0; c < lines; c += OR_SCAN_COLS) {
    const int64_t w = lines - c < OR_SCAN_COLS ? lines - c : OR_SCAN_COLS, nv = (w + 3) / 4;
    v128_t acc[OR_SCAN_COLS / 2];
    for (int64_t q = 0; q < 2 * nv; q++) acc[q] = start;
    for (int64_t i = 0; i < n; i++) {
      const float *row = (const float *)(in + i * si) + c;
      float *dst = (float *)(out + i * so) + c;
      for (int64_t q = 0; q < nv; q++) {
        const v128_t v = cols_load(row, q, w);
        acc[2 * q] = scan_step(acc[2 * q], wasm_f64x2_promote_low_f32x4(v), prod);
        acc[2 * q + 1] = scan_step(acc[2 * q + 1], wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 2, 3)), prod);
        cols_store(dst, q, w, scan_round(acc[2 * q], acc[2 * q + 1]));
      }
    }
  }
}

/*
 * argmax, argmin and max/min with indices of float32 along a dimension
 * whose lines lie side by side (x.argmax(0) of a row-major matrix): the
 * fold's rule (a better value or a NaN replaces the current one, unless
 * that is already a NaN; ties keep the first index) applied a row of
 * vectors at a time, up to OR_ARG_COLS lines at once, instead of one
 * strided element at a time. The same rule in the same order: the same
 * results.
 */
#define OR_ARG_COLS 64

static int arg_columns_f32(const or_reduce *p) {
  const uint32_t op = p->op;
  return p->compute == OR_COMPUTE_F64 && p->nreduce == 1 && p->ndim > 1 &&
         (op == OR_REDUCE_ARGMAX || op == OR_REDUCE_ARGMIN || op == OR_REDUCE_MAX_INDEX || op == OR_REDUCE_MIN_INDEX) &&
         p->dtypes[OR_REDUCE_IN] == OR_F32 && p->strides[OR_REDUCE_IN][1] == 4 && p->strides[OR_REDUCE_IN][0] != 4 &&
         p->sizes[0] <= INT32_MAX;
}

static void arg_columns(const or_reduce *p, const char *in, char *out0, char *out1) {
  const int64_t n = p->sizes[0], lines = p->sizes[1], si = p->strides[OR_REDUCE_IN][0];
  const int max = p->op == OR_REDUCE_ARGMAX || p->op == OR_REDUCE_MAX_INDEX;
  const int values = p->op == OR_REDUCE_MAX_INDEX || p->op == OR_REDUCE_MIN_INDEX;
  const uint32_t *dt = p->dtypes;
  for (int64_t c = 0; c < lines; c += OR_ARG_COLS) {
    const int64_t w = lines - c < OR_ARG_COLS ? lines - c : OR_ARG_COLS, nv = (w + 3) / 4;
    v128_t best[OR_ARG_COLS / 4], at[OR_ARG_COLS / 4];
    for (int64_t q = 0; q < nv; q++) {
      best[q] = wasm_f32x4_splat(max ? -__builtin_inff() : __builtin_inff());
      at[q] = wasm_i32x4_splat(0);
    }
    for (int64_t i = 0; i < n; i++) {
      const float *row = (const float *)(in + i * si) + c;
      const v128_t here = wasm_i32x4_splat((int32_t)i);
      for (int64_t q = 0; q < nv; q++) {
        const v128_t x = cols_load(row, q, w);
        const v128_t better = max ? wasm_f32x4_gt(x, best[q]) : wasm_f32x4_lt(x, best[q]);
        const v128_t take = wasm_v128_and(wasm_f32x4_eq(best[q], best[q]), wasm_v128_or(better, wasm_f32x4_ne(x, x)));
        best[q] = wasm_v128_bitselect(x, best[q], take);
        at[q] = wasm_v128_bitselect(here, at[q], take);
      }
    }
    for (int64_t k = 0; k < w; k++) {
      const int64_t col = c + k;
      const double v = (double)((const float *)best)[k];
      const int64_t i = ((const int32_t *)at)[k];
      if (values) {
        store_F64(out0 + col * p->strides[OR_REDUCE_OUT0][1], dt[OR_REDUCE_OUT0], v);
        store_I64(out1 + col * p->strides[OR_REDUCE_OUT1][1], dt[OR_REDUCE_OUT1], i);
      } else {
        store_I64(out0 + col * p->strides[OR_REDUCE_OUT0][1], dt[OR_REDUCE_OUT0], i);
      }
    }
  }
}

/*
 * var, std and var_mean of float32 along a dimension whose lines lie side
 * by side (x.var(0), BatchNorm1d's statistics): fold_F's chunks (OR_CHUNK
 * elements from the line's start; the chunk's mean from sum_F's eight
 * lanes, its squared deviations in order, merged by var_merge's formulas)
 * computed for up to OR_VAR_COLS lines at once, two per vector of double,
 * reading each chunk's rows twice from the cache instead of one strided
 * element at a time. The same arithmetic in the same order per line.
 */
#define OR_VAR_COLS 32

static int var_columns_f32(const or_reduce *p) {
  return p->compute == OR_COMPUTE_F64 && p->op == OR_REDUCE_VAR && p->nreduce == 1 && p->ndim > 1 &&
         p->dtypes[OR_REDUCE_IN] == OR_F32 && p->strides[OR_REDUCE_IN][1] == 4 && p->strides[OR_REDUCE_IN][0] != 4;
}

/* Columns 2q, 2q + 1 of a row of w float32 values, as doubles. */
ALWAYS_INLINE v128_t var_pair(const char *row, int64_t q, int64_t w) {
  const float *v = (const float *)row + 2 * q;
  return 2 * q + 2 <= w ? wasm_f64x2_promote_low_f32x4(wasm_v128_load64_zero(v)) : wasm_f64x2_make((double)v[0], 0.0);
}

static void var_columns(const or_reduce *p, const char *in, char *out0, char *out1) {
  const int64_t n = p->sizes[0], lines = p->sizes[1], si = p->strides[OR_REDUCE_IN][0];
  for (int64_t c0 = 0; c0 < lines; c0 += OR_VAR_COLS) {
    const int64_t w = lines - c0 < OR_VAR_COLS ? lines - c0 : OR_VAR_COLS, np = (w + 1) / 2;
    const char *base = in + c0 * 4;
    v128_t mean[OR_VAR_COLS / 2], m2sum[OR_VAR_COLS / 2];
    int64_t seen = 0;
    for (int64_t k0 = 0; k0 < n; k0 += OR_CHUNK) {
      const int64_t m = n - k0 < OR_CHUNK ? n - k0 : OR_CHUNK;
      const char *chunk = base + k0 * si;
      v128_t lane[8][OR_VAR_COLS / 2], total[OR_VAR_COLS / 2];
      for (int l = 0; l < 8; l++) {
        for (int64_t q = 0; q < np; q++) lane[l][q] = wasm_f64x2_splat(0.0);
      }
      int64_t j = 0;
      for (; j + 16 <= m; j += 16) { /* sum_F: lane l takes x[j + l] + x[j + 8 + l] */
        for (int l = 0; l < 8; l++) {
          const char *ra = chunk + (j + l) * si, *rb = chunk + (j + 8 + l) * si;
          for (int64_t q = 0; q < np; q++) {
            lane[l][q] = wasm_f64x2_add(lane[l][q], wasm_f64x2_add(var_pair(ra, q, w), var_pair(rb, q, w)));
          }
        }
      }
      for (int64_t q = 0; q < np; q++) {
        const v128_t t0 = wasm_f64x2_add(wasm_f64x2_add(lane[0][q], lane[2][q]), wasm_f64x2_add(lane[4][q], lane[6][q]));
        const v128_t t1 = wasm_f64x2_add(wasm_f64x2_add(lane[1][q], lane[3][q]), wasm_f64x2_add(lane[5][q], lane[7][q]));
        total[q] = wasm_f64x2_add(t0, t1);
      }
      for (; j < m; j++) {
        for (int64_t q = 0; q < np; q++) total[q] = wasm_f64x2_add(total[q], var_pair(chunk + j * si, q, w));
      }
      const v128_t count = wasm_f64x2_splat((double)m);
      v128_t mc[OR_VAR_COLS / 2], m2[OR_VAR_COLS / 2];
      for (int64_t q = 0; q < np; q++) {
        mc[q] = wasm_f64x2_div(total[q], count);
        m2[q] = wasm_f64x2_splat(0.0);
      }
      for (int64_t r = 0; r < m; r++) {
        for (int64_t q = 0; q < np; q++) {
          const v128_t d = wasm_f64x2_sub(var_pair(chunk + r * si, q, w), mc[q]);
          m2[q] = wasm_f64x2_add(m2[q], wasm_f64x2_mul(d, d));
        }
      }
      if (seen == 0) { /* var_merge */
        for (int64_t q = 0; q < np; q++) {
          mean[q] = mc[q];
          m2sum[q] = m2[q];
        }
      } else {
        const double before = (double)seen, all = before + (double)m;
        const v128_t share = wasm_f64x2_splat((double)m / all), weight = wasm_f64x2_splat(before * (double)m / all);
        for (int64_t q = 0; q < np; q++) {
          const v128_t delta = wasm_f64x2_sub(mc[q], mean[q]);
          mean[q] = wasm_f64x2_add(mean[q], wasm_f64x2_mul(delta, share));
          m2sum[q] = wasm_f64x2_add(m2sum[q], wasm_f64x2_add(m2[q], wasm_f64x2_mul(wasm_f64x2_mul(delta, delta), weight)));
        }
      }
      seen += m;
    }
    for (int64_t c = 0; c < w; c++) { /* finish_F's VAR */
      const int64_t col = c0 + c;
      const double dof = (double)n - p->args[0].f;
      double v = ((const double *)m2sum)[c] / (dof > 0.0 ? dof : 0.0);
      if (p->args[1].f != 0.0) {
        v = __builtin_sqrt(v);
      }
      store_F64(out0 + col * p->strides[OR_REDUCE_OUT0][1], p->dtypes[OR_REDUCE_OUT0], v);
      if (p->noutputs > 1) {
        store_F64(out1 + col * p->strides[OR_REDUCE_OUT1][1], p->dtypes[OR_REDUCE_OUT1], ((const double *)mean)[c]);
      }
    }
  }
}

/* ---- sort ---- */

/* An element top k keeps: its value (as a double, or an int64 through the
 * same bits) and its position. */
typedef struct sort_item {
  union {
    double f;
    int64_t i;
  } key;
  int64_t index;
} sort_item;

/* Whether x goes before y: by key (NaN above every number), ties by
 * position, so the sort is stable. */
static int sort_before(const sort_item *x, const sort_item *y, int is_float, int descending) {
  if (is_float) {
    const double a = x->key.f, b = y->key.f;
    const int an = a != a, bn = b != b;
    if (an != bn) {
      return descending ? an : bn; /* NaN is the largest */
    }
    if (!an && a != b) {
      return descending ? a > b : a < b;
    }
  } else if (x->key.i != y->key.i) {
    return descending ? x->key.i > y->key.i : x->key.i < y->key.i;
  }
  return x->index < y->index;
}

/*
 * SORT: a stable LSD radix sort of each line. An element's key is a uint64
 * that orders as SORT orders the values: a float's bits with the sign bit
 * flipped (all bits of a negative one), -0 as +0 and every NaN above
 * everything; an integer with its sign bit flipped; the complement of that
 * for a descending sort. Equal keys keep their order, so equal values stay
 * in order of position. One pass of 8-bit digits per byte of the key, skipped
 * when every key has the same digit there (the high bytes of small
 * integers, the low byte of a float16); the histograms of all bytes come
 * from one read of the keys. Short lines take an insertion sort.
 */
#define OR_SORT_SHORT 32

ALWAYS_INLINE uint64_t sort_key_f32(float v) {
  const uint32_t u = m_f32_bits(v);
  const uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return v != v ? 0xffffffffu : v == 0.0f ? 0x80000000u : k;
}

ALWAYS_INLINE uint64_t sort_key_f64(double v) {
  const uint64_t u = m_f64_bits(v);
  const uint64_t sign = (uint64_t)1 << 63;
  const uint64_t k = (u & sign) ? ~u : (u | sign);
  return v != v ? ~(uint64_t)0 : v == 0.0 ? sign : k;
}

/* The keys of a line (and how many low bytes they span) into `key`. */
static uint32_t sort_keys(uint64_t *key, const char *in, int64_t stride, uint32_t dt, int64_t n, int descending) {
  const uint64_t flip = descending ? ~(uint64_t)0 : 0;
  switch (dt) {
  case OR_F64:
    for (int64_t j = 0; j < n; j++) key[j] = sort_key_f64(*(const double *)(in + j * stride)) ^ flip;
    return 8;
  case OR_F32:
    for (int64_t j = 0; j < n; j++) key[j] = (sort_key_f32(*(const float *)(in + j * stride)) ^ flip) & 0xffffffffu;
    return 4;
  case OR_F16:
  case OR_BF16:
    for (int64_t j = 0; j < n; j++) key[j] = (sort_key_f32(load_F32(in + j * stride, dt)) ^ flip) & 0xffffffffu;
    return 4;
  default: {
    const uint64_t sign = (uint64_t)1 << 63;
    for (int64_t j = 0; j < n; j++) key[j] = ((uint64_t)load_I64(in + j * stride, dt) ^ sign) ^ flip;
    return 8;
  }
  }
}

/* A digit's histogram to where its elements start (an exclusive prefix sum). */
ALWAYS_INLINE void counts_to_offsets(int64_t *c) {
  int64_t at = 0;
  for (int d = 0; d < 256; d++) {
    const int64_t t = c[d];
    c[d] = at;
    at += t;
  }
}

/* Keys of 4 bytes sort as one uint64 per element, the key above the
 * position (n < 2^32): the items at a (keys on entry), b room; returns where
 * the sorted items are. */
static const uint64_t *radix_sort32(uint64_t *a, uint64_t *b, int64_t n, int64_t (*count)[256]) {
  for (int64_t j = 0; j < n; j++) a[j] = (a[j] << 32) | (uint64_t)j;
  if (n <= OR_SORT_SHORT) {
    for (int64_t j = 1; j < n; j++) { /* the positions break no ties: they are in order */
      const uint64_t x = a[j];
      int64_t i = j;
      for (; i > 0 && a[i - 1] > x; i--) a[i] = a[i - 1];
      a[i] = x;
    }
    return a;
  }
  for (int b8 = 0; b8 < 4; b8++) {
    for (int d = 0; d < 256; d++) count[b8][d] = 0;
  }
  for (int64_t j = 0; j < n; j++) {
    const uint64_t k = a[j] >> 32;
    count[0][k & 0xff]++;
    count[1][(k >> 8) & 0xff]++;
    count[2][(k >> 16) & 0xff]++;
    count[3][k >> 24]++;
  }
  for (int b8 = 0; b8 < 4; b8++) {
    int64_t *c = count[b8];
    const int shift = 32 + 8 * b8;
    if (c[(a[0] >> shift) & 0xff] == n) {
      continue;
    }
    counts_to_offsets(c);
    for (int64_t j = 0; j < n; j++) {
      const uint64_t x = a[j];
      b[c[(x >> shift) & 0xff]++] = x;
    }
    uint64_t *t = a;
    a = b;
    b = t;
  }
  return a;
}

/* Sorts the n keys at ka with their positions pa (0..n-1 on entry), using
 * kb/pb as room; returns where the sorted positions are. */
static const int64_t *radix_sort(uint64_t *ka, int64_t *pa, uint64_t *kb, int64_t *pb, int64_t n, uint32_t bytes,
                                 int64_t (*count)[256]) {
  if (n <= OR_SORT_SHORT) {
    for (int64_t j = 1; j < n; j++) {
      const uint64_t k = ka[j];
      const int64_t p = pa[j];
      int64_t i = j;
      for (; i > 0 && ka[i - 1] > k; i--) {
        ka[i] = ka[i - 1];
        pa[i] = pa[i - 1];
      }
      ka[i] = k;
      pa[i] = p;
    }
    return pa;
  }
  for (uint32_t b = 0; b < bytes; b++) {
    for (int d = 0; d < 256; d++) count[b][d] = 0;
  }
  for (int64_t j = 0; j < n; j++) {
    const uint64_t k = ka[j];
    for (uint32_t b = 0; b < bytes; b++) count[b][(k >> (8 * b)) & 0xff]++;
  }
  for (uint32_t b = 0; b < bytes; b++) {
    int64_t *c = count[b];
    if (c[(ka[0] >> (8 * b)) & 0xff] == n) {
      continue; /* one digit for all: the order stays */
    }
    counts_to_offsets(c);
    for (int64_t j = 0; j < n; j++) {
      const uint64_t k = ka[j];
      const int64_t to = c[(k >> (8 * b)) & 0xff]++;
      kb[to] = k;
      pb[to] = pa[j];
    }
    uint64_t *kt = ka;
    ka = kb;
    kb = kt;
    int64_t *pt = pa;
    pa = pb;
    pb = pt;
  }
  return pa;
}

/* One line along dimension 0: keys, sort, then values and indices written
 * from a copy of the line (the values may be the input, sorted in place).
 * `room`: OR_SORT_ROOM(n) bytes. */
static void sort_line(const or_reduce *p, const char *in, char *values, char *indices, char *room) {
  const int64_t n = p->nreduce ? p->sizes[0] : 1;
  const int64_t s_in = p->nreduce ? p->strides[OR_REDUCE_IN][0] : 0;
  const int64_t s_val = p->nreduce ? p->strides[OR_REDUCE_OUT0][0] : 0;
  const int64_t s_idx = p->nreduce ? p->strides[OR_REDUCE_OUT1][0] : 0;
  const int is_float = p->compute == OR_COMPUTE_F64;
  const int descending = is_float ? p->args[0].f != 0.0 : p->args[0].i != 0;
  const uint32_t dt = p->dtypes[OR_REDUCE_IN], dv = p->dtypes[OR_REDUCE_OUT0];
  const uint32_t es = dtype_size(dt);
  int64_t(*count)[256] = (int64_t(*)[256])room; /* a histogram per byte of the key */
  uint64_t *ka = (uint64_t *)(room + 8 * 256 * 8), *kb = ka + n;
  int64_t *pa = (int64_t *)(kb + n), *pb = pa + n;
  char *copy = (char *)(pb + n); /* the line's elements, packed */
  const uint32_t bytes = sort_keys(ka, in, s_in, dt, n, descending);
  for (int64_t j = 0; j < n; j++) {
    move_element(copy + j * es, in + j * s_in, es);
  }
  const int packed = bytes == 4 && n < ((int64_t)1 << 32);
  const uint64_t *items = 0;
  const int64_t *order = 0;
  if (packed) {
    items = radix_sort32(ka, kb, n, count);
  } else {
    for (int64_t j = 0; j < n; j++) pa[j] = j;
    order = radix_sort(ka, pa, kb, pb, n, bytes, count);
  }
  for (int64_t j = 0; j < n; j++) {
    const int64_t from = packed ? (int64_t)(items[j] & 0xffffffffu) : order[j];
    const char *v = copy + from * es;
    if (dv == dt) {
      move_element(values + j * s_val, v, es);
    } else if (is_float) {
      store_F64(values + j * s_val, dv, load_F64(v, dt));
    } else {
      store_I64(values + j * s_val, dv, load_I64(v, dt));
    }
    *(int64_t *)(indices + j * s_idx) = from;
  }
}

/* ---- top k ----
 * The first k elements of SORT's order, by one pass over the line that keeps
 * them in a heap (the kept element that sorts last at its root), then a heap
 * sort of the k. SORT's order is total (ties go by position), so the result
 * is exactly the first k of the stable sort, for any k. */

/* Moves h[i] down to its place in the heap h[0..n). */
static void topk_sift(sort_item *h, int64_t n, int64_t i, int is_float, int descending) {
  const sort_item x = h[i];
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) {
      break;
    }
    if (c + 1 < n && sort_before(&h[c], &h[c + 1], is_float, descending)) {
      c++; /* the child that sorts later */
    }
    if (!sort_before(&x, &h[c], is_float, descending)) {
      break;
    }
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
}

ALWAYS_INLINE sort_item sort_item_at(const char *in, int64_t j, int64_t stride, uint32_t dt, int is_float) {
  sort_item x;
  if (is_float) {
    x.key.f = load_F64(in + j * stride, dt);
  } else {
    x.key.i = load_I64(in + j * stride, dt);
  }
  x.index = j;
  return x;
}

/* The first position from j on (later than every kept one) whose element
 * goes before `root`, or n: one comparison per element, as the key alone
 * decides (a tie goes after, being later). */
static int64_t topk_scan(const char *in, int64_t s, uint32_t dt, int64_t j, int64_t n, const sort_item *root,
                         int is_float, int descending) {
  if (!is_float) {
    const int64_t t = root->key.i;
    if (descending) {
      for (; j < n && load_I64(in + j * s, dt) <= t; j++) {
      }
    } else {
      for (; j < n && load_I64(in + j * s, dt) >= t; j++) {
      }
    }
    return j;
  }
  const double t = root->key.f;
  if (t != t) { /* NaN at the root: nothing goes before it largest first, any number smallest first */
    for (; !descending && j < n; j++) {
      const double v = load_F64(in + j * s, dt);
      if (v == v) {
        return j;
      }
    }
    return n;
  }
  if (dt == OR_F32) {
    for (; j < n; j++) {
      const double v = *(const float *)(in + j * s);
      if (descending ? !(v <= t) : v < t) { /* largest first, NaN goes before any number */
        return j;
      }
    }
    return n;
  }
  for (; j < n; j++) {
    const double v = load_F64(in + j * s, dt);
    if (descending ? !(v <= t) : v < t) {
      return j;
    }
  }
  return n;
}

/* One line along dimension 0, with `h` room for k items. */
static void topk_line(const or_reduce *p, const char *in, char *values, char *indices, sort_item *h) {
  const int64_t n = p->sizes[0], k = p->args[1].i;
  const int64_t s_in = p->strides[OR_REDUCE_IN][0];
  const int64_t s_val = p->strides[OR_REDUCE_OUT0][0], s_idx = p->strides[OR_REDUCE_OUT1][0];
  const int is_float = p->compute == OR_COMPUTE_F64;
  const int descending = is_float ? p->args[0].f != 0.0 : p->args[0].i != 0;
  const uint32_t dt = p->dtypes[OR_REDUCE_IN];
  for (int64_t j = 0; j < k; j++) {
    h[j] = sort_item_at(in, j, s_in, dt, is_float);
  }
  for (int64_t i = k / 2; i-- > 0;) {
    topk_sift(h, k, i, is_float, descending);
  }
  for (int64_t j = topk_scan(in, s_in, dt, k, n, &h[0], is_float, descending); j < n;
       j = topk_scan(in, s_in, dt, j + 1, n, &h[0], is_float, descending)) {
    h[0] = sort_item_at(in, j, s_in, dt, is_float);
    topk_sift(h, k, 0, is_float, descending);
  }
  for (int64_t m = k - 1; m > 0; m--) { /* the root, the last of h[0..m], goes to m */
    const sort_item last = h[0];
    h[0] = h[m];
    h[m] = last;
    topk_sift(h, m, 0, is_float, descending);
  }
  for (int64_t j = 0; j < k; j++) {
    if (is_float) {
      store_F64(values + j * s_val, p->dtypes[OR_REDUCE_OUT0], h[j].key.f);
    } else {
      store_I64(values + j * s_val, p->dtypes[OR_REDUCE_OUT0], h[j].key.i);
    }
    *(int64_t *)(indices + j * s_idx) = h[j].index;
  }
}

EXPORT(reduce) void reduce(const or_reduce *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  or_reduce part = *params;
  const or_reduce *p = &part;
  if (p->op >= OR_REDUCE_COUNT || (p->compute != OR_COMPUTE_F64 && p->compute != OR_COMPUTE_I64) ||
      p->ndim > OR_MAX_DIMS || p->nreduce > p->ndim || p->noutputs < 1 || p->noutputs > 2) {
    TRAP();
  }
  const uint32_t op = p->op;
  const int indexed = op == OR_REDUCE_ARGMAX || op == OR_REDUCE_ARGMIN || op == OR_REDUCE_MAX_INDEX ||
                      op == OR_REDUCE_MIN_INDEX;
  const int sorts = op == OR_REDUCE_SORT || op == OR_REDUCE_TOPK;
  if ((is_scan(op) && p->nreduce != 1) || ((indexed || sorts) && p->nreduce > 1) ||
      ((sorts || is_indexed_scan(op)) && (p->noutputs != 2 || p->dtypes[OR_REDUCE_OUT1] != OR_I64)) ||
      (op == OR_REDUCE_TOPK && (p->nreduce != 1 || p->args[1].i < 1 || p->args[1].i > p->sizes[0]))) {
    TRAP(); /* an index or a scan is along one dimension */
  }
  (void)dtype_size(p->dtypes[OR_REDUCE_IN]); /* traps on an unknown dtype */
  (void)dtype_size(p->dtypes[OR_REDUCE_OUT0]);
  if (p->noutputs > 1) {
    (void)dtype_size(p->dtypes[OR_REDUCE_OUT1]);
  }
  const uint32_t ndim = p->ndim;
  const uint32_t nr = p->nreduce;
  int64_t count = 1;
  for (uint32_t d = 0; d < ndim; d++) {
    if (p->sizes[d] <= 0) {
      return; /* nothing to reduce into (the shim handles empty inputs) */
    }
    if (d < nr) {
      count *= p->sizes[d];
    }
  }
  if (p->phase != OR_REDUCE_PHASE_WHOLE) {
    if (p->phase > OR_REDUCE_PHASE_MERGE || nr != ndim || nr == 0 || p->segment <= 0 || is_scan(op) ||
        sorts || (p->nreduce == 1 && p->segment % OR_REDUCE_SEGMENT_ALIGN != 0 &&
                                 p->segment < p->sizes[0])) {
      TRAP();
    }
    if (p->phase == OR_REDUCE_PHASE_PARTIALS) {
      reduce_partials(p, worker, workers);
    } else if (worker == 0) {
      char *out0 = device_ptr(p->data[OR_REDUCE_OUT0]);
      reduce_merge(p, out0, p->noutputs > 1 ? device_ptr(p->data[OR_REDUCE_OUT1]) : out0, count);
    }
    return;
  }
  /* How to reduce is chosen from the whole problem, before splitting. */
  const int columns = use_columns(p);
  /* Outputs are split, never a reduction; a sort and a top k take a scratch
   * per worker (SORT's OR_SORT_ROOM of a line, TOPK's heap of k). */
  char *room = device_ptr(p->scratch) + worker * (op == OR_REDUCE_TOPK ? p->args[1].i * (int64_t)sizeof(sort_item)
                                                                        : OR_SORT_ROOM(p->sizes[0]));
  if (workers > 1 && nr == ndim) {
    if (worker > 0) {
      return;
    }
  } else if (workers > 1 &&
             !RESTRICT_BOX(part, OR_REDUCE_OPERANDS, split_dim(part.sizes, nr, ndim, workers), worker, workers)) {
    return;
  }
  const char *in = device_ptr(p->data[OR_REDUCE_IN]);
  char *out0 = device_ptr(p->data[OR_REDUCE_OUT0]);
  char *out1 = p->noutputs > 1 ? device_ptr(p->data[OR_REDUCE_OUT1]) : out0; /* unused with one output */
  /* Output dimensions: [first, ndim), counted by an odometer; with columns
   * the first output dimension goes in tiles of OR_COLUMN_TILE,
   * and the loops across lines (rows, scans, arg ops, var) take it whole. */
  const int by_rows = !columns && rows_f32(p);
  const int scan_layout = columns ? 0 : scan_lines_f32(p);
  const int arg_cols = !columns && arg_columns_f32(p);
  const int var_cols = !columns && var_columns_f32(p);
  const uint32_t first = columns || by_rows || scan_layout || arg_cols || var_cols ? nr + 1 : nr;
  int64_t counter[OR_MAX_DIMS] = {0};
  for (;;) {
    if (op == OR_REDUCE_SORT) {
      sort_line(p, in, out0, out1, room);
    } else if (op == OR_REDUCE_TOPK) {
      topk_line(p, in, out0, out1, (sort_item *)room);
    } else if (columns) {
      const int64_t n = p->sizes[nr];
      for (int64_t t = 0; t < n; t += OR_COLUMN_TILE) {
        const int64_t m = n - t < OR_COLUMN_TILE ? n - t : OR_COLUMN_TILE;
        reduce_columns(p, in + t * p->strides[OR_REDUCE_IN][nr], out0 + t * p->strides[OR_REDUCE_OUT0][nr], nr, m,
                       count);
      }
    } else if (by_rows) {
      reduce_rows_f32(p, in, out0);
    } else if (scan_layout) {
      scan_f32(p, in, out0, scan_layout);
    } else if (arg_cols) {
      arg_columns(p, in, out0, out1);
    } else if (var_cols) {
      var_columns(p, in, out0, out1);
    } else if (p->compute == OR_COMPUTE_F64) {
      reduce_one_F(p, in, out0, out1, count);
    } else {
      reduce_one_I(p, in, out0, out1, count);
    }
    uint32_t d = first;
    for (; d < ndim; d++) {
      in += p->strides[OR_REDUCE_IN][d];
      out0 += p->strides[OR_REDUCE_OUT0][d];
      out1 += p->noutputs > 1 ? p->strides[OR_REDUCE_OUT1][d] : 0;
      if (++counter[d] < p->sizes[d]) {
        break;
      }
      in -= p->strides[OR_REDUCE_IN][d] * p->sizes[d];
      out0 -= p->strides[OR_REDUCE_OUT0][d] * p->sizes[d];
      out1 -= p->noutputs > 1 ? p->strides[OR_REDUCE_OUT1][d] * p->sizes[d] : 0;
      counter[d] = 0;
    }
    if (d >= ndim) {
      return;
    }
  }
}

/* ---- normalization (the `norm` kernel; see or_norm) ---- */

/* acc + the four lanes of v in float64, low pair and high pair first. */
ALWAYS_INLINE v128_t add_f64_lanes(v128_t acc, v128_t v) {
  return wasm_f64x2_add(acc, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(v),
                                            wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 0, 1))));
}

ALWAYS_INLINE double f64_lanes(v128_t v) {
  return wasm_f64x2_extract_lane(v, 0) + wasm_f64x2_extract_lane(v, 1);
}

/* A row of layer norm's forward: its moments as the VAR reduction folds a
 * row, then y in two multiply-adds, each rounded twice. */
NOINLINE static void layer_forward_row(const float *x, const float *w, const float *b, float *y, float *mean_out,
                                       float *rstd_out, int64_t n, float eps) {
  acc_f a = {0};
  var_f32_contig(&a, x, n);
  const float mean = (float)a.mean;
  const float rstd = 1.0f / __builtin_sqrtf((float)(a.w / (double)n) + eps);
  *mean_out = mean;
  *rstd_out = rstd;
  const v128_t r = wasm_f32x4_splat(rstd), t = wasm_f32x4_splat(rstd * -mean);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    v128_t v = wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(x + j), r), t);
    if (w) {
      v = wasm_f32x4_mul(v, wasm_v128_load(w + j));
    }
    if (b) {
      v = wasm_f32x4_add(v, wasm_v128_load(b + j));
    }
    wasm_v128_store(y + j, v);
  }
  for (; j < n; j++) {
    float v = x[j] * rstd + rstd * -mean;
    if (w) {
      v = v * w[j];
    }
    if (b) {
      v = v + b[j];
    }
    y[j] = v;
  }
}

/* xhat and gw of elements j .. j + 3 of a layer norm row. */
ALWAYS_INLINE void layer_terms(const float *g, const float *x, const float *w, int64_t j, v128_t r, v128_t t,
                               v128_t *xhat, v128_t *gw) {
  *xhat = wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(x + j), r), t);
  *gw = w ? wasm_f32x4_mul(wasm_v128_load(g + j), wasm_v128_load(w + j)) : wasm_v128_load(g + j);
}

/* A row of layer norm's input gradient: the means of gw and gw * xhat
 * (float64 sums; the last n % 4 elements one by one), then one pass
 * writing it. */
NOINLINE static void layer_backward_row(const float *g, const float *x, const float *w, float mean, float rstd,
                                        float *out, int64_t n) {
  const float shift = rstd * -mean;
  const v128_t r = wasm_f32x4_splat(rstd), t = wasm_f32x4_splat(shift), zero = wasm_f64x2_splat(0.0);
  v128_t sa = zero, sb = zero;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    v128_t xhat, gw;
    layer_terms(g, x, w, j, r, t, &xhat, &gw);
    sa = add_f64_lanes(sa, gw);
    sb = add_f64_lanes(sb, wasm_f32x4_mul(gw, xhat));
  }
  double suma = f64_lanes(sa), sumb = f64_lanes(sb);
  for (int64_t e = j; e < n; e++) {
    const float gw = w ? g[e] * w[e] : g[e];
    suma += (double)gw;
    sumb += (double)(gw * (x[e] * rstd + shift));
  }
  const float ca = -((float)(suma / (double)n) * rstd), cb = -((float)(sumb / (double)n) * rstd);
  const v128_t va = wasm_f32x4_splat(ca), vb = wasm_f32x4_splat(cb);
  for (j = 0; j + 4 <= n; j += 4) {
    v128_t xhat, gw;
    layer_terms(g, x, w, j, r, t, &xhat, &gw);
    wasm_v128_store(out + j, wasm_f32x4_add(wasm_f32x4_mul(xhat, vb), wasm_f32x4_add(wasm_f32x4_mul(gw, r), va)));
  }
  for (; j < n; j++) {
    const float gw = w ? g[j] * w[j] : g[j];
    out[j] = (x[j] * rstd + shift) * cb + (gw * rstd + ca);
  }
}

/* Columns [c, c + w) of layer norm's parameter gradients, w a multiple of 8
 * up to OR_PARAMS_BLOCK: row by row (each row's part read whole, as memory
 * runs), the sums of g * xhat (xhat as layer_backward_row computes it) and
 * of g in float64, kept in a buffer of the block's columns. Strips of 8
 * columns each walking every row read rows 4 KiB apart, which share cache
 * sets: 4096 x 1024 took 9.5 ms. dw or db may be null (not wanted). */
#define OR_PARAMS_BLOCK 256
NOINLINE static void layer_params_block(const float *g, const float *x, const float *mean, const float *rstd,
                                        int64_t rows, int64_t n, int64_t c, int64_t w, float *dw, float *db) {
  double sw[OR_PARAMS_BLOCK] __attribute__((aligned(16))), sb[OR_PARAMS_BLOCK] __attribute__((aligned(16)));
  for (int64_t j = 0; j < w; j++) sw[j] = sb[j] = 0.0;
  for (int64_t i = 0; i < rows; i++) {
    const v128_t r = wasm_f32x4_splat(rstd[i]), t = wasm_f32x4_splat(rstd[i] * -mean[i]);
    const float *gi = g + i * n + c, *xi = x + i * n + c;
    for (int64_t j = 0; j < w; j += 4) {
      const v128_t gv = wasm_v128_load(gi + j);
      const v128_t pv = wasm_f32x4_mul(gv, wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(xi + j), r), t));
      wasm_v128_store(sw + j, wasm_f64x2_add(wasm_v128_load(sw + j), wasm_f64x2_promote_low_f32x4(pv)));
      wasm_v128_store(sw + j + 2, wasm_f64x2_add(wasm_v128_load(sw + j + 2),
                                                 wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(pv, pv, 2, 3, 0, 1))));
      wasm_v128_store(sb + j, wasm_f64x2_add(wasm_v128_load(sb + j), wasm_f64x2_promote_low_f32x4(gv)));
      wasm_v128_store(sb + j + 2, wasm_f64x2_add(wasm_v128_load(sb + j + 2),
                                                 wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(gv, gv, 2, 3, 0, 1))));
    }
  }
  for (int64_t j = 0; j < w; j++) {
    if (dw) {
      dw[c + j] = (float)sw[j];
    }
    if (db) {
      db[c + j] = (float)sb[j];
    }
  }
}

/* Column c of the same, alone (the last n % 8 columns). */
NOINLINE static void layer_params_column(const float *g, const float *x, const float *mean, const float *rstd,
                                         int64_t rows, int64_t n, int64_t c, float *dw, float *db) {
  double sw = 0.0, sb = 0.0;
  for (int64_t i = 0; i < rows; i++) {
    const float gv = g[i * n + c];
    sw += (double)(gv * (x[i * n + c] * rstd[i] + rstd[i] * -mean[i]));
    sb += (double)gv;
  }
  if (dw) {
    dw[c] = (float)sw;
  }
  if (db) {
    db[c] = (float)sb;
  }
}

/* One plane of a batch norm channel: sums of g and of g * (x - mean) added
 * to s (lanes 0-1) and d; the last n % 4 elements one by one. */
NOINLINE static void batch_stats_plane(const float *g, const float *x, float mean, int64_t n, double *s, double *d) {
  const v128_t mv = wasm_f32x4_splat(mean), zero = wasm_f64x2_splat(0.0);
  v128_t sv = zero, dv = zero;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const v128_t gv = wasm_v128_load(g + j);
    sv = add_f64_lanes(sv, gv);
    dv = add_f64_lanes(dv, wasm_f32x4_mul(gv, wasm_f32x4_sub(wasm_v128_load(x + j), mv)));
  }
  double ss = f64_lanes(sv), dd = f64_lanes(dv);
  for (; j < n; j++) {
    ss += (double)g[j];
    dd += (double)(g[j] * (x[j] - mean));
  }
  *s += ss;
  *d += dd;
}

/* One plane of a batch norm channel's input gradient. */
NOINLINE static void batch_backward_plane(const float *g, const float *x, float scale, float mean, float projection,
                                          float shift, float *out, int64_t n) {
  const v128_t sv = wasm_f32x4_splat(scale), mv = wasm_f32x4_splat(mean), pv = wasm_f32x4_splat(projection);
  const v128_t hv = wasm_f32x4_splat(shift);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const v128_t xv = wasm_v128_load(x + j), gv = wasm_v128_load(g + j);
    wasm_v128_store(out + j, wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_sub(xv, mv), pv),
                                            wasm_f32x4_add(wasm_f32x4_mul(gv, sv), hv)));
  }
  for (; j < n; j++) {
    out[j] = (x[j] - mean) * projection + (g[j] * scale + shift);
  }
}

/*
 * Batch norm over (N, C) (a plane of one element, BatchNorm1d's input):
 * channels lie side by side, so the planes' loops run across a block of
 * channels a row at a time instead of calling batch_stats_plane (or
 * batch_backward_plane) once per element. Per channel the same arithmetic
 * in the same order: each plane's one element added in double, the product
 * g (x - mean) in float32.
 */
#define OR_BATCH_COLS 64

static void batch_stats_columns(const or_norm *p, const float *g, const float *x, const float *mean, float *sum_g,
                                float *dot, int64_t lo, int64_t hi) {
  const int64_t stride = p->plane_stride;
  for (int64_t c0 = lo; c0 < hi; c0 += OR_BATCH_COLS) {
    const int64_t w = hi - c0 < OR_BATCH_COLS ? hi - c0 : OR_BATCH_COLS, nv = (w + 3) / 4;
    v128_t s[OR_BATCH_COLS / 2], d[OR_BATCH_COLS / 2], m[OR_BATCH_COLS / 4];
    for (int64_t q = 0; q < nv; q++) {
      m[q] = cols_load(mean + c0, q, w);
      s[2 * q] = s[2 * q + 1] = d[2 * q] = d[2 * q + 1] = wasm_f64x2_splat(0.0);
    }
    for (int64_t i = 0; i < p->planes; i++) {
      const float *gr = g + i * stride + c0, *xr = x + i * stride + c0;
      for (int64_t q = 0; q < nv; q++) {
        const v128_t gv = cols_load(gr, q, w), xv = cols_load(xr, q, w);
        const v128_t t = wasm_f32x4_mul(gv, wasm_f32x4_sub(xv, m[q]));
        s[2 * q] = wasm_f64x2_add(s[2 * q], wasm_f64x2_promote_low_f32x4(gv));
        s[2 * q + 1] = wasm_f64x2_add(s[2 * q + 1], wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(gv, gv, 2, 3, 2, 3)));
        d[2 * q] = wasm_f64x2_add(d[2 * q], wasm_f64x2_promote_low_f32x4(t));
        d[2 * q + 1] = wasm_f64x2_add(d[2 * q + 1], wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(t, t, 2, 3, 2, 3)));
      }
    }
    for (int64_t c = 0; c < w; c++) {
      sum_g[c0 + c] = (float)((const double *)s)[c];
      dot[c0 + c] = (float)((const double *)d)[c];
    }
  }
}

static void batch_backward_columns(const or_norm *p, const float *const *in, float *out, int64_t lo, int64_t hi) {
  const int64_t stride = p->plane_stride;
  for (int64_t i = 0; i < p->planes; i++) {
    const float *gr = in[0] + i * stride, *xr = in[1] + i * stride;
    float *o = out + i * stride;
    int64_t c = lo;
    for (; c + 4 <= hi; c += 4) {
      const v128_t xv = wasm_v128_load(xr + c), gv = wasm_v128_load(gr + c);
      const v128_t t = wasm_f32x4_mul(wasm_f32x4_sub(xv, wasm_v128_load(in[3] + c)), wasm_v128_load(in[4] + c));
      wasm_v128_store(o + c, wasm_f32x4_add(t, wasm_f32x4_add(wasm_f32x4_mul(gv, wasm_v128_load(in[2] + c)),
                                                              wasm_v128_load(in[5] + c))));
    }
    for (; c < hi; c++) {
      o[c] = (xr[c] - in[3][c]) * in[4][c] + (gr[c] * in[2][c] + in[5][c]);
    }
  }
}

EXPORT(norm) void norm(const or_norm *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  const or_norm p = *params;
  const int layer = p.op == OR_NORM_LAYER_FORWARD || p.op == OR_NORM_LAYER_BACKWARD;
  if (p.op >= OR_NORM_COUNT || p.groups < 0 || p.length < 1 || p.planes < 1 || (layer && p.planes != 1)) {
    TRAP();
  }
  const float *in[6];
  for (int k = 0; k < 6; k++) {
    in[k] = p.data[OR_NORM_IN0 + k] ? (const float *)device_ptr(p.data[OR_NORM_IN0 + k]) : 0;
  }
  float *out[3];
  for (int k = 0; k < 3; k++) {
    out[k] = p.data[OR_NORM_OUT0 + k] ? (float *)device_ptr(p.data[OR_NORM_OUT0 + k]) : 0;
  }
  int64_t lo, hi;
  const int64_t n = p.length;
  if (p.op == OR_NORM_LAYER_PARAMS) { /* columns split, each summed down every row */
    split_range(n, 8, worker, workers, &lo, &hi);
    int64_t c = lo;
    for (; c + 8 <= hi; c += OR_PARAMS_BLOCK) {
      const int64_t w = hi - c < OR_PARAMS_BLOCK ? (hi - c) / 8 * 8 : OR_PARAMS_BLOCK;
      layer_params_block(in[0], in[1], in[3], in[4], p.groups, n, c, w, out[0], out[1]);
      if (w < OR_PARAMS_BLOCK) {
        c += w;
        break;
      }
    }
    for (; c < hi; c++) layer_params_column(in[0], in[1], in[3], in[4], p.groups, n, c, out[0], out[1]);
    return;
  }
  split_range(p.groups, 1, worker, workers, &lo, &hi);
  if (n == 1 && p.op == OR_NORM_BATCH_STATS) {
    batch_stats_columns(&p, in[0], in[1], in[3], out[0], out[1], lo, hi);
    return;
  }
  if (n == 1 && p.op == OR_NORM_BATCH_BACKWARD) {
    batch_backward_columns(&p, in, out[0], lo, hi);
    return;
  }
  for (int64_t q = lo; q < hi; q++) {
    switch (p.op) {
    case OR_NORM_LAYER_FORWARD:
      layer_forward_row(in[0] + q * n, in[1], in[2], out[0] + q * n, out[1] + q, out[2] + q, n, (float)p.eps);
      break;
    case OR_NORM_LAYER_BACKWARD:
      layer_backward_row(in[0] + q * n, in[1] + q * n, in[2], in[3][q], in[4][q], out[0] + q * n, n);
      break;
    case OR_NORM_BATCH_STATS: {
      double s = 0.0, d = 0.0;
      for (int64_t i = 0; i < p.planes; i++) {
        const int64_t at = q * n + i * p.plane_stride;
        batch_stats_plane(in[0] + at, in[1] + at, in[3][q], n, &s, &d);
      }
      out[0][q] = (float)s;
      out[1][q] = (float)d;
      break;
    }
    default: /* BATCH_BACKWARD */
      for (int64_t i = 0; i < p.planes; i++) {
        const int64_t at = q * n + i * p.plane_stride;
        batch_backward_plane(in[0] + at, in[1] + at, in[2][q], in[3][q], in[4][q], in[5][q], out[0] + at, n);
      }
      break;
    }
  }
}
