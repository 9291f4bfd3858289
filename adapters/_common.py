"""What every eager adapter shares: turning one framework's arrays into a plan and a launch, and
:func:`after_import` (framework machinery set up only once the framework imports it).

An adapter subclasses :class:`EagerFramework` and says, for its array type, how to
read shape/dtype, pointer/strides and device, how to allocate an output, and which
stream to launch on. :meth:`EagerFramework.forward` does the rest.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import numbers
import sys
import threading
from typing import Any, Callable, Sequence

import numpy as np

from interop import _cache, _dtypes
from interop._description import IN_OUT, INPUT, OUTPUT, Param
from interop._errors import ArgumentError
from interop._launch import contiguous_strides
from interop._op import _freeze
from interop._plan import ArraySpec, CallPlan, Footprint, ScalarSpec, check_layout, footprint, refuse_overlaps
from interop._warp_compat import type_size_in_bytes


class EagerFramework:
    """Base of eager adapters (NumPy, Warp, PyTorch, Paddle, CuPy)."""

    name = "?"

    # ---- to implement -------------------------------------------------------------
    def is_array(self, x: Any) -> bool:
        raise NotImplementedError

    def spec(self, x: Any) -> ArraySpec:
        raise NotImplementedError

    def layout(self, x: Any) -> tuple[int, tuple[int, ...], int]:
        """(data pointer, byte strides of every dim, item size in bytes)."""
        raise NotImplementedError

    def device(self, x: Any) -> str:
        """Warp device name of array ``x`` (``"cpu"``, ``"cuda:0"``)."""
        raise NotImplementedError

    def alloc(self, spec: ArraySpec, device: str, zero: bool, elem: Any = None) -> Any:
        """A new array for an output: ``spec`` is its framework shape/dtype, ``elem`` its Warp element type."""
        raise NotImplementedError

    def stream(self, device: str, arrays: Sequence[Any]) -> Any:
        """Warp stream to launch on (CUDA), or None."""
        return None

    def writable(self, x: Any) -> bool:
        return True

    def default_device(self) -> str:
        return "cpu"

    # ---- shared ---------------------------------------------------------------------
    def scalar_spec(self, op, p: Param, x: Any) -> tuple[Any, Any]:
        """(spec, value) of a scalar argument; arrays of this framework become references."""
        if self.is_array(x):
            return self.spec(x), "ref"
        if isinstance(x, bool):
            return ScalarSpec("py", bool), x
        if isinstance(x, numbers.Integral):
            return ScalarSpec("py", np.dtype(x.dtype) if isinstance(x, np.generic) else int), x
        if isinstance(x, numbers.Real) or (isinstance(x, np.generic) and x.dtype == _dtypes.BFLOAT16):
            return ScalarSpec("py", np.dtype(x.dtype) if isinstance(x, np.generic) else float), x
        if p.inner and isinstance(x, (tuple, list)) or hasattr(x, "_wp_scalar_type_"):
            return ScalarSpec("py", tuple), x
        raise ArgumentError(
            f"op {op.description.label!r}, parameter {p.name!r}: expected {p.expected_text()} (a number), got {type(x).__name__}"
        )

    def forward(
        self,
        op,
        args: Sequence[Any],
        launch_dims: Any,
        output_dims: Any,
    ) -> tuple[CallPlan, list, list, str, Any]:
        """Validate, plan, allocate outputs and launch.

        Returns:
            (plan, values, returned arrays, device, stream); ``values`` are the per-parameter
            launch values (pointer/strides or scalars), usable again for the adjoint.
        """
        desc = op.description
        params = desc.call_params
        if len(args) != len(params):
            raise ArgumentError(
                f"op {op.description.label!r} takes {len(params)} argument(s) {[p.name for p in params]} "
                f"(outputs are returned, not passed), got {len(args)}"
            )
        specs = []
        device = None
        dev_param = None
        arrays = []
        for p, x in zip(params, args):
            if p.is_array:
                if not self.is_array(x):
                    raise ArgumentError(
                        f"op {op.description.label!r}, parameter {p.name!r}: expected {p.expected_text()}, got "
                        f"{type(x).__name__}"
                    )
                self.refuse(op, p, x)
                specs.append(self.spec(x))
                arrays.append(x)
                d = self.device(x)
            else:
                spec, _ = self.scalar_spec(op, p, x)
                specs.append(spec)
                d = self.device(x) if self.is_array(x) else None
            if d is not None:
                if device is None:
                    device, dev_param = d, p.name
                elif d != device:
                    raise ArgumentError(
                        f"op {op.description.label!r}: parameter {dev_param!r} is on {device} but parameter {p.name!r} "
                        f"is on {d}; move them to one device"
                    )
        if device is None:
            device = self.default_device()
        plan = op.plan(specs, launch_dims, output_dims)
        values: list[Any] = [None] * len(desc.params)
        regions = []  # (parameter, pointer, byte span) of each array argument: see refuse_overlaps
        for p, x in zip(params, args):
            if p.is_array or self.is_array(x):
                ptr, strides, itemsize = self.layout(x)
                shape = self.spec(x).shape
                outer = check_layout(desc, p, shape, strides, itemsize, written=p.role != INPUT)
                values[p.index] = (ptr, outer if p.is_array else None)
                regions.append((p, ptr, footprint(shape, strides, itemsize)))
                if p.role != INPUT and not self.writable(x):
                    raise ArgumentError(
                        f"op {op.description.label!r}, parameter {p.name!r}: the in-out array is read-only; pass a writable array"
                    )
            else:
                values[p.index] = x
        if desc.has_in_out:
            refuse_overlaps(desc, regions)
        returned = []
        it = iter(zip(plan.out_specs, plan.zero))
        for p in desc.returned_params:
            spec, zero = next(it)
            if p.role == OUTPUT:
                out = self.alloc(spec, device, zero, plan.types[p.index])
                ptr, strides, itemsize = self.layout(out)
                values[p.index] = (ptr, None)
                returned.append(out)
            else:
                returned.append(args[params.index(p)])
        stream = self.stream(device, arrays)
        plan.runner.forward(device, values, stream)
        return plan, values, returned, device, stream

    def cache_fast(self, args: Sequence[Any]) -> bool:
        """Whether a validated call with these arguments may be replayed by its fast-path key (asked
        on the full path only, after the call)."""
        return True

    def refuse(self, op, p: Param, x: Any) -> None:
        """Raise :class:`ArgumentError` for an array of this framework that a kernel must not be
        given (checked before its shape and dtype)."""

    def fast_key(self, args: Sequence[Any]) -> tuple | None:
        """A hashable signature of ``args`` (shapes, dtypes, strides, scalar types) under which a
        call can skip validation and planning, or None to always take the full path."""
        return None

    def ptr(self, x: Any) -> int:
        return self.layout(x)[0]

    def call(self, op, args, launch_dims, output_dims, kwargs):
        if kwargs:
            raise ArgumentError(unexpected_keywords(op.description, kwargs))
        key = self.fast_key(args)
        if key is not None:
            key = (self.name, key, _freeze(launch_dims), _freeze(output_dims))
            fast = op._fast.get(key)
            if fast is not None:
                return fast(args)
        plan, values, returned, device, stream = self.forward(op, args, launch_dims, output_dims)
        if key is not None and self.cache_fast(args):
            _cache.put(op._fast, key, self._make_fast(op, plan, values, device), _cache.FAST_PATHS_PER_OP)
        return returned[0] if len(returned) == 1 else tuple(returned)

    def call_with_plan(self, op, args, launch_dims, output_dims) -> tuple[list, CallPlan, str]:
        """Like :meth:`call` (same per-signature cache), returning (returned arrays, plan, device):
        for adapters that record an autograd node around the launch."""
        key = self.fast_key(args)
        if key is not None:
            key = (self.name, key, _freeze(launch_dims), _freeze(output_dims))
            fast = op._fast.get(key)
            if fast is not None:
                return fast(args, True), fast.plan, fast.device
        plan, values, returned, device, _ = self.forward(op, args, launch_dims, output_dims)
        if key is not None and self.cache_fast(args):
            _cache.put(op._fast, key, self._make_fast(op, plan, values, device), _cache.FAST_PATHS_PER_OP)
        return returned, plan, device

    def _make_fast(self, op, plan: CallPlan, values: list, device: str):
        """A call for arguments with the signature just validated: pointers in, outputs allocated, launch."""
        desc = op.description
        params = desc.call_params
        template = list(values)
        arrays = []  # (arg index, param index, in-out, outer strides)
        scalars = []  # (arg index, param index)
        for ai, p in enumerate(params):
            v = values[p.index]
            if isinstance(v, tuple) and (p.is_array or p.name in plan.scalar_refs):
                arrays.append((ai, p.index, p.role != INPUT, v[1]))
                template[p.index] = None
            else:
                scalars.append((ai, p.index))
        outs = []
        order = []  # returned values: ("arg", i) or ("out", k)
        it = iter(zip(plan.out_specs, plan.zero))
        for p in desc.returned_params:
            spec, zero = next(it)
            if p.role == OUTPUT:
                outs.append((p.index, spec, plan.types[p.index], zero))
                order.append(("out", len(outs) - 1))
            else:
                order.append(("arg", params.index(p)))
        go = plan.runner.fast_forward(device)
        ptr, alloc, writable, stream_of = self.ptr, self.alloc, self.writable, self.stream
        # (parameter, position in vals, byte span) of each array argument, where one is written in
        # place: its memory checked against the others' on each call (refuse_overlaps)
        spans = None
        if desc.has_in_out:
            spans = [(desc.params[pi], pi, _span_of(plan, pi, strides)) for _, pi, _, strides in arrays]
        label = desc.label
        names = {p.index: p.name for p in desc.params}
        single = len(order) == 1

        def fast(args, as_list=False):
            vals = template.copy()
            for ai, pi, inout, strides in arrays:
                x = args[ai]
                if inout and not writable(x):
                    raise ArgumentError(
                        f"op {label!r}, parameter {names[pi]!r}: the in-out array is read-only; pass a writable array"
                    )
                vals[pi] = (ptr(x), strides)
            for ai, pi in scalars:
                vals[pi] = args[ai]
            if spans is not None:
                refuse_overlaps(desc, [(p, vals[pi][0], span) for p, pi, span in spans])
            made = []
            for pi, spec, elem, zero in outs:
                o = alloc(spec, device, zero, elem)
                vals[pi] = (ptr(o), None)
                made.append(o)
            go(vals, stream_of(device, args))
            if as_list:
                return [made[k] if kind == "out" else args[k] for kind, k in order]
            if single:
                kind, k = order[0]
                return made[k] if kind == "out" else args[k]
            return tuple(made[k] if kind == "out" else args[k] for kind, k in order)

        fast.plan, fast.device = plan, device
        return fast


def _span_of(plan: CallPlan, i: int, outer: Any) -> Footprint:
    """The byte span of parameter ``i``'s array in calls with this plan and outer byte strides
    (None: packed)."""
    shape = tuple(plan.warp_shapes[i]) if plan.warp_shapes[i] is not None else ()
    itemsize = type_size_in_bytes(plan.types[i])
    if outer is None:
        outer = contiguous_strides(shape, itemsize)
    return footprint(shape, outer, itemsize)


def pack_result(returned: Sequence[Any]) -> Any:
    return returned[0] if len(returned) == 1 else tuple(returned)


def unexpected_keywords(desc, kwargs, options: tuple[str, ...] = ()) -> str:
    """The message for keyword arguments an op does not take: lists the names it does take."""
    names = [p.name for p in desc.call_params]
    extra = ", ".join(f"{o}=" for o in ("launch_dims", "output_dims", "framework", *options))
    return (
        f"op {desc.label!r}: unexpected keyword argument(s) {sorted(kwargs)}; its parameters are "
        f"{names} (and the options {extra})"
    )


# ---------------------------------------------------------------------------------------
# framework machinery set up when the framework imports it, never by a plain eager call
# (DESIGN.md: pay only for what is used): torch's Dynamo markers and DTensor strategies,
# Paddle's SOT break-graph functions
# ---------------------------------------------------------------------------------------
_after_lock = threading.RLock()
_after: dict[str, list] = {}  # module name -> callbacks waiting for its import


def after_import(module: str, callback: Callable[[], Any]) -> None:
    """Run ``callback()`` once ``module`` is imported: now if it already is, else right after its
    import finishes (a one-shot import hook, before the importer gets the module)."""
    with _after_lock:
        if module not in sys.modules:
            waiting = _after.get(module)
            if waiting is None:
                _after[module] = [callback]
                sys.meta_path.insert(0, _AfterImport(module))
            else:
                waiting.append(callback)
            return
    callback()


def _run_after(module: str) -> None:
    with _after_lock:
        callbacks = _after.pop(module, [])
    for cb in callbacks:
        try:
            cb()
        except Exception:  # never break the user's import; what needed the callback then fails visibly
            pass


class _AfterImport(importlib.abc.MetaPathFinder):
    """One-shot: runs the callbacks waiting for ``module`` right after it is imported."""

    def __init__(self, module: str):
        self.module = module

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.module:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            return None
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # pragma: no cover - not a file on the path: the callbacks wait (torch's are files)
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _run_after(fullname)

        spec.loader.exec_module = exec_module
        return spec


# ---- autocast ----------------------------------------------------------------------------
def autocast_dtype(p: Any) -> np.dtype | None:
    """The dtype a half-precision (float16/bfloat16) array passed for parameter ``p`` takes under a
    framework's autocast (``torch.autocast``, ``paddle.amp.auto_cast``), where an op is one of the
    framework's float32-policy operators: a float32/float64 parameter's own dtype, float32 for a
    generic one; None (never cast) for integer, float16 and in-out parameters."""
    if p.role == IN_OUT:
        return None
    if p.generic:
        return np.dtype(np.float32)
    if not _dtypes.is_float(p.scalar):
        return None
    dt = _dtypes.np_dtype(p.scalar)
    return dt if dt in (np.dtype(np.float32), np.dtype(np.float64)) else None


def keep_tape(runner, device, env: dict[str, Any], fwd: list[str], adj: list[str]) -> tuple[list[str], list[str]]:
    """The generated bodies of a Python-function op's autograd node (torch ``autograd.Function``,
    Paddle ``PyLayer``), rewritten so that its forward records its launches on a ``wp.Tape``
    kept on ``ctx`` (``Runner.record_forward``) and its backward runs that tape
    (``Runner.kept_backward``), which releases it: no replay of the function (issue 49). The
    framework's node holds the tape (stateless here); freed with the node if no backward runs.
    A function op's bodies launch only through the shared launchers ``go`` / ``go_adj`` (no
    direct launch records)."""

    def rec(values, adj, stream):
        return runner.record_forward(device, values, stream)

    def kept_adj(ctx, values, adj, stream):
        kept, ctx.kept = ctx.kept, None
        runner.kept_backward(kept, device, values, adj, stream)

    env.update(rec=rec, kept_adj=kept_adj)
    fwd = [ln.replace("go([", "ctx.kept = rec([", 1) if ln.lstrip().startswith("go([") else ln for ln in fwd]
    adj = [ln.replace("go_adj([", "kept_adj(ctx, [", 1) for ln in adj]
    if not any("rec([" in ln for ln in fwd) or not any("kept_adj(ctx" in ln for ln in adj):  # pragma: no cover
        raise RuntimeError("interop: a Python-function op's eager bodies have no shared launcher call")
    return fwd, adj
