/*
 * Softmax along lines (`softmax` kernel, or_softmax_op in openreg_engine.h):
 * one line at a time, in chunks of OR_CHUNK elements converted to the
 * compute type (float for float32, float16 and bfloat16; double for
 * float64), so lines of any length, stride and dtype take the same loops.
 *
 * Forward: a pass for the line's maximum, one that sums exp(x - max) (and,
 * for softmax, writes it when out0 holds the compute type), one that writes
 * the result (logsumexp: one value per line, after the second pass).
 * Backward: a pass for the sum, one for the result. Lines side by side
 * (a dimension other than the last) run across, up to OR_COLS at a time
 * (columns_f32), with the same arithmetic per line. Maxima and sums run in
 * lanes (float32 sums: 16 lanes in double, element i in lane i % 16;
 * float64: 4) that combine in a fixed order: the result depends only
 * on the line, not on how lines are split or on its layout. Contiguous
 * float32 lines take loops of their own (line_contig_f32), with the same
 * arithmetic in the same order. Compiled for wasm32 and wasm64 with the rest
 * of the engine.
 */
#include "dtype.h"

#include <wasm_simd128.h>

/* math.h's vector exp (v_exp_f32) fuses with relaxed SIMD's madd. */
#pragma clang attribute push(__attribute__((target("relaxed-simd"))), apply_to = function)

/* Loop hints (see the contiguous loops of elementwise.c): wasmtime's epoch
 * check at each loop header makes a vector that lives across iterations (a
 * line's maximum, a scale, a lane accumulator) cost a spill and a reload per
 * iteration; more work per iteration hides it. Unrolling the lane loops keeps
 * each lane's order of operations, so results do not change. */
#define UNROLL4 _Pragma("clang loop unroll_count(4)")
#define INTERLEAVE2 _Pragma("clang loop interleave_count(2)")

/*
 * Sums of float32 values in double, in OR_LANES lanes (element j to lane
 * j % OR_LANES, each lane in order; a last partial group adds +0.0 to its
 * empty lanes, as if the line were padded with zeros), combined pairwise in
 * a fixed order. Sixteen independent lanes, because wasmtime's epoch check
 * at the loop header sends every vector that lives across iterations through
 * the stack: one accumulator would make each iteration wait for its own
 * store and reload.
 */
#define OR_LANES 16

ALWAYS_INLINE void lane_sums_F32(const float *v, int64_t n, double sums[OR_LANES]) {
  v128_t s[OR_LANES / 2];
  for (int l = 0; l < OR_LANES / 2; l++) s[l] = wasm_f64x2_make(sums[2 * l], sums[2 * l + 1]);
  const int64_t n16 = n & ~(int64_t)(OR_LANES - 1);
  UNROLL4 for (int64_t j = 0; j < n16; j += OR_LANES) {
    for (int q = 0; q < OR_LANES / 4; q++) {
      const v128_t x = wasm_v128_load(v + j + 4 * q);
      s[2 * q] = wasm_f64x2_add(s[2 * q], wasm_f64x2_promote_low_f32x4(x));
      s[2 * q + 1] = wasm_f64x2_add(s[2 * q + 1], wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(x, x, 2, 3, 2, 3)));
    }
  }
  for (int l = 0; l < OR_LANES / 2; l++) {
    sums[2 * l] = wasm_f64x2_extract_lane(s[l], 0);
    sums[2 * l + 1] = wasm_f64x2_extract_lane(s[l], 1);
  }
  if (n16 < n) {
    for (int l = 0; l < OR_LANES; l++) sums[l] += n16 + l < n ? (double)v[n16 + l] : 0.0;
  }
}

/* The total of the first `lanes` lanes (a power of 2): pairs, then pairs of pairs, ... */
ALWAYS_INLINE double lanes_total(const double sums[OR_LANES], int lanes) {
  double t[OR_LANES];
  for (int l = 0; l < lanes; l++) t[l] = sums[l];
  for (int w = lanes / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; l++) t[l] = t[2 * l] + t[2 * l + 1];
  }
  return t[0];
}

/* float64 lines sum in four lanes. */
#define OR_LANES_F32 OR_LANES
#define OR_LANES_F64 4

ALWAYS_INLINE void lane_sums_F64(const double *v, int64_t n, double sums[OR_LANES]) {
  const int64_t n4 = n & ~(int64_t)3;
  UNROLL4 for (int64_t j = 0; j < n4; j += 4) {
    for (int l = 0; l < 4; l++) sums[l] += v[j + l];
  }
  if (n4 < n) {
    for (int l = 0; l < 4; l++) sums[l] += n4 + l < n ? v[n4 + l] : 0.0;
  }
}

/* The NaN-propagating maximum of v[0..n) (n >= 1): sixteen lanes of plain
 * maxima (wasm's pmax, x86's maxps; ties keep the earlier value), with a
 * separate record of whether a NaN was seen (the line's maximum is then a
 * NaN). A function of its own, as are the line's other passes below: inlined
 * into the kernel, its loop kept its pointers and accumulators on the stack
 * (see the loop hints above). */
NOINLINE static float max_f32(const float *v, int64_t n) {
  v128_t mx[4], nan = wasm_i32x4_splat(0);
  for (int q = 0; q < 4; q++) mx[q] = wasm_f32x4_splat(-__builtin_inff());
  const int64_t n16 = n & ~(int64_t)15;
  UNROLL4 for (int64_t j = 0; j < n16; j += 16) {
    for (int q = 0; q < 4; q++) {
      const v128_t x = wasm_v128_load(v + j + 4 * q);
      mx[q] = wasm_f32x4_pmax(mx[q], x);
      nan = wasm_v128_or(nan, wasm_f32x4_ne(x, x));
    }
  }
  float lanes[16];
  for (int q = 0; q < 4; q++) wasm_v128_store(lanes + 4 * q, mx[q]);
  int any_nan = wasm_v128_any_true(nan);
  for (int64_t j = n16; j < n; j++) {
    lanes[j - n16] = v[j] > lanes[j - n16] ? v[j] : lanes[j - n16];
    any_nan |= v[j] != v[j];
  }
  float max = lanes[0];
  for (int l = 1; l < 16; l++) max = lanes[l] > max ? lanes[l] : max;
  return any_nan ? __builtin_nanf("") : max;
}

/* out[j] = in[j] scale over a line, eight vectors per iteration (the
 * scale lives across the loop header: see the loop hints above). */
NOINLINE static void scale_f32(float *out, const float *in, int64_t n, float scale) {
  const v128_t s = wasm_f32x4_splat(scale);
  int64_t j = 0;
  _Pragma("clang loop unroll_count(8)") for (; j + 4 <= n; j += 4) {
    wasm_v128_store(out + j, wasm_f32x4_mul(wasm_v128_load(in + j), s));
  }
  for (; j < n; j++) out[j] = in[j] * scale;
}

/* log_softmax's result over a line: (x - max) - log_total. */
NOINLINE static void log_softmax_f32(float *out, const float *in, int64_t n, float max, float log_total) {
  const v128_t m = wasm_f32x4_splat(max), l = wasm_f32x4_splat(log_total);
  int64_t j = 0;
  _Pragma("clang loop unroll_count(8)") for (; j + 4 <= n; j += 4) {
    wasm_v128_store(out + j, wasm_f32x4_sub(wasm_f32x4_sub(wasm_v128_load(in + j), m), l));
  }
  for (; j < n; j++) out[j] = (in[j] - max) - log_total;
}

/* softmax's backward over a line: out = y (g - total), after the sum of g y. */
NOINLINE static void products_f32(float *out, const float *g, const float *y, int64_t n) {
  for (int64_t j = 0; j < n; j++) out[j] = g[j] * y[j];
}

NOINLINE static void softmax_backward_f32(float *out, const float *g, const float *y, int64_t n, float total) {
  const v128_t t = wasm_f32x4_splat(total);
  int64_t j = 0;
  _Pragma("clang loop unroll_count(8)") for (; j + 4 <= n; j += 4) {
    wasm_v128_store(out + j, wasm_f32x4_mul(wasm_v128_load(y + j), wasm_f32x4_sub(wasm_v128_load(g + j), t)));
  }
  for (; j < n; j++) out[j] = y[j] * (g[j] - total);
}

/* lane_sums_F32 over a whole line, as a function of its own. */
NOINLINE static void line_sums_f32(const float *v, int64_t n, double sums[OR_LANES]) {
  lane_sums_F32(v, n, sums);
}

/*
 * e^(x - shift) over a line, and log_softmax's backward x - e^y total:
 * float32 through math.h's v_exp_f32, four lanes at a time, the last one to
 * three elements as a vector padded with zeros, so the chunked and the
 * contiguous loops give the same bits; float64 through m_exp_f64.
 */
NOINLINE static void exp_shifted_F32(float *out, const float *in, int64_t n, float shift) {
  const v128_t s = wasm_f32x4_splat(shift);
  int64_t j = 0;
  _Pragma("clang loop unroll_count(2)") for (; j + 4 <= n; j += 4) {
    wasm_v128_store(out + j, v_exp_f32(wasm_f32x4_sub(wasm_v128_load(in + j), s)));
  }
  if (j < n) {
    store_f32_partial(out + j, v_exp_f32(wasm_f32x4_sub(load_f32_partial(in + j, n - j), s)), n - j);
  }
}

NOINLINE static void exp_backward_F32(float *out, const float *in, const float *y, int64_t n, float total) {
  const v128_t s = wasm_f32x4_splat(total);
  int64_t j = 0;
  _Pragma("clang loop unroll_count(2)") for (; j + 4 <= n; j += 4) {
    const v128_t e = v_exp_f32(wasm_v128_load(y + j));
    wasm_v128_store(out + j, wasm_f32x4_sub(wasm_v128_load(in + j), wasm_f32x4_mul(e, s)));
  }
  if (j < n) {
    const v128_t e = v_exp_f32(load_f32_partial(y + j, n - j));
    store_f32_partial(out + j, wasm_f32x4_sub(load_f32_partial(in + j, n - j), wasm_f32x4_mul(e, s)), n - j);
  }
}

static void exp_shifted_F64(double *out, const double *in, int64_t n, double shift) {
  INTERLEAVE2 for (int64_t j = 0; j < n; j++) out[j] = m_exp_f64(in[j] - shift);
}

static void exp_backward_F64(double *out, const double *in, const double *y, int64_t n, double total) {
  INTERLEAVE2 for (int64_t j = 0; j < n; j++) out[j] = in[j] - m_exp_f64(y[j]) * total;
}

/* logsumexp's shift: the line's maximum, or 0 when it is infinite, as
 * ATen's logsumexp (all -inf gives -inf, a +inf gives +inf). */
#define LSE_SHIFT(max) ((max) == __builtin_inf() || (max) == -__builtin_inf() ? 0 : (max))
/* logsumexp's value from a line's maximum and the log of its sum of
 * exp(x - max): an infinite maximum is the value (its shift is 0). */
#define LSE_VALUE(max, log_total) ((max) == __builtin_inf() || (max) == -__builtin_inf() ? (max) : (log_total) + (max))

#define OR_DEFINE_SOFTMAX(C, T, LOG)                                                                   \
  static void line_##C(const or_reduce *p, const char *in, char *y, char *out) {                    \
    const int64_t n = p->sizes[0];                                                                   \
    const int64_t si = p->strides[OR_REDUCE_IN][0], so = p->strides[OR_REDUCE_OUT0][0];              \
    const int64_t sy = p->strides[OR_REDUCE_OUT1][0];                                                \
    const uint32_t di = p->dtypes[OR_REDUCE_IN], dout = p->dtypes[OR_REDUCE_OUT0];                   \
    const uint32_t dy = p->dtypes[OR_REDUCE_OUT1];                                                   \
    T a[OR_CHUNK], b[OR_CHUNK];                                                                      \
    const int forward = p->op != OR_SOFTMAX_SOFTMAX_BACKWARD && p->op != OR_SOFTMAX_LOG_SOFTMAX_BACKWARD; \
    /* four independent maxima, and sums in lanes (lane_sums_*), so the loops \
     * vectorize; lanes combine in a fixed order */                            \
    T mx[4] = {-(T)__builtin_inf(), -(T)__builtin_inf(), -(T)__builtin_inf(), -(T)__builtin_inf()};  \
    double sums[OR_LANES] = {0.0};                                                                   \
    if (forward) {                                                                                   \
      for (int64_t k = 0; k < n; k += OR_CHUNK) {                                                    \
        const int64_t m = n - k < OR_CHUNK ? n - k : OR_CHUNK;                                       \
        load_row_##C(a, in + k * si, si, di, m);                                                     \
        for (int64_t j = m; j < ((m + 3) & ~(int64_t)3); j++) a[j] = -(T)__builtin_inf();            \
        UNROLL4 for (int64_t j = 0; j < m; j += 4) {                                                 \
          for (int l = 0; l < 4; l++) mx[l] = (a[j + l] > mx[l] || a[j + l] != a[j + l]) ? a[j + l] : mx[l]; \
        }                                                                                            \
      }                                                                                              \
    }                                                                                                \
    T max = mx[0];                                                                                   \
    for (int l = 1; l < 4; l++) max = (mx[l] > max || mx[l] != mx[l]) ? mx[l] : max;                 \
    max = p->op == OR_SOFTMAX_LOGSUMEXP ? LSE_SHIFT(max) : max;                                     \
    /* softmax writes exp(x - max) on its way when out0 holds the compute type */                    \
    const int with_lse = p->op == OR_SOFTMAX_SOFTMAX_LOGSUMEXP;                                      \
    const int keep = (p->op == OR_SOFTMAX_SOFTMAX || with_lse) && dout == NATIVE_##C;                \
    for (int64_t k = 0; k < n; k += OR_CHUNK) {                                                      \
      const int64_t m = n - k < OR_CHUNK ? n - k : OR_CHUNK;                                         \
      load_row_##C(a, in + k * si, si, di, m);                                                       \
      if (forward) {                                                                                 \
        exp_shifted_##C(a, a, m, max);                                                               \
        if (keep) store_row_##C(out + k * so, so, dout, a, m);                                       \
      } else if (p->op == OR_SOFTMAX_SOFTMAX_BACKWARD) {                                             \
        load_row_##C(b, y + k * sy, sy, dy, m);                                                      \
        for (int64_t j = 0; j < m; j++) a[j] = a[j] * b[j];                                          \
      }                                                                                              \
      lane_sums_##C(a, m, sums);                                                                     \
    }                                                                                                \
    const T total = (T)lanes_total(sums, OR_LANES_##C);                                              \
    const T log_total = LOG(total);                                                                  \
    if (p->op == OR_SOFTMAX_LOGSUMEXP) {                                                             \
      a[0] = log_total + max;                                                                        \
      store_row_##C(out, so, dout, a, 1);                                                            \
      return;                                                                                        \
    }                                                                                                \
    if (with_lse) { /* LOGSUMEXP's value: its shift is this max when finite */                       \
      a[0] = LSE_VALUE(max, log_total);                                                              \
      store_row_##C(y, sy, dy, a, 1);                                                                \
    }                                                                                                \
    const T scale = (T)1 / total;                                                                    \
    for (int64_t k = 0; k < n; k += OR_CHUNK) {                                                      \
      const int64_t m = n - k < OR_CHUNK ? n - k : OR_CHUNK;                                         \
      switch (p->op) {                                                                               \
      case OR_SOFTMAX_SOFTMAX:                                                                       \
      case OR_SOFTMAX_SOFTMAX_LOGSUMEXP:                                                             \
        if (keep) {                                                                                  \
          load_row_##C(a, out + k * so, so, dout, m);                                                \
        } else {                                                                                     \
          load_row_##C(a, in + k * si, si, di, m);                                                   \
          exp_shifted_##C(a, a, m, max);                                                             \
        }                                                                                            \
        INTERLEAVE2 for (int64_t j = 0; j < m; j++) a[j] = a[j] * scale;                                         \
        break;                                                                                       \
      case OR_SOFTMAX_LOG_SOFTMAX:                                                                   \
        load_row_##C(a, in + k * si, si, di, m);                                                     \
        INTERLEAVE2 for (int64_t j = 0; j < m; j++) a[j] = (a[j] - max) - log_total;                             \
        break;                                                                                       \
      case OR_SOFTMAX_SOFTMAX_BACKWARD:                                                              \
        load_row_##C(a, in + k * si, si, di, m);                                                     \
        load_row_##C(b, y + k * sy, sy, dy, m);                                                      \
        INTERLEAVE2 for (int64_t j = 0; j < m; j++) a[j] = b[j] * (a[j] - total);                                \
        break;                                                                                       \
      default: /* LOG_SOFTMAX_BACKWARD */                                                            \
        load_row_##C(a, in + k * si, si, di, m);                                                     \
        load_row_##C(b, y + k * sy, sy, dy, m);                                                      \
        exp_backward_##C(a, a, b, m, total);                                                         \
        break;                                                                                       \
      }                                                                                              \
      store_row_##C(out + k * so, so, dout, a, m);                                                   \
    }                                                                                                \
  }

OR_DEFINE_SOFTMAX(F32, float, m_log_f32)
OR_DEFINE_SOFTMAX(F64, double, m_log_f64)

/*
 * line_F32 for a line whose operands are all contiguous float32: the same
 * arithmetic in the same order (bit for bit the same results), straight on
 * device memory instead of through chunk buffers. Backward products go
 * through `scratch` (OR_CHUNK floats) to be summed.
 */
static void line_contig_f32(const or_reduce *p, const float *in, float *y, float *out) {
  const int64_t n = p->sizes[0];
  double sums[OR_LANES] = {0.0};
  float scratch[OR_CHUNK];
  switch (p->op) {
  case OR_SOFTMAX_SOFTMAX:
  case OR_SOFTMAX_SOFTMAX_LOGSUMEXP:
  case OR_SOFTMAX_LOG_SOFTMAX:
  case OR_SOFTMAX_LOGSUMEXP: {
    float max = max_f32(in, n);
    max = p->op == OR_SOFTMAX_LOGSUMEXP ? LSE_SHIFT(max) : max;
    if (p->op == OR_SOFTMAX_SOFTMAX || p->op == OR_SOFTMAX_SOFTMAX_LOGSUMEXP) {
      exp_shifted_F32(out, in, n, max);
      line_sums_f32(out, n, sums);
      const float total = (float)lanes_total(sums, OR_LANES);
      if (p->op == OR_SOFTMAX_SOFTMAX_LOGSUMEXP) { /* LOGSUMEXP's value: its shift is this max when finite */
        y[0] = LSE_VALUE(max, m_log_f32(total));
      }
      const float scale = 1.0f / total;
      scale_f32(out, out, n, scale);
    } else {
      for (int64_t k = 0; k < n; k += OR_CHUNK) {
        const int64_t m = n - k < OR_CHUNK ? n - k : OR_CHUNK;
        exp_shifted_F32(scratch, in + k, m, max);
        line_sums_f32(scratch, m, sums);
      }
      const float log_total = m_log_f32((float)lanes_total(sums, OR_LANES));
      if (p->op == OR_SOFTMAX_LOGSUMEXP) {
        out[0] = log_total + max;
        return;
      }
      log_softmax_f32(out, in, n, max, log_total);
    }
    return;
  }
  case OR_SOFTMAX_SOFTMAX_BACKWARD: {
    for (int64_t k = 0; k < n; k += OR_CHUNK) {
      const int64_t m = n - k < OR_CHUNK ? n - k : OR_CHUNK;
      products_f32(scratch, in + k, y + k, m);
      line_sums_f32(scratch, m, sums);
    }
    const float total = (float)lanes_total(sums, OR_LANES);
    softmax_backward_f32(out, in, y, n, total);
    return;
  }
  default: { /* LOG_SOFTMAX_BACKWARD */
    line_sums_f32(in, n, sums);
    const float total = (float)lanes_total(sums, OR_LANES);
    exp_backward_F32(out, in, y, n, total);
    return;
  }
  }
}

/*
 * Lines side by side (softmax along a dimension other than the last, as
 * over the channels of an NCHW batch): when element i of w adjacent lines
 * (w <= OR_COLS) are w adjacent float32 values in every operand, the passes
 * run across those lines, a row of vectors at a time, instead of down each
 * line a strided element at a time. The arithmetic is line_F32's, in the
 * same order, per line: the maximum in four lanes (element i to lane i % 4,
 * a NaN taken), sums in OR_LANES lanes of double (a last partial group
 * adding +0.0 to its empty lanes), the same exp: the bits are those of the
 * line at a time.
 */
#define OR_COLS 64

/* line_F32's choice of a new maximum: a greater value or a NaN. */
ALWAYS_INLINE v128_t cols_max_of(v128_t m, v128_t x) {
  return wasm_v128_bitselect(x, m, wasm_v128_or(wasm_f32x4_gt(x, m), wasm_f32x4_ne(x, x)));
}

NOINLINE static void cols_max_f32(const char *in, int64_t si, int64_t n, int64_t w, v128_t max[OR_COLS / 4]) {
  const int64_t nv = (w + 3) / 4;
  v128_t mx[4][OR_COLS / 4];
  for (int l = 0; l < 4; l++) {
    for (int64_t q = 0; q < nv; q++) mx[l][q] = wasm_f32x4_splat(-__builtin_inff());
  }
  for (int64_t i = 0; i < n; i++) {
    const char *row = in + i * si;
    v128_t *m = mx[i & 3];
    for (int64_t q = 0; q < nv; q++) m[q] = cols_max_of(m[q], cols_load(row, q, w));
  }
  for (int64_t q = 0; q < nv; q++) {
    v128_t v = mx[0][q];
    for (int l = 1; l < 4; l++) v = cols_max_of(v, mx[l][q]);
    max[q] = v;
  }
}

/* Adds a row's four values to lane l's sums of their lines, in double. */
ALWAYS_INLINE void cols_add(v128_t sums[OR_LANES][OR_COLS / 2], int64_t l, int64_t q, v128_t x) {
  sums[l][2 * q] = wasm_f64x2_add(sums[l][2 * q], wasm_f64x2_promote_low_f32x4(x));
  sums[l][2 * q + 1] = wasm_f64x2_add(sums[l][2 * q + 1], wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(x, x, 2, 3, 2, 3)));
}

/* The sums' pass: exp(x - max) (stored to out when `keep`), g y for
 * softmax's backward, g for log_softmax's; then each line's total as
 * lanes_total combines it, in `total`. */
NOINLINE static void cols_sums_f32(const or_reduce *p, const char *in, const char *y, char *out, int64_t w,
                                   const v128_t max[OR_COLS / 4], int keep, float total[OR_COLS]) {
  const int64_t n = p->sizes[0], nv = (w + 3) / 4;
  const int64_t si = p->strides[OR_REDUCE_IN][0], so = p->strides[OR_REDUCE_OUT0][0];
  const int64_t sy = p->strides[OR_REDUCE_OUT1][0];
  /* lanes past the line's length stay +0.0: neither set nor read */
  const int used = n < OR_LANES ? (int)n : OR_LANES;
  v128_t sums[OR_LANES][OR_COLS / 2];
  for (int l = 0; l < used; l++) {
    for (int64_t q = 0; q < 2 * nv; q++) sums[l][q] = wasm_f64x2_splat(0.0);
  }
  for (int64_t i = 0; i < n; i++) {
    const char *row = in + i * si;
    const int64_t l = i & (OR_LANES - 1);
    switch (p->op) {
    case OR_SOFTMAX_SOFTMAX_BACKWARD:
      for (int64_t q = 0; q < nv; q++) cols_add(sums, l, q, wasm_f32x4_mul(cols_load(row, q, w), cols_load(y + i * sy, q, w)));
      break;
    case OR_SOFTMAX_LOG_SOFTMAX_BACKWARD:
      for (int64_t q = 0; q < nv; q++) cols_add(sums, l, q, cols_load(row, q, w));
      break;
    default: /* the forward ops */
      for (int64_t q = 0; q < nv; q++) {
        const v128_t e = v_exp_f32(wasm_f32x4_sub(cols_load(row, q, w), max[q]));
        if (keep) cols_store(out + i * so, q, w, e);
        cols_add(sums, l, q, e);
      }
      break;
    }
  }
  /* lanes_total's pairs, two lines at a time */
  const int64_t tail = n & (OR_LANES - 1);
  for (int64_t q = 0; q < 2 * nv; q++) {
    v128_t t[OR_LANES];
    for (int l = 0; l < OR_LANES; l++) {
      t[l] = l < used ? sums[l][q] : wasm_f64x2_splat(0.0);
      if (tail != 0 && l >= tail) t[l] = wasm_f64x2_add(t[l], wasm_f64x2_splat(0.0)); /* lane_sums_F32's padding */
    }
    for (int h = OR_LANES / 2; h >= 1; h /= 2) {
      for (int l = 0; l < h; l++) t[l] = wasm_f64x2_add(t[2 * l], t[2 * l + 1]);
    }
    total[2 * q] = (float)wasm_f64x2_extract_lane(t[0], 0);
    total[2 * q + 1] = (float)wasm_f64x2_extract_lane(t[0], 1);
  }
}

/* The result's pass, from each line's max, total, log of the total and its
 * reciprocal (as line_F32 computes them). */
NOINLINE static void cols_result_f32(const or_reduce *p, const char *in, const char *y, char *out, int64_t w,
                                     const v128_t max[OR_COLS / 4], const float total[OR_COLS],
                                     const float log_total[OR_COLS], const float scale[OR_COLS]) {
  const int64_t n = p->sizes[0], nv = (w + 3) / 4;
  const int64_t si = p->strides[OR_REDUCE_IN][0], so = p->strides[OR_REDUCE_OUT0][0];
  const int64_t sy = p->strides[OR_REDUCE_OUT1][0];
  for (int64_t i = 0; i < n; i++) {
    const char *row = in + i * si;
    char *dst = out + i * so;
    switch (p->op) {
    case OR_SOFTMAX_LOG_SOFTMAX:
      for (int64_t q = 0; q < nv; q++) {
        const v128_t x = wasm_f32x4_sub(cols_load(row, q, w), max[q]);
        cols_store(dst, q, w, wasm_f32x4_sub(x, wasm_v128_load(log_total + 4 * q)));
      }
      break;
    case OR_SOFTMAX_SOFTMAX_BACKWARD:
      for (int64_t q = 0; q < nv; q++) {
        const v128_t d = wasm_f32x4_sub(cols_load(row, q, w), wasm_v128_load(total + 4 * q));
        cols_store(dst, q, w, wasm_f32x4_mul(cols_load(y + i * sy, q, w), d));
      }
      break;
    case OR_SOFTMAX_LOG_SOFTMAX_BACKWARD:
      for (int64_t q = 0; q < nv; q++) {
        const v128_t e = wasm_f32x4_mul(v_exp_f32(cols_load(y + i * sy, q, w)), wasm_v128_load(total + 4 * q));
        cols_store(dst, q, w, wasm_f32x4_sub(cols_load(row, q, w), e));
      }
      break;
    default: /* softmax: exp(x - max), stored by the sums' pass, times the scale */
      for (int64_t q = 0; q < nv; q++) cols_store(dst, q, w, wasm_f32x4_mul(cols_load(dst, q, w), wasm_v128_load(scale + 4 * q)));
      break;
    }
  }
}

/* w lines side by side, all operands float32 (see OR_COLS). */
static void columns_f32(const or_reduce *p, const char *in, char *y, char *out, int64_t w) {
  const int forward = p->op != OR_SOFTMAX_SOFTMAX_BACKWARD && p->op != OR_SOFTMAX_LOG_SOFTMAX_BACKWARD;
  v128_t max[OR_COLS / 4];
  /* per line; entries from w up to a whole vector are padding, never stored */
  const int64_t w4 = (w + 3) & ~(int64_t)3;
  float lines_max[OR_COLS], total[OR_COLS], log_total[OR_COLS], scale[OR_COLS];
  if (forward) {
    cols_max_f32(in, p->strides[OR_REDUCE_IN][0], p->sizes[0], w, max);
    for (int64_t c = 0; c < w4; c++) {
      const float m = ((const float *)max)[c];
      lines_max[c] = p->op == OR_SOFTMAX_LOGSUMEXP ? LSE_SHIFT(m) : m;
    }
    for (int64_t q = 0; q < w4 / 4; q++) max[q] = wasm_v128_load(lines_max + 4 * q);
  }
  const int softmax = p->op == OR_SOFTMAX_SOFTMAX || p->op == OR_SOFTMAX_SOFTMAX_LOGSUMEXP;
  cols_sums_f32(p, in, y, out, w, max, softmax, total);
  if (softmax) {
    for (int64_t c = 0; c < w4; c++) scale[c] = 1.0f / total[c];
  }
  if (forward && p->op != OR_SOFTMAX_SOFTMAX) {
    /* one at a time, as line_F32 takes it: a vectorized m_log_f32 could
     * fuse its multiply-adds (relaxed SIMD) where the scalar one rounds twice */
    _Pragma("clang loop vectorize(disable)") for (int64_t c = 0; c < w4; c++) log_total[c] = m_log_f32(total[c]);
  }
  if (p->op == OR_SOFTMAX_LOGSUMEXP) {
    for (int64_t c = 0; c < w; c++) *(float *)(out + 4 * c) = log_total[c] + lines_max[c];
    return;
  }
  if (p->op == OR_SOFTMAX_SOFTMAX_LOGSUMEXP) {
    for (int64_t c = 0; c < w; c++) *(float *)(y + 4 * c) = LSE_VALUE(lines_max[c], log_total[c]);
  }
  cols_result_f32(p, in, y, out, w, max, total, log_total, scale);
}

EXPORT(softmax) void softmax(const or_reduce *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  or_reduce part = *params;
  const or_reduce *p = &part;
  if (p->op >= OR_SOFTMAX_COUNT || p->ndim > OR_MAX_DIMS || p->ndim < 1 || p->nreduce != 1 ||
      (p->compute != OR_COMPUTE_F32 && p->compute != OR_COMPUTE_F64)) {
    TRAP();
  }
  /* Lines are split, never a line. */
  if (workers > 1 && p->ndim > 1 &&
      !RESTRICT_BOX(part, OR_REDUCE_OPERANDS, split_dim(part.sizes, 1, part.ndim, workers), worker, workers)) {
    return;
  }
  if (workers > 1 && p->ndim == 1 && worker > 0) {
    return;
  }
  const int backward = p->op == OR_SOFTMAX_SOFTMAX_BACKWARD || p->op == OR_SOFTMAX_LOG_SOFTMAX_BACKWARD;
  const int has_out1 = backward || p->op == OR_SOFTMAX_SOFTMAX_LOGSUMEXP;
  (void)dtype_size(p->dtypes[OR_REDUCE_IN]);
  (void)dtype_size(p->dtypes[OR_REDUCE_OUT0]);
  if (has_out1) {
    (void)dtype_size(p->dtypes[OR_REDUCE_OUT1]);
  }
  for (uint32_t d = 0; d < p->ndim; d++) {
    if (p->sizes[d] <= 0) {
      return;
    }
  }
  const char *in = device_ptr(p->data[OR_REDUCE_IN]);
  char *y = has_out1 ? device_ptr(p->data[OR_REDUCE_OUT1]) : 0;
  char *out = device_ptr(p->data[OR_REDUCE_OUT0]);
  int64_t counter[OR_MAX_DIMS] = {0};
  const int contig_f32 = p->compute == OR_COMPUTE_F32 && p->dtypes[OR_REDUCE_IN] == OR_F32 &&
                         p->dtypes[OR_REDUCE_OUT0] == OR_F32 && p->strides[OR_REDUCE_IN][0] == 4 &&
                         (p->strides[OR_REDUCE_OUT0][0] == 4 || p->op == OR_SOFTMAX_LOGSUMEXP) &&
                         (!backward || (p->dtypes[OR_REDUCE_OUT1] == OR_F32 && p->strides[OR_REDUCE_OUT1][0] == 4)) &&
                         (p->op != OR_SOFTMAX_SOFTMAX_LOGSUMEXP || p->dtypes[OR_REDUCE_OUT1] == OR_F32);
  /* float32 lines side by side along dimension 1 (see OR_COLS) */
  const int cols = !contig_f32 && p->compute == OR_COMPUTE_F32 && p->ndim > 1 && p->dtypes[OR_REDUCE_IN] == OR_F32 &&
                   p->dtypes[OR_REDUCE_OUT0] == OR_F32 && p->strides[OR_REDUCE_IN][1] == 4 &&
                   p->strides[OR_REDUCE_OUT0][1] == 4 &&
                   (!has_out1 || (p->dtypes[OR_REDUCE_OUT1] == OR_F32 && p->strides[OR_REDUCE_OUT1][1] == 4));
  for (;;) {
    if (cols) {
      for (int64_t c = 0; c < p->sizes[1]; c += OR_COLS) {
        const int64_t w = p->sizes[1] - c < OR_COLS ? p->sizes[1] - c : OR_COLS;
        columns_f32(p, in + 4 * c, has_out1 ? y + 4 * c : 0, out + 4 * c, w);
      }
    } else if (contig_f32) {
      line_contig_f32(p, (const float *)in, (float *)y, (float *)out);
    } else if (p->compute == OR_COMPUTE_F32) {
      line_F32(p, in, y, out);
    } else {
      line_F64(p, in, y, out);
    }
    uint32_t d = cols ? 2 : 1;
    for (; d < p->ndim; d++) {
      in += p->strides[OR_REDUCE_IN][d];
      out += p->strides[OR_REDUCE_OUT0][d];
      y += has_out1 ? p->strides[OR_REDUCE_OUT1][d] : 0;
      if (++counter[d] < p->sizes[d]) {
        break;
      }
      in -= p->strides[OR_REDUCE_IN][d] * p->sizes[d];
      out -= p->strides[OR_REDUCE_OUT0][d] * p->sizes[d];
      y -= has_out1 ? p->strides[OR_REDUCE_OUT1][d] * p->sizes[d] : 0;
      counter[d] = 0;
    }
    if (d >= p->ndim) {
      return;
    }
  }
}

#pragma clang attribute pop
