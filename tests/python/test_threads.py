"""Several Python threads work on the two devices at once, each on its own device and
stream; every result matches CPU."""

import threading

import torch

ROUNDS = 20


def _work(index, barrier, results, errors):
    try:
        torch.openreg.set_device(index)
        stream = torch.openreg.Stream()
        g = torch.Generator().manual_seed(index)
        barrier.wait()
        for r in range(ROUNDS):
            x = torch.randn(64, 32, generator=g)
            with torch.openreg.stream(stream):
                d = x.to("openreg")
                y = torch.relu(d @ d.t() + d.sum()) - d.mean()
                z = (y * 0.5).to("cpu")
            assert torch.openreg.current_device() == index
            assert y.device == torch.device("openreg", index)
            expected = (torch.relu(x @ x.t() + x.sum()) - x.mean()) * 0.5
            results.append((index, r, z, expected))
        stream.synchronize()
    except BaseException as e:  # reported by the main thread
        errors.append((index, e))


def test_threads_on_two_devices_compute_correct_results():
    threads_per_device = 2
    n = 2 * threads_per_device
    barrier = threading.Barrier(n)
    results, errors = [], []
    threads = [
        threading.Thread(target=_work, args=(i % 2, barrier, results, errors), name=f"worker{i}") for i in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    assert not errors, errors
    assert len(results) == n * ROUNDS
    for index, r, actual, expected in results:
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4, msg=f"openreg:{index} round {r}")
    assert torch.openreg.current_device() == 0, "worker threads changed the main thread's device"


def test_threads_share_one_tensor_read_only():
    shared = torch.arange(10000.0, device="openreg:0")
    sums, errors = [], []

    def read(dev):
        try:
            sums.append(shared.to(dev).sum().item())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=read, args=(f"openreg:{i % 2}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert sums == [sum(range(10000))] * 6
