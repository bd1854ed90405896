"""In-place ops, out= ops, ops with several outputs, and op accounting. CPU is the oracle."""

import re

import pytest
import torch


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "pow": lambda a, b: torch.pow(a.abs(), b),
}


@pytest.mark.parametrize("op", BINARY, ids=str)
def test_binary_ops_match_cpu(against_cpu, op):
    against_cpu(BINARY[op], _x(5, 7, seed=1), _x(5, 7, seed=2))


def test_broadcasting_and_scalars_match_cpu(against_cpu):
    against_cpu(lambda a, b: a * b + 3.0 - a / 2, _x(4, 1, 5), _x(3, 1))


def test_matmul_and_reductions_match_cpu(against_cpu):
    against_cpu(lambda a, b: (a @ b, (a @ b).sum(), a.mean(dim=0), a.amax(dim=1)), _x(8, 5), _x(5, 3))


def test_integer_and_bool_ops_match_cpu(against_cpu):
    a = torch.arange(-6, 6)
    against_cpu(lambda t: (t * 3 // 2, t % 4, t > 0, (t > 0) & (t < 3)), a)


INPLACE = {
    "add_": lambda t, o: t.add_(o),
    "mul_": lambda t, o: t.mul_(o),
    "add_alpha_": lambda t, o: t.add_(o, alpha=-0.5),
    "clamp_": lambda t, o: t.clamp_(min=-0.1, max=0.2),
    "sin_": lambda t, o: t.sin_(),
    "copy_": lambda t, o: t.copy_(o),
    "zero_": lambda t, o: t.zero_(),
    "masked_fill_": lambda t, o: t.masked_fill_(o > 0, 1.0),
}


@pytest.mark.parametrize("op", INPLACE, ids=str)
def test_in_place_ops_change_the_tensor_itself(device, op):
    cpu, other = _x(6, 4, seed=3), _x(6, 4, seed=4)
    d = cpu.to(device)
    ptr = d.data_ptr()
    result = INPLACE[op](d, other.to(device))
    INPLACE[op](cpu, other)
    assert result is d and d.data_ptr() == ptr
    torch.testing.assert_close(d.cpu(), cpu)


@pytest.mark.parametrize("op", ["add_", "sin_", "clamp_"])
def test_in_place_ops_on_non_contiguous_views_write_the_base(device, op):
    cpu, other = _x(6, 8, seed=5), _x(6, 8, seed=6)
    d = cpu.to(device)
    INPLACE[op](d[:, ::2], other.to(device)[:, ::2])
    INPLACE[op](cpu[:, ::2], other[:, ::2])
    torch.testing.assert_close(d.cpu(), cpu)


OUT = {
    "add": lambda a, b, out: torch.add(a, b, out=out),
    "mul": lambda a, b, out: torch.mul(a, b, out=out),
    "sin": lambda a, b, out: torch.sin(a, out=out),
    "mm": lambda a, b, out: torch.mm(a, b.t(), out=out),
}


@pytest.mark.parametrize("op", OUT, ids=str)
def test_out_ops_write_the_given_tensor(device, op):
    a, b = _x(5, 5, seed=7), _x(5, 5, seed=8)
    expected = OUT[op](a, b, torch.empty(5, 5))
    out = torch.full((5, 5), float("nan"), device=device)
    ptr = out.data_ptr()
    returned = OUT[op](a.to(device), b.to(device), out)
    assert returned is out and out.data_ptr() == ptr
    torch.testing.assert_close(out.cpu(), expected)


@pytest.mark.parametrize("op", OUT, ids=str)
def test_out_ops_resize_an_empty_out(device, op):
    a, b = _x(5, 5, seed=9), _x(5, 5, seed=10)
    out = torch.empty(0, device=device)
    OUT[op](a.to(device), b.to(device), out)
    assert out.shape == (5, 5) and out.device == device
    torch.testing.assert_close(out.cpu(), OUT[op](a, b, torch.empty(0)))


def test_out_op_into_a_non_contiguous_view(device):
    a = _x(4, 6, seed=11)
    base = torch.zeros(6, 4)
    dbase = base.to(device)
    torch.sin(a, out=base.t())
    torch.sin(a.to(device), out=dbase.t())
    torch.testing.assert_close(dbase.cpu(), base)


def test_max_with_dim_returns_values_and_indices(against_cpu):
    res = against_cpu(lambda t: tuple(torch.max(t, dim=1)), _x(7, 9, seed=12))
    assert res[1].dtype == torch.int64


def test_sort_returns_values_and_indices(against_cpu):
    against_cpu(lambda t: tuple(torch.sort(t, dim=-1, descending=True)), _x(5, 11, seed=13))


def test_topk_returns_values_and_indices(against_cpu):
    against_cpu(lambda t: tuple(torch.topk(t, 3, dim=0)), _x(10, 4, seed=14))


def test_several_outputs_into_out_tensors(device):
    t = _x(6, 5, seed=15)
    values, indices = torch.empty(0, device=device), torch.empty(0, dtype=torch.long, device=device)
    torch.max(t.to(device), 1, out=(values, indices))
    expected = torch.max(t, 1)
    torch.testing.assert_close(values.cpu(), expected.values)
    torch.testing.assert_close(indices.cpu(), expected.indices)


def test_item_and_tolist_read_the_device(device):
    t = torch.tensor([1.5, -2.0, 3.0], device=device)
    assert t.sum().item() == 2.5
    assert t.tolist() == [1.5, -2.0, 3.0]
    assert bool((t > 0).any())


@pytest.mark.parametrize("other", ["openreg:1", "cpu"])
def test_ops_on_tensors_of_two_devices_are_rejected(other):
    """As on CUDA: "Expected all tensors to be on the same device" (a 0-dim CPU tensor is allowed)."""
    a = torch.ones(3, device="openreg:0")
    b = torch.ones(3, device=other)
    with pytest.raises(RuntimeError, match="device"):
        a + b
    with pytest.raises(RuntimeError, match="device"):
        torch.mm(a[None], b[:, None])
    torch.testing.assert_close((a + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))


# ---- op accounting --------------------------------------------------------------


def _find(counts, op):
    pattern = re.compile(rf"^(aten::)?{op}(\.|$)")
    keys = [k for k in counts if pattern.match(k)]
    return keys


def _total(counts, op, kind):
    return sum(counts[k][kind] for k in _find(counts, op))


def test_op_counts_show_an_add(device):
    a, b = torch.ones(8, device=device), torch.full((8,), 2.0, device=device)
    torch.openreg.reset_op_counts()
    c = a + b
    counts = torch.openreg.op_counts()
    assert _find(counts, "add"), f"no add in {counts}"
    assert _total(counts, "add", "device") + _total(counts, "add", "fallback") >= 1
    for entry in counts.values():
        assert set(entry) == {"device", "fallback"}
    torch.testing.assert_close(c.cpu(), torch.full((8,), 3.0))


def test_an_op_without_a_device_kernel_counts_as_fallback(device):
    a = torch.ones(8, device=device)
    before = _total(torch.openreg.op_counts(), "special_zeta", "fallback")
    torch.special.zeta(a, a)
    after = torch.openreg.op_counts()
    assert _total(after, "special_zeta", "fallback") > before, (
        f"zeta counts: {[(k, after[k]) for k in _find(after, 'special_zeta')]}"
    )


def test_reset_op_counts_clears_every_count(device):
    torch.ones(2, device=device).cos()
    assert torch.openreg.op_counts()
    torch.openreg.reset_op_counts()
    assert torch.openreg.op_counts() == {}


# out= and in-place forms whose functional form has a device kernel: one implementation serves
# all three (the functional kernel, then a device copy into the destination).
OVER_FUNCTIONAL = {
    "_log_softmax.out": lambda x, out: torch._log_softmax(x, 1, False, out=out),
    "_softmax.out": lambda x, out: torch._softmax(x, 0, False, out=out),
    "isposinf.out": lambda x, out: torch.isposinf(x / 0, out=out),
    "logit.out": lambda x, out: torch.logit(x.sigmoid(), 1e-3, out=out),
    "upsample_nearest2d.out": lambda x, out: torch._C._nn.upsample_nearest2d(x.view(1, 1, 4, 6), [8, 9], out=out),
    "reflection_pad1d.out": lambda x, out: torch._C._nn.reflection_pad1d(x, [2, 1], out=out),
    "binary_cross_entropy.out": lambda x, out: torch._C._nn.binary_cross_entropy(
        x.sigmoid(), x.sigmoid().flip(0), None, 1, out=out),
}


@pytest.mark.parametrize("name", OVER_FUNCTIONAL, ids=str)
def test_out_forms_over_a_functional_kernel_run_on_the_device(name):
    x = _x(4, 6, seed=3)
    expected = OVER_FUNCTIONAL[name](x, None)  # CPU's functional form (its binary_cross_entropy.out is wrong)
    torch.openreg.reset_op_counts()
    with torch.openreg.fallback_policy("error"):
        out = torch.empty(0, dtype=expected.dtype, device="openreg")
        returned = OVER_FUNCTIONAL[name](x.to("openreg"), out)
    assert returned is out and out.shape == expected.shape
    torch.testing.assert_close(out.cpu(), expected)
    assert torch.openreg.op_counts()[f"aten::{name}"] == {"device": 1, "fallback": 0}


def test_in_place_forms_over_a_functional_kernel_and_their_dtype_rules():
    p = _x(3, 5, seed=4).sigmoid()
    d = p.to("openreg")
    with torch.openreg.fallback_policy("error"):
        assert d.logit_(1e-3) is d
    torch.testing.assert_close(d.cpu(), p.logit(1e-3))
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch._softmax(_x(2, 3).to("openreg"), 1, False, out=torch.empty(0, dtype=torch.long, device="openreg"))
    for fn in (torch.isposinf, torch.isneginf):  # bool only, as CPU (bool could be cast to long)
        out = torch.zeros(3, dtype=torch.long, device="openreg")
        with pytest.raises(RuntimeError, match="does not support non-boolean outputs"):
            fn(d[0, :3], out=out)
        assert torch.equal(out.cpu(), torch.zeros(3, dtype=torch.long))
