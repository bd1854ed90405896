/*
 * The linear-algebra engine of `openreg.engine`: one kernel, `gemm`, for
 * out = beta * out + alpha * a @ b over a batch of matrices of any strides
 * (see or_gemm in openreg_engine.h). The shim serves mm, addmm, bmm,
 * baddbmm, addmv, mv and dot with it; matmul and linear reach it through
 * them.
 *
 * Structure (the classic packed GEMM, as in BLIS):
 *   - for each NC-wide panel of b and KC-deep slice of k, the panel is
 *     packed into NR-wide slivers (k-major, zero-padded), then for each
 *     MC-high block of a, the block is packed into MR-high slivers;
 *     packing reads any strides and dtype and converts to the compute type
 *     (float16 and bfloat16 to float32), so the inner loop sees one layout;
 *   - a register tile of MR x NR accumulators (3 rows of two SIMD vectors:
 *     3 x 8 for float32, 3 x 4 for float64) runs over the KC slice; each
 *     step splats each row's element of a by a lane shuffle and multiplies
 *     it with two vectors of b (see the tile below for the shape);
 *   - the tile goes to out: the first slice of k as alpha * acc + beta * out,
 *     later ones add alpha * acc (a full tile with alpha = 1 and beta 0 or 1
 *     writes out from registers, else through a tile buffer). For
 *     float16/bfloat16 the slices add up in a float32 accumulator and out is
 *     written once, rounded once;
 *   - a matrix-vector product (n == 1, or m == 1 transposed) runs as dot
 *     products of a's rows when they are contiguous, else as a sum of a's
 *     columns scaled by the vector;
 *   - an out with contiguous columns is computed transposed (out^T = b^T a^T)
 *     so that tiles are written along rows; so is a long product whose
 *     tiles fit out's shape better that way (tile_waste).
 *
 * Numerics: float32's tile adds each pair of steps of k as acc + (a0 * b0 +
 * a1 * b1), the pair's sum one fused multiply-add over the second product
 * (relaxed SIMD, run by the runtime in wasmtime's deterministic mode, so it
 * is fused on every host); everywhere else each product and each addition
 * rounds once. An output element's value depends only on k, on which
 * way its operands are contiguous, on whether the product is a
 * matrix-vector one (m or n is 1: those sum in a different order) and on the
 * constants in openreg_engine.h; not on the other sizes, the batch or how the
 * work is split, so a run is bit-reproducible. Integers accumulate in int64
 * and wrap, as on CPU.
 *
 * Compiled for wasm32 and wasm64 with the rest of the engine (build.rs).
 */
#include "dtype.h"

#include <wasm_simd128.h>

#pragma STDC FP_CONTRACT OFF

ALWAYS_INLINE int64_t abs_i64(int64_t x) {
  return x < 0 ? -x : x;
}

ALWAYS_INLINE int64_t min_i64(int64_t x, int64_t y) {
  return x < y ? x : y;
}

/* Packing float32 slivers with SIMD (the common layouts; small products
 * spend as long packing as multiplying when it is element by element). The
 * loops keep their row pointers in locals and are functions of their own
 * (NOINLINE): an array of pointers rebuilt for every four steps, inlined
 * into pack_##C, took 0.6 ns per element (0.14-0.19 this way, 3-high slivers). */

/* Four steps of a 3-high sliver (12 values, three vectors) from 3 rows
 * contiguous along k: dst[q * 3 + i] = row i's q-th value. */
ALWAYS_INLINE void pack4_rows3_f32(float *dst, const float *x0, const float *x1, const float *x2) {
  const v128_t r0 = wasm_v128_load(x0), r1 = wasm_v128_load(x1), r2 = wasm_v128_load(x2);
  const v128_t lo = wasm_i32x4_shuffle(r0, r1, 0, 4, 1, 5); /* r0[0] r1[0] r0[1] r1[1] */
  const v128_t hi = wasm_i32x4_shuffle(r0, r1, 2, 6, 3, 7); /* r0[2] r1[2] r0[3] r1[3] */
  const v128_t mid = wasm_i32x4_shuffle(lo, r2, 3, 5, 3, 5); /* r1[1] r2[1] - - */
  wasm_v128_store(dst, wasm_i32x4_shuffle(lo, r2, 0, 1, 4, 2));
  wasm_v128_store(dst + 4, wasm_i32x4_shuffle(mid, hi, 0, 1, 4, 5));
  wasm_v128_store(dst + 8, wasm_i32x4_shuffle(hi, r2, 6, 2, 3, 7));
}

/* Four steps of lanes g..g+3 of an 8-high sliver from 4 rows contiguous
 * along k (a 4 x 4 transpose): dst[q * 8 + g + i] = row i's q-th value. */
ALWAYS_INLINE void pack4_rows4_f32(float *dst, const float *x0, const float *x1, const float *x2, const float *x3) {
  const v128_t v0 = wasm_v128_load(x0), v1 = wasm_v128_load(x1), v2 = wasm_v128_load(x2), v3 = wasm_v128_load(x3);
  const v128_t a = wasm_i32x4_shuffle(v0, v1, 0, 4, 1, 5), b = wasm_i32x4_shuffle(v0, v1, 2, 6, 3, 7);
  const v128_t c = wasm_i32x4_shuffle(v2, v3, 0, 4, 1, 5), d = wasm_i32x4_shuffle(v2, v3, 2, 6, 3, 7);
  wasm_v128_store(dst, wasm_i32x4_shuffle(a, c, 0, 1, 4, 5));
  wasm_v128_store(dst + 8, wasm_i32x4_shuffle(a, c, 2, 3, 6, 7));
  wasm_v128_store(dst + 16, wasm_i32x4_shuffle(b, d, 0, 1, 4, 5));
  wasm_v128_store(dst + 24, wasm_i32x4_shuffle(b, d, 2, 3, 6, 7));
}

/* A 3-high sliver of `depth` steps from 3 rows contiguous along k, `rs`
 * bytes apart (a block of a as it is stored). */
NOINLINE static void pack_rows3_f32(float *dst, const char *base, int64_t rs, int64_t depth) {
  const float *x0 = (const float *)base, *x1 = (const float *)(base + rs), *x2 = (const float *)(base + 2 * rs);
  int64_t p = 0;
  for (; p + 4 <= depth; p += 4, dst += 12) pack4_rows3_f32(dst, x0 + p, x1 + p, x2 + p);
  for (; p < depth; p++, dst += 3) dst[0] = x0[p], dst[1] = x1[p], dst[2] = x2[p];
}

/* An 8-high sliver of `depth` steps from 8 rows contiguous along k, `rs`
 * bytes apart (a panel of b stored as b^T, as nn.Linear's weight is). */
NOINLINE static void pack_rows8_f32(float *dst, const char *base, int64_t rs, int64_t depth) {
  const float *x0 = (const float *)base, *x1 = (const float *)(base + rs), *x2 = (const float *)(base + 2 * rs);
  const float *x3 = (const float *)(base + 3 * rs), *x4 = (const float *)(base + 4 * rs);
  const float *x5 = (const float *)(base + 5 * rs), *x6 = (const float *)(base + 6 * rs);
  const float *x7 = (const float *)(base + 7 * rs);
  int64_t p = 0;
  for (; p + 4 <= depth; p += 4, dst += 32) {
    pack4_rows4_f32(dst, x0 + p, x1 + p, x2 + p, x3 + p);
    pack4_rows4_f32(dst + 4, x4 + p, x5 + p, x6 + p, x7 + p);
  }
  for (; p < depth; p++, dst += 8) {
    dst[0] = x0[p], dst[1] = x1[p], dst[2] = x2[p], dst[3] = x3[p];
    dst[4] = x4[p], dst[5] = x5[p], dst[6] = x6[p], dst[7] = x7[p];
  }
}

/*
 * `slivers` full R-high slivers (R = 3 or 8) of `depth` steps from a matrix
 * whose sliver rows are contiguous (a panel of b stored row-major, or a block
 * of a stored transposed: step p's R values of sliver s are at src + p * cs
 * + R s). Eight slivers at a time, step by step: one sliver's steps lie a
 * row of the matrix apart, and rows a multiple of 4 KB apart share a cache
 * set, so packing a sliver at a time lost each line before the next sliver
 * read its other half (0.6 ns per element; 0.13-0.15 this way). All slivers
 * per step instead read whole rows but stored to addresses a sliver apart,
 * which alias the loads when a sliver is a multiple of 4 KB (depth 128,
 * 256): eight keep that short. Other 8-wide slivers take whole rows: with
 * eight, each step read 4 lines of a row and the next group came back for
 * the next 4, so a panel not in L2 (the im2col matrix of a convolution,
 * 27 x 1024 per sample) waited on L3 for every 4 lines (0.9 ns per
 * element; 0.45 whole rows).
 */
ALWAYS_INLINE void pack_columns_f32(float *dst, const char *src, int64_t cs, int64_t slivers, int64_t depth,
                                    int R) {
  const int64_t size = R * depth; /* floats per sliver */
  const int64_t per_group = R == 8 && size % 1024 != 0 ? slivers : 8; /* 1024 floats: 4 KB */
  for (int64_t s0 = 0; s0 < slivers; s0 += per_group) {
    const int64_t group = min_i64(per_group, slivers - s0);
    int64_t p = 0;
    /* R = 3: four steps of a sliver (12 floats, three vectors) from four
     * 16-byte loads, each a float past its sliver; row p + 4 exists, so
     * that float lies before the end of its slivers and is in bounds */
    for (; R == 3 && cs > 0 && p + 4 < depth; p += 4) {
      const float *x0 = (const float *)(src + p * cs) + R * s0, *x1 = (const float *)((const char *)x0 + cs);
      const float *x2 = (const float *)((const char *)x1 + cs), *x3 = (const float *)((const char *)x2 + cs);
      float *d = dst + s0 * size + R * p;
      for (int64_t s = 0; s < group; s++, x0 += R, x1 += R, x2 += R, x3 += R, d += size) {
        const v128_t a = wasm_v128_load(x0), b = wasm_v128_load(x1), c = wasm_v128_load(x2);
        const v128_t e = wasm_v128_load(x3);
        wasm_v128_store(d, wasm_i32x4_shuffle(a, b, 0, 1, 2, 4));
        wasm_v128_store(d + 4, wasm_i32x4_shuffle(b, c, 1, 2, 4, 5));
        wasm_v128_store(d + 8, wasm_i32x4_shuffle(c, e, 2, 4, 5, 6));
      }
    }
    for (; p < depth; p++) {
      const float *row = (const float *)(src + p * cs) + R * s0;
      float *d = dst + s0 * size + R * p;
      for (int64_t s = 0; s < group; s++, row += R, d += size) {
        if (R == 8) {
          wasm_v128_store(d, wasm_v128_load(row));
          wasm_v128_store(d + 4, wasm_v128_load(row + 4));
        } else {
          d[0] = row[0], d[1] = row[1], d[2] = row[2];
        }
      }
    }
  }
}

NOINLINE static void pack_columns3_f32(float *dst, const char *src, int64_t cs, int64_t slivers, int64_t depth) {
  pack_columns_f32(dst, src, cs, slivers, depth, 3);
}

NOINLINE static void pack_columns8_f32(float *dst, const char *src, int64_t cs, int64_t slivers, int64_t depth) {
  pack_columns_f32(dst, src, cs, slivers, depth, 8);
}

/*
 * The register tile. Cranelift computes a pure value just before its first
 * use by a load, a store or a branch, keeps loads and stores in program
 * order, and keeps values that live across a loop header in memory (the
 * header's epoch check calls out on its slow path). A tile written as one
 * loop over k, as in C, therefore loaded every operand of a step (or of
 * several unrolled steps) first and then ran each accumulator's chain,
 * with the accumulators going through the stack on every iteration. On a
 * CPU that forwards stores to loads slowly (Zen 3) that ran at 45% of the
 * same tile in native code. So the accumulators live in the tile buffer
 * between chunks of 16 steps, and every two steps they are stored there:
 * each pair of steps is computed right after its loads. A pair's operands,
 * splats and accumulators must then fit in the 16 SIMD registers, which
 * sets the tile's shape (float32: 3 x 8, below). Volatile accesses keep
 * clang from merging or dropping those stores. Each accumulator still adds
 * its products in order of k, so the results are those of a plain loop.
 */
ALWAYS_INLINE v128_t tile_load(const void *p) {
  return *(const volatile v128_t *)p;
}

ALWAYS_INLINE void tile_store(void *p, v128_t v) {
  *(volatile v128_t *)p = v;
}

/* acc += s * b, rounding the product and the sum (an odd last step). */
#define OR_GEMM_MADD_F32(acc, s, b) acc = wasm_f32x4_add(acc, wasm_f32x4_mul(s, b))
#define OR_GEMM_MADD_F64(acc, s, b) acc = wasm_f64x2_add(acc, wasm_f64x2_mul(s, b))

/*
 * acc += s0 * b + s1 * d for a pair of steps. float32: the second step's
 * product, rounded, then the first's fused onto it (one rounding), then the
 * sum to the accumulator. Fusing each step into the accumulator instead
 * made each accumulator a chain of two FMAs per pair (8 cycles of latency on
 * Zen 3 and 4 for 6 accumulators: 36 GFLOP/s in the tile on Zen 4, no
 * faster than a multiply and an add); this way the chain is one add per
 * pair and the tile runs at 42. Relaxed SIMD's madd may fuse or not
 * depending on the host, so the runtime runs wasm in wasmtime's
 * deterministic relaxed-SIMD mode, where it always fuses (a library call on
 * a host without FMA): results stay the same on every host. float64 adds
 * each step's rounded product in turn: its pair holds 3 vectors of a, and
 * the fused form's temporaries then spilled (12.4 against 15.7 GFLOP/s).
 */
#define OR_GEMM_MADD2_F32(acc, s0, b, s1, d)                                                 \
  acc = wasm_f32x4_add(acc, wasm_f32x4_relaxed_madd(s0, b, wasm_f32x4_mul(s1, d)))
#define OR_GEMM_MADD2_F64(acc, s0, b, s1, d)                                                 \
  OR_GEMM_MADD_F64(acc, s0, b);                                                              \
  OR_GEMM_MADD_F64(acc, s1, d)
/* The tile functions use relaxed SIMD (as do the elementwise engine's multiply-adds). */
#define OR_GEMM_RELAXED __attribute__((target("relaxed-simd")))

/* 16 bytes at any address (a sliver of 3 rows is not 16-byte aligned). */
typedef struct {
  v128_t v;
} __attribute__((packed, may_alias)) or_unaligned_v128;

ALWAYS_INLINE v128_t tile_load_unaligned(const void *p) {
  return ((const volatile or_unaligned_v128 *)p)->v;
}

/*
 * The tile is 3 rows of a times 2 vectors of b (3 x 8 for float32, 3 x 4
 * for float64): six accumulators. a's sliver holds 3 values per step, so a
 * pair of steps reads its 6 values as whole vectors (float32: at ap and
 * ap + 2, lanes 0-3 then 2-3; float64: at ap, ap + 2 and ap + 4) and splats
 * each by a lane shuffle. The pair's operand vectors, two splats and a
 * product then take 15 (float32) or 16 (float64) of the 16 SIMD registers;
 * 4 rows and 8 accumulators spilled one accumulator through the stack on
 * every pair, and ran 10% (float32) and 25% (float64) slower.
 */
#define OR_GEMM_A_PAIR_F32(q)                                                                \
  const v128_t v0 = tile_load_unaligned(ap + 3 * (q)), v1 = tile_load_unaligned(ap + 3 * (q) + 2);
#define OR_GEMM_A_PAIR_F64(q)                                                                \
  const v128_t v0 = tile_load_unaligned(ap + 3 * (q)), v1 = tile_load_unaligned(ap + 3 * (q) + 2); \
  const v128_t v2 = tile_load_unaligned(ap + 3 * (q) + 4);
/* The splat of the pair's value i (step i / 3, row i % 3): lane LANE of vector V. */
#define OR_GEMM_A_F32(i) wasm_i32x4_shuffle(OR_GEMM_V_F32_##i, OR_GEMM_V_F32_##i, OR_GEMM_LANE_F32(i),       \
                                            OR_GEMM_LANE_F32(i), OR_GEMM_LANE_F32(i), OR_GEMM_LANE_F32(i))
#define OR_GEMM_A_F64(i) wasm_i64x2_shuffle(OR_GEMM_V_F64_##i, OR_GEMM_V_F64_##i, (i) % 2, (i) % 2)
#define OR_GEMM_LANE_F32(i) ((i) < 4 ? (i) : (i) - 2)
#define OR_GEMM_V_F32_0 v0
#define OR_GEMM_V_F32_1 v0
#define OR_GEMM_V_F32_2 v0
#define OR_GEMM_V_F32_3 v0
#define OR_GEMM_V_F32_4 v1
#define OR_GEMM_V_F32_5 v1
#define OR_GEMM_V_F64_0 v0
#define OR_GEMM_V_F64_1 v0
#define OR_GEMM_V_F64_2 v1
#define OR_GEMM_V_F64_3 v1
#define OR_GEMM_V_F64_4 v2
#define OR_GEMM_V_F64_5 v2

/* Row r of a (splat s) times b's two vectors, into row r's accumulators. */
#define OR_GEMM_ROW(C, s, b0, b1, cx, cy)                                                    \
  {                                                                                          \
    const v128_t splat = s;                                                                  \
    OR_GEMM_MADD_##C(cx, splat, b0);                                                         \
    OR_GEMM_MADD_##C(cy, splat, b1);                                                         \
  }

/* Row r (splats s0 and s1 of steps q and q + 1) times b's vectors of the
 * two steps, into row r's accumulators. */
#define OR_GEMM_ROW_PAIR(C, s0, s1, b0, b1, d0, d1, cx, cy)                                  \
  {                                                                                          \
    const v128_t first = s0, second = s1;                                                    \
    OR_GEMM_MADD2_##C(cx, first, b0, second, d0);                                            \
    OR_GEMM_MADD2_##C(cy, first, b1, second, d1);                                            \
  }

/* Steps q and q + 1 (L lanes per vector), then the accumulators to the tile buffer. */
#define OR_GEMM_PAIR(C, L, q)                                                                \
  {                                                                                          \
    OR_GEMM_A_PAIR_##C(q)                                                                    \
    const v128_t b0 = tile_load(bp + 2 * (L) * (q)), b1 = tile_load(bp + 2 * (L) * (q) + (L)); \
    const v128_t d0 = tile_load(bp + 2 * (L) * (q) + 2 * (L));                               \
    const v128_t d1 = tile_load(bp + 2 * (L) * (q) + 3 * (L));                               \
    OR_GEMM_ROW_PAIR(C, OR_GEMM_A_##C(0), OR_GEMM_A_##C(3), b0, b1, d0, d1, c0, c1)          \
    OR_GEMM_ROW_PAIR(C, OR_GEMM_A_##C(1), OR_GEMM_A_##C(4), b0, b1, d0, d1, c2, c3)          \
    OR_GEMM_ROW_PAIR(C, OR_GEMM_A_##C(2), OR_GEMM_A_##C(5), b0, b1, d0, d1, c4, c5)          \
    OR_GEMM_TILE_OUT(L);                                                                     \
  }

/* One step (the last of an odd kc). */
#define OR_GEMM_STEP(C, L, VSPLAT)                                                           \
  {                                                                                          \
    const v128_t b0 = tile_load(bp), b1 = tile_load(bp + (L));                               \
    OR_GEMM_ROW(C, VSPLAT(ap[0]), b0, b1, c0, c1)                                            \
    OR_GEMM_ROW(C, VSPLAT(ap[1]), b0, b1, c2, c3)                                            \
    OR_GEMM_ROW(C, VSPLAT(ap[2]), b0, b1, c4, c5)                                            \
  }

/* The accumulators to the tile buffer (row r's two vectors at r * 2L), and back. */
#define OR_GEMM_TILE_OUT(L)                                                                  \
  tile_store(tile, c0), tile_store(tile + (L), c1), tile_store(tile + 2 * (L), c2);          \
  tile_store(tile + 3 * (L), c3), tile_store(tile + 4 * (L), c4), tile_store(tile + 5 * (L), c5)
#define OR_GEMM_TILE_IN(L)                                                                   \
  c0 = tile_load(tile), c1 = tile_load(tile + (L)), c2 = tile_load(tile + 2 * (L));          \
  c3 = tile_load(tile + 3 * (L)), c4 = tile_load(tile + 4 * (L)), c5 = tile_load(tile + 5 * (L))

/* A pair of steps, then a and b move past it. */
#define OR_GEMM_NEXT_PAIR(C, L, MR, NR)                                                      \
  OR_GEMM_PAIR(C, L, 0)                                                                      \
  ap += 2 * (MR);                                                                            \
  bp += 2 * (NR);

/* 16 steps, then a and b move past them. */
#define OR_GEMM_CHUNK(C, L, MR, NR)                                                          \
  OR_GEMM_PAIR(C, L, 0) OR_GEMM_PAIR(C, L, 2) OR_GEMM_PAIR(C, L, 4) OR_GEMM_PAIR(C, L, 6)     \
  OR_GEMM_PAIR(C, L, 8) OR_GEMM_PAIR(C, L, 10) OR_GEMM_PAIR(C, L, 12) OR_GEMM_PAIR(C, L, 14)  \
  ap += 16 * (MR);                                                                           \
  bp += 16 * (NR);

/* Where a tile's result goes besides the tile buffer (see gemm_core). */
#define OR_TILE_BUFFER 0 /* only the buffer: store_tile writes out */
#define OR_TILE_STORE 1  /* out = acc */
#define OR_TILE_ADD 2    /* out = out + acc */

#define OR_GEMM_VADD_F32 wasm_f32x4_add
#define OR_GEMM_VADD_F64 wasm_f64x2_add

/* Row r of the tile (accumulators cx, cy) to out, as `direct` says. */
#define OR_GEMM_DIRECT_ROW(C, L, r, cx, cy)                                                  \
  {                                                                                          \
    v128_t *o = (v128_t *)(out + (r) * rso);                                                 \
    v128_t *o1 = (v128_t *)(out + (r) * rso + (L));                                          \
    if (direct == OR_TILE_ADD) {                                                             \
      cx = OR_GEMM_VADD_##C(wasm_v128_load(o), cx);                                          \
      cy = OR_GEMM_VADD_##C(wasm_v128_load(o1), cy);                                         \
    }                                                                                        \
    wasm_v128_store(o, cx);                                                                  \
    wasm_v128_store(o1, cy);                                                                 \
  }

/* The register tile: tile = a sliver (MR x kc) @ b sliver (kc x NR), the
 * accumulators going through the tile buffer every 16 steps (see above).
 * A full tile whose out has contiguous columns (rso elements between rows)
 * may also go straight to out (`direct`), which saves store_tile's pass
 * over the buffer: for short products (k = 16) that pass took a quarter of
 * the time. */
#define OR_DEFINE_TILE(C, T, L, MR, NR, VSPLAT)                                              \
  OR_GEMM_RELAXED static void tile_##C(int64_t kc, const T *a_sliver, const T *b_sliver, T *tile, \
                                       T *out, int64_t rso, int direct, int64_t tiles) {     \
  for (int64_t t = 0; t < tiles; t++) {                                                      \
    const T *ap = a_sliver + t * (MR) * kc, *bp = b_sliver;                                  \
    v128_t c0 = wasm_i32x4_splat(0), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;            \
    OR_GEMM_TILE_OUT(L);                                                                     \
    int64_t p = 0;                                                                           \
    _Pragma("clang loop unroll(disable)") for (; p + 16 <= kc; p += 16) {                    \
      OR_GEMM_TILE_IN(L);                                                                    \
      OR_GEMM_CHUNK(C, L, MR, NR)                                                            \
    }                                                                                        \
    if (p < kc) {                                                                            \
      /* The last kc % 16 steps: their pairs unrolled, entered at the first                  \
       * one left (no loop, so the accumulators stay in registers), then an                  \
       * odd step. */                                                                        \
      OR_GEMM_TILE_IN(L);                                                                    \
      switch ((kc - p) / 2) {                                                                \
      case 7: OR_GEMM_NEXT_PAIR(C, L, MR, NR) /* fallthrough */                              \
      case 6: OR_GEMM_NEXT_PAIR(C, L, MR, NR) /* fallthrough */                              \
      case 5: OR_GEMM_NEXT_PAIR(C, L, MR, NR) /* fallthrough */                              \
      case 4: OR_GEMM_NEXT_PAIR(C, L, MR, NR) /* fallthrough */                              \
      case 3: OR_GEMM_NEXT_PAIR(C, L, MR, NR) /* fallthrough */                              \
      case 2: OR_GEMM_NEXT_PAIR(C, L, MR, NR) /* fallthrough */                              \
      case 1: OR_GEMM_NEXT_PAIR(C, L, MR, NR) /* fallthrough */                              \
      default: break;                                                                        \
      }                                                                                      \
      if ((kc - p) % 2) {                                                                    \
        OR_GEMM_STEP(C, L, VSPLAT)                                                           \
        OR_GEMM_TILE_OUT(L);                                                                 \
      }                                                                                      \
    }                                                                                        \
    if (direct != OR_TILE_BUFFER) {                                                          \
      OR_GEMM_DIRECT_ROW(C, L, 0, c0, c1)                                                    \
      OR_GEMM_DIRECT_ROW(C, L, 1, c2, c3)                                                    \
      OR_GEMM_DIRECT_ROW(C, L, 2, c4, c5)                                                    \
      out += (MR) * rso;                                                                     \
    }                                                                                        \
  }                                                                                          \
  }

OR_STATIC_ASSERT(OR_GEMM_F32_MR == 3 && OR_GEMM_F64_MR == 3, "the tiles are 3 rows high");
OR_STATIC_ASSERT(OR_GEMM_F32_NR == 8 && OR_GEMM_F64_NR == 4, "the tiles are 2 vectors wide");
OR_DEFINE_TILE(F32, float, 4, OR_GEMM_F32_MR, OR_GEMM_F32_NR, wasm_f32x4_splat)
OR_DEFINE_TILE(F64, double, 2, OR_GEMM_F64_MR, OR_GEMM_F64_NR, wasm_f64x2_splat)

/*
 * The float GEMM for compute type C (element T, L lanes per vector,
 * MR x NR tile with NR = 2 * L, NC columns packed at once).
 */
#define OR_DEFINE_GEMM(C, T, L, MR, NR, NC, VADD, VMUL, VSPLAT)                                          \
  /* n elements of any dtype, `stride` bytes apart, into dst (compute type). */                                \
  ALWAYS_INLINE void gather_##C(T *dst, const char *p, int64_t stride, uint32_t dtype, int64_t n) {                \
    if (dtype == NATIVE_##C && stride == (int64_t)sizeof(T)) {                                                  \
      copy_bytes(dst, p, (usize)n * sizeof(T));                                                                 \
      return;                                                                                                   \
    }                                                                                                           \
    load_row_##C(dst, p, stride, dtype, n);                                                                     \
  }                                                                                                             \
                                                                                                                \
  /* Packs `rows` x `depth` of a matrix into R-high slivers: sliver s holds                                       \
   * rows [s*R, s*R + R) depth-major (R values per step along k), zero-padded.                                 \
   * A block of a is packed as it is (R = MR), a panel of b as b^T (R = NR). */                                 \
  static void pack_##C(T *dst, const char *src, int64_t rs, int64_t cs, uint32_t dtype, int64_t rows,            \
                       int64_t depth, int64_t R) {                                                              \
    T line[OR_GEMM_KC];                                                                                         \
    const int f32 = L == 4 && dtype == NATIVE_##C; /* the SIMD packs below */                                  \
    int64_t r0 = 0;                                                                                             \
    if (f32 && (R == 3 || R == 8) && rs == (int64_t)sizeof(T)) { /* full slivers of contiguous columns */       \
      r0 = rows / R * R;                                                                                        \
      if (R == 3) {                                                                                             \
        pack_columns3_f32((float *)dst, src, cs, rows / R, depth);                                              \
      } else {                                                                                                  \
        pack_columns8_f32((float *)dst, src, cs, rows / R, depth);                                              \
      }                                                                                                         \
      dst += r0 * depth;                                                                                        \
    }                                                                                                           \
    for (; r0 < rows; r0 += R) {                                                                                \
      const int64_t r = min_i64(R, rows - r0);                                                                  \
      const char *base = src + r0 * rs;                                                                         \
      if (dtype == NATIVE_##C && rs == (int64_t)sizeof(T)) { /* contiguous columns: r elements per step */      \
        for (int64_t p = 0; p < depth; p++) {                                                                   \
          const T *col = (const T *)(base + p * cs);                                                            \
          T *d = dst + p * R;                                                                                   \
          for (int64_t i = 0; i < r; i++) d[i] = col[i];                                                        \
          for (int64_t i = r; i < R; i++) d[i] = (T)0;                                                          \
        }                                                                                                       \
      } else if (f32 && r == R && (R == 3 || R == 8) && cs == (int64_t)sizeof(T)) { /* rows contiguous along k */ \
        if (R == 3) {                                                                                           \
          pack_rows3_f32((float *)dst, base, rs, depth);                                                        \
        } else {                                                                                                \
          pack_rows8_f32((float *)dst, base, rs, depth);                                                        \
        }                                                                                                       \
      } else if (abs_i64(rs) < abs_i64(cs)) { /* the sliver's columns are the contiguous way */                 \
        for (int64_t p = 0; p < depth; p++) {                                                                   \
          gather_##C(dst + p * R, base + p * cs, rs, dtype, r);                                                 \
          for (int64_t i = r; i < R; i++) dst[p * R + i] = (T)0;                                                \
        }                                                                                                       \
      } else {                                                                                                  \
        for (int64_t i = 0; i < R; i++) {                                                                       \
          if (i < r) {                                                                                          \
            gather_##C(line, base + i * rs, cs, dtype, depth);                                                  \
            for (int64_t p = 0; p < depth; p++) dst[p * R + i] = line[p];                                       \
          } else {                                                                                              \
            for (int64_t p = 0; p < depth; p++) dst[p * R + i] = (T)0;                                          \
          }                                                                                                     \
        }                                                                                                       \
      }                                                                                                         \
      dst += R * depth;                                                                                         \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* out (mr x nr, compute type, byte strides) from a tile: the first slice                                    \
   * of k gives alpha * acc + beta * out, a later one out + alpha * acc. */                                     \
  static void store_tile_##C(char *c, int64_t rs, int64_t cs, const T *tile, int64_t mr, int64_t nr, T alpha,    \
                             T beta, int first, int read_out) {                                                 \
    const v128_t va = VSPLAT(alpha), vb = VSPLAT(beta);                                                         \
    for (int64_t i = 0; i < mr; i++) {                                                                          \
      char *row = c + i * rs;                                                                                   \
      const T *acc = tile + i * NR;                                                                             \
      if (cs == (int64_t)sizeof(T) && nr == NR) {                                                               \
        for (int v = 0; v < 2; v++) {                                                                           \
          T *o = (T *)row + v * L;                                                                              \
          v128_t t = wasm_v128_load(acc + v * L);                                                               \
          if (alpha != (T)1) t = VMUL(va, t);                                                                   \
          if (!first) {                                                                                         \
            t = VADD(wasm_v128_load(o), t);                                                                     \
          } else if (read_out) {                                                                                \
            t = VADD(VMUL(vb, wasm_v128_load(o)), t);                                                           \
          }                                                                                                     \
          wasm_v128_store(o, t);                                                                                \
        }                                                                                                       \
        continue;                                                                                               \
      }                                                                                                         \
      for (int64_t j = 0; j < nr; j++) {                                                                        \
        T *o = (T *)(row + j * cs);                                                                             \
        T t = acc[j];                                                                                           \
        if (alpha != (T)1) t = alpha * t;                                                                       \
        if (!first) {                                                                                           \
          t = *o + t;                                                                                           \
        } else if (read_out) {                                                                                  \
          t = beta * *o + t;                                                                                    \
        }                                                                                                       \
        *o = t;                                                                                                 \
      }                                                                                                         \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* c (m x n, compute type) = alpha * a @ b (+ beta * c), k >= 1, m, n >= 1. */                                \
  static void gemm_core_##C(const char *a, int64_t rsa, int64_t csa, const char *b, int64_t rsb, int64_t csb,   \
                            uint32_t dtype, char *c, int64_t rsc, int64_t csc, int64_t m, int64_t n, int64_t k,  \
                            T alpha, T beta, int read_out, T *scratch) {                                        \
    T *bp = scratch;                                                                                            \
    T *ap = bp + or_gemm_round_up(min_i64(n, NC), NR) * min_i64(k, OR_GEMM_KC);                                 \
    T tile[MR * NR] __attribute__((aligned(16)));                                                               \
    for (int64_t jc = 0; jc < n; jc += NC) {                                                                    \
      const int64_t nc = min_i64(NC, n - jc);                                                                   \
      for (int64_t pc = 0; pc < k; pc += OR_GEMM_KC) {                                                          \
        const int64_t kc = min_i64(OR_GEMM_KC, k - pc);                                                         \
        /* what store_tile would do, when a full tile can do it itself: out =                                   \
         * acc (first slice, beta = 0) or out + acc (beta = 1, or a later slice) */                             \
        int direct = OR_TILE_BUFFER;                                                                            \
        if (alpha == (T)1 && csc == (int64_t)sizeof(T) && rsc % (int64_t)sizeof(T) == 0) {                       \
          if (pc > 0 || (read_out && beta == (T)1)) {                                                           \
            direct = OR_TILE_ADD;                                                                               \
          } else if (!read_out) {                                                                               \
            direct = OR_TILE_STORE;                                                                             \
          }                                                                                                     \
        }                                                                                                       \
        pack_##C(bp, b + pc * rsb + jc * csb, csb, rsb, dtype, nc, kc, NR); /* b^T */                          \
        for (int64_t ic = 0; ic < m; ic += OR_GEMM_MC) {                                                        \
          const int64_t mc = min_i64(OR_GEMM_MC, m - ic);                                                       \
          pack_##C(ap, a + ic * rsa + pc * csa, rsa, csa, dtype, mc, kc, MR);                                   \
          for (int64_t jr = 0; jr < nc; jr += NR) {                                                             \
            int64_t ir = 0;                                                                                     \
            if (direct != OR_TILE_BUFFER && jr + NR <= nc && mc >= MR) { /* the full tiles in one call */        \
              ir = mc / MR * MR;                                                                                \
              tile_##C(kc, ap, bp + jr * kc, tile, (T *)(c + ic * rsc + (jc + jr) * csc),                       \
                       rsc / (int64_t)sizeof(T), direct, mc / MR);                                              \
            }                                                                                                   \
            for (; ir < mc; ir += MR) {                                                                         \
              char *o = c + (ic + ir) * rsc + (jc + jr) * csc;                                                  \
              tile_##C(kc, ap + ir * kc, bp + jr * kc, tile, (T *)o, 0, OR_TILE_BUFFER, 1);                     \
              store_tile_##C(o, rsc, csc, tile, min_i64(MR, mc - ir), min_i64(NR, nc - jr), alpha, beta,        \
                             pc == 0, read_out);                                                                \
            }                                                                                                   \
          }                                                                                                     \
        }                                                                                                       \
      }                                                                                                         \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* The dot product of k elements of a row (any stride and dtype) with x                                       \
   * (compute type): four vector sums over k in steps of 4 * L, the tail                                        \
   * summed in order, then the vectors and lanes pairwise. */                                                   \
  static T dot_##C(const char *row, int64_t stride, uint32_t dtype, const T *x, int64_t k) {                    \
    T line[OR_CHUNK];                                                                                           \
    v128_t s0 = wasm_i32x4_splat(0), s1 = s0, s2 = s0, s3 = s0;                                                 \
    T tail = (T)0;                                                                                              \
    for (int64_t p0 = 0; p0 < k; p0 += OR_CHUNK) {                                                              \
      const int64_t len = min_i64(OR_CHUNK, k - p0);                                                            \
      const T *r = line;                                                                                        \
      if (dtype == NATIVE_##C && stride == (int64_t)sizeof(T)) {                                                \
        r = (const T *)(row + p0 * stride);                                                                     \
      } else {                                                                                                  \
        load_row_##C(line, row + p0 * stride, stride, dtype, len);                                              \
      }                                                                                                         \
      const T *xs = x + p0;                                                                                     \
      int64_t p = 0;                                                                                            \
      for (; p + 4 * L <= len; p += 4 * L) {                                                                    \
        s0 = VADD(s0, VMUL(wasm_v128_load(r + p), wasm_v128_load(xs + p)));                                     \
        s1 = VADD(s1, VMUL(wasm_v128_load(r + p + L), wasm_v128_load(xs + p + L)));                             \
        s2 = VADD(s2, VMUL(wasm_v128_load(r + p + 2 * L), wasm_v128_load(xs + p + 2 * L)));                     \
        s3 = VADD(s3, VMUL(wasm_v128_load(r + p + 3 * L), wasm_v128_load(xs + p + 3 * L)));                     \
      }                                                                                                         \
      for (; p < len; p++) tail += r[p] * xs[p]; /* OR_CHUNK is a multiple of 4 * L: the last chunk only */      \
    }                                                                                                           \
    T lanes[L] __attribute__((aligned(16)));                                                                    \
    wasm_v128_store(lanes, VADD(VADD(s0, s1), VADD(s2, s3)));                                                   \
    return lanes_sum_##C(lanes) + tail;                                                                         \
  }                                                                                                             \
                                                                                                                \
  /* y (m, compute type) = a (m x k) @ x (k, packed). */                                                        \
  static void gemv_##C(const char *a, int64_t rsa, int64_t csa, uint32_t dtype, const T *x, int64_t m,           \
                       int64_t k, T *y) {                                                                       \
    if (abs_i64(csa) <= abs_i64(rsa)) { /* rows are the contiguous way: dot products */                         \
      for (int64_t i = 0; i < m; i++) y[i] = dot_##C(a + i * rsa, csa, dtype, x, k);                            \
      return;                                                                                                   \
    }                                                                                                           \
    /* columns are: y += a[:, p] * x[p], p ascending (four columns per pass                                    \
     * when they are read in place: the same additions, in the same order) */                                   \
    T line[OR_CHUNK];                                                                                           \
    const int direct = dtype == NATIVE_##C && rsa == (int64_t)sizeof(T);                                        \
    for (int64_t i = 0; i < m; i++) y[i] = (T)0;                                                                \
    for (int64_t i0 = 0; i0 < m; i0 += OR_CHUNK) {                                                              \
      const int64_t len = min_i64(OR_CHUNK, m - i0);                                                            \
      T *yc = y + i0;                                                                                           \
      int64_t p = 0;                                                                                            \
      for (; direct && p + 4 <= k; p += 4) {                                                                    \
        const T *c0 = (const T *)(a + i0 * rsa + p * csa);                                                      \
        const T *c1 = (const T *)((const char *)c0 + csa);                                                      \
        const T *c2 = (const T *)((const char *)c1 + csa);                                                      \
        const T *c3 = (const T *)((const char *)c2 + csa);                                                      \
        const T x0 = x[p], x1 = x[p + 1], x2 = x[p + 2], x3 = x[p + 3];                                         \
        for (int64_t i = 0; i < len; i++) yc[i] = (((yc[i] + c0[i] * x0) + c1[i] * x1) + c2[i] * x2) + c3[i] * x3; \
      }                                                                                                         \
      for (; p < k; p++) {                                                                                      \
        gather_##C(line, a + i0 * rsa + p * csa, rsa, dtype, len);                                              \
        const T xp = x[p];                                                                                      \
        for (int64_t i = 0; i < len; i++) yc[i] = yc[i] + line[i] * xp;                                         \
      }                                                                                                         \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* out (n elements of any float dtype, `stride` bytes apart) = alpha * y +                                    \
   * beta * out, or beta * out alone when y is null. */                                                         \
  static void combine_##C(char *out, int64_t stride, uint32_t dtype, const T *y, int64_t n, T alpha, T beta,      \
                          int read_out) {                                                                       \
    T line[OR_CHUNK];                                                                                           \
    for (int64_t j0 = 0; j0 < n; j0 += OR_CHUNK) {                                                              \
      const int64_t len = min_i64(OR_CHUNK, n - j0);                                                            \
      char *o = out + j0 * stride;                                                                              \
      if (read_out) load_row_##C(line, o, stride, dtype, len);                                                  \
      for (int64_t j = 0; j < len; j++) {                                                                       \
        T t = y ? y[j0 + j] : (T)0;                                                                             \
        if (alpha != (T)1) t = alpha * t;                                                                       \
        line[j] = read_out ? beta * line[j] + t : t;                                                            \
      }                                                                                                         \
      store_row_##C(o, stride, dtype, line, len);                                                               \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Workers split the batch when it has a product for each, else each                                          \
   * product's longer side (after the transposition below), in whole tiles. */                                  \
  static void gemm_##C(const or_gemm *p, int32_t worker, int32_t workers) {                                     \
    const uint32_t dtype = p->dtype;                                                                            \
    T *acc = (T *)device_ptr((p->scratch + 15) & ~(uint64_t)15) +                                              \
             worker * or_gemm_worker_elems(dtype, p->m, p->n, p->k); /* float16/bfloat16 sums */               \
    T *scratch = acc + or_gemm_accumulator_elems(dtype, p->m, p->n);                                            \
    const T alpha = (T)p->alpha.f, beta = (T)p->beta.f;                                                         \
    const int read_out = p->beta_nonzero != 0;                                                                  \
    const int split_rows = workers > 1 && p->batch < workers;                                                   \
    int64_t b0 = 0, b1 = p->batch;                                                                              \
    if (!split_rows) split_range(p->batch, 1, worker, workers, &b0, &b1);                                       \
    for (int64_t bi = b0; bi < b1; bi++) {                                                                      \
      const char *a = device_ptr(p->data[OR_GEMM_A]) + bi * p->strides[OR_GEMM_A][0];                          \
      const char *b = device_ptr(p->data[OR_GEMM_B]) + bi * p->strides[OR_GEMM_B][0];                          \
      char *out = device_ptr(p->data[OR_GEMM_OUT]) + bi * p->strides[OR_GEMM_OUT][0];                           \
      int64_t rsa = p->strides[OR_GEMM_A][1], csa = p->strides[OR_GEMM_A][2];                                   \
      int64_t rsb = p->strides[OR_GEMM_B][1], csb = p->strides[OR_GEMM_B][2];                                   \
      int64_t rsc = p->strides[OR_GEMM_OUT][1], csc = p->strides[OR_GEMM_OUT][2];                               \
      int64_t m = p->m, n = p->n;                                                                               \
      const int64_t k = p->k;                                                                                   \
      if (k == 0) { /* an empty sum: out = beta * out, or zeros */                                              \
        if (split_rows && worker > 0) continue;                                                                 \
        for (int64_t i = 0; i < m; i++) combine_##C(out + i * rsc, csc, dtype, 0, n, alpha, beta, read_out);    \
        continue;                                                                                               \
      }                                                                                                         \
      /* out^T = b^T a^T: makes a vector the second operand, or out's rows contiguous, or wastes less */       \
      if (n != 1 && (m == 1 || abs_i64(rsc) < abs_i64(csc) || tile_waste(m, n, k, MR, NR))) {                   \
        const char *t = a;                                                                                      \
        a = b;                                                                                                  \
        b = t;                                                                                                  \
        int64_t s = rsa;                                                                                        \
        rsa = csb;                                                                                              \
        csb = s;                                                                                                \
        s = csa;                                                                                                \
        csa = rsb;                                                                                              \
        rsb = s;                                                                                                \
        s = rsc;                                                                                                \
        rsc = csc;                                                                                              \
        csc = s;                                                                                                \
        s = m;                                                                                                  \
        m = n;                                                                                                  \
        n = s;                                                                                                  \
      }                                                                                                         \
      const int vector = n == 1; /* before any split: a worker's share of n may be 1 */                         \
      if (split_rows) { /* the longer side, in whole tiles: each worker packs only its part of b (or a) */      \
        int64_t lo, hi;                                                                                         \
        if (n != 1 && n / NR > m / MR) {                                                                        \
          split_range(n, NR, worker, workers, &lo, &hi);                                                        \
          if (lo >= hi) continue;                                                                               \
          b += lo * csb;                                                                                        \
          out += lo * csc;                                                                                      \
          n = hi - lo;                                                                                          \
        } else {                                                                                                \
          split_range(m, MR, worker, workers, &lo, &hi);                                                        \
          if (lo >= hi) continue;                                                                               \
          a += lo * rsa;                                                                                        \
          out += lo * rsc;                                                                                      \
          m = hi - lo;                                                                                          \
        }                                                                                                       \
      }                                                                                                         \
      if (vector) { /* a matrix-vector product */                                                               \
        T *x = scratch;                                                                                         \
        T *y = x + or_gemm_round_up(k, 4);                                                                      \
        load_row_##C(x, b, rsb, dtype, k);                                                                      \
        gemv_##C(a, rsa, csa, dtype, x, m, k, y);                                                               \
        combine_##C(out, rsc, dtype, y, m, alpha, beta, read_out);                                              \
      } else if (dtype == NATIVE_##C) {                                                                         \
        gemm_core_##C(a, rsa, csa, b, rsb, csb, dtype, out, rsc, csc, m, n, k, alpha, beta, read_out, scratch); \
      } else { /* float16/bfloat16: sum in float32, round once */                                              \
        gemm_core_##C(a, rsa, csa, b, rsb, csb, dtype, (char *)acc, n * (int64_t)sizeof(T), sizeof(T), m, n, k,  \
                      (T)1, (T)0, 0, scratch);                                                                  \
        for (int64_t i = 0; i < m; i++) {                                                                       \
          combine_##C(out + i * rsc, csc, dtype, acc + i * n, n, alpha, beta, read_out);                        \
        }                                                                                                       \
      }                                                                                                         \
    }                                                                                                           \
  }

/*
 * Whether an m x n product (row-major out) wastes much less of its tiles
 * transposed: tiles cover MR rows by NR columns, so 16 x 27 computes 18 x 32
 * (75% used) where 27 x 16 computes 27 x 16. Only for long products (k >=
 * 64): a transposed out is written through the tile buffer, which short
 * products pay for. The tile adds the same products in the same order
 * either way (a * b is b * a, and the fused pair is symmetric in its
 * factors), so results are the same bits.
 */
ALWAYS_INLINE int tile_waste(int64_t m, int64_t n, int64_t k, int64_t mr, int64_t nr) {
  if (k < 64 || n == 1 || m == 1) return 0;
  const int64_t as_is = or_gemm_round_up(m, mr) * or_gemm_round_up(n, nr);
  const int64_t transposed = or_gemm_round_up(n, mr) * or_gemm_round_up(m, nr);
  return 5 * transposed < 4 * as_is; /* at least a fifth less */
}

ALWAYS_INLINE float lanes_sum_F32(const float *l) {
  return (l[0] + l[1]) + (l[2] + l[3]);
}

ALWAYS_INLINE double lanes_sum_F64(const double *l) {
  return l[0] + l[1];
}

#define VADD wasm_f32x4_add
#define VMUL wasm_f32x4_mul
OR_DEFINE_GEMM(F32, float, 4, OR_GEMM_F32_MR, OR_GEMM_F32_NR, OR_GEMM_F32_NC, VADD, VMUL, wasm_f32x4_splat)
#undef VADD
#undef VMUL
#define VADD wasm_f64x2_add
#define VMUL wasm_f64x2_mul
OR_DEFINE_GEMM(F64, double, 2, OR_GEMM_F64_MR, OR_GEMM_F64_NR, OR_GEMM_F64_NC, VADD, VMUL, wasm_f64x2_splat)
#undef VADD
#undef VMUL

/* Integers: int64 sums over k ascending, wrapping; a row of out at a time,
 * in chunks of OR_CHUNK columns. */
static void gemm_int(const or_gemm *p, int32_t worker, int32_t workers) {
  const uint32_t dtype = p->dtype;
  const uint64_t alpha = (uint64_t)p->alpha.i, beta = (uint64_t)p->beta.i;
  int64_t acc[OR_CHUNK], line[OR_CHUNK];
  const int split_rows = workers > 1 && p->batch < workers;
  int64_t b0 = 0, b1 = p->batch, i0 = 0, i1 = p->m;
  if (split_rows) {
    split_range(p->m, 1, worker, workers, &i0, &i1);
  } else {
    split_range(p->batch, 1, worker, workers, &b0, &b1);
  }
  for (int64_t bi = b0; bi < b1; bi++) {
    const char *a = device_ptr(p->data[OR_GEMM_A]) + bi * p->strides[OR_GEMM_A][0];
    const char *b = device_ptr(p->data[OR_GEMM_B]) + bi * p->strides[OR_GEMM_B][0];
    char *out = device_ptr(p->data[OR_GEMM_OUT]) + bi * p->strides[OR_GEMM_OUT][0];
    const int64_t rsa = p->strides[OR_GEMM_A][1], csa = p->strides[OR_GEMM_A][2];
    const int64_t rsb = p->strides[OR_GEMM_B][1], csb = p->strides[OR_GEMM_B][2];
    const int64_t rsc = p->strides[OR_GEMM_OUT][1], csc = p->strides[OR_GEMM_OUT][2];
    for (int64_t i = i0; i < i1; i++) {
      for (int64_t j0 = 0; j0 < p->n; j0 += OR_CHUNK) {
        const int64_t len = min_i64(OR_CHUNK, p->n - j0);
        for (int64_t j = 0; j < len; j++) acc[j] = 0;
        for (int64_t q = 0; q < p->k; q++) {
          const uint64_t x = (uint64_t)load_I64(a + i * rsa + q * csa, dtype);
          load_row_I64(line, b + q * rsb + j0 * csb, csb, dtype, len);
          for (int64_t j = 0; j < len; j++) acc[j] = (int64_t)((uint64_t)acc[j] + x * (uint64_t)line[j]);
        }
        char *o = out + i * rsc + j0 * csc;
        if (p->beta_nonzero) {
          load_row_I64(line, o, csc, dtype, len);
        }
        for (int64_t j = 0; j < len; j++) {
          const uint64_t t = alpha * (uint64_t)acc[j];
          acc[j] = (int64_t)(p->beta_nonzero ? beta * (uint64_t)line[j] + t : t);
        }
        store_row_I64(o, csc, dtype, acc, len);
      }
    }
  }
}

EXPORT(gemm) void gemm(const or_gemm *p, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  if (p->batch <= 0 || p->m <= 0 || p->n <= 0) {
    return;
  }
  switch (p->dtype) {
  case OR_F32:
  case OR_F16:
  case OR_BF16:
    gemm_F32(p, worker, workers);
    return;
  case OR_F64:
    gemm_F64(p, worker, workers);
    return;
  case OR_U8:
  case OR_I8:
  case OR_I16:
  case OR_I32:
  case OR_I64:
    gemm_int(p, worker, workers);
    return;
  default:
    TRAP();
  }
}
