"""``paddle.jit.to_static``: under SOT (``full_graph=False``) the op runs eagerly between compiled
segments, gradients included; under ``full_graph=True`` it raises an error naming the op."""

import numpy as np
import pytest
import warp as wp

paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")

import interop  # noqa: E402


@wp.kernel
def sin_scale(x: wp.array(dtype=float), y: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = wp.sin(x[i]) * s + y[i] * y[i]


OP = interop.op(sin_scale, name="paddle_static::sin_scale")


def model(x, y):
    z = OP(x * 2.0, y, 1.5)
    return (z * z).sum()


def _inputs():
    x = paddle.to_tensor(np.linspace(-1, 1, 7).astype(np.float32))
    y = paddle.to_tensor(np.linspace(0, 1, 7).astype(np.float32))
    x.stop_gradient = y.stop_gradient = False
    return x, y


def _expected(x, y):
    x, y = x.numpy().astype(np.float64), y.numpy().astype(np.float64)
    z = np.sin(2 * x) * 1.5 + y * y
    return np.sum(z * z), 2 * z * np.cos(2 * x) * 1.5 * 2, 2 * z * 2 * y


def test_to_static_sot_runs_the_op_with_gradients():
    x, y = _inputs()
    loss_ref, gx, gy = _expected(x, y)
    compiled = paddle.jit.to_static(model, full_graph=False)
    for _ in range(3):  # first call translates, the next ones reuse the translation
        loss = compiled(x, y)
        loss.backward()
        np.testing.assert_allclose(loss.item(), loss_ref, rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(y.grad.numpy(), gy, rtol=1e-4, atol=1e-5)
        x.clear_gradient()
        y.clear_gradient()


def test_to_static_full_graph_is_refused_with_the_op_named():
    x, y = _inputs()
    compiled = paddle.jit.to_static(model, full_graph=True)
    with pytest.raises(TypeError, match=r"op 'paddle_static::sin_scale', parameter 'x': got a symbolic Paddle value"):
        compiled(x, y)
