"""PyTorch-level benchmarks: openreg against torch's CPU backend, in the same run.

`make bench` runs this after the runtime benchmarks and writes the tables into
docs/performance.md (between the torch-bench markers). Every case is timed many
times; the tables give the median and the tail (99th percentile for per-op and
round-trip timings, the slowest run for the large cases, which run fewer times).
Ratios are CPU time / openreg time: above 1 means openreg is faster.
"""

import argparse
import os
import platform
import statistics
import time

import torch
import torch_openreg  # noqa: F401


def sync(device):
    if device.startswith("openreg"):
        torch.openreg.synchronize()


def percentile(times, q):
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t) * 1e-9)
    return times


# ---- per-op time of small ops: each op timed alone (no synchronize: what a user's
# Python loop pays per op), then the queue drained ----

def per_op(make, op, device, reps=3000):
    args = make(device)
    for _ in range(200):
        op(*args)
    sync(device)
    times = timed(lambda: op(*args), reps)
    sync(device)
    return times


SMALL = [
    ("x + y", lambda d: (torch.ones(1, device=d), torch.ones(1, device=d)), torch.add),
    ("x + 1 (a Python scalar)", lambda d: (torch.ones(1, device=d),), lambda x: x + 1),
    ("x * y", lambda d: (torch.ones(1, device=d), torch.ones(1, device=d)), torch.mul),
    ("torch.add(x, y, out=o)", lambda d: (torch.ones(1, device=d), torch.ones(1, device=d), torch.empty(1, device=d)),
     lambda x, y, o: torch.add(x, y, out=o)),
    ("x.exp()", lambda d: (torch.ones(1, device=d),), torch.exp),
    ("x.sin()", lambda d: (torch.ones(1, device=d),), torch.sin),
    ("x.sinh()", lambda d: (torch.ones(1, device=d),), torch.sinh),
    ("x.erfinv()", lambda d: (torch.full((1,), 0.5, device=d),), torch.erfinv),
    ("torch.special.zeta(x, q) (CPU fallback)",
     lambda d: (torch.full((1,), 2.0, device=d), torch.full((1,), 1.0, device=d)), torch.special.zeta),
]

# ---- blocking round trips: each one waits for the device ----

ROUND_TRIPS = [
    ("x.item()", lambda d: (torch.ones(1, device=d),), lambda x: x.item()),
    ("x.cpu()", lambda d: (torch.ones(1, device=d),), lambda x: x.to("cpu", copy=True)),
    ("h.to(device)", lambda d: (torch.ones(1), d), lambda h, d: h.to(d, copy=True)),
    ("x + y, then synchronize", lambda d: (torch.ones(1, device=d), torch.ones(1, device=d), d),
     lambda x, y, d: (torch.add(x, y), sync(d))),
]


def round_trip(make, op, device, reps=3000):
    args = make(device)
    for _ in range(200):
        op(*args)
    return timed(lambda: op(*args), reps)


# ---- large tensors: time to result (synchronized) ----

N = 1 << 24


def big(make, op, device, reps=9):
    args = make(device)
    op(*args)
    sync(device)

    def run():
        op(*args)
        sync(device)

    return timed(run, reps)


# Elementwise functions and line ops on 1M float32 (4 MiB: the data stays in cache on both sides,
# so these measure the math, not page faults on fresh outputs).
M = 1 << 20


def _million(d):
    return (torch.randn(M, generator=torch.Generator().manual_seed(0)).mul_(3).to(d),)


def _rows(d):
    return (torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0)).mul_(3).to(d),)


FUNCTIONS = [
    ("exp", _million, torch.exp),
    ("log of |x|", _million, lambda x: torch.log(x.abs())),
    ("tanh", _million, torch.tanh),
    ("sigmoid", _million, torch.sigmoid),
    ("silu", _million, torch.nn.functional.silu),
    ("gelu (erf)", _million, torch.nn.functional.gelu),
    ("gelu (tanh approximation)", _million, lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
    ("erf", _million, torch.erf),
    ("sin", _million, torch.sin),
    ("atan", _million, torch.atan),
    ("x ** 1.7 of |x|", _million, lambda x: x.abs() ** 1.7),
    ("x ** 0.5 of |x|", _million, lambda x: x.abs() ** 0.5),
    ("x % 0.7 (Python's remainder)", _million, lambda x: x % 0.7),
    ("torch.fmod(x, y)", lambda d: (_million(d)[0], _million(d)[0].add_(0.5)), torch.fmod),
    ("x // 0.3", _million, lambda x: x // 0.3),
    (".double()", _million, lambda x: x.double()),
    (".half()", _million, lambda x: x.half()),
    (".long()", _million, lambda x: x.long()),
    ("(x > 0).sum(), a mask's count", _million, lambda x: (x > 0).sum()),
    ("sum of 1M float64", lambda d: (_million(d)[0].double(),), lambda x: x.sum()),
    ("amax of 1M int64", lambda d: (_million(d)[0].long(),), lambda x: x.amax()),
    ("aminmax", _million, torch.aminmax),
    ("prod over rows, 1024x1024", _rows, lambda x: x.prod(1)),
    ("softmax over rows, 1024x1024", _rows, lambda x: torch.softmax(x, 1)),
    ("logsumexp over rows, 1024x1024", _rows, lambda x: torch.logsumexp(x, 1)),
    ("sum over dim 0, 1024x1024", _rows, lambda x: x.sum(0)),
    ("x[idx], 256K of 1M by a random int64 index", lambda d: (_million(d)[0], torch.randint(0, M, (M // 4,)).to(d)),
     lambda x, i: x[i]),
    # in place, as optimizers and autograd's accumulation write (the output is an input)
    ("p.add_(g, alpha=-0.01) in place", lambda d: (_million(d)[0], _million(d)[0]),
     lambda p, g: p.add_(g, alpha=-0.01)),
    ("v.mul_(0.9).addcmul_(g, g, value=0.1) in place", lambda d: (_million(d)[0].abs(), _million(d)[0]),
     lambda v, g: v.mul_(0.9).addcmul_(g, g, value=0.1)),
]


def _copy_into(d):
    src = torch.randn(N)  # pageable host memory
    return src, torch.empty(N, device=d)


LARGE = [
    ("add, 16M float32, fresh output", lambda d: (torch.randn(N).to(d), torch.randn(N).to(d)), torch.add),
    ("add, 16M float32, out=", lambda d: (torch.randn(N).to(d), torch.randn(N).to(d), torch.empty(N, device=d)),
     lambda x, y, o: torch.add(x, y, out=o)),
    ("mul, 16M float32", lambda d: (torch.randn(N).to(d), torch.randn(N).to(d)), torch.mul),
    ("exp, 16M float32", lambda d: (torch.randn(N).to(d),), torch.exp),
    ("tanh, 16M float32", lambda d: (torch.randn(N).to(d),), torch.tanh),
    ("where, 16M float32", lambda d: (torch.randn(N).to(d) > 0, torch.randn(N).to(d), torch.randn(N).to(d)),
     torch.where),
    ("x + 1, 16M int64", lambda d: (torch.arange(N).to(d),), lambda x: x + 1),
    ("sum, 16M float32", lambda d: (torch.randn(N).to(d),), torch.sum),
    ("sum over dim 0 (the strided one), 4096x4096 float32", lambda d: (torch.randn(4096, 4096).to(d),),
     lambda x: x.sum(0)),
    ("amax over dim 1, 4096x4096 float32", lambda d: (torch.randn(4096, 4096).to(d),), lambda x: x.amax(1)),
    ("var, 16M float32", lambda d: (torch.randn(N).to(d),), torch.var),
    ("x[idx], 4M of 16M float32 by a random int64 index", lambda d: (torch.randn(N).to(d),
     torch.randint(0, N, (N // 4,)).to(d)), lambda x, i: x[i]),
    ("transposed .contiguous(), 4096x4096 float32", lambda d: (torch.randn(4096, 4096).to(d).t(),),
     lambda x: x.contiguous()),
    (".to(float16), 16M float32", lambda d: (torch.randn(N).to(d),), lambda x: x.to(torch.float16)),
    ("cat of 8 x 2M float32", lambda d: ([torch.randn(N // 8).to(d) for _ in range(8)],), torch.cat),
    ("copy_ of 64 MiB from pageable CPU memory into a device tensor", _copy_into, lambda s, t: t.copy_(s)),
]


def mlp(device, reps=15):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)).to(device)
    x = torch.randn(128, 256).to(device)
    y = torch.randint(0, 10, (128,)).to(device)

    def step():
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        sync(device)

    step()
    return timed(step, reps)


def training_steps(device, model, opt, loss, x, y, reps):
    """Times `reps` synchronized training steps (zero_grad, loss(model(x), y), backward, step)."""

    def step():
        opt.zero_grad()
        loss(model(x), y).backward()
        opt.step()
        sync(device)

    step()
    return timed(step, reps)


def adam_step(device, reps=30):
    """One training step of the `make demo` model (3-64-64-1, tanh, mse_loss, Adam), batch 512."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(512, 3).to(device), torch.randn(512, 1).to(device)
    return training_steps(device, model, opt, torch.nn.functional.mse_loss, x, y, reps)


# Matrix products and the ops of a classifier's step (issue #7): (name, make, op, flops).
TRAINING = [
    ("mm 512x512 @ 512x512 float32", lambda d: (torch.randn(512, 512).to(d), torch.randn(512, 512).to(d)), torch.mm,
     2 * 512**3),
    ("mm 1024x1024 @ 1024x1024 float32", lambda d: (torch.randn(1024, 1024).to(d), torch.randn(1024, 1024).to(d)),
     torch.mm, 2 * 1024**3),
    ("mm 512 float64", lambda d: (torch.randn(512, 512, dtype=torch.float64).to(d),
                                  torch.randn(512, 512, dtype=torch.float64).to(d)), torch.mm, 2 * 512**3),
    ("mm 512 bfloat16", lambda d: (torch.randn(512, 512).bfloat16().to(d), torch.randn(512, 512).bfloat16().to(d)),
     torch.mm, 2 * 512**3),
    ("linear 128x256 -> 512 with bias (addmm, transposed weight)", lambda d: (torch.randn(128, 256).to(d),
     torch.randn(512, 256).to(d), torch.randn(512).to(d)), torch.nn.functional.linear, 2 * 128 * 256 * 512),
    ("bmm 32 x (128x64 @ 64x128) float32", lambda d: (torch.randn(32, 128, 64).to(d), torch.randn(32, 64, 128).to(d)),
     torch.bmm, 2 * 32 * 128 * 64 * 128),
    ("mv 4096x4096 float32", lambda d: (torch.randn(4096, 4096).to(d), torch.randn(4096).to(d)), torch.mv,
     2 * 4096**2),
    ("x @ W, 1x4096 @ 4096x4096 float32", lambda d: (torch.randn(1, 4096).to(d), torch.randn(4096, 4096).to(d)),
     torch.mm, 2 * 4096**2),
    ("mm 64x128 @ 128x64 float32 (small)", lambda d: (torch.randn(64, 128).to(d), torch.randn(128, 64).to(d)),
     torch.mm, 2 * 64 * 128 * 64),
    ("conv2d 3x3, 64 -> 64 channels, 56x56, batch 8 (Winograd F(2x2, 3x3))",
     lambda d: (torch.randn(8, 64, 56, 56).to(d), torch.randn(64, 64, 3, 3).to(d)),
     lambda x, w: torch.nn.functional.conv2d(x, w, padding=1),
     2 * 8 * 64 * 56 * 56 * 64 * 9),
    ("layer_norm over 1024, 4096 rows float32", lambda d: (torch.randn(4096, 1024).to(d),),
     lambda x: torch.nn.functional.layer_norm(x, (1024,)), None),
    ("softmax over 1000 classes, 4096 rows float32", lambda d: (torch.randn(4096, 1000).to(d),),
     lambda x: torch.softmax(x, 1), None),
    ("cross_entropy forward + backward, 512 x 1000 classes", lambda d: (torch.randn(512, 1000).to(d).requires_grad_(),
     torch.randint(0, 1000, (512,)).to(d)),
     lambda x, y: torch.autograd.grad(torch.nn.functional.cross_entropy(x, y), x), None),
]


def cnn_step(device, reps=10):
    """A small CNN's SGD step: conv-bn-relu-pool twice, linear, cross_entropy; batch 16 of 3x32x32."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 8 * 8, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(16, 3, 32, 32).to(device), torch.randint(0, 10, (16,)).to(device)
    return training_steps(device, model, opt, torch.nn.functional.cross_entropy, x, y, reps)


def transformer_step(device, reps=10):
    """A transformer encoder layer's AdamW step: d_model 128, 4 heads, ff 256, batch 8 x 64 tokens, no dropout."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True).to(device)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    x = torch.randn(8, 64, 128).to(device)
    return training_steps(device, layer, opt, lambda out, _: out.square().mean(), x, None, reps)


def optimizer_step(device, fused, reps=30):
    """AdamW's step alone over a transformer encoder layer's parameters (as transformer_step's), fixed gradients."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True).to(device)
    for p in layer.parameters():
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3, fused=fused)

    def step():
        opt.step()
        sync(device)

    step()
    return timed(step, reps)


def training_row(name, t_or, t_cpu, flops):
    if flops:
        rate = lambda ts: flops / statistics.median(ts) / 1e9  # noqa: E731
        name = f"{name} (openreg {rate(t_or):.1f}, CPU {rate(t_cpu):.1f} GFLOP/s)"
    return row(name, t_or, t_cpu, None)


# ---- user kernels (torch_openreg.kernels, examples/kernels/) against built-in ops ----

def _example(name):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "kernels" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"kernel_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def user_kernels():
    """Rows: (name, user op, built-in op, argument maker, timing): each op on openreg, and the built-in on CPU."""
    relu, swish, matmul = _example("relu").relu, _example("swish").swish, _example("matmul").matmul
    one = lambda d: (torch.ones(1, device=d),)  # noqa: E731
    million = lambda d: (torch.randn(1 << 20).to(d),)  # noqa: E731
    square = lambda d: (torch.randn(256, 256).to(d), torch.randn(256, 256).to(d))  # noqa: E731
    return [
        ("relu, 1 element (WAT kernel, bare pointers)", relu, torch.relu, one, per_op),
        ("swish with beta 1, 1 element (Rust kernel, descriptors) vs silu", lambda x: swish(x, 1.0),
         torch.nn.functional.silu, one, per_op),
        ("relu, 1M float32", relu, torch.relu, million, big),
        ("swish with beta 1, 1M float32 vs silu", lambda x: swish(x, 1.0), torch.nn.functional.silu, million, big),
        ("matmul 256x256 float32 (C kernel, naive SIMD) vs mm (the engine's packed GEMM)", matmul, torch.mm, square, big),
    ]


def user_row(name, t_user, t_builtin, t_cpu, tail_q):
    tail = (lambda ts: percentile(ts, tail_q)) if tail_q else max
    cells = " | ".join(f"{fmt(statistics.median(t))} / {fmt(tail(t))}" for t in (t_user, t_builtin, t_cpu))
    return f"| {name} | {cells} | {statistics.median(t_builtin) / statistics.median(t_user):.2f}x |\n"


def compiled_training(reps=40):
    """An MLP training step on openreg, eager and under torch.compile(backend="openreg")."""
    x, y = torch.randn(32, 64).to("openreg"), torch.randint(0, 10, (32,)).to("openreg")
    times = {}
    for mode in ("eager", "compiled"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 128),
                                    torch.nn.GELU(), torch.nn.Linear(128, 10)).to("openreg")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        forward = model if mode == "eager" else torch.compile(model, backend="openreg")

        def step():
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(forward(x), y).backward()
            optimizer.step()
            sync("openreg")

        for _ in range(5):
            step()
        times[mode] = timed(step, reps)
    return times


def profiled(make, op, device, reps=3000):
    """per_op inside a torch.profiler profile that records device activity."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.PrivateUse1] if device.startswith("openreg") else [])
    with profile(activities=activities):
        return per_op(make, op, device, reps)


def fmt(t):
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    return f"{t * 1e3:.2f} ms"


def row(name, t_or, t_cpu, tail_q):
    m_or, m_cpu = statistics.median(t_or), statistics.median(t_cpu)
    tail = (lambda ts: percentile(ts, tail_q)) if tail_q else max
    return (f"| {name} | {fmt(m_or)} / {fmt(tail(t_or))} | {fmt(m_cpu)} / {fmt(tail(t_cpu))} | "
            f"{m_cpu / m_or:.2f}x |\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--markdown")
    args = parser.parse_args()
    header = "| measurement | openreg: median / {tail} | torch CPU: median / {tail} | speed ratio (CPU / openreg) |\n" \
             "|---|---|---|---|\n"

    small = header.format(tail="p99")
    for name, make, op in SMALL:
        small += row(name, per_op(make, op, "openreg"), per_op(make, op, "cpu"), 0.99)
    trips = header.format(tail="p99")
    for name, make, op in ROUND_TRIPS:
        trips += row(name, round_trip(make, op, "openreg"), round_trip(make, op, "cpu"), 0.99)
    large = header.format(tail="slowest")
    for name, make, op in LARGE:
        large += row(name, big(make, op, "openreg"), big(make, op, "cpu"), None)
    functions = header.format(tail="slowest")
    for name, make, op in FUNCTIONS:
        functions += row(name, big(make, op, "openreg", reps=15), big(make, op, "cpu", reps=15), None)
    user = ("| measurement | user op on openreg: median / {tail} | built-in op on openreg: median / {tail} | "
            "built-in op on CPU: median / {tail} | speed ratio (built-in / user, both openreg) |\n|---|---|---|---|---|\n")
    user = user.format(tail="p99 or slowest")
    for name, op, builtin, make, timing in user_kernels():
        tail_q = 0.99 if timing is per_op else None
        user += user_row(name, timing(make, op, "openreg"), timing(make, builtin, "openreg"),
                         timing(make, builtin, "cpu"), tail_q)
    compiled = compiled_training()
    compile_table = ("| measurement | compiled: median / slowest | eager: median / slowest | speed ratio (eager / compiled) |\n"
                     "|---|---|---|---|\n" + row("MLP 64-128-128-10 (GELU), batch 32, SGD step, on openreg", compiled["compiled"],
                                                   compiled["eager"], None))
    add = SMALL[0]
    profiler_table = ("| measurement | profiled: median / p99 | not profiled: median / p99 | speed ratio "
                      "(not profiled / profiled) |\n|---|---|---|---|\n")
    for device, activities in (("openreg", "CPU + PrivateUse1"), ("cpu", "CPU")):
        profiler_table += row(f"x + y, 1 element, on {device}, profiled with activities {activities}",
                              profiled(add[1], add[2], device), per_op(add[1], add[2], device), 0.99)
    training = header.format(tail="slowest")
    for name, make, op, flops in TRAINING:
        training += training_row(name, big(make, op, "openreg"), big(make, op, "cpu"), flops)
    training += row("MLP 256-512-512-10, batch 128, cross_entropy forward + backward", mlp("openreg"), mlp("cpu"), None)
    training += row("`make demo`'s step: MLP 3-64-64-1, batch 512, mse_loss, Adam", adam_step("openreg"),
                    adam_step("cpu"), None)
    training += row("small CNN step (2 conv-bn-relu-pool, linear), batch 16 of 3x32x32, SGD", cnn_step("openreg"),
                    cnn_step("cpu"), None)
    training += row("transformer encoder layer step, d_model 128, batch 8 x 64 tokens, AdamW",
                    transformer_step("openreg"), transformer_step("cpu"), None)
    for fused, how in ((False, "foreach (the default)"), (True, "fused=True")):
        training += row(f"AdamW step alone over that layer's 132K parameters, {how}", optimizer_step("openreg", fused),
                        optimizer_step("cpu", fused), None)

    text = (f"Per-op time of 1-element ops (each op timed alone, no synchronize):\n\n{small}\n"
            f"Blocking round trips on 1-element tensors (on CPU the same calls, which do not leave the host):\n\n"
            f"{trips}\nLarge tensors, time to the result (synchronized):\n\n{large}\n"
            f"Elementwise functions and line ops on 1M float32 (synchronized; 4 MiB stays in cache on both sides):"
            f"\n\n{functions}\n"
            f"Matrix products and training steps (synchronized; every op on the device):\n\n{training}\n"
            f"User kernels (`torch_openreg.kernels` ops from `examples/kernels/`) against built-in ops of the same "
            f"size; 1-element rows per op with p99, the others synchronized with the slowest run:\n\n{user}\n"
            f"torch.compile(backend=\"openreg\") against eager, both on openreg:\n\n{compile_table}\n"
            f"The profiler's cost per op (`torch.profiler.profile`; on openreg each kernel also becomes a device "
            f"activity record):\n\n{profiler_table}")
    print(text)
    if args.markdown:
        begin, end = "<!-- torch-bench:begin -->", "<!-- torch-bench:end -->"
        old = open(args.markdown).read() if os.path.exists(args.markdown) else ""
        section = (f"{begin}\nMeasured by `make bench` (`benchmarks/torch_bench.py`, the release build `make demo` "
                   f"installs) with torch {torch.__version__} on {platform.processor() or platform.machine()}, "
                   f"{os.cpu_count()} cores; torch CPU threads: {torch.get_num_threads()}, openreg: "
                   f"{torch.openreg.get_device_properties(0).workers} workers per device.\n\n{text}{end}")
        if begin in old and end in old:
            new = old[:old.index(begin)] + section + old[old.index(end) + len(end):]
        else:
            new = old + "\n## PyTorch backend\n\n" + section + "\n"
        open(args.markdown, "w").write(new)
        print(f"wrote {args.markdown}")


if __name__ == "__main__":
    main()
