"""CuPy adapter: CuPy arrays (and any ``__cuda_array_interface__`` producer) in, CuPy arrays out.

Arrays are read zero-copy through the CUDA Array Interface (pointer, shape, typestr,
strides). Outputs are allocated by CuPy on the inputs' device. Every launch runs on
CuPy's current stream of that device; inputs from other producers (Numba, ...) that name a
stream in their interface (CAI v3 ``"stream"``) are ordered before the launch with an event,
as the interface asks of consumers. CuPy has no autograd, so a call is a forward launch only.

CuPy is imported when first needed, so this module loads without it: a CUDA array from
another producer then gets an error that says CuPy is needed for the outputs.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from interop import _dtypes
from interop._errors import ArgumentError
from interop._launch import external_stream
from interop._plan import ArraySpec

from ._common import EagerFramework, pack_result, unexpected_keywords

_cupy_mod = None


def _cupy(label: str | None = None):
    """The ``cupy`` module, imported on first use."""
    global _cupy_mod
    if _cupy_mod is None:
        try:
            import cupy
        except ImportError as e:
            who = f"op {label!r}: " if label else ""
            raise ImportError(
                f"{who}CUDA arrays (__cuda_array_interface__) are handled by the CuPy adapter, which needs CuPy to "
                f"allocate outputs and find the current stream ({e}); install cupy for your CUDA version"
            ) from e
        _cupy_mod = cupy
    return _cupy_mod


def _cai(x) -> dict:
    return x.__cuda_array_interface__


def _is_cupy_array(x) -> bool:
    return type(x).__module__.split(".", 1)[0] == "cupy"


class _CuPy(EagerFramework):
    name = "cupy"

    def is_array(self, x: Any) -> bool:
        return hasattr(x, "__cuda_array_interface__")

    def spec(self, x) -> ArraySpec:
        cai = _cai(x)
        return ArraySpec(tuple(cai["shape"]), np.dtype(cai["typestr"]))

    def layout(self, x):
        cai = _cai(x)
        itemsize = np.dtype(cai["typestr"]).itemsize
        strides = cai.get("strides")
        if strides is None:  # C-contiguous
            acc, out = itemsize, []
            for s in reversed(cai["shape"]):
                out.append(acc)
                acc *= max(int(s), 1)
            strides = tuple(reversed(out))
        return int(cai["data"][0] or 0), tuple(strides), itemsize

    def writable(self, x) -> bool:
        return not _cai(x)["data"][1]

    def device(self, x) -> str:
        if _is_cupy_array(x):
            return f"cuda:{x.device.id}"
        ptr = int(_cai(x)["data"][0] or 0)
        if ptr == 0:
            return f"cuda:{_cupy().cuda.runtime.getDevice()}"
        attrs = _cupy().cuda.runtime.pointerGetAttributes(ptr)
        return f"cuda:{attrs.device}"

    def default_device(self) -> str:
        return f"cuda:{_cupy().cuda.runtime.getDevice()}"

    def alloc(self, spec: ArraySpec, device: str, zero: bool, elem: Any = None):
        if np.dtype(spec.dtype) == _dtypes.BFLOAT16:
            raise _NoBfloat16(
                "an output of dtype bfloat16 cannot be a CuPy array (CuPy has no bfloat16 dtype); call the op "
                "with PyTorch, JAX or Paddle arrays"
            )
        cp = _cupy()
        with cp.cuda.Device(int(device.split(":")[1])):
            return cp.zeros(spec.shape, spec.dtype) if zero else cp.empty(spec.shape, spec.dtype)

    def stream(self, device: str, arrays: Sequence[Any]) -> Any:
        cp = _cupy()
        # everything on the arrays' device, whichever device is CuPy's current one: the event must
        # be created on the device of the stream that records it, and the CAI v3 names 1 and 2
        # (legacy / per-thread default stream) mean that device's default streams
        with cp.cuda.Device(int(device.split(":")[1])):
            current = cp.cuda.get_current_stream()
            # CAI v3: a producer names the stream its data is ready on (1: legacy default, 2: per-thread
            # default, else a handle; None: no order needed). Order the launch after it.
            for a in arrays:
                if _is_cupy_array(a):
                    continue  # CuPy arrays are ready on CuPy's current stream
                producer = _cai(a).get("stream")
                if producer is None or int(producer) == int(current.ptr):
                    continue
                ev = cp.cuda.Event(block=False, disable_timing=True)
                ev.record(cp.cuda.ExternalStream(int(producer)))
                current.wait_event(ev)
        return external_stream(device, int(current.ptr))


FRAMEWORK = _CuPy()


class _NoBfloat16(ArgumentError):
    pass


def call(op, args, launch_dims, output_dims, kwargs):
    """Run ``op`` on CuPy arrays / CUDA Array Interface producers (see :meth:`interop.Op.__call__`)."""
    if kwargs:
        raise TypeError(unexpected_keywords(op.description, kwargs))
    _cupy(op.description.label)
    try:
        _, _, returned, _, _ = FRAMEWORK.forward(op, args, launch_dims, output_dims)
    except _NoBfloat16 as e:
        raise ArgumentError(f"op {op.description.label!r}: {e}") from None
    return pack_result(returned)


def bind(op):
    """A callable that runs ``op`` with CuPy arrays (outputs are CuPy arrays even with no array input)."""

    def run(*args, launch_dims=None, output_dims=None):
        return call(op, args, launch_dims, output_dims, {})

    return run
