/*
 * openreg_engine.h: the parameter blocks of the built-in engine
 * (`openreg.engine`), shared by the wasm kernels (the C files beside it, C11) and the
 * C++ shim that fills them (python/csrc/OpenRegEngine.cpp, C++20).
 *
 * A launch of an engine kernel carries one block as its parameter block (the
 * WIT `kernel-arg::params`): the shim fills it on the host from ATen's
 * TensorIterator, the runtime writes it into the device's parameter area
 * just before the kernel runs, and the kernel reads it there. The layout is
 * fixed (natural alignment, no padding) and checked below at compile time in
 * both languages, so the two sides cannot drift.
 *
 * Dtype codes are c10::ScalarType's numbers.
 */
#ifndef OPENREG_ENGINE_H
#define OPENREG_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define OR_STATIC_ASSERT static_assert
namespace openreg::engine {
#else
#define OR_STATIC_ASSERT _Static_assert
#endif

/* Dimensions after TensorIterator coalesces them (innermost first). */
#define OR_MAX_DIMS 16
/* Operands of one elementwise op: its output first, then up to three inputs. */
#define OR_MAX_OPERANDS 4
/* Scalar arguments of an op (alpha, clamp bounds, a fill value, ...). */
#define OR_MAX_ARGS 4

/* Element types: c10::ScalarType's numbering. */
enum or_dtype {
  OR_U8 = 0,
  OR_I8 = 1,
  OR_I16 = 2,
  OR_I32 = 3,
  OR_I64 = 4,
  OR_F16 = 5,
  OR_F32 = 6,
  OR_F64 = 7,
  OR_BOOL = 11,
  OR_BF16 = 15,
};

/* The type an op computes in: float32 (also for float16 and bfloat16, as
 * PyTorch's opmath), float64, or int64 (every integer type and bool; the
 * result is converted to the output's type, which wraps as C++ casts do). */
enum or_compute {
  OR_COMPUTE_F32 = 0,
  OR_COMPUTE_F64 = 1,
  OR_COMPUTE_I64 = 2,
  OR_COMPUTE_COUNT = 3,
};

/*
 * The elementwise ops, by arity. `a`, `b`, `c` are the inputs, `args[k]` the
 * op's scalar arguments (in the compute type: `.f` for floats, `.i` for
 * integers). One list, used by the kernel's dispatch table and the shim.
 */
#define OR_ELEMENTWISE_OPS(X)                                                            \
  /* nullary */                                                                        \
  X(FILL, 0)          /* args[0] */                                                    \
  /* unary */                                                                          \
  X(COPY, 1)          /* a, converted to the output's dtype */                         \
  X(NEG, 1)                                                                            \
  X(ABS, 1)                                                                            \
  X(SIGN, 1)                                                                           \
  X(SQRT, 1)                                                                           \
  X(RSQRT, 1)                                                                          \
  X(RECIPROCAL, 1)                                                                     \
  X(FLOOR, 1)                                                                          \
  X(CEIL, 1)                                                                           \
  X(TRUNC, 1)                                                                          \
  X(ROUND, 1)         /* half to even, as torch.round */                               \
  X(BITWISE_NOT, 1)                                                                    \
  X(LOGICAL_NOT, 1)                                                                    \
  X(ISNAN, 1)                                                                          \
  X(CLAMP, 1)         /* min(max(a, args[0]), args[1]); NaN propagates */              \
  X(CLAMP_MIN, 1)     /* max(a, args[0]) */                                            \
  X(CLAMP_MAX, 1)     /* min(a, args[0]) */                                            \
  X(THRESHOLD, 2)     /* a <= args[0] ? args[1] : b  (threshold, threshold_backward) */ \
  /* binary */                                                                         \
  X(ADD, 2)           /* a + args[0] * b (alpha) */                                    \
  X(MUL, 2)                                                                            \
  X(DIV, 2)           /* true division */                                              \
  X(DIV_TRUNC, 2)                                                                      \
  X(MAXIMUM, 2)       /* NaN propagates */                                             \
  X(MINIMUM, 2)                                                                        \
  X(EQ, 2)                                                                             \
  X(NE, 2)                                                                             \
  X(LT, 2)                                                                             \
  X(LE, 2)                                                                             \
  X(GT, 2)                                                                             \
  X(GE, 2)                                                                             \
  X(LOGICAL_AND, 2)                                                                    \
  X(LOGICAL_OR, 2)                                                                     \
  X(LOGICAL_XOR, 2)                                                                    \
  X(BITWISE_AND, 2)                                                                    \
  X(BITWISE_OR, 2)                                                                     \
  X(BITWISE_XOR, 2)                                                                    \
  /* ternary */                                                                        \
  X(WHERE, 3)         /* a (bool) ? b : c */                                           \
  X(LERP, 3)          /* a + c * (b - a), weight tensor c, as CPU */                           \
  X(ADDCMUL, 3)       /* a + args[0] * b * c */                                        \
  X(ADDCDIV, 3)       /* a + args[0] * b / c */                                        \
  X(LERP_SCALAR, 2)   /* a + args[0] * (b - a), a scalar weight */                     \
  X(DIV_FLOOR, 2)     /* floor(a / b), as torch.div(rounding_mode='floor') */          \
  X(REMAINDER, 2)     /* a - floor(a / b) * b, the sign of b (Python's %) */           \
  X(FMOD, 2)          /* C's fmod: the sign of a */

enum or_op {
#define OR_OP_ENUM(name, arity) OR_OP_##name,
  OR_ELEMENTWISE_OPS(OR_OP_ENUM)
#undef OR_OP_ENUM
  OR_OP_COUNT
};

/* A scalar in the compute type. */
typedef union or_scalar {
  double f;
  int64_t i;
} or_scalar;

/*
 * The parameter block of the `elementwise` kernel: one op over a coalesced
 * iteration space, as TensorIterator describes it. Operand 0 is the output.
 * Operand k's element at index (i0, i1, ...) lies at
 * data[k] + i0 * strides[k][0] + i1 * strides[k][1] + ... (bytes). An operand
 * whose bit is set in `scalar_mask` is a host scalar (a CPU scalar tensor or
 * a Python number): its value is `scalars[k]`, in the compute type, and its
 * data and strides are ignored.
 */
typedef struct or_elementwise {
  uint32_t op;          /* enum or_op */
  uint32_t compute;     /* enum or_compute */
  uint32_t ntensors;    /* 1 + the op's arity */
  uint32_t ndim;        /* 1..OR_MAX_DIMS */
  uint32_t dtypes[OR_MAX_OPERANDS];
  uint32_t scalar_mask;
  uint32_t reserved;
  int64_t sizes[OR_MAX_DIMS];
  uint64_t data[OR_MAX_OPERANDS];
  int64_t strides[OR_MAX_OPERANDS][OR_MAX_DIMS];
  or_scalar scalars[OR_MAX_OPERANDS];
  or_scalar args[OR_MAX_ARGS];
} or_elementwise;

OR_STATIC_ASSERT(sizeof(or_scalar) == 8, "or_scalar is 8 bytes");
OR_STATIC_ASSERT(offsetof(or_elementwise, dtypes) == 16, "or_elementwise.dtypes");
OR_STATIC_ASSERT(offsetof(or_elementwise, scalar_mask) == 32, "or_elementwise.scalar_mask");
OR_STATIC_ASSERT(offsetof(or_elementwise, sizes) == 40, "or_elementwise.sizes");
OR_STATIC_ASSERT(offsetof(or_elementwise, data) == 40 + 8 * OR_MAX_DIMS, "or_elementwise.data");
OR_STATIC_ASSERT(offsetof(or_elementwise, strides) == 40 + 8 * OR_MAX_DIMS + 8 * OR_MAX_OPERANDS,
                 "or_elementwise.strides");
OR_STATIC_ASSERT(sizeof(or_elementwise) == 40 + 8 * OR_MAX_DIMS + 8 * OR_MAX_OPERANDS * (2 + OR_MAX_DIMS) +
                                               8 * OR_MAX_ARGS,
                 "or_elementwise size");

#ifdef __cplusplus
} /* namespace openreg::engine */
#endif

#endif /* OPENREG_ENGINE_H */
