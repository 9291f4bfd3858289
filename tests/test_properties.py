"""Property-based tests (hypothesis): generated shapes, layouts, dtypes and scalars through every
installed framework and its autograd. Each case equals an independent NumPy reference (values and
gradients) or raises one of the package's documented errors; inputs are never written to, outputs
keep the inputs' dtype (no silent cast) and in-out arrays are updated in place (no silent copy).

Example counts: INTEROP_PROPERTY_EXAMPLES per test and framework (CI default below; ``nox -s
properties`` runs 10,000+ per framework). Kernels come from the one catalogue (tests/catalogue.py).
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest
import warp as wp
from _devices import jax_device
from catalogue import PROPERTY_INNER, PROPERTY_SCALARS, affine2d_op, copy_op, rowsum_op, to_fw, to_np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import interop

EXAMPLES = int(os.environ.get("INTEROP_PROPERTY_EXAMPLES", "25"))
DOCUMENTED = (interop.ArgumentError, interop.UnsupportedError)
FRAMEWORKS = [f for f in ("numpy", "torch", "jax", "paddle") if f == "numpy" or importlib.util.find_spec(f)]
AUTOGRAD = [f for f in FRAMEWORKS if f != "numpy"]

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("INTEROP_PROPERTY_RANDOM") != "1",  # CI: the same cases every run
    suppress_health_check=list(HealthCheck),
    database=None,
)
pytestmark = pytest.mark.timeout(3600)


# ---- layouts: the same view taken natively in each framework ------------------------------------
@st.composite
def layouts(draw, max_side=6):
    """A 2-D view of a larger base: offsets, steps, transpose, flip (negative strides), expand (stride 0)."""
    rows, cols = draw(st.integers(0, max_side)), draw(st.integers(0, max_side))
    step = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    off = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    base = (off[0] + max(rows - 1, 0) * step[0] + 1, off[1] + max(cols - 1, 0) * step[1] + 1)
    return {
        "base": base,
        "slice": (slice(off[0], off[0] + rows * step[0], step[0]), slice(off[1], off[1] + cols * step[1], step[1])),
        "transpose": draw(st.booleans()),
        "flip": draw(st.booleans()),
        "expand": draw(st.booleans()) and rows >= 1,
    }


def _ops(fw):
    if fw == "torch":
        import torch

        return torch, lambda v: v.t(), lambda v: torch.flip(v, [0]), lambda v, shape: v[:1].expand(*shape)
    if fw == "jax":
        import jax.numpy as jnp

        return jnp, lambda v: v.T, lambda v: v[::-1], lambda v, shape: jnp.broadcast_to(v[:1], shape)
    if fw == "paddle":
        import paddle

        return (
            paddle,
            lambda v: paddle.transpose(v, [1, 0]),
            lambda v: paddle.flip(v, [0]),
            lambda v, shape: paddle.expand(v[:1], shape),
        )
    return np, lambda v: v.T, lambda v: v[::-1], lambda v, shape: np.broadcast_to(v[:1], shape)


def view(fw, base, lay):
    """Apply ``lay`` to framework array ``base`` with the framework's own operations."""
    _, transpose, flip, expand = _ops(fw)
    v = base[lay["slice"]]
    if lay["transpose"]:
        v = transpose(v)
    if lay["flip"]:
        v = flip(v)
    if lay["expand"] and v.shape[0] >= 1:
        v = expand(v, tuple(v.shape))
    return v


def draw_float_dtype(fw, data):
    """float32 or float64; JAX without x64 has only float32."""
    dt = data.draw(st.sampled_from([np.float32, np.float64]))
    if fw == "jax" and not __import__("jax").config.jax_enable_x64:
        dt = np.float32
    return dt


def base_grad(lay, base_shape, grad_view):
    """The gradient of the base given the gradient of its view: scatter through the same view of indices."""
    idx = view("numpy", np.arange(int(np.prod(base_shape))).reshape(base_shape), lay)
    g = np.zeros(int(np.prod(base_shape)), np.float64)
    np.add.at(g, idx.ravel(), np.asarray(grad_view, np.float64).ravel())
    return g.reshape(base_shape)


def tol(dt):
    return {"rtol": 1e-5, "atol": 1e-5} if dt == np.float32 else {"rtol": 1e-10, "atol": 1e-10}


# ---- forward: layouts x frameworks ------------------------------------------------------------------
@pytest.mark.parametrize("fw", FRAMEWORKS)
@SETTINGS
@given(data=st.data())
def test_affine2d_layouts(fw, data):
    """out = a * s + b * b over generated 2-D views of a and b (same shape, independent layouts)."""
    dt = draw_float_dtype(fw, data)
    la = data.draw(layouts())
    rows, cols = view("numpy", np.zeros(la["base"]), la).shape
    lb = data.draw(layouts())
    # b's view must have a's shape: rebuild its slice for that shape
    lb["transpose"] = False
    lb["expand"] = lb["expand"] and rows >= 1
    s0, s1 = lb["slice"][0].step, lb["slice"][1].step
    lb["slice"] = (slice(0, rows * s0, s0), slice(0, cols * s1, s1))
    lb["base"] = (max(rows * s0, 1), max(cols * s1, 1))
    s = data.draw(st.floats(-4, 4, allow_nan=False, width=32))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    a_base = rng.uniform(-1, 1, la["base"]).astype(dt)
    b_base = rng.uniform(-1, 1, lb["base"]).astype(dt)
    a_np, b_np = view("numpy", a_base, la), view("numpy", b_base, lb)
    want = a_np.astype(np.float64) * np.float64(dt(s)) + b_np.astype(np.float64) ** 2
    A, B = to_fw(fw, a_base), to_fw(fw, b_base)
    if to_np(A).dtype != dt:
        event("framework converts the dtype")
        return  # the framework converted on the way in (JAX without x64): nothing of ours to test
    a, b = view(fw, A, la), view(fw, B, lb)
    try:
        out = affine2d_op(a, b, s)
    except DOCUMENTED as e:
        assert "affine2d" in str(e)
        event(f"documented error: {str(e)[:60]}")
        return
    got = to_np(out)
    assert got.dtype == np.dtype(dt)  # no silent cast
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, **tol(dt))
    event("checked")
    np.testing.assert_array_equal(to_np(A), a_base)  # inputs never written
    np.testing.assert_array_equal(to_np(B), b_base)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@SETTINGS
@given(data=st.data())
def test_copy_every_dtype(fw, data):
    """The generic copy keeps every Warp scalar type and vec/mat inner shape, lengths 0, 1, n, steps."""
    kinds = [("scalar", t) for t in PROPERTY_SCALARS] + [("inner", k) for k in PROPERTY_INNER]
    kind, what = data.draw(st.sampled_from(kinds))
    n = data.draw(st.sampled_from([0, 1, 2, 5, 17]))
    step = data.draw(st.integers(1, 3))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    if kind == "scalar":
        np_dt = np.dtype(wp.dtype_to_numpy(what))
        base = (rng.uniform(0, 100, n * step) > 50) if np_dt == np.bool_ else rng.integers(0, 100, n * step)
        base = base.astype(np_dt)
    else:
        np_dt = np.dtype(wp.dtype_to_numpy(PROPERTY_INNER[what]._wp_scalar_type_))
        base = rng.uniform(-1, 1, (n * step, *what)).astype(np_dt)
    try:
        X = to_fw(fw, base)
    except (TypeError, ValueError, RuntimeError):
        event("framework cannot hold the dtype")
        return  # the framework itself cannot hold this dtype (Paddle's unsigned types...)
    if to_np(X).dtype != base.dtype:
        event("framework converts the dtype")
        return  # the framework converted on the way in (JAX without x64): nothing of ours to test
    x = X[::step]
    want = base[::step]
    try:
        out = copy_op(x)
    except DOCUMENTED as e:
        assert "copy" in str(e)
        event(f"documented error: {str(e)[:60]}")
        return
    got = to_np(out)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(to_np(X), base)
    event("checked")


@pytest.mark.parametrize("fw", [f for f in FRAMEWORKS if f in ("numpy", "torch")])
@SETTINGS
@given(data=st.data())
def test_in_out_updated_in_place(fw, data):
    """rowsum: acc += 3 sum_j x^2 over generated layouts of x; acc is the caller's buffer, x untouched."""
    lx = data.draw(layouts())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x_base = rng.uniform(-1, 1, lx["base"]).astype(np.float32)
    x_np = view("numpy", x_base, lx)
    acc0 = rng.uniform(-1, 1, x_np.shape[0]).astype(np.float32)
    want = acc0.astype(np.float64) + 3 * (x_np.astype(np.float64) ** 2).sum(axis=1)
    X, acc = to_fw(fw, x_base), to_fw(fw, acc0)
    ptr = interop._frameworks.data_ptr(acc) if acc.size else None
    try:
        out = rowsum_op(view(fw, X, lx), acc)
    except DOCUMENTED as e:
        assert "rowsum" in str(e)
        event(f"documented error: {str(e)[:60]}")
        return
    assert out is acc or (ptr is not None and interop._frameworks.data_ptr(out) == ptr) or not acc0.size
    np.testing.assert_allclose(to_np(acc), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(to_np(X), x_base)
    event("checked")


# ---- autograd: values and gradients against the formula, through the same views --------------------
def _grads(fw, la, lb, a_base, b_base, s, w):
    """(out, d/d a_base, d/d b_base, d/d s) of sum(w * affine2d(view(a), view(b), s))."""
    if fw == "torch":
        import torch

        A = torch.tensor(a_base, requires_grad=True, device="cpu")
        B = torch.tensor(b_base, requires_grad=True, device="cpu")
        S = torch.tensor(s, dtype=A.dtype, requires_grad=True, device="cpu")
        out = affine2d_op(view(fw, A, la), view(fw, B, lb), S)
        (out * torch.tensor(w, device="cpu")).sum().backward()
        return to_np(out), to_np(A.grad), to_np(B.grad), float(S.grad)
    if fw == "jax":
        import jax
        import jax.numpy as jnp

        jit = la["transpose"]  # half the cases under jax.jit

        def loss(A, B, S):
            return (affine2d_op(view(fw, A, la), view(fw, B, lb), S) * w).sum()

        g = jax.grad(loss, argnums=(0, 1, 2))
        if jit:
            g = jax.jit(g)
        A, B = jnp.asarray(a_base, device=jax_device("cpu")), jnp.asarray(b_base, device=jax_device("cpu"))
        S = jnp.asarray(s, dtype=A.dtype, device=jax_device("cpu"))
        ga, gb, gs = g(A, B, S)
        out = affine2d_op(view(fw, A, la), view(fw, B, lb), S)
        return to_np(out), to_np(ga), to_np(gb), float(gs)
    import paddle

    A, B = to_fw(fw, a_base, requires_grad=True), to_fw(fw, b_base, requires_grad=True)
    S = paddle.to_tensor(np.asarray(s, a_base.dtype), stop_gradient=False, place=paddle.CPUPlace())
    out = affine2d_op(view(fw, A, la), view(fw, B, lb), S)
    (out * paddle.to_tensor(w, place=paddle.CPUPlace())).sum().backward()
    return to_np(out), to_np(A.grad), to_np(B.grad), float(S.grad)


@pytest.mark.parametrize("fw", AUTOGRAD)
@SETTINGS
@given(data=st.data())
def test_affine2d_gradients(fw, data):
    """d/da = s w, d/db = 2 b w, d/ds = sum(a w), scattered back through the views onto the leaves."""
    dt = draw_float_dtype(fw, data)
    la = data.draw(layouts(max_side=4))
    rows, cols = view("numpy", np.zeros(la["base"]), la).shape
    lb = {"base": (max(rows, 1), max(cols, 1)), "slice": (slice(0, rows), slice(0, cols))}
    lb.update(transpose=False, flip=data.draw(st.booleans()), expand=data.draw(st.booleans()) and rows >= 1)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    a_base = rng.uniform(-1, 1, la["base"]).astype(dt)
    b_base = rng.uniform(-1, 1, lb["base"]).astype(dt)
    s = float(dt(data.draw(st.floats(-3, 3, allow_nan=False, width=32))))
    a_np, b_np = view("numpy", a_base, la), view("numpy", b_base, lb)
    w = rng.uniform(-1, 1, a_np.shape).astype(dt)
    try:
        out, ga, gb, gs = _grads(fw, la, lb, a_base, b_base, s, w)
    except DOCUMENTED as e:
        assert "affine2d" in str(e)
        event(f"documented error: {str(e)[:60]}")
        return
    t = tol(dt) if dt == np.float64 else {"rtol": 1e-4, "atol": 1e-4}
    np.testing.assert_allclose(out, a_np * s + b_np.astype(np.float64) ** 2, **t)
    np.testing.assert_allclose(ga, base_grad(la, a_base.shape, s * w), **t)
    np.testing.assert_allclose(gb, base_grad(lb, b_base.shape, 2 * b_np * w), **t)
    np.testing.assert_allclose(gs, float((a_np.astype(np.float64) * w).sum()), **t)
    event("checked")
