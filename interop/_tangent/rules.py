"""Tangent rules of Warp's builtins, for the tangent-kernel generator (:mod:`interop._tangent`).

A rule takes the lowered arguments of one builtin call, each ``(primal, tangent)`` as source text
(``tangent`` is ``None`` where it is structurally zero), and the name ``y`` of the temporary that
holds the call's result, and returns the tangent of the result as source text (``None``: zero).
Every rule is written in Warp's own language, so Warp can differentiate the tangent kernel again
(its adjoint gives second derivatives). Piecewise rules choose the branch Warp's adjoint chooses
(``native/builtin.h``: ``adj_min``, ``adj_max``, ``adj_clamp``, ``adj_abs``, ``adj_length``), so
forward and reverse mode agree at kinks too.

The rules' names for Warp and for the helpers (:mod:`interop._tangent.helpers`) are reserved in the generated kernel's
namespace: ``_interop_wp`` (the ``warp`` module) and ``_interop_*``.

Builtins that have no rule here are refused by the generator when an argument carries a tangent
(naming the builtin and the source line); a builtin whose arguments carry no tangent needs no rule.
"""

from __future__ import annotations

from typing import Callable

from .._warp_compat import builtin_function
from .helpers import EXPANSIONS, HELPERS, TUPLE_TANGENTS  # noqa: F401 (the generator reads them as R.*)

W = "_interop_wp"
Arg = tuple[str, str | None]
Rule = Callable[[list[Arg], str], str | None]


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
    arg = "argmin" if "min" in helper else "argmax"

    def rule(args: list[Arg], y: str) -> str | None:
        if len(args) == 1:
            # min(v) / max(v) over a vector's components: the tangent of the component Warp's
            # adjoint picks (adj_min/adj_max of a vector: argmin/argmax, the first of ties)
            ((v, tv),) = args
            return None if tv is None else f"({tv})[{W}.{arg}({v})]"
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


def _mesh_eval(helper: str) -> Rule:
    """``mesh_eval_position(id, face, u, v)`` (or velocity): ``(p - r) tu + (q - r) tv`` with the face's
    corners ``p, q, r`` (the mesh and the face carry no tangent)."""

    def rule(args: list[Arg], y: str) -> str | None:
        (mesh, _), (face, _), u, v = args
        if u[1] is None and v[1] is None:
            return None
        return f"{helper}({mesh}, {face}, {_or_zero(u)}, {_or_zero(v)})"

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
    # a mesh's surface at barycentric coordinates: affine in (u, v), the mesh's points fixed
    "mesh_eval_position": _mesh_eval("_interop_mesh_eval_position_t"),
    "mesh_eval_velocity": _mesh_eval("_interop_mesh_eval_velocity_t"),
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

#: spatial queries whose every result is an index, a count, a hit flag or a query handle to iterate
#: (every overload's value is an integer, a bool or a query: ``tests/test_tangent_queries.py`` checks
#: that on the running Warp): piecewise constant in the query's point and radius, so no tangent, as
#: Warp's adjoint gives them none. Run as written, like :data:`PASSTHROUGH`. Queries with float
#: results (``mesh_query_point*``'s barycentrics and distance, ``mesh_query_ray``'s hit distance)
#: are not here: they stay refused, naming the builtin. Only the names the running Warp has.
QUERY_NAMES = (
    "hash_grid_query",
    "hash_grid_query_next",
    "hash_grid_point_id",
    "bvh_query_aabb",
    "bvh_query_ray",
    "bvh_query_capsule",
    "bvh_query_sphere",
    "bvh_query_next",
    "mesh_query_aabb",
    "mesh_query_sphere",
    "mesh_query_next",
    "mesh_query_aabb_next",
    "mesh_query_ray_count_intersections",
    "mesh_query_ray_anyhit",
    "mesh_get_index",
    "mesh_get_group_root",
)
QUERIES = frozenset(n for n in QUERY_NAMES if builtin_function(n) is not None)


def supported_builtins() -> list[str]:
    """The builtins with a tangent rule or an expansion (docs/gradients.md, "Forward mode and second order")."""
    return sorted(set(RULES) | set(EXPANSIONS))
