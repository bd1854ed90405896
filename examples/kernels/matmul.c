/*
 * matmul.c: matrix multiplication over tensor views, as a user kernel module
 * in C (torch.mm for float32 and float64).
 *
 *   out[m, n] = sum over k of a[m, k] * b[k, n]    (a: M x K, b: K x N, out: M x N)
 *
 * Kernel ABI (wasm signatures):
 *
 *   matmul_f32(a: i32, b: i32, out: i32)
 *   matmul_f64(a: i32, b: i32, out: i32)
 *
 * Each i32 is the device address of a tensor descriptor (openreg_tensor, see
 * device-kernels/sdk/openreg_kernel.h) that the runtime writes for the
 * launch; the Python side binds the operator's tensors in that order (the
 * inputs a and b, then the output). All three must be 2-D with matching
 * sizes and the kernel's dtype (float32 or float64), or the kernel traps. Any
 * strides work: a transposed view (w.t()), a slice, an expanded tensor. `out`
 * must not overlap a or b. K = 0 writes zeros.
 *
 * Numerics: each output is accumulated in the kernel's dtype, k ascending,
 * one rounding per multiply and one per add (no FMA), so the result does not
 * depend on the layout or on which loop below computes it.
 *
 * Loops: when the rows of b and of out are unit-stride (b[k, n] and
 * b[k, n + 1] adjacent, likewise out), 4 output columns share one SIMD vector
 * (2 for float64), and 4 vectors are computed together so that each a[m, k]
 * is loaded once per 16 columns; otherwise a scalar loop over any strides.
 *
 * Build (the flags of device-kernels/build.rs):
 *
 *   clang-19 --target=wasm32-unknown-unknown -nostdlib -O3 -msimd128 -mbulk-memory \
 *     -std=c11 -Wall -Wextra -I device-kernels/sdk \
 *     -Wl,--no-entry -Wl,--import-memory -Wl,-z,stack-size=65536 \
 *     -Wl,--export=__data_end -Wl,--export=__heap_base \
 *     -o matmul.wasm examples/kernels/matmul.c
 */
#include <openreg_kernel.h>
#include <wasm_simd128.h>

/* a * b + c stays two roundings, as in the scalar loop. */
#pragma STDC FP_CONTRACT OFF

/*
 * Traps unless a (M x K), b (K x N) and out (M x N) are 2-D tensors of
 * `dtype` with matching sizes. (openreg_tensor_data checks the rest of each
 * descriptor.)
 */
static void matmul_check(const openreg_tensor *a, const openreg_tensor *b, const openreg_tensor *out,
                         openreg_dtype dtype) {
  openreg_require_dtype(a, dtype);
  openreg_require_dtype(b, dtype);
  openreg_require_dtype(out, dtype);
  openreg_require_ndim(a, 2);
  openreg_require_ndim(b, 2);
  openreg_require_ndim(out, 2);
  OPENREG_REQUIRE(b->sizes[0] == a->sizes[1]);
  OPENREG_REQUIRE(out->sizes[0] == a->sizes[0] && out->sizes[1] == b->sizes[1]);
}

/*
 * Defines the kernel NAME for element type T (dtype DTYPE): LANES elements
 * per v128, SPLAT / ADD / MUL the wasm_simd128.h operations on them.
 */
#define DEFINE_MATMUL(NAME, T, DTYPE, LANES, SPLAT, ADD, MUL)                                          \
  OPENREG_KERNEL(NAME)                                                                                 \
  void NAME(const openreg_tensor *a, const openreg_tensor *b, const openreg_tensor *out) {            \
    matmul_check(a, b, out, DTYPE);                                                                    \
    const T *A = openreg_tensor_data(a);                                                               \
    const T *B = openreg_tensor_data(b);                                                               \
    T *O = openreg_tensor_data(out);                                                                   \
    const int64_t M = a->sizes[0], K = a->sizes[1], N = b->sizes[1];                                   \
    const int64_t as0 = a->strides[0], as1 = a->strides[1];                                            \
    const int64_t bs0 = b->strides[0], bs1 = b->strides[1];                                            \
    const int64_t os0 = out->strides[0], os1 = out->strides[1];                                        \
    const int unit_rows = (bs1 == 1 || N == 1) && (os1 == 1 || N == 1);                                \
    for (int64_t m = 0; m < M; m++) {                                                                  \
      const T *arow = A + m * as0;                                                                     \
      T *orow = O + m * os0;                                                                           \
      int64_t n = 0;                                                                                   \
      if (unit_rows) {                                                                                 \
        /* 4 vectors of columns: each a[m, k] loaded once for all of them. */                          \
        for (; N - n >= 4 * LANES; n += 4 * LANES) {                                                   \
          v128_t c0 = SPLAT(0), c1 = SPLAT(0), c2 = SPLAT(0), c3 = SPLAT(0);                           \
          const T *bp = B + n;                                                                         \
          for (int64_t k = 0; k < K; k++, bp += bs0) {                                                 \
            const v128_t av = SPLAT(arow[k * as1]);                                                    \
            c0 = ADD(c0, MUL(av, wasm_v128_load(bp)));                                                 \
            c1 = ADD(c1, MUL(av, wasm_v128_load(bp + LANES)));                                         \
            c2 = ADD(c2, MUL(av, wasm_v128_load(bp + 2 * LANES)));                                     \
            c3 = ADD(c3, MUL(av, wasm_v128_load(bp + 3 * LANES)));                                     \
          }                                                                                            \
          wasm_v128_store(orow + n, c0);                                                               \
          wasm_v128_store(orow + n + LANES, c1);                                                       \
          wasm_v128_store(orow + n + 2 * LANES, c2);                                                   \
          wasm_v128_store(orow + n + 3 * LANES, c3);                                                   \
        }                                                                                              \
        /* One vector of columns. */                                                                   \
        for (; N - n >= LANES; n += LANES) {                                                           \
          v128_t c = SPLAT(0);                                                                         \
          const T *bp = B + n;                                                                         \
          for (int64_t k = 0; k < K; k++, bp += bs0) {                                                 \
            c = ADD(c, MUL(SPLAT(arow[k * as1]), wasm_v128_load(bp)));                                 \
          }                                                                                            \
          wasm_v128_store(orow + n, c);                                                                \
        }                                                                                              \
      }                                                                                                \
      /* The remaining columns (all of them for other layouts), one at a time. */                      \
      for (; n < N; n++) {                                                                             \
        T acc = 0;                                                                                     \
        const T *bp = B + n * bs1;                                                                     \
        for (int64_t k = 0; k < K; k++, bp += bs0) {                                                   \
          acc = acc + arow[k * as1] * *bp;                                                             \
        }                                                                                              \
        orow[n * os1] = acc;                                                                           \
      }                                                                                                \
    }                                                                                                  \
  }

/* out = a @ b for float32 (4 columns per vector). */
DEFINE_MATMUL(matmul_f32, float, OPENREG_FLOAT32, 4, wasm_f32x4_splat, wasm_f32x4_add, wasm_f32x4_mul)

/* out = a @ b for float64 (2 columns per vector). */
DEFINE_MATMUL(matmul_f64, double, OPENREG_FLOAT64, 2, wasm_f64x2_splat, wasm_f64x2_add, wasm_f64x2_mul)
