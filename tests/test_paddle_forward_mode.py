"""Paddle forward mode and second order through generated tangent kernels (issue 42, row 4):
``paddle.grad(..., create_graph=True)`` then a second ``paddle.grad`` (Hessian-vector products),
``paddle.incubate.autograd.jvp`` / ``Jacobian`` / ``Hessian`` in dynamic mode, without a hand-written
backward, a Python-function op's tangent tape; and the refusals (a builtin without a tangent rule, third order,
``forward_grad``, which Paddle serves in static mode only).

References: central differences (of the catalogue's NumPy reference for tangents, of Warp's reverse
mode for second derivatives) and Warp's reverse mode itself by ``v . (J t) == (J^T v) . t``."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")

import paddle.incubate.autograd as pia  # noqa: E402
from catalogue import CASES, cube64, function64_fn, to_paddle  # noqa: E402

import interop  # noqa: E402

f64 = wp.float64


@wp.kernel
def scatter_max64(x: wp.array(dtype=f64), idx: wp.array(dtype=wp.int32), out: wp.array(dtype=f64)):
    i = wp.tid()
    wp.atomic_max(out, idx[i], x[i])  # no tangent rule: the winning thread is known only at the end


CUBE = interop.op(cube64, name="tp_fm::cube")
MAX = interop.op(scatter_max64, output_dims={"out": 3}, name="tp_fm::scatter_max")
FUNC = interop.op(function64_fn, name="tp_fm::two_launches")

KERNEL_CASES = [
    c
    for c in CASES
    if c.differentiable
    and c.op.description.kind == "kernel"
    and not c.op.description.tiles
    and not c.op.description.entries
    and (np.float64 in c.dtypes or np.float32 in c.dtypes)
    # Paddle prunes, per paddle.grad, the inputs of a node it needs no gradient for, and refuses what
    # a PyLayer returns for them: a hand-written backward (an op of its own, one PyLayer taking the
    # call's tensors and the upstream gradients) hits that under jvp's double backward
    # (docs/guide/paddle.md); its second order is tests/test_paddle_autograd.py's
    and c.op.description.backward is None
]


def _dt(case):
    return np.float64 if np.float64 in case.dtypes else np.float32


def _setup(case, device, seed=7):
    """(call arguments as Paddle tensors/numbers, positions of the differentiable float arrays, dtype)."""
    rng = np.random.default_rng(seed)
    dt = _dt(case)
    args = list(case.make(rng, dt))
    params = case.op.description.call_params
    diff = [
        i
        for i, (a, p) in enumerate(zip(args, params))
        if isinstance(a, np.ndarray) and p.differentiable and p.role != "in_out" and a.dtype.kind == "f"
    ]
    if not diff:
        pytest.skip("no differentiable array input")
    call = [to_paddle(a, device=device) if isinstance(a, np.ndarray) else a for a in args]
    return args, call, diff, dt, rng


def _fn(case, call, diff):
    """The op as a function of its differentiable array inputs (a tuple of its returned arrays)."""

    def fn(*xs):
        full = list(call)
        for i, x in zip(diff, xs):
            full[i] = x
        for i, p in enumerate(case.op.description.call_params):
            if p.role == "in_out":
                full[i] = full[i].clone()  # each call accumulates into its own copy
        r = case.op(*full, **case.call_kwargs)
        return r if isinstance(r, tuple) else (r,)

    return fn


def _tol(dt):
    return dict(rtol=1e-6, atol=1e-7) if dt == np.float64 else dict(rtol=3e-3, atol=3e-4)


def _leaf(x):
    y = x.detach().clone()
    y.stop_gradient = False
    return y


def _dot(a, b):
    return float(np.sum(np.asarray(a, np.float64) * np.asarray(b, np.float64)))


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[c.id for c in KERNEL_CASES])
def test_catalogue_jvp_matches_finite_differences_and_reverse_mode(case, device):
    """``paddle.incubate.autograd.jvp`` (Paddle's double-backward trick: the adjoint's derivative with
    respect to the upstream gradient, the tangent kernel here) against central differences of the
    NumPy reference, and ``w . (J t) == (J^T w) . t`` with ``J^T w`` Warp's reverse mode."""
    args, call, diff, dt, rng = _setup(case, device)
    fn = _fn(case, call, diff)
    ts = [rng.uniform(-1, 1, size=args[i].shape) for i in diff]
    xs = [_leaf(call[i]) for i in diff]
    _, tout = pia.jvp(fn, xs, [to_paddle(t.astype(dt), device=device) for t in ts])
    tout = tout if isinstance(tout, (list, tuple)) else [tout]
    eps = 1e-6

    def at(sign):
        moved = [a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args]
        for i, t in zip(diff, ts):
            moved[i] = moved[i] + sign * eps * t
        return case.reference(*moved)

    plus, minus = at(1.0), at(-1.0)
    returned = case.op.description.returned_params
    fd = [(p - m) / (2 * eps) for p, m in zip(plus, minus)]
    got = list(tout)
    for g, want, p in zip(got, fd, returned):
        if p.differentiable:
            np.testing.assert_allclose(g.numpy().reshape(np.shape(want)), want, **_tol(dt))
    # Warp's reverse mode: the first-order gradient of sum_k w_k . y_k
    ws = [rng.uniform(-1, 1, size=g.shape) for g in got]
    ys = fn(*xs)
    loss = sum(
        (y * to_paddle(w.astype(dt), device=device)).sum() for y, w, p in zip(ys, ws, returned) if p.differentiable
    )
    grads = paddle.grad([loss], xs, allow_unused=True)
    lhs = sum(_dot(w, g.numpy()) for w, g, p in zip(ws, got, returned) if p.differentiable)
    rhs = sum(_dot(g.numpy(), t) for g, t in zip(grads, ts) if g is not None)
    np.testing.assert_allclose(
        lhs, rhs, rtol=1e-9 if dt == np.float64 else 2e-4, atol=1e-9 if dt == np.float64 else 2e-4
    )


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[c.id for c in KERNEL_CASES])
def test_catalogue_second_order_matches_finite_differences_of_reverse_mode(case, device):
    """``create_graph=True`` then a second ``paddle.grad``: the Hessian-vector product of
    ``sum_k w_k . y_k`` along ``u`` against central differences of Warp's reverse mode (the
    first-order gradient at ``x +- eps u``), and the derivative with respect to the upstream
    gradient ``w`` (``J u``, the tangent kernel) against ``paddle.incubate.autograd.jvp``."""
    args, call, diff, dt, rng = _setup(case, device, seed=11)
    fn = _fn(case, call, diff)
    returned = case.op.description.returned_params
    outs0 = fn(*[call[i] for i in diff])
    ws = [rng.uniform(-1, 1, size=o.shape).astype(dt) for o in outs0]
    us = [rng.uniform(-1, 1, size=args[i].shape).astype(dt) for i in diff]

    def gradient(xs, create_graph, wts):
        ys = fn(*xs)
        loss = sum((y * w).sum() for y, w, p in zip(ys, wts, returned) if p.differentiable)
        return paddle.grad([loss], xs, create_graph=create_graph, allow_unused=True)

    xs = [_leaf(call[i]) for i in diff]
    wts = [_leaf(to_paddle(w, device=device)) for w in ws]
    gs = gradient(xs, True, wts)
    inner = sum((g * to_paddle(u, device=device)).sum() for g, u in zip(gs, us) if g is not None)
    hv = paddle.grad([inner], xs + wts, allow_unused=True)
    eps = 1e-5 if dt == np.float64 else 1e-2
    consts = [to_paddle(w, device=device) for w in ws]

    def moved(sign):
        xm = [_leaf(call[i] + sign * eps * to_paddle(u, device=device)) for i, u in zip(diff, us)]
        return [None if g is None else g.numpy().astype(np.float64) for g in gradient(xm, False, consts)]

    plus, minus = moved(1.0), moved(-1.0)
    tol = dict(rtol=1e-5, atol=1e-6) if dt == np.float64 else dict(rtol=1e-2, atol=2e-3)
    for k, (p, m) in enumerate(zip(plus, minus)):
        want = np.zeros(us[k].shape) if p is None else (p - m) / (2 * eps)
        got = np.zeros(us[k].shape) if hv[k] is None else hv[k].numpy()
        np.testing.assert_allclose(got, want, **tol)
    # with respect to w: J u, the tangent kernel's tangent outputs (as paddle.incubate.autograd.jvp)
    _, ju = pia.jvp(fn, [_leaf(call[i]) for i in diff], [to_paddle(u, device=device) for u in us])
    ju = ju if isinstance(ju, (list, tuple)) else [ju]
    for got, want, p in zip(hv[len(xs) :], ju, returned):
        if p.differentiable:
            np.testing.assert_allclose(got.numpy(), want.numpy(), **_tol(dt))


def _cube(device, seed=0, n=5):
    x = np.random.default_rng(seed).uniform(-1, 1, n)
    return x, _leaf(to_paddle(x, device=device))


def test_jacobian_and_hessian_of_a_kernel_without_a_hand_written_backward(device):
    x, px = _cube(device)
    np.testing.assert_allclose(pia.Jacobian(CUBE, px)[:].numpy(), np.diag(3 * x * x), rtol=1e-12)
    np.testing.assert_allclose(pia.Hessian(lambda y: CUBE(y).sum(), px)[:].numpy(), np.diag(6 * x), rtol=1e-12)
    # the remembered-signature path (the second call of a signature takes the op's eager hook) too
    for _ in range(2):
        (g,) = paddle.grad([CUBE(px).sum()], [px], create_graph=True)
        (h,) = paddle.grad([(g * g).sum()], [px])
        np.testing.assert_allclose(h.numpy(), 2 * (3 * x * x) * 6 * x, rtol=1e-12)


def test_second_order_of_an_in_out_op(device):
    """An in-out accumulator: the second order goes through the other arrays (an in-out parameter
    only accumulates, README "Gradients"), and the accumulator is updated once."""
    axpy = next(c for c in CASES if c.id == "in_out")
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    px = _leaf(to_paddle(x, device=device))
    acc = to_paddle(np.zeros(3, np.float32), device=device)
    acc_out, sq = axpy.op(px, acc)
    (g,) = paddle.grad([acc_out.sum() + sq.sum()], [px], create_graph=True)
    (h,) = paddle.grad([(g * g).sum()], [px])
    # acc_i += sum_j x_ij^2, sq = 2 x: the gradient is 2 x + 2, its square's gradient 4 (2 x + 2)
    np.testing.assert_allclose(g.numpy(), 2 * x + 2, rtol=1e-5)
    np.testing.assert_allclose(h.numpy(), 4 * (2 * x + 2), rtol=1e-5)
    np.testing.assert_allclose(acc.numpy(), np.sum(x * x, axis=1), rtol=1e-5)


def test_third_order_is_refused_naming_the_op(device):
    _, px = _cube(device)
    (g,) = paddle.grad([CUBE(px).sum()], [px], create_graph=True)
    (h,) = paddle.grad([g.sum()], [px], create_graph=True)
    # Paddle reports an error raised in a PyLayer's backward as an OSError carrying its type and text
    with pytest.raises(OSError, match=r"NotImplementedError: op 'tp_fm::cube': third derivatives"):
        h.sum().backward()


def test_a_kernel_the_generator_refuses_keeps_reverse_mode_and_names_the_builtin(device):
    x = np.random.default_rng(3).uniform(0.1, 1, 6)  # positive: each slot's maximum beats its zero
    px = _leaf(to_paddle(x, device=device))
    idx = to_paddle(np.array([0, 1, 2, 0, 1, 2], np.int32), device=device)
    (g,) = paddle.grad([MAX(px, idx).sum()], [px], create_graph=True)  # first order: Warp's adjoint
    assert g.numpy().sum() == pytest.approx(3.0)
    with pytest.raises(OSError, match=r"op 'tp_fm::scatter_max': second derivatives .*wp.atomic_max"):
        g.sum().backward()


def test_a_python_function_op_has_second_order_through_its_tangent_tape(device):
    a0 = np.linspace(0.1, 1.0, 4)
    a = _leaf(to_paddle(a0, device=device))
    b = to_paddle(np.linspace(-1.0, 1.0, 4), device=device)
    (g,) = paddle.grad([FUNC(a, b).sum()], [a], create_graph=True)
    np.testing.assert_allclose(g.numpy(), 6 * a0, rtol=1e-12)
    (h,) = paddle.grad([(g * g).sum()], [a])
    np.testing.assert_allclose(h.numpy(), 72 * a0, rtol=1e-12)


def test_forward_grad_is_static_mode_only_where_ops_cannot_run():
    """``paddle.incubate.autograd.forward_grad`` is Paddle's static-graph API (paddle 3.3.1 asserts
    static mode); in a static program an op call gets symbolic values and raises naming the op."""
    x = paddle.to_tensor(np.ones(3), place=paddle.CPUPlace())
    x.stop_gradient = False
    with pytest.raises(AssertionError, match="only supported in static graph mode"):
        pia.forward_grad(CUBE(x), x)
    paddle.enable_static()
    try:
        xs = paddle.static.data("x", [3], "float64")
        with pytest.raises(TypeError, match=r"op 'tp_fm::cube', parameter 'x': got a symbolic Paddle value"):
            CUBE(xs)
    finally:
        paddle.disable_static()
