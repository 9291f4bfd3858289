"""Forward mode through the decompositions (issue 42, row 2): ``svd3``, ``svd2``, ``eig3``, ``qr3``.

Their tangents are closed forms (``interop/_tangent/helpers.py``, ``TUPLE_TANGENTS``) of the exact
factorization at the factors Warp computes. Each is checked as every generated tangent kernel is
(``tests/test_tangent_kernels.py``'s :func:`check_tangent`): against central differences of the
kernel and ``J t`` from Warp's reverse mode, float64, on the CPU or ``INTEROP_TANGENT_DEVICE``;
every result in an output, unpacked and bound to one name; second order through the op's
Hessian-vector product in JAX. Inputs are well conditioned (distinct singular values and
eigenvalues): where two coincide the factors have no derivative, and the tangent stays finite
(Warp's adjoint's clamps), which the last tests check.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from test_tangent_kernels import DEV, Case, check_tangent

import interop
from interop import _tangent
from interop._tangent import R

F64 = wp.float64
N = 4
ONE_NAME = "Warp's adjoint drops a builtin's tuple bound to one name"


@wp.kernel
def svd3_parts(
    a: wp.array(dtype=wp.mat33d),
    u: wp.array(dtype=wp.mat33d),
    s: wp.array(dtype=wp.vec3d),
    v: wp.array(dtype=wp.mat33d),
):
    i = wp.tid()
    uu, ss, vv = wp.svd3(a[i])
    u[i] = uu
    s[i] = ss * F64(2.0)
    v[i] = vv


@wp.kernel
def svd3_one_name(a: wp.array(dtype=wp.mat33d), rot: wp.array(dtype=wp.mat33d), s: wp.array(dtype=wp.vec3d)):
    i = wp.tid()
    r = wp.svd3(a[i])
    rot[i] = r[0] * wp.transpose(r[2])  # the polar decomposition's rotation
    s[i] = wp.cw_mul(r[1], r[1])


@wp.kernel
def svd2_parts(
    a: wp.array(dtype=wp.mat22d),
    u: wp.array(dtype=wp.mat22d),
    s: wp.array(dtype=wp.vec2d),
    v: wp.array(dtype=wp.mat22d),
):
    i = wp.tid()
    uu, ss, vv = wp.svd2(a[i])
    u[i] = uu
    s[i] = ss
    v[i] = vv


@wp.kernel
def svd2_one_name(a: wp.array(dtype=wp.mat22d), y: wp.array(dtype=F64)):
    i = wp.tid()
    r = wp.svd2(a[i])
    y[i] = wp.determinant(r[0] * wp.diag(r[1]) + r[2])


@wp.kernel
def eig3_symmetric(m: wp.array(dtype=wp.mat33d), q: wp.array(dtype=wp.mat33d), d: wp.array(dtype=wp.vec3d)):
    i = wp.tid()
    qq, dd = wp.eig3(m[i] + wp.transpose(m[i]))
    q[i] = qq
    d[i] = dd


@wp.kernel
def eig3_one_name(a: wp.array(dtype=wp.mat33d), q: wp.array(dtype=wp.mat33d), d: wp.array(dtype=F64)):
    i = wp.tid()
    r = wp.eig3(a[i])
    q[i] = r[0]
    d[i] = wp.length_sq(r[1]) + wp.dot(r[1], wp.vec3d(F64(1.0), F64(0.5), F64(0.25)))


@wp.kernel
def qr3_parts(a: wp.array(dtype=wp.mat33d), q: wp.array(dtype=wp.mat33d), r: wp.array(dtype=wp.mat33d)):
    i = wp.tid()
    qq, rr = wp.qr3(a[i])
    q[i] = qq
    r[i] = rr


@wp.kernel
def qr3_one_name(a: wp.array(dtype=wp.mat33d), y: wp.array(dtype=wp.mat33d)):
    i = wp.tid()
    f = wp.qr3(a[i])
    y[i] = f[0] * F64(2.0) + wp.transpose(f[1])


@wp.kernel
def output_arguments(
    a: wp.array(dtype=wp.mat33d), b: wp.array(dtype=wp.mat22d), y: wp.array2d(dtype=F64), z: wp.array(dtype=wp.mat33d)
):
    # the forms storing their results in local variables: wp.svd3(A, U, sigma, V)...
    i = wp.tid()
    u = wp.mat33d()
    s = wp.vec3d()
    v = wp.mat33d()
    wp.svd3(a[i], u, s, v)
    u2 = wp.mat22d()
    s2 = wp.vec2d()
    v2 = wp.mat22d()
    wp.svd2(b[i], u2, s2, v2)
    q = wp.mat33d()
    d = wp.vec3d()
    wp.eig3(a[i] + wp.transpose(a[i]), q, d)
    qq = wp.mat33d()
    r = wp.mat33d()
    wp.qr3(a[i], qq, r)
    y[i, 0] = wp.dot(s, s) + u[1, 2] * v[2, 0]
    y[i, 1] = s2[0] * s2[1] + u2[0, 1] + v2[1, 0]
    y[i, 2] = d[0] + d[1] * d[2] + q[0, 1]
    z[i] = qq * r + wp.transpose(r) + qq


def _separated(rng: np.random.Generator, n: int, values: list[float]) -> np.ndarray:
    """n matrices U diag(values) V^T, U and V random orthogonal: singular values (eigenvalues) apart."""
    out = []
    for _ in range(n):
        u, _ = np.linalg.qr(rng.normal(size=(len(values), len(values))))
        v, _ = np.linalg.qr(rng.normal(size=(len(values), len(values))))
        out.append(u @ np.diag(values) @ v.T)
    return np.array(out)


def _symmetric(rng: np.random.Generator, n: int, values: list[float]) -> np.ndarray:
    out = []
    for _ in range(n):
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        out.append(q @ np.diag(values) @ q.T)
    return np.array(out)


def _m33(names: tuple[str, ...], vec: tuple[str, ...] = ()) -> dict:
    return {n: (N, 3) if n in vec else (N, 3, 3) for n in names}


CASES = {
    "svd3": Case(svd3_parts, N, {"a": (-2, 2)}, {**_m33(("a", "u", "v")), "s": (N, 3)}, ("u", "s", "v")),
    "svd3-one-name": Case(
        svd3_one_name,
        N,
        {"a": (-2, 2)},
        {**_m33(("a", "rot")), "s": (N, 3)},
        ("rot", "s"),
        warp_reverse_wrong={"rot": ONE_NAME, "s": ONE_NAME},
    ),
    "svd2": Case(
        svd2_parts, N, {"a": (-2, 2)}, {"a": (N, 2, 2), "u": (N, 2, 2), "s": (N, 2), "v": (N, 2, 2)}, ("u", "s", "v")
    ),
    "svd2-one-name": Case(
        svd2_one_name, N, {"a": (-2, 2)}, {"a": (N, 2, 2), "y": (N,)}, ("y",), warp_reverse_wrong={"y": ONE_NAME}
    ),
    "eig3": Case(eig3_symmetric, N, {"m": (-2, 2)}, {**_m33(("m", "q")), "d": (N, 3)}, ("q", "d")),
    "eig3-one-name": Case(
        eig3_one_name,
        N,
        {"a": (-2, 2)},
        {**_m33(("a", "q")), "d": (N,)},
        ("q", "d"),
        warp_reverse_wrong={"q": ONE_NAME, "d": ONE_NAME},
    ),
    "qr3": Case(qr3_parts, N, {"a": (-2, 2)}, _m33(("a", "q", "r")), ("q", "r")),
    "qr3-one-name": Case(qr3_one_name, N, {"a": (-2, 2)}, _m33(("a", "y")), ("y",), warp_reverse_wrong={"y": ONE_NAME}),
    "output-arguments": Case(
        output_arguments,
        N,
        {"a": (-2, 2), "b": (-2, 2)},
        {"a": (N, 3, 3), "b": (N, 2, 2), "y": (N, 3), "z": (N, 3, 3)},
        ("y", "z"),
    ),
}


def test_the_rules_are_registered():
    assert {"svd3", "svd2", "eig3", "qr3"} <= set(R.TUPLE_TANGENTS)


@pytest.mark.parametrize("det_sign", [1.0, -1.0], ids=["det>0", "det<0"])
@pytest.mark.parametrize("name", ["svd3", "svd3-one-name"])
def test_svd3(name, det_sign):
    """sigma sorted by decreasing magnitude, sigma[2] with det(A)'s sign (negative: a reflection)."""
    rng = np.random.default_rng(1)
    a = _separated(rng, N, [3.0, 1.7, 0.6 * det_sign])
    check_tangent(CASES[name], {"a": a}, {"a": rng.normal(size=(N, 3, 3))})


@pytest.mark.parametrize("det_sign", [1.0, -1.0], ids=["det>0", "det<0"])
@pytest.mark.parametrize("name", ["svd2", "svd2-one-name"])
def test_svd2(name, det_sign):
    rng = np.random.default_rng(2)
    a = _separated(rng, N, [2.5, 0.8])
    a[:, :, 0] *= det_sign
    check_tangent(CASES[name], {"a": a}, {"a": rng.normal(size=(N, 2, 2))})


def test_eig3_of_a_symmetric_matrix_made_in_the_kernel():
    rng = np.random.default_rng(3)
    m = 0.5 * _symmetric(rng, N, [2.0, -0.7, 0.9]) + 0.3 * rng.normal(size=(N, 3, 3))
    check_tangent(CASES["eig3"], {"m": m}, {"m": rng.normal(size=(N, 3, 3))})


def test_eig3_reads_the_lower_triangle():
    """A symmetric input moved by any tangent: the eigenvectors follow the lower triangle (what eig3
    diagonalizes), the eigenvalues diag(Q^T A Q) the whole matrix. Warp's adjoint of Q assumes a
    symmetric tangent (it spreads the gradient over both triangles): checked against central
    differences only; the eigenvalues against both."""
    rng = np.random.default_rng(4)
    a = _symmetric(rng, N, [2.0, -0.7, 0.9])
    case = Case(
        eig3_symmetric_input,
        N,
        {"a": (-2, 2)},
        {**_m33(("a", "q")), "d": (N, 3)},
        ("q", "d"),
        warp_reverse_wrong={"q": "Warp's adjoint of eig3's eigenvectors assumes a symmetric tangent"},
    )
    check_tangent(case, {"a": a}, {"a": rng.normal(size=(N, 3, 3))})
    upper = np.triu(rng.normal(size=(N, 3, 3)), 1)  # a tangent on the upper triangle alone: Q stands still
    _, touts = _run(case, {"a": a}, {"a": upper})
    np.testing.assert_array_equal(touts["q"], 0.0)


@wp.kernel
def eig3_symmetric_input(a: wp.array(dtype=wp.mat33d), q: wp.array(dtype=wp.mat33d), d: wp.array(dtype=wp.vec3d)):
    i = wp.tid()
    qq, dd = wp.eig3(a[i])
    q[i] = qq
    d[i] = dd


def test_eig3_one_name():
    rng = np.random.default_rng(5)
    a = _symmetric(rng, N, [1.5, -1.1, 0.4])
    t = rng.normal(size=(N, 3, 3))
    check_tangent(CASES["eig3-one-name"], {"a": a}, {"a": t + np.transpose(t, (0, 2, 1))})


@pytest.mark.parametrize("det_sign", [1.0, -1.0], ids=["det>0", "det<0"])
@pytest.mark.parametrize("name", ["qr3", "qr3-one-name"])
def test_qr3(name, det_sign):
    """Q of determinant +1: R has a negative diagonal entry where det(A) < 0."""
    rng = np.random.default_rng(6)
    a = _separated(rng, N, [2.0, 1.3, 0.7 * det_sign])
    check_tangent(CASES[name], {"a": a}, {"a": rng.normal(size=(N, 3, 3))})


def _run(case: Case, inputs: dict, tangents: dict) -> tuple[dict, dict]:
    from test_tangent_kernels import run_tangent

    return run_tangent(case, inputs, tangents)


def test_output_arguments():
    rng = np.random.default_rng(10)
    a = _separated(rng, N, [2.2, 1.1, -0.5])
    b = _separated(rng, N, [1.9, 0.6])
    check_tangent(
        CASES["output-arguments"],
        {"a": a, "b": b},
        {"a": rng.normal(size=(N, 3, 3)), "b": rng.normal(size=(N, 2, 2))},
    )


def test_repeated_values_give_finite_tangents():
    """At A = I (every singular value and eigenvalue repeated) the factors have no derivative; the
    tangents stay finite (the clamps of Warp's adjoint), and what is defined is right: the sum of
    the singular values' and eigenvalues' tangents is trace(dA) there."""
    rng = np.random.default_rng(7)
    a = np.repeat(np.eye(3)[None], N, axis=0)
    t = rng.normal(size=(N, 3, 3))
    t = t + np.transpose(t, (0, 2, 1))
    _, svd = _run(CASES["svd3"], {"a": a}, {"a": t})
    _, eig = _run(CASES["eig3"], {"m": 0.5 * a}, {"m": 0.5 * t})
    for touts in (svd, eig):
        for name, value in touts.items():
            assert np.all(np.isfinite(value)), name
    trace = np.trace(t, axis1=1, axis2=2)
    np.testing.assert_allclose(svd["s"].sum(axis=1), 2.0 * trace, rtol=1e-12)  # the kernel writes 2 sigma
    np.testing.assert_allclose(eig["d"].sum(axis=1), trace, rtol=1e-12)


@pytest.mark.parametrize(
    "dtypes",
    [(wp.mat33f, wp.vec3f, wp.float32, 1e-3), (wp.mat33h, wp.vec3h, wp.float16, None)],
    ids=["float32", "float16"],
)
def test_other_float_types(dtypes):
    """The rules are generic over Warp's float types: float32 agrees with float64 to its precision;
    float16 builds and runs."""
    mat, vec, scalar, rtol = dtypes

    def svd_eig_qr(a, s, d, r):
        i = wp.tid()
        u, ss, v = wp.svd3(a[i])
        q, dd = wp.eig3(a[i] + wp.transpose(a[i]))
        qq, rr = wp.qr3(a[i])
        s[i] = ss + vec(u[0, 0], v[1, 1], scalar(0.0))
        d[i] = dd + vec(q[0, 0], scalar(0.0), scalar(0.0))
        r[i] = rr + qq

    # the types named here (this file's annotations are strings: a closure's names are not resolved)
    svd_eig_qr.__annotations__ = {"a": wp.array(dtype=mat), "s": wp.array(dtype=vec), "d": wp.array(dtype=vec)}
    svd_eig_qr.__annotations__["r"] = wp.array(dtype=mat)
    svd_eig_qr = wp.kernel(svd_eig_qr)

    rng = np.random.default_rng(8)
    a = _separated(rng, N, [3.0, 1.7, 0.6])
    t = rng.normal(size=(N, 3, 3))
    tk = _tangent.tangent_kernel(svd_eig_qr, {"a": True, "s": True, "d": True, "r": True}, "svd_eig_qr")
    args = [wp.array(a, dtype=mat, device=DEV)] + [wp.zeros(N, dtype=x, device=DEV) for x in (vec, vec, mat)]
    targs = [wp.array(t, dtype=mat, device=DEV)] + [wp.zeros(N, dtype=x, device=DEV) for x in (vec, vec, mat)]
    wp.launch(tk.kernel, dim=N, inputs=args + targs, device=DEV)
    got = [x.numpy().astype(np.float64) for x in targs[1:]]
    assert all(np.all(np.isfinite(g)) for g in got)
    if rtol is None:
        return
    case = Case(
        _f64_twin, N, {"a": (-2, 2)}, {"a": (N, 3, 3), "s": (N, 3), "d": (N, 3), "r": (N, 3, 3)}, ("s", "d", "r")
    )
    _, want = _run(case, {"a": a}, {"a": t})
    for g, n in zip(got, ("s", "d", "r")):
        np.testing.assert_allclose(g, want[n], rtol=rtol, atol=rtol * np.abs(want[n]).max(), err_msg=n)


@wp.kernel
def _f64_twin(
    a: wp.array(dtype=wp.mat33d), s: wp.array(dtype=wp.vec3d), d: wp.array(dtype=wp.vec3d), r: wp.array(dtype=wp.mat33d)
):
    i = wp.tid()
    u, ss, v = wp.svd3(a[i])
    q, dd = wp.eig3(a[i] + wp.transpose(a[i]))
    qq, rr = wp.qr3(a[i])
    s[i] = ss + wp.vec3d(u[0, 0], v[1, 1], F64(0.0))
    d[i] = dd + wp.vec3d(q[0, 0], F64(0.0), F64(0.0))
    r[i] = rr + qq


def test_second_order_through_svd3_in_jax():
    """jax Hessian-vector product through the op (Warp's adjoint of the tangent kernel, which calls
    svd3 and its adjoint again) against central differences of jax.grad (the primal's adjoint)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    with jax.enable_x64(True):  # this test's arrays are float64; the setting goes back after it
        op = interop.op(svd3_parts, outputs=["u", "s", "v"])
        cpu = jax.devices("cpu")[0]
        rng = np.random.default_rng(9)
        a = jax.device_put(jnp.asarray(_separated(rng, N, [3.0, 1.7, -0.6])), cpu)
        w = jax.device_put(jnp.asarray(rng.normal(size=(N, 3, 3))), cpu)

        def f(x):
            u, s, v = op(x)
            return jnp.sum(s[:, 0] * u[:, 1, 0] + s[:, 2] ** 2 + v[:, 0, 2] * u[:, 2, 2])

        g = jax.grad(f)
        hv = jax.jvp(g, (a,), (w,))[1]
        eps = 1e-6
        fd = (g(a + eps * w) - g(a - eps * w)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(hv), np.asarray(fd), rtol=1e-5, atol=1e-7)
