"""PyTorch adapter: every op is a registered ``torch.library.custom_op``.

Calling an :class:`interop.Op` with torch tensors goes through a real custom operator,
``torch.ops.<namespace>.<name>`` (the name is ``op.name``, ``"namespace::name"``), so
``torch.compile``, autograd, ``torch.func`` and ``torch.library.opcheck`` treat it as a
first-class operator:

- **Registration** happens when an op is described while torch is imported (the core
  calls :func:`on_describe`), else on the first call. A registration first reached while
  Dynamo traces runs at trace time (``torch.compiler.assume_constant_result``), so it never
  breaks the graph.
- **Schema.** Arrays are ``Tensor``; scalars are ``float``/``SymInt``/``bool``/``Scalar``
  (lists for vec/mat values), or ``Tensor`` when passed as a 0-d tensor: there is one
  operator per "which scalars are tensors" signature, ``<name>__t_<scalar names>``.
  Per-call ``launch_dims`` and ``output_dims`` travel as ``SymInt[]?`` arguments
  (``launch_dims``, ``output_dims_<output name>``).
- **In-out parameters** are ``mutates_args`` of the operator, updated in place and returned
  as the same tensor objects. PyTorch cannot attach a backward to a mutating operator, so
  when a gradient is needed the call runs the functional twin ``<name>_functional`` (the
  in-out values come back as new tensors) and copies them into the caller's tensors with
  ``Tensor.copy_``, which autograd records.
- **Autograd** (``register_autograd``): the backward is itself a custom operator,
  ``<name>_backward``, that runs Warp's adjoint (or a ``wp.Tape`` replay for Python-function
  ops) on saved tensors, with gradient buffers allocated by torch, only for the inputs that
  need them. An op described with ``backward=`` calls its hand-written backward op instead,
  which is differentiable in turn (second order). Warp's generated adjoint is not: a second
  derivative through it raises an error naming the op.
- **vmap** (``register_vmap``): a loop over the batch, correct for every kernel.
- **Speed**: each operator caches, per input signature (shapes, strides, dtypes, device),
  the validated plan, the launch record and the forward/adjoint implementation written out
  for that signature (``adapters/_torch_eager.py``), so a repeated call only reads pointers.
- **Eager fast path.** A call that nothing traces or intercepts (every tensor a plain
  ``torch.Tensor``, not compiling, no torch.func transform, no TorchDispatchMode or
  TorchFunctionMode, not ``torch.jit.trace``: ``_torch_compat.plain_eager``) skips the
  dispatcher: it runs the operator's own implementation directly and, when a gradient is
  needed, through a cached ``torch.autograd.Function`` whose backward calls the backward
  operator's implementation. Once a signature has been validated, later calls with it are
  found by ``interop.Op.eager_paths`` before any other work. Everything else calls the
  registered operator. The profiler still sees the operator's name (a ``record_function``
  label, paid only while a profiler records).
"""

from __future__ import annotations

import collections
import numbers
import threading
import weakref
from typing import Any, Sequence

import numpy as np
import torch

from interop import _cache, _dtypes
from interop._description import IN_OUT, OpDescription, Param
from interop._errors import ArgumentError, UnsupportedError
from interop._launch import contiguous_strides, external_stream, get_device
from interop._op import NOT_EAGER
from interop._plan import ArraySpec, ScalarSpec, check_layout, vector_components
from interop._warp_compat import type_size_in_bytes

from ._common import EagerFramework, pack_result, unexpected_keywords
from ._torch_compat import (
    PLAIN_TENSOR_TYPES,
    eager_context,
    forward_ad_active,
    function_apply,
    functorch_transforms_active,
    plain_eager,
    profiler_enabled,
    profiler_enabled_c,
    unregister,
)
from ._torch_eager import entry_functions, signature_function

__all__ = ["bind", "call", "on_describe", "operators"]

# ---------------------------------------------------------------------------------------
# dtypes and the EagerFramework view of tensors
# ---------------------------------------------------------------------------------------
_NP_TO_TORCH: dict[np.dtype, torch.dtype] = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    _dtypes.BFLOAT16: torch.bfloat16,  # NumPy's stand-in: ml_dtypes.bfloat16
}
for _np_name, _t_name in (("uint16", "uint16"), ("uint32", "uint32"), ("uint64", "uint64")):
    if hasattr(torch, _t_name):
        _NP_TO_TORCH[np.dtype(_np_name)] = getattr(torch, _t_name)
_TORCH_TO_NP: dict[torch.dtype, np.dtype] = {v: k for k, v in _NP_TO_TORCH.items()}


def _np_dtype(desc: OpDescription, p: Param, t: torch.Tensor) -> np.dtype:
    dt = _TORCH_TO_NP.get(t.dtype)
    if dt is None:
        raise ArgumentError(
            f"op {desc.label!r}, parameter {p.name!r}: expected {p.expected_text()}, got a tensor of dtype "
            f"{t.dtype}, which Warp has no type for; convert it first"
        )
    return dt


class _Torch(EagerFramework):
    name = "torch"

    def is_array(self, x: Any) -> bool:
        return isinstance(x, torch.Tensor)

    def spec(self, x: torch.Tensor) -> ArraySpec:
        dt = _TORCH_TO_NP.get(x.dtype)
        if dt is None:
            raise ArgumentError(f"tensor dtype {x.dtype} has no Warp equivalent")
        return ArraySpec(tuple(x.shape), dt)

    def layout(self, x: torch.Tensor):
        isz = x.element_size()
        return x.data_ptr(), tuple(s * isz for s in x.stride()), isz

    def device(self, x: torch.Tensor) -> str:
        return _warp_device_name(x.device)

    def alloc(self, spec: ArraySpec, device: str, zero: bool, elem: Any = None) -> torch.Tensor:
        fn = torch.zeros if zero else torch.empty
        return fn(spec.shape, dtype=_NP_TO_TORCH[np.dtype(spec.dtype)], device=_torch_device(device))

    def stream(self, device: str, arrays) -> Any:
        return _current_stream(torch.device(device))


FRAMEWORK = _Torch()


def _warp_device_name(d: torch.device) -> str:
    if d.type == "cuda":
        return f"cuda:{d.index if d.index is not None else torch.cuda.current_device()}"
    return d.type


def _torch_device(name: str) -> torch.device:
    return torch.device(name)


def _current_stream(dev: torch.device) -> Any:
    """Warp stream wrapping torch's current CUDA stream on ``dev`` (None on the CPU)."""
    if dev.type != "cuda":
        return None
    ts = torch.cuda.current_stream(dev)
    return external_stream(f"cuda:{ts.device.index}", ts.cuda_stream, ts)


# ---------------------------------------------------------------------------------------
# schema
# ---------------------------------------------------------------------------------------
def _scalar_schema_type(p: Param) -> str:
    scalar = p.scalar
    if p.generic or _dtypes.is_generic(scalar):
        base = "Scalar"
    elif scalar is _dtypes.normalize(bool):
        base = "bool"
    elif _dtypes.is_float(scalar):
        base = "float"
    else:
        base = "SymInt"
    return f"{base}[]" if p.inner else base


def _flatten(v: Any) -> list:
    """A vec/mat value (Warp value, tuple, nested list, array) as a flat list of numbers."""
    out: list = []

    def rec(x):
        if isinstance(x, (int, float, bool)):
            out.append(x)
            return
        try:
            items = list(x)
        except TypeError:
            out.append(x)
            return
        for y in items:
            rec(y)

    rec(v)
    return out


# ---------------------------------------------------------------------------------------
# symbolic-safe shapes (fake tensors, autograd formulas): never int() a size
# ---------------------------------------------------------------------------------------
def _sym_dims(value: Any, what: str, label: str) -> list | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ArgumentError(f"op {label!r}: {what} must be an int or a tuple of ints, got bool")
    if isinstance(value, (int, torch.SymInt)):
        return [value]
    if isinstance(value, (tuple, list, torch.Size)):
        dims = list(value)
        if not dims or len(dims) > 4:
            raise ArgumentError(f"op {label!r}: {what} must have 1 to 4 dimensions, got {tuple(dims)}")
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, (int, torch.SymInt)):
                raise ArgumentError(f"op {label!r}: {what} must be an int or a tuple of ints, got {value!r}")
        return dims
    raise ArgumentError(f"op {label!r}: {what} must be an int or a tuple of ints, got {type(value).__name__} {value!r}")


# ---------------------------------------------------------------------------------------
# one cached, validated call signature
# ---------------------------------------------------------------------------------------
class _Entry:
    """What a call with one input signature needs: validated once, reused for every call."""

    __slots__ = (
        "plan",
        "wdev",
        "tdev",
        "arrays",
        "scalars",
        "outs",
        "cuda",
        "runner",
        "contiguous_outer",
        "forward",
        "adjoint",
        "like",
        "contiguous_args",
    )

    def launcher(self, adjoint: bool):
        """The plan's recorded launch, ``go(values, adj, stream)`` (built once per plan and device)."""
        return self.runner.launcher(self.wdev, adjoint)


class _Binding:
    """The torch operators of one op (all scalar-signature variants), created once per op."""

    eager_calls = 0  # calls that took the eager fast path (tests read it to tell the paths apart)

    def __init__(self, op):
        desc: OpDescription = op.description
        # weakly: the registered operators' implementations hold this binding, and an op the user
        # drops must be freed, its operators with it (see _release_dropped)
        self._op = weakref.ref(op)
        self.desc = desc
        self.label = desc.label
        ns, name = desc.name.split("::")
        self.ns, self.base = ns, name
        self.call_params = desc.call_params
        self.ncall = len(self.call_params)
        self.returned = desc.returned_params
        self.outputs = desc.output_params
        self.inout_pos = tuple(i for i, p in enumerate(self.call_params) if p.role == IN_OUT)
        self.array_pos = tuple(i for i, p in enumerate(self.call_params) if p.is_array)
        self.scalar_pos = tuple(i for i, p in enumerate(self.call_params) if not p.is_array)
        self.first_array = self.array_pos[0] if self.array_pos else None
        self.base_mask = (False,) * len(self.scalar_pos)
        self.quals: dict[tuple, str] = {}
        self.functions: dict[tuple, Any] = {}
        self.variants: dict[tuple, dict[str, Any]] = {}
        self.entries: dict[tuple, _Entry] = {}
        self.lock = threading.RLock()
        # the adjoint may accumulate into the upstream gradient of an array the kernel reads (and a
        # wp.Tape replay writes into the output gradients it is given): such gradients are copied
        self.clone_grads = tuple(desc.kind == "function" or p.name in desc.reads_returned for p in self.returned)
        self.differentiable = tuple(p.differentiable for p in self.call_params)
        self.eager_runs: dict[tuple, _Signature] = {}  # remembered plain-eager signatures
        self.backward_op = None
        if desc.backward is not None:
            self.backward_op = _op_for(desc.backward)

    @property
    def op(self):
        """The op (it lives while its registered operators are used: they run only with it)."""
        op = self._op()
        if op is None:
            raise RuntimeError(
                f"op {self.label!r} was dropped (no reference to it is left), and with it its PyTorch "
                "operators; keep the op alive while its operators are used"
            )
        return op

    def helpers(self) -> dict[str, Any]:
        """What the generated autograd.Function of a remembered signature calls besides its entry."""
        h = self.__dict__.get("_helpers")
        if h is None:
            mask = self.base_mask
            qual = self.qualname(mask, "backward")
            dims = (None,) * (1 + len(self.outputs))

            def slow(args, results, grads, need):
                # the backward operator, as the operator's own autograd rule calls it
                if qual not in _OVERLOADS:
                    raise RuntimeError(
                        f"op {self.label!r}: this backward (create_graph=True, or a traced backward) needs "
                        "the op's backward operator, which was unregistered when the op was dropped; keep "
                        "the op alive until the backward"
                    )
                if functorch_transforms_active() and torch.is_grad_enabled():
                    return _backward_function_class(self, mask, qual).apply(*args, *results, *grads, *dims, need)
                return _OVERLOADS[qual](*args, *results, *grads, *dims, need)

            h = self._helpers = {
                "slow": slow,
                "qual": qual,
                "grad_enabled": torch.is_grad_enabled,
                "PLAIN": PLAIN_TENSOR_TYPES,
                "eager": eager_context,
                "profiling": profiler_enabled_c(),
                "pointer": _pointer,
                "label": torch.autograd.profiler.record_function,
                "stream_of": _current_stream,
                "function_apply": function_apply,
            }
        return h

    # ---- names and schemas --------------------------------------------------------
    def qualname(self, mask: tuple, kind: str) -> str:
        name = self.base
        if any(mask):
            name += "__t_" + "_".join(self.call_params[pos].name for pos, m in zip(self.scalar_pos, mask) if m)
        if kind != "primary":
            name += "_" + kind
        return f"{self.ns}::{name}"

    def primary_kind(self) -> str:
        return "mutable" if self.inout_pos else "functional"

    def _arg_schema(self, mask: tuple, mutable: bool) -> list[str]:
        tmask = dict(zip(self.scalar_pos, mask))
        parts = []
        alias = iter("abcdefghijklmnopqrstuvwxyz")
        for i, p in enumerate(self.call_params):
            if p.is_array:
                if mutable and p.role == IN_OUT:
                    parts.append(f"Tensor({next(alias)}!) {p.name}")
                else:
                    parts.append(f"Tensor {p.name}")
            elif tmask[i]:
                parts.append(f"Tensor {p.name}")
            else:
                parts.append(f"{_scalar_schema_type(p)} {p.name}")
        return parts

    def _dims_schema(self, default: bool = True) -> list[str]:
        d = "=None" if default else ""
        return [f"SymInt[]? launch_dims{d}"] + [f"SymInt[]? output_dims_{p.name}{d}" for p in self.outputs]

    def schema(self, mask: tuple, kind: str) -> str:
        if kind == "backward":
            args = self._arg_schema(mask, False)
            args += [f"Tensor result_{p.name}" for p in self.returned]
            args += [f"Tensor grad_{p.name}" for p in self.returned]
            args += self._dims_schema(default=False) + ["bool[] needs"]
            return f"({', '.join(args)}) -> Tensor[]"
        mutable = kind == "mutable"
        args = self._arg_schema(mask, mutable) + self._dims_schema()
        rets = self.outputs if mutable else self.returned
        if len(rets) == 1:
            ret = "Tensor"
        else:
            ret = "(" + ", ".join("Tensor" for _ in rets) + ")"
        return f"({', '.join(args)}) -> {ret}"

    # ---- registration -----------------------------------------------------------------
    def variant(self, mask: tuple) -> dict[str, Any]:
        v = self.variants.get(mask)
        if v is None:
            with self.lock:
                v = self.variants.get(mask)
                if v is None:
                    v = self._register(mask)
                    self.variants[mask] = v
        return v

    def _register(self, mask: tuple) -> dict[str, Any]:
        if self.backward_op is not None:
            # the hand-written backward's operator exists whenever the forward's does: a compiled
            # backward loaded from torch.compile's caches calls it without tracing (and so without
            # the lazy registration a trace would do)
            _resolve(self.backward_op, None, "functional")
        kinds = ["functional"]
        if self.inout_pos:
            kinds.append("mutable")
        if self.backward_op is None:
            kinds.append("backward")
        ops: dict[str, Any] = {}
        for kind in kinds:
            qual = self.qualname(mask, "primary" if kind == self.primary_kind() else kind)
            mutates = tuple(self.call_params[i].name for i in self.inout_pos) if kind == "mutable" else ()
            impl = _make_impl(self, mask, kind)
            cdef = torch.library.custom_op(qual, impl, mutates_args=mutates, schema=self.schema(mask, kind))
            cdef.register_fake(_make_fake(self, mask, kind))
            if kind == "functional":
                cdef.register_autograd(_make_backward(self, mask), setup_context=_make_setup_context(self, mask))
            elif kind == "backward":
                cdef.register_autograd(_make_second_order_error(self), setup_context=_no_setup)
            cdef.register_vmap(_make_vmap(self, mask, kind))
            ops[kind] = cdef
            _OVERLOADS[qual] = cdef._opoverload
        return ops

    # ---- eager execution ----------------------------------------------------------------
    def entry(self, mask: tuple, kind: str, args: Sequence[Any], ld, ods) -> _Entry:
        key = [kind, mask]
        if ld is not None or any(d is not None for d in ods):
            key.append(None if ld is None else tuple(ld))
            for d in ods:
                key.append(None if d is None else tuple(d))
        for pos in range(self.ncall):
            a = args[pos]
            if isinstance(a, torch.Tensor):
                key.append((a.shape, a.stride(), a.dtype, a.device))
            else:
                key.append(type(a))
        key = tuple(key)
        e = self.entries.get(key)
        if e is None:
            e = self._make_entry(mask, kind, args, ld, ods)
            _cache.put(self.entries, key, e, _cache.FAST_PATHS_PER_OP)
        return e

    def _make_entry(self, mask, kind, args, ld, ods) -> _Entry:
        desc, op = self.desc, self.op
        specs = []
        device = None
        dev_param = None
        arrays = []
        scalars = []
        for i, p in enumerate(self.call_params):
            x = args[i]
            if isinstance(x, torch.Tensor):
                specs.append(ArraySpec(tuple(x.shape), _np_dtype(desc, p, x)))
                d = x.device
                if device is None:
                    device, dev_param = d, p.name
                elif d != device:
                    raise ArgumentError(
                        f"op {self.label!r}: parameter {dev_param!r} is on {device} but parameter {p.name!r} is on "
                        f"{d}; move them to one device"
                    )
            elif p.is_array:
                raise ArgumentError(
                    f"op {self.label!r}, parameter {p.name!r}: expected {p.expected_text()}, got {type(x).__name__}"
                )
            else:
                specs.append(_scalar_spec(self, p, x))
        if device is None:
            device = torch.device("cpu")
        if device.type not in ("cpu", "cuda"):
            raise ArgumentError(f"op {self.label!r}: tensors on device {device} cannot run a Warp kernel (cpu or cuda)")
        output_dims = None
        if any(d is not None for d in ods):
            output_dims = {p.name: tuple(d) for p, d in zip(self.outputs, ods) if d is not None}
        plan = op.plan(specs, None if ld is None else tuple(ld), output_dims)
        for i, p in enumerate(self.call_params):
            x = args[i]
            if isinstance(x, torch.Tensor):
                if p.is_array:
                    isz = x.element_size()
                    strides = tuple(s * isz for s in x.stride())
                    outer = check_layout(desc, p, tuple(x.shape), strides, isz, written=p.role == IN_OUT)
                    contiguous = x.is_contiguous()
                    arrays.append((p.index, i, None if contiguous else outer))
                else:
                    arrays.append((p.index, i, None))
            elif p.inner:
                t = plan.types[p.index]
                scalars.append((p.index, i, lambda v, t=t: t(*v)))
            else:
                scalars.append((p.index, i, None))
        e = _Entry()
        e.plan = plan
        e.runner = plan.runner
        e.wdev = get_device(_warp_device_name(device))
        e.tdev = device
        e.cuda = device.type == "cuda"
        e.arrays = tuple(arrays)
        e.scalars = tuple(scalars)
        e.contiguous_outer = {
            p.index: contiguous_strides(plan.warp_shapes[p.index], type_size_in_bytes(plan.types[p.index]))
            for p in self.returned
        }
        outs = []
        for p, spec, zero in zip(self.returned, plan.out_specs, plan.zero):
            outs.append((p.index, tuple(spec.shape), _NP_TO_TORCH[np.dtype(spec.dtype)], p.role, zero))
        e.outs = tuple(outs)
        # tensor arguments an output can be allocated like (same shape and dtype)
        e.like = {i: (tuple(x.shape), x.dtype) for i, x in enumerate(args[: self.ncall]) if isinstance(x, torch.Tensor)}
        e.contiguous_args = frozenset(i for i in e.like if args[i].is_contiguous())
        e.forward, e.adjoint = entry_functions(self, e, kind, _pointer)
        return e

    def run_forward(self, mask, kind, args, e: _Entry | None = None):
        """The forward operator's implementation (``kind``: functional or mutable)."""
        n = self.ncall
        if e is None:
            ld = args[n] if len(args) > n else None
            ods = tuple(args[n + 1 + j] if len(args) > n + 1 + j else None for j in range(len(self.outputs)))
            e = self.entry(mask, kind, args, ld, ods)
        return e.forward(*args[:n], _current_stream(e.tdev) if e.cuda else None)

    def _pos_of_index(self, idx: int) -> int:
        for i, p in enumerate(self.call_params):
            if p.index == idx:
                return i
        raise KeyError(idx)

    def run_backward(self, mask, args, e: _Entry | None = None):
        """The backward operator's implementation; ``e``: the forward's entry (same plan), if known."""
        n, k = self.ncall, len(self.returned)
        rest = args[n + 2 * k :]
        ld = rest[0]
        ods = tuple(rest[1 : 1 + len(self.outputs)])
        if e is None:
            e = self.entry(mask, "backward", args, ld, ods)
        return self.adjoint(e, args, args[n : n + k], args[n + k : n + 2 * k], rest[1 + len(self.outputs)])

    def adjoint(self, e: _Entry, args, results, grads, needs) -> list:
        """Warp's adjoint of one call: the gradients of the call arguments ``needs`` marks, in order
        (the entry's generated adjoint, which the eager fast path's backward also calls)."""
        n = self.ncall
        got = e.adjoint(*args[:n], *results, *grads, *needs[:n], _current_stream(e.tdev) if e.cuda else None)
        return [t for t, need in zip(got, needs) if need]


def _pointer(desc, p: Param, t: torch.Tensor, contiguous_outer: tuple) -> tuple:
    """(pointer, outer byte strides) of a tensor whose strides may change from call to call."""
    if t.is_contiguous():
        return (t.data_ptr(), contiguous_outer)
    isz = t.element_size()
    outer = check_layout(desc, p, tuple(t.shape), tuple(s * isz for s in t.stride()), isz)
    return (t.data_ptr(), outer)


_OVERLOADS: dict[str, Any] = {}
_BINDINGS: dict[str, _Binding] = {}
_bind_lock = threading.Lock()


def _binding(op) -> _Binding:
    b = _BINDINGS.get(op.description.name)
    if b is None or b._op() is not op:
        _release_dropped()
        with _bind_lock:
            b = _BINDINGS.get(op.description.name)
            if b is None or b._op() is not op:
                old = _BINDINGS.get(op.description.name)
                old_op = None if old is None else old._op()
                if old_op is not None:
                    # an equal-named op described again replaced the old one's operators
                    for t in PLAIN_TENSOR_TYPES:
                        old_op.eager_paths.pop(t, None)
                b = _Binding(op)
                _BINDINGS[op.description.name] = b
                hook = _eager_hook(b)
                for t in PLAIN_TENSOR_TYPES:
                    op.eager_paths[t] = hook
                weakref.finalize(op, _dropped.append, b)
    return b


# bindings whose op was dropped: their operators are unregistered at the next registration
# (never inside the garbage collector's callback, which may run anywhere, a trace included)
_dropped: collections.deque = collections.deque()


def _release_dropped() -> None:
    """Unregister the operators of the ops that were dropped (describe/drop loops stay bounded)."""
    if not _dropped or torch.compiler.is_compiling():
        return
    while True:
        try:
            b = _dropped.popleft()
        except IndexError:
            return
        with _bind_lock:
            if _BINDINGS.get(b.desc.name) is b:
                del _BINDINGS[b.desc.name]
            with b.lock:
                variants = list(b.variants.values())
                b.variants.clear()
            for ops in variants:
                for cdef in ops.values():
                    qual = getattr(cdef, "_qualname", None)
                    if qual is not None and _OVERLOADS.get(qual) is getattr(cdef, "_opoverload", None):
                        del _OVERLOADS[qual]
                    unregister(cdef)
        # what the binding caches goes now (an autograd node still alive keeps what it uses)
        b.entries.clear()
        b.eager_runs.clear()
        b.quals.clear()


def _op_for(desc: OpDescription):
    """The :class:`interop.Op` of a description (the hand-written backward of an op)."""
    from interop import _op as core

    with core._ops_lock:
        o = core._ops.get(desc)
        if o is None:
            o = core.Op(desc)
            core._ops[desc] = o
    return o


# ---------------------------------------------------------------------------------------
# the registered rules: implementation, fake, autograd, vmap
# ---------------------------------------------------------------------------------------
def _make_impl(b: _Binding, mask: tuple, kind: str):
    if kind == "backward":

        def backward_impl(*args):
            return b.run_backward(mask, args)

        return backward_impl

    def forward_impl(*args):
        if forward_ad_active():
            _refuse_tangents(b, args)
        return b.run_forward(mask, kind, args)

    return forward_impl


def _refuse_tangents(b: _Binding, args: Sequence[Any]) -> None:
    """Under forward-mode AD, raise if an argument carries a tangent: the registered operator
    (``custom_op`` + ``register_autograd``) would run without it and give a zero tangent. (Under
    ``torch.func.jvp`` the tangents are gone by the time the operator runs: calls through the op
    take its autograd.Function instead, see :func:`_function_class`.)"""
    for x in args:
        if isinstance(x, torch.Tensor) and torch.autograd.forward_ad.unpack_dual(x).tangent is not None:
            raise _forward_mode_error(b)


def _forward_mode_error(b: _Binding) -> UnsupportedError:
    return UnsupportedError(
        f"op {b.label!r}: forward-mode differentiation (torch.func.jvp, jacfwd, hessian, "
        "torch.autograd.forward_ad) is not supported: the op has a reverse-mode rule only (Warp's "
        "adjoint). Use reverse mode: torch.autograd.grad, torch.func.vjp, grad or jacrev (and for "
        "second derivatives jacrev(jacrev(...)) with a hand-written backward=)"
    )


def _meta_plan(b: _Binding, args: Sequence[Any]):
    """The plan of a call from the static parts of its specs: dtypes and vec/mat dims (validates them)."""
    desc = b.desc
    specs = []
    device = None
    dev_param = None
    for i, p in enumerate(b.call_params):
        x = args[i]
        if isinstance(x, torch.Tensor):
            nd = p.ndim if p.is_array else 0
            shape = tuple(1 if isinstance(s, torch.SymInt) else int(s) for s in x.shape[:nd]) + tuple(
                int(s) for s in x.shape[nd:]
            )
            specs.append(ArraySpec(shape, _np_dtype(desc, p, x)))
            if device is None:
                device, dev_param = x.device, p.name
            elif x.device != device:
                raise ArgumentError(
                    f"op {b.label!r}: parameter {dev_param!r} is on {device} but parameter {p.name!r} is on "
                    f"{x.device}; move them to one device"
                )
        else:
            specs.append(_scalar_spec(b, p, x))
    return b.op.plan(specs, extents=False)  # placeholder shapes: dtypes and vec/mat dims only


def _scalar_spec(b: _Binding, p: Param, x: Any) -> ScalarSpec:
    if p.inner:
        return ScalarSpec("py", tuple)
    if isinstance(x, torch.SymBool):
        return ScalarSpec("py", bool)
    if isinstance(x, torch.SymInt):
        return ScalarSpec("py", int)
    if isinstance(x, torch.SymFloat):
        return ScalarSpec("py", float)
    return FRAMEWORK.scalar_spec(b.op, p, x)[0]


def _launch_dims(b: _Binding, args: Sequence[Any], ld) -> tuple | None:
    if ld is not None:
        return tuple(ld)
    if b.desc.launch_dims is not None:
        return b.desc.launch_dims
    if b.first_array is None:
        return None
    p = b.call_params[b.first_array]
    return tuple(args[b.first_array].shape[: p.ndim])


def _output_shape(b: _Binding, plan, p: Param, args, ld, od) -> tuple:
    desc = b.desc
    source = "output_dims"
    if od is not None:
        dims = tuple(od)
        source = f"output_dims[{p.name!r}]"
    elif desc.output_dims is not None and desc.output_dims[0] == "all":
        dims = desc.output_dims[1]
    elif desc.output_dims is not None and p.name in dict(desc.output_dims[1]):
        dims = dict(desc.output_dims[1])[p.name]
        source = f"output_dims[{p.name!r}]"
    else:
        dims = _launch_dims(b, args, ld)
        source = "launch_dims"
        if dims is None:
            raise ArgumentError(
                f"op {b.label!r}: cannot size output {p.name!r}: the op has no array input; pass launch_dims="
            )
    inner = _dtypes.split(plan.types[p.index])[1]
    if len(dims) == p.ndim:
        return tuple(dims) + inner
    if inner and len(dims) == p.ndim + len(inner) and all(d == s for d, s in zip(dims[p.ndim :], inner)):
        return tuple(dims)
    accepted = f"{p.ndim} dims" + (f", or {p.ndim + len(inner)} ending in {inner}" if inner else "")
    raise ArgumentError(
        f"op {b.label!r}, output {p.name!r}: {source} {tuple(dims)} does not fit a {p.ndim}-d array of "
        f"{_dtypes.type_name(plan.types[p.index])} (expected {accepted}); pass output_dims={{{p.name!r}: ...}}"
    )


def _fake_device_ref(b: _Binding, args) -> torch.Tensor | None:
    for a in args[: b.ncall]:
        if isinstance(a, torch.Tensor):
            return a
    return None


def _make_fake(b: _Binding, mask: tuple, kind: str):
    n = b.ncall
    nout = len(b.outputs)

    def fake_forward(*args):
        plan = _meta_plan(b, args)
        ld = args[n] if len(args) > n else None
        ods = [args[n + 1 + j] if len(args) > n + 1 + j else None for j in range(nout)]
        odmap = {p.name: d for p, d in zip(b.outputs, ods)}
        ref = _fake_device_ref(b, args)
        res = []
        for p, spec in zip(b.returned, plan.out_specs):
            dtype = _NP_TO_TORCH[np.dtype(spec.dtype)]
            if p.role == IN_OUT:
                if kind == "mutable":
                    continue
                x = args[b._pos_of_index(p.index)]
                res.append(x.new_empty(x.shape))
            else:
                shape = _output_shape(b, plan, p, args, ld, odmap[p.name])
                if ref is not None:
                    res.append(ref.new_empty(shape, dtype=dtype))
                else:
                    res.append(torch.empty(shape, dtype=dtype))
        if not res:
            return None
        return res[0] if len(res) == 1 else tuple(res)

    def fake_backward(*args):
        _meta_plan(b, args)
        needs = args[-1]
        return [args[i].new_empty(args[i].shape) for i in range(n) if needs[i]]

    return fake_backward if kind == "backward" else fake_forward


def _no_setup(ctx, inputs, output):
    return None


def _make_second_order_error(b: _Binding):
    def no_second_order(ctx, *grads):
        raise UnsupportedError(
            f"op {b.label!r}: second derivatives are not available: its backward is Warp's generated adjoint, "
            "which has no derivative of its own. For second order (create_graph=True, gradgradcheck, "
            "torch.func.hessian), describe the op with a hand-written backward: interop.op(..., backward=<kernel or op>)"
        )

    return no_second_order


def _make_setup_context(b: _Binding, mask: tuple):
    n = b.ncall
    nout = len(b.outputs)
    inout = set(b.inout_pos)
    ret_of = {b._pos_of_index(p.index): j for j, p in enumerate(b.returned) if p.role == IN_OUT}
    # the results Warp's adjoint reads; the backward passes the others' upstream gradients in their place
    unread = set(b.desc.adjoint_unread)
    kept = tuple(p.name not in unread for p in b.returned)

    def setup_context(ctx, inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        tensors = []
        layout = []
        for i in range(n):
            a = inputs[i]
            if i in inout:
                # the caller's tensor is overwritten with the new value right after this op:
                # the backward reads the new value (in-out parameters only accumulate)
                layout.append(("result", ret_of[i]))
            elif isinstance(a, torch.Tensor):
                layout.append(("saved", len(tensors)))
                tensors.append(a)
            else:
                layout.append(("value", a))
        ctx.save_for_backward(*tensors, *[o for o, keep in zip(outs, kept) if keep])
        # the node keeps the op alive (its operators are unregistered once it is dropped, see
        # _release_dropped): ``interop.op(k)(x).sum().backward()`` needs them after the call
        ctx.op = b.op
        ctx.layout = tuple(layout)
        dims = tuple(inputs[n : n + 1 + nout])
        ctx.dims = dims + (None,) * (1 + nout - len(dims))
        ctx.n_inputs = len(inputs)
        nondiff = [o for p, o in zip(b.returned, outs) if not p.differentiable]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)

    return setup_context


def _make_backward(b: _Binding, mask: tuple, direct: bool = False):
    """The backward of one scalar signature; ``direct`` (the eager fast path) runs Warp's
    adjoint without the dispatcher when nothing records or intercepts the backward."""
    n = b.ncall
    qual = b.qualname(mask, "backward")
    differentiable = tuple(p.differentiable for p in b.call_params)
    # in-out parameters only accumulate: their gradient passes through unchanged
    passthrough = tuple((b._pos_of_index(p.index), j) for j, p in enumerate(b.returned) if p.role == IN_OUT)
    unread = set(b.desc.adjoint_unread)
    kept = tuple(p.name not in unread for p in b.returned)
    nkept = sum(kept)

    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        it_saved = iter(saved[len(saved) - nkept :])
        # a result Warp's adjoint never reads was not saved: its upstream gradient stands in
        results = [next(it_saved) if keep else g for keep, g in zip(kept, grads)]
        args = [saved[v] if where == "saved" else results[v] if where == "result" else v for where, v in ctx.layout]
        needs = ctx.needs_input_grad
        need = [
            bool(needs[i]) and differentiable[i] and isinstance(a, torch.Tensor) and a.is_floating_point()
            for i, a in enumerate(args)
        ]
        ret: list[Any] = [None] * ctx.n_inputs
        for i, j in passthrough:
            if need[i]:
                ret[i] = grads[j]
            need[i] = False
        if not any(need):
            return tuple(ret)
        dims = ctx.dims
        if b.backward_op is not None:
            grads_in = _hand_written_backward(b, args, grads, dims[0], dims[1:])
            for i, g in grads_in.items():
                if need[i]:
                    ret[i] = g
            return tuple(ret)
        if functorch_transforms_active() and torch.is_grad_enabled():
            got = _backward_function_class(b, mask, qual).apply(*args, *results, *grads, *dims, need)
        elif direct and not torch.is_grad_enabled() and plain_eager(grads):
            got = _eager_backward(b, mask, qual, (*args, *results, *grads, *dims, need), ctx.entry)
        else:
            got = _OVERLOADS[qual](*args, *results, *grads, *dims, need)
        it = iter(got)
        for i in range(n):
            if need[i]:
                ret[i] = next(it)
        return tuple(ret)

    return backward


def _hand_written_backward(b: _Binding, args, grads, ld, ods) -> dict[int, torch.Tensor]:
    """Gradients of the array inputs from the op's hand-written backward op (itself differentiable)."""
    desc = b.desc
    for i, p in enumerate(b.call_params):
        if not p.is_array and isinstance(args[i], torch.Tensor) and args[i].requires_grad:
            raise UnsupportedError(
                f"op {b.label!r}: no gradient for scalar {p.name!r}: a hand-written backward returns gradients "
                "of array inputs only; pass the scalar as a Python number or as a 1-element array parameter"
            )
    diff = desc.diff_array_inputs
    # the backward launches over the forward's launch when it is a kernel; a Python-function backward sizes itself
    launch = _launch_dims(b, args, ld) if b.backward_op.description.kind == "kernel" else None
    out_dims = {}
    for bp, p in zip(b.backward_op.description.output_params, diff):
        x = args[b._pos_of_index(p.index)]
        out_dims[bp.name] = tuple(x.shape[: p.ndim])
    call_args = list(args) + [g.contiguous() for g in grads]
    res = b.backward_op(*call_args, launch_dims=launch, output_dims=out_dims)
    if not isinstance(res, tuple):
        res = (res,)
    return {b._pos_of_index(p.index): g for p, g in zip(diff, res)}


def _make_vmap(b: _Binding, mask: tuple, kind: str):
    """A loop over the batch: correct for every kernel (a kernel's threads may read any element)."""
    n = b.ncall

    def vmap_rule(info, in_dims, *args):
        qual = b.qualname(mask, "primary" if kind == b.primary_kind() else kind)
        ovl = _OVERLOADS[qual]
        if kind == "mutable":
            for i in b.inout_pos:
                if in_dims[i] is None:
                    raise ArgumentError(
                        f"op {b.label!r}: torch.vmap over a call whose in-out parameter {b.call_params[i].name!r} "
                        "is not batched: it would be updated once per batch element; batch it too"
                    )
        inout = set(b.inout_pos) if kind == "mutable" else set()
        per = []
        for j in range(info.batch_size):
            sl = []
            for i, (a, d) in enumerate(zip(args, in_dims)):
                if isinstance(a, torch.Tensor) and d is not None:
                    a = a.select(d, j)
                    if i not in inout:
                        a = a.contiguous()  # vec/mat components of a slice along an inner dim
                sl.append(a)
            per.append(ovl(*sl))
        if kind == "backward":
            m = len(per[0])
            return [torch.stack([r[q] for r in per]) for q in range(m)], [0] * m
        first = per[0]
        if first is None:
            return None, None
        if isinstance(first, tuple):
            outs = tuple(torch.stack([r[q] for r in per]) for q in range(len(first)))
            return outs, tuple(0 for _ in outs)
        return torch.stack(per), 0

    del n
    return vmap_rule


# ---------------------------------------------------------------------------------------
# the call path: op(tensors) -> registered operator
# ---------------------------------------------------------------------------------------
@torch.compiler.assume_constant_result
def _resolve(op, mask: tuple | None, kind: str) -> str:
    """Qualified name of ``op``'s operator for one scalar signature, registering it on first use.

    ``mask`` says which scalar parameters are tensors (None: none). Marked constant for
    Dynamo: reached inside ``torch.compile`` it runs at trace time, so a first registration
    there does not break the graph.
    """
    b = _binding(op)
    if mask is None:
        mask = b.base_mask
    q = b.quals.get((mask, kind))
    if q is None:
        b.variant(mask)
        q = b.qualname(mask, "primary" if kind == b.primary_kind() else kind)
        b.quals[(mask, kind)] = q
    return q


def _normalize_output_dims(b: _Binding, output_dims: Any) -> list:
    if output_dims is None:
        return [None] * len(b.outputs)
    if isinstance(output_dims, dict):
        names = [p.name for p in b.outputs]
        for k in output_dims:
            if k not in names:
                raise ArgumentError(
                    f"op {b.label!r}: output_dims names {k!r}, which is not an output; outputs are "
                    f"{sorted(names) or 'none'} (in-out arrays take the shape of the array passed)"
                )
        return [_sym_dims(output_dims.get(p.name), f"output_dims[{p.name!r}]", b.label) for p in b.outputs]
    dims = _sym_dims(output_dims, "output_dims", b.label)
    return [dims] * len(b.outputs)


def call(op, args: Sequence[Any], launch_dims: Any, output_dims: Any, kwargs: dict) -> Any:
    """Run ``op`` on torch tensors through its registered operator (see :meth:`interop.Op.__call__`)."""
    if kwargs:
        raise ArgumentError(unexpected_keywords(op.description, kwargs))
    # first: registers the op if needed (at trace time under Dynamo), so that the binding
    # read below already exists when Dynamo first reads the registry
    base = _resolve(op, None, "functional")
    b = _BINDINGS[op.description.name]
    if len(args) != b.ncall:
        raise ArgumentError(
            f"op {b.label!r} takes {b.ncall} argument(s) {[p.name for p in b.call_params]} "
            f"(outputs are returned, not passed), got {len(args)}"
        )
    sargs = list(args)
    mask = []
    for pos in b.scalar_pos:
        x = args[pos]
        is_t = isinstance(x, torch.Tensor)
        mask.append(is_t)
        if not is_t:
            p = b.call_params[pos]
            if isinstance(x, (bool, np.bool_)) and p.scalar is not _dtypes.normalize(bool):
                # torch's dispatcher would take a bool for a float/int schema argument as a number
                raise ArgumentError(
                    f"op {b.label!r}, parameter {p.name!r}: expected {p.expected_text()} (a number), got bool"
                )
            if not p.inner and not (
                isinstance(x, (numbers.Real, torch.SymInt, torch.SymFloat, torch.SymBool))
                or (isinstance(x, np.generic) and not isinstance(x, np.flexible))  # ml_dtypes.bfloat16 too
            ):
                # before torch's dispatcher, whose message names neither the op's label nor the fix
                raise ArgumentError(
                    f"op {b.label!r}, parameter {p.name!r}: expected {p.expected_text()} (a number or a 0-d tensor), "
                    f"got {type(x).__name__}"
                )
            if p.inner:
                sargs[pos] = vector_components(b.desc, p, x)
            elif isinstance(x, np.generic):
                sargs[pos] = x.item()
    mask = tuple(mask)
    grad = False
    device = None
    dev_pos = None
    for pos in range(b.ncall):
        x = args[pos]
        if isinstance(x, torch.Tensor):
            _check_tensor(b, b.call_params[pos], x)
            if device is None:
                device, dev_pos = x.device, pos
            elif x.device != device:
                raise ArgumentError(
                    f"op {b.label!r}: parameter {b.call_params[dev_pos].name!r} is on {device} but parameter "
                    f"{b.call_params[pos].name!r} is on {x.device}; move them to one device"
                )
            if x.requires_grad:
                grad = True
        elif b.call_params[pos].is_array:
            p = b.call_params[pos]
            raise ArgumentError(
                f"op {b.label!r}, parameter {p.name!r}: expected {p.expected_text()} (a tensor), got {type(x).__name__}"
            )
    grad = grad and torch.is_grad_enabled()
    if grad:
        _check_grad_supported(b, args)
    ld = _sym_dims(launch_dims, "launch_dims", b.label)
    if ld is not None and b.desc.kind == "function":
        raise ArgumentError(
            f"op {b.label!r}: launch_dims does not apply to a Python-function op (it launches its own kernels); "
            "use output_dims to size its outputs"
        )
    if ld is not None or output_dims is not None:
        sargs.append(ld)
        sargs.extend(_normalize_output_dims(b, output_dims))
    qual = base if mask == b.base_mask else _resolve(op, mask, "functional")
    # plain eager work on real memory skips the dispatcher (see _eager_forward); meta tensors
    # and other devices reach the operator (its fake implementation, or its error)
    eager = (device is None or device.type in _EAGER_DEVICES) and plain_eager(args)
    if eager and any(isinstance(x, torch.Tensor) and (x.is_neg() or x.is_conj()) for x in args):
        # a lazily negated/conjugated view (z.conj().imag): its memory holds other values than the
        # tensor's; the operator's dispatcher resolves it before the kernel runs
        eager = False
    # forward-mode AD: the operator would drop the tangents; the Function's jvp refuses them
    forward_ad = not eager and forward_ad_active()
    if b.inout_pos and not grad and not forward_ad:
        if eager:
            res = _eager_forward(b, mask, "mutable", sargs, args)
        else:
            res = _OVERLOADS[_resolve(op, mask, "mutable")](*sargs)
        outs = iter(() if res is None else (res if isinstance(res, tuple) else (res,)))
        # kernel order: the in-out tensors (updated in place) where they sit among the outputs
        returned = [args[b._pos_of_index(p.index)] if p.role == IN_OUT else next(outs) for p in b.returned]
        return pack_result(returned)
    if eager:
        res = _eager_apply(b, mask, sargs) if grad else _eager_forward(b, mask, "functional", sargs, args)
        if not b.inout_pos and mask == b.base_mask and len(sargs) == b.ncall:
            _remember_signature(b, args)
    elif (grad and functorch_transforms_active()) or forward_ad:
        res = _function_class(b, mask, qual).apply(*sargs)
    else:
        res = _OVERLOADS[qual](*sargs)
    if not b.inout_pos:
        return res
    res = res if isinstance(res, tuple) else (res,)
    returned = []
    for p, r in zip(b.returned, res):  # kernel order
        if p.role == IN_OUT:
            t = args[b._pos_of_index(p.index)]
            t.copy_(r)
            returned.append(t)
        else:
            returned.append(r)
    return pack_result(returned)


def _check_tensor(b: _Binding, p: Param, x: torch.Tensor) -> None:
    """Refuse what a raw pointer cannot carry, before torch or Warp are asked."""
    if x.layout != torch.strided or x.is_nested:
        raise ArgumentError(
            f"op {b.label!r}, parameter {p.name!r}: a {'nested' if x.is_nested else x.layout} tensor has no dense "
            "strided memory a Warp kernel can read; pass a dense tensor (.to_dense(), or one call per component)"
        )
    if (
        p.role == IN_OUT
        and not torch.compiler.is_compiling()  # Dynamo cannot trace is_inference(); eager calls are checked
        and x.is_inference()
        and not torch.is_inference_mode_enabled()
    ):
        # torch itself refuses `x.add_(...)` here
        raise ArgumentError(
            f"op {b.label!r}, parameter {p.name!r}: in-place update to an inference tensor outside "
            "torch.inference_mode() is not allowed; call the op under torch.inference_mode() or pass a .clone()"
        )


def _function_class(b: _Binding, mask: tuple, qual: str):
    """An autograd.Function around the registered operators, for torch.func transforms and
    forward-mode AD.

    Same forward operator, same setup_context and backward as ``register_autograd``; it
    exists because torch.func needs a ``setup_context`` staticmethod on the Function, and so
    that tangents reach a ``jvp`` that refuses them (the operator would drop them silently).
    """
    cls = b.functions.get(mask)
    if cls is None:
        ovl = _OVERLOADS[qual]

        def forward(*args):
            return ovl(*args)

        def jvp(ctx, *tangents):
            raise _forward_mode_error(b)

        cls = type(
            f"{b.base}_function",
            (torch.autograd.Function,),
            {
                "generate_vmap_rule": True,
                "forward": staticmethod(forward),
                "setup_context": staticmethod(_make_setup_context(b, mask)),
                "backward": staticmethod(_make_backward(b, mask)),
                "jvp": staticmethod(jvp),
            },
        )
        b.functions[mask] = cls
    return cls


def _backward_function_class(b: _Binding, mask: tuple, qual: str):
    """The backward operator as an autograd.Function for torch.func (see :func:`_function_class`)."""
    key = ("backward", mask)
    cls = b.functions.get(key)
    if cls is None:
        ovl = _OVERLOADS[qual]

        def forward(*args):
            return tuple(ovl(*args))

        cls = type(
            f"{b.base}_backward_function",
            (torch.autograd.Function,),
            {
                "generate_vmap_rule": True,
                "forward": staticmethod(forward),
                "setup_context": staticmethod(_no_setup),
                "backward": staticmethod(_make_second_order_error(b)),
            },
        )
        b.functions[key] = cls
    return cls


# ---------------------------------------------------------------------------------------
# the eager fast path: plain eager calls skip the dispatcher
# ---------------------------------------------------------------------------------------
# A call that nothing traces or intercepts (adapters._torch_compat.plain_eager) runs the
# operator's own implementation (_Binding.run_forward / run_backward: the same plan, launch
# record and backward code) directly, and, when a gradient is needed, through a cached
# autograd.Function with the same setup_context and backward as register_autograd. The
# registered operator stays the op's identity for everything that traces.
_EAGER_DEVICES = frozenset({"cpu", "cuda"})


def _eager_forward(b: _Binding, mask: tuple, kind: str, sargs: list, args: Sequence[Any], e: _Entry | None = None):
    """The forward with no autograd node, as the operator's implementation runs it."""
    b.eager_calls += 1
    if profiler_enabled():
        with torch.autograd.profiler.record_function(b.qualname(mask, "primary" if kind == b.primary_kind() else kind)):
            res = b.run_forward(mask, kind, sargs, e)
    else:
        res = b.run_forward(mask, kind, sargs, e)
    if kind == "mutable":
        # what the dispatcher does for a mutating operator: autograd sees the in-place update
        torch.autograd.graph.increment_version([args[i] for i in b.inout_pos])
    return res


def _eager_apply(b: _Binding, mask: tuple, sargs: list, e: _Entry | None = None):
    """The forward as an autograd node (the functional variant; in-out copies are the caller's).

    ``e``: the entry of this signature when the caller has it (handed to the Function's
    forward through a thread-local, since apply passes only the operator's arguments)."""
    b.eager_calls += 1
    apply = b.functions.get(("eager", mask))
    if apply is None:
        apply = _eager_function_class(b, mask)
    _pending.entry = e
    if profiler_enabled():
        with torch.autograd.profiler.record_function(b.qualname(mask, "functional" if b.inout_pos else "primary")):
            return apply(*sargs)
    return apply(*sargs)


_pending = threading.local()
_PLAIN_NUMBERS = (float, int, bool)


def _signature(args: Sequence[Any]) -> tuple | None:
    """What a call's validation depends on: each plain tensor's shape, strides, dtype, device (and
    whether it requires grad), and the type of each Python number; None when an argument is
    neither (it takes the full path)."""
    key = []
    try:
        for a in args:
            t = type(a)
            if t in PLAIN_TENSOR_TYPES:
                # is_neg(): a lazily negated view (``z.conj().imag``) takes the full path, which sends it
                # through the operator (torch's dispatcher resolves the view before the kernel reads memory)
                key.append((a.shape, a.stride(), a.dtype, a.device, a.requires_grad, a.is_neg()))
            elif t in _PLAIN_NUMBERS:
                key.append(t)
            else:
                return None
    except RuntimeError:  # a tensor with no sizes or strides (nested): the full path names it
        return None
    return tuple(key)


class _Signature:
    """One validated plain-eager call signature of an op: its entry and its autograd.Function."""

    __slots__ = ("e", "tensor_pos", "scalar_pos", "can", "grad", "apply")

    def __init__(self, b: _Binding, args: Sequence[Any]):
        self.e = b.entry(b.base_mask, "functional", args, None, (None,) * len(b.outputs))
        self.tensor_pos = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        self.scalar_pos = tuple(i for i, a in enumerate(args) if not isinstance(a, torch.Tensor))
        # which arguments can have a gradient: differentiable floating-point tensors
        self.can = tuple(
            d and isinstance(a, torch.Tensor) and a.is_floating_point() for d, a in zip(b.differentiable, args)
        )
        self.grad = any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        # a hand-written backward runs through the general eager Function (_eager_apply)
        self.apply = None if b.backward_op is not None else signature_function(b, self, f"{b.base}_eager", b.helpers())


def _remember_signature(b: _Binding, args: Sequence[Any]) -> None:
    """After a validated eager call: later calls with the same signature skip the validation."""
    runs = b.eager_runs
    key = _signature(args)
    if key is None or key in runs or len(runs) >= _cache.FAST_PATHS_PER_OP or not b.returned:
        return
    runs[key] = _Signature(b, args)


def _eager_hook(b: _Binding):
    """The op's eager hook for torch tensors (interop.Op.eager_paths): ``hook(op, args)`` runs a
    plain eager call whose signature was validated before (no in-out parameter, no scalar tensor,
    no launch_dims or output_dims), or returns NOT_EAGER."""
    runs = b.eager_runs
    mask = b.base_mask
    label = b.qualname(mask, "primary")
    grad_enabled = torch.is_grad_enabled
    profiling = profiler_enabled_c()

    def hook(op, args: Sequence[Any]) -> Any:
        if not eager_context():  # first: under Dynamo this folds to False and no cache below is read (or guarded)
            return NOT_EAGER
        sig = runs.get(_signature(args))
        if sig is None:
            return NOT_EAGER
        if sig.grad and grad_enabled():
            apply = sig.apply
            if apply is None:
                return _eager_apply(b, mask, args, sig.e)
            b.eager_calls += 1
            if profiling():
                with torch.autograd.profiler.record_function(label):
                    return apply(*args)
            return apply(*args)
        return _eager_forward(b, mask, "functional", args, args, sig.e)

    return hook


def _eager_backward(b: _Binding, mask: tuple, qual: str, bargs: tuple, e: _Entry | None):
    """Warp's adjoint without the dispatcher (the backward operator's implementation)."""
    if profiler_enabled():
        with torch.autograd.profiler.record_function(qual):
            return b.run_backward(mask, bargs, e)
    return b.run_backward(mask, bargs, e)


def _eager_function_class(b: _Binding, mask: tuple):
    """``apply`` of the fast path's autograd.Function: forward runs the functional implementation
    directly, then the same setup_context as ``register_autograd``; same backward.

    The Function is of the classic form (``forward(ctx, ...)``): the form with a separate
    ``setup_context`` costs an ``inspect.signature`` per call, and is only needed by torch.func,
    which never takes this path.
    """
    key = ("eager", mask)
    with b.lock:
        apply = b.functions.get(key)
        if apply is None:
            setup_context = _make_setup_context(b, mask)

            def forward(ctx, *args):
                e = _pending.entry
                if e is None:
                    n = b.ncall
                    ld = args[n] if len(args) > n else None
                    ods = tuple(args[n + 1 + j] if len(args) > n + 1 + j else None for j in range(len(b.outputs)))
                    e = b.entry(mask, "functional", args, ld, ods)
                else:
                    _pending.entry = None
                out = b.run_forward(mask, "functional", args, e)
                setup_context(ctx, args, out)
                ctx.entry = e
                return out

            cls = type(
                f"{b.base}_eager",
                (torch.autograd.Function,),
                {
                    "forward": staticmethod(forward),
                    "backward": staticmethod(_make_backward(b, mask, direct=True)),
                },
            )
            apply = b.functions[key] = function_apply(cls)
    return apply


def _check_grad_supported(b: _Binding, args) -> None:
    for i, p in enumerate(b.call_params):
        x = args[i]
        if p.is_array or not isinstance(x, torch.Tensor) or not x.requires_grad:
            continue
        if b.backward_op is not None:
            raise UnsupportedError(
                f"op {b.label!r}: no gradient for scalar {p.name!r}: a hand-written backward returns gradients "
                "of array inputs only; pass the scalar as a Python number or as a 1-element array parameter"
            )
        if b.desc.kind == "function":
            raise UnsupportedError(
                f"op {b.label!r}: no gradient for scalar {p.name!r} of a Python-function op (wp.Tape does not "
                "record scalar adjoints); pass it as a Python number, or as a 1-element array parameter"
            )


# ---------------------------------------------------------------------------------------
# the adapter interface
# ---------------------------------------------------------------------------------------
def on_describe(op) -> None:
    """Register ``op``'s operators now (called by the core when an op is described while torch is imported)."""
    _resolve(op, None, "functional")


def bind(op):
    """The registered operator of ``op`` (scalars as Python numbers): ``torch.ops.<namespace>.<name>``.

    For an op with in-out parameters this is the mutating operator (``mutates_args``); its
    differentiable functional twin is ``torch.ops.<namespace>.<name>_functional``.

    Example:
        >>> import torch, adapters.torch
        >>> f = adapters.torch.bind(my_op)            # doctest: +SKIP
        >>> torch.library.opcheck(f, (x, y, 2.0))     # doctest: +SKIP
    """
    b = _binding(op)
    return b.variant(b.base_mask)[b.primary_kind()]


def operators(op, scalar_tensors: Sequence[str] = ()) -> dict[str, Any]:
    """Every registered operator of ``op`` for one scalar signature, by kind.

    Args:
        op: an :class:`interop.Op`.
        scalar_tensors: names of the scalar parameters passed as 0-d tensors.

    Returns:
        ``{"functional": CustomOpDef, "backward": CustomOpDef, "mutable": CustomOpDef}`` (the
        ones that exist: ``mutable`` for ops with in-out parameters, ``backward`` unless the op
        has a hand-written backward).
    """
    b = _binding(op)
    names = set(scalar_tensors)
    unknown = names - {b.call_params[i].name for i in b.scalar_pos}
    if unknown:
        raise ArgumentError(f"op {b.label!r}: {sorted(unknown)} are not scalar parameters")
    mask = tuple(b.call_params[i].name in names for i in b.scalar_pos)
    return dict(b.variant(mask))


def _register_described() -> None:
    """Register the ops described before this module was imported (torch imported after them)."""
    from interop import _op as core

    with core._ops_lock:
        ops = list(core._ops.values())
    for o in ops:
        on_describe(o)


_register_described()


def _seed_type_cache() -> None:
    """Known before any call is traced: torch.compile's first trace then finds the tensor type in the
    core's type cache instead of filling it (a guard on the cache that failed once: one recompile)."""
    from interop import _frameworks

    _frameworks._type_cache.setdefault(torch.Tensor, "torch")
    _frameworks._type_cache.setdefault(torch.nn.Parameter, "torch")


_seed_type_cache()
