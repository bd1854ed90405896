// Structured ops on openreg: ATen's meta function decides output shape,
// dtype, memory format and (for TensorIterator ops) builds the iterator; an
// impl function launches the device kernel over it. One impl serves the
// functional, in-place and out= forms, as ATen's generated RegisterCPU.cpp
// does for CPU (its `structured_*_functional` / `_inplace` / `_out` classes):
//
//   functional  allocates outputs on the device (create_out);
//   in-place    checks the meta's output against `self` (dtype, size);
//   out=        resizes `out` when its shape is wrong (with the usual warning)
//               and checks dtype and device.
//
// A call with a tensor of a dtype the engine does not handle (complex, ...)
// goes to the CPU fallback before the meta runs, counted as a fallback run.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>

#include <ATen/TensorIterator.h>
#include <ATen/TensorMeta.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegKernels.h"
#include "torch-openreg/src/bridge.rs.h"

namespace at::meta {} // ATen's meta classes, when a translation unit includes their headers

namespace openreg::structured {

using at::Tensor;

// A new device tensor for a functional form's output.
Tensor create_out(at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& options);
// Checks an out= tensor (dtype, device) and resizes it if its shape differs.
void resize_out(const Tensor& out, at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& options);
// Checks that an in-place op's result fits `self`.
void check_inplace(const Tensor& self, at::IntArrayRef sizes, const at::TensorOptions& options);

// "add.Tensor": the schema name ATen registers an op under.
template <class Op>
const std::string& schema_name() {
  static const std::string name =
      std::string(Op::name).substr(std::string("aten::").size()) +
      (Op::overload_name[0] != '\0' ? std::string(".") + Op::overload_name : "");
  return name;
}

template <class Op>
const std::string& counted_name() {
  static const std::string name = "aten::" + schema_name<Op>();
  return name;
}

// Whether every tensor among `args` has a dtype the engine handles.
template <class... Args>
bool engine_handles(const Args&... args) {
  bool ok = true;
  const auto visit = [&](const auto& arg) {
    using A = std::decay_t<decltype(arg)>;
    if constexpr (std::is_same_v<A, Tensor>) {
      ok = ok && (!arg.defined() || engine::supports_dtype(arg.scalar_type()));
    } else if constexpr (std::is_same_v<A, std::optional<Tensor>>) {
      ok = ok && (!arg.has_value() || !arg->defined() || engine::supports_dtype(arg->scalar_type()));
    } else if constexpr (std::is_same_v<A, c10::Scalar>) {
      ok = ok && !arg.isComplex();
    }
  };
  (visit(args), ...);
  return ok;
}

template <class Meta>
constexpr bool is_iterator = std::is_base_of_v<at::TensorIteratorBase, Meta>;

// The functional form: outputs are new device tensors.
template <class Meta>
struct Functional final : Meta {
  void set_output_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                          at::TensorOptions options) override {
    set_output_raw_strided(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    outputs_[i] = create_out(sizes, strides, options);
    if constexpr (is_iterator<Meta>) {
      Meta::set_output_raw_strided(i, sizes, strides, options);
    }
  }
  const Tensor& maybe_get_output(int64_t i) override {
    return outputs_[i];
  }
  std::array<Tensor, 2> outputs_; // at most two outputs (max.dim: values, indices)
};

// The in-place form: the output is `self`.
template <class Meta>
struct Inplace final : Meta {
  explicit Inplace(Tensor& self) : self_(self) {}
  void set_output_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                          at::TensorOptions options) override {
    set_output_raw_strided(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    check_inplace(self_, sizes, options);
    if constexpr (is_iterator<Meta>) {
      Meta::set_output_raw_strided(i, sizes, strides, options);
    }
  }
  const Tensor& maybe_get_output(int64_t) override {
    return self_;
  }
  const Tensor& self_;
};

// The out= form: the outputs are `out` (or `out0`, `out1`), resized if needed.
template <class Meta>
struct Out final : Meta {
  explicit Out(const Tensor& out) : outs_{&out, nullptr} {}
  Out(const Tensor& out0, const Tensor& out1) : outs_{&out0, &out1} {}
  void set_output_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                          at::TensorOptions options) override {
    set_output_raw_strided(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    resize_out(*outs_[i], sizes, strides, options);
    if constexpr (is_iterator<Meta>) {
      Meta::set_output_raw_strided(i, sizes, strides, options);
    }
  }
  const Tensor& maybe_get_output(int64_t i) override {
    return *outs_[i];
  }
  std::array<const Tensor*, 2> outs_;
};

// Runs the CPU fallback for op `Op` with the unboxed arguments.
template <class Op, class... Args>
decltype(auto) fallback(Args&&... args) {
  return at::native::call_fallback_fn_symint<&kernels::cpu_fallback_kernel, Op>::call(std::forward<Args>(args)...);
}

// An impl that is the structured class's own: `Meta` is ATen's native class
// (at::native::structured_sum_out, ...), whose impl(self, rest..., out)
// calls a DispatchStub with a PrivateUse1 entry that launches the engine.
struct NativeImpl {};
inline constexpr NativeImpl native_impl{};

// Runs `Impl` (or, for NativeImpl, the class's own impl) after the meta.
template <auto Impl, class Op, class... Rest>
void run_impl(Op& op, const Tensor& self, Rest... rest) {
  if constexpr (std::is_same_v<std::decay_t<decltype(Impl)>, NativeImpl>) {
    op.impl(self, rest..., op.maybe_get_output(0));
  } else {
    Impl(op, self, rest...);
  }
}

// The three forms of one structured op with meta class `Meta` (whose
// meta(self, rest...) ATen defines) and device impl `Impl(iter, self, rest...)`.
template <class Meta, auto Impl, class Sig = decltype(&Meta::meta)>
struct Forms;
template <class Meta, auto Impl, class M, class... Rest>
struct Forms<Meta, Impl, void (M::*)(const Tensor&, Rest...)> {
  template <class Op>
  static Tensor functional(const Tensor& self, Rest... rest) {
    if (!engine_handles(self, rest...)) {
      return fallback<Op>(self, rest...);
    }
    openreg::count_op(counted_name<Op>(), true);
    Functional<Meta> op;
    op.meta(self, rest...);
    run_impl<Impl>(op, self, rest...);
    return std::move(op.outputs_[0]);
  }

  template <class Op>
  static Tensor& inplace(Tensor& self, Rest... rest) {
    if (!engine_handles(self, rest...)) {
      return fallback<Op>(self, rest...);
    }
    openreg::count_op(counted_name<Op>(), true);
    Inplace<Meta> op(self);
    op.meta(self, rest...);
    run_impl<Impl>(op, self, rest...);
    return self;
  }

  template <class Op>
  static Tensor& out(const Tensor& self, Rest... rest, Tensor& out) {
    if (!engine_handles(self, rest..., out)) {
      return fallback<Op>(self, rest..., out);
    }
    openreg::count_op(counted_name<Op>(), true);
    Out<Meta> op(out);
    op.meta(self, rest...);
    run_impl<Impl>(op, self, rest...);
    return out;
  }
};

// Registers the functional, in-place and out= forms of a structured op; a
// null op type (`void`) skips that form.
template <class Meta, auto Impl, class Functional, class Inplace, class OutOp>
void register_forms(torch::Library& m) {
  using F = Forms<Meta, Impl>;
  if constexpr (!std::is_void_v<Functional>) {
    m.impl(schema_name<Functional>().c_str(), TORCH_FN(F::template functional<Functional>));
  }
  if constexpr (!std::is_void_v<Inplace>) {
    m.impl(schema_name<Inplace>().c_str(), TORCH_FN(F::template inplace<Inplace>));
  }
  if constexpr (!std::is_void_v<OutOp>) {
    m.impl(schema_name<OutOp>().c_str(), TORCH_FN(F::template out<OutOp>));
  }
}

// An op ATen implements in a native function over a DispatchStub whose
// PrivateUse1 entry launches the engine: `Fn` is that native function
// (at::native::abs_out, ...). Calls with a dtype the engine does not handle
// go to the CPU fallback first.
template <class Op, class Sig = typename Op::schema>
struct DeviceNative;
template <class Op, class R, class... Args>
struct DeviceNative<Op, R(Args...)> {
  // `Fn` has exactly the schema's C++ signature, which picks the overload.
  template <R (*Fn)(Args...)>
  static R call(Args... args) {
    if (!engine_handles(args...)) {
      return fallback<Op>(args...);
    }
    openreg::count_op(counted_name<Op>(), true);
    return Fn(args...);
  }
};

// The names the registration macro looks up: ATen's meta classes and op
// types, plus `none` for a form an op does not have.
namespace metas {
using namespace ::at::meta; // declared (perhaps empty) by the line before `namespace openreg::structured`
} // namespace metas
namespace ops {
using namespace ::at::_ops;
using none = void;
} // namespace ops

} // namespace openreg::structured

// One structured op, all its forms: the meta class (`add_Tensor` for
// at::meta::structured_add_Tensor), the device impl, and the aten op of each
// form (at::_ops names; `none` for a form ATen lacks).
#define OPENREG_STRUCTURED(m, meta, impl, functional, inplace, out)                                       \
  ::openreg::structured::register_forms<::openreg::structured::metas::structured_##meta, &impl,          \
                                        ::openreg::structured::ops::functional,                          \
                                        ::openreg::structured::ops::inplace, ::openreg::structured::ops::out>(m)

// One structured op whose impl is ATen's own (at::native::structured_<cls>,
// e.g. `sum_out`), over DispatchStubs registered for PrivateUse1.
#define OPENREG_STRUCTURED_NATIVE(m, cls, functional, inplace, out)                                       \
  ::openreg::structured::register_forms<::at::native::structured_##cls, ::openreg::structured::native_impl, \
                                        ::openreg::structured::ops::functional,                          \
                                        ::openreg::structured::ops::inplace, ::openreg::structured::ops::out>(m)

// One form of an op over ATen's native function `fn` (see DeviceNative).
#define OPENREG_NATIVE(m, op, fn)                                                \
  m.impl(::openreg::structured::schema_name<::at::_ops::op>().c_str(),          \
         TORCH_FN((::openreg::structured::DeviceNative<::at::_ops::op>::template call<&fn>)))
