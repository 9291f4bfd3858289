"""A call traced by Dynamo (``torch.compile``), read with as few guards as the call allows.

Everything Dynamo reads while it traces a call becomes a guard, which the compiled function checks
before each of its calls. The full path (``_call`` in ``__init__.py``, reached through the core's
``Op.__call__``) reads the op's eager hooks, the core's type cache, the binding, each parameter's
role and type and the value ranges: about 240 guards for a compiled step of two ops, some of them
relations between two of those objects that Dynamo checks in Python. Measured on torch 2.13 (CPU,
the cloth step of the training benchmark): the compiled step spent about 45 us a call before its
graph ran, against 27 us for a step of two ``custom_op`` s doing nothing; with the call below, about
20 us less a step.

Here a call of plain tensors and Python numbers (vector values as tuples or lists of numbers) is
resolved by one function that Dynamo runs at trace time and takes as a constant
(``torch.compiler.assume_constant_result``): it reads what it needs, and the trace depends only on
the op (guarded by identity) and on the call's constants (each tensor's ``requires_grad``, which
Dynamo guards with the tensor; the numbers' values; grad mode and autocast, in Dynamo's global
state guard). Any other call (a keyword, per-call dims, a ``wp.vec3`` object, a NumPy number, a
tensor subclass or DTensor, an in-out parameter, autocast for an op it casts, forward mode,
``torch.func``, struct parameters, an error to raise) goes on to the full path, unchanged.

On torch 2.11 Dynamo passes the op to that function as its id (``compat.assume_constant_result_of``):
the same trace and guards (the traced-call, compile, vector-value and training tests pass on
2.11 as on 2.13 and 2.14).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from interop._dtypes import is_float, np_dtype
from interop._errors import ArgumentError, InteropError
from interop._op import NOT_EAGER
from interop._values import _VALUE_RANGES, vector_components

from .binding import _BINDINGS, _NP_TO_TORCH, _OVERLOADS
from .compat import (
    assume_constant_result_of,
    autocast_enabled,
    dynamo_never_traces,
    forward_ad_active,
    functorch_transforms_active,
    grad_transforms_traced,
)
from .registration import _resolve

_NUMBERS = (float, int)  # not bool: the full path refuses a bool for a number


def traced_call(op, args: tuple, launch_dims: Any, output_dims: Any, block_dim: Any, kwargs: dict) -> Any:
    """``op(*args)`` while Dynamo traces it: the registered operator's call, or NOT_EAGER where the
    call goes on to the full path (see the module's docstring)."""
    if kwargs or launch_dims is not None or output_dims is not None or block_dim is not None:
        return NOT_EAGER
    if forward_ad_active() or grad_transforms_traced():
        return NOT_EAGER  # the full path leaves the graph (see _call)
    sig: list[Any] = []
    metas: list[Any] = []  # (dtype, ndim) of each argument: None for a non-tensor
    device = None
    grad = False
    for a in args:
        t = type(a)
        if isinstance(a, torch.Tensor):
            if t is not torch.Tensor and t is not torch.nn.Parameter:
                return NOT_EAGER  # a subclass (DTensor...): the full path
            if a.layout != torch.strided or a.is_nested:
                return NOT_EAGER
            if device is None:
                device = a.device
            elif a.device != device:
                return NOT_EAGER
            rg = a.requires_grad
            grad = grad or rg
            sig.append(rg)
            metas.append((a.dtype, a.dim()))
            continue
        elif t in _NUMBERS:
            sig.append(None)
        elif t is tuple or t is list:
            for c in a:
                if type(c) not in _NUMBERS:
                    return NOT_EAGER
            sig.append(("vec", len(a)))
        else:
            return NOT_EAGER
        metas.append(None)
    grad = grad and torch.is_grad_enabled()
    if grad and functorch_transforms_active():
        return NOT_EAGER
    plan = _traced_plan(op, tuple(sig), grad, bool(autocast_enabled()), tuple(metas))
    if plan is None:
        return NOT_EAGER
    if plan[0] == "refuse":  # ("refuse", position of a vector with a wrong count)
        _refuse(op, plan[1], args[plan[1]])
    if plan[0] == "refuse-array":  # ("refuse-array", position of a tensor of another dtype or ndim)
        refuse_unfit_tensors(op, _BINDINGS[op.description.name], args)
    qual, vectors, inners = plan
    for pos, inner in inners:  # (a vec/mat array's trailing dims: compared here, where they may be symbols)
        if not _trailing(args[pos].shape, inner):
            refuse_unfit_tensors(op, _BINDINGS[op.description.name], args)
    if vectors:
        call = list(args)
        for pos, ints, lo, hi in vectors:
            # vector_components' checks of Python numbers, here on the trace's own values (a float
            # Dynamo made dynamic is a symbol: these comparisons guard it as the full path's would)
            comps = call[pos]
            for c in comps:
                if (ints and type(c) is float) or (
                    lo is not None and not lo <= c <= hi and c == c and abs(c) != math.inf
                ):
                    # refused here, in the eager call's words: the full path's check of a float
                    # (NumPy's) is not traceable, and would leave a fullgraph trace unnamed
                    _refuse(op, pos, comps)
            call[pos] = list(comps)
        return _OVERLOADS[qual](*call)
    return _OVERLOADS[qual](*args)


@assume_constant_result_of  # run at trace time; its result a constant of the graph
def _traced_plan(op, sig: tuple, grad: bool, autocast: bool, metas: tuple = ()) -> tuple | None:
    """``(qualified name of the operator, ((position, integers only, min, max), ...) of the vector
    values)`` for a call of ``op`` whose arguments ``sig`` describes (a tensor: its
    ``requires_grad``; a number: None; a flat tuple or list of numbers: ``("vec", length)``), or
    None where the full path takes the call: also where a tensor's dtype or number of dims
    (``metas``) does not fit its array parameter, so that the full path raises the op's error
    where the call is traced (the registered operator would raise it inside torch's fake-tensor
    call, wrapped in torch's own error, also without ``fullgraph``)."""
    if op._structs is not None:
        return None
    try:
        _resolve(op, None, "functional")
        b = _BINDINGS[op.description.name]
        if b.inout_pos or len(sig) != b.ncall or (autocast and b.autocast):
            return None
        for pos in range(b.ncall):
            p = b.call_params[pos]
            if p.is_array and not isinstance(sig[pos], bool):
                return None
            if p.is_array and metas and not _fits(p, _torch_dtype_of(p), *metas[pos]):
                return ("refuse-array", pos)
        mask = []
        vectors = []
        for pos in b.scalar_pos:
            s, p = sig[pos], b.call_params[pos]
            is_tensor = isinstance(s, bool)
            if is_tensor and s and grad:
                return None  # a scalar's gradient: the full path refuses it or runs the Function
            mask.append(is_tensor)
            if is_tensor:
                continue
            if (s is None) == bool(p.inner):
                return None  # a number for a vector, or a sequence for a number: the full path's error
            if s is not None:
                if s[1] != math.prod(p.inner):
                    # a wrong count (a matrix as rows: the full path, which reads them)
                    return None if len(p.inner) > 1 else ("refuse", pos)
                ints = not is_float(p.scalar) and not p.generic
                rng = None if p.generic else _VALUE_RANGES.get(p.scalar)
                lo, hi = (None, None) if rng is None else (rng[0], rng[1])
                vectors.append((pos, ints, lo, hi))
        inners = tuple(
            (pos, p.inner) for pos, p in enumerate(b.call_params) if p.is_array and p.inner and not p.generic
        )
        return _resolve(op, tuple(mask), "functional"), tuple(vectors), inners
    except InteropError:
        return None  # refused: the full path raises it where the call is traced


def refuse_unfit_tensors(op, b, args) -> None:
    """While Dynamo traces the full path: raise the eager call's error for a tensor whose dtype or
    number of dims does not fit its array parameter, where the call is traced (the registered
    operator would raise it inside torch's fake-tensor call, wrapped in torch's own error)."""
    for pos, p in enumerate(b.call_params):
        a = args[pos]
        if (
            p.is_array
            and isinstance(a, torch.Tensor)
            and not _fits(p, _wanted_dtype(op, pos), a.dtype, a.dim(), tuple(a.shape))
        ):
            raise ArgumentError(_array_refusal(op, pos, a.dtype, a.dim()))


@assume_constant_result_of
def _array_refusal(op, pos: int, dtype, ndim: int) -> str:
    """The message refusing a tensor of ``dtype`` with ``ndim`` dims at ``pos``, which :func:`_fits`
    found unfit, at trace time: the eager call's, less the shape (which may be a symbol here).
    Without ``fullgraph`` the call then runs eagerly and raises the eager call's own error."""
    b = _BINDINGS[op.description.name]
    p = b.call_params[pos]
    name = str(dtype).replace("torch.", "")
    return f"op {b.label!r}, parameter {p.name!r}: expected {p.expected_text()}, got a {ndim}-d tensor of dtype {name}"


def _fits(p, want, dtype, ndim: int, shape: tuple | None = None) -> bool:
    """Whether a tensor of ``dtype`` with ``ndim`` dims (and ``shape``, where given: its trailing
    vec/mat dims) can be array parameter ``p``'s argument (whose torch dtype is ``want``, None where
    unknown) as far as these tell (generic and struct parameters: the registered operator decides)."""
    if p.generic:
        return True
    if ndim != p.framework_ndim:
        return False
    if shape is not None and p.inner and not _trailing(shape, p.inner):
        return False
    return want is None or want == dtype


def _trailing(shape, inner: tuple) -> bool:
    """Whether ``shape`` ends in ``inner``, compared one dimension at a time (Dynamo 2.11 cannot
    compare a tuple of sizes with another)."""
    off = len(shape) - len(inner)
    if off < 0:
        return False
    for k, n in enumerate(inner):
        if shape[off + k] != n:
            return False
    return True


def _torch_dtype_of(p) -> Any:
    """The torch dtype of array parameter ``p``'s elements, or None (generic, struct, no NumPy type)."""
    try:
        return _NP_TO_TORCH.get(np.dtype(np_dtype(p.scalar)))
    except Exception:  # (a type NumPy has no dtype for: the registered operator decides)
        return None


@assume_constant_result_of
def _wanted_dtype(op, pos: int) -> Any:
    """:func:`_torch_dtype_of` the parameter at ``pos``, at trace time (NumPy is not traceable)."""
    return _torch_dtype_of(_BINDINGS[op.description.name].call_params[pos])


def _refuse(op, pos: int, value) -> None:
    """Raise the eager call's error for the vector value ``value`` at ``pos``. Its components must
    be constants of the trace: a value Dynamo made dynamic (a number passed to the compiled function
    that changed between calls) is refused by torch instead (a graph break: without ``fullgraph``
    the call then runs eagerly, and raises this error)."""
    raise ArgumentError(_vector_refusal(op, pos, tuple(value)))


@assume_constant_result_of
def _vector_refusal(op, pos: int, value: tuple) -> str:
    """The eager call's message refusing the vector value ``value`` at ``pos``."""
    b = _BINDINGS[op.description.name]
    try:
        vector_components(b.desc, b.call_params[pos], list(value))
    except ArgumentError as e:
        return str(e)
    raise AssertionError(
        f"{b.label}: the value {value!r} of parameter {b.call_params[pos].name!r} was refused when traced"
    )


def install() -> bool:
    """Make the core's ``Op.__call__`` try :func:`traced_call` while Dynamo traces. Returns True: on
    every supported torch Dynamo passes the op to :func:`_traced_plan` (torch 2.11 as its id, found
    again in ``compat._LIVE``, which every registration fills)."""
    from interop import _op as core

    core._traced_call = traced_call
    core._compiling = torch.compiler.is_compiling
    # Dynamo still traces a call inlined into a compiled function (the above); a call it meets as
    # a frame of its own (the user's frame skipped, or run eagerly after a graph break inside a
    # torch.func transform) runs eagerly, as without torch.compile, instead of being compiled
    # frame by frame down the call path (torch 2.14 then reused those frames' graphs wrongly)
    dynamo_never_traces(core.Op.__call__)
    return True
