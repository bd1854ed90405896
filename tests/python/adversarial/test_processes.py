"""Processes: fork, spawn, Ctrl-C and exit, each in a fresh interpreter.

A device's executor thread does not survive ``fork()``: every entry point in such a child
raises at once (CUDA's message) instead of waiting forever. Ctrl-C reaches a program
blocked on a device. A process that used openreg always exits, even with a kernel still
running.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from adversary import run_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and POSIX signals")

FORK_MESSAGE = "Cannot re-initialize openreg in forked subprocess"


def test_every_entry_point_of_a_forked_child_raises_at_once():
    result = run_python(
        """
        import os, time, torch, torch_openreg
        parent = torch.arange(4.0, device="openreg:0")
        attempts = {
            "new tensor": lambda: torch.ones(1, device="openreg:1"),
            "copy to host": lambda: parent.cpu(),
            "compute": lambda: parent + 1,
            "synchronize": lambda: torch.openreg.synchronize(0),
            "stream": lambda: torch.openreg.Stream(device=0),
            "memory stats": lambda: torch.openreg.memory_stats(0),
            "accelerator": lambda: torch.accelerator.synchronize("openreg:0"),
        }
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            lines = []
            for name, attempt in attempts.items():
                start = time.monotonic()
                try:
                    attempt()
                    outcome = "ran"
                except RuntimeError as e:
                    outcome = "refused" if "Cannot re-initialize openreg in forked subprocess" in str(e) else repr(e)
                lines.append(f"{name}: {outcome} in {time.monotonic() - start:.2f}s")
            del parent  # dropping an inherited tensor is quiet
            os.write(w, "\\n".join(lines).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as pipe:
            print(pipe.read())
        os.waitpid(pid, 0)
        print("parent still computes:", (parent * 2).sum().item())
        """,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for name in ("new tensor", "copy to host", "compute", "synchronize", "stream", "memory stats", "accelerator"):
        line = next(line for line in out.splitlines() if line.startswith(f"{name}:"))
        assert ": refused in " in line, line  # a wait for the dead executor would never return
    assert "parent still computes: 12.0" in out
    assert "Exception ignored" not in result.stderr, result.stderr


def test_fork_workers_of_multiprocessing_finish_with_the_error():
    result = run_python(
        """
        import multiprocessing as mp, torch, torch_openreg
        torch.ones(1, device="openreg:0")
        def work(i):
            try:
                return torch.full((2,), float(i), device="openreg:0").sum().item()
            except RuntimeError as e:
                return str(e)
        with mp.get_context("fork").Pool(2) as pool:
            print(pool.map(work, range(3), chunksize=1))
        """,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(FORK_MESSAGE) == 3, result.stdout


def test_spawn_workers_use_the_devices(tmp_path):
    script = tmp_path / "spawn_workers.py"
    script.write_text(
        textwrap.dedent(
            """
            import multiprocessing as mp, torch, torch_openreg
            def work(i):
                return torch.full((4,), float(i), device=f"openreg:{i % 2}").sum().item()
            if __name__ == "__main__":
                torch.ones(1, device="openreg:0")
                with mp.get_context("spawn").Pool(2) as pool:
                    print(pool.map(work, range(4)))
            """
        )
    )
    env = dict(os.environ, OPENREG_DEVICE_COUNT="2", OPENREG_DEVICE_MEMORY="512MiB")
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "[0.0, 4.0, 8.0, 12.0]" in result.stdout


# A kernel that runs until the watchdog stops it (10 minutes here: far past the tests'
# hang guards), then a blocking call.
BLOCKED = """
import torch, torch_openreg
x = torch.ones(4, device="openreg:0")
m = torch_openreg._C.load_module(0, "endless", b'''(module (import "env" "memory" (memory 1))
    (func (export "adv_forever") (loop $l (br $l))))''')
torch_openreg._C.launch(0, torch.openreg.current_stream(0).stream_id, "adv_forever", [], module=m)
print("waiting", flush=True)
WAIT
"""


@pytest.mark.parametrize(
    "wait, raised",
    [
        # Through torch.openreg: the SIGINT handler runs, KeyboardInterrupt.
        ("torch.openreg.synchronize(0)", "KeyboardInterrupt"),
        # Through torch's C++ dispatcher, which turns every c10 error into RuntimeError.
        ("x.cpu()", "RuntimeError: interrupted (Ctrl-C) while waiting for a stream on openreg:0"),
        ("x.sum().item()", "RuntimeError: interrupted (Ctrl-C) while waiting for a stream on openreg:0"),
    ],
)
def test_ctrl_c_interrupts_a_thread_waiting_for_a_device_and_the_process_exits(wait, raised):
    env = dict(os.environ, OPENREG_DEVICE_COUNT="2", OPENREG_DEVICE_MEMORY="512MiB", OPENREG_KERNEL_TIMEOUT_MS="600000")
    code = textwrap.dedent(BLOCKED).replace("WAIT", wait)
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.5)
        child.send_signal(signal.SIGINT)
        # The wait ends at the signal, and the interpreter exits while the endless kernel
        # still runs (a hang guard, not a timing: the kernel would run for 10 minutes).
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode != 0
    assert err.rstrip().splitlines()[-1].startswith(raised), err


def test_a_process_exits_with_queued_and_running_work():
    # The kernel would run for 10 minutes: the subprocess timeout is the hang guard.
    result = run_python(
        """
        import torch, torch_openreg
        m = torch_openreg._C.load_module(1, "endless", b'''(module (import "env" "memory" (memory 1))
            (func (export "adv_forever") (loop $l (br $l))))''')
        torch_openreg._C.launch(1, torch.openreg.current_stream(1).stream_id, "adv_forever", [], module=m)
        y = torch.ones(1 << 20, device="openreg:1") * 2  # queued behind the endless kernel
        print("leaving")
        """,
        timeout=120,
        OPENREG_KERNEL_TIMEOUT_MS=600000,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "leaving"
