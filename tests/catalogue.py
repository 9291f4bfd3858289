"""The conformance catalogue: one set of kernels every adapter runs, against one NumPy reference.

Each :class:`Case` gives an op, a way to make NumPy inputs (float32 or float64), and an
independent NumPy reference of the forward pass. Gradients are checked against central
finite differences of that reference (see :func:`fd_grad`), never against Warp itself.

Adapters' conformance tests convert the NumPy inputs to their framework, call the op,
and compare values (and gradients where ``differentiable``) with the reference.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import warp as wp

import interop

N = 7


# ---- kernels -------------------------------------------------------------------------
@wp.kernel
def scalar_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = wp.sin(x[i]) * s + y[i] * y[i]


@wp.kernel
def vec3_kernel(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = wp.cross(a[i], b[i]) + a[i] * wp.dot(a[i], b[i])


@wp.kernel
def mat33_kernel(m: wp.array(dtype=wp.mat33), v: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = m[i] * v[i] + wp.transpose(m[i]) * (m[i] * v[i])


@wp.kernel
def multi_kernel(a: wp.array(dtype=float), c: wp.array(dtype=float), d: wp.array(dtype=float)):
    i = wp.tid()
    c[i] = wp.sin(a[i])
    d[i] = a[i] * a[i] * a[i]


@wp.kernel
def inout_kernel(x: wp.array2d(dtype=float), acc: wp.array(dtype=float), sq: wp.array2d(dtype=float)):
    i, j = wp.tid()
    wp.atomic_add(acc, i, x[i, j] * x[i, j])
    sq[i, j] = 2.0 * x[i, j]


@wp.kernel
def generic_kernel(a: wp.array(dtype=typing.Any), s: typing.Any, out: wp.array(dtype=typing.Any)):
    i = wp.tid()
    out[i] = a[i] * a[i] * s


@wp.kernel
def _square_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * a[i]


@wp.kernel
def _axpy_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * s + b[i]


def function_op_fn(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array(dtype=float)):
    """Two launches with an intermediate (allocated with requires_grad so the tape keeps its gradient)."""
    tmp = wp.empty_like(a, requires_grad=True)
    wp.launch(_square_kernel, dim=a.shape, inputs=[a], outputs=[tmp])
    wp.launch(_axpy_kernel, dim=a.shape, inputs=[tmp, b, 3.0], outputs=[out])


# ---- cases -----------------------------------------------------------------------------
@dataclass
class Case:
    id: str
    op: interop.Op
    make: Callable[[np.random.Generator, Any], tuple]  # NumPy call arguments
    reference: Callable[..., tuple]  # NumPy forward: same arguments -> tuple of returned arrays
    differentiable: bool = True
    dtypes: tuple = (np.float32, np.float64)
    call_kwargs: dict = field(default_factory=dict)
    in_out: tuple = ()  # indices of call arguments updated in place


def _f(rng, shape, dt):
    return rng.uniform(-1.0, 1.0, size=shape).astype(dt)


CASES: list[Case] = []


def _add(case: Case) -> Case:
    CASES.append(case)
    return case


def _cross(a, b):
    return np.cross(a, b)


_add(
    Case(
        "scalar",
        interop.op(scalar_kernel),
        lambda rng, dt: (_f(rng, N, dt), _f(rng, N, dt), 1.5),
        lambda x, y, s: (np.sin(x) * s + y * y,),
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "vec3",
        interop.op(vec3_kernel),
        lambda rng, dt: (_f(rng, (N, 3), dt), _f(rng, (N, 3), dt)),
        lambda a, b: (_cross(a, b) + a * np.sum(a * b, axis=-1, keepdims=True),),
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "mat33",
        interop.op(mat33_kernel),
        lambda rng, dt: (_f(rng, (N, 3, 3), dt), _f(rng, (N, 3), dt)),
        lambda m, v: (np.einsum("nij,nj->ni", m, v) + np.einsum("nji,nj->ni", m, np.einsum("nij,nj->ni", m, v)),),
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "multi_output",
        interop.op(multi_kernel, outputs=2),
        lambda rng, dt: (_f(rng, N, dt),),
        lambda a: (np.sin(a), a**3),
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "in_out",
        interop.op(inout_kernel, outputs=2, in_out=["acc"]),
        lambda rng, dt: (_f(rng, (3, 4), dt), _f(rng, 3, dt)),
        lambda x, acc: (acc + np.sum(x * x, axis=1), 2.0 * x),
        dtypes=(np.float32,),
        in_out=(1,),
    )
)
_add(
    Case(
        "generic",
        interop.op(generic_kernel),
        lambda rng, dt: (_f(rng, N, dt), 2.5),
        lambda a, s: (a * a * s,),
    )
)
_add(
    Case(
        "function",
        interop.op(function_op_fn),
        lambda rng, dt: (_f(rng, N, dt), _f(rng, N, dt)),
        lambda a, b: (a * a * 3.0 + b,),
        dtypes=(np.float32,),
    )
)

CASE_IDS = [c.id for c in CASES]


def case(id: str) -> Case:
    return next(c for c in CASES if c.id == id)


def loss_weights(case: Case, outs: tuple, seed: int = 1) -> list[np.ndarray]:
    """Fixed random weights w_k so the scalar loss is sum_k sum(w_k * out_k)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, size=np.shape(o)).astype(np.float64) for o in outs]


def fd_grad(case: Case, args: tuple, weights: list[np.ndarray], eps: float = 1e-6) -> list[np.ndarray | None]:
    """Central finite differences (float64) of sum_k sum(w_k * ref_k) w.r.t. every float array argument."""
    args64 = [np.asarray(a, np.float64) if isinstance(a, np.ndarray) else a for a in args]

    def loss(av):
        outs = case.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in av])
        return float(sum(np.sum(w * o) for w, o in zip(weights, outs)))

    grads: list[np.ndarray | None] = []
    for a in args64:
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            grads.append(None)
            continue
        g = np.zeros_like(a)
        flat = a.reshape(-1)
        gf = g.reshape(-1)
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + eps
            lp = loss(args64)
            flat[j] = old - eps
            lm = loss(args64)
            flat[j] = old
            gf[j] = (lp - lm) / (2 * eps)
        grads.append(g)
    return grads


# ---- kernels the property tests draw from (tests/test_properties.py) -------------------------
# Each in its own Warp module with every overload declared up front: the module builds once (and
# is cached), whatever order the generated cases reach the types in.
PROPERTY_SCALARS = (
    wp.bool, wp.int8, wp.uint8, wp.int16, wp.uint16, wp.int32, wp.uint32, wp.int64, wp.uint64,
    wp.float16, wp.float32, wp.float64,
)  # fmt: skip
PROPERTY_INNER = {(3,): wp.vec3f, (2, 2): wp.mat22f, (3, 3): wp.mat33d}  # vec/mat inner shapes (copy)


@wp.kernel(module="unique")
def copy_kernel(a: wp.array(dtype=typing.Any), out: wp.array(dtype=typing.Any)):
    """Generic copy: every Warp scalar type (bool, float16, every int width), vec and mat."""
    i = wp.tid()
    out[i] = a[i]


for _t in PROPERTY_SCALARS + tuple(PROPERTY_INNER.values()):
    wp.overload(copy_kernel, {"a": wp.array(dtype=_t), "out": wp.array(dtype=_t)})


@wp.kernel(module="unique")
def affine2d_kernel(
    a: wp.array2d(dtype=typing.Any), b: wp.array2d(dtype=typing.Any), s: typing.Any, out: wp.array2d(dtype=typing.Any)
):
    i, j = wp.tid()
    out[i, j] = a[i, j] * s + b[i, j] * b[i, j]


for _t in (wp.float32, wp.float64):
    wp.overload(affine2d_kernel, {"a": wp.array2d(dtype=_t), "b": wp.array2d(dtype=_t), "s": _t,
                                  "out": wp.array2d(dtype=_t)})  # fmt: skip


@wp.kernel(module="unique")
def rowsum_kernel(x: wp.array2d(dtype=float), acc: wp.array(dtype=float)):
    """In-out accumulator: acc[i] += sum_j 3 x[i, j]^2 (read, then updated in place)."""
    i, j = wp.tid()
    wp.atomic_add(acc, i, 3.0 * x[i, j] * x[i, j])


copy_op = interop.op(copy_kernel, name="catalogue::copy")
affine2d_op = interop.op(affine2d_kernel, name="catalogue::affine2d")
rowsum_op = interop.op(rowsum_kernel, in_out=["acc"], name="catalogue::rowsum")
