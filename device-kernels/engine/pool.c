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
 * of its own: inlined into one kernel with the others, it would share its
 * registers with all of them, and its loop values would live on the stack. */
#define NOINLINE __attribute__((noinline))
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

#define OR_DEFINE_POOL(S, T, LOWEST, ISNAN, TAKE4)                                                                 \
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
      max_plane_##S(g, (const T *)in, (T *)out, index);                                                      \
      return;                                                                                                \
    case OR_POOL_MAX_BACKWARD:                                                                               \
      max_backward_plane_##S(g, (const T *)in, (T *)out, index);                                             \
      return;                                                                                                \
    default:                                                                                                 \
      avg_plane_##S(p, g, (const T *)in, (T *)out, p->op == OR_POOL_AVG_BACKWARD);                           \
      return;                                                                                                \
    }                                                                                                        \
  }

#define FLOAT_ISNAN(v) ((v) != (v))
#define INT_ISNAN(v) 0
OR_DEFINE_POOL(F32, float, -__builtin_inff(), FLOAT_ISNAN, TAKE4_F32)
OR_DEFINE_POOL(F64, double, -__builtin_inf(), FLOAT_ISNAN, TAKE4_NONE)
OR_DEFINE_POOL(I64, int64_t, INT64_MIN, INT_ISNAN, TAKE4_NONE)

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

EXPORT(pool) void pool(const or_pool *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  const or_pool part = *params;
  const or_pool *p = &part;
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
    if (backward) {
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
