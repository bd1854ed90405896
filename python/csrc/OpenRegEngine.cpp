// The engine launcher (see OpenRegEngine.h). Device addresses written into
// the block are relocated by the runtime (the bridge's launch_engine): it
// checks that each lies on the launching device and turns it into an offset,
// so this file never interprets them (host/src/lib.rs, "Device addresses").

#include "OpenRegEngine.h"

#include <array>
#include <cstring>
#include <string>
#include <mutex>

#include <ATen/Dispatch.h>
#include <c10/util/Exception.h>

#include "OpenRegBridge.h"
#include "OpenRegGuard.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg::engine {
namespace {

// The index of the `elementwise` kernel in the engine module: the same on
// every device (the module is), so resolved once.
uint32_t elementwise_kernel(c10::DeviceIndex device) {
  static std::once_flag once;
  static uint32_t index = 0;
  std::call_once(once, [&] { index = OPENREG_CHECK(openreg::engine_kernel(device, "elementwise")); });
  return index;
}

// The op table of openreg_engine.h, by op: its name and the compute types it has.
constexpr std::array<or_kinds, OR_OP_COUNT> kKinds = {
#define OR_OP_KINDS(name, arity, kinds) OR_KINDS_##kinds,
    OR_ELEMENTWISE_OPS(OR_OP_KINDS)
#undef OR_OP_KINDS
};
constexpr std::array<const char*, OR_OP_COUNT> kNames = {
#define OR_OP_NAME(name, arity, kinds) #name,
    OR_ELEMENTWISE_OPS(OR_OP_NAME)
#undef OR_OP_NAME
};

or_scalar scalar_in(const c10::Scalar& value, or_compute compute) {
  or_scalar s{};
  if (compute == OR_COMPUTE_I64) {
    s.i = value.isBoolean() ? static_cast<int64_t>(value.toBool()) : value.toLong();
  } else {
    s.f = value.toDouble();
  }
  return s;
}

// A CPU scalar operand's value, read (on the host: it is a host tensor) in
// the compute type.
or_scalar cpu_scalar_in(const at::TensorIteratorBase& iter, int arg, or_compute compute) {
  const at::TensorBase& t = iter.tensor_base(arg);
  or_scalar s{};
  AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, t.scalar_type(), "openreg_cpu_scalar", [&] {
    const scalar_t v = *static_cast<const scalar_t*>(t.const_data_ptr());
    if (compute == OR_COMPUTE_I64) {
      s.i = static_cast<int64_t>(v);
    } else {
      s.f = static_cast<double>(v);
    }
  });
  return s;
}

} // namespace

bool supports_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
    case at::kHalf:
    case at::kFloat:
    case at::kDouble:
    case at::kBool:
    case at::kBFloat16:
      return true;
    default:
      return false;
  }
}

or_compute compute_of(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
    case at::kBFloat16:
    case at::kFloat:
      return OR_COMPUTE_F32;
    case at::kDouble:
      return OR_COMPUTE_F64;
    default:
      return OR_COMPUTE_I64;
  }
}

void check_dtype(bool ok, std::string_view op, at::ScalarType dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(ok, "\"", op, "\" not implemented for '", c10::toString(dtype), "'");
}

void launch_elementwise(at::TensorIteratorBase& iter, or_op op, std::initializer_list<c10::Scalar> args,
                        std::optional<or_compute> compute) {
  if (iter.numel() == 0) {
    return;
  }
  const int ntensors = iter.ntensors();
  TORCH_CHECK(ntensors <= OR_MAX_OPERANDS, "openreg: an elementwise op with ", ntensors, " operands (at most ",
              OR_MAX_OPERANDS, ")");
  TORCH_CHECK(args.size() <= OR_MAX_ARGS, "openreg: an elementwise op with ", args.size(), " arguments");
  // TensorIterator coalesces dimensions; more than OR_MAX_DIMS remain only for
  // tensors with many non-mergeable dimensions.
  TORCH_CHECK(iter.ndim() <= OR_MAX_DIMS, "openreg: elementwise ops over more than ", OR_MAX_DIMS,
              " non-coalescible dimensions are not supported (got ", iter.ndim(), ")");
  const or_compute how = compute ? *compute : compute_of(iter.common_dtype());
  // An op the engine has only for floats (or only for integers) is refused
  // here, as ATen's dtype dispatch refuses it on CPU: the kernel would trap.
  const or_kinds kinds = kKinds[op];
  const auto dtype = iter.maybe_common_dtype().value_or(iter.dtype(0));
  if ((kinds == OR_KINDS_FLOAT && how == OR_COMPUTE_I64) || (kinds == OR_KINDS_INT && how != OR_COMPUTE_I64) ||
      (kinds == OR_KINDS_NUM && dtype == at::kBool)) {
    check_dtype(false, std::string("openreg_") + kNames[op], dtype);
  }
  const c10::Device device = iter.device(0);
  TORCH_INTERNAL_ASSERT(device.type() == c10::DeviceType::PrivateUse1, "openreg: launch_elementwise on ", device);

  or_elementwise block{};
  std::array<uint32_t, OR_MAX_OPERANDS> pointers{};
  size_t npointers = 0;
  block.op = op;
  block.compute = how;
  block.ntensors = static_cast<uint32_t>(ntensors);
  block.ndim = static_cast<uint32_t>(std::max(iter.ndim(), 1));
  const auto shape = iter.shape();
  for (size_t d = 0; d < OR_MAX_DIMS; ++d) {
    block.sizes[d] = d < shape.size() ? shape[d] : 1;
  }
  for (int k = 0; k < ntensors; ++k) {
    const at::ScalarType dtype = iter.dtype(k);
    if (k > 0 && iter.is_cpu_scalar(k)) {
      block.scalar_mask |= 1u << k;
      block.scalars[k] = cpu_scalar_in(iter, k, how);
      block.dtypes[k] = static_cast<uint32_t>(dtype);
      continue;
    }
    TORCH_CHECK(iter.device(k) == device, "Expected all tensors to be on the same device, but found at least two "
                "devices, ", device, " and ", iter.device(k), "!");
    check_dtype(supports_dtype(dtype), "openreg elementwise", dtype);
    block.dtypes[k] = static_cast<uint32_t>(dtype);
    block.data[k] = reinterpret_cast<uint64_t>(iter.data_ptr(k));
    pointers[npointers++] = static_cast<uint32_t>(offsetof(or_elementwise, data) + sizeof(uint64_t) * k);
    const auto strides = iter.strides(k);
    for (size_t d = 0; d < strides.size() && d < OR_MAX_DIMS; ++d) {
      block.strides[k][d] = strides[d];
    }
  }
  size_t a = 0;
  for (const c10::Scalar& arg : args) {
    block.args[a++] = scalar_in(arg, how);
  }
  const auto index = device.index();
  rust::Slice<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(&block), sizeof(block));
  OPENREG_CHECK(openreg::launch_engine(index, current_stream(index).id(), elementwise_kernel(index), bytes,
                                       rust::Slice<const uint32_t>(pointers.data(), npointers)));
}

} // namespace openreg::engine
