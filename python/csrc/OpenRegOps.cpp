// Operator registration for openreg (PrivateUse1): which kernel serves which
// aten op. Registration only; the kernels are in OpenRegKernels.cpp.
//
// Every registered op is counted per run (openreg::count_op, read from
// Python with torch_openreg._C.op_counts()): native and device kernels as
// device runs, the CPU fallback as fallback runs.
//
// The ops that run on the device engine (elementwise, ...) are registered
// with their family, one line per op: OpenRegElementwise.cpp.

#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "OpenRegKernels.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg {
namespace {

// "aten::add.Tensor", the name the fallback counts under too.
template <class Op>
const std::string& op_name() {
  static const std::string name =
      std::string(Op::name) + (Op::overload_name[0] != '\0' ? std::string(".") + Op::overload_name : "");
  return name;
}

// A native kernel, counted as a device run.
template <class Op, auto Kernel>
struct Native;
template <class Op, class R, class... Args, R (*Kernel)(Args...)>
struct Native<Op, Kernel> {
  static R call(Args... args) {
    openreg::count_op(op_name<Op>(), true);
    return Kernel(std::forward<Args>(args)...);
  }
};

} // namespace
} // namespace openreg

namespace openreg {
// Composite ops registered to the CPU fallback as a whole (see below).
constexpr const char* kHostComposites[] = {"_convolution"};
} // namespace openreg

#define OPENREG_NATIVE(op, kernel) TORCH_FN((::openreg::Native<at::_ops::op, &::openreg::kernels::kernel>::call))

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // creation
  m.impl("empty.memory_format", OPENREG_NATIVE(empty_memory_format, empty_memory_format_kernel));
  m.impl("empty_strided", OPENREG_NATIVE(empty_strided, empty_strided_kernel));

  // views: they alias the device storage
  m.impl("as_strided", OPENREG_NATIVE(as_strided, as_strided_kernel));
  m.impl("view", OPENREG_NATIVE(view, view_kernel));
  m.impl("_reshape_alias", OPENREG_NATIVE(_reshape_alias, reshape_alias_kernel));
  m.impl("unfold", OPENREG_NATIVE(unfold, unfold_kernel));
  m.impl("view_as_real", OPENREG_NATIVE(view_as_real, view_as_real_kernel));
  m.impl("view_as_complex", OPENREG_NATIVE(view_as_complex, view_as_complex_kernel));
  m.impl("is_set_to", OPENREG_NATIVE(is_set_to, is_set_to_kernel));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(::openreg::kernels::has_compatible_shallow_copy_type_kernel));

  // storage
  m.impl("resize_", OPENREG_NATIVE(resize_, resize_kernel));
  m.impl("set_.source_Storage", OPENREG_NATIVE(set__source_Storage, set_storage_kernel));
  m.impl("set_.source_Storage_storage_offset",
         OPENREG_NATIVE(set__source_Storage_storage_offset, set_storage_offset_kernel));
  m.impl("set_.source_Tensor", OPENREG_NATIVE(set__source_Tensor, set_tensor_kernel));
  m.impl("set_", OPENREG_NATIVE(set_, set_empty_kernel));
  m.impl("record_stream", OPENREG_NATIVE(record_stream, record_stream_kernel));

  // copies
  // (counted by the kernel: as a device run, or as a fallback run when it
  // had to convert data on the host)
  m.impl("_copy_from", TORCH_FN(::openreg::kernels::copy_from_kernel));
  m.impl("_copy_from_and_resize", TORCH_FN(::openreg::kernels::copy_from_and_resize_kernel));
  m.impl("_local_scalar_dense", OPENREG_NATIVE(_local_scalar_dense, local_scalar_dense_kernel));

  // decompositions (not counted: the ops they call are)
  m.impl("native_dropout", TORCH_FN(::openreg::kernels::native_dropout_kernel));
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(::openreg::kernels::fused_lstm_cell_kernel));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(::openreg::kernels::fused_lstm_cell_backward_kernel));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(::openreg::kernels::fused_gru_cell_kernel));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(::openreg::kernels::fused_gru_cell_backward_kernel));

  // Composite ops whose composite picks a backend by device type and finds
  // none for PrivateUse1 (_convolution would call convolution_overrideable,
  // which only raises): the fallback runs the whole op on the CPU instead.
  for (const char* name : ::openreg::kHostComposites) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&::openreg::kernels::cpu_fallback_kernel>());
  }
}

// The copy kernels handle the conjugate and negative bits themselves (they
// stage through CPU copies that resolve them). Without these fallthroughs
// the math-bit fallbacks would resolve a conj/neg source by cloning it, and a
// clone copies with _copy_from: endless recursion.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

// Every other op: the CPU fallback.
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&::openreg::kernels::cpu_fallback_kernel>());
}

namespace openreg {
namespace {

// The ops register_structured_ops_to_fallback sent to the CPU fallback.
std::unordered_set<c10::OperatorName>& structured_to_fallback() {
  static auto* names = new std::unordered_set<c10::OperatorName>();
  return *names;
}

bool returns_a_view(const c10::FunctionSchema& schema) {
  for (const auto& ret : schema.returns()) {
    if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite()) {
      return true;
    }
  }
  return false;
}

// Structured aten ops (mm, sum, mse_loss, the in-place comparisons, ... about
// 400 of them) also have a CompositeExplicitAutogradNonFunctional kernel,
// which the dispatcher prefers to a backend fallback. That kernel allocates
// the output on the device and runs the op's .out variant, which then goes
// through the fallback: a device allocation, a resize and an extra copy per
// call, and CPU's resize warnings. Their own CPU kernels do the same work in
// one fallback run, so these ops are registered to the fallback directly.
// Done at import time, once every aten op is known.
void register_structured_ops_to_fallback() {
  // Leaked: the registrations last as long as this library object.
  auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    const auto op = dispatcher.findOp(name);
    if (!op || name.name.rfind("aten::", 0) != 0 || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
        returns_a_view(op->schema())) {
      continue;
    }
    std::string unqualified = name.name.substr(std::string("aten::").size());
    if (!name.overload_name.empty()) {
      unqualified += "." + name.overload_name;
    }
    library->impl(unqualified.c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&::openreg::kernels::cpu_fallback_kernel>());
    structured_to_fallback().insert(name);
  }
}

// ---- out= and in-place forms over a functional device kernel ----

// The out= forms among those whose CPU kernels write only their result's
// dtype, with CPU's message; the others cast as copy_ does.
const char* exact_dtype_message(const std::string& name) {
  if (name == "aten::isposinf.out") {
    return "isposinf does not support non-boolean outputs.";
  }
  if (name == "aten::isneginf.out") {
    return "isneginf does not support non-boolean outputs.";
  }
  return nullptr;
}

// An out= form (`x.out`, `x.grad_input`, ...) or in-place form (`x_`) whose
// functional form has a device kernel: the functional form it runs.
struct OverFunctional {
  c10::OperatorHandle functional;
  size_t nout; // trailing out= arguments (0: in place, into the first argument)
  const char* exact_dtype; // CPU's message if out= must have the result's dtype (exact_dtype_message)
};

std::unordered_map<c10::OperatorName, OverFunctional>& over_functional() {
  static auto* forms = new std::unordered_map<c10::OperatorName, OverFunctional>();
  return *forms;
}

// The boxed kernel of those forms: the functional form runs on the device,
// then each result is copied (a device copy) into its out= tensor, resized
// as out= tensors are, or into `self`; results that cannot be cast to the
// destination's dtype raise as on CPU. One implementation thus serves the
// functional, out= and in-place forms of these ops.
void run_over_functional(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // A functional kernel may itself call its out= form (ATen's logsumexp does,
  // for inputs the device kernel leaves to it): on re-entry, that form takes
  // the CPU fallback, as it did before it had this kernel.
  thread_local std::unordered_set<c10::OperatorName> running;
  if (!running.insert(op.operator_name()).second) {
    ::openreg::kernels::cpu_fallback_kernel(op, stack);
    return;
  }
  struct Leave {
    const c10::OperatorName& name;
    ~Leave() { running.erase(name); }
  } leave{op.operator_name()};
  const OverFunctional& form = over_functional().at(op.operator_name());
  const size_t nargs = op.schema().arguments().size();
  std::vector<c10::IValue> args(stack->end() - static_cast<std::ptrdiff_t>(nargs), stack->end());
  torch::jit::drop(*stack, nargs);
  const size_t ninputs = nargs - form.nout;
  torch::jit::Stack call(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(ninputs));
  form.functional.callBoxed(&call);
  const std::string name = op.operator_name().name + (op.operator_name().overload_name.empty()
                                                          ? std::string()
                                                          : "." + op.operator_name().overload_name);
  openreg::count_op(name, true);
  const size_t nresults = form.nout == 0 ? 1 : form.nout;
  TORCH_INTERNAL_ASSERT(call.size() >= nresults, "openreg: ", name, " over its functional form");
  for (size_t i = 0; i < nresults; ++i) {
    const at::Tensor& dst = form.nout == 0 ? args[0].toTensor() : args[ninputs + i].toTensor();
    const at::Tensor& result = call[i].toTensor();
    TORCH_CHECK(c10::canCast(result.scalar_type(), dst.scalar_type()), "result type ", result.scalar_type(),
                " can't be cast to the desired output type ", dst.scalar_type());
    if (form.exact_dtype != nullptr) {
      TORCH_CHECK(dst.scalar_type() == result.scalar_type(), form.exact_dtype);
    }
    if (form.nout == 0) {
      TORCH_CHECK(dst.sizes() == result.sizes(), "output with shape ", dst.sizes(),
                  " doesn't match the broadcast shape ", result.sizes());
    } else {
      at::native::resize_output(dst, result.sizes());
    }
    dst.copy_(result);
  }
  if (form.nout == 0) {
    stack->push_back(args[0]);
  } else {
    for (size_t i = 0; i < form.nout; ++i) {
      stack->push_back(args[ninputs + i]);
    }
  }
}

// The schema's arguments other than out= ones, as (name, type) pairs.
std::vector<std::pair<std::string, std::string>> inputs_of(const c10::FunctionSchema& schema, bool skip_first) {
  std::vector<std::pair<std::string, std::string>> inputs;
  for (size_t i = skip_first ? 1 : 0; i < schema.arguments().size(); ++i) {
    const auto& arg = schema.arguments()[i];
    if (!arg.is_out()) {
      inputs.emplace_back(arg.name(), arg.type()->str());
    }
  }
  return inputs;
}

// Registers run_over_functional for every aten out= form (and in-place form
// `name_`) with neither a device kernel nor a composite one, whose
// functional form (same name, same other arguments) has one of ours. Runs
// before the structured ops go to the fallback, so only kernels written for
// the device count.
void register_forms_over_functionals() {
  auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  const auto names = dispatcher.getAllOpNames();
  std::unordered_map<std::string, std::vector<c10::OperatorHandle>> by_name;
  for (const auto& name : names) {
    if (name.name.rfind("aten::", 0) == 0) {
      if (auto op = dispatcher.findOp(name)) {
        by_name[name.name].push_back(*op);
      }
    }
  }
  const auto ours = [](const c10::OperatorHandle& op) {
    for (const char* composite : kHostComposites) {
      if (op.operator_name().name == std::string("aten::") + composite) {
        return false; // registered, but to the fallback
      }
    }
    return op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1);
  };
  for (const auto& [base, ops] : by_name) {
    for (const auto& op : ops) {
      // (a composite kernel already runs such a form on the device, through other ops)
      if (ours(op) || op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
          op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
          op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
        continue;
      }
      const auto& schema = op.schema();
      size_t nout = 0;
      for (const auto& arg : schema.arguments()) {
        nout += arg.is_out() ? 1 : 0;
      }
      const bool inplace = nout == 0 && base.size() > 1 && base.back() == '_' && base[base.size() - 2] != '_' &&
                           !schema.arguments().empty() && schema.arguments()[0].alias_info() != nullptr &&
                           schema.arguments()[0].alias_info()->isWrite() && schema.returns().size() == 1;
      if (nout == 0 && !inplace) {
        continue;
      }
      bool trailing = true; // out= arguments come last
      for (size_t i = schema.arguments().size() - nout; i < schema.arguments().size(); ++i) {
        trailing = trailing && schema.arguments()[i].is_out();
      }
      if (!trailing || (nout > 0 && schema.returns().size() != nout)) {
        continue;
      }
      const std::string functional_name = inplace ? base.substr(0, base.size() - 1) : base;
      const auto found = by_name.find(functional_name);
      if (found == by_name.end()) {
        continue;
      }
      const auto wanted = inputs_of(schema, false);
      for (const auto& candidate : found->second) {
        const auto& fs = candidate.schema();
        if (!ours(candidate) || fs.is_mutable() || returns_a_view(fs) || fs.returns().size() < (nout ? nout : 1) ||
            inputs_of(fs, false) != wanted) {
          continue;
        }
        const std::string qualified = op.operator_name().overload_name.empty()
                                          ? op.operator_name().name
                                          : op.operator_name().name + "." + op.operator_name().overload_name;
        over_functional().emplace(op.operator_name(), OverFunctional{candidate, nout, exact_dtype_message(qualified)});
        std::string unqualified = base.substr(std::string("aten::").size());
        if (!op.operator_name().overload_name.empty()) {
          unqualified += "." + op.operator_name().overload_name;
        }
        library->impl(unqualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_over_functional>());
        break;
      }
    }
  }
}

} // namespace

bool runs_through_fallback(rust::Str op) {
  register_ops();
  const std::string text(op);
  const auto dot = text.find('.');
  c10::OperatorName name(text.substr(0, dot), dot == std::string::npos ? "" : text.substr(dot + 1));
  const auto handle = c10::Dispatcher::singleton().findOp(name);
  if (!handle) {
    return false;
  }
  if (structured_to_fallback().count(name) != 0) {
    return true;
  }
  for (const char* composite : kHostComposites) {
    if (name.overload_name.empty() && name.name == std::string("aten::") + composite) {
      return true;
    }
  }
  // A kernel of our own, or a composite of other ops, runs on the device.
  for (auto key : {c10::DispatchKey::PrivateUse1, c10::DispatchKey::CompositeExplicitAutograd,
                   c10::DispatchKey::CompositeExplicitAutogradNonFunctional,
                   c10::DispatchKey::CompositeImplicitAutograd}) {
    if (handle->hasKernelForDispatchKey(key)) {
      return false;
    }
  }
  return true;
}

void register_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_forms_over_functionals();
    register_structured_ops_to_fallback();
  });
}

} // namespace openreg
