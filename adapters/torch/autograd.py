"""Autograd of an op's torch operators: ``setup_context`` and ``backward`` (Warp's adjoint through
the backward operator, or the op's hand-written backward op), the second-order refusal, and the
``autograd.Function`` classes that ``torch.func`` transforms and forward-mode AD need.
"""

from __future__ import annotations

from typing import Any

import torch

from interop._description import IN_OUT
from interop._errors import ArgumentError, UnsupportedError

from .binding import _OVERLOADS, _Binding, _Entry, _forward_mode_error, _launch_dims
from .compat import (
    functorch_transforms_active,
    plain_eager,
    profiler_enabled,
    unwrap_dead,
)


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
        # registration._release_dropped): ``interop.op(k)(x).sum().backward()`` needs them
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
    # the backward op's own call: saved tensors of a forward that ran under torch.func are dead
    # wrappers once its level has exited (torch.func.vjp's returned function); the tensors inside
    call_args = unwrap_dead([*args, *(g.contiguous() for g in grads)])
    res = b.backward_op(*call_args, launch_dims=launch, output_dims=out_dims)
    if not isinstance(res, tuple):
        res = (res,)
    return {b._pos_of_index(p.index): g for p, g in zip(diff, res)}


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


def _eager_backward(b: _Binding, mask: tuple, qual: str, bargs: tuple, e: _Entry | None):
    """Warp's adjoint without the dispatcher (the backward operator's implementation)."""
    if profiler_enabled():
        with torch.autograd.profiler.record_function(qual):
            return b.run_backward(mask, bargs, e)
    return b.run_backward(mask, bargs, e)


def _check_grad_supported(b: _Binding, args) -> None:
    for i, p in enumerate(b.call_params):
        x = args[i]
        if not isinstance(x, torch.Tensor) or not x.requires_grad:
            continue
        if p.role == IN_OUT:
            # refused before the launch, naming the op and parameter: torch's own error would come
            # from the in-place update after the kernel ran, naming neither (a view's base is read
            # eagerly only: Dynamo's fake tensors raise torch's error at trace time)
            what = "a leaf" if x.is_leaf else None
            if what is None and not torch.compiler.is_compiling():
                base = x._base
                what = "a view of a leaf" if base is not None and base.is_leaf and base.requires_grad else None
            if what is not None:
                raise ArgumentError(
                    f"op {b.label!r}, parameter {p.name!r}: the in-out tensor is {what} that requires grad, "
                    "which torch cannot update in place; pass a copy (x.clone()), or call under "
                    "torch.no_grad()"
                )
            continue
        if p.is_array:
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
