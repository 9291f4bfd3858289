"""Every example of the JAX section of Warp's interoperability guide, through interop's API.

Adapted to our API: ``interop.op(kernel, outputs=..., in_out=[...])`` instead of
``jax_kernel(kernel, num_outputs=..., in_out_argnames=...)``; a single output comes back
bare (not as a 1-tuple); scalars may be traced; gradients need no ``enable_backward``.
Each example is checked against an independent NumPy computation.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest
from guide_kernels import add_float_kernel as add_kernel
from guide_kernels import add_kernel as add_int_kernel
from guide_kernels import (
    diagonal_kernel,
    example_func,
    lookup_kernel,
    matmul_kernel,
    multi_output,
    rowsum_kernel,
    scale_kernel,
    scale_sum_square,
    scale_vec_kernel,
    sincos_kernel,
    triple_kernel,
    vecmat_kernel,
)

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from _devices import jax_device  # noqa: E402
from catalogue import funky_kernel  # noqa: E402 (the guide's shape-guarded kernel)

import interop  # noqa: E402


# ---- input and output semantics -----------------------------------------------------
def test_triple():
    jax_triple = interop.op(triple_kernel)

    @jax.jit
    def f():
        x = jnp.arange(0, 64, dtype=jnp.float32, device=jax_device("cpu"))
        return jax_triple(x)

    np.testing.assert_array_equal(np.asarray(f()), 3.0 * np.arange(64, dtype=np.float32))


def test_add_int():
    jax_add = interop.op(add_int_kernel)

    @jax.jit
    def f():
        n = 10
        return jax_add(
            jnp.arange(n, dtype=jnp.int32, device=jax_device("cpu")),
            jnp.ones(n, dtype=jnp.int32, device=jax_device("cpu")),
        )

    out = f()
    assert out.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(out), np.arange(10) + 1)


def test_sincos():
    jax_sincos = interop.op(sincos_kernel, outputs=2)

    @jax.jit
    def f():
        a = jnp.linspace(0, 2 * math.pi, 32, device=jax_device("cpu"))
        return jax_sincos(a)

    s, c = f()
    a = np.linspace(0, 2 * math.pi, 32, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(s), np.sin(a), atol=1e-6)
    np.testing.assert_allclose(np.asarray(c), np.cos(a), atol=1e-6)


def test_diagonal_no_inputs():
    jax_diagonal = interop.op(diagonal_kernel)

    @jax.jit
    def f():
        return jax_diagonal(launch_dims=4, framework="jax")

    out = f()
    assert out.shape == (4, 3, 3)
    np.testing.assert_array_equal(np.asarray(out), np.tile(np.diag([1.0, 2.0, 3.0]), (4, 1, 1)))


def test_scale_static_and_traced_scalar():
    jax_scale = interop.op(scale_kernel)
    a = jnp.arange(10, dtype=jnp.float32, device=jax_device("cpu"))
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda: jax_scale(jnp.arange(10, dtype=jnp.float32, device=jax_device("cpu")), 2.0))()),
        2.0 * np.arange(10),
    )
    # the guide's "ERROR: traced scalar argument" works here: the scalar is a 0-d operand
    f = jax.jit(lambda a, s: jax_scale(a, s))
    np.testing.assert_array_equal(np.asarray(f(a, 2.0)), 2.0 * np.arange(10))
    np.testing.assert_array_equal(np.asarray(f(a, 5.0)), 5.0 * np.arange(10))
    assert f._cache_size() == 1  # no retrace per value
    g = partial(jax.jit, static_argnames=["s"])(lambda a, s: jax_scale(a, s))
    np.testing.assert_array_equal(np.asarray(g(a, s=2.0)), 2.0 * np.arange(10))


# ---- launch and output dimensions -----------------------------------------------------
def test_matmul_launch_dims():
    jax_matmul = interop.op(matmul_kernel)

    @jax.jit
    def f():
        a1 = jnp.full((3, 2), 2, dtype=jnp.float32, device=jax_device("cpu"))
        b1 = jnp.full((2, 4), 3, dtype=jnp.float32, device=jax_device("cpu"))
        a2 = jnp.full((4, 2), 2, dtype=jnp.float32, device=jax_device("cpu"))
        b2 = jnp.full((2, 3), 3, dtype=jnp.float32, device=jax_device("cpu"))
        return jax_matmul(a1, b1, launch_dims=(3, 4)), jax_matmul(a2, b2, launch_dims=(4, 3))

    r1, r2 = f()
    np.testing.assert_array_equal(np.asarray(r1), np.full((3, 4), 12.0))
    np.testing.assert_array_equal(np.asarray(r2), np.full((4, 3), 12.0))


def test_funky_output_dims():
    jax_funky = interop.op(funky_kernel, outputs=2)
    a = jnp.arange(6, dtype=jnp.float32, device=jax_device("cpu"))
    an = np.arange(6, dtype=np.float32)
    b, c = jax_funky(a, output_dims=6)
    np.testing.assert_array_equal(np.asarray(b), an + 1)
    np.testing.assert_array_equal(np.asarray(c), 2 * an)
    b, c = jax.jit(lambda a: jax_funky(a, launch_dims=8, output_dims={"b": 8, "c": 3}))(a)
    assert b.shape == (8,) and c.shape == (3,)
    np.testing.assert_array_equal(np.asarray(b), an[np.arange(8) % 6] + 1)
    np.testing.assert_array_equal(np.asarray(c), 2 * an[:3])
    # output_dims bigger than the launch: the untouched tail is zero-filled, never garbage
    b, c = jax_funky(a, launch_dims=2, output_dims={"b": 4, "c": 4})
    np.testing.assert_array_equal(np.asarray(b), [1, 2, 0, 0])


def test_vecmat_packing_and_output_dims_conventions():
    jax_vecmat = interop.op(vecmat_kernel, outputs=3)
    n = 10
    rng = np.random.default_rng(0)
    an, bn, cn = (rng.random(s, dtype=np.float32) for s in ((n,), (n, 3), (n, 2, 2)))
    a, b, c = (
        jnp.asarray(an, device=jax_device("cpu")),
        jnp.asarray(bn, device=jax_device("cpu")),
        jnp.asarray(cn, device=jax_device("cpu")),
    )
    ref = (2 * an, bn * an[:, None], np.transpose(cn, (0, 2, 1)))
    calls = [
        lambda: jax_vecmat(a, b, c),
        lambda: jax_vecmat(a, b, c, output_dims=n),
        lambda: jax_vecmat(a, b, c, output_dims={"d": n, "e": n, "f": n}),
        lambda: jax_vecmat(a, b, c, output_dims={"d": n, "e": (n, 3), "f": (n, 2, 2)}),
        lambda: jax_vecmat(a, b, c, output_dims={"d": a.shape, "e": b.shape, "f": c.shape}),
    ]
    for call in calls:
        for o, r in zip(jax.jit(call)(), ref):
            assert o.shape == r.shape
            np.testing.assert_allclose(np.asarray(o), r, rtol=1e-6)


# ---- vmap ------------------------------------------------------------------------------
def test_vmap_add():
    jax_add = interop.op(add_kernel)
    a = jnp.arange(3 * 4, dtype=jnp.float32, device=jax_device("cpu")).reshape((3, 4))
    b = jnp.ones(3 * 4, dtype=jnp.float32, device=jax_device("cpu")).reshape((3, 4))
    out = jax.jit(jax.vmap(jax_add))(a, b)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(a) + 1)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_vmap_rowsum_in_out(axis):
    jax_rowsum = interop.op(rowsum_kernel, in_out=["sums"])
    matrices = jnp.arange(2 * 3 * 4, dtype=jnp.float32, device=jax_device("cpu")).reshape((2, 3, 4))
    moved = np.moveaxis(np.asarray(matrices), axis, 0)
    sums = jnp.full(moved.shape[:2], 0.5, dtype=jnp.float32, device=jax_device("cpu"))
    out = jax.jit(jax.vmap(jax_rowsum, in_axes=(axis, 0)))(matrices, sums)
    np.testing.assert_allclose(np.asarray(out), moved.sum(-1) + 0.5)
    # an unbatched accumulator is broadcast, not shared between batch elements
    out = jax.jit(jax.vmap(jax_rowsum, in_axes=(axis, None)))(
        matrices, jnp.ones(moved.shape[1], jnp.float32, device=jax_device("cpu"))
    )
    np.testing.assert_allclose(np.asarray(out), moved.sum(-1) + 1.0)


@pytest.mark.parametrize("axis,n", [(0, 50), (1, 20)])
def test_vmap_lookup_partial_launch_dims(axis, n):
    jax_lookup = interop.op(lookup_kernel)
    N = 100
    table = jnp.arange(N, dtype=jnp.float32, device=jax_device("cpu"))
    indices = jax.random.randint(jax.device_put(jax.random.key(42), jax_device("cpu")), (20, 50), 0, N, dtype=jnp.int32)
    out = jax.jit(jax.vmap(partial(jax_lookup, launch_dims=n), in_axes=(None, axis)))(table, indices)
    np.testing.assert_array_equal(np.asarray(out), np.moveaxis(np.asarray(indices), axis, 0).astype(np.float32))


# ---- autodiff ----------------------------------------------------------------------------
def test_grad_scale_sum_square_including_scalar():
    jax_scale = interop.op(scale_sum_square)

    def loss(a, b, s):
        return jnp.sum(jax_scale(a, b, s))

    n = 16
    a = jnp.arange(n, dtype=jnp.float32, device=jax_device("cpu"))
    b = jnp.ones(n, dtype=jnp.float32, device=jax_device("cpu"))
    da, db, ds = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(a, b, 2.0)
    an, bn = np.arange(n, dtype=np.float64), np.ones(n)
    inner = an * 2.0 + bn
    np.testing.assert_allclose(np.asarray(da), 2 * inner * 2.0, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(db), 2 * inner, rtol=1e-5)
    np.testing.assert_allclose(float(ds), np.sum(2 * inner * an), rtol=1e-5)  # a real scalar gradient
    # static scalar, as in the guide
    da2, db2 = partial(jax.jit, static_argnames=["s"])(jax.grad(loss, argnums=(0, 1)))(a, b, s=2.0)
    np.testing.assert_allclose(np.asarray(da2), np.asarray(da))


def test_grad_multi_output():
    jax_multi = interop.op(multi_output, outputs=2)

    def caller(a, b, s):
        c, d = jax_multi(a, b, s)
        return jnp.sum(c + d)

    n = 16
    a = jnp.arange(n, dtype=jnp.float32, device=jax_device("cpu"))
    b = jnp.ones(n, dtype=jnp.float32, device=jax_device("cpu"))
    da, db = jax.grad(caller, argnums=(0, 1))(a, b, 2.0)
    np.testing.assert_allclose(np.asarray(da), 2 * np.arange(n) + 2.0, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(db), np.arange(n) * 2.0, rtol=1e-6)
    # only one output used: the other cotangent is a symbolic zero
    da, db = jax.grad(lambda a, b: jnp.sum(jax_multi(a, b, 2.0)[1]), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(np.asarray(da), 2.0 * np.ones(n))
    np.testing.assert_allclose(np.asarray(db), np.arange(n) * 2.0)


def test_grad_vec2():
    jax_vec = interop.op(scale_vec_kernel)
    a2 = jnp.arange(10, dtype=jnp.float32, device=jax_device("cpu")).reshape((5, 2))
    (da2,) = jax.grad(lambda a, s: jnp.sum(jax_vec(a, s)), argnums=(0,))(a2, 3.0)
    np.testing.assert_array_equal(np.asarray(da2), np.full((5, 2), 3.0))


# ---- annotated Python functions (jax_callable) ------------------------------------------
def test_python_function_op():
    jax_func = interop.op(example_func, outputs=2)

    @jax.jit
    def f():
        a = jnp.arange(10, dtype=jnp.float32, device=jax_device("cpu"))
        b = jnp.arange(10, dtype=jnp.float32, device=jax_device("cpu")).reshape((5, 2))
        return jax_func(a, b, 2.0, output_dims={"c": a.shape, "d": b.shape})

    c, d = f()
    np.testing.assert_array_equal(np.asarray(c), 2.0 * np.arange(10))
    np.testing.assert_array_equal(np.asarray(d), 2.0 * np.arange(10).reshape(5, 2))
    # and, unlike jax_callable, it has a gradient (wp.Tape)
    ga, gb = jax.grad(
        lambda a, b: jnp.sum(jax_func(a, b, 2.0)[0]) + jnp.sum(jax_func(a, b, 2.0)[1] ** 2), argnums=(0, 1)
    )(
        jnp.arange(10, dtype=jnp.float32, device=jax_device("cpu")),
        jnp.ones((5, 2), jnp.float32, device=jax_device("cpu")),
    )
    np.testing.assert_allclose(np.asarray(ga), np.full(10, 2.0))
    np.testing.assert_allclose(np.asarray(gb), np.full((5, 2), 8.0))
