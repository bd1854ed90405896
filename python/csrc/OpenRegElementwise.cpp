// The elementwise family on the device engine: arithmetic, comparisons,
// logical and bitwise ops, rounding, clamps, activations' building blocks,
// where, fill, the mean-squared-error loss. One entry per op:
//
//   - structured ops (ATen's meta builds the TensorIterator): an impl below
//     and one OPENREG_STRUCTURED line registering functional, in-place and
//     out= forms;
//   - ops ATen implements over a DispatchStub: the stub's PrivateUse1 entry
//     below (REGISTER_PRIVATEUSE1_DISPATCH) and one OPENREG_NATIVE line per
//     form, which runs ATen's own native function (at::native::abs_out, ...).
//
// Every impl ends in engine::launch_elementwise with an op of
// device-kernels/engine/openreg_engine.h.

#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Activation.h>
#include <ATen/native/Resize.h>
#include <ATen/native/Fill.h>
#include <ATen/native/Normalization.h>
#include <ATen/native/PointwiseOps.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/angle_native.h>
#include <ATen/ops/fill_native.h>
#include <ATen/ops/clamp_meta.h>
#include <ATen/ops/floor_divide_native.h>
#include <ATen/ops/glu_backward_native.h>
#include <ATen/ops/hardswish_backward_native.h>
#include <ATen/ops/hardswish_native.h>
#include <ATen/ops/huber_loss_backward_native.h>
#include <ATen/ops/huber_loss_native.h>
#include <ATen/ops/lshift_native.h>
#include <ATen/ops/rshift_native.h>
#include <ATen/ops/_prelu_kernel_native.h>
#include <ATen/ops/smooth_l1_loss_backward_native.h>
#include <ATen/ops/smooth_l1_loss_native.h>
#include <ATen/ops/hardtanh_backward_native.h>
#include <ATen/ops/hardtanh_native.h>
#include <ATen/ops/isnan_native.h>
#include <ATen/ops/logical_and_native.h>
#include <ATen/ops/logical_not_native.h>
#include <ATen/ops/logical_or_native.h>
#include <ATen/ops/logical_xor_native.h>
#include <ATen/ops/mse_loss_backward_native.h>
#include <ATen/ops/mse_loss_native.h>
#include <ATen/ops/nan_to_num_native.h>
#include <ATen/ops/polygamma_native.h>
#include <ATen/ops/relu_native.h>
#include <ATen/ops/remainder_native.h>
#include <ATen/ops/renorm_native.h>
#include <ATen/ops/rsub_native.h>
#include <ATen/ops/where_native.h>
#include <ATen/ops/zero_native.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegStructured.h"

namespace openreg::elementwise {
using namespace openreg::engine; // the engine's ops: OR_OP_ADD, ...
namespace {

using at::Tensor;
using at::TensorIteratorBase;
using c10::Scalar;
using engine::launch_elementwise;

bool is_integral(at::ScalarType t) {
  return at::isIntegralType(t, /*includeBool=*/true);
}

// ---- structured ops: impl(iter, the meta's arguments) ----

void add_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, const Scalar& alpha) {
  launch_elementwise(iter, OR_OP_ADD, {alpha});
}

void sub_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, const Scalar& alpha) {
  launch_elementwise(iter, OR_OP_ADD, {-alpha});
}

void mul_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&) {
  launch_elementwise(iter, OR_OP_MUL);
}

void div_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&) {
  launch_elementwise(iter, OR_OP_DIV);
}

void div_mode_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, std::optional<c10::string_view> mode) {
  if (!mode.has_value()) {
    launch_elementwise(iter, OR_OP_DIV);
  } else if (*mode == "trunc") {
    launch_elementwise(iter, OR_OP_DIV_TRUNC);
  } else {
    TORCH_CHECK(*mode == "floor", "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
                *mode, "'");
    launch_elementwise(iter, OR_OP_DIV_FLOOR);
  }
}

template <or_op Op>
void compare_scalar_impl(TensorIteratorBase& iter, const Tensor&, const Scalar&) {
  launch_elementwise(iter, Op);
}

template <or_op Op>
void binary_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&) {
  launch_elementwise(iter, Op);
}

template <or_op Op>
void unary_impl(TensorIteratorBase& iter, const Tensor&) {
  launch_elementwise(iter, Op);
}

void bitwise_not_impl(TensorIteratorBase& iter, const Tensor&) {
  // On bool, bitwise not is logical not; floats are refused by the op table.
  launch_elementwise(iter, iter.common_dtype() == at::kBool ? OR_OP_LOGICAL_NOT : OR_OP_BITWISE_NOT);
}

// A clamp bound as CPU applies it: NaN makes every element NaN; on integer
// tensors, a bound past the dtype's range on the side that would clamp
// everything raises, and one past the other side clamps nothing.
// A clamp bound for integer tensors, checked and brought into the dtype's
// range as CPU does.
Scalar clamp_bound(at::ScalarType dtype, const Scalar& bound, bool is_min) {
  Scalar effective = bound;
  if (is_integral(dtype) && dtype != at::kBool && bound.isIntegral(/*includeBool=*/false)) {
    const int64_t value = bound.toLong();
    AT_DISPATCH_INTEGRAL_TYPES(dtype, "clamp", [&] {
      const int64_t lo = std::numeric_limits<scalar_t>::lowest();
      const int64_t hi = std::numeric_limits<scalar_t>::max();
      TORCH_CHECK(is_min ? value <= hi : value >= lo, "Clamp ", is_min ? "min" : "max", " value ", value,
                  " is outside the representable range of ", c10::toString(dtype));
      effective = std::clamp(value, lo, hi);
    });
  }
  return effective;
}

template <bool IsMin>
void clamp_bound_impl(TensorIteratorBase& iter, const Tensor&, const Scalar& bound) {
  if (bound.isFloatingPoint() && std::isnan(bound.toDouble())) {
    iter.output(0).fill_(bound); // a NaN bound makes every element NaN, as on CPU
    return;
  }
  launch_elementwise(iter, IsMin ? OR_OP_CLAMP_MIN : OR_OP_CLAMP_MAX, {clamp_bound(iter.common_dtype(), bound, IsMin)});
}

// ATen's threshold metas build (out, x, other): out = x <= threshold ? value : other,
// with other = x for threshold and (x, other) = (self, grad_output) for its backward.
// As ATen's pow_Tensor_Scalar_out and its CPU kernel: exponent 0 is a fill and
// 1 a copy; for a floating result 2, 3, -2 and -1 are products and quotients
// (x * x, x * x * x, 1 / (x * x), 1 / x: 3 and -2 one engine op each), which
// give CPU's values bit for bit at a fraction of pow's cost (x.square() is
// pow(x, 2)). 0.5 is a sqrt for float32, float64 and bfloat16, as on CPU (-0
// stays -0 and -inf gives NaN, where pow would give 0 and inf); float16's
// stays a pow, as CPU's does, and so does an integer base with a float result
// (`arange(9) ** 0.5`), whose pow in double rounds to the same values.
void pow_scalar_impl(TensorIteratorBase& iter, const Tensor& base, const Scalar& exponent) {
  const Tensor& out = iter.output(0);
  if (!exponent.isComplex()) {
    const double e = exponent.toDouble();
    if (e == 0.0) {
      out.fill_(1);
      return;
    }
    if (e == 1.0) {
      out.copy_(base);
      return;
    }
    if (at::isFloatingType(out.scalar_type()) && base.scalar_type() == out.scalar_type()) {
      if (e == 2.0) {
        at::mul_out(const_cast<Tensor&>(out), base, base);
        return;
      }
      if ((e == 3.0 || e == -2.0) && out.scalar_type() != at::kBFloat16) {
        // one pass of the engine, in the compute type: float16's in float32,
        // rounded once, which CPU's powf gives for every half
        launch_elementwise(iter, e == 3.0 ? OR_OP_CUBE : OR_OP_RECIPROCAL_SQUARE);
        return;
      }
      if (e == 3.0 || e == -2.0) {
        // bfloat16's in two steps: CPU rounds it after each
        const Tensor square = at::mul(base, base);
        const_cast<Tensor&>(out).copy_(e == 3.0 ? square.mul_(base) : square.reciprocal_());
        return;
      }
      if (e == -1.0) {
        at::reciprocal_out(const_cast<Tensor&>(out), base);
        return;
      }
      if (e == 0.5 && (out.scalar_type() == at::kFloat || out.scalar_type() == at::kDouble ||
                       out.scalar_type() == at::kBFloat16)) {
        at::sqrt_out(const_cast<Tensor&>(out), base);
        return;
      }
      // -0.5 as CPU for float32 and float64: rsqrt, exactly (float16 and
      // bfloat16 take the pow, within their tolerance of CPU's own rounding)
      if (e == -0.5 && (out.scalar_type() == at::kFloat || out.scalar_type() == at::kDouble)) {
        at::rsqrt_out(const_cast<Tensor&>(out), base);
        return;
      }
    }
  }
  launch_elementwise(iter, OR_OP_POW_SCALAR, {exponent});
}

// pow(Scalar base, Tensor exponent) (`2 ** x`): as ATen's CPU kernel does, the
// tensor-tensor pow with the base as a wrapped CPU number, which the engine
// takes as a host scalar (the result type follows the wrapped-number rules).
Tensor pow_scalar_base(const Scalar& base, const Tensor& exponent) {
  openreg::count_op("aten::pow.Scalar", true);
  return at::pow(at::native::wrapped_scalar_tensor(base), exponent);
}

Tensor& pow_scalar_base_out(const Scalar& base, const Tensor& exponent, Tensor& out) {
  openreg::count_op("aten::pow.Scalar_out", true);
  return at::pow_out(out, at::native::wrapped_scalar_tensor(base), exponent);
}

void threshold_impl(TensorIteratorBase& iter, const Tensor&, const Scalar& threshold, const Scalar& value) {
  launch_elementwise(iter, OR_OP_THRESHOLD, {threshold, value});
}

void threshold_backward_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, const Scalar& threshold) {
  launch_elementwise(iter, OR_OP_THRESHOLD, {threshold, 0});
}

void lerp_scalar_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, const Scalar& weight) {
  launch_elementwise(iter, OR_OP_LERP_SCALAR, {weight});
}

void lerp_tensor_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, const Tensor&) {
  launch_elementwise(iter, OR_OP_LERP);
}

void addcmul_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, const Tensor&, const Scalar& value) {
  launch_elementwise(iter, OR_OP_ADDCMUL, {value});
}

void addcdiv_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, const Tensor&, const Scalar& value) {
  launch_elementwise(iter, OR_OP_ADDCDIV, {value});
}

void gelu_impl(TensorIteratorBase& iter, const Tensor&, c10::string_view approximate) {
  launch_elementwise(iter, approximate == "tanh" ? OR_OP_GELU_TANH : OR_OP_GELU);
}

void gelu_backward_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, c10::string_view approximate) {
  launch_elementwise(iter, approximate == "tanh" ? OR_OP_GELU_TANH_BACKWARD : OR_OP_GELU_BACKWARD);
}

void softplus_impl(TensorIteratorBase& iter, const Tensor&, const Scalar& beta, const Scalar& threshold) {
  launch_elementwise(iter, OR_OP_SOFTPLUS, {beta, threshold});
}

void softplus_backward_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, const Scalar& beta,
                            const Scalar& threshold) {
  launch_elementwise(iter, OR_OP_SOFTPLUS_BACKWARD, {beta, threshold});
}

void elu_impl(TensorIteratorBase& iter, const Tensor&, const Scalar& alpha, const Scalar& scale,
              const Scalar& input_scale) {
  launch_elementwise(iter, OR_OP_ELU, {alpha.toDouble() * scale.toDouble(), scale, input_scale});
}

void leaky_relu_impl(TensorIteratorBase& iter, const Tensor&, const Scalar& slope) {
  launch_elementwise(iter, OR_OP_LEAKY_RELU, {slope});
}

// The meta builds (out, self, grad_output).
void leaky_relu_backward_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, const Scalar& slope, bool) {
  launch_elementwise(iter, OR_OP_LEAKY_RELU_BACKWARD, {slope});
}

void elu_backward_impl(TensorIteratorBase& iter, const Tensor&, const Scalar& alpha, const Scalar& scale,
                       const Scalar& input_scale, bool is_result, const Tensor&) {
  launch_elementwise(iter, is_result ? OR_OP_ELU_BACKWARD_RESULT : OR_OP_ELU_BACKWARD,
                     {alpha.toDouble() * scale.toDouble(), scale, input_scale});
}

// Integer-only ops refuse bool as CPU does (its kernels dispatch over the
// integer types only).
template <or_op Op>
void integer_binary_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&) {
  check_dtype(iter.common_dtype() != at::kBool, Op == OR_OP_GCD ? "gcd" : "lcm", at::kBool);
  launch_elementwise(iter, Op);
}

// round(x, decimals) as CPU computes it: x * 10^d rounded, then / 10^d
// (for d < 0: x / 10^-d rounded, then * 10^-d), in the op's compute type.
void round_decimals_impl(TensorIteratorBase& iter, const Tensor&, int64_t decimals) {
  if (decimals == 0) {
    launch_elementwise(iter, OR_OP_ROUND);
    return;
  }
  const double ten_pow = std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals));
  const double scale = iter.common_dtype() == at::kDouble ? ten_pow : static_cast<double>(static_cast<float>(ten_pow));
  launch_elementwise(iter, OR_OP_ROUND_DECIMALS, {scale, decimals < 0 ? 1 : 0});
}

// `value` as the nearest number of `dtype` (CPU's shrink kernels compare with
// and add lambda in the tensor's own type, float16 and bfloat16 too).
Scalar in_dtype(const Scalar& value, at::ScalarType dtype) {
  Scalar rounded = value;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "in_dtype",
                                  [&] { rounded = static_cast<double>(value.to<scalar_t>()); });
  return rounded;
}

template <or_op Op>
void shrink_impl(TensorIteratorBase& iter, const Tensor&, const Scalar& lambd) {
  launch_elementwise(iter, Op, {in_dtype(lambd, iter.common_dtype())});
}

// The metas of hardshrink_backward and softshrink_backward build (grad_input, grad, self).
void shrink_backward_impl(TensorIteratorBase& iter, const Tensor&, const Tensor&, const Scalar& lambd) {
  launch_elementwise(iter, OR_OP_SHRINK_BACKWARD, {in_dtype(lambd, iter.common_dtype())});
}

// glu's meta builds (out, first half, second half).
void glu_impl(TensorIteratorBase& iter, const Tensor&, int64_t) {
  launch_elementwise(iter, OR_OP_GLU);
}

// PReLU's gradients, for input and weight (both broadcast to the input's
// shape; autograd sums the weight's down to its own): two launches where
// CPU's kernel writes both outputs in one pass.
std::tuple<Tensor, Tensor> prelu_kernel_backward(const Tensor& grad_output, const Tensor& self, const Tensor& weight) {
  using Op = at::_ops::_prelu_kernel_backward;
  if (!structured::engine_handles(grad_output, self, weight)) {
    return structured::fallback<Op>(grad_output, self, weight);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  Tensor grad_self, grad_weight;
  auto input_iter = at::TensorIteratorConfig()
                        .add_output(grad_self)
                        .add_const_input(self)
                        .add_const_input(weight)
                        .add_const_input(grad_output)
                        .build();
  launch_elementwise(input_iter, OR_OP_PRELU_BACKWARD_INPUT);
  auto weight_iter = at::TensorIteratorConfig()
                         .add_output(grad_weight)
                         .add_const_input(self)
                         .add_const_input(grad_output)
                         .build();
  launch_elementwise(weight_iter, OR_OP_PRELU_BACKWARD_WEIGHT);
  return {input_iter.output(), weight_iter.output()};
}

// polygamma(n, x): digamma for n = 0; ATen's meta (whose first argument is n,
// not a tensor) builds a unary float iterator.
template <class Form>
void polygamma_run(Form& op, int64_t n, const Tensor& self) {
  op.meta(n, self);
  if (n == 0) {
    launch_elementwise(op, OR_OP_DIGAMMA);
  } else {
    launch_elementwise(op, OR_OP_POLYGAMMA, {n});
  }
}

using PolygammaMeta = at::meta::structured_polygamma;

Tensor polygamma(int64_t n, const Tensor& self) {
  using Op = at::_ops::polygamma;
  if (!structured::engine_handles(self)) {
    return structured::fallback<Op>(n, self);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  structured::Functional<PolygammaMeta> op;
  polygamma_run(op, n, self);
  return std::move(op.outputs_[0]);
}

Tensor& polygamma_out(int64_t n, const Tensor& self, Tensor& out) {
  using Op = at::_ops::polygamma_out;
  if (!structured::engine_handles(self, out)) {
    return structured::fallback<Op>(n, self, out);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  structured::Out<PolygammaMeta> op(out);
  polygamma_run(op, n, self);
  return out;
}

// clamp with Scalar bounds: ATen's meta takes the bounds as OptionalScalarRef,
// so its three forms are written out (the NaN rule is CPU's: a NaN bound
// makes every element NaN).
template <class Form>
void clamp_run(Form& op, const Tensor& self, const std::optional<Scalar>& min, const std::optional<Scalar>& max) {
  op.meta(self, min ? at::OptionalScalarRef(&*min) : at::OptionalScalarRef(),
          max ? at::OptionalScalarRef(&*max) : at::OptionalScalarRef());
  const auto is_nan = [](const std::optional<Scalar>& bound) {
    return bound && bound->isFloatingPoint() && std::isnan(bound->toDouble());
  };
  if (is_nan(min) || is_nan(max)) {
    op.maybe_get_output(0).fill_(std::numeric_limits<double>::quiet_NaN());
  } else if (min && max) {
    const auto dtype = op.common_dtype();
    launch_elementwise(op, OR_OP_CLAMP, {clamp_bound(dtype, *min, true), clamp_bound(dtype, *max, false)});
  } else if (min) {
    launch_elementwise(op, OR_OP_CLAMP_MIN, {clamp_bound(op.common_dtype(), *min, true)});
  } else {
    launch_elementwise(op, OR_OP_CLAMP_MAX, {clamp_bound(op.common_dtype(), *max, false)});
  }
}

// clamp with tensor bounds: ATen's meta builds (out, self[, min][, max]).
void clamp_tensor_impl(TensorIteratorBase& iter, const Tensor&, at::OptionalTensorRef min, at::OptionalTensorRef max) {
  if (min && max) {
    launch_elementwise(iter, OR_OP_CLAMP_TENSOR);
  } else {
    launch_elementwise(iter, min ? OR_OP_MAXIMUM : OR_OP_MINIMUM);
  }
}

template <class Form>
void clamp_tensor_run(Form& op, const Tensor& self, const std::optional<Tensor>& min,
                      const std::optional<Tensor>& max) {
  const auto ref = [](const std::optional<Tensor>& t) {
    return t && t->defined() ? at::OptionalTensorRef(*t) : at::OptionalTensorRef();
  };
  op.meta(self, ref(min), ref(max));
  clamp_tensor_impl(op, self, ref(min), ref(max));
}

using ClampTensorMeta = at::meta::structured_clamp_Tensor;

Tensor clamp_tensor(const Tensor& self, const std::optional<Tensor>& min, const std::optional<Tensor>& max) {
  using Op = at::_ops::clamp_Tensor;
  if (!structured::engine_handles(self, min, max)) {
    return structured::fallback<Op>(self, min, max);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  structured::Functional<ClampTensorMeta> op;
  clamp_tensor_run(op, self, min, max);
  return std::move(op.outputs_[0]);
}

Tensor& clamp_tensor_(Tensor& self, const std::optional<Tensor>& min, const std::optional<Tensor>& max) {
  using Op = at::_ops::clamp__Tensor;
  if (!structured::engine_handles(self, min, max)) {
    return structured::fallback<Op>(self, min, max);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  structured::Inplace<ClampTensorMeta> op(self);
  clamp_tensor_run(op, self, min, max);
  return self;
}

Tensor& clamp_tensor_out(const Tensor& self, const std::optional<Tensor>& min, const std::optional<Tensor>& max,
                         Tensor& out) {
  using Op = at::_ops::clamp_Tensor_out;
  if (!structured::engine_handles(self, min, max, out)) {
    return structured::fallback<Op>(self, min, max, out);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  structured::Out<ClampTensorMeta> op(out);
  clamp_tensor_run(op, self, min, max);
  return out;
}

using ClampMeta = at::meta::structured_clamp;

Tensor clamp(const Tensor& self, const std::optional<Scalar>& min, const std::optional<Scalar>& max) {
  using Op = at::_ops::clamp;
  if (!structured::engine_handles(self)) {
    return structured::fallback<Op>(self, min, max);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  structured::Functional<ClampMeta> op;
  clamp_run(op, self, min, max);
  return std::move(op.outputs_[0]);
}

Tensor& clamp_(Tensor& self, const std::optional<Scalar>& min, const std::optional<Scalar>& max) {
  using Op = at::_ops::clamp_;
  if (!structured::engine_handles(self)) {
    return structured::fallback<Op>(self, min, max);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  structured::Inplace<ClampMeta> op(self);
  clamp_run(op, self, min, max);
  return self;
}

Tensor& clamp_out(const Tensor& self, const std::optional<Scalar>& min, const std::optional<Scalar>& max,
                  Tensor& out) {
  using Op = at::_ops::clamp_out;
  if (!structured::engine_handles(self, out)) {
    return structured::fallback<Op>(self, min, max, out);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  structured::Out<ClampMeta> op(out);
  clamp_run(op, self, min, max);
  return out;
}

} // namespace
} // namespace openreg::elementwise

// ---- DispatchStub entries: ATen's native functions build the iterator ----

namespace at::native {
namespace {

using namespace openreg::engine;
using openreg::engine::compute_of;
using openreg::engine::launch_elementwise;

void openreg_nan_to_num(TensorIteratorBase& iter, std::optional<double> nan, std::optional<double> pos_inf,
                        std::optional<double> neg_inf) {
  double highest = 0.0, lowest = 0.0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, iter.dtype(0), "nan_to_num", [&] {
    highest = static_cast<double>(std::numeric_limits<scalar_t>::max());
    lowest = static_cast<double>(std::numeric_limits<scalar_t>::lowest());
  });
  launch_elementwise(iter, OR_OP_NAN_TO_NUM, {nan.value_or(0.0), pos_inf.value_or(highest), neg_inf.value_or(lowest)});
}

void openreg_hardtanh_backward(TensorIterator& iter, const Scalar& min, const Scalar& max) {
  launch_elementwise(iter, OR_OP_HARDTANH_BACKWARD, {min, max});
}

void openreg_mse(TensorIteratorBase& iter) {
  launch_elementwise(iter, OR_OP_SQUARED_DIFF);
}

void openreg_mse_backward(TensorIterator& iter, const Scalar& norm) {
  launch_elementwise(iter, OR_OP_MSE_BACKWARD, {norm});
}

void openreg_abs(TensorIteratorBase& iter) {
  check_dtype(iter.common_dtype() != at::kBool, "abs", at::kBool); // as CPU: no abs of bools
  launch_elementwise(iter, OR_OP_ABS);
}

void openreg_logical_not(TensorIteratorBase& iter) {
  launch_elementwise(iter, OR_OP_LOGICAL_NOT, {}, compute_of(iter.dtype(1)));
}

template <or_op Op>
void openreg_logical(TensorIterator& iter) {
  launch_elementwise(iter, Op, {}, compute_of(iter.common_dtype()));
}

void openreg_div_floor(TensorIteratorBase& iter) {
  launch_elementwise(iter, OR_OP_DIV_FLOOR);
}

void openreg_div_trunc(TensorIteratorBase& iter) {
  launch_elementwise(iter, OR_OP_DIV_TRUNC);
}

void openreg_where(TensorIterator& iter) {
  launch_elementwise(iter, OR_OP_WHERE, {}, compute_of(iter.dtype(0)));
}

template <or_op Op>
void openreg_shift(TensorIteratorBase& iter) {
  check_dtype(iter.common_dtype() != at::kBool, Op == OR_OP_LSHIFT ? "lshift" : "rshift", at::kBool);
  launch_elementwise(iter, Op);
}

template <or_op Op>
void openreg_activation(TensorIterator& iter) {
  launch_elementwise(iter, Op);
}

void openreg_smooth_l1(TensorIteratorBase& iter, double beta) {
  launch_elementwise(iter, OR_OP_SMOOTH_L1, {beta});
}

void openreg_smooth_l1_backward(TensorIterator& iter, const Scalar& norm, double beta) {
  launch_elementwise(iter, OR_OP_SMOOTH_L1_BACKWARD, {norm, beta});
}

void openreg_huber(TensorIterator& iter, double delta) {
  launch_elementwise(iter, OR_OP_HUBER, {delta});
}

void openreg_huber_backward(TensorIterator& iter, const Scalar& norm, double delta) {
  launch_elementwise(iter, OR_OP_HUBER_BACKWARD, {norm, delta});
}

void openreg_angle(TensorIteratorBase& iter) {
  launch_elementwise(iter, OR_OP_ANGLE);
}

void openreg_renorm_scale(TensorIteratorBase& iter, double maxnorm) {
  launch_elementwise(iter, OR_OP_RENORM_FACTOR, {maxnorm});
}

void openreg_fill(TensorIterator& iter, const c10::Scalar& value) {
  const auto dtype = iter.dtype(0);
  openreg::engine::check_dtype(openreg::engine::supports_dtype(dtype), "fill_", dtype);
  // CPU's fill_ raises when the value does not fit the dtype; so does this.
  AT_DISPATCH_ALL_TYPES_AND3(kBool, kHalf, kBFloat16, dtype, "fill_", [&] { (void)value.to<scalar_t>(); });
  launch_elementwise(iter, OR_OP_FILL, {value}, compute_of(dtype));
}

} // namespace

REGISTER_PRIVATEUSE1_DISPATCH(abs_stub, &openreg_abs)
REGISTER_PRIVATEUSE1_DISPATCH(logical_not_stub, &openreg_logical_not)
REGISTER_PRIVATEUSE1_DISPATCH(logical_and_stub, &openreg_logical<OR_OP_LOGICAL_AND>)
REGISTER_PRIVATEUSE1_DISPATCH(logical_or_stub, &openreg_logical<OR_OP_LOGICAL_OR>)
REGISTER_PRIVATEUSE1_DISPATCH(logical_xor_stub, &openreg_logical<OR_OP_LOGICAL_XOR>)
REGISTER_PRIVATEUSE1_DISPATCH(where_kernel, &openreg_where)
REGISTER_PRIVATEUSE1_DISPATCH(div_floor_stub, &openreg_div_floor)
REGISTER_PRIVATEUSE1_DISPATCH(div_trunc_stub, &openreg_div_trunc)
REGISTER_PRIVATEUSE1_DISPATCH(fill_stub, &openreg_fill)
REGISTER_PRIVATEUSE1_DISPATCH(nan_to_num_stub, &openreg_nan_to_num)
REGISTER_PRIVATEUSE1_DISPATCH(hardtanh_backward_stub, &openreg_hardtanh_backward)
REGISTER_PRIVATEUSE1_DISPATCH(mse_stub, &openreg_mse)
REGISTER_PRIVATEUSE1_DISPATCH(mse_backward_stub, &openreg_mse_backward)
REGISTER_PRIVATEUSE1_DISPATCH(lshift_stub, &openreg_shift<OR_OP_LSHIFT>)
REGISTER_PRIVATEUSE1_DISPATCH(rshift_stub, &openreg_shift<OR_OP_RSHIFT>)
REGISTER_PRIVATEUSE1_DISPATCH(hardswish_stub, &openreg_activation<OR_OP_HARDSWISH>)
REGISTER_PRIVATEUSE1_DISPATCH(hardswish_backward_stub, &openreg_activation<OR_OP_HARDSWISH_BACKWARD>)
REGISTER_PRIVATEUSE1_DISPATCH(glu_backward_stub, &openreg_activation<OR_OP_GLU_BACKWARD>)
REGISTER_PRIVATEUSE1_DISPATCH(prelu_stub, &openreg_activation<OR_OP_PRELU>)
REGISTER_PRIVATEUSE1_DISPATCH(smooth_l1_stub, &openreg_smooth_l1)
REGISTER_PRIVATEUSE1_DISPATCH(smooth_l1_backward_stub, &openreg_smooth_l1_backward)
REGISTER_PRIVATEUSE1_DISPATCH(huber_stub, &openreg_huber)
REGISTER_PRIVATEUSE1_DISPATCH(huber_backward_stub, &openreg_huber_backward)
REGISTER_PRIVATEUSE1_DISPATCH(angle_stub, &openreg_angle)
REGISTER_PRIVATEUSE1_DISPATCH(renorm_scale_factor_stub, &openreg_renorm_scale)

} // namespace at::native

// ---- the op table ----

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace openreg::elementwise;
  using namespace openreg::engine;
  // arithmetic
  OPENREG_STRUCTURED(m, add_Tensor, add_impl, add_Tensor, add__Tensor, add_out);
  OPENREG_STRUCTURED(m, sub_Tensor, sub_impl, sub_Tensor, sub__Tensor, sub_out);
  OPENREG_STRUCTURED(m, mul_Tensor, mul_impl, mul_Tensor, mul__Tensor, mul_out);
  OPENREG_STRUCTURED(m, div_Tensor, div_impl, div_Tensor, div__Tensor, div_out);
  OPENREG_STRUCTURED(m, div_Tensor_mode, div_mode_impl, div_Tensor_mode, div__Tensor_mode, div_out_mode);
  OPENREG_STRUCTURED(m, remainder_Tensor, binary_impl<OR_OP_REMAINDER>, remainder_Tensor, remainder__Tensor,
                     remainder_Tensor_out);
  OPENREG_STRUCTURED(m, fmod_Tensor, binary_impl<OR_OP_FMOD>, fmod_Tensor, fmod__Tensor, fmod_Tensor_out);
  OPENREG_STRUCTURED(m, maximum, binary_impl<OR_OP_MAXIMUM>, maximum, none, maximum_out);
  OPENREG_STRUCTURED(m, minimum, binary_impl<OR_OP_MINIMUM>, minimum, none, minimum_out);
  OPENREG_STRUCTURED(m, addcmul, addcmul_impl, addcmul, addcmul_, addcmul_out);
  OPENREG_STRUCTURED(m, addcdiv, addcdiv_impl, addcdiv, addcdiv_, addcdiv_out);
  OPENREG_STRUCTURED(m, lerp_Scalar, lerp_scalar_impl, lerp_Scalar, lerp__Scalar, lerp_Scalar_out);
  OPENREG_STRUCTURED(m, lerp_Tensor, lerp_tensor_impl, lerp_Tensor, lerp__Tensor, lerp_Tensor_out);
  // comparisons
  OPENREG_STRUCTURED(m, eq_Tensor, binary_impl<OR_OP_EQ>, eq_Tensor, eq__Tensor, eq_Tensor_out);
  OPENREG_STRUCTURED(m, ne_Tensor, binary_impl<OR_OP_NE>, ne_Tensor, ne__Tensor, ne_Tensor_out);
  OPENREG_STRUCTURED(m, lt_Tensor, binary_impl<OR_OP_LT>, lt_Tensor, lt__Tensor, lt_Tensor_out);
  OPENREG_STRUCTURED(m, le_Tensor, binary_impl<OR_OP_LE>, le_Tensor, le__Tensor, le_Tensor_out);
  OPENREG_STRUCTURED(m, gt_Tensor, binary_impl<OR_OP_GT>, gt_Tensor, gt__Tensor, gt_Tensor_out);
  OPENREG_STRUCTURED(m, ge_Tensor, binary_impl<OR_OP_GE>, ge_Tensor, ge__Tensor, ge_Tensor_out);
  OPENREG_STRUCTURED(m, eq_Scalar, compare_scalar_impl<OR_OP_EQ>, eq_Scalar, eq__Scalar, eq_Scalar_out);
  OPENREG_STRUCTURED(m, ne_Scalar, compare_scalar_impl<OR_OP_NE>, ne_Scalar, ne__Scalar, ne_Scalar_out);
  OPENREG_STRUCTURED(m, lt_Scalar, compare_scalar_impl<OR_OP_LT>, lt_Scalar, lt__Scalar, lt_Scalar_out);
  OPENREG_STRUCTURED(m, le_Scalar, compare_scalar_impl<OR_OP_LE>, le_Scalar, le__Scalar, le_Scalar_out);
  OPENREG_STRUCTURED(m, gt_Scalar, compare_scalar_impl<OR_OP_GT>, gt_Scalar, gt__Scalar, gt_Scalar_out);
  OPENREG_STRUCTURED(m, ge_Scalar, compare_scalar_impl<OR_OP_GE>, ge_Scalar, ge__Scalar, ge_Scalar_out);
  // bitwise
  OPENREG_STRUCTURED(m, bitwise_and_Tensor, binary_impl<OR_OP_BITWISE_AND>, bitwise_and_Tensor, bitwise_and__Tensor,
                     bitwise_and_Tensor_out);
  OPENREG_STRUCTURED(m, bitwise_or_Tensor, binary_impl<OR_OP_BITWISE_OR>, bitwise_or_Tensor, bitwise_or__Tensor,
                     bitwise_or_Tensor_out);
  OPENREG_STRUCTURED(m, bitwise_xor_Tensor, binary_impl<OR_OP_BITWISE_XOR>, bitwise_xor_Tensor, bitwise_xor__Tensor,
                     bitwise_xor_Tensor_out);
  OPENREG_STRUCTURED(m, bitwise_not, bitwise_not_impl, bitwise_not, bitwise_not_, bitwise_not_out);
  // unary
  OPENREG_STRUCTURED(m, neg, unary_impl<OR_OP_NEG>, neg, neg_, neg_out);
  OPENREG_STRUCTURED(m, sign, unary_impl<OR_OP_SIGN>, sign, sign_, sign_out);
  OPENREG_STRUCTURED(m, sgn, unary_impl<OR_OP_SIGN>, sgn, sgn_, sgn_out);
  OPENREG_STRUCTURED(m, sqrt, unary_impl<OR_OP_SQRT>, sqrt, sqrt_, sqrt_out);
  OPENREG_STRUCTURED(m, rsqrt, unary_impl<OR_OP_RSQRT>, rsqrt, rsqrt_, rsqrt_out);
  OPENREG_STRUCTURED(m, reciprocal, unary_impl<OR_OP_RECIPROCAL>, reciprocal, reciprocal_, reciprocal_out);
  OPENREG_STRUCTURED(m, floor, unary_impl<OR_OP_FLOOR>, floor, floor_, floor_out);
  OPENREG_STRUCTURED(m, ceil, unary_impl<OR_OP_CEIL>, ceil, ceil_, ceil_out);
  OPENREG_STRUCTURED(m, trunc, unary_impl<OR_OP_TRUNC>, trunc, trunc_, trunc_out);
  OPENREG_STRUCTURED(m, round, unary_impl<OR_OP_ROUND>, round, round_, round_out);
  // clamps and activations' building blocks
  OPENREG_STRUCTURED(m, clamp_min, clamp_bound_impl<true>, clamp_min, clamp_min_, clamp_min_out);
  // (a tensor bound is maximum/minimum, as CPU computes it)
  OPENREG_STRUCTURED(m, clamp_min_Tensor, binary_impl<OR_OP_MAXIMUM>, clamp_min_Tensor, clamp_min__Tensor,
                     clamp_min_Tensor_out);
  OPENREG_STRUCTURED(m, clamp_max_Tensor, binary_impl<OR_OP_MINIMUM>, clamp_max_Tensor, clamp_max__Tensor,
                     clamp_max_Tensor_out);
  OPENREG_STRUCTURED(m, clamp_max, clamp_bound_impl<false>, clamp_max, clamp_max_, clamp_max_out);
  OPENREG_STRUCTURED(m, threshold, threshold_impl, threshold, threshold_, threshold_out);
  OPENREG_STRUCTURED(m, threshold_backward, threshold_backward_impl, threshold_backward, none,
                     threshold_backward_grad_input);
  // transcendental
  OPENREG_STRUCTURED(m, exp, unary_impl<OR_OP_EXP>, exp, exp_, exp_out);
  OPENREG_STRUCTURED(m, exp2, unary_impl<OR_OP_EXP2>, exp2, exp2_, exp2_out);
  OPENREG_STRUCTURED(m, expm1, unary_impl<OR_OP_EXPM1>, expm1, expm1_, expm1_out);
  OPENREG_STRUCTURED(m, log, unary_impl<OR_OP_LOG>, log, log_, log_out);
  OPENREG_STRUCTURED(m, log2, unary_impl<OR_OP_LOG2>, log2, log2_, log2_out);
  OPENREG_STRUCTURED(m, log10, unary_impl<OR_OP_LOG10>, log10, log10_, log10_out);
  OPENREG_STRUCTURED(m, log1p, unary_impl<OR_OP_LOG1P>, log1p, log1p_, log1p_out);
  OPENREG_STRUCTURED(m, tanh, unary_impl<OR_OP_TANH>, tanh, tanh_, tanh_out);
  OPENREG_STRUCTURED(m, sigmoid, unary_impl<OR_OP_SIGMOID>, sigmoid, sigmoid_, sigmoid_out);
  OPENREG_STRUCTURED(m, erf, unary_impl<OR_OP_ERF>, erf, erf_, erf_out);
  OPENREG_STRUCTURED(m, sin, unary_impl<OR_OP_SIN>, sin, sin_, sin_out);
  OPENREG_STRUCTURED(m, cos, unary_impl<OR_OP_COS>, cos, cos_, cos_out);
  OPENREG_STRUCTURED(m, asin, unary_impl<OR_OP_ASIN>, asin, asin_, asin_out);
  OPENREG_STRUCTURED(m, acos, unary_impl<OR_OP_ACOS>, acos, acos_, acos_out);
  OPENREG_STRUCTURED(m, atan, unary_impl<OR_OP_ATAN>, atan, atan_, atan_out);
  OPENREG_STRUCTURED(m, atan2, binary_impl<OR_OP_ATAN2>, atan2, atan2_, atan2_out);
  OPENREG_STRUCTURED(m, sinh, unary_impl<OR_OP_SINH>, sinh, sinh_, sinh_out);
  OPENREG_STRUCTURED(m, cosh, unary_impl<OR_OP_COSH>, cosh, cosh_, cosh_out);
  OPENREG_STRUCTURED(m, asinh, unary_impl<OR_OP_ASINH>, asinh, asinh_, asinh_out);
  OPENREG_STRUCTURED(m, acosh, unary_impl<OR_OP_ACOSH>, acosh, acosh_, acosh_out);
  OPENREG_STRUCTURED(m, atanh, unary_impl<OR_OP_ATANH>, atanh, atanh_, atanh_out);
  OPENREG_STRUCTURED(m, tan, unary_impl<OR_OP_TAN>, tan, tan_, tan_out);
  OPENREG_STRUCTURED(m, pow_Tensor_Tensor, binary_impl<OR_OP_POW>, pow_Tensor_Tensor, pow__Tensor,
                     pow_Tensor_Tensor_out);
  OPENREG_STRUCTURED(m, pow_Tensor_Scalar, pow_scalar_impl, pow_Tensor_Scalar, pow__Scalar, pow_Tensor_Scalar_out);
  m.impl("pow.Scalar", TORCH_FN(pow_scalar_base));
  m.impl("pow.Scalar_out", TORCH_FN(pow_scalar_base_out));
  m.impl("clamp", TORCH_FN(clamp));
  m.impl("clamp_", TORCH_FN(clamp_));
  m.impl("clamp.out", TORCH_FN(clamp_out));
  m.impl("clamp.Tensor", TORCH_FN(clamp_tensor));
  m.impl("clamp_.Tensor", TORCH_FN(clamp_tensor_));
  m.impl("clamp.Tensor_out", TORCH_FN(clamp_tensor_out));
  OPENREG_NATIVE(m, hardtanh, at::native::hardtanh);
  OPENREG_NATIVE(m, hardtanh_, at::native::hardtanh_);
  OPENREG_NATIVE(m, hardtanh_out, at::native::hardtanh_out);
  OPENREG_NATIVE(m, hardtanh_backward, at::native::hardtanh_backward);
  OPENREG_NATIVE(m, hardtanh_backward_grad_input, at::native::hardtanh_backward_out);
  OPENREG_NATIVE(m, nan_to_num_out, at::native::nan_to_num_out);
  // losses (the reductions they end in are the reduction family's)
  OPENREG_STRUCTURED_NATIVE(m, mse_loss_out, mse_loss, none, mse_loss_out);
  OPENREG_NATIVE(m, mse_loss_backward, at::native::mse_loss_backward);
  OPENREG_NATIVE(m, mse_loss_backward_grad_input, at::native::mse_loss_backward_out);
  // activations and their backward ops
  OPENREG_STRUCTURED(m, silu, unary_impl<OR_OP_SILU>, silu, silu_, silu_out);
  OPENREG_STRUCTURED(m, mish, unary_impl<OR_OP_MISH>, mish, mish_, mish_out);
  OPENREG_STRUCTURED(m, gelu, gelu_impl, gelu, gelu_, gelu_out);
  OPENREG_STRUCTURED(m, softplus, softplus_impl, softplus, none, softplus_out);
  OPENREG_STRUCTURED(m, elu, elu_impl, elu, elu_, elu_out);
  OPENREG_STRUCTURED(m, leaky_relu, leaky_relu_impl, leaky_relu, leaky_relu_, leaky_relu_out);
  OPENREG_STRUCTURED(m, tanh_backward, binary_impl<OR_OP_TANH_BACKWARD>, tanh_backward, none,
                     tanh_backward_grad_input);
  OPENREG_STRUCTURED(m, sigmoid_backward, binary_impl<OR_OP_SIGMOID_BACKWARD>, sigmoid_backward, none,
                     sigmoid_backward_grad_input);
  OPENREG_STRUCTURED(m, silu_backward, binary_impl<OR_OP_SILU_BACKWARD>, silu_backward, none,
                     silu_backward_grad_input);
  OPENREG_STRUCTURED(m, gelu_backward, gelu_backward_impl, gelu_backward, none, gelu_backward_grad_input);
  OPENREG_STRUCTURED(m, softplus_backward, softplus_backward_impl, softplus_backward, none,
                     softplus_backward_grad_input);
  OPENREG_STRUCTURED(m, elu_backward, elu_backward_impl, elu_backward, none, elu_backward_grad_input);
  OPENREG_STRUCTURED(m, leaky_relu_backward, leaky_relu_backward_impl, leaky_relu_backward, none,
                     leaky_relu_backward_grad_input);
  // over ATen's native functions and DispatchStubs
  OPENREG_NATIVE(m, isnan, at::native::isnan);
  OPENREG_NATIVE(m, relu, at::native::relu);
  OPENREG_NATIVE(m, relu_, at::native::relu_);
  OPENREG_NATIVE(m, abs, at::native::abs);
  OPENREG_NATIVE(m, abs_, at::native::abs_);
  OPENREG_NATIVE(m, abs_out, at::native::abs_out);
  OPENREG_NATIVE(m, logical_not, at::native::logical_not);
  OPENREG_NATIVE(m, logical_not_, at::native::logical_not_);
  OPENREG_NATIVE(m, logical_not_out, at::native::logical_not_out);
  OPENREG_NATIVE(m, logical_and, at::native::logical_and);
  OPENREG_NATIVE(m, logical_and_, at::native::logical_and_);
  OPENREG_NATIVE(m, logical_and_out, at::native::logical_and_out);
  OPENREG_NATIVE(m, logical_or, at::native::logical_or);
  OPENREG_NATIVE(m, logical_or_, at::native::logical_or_);
  OPENREG_NATIVE(m, logical_or_out, at::native::logical_or_out);
  OPENREG_NATIVE(m, logical_xor, at::native::logical_xor);
  OPENREG_NATIVE(m, logical_xor_, at::native::logical_xor_);
  OPENREG_NATIVE(m, logical_xor_out, at::native::logical_xor_out);
  OPENREG_NATIVE(m, floor_divide, at::native::floor_divide);
  OPENREG_NATIVE(m, floor_divide__Tensor, at::native::floor_divide_);
  OPENREG_NATIVE(m, floor_divide_out, at::native::floor_divide_out);
  OPENREG_NATIVE(m, floor_divide_Scalar, at::native::floor_divide);
  OPENREG_NATIVE(m, floor_divide__Scalar, at::native::floor_divide_);
  OPENREG_NATIVE(m, floor_divide_Scalar_out, at::native::floor_divide_Scalar_out);
  OPENREG_NATIVE(m, where_self, at::native::where);
  OPENREG_NATIVE(m, where_self_out, at::native::where_self_out);
  OPENREG_NATIVE(m, fill__Scalar, at::native::fill_);
  OPENREG_NATIVE(m, fill__Tensor, at::native::fill_); // a CPU value is read, a device one copied
  OPENREG_NATIVE(m, zero_, at::native::zero_);
  // shifts, number theory, more binary ops
  OPENREG_STRUCTURED_NATIVE(m, bitwise_left_shift_out, bitwise_left_shift_Tensor, bitwise_left_shift__Tensor,
                            bitwise_left_shift_Tensor_out);
  OPENREG_STRUCTURED_NATIVE(m, bitwise_right_shift_out, bitwise_right_shift_Tensor, bitwise_right_shift__Tensor,
                            bitwise_right_shift_Tensor_out);
  OPENREG_NATIVE(m, __lshift___Scalar, at::native::__lshift__);
  OPENREG_NATIVE(m, __lshift___Tensor, at::native::__lshift__);
  OPENREG_NATIVE(m, __ilshift___Scalar, at::native::__ilshift__);
  OPENREG_NATIVE(m, __ilshift___Tensor, at::native::__ilshift__);
  OPENREG_NATIVE(m, __rshift___Scalar, at::native::__rshift__);
  OPENREG_NATIVE(m, __rshift___Tensor, at::native::__rshift__);
  OPENREG_NATIVE(m, __irshift___Scalar, at::native::__irshift__);
  OPENREG_NATIVE(m, __irshift___Tensor, at::native::__irshift__);
  OPENREG_STRUCTURED(m, gcd, integer_binary_impl<OR_OP_GCD>, gcd, gcd_, gcd_out);
  OPENREG_STRUCTURED(m, lcm, integer_binary_impl<OR_OP_LCM>, lcm, lcm_, lcm_out);
  OPENREG_STRUCTURED(m, logaddexp, binary_impl<OR_OP_LOGADDEXP>, logaddexp, none, logaddexp_out);
  OPENREG_STRUCTURED(m, logaddexp2, binary_impl<OR_OP_LOGADDEXP2>, logaddexp2, none, logaddexp2_out);
  OPENREG_STRUCTURED(m, hypot, binary_impl<OR_OP_HYPOT>, hypot, hypot_, hypot_out);
  OPENREG_STRUCTURED(m, copysign_Tensor, binary_impl<OR_OP_COPYSIGN>, copysign_Tensor, copysign__Tensor, copysign_out);
  OPENREG_STRUCTURED(m, xlogy_Tensor, binary_impl<OR_OP_XLOGY>, xlogy_Tensor, xlogy__Tensor, xlogy_OutTensor);
  OPENREG_STRUCTURED(m, special_xlog1py, binary_impl<OR_OP_XLOG1PY>, special_xlog1py, none, special_xlog1py_out);
  OPENREG_STRUCTURED(m, heaviside, binary_impl<OR_OP_HEAVISIDE>, heaviside, heaviside_, heaviside_out);
  OPENREG_STRUCTURED(m, fmax, binary_impl<OR_OP_FMAX>, fmax, none, fmax_out);
  OPENREG_STRUCTURED(m, fmin, binary_impl<OR_OP_FMIN>, fmin, none, fmin_out);
  // more unary ops and special functions
  OPENREG_STRUCTURED(m, round_decimals, round_decimals_impl, round_decimals, round__decimals, round_decimals_out);
  OPENREG_STRUCTURED(m, frac, unary_impl<OR_OP_FRAC>, frac, frac_, frac_out);
  OPENREG_STRUCTURED(m, signbit, unary_impl<OR_OP_SIGNBIT>, signbit, none, signbit_out);
  OPENREG_STRUCTURED(m, sinc, unary_impl<OR_OP_SINC>, sinc, sinc_, sinc_out);
  OPENREG_STRUCTURED(m, erfc, unary_impl<OR_OP_ERFC>, erfc, erfc_, erfc_out);
  OPENREG_STRUCTURED(m, erfinv, unary_impl<OR_OP_ERFINV>, erfinv, erfinv_, erfinv_out);
  OPENREG_STRUCTURED(m, lgamma, unary_impl<OR_OP_LGAMMA>, lgamma, lgamma_, lgamma_out);
  OPENREG_STRUCTURED(m, digamma, unary_impl<OR_OP_DIGAMMA>, digamma, digamma_, digamma_out);
  OPENREG_STRUCTURED(m, special_entr, unary_impl<OR_OP_ENTR>, special_entr, none, special_entr_out);
  OPENREG_STRUCTURED(m, special_erfcx, unary_impl<OR_OP_ERFCX>, special_erfcx, none, special_erfcx_out);
  OPENREG_STRUCTURED(m, special_ndtri, unary_impl<OR_OP_NDTRI>, special_ndtri, none, special_ndtri_out);
  OPENREG_STRUCTURED(m, special_log_ndtr, unary_impl<OR_OP_LOG_NDTR>, special_log_ndtr, none, special_log_ndtr_out);
  OPENREG_STRUCTURED(m, i0, unary_impl<OR_OP_I0>, i0, i0_, i0_out);
  OPENREG_STRUCTURED(m, special_i0e, unary_impl<OR_OP_I0E>, special_i0e, none, special_i0e_out);
  OPENREG_STRUCTURED(m, special_i1, unary_impl<OR_OP_I1>, special_i1, none, special_i1_out);
  OPENREG_STRUCTURED(m, special_i1e, unary_impl<OR_OP_I1E>, special_i1e, none, special_i1e_out);
  OPENREG_NATIVE(m, angle, at::native::angle);
  OPENREG_NATIVE(m, angle_out, at::native::angle_out);
  OPENREG_STRUCTURED_NATIVE(m, renorm_out, renorm, renorm_, renorm_out);
  OPENREG_NATIVE(m, rsub_Tensor, at::native::rsub);
  OPENREG_NATIVE(m, remainder_Scalar_Tensor, at::native::remainder);
  m.impl("polygamma", TORCH_FN(polygamma));
  m.impl("polygamma.out", TORCH_FN(polygamma_out));
  // more activations and their backward ops
  OPENREG_STRUCTURED(m, hardsigmoid, unary_impl<OR_OP_HARDSIGMOID>, hardsigmoid, hardsigmoid_, hardsigmoid_out);
  OPENREG_STRUCTURED(m, hardsigmoid_backward, binary_impl<OR_OP_HARDSIGMOID_BACKWARD>, hardsigmoid_backward, none,
                     hardsigmoid_backward_grad_input);
  OPENREG_NATIVE(m, hardswish, at::native::hardswish);
  OPENREG_NATIVE(m, hardswish_, at::native::hardswish_);
  OPENREG_NATIVE(m, hardswish_out, at::native::hardswish_out);
  OPENREG_NATIVE(m, hardswish_backward, at::native::hardswish_backward);
  OPENREG_STRUCTURED(m, hardshrink, shrink_impl<OR_OP_HARDSHRINK>, hardshrink, none, hardshrink_out);
  OPENREG_STRUCTURED(m, softshrink, shrink_impl<OR_OP_SOFTSHRINK>, softshrink, none, softshrink_out);
  OPENREG_STRUCTURED(m, hardshrink_backward, shrink_backward_impl, hardshrink_backward, none,
                     hardshrink_backward_grad_input);
  OPENREG_STRUCTURED(m, softshrink_backward, shrink_backward_impl, softshrink_backward, none,
                     softshrink_backward_grad_input);
  OPENREG_STRUCTURED(m, glu, glu_impl, glu, none, glu_out);
  OPENREG_NATIVE(m, glu_backward, at::native::glu_backward_cpu);
  OPENREG_NATIVE(m, glu_backward_grad_input, at::native::glu_backward_cpu_out);
  OPENREG_NATIVE(m, _prelu_kernel, at::native::_prelu_kernel);
  m.impl("_prelu_kernel_backward", TORCH_FN(prelu_kernel_backward));
  // regression losses (the reductions they end in are the reduction family's)
  OPENREG_STRUCTURED_NATIVE(m, smooth_l1_loss_out, smooth_l1_loss, none, smooth_l1_loss_out);
  OPENREG_NATIVE(m, smooth_l1_loss_backward, at::native::smooth_l1_loss_backward);
  OPENREG_NATIVE(m, smooth_l1_loss_backward_grad_input, at::native::smooth_l1_loss_backward_out);
  OPENREG_NATIVE(m, huber_loss, at::native::huber_loss);
  OPENREG_NATIVE(m, huber_loss_out, at::native::huber_loss_out);
  OPENREG_NATIVE(m, huber_loss_backward, at::native::huber_loss_backward);
  OPENREG_NATIVE(m, huber_loss_backward_out, at::native::huber_loss_backward_out);
}
