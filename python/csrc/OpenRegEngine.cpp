// The engine launcher (see OpenRegEngine.h). Device addresses written into
// the block are relocated by the runtime (the bridge's launch_engine): it
// checks that each lies on the launching device and turns it into an offset,
// so this file never interprets them (host/src/lib.rs, "Device addresses").

#include "OpenRegEngine.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <optional>
#include <vector>
#include <string>
#include <mutex>

#include <ATen/Dispatch.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include "OpenRegBridge.h"
#include "OpenRegGuard.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg::engine {
namespace {

// The index of an engine kernel in the engine module: the same on every
// device (the module is), so each is resolved once.
template <const char* Name>
uint32_t engine_kernel(c10::DeviceIndex device) {
  static std::once_flag once;
  static uint32_t index = 0;
  std::call_once(once, [&] { index = OPENREG_CHECK(openreg::engine_kernel(device, Name)); });
  return index;
}
constexpr char kElementwise[] = "elementwise";
constexpr char kElementwiseList[] = "elementwise_list";
constexpr char kOptimList[] = "optim_list";
constexpr char kReduce[] = "reduce";
constexpr char kIndex[] = "index";
constexpr char kNonzero[] = "nonzero";
constexpr char kPositions[] = "positions";
constexpr char kGemm[] = "gemm";
constexpr char kRandom[] = "random";
constexpr char kSoftmax[] = "softmax";
constexpr char kPool[] = "pool";
constexpr char kSearch[] = "search";
constexpr char kNorm[] = "norm";
constexpr char kNll[] = "nll_loss";

// The work (elements touched, or multiply-adds) from which a launch runs on
// all of the device's workers: below it, waking them costs more than they save.
constexpr int64_t kParallelWork = int64_t{1} << 16;

// How many workers run a device's parallel launches (OPENREG_DEVICE_THREADS).
int64_t device_workers() {
  static const int64_t workers = OPENREG_CHECK(openreg::device_workers());
  return workers;
}

// Whether a launch doing `work` is a parallel launch (one call per worker).
bool parallel(int64_t work) {
  return work >= kParallelWork && device_workers() > 1;
}

// Elementwise ops that evaluate a transcendental function (tens of
// instructions per element): they split from fewer elements.
constexpr bool costly(or_op op) {
  switch (op) {
  case OR_OP_EXP: case OR_OP_EXP2: case OR_OP_EXPM1: case OR_OP_LOG: case OR_OP_LOG2: case OR_OP_LOG10:
  case OR_OP_LOG1P: case OR_OP_TANH: case OR_OP_SIGMOID: case OR_OP_ERF: case OR_OP_SILU: case OR_OP_MISH:
  case OR_OP_GELU: case OR_OP_GELU_TANH: case OR_OP_SOFTPLUS: case OR_OP_ELU: case OR_OP_SILU_BACKWARD:
  case OR_OP_GELU_BACKWARD: case OR_OP_GELU_TANH_BACKWARD: case OR_OP_SOFTPLUS_BACKWARD: case OR_OP_ELU_BACKWARD:
  case OR_OP_SIN: case OR_OP_COS: case OR_OP_ASIN: case OR_OP_ACOS: case OR_OP_ATAN: case OR_OP_ATAN2:
  case OR_OP_SINH: case OR_OP_COSH: case OR_OP_ASINH: case OR_OP_ACOSH: case OR_OP_ATANH: case OR_OP_TAN:
  case OR_OP_POW: case OR_OP_POW_SCALAR: case OR_OP_REMAINDER: case OR_OP_FMOD:
  case OR_OP_GLU: case OR_OP_LOGADDEXP: case OR_OP_LOGADDEXP2: case OR_OP_HYPOT: case OR_OP_XLOGY:
  case OR_OP_XLOG1PY: case OR_OP_SINC: case OR_OP_ERFC: case OR_OP_ERFINV: case OR_OP_LGAMMA: case OR_OP_DIGAMMA:
  case OR_OP_POLYGAMMA: case OR_OP_ENTR: case OR_OP_ERFCX: case OR_OP_NDTRI: case OR_OP_LOG_NDTR: case OR_OP_I0:
  case OR_OP_I0E: case OR_OP_I1: case OR_OP_I1E:
  case OR_OP_GCD: case OR_OP_LCM:
    return true;
  default:
    return false;
  }
}

// The op table of openreg_engine.h, by op: its name and the compute types it has.
constexpr std::array<or_kinds, OR_OP_COUNT> kKinds = {
#define OR_OP_KINDS(name, arity, kinds) OR_KINDS_##kinds,
    OR_ELEMENTWISE_OPS(OR_OP_KINDS)
#undef OR_OP_KINDS
};
constexpr std::array<int, OR_OP_COUNT> kArity = {
#define OR_OP_ARITY(name, arity, kinds) arity,
    OR_ELEMENTWISE_OPS(OR_OP_ARITY)
#undef OR_OP_ARITY
};
constexpr std::array<const char*, OR_OP_COUNT> kNames = {
#define OR_OP_NAME(name, arity, kinds) #name,
    OR_ELEMENTWISE_OPS(OR_OP_NAME)
#undef OR_OP_NAME
};
constexpr std::array<const char*, OR_REDUCE_COUNT> kReduceNames = {
#define OR_REDUCE_NAME(name, kinds) #name,
    OR_REDUCE_OPS(OR_REDUCE_NAME)
#undef OR_REDUCE_NAME
};

// What a launch computes, for activity records: the elementwise, reduction,
// softmax or pool op, in lower case, or a product's shape; nothing for the
// other kernels, whose name says it.
std::string lower(const char* name) {
  std::string s(name);
  for (auto& c : s) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return s;
}
std::string activity_label(const or_elementwise& block) {
  return block.op < OR_OP_COUNT ? lower(kNames[block.op]) : std::string();
}
constexpr std::array<const char*, OR_SOFTMAX_COUNT> kSoftmaxNames = {
#define OR_SOFTMAX_NAME(name) #name,
    OR_SOFTMAX_OPS(OR_SOFTMAX_NAME)
#undef OR_SOFTMAX_NAME
};
template <const char* Name>
std::string activity_label(const or_reduce& block) {
  // the softmax kernel takes an or_reduce block whose op is an or_softmax_op
  if constexpr (Name == kSoftmax) {
    return block.op < OR_SOFTMAX_COUNT ? lower(kSoftmaxNames[block.op]) : std::string();
  } else {
    return block.op < OR_REDUCE_COUNT ? lower(kReduceNames[block.op]) : std::string();
  }
}
constexpr std::array<const char*, OR_POOL_COUNT> kPoolNames = {
#define OR_POOL_NAME(name) #name,
    OR_POOL_OPS(OR_POOL_NAME)
#undef OR_POOL_NAME
};
std::string activity_label(const or_pool& block) {
  return block.op < OR_POOL_COUNT ? lower(kPoolNames[block.op]) : std::string();
}
constexpr std::array<const char*, OR_NORM_COUNT> kNormNames = {
#define OR_NORM_NAME(name) #name,
    OR_NORM_OPS(OR_NORM_NAME)
#undef OR_NORM_NAME
};
std::string activity_label(const or_norm& block) {
  return block.op < OR_NORM_COUNT ? lower(kNormNames[block.op]) : std::string();
}
// A product's shape, `m x k @ k x n`, after `batch x ` for a batch.
std::string activity_label(const or_gemm& block) {
  std::string label = block.batch > 1 ? std::to_string(block.batch) + " x " : std::string();
  const std::string k = std::to_string(block.k);
  return label + std::to_string(block.m) + "x" + k + " @ " + k + "x" + std::to_string(block.n);
}
std::string activity_label(const or_nll& block) {
  return block.backward ? "backward" : "forward";
}
template <const char* Name, class Block>
std::string activity_label(const Block& block) {
  if constexpr (std::is_same_v<Block, or_elementwise> || std::is_same_v<Block, or_pool> ||
                std::is_same_v<Block, or_gemm> || std::is_same_v<Block, or_norm> || std::is_same_v<Block, or_nll>) {
    return activity_label(block);
  } else {
    return {};
  }
}

// Launches one engine kernel with `block` as its parameter block, whose
// device addresses lie at the byte offsets `pointers`; with `work` at least
// kParallelWork, on all of the device's workers (the kernels split their
// work so that results do not depend on how many: openreg_engine.h).
//
// While the profiler records device activity, a launch is labelled with what
// it computes (activity_label), so a trace shows `elementwise (mul)`.
template <const char* Name, class Block>
void launch(c10::DeviceIndex device, const Block& block, const uint32_t* pointers, size_t npointers,
            int64_t work) {
  rust::Slice<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(&block), sizeof(block));
  const std::string label = recording_activity() ? activity_label<Name>(block) : std::string();
  OPENREG_CHECK(openreg::launch_engine(device, current_stream(device).id(), engine_kernel<Name>(device), bytes,
                                       rust::Slice<const uint32_t>(pointers, npointers), parallel(work), label));
}

or_scalar scalar_in(const c10::Scalar& value, or_compute compute) {
  or_scalar s{};
  if (compute == OR_COMPUTE_I64) {
    s.i = value.isBoolean() ? static_cast<int64_t>(value.toBool()) : value.toLong();
  } else {
    s.f = value.toDouble();
  }
  return s;
}

// A CPU scalar operand's value, read (on the host: it is a host tensor),
// converted to the op's common dtype as CPU converts its inputs (an int32 -6
// becomes 250 in a uint8 op), then to the compute type. `exact`: kept as it
// is, in the compute type (CPU's add, sub, mul and div of float16/bfloat16
// tensors take a Python number in float32 without rounding it to the
// tensor's type).
or_scalar cpu_scalar_in(const at::TensorIteratorBase& iter, int arg, or_compute compute,
                        std::optional<at::ScalarType> common, bool exact) {
  const at::TensorBase& t = iter.tensor_base(arg);
  const bool floating = at::isFloatingType(t.scalar_type());
  double as_double = 0.0;
  int64_t as_long = 0;
  AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, t.scalar_type(), "openreg_cpu_scalar", [&] {
    const scalar_t v = *static_cast<const scalar_t*>(t.const_data_ptr());
    if (floating) {
      as_double = static_cast<double>(v);
    } else {
      as_long = static_cast<int64_t>(v);
    }
  });
  const at::ScalarType as = exact ? at::kDouble : common && supports_dtype(*common) ? *common : t.scalar_type();
  or_scalar s{};
  AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, as, "openreg_cpu_scalar", [&] {
    const scalar_t v = floating ? c10::convert<scalar_t>(as_double) : c10::convert<scalar_t>(as_long);
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
  // The dtype inputs are converted to before the op, as CPU does (WHERE's
  // condition stays bool).
  const std::optional<at::ScalarType> common =
      op == OR_OP_WHERE ? std::nullopt : iter.maybe_common_dtype();
  // 0-dim device inputs of another dtype than the common one, converted on
  // the device (kept alive until the launch is queued).
  std::array<at::Tensor, OR_MAX_OPERANDS> converted;
  for (int k = 0; k < ntensors; ++k) {
    at::ScalarType dtype = iter.dtype(k);
    if (k > 0 && iter.is_cpu_scalar(k)) {
      block.scalar_mask |= 1u << k;
      const bool exact = (op == OR_OP_ADD || op == OR_OP_MUL || op == OR_OP_DIV) && common &&
                         at::isReducedFloatingType(*common);
      block.scalars[k] = cpu_scalar_in(iter, k, how, common, exact);
      block.dtypes[k] = static_cast<uint32_t>(dtype);
      continue;
    }
    TORCH_CHECK(iter.device(k) == device, "Expected all tensors to be on the same device, but found at least two "
                "devices, ", device, " and ", iter.device(k), "!");
    check_dtype(supports_dtype(dtype), "openreg elementwise", dtype);
    void* data = iter.data_ptr(k);
    // Type promotion lets only a 0-dim input be wider than the common dtype
    // (int32 -6 with a uint8 tensor): the op sees its value converted.
    if (k >= iter.noutputs() && common && *common != dtype && supports_dtype(*common) &&
        iter.tensor_base(k).dim() == 0) {
      converted[k] = at::empty({}, iter.tensor_base(k).options().dtype(*common));
      converted[k].copy_(at::Tensor(iter.tensor_base(k)));
      data = converted[k].data_ptr();
      dtype = *common;
    }
    block.dtypes[k] = static_cast<uint32_t>(dtype);
    block.data[k] = reinterpret_cast<uint64_t>(data);
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
  launch<kElementwise>(device.index(), block, pointers.data(), npointers, iter.numel() * (costly(op) ? 8 : 1));
}

void launch_elementwise_list(or_op op, const std::vector<at::TensorList>& lists,
                             std::initializer_list<c10::Scalar> args, int value_to,
                             c10::ArrayRef<c10::Scalar> values, uint32_t broadcast_mask) {
  const int nlists = static_cast<int>(lists.size());
  const int ntensors = nlists + (value_to > 0 ? 1 : 0);
  TORCH_INTERNAL_ASSERT(nlists >= 1 && ntensors == kArity[op] + 1 && (value_to <= 0 || value_to == nlists) &&
                        args.size() <= OR_MAX_ARGS && (value_to < 0 || values.size() == lists[0].size()) &&
                        (broadcast_mask & 1) == 0);
  const size_t positions = lists[0].size();
  if (positions == 0) {
    return;
  }
  const at::Tensor& first = lists[0][0];
  const or_compute how = compute_of(first.scalar_type());
  or_elementwise head{};
  head.op = op;
  head.compute = how;
  head.ntensors = static_cast<uint32_t>(ntensors);
  head.ndim = 1;
  for (int k = 0; k < ntensors; ++k) {
    head.dtypes[k] = static_cast<uint32_t>(first.scalar_type());
  }
  size_t a = 0;
  for (const c10::Scalar& arg : args) {
    head.args[a++] = scalar_in(arg, how);
  }
  const c10::DeviceIndex device = first.device().index();
  const std::string label = recording_activity() ? lower(kNames[op]) + " x " : std::string();
  for (size_t begin = 0; begin < positions; begin += OR_LIST_MAX) {
    const size_t items = std::min<size_t>(OR_LIST_MAX, positions - begin);
    std::vector<uint8_t> bytes(offsetof(or_elementwise_list, item) + items * sizeof(or_list_item));
    auto* block = reinterpret_cast<or_elementwise_list*>(bytes.data());
    block->head = head;
    block->items = static_cast<uint32_t>(items);
    block->value_to = value_to;
    block->broadcast_mask = broadcast_mask;
    std::vector<uint32_t> pointers;
    pointers.reserve(items * nlists);
    int64_t total = 0;
    for (size_t i = 0; i < items; ++i) {
      or_list_item& item = block->item[i];
      item.n = lists[0][begin + i].numel();
      total += item.n;
      for (int k = 0; k < nlists; ++k) {
        item.data[k] = reinterpret_cast<uint64_t>(lists[k][begin + i].data_ptr());
        pointers.push_back(static_cast<uint32_t>(offsetof(or_elementwise_list, item) + i * sizeof(or_list_item) +
                                                 offsetof(or_list_item, data) + sizeof(uint64_t) * k));
      }
      if (value_to >= 0) {
        item.value = scalar_in(values[begin + i], how);
      }
    }
    const rust::Slice<const uint8_t> block_bytes(bytes.data(), bytes.size());
    OPENREG_CHECK(openreg::launch_engine(
        device, current_stream(device).id(), engine_kernel<kElementwiseList>(device), block_bytes,
        rust::Slice<const uint32_t>(pointers.data(), pointers.size()), parallel(total * (costly(op) ? 8 : 1)),
        label.empty() ? label : label + std::to_string(items)));
  }
}

void launch_optim_list(const or_optim_head& head, const std::vector<at::TensorList>& lists, at::TensorList steps,
                       const at::Tensor& lr, const at::Tensor& grad_scale, const at::Tensor& found_inf) {
  const int nlists = static_cast<int>(lists.size());
  // the parameters, the gradients and exactly the states the kernel steps
  const int states = head.kind == OR_OPTIM_ADAGRAD ? 1
                     : head.kind == OR_OPTIM_SGD   ? (head.momentum != 0.0 ? 1 : 0)
                                                   : ((head.flags & OR_OPTIM_AMSGRAD) ? 3 : 2);
  TORCH_INTERNAL_ASSERT(head.kind < OR_OPTIM_COUNT && nlists == 2 + states);
  const size_t positions = lists[0].size();
  if (positions == 0) {
    return;
  }
  constexpr std::array<const char*, OR_OPTIM_COUNT> kOptimNames = {"adam", "adamw", "adagrad", "sgd"};
  // A step's cost per element against an elementwise add's (one worker): Adam
  // divides twice and takes a square root, Adagrad once each, SGD neither.
  constexpr std::array<int64_t, OR_OPTIM_COUNT> kOptimCost = {6, 6, 4, 2};
  const c10::DeviceIndex device = lists[0][0].device().index();
  const std::string label = recording_activity() ? std::string(kOptimNames[head.kind]) + " x " : std::string();
  // A 0-dim tensor's address at `field` of the block, and its dtype.
  const auto scalar = [](const at::Tensor& t, uint64_t& field, uint32_t& dtype, std::vector<uint32_t>& pointers,
                         size_t offset) {
    field = reinterpret_cast<uint64_t>(t.data_ptr());
    dtype = static_cast<uint32_t>(t.scalar_type());
    pointers.push_back(static_cast<uint32_t>(offset));
  };
  for (size_t begin = 0; begin < positions; begin += OR_LIST_MAX) {
    const size_t items = std::min<size_t>(OR_LIST_MAX, positions - begin);
    std::vector<uint8_t> bytes(offsetof(or_optim_list, item) + items * sizeof(or_optim_item));
    auto* block = reinterpret_cast<or_optim_list*>(bytes.data());
    block->head = head;
    block->head.items = static_cast<uint32_t>(items);
    std::vector<uint32_t> pointers;
    pointers.reserve(items * (nlists + 1) + 3);
    if (lr.defined()) {
      scalar(lr, block->head.lr_tensor, block->head.scalar_dtypes[OR_OPTIM_LR], pointers,
             offsetof(or_optim_head, lr_tensor));
    }
    if (grad_scale.defined()) {
      scalar(grad_scale, block->head.grad_scale, block->head.scalar_dtypes[OR_OPTIM_SCALE], pointers,
             offsetof(or_optim_head, grad_scale));
    }
    if (found_inf.defined()) {
      scalar(found_inf, block->head.found_inf, block->head.scalar_dtypes[OR_OPTIM_INF], pointers,
             offsetof(or_optim_head, found_inf));
    }
    int64_t total = 0;
    for (size_t i = 0; i < items; ++i) {
      or_optim_item& item = block->item[i];
      const size_t at = offsetof(or_optim_list, item) + i * sizeof(or_optim_item);
      item.n = lists[0][begin + i].numel();
      total += item.n;
      // param, grad and the states are the item's first five addresses
      for (int k = 0; k < nlists; ++k) {
        const auto address = reinterpret_cast<uint64_t>(lists[k][begin + i].data_ptr());
        std::memcpy(bytes.data() + at + sizeof(uint64_t) * k, &address, sizeof(address));
        pointers.push_back(static_cast<uint32_t>(at + sizeof(uint64_t) * k));
      }
      if (!steps.empty()) {
        scalar(steps[begin + i], item.step, block->head.scalar_dtypes[OR_OPTIM_STEP], pointers,
               at + offsetof(or_optim_item, step));
      }
    }
    const rust::Slice<const uint8_t> block_bytes(bytes.data(), bytes.size());
    OPENREG_CHECK(openreg::launch_engine(device, current_stream(device).id(), engine_kernel<kOptimList>(device),
                                         block_bytes, rust::Slice<const uint32_t>(pointers.data(), pointers.size()),
                                         parallel(total * kOptimCost[head.kind]), label.empty() ? label : label + std::to_string(items)));
  }
}

namespace {

// The reduction table of openreg_engine.h, by op: its compute types (its
// names are kReduceNames).
constexpr std::array<or_kinds, OR_REDUCE_COUNT> kReduceKinds = {
#define OR_REDUCE_KINDS(name, kinds) OR_KINDS_##kinds,
    OR_REDUCE_OPS(OR_REDUCE_KINDS)
#undef OR_REDUCE_KINDS
};

// A reduction's operand: its device address and element size.
template <size_t N>
void set_operand(or_reduce& block, std::array<uint32_t, N>& pointers, size_t& npointers, int slot,
                 const at::TensorBase& t, const void* data, c10::Device device) {
  TORCH_CHECK(t.device() == device, "Expected all tensors to be on the same device, but found at least two devices, ",
              device, " and ", t.device(), "!");
  check_dtype(supports_dtype(t.scalar_type()), "openreg reduction", t.scalar_type());
  block.dtypes[slot] = static_cast<uint32_t>(t.scalar_type());
  block.data[slot] = reinterpret_cast<uint64_t>(data);
  pointers[npointers++] = static_cast<uint32_t>(offsetof(or_reduce, data) + sizeof(uint64_t) * slot);
}

// The common part of a reduction's block: op, compute type (by the input's
// dtype), arguments; refuses a float-only op on integers.
or_reduce reduce_block(or_reduce_op op, at::ScalarType input, std::initializer_list<c10::Scalar> args) {
  TORCH_CHECK(args.size() <= OR_MAX_ARGS, "openreg: a reduction with ", args.size(), " arguments");
  const or_compute how = at::isFloatingType(input) ? OR_COMPUTE_F64 : OR_COMPUTE_I64;
  if (kReduceKinds[op] == OR_KINDS_FLOAT && how == OR_COMPUTE_I64) {
    check_dtype(false, std::string("openreg_") + kReduceNames[op], input);
  }
  or_reduce block{};
  block.op = op;
  block.compute = how;
  size_t a = 0;
  for (const c10::Scalar& arg : args) {
    block.args[a++] = scalar_in(arg, how);
  }
  return block;
}

// Lays out a line-wise op (scans, sort): dimension 0 is `dim` of the
// operands (same shape; slot, tensor), the others follow innermost first,
// size-1 ones dropped.
void line_dims(or_reduce& block, int64_t dim, std::initializer_list<std::pair<int, const at::Tensor*>> operands,
               const char* what) {
  const at::Tensor& shape = *operands.begin()->second;
  const int64_t rank = shape.dim();
  TORCH_CHECK(rank <= OR_MAX_DIMS, "openreg: ", what, " of tensors with more than ", OR_MAX_DIMS,
              " dimensions is not supported (got ", rank, ")");
  size_t ndim = 0;
  const auto add = [&](int64_t d) {
    block.sizes[ndim] = rank == 0 ? 1 : shape.size(d);
    for (const auto& [slot, t] : operands) {
      block.strides[slot][ndim] = rank == 0 ? 0 : t->stride(d) * static_cast<int64_t>(t->element_size());
    }
    ++ndim;
  };
  add(dim);
  for (int64_t d = rank - 1; d >= 0; --d) {
    if (d != dim && shape.size(d) != 1) {
      add(d);
      // a dimension that continues the one before it in every operand joins
      // it (an NCHW batch's H and W), so lines side by side come in long runs
      const size_t k = ndim - 1;
      if (k >= 2 && std::all_of(operands.begin(), operands.end(), [&](const auto& o) {
            return block.strides[o.first][k] == block.strides[o.first][k - 1] * block.sizes[k - 1];
          })) {
        block.sizes[k - 1] *= block.sizes[k];
        --ndim;
      }
    }
  }
  block.ndim = static_cast<uint32_t>(ndim);
  block.nreduce = 1;
}

// Elements per segment of a segmented reduction: enough to make a partial's
// cost negligible, few enough that a large reduction has many segments.
constexpr int64_t kSegmentElements = 1 << 16;

// A reduction of everything to one value, of at least two segments, runs in
// two launches (or_reduce_phase): all workers fold segments into partials,
// then one merges them. Segments are cut from the problem alone, so the
// result is the same for any worker count. Returns false for a problem too
// small to split.
template <size_t N>
bool launch_segmented(or_reduce& block, std::array<uint32_t, N>& pointers, size_t npointers, c10::Device device,
                      const at::TensorBase& input) {
  if (block.ndim == 0 || block.nreduce != block.ndim || input.numel() < 2 * kSegmentElements) {
    return false;
  }
  const uint32_t outer = block.nreduce - 1;
  int64_t inner = 1;
  for (uint32_t d = 0; d < outer; ++d) {
    inner *= block.sizes[d];
  }
  int64_t segment = std::max<int64_t>(1, kSegmentElements / inner);
  if (outer == 0) {
    segment = (segment + OR_REDUCE_SEGMENT_ALIGN - 1) / OR_REDUCE_SEGMENT_ALIGN * OR_REDUCE_SEGMENT_ALIGN;
  }
  const int64_t segments = (block.sizes[outer] + segment - 1) / segment;
  if (segments < 2) {
    return false;
  }
  const at::Tensor partials =
      at::empty({segments * OR_REDUCE_PARTIAL_BYTES}, at::TensorOptions().dtype(at::kByte).device(device));
  block.scratch = reinterpret_cast<uint64_t>(partials.data_ptr());
  pointers[npointers++] = static_cast<uint32_t>(offsetof(or_reduce, scratch));
  block.segment = segment;
  block.phase = OR_REDUCE_PHASE_PARTIALS;
  launch<kReduce>(device.index(), block, pointers.data(), npointers, input.numel());
  block.phase = OR_REDUCE_PHASE_MERGE;
  launch<kReduce>(device.index(), block, pointers.data(), npointers, 0);
  return true;
}

} // namespace

void launch_reduce(at::TensorIteratorBase& iter, or_reduce_op op, std::initializer_list<c10::Scalar> args) {
  if (iter.numel() == 0) {
    return; // ATen's callers fill empty reductions themselves
  }
  const int noutputs = iter.noutputs();
  TORCH_INTERNAL_ASSERT(noutputs >= 1 && noutputs <= 2 && iter.ninputs() == 1, "openreg: a reduction with ",
                        noutputs, " outputs and ", iter.ninputs(), " inputs");
  const at::TensorBase& input = iter.tensor_base(noutputs);
  or_reduce block = reduce_block(op, input.scalar_type(), args);
  const c10::Device device = iter.device(0);
  TORCH_INTERNAL_ASSERT(device.type() == c10::DeviceType::PrivateUse1, "openreg: launch_reduce on ", device);
  std::array<uint32_t, OR_REDUCE_OPERANDS + 1> pointers{}; // + the partials
  size_t npointers = 0;
  block.noutputs = static_cast<uint32_t>(noutputs);
  for (int k = 0; k < noutputs; ++k) {
    set_operand(block, pointers, npointers, k, iter.tensor_base(k), iter.data_ptr(k), device);
  }
  set_operand(block, pointers, npointers, OR_REDUCE_IN, input, iter.data_ptr(noutputs), device);
  // The iterator's dimensions (coalesced, innermost first): the reduced ones
  // (output stride 0) first, then the others, each group in its order.
  const auto shape = iter.shape();
  std::array<int, OR_MAX_DIMS> order{};
  size_t ndim = 0;
  for (const bool reduced : {true, false}) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1 || (iter.strides(0)[d] == 0) != reduced) {
        continue;
      }
      TORCH_CHECK(ndim < OR_MAX_DIMS, "openreg: reductions over more than ", OR_MAX_DIMS,
                  " non-coalescible dimensions are not supported (got ", shape.size(), ")");
      order[ndim++] = static_cast<int>(d);
      block.nreduce += reduced ? 1 : 0;
    }
  }
  block.ndim = static_cast<uint32_t>(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    block.sizes[i] = shape[order[i]];
    for (int k = 0; k < noutputs; ++k) {
      block.strides[k][i] = iter.strides(k)[order[i]];
    }
    block.strides[OR_REDUCE_IN][i] = iter.strides(noutputs)[order[i]];
  }
  if (iter.num_output_elements() == 1 && launch_segmented(block, pointers, npointers, device, input)) {
    return;
  }
  // Workers split the outputs.
  launch<kReduce>(device.index(), block, pointers.data(), npointers,
                  iter.num_output_elements() > 1 ? iter.numel() : 0);
}

void launch_scan(const at::Tensor& result, const at::Tensor& self, int64_t dim, or_reduce_op op,
                 const at::Tensor& indices) {
  const bool indexed = op == OR_REDUCE_CUMMAX || op == OR_REDUCE_CUMMIN;
  TORCH_INTERNAL_ASSERT(op == OR_REDUCE_CUMSUM || op == OR_REDUCE_CUMPROD || op == OR_REDUCE_LOGCUMSUMEXP || indexed,
                        "openreg: launch_scan with a reduction");
  TORCH_INTERNAL_ASSERT(result.sizes() == self.sizes(), "openreg: a scan's result and input differ in shape");
  TORCH_INTERNAL_ASSERT(indexed == indices.defined() &&
                            (!indexed || (indices.sizes() == self.sizes() && indices.scalar_type() == at::kLong)),
                        "openreg: a scan's indices");
  if (self.numel() == 0) {
    return;
  }
  const c10::Device device = result.device();
  or_reduce block = reduce_block(op, self.scalar_type(), {});
  std::array<uint32_t, OR_REDUCE_OPERANDS> pointers{};
  size_t npointers = 0;
  block.noutputs = indexed ? 2 : 1;
  set_operand(block, pointers, npointers, OR_REDUCE_OUT0, result, result.data_ptr(), device);
  set_operand(block, pointers, npointers, OR_REDUCE_IN, self, self.data_ptr(), device);
  if (indexed) {
    set_operand(block, pointers, npointers, OR_REDUCE_OUT1, indices, indices.data_ptr(), device);
    line_dims(block, dim, {{OR_REDUCE_OUT0, &result}, {OR_REDUCE_IN, &self}, {OR_REDUCE_OUT1, &indices}}, "scans");
  } else {
    line_dims(block, dim, {{OR_REDUCE_OUT0, &result}, {OR_REDUCE_IN, &self}}, "scans");
  }
  // Workers split the lines.
  const int64_t line = self.dim() == 0 ? 1 : self.size(dim);
  launch<kReduce>(device.index(), block, pointers.data(), npointers, self.numel() > line ? self.numel() : 0);
}

void launch_softmax(or_softmax_op op, const at::Tensor& result, const at::Tensor& input, const at::Tensor& y,
                    int64_t dim) {
  const bool backward = op == OR_SOFTMAX_SOFTMAX_BACKWARD || op == OR_SOFTMAX_LOG_SOFTMAX_BACKWARD;
  const bool with_y = backward || op == OR_SOFTMAX_SOFTMAX_LOGSUMEXP;
  TORCH_INTERNAL_ASSERT(result.sizes() == input.sizes() && (!with_y || y.sizes() == input.sizes()),
                        "openreg: launch_softmax shapes");
  if (input.numel() == 0) {
    return;
  }
  const c10::Device device = result.device();
  dim = at::maybe_wrap_dim(dim, input.dim());
  or_reduce block{};
  block.op = op;
  block.compute = input.scalar_type() == at::kDouble ? OR_COMPUTE_F64 : OR_COMPUTE_F32;
  block.noutputs = with_y ? 2 : 1;
  std::array<uint32_t, OR_REDUCE_OPERANDS> pointers{};
  size_t npointers = 0;
  set_operand(block, pointers, npointers, OR_REDUCE_OUT0, result, result.data_ptr(), device);
  set_operand(block, pointers, npointers, OR_REDUCE_IN, input, input.data_ptr(), device);
  if (with_y) {
    set_operand(block, pointers, npointers, OR_REDUCE_OUT1, y, y.data_ptr(), device);
    line_dims(block, dim, {{OR_REDUCE_OUT0, &result}, {OR_REDUCE_IN, &input}, {OR_REDUCE_OUT1, &y}}, "softmax");
  } else {
    line_dims(block, dim, {{OR_REDUCE_OUT0, &result}, {OR_REDUCE_IN, &input}}, "softmax");
  }
  const int64_t line = input.dim() == 0 ? 1 : input.size(dim);
  // (an exp per element: costly as a transcendental elementwise op)
  launch<kSoftmax>(device.index(), block, pointers.data(), npointers, input.numel() > line ? 8 * input.numel() : 0);
}

namespace {

// A sorting launch (SORT, TOPK: `block`) of `in`'s lines along `dim` into
// `values` and int64 `indices`, each worker with `room` bytes of scratch of
// its own: with several lines, the workers split them.
void launch_sorting(or_reduce block, const at::Tensor& in, const at::Tensor& values, const at::Tensor& indices,
                    int64_t dim, int64_t room, const char* what) {
  const c10::Device device = values.device();
  std::array<uint32_t, OR_REDUCE_OPERANDS + 1> pointers{}; // + the scratch
  size_t npointers = 0;
  block.noutputs = 2;
  set_operand(block, pointers, npointers, OR_REDUCE_IN, in, in.data_ptr(), device);
  set_operand(block, pointers, npointers, OR_REDUCE_OUT0, values, values.data_ptr(), device);
  set_operand(block, pointers, npointers, OR_REDUCE_OUT1, indices, indices.data_ptr(), device);
  line_dims(block, dim, {{OR_REDUCE_IN, &in}, {OR_REDUCE_OUT0, &values}, {OR_REDUCE_OUT1, &indices}}, what);
  const int64_t line = in.dim() == 0 ? 1 : in.size(dim);
  const int64_t work = in.numel() > line ? in.numel() : 0;
  const int64_t workers = parallel(work) ? device_workers() : 1;
  const at::Tensor scratch = at::empty({workers * room}, in.options().dtype(at::kByte));
  block.scratch = reinterpret_cast<uint64_t>(scratch.data_ptr());
  pointers[npointers++] = static_cast<uint32_t>(offsetof(or_reduce, scratch));
  launch<kReduce>(device.index(), block, pointers.data(), npointers, work);
}

} // namespace

void launch_sort(const at::Tensor& values, const at::Tensor& indices, int64_t dim, bool descending) {
  TORCH_INTERNAL_ASSERT(values.sizes() == indices.sizes() && indices.scalar_type() == at::kLong,
                        "openreg: launch_sort");
  if (values.numel() == 0) {
    return;
  }
  const int64_t line = values.dim() == 0 ? 1 : values.size(dim);
  launch_sorting(reduce_block(OR_REDUCE_SORT, values.scalar_type(), {descending ? 1 : 0}), values, values, indices,
                 dim, OR_SORT_ROOM(line), "sorting"); // in place, with the radix sort's room
}

void launch_topk(const at::Tensor& self, const at::Tensor& values, const at::Tensor& indices, int64_t dim, int64_t k,
                 bool largest) {
  TORCH_INTERNAL_ASSERT(values.sizes() == indices.sizes() && indices.scalar_type() == at::kLong &&
                            values.scalar_type() == self.scalar_type(),
                        "openreg: launch_topk");
  if (values.numel() == 0) {
    return;
  }
  or_reduce block = reduce_block(OR_REDUCE_TOPK, self.scalar_type(), {largest ? 1 : 0});
  block.args[1].i = k;
  launch_sorting(block, self, values, indices, dim, k * 16, "topk"); // a heap of k
}

at::Tensor mul_add(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  at::Tensor out;
  auto iter = at::TensorIteratorConfig()
                  .add_output(out)
                  .add_const_input(a)
                  .add_const_input(b)
                  .add_const_input(c)
                  .promote_inputs_to_common_dtype(true)
                  .cast_common_dtype_to_outputs(true)
                  .build();
  check_dtype(at::isFloatingType(iter.common_dtype()), "mul_add", iter.common_dtype());
  launch_elementwise(iter, OR_OP_MUL_ADD);
  return iter.output();
}

namespace {

// A pool launch's block for `planes` image planes of H x W and outputs of
// oh x ow per window position; operands are added by the caller.
or_pool pool_block(or_pool_op op, at::ScalarType dtype, int64_t planes, int64_t H, int64_t W, int64_t oh, int64_t ow,
                   const PoolWindow& window) {
  or_pool block{};
  block.op = op;
  block.dtype = static_cast<uint32_t>(dtype);
  block.count_include_pad = window.count_include_pad ? 1 : 0;
  block.planes = planes;
  block.height = H;
  block.width = W;
  block.out_height = oh;
  block.out_width = ow;
  for (int d = 0; d < 2; ++d) {
    block.kernel[d] = window.kernel[d];
    block.stride[d] = window.stride[d];
    block.padding[d] = window.padding[d];
    block.dilation[d] = window.dilation[d];
  }
  block.divisor = window.divisor;
  return block;
}

// Sets operand `slot` of a pool block to `t` (on `device`) and records where
// its address lies.
void pool_operand(or_pool& block, std::array<uint32_t, OR_POOL_OPERANDS>& pointers, size_t& npointers,
                  const c10::Device& device, int slot, const at::Tensor& t) {
  TORCH_CHECK(t.device() == device, "Expected all tensors to be on the same device, but found at least two "
              "devices, ", device, " and ", t.device(), "!");
  block.data[slot] = reinterpret_cast<uint64_t>(t.data_ptr());
  pointers[npointers++] = static_cast<uint32_t>(offsetof(or_pool, data) + sizeof(uint64_t) * slot);
}

} // namespace

void launch_windows(or_pool_op op, const at::Tensor& image, const at::Tensor& cols, int64_t oh, int64_t ow,
                    const PoolWindow& window) {
  TORCH_INTERNAL_ASSERT((op == OR_POOL_IM2COL || op == OR_POOL_COL2IM) && image.dim() >= 2 && image.is_contiguous() &&
                            cols.is_contiguous() && image.scalar_type() == cols.scalar_type(),
                        "openreg: launch_windows operands");
  const int64_t H = image.size(-2), W = image.size(-1);
  if (image.numel() == 0) {
    return;
  }
  const int64_t planes = image.numel() / (H * W);
  TORCH_INTERNAL_ASSERT(cols.numel() == planes * window.kernel[0] * window.kernel[1] * oh * ow,
                        "openreg: launch_windows columns");
  const c10::Device device = image.device();
  or_pool block = pool_block(op, image.scalar_type(), planes, H, W, oh, ow, window);
  std::array<uint32_t, OR_POOL_OPERANDS> pointers{};
  size_t npointers = 0;
  pool_operand(block, pointers, npointers, device, OR_POOL_IN, op == OR_POOL_IM2COL ? image : cols);
  pool_operand(block, pointers, npointers, device, OR_POOL_OUT0, op == OR_POOL_IM2COL ? cols : image);
  launch<kPool>(device.index(), block, pointers.data(), npointers, planes > 1 ? cols.numel() : 0);
}

void launch_pool(or_pool_op op, const at::Tensor& in, const at::Tensor& out0, const at::Tensor& out1,
                 const PoolWindow& window) {
  const bool backward = op == OR_POOL_MAX_BACKWARD || op == OR_POOL_AVG_BACKWARD;
  const at::Tensor& input_like = backward ? out0 : in; // the input's shape
  const at::Tensor& output_like = backward ? in : out0;
  TORCH_INTERNAL_ASSERT(input_like.dim() >= 2 && output_like.dim() == input_like.dim() && in.is_contiguous() &&
                            out0.is_contiguous() && in.scalar_type() == out0.scalar_type(),
                        "openreg: launch_pool operands");
  if (input_like.numel() == 0) {
    return;
  }
  const c10::Device device = out0.device();
  const at::ScalarType dtype = in.scalar_type();
  TORCH_INTERNAL_ASSERT(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kLong,
                        "openreg: launch_pool dtype ", dtype);
  const int64_t H = input_like.size(-2), W = input_like.size(-1);
  or_pool block = pool_block(op, dtype, input_like.numel() / (H * W), H, W, output_like.size(-2),
                             output_like.size(-1), window);
  std::array<uint32_t, OR_POOL_OPERANDS> pointers{};
  size_t npointers = 0;
  pool_operand(block, pointers, npointers, device, OR_POOL_IN, in);
  pool_operand(block, pointers, npointers, device, OR_POOL_OUT0, out0);
  if (op == OR_POOL_MAX || op == OR_POOL_MAX_BACKWARD) {
    TORCH_INTERNAL_ASSERT(out1.is_contiguous() && out1.scalar_type() == at::kLong && out1.numel() == output_like.numel(),
                          "openreg: launch_pool indices");
    pool_operand(block, pointers, npointers, device, OR_POOL_OUT1, out1);
  }
  const int64_t work = output_like.numel() * window.kernel[0] * window.kernel[1];
  launch<kPool>(device.index(), block, pointers.data(), npointers, block.planes > 1 ? work : 0);
}

void launch_norm(or_norm_op op, int64_t groups, int64_t length, int64_t planes, int64_t plane_stride, double eps,
                 std::initializer_list<at::Tensor> out, std::initializer_list<at::Tensor> in) {
  TORCH_INTERNAL_ASSERT(out.size() <= 3 && in.size() <= 6 && length >= 1 && planes >= 1, "openreg: launch_norm");
  if (groups == 0) {
    return;
  }
  or_norm block{};
  block.op = op;
  block.groups = groups;
  block.length = length;
  block.planes = planes;
  block.plane_stride = plane_stride;
  block.eps = eps;
  std::array<uint32_t, OR_NORM_OPERANDS> pointers{};
  size_t npointers = 0;
  std::optional<c10::Device> device;
  const auto operand = [&](int slot, const at::Tensor& t) {
    if (!t.defined()) {
      return;
    }
    TORCH_INTERNAL_ASSERT(t.scalar_type() == at::kFloat && t.is_contiguous(), "openreg: launch_norm operand ", slot);
    TORCH_CHECK(!device || t.device() == *device, "Expected all tensors to be on the same device, but found at least "
                "two devices, ", *device, " and ", t.device(), "!");
    device = t.device();
    block.data[slot] = reinterpret_cast<uint64_t>(t.data_ptr());
    pointers[npointers++] = static_cast<uint32_t>(offsetof(or_norm, data) + sizeof(uint64_t) * slot);
  };
  int slot = OR_NORM_OUT0;
  for (const at::Tensor& t : out) {
    operand(slot++, t);
  }
  slot = OR_NORM_IN0;
  for (const at::Tensor& t : in) {
    operand(slot++, t);
  }
  TORCH_INTERNAL_ASSERT(device.has_value(), "openreg: launch_norm without operands");
  launch<kNorm>(device->index(), block, pointers.data(), npointers, groups > 1 ? 4 * groups * planes * length : 0);
}

// The stride of dims d and d + 1 of t as one run (t's spatial positions as
// rows), if they are one.
std::optional<int64_t> run_stride(const at::Tensor& t, int64_t d) {
  if (t.size(d + 1) == 1) {
    return t.stride(d);
  }
  if (t.size(d) == 1 || t.stride(d) == t.size(d + 1) * t.stride(d + 1)) {
    return t.stride(d + 1);
  }
  return std::nullopt;
}

void launch_nll(bool backward, const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                int64_t reduction, int64_t ignore_index, const at::Tensor& out, const at::Tensor& total_weight) {
  const bool spatial = input.dim() == 4;
  TORCH_INTERNAL_ASSERT((input.dim() >= 1 && input.dim() <= 2 && target.dim() <= 1) ||
                            (spatial && target.dim() == 3),
                        "openreg: launch_nll operands");
  TORCH_INTERNAL_ASSERT(total_weight.numel() == 1 && reduction >= OR_NLL_NONE && reduction <= OR_NLL_SUM,
                        "openreg: launch_nll reduction");
  const c10::Device device = input.device();
  for (const at::Tensor* t : {&target, &weight, &out, &total_weight}) {
    TORCH_CHECK(!t->defined() || t->device() == device, "Expected all tensors to be on the same device, but found "
                "at least two devices, ", device, " and ", t->device(), "!");
  }
  const bool rows = input.dim() >= 2;
  or_nll block{};
  block.backward = backward ? 1 : 0;
  // One row of classes reduces whatever the reduction, as CPU's nll_loss.
  block.reduction = static_cast<uint32_t>(!rows && reduction == OR_NLL_NONE ? OR_NLL_SUM : reduction);
  block.samples = spatial ? input.size(0) : 1;
  block.rows = spatial ? input.size(2) * input.size(3) : rows ? input.size(0) : 1;
  block.classes = input.size(rows ? 1 : 0);
  block.ignore_index = ignore_index;
  std::array<uint32_t, OR_NLL_OPERANDS> pointers{};
  size_t npointers = 0;
  // Strides in elements: a spatial operand's samples, its rows (its H x W
  // positions as one run) and, for the input, its classes; else rows.
  const auto operand = [&](int slot, const at::Tensor& t, int64_t sample, int64_t row, int64_t cls) {
    block.dtypes[slot] = static_cast<uint32_t>(t.defined() ? t.scalar_type() : input.scalar_type());
    if (!t.defined()) {
      return;
    }
    const auto size = static_cast<int64_t>(t.element_size());
    block.data[slot] = reinterpret_cast<uint64_t>(t.data_ptr());
    block.sample_strides[slot] = sample * size;
    block.row_strides[slot] = row * size;
    block.class_strides[slot] = cls * size;
    pointers[npointers++] = static_cast<uint32_t>(offsetof(or_nll, data) + sizeof(uint64_t) * slot);
  };
  // The written operand (the forward's per-row output, grad_input) is the
  // caller's new tensor, its positions one run.
  TORCH_INTERNAL_ASSERT(!spatial || (backward ? run_stride(input, 2).has_value()
                                              : out.dim() == 0 || run_stride(out, 1).has_value()),
                        "openreg: launch_nll written operand");
  // An operand per row: its strides, a spatial one's positions as one run (a
  // read-only operand whose positions are not one is copied first).
  std::vector<at::Tensor> keep;
  const auto per_row = [&](int slot, const at::Tensor& t, int64_t first_spatial) {
    if (slot == OR_NLL_INPUT && !spatial) { // (rows, classes), or one row of classes
      operand(slot, t, 0, rows ? t.stride(0) : 0, t.stride(-1));
      return;
    }
    if (slot == OR_NLL_OUT && block.reduction != OR_NLL_NONE) { // one value
      operand(slot, t, 0, 0, 0);
      return;
    }
    if (!spatial) { // a value per row
      operand(slot, t, 0, t.dim() == 1 ? t.stride(0) : 0, 0);
      return;
    }
    const at::Tensor& run = run_stride(t, first_spatial) ? t : keep.emplace_back(t.contiguous());
    operand(slot, run, run.stride(0), *run_stride(run, first_spatial), slot == OR_NLL_INPUT ? run.stride(1) : 0);
  };
  per_row(OR_NLL_INPUT, input, 2);
  per_row(OR_NLL_TARGET, target, 1);
  operand(OR_NLL_WEIGHT, weight, 0, 0, weight.defined() ? weight.stride(0) : 0);
  per_row(OR_NLL_OUT, out, 1);
  operand(OR_NLL_TOTAL, total_weight, 0, 0, 0);
  launch<kNll>(device.index(), block, pointers.data(), npointers, 0);
}

void launch_winograd(or_pool_op op, const at::Tensor& in, const at::Tensor& out, int64_t channels, int64_t th,
                     int64_t tw, const std::array<int64_t, 2>& padding) {
  const bool kernels = op == OR_POOL_WINOGRAD_WEIGHT || op == OR_POOL_WINOGRAD_WEIGHT_ROTATED ||
                       op == OR_POOL_WINOGRAD_WEIGHT_GRAD;
  const bool to_image = op == OR_POOL_WINOGRAD_OUTPUT || op == OR_POOL_WINOGRAD_WEIGHT_GRAD;
  // the planes (kernels, images or outputs) and the transformed operand
  const at::Tensor& image = to_image ? out : in;
  const at::Tensor& transformed = to_image ? in : out;
  TORCH_INTERNAL_ASSERT((kernels || op == OR_POOL_WINOGRAD_INPUT || op == OR_POOL_WINOGRAD_OUTPUT ||
                         op == OR_POOL_WINOGRAD_GRAD) &&
                            image.is_contiguous() && in.scalar_type() == at::kFloat &&
                            out.scalar_type() == at::kFloat && channels > 0,
                        "openreg: launch_winograd operands");
  if (image.numel() == 0) {
    return;
  }
  const int64_t H = image.size(-2), W = image.size(-1), planes = image.numel() / (H * W);
  // kernels: (16, planes) dense; tiles: (16, rows, tiles) dense but for the points' stride
  const bool dense_points = transformed.dim() == 3 && transformed.size(0) == 16 && transformed.stride(2) == 1 &&
                            transformed.stride(1) == transformed.size(2) &&
                            transformed.stride(0) >= transformed.size(1) * transformed.size(2);
  TORCH_INTERNAL_ASSERT(kernels ? (H == 3 && W == 3 && transformed.is_contiguous() && transformed.numel() == 16 * planes)
                                : (planes % channels == 0 && dense_points &&
                                   transformed.numel() == 16 * planes * th * tw),
                        "openreg: launch_winograd sizes");
  const c10::Device device = out.device();
  or_pool block = pool_block(op, at::kFloat, planes, H, W, th, tw, {{3, 3}, {1, 1}, padding, {1, 1}});
  block.channels = static_cast<uint32_t>(channels);
  block.point_stride = kernels ? planes : transformed.stride(0);
  std::array<uint32_t, OR_POOL_OPERANDS> pointers{};
  size_t npointers = 0;
  pool_operand(block, pointers, npointers, device, OR_POOL_IN, in);
  pool_operand(block, pointers, npointers, device, OR_POOL_OUT0, out);
  launch<kPool>(device.index(), block, pointers.data(), npointers, planes > 1 ? transformed.numel() : 0);
}

void launch_winograd_fixup(or_pool_op op, const at::Tensor& result, const at::Tensor& input, const at::Tensor& other,
                           const std::array<int64_t, 2>& padding) {
  const bool weight_grad = op == OR_POOL_WINOGRAD_WEIGHT_GRAD_FIXUP;
  TORCH_INTERNAL_ASSERT((weight_grad || op == OR_POOL_WINOGRAD_FIXUP || op == OR_POOL_WINOGRAD_FIXUP_ROTATED) &&
                            result.is_contiguous() && input.is_contiguous() && other.is_contiguous() &&
                            result.dim() == 4 && input.dim() == 4 && other.dim() == 4 &&
                            result.scalar_type() == at::kFloat && input.scalar_type() == at::kFloat &&
                            other.scalar_type() == at::kFloat,
                        "openreg: launch_winograd_fixup operands");
  if (result.numel() == 0 || input.numel() == 0) {
    return;
  }
  // the convolution's output: the result, or the gradient given
  const at::Tensor& output = weight_grad ? other : result;
  const int64_t planes = weight_grad ? result.numel() / 9 : result.size(0) * result.size(1);
  const c10::Device device = result.device();
  or_pool block = pool_block(op, at::kFloat, planes, input.size(2), input.size(3), output.size(2), output.size(3),
                             {{3, 3}, {1, 1}, padding, {1, 1}});
  block.channels = static_cast<uint32_t>(input.size(1));
  block.samples = input.size(0);
  std::array<uint32_t, OR_POOL_OPERANDS> pointers{};
  size_t npointers = 0;
  pool_operand(block, pointers, npointers, device, OR_POOL_IN, input);
  pool_operand(block, pointers, npointers, device, OR_POOL_OUT0, result);
  pool_operand(block, pointers, npointers, device, OR_POOL_OUT1, other);
  launch<kPool>(device.index(), block, pointers.data(), npointers, planes > 1 ? result.numel() : 0);
}

void launch_index(at::TensorIteratorBase& iter, or_index_op op, int direct, int indexed, at::IntArrayRef indexed_sizes,
                  at::IntArrayRef indexed_strides, bool wrap, const c10::Scalar& alpha) {
  if (iter.numel() == 0) {
    return;
  }
  const int ntensors = iter.ntensors();
  const int nindices = ntensors - 2;
  TORCH_CHECK(nindices >= 1 && nindices <= OR_MAX_INDICES, "openreg: indexing with ", nindices,
              " index tensors is not supported (at most ", OR_MAX_INDICES, ")");
  TORCH_INTERNAL_ASSERT(static_cast<int>(indexed_sizes.size()) == nindices &&
                        static_cast<int>(indexed_strides.size()) == nindices, "openreg: launch_index sizes");
  TORCH_CHECK(iter.ndim() <= OR_MAX_DIMS, "openreg: indexing over more than ", OR_MAX_DIMS,
              " non-coalescible dimensions is not supported (got ", iter.ndim(), ")");
  const c10::Device device = iter.device(direct);
  or_index block{};
  block.op = op;
  block.nindices = static_cast<uint32_t>(nindices);
  block.wrap = wrap ? 1 : 0;
  block.ndim = static_cast<uint32_t>(std::max(iter.ndim(), 1));
  const auto shape = iter.shape();
  for (size_t d = 0; d < OR_MAX_DIMS; ++d) {
    block.sizes[d] = d < shape.size() ? shape[d] : 1;
  }
  std::array<uint32_t, OR_INDEX_OPERANDS> pointers{};
  size_t npointers = 0;
  int slot_of_index = 2;
  for (int k = 0; k < ntensors; ++k) {
    const int slot = k == direct ? OR_INDEX_DIRECT : k == indexed ? OR_INDEX_INDEXED : slot_of_index++;
    TORCH_CHECK(iter.device(k) == device, "Expected all tensors to be on the same device, but found at least two "
                "devices, ", device, " and ", iter.device(k), "!");
    const at::ScalarType dtype = iter.dtype(k);
    if (slot >= 2) {
      TORCH_CHECK_INDEX(dtype == at::kLong || dtype == at::kInt, "tensors used as indices must be long or int tensors");
    } else {
      check_dtype(supports_dtype(dtype), "openreg indexing", dtype);
    }
    block.dtypes[slot] = static_cast<uint32_t>(dtype);
    block.data[slot] = reinterpret_cast<uint64_t>(iter.data_ptr(k));
    pointers[npointers++] = static_cast<uint32_t>(offsetof(or_index, data) + sizeof(uint64_t) * slot);
    const auto strides = iter.strides(k);
    for (size_t d = 0; d < strides.size() && d < OR_MAX_DIMS; ++d) {
      block.strides[slot][d] = strides[d];
    }
  }
  for (int k = 0; k < nindices; ++k) {
    block.indexed_sizes[k] = indexed_sizes[k];
    block.indexed_strides[k] = indexed_strides[k];
  }
  if (op == OR_INDEX_SCATTER_ADD || op == OR_INDEX_SCATTER_MUL || op == OR_INDEX_SCATTER_MAX ||
      op == OR_INDEX_SCATTER_MIN) {
    const at::ScalarType dtype = iter.dtype(indexed);
    block.compute = at::isFloatingType(dtype) ? OR_COMPUTE_F64 : OR_COMPUTE_I64;
    block.args[0] = scalar_in(alpha, static_cast<or_compute>(block.compute));
  }
  // Only a gather splits (other ops may write one element from several places).
  launch<kIndex>(device.index(), block, pointers.data(), npointers, op == OR_INDEX_GATHER ? iter.numel() : 0);
}

void launch_search(const at::Tensor& out, const at::Tensor& values, const at::Tensor& sequence, bool right) {
  TORCH_INTERNAL_ASSERT(out.sizes() == values.sizes() && (out.scalar_type() == at::kLong || out.scalar_type() == at::kInt) &&
                            values.scalar_type() == sequence.scalar_type() && sequence.dim() >= 1,
                        "openreg: launch_search operands");
  if (out.numel() == 0) {
    return;
  }
  const c10::Device device = out.device();
  for (const at::Tensor* t : {&values, &sequence}) {
    TORCH_CHECK(t->device() == device, "Expected all tensors to be on the same device, but found at least two "
                "devices, ", device, " and ", t->device(), "!");
  }
  check_dtype(supports_dtype(values.scalar_type()), "searchsorted", values.scalar_type());
  const int64_t rank = std::max<int64_t>(values.dim(), 1);
  TORCH_CHECK(rank <= OR_MAX_DIMS, "searchsorted of tensors with more than ", OR_MAX_DIMS,
              " dimensions is not supported on openreg");
  or_search block{};
  block.ndim = static_cast<uint32_t>(rank);
  block.right = right ? 1 : 0;
  block.dtype = static_cast<uint32_t>(values.scalar_type());
  block.out_dtype = static_cast<uint32_t>(out.scalar_type());
  block.seq_len = sequence.size(-1);
  const int64_t es = static_cast<int64_t>(sequence.element_size());
  block.seq_stride = sequence.stride(-1) * es;
  // dimension 0 of the block is the values' last; a 1-d sequence serves every
  // value, an n-d one gives each value the line of its leading indices
  for (int64_t d = 0; d < values.dim(); ++d) {
    const int64_t logical = values.dim() - 1 - d;
    block.sizes[d] = values.size(logical);
    block.strides[OR_SEARCH_OUT][d] = out.stride(logical) * static_cast<int64_t>(out.element_size());
    block.strides[OR_SEARCH_VALUES][d] = values.stride(logical) * static_cast<int64_t>(values.element_size());
    block.strides[OR_SEARCH_SEQ][d] = sequence.dim() > 1 && d > 0 ? sequence.stride(logical) * es : 0;
  }
  if (values.dim() == 0) {
    block.sizes[0] = 1;
  }
  block.data[OR_SEARCH_OUT] = reinterpret_cast<uint64_t>(out.data_ptr());
  block.data[OR_SEARCH_VALUES] = reinterpret_cast<uint64_t>(values.data_ptr());
  block.data[OR_SEARCH_SEQ] = reinterpret_cast<uint64_t>(sequence.data_ptr());
  const std::array<uint32_t, 3> pointers = {static_cast<uint32_t>(offsetof(or_search, data)),
                                            static_cast<uint32_t>(offsetof(or_search, data) + 8),
                                            static_cast<uint32_t>(offsetof(or_search, data) + 16)};
  const int64_t steps = 64 - __builtin_clzll(static_cast<unsigned long long>(block.seq_len) | 1);
  launch<kSearch>(device.index(), block, pointers.data(), pointers.size(), out.numel() * steps);
}

void launch_nonzero(const at::Tensor& result, const at::Tensor& self, int64_t count) {
  if (count == 0 || self.numel() == 0) {
    return;
  }
  const c10::Device device = self.device();
  TORCH_CHECK(result.device() == device, "Expected all tensors to be on the same device, but found at least two "
              "devices, ", device, " and ", result.device(), "!");
  check_dtype(supports_dtype(self.scalar_type()), "nonzero", self.scalar_type());
  TORCH_CHECK(self.dim() <= OR_MAX_DIMS, "nonzero is not supported for tensors with more than ", OR_MAX_DIMS,
              " dimensions on openreg");
  TORCH_INTERNAL_ASSERT(result.scalar_type() == at::kLong && result.dim() == 2 && result.size(0) == count,
                        "openreg: launch_nonzero result");
  or_nonzero block{};
  block.ndim = static_cast<uint32_t>(self.dim());
  block.dtype = static_cast<uint32_t>(self.scalar_type());
  block.count = count;
  const int64_t es = static_cast<int64_t>(self.element_size());
  for (int64_t d = 0; d < self.dim(); ++d) {
    block.sizes[d] = self.size(d);
    block.strides[d] = self.stride(d) * es;
  }
  block.data = reinterpret_cast<uint64_t>(self.data_ptr());
  block.out = reinterpret_cast<uint64_t>(result.data_ptr());
  block.out_strides[0] = result.stride(0) * 8;
  block.out_strides[1] = result.stride(1) * 8;
  const std::array<uint32_t, 2> pointers = {static_cast<uint32_t>(offsetof(or_nonzero, data)),
                                            static_cast<uint32_t>(offsetof(or_nonzero, out))};
  launch<kNonzero>(device.index(), block, pointers.data(), pointers.size(), 0);
}

void launch_flip(const at::Tensor& out, const at::Tensor& self, uint64_t flip) {
  TORCH_INTERNAL_ASSERT(out.sizes() == self.sizes() && out.scalar_type() == self.scalar_type(), "openreg: launch_flip");
  if (self.numel() == 0) {
    return;
  }
  const c10::Device device = self.device();
  TORCH_CHECK(out.device() == device, "Expected all tensors to be on the same device, but found at least two "
              "devices, ", device, " and ", out.device(), "!");
  check_dtype(supports_dtype(self.scalar_type()), "flip", self.scalar_type());
  const int64_t rank = self.dim();
  TORCH_CHECK(rank <= OR_MAX_DIMS, "openreg: flip of tensors with more than ", OR_MAX_DIMS,
              " dimensions is not supported (got ", rank, ")");
  // A copy whose source walks the flipped dimensions backwards, from their last element.
  or_elementwise block{};
  block.op = OR_OP_COPY;
  block.compute = compute_of(self.scalar_type());
  block.ntensors = 2;
  block.ndim = static_cast<uint32_t>(std::max<int64_t>(rank, 1));
  block.dtypes[0] = block.dtypes[1] = static_cast<uint32_t>(self.scalar_type());
  const int64_t es = static_cast<int64_t>(self.element_size());
  auto* first = static_cast<const char*>(self.const_data_ptr());
  for (size_t i = 0; i < OR_MAX_DIMS; ++i) {
    block.sizes[i] = 1;
  }
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t d = rank - 1 - i; // innermost first
    const bool reversed = (flip >> d) & 1;
    block.sizes[i] = self.size(d);
    block.strides[0][i] = out.stride(d) * es;
    block.strides[1][i] = (reversed ? -1 : 1) * self.stride(d) * es;
    if (reversed) {
      first += (self.size(d) - 1) * self.stride(d) * es;
    }
  }
  block.data[0] = reinterpret_cast<uint64_t>(out.data_ptr());
  block.data[1] = reinterpret_cast<uint64_t>(first);
  const std::array<uint32_t, 2> pointers = {static_cast<uint32_t>(offsetof(or_elementwise, data)),
                                            static_cast<uint32_t>(offsetof(or_elementwise, data) + 8)};
  launch<kElementwise>(device.index(), block, pointers.data(), pointers.size(), self.numel());
}

void launch_positions(or_position_op op, const at::Tensor& out, const at::Tensor& in,
                      std::initializer_list<c10::Scalar> args) {
  if (out.numel() == 0) {
    return;
  }
  const c10::Device device = out.device();
  check_dtype(supports_dtype(out.scalar_type()), "openreg positional op", out.scalar_type());
  const bool triangle = op == OR_POSITION_TRIL || op == OR_POSITION_TRIU;
  const at::Tensor& src = triangle ? in : out;
  TORCH_CHECK(src.device() == device, "Expected all tensors to be on the same device, but found at least two "
              "devices, ", device, " and ", src.device(), "!");
  TORCH_INTERNAL_ASSERT(!triangle || (in.sizes() == out.sizes() && in.scalar_type() == out.scalar_type()),
                        "openreg: launch_positions");
  TORCH_CHECK(out.dim() <= OR_MAX_DIMS, "openreg: tensors of more than ", OR_MAX_DIMS, " dimensions (got ",
              out.dim(), ")");
  TORCH_CHECK(args.size() <= OR_MAX_ARGS, "openreg: a positional op with ", args.size(), " arguments");
  or_position block{};
  block.op = op;
  block.compute = op == OR_POSITION_ARANGE && !at::isFloatingType(out.scalar_type()) ? OR_COMPUTE_I64 : OR_COMPUTE_F64;
  block.ndim = static_cast<uint32_t>(std::max<int64_t>(out.dim(), 1));
  block.dtype = static_cast<uint32_t>(out.scalar_type());
  const int64_t es = static_cast<int64_t>(out.element_size());
  for (size_t d = 0; d < OR_MAX_DIMS; ++d) {
    block.sizes[d] = 1;
  }
  for (int64_t d = 0; d < out.dim(); ++d) {
    block.sizes[d] = out.size(d);
    block.strides[0][d] = out.stride(d) * es;
    block.strides[1][d] = src.stride(d) * es;
  }
  block.data[0] = reinterpret_cast<uint64_t>(out.data_ptr());
  block.data[1] = reinterpret_cast<uint64_t>(src.data_ptr());
  size_t a = 0;
  for (const c10::Scalar& arg : args) {
    // counts (TRIL/TRIU's k, LINSPACE's steps) stay integers; values follow the compute type
    const bool count = triangle || (op == OR_POSITION_LINSPACE && a == 3);
    block.args[a] = count ? or_scalar{.i = arg.toLong()} : scalar_in(arg, static_cast<or_compute>(block.compute));
    ++a;
  }
  const std::array<uint32_t, 2> pointers = {static_cast<uint32_t>(offsetof(or_position, data)),
                                            static_cast<uint32_t>(offsetof(or_position, data) + 8)};
  // arange and linspace split their line between the workers; triangles run on one
  launch<kPositions>(device.index(), block, pointers.data(), pointers.size(), triangle ? 0 : out.numel());
}

GemmOperand gemm_matrices(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(t.dim() == 2 || t.dim() == 3, "openreg: gemm_matrices of a ", t.dim(), "-d tensor");
  if (t.dim() == 2) {
    return {t, {0, t.stride(0), t.stride(1)}};
  }
  return {t, {t.stride(0), t.stride(1), t.stride(2)}};
}

void launch_gemm(int64_t batch, int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b,
                 const GemmOperand& out, const c10::Scalar& beta, const c10::Scalar& alpha) {
  const c10::Device device = out.tensor.device();
  const at::ScalarType dtype = out.tensor.scalar_type();
  for (const GemmOperand* operand : {&a, &b}) {
    TORCH_CHECK(operand->tensor.device() == device, "Expected all tensors to be on the same device, but found at "
                "least two devices, ", device, " and ", operand->tensor.device(), "!");
    TORCH_CHECK(operand->tensor.scalar_type() == dtype, "expected m1 and m2 to have the same dtype, but got: ",
                operand->tensor.scalar_type(), " != ", dtype);
  }
  check_dtype(supports_dtype(dtype) && dtype != at::kBool, "openreg gemm", dtype);
  if (batch == 0 || m == 0 || n == 0) {
    return;
  }
  const bool floating = at::isFloatingType(dtype);
  const or_compute compute = floating ? OR_COMPUTE_F64 : OR_COMPUTE_I64;
  or_gemm block{};
  block.dtype = static_cast<uint32_t>(dtype);
  block.beta_nonzero = beta.isBoolean() ? beta.toBool() : beta.toComplexDouble() != 0.0;
  block.batch = batch;
  block.m = m;
  block.n = n;
  block.k = k;
  block.alpha = scalar_in(alpha, compute);
  block.beta = scalar_in(beta, compute);
  const int64_t es = static_cast<int64_t>(out.tensor.element_size());
  std::array<uint32_t, OR_GEMM_OPERANDS + 1> pointers{};
  size_t npointers = 0;
  const std::array<const GemmOperand*, OR_GEMM_OPERANDS> operands = {&a, &b, &out};
  for (int slot = 0; slot < OR_GEMM_OPERANDS; ++slot) {
    const GemmOperand& operand = *operands[slot];
    block.data[slot] = reinterpret_cast<uint64_t>(operand.tensor.data_ptr());
    for (int d = 0; d < 3; ++d) {
      block.strides[slot][d] = operand.strides[d] * es;
    }
    pointers[npointers++] = static_cast<uint32_t>(offsetof(or_gemm, data) + sizeof(uint64_t) * slot);
  }
  // Packing room, kept alive (by the caching allocator's stream semantics)
  // until the kernel has run: freed memory is reused only by later work on
  // the same stream.
  // Each worker packs into its own part. Small products stay on one worker.
  const int64_t work = batch * m * n * std::max<int64_t>(k, 1) >= 4 * kParallelWork ? kParallelWork : 0;
  const int64_t workers = parallel(work) ? device_workers() : 1;
  const int64_t scratch_bytes = or_gemm_scratch_bytes(block.dtype, m, n, k, workers);
  at::Tensor scratch;
  if (scratch_bytes > 0) {
    scratch = at::empty({scratch_bytes}, out.tensor.options().dtype(at::kByte));
    block.scratch = reinterpret_cast<uint64_t>(scratch.data_ptr());
    pointers[npointers++] = static_cast<uint32_t>(offsetof(or_gemm, scratch));
  }
  launch<kGemm>(device.index(), block, pointers.data(), npointers, work);
}

void launch_random(or_random_op op, const at::Tensor& out, const at::Tensor& probabilities,
                   std::initializer_list<c10::Scalar> args, uint64_t seed, uint64_t offset) {
  if (out.numel() == 0) {
    return;
  }
  const c10::Device device = out.device();
  check_dtype(supports_dtype(out.scalar_type()), "openreg random", out.scalar_type());
  TORCH_CHECK(out.dim() <= OR_MAX_DIMS, "openreg: tensors of more than ", OR_MAX_DIMS, " dimensions (got ", out.dim(),
              ")");
  TORCH_CHECK(args.size() <= OR_MAX_ARGS, "openreg: a random op with ", args.size(), " arguments");
  or_random block{};
  block.op = op;
  block.dtype = static_cast<uint32_t>(out.scalar_type());
  block.ndim = static_cast<uint32_t>(out.dim());
  block.seed = seed;
  block.offset = offset;
  const int64_t es = static_cast<int64_t>(out.element_size());
  for (int64_t d = 0; d < out.dim(); ++d) {
    block.sizes[d] = out.size(d);
    block.strides[0][d] = out.stride(d) * es;
  }
  block.data[0] = reinterpret_cast<uint64_t>(out.data_ptr());
  std::array<uint32_t, 2> pointers = {static_cast<uint32_t>(offsetof(or_random, data)), 0};
  size_t npointers = 1;
  at::Tensor p; // kept alive until the launch is queued
  if (probabilities.defined()) {
    TORCH_CHECK(probabilities.device() == device, "Expected all tensors to be on the same device, but found at least "
                "two devices, ", device, " and ", probabilities.device(), "!");
    check_dtype(supports_dtype(probabilities.scalar_type()), "bernoulli", probabilities.scalar_type());
    p = probabilities.expand(out.sizes());
    block.in_dtype = static_cast<uint32_t>(p.scalar_type());
    const int64_t pes = static_cast<int64_t>(p.element_size());
    for (int64_t d = 0; d < out.dim(); ++d) {
      block.strides[1][d] = p.stride(d) * pes;
    }
    block.data[1] = reinterpret_cast<uint64_t>(p.data_ptr());
    pointers[npointers++] = static_cast<uint32_t>(offsetof(or_random, data) + 8);
  }
  size_t a = 0;
  for (const c10::Scalar& arg : args) {
    block.args[a++] = op == OR_RANDOM_RANGE ? or_scalar{.i = arg.toLong()} : or_scalar{.f = arg.toDouble()};
  }
  launch<kRandom>(device.index(), block, pointers.data(), npointers, out.numel());
}

} // namespace openreg::engine
