"""Outputs in the middle of the signature with a hand-written backward (``backward=``): the
backward's parameters follow the forward's kernel order (call parameters, one adjoint per
returned array, one gradient per differentiable array input) in every framework."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from _devices import jax_device

import interop


@wp.kernel
def mid_fwd(x: wp.array[float], out: wp.array[float], y: wp.array[float], s: float):
    i = wp.tid()
    out[i] = x[i] * x[i] * y[i] * s


@wp.kernel
def mid_bwd(
    x: wp.array[float],
    y: wp.array[float],
    s: float,
    adj_out: wp.array[float],
    grad_x: wp.array[float],
    grad_y: wp.array[float],
):
    i = wp.tid()
    grad_x[i] = 2.0 * x[i] * y[i] * s * adj_out[i]
    grad_y[i] = x[i] * x[i] * s * adj_out[i]


OP = interop.op(mid_fwd, outputs=["out"], backward=mid_bwd)
X = np.linspace(-1.0, 1.0, 6).astype(np.float32)
Y = np.linspace(0.5, 2.0, 6).astype(np.float32)
W = np.linspace(1.0, 2.0, 6).astype(np.float32)  # loss = sum(w * out)
S = 1.5


def _expected():
    return X * X * Y * S, 2 * X * Y * S * W, X * X * S * W


def test_description_follows_kernel_order():
    d = OP.description
    assert [p.name for p in d.call_params] == ["x", "y", "s"]
    assert [p.name for p in d.backward.params] == ["x", "y", "s", "adj_out", "grad_x", "grad_y"]
    assert [p.name for p in d.backward.output_params] == ["grad_x", "grad_y"]


def test_numpy_values():
    np.testing.assert_allclose(OP(X, Y, S), _expected()[0], rtol=1e-6)


def test_torch():
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(X.copy()).requires_grad_(True)
    y = torch.from_numpy(Y.copy()).requires_grad_(True)
    out = OP(x, y, S)
    (out * torch.from_numpy(W)).sum().backward()
    ref, gx, gy = _expected()
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-5)
    np.testing.assert_allclose(y.grad.numpy(), gy, rtol=1e-5)


def test_jax():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def loss(x, y):
        return jnp.sum(jnp.asarray(W, device=jax_device("cpu")) * OP(x, y, S))

    gx, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(
        jnp.asarray(X, device=jax_device("cpu")), jnp.asarray(Y, device=jax_device("cpu"))
    )
    ref, ex, ey = _expected()
    np.testing.assert_allclose(
        np.asarray(OP(jnp.asarray(X, device=jax_device("cpu")), jnp.asarray(Y, device=jax_device("cpu")), S)),
        ref,
        rtol=1e-6,
    )
    np.testing.assert_allclose(np.asarray(gx), ex, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(gy), ey, rtol=1e-5)


def test_paddle():
    paddle = pytest.importorskip("paddle")
    x = paddle.to_tensor(X.copy(), stop_gradient=False, place=paddle.CPUPlace())
    y = paddle.to_tensor(Y.copy(), stop_gradient=False, place=paddle.CPUPlace())
    out = OP(x, y, S)
    (out * paddle.to_tensor(W, place=paddle.CPUPlace())).sum().backward()
    ref, gx, gy = _expected()
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-5)
    np.testing.assert_allclose(y.grad.numpy(), gy, rtol=1e-5)
