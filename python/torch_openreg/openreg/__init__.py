"""``torch.openreg``: the device module of openreg devices, modelled on ``torch.cuda``.

``import torch_openreg`` (or plain ``import torch``, through the ``torch.backends``
entry point) registers this module with ``torch._register_device_module("openreg", ...)``,
so it is reachable as ``torch.openreg`` and through ``torch.get_device_module("openreg")``.

Each openreg device is a WebAssembly sandbox run by the ``openreg_host`` runtime. The
functions here are thin: device management, memory statistics and random number
generators go to the compiled module ``torch_openreg._C`` (which wraps the runtime and
the C++ shim); streams and events are ``torch.Stream`` / ``torch.Event`` objects, which
reach the runtime through the C++ device guard, exactly as ``torch.accelerator`` does.

Wherever a function takes a ``device`` argument it accepts ``None`` (the current device),
an ``int`` index, a string such as ``"openreg:1"`` (``"openreg"`` alone means the current
device) or a ``torch.device``. A device index that does not exist raises ``torch.AcceleratorError``
naming the index and the number of devices.

The number of devices and their memory come from the environment, read once when the
first device is used: ``OPENREG_DEVICE_COUNT`` (default 2) and ``OPENREG_DEVICE_MEMORY``
(default ``4GiB``); see ``host/src/config.rs`` for the full list.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable
from typing import Any, Union

import torch

import torch_openreg._C as _C

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "fallback_policy",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_fallback_policy",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "op_counts",
    "reset_op_counts",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_fallback_policy",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]

_DEVICE_TYPE = "openreg"

Device = Union[int, str, torch.device, None]

# ---- initialization ---------------------------------------------------------------

_initialized = False


def _is_in_bad_fork() -> bool:
    """Return whether this is a forked child of a process that had started openreg devices.

    A device's executor threads do not survive ``fork()``, so such a child cannot use
    openreg: every call that would reach a device raises at once (the runtime tracks
    this, so tensor operations raise too). ``torch.manual_seed`` consults this (with
    :func:`manual_seed_all`) before it seeds the openreg generators, as it does for CUDA.
    """
    return bool(_C._in_bad_fork())


def _lazy_init() -> None:
    """Mark openreg as initialized; torch calls this before it makes the first openreg tensor.

    The runtime starts each device on first use, so there is nothing to set up here.
    It raises ``RuntimeError`` in a forked child of a process that had started openreg
    devices, with the message PyTorch uses for CUDA.
    """
    global _initialized
    if _is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize openreg in forked subprocess. To use openreg with "
            "multiprocessing, you must use the 'spawn' start method"
        )
    _initialized = True


def init() -> None:
    """Initialize openreg (as :func:`torch.cuda.init`). Calling it is never required."""
    _lazy_init()


def is_initialized() -> bool:
    """Return whether openreg has been initialized in this process (and it is usable here).

    openreg initializes on the first openreg tensor, or the first call of this module that
    names a device.
    """
    return _initialized and not _is_in_bad_fork()


# ---- devices --------------------------------------------------------------------


def is_available() -> bool:
    """Return whether at least one openreg device is available.

    False (with a warning) when the ``OPENREG_*`` configuration is broken.
    """
    return device_count() > 0


def device_count() -> int:
    """Return the number of openreg devices (``OPENREG_DEVICE_COUNT``, default 2).

    Never raises: a broken configuration gives 0 and a warning.
    """
    return int(_C.device_count())


def current_device() -> int:
    """Return the index of the calling thread's current openreg device."""
    _lazy_init()
    return int(_C.current_device())


def _check_index(index: int) -> int:
    count = device_count()
    if not 0 <= index < count:
        raise torch.AcceleratorError(f"invalid openreg device index {index}: there are {count} openreg devices")
    return index


def _device_index(device: Device, *, optional: bool = True) -> int:
    """The index of ``device``, checked to exist; ``None`` (if optional) means the current device."""
    _lazy_init()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != _DEVICE_TYPE:
            raise ValueError(f"expected an openreg device, got {device}")
        device = device.index
    if device is None:
        if not optional:
            raise ValueError("expected an openreg device index, got None")
        return current_device()
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"expected an int, str or torch.device naming an openreg device, got {device!r}")
    return _check_index(device)


def set_device(device: Device) -> None:
    """Set the calling thread's current openreg device.

    Args:
        device (torch.device, int or str): the device to select.

    Raises:
        torch.AcceleratorError: the index is not that of an openreg device (negative indices
            included: unlike :func:`torch.cuda.set_device`, -1 is not a silent no-op).
    """
    _C.set_device(_device_index(device, optional=False))


class device:
    """Context manager that makes ``device`` the calling thread's current openreg device.

    Args:
        device (torch.device, int, str or None): the device to select; ``None`` or a
            negative index makes it a no-op (as :class:`torch.cuda.device`).

    Example::

        with torch.openreg.device(1):
            x = torch.ones(3, device="openreg")  # on openreg:1
    """

    def __init__(self, device: Device):
        if device is None or (isinstance(device, int) and not isinstance(device, bool) and device < 0):
            self.idx = -1
        else:
            self.idx = _device_index(device, optional=False)
        self.prev_idx = -1

    def __enter__(self) -> device:
        if self.idx >= 0:
            self.prev_idx = current_device()
            if self.prev_idx != self.idx:
                _C.set_device(self.idx)
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self.idx >= 0 and self.prev_idx != self.idx:
            _C.set_device(self.prev_idx)
        return False


def synchronize(device: Device = None) -> None:
    """Wait for all queued work on every stream of a device to finish.

    Raises the first error that queued work hit (for example a kernel trap, as a
    ``RuntimeError`` naming the kernel and the device); the device stays usable.

    Args:
        device: the device to wait for (default: the current device).
    """
    _C.synchronize(_device_index(device))


@dataclasses.dataclass(frozen=True)
class _OpenRegDeviceProperties:
    """Static facts about one openreg device (what :func:`get_device_properties` returns)."""

    index: int
    name: str
    total_memory: int
    memory64: bool
    kernel_timeout_ms: int
    workers: int


def get_device_properties(device: Device = None) -> _OpenRegDeviceProperties:
    """Return the properties of a device: ``name``, ``total_memory`` (bytes of device memory),
    ``memory64`` (64-bit addressing), ``kernel_timeout_ms`` (the watchdog limit of one
    kernel launch) and ``workers`` (the worker threads that run its large kernels together:
    ``OPENREG_DEVICE_THREADS``, by default ``torch.get_num_threads()``).

    Args:
        device: the device to describe (default: the current device).
    """
    idx = _device_index(device)
    p = _C.device_properties(idx)
    return _OpenRegDeviceProperties(
        index=idx,
        name=str(p["name"]),
        total_memory=int(p["total_memory"]),
        memory64=bool(p["memory64"]),
        kernel_timeout_ms=int(p["kernel_timeout_ms"]),
        workers=int(p["workers"]),
    )


def get_device_name(device: Device = None) -> str:
    """Return the name of a device, for example ``"openreg:0 (wasmtime)"``.

    Args:
        device: the device to name (default: the current device).
    """
    return get_device_properties(device).name


# ---- mixed precision ---------------------------------------------------------------


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("openreg", dtype=...)`` accepts: float16 and bfloat16.

    Autocast on openreg uses CUDA's operator lists and casting policies
    (lower-precision ops, float32 ops, promoting ops); its default dtype is
    float16 (``torch.get_autocast_dtype("openreg")``). ``torch.amp.GradScaler("openreg")``
    scales losses with two device ops, so checking gradients for inf/NaN and
    updating the scale never wait for the device.
    """
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether openreg devices compute in bfloat16: they do (in float32 arithmetic, as CPU does)."""
    return True


# ---- streams and events -----------------------------------------------------------


class Stream(torch.Stream):
    """An ordered queue of work on one openreg device (a ``torch.Stream`` of type openreg).

    Work on one stream runs in order; work on different streams of a device may be
    reordered, and the device's executor picks the ready stream with the highest priority.
    As with CUDA's stream pool, ``Stream()`` hands out one of a small, fixed set of streams
    per device and priority, round-robin, so two ``Stream`` objects may share a queue.

    Args:
        device: the device of the new stream (default: the current device).
        priority: lower numbers are higher priorities. The runtime supports the range
            ``[-2, 0]`` (as CUDA, out-of-range values are clamped to it); default 0.

    ``Stream(stream_id=..., device_index=..., device_type=...)`` wraps an existing stream
    instead of making a new one.
    """

    def __new__(cls, device: Device = None, priority: int = 0, **kwargs: Any) -> Stream:
        if kwargs:
            if device is not None or priority != 0:
                raise TypeError("Stream() takes either a device and a priority, or stream_id/device_index/device_type")
            return super().__new__(cls, **kwargs)
        idx = _device_index(device)
        return super().__new__(cls, device=torch.device(_DEVICE_TYPE, idx), priority=int(priority))

    @property
    def priority(self) -> int:
        """The stream's priority (lower is higher), as the runtime keeps it."""
        stream_priority = getattr(_C, "stream_priority", None)
        if stream_priority is None:
            raise NotImplementedError(
                "Stream.priority needs torch_openreg._C.stream_priority(device, stream_id), "
                "which this build of torch_openreg._C does not have"
            )
        return int(stream_priority(self.device_index, self.stream_id))

    @staticmethod
    def _wrap(stream: torch.Stream) -> Stream:
        if isinstance(stream, Stream):
            return stream
        return Stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)


class _EventMeta(type):
    """Makes ``isinstance(e, torch.openreg.Event)`` true for every openreg ``torch.Event``."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return type.__instancecheck__(torch.Event, obj) and obj.device.type == _DEVICE_TYPE


class Event(torch.Event, metaclass=_EventMeta):
    """A marker in a stream, to wait for or to time work: a ``torch.Event`` of type openreg.

    As with :class:`torch.cuda.Event`, an event belongs to the device of the stream it is
    first recorded on (``record()`` with no stream uses the current stream of the current
    device).

    ``Event(...)`` returns a plain ``torch.Event``, because torch's C++ accepts only exact
    ``torch.Event`` objects where it takes an event (``Stream.wait_event``,
    ``Event.elapsed_time``, ...); ``isinstance(e, torch.openreg.Event)`` holds for every
    ``torch.Event`` of type openreg.

    Args:
        enable_timing: whether :meth:`elapsed_time` can measure time to this event.
        blocking: accepted for ``torch.cuda`` compatibility; it does not change how host
            waits on openreg events work.
        interprocess: not supported: openreg devices belong to one process.
    """

    def __new__(  # type: ignore[misc]
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        if interprocess:
            raise ValueError("openreg events cannot be shared between processes (interprocess=True)")
        _lazy_init()
        return torch.Event(device=_DEVICE_TYPE, enable_timing=enable_timing, blocking=blocking)


def _check_stream(stream: Any) -> None:
    if not isinstance(stream, torch.Stream) or stream.device.type != _DEVICE_TYPE:
        raise ValueError(f"expected an openreg stream, got {stream!r}")


def current_stream(device: Device = None) -> Stream:
    """Return the calling thread's current stream on a device.

    Args:
        device: the device (default: the current device).
    """
    return Stream._wrap(torch.accelerator.current_stream(_device_index(device)))


def default_stream(device: Device = None) -> Stream:
    """Return the default stream of a device: the stream that work uses unless another
    stream is made current.

    Args:
        device: the device (default: the current device).
    """
    idx = _device_index(device)
    # c10 gives every device's default stream id 0; the runtime's default stream is id 0 too.
    current = torch.accelerator.current_stream(idx)
    return Stream(stream_id=0, device_index=idx, device_type=current.device_type)


def set_stream(stream: torch.Stream | None) -> None:
    """Make ``stream`` the calling thread's current stream on its device, and its device the
    current device (as :func:`torch.accelerator.set_stream`). ``None`` is a no-op.

    Prefer the :func:`stream` context manager.
    """
    if stream is None:
        return
    _check_stream(stream)
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes a stream current, and its device current, and restores
    both on exit (as ``torch.cuda.StreamContext``). ``None`` makes it a no-op.
    """

    def __init__(self, stream: torch.Stream | None):
        if stream is not None:
            _check_stream(stream)
        self.stream = stream
        self._prev: torch.Stream | None = None
        self._dst_prev: torch.Stream | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is None:
            return None
        self._prev = torch.accelerator.current_stream(current_device())
        self._dst_prev = None
        if self._prev.device_index != self.stream.device_index:
            self._dst_prev = torch.accelerator.current_stream(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: Any) -> bool:
        if self.stream is None:
            return False
        if self._dst_prev is not None:
            torch.accelerator.set_stream(self._dst_prev)
        assert self._prev is not None
        torch.accelerator.set_stream(self._prev)  # also restores the current device
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    """Return a context manager that runs its body with ``stream`` as the current stream.

    Example::

        s = torch.openreg.Stream()
        with torch.openreg.stream(s):
            y = x * 2  # queued on s
        s.synchronize()
    """
    return StreamContext(stream)


# ---- memory ---------------------------------------------------------------------

# runtime statistic -> torch.cuda.memory_stats key
_STAT_KEYS = {
    "allocated_bytes": "allocated_bytes.all.current",
    "peak_allocated_bytes": "allocated_bytes.all.peak",
    "allocated_bytes_total": "allocated_bytes.all.allocated",
    "freed_bytes_total": "allocated_bytes.all.freed",
    "reserved_bytes": "reserved_bytes.all.current",
    "peak_reserved_bytes": "reserved_bytes.all.peak",
    "active_blocks": "active.all.current",
    "peak_active_blocks": "active.all.peak",
    "segments": "segment.all.current",
    "peak_segments": "segment.all.peak",
    "allocations": "allocation.all.allocated",
    "frees": "allocation.all.freed",
    "cache_flushes": "num_alloc_retries",
    "ooms": "num_ooms",
}


def memory_stats(device: Device = None) -> dict[str, int]:
    """Return the allocator statistics of a device, with ``torch.cuda.memory_stats`` keys.

    ================================ ================================================
    key                              meaning
    ================================ ================================================
    ``allocated_bytes.all.current``  bytes in live tensors (blocks handed out)
    ``allocated_bytes.all.peak``     the highest value of the above since the last
                                     :func:`reset_peak_memory_stats`
    ``reserved_bytes.all.current``   bytes the caching allocator holds (live + cached)
    ``reserved_bytes.all.peak``      the highest value of the above
    ``allocated_bytes.all.allocated`` bytes ever handed out (a running total)
    ``allocated_bytes.all.freed``    bytes ever freed (a running total)
    ``active.all.current``           number of live blocks
    ``active.all.peak``              the highest value of the above
    ``segment.all.current``          number of segments the allocator holds
    ``segment.all.peak``             the highest value of the above
    ``allocation.all.allocated``     number of allocations (a running total)
    ``allocation.all.freed``         number of frees (a running total)
    ``num_alloc_retries``            allocations that had to flush the cache first
    ``num_ooms``                     allocations that failed with out of memory
    ================================ ================================================

    Args:
        device: the device (default: the current device).
    """
    raw = _C.memory_stats(_device_index(device))
    return dict(sorted((key, int(raw[field])) for field, key in _STAT_KEYS.items()))


def memory_allocated(device: Device = None) -> int:
    """Return the bytes of device memory held by live tensors on a device."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Device = None) -> int:
    """Return the peak of :func:`memory_allocated` since start or :func:`reset_peak_memory_stats`."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: Device = None) -> int:
    """Return the bytes of device memory held by the caching allocator (live and cached)."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: Device = None) -> int:
    """Return the peak of :func:`memory_reserved` since start or :func:`reset_peak_memory_stats`."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Device = None) -> None:
    """Set the peak statistics of a device to their current values."""
    _C.reset_peak_memory_stats(_device_index(device))


def reset_accumulated_memory_stats(device: Device = None) -> None:
    """Set a device's running totals to zero: bytes and counts allocated and freed,
    ``num_alloc_retries`` and ``num_ooms`` (as :func:`torch.cuda.reset_accumulated_memory_stats`).
    """
    _C.reset_accumulated_memory_stats(_device_index(device))


def empty_cache(device: Device = None) -> None:
    """Return cached, wholly free memory segments to their device, so that
    :func:`memory_reserved` drops and :func:`mem_get_info` reports more free memory.

    Memory held by live tensors is untouched. Like ``cudaFree``, it first waits for the
    work queued on the device (which may still use freed blocks), and the released
    segments' pages go back to the operating system, so the process's resident memory
    drops too.

    Args:
        device: the device to empty; ``None`` (the default) empties every device, as
            :func:`torch.cuda.empty_cache` does.
    """
    if device is None:
        for idx in range(device_count()):
            _C.empty_cache(idx)
    else:
        _C.empty_cache(_device_index(device))


def mem_get_info(device: Device = None) -> tuple[int, int]:
    """Return ``(free, total)`` bytes of a device's memory; ``free`` excludes what the caching
    allocator holds (:func:`memory_reserved`).
    """
    free, total = _C.mem_get_info(_device_index(device))
    return int(free), int(total)


# ---- random number generators --------------------------------------------------------

_SEED_MASK = (1 << 64) - 1


def _seed_value(seed: Any) -> int:
    seed = int(seed)
    if not -(1 << 63) <= seed <= _SEED_MASK:
        raise ValueError(f"seed {seed} does not fit in 64 bits")
    return seed & _SEED_MASK  # negative seeds wrap, as with torch.manual_seed


def manual_seed(seed: int) -> None:
    """Seed the default generator of the current device.

    Use :func:`manual_seed_all` (or ``torch.manual_seed``, which calls it) to seed every device.
    """
    _C.manual_seed(current_device(), _seed_value(seed))


def manual_seed_all(seed: int) -> None:
    """Seed the default generator of every openreg device with ``seed``."""
    seed = _seed_value(seed)
    for idx in range(device_count()):
        _C.manual_seed(idx, seed)


def seed() -> int:
    """Seed the current device's default generator with a random number, and return it."""
    return int(_C.seed(current_device()))


def seed_all() -> int:
    """Seed every device's default generator with one random number, and return it."""
    value = int(_C.seed(0))
    for idx in range(1, device_count()):
        _C.manual_seed(idx, value)
    return value


def initial_seed() -> int:
    """Return the seed the current device's default generator was last seeded with."""
    return int(_C.initial_seed(current_device()))


def get_rng_state(device: Device = _DEVICE_TYPE) -> torch.Tensor:
    """Return the state of a device's default generator as a CPU ``torch.uint8`` tensor.

    Args:
        device: the device (default ``"openreg"``: the current device).
    """
    state = bytearray(_C.get_rng_state(_device_index(device)))
    if not state:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(state, dtype=torch.uint8)


def get_rng_state_all() -> list[torch.Tensor]:
    """Return the generator states of all devices, in device order."""
    return [get_rng_state(idx) for idx in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: Device = _DEVICE_TYPE) -> None:
    """Restore a device's default generator from a state that :func:`get_rng_state` returned.

    Args:
        new_state (torch.ByteTensor): the state (a ``torch.uint8`` tensor on any device).
        device: the device (default ``"openreg"``: the current device).
    """
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        got = new_state.dtype if isinstance(new_state, torch.Tensor) else type(new_state).__name__
        raise TypeError(f"an RNG state must be a torch.uint8 tensor, got {got}")
    state = bytes(new_state.detach().to("cpu").reshape(-1).tolist())
    _C.set_rng_state(_device_index(device), state)


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Restore the generators of all devices from states in device order."""
    for idx, state in enumerate(new_states):
        set_rng_state(state, idx)


# ---- op accounting -------------------------------------------------------------------


def op_counts() -> dict[str, dict[str, int]]:
    """Return how often each operator ran on openreg tensors, and how.

    The result maps an operator name (as the dispatcher names it, for example
    ``"aten::add.Tensor"``) to ``{"device": n, "fallback": m}``: ``n`` runs handled by
    the backend itself (a WebAssembly kernel on the device, or a native operator: an
    allocation, a view, a copy, which may stage strided data through host memory),
    ``m`` runs through the CPU fallback (inputs copied to the host, the CPU kernel,
    results copied back). Counts are process-wide,
    cover every device and thread, and run from start or the last :func:`reset_op_counts`.

    Example::

        torch.openreg.reset_op_counts()
        torch.ones(4, device="openreg").sin()
        torch.openreg.op_counts()["aten::sin"]  # {"device": 0, "fallback": 1}
    """
    return {op: {"device": int(d), "fallback": int(f)} for op, (d, f) in _C.op_counts().items()}


def reset_op_counts() -> None:
    """Set every count of :func:`op_counts` back to zero."""
    _C.reset_op_counts()


# ---- the CPU fallback's policy ------------------------------------------------------

_FALLBACK_POLICIES = ("allow", "warn", "error")


def get_fallback_policy() -> str:
    """Return what happens to an operator that has no device kernel.

    ``"allow"`` (the default): it runs through the CPU fallback (its tensors are copied to
    the host, computed there by torch's CPU kernel, and copied back). ``"warn"``: the same,
    with one warning per operator. ``"error"``: it raises ``RuntimeError`` naming the
    operator before any data moves, so tensor data is never computed on by the host.
    Copies between host and device are always allowed. The initial policy comes from the
    environment variable ``OPENREG_FALLBACK``.
    """
    return _C.fallback_policy()


def set_fallback_policy(policy: str) -> None:
    """Set the process-wide fallback policy: ``"allow"``, ``"warn"`` or ``"error"``.

    See :func:`get_fallback_policy`. Raises ``ValueError`` for any other value. Setting
    ``"warn"`` again re-arms the warnings.

    Example::

        torch.openreg.set_fallback_policy("error")
        x = torch.ones(4, device="openreg")
        x + 1                      # runs on the device
        torch.fft.fft(x)           # RuntimeError: openreg: aten::fft_r2c has no device kernel ...
    """
    if not isinstance(policy, str):
        raise TypeError(f"a fallback policy is a str ({', '.join(_FALLBACK_POLICIES)}), got {type(policy).__name__}")
    _C.set_fallback_policy(policy)


@contextlib.contextmanager
def fallback_policy(policy: str):
    """Context manager: run a block under a fallback policy, then restore the previous one.

    Example::

        with torch.openreg.fallback_policy("error"):
            loss = model(x).sum()   # raises if any op would leave the device
    """
    previous = get_fallback_policy()
    set_fallback_policy(policy)
    try:
        yield
    finally:
        set_fallback_policy(previous)
