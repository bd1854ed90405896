/*
 * Losses as kernels of their own: nll_loss forward and backward, of rows
 * and of spatial positions (see openreg_engine.h). As ATen composites they
 * took a dozen launches each (comparisons, selects, a gather, sums, a
 * scatter); a classifier's step pays for them every time, so they are one
 * launch here.
 */
#include "dtype.h"

/* Operand k's address for row i of sample s (byte strides). */
ALWAYS_INLINE char *nll_at(const or_nll *p, uint32_t k, int64_t s, int64_t i) {
  return device_ptr(p->data[k]) + s * p->sample_strides[k] + i * p->row_strides[k];
}

/* A row's target, -1 when it does not count; traps when it is out of range. */
ALWAYS_INLINE int64_t nll_target(const or_nll *p, int64_t s, int64_t i) {
  const int64_t t = load_I64(nll_at(p, OR_NLL_TARGET, s, i), p->dtypes[OR_NLL_TARGET]);
  if (t == p->ignore_index) {
    return -1;
  }
  if (t < 0 || t >= p->classes) {
    TRAP(); /* the host reports a target out of range */
  }
  return t;
}

ALWAYS_INLINE double nll_weight(const or_nll *p, int64_t t) {
  if (p->data[OR_NLL_WEIGHT] == 0) {
    return 1.0;
  }
  return load_F64(device_ptr(p->data[OR_NLL_WEIGHT]) + t * p->class_strides[OR_NLL_WEIGHT], p->dtypes[OR_NLL_WEIGHT]);
}

static void nll_forward(const or_nll *p) {
  double sum = 0.0, weights = 0.0;
  for (int64_t s = 0; s < p->samples; s++) {
    for (int64_t i = 0; i < p->rows; i++) {
      const int64_t t = nll_target(p, s, i);
      double loss = 0.0;
      if (t >= 0) {
        const double w = nll_weight(p, t);
        const char *x = nll_at(p, OR_NLL_INPUT, s, i) + t * p->class_strides[OR_NLL_INPUT];
        loss = -w * load_F64(x, p->dtypes[OR_NLL_INPUT]);
        weights += w;
      }
      if (p->reduction == OR_NLL_NONE) {
        store_F64(nll_at(p, OR_NLL_OUT, s, i), p->dtypes[OR_NLL_OUT], loss);
      } else {
        sum += loss;
      }
    }
  }
  char *out = device_ptr(p->data[OR_NLL_OUT]);
  char *total = device_ptr(p->data[OR_NLL_TOTAL]);
  if (p->reduction == OR_NLL_NONE) {
    store_F64(total, p->dtypes[OR_NLL_TOTAL], 0.0);
    return;
  }
  store_F64(total, p->dtypes[OR_NLL_TOTAL], weights);
  store_F64(out, p->dtypes[OR_NLL_OUT], p->reduction == OR_NLL_MEAN ? sum / weights : sum);
}

static void nll_backward(const or_nll *p) {
  double g = 0.0; /* the one grad_output of a reduced loss, over total_weight for MEAN */
  if (p->reduction != OR_NLL_NONE) {
    g = load_F64(device_ptr(p->data[OR_NLL_OUT]), p->dtypes[OR_NLL_OUT]);
    if (p->reduction == OR_NLL_MEAN) {
      g = g / load_F64(device_ptr(p->data[OR_NLL_TOTAL]), p->dtypes[OR_NLL_TOTAL]);
    }
  }
  for (int64_t s = 0; s < p->samples; s++) {
    for (int64_t i = 0; i < p->rows; i++) {
      const int64_t t = nll_target(p, s, i);
      if (t < 0) {
        continue;
      }
      const double gi = p->reduction == OR_NLL_NONE ? load_F64(nll_at(p, OR_NLL_OUT, s, i), p->dtypes[OR_NLL_OUT]) : g;
      char *at = nll_at(p, OR_NLL_INPUT, s, i) + t * p->class_strides[OR_NLL_INPUT];
      store_F64(at, p->dtypes[OR_NLL_INPUT], nll_weight(p, t) * -gi);
    }
  }
}

EXPORT(nll_loss) void nll_loss(const or_nll *params, int32_t worker, int32_t workers) {
  check_worker(worker, workers);
  if (worker > 0) {
    return; /* one worker: the sums run in row order */
  }
  const or_nll part = *params;
  const or_nll *p = &part;
  if (p->samples < 0 || p->rows < 0 || p->classes < 0 || p->reduction > OR_NLL_SUM) {
    TRAP();
  }
  for (uint32_t k = 0; k < OR_NLL_OPERANDS; k++) {
    (void)dtype_size(p->dtypes[k]); /* traps on an unknown dtype */
  }
  if (p->backward) {
    nll_backward(p);
  } else {
    nll_forward(p);
  }
}
