"""Plain ``import torch`` loads the backend through the ``torch.backends`` entry point;
TORCH_DEVICE_BACKEND_AUTOLOAD=0 switches that off. Each case runs in a fresh interpreter."""

import concurrent.futures
import os
import subprocess
import sys

SCRIPT = """
import sys
import torch
loaded = "torch_openreg" in sys.modules
t = torch.ones(2, device="openreg")
print(loaded, t.device, t.cpu().tolist())
"""


def _run(tmp_path, autoload):
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_plain_import_torch_loads_openreg(tmp_path):
    result = _run(tmp_path, "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "openreg:0", "[1.0,", "1.0]"]


def test_autoload_can_be_switched_off(tmp_path):
    result = _run(tmp_path, "0")
    assert result.returncode != 0, result.stdout
    assert "openreg" in result.stderr
    assert "torch_openreg" not in result.stdout


def test_imports_work_in_any_order(tmp_path):
    # ten fresh interpreters, two at a time (each spends seconds importing torch)
    cases = [(autoload, imports) for autoload in ("1", "0")
             for imports in ("import torch_openreg\nimport torch", "import torch\nimport torch_openreg",
                             "import torch_openreg.coverage\nimport torch",
                             "import torch_openreg.kernels\nimport torch", "import torch._dynamo\nimport torch_openreg")]

    def run(case):
        autoload, imports = case
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
        code = imports + "\nprint((torch.ones(2, device='openreg') + 1).cpu().tolist())"
        return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for case, result in zip(cases, pool.map(run, cases)):
            assert result.returncode == 0, (case, result.stderr)
            assert result.stdout.strip() == "[2.0, 2.0]", case


def test_the_coverage_tool_runs_as_a_module(tmp_path):
    result = subprocess.run([sys.executable, "-m", "torch_openreg.coverage", "--ops", "add,special.zeta,randn_like",
                             "--out", "-"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "| `add` | device |" in result.stdout
    assert "| `special.zeta` | fallback | 0 | aten::special_zeta |" in result.stdout
    # drawn on the device: values follow the device generator's seed, so only metadata can match CPU
    assert "| `randn_like` | random |" in result.stdout
