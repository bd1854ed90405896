// The linear-algebra family on the device engine: mm, addmm, bmm, baddbmm,
// addmv (and mv, which ATen builds on it), dot and vdot. matmul, linear,
// einsum and tensordot are composites of these, so they follow without
// entries. Also the cross product and pairwise distances (cdist), as
// elementwise compositions after ATen's own checks.
//
// The structured ops keep ATen's meta functions (shape, dtype and broadcast
// checks, output allocation; OpenRegStructured.h); each impl below hands its
// operands' sizes and strides to the engine's `gemm` kernel
// (engine::launch_gemm), which reads transposed, sliced and expanded
// operands without copies.

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Cross.h>
#include <ATen/native/Distance.h>
#include <ATen/ops/_cdist_backward_native.h>
#include <ATen/ops/_cdist_forward_native.h>
#include <ATen/ops/addbmm_native.h>
#include <ATen/ops/linalg_cross_native.h>
#include <ATen/ops/addmm_meta.h>
#include <ATen/ops/addmv_meta.h>
#include <ATen/ops/baddbmm_meta.h>
#include <ATen/ops/bmm_meta.h>
#include <ATen/ops/mm_meta.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegStructured.h"

namespace openreg::linalg {
namespace {

using at::Tensor;
using c10::Scalar;
using engine::GemmOperand;

bool overlaps(const Tensor& out, const Tensor& input) {
  const auto status = at::get_overlap_status(out, input);
  return status == at::MemOverlapStatus::Full || status == at::MemOverlapStatus::Partial;
}

// out = beta * self + alpha * a @ b over `batch` matrices, out's shape. `self`
// (broadcast to out) is read only when beta != 0, as ATen does for CPU; it
// may be out itself (the in-place forms).
void gemm(const Tensor& out, const Tensor& self, const GemmOperand& a, const GemmOperand& b, int64_t batch,
          int64_t m, int64_t n, int64_t k, const Scalar& beta, const Scalar& alpha) {
  TORCH_CHECK(self.device() == out.device(), "Expected all tensors to be on the same device, but found at least two "
              "devices, ", out.device(), " and ", self.device(), "!");
  if (out.numel() == 0) {
    return;
  }
  const bool read_self = beta.isBoolean() ? beta.toBool() : beta.toComplexDouble() != 0.0;
  if (read_self && !self.is_same(out)) {
    out.copy_(self.expand(out.sizes()));
  }
  // The kernel reads a and b while it writes out: an out that shares memory
  // with them gets its result through a temporary.
  if (overlaps(out, a.tensor) || overlaps(out, b.tensor)) {
    const Tensor result = read_self ? out.clone(at::MemoryFormat::Contiguous) : at::empty_like(out, at::MemoryFormat::Contiguous);
    gemm(result, result, a, b, batch, m, n, k, beta, alpha);
    out.copy_(result);
    return;
  }
  GemmOperand c = out.dim() == 1 ? GemmOperand{out, {0, out.stride(0), 0}} : engine::gemm_matrices(out);
  engine::launch_gemm(batch, m, n, k, a, b, c, beta, alpha);
}

// The structured impls: out is the meta's output (new, self, or out=).

void mm_impl(at::impl::MetaBase& op, const Tensor& self, const Tensor& mat2) {
  const Tensor& out = op.maybe_get_output(0);
  gemm(out, out, engine::gemm_matrices(self), engine::gemm_matrices(mat2), 1, self.size(0), mat2.size(1),
       self.size(1), 0, 1);
}

void addmm_impl(at::impl::MetaBase& op, const Tensor& self, const Tensor& mat1, const Tensor& mat2,
                const Scalar& beta, const Scalar& alpha) {
  const Tensor& out = op.maybe_get_output(0);
  gemm(out, self, engine::gemm_matrices(mat1), engine::gemm_matrices(mat2), 1, mat1.size(0), mat2.size(1),
       mat1.size(1), beta, alpha);
}

void bmm_impl(at::impl::MetaBase& op, const Tensor& self, const Tensor& mat2) {
  const Tensor& out = op.maybe_get_output(0);
  gemm(out, out, engine::gemm_matrices(self), engine::gemm_matrices(mat2), self.size(0), self.size(1),
       mat2.size(2), self.size(2), 0, 1);
}

void baddbmm_impl(at::impl::MetaBase& op, const Tensor& self, const Tensor& batch1, const Tensor& batch2,
                  const Scalar& beta, const Scalar& alpha) {
  const Tensor& out = op.maybe_get_output(0);
  gemm(out, self, engine::gemm_matrices(batch1), engine::gemm_matrices(batch2), batch1.size(0), batch1.size(1),
       batch2.size(2), batch1.size(2), beta, alpha);
}

// out (m) = beta * self + alpha * mat (m x k) @ vec (k): vec is a k x 1 matrix.
void addmv_impl(at::impl::MetaBase& op, const Tensor& self, const Tensor& mat, const Tensor& vec,
                const Scalar& beta, const Scalar& alpha) {
  const Tensor& out = op.maybe_get_output(0);
  gemm(out, self, engine::gemm_matrices(mat), GemmOperand{vec, {0, vec.stride(0), 0}}, 1, mat.size(0), 1,
       mat.size(1), beta, alpha);
}

// dot and vdot (equal for real dtypes): a 1 x k row times a k x 1 column.
Tensor dot_kernel(const Tensor& self, const Tensor& other) {
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ", self.dim(), "D and ",
              other.dim(), "D tensors");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              self.scalar_type(), " and ", other.scalar_type());
  TORCH_CHECK(self.numel() == other.numel(), "inconsistent tensor size, expected tensor [", self.numel(),
              "] and src [", other.numel(), "] to have the same number of elements, but got ", self.numel(), " and ",
              other.numel(), " elements respectively");
  engine::check_dtype(self.scalar_type() != at::kBool, "dot", self.scalar_type());
  Tensor out = at::empty({}, self.options());
  const int64_t k = self.numel();
  // The row is never stepped; a row stride of k elements keeps the kernel on
  // its dot-product path.
  engine::launch_gemm(1, 1, 1, k, GemmOperand{self, {0, k * self.stride(0), self.stride(0)}},
                      GemmOperand{other, {0, other.stride(0), 0}}, GemmOperand{out, {0, 0, 0}}, 0, 1);
  return out;
}

template <class Op>
Tensor dot_entry(const Tensor& self, const Tensor& other) {
  if (!structured::engine_handles(self, other)) {
    return structured::fallback<Op>(self, other);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  return dot_kernel(self, other);
}

// ---- cross product and pairwise distances (DispatchStub entries) ----

// result = a x b along `d` (a and b broadcast to result's shape): component
// i is a_j b_k - a_k b_j for (i, j, k) cyclic.
void cross_kernel(const Tensor& result, const Tensor& a, const Tensor& b, const int64_t d) {
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t j = (i + 1) % 3, k = (i + 2) % 3;
    Tensor component = result.select(d, i);
    at::sub_out(component, a.select(d, j) * b.select(d, k), a.select(d, k) * b.select(d, j));
  }
}

// The p-norm distance of every row of x1 (b, r1, m) to every row of x2
// (b, r2, m) into result (b * r1 * r2 elements): ATen's _cdist_forward calls this for
// the direct path (its mm-based Euclidean path is a composite already).
void cdist_kernel(Tensor& result, const Tensor& x1, const Tensor& x2, const double p) {
  const Tensor diff = x1.unsqueeze(-2) - x2.unsqueeze(-3);
  result.copy_(at::linalg_vector_norm(diff, p, -1, false, std::nullopt).view(result.sizes()));
}

// The gradient of cdist with respect to x1 (b, r1, m), from the gradient
// and the distances (b, r1, r2), as CPU's kernel defines it per p: 0 where a
// distance is 0 (and, for p < 1, where a difference is).
void cdist_backward_kernel(Tensor& grad_x1, const Tensor& grad, const Tensor& x1, const Tensor& x2, const double p,
                           const Tensor& cdist) {
  if (p == 0.0 || grad_x1.numel() == 0) {
    grad_x1.zero_();
    return;
  }
  const Tensor diff = x1.unsqueeze(-2) - x2.unsqueeze(-3);
  const Tensor dist = cdist.unsqueeze(-1);
  const Tensor g = grad.unsqueeze(-1);
  Tensor each;
  if (p == 1.0) {
    each = g * diff.sign();
  } else if (p == 2.0) {
    each = at::where(dist == 0, 0, g * diff / dist);
  } else if (std::isinf(p)) {
    each = g * diff.sign() * (diff.abs() == dist);
  } else if (p < 1.0) {
    each = at::where((dist == 0).logical_or(diff == 0), 0,
                     g * diff.sign() * diff.abs().pow(p - 1) / dist.pow(p - 1));
  } else {
    each = at::where(dist == 0, 0, g * diff * diff.abs().pow(p - 2) / dist.pow(p - 1));
  }
  grad_x1.copy_(each.sum(-2).view(grad_x1.sizes()));
}

} // namespace
} // namespace openreg::linalg

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(cross_stub, &openreg::linalg::cross_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(cdist_stub, &openreg::linalg::cdist_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(cdist_backward_stub, &openreg::linalg::cdist_backward_kernel)
} // namespace at::native

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace openreg::linalg;
  OPENREG_STRUCTURED(m, mm, mm_impl, mm, none, mm_out);
  OPENREG_STRUCTURED(m, addmm, addmm_impl, addmm, addmm_, addmm_out);
  OPENREG_STRUCTURED(m, bmm, bmm_impl, bmm, none, bmm_out);
  OPENREG_STRUCTURED(m, baddbmm, baddbmm_impl, baddbmm, baddbmm_, baddbmm_out);
  OPENREG_STRUCTURED(m, addmv, addmv_impl, addmv, addmv_, addmv_out);
  m.impl("dot", TORCH_FN(dot_entry<at::_ops::dot>));
  m.impl("vdot", TORCH_FN(dot_entry<at::_ops::vdot>));
  OPENREG_STRUCTURED_NATIVE(m, linalg_cross_out, linalg_cross, none, linalg_cross_out);
  OPENREG_NATIVE(m, addbmm, at::native::addbmm); // ATen's loop of addmm_ over the batch
  OPENREG_NATIVE(m, addbmm_, at::native::addbmm_);
  OPENREG_NATIVE(m, addbmm_out, at::native::addbmm_out);
  OPENREG_NATIVE(m, _cdist_forward, at::native::_cdist_forward);
  OPENREG_NATIVE(m, _cdist_backward, at::native::_cdist_backward);
}
