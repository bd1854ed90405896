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
 * The elementwise ops: name, arity, and the compute types they exist for
 * (ANY; NUM: any but bool; FLOAT: float32/float64 only; INT: int64 only). `a`, `b`, `c` are the
 * inputs, `args[k]` the op's scalar arguments (in the compute type: `.f` for
 * floats, `.i` for integers). One list, used by the kernel's dispatch table
 * and by the shim, which refuses an op in a compute type it lacks before
 * launching (the kernel would trap).
 */
#define OR_ELEMENTWISE_OPS(X)                                                            \
  /* nullary */                                                                        \
  X(FILL, 0, ANY)          /* args[0] */                                                    \
  /* unary */                                                                          \
  X(COPY, 1, ANY)          /* a, converted to the output's dtype */                         \
  X(NEG, 1, ANY)                                                                            \
  X(ABS, 1, ANY)                                                                            \
  X(SIGN, 1, ANY)                                                                           \
  X(SQRT, 1, FLOAT)                                                                           \
  X(RSQRT, 1, FLOAT)                                                                          \
  X(RECIPROCAL, 1, FLOAT)                                                                     \
  X(FLOOR, 1, ANY)                                                                          \
  X(CEIL, 1, ANY)                                                                           \
  X(TRUNC, 1, ANY)                                                                          \
  X(ROUND, 1, ANY)         /* half to even, as torch.round */                               \
  X(BITWISE_NOT, 1, INT)                                                                    \
  X(LOGICAL_NOT, 1, ANY)                                                                    \
  X(ISNAN, 1, ANY)                                                                          \
  X(CLAMP, 1, ANY)         /* min(max(a, args[0]), args[1]); NaN propagates */              \
  X(CLAMP_MIN, 1, ANY)     /* max(a, args[0]) */                                            \
  X(CLAMP_MAX, 1, ANY)     /* min(a, args[0]) */                                            \
  X(THRESHOLD, 2, ANY)     /* a <= args[0] ? args[1] : b  (threshold, threshold_backward) */ \
  /* binary */                                                                         \
  X(ADD, 2, ANY)           /* a + args[0] * b (alpha) */                                    \
  X(MUL, 2, ANY)                                                                            \
  X(DIV, 2, FLOAT)           /* true division */                                              \
  X(DIV_TRUNC, 2, NUM)                                                                      \
  X(MAXIMUM, 2, ANY)       /* NaN propagates */                                             \
  X(MINIMUM, 2, ANY)                                                                        \
  X(EQ, 2, ANY)                                                                             \
  X(NE, 2, ANY)                                                                             \
  X(LT, 2, ANY)                                                                             \
  X(LE, 2, ANY)                                                                             \
  X(GT, 2, ANY)                                                                             \
  X(GE, 2, ANY)                                                                             \
  X(LOGICAL_AND, 2, ANY)                                                                    \
  X(LOGICAL_OR, 2, ANY)                                                                     \
  X(LOGICAL_XOR, 2, ANY)                                                                    \
  X(BITWISE_AND, 2, INT)                                                                    \
  X(BITWISE_OR, 2, INT)                                                                     \
  X(BITWISE_XOR, 2, INT)                                                                    \
  /* ternary */                                                                        \
  X(WHERE, 3, ANY)         /* a (bool) ? b : c */                                           \
  X(LERP, 3, FLOAT)          /* a + c * (b - a), weight tensor c, as CPU */                           \
  X(ADDCMUL, 3, ANY)       /* a + args[0] * b * c */                                        \
  X(ADDCDIV, 3, FLOAT)       /* a + args[0] * b / c */                                        \
  X(LERP_SCALAR, 2, FLOAT)   /* a + args[0] * (b - a), a scalar weight */                     \
  X(DIV_FLOOR, 2, NUM)     /* floor(a / b), as torch.div(rounding_mode='floor') */          \
  X(REMAINDER, 2, NUM)     /* a - floor(a / b) * b, the sign of b (Python's %) */           \
  X(FMOD, 2, NUM)          /* C's fmod: the sign of a */                                    \
  /* transcendental (device-kernels/engine/math.h) and activations */                  \
  X(EXP, 1, FLOAT)                                                                            \
  X(EXP2, 1, FLOAT)                                                                           \
  X(EXPM1, 1, FLOAT)                                                                          \
  X(LOG, 1, FLOAT)                                                                            \
  X(LOG2, 1, FLOAT)                                                                           \
  X(LOG10, 1, FLOAT)                                                                          \
  X(LOG1P, 1, FLOAT)                                                                          \
  X(TANH, 1, FLOAT)                                                                           \
  X(SIGMOID, 1, FLOAT)                                                                        \
  X(ERF, 1, FLOAT)                                                                            \
  X(SILU, 1, FLOAT)                                                                           \
  X(MISH, 1, FLOAT)                                                                           \
  X(GELU, 1, FLOAT)                                                                           \
  X(GELU_TANH, 1, FLOAT)                                                                      \
  X(SOFTPLUS, 1, FLOAT)      /* beta args[0], threshold args[1] */                            \
  X(ELU, 1, FLOAT)           /* alpha * scale args[0], scale args[1], input_scale args[2] */  \
  X(LEAKY_RELU, 1, FLOAT)    /* negative slope args[0] */                                     \
  X(TANH_BACKWARD, 2, FLOAT)    /* a: grad, b: tanh's output */                               \
  X(SIGMOID_BACKWARD, 2, FLOAT) /* a: grad, b: sigmoid's output */                            \
  X(SILU_BACKWARD, 2, FLOAT)    /* a: grad, b: input */                                       \
  X(GELU_BACKWARD, 2, FLOAT)    /* a: grad, b: input */                                       \
  X(GELU_TANH_BACKWARD, 2, FLOAT)                                                             \
  X(SOFTPLUS_BACKWARD, 2, FLOAT) /* a: grad, b: input; beta args[0], threshold args[1] */     \
  X(LEAKY_RELU_BACKWARD, 2, FLOAT) /* a: input, b: grad; slope args[0] */                    \
  X(ELU_BACKWARD, 2, FLOAT)  /* a: grad, b: input; args as ELU */                             \
  X(ELU_BACKWARD_RESULT, 2, FLOAT) /* a: grad, b: ELU's output; args as ELU */

enum or_kinds {
  OR_KINDS_ANY = 0,
  OR_KINDS_FLOAT = 1,
  OR_KINDS_INT = 2,
  OR_KINDS_NUM = 3,
};

enum or_op {
#define OR_OP_ENUM(name, arity, kinds) OR_OP_##name,
  OR_ELEMENTWISE_OPS(OR_OP_ENUM)
#undef OR_OP_ENUM
  OR_OP_COUNT
};

/* Each op's arity, by name (OR_ARITY_ADD == 2): the kernel's tables check theirs against it. */
enum or_arity {
#define OR_ARITY_ENUM(name, arity, kinds) OR_ARITY_##name = arity,
  OR_ELEMENTWISE_OPS(OR_ARITY_ENUM)
#undef OR_ARITY_ENUM
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
