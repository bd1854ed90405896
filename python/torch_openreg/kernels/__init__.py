"""WebAssembly kernels written by users, run as PyTorch operators on openreg devices.

A kernel module is a wasm core module (built from Rust, C or WAT) that imports
the device memory and exports kernel functions; see ``docs/kernel-authoring.md``
for the contract and a tutorial. This module loads such modules and binds their
kernels to operators::

    import torch
    from torch_openreg import kernels

    module = kernels.load("swish.rs")          # builds it; or a .c, .wat or .wasm file, bytes, WAT text

    @kernels.custom_op("mylib::swish", module["swish_forward"])
    def swish(x: torch.Tensor, beta: float) -> torch.Tensor:
        return torch.empty_like(x)             # the outputs: also the op's fake (meta) implementation

    y = torch.ops.mylib.swish(torch.randn(8, device="openreg"), 1.0)

The kernel ``swish_forward`` then receives ``(x, out, beta)``: each tensor as
the device address of a tensor descriptor (the SDK's ``openreg_tensor``:
data, sizes, strides in elements, dtype), the float as an ``f32``. It runs on
the tensors' device, in order on its current stream, on device memory in place.

- :func:`load` checks a module at once (on the current device), and loads it
  onto each other device the first time a kernel of it runs there.
- :func:`custom_op` makes a kernel a ``torch.library`` custom operator;
  ``register_autograd`` on the result adds a backward formula, and
  ``torch.library.opcheck`` checks it.
- :func:`launch` (or calling a :class:`Kernel`) launches a kernel directly.
- :func:`build` compiles a ``.rs``, ``.c`` or ``.wat`` source to a ``.wasm``
  module (``python -m torch_openreg.kernels build``).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import pathlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import torch

from .. import _C
from ._build import KernelBuildError, _cache_dir, build, sdk_dir

__all__ = [
    "Kernel",
    "KernelBuildError",
    "KernelModule",
    "build",
    "custom_op",
    "launch",
    "load",
    "ptr",
    "sdk_dir",
    "WORKER_COUNT",
    "WORKER_INDEX",
]

#: The dtype codes of tensor descriptors: c10's ``ScalarType`` numbering, as
#: the SDKs' ``OPENREG_FLOAT32`` and friends (``openreg_kernel.h``).
DTYPE_CODES: dict[torch.dtype, int] = {
    torch.uint8: 0,
    torch.int8: 1,
    torch.int16: 2,
    torch.int32: 3,
    torch.int64: 4,
    torch.float16: 5,
    torch.float32: 6,
    torch.float64: 7,
    torch.bool: 11,
    torch.bfloat16: 15,
}

#: The flag bit of a descriptor whose tensor is contiguous (row-major).
CONTIGUOUS = 1

Source = Union[str, bytes, bytearray, memoryview, os.PathLike]


@dataclass(frozen=True)
class Kernel:
    """One kernel of a :class:`KernelModule`: its export name and parameter types.

    Calling it launches it (see :func:`launch`).
    """

    module: KernelModule
    #: The export name.
    name: str
    #: The position in the module's kernel list (the runtime's handle).
    index: int
    #: The wasm parameter types, in order: ``"i32"``, ``"i64"``, ``"f32"`` or ``"f64"``.
    params: tuple[str, ...]

    def __call__(self, *args: Any, device: Any = None, stream: torch.Stream | None = None) -> None:
        launch(self, *args, device=device, stream=stream)

    def __repr__(self) -> str:
        return f"<kernel {self.name}({', '.join(self.params)}) of {self.module.name!r}>"


class KernelModule:
    """A checked kernel module, loaded onto each openreg device when first used there.

    ``module["name"]`` is a :class:`Kernel`; ``module.kernels`` lists them all.
    Get one from :func:`load`.
    """

    def __init__(self, name: str, wasm: bytes, device: int):
        self.name = name
        self._wasm = wasm
        self._ids: dict[int, int] = {}
        self._lock = threading.Lock()
        module_id = self._load_on(device)
        self.kernels: dict[str, Kernel] = {
            kernel_name: Kernel(self, kernel_name, index, tuple(params))
            for index, (kernel_name, params) in enumerate(_C.module_kernels(device, module_id))
        }

    def _load_on(self, device: int) -> int:
        """The module's id on ``device``, loading it there first if needed."""
        found = self._ids.get(device)
        if found is not None:
            return found
        with self._lock:
            if device not in self._ids:
                self._ids[device] = _C.load_module(device, self.name, self._wasm)
            return self._ids[device]

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            raise KeyError(
                f"kernel module {self.name!r} has no kernel {name!r}; it exports {', '.join(self.kernels)}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self.kernels

    def __repr__(self) -> str:
        return f"<kernel module {self.name!r}: {', '.join(map(repr, self.kernels.values()))}>"


_modules: dict[tuple[str, bytes], KernelModule] = {}
_modules_lock = threading.Lock()


def _looks_like_wat(text: str) -> bool:
    """Whether a string is WAT text rather than a path: its first token is ``(``."""
    for line in text.lstrip().splitlines():
        line = line.strip()
        if line and not line.startswith(";;"):
            return line.startswith("(")
    return False


def _built_path(source: pathlib.Path) -> pathlib.Path:
    """Where :func:`load` puts the module it builds from ``source``: the
    cache, keyed by the source's path and text (the source folder stays clean)."""
    key = hashlib.sha256(str(source.resolve()).encode() + b"\0" + source.read_bytes()).hexdigest()[:16]
    return _cache_dir() / "modules" / f"{source.stem}-{key}.wasm"


def load(source: Source, *, name: str | None = None) -> KernelModule:
    """Loads a kernel module for the openreg devices and returns it.

    ``source`` is a path to a ``.wasm`` or ``.wat`` file, or to a ``.rs`` or
    ``.c`` source (compiled first with :func:`build`); or the module itself as
    ``bytes`` (binary or WAT text) or a WAT ``str``. A source is compiled at
    every call, into the kernel cache (``$OPENREG_CACHE_DIR``, default
    ``~/.cache/torch_openreg``) under a name keyed by its path and text, so
    the source folder stays clean. ``name`` (default: the
    file's stem, else ``"user"``) appears in error messages.

    The module is checked and loaded on the current device now, so a broken
    module (not wasm, a host import, a start function, a kernel that returns
    values, static data that overlaps a module already loaded, ...) raises
    ``ValueError`` here with what is wrong and how to fix it. Other devices
    load it the first time one of its kernels runs there. Loading the same
    bytes under the same name again returns the same module.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        wasm, default_name = bytes(source), "user"
    elif isinstance(source, str) and _looks_like_wat(source):
        wasm, default_name = source.encode(), "user"
    elif isinstance(source, (str, os.PathLike)):
        path = pathlib.Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no kernel module or source at {str(path)!r}")
        if path.suffix in (".rs", ".c"):
            # Built under a name of this process's own, then renamed into place:
            # processes loading the same source at once (pytest-xdist's
            # workers) never write, or read, one file together.
            built = _built_path(path)
            tmp = built.with_name(f"{built.stem}.tmp{os.getpid()}{built.suffix}")
            os.replace(build(path, tmp), built)
            path = built
        wasm, default_name = path.read_bytes(), path.stem
    else:
        raise TypeError(f"load() takes a path, bytes or WAT text, not {type(source).__name__}")
    key = (name or default_name, wasm)
    with _modules_lock:
        module = _modules.get(key)
        if module is None:
            from .. import openreg

            openreg._lazy_init()
            module = KernelModule(key[0], wasm, _C.current_device())
            _modules[key] = module
    return module


class ptr:
    """Passes a tensor to a kernel as its data address instead of a descriptor.

    In :func:`launch` arguments, or in the list a :func:`custom_op`'s ``args``
    function returns: ``kernels.ptr(x)`` reaches the kernel as the device
    address of ``x``'s first element (an ``i32`` on 32-bit devices), the form
    hand-written WAT kernels usually take.
    """

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"kernels.ptr() takes a tensor, not {type(tensor).__name__}")
        self.tensor = tensor


class _WorkerArg:
    """A launch argument the device sets per call (``WORKER_INDEX``, ``WORKER_COUNT``)."""

    def __init__(self, wit_name: str, name: str) -> None:
        self.wit_name = wit_name
        self.name = name

    def __repr__(self) -> str:
        return f"torch_openreg.kernels.{self.name}"


#: A launch argument (an ``i32`` parameter): the index of this call, from 0. A launch with
#: ``WORKER_INDEX`` or ``WORKER_COUNT`` among its arguments makes one call per index up to the
#: device's worker count (``get_device_properties().workers``), which its workers take at once,
#: over the same memory; each call must work on its own part and write only there. Without them a
#: launch runs once.
WORKER_INDEX = _WorkerArg("worker-index", "WORKER_INDEX")
#: A launch argument (an ``i32`` parameter): how many calls the launch makes. See ``WORKER_INDEX``.
WORKER_COUNT = _WorkerArg("worker-count", "WORKER_COUNT")


def _kernel_args(args: Sequence[Any], what: str) -> tuple[int | None, list[Any]]:
    """The openreg device of the tensors in ``args`` (None if there are none),
    and the arguments as ``_C.launch`` takes them. Raises if a tensor is not
    on openreg or the tensors are on several devices."""
    device = None
    converted = []
    for i, arg in enumerate(args):
        tensor = arg.tensor if isinstance(arg, ptr) else arg
        if isinstance(tensor, torch.Tensor):
            where = tensor.device
            if where.type != "openreg":
                raise RuntimeError(
                    f"{what}: argument {i} is a tensor on {where}; kernels run on openreg tensors only "
                    f"(move it with .to('openreg'))"
                )
            if device is None:
                device = where.index
            elif where.index != device:
                raise RuntimeError(
                    f"{what}: expected all tensors to be on the same device, but argument {i} is on "
                    f"openreg:{where.index} and an earlier one on openreg:{device}"
                )
            if tensor is arg:
                code = DTYPE_CODES.get(tensor.dtype)
                if code is None:
                    raise TypeError(f"{what}: argument {i} is a {tensor.dtype} tensor, which a kernel cannot take")
                arg = (
                    tensor.data_ptr(),
                    tensor.numel(),
                    code,
                    tensor.element_size(),
                    CONTIGUOUS if tensor.is_contiguous() else 0,
                    tensor.shape,
                    tensor.stride(),
                )
            else:
                arg = tensor.data_ptr()
        elif arg is None:
            arg = 0  # an absent optional tensor: the null device pointer
        elif isinstance(arg, bool):
            arg = int(arg)
        elif isinstance(arg, _WorkerArg):
            arg = arg.wit_name
        elif not isinstance(arg, (int, float)):
            raise TypeError(
                f"{what}: argument {i} is a {type(arg).__name__}; a kernel argument is a tensor, "
                f"kernels.ptr(tensor), an int, a float, a bool, None, WORKER_INDEX or WORKER_COUNT"
            )
        converted.append(arg)
    return device, converted


def launch(
    kernel: Kernel,
    *args: Any,
    device: Any = None,
    stream: torch.Stream | None = None,
    op: str | None = None,
) -> None:
    """Queues ``kernel`` on an openreg device with ``args`` and returns at once.

    Each argument is a tensor (the kernel receives the address of its
    descriptor), ``kernels.ptr(tensor)`` (its data address), an int, a float,
    a bool or ``None`` (a null pointer), matching the kernel's parameter types
    (checked; a mismatch raises ``ValueError``). Tensors must be on one openreg
    device: ``device`` if given, else theirs, else the current device. The
    kernel runs on ``stream`` (default: that device's current stream), after
    the work queued there before; a fault it hits is raised by the next
    synchronizing call, as CUDA reports kernel errors. As with CUDA, a tensor
    used on a stream other than the one it was allocated on needs
    ``tensor.record_stream(stream)`` before it is freed.
    """
    if not isinstance(kernel, Kernel):
        raise TypeError(f"launch() takes a Kernel (module['name']), not {type(kernel).__name__}")
    what = op or f"kernel {kernel.name!r}"
    index, converted = _kernel_args(args, what)
    if device is not None:
        wanted = torch.device(device)
        if wanted.type != "openreg":
            raise ValueError(f"{what}: kernels run on openreg devices, not {wanted}")
        wanted_index = wanted.index if wanted.index is not None else _C.current_device()
        if index is not None and index != wanted_index:
            raise RuntimeError(f"{what}: the tensors are on openreg:{index} but the launch is for openreg:{wanted_index}")
        index = wanted_index
    if index is None:
        index = _C.current_device()
    stream_id = None
    if stream is not None:
        if stream.device.type != "openreg" or stream.device_index != index:
            raise ValueError(f"{what}: the stream is on {stream.device}, the launch on openreg:{index}")
        stream_id = stream.stream_id
    _C.launch(index, stream_id, kernel.index, converted, module=kernel.module._load_on(index), op=op)


def _schema_kinds(schema: str, name: str) -> tuple[list[str], list[str], int]:
    """The op's argument names, their kinds (``tensor``, ``int``, ``float``, ``bool``) and its output count."""
    parsed = torch._C.parse_schema(f"{name}{schema}")
    names, kinds = [], []
    for arg in parsed.arguments:
        text = str(arg.type)
        if text in ("Tensor", "Optional[Tensor]", "Tensor?"):
            kind = "tensor"
        elif text in ("int", "SymInt"):
            kind = "int"
        elif text == "float":
            kind = "float"
        elif text == "bool":
            kind = "bool"
        else:
            raise TypeError(
                f"{name}: argument {arg.name!r} is a {text}; a kernel op takes Tensor, Tensor?, int, float and bool "
                f"arguments (pass lists as separate arguments or as a tensor)"
            )
        names.append(arg.name)
        kinds.append(kind)
    for ret in parsed.returns:
        if str(ret.type) != "Tensor":
            raise TypeError(f"{name}: a kernel op returns Tensors (or nothing), not {ret.type}")
    return names, kinds, len(parsed.returns)


_PARAM_TYPES = {"tensor": ("i32", "i64"), "int": ("i32", "i64"), "bool": ("i32", "i64"), "float": ("f32", "f64")}


def _check_signature(name: str, kernel: Kernel, names: list[str], kinds: list[str], outputs: int) -> None:
    """Checks the default argument mapping (inputs, then outputs) against the kernel's parameters."""
    expected = [(n, k) for n, k in zip(names, kinds)] + [(f"output {i}", "tensor") for i in range(outputs)]
    mapping = ", ".join(f"{n}: {'/'.join(_PARAM_TYPES[k])}" for n, k in expected)
    if len(expected) != len(kernel.params):
        raise ValueError(
            f"{name}: kernel {kernel.name!r} takes {len(kernel.params)} parameters ({', '.join(kernel.params)}) but the "
            f"op passes {len(expected)}: the inputs, then the outputs ({mapping}); pass args= to map them yourself"
        )
    for (arg, kind), param in zip(expected, kernel.params):
        if param not in _PARAM_TYPES[kind]:
            raise ValueError(
                f"{name}: {arg} is a {kind}, passed as {' or '.join(_PARAM_TYPES[kind])}, but kernel "
                f"{kernel.name!r} takes {param} there ({mapping}); pass args= to map them yourself"
            )


def custom_op(
    name: str,
    kernel: Kernel | Mapping[torch.dtype, Kernel],
    *,
    mutates_args: str | Iterable[str] = (),
    args: Callable[..., Sequence[Any]] | None = None,
    schema: str | None = None,
) -> Callable[[Callable[..., Any]], torch.library.CustomOpDef]:
    """Makes ``kernel`` the openreg implementation of a new operator ``name``.

    Decorates the op's *output function*: a function with the op's typed
    signature that allocates and returns its outputs (``torch.empty_like(x)``,
    ``x.new_empty(...)``; a tuple for several, ``None`` for an op that only
    mutates ``mutates_args``) without reading any data. It runs on the real
    inputs to allocate the outputs, and on fake tensors as the op's fake (meta)
    implementation, so ``torch.compile`` and ``opcheck`` know the output shapes.
    Returns the ``torch.library.CustomOpDef``: ``torch.ops.<namespace>.<name>``
    and the returned object both call the op, and ``.register_autograd(...)``
    adds a backward formula.

    A call runs on the device of its tensor arguments (all on one openreg
    device), on its current stream, and passes the kernel the op's arguments
    in order followed by its outputs: tensors as descriptor addresses, ints and
    bools as ``i32``/``i64``, floats as ``f32``/``f64`` (checked against the
    kernel's signature here, once). ``args`` changes that mapping: it receives
    the op's arguments followed by its outputs and returns the kernel's
    argument list (use :class:`ptr` for data addresses, and add sizes or
    scalars as needed). ``kernel`` may also map dtypes to kernels
    (``{torch.float32: module["mm_f32"], torch.float64: module["mm_f64"]}``):
    a call then runs the kernel for the dtype of its first tensor argument,
    and raises ``TypeError`` for a dtype the mapping lacks, as CPU kernels do.
    ``schema`` overrides the schema ``torch.library``
    infers from the type hints (``"(Tensor x, float beta) -> Tensor"``).
    The op has no CPU implementation: on CPU tensors it raises.
    """
    by_dtype = dict(kernel) if isinstance(kernel, Mapping) else None
    for candidate in by_dtype.values() if by_dtype is not None else (kernel,):
        if not isinstance(candidate, Kernel):
            raise TypeError(f"custom_op() takes a Kernel (module['name']), not {type(candidate).__name__}")
    if "::" not in name:
        raise ValueError(f"an operator name has a namespace: 'mylib::{name}', not {name!r}")

    def decorate(outputs: Callable[..., Any]) -> torch.library.CustomOpDef:
        op_schema = schema or torch.library.infer_schema(outputs, mutates_args=mutates_args)
        names, kinds, n_outputs = _schema_kinds(op_schema, name)
        if args is None:
            for candidate in by_dtype.values() if by_dtype is not None else (kernel,):
                _check_signature(name, candidate, names, kinds, n_outputs)
        signature = inspect.signature(outputs)
        first_tensor = kinds.index("tensor") if "tensor" in kinds else None
        if by_dtype is not None and first_tensor is None:
            raise TypeError(f"{name}: kernels by dtype need a tensor argument to take the dtype from")

        def run(*call_args: Any, **call_kwargs: Any) -> Any:
            if call_kwargs or len(call_args) != len(names):
                bound = signature.bind(*call_args, **call_kwargs)
                bound.apply_defaults()
                call_args = tuple(bound.arguments[n] for n in names)
            chosen = kernel
            if by_dtype is not None:
                dtype = call_args[first_tensor].dtype
                chosen = by_dtype.get(dtype)
                if chosen is None:
                    supported = ", ".join(str(d).removeprefix("torch.") for d in by_dtype)
                    raise TypeError(f"{name}: not implemented for {str(dtype).removeprefix('torch.')} (it has kernels for {supported})")
            result = outputs(*call_args)
            if result is None:
                produced: tuple[Any, ...] = ()
            elif isinstance(result, torch.Tensor):
                produced = (result,)
            else:
                produced = tuple(result)
            if len(produced) != n_outputs:
                raise RuntimeError(f"{name}: the output function returned {len(produced)} outputs, the schema says {n_outputs}")
            kernel_args = (*call_args, *produced)
            if args is not None:
                kernel_args = tuple(args(*kernel_args))
            launch(chosen, *kernel_args, op=name)
            return result

        run.__name__ = outputs.__name__
        run.__doc__ = outputs.__doc__
        opdef = torch.library.custom_op(
            name, run, mutates_args=mutates_args, device_types="openreg", schema=op_schema
        )
        opdef.register_fake(outputs)
        return opdef

    return decorate
