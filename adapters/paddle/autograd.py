"""Paddle's autograd for an op call: one ``PyLayer`` per call (``_OpLayer``), whose backward runs
Warp's adjoint, a ``wp.Tape`` (Python-function ops) or the op's hand-written backward; the
guard that refuses a second backward through the same graph."""

from __future__ import annotations

import weakref
from typing import Any, Sequence
from weakref import ref as _weakref

import paddle
from paddle.autograd import PyLayer

from interop import _dtypes
from interop import _warp_compat as _wpt
from interop._description import IN_OUT, OUTPUT
from interop._errors import ArgumentError, UnsupportedError
from interop._op import Op
from interop._plan import check_layout

from .._common import pack_result
from .compat import CONTEXT_DIRECT, shares_buffer
from .compat import zeros as _zeros
from .eager import modified_in_place_error
from .framework import _PADDLE_OF_NP, FRAMEWORK, _current_stream, _place
from .second_order import FRONT as _SECOND_ORDER
from .second_order import recorded_adjoint


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
    """A gradient hook for a node's first output (see ``paddle/compat.py``): Paddle releases a
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


def _refuse_changed_saved(plan, tensors: dict) -> None:
    """Each saved tensor of an array parameter (by param index) with the dtype and shape the call
    had. Saved-tensor hooks may hand the backward another (a float64 copy): refused with the op's
    error, never read as the call's (a wrong gradient, a read out of bounds)."""
    desc = plan.desc
    for idx, t in tensors.items():
        p = desc.params[idx]
        if not p.is_array or not isinstance(t, paddle.Tensor) or plan.types[idx] is None:
            continue
        if _wpt.is_struct(plan.types[idx]):
            continue  # (a struct array's bytes: its dtype is Paddle's uint8 view, checked at the call)
        spec = FRAMEWORK.spec(t)
        want = (plan.framework_shape(p), _dtypes.np_dtype(_dtypes.split(plan.types[idx])[0]))
        if (tuple(spec.shape), spec.dtype) != want:
            raise ArgumentError(
                f"op {desc.label!r}, parameter {p.name!r}: the backward was handed a tensor of shape "
                f"{tuple(spec.shape)} and dtype {spec.dtype.name} where the call had shape {want[0]} and "
                f"dtype {want[1].name} (saved-tensor hooks must hand back what they were given); arrays "
                "are never cast"
            )


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
    """The adjoint when Paddle records the backward (``create_graph=True``): a node of its own,
    differentiable through the op's tangent op (``paddle/second_order.py``)."""
    plan = state.plan
    mask = [state.need_grad[i] and plan.differentiable[i] for i in state.visible]
    if not any(mask):
        return tuple(None for _ in mask)
    res = iter(recorded_adjoint(state, saved, grads, mask))
    return tuple(next(res) if m else None for m in mask)


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

    if sig is not None and not sig.same_saved_layout(saved):
        # (saved-tensor hooks handed the backward another layout: read each tensor's own)
        sig = None
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
        _refuse_changed_saved(plan, tensors)
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


def _inputs_sharing_in_outs_copied(desc, args: Sequence[Any]) -> Sequence[Any]:
    """The arguments with each input tensor that is a view of an in-out tensor's allocation cloned
    (a differentiable copy): the in-out is written in place and then recorded with ``add_``,
    which marks every view of the allocation modified, and the backward needs the values the call
    read (refused at the backward as modified in place). The kernel reads the input's values from
    before the call, as with torch's autograd and JAX; an input sharing elements with the in-out is
    so not refused here, as it is without autograd (written in place, its threads would read what
    others wrote)."""
    ios = [x for p, x in zip(desc.call_params, args) if p.role == IN_OUT and isinstance(x, paddle.Tensor)]
    out = list(args)
    for i, (p, x) in enumerate(zip(desc.call_params, args)):
        if (
            p.role != IN_OUT
            and isinstance(x, paddle.Tensor)
            and x.size
            and any(shares_buffer(x, io) for io in ios if io.size)
        ):
            out[i] = x.clone()
    return out


def _refuse_passing_through(desc, x) -> None:
    """An in-out tensor's gradient passes through the update (``add_``) unchanged, as the in-out
    only accumulates; for a kernel that reads it as a value a gradient reaching it is refused, as
    one reaching an input is, also when no input needs a gradient (the op's node then never runs
    its backward)."""
    try:
        desc.check_in_out_passthrough()
    except UnsupportedError as e:
        error = e

        def refuse(grad):
            raise error

        x.register_hook(refuse)


def _call_grad(op, args: Sequence[Any], launch_dims, output_dims):
    desc = op.description
    if desc.has_in_out:
        args = _inputs_sharing_in_outs_copied(desc, args)
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
        if not state.in_out[p.index].stop_gradient and desc.backward is None:
            _refuse_passing_through(desc, state.in_out[p.index])
    returned, it_out = [], iter(outs)
    for p in desc.returned_params:
        returned.append(state.in_out[p.index] if p.role == IN_OUT else next(it_out))
    return pack_result(returned)


_SECOND_ORDER.update(backward=_backward, state=_State, grad_order=_grad_order)
