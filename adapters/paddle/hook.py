"""Remembered signatures: the op's eager hook (``Op.eager_paths``) runs a call whose signature
passed every check before through that signature's generated code (``eager.py``)."""

from __future__ import annotations

import operator
import weakref
from types import MappingProxyType
from typing import Any, Sequence

import paddle

from interop import _cache
from interop._description import IN_OUT
from interop._launch import contiguous_strides
from interop._op import NOT_EAGER
from interop._plan import check_layout

from .amp import would_cast
from .autograd import (
    _adjoint_launcher,
    _adjoint_recorded,
    _backward,
    _backward_op,
    _grad_order,
    _guarded,
    _OpLayer,
    second_backward_error,
)
from .compat import allocation as _allocation
from .compat import allocation_like as _allocation_like
from .compat import autocast_enabled as _autocast_enabled
from .compat import cpu_only as _cpu_only
from .compat import grad_enabled_c as _grad_enabled_c
from .compat import place_key as _place_key
from .eager import Remembered, fast_entry, hook_code, signature_code
from .framework import _PADDLE_OF_NP, FRAMEWORK, _current_stream, _place

# ---- remembered signatures: the eager hook ------------------------------------------------
# A plain eager call (Paddle tensors and Python numbers, no in-out parameter, no launch_dims or
# output_dims) whose argument signature a call through ``call`` validated before skips the
# framework detection and the checks: ``Op.__call__`` finds the op's hook by the argument's
# type (``Op.eager_paths``), and the hook runs the signature's written-out forward directly,
# or the signature's own PyLayer when a gradient is to be recorded (adapters/paddle/eager.py);
# an op with a hand-written backward runs the forward inside the general ``_OpLayer`` node.
_TENSOR_TYPES = (paddle.Tensor, type(paddle.to_tensor(0.0)), paddle.base.framework.EagerParamBase)
_PLAIN_NUMBERS = (float, int, bool)
_NO_IN_OUT = MappingProxyType({})
_CPU_ONLY = _cpu_only()


class _Signature:
    """One validated call signature of an op: its plan, recorded launch, and what its calls need."""

    __slots__ = (
        "_op",
        "plan",
        "device",
        "cuda",
        "arrays",
        "scalars",
        "template",
        "outs",
        "single",
        "kept",
        "nondiff",
        "grad",
        "visible",
        "need",
        "tensor_pos",
        "grad_order",
        "grad_allocs",
        "any_grad",
        "take",
        "_go_adj",
        "forward",
        "layer",
        "fast",
        "half",
        "saved_layout",
    )

    def __init__(self, op, args: Sequence[Any], plan, device: str):
        desc = op.description
        # the op weakly: Paddle (3.3.1) never frees a PyLayer class once applied, and this
        # signature's class reaches the signature (its backward's code): the op, dropped, is freed
        self._op = weakref.ref(op)
        self.plan, self.device = plan, device
        self.cuda = device != "cpu"
        arrays, scalars, need = [], [], {}
        for pos, (p, x) in enumerate(zip(desc.call_params, args)):
            if not p.is_array:
                scalars.append((pos, p.index))
                continue
            strides = None
            if not x.is_contiguous():
                ptr, st, isz = FRAMEWORK.layout(x)
                strides = check_layout(desc, p, tuple(x.shape), st, isz)
            arrays.append((pos, p.index, strides))
            need[p.index] = p.differentiable and not x.stop_gradient
        self.arrays, self.scalars = tuple(arrays), tuple(scalars)
        self.template = [None] * len(desc.params)
        place = _place(device)
        # (index, fn, args, like): the output is fn(args[like], *args) (like an argument of its
        # shape: _C_ops.empty_like/full_like) or fn(*args) (like None)
        shapes = {tuple(args[pos].shape): pos for pos, _, _ in reversed(arrays)}
        outs = []
        for p, spec, zero in zip(desc.returned_params, plan.out_specs, plan.zero):
            dtype = _PADDLE_OF_NP[spec.dtype]
            like = shapes.get(tuple(spec.shape))
            how = _allocation_like(dtype, place, zero) if like is not None else None
            if how is None:
                outs.append((p.index, *_allocation(list(spec.shape), dtype, place, zero), None))
            else:
                outs.append((p.index, *how, like))
        self.outs = tuple(outs)
        self.single = len(self.outs) == 1
        # the outputs the node keeps for the adjoint: those Warp's adjoint may read (see
        # Runner.unread_outputs); the others are neither saved nor read again
        unread = plan.runner.unread_outputs
        self.kept = tuple(j for j, (idx, _, _, _) in enumerate(self.outs) if idx not in unread)
        self.nondiff = tuple(j for j, p in enumerate(desc.returned_params) if not plan.differentiable[p.index])
        # as _call_grad: the node is recorded when a differentiable parameter's tensor has stop_gradient=False
        self.grad = any(need.values())
        self.visible = tuple(need)
        self.need = need
        self.tensor_pos = tuple(pos for pos, _, _ in arrays)
        # for the adjoint (_backward): upstream gradients' order, the zero-filled gradients to allocate
        self.grad_order = _grad_order(desc)
        # (fn, args, like): a zero-filled gradient is fn(tensor, *args) (like: _C_ops.full_like of
        # the tensor it is the gradient of) or fn(*args)
        self.grad_allocs = tuple(
            (
                (*like, True)
                if (like := _allocation_like(args[pos].dtype, place, True)) is not None
                else (*_allocation(list(args[pos].shape), args[pos].dtype, place, True), False)
            )
            if need[idx] and plan.differentiable[idx]
            else None
            for pos, idx, _ in arrays
        )
        self.any_grad = any(a is not None for a in self.grad_allocs)
        self.saved_layout = _saved_layout(args, arrays, plan, self.kept)
        self.take = operator.itemgetter(*self.tensor_pos) if len(self.tensor_pos) > 1 else None
        self._go_adj = None
        # the call written out (adapters/paddle/eager.py): forward, adjoint, and the PyLayer that
        # runs them (a hand-written backward keeps the general node, _OpLayer)
        layer = self.grad and desc.backward is None
        self.forward, self.layer = signature_code(
            self,
            len(args),
            f"{desc.label}_eager",
            _current_stream,
            _recorded(self) if layer else None,
            _general_backward(self) if layer else None,
        )

    def same_saved_layout(self, saved: Sequence[Any]) -> bool:
        """Whether the node's saved tensors, as its backward got them, have the layout the
        signature's adjoint reads them in (sizes, strides, dtype). Saved-tensor hooks
        (``paddle.autograd.saved_tensors_hooks``) may hand the backward other tensors (copies,
        another layout or dtype): the adjoint would read them as the forward's (a wrong gradient, a
        read out of bounds), so such a backward takes the general adjoint over the tensors it got
        (:func:`autograd._backward`), which reads their layout or refuses their dtype."""
        for t, (shape, strides, dtype) in zip(saved, self.saved_layout):
            if t.strides != strides or t.shape != shape or (t.dtype is not dtype and t.dtype != dtype):
                return False
        return True

    @property
    def op(self):
        """The op (alive while it is called: the hook reaching this signature is the op's own)."""
        return self._op()

    @property
    def go_adj(self):
        """The recorded adjoint launch (made on the first backward)."""
        g = self._go_adj
        if g is None:
            g = self._go_adj = _adjoint_launcher(self.plan, self.device)
        return g

    def run(self, args: Sequence[Any]) -> tuple[list, list]:
        """One call (the generated forward). Returns (outputs, launch values): the values hold
        the scalars; the adjoint reads the pointers again from the saved tensors."""
        res = self.forward(*args)
        vals = self.template.copy()
        for pos, idx in self.scalars:
            vals[idx] = args[pos]
        return ([res] if self.single else list(res)), vals


class _SigCall:
    """The node state (as :class:`_State`) of one call of a remembered signature: the signature's
    fields, this call's arguments and launch values. The arguments are kept as given: the tensors
    among them are the node's saved tensors anyway, and the backward reads them from those."""

    __slots__ = ("sig", "args", "values", "context")
    launch_dims = output_dims = None
    in_out = _NO_IN_OUT
    op = property(lambda self: self.sig.op)
    plan = property(lambda self: self.sig.plan)
    device = property(lambda self: self.sig.device)
    visible = property(lambda self: self.sig.visible)
    need_grad = property(lambda self: self.sig.need)
    out_specs = property(lambda self: self.sig.plan.out_specs)

    def __init__(self, sig: _Signature, args: Sequence[Any]):
        self.sig, self.args = sig, args


def _apply(sig: _Signature, args: Sequence[Any]):
    """A remembered signature's call as an autograd node (what _call_grad does, precomputed)."""
    take = sig.take
    state = _SigCall(sig, args)
    tensors = [args[i] for i in sig.tensor_pos] if take is None else take(args)
    return _guarded(_OpLayer.apply(state, *tensors), state, sig.plan.desc.label)


def _recorded(sig: _Signature):
    """A remembered signature's backward when Paddle records it (``create_graph=True``): the
    general node's, which refuses a second derivative through Warp's adjoint."""

    def recorded(args: tuple, saved: tuple, grads: tuple):
        state = _SigCall(sig, args)
        vals = sig.template.copy()
        for pos, idx in sig.scalars:
            vals[idx] = args[pos]
        state.values = vals
        return _adjoint_recorded(state, saved, grads)

    return recorded


def _general_backward(sig: _Signature):
    """A remembered signature's backward over saved tensors in another layout than its forward's
    (saved-tensor hooks, see :meth:`_Signature.same_saved_layout`): the general node's adjoint,
    which reads each tensor's own layout."""

    def general(args: tuple, saved: tuple, grads: tuple):
        return _backward(_SigCall(sig, args), saved, grads)

    return general


def _saved_layout(args: Sequence[Any], arrays: list, plan, kept: tuple) -> tuple:
    """The sizes, element strides and dtype the adjoint reads a signature's saved tensors in: the
    tensor arguments, then the outputs it keeps (packed); see ``_Signature.same_saved_layout`` (a
    dtype is compared by identity first: Paddle 3.3's are singletons, 3.2's are not and compare
    equal)."""
    specs = plan.out_specs
    return tuple((list(args[pos].shape), list(args[pos].strides), args[pos].dtype) for pos, _, _ in arrays) + tuple(
        (list(specs[j].shape), list(contiguous_strides(specs[j].shape, 1)), _PADDLE_OF_NP[specs[j].dtype]) for j in kept
    )


def _make_hook(op):
    """The eager hook of one op (``Op.eager_paths``), with the op's remembered signatures; its
    ``key_of`` is the signature key (both written out for the op's parameters)."""
    signatures = Remembered()  # _Signature by key
    calls = [0]  # calls the hook ran (tests read it to tell the paths apart)
    env = {
        "TT": _TENSOR_TYPES,
        "PN": _PLAIN_NUMBERS,
        "PK": _place_key,
        "NOT_EAGER": NOT_EAGER,
        "dynamic": paddle.in_dynamic_mode,
        "grad_enabled": _grad_enabled_c(),
        "signatures": signatures,
        "calls": calls,
        "general": _apply,
        "guard": second_backward_error,
        "LABEL": op.description.label,
        "autocast": _autocast_enabled,
    }
    # a Paddle built for the CPU only has every tensor there: its keys need not read places
    hook, key_of = hook_code(op.description, env, places=not _CPU_ONLY)
    hook.signatures, hook.calls, hook.key_of = signatures, calls, key_of
    # the hand-written backward's op lives as long as the op (_backward_ops holds it weakly)
    hook.backward_op = None if op.description.backward is None else _backward_op(op.description.backward)
    return hook


def _register(op) -> None:
    """Give ``op`` its Paddle eager hook (once; when it is described or bound, never on a call)."""
    if paddle.Tensor not in op.eager_paths:
        hook = _make_hook(op)
        for t in _TENSOR_TYPES:
            op.eager_paths[t] = hook


def _remember(op, args: Sequence[Any]) -> None:
    """After a call that passed every check: its signature's later calls take the hook."""
    hook = op.eager_paths.get(paddle.Tensor)
    if hook is None:
        return
    signatures = hook.signatures
    key = hook.key_of(args)
    if key is None or key in signatures or len(signatures) >= _cache.FAST_PATHS_PER_OP:
        return
    desc = op.description
    params = desc.call_params
    if len(args) != len(params) or any(p.role == IN_OUT for p in params):
        return
    specs, device = [], None
    for p, x in zip(params, args):
        if p.is_array != (type(x) in _TENSOR_TYPES):
            return  # a 0-d tensor for a scalar: the full path
        if p.is_array:
            specs.append(FRAMEWORK.spec(x))
            device = device or FRAMEWORK.device(x)
        else:
            specs.append(FRAMEWORK.scalar_spec(op, p, x)[0])
    if device is None:
        return
    sig = _Signature(op, args, op.plan(specs), device)
    sig.fast = fast_entry(key, sig, not _CPU_ONLY, args)
    # half-precision tensors auto_cast would cast (a generic kernel's bfloat16 call): under
    # auto_cast the hook leaves such a call to the full path, which casts it
    sig.half = would_cast(op, args)
    signatures[key] = sig
