"""Which of PyTorch's operators the openreg devices compute themselves, measured.

Runs the samples of PyTorch's OpInfo database (``op_db``, the inputs PyTorch's own test suite
uses) on an openreg device with the fallback refused (policy ``error``) and compares each result
with the CPU's. Every op lands in one class:

- **device**: every sample ran on the device and agreed with CPU;
- **disagrees**: a sample ran on the device and gave a different result (or a different error);
- **fallback**: a sample needed an operator with no device kernel (named in the report);
- **no samples**: CPU refused every sample for this dtype, so nothing was compared.

Ops that return uninitialized memory (``empty`` and its kin) are compared by shape, strides and
dtype only.

Usage::

    python -m torch_openreg.coverage                      # float32, writes docs/op-coverage.md
    python -m torch_openreg.coverage --ops add,sum --out -  # a few ops, to stdout

Samples are made on the CPU and copied to the device, so making them needs no device kernel.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import sys
import time

import torch
import torch.utils._pytree as pytree

FALLBACK = re.compile(r"openreg: (aten::[\w.]+) has no device kernel")


@dataclasses.dataclass
class Result:
    """One op's class and the evidence for it."""

    name: str
    status: str  # "device", "random", "disagrees", "fallback", "no samples"
    samples: int = 0
    detail: str = ""


def _to(device, tree):
    def move(x):
        if isinstance(x, torch.Tensor):
            return x.detach().to(device).requires_grad_(x.requires_grad) if x.is_leaf else x.detach().to(device)
        if isinstance(x, torch.device) or (isinstance(x, str) and x in ("cpu", "openreg")):
            return torch.device(device)
        return x

    return pytree.tree_map(move, tree)


def _close(actual, expected) -> str | None:
    """None if the two results agree (as OpInfo tests compare), else why not."""
    a_leaves, e_leaves = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    if len(a_leaves) != len(e_leaves):
        return "a different number of results"
    for a, e in zip(a_leaves, e_leaves):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"a {type(a).__name__} instead of a tensor"
            if a.device.type != "openreg" and e.device.type == "cpu" and a.numel() > 0:
                return f"a result on {a.device}"
            try:
                torch.testing.assert_close(a.detach().cpu(), e.detach(), equal_nan=True, check_device=False,
                                           atol=1e-4 if e.dtype == torch.float32 else None,
                                           rtol=1.3e-5 if e.dtype == torch.float32 else None)
            except AssertionError as error:
                return str(error).splitlines()[0]
        elif a != e and not (isinstance(e, float) and e != e and a != a):
            return f"{a!r} instead of {e!r}"
    return None


def _run_on_device(op, sample):
    """The op on openreg:0, fallback refused. Every tensor argument goes to the device; if the op
    refuses that for a reason other than the fallback policy (some arguments must stay on the
    CPU, as tensor_split's sections), it runs again with only the input on the device."""
    with torch.openreg.fallback_policy("error"):
        dev = _to("openreg", (sample.input, sample.args, sample.kwargs))
        try:
            result = op(dev[0], *dev[1], **dev[2])
        except Exception as error:  # noqa: BLE001 - retried, or raised
            if FALLBACK.search(str(error)):
                raise
            result = op(_to("openreg", sample.input), *sample.args, **sample.kwargs)
        torch.openreg.synchronize()
        return result


# Ops whose float32 CPU kernels compute in float32 and lose digits the device keeps (it computes
# them in float64: trigamma and polygamma near their poles, where CPU's float32 sin(pi x) is off):
# compared, in float32, with CPU's float64 results rounded to float32.
FLOAT64_ORACLE = {
    "digamma", "polygamma.polygamma_n_0", "polygamma.polygamma_n_1", "polygamma.polygamma_n_2",
    "polygamma.polygamma_n_3", "polygamma.polygamma_n_4", "special.polygamma.special_polygamma_n_0",
}


def to_float64(tree):
    """`tree` with its float32 tensors in float64 (CPU's more accurate oracle)."""
    return pytree.tree_map(
        lambda x: x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x, tree)


def to_float32(tree):
    """`tree` with its float64 tensors rounded to float32."""
    return pytree.tree_map(
        lambda x: x.float() if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else x, tree)


# Ops whose results are uninitialized memory: only shapes, strides and dtypes can agree.
UNINITIALIZED = {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"}


def _metadata(tree):
    return pytree.tree_map(
        lambda x: (tuple(x.shape), x.dtype, tuple(x.stride())) if isinstance(x, torch.Tensor) else x, tree)


def check_op(op, dtype=torch.float32, max_samples=6) -> Result:
    """Runs up to `max_samples` of `op`'s samples on openreg:0 and classifies the op."""
    try:
        samples = list(op.sample_inputs("cpu", dtype))[:max_samples]
    except Exception as error:  # noqa: BLE001 - an OpInfo that cannot make samples here
        return Result(op.full_name, "no samples", detail=f"samples: {type(error).__name__}")
    compared = random_samples = 0
    for sample in samples:
        try:
            if dtype == torch.float32 and op.full_name in FLOAT64_ORACLE:
                wide = to_float64((sample.input, sample.args, sample.kwargs))
                expected = to_float32(op(wide[0], *wide[1], **wide[2]))
            else:
                expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - CPU refuses this sample: nothing to compare
            continue
        try:
            actual = _run_on_device(op, sample)
        except Exception as error:  # noqa: BLE001 - classified here
            missing = FALLBACK.search(str(error))
            if missing:
                return Result(op.full_name, "fallback", compared, missing.group(1))
            return Result(op.full_name, "disagrees", compared,
                          f"raised {type(error).__name__}: {str(error).splitlines()[0][:120]}")
        if op.name in UNINITIALIZED:
            actual, expected = _metadata(actual), _metadata(expected)
        why = _close(actual, expected)
        compared += 1
        if why is not None and _draws_random_numbers(op, sample):
            random_samples += 1
            why = _close(_metadata(actual), _metadata(expected))
        if why is not None:
            return Result(op.full_name, "disagrees", compared, why[:160])
    if compared == 0:
        return Result(op.full_name, "no samples", detail="CPU refused every sample")
    if random_samples:
        return Result(op.full_name, "random", compared, f"{random_samples} sample(s) drew from the device's generator")
    return Result(op.full_name, "device", compared)


def _draws_random_numbers(op, sample) -> bool:
    """Whether the sample's device result depends on the device generator's seed (random ops,
    dropout): such results cannot equal CPU's, whose generator is another; their shapes, strides
    and dtypes are compared instead. Four seeds, so that a small draw (a permutation of three)
    rarely repeats by chance."""
    results = []
    original = torch.manual_seed
    for salt in (1, 2, 3, 4):
        # OpInfo's random ops reseed with torch.manual_seed(42) before they run: the device's
        # generator gets that seed plus the salt
        def salted(seed, salt=salt):
            generator = original(seed)
            torch.openreg.manual_seed(int(seed) + salt)
            return generator

        torch.manual_seed = salted
        try:
            torch.openreg.manual_seed(salt)
            results.append(_run_on_device(op, sample))
        finally:
            torch.manual_seed = original
    return any(_close(results[0], other) is not None for other in results[1:])


def report(results: list[Result], dtype, seconds: float) -> str:
    counts = collections.Counter(r.status for r in results)
    missing = collections.Counter(r.detail for r in results if r.status == "fallback")
    lines = [
        "# Operator coverage",
        "",
        f"Measured by `python -m torch_openreg.coverage` (`make coverage`) with torch {torch.__version__}: the "
        f"samples of PyTorch's OpInfo database (`op_db`, up to 6 per op, dtype {dtype}) run on openreg:0 with the "
        "fallback refused, each result compared with CPU's (OpInfo's float32 tolerances). "
        f"{len(results)} ops in {seconds:.0f} s.",
        "",
        "| class | ops | meaning |",
        "|---|---|---|",
        f"| device | {counts['device']} | every sample ran on the device and agreed with CPU |",
        f"| random | {counts['random']} | every sample ran on the device; values drawn from the device's generator "
        "(which changes them with its seed) are compared by shape, strides and dtype |",
        f"| disagrees | {counts['disagrees']} | a sample ran on the device and differed from CPU |",
        f"| fallback | {counts['fallback']} | a sample needed an operator with no device kernel |",
        f"| no samples | {counts['no samples']} | CPU refused every sample for this dtype |",
        "",
        "Operators whose absence sends the most ops to the fallback:",
        "",
        "| missing device kernel | ops that need it |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {n} |" for name, n in missing.most_common(25)]
    lines += ["", "## Per op", "", "| op | class | samples compared | detail |", "|---|---|---|---|"]
    for r in sorted(results, key=lambda r: r.name):
        detail = r.detail.replace("|", "\\|")
        lines.append(f"| `{r.name}` | {r.status} | {r.samples} | {detail} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/op-coverage.md", help="where to write the report ('-': stdout)")
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--dtype", default="float32", help="the dtype of the samples (default: float32)")
    args = parser.parse_args(argv)

    import torch_openreg  # noqa: F401 - the device
    from torch.testing._internal.common_methods_invocations import op_db

    dtype = getattr(torch, args.dtype)
    wanted = set(args.ops.split(",")) if args.ops else None
    ops = [op for op in op_db if wanted is None or op.full_name in wanted or op.name in wanted]
    if wanted and not ops:
        parser.error(f"no OpInfo named {sorted(wanted)}")
    start = time.perf_counter()
    results = []
    for op in ops:
        if dtype not in op.supported_dtypes("cpu"):
            continue
        torch.manual_seed(0)
        results.append(check_op(op, dtype))
    text = report(results, args.dtype, time.perf_counter() - start)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)
        counts = collections.Counter(r.status for r in results)
        print(f"wrote {args.out}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
