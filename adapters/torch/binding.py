"""The torch operators of one op: dtypes, schemas, validated per-signature entries, and the
implementation and fake (meta) function every operator runs.

A :class:`_Binding` holds everything the op's operators share (names, schemas, the cache of
validated call signatures, the forward and adjoint they run); registering the operators with
``torch.library`` is ``torch/registration.py``'s, their autograd rules ``torch/autograd.py``'s.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Sequence

import numpy as np
import torch

from interop import _cache, _dtypes
from interop._codegen import compile_functions
from interop._description import IN_OUT, OpDescription, Param
from interop._errors import ArgumentError, UnsupportedError
from interop._launch import contiguous_strides, external_stream, get_device
from interop._plan import (
    ArraySpec,
    ScalarSpec,
    check_layout,
    default_launch,
    footprint,
    tile_launch,
    tile_output_dims,
)
from interop._values import vector_components
from interop._warp_compat import type_size_in_bytes

from .._common import EagerFramework
from .autocast import targets as _autocast_targets
from .compat import (
    current_raw_stream,
    forward_ad_active,
    tensors_matcher,
    tls_keys,
)
from .eager import entry_functions

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


_stream_of_handle: dict[tuple[int, int], Any] = {}


def _current_stream(dev: torch.device) -> Any:
    """Warp stream wrapping torch's current CUDA stream on ``dev`` (None on the CPU)."""
    if dev.type != "cuda":
        return None
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    key = (index, current_raw_stream(index))
    s = _stream_of_handle.get(key)
    if s is None:
        if len(_stream_of_handle) >= 256:  # streams made and destroyed: forget them (nothing is held)
            _stream_of_handle.clear()
        s = _stream_of_handle[key] = external_stream(f"cuda:{index}", key[1])
    return s


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
# one cached, validated call signature
# ---------------------------------------------------------------------------------------
class _Entry:
    """What a call with one input signature needs: validated once, reused for every call."""

    __slots__ = (
        "plan",
        "wdev",
        "tdev",
        "arrays",
        "spans",
        "scalars",
        "outs",
        "cuda",
        "runner",
        "contiguous_outer",
        "forward",
        "adjoint",
        "like",
        "contiguous_args",
        "saved_layout",
    )

    def same_saved_layout(self, args) -> bool:
        """Whether the tensors a backward was given (``args``: the node's saved tensors) have the
        layout (sizes, strides, dtype, device) this forward entry was made for. Saved-tensor hooks
        may hand the backward other tensors (``save_on_cpu`` packs them; a user's hooks copy,
        compress, restride): the adjoint would read them as the forward's (a wrong gradient, a
        read out of bounds), so such a backward takes its own entry (:meth:`_Binding.run_backward`),
        which reads their layout or refuses their dtype or device as a call would."""
        for i, shape, strides, dtype, device in self.saved_layout:
            a = args[i]
            if a.stride() != strides or a.shape != shape or a.dtype is not dtype or a.get_device() != device:
                return False
        return True

    def launcher(self, adjoint: bool):
        """The plan's recorded launch, ``go(values, adj, stream)`` (built once per plan and device)."""
        return self.runner.launcher(self.wdev, adjoint)


class _Binding:
    """The torch operators of one op (all scalar-signature variants), created once per op."""

    eager_calls = 0  # calls that took the eager fast path (tests read it to tell the paths apart)

    def __init__(self, op):
        desc: OpDescription = op.description
        # weakly: the registered operators' implementations hold this binding, and an op the user
        # drops must be freed, its operators with it (see registration._release_dropped)
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
        # per (kind, mask): (match, entry) of the operators' last call without launch_dims/output_dims
        # (the registered operator's calls, which the eager fast path does not serve, mostly repeat it)
        self.entry_last: dict[tuple, tuple] = {}
        self.entry_matchers: dict[tuple, tuple] = {}  # by (entry key, requires_grad of the tensors)
        self.lock = threading.RLock()
        # the adjoint may accumulate into the upstream gradient of an array the kernel reads (and a
        # wp.Tape replay writes into the output gradients it is given): such gradients are copied
        self.clone_grads = tuple(desc.kind == "function" or p.name in desc.reads_returned for p in self.returned)
        self.differentiable = tuple(p.differentiable for p in self.call_params)
        self.autocast_to = _autocast_targets(self.call_params)  # per parameter: its dtype under autocast
        self.autocast = any(t is not None for t in self.autocast_to)
        self.eager_runs: dict[tuple, Any] = {}  # remembered plain-eager signatures (_torch_eager_path._Signature)
        self.eager_last: Any = None  # the one of them the last fast-path call had
        self.backward_op = None
        if desc.backward is not None:
            self.backward_op = _op_for(desc.backward)

    # ---- names and schemas --------------------------------------------------------

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

    # ---- eager execution ----------------------------------------------------------------
    def entry(self, mask: tuple, kind: str, args: Sequence[Any], ld, ods) -> _Entry:
        dims = ld is not None or ods.count(None) != len(ods)
        if not dims:
            last = self.entry_last.get((kind, mask))
            if last is not None and last[0](args):
                return last[1]
        key = [kind, mask]
        if dims:
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
        if not dims:
            # the matcher of this signature, requires_grad pattern and dispatch state (what the matcher
            # compares besides the key): made once, so that calls alternating between them do not remake it
            mkey = (key, tuple(a.requires_grad for a in args[: self.ncall] if isinstance(a, torch.Tensor)), tls_keys())
            last = self.entry_matchers.get(mkey)
            if last is None:
                last = (_entry_matcher(args[: self.ncall]), e)  # (None, e): this torch cannot match so
                _cache.put(self.entry_matchers, mkey, last, _cache.FAST_PATHS_PER_OP)
            if last[0] is not None:
                self.entry_last[(kind, mask)] = last
        return e

    def _make_entry(self, mask, kind, args, ld, ods) -> _Entry:
        desc, op = self.desc, self.op
        specs = []
        device = None
        dev_param = None
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
        arrays, scalars, spans = self._entry_arguments(plan, args)
        e = _Entry()
        e.plan = plan
        e.runner = plan.runner
        e.wdev = get_device(_warp_device_name(device))
        e.tdev = device
        e.cuda = device.type == "cuda"
        if e.cuda:
            # both directions' launch records (and the module) now: a first call or first backward
            # inside torch.cuda.graph capture would otherwise load the module during the capture
            e.runner.prepare(e.wdev, _current_stream(device))
        e.arrays = tuple(arrays)
        e.spans = spans
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
        e.saved_layout = _saved_layout(self.call_params, arrays, args)
        e.forward, e.adjoint = entry_functions(self, e, kind, _pointer)
        return e

    def _entry_arguments(self, plan, args) -> tuple[list, list, dict]:
        """``(arrays, scalars, spans)`` of an entry: ``(parameter index, position, outer byte strides
        or None)`` of each tensor argument (layout checked), ``(parameter index, position,
        converter or None)`` of each other one, and each tensor argument's byte span by position
        (refuse_overlaps)."""
        desc = self.desc
        arrays, scalars, spans = [], [], {}
        for i, p in enumerate(self.call_params):
            x = args[i]
            if isinstance(x, torch.Tensor):
                isz = x.element_size()
                strides = tuple(s * isz for s in x.stride())
                spans[i] = footprint(tuple(x.shape), strides, isz)
                if p.is_array:
                    outer = check_layout(desc, p, tuple(x.shape), strides, isz, written=p.role == IN_OUT)
                    arrays.append((p.index, i, None if x.is_contiguous() else outer))
                else:
                    # a scalar or vec/mat value given as a tensor: its components must be packed,
                    # as any array's (read as if contiguous: a strided or expanded one gave other
                    # components, or read past its storage)
                    check_layout(desc, p, tuple(x.shape), strides, isz)
                    arrays.append((p.index, i, None))
            elif p.inner:
                t = plan.types[p.index]
                # (the components checked as any call's are: a float32 component beyond its range
                # is refused, not made inf; a wrong count names the parameter)
                scalars.append(
                    (p.index, i, lambda v, t=t, p=p: v if type(v) is t else t(*vector_components(desc, p, v)))
                )
            else:
                scalars.append((p.index, i, None))
        return arrays, scalars, spans

    def run_forward(self, mask, kind, args, e: _Entry | None = None):
        """The forward operator's implementation (``kind``: functional or mutable)."""
        n = self.ncall
        if e is None:
            last = self.entry_last.get((kind, mask))
            dims = args[n:]
            if last is not None and dims.count(None) == len(dims) and last[0](args):
                e = last[1]  # no launch_dims/output_dims, the last call's signature
            else:
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
        if e is not None and not e.same_saved_layout(args):
            e = None  # (saved-tensor hooks changed the layout: this backward's own entry)
        if e is None:
            last = self.entry_last.get(("backward", mask))
            if last is not None and rest.count(None) == len(rest) - 1 and last[0](args):
                e = last[1]  # no launch_dims/output_dims (``rest`` ends with ``needs``), the last call's signature
            else:
                e = self.entry(mask, "backward", args, rest[0], tuple(rest[1 : 1 + len(self.outputs)]))
        return self.adjoint(e, args, args[n : n + k], args[n + k : n + 2 * k], rest[1 + len(self.outputs)])

    def adjoint(self, e: _Entry, args, results, grads, needs) -> list:
        """Warp's adjoint of one call: the gradients of the call arguments ``needs`` marks, in order
        (the entry's generated adjoint, which the eager fast path's backward also calls)."""
        n = self.ncall
        got = e.adjoint(*args[:n], *results, *grads, *needs[:n], _current_stream(e.tdev) if e.cuda else None)
        return [t for t, need in zip(got, needs) if need]


def _saved_layout(call_params, arrays, args) -> tuple:
    """``(position, sizes, strides, dtype, device index)`` of each array argument as the adjoint
    reads it (an in-out one is read from its result, whose layout is checked where it is read):
    ``_Entry.saved_layout``."""
    return tuple(
        (pos, tuple(args[pos].shape), tuple(args[pos].stride()), args[pos].dtype, args[pos].get_device())
        for _, pos, _ in arrays
        if call_params[pos].role != IN_OUT and isinstance(args[pos], torch.Tensor)
    )


def _entry_matcher(args: Sequence[Any]) -> Any:
    """``match(args) -> bool``: whether a call's first ``len(args)`` arguments have the signature of
    ``args`` as :meth:`_Binding.entry` keys it (each tensor's shape, strides, dtype and device, each
    other argument's type), compared without building and hashing the key: the types in Python, the
    tensors in C++ (``compat.tensors_matcher``, which also compares dispatch keys and requires_grad:
    a call that differs there only takes the keyed lookup). None where this torch cannot compare
    tensors so."""
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    if any(args[i].is_nested for i in tensors):
        return None
    check = tensors_matcher([args[i] for i in tensors])
    if check is None:
        return None
    env: dict[str, Any] = {"check": check}
    terms = []
    for i, a in enumerate(args):
        env[f"T{i}"] = type(a)
        terms.append(f"type(a{i}) is T{i}")
    # a nested tensor never reaches TensorGuards (see compat.tensors_matcher)
    terms += [f"not a{i}.is_nested" for i in tensors]
    terms.append(f"check({', '.join(f'a{i}' for i in tensors)})")
    names = "".join(f"a{i}, " for i in range(len(args)))
    unpack = f"    {names}= args[:{len(args)}]\n" if args else ""  # (an op without call arguments: none)
    source = f"def match(args):\n{unpack}    return {' and '.join(terms)}\n"
    return compile_functions(source, env, ("match",), "<interop torch entry match>")[0]


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
# the registered rules: implementation and fake (meta)
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
            raise UnsupportedError(
                f"op {b.label!r}: forward-mode differentiation through its registered operator "
                f"torch.ops.{b.ns}.{b.base} is not supported (torch.library.custom_op has no forward-mode "
                "rule, the tangent would be dropped); call the op object instead, op(...), whose calls carry "
                "tangents"
            )


def _given_output_dims(b: _Binding, ods: Sequence[Any]) -> dict | None:
    """The call's per-output ``output_dims`` (those given, as ints, a symbolic extent as the placeholder
    1; None where none is): the meta plan sizes its outputs as the call does, so a tile kernel whose
    tile grid has fewer dims than an output (sized by output_dims) is not refused by the fake
    implementation alone, and a scatter output given its output_dims is not refused for lack of them."""
    given = {
        p.name: tuple(1 if isinstance(d, torch.SymInt) else int(d) for d in od)
        for p, od in zip(b.outputs, ods)
        if od is not None
    }
    return given or None


def _meta_plan(b: _Binding, args: Sequence[Any], ld: Any = None, output_dims: dict | None = None):
    """The plan of a call from the static parts of its specs: dtypes and vec/mat dims (validates them);
    ``ld`` the call's ``launch_dims`` (a tile kernel's launch may need them to be resolved at all)."""
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
    ld = None if ld is None or any(isinstance(d, torch.SymInt) for d in ld) else tuple(int(d) for d in ld)
    return b.op.plan(specs, ld, output_dims, extents=False)  # placeholder shapes: dtypes and vec/mat dims only


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
    if b.desc.kind == "kernel":
        # the real call checks that the indexed arrays agree
        return default_launch(b.desc, lambda name: _arg_shape(b, args, name), check=False)
    p = b.call_params[b.first_array]
    return tuple(args[b.first_array].shape[: p.ndim])


def _arg_shape(b: _Binding, args: Sequence[Any], name: str) -> tuple:
    """The (symbolic) Warp outer shape of array call parameter ``name``."""
    i = next(i for i, p in enumerate(b.call_params) if p.name == name)
    return tuple(args[i].shape[: b.call_params[i].ndim])


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
    elif desc.tiles:
        # as the plan sizes it: a tile kernel's launch as Warp launches it (the call's launch_dims
        # taken as the tile grid, or read from the arrays), then one element per tile or per thread
        given = tuple(ld) if ld is not None else desc.launch_dims
        launch = tile_launch(desc, given, lambda name: _arg_shape(b, args, name), check=False)
        dims, source = tile_output_dims(desc, launch)
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
        ld = args[n] if len(args) > n else None
        ods = [args[n + 1 + j] if len(args) > n + 1 + j else None for j in range(nout)]
        plan = _meta_plan(b, args, ld, _given_output_dims(b, ods))
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
        # (..., launch_dims, output_dims per output, needs): see _Binding.schema
        _meta_plan(b, args, args[-2 - nout], _given_output_dims(b, args[-1 - nout : -1]))
        needs = args[-1]
        return [args[i].new_empty(args[i].shape) for i in range(n) if needs[i]]

    return fake_backward if kind == "backward" else fake_forward
