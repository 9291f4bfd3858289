"""JAX forward mode and second order through generated tangent kernels (issue 34).

``jax.jvp``/``jacfwd``/``linearize`` launch the op's tangent op, ``jax.hessian`` and ``grad(grad)``
add Warp's adjoint of the tangent kernel; no op here has a hand-written ``backward=`` or ``jvp=``
unless it says so. References: reverse mode of the same op (``jacrev``), and the same function
written in ``jax.numpy``. Every array is made on the test's device.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from _devices import jax_device  # noqa: E402
from catalogue import CASES, atomic_kernel, cube64, function_op_fn, loop_kernel, mat33d_kernel, vec3d_kernel  # noqa: E402

import interop  # noqa: E402
from interop._errors import UnsupportedError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _arr(rng, shape, device, dtype=np.float64):
    return jnp.asarray(rng.uniform(-1.0, 1.0, size=shape).astype(dtype), device=jax_device(device))


# ---- every differentiable kernel of the catalogue: jvp and jacfwd equal reverse mode ------------
KERNEL_CASES = [
    c for c in CASES if c.differentiable and c.op.description.kind == "kernel" and not c.op.description.tiles
]


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[c.id for c in KERNEL_CASES])
def test_catalogue_jacfwd_equals_jacrev(case, device):
    rng = np.random.default_rng(3)
    dt = next((d for d in (np.float64, np.float32) if d in case.dtypes), case.dtypes[0])
    args = list(case.make(rng, dt))
    dev = jax_device(device)
    call = [jnp.asarray(a, device=dev) if isinstance(a, np.ndarray) else a for a in args]
    diff = [
        i
        for i, (a, p) in enumerate(zip(call, case.op.description.call_params))
        if isinstance(a, jax.Array) and p.differentiable and jnp.issubdtype(a.dtype, jnp.floating)
    ]
    if not diff:
        pytest.skip("no differentiable array argument")
    f = case.op.bound("jax")

    def fn(*xs):
        full = list(call)
        for i, x in zip(diff, xs):
            full[i] = x
        r = f(*full, **case.call_kwargs)
        return r if isinstance(r, tuple) else (r,)

    xs = tuple(call[i] for i in diff)
    if case.id == "struct_nested":  # it hands a struct value to a wp.func: refused, naming it
        with pytest.raises(UnsupportedError, match=r"forward-mode differentiation is not available: a value of struct"):
            jax.jvp(fn, xs, xs)
        return
    tol = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-5)}.get(
        dt, dict(rtol=2e-2, atol=2e-2)
    )
    fwd = jax.jacfwd(fn, argnums=tuple(range(len(xs))))(*xs)
    rev = jax.jacrev(fn, argnums=tuple(range(len(xs))))(*xs)
    for a, b in zip(jax.tree.leaves(fwd), jax.tree.leaves(rev)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **tol)
    # one jvp: J t, against the vjp's J^T applied to basis vectors (jacrev) contracted with t
    ts = tuple(_arr(rng, x.shape, device, x.dtype) for x in xs)
    _, tout = jax.jvp(fn, xs, ts)
    for k, t_k in enumerate(tout):
        want = sum(jnp.tensordot(rev[k][j], ts[j], axes=ts[j].ndim) for j in range(len(xs)))
        np.testing.assert_allclose(np.asarray(t_k), np.asarray(want), **tol)


# ---- hessians of a scalar loss: a vec3 kernel, an atomic scatter, a loop ------------------------
def _loss(y):
    return jnp.sum(jnp.tanh(y) ** 2)


HESSIAN_CASES = {
    "vec3": (
        vec3d_kernel,
        lambda rng, d: (_arr(rng, (4, 3), d), _arr(rng, (4, 3), d)),
        lambda a, b: jnp.cross(a, b) + a * jnp.sum(a * b, axis=-1, keepdims=True),
        {},
    ),
    "mat33": (
        mat33d_kernel,
        lambda rng, d: (_arr(rng, (3, 3, 3), d), _arr(rng, (3, 3), d)),
        lambda m, v: jnp.einsum("nij,nj->ni", m, v) + jnp.einsum("nji,nj->ni", m, jnp.einsum("nij,nj->ni", m, v)),
        {},
    ),
    "atomic_scatter": (
        atomic_kernel,
        lambda rng, d: (_arr(rng, 5, d),),
        lambda x: 2.0 * x,
        {},
    ),
    "loop": (
        loop_kernel,
        lambda rng, d: (_arr(rng, 5, d),),
        lambda a: jnp.full_like(a, jnp.sum(a)),
        {},
    ),
    "cube": (cube64, lambda rng, d: (_arr(rng, 6, d),), lambda x: x**3, {}),
}


@pytest.mark.parametrize("name", list(HESSIAN_CASES))
def test_hessian_and_grad_of_grad_without_a_hand_written_backward(name, device):
    kernel, make, ref, kw = HESSIAN_CASES[name]
    if kernel in (atomic_kernel, loop_kernel):
        op = interop.op(kernel, **kw)
        rng = np.random.default_rng(5)
        args = make(rng, device)
        args = tuple(a.astype(jnp.float32) for a in args)  # these catalogue kernels are float32
        tol = dict(rtol=2e-4, atol=2e-4)
    else:
        op = interop.op(kernel, **kw)
        args = make(np.random.default_rng(5), device)
        tol = dict(rtol=1e-10, atol=1e-12)
    f = op.bound("jax")
    loss = lambda x: _loss(f(x, *args[1:]))  # noqa: E731
    loss_ref = lambda x: _loss(ref(x, *args[1:]))  # noqa: E731
    x = args[0]
    np.testing.assert_allclose(np.asarray(jax.hessian(loss)(x)), np.asarray(jax.hessian(loss_ref)(x)), **tol)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.hessian(loss))(x)), np.asarray(jax.hessian(loss_ref)(x)), **tol)
    gg = jax.grad(lambda z: jnp.sum(jnp.sin(jax.grad(loss)(z))))
    gg_ref = jax.grad(lambda z: jnp.sum(jnp.sin(jax.grad(loss_ref)(z))))
    np.testing.assert_allclose(np.asarray(gg(x)), np.asarray(gg_ref(x)), **tol)
    # Hessian-vector product as jvp of grad
    v = jnp.ones_like(x)
    hvp = jax.jvp(jax.grad(loss), (x,), (v,))[1]
    np.testing.assert_allclose(np.asarray(hvp), np.asarray(jax.jvp(jax.grad(loss_ref), (x,), (v,))[1]), **tol)


def test_hessian_is_symmetric_and_matches_finite_differences_of_the_gradient(device):
    op = interop.op(vec3d_kernel)
    f = op.bound("jax")
    rng = np.random.default_rng(11)
    a, b = _arr(rng, (3, 3), device), _arr(rng, (3, 3), device)
    loss = lambda a: _loss(f(a, b))  # noqa: E731
    h = np.asarray(jax.hessian(loss)(a)).reshape(9, 9)
    np.testing.assert_allclose(h, h.T, atol=1e-12)
    g = jax.grad(loss)
    eps = 1e-6
    fd = np.stack(
        [
            (np.asarray(g(a + eps * e)) - np.asarray(g(a - eps * e))).ravel() / (2 * eps)
            for e in jnp.eye(9, dtype=jnp.float64, device=jax_device(device)).reshape(9, 3, 3)
        ],
        axis=1,
    )
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-7)


# ---- transforms: jit, every vmap method, linearize, forward over forward, third order ------------
@pytest.mark.parametrize("vmap_method", ["loop", "sequential", "fold"])
def test_jvp_under_vmap_and_vmap_under_jvp(vmap_method, device):
    op = interop.op(cube64, vmap_method=vmap_method)
    f = op.bound("jax")
    rng = np.random.default_rng(2)
    x, v = _arr(rng, (3, 5), device), _arr(rng, (3, 5), device)
    want = 3 * x * x * v
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda x, v: jax.jvp(f, (x,), (v,))[1])(x, v)), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jax.jvp(jax.vmap(f), (x,), (v,))[1]), want, rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(jax.jit(jax.vmap(lambda x, v: jax.jvp(f, (x,), (v,))[1]))(x, v)), want, rtol=1e-12
    )
    h = jax.vmap(jax.hessian(lambda x: jnp.sum(f(x) ** 2)))(x)
    np.testing.assert_allclose(np.asarray(h), np.asarray(jax.vmap(jax.hessian(lambda x: jnp.sum(x**6)))(x)), rtol=1e-10)


def test_linearize_jit_of_jvp_and_jvp_of_jit(device):
    op = interop.op(cube64)
    f = op.bound("jax")
    x = _arr(np.random.default_rng(1), 4, device)
    v = jnp.ones_like(x)
    _, lin = jax.linearize(f, x)
    np.testing.assert_allclose(np.asarray(lin(v)), np.asarray(3 * x * x), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x, v: jax.jvp(f, (x,), (v,))[1])(x, v)), np.asarray(3 * x * x))
    np.testing.assert_allclose(np.asarray(jax.jvp(jax.jit(f), (x,), (v,))[1]), np.asarray(3 * x * x))


def test_forward_over_forward_and_third_order(device):
    """jacfwd(jacfwd) transforms the tangent kernel again; third order is JAX's jvp of the
    second-order launch (the tangent kernel's own tangent kernel, then its adjoint)."""
    op = interop.op(cube64)
    f = op.bound("jax")
    x = _arr(np.random.default_rng(4), 3, device)
    h = jax.jacfwd(jax.jacfwd(lambda x: jnp.sum(f(x))))(x)
    np.testing.assert_allclose(np.asarray(h), np.diag(6 * np.asarray(x)), rtol=1e-12)

    def third(g):
        return jax.grad(lambda z: jax.grad(lambda y: jax.grad(lambda w: jnp.sum(jnp.sin(g(w))))(y).sum())(z).sum())

    np.testing.assert_allclose(np.asarray(third(f)(x)), np.asarray(third(lambda w: w**3)(x)), rtol=1e-10)


def test_in_out_and_scalars(device):
    from catalogue import inout64_kernel, square_axpy_kernel

    op = interop.op(inout64_kernel, in_out=["acc"])
    f = op.bound("jax")
    rng = np.random.default_rng(8)
    x, acc = _arr(rng, (2, 3), device), _arr(rng, 2, device)
    tx, tacc = _arr(rng, (2, 3), device), _arr(rng, 2, device)
    (acc_out, sq), (tacc_out, tsq) = jax.jvp(f, (x, acc), (tx, tacc))
    np.testing.assert_allclose(np.asarray(tacc_out), np.asarray(tacc + jnp.sum(2 * x * tx, axis=1)), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(tsq), np.asarray(2 * tx), rtol=1e-12)
    hess = jax.hessian(lambda x: jnp.sum(jnp.sin(f(x, acc)[0])))(x)
    ref = jax.hessian(lambda x: jnp.sum(jnp.sin(acc + jnp.sum(x * x, axis=1))))(x)
    np.testing.assert_allclose(np.asarray(hess), np.asarray(ref), rtol=1e-10, atol=1e-12)
    # a traced scalar's tangent (float32 kernel): out = a x^2 + y
    op2 = interop.op(square_axpy_kernel)
    g = op2.bound("jax")
    x32, y32 = x[0].astype(jnp.float32), acc.astype(jnp.float32)[:1].repeat(3)
    two, one = (jax.device_put(jnp.float32(v), jax_device(device)) for v in (2.0, 1.0))
    _, t = jax.jvp(lambda a: g(x32, y32, a), (two,), (one,))
    np.testing.assert_allclose(np.asarray(t), np.asarray(x32 * x32), rtol=1e-6)


# ---- what is refused, and where ---------------------------------------------------------------
@wp.kernel
def _max_into_output(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    wp.atomic_max(out, 0, x[i] * x[i])


def test_a_refused_kernel_names_the_builtin_and_line_and_keeps_reverse_mode(device):
    op = interop.op(_max_into_output, output_dims=1)
    f = op.bound("jax")
    x = _arr(np.random.default_rng(0), 4, device)
    g = jax.grad(lambda x: f(x).sum())(x)  # reverse mode is untouched
    assert np.count_nonzero(np.asarray(g)) == 1
    pattern = r"op '_max_into_output': forward-mode differentiation is not available: 'wp.atomic_max'.*test_jax_forward_mode.py:\d+.*wp.atomic_max\(out, 0"
    with pytest.raises(UnsupportedError, match=pattern):
        jax.jvp(f, (x,), (x,))
    with pytest.raises(UnsupportedError, match=pattern):  # second order needs the tangent kernel too
        jax.hessian(lambda x: f(x).sum())(x)


def test_a_python_function_op_has_forward_mode_through_its_tangent_tape(device):
    op = interop.op(function_op_fn)
    f = op.bound("jax")
    x = _arr(np.random.default_rng(0), 4, device).astype(jnp.float32)
    _, t = jax.jvp(lambda x: f(x, x), (x,), (x,))  # out = 3 x^2 + x
    np.testing.assert_allclose(np.asarray(t), np.asarray((6 * x + 1) * x), rtol=1e-5)
    h = jax.hessian(lambda x: jnp.sum(f(x, x)))(x)
    np.testing.assert_allclose(np.asarray(h), 6 * np.eye(4), rtol=1e-5, atol=1e-6)


# ---- a hand-written tangent kernel (jvp=) ------------------------------------------------------
@wp.kernel
def _clipped(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    wp.atomic_max(out, i, x[i] * x[i])


@wp.kernel
def _clipped_jvp(
    x: wp.array(dtype=wp.float64),
    out: wp.array(dtype=wp.float64),
    dx: wp.array(dtype=wp.float64),
    dout: wp.array(dtype=wp.float64),
):
    # out starts at zero, so out[i] = max(0, x^2) = x^2: its tangent is 2 x dx
    i = wp.tid()
    out[i] = x[i] * x[i]
    dout[i] = wp.float64(2.0) * x[i] * dx[i]


def test_a_hand_written_jvp_serves_forward_mode_and_second_order(device):
    op = interop.op(_clipped, jvp=_clipped_jvp)
    f = op.bound("jax")
    x = _arr(np.random.default_rng(6), 4, device)
    _, t = jax.jvp(f, (x,), (jnp.ones_like(x),))
    np.testing.assert_allclose(np.asarray(t), np.asarray(2 * x), rtol=1e-12)
    h = jax.hessian(lambda x: jnp.sum(f(x) ** 2))(x)
    np.testing.assert_allclose(np.asarray(h), np.asarray(jax.hessian(lambda x: jnp.sum(x**4))(x)), rtol=1e-10)


def test_jvp_kernel_with_the_wrong_signature_is_refused_when_described():
    with pytest.raises(
        TypeError, match=r"op '_clipped': jvp kernel '.*_max_into_output' must take 4 parameters.*got 2"
    ):
        interop.op(_clipped, jvp=_max_into_output)


# ---- jax.export and shard_map (a process with four CPU devices) -----------------------------------
SCRIPT = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import numpy as np
    import jax, jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import warp as wp
    wp.config.quiet = True
    import interop
    from adapters import jax as ajax

    @wp.kernel
    def cube(a: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
        i = wp.tid()
        out[i] = a[i] * a[i] * a[i]

    op = interop.op(cube, partition="rows")
    cpu = jax.devices("cpu")
    mesh = Mesh(np.array(cpu), ("x",))
    x = jax.device_put(jnp.linspace(-1.0, 1.0, 16), NamedSharding(mesh, P("x")))
    v = jax.device_put(jnp.ones(16), NamedSharding(mesh, P("x")))
    sm = jax.shard_map(lambda a, t: jax.jvp(op, (a,), (t,))[1], mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"))
    t = jax.jit(sm)(x, v)
    np.testing.assert_allclose(np.asarray(t), 3 * np.asarray(x) ** 2, rtol=1e-12)
    h = jax.jit(jax.hessian(lambda a: jnp.sum(jax.shard_map(lambda b: op(b), mesh=mesh, in_specs=P("x"),
                                                            out_specs=P("x"))(a) ** 2)))(x)
    np.testing.assert_allclose(np.diag(np.asarray(h)), 30 * np.asarray(x) ** 4, rtol=1e-10)
    # export a function that takes a jvp; the tangent op's targets are listed with the op's
    f = jax.jit(lambda a, t: jax.jvp(op, (a,), (t,)))
    y = jax.device_put(jnp.linspace(-1.0, 1.0, 16), cpu[0])
    exp = jax.export.export(f, platforms=["cpu"], disabled_checks=ajax.disabled_checks(op))(y, y)  # not the default backend
    back = jax.export.deserialize(exp.serialize())
    np.testing.assert_allclose(np.asarray(back.call(y, y)[1]), 3 * np.asarray(y) ** 3, rtol=1e-12)
    print("FORWARD_MODE_SHARDED_OK")
    """
)


def test_shard_map_and_export_of_forward_mode(tmp_path):
    script = tmp_path / "forward_mode_sharded.py"  # Warp reads kernel source from a file
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert "FORWARD_MODE_SHARDED_OK" in r.stdout, r.stdout[-3000:] + r.stderr[-6000:]
