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

// Whether `other` can be the one value of every position of lists whose
// first is `self`: a 0-dim tensor of self's dtype on self's device.
bool device_scalar(at::TensorList self, const at::Tensor& other) {
  return !self.empty() && other.defined() && other.dim() == 0 && other.device() == self[0].device() &&
         other.scalar_type() == self[0].scalar_type();
}

// New contiguous tensors shaped as `self`'s, for out-of-place forms.
std::vector<at::Tensor> outputs_like(at::TensorList self) {
  std::vector<at::Tensor> out;
  out.reserve(self.size());
  for (const at::Tensor& t : self) {
    out.push_back(at::empty_like(t, at::MemoryFormat::Contiguous));
  }
  return out;
}

// A scalar for every position (a scalar operand the same for all).
std::vector<at::Scalar> repeated(const at::Scalar& value, size_t n) {
  return std::vector<at::Scalar>(n, value);
}

void count(const char* op) {
  openreg::count_op(op, true);
}

// Runs an in-place foreach op: `launch(self)` computes it in one launch when
// `lists` (the op's tensor lists, self first) take one and `also` holds; else
// `slow()`, ATen's loop over the tensors.
template <class Slow, class Launch>
void in_place(std::initializer_list<TensorList> lists, bool also, const char* name, const Slow& slow,
              const Launch& launch) {
  if (!also || !on_engine(lists)) {
    return slow();
  }
  count(name);
  launch(*lists.begin());
}

// The out-of-place form: `launch(out)` into new tensors shaped as self's.
template <class Slow, class Launch>
std::vector<Tensor> into_new(std::initializer_list<TensorList> lists, bool also, const char* name, const Slow& slow,
                             const Launch& launch) {
  if (!also || !on_engine(lists)) {
    return slow();
  }
  count(name);
  std::vector<Tensor> out = outputs_like(*lists.begin());
  launch(TensorList(out));
  return out;
}

// ---- add, sub, mul, div: by a scalar, a scalar per tensor, a list or a device scalar ----

// The launches below are closures over views of their arguments (lists,
// scalars): each is made and called within one expression.

// `Op` with a scalar operand: one value (Scalar), one per tensor (ScalarList).
template <or_op Op>
auto by_values(TensorList self, at::ArrayRef<Scalar> values, std::initializer_list<Scalar> args = {}) {
  return [=](TensorList out) { launch_elementwise_list(Op, {out, self}, args, 2, values); };
}

// `Op` with a 0-dim device tensor as its second operand.
template <or_op Op>
auto by_tensor(TensorList self, const Tensor& other, std::initializer_list<Scalar> args = {}) {
  return [=, others = std::vector<Tensor>(self.size(), other)](TensorList out) {
    launch_elementwise_list(Op, {out, self, others}, args, -1, {}, 1u << 2);
  };
}

// `Op` with a second list.
template <or_op Op>
auto by_list(TensorList self, TensorList other, std::initializer_list<Scalar> args = {}) {
  return [=](TensorList out) { launch_elementwise_list(Op, {out, self, other}, args); };
}

void add_scalar_(TensorList self, const Scalar& s) {
  in_place({self}, true, "aten::_foreach_add_.Scalar", [&] { native::foreach_tensor_add_scalar_kernel_slow_(self, s); },
           by_values<OR_OP_ADD>(self, repeated(s, self.size()), {1}));
}
std::vector<Tensor> add_scalar(TensorList self, const Scalar& s) {
  return into_new({self}, true, "aten::_foreach_add.Scalar",
                  [&] { return native::foreach_tensor_add_scalar_kernel_slow(self, s); },
                  by_values<OR_OP_ADD>(self, repeated(s, self.size()), {1}));
}
void add_scalarlist_(TensorList self, at::ArrayRef<Scalar> s) {
  in_place({self}, s.size() == self.size(), "aten::_foreach_add_.ScalarList",
           [&] { native::foreach_tensor_add_scalarlist_kernel_slow_(self, s); }, by_values<OR_OP_ADD>(self, s, {1}));
}
std::vector<Tensor> add_scalarlist(TensorList self, at::ArrayRef<Scalar> s) {
  return into_new({self}, s.size() == self.size(), "aten::_foreach_add.ScalarList",
                  [&] { return native::foreach_tensor_add_scalarlist_kernel_slow(self, s); },
                  by_values<OR_OP_ADD>(self, s, {1}));
}
void add_list_(TensorList self, TensorList other, const Scalar& alpha) {
  in_place({self, other}, true, "aten::_foreach_add_.List",
           [&] { native::foreach_tensor_add_list_kernel_slow_(self, other, alpha); },
           by_list<OR_OP_ADD>(self, other, {alpha}));
}
std::vector<Tensor> add_list(TensorList self, TensorList other, const Scalar& alpha) {
  return into_new({self, other}, true, "aten::_foreach_add.List",
                  [&] { return native::foreach_tensor_add_list_kernel_slow(self, other, alpha); },
                  by_list<OR_OP_ADD>(self, other, {alpha}));
}
void add_tensor_(TensorList self, const Tensor& other, const Scalar& alpha) {
  in_place({self}, device_scalar(self, other), "aten::_foreach_add_.Tensor",
           [&] { native::foreach_tensor_add_tensor_kernel_slow_(self, other, alpha); },
           by_tensor<OR_OP_ADD>(self, other, {alpha}));
}

// sub: add of the negated scalar or alpha, as the single-tensor sub
void sub_scalar_(TensorList self, const Scalar& s) {
  in_place({self}, true, "aten::_foreach_sub_.Scalar", [&] { native::foreach_tensor_sub_scalar_kernel_slow_(self, s); },
           by_values<OR_OP_ADD>(self, repeated(s, self.size()), {-1}));
}
void sub_list_(TensorList self, TensorList other, const Scalar& alpha) {
  in_place({self, other}, true, "aten::_foreach_sub_.List",
           [&] { native::foreach_tensor_sub_list_kernel_slow_(self, other, alpha); },
           by_list<OR_OP_ADD>(self, other, {-alpha}));
}
std::vector<Tensor> sub_list(TensorList self, TensorList other, const Scalar& alpha) {
  return into_new({self, other}, true, "aten::_foreach_sub.List",
                  [&] { return native::foreach_tensor_sub_list_kernel_slow(self, other, alpha); },
                  by_list<OR_OP_ADD>(self, other, {-alpha}));
}

void mul_scalar_(TensorList self, const Scalar& s) {
  in_place({self}, true, "aten::_foreach_mul_.Scalar", [&] { native::foreach_tensor_mul_scalar_kernel_slow_(self, s); },
           by_values<OR_OP_MUL>(self, repeated(s, self.size())));
}
std::vector<Tensor> mul_scalar(TensorList self, const Scalar& s) {
  return into_new({self}, true, "aten::_foreach_mul.Scalar",
                  [&] { return native::foreach_tensor_mul_scalar_kernel_slow(self, s); },
                  by_values<OR_OP_MUL>(self, repeated(s, self.size())));
}
void mul_scalarlist_(TensorList self, at::ArrayRef<Scalar> s) {
  in_place({self}, s.size() == self.size(), "aten::_foreach_mul_.ScalarList",
           [&] { native::foreach_tensor_mul_scalarlist_kernel_slow_(self, s); }, by_values<OR_OP_MUL>(self, s));
}
std::vector<Tensor> mul_scalarlist(TensorList self, at::ArrayRef<Scalar> s) {
  return into_new({self}, s.size() == self.size(), "aten::_foreach_mul.ScalarList",
                  [&] { return native::foreach_tensor_mul_scalarlist_kernel_slow(self, s); },
                  by_values<OR_OP_MUL>(self, s));
}
void mul_list_(TensorList self, TensorList other) {
  in_place({self, other}, true, "aten::_foreach_mul_.List",
           [&] { native::foreach_tensor_mul_list_kernel_slow_(self, other); }, by_list<OR_OP_MUL>(self, other));
}
std::vector<Tensor> mul_list(TensorList self, TensorList other) {
  return into_new({self, other}, true, "aten::_foreach_mul.List",
                  [&] { return native::foreach_tensor_mul_list_kernel_slow(self, other); },
                  by_list<OR_OP_MUL>(self, other));
}
void mul_tensor_(TensorList self, const Tensor& other) {
  in_place({self}, device_scalar(self, other), "aten::_foreach_mul_.Tensor",
           [&] { native::foreach_tensor_mul_tensor_kernel_slow_(self, other); }, by_tensor<OR_OP_MUL>(self, other));
}
std::vector<Tensor> mul_tensor(TensorList self, const Tensor& other) {
  return into_new({self}, device_scalar(self, other), "aten::_foreach_mul.Tensor",
                  [&] { return native::foreach_tensor_mul_tensor_kernel_slow(self, other); },
                  by_tensor<OR_OP_MUL>(self, other));
}

void div_scalar_(TensorList self, const Scalar& s) {
  in_place({self}, true, "aten::_foreach_div_.Scalar", [&] { native::foreach_tensor_div_scalar_kernel_slow_(self, s); },
           by_values<OR_OP_DIV>(self, repeated(s, self.size())));
}
std::vector<Tensor> div_scalar(TensorList self, const Scalar& s) {
  return into_new({self}, true, "aten::_foreach_div.Scalar",
                  [&] { return native::foreach_tensor_div_scalar_kernel_slow(self, s); },
                  by_values<OR_OP_DIV>(self, repeated(s, self.size())));
}
void div_scalarlist_(TensorList self, at::ArrayRef<Scalar> s) {
  in_place({self}, s.size() == self.size(), "aten::_foreach_div_.ScalarList",
           [&] { native::foreach_tensor_div_scalarlist_kernel_slow_(self, s); }, by_values<OR_OP_DIV>(self, s));
}
std::vector<Tensor> div_scalarlist(TensorList self, at::ArrayRef<Scalar> s) {
  return into_new({self}, s.size() == self.size(), "aten::_foreach_div.ScalarList",
                  [&] { return native::foreach_tensor_div_scalarlist_kernel_slow(self, s); },
                  by_values<OR_OP_DIV>(self, s));
}
void div_list_(TensorList self, TensorList other) {
  in_place({self, other}, true, "aten::_foreach_div_.List",
           [&] { native::foreach_tensor_div_list_kernel_slow_(self, other); }, by_list<OR_OP_DIV>(self, other));
}
std::vector<Tensor> div_list(TensorList self, TensorList other) {
  return into_new({self, other}, true, "aten::_foreach_div.List",
                  [&] { return native::foreach_tensor_div_list_kernel_slow(self, other); },
                  by_list<OR_OP_DIV>(self, other));
}
void div_tensor_(TensorList self, const Tensor& other) {
  in_place({self}, device_scalar(self, other), "aten::_foreach_div_.Tensor",
           [&] { native::foreach_tensor_div_tensor_kernel_slow_(self, other); }, by_tensor<OR_OP_DIV>(self, other));
}
std::vector<Tensor> div_tensor(TensorList self, const Tensor& other) {
  return into_new({self}, device_scalar(self, other), "aten::_foreach_div.Tensor",
                  [&] { return native::foreach_tensor_div_tensor_kernel_slow(self, other); },
                  by_tensor<OR_OP_DIV>(self, other));
}

// ---- lerp, maximum, addcmul, addcdiv ----

void lerp_scalar_(TensorList self, TensorList end, const Scalar& weight) {
  in_place({self, end}, true, "aten::_foreach_lerp_.Scalar",
           [&] { native::foreach_tensor_lerp_list_kernel_slow_(self, end, weight); },
           by_list<OR_OP_LERP_SCALAR>(self, end, {weight}));
}
std::vector<Tensor> lerp_scalar(TensorList self, TensorList end, const Scalar& weight) {
  return into_new({self, end}, true, "aten::_foreach_lerp.Scalar",
                  [&] { return native::foreach_tensor_lerp_list_kernel_slow(self, end, weight); },
                  by_list<OR_OP_LERP_SCALAR>(self, end, {weight}));
}
void maximum_list_(TensorList self, TensorList other) {
  in_place({self, other}, true, "aten::_foreach_maximum_.List",
           [&] { native::foreach_tensor_clamp_min_list_kernel_slow_(self, other); },
           by_list<OR_OP_MAXIMUM>(self, other));
}
std::vector<Tensor> maximum_list(TensorList self, TensorList other) {
  return into_new({self, other}, true, "aten::_foreach_maximum.List",
                  [&] { return native::foreach_tensor_clamp_min_list_kernel_slow(self, other); },
                  by_list<OR_OP_MAXIMUM>(self, other));
}

// addcmul or addcdiv (`Op`) of t1 and t2 with one value per tensor (args[0]).
template <or_op Op>
auto pointwise(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> values) {
  return [=](TensorList out) { launch_elementwise_list(Op, {out, self, t1, t2}, {}, 0, values); };
}

void addcmul_scalar_(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  in_place({self, t1, t2}, true, "aten::_foreach_addcmul_.Scalar",
           [&] { native::foreach_tensor_addcmul_scalar_slow_(self, t1, t2, value); },
           pointwise<OR_OP_ADDCMUL>(self, t1, t2, repeated(value, self.size())));
}
std::vector<Tensor> addcmul_scalar(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  return into_new({self, t1, t2}, true, "aten::_foreach_addcmul.Scalar",
                  [&] { return native::foreach_tensor_addcmul_scalar_slow(self, t1, t2, value); },
                  pointwise<OR_OP_ADDCMUL>(self, t1, t2, repeated(value, self.size())));
}
void addcmul_scalarlist_(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> values) {
  in_place({self, t1, t2}, values.size() == self.size(), "aten::_foreach_addcmul_.ScalarList",
           [&] { native::foreach_tensor_addcmul_scalarlist_slow_(self, t1, t2, values); },
           pointwise<OR_OP_ADDCMUL>(self, t1, t2, values));
}
void addcdiv_scalar_(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  in_place({self, t1, t2}, true, "aten::_foreach_addcdiv_.Scalar",
           [&] { native::foreach_tensor_addcdiv_scalar_slow_(self, t1, t2, value); },
           pointwise<OR_OP_ADDCDIV>(self, t1, t2, repeated(value, self.size())));
}
std::vector<Tensor> addcdiv_scalar(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  return into_new({self, t1, t2}, true, "aten::_foreach_addcdiv.Scalar",
                  [&] { return native::foreach_tensor_addcdiv_scalar_slow(self, t1, t2, value); },
                  pointwise<OR_OP_ADDCDIV>(self, t1, t2, repeated(value, self.size())));
}
void addcdiv_scalarlist_(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> values) {
  in_place({self, t1, t2}, values.size() == self.size(), "aten::_foreach_addcdiv_.ScalarList",
           [&] { native::foreach_tensor_addcdiv_scalarlist_slow_(self, t1, t2, values); },
           pointwise<OR_OP_ADDCDIV>(self, t1, t2, values));
}
std::vector<Tensor> addcdiv_scalarlist(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> values) {
  return into_new({self, t1, t2}, values.size() == self.size(), "aten::_foreach_addcdiv.ScalarList",
                  [&] { return native::foreach_tensor_addcdiv_scalarlist_slow(self, t1, t2, values); },
                  pointwise<OR_OP_ADDCDIV>(self, t1, t2, values));
}

// ---- sqrt, neg, zero_, copy_ ----

template <or_op Op>
auto unary(TensorList self) {
  return [=](TensorList out) { launch_elementwise_list(Op, {out, self}); };
}

void sqrt_list_(TensorList self) {
  in_place({self}, true, "aten::_foreach_sqrt_", [&] { native::foreach_tensor_sqrt_slow_(self); },
           unary<OR_OP_SQRT>(self));
}
std::vector<Tensor> sqrt_list(TensorList self) {
  return into_new({self}, true, "aten::_foreach_sqrt", [&] { return native::foreach_tensor_sqrt_slow(self); },
                  unary<OR_OP_SQRT>(self));
}
void neg_(TensorList self) {
  in_place({self}, true, "aten::_foreach_neg_", [&] { native::foreach_tensor_neg_slow_(self); }, unary<OR_OP_NEG>(self));
}
std::vector<Tensor> neg(TensorList self) {
  return into_new({self}, true, "aten::_foreach_neg", [&] { return native::foreach_tensor_neg_slow(self); },
                  unary<OR_OP_NEG>(self));
}
void zero_(TensorList self) {
  in_place({self}, true, "aten::_foreach_zero_", [&] { native::foreach_tensor_zero_slow_(self); },
           [](TensorList out) { launch_elementwise_list(OR_OP_FILL, {out}, {0}); });
}
void copy_(TensorList self, TensorList src, bool non_blocking) {
  in_place({self, src}, true, "aten::_foreach_copy_",
           [&] { native::foreach_tensor_copy_list_kernel_slow_(self, src, non_blocking); }, unary<OR_OP_COPY>(src));
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
