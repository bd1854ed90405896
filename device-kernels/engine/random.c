/*
 * The random-number engine of `openreg.engine`: one kernel, `random`, that
 * fills a tensor of any strides from Philox4x32-10 (Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3", SC'11) keyed by the generator's seed,
 * with the element's row-major position and the launch's offset as the
 * counter (see or_random in openreg_engine.h).
 *
 * A Philox block is four 32-bit words, shared by consecutive elements:
 * element i takes slot i % D of block i / D (draws_per_block). A uniform
 * float32, float16 or bfloat16 takes one word (24 bits), so four elements
 * share a block; a float64 uniform takes two words (53 bits), a Bernoulli
 * draw a 53-bit uniform against p, an integer range a 64-bit word modulo
 * the range, so two share one; a normal pair is one Box-Muller transform
 * of the block's two 53-bit uniforms, r cos(t) for the first element and
 * r sin(t) for the second. Compiled for wasm32 and wasm64 with the rest of
 * the engine.
 */
#include "dtype.h"

#include <wasm_simd128.h>

typedef struct philox_block {
  uint32_t w[4];
} philox_block;

/* Philox-4x32-10 of the counters (index + l, offset), l = 0..3, one counter
 * per SIMD lane: each round's 32x32->64-bit products are two u64x2 extended
 * multiplies per word (x86's pmuludq), so four elements' rounds run at once
 * instead of one chain of dependent scalar multiplies. */
static void philox4(uint64_t key, uint64_t index, uint64_t offset, philox_block out[4]) {
  const v128_t lanes = wasm_i64x2_make(0, 1), lanes_hi = wasm_i64x2_make(2, 3);
  const v128_t i_lo = wasm_i64x2_add(wasm_i64x2_splat((int64_t)index), lanes);
  const v128_t i_hi = wasm_i64x2_add(wasm_i64x2_splat((int64_t)index), lanes_hi);
  /* counter words 0 and 1: the low and high halves of index + l */
  v128_t c0 = wasm_i32x4_shuffle(i_lo, i_hi, 0, 2, 4, 6);
  v128_t c1 = wasm_i32x4_shuffle(i_lo, i_hi, 1, 3, 5, 7);
  v128_t c2 = wasm_i32x4_splat((int32_t)(uint32_t)offset);
  v128_t c3 = wasm_i32x4_splat((int32_t)(uint32_t)(offset >> 32));
  const v128_t m0 = wasm_i32x4_splat((int32_t)0xD2511F53u), m1 = wasm_i32x4_splat((int32_t)0xCD9E8D57u);
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  /* unrolled: a loop would reload its six vectors from the stack each round
   * (the watchdog's check at the loop header) */
#pragma clang loop unroll(full)
  for (int round = 0; round < 10; round++) {
    const v128_t p0_lo = wasm_u64x2_extmul_low_u32x4(c0, m0), p0_hi = wasm_u64x2_extmul_high_u32x4(c0, m0);
    const v128_t p1_lo = wasm_u64x2_extmul_low_u32x4(c2, m1), p1_hi = wasm_u64x2_extmul_high_u32x4(c2, m1);
    const v128_t hi0 = wasm_i32x4_shuffle(p0_lo, p0_hi, 1, 3, 5, 7), lo0 = wasm_i32x4_shuffle(p0_lo, p0_hi, 0, 2, 4, 6);
    const v128_t hi1 = wasm_i32x4_shuffle(p1_lo, p1_hi, 1, 3, 5, 7), lo1 = wasm_i32x4_shuffle(p1_lo, p1_hi, 0, 2, 4, 6);
    const v128_t n0 = wasm_v128_xor(wasm_v128_xor(hi1, c1), wasm_i32x4_splat((int32_t)k0));
    const v128_t n2 = wasm_v128_xor(wasm_v128_xor(hi0, c3), wasm_i32x4_splat((int32_t)k1));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  uint32_t w[4][4];
  wasm_v128_store(w[0], c0);
  wasm_v128_store(w[1], c1);
  wasm_v128_store(w[2], c2);
  wasm_v128_store(w[3], c3);
  for (int l = 0; l < 4; l++) {
    out[l].w[0] = w[0][l];
    out[l].w[1] = w[1][l];
    out[l].w[2] = w[2][l];
    out[l].w[3] = w[3][l];
  }
}

/* [0, 1) from 24 or 53 random bits. */
ALWAYS_INLINE double uniform24(uint32_t r) {
  return (double)(r >> 8) * 5.9604644775390625e-08; /* 2^-24 */
}

ALWAYS_INLINE double uniform53(uint32_t hi, uint32_t lo) {
  const uint64_t bits = ((uint64_t)hi << 21) ^ (lo >> 11);
  return (double)(bits & (((uint64_t)1 << 53) - 1)) * 1.1102230246251565e-16; /* 2^-53 */
}

/* Elements per Philox block (see the top of this file). */
ALWAYS_INLINE int64_t draws_per_block(uint32_t op, uint32_t dtype) {
  return op == OR_RANDOM_UNIFORM && dtype != OR_F64 ? 4 : 2;
}

/* Both normals of a block: r cos(t) and r sin(t), u1 in (0, 1] keeping the
 * log finite. Branch-free, so that loops over blocks vectorize. */
ALWAYS_INLINE void box_muller(const philox_block *b, double *first, double *second) {
  const double u1 = 1.0 - uniform53(b->w[0], b->w[1]);
  const double u2 = uniform53(b->w[2], b->w[3]);
  const double r = __builtin_sqrt(-2.0 * m_log_f64(u1));
  double s, c;
  m_sincos_fast_f64(6.283185307179586 * u2, &s, &c); /* 2 pi u2 < 2^20: the fast reduction is exact */
  *first = r * c;
  *second = r * s;
}

/*
 * The normals of float32, float16 and bfloat16 outputs: the same transform
 * of the same 53-bit uniforms, for two blocks at once (one per float64
 * lane), with a logarithm and a sine and cosine accurate to about 1e-10,
 * far below a float32's rounding, instead of the float64 functions (scalar
 * code with series to r^21 and z^11: 21 ns per element on one worker).
 * float64 outputs keep box_muller. A single block takes both lanes, so
 * every path draws the same value at a position.
 */
/* hi 2^-32 + (lo >> 11) 2^-53 per lane: uniform53's value, exactly (the two
 * parts' bits do not overlap). */
ALWAYS_INLINE v128_t uniform53x2(uint32_t hi0, uint32_t lo0, uint32_t hi1, uint32_t lo1) {
  const v128_t hi = wasm_f64x2_convert_low_u32x4(wasm_u32x4_make(hi0, hi1, 0, 0));
  const v128_t lo = wasm_f64x2_convert_low_u32x4(wasm_u32x4_make(lo0 >> 11, lo1 >> 11, 0, 0));
  return wasm_f64x2_add(wasm_f64x2_mul(hi, wasm_f64x2_splat(2.3283064365386963e-10)), /* 2^-32 */
                        wasm_f64x2_mul(lo, wasm_f64x2_splat(1.1102230246251565e-16))); /* 2^-53 */
}

/* ln x for x in [2^-53, 1]: x = m 2^e with m in [sqrt(1/2), sqrt(2)),
 * ln m = 2 atanh(s), s = (m - 1) / (m + 1), to s^11. */
ALWAYS_INLINE v128_t log_unit_x2(v128_t x) {
  v128_t e = wasm_i64x2_sub(wasm_u64x2_shr(x, 52), wasm_i64x2_splat(1023));
  v128_t m = wasm_v128_or(wasm_v128_and(x, wasm_i64x2_splat(0x000fffffffffffffll)),
                          wasm_i64x2_splat(0x3ff0000000000000ll));
  const v128_t big = wasm_f64x2_gt(m, wasm_f64x2_splat(1.4142135623730951));
  m = wasm_v128_bitselect(wasm_f64x2_mul(m, wasm_f64x2_splat(0.5)), m, big);
  e = wasm_i64x2_sub(e, big); /* big is -1 where m was halved */
  const v128_t s = wasm_f64x2_div(wasm_f64x2_sub(m, wasm_f64x2_splat(1.0)), wasm_f64x2_add(m, wasm_f64x2_splat(1.0)));
  const v128_t z = wasm_f64x2_mul(s, s);
  v128_t p = wasm_f64x2_add(wasm_f64x2_mul(z, wasm_f64x2_splat(1.0 / 11.0)), wasm_f64x2_splat(1.0 / 9.0));
  p = wasm_f64x2_add(wasm_f64x2_mul(p, z), wasm_f64x2_splat(1.0 / 7.0));
  p = wasm_f64x2_add(wasm_f64x2_mul(p, z), wasm_f64x2_splat(1.0 / 5.0));
  p = wasm_f64x2_add(wasm_f64x2_mul(p, z), wasm_f64x2_splat(1.0 / 3.0));
  const v128_t two_s = wasm_f64x2_add(s, s);
  const v128_t ln_m = wasm_f64x2_add(two_s, wasm_f64x2_mul(wasm_f64x2_mul(two_s, z), p));
  const v128_t ed = wasm_f64x2_convert_low_i32x4(wasm_i32x4_shuffle(e, e, 0, 2, 0, 2));
  return wasm_f64x2_add(wasm_f64x2_mul(ed, wasm_f64x2_splat(6.93147180559945286227e-01)), ln_m);
}

/* The normal pairs (r cos t, r sin t) of blocks b0 and b1, lane 0 and lane 1. */
ALWAYS_INLINE void box_muller_x2(const philox_block *b0, const philox_block *b1, v128_t *first, v128_t *second) {
  const v128_t u1 = wasm_f64x2_sub(wasm_f64x2_splat(1.0), uniform53x2(b0->w[0], b0->w[1], b1->w[0], b1->w[1]));
  const v128_t u2 = uniform53x2(b0->w[2], b0->w[3], b1->w[2], b1->w[3]);
  const v128_t r = wasm_f64x2_sqrt(wasm_f64x2_mul(wasm_f64x2_splat(-2.0), log_unit_x2(u1)));
  /* t = 2 pi u2 in [0, 2 pi): t = k pi/2 + a, |a| <= pi/4, k in 0..4 */
  const v128_t t = wasm_f64x2_mul(wasm_f64x2_splat(6.283185307179586), u2);
  const v128_t k = wasm_f64x2_nearest(wasm_f64x2_mul(t, wasm_f64x2_splat(0.6366197723675814)));
  const v128_t a = wasm_f64x2_sub(wasm_f64x2_sub(t, wasm_f64x2_mul(k, wasm_f64x2_splat(1.5707963267341256))),
                                  wasm_f64x2_mul(k, wasm_f64x2_splat(6.077100506303966e-11)));
  const v128_t z = wasm_f64x2_mul(a, a);
  v128_t ps = wasm_f64x2_add(wasm_f64x2_mul(z, wasm_f64x2_splat(-1.0 / 39916800.0)), wasm_f64x2_splat(1.0 / 362880.0));
  ps = wasm_f64x2_add(wasm_f64x2_mul(ps, z), wasm_f64x2_splat(-1.0 / 5040.0));
  ps = wasm_f64x2_add(wasm_f64x2_mul(ps, z), wasm_f64x2_splat(1.0 / 120.0));
  ps = wasm_f64x2_add(wasm_f64x2_mul(ps, z), wasm_f64x2_splat(-1.0 / 6.0));
  const v128_t sa = wasm_f64x2_add(a, wasm_f64x2_mul(wasm_f64x2_mul(a, z), ps));
  v128_t pc = wasm_f64x2_add(wasm_f64x2_mul(z, wasm_f64x2_splat(1.0 / 479001600.0)), wasm_f64x2_splat(-1.0 / 3628800.0));
  pc = wasm_f64x2_add(wasm_f64x2_mul(pc, z), wasm_f64x2_splat(1.0 / 40320.0));
  pc = wasm_f64x2_add(wasm_f64x2_mul(pc, z), wasm_f64x2_splat(-1.0 / 720.0));
  pc = wasm_f64x2_add(wasm_f64x2_mul(pc, z), wasm_f64x2_splat(1.0 / 24.0));
  pc = wasm_f64x2_add(wasm_f64x2_mul(pc, z), wasm_f64x2_splat(-0.5));
  const v128_t ca = wasm_f64x2_add(wasm_f64x2_splat(1.0), wasm_f64x2_mul(z, pc));
  /* the quadrant k mod 4 (k = 4 is quadrant 0) */
  const v128_t q1 = wasm_f64x2_eq(k, wasm_f64x2_splat(1.0)), q2 = wasm_f64x2_eq(k, wasm_f64x2_splat(2.0));
  const v128_t q3 = wasm_f64x2_eq(k, wasm_f64x2_splat(3.0));
  const v128_t odd = wasm_v128_or(q1, q3), negative = wasm_v128_or(q2, q3);
  const v128_t sq = wasm_v128_bitselect(ca, sa, odd), cq = wasm_v128_bitselect(wasm_f64x2_neg(sa), ca, odd);
  const v128_t sin_t = wasm_v128_bitselect(wasm_f64x2_neg(sq), sq, negative);
  const v128_t cos_t = wasm_v128_bitselect(wasm_f64x2_neg(cq), cq, negative);
  *first = wasm_f64x2_mul(r, cos_t);
  *second = wasm_f64x2_mul(r, sin_t);
}

/* A float op's value from slot `slot` of a block: `a0`, `a1` are the op's
 * bounds (uniform), mean and deviation (normal) or probability (Bernoulli,
 * checked by the caller); `wide`: 53 random bits for a uniform (float64). */
ALWAYS_INLINE double sample(uint32_t op, const philox_block *b, int slot, int wide, double a0, double a1) {
  switch (op) {
  case OR_RANDOM_UNIFORM:
    return a0 + (wide ? uniform53(b->w[2 * slot], b->w[2 * slot + 1]) : uniform24(b->w[slot])) * (a1 - a0);
  case OR_RANDOM_NORMAL: {
    double z0, z1;
    if (wide) { /* float64 */
      box_muller(b, &z0, &z1);
    } else {
      v128_t f, s;
      box_muller_x2(b, b, &f, &s);
      z0 = wasm_f64x2_extract_lane(f, 0);
      z1 = wasm_f64x2_extract_lane(s, 0);
    }
    return a0 + a1 * (slot ? z1 : z0);
  }
  default: /* OR_RANDOM_BERNOULLI */
    return uniform53(b->w[2 * slot], b->w[2 * slot + 1]) < a0 ? 1.0 : 0.0;
  }
}

/* A probability outside [0, 1] stops the kernel, as CUDA's device assert. */
ALWAYS_INLINE void check_probability(double prob) {
  if (!(prob >= 0.0 && prob <= 1.0)) {
    TRAP();
  }
}

/* One element from slot `slot` of its block. */
static void draw(const or_random *p, const philox_block *b, int slot, char *out, const char *in) {
  switch (p->op) {
  case OR_RANDOM_UNIFORM:
  case OR_RANDOM_NORMAL:
    store_F64(out, p->dtype, sample(p->op, b, slot, p->dtype == OR_F64, p->args[0].f, p->args[1].f));
    return;
  case OR_RANDOM_BERNOULLI: {
    const double prob = p->in_dtype ? load_F64(in, p->in_dtype) : p->args[0].f;
    check_probability(prob);
    store_F64(out, p->dtype, sample(p->op, b, slot, 0, prob, 0.0));
    return;
  }
  case OR_RANDOM_RANGE: {
    const uint64_t r = ((uint64_t)b->w[2 * slot] << 32) | b->w[2 * slot + 1];
    const uint64_t n = (uint64_t)p->args[1].i; /* 0: all 2^64 values */
    store_I64(out, p->dtype, (int64_t)((uint64_t)p->args[0].i + (n ? r % n : r)));
    return;
  }
  default:
    TRAP();
  }
}

/* Whether the output is row-major contiguous and nothing is read: positions
 * are then consecutive elements. */
static int contiguous_output(const or_random *p) {
  int64_t expect = (int64_t)dtype_size(p->dtype);
  for (int d = (int)p->ndim - 1; d >= 0; d--) {
    if (p->sizes[d] != 1 && p->strides[0][d] != expect) {
      return 0;
    }
    expect *= p->sizes[d];
  }
  return p->in_dtype == 0;
}

/* Positions [lo, hi) of a contiguous float32 output (lo a multiple of 16):
 * draw()'s values, four blocks at a time, without its per-element walk and
 * dispatch; a block's two normals come from one transform. */
static void fill_f32(const or_random *p, int64_t lo, int64_t hi) {
  float *out = (float *)device_ptr(p->data[0]);
  const uint32_t op = p->op;
  const uint64_t seed = p->seed, offset = p->offset;
  const double a0 = p->args[0].f, a1 = p->args[1].f;
  if (op == OR_RANDOM_BERNOULLI) {
    check_probability(a0);
  }
  const int64_t per = draws_per_block(op, OR_F32);
  philox_block b[4];
  double v[16];
  for (int64_t i = lo; i < hi; i += 4 * per) {
    philox4(seed, (uint64_t)(i / per), offset, b);
    if (op == OR_RANDOM_UNIFORM) { /* (the op a constant, so each loop inlines its draw) */
      for (int e = 0; e < 16; e++) {
        v[e] = sample(OR_RANDOM_UNIFORM, &b[e / 4], e % 4, 0, a0, a1);
      }
    } else if (op == OR_RANDOM_NORMAL) {
      for (int l = 0; l < 4; l += 2) {
        v128_t f, s;
        box_muller_x2(&b[l], &b[l + 1], &f, &s);
        v[2 * l] = a0 + a1 * wasm_f64x2_extract_lane(f, 0);
        v[2 * l + 1] = a0 + a1 * wasm_f64x2_extract_lane(s, 0);
        v[2 * l + 2] = a0 + a1 * wasm_f64x2_extract_lane(f, 1);
        v[2 * l + 3] = a0 + a1 * wasm_f64x2_extract_lane(s, 1);
      }
    } else {
      for (int e = 0; e < 8; e++) {
        v[e] = sample(OR_RANDOM_BERNOULLI, &b[e / 2], e % 2, 0, a0, a1);
      }
    }
    const int n = hi - i < 4 * per ? (int)(hi - i) : (int)(4 * per);
    for (int e = 0; e < n; e++) {
      out[i + e] = (float)v[e];
    }
  }
}

EXPORT(random) void random(const or_random *p, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  if (p->op >= OR_RANDOM_COUNT || p->ndim > OR_MAX_DIMS) {
    TRAP();
  }
  (void)dtype_size(p->dtype);
  const uint32_t nd = p->ndim;
  int64_t total = 1;
  for (uint32_t d = 0; d < nd; d++) {
    total *= p->sizes[d];
  }
  if (total == 0) {
    return;
  }
  /* This worker's positions [lo, hi), walked in row-major order: the last
   * dimension varies fastest. */
  int64_t lo, hi;
  split_range(total, 16, worker, workers, &lo, &hi);
  if (p->dtype == OR_F32 && p->op != OR_RANDOM_RANGE && contiguous_output(p)) {
    fill_f32(p, lo, hi);
    return;
  }
  int64_t pos[OR_MAX_DIMS] = {0};
  char *out = device_ptr(p->data[0]);
  const char *in = p->in_dtype ? device_ptr(p->data[1]) : 0;
  for (int64_t rest = lo, d = (int64_t)nd - 1; d >= 0; d--) {
    pos[d] = rest % p->sizes[d];
    rest /= p->sizes[d];
    out += pos[d] * p->strides[0][d];
    if (in) {
      in += pos[d] * p->strides[1][d];
    }
  }
  const int64_t per = draws_per_block(p->op, p->dtype);
  philox_block blocks[4];
  uint64_t first = 0; /* the block in blocks[0] */
  for (int64_t i = lo; i < hi; i++) {
    const uint64_t block = (uint64_t)(i / per);
    if (i == lo || block - first >= 4) {
      first = block;
      philox4(p->seed, block, p->offset, blocks);
    }
    draw(p, &blocks[block - first], (int)(i % per), out, in);
    for (int d = (int)nd - 1; d >= 0; d--) {
      out += p->strides[0][d];
      if (in) {
        in += p->strides[1][d];
      }
      if (++pos[d] < p->sizes[d]) {
        break;
      }
      out -= p->strides[0][d] * p->sizes[d];
      if (in) {
        in -= p->strides[1][d] * p->sizes[d];
      }
      pos[d] = 0;
    }
  }
}
