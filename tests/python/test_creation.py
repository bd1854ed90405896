"""Making tensors on each device, in each dtype; CPU is the oracle."""

import pytest
import torch

DTYPES = [torch.float32, torch.float64, torch.int64, torch.bool, torch.float16, torch.bfloat16]
NUMERIC = [d for d in DTYPES if d is not torch.bool]


def _on(t, device):
    assert t.device == device, f"made on {t.device}, asked for {device}"
    assert t.is_openreg
    return t


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_empty_has_shape_dtype_and_device(device, dtype):
    t = _on(torch.empty(3, 5, dtype=dtype, device=device), device)
    assert (t.shape, t.dtype, t.stride()) == ((3, 5), dtype, (5, 1))
    assert t.cpu().shape == (3, 5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("make", ["zeros", "ones"])
def test_zeros_and_ones_match_cpu(device, dtype, make):
    t = _on(getattr(torch, make)(4, 3, dtype=dtype, device=device), device)
    torch.testing.assert_close(t.cpu(), getattr(torch, make)(4, 3, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_full_matches_cpu(device, dtype):
    value = True if dtype is torch.bool else 3
    t = _on(torch.full((2, 7), value, dtype=dtype, device=device), device)
    torch.testing.assert_close(t.cpu(), torch.full((2, 7), value, dtype=dtype))


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
def test_arange_matches_cpu(device, dtype):
    t = _on(torch.arange(0, 20, 3, dtype=dtype, device=device), device)
    torch.testing.assert_close(t.cpu(), torch.arange(0, 20, 3, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_randn_is_random_and_finite(device, dtype):
    t = _on(torch.randn(64, 64, dtype=dtype, device=device), device).cpu()
    assert t.dtype == dtype and t.shape == (64, 64)
    assert torch.isfinite(t).all()
    assert t.unique().numel() > 100, "randn gave (nearly) constant values"


def test_empty_like_and_new_ones_stay_on_the_device(device):
    base = torch.zeros(2, 3, device=device)
    _on(torch.empty_like(base), device)
    torch.testing.assert_close(_on(base.new_ones(4), device).cpu(), torch.ones(4))
    torch.testing.assert_close(_on(torch.zeros_like(base), device).cpu(), torch.zeros(2, 3))


def test_tensor_from_data_matches_cpu(device):
    data = [[1.5, -2.0], [3.25, 0.0]]
    torch.testing.assert_close(_on(torch.tensor(data, device=device), device).cpu(), torch.tensor(data))


def test_zero_element_and_scalar_tensors(device):
    empty = _on(torch.empty(0, 4, device=device), device)
    assert empty.cpu().shape == (0, 4)
    scalar = _on(torch.tensor(2.5, device=device), device)
    assert scalar.dim() == 0 and scalar.item() == 2.5


def test_named_tensors_behave_as_on_cpu():
    # torch 2.15 has no named tensors on any device: the same error on both.
    def outcome(device):
        try:
            return torch.empty(2, names=("a",), device=device).names
        except Exception as e:  # noqa: BLE001 - the exception itself is compared
            return type(e), str(e)

    assert outcome("openreg") == outcome("cpu")
