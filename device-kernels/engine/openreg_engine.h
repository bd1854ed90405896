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
  X(ELU_BACKWARD_RESULT, 2, FLOAT) /* a: grad, b: ELU's output; args as ELU */ \
  X(SIN, 1, FLOAT)                                                                            \
  X(COS, 1, FLOAT)                                                                            \
  X(ASIN, 1, FLOAT)                                                                           \
  X(ACOS, 1, FLOAT)                                                                           \
  X(ATAN, 1, FLOAT)                                                                           \
  X(ATAN2, 2, FLOAT)             /* a: y, b: x */                                             \
  X(SINH, 1, FLOAT)                                                                           \
  X(COSH, 1, FLOAT)                                                                           \
  X(ASINH, 1, FLOAT)                                                                          \
  X(ACOSH, 1, FLOAT)                                                                          \
  X(ATANH, 1, FLOAT)                                                                          \
  X(TAN, 1, FLOAT)                                                                            \
  X(POW, 2, NUM)             /* a ** b; integers by squaring, negative exponents as CPU */    \
  X(POW_SCALAR, 1, NUM)      /* a ** args[0] */                                               \
  X(NAN_TO_NUM, 1, FLOAT)    /* NaN -> args[0], +inf -> args[1], -inf -> args[2] */           \
  X(HARDTANH_BACKWARD, 2, FLOAT) /* a: grad, b: input; min args[0], max args[1] */ \
  X(CLAMP_TENSOR, 3, ANY)    /* min(max(a, b), c); a NaN anywhere gives NaN */                 \
  X(SQUARED_DIFF, 2, FLOAT)  /* (a - b) * (a - b) (mse_loss) */                                \
  X(MSE_BACKWARD, 3, FLOAT)  /* args[0] * (a - b) * c; a: input, b: target, c: grad */     \
  X(MUL_ADD, 3, FLOAT)       /* a * b + c, rounded twice (not fused): normalizations */ \
  X(LSHIFT, 2, INT)          /* a << b; 0 for b < 0 or past the type's width */               \
  X(RSHIFT, 2, INT)          /* a >> b (arithmetic); the sign for b < 0 or past the width */  \
  X(ROUND_DECIMALS, 1, FLOAT) /* args[0] = 10^|decimals|; args[1] != 0: decimals < 0 */      \
  X(HARDSIGMOID, 1, FLOAT)                                                                    \
  X(HARDSIGMOID_BACKWARD, 2, FLOAT) /* a: grad, b: input */                                   \
  X(HARDSWISH, 1, FLOAT)                                                                      \
  X(HARDSWISH_BACKWARD, 2, FLOAT)   /* a: grad, b: input */                                   \
  X(HARDSHRINK, 1, FLOAT)    /* lambda args[0] */                                             \
  X(SOFTSHRINK, 1, FLOAT)    /* lambda args[0] */                                             \
  X(SHRINK_BACKWARD, 2, FLOAT) /* a: grad, b: input; lambda args[0] */                        \
  X(GLU, 2, FLOAT)           /* a * sigmoid(b): the two halves */                             \
  X(GLU_BACKWARD, 3, FLOAT)  /* (1 - a) a b c; a: sigmoid of the second half, b: first half, c: grad */ \
  X(PRELU, 2, FLOAT)         /* a > 0 ? a : b a; b: the weight */                             \
  X(PRELU_BACKWARD_INPUT, 3, FLOAT)  /* a: input, b: weight, c: grad */                       \
  X(PRELU_BACKWARD_WEIGHT, 2, FLOAT) /* a: input, b: grad */                                  \
  X(LOGADDEXP, 2, FLOAT)                                                                      \
  X(LOGADDEXP2, 2, FLOAT)                                                                     \
  X(HYPOT, 2, FLOAT)                                                                          \
  X(COPYSIGN, 2, FLOAT)                                                                       \
  X(XLOGY, 2, FLOAT)         /* a log b; 0 where a == 0, NaN where b is */                    \
  X(XLOG1PY, 2, FLOAT)       /* a log1p b, the same way */                                    \
  X(FRAC, 1, FLOAT)                                                                           \
  X(HEAVISIDE, 2, ANY)       /* a == 0 ? b : a > 0 */                                         \
  X(FMAX, 2, ANY)            /* the larger; a NaN only when both are */                       \
  X(FMIN, 2, ANY)                                                                             \
  X(SIGNBIT, 1, ANY)                                                                          \
  X(GCD, 2, INT)                                                                              \
  X(LCM, 2, INT)                                                                              \
  X(SINC, 1, FLOAT)          /* sin(pi a) / (pi a); 1 at 0 */                                 \
  X(SMOOTH_L1, 2, FLOAT)     /* beta args[0] */                                               \
  X(SMOOTH_L1_BACKWARD, 3, FLOAT) /* a: input, b: target, c: grad; norm args[0], beta args[1] */ \
  X(HUBER, 2, FLOAT)         /* delta args[0] */                                              \
  X(HUBER_BACKWARD, 3, FLOAT) /* a: input, b: target, c: grad; norm args[0], delta args[1] */ \
  X(ERFC, 1, FLOAT)                                                                           \
  X(ERFINV, 1, FLOAT)                                                                         \
  X(LGAMMA, 1, FLOAT)                                                                         \
  X(DIGAMMA, 1, FLOAT)                                                                        \
  X(POLYGAMMA, 1, FLOAT)     /* the args[0]-th derivative of digamma (args[0] >= 1) */      \
  X(ENTR, 1, FLOAT)          /* -a ln a */                                                    \
  X(ANGLE, 1, FLOAT)         /* of a real number: pi below 0, else 0 */                       \
  X(ERFCX, 1, FLOAT)         /* e^(a^2) erfc a */                                             \
  X(NDTRI, 1, FLOAT)         /* the standard normal quantile */                               \
  X(LOG_NDTR, 1, FLOAT)      /* ln of the standard normal CDF */                              \
  X(I0, 1, FLOAT)            /* modified Bessel functions, and scaled by e^-|a| */            \
  X(I0E, 1, FLOAT)                                                                            \
  X(I1, 1, FLOAT)                                                                             \
  X(I1E, 1, FLOAT)                                                                            \
  X(RENORM_FACTOR, 1, FLOAT) /* a > args[0] ? args[0] / (a + 1e-7) : 1 (renorm's scale) */ \
  /* (new ops go last: host/tests/runtime.rs launches ops by number) */                      \
  X(CUBE, 1, FLOAT)              /* (a * a) * a: pow(a, 3) */                               \
  X(RECIPROCAL_SQUARE, 1, FLOAT) /* 1 / (a * a): pow(a, -2) */

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

/*
 * The parameter block of the `elementwise_list` kernel: `head`'s op over
 * each item in turn (torch's _foreach_ ops: one launch for every tensor of
 * the lists). An item's operands are contiguous: operand k's element j lies
 * at data[k] + j * (the size of dtypes[k]); head's ndim, sizes, data and
 * strides are ignored. An operand whose bit is set in `broadcast_mask` is
 * instead one element at data[k] (a 0-dim device tensor, stride 0). `value_to`
 * says where each item's `value` goes: -1 nowhere, 0 args[0] (a per-tensor
 * alpha or weight), k in 1..3 operand k, which is then a host scalar (a
 * per-tensor divisor). The workers split the items' elements, taken one list
 * after another, in equal ranges.
 */
#define OR_LIST_MAX 256

typedef struct or_list_item {
  uint64_t data[OR_MAX_OPERANDS]; /* those of the head's operands that are tensors */
  int64_t n;                      /* elements */
  or_scalar value;
} or_list_item;

typedef struct or_elementwise_list {
  or_elementwise head;
  uint32_t items; /* at most OR_LIST_MAX; the block holds that many */
  int32_t value_to;
  uint32_t broadcast_mask;
  uint32_t reserved;
  or_list_item item[OR_LIST_MAX];
} or_elementwise_list;

OR_STATIC_ASSERT(sizeof(or_list_item) == 48, "or_list_item size");
OR_STATIC_ASSERT(offsetof(or_elementwise_list, item) == sizeof(or_elementwise) + 16, "or_elementwise_list.item");

/*
 * The parameter block of the `optim_list` kernel: one step of torch's fused
 * Adam, AdamW, Adagrad or SGD (`_fused_adam_`, `_fused_adamw_`,
 * `_fused_adagrad_`, `_fused_sgd_`) over a list of parameters, one pass over
 * each item's tensors, with the arithmetic of ATen's CPU fused kernels. An
 * item's tensors are contiguous, of `dtype` (F32, F64, F16 or BF16), `n`
 * elements each: the parameter, its gradient and the optimizer's states
 * (Adam: exp_avg, exp_avg_sq and, with OR_OPTIM_AMSGRAD, max_exp_avg_sq;
 * Adagrad: state_sum; SGD with momentum: the momentum buffer, which
 * OR_OPTIM_FIRST_STEP sets to the gradient). `step` is the item's step count
 * (Adam, Adagrad), a 0-dim device tensor of `scalar_dtypes[OR_OPTIM_STEP]`,
 * already advanced. The learning rate is `lr`, or with OR_OPTIM_LR_TENSOR the 0-dim
 * device tensor at `lr_tensor`; with OR_OPTIM_GRAD_SCALE each gradient is
 * divided by the one at `grad_scale` (and stored back so, as CPU does); with
 * OR_OPTIM_FOUND_INF nothing runs when the one at `found_inf` is 1. The
 * 0-dim tensors are F32 or F64 (`scalar_dtypes`). The workers split the items'
 * elements, taken one list after another, in equal ranges.
 */
enum or_optim {
  OR_OPTIM_ADAM = 0,
  OR_OPTIM_ADAMW = 1,
  OR_OPTIM_ADAGRAD = 2,
  OR_OPTIM_SGD = 3,
  OR_OPTIM_COUNT = 4,
};

#define OR_OPTIM_AMSGRAD 1u
#define OR_OPTIM_MAXIMIZE 2u
#define OR_OPTIM_LR_TENSOR 4u
#define OR_OPTIM_GRAD_SCALE 8u
#define OR_OPTIM_FOUND_INF 16u
#define OR_OPTIM_NESTEROV 32u
#define OR_OPTIM_FIRST_STEP 64u

/* scalar_dtypes[]: the dtypes of the steps and of the three 0-dim tensors */
#define OR_OPTIM_STEP 0
#define OR_OPTIM_LR 1
#define OR_OPTIM_SCALE 2
#define OR_OPTIM_INF 3

typedef struct or_optim_item {
  uint64_t param, grad;
  uint64_t state[3];
  uint64_t step;
  int64_t n;
  uint64_t reserved;
} or_optim_item;

typedef struct or_optim_head {
  uint32_t kind;  /* enum or_optim */
  uint32_t dtype; /* of every item's tensors */
  uint32_t flags; /* OR_OPTIM_* */
  uint32_t items; /* at most OR_LIST_MAX; the block holds that many */
  uint32_t scalar_dtypes[4];
  double lr, weight_decay;
  double beta1, beta2, eps; /* Adam; Adagrad: eps */
  double lr_decay;          /* Adagrad */
  double momentum, dampening; /* SGD */
  uint64_t lr_tensor, grad_scale, found_inf;
} or_optim_head;

typedef struct or_optim_list {
  or_optim_head head;
  or_optim_item item[OR_LIST_MAX];
} or_optim_list;

OR_STATIC_ASSERT(sizeof(or_optim_item) == 64, "or_optim_item size");
OR_STATIC_ASSERT(offsetof(or_optim_item, grad) == 8 && offsetof(or_optim_item, state) == 16,
                 "or_optim_item: param, grad and the states are its first five addresses");
OR_STATIC_ASSERT(offsetof(or_optim_head, lr) == 32, "or_optim_head.lr");
OR_STATIC_ASSERT(sizeof(or_optim_head) == 120 && offsetof(or_optim_list, item) == 120, "or_optim_list.item");

/*
 * The reductions and scans (`reduce` kernel): name and the compute types
 * they exist for (ANY: float64 for every float dtype, int64 for integers and
 * bool; FLOAT: floats only). Outputs: out0, and out1 where noted; indices
 * are int64 positions along the reduced dimension (the block's dimension 0).
 */
#define OR_REDUCE_OPS(X)                                                                   \
  X(SUM, ANY)                                                                               \
  X(NANSUM, ANY)       /* NaN counts as zero */                                             \
  X(PROD, ANY)                                                                              \
  X(MEAN, FLOAT)                                                                            \
  X(MAX, ANY)          /* NaN propagates (amax, max()) */                                   \
  X(MIN, ANY)                                                                               \
  X(ARGMAX, ANY)       /* out0: index of the first maximum; a NaN is the maximum */         \
  X(ARGMIN, ANY)                                                                            \
  X(MAX_INDEX, ANY)    /* out0: value, out1: index, as ARGMAX (max.dim) */                  \
  X(MIN_INDEX, ANY)                                                                         \
  X(MINMAX, ANY)       /* out0: min, out1: max (aminmax) */                                 \
  X(ALL, ANY)          /* out0: bool (uint8 for uint8 inputs) */                            \
  X(ANY, ANY)                                                                               \
  X(NORM, FLOAT)       /* (sum |x|^p)^(1/p), p = args[0]; 0, 1, 2, +-inf as torch defines */ \
  X(VAR, FLOAT)        /* correction args[0], sqrt if args[1] != 0; out1 (if any): the mean */ \
  X(CUMSUM, ANY)       /* scans: out0 has a stride along dimension 0 (nreduce 1) */         \
  X(CUMPROD, ANY)                                                                           \
  X(CUMMAX, ANY)       /* scans with out1: int64 index of the running maximum (the last of */ \
  X(CUMMIN, ANY)       /* equal ones; NaN wins and stays), as CPU's cummax and cummin */     \
  X(LOGCUMSUMEXP, FLOAT) /* scan: log(sum(exp)) of every prefix */                            \
  X(SORT, ANY)         /* stable sort along dimension 0: out0 values, out1 int64 indices; */ \
                       /* descending if args[0] != 0; NaN sorts above everything */        \
  X(TOPK, ANY)         /* the first k = args[1].i (an integer for any compute type) of */   \
                       /* SORT's order, in that order: out0 and out1 are k long along */  \
                       /* dimension 0; 1 <= k <= sizes[0] */

enum or_reduce_op {
#define OR_REDUCE_ENUM(name, kinds) OR_REDUCE_##name,
  OR_REDUCE_OPS(OR_REDUCE_ENUM)
#undef OR_REDUCE_ENUM
  OR_REDUCE_COUNT
};

/* The operands of a reduction: its outputs, then its input. */
#define OR_REDUCE_OUT0 0
#define OR_REDUCE_OUT1 1
#define OR_REDUCE_IN 2
#define OR_REDUCE_OPERANDS 3

/*
 * The parameter block of the `reduce` kernel. Dimensions [0, nreduce) are
 * reduced (dimension 0 innermost), [nreduce, ndim) index the outputs; every
 * output element reduces its slice of the input in one fixed order (the
 * same whatever the sizes around it), so a run is bit-reproducible. The
 * outputs' strides along reduced dimensions are 0, except for scans, whose
 * out0 steps along dimension 0. `compute` is OR_COMPUTE_F64 (any float
 * input) or OR_COMPUTE_I64.
 *
 * A reduction of everything (nreduce == ndim) to one value can run in two
 * launches, so that all workers share it: phase OR_REDUCE_PHASE_PARTIALS
 * cuts the outermost reduced dimension into segments of `segment` indices
 * (the shim picks it from the problem, never from the worker count; along
 * dimension 0 a multiple of OR_REDUCE_SEGMENT_ALIGN, so each segment folds
 * its chunks as one pass would), workers split the segments, and each
 * segment's accumulator goes to `scratch` (OR_REDUCE_PARTIAL_BYTES each,
 * segment order); phase OR_REDUCE_PHASE_MERGE (one worker) merges them in
 * segment order and writes the outputs. Only how the segments' accumulators
 * associate differs from one pass, and it never depends on the workers.
 */
enum or_reduce_phase {
  OR_REDUCE_PHASE_WHOLE = 0, /* one launch does everything */
  OR_REDUCE_PHASE_PARTIALS = 1,
  OR_REDUCE_PHASE_MERGE = 2,
};
#define OR_REDUCE_PARTIAL_BYTES 40
/* SORT's scratch per worker for lines of n: 16 KiB of histograms, then two
 * arrays of keys, two of positions and a copy of the line, 8 bytes each. */
#define OR_SORT_ROOM(n) (16384 + 40 * (int64_t)(n))
#define OR_REDUCE_SEGMENT_ALIGN 256

typedef struct or_reduce {
  uint32_t op;       /* enum or_reduce_op */
  uint32_t compute;  /* enum or_compute: F64 or I64 */
  uint32_t ndim;     /* 0..OR_MAX_DIMS */
  uint32_t nreduce;  /* 0..ndim */
  uint32_t noutputs; /* 1 or 2 */
  uint32_t dtypes[OR_REDUCE_OPERANDS];
  int64_t sizes[OR_MAX_DIMS];
  uint64_t data[OR_REDUCE_OPERANDS];
  int64_t strides[OR_REDUCE_OPERANDS][OR_MAX_DIMS];
  or_scalar args[OR_MAX_ARGS];
  uint64_t scratch; /* device memory, per worker: SORT's OR_SORT_ROOM(sizes[0]) bytes, */
                    /* TOPK's 16 per element it keeps (k); or the partials */
  int64_t segment;  /* indices of the outermost reduced dimension per segment (phases 1 and 2) */
  uint32_t phase;   /* enum or_reduce_phase */
  uint32_t reserved;
} or_reduce;

OR_STATIC_ASSERT(offsetof(or_reduce, sizes) == 32, "or_reduce.sizes");
OR_STATIC_ASSERT(offsetof(or_reduce, data) == 32 + 8 * OR_MAX_DIMS, "or_reduce.data");
OR_STATIC_ASSERT(offsetof(or_reduce, strides) == 32 + 8 * OR_MAX_DIMS + 8 * OR_REDUCE_OPERANDS, "or_reduce.strides");
OR_STATIC_ASSERT(sizeof(or_reduce) == 56 + 8 * OR_MAX_DIMS + 8 * OR_REDUCE_OPERANDS * (1 + OR_MAX_DIMS) + 8 * OR_MAX_ARGS,
                 "or_reduce size");

/*
 * The indexing kernel (`index`): moves elements between a "direct" operand,
 * walked like any TensorIterator operand, and an "indexed" one, whose
 * element for iteration index i lies at
 *   indexed + i . strides[1] + sum_k idx_k(i) * indexed_strides[k]
 * where idx_k(i) is index tensor k's element (int64 or int32) at i. An index
 * outside [0, indexed_sizes[k]) (or [-size, size) when `wrap`, negative ones
 * counting from the end) traps: a device-side index check, as CUDA's.
 */
#define OR_INDEX_OPS(X)                                                          \
  X(GATHER)      /* direct = indexed[...] (index, gather, index_select) */       \
  X(SCATTER)     /* indexed[...] = direct (index_put_, scatter) */               \
  X(SCATTER_ADD) /* indexed[...] += args[0] * direct, in the compute type */   \
  X(SCATTER_MUL) /* indexed[...] *= direct, in the compute type */               \
  X(SCATTER_MAX) /* indexed[...] = max(indexed[...], direct); a NaN wins */     \
  X(SCATTER_MIN) /* indexed[...] = min(indexed[...], direct); a NaN wins */

enum or_index_op {
#define OR_INDEX_ENUM(name) OR_INDEX_##name,
  OR_INDEX_OPS(OR_INDEX_ENUM)
#undef OR_INDEX_ENUM
  OR_INDEX_COUNT
};

/* Index tensors of one indexing op (one per indexed dimension). */
#define OR_MAX_INDICES 8
/* Operands: direct, indexed, then the index tensors. */
#define OR_INDEX_DIRECT 0
#define OR_INDEX_INDEXED 1
#define OR_INDEX_OPERANDS (2 + OR_MAX_INDICES)

typedef struct or_index {
  uint32_t op;       /* enum or_index_op */
  uint32_t compute;  /* SCATTER_ADD/MUL: enum or_compute (F64 for floats, I64) */
  uint32_t ndim;     /* 1..OR_MAX_DIMS */
  uint32_t nindices; /* 1..OR_MAX_INDICES */
  uint32_t wrap;     /* negative indices count from the end */
  uint32_t reserved;
  uint32_t dtypes[OR_INDEX_OPERANDS]; /* index tensors: OR_I64 or OR_I32 */
  int64_t sizes[OR_MAX_DIMS];
  uint64_t data[OR_INDEX_OPERANDS];
  int64_t strides[OR_INDEX_OPERANDS][OR_MAX_DIMS];
  int64_t indexed_sizes[OR_MAX_INDICES];
  int64_t indexed_strides[OR_MAX_INDICES]; /* bytes */
  or_scalar args[OR_MAX_ARGS];
} or_index;

OR_STATIC_ASSERT(offsetof(or_index, sizes) == 24 + 4 * OR_INDEX_OPERANDS, "or_index.sizes");
OR_STATIC_ASSERT(offsetof(or_index, data) == 24 + 4 * OR_INDEX_OPERANDS + 8 * OR_MAX_DIMS, "or_index.data");
OR_STATIC_ASSERT(sizeof(or_index) == 24 + 4 * OR_INDEX_OPERANDS + 8 * OR_MAX_DIMS + 8 * OR_INDEX_OPERANDS * (1 + OR_MAX_DIMS) +
                                         16 * OR_MAX_INDICES + 8 * OR_MAX_ARGS,
                 "or_index size");

/*
 * The `nonzero` kernel: the coordinates of the input's nonzero elements, in
 * row-major order of its logical dimensions (the last varies fastest), one
 * row of `ndim` int64s each, at most `count` rows (the host counted them).
 */
typedef struct or_nonzero {
  uint32_t ndim;  /* 0..OR_MAX_DIMS, logical order (dimension 0 outermost) */
  uint32_t dtype; /* the input's */
  int64_t count;
  int64_t sizes[OR_MAX_DIMS];
  int64_t strides[OR_MAX_DIMS]; /* the input's, bytes */
  uint64_t data;                /* the input */
  uint64_t out;                 /* int64 [count, ndim] */
  int64_t out_strides[2];       /* bytes: per row, per coordinate */
} or_nonzero;

OR_STATIC_ASSERT(offsetof(or_nonzero, data) == 16 + 16 * OR_MAX_DIMS, "or_nonzero.data");
OR_STATIC_ASSERT(sizeof(or_nonzero) == 48 + 16 * OR_MAX_DIMS, "or_nonzero size");

/*
 * The `positions` kernel: ops whose value depends on an element's position.
 * Dimensions are in logical order (dimension 0 outermost); ARANGE and
 * LINSPACE write a 1-D out0; TRIL and TRIU read `in` (of out0's dtype, in
 * place allowed) and keep the elements on or below (above) diagonal k of
 * the last two dimensions, zeroing the rest.
 */
#define OR_POSITION_OPS(X)                                                              \
  X(ARANGE)   /* args[0] + args[1] * i (start, step), in the compute type */           \
  X(LINSPACE) /* start args[0], end args[1], step args[2], steps args[3].i, as CPU */  \
  X(TRIL)     /* k = args[0].i */                                                       \
  X(TRIU)

enum or_position_op {
#define OR_POSITION_ENUM(name) OR_POSITION_##name,
  OR_POSITION_OPS(OR_POSITION_ENUM)
#undef OR_POSITION_ENUM
  OR_POSITION_COUNT
};

typedef struct or_position {
  uint32_t op;      /* enum or_position_op */
  uint32_t compute; /* OR_COMPUTE_F64 or OR_COMPUTE_I64 (ARANGE, LINSPACE) */
  uint32_t ndim;    /* 1..OR_MAX_DIMS (TRIL/TRIU: at least 2) */
  uint32_t dtype;   /* out0's (and in's) */
  int64_t sizes[OR_MAX_DIMS];
  uint64_t data[2]; /* out0, in */
  int64_t strides[2][OR_MAX_DIMS];
  or_scalar args[OR_MAX_ARGS];
} or_position;

OR_STATIC_ASSERT(offsetof(or_position, data) == 16 + 8 * OR_MAX_DIMS, "or_position.data");
OR_STATIC_ASSERT(sizeof(or_position) == 32 + 24 * OR_MAX_DIMS + 8 * OR_MAX_ARGS, "or_position size");

/*
 * The `search` kernel (searchsorted, bucketize): for every value, the
 * position of the first element of its sorted line that is >= it (> it when
 * `right`), by CPU's binary search, so NaNs and ties land where CPU puts
 * them. The values are walked over `sizes` (innermost first) with their
 * strides and the output's; a value's line starts at the sequence's base
 * plus its strides (0 along dimensions the lines do not vary over) and steps
 * `seq_stride` bytes for `seq_len` elements. Values and sequence share one
 * dtype; the output is OR_I64 or OR_I32.
 */
#define OR_SEARCH_OUT 0
#define OR_SEARCH_VALUES 1
#define OR_SEARCH_SEQ 2

typedef struct or_search {
  uint32_t ndim;     /* 1..OR_MAX_DIMS */
  uint32_t right;    /* upper bound instead of lower bound */
  uint32_t dtype;    /* the values' and the sequence's */
  uint32_t out_dtype;
  int64_t seq_len;
  int64_t seq_stride; /* bytes */
  int64_t sizes[OR_MAX_DIMS];
  uint64_t data[3];   /* out, values, sequence */
  int64_t strides[3][OR_MAX_DIMS];
} or_search;

OR_STATIC_ASSERT(offsetof(or_search, data) == 32 + 8 * OR_MAX_DIMS, "or_search.data");
OR_STATIC_ASSERT(sizeof(or_search) == 56 + 32 * OR_MAX_DIMS, "or_search size");

/*
 * The `gemm` kernel: out = beta * out + alpha * a @ b for each of `batch`
 * matrix triples (mm, addmm, bmm, baddbmm, addmv, mv, dot). a is m x k, b
 * is k x n, out is m x n, each of any byte strides (batch, row, column),
 * all of one dtype. `beta_nonzero` 0: out is only written (NaN in it does not
 * propagate, as BLAS and ATen define beta = 0).
 *
 * Floats run in packed, blocked SIMD (float16 and bfloat16 widened to
 * float32 when packed and accumulated in float32 over the whole of k). Each
 * output element is accumulated in one fixed order that depends on k, on the
 * operands' layout, on whether m or n is 1 (matrix-vector products) and on
 * the blocking constants below, never on how the work is split, so a run is
 * bit-reproducible. Integers accumulate in int64 and wrap, as CPU's.
 */
#define OR_GEMM_A 0
#define OR_GEMM_B 1
#define OR_GEMM_OUT 2
#define OR_GEMM_OPERANDS 3

/* Blocking, per compute type: the register tile (MR x NR), the depth of one
 * pass over k (KC), the rows of a (MC) and columns of b (NC) packed at once. */
#define OR_GEMM_F32_MR 3
#define OR_GEMM_F32_NR 8
#define OR_GEMM_F64_MR 3
#define OR_GEMM_F64_NR 4
#define OR_GEMM_KC 256
#define OR_GEMM_MC 96
#define OR_GEMM_F32_NC 1024
#define OR_GEMM_F64_NC 512

typedef struct or_gemm {
  uint32_t dtype;        /* every operand's */
  uint32_t beta_nonzero; /* read out, scaled by beta */
  int64_t batch, m, n, k;
  uint64_t data[OR_GEMM_OPERANDS];
  int64_t strides[OR_GEMM_OPERANDS][3]; /* bytes: batch, row, column */
  or_scalar alpha, beta;                /* .f for floats, .i for integers */
  uint64_t scratch;                     /* or_gemm_scratch_bytes(.., workers) of device memory */
} or_gemm;

OR_STATIC_ASSERT(offsetof(or_gemm, data) == 40, "or_gemm.data");
OR_STATIC_ASSERT(offsetof(or_gemm, strides) == 40 + 8 * OR_GEMM_OPERANDS, "or_gemm.strides");
OR_STATIC_ASSERT(offsetof(or_gemm, scratch) == 40 + 32 * OR_GEMM_OPERANDS + 16, "or_gemm.scratch");
OR_STATIC_ASSERT(sizeof(or_gemm) == 64 + 32 * OR_GEMM_OPERANDS, "or_gemm size");

static inline int64_t or_gemm_min(int64_t x, int64_t y) {
  return x < y ? x : y;
}

static inline int64_t or_gemm_round_up(int64_t x, int64_t to) {
  return (x + to - 1) / to * to;
}

/* The scratch one worker of a gemm launch needs, in elements of the compute
 * type: for float16/bfloat16 an m x n float32 accumulator first, then room
 * either for the packed panels of a and b or for a vector of b and one of
 * results (matrix-vector products). The kernel may compute out^T = b^T a^T,
 * so the panels are sized for either orientation. A multiple of 4 elements,
 * so each worker's part starts 16-byte aligned. */
static inline int64_t or_gemm_accumulator_elems(uint32_t dtype, int64_t m, int64_t n) {
  return (dtype == OR_F16 || dtype == OR_BF16) ? or_gemm_round_up(m * n, 4) : 0;
}

static inline int64_t or_gemm_worker_elems(uint32_t dtype, int64_t m, int64_t n, int64_t k) {
  const int is64 = dtype == OR_F64;
  const int64_t mr = is64 ? OR_GEMM_F64_MR : OR_GEMM_F32_MR;
  const int64_t nr = is64 ? OR_GEMM_F64_NR : OR_GEMM_F32_NR;
  const int64_t nc = is64 ? OR_GEMM_F64_NC : OR_GEMM_F32_NC;
  const int64_t wide = m > n ? m : n;
  const int64_t kc = or_gemm_min(k, OR_GEMM_KC);
  const int64_t panels = (or_gemm_round_up(or_gemm_min(wide, nc), nr) + or_gemm_round_up(or_gemm_min(wide, OR_GEMM_MC), mr)) * kc;
  const int64_t vectors = or_gemm_round_up(k, 4) + or_gemm_round_up(wide, 4);
  return or_gemm_round_up(or_gemm_accumulator_elems(dtype, m, n) + (panels > vectors ? panels : vectors), 4);
}

/* The scratch of a launch run by `workers` workers, in bytes (integers need none). */
static inline int64_t or_gemm_scratch_bytes(uint32_t dtype, int64_t m, int64_t n, int64_t k, int64_t workers) {
  if (dtype != OR_F32 && dtype != OR_F64 && dtype != OR_F16 && dtype != OR_BF16) {
    return 0;
  }
  return workers * or_gemm_worker_elems(dtype, m, n, k) * (dtype == OR_F64 ? 8 : 4) + 16; /* 16: room to align the start */
}

/*
 * The `random` kernel: fills out0 with random numbers drawn by Philox4x32-10,
 * a counter-based generator: block b is the one of key `seed` and counter
 * (b, `offset`), and the element at row-major position i (of out0's logical
 * shape) takes slot i % D of block i / D (D = 4 for float32, float16 and
 * bfloat16 uniforms, 2 for every other draw; random.c), so each element's
 * value depends only on the seed, the launch's offset and its position,
 * never on how the work is split. The host gives every launch a new offset
 * (the generator's state: seed and offset, as CUDA's Philox).
 */
#define OR_RANDOM_OPS(X)                                                              \
  X(UNIFORM)   /* args[0] + u * (args[1] - args[0]), u in [0, 1) (floats) */       \
  X(NORMAL)    /* args[0] + args[1] * z, z standard normal (Box-Muller) */         \
  X(BERNOULLI) /* u < p ? 1 : 0; p = args[0], or `in`'s element if in_dtype is set */ \
  X(RANGE)     /* args[0].i + r mod n, n = args[1].i as unsigned (0: 2^64): [from, from + n) */

enum or_random_op {
#define OR_RANDOM_ENUM(name) OR_RANDOM_##name,
  OR_RANDOM_OPS(OR_RANDOM_ENUM)
#undef OR_RANDOM_ENUM
  OR_RANDOM_COUNT
};

typedef struct or_random {
  uint32_t op;       /* enum or_random_op */
  uint32_t dtype;    /* out0's */
  uint32_t ndim;     /* 0..OR_MAX_DIMS, logical order (dimension 0 outermost) */
  uint32_t in_dtype; /* BERNOULLI with a probability tensor: its (floating, so nonzero) dtype, else 0 */
  uint64_t seed;
  uint64_t offset;
  int64_t sizes[OR_MAX_DIMS];
  uint64_t data[2];                /* out0, in (probabilities) */
  int64_t strides[2][OR_MAX_DIMS]; /* bytes */
  or_scalar args[OR_MAX_ARGS];
} or_random;

OR_STATIC_ASSERT(offsetof(or_random, data) == 32 + 8 * OR_MAX_DIMS, "or_random.data");
OR_STATIC_ASSERT(sizeof(or_random) == 48 + 24 * OR_MAX_DIMS + 8 * OR_MAX_ARGS, "or_random size");

/*
 * The `softmax` kernel: softmax-like ops along lines, on an or_reduce block
 * laid out as for scans (dimension 0 the line, nreduce 1) whose `op` is one
 * of these. Operands: out0 the result (for LOGSUMEXP, one element per line:
 * its stride along the line is 0); `in` the input (forward) or the gradient
 * (backward); out1 the forward's output y (backward ops, read), or
 * SOFTMAX_LOGSUMEXP's log-sum-exp (one element per line, written).
 */
#define OR_SOFTMAX_OPS(X)                                                   \
  X(SOFTMAX)              /* exp(x - max) / sum(exp(x - max)) */           \
  X(LOG_SOFTMAX)          /* (x - max) - log(sum(exp(x - max))) */         \
  X(SOFTMAX_BACKWARD)     /* y * (g - sum(g * y)) */                       \
  X(LOG_SOFTMAX_BACKWARD) /* g - exp(y) * sum(g) */                       \
  X(LOGSUMEXP)            /* log(sum(exp(x - m))) + m, m the max (0 if +-inf), \
                             written to out0's first element of the line */  \
  X(SOFTMAX_LOGSUMEXP)    /* SOFTMAX into out0 and, from the same maximum and \
                             sum, LOGSUMEXP's value into out1 (attention) */

enum or_softmax_op {
#define OR_SOFTMAX_ENUM(name) OR_SOFTMAX_##name,
  OR_SOFTMAX_OPS(OR_SOFTMAX_ENUM)
#undef OR_SOFTMAX_ENUM
  OR_SOFTMAX_COUNT
};

/* ---- pooling (`pool` kernel) ----
 *
 * 2-d max and average pooling and their backward ops over `planes`
 * contiguous planes (N * C of them): inputs height x width, outputs
 * out_height x out_width, every operand row-major and dense. Each output
 * visits its window in CPU's order, so values, indices and sums are CPU's:
 * a candidate takes the maximum when it is greater or NaN (so the first of
 * equal maxima, the last NaN); an average sums the window's inputs in the
 * compute type (`dtype`: float32, float64 or int64, which truncates) and
 * divides by `divisor` if nonzero, else by the window's size inside the
 * padded input (count_include_pad) or inside the input. Planes are
 * independent: workers split them.
 *
 * in:   MAX, AVG: the input; backward ops: the output's gradient.
 * out0: MAX, AVG: the output; backward ops: the input's gradient (written
 *       whole: zeroed, then each output's gradient added in output order).
 * out1: MAX: each output's index into its input plane (int64, written);
 *       MAX_BACKWARD: those indices (read; one outside the plane stops the
 *       kernel).
 *
 * The same windows serve convolution's im2col and col2im, whose column
 * planes hold kernel[0] * kernel[1] * out_height * out_width elements
 * (window position major, then output row, then output column):
 * IM2COL:  in: the image planes; out0: the column planes (written: each
 *          window element, or 0 where it falls in the padding); any dtype
 *          of 2, 4 or 8 bytes (a copy).
 * COL2IM:  in: the column planes; out0: the image planes (written whole:
 *          zeroed, then each column element added to the image element it
 *          was read from, window positions in order); float32 or float64.
 *
 * And the three transforms of a 3 x 3, stride 1 convolution computed as
 * Winograd's F(2x2, 3x3), float32 only (kernel 3 x 3, stride and dilation 1;
 * anything else traps). The convolution's output is cut into 2 x 2 tiles,
 * out_height x out_width of them per plane (`tiles` = their product), each
 * the product of a 4 x 4 input patch and the kernel in a transformed space
 * of 16 elements xi = 4 i + j, where it is 16 independent matrix products
 * over channels (the caller's GEMM):
 * WINOGRAD_WEIGHT: in: kernels, `planes` (O * C) planes of 3 x 3; out0: (16,
 *          planes): element xi of plane q at xi * planes + q, U = G g G^T
 *          with G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1].
 * WINOGRAD_WEIGHT_ROTATED: the same for each kernel rotated by 180 degrees
 *          (the input gradient's kernel).
 * The transformed operand of WINOGRAD_INPUT, _OUTPUT and _GRAD is (16,
 * channels, N, tiles) with its 16 points `point_stride` elements apart (at
 * least planes * tiles; the caller pads it so that the 16 rows a tile row
 * writes or reads do not share a cache set).
 * WINOGRAD_INPUT: in: image planes of height x width, `planes` = N *
 *          `channels`; out0: (16, channels, N, tiles), the patch of tile
 *          (ty, tx) (image rows 2 ty - padding[0] + 0..3, columns 2 tx -
 *          padding[1] + 0..3, 0 outside the image) as V = B^T d B with B^T =
 *          [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
 * WINOGRAD_OUTPUT: in: the products, (16, channels, N, tiles); out0: output
 *          planes of height x width (`planes` = N * channels, out_height =
 *          (height + 1) / 2, out_width = (width + 1) / 2), each tile's Y = A^T m
 *          A with A^T = [1 1 1 0; 0 1 -1 -1] (written whole).
 * The weight gradient runs the adjoints of WINOGRAD_OUTPUT and _WEIGHT:
 * WINOGRAD_GRAD: in: the output's gradient, planes as WINOGRAD_OUTPUT's
 *          out0; out0: (16, channels, N, tiles), each 2 x 2 tile dY (0 beyond
 *          the plane's edges) as A dY A^T.
 * WINOGRAD_WEIGHT_GRAD: in: (16, planes), the gradient of each kernel's U
 *          (summed over tiles: the caller's GEMM); out0: `planes` planes of
 *          3 x 3, G^T dU G.
 * The transforms subtract patch elements, so an infinite input makes NaN
 * where the direct sum is +-inf; these recompute each NaN element of a
 * result as the direct sum (finite elements are left alone):
 * WINOGRAD_FIXUP: out0: the output, `planes` = N x O planes of out_height x
 *          out_width (samples = N); in: the input, N x `channels` planes of
 *          height x width, zero-padded by `padding`; out1: the kernels (O,
 *          channels, 3, 3), read.
 * WINOGRAD_FIXUP_ROTATED: the same with out1 the kernels (channels, O, 3,
 *          3) rotated by 180 degrees (the input gradient's convolution).
 * WINOGRAD_WEIGHT_GRAD_FIXUP: out0: the weight gradient, `planes` = O x
 *          `channels` planes of 3 x 3; in: the input as for FIXUP (samples =
 *          N); out1: the output's gradient, N x O planes of out_height x
 *          out_width, read.
 */
#define OR_POOL_OPS(X)         \
  X(MAX)                       \
  X(AVG)                       \
  X(MAX_BACKWARD)              \
  X(AVG_BACKWARD)              \
  X(IM2COL)                    \
  X(COL2IM)                    \
  X(WINOGRAD_WEIGHT)           \
  X(WINOGRAD_WEIGHT_ROTATED)   \
  X(WINOGRAD_INPUT)            \
  X(WINOGRAD_OUTPUT)           \
  X(WINOGRAD_GRAD)             \
  X(WINOGRAD_WEIGHT_GRAD)      \
  X(WINOGRAD_FIXUP)            \
  X(WINOGRAD_FIXUP_ROTATED)    \
  X(WINOGRAD_WEIGHT_GRAD_FIXUP)

enum or_pool_op {
#define OR_POOL_ENUM(name) OR_POOL_##name,
  OR_POOL_OPS(OR_POOL_ENUM)
#undef OR_POOL_ENUM
  OR_POOL_COUNT
};

#define OR_POOL_IN 0
#define OR_POOL_OUT0 1
#define OR_POOL_OUT1 2
#define OR_POOL_OPERANDS 3

typedef struct or_pool {
  uint32_t op;    /* enum or_pool_op */
  uint32_t dtype; /* of in and out0: OR_F32, OR_F64 or OR_I64 (IM2COL: any) */
  uint32_t count_include_pad;
  uint32_t channels; /* WINOGRAD_INPUT, _OUTPUT, _GRAD: planes per sample; fix-ups: the input's */
  int64_t planes, height, width, out_height, out_width;
  int64_t kernel[2], stride[2], padding[2], dilation[2];
  int64_t divisor; /* AVG: the divisor_override, or 0 */
  int64_t samples;      /* the WINOGRAD fix-ups: N */
  int64_t point_stride; /* WINOGRAD_INPUT, _OUTPUT, _GRAD: between the transformed operand's 16 points */
  uint64_t data[OR_POOL_OPERANDS];
} or_pool;

/*
 * The normalization kernel (`norm`), float32: one launch for what the
 * composites of layer and batch normalization ran as five to nine. A group
 * is a row of layer norm (`length` contiguous elements; `planes` 1) or a
 * channel of batch norm (`planes` runs of `length` contiguous elements,
 * `plane_stride` elements apart, channel c's first at c * length). Workers
 * split the groups; each group is computed in one fixed order, with every
 * step rounded to float32 as the composites round it (their sums may add in
 * another order):
 * LAYER_FORWARD: in0 x, in1 weight (length elements, or 0), in2 bias (or 0);
 *          out0 y, out1 mean and out2 rstd (one per row). The row's mean and
 *          biased variance as the VAR reduction folds a contiguous row in
 *          one pass (float64, chunks merged); rstd = 1 / sqrt(var + eps);
 *          y = x * rstd + (rstd * -mean), then y * weight + bias.
 * LAYER_BACKWARD: in0 grad, in1 x, in2 weight (or 0), in3 mean, in4 rstd;
 *          out0 the input's gradient: with xhat = x * rstd + (rstd * -mean),
 *          gw = grad * weight, a = mean(gw) and b = mean(gw * xhat) (summed
 *          in float64), xhat * -(b * rstd) + (gw * rstd + -(a * rstd)).
 * LAYER_PARAMS: in0 grad, in1 x, in3 mean, in4 rstd; out0 the weight's
 *          gradient, the sum over rows of grad * xhat (or 0: not wanted), out1
 *          the bias's, the sum of grad (or 0), per column, summed in float64
 *          down the rows in order; workers split the columns, not the rows.
 * BATCH_STATS: in0 grad, in1 x, in3 mean (one per channel); out0 the sum of
 *          grad and out1 the sum of grad * (x - mean), per channel (summed
 *          in float64, plane by plane).
 * BATCH_BACKWARD: in0 grad, in1 x, in2 scale, in3 mean, in4 projection, in5
 *          shift (one each per channel); out0 (x - mean) * projection +
 *          (grad * scale + shift).
 */
#define OR_NORM_OPS(X) \
  X(LAYER_FORWARD)     \
  X(LAYER_BACKWARD)    \
  X(LAYER_PARAMS)      \
  X(BATCH_STATS)       \
  X(BATCH_BACKWARD)

enum or_norm_op {
#define OR_NORM_ENUM(name) OR_NORM_##name,
  OR_NORM_OPS(OR_NORM_ENUM)
#undef OR_NORM_ENUM
  OR_NORM_COUNT
};

#define OR_NORM_OUT0 0
#define OR_NORM_OUT1 1
#define OR_NORM_OUT2 2
#define OR_NORM_IN0 3
#define OR_NORM_IN1 4
#define OR_NORM_IN2 5
#define OR_NORM_IN3 6
#define OR_NORM_IN4 7
#define OR_NORM_IN5 8
#define OR_NORM_OPERANDS 9

typedef struct or_norm {
  uint32_t op; /* enum or_norm_op */
  uint32_t reserved;
  int64_t groups, length, planes, plane_stride;
  double eps; /* LAYER_FORWARD */
  uint64_t data[OR_NORM_OPERANDS];
} or_norm;

OR_STATIC_ASSERT(offsetof(or_norm, data) == 48 && sizeof(or_norm) == 48 + 8 * OR_NORM_OPERANDS, "or_norm layout");

/*
 * The `nll_loss` kernel: the negative log-likelihood of `samples` x `rows`
 * rows of `classes` values (nll_loss, so cross_entropy with class indices;
 * nll_loss2d's rows are a sample's spatial positions), on one worker. Each
 * row's target t counts unless it is `ignore_index`, with weight w =
 * weight[t] (1 without a weight).
 *
 * Forward: each counted row's loss -w x[t] (0 for a row that does not
 * count), written per row (reduction NONE), or summed in row order in
 * float64 (SUM; MEAN then divides by the sum of the counted rows' weights);
 * total_weight is that sum of weights (0 for NONE), as CPU's nll_loss.
 * Backward: grad_input (zeroed by the caller) gets -w g at each counted
 * row's class, g the row's grad_output (NONE), the one grad_output (SUM) or
 * the one grad_output over total_weight (MEAN).
 *
 * A target outside [0, classes) that is not ignore_index traps (as CUDA's
 * device-side assert); the host names it. Float operands may be of any
 * float dtype each, targets of any integer dtype.
 */
#define OR_NLL_INPUT 0  /* forward: the log-probabilities; backward: grad_input (rows x classes) */
#define OR_NLL_TARGET 1 /* rows */
#define OR_NLL_WEIGHT 2 /* classes, or no pointer (0): every class weighs 1 */
#define OR_NLL_OUT 3    /* forward: output; backward: grad_output (rows for NONE, else one value) */
#define OR_NLL_TOTAL 4  /* total_weight, one value */
#define OR_NLL_OPERANDS 5

/* at::Reduction's values */
#define OR_NLL_NONE 0
#define OR_NLL_MEAN 1
#define OR_NLL_SUM 2

typedef struct or_nll {
  uint32_t backward;
  uint32_t reduction; /* OR_NLL_NONE, OR_NLL_MEAN or OR_NLL_SUM */
  int64_t samples, rows, classes, ignore_index;
  uint32_t dtypes[OR_NLL_OPERANDS];
  uint32_t reserved;
  uint64_t data[OR_NLL_OPERANDS];
  int64_t sample_strides[OR_NLL_OPERANDS]; /* bytes (input, target, out) */
  int64_t row_strides[OR_NLL_OPERANDS];    /* bytes (input, target, out) */
  int64_t class_strides[OR_NLL_OPERANDS];  /* bytes (input, weight) */
} or_nll;

OR_STATIC_ASSERT(offsetof(or_nll, data) == 64 && sizeof(or_nll) == 64 + 32 * OR_NLL_OPERANDS, "or_nll layout");

#ifdef __cplusplus
} /* namespace openreg::engine */
#endif

#endif /* OPENREG_ENGINE_H */
