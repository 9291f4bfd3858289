"""Forward mode through builtins and functions returning several values (issue 42, row 2).

``quat_to_axis_angle`` (a tuple of axis and angle), ``quat_slerp`` (built on it), and a tuple bound
to one name (``r = f(x)`` then ``r[0]``, of a ``wp.func`` or of a builtin): each checked as every
generated tangent kernel is (``tests/test_tangent_kernels.py``'s :func:`check_tangent`), against
central differences and ``J t`` from Warp's reverse mode, float64, on the CPU or
``INTEROP_TANGENT_DEVICE``; second order through the op's Hessian-vector product in JAX.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from test_tangent_kernels import Case, check_tangent

import interop

F64 = wp.float64
N = 5


@wp.kernel
def axis_angle(q: wp.array(dtype=wp.quatd), axis: wp.array(dtype=wp.vec3d), angle: wp.array(dtype=F64)):
    i = wp.tid()
    a, t = wp.quat_to_axis_angle(q[i])
    axis[i] = a
    angle[i] = t


@wp.kernel
def axis_angle_one_name(q: wp.array(dtype=wp.quatd), out: wp.array(dtype=wp.vec3d)):
    i = wp.tid()
    r = wp.quat_to_axis_angle(q[i])
    out[i] = r[0] * r[1]


@wp.func
def _polar(x: F64, y: F64):
    return wp.sqrt(x * x + y * y), wp.atan2(y, x)


@wp.kernel
def func_tuple_one_name(x: wp.array(dtype=F64), y: wp.array(dtype=F64), out: wp.array(dtype=F64)):
    i = wp.tid()
    r = _polar(x[i], y[i])
    s = r
    out[i] = s[0] * wp.cos(r[1]) + r[0] * r[1]


@wp.kernel
def slerp(
    q0: wp.array(dtype=wp.quatd), q1: wp.array(dtype=wp.quatd), t: wp.array(dtype=F64), out: wp.array(dtype=wp.quatd)
):
    i = wp.tid()
    out[i] = wp.quat_slerp(q0[i], q1[i], t[i])


def _quats(rng: np.random.Generator, w_sign: float = 1.0) -> np.ndarray:
    """Unit quaternions (x, y, z, w) away from w = 0 (the axis flips there) and from the identity."""
    q = rng.normal(size=(N, 4))
    q[:, 3] = w_sign * (0.3 + np.abs(q[:, 3]))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


@pytest.mark.parametrize("w_sign", [1.0, -1.0], ids=["w>0", "w<0"])
def test_quat_to_axis_angle(w_sign):
    rng = np.random.default_rng(3)
    case = Case(axis_angle, N, {"q": (-1, 1)}, {"q": (N, 4), "axis": (N, 3), "angle": (N,)}, ("axis", "angle"))
    check_tangent(case, {"q": _quats(rng, w_sign)}, {"q": rng.normal(size=(N, 4))})


def test_a_builtins_tuple_bound_to_one_name():
    rng = np.random.default_rng(4)
    case = Case(
        axis_angle_one_name,
        N,
        {"q": (-1, 1)},
        {"q": (N, 4), "out": (N, 3)},
        ("out",),
        # Warp's own adjoint gives q no gradient through r = builtin(...); r[k] (zero for every entry):
        # checked against central differences (and the unpacked form above against both)
        warp_reverse_wrong={"out": "Warp's adjoint drops a builtin's tuple bound to one name"},
    )
    check_tangent(case, {"q": _quats(rng)}, {"q": rng.normal(size=(N, 4))})


def test_a_funcs_tuple_bound_to_one_name():
    rng = np.random.default_rng(5)
    case = Case(
        func_tuple_one_name,
        N,
        {"x": (0.5, 2), "y": (0.5, 2)},
        {"x": (N,), "y": (N,), "out": (N,)},
        ("out",),
        warp_reverse_wrong={"out": "Warp's adjoint drops a wp.func's tuple bound to one name"},
    )
    inputs = {"x": rng.uniform(0.5, 2, N), "y": rng.uniform(0.5, 2, N)}
    check_tangent(case, inputs, {"x": rng.normal(size=N), "y": rng.normal(size=N)})


def test_quat_slerp():
    rng = np.random.default_rng(6)
    q0 = _quats(rng)
    # q1 near q0 (within half a turn: the axis-angle of q0^-1 q1 away from its flip)
    q1 = q0 + 0.3 * rng.normal(size=(N, 4))
    q1 /= np.linalg.norm(q1, axis=1, keepdims=True)
    case = Case(
        slerp,
        N,
        {"q0": (-1, 1), "q1": (-1, 1), "t": (0, 1)},
        {"q0": (N, 4), "q1": (N, 4), "t": (N,), "out": (N, 4)},
        ("out",),
    )
    inputs = {"q0": q0, "q1": q1, "t": rng.uniform(0.2, 0.8, N)}
    tangents = {"q0": rng.normal(size=(N, 4)), "q1": rng.normal(size=(N, 4)), "t": rng.normal(size=N)}
    check_tangent(case, inputs, tangents)


def test_second_order_through_axis_angle_in_jax():
    """jax.hessian-vector product of sum(angle) through the op (the tangent kernel's adjoint) against
    central differences of jax.grad (the primal's adjoint)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    with jax.enable_x64(True):  # this test's arrays are float64; the setting goes back after it
        op = interop.op(axis_angle, outputs=["axis", "angle"])
        cpu = jax.devices("cpu")[0]
        rng = np.random.default_rng(8)
        q = jax.device_put(jnp.asarray(_quats(rng)), cpu)
        v = jax.device_put(jnp.asarray(rng.normal(size=(N, 4))), cpu)

        def f(a):
            axis, angle = op(a)
            return jnp.sum(angle * axis[:, 0])

        g = jax.grad(f)
        hv = jax.jvp(g, (q,), (v,))[1]
        eps = 1e-6
        fd = (g(q + eps * v) - g(q - eps * v)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(hv), np.asarray(fd), rtol=1e-5, atol=1e-7)


def test_second_order_through_a_tuple_bound_to_one_name_in_jax():
    """The tangent kernel keeps r[k] out of tuple locals (whose adjoint Warp drops), so its adjoint, the
    second order, is right where Warp's reverse mode of the kernel itself is not: the gradient of
    ct . (J(x) t) through the tangent op against central differences of the tangent."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    with jax.enable_x64(True):  # this test's arrays are float64; the setting goes back after it
        op = interop.op(func_tuple_one_name)
        cpu = jax.devices("cpu")[0]
        rng = np.random.default_rng(9)
        values = [
            rng.uniform(0.5, 2, N),
            rng.uniform(0.5, 2, N),
            rng.normal(size=N),
            rng.normal(size=N),
            rng.normal(size=N),
        ]
        x, y, tx, ty, ct = (jax.device_put(jnp.asarray(a), cpu) for a in values)

        def g(a, b):
            return jnp.sum(jax.jvp(op, (a, b), (tx, ty))[1] * ct)

        gx, gy = jax.grad(g, argnums=(0, 1))(x, y)
        eps = 1e-6
        for got, (da, db) in ((gx, (1, 0)), (gy, (0, 1))):
            for i in range(N):
                e = jnp.zeros(N, device=cpu).at[i].set(eps)
                fd = (g(x + da * e, y + db * e) - g(x - da * e, y - db * e)) / (2 * eps)
                assert abs(float(got[i]) - float(fd)) <= 1e-6 * max(1.0, abs(float(fd))), (i, float(got[i]), float(fd))


# ---- functions made by factories (wp.static(make())(...)) and `return g(...)` of several values ---
def _make_pair():
    @wp.func
    def pair(x: F64):
        return x * x, wp.sin(x)

    return pair


def _make_store():
    @wp.func
    def store(y: wp.array(dtype=F64), i: int, v: F64):
        y[i] = v * wp.cos(v)

    return store


@wp.func
def _polar_of_line(x: F64):
    return _polar(x, x * F64(2.0) + F64(0.5))  # several values, returned through another function


@wp.kernel
def static_calls(x: wp.array(dtype=F64), y: wp.array(dtype=F64), z: wp.array(dtype=F64)):
    i = wp.tid()
    a, b = wp.static(_make_pair())(x[i])
    wp.static(_make_store())(y, i, a + b)
    r = _polar_of_line(x[i])
    z[i] = r[0] * r[1]


def test_factory_functions_and_returned_calls():
    """``a, b = wp.static(make())(x)``, a factory's function called as a statement (it stores), and
    ``r = f(x)`` where f returns ``g(...)`` of two values (newton's kernels are written so)."""
    rng = np.random.default_rng(10)
    case = Case(
        static_calls,
        N,
        {"x": (0.2, 1.5)},
        {"x": (N,), "y": (N,), "z": (N,)},
        ("y", "z"),
        warp_reverse_wrong={"z": "Warp's adjoint drops a wp.func's tuple bound to one name"},
    )
    check_tangent(case, {"x": rng.uniform(0.2, 1.5, N)}, {"x": rng.normal(size=N)})
