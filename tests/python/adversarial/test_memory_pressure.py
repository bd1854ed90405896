"""Memory under pressure: out-of-memory loops, many ops, many threads and streams.

Memory must come back, as allocator statistics and as the process's resident memory:
segments the allocator releases give their pages back to the operating system.
"""

import gc
import threading

import pytest
import torch

from adversary import linux_only, resident_bytes, sentinels  # noqa: F401  (fixture)

MIB = 2**20


def _settle():
    gc.collect()
    for i in range(2):
        torch.openreg.synchronize(i)
        torch.openreg.empty_cache(i)


@linux_only
def test_a_large_tensor_freed_and_emptied_gives_its_resident_memory_back(sentinels):
    _settle()
    before = resident_bytes()
    big = torch.ones(384 * MIB // 4, device="openreg:1")  # every page written
    torch.openreg.synchronize(1)
    touched = resident_bytes()
    assert touched - before > 300 * MIB
    del big
    gc.collect()
    assert resident_bytes() - before > 300 * MIB, "a freed tensor stays cached until empty_cache"
    torch.openreg.empty_cache(1)
    after = resident_bytes()
    assert after - before < 64 * MIB, f"{(after - before) // MIB} MiB stayed resident after empty_cache"


@linux_only
def test_an_out_of_memory_loop_leaves_nothing_behind(sentinels):
    _settle()
    stats0 = [torch.openreg.memory_stats(i) for i in range(2)]
    rss0 = resident_bytes()
    for round in range(10):
        device = f"openreg:{round % 2}"
        held = []
        with pytest.raises(torch.OutOfMemoryError, match=f"out of memory on {device}"):
            for _ in range(64):
                held.append(torch.ones(64 * MIB // 4, device=device))
        assert len(held) >= 5
        del held
        gc.collect()
    peak = resident_bytes()
    _settle()
    for i in range(2):
        stats = torch.openreg.memory_stats(i)
        assert stats["allocated_bytes.all.current"] == stats0[i]["allocated_bytes.all.current"]
        assert stats["reserved_bytes.all.current"] <= stats0[i]["reserved_bytes.all.current"]
        assert stats["num_ooms"] == stats0[i]["num_ooms"] + 5
    after = resident_bytes()
    assert peak - rss0 > 300 * MIB, "the loop filled the devices"
    assert after - rss0 < 64 * MIB, f"{(after - rss0) // MIB} MiB stayed resident after the OOM loop"


@linux_only
def test_ten_thousand_ops_leak_neither_device_memory_nor_resident_memory(sentinels):
    x = torch.randn(256, 256, device="openreg:0")
    y = torch.randn(256, 256, device="openreg:1")
    for _ in range(200):  # warm the caches
        (x * 2 + 1).sum()
    _settle()
    stats0 = [torch.openreg.memory_stats(i)["allocated_bytes.all.current"] for i in range(2)]
    rss0 = resident_bytes()
    for i in range(5000):
        x = (x * 0.5 + 1).clamp_(-4, 4)
        y = torch.where(y > 0, y, -y) - 0.5
        if i % 1000 == 0:
            x.sum().item()
    _settle()
    assert [torch.openreg.memory_stats(i)["allocated_bytes.all.current"] for i in range(2)] == stats0
    grown = resident_bytes() - rss0
    assert grown < 32 * MIB, f"10,000 ops left {grown // MIB} MiB more resident"


def test_four_threads_by_two_thousand_ops_on_two_devices_with_streams(sentinels):
    errors = []

    def work(thread):
        try:
            device = f"openreg:{thread % 2}"
            stream = torch.openreg.Stream(device=device, priority=-(thread // 2))
            with torch.openreg.stream(stream):
                acc = torch.zeros(1024, device=device)
                one = torch.ones(1024, device=device)
                for i in range(1000):
                    acc.add_(one)
                    scratch = acc * 2  # allocations and frees on this stream
                    del scratch
                stream.synchronize()
                assert acc.cpu().eq(1000).all().item(), f"thread {thread} got {acc[:4].cpu()}"
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
