"""torch_openreg: PyTorch devices that are WebAssembly sandboxes.

Importing this package makes ``openreg`` a PyTorch device type (``openreg:0``,
``openreg:1``, ...; the PrivateUse1 dispatch key, renamed)::

    import torch
    import torch_openreg  # not needed when autoloaded, see below

    x = torch.randn(4, 4, device="openreg")
    print((x + x).cpu())

Plain ``import torch`` loads it too, through the ``torch.backends`` entry point
(``_autoload`` below); ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` switches that off.

Registration, in the order torch needs it (all before the first openreg
tensor exists): the backend's name; the compiled module ``torch_openreg._C``,
whose loading registers the device guard, allocator, operators and CPU
fallback with c10/ATen, and whose ``_init`` registers the hooks; the device
module ``torch.openreg``; the generated conveniences (``Tensor.openreg()``,
``Tensor.is_openreg``, ``Module.openreg()``, storage methods, which
``torch.save``/``torch.load`` use to keep the device). Importing again, or
reloading, is harmless.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import os
import sys
import time


def _autoload() -> None:
    """The ``torch.backends`` entry point: ``import torch`` calls it.

    Importing the package registers everything (``_register`` below). It is
    defined before ``import torch`` so that importing ``torch_openreg`` first
    works too: torch's import then loads this entry point from the package
    while the package is still being imported, finds it, and the package
    registers itself once torch is ready.
    """


import torch  # noqa: E402 - after _autoload, see its docstring

__all__ = ["BACKEND_NAME"]

#: The device type name: ``torch.device("openreg")``.
BACKEND_NAME = "openreg"


def _default_workers() -> None:
    """Gives each device as many worker threads as torch's CPU backend uses
    (``torch.get_num_threads()``, at most 16), unless ``OPENREG_DEVICE_THREADS``
    says otherwise. The runtime reads it when it first starts, after this."""
    if not os.environ.get("OPENREG_DEVICE_THREADS", "").strip():
        os.environ["OPENREG_DEVICE_THREADS"] = str(min(max(torch.get_num_threads(), 1), 16))


def _register() -> None:
    """Registers the backend with torch; does nothing the second time."""
    _default_workers()
    current = torch._C._get_privateuse1_backend_name()
    if current != BACKEND_NAME:
        # Raises if another backend already took the PrivateUse1 key.
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)

    from . import _C

    _C._init()

    from . import openreg as device_module

    registered = getattr(torch, BACKEND_NAME, None)
    if registered is None:
        torch._register_device_module(BACKEND_NAME, device_module)
    elif registered is not device_module:
        raise RuntimeError(
            f"torch.{BACKEND_NAME} is already registered as {registered!r}, not torch_openreg's device module"
        )

    _after_import("torch._dynamo.device_interface", "register_device_interface")
    _after_import("torch._inductor.codegen.common", "register_inductor_refusal")
    _after_import("torch._subclasses.fake_tensor", "carry_backend_meta_into_fake_tensors")

    if not hasattr(torch.Tensor, f"is_{BACKEND_NAME}"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
        atexit.register(_let_autograd_threads_finish)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``torch_openreg._compile.<hook>(module)`` right after ``module`` is imported.

    torch.compile's registries (dynamo's device interfaces, inductor's code
    generators) live in modules that take seconds to import; registering with
    them when they load, not at ``import torch``, keeps the import fast.
    """

    def __init__(self, name: str, hook: str):
        self.name, self.hook = name, hook

    def find_spec(self, name, path, target=None):  # noqa: ANN001 - importlib's signature
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module
        hook = self.hook

        def exec_module(module):  # noqa: ANN001, ANN202
            run_module(module)
            from . import _compile

            getattr(_compile, hook)(module)

        spec.loader.exec_module = exec_module
        return spec


def _after_import(name: str, hook: str) -> None:
    """Calls ``_compile.<hook>(module)`` once ``name`` is imported (now, if it already is)."""
    if name in sys.modules:
        from . import _compile

        getattr(_compile, hook)(sys.modules[name])
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, hook))


def _let_autograd_threads_finish() -> None:
    """Gives autograd's device threads a moment before the interpreter shuts down.

    After a backward pass on an accelerator, the engine's device thread
    (``pt_autograd_N``) may still hold the last reference to the finished graph
    task when the main thread reaches interpreter shutdown; dropping it then
    takes the GIL from a finalizing interpreter and aborts the process with
    "terminate called without an active exception" (an upstream race, see
    pytorch/pytorch#38228; CUDA has the same window). The release is a few
    microseconds away, so a short pause at exit closes the window in practice.
    """
    time.sleep(0.005)


_register()
