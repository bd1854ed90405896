// The openreg generator (see OpenRegGenerator.h).

#include "OpenRegGenerator.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include "OpenRegGuard.h"

namespace openreg {
namespace {

c10::DeviceIndex resolve(c10::DeviceIndex device) {
  device = device == -1 ? current_device_index() : device;
  check_device_index(device);
  return device;
}

} // namespace

OpenRegGeneratorImpl::OpenRegGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl{c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)},
      host_(at::detail::createCPUGenerator(seed)) {}

void OpenRegGeneratorImpl::set_current_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.set_current_seed(seed);
  philox_offset_ = 0;
}

std::pair<uint64_t, uint64_t> OpenRegGeneratorImpl::philox_seed_and_offset() {
  std::lock_guard<std::mutex> lock(host_.mutex());
  return {host_.current_seed(), philox_offset_++};
}

void OpenRegGeneratorImpl::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.set_offset(offset);
}

uint64_t OpenRegGeneratorImpl::get_offset() const {
  std::lock_guard<std::mutex> lock(host_.mutex());
  return host_.get_offset();
}

uint64_t OpenRegGeneratorImpl::current_seed() const {
  std::lock_guard<std::mutex> lock(host_.mutex());
  return host_.current_seed();
}

uint64_t OpenRegGeneratorImpl::seed() {
  std::lock_guard<std::mutex> lock(host_.mutex());
  philox_offset_ = 0;
  return host_.seed();
}

void OpenRegGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  constexpr int64_t offset_bytes = sizeof(uint64_t);
  const at::Tensor state = at::Tensor::wrap_tensor_impl(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(
      const_cast<c10::TensorImpl*>(&new_state)));
  TORCH_CHECK(state.scalar_type() == at::kByte && state.dim() == 1 && state.numel() > offset_bytes,
              "RNG state must be a torch.ByteTensor of this generator's state size");
  const at::Tensor host_state = state.narrow(0, 0, state.numel() - offset_bytes).contiguous();
  uint64_t offset = 0;
  std::memcpy(&offset, state.contiguous().const_data_ptr<uint8_t>() + host_state.numel(), offset_bytes);
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.unsafeGetGeneratorImpl()->set_state(*host_state.unsafeGetTensorImpl());
  philox_offset_ = offset;
}

c10::intrusive_ptr<c10::TensorImpl> OpenRegGeneratorImpl::get_state() const {
  std::lock_guard<std::mutex> lock(host_.mutex());
  const at::Tensor host_state = at::Tensor::wrap_tensor_impl(host_.unsafeGetGeneratorImpl()->get_state());
  at::Tensor state = at::empty({host_state.numel() + static_cast<int64_t>(sizeof(uint64_t))}, host_state.options());
  std::memcpy(state.data_ptr<uint8_t>(), host_state.contiguous().const_data_ptr<uint8_t>(), host_state.numel());
  std::memcpy(state.data_ptr<uint8_t>() + host_state.numel(), &philox_offset_, sizeof(uint64_t));
  return state.getIntrusivePtr();
}

c10::DeviceType OpenRegGeneratorImpl::device_type() {
  return c10::DeviceType::PrivateUse1;
}

OpenRegGeneratorImpl* OpenRegGeneratorImpl::clone_impl() const {
  std::lock_guard<std::mutex> lock(host_.mutex());
  auto* copy = new OpenRegGeneratorImpl(device().index());
  copy->host_ = host_.clone();
  copy->philox_offset_ = philox_offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  device = resolve(device);
  // One per device, created on first use and never destroyed (generators
  // may be used during interpreter shutdown), like CUDA's default generators.
  // CUDA starts them from default_rng_seed_val too; torch.manual_seed and
  // torch.openreg.manual_seed reseed them.
  static auto* generators = [] {
    auto* v = new std::vector<at::Generator>();
    for (c10::DeviceIndex d = 0; d < device_count_or_zero(); ++d) {
      v->push_back(at::make_generator<OpenRegGeneratorImpl>(d));
    }
    return v;
  }();
  return (*generators)[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  return at::make_generator<OpenRegGeneratorImpl>(resolve(device));
}

at::Generator host_generator_for(const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  if (!generator.has_value() || !generator->defined()) {
    return default_generator(device).get<OpenRegGeneratorImpl>()->host_generator();
  }
  TORCH_CHECK(generator->device().type() == c10::DeviceType::PrivateUse1,
              "Expected an 'openreg' device type for generator but found '", generator->device().type(), "'");
  return generator->get<OpenRegGeneratorImpl>()->host_generator();
}

void register_generator() {}

} // namespace openreg
