"""torch.compile on openreg: the dynamo device interface and the ``openreg`` backend.

- ``OpenRegInterface`` (a ``DeviceInterface``) tells dynamo (and the fake tensors it traces with)
  how to query and drive openreg devices: current device, device count,
  streams, events, synchronize, memory. It is registered when
  ``torch._dynamo.device_interface`` is first imported (see
  ``torch_openreg/__init__.py``), so ``import torch`` stays as fast as before.
- :func:`openreg_backend` is ``torch.compile(..., backend="openreg")``
  (registered through the ``torch_dynamo_backends`` entry point): it runs
  the captured graph, forward and backward through AOTAutograd, on the
  device's kernels. Ops that have no device kernel but decompose into ops
  that do (``mse_loss``, ``hardswish``, ...) are decomposed first, so a
  compiled graph computes more on the device than the same code in eager mode.
- Inductor, torch.compile's default backend, generates C++ or Triton code
  for CPU and GPUs; it has no code generator for WebAssembly devices. A graph
  with openreg tensors makes it stop with an error that names the backend to
  use instead.
- Fake tensors made from openreg tensors keep their backend metadata
  (:func:`carry_backend_meta_into_fake_tensors`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from . import openreg

#: The error inductor raises for a graph on openreg devices.
INDUCTOR_MESSAGE = (
    "torch.compile's default backend (inductor) cannot generate code for openreg devices (WebAssembly "
    "sandboxes); compile with torch.compile(model, backend=\"openreg\"), which runs the captured graph on "
    "the device kernels"
)


@functools.cache
def _interface(device_interface: type) -> type:
    """The DeviceInterface subclass for openreg (built on dynamo's base class
    when dynamo loads, so that importing this module does not load dynamo)."""

    class OpenRegInterface(device_interface):
        """openreg devices as dynamo sees them: ``torch.openreg`` behind DeviceInterface."""

        device = openreg.device
        Event = openreg.Event
        Stream = openreg.Stream

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                openreg.set_device(device)

            @staticmethod
            def current_device() -> int:
                return openreg.current_device()

            @staticmethod
            def get_device_properties(device: torch.types.Device = None) -> Any:
                return openreg.get_device_properties(device)

        current_device = staticmethod(openreg.current_device)
        set_device = staticmethod(openreg.set_device)
        device_count = staticmethod(openreg.device_count)
        is_available = staticmethod(openreg.is_available)
        stream = staticmethod(openreg.stream)
        current_stream = staticmethod(openreg.current_stream)
        set_stream = staticmethod(openreg.set_stream)
        synchronize = staticmethod(openreg.synchronize)
        memory_allocated = staticmethod(openreg.memory_allocated)

        @staticmethod
        def exchange_device(device: int) -> int:
            previous = openreg.current_device()
            if device != previous:
                openreg.set_device(device)
            return previous

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            return OpenRegInterface.exchange_device(device)

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            openreg.set_stream(openreg.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return openreg.current_stream(device_idx).stream_id

        @staticmethod
        def get_compute_capability(device: torch.types.Device = None) -> str:
            return "wasm64" if openreg.get_device_properties(device).memory64 else "wasm32"

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return openreg.is_bf16_supported(including_emulation)

    return OpenRegInterface


def register_device_interface(device_interface_module: Any) -> None:
    """Adds openreg to dynamo's device interfaces (called right after that module is imported)."""
    interface = _interface(device_interface_module.DeviceInterface)
    device_interface_module.device_interfaces[torch._C._get_privateuse1_backend_name()] = interface


def carry_backend_meta_into_fake_tensors(fake_tensor_module: Any) -> None:
    """Makes fake tensors made from openreg tensors keep their backend metadata
    (``torch._utils.set_tensor_metadata``), as ``torch.save``/``torch.load`` do.

    torch's fake-tensor converter builds each fake tensor on the meta device and
    copies no backend metadata, for any backend; tracing code that reads the
    flags (``get_tensor_metadata``) would see them vanish. The converter's
    ``from_real_tensor`` is wrapped once to copy them onto the fake tensor,
    which reports the openreg device, so openreg's metadata registration holds
    them there.
    """
    converter = fake_tensor_module.FakeTensorConverter
    original = converter.from_real_tensor
    if getattr(original, "_openreg_carries_backend_meta", False):
        return
    backend = torch._C._get_privateuse1_backend_name()

    @functools.wraps(original)
    def from_real_tensor(self: Any, fake_mode: Any, t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        fake = original(self, fake_mode, t, *args, **kwargs)
        if t.device.type == backend and not isinstance(t, fake_tensor_module.FakeTensor):
            metadata = torch._C._get_tensor_metadata(t)
            if metadata and not torch._C._get_tensor_metadata(fake):
                torch._C._set_tensor_metadata(fake, metadata)
        return fake

    from_real_tensor._openreg_carries_backend_meta = True  # type: ignore[attr-defined]
    converter.from_real_tensor = from_real_tensor


class _Refusing(type):
    """A class whose every attribute inductor asks for raises :data:`INDUCTOR_MESSAGE`."""

    def __getattr__(cls, name: str) -> Any:
        raise RuntimeError(INDUCTOR_MESSAGE)


class _NoInductorScheduling(metaclass=_Refusing):
    """Inductor's code generator for openreg: there is none, and it says which backend to use."""

    def __init__(self, *args: Any, **kwargs: Any):
        raise RuntimeError(INDUCTOR_MESSAGE)


def register_inductor_refusal(codegen_common: Any) -> None:
    """Makes inductor stop on openreg tensors with :data:`INDUCTOR_MESSAGE` (called right after
    ``torch._inductor.codegen.common`` is imported)."""
    codegen_common.register_backend_for_device(
        torch._C._get_privateuse1_backend_name(), _NoInductorScheduling, _NoInductorScheduling
    )


@functools.cache
def _decompositions() -> dict:
    """Core ATen decompositions of the ops that have no openreg kernel (they would run on the host)."""
    from torch._decomp import core_aten_decompositions

    from . import _C

    return {op: fn for op, fn in core_aten_decompositions().items() if _C.runs_through_fallback(op.name())}


def openreg_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
    """``torch.compile(fn, backend="openreg")``: the graph, forward and backward, on openreg's kernels.

    AOTAutograd traces the graph into ATen ops (with the backward graph for
    training) and decomposes the ones that have no device kernel into ones
    that do; the result runs op by op on the device, as eager code does, with
    dynamo's guards, recompilation on shape or dtype change, dynamic shapes
    and graph breaks as for any backend.
    """
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def run_on_device(graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        return make_boxed_func(graph.forward)

    return aot_autograd(fw_compiler=run_on_device, bw_compiler=run_on_device, decompositions=_decompositions())(
        gm, example_inputs, **kwargs
    )
