/*
 * dtype.h: what every engine kernel shares: device pointers, the element
 * types (float16 and bfloat16 conversions, loads and stores of any dtype in
 * each compute type, chunked row conversions) and their sizes. Header-only
 * (static inline), included by each kernel family's C file.
 */
#ifndef OPENREG_ENGINE_DTYPE_H
#define OPENREG_ENGINE_DTYPE_H

#include "openreg_engine.h"
#include "math.h"

#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(#name), visibility("default")))
#define TRAP() __builtin_trap()
#define ALWAYS_INLINE static inline __attribute__((always_inline))
/* A loop in a function of its own: inlined into a large kernel, it shares
 * the registers with everything live there, and wasmtime's epoch check at
 * each loop header (a call on its slow path) then keeps its loop values on
 * the stack, stored and reloaded on every iteration. */
#define NOINLINE __attribute__((noinline))

typedef unsigned long usize;

ALWAYS_INLINE char *device_ptr(uint64_t offset) {
  return (char *)(usize)offset;
}

/* ---- parallel launches ----
 * Every kernel takes (params, worker, workers): a parallel launch calls it
 * once on each of the device's workers at once (wit/kernels.wit,
 * `worker-index`), a plain launch with (0, 1). Each call restricts the
 * iteration box to its part and writes only there. Parts are cut from the
 * problem alone, and every element is computed the same way whichever part
 * holds it, so results are bit-identical for any worker count. */

/* Checks a call's worker arguments. */
ALWAYS_INLINE void check_worker(int32_t worker, int32_t workers) {
  if (workers < 1 || worker < 0 || worker >= workers) {
    TRAP();
  }
}

/* Worker `worker` of `workers` takes items [*lo, *hi) of n: even,
 * contiguous ranges whose bounds are multiples of `align` (but n). */
ALWAYS_INLINE void split_range(int64_t n, int64_t align, int32_t worker, int32_t workers, int64_t *lo, int64_t *hi) {
  const int64_t units = (n + align - 1) / align;
  const int64_t a = units * worker / workers * align, b = units * (worker + 1) / workers * align;
  *lo = a < n ? a : n;
  *hi = b < n ? b : n;
}

/* The part of a list launch (its items' elements taken one item after
 * another) that worker `worker` of `workers` runs: elements [*lo, *hi) of
 * the list, in equal ranges. `n` is the first item's element count, the
 * others follow `stride` bytes apart; traps on a count out of range. */
ALWAYS_INLINE void list_part(const int64_t *n, usize stride, uint32_t items, int32_t worker, int32_t workers,
                             int64_t *lo, int64_t *hi) {
  int64_t total = 0;
  for (uint32_t i = 0; i < items; i++) {
    const int64_t count = *(const int64_t *)((const char *)n + i * stride);
    if (count < 0 || count > ((int64_t)1 << 48)) {
      TRAP();
    }
    total += count;
  }
  *lo = total * worker / workers;
  *hi = total * (worker + 1) / workers;
}

/* The dimension of [from, to) to split a box along: the outermost one that
 * splits into parts within an eighth of each other, else the largest, the
 * outermost of equals (so that parts are few contiguous runs). Split along
 * an inner dimension, each worker takes a piece of every row, and the
 * workers' pieces interleave in memory: two workers then ran x - mean[c]
 * over (16, 16, 32, 32) no faster than one (97-111 us; 37 split by images). */
ALWAYS_INLINE uint32_t split_dim(const int64_t *sizes, uint32_t from, uint32_t to, int32_t workers) {
  for (uint32_t d = to; d-- > from + 1;) {
    if (sizes[d] >= workers && (sizes[d] % workers == 0 || sizes[d] >= 8 * (int64_t)workers)) {
      return d;
    }
  }
  uint32_t best = from;
  for (uint32_t d = from + 1; d < to; d++) {
    if (sizes[d] >= sizes[best]) {
      best = d;
    }
  }
  return best;
}

/* Restricts dimension `d` of a parameter block's box (its `sizes`, `data`
 * and per-operand `strides`) to this worker's part, for `nops` operands;
 * evaluates to 0 when the part is empty. Elements along dimension 0 go in
 * runs of 16 (whole vectors and cache lines), others one by one. */
#define RESTRICT_BOX(q, nops, d, worker, workers)                                             \
  __extension__({                                                                            \
    int64_t lo_, hi_;                                                                        \
    split_range((q).sizes[d], (d) == 0 ? 16 : 1, worker, workers, &lo_, &hi_);              \
    for (uint32_t k_ = 0; k_ < (nops); k_++) {                                               \
      (q).data[k_] += (uint64_t)(lo_ * (q).strides[k_][d]);                                  \
    }                                                                                        \
    (q).sizes[d] = hi_ - lo_;                                                                \
    hi_ > lo_;                                                                               \
  })

/* ---- float16 and bfloat16, round to nearest even ----
 * Branch-free (every case computed, one selected), so that clang vectorizes
 * the conversion loops below. */

ALWAYS_INLINE float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1f;
  const uint32_t m = h & 0x3ff;
  const uint32_t normal = sign | ((e + 112) << 23) | (m << 13);
  const uint32_t special = sign | 0x7f800000 | (m << 13);               /* infinity, NaN */
  const uint32_t subnormal = sign | m_f32_bits((float)m * 5.9604644775390625e-08f); /* m * 2^-24, exact */
  return m_f32_from_bits(e == 0x1f ? special : e != 0 ? normal : subnormal);
}

ALWAYS_INLINE uint16_t f32_to_f16(float f) {
  const uint32_t x = m_f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t ax = x & 0x7fffffff;
  /* a normal half: rebias, round at bit 13 (a carry may reach infinity) */
  const uint32_t rebiased = ax - 0x38000000;
  const uint32_t normal = (rebiased + 0xfff + ((rebiased >> 13) & 1)) >> 13;
  /* a subnormal half (or zero): adding 0.5 lines the half's last bit up with
   * float32's, and the float addition rounds to nearest even */
  const uint32_t subnormal = m_f32_bits(m_f32_from_bits(ax) + 0.5f) - 0x3f000000;
  const uint32_t nan = 0x7e00 | ((ax >> 13) & 0x3ff); /* NaN stays NaN (quiet) */
  uint32_t r = ax >= 0x38800000 ? normal : subnormal;
  r = ax >= 0x47800000 ? 0x7c00 : r; /* at least 2^16: infinity */
  r = ax > 0x7f800000 ? nan : r;
  return (uint16_t)(sign | r);
}

ALWAYS_INLINE float bf16_to_f32(uint16_t b) {
  return m_f32_from_bits((uint32_t)b << 16);
}

ALWAYS_INLINE uint16_t f32_to_bf16(float f) {
  const uint32_t u = m_f32_bits(f);
  const uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40; /* NaN stays NaN (quiet) */
  return (uint16_t)((u & 0x7fffffff) > 0x7f800000 ? nan : rounded);
}


/* The same conversions four lanes at a time, bit for bit: halves (float16
 * or bfloat16 bits, one per 32-bit lane) to float32 and back. The range
 * tests compare magnitudes as floats (a NaN compares false, and has its own
 * test): one instruction on x86-64. Integer compares of the magnitude's
 * bits were signed ones in C, but clang proves them non-negative and emits
 * unsigned compares, which Cranelift lowers to a max, an equality and a
 * negation (f32 to f16: 1.15 ns per element on one worker, 0.5 with float
 * compares). */
ALWAYS_INLINE v128_t f16x4_to_f32x4(v128_t h) {
  /* The half's exponent and mantissa bits moved to float32's places read as
   * the value times 2^-112 (a subnormal half as a subnormal float32, both
   * exact), so one multiply by 2^112 rebiases every finite half; an
   * exponent of all ones (at least 65536 after the multiply) becomes
   * float32's, keeping the mantissa: infinity, or the NaN with its payload. */
  const v128_t shifted = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7fff)), 13);
  const v128_t scaled = wasm_f32x4_mul(shifted, wasm_f32x4_splat(5.192296858534828e+33f)); /* 2^112 */
  const v128_t special = wasm_v128_and(wasm_f32x4_ge(scaled, wasm_f32x4_splat(65536.0f)), wasm_i32x4_splat(0x7f800000));
  const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
  return wasm_v128_or(wasm_v128_or(scaled, special), sign);
}

ALWAYS_INLINE v128_t f32x4_to_f16x4(v128_t x) {
  const v128_t sign = wasm_v128_and(wasm_u32x4_shr(x, 16), wasm_i32x4_splat(0x8000));
  const v128_t ax = wasm_v128_and(x, wasm_i32x4_splat(0x7fffffff));
  const v128_t rebiased = wasm_i32x4_sub(ax, wasm_i32x4_splat(0x38000000));
  const v128_t odd = wasm_v128_and(wasm_u32x4_shr(rebiased, 13), wasm_i32x4_splat(1));
  const v128_t normal = wasm_u32x4_shr(wasm_i32x4_add(wasm_i32x4_add(rebiased, wasm_i32x4_splat(0xfff)), odd), 13);
  const v128_t subnormal = wasm_i32x4_sub(wasm_f32x4_add(ax, wasm_f32x4_splat(0.5f)), wasm_i32x4_splat(0x3f000000));
  const v128_t nan = wasm_v128_or(wasm_i32x4_splat(0x7e00), wasm_v128_and(wasm_u32x4_shr(ax, 13), wasm_i32x4_splat(0x3ff)));
  /* ax >= 2^-14 (the smallest normal half), ax >= 2^16 (infinity), ax a NaN */
  v128_t r = wasm_v128_bitselect(normal, subnormal, wasm_f32x4_ge(ax, wasm_f32x4_splat(6.103515625e-05f)));
  r = wasm_v128_bitselect(wasm_i32x4_splat(0x7c00), r, wasm_f32x4_ge(ax, wasm_f32x4_splat(65536.0f)));
  r = wasm_v128_bitselect(nan, r, wasm_f32x4_ne(ax, ax));
  return wasm_v128_or(sign, r);
}

ALWAYS_INLINE v128_t f32x4_to_bf16x4(v128_t u) {
  const v128_t odd = wasm_v128_and(wasm_u32x4_shr(u, 16), wasm_i32x4_splat(1));
  const v128_t rounded = wasm_u32x4_shr(wasm_i32x4_add(wasm_i32x4_add(u, wasm_i32x4_splat(0x7fff)), odd), 16);
  const v128_t nan = wasm_v128_or(wasm_u32x4_shr(u, 16), wasm_i32x4_splat(0x40));
  return wasm_v128_bitselect(nan, rounded, wasm_f32x4_ne(u, u));
}

/* Eight halves (float16, or bfloat16 when `bf16`) as two float32 vectors, exactly. */
ALWAYS_INLINE void halves8_to_f32(v128_t h, int bf16, v128_t *lo, v128_t *hi) {
  const v128_t l = wasm_u32x4_extend_low_u16x8(h), u = wasm_u32x4_extend_high_u16x8(h);
  *lo = bf16 ? wasm_i32x4_shl(l, 16) : f16x4_to_f32x4(l);
  *hi = bf16 ? wasm_i32x4_shl(u, 16) : f16x4_to_f32x4(u);
}

/* n halves at q (contiguous) to float32, and back: eight per step, the
 * rest one by one. */
ALWAYS_INLINE void halves_to_f32(float *dst, const uint16_t *q, int64_t n, int bf16) {
  int64_t j = 0;
  _Pragma("clang loop unroll_count(2)") for (; j + 8 <= n; j += 8) {
    v128_t lo, hi;
    halves8_to_f32(wasm_v128_load(q + j), bf16, &lo, &hi);
    wasm_v128_store(dst + j, lo);
    wasm_v128_store(dst + j + 4, hi);
  }
  for (; j < n; j++) {
    dst[j] = bf16 ? bf16_to_f32(q[j]) : f16_to_f32(q[j]);
  }
}

ALWAYS_INLINE void f32_to_halves(uint16_t *q, const float *src, int64_t n, int bf16) {
  int64_t j = 0;
  _Pragma("clang loop unroll_count(2)") for (; j + 8 <= n; j += 8) {
    const v128_t lo = wasm_v128_load(src + j), hi = wasm_v128_load(src + j + 4);
    /* each lane holds 0..0xffff: the saturating narrow keeps it */
    wasm_v128_store(q + j, bf16 ? wasm_u16x8_narrow_i32x4(f32x4_to_bf16x4(lo), f32x4_to_bf16x4(hi))
                                : wasm_u16x8_narrow_i32x4(f32x4_to_f16x4(lo), f32x4_to_f16x4(hi)));
  }
  for (; j < n; j++) {
    q[j] = bf16 ? f32_to_bf16(src[j]) : f32_to_f16(src[j]);
  }
}

/* ---- loads and stores of any dtype, in each compute type ---- */

/* Float to integer conversions give what PyTorch's CPU kernels give on
 * x86-64 (where C++ leaves them undefined): a NaN or a value out of range of
 * int32 (int64 for int64 outputs) becomes INT32_MIN (INT64_MIN); narrower
 * integer types take the low bits of the int32, so they wrap. The same on
 * every host: the wasm conversions used never trap or saturate. */
ALWAYS_INLINE int64_t float_to_i64(double v) {
  return (v != v || v >= 9223372036854775808.0 || v < -9223372036854775808.0) ? INT64_MIN : (int64_t)v;
}

ALWAYS_INLINE int64_t float_to_i32(double v) {
  return (v != v || v >= 2147483648.0 || v < -2147483648.0) ? INT32_MIN : (int32_t)v;
}

#define OR_DEFINE_LOAD(NAME, T)                                      \
  ALWAYS_INLINE T NAME(const char *p, uint32_t dtype) {              \
    switch (dtype) {                                                 \
    case OR_U8:                                                      \
      return (T) * (const uint8_t *)p;                               \
    case OR_I8:                                                      \
      return (T) * (const int8_t *)p;                                \
    case OR_I16:                                                     \
      return (T) * (const int16_t *)p;                               \
    case OR_I32:                                                     \
      return (T) * (const int32_t *)p;                               \
    case OR_I64:                                                     \
      return (T) * (const int64_t *)p;                               \
    case OR_F16:                                                     \
      return (T)f16_to_f32(*(const uint16_t *)p);                    \
    case OR_F32:                                                     \
      return (T) * (const float *)p;                                 \
    case OR_F64:                                                     \
      return (T) * (const double *)p;                                \
    case OR_BOOL:                                                    \
      return (T)(*(const uint8_t *)p != 0);                          \
    case OR_BF16:                                                    \
      return (T)bf16_to_f32(*(const uint16_t *)p);                   \
    default:                                                         \
      TRAP();                                                        \
    }                                                                \
  }

OR_DEFINE_LOAD(load_F32, float)
OR_DEFINE_LOAD(load_F64, double)

/* int64 loads of floats convert as stores do (only copies load floats as int64). */
ALWAYS_INLINE int64_t load_I64(const char *p, uint32_t dtype) {
  switch (dtype) {
  case OR_F16:
  case OR_BF16:
  case OR_F32:
  case OR_F64:
    return float_to_i64(load_F64(p, dtype));
  case OR_U8:
    return *(const uint8_t *)p;
  case OR_I8:
    return *(const int8_t *)p;
  case OR_I16:
    return *(const int16_t *)p;
  case OR_I32:
    return *(const int32_t *)p;
  case OR_I64:
    return *(const int64_t *)p;
  case OR_BOOL:
    return *(const uint8_t *)p != 0;
  default:
    TRAP();
  }
}

#define OR_DEFINE_STORE(NAME, T, TO_I32, TO_I64)                     \
  ALWAYS_INLINE void NAME(char *p, uint32_t dtype, T v) {            \
    switch (dtype) {                                                 \
    case OR_U8:                                                      \
      *(uint8_t *)p = (uint8_t)TO_I32(v);                            \
      return;                                                        \
    case OR_I8:                                                      \
      *(int8_t *)p = (int8_t)TO_I32(v);                              \
      return;                                                        \
    case OR_I16:                                                     \
      *(int16_t *)p = (int16_t)TO_I32(v);                            \
      return;                                                        \
    case OR_I32:                                                     \
      *(int32_t *)p = (int32_t)TO_I32(v);                            \
      return;                                                        \
    case OR_I64:                                                     \
      *(int64_t *)p = TO_I64(v);                                     \
      return;                                                        \
    case OR_F16:                                                     \
      *(uint16_t *)p = f32_to_f16((float)v);                         \
      return;                                                        \
    case OR_F32:                                                     \
      *(float *)p = (float)v;                                        \
      return;                                                        \
    case OR_F64:                                                     \
      *(double *)p = (double)v;                                      \
      return;                                                        \
    case OR_BOOL:                                                    \
      *(uint8_t *)p = v != 0;                                        \
      return;                                                        \
    case OR_BF16:                                                    \
      *(uint16_t *)p = f32_to_bf16((float)v);                        \
      return;                                                        \
    default:                                                         \
      TRAP();                                                        \
    }                                                                \
  }

#define OR_INT_AS_IS(v) (v)
OR_DEFINE_STORE(store_F32, float, float_to_i32, float_to_i64)
OR_DEFINE_STORE(store_F64, double, float_to_i32, float_to_i64)
OR_DEFINE_STORE(store_I64, int64_t, OR_INT_AS_IS, OR_INT_AS_IS)

/* Copies one element of `size` bytes (both operands of one dtype). */
ALWAYS_INLINE void move_element(char *dst, const char *src, uint32_t size) {
  switch (size) {
  case 1:
    *(uint8_t *)dst = *(const uint8_t *)src;
    return;
  case 2:
    *(uint16_t *)dst = *(const uint16_t *)src;
    return;
  case 4:
    *(uint32_t *)dst = *(const uint32_t *)src;
    return;
  default:
    *(uint64_t *)dst = *(const uint64_t *)src;
    return;
  }
}

/* Copies n bytes (the ranges do not overlap), 16 at a time. Not memcpy:
 * that compiles to wasm's memory.copy, which wasmtime runs as a call into
 * the runtime, costly for the short rows kernels copy. A ragged end of 16
 * bytes or more is one more 16-byte copy ending at n (overlapping bytes
 * already copied): byte by byte, the 12 bytes that end a row of 31 floats
 * took longer than the row's 7 vectors. */
__attribute__((no_builtin("memcpy"))) static inline void copy_bytes(void *restrict dst, const void *restrict src,
                                                                   usize n) {
  char *d = (char *)dst;
  const char *s = (const char *)src;
  usize i = 0;
  for (; i + 16 <= n; i += 16) {
    wasm_v128_store(d + i, wasm_v128_load(s + i));
  }
  if (i < n && n >= 16) {
    wasm_v128_store(d + n - 16, wasm_v128_load(s + n - 16));
    return;
  }
  for (; i < n; i++) {
    d[i] = s[i];
  }
}

/* The last m (1 to 3) floats of a row as a vector padded with zeros, and
 * back: vector loops finish a row with one more vector, so an element's
 * result never depends on where the row ends. */
ALWAYS_INLINE v128_t load_f32_partial(const float *p, int64_t m) {
  float pad[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t t = 0; t < m; t++) pad[t] = p[t];
  return wasm_v128_load(pad);
}

ALWAYS_INLINE void store_f32_partial(float *p, v128_t v, int64_t m) {
  float pad[4];
  wasm_v128_store(pad, v);
  for (int64_t t = 0; t < m; t++) p[t] = pad[t];
}

/* Vector q of a row of w float32 values (the last one padded with zeros),
 * and back: the loops that run across lines side by side. */
ALWAYS_INLINE v128_t cols_load(const void *row, int64_t q, int64_t w) {
  const float *v = (const float *)row + 4 * q;
  return 4 * q + 4 <= w ? wasm_v128_load(v) : load_f32_partial(v, w - 4 * q);
}

ALWAYS_INLINE void cols_store(void *row, int64_t q, int64_t w, v128_t x) {
  float *v = (float *)row + 4 * q;
  if (4 * q + 4 <= w) {
    wasm_v128_store(v, x);
  } else {
    store_f32_partial(v, x, w - 4 * q);
  }
}

/* Bytes (bool as 0 or 1, or uint8) widened to int64 or float32, sixteen
 * at a time, and float32 to int32 as float_to_i32 converts (a NaN or a
 * value out of int32's range gives INT32_MIN), four at a time. clang
 * vectorized the plain loops two elements wide, with constants that went
 * through the stack on every iteration: 2 ns per element for `x.long()` of
 * a bool tensor on one worker. */
ALWAYS_INLINE v128_t bytes_as_values(v128_t b, int truth) {
  return truth ? wasm_v128_and(wasm_i8x16_ne(b, wasm_i8x16_splat(0)), wasm_i8x16_splat(1)) : b;
}

ALWAYS_INLINE void bytes_to_i64(int64_t *dst, const uint8_t *p, int64_t m, int truth) {
  int64_t j = 0;
  for (; j + 16 <= m; j += 16) {
    const v128_t b = bytes_as_values(wasm_v128_load(p + j), truth);
    const v128_t h0 = wasm_u16x8_extend_low_u8x16(b), h1 = wasm_u16x8_extend_high_u8x16(b);
    const v128_t w[4] = {wasm_u32x4_extend_low_u16x8(h0), wasm_u32x4_extend_high_u16x8(h0),
                         wasm_u32x4_extend_low_u16x8(h1), wasm_u32x4_extend_high_u16x8(h1)};
    for (int q = 0; q < 4; q++) {
      wasm_v128_store(dst + j + 4 * q, wasm_u64x2_extend_low_u32x4(w[q]));
      wasm_v128_store(dst + j + 4 * q + 2, wasm_u64x2_extend_high_u32x4(w[q]));
    }
  }
  for (; j < m; j++) dst[j] = truth ? p[j] != 0 : p[j];
}

ALWAYS_INLINE void bytes_to_f32(float *dst, const uint8_t *p, int64_t m, int truth) {
  int64_t j = 0;
  for (; j + 16 <= m; j += 16) {
    const v128_t b = bytes_as_values(wasm_v128_load(p + j), truth);
    const v128_t h0 = wasm_u16x8_extend_low_u8x16(b), h1 = wasm_u16x8_extend_high_u8x16(b);
    wasm_v128_store(dst + j, wasm_f32x4_convert_i32x4(wasm_u32x4_extend_low_u16x8(h0)));
    wasm_v128_store(dst + j + 4, wasm_f32x4_convert_i32x4(wasm_u32x4_extend_high_u16x8(h0)));
    wasm_v128_store(dst + j + 8, wasm_f32x4_convert_i32x4(wasm_u32x4_extend_low_u16x8(h1)));
    wasm_v128_store(dst + j + 12, wasm_f32x4_convert_i32x4(wasm_u32x4_extend_high_u16x8(h1)));
  }
  for (; j < m; j++) dst[j] = (float)(truth ? p[j] != 0 : p[j]);
}

ALWAYS_INLINE void f32_to_i32(int32_t *q, const float *src, int64_t m) {
  int64_t j = 0;
  _Pragma("clang loop unroll_count(4)") for (; j + 4 <= m; j += 4) {
    const v128_t x = wasm_v128_load(src + j);
    /* in range: |x| < 2^31, false for a NaN (-2^31 itself gives INT32_MIN either way) */
    const v128_t in = wasm_f32x4_lt(wasm_f32x4_abs(x), wasm_f32x4_splat(2147483648.0f));
    wasm_v128_store(q + j, wasm_v128_bitselect(wasm_i32x4_trunc_sat_f32x4(x), wasm_i32x4_splat(INT32_MIN), in));
  }
  for (; j < m; j++) q[j] = (int32_t)float_to_i32((double)src[j]);
}

/* Elements converted per step by the dtype-converting loops: the dtype
 * switch runs once per chunk, and the op's loop over the chunk is the same
 * typed loop as the fast paths'. */
#define OR_CHUNK 256

/* float32 to float64, exactly. */
ALWAYS_INLINE void f32_to_f64(double *dst, const float *src, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v128_t u = wasm_v128_load(src + j), v = wasm_v128_load(src + j + 4);
    wasm_v128_store(dst + j, wasm_f64x2_promote_low_f32x4(u));
    wasm_v128_store(dst + j + 2, wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(u, u, 2, 3, 0, 1)));
    wasm_v128_store(dst + j + 4, wasm_f64x2_promote_low_f32x4(v));
    wasm_v128_store(dst + j + 6, wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 0, 1)));
  }
  for (; j < n; j++) dst[j] = (double)src[j];
}

/* float32 to bool: 1 where x != 0 (NaN included), 16 at a time. */
ALWAYS_INLINE void f32_to_bool(uint8_t *dst, const float *src, int64_t n) {
  const v128_t zero = wasm_f32x4_splat(0.0f);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const v128_t a = wasm_f32x4_ne(wasm_v128_load(src + j), zero);
    const v128_t b = wasm_f32x4_ne(wasm_v128_load(src + j + 4), zero);
    const v128_t c = wasm_f32x4_ne(wasm_v128_load(src + j + 8), zero);
    const v128_t d = wasm_f32x4_ne(wasm_v128_load(src + j + 12), zero);
    /* the masks (0 or -1) narrow with saturation to bytes of 0 or -1 */
    const v128_t bytes = wasm_i8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(a, b), wasm_i16x8_narrow_i32x4(c, d));
    wasm_v128_store(dst + j, wasm_v128_and(bytes, wasm_i8x16_splat(1)));
  }
  for (; j < n; j++) dst[j] = src[j] != 0.0f;
}

/* int64 to bool: 1 where x != 0, 16 at a time (each lane's mask narrowed
 * from 64 bits to 8 through its low half). */
ALWAYS_INLINE void i64_to_bool(uint8_t *dst, const int64_t *src, int64_t n) {
  const v128_t zero = wasm_i64x2_splat(0);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    v128_t w[4];
    for (int q = 0; q < 4; q++) {
      const v128_t lo = wasm_v128_not(wasm_i64x2_eq(wasm_v128_load(src + j + 4 * q), zero));
      const v128_t hi = wasm_v128_not(wasm_i64x2_eq(wasm_v128_load(src + j + 4 * q + 2), zero));
      w[q] = wasm_i32x4_shuffle(lo, hi, 0, 2, 4, 6);
    }
    const v128_t bytes =
        wasm_i8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(w[0], w[1]), wasm_i16x8_narrow_i32x4(w[2], w[3]));
    wasm_v128_store(dst + j, wasm_v128_and(bytes, wasm_i8x16_splat(1)));
  }
  for (; j < n; j++) dst[j] = src[j] != 0;
}

/* n contiguous halves (float16, or bfloat16 when `bf16`) to float64, 64 at
 * a time through float32 (exact both ways). */
ALWAYS_INLINE void halves_to_f64(double *dst, const uint16_t *q, int64_t n, int bf16) {
  float wide[64];
  for (int64_t j0 = 0; j0 < n; j0 += 64) {
    const int64_t k = n - j0 < 64 ? n - j0 : 64;
    halves_to_f32(wide, q + j0, k, bf16);
    f32_to_f64(dst + j0, wide, k);
  }
}

/* Cases of the row loops' inner switch: the dtype a constant, so that the
 * load or store's own switch folds away and clang can vectorize. */
#define OR_ROW_LOAD_AS(C, D)                                                                         \
  case D:                                                                                            \
    for (int64_t j = 0; j < m; j++) dst[j] = load_##C(p + j * stride, D);                            \
    return;
#define OR_ROW_STORE_AS(C, D)                                                                        \
  case D:                                                                                            \
    for (int64_t j = 0; j < m; j++) store_##C(p + j * stride, D, src[j]);                            \
    return;

/* A chunk of `m` elements of any dtype, `stride` bytes apart, to and from
 * the compute type: one loop per dtype. */
#define OR_DEFINE_ROWS(C, T)                                                                         \
  static inline void load_row_##C(T *dst, const char *p, int64_t stride, uint32_t dtype, int64_t m) {       \
    if (stride == 0) { /* a broadcast value (a scalar operand): converted once */                   \
      const T v = load_##C(p, dtype);                                                                \
      _Pragma("clang loop interleave_count(4)") for (int64_t j = 0; j < m; j++) dst[j] = v;          \
      return;                                                                                        \
    }                                                                                                \
    switch (dtype) {                                                                                 \
    case NATIVE_##C:                                                                                 \
      if (stride == (int64_t)sizeof(T)) {                                                            \
        copy_bytes(dst, p, (usize)m * sizeof(T));                                                    \
        return;                                                                                      \
      }                                                                                              \
      for (int64_t j = 0; j < m; j++) dst[j] = *(const T *)(p + j * stride);                         \
      return;                                                                                        \
    case OR_U8:                                                                                      \
    case OR_BOOL:                                                                                    \
      if (stride == 1 && NATIVE_##C != OR_F64) { /* contiguous bytes, widened in SIMD */            \
        if (NATIVE_##C == OR_I64) {                                                                  \
          bytes_to_i64((int64_t *)dst, (const uint8_t *)p, m, dtype == OR_BOOL);                     \
        } else {                                                                                     \
          bytes_to_f32((float *)dst, (const uint8_t *)p, m, dtype == OR_BOOL);                       \
        }                                                                                            \
        return;                                                                                      \
      }                                                                                              \
      if (dtype == OR_U8) {                                                                          \
        for (int64_t j = 0; j < m; j++) dst[j] = (T) * (const uint8_t *)(p + j * stride);            \
      } else {                                                                                       \
        for (int64_t j = 0; j < m; j++) dst[j] = (T)(*(const uint8_t *)(p + j * stride) != 0);       \
      }                                                                                              \
      return;                                                                                        \
    case OR_F16:                                                                                     \
      if (stride == 2 && sizeof(T) == 4) { /* contiguous into float32 */                             \
        halves_to_f32((float *)dst, (const uint16_t *)p, m, 0);                                      \
        return;                                                                                      \
      }                                                                                              \
      if (stride == 2) { /* contiguous */                                                            \
        if (NATIVE_##C == OR_F64) { /* to float32 in SIMD, then widened */                           \
          halves_to_f64((double *)dst, (const uint16_t *)p, m, 0);                                   \
          return;                                                                                    \
        }                                                                                            \
        const uint16_t *q = (const uint16_t *)p;                                                     \
        for (int64_t j = 0; j < m; j++) dst[j] = (T)f16_to_f32(q[j]);                                \
        return;                                                                                      \
      }                                                                                              \
      for (int64_t j = 0; j < m; j++) dst[j] = (T)f16_to_f32(*(const uint16_t *)(p + j * stride));   \
      return;                                                                                        \
    case OR_BF16:                                                                                    \
      if (stride == 2 && sizeof(T) == 4) {                                                           \
        halves_to_f32((float *)dst, (const uint16_t *)p, m, 1);                                      \
        return;                                                                                      \
      }                                                                                              \
      if (stride == 2) {                                                                             \
        if (NATIVE_##C == OR_F64) { /* to float32 in SIMD, then widened */                           \
          halves_to_f64((double *)dst, (const uint16_t *)p, m, 1);                                   \
          return;                                                                                    \
        }                                                                                            \
        const uint16_t *q = (const uint16_t *)p;                                                     \
        for (int64_t j = 0; j < m; j++) dst[j] = (T)bf16_to_f32(q[j]);                               \
        return;                                                                                      \
      }                                                                                              \
      for (int64_t j = 0; j < m; j++) dst[j] = (T)bf16_to_f32(*(const uint16_t *)(p + j * stride));  \
      return;                                                                                        \
    default:                                                                                         \
      switch (dtype) { /* one loop per dtype, the conversion inlined */                              \
        OR_ROW_LOAD_AS(C, OR_I8)                                                                     \
        OR_ROW_LOAD_AS(C, OR_I16)                                                                    \
        OR_ROW_LOAD_AS(C, OR_I32)                                                                    \
        OR_ROW_LOAD_AS(C, OR_I64)                                                                    \
        OR_ROW_LOAD_AS(C, OR_F32)                                                                    \
        OR_ROW_LOAD_AS(C, OR_F64)                                                                    \
      default:                                                                                       \
        for (int64_t j = 0; j < m; j++) dst[j] = load_##C(p + j * stride, dtype);                    \
        return;                                                                                      \
      }                                                                                              \
    }                                                                                                \
  }                                                                                                  \
  static inline void store_row_##C(char *p, int64_t stride, uint32_t dtype, const T *src, int64_t m) {      \
    switch (dtype) {                                                                                 \
    case NATIVE_##C:                                                                                 \
      if (stride == (int64_t)sizeof(T)) {                                                            \
        copy_bytes(p, src, (usize)m * sizeof(T));                                                    \
        return;                                                                                      \
      }                                                                                              \
      for (int64_t j = 0; j < m; j++) *(T *)(p + j * stride) = src[j];                               \
      return;                                                                                        \
    case OR_BOOL:                                                                                    \
      if (stride == 1 && NATIVE_##C != OR_F64) { /* contiguous, in SIMD */                          \
        if (NATIVE_##C == OR_I64) {                                                                  \
          i64_to_bool((uint8_t *)p, (const int64_t *)src, m);                                        \
        } else {                                                                                     \
          f32_to_bool((uint8_t *)p, (const float *)src, m);                                          \
        }                                                                                            \
        return;                                                                                      \
      }                                                                                              \
      for (int64_t j = 0; j < m; j++) *(uint8_t *)(p + j * stride) = src[j] != 0;                    \
      return;                                                                                        \
    case OR_I32:                                                                                     \
      if (stride == 4 && NATIVE_##C == OR_F32) { /* contiguous from float32, in SIMD */             \
        f32_to_i32((int32_t *)p, (const float *)src, m);                                             \
        return;                                                                                      \
      }                                                                                              \
      for (int64_t j = 0; j < m; j++) store_##C(p + j * stride, OR_I32, src[j]);                     \
      return;                                                                                        \
    case OR_F16:                                                                                     \
      if (stride == 2 && sizeof(T) == 4) { /* contiguous from float32 */                             \
        f32_to_halves((uint16_t *)p, (const float *)src, m, 0);                                      \
        return;                                                                                      \
      }                                                                                              \
      if (stride == 2) {                                                                             \
        uint16_t *q = (uint16_t *)p;                                                                 \
        for (int64_t j = 0; j < m; j++) q[j] = f32_to_f16((float)src[j]);                            \
        return;                                                                                      \
      }                                                                                              \
      for (int64_t j = 0; j < m; j++) *(uint16_t *)(p + j * stride) = f32_to_f16((float)src[j]);     \
      return;                                                                                        \
    case OR_BF16:                                                                                    \
      if (stride == 2 && sizeof(T) == 4) {                                                           \
        f32_to_halves((uint16_t *)p, (const float *)src, m, 1);                                      \
        return;                                                                                      \
      }                                                                                              \
      if (stride == 2) {                                                                             \
        uint16_t *q = (uint16_t *)p;                                                                 \
        for (int64_t j = 0; j < m; j++) q[j] = f32_to_bf16((float)src[j]);                           \
        return;                                                                                      \
      }                                                                                              \
      for (int64_t j = 0; j < m; j++) *(uint16_t *)(p + j * stride) = f32_to_bf16((float)src[j]);    \
      return;                                                                                        \
    default:                                                                                         \
      switch (dtype) {                                                                               \
        OR_ROW_STORE_AS(C, OR_U8)                                                                    \
        OR_ROW_STORE_AS(C, OR_I8)                                                                    \
        OR_ROW_STORE_AS(C, OR_I16)                                                                   \
        OR_ROW_STORE_AS(C, OR_I32)                                                                   \
        OR_ROW_STORE_AS(C, OR_I64)                                                                   \
        OR_ROW_STORE_AS(C, OR_F32)                                                                   \
        OR_ROW_STORE_AS(C, OR_F64)                                                                   \
      default:                                                                                       \
        for (int64_t j = 0; j < m; j++) store_##C(p + j * stride, dtype, src[j]);                    \
        return;                                                                                      \
      }                                                                                              \
    }                                                                                                \
  }

/* A scalar argument in each compute type. */
#define NATIVE_F32 OR_F32
#define NATIVE_F64 OR_F64
#define NATIVE_I64 OR_I64
OR_DEFINE_ROWS(F32, float)
OR_DEFINE_ROWS(F64, double)
OR_DEFINE_ROWS(I64, int64_t)

static inline uint32_t dtype_size(uint32_t dtype) {
  switch (dtype) {
  case OR_U8:
  case OR_I8:
  case OR_BOOL:
    return 1;
  case OR_I16:
  case OR_F16:
  case OR_BF16:
    return 2;
  case OR_I32:
  case OR_F32:
    return 4;
  case OR_I64:
  case OR_F64:
    return 8;
  default:
    TRAP();
  }
}

#endif /* OPENREG_ENGINE_DTYPE_H */
