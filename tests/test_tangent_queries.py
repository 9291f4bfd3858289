"""Forward mode through spatial queries (issue 42, row 1): hash grids, BVHs, meshes.

A query's results are indices, counts, hit flags and handles to iterate: piecewise constant in the
query point, so they carry no tangent (Warp's adjoint gives them none), and a kernel that loops over
its neighbours is differentiated through what it computes from them. Checked as every generated
tangent kernel is (``tests/test_tangent_kernels.py``'s :func:`check_tangent`): against central
differences and against ``J t`` from Warp's reverse mode, float64, on the CPU or
``INTEROP_TANGENT_DEVICE``; then through ops (``jax.jvp``, ``torch.func.jvp``) against the kernel's
tangent. ``mesh_eval_position`` (float32 only in Warp) against its formula and Warp's adjoint.
What stays refused (queries with float results) names the builtin.
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


# ---- Warp's SPH example (examples/core/example_sph.py), in float64 ------------------------------
@wp.func
def _square(x: F64):
    return x * x


@wp.func
def _cube(x: F64):
    return x * x * x


@wp.func
def _density_kernel(xyz: wp.vec3d, smoothing_length: F64):
    distance = wp.dot(xyz, xyz)
    return wp.max(_cube(_square(smoothing_length) - distance), F64(0.0))


@wp.kernel
def compute_density(
    grid: wp.uint64,
    particle_x: wp.array(dtype=wp.vec3d),
    particle_rho: wp.array(dtype=F64),
    density_normalization: F64,
    smoothing_length: F64,
):
    tid = wp.tid()
    i = wp.hash_grid_point_id(grid, tid)
    x = particle_x[i]
    rho = F64(0.0)
    neighbors = wp.hash_grid_query(grid, x, smoothing_length)
    for index in neighbors:
        distance = x - particle_x[index]
        rho += _density_kernel(distance, smoothing_length)
    particle_rho[i] = density_normalization * rho


# ---- a radius search with a weighted sum (physicsnemo-style neighbour list) ---------------------
@wp.kernel
def radius_search(
    grid: wp.uint64,
    points: wp.array(dtype=wp.vec3d),
    queries: wp.array(dtype=wp.vec3d),
    radius: F64,
    counts: wp.array(dtype=wp.int32),
    weighted: wp.array(dtype=wp.vec3d),
):
    q = wp.tid()
    p = queries[q]
    n = int(0)  # noqa: UP018 (a Warp variable the loop changes)
    acc = wp.vec3d()
    query = wp.hash_grid_query(grid, p, radius)
    index = int(0)  # noqa: UP018 (a Warp variable the loop changes)
    while wp.hash_grid_query_next(query, index):
        d = points[index] - p
        r2 = wp.dot(d, d)
        if r2 < radius * radius:
            n += 1
            w = radius * radius - r2
            acc += w * w * d
    counts[q] = n
    weighted[q] = acc


@wp.kernel
def bvh_overlaps(
    bvh: wp.uint64,
    lows: wp.array(dtype=wp.vec3),
    highs: wp.array(dtype=wp.vec3),
    centers: wp.array(dtype=wp.vec3),
    hits: wp.array(dtype=wp.int32),
    pulled: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    c = centers[i]
    query = wp.bvh_query_aabb(bvh, lows[i], highs[i])
    index = int(0)  # noqa: UP018 (a Warp variable the loop changes)
    n = int(0)  # noqa: UP018 (a Warp variable the loop changes)
    acc = wp.vec3()
    while wp.bvh_query_next(query, index):
        n += 1
        acc += c * float(index + 1)
    hits[i] = n
    pulled[i] = acc


def _cloud(n: int, seed: int, spread: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-spread, spread, (n, 3))


def _grid(points: np.ndarray, radius: float) -> wp.HashGrid:
    grid = wp.HashGrid(16, 16, 16, device=DEV, dtype=F64)
    grid.build(wp.array(points, dtype=wp.vec3d, device=DEV), radius)
    return grid


def test_queries_are_builtins_without_a_float_result():
    """Every name R.QUERIES runs without a tangent has only integer, bool or query results on the
    running Warp (a float result, say a new overload's distance, would be a dropped tangent)."""
    from interop._warp_compat import builtin_function

    assert "hash_grid_query" in R.QUERIES and "bvh_query_next" in R.QUERIES
    for name in R.QUERIES:
        fn = builtin_function(name)
        for overload in fn.overloads or [fn]:
            vt = overload.value_type
            assert vt in (int, bool, wp.int32) or "Query" in getattr(vt, "__name__", ""), (name, vt)
            floats = [a for a, t in overload.input_types.items() if t in (float, wp.float32, wp.float64)]
            # float inputs are read (a radius, a max distance), never written: no reference outputs
            assert all(a in ("max_dist", "max_t", "radius") for a in floats), (name, floats)


def test_sph_density_runs_in_forward_mode():
    n, h = 64, 0.35
    x = _cloud(n, 3, 0.6)
    grid = _grid(x, h)
    case = Case(
        compute_density,
        n,
        domains={"particle_x": (-0.6, 0.6), "smoothing_length": (0.3, 0.4), "density_normalization": (0.5, 2.0)},
        shapes={"particle_x": (n, 3), "particle_rho": (n,)},
        outputs=("particle_rho",),
        fixed={"grid": grid.id},
    )
    rng = np.random.default_rng(5)
    inputs = {"particle_x": x, "density_normalization": 1.3, "smoothing_length": h}
    tangents = {"particle_x": rng.normal(size=(n, 3)), "density_normalization": 0.7, "smoothing_length": 0.2}
    check_tangent(case, inputs, tangents)
    # and the tangent is not trivially zero: the density moves with the particles
    touts = check_outputs_move(case, inputs, tangents)
    assert np.abs(touts["particle_rho"]).max() > 1e-3


def check_outputs_move(case: Case, inputs: dict, tangents: dict) -> dict:
    from test_tangent_kernels import run_tangent

    return run_tangent(case, inputs, tangents)[1]


def test_radius_search_runs_in_forward_mode():
    n, m, r = 80, 12, 0.45
    pts = _cloud(n, 11)
    q = _cloud(m, 12, 0.8)
    grid = _grid(pts, r)
    case = Case(
        radius_search,
        m,
        domains={"points": (-1, 1), "queries": (-0.8, 0.8), "radius": (0.4, 0.5)},
        shapes={"points": (n, 3), "queries": (m, 3), "counts": (m,), "weighted": (m, 3)},
        outputs=("weighted",),
        fixed={"grid": grid.id, "counts": np.zeros(m, np.int32)},
    )
    rng = np.random.default_rng(2)
    inputs = {"points": pts, "queries": q, "radius": r}
    tangents = {"points": rng.normal(size=(n, 3)), "queries": rng.normal(size=(m, 3)), "radius": 0.3}
    check_tangent(case, inputs, tangents)


def test_bvh_query_runs_in_forward_mode():
    """A BVH query's boxes come from differentiated arrays: the hit set carries no tangent, what the
    kernel computes from it does (float32: against the formula, the hit set against NumPy's)."""
    lo = np.array([[0, 0, 0], [2, 2, 2], [0.5, 0, 0]], np.float32)
    bvh = wp.Bvh(wp.array(lo, dtype=wp.vec3, device=DEV), wp.array(lo + 1, dtype=wp.vec3, device=DEV))
    k = 4
    rng = np.random.default_rng(0)
    lows = rng.uniform(-0.5, 0.5, (k, 3)).astype(np.float32)
    highs = lows + 0.8
    centers = rng.normal(size=(k, 3)).astype(np.float32)
    tc = rng.normal(size=(k, 3)).astype(np.float32)
    diff = {"lows": True, "highs": True, "centers": True, "bvh": False, "hits": False, "pulled": True}
    tk = _tangent.tangent_kernel(bvh_overlaps, diff, "bvh_overlaps")
    args = [
        bvh.id,
        wp.array(lows, dtype=wp.vec3, device=DEV),
        wp.array(highs, dtype=wp.vec3, device=DEV),
        wp.array(centers, dtype=wp.vec3, device=DEV),
        wp.zeros(k, dtype=wp.int32, device=DEV),
        wp.zeros(k, dtype=wp.vec3, device=DEV),
    ]
    tangent_args = {n: wp.zeros(k, dtype=wp.vec3, device=DEV) for n in tk.tangent_of}
    tangent_args["centers"] = wp.array(tc, dtype=wp.vec3, device=DEV)
    tangent_args["lows"] = wp.array(rng.normal(size=(k, 3)).astype(np.float32), dtype=wp.vec3, device=DEV)
    wp.launch(tk.kernel, dim=k, inputs=args + [tangent_args[n] for n in tk.tangent_of], device=DEV)
    hits = args[4].numpy()
    assert hits.max() > 0
    # the formula: pulled = c * sum(index + 1 over hits): its tangent is tc times the same sum
    ref = np.zeros((k, 3))
    for i in range(k):
        box_lo, box_hi = lo, lo + 1
        over = np.all((box_lo <= highs[i]) & (box_hi >= lows[i]), axis=1)
        assert over.sum() == hits[i]
        ref[i] = tc[i] * float(np.sum(np.nonzero(over)[0] + 1))
    np.testing.assert_allclose(tangent_args["pulled"].numpy(), ref, rtol=1e-6)


@wp.kernel
def surface_points(
    mesh: wp.uint64,
    faces: wp.array(dtype=wp.int32),
    u: wp.array(dtype=float),
    v: wp.array(dtype=float),
    out: wp.array(dtype=wp.vec3),
    vel: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    out[i] = wp.mesh_eval_position(mesh, faces[i], u[i], v[i]) * u[i]
    vel[i] = wp.mesh_eval_velocity(mesh, faces[i], u[i], v[i])


def test_mesh_eval_position_follows_its_formula_and_warps_adjoint():
    pts = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32)
    tris = np.array([0, 1, 2, 0, 2, 3], np.int32)
    vels = np.array([[1, 2, 3], [-1, 0, 2], [0.5, 4, -2], [3, 1, 1]], np.float32)
    mesh = wp.Mesh(
        wp.array(pts, dtype=wp.vec3, device=DEV),
        wp.array(tris, dtype=wp.int32, device=DEV),
        wp.array(vels, dtype=wp.vec3, device=DEV),
    )
    faces = np.array([0, 1, 1], np.int32)
    rng = np.random.default_rng(4)
    u = rng.uniform(0.1, 0.4, 3).astype(np.float32)
    v = rng.uniform(0.1, 0.4, 3).astype(np.float32)
    tu = rng.normal(size=3).astype(np.float32)
    tv = rng.normal(size=3).astype(np.float32)
    tk = _tangent.tangent_kernel(
        surface_points,
        {"mesh": False, "faces": False, "u": True, "v": True, "out": True, "vel": True},
        "surface_points",
    )
    out, tout = wp.zeros(3, dtype=wp.vec3, device=DEV), wp.zeros(3, dtype=wp.vec3, device=DEV)
    vel, tvel = wp.zeros(3, dtype=wp.vec3, device=DEV), wp.zeros(3, dtype=wp.vec3, device=DEV)
    prim = [mesh.id, wp.array(faces, device=DEV), wp.array(u, device=DEV), wp.array(v, device=DEV), out, vel]
    tans = {"u": wp.array(tu, device=DEV), "v": wp.array(tv, device=DEV), "out": tout, "vel": tvel}
    wp.launch(tk.kernel, dim=3, inputs=prim + [tans[n] for n in tk.tangent_of], device=DEV)
    corners = pts[tris.reshape(-1, 3)[faces]].astype(np.float64)  # (3 faces, 3 corners, xyz)
    p, q, r = corners[:, 0], corners[:, 1], corners[:, 2]
    pos = p * u[:, None] + q * v[:, None] + r * (1 - u - v)[:, None]
    dpos = (p - r) * tu[:, None] + (q - r) * tv[:, None]
    ref = dpos * u[:, None] + pos * tu[:, None]
    np.testing.assert_allclose(tout.numpy(), ref, rtol=1e-5, atol=1e-6)
    cv = vels[tris.reshape(-1, 3)[faces]].astype(np.float64)
    np.testing.assert_allclose(
        tvel.numpy(), (cv[:, 0] - cv[:, 2]) * tu[:, None] + (cv[:, 1] - cv[:, 2]) * tv[:, None], rtol=1e-5, atol=1e-6
    )
    # Warp's reverse mode: J^T e_k . t for each output element
    ua, va = wp.array(u, device=DEV, requires_grad=True), wp.array(v, device=DEV, requires_grad=True)
    o = wp.zeros(3, dtype=wp.vec3, device=DEV, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(
            surface_points,
            dim=3,
            inputs=[mesh.id, wp.array(faces, device=DEV), ua, va, o, wp.zeros(3, dtype=wp.vec3, device=DEV)],
            device=DEV,
        )
    for i in range(3):
        for c in range(3):
            ct = np.zeros((3, 3), np.float32)
            ct[i, c] = 1
            tape.zero()
            tape.backward(grads={o: wp.array(ct, dtype=wp.vec3, device=DEV)})
            jt = float(ua.grad.numpy() @ tu + va.grad.numpy() @ tv)
            assert abs(jt - tout.numpy()[i, c]) <= 1e-5 * max(1.0, abs(jt))


@wp.kernel
def closest_points(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, p[i], 10.0)
    out[i] = q.u


def test_a_query_with_float_results_is_refused_naming_the_builtin():
    with pytest.raises(interop.UnsupportedError, match="mesh_query_point_no_sign"):
        _tangent.tangent_kernel(closest_points, {"mesh": False, "p": True, "out": True}, "closest_points")


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_sph_density_through_an_op(framework):
    """``jax.jvp`` / ``torch.func.jvp`` of an op over the SPH kernel: the tangent kernel's values."""
    pytest.importorskip(framework)
    n, h = 32, 0.4
    x = _cloud(n, 8, 0.5)
    grid = _grid(x, h)
    op = interop.op(compute_density, outputs=["particle_rho"], launch_dims=n, output_dims=n)
    tx = np.random.default_rng(1).normal(size=(n, 3))
    case = Case(
        compute_density,
        n,
        domains={},
        shapes={"particle_x": (n, 3), "particle_rho": (n,)},
        outputs=("particle_rho",),
        fixed={"grid": grid.id, "density_normalization": 1.0, "smoothing_length": h},
    )
    from test_tangent_kernels import run_tangent

    want_out, want_t = run_tangent(case, {"particle_x": x}, {"particle_x": tx})
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        with jax.enable_x64(True):  # this test's arrays are float64; the setting goes back after it
            cpu = jax.devices("cpu")[0]
            xs, ts = (jax.device_put(jnp.asarray(a), cpu) for a in (x, tx))
            out, tout = jax.jvp(lambda a: op(grid.id, a, 1.0, h), (xs,), (ts,))
    else:
        import torch

        xs, ts = (torch.tensor(a, dtype=torch.float64, device="cpu") for a in (x, tx))
        out, tout = torch.func.jvp(lambda a: op(grid.id, a, 1.0, h), (xs,), (ts,))
    np.testing.assert_allclose(np.asarray(out), want_out["particle_rho"], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(tout), want_t["particle_rho"], rtol=1e-10, atol=1e-12)
