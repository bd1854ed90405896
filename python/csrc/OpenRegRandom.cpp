// Random numbers drawn on the device: uniform_, normal_ (and normal with
// tensor means or deviations), exponential_, cauchy_, log_normal_, geometric_,
// bernoulli_ (a probability or a tensor of them), bernoulli, random_ (over
// [from, to), or the dtype's own range), randperm and multinomial. rand,
// randn, randint, dropout's mask and nn.init's fills are built on these, so
// they follow without entries.
//
// Each launch runs the engine's `random` kernel (Philox keyed by the
// generator's seed, at a fresh offset from the generator: see
// OpenRegGenerator.h), so a seed reproduces every draw whatever the sizes
// around it, and get_rng_state/set_rng_state replay them. The numbers are
// not the CPU generator's (no backend's are).

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/util/MathConstants.h>
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

// [from, from + n) with n = to - from as an unsigned count (0: all 2^64).
Tensor& random_count(Tensor& self, int64_t from, uint64_t n, std::optional<at::Generator> generator) {
  fill(engine::OR_RANDOM_RANGE, self, Tensor(), {from, static_cast<int64_t>(n)}, generator);
  return self;
}

Tensor& random_range(Tensor& self, int64_t from, int64_t to, std::optional<at::Generator> generator) {
  TORCH_CHECK(from < to, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", to);
  return random_count(self, from, static_cast<uint64_t>(to) - static_cast<uint64_t>(from), generator);
}

// The largest value random_ draws without `to`, as CPU: 2^digits for floats
// (every integer up to it is exact), the dtype's maximum for integers.
uint64_t dtype_top(at::ScalarType dtype) {
  uint64_t top = 0;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "random_", [&] {
    if constexpr (std::is_floating_point_v<scalar_t> || std::is_same_v<scalar_t, at::Half> ||
                  std::is_same_v<scalar_t, at::BFloat16>) {
      top = uint64_t{1} << std::numeric_limits<scalar_t>::digits;
    } else {
      top = static_cast<uint64_t>(std::numeric_limits<scalar_t>::max());
    }
  });
  return top;
}

Tensor& random_from_kernel(Tensor& self, int64_t from, std::optional<int64_t> to,
                           std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self) || self.scalar_type() == at::kBool) {
    return structured::fallback<at::_ops::random__from>(self, from, to, generator);
  }
  count<at::_ops::random__from>();
  if (to.has_value()) {
    return random_range(self, from, *to, generator);
  }
  const uint64_t top = dtype_top(self.scalar_type());
  TORCH_CHECK(static_cast<int64_t>(top) >= from, "random_ expects 'from' casted to dtype to be less than or equal to "
              "'to_inc' casted to dtype, but got from=", from, " > to_inc=", top);
  return random_count(self, from, top - static_cast<uint64_t>(from) + 1, generator);
}

Tensor& random_to_kernel(Tensor& self, int64_t to, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self) || self.scalar_type() == at::kBool) {
    return structured::fallback<at::_ops::random__to>(self, to, generator);
  }
  count<at::_ops::random__to>();
  return random_range(self, 0, to, generator);
}

Tensor& random_kernel(Tensor& self, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::random_>(self, generator);
  }
  count<at::_ops::random_>();
  return random_count(self, 0, self.scalar_type() == at::kBool ? 2 : dtype_top(self.scalar_type()) + 1, generator);
}

// -log(1 - u) / lambda, u uniform in [0, 1).
Tensor& exponential_kernel(Tensor& self, double lambda, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::exponential_>(self, lambda, generator);
  }
  engine::check_dtype(at::isFloatingType(self.scalar_type()), "exponential_cpu", self.scalar_type());
  TORCH_CHECK(lambda > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambda);
  count<at::_ops::exponential_>();
  fill(engine::OR_RANDOM_UNIFORM, self, Tensor(), {0.0, 1.0}, generator);
  self.neg_().log1p_().div_(-lambda);
  return self;
}

// median + sigma tan(pi (u - 1/2)), u uniform in [0, 1), as CPU transforms it.
Tensor& cauchy_kernel(Tensor& self, double median, double sigma, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::cauchy_>(self, median, sigma, generator);
  }
  engine::check_dtype(at::isFloatingType(self.scalar_type()), "cauchy_cpu", self.scalar_type());
  TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
  count<at::_ops::cauchy_>();
  fill(engine::OR_RANDOM_UNIFORM, self, Tensor(), {0.0, 1.0}, generator);
  self.sub_(0.5).mul_(c10::pi<double>).tan_().mul_(sigma).add_(median);
  return self;
}

// exp of a normal draw with the given mean and deviation.
Tensor& log_normal_kernel(Tensor& self, double mean, double std, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::log_normal_>(self, mean, std, generator);
  }
  engine::check_dtype(at::isFloatingType(self.scalar_type()), "log_normal_cpu", self.scalar_type());
  TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
  count<at::_ops::log_normal_>();
  fill(engine::OR_RANDOM_NORMAL, self, Tensor(), {mean, std}, generator);
  self.exp_();
  return self;
}

// The number of Bernoulli(p) trials to the first success: ceil(ln u / ln(1 - p))
// with u uniform in (0, 1] (floating draws in float64 for integer tensors).
Tensor& geometric_kernel(Tensor& self, double p, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::geometric_>(self, p, generator);
  }
  engine::check_dtype(self.scalar_type() != at::kBool, "geometric_cpu", self.scalar_type());
  TORCH_CHECK(0 < p && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
  count<at::_ops::geometric_>();
  Tensor u = at::isFloatingType(self.scalar_type()) ? self : at::empty_like(self, self.options().dtype(at::kDouble));
  fill(engine::OR_RANDOM_UNIFORM, u, Tensor(), {0.0, 1.0}, generator);
  u.neg_().add_(1).log_().div_(std::log1p(-p)).ceil_();
  if (!u.is_same(self)) {
    self.copy_(u);
  }
  return self;
}

// normal(mean, std) with a tensor mean or std (or both): standard normal draws
// scaled and shifted on the device, broadcast as CPU broadcasts them; a
// negative std is refused as on CPU (which reads the minimum back too).
Tensor normal_with_tensors(const Tensor& mean, const Tensor& std, std::optional<at::Generator> generator) {
  TORCH_CHECK(!std.defined() || std.numel() == 0 || std.min().ge(0).item<bool>(),
              "normal expects all elements of std >= 0.0");
  const Tensor& like = mean.defined() ? mean : std;
  const auto shape = mean.defined() && std.defined() ? at::infer_size(mean.sizes(), std.sizes()) : like.sizes().vec();
  const at::ScalarType dtype =
      mean.defined() && std.defined() ? at::promote_types(mean.scalar_type(), std.scalar_type()) : like.scalar_type();
  engine::check_dtype(at::isFloatingType(dtype), "normal", dtype);
  Tensor out = at::empty(shape, like.options().dtype(dtype));
  fill(engine::OR_RANDOM_NORMAL, out, Tensor(), {0.0, 1.0}, generator);
  return out;
}

Tensor normal_tensor_float(const Tensor& mean, double std, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(mean)) {
    return structured::fallback<at::_ops::normal_Tensor_float>(mean, std, generator);
  }
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  count<at::_ops::normal_Tensor_float>();
  return normal_with_tensors(mean, Tensor(), generator).mul_(std).add_(mean);
}

Tensor normal_float_tensor(double mean, const Tensor& std, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(std)) {
    return structured::fallback<at::_ops::normal_float_Tensor>(mean, std, generator);
  }
  count<at::_ops::normal_float_Tensor>();
  return normal_with_tensors(Tensor(), std, generator).mul_(std).add_(mean);
}

Tensor normal_tensor_tensor(const Tensor& mean, const Tensor& std, std::optional<at::Generator> generator) {
  if (!structured::engine_handles(mean, std)) {
    return structured::fallback<at::_ops::normal_Tensor_Tensor>(mean, std, generator);
  }
  count<at::_ops::normal_Tensor_Tensor>();
  return normal_with_tensors(mean, std, generator).mul_(std).add_(mean);
}

// A random permutation: n random 64-bit keys, stably sorted; the order of
// the sort is the permutation.
Tensor& randperm_kernel(int64_t n, std::optional<at::Generator> generator, Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  if (!structured::engine_handles(out) || out.scalar_type() == at::kBool) {
    return structured::fallback<at::_ops::randperm_generator_out>(n, generator, out);
  }
  TORCH_CHECK(n <= 1 || static_cast<uint64_t>(n - 1) <= dtype_top(out.scalar_type()), "n is too large for result "
              "tensor type: '", out.toString(), "'");
  count<at::_ops::randperm_generator_out>();
  out.resize_({n});
  if (n > 0) {
    Tensor keys = at::empty({n}, out.options().dtype(at::kLong));
    random_count(keys, 0, 0, generator);
    out.copy_(std::get<1>(keys.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false)));
  }
  return out;
}

// multinomial's checks, as CPU makes them (one reduction read back).
void check_distribution(const Tensor& probs) {
  const Tensor valid = (probs.amax() < std::numeric_limits<double>::infinity()).logical_and_(probs.amin() >= 0);
  TORCH_CHECK(valid.item<bool>(), "probability tensor contains either `inf`, `nan` or element < 0");
  const Tensor sums = probs.dim() == 1 ? probs.sum() : probs.sum(1);
  TORCH_CHECK(!sums.eq(0).any().item<bool>(), "invalid multinomial distribution (sum of probabilities <= 0)");
}

// Without replacement (or one sample): the largest p / q, q ~ Exp(1) (the
// Gumbel trick CPU uses). With replacement: each sample is the first
// category whose cumulative probability exceeds a uniform draw.
Tensor multinomial_kernel(const Tensor& self, c10::SymInt n_sample_sym, bool replacement,
                          std::optional<at::Generator> generator) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::multinomial>(self, n_sample_sym, replacement, generator);
  }
  const int64_t n_sample = n_sample_sym.expect_int();
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "multinomial only supports floating-point dtypes for input, "
              "got: ", self.scalar_type());
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  const int64_t n_categories = self.size(-1);
  TORCH_CHECK(replacement || n_sample <= n_categories,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(n_categories <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
  count<at::_ops::multinomial>();
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 1);
  shape.push_back(n_sample);
  if (self.numel() == 0) {
    return at::empty(shape, self.options().dtype(at::kLong));
  }
  check_distribution(self);
  if (!replacement || n_sample == 1) {
    Tensor q = at::empty_like(self, at::MemoryFormat::Contiguous);
    exponential_kernel(q, 1.0, generator);
    // a zero draw would make 0 / 0 for an impossible category
    q.clamp_min_(std::numeric_limits<float>::min());
    const Tensor keys = self / q;
    return n_sample == 1 ? keys.argmax(-1, /*keepdim=*/true) : std::get<1>(keys.topk(n_sample));
  }
  const Tensor rows = self.dim() == 1 ? self.unsqueeze(0) : self;
  Tensor cdf = rows.to(at::kDouble).cumsum(1);
  cdf = cdf / cdf.narrow(1, n_categories - 1, 1); // the last entry exactly 1
  Tensor u = at::empty({rows.size(0), n_sample}, cdf.options());
  fill(engine::OR_RANDOM_UNIFORM, u, Tensor(), {0.0, 1.0}, generator);
  // the count of cumulative probabilities <= u: the first category whose
  // one exceeds u (never a zero-probability one), in bounded chunks
  Tensor result = at::empty({rows.size(0), n_sample}, self.options().dtype(at::kLong));
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 24) / (rows.size(0) * n_categories));
  for (int64_t start = 0; start < n_sample; start += chunk) {
    const int64_t len = std::min(chunk, n_sample - start);
    result.narrow(1, start, len).copy_(cdf.unsqueeze(1).le(u.narrow(1, start, len).unsqueeze(2)).sum(2));
  }
  return self.dim() == 1 ? result.squeeze(0) : result;
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
  m.impl("random_", TORCH_FN(random_kernel));
  m.impl("exponential_", TORCH_FN(exponential_kernel));
  m.impl("cauchy_", TORCH_FN(cauchy_kernel));
  m.impl("log_normal_", TORCH_FN(log_normal_kernel));
  m.impl("geometric_", TORCH_FN(geometric_kernel));
  m.impl("randperm.generator_out", TORCH_FN(randperm_kernel));
  m.impl("multinomial", TORCH_FN(multinomial_kernel));
  m.impl("normal.Tensor_float", TORCH_FN(normal_tensor_float));
  m.impl("normal.float_Tensor", TORCH_FN(normal_float_tensor));
  m.impl("normal.Tensor_Tensor", TORCH_FN(normal_tensor_tensor));
}
