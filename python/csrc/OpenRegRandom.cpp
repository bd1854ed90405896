// Random numbers drawn on the device: uniform_, normal_, bernoulli_ (a
// probability or a tensor of them), bernoulli, random_ over [from, to).
// rand, randn, randint, dropout's mask and nn.init's fills are built on
// these, so they follow without entries.
//
// Each launch runs the engine's `random` kernel (Philox keyed by the
// generator's seed, at a fresh offset from the generator: see
// OpenRegGenerator.h), so a seed reproduces every draw whatever the sizes
// around it, and get_rng_state/set_rng_state replay them. The numbers are
// not the CPU generator's (no backend's are).

#include <ATen/ATen.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegGenerator.h"
#include "OpenRegStructured.h"

namespace openreg::random {
namespace {

using at::Tensor;

// The seed and offset for one launch on `self`'s device: from an openreg
// generator given by the caller, or the device's default one.
std::pair<uint64_t, uint64_t> draw_state(const std::optional<at::Generator>& generator, const Tensor& self) {
  if (!generator.has_value() || !generator->defined()) {
    return default_generator(self.device().index()).get<OpenRegGeneratorImpl>()->philox_seed_and_offset();
  }
  TORCH_CHECK(generator->device().type() == c10::DeviceType::PrivateUse1,
              "Expected an 'openreg' device type for generator but found '", generator->device().type(), "'");
  return generator->get<OpenRegGeneratorImpl>()->philox_seed_and_offset();
}

void fill(engine::or_random_op op, const Tensor& self, const Tensor& probabilities,
          std::initializer_list<c10::Scalar> args, const std::optional<at::Generator>& generator) {
  const auto [seed, offset] = draw_state(generator, self);
  engine::launch_random(op, self, probabilities, args, seed, offset);
}

template <class Op>
void count() {
  openreg::count_op(structured::counted_name<Op>(), true);
}

Tensor& uniform_kernel(Tensor& self, double from, double to, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::uniform_>(self, from, to, generator);
  }
  engine::check_dtype(at::isFloatingType(self.scalar_type()), "check_uniform_bounds", self.scalar_type());
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  count<at::_ops::uniform_>();
  fill(engine::OR_RANDOM_UNIFORM, self, Tensor(), {from, to}, generator);
  return self;
}

Tensor& normal_kernel(Tensor& self, double mean, double std, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::normal_>(self, mean, std, generator);
  }
  engine::check_dtype(at::isFloatingType(self.scalar_type()), "normal_kernel_cpu", self.scalar_type());
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  count<at::_ops::normal_>();
  fill(engine::OR_RANDOM_NORMAL, self, Tensor(), {mean, std}, generator);
  return self;
}

Tensor& bernoulli_scalar_kernel(Tensor& self, double p, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::bernoulli__float>(self, p, generator);
  }
  TORCH_CHECK(p >= 0.0 && p <= 1.0, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  count<at::_ops::bernoulli__float>();
  fill(engine::OR_RANDOM_BERNOULLI, self, Tensor(), {p}, generator);
  return self;
}

// A probability outside [0, 1] in the tensor stops the kernel (a device-side
// check, reported at the next synchronizing call).
Tensor& bernoulli_tensor_kernel(Tensor& self, const Tensor& p, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self, p)) {
    return structured::fallback<at::_ops::bernoulli__Tensor>(self, p, generator);
  }
  engine::check_dtype(at::isFloatingType(p.scalar_type()), "bernoulli_tensor_cpu_p_", p.scalar_type());
  TORCH_CHECK(at::is_expandable_to(p.sizes(), self.sizes()), "bernoulli_: probability tensor of shape ", p.sizes(),
              " cannot be broadcast to ", self.sizes());
  count<at::_ops::bernoulli__Tensor>();
  fill(engine::OR_RANDOM_BERNOULLI, self, p, {}, generator);
  return self;
}

Tensor bernoulli_kernel(const Tensor& self, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::bernoulli>(self, generator);
  }
  engine::check_dtype(at::isFloatingType(self.scalar_type()), "bernoulli_tensor_cpu_self_", self.scalar_type());
  count<at::_ops::bernoulli>();
  Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  fill(engine::OR_RANDOM_BERNOULLI, out, self, {}, generator);
  return out;
}

Tensor& random_range(Tensor& self, int64_t from, int64_t to, std::optional<at::Generator> generator) {
  TORCH_CHECK(from < to, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", to);
  fill(engine::OR_RANDOM_RANGE, self, Tensor(), {from, to - from}, generator);
  return self;
}

Tensor& random_from_kernel(Tensor& self, int64_t from, std::optional<int64_t> to,
                           std::optional<at::Generator> generator) {
  // without `to` the range is the dtype's own, which the fallback knows
  if (!structured::engine_handles(self) || !to.has_value() || self.scalar_type() == at::kBool) {
    return structured::fallback<at::_ops::random__from>(self, from, to, generator);
  }
  count<at::_ops::random__from>();
  return random_range(self, from, *to, generator);
}

Tensor& random_to_kernel(Tensor& self, int64_t to, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self) || self.scalar_type() == at::kBool) {
    return structured::fallback<at::_ops::random__to>(self, to, generator);
  }
  count<at::_ops::random__to>();
  return random_range(self, 0, to, generator);
}

} // namespace
} // namespace openreg::random

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace openreg::random;
  m.impl("uniform_", TORCH_FN(uniform_kernel));
  m.impl("normal_", TORCH_FN(normal_kernel));
  m.impl("bernoulli_.float", TORCH_FN(bernoulli_scalar_kernel));
  m.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor_kernel));
  m.impl("bernoulli", TORCH_FN(bernoulli_kernel));
  m.impl("random_.from", TORCH_FN(random_from_kernel));
  m.impl("random_.to", TORCH_FN(random_to_kernel));
}
