/*
 * The fused optimizers of `openreg.engine`: one kernel, `optim_list`, that
 * runs one step of torch's fused Adam, AdamW, Adagrad or SGD (`_fused_adam_`,
 * `_fused_adamw_`, `_fused_adagrad_`, `_fused_sgd_`, which torch.optim calls
 * with fused=True) over a list of parameters in one pass over each
 * parameter's tensors (see or_optim_list in openreg_engine.h). The unfused forms run as
 * _foreach_ ops, one pass over memory per op.
 *
 * Arithmetic: that of ATen's CPU fused kernels (FusedAdamKernel.cpp,
 * FusedAdagradKernel.cpp). The step's scalars (bias corrections, step size,
 * Adagrad's decayed rate) are computed in double from the item's step count;
 * each element is computed in the compute type (float32 for float16 and
 * bfloat16) with those scalars rounded to it. Where the CPU kernels add a
 * product they are fused multiply-adds (relaxed SIMD's, which the runtime runs
 * fused on every host), as the CPU kernels compile on an x86-64 host with FMA
 * and as the unfused steps' ops compute them (add with alpha, addcmul, lerp):
 * weight decay's g + wd * p, exp_avg's lerp, exp_avg_sq's
 * beta2 * v + ((1 - beta2) * g) * g, Adagrad's sum + g * g, SGD's
 * momentum * buf + (1 - dampening) * g (the second product fused), its
 * nesterov g + momentum * buf and its p - lr * g; every other operation
 * rounds once. Every element
 * goes through the same vector function, the last partial vector of a
 * worker's range through a zero-padded copy, so an element's result does not
 * depend on how the workers split the list.
 *
 * Speed (one worker, Zen 4): AdamW about 0.95 ns per element, bound by its
 * two divisions and square root per element on 128-bit vectors (the seven
 * _foreach_ passes of the unfused step take 2.2-2.7), Adagrad 0.6, SGD with
 * momentum 0.4.
 *
 * Compiled for wasm32 and wasm64 with the rest of the engine (build.rs).
 */
#include "dtype.h"

#pragma STDC FP_CONTRACT OFF
#pragma clang attribute push(__attribute__((target("relaxed-simd"))), apply_to = function)

/* An item's step: its scalars, each splat in the compute type. */
typedef struct optim_consts {
  v128_t scale;     /* grad_scale */
  v128_t sign;      /* -1 to maximize, else 1 */
  v128_t wd;        /* weight_decay (the shapes that add it to the gradient) */
  v128_t factor;    /* Adam, AdamW: the parameter's factor 1 - lr * weight_decay (AdamW), else 1 */
  v128_t w;         /* Adam: exp_avg's lerp weight 1 - beta1, or that weight - 1 (`from_grad`) */
  v128_t from_grad; /* Adam: all ones where the lerp runs from the gradient (weight >= 0.5) */
  v128_t beta2, c2; /* beta2, 1 - beta2 */
  v128_t bc2_sqrt;  /* sqrt(1 - beta2^step) */
  v128_t eps;
  v128_t rate; /* Adam: -lr / (1 - beta1^step); Adagrad: lr / (1 + (step - 1) * lr_decay); SGD: -lr */
  v128_t momentum, damped; /* SGD: momentum, 1 - dampening */
  v128_t first;            /* SGD: all ones on the first step (the buffer starts as the gradient) */
  v128_t nesterov;         /* SGD: all ones for nesterov */
} optim_consts;

/* What a loop computes, fixed for the whole loop so that its body has no
 * branch (Cranelift spills around every one): the optimizer family, whether
 * weight decay adds to the gradient (Adam, Adagrad, SGD) and whether the
 * gradient is unscaled (and stored back), and `extra`: for Adam amsgrad's
 * running maximum, for SGD a momentum buffer. */
enum { FAMILY_ADAM, FAMILY_ADAGRAD, FAMILY_SGD };

typedef struct optim_shape {
  int family, coupled, scaled, extra;
} optim_shape;

/* One vector of a step: p the parameter, g the gradient, s0..s2 the states.
 * V is wasm_f32x4 or wasm_f64x2. */
#define OR_DEFINE_OPTIM_STEP(NAME, V)                                                              \
  ALWAYS_INLINE void NAME(const optim_consts *k, optim_shape shape, v128_t *p, v128_t *g, v128_t *s0, \
                          v128_t *s1, v128_t *s2) {                                                  \
    v128_t param = *p, grad = *g;                                                                    \
    if (shape.scaled) {                                                                              \
      grad = V##_div(grad, k->scale);                                                                \
      *g = grad;                                                                                     \
    }                                                                                                \
    grad = V##_mul(grad, k->sign);                                                                   \
    if (shape.coupled) {                                                                             \
      grad = V##_relaxed_madd(param, k->wd, grad);                                                   \
    }                                                                                                \
    if (shape.family == FAMILY_SGD) {                                                                \
      if (shape.extra) {                                                                             \
        const v128_t later = V##_relaxed_madd(grad, k->damped, V##_mul(*s0, k->momentum));             \
        const v128_t buf = wasm_v128_bitselect(grad, later, k->first);                               \
        *s0 = buf;                                                                                   \
        grad = wasm_v128_bitselect(V##_relaxed_madd(buf, k->momentum, grad), buf, k->nesterov);       \
      }                                                                                              \
      *p = V##_relaxed_madd(grad, k->rate, param);                                                   \
      return;                                                                                        \
    }                                                                                                \
    if (shape.family == FAMILY_ADAGRAD) {                                                            \
      const v128_t sum = V##_relaxed_madd(grad, grad, *s0);                                          \
      *s0 = sum;                                                                                     \
      *p = V##_sub(param, V##_div(V##_mul(k->rate, grad), V##_add(V##_sqrt(sum), k->eps)));          \
      return;                                                                                        \
    }                                                                                                \
    param = V##_mul(param, k->factor);                                                               \
    /* CPU's lerp: exp_avg + w (g - exp_avg), or g + (w - 1) (g - exp_avg) */                        \
    const v128_t m = V##_relaxed_madd(k->w, V##_sub(grad, *s0), wasm_v128_bitselect(grad, *s0, k->from_grad)); \
    v128_t v = V##_relaxed_madd(V##_mul(k->c2, grad), grad, V##_mul(*s1, k->beta2));                  \
    *s0 = m;                                                                                         \
    *s1 = v;                                                                                         \
    if (shape.extra) {                                                                               \
      v = V##_max(*s2, v);                                                                           \
      *s2 = v;                                                                                       \
    }                                                                                                \
    const v128_t denom = V##_add(V##_div(V##_sqrt(v), k->bc2_sqrt), k->eps);                          \
    *p = V##_add(param, V##_div(V##_mul(k->rate, m), denom));                                        \
  }

OR_DEFINE_OPTIM_STEP(step_f32x4, wasm_f32x4)
OR_DEFINE_OPTIM_STEP(step_f64x2, wasm_f64x2)

/* A vector of `dtype` at x in the compute type, and back. */
ALWAYS_INLINE v128_t load_vec(const char *x, uint32_t dtype) {
  switch (dtype) {
  case OR_F16:
    return f16x4_to_f32x4(wasm_u32x4_extend_low_u16x8(wasm_v128_load64_zero(x)));
  case OR_BF16:
    return wasm_i32x4_shl(wasm_u32x4_extend_low_u16x8(wasm_v128_load64_zero(x)), 16);
  default:
    return wasm_v128_load(x);
  }
}

ALWAYS_INLINE void store_vec(char *x, v128_t v, uint32_t dtype) {
  switch (dtype) {
  case OR_F16:
    v = f32x4_to_f16x4(v);
    break;
  case OR_BF16:
    v = f32x4_to_bf16x4(v);
    break;
  default:
    wasm_v128_store(x, v);
    return;
  }
  /* each lane holds 0..0xffff: the saturating narrow keeps it */
  wasm_v128_store64_lane(x, wasm_u16x8_narrow_i32x4(v, v), 0);
}

/* How many of an item's states a step of `shape` reads and writes. */
ALWAYS_INLINE int states_of(optim_shape shape) {
  switch (shape.family) {
  case FAMILY_ADAM:
    return shape.extra ? 3 : 2;
  case FAMILY_ADAGRAD:
    return 1;
  default:
    return shape.extra ? 1 : 0;
  }
}

/* One vector's elements at byte offset `at` of the item's tensors x[0..4]
 * (parameter, gradient, states): loaded, stepped, stored. */
ALWAYS_INLINE void step_at(const optim_consts *k, optim_shape shape, char *const x[5], int64_t at, uint32_t dtype) {
  const int states = states_of(shape);
  const v128_t zero = wasm_i32x4_splat(0);
  v128_t p = load_vec(x[0] + at, dtype), g = load_vec(x[1] + at, dtype);
  v128_t s0 = states > 0 ? load_vec(x[2] + at, dtype) : zero;
  v128_t s1 = states > 1 ? load_vec(x[3] + at, dtype) : zero;
  v128_t s2 = states > 2 ? load_vec(x[4] + at, dtype) : zero;
  if (dtype == OR_F64) {
    step_f64x2(k, shape, &p, &g, &s0, &s1, &s2);
  } else {
    step_f32x4(k, shape, &p, &g, &s0, &s1, &s2);
  }
  store_vec(x[0] + at, p, dtype);
  if (shape.scaled) {
    store_vec(x[1] + at, g, dtype);
  }
  if (states > 0) {
    store_vec(x[2] + at, s0, dtype);
  }
  if (states > 1) {
    store_vec(x[3] + at, s1, dtype);
  }
  if (states > 2) {
    store_vec(x[4] + at, s2, dtype);
  }
}

/* `n` elements of an item's tensors x[0..4], one vector at a time; the last
 * partial vector through zero-padded copies. The scalars and addresses are
 * copied into locals first: read through their pointers, every vector would
 * reload them from linear memory (wasm stores may alias them). */
ALWAYS_INLINE void step_run(const optim_consts *consts, optim_shape shape, char *const at[5], int64_t n,
                            uint32_t dtype) {
  const optim_consts c = *consts;
  char *const x[5] = {at[0], at[1], at[2], at[3], at[4]};
  const int64_t size = (int64_t)dtype_size(dtype);
  const int64_t lanes = dtype == OR_F64 ? 2 : 4;
  int64_t i = 0;
  /* two vectors per iteration: the loop's own work (the epoch check, the
   * constants reloaded from the stack across it) is shared by both */
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    step_at(&c, shape, x, i * size, dtype);
    step_at(&c, shape, x, (i + lanes) * size, dtype);
  }
  for (; i + lanes <= n; i += lanes) {
    step_at(&c, shape, x, i * size, dtype);
  }
  if (i < n) {
    const int64_t bytes = (n - i) * size;
    const int tensors = 2 + states_of(shape);
    char pad[5][16] __attribute__((aligned(16)));
    char *const y[5] = {pad[0], pad[1], pad[2], pad[3], pad[4]};
    for (int t = 0; t < tensors; t++) {
      wasm_v128_store(pad[t], wasm_i32x4_splat(0));
      __builtin_memcpy(pad[t], x[t] + i * size, (usize)bytes);
    }
    step_at(&c, shape, y, 0, dtype);
    for (int t = 0; t < tensors; t++) {
      __builtin_memcpy(x[t] + i * size, pad[t], (usize)bytes);
    }
  }
}

/* The float32 loops, one per shape (the common case, and the fastest), and
 * one loop per other dtype that tests the shape as it goes. */
#define OR_DEFINE_OPTIM_F32(NAME, FAMILY, COUPLED, SCALED, EXTRA)                          \
  NOINLINE static void NAME(const optim_consts *k, char *const x[5], int64_t n) {          \
    const optim_shape shape = {FAMILY, COUPLED, SCALED, EXTRA};                            \
    step_run(k, shape, x, n, OR_F32);                                                      \
  }
OR_DEFINE_OPTIM_F32(adam_f32, FAMILY_ADAM, 0, 0, 0)
OR_DEFINE_OPTIM_F32(adam_f32_a, FAMILY_ADAM, 0, 0, 1)
OR_DEFINE_OPTIM_F32(adam_f32_s, FAMILY_ADAM, 0, 1, 0)
OR_DEFINE_OPTIM_F32(adam_f32_sa, FAMILY_ADAM, 0, 1, 1)
OR_DEFINE_OPTIM_F32(adam_f32_c, FAMILY_ADAM, 1, 0, 0)
OR_DEFINE_OPTIM_F32(adam_f32_ca, FAMILY_ADAM, 1, 0, 1)
OR_DEFINE_OPTIM_F32(adam_f32_cs, FAMILY_ADAM, 1, 1, 0)
OR_DEFINE_OPTIM_F32(adam_f32_csa, FAMILY_ADAM, 1, 1, 1)
OR_DEFINE_OPTIM_F32(adagrad_f32, FAMILY_ADAGRAD, 0, 0, 0)
OR_DEFINE_OPTIM_F32(adagrad_f32_s, FAMILY_ADAGRAD, 0, 1, 0)
OR_DEFINE_OPTIM_F32(adagrad_f32_c, FAMILY_ADAGRAD, 1, 0, 0)
OR_DEFINE_OPTIM_F32(adagrad_f32_cs, FAMILY_ADAGRAD, 1, 1, 0)
OR_DEFINE_OPTIM_F32(sgd_f32, FAMILY_SGD, 0, 0, 0)
OR_DEFINE_OPTIM_F32(sgd_f32_m, FAMILY_SGD, 0, 0, 1)
OR_DEFINE_OPTIM_F32(sgd_f32_s, FAMILY_SGD, 0, 1, 0)
OR_DEFINE_OPTIM_F32(sgd_f32_sm, FAMILY_SGD, 0, 1, 1)
OR_DEFINE_OPTIM_F32(sgd_f32_c, FAMILY_SGD, 1, 0, 0)
OR_DEFINE_OPTIM_F32(sgd_f32_cm, FAMILY_SGD, 1, 0, 1)
OR_DEFINE_OPTIM_F32(sgd_f32_cs, FAMILY_SGD, 1, 1, 0)
OR_DEFINE_OPTIM_F32(sgd_f32_csm, FAMILY_SGD, 1, 1, 1)

typedef void (*optim_loop)(const optim_consts *k, char *const x[5], int64_t n);
/* by family * 8 + coupled * 4 + scaled * 2 + extra (Adagrad has no extra) */
static const optim_loop F32_LOOPS[24] = {
    adam_f32,    adam_f32_a, adam_f32_s,    adam_f32_sa, adam_f32_c,    adam_f32_ca, adam_f32_cs,    adam_f32_csa,
    adagrad_f32, 0,          adagrad_f32_s, 0,           adagrad_f32_c, 0,           adagrad_f32_cs, 0,
    sgd_f32,     sgd_f32_m,  sgd_f32_s,     sgd_f32_sm,  sgd_f32_c,     sgd_f32_cm,  sgd_f32_cs,     sgd_f32_csm,
};

#define OR_DEFINE_OPTIM_OTHER(NAME, DTYPE)                                                      \
  NOINLINE static void NAME(const optim_consts *k, optim_shape shape, char *const x[5], int64_t n) { \
    step_run(k, shape, x, n, DTYPE);                                                            \
  }
OR_DEFINE_OPTIM_OTHER(run_f64, OR_F64)
OR_DEFINE_OPTIM_OTHER(run_f16, OR_F16)
OR_DEFINE_OPTIM_OTHER(run_bf16, OR_BF16)

/* A 0-dim device tensor's value (float32 or float64). */
static double read_scalar(uint64_t at, uint32_t dtype) {
  switch (dtype) {
  case OR_F32:
    return *(const float *)device_ptr(at);
  case OR_F64:
    return *(const double *)device_ptr(at);
  default:
    TRAP();
  }
}

ALWAYS_INLINE v128_t splat(double x, uint32_t dtype) {
  return dtype == OR_F64 ? wasm_f64x2_splat(x) : wasm_f32x4_splat((float)x);
}

/* The scalars of one item's step, its step count `step`. */
static void step_consts(optim_consts *k, const or_optim_head *p, double lr, double scale, double step) {
  const uint32_t dtype = p->dtype;
  k->scale = splat(scale, dtype);
  k->sign = splat(p->flags & OR_OPTIM_MAXIMIZE ? -1.0 : 1.0, dtype);
  k->wd = splat(p->weight_decay, dtype);
  if (p->kind == OR_OPTIM_SGD) {
    k->rate = splat(-lr, dtype);
    k->momentum = splat(p->momentum, dtype);
    k->damped = splat(1.0 - p->dampening, dtype);
    k->first = wasm_i32x4_splat(p->flags & OR_OPTIM_FIRST_STEP ? -1 : 0);
    k->nesterov = wasm_i32x4_splat(p->flags & OR_OPTIM_NESTEROV ? -1 : 0);
    return;
  }
  if (p->kind == OR_OPTIM_ADAGRAD) {
    k->eps = splat(p->eps, dtype);
    k->rate = splat(lr / (1.0 + (step - 1.0) * p->lr_decay), dtype);
    return;
  }
  k->factor = splat(p->kind == OR_OPTIM_ADAMW ? 1.0 - lr * p->weight_decay : 1.0, dtype);
  k->eps = splat(p->eps, dtype);
  const double bias_correction1 = 1.0 - m_pow_f64(p->beta1, step);
  const double bias_correction2 = 1.0 - m_pow_f64(p->beta2, step);
  k->rate = splat(-(lr / bias_correction1), dtype);
  k->bc2_sqrt = splat(__builtin_sqrt(bias_correction2), dtype);
  k->beta2 = splat(p->beta2, dtype);
  k->c2 = splat(1.0 - p->beta2, dtype);
  /* the weight as the compute type holds it; from the gradient, minus 1 in that type */
  const double w = dtype == OR_F64 ? 1.0 - p->beta1 : (double)(float)(1.0 - p->beta1);
  const int from_grad = !(__builtin_fabs(w) < 0.5);
  k->w = !from_grad ? splat(w, dtype)
         : dtype == OR_F64 ? wasm_f64x2_splat(w - 1.0)
                           : wasm_f32x4_splat((float)w - 1.0f);
  k->from_grad = wasm_i32x4_splat(from_grad ? -1 : 0);
}

EXPORT(optim_list) void optim_list(const or_optim_list *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  const or_optim_head head = params->head;
  const uint32_t dtype = head.dtype, flags = head.flags, items = head.items;
  if (head.kind >= OR_OPTIM_COUNT || items > OR_LIST_MAX || (flags & ~127u) != 0 ||
      (dtype != OR_F32 && dtype != OR_F64 && dtype != OR_F16 && dtype != OR_BF16)) {
    TRAP();
  }
  if ((flags & OR_OPTIM_FOUND_INF) && read_scalar(head.found_inf, head.scalar_dtypes[OR_OPTIM_INF]) == 1.0) {
    return; /* GradScaler found an inf or a NaN: the step is skipped */
  }
  const double lr =
      flags & OR_OPTIM_LR_TENSOR ? read_scalar(head.lr_tensor, head.scalar_dtypes[OR_OPTIM_LR]) : head.lr;
  const double scale =
      flags & OR_OPTIM_GRAD_SCALE ? read_scalar(head.grad_scale, head.scalar_dtypes[OR_OPTIM_SCALE]) : 1.0;
  const int family = head.kind == OR_OPTIM_ADAGRAD ? FAMILY_ADAGRAD : head.kind == OR_OPTIM_SGD ? FAMILY_SGD : FAMILY_ADAM;
  const optim_shape shape = {family, head.kind != OR_OPTIM_ADAMW && head.weight_decay != 0.0,
                             (flags & OR_OPTIM_GRAD_SCALE) != 0,
                             family == FAMILY_ADAM ? (flags & OR_OPTIM_AMSGRAD) != 0
                             : family == FAMILY_SGD ? head.momentum != 0.0
                                                    : 0};
  const int64_t size = (int64_t)dtype_size(dtype);
  int64_t lo, hi;
  list_part(&params->item[0].n, sizeof(or_optim_item), items, worker, workers, &lo, &hi);
  int64_t start = 0;
  for (uint32_t i = 0; i < items && start < hi; i++) {
    const or_optim_item *item = &params->item[i];
    const int64_t b = lo > start ? lo : start;
    const int64_t e = hi < start + item->n ? hi : start + item->n;
    if (b < e) {
      optim_consts k;
      const double step =
          head.kind == OR_OPTIM_SGD ? 0.0 : read_scalar(item->step, head.scalar_dtypes[OR_OPTIM_STEP]);
      step_consts(&k, &head, lr, scale, step);
      /* every tensor the step reads or writes was given (address 0 is the engine's own data) */
      const uint64_t given[5] = {item->param, item->grad, item->state[0], item->state[1], item->state[2]};
      for (int t = 0; t < 2 + states_of(shape); t++) {
        if (given[t] == 0) {
          TRAP();
        }
      }
      const uint64_t at = (uint64_t)((b - start) * size);
      char *const x[5] = {device_ptr(item->param + at), device_ptr(item->grad + at),
                          device_ptr(item->state[0] + at), device_ptr(item->state[1] + at),
                          device_ptr(item->state[2] + at)};
      if (dtype == OR_F32) {
        F32_LOOPS[shape.family * 8 + shape.coupled * 4 + shape.scaled * 2 + shape.extra](&k, x, e - b);
      } else if (dtype == OR_F64) {
        run_f64(&k, shape, x, e - b);
      } else if (dtype == OR_F16) {
        run_f16(&k, shape, x, e - b);
      } else {
        run_bf16(&k, shape, x, e - b);
      }
    }
    start += item->n;
  }
}

#pragma clang attribute pop
