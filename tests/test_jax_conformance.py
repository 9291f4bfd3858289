"""The conformance catalogue through JAX: values against the NumPy reference, gradients
against finite differences, eager against jitted, and ``jax.test_util.check_grads``."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from _devices import jax_device  # noqa: E402
from catalogue import (  # noqa: E402
    BF16,
    BF16_GRAD_TOL,
    BF16_VALUE_TOL,
    CASE_IDS,
    case,
    fd_grad,
    is_float_dtype,
    loss_weights,
    reference_of,
)
from jax.test_util import check_grads  # noqa: E402

TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-9, atol=1e-11), BF16.type: BF16_VALUE_TOL}


def _params():
    out = []
    for cid in CASE_IDS:
        for dt in case(cid).dtypes:
            out.append(pytest.param(cid, dt, id=f"{cid}-{np.dtype(dt).name}"))
    return out


def _to_jax(args, device: str = "cpu"):
    where = jax.devices("gpu")[0] if device != "cpu" else None
    return [jax.device_put(jnp.asarray(a), where) if isinstance(a, np.ndarray) else a for a in args]


@pytest.mark.parametrize("cid,dt", _params())
def test_values_and_gradients(cid, dt, device):
    from _cuda import require_cuda

    require_cuda("jax", device)
    c = case(cid)
    with jax.enable_x64(dt == np.float64):
        rng = np.random.default_rng(0)
        args = c.make(rng, dt)
        ref = reference_of(c, args)
        jargs = _to_jax(args, device)
        eager = c.op(*jargs, **c.call_kwargs)
        eager = eager if isinstance(eager, tuple) else (eager,)
        jitted = jax.jit(lambda *a: c.op(*a, **c.call_kwargs))(*jargs)
        jitted = jitted if isinstance(jitted, tuple) else (jitted,)
        for e, j, r in zip(eager, jitted, ref):
            assert e.dtype == np.dtype(dt) and e.shape == r.shape
            np.testing.assert_allclose(np.asarray(e, np.float64), r, **TOL[dt])
            np.testing.assert_array_equal(np.asarray(e), np.asarray(j))
        # in-out arrays are returned as new arrays; the caller's array is unchanged (JAX is functional)
        for k in c.in_out:
            np.testing.assert_array_equal(np.asarray(jargs[k]), args[k])
        if not c.differentiable:
            return
        weights = loss_weights(c, ref)
        fd = fd_grad(c, args, weights)
        diff = [k for k, a in enumerate(args) if isinstance(a, np.ndarray) and is_float_dtype(a.dtype)]

        def loss(*arrays):
            full = list(jargs)
            for k, a in zip(diff, arrays):
                full[k] = a
            outs = c.op(*full, **c.call_kwargs)
            outs = outs if isinstance(outs, tuple) else (outs,)
            return sum(jnp.sum(jnp.asarray(w, o.dtype, device=jax_device(device)) * o) for w, o in zip(weights, outs))

        grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(diff)))))(*[jargs[k] for k in diff])
        tol = dict(rtol=1e-3, atol=1e-3) if dt == np.float32 else dict(rtol=1e-6, atol=1e-7)
        if dt is BF16.type:
            tol = BF16_GRAD_TOL
        for k, g in zip(diff, grads):
            assert g.dtype == jargs[k].dtype
            np.testing.assert_allclose(np.asarray(g, np.float64), fd[k], **tol, err_msg=f"gradient of argument {k}")


@pytest.mark.parametrize(
    "cid", ["scalar", "vec3", "mat33", "function", "subscript", "overload_float32", "outputs_middle", "tile"]
)
def test_check_grads(cid):
    c = case(cid)
    with jax.enable_x64(True):
        # the catalogue's kernels are float32: JAX's numerical check runs in float32, so a loose tolerance
        args = _to_jax(c.make(np.random.default_rng(1), np.float32))
        diff = [k for k, a in enumerate(args) if isinstance(a, jax.Array) and is_float_dtype(a.dtype)]

        def f(*arrays):
            full = list(args)
            for k, a in zip(diff, arrays):
                full[k] = jnp.asarray(a, device=jax_device("cpu"))  # the numerical check passes NumPy arrays
            return c.op(*full, **c.call_kwargs)

        check_grads(f, [args[k] for k in diff], order=1, modes=["rev"], atol=2e-2, rtol=2e-2, eps=1e-2)


@pytest.mark.parametrize(
    "cid", ["subscript", "overload_float32", "outputs_middle", "in_out_first", "tile", "tile_block_dim_per_call"]
)
def test_vmap_and_grad_of_vmap(cid):
    """jax.vmap over kernels as others write them (issue 8): each batch element as the NumPy reference,
    and the gradient of the batched call as finite differences per element."""
    c = case(cid)
    batch = [c.make(np.random.default_rng(20 + b), np.float32) for b in range(2)]
    arrays = [k for k, a in enumerate(batch[0]) if isinstance(a, np.ndarray)]
    diff = [k for k in arrays if is_float_dtype(batch[0][k].dtype)]
    stacked = {k: jnp.asarray(np.stack([args[k] for args in batch]), device=jax_device("cpu")) for k in arrays}

    def call(*xs):
        full = list(batch[0])
        for k, x in zip(arrays, xs):
            full[k] = x
        out = c.op(*full, **c.call_kwargs)
        return out if isinstance(out, tuple) else (out,)

    outs = jax.jit(jax.vmap(call))(*[stacked[k] for k in arrays])
    for b, args in enumerate(batch):
        ref = c.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        for o, r in zip(outs, ref):
            np.testing.assert_allclose(np.asarray(o[b]), r, **TOL[np.float32])
    weights = loss_weights(c, c.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in batch[0]]))

    def loss(*dxs):
        xs = dict(stacked)
        xs.update(zip(diff, dxs))
        outs = jax.vmap(call)(*[xs[k] for k in arrays])
        return sum(jnp.sum(jnp.asarray(w, o.dtype, device=jax_device("cpu")) * o) for w, o in zip(weights, outs))

    grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(diff)))))(*[stacked[k] for k in diff])
    for b, args in enumerate(batch):
        fd = fd_grad(c, args, weights)
        for k, g in zip(diff, grads):
            np.testing.assert_allclose(np.asarray(g[b]), fd[k], rtol=1e-3, atol=1e-3, err_msg=f"arg {k}, element {b}")
