"""Forward mode through tiles (issue 40): generated tangent kernels of tile kernels, launched as Warp
launches the kernels (``wp.launch_tiled`` with ``block_dim``, or ``wp.launch`` with ``block_dim`` for a
kernel whose thread index indexes elements), against three references:

- central finite differences of the kernel itself (float64);
- Warp's own reverse mode through ``wp.Tape``: ``v . (J t) == (J^T v) . t`` for random ``v``;
- second order: Warp's adjoint of the tangent kernel, whose gradient with respect to the tangent
  inputs is ``J^T ct`` (against the primal's reverse mode) and with respect to the primal inputs
  ``sum ct H t`` (against central differences of ``ct . J(x) t`` along a random direction).

Then through interop ops: ``jax.jvp`` and ``torch.func.jvp`` of a tile op equal the tangent kernel's.
Every array names its device (``INTEROP_TANGENT_DEVICE``, default the CPU).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import warp as wp

import interop
from interop import _tangent

DEV = os.environ.get("INTEROP_TANGENT_DEVICE", "cpu")
T = 8  # tile edge
BD = 16  # threads per block
TH = 4  # half a tile


# ---- kernels (the forms of Warp's own tile tests and examples) ---------------------------------------
@wp.func
def _bump(x: Any, y: Any):
    return x * wp.exp(y) - wp.sin(x * y)


@wp.func
def _exp(y: Any):
    # tile_map(wp.exp, b) itself: Warp 1.16-1.18 cannot build its adjoint (their tile_map adjoint calls
    # adj_exp without the result it reads); through a wp.func it builds on every supported Warp
    return wp.exp(y)


@wp.kernel
def rows_map_sum(x: wp.array2d(dtype=wp.float64), y: wp.array2d(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    # tile_load of a row, tile_map of a builtin and of a wp.func, arithmetic, tile_sum, tile_store
    i = wp.tid()
    a = wp.tile_load(x[i], shape=T)
    b = wp.tile_load(y[i], shape=T)
    u = wp.tile_map(wp.sin, a) * wp.float64(2.0) + wp.tile_map(_bump, a, b) - a / wp.tile_map(_exp, b)
    s = wp.tile_sum(u * a)
    wp.tile_store(out, s, offset=i)


@wp.kernel
def reduce_add(x: wp.array2d(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    # tile_reduce(wp.add, ...): linear (Warp's reverse mode of tile_reduce gives zero: FD only)
    i = wp.tid()
    a = wp.tile_load(x[i], shape=T)
    wp.tile_store(out, wp.tile_reduce(wp.add, -a * a), offset=i)


@wp.kernel
def gemm(A: wp.array2d(dtype=Any), B: wp.array2d(dtype=Any), C: wp.array2d(dtype=Any)):
    # Warp's tile GEMM (examples/tile/example_tile_matmul.py): accumulating tile_matmul over k
    i, j = wp.tid()
    acc = wp.tile_zeros(shape=(T, T), dtype=A.dtype)
    for k in range(A.shape[1] // T):
        a = wp.tile_load(A, shape=(T, T), offset=(i * T, k * T))
        b = wp.tile_load(B, shape=(T, T), offset=(k * T, j * T))
        wp.tile_matmul(a, b, acc)
    wp.tile_store(C, acc, offset=(i * T, j * T))


@wp.kernel
def views(x: wp.array2d(dtype=wp.float64), r: wp.array(dtype=wp.float64), out: wp.array2d(dtype=wp.float64)):
    # tile_transpose, tile_broadcast, tile_view, tile_assign, tile_matmul's value form, tile_extract
    a = wp.tile_load(x, shape=(T, T))
    row = wp.tile_load(r, shape=T)
    c = wp.tile_transpose(a) + wp.tile_broadcast(wp.tile_reshape(row, shape=(1, T)), shape=(T, T))
    c = wp.tile_matmul(c, a) * a[1, 2]
    top = wp.tile_view(c, offset=(0, 0), shape=(TH, T))
    d = wp.tile_zeros(shape=(T, T), dtype=wp.float64)
    wp.tile_assign(d, top, offset=(TH, 0))
    wp.tile_store(out, d + c)


@wp.kernel
def select(x: wp.array2d(dtype=wp.float64), out: wp.array2d(dtype=wp.float64)):
    # tile_max / tile_min: the tangent of the selected element (Warp's reverse mode of tile_max and
    # tile_min differs from the derivative, which central differences give: FD only)
    i = wp.tid()
    a = wp.tile_load(x[i], shape=T)
    m = wp.tile_max(a) + wp.tile_min(a) * wp.float64(3.0)
    wp.tile_store(out[i], a * m[0])


@wp.kernel
def scatter(x: wp.array2d(dtype=wp.float64), out: wp.array(dtype=wp.float64), acc: wp.array(dtype=wp.float64)):
    # tile(x) / untile, tile_extract, tile_atomic_add
    i, lane = wp.tid()
    a = wp.tile_load(x[i], shape=T)
    v = x[i, lane % T] * wp.tile_extract(a, 0)
    t = wp.tile(v)
    w = wp.untile(t * t)
    out[i * BD + lane] = w
    wp.tile_atomic_add(acc, wp.tile_map(wp.cos, a) * a[1])


TB = 8  # bodies per tile


@wp.kernel
def threads_form(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    # Warp's n-body form: the thread index indexes elements, tiles loaded at a loop counter's offsets
    i = wp.tid()
    xi = x[i]
    acc = wp.float64(0.0)
    for k in range(x.shape[0] // TB):
        t = wp.tile_load(x, shape=TB, offset=k * TB)
        for j in range(TB):
            d = xi - t[j]
            acc += d * d * xi
    out[i] = acc


@dataclass
class TileCase:
    id: str
    kernel: Any
    inputs: dict  # name -> shape
    outputs: dict  # name -> shape
    dim: Any  # the tile grid (launch_tiled) or the thread count (launch)
    tiled: bool = True
    dtype: Any = np.float64
    domains: dict = field(default_factory=dict)  # name -> callable(rng, shape) making the input
    warp_reverse: bool = True  # False: Warp's reverse mode is not the derivative (checked against FD only)


CASES = [
    TileCase("rows_map_sum", rows_map_sum, {"x": (3, T), "y": (3, T)}, {"out": (3,)}, 3),
    TileCase("reduce_add", reduce_add, {"x": (2, T)}, {"out": (2,)}, 2, warp_reverse=False),
    TileCase("gemm_f64", gemm, {"A": (2 * T, 3 * T), "B": (3 * T, T)}, {"C": (2 * T, T)}, (2, 1)),
    TileCase("gemm_f32", gemm, {"A": (T, 2 * T), "B": (2 * T, 2 * T)}, {"C": (T, 2 * T)}, (1, 2), dtype=np.float32),
    TileCase("views", views, {"x": (T, T), "r": (T,)}, {"out": (T, T)}, 1),
    TileCase("select", select, {"x": (2, T)}, {"out": (2, T)}, 2, warp_reverse=False),
    TileCase("scatter", scatter, {"x": (2, T)}, {"out": (2 * BD,), "acc": (T,)}, 2),
    TileCase("threads_form", threads_form, {"x": (2 * TB,)}, {"out": (2 * TB,)}, 2 * TB, tiled=False),
]


# ---- running the kernels -----------------------------------------------------------------------------
def _arr(a: np.ndarray, dtype: Any, grad: bool = False) -> wp.array:
    return wp.array(a, dtype=wp.dtype_from_numpy(dtype), device=DEV, requires_grad=grad)


def _launch(case: TileCase, kernel: Any, args: list) -> None:
    if case.tiled:
        wp.launch_tiled(kernel, dim=case.dim, inputs=args, block_dim=BD, device=DEV)
    else:
        wp.launch(kernel, dim=case.dim, inputs=args, block_dim=TB, device=DEV)


def _kernel(case: TileCase) -> Any:
    k = case.kernel
    if k.is_generic:
        t = wp.dtype_from_numpy(case.dtype)
        k = wp.overload(k, [wp.array2d(dtype=t)] * 3)
    return k


def _tangent_kernel(case: TileCase) -> Any:
    k = _kernel(case)
    diff = {n: True for n in k.adj.arg_types}
    return _tangent.tangent_kernel(k, diff, case.id)


def _outputs(case: TileCase, grad: bool = False) -> dict:
    return {n: _arr(np.zeros(s), case.dtype, grad) for n, s in case.outputs.items()}


def primal(case: TileCase, x: dict) -> dict:
    outs = _outputs(case)
    _launch(case, _kernel(case), [_arr(x[n], case.dtype) for n in case.inputs] + list(outs.values()))
    return {n: a.numpy().astype(np.float64) for n, a in outs.items()}


def tangent(case: TileCase, x: dict, t: dict, grad: bool = False) -> tuple[dict, dict, dict, dict]:
    """The tangent kernel's (outputs, output tangents), and the arrays (inputs, tangents) for a tape."""
    xa = {n: _arr(x[n], case.dtype, grad) for n in case.inputs}
    ta = {n: _arr(t[n], case.dtype, grad) for n in case.inputs}
    outs, touts = _outputs(case, grad), _outputs(case, grad)
    args = list(xa.values()) + list(outs.values()) + list(ta.values()) + list(touts.values())
    _launch(case, _tangent_kernel(case).kernel, args)
    return outs, touts, xa, ta


def draw(case: TileCase, seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    x = {n: case.domains.get(n, lambda r, s: r.uniform(-1.0, 1.0, size=s))(rng, s) for n, s in case.inputs.items()}
    t = {n: rng.uniform(-1.0, 1.0, size=s) for n, s in case.inputs.items()}
    return x, t


def reverse(case: TileCase, x: dict, v: dict) -> dict:
    """J^T v by Warp's reverse mode of the kernel."""
    xa = {n: _arr(x[n], case.dtype, True) for n in case.inputs}
    outs = _outputs(case, True)
    tape = wp.Tape()
    with tape:
        _launch(case, _kernel(case), list(xa.values()) + list(outs.values()))
    tape.backward(grads={outs[n]: _arr(v[n], case.dtype) for n in case.outputs})
    return {n: a.grad.numpy().astype(np.float64) for n, a in xa.items()}


def _dot(a: dict, b: dict) -> float:
    return float(sum(np.sum(a[n] * b[n]) for n in a))


def _tol(case: TileCase) -> float:
    return 1e-10 if case.dtype == np.float64 else 2e-4


# ---- first order -------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_tile_tangent_matches_finite_differences_and_reverse_mode(case):
    x, t = draw(case, 1)
    outs, touts, _, _ = tangent(case, x, t)
    ref = primal(case, x)
    tol = _tol(case)
    for n in case.outputs:  # the tangent kernel computes the kernel's outputs too
        np.testing.assert_allclose(outs[n].numpy(), ref[n], rtol=tol, atol=tol, err_msg=f"primal {n}")
    jt = {n: a.numpy().astype(np.float64) for n, a in touts.items()}
    if case.dtype == np.float64:
        eps = 1e-6
        plus = primal(case, {n: x[n] + eps * t[n] for n in x})
        minus = primal(case, {n: x[n] - eps * t[n] for n in x})
        for n in case.outputs:
            fd = (plus[n] - minus[n]) / (2 * eps)
            np.testing.assert_allclose(jt[n], fd, rtol=1e-6, atol=1e-7 * max(1.0, np.abs(fd).max()), err_msg=n)
    if not case.warp_reverse:
        return
    v = {n: np.random.default_rng(2).uniform(-1.0, 1.0, size=s) for n, s in case.outputs.items()}
    jtv = reverse(case, x, v)
    lhs, rhs = _dot(v, jt), _dot(jtv, t)
    assert abs(lhs - rhs) <= tol * 10 * max(1.0, abs(lhs)), (lhs, rhs)


# ---- second order ------------------------------------------------------------------------------------
SECOND = [c for c in CASES if c.dtype == np.float64 and c.warp_reverse]


@pytest.mark.parametrize("case", SECOND, ids=[c.id for c in SECOND])
def test_tile_tangent_kernel_adjoint_is_second_order(case):
    x, t = draw(case, 3)
    rng = np.random.default_rng(4)
    ct = {n: rng.uniform(-1.0, 1.0, size=s) for n, s in case.outputs.items()}
    w = {n: rng.uniform(-1.0, 1.0, size=s) for n, s in case.inputs.items()}
    tape = wp.Tape()
    with tape:
        outs, touts, xa, ta = tangent(case, x, t, grad=True)
    grads = {a: _arr(np.zeros(case.outputs[n]), case.dtype) for n, a in outs.items()}
    grads.update({touts[n]: _arr(ct[n], case.dtype) for n in case.outputs})
    tape.backward(grads=grads)
    # with respect to the tangents: J^T ct, as reverse mode of the kernel gives it
    jtct = reverse(case, x, ct)
    for n in case.inputs:
        np.testing.assert_allclose(ta[n].grad.numpy(), jtct[n], rtol=1e-9, atol=1e-9, err_msg=f"J^T ct, {n}")
    # with respect to the primal inputs: w . grad = d/de ct . J(x + e w) t
    eps = 1e-6

    def ct_jt(xs: dict) -> float:
        _, tout, _, _ = tangent(case, xs, t)
        return _dot(ct, {n: a.numpy() for n, a in tout.items()})

    fd = (ct_jt({n: x[n] + eps * w[n] for n in x}) - ct_jt({n: x[n] - eps * w[n] for n in x})) / (2 * eps)
    got = _dot(w, {n: xa[n].grad.numpy() for n in case.inputs})
    assert abs(got - fd) <= 1e-6 * max(1.0, abs(fd)), (got, fd)


# ---- refusals ----------------------------------------------------------------------------------------
@wp.kernel
def factor(A: wp.array2d(dtype=wp.float64), out: wp.array2d(dtype=wp.float64)):
    a = wp.tile_load(A, shape=(T, T))
    wp.tile_store(out, wp.tile_cholesky(a))


@wp.kernel
def solve(A: wp.array2d(dtype=wp.float64), out: wp.array2d(dtype=wp.float64)):
    a = wp.tile_load(A, shape=(T, T))
    wp.tile_store(out, wp.tile_lower_solve(a, a))


@pytest.mark.parametrize(("kernel", "builtin"), [(factor, "tile_cholesky"), (solve, "tile_lower_solve")])
def test_tile_builtin_without_rule_is_refused_by_name(kernel, builtin):
    o = interop.op(kernel, block_dim=BD, name=f"tilefwd::{builtin}")
    with pytest.raises(
        interop.UnsupportedError, match=rf"op .tilefwd::{builtin}.: .*tile builtin 'wp.{builtin}'.*{kernel.key}"
    ):
        o.jvp(np.eye(T), tangents=[np.eye(T)], launch_dims=(1,))


# ---- through interop ops -------------------------------------------------------------------------------
def _ops_cases():
    return [c for c in CASES if c.id in ("rows_map_sum", "gemm_f64", "threads_form")]


@pytest.mark.parametrize("fw", ["jax", "torch"])
@pytest.mark.parametrize("case", _ops_cases(), ids=[c.id for c in _ops_cases()])
def test_tile_op_jvp_in_frameworks(fw, case):
    """jax.jvp / torch.func.jvp of a tile op: the tangent op launches as the kernel (its block_dim, its
    tile grid) and equals the tangent kernel launched by Warp."""
    x, t = draw(case, 5)
    o = interop.op(
        _kernel(case), block_dim=BD if case.tiled else TB, name=f"tilefwd::{case.id}", outputs=list(case.outputs)
    )
    assert o.tangent().description.block_dim == o.description.block_dim
    assert o.tangent().description.tile_form == o.description.tile_form
    _, touts, _, _ = tangent(case, x, t)
    want = {n: a.numpy() for n, a in touts.items()}
    dims = {"launch_dims": case.dim if isinstance(case.dim, tuple) else (case.dim,)}
    if case.id == "gemm_f64":
        dims["output_dims"] = {"C": case.outputs["C"]}
    names = list(case.inputs)
    if fw == "jax":
        jax = pytest.importorskip("jax")
        with jax.enable_x64(True):  # this test's arrays are float64; the setting goes back after it
            import jax.numpy as jnp

            with jax.default_device(jax.devices("cpu")[0]):
                _, got = jax.jvp(
                    lambda *a: o(*a, **dims),
                    tuple(jnp.asarray(x[n]) for n in names),
                    tuple(jnp.asarray(t[n]) for n in names),
                )
    else:
        torch = pytest.importorskip("torch")
        _, got = torch.func.jvp(
            lambda *a: o(*a, **dims),
            tuple(torch.tensor(x[n], device="cpu") for n in names),
            tuple(torch.tensor(t[n], device="cpu") for n in names),
        )
    (n,) = case.outputs
    np.testing.assert_allclose(np.asarray(got), want[n], rtol=1e-12, atol=1e-12)
