"""bfloat16 beyond the conformance catalogue (whose "bfloat16" and "generic" cases check values and
array gradients in every framework): scalar gradients, torch.compile, jax.jit/vmap, and the errors
where one side has no bfloat16 or the kernel wants another dtype (arrays are never cast).

NumPy has no bfloat16 of its own: NumPy arrays of ``ml_dtypes.bfloat16`` (JAX's NumPy bfloat16)
stand for it, and Warp arrays of ``wp.bfloat16``.
"""

import importlib.util
import typing

import ml_dtypes
import numpy as np
import pytest
import warp as wp
from _devices import jax_device
from catalogue import BF16_GRAD_TOL, BF16_VALUE_TOL

import interop

BF16 = np.dtype(ml_dtypes.bfloat16)


@wp.kernel
def scale_bf16(x: wp.array(dtype=wp.bfloat16), s: wp.bfloat16, out: wp.array(dtype=wp.bfloat16)):
    i = wp.tid()
    out[i] = x[i] * x[i] * s


@wp.kernel
def scale_f32(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * s


@wp.kernel
def scale_any(x: wp.array(dtype=typing.Any), s: typing.Any, out: wp.array(dtype=typing.Any)):
    i = wp.tid()
    out[i] = x[i] * x[i] * s


SCALE = interop.op(scale_bf16)
SCALE_F32 = interop.op(scale_f32)
SCALE_ANY = interop.op(scale_any)
X = np.array([0.5, -1.25, 2.0, 0.75, -0.375], np.float32)  # exact in bfloat16
S = 1.5
W = np.array([1.0, 0.5, -2.0, 1.5, 0.25])  # loss = sum(W * out)


def _available(*names):
    return [
        pytest.param(n, id=n, marks=[] if n in ("numpy", "warp") or importlib.util.find_spec(n) else [pytest.mark.skip])
        for n in names
    ]


def make(fw: str, values: np.ndarray, dtype: str = "bfloat16"):
    """``values`` as a ``fw`` array of ``dtype`` ("bfloat16" or "float32")."""
    v = values.astype(np.float32)
    if fw == "numpy":
        return v.astype(BF16) if dtype == "bfloat16" else v
    if fw == "warp":
        return (
            wp.array(v.astype(BF16), dtype=wp.bfloat16, device="cpu")
            if dtype == "bfloat16"
            else wp.array(v, dtype=float, device="cpu")
        )
    if fw == "torch":
        import torch

        return torch.from_numpy(v).to(getattr(torch, dtype))
    if fw == "jax":
        import jax.numpy as jnp

        return jnp.asarray(v, getattr(jnp, dtype), device=jax_device("cpu"))
    if fw == "paddle":
        import paddle

        return paddle.to_tensor(v, place=paddle.CPUPlace()).astype(dtype)
    raise AssertionError(fw)


def as_f64(y) -> np.ndarray:
    if isinstance(y, np.ndarray):
        return y.astype(np.float64)
    if isinstance(y, wp.array):
        return y.numpy().astype(np.float64)
    mod = type(y).__module__.split(".")[0]
    if mod == "torch":
        return y.detach().double().numpy()
    if mod == "paddle":
        return y.astype("float64").numpy()
    return np.asarray(y, np.float64)


# ---- values, every framework ----------------------------------------------------------------------
@pytest.mark.parametrize("fw", _available("numpy", "warp", "torch", "jax", "paddle"))
def test_values_concrete_and_generic(fw):
    ref = X.astype(np.float64) ** 2 * S
    for op in (SCALE, SCALE_ANY):
        out = op(make(fw, X), S)
        assert "bfloat16" in str(out.dtype)
        np.testing.assert_allclose(as_f64(out), ref, **BF16_VALUE_TOL)
    # a NumPy bfloat16 scalar is a number too
    np.testing.assert_allclose(as_f64(SCALE(make(fw, X), ml_dtypes.bfloat16(S))), ref, **BF16_VALUE_TOL)


# ---- refusals: arrays are never cast ----------------------------------------------------------------
@pytest.mark.parametrize("fw", _available("numpy", "warp", "torch", "jax", "paddle"))
def test_dtype_mismatch_is_refused_naming_op_and_parameter(fw):
    with pytest.raises(
        TypeError,
        match=r"op 'scale_f32', parameter 'x': expected a 1-d array of float32 \(dtype float32\), got an array of "
        r"shape \(5,\) and dtype bfloat16; arrays are never cast",
    ):
        SCALE_F32(make(fw, X), S)
    with pytest.raises(
        TypeError,
        match=r"op 'scale_bf16', parameter 'x': expected a 1-d array of bfloat16 \(dtype bfloat16\), got an array of "
        r"shape \(5,\) and dtype float32; arrays are never cast",
    ):
        SCALE(make(fw, X, "float32"), S)


def test_cupy_output_refused_without_cupy_bfloat16():
    """CuPy has no bfloat16 dtype: a bfloat16 output cannot be a CuPy array (checked before CuPy is needed)."""
    from adapters import cupy as acupy
    from interop._plan import ArraySpec

    with pytest.raises(TypeError, match=r"an output of dtype bfloat16 cannot be a CuPy array"):
        acupy.FRAMEWORK.alloc(ArraySpec((3,), BF16), "cuda:0", True)


# ---- gradients, including the scalar's -------------------------------------------------------------
def _expected_grads():
    x = X.astype(np.float64)
    return 2 * x * S * W, float(np.sum(W * x * x))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compile"])
def test_torch_array_and_scalar_gradients(compiled):
    torch = pytest.importorskip("torch")
    x = make("torch", X).requires_grad_(True)
    s = torch.tensor(S, dtype=torch.bfloat16, requires_grad=True, device="cpu")
    w = torch.from_numpy(W).to(torch.bfloat16)

    def loss(x, s):
        return (w * SCALE(x, s)).sum()

    if compiled:
        torch._dynamo.reset()
        loss = torch.compile(loss, fullgraph=True)
    gx, gs = torch.autograd.grad(loss(x, s), (x, s))
    assert gx.dtype == gs.dtype == torch.bfloat16
    ex, es = _expected_grads()
    np.testing.assert_allclose(as_f64(gx), ex, **BF16_GRAD_TOL)
    np.testing.assert_allclose(float(gs), es, **BF16_GRAD_TOL)


@pytest.mark.parametrize("jit", [False, True], ids=["grad", "jit-grad"])
def test_jax_array_and_scalar_gradients_and_vmap(jit):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    x = make("jax", X)
    w = jnp.asarray(W, jnp.bfloat16, device=jax_device("cpu"))
    g = jax.grad(lambda x, s: jnp.sum(w * SCALE(x, s)), argnums=(0, 1))
    g = jax.jit(g) if jit else g
    gx, gs = g(x, jnp.asarray(S, jnp.bfloat16, device=jax_device("cpu")))
    assert gx.dtype == gs.dtype == jnp.bfloat16
    ex, es = _expected_grads()
    np.testing.assert_allclose(as_f64(gx), ex, **BF16_GRAD_TOL)
    np.testing.assert_allclose(float(gs), es, **BF16_GRAD_TOL)
    # a traced Python float for the bfloat16 scalar (weakly typed): takes the parameter's type
    out = jax.jit(lambda x, s: SCALE(x, s))(x, S)
    assert out.dtype == jnp.bfloat16
    xb = jnp.stack([x, 2 * x])
    out = jax.vmap(lambda x: SCALE_ANY(x, S))(xb)
    np.testing.assert_allclose(as_f64(out), as_f64(xb) ** 2 * S, **BF16_VALUE_TOL)


def test_paddle_array_and_scalar_gradients():
    paddle = pytest.importorskip("paddle")
    x = make("paddle", X)
    x.stop_gradient = False
    s = paddle.to_tensor(S, place=paddle.CPUPlace()).astype("bfloat16")
    s.stop_gradient = False
    loss = (paddle.to_tensor(W, place=paddle.CPUPlace()).astype("bfloat16") * SCALE(x, s)).sum()
    loss.backward()
    assert x.grad.dtype == s.grad.dtype == paddle.bfloat16
    ex, es = _expected_grads()
    np.testing.assert_allclose(as_f64(x.grad), ex, **BF16_GRAD_TOL)
    np.testing.assert_allclose(float(as_f64(s.grad)), es, **BF16_GRAD_TOL)


def test_warp_tape_gradient():
    x = wp.array(X.astype(BF16), dtype=wp.bfloat16, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        out = SCALE(x, S)
    out.grad = wp.array(W.astype(BF16), dtype=wp.bfloat16, device="cpu")
    tape.backward()
    np.testing.assert_allclose(as_f64(x.grad), _expected_grads()[0], **BF16_GRAD_TOL)
