"""Forward mode and second order of an op's torch operators, from the op's tangent op.

The tangent op (:meth:`interop.Op.tangent`, a kernel generated from the op's source) is an ordinary
op: called with torch tensors it is a registered operator whose backward is Warp's adjoint of the
tangent kernel. With ``x`` the op's call arguments:

- ``T(x, v)``: its tangent outputs, J(x)·v (``v``: one tangent per call parameter);
- ``A(x, ct)``: the op's backward operator, J(x)^T·ct (Warp's adjoint of the op's kernel);
- ``S(x, v, ct)``: the gradient of <ct, T(x, v)> with respect to ``x``, sum_k ct_k H_k v: Warp's
  adjoint of the tangent kernel (the tangent op's backward operator, ``ct`` on its tangent outputs).

The op's autograd.Function (torch.func, forward-mode AD) gets ``jvp = T``; its backward, as a
Function and as the backward operator's registered autograd, gets ``jvp = A(x, dct) + S(x, dx, ct)``
(forward over reverse: ``torch.func.hessian``) and ``backward = (S(x, g, ct), T(x, g))`` for (x, ct)
(reverse over reverse: ``create_graph=True``, ``gradgradcheck``).

Forward over forward mode (``jacfwd(jacfwd(f))``, a ``jvp`` of a ``jacfwd``): torch runs a jvp rule
with forward grad off, so the op's jvp, under a second forward-mode transform, runs ``T`` below the
current one (``compat.below_current_jvp``), where the outer transform differentiates it through the
tangent op's own jvp: the tangent op's tangent op (the tangent kernel transformed again). Third order
(``jacrev(hessian)``, ``create_graph=True`` twice) goes the same way through the tangent op's rules.

Refused, with an error naming the op: forward mode where the generator refuses the kernel (its error
names the builtin and the line; a Python-function op's tangent op replays its launches on a tangent
tape, ``interop/_tangent/tape.py``, which refuses what it cannot follow); second order through Warp's adjoint
then; more than two nested forward-mode transforms (``jacfwd(jacfwd(jacfwd(f)))``: torch.func trips
an internal assert), and forward over reverse under a second forward transform (``jacfwd(hessian)``).
In-out parameters only accumulate (docs/gradients.md): the tangent of an in-out result is the
tangent passed in plus J·v, and no second derivative goes through their value.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from interop._description import IN_OUT
from interop._errors import UnsupportedError

from .binding import _Binding
from .compat import below_current_jvp, functorch_jvp_levels

# the package front's calls of an op (adapters/torch/__init__.py fills this; it holds the call path):
# ``call_functional(op, args, launch_dims, output_dims) -> tuple``: every returned array, in-out
# tensors left as they are; ``call_adjoint(op, args, results, grads, needs, launch_dims, output_dims)
# -> list``: Warp's adjoint of that call (its backward operator), the gradients ``needs`` marks
FRONT: dict[str, Any] = {}


def _tangent_op(b: _Binding):
    """The op's tangent op, or the error that says why there is none."""
    return b.op.tangent()  # UnsupportedError naming the builtin and the line the generator refuses


def _check_second_order(b: _Binding) -> None:
    """Raise the second-order error when the op has no tangent op (a second derivative is built from it;
    a third from the tangent op's own tangent op, and so on)."""
    try:
        _tangent_op(b)
    except UnsupportedError as e:
        raise UnsupportedError(
            f"op {b.label!r}: second derivatives are not available: its backward is Warp's generated adjoint, "
            f"whose derivative needs the op's tangent kernel, and there is none ({e}). For second order "
            "(create_graph=True, gradgradcheck, torch.func.hessian), describe the op with a hand-written "
            "backward: interop.op(..., backward=<kernel or op>)"
        ) from e


def _check_forward_levels(b: _Binding, most: int, what: str) -> None:
    """Refuse more than ``most`` nested torch.func forward-mode transforms around ``what``."""
    if functorch_jvp_levels() > most:
        raise UnsupportedError(
            f"op {b.label!r}: {what} under {functorch_jvp_levels()} nested forward-mode transforms (jvp, jacfwd) "
            f"is not available (at most {most}: torch runs a jvp rule with forward grad off, and lifting it "
            "past more levels trips an internal assert of torch.func); use reverse mode for the further "
            "derivatives (jacrev of it, torch.autograd.grad with create_graph=True)"
        )


def _zero_like(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return torch.zeros_like(a)
    if isinstance(a, (list, tuple)):  # a vec/mat scalar's components
        return [0.0] * len(a)
    return 0.0


def _tangent_dims(b: _Binding, top, dims: Sequence[Any]) -> tuple:
    """The tangent op's launch and output dims: the op's, the tangent of an output sized as the output."""
    ld, ods = dims[0], dims[1:]
    if all(d is None for d in ods):
        return ld, None
    dims_of = [*ods, *(d for p, d in zip(b.outputs, ods) if p.differentiable)]
    return ld, {p.name: d for p, d in zip(top.description.output_params, dims_of) if d is not None}


def _dense(t: Any) -> Any:
    # a gradient torch expanded (stride 0: the gradient of a sum) as a tangent: a vec/mat array needs
    # contiguous components
    return t.contiguous() if isinstance(t, torch.Tensor) else t


def _tangent_args(b: _Binding, args: Sequence[Any], tangents: Sequence[Any]) -> list:
    """The tangent op's call arguments: the op's, then a tangent per differentiable parameter (None: zero)."""
    ts = [
        _zero_like(args[i]) if tangents[i] is None else _dense(tangents[i])
        for i, p in enumerate(b.call_params)
        if p.differentiable
    ]
    return [*args, *ts]


def tangent_call(b: _Binding, args: Sequence[Any], tangents: Sequence[Any], dims: Sequence[Any]) -> list:
    """``T(x, v)``: the tangents of the op's returned arrays (kernel order; None for one that is not
    differentiable) at call arguments ``args``, with ``tangents`` one per call parameter (None: zero)
    and ``dims`` the call's launch and output dims. Nothing passed is changed."""
    top = _tangent_op(b)
    ld, od = _tangent_dims(b, top, dims)
    res = FRONT["call_functional"](top, _tangent_args(b, args, tangents), ld, od)
    rest = iter(res[len(b.returned) :])
    return [next(rest) if p.differentiable else None for p in b.returned]


def second_order(
    b: _Binding, args: Sequence[Any], v: Sequence[Any], ct: Sequence[Any], dims: Sequence[Any]
) -> dict[int, torch.Tensor]:
    """``S(x, v, ct)``: the gradient of <ct, T(x, v)> w.r.t. each call argument that has one (differentiable
    floating-point tensors, not in-out), by position (``v``: one tangent per call parameter, None: zero;
    ``ct``: one per returned array). The tangent op's forward, then its adjoint with ``ct`` on its
    tangent outputs: no torch.func level of its own, which would turn forward grad back on inside a
    jvp rule (and ask the tangent op for a tangent of the jvp's own level, never used)."""
    n = b.ncall
    pos = [
        i
        for i, p in enumerate(b.call_params)
        if p.differentiable and p.role != IN_OUT and isinstance(args[i], torch.Tensor) and args[i].is_floating_point()
    ]
    v = [None if p.role == IN_OUT else t for p, t in zip(b.call_params, v)]
    if not pos or all(t is None for t in v):
        return {}
    top = _tangent_op(b)
    targs = _tangent_args(b, args, v)
    ld, od = _tangent_dims(b, top, dims)
    results = FRONT["call_functional"](top, targs, ld, od)
    k = len(b.returned)
    grads = [torch.zeros_like(r) for r in results[:k]]
    grads += [_dense(c) for c, p in zip(ct, b.returned) if p.differentiable]
    needs = [i in pos for i in range(n)] + [False] * (len(targs) - n)
    got = FRONT["call_adjoint"](top, targs, results, grads, needs, ld, od)
    return dict(zip(pos, got))


def _restore(layout: Sequence[Any], saved: Sequence[Any]) -> list:
    return [saved[w] if isinstance(w, int) else w[0] for w in layout]


# ---------------------------------------------------------------------------------------
# the op's Function: jvp
# ---------------------------------------------------------------------------------------
def make_jvp(b: _Binding, call_args):
    """The jvp of the op's Function: ``T(x, dx)``, one tangent per result (None for one not differentiable).
    ``call_args(ctx)``: the call arguments, from what its setup_context saved."""
    n = b.ncall
    single = len(b.returned) == 1

    def jvp(ctx, *tangents):
        _check_forward_levels(b, 2, "forward mode")
        args = call_args(ctx)
        if functorch_jvp_levels() > 1:
            # forward over forward (jacfwd(jacfwd(f))): the tangent op called where the outer transforms
            # see it, so that their tangent of J v is the tangent op's own tangent op (T of T)
            outs = below_current_jvp(lambda a, t: tangent_call(b, a, t, ctx.dims), args, list(tangents[:n]))
        else:
            outs = tangent_call(b, args, tangents[:n], ctx.dims)
        return outs[0] if single else tuple(outs)

    return jvp


# ---------------------------------------------------------------------------------------
# the backward operator (Warp's adjoint): jvp and backward
# ---------------------------------------------------------------------------------------
def make_backward_setup(b: _Binding, for_jvp: bool = False):
    """setup_context of the backward operator ``(args, results, grads, dims, needs) -> grads``: keeps
    the call arguments, results and upstream gradients, for the backward and (``for_jvp``) the same for
    the jvp (under torch.func's generated vmap rule one record of batch dims serves both)."""
    n, k = b.ncall, len(b.returned)
    nd = 1 + len(b.outputs)

    def setup_context(ctx, inputs, output):
        tensors, layout = [], []
        for a in inputs[:n]:
            if isinstance(a, torch.Tensor):
                layout.append(len(tensors))
                tensors.append(a)
            else:
                layout.append((a,))
        results = inputs[n : n + k]
        grads = inputs[n + k : n + 2 * k]
        ctx.second = (tuple(layout), len(tensors), tuple(inputs[n + 2 * k : n + 2 * k + nd]), tuple(inputs[-1]))
        ctx.save_for_backward(*tensors, *results, *grads)
        if for_jvp:
            ctx.save_for_forward(*tensors, *results, *grads)

    return setup_context


def make_backward_jvp(b: _Binding, adjoint):
    """The backward's jvp: ``A(x, dct) + S(x, dx, ct)`` for each gradient it returns (the results' tangents
    are J·dx, already in ``S``: it differentiates through the forward the tangent op recomputes).
    ``adjoint(bargs)``: the backward operator, differentiable where a transform may ask."""
    n, k = b.ncall, len(b.returned)

    def jvp(ctx, *tangents):
        _check_second_order(b)
        _check_forward_levels(b, 1, "forward over reverse mode (torch.func.hessian)")
        layout, nt, dims, needs = ctx.second
        saved = ctx.saved_tensors
        args = _restore(layout, saved[:nt])
        results, grads = saved[nt : nt + k], saved[nt + k :]
        dct = tangents[n + k : n + 2 * k]
        out: dict[int, Any] = {}
        if any(t is not None for t in dct):
            full = [torch.zeros_like(g) if t is None else t for g, t in zip(grads, dct)]
            got = iter(adjoint((*args, *results, *full, *dims, list(needs))))
            out = {i: next(got) for i in range(n) if needs[i]}
        for i, s in second_order(b, args, tangents[:n], grads, dims).items():
            if needs[i]:
                out[i] = out[i] + s if i in out else s
        return tuple(out[i] if i in out else torch.zeros_like(args[i]) for i in range(n) if needs[i])

    return jvp


def make_double_backward(b: _Binding):
    """The backward's backward, ``g`` its upstream gradients (one per gradient it returned): ``S(x, g, ct)``
    for the call arguments, ``T(x, g)`` for the upstream gradients ``ct``; nothing for the results
    (their dependence on x is in ``S``), the dims and the needs."""
    n, k = b.ncall, len(b.returned)
    nd = 1 + len(b.outputs)

    def double_backward(ctx, *g):
        _check_second_order(b)
        layout, nt, dims, needs = ctx.second
        saved = ctx.saved_tensors
        args = _restore(layout, saved[:nt])
        grads = saved[nt + k :]
        if len(g) == 1 and isinstance(g[0], (list, tuple)):
            g = g[0]  # the registered operator returns Tensor[]: its gradients come as one list
        it = iter(g)
        v = [next(it) if need else None for need in needs[:n]]
        wants = ctx.needs_input_grad
        ret: list[Any] = [None] * (n + 2 * k + nd + 1)
        if any(wants[:n]):
            for i, s in second_order(b, args, v, grads, dims).items():
                if wants[i]:
                    ret[i] = s
        if any(wants[n + k : n + 2 * k]):
            for j, t in enumerate(tangent_call(b, args, v, dims)):
                if wants[n + k + j]:
                    ret[n + k + j] = t
        return tuple(ret)

    return double_backward
