"""Generated tangent kernels (forward mode, issue 34) against two independent references.

Every check runs the same helper (:func:`check_tangent`) on a kernel, generated inputs and tangents:
the tangent kernel's output tangents equal (a) central finite differences of the kernel itself
(``eps`` 1e-6, relative tolerance 1e-6) and (b) ``J t`` assembled from Warp's own reverse mode (one
basis cotangent per output element through ``wp.Tape``) to 1e-12; the primal outputs it writes equal
the kernel's. (b) is what catches a rule whose branch convention differs from Warp's adjoint: it also
runs on the ties and edges hypothesis likes (min/max/abs/clamp at their kinks), where (a) stops.

- Rules: one column per builtin of a few kernels with several outputs (one tangent compile per
  kernel), each column checked on its own; a coverage test proves every key of ``RULES`` is exercised
  (or says why it cannot be in Warp 1.19).
- Structure: loops, branches, early return, gathers, scatters, in-outs, wp.func (nested, tuples,
  generic), generic kernel overloads, scalar and integer parameters.
- Second order: Warp's adjoint of the tangent kernel against ``J^T ct`` and finite differences of
  the primal's adjoint, and the symmetry of the Hessian-vector product.
- Refusals, and ``Op.jvp`` from NumPy for the catalogue's kernels.

What the generator gets wrong is a strict ``xfail`` naming the fault (``GENERATOR_BUGS`` and the
tests marked so); where Warp's own reverse mode is not the derivative (``WARP_ADJOINT_DIFFERS``,
``Case.warp_reverse_wrong``), that output is checked against finite differences only.

float64 throughout; every array names its device: the CPU, or the device INTEROP_TANGENT_DEVICE
names (``cuda`` on the GPU run: the same checks on CUDA). INTEROP_TANGENT_EXAMPLES sets the
hypothesis examples per test.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import math
import os
import re
import textwrap
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
import warp as wp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import interop
from interop import _tangent, _warp_compat
from interop._tangent import R  # the rules, through the subpackage front

DEV = os.environ.get("INTEROP_TANGENT_DEVICE", "cpu")
EPS = 1e-6
FD_RTOL = 1e-6
FD_ATOL = 1e-7  # times the output's scale
REV_RTOL = 1e-12
REV_ATOL = 1e-12  # times the output's scale
N = 2  # threads (elements) per rule case

EXAMPLES = int(os.environ.get("INTEROP_TANGENT_EXAMPLES", "4"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("INTEROP_PROPERTY_RANDOM") != "1",  # CI: the same cases every run
    suppress_health_check=list(HealthCheck),
    database=None,
)
pytestmark = pytest.mark.timeout(900)

F64 = wp.float64


# ---- the shared checker ------------------------------------------------------------------------------
@dataclass
class Case:
    """A kernel with its launch, the value domain of each differentiated input and the arrays it writes.

    ``domains``: each differentiable input (arrays, in-outs, float scalars) -> (low, high) of its elements.
    ``shapes``: the NumPy shape of every array parameter (vectors and matrices add their trailing axes).
    ``outputs``: the arrays the kernel writes (in-outs too); their tangents are compared.
    ``fixed``: values of the other parameters (integer arrays and scalars, nondifferentiable inputs).
    ``smooth``: False where the inputs sit on (or next to) a kink, so finite differences do not apply.
    """

    kernel: Any
    dim: Any
    domains: dict[str, tuple[float, float]]
    shapes: dict[str, tuple]
    outputs: tuple[str, ...]
    fixed: dict[str, Any] = field(default_factory=dict)
    smooth: Callable[[dict], bool] | None = None
    label: str = ""
    #: outputs whose J t Warp's reverse mode gets wrong (output -> why): checked against finite differences only
    warp_reverse_wrong: dict[str, str] = field(default_factory=dict)

    @property
    def params(self) -> list[tuple[str, Any]]:
        return [(a.label, a.type) for a in self.kernel.adj.args]

    @property
    def differentiable(self) -> dict[str, bool]:
        """What interop would mark differentiable: float arrays and scalars that are not fixed."""
        return {n: n not in self.fixed and _tangent.float_like(getattr(t, "dtype", t)) for n, t in self.params}

    def tangent(self) -> _tangent.TangentKernel:
        return _tangent.tangent_kernel(self.kernel, self.differentiable, self.label or self.kernel.key)


def _is_array(t: Any) -> bool:
    return wp.types.is_array(t)


def _to_wp(t: Any, value: Any, requires_grad: bool = False) -> Any:
    if _is_array(t):
        return wp.array(np.asarray(value), dtype=t.dtype, device=DEV, requires_grad=requires_grad)
    return value


def _start_values(case: Case, inputs: dict) -> dict:
    """Every parameter's value: drawn inputs, fixed values, zeros for pure outputs."""
    values = {}
    for n, t in case.params:
        if n in inputs:
            values[n] = inputs[n]
        elif n in case.fixed:
            values[n] = case.fixed[n]
        elif _is_array(t):
            values[n] = np.zeros(case.shapes[n], np.float64)
        else:
            raise AssertionError(f"no value for {n}")
    return values


def run_primal(case: Case, inputs: dict) -> dict[str, np.ndarray]:
    values = _start_values(case, inputs)
    args = [_to_wp(t, values[n]) for n, t in case.params]
    wp.launch(case.kernel, dim=case.dim, inputs=args, device=DEV)
    return {n: a.numpy() for (n, _), a in zip(case.params, args) if n in case.outputs}


def run_tangent(case: Case, inputs: dict, tangents: dict) -> tuple[dict, dict]:
    """The tangent kernel's outputs and output tangents (an output's tangent starts at zero)."""
    tk = case.tangent()
    values = _start_values(case, inputs)
    args = [_to_wp(t, values[n]) for n, t in case.params]
    types = dict(case.params)
    targs = []
    for n in tk.tangent_of:
        t = types[n]
        v = tangents.get(n)
        if v is None:
            v = np.zeros(case.shapes[n], np.float64) if _is_array(t) else 0.0
        targs.append(_to_wp(t, v))
    wp.launch(tk.kernel, dim=case.dim, inputs=args + targs, device=DEV)
    outs = {n: a.numpy() for (n, _), a in zip(case.params, args) if n in case.outputs}
    touts = {n: a.numpy() for n, a in zip(tk.tangent_of, targs) if n in case.outputs}
    return outs, touts


def fd_tangent(case: Case, inputs: dict, tangents: dict) -> dict[str, np.ndarray]:
    def moved(s):
        return {n: np.asarray(v) + s * EPS * np.asarray(tangents.get(n, 0.0)) for n, v in inputs.items()}

    hi, lo = run_primal(case, moved(1.0)), run_primal(case, moved(-1.0))
    return {n: (hi[n] - lo[n]) / (2 * EPS) for n in case.outputs}


def _record(case: Case, inputs: dict) -> tuple[wp.Tape, dict]:
    values = _start_values(case, inputs)
    args = {n: _to_wp(t, values[n], requires_grad=_is_array(t) and t.dtype is not wp.int32) for n, t in case.params}
    tape = wp.Tape()
    with tape:
        wp.launch(case.kernel, dim=case.dim, inputs=list(args.values()), device=DEV)
    return tape, args


def _elements(shape: tuple, index: Any) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[index].ravel()


def reverse_jvp(case: Case, inputs: dict, tangents: dict, select: dict) -> dict[str, np.ndarray]:
    """``J t`` for the selected output elements, J's rows from Warp's adjoint (array inputs only),
    with the magnitude ``|J| |t|`` of each entry (for the rounding tolerance)."""
    tape, args = _record(case, inputs)
    out = {}
    for n, index in select.items():
        arr = args[n]
        shape = arr.numpy().shape
        rows, mags = [], []
        for k in _elements(shape, index):
            ct = np.zeros(int(np.prod(shape)))
            ct[k] = 1.0
            tape.zero()
            tape.backward(grads={arr: wp.array(ct.reshape(shape), dtype=arr.dtype, device=DEV)})
            jt = mag = 0.0
            for m, t in tangents.items():
                if m in args and _is_array(dict(case.params)[m]):
                    g = args[m].grad.numpy()
                    jt += float(np.sum(g * t))
                    mag += float(np.sum(np.abs(g * t)))
            rows.append(jt)
            mags.append(mag)
        out[n] = (np.array(rows), np.array(mags))
    return out


def _array_tangents(case: Case, tangents: dict) -> dict:
    """The tangents of array inputs only (Warp's reverse mode has no gradient for a scalar parameter)."""
    types = dict(case.params)
    return {n: t for n, t in tangents.items() if _is_array(types[n])}


def check_tangent(
    case: Case,
    inputs: dict,
    tangents: dict,
    select: dict | None = None,
    finite_differences: bool = True,
    reverse: bool = True,
    got: tuple[dict, dict] | None = None,
) -> None:
    """The tangent kernel against finite differences of the kernel and against J t from reverse mode.

    ``select``: output name -> NumPy index of the elements compared (default: every output, whole).
    ``got``: (outputs, their tangents) computed another way (``Op.jvp``) instead of the tangent kernel's."""
    select = select if select is not None else {n: slice(None) for n in case.outputs}
    if got is not None:
        assert len(_array_tangents(case, tangents)) == len(tangents), "got= with scalar tangents"
    outs, touts = got if got is not None else run_tangent(case, inputs, tangents)
    primal = run_primal(case, inputs)
    for n, index in select.items():
        scale = max(1.0, float(np.max(np.abs(primal[n][index]), initial=0.0)))
        np.testing.assert_allclose(
            outs[n][index], primal[n][index], rtol=1e-14, atol=1e-15 * scale, err_msg=f"primal {n}"
        )
    if finite_differences:
        fd = fd_tangent(case, inputs, tangents)
        for n, index in select.items():
            scale = max(1.0, float(np.max(np.abs(primal[n][index]), initial=0.0)))
            np.testing.assert_allclose(
                touts[n][index], fd[n][index], rtol=FD_RTOL, atol=FD_ATOL * scale, err_msg=f"tangent of {n} vs FD"
            )
    select_rev = {n: i for n, i in select.items() if n not in case.warp_reverse_wrong}
    if reverse and select_rev:
        select = select_rev
        at = _array_tangents(case, tangents)
        _, ta = run_tangent(case, inputs, at) if len(at) != len(tangents) else (outs, touts)
        ref = reverse_jvp(case, inputs, at, select)
        for n, index in select.items():
            jt, mag = ref[n]
            np.testing.assert_allclose(
                np.asarray(ta[n][index]).ravel(),
                jt,
                rtol=REV_RTOL,
                atol=REV_ATOL * max(1.0, float(mag.max(initial=0.0))),
                err_msg=f"tangent of {n} vs J t",
            )


# ---- generated inputs --------------------------------------------------------------------------------
def _floats(lo: float, hi: float):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def draw_inputs(data: st.DataObject, case: Case) -> tuple[dict, dict]:
    """Inputs in their domains (hypothesis: edges, ties, repeats) and tangents in [-1, 1] (seeded)."""
    inputs = {}
    for n, (lo, hi) in case.domains.items():
        shape = case.shapes.get(n, ())
        if shape == ():
            inputs[n] = data.draw(_floats(lo, hi), label=n)
        else:
            inputs[n] = data.draw(hnp.arrays(np.float64, shape, elements=_floats(lo, hi)), label=n)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="tangent seed"))
    tangents = {n: rng.uniform(-1.0, 1.0, case.shapes.get(n, ())) for n in case.domains}
    return inputs, tangents


# ---- rules: scalar builtins ---------------------------------------------------------------------------
# a, c in [0.2, 0.8], b in [1.2, 2]: inside every builtin's domain (asin, log, sqrt...); ties of a and c
# (min, max, abs, sign...) are where finite differences stop, not reverse mode: both follow Warp's branch
@wp.kernel
def scalar_rules(a: wp.array(dtype=F64), b: wp.array(dtype=F64), c: wp.array(dtype=F64), y: wp.array2d(dtype=F64)):
    i = wp.tid()
    x = a[i]
    z = b[i]
    w = c[i]
    half = F64(0.5)
    three = F64(3.0)
    y[i, 0] = x + z
    y[i, 1] = x - z
    y[i, 2] = x * z
    y[i, 3] = x / z
    y[i, 4] = z % F64(0.7)
    y[i, 5] = F64(1.9) % x
    y[i, 6] = x**z
    y[i, 7] = wp.pow(z, x)
    y[i, 8] = x ** F64(3.0)
    y[i, 9] = -x
    y[i, 10] = wp.neg(z)
    y[i, 11] = wp.pos(x)
    y[i, 12] = wp.add(x, z)
    y[i, 13] = wp.sub(z, x)
    y[i, 14] = wp.mul(x, z)
    y[i, 15] = wp.div(z, x)
    y[i, 16] = wp.sin(x)
    y[i, 17] = wp.cos(x)
    y[i, 18] = wp.tan(x)
    y[i, 19] = wp.asin(x)
    y[i, 20] = wp.acos(x)
    y[i, 21] = wp.atan(x)
    y[i, 22] = wp.sinh(x)
    y[i, 23] = wp.cosh(x)
    y[i, 24] = wp.tanh(x)
    y[i, 25] = wp.exp(x)
    y[i, 26] = wp.log(x)
    y[i, 27] = wp.log2(x)
    y[i, 28] = wp.log10(x)
    y[i, 29] = wp.sqrt(x)
    y[i, 30] = wp.cbrt(x)
    y[i, 31] = wp.erf(x)
    y[i, 32] = wp.erfc(x)
    y[i, 33] = wp.radians(x)
    y[i, 34] = wp.degrees(x)
    y[i, 35] = wp.atan2(x, z)
    y[i, 36] = wp.atan2(w, -z)
    y[i, 37] = wp.min(x, w)
    y[i, 38] = wp.max(x, w)
    y[i, 39] = min(x, w)
    y[i, 40] = max(x, w)
    y[i, 41] = wp.clamp(w, x, z * F64(0.4))
    y[i, 42] = wp.abs(x - w)
    y[i, 43] = abs(w - x)
    y[i, 44] = wp.where(x > w, x * z, w)
    y[i, 45] = wp.lerp(x, z, w)
    y[i, 46] = wp.sign(x - w) * z
    y[i, 47] = wp.step(x - w) * z
    y[i, 48] = wp.nonzero(x - w) * z
    y[i, 49] = wp.floor(z * three) * x
    y[i, 50] = wp.ceil(z * three) * x
    y[i, 51] = wp.round(z * three) * x
    y[i, 52] = wp.rint(z * three) * x
    y[i, 53] = wp.trunc(z * three) * x
    y[i, 54] = wp.frac(z * three)
    y[i, 55] = (z * three) // x
    y[i, 56] = wp.where(wp.isnan(x), w, x * z)
    y[i, 57] = wp.where(wp.isinf(x), w, x * z)
    y[i, 58] = wp.where(wp.isfinite(x), x * z, w)
    y[i, 59] = wp.float64(x) * half
    y[i, 60] = x * x * x - F64(2.0) * x / (z + w)


SCALAR_COLUMNS = [
    "add:operator", "sub:operator", "mul:operator", "div:operator", "mod:operator", "mod:divisor",
    "pow:operator", "pow", "pow:constant-exponent", "neg:operator", "neg", "pos", "add", "sub", "mul", "div",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "exp", "log", "log2", "log10",
    "sqrt", "cbrt", "erf", "erfc", "radians", "degrees", "atan2", "atan2:second-quadrant",
    "min", "max", "min:python", "max:python", "clamp", "abs", "abs:python", "where", "lerp",
    "sign", "step", "nonzero", "floor", "ceil", "round", "rint", "trunc", "frac", "floordiv",
    "isnan", "isinf", "isfinite", "float64:cast", "sub:composite",
]  # fmt: skip


def _off_kinks(inputs: dict) -> bool:
    a, b, c = inputs["a"], inputs["b"], inputs["c"]
    gap = 1e-4
    near_int = lambda v: np.abs(v - np.round(v)) < gap  # noqa: E731
    return not (
        np.any(np.abs(a - c) < gap)
        or np.any(np.abs(c - 0.4 * b) < gap)  # clamp's upper bound
        or np.any(near_int(b / 0.7))  # mod
        or np.any(near_int(1.9 / a))
        or np.any(near_int(3 * b))  # floor, ceil, trunc, frac
        or np.any(near_int(3 * b + 0.5))  # round, rint
        or np.any(near_int(3 * b / a))  # floordiv
    )


SCALAR = Case(
    scalar_rules,
    dim=N,
    domains={"a": (0.2, 0.8), "b": (1.2, 2.0), "c": (0.2, 0.8)},
    shapes={"a": (N,), "b": (N,), "c": (N,), "y": (N, len(SCALAR_COLUMNS))},
    outputs=("y",),
    smooth=_off_kinks,
)


# ---- rules: vectors ------------------------------------------------------------------------------------
@wp.kernel
def vector_rules(
    u: wp.array(dtype=wp.vec3d),
    v: wp.array(dtype=wp.vec3d),
    w: wp.array(dtype=wp.vec3d),
    a: wp.array(dtype=F64),
    s: wp.array2d(dtype=F64),
    vo: wp.array2d(dtype=wp.vec3d),
    mo: wp.array2d(dtype=wp.mat33d),
):
    i = wp.tid()
    p = u[i]
    q = v[i]
    d = w[i]
    t = a[i]
    s[i, 0] = wp.length(p)
    s[i, 1] = wp.length_sq(p)
    s[i, 2] = wp.dot(p, q)
    s[i, 3] = p[0]
    s[i, 4] = p.y
    s[i, 5] = u[i][2] * q.z
    s[i, 6] = wp.float64(p[1])
    s[i, 7] = wp.max(p)
    s[i, 8] = wp.min(q * t)
    vo[i, 0] = wp.normalize(p)
    vo[i, 1] = wp.cross(p, q)
    vo[i, 2] = wp.cw_mul(p, q)
    vo[i, 3] = wp.cw_div(p, d)
    vo[i, 4] = p + q
    vo[i, 5] = p - q
    vo[i, 6] = -p
    vo[i, 7] = p * t
    vo[i, 8] = t * q
    vo[i, 9] = p / t
    vo[i, 10] = wp.lerp(p, q, t)
    vo[i, 11] = wp.vec3d(t, p[1], F64(2.0))
    vo[i, 12] = wp.vector(t, p[2], t * t)
    vo[i, 13] = wp.vector(p[0], t, q[1], dtype=F64)
    vo[i, 14] = wp.where(t > F64(0.5), p, q)
    vo[i, 15] = wp.vec3d(p)
    vo[i, 16] = wp.mul(p, t)
    mo[i, 0] = wp.outer(p, q)
    mo[i, 1] = wp.skew(p)
    mo[i, 2] = wp.diag(p)
    mo[i, 3] = wp.mat33d(p[0], t, q[2], F64(1.0), p[1], t * t, q[0], q[1], p[2])


VECTOR_COLUMNS = {
    "s": [
        "length", "length_sq", "dot", "extract:index", "extract:attribute", "extract:chained", "float64:cast",
        "max:vector-reduction", "min:vector-reduction",
    ],
    "vo": [
        "normalize", "cross", "cw_mul", "cw_div", "add:vector", "sub:vector", "neg:vector", "mul:vector-scalar",
        "mul:scalar-vector", "div:vector-scalar", "lerp:vector", "vec3d:constructor", "vector", "vector:dtype",
        "where:vector", "vec3d:copy", "mul:builtin",
    ],
    "mo": ["outer", "skew", "diag", "mat33d:constructor"],
}  # fmt: skip


def _distinct(v: np.ndarray) -> bool:
    """No two components of a vector within 1e-4 (max/min over components switch there)."""
    d = np.abs(v[..., :, None] - v[..., None, :]) + np.eye(v.shape[-1])
    return bool(np.all(d > 1e-4))


def _vector_off_kinks(inputs: dict) -> bool:
    u, v, a = inputs["u"], inputs["v"], inputs["a"]
    return bool(
        np.all(np.abs(a - 0.5) > 1e-4)  # where
        and np.all(np.linalg.norm(u, axis=-1) > 1e-2)  # length, normalize
        and _distinct(u)
        and _distinct(v * a[:, None])  # max(p), min(q * t)
    )


VECTOR = Case(
    vector_rules,
    dim=N,
    domains={"u": (-1.0, 1.0), "v": (-1.0, 1.0), "w": (0.5, 1.5), "a": (0.2, 0.8)},
    shapes={
        "u": (N, 3),
        "v": (N, 3),
        "w": (N, 3),
        "a": (N,),
        "s": (N, len(VECTOR_COLUMNS["s"])),
        "vo": (N, len(VECTOR_COLUMNS["vo"]), 3),
        "mo": (N, len(VECTOR_COLUMNS["mo"]), 3, 3),
    },
    outputs=("s", "vo", "mo"),
    smooth=_vector_off_kinks,
)


# ---- rules: matrices -----------------------------------------------------------------------------------
@wp.kernel
def matrix_rules(
    m: wp.array(dtype=wp.mat33d),
    n: wp.array(dtype=wp.mat33d),
    e: wp.array(dtype=wp.mat33d),
    u: wp.array(dtype=wp.vec3d),
    a: wp.array(dtype=F64),
    s: wp.array2d(dtype=F64),
    vo: wp.array2d(dtype=wp.vec3d),
    mo: wp.array2d(dtype=wp.mat33d),
):
    i = wp.tid()
    A = m[i] + wp.identity(n=3, dtype=F64) * F64(2.0)  # far from singular: m in [-0.5, 0.5]
    B = n[i]
    p = u[i]
    t = a[i]
    s[i, 0] = wp.trace(A)
    s[i, 1] = wp.determinant(A)
    s[i, 2] = A[0, 1]
    s[i, 3] = wp.ddot(A, B)
    s[i, 4] = A[1][2]
    vo[i, 0] = A * p
    vo[i, 1] = A @ p
    vo[i, 2] = wp.get_diag(A)
    vo[i, 3] = A[1]
    vo[i, 4] = p * A
    mo[i, 0] = wp.transpose(A)
    mo[i, 1] = wp.inverse(A)
    mo[i, 2] = A * B
    mo[i, 3] = A @ B
    mo[i, 4] = A + B
    mo[i, 5] = A - B
    mo[i, 6] = A * t
    mo[i, 7] = A / t
    mo[i, 8] = wp.cw_mul(A, B)
    mo[i, 9] = wp.cw_div(A, e[i])
    mo[i, 10] = wp.mat33d(A)
    mo[i, 11] = -A


MATRIX_COLUMNS = {
    "s": ["trace", "determinant", "extract:matrix-element", "ddot", "extract:row-then-element"],
    "vo": ["mul:matrix-vector", "mul:matmul-operator", "get_diag", "extract:row", "mul:vector-matrix"],
    "mo": [
        "transpose", "inverse", "mul:matrix-matrix", "mul:matmul-matrix", "add:matrix", "sub:matrix",
        "mul:matrix-scalar", "div:matrix-scalar", "cw_mul:matrix", "cw_div:matrix", "mat33d:copy", "neg:matrix",
    ],
}  # fmt: skip

MATRIX = Case(
    matrix_rules,
    dim=N,
    domains={"m": (-0.5, 0.5), "n": (-1.0, 1.0), "e": (0.5, 1.5), "u": (-1.0, 1.0), "a": (0.2, 0.8)},
    shapes={
        "m": (N, 3, 3),
        "n": (N, 3, 3),
        "e": (N, 3, 3),
        "u": (N, 3),
        "a": (N,),
        "s": (N, len(MATRIX_COLUMNS["s"])),
        "vo": (N, len(MATRIX_COLUMNS["vo"]), 3),
        "mo": (N, len(MATRIX_COLUMNS["mo"]), 3, 3),
    },
    outputs=("s", "vo", "mo"),
)


# ---- rules: quaternions, transforms, spatial vectors --------------------------------------------------
@wp.kernel
def quat_rules(
    q: wp.array(dtype=wp.quatd),
    r: wp.array(dtype=wp.quatd),
    u: wp.array(dtype=wp.vec3d),
    g: wp.array(dtype=wp.spatial_vectord),
    h: wp.array(dtype=wp.spatial_vectord),
    a: wp.array(dtype=F64),
    s: wp.array2d(dtype=F64),
    vo: wp.array2d(dtype=wp.vec3d),
    qo: wp.array2d(dtype=wp.quatd),
    so: wp.array2d(dtype=wp.spatial_vectord),
    to: wp.array2d(dtype=wp.transformd),
):
    i = wp.tid()
    Q = q[i] + wp.quatd(F64(0.0), F64(0.0), F64(0.0), F64(2.0))  # |Q| >= 1: normalize's adjoint stays finite
    P = r[i]
    p = u[i]
    G = g[i]
    H = h[i]
    t = a[i]
    s[i, 0] = wp.spatial_dot(G, H)
    s[i, 1] = wp.dot(Q, P)
    s[i, 2] = Q.w
    s[i, 3] = wp.length(Q)
    s[i, 4] = G[4]
    vo[i, 0] = wp.spatial_top(G)
    vo[i, 1] = wp.spatial_bottom(G)
    qo[i, 0] = wp.quat_inverse(Q)
    qo[i, 1] = Q * P
    qo[i, 2] = wp.quaternion(p, t)
    qo[i, 3] = wp.quatd(t, Q[1], Q.z, F64(1.0))
    qo[i, 4] = Q + P
    qo[i, 5] = Q * t
    qo[i, 6] = wp.normalize(Q)
    qo[i, 7] = wp.quaternion(t, Q[1], P[2], Q[3])
    qo[i, 8] = -Q
    so[i, 0] = wp.spatial_cross(G, H)
    so[i, 1] = wp.spatial_vectord(t, G[1], G[2], H[3], H[4], t * t)
    so[i, 2] = G + H
    so[i, 3] = G * t
    to[i, 0] = wp.transformation(p, Q)
    to[i, 1] = wp.transformation(p, Q, dtype=F64)
    to[i, 2] = wp.transformd(p, P)


QUAT_COLUMNS = {
    "s": ["spatial_dot", "dot:quaternion", "extract:quaternion-attribute", "length:quaternion", "extract:spatial"],
    "vo": ["spatial_top", "spatial_bottom"],
    "qo": [
        "quat_inverse", "mul:quaternion", "quaternion", "quatd:constructor", "add:quaternion",
        "mul:quaternion-scalar", "normalize:quaternion", "quaternion:components", "neg:quaternion",
    ],
    "so": ["spatial_cross", "spatial_vectord:constructor", "add:spatial", "mul:spatial-scalar"],
    "to": ["transformation", "transformation:dtype", "transformd:constructor"],
}  # fmt: skip


QUAT = Case(
    quat_rules,
    dim=N,
    domains={
        "q": (-1.0, 1.0),
        "r": (-1.0, 1.0),
        "u": (-1.0, 1.0),
        "g": (-1.0, 1.0),
        "h": (-1.0, 1.0),
        "a": (0.2, 0.8),
    },
    shapes={
        "q": (N, 4),
        "r": (N, 4),
        "u": (N, 3),
        "g": (N, 6),
        "h": (N, 6),
        "a": (N,),
        "s": (N, len(QUAT_COLUMNS["s"])),
        "vo": (N, len(QUAT_COLUMNS["vo"]), 3),
        "qo": (N, len(QUAT_COLUMNS["qo"]), 4),
        "so": (N, len(QUAT_COLUMNS["so"]), 6),
        "to": (N, len(QUAT_COLUMNS["to"]), 7),
    },
    outputs=("s", "vo", "qo", "so", "to"),
)


@wp.kernel
def transform_rules(
    q: wp.array(dtype=wp.quatd),
    r: wp.array(dtype=wp.quatd),
    u: wp.array(dtype=wp.vec3d),
    v: wp.array(dtype=wp.vec3d),
    m: wp.array(dtype=wp.mat44d),
    a: wp.array(dtype=F64),
    b: wp.array(dtype=F64),
    s: wp.array2d(dtype=F64),
    vo: wp.array2d(dtype=wp.vec3d),
    qo: wp.array2d(dtype=wp.quatd),
    to: wp.array2d(dtype=wp.transformd),
    mo: wp.array2d(dtype=wp.mat33d),
):
    i = wp.tid()
    Q = q[i]  # not normalized: the rules differentiate Warp's formulas, which do not normalize either
    P = r[i]
    p = u[i]
    w = v[i]
    M = m[i]
    x = a[i]
    z = b[i]
    A = wp.transformd(p, Q)
    B = wp.transformd(w, P)
    vo[i, 0] = wp.quat_rotate(Q, w)
    vo[i, 1] = wp.quat_rotate_inv(Q, w)
    vo[i, 2] = wp.transform_point(A, w)
    vo[i, 3] = wp.transform_point(M, w)
    vo[i, 4] = wp.transform_vector(A, w)
    vo[i, 5] = wp.transform_vector(M, w)
    vo[i, 6] = wp.transform_get_translation(A)
    vo[i, 7] = wp.div_approx(w, x)
    qo[i, 0] = wp.quat_from_axis_angle(p, x)
    qo[i, 1] = wp.transform_get_rotation(B)
    R3 = wp.outer(p, w) + wp.skew(p)  # |entries| < 2: each branch of quat_from_matrix by its diagonal
    four = F64(4.0)
    qo[i, 2] = wp.quat_from_matrix(R3 + wp.diag(wp.vec3d(four, four, four)))
    qo[i, 3] = wp.quat_from_matrix(R3 + wp.diag(wp.vec3d(four, -four, -four)))
    qo[i, 4] = wp.quat_from_matrix(R3 + wp.diag(wp.vec3d(-four, four, -four)))
    qo[i, 5] = wp.quat_from_matrix(R3 + wp.diag(wp.vec3d(-four, -four, four)))
    qo[i, 6] = wp.quat_from_matrix(M + wp.diag(wp.vec4d(four, four, four, four)))
    to[i, 0] = wp.transform_multiply(A, B)
    to[i, 1] = A * B
    to[i, 2] = wp.mul(B, A)
    to[i, 3] = wp.transform_inverse(A)
    mo[i, 0] = wp.quat_to_matrix(Q)
    mo[i, 1] = wp.matrix_from_cols(p, w, p * x)
    mo[i, 2] = wp.matrix_from_rows(w, p, w * z)
    mo[i, 3] = wp.inverse_approx(wp.identity(n=3, dtype=F64) * F64(2.0) + wp.outer(p, w) * F64(0.3))
    s[i, 0] = wp.div_approx(x, z)
    s[i, 1] = wp.copysign(x - F64(0.5), z - F64(1.6))
    s[i, 2] = wp.smoothstep(x * F64(0.2), z, x)
    s[i, 3] = wp.smoothstep(z, z + F64(1.0), x)


TRANSFORM_COLUMNS = {
    "vo": [
        "quat_rotate", "quat_rotate_inv", "transform_point", "transform_point:mat44", "transform_vector",
        "transform_vector:mat44", "transform_get_translation", "div_approx:vector",
    ],
    "qo": [
        "quat_from_axis_angle", "transform_get_rotation", "quat_from_matrix:trace", "quat_from_matrix:x",
        "quat_from_matrix:y", "quat_from_matrix:z", "quat_from_matrix:mat44",
    ],
    "to": ["transform_multiply", "mul:transform-operator", "mul:transform", "transform_inverse"],
    "mo": ["quat_to_matrix", "matrix_from_cols", "matrix_from_rows", "inverse_approx"],
    "s": ["div_approx", "copysign", "smoothstep", "smoothstep:clamped"],
}  # fmt: skip


TRANSFORM = Case(
    transform_rules,
    dim=N,
    domains={
        "q": (-1.0, 1.0),
        "r": (-1.0, 1.0),
        "u": (-1.0, 1.0),
        "v": (-1.0, 1.0),
        "m": (-1.0, 1.0),
        "a": (0.2, 0.8),
        "b": (1.2, 2.0),
    },
    shapes={
        "q": (N, 4),
        "r": (N, 4),
        "u": (N, 3),
        "v": (N, 3),
        "m": (N, 4, 4),
        "a": (N,),
        "b": (N,),
        "s": (N, len(TRANSFORM_COLUMNS["s"])),
        "vo": (N, len(TRANSFORM_COLUMNS["vo"]), 3),
        "qo": (N, len(TRANSFORM_COLUMNS["qo"]), 4),
        "to": (N, len(TRANSFORM_COLUMNS["to"]), 7),
        "mo": (N, len(TRANSFORM_COLUMNS["mo"]), 3, 3),
    },
    outputs=("s", "vo", "qo", "to", "mo"),
    # copysign's kink (x = 0.5, z = 1.6)
    smooth=lambda inputs: bool(np.all(np.abs(inputs["a"] - 0.5) > 1e-4) and np.all(np.abs(inputs["b"] - 1.6) > 1e-4)),
)


@wp.kernel
def division_rules(
    a: wp.array(dtype=F64),
    u: wp.array(dtype=wp.vec3d),
    m: wp.array(dtype=wp.mat22d),
    q: wp.array(dtype=wp.quatd),
    vo: wp.array2d(dtype=wp.vec3d),
    mo: wp.array2d(dtype=wp.mat22d),
    qo: wp.array2d(dtype=wp.quatd),
):
    # a scalar divided by a vector, matrix or quaternion (component by component), and literals in a
    # constructor beside a differentiated value (their tangent: a literal 0 Warp types as float64 here)
    i = wp.tid()
    x = a[i]
    vo[i, 0] = x / u[i]
    vo[i, 1] = u[i] / x
    vo[i, 2] = wp.vec3d(1.00000005, x * x, 3.0)
    mo[i, 0] = x / m[i]
    qo[i, 0] = x / q[i]


DIVISION_COLUMNS = {
    "vo": ["div:scalar-by-vector", "div:vector-by-scalar", "vec3d:literals"],
    "mo": ["div:scalar-by-matrix"],
    "qo": ["div:scalar-by-quaternion"],
}

DIVISION = Case(
    division_rules,
    dim=N,
    domains={"a": (0.5, 1.5), "u": (1.0, 2.0), "m": (1.0, 2.0), "q": (1.0, 2.0)},
    shapes={
        "a": (N,),
        "u": (N, 3),
        "m": (N, 2, 2),
        "q": (N, 4),
        "vo": (N, 3, 3),
        "mo": (N, 1, 2, 2),
        "qo": (N, 1, 4),
    },
    outputs=("vo", "mo", "qo"),
)


# ---- rules the generator gets wrong (known failures, each a kernel of its own) --------------------------
@wp.kernel
def vector_piecewise_rules(u: wp.array(dtype=wp.vec3d), v: wp.array(dtype=wp.vec3d), vo: wp.array2d(dtype=wp.vec3d)):
    i = wp.tid()
    p = u[i]
    q = v[i]
    vo[i, 0] = wp.min(p, q)
    vo[i, 1] = wp.max(p, q)
    vo[i, 2] = wp.abs(p)


VECTOR_PIECEWISE = Case(
    vector_piecewise_rules,
    dim=N,
    domains={"u": (-1.0, 1.0), "v": (-1.0, 1.0)},
    shapes={"u": (N, 3), "v": (N, 3), "vo": (N, 3, 3)},
    outputs=("vo",),
    # componentwise min/max/abs: off their kinks (ties, zeros) for finite differences
    smooth=lambda inputs: bool(np.all(np.abs(inputs["u"] - inputs["v"]) > 1e-4) and np.all(np.abs(inputs["u"]) > 1e-4)),
)


@wp.kernel
def matrix_shape_rules(u: wp.array(dtype=wp.vec3d), a: wp.array(dtype=F64), mo: wp.array2d(dtype=wp.mat22d)):
    i = wp.tid()
    p = u[i]
    t = a[i]
    mo[i, 0] = wp.matrix(p[0], t, p[2], t * t, shape=(2, 2))


MATRIX_SHAPE = Case(
    matrix_shape_rules,
    dim=N,
    domains={"u": (-1.0, 1.0), "a": (0.2, 0.8)},
    shapes={"u": (N, 3), "a": (N,), "mo": (N, 1, 2, 2)},
    outputs=("mo",),
)

RULE_GROUPS: dict[str, tuple[Case, dict[str, list[str]]]] = {
    "scalar": (SCALAR, {"y": SCALAR_COLUMNS}),
    "vector": (VECTOR, VECTOR_COLUMNS),
    "matrix": (MATRIX, MATRIX_COLUMNS),
    "quat": (QUAT, QUAT_COLUMNS),
    "transform": (TRANSFORM, TRANSFORM_COLUMNS),
    "division": (DIVISION, DIVISION_COLUMNS),
    "vector-piecewise": (VECTOR_PIECEWISE, {"vo": ["min:vector", "max:vector", "abs:vector"]}),
    "matrix-shape": (MATRIX_SHAPE, {"mo": ["matrix:shape"]}),
}

_VECTOR_COMPARE = (
    "the tangent kernel does not compile: the rule's helper {} compares two vec3d with `<`/`>` "
    "(C++: invalid operands to binary expression vec_t < vec_t); Warp's {} of vectors is componentwise"
)
#: column -> (what is wrong, what it raises)
GENERATOR_BUGS: dict = {}  # (the generator's known faults, by case; none at present)
# Warp's own adjoint differs from the derivative (native/builtin.h); the rule follows the mathematics
# (it matches finite differences), so J t assembled from reverse mode cannot match it
WARP_ADJOINT_DIFFERS = {
    "scalar-mod:divisor": "Warp's adj_mod drops d(a % b)/db = -trunc(a / b) (adj_b stays 0); the rule has it",
    "scalar-frac": "Warp's adj_frac is empty (MISSINGADJOINT: gradient 0); frac's derivative is 1 between integers",
}


#: builtins that run approximate GPU intrinsics on CUDA (Warp: "falls back to exact division on CPU"):
#: ``rcp.approx.ftz.f64`` is good to about 2^-22 relatively, so on CUDA these columns are checked at
#: that precision (finite differences over a longer step, reverse mode to 1e-5): at float64's
#: tolerances the approximation itself fails them (the 2026-11-28 GPU run)
APPROX_ON_CUDA = frozenset({"transform-div_approx", "transform-div_approx:vector", "transform-inverse_approx"})
APPROX_TOLERANCES = {"EPS": 1e-3, "FD_RTOL": 1e-3, "FD_ATOL": 1e-4, "REV_RTOL": 1e-5, "REV_ATOL": 1e-6}


@contextlib.contextmanager
def tolerances_for(*ids: str):
    """The approximate columns' tolerances while checking any of ``ids`` (``group-column``) on CUDA."""
    if DEV == "cpu" or not APPROX_ON_CUDA.intersection(ids):
        yield
        return
    saved = {k: globals()[k] for k in APPROX_TOLERANCES}
    globals().update(APPROX_TOLERANCES)
    try:
        yield
    finally:
        globals().update(saved)


def _column_id(group: str, array: str, column: int) -> str:
    return f"{group}-{RULE_GROUPS[group][1][array][column]}"


def _columns(check: str) -> tuple[list, list]:
    """(passing, known failures) as pytest params (group, array, column[, reason]) for ``check``."""
    good, known = [], []
    for g, (_, cols) in RULE_GROUPS.items():
        for arr, names in cols.items():
            for k, name in enumerate(names):
                cid = f"{g}-{name}"
                known_failure = GENERATOR_BUGS.get(cid)
                if check == "reverse" and cid in WARP_ADJOINT_DIFFERS:
                    known_failure = (WARP_ADJOINT_DIFFERS[cid], AssertionError)
                if known_failure is None:
                    good.append(pytest.param(g, arr, k, id=cid))
                else:
                    reason, raises = known_failure
                    mark = pytest.mark.xfail(strict=True, reason=reason, raises=raises)
                    known.append(pytest.param(g, arr, k, check, id=f"{check}-{cid}", marks=mark))
    return good, known


FD_COLUMNS, FD_KNOWN = _columns("fd")
REV_COLUMNS, REV_KNOWN = _columns("reverse")


@pytest.mark.parametrize("group, array, column", FD_COLUMNS)
@SETTINGS
@given(data=st.data())
def test_rule_matches_finite_differences(group, array, column, data):
    case = RULE_GROUPS[group][0]
    inputs, tangents = draw_inputs(data, case)
    assume(case.smooth is None or case.smooth(inputs))
    with tolerances_for(_column_id(group, array, column)):
        check_tangent(case, inputs, tangents, select={array: np.s_[:, column]}, reverse=False)


@pytest.mark.parametrize("group, array, column", REV_COLUMNS)
@SETTINGS
@given(data=st.data())
def test_rule_matches_reverse_mode(group, array, column, data):
    case = RULE_GROUPS[group][0]
    inputs, tangents = draw_inputs(data, case)
    with tolerances_for(_column_id(group, array, column)):
        check_tangent(case, inputs, tangents, select={array: np.s_[:, column]}, finite_differences=False)


def seeded_inputs(case: Case, seed: int = 7) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    inputs = {n: rng.uniform(lo, hi, case.shapes.get(n, ())) for n, (lo, hi) in case.domains.items()}
    tangents = {n: rng.uniform(-1.0, 1.0, case.shapes.get(n, ())) for n in case.domains}
    return inputs, tangents


@pytest.mark.parametrize("group, array, column, check", FD_KNOWN + REV_KNOWN)
def test_rule_known_failures(group, array, column, check):
    # one seeded case (hypothesis would shrink an expected failure for half a minute)
    case = RULE_GROUPS[group][0]
    inputs, tangents = seeded_inputs(case)
    assert case.smooth is None or case.smooth(inputs)
    check_tangent(
        case,
        inputs,
        tangents,
        select={array: np.s_[:, column]},
        finite_differences=check == "fd",
        reverse=check == "reverse",
    )


# ---- every rule is exercised ----------------------------------------------------------------------------
NOT_EXERCISED = {
    "select": "removed in Warp 1.19 (a kernel calling wp.select fails to build: 'use wp.where')",
    "spatial_vector": (
        "Warp 1.19 builds wp.spatial_vector(...) in float32 only (float64 arguments: 'expected to be of "
        "the type float32'; dtype=: 'Remove the extraneous dtype parameter'); wp.spatial_vectord(...) is covered"
    ),
    # float32 only in Warp, and read a wp.Mesh: tests/test_tangent_queries.py checks them on a mesh
    "mesh_eval_position": "float32 only (a wp.Mesh): tests/test_tangent_queries.py",
    "mesh_eval_velocity": "float32 only (a wp.Mesh): tests/test_tangent_queries.py",
}
#: expansions and closed forms (TUPLE_TANGENTS) checked in a file of their own (several results,
#: unpacked or bound to one name)
NOT_EXERCISED_HERE = {
    "quat_to_axis_angle": "tests/test_tangent_rotations.py",
    "quat_slerp": "tests/test_tangent_rotations.py",
    "svd3": "tests/test_tangent_decompositions.py",
    "svd2": "tests/test_tangent_decompositions.py",
    "eig3": "tests/test_tangent_decompositions.py",
    "qr3": "tests/test_tangent_decompositions.py",
}


def _keys_in(expr: ast.AST, ns: dict) -> set[str]:
    """The builtins (rule keys), constructors (type names) and component reads in ``expr``."""
    keys = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.BinOp):
            keys.add(_tangent._Gen._BINOPS[type(node.op)][0])
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            keys.add("neg")
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and not isinstance(node.ctx, ast.Store):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "wp"):
                keys.add("extract")
        elif isinstance(node, ast.Call):
            obj = _tangent._resolve(node.func, ns)
            if _tangent._is_builtin(obj):
                keys.add(obj.key)
            elif isinstance(obj, type):
                keys.add(obj.__name__)
            elif isinstance(node.func, ast.Name) and node.func.id in ("min", "max", "abs"):
                keys.add(node.func.id)
    return keys


def _column_statements(kernel: Any) -> dict[tuple[str, int], ast.AST]:
    """``out[i, k] = expr`` statements of a rule kernel: (out, k) -> expr."""
    fdef = ast.parse(textwrap.dedent(kernel.adj.source)).body[0]
    found = {}
    for s in ast.walk(fdef):
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript):
            t = s.targets[0]
            if isinstance(t.slice, ast.Tuple) and isinstance(t.slice.elts[1], ast.Constant):
                found[(t.value.id, t.slice.elts[1].value)] = s.value
    return found


def test_every_rule_is_exercised():
    exercised = set()
    for group, (case, cols) in RULE_GROUPS.items():
        statements = _column_statements(case.kernel)
        ns = _tangent._ns_of(case.kernel.func)
        assert set(statements) == {(a, k) for a, names in cols.items() for k in range(len(names))}, group
        for arr, names in cols.items():
            for k, name in enumerate(names):
                key = name.split(":")[0]
                found = _keys_in(statements[(arr, k)], ns)
                assert key in found, f"{group} column {arr}[:, {k}] is named {name!r} but computes {sorted(found)}"
                exercised.add(key)
    assert not set(NOT_EXERCISED) & exercised, "a rule listed as not exercisable is exercised: drop it from the list"
    assert set(NOT_EXERCISED) <= set(R.RULES), "NOT_EXERCISED names a rule that no longer exists"
    missing = (
        (set(R.RULES) | set(R.EXPANSIONS) | set(R.TUPLE_TANGENTS))
        - exercised
        - set(NOT_EXERCISED)
        - set(NOT_EXERCISED_HERE)
    )
    assert not missing, f"rules without a column: {sorted(missing)}"


# ---- structure --------------------------------------------------------------------------------------------
M = 4  # columns of the 2-D structure inputs


@wp.kernel
def loops(x: wp.array2d(dtype=F64), n: int, y: wp.array(dtype=F64)):
    i = wp.tid()
    acc = F64(0.0)
    for j in range(3):  # constant bounds: unrolled by Warp
        acc = acc + wp.sin(x[i, j]) * F64(j + 1)
    for j in range(wp.static(2)):
        acc = acc * x[i, j]
    y[i] = acc
    for j in range(n):  # bound from a parameter: a dynamic loop
        if j == 2:
            continue
        y[i] += x[i, j] * acc


@wp.kernel
def carried_loops(x: wp.array2d(dtype=F64), n: int, y: wp.array(dtype=F64), z: wp.array(dtype=F64)):
    i = wp.tid()
    prod = F64(1.0)
    for j in range(n):  # a value carried from one iteration of a dynamic loop to the next
        prod = prod * (x[i, j] + F64(0.5))
    y[i] = prod
    k = int(0)  # noqa: UP018 (Warp mutates a variable in a loop only once it is typed)
    s = F64(0.0)
    while k < n:
        s += x[i, k] * x[i, k]
        if s > F64(100.0):
            break
        k += 1
    z[i] = wp.sqrt(s)


@wp.kernel
def branches(x: wp.array(dtype=F64), y: wp.array(dtype=F64), z: wp.array(dtype=F64)):
    i = wp.tid()
    v = x[i]
    if v > F64(0.5):
        w = v * v
    else:
        w = wp.exp(v)
    z[i] = w
    if i == 1:
        return  # y[1] is never written, nor its tangent
    if v < F64(0.25):
        y[i] = -v
        return
    left = x[i - 1] if i > 0 else F64(0.0)  # the guard keeps the load in bounds (thread 0 has no left)
    y[i] = w * v + left


@wp.kernel
def gather_scatter(
    x: wp.array(dtype=F64), idx: wp.array(dtype=wp.int32), y: wp.array(dtype=F64), s: wp.array(dtype=F64)
):
    i = wp.tid()
    v = x[idx[i]]
    y[i] = v * x[i]
    wp.atomic_add(s, idx[i], v * v)
    wp.atomic_sub(s, 0, wp.sin(x[i]))


@wp.kernel
def accumulate(x: wp.array2d(dtype=F64), acc: wp.array(dtype=F64)):
    i, j = wp.tid()
    wp.atomic_add(acc, i, x[i, j] * x[i, j])


@wp.kernel
def scale_in_place(x: wp.array(dtype=F64), acc: wp.array(dtype=F64)):
    i = wp.tid()
    acc[i] = acc[i] * x[i] + wp.sin(x[i])


@wp.kernel
def reads_own_output(x: wp.array(dtype=F64), y: wp.array(dtype=F64), z: wp.array(dtype=F64)):
    i = wp.tid()
    y[i] = x[i] * x[i]
    z[i] = y[i] * wp.sin(x[i])


@wp.kernel
def augmented(x: wp.array(dtype=F64), y: wp.array(dtype=F64), z: wp.array(dtype=F64), out: wp.array(dtype=F64)):
    i = wp.tid()
    a = x[i]
    b = F64(1.0)  # a constant until += makes it carry a tangent
    b += a
    b -= a * a
    b *= a
    b /= a + F64(1.0)
    c = F64(2.0)
    c *= F64(3.0)
    c *= a
    c /= F64(4.0)
    out[i] = b + c
    y[i] = a
    y[i] += a * a
    y[i] -= wp.sin(a)
    z[i] = a
    z[i] *= a + F64(1.0)
    z[i] /= F64(1.0) + a * a


@wp.func
def square(v: F64):
    return v * v


@wp.func
def poly(v: F64, k: F64):
    return square(v) * k + v  # a func calling a func


@wp.func
def polar(v: F64, w: F64):
    return wp.sqrt(v * v + w * w), wp.atan2(w, v)


@wp.func
def scale(v: F64, k: F64):
    return v * k


@wp.func
def store_twice(out: wp.array(dtype=F64), i: int, v: F64):
    out[i] = v + v


@wp.kernel
def funcs(x: wp.array(dtype=F64), z: wp.array(dtype=F64), y: wp.array(dtype=F64), w: wp.array(dtype=F64)):
    i = wp.tid()
    r, th = polar(x[i], z[i])
    a = x[i]
    b = z[i]
    c = poly(a, F64(3.0))  # the second argument carries no tangent
    d = scale(F64(2.0), F64(4.0))  # nothing carries a tangent: the function itself
    e = scale(a, b)
    f = scale(F64(0.5), b)
    y[i] = r * th + c + d + e + f
    store_twice(w, i, e * a)


@wp.func
def mix(v: Any, k: Any):
    return v * k + v


@wp.kernel
def generic_func(
    x: wp.array(dtype=F64), u: wp.array(dtype=wp.vec3d), y: wp.array(dtype=F64), v: wp.array(dtype=wp.vec3d)
):
    i = wp.tid()
    y[i] = mix(x[i], x[i])
    v[i] = mix(u[i], wp.cos(x[i]))


@wp.kernel
def generic_kernel(x: wp.array(dtype=Any), w: wp.array(dtype=F64), y: wp.array(dtype=Any)):
    i = wp.tid()
    v = x[i]
    y[i] = v * wp.sin(w[i]) + v * w[i] * w[i]


generic_kernel_f64 = wp.overload(generic_kernel, {"x": wp.array(dtype=F64), "y": wp.array(dtype=F64)})
generic_kernel_vec3d = wp.overload(generic_kernel, {"x": wp.array(dtype=wp.vec3d), "y": wp.array(dtype=wp.vec3d)})


@wp.kernel
def rigid(
    q: wp.array(dtype=wp.quatd),
    p: wp.array(dtype=wp.vec3d),
    m: wp.array(dtype=wp.mat33d),
    out_v: wp.array(dtype=wp.vec3d),
    out_q: wp.array(dtype=wp.quatd),
    out_m: wp.array(dtype=wp.mat33d),
):
    i = wp.tid()
    Q = wp.normalize(q[i] + wp.quatd(F64(0.0), F64(0.0), F64(0.0), F64(2.0)))
    r = p[i]
    r[0] += Q[0]  # a local vector's component, updated in place
    M = m[i]
    rotated = Q * wp.quaternion(r, F64(0.0)) * wp.quat_inverse(Q)
    out_v[i] = M * wp.vec3d(rotated[0], rotated[1], rotated[2]) + wp.cross(r, M[1])
    out_q[i] = Q * wp.quatd(r[0], r[1], r[2], wp.determinant(M))
    out_m[i] = wp.outer(r, r) + wp.transpose(M) * M


@wp.kernel
def components(p: wp.array(dtype=wp.vec3d), m: wp.array(dtype=wp.mat33d), y: wp.array(dtype=wp.vec3d)):
    i = wp.tid()
    r = p[i]
    r.y *= r.x  # components of local vectors and matrices, assigned
    r[2] = r[0] * r[1]
    M = m[i]
    M[0, 1] = r[2]
    M[2] = r
    y[i] = M * r


@wp.kernel
def tuple_from_locals(x: wp.array(dtype=F64), z: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    i = wp.tid()
    a = x[i]
    b = z[i]
    r, th = polar(a, b)  # the arguments are locals (loads are in polar(x[i], z[i]) in funcs)
    y[i] = r * th


@wp.kernel
def parameters(x: wp.array(dtype=F64), s: F64, k: int, w: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    i = wp.tid()
    y[i] = s * wp.pow(x[i], F64(k)) + w[i] * x[i] + s * s


@wp.kernel
def parameter_component(x: wp.array(dtype=F64), v: wp.vec3d, y: wp.array(dtype=wp.vec3d)):
    # a value parameter without a tangent takes one in the body (its component is assigned)
    i = wp.tid()
    v.y = x[i] * x[i]
    y[i] = v * x[i]


@wp.kernel
def dtype_constructors(x: wp.array(dtype=wp.vec3d), y: wp.array(dtype=wp.vec3d), z: wp.array(dtype=F64)):
    # constructors named through the arrays' types (generic code's way), wp.types.vector, a vector
    # spread into a constructor
    i = wp.tid()
    y[i] = x.dtype.dtype(3.0) * x[i] + type(x).dtype(x[i]) * x[i][0] + wp.vec3d(*(x[i] * x[i][1]))
    z[i] = wp.types.vector(x[i][0], x[i][1] * x[i][2], F64(1.0))[1] * x.dtype.dtype(2.0)


@wp.kernel
def func_keywords(x: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    # a wp.func called with keyword arguments, out of order
    i = wp.tid()
    y[i] = poly(k=x[i] * F64(3.0), v=x[i]) + scale(x[i], k=F64(2.0))


def _make_scaled(k: float):
    @wp.func
    def scaled(v: F64):
        return v * v * F64(k)

    return scaled


SCALED3 = _make_scaled(3.0)
SCALED2 = _make_scaled(2.0)  # the same key as SCALED3: Warp tells them apart, so must the tangents


@wp.kernel
def counters_and_factories(
    x: wp.array(dtype=F64), counter: wp.array(dtype=wp.int32), y: wp.array(dtype=F64), z: wp.array(dtype=F64)
):
    # closures of one factory (one key), called by name and through wp.static; an atomic counter's
    # returned slot (an int array: no tangent); an assert; a bool cast
    i = wp.tid()
    slot = wp.atomic_add(counter, 0, 1)
    assert slot >= 0
    positive = wp.bool(x[i] > F64(0.0))
    y[i] = SCALED3(x[i]) + wp.static(SCALED2)(x[i])
    if positive:
        z[i] = wp.static(_make_scaled(5.0))(x[i])


@wp.func
def forwards_polar(v: F64, w: F64, k: int):
    # returns the tuple another function returns (k: a value without a tangent, passed through)
    if k > 1:
        return polar(v * F64(k), w)
    return polar(v, w)


@wp.kernel
def returned_tuples(x: wp.array(dtype=F64), z: wp.array(dtype=F64), y: wp.array(dtype=F64), w: wp.array(dtype=F64)):
    i = wp.tid()
    a, b = forwards_polar(x[i], z[i], 2)
    c, d = forwards_polar(F64(0.5), F64(0.25), 1)  # nothing carries a tangent into this call
    y[i] = a * c + b
    w[i] = b * d - a


@wp.kernel
def slices(x: wp.array2d(dtype=F64), y: wp.array2d(dtype=F64), z: wp.array(dtype=F64)):
    # array views made in the kernel (a 2-D slice stored through, a 1-D strided window read)
    i = wp.tid()
    row = y[0:1, :]
    row[0, i] = x[i, 0] * x[i, 1]
    window = x[i, 0:2]
    z[i] = wp.sin(window[0]) * window[1]


NS = 4  # threads of the structure cases
IDX = np.array([2, 0, 2, 1], np.int32)  # a gather with repeats; thread 1 scatters into 0 twice


def _away_from(*points: float, gap: float = 1e-4) -> Callable[[dict], bool]:
    return lambda inputs: all(np.all(np.abs(inputs["x"] - p) > gap) for p in points)


STRUCTURE = {
    "loops": Case(loops, NS, {"x": (0.1, 0.9)}, {"x": (NS, M), "y": (NS,)}, ("y",), {"n": M}),
    "carried-loops-while": Case(
        carried_loops,
        NS,
        {"x": (0.1, 0.9)},
        {"x": (NS, M), "y": (NS,), "z": (NS,)},
        ("y", "z"),
        {"n": M},
        warp_reverse_wrong={
            "y": "Warp's adjoint of a dynamic loop does not replay a value carried from one iteration to the next "
            "(prod = prod * ...: wrong values on its own; here the while loop's NaN reaches every gradient of x too)",
            "z": "Warp's adjoint of a while loop gives NaN",
        },
    ),
    "branches": Case(
        branches,
        NS,
        {"x": (0.0, 1.0)},
        {"x": (NS,), "y": (NS,), "z": (NS,)},
        ("y", "z"),
        smooth=_away_from(0.25, 0.5),
        # Warp 1.16's adjoint of `x[i - 1] if i > 0 else 0` is wrong (a ternary's array-load branch was
        # not copied before Warp 1.17's codegen.emit_IfExp): y's J t from reverse mode is off there,
        # finite differences agree with the tangent kernel on every version
        warp_reverse_wrong={"y": "Warp 1.16's adjoint of a ternary over an array load"}
        if _warp_compat.VERSION < (1, 17)
        else {},
    ),
    "gather-scatter": Case(
        gather_scatter, NS, {"x": (0.1, 0.9)}, {"x": (NS,), "y": (NS,), "s": (NS,)}, ("y", "s"), {"idx": IDX}
    ),
    "in-out-atomic": Case(
        accumulate, (NS, M), {"x": (-1.0, 1.0), "acc": (-1.0, 1.0)}, {"x": (NS, M), "acc": (NS,)}, ("acc",)
    ),
    "reads-own-output": Case(
        reads_own_output, NS, {"x": (-1.0, 1.0)}, {"x": (NS,), "y": (NS,), "z": (NS,)}, ("y", "z")
    ),
    "augmented": Case(
        augmented,
        NS,
        {"x": (0.1, 0.9)},
        {"x": (NS,), "y": (NS,), "z": (NS,), "out": (NS,)},
        ("y", "z", "out"),
        warp_reverse_wrong={"z": "Warp's adjoint of z[i] *= v, z[i] /= v (an array element) is not the derivative"},
    ),
    "funcs": Case(
        funcs, NS, {"x": (0.2, 0.8), "z": (0.2, 0.8)}, {"x": (NS,), "z": (NS,), "y": (NS,), "w": (NS,)}, ("y", "w")
    ),
    "generic-func": Case(
        generic_func,
        NS,
        {"x": (-1.0, 1.0), "u": (-1.0, 1.0)},
        {"x": (NS,), "u": (NS, 3), "y": (NS,), "v": (NS, 3)},
        ("y", "v"),
    ),
    "generic-kernel-float64": Case(
        generic_kernel_f64, NS, {"x": (-1.0, 1.0), "w": (-1.0, 1.0)}, {"x": (NS,), "w": (NS,), "y": (NS,)}, ("y",)
    ),
    "generic-kernel-vec3d": Case(
        generic_kernel_vec3d, NS, {"x": (-1.0, 1.0), "w": (-1.0, 1.0)}, {"x": (NS, 3), "w": (NS,), "y": (NS, 3)}, ("y",)
    ),
    "vec-mat-quat": Case(
        rigid,
        NS,
        {"q": (-1.0, 1.0), "p": (-1.0, 1.0), "m": (-1.0, 1.0)},
        {"q": (NS, 4), "p": (NS, 3), "m": (NS, 3, 3), "out_v": (NS, 3), "out_q": (NS, 4), "out_m": (NS, 3, 3)},
        ("out_v", "out_q", "out_m"),
        smooth=lambda inputs: bool(np.all(np.abs(np.linalg.det(inputs["m"])) > 1e-2)),  # the determinant's rule
    ),
    "vec-mat-components": Case(
        components,
        NS,
        {"p": (-1.0, 1.0), "m": (-1.0, 1.0)},
        {"p": (NS, 3), "m": (NS, 3, 3), "y": (NS, 3)},
        ("y",),
        warp_reverse_wrong={
            "y": "Warp's adjoint of an assignment to a component of a local vector or matrix (r[2] = s, r.y *= s, "
            "M[0, 1] = s) lets the overwritten component's gradient through to the array it was loaded from"
        },
    ),
    "parameter-component": Case(
        parameter_component, NS, {"x": (-1.0, 1.0)}, {"x": (NS,), "y": (NS, 3)}, ("y",), {"v": wp.vec3d(0.5, 1.0, 2.0)}
    ),
    "dtype-constructors": Case(
        dtype_constructors, NS, {"x": (-1.0, 1.0)}, {"x": (NS, 3), "y": (NS, 3), "z": (NS,)}, ("y", "z")
    ),
    "func-keywords": Case(func_keywords, NS, {"x": (-1.0, 1.0)}, {"x": (NS,), "y": (NS,)}, ("y",)),
    "counters-and-factories": Case(
        counters_and_factories,
        NS,
        {"x": (-1.0, 1.0)},
        {"x": (NS,), "y": (NS,), "z": (NS,)},
        ("y", "z"),
        {"counter": np.zeros(1, np.int32)},
        smooth=_away_from(0.0),  # z's branch
    ),
    "returned-tuples": Case(
        returned_tuples,
        NS,
        {"x": (0.2, 0.8), "z": (0.2, 0.8)},
        {"x": (NS,), "z": (NS,), "y": (NS,), "w": (NS,)},
        ("y", "w"),
    ),
    "slices": Case(slices, NS, {"x": (-1.0, 1.0)}, {"x": (NS, M), "y": (1, NS), "z": (NS,)}, ("y", "z")),
    "scalar-int-nondifferentiable": Case(
        parameters,
        NS,
        {"x": (0.2, 0.8), "s": (0.5, 1.5)},
        {"x": (NS,), "w": (NS,), "y": (NS,)},
        ("y",),
        {"k": 3, "w": np.linspace(0.5, 2.0, NS)},
    ),
}


@pytest.mark.parametrize("name", list(STRUCTURE))
@SETTINGS
@given(data=st.data())
def test_structure(name, data):
    case = STRUCTURE[name]
    inputs, tangents = draw_inputs(data, case)
    assume(case.smooth is None or case.smooth(inputs))
    check_tangent(case, inputs, tangents)


TUPLE_FROM_LOCALS = Case(
    tuple_from_locals, NS, {"x": (0.2, 0.8), "z": (0.2, 0.8)}, {"x": (NS,), "z": (NS,), "y": (NS,)}, ("y",)
)


def test_tuple_returned_by_a_func_unpacked_from_locals():
    check_tangent(TUPLE_FROM_LOCALS, *seeded_inputs(TUPLE_FROM_LOCALS))


def _guarded(node: ast.AST, test: str, parent: dict) -> bool:
    """Whether ``node`` sits in the body of an ``if <test>:``."""
    while node in parent:
        up = parent[node]
        if isinstance(up, ast.If) and ast.unparse(up.test) == test and node in up.body:
            return True
        node = up
    return False


def test_if_expression_guards_its_load_in_the_tangent_kernel():
    # thread 0 must not read x[-1] (nor x__dot[-1]): both loads stay under the test `i > 0`
    tree = ast.parse(STRUCTURE["branches"].tangent().source)
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    loads = [n for n in ast.walk(tree) if isinstance(n, ast.Subscript) and ast.unparse(n.slice) == "i - 1"]
    assert {ast.unparse(n.value) for n in loads} == {"x", "x__dot"}
    assert all(_guarded(n, "i > 0", parent) for n in loads)


def test_tangent_parameters_follow_the_kernel_order():
    tk = STRUCTURE["scalar-int-nondifferentiable"].tangent()
    # the integer k and the nondifferentiable w get no tangent; the float scalar s and the output y do
    assert tk.tangent_of == {"x": "x__dot", "s": "s__dot", "y": "y__dot"}
    assert [a.label for a in tk.kernel.adj.args] == ["x", "s", "k", "w", "y", "x__dot", "s__dot", "y__dot"]
    assert tk.kernel.adj.arg_types["s__dot"] is F64


def test_generic_kernel_overloads_get_a_tangent_each():
    f64, vec = STRUCTURE["generic-kernel-float64"].tangent(), STRUCTURE["generic-kernel-vec3d"].tangent()
    assert f64.kernel is not vec.kernel
    assert f64.kernel.adj.arg_types["x__dot"].dtype is F64
    assert vec.kernel.adj.arg_types["y__dot"].dtype is wp.vec3d


def test_tangent_kernels_are_cached():
    case = STRUCTURE["funcs"]
    assert case.tangent() is case.tangent()


@pytest.mark.parametrize("check", ["fd", "reverse"])
def test_determinant_at_a_singular_matrix(check):
    case = STRUCTURE["vec-mat-quat"]
    inputs, tangents = seeded_inputs(case)
    inputs["m"][:] = np.diag([1.0, 1.0, 0.0])  # rank 2: det = 0, its gradient (the adjugate) is not
    # out_q's real part is Q times det(M)
    check_tangent(
        case, inputs, tangents, select={"out_q": np.s_[:]}, finite_differences=check == "fd", reverse=check == "reverse"
    )


@wp.kernel
def bfloat16_piecewise(a: wp.array(dtype=wp.bfloat16), b: wp.array(dtype=wp.bfloat16), y: wp.array(dtype=wp.bfloat16)):
    i = wp.tid()
    x = a[i]
    y[i] = wp.abs(x) / b[i] + wp.clamp(x, wp.bfloat16(-1.0), wp.bfloat16(1.0)) + wp.min(x, b[i])


def test_bfloat16_helpers():
    # the helpers' bfloat16 overloads (abs, clamp, min, a bfloat16 divisor) against the derivative by
    # hand, in float64, to bfloat16's precision
    a = np.array([0.5, -2.0, 0.75, -0.25])
    b = np.array([2.0, 4.0, 0.5, 1.5])
    ta, tb = np.array([1.0, -0.5, 0.25, 1.0]), np.array([0.5, 1.0, -1.0, 0.25])
    bf = lambda v: wp.array(v, dtype=wp.bfloat16, device=DEV)  # noqa: E731
    tk = _tangent.tangent_kernel(bfloat16_piecewise, {"a": True, "b": True, "y": True}, "bfloat16")
    y, ty = bf(np.zeros(4)), bf(np.zeros(4))
    wp.launch(tk.kernel, dim=4, inputs=[bf(a), bf(b), y, bf(ta), bf(tb), ty], device=DEV)
    want = np.sign(a) * ta / b - np.abs(a) * tb / b**2 + np.where(np.abs(a) < 1, ta, 0) + np.where(a < b, ta, tb)
    np.testing.assert_allclose(ty.numpy().astype(np.float64), want, rtol=2e-2, atol=1e-2)


# ---- second order: Warp's adjoint of the tangent kernel ------------------------------------------------
def _array_inputs(case: Case) -> list[str]:
    types = dict(case.params)
    return [n for n in case.domains if _is_array(types[n])]


def second_order(case: Case, inputs: dict, v: dict, ct: dict) -> tuple[dict, dict]:
    """Warp's adjoint of the tangent kernel with cotangent ``ct`` on the output tangents only: the gradients
    with respect to the primal inputs (``sum_k ct_k H_k v``) and to the input tangents (``J^T ct``)."""
    tk = case.tangent()
    types = dict(case.params)
    values = _start_values(case, inputs)
    grad = lambda n, t: _is_array(t) and _tangent.float_like(t.dtype) and n not in case.fixed  # noqa: E731
    args = {n: _to_wp(t, values[n], requires_grad=grad(n, t)) for n, t in case.params}
    targs = {}
    for n in tk.tangent_of:
        start = v.get(n, np.zeros(case.shapes[n]) if _is_array(types[n]) else 0.0)
        targs[n] = _to_wp(types[n], start, requires_grad=_is_array(types[n]))
    tape = wp.Tape()
    with tape:
        wp.launch(tk.kernel, dim=case.dim, inputs=list(args.values()) + list(targs.values()), device=DEV)
    tape.backward(grads={targs[n]: wp.array(c, dtype=targs[n].dtype, device=DEV) for n, c in ct.items()})
    names = _array_inputs(case)
    return {n: args[n].grad.numpy() for n in names}, {n: targs[n].grad.numpy() for n in names}


def primal_adjoint(case: Case, inputs: dict, ct: dict) -> dict:
    """``J^T ct`` from Warp's adjoint of the kernel itself."""
    tape, args = _record(case, inputs)
    tape.backward(grads={args[n]: wp.array(c, dtype=args[n].dtype, device=DEV) for n, c in ct.items()})
    return {n: args[n].grad.numpy() for n in _array_inputs(case)}


def _dot(a: dict, b: dict) -> float:
    return float(sum(np.sum(a[n] * b[n]) for n in a))


def check_second_order(case: Case, inputs: dict, v: dict, w: dict, ct: dict) -> None:
    s_v, jt_ct = second_order(case, inputs, v, ct)
    ref = primal_adjoint(case, inputs, ct)
    scale = max(1.0, max(float(np.max(np.abs(g), initial=0.0)) for g in ref.values()))
    for n in ref:
        np.testing.assert_allclose(
            jt_ct[n], ref[n], rtol=REV_RTOL, atol=REV_ATOL * scale, err_msg=f"d/d {n}__dot != J^T ct"
        )
    hi = primal_adjoint(case, {n: x + EPS * v.get(n, 0.0) for n, x in inputs.items()}, ct)
    lo = primal_adjoint(case, {n: x - EPS * v.get(n, 0.0) for n, x in inputs.items()}, ct)
    for n in ref:
        np.testing.assert_allclose(
            s_v[n], (hi[n] - lo[n]) / (2 * EPS), rtol=FD_RTOL, atol=FD_ATOL * scale, err_msg=f"d/d {n} != FD of J^T ct"
        )
    s_w, _ = second_order(case, inputs, w, ct)
    lhs, rhs = _dot(w, s_v), _dot(v, s_w)
    mag = max(1.0, _dot({n: np.abs(w[n]) for n in w}, {n: np.abs(s_v[n]) for n in s_v}))
    assert abs(lhs - rhs) <= REV_RTOL * mag, f"<w, S(x, v, ct)> = {lhs} != <v, S(x, w, ct)> = {rhs}"


def _second_order_data(case: Case, seed: int) -> tuple[dict, dict, dict, dict]:
    rng = np.random.default_rng(seed)
    inputs, v = seeded_inputs(case, seed)
    w = {n: rng.uniform(-1.0, 1.0, case.shapes[n]) for n in _array_inputs(case)}
    v = {n: v[n] for n in _array_inputs(case)}
    ct = {n: rng.uniform(-1.0, 1.0, case.shapes[n]) for n in case.outputs}
    return inputs, v, w, ct


def _second_order_columns() -> list:
    params = []
    for g, (_, cols) in RULE_GROUPS.items():
        for arr, names in cols.items():
            for k, name in enumerate(names):
                cid = f"{g}-{name}"
                if cid in GENERATOR_BUGS:
                    continue
                marks = []
                if cid in WARP_ADJOINT_DIFFERS:  # J^T ct from the primal's adjoint is Warp's, not the derivative's
                    marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=WARP_ADJOINT_DIFFERS[cid])]
                params.append(pytest.param(g, arr, k, id=cid, marks=marks))
    return params


@pytest.mark.parametrize("group, array, column", _second_order_columns())
def test_rule_second_order(group, array, column):
    case = RULE_GROUPS[group][0]
    inputs, v, w, ct = _second_order_data(case, seed=11)
    assert case.smooth is None or case.smooth(inputs)
    only = np.zeros(case.shapes[array])
    only[:, column] = 1.0
    ct = {array: ct[array] * only}  # cotangent on this column's tangent only
    with tolerances_for(_column_id(group, array, column)):
        check_second_order(case, inputs, v, w, ct)


SECOND_ORDER_STRUCTURE = [
    "loops", "branches", "gather-scatter", "reads-own-output", "augmented", "funcs", "generic-func",
    "generic-kernel-float64", "generic-kernel-vec3d", "vec-mat-quat",
]  # fmt: skip


@pytest.mark.parametrize("name", SECOND_ORDER_STRUCTURE)
@pytest.mark.parametrize("seed", [1, 2])
def test_structure_second_order(name, seed):
    case = STRUCTURE[name]
    inputs, v, w, ct = _second_order_data(case, seed)
    assert case.smooth is None or case.smooth(inputs)
    ct = {n: c for n, c in ct.items() if n not in case.warp_reverse_wrong}
    check_second_order(case, inputs, v, w, ct)


def _tangent_case(case: Case) -> Case:
    """The tangent kernel as a case of its own: its tangent kernel is forward over forward (the
    generator transforming its own output, helpers and rules included)."""
    tk = case.tangent()
    domains, shapes = dict(case.domains), dict(case.shapes)
    for n, tn in tk.tangent_of.items():
        if n in case.domains:
            domains[tn] = (-1.0, 1.0)
        if n in case.shapes:
            shapes[tn] = case.shapes[n]
    outputs = case.outputs + tuple(tk.tangent_of[n] for n in case.outputs if n in tk.tangent_of)
    return Case(tk.kernel, case.dim, domains, shapes, outputs, dict(case.fixed), case.smooth, label=f"{case.label}-T")


@pytest.mark.parametrize("group", list(RULE_GROUPS))
def test_rule_forward_over_forward(group):
    # the tangent kernel's own tangent (second directional derivatives) against finite differences
    # of the tangent kernel, every output and output tangent whole
    case = _tangent_case(RULE_GROUPS[group][0])
    inputs, tangents = seeded_inputs(case, seed=5)
    assert case.smooth is None or case.smooth(inputs)
    columns = [f"{group}-{name}" for names in RULE_GROUPS[group][1].values() for name in names]
    with tolerances_for(*columns):
        check_tangent(case, inputs, tangents, reverse=False)


# ---- refusals ------------------------------------------------------------------------------------------------
@wp.kernel
def refuse_atomic_max(x: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    i = wp.tid()
    wp.atomic_max(y, 0, x[i] * x[i])


@wp.kernel
def refuse_tile_cholesky(a: wp.array2d(dtype=F64), y: wp.array2d(dtype=F64)):
    t = wp.tile_load(a, shape=(4, 4))
    wp.tile_store(y, wp.tile_cholesky(t))


@wp.kernel
def refuse_erfinv(x: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    i = wp.tid()
    y[i] = wp.erfinv(x[i])


@wp.kernel
def refuse_noise(x: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    i = wp.tid()
    y[i] = F64(wp.noise(wp.rand_init(7), float(x[i])))


@wp.kernel
def refuse_atomic_value(x: wp.array(dtype=F64), y: wp.array(dtype=F64), z: wp.array(dtype=F64)):
    i = wp.tid()
    old = wp.atomic_add(y, 0, x[i])
    z[i] = old * x[i]


@wp.func
def clipped(v: F64):
    return wp.min(v, F64(1.0))


@wp.func_grad(clipped)
def adj_clipped(v: F64, adj_ret: F64):
    wp.adjoint[v] += adj_ret  # a straight-through gradient


@wp.kernel
def refuse_custom_grad(x: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    i = wp.tid()
    y[i] = clipped(x[i]) * F64(2.0)


def _tile_kernel():
    from catalogue import tile_kernel

    return tile_kernel


REFUSALS = {
    # kernel, the line refused (its text), what the message names, the op's options
    "atomic_max": (lambda: refuse_atomic_max, "wp.atomic_max(y, 0, x[i] * x[i])", "'wp.atomic_max' into a differentiated array", {}),
    "erfinv": (lambda: refuse_erfinv, "y[i] = wp.erfinv(x[i])", "the builtin 'erfinv' has no tangent rule", {}),
    "noise": (lambda: refuse_noise, "y[i] = F64(wp.noise(wp.rand_init(7), float(x[i])))", "the builtin 'noise' has no tangent rule", {}),
    "atomic_value": (lambda: refuse_atomic_value, "old = wp.atomic_add(y, 0, x[i])", "the value returned by 'wp.atomic_add'", {"outputs": ["y", "z"]}),
    "tile": (lambda: refuse_tile_cholesky, "wp.tile_store(y, wp.tile_cholesky(t))", "the tile builtin 'wp.tile_cholesky' has no tangent rule", {}),
    "func_grad": (lambda: refuse_custom_grad, "y[i] = clipped(x[i]) * F64(2.0)", "the function 'clipped'", {}),
}  # fmt: skip


@pytest.fixture
def fresh_tangent_cache(monkeypatch):
    """No tangent kernel (nor refusal) cached from another test: each test sees its own first build."""
    monkeypatch.setattr(_tangent, "_kernels", weakref.WeakKeyDictionary())


def _line_of(kernel: Any, text: str) -> tuple[str, int]:
    lines, first = inspect.getsourcelines(kernel.func)
    k = next(k for k, line in enumerate(lines) if line.strip() == text)
    return inspect.getsourcefile(kernel.func), first + k


def _differentiable(kernel: Any) -> dict[str, bool]:
    return {a.label: _tangent.float_like(getattr(a.type, "dtype", a.type)) for a in kernel.adj.args}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusal_names_the_op_the_construct_and_the_line(name, fresh_tangent_cache):
    make, text, what, _ = REFUSALS[name]
    kernel = make()
    with pytest.raises(interop.UnsupportedError) as info:
        _tangent.tangent_kernel(kernel, _differentiable(kernel), f"my_op_{name}")
    msg = str(info.value)
    path, line = _line_of(kernel, text)
    assert f"op 'my_op_{name}'" in msg
    assert what in msg
    assert f"{path}:{line}" in msg
    assert f"`{text}`" in msg
    assert "interop.op(..., jvp=" in msg and "reverse mode" in msg  # what to do instead


def _numpy_args(op: interop.Op) -> list:
    def arg(p):
        trailing = {"quatd": (4,), "vec3d": (3,)}.get(getattr(p.dtype, "__name__", ""), ())
        return np.full((3,) + trailing, 0.5)

    return [arg(p) for p in op.description.call_params]


def _n_tangents(op: interop.Op) -> int:
    return sum(p.differentiable for p in op.description.call_params)


@pytest.mark.parametrize("name", [n for n in REFUSALS if n != "tile"])
def test_op_tangent_and_jvp_refuse_with_the_line(name, fresh_tangent_cache):
    make, text, what, options = REFUSALS[name]
    kernel = make()
    op = interop.op(kernel, **options)
    path, line = _line_of(kernel, text)
    for call in (op.tangent, lambda: op.jvp(*_numpy_args(op), tangents=[None] * _n_tangents(op))):
        with pytest.raises(interop.UnsupportedError, match=re.escape(f"op '{kernel.key}'")) as info:
            call()
        assert what in str(info.value) and f"{path}:{line}" in str(info.value)


def test_op_tangent_of_a_tile_kernel_launches_as_the_kernel():
    """A tile kernel's tangent op keeps its block_dim and launch form (the tile grid, then the lanes;
    tests/test_tangent_tiles.py checks the tile rules themselves)."""
    op = interop.op(_tile_kernel(), block_dim=16)
    t = op.tangent().description
    assert t.tiles and t.block_dim == 16 and t.tile_form == op.description.tile_form == ("tiled", 2, True)
    x = np.arange(16.0, dtype=np.float32).reshape(2, 8) / 8.0
    dx = np.ones_like(x)
    (_, dy) = op.jvp(x, tangents=[dx], launch_dims=(2,))
    np.testing.assert_allclose(dy, 2.0 * (x * dx).sum(axis=1), rtol=1e-6)


def test_a_refused_kernel_raises_again_without_rebuilding(monkeypatch, fresh_tangent_cache):
    built = []
    build = _tangent._build_tangent_kernel
    monkeypatch.setattr(_tangent, "_build_tangent_kernel", lambda *a: built.append(a) or build(*a))
    diff = _differentiable(refuse_erfinv)
    errors = []
    for _ in range(2):
        with pytest.raises(interop.UnsupportedError, match="erfinv") as info:
            _tangent.tangent_kernel(refuse_erfinv, diff, "twice")
        errors.append(info.value)
    assert len(built) == 1 and str(errors[0]) == str(errors[1])
    op = interop.op(refuse_erfinv)
    for _ in range(2):
        with pytest.raises(interop.UnsupportedError, match="erfinv"):
            op.jvp(np.zeros(3), tangents=[np.ones(3)])
    assert len(built) == 1


def test_a_refusal_names_the_op_that_asked(fresh_tangent_cache):
    first = interop.op(refuse_erfinv, name="tangent_tests::first")
    second = interop.op(refuse_erfinv, name="tangent_tests::second")
    with pytest.raises(interop.UnsupportedError, match="tangent_tests::first"):
        first.tangent()
    with pytest.raises(interop.UnsupportedError, match="tangent_tests::second"):
        second.tangent()


def test_a_refused_kernel_keeps_its_reverse_mode(fresh_tangent_cache):
    op = interop.op(refuse_erfinv)
    with pytest.raises(interop.UnsupportedError):
        op.tangent()
    x_np = np.array([0.1, 0.4, 0.7])
    y_np = op(x_np)
    np.testing.assert_allclose([math.erf(v) for v in y_np], x_np, rtol=1e-14)
    x = wp.array(x_np, dtype=F64, device=DEV, requires_grad=True)
    tape = wp.Tape()
    with tape:
        y = op(x)
    tape.backward(grads={y: wp.array(np.ones(3), dtype=F64, device=DEV)})
    np.testing.assert_allclose(x.grad.numpy(), np.sqrt(np.pi) / 2 * np.exp(y_np**2), rtol=1e-12)


# ---- Op.jvp from NumPy -------------------------------------------------------------------------------------
def _catalogue() -> dict[str, tuple[interop.Op, Case]]:
    from catalogue import cube64, inout64_kernel, mat33d_kernel, multi64_kernel, vec3d_kernel

    n, m = 5, 3
    return {
        "cube64": (interop.op(cube64), Case(cube64, n, {"x": (-1.0, 1.0)}, {"x": (n,), "out": (n,)}, ("out",))),
        "vec3d_kernel": (
            interop.op(vec3d_kernel),
            Case(
                vec3d_kernel,
                n,
                {"a": (-1.0, 1.0), "b": (-1.0, 1.0)},
                {"a": (n, 3), "b": (n, 3), "out": (n, 3)},
                ("out",),
            ),
        ),
        "mat33d_kernel": (
            interop.op(mat33d_kernel),
            Case(
                mat33d_kernel,
                n,
                {"m": (-1.0, 1.0), "v": (-1.0, 1.0)},
                {"m": (n, 3, 3), "v": (n, 3), "out": (n, 3)},
                ("out",),
            ),
        ),
        "multi64_kernel": (
            interop.op(multi64_kernel, outputs=["c", "d"]),
            Case(multi64_kernel, n, {"a": (-1.0, 1.0)}, {"a": (n,), "c": (n,), "d": (n,)}, ("c", "d")),
        ),
        "inout64_kernel": (
            interop.op(inout64_kernel, in_out=["acc"]),
            Case(
                inout64_kernel,
                (n, m),
                {"x": (-1.0, 1.0), "acc": (-1.0, 1.0)},
                {"x": (n, m), "acc": (n,), "sq": (n, m)},
                ("acc", "sq"),
            ),
        ),
        "accumulate": (interop.op(accumulate, in_out=["acc"]), STRUCTURE["in-out-atomic"]),
        "scale_in_place": (
            interop.op(scale_in_place, in_out=["acc"]),
            Case(
                scale_in_place,
                NS,
                {"x": (-1.0, 1.0), "acc": (-1.0, 1.0)},
                {"x": (NS,), "acc": (NS,)},
                ("acc",),
                warp_reverse_wrong={"acc": "Warp's adjoint of acc[i] = acc[i] * x[i] reads acc after the write"},
            ),
        ),
        "generic_kernel": (interop.op(generic_kernel), STRUCTURE["generic-kernel-float64"]),
    }


CATALOGUE_JVP = list(_catalogue())


@pytest.mark.parametrize("name", CATALOGUE_JVP)
def test_op_jvp_from_numpy(name):
    op, case = _catalogue()[name]
    inputs, tangents = seeded_inputs(case, seed=5)
    call = [p.name for p in op.description.call_params]
    returned = [p.name for p in op.description.returned_params]
    args = [np.array(inputs[n], copy=True) for n in call]  # in-outs are updated in place
    res, tans = op.jvp(*args, tangents=[np.array(tangents[n], copy=True) for n in call])
    res = res if isinstance(res, tuple) else (res,)
    tans = tans if isinstance(tans, tuple) else (tans,)
    assert all(isinstance(t, np.ndarray) and t.dtype == np.float64 for t in res + tans)
    got = ({n: r for n, r in zip(returned, res)}, {n: t for n, t in zip(returned, tans)})
    check_tangent(case, inputs, tangents, got=got)


def test_op_jvp_with_a_zero_tangent_and_a_nondifferentiable_parameter():
    op = interop.op(parameters, nondifferentiable=["w"])
    case = STRUCTURE["scalar-int-nondifferentiable"]
    assert [p.name for p in op.description.call_params if p.differentiable] == ["x", "s"]
    x, w = np.array([0.3, 0.5, 0.6, 0.7]), case.fixed["w"]
    y, dy = op.jvp(x, 1.5, 3, w, tangents=[None, 1.0])  # d/ds only: x**3 + 2 s
    np.testing.assert_allclose(y, 1.5 * x**3 + w * x + 1.5**2, rtol=1e-14)
    np.testing.assert_allclose(dy, x**3 + 3.0, rtol=1e-14)
    y, dy = op.jvp(x, 1.5, 3, w, tangents=[np.ones(4), None])  # d/dx only: 3 s x**2 + w
    np.testing.assert_allclose(dy, 4.5 * x**2 + w, rtol=1e-14)


def test_op_jvp_argument_errors():
    from catalogue import cube64, inout64_kernel

    cube = interop.op(cube64)
    x = np.ones(3)
    with pytest.raises(
        interop.ArgumentError,
        match=r"op 'cube64', jvp: expected 1 tangent\(s\), one per differentiable call parameter \['x'\], got 2",
    ):
        cube.jvp(x, tangents=[x, x])
    with pytest.raises(
        interop.ArgumentError, match=r"op 'cube64', jvp: tangents must be a list .*\['x'\], got ndarray"
    ):
        cube.jvp(x, tangents=x)
    with pytest.raises(interop.ArgumentError, match=r"op 'cube64', jvp: expected 1 argument\(s\) \['x'\], got 2"):
        cube.jvp(x, x, tangents=[x])
    acc = interop.op(inout64_kernel, in_out=["acc"])
    with pytest.raises(
        interop.ArgumentError, match=r"op 'inout64_kernel', jvp: expected 2 tangent\(s\), .*\['x', 'acc'\], got 1"
    ):
        acc.jvp(np.ones((2, 2)), np.zeros(2), tangents=[np.ones((2, 2))])
