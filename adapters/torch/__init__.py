"""PyTorch adapter: every op is a registered ``torch.library.custom_op``.

Calling an :class:`interop.Op` with torch tensors goes through a real custom operator,
``torch.ops.<namespace>.<name>`` (the name is ``op.name``, ``"namespace::name"``), so
``torch.compile``, autograd, ``torch.func`` and ``torch.library.opcheck`` treat it as a
first-class operator:

- **Registration** happens when an op is described while torch is imported (the core
  calls :func:`on_describe`), else on the first call. A registration first reached while
  Dynamo traces runs at trace time (``torch.compiler.assume_constant_result``), so it never
  breaks the graph. That mark, like every piece of Dynamo and DTensor the adapter uses, is set
  when torch imports Dynamo (DTensor) and not before: a plain eager call leaves ``torch._dynamo``,
  ``torch._inductor`` and ``torch.distributed.tensor`` unimported (``_common.after_import``).
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
  which is differentiable in turn (second order).
- **Forward mode and second order** (``torch/forward_mode.py``): from the op's tangent op
  (:meth:`interop.Op.tangent`, generated from the kernel's source). Under forward-mode AD and
  ``torch.func`` a call goes through an autograd.Function whose ``jvp`` launches the tangent
  kernel (``torch.func.jvp``, ``jacfwd``, ``hessian``, ``torch.autograd.forward_ad``); the
  backward operator's own derivative (``create_graph=True``, ``gradgradcheck``, forward over
  reverse) comes from the tangent kernel and Warp's adjoint of it (a Python-function op's: its
  function on a tangent tape). Where the generator refuses a kernel, forward mode raises its error
  (the builtin and the line) and so does a second derivative through Warp's adjoint. Third order
  and forward over forward (``jacfwd(jacfwd(f))``) go through the tangent op's own rules. PyTorch's ``custom_op`` has no forward-mode rule: a direct
  ``torch.ops.<ns>.<name>`` call under ``torch.func.jvp`` gives a zero tangent (with
  ``forward_ad`` dual tensors it raises); calls through the op object carry tangents. Under
  ``torch.compile`` a forward-mode call is a graph break (the transform runs eagerly).
- **vmap** (``register_vmap``): a loop over the batch, correct for every kernel.
- **Speed**: each operator caches, per input signature (shapes, strides, dtypes, device),
  the validated plan, the launch record and the forward/adjoint implementation written out
  for that signature (``adapters/torch/eager.py``), so a repeated call only reads pointers.
- **Eager fast path.** A call that nothing traces or intercepts (every tensor a plain
  ``torch.Tensor``, not compiling, no torch.func transform, no TorchDispatchMode or
  TorchFunctionMode, not ``torch.jit.trace``: ``_torch_compat.plain_eager``) skips the
  dispatcher: it runs the operator's own implementation directly and, when a gradient is
  needed, through a cached ``torch.autograd.Function`` whose backward calls the backward
  operator's implementation. Once a signature has been validated, later calls with it are
  found by ``interop.Op.eager_paths`` before any other work. Everything else calls the
  registered operator. The profiler still sees the operator's name (a ``record_function``
  label, paid only while a profiler records).
- **Autocast** (``adapters/torch/autocast.py``): under ``torch.autocast`` half-precision inputs of
  float32/float64 parameters are cast up, as torch's own float32-policy operators do; outside it
  nothing is ever cast.
- **DTensor** (``adapters/torch/sharding.py``): every operator carries a sharding strategy
  derived from the op's ``partition=`` declaration (see the README, "Scaling out with PyTorch").

The adapter's rooms, imported one way (each from those above it only):

- ``torch/compat.py``: the torch internals it needs, versions checked;
- ``torch/eager.py``: the per-signature forward and adjoint, written out as code;
- ``torch/autocast.py``: ``torch.autocast``'s casts (an op is a float32-policy operator);
- ``torch/binding.py``: dtypes, schemas, validated entries, the operators' implementation and fake;
- ``torch/autograd.py`` (setup_context, backward, torch.func Functions), ``torch/vmap.py``,
  ``torch/sharding.py`` (DTensor strategies);
- ``torch/eager_path.py``: the fast path for plain eager calls;
- ``torch/registration.py``: ``torch.library.custom_op`` registration of every rule;
- this module: the call path (``op(tensors)``) and the public functions.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np
import torch

from interop import _dtypes
from interop._description import IN_OUT, Param
from interop._errors import ArgumentError, UnsupportedError
from interop._plan import footprint, refuse_overlaps
from interop._values import vector_components

from .._common import pack_result, unexpected_keywords
from . import autocast as _autocast
from . import forward_mode as _forward_mode
from . import sharding as _torch_sharding
from . import traced as _traced
from .autograd import _apply, _backward_call, _check_grad_supported, _function_class
from .binding import _BINDINGS, _NP_TO_TORCH, _OVERLOADS, _Binding, _current_stream  # noqa: F401  (_current_stream: tests)
from .compat import (
    any_wrapped,
    assume_constant_result_of,
    autocast_enabled,
    forward_ad_active,
    functorch_grad_levels,
    functorch_transforms_active,
    grad_transforms_traced,
    leave_graph,
    plain_eager,
    remember,
    unwrap_dead,
)
from .eager_path import _EAGER_DEVICES, _eager_apply, _eager_forward, _remember_signature, _signature  # noqa: F401
from .registration import _binding, _resolve, variant

__all__ = ["bind", "call", "on_describe", "operators"]


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
# the call path: op(tensors) -> registered operator
# ---------------------------------------------------------------------------------------
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
    return _call(op, args, launch_dims, output_dims, False)


def _call_functional(op, args: Sequence[Any], launch_dims: Any, output_dims: Any) -> tuple:
    """Every returned array of a call of ``op`` (kernel order), in-out values as new tensors: the
    caller's in-out tensors are left as they are (forward mode calls tangent ops so, see
    ``torch/forward_mode.py``: under torch.func an in-out tensor may be batched where its value is not)."""
    res = _call(op, args, launch_dims, output_dims, True)
    return res if isinstance(res, tuple) else (res,)


def _call_adjoint(
    op,
    args: Sequence[Any],
    results: Sequence[Any],
    grads: Sequence[Any],
    needs: Sequence[bool],
    launch_dims,
    output_dims,
) -> list:
    """Warp's adjoint of a call of ``op`` (its backward operator, through its Function where a transform
    may differentiate it): the gradients of the call arguments ``needs`` marks, in order. ``results``:
    every returned array of the call; ``grads``: one upstream gradient per returned array."""
    _resolve(op, None, "functional")
    b = _BINDINGS[op.description.name]
    mask, sargs = _scalar_args(b, args)
    qual = _resolve(op, mask, "backward")
    ld = _sym_dims(launch_dims, "launch_dims", b.label)
    ods = _normalize_output_dims(b, output_dims)
    return _backward_call(b, mask, qual, (*sargs, *results, *grads, ld, *ods, list(needs)))


_forward_mode.FRONT["call_functional"] = _call_functional
_forward_mode.FRONT["call_adjoint"] = _call_adjoint


def _scalar_args(b: _Binding, args: Sequence[Any]) -> tuple[tuple, list]:
    """Which scalar parameters are tensors (the operator's signature), and the arguments as the
    operator takes them (vec/mat values as flat components, NumPy numbers as Python numbers)."""
    sargs = list(args)
    mask = []
    for pos in b.scalar_pos:
        x = args[pos]
        if b.call_params[pos].inner and isinstance(x, (tuple, list)) and torch.compiler.is_compiling():
            x = sargs[pos] = _components_tensor(b, b.call_params[pos], x)
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
                if isinstance(x, (tuple, list)):
                    sargs[pos] = vector_components(b.desc, p, x)
                else:
                    # a Warp value (wp.vec3): Dynamo cannot read a ctypes array; under torch.compile its
                    # components are read at trace time, the object guarded by identity (see the torch
                    # guide); eager calls go through the same function (torch 2.11 finds the object so)
                    sargs[pos] = list(_traced_vector_components(x, b.desc.name, pos))
            elif isinstance(x, np.generic):
                sargs[pos] = x.item()
    return tuple(mask), sargs


def _call(op, args: Sequence[Any], launch_dims: Any, output_dims: Any, functional: bool) -> Any:
    """One call of ``op`` with torch tensors: checked, then run by the eager fast path, the
    autograd.Function (transforms, forward mode) or the registered operator; in-out tensors
    updated in place unless ``functional``."""
    if torch.compiler.is_compiling():
        if forward_ad_active():
            # Dynamo cannot trace an autograd.Function's jvp rule: the call leaves the graph (a graph
            # break; under torch.func.jvp/jacfwd/hessian the whole transform then runs eagerly). Measured
            # on torch 2.13: with the Function traced (its class made before), Dynamo keeps its forward
            # and drops its jvp, and the compiled tangent is wrong, so fullgraph=True must raise
            return _call_eagerly(op, args, launch_dims, output_dims, functional)
        if grad_transforms_traced():
            # torch.func.grad/vjp/jacrev compiled: the traced tensors say requires_grad=False, so the
            # call would take the registered operator, whose custom_op autograd Function torch refuses
            # under a transform (no setup_context); eagerly the op runs its own Function (torch 2.13+:
            # compat.grad_transforms_traced)
            return _call_eagerly_reverse(op, args, launch_dims, output_dims, functional)
    # first: registers the op if needed (at trace time under Dynamo), so that the binding
    # read below already exists when Dynamo first reads the registry
    base = _resolve(op, None, "functional")
    b = _BINDINGS[op.description.name]
    if len(args) != b.ncall:
        raise ArgumentError(
            f"op {b.label!r} takes {b.ncall} argument(s) {[p.name for p in b.call_params]} "
            f"(outputs are returned, not passed), got {len(args)}"
        )
    if b.autocast and autocast_enabled():
        args = _autocast.cast(b, args)  # torch.autocast: an op is a float32-policy operator
    if torch.compiler.is_compiling():
        _traced.refuse_unfit_tensors(op, b, args)
    device, grad = _tensor_args(b, args)
    if grad and b.inout_pos and not functional:
        args = _inputs_sharing_in_outs_copied(b, args)
    mask, sargs = _scalar_args(b, args)
    if (
        not grad
        and (functional or not torch.compiler.is_compiling())
        and torch.is_grad_enabled()
        and functorch_grad_levels()
    ):
        # a call inside a vmap inside a reverse-mode transform (grad(vmap(op)), jacrev(jacfwd(f))):
        # the batched tensors hide that the transform tracks them; the Function serves both cases
        # (the registered operator's autograd under the vmap rule is not functorch's). (Read while
        # Dynamo traces only for forward mode's calls: Dynamo cannot trace the interpreter stack.)
        grad = True
    if grad:
        _check_grad_supported(b, args)
    _append_call_dims(b, launch_dims, output_dims, sargs)
    qual = base if mask == b.base_mask else _resolve(op, mask, "functional")
    eager, args, sargs = _eager_path(device, args, sargs)
    # forward-mode AD: the operator would drop the tangents; the Function's jvp computes them
    forward_ad = not eager and forward_ad_active()
    # an in-out DTensor: the functional operator and a copy_ into it, which DTensor redistributes
    # (the mutating operator would need the array where it lies, which an undeclared op cannot take)
    if (
        b.inout_pos
        and not functional
        and not grad
        and not forward_ad
        and not _torch_sharding.any_dtensor(args, b.inout_pos)
        and not _lazily_viewed(args, b.inout_pos)
        # torch.export keeps the functional operator and a copy_ (autograd's when the program
        # runs with gradients); its functionalized in-place operator would drop them
        and not torch.compiler.is_exporting()
    ):
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
        res = _apply(_function_class(b, mask, qual), sargs)
    else:
        res = _OVERLOADS[qual](*sargs)
    if not b.inout_pos or functional:
        return res
    return _update_in_out(b, args, res)


def _tensor_args(b: _Binding, args: Sequence[Any]) -> tuple[Any, bool]:
    """``(the tensors' device or None, whether a gradient is asked)``; refuses a tensor the op
    cannot read, tensors on two devices, and a non-tensor for an array parameter."""
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
    return device, grad and torch.is_grad_enabled()


def _append_call_dims(b: _Binding, launch_dims: Any, output_dims: Any, sargs: list) -> None:
    """Append the per-call ``launch_dims`` and ``output_dims`` to the operator's arguments."""
    ld = _sym_dims(launch_dims, "launch_dims", b.label)
    if ld is not None and b.desc.kind == "function":
        raise ArgumentError(
            f"op {b.label!r}: launch_dims does not apply to a Python-function op (it launches its own kernels); "
            "use output_dims to size its outputs"
        )
    if ld is not None or output_dims is not None:
        sargs.append(ld)
        sargs.extend(_normalize_output_dims(b, output_dims))


def _eager_path(device: Any, args: Sequence[Any], sargs: list) -> tuple[bool, Sequence[Any], list]:
    """Whether the call is plain eager work on real memory that skips the dispatcher (see
    _eager_forward; meta tensors and other devices reach the operator: its fake implementation,
    or its error), with the arguments it then reads."""
    eager = (device is None or device.type in _EAGER_DEVICES) and plain_eager(args)
    if eager and any_wrapped(args):
        # a tensor kept from inside a torch.func transform that has exited (a "dead" wrapper, no
        # storage of its own): torch's operators read the tensor inside it, so does the fast path
        args, sargs = unwrap_dead(args), unwrap_dead(sargs)
    if eager and any(isinstance(x, torch.Tensor) and (x.is_neg() or x.is_conj()) for x in args):
        # a lazily negated/conjugated view (z.conj().imag): its memory holds other values than the
        # tensor's; the operator's dispatcher resolves it before the kernel runs
        eager = False
    return eager, args, sargs


def _lazily_viewed(args: Sequence[Any], positions: Sequence[int]) -> bool:
    """Whether an in-out tensor is a lazily negated/conjugated view (``z.conj().imag``): the
    mutating operator cannot write it (torch's fallback for such views expects the written tensor
    back: "Expected Tensor but got None"); the functional operator and a ``copy_`` into it can.
    (Not read while Dynamo traces: ``is_neg`` is not traceable, and a compiled graph is functional.)"""
    if torch.compiler.is_compiling():
        return False
    return any(isinstance(args[i], torch.Tensor) and (args[i].is_neg() or args[i].is_conj()) for i in positions)


def _inputs_sharing_in_outs_copied(b: _Binding, args: Sequence[Any]) -> Sequence[Any]:
    """The arguments of a call with autograd (the functional operator, then a ``copy_`` into each
    in-out tensor), where an input lies in the same memory as an in-out tensor (``op(b[1:6],
    b[0:5])``, or ``op(s[:, 0], s[:, 1])``): that input cloned (a differentiable copy). The kernel
    reads the values from before the call either way; the copy keeps the tensor the backward saved
    from being overwritten, or marked overwritten, by the ``copy_`` (views of one tensor share its
    version counter: torch's "modified by an inplace operation" at the backward, or when
    ``torch.compile`` traces it). Two in-out tensors sharing an element are refused: one's new values
    would overwrite the other's. Eagerly, tensors are compared by storage; while Dynamo traces (no
    storage to read), by the tensor they are views of."""
    compiling = torch.compiler.is_compiling()

    def home(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.numel() == 0:
            return None
        if compiling:
            return x if x._base is None else x._base
        try:
            return x.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):  # (no storage: a wrapped tensor; the transform copies)
            return None

    homes = [home(args[pos]) for pos in range(b.ncall)]
    copied: list[Any] | None = None
    for k in b.inout_pos:
        for pos in range(b.ncall):
            hk, hp = homes[k], homes[pos]
            if pos == k or hk is None or hp is None or not (hk is hp if compiling else hk == hp):
                continue
            if pos in b.inout_pos:
                if not compiling:
                    refuse_overlaps(b.desc, [_region(b, k, args[k]), _region(b, pos, args[pos])])
                continue
            copied = copied or list(args)
            copied[pos] = args[pos].clone()
            homes[pos] = None
    return args if copied is None else copied


def _region(b: _Binding, pos: int, x: torch.Tensor) -> tuple:
    """``(parameter, pointer, footprint)`` of tensor argument ``x`` (refuse_overlaps)."""
    isz = x.element_size()
    return b.call_params[pos], x.data_ptr(), footprint(tuple(x.shape), [s * isz for s in x.stride()], isz)


def _update_in_out(b: _Binding, args: Sequence[Any], res: Any) -> Any:
    """The functional operator's results copied into the caller's in-out tensors; the returned
    arrays in kernel order (the in-out tensors themselves)."""
    res = res if isinstance(res, tuple) else (res,)
    returned = []
    for p, r in zip(b.returned, res):  # kernel order
        if p.role == IN_OUT:
            t = args[b._pos_of_index(p.index)]
            try:
                t.copy_(r)
            except RuntimeError as e:
                if not functorch_transforms_active():
                    raise
                raise UnsupportedError(  # torch refuses to mutate a tensor a transform captured
                    f"op {b.label!r}, in-out parameter {p.name!r}: inside a torch.func transform the in-out "
                    "tensor must be an input of the transformed function (torch refuses to update a captured "
                    f"tensor in place); pass it as one ({e})"
                ) from e
            returned.append(t)
        else:
            returned.append(r)
    return pack_result(returned)


_call_eagerly = leave_graph(
    _call,
    "warp-interop: forward-mode AD (torch.func.jvp, jacfwd, hessian, forward_ad) of an op runs an "
    "autograd.Function's jvp rule, which Dynamo cannot trace; the transform runs eagerly",
)
_call_eagerly_reverse = leave_graph(
    _call,
    "warp-interop: a torch.func reverse-mode transform (grad, vjp, jacrev) of an op runs the op's "
    "autograd.Function, which Dynamo cannot trace under the transform; the transform runs eagerly",
)


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


# ---------------------------------------------------------------------------------------
# the adapter interface
# ---------------------------------------------------------------------------------------
def on_describe(op) -> None:
    """Register ``op``'s operators now (called by the core when an op is described while torch is imported)."""
    remember(op)  # torch 2.11: found by its id when a trace passes it to a constant function
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
    return variant(b, b.base_mask)[b.primary_kind()]


def operators(op, scalar_tensors: Sequence[str] = ()) -> dict[str, Any]:
    """Every registered operator of ``op`` for one scalar signature, by kind.

    Args:
        op: an ``interop.Op``.
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
    return dict(variant(b, mask))


def _register_described() -> None:
    """Register the ops described before this module was imported (torch imported after them)."""
    from interop import _op as core

    with core._ops_lock:
        ops = list(core._ops.values())
    for o in ops:
        on_describe(o)


_register_described()


@assume_constant_result_of  # torch.compiler.assume_constant_result, with the op passed by identity
def _block_dim_variant(op, block_dim: int) -> int | None:
    """The core's ``_with_block_dim``, run at trace time inside ``torch.compile``: a per-call
    ``block_dim`` first used in a compiled function describes and registers its variant op there
    (locks, ``torch.library`` registration) instead of breaking the graph; its result, an int, is a
    constant of the trace."""
    from interop import _op as core

    return core._with_block_dim(op, block_dim)


def _components_tensor(b: _Binding, p: Param, value: tuple | list) -> Any:
    """A tuple or list vec/mat value with torch tensors among its components (``(a, 2.0, 3.0)``, a
    0-d tensor ``a``), while Dynamo traces: Dynamo cannot read the tensors as numbers; they are read
    as eager calls read them (in the components' dtype, without a gradient: refused otherwise), as
    one tensor of the vector's shape. A value of numbers alone is returned as it is."""
    flat = [c for c in _flat(value)]
    if not any(isinstance(c, torch.Tensor) for c in flat):
        return value
    dtype = _COMPONENT_DTYPES[p.scalar]  # (by Warp type: Dynamo 2.11 cannot hash a NumPy dtype)
    device = next(c.device for c in flat if isinstance(c, torch.Tensor))
    parts = []
    for k, c in enumerate(flat):
        if isinstance(c, torch.Tensor):
            if c.requires_grad:
                raise ArgumentError(
                    f"op {b.label!r}, parameter {p.name!r}: expected {p.expected_text()}: numbers, or a tensor of "
                    f"the vector's shape for a value that is differentiated, got component {k}, a torch tensor "
                    "that requires a gradient (it would get none)"
                )
            if c.dtype != dtype or c.dim() != 0:
                raise ArgumentError(
                    f"op {b.label!r}, parameter {p.name!r}: expected {p.expected_text()}: numbers or 0-d {dtype} "
                    f"tensors, got component {k}, a tensor of dtype {c.dtype} and shape {tuple(c.shape)} (arrays are "
                    "never cast)"
                )
            parts.append(c)
        else:
            parts.append(torch.tensor(float(c), dtype=dtype, device=device))
    return torch.stack(parts).reshape(tuple(p.inner))


_COMPONENT_DTYPES = {w: _NP_TO_TORCH[np.dtype(n)] for w, n in _dtypes._WP_TO_NP.items() if np.dtype(n) in _NP_TO_TORCH}


def _flat(value: Any) -> list:
    return [c for v in value for c in (_flat(v) if isinstance(v, (tuple, list)) else [v])]


@assume_constant_result_of  # the value passed by identity, its components constants of the trace
def _traced_vector_components(value: Any, name: str, pos: int) -> tuple:
    """The components of a vec/mat value given as an object (a Warp ``wp.vec3``, not a tuple or a
    list), which Dynamo cannot read: inside ``torch.compile`` read at trace time, constants of the
    graph, the object guarded by identity (a new object recompiles; one changed in place after
    compiling is not seen)."""
    b = _BINDINGS[name]
    return tuple(vector_components(b.desc, b.call_params[pos], value))


def _install_block_dim_variant() -> None:
    from interop import _op as core

    core._block_dim_variant[0] = _block_dim_variant


_install_block_dim_variant()
_traced.install()  # a call traced by Dynamo: few guards (torch/traced.py)


def _seed_type_cache() -> None:
    """Known before any call is traced: torch.compile's first trace then finds the tensor types and
    Warp's value types in the core's type cache instead of filling it (a guard on the cache that
    failed once: one recompile)."""
    from interop import _frameworks

    _frameworks._type_cache.setdefault(torch.Tensor, "torch")
    _frameworks._type_cache.setdefault(torch.nn.Parameter, "torch")
    _frameworks.seed_warp_values()  # wp.vec3 values etc.: vector parameters in a compiled function


_seed_type_cache()


def _register_indexed() -> None:
    """``interop.indexed(t, idx)`` views are pytree nodes (data, then the indices), so ``torch.vmap``
    maps over their data (``in_dims=interop.indexed(0, None)``) and ``torch.compile`` takes them."""
    from interop._indexed import Indexed

    from .compat import register_pytree

    register_pytree(Indexed, lambda v: ((v.data, v.indices), None), lambda c, _: Indexed(c[0], tuple(c[1])))


_register_indexed()
