"""Reaching another device's memory through tensors whose pointers lie.

Every device address that enters the runtime is checked, as a whole byte range, against
the device the operation names (``host/src/runtime.rs``, ``region``). A tensor can claim
any device and any pointer (``_construct_storage_from_data_pointer``, stale views), so
these attacks go through the public PyTorch API.
"""

import pytest
import torch

from adversary import sentinels, wat_kernel  # noqa: F401  (fixture)


def _impostor(target, device="openreg:0"):
    """A tensor labelled ``device`` whose storage pointer is ``target``'s (on another device)."""
    nbytes = target.numel() * target.element_size()
    storage = torch._C._construct_storage_from_data_pointer(target.data_ptr(), torch.device(device), nbytes)
    return torch.empty(0, device=device).set_(storage, 0, target.shape, target.stride())


def test_a_tensor_claiming_device_0_with_device_1s_pointer_reads_nothing(sentinels):
    fake = _impostor(sentinels[1])
    reads = {
        "copy_": lambda: torch.empty(4096, device="openreg:0").copy_(fake),
        "clone": lambda: fake.clone(),
        "cpu": lambda: fake.cpu(),
        "to other device": lambda: fake.to("openreg:1"),
        "engine op": lambda: fake + 1,
        "reduction": lambda: fake.sum(),
    }
    for name, read in reads.items():
        with pytest.raises(RuntimeError, match=r"is on openreg:1, but the operation runs on openreg:0") as info:
            read()
            torch.openreg.synchronize(0)
        assert "pointer" in str(info.value), name


def test_a_tensor_claiming_device_0_with_device_1s_pointer_writes_nothing(sentinels):
    fake = _impostor(sentinels[1])
    writes = {
        "copy_ from device": lambda: fake.copy_(torch.zeros(4096, device="openreg:0")),
        "copy_ from host": lambda: fake.copy_(torch.zeros(4096)),
        "fill_": lambda: fake.fill_(0),
        "in-place op": lambda: fake.mul_(0),
        "index_put_": lambda: fake.index_put_((torch.tensor([0], device="openreg:0"),), torch.tensor(0.0, device="openreg:0")),
    }
    for name, write in writes.items():
        with pytest.raises(RuntimeError, match=r"openreg:1") as info:
            write()
            torch.openreg.synchronize(0)
        assert "pointer" in str(info.value), name


def test_a_view_left_stale_by_shrinking_its_storage_to_nothing_raises():
    base = torch.ones(4096, device="openreg:0")
    view = base[2048:]
    base.untyped_storage().resize_(0)  # the view keeps its offset into a storage with no memory
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        view.clone()
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        view.cpu()


def test_a_launch_with_another_devices_pointer_is_refused_and_raw_addresses_stay_inside(sentinels):
    poke = wat_kernel(0, "adversarial_poke", "(param $p i32)", "(i32.store (local.get $p) (i32.const 1))")
    with pytest.raises(RuntimeError, match="is on openreg:1, but the operation runs on openreg:0"):
        poke(sentinels[1].data_ptr())
    # A raw number is an offset in device 0's own memory, nothing more.
    poke(8)  # a null pointer (plus a field offset): lands in the null guard
    with pytest.raises(RuntimeError, match="adversarial_poke` trapped on openreg:0: null-pointer-write"):
        torch.openreg.synchronize(0)
    poke(0x7FFF_FFF0)  # past the end of the 512 MiB memory
    with pytest.raises(RuntimeError, match="adversarial_poke` trapped on openreg:0: out-of-bounds"):
        torch.openreg.synchronize(0)


def test_a_peer_copy_is_ordered_after_the_other_devices_work(sentinels):
    src = torch.full((1 << 20,), 3.0, device="openreg:0")
    dst = torch.zeros(1 << 20, device="openreg:1")
    for _ in range(20):
        dst.mul_(2).add_(1)  # work queued on device 1
        dst.copy_(src)  # peer copy: after that work, on device 1's stream
    torch.testing.assert_close(dst.cpu(), torch.full((1 << 20,), 3.0))
