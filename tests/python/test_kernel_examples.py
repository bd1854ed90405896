"""The user-kernel examples in ``examples/kernels/``: a Rust op with a backward
formula that trains (swish), a C op over strided tensors (matmul), and a WAT
op with bare pointers (relu). Each is built from source by
``torch_openreg.kernels`` with the toolchains ``make`` installs, run, and
checked against CPU."""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest
import torch

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "kernels"


def _import(name: str):
    spec = importlib.util.spec_from_file_location(f"kernel_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def examples():
    return {name: _import(name) for name in ("swish", "matmul", "relu")}


@pytest.mark.parametrize("name", ["swish", "matmul", "relu"])
def test_the_example_runs_and_matches_cpu(examples, name, capsys):
    examples[name].main()
    assert "match" in capsys.readouterr().out


def test_example_ops_compute_on_the_device_without_the_fallback(examples):
    x = torch.randn(300, 7)
    with torch.openreg.fallback_policy("error"):
        s = examples["swish"].swish(x.to("openreg"), 0.75)
        m = examples["matmul"].matmul(x.to("openreg"), x.t().to("openreg"))
        r = examples["relu"].relu(x.to("openreg"))
    torch.testing.assert_close(s.cpu(), examples["swish"].reference(x, 0.75), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m.cpu(), x @ x.t(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(r.cpu(), torch.relu(x))


def test_example_ops_pass_opcheck(examples):
    x = torch.randn(12, 5, device="openreg")
    torch.library.opcheck(examples["swish"].swish, (x, 1.5))
    torch.library.opcheck(examples["swish"].swish_backward, (torch.ones_like(x), x, 1.5))
    torch.library.opcheck(examples["matmul"].matmul, (x, x.t()))
    torch.library.opcheck(examples["relu"].relu, (x.t(),))


def test_swish_gradients_flow_through_a_module_on_the_device(examples):
    swish = examples["swish"]
    layer = torch.nn.Sequential(torch.nn.Linear(4, 4), swish.Swish(2.0)).to("openreg")
    x = torch.randn(3, 4, device="openreg")
    layer(x).sum().backward()
    ref = torch.nn.Sequential(torch.nn.Linear(4, 4), swish.Swish(2.0))
    ref.load_state_dict({k: v.cpu() for k, v in layer.state_dict().items()})
    ref(x.cpu()).sum().backward()
    torch.testing.assert_close(layer[0].weight.grad.cpu(), ref[0].weight.grad, rtol=1e-5, atol=1e-5)


def test_example_ops_reject_what_their_kernels_do_not_handle(examples):
    ints = torch.ones(3, 3, dtype=torch.int32, device="openreg")
    with pytest.raises(TypeError, match="examples::matmul: not implemented for int32 \\(it has kernels for float32, float64\\)"):
        examples["matmul"].matmul(ints, ints)
    with pytest.raises(ValueError, match="cannot multiply \\(3, 3\\) by \\(2, 3\\)"):
        examples["matmul"].matmul(ints.float(), ints[:2].float())
    with pytest.raises(TypeError, match="float32 only"):
        examples["relu"].relu(ints)
    with pytest.raises(NotImplementedError):
        examples["relu"].relu(torch.ones(3))  # a CPU tensor: the op has no CPU kernel


def test_the_tutorial_in_the_docs_works_as_written(tmp_path):
    doc = (EXAMPLES.parents[1] / "docs" / "kernel-authoring.md").read_text()
    blocks = re.findall(r"```(\w+)\n(.*?)```", doc, re.S)
    (tmp_path / "scaled_tanh.rs").write_text(blocks[0][1])
    (tmp_path / "scaled_tanh.py").write_text(blocks[1][1] + "\nprint('TUTORIAL OK')\n")
    done = subprocess.run([sys.executable, "scaled_tanh.py"], cwd=tmp_path, capture_output=True, text=True)
    assert "TUTORIAL OK" in done.stdout, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "torch_openreg.kernels", "build", "scaled_tanh.rs"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "scaled_tanh.wasm").read_bytes().startswith(b"\0asm")
