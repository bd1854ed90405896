"""Worker threads per device (``OPENREG_DEVICE_THREADS``): large kernels run as
one call per worker index, taken by the workers at once, and results are
bit-identical for any number of workers."""

import hashlib
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_openreg._C as _C

# Runs in a fresh process (the worker count is fixed when the runtime starts):
# a mix of large kernels, then a short training run of a CNN, an MLP and a
# transformer layer, with the fallback refused; prints a digest of every
# result's bytes and the device's launch counts.
SCRIPT = textwrap.dedent(
    """
    import hashlib, torch, torch_openreg
    import torch_openreg._C as _C

    torch.openreg.fallback_policy("error")
    digest = hashlib.sha256()

    def take(t):
        digest.update(t.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())

    dev = "openreg"
    g = torch.Generator().manual_seed(0)
    a = torch.randn(301, 257, generator=g).to(dev)
    b = torch.randn(257, 199, generator=g).to(dev)
    take(a @ b)
    take(a.t() @ torch.randn(301, 64, generator=g).to(dev))
    take(torch.bmm(torch.randn(1, 130, 90, generator=g).to(dev), torch.randn(1, 90, 120, generator=g).to(dev)))
    take(torch.bmm(torch.randn(5, 60, 70, generator=g).to(dev), torch.randn(5, 70, 80, generator=g).to(dev)))
    take(a.half() @ b.half())
    take(a.bfloat16() @ b.bfloat16())
    take(a.double() @ b.double())
    take(a @ b[:, 0])
    # short and wide: workers split the columns (17 of them: one worker's share can be a single column)
    short, w = torch.randn(12, 1000, generator=g).to(dev), torch.randn(1000, 4000, generator=g).to(dev)
    take(short @ w), take(short[:7].half() @ w.half()), take(w[:6] @ w.t()[:, :17])
    take(torch.randint(-5, 5, (200, 150), generator=g).to(dev) @ torch.randint(-5, 5, (150, 120), generator=g).to(dev))
    x = torch.randn(512, 300, generator=g).to(dev)
    take(x.sum(0)), take(x.sum(1)), take(x.var(1)), take(x.amax(0)), take(x.argmax(1))
    big = torch.randn(1 << 19, generator=g).to(dev)  # reductions to one value: segments on all workers
    take(big.sum()), take(big.var()), take(big.argmax()), take(big.norm()), take(big.amin())
    take(big.view(1024, 512).t().sum()), take(torch.aminmax(big)[1])
    take(x.cumsum(1)), take(x.softmax(1)), take(x.log_softmax(0))
    take(torch.tanh(x) * 3 + x.exp()), take(x[:, ::3].sin())
    take(x.gather(1, torch.randint(0, 300, (512, 40), generator=g).to(dev)))
    take(x[torch.randint(0, 512, (1000,), generator=g).to(dev)])
    # broadcasts over a middle dimension (large enough to run on every worker): split along the
    # outermost dimension when it divides evenly enough (36; 17 for 2 workers), else the largest
    y = torch.randn(36, 14, 131, generator=g).to(dev)
    take(y * torch.randn(1, 14, 1, generator=g).to(dev) - y.mean((0, 2), keepdim=True))
    take(torch.randn(17, 7, 600, generator=g).to(dev) + torch.randn(7, 1, generator=g).to(dev))
    torch.openreg.manual_seed(1)
    take(torch.randn(1 << 18, device=dev)), take(torch.rand(300, 400, device=dev).t())

    torch.manual_seed(0)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),  # Winograd
        torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 10))
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 10))
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
    models = [m.to(dev) for m in (cnn, mlp, layer)]
    opt = torch.optim.Adam([p for m in models for p in m.parameters()], lr=1e-3)
    torch.openreg.manual_seed(2)
    images = torch.randn(32, 3, 16, 16, generator=g).to(dev)
    labels = torch.randint(0, 10, (32,), generator=g).to(dev)
    rows = torch.randn(128, 64, generator=g).to(dev)
    tokens = torch.randn(8, 16, 64, generator=g).to(dev)
    for step in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(cnn(images), labels)
        loss = loss + mlp(rows).square().mean() + layer(tokens).square().mean()
        loss.backward()
        opt.step()
        take(loss)
    for m in models:
        for p in m.parameters():
            take(p)
    # fused optimizers: one optim_list launch per step, its elements split between the workers
    params = [torch.randn(n, generator=g).to(dev).requires_grad_() for n in (30011, 777, 9)]
    for make in (lambda ps: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True, fused=True),
                 lambda ps: torch.optim.Adagrad(ps, lr=1e-2, weight_decay=0.1, fused=True)):
        opt = make(params)
        for _ in range(2):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g).to(dev)
            opt.step()
        for p in params:
            take(p)
    print(digest.hexdigest(), *_C.launch_counts(0))
    """
)


def _run(workers):
    env = dict(os.environ, OPENREG_DEVICE_THREADS=str(workers))
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    digest, parallel, single = done.stdout.split()
    return digest, int(parallel), int(single)


def test_results_are_bit_identical_for_one_two_and_three_workers():
    one, two, three = _run(1), _run(2), _run(3)
    assert one[1] == 0, "one worker never runs a parallel launch"
    # Large launches really ran on several workers (the same ones, whatever
    # the count), and the bytes came out the same.
    assert two[1] > 100 and two[1] == three[1], (two, three)
    assert one[0] == two[0] == three[0]


def test_the_default_worker_count_is_torch_thread_count():
    # This test process did not set OPENREG_DEVICE_THREADS before importing.
    expected = int(os.environ.get("OPENREG_DEVICE_THREADS") or min(max(torch.get_num_threads(), 1), 16))
    assert torch.openreg.get_device_properties(0).workers == expected


def test_parallel_launches_match_cpu(device, against_cpu):
    workers = torch.openreg.get_device_properties(device).workers
    before = _C.launch_counts(device.index)[0]
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(300, 200, generator=g), torch.randn(200, 260, generator=g)
    against_cpu(torch.mm, a, b, atol=1e-4, rtol=1e-4)
    against_cpu(lambda x: torch.nn.functional.gelu(x) * 2 - x.abs().sqrt(), torch.randn(400, 300, generator=g))
    against_cpu(lambda x: x.sum(1), torch.randn(600, 500, generator=g), atol=1e-4, rtol=1e-5)
    against_cpu(lambda x: torch.softmax(x, 0), torch.randn(300, 400, generator=g))
    if workers > 1:
        assert _C.launch_counts(device.index)[0] > before


def test_a_trap_in_a_parallel_launch_is_reported_and_the_device_stays_usable():
    x = torch.randn(1000, 300, device="openreg")
    index = torch.randint(0, 300, (1000, 300), device="openreg")
    index[700, 5] = 300  # an index out of range, late in the iteration
    with pytest.raises(RuntimeError, match="out of range"):
        torch.gather(x, 1, index).cpu()
    y = torch.randn(1000, 300)
    assert torch.equal((y.to("openreg") * 2).cpu(), y * 2)


def test_properties_name_the_workers():
    props = torch.openreg.get_device_properties(0)
    assert 1 <= props.workers <= 16
    assert _C.device_properties(0)["workers"] == props.workers


def test_digest_helper_distinguishes_bytes():
    # The determinism check compares digests of raw bytes; make sure a one-ulp
    # difference changes them.
    x = torch.ones(4)
    y = x.clone()
    y[2] = torch.nextafter(y[2], torch.tensor(2.0))
    d = [hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest() for t in (x, y)]
    assert d[0] != d[1]
