/*
 * The indexing engine of `openreg.engine`: one kernel, `index`, that
 * gathers or scatters elements through index tensors (see openreg_engine.h):
 * advanced indexing (`x[idx]`, `x[idx] = v`, with accumulate), gather,
 * scatter (plain, adding, multiplying, keeping the extreme), index_select and
 * index_add; and the kernels that place elements by position: `nonzero`,
 * `positions` (arange, linspace, tril/triu) and `search` (searchsorted).
 *
 * The iteration space is walked in a fixed order, dimension 0 innermost, so
 * when several elements land on one place (scatter with repeated indices)
 * the last in that order wins, and accumulations add in that order: results
 * are reproducible.
 */
#include "dtype.h"

/* The offset (bytes) of the indexed element for the index tensors' elements at `ptr`. */
static int64_t indexed_offset(const or_index *p, char *const *ptr) {
  int64_t off = 0;
  for (uint32_t k = 0; k < p->nindices; k++) {
    const char *q = ptr[2 + k];
    int64_t idx = p->dtypes[2 + k] == OR_I32 ? (int64_t)*(const int32_t *)q : *(const int64_t *)q;
    const int64_t size = p->indexed_sizes[k];
    if (idx < 0 && p->wrap) {
      idx += size;
    }
    if (idx < 0 || idx >= size) {
      TRAP(); /* index out of range: the device-side check */
    }
    off += idx * p->indexed_strides[k];
  }
  return off;
}

/* Copies one element from src (dtype ds) to dst (dtype dd), converting if
 * they differ (`same_size`: their common size when they do not). */
ALWAYS_INLINE void convert_element(char *dst, uint32_t dd, const char *src, uint32_t ds, uint32_t same_size) {
  if (same_size) {
    move_element(dst, src, same_size);
  } else if (ds == OR_I64 || dd == OR_I64) {
    store_I64(dst, dd, load_I64(src, ds));
  } else {
    store_F64(dst, dd, load_F64(src, ds));
  }
}

/* One element: ptr[0] the direct operand's, ptr[1] the indexed base, ptr[2..] the indices'. */
static void index_element(const or_index *p, char *const *ptr, uint32_t same_size) {
  char *indexed = ptr[OR_INDEX_INDEXED] + indexed_offset(p, ptr);
  char *direct = ptr[OR_INDEX_DIRECT];
  const uint32_t dd = p->dtypes[OR_INDEX_DIRECT];
  const uint32_t di = p->dtypes[OR_INDEX_INDEXED];
  switch (p->op) {
  case OR_INDEX_GATHER:
    convert_element(direct, dd, indexed, di, same_size);
    return;
  case OR_INDEX_SCATTER:
    convert_element(indexed, di, direct, dd, same_size);
    return;
  case OR_INDEX_SCATTER_MUL:
    if (p->compute == OR_COMPUTE_I64) {
      store_I64(indexed, di, (int64_t)((uint64_t)load_I64(indexed, di) * (uint64_t)load_I64(direct, dd)));
    } else {
      store_F64(indexed, di, load_F64(indexed, di) * load_F64(direct, dd));
    }
    return;
  case OR_INDEX_SCATTER_MAX:
  case OR_INDEX_SCATTER_MIN: {
    const int max = p->op == OR_INDEX_SCATTER_MAX;
    if (p->compute == OR_COMPUTE_I64) {
      const int64_t a = load_I64(indexed, di), b = load_I64(direct, dd);
      store_I64(indexed, di, (max ? b > a : b < a) ? b : a);
    } else {
      /* as CPU's scatter_reduce: a NaN source wins, a NaN already there stays */
      const double a = load_F64(indexed, di), b = load_F64(direct, dd);
      store_F64(indexed, di, (b != b || (max ? b > a : b < a)) ? b : a);
    }
    return;
  }
  default: /* OR_INDEX_SCATTER_ADD */
    if (p->compute == OR_COMPUTE_I64) {
      const uint64_t v = (uint64_t)load_I64(indexed, di) + (uint64_t)p->args[0].i * (uint64_t)load_I64(direct, dd);
      store_I64(indexed, di, (int64_t)v);
    } else {
      store_F64(indexed, di, load_F64(indexed, di) + p->args[0].f * load_F64(direct, dd));
    }
    return;
  }
}

/* The int64 index at p, negative ones counted from the end when `wrap`
 * (the size, else 0), checked against `size`: the device-side check. */
ALWAYS_INLINE int64_t checked_index(const char *p, int64_t wrap, int64_t size) {
  int64_t idx = *(const int64_t *)p;
  idx += idx < 0 ? wrap : 0;
  if ((uint64_t)idx >= (uint64_t)size) {
    TRAP(); /* index out of range */
  }
  return idx;
}

/*
 * A row of the common gather (`x[idx]`, index_select, embedding, gather):
 * one int64 index tensor, elements of 4 or 8 bytes on both sides. The same
 * checks as index_element in loops of their own: with the generic element's
 * switches gone, the core keeps many of the (cache-missing) indexed loads in
 * flight. A row with one index for all its elements (index_select's and
 * embedding's rows) checks it once and copies the row (contiguous rows as
 * one block copy: element by element, a 512 x 512 index_select took 0.16 ms
 * on one worker).
 */
#define OR_DEFINE_GATHER_ROW(NAME, U)                                                             \
  static void NAME(const or_index *p, char *const *ptr, int64_t n) {                             \
    const char *base = ptr[OR_INDEX_INDEXED];                                                     \
    char *dst = ptr[OR_INDEX_DIRECT];                                                             \
    const char *ip = ptr[2];                                                                      \
    const int64_t sd = p->strides[OR_INDEX_DIRECT][0], sb = p->strides[OR_INDEX_INDEXED][0];      \
    const int64_t si = p->strides[2][0];                                                          \
    const int64_t size = p->indexed_sizes[0], stride = p->indexed_strides[0];                     \
    const int64_t wrap = p->wrap ? size : 0;                                                      \
    if (si == 0) {                                                                                \
      const int64_t idx = checked_index(ip, wrap, size);                                          \
      const char *src = base + idx * stride;                                                      \
      if (sd == (int64_t)sizeof(U) && sb == (int64_t)sizeof(U)) { /* contiguous rows */           \
        copy_bytes(dst, src, (usize)n * sizeof(U));                                               \
        return;                                                                                   \
      }                                                                                           \
      for (int64_t i = 0; i < n; i++) *(U *)(dst + i * sd) = *(const U *)(src + i * sb);          \
      return;                                                                                     \
    }                                                                                             \
    /* eight elements a pass: the loop's pointers go through the stack at  \
     * each pass (the watchdog's check), a chain of several cycles */       \
    _Pragma("clang loop unroll_count(8)") for (int64_t i = 0; i < n; i++) {                      \
      const int64_t idx = checked_index(ip + i * si, wrap, size);                                 \
      *(U *)(dst + i * sd) = *(const U *)(base + i * sb + idx * stride);                          \
    }                                                                                             \
  }

OR_DEFINE_GATHER_ROW(gather_row_4, uint32_t)
OR_DEFINE_GATHER_ROW(gather_row_8, uint64_t)

/*
 * A row of the common scatters (`x[idx] = v`, index_put_, scatter_,
 * index_add_, embedding's backward): one int64 index tensor, both sides of
 * one dtype; SCATTER moves 4 or 8 bytes, SCATTER_ADD adds in float64 to
 * float32 or float64, as index_element does, in the same order. A row with
 * one index for all its elements (index_add_'s rows) checks it once, and
 * when both rows are contiguous and apart runs CONTIG over them (`o`, `s`:
 * n elements), a loop clang vectorizes.
 */
#define OR_DEFINE_SCATTER_ROW(NAME, U, UPDATE, CONTIG)                                            \
  static void NAME(const or_index *p, char *const *ptr, int64_t n) {                             \
    char *base = ptr[OR_INDEX_INDEXED];                                                           \
    const char *src = ptr[OR_INDEX_DIRECT];                                                       \
    const char *ip = ptr[2];                                                                      \
    const int64_t sd = p->strides[OR_INDEX_DIRECT][0], sb = p->strides[OR_INDEX_INDEXED][0];      \
    const int64_t si = p->strides[2][0];                                                          \
    const int64_t size = p->indexed_sizes[0], stride = p->indexed_strides[0];                     \
    const int64_t wrap = p->wrap ? size : 0;                                                      \
    const double alpha = p->args[0].f;                                                            \
    (void)alpha;                                                                                  \
    if (si == 0) {                                                                                \
      const int64_t idx = checked_index(ip, wrap, size);                                          \
      char *row = base + idx * stride;                                                            \
      if (sb == (int64_t)sizeof(U) && sd == (int64_t)sizeof(U) &&                                 \
          (row + n * sb <= src || src + n * sd <= row)) {                                         \
        U *restrict o = (U *)row;                                                                 \
        const U *restrict s = (const U *)src;                                                     \
        CONTIG;                                                                                   \
        return;                                                                                   \
      }                                                                                           \
      for (int64_t i = 0; i < n; i++) {                                                           \
        U *o = (U *)(row + i * sb);                                                               \
        const U v = *(const U *)(src + i * sd);                                                   \
        *o = UPDATE;                                                                              \
      }                                                                                           \
      return;                                                                                     \
    }                                                                                             \
    _Pragma("clang loop unroll_count(8)") for (int64_t i = 0; i < n; i++) {                      \
      const int64_t idx = checked_index(ip + i * si, wrap, size);                                 \
      U *o = (U *)(base + i * sb + idx * stride);                                                 \
      const U v = *(const U *)(src + i * sd);                                                     \
      *o = UPDATE;                                                                                \
    }                                                                                             \
  }
/* A sum of two floats rounds the same in float32 as in float64 and then to
 * float32 (float64 has more than twice float32's precision), so with
 * alpha 1 the contiguous float32 rows add in float32. */
#define OR_SCATTER_COPY copy_bytes(o, s, (usize)n * sizeof(*o))
#define OR_SCATTER_ADD_F32                                                                        \
  if (alpha == 1.0) {                                                                             \
    for (int64_t i = 0; i < n; i++) o[i] = o[i] + s[i];                                           \
  } else {                                                                                        \
    for (int64_t i = 0; i < n; i++) o[i] = (float)((double)o[i] + alpha * (double)s[i]);          \
  }
#define OR_SCATTER_ADD_F64 for (int64_t i = 0; i < n; i++) o[i] = o[i] + alpha * s[i]
OR_DEFINE_SCATTER_ROW(scatter_row_4, uint32_t, v, OR_SCATTER_COPY)
OR_DEFINE_SCATTER_ROW(scatter_row_8, uint64_t, v, OR_SCATTER_COPY)
OR_DEFINE_SCATTER_ROW(scatter_add_row_f32, float, (float)((double)*o + alpha * (double)v), OR_SCATTER_ADD_F32)
OR_DEFINE_SCATTER_ROW(scatter_add_row_f64, double, *o + alpha * v, OR_SCATTER_ADD_F64)
/* int64 (bincount's counts, index_add_ of integers): wrapping, as CPU's. */
#define OR_SCATTER_ADD_WRAP(o, v) ((int64_t)((uint64_t)(o) + (uint64_t)p->args[0].i * (uint64_t)(v)))
#define OR_SCATTER_ADD_I64 for (int64_t i = 0; i < n; i++) o[i] = OR_SCATTER_ADD_WRAP(o[i], s[i])
OR_DEFINE_SCATTER_ROW(scatter_add_row_i64, int64_t, OR_SCATTER_ADD_WRAP(*o, v), OR_SCATTER_ADD_I64)

typedef void (*or_index_row)(const or_index *p, char *const *ptr, int64_t n);

/* The row loop of the common cases above, or 0 for index_element's. */
static or_index_row fast_row(const or_index *p, uint32_t same_size) {
  if (p->nindices != 1 || p->dtypes[2] != OR_I64 || (same_size != 4 && same_size != 8)) {
    return 0;
  }
  switch (p->op) {
  case OR_INDEX_GATHER:
    return same_size == 4 ? gather_row_4 : gather_row_8;
  case OR_INDEX_SCATTER:
    return same_size == 4 ? scatter_row_4 : scatter_row_8;
  case OR_INDEX_SCATTER_ADD:
    if (p->compute == OR_COMPUTE_I64) {
      return p->dtypes[OR_INDEX_DIRECT] == OR_I64 ? scatter_add_row_i64 : 0;
    }
    if (p->compute != OR_COMPUTE_F64) {
      return 0;
    }
    return p->dtypes[OR_INDEX_DIRECT] == OR_F32 ? scatter_add_row_f32
           : p->dtypes[OR_INDEX_DIRECT] == OR_F64 ? scatter_add_row_f64
                                                  : 0;
  default:
    return 0;
  }
}

EXPORT(index) void index(const or_index *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  or_index part = *params;
  const or_index *p = &part;
  if (p->op >= OR_INDEX_COUNT || p->ndim < 1 || p->ndim > OR_MAX_DIMS || p->nindices < 1 ||
      p->nindices > OR_MAX_INDICES ||
      (p->op >= OR_INDEX_SCATTER_ADD && p->compute != OR_COMPUTE_F64 && p->compute != OR_COMPUTE_I64)) {
    TRAP();
  }
  const uint32_t nt = 2 + p->nindices;
  for (uint32_t k = 2; k < nt; k++) {
    if (p->dtypes[k] != OR_I64 && p->dtypes[k] != OR_I32) {
      TRAP();
    }
  }
  const uint32_t size = dtype_size(p->dtypes[OR_INDEX_DIRECT]);
  /* Raw moves when both sides have one dtype (the usual case). */
  const uint32_t same_size = p->dtypes[OR_INDEX_DIRECT] == p->dtypes[OR_INDEX_INDEXED] ? size : 0;
  (void)dtype_size(p->dtypes[OR_INDEX_INDEXED]);
  const uint32_t ndim = p->ndim;
  for (uint32_t d = 0; d < ndim; d++) {
    if (p->sizes[d] <= 0) {
      return;
    }
  }
  /* A gather writes each direct element once, so its box splits; the other
   * ops write the indexed operand, where indices may repeat, so one worker runs them. */
  if (workers > 1 && p->op != OR_INDEX_GATHER) {
    if (worker > 0) {
      return;
    }
  } else if (workers > 1 && !RESTRICT_BOX(part, nt, split_dim(part.sizes, 0, ndim, workers), worker, workers)) {
    return;
  }
  char *ptr[OR_INDEX_OPERANDS];
  for (uint32_t k = 0; k < nt; k++) {
    ptr[k] = device_ptr(p->data[k]);
  }
  int64_t counter[OR_MAX_DIMS] = {0};
  const int64_t n0 = p->sizes[0];
  const or_index_row fast = fast_row(p, same_size);
  for (;;) {
    if (fast) {
      fast(p, ptr, n0);
    } else {
      char *row[OR_INDEX_OPERANDS];
      for (uint32_t k = 0; k < nt; k++) {
        row[k] = ptr[k];
      }
      for (int64_t i = 0; i < n0; i++) {
        index_element(p, row, same_size);
        for (uint32_t k = 0; k < nt; k++) {
          row[k] += p->strides[k][0];
        }
      }
    }
    uint32_t d = 1;
    for (; d < ndim; d++) {
      for (uint32_t k = 0; k < nt; k++) {
        ptr[k] += p->strides[k][d];
      }
      if (++counter[d] < p->sizes[d]) {
        break;
      }
      for (uint32_t k = 0; k < nt; k++) {
        ptr[k] -= p->strides[k][d] * p->sizes[d];
      }
      counter[d] = 0;
    }
    if (d >= ndim) {
      return;
    }
  }
}

/* The nonzero elements of one innermost row (n elements, s bytes apart):
 * each one's coordinates are the outer dimensions' `counter` and its place
 * in the row. Returns 0 once `count` rows are written. A loop per kind of
 * element, the test inlined. While 64 or more of `count`'s rows are left,
 * 64 elements at a time go without a branch per element: each one's
 * coordinates are written to the next row, which the element takes only if
 * it is nonzero (a branch on random data mispredicts about half the time);
 * the last rows are written one test at a time, as the output holds no
 * spare row. */
#define OR_NONZERO_LOOP(U, NONZERO)                                                                \
  {                                                                                                \
    const int64_t so = p->out_strides[0], sd = p->out_strides[1];                                  \
    const uint32_t last = p->ndim > 0 ? p->ndim - 1 : 0;                                           \
    int64_t j = 0, f = *found;                                                                     \
    for (; j + 64 <= n && p->count - f >= 64; j += 64) {                                           \
      char *o = out + f * so;                                                                      \
      for (int64_t q = j; q < j + 64; q++) {                                                       \
        const U v = *(const U *)(row + q * s);                                                     \
        for (uint32_t d = 0; d < last; d++) {                                                      \
          *(int64_t *)(o + d * sd) = counter[d];                                                   \
        }                                                                                          \
        if (p->ndim > 0) {                                                                         \
          *(int64_t *)(o + last * sd) = q;                                                         \
        }                                                                                          \
        const int64_t taken = (NONZERO) ? 1 : 0;                                                   \
        o += taken * so;                                                                           \
        f += taken;                                                                                \
      }                                                                                            \
    }                                                                                              \
    for (; j < n; j++) {                                                                           \
      const U v = *(const U *)(row + j * s);                                                       \
      if (NONZERO) {                                                                               \
        if (f >= p->count) {                                                                       \
          *found = f;                                                                              \
          return 0; /* more than counted: cannot happen in stream order */                         \
        }                                                                                          \
        char *o = out + f * so;                                                                    \
        for (uint32_t d = 0; d < last; d++) {                                                      \
          *(int64_t *)(o + d * sd) = counter[d];                                                   \
        }                                                                                          \
        if (p->ndim > 0) {                                                                         \
          *(int64_t *)(o + last * sd) = j;                                                         \
        }                                                                                          \
        f++;                                                                                       \
      }                                                                                            \
    }                                                                                              \
    *found = f;                                                                                    \
  }

static int nonzero_row(const or_nonzero *p, const char *row, int64_t n, int64_t s, const int64_t *counter, char *out,
                       int64_t *found) {
  switch (p->dtype) {
  case OR_F32:
    OR_NONZERO_LOOP(float, v != 0.0f)
    return 1;
  case OR_F64:
    OR_NONZERO_LOOP(double, v != 0.0)
    return 1;
  case OR_F16: /* +0 and -0 are the zeros */
  case OR_BF16:
    OR_NONZERO_LOOP(uint16_t, (v & 0x7fff) != 0)
    return 1;
  default:
    switch (dtype_size(p->dtype)) {
    case 1:
      OR_NONZERO_LOOP(uint8_t, v != 0)
      return 1;
    case 2:
      OR_NONZERO_LOOP(uint16_t, v != 0)
      return 1;
    case 4:
      OR_NONZERO_LOOP(uint32_t, v != 0)
      return 1;
    default:
      OR_NONZERO_LOOP(uint64_t, v != 0)
      return 1;
    }
  }
}

EXPORT(nonzero) void nonzero(const or_nonzero *p, int32_t worker, int32_t workers) {
  /* sequential: one worker runs it */
  check_worker(worker, workers);
  if (worker > 0) {
    return;
  }
  if (p->ndim > OR_MAX_DIMS) {
    TRAP();
  }
  const uint32_t ndim = p->ndim;
  (void)dtype_size(p->dtype); /* traps on an unknown dtype */
  for (uint32_t d = 0; d < ndim; d++) {
    if (p->sizes[d] <= 0) {
      return;
    }
  }
  const char *in = device_ptr(p->data);
  char *out = device_ptr(p->out);
  /* rows along the last dimension; the outer ones counted by an odometer */
  const int64_t n = ndim ? p->sizes[ndim - 1] : 1, s = ndim ? p->strides[ndim - 1] : 0;
  int64_t counter[OR_MAX_DIMS] = {0};
  int64_t found = 0;
  for (;;) {
    if (!nonzero_row(p, in, n, s, counter, out, &found)) {
      return;
    }
    int32_t d = (int32_t)ndim - 2;
    for (; d >= 0; d--) {
      in += p->strides[d];
      if (++counter[d] < p->sizes[d]) {
        break;
      }
      in -= p->strides[d] * p->sizes[d];
      counter[d] = 0;
    }
    if (d < 0) {
      return;
    }
  }
}

/* arange and linspace: positions [lo, hi) of the line, a chunk at a time
 * (each value depends on its position alone, so workers split the line). */
static void positions_line(const or_position *p, char *out, int64_t lo, int64_t hi) {
  const int64_t st = p->strides[0][0];
  const uint32_t dtype = p->dtype;
  const int arange = p->op == OR_POSITION_ARANGE;
  if (p->compute == OR_COMPUTE_I64) {
    const int64_t start = p->args[0].i, step = p->args[1].i;
    int64_t line[OR_CHUNK];
    for (int64_t i0 = lo; i0 < hi; i0 += OR_CHUNK) {
      const int64_t m = hi - i0 < OR_CHUNK ? hi - i0 : OR_CHUNK;
      for (int64_t j = 0; j < m; j++) {
        line[j] = (int64_t)((uint64_t)start + (uint64_t)step * (uint64_t)(i0 + j)); /* wraps, as CPU */
      }
      store_row_I64(out + i0 * st, st, dtype, line, m);
    }
    return;
  }
  /* linspace: the first half steps up from start, the second down from end */
  const double start = p->args[0].f, end = p->args[1].f;
  const double step = arange ? p->args[1].f : p->args[2].f;
  const int64_t steps = p->args[3].i, halfway = arange ? hi : steps / 2;
  double line[OR_CHUNK];
  for (int64_t i0 = lo; i0 < hi; i0 += OR_CHUNK) {
    const int64_t m = hi - i0 < OR_CHUNK ? hi - i0 : OR_CHUNK;
    for (int64_t j = 0; j < m; j++) {
      const int64_t i = i0 + j;
      line[j] = i < halfway ? start + step * (double)i : end - step * (double)(steps - i - 1);
    }
    store_row_F64(out + i0 * st, st, dtype, line, m);
  }
}

/* Zeros n bytes at p: whole vectors, then bytes. */
__attribute__((no_builtin("memset"))) static void zero_bytes(char *p, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) wasm_v128_store(p + j, wasm_i32x4_splat(0));
  for (; j < n; j++) p[j] = 0;
}

/* One row of a triangle (n elements of es bytes, so / si bytes apart in out
 * and in): elements [lo, hi) kept (copied unless out is in), the others
 * zeroed. Contiguous rows as block copies and fills: element by element
 * through the odometer, tril of 512 x 512 float32 took 1 ms on one worker. */
static void triangle_row(char *out, const char *in, int64_t so, int64_t si, int64_t n, int64_t lo, int64_t hi,
                         uint32_t es) {
  if (so == es && si == es) {
    zero_bytes(out, lo * es);
    if (out != in && hi > lo) {
      copy_bytes(out + lo * es, in + lo * es, (usize)((hi - lo) * es));
    }
    zero_bytes(out + hi * es, (n - hi) * es);
    return;
  }
  for (int64_t j = 0; j < n; j++) {
    if (j < lo || j >= hi) {
      switch (es) {
      case 1:
        *(uint8_t *)(out + j * so) = 0;
        break;
      case 2:
        *(uint16_t *)(out + j * so) = 0;
        break;
      case 4:
        *(uint32_t *)(out + j * so) = 0;
        break;
      default:
        *(uint64_t *)(out + j * so) = 0;
        break;
      }
    } else if (out != in) {
      move_element(out + j * so, in + j * si, es);
    }
  }
}

EXPORT(positions) void positions(const or_position *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  const or_position part = *params; /* a local copy: stores to the output cannot alias it */
  const or_position *p = &part;
  if (p->op >= OR_POSITION_COUNT || p->ndim < 1 || p->ndim > OR_MAX_DIMS ||
      ((p->op == OR_POSITION_TRIL || p->op == OR_POSITION_TRIU) && p->ndim < 2)) {
    TRAP();
  }
  const uint32_t ndim = p->ndim;
  const uint32_t dtype = p->dtype;
  const uint32_t es = dtype_size(dtype);
  for (uint32_t d = 0; d < ndim; d++) {
    if (p->sizes[d] <= 0) {
      return;
    }
  }
  char *out = device_ptr(p->data[0]);
  if (p->op == OR_POSITION_ARANGE || p->op == OR_POSITION_LINSPACE) {
    int64_t lo, hi;
    split_range(p->sizes[0], OR_CHUNK, worker, workers, &lo, &hi);
    positions_line(p, out, lo, hi);
    return;
  }
  if (worker > 0) {
    return; /* triangles: one worker */
  }
  /* TRIL / TRIU over the last two dimensions, a row (the last dimension) at a time. */
  const char *in = device_ptr(p->data[1]);
  const int lower = p->op == OR_POSITION_TRIL;
  const int64_t n = p->sizes[ndim - 1], rows = p->sizes[ndim - 2];
  /* the diagonal, clamped past either corner (the same triangle; i + k cannot overflow) */
  const int64_t k = p->args[0].i < -rows - 1 ? -rows - 1 : p->args[0].i > n + 1 ? n + 1 : p->args[0].i;
  const int64_t so = p->strides[0][ndim - 1], si = p->strides[1][ndim - 1];
  int64_t counter[OR_MAX_DIMS] = {0};
  for (;;) {
    const int64_t i = counter[ndim - 2];
    /* kept: j - i <= k (tril), j - i >= k (triu) */
    const int64_t edge = i + k;
    const int64_t lo = lower ? 0 : (edge < 0 ? 0 : edge > n ? n : edge);
    const int64_t hi = lower ? (edge + 1 < 0 ? 0 : edge + 1 > n ? n : edge + 1) : n;
    triangle_row(out, in, so, si, n, lo, hi, es);
    int32_t d = (int32_t)ndim - 2;
    for (; d >= 0; d--) {
      out += p->strides[0][d];
      in += p->strides[1][d];
      if (++counter[d] < p->sizes[d]) {
        break;
      }
      out -= p->strides[0][d] * p->sizes[d];
      in -= p->strides[1][d] * p->sizes[d];
      counter[d] = 0;
    }
    if (d < 0) {
      return;
    }
  }
}

/* One binary search of CPU's searchsorted (cus_lower_bound / cus_upper_bound):
 * the comparisons are written as CPU writes them, so NaN lands where it does
 * there. */
#define OR_DEFINE_SEARCH(S, T, LOAD)                                                        \
  static int64_t search_##S(const char *line, int64_t stride, int64_t n, uint32_t dt, T v, \
                            uint32_t right) {                                               \
    int64_t lo = 0, hi = n;                                                                 \
    while (lo < hi) {                                                                       \
      const int64_t mid = lo + ((hi - lo) >> 1);                                            \
      const T m = LOAD(line + mid * stride, dt);                                            \
      if (right ? !(m > v) : !(m >= v)) {                                                   \
        lo = mid + 1;                                                                       \
      } else {                                                                              \
        hi = mid;                                                                           \
      }                                                                                     \
    }                                                                                       \
    return lo;                                                                              \
  }
OR_DEFINE_SEARCH(F, double, load_F64)
OR_DEFINE_SEARCH(I, int64_t, load_I64)

EXPORT(search) void search(const or_search *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  or_search part = *params;
  const or_search *p = &part;
  if (p->ndim < 1 || p->ndim > OR_MAX_DIMS || p->seq_len < 0 ||
      (p->out_dtype != OR_I64 && p->out_dtype != OR_I32)) {
    TRAP();
  }
  const uint32_t dt = p->dtype;
  (void)dtype_size(dt); /* traps on an unknown dtype */
  const int is_float = dt == OR_F32 || dt == OR_F64 || dt == OR_F16 || dt == OR_BF16;
  if (workers > 1 && !RESTRICT_BOX(part, 3, split_dim(part.sizes, 0, part.ndim, workers), worker, workers)) {
    return;
  }
  for (uint32_t d = 0; d < p->ndim; d++) {
    if (p->sizes[d] <= 0) {
      return;
    }
  }
  char *ptr[3];
  for (uint32_t k = 0; k < 3; k++) {
    ptr[k] = device_ptr(p->data[k]);
  }
  int64_t counter[OR_MAX_DIMS] = {0};
  for (;;) {
    for (int64_t i = 0; i < p->sizes[0]; i++) {
      const char *value = ptr[OR_SEARCH_VALUES] + i * p->strides[OR_SEARCH_VALUES][0];
      const char *line = ptr[OR_SEARCH_SEQ] + i * p->strides[OR_SEARCH_SEQ][0];
      const int64_t pos = is_float ? search_F(line, p->seq_stride, p->seq_len, dt, load_F64(value, dt), p->right)
                                   : search_I(line, p->seq_stride, p->seq_len, dt, load_I64(value, dt), p->right);
      char *out = ptr[OR_SEARCH_OUT] + i * p->strides[OR_SEARCH_OUT][0];
      if (p->out_dtype == OR_I64) {
        *(int64_t *)out = pos;
      } else {
        *(int32_t *)out = (int32_t)pos;
      }
    }
    uint32_t d = 1;
    for (; d < p->ndim; d++) {
      for (uint32_t k = 0; k < 3; k++) {
        ptr[k] += p->strides[k][d];
      }
      if (++counter[d] < p->sizes[d]) {
        break;
      }
      for (uint32_t k = 0; k < 3; k++) {
        ptr[k] -= p->strides[k][d] * p->sizes[d];
      }
      counter[d] = 0;
    }
    if (d >= p->ndim) {
      return;
    }
  }
}
