"""JAX: a Python-function op's forward inside a derivative keeps its ``wp.Tape`` for the adjoint
(``interop._function_calls.KEPT``; issue 49): the function runs once per forward, not again in the
backward, and the gradient is the one ``wp.Tape`` gives over the same function on Warp arrays.

The forward's tape is moved to the adjoint's buffers (the forward's inputs and outputs, which XLA
hands the adjoint as residuals, at other addresses: ``lax.scan`` stacks them); a tape that cannot
be (a view the function made of an argument), one evicted, or one a first backward used, is
replayed. Sequences change sizes and values between calls (a stale tape would be a wrong
gradient); eager, ``jit``, ``scan``, ``vmap``, ``vjp`` called twice, ``jax.checkpoint`` and
forward mode are each checked against the Tape, and that no kept tape is left behind.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
wp = pytest.importorskip("warp")

import interop  # noqa: E402
from interop._function_calls import KEPT  # noqa: E402

CPU = "cpu"


@wp.kernel(module="unique")
def _square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


@wp.kernel(module="unique")
def _shift(x: wp.array(dtype=float), t: wp.array(dtype=float), a: float, g: wp.vec3, z: wp.array(dtype=float)):
    i = wp.tid()
    z[i] = wp.sin(t[i]) * a + x[i] * g[1]


@wp.kernel(module="unique")
def _accumulate(t: wp.array(dtype=float), acc: wp.array(dtype=float)):
    i = wp.tid()
    acc[i] = acc[i] + t[i] * 2.0


CALLS = {"n": 0}


def two_stage(x: wp.array(dtype=float), a: float, g: wp.vec3, y: wp.array(dtype=float), z: wp.array(dtype=float)):
    """An intermediate, an output (y) a later launch reads, a scalar and a vector."""
    CALLS["n"] += 1
    t = wp.zeros(x.shape[0], dtype=float, device=x.device, requires_grad=True)
    wp.launch(_square, dim=x.shape[0], inputs=[x], outputs=[t], device=x.device)
    wp.launch(_square, dim=x.shape[0], inputs=[t], outputs=[y], device=x.device)
    wp.launch(_shift, dim=x.shape[0], inputs=[x, y, a, g], outputs=[z], device=x.device)


def with_inout(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    """An in-out array (accumulated into) beside an intermediate."""
    CALLS["n"] += 1
    t = wp.zeros(x.shape[0], dtype=float, device=x.device, requires_grad=True)
    wp.launch(_square, dim=x.shape[0], inputs=[x], outputs=[t], device=x.device)
    wp.launch(_accumulate, dim=x.shape[0], inputs=[t], outputs=[acc], device=x.device)


def through_a_view(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    """A launch over a view the function made of its argument: such a tape is not moved (replayed)."""
    CALLS["n"] += 1
    v = x.reshape((x.shape[0],))
    wp.launch(_square, dim=x.shape[0], inputs=[v], outputs=[y], device=x.device)


OPS = {
    "two_stage": interop.op(two_stage, outputs=["y", "z"], name="tests::kept_two_stage"),
    "with_inout": interop.op(with_inout, in_out=["acc"], name="tests::kept_with_inout"),
    "through_a_view": interop.op(through_a_view, outputs=["y"], name="tests::kept_through_a_view"),
}
G = (0.5, -2.0, 0.25)


@pytest.fixture(autouse=True)
def _clean():
    KEPT.clear()
    yield
    left = len(KEPT)
    KEPT.clear()
    assert left == 0, f"{left} kept tapes left behind"


def _put(a):
    return jax.device_put(jnp.asarray(a, jnp.float32), jax.devices("cpu")[0])


def _tape_grad_two_stage(x: np.ndarray, a: float, wy: np.ndarray, wz: np.ndarray) -> np.ndarray:
    """d(sum(wy * y) + sum(wz * z))/dx by wp.Tape over ``two_stage`` on Warp arrays."""
    n = x.shape[0]
    xw = wp.array(x, dtype=float, device=CPU, requires_grad=True)
    y = wp.zeros(n, dtype=float, device=CPU, requires_grad=True)
    z = wp.zeros(n, dtype=float, device=CPU, requires_grad=True)
    tape = wp.Tape()
    with tape:
        two_stage(xw, a, wp.vec3(*G), y, z)
    y.grad = wp.array(wy, dtype=float, device=CPU)
    z.grad = wp.array(wz, dtype=float, device=CPU)
    tape.backward()
    return xw.grad.numpy()


def _loss(op, a):
    def f(x, wy, wz):
        y, z = op(x, a, G)
        return jnp.sum(wy * y) + jnp.sum(wz * z)

    return f


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_gradient_without_replay_in_sequences(mode):
    """Sizes and values change between calls: each gradient is the Tape's, and the function ran
    once per call (its forward), never in the backward."""
    op = OPS["two_stage"]
    rng = np.random.default_rng(0)
    grad = jax.grad(_loss(op, 0.7))
    if mode == "jit":
        grad = jax.jit(grad)
    for n in (5, 5, 9, 5, 3):
        x = rng.uniform(-1, 1, n).astype(np.float32)
        wy = rng.uniform(-1, 1, n).astype(np.float32)
        wz = rng.uniform(-1, 1, n).astype(np.float32)
        CALLS["n"] = 0
        got = np.asarray(grad(_put(x), _put(wy), _put(wz)))
        assert CALLS["n"] == 1 or (mode == "jit" and CALLS["n"] == 2)  # (a first jit call traces)
        np.testing.assert_allclose(got, _tape_grad_two_stage(x, 0.7, wy, wz), rtol=1e-5, atol=1e-6)
        assert len(KEPT) == 0


def test_scan_runs_the_function_once_a_step():
    """``jit(grad)`` of a ``lax.scan`` over the op: the forward's tapes, stacked residuals moved to
    the adjoint's buffers (other addresses), give the gradient of unrolled Warp Tapes."""
    op = OPS["two_stage"]
    steps = 6

    def rollout(x):
        def body(c, _):
            y, z = op(c, 0.3, G)
            return 0.5 * z + 0.1 * y, None

        c, _ = jax.lax.scan(body, x, None, length=steps)
        return jnp.sum(c * c)

    grad = jax.jit(jax.grad(rollout))
    x = np.linspace(-0.9, 0.8, 7).astype(np.float32)
    grad(_put(x))  # (traces: the function runs while tracing too)
    CALLS["n"] = 0
    got = np.asarray(grad(_put(x)))
    assert CALLS["n"] == steps
    # the same rollout by wp.Tape over the function, unrolled
    tape = wp.Tape()
    xs = [wp.array(x, dtype=float, device=CPU, requires_grad=True)]
    with tape:
        for _ in range(steps):
            n = x.shape[0]
            y = wp.zeros(n, dtype=float, device=CPU, requires_grad=True)
            z = wp.zeros(n, dtype=float, device=CPU, requires_grad=True)
            two_stage(xs[-1], 0.3, wp.vec3(*G), y, z)
            c = wp.zeros(n, dtype=float, device=CPU, requires_grad=True)
            wp.launch(_mix, dim=n, inputs=[z, y], outputs=[c], device=CPU)
            xs.append(c)
        loss = wp.zeros(1, dtype=float, device=CPU, requires_grad=True)
        wp.launch(_sum_squares, dim=x.shape[0], inputs=[xs[-1]], outputs=[loss], device=CPU)
    tape.backward(loss)
    np.testing.assert_allclose(got, xs[0].grad.numpy(), rtol=1e-4, atol=1e-6)


@wp.kernel(module="unique")
def _mix(z: wp.array(dtype=float), y: wp.array(dtype=float), c: wp.array(dtype=float)):
    i = wp.tid()
    c[i] = 0.5 * z[i] + 0.1 * y[i]


@wp.kernel(module="unique")
def _sum_squares(c: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, c[i] * c[i])


def test_vmap_of_grad():
    op = OPS["two_stage"]
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    wy = rng.uniform(-1, 1, 4).astype(np.float32)
    wz = rng.uniform(-1, 1, 4).astype(np.float32)
    f = _loss(op, 1.5)
    got = np.asarray(jax.jit(jax.vmap(jax.grad(f), in_axes=(0, None, None)))(_put(x), _put(wy), _put(wz)))
    for k in range(3):
        np.testing.assert_allclose(got[k], _tape_grad_two_stage(x[k], 1.5, wy, wz), rtol=1e-5, atol=1e-6)


def test_vjp_called_twice():
    """The first backward uses the kept tape; the second replays the function: both the Tape's."""
    op = OPS["two_stage"]
    x = np.array([0.3, -0.4, 0.9], np.float32)
    wy = np.array([1.0, 2.0, -1.0], np.float32)
    wz = np.array([0.5, 0.0, 3.0], np.float32)
    want = _tape_grad_two_stage(x, 0.2, wy, wz)
    CALLS["n"] = 0
    _, pull = jax.vjp(lambda x: op(x, 0.2, G), _put(x))
    assert CALLS["n"] == 1 and len(KEPT) == 1
    for calls in (1, 2):
        (g,) = pull((_put(wy), _put(wz)))
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5, atol=1e-6)
        assert CALLS["n"] == calls
    assert len(KEPT) == 0


def test_in_out_array():
    op = OPS["with_inout"]
    x = np.array([0.3, -0.4, 0.9, 1.1], np.float32)
    acc0 = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    w = np.array([1.0, -2.0, 0.5, 3.0], np.float32)

    def f(x, acc):
        return jnp.sum(w * op(x, acc))

    CALLS["n"] = 0
    gx, gacc = jax.grad(f, argnums=(0, 1))(_put(x), _put(acc0))
    assert CALLS["n"] == 1
    np.testing.assert_allclose(np.asarray(gx), w * 4.0 * x, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(gacc), w, rtol=1e-6)


def test_a_view_of_an_argument_is_replayed():
    """The tape holds a view the function made of its argument: it cannot be moved to the
    adjoint's buffers, so the backward replays the function (same gradient, a second run)."""
    op = OPS["through_a_view"]
    x = np.array([0.3, -0.4, 0.9], np.float32)
    CALLS["n"] = 0
    g = jax.grad(lambda x: jnp.sum(op(x)))(_put(x))
    assert CALLS["n"] == 2
    # wp.Tape over the function: the view carries no gradient (x's is not reached through it)
    xw = wp.array(x, dtype=float, device=CPU, requires_grad=True)
    y = wp.zeros(3, dtype=float, device=CPU, requires_grad=True)
    tape = wp.Tape()
    with tape:
        through_a_view(xw, y)
    y.grad = wp.ones(3, dtype=float, device=CPU)
    tape.backward()
    np.testing.assert_allclose(np.asarray(g), xw.grad.numpy(), rtol=1e-6)


def test_evicted_tapes_are_replayed(monkeypatch):
    """Past the limit the oldest tapes go; their backward replays the function. Limit 0 keeps none."""
    op = OPS["two_stage"]
    steps = 5

    def rollout(x):
        def body(c, _):
            y, z = op(c, 0.3, G)
            return z, None

        c, _ = jax.lax.scan(body, x, None, length=steps)
        return jnp.sum(c)

    x = _put(np.linspace(-0.5, 0.5, 4).astype(np.float32))
    grad = jax.jit(jax.grad(rollout))
    want = np.asarray(grad(x))
    for count, limit, calls in ((2, 1 << 30, steps + 3), (16384, 0, 2 * steps)):
        monkeypatch.setattr(KEPT, "count", count)
        monkeypatch.setattr(KEPT, "limit", limit)
        CALLS["n"] = 0
        np.testing.assert_allclose(np.asarray(grad(x)), want, rtol=1e-6)
        assert CALLS["n"] == calls
        assert len(KEPT) == 0


def test_forward_mode_and_checkpoint_leave_no_tape_behind_beyond_the_limit(monkeypatch):
    """Forward mode frees each kept tape where the tangent runs; ``jax.checkpoint`` recomputes the
    forward in the backward, so the first forward's tapes are never used: they are bounded (count,
    bytes) and evicted oldest first. Values equal the plain paths'."""
    op = OPS["two_stage"]
    x = _put(np.array([0.3, -0.4, 0.9], np.float32))
    t = _put(np.array([1.0, 0.5, -2.0], np.float32))
    f = lambda x: jnp.sum(op(x, 0.2, G)[1])  # noqa: E731
    p, d = jax.jit(lambda x, t: jax.jvp(f, (x,), (t,)))(x, t)
    assert len(KEPT) == 0
    p_ref, d_ref = jax.jvp(jax.jit(f), (x,), (t,))
    np.testing.assert_allclose([float(p), float(d)], [float(p_ref), float(d_ref)], rtol=1e-6)

    monkeypatch.setattr(KEPT, "count", 4)

    def body(c, _):
        return op(c, 0.2, G)[1] * 0.5, None

    def remat(x):
        return jnp.sum(jax.lax.scan(jax.checkpoint(body), x, None, length=3)[0])

    def plain(x):
        return jnp.sum(jax.lax.scan(body, x, None, length=3)[0])

    g_plain = np.asarray(jax.jit(jax.grad(plain))(x))
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(remat))(x)), g_plain, rtol=1e-6)
        assert len(KEPT) <= 4
    KEPT.clear()


@pytest.mark.parametrize("text", ["abc", "-1", "nan"])
def test_kept_limit_variable_refuses_what_is_not_a_size(text):
    from _subprocess import run_script

    out = run_script(
        """
        try:
            import interop
        except ValueError as e:
            print("refused:", e)
        """,
        env={"INTEROP_KEPT_MB": text},
    )
    assert f"INTEROP_KEPT_MB must be a number of MiB >= 0 (0: keep no tape), got {text!r}" in out.stdout


TRANSFORMS = {
    "grad of grad": lambda op, x: jax.grad(lambda x: jnp.sum(jax.grad(lambda x: jnp.sum(op(x, 0.5, G)[1]))(x)))(x),
    "hessian": lambda op, x: jax.hessian(lambda x: jnp.sum(op(x, 0.5, G)[1]))(x),
    "jacrev": lambda op, x: jax.jacrev(lambda x: op(x, 0.5, G)[1])(x),
    "jacfwd": lambda op, x: jax.jacfwd(lambda x: op(x, 0.5, G)[1])(x),
    "jit vmap grad, sequential": lambda op, x: jax.jit(
        jax.vmap(jax.grad(lambda x: jnp.sum(op(x, 0.5, G, vmap_method="sequential")[1])))
    )(jnp.stack([x, 2.0 * x])),
    "linearize": lambda op, x: jax.linearize(lambda x: op(x, 0.5, G)[1], x)[1](jnp.ones_like(x)),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transformations_equal_the_replayed_backward(name, monkeypatch):
    """Each transformation of a function op gives what it gives with no tape kept (every backward
    replaying the function), and leaves no kept tape behind (the fixture checks)."""
    op = OPS["two_stage"]
    x = _put(np.array([0.3, -0.4, 0.9, 0.2], np.float32))
    got = np.asarray(TRANSFORMS[name](op, x))
    monkeypatch.setattr(KEPT, "limit", 0)
    want = np.asarray(TRANSFORMS[name](op, x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_empty_arrays_keep_no_tape(mode):
    """A call over empty arrays keeps no tape (XLA may skip an adjoint whose results are all empty,
    which would leave it unused: the fixture checks none is left) and gives empty gradients."""
    op = OPS["two_stage"]
    grad = jax.grad(_loss(op, 0.7))
    if mode == "jit":
        grad = jax.jit(grad)
    e = _put(np.zeros(0, np.float32))
    assert np.asarray(grad(e, e, e)).shape == (0,)


FUNCTION_MODULE = """
import warp as wp
wp.config.quiet = True

@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]

CALLS = [0]

def twice(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    CALLS[0] += 1
    t = wp.zeros(x.shape[0], dtype=float, device=x.device, requires_grad=True)
    wp.launch(square, dim=x.shape[0], inputs=[x], outputs=[t], device=x.device)
    wp.launch(square, dim=t.shape[0], inputs=[t], outputs=[y], device=x.device)
"""

EXPORT_SCRIPT = """
import sys, json
import numpy as np
import jax, jax.numpy as jnp
import interop
from adapters import jax as interop_jax
from interop._function_calls import KEPT
import fmod

mode, path = sys.argv[1], sys.argv[2]
x = jnp.asarray(np.linspace(-1, 1, 5, dtype=np.float32), device=jax.devices("cpu")[0])
op = interop.op(fmod.twice, outputs=["y"], name="tests::kept_export")
out = {}
if mode == "export":
    f = jax.jit(jax.grad(lambda x: jnp.sum(op(x))))
    exp = jax.export.export(f, disabled_checks=interop_jax.disabled_checks(op))(x)
    open(path, "wb").write(exp.serialize())
else:
    fn = interop_jax.deserialize(bytearray(open(path, "rb").read()))
    fmod.CALLS[0] = 0
    out["grad"] = np.asarray(fn.call(x)).tolist()
    out["calls"] = fmod.CALLS[0]
    out["kept"] = len(KEPT)
print("RESULTS " + json.dumps(out))
"""


def test_exported_gradient_keeps_the_tape_in_another_process(tmp_path):
    """A ``jax.export``ed gradient of a function op, loaded in a process that describes the op
    anew: the forward keeping its tape and the adjoint taking it are rebuilt from their calls'
    configuration; the function runs once, and the gradient is d(x^4)/dx."""
    pytest.importorskip("flatbuffers", reason="jax.export serialization needs flatbuffers")
    from _subprocess import run_for_results

    env = {"JAX_PLATFORMS": "cpu"}
    path = str(tmp_path / "g.bin")
    run_for_results(EXPORT_SCRIPT, "export", path, env=env, cwd=tmp_path, modules={"fmod": FUNCTION_MODULE})
    got = run_for_results(EXPORT_SCRIPT, "load", path, env=env, cwd=tmp_path, modules={"fmod": FUNCTION_MODULE})
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    np.testing.assert_allclose(got["grad"], 4.0 * x**3, rtol=1e-5, atol=1e-6)
    assert got["calls"] == 1 and got["kept"] == 0, got


def test_eager_pullback_dropped_uncalled_frees_the_tape():
    """An eager ``jax.vjp`` keeps the forward's tape for its pullback; dropped uncalled, the pullback
    frees it (the token it holds as a residual is freed). So does an eager ``value_and_grad`` whose
    op's results go only to ``has_aux`` (no gradient flows back: JAX runs no backward for it)."""
    import gc

    op = OPS["two_stage"]
    x = _put(np.array([0.3, -0.4, 0.9], np.float32))
    _, pull = jax.vjp(lambda x: op(x, 0.2, G), x)
    assert len(KEPT) == 1
    del pull
    gc.collect()
    assert len(KEPT) == 0
    (v, aux), g = jax.value_and_grad(lambda x: (jnp.sum(x * x), op(x, 0.2, G)), has_aux=True)(x)
    gc.collect()
    assert len(KEPT) == 0
    np.testing.assert_allclose(np.asarray(g), 2.0 * np.asarray(x), rtol=1e-6)
