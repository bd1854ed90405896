/*
 * 2-d pooling (`pool` kernel, or_pool in openreg_engine.h): max and average
 * pooling and their backward ops, one launch each, over dense planes, and
 * convolution's im2col and col2im over the same windows. Every
 * output walks its window in CPU's order (rows, then columns), so maxima,
 * their indices and sums are CPU's bit for bit; workers take whole planes,
 * so nothing depends on how many there are. Compiled for wasm32 and wasm64
 * with the rest of the engine.
 */
#include "dtype.h"

#include <wasm_simd128.h>

/* One output's window along one dimension: positions start, start + dil, ...
 * below end, all inside the input. */
typedef struct span {
  int64_t start, end;
} span;

/* Max pooling's window (CPU's): the first position inside the input, and the
 * end of the dilated window clipped to it. */
ALWAYS_INLINE span max_span(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t dil, int64_t in) {
  int64_t start = o * stride - pad;
  const int64_t end = start + (k - 1) * dil + 1;
  while (start < 0) {
    start += dil;
  }
  return (span){start, end < in ? end : in};
}

/* Average pooling's window, and its size inside the padded input. */
ALWAYS_INLINE span avg_span(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t in, int64_t *padded) {
  const int64_t start = o * stride - pad;
  const int64_t end = start + k < in + pad ? start + k : in + pad;
  *padded = end - start;
  return (span){start > 0 ? start : 0, end < in ? end : in};
}

/* The window's parameters as locals: the kernels' stores (int64 indices)
 * could otherwise alias the block, and every field would be reloaded per
 * output. */
typedef struct window {
  int64_t H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
} window;

ALWAYS_INLINE window window_of(const or_pool *p) {
  return (window){p->height,    p->width,     p->out_height, p->out_width,  p->kernel[0],   p->kernel[1],
                  p->stride[0], p->stride[1], p->padding[0], p->padding[1], p->dilation[0], p->dilation[1]};
}

/* Windows are a few elements wide: vectorizing their loops (or the loops
 * over outputs) only adds set-up per output. Each plane loop is a function
 * of its own (NOINLINE, dtype.h). */
/* Outputs of a row handled together by max pooling (its maxima and indices
 * live on the stack). */
#define ROW 256
#define SCALAR _Pragma("clang loop vectorize(disable) interleave(disable)")

/* Four outputs of a row at once (float32): each takes its candidate when
 * it is greater or NaN, by a bit select rather than a branch (a branch on
 * data mispredicts half the time). Returns where the scalar loop goes on. */
static int64_t take4_f32(window g, const float *row, int64_t ih, int64_t c0, int64_t lo, int64_t hi, int64_t off,
                         float *best, int64_t *at) {
  int64_t k = lo;
  for (; k + 4 <= hi; k += 4) {
    const int64_t c = (c0 + k) * g.sw + off;
    const v128_t v = wasm_f32x4_make(row[c], row[c + g.sw], row[c + 2 * g.sw], row[c + 3 * g.sw]);
    const v128_t b = wasm_v128_load(best + k);
    const v128_t take = wasm_v128_or(wasm_f32x4_gt(v, b), wasm_f32x4_ne(v, v));
    wasm_v128_store(best + k, wasm_v128_bitselect(v, b, take));
    const int64_t i = ih * g.W + c;
    const v128_t lo2 = wasm_i64x2_make(i, i + g.sw), hi2 = wasm_i64x2_make(i + 2 * g.sw, i + 3 * g.sw);
    wasm_v128_store(at + k, wasm_v128_bitselect(lo2, wasm_v128_load(at + k), wasm_i64x2_extend_low_i32x4(take)));
    wasm_v128_store(at + k + 2,
                    wasm_v128_bitselect(hi2, wasm_v128_load(at + k + 2), wasm_i64x2_extend_high_i32x4(take)));
  }
  return k;
}
#define TAKE4_F32(g, row, ih, c0, lo, hi, off, best, at) take4_f32(g, row, ih, c0, lo, hi, off, best, at)
#define TAKE4_NONE(g, row, ih, c0, lo, hi, off, best, at) (lo)

/* Takes candidate v (window offset `off` in the plane) for the lanes where
 * it is greater than best or NaN. */
#define MAX2_TAKE(v, off)                                                                    \
  {                                                                                          \
    const v128_t take = wasm_v128_or(wasm_f32x4_gt(v, best), wasm_f32x4_ne(v, v));           \
    best = wasm_v128_bitselect(v, best, take);                                               \
    at = wasm_v128_bitselect(wasm_i32x4_splat(off), at, take);                               \
  }

/* Max pooling over 2 x 2 windows with stride 2, no padding, no dilation, all
 * inside the input (float32): the common case (7-9 ns per output through
 * the generic loop, as slow as CPU's kernel). Four outputs at a time from
 * two vectors of each of the window's input rows, split into even and odd
 * columns, the candidates in CPU's order with the generic loop's rule: the
 * first, then each one that is greater or NaN. */
NOINLINE static void max_plane_2x2_f32(window g, const float *restrict in, float *restrict out,
                                       int64_t *restrict index) {
  const int32_t W = (int32_t)g.W;
  for (int64_t oh = 0; oh < g.OH; oh++) {
    const float *r0 = in + 2 * oh * g.W, *r1 = r0 + g.W;
    float *o = out + oh * g.OW;
    int64_t *x = index + oh * g.OW;
    int64_t k = 0;
    for (; k + 4 <= g.OW; k += 4) {
      const v128_t a0 = wasm_v128_load(r0 + 2 * k), a1 = wasm_v128_load(r0 + 2 * k + 4);
      const v128_t b0 = wasm_v128_load(r1 + 2 * k), b1 = wasm_v128_load(r1 + 2 * k + 4);
      v128_t best = wasm_i32x4_shuffle(a0, a1, 0, 2, 4, 6);
      v128_t at = wasm_i32x4_splat(0);
      const v128_t a_odd = wasm_i32x4_shuffle(a0, a1, 1, 3, 5, 7);
      const v128_t b_even = wasm_i32x4_shuffle(b0, b1, 0, 2, 4, 6);
      const v128_t b_odd = wasm_i32x4_shuffle(b0, b1, 1, 3, 5, 7);
      MAX2_TAKE(a_odd, 1)
      MAX2_TAKE(b_even, W)
      MAX2_TAKE(b_odd, W + 1)
      wasm_v128_store(o + k, best);
      const int64_t i0 = 2 * oh * g.W + 2 * k;
      const v128_t base_lo = wasm_i64x2_make(i0, i0 + 2), base_hi = wasm_i64x2_make(i0 + 4, i0 + 6);
      wasm_v128_store(x + k, wasm_i64x2_add(base_lo, wasm_i64x2_extend_low_i32x4(at)));
      wasm_v128_store(x + k + 2, wasm_i64x2_add(base_hi, wasm_i64x2_extend_high_i32x4(at)));
    }
    SCALAR for (; k < g.OW; k++) {
      const float c[4] = {r0[2 * k], r0[2 * k + 1], r1[2 * k], r1[2 * k + 1]};
      const int64_t offs[4] = {0, 1, g.W, g.W + 1};
      float b = c[0];
      int64_t i = 0;
      for (int q = 1; q < 4; q++) {
        if (c[q] > b || c[q] != c[q]) {
          b = c[q];
          i = offs[q];
        }
      }
      o[k] = b;
      x[k] = 2 * oh * g.W + 2 * k + i;
    }
  }
}

/* Whether the windows are 2 x 2 with stride 2, no padding, no dilation, all inside the input. */
ALWAYS_INLINE int windows_2x2(window g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 && g.dh == 1 && g.dw == 1 &&
         2 * g.OH <= g.H && 2 * g.OW <= g.W && g.W < (1 << 30);
}

/* Runs max_plane_2x2_f32 when the windows allow it; false when they do not. */
ALWAYS_INLINE int max_2x2_f32(window g, const float *in, float *out, int64_t *index) {
  if (!windows_2x2(g)) {
    return 0;
  }
  max_plane_2x2_f32(g, in, out, index);
  return 1;
}
#define MAX2X2_F32(g, in, out, index) max_2x2_f32(g, (const float *)(in), (float *)(out), index)
#define MAX2X2_NONE(g, in, out, index) 0

/* The gradient of that pooling: the four inputs of four windows at a
 * time, each 0 + the output's gradient where its index points, else 0 (the
 * windows do not overlap, so nothing else adds up; 0 + g as the
 * scatter-add computes it, -0 included). Zeroing the plane and scattering
 * one by one, an int64 index and a bounds check each, took 3x CPU's time.
 * False when an index lies outside its window (indices a caller made). */
NOINLINE static int max_backward_plane_2x2_f32(window g, const float *restrict grad, float *restrict out,
                                               const int64_t *restrict index) {
  const int32_t W = (int32_t)g.W;
  const v128_t zero = wasm_f32x4_splat(0.0f), w0 = wasm_i32x4_splat(W), w1 = wasm_i32x4_splat(W + 1);
  v128_t valid = wasm_i32x4_splat(-1);
  for (int64_t oh = 0; oh < g.OH; oh++) {
    float *r0 = out + 2 * oh * g.W, *r1 = r0 + g.W;
    const float *gr = grad + oh * g.OW;
    const int64_t *x = index + oh * g.OW;
    int64_t k = 0;
    for (; k + 4 <= g.OW; k += 4) {
      const int64_t i0 = 2 * oh * g.W + 2 * k;
      const v128_t lo = wasm_i64x2_sub(wasm_v128_load(x + k), wasm_i64x2_make(i0, i0 + 2));
      const v128_t hi = wasm_i64x2_sub(wasm_v128_load(x + k + 2), wasm_i64x2_make(i0 + 4, i0 + 6));
      const v128_t rel = wasm_i32x4_shuffle(lo, hi, 0, 2, 4, 6), high = wasm_i32x4_shuffle(lo, hi, 1, 3, 5, 7);
      const v128_t tl = wasm_i32x4_eq(rel, wasm_i32x4_splat(0)), tr = wasm_i32x4_eq(rel, wasm_i32x4_splat(1));
      const v128_t bl = wasm_i32x4_eq(rel, w0), br = wasm_i32x4_eq(rel, w1);
      valid = wasm_v128_and(valid, wasm_v128_and(wasm_v128_or(wasm_v128_or(tl, tr), wasm_v128_or(bl, br)),
                                                 wasm_i32x4_eq(high, wasm_i32x4_splat(0))));
      const v128_t gv = wasm_v128_load(gr + k);
      const v128_t a = wasm_f32x4_add(zero, wasm_v128_and(gv, tl)), b = wasm_f32x4_add(zero, wasm_v128_and(gv, tr));
      const v128_t c = wasm_f32x4_add(zero, wasm_v128_and(gv, bl)), d = wasm_f32x4_add(zero, wasm_v128_and(gv, br));
      wasm_v128_store(r0 + 2 * k, wasm_i32x4_shuffle(a, b, 0, 4, 1, 5));
      wasm_v128_store(r0 + 2 * k + 4, wasm_i32x4_shuffle(a, b, 2, 6, 3, 7));
      wasm_v128_store(r1 + 2 * k, wasm_i32x4_shuffle(c, d, 0, 4, 1, 5));
      wasm_v128_store(r1 + 2 * k + 4, wasm_i32x4_shuffle(c, d, 2, 6, 3, 7));
    }
    for (; k < g.OW; k++) {
      const int64_t rel = x[k] - (2 * oh * g.W + 2 * k);
      if (rel != 0 && rel != 1 && rel != g.W && rel != g.W + 1) {
        return 0;
      }
      r0[2 * k] = r0[2 * k + 1] = r1[2 * k] = r1[2 * k + 1] = 0.0f;
      r0[2 * k + rel] = 0.0f + gr[k];
    }
  }
  return wasm_i32x4_all_true(valid);
}

/* Runs max_backward_plane_2x2_f32 when the windows allow it, over a plane
 * not zeroed first (`pool` skips that for these windows: the windows cover
 * it but for an odd last row or column, zeroed here); false, the plane
 * zeroed, when an index lies outside its window, or when the windows are
 * others (the plane zeroed by the caller). */
ALWAYS_INLINE int max_backward_2x2_f32(window g, const float *grad, float *out, const int64_t *index) {
  if (!windows_2x2(g)) {
    return 0;
  }
  if (max_backward_plane_2x2_f32(g, grad, out, index)) {
    for (int64_t y = 0; y < 2 * g.OH; y++) {
      for (int64_t x = 2 * g.OW; x < g.W; x++) out[y * g.W + x] = 0.0f;
    }
    for (int64_t i = 2 * g.OH * g.W; i < g.H * g.W; i++) out[i] = 0.0f;
    return 1;
  }
  for (int64_t i = 0; i < g.H * g.W; i++) out[i] = 0.0f;
  return 0;
}
#define MAX2X2_BACKWARD_F32(g, in, out, index) \
  max_backward_2x2_f32(g, (const float *)(in), (float *)(out), index)

#define OR_DEFINE_POOL(S, T, LOWEST, ISNAN, TAKE4, MAX2X2, MAX2X2_BACKWARD)                                 \
  /* A row of outputs at a time, ROW at most: for each window position (ih,     \
   * j), in CPU's order, every output of the row whose column lies inside       \
   * the input takes its candidate. */                                          \
  NOINLINE static void max_plane_##S(window g, const T *restrict in, T *restrict out, int64_t *restrict index) { \
    T best[ROW];                                                                                             \
    int64_t at[ROW];                                                                                         \
    for (int64_t oh = 0; oh < g.OH; oh++) {                                                                  \
      const span h = max_span(oh, g.sh, g.ph, g.kh, g.dh, g.H);                                              \
      for (int64_t c0 = 0; c0 < g.OW; c0 += ROW) {                                                           \
        const int64_t n = g.OW - c0 < ROW ? g.OW - c0 : ROW;                                                 \
        for (int64_t k = 0; k < n; k++) {                                                                    \
          best[k] = LOWEST;                                                                                  \
          at[k] = h.start * g.W + max_span(c0 + k, g.sw, g.pw, g.kw, g.dw, g.W).start;                       \
        }                                                                                                    \
        for (int64_t ih = h.start; ih < h.end; ih += g.dh) {                                                 \
          const T *row = in + ih * g.W;                                                                      \
          for (int64_t j = 0; j < g.kw; j++) {                                                               \
            const int64_t off = j * g.dw - g.pw; /* output ow reads column ow * sw + off */                  \
            if (off >= g.W) {                                                                                \
              break;                                                                                         \
            }                                                                                                \
            const int64_t first = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;                                   \
            const int64_t last = (g.W - 1 - off) / g.sw + 1;                                                 \
            const int64_t lo = first > c0 ? first - c0 : 0;                                                  \
            const int64_t hi = last < c0 + n ? last - c0 : n;                                                \
            int64_t k = TAKE4(g, row, ih, c0, lo, hi, off, best, at);                                        \
            SCALAR for (; k < hi; k++) {                                                                     \
              const int64_t col = (c0 + k) * g.sw + off;                                                     \
              const T v = row[col];                                                                          \
              const int take = v > best[k] || ISNAN(v);                                                      \
              best[k] = take ? v : best[k];                                                                  \
              at[k] = take ? ih * g.W + col : at[k];                                                         \
            }                                                                                                \
          }                                                                                                  \
        }                                                                                                    \
        for (int64_t k = 0; k < n; k++) {                                                                    \
          out[oh * g.OW + c0 + k] = best[k];                                                                 \
          index[oh * g.OW + c0 + k] = at[k];                                                                 \
        }                                                                                                    \
      }                                                                                                      \
    }                                                                                                        \
  }                                                                                                          \
                                                                                                             \
  /* grad (OH x OW) added at each output's index into the zeroed plane */                                   \
  NOINLINE static void max_backward_plane_##S(window g, const T *restrict grad, T *restrict out,                     \
                                     const int64_t *restrict index) {                                        \
    const int64_t n = g.OH * g.OW, plane = g.H * g.W;                                                        \
    SCALAR for (int64_t o = 0; o < n; o++) {                                                                        \
      const int64_t at = index[o];                                                                           \
      if (at < 0 || at >= plane) {                                                                           \
        TRAP(); /* an index outside the plane */                                                             \
      }                                                                                                      \
      out[at] += grad[o];                                                                                    \
    }                                                                                                        \
  }                                                                                                          \
                                                                                                             \
  /* Sums (forward) or shares of the gradient (backward) over each window */                                \
  NOINLINE static void avg_plane_##S(const or_pool *p, window g, const T *restrict in, T *restrict out, int backward) { \
    const int64_t divisor = p->divisor;                                                                      \
    const int include_pad = p->count_include_pad != 0;                                                       \
    for (int64_t oh = 0; oh < g.OH; oh++) {                                                                  \
      int64_t padded_h;                                                                                      \
      const span h = avg_span(oh, g.sh, g.ph, g.kh, g.H, &padded_h);                                         \
      SCALAR for (int64_t ow = 0; ow < g.OW; ow++) {                                                                \
        int64_t padded_w;                                                                                    \
        const span w = avg_span(ow, g.sw, g.pw, g.kw, g.W, &padded_w);                                       \
        const int64_t o = oh * g.OW + ow;                                                                    \
        if (h.start >= h.end || w.start >= w.end) {                                                          \
          if (!backward) {                                                                                   \
            out[o] = 0;                                                                                      \
          }                                                                                                  \
          continue;                                                                                          \
        }                                                                                                    \
        const T d = (T)(divisor != 0 ? divisor                                                               \
                                     : include_pad ? padded_h * padded_w : (h.end - h.start) * (w.end - w.start)); \
        if (backward) {                                                                                      \
          const T share = in[o] / d;                                                                         \
          for (int64_t ih = h.start; ih < h.end; ih++) {                                                     \
            SCALAR for (int64_t iw = w.start; iw < w.end; iw++) {                                                   \
              out[ih * g.W + iw] += share;                                                                   \
            }                                                                                                \
          }                                                                                                  \
        } else {                                                                                             \
          T sum = 0;                                                                                         \
          for (int64_t ih = h.start; ih < h.end; ih++) {                                                     \
            SCALAR for (int64_t iw = w.start; iw < w.end; iw++) {                                                   \
              sum += in[ih * g.W + iw];                                                                      \
            }                                                                                                \
          }                                                                                                  \
          out[o] = sum / d;                                                                                  \
        }                                                                                                    \
      }                                                                                                      \
    }                                                                                                        \
  }                                                                                                          \
                                                                                                             \
  static void pool_plane_##S(const or_pool *p, const char *in, char *out, int64_t *index) {                 \
    const window g = window_of(p);                                                                           \
    switch (p->op) {                                                                                         \
    case OR_POOL_MAX:                                                                                        \
      if (!MAX2X2(g, in, out, index)) {                                                                      \
        max_plane_##S(g, (const T *)in, (T *)out, index);                                                    \
      }                                                                                                      \
      return;                                                                                                \
    case OR_POOL_MAX_BACKWARD:                                                                               \
      if (!MAX2X2_BACKWARD(g, in, out, index)) {                                                             \
        max_backward_plane_##S(g, (const T *)in, (T *)out, index);                                           \
      }                                                                                                      \
      return;                                                                                                \
    default:                                                                                                 \
      avg_plane_##S(p, g, (const T *)in, (T *)out, p->op == OR_POOL_AVG_BACKWARD);                           \
      return;                                                                                                \
    }                                                                                                        \
  }

#define FLOAT_ISNAN(v) ((v) != (v))
#define INT_ISNAN(v) 0
OR_DEFINE_POOL(F32, float, -__builtin_inff(), FLOAT_ISNAN, TAKE4_F32, MAX2X2_F32, MAX2X2_BACKWARD_F32)
OR_DEFINE_POOL(F64, double, -__builtin_inf(), FLOAT_ISNAN, TAKE4_NONE, MAX2X2_NONE, MAX2X2_NONE)
OR_DEFINE_POOL(I64, int64_t, INT64_MIN, INT_ISNAN, TAKE4_NONE, MAX2X2_NONE, MAX2X2_NONE)

/* ---- im2col and col2im (the IM2COL and COL2IM ops) ----
 *
 * A window position (i, j) reads input column x = ox * sw - pw + j * dw for
 * output column ox: `inside` gives the ox range [lo, hi) whose x lies in
 * [0, W). */
ALWAYS_INLINE void inside(int64_t x0, int64_t sw, int64_t W, int64_t OW, int64_t *lo, int64_t *hi) {
  int64_t a = x0 >= 0 ? 0 : (-x0 + sw - 1) / sw;
  int64_t b = W - x0 <= 0 ? 0 : (W - x0 + sw - 1) / sw;
  a = a < OW ? a : OW;
  b = b < OW ? b : OW;
  *lo = a;
  *hi = b > a ? b : a;
}

/* The padding's zeros are a few elements per row: as memory.fill (a call
 * into the runtime) they would cost more than the row. */
#define NO_FILL __attribute__((no_builtin("memset")))

/* Runs the body (the arguments after g) for each row of a plane's
 * columns, window positions (i, j) in order, then output rows oy: k counts
 * the rows, y is the image row the row reads, x0 the image column of its
 * output column 0, and [lo, hi) the output columns whose image column lies
 * inside the image. */
#define FOR_WINDOW_ROWS(g, ...)                                                                         \
  for (int64_t i = 0, k = 0; i < g.kh; i++) {                                                           \
    for (int64_t j = 0; j < g.kw; j++) {                                                                \
      const int64_t x0 = j * g.dw - g.pw;                                                               \
      int64_t lo, hi;                                                                                   \
      inside(x0, g.sw, g.W, g.OW, &lo, &hi);                                                            \
      for (int64_t oy = 0; oy < g.OH; oy++, k++) {                                                      \
        const int64_t y = oy * g.sh - g.ph + i * g.dh;                                                  \
        __VA_ARGS__                                                                                     \
      }                                                                                                 \
    }                                                                                                   \
  }

/* cols[i][j][oy][ox] (kh x kw x OH x OW) = image[y][x] at y = oy * sh - ph +
 * i * dh, x = ox * sw - pw + j * dw, or 0 outside the image: a copy of
 * elements of type U (any dtype of U's size). */
#define OR_DEFINE_IM2COL(U)                                                                             \
  NOINLINE NO_FILL static void im2col_plane_##U(window g, const U *restrict in, U *restrict cols) {     \
    FOR_WINDOW_ROWS(g, {                                                                                \
      U *out = cols + k * g.OW;                                                                         \
      if (y < 0 || y >= g.H) {                                                                          \
        for (int64_t ox = 0; ox < g.OW; ox++) out[ox] = 0;                                              \
        continue;                                                                                       \
      }                                                                                                 \
      const int64_t base = y * g.W + x0; /* + ox * sw: inside the plane for ox in [lo, hi) */           \
      for (int64_t ox = 0; ox < lo; ox++) out[ox] = 0;                                                  \
      if (g.sw == 1) {                                                                                  \
        copy_bytes(out + lo, in + base + lo, (usize)(hi - lo) * sizeof(U));                             \
      } else {                                                                                          \
        for (int64_t ox = lo; ox < hi; ox++) out[ox] = in[base + ox * g.sw];                            \
      }                                                                                                 \
      for (int64_t ox = hi; ox < g.OW; ox++) out[ox] = 0;                                               \
    })                                                                                                  \
  }
OR_DEFINE_IM2COL(uint16_t)
OR_DEFINE_IM2COL(uint32_t)
OR_DEFINE_IM2COL(uint64_t)

/* image[y][x] (zeroed by the caller) += cols[i][j][oy][ox] for every window
 * position (i, j) in order and output (oy, ox) that reads (y, x): each
 * element sums its terms in window order, as one strided add per window
 * position would. */
#define OR_DEFINE_COL2IM(S, T)                                                                          \
  NOINLINE NO_FILL static void col2im_plane_##S(window g, const T *restrict cols, T *restrict out) {    \
    FOR_WINDOW_ROWS(g, {                                                                                \
      const T *in = cols + k * g.OW;                                                                    \
      if (y < 0 || y >= g.H) continue;                                                                  \
      const int64_t base = y * g.W + x0;                                                                \
      if (g.sw == 1) {                                                                                  \
        for (int64_t ox = lo; ox < hi; ox++) out[base + ox] += in[ox];                                  \
      } else {                                                                                          \
        for (int64_t ox = lo; ox < hi; ox++) out[base + ox * g.sw] += in[ox];                           \
      }                                                                                                 \
    })                                                                                                  \
  }
OR_DEFINE_COL2IM(F32, float)
OR_DEFINE_COL2IM(F64, double)

/* ---- Winograd F(2x2, 3x3) (the WINOGRAD_* ops, or_pool) ----
 *
 * Float32 only. Workers split planes; each output element is one fixed
 * expression of its inputs, so nothing depends on how many workers. */

/* U = G g G^T for each 3 x 3 kernel g (rotated by 180 degrees if rotated),
 * element xi at xi * planes + q. */
static void winograd_weight(const float *in, float *out, int64_t planes, int64_t lo, int64_t hi, int rotated) {
  for (int64_t q = lo; q < hi; q++) {
    float g[3][3];
    for (int r = 0; r < 3; r++) {
      for (int c = 0; c < 3; c++) {
        g[r][c] = rotated ? in[q * 9 + (2 - r) * 3 + (2 - c)] : in[q * 9 + r * 3 + c];
      }
    }
    float gg[4][3]; /* G g */
    for (int c = 0; c < 3; c++) {
      gg[0][c] = g[0][c];
      gg[1][c] = (g[0][c] + g[1][c] + g[2][c]) * 0.5f;
      gg[2][c] = (g[0][c] - g[1][c] + g[2][c]) * 0.5f;
      gg[3][c] = g[2][c];
    }
    for (int i = 0; i < 4; i++) {
      const float u[4] = {gg[i][0], (gg[i][0] + gg[i][1] + gg[i][2]) * 0.5f, (gg[i][0] - gg[i][1] + gg[i][2]) * 0.5f,
                          gg[i][2]};
      for (int j = 0; j < 4; j++) {
        out[(4 * i + j) * planes + q] = u[j];
      }
    }
  }
}

/* Tiles of a tile row transformed per pass: their input rows are staged in
 * a zero-padded buffer, so the transform needs no bounds checks. */
#define WINO_CHUNK 64
#define WINO_ROW (2 * WINO_CHUNK + 4)

/* Stores the first n (at most 4) lanes of v at o. */
ALWAYS_INLINE void store_lanes(float *o, v128_t v, int64_t n) {
  if (n >= 4) {
    wasm_v128_store(o, v);
    return;
  }
  float lane[4] __attribute__((aligned(16)));
  wasm_v128_store(lane, v);
  for (int64_t e = 0; e < n; e++) o[e] = lane[e];
}

/* row[u] = src[x0 + u] for u < n, 0 where x0 + u lies outside [0, W) or
 * src is null (a row outside the plane). */
ALWAYS_INLINE void stage_row(float *restrict row, const float *restrict src, int64_t x0, int64_t W, int64_t n) {
  int64_t u = 0;
  if (src) {
    for (; u < n && x0 + u < 0; u++) row[u] = 0;
    const int64_t end = W - x0 < n ? W - x0 : n;
    for (; u + 4 <= end; u += 4) wasm_v128_store(row + u, wasm_v128_load(src + x0 + u));
    for (; u < end; u++) row[u] = src[x0 + u];
  }
  for (; u < n; u++) row[u] = 0;
}

/* The input transform of one plane: `out` is the plane's tile 0 of xi = 0;
 * xi steps by `step` elements. A tile row's four image rows are staged
 * zero-padded, in a ring of four: the next tile row shares two of them, so
 * it stages only two. Then four tiles at a time, their columns 2t .. 2t + 11
 * of the four rows are combined down (B^T d) in registers, and across as
 * the even and odd lanes of three vectors (d B). 256 planes of 16 x 16 on
 * one worker: 122 us; 175 staging all four rows per tile row with a copy
 * call each; 208 combining whole rows first, through a buffer. */
NOINLINE NO_FILL static void winograd_input_plane(window g, const float *restrict in, float *restrict out,
                                                  int64_t step) {
  float ring[4][WINO_ROW] __attribute__((aligned(16)));
  for (int64_t tx0 = 0; tx0 < g.OW; tx0 += WINO_CHUNK) {
    const int64_t nt = g.OW - tx0 < WINO_CHUNK ? g.OW - tx0 : WINO_CHUNK;
    const int64_t need = 2 * ((nt + 3) & ~(int64_t)3) + 4; /* columns the tile loop reads */
    const int64_t x0 = 2 * tx0 - g.pw;                       /* the image column of a staged row's [0] */
    for (int64_t ty = 0; ty < g.OH; ty++) {
      /* image row 2 ty - ph + r lives in ring[(2 ty + r) % 4] */
      for (int r = ty == 0 ? 0 : 2; r < 4; r++) {
        const int64_t y = 2 * ty - g.ph + r;
        stage_row(ring[(2 * ty + r) % 4], y >= 0 && y < g.H ? in + y * g.W : 0, x0, g.W, need);
      }
      const float *rows[4];
      for (int r = 0; r < 4; r++) rows[r] = ring[(2 * ty + r) % 4];
      float *dst = out + ty * g.OW + tx0;
      for (int64_t t = 0; t < nt; t += 4) {
        /* columns 2t .. 2t + 11 of the four rows, combined down (B^T d) */
        v128_t c[4][3];
        for (int k = 0; k < 3; k++) {
          const v128_t r0 = wasm_v128_load(rows[0] + 2 * t + 4 * k), r1 = wasm_v128_load(rows[1] + 2 * t + 4 * k);
          const v128_t r2 = wasm_v128_load(rows[2] + 2 * t + 4 * k), r3 = wasm_v128_load(rows[3] + 2 * t + 4 * k);
          c[0][k] = wasm_f32x4_sub(r0, r2);
          c[1][k] = wasm_f32x4_add(r1, r2);
          c[2][k] = wasm_f32x4_sub(r2, r1);
          c[3][k] = wasm_f32x4_sub(r1, r3);
        }
        for (int i = 0; i < 4; i++) {
          const v128_t a = c[i][0], b = c[i][1], e = c[i][2];
          const v128_t d0 = wasm_i32x4_shuffle(a, b, 0, 2, 4, 6), d1 = wasm_i32x4_shuffle(a, b, 1, 3, 5, 7);
          const v128_t d2 = wasm_i32x4_shuffle(d0, e, 1, 2, 3, 4), d3 = wasm_i32x4_shuffle(d1, e, 1, 2, 3, 5);
          const v128_t v[4] = {wasm_f32x4_sub(d0, d2), wasm_f32x4_add(d1, d2), wasm_f32x4_sub(d2, d1),
                               wasm_f32x4_sub(d1, d3)};
          for (int j = 0; j < 4; j++) {
            store_lanes(dst + (4 * i + j) * step + t, v[j], nt - t);
          }
        }
      }
    }
  }
}

/* The output transform of one plane (height x width, g.OH x g.OW tiles):
 * `in` is the plane's tile 0 of xi = 0; xi steps by `step` elements. */
NOINLINE NO_FILL static void winograd_output_plane(window g, const float *restrict in, float *restrict out,
                                                   int64_t step) {
  for (int64_t ty = 0; ty < g.OH; ty++) {
    const float *src = in + ty * g.OW;
    float *top = out + 2 * ty * g.W;
    float *bottom = 2 * ty + 1 < g.H ? top + g.W : 0;
    for (int64_t t = 0; t < g.OW; t += 4) {
      const int64_t nt = g.OW - t < 4 ? g.OW - t : 4;
      v128_t s[2][4]; /* A^T m */
      for (int j = 0; j < 4; j++) {
        v128_t m[4];
        for (int i = 0; i < 4; i++) {
          const float *p = src + (4 * i + j) * step + t;
          if (nt == 4) {
            m[i] = wasm_v128_load(p);
          } else {
            float lane[4] __attribute__((aligned(16))) = {0, 0, 0, 0};
            for (int64_t e = 0; e < nt; e++) lane[e] = p[e];
            m[i] = wasm_v128_load(lane);
          }
        }
        s[0][j] = wasm_f32x4_add(wasm_f32x4_add(m[0], m[1]), m[2]);
        s[1][j] = wasm_f32x4_sub(wasm_f32x4_sub(m[1], m[2]), m[3]);
      }
      for (int i = 0; i < 2; i++) {
        float *row = i == 0 ? top : bottom;
        if (!row) break;
        const v128_t y0 = wasm_f32x4_add(wasm_f32x4_add(s[i][0], s[i][1]), s[i][2]);
        const v128_t y1 = wasm_f32x4_sub(wasm_f32x4_sub(s[i][1], s[i][2]), s[i][3]);
        const v128_t lo = wasm_i32x4_shuffle(y0, y1, 0, 4, 1, 5), hi = wasm_i32x4_shuffle(y0, y1, 2, 6, 3, 7);
        float *o = row + 2 * t;
        if (2 * t + 8 <= g.W) {
          wasm_v128_store(o, lo);
          wasm_v128_store(o + 4, hi);
        } else {
          float lane[8] __attribute__((aligned(16)));
          wasm_v128_store(lane, lo);
          wasm_v128_store(lane + 4, hi);
          for (int64_t e = 0; e < g.W - 2 * t; e++) o[e] = lane[e];
        }
      }
    }
  }
}

/* The adjoint of the weight transform, for the weight gradient: dW = G^T dU
 * G for each kernel's 16 elements dU (xi at xi * planes + q), written as a
 * plane of 3 x 3. */
static void winograd_weight_grad(const float *in, float *out, int64_t planes, int64_t lo, int64_t hi) {
  /* not vectorized: wasm64's overlap check would need a 128-bit multiply */
  SCALAR for (int64_t q = lo; q < hi; q++) {
    float u[4][4];
    for (int xi = 0; xi < 16; xi++) {
      u[xi / 4][xi % 4] = in[xi * planes + q];
    }
    float x[3][4]; /* G^T dU */
    for (int j = 0; j < 4; j++) {
      const float sum = (u[1][j] + u[2][j]) * 0.5f;
      x[0][j] = u[0][j] + sum;
      x[1][j] = (u[1][j] - u[2][j]) * 0.5f;
      x[2][j] = sum + u[3][j];
    }
    for (int r = 0; r < 3; r++) {
      const float sum = (x[r][1] + x[r][2]) * 0.5f;
      out[q * 9 + r * 3 + 0] = x[r][0] + sum;
      out[q * 9 + r * 3 + 1] = (x[r][1] - x[r][2]) * 0.5f;
      out[q * 9 + r * 3 + 2] = sum + x[r][3];
    }
  }
}

/* The adjoint of the output transform, for the weight gradient: each 2 x 2
 * tile dY of one gradient plane (height x width; 0 beyond its edges) as A
 * dY A^T. `out` is the plane's tile 0 of xi = 0; xi steps by `step`
 * elements. Four tiles at a time: a row's columns of tiles t .. t + 3 are
 * the even and odd lanes of two vectors of a staged, zero-padded row. */
NOINLINE NO_FILL static void winograd_grad_plane(window g, const float *restrict in, float *restrict out,
                                                 int64_t step) {
  float rows[2][2 * WINO_CHUNK] __attribute__((aligned(16)));
  for (int64_t ty = 0; ty < g.OH; ty++) {
    for (int64_t tx0 = 0; tx0 < g.OW; tx0 += WINO_CHUNK) {
      const int64_t nt = g.OW - tx0 < WINO_CHUNK ? g.OW - tx0 : WINO_CHUNK;
      const int64_t need = 2 * ((nt + 3) & ~(int64_t)3);
      for (int r = 0; r < 2; r++) {
        const int64_t y = 2 * ty + r;
        stage_row(rows[r], y < g.H ? in + y * g.W : 0, 2 * tx0, g.W, need);
      }
      float *dst = out + ty * g.OW + tx0;
      for (int64_t t = 0; t < nt; t += 4) {
        const v128_t a0 = wasm_v128_load(rows[0] + 2 * t), a1 = wasm_v128_load(rows[0] + 2 * t + 4);
        const v128_t b0 = wasm_v128_load(rows[1] + 2 * t), b1 = wasm_v128_load(rows[1] + 2 * t + 4);
        v128_t z[4][2]; /* A dY */
        for (int b = 0; b < 2; b++) {
          const v128_t y0 = b ? wasm_i32x4_shuffle(a0, a1, 1, 3, 5, 7) : wasm_i32x4_shuffle(a0, a1, 0, 2, 4, 6);
          const v128_t y1 = b ? wasm_i32x4_shuffle(b0, b1, 1, 3, 5, 7) : wasm_i32x4_shuffle(b0, b1, 0, 2, 4, 6);
          z[0][b] = y0;
          z[1][b] = wasm_f32x4_add(y0, y1);
          z[2][b] = wasm_f32x4_sub(y0, y1);
          z[3][b] = wasm_f32x4_neg(y1);
        }
        for (int i = 0; i < 4; i++) {
          const v128_t v[4] = {z[i][0], wasm_f32x4_add(z[i][0], z[i][1]), wasm_f32x4_sub(z[i][0], z[i][1]),
                               wasm_f32x4_neg(z[i][1])};
          for (int j = 0; j < 4; j++) {
            store_lanes(dst + (4 * i + j) * step + t, v[j], nt - t);
          }
        }
      }
    }
  }
}

/* ---- non-finite fix-ups ----
 *
 * The transforms subtract patch elements, so an infinite input makes NaN
 * where the direct sum is +-inf: outputs (or weight-gradient elements) that
 * came out NaN are computed again as the direct sum, whose non-finite
 * results are those of any order of its terms (NaN if any term is, or if
 * +inf meets -inf, else the infinity). Finite results stay as they are. */

/* The direct sum of one output of a 3 x 3, stride 1 convolution at input
 * row y0 and column x0 (its window's corner): over channels c of `x` (planes
 * of H x W) and window positions, times w[c * cstride + i * 3 + j], or the
 * kernel rotated by 180 degrees. */
static float direct_output(const float *x, int64_t C, int64_t H, int64_t W, int64_t y0, int64_t x0, const float *w,
                           int64_t cstride, int rotated) {
  float sum = 0;
  for (int64_t c = 0; c < C; c++) {
    for (int64_t i = 0; i < 3; i++) {
      const int64_t y = y0 + i;
      if (y < 0 || y >= H) continue;
      SCALAR for (int64_t j = 0; j < 3; j++) {
        const int64_t xx = x0 + j;
        if (xx < 0 || xx >= W) continue;
        sum += x[(c * H + y) * W + xx] * w[c * cstride + (rotated ? (2 - i) * 3 + (2 - j) : i * 3 + j)];
      }
    }
  }
  return sum;
}

/* FIXUP (and _ROTATED, the input gradient's): output plane q (sample n,
 * output channel o) of out_height x out_width from input planes of height x
 * width (`channels` per sample) and kernels `w`: (O, C, 3, 3), or the
 * input gradient's (C_in, O, 3, 3) read rotated and transposed. */
NOINLINE static void winograd_fixup_plane(window g, int64_t q, int64_t C, int64_t O, const float *x, const float *w,
                                          float *out, int rotated) {
  const int64_t n = q / O, o = q % O;
  const float *xs = x + n * C * g.H * g.W;
  const float *wo = rotated ? w + o * 9 : w + o * C * 9;
  const int64_t cstride = rotated ? O * 9 : 9;
  float *plane = out + q * g.OH * g.OW;
  const int64_t count = g.OH * g.OW;
  for (int64_t e0 = 0; e0 < count; e0 += 16) {
    if (e0 + 16 <= count) { /* sixteen at a time, one test: NaN is rare */
      const v128_t v0 = wasm_v128_load(plane + e0), v1 = wasm_v128_load(plane + e0 + 4);
      const v128_t v2 = wasm_v128_load(plane + e0 + 8), v3 = wasm_v128_load(plane + e0 + 12);
      const v128_t nan = wasm_v128_or(wasm_v128_or(wasm_f32x4_ne(v0, v0), wasm_f32x4_ne(v1, v1)),
                                      wasm_v128_or(wasm_f32x4_ne(v2, v2), wasm_f32x4_ne(v3, v3)));
      if (!wasm_v128_any_true(nan)) continue;
    }
    for (int64_t e = e0; e < e0 + 16 && e < count; e++) {
      if (plane[e] == plane[e]) continue;
      const int64_t oy = e / g.OW, ox = e % g.OW;
      plane[e] = direct_output(xs, C, g.H, g.W, oy - g.ph, ox - g.pw, wo, cstride, rotated);
    }
  }
}

/* WEIGHT_GRAD_FIXUP: the NaN elements of kernel plane q (output channel
 * o, input channel c) of the weight gradient, as the direct sum over
 * samples and outputs of grad[n][o][oy][ox] * x[n][c][oy - ph + i][ox - pw +
 * j]; x: N x C planes of H x W, grad: N x O planes of OH x OW. */
NOINLINE static void winograd_weight_grad_fixup_plane(window g, int64_t q, int64_t C, int64_t O, int64_t N,
                                                      const float *x, const float *grad, float *dw) {
  const int64_t o = q / C, c = q % C;
  for (int64_t e = 0; e < 9; e++) {
    float *d = dw + q * 9 + e;
    if (*d == *d) continue;
    const int64_t i = e / 3, j = e % 3;
    float sum = 0;
    for (int64_t n = 0; n < N; n++) {
      const float *xp = x + (n * C + c) * g.H * g.W;
      const float *gp = grad + (n * O + o) * g.OH * g.OW;
      for (int64_t oy = 0; oy < g.OH; oy++) {
        const int64_t y = oy - g.ph + i;
        if (y < 0 || y >= g.H) continue;
        SCALAR for (int64_t ox = 0; ox < g.OW; ox++) {
          const int64_t xx = ox - g.pw + j;
          if (xx < 0 || xx >= g.W) continue;
          sum += gp[oy * g.OW + ox] * xp[y * g.W + xx];
        }
      }
    }
    *d = sum;
  }
}

static void winograd(const or_pool *p, int32_t worker, int32_t workers) {
  if (p->dtype != OR_F32 || p->kernel[0] != 3 || p->kernel[1] != 3 || p->stride[0] != 1 || p->stride[1] != 1 ||
      p->dilation[0] != 1 || p->dilation[1] != 1) {
    TRAP();
  }
  const float *in = (const float *)device_ptr(p->data[OR_POOL_IN]);
  float *out = (float *)device_ptr(p->data[OR_POOL_OUT0]);
  int64_t lo, hi;
  split_range(p->planes, 1, worker, workers, &lo, &hi);
  if (p->op == OR_POOL_WINOGRAD_FIXUP || p->op == OR_POOL_WINOGRAD_FIXUP_ROTATED ||
      p->op == OR_POOL_WINOGRAD_WEIGHT_GRAD_FIXUP) {
    const int64_t C = p->channels, N = p->samples;
    if (C <= 0 || N <= 0 || p->planes % (p->op == OR_POOL_WINOGRAD_WEIGHT_GRAD_FIXUP ? C : N) != 0) {
      TRAP();
    }
    const float *other = (const float *)device_ptr(p->data[OR_POOL_OUT1]); /* the kernels, or the gradient */
    const window g = window_of(p);
    for (int64_t q = lo; q < hi; q++) {
      if (p->op == OR_POOL_WINOGRAD_WEIGHT_GRAD_FIXUP) {
        winograd_weight_grad_fixup_plane(g, q, C, p->planes / C, N, in, other, out);
      } else {
        winograd_fixup_plane(g, q, C, p->planes / N, in, other, out, p->op == OR_POOL_WINOGRAD_FIXUP_ROTATED);
      }
    }
    return;
  }
  if (p->op == OR_POOL_WINOGRAD_WEIGHT || p->op == OR_POOL_WINOGRAD_WEIGHT_ROTATED) {
    winograd_weight(in, out, p->planes, lo, hi, p->op == OR_POOL_WINOGRAD_WEIGHT_ROTATED);
    return;
  }
  if (p->op == OR_POOL_WINOGRAD_WEIGHT_GRAD) {
    winograd_weight_grad(in, out, p->planes, lo, hi);
    return;
  }
  const int64_t channels = p->channels, tiles = p->out_height * p->out_width;
  if (channels <= 0 || p->planes % channels != 0 ||
      (p->op != OR_POOL_WINOGRAD_INPUT &&
       (p->out_height != (p->height + 1) / 2 || p->out_width != (p->width + 1) / 2))) {
    TRAP();
  }
  const int64_t samples = p->planes / channels, step = p->point_stride;
  if (step < p->planes * tiles) {
    TRAP();
  }
  const window g = window_of(p);
  for (int64_t q = lo; q < hi; q++) {
    /* plane q = sample n, channel c: tiles at (c * samples + n) * tiles */
    const int64_t at = (q % channels * samples + q / channels) * tiles;
    if (p->op == OR_POOL_WINOGRAD_INPUT) {
      winograd_input_plane(g, in + q * p->height * p->width, out + at, step);
    } else if (p->op == OR_POOL_WINOGRAD_GRAD) {
      winograd_grad_plane(g, in + q * p->height * p->width, out + at, step);
    } else {
      winograd_output_plane(g, in + at, out + q * p->height * p->width, step);
    }
  }
}

EXPORT(pool) void pool(const or_pool *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  const or_pool part = *params;
  const or_pool *p = &part;
  if (p->op >= OR_POOL_WINOGRAD_WEIGHT && p->op < OR_POOL_COUNT) {
    if (p->planes < 0 || p->height <= 0 || p->width <= 0 || p->out_height < 0 || p->out_width < 0) {
      TRAP();
    }
    winograd(p, worker, workers);
    return;
  }
  const int windows = p->op == OR_POOL_IM2COL || p->op == OR_POOL_COL2IM;
  const int any_dtype = p->op == OR_POOL_IM2COL && dtype_size(p->dtype) != 1;
  if (p->op >= OR_POOL_COUNT || (p->dtype != OR_F32 && p->dtype != OR_F64 && p->dtype != OR_I64 && !any_dtype) ||
      (p->op == OR_POOL_COL2IM && p->dtype == OR_I64) || p->planes < 0 || p->height <= 0 || p->width <= 0 ||
      p->out_height < 0 || p->out_width < 0) {
    TRAP();
  }
  for (int d = 0; d < 2; d++) {
    if (p->kernel[d] <= 0 || p->stride[d] <= 0 || p->dilation[d] <= 0 || p->padding[d] < 0) {
      TRAP();
    }
  }
  if (p->op == OR_POOL_AVG_BACKWARD || p->op == OR_POOL_AVG) {
    if (p->dilation[0] != 1 || p->dilation[1] != 1 || (p->dtype == OR_I64 && p->op == OR_POOL_AVG_BACKWARD)) {
      TRAP();
    }
  }
  const int backward = p->op == OR_POOL_MAX_BACKWARD || p->op == OR_POOL_AVG_BACKWARD || p->op == OR_POOL_COL2IM;
  const int64_t esize = dtype_size(p->dtype);
  /* plane_in: an image plane; plane_out: an output or column plane */
  const int64_t plane_in = p->height * p->width;
  const int64_t plane_out = p->out_height * p->out_width * (windows ? p->kernel[0] * p->kernel[1] : 1);
  /* max_backward_2x2_f32 writes its planes whole: no zeroing first */
  const int zero_first =
      backward && !(p->op == OR_POOL_MAX_BACKWARD && p->dtype == OR_F32 && windows_2x2(window_of(p)));
  int64_t lo, hi;
  split_range(p->planes, 1, worker, workers, &lo, &hi);
  for (int64_t q = lo; q < hi; q++) {
    /* in: the forward's input or the output's gradient; out: the other */
    const char *in = device_ptr(p->data[OR_POOL_IN]) + q * (backward ? plane_out : plane_in) * esize;
    char *out = device_ptr(p->data[OR_POOL_OUT0]) + q * (backward ? plane_in : plane_out) * esize;
    if (p->op == OR_POOL_IM2COL) {
      const window g = window_of(p);
      if (esize == 2) {
        im2col_plane_uint16_t(g, (const uint16_t *)in, (uint16_t *)out);
      } else if (esize == 4) {
        im2col_plane_uint32_t(g, (const uint32_t *)in, (uint32_t *)out);
      } else {
        im2col_plane_uint64_t(g, (const uint64_t *)in, (uint64_t *)out);
      }
      continue;
    }
    int64_t *index = p->op == OR_POOL_MAX || p->op == OR_POOL_MAX_BACKWARD
                         ? (int64_t *)device_ptr(p->data[OR_POOL_OUT1]) + q * plane_out
                         : 0;
    if (zero_first) {
      for (int64_t i = 0; i < plane_in * esize; i++) {
        out[i] = 0;
      }
    }
    if (p->op == OR_POOL_COL2IM) {
      if (p->dtype == OR_F32) {
        col2im_plane_F32(window_of(p), (const float *)in, (float *)out);
      } else {
        col2im_plane_F64(window_of(p), (const double *)in, (double *)out);
      }
      continue;
    }
    switch (p->dtype) {
    case OR_F32:
      pool_plane_F32(p, in, out, index);
      break;
    case OR_F64:
      pool_plane_F64(p, in, out, index);
      break;
    default:
      pool_plane_I64(p, in, out, index);
      break;
    }
  }
}
