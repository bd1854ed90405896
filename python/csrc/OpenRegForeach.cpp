// torch's _foreach_ ops on the device, one engine launch per list (up to
// OR_LIST_MAX tensors; the `elementwise_list` kernel) instead of one op per
// tensor: the optimizers' default path (torch.optim with foreach=None picks
// these for every backend that has them), and clip_grad_norm_'s scaling.
//
// A list takes the launch when every tensor is contiguous, of one float
// dtype and on one openreg device, and the tensors of a position have one
// shape (a 0-dim tensor of the lists' dtype and device may stand for a
// whole list: mul, div and add by a device scalar); each position then
// computes what the op computes on one tensor
// (the same engine op, arguments and scalar conversion), so results equal
// the per-tensor path's bit for bit. Any other list (mixed dtypes, strided
// tensors, integers, CPU tensors) runs ATen's per-tensor loop, whose ops run
// on the device one by one. As with CUDA's fused foreach kernels, tensors
// that alias across positions of an in-place op give unspecified results.

#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegForeach.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg::foreach_ops {

// See the top of the file.
bool on_engine(std::initializer_list<at::TensorList> lists) {
  using at::Tensor;
  using at::TensorList;
  const TensorList self = *lists.begin();
  if (self.empty() || !self[0].defined()) {
    return false;
  }
  const c10::Device device = self[0].device();
  const at::ScalarType dtype = self[0].scalar_type();
  if (device.type() != c10::DeviceType::PrivateUse1 ||
      (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kHalf && dtype != at::kBFloat16)) {
    return false;
  }
  for (const TensorList list : lists) {
    if (list.size() != self.size()) {
      return false;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const Tensor& t = list[i];
      if (!t.defined() || t.device() != device || t.scalar_type() != dtype || !t.is_contiguous() ||
          t.sizes() != self[i].sizes()) {
        return false;
      }
    }
  }
  return true;
}

namespace {

using at::Scalar;
using namespace openreg::engine;
using at::Tensor;
using at::TensorList;
namespace native = at::native;

// Whether `other` can be the one value of every position: a 0-dim tensor on
// the lists' device, of their dtype.
bool device_scalar(TensorList self, const Tensor& other) {
  return other.defined() && other.dim() == 0 && other.device() == self[0].device() &&
         other.scalar_type() == self[0].scalar_type();
}

void count(const char* op) {
  openreg::count_op(op, true);
}

// New tensors shaped as `self`'s, for the out-of-place forms.
std::vector<Tensor> outputs_like(TensorList self) {
  std::vector<Tensor> out;
  out.reserve(self.size());
  for (const Tensor& t : self) {
    out.push_back(at::empty_like(t, at::MemoryFormat::Contiguous));
  }
  return out;
}

// A scalar for every position (a scalar operand the same for all).
std::vector<Scalar> repeated(const Scalar& value, size_t n) {
  return std::vector<Scalar>(n, value);
}

// ---- add ----

void add_scalar_(TensorList self, const Scalar& scalar) {
  if (!on_engine({self})) {
    return native::foreach_tensor_add_scalar_kernel_slow_(self, scalar);
  }
  count("aten::_foreach_add_.Scalar");
  launch_elementwise_list(OR_OP_ADD, {self, self}, {1}, 2, repeated(scalar, self.size()));
}

std::vector<Tensor> add_scalar(TensorList self, const Scalar& scalar) {
  if (!on_engine({self})) {
    return native::foreach_tensor_add_scalar_kernel_slow(self, scalar);
  }
  count("aten::_foreach_add.Scalar");
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(OR_OP_ADD, {out, self}, {1}, 2, repeated(scalar, self.size()));
  return out;
}

void add_scalarlist_(TensorList self, at::ArrayRef<Scalar> scalars) {
  if (!on_engine({self}) || scalars.size() != self.size()) {
    return native::foreach_tensor_add_scalarlist_kernel_slow_(self, scalars);
  }
  count("aten::_foreach_add_.ScalarList");
  launch_elementwise_list(OR_OP_ADD, {self, self}, {1}, 2, scalars);
}

std::vector<Tensor> add_scalarlist(TensorList self, at::ArrayRef<Scalar> scalars) {
  if (!on_engine({self}) || scalars.size() != self.size()) {
    return native::foreach_tensor_add_scalarlist_kernel_slow(self, scalars);
  }
  count("aten::_foreach_add.ScalarList");
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(OR_OP_ADD, {out, self}, {1}, 2, scalars);
  return out;
}

void add_list_(TensorList self, TensorList other, const Scalar& alpha) {
  if (!on_engine({self, other})) {
    return native::foreach_tensor_add_list_kernel_slow_(self, other, alpha);
  }
  count("aten::_foreach_add_.List");
  launch_elementwise_list(OR_OP_ADD, {self, self, other}, {alpha});
}

std::vector<Tensor> add_list(TensorList self, TensorList other, const Scalar& alpha) {
  if (!on_engine({self, other})) {
    return native::foreach_tensor_add_list_kernel_slow(self, other, alpha);
  }
  count("aten::_foreach_add.List");
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(OR_OP_ADD, {out, self, other}, {alpha});
  return out;
}

// ---- mul and div: a scalar, a scalar per tensor, or a list ----

template <or_op Op>
void scalar_(TensorList self, const Scalar& scalar, const char* name,
             void (*slow)(TensorList, const Scalar&)) {
  if (!on_engine({self})) {
    return slow(self, scalar);
  }
  count(name);
  launch_elementwise_list(Op, {self, self}, {}, 2, repeated(scalar, self.size()));
}

template <or_op Op>
std::vector<Tensor> scalar(TensorList self, const Scalar& scalar, const char* name,
                           std::vector<Tensor> (*slow)(TensorList, const Scalar&)) {
  if (!on_engine({self})) {
    return slow(self, scalar);
  }
  count(name);
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(Op, {out, self}, {}, 2, repeated(scalar, self.size()));
  return out;
}

template <or_op Op>
void scalarlist_(TensorList self, at::ArrayRef<Scalar> scalars, const char* name,
                 void (*slow)(TensorList, at::ArrayRef<Scalar>)) {
  if (!on_engine({self}) || scalars.size() != self.size()) {
    return slow(self, scalars);
  }
  count(name);
  launch_elementwise_list(Op, {self, self}, {}, 2, scalars);
}

template <or_op Op>
std::vector<Tensor> scalarlist(TensorList self, at::ArrayRef<Scalar> scalars, const char* name,
                               std::vector<Tensor> (*slow)(TensorList, at::ArrayRef<Scalar>)) {
  if (!on_engine({self}) || scalars.size() != self.size()) {
    return slow(self, scalars);
  }
  count(name);
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(Op, {out, self}, {}, 2, scalars);
  return out;
}

template <or_op Op>
void list_(TensorList self, TensorList other, const char* name, void (*slow)(TensorList, TensorList)) {
  if (!on_engine({self, other})) {
    return slow(self, other);
  }
  count(name);
  launch_elementwise_list(Op, {self, self, other});
}

template <or_op Op>
std::vector<Tensor> list(TensorList self, TensorList other, const char* name,
                         std::vector<Tensor> (*slow)(TensorList, TensorList)) {
  if (!on_engine({self, other})) {
    return slow(self, other);
  }
  count(name);
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(Op, {out, self, other});
  return out;
}

void mul_scalar_(TensorList self, const Scalar& s) {
  scalar_<OR_OP_MUL>(self, s, "aten::_foreach_mul_.Scalar", native::foreach_tensor_mul_scalar_kernel_slow_);
}
std::vector<Tensor> mul_scalar(TensorList self, const Scalar& s) {
  return scalar<OR_OP_MUL>(self, s, "aten::_foreach_mul.Scalar", native::foreach_tensor_mul_scalar_kernel_slow);
}
void mul_scalarlist_(TensorList self, at::ArrayRef<Scalar> s) {
  scalarlist_<OR_OP_MUL>(self, s, "aten::_foreach_mul_.ScalarList",
                         native::foreach_tensor_mul_scalarlist_kernel_slow_);
}
std::vector<Tensor> mul_scalarlist(TensorList self, at::ArrayRef<Scalar> s) {
  return scalarlist<OR_OP_MUL>(self, s, "aten::_foreach_mul.ScalarList",
                               native::foreach_tensor_mul_scalarlist_kernel_slow);
}
void mul_list_(TensorList self, TensorList other) {
  list_<OR_OP_MUL>(self, other, "aten::_foreach_mul_.List", native::foreach_tensor_mul_list_kernel_slow_);
}
std::vector<Tensor> mul_list(TensorList self, TensorList other) {
  return list<OR_OP_MUL>(self, other, "aten::_foreach_mul.List", native::foreach_tensor_mul_list_kernel_slow);
}
void div_scalar_(TensorList self, const Scalar& s) {
  scalar_<OR_OP_DIV>(self, s, "aten::_foreach_div_.Scalar", native::foreach_tensor_div_scalar_kernel_slow_);
}
std::vector<Tensor> div_scalar(TensorList self, const Scalar& s) {
  return scalar<OR_OP_DIV>(self, s, "aten::_foreach_div.Scalar", native::foreach_tensor_div_scalar_kernel_slow);
}
void div_scalarlist_(TensorList self, at::ArrayRef<Scalar> s) {
  scalarlist_<OR_OP_DIV>(self, s, "aten::_foreach_div_.ScalarList",
                         native::foreach_tensor_div_scalarlist_kernel_slow_);
}
std::vector<Tensor> div_scalarlist(TensorList self, at::ArrayRef<Scalar> s) {
  return scalarlist<OR_OP_DIV>(self, s, "aten::_foreach_div.ScalarList",
                               native::foreach_tensor_div_scalarlist_kernel_slow);
}
void div_list_(TensorList self, TensorList other) {
  list_<OR_OP_DIV>(self, other, "aten::_foreach_div_.List", native::foreach_tensor_div_list_kernel_slow_);
}
std::vector<Tensor> div_list(TensorList self, TensorList other) {
  return list<OR_OP_DIV>(self, other, "aten::_foreach_div.List", native::foreach_tensor_div_list_kernel_slow);
}

// ---- lerp, addcmul, addcdiv, sqrt ----

void lerp_scalar_(TensorList self, TensorList end, const Scalar& weight) {
  if (!on_engine({self, end})) {
    return native::foreach_tensor_lerp_list_kernel_slow_(self, end, weight);
  }
  count("aten::_foreach_lerp_.Scalar");
  launch_elementwise_list(OR_OP_LERP_SCALAR, {self, self, end}, {weight});
}

std::vector<Tensor> lerp_scalar(TensorList self, TensorList end, const Scalar& weight) {
  if (!on_engine({self, end})) {
    return native::foreach_tensor_lerp_list_kernel_slow(self, end, weight);
  }
  count("aten::_foreach_lerp.Scalar");
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(OR_OP_LERP_SCALAR, {out, self, end}, {weight});
  return out;
}

// addcmul or addcdiv (`Op`) with one value, or one per position (value_to 0).
template <or_op Op>
void pointwise_(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> values, const char* name) {
  count(name);
  launch_elementwise_list(Op, {self, self, t1, t2}, {}, 0, values);
}

template <or_op Op>
std::vector<Tensor> pointwise(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> values,
                              const char* name) {
  count(name);
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(Op, {out, self, t1, t2}, {}, 0, values);
  return out;
}

void addcmul_scalar_(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  if (!on_engine({self, t1, t2})) {
    return native::foreach_tensor_addcmul_scalar_slow_(self, t1, t2, value);
  }
  pointwise_<OR_OP_ADDCMUL>(self, t1, t2, repeated(value, self.size()), "aten::_foreach_addcmul_.Scalar");
}
std::vector<Tensor> addcmul_scalar(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  if (!on_engine({self, t1, t2})) {
    return native::foreach_tensor_addcmul_scalar_slow(self, t1, t2, value);
  }
  return pointwise<OR_OP_ADDCMUL>(self, t1, t2, repeated(value, self.size()), "aten::_foreach_addcmul.Scalar");
}
void addcmul_scalarlist_(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> values) {
  if (!on_engine({self, t1, t2}) || values.size() != self.size()) {
    return native::foreach_tensor_addcmul_scalarlist_slow_(self, t1, t2, values);
  }
  pointwise_<OR_OP_ADDCMUL>(self, t1, t2, values, "aten::_foreach_addcmul_.ScalarList");
}
void addcdiv_scalar_(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  if (!on_engine({self, t1, t2})) {
    return native::foreach_tensor_addcdiv_scalar_slow_(self, t1, t2, value);
  }
  pointwise_<OR_OP_ADDCDIV>(self, t1, t2, repeated(value, self.size()), "aten::_foreach_addcdiv_.Scalar");
}
std::vector<Tensor> addcdiv_scalar(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  if (!on_engine({self, t1, t2})) {
    return native::foreach_tensor_addcdiv_scalar_slow(self, t1, t2, value);
  }
  return pointwise<OR_OP_ADDCDIV>(self, t1, t2, repeated(value, self.size()), "aten::_foreach_addcdiv.Scalar");
}
void addcdiv_scalarlist_(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> values) {
  if (!on_engine({self, t1, t2}) || values.size() != self.size()) {
    return native::foreach_tensor_addcdiv_scalarlist_slow_(self, t1, t2, values);
  }
  pointwise_<OR_OP_ADDCDIV>(self, t1, t2, values, "aten::_foreach_addcdiv_.ScalarList");
}
std::vector<Tensor> addcdiv_scalarlist(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> values) {
  if (!on_engine({self, t1, t2}) || values.size() != self.size()) {
    return native::foreach_tensor_addcdiv_scalarlist_slow(self, t1, t2, values);
  }
  return pointwise<OR_OP_ADDCDIV>(self, t1, t2, values, "aten::_foreach_addcdiv.ScalarList");
}

void sqrt_list_(TensorList self) {
  if (!on_engine({self})) {
    return native::foreach_tensor_sqrt_slow_(self);
  }
  count("aten::_foreach_sqrt_");
  launch_elementwise_list(OR_OP_SQRT, {self, self});
}

std::vector<Tensor> sqrt_list(TensorList self) {
  if (!on_engine({self})) {
    return native::foreach_tensor_sqrt_slow(self);
  }
  count("aten::_foreach_sqrt");
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(OR_OP_SQRT, {out, self});
  return out;
}

// ---- a 0-dim device tensor for every position (clip_grad_norm_'s scale) ----

template <or_op Op>
void tensor_(TensorList self, const Tensor& other, const char* name, std::initializer_list<Scalar> args,
             void (*slow)(TensorList, const Tensor&)) {
  if (!on_engine({self}) || !device_scalar(self, other)) {
    return slow(self, other);
  }
  count(name);
  const std::vector<Tensor> others(self.size(), other);
  launch_elementwise_list(Op, {self, self, others}, args, -1, {}, 1u << 2);
}

template <or_op Op>
std::vector<Tensor> tensor(TensorList self, const Tensor& other, const char* name, std::initializer_list<Scalar> args,
                           std::vector<Tensor> (*slow)(TensorList, const Tensor&)) {
  if (!on_engine({self}) || !device_scalar(self, other)) {
    return slow(self, other);
  }
  count(name);
  std::vector<Tensor> out = outputs_like(self);
  const std::vector<Tensor> others(self.size(), other);
  launch_elementwise_list(Op, {out, self, others}, args, -1, {}, 1u << 2);
  return out;
}

void mul_tensor_(TensorList self, const Tensor& other) {
  tensor_<OR_OP_MUL>(self, other, "aten::_foreach_mul_.Tensor", {}, native::foreach_tensor_mul_tensor_kernel_slow_);
}
std::vector<Tensor> mul_tensor(TensorList self, const Tensor& other) {
  return tensor<OR_OP_MUL>(self, other, "aten::_foreach_mul.Tensor", {}, native::foreach_tensor_mul_tensor_kernel_slow);
}
void div_tensor_(TensorList self, const Tensor& other) {
  tensor_<OR_OP_DIV>(self, other, "aten::_foreach_div_.Tensor", {}, native::foreach_tensor_div_tensor_kernel_slow_);
}
std::vector<Tensor> div_tensor(TensorList self, const Tensor& other) {
  return tensor<OR_OP_DIV>(self, other, "aten::_foreach_div.Tensor", {}, native::foreach_tensor_div_tensor_kernel_slow);
}
void add_tensor_(TensorList self, const Tensor& other, const Scalar& alpha) {
  if (!on_engine({self}) || !device_scalar(self, other)) {
    return native::foreach_tensor_add_tensor_kernel_slow_(self, other, alpha);
  }
  count("aten::_foreach_add_.Tensor");
  const std::vector<Tensor> others(self.size(), other);
  launch_elementwise_list(OR_OP_ADD, {self, self, others}, {alpha}, -1, {}, 1u << 2);
}

// ---- sub (add of the negated scalar or alpha), neg, maximum, zero_, copy_ ----

void sub_scalar_(TensorList self, const Scalar& scalar) {
  if (!on_engine({self})) {
    return native::foreach_tensor_sub_scalar_kernel_slow_(self, scalar);
  }
  count("aten::_foreach_sub_.Scalar");
  launch_elementwise_list(OR_OP_ADD, {self, self}, {-1}, 2, repeated(scalar, self.size()));
}
void sub_list_(TensorList self, TensorList other, const Scalar& alpha) {
  if (!on_engine({self, other})) {
    return native::foreach_tensor_sub_list_kernel_slow_(self, other, alpha);
  }
  count("aten::_foreach_sub_.List");
  launch_elementwise_list(OR_OP_ADD, {self, self, other}, {-alpha});
}
std::vector<Tensor> sub_list(TensorList self, TensorList other, const Scalar& alpha) {
  if (!on_engine({self, other})) {
    return native::foreach_tensor_sub_list_kernel_slow(self, other, alpha);
  }
  count("aten::_foreach_sub.List");
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(OR_OP_ADD, {out, self, other}, {-alpha});
  return out;
}

void neg_(TensorList self) {
  if (!on_engine({self})) {
    return native::foreach_tensor_neg_slow_(self);
  }
  count("aten::_foreach_neg_");
  launch_elementwise_list(OR_OP_NEG, {self, self});
}
std::vector<Tensor> neg(TensorList self) {
  if (!on_engine({self})) {
    return native::foreach_tensor_neg_slow(self);
  }
  count("aten::_foreach_neg");
  std::vector<Tensor> out = outputs_like(self);
  launch_elementwise_list(OR_OP_NEG, {out, self});
  return out;
}

void maximum_list_(TensorList self, TensorList other) {
  list_<OR_OP_MAXIMUM>(self, other, "aten::_foreach_maximum_.List", native::foreach_tensor_clamp_min_list_kernel_slow_);
}
std::vector<Tensor> maximum_list(TensorList self, TensorList other) {
  return list<OR_OP_MAXIMUM>(self, other, "aten::_foreach_maximum.List",
                             native::foreach_tensor_clamp_min_list_kernel_slow);
}

void zero_(TensorList self) {
  if (!on_engine({self})) {
    return native::foreach_tensor_zero_slow_(self);
  }
  count("aten::_foreach_zero_");
  launch_elementwise_list(OR_OP_FILL, {self}, {0});
}

void copy_(TensorList self, TensorList src, bool non_blocking) {
  if (!on_engine({self, src})) {
    return native::foreach_tensor_copy_list_kernel_slow_(self, src, non_blocking);
  }
  count("aten::_foreach_copy_");
  launch_elementwise_list(OR_OP_COPY, {self, src});
}

} // namespace
} // namespace openreg::foreach_ops

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace openreg::foreach_ops;
  m.impl("_foreach_add_.Scalar", TORCH_FN(add_scalar_));
  m.impl("_foreach_add.Scalar", TORCH_FN(add_scalar));
  m.impl("_foreach_add_.ScalarList", TORCH_FN(add_scalarlist_));
  m.impl("_foreach_add.ScalarList", TORCH_FN(add_scalarlist));
  m.impl("_foreach_add_.List", TORCH_FN(add_list_));
  m.impl("_foreach_add.List", TORCH_FN(add_list));
  m.impl("_foreach_mul_.Scalar", TORCH_FN(mul_scalar_));
  m.impl("_foreach_mul.Scalar", TORCH_FN(mul_scalar));
  m.impl("_foreach_mul_.ScalarList", TORCH_FN(mul_scalarlist_));
  m.impl("_foreach_mul.ScalarList", TORCH_FN(mul_scalarlist));
  m.impl("_foreach_mul_.List", TORCH_FN(mul_list_));
  m.impl("_foreach_mul.List", TORCH_FN(mul_list));
  m.impl("_foreach_div_.Scalar", TORCH_FN(div_scalar_));
  m.impl("_foreach_div.Scalar", TORCH_FN(div_scalar));
  m.impl("_foreach_div_.ScalarList", TORCH_FN(div_scalarlist_));
  m.impl("_foreach_div.ScalarList", TORCH_FN(div_scalarlist));
  m.impl("_foreach_div_.List", TORCH_FN(div_list_));
  m.impl("_foreach_div.List", TORCH_FN(div_list));
  m.impl("_foreach_lerp_.Scalar", TORCH_FN(lerp_scalar_));
  m.impl("_foreach_lerp.Scalar", TORCH_FN(lerp_scalar));
  m.impl("_foreach_addcmul_.Scalar", TORCH_FN(addcmul_scalar_));
  m.impl("_foreach_addcmul.Scalar", TORCH_FN(addcmul_scalar));
  m.impl("_foreach_addcmul_.ScalarList", TORCH_FN(addcmul_scalarlist_));
  m.impl("_foreach_addcdiv_.Scalar", TORCH_FN(addcdiv_scalar_));
  m.impl("_foreach_addcdiv.Scalar", TORCH_FN(addcdiv_scalar));
  m.impl("_foreach_addcdiv_.ScalarList", TORCH_FN(addcdiv_scalarlist_));
  m.impl("_foreach_addcdiv.ScalarList", TORCH_FN(addcdiv_scalarlist));
  m.impl("_foreach_mul_.Tensor", TORCH_FN(mul_tensor_));
  m.impl("_foreach_mul.Tensor", TORCH_FN(mul_tensor));
  m.impl("_foreach_div_.Tensor", TORCH_FN(div_tensor_));
  m.impl("_foreach_div.Tensor", TORCH_FN(div_tensor));
  m.impl("_foreach_add_.Tensor", TORCH_FN(add_tensor_));
  m.impl("_foreach_sub_.Scalar", TORCH_FN(sub_scalar_));
  m.impl("_foreach_sub_.List", TORCH_FN(sub_list_));
  m.impl("_foreach_sub.List", TORCH_FN(sub_list));
  m.impl("_foreach_neg_", TORCH_FN(neg_));
  m.impl("_foreach_neg", TORCH_FN(neg));
  m.impl("_foreach_maximum_.List", TORCH_FN(maximum_list_));
  m.impl("_foreach_maximum.List", TORCH_FN(maximum_list));
  m.impl("_foreach_zero_", TORCH_FN(zero_));
  m.impl("_foreach_copy_", TORCH_FN(copy_));
  m.impl("_foreach_sqrt_", TORCH_FN(sqrt_list_));
  m.impl("_foreach_sqrt", TORCH_FN(sqrt_list));
}
