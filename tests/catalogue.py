"""The conformance catalogue: one set of kernels every adapter runs, against one NumPy reference.

Each :class:`Case` gives an op, a way to make NumPy inputs (float32 or float64), and an
independent NumPy reference of the forward pass. Gradients are checked against central
finite differences of that reference (see :func:`fd_grad`), never against Warp itself.

Adapters' conformance tests convert the NumPy inputs to their framework, call the op,
and compare values (and gradients where ``differentiable``) with the reference.
"""

from __future__ import annotations

import collections
import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

import ml_dtypes
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
def reads_output_kernel(x: wp.array(dtype=float), sq: wp.array(dtype=float), twice: wp.array(dtype=float)):
    # reads an output back: Warp's adjoint reads sq's memory and accumulates into its gradient
    i = wp.tid()
    sq[i] = x[i] * x[i]
    twice[i] = 2.0 * sq[i] + x[i]


@wp.kernel
def reads_output_backward_kernel(
    x: wp.array(dtype=float),
    adj_sq: wp.array(dtype=float),
    adj_twice: wp.array(dtype=float),
    grad_x: wp.array(dtype=float),
):
    # reads_output_kernel's gradient by interop's backward convention: it needs no output value
    i = wp.tid()
    grad_x[i] = adj_sq[i] * 2.0 * x[i] + adj_twice[i] * (4.0 * x[i] + 1.0)


# reads_output_kernel with that hand-written backward: the backward reads no output value
reads_output_hand_written = interop.op(reads_output_kernel, outputs=2, backward=reads_output_backward_kernel)


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
def square_kernel(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * x[i]


@wp.kernel
def _axpy_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * s + b[i]


@wp.kernel
def bfloat16_kernel(
    x: wp.array(dtype=wp.bfloat16), y: wp.array(dtype=wp.bfloat16), s: wp.bfloat16, out: wp.array(dtype=wp.bfloat16)
):
    i = wp.tid()
    out[i] = x[i] * x[i] * s + y[i]


def function_op_fn(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array(dtype=float)):
    """Two launches with an intermediate (allocated with requires_grad so the tape keeps its gradient)."""
    tmp = wp.empty_like(a, requires_grad=True)
    wp.launch(square_kernel, dim=a.shape, inputs=[a], outputs=[tmp], device=a.device)
    wp.launch(_axpy_kernel, dim=a.shape, inputs=[tmp, b, 3.0], outputs=[out], device=tmp.device)


# Warp 1.19 subscript annotations (wp.array[float], wp.array2d[float])
@wp.kernel
def subscript_kernel(x: wp.array2d[float], w: wp.array[float], out: wp.array2d[float]):
    i, j = wp.tid()
    out[i, j] = wp.sin(x[i, j]) * w[j]


# an overload table, as libraries ship them: one generic kernel, concrete instances per dtype
@wp.kernel
def _overloaded_kernel(a: wp.array(dtype=typing.Any), s: typing.Any, out: wp.array(dtype=typing.Any)):
    i = wp.tid()
    out[i] = a[i] * a[i] * a[i] + s * a[i]


OVERLOADS = {
    np.float32: wp.overload(_overloaded_kernel, [wp.array(dtype=wp.float32), wp.float32, wp.array(dtype=wp.float32)]),
    np.float64: _overloaded_kernel.add_overload([wp.array(dtype=wp.float64), wp.float64, wp.array(dtype=wp.float64)]),
}


# outputs in the middle of the signature, an in-out after them and scalars last (nvalchemiops'
# segmented sum has this shape)
NSEG = 3


@wp.kernel
def outputs_middle_kernel(
    x: wp.array[float],
    idx: wp.array[wp.int32],
    seg: wp.array[float],
    y: wp.array[float],
    prod: wp.array[float],
    acc: wp.array[float],
    s: float,
    n: int,
):
    i = wp.tid()
    if i < n:
        wp.atomic_add(seg, idx[i], s * x[i] * x[i])
        prod[i] = x[i] * y[i]
        wp.atomic_add(acc, i, wp.sin(y[i]))


# an in-out array before a pure input
@wp.kernel
def inout_first_kernel(acc: wp.array[float], x: wp.array[float], out: wp.array[float]):
    i = wp.tid()
    wp.atomic_add(acc, i, x[i] * x[i])
    out[i] = 3.0 * x[i]


# a tile kernel: one block per row, wp.tile_load / wp.tile_sum / wp.tile_store
TILE = 8
TILE_BLOCK = 16


@wp.kernel
def tile_kernel(x: wp.array2d[float], out: wp.array[float]):
    i, _lane = wp.tid()
    t = wp.tile_load(x[i], shape=TILE)
    wp.tile_store(out, wp.tile_sum(wp.tile_map(wp.mul, t, t)), offset=i)


@wp.kernel
def tile_row_sum_kernel(x: wp.array2d[float], out: wp.array[float]):
    # the single-index form: i is the block's index along the grid (wp.launch_tiled)
    i = wp.tid()
    wp.tile_store(out, wp.tile_sum(wp.tile_load(x[i], shape=TILE)), offset=i)


# a wp.launch-form tile kernel, as Warp's n-body example (examples/tile/example_tile_nbody.py): the
# thread index i indexes x, and every thread reads all of x through tiles loaded at offsets of a loop
# counter; Warp launches it wp.launch(kernel, dim=len(x), block_dim=b) (whole blocks only)
TILE_BODIES = wp.constant(8)


@wp.kernel
def tile_threads_kernel(x: wp.array[float], out: wp.array[float]):
    i = wp.tid()
    xi = x[i]
    acc = float(0.0)  # noqa: UP018 (a dynamic variable in Warp: a bare literal is a constant the loop cannot mutate)
    for k in range(x.shape[0] / TILE_BODIES):
        t = wp.tile_load(x, shape=TILE_BODIES, offset=k * TILE_BODIES)
        for j in range(TILE_BODIES):
            d = xi - t[j]
            acc += d * d * xi
    out[i] = acc


# a tile_matmul kernel as Warp's test_tile_matmul.py GEMM: C[i-th row block, j-th column block] =
# A's row block @ B's column block, one block per tile of C, accumulated over K in TMM_K steps
TMM_M = wp.constant(4)
TMM_N = wp.constant(2)
TMM_K = wp.constant(4)


@wp.kernel
def tile_matmul_kernel(A: wp.array2d(dtype=typing.Any), B: wp.array2d(dtype=typing.Any),
                       C: wp.array2d(dtype=typing.Any)):  # fmt: skip
    i, j = wp.tid()
    acc = wp.tile_zeros(shape=(TMM_M, TMM_N), dtype=A.dtype)
    for k in range(A.shape[1] / TMM_K):
        a = wp.tile_load(A, shape=(TMM_M, TMM_K), offset=(i * TMM_M, k * TMM_K))
        b = wp.tile_load(B, shape=(TMM_K, TMM_N), offset=(k * TMM_K, j * TMM_N))
        wp.tile_matmul(a, b, acc)
    wp.tile_store(C, acc, offset=(i * TMM_M, j * TMM_N))


# ---- float64 twins (gradcheck and finite differences in float64) and other shared kernels ----------
@wp.kernel
def vec3d_kernel(a: wp.array(dtype=wp.vec3d), b: wp.array(dtype=wp.vec3d), out: wp.array(dtype=wp.vec3d)):
    # vec3_kernel in float64
    i = wp.tid()
    out[i] = wp.cross(a[i], b[i]) + a[i] * wp.dot(a[i], b[i])


@wp.kernel
def mat33d_kernel(m: wp.array(dtype=wp.mat33d), v: wp.array(dtype=wp.vec3d), out: wp.array(dtype=wp.vec3d)):
    # mat33_kernel in float64
    i = wp.tid()
    out[i] = m[i] * v[i] + wp.transpose(m[i]) * (m[i] * v[i])


@wp.kernel
def multi64_kernel(a: wp.array(dtype=wp.float64), c: wp.array(dtype=wp.float64), d: wp.array(dtype=wp.float64)):
    # multi_kernel in float64: c = sin(a), d = a^3
    i = wp.tid()
    c[i] = wp.sin(a[i])
    d[i] = a[i] * a[i] * a[i]


@wp.kernel
def inout64_kernel(x: wp.array2d(dtype=wp.float64), acc: wp.array(dtype=wp.float64), sq: wp.array2d(dtype=wp.float64)):
    # inout_kernel in float64: acc += row sums of x^2 (in-out), sq = 2 x
    i, j = wp.tid()
    wp.atomic_add(acc, i, x[i, j] * x[i, j])
    sq[i, j] = wp.float64(2.0) * x[i, j]


@wp.kernel
def cube64(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = x[i] * x[i] * x[i]


@wp.kernel
def cube64_backward(
    x: wp.array(dtype=wp.float64), adj_out: wp.array(dtype=wp.float64), grad_x: wp.array(dtype=wp.float64)
):
    # cube64's gradient by interop's backward convention (inputs, adjoints, gradients): 3 x^2 adj
    i = wp.tid()
    grad_x[i] = wp.float64(3.0) * x[i] * x[i] * adj_out[i]


@wp.kernel
def _square64_kernel(a: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = a[i] * a[i]


@wp.kernel
def _axpy64_kernel(a: wp.array(dtype=wp.float64), b: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = a[i] * wp.float64(3.0) + wp.exp(b[i])


def function64_fn(a: wp.array(dtype=wp.float64), b: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    """out = 3 a^2 + exp(b) in two launches through a temporary that keeps its gradient."""
    tmp = wp.empty_like(a, requires_grad=True)
    wp.launch(_square64_kernel, dim=a.shape, inputs=[a], outputs=[tmp], device=a.device)
    wp.launch(_axpy64_kernel, dim=a.shape, inputs=[tmp, b], outputs=[out], device=tmp.device)


@wp.kernel
def square_axpy_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    # out = a x^2 + y: a non-linear saxpy (gradients depend on x)
    i = wp.tid()
    out[i] = a * x[i] * x[i] + y[i]


@wp.kernel
def norm3_kernel(v: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = wp.length(v[i])


@wp.kernel
def vscale_kernel(v: wp.array(dtype=wp.vec3), s: float, out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = v[i] * s


# ---- indexing patterns (the extent rule, see interop/_extent.py) ------------------------
# Indexed directly by the thread index: the extent check applies to these arrays.
@wp.kernel
def scale_kernel(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * s


@wp.kernel
def transpose_kernel(a: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[j, i] = a[i, j]


@wp.kernel
def reverse_accumulate_kernel(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    # reads x at another index than the one it accumulates into: a race where x is acc
    i = wp.tid()
    wp.atomic_add(acc, i, 10.0 * x[x.shape[0] - 1 - i])


@wp.kernel
def atomic_kernel(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(acc, i, 2.0 * x[i])


# Indexed any other way: the code proves nothing, the check must stay silent.
@wp.kernel
def shifted_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    if i + 1 < a.shape[0]:
        out[i] = a[i + 1]


@wp.kernel
def gather_kernel(a: wp.array(dtype=float), idx: wp.array(dtype=wp.int32), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[idx[i]]


@wp.kernel
def funky_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):
    i = wp.tid()
    # writes the first len(b) and len(c) elements, one per thread, wherever they exist
    if i < b.shape[0]:
        b[i] = a[i % a.shape[0]] + 1.0
    if i < c.shape[0]:
        c[i] = 2.0 * a[i % a.shape[0]]


@wp.kernel
def guarded_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    if i >= a.shape[0]:
        return
    out[i] = a[i]


@wp.kernel
def loop_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    total = wp.float32(0.0)
    for k in range(a.shape[0]):
        total += a[k]
    out[i] = total


@wp.kernel
def reassigned_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = 1.0
    i = i % a.shape[0]
    out[0] = a[i]


# ---- hostile-input kernels (tests/test_hostile_inputs.py) -----------------------------------
@wp.kernel
def int_offset_kernel(a: wp.array(dtype=wp.int32), s: wp.int32, out: wp.array(dtype=wp.int32)):
    i = wp.tid()
    out[i] = a[i] + s


@wp.kernel
def vec_offset_kernel(a: wp.array(dtype=wp.vec3), v: wp.vec3, out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = a[i] + v


@wp.kernel
def vec_shift_kernel(a: wp.array(dtype=wp.vec3), g: wp.vec3, s: float, y: wp.array(dtype=wp.vec3)):
    # a gravity-like vector used nonlinearly: its sign of zero (wp.sign) and components reach the values
    i = wp.tid()
    y[i] = a[i] * s + g + wp.vec3(g[0] * a[i][1], 0.0, wp.sign(g[2]))


def function_scale_fn(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    """A Python-function op with a scalar: one launch of scale_kernel."""
    wp.launch(scale_kernel, dim=a.shape, inputs=[a, s], outputs=[out], device=a.device)


@wp.kernel
def square_backward_kernel(x: wp.array(dtype=float), adj_out: wp.array(dtype=float), grad_x: wp.array(dtype=float)):
    # square_kernel's gradient by interop's backward convention (inputs, adjoints, gradients)
    i = wp.tid()
    grad_x[i] = 2.0 * x[i] * adj_out[i]


def square_backward_fn(a: wp.array(dtype=float), adj_out: wp.array(dtype=float), grad_a: wp.array(dtype=float)):
    """A hand-written backward of square_kernel that is itself a Python-function op."""
    wp.launch(square_backward_kernel, dim=a.shape, inputs=[a, adj_out], outputs=[grad_a], device=a.device)


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
        "reads_output",
        interop.op(reads_output_kernel, outputs=2),
        lambda rng, dt: (_f(rng, N, dt),),
        lambda x: (x * x, 2.0 * x * x + x),
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
        dtypes=(np.float32, np.float64, ml_dtypes.bfloat16),  # generic kernels resolve to bfloat16 too
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

_add(
    Case(
        "subscript",
        interop.op(subscript_kernel),
        lambda rng, dt: (_f(rng, (3, 5), dt), _f(rng, 5, dt)),
        lambda x, w: (np.sin(x) * w,),
        dtypes=(np.float32,),
    )
)
for _dt, _inst in OVERLOADS.items():
    _add(
        Case(
            f"overload_{np.dtype(_dt).name}",
            interop.op(_inst),
            lambda rng, dt: (_f(rng, N, dt), 0.5),
            lambda a, s: (a**3 + s * a,),
            dtypes=(_dt,),
        )
    )
_add(
    Case(
        "outputs_middle",
        interop.op(outputs_middle_kernel, outputs=["seg", "prod"], in_out=["acc"], output_dims={"seg": NSEG}),
        lambda rng, dt: (
            _f(rng, N, dt),
            (np.arange(N) % NSEG).astype(np.int32),
            _f(rng, N, dt),
            _f(rng, N, dt),
            1.5,
            N,
        ),
        lambda x, idx, y, acc, s, n: (
            np.bincount(idx, weights=s * x * x, minlength=NSEG).astype(x.dtype),
            x * y,
            acc + np.sin(y),
        ),
        dtypes=(np.float32,),
        in_out=(3,),
    )
)
_add(
    Case(
        "in_out_first",
        interop.op(inout_first_kernel, in_out=["acc"]),
        lambda rng, dt: (_f(rng, N, dt), _f(rng, N, dt)),
        lambda acc, x: (acc + x * x, 3.0 * x),
        dtypes=(np.float32,),
        in_out=(0,),
    )
)
_add(
    Case(
        "tile",
        interop.op(tile_kernel, block_dim=TILE_BLOCK, launch_dims=(4, TILE_BLOCK), output_dims=4),
        lambda rng, dt: (_f(rng, (4, TILE), dt),),
        lambda x: (np.sum(x * x, axis=1),),
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "tile_block_dim_per_call",
        interop.op(tile_kernel, output_dims=4),
        lambda rng, dt: (_f(rng, (4, TILE), dt),),
        lambda x: (np.sum(x * x, axis=1),),
        dtypes=(np.float32,),
        call_kwargs={"block_dim": 32, "launch_dims": (4, 32)},
    )
)
_add(
    Case(
        "bfloat16",
        interop.op(bfloat16_kernel),
        lambda rng, dt: (_f(rng, N, dt), _f(rng, N, dt), 1.5),
        lambda x, y, s: (x * x * s + y,),
        dtypes=(ml_dtypes.bfloat16,),
    )
)


# ---- the launch domain a kernel is written for (issue 23, item 4): newton's eval_springs, verbatim.
# One thread per spring: the first array holds particles, read through the spring indices; the
# springs are indexed by the thread index only after the `return` guard. No launch_dims is given.
@wp.kernel
def eval_springs(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    spring_indices: wp.array(dtype=int),
    spring_rest_lengths: wp.array(dtype=float),
    spring_stiffness: wp.array(dtype=float),
    spring_damping: wp.array(dtype=float),
    f: wp.array(dtype=wp.vec3),
):
    tid = wp.tid()

    i = spring_indices[tid * 2 + 0]
    j = spring_indices[tid * 2 + 1]

    if i == -1 or j == -1:
        return

    ke = spring_stiffness[tid]
    kd = spring_damping[tid]
    rest = spring_rest_lengths[tid]

    xi = x[i]
    xj = x[j]

    vi = v[i]
    vj = v[j]

    xij = xi - xj
    vij = vi - vj

    l = wp.length(xij)  # noqa: E741  (newton's code, verbatim)
    l_inv = 1.0 / l

    # normalized spring direction
    dir = xij * l_inv

    c = l - rest
    dcdt = wp.dot(dir, vij)

    # damping based on relative velocity
    fs = dir * (ke * c + kd * dcdt)

    wp.atomic_sub(f, i, fs)
    wp.atomic_add(f, j, fs)


SPRING_PARTICLES, SPRINGS = 5, 9  # more springs than particles: the first array's shape is the wrong launch


def spring_args(rng, dt):
    """Particles on a jittered line (no two coincide), springs between distinct particles, one disabled."""
    x = np.arange(SPRING_PARTICLES)[:, None] * np.array([1.0, 0.5, 0.25]) + _f(rng, (SPRING_PARTICLES, 3), dt) * 0.1
    pairs = [rng.choice(SPRING_PARTICLES, 2, replace=False) for _ in range(SPRINGS)]
    idx = np.array(pairs, np.int32).reshape(-1)
    idx[2 * 3] = -1  # spring 3 is disabled: its thread returns early
    return (
        x.astype(dt),
        _f(rng, (SPRING_PARTICLES, 3), dt),
        idx,
        rng.uniform(0.5, 1.0, SPRINGS).astype(dt),
        rng.uniform(1.0, 2.0, SPRINGS).astype(dt),
        rng.uniform(0.1, 0.2, SPRINGS).astype(dt),
        _f(rng, (SPRING_PARTICLES, 3), dt),
    )


def springs_reference(x, v, idx, rest, ke, kd, f):
    f = np.array(f, copy=True)
    for t in range(len(rest)):
        i, j = idx[2 * t], idx[2 * t + 1]
        if i == -1 or j == -1:
            continue
        xij, vij = x[i] - x[j], v[i] - v[j]
        length = np.sqrt(np.sum(xij * xij))
        d = xij / length
        fs = d * (ke[t] * (length - rest[t]) + kd[t] * np.dot(d, vij))
        f[i] -= fs
        f[j] += fs
    return (f,)


_add(
    Case(
        "springs",
        interop.op(eval_springs, in_out=["f"], outputs=0),
        spring_args,
        springs_reference,
        dtypes=(np.float32,),
        in_out=(6,),
    )
)


# ---- a generic output of another dtype than the first generic input's (issue 23, item 2): generic
# positions holding vec3, generic scalar energies, as nvalchemiops declares them
@wp.kernel
def generic_energies_kernel(positions: wp.array(dtype=typing.Any), k: typing.Any, energies: wp.array(dtype=typing.Any)):
    i = wp.tid()
    r = positions[i]
    energies[i] = k * wp.dot(r, r)


_add(
    Case(
        "generic_energies",
        interop.op(generic_energies_kernel, output_dtypes={"energies": interop.scalar_of("positions")}),
        lambda rng, dt: (_f(rng, (N, 3), dt), 1.5),
        lambda x, k: (k * np.sum(x * x, axis=-1),),
    )
)


# ---- a hand-written backward shipped with its own parameter order (issue 23, item 3), shaped like
# physicsnemo's grid derivatives: the forward computes 3 derivative grids of a periodic field; the
# backward takes (grad0, grad1, grad2, inv_dx0, inv_dx1, inv_dx2, grad_field)
@wp.kernel
def central_diff_3d_fwd(
    field: wp.array3d(dtype=float),
    inv_dx0: float,
    inv_dx1: float,
    inv_dx2: float,
    grad0: wp.array3d(dtype=float),
    grad1: wp.array3d(dtype=float),
    grad2: wp.array3d(dtype=float),
):
    i, j, k = wp.tid()
    n0, n1, n2 = field.shape[0], field.shape[1], field.shape[2]
    grad0[i, j, k] = (field[(i + 1) % n0, j, k] - field[(i - 1 + n0) % n0, j, k]) * (0.5 * inv_dx0)
    grad1[i, j, k] = (field[i, (j + 1) % n1, k] - field[i, (j - 1 + n1) % n1, k]) * (0.5 * inv_dx1)
    grad2[i, j, k] = (field[i, j, (k + 1) % n2] - field[i, j, (k - 1 + n2) % n2]) * (0.5 * inv_dx2)


@wp.kernel
def central_diff_3d_bwd(
    grad0: wp.array3d(dtype=float),
    grad1: wp.array3d(dtype=float),
    grad2: wp.array3d(dtype=float),
    inv_dx0: float,
    inv_dx1: float,
    inv_dx2: float,
    grad_field: wp.array3d(dtype=float),
):
    i, j, k = wp.tid()
    n0, n1, n2 = grad_field.shape[0], grad_field.shape[1], grad_field.shape[2]
    grad_field[i, j, k] = (
        (grad0[(i - 1 + n0) % n0, j, k] - grad0[(i + 1) % n0, j, k]) * (0.5 * inv_dx0)
        + (grad1[i, (j - 1 + n1) % n1, k] - grad1[i, (j + 1) % n1, k]) * (0.5 * inv_dx1)
        + (grad2[i, j, (k - 1 + n2) % n2] - grad2[i, j, (k + 1) % n2]) * (0.5 * inv_dx2)
    )


SHIPPED_BACKWARD = interop.backward(central_diff_3d_bwd, grad0="adj_grad0", grad1="adj_grad1", grad2="adj_grad2")


def _central_diff_reference(f, a, b, c):
    return tuple((np.roll(f, -1, axis=d) - np.roll(f, 1, axis=d)) * (0.5 * s) for d, s in enumerate((a, b, c)))


_add(
    Case(
        "shipped_backward",
        interop.op(central_diff_3d_fwd, outputs=3, backward=SHIPPED_BACKWARD),
        lambda rng, dt: (_f(rng, (3, 4, 5), dt), 2.0, 0.5, 4.0),
        _central_diff_reference,
        dtypes=(np.float32,),
    )
)


# ---- struct parameters (issue 23): the cases' arguments are the structs' leaves, in the op's
# call order; StructCall packs them into each kind of structure a caller passes and takes the
# returned structures apart again, so every framework test runs them unchanged
@wp.struct
class StepState:
    x: wp.array(dtype=wp.vec3)
    v: wp.array(dtype=wp.vec3)


@wp.struct
class StepModel:
    dt: float
    m: wp.array(dtype=float)


@wp.kernel
def struct_step_kernel(state_in: StepState, state_out: StepState, model: StepModel):
    # Warp's own kernel_step (warp/tests/test_struct.py), gravity along -z
    i = wp.tid()
    state_out.v[i] = state_in.v[i] + wp.vec3(0.0, 0.0, -9.8) / model.m[i] * model.dt
    state_out.x[i] = state_in.x[i] + state_out.v[i] * model.dt


@wp.struct
class InnerFields:
    a: wp.array(dtype=float)
    s: float


@wp.struct
class OuterFields:
    inner: InnerFields
    b: wp.array(dtype=float)


@wp.func
def inner_value(f: InnerFields, i: int):
    return f.a[i] * f.a[i] * f.s


@wp.kernel
def struct_nested_kernel(o: OuterFields, out: wp.array(dtype=float)):
    # a nested struct, read through its fields and passed whole to a wp.func
    i = wp.tid()
    out[i] = inner_value(o.inner, i) + wp.sin(o.b[i])


@wp.struct
class Accumulator:
    total: wp.array(dtype=float)
    weight: float


@wp.kernel
def struct_in_out_kernel(x: wp.array2d(dtype=float), acc: Accumulator, sq: wp.array2d(dtype=float)):
    i, j = wp.tid()
    wp.atomic_add(acc.total, i, acc.weight * x[i, j] * x[i, j])
    sq[i, j] = 2.0 * x[i, j]


class StructCall:
    """``op`` called with its leaves: packs them into structures (``kind``: ``"dict"``,
    ``"dataclass"``, ``"namedtuple"``, ``"pytree"`` (a dataclass registered as a JAX pytree),
    ``"warp"`` (Warp struct instances: the array leaves must be Warp arrays)), calls the op, and
    returns the returned leaves in the op's order. Attributes are the op's (``description``,
    ``plan``...)."""

    def __init__(self, op: interop.Op, kind: str):
        self.op = op
        self.kind = kind
        self.classes: dict[str, Any] = {}  # by struct path, made here (torch.compile traces calls)
        from interop._structs import Node

        def classes(node):
            names = [c.field for c in node.children]
            if kind in ("dataclass", "pytree"):
                self.classes[node.path] = dataclasses.make_dataclass(node.name, names)
                if kind == "pytree":
                    import jax

                    jax.tree_util.register_dataclass(self.classes[node.path], data_fields=names, meta_fields=[])
            elif kind == "warp":
                self.classes[node.path] = node.struct
            elif kind == "namedtuple":
                self.classes[node.path] = collections.namedtuple(node.name, names)
            for c in node.children:
                if isinstance(c, Node):
                    classes(c)

        for e in op.description.entries:
            if isinstance(e, Node):
                classes(e)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.op, name)

    def _make(self, node, leaves: dict) -> Any:
        from interop._structs import Node

        values = {}
        for c in node.children:
            if isinstance(c, Node):
                values[c.field] = self._make(c, leaves)
            else:
                values[c.field] = leaves[c.param]
        if self.kind == "dict":
            return values
        if self.kind == "warp":  # a Warp struct instance: its fields are set one by one
            inst = self.classes[node.path]()
            for k, v in values.items():
                setattr(inst, k, v)
            return inst
        return self.classes[node.path](**values)

    def pack(self, *args: Any) -> tuple:
        from interop._structs import Node

        d = self.op.description
        leaves = dict(zip((p.name for p in d.call_params), args))
        out = []
        for e, called in zip(d.entries, d.entry_called):
            if called:
                out.append(self._make(e, leaves) if isinstance(e, Node) else leaves[e])
        return tuple(out)

    def unpack(self, result: Any) -> Any:
        from interop._structs import Node

        d = self.op.description
        returned = [e for e, r in zip(d.entries, d.entry_returned) if r]
        result = result if len(returned) > 1 else (result,)
        flat = {}

        def take(node, value):
            for c in node.children:
                v = value[c.field] if isinstance(value, dict) else getattr(value, c.field)
                if isinstance(c, Node):
                    take(c, v)
                else:
                    flat[c.param] = v

        for e, r in zip(returned, result):
            if isinstance(e, Node):
                take(e, r)
            else:
                flat[e] = r
        out = tuple(flat[p.name] for p in d.returned_params)
        return out if len(out) > 1 else out[0]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.unpack(self.op(*self.pack(*args), **kwargs))


def _step_reference(x, v, dt, m):
    v_out = v + np.array([0.0, 0.0, -9.8], v.dtype) / m[:, None] * dt
    return (x + v_out * dt, v_out)


for _kind in ("dict", "dataclass", "namedtuple"):
    _add(
        Case(
            f"struct_of_arrays_{_kind}",
            StructCall(interop.op(struct_step_kernel, outputs=["state_out"]), _kind),
            lambda rng, dt: (_f(rng, (N, 3), dt), _f(rng, (N, 3), dt), 0.1, rng.uniform(1.0, 2.0, N).astype(dt)),
            _step_reference,
            dtypes=(np.float32,),
        )
    )
_add(
    Case(
        "struct_nested",
        StructCall(interop.op(struct_nested_kernel), "dict"),
        lambda rng, dt: (_f(rng, N, dt), 1.5, _f(rng, N, dt)),
        lambda a, s, b: (a * a * s + np.sin(b),),
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "struct_in_out",
        StructCall(interop.op(struct_in_out_kernel, outputs=["acc", "sq"], in_out=["acc"]), "dataclass"),
        lambda rng, dt: (_f(rng, (3, 4), dt), _f(rng, 3, dt), 0.5),
        lambda x, total, w: (total + w * np.sum(x * x, axis=1), 2.0 * x),
        dtypes=(np.float32,),
        in_out=(1,),
    )
)

CASE_IDS = [c.id for c in CASES]

# ---- bfloat16 -------------------------------------------------------------------------------
# NumPy has no bfloat16: ml_dtypes.bfloat16 stands for it (as in JAX). bfloat16 keeps 8 bits of
# mantissa (relative step 2**-8 = 0.4%) and Warp rounds after each operation: the tolerances
# allow a few such steps on values of order 1. References are computed in float64 from the
# (exactly representable) bfloat16 inputs.
BF16 = np.dtype(ml_dtypes.bfloat16)
BF16_VALUE_TOL = dict(rtol=2e-2, atol=2e-2)
BF16_GRAD_TOL = dict(rtol=5e-2, atol=5e-2)


def is_bf16(dt) -> bool:
    return np.dtype(dt) == BF16


def to_torch(a: np.ndarray):
    """A torch tensor of a NumPy argument (a copy; bfloat16 through float32, exact for its values)."""
    import torch

    if is_bf16(a.dtype):
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a.copy())


def to_fw(fw: str, a, warp_dtype=None, requires_grad: bool = False, device: str = "cpu"):
    """A copy of NumPy array ``a`` as a ``fw`` array ("numpy", "warp", "torch", "jax", "paddle",
    "cupy") on ``device`` ("cpu" or "cuda"), made by the framework itself, not by interop.
    ``warp_dtype`` packs trailing dims (wp.vec3 ...) for Warp; ``requires_grad`` makes a torch or
    paddle leaf that records gradients. On "cuda", skips the test where ``fw`` has no CUDA build."""
    from _cuda import require_cuda

    require_cuda(fw, device)
    if fw == "cupy" and device == "cpu":
        import pytest

        pytest.skip("CuPy arrays live on CUDA devices")
    a = np.array(a, order="C")  # a copy: in-place tests must not write the caller's array
    if fw == "numpy":
        return a
    if fw == "warp":
        return wp.array(a, dtype=warp_dtype or wp.dtype_from_numpy(a.dtype), device=device)
    if fw == "torch":
        import torch

        return torch.tensor(a, requires_grad=requires_grad, device=device)
    if fw == "jax":
        import jax
        import jax.numpy as jnp

        # (not tests/_devices.py's jax_device: this module is also imported as tests.catalogue)
        platform, _, index = device.partition(":")
        return jnp.asarray(a, device=jax.devices("cpu" if platform == "cpu" else "gpu")[int(index or 0)])
    if fw == "paddle":
        import paddle

        t = paddle.to_tensor(a, place=paddle.CPUPlace() if device == "cpu" else paddle.CUDAPlace(0))
        t.stop_gradient = not requires_grad
        return t
    if fw == "cupy":
        import cupy

        return cupy.asarray(a)
    raise ValueError(f"unknown framework {fw!r}")


def to_np(x) -> np.ndarray:
    """A NumPy array of any framework's array (torch and paddle through detach().cpu())."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, wp.array):
        return x.numpy()
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if type(x).__module__.split(".", 1)[0] == "cupy":
        return x.get()
    return np.asarray(x)


def to_paddle(a, stop_gradient: bool = True, device: str = "cpu"):
    """A Paddle tensor of NumPy array ``a`` on ``device`` (bfloat16 too: paddle.to_tensor knows no
    ml_dtypes.bfloat16, and float32 holds its values exactly)."""
    import paddle

    place = paddle.CPUPlace() if device == "cpu" else paddle.CUDAPlace(0)
    if is_bf16(a.dtype):
        t = paddle.to_tensor(np.asarray(a, np.float32), place=place).astype("bfloat16")
    else:
        t = paddle.to_tensor(np.array(a), place=place)
    t.stop_gradient = stop_gradient
    return t


def paddle_to_numpy(t) -> np.ndarray:
    """The values of a Paddle tensor (its .numpy() of a bfloat16 tensor gives the raw uint16 bits)."""
    import paddle

    return t.astype("float64").numpy() if t.dtype == paddle.bfloat16 else t.numpy()


def to_torch_args(case: Case, args: tuple, grad: bool, device: str = "cpu") -> list:
    """A case's NumPy call arguments as torch tensors on ``device`` (scalars unchanged); with
    ``grad``, the float arrays that are not in-out require grad."""
    out = []
    for k, a in enumerate(args):
        if isinstance(a, np.ndarray):
            t = to_torch(a).to(device)
            if grad and t.is_floating_point() and k not in case.in_out:
                t.requires_grad_(True)
            out.append(t)
        else:
            out.append(a)
    return out


def is_float_dtype(dt) -> bool:
    """A floating dtype, bfloat16 included (its NumPy kind is 'V', not 'f')."""
    return np.dtype(dt).kind == "f" or np.dtype(dt) == BF16


def reference_of(case: Case, args: tuple) -> tuple:
    """The NumPy reference on copies of ``args`` (bfloat16 inputs upcast to float64 first)."""
    return case.reference(
        *[(a.astype(np.float64) if a.dtype == BF16 else a.copy()) if isinstance(a, np.ndarray) else a for a in args]
    )


def case(id: str) -> Case:
    return next(c for c in CASES if c.id == id)


def loss_weights(case: Case, outs: tuple, seed: int = 1) -> list[np.ndarray]:
    """Fixed random weights w_k so the scalar loss is sum_k sum(w_k * out_k)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, size=np.shape(o)).astype(np.float64) for o in outs]


def fd_grad(case: Case, args: tuple, weights: list[np.ndarray], eps: float = 1e-6) -> list[np.ndarray | None]:
    """Central finite differences (float64) of sum_k sum(w_k * ref_k) w.r.t. every float array argument."""
    args64 = [np.asarray(a, np.float64) if isinstance(a, np.ndarray) and is_float_dtype(a.dtype) else a for a in args]

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


@wp.kernel
def scale64_kernel(a: wp.array(dtype=float), s: wp.float64, out: wp.array(dtype=float)):
    # a float64 scalar with float32 arrays (JAX: with x64 on and off)
    i = wp.tid()
    out[i] = a[i] * wp.float32(s)


# ---- ops the generated calls and sequences draw from (tests/property_calls.py) ----------------------
@dataclass(frozen=True)
class PropertyOp:
    """An op with what a generator needs to call it at any size and Warp to check it.

    ``roles`` gives each kernel parameter's role ("in", "io", "out", "scalar"); array arguments (the
    "in" and "io" parameters, in call order) have the shapes ``shapes(n, m)``; the default launch is
    ``launch(n, m)`` and an output's shape is ``out_shape(launch)``. Scalars enter the kernels linearly
    (the reference's scalar gradient is F(1) - F(0))."""

    id: str
    op: interop.Op
    fn: Any  # the wp.kernel, or the Python function of a function op
    roles: tuple
    shapes: Callable
    launch: Callable
    out_shape: Callable = lambda launch: tuple(launch)
    dtypes: tuple = (np.float32,)
    launch_override: bool = True  # launch_dims may be passed per call (smaller than the arrays)
    row_independent: bool = True  # thread i touches row i only (JAX vmap_method="fold" is valid)
    scalar_dtype: Any = None  # the scalar parameter's type (None: the arrays' dtype)
    ranges: tuple = ()  # per array argument: (low, high) of its values (default (-1, 1))
    scalar_degree: int = 1  # the outputs are polynomials of this degree (1 or 2) in the scalar
    # a tile kernel's threads per block: the reference launches it as wp.launch_tiled(fn, dim=launch,
    # block_dim=...) does, ``launch`` being the tile grid (docs/contract.md, "Devices")
    block_dim: int | None = None
    # the launch is not read from the arrays (a tile grid Warp's users pass to wp.launch_tiled) and the
    # outputs are not shaped like it: each call passes launch_dims and output_dims=out_shape(launch)
    explicit_dims: bool = False

    @property
    def tile_launch(self) -> str | None:
        """How Warp launches this tile kernel: "threads" (``wp.launch(dim, block_dim)``, the thread
        index indexes the arrays) or "tiled" (``wp.launch_tiled``); None for a plain kernel."""
        if self.block_dim is None:
            return None
        return "threads" if self.op.description.tile_form[0] == "threads" else "tiled"

    @property
    def kind(self) -> str:
        return "kernel" if isinstance(self.fn, wp.Kernel) else "function"

    @property
    def array_ndims(self) -> tuple:
        return tuple(len(s) for s in self.shapes(2, 3))

    def array_shapes(self, n: int, m: int) -> tuple:
        return self.shapes(n, m)

    @property
    def in_out(self) -> tuple:
        """Indices (among the array arguments) of the in-out arrays."""
        arrays = [r for r in self.roles if r in ("in", "io")]
        return tuple(k for k, r in enumerate(arrays) if r == "io")

    @property
    def has_scalar(self) -> bool:
        return "scalar" in self.roles

    def call_args(self, arrays: list, s: Any) -> list:
        it = iter(arrays)
        return [s if r == "scalar" else next(it) for r in self.roles if r != "out"]

    def value_range(self, k: int) -> tuple:
        return self.ranges[k] if k < len(self.ranges) and self.ranges[k] else (-1.0, 1.0)

    # struct kernels: ``roles`` are those of the flat kernel's parameters (each struct's leaves in
    # place of the struct, in field order), the op is called with the leaves packed into structures
    # (StructCall) and the reference launches ``fn`` on Warp struct instances (kernel_args)
    @property
    def structs(self) -> bool:
        return bool(self.op.description.entries)

    def param_types(self) -> list:
        """The Warp type of each of the flat kernel's parameters (None for a Python function)."""
        if not isinstance(self.fn, wp.Kernel):
            return [None] * len(self.roles)
        from interop._structs import _is_struct, _leaf_types

        out: dict[str, Any] = {}
        for a in self.fn.adj.args:
            if _is_struct(a.type):
                _leaf_types(a.type, (a.label,), out)
            else:
                out[a.label] = a.type
        return list(out.values())

    def inner_ndims(self) -> tuple:
        """Per array argument: its trailing dims that are the components of one vec/mat element."""
        types = [t for t, r in zip(self.param_types(), self.roles) if r in ("in", "io")]
        return tuple(len(getattr(getattr(t, "dtype", None), "_shape_", ())) for t in types)

    def kernel_args(self, flat: list) -> list:
        """The kernel's arguments from the flat kernel's: each struct's leaves set on a Warp struct
        instance (nested ones nested), as ``wp.launch`` takes them."""
        if not self.structs:
            return list(flat)
        from interop._structs import Node

        leaves = iter(flat)

        def make(node):
            inst = node.struct()
            for c in node.children:
                setattr(inst, c.field, make(c) if isinstance(c, Node) else next(leaves))
            return inst

        return [make(e) if isinstance(e, Node) else next(leaves) for e in self.op.description.entries]


def _rows(n, m):
    return (n, m)


# Python-function ops that hand their input on (a copy, a struct they make): their kept tape needs
# the input's gradient buffer at the forward (tests/test_training.py)
@wp.kernel
def _square_into_kernel(t: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = t[i] * t[i]


def clone_then_square_fn(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    # the function copies its input before launching on the copy (wp.Tape follows the copy)
    t = wp.clone(x)
    wp.launch(_square_into_kernel, dim=x.shape, inputs=[t, out], device=x.device)


@wp.struct
class HoldsArray:
    a: wp.array(dtype=float)


@wp.kernel
def _square_field_kernel(s: HoldsArray, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s.a[i] * s.a[i]


def struct_then_square_fn(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    # the function puts its input into a struct it makes, then launches with the struct
    s = HoldsArray()
    s.a = x
    wp.launch(_square_field_kernel, dim=x.shape, inputs=[s, out], device=x.device)


tile_rows_op = interop.op(tile_kernel, block_dim=TILE_BLOCK, name="catalogue::tile_rows")
tile_threads_op = interop.op(tile_threads_kernel, block_dim=TILE_BODIES, name="catalogue::tile_threads")
tile_matmul_op = interop.op(tile_matmul_kernel, block_dim=TILE_BLOCK, name="catalogue::tile_matmul")


PROPERTY_OPS = [
    PropertyOp("affine2d", affine2d_op, affine2d_kernel, ("in", "in", "scalar", "out"), lambda n, m: ((n, m), (n, m)),
               _rows, dtypes=(np.float32, np.float64)),
    PropertyOp("in_out", case("in_out").op, inout_kernel, ("in", "io", "out"), lambda n, m: ((n, m), (n,)), _rows),
    PropertyOp("rowsum", rowsum_op, rowsum_kernel, ("in", "io"), lambda n, m: ((n, m), (n,)), _rows),
    PropertyOp("scalar", case("scalar").op, scalar_kernel, ("in", "in", "scalar", "out"), lambda n, m: ((n,), (n,)),
               lambda n, m: (n,)),
    PropertyOp("in_out_first", case("in_out_first").op, inout_first_kernel, ("io", "in", "out"),
               lambda n, m: ((n,), (n,)), lambda n, m: (n,)),
    PropertyOp("function", case("function").op, function_op_fn, ("in", "in", "out"), lambda n, m: ((n,), (n,)),
               lambda n, m: (n,), launch_override=False, row_independent=False),
    # a Python-function op with a scalar: a scalar that requires grad is refused at the call (issue 33)
    PropertyOp("function_scale", interop.op(function_scale_fn), function_scale_fn, ("in", "scalar", "out"),
               lambda n, m: ((n,),), lambda n, m: (n,), launch_override=False, row_independent=False),
    PropertyOp("scale64", interop.op(scale64_kernel), scale64_kernel, ("in", "scalar", "out"), lambda n, m: ((n,),),
               lambda n, m: (n,), scalar_dtype=np.float64),
    # struct parameters (issue 23), roles per leaf: a struct of vec3 arrays in, an output struct and
    # a struct of an array and a scalar (quadratic in model.dt; masses kept away from 0)
    PropertyOp("struct_step", interop.op(struct_step_kernel, outputs=["state_out"], name="catalogue::struct_step"),
               struct_step_kernel, ("in", "in", "out", "out", "scalar", "in"), lambda n, m: ((n, 3), (n, 3), (n,)),
               lambda n, m: (n,), out_shape=lambda launch: (*launch, 3), ranges=((), (), (1.0, 2.0)),
               scalar_degree=2),
    # a nested struct passed whole to a wp.func (the flat kernel builds it from its leaves)
    PropertyOp("struct_nested", interop.op(struct_nested_kernel, name="catalogue::struct_nested"),
               struct_nested_kernel, ("in", "scalar", "in", "out"), lambda n, m: ((n,), (n,)), lambda n, m: (n,)),
    # an in-out struct: its array field accumulates, its scalar field stays an input
    PropertyOp("struct_in_out", interop.op(struct_in_out_kernel, outputs=["acc", "sq"], in_out=["acc"],
                                           name="catalogue::struct_in_out"),
               struct_in_out_kernel, ("in", "io", "scalar", "out"), lambda n, m: ((n, m), (n,)), _rows),
    # a tile kernel: out[i] = sum(x[i, :] ** 2), one tile of TILE values per row (its launch and
    # launch_dims are the tile grid; Warp's tile adjoints write through each array's own gradient
    # pointer: a gradient of a strided input is refused, see property_calls.expected_error)
    # a Python-function op that copies its input (wp.clone) before launching on the copy: the kept
    # tape's forward must give the input a gradient buffer for Warp to record the copy
    PropertyOp("function_clone", interop.op(clone_then_square_fn, name="catalogue::function_clone"),
               clone_then_square_fn, ("in", "out"), lambda n, m: ((n,),), lambda n, m: (n,), launch_override=False,
               row_independent=False),
    PropertyOp("tile_rows", tile_rows_op, tile_kernel, ("in", "out"), lambda n, m: ((n, TILE),), lambda n, m: (n,),
               block_dim=TILE_BLOCK),
    # the single-index form of a tile kernel (i = wp.tid(): the block's index along the tile grid)
    PropertyOp("tile_row_sum", interop.op(tile_row_sum_kernel, block_dim=TILE_BLOCK, name="catalogue::tile_row_sum"),
               tile_row_sum_kernel, ("in", "out"), lambda n, m: ((n, TILE),), lambda n, m: (n,), block_dim=TILE_BLOCK),
    # a wp.launch-form tile kernel (Warp's n-body example): n * TILE_BODIES bodies, one thread each;
    # a launch that is not whole blocks (launch_dims, or a per-call block_dim) is refused on every device
    PropertyOp("tile_threads", tile_threads_op, tile_threads_kernel, ("in", "out"),
               lambda n, m: ((n * TILE_BODIES,),), lambda n, m: (n * TILE_BODIES,), row_independent=False,
               block_dim=TILE_BODIES),
    # tile_matmul over a 2-d tile grid (n, m): A (n*TMM_M, 2*TMM_K) @ B (2*TMM_K, m*TMM_N), in float32
    # and float64 (a generic kernel); neither the grid nor C's shape is read from the arrays: launch_dims and
    # output_dims passed with every call, as Warp's own test passes dim= to wp.launch_tiled
    PropertyOp("tile_matmul", tile_matmul_op, tile_matmul_kernel, ("in", "in", "out"),
               lambda n, m: ((n * TMM_M, 2 * TMM_K), (2 * TMM_K, m * TMM_N)), lambda n, m: (n, m),
               out_shape=lambda launch: (launch[0] * TMM_M, launch[1] * TMM_N), dtypes=(np.float32, np.float64),
               row_independent=False, block_dim=TILE_BLOCK, explicit_dims=True),
]  # fmt: skip
PROPERTY_OP_IDS = [p.id for p in PROPERTY_OPS]


# ---- checked mode (tests/test_checked.py): one kernel with a gather (in a wp.func), a scatter and a
# computed write (one kernel: each checked variant is a kernel build; an index array set out of range
# picks the access)
@wp.func
def checked_gather(a: wp.array(dtype=float), j: wp.int32):
    return a[j] * 2.0


@wp.kernel(module="unique")
def checked_springs_kernel(
    x: wp.array(dtype=float),
    gi: wp.array(dtype=wp.int32),
    si: wp.array(dtype=wp.int32),
    wi: wp.array(dtype=wp.int32),
    f: wp.array(dtype=float),
    w: wp.array(dtype=float),
    g: wp.array(dtype=float),
):
    i = wp.tid()
    g[i] = checked_gather(x, gi[i])
    wp.atomic_add(f, si[i], x[i] * 3.0)
    w[wi[i]] = x[i] * x[i]


def checked_springs_reference(x, gi, si, wi, f, w):
    """NumPy's checked_springs_kernel (in-range indices; ``wi`` without repeats)."""
    f, w = f.copy(), w.copy()
    np.add.at(f, si, x * 3.0)
    w[wi] = x * x
    return f, w, x[gi] * 2.0


# a tile kernel whose load offset is a parameter: one tile of CHECKED_TILE elements per block
CHECKED_TILE = 4


@wp.kernel(module="unique")
def checked_tile_kernel(x: wp.array(dtype=float), off: int, out: wp.array(dtype=float)):
    i, _lane = wp.tid()
    t = wp.tile_load(x, shape=CHECKED_TILE, offset=off + i * CHECKED_TILE)
    wp.tile_store(out, wp.tile_map(wp.mul, t, t), offset=i * CHECKED_TILE)


# Python-function ops a caller gets wrong (tests/test_hostile_inputs.py)
def returns_instead_fn(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    # returns its result instead of writing ``out``
    return x


def struct_param_fn(s: StepModel, out: wp.array(dtype=float)):
    # a struct parameter: supported for kernels, refused for a Python-function op
    pass


@wp.kernel
def writes_input_through_struct_copy_kernel(s: HoldsArray, out: wp.array(dtype=float)):
    i = wp.tid()
    t = s  # a local copy of the struct: its array field is the caller's input
    t.a[i] = 5.0
    out[i] = 1.0


# Warp's idiom for an optional array: `if idx:` is false for a null array (None, or an empty array,
# which Warp makes null); interop passes an array without elements as a null array too
@wp.kernel
def optional_gather_kernel(idx: wp.array(dtype=wp.int32), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    tid = wp.tid()
    j = tid
    if idx:
        j = idx[tid]
    out[tid] = x[j] * 2.0


def optional_gather_fn(idx: wp.array(dtype=wp.int32), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    wp.launch(optional_gather_kernel, dim=x.shape, inputs=[idx, x, out], device=x.device)


# warp.fem's axpy: the in-out is read as a value (a blind spot: Warp's adjoint passes the in-out's
# gradient through, 1 for beta); with enable_backward=False, as warp.fem ships it, no adjoint at all
@wp.kernel
def axpy_in_out_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float), alpha: float, beta: float):
    i = wp.tid()
    y[i] = beta * y[i] + alpha * x[i]


@wp.kernel(enable_backward=False)
def axpy_in_out_no_adjoint_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float), alpha: float, beta: float):
    i = wp.tid()
    y[i] = beta * y[i] + alpha * x[i]


# Warp's own test kernel for jax_kernel(block_dim=) (test_ffi_jax_kernel_block_dim_tile): the thread
# index is an element index (output[i] = 0) and a tile offset at once, so the kernel is written for
# either launch; Warp's caller launches it as wp.launch(dim=256, block_dim=64): tile_launch="launch"
@wp.kernel
def tile_block_sum_kernel(output: wp.array(dtype=int)):
    i = wp.tid()
    output[i] = 0
    values = wp.tile(i)
    block_sum = wp.tile_sum(values)
    wp.tile_store(output, block_sum, offset=i)


@wp.kernel
def iota_kernel(out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = float(i)


@wp.kernel
def bool_pick_kernel(x: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
    i = wp.tid()
    if flag:
        out[i] = -x[i]
    else:
        out[i] = x[i]


# warp.fem's mixed-precision axpy (float32 x, float64 y, float64 scalars)
@wp.kernel
def mixed_axpy_kernel(
    x: wp.array(dtype=typing.Any), y: wp.array(dtype=typing.Any), alpha: typing.Any, beta: typing.Any
):
    i = wp.tid()
    y[i] = beta * y[i] + alpha * y.dtype(x[i])


@wp.kernel
def square_accumulate_kernel(x: wp.array(dtype=float), a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] += x[i] * x[i]


@wp.kernel
def mul_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * b[i]


def neighbours_fn(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    # launches on views of its own input and output: out[i] = x[i + 1] * x[i], the last left zero
    n = x.shape[0]
    wp.launch(mul_kernel, dim=n - 1, inputs=[x[1:], x[: n - 1], out[: n - 1]], device=x.device)
