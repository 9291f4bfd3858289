"""Tangent rules of Warp's builtins, for the tangent-kernel generator (:mod:`interop._tangent`).

A rule takes the lowered arguments of one builtin call, each ``(primal, tangent)`` as source text
(``tangent`` is ``None`` where it is structurally zero), and the name ``y`` of the temporary that
holds the call's result, and returns the tangent of the result as source text (``None``: zero).
Every rule is written in Warp's own language, so Warp can differentiate the tangent kernel again
(its adjoint gives second derivatives). Piecewise rules choose the branch Warp's adjoint chooses
(``native/builtin.h``: ``adj_min``, ``adj_max``, ``adj_clamp``, ``adj_abs``, ``adj_length``), so
forward and reverse mode agree at kinks too.

The rules' names for Warp and for the helpers below are reserved in the generated kernel's
namespace: ``_interop_wp`` (the ``warp`` module) and ``_interop_*``.

Builtins that have no rule here are refused by the generator when an argument carries a tangent
(naming the builtin and the source line); a builtin whose arguments carry no tangent needs no rule.
"""

from __future__ import annotations

from typing import Any, Callable

import warp as wp

W = "_interop_wp"
Arg = tuple[str, str | None]
Rule = Callable[[list[Arg], str], str | None]


# ---- helpers the generated code calls (Warp functions: differentiable again) ----------------------
@wp.func
def _interop_zero(x: wp.float16):
    return wp.float16(0.0)


@wp.func  # type: ignore[no-redef]
def _interop_zero(x: wp.bfloat16):  # noqa: F811
    return wp.bfloat16(0.0)


@wp.func  # type: ignore[no-redef]
def _interop_zero(x: wp.float32):  # noqa: F811
    return wp.float32(0.0)


@wp.func  # type: ignore[no-redef]
def _interop_zero(x: wp.float64):  # noqa: F811
    return wp.float64(0.0)


@wp.func  # type: ignore[no-redef]
def _interop_zero(x: wp.int32):  # noqa: F811
    return wp.int32(0)


@wp.func  # type: ignore[no-redef]
def _interop_zero(x: wp.int64):  # noqa: F811
    return wp.int64(0)


@wp.func  # type: ignore[no-redef]
def _interop_zero(x: Any):  # noqa: F811
    return type(x)()


# min/max/abs tangents: one overload per float scalar type (the branch Warp's adjoint takes:
# adj_min/adj_max route NaN to the other operand, then a < b / a > b; adj_abs: x < 0 -> -1), then a
# generic one for vectors, component by component (Warp's min/max/abs of vectors)


@wp.func
def _interop_min_t(a: wp.float16, b: wp.float16, ta: wp.float16, tb: wp.float16):
    if wp.isnan(a):
        return tb
    if wp.isnan(b):
        return ta
    if a < b:
        return ta
    return tb


@wp.func
def _interop_max_t(a: wp.float16, b: wp.float16, ta: wp.float16, tb: wp.float16):
    if wp.isnan(a):
        return tb
    if wp.isnan(b):
        return ta
    if a > b:
        return ta
    return tb


@wp.func
def _interop_abs_t(x: wp.float16, tx: wp.float16):
    if x < wp.float16(0.0):
        return -tx
    return tx


@wp.func  # type: ignore[no-redef]
def _interop_min_t(a: wp.float32, b: wp.float32, ta: wp.float32, tb: wp.float32):  # noqa: F811
    if wp.isnan(a):
        return tb
    if wp.isnan(b):
        return ta
    if a < b:
        return ta
    return tb


@wp.func  # type: ignore[no-redef]
def _interop_max_t(a: wp.float32, b: wp.float32, ta: wp.float32, tb: wp.float32):  # noqa: F811
    if wp.isnan(a):
        return tb
    if wp.isnan(b):
        return ta
    if a > b:
        return ta
    return tb


@wp.func  # type: ignore[no-redef]
def _interop_abs_t(x: wp.float32, tx: wp.float32):  # noqa: F811
    if x < wp.float32(0.0):
        return -tx
    return tx


@wp.func  # type: ignore[no-redef]
def _interop_min_t(a: wp.float64, b: wp.float64, ta: wp.float64, tb: wp.float64):  # noqa: F811
    if wp.isnan(a):
        return tb
    if wp.isnan(b):
        return ta
    if a < b:
        return ta
    return tb


@wp.func  # type: ignore[no-redef]
def _interop_max_t(a: wp.float64, b: wp.float64, ta: wp.float64, tb: wp.float64):  # noqa: F811
    if wp.isnan(a):
        return tb
    if wp.isnan(b):
        return ta
    if a > b:
        return ta
    return tb


@wp.func  # type: ignore[no-redef]
def _interop_abs_t(x: wp.float64, tx: wp.float64):  # noqa: F811
    if x < wp.float64(0.0):
        return -tx
    return tx


@wp.func  # type: ignore[no-redef]
def _interop_min_t(a: Any, b: Any, ta: Any, tb: Any):  # noqa: F811
    r = type(ta)()
    for k in range(len(a)):
        r[k] = _interop_min_t(a[k], b[k], ta[k], tb[k])
    return r


@wp.func  # type: ignore[no-redef]
def _interop_max_t(a: Any, b: Any, ta: Any, tb: Any):  # noqa: F811
    r = type(ta)()
    for k in range(len(a)):
        r[k] = _interop_max_t(a[k], b[k], ta[k], tb[k])
    return r


@wp.func  # type: ignore[no-redef]
def _interop_abs_t(x: Any, tx: Any):  # noqa: F811
    r = type(tx)()
    for k in range(len(x)):
        r[k] = _interop_abs_t(x[k], tx[k])
    return r


@wp.func
def _interop_clamp_t(x: Any, a: Any, b: Any, tx: Any, ta: Any, tb: Any):
    # adj_clamp: m = max(a, x) then min(m, b), each routed as adj_max / adj_min
    m = wp.max(a, x)
    tm = _interop_max_t(a, x, ta, tx)
    return _interop_min_t(m, b, tm, tb)


# d det(A): 2x2 and 3x3 by the determinant's multilinearity in the rows (right at a singular A too,
# as Warp's adj_determinant with its cofactors), larger by det(A) trace(A^-1 dA)
@wp.func
def _interop_det_t(a: wp.mat22h, ta: wp.mat22h):
    return ta[0, 0] * a[1, 1] + a[0, 0] * ta[1, 1] - ta[0, 1] * a[1, 0] - a[0, 1] * ta[1, 0]


@wp.func  # type: ignore[no-redef]
def _interop_det_t(a: wp.mat33h, ta: wp.mat33h):  # noqa: F811
    return (
        wp.dot(ta[0], wp.cross(a[1], a[2])) + wp.dot(a[0], wp.cross(ta[1], a[2])) + wp.dot(a[0], wp.cross(a[1], ta[2]))
    )


@wp.func  # type: ignore[no-redef]
def _interop_det_t(a: wp.mat22, ta: wp.mat22):  # noqa: F811
    return ta[0, 0] * a[1, 1] + a[0, 0] * ta[1, 1] - ta[0, 1] * a[1, 0] - a[0, 1] * ta[1, 0]


@wp.func  # type: ignore[no-redef]
def _interop_det_t(a: wp.mat33, ta: wp.mat33):  # noqa: F811
    return (
        wp.dot(ta[0], wp.cross(a[1], a[2])) + wp.dot(a[0], wp.cross(ta[1], a[2])) + wp.dot(a[0], wp.cross(a[1], ta[2]))
    )


@wp.func  # type: ignore[no-redef]
def _interop_det_t(a: wp.mat22d, ta: wp.mat22d):  # noqa: F811
    return ta[0, 0] * a[1, 1] + a[0, 0] * ta[1, 1] - ta[0, 1] * a[1, 0] - a[0, 1] * ta[1, 0]


@wp.func  # type: ignore[no-redef]
def _interop_det_t(a: wp.mat33d, ta: wp.mat33d):  # noqa: F811
    return (
        wp.dot(ta[0], wp.cross(a[1], a[2])) + wp.dot(a[0], wp.cross(ta[1], a[2])) + wp.dot(a[0], wp.cross(a[1], ta[2]))
    )


@wp.func  # type: ignore[no-redef]
def _interop_det_t(a: Any, ta: Any):  # noqa: F811
    return wp.determinant(a) * wp.trace(wp.inverse(a) * ta)


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
# where b is a vector or matrix (s / v, s / M) or a quaternion (s / q)
@wp.func
def _interop_div_tb(b: wp.float16, y: Any, tb: wp.float16):
    return -(y * tb) / b


@wp.func  # type: ignore[no-redef]
def _interop_div_tb(b: wp.float32, y: Any, tb: wp.float32):  # noqa: F811
    return -(y * tb) / b


@wp.func  # type: ignore[no-redef]
def _interop_div_tb(b: wp.float64, y: Any, tb: wp.float64):  # noqa: F811
    return -(y * tb) / b


@wp.func  # type: ignore[no-redef]
def _interop_div_tb(b: wp.quath, y: wp.quath, tb: wp.quath):  # noqa: F811
    return wp.quath(-y[0] * tb[0] / b[0], -y[1] * tb[1] / b[1], -y[2] * tb[2] / b[2], -y[3] * tb[3] / b[3])


@wp.func  # type: ignore[no-redef]
def _interop_div_tb(b: wp.quatf, y: wp.quatf, tb: wp.quatf):  # noqa: F811
    return wp.quatf(-y[0] * tb[0] / b[0], -y[1] * tb[1] / b[1], -y[2] * tb[2] / b[2], -y[3] * tb[3] / b[3])


@wp.func  # type: ignore[no-redef]
def _interop_div_tb(b: wp.quatd, y: wp.quatd, tb: wp.quatd):  # noqa: F811
    return wp.quatd(-y[0] * tb[0] / b[0], -y[1] * tb[1] / b[1], -y[2] * tb[2] / b[2], -y[3] * tb[3] / b[3])


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
def _interop_mul_ta(a: Any, b: Any, ta: Any):
    return ta * b


@wp.func
def _interop_mul_tb(a: Any, b: Any, tb: Any):
    return a * tb


@wp.func  # type: ignore[no-redef]
def _interop_mul_ta(a: wp.transformh, b: wp.transformh, ta: wp.transformh):  # noqa: F811
    return _interop_transform_multiply_t(a, b, ta, wp.transformh())


@wp.func  # type: ignore[no-redef]
def _interop_mul_tb(a: wp.transformh, b: wp.transformh, tb: wp.transformh):  # noqa: F811
    return _interop_transform_multiply_t(a, b, wp.transformh(), tb)


@wp.func  # type: ignore[no-redef]
def _interop_mul_ta(a: wp.transformf, b: wp.transformf, ta: wp.transformf):  # noqa: F811
    return _interop_transform_multiply_t(a, b, ta, wp.transformf())


@wp.func  # type: ignore[no-redef]
def _interop_mul_tb(a: wp.transformf, b: wp.transformf, tb: wp.transformf):  # noqa: F811
    return _interop_transform_multiply_t(a, b, wp.transformf(), tb)


@wp.func  # type: ignore[no-redef]
def _interop_mul_ta(a: wp.transformd, b: wp.transformd, ta: wp.transformd):  # noqa: F811
    return _interop_transform_multiply_t(a, b, ta, wp.transformd())


@wp.func  # type: ignore[no-redef]
def _interop_mul_tb(a: wp.transformd, b: wp.transformd, tb: wp.transformd):  # noqa: F811
    return _interop_transform_multiply_t(a, b, wp.transformd(), tb)


# transform_point / transform_vector of a 4x4 matrix (the homogeneous point / direction): bilinear
@wp.func  # type: ignore[no-redef]
def _interop_transform_point_t(t: wp.mat44h, x: wp.vec3h, tt: wp.mat44h, tx: wp.vec3h):  # noqa: F811
    return wp.transform_point(tt, x) + wp.transform_vector(t, tx)


@wp.func  # type: ignore[no-redef]
def _interop_transform_point_t(t: wp.mat44, x: wp.vec3, tt: wp.mat44, tx: wp.vec3):  # noqa: F811
    return wp.transform_point(tt, x) + wp.transform_vector(t, tx)


@wp.func  # type: ignore[no-redef]
def _interop_transform_point_t(t: wp.mat44d, x: wp.vec3d, tt: wp.mat44d, tx: wp.vec3d):  # noqa: F811
    return wp.transform_point(tt, x) + wp.transform_vector(t, tx)  # type: ignore[call-overload]


@wp.func  # type: ignore[no-redef]
def _interop_transform_vector_t(t: wp.mat44h, x: wp.vec3h, tt: wp.mat44h, tx: wp.vec3h):  # noqa: F811
    return wp.transform_vector(tt, x) + wp.transform_vector(t, tx)


@wp.func  # type: ignore[no-redef]
def _interop_transform_vector_t(t: wp.mat44, x: wp.vec3, tt: wp.mat44, tx: wp.vec3):  # noqa: F811
    return wp.transform_vector(tt, x) + wp.transform_vector(t, tx)


@wp.func  # type: ignore[no-redef]
def _interop_transform_vector_t(t: wp.mat44d, x: wp.vec3d, tt: wp.mat44d, tx: wp.vec3d):  # noqa: F811
    return wp.transform_vector(tt, x) + wp.transform_vector(t, tx)  # type: ignore[call-overload]


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
    "_interop_mul_ta": _interop_mul_ta,
    "_interop_div_tb": _interop_div_tb,
    "_interop_mul_tb": _interop_mul_tb,
    "_interop_copysign_t": _interop_copysign_t,
    "_interop_smoothstep_t": _interop_smoothstep_t,
}


# ---- building blocks -------------------------------------------------------------------------------
def zero(p: str) -> str:
    """The zero tangent of the value ``p``: of its type, or a literal 0 of a literal's kind (Warp types a
    literal where it is used: ``wp.vec3h(1.0, h, 3.0)``'s tangent is ``wp.vec3h(0.0, dh, 0.0)``)."""
    try:
        v = float(p)
    except ValueError:
        return f"_interop_zero({p})"
    return "0" if v.is_integer() and p.lstrip("+-").isdigit() else "0.0"


def _or_zero(a: Arg) -> str:
    return a[1] if a[1] is not None else zero(a[0])


def _sum(*terms: str | None) -> str | None:
    live = [t for t in terms if t is not None]
    if not live:
        return None
    return " + ".join(f"({t})" for t in live)


def _c(p: str, v: float) -> str:
    """The constant ``v`` typed like the scalar ``p``."""
    return f"type({p})({v!r})"


def _linear(fn: str) -> Rule:
    """f(ta, tb, ...) for a builtin linear in all of its arguments (zeros where no tangent)."""

    def rule(args: list[Arg], y: str) -> str | None:
        if all(t is None for _, t in args):
            return None
        return f"{fn}({', '.join(_or_zero(a) for a in args)})"

    return rule


class NoRule(Exception):
    """A rule exists for the builtin but not for this use of it (the message says which)."""


def _bilinear(fn: str) -> Rule:
    """Product rule: f(ta, b) + f(a, tb)."""

    def rule(args: list[Arg], y: str) -> str | None:
        (a, ta), (b, tb) = args
        return _sum(None if ta is None else f"{fn}({ta}, {b})", None if tb is None else f"{fn}({a}, {tb})")

    return rule


def _unary(derivative: Callable[[str, str], str]) -> Rule:
    """f'(a) * ta, ``derivative(a, y)`` the source of f'(a) given the result ``y``."""

    def rule(args: list[Arg], y: str) -> str | None:
        (a, ta), *rest = args
        if any(t is not None for _, t in rest):
            raise NoRule("a differentiated second argument")
        return None if ta is None else f"({derivative(a, y)}) * ({ta})"

    return rule


def _zero_rule(args: list[Arg], y: str) -> str | None:
    return None


# ---- arithmetic ----------------------------------------------------------------------------------
def _add(args: list[Arg], y: str) -> str | None:
    (_, ta), (_, tb) = args
    return _sum(ta, tb)


def _sub(args: list[Arg], y: str) -> str | None:
    (_, ta), (_, tb) = args
    if tb is None:
        return ta
    if ta is None:
        return f"-({tb})"
    return f"({ta}) - ({tb})"


def _neg(args: list[Arg], y: str) -> str | None:
    t = args[0][1]
    return None if t is None else f"-({t})"


def _pos(args: list[Arg], y: str) -> str | None:
    return args[0][1]


def _div(args: list[Arg], y: str) -> str | None:
    # a / b: ta / b - y tb / b; a scalar divided by a vector, matrix or quaternion divides component
    # by component (_interop_div_tb)
    (a, ta), (b, tb) = args
    return _sum(None if ta is None else f"({ta}) / ({b})", None if tb is None else f"_interop_div_tb({b}, {y}, {tb})")


def _mod(args: list[Arg], y: str) -> str | None:
    # fmod(a, b) = a - b * trunc(a / b): d/da = 1, d/db = -trunc(a / b)
    (a, ta), (b, tb) = args
    if tb is None:
        return ta
    return _sum(ta, f"-({tb}) * {W}.trunc(({a}) / ({b}))")


def _pow(args: list[Arg], y: str) -> str | None:
    (a, ta), (b, tb) = args
    da = None if ta is None else f"({b}) * {W}.pow({a}, ({b}) - {_c(b, 1.0)}) * ({ta})"
    db = None if tb is None else f"({y}) * {W}.log({a}) * ({tb})"
    return _sum(da, db)


def _atan2(args: list[Arg], y: str) -> str | None:
    # atan2(u, v): d = (v du - u dv) / (u^2 + v^2)
    (u, tu), (v, tv) = args
    den = f"(({u}) * ({u}) + ({v}) * ({v}))"
    return _sum(
        None if tu is None else f"({v}) * ({tu}) / {den}",
        None if tv is None else f"-({u}) * ({tv}) / {den}",
    )


def _where(args: list[Arg], y: str) -> str | None:
    (c, _), a, b = args
    if a[1] is None and b[1] is None:
        return None
    return f"{W}.where({c}, {_or_zero(a)}, {_or_zero(b)})"


def _select(args: list[Arg], y: str) -> str | None:
    (c, _), a, b = args
    if a[1] is None and b[1] is None:
        return None
    return f"{W}.select({c}, {_or_zero(a)}, {_or_zero(b)})"


def _piecewise2(helper: str) -> Rule:
    def rule(args: list[Arg], y: str) -> str | None:
        if len(args) != 2:
            raise NoRule("the one-argument form (a reduction over components)")
        a, b = args
        if a[1] is None and b[1] is None:
            return None
        return f"{helper}({a[0]}, {b[0]}, {_or_zero(a)}, {_or_zero(b)})"

    return rule


def _clamp(args: list[Arg], y: str) -> str | None:
    x, a, b = args
    if all(t is None for _, t in args):
        return None
    return f"_interop_clamp_t({x[0]}, {a[0]}, {b[0]}, {_or_zero(x)}, {_or_zero(a)}, {_or_zero(b)})"


def _abs(args: list[Arg], y: str) -> str | None:
    ((a, ta),) = args
    return None if ta is None else f"_interop_abs_t({a}, {ta})"


def _lerp(args: list[Arg], y: str) -> str | None:
    # a + t (b - a): da (1 - t) + db t + (b - a) dt
    (a, ta), (b, tb), (t, tt) = args
    return _sum(
        None if ta is None else f"({ta}) * ({_c(t, 1.0)} - ({t}))",
        None if tb is None else f"({tb}) * ({t})",
        None if tt is None else f"(({b}) - ({a})) * ({tt})",
    )


def _length(args: list[Arg], y: str) -> str | None:
    ((a, ta),) = args
    return None if ta is None else f"_interop_length_t({a}, {ta}, {y})"


def _length_sq(args: list[Arg], y: str) -> str | None:
    ((a, ta),) = args
    return None if ta is None else f"{_c(y, 2.0)} * {W}.dot({a}, {ta})"


def _normalize(args: list[Arg], y: str) -> str | None:
    ((a, ta),) = args
    return None if ta is None else f"_interop_normalize_t({a}, {ta}, {y})"


def _inverse(args: list[Arg], y: str) -> str | None:
    ((a, ta),) = args
    return None if ta is None else f"-(({y}) * ({ta}) * ({y}))"


def _determinant(args: list[Arg], y: str) -> str | None:
    ((a, ta),) = args
    return None if ta is None else f"_interop_det_t({a}, {ta})"


def _cw_div(args: list[Arg], y: str) -> str | None:
    (a, ta), (b, tb) = args
    if tb is None:
        return None if ta is None else f"{W}.cw_div({ta}, {b})"
    num = f"{W}.cw_mul({y}, {tb})"
    return (
        f"{W}.cw_div({num if ta is None else f'({ta}) - {num}'}, {b})" if ta is not None else f"-{W}.cw_div({num}, {b})"
    )


def _erf(sign: str) -> Rule:
    # d erf(a) = 2 / sqrt(pi) exp(-a^2); erfc = 1 - erf
    return _unary(lambda a, y: f"{sign}{_c(a, 1.1283791670955126)} * {W}.exp(-({a}) * ({a}))")


def _mul(args: list[Arg], y: str) -> str | None:
    # the product rule, through helpers: transform * transform is transform_multiply
    (a, ta), (b, tb) = args
    return _sum(
        None if ta is None else f"_interop_mul_ta({a}, {b}, {ta})",
        None if tb is None else f"_interop_mul_tb({a}, {b}, {tb})",
    )


def _helper(name: str) -> Rule:
    """``name(primals..., tangents...)``: every argument's tangent (zeros where none)."""

    def rule(args: list[Arg], y: str) -> str | None:
        if all(t is None for _, t in args):
            return None
        return f"{name}({', '.join([p for p, _ in args] + [_or_zero(a) for a in args])})"

    return rule


def _copysign(args: list[Arg], y: str) -> str | None:
    (x, tx), (yy, _) = args
    return None if tx is None else f"_interop_copysign_t({x}, {yy}, {tx})"


def _quat_rotate_inv(args: list[Arg], y: str) -> str | None:
    # quat_rotate_inv(q, x) is quat_rotate(quat_inverse(q), x), formula for formula (quat.h)
    (q, tq), (x, tx) = args
    if tq is None and tx is None:
        return None
    qi = f"{W}.quat_inverse({q})"
    return f"_interop_quat_rotate_t({qi}, {x}, {W}.quat_inverse({_or_zero((q, tq))}), {_or_zero((x, tx))})"


LN2 = 0.6931471805599453
LN10 = 2.302585092994046

RULES: dict[str, Rule] = {
    # linear
    "add": _add,
    "sub": _sub,
    "neg": _neg,
    "pos": _pos,
    "transpose": _linear(f"{W}.transpose"),
    "trace": _linear(f"{W}.trace"),
    "diag": _linear(f"{W}.diag"),
    "get_diag": _linear(f"{W}.get_diag"),
    "skew": _linear(f"{W}.skew"),
    "quat_inverse": _linear(f"{W}.quat_inverse"),
    "frac": lambda args, y: args[0][1],
    "radians": _unary(lambda a, y: _c(a, 0.017453292519943295)),
    "degrees": _unary(lambda a, y: _c(a, 57.29577951308232)),
    "vector": _linear(f"{W}.vector"),
    "matrix": _linear(f"{W}.matrix"),
    "quaternion": _linear(f"{W}.quaternion"),
    "transformation": _linear(f"{W}.transformation"),
    "spatial_vector": _linear(f"{W}.spatial_vector"),
    "spatial_top": _linear(f"{W}.spatial_top"),
    "spatial_bottom": _linear(f"{W}.spatial_bottom"),
    # bilinear (product rule)
    "mul": _mul,
    "dot": _bilinear(f"{W}.dot"),
    "cross": _bilinear(f"{W}.cross"),
    "outer": _bilinear(f"{W}.outer"),
    "cw_mul": _bilinear(f"{W}.cw_mul"),
    "ddot": _bilinear(f"{W}.ddot"),
    "spatial_cross": _bilinear(f"{W}.spatial_cross"),
    "spatial_dot": _bilinear(f"{W}.spatial_dot"),
    # quotient, powers, two-argument functions
    "div": _div,
    "matrix_from_cols": _linear(f"{W}.matrix_from_cols"),
    "matrix_from_rows": _linear(f"{W}.matrix_from_rows"),
    "transform_get_translation": _linear(f"{W}.transform_get_translation"),
    "transform_get_rotation": _linear(f"{W}.transform_get_rotation"),
    "quat_rotate": _helper("_interop_quat_rotate_t"),
    "quat_rotate_inv": _quat_rotate_inv,
    "quat_to_matrix": _helper("_interop_quat_to_matrix_t"),
    "quat_from_axis_angle": _helper("_interop_quat_from_axis_angle_t"),
    "transform_point": _helper("_interop_transform_point_t"),
    "transform_vector": _helper("_interop_transform_vector_t"),
    "transform_multiply": _helper("_interop_transform_multiply_t"),
    "transform_inverse": _helper("_interop_transform_inverse_t"),
    "div_approx": _div,
    "inverse_approx": _inverse,
    "copysign": _copysign,
    "smoothstep": _helper("_interop_smoothstep_t"),
    "cw_div": _cw_div,
    "mod": _mod,
    "pow": _pow,
    "atan2": _atan2,
    # one-argument scalar functions: f'(a) * ta
    "sin": _unary(lambda a, y: f"{W}.cos({a})"),
    "cos": _unary(lambda a, y: f"-{W}.sin({a})"),
    "tan": _unary(lambda a, y: f"{_c(y, 1.0)} + ({y}) * ({y})"),
    "asin": _unary(lambda a, y: f"{_c(a, 1.0)} / {W}.sqrt({_c(a, 1.0)} - ({a}) * ({a}))"),
    "acos": _unary(lambda a, y: f"-{_c(a, 1.0)} / {W}.sqrt({_c(a, 1.0)} - ({a}) * ({a}))"),
    "atan": _unary(lambda a, y: f"{_c(a, 1.0)} / ({_c(a, 1.0)} + ({a}) * ({a}))"),
    "sinh": _unary(lambda a, y: f"{W}.cosh({a})"),
    "cosh": _unary(lambda a, y: f"{W}.sinh({a})"),
    "tanh": _unary(lambda a, y: f"{_c(y, 1.0)} - ({y}) * ({y})"),
    "exp": _unary(lambda a, y: y),
    "log": _unary(lambda a, y: f"{_c(a, 1.0)} / ({a})"),
    "log2": _unary(lambda a, y: f"{_c(a, 1.0)} / (({a}) * {_c(a, LN2)})"),
    "log10": _unary(lambda a, y: f"{_c(a, 1.0)} / (({a}) * {_c(a, LN10)})"),
    "sqrt": _unary(lambda a, y: f"{_c(y, 0.5)} / ({y})"),
    "cbrt": _unary(lambda a, y: f"{_c(y, 1.0)} / ({_c(y, 3.0)} * ({y}) * ({y}))"),
    "erf": _erf(""),
    "erfc": _erf("-"),
    # piecewise: the branch Warp's adjoint takes
    "min": _piecewise2("_interop_min_t"),
    "max": _piecewise2("_interop_max_t"),
    "clamp": _clamp,
    "abs": _abs,
    "where": _where,
    "select": _select,
    # vectors, matrices
    "length": _length,
    "length_sq": _length_sq,
    "normalize": _normalize,
    "inverse": _inverse,
    "determinant": _determinant,
    "lerp": _lerp,
    # piecewise constant: zero tangent
    "sign": _zero_rule,
    "step": _zero_rule,
    "nonzero": _zero_rule,
    "floor": _zero_rule,
    "ceil": _zero_rule,
    "round": _zero_rule,
    "rint": _zero_rule,
    "trunc": _zero_rule,
    "isnan": _zero_rule,
    "isinf": _zero_rule,
    "isfinite": _zero_rule,
    "floordiv": _zero_rule,
}

# builtins that write into an array (handled by the generator as statements)
ATOMIC_LINEAR = {"atomic_add": "atomic_add", "atomic_sub": "atomic_sub"}
ATOMIC_REFUSED = ("atomic_min", "atomic_max", "atomic_exch", "atomic_cas", "atomic_and", "atomic_or", "atomic_xor")
# builtins run as they are in the tangent kernel whatever their arguments (no value to differentiate)
PASSTHROUGH = frozenset(
    {"tid", "printf", "print", "expect_eq", "expect_neq", "expect_near", "assert", "static", "len", "block_dim"}
)


def supported_builtins() -> list[str]:
    """The builtins with a tangent rule (README, "Forward mode")."""
    return sorted(RULES)
