"""Views share storage with their base on the device: writing through a view changes the
base, exactly as on CPU."""

import pytest
import torch

VIEWS = {
    "view": lambda t: t.view(24),
    "reshape_of_contiguous": lambda t: t.reshape(6, 4),
    "transpose": lambda t: t.t(),
    "slice_with_steps": lambda t: t[1:, ::2],
    "select": lambda t: t[2],
    "as_strided": lambda t: t.as_strided((2, 3), (6, 2), 1),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "flatten_of_contiguous": lambda t: t.flatten(),
    "diagonal": lambda t: t.diagonal(),
    "narrow": lambda t: t.narrow(1, 2, 3),
}

WRITES = {
    "fill_": lambda v: v.fill_(7.0),
    "add_": lambda v: v.add_(1.5),
    "mul_scalar_": lambda v: v.mul_(-2.0),
    "copy_": lambda v: v.copy_(torch.arange(float(v.numel())).reshape(v.shape)),
    "setitem": lambda v: v.__setitem__(0, 9.0),
    "sin_": lambda v: v.sin_(),
}


@pytest.mark.parametrize("write", WRITES, ids=str)
@pytest.mark.parametrize("view", VIEWS, ids=str)
def test_writing_through_a_view_changes_the_base(device, view, write):
    cpu_base = torch.arange(24.0).reshape(4, 6)
    base = cpu_base.to(device)
    v = VIEWS[view](base)
    assert v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), "the view has its own storage"
    assert v._is_view()
    expected_view = VIEWS[view](cpu_base)
    assert (v.shape, v.stride(), v.storage_offset()) == (
        expected_view.shape,
        expected_view.stride(),
        expected_view.storage_offset(),
    )
    WRITES[write](expected_view)
    WRITES[write](v)
    torch.testing.assert_close(base.cpu(), cpu_base)
    torch.testing.assert_close(v.cpu(), expected_view)


def test_writing_to_the_base_shows_through_the_view(device):
    base = torch.zeros(3, 4, device=device)
    v = base.t()
    base[1, 2] = 5.0
    assert v[2, 1].item() == 5.0


def test_reshape_of_non_contiguous_copies(device):
    base = torch.arange(12.0).reshape(3, 4).to(device)
    r = base.t().reshape(12)
    assert r.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    torch.testing.assert_close(r.cpu(), torch.arange(12.0).reshape(3, 4).t().reshape(12))


def test_view_of_view_keeps_sharing(device):
    base = torch.zeros(4, 6, device=device)
    vv = base.view(2, 12)[1].view(3, 4)[:, 1]
    vv.fill_(2.0)
    expected = torch.zeros(4, 6)
    expected.view(2, 12)[1].view(3, 4)[:, 1].fill_(2.0)
    torch.testing.assert_close(base.cpu(), expected)


def test_resize_and_set_keep_the_device(device):
    t = torch.zeros(2, device=device)
    t.resize_(5, 5)
    assert t.shape == (5, 5) and t.device == device
    t.fill_(1.0)
    other = torch.empty(0, device=device)
    other.set_(t.untyped_storage(), 0, (25,), (1,))
    assert other.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    torch.testing.assert_close(other.cpu(), torch.ones(25))
