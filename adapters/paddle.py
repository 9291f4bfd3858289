"""PaddlePaddle adapter: Paddle tensors in, Paddle tensors out, with Paddle's autograd.

A call reads each tensor's data pointer and strides (``Tensor.data_ptr()``, ``strides``):
no copy and no ``__array__()`` (Warp reading a Paddle tensor through ``__array__`` gets a
temporary that can be freed under it). Outputs and gradients are allocated by Paddle
(a zero-filled tensor on the inputs' place). On CUDA every launch runs on Paddle's current
stream of that device.

Gradients flow through one ``paddle.autograd.PyLayer`` per call:

- only tensors with ``stop_gradient=False`` receive a gradient; outputs are differentiable
  when some input is; nothing is written to ``x.grad`` by the forward;
- the backward runs Warp's adjoint (a ``wp.Tape`` for Python-function ops) or the op's
  hand-written backward, itself called through this adapter so that it can be
  differentiated again; the adjoint path has no second derivative and says so;
- in-out arrays are updated in place and returned as the same tensor; their gradient
  passes through unchanged (the in-out rule of the core), and the update is recorded with
  a Paddle in-place ``add_`` of a zero tensor that carries the op's autograd node, so
  Paddle's own in-place checks (leaf tensors, saved tensors) apply;
- scalars passed as 0-d tensors with ``stop_gradient=False`` get real gradients.

``paddle.jit.to_static``: with ``full_graph=False`` (SOT, the default) Paddle runs the op
eagerly between compiled segments (a graph break), gradients included. Under
``full_graph=True`` Paddle hands over symbolic values with no memory; the call raises a
``TypeError`` naming the op (see docs/guide/paddle.md).
"""

from __future__ import annotations

import operator
import weakref
from types import MappingProxyType
from typing import Any, Sequence
from weakref import ref as _weakref

import numpy as np
import paddle
from paddle.autograd import PyLayer

from interop import _cache, _dtypes
from interop._description import IN_OUT, OUTPUT
from interop._errors import ArgumentError, UnsupportedError
from interop._launch import external_stream
from interop._op import NOT_EAGER, Op
from interop._plan import ArraySpec, check_layout

from ._common import EagerFramework, pack_result, unexpected_keywords
from ._paddle_compat import CONTEXT_DIRECT
from ._paddle_compat import allocation as _allocation
from ._paddle_compat import allocation_like as _allocation_like
from ._paddle_compat import cpu_only as _cpu_only
from ._paddle_compat import empty as _empty
from ._paddle_compat import grad_enabled_c as _grad_enabled_c
from ._paddle_compat import place_key as _place_key
from ._paddle_compat import zeros as _zeros
from ._paddle_eager import Remembered, fast_entry, hook_code, modified_in_place_error, signature_code

# ---- dtypes and places ------------------------------------------------------------------
_NP_OF_PADDLE: dict[Any, np.dtype] = {
    paddle.float16: np.dtype(np.float16),
    paddle.float32: np.dtype(np.float32),
    paddle.float64: np.dtype(np.float64),
    paddle.bfloat16: _dtypes.BFLOAT16,  # NumPy's stand-in: ml_dtypes.bfloat16
    paddle.int8: np.dtype(np.int8),
    paddle.int16: np.dtype(np.int16),
    paddle.int32: np.dtype(np.int32),
    paddle.int64: np.dtype(np.int64),
    paddle.uint8: np.dtype(np.uint8),
    paddle.bool: np.dtype(np.bool_),
}
_PADDLE_OF_NP: dict[np.dtype, Any] = {v: k for k, v in _NP_OF_PADDLE.items()}
# Warp's unsigned types travel as Paddle's signed types of the same width (as wp.to_paddle does)
_PADDLE_OF_NP.update(
    {np.dtype(np.uint16): paddle.int16, np.dtype(np.uint32): paddle.int32, np.dtype(np.uint64): paddle.int64}
)

_places: dict[str, Any] = {}


def _place(device: str):
    p = _places.get(device)
    if p is None:
        p = paddle.CPUPlace() if device == "cpu" else paddle.CUDAPlace(int(device.split(":")[1]))
        _places[device] = p
    return p


def _device_of_place(place) -> str | None:
    if place.is_gpu_place():
        return f"cuda:{place.gpu_device_id()}"
    if place.is_cpu_place():
        return "cpu"
    return None


def _current_stream(device: str):
    """Warp view of Paddle's current CUDA stream on ``device`` (the stream ``wp.stream_from_paddle`` gives)."""
    ps = paddle.device.current_stream(_place(device))
    return external_stream(device, int(ps.stream_base.cuda_stream))


class _Paddle(EagerFramework):
    name = "paddle"

    def is_array(self, x: Any) -> bool:
        return isinstance(x, paddle.Tensor)

    def spec(self, x) -> ArraySpec:
        return ArraySpec(tuple(x.shape), _NP_OF_PADDLE[x.dtype])

    def fast_key(self, args):
        return tuple(
            (tuple(a.shape), a.dtype, tuple(a.strides), a.place) if isinstance(a, paddle.Tensor) else type(a)
            for a in args
        )

    def ptr(self, x) -> int:
        return x.data_ptr()

    def layout(self, x):
        es = x.element_size()
        return x.data_ptr(), tuple(s * es for s in x.strides), es

    def device(self, x) -> str:
        return _device_of_place(x.place)

    def alloc(self, spec: ArraySpec, device: str, zero: bool, elem: Any = None):
        # Paddle's C ``full`` / ``empty``: the cheapest allocations it offers here
        return (_zeros if zero else _empty)(list(spec.shape), _PADDLE_OF_NP[spec.dtype], _place(device))

    def stream(self, device: str, arrays: Sequence[Any]) -> Any:
        if device == "cpu":
            return None
        return _current_stream(device)

    def default_device(self) -> str:
        d = paddle.device.get_device()  # "cpu" or "gpu:0"
        return d.replace("gpu", "cuda") if d.startswith("gpu") else "cpu"


FRAMEWORK = _Paddle()


# ---- argument checks that need the parameter name ------------------------------------------


def _check_args(op, args: Sequence[Any]) -> bool:
    """Reject symbolic values, unsupported dtypes and places, naming the parameter.

    Returns:
        whether some differentiable argument is a tensor with ``stop_gradient=False``.
    """
    desc = op.description
    params = desc.call_params  # a cached property: no hashing of the description per call
    needs_grad = False
    for p, x in zip(params, args):
        if not isinstance(x, paddle.Tensor):
            if type(x).__module__.split(".", 1)[0] == "paddle" and hasattr(x, "shape"):
                raise TypeError(
                    f"op {desc.label!r}, parameter {p.name!r}: got a symbolic Paddle value "
                    f"({type(x).__name__}): the op runs Warp kernels on memory and cannot be part of a static "
                    "Paddle graph (paddle.jit.to_static(full_graph=True) or paddle.enable_static()); use "
                    "paddle.jit.to_static(full_graph=False), where the op runs eagerly between compiled parts"
                )
            continue
        if x.is_sparse():
            raise ArgumentError(
                f"op {desc.label!r}, parameter {p.name!r}: a sparse Paddle tensor has no dense strided memory a "
                "Warp kernel can read; pass a dense tensor (.to_dense())"
            )
        if x.dtype not in _NP_OF_PADDLE:
            raise ArgumentError(
                f"op {desc.label!r}, parameter {p.name!r}: expected {p.expected_text()}, got a Paddle tensor of "
                f"dtype {x.dtype} (not supported by Warp)"
            )
        place = x.place
        if not (place.is_cpu_place() or place.is_gpu_place()):
            raise ValueError(
                f"op {desc.label!r}, parameter {p.name!r}: the tensor is on {place}; Warp runs on the CPU and "
                "CUDA GPUs only: move it with .cpu() or .cuda()"
            )
        if p.differentiable and not x.stop_gradient:
            needs_grad = True
    return needs_grad


# ---- autograd ----------------------------------------------------------------------------
class _State:
    """What the backward needs besides tensors (which travel as saved tensors)."""

    __slots__ = (
        "op",
        "args",
        "launch_dims",
        "output_dims",
        "visible",
        "plan",
        "device",
        "in_shapes",
        "out_specs",
        "need_grad",
        "in_out",
        "sig",
        "values",
        "context",
    )


def second_backward_guard(context, label: str):
    """A gradient hook for a node's first output (see ``_paddle_compat``): Paddle releases a
    PyLayer node's context when ``Tensor.backward`` runs it, and a second backward reaching the
    node would crash the process. The node's hooks run before that: this one raises once the
    context (``context``: a weak reference to it) is gone. ``paddle.grad`` runs copies, which
    keep it."""

    def hook(grad):
        if context() is None:
            raise second_backward_error(label)
        # None: the gradient unchanged

    return hook


def second_backward_error(label: str) -> RuntimeError:
    """The error of :func:`second_backward_guard`."""
    return RuntimeError(
        f"op {label!r}: a second backward through the same call: Paddle releases a PyLayer's "
        "context after Tensor.backward runs it (retain_graph=True notwithstanding), so a second one "
        "would crash the process. Take the gradients in one backward (sum the losses), or use "
        "paddle.grad(..., retain_graph=True), which leaves the graph intact"
    )


def _guarded(res, state, label: str):
    """``res`` (what ``_OpLayer.apply`` returned) with :func:`second_backward_guard` on its first tensor."""
    first = res[0] if isinstance(res, tuple) else res
    if not first.stop_gradient:
        # no input needs a gradient (only an in-out does): the PyLayer made no node, there is
        # nothing to guard, and Paddle crashes registering a hook on such a tensor (SIGSEGV)
        first._register_grad_hook(second_backward_guard(state.context, label))
    return res


def _values(plan, params, tensors: dict, scalars: dict) -> list:
    """Launch values by kernel index from tensors (by param index) and Python scalars."""
    values: list[Any] = [None] * len(plan.desc.params)
    for p in params:
        t = tensors.get(p.index)
        if t is None:
            values[p.index] = scalars.get(p.index)
            continue
        if not p.is_array or t.is_contiguous():
            values[p.index] = (t.data_ptr(), None)  # None: contiguous
            continue
        ptr, strides, itemsize = FRAMEWORK.layout(t)
        values[p.index] = (
            ptr,
            check_layout(plan.desc, p, tuple(t.shape), strides, itemsize, written=p.role == "in_out"),
        )
    return values


class _OpLayer(PyLayer):
    """One op call as a Paddle autograd node.

    ``apply(state, *tensors)``: ``tensors`` are the tensor arguments of role input (arrays and
    0-d scalar tensors), in call order. In-out tensors are not among them: they are updated
    in place here and linked to the graph by the caller (see :func:`_call_grad`).
    Returns the outputs, then one zero "link" tensor per in-out array.
    """

    @staticmethod
    def forward(ctx, state: _State, *tensors):
        state.context = _weakref(ctx)  # for second_backward_guard
        sig = state.sig
        if sig is not None:  # a remembered signature (_SigCall): no in-out parameter
            outs, state.values = sig.run(state.args)
            ctx.state = state
            if sig.single:  # the node's backward runs only when its one output is used: no None gradient
                out = outs[0]
                # the outputs the backward reads (sig.kept; none for a hand-written backward), see below
                _save(ctx, state, tensors, [out.detach() for _ in sig.kept], [sig.outs[j][0] for j in sig.kept])
                if sig.nondiff:
                    ctx.mark_non_differentiable(out)
                return out
            ctx.set_materialize_grads(False)
            _save(ctx, state, tensors, [outs[j].detach() for j in sig.kept], [sig.outs[j][0] for j in sig.kept])
            if sig.nondiff:
                ctx.mark_non_differentiable(*[outs[j] for j in sig.nondiff])
            return tuple(outs)
        ctx.set_materialize_grads(False)
        # the per-signature cache of the no-grad path: validated and planned once, recorded launch
        returned, plan, device = FRAMEWORK.call_with_plan(state.op, state.args, state.launch_dims, state.output_dims)
        desc = plan.desc
        state.plan, state.device = plan, device
        outs, links, nondiff, kept, kept_idx = [], [], [], [], []
        unread = plan.runner.unread_outputs
        for p, r in zip(desc.returned_params, returned):
            if p.role == OUTPUT:
                outs.append(r)
                if p.index not in unread:
                    kept.append(r.detach())
                    kept_idx.append(p.index)
                if not plan.differentiable[p.index]:
                    nondiff.append(r)
            else:
                link = _zeros(r.shape, r.dtype, r.place)
                links.append(link)
                if not plan.differentiable[p.index]:
                    nondiff.append(link)
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        state.out_specs = plan.out_specs
        # The kernel's adjoint replays the forward and may read outputs: keep those it may read
        # (all but Runner.unread_outputs), as detached aliases (same memory and version counter,
        # no graph). Paddle never frees a PyLayer that saves its own output if no backward runs (a
        # reference cycle through C++: about the output's size per call, paddle 3.3.1), and saving
        # it costs 10-30 us. A hand-written backward is called with the inputs and upstream
        # gradients, not the outputs.
        _save(ctx, state, tensors, kept, kept_idx)
        ctx.state = state
        return tuple(outs + links)

    @staticmethod
    def backward(ctx, *grads):
        state: _State = ctx.state
        saved = ctx.saved_tensor()
        if saved and type(saved[0]) is tuple:  # the in-place versions the call saw (see _save)
            (versions, kept_idx), saved = saved[0], saved[1:]
            if any(t._inplace_version() != v for t, v in zip(saved, versions)):
                params = state.plan.desc.params
                names = [f"parameter {params[i].name!r}" for i in state.visible]
                names += [f"output {params[i].name!r}" for i in kept_idx]
                raise modified_in_place_error(state.plan.desc.label, tuple(names), saved, versions)
        if paddle.is_grad_enabled() and state.plan.desc.backward is None:
            return _adjoint_recorded(state, saved, grads)
        return _backward(state, saved, grads)


def _save(ctx, state, tensors: Sequence[Any], kept: Sequence[Any], kept_idx: Sequence[int]) -> None:
    """Save the tensor arguments and the outputs the adjoint reads (``kept``, of parameters
    ``kept_idx``) for the node's backward, with their in-place versions first where the context's
    fields are set directly (``_paddle_compat.CONTEXT_DIRECT``): Paddle checks no version of what a
    PyLayer saves, the backward does (plain Paddle's rule, see ``modified_in_place_error``). With
    saved-tensor hooks active the saved tuple takes tensors only (ValueError at its first item,
    before any hook ran): the backward may get copies then, with counters of their own, and
    checks nothing."""
    if CONTEXT_DIRECT:
        try:
            ctx.container = (
                (tuple(t._inplace_version() for t in (*tensors, *kept)), tuple(kept_idx)),
                *tensors,
                *kept,
            )
            return
        except ValueError:
            pass
    ctx.save_for_backward(*tensors, *kept)


def _adjoint_recorded(state: _State, saved: Sequence[Any], grads: Sequence[Any]):
    """The adjoint when Paddle records the backward (``create_graph=True``)."""
    plan = state.plan
    mask = [state.need_grad[i] and plan.differentiable[i] for i in state.visible]
    if not any(mask):
        return tuple(None for _ in mask)
    present = [g is not None for g in grads]
    res = iter(_NoSecondDerivative.apply((state, len(saved), present), *saved, *[g for g in grads if g is not None]))
    return tuple(next(res) if m else None for m in mask)


class _NoSecondDerivative(PyLayer):
    """Runs the adjoint as a node of its own, so that differentiating its result raises
    instead of giving a wrong (zero) second derivative."""

    @staticmethod
    def forward(ctx, info, *tensors):
        state, n_saved, present = info
        ctx.state = state
        saved, rest = tensors[:n_saved], iter(tensors[n_saved:])
        grads = [next(rest) if p else None for p in present]
        return tuple(r for r in _backward(state, saved, grads) if r is not None)

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError(
            f"op {ctx.state.plan.desc.label!r}: second derivatives through Warp's adjoint are not "
            "supported; give the op a hand-written backward (interop.op(..., backward=...)), whose own "
            "adjoint is then used"
        )


def _grad_order(desc) -> tuple:
    """(param index, param, copy it) of each returned parameter, in the order of the node's upstream
    gradients (outputs, then in-out links). An upstream gradient is copied when the adjoint may
    accumulate into it: the kernel reads that returned array, or a ``wp.Tape`` replays the op."""
    params = [p for p in desc.returned_params if p.role == OUTPUT]
    params += [p for p in desc.returned_params if p.role == IN_OUT]
    return tuple((p.index, p, desc.kind == "function" or p.name in desc.reads_returned) for p in params)


def _backward(state: _State, saved: Sequence[Any], grads: Sequence[Any]):
    """Gradients for the visible tensors, from the upstream gradients of outputs and links.

    The one adjoint of every call: a remembered signature's node (``state.sig``) reads its launch
    values, gradient order and gradient allocations from the signature, any other call derives
    them from the description and the saved tensors."""
    plan = state.plan
    desc = plan.desc
    sig = state.sig
    n_vis = len(state.visible)
    if desc.backward is not None:
        inputs = dict(zip(state.visible, saved[:n_vis]))  # param index -> tensor
        up = {idx: g for (idx, _, _), g in zip(_grad_order(desc), grads)}
        return _handwritten_backward(state, inputs, list(saved[n_vis:]), up)

    if sig is not None:
        order, values = sig.grad_order, state.values
        # the launch values of the forward, with the pointers read again from the tensors kept
        for (_, idx, strides), t in zip(sig.arrays, saved):
            values[idx] = (t.data_ptr(), strides)
        for j, t in zip(sig.kept, saved[n_vis:]):
            values[sig.outs[j][0]] = (t.data_ptr(), None)
        allocs = sig.grad_allocs
    else:
        order = _grad_order(desc)
        tensors = dict(zip(state.visible, saved[:n_vis]))
        kept = [idx for idx, p, _ in order if p.role == OUTPUT and idx not in plan.runner.unread_outputs]
        for idx, t in zip(kept, saved[n_vis:]):
            tensors[idx] = t  # the outputs the adjoint reads (in-out arrays are not saved)
        for idx, t in state.in_out.items():
            tensors[idx] = t
        scalars = {p.index: x for p, x in zip(desc.call_params, state.args) if not isinstance(x, paddle.Tensor)}
        values = _values(plan, desc.params, tensors, scalars)
        need, diff = state.need_grad, plan.differentiable
        allocs = [
            (_zeros, (x.shape, x.dtype, x.place), False) if need[idx] and diff[idx] else None
            for idx, x in zip(state.visible, saved)
        ]
    adj: list[Any] = [None] * len(desc.params)
    result = []
    for idx, how, x in zip(state.visible, allocs, saved):
        if how is None:
            result.append(None)
            continue
        # a zero-filled gradient (the adjoint accumulates into it), like x or of the shape given
        g = how[0](x, *how[1]) if how[2] else how[0](*how[1])
        adj[idx] = (g.data_ptr(), None)
        result.append(g)
    keep = []
    for (idx, p, copy), g in zip(order, grads):
        if g is None:
            continue
        if copy:
            g = g.clone()
        if g.is_contiguous():
            adj[idx] = (g.data_ptr(), None)
        else:
            ptr, strides, itemsize = FRAMEWORK.layout(g)
            adj[idx] = (ptr, check_layout(desc, p, tuple(g.shape), strides, itemsize))
        keep.append(g)
    for idx in plan.runner.unread_outputs:  # not kept, never read by the adjoint: its gradient's pointer
        values[idx] = (adj[idx][0] if adj[idx] is not None else 0, None)
    if sig is not None:
        if sig.any_grad:
            sig.go_adj(values, adj, _current_stream(sig.device) if sig.cuda else None)
    elif any(r is not None for r in result):
        device = state.device
        stream = _current_stream(device) if device != "cpu" else None
        _adjoint_launcher(plan, device)(values, adj, stream)
    return tuple(result)


def _adjoint_launcher(plan, device: str):
    """The recorded adjoint launch of ``plan`` on ``device``: ``go(values, adj, stream)``, built once
    and kept by the plan's runner (a module-level cache kept every evicted plan alive)."""
    return plan.runner.launcher(device, True)


# weakly (an op described in a loop and dropped frees its backward op): the forward op's hook
# keeps its backward op alive (_make_hook)
_backward_ops: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _backward_op(bdesc) -> Op:
    o = _backward_ops.get(bdesc)
    if o is None:
        o = Op(bdesc)
        o = _backward_ops.setdefault(bdesc, o)
    return o


def _handwritten_backward(state: _State, inputs: dict, outs: list, up: dict):
    """Call the op's hand-written backward through this adapter (so it is differentiable)."""
    plan = state.plan
    desc = plan.desc
    bop = _backward_op(desc.backward)
    bparams = bop.description.params
    args = []
    for p, x in zip(desc.call_params, state.args):
        if p.index in inputs:
            args.append(inputs[p.index])
        elif p.role == IN_OUT:
            args.append(state.in_out[p.index])
        else:
            args.append(x)
    for p, spec in zip(desc.returned_params, state.out_specs):
        g = up.get(p.index)
        if g is None:
            g = _zeros(list(spec.shape), _PADDLE_OF_NP[spec.dtype], _place(state.device))
        args.append(g)
    diff = desc.diff_array_inputs
    grad_params = bparams[len(bparams) - len(diff) :]
    output_dims = {bp.name: tuple(inputs[p.index].shape) for bp, p in zip(grad_params, diff)}
    ld = plan.launch_dims if bop.description.kind == "kernel" else None  # a Python-function backward sizes itself
    res = bop(*args, launch_dims=ld, output_dims=output_dims)
    res = res if isinstance(res, tuple) else (res,)
    by_index = {p.index: g for p, g in zip(diff, res)}
    return tuple(by_index.get(idx) if state.need_grad[idx] else None for idx in state.visible)


def _call_grad(op, args: Sequence[Any], launch_dims, output_dims):
    desc = op.description
    state = _State()
    state.sig = state.values = None
    state.op, state.args = op, tuple(args)
    state.launch_dims, state.output_dims = launch_dims, output_dims
    visible, tensors, need = [], [], {}
    state.in_out = {}
    for p, x in zip(desc.call_params, args):
        if not isinstance(x, paddle.Tensor):
            continue
        if p.role == IN_OUT:
            if not x.stop_gradient and x.is_leaf:
                raise ArgumentError(
                    f"op {desc.label!r}, parameter {p.name!r}: the in-out tensor is a leaf with stop_gradient=False, "
                    "which Paddle cannot update in place; pass a copy (x.clone()) or set stop_gradient=True"
                )
            state.in_out[p.index] = x
            continue
        visible.append(p.index)
        tensors.append(x)
        need[p.index] = p.differentiable and not x.stop_gradient
    # refused here, before the launch, as the PyTorch adapter does: Paddle would run the forward and
    # fail only inside the backward (as OSError), even for paddle.grad asking for another input
    for p in desc.call_params:
        if p.is_array or not need.get(p.index):
            continue
        if desc.backward is not None:
            raise UnsupportedError(
                f"op {desc.label!r}: no gradient for scalar {p.name!r}: the op's hand-written backward returns "
                "gradients of array inputs only; pass it as a Python number or with stop_gradient=True"
            )
        if desc.kind == "function":
            raise UnsupportedError(
                f"op {desc.label!r}: no gradient for scalar {p.name!r} of a Python-function op (wp.Tape does not "
                "record scalar adjoints); pass it as a Python number, with stop_gradient=True, or as a "
                "1-element array parameter"
            )
    state.visible, state.need_grad = tuple(visible), need
    res = _guarded(_OpLayer.apply(state, *tensors), state, desc.label)
    # tensors reach the backward as saved tensors (version-checked by Paddle), not through state
    state.args = tuple(None if isinstance(x, paddle.Tensor) else x for x in args)
    res = res if isinstance(res, tuple) else (res,)
    n_out = len(desc.output_params)
    outs, links = list(res[:n_out]), list(res[n_out:])
    io_params = [p for p in desc.returned_params if p.role == IN_OUT]
    for p, link in zip(io_params, links):
        state.in_out[p.index].add_(link)  # records the update for Paddle (value: + 0)
    returned, it_out = [], iter(outs)
    for p in desc.returned_params:
        returned.append(state.in_out[p.index] if p.role == IN_OUT else next(it_out))
    return pack_result(returned)


# ---- remembered signatures: the eager hook ------------------------------------------------
# A plain eager call (Paddle tensors and Python numbers, no in-out parameter, no launch_dims or
# output_dims) whose argument signature a call through ``call`` validated before skips the
# framework detection and the checks: ``Op.__call__`` finds the op's hook by the argument's
# type (``Op.eager_paths``), and the hook runs the signature's written-out forward directly,
# or the signature's own PyLayer when a gradient is to be recorded (adapters/_paddle_eager.py);
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
        self.take = operator.itemgetter(*self.tensor_pos) if len(self.tensor_pos) > 1 else None
        self._go_adj = None
        # the call written out (adapters/_paddle_eager.py): forward, adjoint, and the PyLayer that
        # runs them (a hand-written backward keeps the general node, _OpLayer)
        layer = self.grad and desc.backward is None
        self.forward, self.layer = signature_code(
            self, len(args), f"{desc.label}_eager", _current_stream, _recorded(self) if layer else None
        )

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
    signatures[key] = sig


# ---- entry points ------------------------------------------------------------------------
def call(op, args, launch_dims, output_dims, kwargs):
    """Run ``op`` on Paddle tensors (see :meth:`interop.Op.__call__`)."""
    if kwargs:
        raise TypeError(unexpected_keywords(op.description, kwargs))
    if _check_args(op, args) and paddle.is_grad_enabled():
        res = _call_grad(op, args, launch_dims, output_dims)
    else:
        # no autograd node: the shared eager path (validated once per argument signature)
        res = FRAMEWORK.call(op, args, launch_dims, output_dims, {})
    if launch_dims is None and output_dims is None and paddle.in_dynamic_mode():
        _remember(op, args)
    return res


def bind(op):
    """A callable that runs ``op`` with Paddle tensors (outputs are Paddle tensors even with no tensor input)."""
    _run_eagerly_under_sot(op)
    _register(op)

    def run(*args, launch_dims=None, output_dims=None):
        return call(op, args, launch_dims, output_dims, {})

    _run_eagerly_under_sot(run)
    return paddle.jit.not_to_static(run)


def on_describe(op) -> None:
    """Called for each op described while Paddle is imported: make it a graph break for SOT, give it
    its eager hook."""
    _run_eagerly_under_sot(op)
    _register(op)


# ---- paddle.jit.to_static ------------------------------------------------------------------
# SOT (to_static with full_graph=False) would otherwise simulate the op's Python code and
# fail inside it; a "break graph function" is called eagerly between compiled segments.
# Checked against Paddle 3.3.1 (paddle.jit.sot.utils.paddle_api_config).
# That registry is a set which would keep every op alive (and an op described in a loop is
# dropped): it holds a weak stand-in of the op instead (_WeakEntry), removed when the op goes.
try:
    from paddle.jit.sot.utils.paddle_api_config import add_break_graph_function as _add_break_graph_function
    from paddle.jit.sot.utils.paddle_api_config import break_graph_functions as _break_graph_functions
except ImportError:  # pragma: no cover - other Paddle versions: full_graph=False may not run the op
    _add_break_graph_function = _break_graph_functions = None


class _WeakEntry:
    """Stands for ``fn`` in SOT's set of break-graph functions without keeping it alive: the same
    hash as ``fn`` and equal to it (SOT asks ``fn in the_set``), equal to nothing else."""

    __slots__ = ("_ref", "_hash")

    def __init__(self, fn):
        self._ref = weakref.ref(fn)
        self._hash = hash(fn)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return other is self or (other is not None and self._ref() is other)


def _run_eagerly_under_sot(fn) -> None:
    if _add_break_graph_function is None:
        return
    if not isinstance(_break_graph_functions, set):  # pragma: no cover - another Paddle: held strongly
        _add_break_graph_function(fn)
        return
    entry = _WeakEntry(fn)
    _add_break_graph_function(entry)
    weakref.finalize(fn, _break_graph_functions.discard, entry)


# AST mode (full_graph=True) would rewrite the op's Python code for symbolic values; left as
# it is, the call reaches this adapter, which names the op and says what to use instead.
paddle.jit.not_to_static(Op.__call__)


def _register_existing_ops() -> None:
    from interop import _op

    for o in list(_op._ops.values()):
        _run_eagerly_under_sot(o)
        _register(o)


_register_existing_ops()
