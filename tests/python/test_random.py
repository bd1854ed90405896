"""Random numbers on openreg devices: drawn on the device (Philox), reproducible from a seed,
state save and restore, independent of CPU's generator and of the other device."""

import pytest
import torch


def test_manual_seed_reproduces_randn(device):
    with torch.openreg.device(device):
        torch.openreg.manual_seed(1234)
        a = torch.randn(100, device=device)
        b = torch.randn(100, device=device)
        torch.openreg.manual_seed(1234)
        a2 = torch.randn(100, device=device)
    torch.testing.assert_close(a2.cpu(), a.cpu(), rtol=0, atol=0)
    assert not torch.equal(a.cpu(), b.cpu()), "the generator did not advance"


def test_rng_state_round_trip_restores_the_sequence(device):
    with torch.openreg.device(device):
        torch.openreg.manual_seed(7)
        state = torch.openreg.get_rng_state()
        assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() > 0
        first = torch.rand(50, device=device)
        torch.openreg.set_rng_state(state)
        again = torch.rand(50, device=device)
    torch.testing.assert_close(again.cpu(), first.cpu(), rtol=0, atol=0)


def test_rng_state_of_a_named_device(device):
    torch.openreg.manual_seed_all(3)
    state = torch.openreg.get_rng_state(device)
    torch.testing.assert_close(state, torch.openreg.get_rng_state(str(device)), rtol=0, atol=0)
    torch.testing.assert_close(state, torch.openreg.get_rng_state(device.index), rtol=0, atol=0)
    x = torch.randn(10, device=device)
    torch.openreg.set_rng_state(state, device)
    torch.testing.assert_close(torch.randn(10, device=device).cpu(), x.cpu(), rtol=0, atol=0)


def test_set_rng_state_rejects_a_non_byte_tensor():
    with pytest.raises(TypeError, match="uint8"):
        torch.openreg.set_rng_state(torch.zeros(4))


def test_openreg_rng_is_independent_of_cpu_seed_changes(device):
    torch.openreg.manual_seed_all(99)
    a = torch.randn(20, device=device)
    torch.openreg.manual_seed_all(99)
    torch.default_generator.manual_seed(5)  # CPU only
    torch.randn(1000)  # draws from CPU's generator
    b = torch.randn(20, device=device)
    torch.testing.assert_close(b.cpu(), a.cpu(), rtol=0, atol=0)


def test_devices_have_independent_generators():
    torch.openreg.manual_seed_all(11)
    a0 = torch.randn(20, device="openreg:0")
    torch.openreg.manual_seed_all(11)
    torch.randn(500, device="openreg:1")  # advances openreg:1 only
    b0 = torch.randn(20, device="openreg:0")
    torch.testing.assert_close(b0.cpu(), a0.cpu(), rtol=0, atol=0)


def test_torch_manual_seed_seeds_openreg_too(device):
    torch.manual_seed(2024)
    a = torch.randn(8, device=device)
    with torch.openreg.device(device):
        assert torch.openreg.initial_seed() == 2024
    torch.manual_seed(2024)
    torch.testing.assert_close(torch.randn(8, device=device).cpu(), a.cpu(), rtol=0, atol=0)


def test_an_explicit_generator_on_the_device(device):
    g = torch.Generator(device=device)
    assert g.device == device
    g.manual_seed(5)
    a = torch.randn(16, device=device, generator=g)
    g.manual_seed(5)
    b = torch.randn(16, device=device, generator=g)
    torch.testing.assert_close(b.cpu(), a.cpu(), rtol=0, atol=0)


def test_fork_rng_restores_the_openreg_generator(device):
    torch.openreg.manual_seed_all(17)
    with torch.random.fork_rng(devices=[device.index], device_type="openreg"):
        inside = torch.randn(10, device=device)
    outside = torch.randn(10, device=device)
    torch.testing.assert_close(outside.cpu(), inside.cpu(), rtol=0, atol=0)


def test_dropout_is_reproducible_from_a_seed(device):
    x = torch.ones(1000, device=device)
    torch.openreg.manual_seed_all(21)
    a = torch.nn.functional.dropout(x, p=0.5, training=True)
    torch.openreg.manual_seed_all(21)
    b = torch.nn.functional.dropout(x, p=0.5, training=True)
    torch.testing.assert_close(b.cpu(), a.cpu(), rtol=0, atol=0)
    kept = (a.cpu() != 0).float().mean().item()
    assert 0.3 < kept < 0.7


DEV = "openreg"


def test_random_fills_run_on_the_device():
    torch.openreg.reset_op_counts()
    with torch.openreg.fallback_policy("error"):
        torch.rand(10, device=DEV)
        torch.randn(10, 3, dtype=torch.float64, device=DEV)
        torch.randint(0, 7, (10,), device=DEV)
        torch.empty(10, device=DEV).bernoulli_(0.5)
        torch.bernoulli(torch.full((10,), 0.5, device=DEV))
        torch.nn.functional.dropout(torch.ones(10, device=DEV), 0.3)
        torch.nn.init.kaiming_uniform_(torch.empty(4, 4, device=DEV))
        torch.openreg.synchronize()
    counts = torch.openreg.op_counts()
    assert all(c["fallback"] == 0 for c in counts.values())
    assert counts["aten::uniform_"]["device"] >= 2 and counts["aten::normal_"]["device"] == 1


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.float16, torch.bfloat16), ids=str)
def test_distributions(dtype):
    torch.openreg.manual_seed(5)
    u = torch.empty(200_000, dtype=dtype, device=DEV).uniform_(-2, 3).cpu().double()
    assert u.min() >= -2 and u.max() <= 3
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.std() - 5 / 12**0.5) < 0.02
    n = torch.empty(200_000, dtype=dtype, device=DEV).normal_(1.5, 2.0).cpu().double()
    assert abs(n.mean() - 1.5) < 0.03 and abs(n.std() - 2.0) < 0.03
    assert abs((n - 1.5).abs().gt(2 * 2.0).double().mean() - 0.0455) < 0.003  # the tails of a normal
    b = torch.empty(200_000, dtype=dtype, device=DEV).bernoulli_(0.25).cpu().double()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.25) < 0.01


def test_bernoulli_with_a_probability_tensor_and_integer_ranges():
    torch.openreg.manual_seed(6)
    p = torch.tensor([0.0, 1.0, 0.5]).repeat(50_000).to(DEV)
    draws = torch.bernoulli(p).cpu().view(-1, 3)
    assert draws[:, 0].sum() == 0 and draws[:, 1].sum() == 50_000 and abs(draws[:, 2].mean() - 0.5) < 0.01
    for dtype in (torch.int64, torch.int32, torch.uint8, torch.float32):
        r = torch.randint(-3 if dtype != torch.uint8 else 0, 9, (100_000,), dtype=dtype, device=DEV).cpu()
        counts = torch.bincount((r.long() - r.long().min()))
        assert r.dtype == dtype and counts.numel() == (12 if dtype != torch.uint8 else 9)
        assert counts.min() > 0.9 * counts.float().mean()


def test_values_depend_on_the_seed_and_position_only():
    # Philox keyed by (seed, offset) at each element's row-major position: the same draw
    # through a transposed view lands on the same logical positions.
    torch.openreg.manual_seed(7)
    a = torch.empty(5, 8, device=DEV).uniform_()
    torch.openreg.manual_seed(7)
    b = torch.empty(8, 5, device=DEV).t().uniform_()
    assert torch.equal(a.cpu(), b.cpu())
    # and get_rng_state/set_rng_state replay device draws
    state = torch.openreg.get_rng_state()
    c = torch.randn(100, device=DEV)
    torch.openreg.set_rng_state(state)
    assert torch.equal(torch.randn(100, device=DEV).cpu(), c.cpu())


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.float16), ids=str)
def test_every_path_draws_the_same_value_at_a_position(dtype):
    # Consecutive elements share a Philox block (four uniforms, or two of the other draws): a
    # contiguous fill, a transposed view, a ragged length and a probability tensor all give
    # each logical position the same value.
    fills = {
        "uniform": lambda t: t.uniform_(-1, 2),
        "normal": lambda t: t.normal_(0.5, 3.0),
        "bernoulli": lambda t: t.bernoulli_(0.3),
    }
    for name, fill in fills.items():
        torch.openreg.manual_seed(11)
        a = fill(torch.empty(9, 37, dtype=dtype, device=DEV)).cpu()
        torch.openreg.manual_seed(11)
        b = fill(torch.empty(37, 9, dtype=dtype, device=DEV).t()).cpu()
        assert torch.equal(a, b), name
        torch.openreg.manual_seed(11)
        c = fill(torch.empty(9 * 37 + 5, dtype=dtype, device=DEV)).cpu()
        assert torch.equal(c[: 9 * 37].view(9, 37), a), name
    torch.openreg.manual_seed(12)
    d = torch.empty(9, 37, dtype=dtype, device=DEV).bernoulli_(0.3).cpu()
    torch.openreg.manual_seed(12)
    e = torch.bernoulli(torch.full((9, 37), 0.3, dtype=dtype, device=DEV)).cpu()
    assert torch.equal(d, e)


def test_the_two_normals_of_a_block_are_independent():
    # r cos(t) and r sin(t) of one Box-Muller transform: uncorrelated, each standard normal
    torch.openreg.manual_seed(13)
    z = torch.randn(400_000, device=DEV).cpu().double().view(-1, 2)
    for half in (z[:, 0], z[:, 1]):
        assert abs(half.mean()) < 0.01 and abs(half.std() - 1) < 0.01
        assert abs(half.abs().gt(2).double().mean() - 0.0455) < 0.003
    assert abs(torch.corrcoef(z.t())[0, 1]) < 0.01
    assert abs(torch.corrcoef((z * z).t())[0, 1]) < 0.01


def test_bad_arguments_raise_like_cpu_and_the_device_stays_usable():
    x = torch.empty(4, device=DEV)
    with pytest.raises(RuntimeError, match="from=3.*to=1"):
        x.uniform_(3, 1)
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        x.normal_(0, -1)
    with pytest.raises(RuntimeError, match=r"p to be in \[0, 1\]"):
        x.bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="from=5 >= to=5"):
        x.random_(5, 5)
    with pytest.raises(NotImplementedError, match="Long"):
        torch.empty(3, dtype=torch.long, device=DEV).uniform_()
    with pytest.raises(NotImplementedError, match="Byte"):  # probabilities are floats, as on CPU
        x.bernoulli_(torch.ones(4, dtype=torch.uint8, device=DEV))
    with pytest.raises(RuntimeError, match="openreg"):  # a CPU generator for a device op
        x.uniform_(generator=torch.Generator())
    # a probability outside [0, 1] inside a tensor stops the device kernel (as CUDA's assert)
    with pytest.raises(RuntimeError, match="trapped|random"):
        torch.bernoulli(torch.tensor([0.5, 2.0], device=DEV)).cpu()
    assert torch.rand(3, device=DEV).cpu().lt(1).all()


def test_a_model_with_dropout_trains_entirely_on_the_device():
    torch.openreg.manual_seed(8)
    torch.manual_seed(8)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(32, 2)).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(64, 8, device=DEV), torch.randint(0, 2, (64,), device=DEV)
    torch.openreg.reset_op_counts()
    with torch.openreg.fallback_policy("error"):
        losses = []
        for _ in range(30):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert all(c["fallback"] == 0 for c in torch.openreg.op_counts().values())


@pytest.mark.parametrize(
    "dtype, top",
    [(torch.float32, 2**24), (torch.float16, 2**11), (torch.bfloat16, 2**8), (torch.float64, 2**53),
     (torch.int64, 2**63 - 1), (torch.int32, 2**31 - 1), (torch.int8, 127), (torch.uint8, 255), (torch.bool, 1)],
    ids=str,
)
def test_random_without_a_range_covers_the_dtype_range(dtype, top):
    torch.openreg.manual_seed(9)
    with torch.openreg.fallback_policy("error"):
        r = torch.empty(100_000, dtype=dtype, device=DEV).random_().cpu()
    values = r.double() if dtype.is_floating_point else r.long()
    assert values.min() >= 0 and values.max() <= top
    # the upper half of the range is reached: not a narrower range
    assert values.max() > top // 2 if dtype != torch.bool else values.max() == 1


def test_random_from_without_to_reaches_the_whole_int64_range():
    with torch.openreg.fallback_policy("error"):
        r = torch.empty(10_000, dtype=torch.int64, device=DEV).random_(-(2**63), None).cpu()
        s = torch.empty(10_000, dtype=torch.int8, device=DEV).random_(-5, None).cpu()
    assert r.min() < -(2**62) and r.max() > 2**62
    assert s.min() == -5 and s.max() == 127


def test_exponential_moments_and_reproducibility():
    torch.openreg.manual_seed(10)
    with torch.openreg.fallback_policy("error"):
        e = torch.empty(200_000, dtype=torch.float64, device=DEV).exponential_(2.0).cpu()
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.01 and abs(e.std() - 0.5) < 0.01
    with pytest.raises(RuntimeError, match="lambda > 0.0"):
        torch.empty(3, device=DEV).exponential_(0.0)


@pytest.mark.parametrize("n", (0, 1, 7, 5000))
@pytest.mark.parametrize("dtype", (torch.int64, torch.int16, torch.float32), ids=str)
def test_randperm_is_a_permutation_drawn_on_the_device(n, dtype):
    torch.openreg.manual_seed(11)
    torch.openreg.reset_op_counts()
    with torch.openreg.fallback_policy("error"):
        p = torch.randperm(n, dtype=dtype, device=DEV)
    assert p.device.type == "openreg" and p.dtype == dtype
    assert torch.equal(p.cpu().long().sort().values, torch.arange(n))
    torch.openreg.manual_seed(11)
    assert torch.equal(torch.randperm(n, dtype=dtype, device=DEV).cpu(), p.cpu())
    if n > 100:  # not the identity, and not the same as the next draw
        assert not torch.equal(p.cpu().long(), torch.arange(n))
        assert not torch.equal(torch.randperm(n, dtype=dtype, device=DEV).cpu(), p.cpu())


def test_randperm_too_large_for_the_dtype_raises():
    with pytest.raises(RuntimeError, match="too large"):
        torch.randperm(300, dtype=torch.int8, device=DEV)
    with pytest.raises(RuntimeError, match="negative"):
        torch.randperm(-1, device=DEV)


def test_multinomial_frequencies_with_and_without_replacement():
    torch.openreg.manual_seed(12)
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 5.0]], device=DEV)
    with torch.openreg.fallback_policy("error"):
        with_rep = torch.multinomial(probs, 40_000, replacement=True).cpu()
        single = torch.multinomial(probs, 1).cpu()
        without = torch.stack([torch.multinomial(probs[0], 3) for _ in range(2000)]).cpu()
    freq = torch.bincount(with_rep[0], minlength=4).double() / 40_000
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64), atol=0.01, rtol=0)
    assert (with_rep[1] == 3).all() and single[1].item() == 3 and single[0].item() != 1
    # without replacement: three distinct categories, never the impossible one, and the
    # likeliest one usually first
    assert all(len(set(row.tolist())) == 3 and 1 not in row.tolist() for row in without)
    assert abs((without[:, 0] == 2).double().mean() - 0.6) < 0.05


def test_multinomial_bad_distributions_raise_like_cpu():
    for bad, message in ((torch.tensor([0.5, -1.0]), "element < 0"), (torch.tensor([0.0, 0.0]), "sum of probabilities"),
                         (torch.tensor([1.0, float("nan")]), "nan")):
        with pytest.raises(RuntimeError, match=message):
            torch.multinomial(bad, 1)
        with pytest.raises(RuntimeError, match=message):
            torch.multinomial(bad.to(DEV), 1)
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(torch.ones(3, device=DEV), 4)
    with pytest.raises(RuntimeError, match="1 or 2 dim"):
        torch.multinomial(torch.ones(2, 2, 2, device=DEV), 1)
    assert torch.multinomial(torch.ones(3, device=DEV), 2).cpu().unique().numel() == 2
    with torch.openreg.fallback_policy("error"):  # one distribution, with replacement
        assert torch.multinomial(torch.tensor([0.0, 1.0, 0.0], device=DEV), 5, replacement=True).cpu().eq(1).all()


def test_normal_with_tensor_means_and_deviations_runs_on_the_device():
    torch.openreg.manual_seed(13)
    mean = torch.tensor([0.0, 10.0, -5.0], device=DEV).repeat(50_000)
    with torch.openreg.fallback_policy("error"):
        a = torch.normal(mean, 2.0).cpu().view(-1, 3)
        b = torch.normal(1.0, torch.tensor([0.0, 3.0], device=DEV).repeat(50_000)).cpu().view(-1, 2)
        c = torch.normal(mean, torch.full_like(mean, 0.5)).cpu().view(-1, 3)
    torch.testing.assert_close(a.mean(0), torch.tensor([0.0, 10.0, -5.0]), atol=0.05, rtol=0)
    assert abs(a.std(0) - 2.0).max() < 0.05 and (b[:, 0] == 1.0).all() and abs(b[:, 1].std() - 3.0) < 0.05
    assert abs(c.std(0) - 0.5).max() < 0.02
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        torch.normal(mean[:3], torch.tensor([1.0, -1.0, 1.0], device=DEV))


def test_cauchy_log_normal_and_geometric_follow_their_distributions():
    torch.openreg.manual_seed(12)
    with torch.openreg.fallback_policy("error"):
        c = torch.empty(200_000, dtype=torch.float64, device=DEV).cauchy_(1.5, 2.0).cpu()
        ln = torch.empty(200_000, dtype=torch.float64, device=DEV).log_normal_(0.5, 0.25).cpu()
        g = torch.empty(200_000, dtype=torch.int64, device=DEV).geometric_(0.25).cpu()
        gf = torch.empty(1000, device=DEV).geometric_(0.9).cpu()
    # the Cauchy median and quartiles are median -+ sigma; log-normal's log is normal; geometric's mean is 1/p
    assert abs(c.median() - 1.5) < 0.03 and abs(c.quantile(0.75) - c.quantile(0.25) - 4.0) < 0.08
    assert ln.min() > 0 and abs(ln.log().mean() - 0.5) < 0.005 and abs(ln.log().std() - 0.25) < 0.005
    assert g.min() >= 1 and abs(g.double().mean() - 4.0) < 0.05 and g.dtype == torch.int64
    assert gf.min() >= 1 and torch.equal(gf, gf.round())
    torch.openreg.manual_seed(12)
    assert torch.equal(torch.empty(200_000, dtype=torch.float64, device=DEV).cauchy_(1.5, 2.0).cpu(), c)
    with pytest.raises(RuntimeError, match="sigma > 0.0"):
        torch.empty(3, device=DEV).cauchy_(0.0, 0.0)
    with pytest.raises(RuntimeError, match="std > 0.0"):
        torch.empty(3, device=DEV).log_normal_(0.0, -1.0)
    with pytest.raises(RuntimeError, match="p to be in"):
        torch.empty(3, device=DEV).geometric_(1.5)
    assert torch.empty(2, device=DEV).geometric_(0.5).device.type == "openreg"  # still usable


def test_float32_normals_round_the_float64_transform():
    # float32 (and float16/bfloat16) normals take a shorter logarithm and sine/cosine, two blocks
    # at a time; they stay within a float32 rounding of the float64 draws of the same positions
    torch.openreg.manual_seed(3)
    single = torch.randn(100_003, device=DEV).cpu().double()
    torch.openreg.manual_seed(3)
    double = torch.randn(100_003, device=DEV, dtype=torch.float64).cpu()
    half_ulp = torch.finfo(torch.float32).eps / 2 * double.abs().clamp_min(torch.finfo(torch.float32).tiny)
    assert torch.all((single - double).abs() <= half_ulp * 1.01)
