"""torch.save / torch.load of openreg tensors and state dicts keep the device."""

import torch
from torch import nn


def test_tensor_round_trip_keeps_the_device(device, tmp_path):
    t = torch.randn(3, 4).to(device)
    path = tmp_path / "t.pt"
    torch.save(t, path)
    loaded = torch.load(path)
    assert loaded.device == device
    torch.testing.assert_close(loaded.cpu(), t.cpu())


def test_views_keep_sharing_after_a_round_trip(device, tmp_path):
    base = torch.arange(12.0).reshape(3, 4).to(device)
    path = tmp_path / "views.pt"
    torch.save({"base": base, "column": base[:, 1]}, path)
    loaded = torch.load(path)
    loaded["column"].fill_(-1.0)
    expected = torch.arange(12.0).reshape(3, 4)
    expected[:, 1] = -1.0
    torch.testing.assert_close(loaded["base"].cpu(), expected)


def test_map_location_cpu_loads_on_the_host(device, tmp_path):
    t = torch.randn(5).to(device)
    path = tmp_path / "t.pt"
    torch.save(t, path)
    loaded = torch.load(path, map_location="cpu")
    assert loaded.device.type == "cpu"
    torch.testing.assert_close(loaded, t.cpu())


def test_map_location_moves_between_devices(tmp_path):
    path = tmp_path / "t.pt"
    torch.save(torch.ones(2, device="openreg:0"), path)
    loaded = torch.load(path, map_location="openreg:1")
    assert loaded.device == torch.device("openreg:1")
    torch.save(torch.ones(2), path)
    assert torch.load(path, map_location="openreg:0").device == torch.device("openreg:0")


def test_state_dict_round_trip(device, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)).to(device)
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    state = torch.load(path)
    assert all(v.device == device for v in state.values())
    fresh = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)).to(device)
    fresh.load_state_dict(state)
    for (k, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a.cpu(), msg=k)
    on_cpu = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    on_cpu.load_state_dict(torch.load(path, map_location="cpu"))
    x = torch.randn(3, 4)
    model.eval()
    on_cpu.eval()
    torch.testing.assert_close(model(x.to(device)).cpu(), on_cpu(x), rtol=1e-5, atol=1e-5)


# ---- backend metadata ----------------------------------------------------------------


def test_backend_metadata_is_kept_copied_with_detach_and_saved(tmp_path):
    from torch._utils import get_tensor_metadata, set_tensor_metadata

    x = torch.randn(4, device="openreg:1")
    assert get_tensor_metadata(x) == {}
    set_tensor_metadata(x, {"channels_last_hint": True, "quantized_hint": False})
    set_tensor_metadata(x, {"extra": True})  # added to the flags already there
    expected = {"channels_last_hint": True, "quantized_hint": False, "extra": True}
    assert get_tensor_metadata(x) == expected
    assert get_tensor_metadata(x.detach()) == expected  # shallow copies carry it
    assert get_tensor_metadata(x.clone()) == {}  # a new tensor starts without, as on any backend
    path = tmp_path / "x.pt"
    torch.save({"x": x}, path)
    loaded = torch.load(path)["x"]
    assert loaded.device == x.device and get_tensor_metadata(loaded) == expected
    torch.testing.assert_close(loaded.cpu(), x.cpu())
    # CPU tensors keep none (the registration is openreg's).
    assert get_tensor_metadata(torch.ones(1)) == {}


def test_backend_metadata_survives_fake_tensor_conversion():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch._utils import get_tensor_metadata, set_tensor_metadata

    x = torch.randn(4, 2, device="openreg")
    set_tensor_metadata(x, {"channels_last_hint": True})
    mode = FakeTensorMode()
    fake = mode.from_tensor(x)
    assert isinstance(fake, FakeTensor) and fake.device == x.device
    assert get_tensor_metadata(fake) == {"channels_last_hint": True}
    assert mode.from_tensor(x) is fake  # memoized: converted once
    # A tensor without flags gets none; a CPU tensor's fake has none either.
    assert get_tensor_metadata(mode.from_tensor(torch.randn(2, device="openreg"))) == {}
    assert get_tensor_metadata(mode.from_tensor(torch.randn(2))) == {}
