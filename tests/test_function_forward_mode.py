"""Forward mode of Python-function ops (issue 42, row 3): the function run on a tangent tape, each
launch replaced by its kernel's tangent launch (``interop/_tangent/tape.py``). ``op.jvp`` in every
framework, ``jax.jvp``/``jacfwd``/``hessian``, ``torch.func.jvp``/``jacfwd``/``hessian``, Paddle's
double backward; against central differences of the catalogue's NumPy reference and Warp's reverse
mode (the op's ``wp.Tape`` backward) by ``w . (J t) == (J^T w) . t``; and the refusals."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import warp as wp
from catalogue import CASES, function64_fn, function_scale_fn, to_fw, to_np

import interop
from interop._errors import UnsupportedError

FUNCTION_CASES = [c for c in CASES if c.differentiable and c.op.description.kind == "function"]
FRAMEWORKS = [
    f for f in ("numpy", "warp", "torch", "jax", "paddle") if f in ("numpy", "warp") or importlib.util.find_spec(f)
]
FUNC64 = interop.op(function64_fn, name="tf_fm::two_launches")


def _setup(case, seed=5):
    rng = np.random.default_rng(seed)
    dt = np.float64 if np.float64 in case.dtypes else np.float32
    args = list(case.make(rng, dt))
    params = case.op.description.call_params
    diff = [i for i, p in enumerate(params) if p.differentiable]
    # a scalar's tangent is zero: the function hands scalars to its launches as Python numbers
    tangents = [rng.uniform(-1, 1, size=np.shape(args[i])) if isinstance(args[i], np.ndarray) else 0.0 for i in diff]
    return rng, dt, args, diff, tangents


def _fd(case, args, diff, tangents, eps=1e-6):
    def at(sign):
        moved = [a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args]
        for i, t in zip(diff, tangents):
            moved[i] = moved[i] + sign * eps * np.asarray(t)
        return case.reference(*moved)

    return [(p - m) / (2 * eps) for p, m in zip(at(1.0), at(-1.0))]


@pytest.mark.parametrize("case", FUNCTION_CASES, ids=[c.id for c in FUNCTION_CASES])
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_op_jvp_of_a_function_op_matches_finite_differences(fw, case, device):
    _, dt, args, diff, tangents = _setup(case)
    want = _fd(case, args, diff, tangents)
    call = [to_fw(fw, a, device=device) if isinstance(a, np.ndarray) else a for a in args]
    ts = [to_fw(fw, np.asarray(t, dt), device=device) if isinstance(t, np.ndarray) else t for t in tangents]
    if fw == "jax":
        import jax

        with jax.enable_x64(True):
            values, touts = case.op.jvp(*call, tangents=ts, **case.call_kwargs)
    else:
        values, touts = case.op.jvp(*call, tangents=ts, **case.call_kwargs)
    touts = touts if isinstance(touts, tuple) else (touts,)
    tol = dict(rtol=1e-6, atol=1e-7) if dt == np.float64 else dict(rtol=2e-3, atol=2e-4)
    for got, ref in zip(touts, want):
        np.testing.assert_allclose(to_np(got).reshape(np.shape(ref)), ref, **tol)


def _xs(device, n=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.1, 1.0, n), rng.uniform(-1.0, 1.0, n), rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)


def test_torch_forward_mode_second_order_and_reverse_mode_identity():
    torch = pytest.importorskip("torch")
    a0, b0, ta0, tb0 = _xs("cpu")
    a, b, ta, tb = (torch.tensor(v, dtype=torch.float64, device="cpu") for v in (a0, b0, ta0, tb0))

    def ref(a, b):
        return 3 * a * a + torch.exp(b)

    y, t = torch.func.jvp(FUNC64, (a, b), (ta, tb))
    torch.testing.assert_close(t, torch.func.jvp(ref, (a, b), (ta, tb))[1], rtol=1e-12, atol=1e-12)
    # Warp's reverse mode (the op's wp.Tape backward): w . (J t) == (J^T w) . t
    w = torch.linspace(-1, 1, 5, dtype=torch.float64, device="cpu")
    ga, gb = torch.autograd.grad((FUNC64(a.requires_grad_(), b.requires_grad_()) * w).sum(), (a, b))
    torch.testing.assert_close((w * t).sum(), (ga * ta).sum() + (gb * tb).sum(), rtol=1e-12, atol=1e-12)
    a, b = a.detach(), b.detach()
    jf = torch.func.jacfwd(FUNC64, argnums=(0, 1))(a, b)
    jr = torch.func.jacrev(FUNC64, argnums=(0, 1))(a, b)
    for x, z in zip(jf, jr):
        torch.testing.assert_close(x, z, rtol=1e-12, atol=1e-12)

    def loss(f):
        return lambda a: f(a, b).sin().sum()

    want = torch.func.hessian(loss(ref))(a)
    for got in (
        torch.func.hessian(loss(FUNC64))(a),  # forward over reverse: the tangent function's wp.Tape
        torch.func.jacfwd(torch.func.jacfwd(loss(FUNC64)))(a),  # forward over forward: tangent of tangent
    ):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_jax_forward_mode_and_second_order():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    f = FUNC64.bound("jax")
    a0, b0, ta0, tb0 = _xs("cpu", seed=1)
    with jax.enable_x64(True):
        cpu = jax.devices("cpu")[0]
        a, b, ta, tb = (jax.device_put(jnp.asarray(v), cpu) for v in (a0, b0, ta0, tb0))

        def ref(a, b):
            return 3 * a * a + jnp.exp(b)

        _, t = jax.jvp(f, (a, b), (ta, tb))
        np.testing.assert_allclose(np.asarray(t), np.asarray(jax.jvp(ref, (a, b), (ta, tb))[1]), rtol=1e-12)
        _, vjp = jax.vjp(f, a, b)  # Warp's reverse mode
        w = jax.device_put(jnp.linspace(-1, 1, 5), cpu)
        ga, gb = vjp(w)
        np.testing.assert_allclose(float(jnp.sum(w * t)), float(jnp.sum(ga * ta) + jnp.sum(gb * tb)), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(jax.jacfwd(f)(a, b)), np.asarray(jax.jacrev(f)(a, b)), rtol=1e-12)

        def loss(g):
            return lambda a: jnp.sum(jnp.sin(g(a, b)))

        want = np.asarray(jax.hessian(loss(ref))(a))
        np.testing.assert_allclose(np.asarray(jax.hessian(loss(f))(a)), want, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(jax.jit(jax.hessian(loss(f)))(a)), want, rtol=1e-10, atol=1e-12)
        h = jax.jacfwd(jax.jacfwd(loss(f)))(a)
        np.testing.assert_allclose(np.asarray(h), want, rtol=1e-10, atol=1e-12)


def test_paddle_second_order_and_jvp():
    paddle = pytest.importorskip("paddle")
    import paddle.incubate.autograd as pia

    a0, b0, ta0, tb0 = _xs("cpu", seed=2)
    a, b = paddle.to_tensor(a0, place=paddle.CPUPlace()), paddle.to_tensor(b0, place=paddle.CPUPlace())
    a.stop_gradient = b.stop_gradient = False
    y = 3 * a0 * a0 + np.exp(b0)
    ga, _ = paddle.grad([FUNC64(a, b).sin().sum()], [a, b], create_graph=True)
    haa, hab = paddle.grad([ga.sum()], [a, b])  # Paddle prunes an input not asked for: ask both
    np.testing.assert_allclose(ga.numpy(), np.cos(y) * 6 * a0, rtol=1e-12)
    np.testing.assert_allclose(haa.numpy(), -np.sin(y) * 36 * a0 * a0 + 6 * np.cos(y), rtol=1e-10)
    np.testing.assert_allclose(hab.numpy(), -np.sin(y) * 6 * a0 * np.exp(b0), rtol=1e-10)
    tangents = [paddle.to_tensor(ta0, place=paddle.CPUPlace()), paddle.to_tensor(tb0, place=paddle.CPUPlace())]
    _, t = pia.jvp(FUNC64, [a, b], tangents)
    np.testing.assert_allclose(t.numpy(), 6 * a0 * ta0 + np.exp(b0) * tb0, rtol=1e-12)


# ---- refusals ----------------------------------------------------------------------------------
@wp.kernel
def _scatter_max(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    wp.atomic_max(out, 0, x[i])


def _launches_a_refused_kernel(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    wp.launch(_scatter_max, dim=x.shape, inputs=[x], outputs=[out], device=x.device)


@wp.kernel
def _double(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = wp.float64(2.0) * x[i]


def _through_a_view(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    tmp = wp.zeros(2 * x.shape[0], dtype=wp.float64, device=x.device)
    wp.launch(_double, dim=x.shape, inputs=[x], outputs=[tmp[: x.shape[0]]], device=x.device)
    wp.launch(_double, dim=x.shape, inputs=[tmp[0 : x.shape[0] : 1]], outputs=[out], device=x.device)
    wp.launch(_double, dim=x.shape, inputs=[tmp], outputs=[tmp], device=x.device)


def test_what_the_tangent_tape_cannot_follow_is_refused_naming_the_op():
    x = np.linspace(0.1, 1.0, 4)
    launch = wp.launch
    op = interop.op(_launches_a_refused_kernel, output_dims={"out": 1})
    with pytest.raises(UnsupportedError, match=r"op '_launches_a_refused_kernel': forward-mode .*wp.atomic_max"):
        op.jvp(x, tangents=[np.ones(4)])
    assert op(x)[0] == pytest.approx(1.0)  # the call itself is unchanged
    scale = interop.op(function_scale_fn)
    a = np.linspace(0.0, 1.0, 4, dtype=np.float32)
    with pytest.raises(UnsupportedError, match=r"a tangent with respect to the scalar parameter 's'"):
        scale.jvp(a, 2.0, tangents=[np.ones(4, np.float32), 1.0])
    _, t = scale.jvp(a, 2.0, tangents=[np.ones(4, np.float32), 0.0])  # a zero scalar tangent is fine
    np.testing.assert_allclose(t, 2.0 * np.ones(4))
    view = interop.op(_through_a_view)
    with pytest.raises(UnsupportedError, match=r"op '_through_a_view': .*overlapping another array"):
        view.jvp(x, tangents=[np.ones(4)])
    assert wp.launch is launch  # the tape gave wp.launch back, refusals included
