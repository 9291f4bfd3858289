"""Autograd of an op's torch operators: ``setup_context`` and ``backward`` (Warp's adjoint through
the backward operator, or the op's hand-written backward op), and the ``autograd.Function`` classes
that ``torch.func`` transforms and forward-mode AD need (their jvp and second-order rules are
``torch/forward_mode.py``'s).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from interop._description import IN_OUT
from interop._errors import ArgumentError, UnsupportedError

from .binding import _OVERLOADS, _Binding, _Entry, _launch_dims
from .compat import (
    any_legacy_batched,
    dynamo_never_traces,
    forward_ad_active,
    functorch_transforms_active,
    plain_eager,
    profiler_enabled,
    unwrap_dead,
)
from .forward_mode import make_backward_jvp, make_backward_setup, make_double_backward, make_jvp


def _make_setup_context(b: _Binding, mask: tuple, for_jvp: bool = False):
    """``for_jvp``: the Function's, which saves the same tensors for its jvp (see :func:`_make_call_args`)."""
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
        saved = (*tensors, *[o for o, keep in zip(outs, kept) if keep])
        ctx.save_for_backward(*saved)
        if for_jvp:
            # the same tensors: under torch.func's generated vmap rule one record of batch dims
            # serves both; an in-out result not saved stands in by its shape (its value is not read)
            ctx.save_for_forward(*saved)
            ctx.unsaved_like = {
                j: (o.shape, o.dtype, o.device) for j, (o, keep) in enumerate(zip(outs, kept)) if not keep
            }
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


def _make_call_args(b: _Binding):
    """``call_args(ctx)``: the call arguments of the Function's call, from what its setup_context saved
    (an in-out argument is its result: the tangent of an in-out result does not depend on its value)."""
    unread = set(b.desc.adjoint_unread)
    kept = tuple(p.name not in unread for p in b.returned)
    nkept = sum(kept)

    def call_args(ctx):
        saved = ctx.saved_tensors
        it = iter(saved[len(saved) - nkept :])
        results = [next(it) if keep else None for keep in kept]
        args = []
        for where, v in ctx.layout:
            if where == "saved":
                args.append(saved[v])
            elif where == "result":
                r = results[v]
                if r is None:
                    shape, dtype, device = ctx.unsaved_like[v]
                    r = torch.zeros(shape, dtype=dtype, device=device)
                args.append(r)
            else:
                args.append(v)
        return args

    return call_args


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
        through = False
        for i, j in passthrough:
            if need[i]:
                ret[i] = grads[j]
                through = True
            need[i] = False
        if not any(need):
            if through:
                # passed through only where the in-out only accumulates: a kernel reading it as a
                # value is refused, as it is when an input needs a gradient too
                b.desc.check_in_out_passthrough()
            return tuple(ret)
        dims = ctx.dims
        if b.backward_op is not None:
            grads_in = _hand_written_backward(b, args, grads, dims[0], dims[1:])
            for i, g in grads_in.items():
                if need[i]:
                    ret[i] = g
            return tuple(ret)
        refuse_batched_grads(b.label, grads)
        if direct and not torch.is_grad_enabled() and plain_eager(grads):
            got = _eager_backward(b, mask, qual, (*args, *results, *grads, *dims, need), ctx.entry)
        else:
            got = _backward_call(b, mask, qual, (*args, *results, *grads, *dims, need))
        it = iter(got)
        for i in range(n):
            if need[i]:
                ret[i] = next(it)
        return tuple(ret)

    # autograd's engine calls it, also where Dynamo's frame callback is set (a ``.backward()`` in a
    # compiled function's skipped frame or at a graph break): Dynamo would compile it frame by frame
    return dynamo_never_traces(backward)


def refuse_batched_grads(label: str, grads: Sequence[Any]) -> None:
    """Refuse upstream gradients batched by torch's legacy vmap (no storage to launch on), which
    cannot batch a custom operator's backward either."""
    if any_legacy_batched(grads):
        raise UnsupportedError(
            f"op {label!r}: batched upstream gradients (torch.autograd.grad(..., is_grads_batched=True), "
            "torch.autograd.functional.jacobian/hessian(vectorize=True)) are not supported: torch's legacy "
            "vmap cannot batch a custom operator's backward; use torch.func.jacrev / torch.func.vmap over "
            "torch.func.vjp, or vectorize=False"
        )


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


class _Leaf:
    """A list argument of a Function (vec/mat components, dims, needs) as one pytree leaf: torch.func's
    generated vmap rule flattens a list into its items and then pairs the inputs' batch dims with the
    wrong tangents (torch 2.13, ``get_tangents_in_dims``)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


def _leaves(args) -> list:
    return [_Leaf(a) if isinstance(a, (list, tuple)) else a for a in args]


def _values(args) -> list:
    return [a.value if isinstance(a, _Leaf) else a for a in args]


def _apply(cls, args) -> Any:
    """``cls.apply`` with the list arguments as leaves (see :class:`_Leaf`)."""
    return cls.apply(*_leaves(args))


def _function_class(b: _Binding, mask: tuple, qual: str):
    """An autograd.Function around the registered operators, for torch.func transforms and
    forward-mode AD.

    Same forward operator, same setup_context and backward as ``register_autograd``, and a jvp:
    the op's tangent op (``torch/forward_mode.py``). It exists because torch.library's
    ``custom_op`` has no forward-mode rule and torch.func needs a ``setup_context`` staticmethod
    on the Function: calls through the op object (``op(x)``) take it under forward-mode AD and
    torch.func, while a direct ``torch.ops.<ns>.<name>(x)`` call under ``torch.func.jvp`` still
    gives a zero tangent (PyTorch's custom_op; with ``forward_ad`` dual tensors it raises).
    """
    cls = b.functions.get(mask)
    if cls is None:
        ovl = _OVERLOADS[qual]
        setup = _make_setup_context(b, mask, for_jvp=True)

        def forward(*args):
            return ovl(*_values(args))

        def setup_context(ctx, inputs, output):
            setup(ctx, _values(inputs), output)

        cls = type(
            f"{b.base}_function",
            (torch.autograd.Function,),
            {
                "generate_vmap_rule": True,
                "forward": staticmethod(forward),
                "setup_context": staticmethod(setup_context),
                "backward": staticmethod(_make_backward(b, mask)),
                "jvp": staticmethod(make_jvp(b, _make_call_args(b))),
            },
        )
        b.functions[mask] = cls
    return cls


def _backward_function_class(b: _Binding, mask: tuple, qual: str):
    """The backward operator as an autograd.Function for torch.func and forward-mode AD (see
    :func:`_function_class`): its jvp and backward are the second-order rules."""
    key = ("backward", mask)
    cls = b.functions.get(key)
    if cls is None:
        ovl = _OVERLOADS[qual]

        setup = make_backward_setup(b, for_jvp=True)

        def forward(*args):
            return tuple(ovl(*_values(args)))

        def setup_context(ctx, inputs, output):
            setup(ctx, _values(inputs), output)

        cls = type(
            f"{b.base}_backward_function",
            (torch.autograd.Function,),
            {
                "generate_vmap_rule": True,
                "forward": staticmethod(forward),
                "setup_context": staticmethod(setup_context),
                "backward": staticmethod(make_double_backward(b)),
                "jvp": staticmethod(make_backward_jvp(b, lambda bargs: _backward_call(b, mask, qual, bargs))),
            },
        )
        b.functions[key] = cls
    return cls


def _backward_call(b: _Binding, mask: tuple, qual: str, bargs: tuple):
    """The backward operator on ``bargs``; through its Function where forward-mode AD or a torch.func
    transform may differentiate it (the operator's registered autograd serves plain reverse mode)."""
    if forward_ad_active() or (functorch_transforms_active() and torch.is_grad_enabled()):
        return _apply(_backward_function_class(b, mask, qual), bargs)
    return _OVERLOADS[qual](*bargs)


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
