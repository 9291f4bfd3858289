"""Python-function ops whose function allocates temporaries without ``requires_grad`` (issue 50):
the gradient through them is not dropped (``interop._tape_grads``), in torch, JAX and Paddle, checked
against finite differences of the op's own forward and the closed form; a temporary that cannot be
given a gradient cleanly (a view of another) is refused naming the kernel and the parameter."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from _devices import jax_device

import interop

F64 = wp.float64


@wp.kernel
def _twice_square(a: wp.array(dtype=F64), b: wp.array(dtype=F64)):
    i = wp.tid()
    b[i] = F64(2.0) * a[i] * a[i]


@wp.kernel
def _scale3(a: wp.array(dtype=F64), b: wp.array(dtype=F64)):
    i = wp.tid()
    b[i] = F64(3.0) * a[i]


def issue_fn(a: wp.array(dtype=F64), out: wp.array(dtype=F64)):
    """The issue's ``a -> tmp -> out``: d out / d a = 4 a (4.0 at a = 1)."""
    tmp = wp.zeros(a.shape[0], dtype=F64, device=a.device)  # no requires_grad
    wp.launch(_twice_square, dim=a.shape[0], inputs=[a], outputs=[tmp], device=a.device)
    wp.launch(_scale3, dim=a.shape[0], inputs=[tmp], outputs=[out], device=a.device)


def chained_fn(a: wp.array(dtype=F64), y: wp.array(dtype=F64), z: wp.array(dtype=F64)):
    """Two gradless temporaries and an output read by a later launch: y = 2 a^2, z = 3 * 3 * y."""
    t1 = wp.empty(a.shape[0], dtype=F64, device=a.device)
    t2 = wp.zeros_like(t1)
    wp.launch(_twice_square, dim=a.shape[0], inputs=[a], outputs=[y], device=a.device)
    wp.launch(_scale3, dim=a.shape[0], inputs=[y], outputs=[t1], device=a.device)
    wp.launch(_scale3, dim=a.shape[0], inputs=[t1], outputs=[t2], device=a.device)
    wp.copy(z, t2)  # not a launch on the tape: the last launch must write z itself
    wp.launch(_scale3, dim=a.shape[0], inputs=[t1], outputs=[z], device=a.device)


def view_fn(a: wp.array(dtype=F64), out: wp.array(dtype=F64)):
    """A gradless temporary and a view of it both launched with: refused (their gradients would not alias)."""
    n = a.shape[0]
    buf = wp.zeros(2 * n, dtype=F64, device=a.device)
    wp.launch(_twice_square, dim=n, inputs=[a], outputs=[buf[:n]], device=a.device)
    wp.launch(_scale3, dim=n, inputs=[buf], outputs=[out], device=a.device)


ISSUE = interop.op(issue_fn)
CHAINED = interop.op(chained_fn, outputs=2)
VIEW = interop.op(view_fn)
A = np.array([1.0, 0.5, -2.0])


def _fd(op, a, w, k=None, eps=1e-6):
    """Finite differences of ``sum(w * op(a)[k])`` by the op's forward (NumPy)."""
    g = np.zeros_like(a)
    for i in range(a.size):
        hi, lo = a.copy(), a.copy()
        hi[i] += eps
        lo[i] -= eps
        fh, fl = op(hi), op(lo)
        fh, fl = (fh, fl) if k is None else (fh[k], fl[k])
        g[i] = (np.sum(w * fh) - np.sum(w * fl)) / (2 * eps)
    return g


def _grad(fw: str, op, a: np.ndarray, k=None) -> np.ndarray:
    """d sum(op(a)[k]) / d a through framework ``fw``'s autograd, on the CPU."""
    if fw == "torch":
        torch = pytest.importorskip("torch")
        x = torch.tensor(a, dtype=torch.float64, device="cpu", requires_grad=True)
        out = op(x)
        (g,) = torch.autograd.grad((out if k is None else out[k]).sum(), [x])
        return g.numpy()
    if fw in ("jax", "jax_jit"):
        jax = pytest.importorskip("jax")
        with jax.enable_x64(True):
            x = jax.device_put(np.asarray(a, np.float64), jax_device("cpu"))
            grad = jax.grad(lambda v: (op(v) if k is None else op(v)[k]).sum())
            return np.asarray((jax.jit(grad) if fw == "jax_jit" else grad)(x))
    paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")
    x = paddle.to_tensor(a, dtype="float64", place=paddle.CPUPlace(), stop_gradient=False)
    out = op(x)
    (g,) = paddle.grad([(out if k is None else out[k]).sum()], [x])
    return g.numpy()


@pytest.mark.parametrize("fw", ["torch", "jax", "jax_jit", "paddle"])
def test_gradless_temporary_carries_the_gradient(fw):
    # repeated calls: a signature's later calls take the eager fast paths, whose backward runs the
    # tape the forward kept (no replay): the temporaries get their gradients there too
    for _ in range(3):
        g = _grad(fw, ISSUE, A)
        np.testing.assert_allclose(g, 12.0 * A, rtol=1e-12)  # d(3 * 2 a^2)/da = 12 a
    np.testing.assert_allclose(g, _fd(ISSUE, A, np.ones(3)), rtol=1e-6)
    # the issue's own numbers: a -> tmp = 2 a^2 -> out, at a = 1, without the x3: 4.0 (12.0 with it)
    np.testing.assert_allclose(_grad(fw, ISSUE, np.ones(1)), [12.0], rtol=1e-12)


@pytest.mark.parametrize("fw", ["torch", "jax", "paddle"])
def test_gradless_chain_and_an_output_read_later(fw):
    """Only z's gradient asked: the path through y (an output the function reads again) and two
    gradless temporaries is kept: z = 9 * 2 a^2, dz/da = 36 a."""
    g = _grad(fw, CHAINED, A, k=1)
    np.testing.assert_allclose(g, 36.0 * A, rtol=1e-12)
    np.testing.assert_allclose(g, _fd(CHAINED, A, np.ones(3), k=1), rtol=1e-6)


def test_view_of_a_gradless_temporary_is_refused():
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(VIEW(A), 6.0 * A**2 * 1.0, rtol=1e-12)  # the forward is fine
    x = torch.tensor(A, dtype=torch.float64, device="cpu", requires_grad=True)
    with pytest.raises(interop.UnsupportedError) as ei:
        VIEW(x).sum().backward()
    msg = str(ei.value)
    assert "op 'view_fn'" in msg and "'_twice_square'" in msg and "passes 'b'" in msg
    assert "overlaps another array" in msg and "requires_grad=True" in msg
