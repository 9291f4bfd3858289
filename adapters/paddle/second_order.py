"""Second order of an op's Paddle calls through its tangent op (as ``adapters/torch/forward_mode.py``).

With ``x`` a call's arguments and ``ct`` the upstream gradients of its returned arrays, the
backward Paddle records under ``create_graph=True`` is the adjoint ``A(x, ct) = J(x)^T ct``, run as a
node of its own (:class:`SecondOrder`). Its backward, ``u`` the upstream gradients of the gradients
it returned, is that of ``<u, J(x)^T ct> = <ct, J(x) u>``:

- for ``ct``: ``T(x, u) = J(x) u``, the tangent op's tangent outputs;
- for ``x``: ``S(x, u, ct) = sum_k ct_k H_k u``, Warp's adjoint of the tangent kernel with ``ct`` on
  its tangent outputs.

So ``paddle.grad(..., create_graph=True)`` then a second ``paddle.grad`` (Hessian-vector products,
``paddle.incubate.autograd.Hessian``) and forward mode by the double-backward trick
(``paddle.incubate.autograd.jvp``, ``Jacobian``... in dynamic mode) differentiate through the
generated tangent kernel. Paddle cannot nest ``paddle.grad`` inside a PyLayer's backward (a
segmentation fault, paddle 3.3.1), so ``S`` runs Warp's adjoint of the tangent op directly, as the
first-order node does.

Refused, with an error naming the op (raised in the node's backward, which Paddle reports as an
``OSError`` carrying it): where the op has no tangent op (the generator refuses a builtin; a
Python-function op's tangent op replays its launches on a tangent tape), and a third derivative (the second-order node's results differentiated again).
In-out parameters only accumulate (docs/gradients.md): no second derivative goes through their value.
"""

from __future__ import annotations

from typing import Any, Sequence

import paddle
from paddle.autograd import PyLayer

from interop._description import IN_OUT, OUTPUT
from interop._errors import UnsupportedError
from interop._op import tangent_names, tangent_output_dims, tangent_results

from .framework import FRAMEWORK

# the first-order node's pieces (adapters/paddle/autograd.py fills this: it imports this module):
# ``backward(state, saved, grads)``: Warp's adjoint of a call from its node state; ``state()``: a
# fresh node state; ``grad_order(desc)``: the order of a node's upstream gradients
FRONT: dict[str, Any] = {}


def call_args(state: Any, saved: Sequence[Any]) -> list:
    """The call arguments of a first-order node: its saved tensors where it saved them, its in-out
    tensors, its scalars."""
    by_index = dict(zip(state.visible, saved))
    args = []
    for p, x in zip(state.plan.desc.call_params, state.args):
        if p.index in by_index:
            args.append(by_index[p.index])
        elif p.role == IN_OUT:
            args.append(state.in_out[p.index])
        else:
            args.append(x)
    return args


def _tangents(desc: Any, args: Sequence[Any], v: dict) -> list:
    """One tangent per differentiable call parameter: ``v[param index]``, else a zero like the argument."""
    out = []
    for p, x in zip(desc.call_params, args):
        if not p.differentiable:
            continue
        t = v.get(p.index)
        if t is None:
            t = paddle.zeros_like(x) if isinstance(x, paddle.Tensor) else _zero_number(x)
        out.append(t)
    return out


def _zero_number(x: Any) -> Any:
    if hasattr(x, "_wp_scalar_type_"):
        return type(x)()
    if isinstance(x, (list, tuple)):  # a vec/mat scalar's components
        return [0.0] * len(x)
    return 0.0


def tangent_call(state: Any, args: Sequence[Any], v: dict) -> list:
    """``T(x, v)``: the tangents of the call's returned arrays (None for one not differentiable), with
    ``v`` the tangents by parameter index (absent: zero). No graph; nothing passed is changed."""
    op, desc = state.op, state.plan.desc
    args = [x.clone() if p.role == IN_OUT else x for p, x in zip(desc.call_params, args)]
    with paddle.no_grad():
        return tangent_results(op, args, _tangents(desc, args, v), state.launch_dims, state.output_dims)[1]


def second_order(state: Any, args: Sequence[Any], v: dict, ct: dict, need: dict) -> dict:
    """``S(x, v, ct)``: the gradient of ``<ct, T(x, v)>`` with respect to each call argument ``need``
    marks (by parameter index; in-out ones never), ``ct`` by returned parameter index. The tangent
    op's forward, then Warp's adjoint of it with ``ct`` on its tangent outputs."""
    op, desc = state.op, state.plan.desc
    top = op.tangent()
    tdesc = top.description
    targs = [x.clone() if p.role == IN_OUT else x for p, x in zip(desc.call_params, args)]
    targs += [t.clone() if isinstance(t, paddle.Tensor) else t for t in _tangents(desc, args, v)]
    tparams = tdesc.call_params
    ld, od = state.launch_dims, tangent_output_dims(op, state.output_dims)
    with paddle.no_grad():
        returned, plan, device = FRAMEWORK.call_with_plan(top, targs, ld, od)
    ts = FRONT["state"]()
    ts.sig = ts.values = None
    ts.op, ts.args, ts.launch_dims, ts.output_dims = top, tuple(targs), ld, od
    ts.plan, ts.device, ts.out_specs = plan, device, plan.out_specs
    ts.in_out = {p.index: x for p, x in zip(tparams, targs) if p.role == IN_OUT}
    visible = [p.index for p, x in zip(tparams, targs) if isinstance(x, paddle.Tensor) and p.role != IN_OUT]
    ts.visible = tuple(visible)
    ts.need_grad = {idx: idx < len(desc.params) and bool(need.get(idx)) for idx in visible}
    by_index = {p.index: r for p, r in zip(tdesc.returned_params, returned)}
    order = FRONT["grad_order"](tdesc)
    unread = plan.runner.unread_outputs
    kept = [by_index[idx] for idx, p, _ in order if p.role == OUTPUT and idx not in unread]
    # the upstream gradients: zero on the op's own results, ``ct`` on their tangents
    tangent_of = dict(zip([p.index for p in desc.returned_params if p.differentiable], _tangent_indices(op)))
    up = {tangent_of[i]: g for i, g in ct.items() if g is not None and i in tangent_of}
    grads = [up.get(idx) for idx, _, _ in order]
    saved = [x for p, x in zip(tparams, targs) if p.index in ts.visible] + kept
    got = FRONT["backward"](ts, saved, grads)
    return {idx: g for idx, g in zip(visible, got) if g is not None}


def _tangent_indices(op: Any) -> list:
    """The tangent op's parameter indices of the tangents of the op's differentiable returned arrays."""
    names = tangent_names(op)
    index = {p.name: p.index for p in op.tangent().description.params}
    return [index[names[p.name]] for p in op.description.returned_params if p.differentiable]


def check_second_order(state: Any) -> None:
    """Raise the second-order refusal when the op has no tangent op (its error names why)."""
    label = state.plan.desc.label
    try:
        state.op.tangent()
    except UnsupportedError as e:
        raise NotImplementedError(
            f"op {label!r}: second derivatives through Warp's adjoint are not supported here: they need the "
            f"op's tangent kernel, and there is none ({e}). Give the op a hand-written backward "
            "(interop.op(..., backward=...)), whose own adjoint is then used"
        ) from e


def recorded_adjoint(state: Any, saved: Sequence[Any], grads: Sequence[Any], mask: Sequence[bool]) -> list:
    """The adjoint ``A(x, ct)`` of a first-order node (its ``state`` and ``saved`` tensors, ``grads`` its
    upstream gradients ``ct``), differentiable: for the visible tensors ``mask`` marks, their gradients.

    Their values are Warp's adjoint, with no graph; each tensor they depend on (a call argument, an
    upstream gradient) is linked by a node of its own (:class:`_Part`, adding zeros), whose backward is
    that tensor's part of the second order. One node per tensor because Paddle runs a node's backward
    with the tensors it needs no gradient for known only to itself: a node with several inputs must
    return None for such an input, and cannot tell which (paddle 3.3.1)."""
    with paddle.no_grad():
        got = [g for g, m in zip(FRONT["backward"](state, saved, grads), mask) if m]
    ctx = _SecondOrderContext(state, saved, grads, mask)
    params = state.plan.desc.params
    parts = [("x", idx, x) for idx, x in zip(state.visible, saved) if params[idx].role != IN_OUT]
    parts += [("ct", idx, g) for (idx, _, _), g in zip(FRONT["grad_order"](state.plan.desc), grads) if g is not None]
    for which, idx, x in parts:
        if x.stop_gradient:
            continue
        zeros = _Part.apply((ctx, which, idx), x)
        zeros = zeros if isinstance(zeros, (tuple, list)) else (zeros,)
        got = [g + z for g, z in zip(got, zeros)]
    return got


class _SecondOrderContext:
    """What the second-order parts of one recorded adjoint share: the first-order node's state, its
    saved tensors and upstream gradients (by returned parameter index), which gradients it returned."""

    def __init__(self, state: Any, saved: Sequence[Any], grads: Sequence[Any], mask: Sequence[bool]):
        self.state = state
        self.args = call_args(state, saved)
        order = FRONT["grad_order"](state.plan.desc)
        self.ct = {idx: g for (idx, _, _), g in zip(order, grads)}
        self.returned_for = [idx for idx, m in zip(state.visible, mask) if m]  # the gradients' parameters

    def derivative(self, which: str, idx: int, u: Sequence[Any]) -> Any:
        """The part of ``<u, A(x, ct)>``'s gradient for the call argument (``which == "x"``) or upstream
        gradient (``"ct"``) of parameter ``idx``: ``S(x, u, ct)`` or ``T(x, u)`` there."""
        state = self.state
        check_second_order(state)
        v = {i: g for i, g in zip(self.returned_for, u) if g is not None}
        if not v:
            return None
        if which == "x":
            return second_order(state, self.args, v, self.ct, {idx: True}).get(idx)
        returned = [p.index for p in state.plan.desc.returned_params]
        return dict(zip(returned, tangent_call(state, self.args, v))).get(idx)


class _Part(PyLayer):
    """One tensor's link into a recorded adjoint: zeros forward, its part of the second order backward.

    ``apply((shared, which, idx), x)``: ``shared`` a :class:`_SecondOrderContext`, ``x`` the call
    argument (``which == "x"``) or upstream gradient (``"ct"``) of parameter ``idx``."""

    @staticmethod
    def forward(ctx, info, x):
        shared = info[0]
        ctx.info = info
        ctx.save_for_backward(x)
        zeros = [paddle.zeros_like(a) for a in _gradient_likes(shared)]
        return tuple(zeros) if len(zeros) > 1 else zeros[0]

    @staticmethod
    def backward(ctx, *u):
        shared, which, idx = ctx.info
        d = shared.derivative(which, idx, u)
        if d is not None and paddle.is_grad_enabled():
            # linked to this part's tensor, so that differentiating it reaches the refusal
            (x,) = ctx.saved_tensor()
            d = NoThirdDerivative.apply((shared.state.plan.desc.label, d), x)
        return d


def _gradient_likes(shared: _SecondOrderContext) -> list:
    by_index = dict(zip([p.index for p in shared.state.plan.desc.call_params], shared.args))
    return [by_index[i] for i in shared.returned_for]


class NoThirdDerivative(PyLayer):
    """``apply((label, value), x)``: ``value`` (a second derivative), linked to ``x`` (the tensor it is
    the derivative for); passes second derivatives through, so that differentiating them raises instead of giving a
    wrong (zero) third derivative."""

    @staticmethod
    def forward(ctx, info, x):
        ctx.label, value = info
        return value.clone()

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError(
            f"op {ctx.label!r}: third derivatives (the derivative of a second derivative through the op's "
            "tangent kernel) are not supported; give the op a hand-written backward (interop.op(..., "
            "backward=...)) whose own adjoint has a second derivative"
        )
