"""Kernels as other projects write them (nvalchemiops-style molecular kernels), described through
``interop.op``, each with an independent NumPy reference of its forward pass.

The cases reuse :class:`catalogue.Case`: gradients are checked against central finite differences
of the reference (:func:`catalogue.fd_grad`). ``tests/test_user_examples.py`` runs them through
NumPy, PyTorch, JAX and Paddle.
"""

from __future__ import annotations

import typing

import numpy as np
import warp as wp
from catalogue import Case

import interop

NATOMS = 5
NSEG = 3
MAX_NBR = 4
CUTOFF = 1.6


# ---- segmented sum of vectors: the output in the middle, a scalar after it ----------------------
@wp.kernel
def segment_sum_vec3(x: wp.array(dtype=wp.vec3), idx: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.vec3), n: int):
    i = wp.tid()
    if i < n:
        wp.atomic_add(out, idx[i], x[i])


# ---- a naive neighbour list: integer outputs in the middle, scalars after them ------------------
@wp.kernel
def naive_neighbors(
    pos: wp.array(dtype=wp.vec3),
    nbr: wp.array2d(dtype=wp.int32),
    num: wp.array(dtype=wp.int32),
    cutoff: float,
    max_nbr: int,
):
    i = wp.tid()
    c = int(0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(pos.shape[0]):
        if j != i:
            if wp.length(pos[j] - pos[i]) < cutoff and c < max_nbr:
                nbr[i, c] = j
                c += 1
    num[i] = c


# ---- Lennard-Jones over a pair list: energy and forces accumulated with wp.atomic_add -----------
@wp.kernel
def lj_energy_forces(
    pos: wp.array(dtype=wp.vec3),
    pairs: wp.array2d(dtype=wp.int32),
    epsilon: float,
    sigma: float,
    energy: wp.array(dtype=float),
    forces: wp.array(dtype=wp.vec3),
):
    p = wp.tid()
    i = pairs[p, 0]
    j = pairs[p, 1]
    d = pos[j] - pos[i]
    r2 = wp.dot(d, d)
    sr2 = sigma * sigma / r2
    sr6 = sr2 * sr2 * sr2
    wp.atomic_add(energy, 0, 4.0 * epsilon * (sr6 * sr6 - sr6))
    de_dr2 = 4.0 * epsilon * (-6.0 * sr6 * sr6 + 3.0 * sr6) / r2
    f = 2.0 * de_dr2 * d  # force on i: -dE/dpos_i
    wp.atomic_add(forces, i, f)
    wp.atomic_sub(forces, j, f)


# ---- the same pair term added onto forces accumulated by earlier terms (an in-out array) ------------
@wp.kernel
def lj_add_forces(
    pos: wp.array(dtype=wp.vec3),
    pairs: wp.array2d(dtype=wp.int32),
    forces: wp.array(dtype=wp.vec3),
    energy: wp.array(dtype=float),
    epsilon: float,
    sigma: float,
):
    p = wp.tid()
    i = pairs[p, 0]
    j = pairs[p, 1]
    d = pos[j] - pos[i]
    r2 = wp.dot(d, d)
    sr2 = sigma * sigma / r2
    sr6 = sr2 * sr2 * sr2
    wp.atomic_add(energy, 0, 4.0 * epsilon * (sr6 * sr6 - sr6))
    f = 8.0 * epsilon * (-6.0 * sr6 * sr6 + 3.0 * sr6) / r2 * d
    wp.atomic_add(forces, i, f)
    wp.atomic_sub(forces, j, f)


# ---- Coulomb: per-atom energies and forces in the middle, the prefactor last ---------------------
@wp.kernel
def coulomb_energy_forces(
    pos: wp.array(dtype=wp.vec3),
    q: wp.array(dtype=float),
    pairs: wp.array2d(dtype=wp.int32),
    energy: wp.array(dtype=float),
    forces: wp.array(dtype=wp.vec3),
    ke: float,
):
    p = wp.tid()
    i = pairs[p, 0]
    j = pairs[p, 1]
    d = pos[j] - pos[i]
    r = wp.length(d)
    e = ke * q[i] * q[j] / r
    wp.atomic_add(energy, i, 0.5 * e)
    wp.atomic_add(energy, j, 0.5 * e)
    f = -e / (r * r) * d  # force on i
    wp.atomic_add(forces, i, f)
    wp.atomic_sub(forces, j, f)


# ---- real spherical harmonics up to l = 2 of a direction (vec3 in, 9 coefficients out) ---------
@wp.kernel
def spherical_harmonics_l2(r: wp.array(dtype=wp.vec3), out: wp.array2d(dtype=float)):
    i = wp.tid()
    v = wp.normalize(r[i])
    x = v[0]
    y = v[1]
    z = v[2]
    out[i, 0] = 0.28209479
    out[i, 1] = 0.48860251 * y
    out[i, 2] = 0.48860251 * z
    out[i, 3] = 0.48860251 * x
    out[i, 4] = 1.09254843 * x * y
    out[i, 5] = 1.09254843 * y * z
    out[i, 6] = 0.31539157 * (3.0 * z * z - 1.0)
    out[i, 7] = 1.09254843 * x * z
    out[i, 8] = 0.54627422 * (x * x - y * y)


# ---- inverse cells and volumes (mat33) -------------------------------------------------------------
@wp.kernel
def inverse_cells(cell: wp.array(dtype=wp.mat33), inv: wp.array(dtype=wp.mat33), volume: wp.array(dtype=float)):
    s = wp.tid()
    inv[s] = wp.inverse(cell[s])
    volume[s] = wp.abs(wp.determinant(cell[s]))


# ---- positions wrapped into their system's cell (a gather of per-system matrices) ---------------
@wp.kernel
def wrap_positions(
    pos: wp.array(dtype=wp.vec3),
    batch: wp.array(dtype=wp.int32),
    cell: wp.array(dtype=wp.mat33),
    inv: wp.array(dtype=wp.mat33),
    out: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    s = batch[i]
    f = inv[s] * pos[i]
    f = f - wp.vec3(wp.floor(f[0]), wp.floor(f[1]), wp.floor(f[2]))
    out[i] = cell[s] * f


# ---- an overload table over vector precisions (wp.overload / add_overload) ----------------------
@wp.kernel
def _radial_generic(r: wp.array(dtype=typing.Any), s: typing.Any, out: wp.array(dtype=typing.Any)):
    i = wp.tid()
    d = wp.length(r[i])
    out[i] = s * d * d * d


RADIAL = {
    np.float32: wp.overload(_radial_generic, [wp.array(dtype=wp.vec3f), wp.float32, wp.array(dtype=wp.float32)]),
    np.float64: _radial_generic.add_overload([wp.array(dtype=wp.vec3d), wp.float64, wp.array(dtype=wp.float64)]),
}


# ---- a generic (typing.Any) pair kernel: one definition for float32 and float64 ------------------
@wp.kernel
def pair_distance_generic(
    pos: wp.array(dtype=wp.types.vector(length=3, dtype=wp.Float)),
    pairs: wp.array2d(dtype=wp.int32),
    dist: wp.array(dtype=wp.Float),
):
    p = wp.tid()
    dist[p] = wp.length(pos[pairs[p, 1]] - pos[pairs[p, 0]])


# ---- a Python-function op (Warp's jax_callable case): two launches and an intermediate ----------
@wp.kernel
def _pair_r2(pos: wp.array(dtype=wp.vec3), pairs: wp.array2d(dtype=wp.int32), r2: wp.array(dtype=float)):
    p = wp.tid()
    d = pos[pairs[p, 1]] - pos[pairs[p, 0]]
    r2[p] = wp.dot(d, d)


@wp.kernel
def _soft_energy(r2: wp.array(dtype=float), energy: wp.array(dtype=float)):
    p = wp.tid()
    wp.atomic_add(energy, 0, wp.exp(-r2[p]))


def soft_pair_energy(pos: wp.array(dtype=wp.vec3), pairs: wp.array2d(dtype=wp.int32), energy: wp.array(dtype=float)):
    """sum over pairs of exp(-r^2): two launches through a temporary that keeps its gradient."""
    r2 = wp.zeros(pairs.shape[0], dtype=float, device=pos.device, requires_grad=True)
    wp.launch(_pair_r2, dim=pairs.shape[0], inputs=[pos, pairs], outputs=[r2], device=pos.device)
    wp.launch(_soft_energy, dim=pairs.shape[0], inputs=[r2], outputs=[energy], device=pos.device)


# ---- Warp's PyTorch guide: Rosenbrock (a wp.func over vec2), the summed-squares loss, and a
# forward kernel without adjoint plus a hand-written backward kernel ---------------------------------
@wp.func
def rosenbrock(x: float, y: float):
    return (1.0 - x) ** 2.0 + 100.0 * (y - x**2.0) ** 2.0


@wp.kernel
def eval_rosenbrock(xs: wp.array(dtype=wp.vec2), z: wp.array(dtype=float)):
    i = wp.tid()
    x = xs[i]
    z[i] = rosenbrock(x[0], x[1])


@wp.kernel
def squares_loss(xs: wp.array(dtype=float, ndim=2), total: wp.array(dtype=float)):
    tid = wp.tid()
    wp.atomic_add(total, 0, xs[tid, 0] ** 2.0 + xs[tid, 1] ** 2.0)


@wp.kernel(enable_backward=False)
def sum_squares_forward(a: wp.array(dtype=float), b: wp.array(dtype=float), output: wp.array(dtype=float)):
    i = wp.tid()
    output[i] = a[i] * a[i] + b[i] * b[i]


@wp.kernel(enable_backward=False)
def sum_squares_backward(
    a: wp.array(dtype=float),
    b: wp.array(dtype=float),
    adj_output: wp.array(dtype=float),
    grad_a: wp.array(dtype=float),
    grad_b: wp.array(dtype=float),
):
    # the guide's backward_kernel, parameters in interop's order: inputs, adjoints, gradients
    i = wp.tid()
    grad_a[i] = 2.0 * a[i] * adj_output[i]
    grad_b[i] = 2.0 * b[i] * adj_output[i]


# ---- x^3 with a hand-written backward that has an adjoint of its own (second derivatives) ---------
@wp.kernel
def cube(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * x[i] * x[i]


@wp.kernel
def cube_backward(x: wp.array(dtype=float), adj_out: wp.array(dtype=float), grad_x: wp.array(dtype=float)):
    i = wp.tid()
    grad_x[i] = 3.0 * x[i] * x[i] * adj_out[i]


def cube_op() -> interop.Op:
    return interop.op(cube, backward=cube_backward)


# the neighbour list as libraries compile it: without adjoint (its outputs are integers)
neighbors_no_adjoint = wp.Kernel(naive_neighbors.func, key="neighbors_no_adjoint", options={"enable_backward": False})


# ---- NumPy references ------------------------------------------------------------------------------
def _lattice(rng, dt, n=NATOMS):
    """Atoms near a line with spacing ~1.1 (no pair closer than ~0.8): smooth LJ/Coulomb terms."""
    base = np.stack([1.1 * np.arange(n), 0.3 * np.sin(np.arange(n)), 0.2 * np.cos(np.arange(n))], axis=1)
    return (base + rng.uniform(-0.05, 0.05, size=(n, 3))).astype(dt)


def all_pairs(n=NATOMS):
    return np.array([(i, j) for i in range(n) for j in range(i + 1, n)], np.int32)


NPAIRS = len(all_pairs())


def ref_segment_sum(x, idx, n):
    out = np.zeros((NSEG, 3), x.dtype)
    np.add.at(out, idx[:n], x[:n])
    return (out,)


def ref_neighbors(pos, cutoff, max_nbr):
    n = len(pos)
    nbr = np.zeros((n, max_nbr), np.int32)
    num = np.zeros(n, np.int32)
    for i in range(n):
        c = 0
        for j in range(n):
            if (
                j != i
                and np.linalg.norm(pos[j].astype(np.float32) - pos[i].astype(np.float32)) < cutoff
                and c < max_nbr
            ):
                nbr[i, c] = j
                c += 1
        num[i] = c
    return nbr, num


def ref_lj(pos, pairs, epsilon, sigma):
    d = pos[pairs[:, 1]] - pos[pairs[:, 0]]
    r2 = np.sum(d * d, axis=1)
    sr6 = (sigma * sigma / r2) ** 3
    energy = np.array([np.sum(4.0 * epsilon * (sr6 * sr6 - sr6))], pos.dtype)
    f = (2.0 * 4.0 * epsilon * (-6.0 * sr6 * sr6 + 3.0 * sr6) / r2)[:, None] * d
    forces = np.zeros_like(pos)
    np.add.at(forces, pairs[:, 0], f)
    np.add.at(forces, pairs[:, 1], -f)
    return energy, forces.astype(pos.dtype)


def ref_coulomb(pos, q, pairs, ke):
    d = pos[pairs[:, 1]] - pos[pairs[:, 0]]
    r = np.linalg.norm(d, axis=1)
    e = ke * q[pairs[:, 0]] * q[pairs[:, 1]] / r
    energy = np.zeros(len(pos), pos.dtype)
    np.add.at(energy, pairs[:, 0], 0.5 * e)
    np.add.at(energy, pairs[:, 1], 0.5 * e)
    forces = np.zeros_like(pos)
    f = (-e / (r * r))[:, None] * d
    np.add.at(forces, pairs[:, 0], f)
    np.add.at(forces, pairs[:, 1], -f)
    return energy, forces


def ref_sph(r):
    v = r / np.linalg.norm(r, axis=1, keepdims=True)
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    c = np.stack(
        [
            np.full_like(x, 0.28209479),
            0.48860251 * y,
            0.48860251 * z,
            0.48860251 * x,
            1.09254843 * x * y,
            1.09254843 * y * z,
            0.31539157 * (3 * z * z - 1),
            1.09254843 * x * z,
            0.54627422 * (x * x - y * y),
        ],
        axis=1,
    )
    return (c.astype(r.dtype),)


def ref_inverse_cells(cell):
    return np.linalg.inv(cell).astype(cell.dtype), np.abs(np.linalg.det(cell)).astype(cell.dtype)


def ref_wrap(pos, batch, cell, inv):
    f = np.einsum("nij,nj->ni", inv[batch], pos)
    f = f - np.floor(f)
    return (np.einsum("nij,nj->ni", cell[batch], f).astype(pos.dtype),)


def _cells(rng, dt, nsys=2):
    return (np.eye(3) * 3.0 + rng.uniform(-0.3, 0.3, size=(nsys, 3, 3))).astype(dt)


def _wrap_args(rng, dt):
    cell = _cells(rng, dt)
    # fractional coordinates well inside (0.1, 0.9) + integer shifts: no position near a cell face
    frac = rng.uniform(0.1, 0.9, size=(6, 3)) + rng.integers(-2, 3, size=(6, 3))
    batch = np.array([0, 0, 0, 1, 1, 1], np.int32)
    pos = np.einsum("nij,nj->ni", cell[batch].astype(np.float64), frac).astype(dt)
    return pos, batch, cell, np.linalg.inv(cell).astype(dt)


def _segment_args(rng, dt):
    n = 7
    return rng.uniform(-1, 1, size=(n, 3)).astype(dt), (np.arange(n) * 2 % NSEG).astype(np.int32), n


# ---- the cases -------------------------------------------------------------------------------------
USER_CASES: list[Case] = []


def _add(case: Case) -> Case:
    USER_CASES.append(case)
    return case


_add(
    Case(
        "segment_sum_vec3",
        interop.op(segment_sum_vec3, outputs=["out"], output_dims={"out": NSEG}),
        _segment_args,
        ref_segment_sum,
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "neighbors",
        interop.op(naive_neighbors, outputs=["nbr", "num"], output_dims={"nbr": (NATOMS, MAX_NBR)}),
        lambda rng, dt: (_lattice(rng, dt), CUTOFF, MAX_NBR),
        ref_neighbors,
        differentiable=False,
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "lennard_jones",
        interop.op(lj_energy_forces, outputs=2),
        lambda rng, dt: (_lattice(rng, dt), all_pairs(), 0.8, 1.0),
        ref_lj,
        dtypes=(np.float32,),
        call_kwargs={"launch_dims": NPAIRS, "output_dims": {"energy": 1, "forces": NATOMS}},
    )
)
_add(
    Case(
        "lj_add_forces_in_out",
        interop.op(lj_add_forces, outputs=["energy"], in_out=["forces"]),
        lambda rng, dt: (_lattice(rng, dt), all_pairs(), rng.uniform(-1, 1, (NATOMS, 3)).astype(dt), 0.8, 1.0),
        lambda pos, pairs, forces, e, s: (lambda en, f: (forces + f, en))(*ref_lj(pos, pairs, e, s)),
        dtypes=(np.float32,),
        call_kwargs={"launch_dims": NPAIRS, "output_dims": {"energy": 1}},
        in_out=(2,),
    )
)
_add(
    Case(
        "coulomb",
        interop.op(coulomb_energy_forces, outputs=["energy", "forces"]),
        lambda rng, dt: (_lattice(rng, dt), rng.uniform(-1, 1, NATOMS).astype(dt), all_pairs(), 0.5),
        ref_coulomb,
        dtypes=(np.float32,),
        call_kwargs={"launch_dims": NPAIRS, "output_dims": {"energy": NATOMS, "forces": NATOMS}},
    )
)
_add(
    Case(
        "spherical_harmonics",
        interop.op(spherical_harmonics_l2, output_dims={"out": (6, 9)}),
        lambda rng, dt: ((rng.uniform(0.2, 1.0, size=(6, 3)) * rng.choice([-1, 1], size=(6, 3))).astype(dt),),
        ref_sph,
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "inverse_cells",
        interop.op(inverse_cells, outputs=2),
        lambda rng, dt: (_cells(rng, dt, 3),),
        ref_inverse_cells,
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "wrap_positions",
        interop.op(wrap_positions),
        _wrap_args,
        ref_wrap,
        dtypes=(np.float32,),
    )
)
for _dt, _inst in RADIAL.items():
    _add(
        Case(
            f"radial_overload_{np.dtype(_dt).name}",
            interop.op(_inst),
            lambda rng, dt: (rng.uniform(-1, 1, size=(6, 3)).astype(dt), 0.7),
            lambda r, s: ((s * np.linalg.norm(r, axis=1) ** 3).astype(r.dtype),),
            dtypes=(_dt,),
        )
    )
_add(
    Case(
        "pair_distance_generic",
        interop.op(pair_distance_generic),
        lambda rng, dt: (_lattice(rng, dt), all_pairs()),
        lambda pos, pairs: (np.linalg.norm(pos[pairs[:, 1]] - pos[pairs[:, 0]], axis=1).astype(pos.dtype),),
        call_kwargs={"launch_dims": NPAIRS},
    )
)
_add(
    Case(
        "soft_pair_energy_function",
        interop.op(soft_pair_energy, output_dims=1),
        lambda rng, dt: (_lattice(rng, dt) * 0.5, all_pairs()),
        lambda pos, pairs: (
            np.array([np.sum(np.exp(-np.sum((pos[pairs[:, 1]] - pos[pairs[:, 0]]) ** 2, axis=1)))], pos.dtype),
        ),
        dtypes=(np.float32,),
    )
)

_add(
    Case(
        "guide_rosenbrock",
        interop.op(eval_rosenbrock),
        lambda rng, dt: (rng.uniform(-1, 1, size=(8, 2)).astype(dt),),
        lambda xy: (((1 - xy[:, 0]) ** 2 + 100 * (xy[:, 1] - xy[:, 0] ** 2) ** 2).astype(xy.dtype),),
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "guide_squares_loss",
        # the guide launches dim=len(xs): the default launch dims would be xs's 2-d shape
        interop.op(squares_loss, launch_dims=10, output_dims=1),
        lambda rng, dt: (rng.normal(size=(10, 2)).astype(dt),),
        lambda xs: (np.array([np.sum(xs**2)], xs.dtype),),
        dtypes=(np.float32,),
    )
)
_add(
    Case(
        "guide_hand_written_backward",
        interop.op(sum_squares_forward, backward=sum_squares_backward),
        lambda rng, dt: (rng.normal(size=9).astype(dt), rng.normal(size=9).astype(dt)),
        lambda a, b: (a * a + b * b,),
        dtypes=(np.float32,),
    )
)

USER_CASE_IDS = [c.id for c in USER_CASES]


def user_case(id: str) -> Case:
    return next(c for c in USER_CASES if c.id == id)
