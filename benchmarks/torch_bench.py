"""PyTorch-level benchmarks: openreg against torch's CPU backend, in the same run.

`make bench` runs this after the runtime benchmarks and writes the table into
docs/performance.md (between the torch-bench markers). Best of several runs.
"""

import argparse
import os
import platform
import time

import torch
import torch_openreg  # noqa: F401


def best(fn, reps=7, inner=1):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t) / inner)
    return min(times)


def sync(device):
    if device.startswith("openreg"):
        torch.openreg.synchronize()


def op_time(make, op, device, inner):
    args = make(device)
    op(*args)
    sync(device)

    def run():
        op(*args)
        sync(device)

    return best(run, inner=inner)


def mlp(device):
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
    return best(step, reps=5, inner=3)


CASES = [
    ("x + y, 1 element (time per op)", lambda d: (torch.ones(1, device=d), torch.ones(1, device=d)), torch.add, 200),
    ("x + y, 16M float32 elements", lambda d: (torch.ones(1 << 24, device=d), torch.ones(1 << 24, device=d)), torch.add, 3),
    ("x.sin(), 1M float32 elements (CPU fallback)", lambda d: (torch.ones(1 << 20, device=d),), torch.sin, 5),
    ("mm 512x512 float32 (CPU fallback)", lambda d: (torch.randn(512, 512).to(d), torch.randn(512, 512).to(d)), torch.mm, 5),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--markdown")
    args = parser.parse_args()
    rows = []
    for name, make, op, inner in CASES:
        t_cpu = op_time(make, op, "cpu", inner)
        t_or = op_time(make, op, "openreg", inner)
        rows.append((name, t_or, t_cpu))
    rows.append(("MLP 256-512-512-10, batch 128, forward + backward", mlp("openreg"), mlp("cpu")))

    def fmt(t):
        return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms"

    table = "| measurement | openreg | torch CPU, same run | openreg speed / CPU speed |\n|---|---|---|---|\n"
    for name, t_or, t_cpu in rows:
        table += f"| {name} | {fmt(t_or)} | {fmt(t_cpu)} | {t_cpu / t_or:.2f}x |\n"
    print(table)
    if args.markdown:
        begin, end = "<!-- torch-bench:begin -->", "<!-- torch-bench:end -->"
        old = open(args.markdown).read() if os.path.exists(args.markdown) else ""
        section = (f"{begin}\nMeasured by `make bench` (`benchmarks/torch_bench.py`) with torch {torch.__version__} on "
                   f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch CPU threads: "
                   f"{torch.get_num_threads()}. Best of several runs; ratios above 1 mean openreg is faster.\n\n"
                   f"{table}{end}")
        if begin in old and end in old:
            new = old[:old.index(begin)] + section + old[old.index(end) + len(end):]
        else:
            new = old + "\n## PyTorch backend\n\n" + section + "\n"
        open(args.markdown, "w").write(new)
        print(f"wrote {args.markdown}")


if __name__ == "__main__":
    main()
