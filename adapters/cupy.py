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

import sys
from typing import Any, Sequence

import numpy as np

from interop import _cache, _dtypes
from interop._description import OUTPUT
from interop._errors import ArgumentError
from interop._launch import external_stream
from interop._op import NOT_EAGER
from interop._plan import ArraySpec

from ._common import EagerFramework, pack_result, unexpected_keywords

_cupy_mod: Any = None


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


def _signature(args: Sequence[Any]) -> tuple | None:
    """What a call's validation depends on when every array is a CuPy ndarray: each array's
    shape, strides, dtype and device, and each number's type; None otherwise (the full path)."""
    cp = _cupy_mod
    if cp is None:
        return None
    nd = cp.ndarray
    key: list[Any] = []
    for a in args:
        t = type(a)
        if t is nd:
            key.append((a.shape, a.strides, a.dtype, a.data.device_id))
        elif t is float or t is int or t is bool:
            key.append(t)
        else:
            return None
    return tuple(key)


class _Fast:
    """One validated CuPy signature of an op: pointers in, outputs allocated, one recorded launch.

    Per call only the pointers, the scalars and CuPy's current stream are read: no interface
    dictionaries, no layout walk (the signature fixed shapes, strides and dtypes)."""

    __slots__ = ("key", "arrays", "scalars", "outs", "order", "template", "go", "device_id", "device", "single")

    def __init__(self, op, key: tuple, plan, values: list, device: str):
        desc = op.description
        params = desc.call_params
        self.key = key
        self.template = list(values)
        self.arrays = []  # (arg index, param index, outer strides)
        self.scalars = []  # (arg index, param index)
        for ai, p in enumerate(params):
            v = values[p.index]
            if isinstance(v, tuple) and (p.is_array or p.name in plan.scalar_refs):
                self.arrays.append((ai, p.index, v[1]))
                self.template[p.index] = None
            else:
                self.scalars.append((ai, p.index))
        self.outs = []  # (param index, shape, dtype, zero)
        self.order = []
        for p, spec, zero in zip(desc.returned_params, plan.out_specs, plan.zero):
            if p.role == OUTPUT:
                self.outs.append((p.index, tuple(spec.shape), np.dtype(spec.dtype), zero))
                self.order.append(("out", len(self.outs) - 1))
            else:
                self.order.append(("arg", params.index(p)))
        self.single = len(self.order) == 1
        self.go = plan.runner.fast_forward(device)
        self.device, self.device_id = device, int(device.split(":")[1])

    def __call__(self, args: Sequence[Any]) -> Any:
        cp = _cupy_mod
        vals = self.template.copy()
        for ai, pi, strides in self.arrays:
            vals[pi] = (args[ai].data.ptr, strides)
        for ai, pi in self.scalars:
            vals[pi] = args[ai]
        made = []
        if self.outs:
            if cp.cuda.runtime.getDevice() == self.device_id:
                for pi, shape, dtype, zero in self.outs:
                    o = cp.zeros(shape, dtype) if zero else cp.empty(shape, dtype)
                    vals[pi] = (o.data.ptr, None)
                    made.append(o)
            else:
                with cp.cuda.Device(self.device_id):
                    for pi, shape, dtype, zero in self.outs:
                        o = cp.zeros(shape, dtype) if zero else cp.empty(shape, dtype)
                        vals[pi] = (o.data.ptr, None)
                        made.append(o)
        # CuPy arrays are ready on CuPy's current stream of their device: the launch runs there
        self.go(vals, external_stream(self.device, cp.cuda.get_current_stream(self.device_id).ptr))
        if self.single:
            kind, k = self.order[0]
            return made[k] if kind == "out" else args[k]
        return tuple(made[k] if kind == "out" else args[k] for kind, k in self.order)


def _make_hook() -> Any:
    """The op's eager hook for CuPy ndarrays (``Op.eager_paths``): ``hook(args)`` runs a call whose
    signature was validated before (its last signature compared first), else returns NOT_EAGER.
    ``hook.fasts``: the remembered signatures' calls, filled by :func:`call` after validation."""
    fasts: dict[tuple, _Fast] = {}
    last: list[Any] = [None]

    def hook(args):
        key = _signature(args)
        fast = last[0]
        if fast is None or fast.key != key:
            fast = fasts.get(key) if key is not None else None
            if fast is None:
                return NOT_EAGER
            last[0] = fast
        return fast(args)

    hook.fasts = fasts  # type: ignore[attr-defined]
    return hook


def on_describe(op) -> None:
    """Called for each op described while CuPy is imported: give it its eager hook."""
    cp = sys.modules.get("cupy")
    if cp is not None and cp.ndarray not in op.eager_paths:
        op.eager_paths[cp.ndarray] = _make_hook()


def call(op, args, launch_dims, output_dims, kwargs):
    """Run ``op`` on CuPy arrays / CUDA Array Interface producers (see :meth:`interop.Op.__call__`).

    After a call with CuPy ndarrays and Python numbers (no ``launch_dims``/``output_dims``)
    passed every check, its signature is remembered: later calls with it take a :class:`_Fast`
    call, through the op's eager hook (ops described while CuPy is imported) or this function."""
    if kwargs:
        raise TypeError(unexpected_keywords(op.description, kwargs))
    key = _signature(args) if launch_dims is None and output_dims is None else None
    if key is not None:
        fast = op._fast.get(("cupy", key))
        if fast is not None:
            return fast(args)
    _cupy(op.description.label)
    try:
        plan, values, returned, device, _ = FRAMEWORK.forward(op, args, launch_dims, output_dims)
    except _NoBfloat16 as e:
        raise ArgumentError(f"op {op.description.label!r}: {e}") from None
    if key is None and launch_dims is None and output_dims is None:
        key = _signature(args)  # CuPy was imported by this call
    if key is not None and returned and plan.desc.kind == "kernel":
        fast = _Fast(op, key, plan, values, device)
        _cache.put(op._fast, ("cupy", key), fast, _cache.FAST_PATHS_PER_OP)
        hook = op.eager_paths.get(_cupy_mod.ndarray)
        if hook is not None and len(hook.fasts) < _cache.FAST_PATHS_PER_OP:
            hook.fasts[key] = fast
    return pack_result(returned)


def bind(op):
    """A callable that runs ``op`` with CuPy arrays (outputs are CuPy arrays even with no array input)."""

    def run(*args, launch_dims=None, output_dims=None):
        return call(op, args, launch_dims, output_dims, {})

    return run
