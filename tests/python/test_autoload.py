"""Plain ``import torch`` loads the backend through the ``torch.backends`` entry point;
TORCH_DEVICE_BACKEND_AUTOLOAD=0 switches that off. Each case runs in a fresh interpreter."""

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
