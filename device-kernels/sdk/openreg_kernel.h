/*
 * openreg_kernel.h: the OpenReg kernel SDK for C.
 *
 * A kernel module in C is one or more translation units compiled with clang
 * (LLVM 13 or newer, with lld's wasm-ld) to a wasm32 core module that imports
 * the device memory:
 *
 *   clang --target=wasm32-unknown-unknown -nostdlib -O3 -msimd128 -mbulk-memory \
 *     -I path/to/device-kernels/sdk \
 *     -Wl,--no-entry -Wl,--import-memory -Wl,-z,stack-size=65536 \
 *     -Wl,--export=__data_end -Wl,--export=__heap_base \
 *     -o my_kernels.wasm my_kernels.c
 *
 * What each flag is for:
 *   --target=wasm32-unknown-unknown  32-bit wasm, no OS, no libc.
 *   -nostdlib                        link no C library or crt1.o: there is none.
 *   -O3                              kernels are hot loops.
 *   -msimd128                        wasm SIMD (128-bit vectors, wasm_simd128.h).
 *   -mbulk-memory                    memset/memcpy/memmove become memory.fill /
 *                                    memory.copy (without it the link fails on an
 *                                    undefined `memset`).
 *   -Wl,--no-entry                   a library of kernels: no `_start`.
 *   -Wl,--import-memory              the module's memory is the device memory,
 *                                    imported as `env.memory`.
 *   -Wl,-z,stack-size=65536          keep the linker's stack reservation small;
 *                                    the runtime points `__stack_pointer` at a
 *                                    stack of its own anyway.
 *   -Wl,--export=__data_end          the runtime reads `__data_end` to find the
 *   -Wl,--export=__heap_base         module's static data footprint.
 * Debian 12: `apt-get install clang-19 lld-19` and call `clang-19`.
 *
 * The kernel module ABI (see device-kernels/README.md and wit/kernels.wit):
 *  - the module imports exactly one thing, `env.memory`, and has no start
 *    function; an undefined function becomes an import and the runtime
 *    rejects the module, so call nothing that is not defined in the module;
 *  - a kernel is an exported function returning void whose parameters are
 *    32/64-bit integers, floats or doubles (`OPENREG_KERNEL`);
 *  - a device pointer is a 32-bit byte offset into the device memory, which
 *    in C is simply a pointer (the module's address space *is* the device
 *    memory). NULL is the null device pointer: the runtime never hands out
 *    address 0 for an allocation;
 *  - a contract violation traps (`OPENREG_TRAP()` / `OPENREG_REQUIRE()`); an
 *    access outside the device memory traps on its own. The runtime reports a
 *    trap as a failed launch and the device stays usable;
 *  - keep static data small: it is placed at fixed addresses in the device's
 *    static area, which every module on a device shares.
 *
 * Tensor views. A kernel that implements a PyTorch operator receives each
 * tensor argument as a `const openreg_tensor *`: the device address of a
 * 160-byte descriptor (data address, numel, dtype, ndim, itemsize, flags,
 * sizes and strides in elements, as torch's `stride()`) that the runtime
 * writes into the launch's parameter area just before the call. It is
 * read-only for the kernel and valid until the kernel returns. Tensors arrive
 * in the order the operator binds them (by default its inputs, then its
 * outputs); scalar arguments arrive as the float/double/int32_t/int64_t
 * values the kernel's own signature declares:
 *
 *   OPENREG_KERNEL(relu)
 *   void relu(const openreg_tensor *x, const openreg_tensor *out) {
 *     openreg_require_dtype(x, OPENREG_FLOAT32);
 *     openreg_require_dtype(out, OPENREG_FLOAT32);
 *     const float *xp = openreg_tensor_data(x);
 *     float *op = openreg_tensor_data(out);
 *     const openreg_tensor *ops[2] = {x, out};
 *     openreg_iter it;
 *     openreg_iter_init(&it, 2, ops);      // traps unless the shapes match
 *     while (openreg_iter_next(&it)) {     // one innermost row per step
 *       const float *xr = xp + it.offset[0];
 *       float *orow = op + it.offset[1];
 *       for (int64_t i = 0; i < it.size; i++) {
 *         float v = xr[i * it.stride[0]];
 *         orow[i * it.stride[1]] = v < 0.0f ? 0.0f : v;
 *       }
 *     }
 *   }
 *
 * Views may be strided, transposed or expanded (stride 0); a contiguous
 * tensor has `openreg_is_contiguous`, and the iterator merges its dimensions
 * into one row of `numel` elements with stride 1. The data of a tensor with
 * numel 0 may be NULL and is never touched. See examples/kernels/ at the top
 * of the repository.
 */
#ifndef OPENREG_KERNEL_H
#define OPENREG_KERNEL_H

#if !defined(__wasm32__)
#error "openreg_kernel.h: compile kernels with --target=wasm32-unknown-unknown"
#endif

#include <stddef.h>
#include <stdint.h>

/*
 * Declares an exported kernel named `name`:
 *
 *   OPENREG_KERNEL(scale_f32)
 *   void scale_f32(openreg_f32_ptr out, openreg_const_f32_ptr in, uint32_t n, float factor) { ... }
 *
 * The export name is exactly `name`. The function must return void and take
 * only int32_t/uint32_t/int64_t/uint64_t/float/double or pointer parameters.
 */
#define OPENREG_KERNEL(name) __attribute__((export_name(#name), visibility("default")))

/* Stops the kernel with a trap (the wasm `unreachable` instruction). */
#define OPENREG_TRAP() __builtin_trap()

/* Traps unless `cond` holds: the kernel-side assert. */
#define OPENREG_REQUIRE(cond) \
  do {                        \
    if (!(cond)) {            \
      __builtin_trap();       \
    }                         \
  } while (0)

/* A device pointer as an integer: a byte offset into the device memory. */
typedef uint32_t openreg_device_ptr;

/*
 * Device pointers to element types. They are ordinary C pointers; the typedefs
 * document that a parameter is device data. wasm_v128_load / wasm_v128_store
 * accept any address. C assumes natural alignment for scalar accesses through
 * a typed pointer, so where a pointer may be misaligned (a tensor view at an
 * odd byte offset), access elements with openreg_load_f32 / openreg_store_f32
 * as examples/scale_f32.c does.
 */
typedef float *openreg_f32_ptr;
typedef const float *openreg_const_f32_ptr;
typedef int32_t *openreg_i32_ptr;
typedef const int32_t *openreg_const_i32_ptr;
typedef uint8_t *openreg_u8_ptr;
typedef const uint8_t *openreg_const_u8_ptr;

/* The C pointer for a device address passed as an integer. */
static inline void *openreg_ptr(openreg_device_ptr addr) {
  return (void *)(uintptr_t)addr;
}

/* Reads a float at any address, aligned or not. */
static inline float openreg_load_f32(const void *p) {
  float v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

/* Writes a float at any address, aligned or not. */
static inline void openreg_store_f32(void *p, float v) {
  __builtin_memcpy(p, &v, sizeof v);
}

/*
 * Traps unless the range of `n` elements of `elem_size` bytes at `p` is
 * empty, or starts at a non-null address and ends within the 32-bit address
 * space (does not wrap around).
 */
static inline void openreg_check_range(const void *p, uint32_t n, uint32_t elem_size) {
  uint64_t bytes = (uint64_t)n * elem_size;
  if (bytes != 0) {
    OPENREG_REQUIRE(p != NULL);
    OPENREG_REQUIRE((uint64_t)(uintptr_t)p + bytes <= ((uint64_t)1 << 32));
  }
}

/* ------------------------------------------------------------------------
 * Tensor views
 * ------------------------------------------------------------------------ */

/* The most dimensions a tensor descriptor describes. */
#define OPENREG_MAX_DIMS 8

/* Element types: c10::ScalarType's numbering (the values of `dtype`). */
typedef enum openreg_dtype {
  OPENREG_UINT8 = 0,
  OPENREG_INT8 = 1,
  OPENREG_INT16 = 2,
  OPENREG_INT32 = 3,
  OPENREG_INT64 = 4,
  OPENREG_FLOAT16 = 5,
  OPENREG_FLOAT32 = 6,
  OPENREG_FLOAT64 = 7,
  OPENREG_BOOL = 11,
  OPENREG_BFLOAT16 = 15,
} openreg_dtype;

/* `flags` bit: the tensor is contiguous (row-major, torch's is_contiguous()). */
#define OPENREG_CONTIGUOUS 1u

/*
 * A tensor argument: 160 bytes, 8-byte aligned, little-endian, the same
 * layout on wasm32 and wasm64 (the Rust SDK's `Tensor` is the same struct).
 * The runtime writes it into the launch's parameter area; the kernel gets its
 * address and must not write it.
 */
typedef struct openreg_tensor {
  /* Device address of the first element (storage offset applied); may be 0
     when numel is 0. */
  uint64_t data;
  /* Number of elements: the product of sizes[0 .. ndim) (1 when ndim is 0). */
  int64_t numel;
  /* An openreg_dtype value. */
  int32_t dtype;
  /* Number of dimensions, 0 ..= OPENREG_MAX_DIMS. */
  int32_t ndim;
  /* Bytes per element. */
  int32_t itemsize;
  /* OPENREG_CONTIGUOUS, or 0. */
  uint32_t flags;
  /* Size of each dimension; entries from ndim on are 0. */
  int64_t sizes[OPENREG_MAX_DIMS];
  /* Stride of each dimension in elements (0 for an expanded dimension);
     entries from ndim on are 0. */
  int64_t strides[OPENREG_MAX_DIMS];
} openreg_tensor;

_Static_assert(sizeof(openreg_tensor) == 160, "openreg_tensor is 160 bytes");
_Static_assert(_Alignof(openreg_tensor) == 8, "openreg_tensor is 8-byte aligned");
_Static_assert(offsetof(openreg_tensor, data) == 0, "openreg_tensor.data");
_Static_assert(offsetof(openreg_tensor, numel) == 8, "openreg_tensor.numel");
_Static_assert(offsetof(openreg_tensor, dtype) == 16, "openreg_tensor.dtype");
_Static_assert(offsetof(openreg_tensor, ndim) == 20, "openreg_tensor.ndim");
_Static_assert(offsetof(openreg_tensor, itemsize) == 24, "openreg_tensor.itemsize");
_Static_assert(offsetof(openreg_tensor, flags) == 28, "openreg_tensor.flags");
_Static_assert(offsetof(openreg_tensor, sizes) == 32, "openreg_tensor.sizes");
_Static_assert(offsetof(openreg_tensor, strides) == 96, "openreg_tensor.strides");

/*
 * Bytes per element of `dtype`, or 0 for a code this SDK does not name. (Bit
 * arithmetic on constants, where a switch could become a table in static
 * data: two bits per code hold log2 of its itemsize.)
 */
static inline int32_t openreg_dtype_itemsize(int32_t dtype) {
  const uint32_t log2_itemsizes = (1u << (2 * OPENREG_INT16)) | (2u << (2 * OPENREG_INT32)) |
                                  (3u << (2 * OPENREG_INT64)) | (1u << (2 * OPENREG_FLOAT16)) |
                                  (2u << (2 * OPENREG_FLOAT32)) | (3u << (2 * OPENREG_FLOAT64)) |
                                  (1u << (2 * OPENREG_BFLOAT16));
  const uint32_t named = (1u << OPENREG_UINT8) | (1u << OPENREG_INT8) | (1u << OPENREG_INT16) |
                         (1u << OPENREG_INT32) | (1u << OPENREG_INT64) | (1u << OPENREG_FLOAT16) |
                         (1u << OPENREG_FLOAT32) | (1u << OPENREG_FLOAT64) | (1u << OPENREG_BOOL) |
                         (1u << OPENREG_BFLOAT16);
  if (dtype < 0 || dtype > 15 || !((named >> dtype) & 1u)) {
    return 0;
  }
  return (int32_t)1 << ((log2_itemsizes >> (2 * dtype)) & 3u);
}

/*
 * Traps unless `t` describes a view that lies inside the 32-bit address
 * space: ndim in 0 ..= OPENREG_MAX_DIMS, itemsize 1 ..= 16, numel the product
 * of the sizes and below 2^32, sizes and strides in 0 .. 2^32, and, when numel
 * is not 0, `data` nonzero with every element's bytes below 4 GiB (so offset
 * arithmetic cannot wrap around). Once per tensor and launch is enough; the
 * helpers below that start a walk over a tensor call it.
 */
static inline void openreg_check_tensor(const openreg_tensor *t) {
  const uint64_t limit = (uint64_t)1 << 32;
  OPENREG_REQUIRE(t->ndim >= 0 && t->ndim <= OPENREG_MAX_DIMS);
  OPENREG_REQUIRE(t->itemsize > 0 && t->itemsize <= 16);
  OPENREG_REQUIRE(t->numel >= 0 && (uint64_t)t->numel < limit);
  uint64_t product = 1; /* of the nonzero sizes, saturated at 2^32 */
  int empty = 0;
  for (int32_t d = 0; d < t->ndim; d++) {
    OPENREG_REQUIRE(t->sizes[d] >= 0 && (uint64_t)t->sizes[d] < limit);
    OPENREG_REQUIRE(t->strides[d] >= 0 && (uint64_t)t->strides[d] < limit);
    if (t->sizes[d] == 0) {
      empty = 1;
    } else {
      product *= (uint64_t)t->sizes[d]; /* both factors <= 2^32: no overflow */
      product = product < limit ? product : limit;
    }
  }
  OPENREG_REQUIRE(empty ? t->numel == 0 : product == (uint64_t)t->numel);
  if (t->numel != 0) {
    uint64_t last = 0; /* element offset of the farthest element */
    for (int32_t d = 0; d < t->ndim; d++) {
      /* (2^32 - 1)^2 + 2^32 < 2^64: neither product nor sum overflows. */
      last += (uint64_t)(t->sizes[d] - 1) * (uint64_t)t->strides[d];
      OPENREG_REQUIRE(last < limit);
    }
    OPENREG_REQUIRE(t->data != 0 && t->data < limit);
    OPENREG_REQUIRE(t->data + (last + 1) * (uint64_t)t->itemsize <= limit);
  }
}

/*
 * The C pointer to the first element of `t`, after openreg_check_tensor (so
 * it traps on an invalid descriptor). NULL-or-anything when numel is 0.
 */
static inline void *openreg_tensor_data(const openreg_tensor *t) {
  openreg_check_tensor(t);
  return (void *)(uintptr_t)t->data;
}

/* Whether `t` is contiguous (row-major): element i is at data + i * itemsize. */
static inline int openreg_is_contiguous(const openreg_tensor *t) {
  return (t->flags & OPENREG_CONTIGUOUS) != 0;
}

/* Traps unless `t` has element type `dtype` (and that type's itemsize). */
static inline void openreg_require_dtype(const openreg_tensor *t, openreg_dtype dtype) {
  OPENREG_REQUIRE(t->dtype == (int32_t)dtype && t->itemsize == openreg_dtype_itemsize((int32_t)dtype));
}

/* Traps unless `t` has `ndim` dimensions. */
static inline void openreg_require_ndim(const openreg_tensor *t, int32_t ndim) {
  OPENREG_REQUIRE(t->ndim == ndim);
}

/* Traps unless `a` and `b` have the same sizes (strides may differ). */
static inline void openreg_require_same_shape(const openreg_tensor *a, const openreg_tensor *b) {
  OPENREG_REQUIRE(a->ndim == b->ndim && a->ndim >= 0 && a->ndim <= OPENREG_MAX_DIMS);
  for (int32_t d = 0; d < a->ndim; d++) {
    OPENREG_REQUIRE(a->sizes[d] == b->sizes[d]);
  }
}

/*
 * The element offset (from data, in elements) of the element with row-major
 * index `linear` (0 <= linear < numel, else it traps), for any strides. It
 * divides once per dimension: for random access, not for inner loops (use
 * openreg_iter there).
 */
static inline int64_t openreg_offset(const openreg_tensor *t, int64_t linear) {
  OPENREG_REQUIRE(linear >= 0 && linear < t->numel && t->ndim <= OPENREG_MAX_DIMS);
  uint64_t rest = (uint64_t)linear;
  int64_t offset = 0;
  for (int32_t d = t->ndim - 1; d >= 0; d--) {
    uint64_t size = (uint64_t)t->sizes[d]; /* nonzero, since linear < numel */
    offset += (int64_t)(rest % size) * t->strides[d];
    rest /= size;
  }
  return offset;
}

/* The element offset of the element at `index[0 .. ndim)`, not bounds-checked. */
static inline int64_t openreg_offset_at(const openreg_tensor *t, const int64_t *index) {
  int64_t offset = 0;
  for (int32_t d = 0; d < t->ndim && d < OPENREG_MAX_DIMS; d++) {
    offset += index[d] * t->strides[d];
  }
  return offset;
}

/* The most tensors one openreg_iter walks together. */
#define OPENREG_ITER_MAX_OPERANDS 4

/*
 * Walks up to OPENREG_ITER_MAX_OPERANDS tensors of one shape together, one
 * innermost row at a time (the idea of ATen's TensorIterator, without
 * broadcasting or type promotion). Size-1 dimensions are dropped and
 * neighbouring dimensions that are contiguous with each other in every
 * operand are merged, so contiguous tensors are one row of numel elements
 * with stride 1. Dimensions stay in row-major order (the innermost row is the
 * last non-merged dimension), so rows follow the order of the elements.
 *
 *   openreg_iter it;
 *   openreg_iter_init(&it, 2, (const openreg_tensor *[]){x, out});
 *   while (openreg_iter_next(&it)) {
 *     // row elements: x at it.offset[0] + i * it.stride[0], i < it.size, ...
 *   }
 *
 * After openreg_iter_next returns nonzero, offset[k] is the element offset of
 * the row's first element in operand k, stride[k] its element stride along the
 * row, and size the row length (the same for every row; at least 1). A tensor
 * with numel 0 yields no rows; a 0-d tensor one row of one element.
 */
typedef struct openreg_iter {
  int64_t offset[OPENREG_ITER_MAX_OPERANDS]; /* current row start, per operand */
  int64_t stride[OPENREG_ITER_MAX_OPERANDS]; /* stride along a row, per operand */
  int64_t size;                              /* elements per row */
  /* Private: the rows left and an odometer over the outer dimensions,
     innermost first. */
  int64_t rows_left;
  int32_t started;
  int32_t outer;
  int64_t index[OPENREG_MAX_DIMS];
  int64_t outer_size[OPENREG_MAX_DIMS];
  int64_t outer_stride[OPENREG_ITER_MAX_OPERANDS][OPENREG_MAX_DIMS];
} openreg_iter;

/*
 * Starts a walk over the `n` tensors `t[0 .. n)` (1 <= n <= 4). Traps unless
 * each passes openreg_check_tensor and all have the same sizes.
 */
static inline void openreg_iter_init(openreg_iter *it, int n, const openreg_tensor *const *t) {
  OPENREG_REQUIRE(n >= 1 && n <= OPENREG_ITER_MAX_OPERANDS);
  for (int k = 0; k < n; k++) {
    openreg_check_tensor(t[k]);
    openreg_require_same_shape(t[0], t[k]);
  }
  /* Kept dimensions, innermost first: sizes[j] and strides[k][j]; unused
     operands get stride 0. An empty walk skips the shape (whose products
     openreg_check_tensor does not bound). */
  int64_t sizes[OPENREG_MAX_DIMS];
  int64_t strides[OPENREG_ITER_MAX_OPERANDS][OPENREG_MAX_DIMS];
  int32_t count = 0;
  int32_t ndim = t[0]->numel == 0 ? 0 : t[0]->ndim;
  for (int32_t d = ndim - 1; d >= 0; d--) {
    int64_t size = t[0]->sizes[d];
    if (size == 1) {
      continue;
    }
    int merge = count > 0;
    for (int k = 0; k < n && merge; k++) {
      /* No overflow: openreg_check_tensor bounds (size - 1) * stride below
         2^32, for merged dimensions too. */
      merge = t[k]->strides[d] == strides[k][count - 1] * sizes[count - 1];
    }
    if (merge) {
      sizes[count - 1] *= size;
      continue;
    }
    sizes[count] = size;
    for (int k = 0; k < OPENREG_ITER_MAX_OPERANDS; k++) {
      strides[k][count] = k < n ? t[k]->strides[d] : 0;
    }
    count++;
  }
  if (count == 0) { /* 0-d, or every size is 1: one element */
    sizes[0] = 1;
    for (int k = 0; k < OPENREG_ITER_MAX_OPERANDS; k++) {
      strides[k][0] = 0;
    }
    count = 1;
  }
  it->size = sizes[0];
  it->rows_left = t[0]->numel == 0 ? 0 : 1;
  it->started = 0;
  it->outer = count - 1;
  for (int32_t j = 1; j < count; j++) {
    it->index[j - 1] = 0;
    it->outer_size[j - 1] = sizes[j];
    it->rows_left *= sizes[j];
  }
  for (int k = 0; k < OPENREG_ITER_MAX_OPERANDS; k++) {
    it->offset[k] = 0;
    it->stride[k] = strides[k][0];
    for (int32_t j = 1; j < count; j++) {
      it->outer_stride[k][j - 1] = strides[k][j];
    }
  }
}

/*
 * Moves to the next row (the first, on the first call); returns 0 when there
 * is none left. Amortized O(1): no division, a few additions per row.
 */
static inline int openreg_iter_next(openreg_iter *it) {
  if (it->rows_left <= 0) {
    return 0;
  }
  it->rows_left--;
  if (!it->started) {
    it->started = 1;
    return 1;
  }
  for (int32_t j = 0; j < it->outer && j < OPENREG_MAX_DIMS; j++) {
    if (++it->index[j] < it->outer_size[j]) {
      for (int k = 0; k < OPENREG_ITER_MAX_OPERANDS; k++) {
        it->offset[k] += it->outer_stride[k][j];
      }
      return 1;
    }
    it->index[j] = 0;
    for (int k = 0; k < OPENREG_ITER_MAX_OPERANDS; k++) {
      it->offset[k] -= it->outer_stride[k][j] * (it->outer_size[j] - 1);
    }
  }
  return 1; /* not reached: rows_left counted the rows */
}

/* ------------------------------------------------------------------------
 * SIMD helpers (with -msimd128). wasm_v128_load / wasm_v128_store from
 * <wasm_simd128.h> already accept any address, so contiguous rows need
 * nothing more; these cover strided rows (a row of a transposed or sliced
 * view) and the tail of a row, so one vector function can serve every layout.
 * ------------------------------------------------------------------------ */
#ifdef __wasm_simd128__
#include <wasm_simd128.h>

/* Four floats at p, p + stride, p + 2 * stride, p + 3 * stride (elements). */
static inline v128_t openreg_f32x4_load_strided(const float *p, int64_t stride) {
  return wasm_f32x4_make(p[0], p[stride], p[2 * stride], p[3 * stride]);
}

/* Stores the lanes of v at p, p + stride, p + 2 * stride, p + 3 * stride. */
static inline void openreg_f32x4_store_strided(float *p, int64_t stride, v128_t v) {
  p[0] = wasm_f32x4_extract_lane(v, 0);
  p[stride] = wasm_f32x4_extract_lane(v, 1);
  p[2 * stride] = wasm_f32x4_extract_lane(v, 2);
  p[3 * stride] = wasm_f32x4_extract_lane(v, 3);
}

/* The first n (0..=3) floats at stride into lanes 0..n, the other lanes 0. */
static inline v128_t openreg_f32x4_load_partial(const float *p, int64_t stride, int64_t n) {
  v128_t v = wasm_f32x4_splat(0.0f);
  if (n > 0) v = wasm_f32x4_replace_lane(v, 0, p[0]);
  if (n > 1) v = wasm_f32x4_replace_lane(v, 1, p[stride]);
  if (n > 2) v = wasm_f32x4_replace_lane(v, 2, p[2 * stride]);
  return v;
}

/* Stores lanes 0..n (n in 0..=3) of v at stride. */
static inline void openreg_f32x4_store_partial(float *p, int64_t stride, int64_t n, v128_t v) {
  if (n > 0) p[0] = wasm_f32x4_extract_lane(v, 0);
  if (n > 1) p[stride] = wasm_f32x4_extract_lane(v, 1);
  if (n > 2) p[2 * stride] = wasm_f32x4_extract_lane(v, 2);
}
#endif /* __wasm_simd128__ */

#endif /* OPENREG_KERNEL_H */
