# mypy: disable-error-code="operator, index, call-arg"
# (Warp kernel-language code: mypy reads wp.vec3 - wp.vec3, m[i, j], wp.vector(a, b, c) as Python)
"""The Warp functions tangent code calls (:mod:`interop._tangent.rules` writes the calls).

Each is ordinary Warp code, so Warp differentiates a tangent kernel that calls it again (its
adjoint gives second derivatives). Where a tangent depends on the type (``transform * transform``
against every other product, a scalar divisor against a vector one, ``transform_point`` of a
transform against a 4x4 matrix), there are typed overloads beside a generic (``Any``) one: Warp
picks an exact match first, then the first generic overload that fits, in the order they were
registered. A body that is the same for every dtype is written once and registered once per type
(:func:`_typed`). Their names are reserved in the generated kernel's namespace
(``_interop_*``); :data:`HELPERS` maps them for it.
"""

from __future__ import annotations

import textwrap
from typing import Any

import warp as wp

from .._warp_compat import builtin_function, make_function

FLOATS = (wp.float16, wp.bfloat16, wp.float32, wp.float64)
TRANSFORMS = (wp.transformh, wp.transformf, wp.transformd)


def _typed(fn: Any, name: str, params: str, body: str, signatures: list[tuple]) -> Any:
    """Overloads of the Warp function ``name`` (``fn``: the one already registered, or None) from
    one ``body`` (Warp source text) over ``params`` ("a, b"), one per signature (the parameters'
    types in order): what the definition written out once per dtype would register. The body
    names other helpers as globals."""
    names = [p.strip() for p in params.split(",")]
    text = f"def {name}({params}):\n" + textwrap.indent(textwrap.dedent(body).strip() + "\n", "    ")
    module = wp.get_module(__name__)
    for types in signatures:
        local: dict = {}
        exec(compile(text, f"<interop helper {name}>", "exec"), globals(), local)  # noqa: S102 (text above)
        local[name].__annotations__ = dict(zip(names, types))
        fn = make_function(local[name], name, module, text, overload_of=fn)
    return fn


# ---- helpers the generated code calls (Warp functions: differentiable again) ----------------------
@wp.func
def _interop_zero(x: Any):
    return type(x)()


_interop_zero = _typed(_interop_zero, "_interop_zero", "x", "return type(x)(0.0)", [(t,) for t in FLOATS])
_interop_zero = _typed(_interop_zero, "_interop_zero", "x", "return type(x)(0)", [(wp.int32,), (wp.int64,)])
# a wp.func's bool or unsigned result (a flag, a key) returned beside a tangent: its zero (Warp has no
# bool() or uint64() without an argument)
_interop_zero = _typed(
    _interop_zero,
    "_interop_zero",
    "x",
    "return type(x)(0)",
    [(t,) for t in (wp.int8, wp.int16, wp.uint8, wp.uint16, wp.uint32, wp.uint64)],
)
_interop_zero = _typed(_interop_zero, "_interop_zero", "x", "return False", [(wp.bool,)])


# min/max/abs tangents: scalars in the _s functions (the branch Warp's adjoint takes: adj_min/adj_max
# route NaN to the other operand, then a < b / a > b; adj_abs: x < 0 -> -1), one overload per float
# type; the rules' entry points (_t) take scalars through them and vectors component by component (a
# distinct name: a function calling itself, even another overload, is refused as recursive)
_PICK = """
if wp.isnan(a):
    return tb
if wp.isnan(b):
    return ta
if a {} b:
    return ta
return tb
"""
_interop_min_s = _typed(None, "_interop_min_s", "a, b, ta, tb", _PICK.format("<"), [(t,) * 4 for t in FLOATS])
_interop_max_s = _typed(None, "_interop_max_s", "a, b, ta, tb", _PICK.format(">"), [(t,) * 4 for t in FLOATS])
_interop_abs_s = _typed(
    None, "_interop_abs_s", "x, tx", "if x < type(x)(0.0):\n    return -tx\nreturn tx", [(t, t) for t in FLOATS]
)


@wp.func
def _interop_min_t(a: Any, b: Any, ta: Any, tb: Any):
    r = type(ta)()
    for k in range(len(a)):
        r[k] = _interop_min_s(a[k], b[k], ta[k], tb[k])
    return r


@wp.func
def _interop_max_t(a: Any, b: Any, ta: Any, tb: Any):
    r = type(ta)()
    for k in range(len(a)):
        r[k] = _interop_max_s(a[k], b[k], ta[k], tb[k])
    return r


@wp.func
def _interop_abs_t(x: Any, tx: Any):
    r = type(tx)()
    for k in range(len(x)):
        r[k] = _interop_abs_s(x[k], tx[k])
    return r


_interop_min_t = _typed(
    _interop_min_t, "_interop_min_t", "a, b, ta, tb", "return _interop_min_s(a, b, ta, tb)", [(t,) * 4 for t in FLOATS]
)
_interop_max_t = _typed(
    _interop_max_t, "_interop_max_t", "a, b, ta, tb", "return _interop_max_s(a, b, ta, tb)", [(t,) * 4 for t in FLOATS]
)
_interop_abs_t = _typed(
    _interop_abs_t, "_interop_abs_t", "x, tx", "return _interop_abs_s(x, tx)", [(t, t) for t in FLOATS]
)


@wp.func
def _interop_clamp_t(x: Any, a: Any, b: Any, tx: Any, ta: Any, tb: Any):
    # adj_clamp: m = max(a, x) then min(m, b), each routed as adj_max / adj_min
    m = wp.max(a, x)
    tm = _interop_max_t(a, x, ta, tx)
    return _interop_min_t(m, b, tm, tb)


# d det(A): 2x2 and 3x3 by the determinant's multilinearity in the rows (right at a singular A too,
# as Warp's adj_determinant with its cofactors), larger by det(A) trace(A^-1 dA)
@wp.func
def _interop_det_t(a: Any, ta: Any):
    return wp.determinant(a) * wp.trace(wp.inverse(a) * ta)


_interop_det_t = _typed(
    _interop_det_t,
    "_interop_det_t",
    "a, ta",
    "return ta[0, 0] * a[1, 1] + a[0, 0] * ta[1, 1] - ta[0, 1] * a[1, 0] - a[0, 1] * ta[1, 0]",
    [(t, t) for t in (wp.mat22h, wp.mat22f, wp.mat22d)],
)
_interop_det_t = _typed(
    _interop_det_t,
    "_interop_det_t",
    "a, ta",
    "return wp.dot(ta[0], wp.cross(a[1], a[2])) + wp.dot(a[0], wp.cross(ta[1], a[2])) + wp.dot(a[0], wp.cross(a[1], ta[2]))",
    [(t, t) for t in (wp.mat33h, wp.mat33f, wp.mat33d)],
)


@wp.func
def _interop_length_t(a: Any, ta: Any, y: Any):
    if y > type(y)(0.0):
        return wp.dot(a, ta) / y
    return type(y)(0.0)


@wp.func
def _interop_normalize_t(a: Any, ta: Any, y: Any):
    n = wp.length(a)
    if n > type(n)(0.0):
        return (ta - y * wp.dot(y, ta)) / n
    return type(ta)()


# d(a / b) through b: -y tb / b for a scalar b (y may be a vector: v / s); component by component
# where b is a vector or matrix (s / v, s / M) or a quaternion (s / q). The scalar overloads are
# generic in y: Warp tries generic overloads in the order they were registered, so the fully generic
# one comes last.
_interop_div_tb = _typed(None, "_interop_div_tb", "b, y, tb", "return -(y * tb) / b", [(t, Any, t) for t in FLOATS])
_interop_div_tb = _typed(
    _interop_div_tb,
    "_interop_div_tb",
    "b, y, tb",
    "return type(b)(-y[0] * tb[0] / b[0], -y[1] * tb[1] / b[1], -y[2] * tb[2] / b[2], -y[3] * tb[3] / b[3])",
    [(t, t, t) for t in (wp.quath, wp.quatf, wp.quatd)],
)


@wp.func  # type: ignore[no-redef]
def _interop_div_tb(b: Any, y: Any, tb: Any):  # noqa: F811
    return -wp.cw_div(wp.cw_mul(y, tb), b)


# ---- rotations and transforms (quat.h, spatial.h): quat_rotate(q, x) = x c + v d + cross(v, x) 2 w with
# v = q.xyz, c = 2 w^2 - 1, d = 2 v.x (no normalization of q; Warp's adjoint differentiates the same formula).
# transform * transform is transform_multiply (not bilinear in the rotation): ``mul`` tangents go
# through _interop_mul_ta/_tb, ta * b and a * tb for every other type.
@wp.func
def _interop_quat_rotate_t(q: Any, x: Any, tq: Any, tx: Any):
    two = type(q.w)(2.0)
    v = wp.vector(q[0], q[1], q[2])
    tv = wp.vector(tq[0], tq[1], tq[2])
    c = two * q.w * q.w - type(q.w)(1.0)
    d = two * wp.dot(v, x)
    tc = two * two * q.w * tq.w
    td = two * (wp.dot(tv, x) + wp.dot(v, tx))
    return (
        tx * c
        + x * tc
        + tv * d
        + v * td
        + (wp.cross(tv, x) + wp.cross(v, tx)) * (two * q.w)  # type: ignore[operator]
        + wp.cross(v, x) * (two * tq.w)
    )


@wp.func
def _interop_quat_to_matrix_t(q: Any, tq: Any):
    one = type(q.w)(1.0)
    zero = type(q.w)(0.0)
    e = wp.vector(zero, zero, zero)
    return wp.matrix_from_cols(
        _interop_quat_rotate_t(q, wp.vector(one, zero, zero), tq, e),
        _interop_quat_rotate_t(q, wp.vector(zero, one, zero), tq, e),
        _interop_quat_rotate_t(q, wp.vector(zero, zero, one), tq, e),
    )


@wp.func
def _interop_quat_from_axis_angle_t(axis: Any, angle: Any, taxis: Any, tangle: Any):
    half = angle * type(angle)(0.5)
    s = wp.sin(half)
    c = wp.cos(half)
    tv = taxis * s + axis * (c * type(angle)(0.5) * tangle)
    return wp.quaternion(tv[0], tv[1], tv[2], -s * type(angle)(0.5) * tangle)


@wp.func
def _interop_transform_point_t(t: Any, x: Any, tt: Any, tx: Any):
    return wp.transform_get_translation(tt) + _interop_quat_rotate_t(
        wp.transform_get_rotation(t), x, wp.transform_get_rotation(tt), tx
    )


@wp.func
def _interop_transform_vector_t(t: Any, x: Any, tt: Any, tx: Any):
    return _interop_quat_rotate_t(wp.transform_get_rotation(t), x, wp.transform_get_rotation(tt), tx)


@wp.func
def _interop_transform_multiply_t(a: Any, b: Any, ta: Any, tb: Any):
    aq = wp.transform_get_rotation(a)
    taq = wp.transform_get_rotation(ta)
    p = wp.transform_get_translation(ta) + _interop_quat_rotate_t(
        aq, wp.transform_get_translation(b), taq, wp.transform_get_translation(tb)
    )
    return type(a)(p, taq * wp.transform_get_rotation(b) + aq * wp.transform_get_rotation(tb))  # type: ignore[operator]


@wp.func
def _interop_transform_inverse_t(t: Any, tt: Any):
    qi = wp.quat_inverse(wp.transform_get_rotation(t))
    tqi = wp.quat_inverse(wp.transform_get_rotation(tt))
    p = -_interop_quat_rotate_t(qi, wp.transform_get_translation(t), tqi, wp.transform_get_translation(tt))
    return type(t)(p, tqi)


@wp.func
def _interop_mesh_eval_position_t(mesh: wp.uint64, face: int, tu: float, tv: float):
    # mesh.h mesh_eval_position: p u + q v + r (1 - u - v) over the face's corners
    r = wp.mesh_get_point(mesh, face * 3 + 2)
    return (wp.mesh_get_point(mesh, face * 3 + 0) - r) * tu + (wp.mesh_get_point(mesh, face * 3 + 1) - r) * tv


@wp.func
def _interop_mesh_eval_velocity_t(mesh: wp.uint64, face: int, tu: float, tv: float):
    r = wp.mesh_get_velocity(mesh, face * 3 + 2)
    return (wp.mesh_get_velocity(mesh, face * 3 + 0) - r) * tu + (wp.mesh_get_velocity(mesh, face * 3 + 1) - r) * tv


@wp.func
def _interop_mul_ta(a: Any, b: Any, ta: Any):
    return ta * b


@wp.func
def _interop_mul_tb(a: Any, b: Any, tb: Any):
    return a * tb


_interop_mul_ta = _typed(
    _interop_mul_ta,
    "_interop_mul_ta",
    "a, b, ta",
    "return _interop_transform_multiply_t(a, b, ta, type(a)())",
    [(t,) * 3 for t in TRANSFORMS],
)
_interop_mul_tb = _typed(
    _interop_mul_tb,
    "_interop_mul_tb",
    "a, b, tb",
    "return _interop_transform_multiply_t(a, b, type(a)(), tb)",
    [(t,) * 3 for t in TRANSFORMS],
)

# transform_point / transform_vector of a 4x4 matrix (the homogeneous point / direction): bilinear
_MAT44 = [(m, v, m, v) for m, v in ((wp.mat44h, wp.vec3h), (wp.mat44f, wp.vec3f), (wp.mat44d, wp.vec3d))]
_interop_transform_point_t = _typed(
    _interop_transform_point_t,
    "_interop_transform_point_t",
    "t, x, tt, tx",
    "return wp.transform_point(tt, x) + wp.transform_vector(t, tx)",
    _MAT44,
)
_interop_transform_vector_t = _typed(
    _interop_transform_vector_t,
    "_interop_transform_vector_t",
    "t, x, tt, tx",
    "return wp.transform_vector(tt, x) + wp.transform_vector(t, tx)",
    _MAT44,
)


@wp.func
def _interop_copysign_t(x: Any, y: Any, tx: Any):
    # adj_copysign: +tx where x and y have the same sign bit, else -tx; nothing through y
    one = type(x)(1.0)
    if wp.copysign(one, x) == wp.copysign(one, y):
        return tx
    return -tx


@wp.func
def _interop_smoothstep_t(e0: Any, e1: Any, x: Any, te0: Any, te1: Any, tx: Any):
    # adj_smoothstep's formulas and its test for the clamped region
    ab = e0 - e1
    ax = e0 - x
    bx = e1 - x
    zero = type(x)(0.0)
    if bx / ab >= zero or ax / ab <= zero:
        return zero
    six = type(x)(6.0)
    ab3 = ab * ab * ab
    ab4 = ab3 * ab
    return te0 * (six * ax * bx * bx) / ab4 + te1 * (six * ax * ax * (x - e1)) / ab4 + tx * (six * ax * bx) / ab3


# ---- expansions: builtins whose tangent is generated from a wp.func that computes the same
# (Warp's native code written again, line for line); the primal stays the builtin's
@wp.func
def _interop_quat_from_matrix(m: Any):
    # quat.h quat_from_matrix (3x3, or the rotation block of a 4x4)
    zero = type(m[0, 0])(0.0)
    half = type(m[0, 0])(0.5)
    one = type(m[0, 0])(1.0)
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    x = zero
    y = zero
    z = zero
    w = zero
    h = zero
    if tr >= zero:
        h = wp.sqrt(tr + one)
        w = half * h
        h = half / h
        x = (m[2, 1] - m[1, 2]) * h
        y = (m[0, 2] - m[2, 0]) * h
        z = (m[1, 0] - m[0, 1]) * h
    else:
        max_diag = int(0)  # noqa: UP018 (a Warp variable the branches below assign, not a constant)
        if m[1, 1] > m[0, 0]:
            max_diag = 1
        if m[2, 2] > m[max_diag, max_diag]:
            max_diag = 2
        if max_diag == 0:
            h = wp.sqrt((m[0, 0] - (m[1, 1] + m[2, 2])) + one)
            x = half * h
            h = half / h
            y = (m[0, 1] + m[1, 0]) * h
            z = (m[2, 0] + m[0, 2]) * h
            w = (m[2, 1] - m[1, 2]) * h
        elif max_diag == 1:
            h = wp.sqrt((m[1, 1] - (m[2, 2] + m[0, 0])) + one)
            y = half * h
            h = half / h
            z = (m[1, 2] + m[2, 1]) * h
            x = (m[0, 1] + m[1, 0]) * h
            w = (m[0, 2] - m[2, 0]) * h
        if max_diag == 2:
            h = wp.sqrt((m[2, 2] - (m[0, 0] + m[1, 1])) + one)
            z = half * h
            h = half / h
            x = (m[2, 0] + m[0, 2]) * h
            y = (m[1, 2] + m[2, 1]) * h
            w = (m[1, 0] - m[0, 1]) * h
    return wp.normalize(wp.quaternion(x, y, z, w))


@wp.func
def _interop_quat_to_axis_angle(q: Any):
    # quat.h quat_to_axis_angle: the axis flipped with the scalar part's sign, the angle in [0, pi]
    zero = type(q[0])(0.0)
    two = type(q[0])(2.0)
    v = wp.vector(q[0], q[1], q[2])
    axis = wp.normalize(v)
    if q[3] < zero:
        axis = -axis
    angle = two * wp.atan2(wp.length(v), wp.abs(q[3]))
    return axis, angle


@wp.func
def _interop_quat_slerp(q0: Any, q1: Any, t: Any):
    # quat.h quat_slerp: q0 times the rotation t of the way from q0 to q1
    axis, angle = _interop_quat_to_axis_angle(wp.quat_inverse(q0) * q1)
    return q0 * wp.quat_from_axis_angle(axis, t * angle)


# ---- decompositions (svd.h): closed-form tangents of the exact factorization at the factors Warp
# computes (the builtin again inside: the primal results stay the builtin's). Where two singular
# values (eigenvalues) coincide the singular vectors (eigenvectors) have no derivative: the same
# clamps as Warp's adjoint keep the tangent finite there (adj_svd3/adj_svd2: s_j^2 - s_i^2 <= -eps;
# adj_eig3: |d_j - d_i| >= 1e-6), and an exact eigenvalue tie couples nothing (Warp's adjoint
# divides by zero there).
_SVD_EPS = "return type(x)({})"
_interop_svd_eps = _typed(None, "_interop_svd_eps", "x", _SVD_EPS.format("1.0e-6"), [(t,) for t in FLOATS[:3]])
_interop_svd_eps = _typed(_interop_svd_eps, "_interop_svd_eps", "x", _SVD_EPS.format("1.0e-12"), [(wp.float64,)])


@wp.func
def _interop_svd_f(si: Any, sj: Any):
    # F_ij = 1 / (s_j^2 - s_i^2), i < j (the values sorted by decreasing magnitude), as adj_svd3 clamps it
    return type(si)(1.0) / wp.min(sj * sj - si * si, -_interop_svd_eps(si))


@wp.func
def _interop_svd3_t(a: Any, ta: Any):
    # A = U S V^T, P = U^T dA V: dS = diag(P), dU = U (F o (P S + S P^T)), dV = V (F o (S P + P^T S))
    u, s, v = wp.svd3(a)
    zero = type(s[0])(0.0)
    p = wp.transpose(u) * ta * v
    f01 = _interop_svd_f(s[0], s[1])
    f02 = _interop_svd_f(s[0], s[2])
    f12 = _interop_svd_f(s[1], s[2])
    f = type(a)(zero, f01, f02, -f01, zero, f12, -f02, -f12, zero)
    sm = wp.diag(s)
    pt = wp.transpose(p)
    du = u * wp.cw_mul(f, p * sm + sm * pt)
    dv = v * wp.cw_mul(f, sm * p + pt * sm)
    return du, type(s)(p[0, 0], p[1, 1], p[2, 2]), dv


@wp.func
def _interop_svd2_t(a: Any, ta: Any):
    # as _interop_svd3_t, 2x2 (adj_svd2)
    u, s, v = wp.svd2(a)
    zero = type(s[0])(0.0)
    p = wp.transpose(u) * ta * v
    f01 = _interop_svd_f(s[0], s[1])
    f = type(a)(zero, f01, -f01, zero)
    sm = wp.diag(s)
    pt = wp.transpose(p)
    du = u * wp.cw_mul(f, p * sm + sm * pt)
    dv = v * wp.cw_mul(f, sm * p + pt * sm)
    return du, type(s)(p[0, 0], p[1, 1]), dv


@wp.func
def _interop_eig_e(di: Any, dj: Any):
    # E_ij = 1 / (d_j - d_i) with adj_eig3's clamp of the difference to |.| >= 1e-6; 0 at a tie
    x = dj - di
    zero = type(x)(0.0)
    lim = type(x)(1.0e-6)
    if x == zero:
        return zero
    if x < zero and x > -lim:
        x = -lim
    if x > zero and x < lim:
        x = lim
    return type(x)(1.0) / x


@wp.func
def _interop_eig3_t(a: Any, ta: Any):
    # A = Q diag(d) Q^T: dd_i = q_i^T dA q_i (d is diag(Q^T A Q): the whole of dA), dQ = Q (E o Q^T dL Q)
    # with dL the symmetric matrix of dA's lower triangle (the one eig3 diagonalizes)
    q, d = wp.eig3(a)
    zero = type(d[0])(0.0)
    tl = type(a)(ta[0, 0], ta[1, 0], ta[2, 0], ta[1, 0], ta[1, 1], ta[2, 1], ta[2, 0], ta[2, 1], ta[2, 2])
    qt = wp.transpose(q)
    p = qt * tl * q
    e01 = _interop_eig_e(d[0], d[1])
    e02 = _interop_eig_e(d[0], d[2])
    e12 = _interop_eig_e(d[1], d[2])
    e = type(a)(zero, e01, e02, -e01, zero, e12, -e02, -e12, zero)
    pd = qt * ta * q
    return q * wp.cw_mul(e, p), type(d)(pd[0, 0], pd[1, 1], pd[2, 2])


@wp.func
def _interop_qr3_t(a: Any, ta: Any):
    # A = Q R: X = Q^T dA R^-1, W = lower(X) - lower(X)^T (strictly lower), dQ = Q W, dR = Q^T dA - W R
    q, r = wp.qr3(a)
    zero = type(r[0, 0])(0.0)
    qta = wp.transpose(q) * ta
    x = qta * wp.inverse(r)
    w = type(a)(zero, -x[1, 0], -x[2, 0], x[1, 0], zero, -x[2, 1], x[2, 0], x[2, 1], zero)
    return q * w, qta - w * r


#: builtins returning several values whose tangents have a closed form: builtin key -> a wp.func
#: taking the builtin's arguments, then their tangents (zeros where none), returning the tangent of
#: each result in order (the primal results stay the builtin's); only those this Warp has
TUPLE_TANGENTS: dict[str, Any] = {
    key: fn
    for key, fn in (
        ("svd3", _interop_svd3_t),
        ("svd2", _interop_svd2_t),
        ("eig3", _interop_eig3_t),
        ("qr3", _interop_qr3_t),
    )
    if builtin_function(key) is not None
}

EXPANSIONS = {
    "quat_from_matrix": _interop_quat_from_matrix,
    "quat_to_axis_angle": _interop_quat_to_axis_angle,
    "quat_slerp": _interop_quat_slerp,
}


HELPERS = {
    "_interop_zero": _interop_zero,
    "_interop_min_t": _interop_min_t,
    "_interop_max_t": _interop_max_t,
    "_interop_clamp_t": _interop_clamp_t,
    "_interop_abs_t": _interop_abs_t,
    "_interop_length_t": _interop_length_t,
    "_interop_normalize_t": _interop_normalize_t,
    "_interop_det_t": _interop_det_t,
    "_interop_quat_rotate_t": _interop_quat_rotate_t,
    "_interop_quat_to_matrix_t": _interop_quat_to_matrix_t,
    "_interop_quat_from_axis_angle_t": _interop_quat_from_axis_angle_t,
    "_interop_transform_point_t": _interop_transform_point_t,
    "_interop_transform_vector_t": _interop_transform_vector_t,
    "_interop_transform_multiply_t": _interop_transform_multiply_t,
    "_interop_transform_inverse_t": _interop_transform_inverse_t,
    "_interop_mesh_eval_position_t": _interop_mesh_eval_position_t,
    "_interop_mesh_eval_velocity_t": _interop_mesh_eval_velocity_t,
    "_interop_mul_ta": _interop_mul_ta,
    "_interop_div_tb": _interop_div_tb,
    "_interop_mul_tb": _interop_mul_tb,
    "_interop_copysign_t": _interop_copysign_t,
    "_interop_smoothstep_t": _interop_smoothstep_t,
}
