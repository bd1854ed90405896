"""Random numbers on openreg devices: reproducible from a seed, state save and restore,
and independent of CPU's generator and of the other device."""

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
