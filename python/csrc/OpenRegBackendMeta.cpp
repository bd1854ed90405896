// Backend metadata of openreg tensors (c10::BackendMeta), and its serialization
// (torch::jit::TensorBackendMetaRegistry for PrivateUse1).
//
// torch lets a backend attach its own metadata to a tensor and carries it
// through torch.save / torch.load as string -> bool flags
// (torch._utils.get_tensor_metadata / set_tensor_metadata). An openreg
// tensor's metadata is such a set of flags: whatever keys
// set_tensor_metadata gives it (besides torch's own `conj` and `neg`) are
// kept in an OpenRegBackendMeta on the TensorImpl, returned by
// get_tensor_metadata, saved with the tensor, restored on load, and copied
// wherever torch copies a TensorImpl's metadata (detach, shallow copies).

#include <map>
#include <string>
#include <unordered_map>

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

namespace openreg {
namespace {

struct OpenRegBackendMeta final : c10::BackendMeta {
  std::map<std::string, bool> flags;

  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>&) const override {
    auto copy = c10::make_intrusive<OpenRegBackendMeta>();
    copy->flags = flags;
    return copy;
  }
};

const OpenRegBackendMeta* meta_of(const at::Tensor& t) {
  return dynamic_cast<const OpenRegBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
}

// get_tensor_metadata / torch.save: the tensor's flags into `metadata`.
void to_metadata(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  if (const auto* meta = meta_of(t)) {
    for (const auto& [key, value] : meta->flags) {
      metadata[key] = value;
    }
  }
}

// set_tensor_metadata / torch.load: the remaining entries of `metadata` (torch
// took out `conj` and `neg`) become the tensor's flags, added to any it has.
void from_metadata(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  if (metadata.empty()) {
    return;
  }
  auto meta = c10::make_intrusive<OpenRegBackendMeta>();
  if (const auto* existing = meta_of(t)) {
    meta->flags = existing->flags;
  }
  for (const auto& [key, value] : metadata) {
    meta->flags[key] = value;
  }
  t.unsafeGetTensorImpl()->set_backend_meta(meta);
}

struct RegisterBackendMeta {
  RegisterBackendMeta() {
    torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &to_metadata, &from_metadata);
  }
};
const RegisterBackendMeta register_backend_meta;

} // namespace
} // namespace openreg
