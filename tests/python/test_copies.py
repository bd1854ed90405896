"""Copies in every direction: host and device, device and device, strided, dtype-changing,
non-blocking. CPU is the oracle."""

import random

import pytest
import torch

DTYPES = [torch.float32, torch.float64, torch.int64, torch.bool, torch.float16, torch.bfloat16]


def _sample(dtype, *shape):
    g = torch.Generator().manual_seed(0)
    if dtype is torch.bool:
        return torch.rand(*shape, generator=g) > 0.5
    if dtype is torch.int64:
        return torch.randint(-1000, 1000, shape, generator=g)
    return torch.randn(*shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_to_openreg_and_back_round_trips(device, dtype):
    x = _sample(dtype, 5, 7)
    d = x.to(device)
    assert d.device == device and d.dtype == dtype
    torch.testing.assert_close(d.cpu(), x)


def test_copy_between_devices_in_both_directions():
    x = torch.randn(33, 17)
    a = x.to("openreg:0")
    b = a.to("openreg:1")
    assert b.device == torch.device("openreg:1")
    torch.testing.assert_close(b.cpu(), x)
    back = (b * 2).to("openreg:0")
    assert back.device == torch.device("openreg:0")
    torch.testing.assert_close(back.cpu(), x * 2)


def test_copy_into_existing_tensor_on_another_device():
    x = torch.randn(6, 6)
    dst = torch.zeros(6, 6, device="openreg:1")
    dst.copy_(x.to("openreg:0"))
    torch.testing.assert_close(dst.cpu(), x)


def test_copy_within_one_device(device):
    x = torch.randn(100)
    d = x.to(device)
    c = d.clone()
    assert c.data_ptr() != d.data_ptr()
    d.zero_()
    torch.testing.assert_close(c.cpu(), x)


STRIDED = {
    "transpose": lambda t: t.t(),
    "step_slice": lambda t: t[::2, 1::3],
    "narrow": lambda t: t[1:5, 2:],
    "column": lambda t: t[:, 3],
    "expand": lambda t: t[:1].expand(4, -1),
    "permute3d": lambda t: t.reshape(2, 3, 8).permute(2, 0, 1),
}


@pytest.mark.parametrize("view", STRIDED, ids=str)
def test_non_contiguous_host_source_to_device(device, view):
    x = torch.randn(6, 8)
    src = STRIDED[view](x)
    torch.testing.assert_close(src.to(device).cpu(), src)


@pytest.mark.parametrize("view", STRIDED, ids=str)
def test_non_contiguous_device_source_to_host(device, view):
    x = torch.randn(6, 8)
    torch.testing.assert_close(STRIDED[view](x.to(device)).cpu(), STRIDED[view](x))


@pytest.mark.parametrize("view", STRIDED, ids=str)
def test_non_contiguous_source_across_devices(view):
    x = torch.randn(6, 8)
    moved = STRIDED[view](x.to("openreg:0")).to("openreg:1")
    assert moved.device == torch.device("openreg:1")
    torch.testing.assert_close(moved.cpu(), STRIDED[view](x))


def test_copy_into_non_contiguous_device_destination(device):
    base = torch.zeros(6, 8)
    dbase = base.to(device)
    src = torch.randn(3, 3)
    base[::2, 1::3].copy_(src)
    dbase[::2, 1::3].copy_(src)  # host source, strided device destination
    torch.testing.assert_close(dbase.cpu(), base)
    base.t().copy_(torch.arange(48.0).reshape(8, 6))
    dbase.t().copy_(torch.arange(48.0).reshape(8, 6).to(device))  # device to strided device
    torch.testing.assert_close(dbase.cpu(), base)


@pytest.mark.parametrize("case", range(20))
def test_random_strided_views_copy_like_cpu(device, case):
    """A seeded sweep over shapes, slices and permutations (a property test without a library)."""
    rng = random.Random(case)
    shape = [rng.randint(1, 6) for _ in range(rng.randint(1, 4))]
    x = torch.randn(*shape)
    index = tuple(slice(rng.randint(0, n - 1), None, rng.randint(1, 3)) for n in shape)
    perm = list(range(len(shape)))
    rng.shuffle(perm)
    expected = x[index].permute(*perm)
    on_device = x.to(device)[index].permute(*perm)
    torch.testing.assert_close(on_device.cpu(), expected)
    torch.testing.assert_close(expected.to(device).cpu(), expected)
    target = torch.zeros_like(x).to(device)
    target[index].permute(*perm).copy_(expected)
    reference = torch.zeros_like(x)
    reference[index].permute(*perm).copy_(expected)
    torch.testing.assert_close(target.cpu(), reference)


def test_dtype_change_on_the_way_to_the_device(device):
    x = torch.randn(10, 3)
    d = x.to(device, torch.float64)
    assert d.dtype == torch.float64 and d.device == device
    torch.testing.assert_close(d.cpu(), x.double())


def test_dtype_change_on_the_way_to_the_host(device):
    x = torch.randn(10, 3)
    h = x.to(device).to("cpu", torch.float64)
    assert h.dtype == torch.float64
    torch.testing.assert_close(h, x.double())


def test_dtype_change_across_devices():
    x = torch.randn(10, 3)
    d = x.to("openreg:0").to("openreg:1", torch.float64)
    assert d.dtype == torch.float64 and d.device == torch.device("openreg:1")
    torch.testing.assert_close(d.cpu(), x.double())


@pytest.mark.parametrize(
    "src,dst", [(torch.float32, torch.int64), (torch.int64, torch.float16), (torch.float32, torch.bool)], ids=str
)
def test_dtype_change_on_the_device(device, src, dst):
    x = (torch.randn(50) * 10).to(src)
    torch.testing.assert_close(x.to(device).to(dst).cpu(), x.to(dst))


def test_non_blocking_copies_with_pinned_host_memory(device):
    x = torch.randn(1 << 16)
    pinned = x.pin_memory()
    assert pinned.is_pinned()
    d = pinned.to(device, non_blocking=True)
    out = torch.empty_like(x).pin_memory()
    out.copy_(d * 3, non_blocking=True)
    torch.openreg.synchronize(device)
    torch.testing.assert_close(out, x * 3)


def test_non_blocking_copies_with_pageable_host_memory(device):
    x = torch.randn(1000)
    d = x.to(device, non_blocking=True)
    h = d.to("cpu", non_blocking=True)
    torch.openreg.synchronize(device)
    torch.testing.assert_close(h, x)


def test_non_blocking_copy_between_devices():
    x = torch.randn(4096)
    d1 = x.to("openreg:0").to("openreg:1", non_blocking=True)
    torch.openreg.synchronize(0)
    torch.openreg.synchronize(1)
    torch.testing.assert_close(d1.cpu(), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_copies_between_contiguous_rows_of_one_dtype_like_cpu(device, dtype):
    """Head permutes, row slices and their writes back: the rows of a plane copied in one loop,
    short and ragged rows (1, 3, 31, 32, 33 elements, bytes from 1 up), split between workers."""
    for row in (1, 3, 31, 32, 33):
        x = _sample(dtype, 16, 64, 4, row)  # from 32 elements a row, on every worker
        heads = x.to(device).transpose(1, 2)  # rows of `row` elements, 4 * row apart
        assert torch.equal(heads.contiguous().cpu(), x.transpose(1, 2).contiguous())
        big = _sample(dtype, 300, 2 * row + 1)
        assert torch.equal(big.to(device)[:, 1:row + 1].contiguous().cpu(), big[:, 1:row + 1].contiguous())
        back = torch.zeros(16, 64, 4, row, dtype=dtype, device=device)
        back.transpose(1, 2).copy_(x.transpose(1, 2).contiguous().to(device))  # into strided rows
        assert torch.equal(back.cpu(), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float64, torch.float16], ids=str)
def test_transposing_copies_like_cpu(device, dtype):
    """Planes copied across their diagonal (x.t().contiguous(), NCHW to NHWC and back): 4 x 4
    blocks for 4-byte elements, through a tile buffer where rows lie a multiple of 2 KB apart;
    ragged edges, unaligned starts, batches, and the split between workers."""
    for rows, cols in ((1, 7), (3, 5), (4, 4), (5, 9), (33, 67), (64, 100), (512, 512), (1024, 36), (37, 1024)):
        x = _sample(dtype, rows, cols + 1)
        d = x.to(device)
        assert torch.equal(d.t().contiguous().cpu(), x.t().contiguous()), (rows, cols)
        assert torch.equal(d[:, 1:].t().contiguous().cpu(), x[:, 1:].t().contiguous()), (rows, cols)  # unaligned
        out = torch.zeros(cols + 1, rows, dtype=dtype, device=device)
        out.copy_(d.t())
        assert torch.equal(out.cpu(), x.t())
    nchw = _sample(dtype, 4, 24, 17, 19)
    channels_last = nchw.to(device).contiguous(memory_format=torch.channels_last)
    assert torch.equal(channels_last.cpu(), nchw.contiguous(memory_format=torch.channels_last))
    assert torch.equal(channels_last.contiguous().cpu(), nchw)
    batch = _sample(dtype, 6, 40, 70)
    assert torch.equal(batch.to(device).transpose(1, 2).contiguous().cpu(), batch.transpose(1, 2).contiguous())


def test_widening_bytes_and_narrowing_floats_like_cpu(device):
    """bool and uint8 to int64 and float32 (sixteen bytes at a time), float32 to int32 (NaN and
    values out of range give INT32_MIN, as on CPU), over lengths around the vector widths."""
    g = torch.Generator().manual_seed(0)
    for n in (1, 15, 16, 17, 100, 4099):
        flags = torch.rand(n, generator=g) > 0.5
        raw = torch.randint(0, 256, (n,), generator=g).to(torch.uint8)
        x = torch.randn(n, generator=g) * 3e9
        for k, value in enumerate((float("nan"), float("inf"), -2147483648.0, 2147483648.0, -0.7, 2147483520.0)):
            x[k::7] = value
        cases = [(flags, torch.int64), (flags, torch.float32), (flags, torch.int32), (raw, torch.int64),
                 (raw, torch.float32)]
        for source, dtype in cases:
            assert torch.equal(source.to(device).to(dtype).cpu(), source.to(dtype)), (n, source.dtype, dtype)
        # truncation, and INT32_MIN for a NaN or a value out of range on every host (x86's answer)
        in_range = x.double().abs() < 2.0**31
        expected = torch.where(in_range, x.double().trunc().clamp(-2**31, 2**31 - 1), torch.tensor(-2.0**31))
        assert torch.equal(x.to(device).to(torch.int32).cpu(), expected.to(torch.int32)), n
        assert torch.equal(flags.to(device).sum().cpu(), flags.sum())


CONVERTED = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.bool, torch.int64, torch.uint8]


@pytest.mark.parametrize("dst", CONVERTED, ids=str)
@pytest.mark.parametrize("src", CONVERTED, ids=str)
def test_converting_copies_like_cpu_bit_for_bit(device, src, dst):
    """Every pair of the common dtypes, contiguous (the pairs with loops of their own: float32
    to and from float64, float16, bfloat16 and bool, bytes to int64) and strided, over lengths
    around the vector widths; NaN, infinities, -0 and subnormals among the floats."""
    g = torch.Generator().manual_seed(1)
    for n in (1, 7, 16, 33, 1037):
        x = torch.randn(2 * n, generator=g) * 40
        for k, value in enumerate((float("nan"), float("-inf"), float("inf"), -0.0, 0.0, 1e-40, -3e-39, 0.5, -0.99)):
            x[k::11] = value
        if src in (torch.bool, torch.uint8):
            x = (x.nan_to_num(0).abs() % 256).to(torch.uint8) if src is torch.uint8 else x > 0
        elif dst is torch.uint8:
            x = x.nan_to_num(0, 0, 0).abs() % 256  # a float out of the integer's range is undefined in C++
        elif dst is torch.int64:
            x = x.nan_to_num(0, 0, 0)
            # beyond int32 (the SIMD loop's range) but within int64: four at a time fall back
            x[5::13] = torch.tensor([3e9, -2.0**31, 2.0**31, 1e18, -5e17, 2.0**31 - 128])[torch.arange(len(x[5::13])) % 6]
        x = x.to(src)
        for source in (x[:n], x[::2]):
            actual, expected = source.to(device).to(dst).cpu(), source.to(dst)
            assert actual.dtype == dst
            if dst.is_floating_point:  # the same bits, NaN's sign aside
                assert torch.equal(actual.isnan(), expected.isnan()), (n, src, dst)
                bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dst.itemsize]
                same = actual.isnan() | (actual.view(bits) == expected.view(bits))
                assert bool(same.all()), (n, src, dst)
            else:
                assert torch.equal(actual, expected), (n, src, dst)
