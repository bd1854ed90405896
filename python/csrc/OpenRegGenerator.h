// The openreg random number generator (c10::GeneratorImpl), one default per
// device. CUDA's counterpart is at::CUDAGeneratorImpl.
//
// The device's random kernels (uniform_, normal_, bernoulli_, random_ over a
// range: the engine's `random`) draw from Philox keyed by the generator's
// seed, at an offset the generator hands out per launch. The other random
// ops (randperm, multinomial, ...) run through the CPU fallback, that is,
// through the CPU kernels, and a CPU kernel only accepts a generator whose
// device is the CPU. So an openreg generator also *owns* a CPU generator (an
// at::CPUGeneratorImpl, the mt19937 engine and its state) and forwards every
// call to it; the fallback hands that CPU generator to the CPU kernel in place
// of the openreg one (see `host_generator_for`). The openreg generator is
// what Python sees: `torch.Generator(device="openreg")`, its device is
// `openreg:N`, and `torch.openreg.manual_seed` seeds the device's default one,
// independently of the CPU's default generator.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace openreg {

struct OpenRegGeneratorImpl final : public c10::GeneratorImpl {
  explicit OpenRegGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);
  ~OpenRegGeneratorImpl() override = default;

  // Each forwards to the CPU generator under its mutex (the mutex its CPU
  // kernels take), so a seed cannot change halfway through a kernel.
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  // The state is the CPU generator's state tensor (a CPU uint8 tensor)
  // followed by the 8 bytes of the device kernels' Philox offset.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  static c10::DeviceType device_type();

  // The CPU generator that CPU kernels draw from on this generator's behalf.
  const at::Generator& host_generator() const {
    return host_;
  }

  // For a device kernel: the seed and a fresh Philox offset (each call takes
  // the next one). Seeding resets the offset to 0, as CUDA's generator does.
  std::pair<uint64_t, uint64_t> philox_seed_and_offset();

 private:
  OpenRegGeneratorImpl* clone_impl() const override;
  // Mutable for its mutex: const queries (current_seed, get_state) lock it too.
  mutable at::Generator host_;
  uint64_t philox_offset_ = 0; // under host_'s mutex
};

// The default generator of a device (-1 = current device), created on first use.
const at::Generator& default_generator(c10::DeviceIndex device);
// A new generator for a device (-1 = current device).
at::Generator new_generator(c10::DeviceIndex device);

// The CPU generator to give a CPU kernel that runs an op for openreg tensors
// on `device`: for an openreg generator, its host generator; for none, the
// host generator of the device's default generator. A CPU generator is
// refused, as CUDA refuses one.
at::Generator host_generator_for(const std::optional<at::Generator>& generator, c10::DeviceIndex device);

// Keeps this object file linked.
void register_generator();

} // namespace openreg
